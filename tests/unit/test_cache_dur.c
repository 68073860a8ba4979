/* Unit tests of the durable caches' record (src/broker/cache_dur.c): the
 * original's cache record payload, byte for byte (little-endian), and the
 * records the decoder refuses. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_base */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/cache_compact.h"
#include "broker/cache_dur.h"
#include "storage/dlog.h"
#include "storage/memio.h"
#include "fx_test.h"

static void test_the_record_is_the_originals_version_2_payload_little_endian(void **state)
{
    (void)state;
    uint8_t out[64];
    size_t n = fxb_dcache_rec_encode(out, FXB_DCACHE_OP_PUT, 0x0102030405060708ull,
                                     0x1112131415161718ull, "ky", 2, "val", 3);
    static const uint8_t want[] = {2,    0,    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02,
                                   0x01, 2,    0,    0,    0,    0x18, 0x17, 0x16, 0x15,
                                   0x14, 0x13, 0x12, 0x11, 'k',  'y',  'v',  'a',  'l'};
    assert_int_equal(n, sizeof(want));
    assert_memory_equal(out, want, sizeof(want));
    fxb_dcache_rec r;
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), 0);
    assert_int_equal(r.format, 2);
    assert_int_equal(r.op, FXB_DCACHE_OP_PUT);
    assert_int_equal(r.expires_ms, 0x0102030405060708ull);
    assert_int_equal(r.version, 0x1112131415161718ull);
    assert_int_equal(r.klen, 2);
    assert_memory_equal(r.key, "ky", 2);
    assert_int_equal(r.vlen, 3);
    assert_memory_equal(r.value, "val", 3);
    out[0] = 3; /* no such version */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    out[0] = 2;
    out[1] = 2; /* no such op */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    out[1] = 1;
    out[10] = 6; /* key_len past the end */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    assert_int_equal(fxb_dcache_rec_decode(out, 21, &r), -EINVAL); /* shorter than a v2 header */
}

static void test_a_version_1_record_is_still_read_with_no_version(void **state)
{
    (void)state;
    static const uint8_t v1[] = {1, 0, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                 2, 0, 0,    0,    'k',  'y',  'v',  'a',  'l'};
    fxb_dcache_rec r;
    assert_int_equal(fxb_dcache_rec_decode(v1, sizeof(v1), &r), 0);
    assert_int_equal(r.format, 1);
    assert_int_equal(r.version, 0);
    assert_int_equal(r.expires_ms, 0x0102030405060708ull);
    assert_memory_equal(r.key, "ky", 2);
    assert_int_equal(r.vlen, 3);
    assert_memory_equal(r.value, "val", 3);
    assert_int_equal(fxb_dcache_rec_decode(v1, 13, &r), -EINVAL);
}

/* ---- compaction ------------------------------------------------------------------ */

#define DIR_ "/c"
#define NKEYS 40
#define WALL_MS 1000000000000ull /* "now" on the wall clock; expiries below it are past */

/* What a log reads back to, as fxb_dcache_recover applies it. */
typedef struct model {
    bool present[NKEYS];
    char value[NKEYS][80];
    uint64_t version[NKEYS];
    uint64_t max_version;
    uint64_t records;
} model;

typedef struct cfix {
    fx_memio *m;
    fx_dlog_config cfg;
    fx_dlog *log;
    fxb_ccomp *c;
    uint64_t ver; /* the cache's last version */
} cfix;

static void c_open(cfix *f)
{
    f->cfg.io = fx_memio_sio(f->m);
    assert_int_equal(fx_dlog_open(&f->log, DIR_, &f->cfg, 1, NULL), 0);
}

static void c_new(cfix *f)
{
    *f = (cfix){0};
    assert_int_equal(fx_memio_new(&f->m), 0);
    fx_dlog_config_default(&f->cfg);
    f->cfg.segment_bytes = 2048;
    f->cfg.index_spacing_bytes = 256;
    f->cfg.preallocate = false;
    f->cfg.label = "t/ns/c";
    c_open(f);
    assert_int_equal(fxb_ccomp_new(&f->c), 0);
}

static void c_done(cfix *f)
{
    fxb_ccomp_free(f->c);
    (void)fx_dlog_close(f->log, false);
    fx_memio_free(f->m);
}

static void c_append(cfix *f, uint8_t op, int key, int round, uint64_t expires_ms)
{
    char k[16], v[80];
    snprintf(k, sizeof(k), "k%03d", key);
    int vlen = snprintf(v, sizeof(v), "value-%03d-%03d-padded-to-some-length", key, round);
    uint64_t version = op == FXB_DCACHE_OP_PUT ? ++f->ver : f->ver;
    uint8_t rec[128];
    size_t n = fxb_dcache_rec_encode(rec, op, expires_ms, version, k, 4, v,
                                     op == FXB_DCACHE_OP_PUT ? (size_t)vlen : 0);
    fx_dlog_iov iov = {rec, (uint32_t)n};
    uint64_t off = 0;
    assert_int_equal(fx_dlog_append(f->log, &iov, 1, 1, &off), 0);
    assert_int_equal(fxb_ccomp_note(f->c, off, rec, n), 0);
}

/* Overwrites, deletes, expired puts; the last record a delete carrying the
 * largest version. */
static void c_fill(cfix *f, int rounds)
{
    for (int round = 0; round < rounds; round++)
        for (int key = 0; key < NKEYS; key++) {
            if ((key + round) % 7 == 0)
                c_append(f, FXB_DCACHE_OP_DELETE, key, round, 0);
            else
                c_append(f, FXB_DCACHE_OP_PUT, key, round,
                         key >= 30 && key < 35 && round == rounds - 1 ? 1000 : 0);
        }
    for (int key = 35; key < NKEYS; key++)
        c_append(f, FXB_DCACHE_OP_DELETE, key, rounds, 0);
    assert_int_equal(fx_dlog_sync(f->log, NULL), 0);
}

static void read_back(fx_dlog *log, model *m)
{
    *m = (model){0};
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    for (uint64_t from = fx_dlog_first_offset(log);;) {
        assert_int_equal(fx_dlog_read(log, from, 1 << 16, 256, &pg), 0);
        if (pg.n == 0)
            break;
        for (size_t i = 0; i < pg.n; i++) {
            fxb_dcache_rec r;
            assert_int_equal(fxb_dcache_rec_decode(pg.recs[i].data, pg.recs[i].len, &r), 0);
            char kb[8] = {0};
            memcpy(kb, r.key, r.klen < 7 ? r.klen : 7);
            int key = atoi(kb + 1);
            assert_true(key >= 0 && key < NKEYS);
            if (r.version > m->max_version)
                m->max_version = r.version;
            if (r.op == FXB_DCACHE_OP_PUT && (r.expires_ms == 0 || r.expires_ms > WALL_MS)) {
                m->present[key] = true;
                memcpy(m->value[key], r.value, r.vlen);
                m->value[key][r.vlen] = '\0';
                m->version[key] = r.version;
            } else {
                m->present[key] = false;
            }
            m->records++;
        }
        from = pg.next;
    }
    fx_dlog_page_deinit(&pg);
}

static void assert_same(const model *a, const model *b)
{
    assert_int_equal(a->max_version, b->max_version);
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(a->present[k], b->present[k]);
        if (a->present[k]) {
            assert_string_equal(a->value[k], b->value[k]);
            assert_int_equal(a->version[k], b->version[k]);
        }
    }
}

/* Runs compactions until none is due. Returns the first error. */
static int compact_all(cfix *f)
{
    for (int guard = 0; guard < 100 && fxb_ccomp_begin(f->c, f->log); guard++) {
        while (fxb_ccomp_running(f->c)) {
            size_t read = 0;
            int rv = fxb_ccomp_step(f->c, f->log, WALL_MS, 2, 512, &read);
            if (rv != 0)
                return rv;
        }
    }
    return 0;
}

static void test_compaction_keeps_what_the_log_reads_back_to_and_shrinks_it(void **state)
{
    (void)state;
    cfix f;
    c_new(&f);
    c_fill(&f, 20);
    model before, after;
    read_back(f.log, &before);
    uint64_t bytes = fx_dlog_bytes_on_disk(f.log);
    size_t segs = fx_dlog_segment_count(f.log);
    assert_true(segs > 10);
    assert_int_equal(compact_all(&f), 0);
    fxb_ccomp_stats st;
    fxb_ccomp_stats_get(f.c, &st);
    assert_true(st.runs >= 1);
    assert_true(st.copied > 0);
    assert_true(st.reclaimed > 0);
    read_back(f.log, &after);
    assert_same(&before, &after);
    uint64_t now = fx_dlog_bytes_on_disk(f.log);
    assert_true(now * 3 < bytes);
    /* At most twice the live bytes, a segment being written and a segment's
     * worth of rounding. */
    assert_true(now <= 2 * fxb_ccomp_live_bytes(f.c) + 2 * f.cfg.segment_bytes);
    assert_true(after.records < before.records / 3);

    /* More writes, another compaction; then reopened: a new index read from
     * the log compacts it the same way. */
    c_fill(&f, 20);
    read_back(f.log, &before);
    assert_int_equal(compact_all(&f), 0);
    read_back(f.log, &after);
    assert_same(&before, &after);
    assert_int_equal(fx_dlog_close(f.log, true), 0);
    fxb_ccomp_free(f.c);
    assert_int_equal(fxb_ccomp_new(&f.c), 0);
    c_open(&f);
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    for (uint64_t from = fx_dlog_first_offset(f.log);;) {
        assert_int_equal(fx_dlog_read(f.log, from, 1 << 16, 256, &pg), 0);
        if (pg.n == 0)
            break;
        for (size_t i = 0; i < pg.n; i++)
            assert_int_equal(fxb_ccomp_note(f.c, pg.recs[i].offset, pg.recs[i].data,
                                             pg.recs[i].len),
                             0);
        from = pg.next;
    }
    fx_dlog_page_deinit(&pg);
    assert_int_equal(fxb_ccomp_max_version(f.c), before.max_version);
    c_fill(&f, 20);
    read_back(f.log, &before);
    assert_int_equal(compact_all(&f), 0);
    read_back(f.log, &after);
    assert_same(&before, &after);
    c_done(&f);
}

static void test_no_compaction_while_the_log_is_mostly_live(void **state)
{
    (void)state;
    cfix f;
    c_new(&f);
    for (int key = 0; key < NKEYS; key++)
        c_append(&f, FXB_DCACHE_OP_PUT, key, 0, 0);
    assert_true(fx_dlog_segment_count(f.log) > 1);
    assert_false(fxb_ccomp_begin(f.c, f.log));
    c_done(&f);
}

/* A crash (the process dies at any system call, then a power cut drops
 * what was not flushed) at every point of a compaction leaves a log that
 * reads back to the same entries and largest version. */
static void test_a_crash_at_any_point_of_a_compaction_reads_back_the_same(void **state)
{
    (void)state;
    uint64_t calls = 0;
    {
        cfix f;
        c_new(&f);
        c_fill(&f, 5);
        uint64_t c0 = fx_memio_calls(f.m);
        assert_int_equal(compact_all(&f), 0);
        calls = fx_memio_calls(f.m) - c0;
        c_done(&f);
    }
    assert_true(calls > 10);
    print_message("compaction calls: %llu\n", (unsigned long long)calls);
    for (uint64_t n = 0; n <= calls; n++) {
        cfix f;
        c_new(&f);
        c_fill(&f, 5);
        model before, after;
        read_back(f.log, &before);
        fx_memio_crash_after(f.m, n);
        (void)compact_all(&f); /* fails from call n on */
        fx_memio_crash(f.m, 0);
        (void)fx_dlog_close(f.log, false);
        c_open(&f);
        read_back(f.log, &after);
        assert_same(&before, &after);
        c_done(&f);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_record_is_the_originals_version_2_payload_little_endian),
    cmocka_unit_test(test_a_version_1_record_is_still_read_with_no_version),
    cmocka_unit_test(test_compaction_keeps_what_the_log_reads_back_to_and_shrinks_it),
    cmocka_unit_test(test_no_compaction_while_the_log_is_mostly_live),
    cmocka_unit_test(test_a_crash_at_any_point_of_a_compaction_reads_back_the_same),
};
FX_TEST_MAIN(tests)
