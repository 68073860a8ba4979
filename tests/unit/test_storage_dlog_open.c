/* Unit tests for dlog_open.c, the recovery a log runs at open, on segments
 * laid out by hand in the in-memory file system: a new directory, a torn
 * last record cut, a headerless newest segment dropped as an unfinished
 * roll, a missing index rebuilt, damage followed by valid records refused
 * (or cut with repair, and reported), a gap between segments, bad headers
 * and bad configurations. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fx_test.h"

#define DIR_ "/d"
#define SEG0 DIR_ "/00000000000000000000.log"
#define SEG1 DIR_ "/00000000000000000001.log"
#define IDX0 DIR_ "/00000000000000000000.index"

typedef struct fixture {
    fx_memio *m;
    fx_sio *io;
    fx_dlog_config cfg;
    fx_dlog *log;
    fx_dlog_recovery rep;
} fixture;

static void init(fixture *f)
{
    *f = (fixture){0};
    assert_int_equal(fx_memio_new(&f->m), 0);
    f->io = fx_memio_sio(f->m);
    fx_dlog_config_default(&f->cfg);
    f->cfg.segment_bytes = 1 << 20;
    f->cfg.index_spacing_bytes = 64;
    f->cfg.preallocate = false;
    f->cfg.io = f->io;
    f->cfg.label = "t/ns/s/0";
    assert_int_equal(fx_sio_mkdirs(f->io, DIR_), 0);
}

static int open_log(fixture *f)
{
    if (f->log != NULL)
        fx_dlog_close(f->log, false);
    f->log = NULL;
    memset(&f->rep, 0, sizeof(f->rep));
    return fx_dlog_open(&f->log, DIR_, &f->cfg, 1000, &f->rep);
}

static void done(fixture *f)
{
    fx_dlog_close(f->log, false);
    fx_memio_free(f->m);
}

/* A segment laid out by hand: header (base, no durable point), then
 * records with 20-byte payloads. */
typedef struct seg {
    uint8_t b[4096];
    size_t len;
    size_t pos[32];
    uint64_t next;
} seg;

static void seg_start(seg *s, uint64_t base)
{
    memset(s, 0, sizeof(*s));
    fx_logfmt_seg_header_encode(s->b, &(fx_seg_header){.base_offset = base, .created_us = 1});
    s->len = FX_SEG_HEADER_LEN;
    s->next = base;
}

static void seg_add(seg *s, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        uint8_t payload[20];
        memset(payload, (int)('a' + s->next % 26), sizeof(payload));
        s->pos[s->next % 32] = s->len;
        fx_logfmt_rec_header_encode(s->b + s->len, s->next, 100 + s->next, payload,
                                    sizeof(payload));
        memcpy(s->b + s->len + FX_REC_HEADER_LEN, payload, sizeof(payload));
        s->len += FX_REC_HEADER_LEN + sizeof(payload);
        s->next++;
    }
}

#define RECLEN (FX_REC_HEADER_LEN + 20)

static void lay(fixture *f, const char *path, const void *b, size_t len)
{
    int fd;
    assert_int_equal(f->io->ops->open(f->io, path, FX_SIO_CREATE, &fd), 0);
    if (len > 0)
        assert_int_equal(f->io->ops->pwrite(f->io, fd, b, len, 0), 0);
    f->io->ops->close(f->io, fd);
}

static uint64_t flen(fixture *f, const char *path)
{
    uint64_t n = 0;
    assert_int_equal(fx_memio_file_len(f->m, path, &n), 0);
    return n;
}

static bool exists(fixture *f, const char *path)
{
    bool is_dir;
    return f->io->ops->stat(f->io, path, &is_dir) == 0;
}

static void test_new_directory_gets_a_first_segment_and_a_clean_report(void **state)
{
    fixture f;
    init(&f);
    f.cfg.io = f.io;
    assert_int_equal(fx_dlog_open(&f.log, "/fresh/log", &f.cfg, 5, &f.rep), 0);
    assert_int_equal(fx_dlog_first_offset(f.log), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(f.rep.truncated_bytes, 0);
    assert_int_equal(f.rep.index_rebuilds, 0);
    assert_int_equal(f.rep.abandoned_segments, 0);
    assert_false(f.rep.repaired);
    assert_string_equal(f.rep.message, "");
    assert_true(exists(&f, "/fresh/log/00000000000000000000.log"));
    done(&f);
}

static void test_torn_last_record_is_cut_and_counted(void **state)
{
    fixture f;
    init(&f);
    seg s;
    seg_start(&s, 40);
    seg_add(&s, 4);
    /* Half of the last record reached the disk. */
    size_t keep = s.len - RECLEN / 2;
    lay(&f, SEG0, s.b, keep);
    assert_int_equal(open_log(&f), 0);
    assert_int_equal(f.rep.truncated_bytes, RECLEN - RECLEN / 2);
    assert_false(f.rep.repaired);
    assert_int_equal(fx_dlog_first_offset(f.log), 40);
    assert_int_equal(fx_dlog_next_offset(f.log), 43);
    assert_int_equal(flen(&f, SEG0), s.len - RECLEN);
    /* The next append takes the cut record's offset. */
    uint64_t first;
    fx_dlog_iov iov = {"z", 1};
    assert_int_equal(fx_dlog_append(f.log, &iov, 1, 1, &first), 0);
    assert_int_equal(first, 43);
    done(&f);
}

static void test_headerless_newest_segment_is_an_abandoned_roll(void **state)
{
    fixture f;
    init(&f);
    seg s;
    seg_start(&s, 0);
    seg_add(&s, 3);
    lay(&f, SEG0, s.b, s.len);
    lay(&f, SEG1, NULL, 0); /* created, header never written */
    assert_int_equal(open_log(&f), 0);
    assert_int_equal(f.rep.abandoned_segments, 1);
    assert_false(exists(&f, SEG1));
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(fx_dlog_next_offset(f.log), 3);
    done(&f);
}

static void test_sealed_segment_without_index_gets_it_rebuilt(void **state)
{
    fixture f;
    init(&f);
    seg a, b;
    seg_start(&a, 0);
    seg_add(&a, 6);
    seg_start(&b, 6);
    seg_add(&b, 2);
    lay(&f, SEG0, a.b, a.len);
    lay(&f, SEG1, b.b, b.len);
    assert_false(exists(&f, IDX0));
    assert_int_equal(open_log(&f), 0);
    assert_true(f.rep.index_rebuilds >= 1);
    assert_true(exists(&f, IDX0));
    assert_true(flen(&f, IDX0) > FX_IDX_HEADER_LEN);
    assert_int_equal(fx_dlog_next_offset(f.log), 8);
    /* A second open finds the index usable. */
    assert_int_equal(open_log(&f), 0);
    assert_int_equal(f.rep.index_rebuilds, 0);
    done(&f);
}

static void test_damage_before_valid_records_is_refused_or_repaired(void **state)
{
    fixture f;
    init(&f);
    seg s;
    seg_start(&s, 10);
    seg_add(&s, 5);
    /* A flipped payload byte in record 12, with records 13 and 14 after it:
     * not a torn tail. */
    s.b[s.pos[12] + FX_REC_HEADER_LEN + 3] ^= 0x40;
    lay(&f, SEG0, s.b, s.len);
    assert_int_equal(open_log(&f), FX_ESTORAGE_CORRUPT);
    assert_null(f.log);
    assert_non_null(strstr(f.rep.message, "stream=t/ns/s/0"));
    assert_non_null(strstr(f.rep.message, "file=00000000000000000000.log"));
    char at[64];
    snprintf(at, sizeof(at), "position=%zu", s.pos[12]);
    assert_non_null(strstr(f.rep.message, at));
    assert_int_equal(flen(&f, SEG0), s.len); /* nothing was cut */
    f.cfg.repair = true;
    assert_int_equal(open_log(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(f.rep.dropped_from, 12);
    assert_int_equal(f.rep.dropped_bytes, 3 * RECLEN);
    assert_int_equal(f.rep.dropped_segments, 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 12);
    done(&f);
}

static void test_gap_between_segments_is_out_of_order(void **state)
{
    fixture f;
    init(&f);
    f.cfg.verify_all_on_open = true;
    seg a, b;
    seg_start(&a, 0);
    seg_add(&a, 3);
    seg_start(&b, 5); /* offsets 3 and 4 are missing */
    seg_add(&b, 2);
    lay(&f, SEG0, a.b, a.len);
    lay(&f, SEG1, b.b, b.len);
    assert_int_equal(open_log(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "file=00000000000000000001.log"));
    f.cfg.repair = true;
    assert_int_equal(open_log(&f), 0);
    assert_true(f.rep.repaired);
    assert_int_equal(f.rep.dropped_from, 3);
    assert_int_equal(fx_dlog_next_offset(f.log), 3);
    assert_false(exists(&f, SEG1));
    done(&f);
}

static void test_sealed_segment_with_a_bad_magic_is_refused(void **state)
{
    fixture f;
    init(&f);
    seg a, b;
    seg_start(&a, 0);
    seg_add(&a, 2);
    a.b[0] ^= 0xff;
    seg_start(&b, 2);
    seg_add(&b, 1);
    lay(&f, SEG0, a.b, a.len);
    lay(&f, SEG1, b.b, b.len);
    assert_int_equal(open_log(&f), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(f.rep.message, "file=00000000000000000000.log"));
    done(&f);
}

static void test_bad_configuration_is_refused_before_any_file(void **state)
{
    fixture f;
    init(&f);
    char err[128] = "";
    f.cfg.segment_bytes = FX_SEG_MIN_BYTES - 1;
    assert_int_equal(fx_dlog_config_check(&f.cfg, err, sizeof(err)), FX_ECONFIG);
    assert_true(strlen(err) > 0);
    assert_int_equal(fx_dlog_open(&f.log, "/other", &f.cfg, 1, &f.rep), FX_ECONFIG);
    assert_false(exists(&f, "/other"));
    f.cfg.segment_bytes = 1 << 20;
    f.cfg.index_spacing_bytes = 0;
    assert_int_equal(fx_dlog_config_check(&f.cfg, err, sizeof(err)), FX_ECONFIG);
    done(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_new_directory_gets_a_first_segment_and_a_clean_report),
    cmocka_unit_test(test_torn_last_record_is_cut_and_counted),
    cmocka_unit_test(test_headerless_newest_segment_is_an_abandoned_roll),
    cmocka_unit_test(test_sealed_segment_without_index_gets_it_rebuilt),
    cmocka_unit_test(test_damage_before_valid_records_is_refused_or_repaired),
    cmocka_unit_test(test_gap_between_segments_is_out_of_order),
    cmocka_unit_test(test_sealed_segment_with_a_bad_magic_is_refused),
    cmocka_unit_test(test_bad_configuration_is_refused_before_any_file),
};

FX_TEST_MAIN(tests)
