/* Unit tests for dlog.c on the in-memory file system: append and read
 * (offsets, timestamps, page reuse and bounds), rollover into new segments,
 * the flush in three steps (begin, run, complete) with appends going on
 * while it is in flight, a stopped log, retention by bytes and by age, the
 * counters and the segment listing. Recovery decisions are in
 * test_storage_dlog_open.c. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#define DIR_ "/log"
#define REC(n) (FX_REC_HEADER_LEN + (n))

typedef struct fixture {
    fx_memio *m;
    fx_dlog_config cfg;
    fx_dlog *log;
} fixture;

static void open_log(fixture *f, uint64_t segment_bytes)
{
    *f = (fixture){0};
    assert_int_equal(fx_memio_new(&f->m), 0);
    fx_dlog_config_default(&f->cfg);
    f->cfg.segment_bytes = segment_bytes;
    f->cfg.index_spacing_bytes = 64;
    f->cfg.preallocate = false;
    f->cfg.io = fx_memio_sio(f->m);
    f->cfg.label = "t/ns/s/0";
    assert_int_equal(fx_dlog_open(&f->log, DIR_, &f->cfg, 1, NULL), 0);
}

static void done(fixture *f)
{
    fx_dlog_close(f->log, false);
    fx_memio_free(f->m);
}

/* Appends one record "r<i>" padded to |len| bytes, stamped |ts|. */
static int put(fixture *f, uint64_t i, uint32_t len, uint64_t ts)
{
    char buf[256];
    memset(buf, 'x', sizeof(buf));
    snprintf(buf, sizeof(buf), "r%llu", (unsigned long long)i);
    fx_dlog_iov iov = {.data = buf, .len = len};
    uint64_t first = UINT64_MAX;
    int rv = fx_dlog_append(f->log, &iov, 1, ts, &first);
    if (rv == 0)
        assert_int_equal(first, i);
    return rv;
}

static void test_batch_gets_contiguous_offsets_and_reads_back(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    fx_dlog_iov iov[3] = {{"a", 1}, {"bb", 2}, {"ccc", 3}};
    uint64_t first = 99;
    assert_int_equal(fx_dlog_append(f.log, iov, 3, 777, &first), 0);
    assert_int_equal(first, 0);
    assert_int_equal(fx_dlog_append(f.log, iov + 2, 1, 778, &first), 0);
    assert_int_equal(first, 3);
    assert_int_equal(fx_dlog_next_offset(f.log), 4);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 1, 1000, 100, &p), 0);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.recs[0].offset, 1);
    assert_memory_equal(p.recs[0].data, "bb", 2);
    assert_int_equal(p.recs[1].ts_us, 777);
    assert_int_equal(p.recs[2].ts_us, 778);
    assert_int_equal(p.next, 4);
    assert_int_equal(p.bytes, 2 + 3 + 3);
    const fx_dlog_stats *st = fx_dlog_stats_get(f.log);
    assert_int_equal(st->append_batches, 2);
    assert_int_equal(st->append_records, 4);
    assert_int_equal(st->read_records, 3);
    fx_dlog_page_deinit(&p);
    done(&f);
}

static void test_page_bounds_keep_the_first_record_and_skip_nothing(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    for (uint64_t i = 0; i < 6; i++)
        assert_int_equal(put(&f, i, 100, 10), 0);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    /* A budget smaller than one record still returns that record. */
    assert_int_equal(fx_dlog_read(f.log, 0, 10, 100, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.next, 1);
    /* 250 bytes hold two records, not a third. */
    assert_int_equal(fx_dlog_read(f.log, 1, 250, 100, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.next, 3);
    assert_int_equal(fx_dlog_read(f.log, 3, 100000, 2, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.recs[1].offset, 4);
    /* At or past the tail: an empty page whose next is |from|. */
    assert_int_equal(fx_dlog_read(f.log, 6, 1000, 10, &p), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(p.next, 6);
    assert_int_equal(fx_dlog_read(f.log, 60, 1000, 10, &p), 0);
    assert_int_equal(p.n, 0);
    fx_dlog_page_deinit(&p);
    done(&f);
}

static void test_rollover_starts_a_new_segment_and_reads_span_them(void **state)
{
    fixture f;
    /* Room for three 100-byte records after the 32-byte header. */
    open_log(&f, FX_SEG_HEADER_LEN + 3 * REC(100));
    for (uint64_t i = 0; i < 7; i++) {
        bool rolls = fx_dlog_append_rolls(f.log, REC(100));
        assert_int_equal(rolls, i > 0 && i % 3 == 0);
        assert_int_equal(put(&f, i, 100, 10 + i), 0);
    }
    assert_int_equal(fx_dlog_segment_count(f.log), 3);
    assert_int_equal(fx_dlog_stats_get(f.log)->rolls, 2);
    uint64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(fx_dlog_list_segments(f.cfg.io, DIR_, &ids, &n), 0);
    assert_int_equal(n, 3);
    /* Segment files are numbered in sequence. */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], i);
    free(ids);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 2, 100000, 100, &p), 0);
    assert_true(p.n >= 1);
    uint64_t at = 2;
    while (at < 7) {
        assert_int_equal(fx_dlog_read(f.log, at, 100000, 100, &p), 0);
        assert_true(p.n > 0);
        for (size_t i = 0; i < p.n; i++)
            assert_int_equal(p.recs[i].offset, at++);
    }
    fx_dlog_page_deinit(&p);
    done(&f);
}

static void test_room_after_shrinks_to_zero_at_the_segment_end(void **state)
{
    fixture f;
    open_log(&f, FX_SEG_HEADER_LEN + 3 * REC(100));
    assert_int_equal(fx_dlog_room_after(f.log, REC(100)), 2 * REC(100));
    assert_int_equal(put(&f, 0, 100, 1), 0);
    assert_int_equal(fx_dlog_room_after(f.log, REC(100)), REC(100));
    assert_int_equal(fx_dlog_room_after(f.log, 2 * REC(100)), 0);
    done(&f);
}

static void test_flush_in_flight_lets_appends_go_on_but_not_roll(void **state)
{
    fixture f;
    open_log(&f, FX_SEG_HEADER_LEN + 2 * REC(100));
    assert_int_equal(put(&f, 0, 100, 1), 0);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_true(fx_dlog_is_flushing(f.log));
    assert_int_equal(fl.target, 1);
    fx_dlog_flush again;
    assert_int_equal(fx_dlog_sync_begin(f.log, &again), -EBUSY);
    assert_int_equal(fx_dlog_sync(f.log, NULL), -EBUSY);
    /* Another record fits the active segment; the third needs a roll. */
    assert_int_equal(put(&f, 1, 100, 2), 0);
    assert_int_equal(put(&f, 2, 100, 3), -EBUSY);
    assert_int_equal(fx_dlog_next_offset(f.log), 2);
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, fx_dlog_flush_run(&fl), &durable), 0);
    assert_false(fx_dlog_is_flushing(f.log));
    /* The record appended during the flight is not durable yet. */
    assert_int_equal(durable, 1);
    assert_int_equal(fx_dlog_durable_offset(f.log), 1);
    assert_true(fx_dlog_unsynced_bytes(f.log) > 0);
    assert_int_equal(put(&f, 2, 100, 3), 0);
    assert_int_equal(fx_dlog_sync(f.log, &durable), 0);
    assert_int_equal(durable, 3);
    assert_int_equal(fx_dlog_unsynced_bytes(f.log), 0);
    done(&f);
}

static void test_nothing_new_to_flush_runs_nothing(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    assert_int_equal(put(&f, 0, 10, 1), 0);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    uint64_t syncs = fx_memio_op_calls(f.m, FX_MEMIO_FDATASYNC);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_int_equal(fl.fd, -1);
    assert_int_equal(fx_dlog_flush_run(&fl), 0);
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, 0, &durable), 0);
    assert_int_equal(durable, 1);
    assert_int_equal(fx_memio_op_calls(f.m, FX_MEMIO_FDATASYNC), syncs);
    done(&f);
}

static void test_failed_flush_stops_the_log(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    assert_int_equal(put(&f, 0, 10, 1), 0);
    fx_memio_fail(f.m, FX_MEMIO_FDATASYNC, -EIO, 1);
    assert_int_equal(fx_dlog_sync(f.log, NULL), -EIO);
    assert_true(fx_dlog_is_failed(f.log));
    assert_int_equal(fx_dlog_durable_offset(f.log), 0);
    assert_int_equal(put(&f, 1, 10, 2), FX_ESTORAGE_FAILED);
    assert_int_equal(fx_dlog_sync(f.log, NULL), FX_ESTORAGE_FAILED);
    assert_int_equal(fx_dlog_stats_get(f.log)->sync_failures, 1);
    assert_int_equal(fx_dlog_close(f.log, true), FX_ESTORAGE_FAILED);
    fx_memio_free(f.m);
}

static void test_failed_write_leaves_nothing_and_the_offset_is_reused(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    assert_int_equal(put(&f, 0, 10, 1), 0);
    fx_memio_fail(f.m, FX_MEMIO_PWRITE, -ENOSPC, 1);
    assert_int_equal(put(&f, 1, 10, 2), -ENOSPC);
    assert_false(fx_dlog_is_failed(f.log));
    assert_int_equal(fx_dlog_next_offset(f.log), 1);
    assert_int_equal(fx_dlog_stats_get(f.log)->append_failures, 1);
    assert_int_equal(put(&f, 1, 10, 3), 0);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 0, 1000, 10, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.recs[1].ts_us, 3);
    fx_dlog_page_deinit(&p);
    done(&f);
}

static void test_empty_and_oversized_appends_are_refused(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    uint64_t first;
    assert_int_equal(fx_dlog_append(f.log, NULL, 0, 1, &first), -EINVAL);
    fx_dlog_iov big = {.data = "x", .len = FX_REC_MAX_PAYLOAD + 1};
    assert_int_equal(fx_dlog_append(f.log, &big, 1, 1, &first), FX_ESTORAGE_TOO_LARGE);
    assert_int_equal(fx_dlog_next_offset(f.log), 0);
    done(&f);
}

static void test_retention_by_bytes_and_age_spares_the_active_segment(void **state)
{
    fixture f;
    open_log(&f, FX_SEG_HEADER_LEN + 2 * REC(100));
    /* Segments [0,1] ts 100..101, [2,3] ts 200..201, [4] ts 300. */
    uint64_t ts[] = {100, 101, 200, 201, 300};
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(put(&f, i, 100, ts[i]), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 3);
    fx_dlog_retained r;
    /* Age 150 at 300: only the first segment's newest record (101) is older. */
    assert_int_equal(fx_dlog_retain(f.log, 0, 150, 300, &r), 0);
    assert_int_equal(r.segments, 1);
    assert_int_equal(r.first_offset, 2);
    assert_int_equal(fx_dlog_first_offset(f.log), 2);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    assert_int_equal(fx_dlog_read(f.log, 1, 1000, 10, &p), FX_ECURSOR_TOO_OLD);
    /* One byte as the bound: every sealed segment goes, the active stays. */
    assert_int_equal(fx_dlog_retain(f.log, 1, 0, 300, &r), 0);
    assert_int_equal(r.segments, 1);
    assert_int_equal(fx_dlog_first_offset(f.log), 4);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(fx_dlog_retain(f.log, 1, 1, UINT64_MAX, NULL), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    assert_int_equal(fx_dlog_read(f.log, 4, 1000, 10, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(fx_dlog_stats_get(f.log)->retention_segments_deleted, 2);
    fx_dlog_page_deinit(&p);
    done(&f);
}

static void test_retain_below_deletes_only_sealed_segments_wholly_below_the_offset(void **state)
{
    fixture f;
    open_log(&f, FX_SEG_HEADER_LEN + 2 * REC(100));
    /* Segments [0,1], [2,3], [4,5], [6]. */
    for (uint64_t i = 0; i < 7; i++)
        assert_int_equal(put(&f, i, 100, 100 + i), 0);
    assert_int_equal(fx_dlog_segment_count(f.log), 4);
    uint64_t base = 0, next = 0, bytes = 0;
    assert_true(fx_dlog_segment_at(f.log, 1, &base, &next, &bytes));
    assert_int_equal(base, 2);
    assert_int_equal(next, 4);
    assert_true(bytes >= FX_SEG_HEADER_LEN + 2 * REC(100));
    assert_false(fx_dlog_segment_at(f.log, 4, NULL, NULL, NULL));
    fx_dlog_retained r;
    /* Offset 3 is inside [2,3]: only [0,1] lies wholly below. */
    assert_int_equal(fx_dlog_retain_below(f.log, 3, 200, &r), 0);
    assert_int_equal(r.segments, 1);
    assert_int_equal(r.first_offset, 2);
    assert_int_equal(fx_dlog_retain_below(f.log, 0, 200, &r), 0);
    assert_int_equal(r.segments, 0);
    /* Past everything: the sealed ones go, the active one stays. */
    assert_int_equal(fx_dlog_retain_below(f.log, 100, 200, &r), 0);
    assert_int_equal(r.segments, 2);
    assert_int_equal(fx_dlog_first_offset(f.log), 6);
    assert_int_equal(fx_dlog_segment_count(f.log), 1);
    done(&f);
}

static void test_close_with_sync_makes_everything_durable(void **state)
{
    fixture f;
    open_log(&f, 1 << 20);
    assert_int_equal(put(&f, 0, 10, 1), 0);
    assert_int_equal(put(&f, 1, 10, 1), 0);
    assert_int_equal(fx_dlog_close(f.log, true), 0);
    fx_memio_crash(f.m, 0);
    assert_int_equal(fx_dlog_open(&f.log, DIR_, &f.cfg, 2, NULL), 0);
    assert_int_equal(fx_dlog_next_offset(f.log), 2);
    assert_int_equal(fx_dlog_close(NULL, true), 0);
    done(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_batch_gets_contiguous_offsets_and_reads_back),
    cmocka_unit_test(test_page_bounds_keep_the_first_record_and_skip_nothing),
    cmocka_unit_test(test_rollover_starts_a_new_segment_and_reads_span_them),
    cmocka_unit_test(test_room_after_shrinks_to_zero_at_the_segment_end),
    cmocka_unit_test(test_flush_in_flight_lets_appends_go_on_but_not_roll),
    cmocka_unit_test(test_nothing_new_to_flush_runs_nothing),
    cmocka_unit_test(test_failed_flush_stops_the_log),
    cmocka_unit_test(test_failed_write_leaves_nothing_and_the_offset_is_reused),
    cmocka_unit_test(test_empty_and_oversized_appends_are_refused),
    cmocka_unit_test(test_retention_by_bytes_and_age_spares_the_active_segment),
    cmocka_unit_test(test_retain_below_deletes_only_sealed_segments_wholly_below_the_offset),
    cmocka_unit_test(test_close_with_sync_makes_everything_durable),
};

FX_TEST_MAIN(tests)
