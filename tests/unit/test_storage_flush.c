/* Unit tests of a flush in flight (fx_dlog_sync_begin, fx_dlog_flush_run,
 * fx_dlog_sync_complete) on the in-memory I/O layer, whose fdatasync makes
 * durable only what a file held when it began: what the completion claims
 * (durable offset, durable point), appends made while the flush runs (also
 * from another thread, with the flush held: the TSan twin covers it), a
 * power cut before the completion, rollover and retention during a flush,
 * and a failed flush stopping the log. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#define DIR_ "/d"
#define SEG0 DIR_ "/00000000000000000000.log"

typedef struct fixture {
    fx_memio *m;
    fx_dlog_config cfg;
    fx_dlog *log;
    fx_dlog_recovery rep;
} fixture;

static void fix_init(fixture *f, uint64_t segment_bytes)
{
    *f = (fixture){0};
    assert_int_equal(fx_memio_new(&f->m), 0);
    fx_dlog_config_default(&f->cfg);
    f->cfg.segment_bytes = segment_bytes;
    f->cfg.index_spacing_bytes = 64;
    f->cfg.preallocate = false;
    f->cfg.io = fx_memio_sio(f->m);
    f->cfg.label = "t/ns/flush/0";
    assert_int_equal(fx_dlog_open(&f->log, DIR_, &f->cfg, 1000, &f->rep), 0);
}

/* A power cut that keeps only what completed fdatasyncs covered, then the
 * log opened again. */
static void cut_and_reopen(fixture *f)
{
    fx_dlog_close(f->log, false);
    f->log = NULL;
    fx_memio_crash(f->m, 0);
    assert_int_equal(fx_dlog_open(&f->log, DIR_, &f->cfg, 1000, &f->rep), 0);
}

static void fix_done(fixture *f)
{
    fx_dlog_close(f->log, false);
    fx_memio_free(f->m);
}

/* Record |off|'s payload: 20 bytes derived from it. */
static void payload(uint64_t off, char *b)
{
    memset(b, 'a' + (int)(off % 26), 20);
    memcpy(b, &off, sizeof(off));
}

/* Appends record |off| alone; returns the log's result. */
static int append1(fx_dlog *log, uint64_t off)
{
    char b[20];
    payload(off, b);
    fx_dlog_iov iov = {.data = b, .len = sizeof(b)};
    uint64_t first = UINT64_MAX;
    int rv = fx_dlog_append(log, &iov, 1, 5000 + off, &first);
    if (rv == 0)
        assert_int_equal(first, off);
    return rv;
}

static void append_range(fx_dlog *log, uint64_t from, uint64_t to)
{
    for (uint64_t o = from; o < to; o++)
        assert_int_equal(append1(log, o), 0);
}

/* Checks that the log holds exactly records [first offset, |end|). */
static void expect_log(fx_dlog *log, uint64_t end)
{
    assert_int_equal(fx_dlog_next_offset(log), end);
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    for (uint64_t at = fx_dlog_first_offset(log); at < end;) {
        assert_int_equal(fx_dlog_read(log, at, 1 << 16, 64, &p), 0);
        assert_true(p.n > 0);
        for (size_t i = 0; i < p.n; i++, at++) {
            char want[20];
            payload(at, want);
            assert_int_equal(p.recs[i].offset, at);
            assert_int_equal(p.recs[i].len, sizeof(want));
            assert_memory_equal(p.recs[i].data, want, sizeof(want));
        }
    }
    fx_dlog_page_deinit(&p);
}

/* The durable point in the header of segment 0 as the process sees it. */
static uint64_t point_of_seg0(fixture *f)
{
    fx_sio *io = fx_memio_sio(f->m);
    int fd;
    uint8_t b[4];
    assert_int_equal(io->ops->open(io, SEG0, FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pread(io, fd, b, sizeof(b), FX_SEG_POINT_POS), (ssize_t)sizeof(b));
    io->ops->close(io, fd);
    uint64_t len = 0;
    assert_true(fx_logfmt_point_decode(fx_be32_get(b), &len));
    return len;
}

static uint64_t seg0_len(fixture *f)
{
    uint64_t n = 0;
    assert_int_equal(fx_memio_file_len(f->m, SEG0, &n), 0);
    return n;
}

/* ---- what a completion claims --------------------------------------------------- */

/* Records appended after the flush began are not called durable by its
 * completion, nor recorded in the durable point, even when they were
 * written before the completion: the fdatasync did not cover them (the
 * in-memory layer keeps them volatile), and a power cut loses them. */
static void test_completion_claims_only_what_the_begin_covered(void **state)
{
    fixture f;
    fix_init(&f, 1 << 20);
    append_range(f.log, 0, 3);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_true(fx_dlog_is_flushing(f.log));
    assert_int_equal(fl.target, 3);
    assert_int_equal(fl.size, seg0_len(&f));
    assert_int_equal(fx_dlog_flush_run(&fl), 0);
    append_range(f.log, 3, 5); /* while the flush is in flight */
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, 0, &durable), 0);
    assert_false(fx_dlog_is_flushing(f.log));
    assert_int_equal(durable, 3);
    assert_int_equal(fx_dlog_durable_offset(f.log), 3);
    assert_int_equal(fx_dlog_unsynced_bytes(f.log), seg0_len(&f) - fl.size);
    assert_int_equal(point_of_seg0(&f), fl.size);
    assert_int_equal(fx_dlog_stats_get(f.log)->syncs, 1);
    cut_and_reopen(&f);
    expect_log(f.log, 3);
    fix_done(&f);
}

/* A power cut between begin and complete: what an earlier completed flush
 * covered survives; of the rest, exactly what the fdatasync saw when it
 * began (here: it ran and covered 3..4, not the record appended after it). */
static void test_power_cut_before_the_completion_keeps_every_acknowledged_record(void **state)
{
    for (int run_it = 0; run_it < 2; run_it++) {
        fixture f;
        fix_init(&f, 1 << 20);
        append_range(f.log, 0, 3);
        uint64_t durable = 0;
        assert_int_equal(fx_dlog_sync(f.log, &durable), 0);
        assert_int_equal(durable, 3); /* acknowledged under on_commit */
        append_range(f.log, 3, 5);
        fx_dlog_flush fl;
        assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
        assert_int_equal(fl.target, 5);
        if (run_it)
            assert_int_equal(fx_dlog_flush_run(&fl), 0);
        append_range(f.log, 5, 6);
        assert_int_equal(fx_dlog_durable_offset(f.log), 3); /* nothing claimed yet */
        /* The power goes: the completion never runs. (Ending the flight
         * with an error only lets the log be freed: it writes nothing.) */
        assert_int_equal(fx_dlog_sync_complete(f.log, &fl, -EIO, NULL), -EIO);
        fx_dlog_close(f.log, false);
        f.log = NULL;
        fx_memio_crash(f.m, 0);
        assert_int_equal(fx_dlog_open(&f.log, DIR_, &f.cfg, 1000, &f.rep), 0);
        expect_log(f.log, run_it ? 5 : 3);
        fix_done(&f);
    }
}

/* A flush with nothing new makes no fdatasync and claims what was durable. */
static void test_a_flush_with_nothing_new_makes_no_fdatasync(void **state)
{
    fixture f;
    fix_init(&f, 1 << 20);
    append_range(f.log, 0, 2);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    uint64_t calls = fx_memio_op_calls(f.m, FX_MEMIO_FDATASYNC);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_int_equal(fl.fd, -1);
    assert_int_equal(fx_dlog_flush_run(&fl), 0);
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, 0, &durable), 0);
    assert_int_equal(durable, 2);
    assert_int_equal(fx_memio_op_calls(f.m, FX_MEMIO_FDATASYNC), calls);
    fix_done(&f);
}

/* ---- one flush at a time, rollover, retention -------------------------------------- */

static void test_a_second_flush_waits_for_the_one_in_flight(void **state)
{
    fixture f;
    fix_init(&f, 1 << 20);
    append_range(f.log, 0, 2);
    fx_dlog_flush fl, other;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_int_equal(fx_dlog_sync_begin(f.log, &other), -EBUSY);
    assert_int_equal(fx_dlog_sync(f.log, NULL), -EBUSY);
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, fx_dlog_flush_run(&fl), NULL), 0);
    append_range(f.log, 2, 3);
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync(f.log, &durable), 0);
    assert_int_equal(durable, 3);
    fix_done(&f);
}

/* An append that needs a new segment waits for the flush in flight (the
 * segment being flushed stays the active one): -EBUSY, nothing written;
 * after the completion it rolls. Retention runs during the flight. */
static void test_rollover_waits_for_the_flush_in_flight_and_retention_does_not(void **state)
{
    fixture f;
    fix_init(&f, 200);         /* 32-byte header + 3 records of 48 bytes */
    append_range(f.log, 0, 7); /* segments 0, 1 sealed; 2 active with one record */
    assert_int_equal(fx_dlog_segment_count(f.log), 3);
    append_range(f.log, 7, 9);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    assert_true(fx_dlog_append_rolls(f.log, 48));
    uint64_t failures = fx_dlog_stats_get(f.log)->append_failures;
    assert_int_equal(append1(f.log, 9), -EBUSY);
    assert_int_equal(fx_dlog_next_offset(f.log), 9);
    assert_int_equal(fx_dlog_segment_count(f.log), 3);
    assert_int_equal(fx_dlog_stats_get(f.log)->append_failures, failures);
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f.log, 250, 0, 0, &r), 0);
    assert_true(r.segments >= 1 && r.segments <= 2);
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, fx_dlog_flush_run(&fl), NULL), 0);
    assert_int_equal(fx_dlog_durable_offset(f.log), 9);
    assert_int_equal(append1(f.log, 9), 0); /* rolls now */
    assert_int_equal(fx_dlog_segment_count(f.log), 3 - r.segments + 1);
    assert_int_equal(fx_dlog_sync(f.log, NULL), 0);
    cut_and_reopen(&f);
    expect_log(f.log, 10);
    fix_done(&f);
}

/* ---- failures -------------------------------------------------------------------- */

/* A failed fdatasync stops the log for good, whatever was appended while it
 * ran: nothing more is called durable, appends and flushes are refused. */
static void test_a_failed_flush_in_flight_stops_the_log(void **state)
{
    fixture f;
    fix_init(&f, 1 << 20);
    append_range(f.log, 0, 3);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    append_range(f.log, 3, 5);
    fx_memio_fail(f.m, FX_MEMIO_FDATASYNC, -EIO, 1);
    int rv = fx_dlog_flush_run(&fl);
    assert_int_equal(rv, -EIO);
    uint64_t durable = 77;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, rv, &durable), -EIO);
    assert_int_equal(durable, 77); /* untouched */
    assert_true(fx_dlog_is_failed(f.log));
    assert_false(fx_dlog_is_flushing(f.log));
    assert_int_equal(fx_dlog_durable_offset(f.log), 0);
    assert_int_equal(fx_dlog_stats_get(f.log)->sync_failures, 1);
    assert_non_null(strstr(fx_dlog_last_error(f.log), "durability sync failed"));
    assert_int_equal(append1(f.log, 5), FX_ESTORAGE_FAILED);
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), FX_ESTORAGE_FAILED);
    fix_done(&f);
}

/* ---- the fdatasync on another thread ---------------------------------------------- */

typedef struct runner {
    const fx_dlog_flush *fl;
    int rv;
} runner;

static void *run_flush(void *arg)
{
    runner *r = arg;
    r->rv = fx_dlog_flush_run(r->fl);
    return NULL;
}

/* The owner appends while another thread's fdatasync is held in flight
 * (the appends would deadlock behind it if they waited for the flush); the
 * completion then claims the records of the begin only, and the next flush
 * the rest. */
static void test_appends_go_on_while_another_thread_runs_the_flush(void **state)
{
    fixture f;
    fix_init(&f, 1 << 20);
    append_range(f.log, 0, 4);
    fx_dlog_flush fl;
    assert_int_equal(fx_dlog_sync_begin(f.log, &fl), 0);
    fx_memio_hold_next_sync(f.m);
    runner r = {.fl = &fl};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_flush, &r), 0);
    fx_memio_wait_held(f.m); /* the fdatasync has begun and waits */
    append_range(f.log, 4, 40);
    expect_log(f.log, 40); /* reads too */
    fx_memio_release(f.m);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r.rv, 0);
    uint64_t durable = 0;
    assert_int_equal(fx_dlog_sync_complete(f.log, &fl, r.rv, &durable), 0);
    assert_int_equal(durable, 4);
    assert_int_equal(fx_dlog_sync(f.log, &durable), 0);
    assert_int_equal(durable, 40);
    cut_and_reopen(&f);
    expect_log(f.log, 40);
    fix_done(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_completion_claims_only_what_the_begin_covered),
    cmocka_unit_test(test_power_cut_before_the_completion_keeps_every_acknowledged_record),
    cmocka_unit_test(test_a_flush_with_nothing_new_makes_no_fdatasync),
    cmocka_unit_test(test_a_second_flush_waits_for_the_one_in_flight),
    cmocka_unit_test(test_rollover_waits_for_the_flush_in_flight_and_retention_does_not),
    cmocka_unit_test(test_a_failed_flush_in_flight_stops_the_log),
    cmocka_unit_test(test_appends_go_on_while_another_thread_runs_the_flush),
};
FX_TEST_MAIN(tests)
