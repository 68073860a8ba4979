/* fxb_logcur (broker/logcur.h): the read-only cursor of the catch-up replay
 * and the group pages finds and steps over every record of a log, format
 * v3 producer marks included (a record that opens a batch carries a 20-byte
 * tag: stepping by header + length alone would land inside it).
 * fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_base */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "broker/logcur.h"
#include "felix/error.h"
#include "fx_test.h"
#include "storage/dlog.h"
#include "storage/memio.h"

#define DIR_ "/log"

/* Appends |n| records "r<offset>" at |first|, marked as batch |seq| of
 * producer 7 when |seq| is not UINT64_MAX. */
static void append(fx_dlog *log, uint64_t first, size_t n, uint64_t seq)
{
    char bufs[8][16];
    fx_dlog_iov iov[8];
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(bufs[i], sizeof(bufs[i]), "r%llu", (unsigned long long)(first + i));
        iov[i] = (fx_dlog_iov){.data = bufs[i], .len = (uint32_t)len};
    }
    uint64_t got = 0;
    if (seq == UINT64_MAX) {
        assert_int_equal(fx_dlog_append(log, iov, n, 1000 + first, &got), 0);
    } else {
        fx_dlog_mark m = {.producer_id = 7, .sequence = seq, .count = (uint32_t)n};
        assert_int_equal(fx_dlog_append_marked(log, iov, n, 1000 + first, &m, &got), 0);
    }
    assert_int_equal(got, first);
}

/* Reads every record from |from| to |end| with the cursor, checking each
 * offset and payload. */
static void walk(fx_sio *io, uint64_t from, uint64_t end)
{
    fxb_logcur c;
    fxb_logcur_init(&c, io, DIR_);
    uint64_t first = 0;
    assert_int_equal(fxb_logcur_seek(&c, from, &first), 0);
    for (uint64_t off = from; off < end; off++) {
        fx_rec_header h;
        fx_rec_status st;
        uint8_t buf[16];
        if (c.pos >= c.win.file_len)
            assert_int_equal(fxb_logcur_advance(&c, off), 0);
        assert_int_equal(fx_segwin_record(&c.win, c.pos, off, true, true, buf, &h, &st), 0);
        assert_int_equal(st, FX_REC_OK);
        char want[16];
        int len = snprintf(want, sizeof(want), "r%llu", (unsigned long long)off);
        assert_int_equal(h.len, (uint32_t)len);
        assert_memory_equal(buf, want, (size_t)len);
        c.pos += fx_rec_step(&h);
    }
    fxb_logcur_close(&c);
}

static void test_the_cursor_steps_over_marked_records_and_their_tags(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.segment_bytes = 300; /* a few records a segment: the cursor crosses them */
    cfg.index_spacing_bytes = 64;
    cfg.io = fx_memio_sio(m);
    cfg.label = "t/ns/s/0";
    fx_dlog *log = NULL;
    fx_dlog_recovery rep;
    assert_int_equal(fx_dlog_open(&log, DIR_, &cfg, 1000, &rep), 0);
    append(log, 0, 3, UINT64_MAX);    /* v2 segment */
    append(log, 3, 4, 0);             /* rolls to v3: bit 31 + tag, then bit 30 */
    append(log, 7, 1, 1);             /* a one-record batch */
    append(log, 8, 5, UINT64_MAX);    /* unmarked records in v3 segments */
    append(log, 13, 3, 2);
    assert_int_equal(fx_dlog_sync(log, NULL), 0);
    for (uint64_t from = 0; from < 16; from++)
        walk(fx_memio_sio(m), from, 16);
    fx_dlog_close(log, true);
    fx_memio_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_cursor_steps_over_marked_records_and_their_tags),
};

FX_TEST_MAIN(tests)
