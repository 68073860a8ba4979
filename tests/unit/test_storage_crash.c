/* Crash tests of the durable log and the catalogue on the in-memory I/O
 * layer: a run appends random batches under an fsync policy (flushing when
 * the policy says so, with rollovers and retention sweeps), the I/O layer
 * dies after a random number of system calls (so the crash can land inside
 * an append, a flush, a rollover or a deletion), the power cut keeps what
 * completed fdatasyncs and directory syncs covered and tears the rest the
 * ways a file system does (runs take the tear models in turn: nothing
 * kept, a random prefix, zero-filled blocks with the length kept, blocks
 * written out of order; overwrites torn per sector in all of them), and the
 * log is reopened. Flushes run as the broker runs them: begun, their
 * fdatasync run and completed while later appends go on (a crash can land
 * in between), and only a completed one acknowledges. Checked: recovery
 * always opens; every acknowledged record (on_commit) and every flushed
 * one (all policies) is there, in order, exactly once, byte for byte;
 * under periodic the loss stays within one interval (plus the flush's time
 * in flight, in steps of the fake clock) and is printed; appends continue
 * at the recovered offset, and after a clean flush and a second power cut
 * nothing more is cut (a tail the first recovery left in the file would
 * be). FX_STORAGE_CRASH_RUNS sets the runs per policy (default 300). */
/* fx-test-libs: fx_storage fx_base */
#include "base/log.h"
#include "felix/error.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/memio.h"
#include "storage/syncpol.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#define MS 1000000ull
#define MAX_STEP_NS (3 * MS)
#define INTERVAL_NS (20 * MS)
#define MAX_RECORDS 8192
/* Appends one flush may stay in flight for. */
#define MAX_FLIGHT_APPENDS 3
/* Under periodic a power cut loses at most the appends of one interval, the
 * step to the next append (the flush starts there) and the flush's own
 * time: up to MAX_FLIGHT_APPENDS appends while it is in flight. */
#define MAX_LOSS_AGE_NS (INTERVAL_NS + (MAX_FLIGHT_APPENDS + 1) * MAX_STEP_NS)

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The payload of record |off| in run |seed|: 1..60 bytes derived from both. */
static size_t gen(uint64_t seed, uint64_t off, uint8_t *out)
{
    uint64_t s = seed * 1000003u + off;
    size_t len = 1 + (size_t)(mix(&s) % 60);
    for (size_t i = 0; i < len; i++)
        out[i] = (uint8_t)mix(&s);
    return len;
}

/* The tear models the runs take in turn; TEAR_NONE keeps nothing unsynced. */
#define TEAR_NONE 3
#define NMODELS 4
static const char *const MODEL_NAMES[NMODELS] = {"prefix", "zero blocks", "reorder", "none"};

typedef struct run_result {
    bool refused; /* a reopen failed */
    uint64_t written, acked, durable, recovered;
    uint64_t lost_bytes;
    uint64_t lost_age_ns; /* age at the crash of the oldest lost record */
    uint64_t max_fan_in;  /* most appends one flush served */
} run_result;

/* A flush in flight, as the broker runs one: begun, its fdatasync run (on
 * the sync thread) after |run_after| more appends, completed after
 * |complete_after| (-1: at once). */
typedef struct flight {
    bool on; /* begun and not completed */
    bool ran;
    int rv; /* the fdatasync's result */
    int run_after, complete_after;
    fx_dlog_flush fl;
} flight;

typedef struct run_ctx {
    fx_memio *m;
    fx_dlog_config cfg;
    fx_dlog *log;
    fx_syncpol pol;
    flight fl;
    uint64_t seed, rng, now;
    uint64_t t_append[MAX_RECORDS]; /* append time per offset */
    uint32_t len[MAX_RECORDS];
} run_ctx;

static int open_log(run_ctx *c)
{
    fx_dlog_recovery rep;
    int rv = fx_dlog_open(&c->log, "/root/s", &c->cfg, c->now / 1000, &rep);
    if (rv != 0)
        fprintf(stderr, "seed %" PRIu64 ": reopen failed: %s\n", c->seed, rep.message);
    return rv;
}

/* One batch of 1..4 records at the log's next offset. */
typedef struct batch {
    uint8_t bufs[4][64];
    fx_dlog_iov iov[4];
    size_t n;
    uint64_t first, bytes;
} batch;

/* Makes the next batch; false when the run has appended all it may. */
static bool make_batch(run_ctx *c, batch *b)
{
    b->n = 1 + (size_t)(mix(&c->rng) % 4);
    b->first = fx_dlog_next_offset(c->log);
    b->bytes = 0;
    if (b->first + b->n >= MAX_RECORDS)
        return false;
    for (size_t i = 0; i < b->n; i++) {
        b->iov[i].data = b->bufs[i];
        b->iov[i].len = (uint32_t)gen(c->seed, b->first + i, b->bufs[i]);
        b->bytes += 28 + b->iov[i].len;
    }
    return true;
}

static int append_made(run_ctx *c, const batch *b)
{
    int rv = fx_dlog_append(c->log, b->iov, b->n, c->now / 1000, NULL);
    if (rv != 0)
        return rv;
    for (size_t i = 0; i < b->n; i++) {
        c->t_append[b->first + i] = c->now;
        c->len[b->first + i] = b->iov[i].len;
    }
    fx_syncpol_appended(&c->pol, b->first + b->n, b->bytes, c->now);
    return 0;
}

/* One append of 1..4 records; returns the log's result. */
static int step_append(run_ctx *c)
{
    batch b;
    return make_batch(c, &b) ? append_made(c, &b) : 1;
}

/* ---- a flush in flight ------------------------------------------------------------ */

static void flight_run(flight *f)
{
    if (!f->ran)
        f->rv = fx_dlog_flush_run(&f->fl);
    f->ran = true;
}

static int flight_complete(run_ctx *c)
{
    flight *f = &c->fl;
    flight_run(f);
    uint64_t d = 0;
    int rv = fx_dlog_sync_complete(c->log, &f->fl, f->rv, &d);
    fx_syncpol_end(&c->pol, rv, d);
    f->on = false;
    return rv;
}

/* Begins the flush the policy says is due; under on_commit and periodic it
 * stays in flight for up to MAX_FLIGHT_APPENDS appends, its fdatasync
 * running anywhere in between. */
static int flight_begin(run_ctx *c)
{
    flight *f = &c->fl;
    fx_syncpol_begin(&c->pol, c->now);
    int rv = fx_dlog_sync_begin(c->log, &f->fl);
    if (rv != 0) {
        fx_syncpol_end(&c->pol, rv, 0);
        return rv;
    }
    *f = (flight){.on = true, .fl = f->fl};
    f->complete_after = (int)(mix(&c->rng) % (MAX_FLIGHT_APPENDS + 1)) - 1;
    f->run_after = f->complete_after < 0 ? 0 : (int)(mix(&c->rng) % (f->complete_after + 1));
    return f->complete_after < 0 ? flight_complete(c) : 0;
}

/* After an append: the fdatasync and the completion when their turn comes. */
static int flight_tick(run_ctx *c)
{
    flight *f = &c->fl;
    if (!f->on)
        return 0;
    if (f->run_after-- == 0)
        flight_run(f);
    return f->complete_after-- == 0 ? flight_complete(c) : 0;
}

/* Whether batch |b| waits for the flush in flight, as the broker makes it
 * (durable.c append_waits): it needs a rollover, or periodic's byte bound
 * is reached. */
static bool waits_for_flight(const run_ctx *c, const batch *b)
{
    const fx_syncpol *p = &c->pol;
    bool bound = p->cfg.mode == FX_FSYNC_PERIODIC && p->cfg.max_unsynced_bytes > 0 &&
                 p->unsynced_bytes >= p->cfg.max_unsynced_bytes;
    return c->fl.on && (fx_dlog_append_rolls(c->log, b->bytes) || bound);
}

/* Runs appends, flushes and sweeps until the I/O layer dies. A begun
 * flush stays in flight across up to MAX_FLIGHT_APPENDS appends (as the
 * storage thread goes on appending while the sync thread runs it), so group
 * commit gathers several appends per flush, and the crash can land between
 * its begin, its fdatasync and its completion; a batch that needs a
 * rollover waits for the completion, as does one past periodic's bound. */
static void drive(run_ctx *c, run_result *r)
{
    for (int step = 0; step < 3000; step++) {
        c->now += mix(&c->rng) % MAX_STEP_NS;
        batch b;
        if (!make_batch(c, &b))
            break;
        if (waits_for_flight(c, &b) && flight_complete(c) != 0)
            break;
        if (append_made(c, &b) != 0)
            break;
        r->written = fx_dlog_next_offset(c->log);
        if (flight_tick(c) != 0)
            break;
        if (!c->fl.on && fx_syncpol_is_due(&c->pol, c->now) && flight_begin(c) != 0)
            break;
        r->acked = fx_syncpol_ack_upto(&c->pol);
        if (step % 40 == 39 && fx_dlog_retain(c->log, 4096, 0, 0, NULL) != 0)
            break;
    }
    r->acked = fx_syncpol_ack_upto(&c->pol);
    /* Flushed records: what the policy saw completed, and rollover flushes. */
    r->durable = fx_dlog_durable_offset(c->log);
    if (c->pol.durable > r->durable)
        r->durable = c->pol.durable;
    r->max_fan_in = c->pol.st.max_fan_in;
    /* The process dies: a flush still in flight never completes (ending it
     * with an error only lets the log be freed; it writes nothing). */
    if (c->fl.on)
        (void)fx_dlog_sync_complete(c->log, &c->fl.fl, -EIO, NULL);
    c->fl.on = false;
}

/* Reads the whole recovered log and checks every record's bytes. */
static void check_log(run_ctx *c, uint64_t end)
{
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    uint64_t at = fx_dlog_first_offset(c->log);
    while (at < end) {
        assert_int_equal(fx_dlog_read(c->log, at, 4096, 256, &p), 0);
        assert_true(p.n > 0);
        for (size_t i = 0; i < p.n; i++, at++) {
            uint8_t want[64];
            size_t len = gen(c->seed, at, want);
            assert_int_equal(p.recs[i].offset, at);
            assert_int_equal(p.recs[i].len, len);
            assert_memory_equal(p.recs[i].data, want, len);
        }
    }
    fx_dlog_page_deinit(&p);
}

/* Power cut with model |model| (TEAR_NONE: nothing unsynced kept). */
static void power_cut(run_ctx *c, int model, uint64_t seed)
{
    if (model == TEAR_NONE)
        fx_memio_crash(c->m, 0);
    else
        fx_memio_crash_torn(c->m, (fx_memio_tear)model, seed);
}

/* After recovery: one more append and a flush, then a power cut that keeps
 * only what was flushed. The reopen must cut nothing: recovery left no
 * bytes of a torn tail in the file. */
static void check_goes_on(run_ctx *c, const fx_syncpol_config *pc)
{
    uint64_t next = fx_dlog_next_offset(c->log);
    fx_syncpol_init(&c->pol, pc, c->now, next);
    assert_int_equal(step_append(c), 0);
    assert_int_equal(fx_dlog_sync(c->log, NULL), 0);
    uint64_t end = fx_dlog_next_offset(c->log);
    assert_true(end > next);
    check_log(c, end);
    fx_dlog_close(c->log, false);
    c->log = NULL;
    fx_memio_crash(c->m, 0);
    fx_dlog_recovery rep;
    assert_int_equal(fx_dlog_open(&c->log, "/root/s", &c->cfg, c->now / 1000, &rep), 0);
    assert_int_equal(rep.truncated_bytes, 0);
    assert_int_equal(fx_dlog_next_offset(c->log), end);
    check_log(c, end);
}

static void crash_run(fx_fsync_mode mode, uint64_t max_unsynced, uint64_t seed, int model,
                      run_result *r)
{
    fx_log_set_level(FX_LOG_ERROR); /* every run logs its torn tail */
    run_ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    *r = (run_result){0};
    c->seed = seed;
    c->rng = seed;
    assert_int_equal(fx_memio_new(&c->m), 0);
    /* Segments of 1 KiB: tear in blocks of 128 bytes (a few records) and
     * sectors of 32, so an unsynced stretch spans several blocks. */
    fx_memio_set_tear_unit(c->m, 128, 32);
    fx_dlog_config_default(&c->cfg);
    c->cfg.segment_bytes = 1024;
    c->cfg.index_spacing_bytes = 128;
    c->cfg.io = fx_memio_sio(c->m);
    c->cfg.label = "t/ns/crash/0";
    assert_int_equal(open_log(c), 0);
    fx_syncpol_config pc = {
        .mode = mode, .interval_ns = INTERVAL_NS, .max_unsynced_bytes = max_unsynced};
    fx_syncpol_init(&c->pol, &pc, 0, 0);
    fx_memio_crash_after(c->m, 1 + mix(&c->rng) % 2500);
    drive(c, r);
    uint64_t crash_ns = c->now;
    fx_dlog_close(c->log, false);
    c->log = NULL;
    power_cut(c, model, seed);
    if (open_log(c) != 0) {
        r->refused = true;
        fx_memio_free(c->m);
        free(c);
        return;
    }
    r->recovered = fx_dlog_next_offset(c->log);
    bool acked_ok = mode != FX_FSYNC_ON_COMMIT || r->recovered >= r->acked;
    if (r->recovered < r->durable || !acked_ok || r->recovered > r->written)
        fprintf(stderr,
                "seed %" PRIu64 " %s, %s: written %" PRIu64 " acked %" PRIu64 " durable %" PRIu64
                " recovered %" PRIu64 "\n",
                seed, fx_fsync_mode_name(mode), MODEL_NAMES[model], r->written, r->acked,
                r->durable, r->recovered);
    assert_true(r->recovered >= r->durable);
    assert_true(r->recovered <= r->written);
    check_log(c, r->recovered);
    for (uint64_t o = r->recovered; o < r->written; o++)
        r->lost_bytes += 28 + c->len[o];
    if (r->written > r->recovered)
        r->lost_age_ns = crash_ns - c->t_append[r->recovered];
    check_goes_on(c, &pc);
    fx_dlog_close(c->log, false);
    fx_memio_free(c->m);
    free(c);
}

/* Totals of one policy's runs, per tear model. */
typedef struct tally {
    uint64_t runs[NMODELS], acked[NMODELS], acked_lost[NMODELS], refused[NMODELS];
    uint64_t unacked_lost[NMODELS];
} tally;

/* Run |i| of a policy: its tear model, in turn. */
static int model_of(int i)
{
    return i % NMODELS;
}

static void tally_add(tally *t, int model, const run_result *r)
{
    t->runs[model]++;
    t->refused[model] += r->refused;
    if (r->refused)
        return;
    t->acked[model] += r->acked;
    t->acked_lost[model] += r->recovered < r->acked ? r->acked - r->recovered : 0;
    t->unacked_lost[model] += r->written - r->recovered;
}

/* Prints one line per model and checks that no reopen was refused. */
static void tally_check(const char *policy, const tally *t, bool acked_count)
{
    for (int k = 0; k < NMODELS; k++) {
        printf("%s, tear %s: %" PRIu64 " crash runs, %" PRIu64 " refused reopens", policy,
               MODEL_NAMES[k], t->runs[k], t->refused[k]);
        if (acked_count)
            printf(", %" PRIu64 " acknowledged records, %" PRIu64 " lost", t->acked[k],
                   t->acked_lost[k]);
        printf(", %" PRIu64 " records lost in all\n", t->unacked_lost[k]);
    }
    for (int k = 0; k < NMODELS; k++) {
        assert_int_equal(t->refused[k], 0);
        assert_true(t->runs[k] > 0);
    }
}

static int runs(void)
{
    const char *s = getenv("FX_STORAGE_CRASH_RUNS");
    int n = s != NULL ? atoi(s) : 0;
    return n > 0 ? n : 300;
}

static void test_on_commit_loses_no_acknowledged_record_at_any_crash_point(void **state)
{
    uint64_t fan_in = 0;
    tally t = {0};
    for (int i = 0; i < runs(); i++) {
        run_result r;
        crash_run(FX_FSYNC_ON_COMMIT, 0, 1000 + (uint64_t)i, model_of(i), &r);
        tally_add(&t, model_of(i), &r);
        fan_in = r.max_fan_in > fan_in ? r.max_fan_in : fan_in;
    }
    printf("on_commit: up to %" PRIu64 " appends per flush\n", fan_in);
    tally_check("on_commit", &t, true);
    for (int k = 0; k < NMODELS; k++) {
        assert_int_equal(t.acked_lost[k], 0); /* under on_commit an ack means flushed */
        assert_true(t.acked[k] > 0);
    }
    assert_true(fan_in >= 3); /* group commit did serve several appends at once */
}

static void test_periodic_loss_stays_within_one_interval(void **state)
{
    uint64_t max_age = 0, max_bytes = 0, max_recs = 0, total_lost = 0;
    tally t = {0};
    for (int i = 0; i < runs(); i++) {
        run_result r;
        crash_run(FX_FSYNC_PERIODIC, 0, 5000 + (uint64_t)i, model_of(i), &r);
        tally_add(&t, model_of(i), &r);
        if (r.refused)
            continue;
        assert_true(r.lost_age_ns <= MAX_LOSS_AGE_NS);
        max_age = r.lost_age_ns > max_age ? r.lost_age_ns : max_age;
        max_bytes = r.lost_bytes > max_bytes ? r.lost_bytes : max_bytes;
        max_recs = r.written - r.recovered > max_recs ? r.written - r.recovered : max_recs;
        total_lost += r.written - r.recovered;
    }
    printf("periodic (interval %llu ms): %d crash runs, %" PRIu64 " records lost in all; worst "
           "run %" PRIu64 " records, %" PRIu64 " bytes, oldest lost %.1f ms old\n",
           (unsigned long long)(INTERVAL_NS / MS), runs(), total_lost, max_recs, max_bytes,
           (double)max_age / MS);
    tally_check("periodic", &t, false);
    assert_true(total_lost > 0); /* the test does exercise loss */
}

/* Largest batch of step_append: 4 records of 28 + 60 bytes. */
#define MAX_BATCH_BYTES (4 * (28 + 60))

static void test_periodic_loss_stays_within_the_unsynced_byte_bound(void **state)
{
    uint64_t max_bytes = 0;
    tally t = {0};
    for (int i = 0; i < runs(); i++) {
        run_result r;
        crash_run(FX_FSYNC_PERIODIC, 400, 7000 + (uint64_t)i, model_of(i), &r);
        tally_add(&t, model_of(i), &r);
        if (r.refused)
            continue;
        assert_true(r.lost_bytes <= 400 + MAX_BATCH_BYTES);
        assert_true(r.lost_age_ns <= MAX_LOSS_AGE_NS);
        max_bytes = r.lost_bytes > max_bytes ? r.lost_bytes : max_bytes;
    }
    printf("periodic (interval %llu ms, max_unsynced_bytes 400): %d crash runs, worst run %" PRIu64
           " bytes lost\n",
           (unsigned long long)(INTERVAL_NS / MS), runs(), max_bytes);
    tally_check("periodic, max_unsynced_bytes 400", &t, false);
    assert_true(max_bytes > 0);
}

static void test_none_keeps_a_valid_prefix_and_every_rollover_flush(void **state)
{
    tally t = {0};
    for (int i = 0; i < runs(); i++) {
        run_result r;
        crash_run(FX_FSYNC_NONE, 0, 9000 + (uint64_t)i, model_of(i), &r);
        tally_add(&t, model_of(i), &r);
        assert_true(r.refused || r.recovered >= r.durable);
    }
    tally_check("none", &t, false);
}

/* Reads the whole log; returns 0 or the first error (never crashes). */
static int read_all(fx_dlog *log)
{
    fx_dlog_page p;
    fx_dlog_page_init(&p);
    uint64_t at = fx_dlog_first_offset(log);
    int rv = 0;
    while (rv == 0 && at < fx_dlog_next_offset(log)) {
        rv = fx_dlog_read(log, at, 4096, 64, &p);
        if (rv == 0 && p.n == 0)
            rv = -1;
        at = p.next;
    }
    fx_dlog_page_deinit(&p);
    return rv;
}

/* Random damage to the files of a log (bit flips, cuts, garbage in the
 * index): opening refuses with a corruption error or succeeds; with repair
 * it succeeds unless the first segment's header is damaged, and what it
 * keeps reads back whole and right; nothing crashes or leaks (ASan). */
static void test_random_damage_is_refused_or_repaired_never_misread(void **state)
{
    fx_log_set_level(FX_LOG_ERROR);
    for (uint64_t seed = 1; seed <= 200; seed++) {
        fx_memio *m;
        assert_int_equal(fx_memio_new(&m), 0);
        run_ctx *c = calloc(1, sizeof(*c));
        assert_non_null(c);
        c->m = m;
        c->seed = c->rng = seed;
        fx_dlog_config_default(&c->cfg);
        c->cfg.segment_bytes = 600;
        c->cfg.index_spacing_bytes = 100;
        c->cfg.io = fx_memio_sio(m);
        assert_int_equal(open_log(c), 0);
        fx_syncpol_config pc = {.mode = FX_FSYNC_NONE};
        fx_syncpol_init(&c->pol, &pc, 0, 0);
        for (int i = 0; i < 40; i++)
            assert_int_equal(step_append(c), 0);
        uint64_t segs = fx_dlog_segment_count(c->log);
        fx_dlog_close(c->log, true);
        c->log = NULL;
        for (int k = 0; k < 3; k++) {
            char path[64];
            bool index = mix(&c->rng) % 3 == 0;
            snprintf(path, sizeof(path), "/root/s/%020" PRIu64 ".%s", mix(&c->rng) % segs,
                     index ? "index" : "log");
            uint64_t len = 0;
            if (fx_memio_file_len(m, path, &len) != 0 || len == 0)
                continue;
            if (mix(&c->rng) % 4 == 0)
                assert_int_equal(fx_memio_cut(m, path, mix(&c->rng) % len), 0);
            else
                assert_int_equal(fx_memio_corrupt(m, path, mix(&c->rng) % len,
                                                  (uint8_t)(1 + mix(&c->rng) % 255)),
                                 0);
        }
        c->cfg.verify_all_on_open = seed % 2 == 0;
        fx_dlog_recovery rep;
        int rv = fx_dlog_open(&c->log, "/root/s", &c->cfg, 0, &rep);
        assert_true(rv == 0 || rv == FX_ESTORAGE_CORRUPT);
        if (rv == 0) {
            rv = read_all(c->log);
            assert_true(rv == 0 || rv == FX_ESTORAGE_CORRUPT);
            fx_dlog_close(c->log, false);
            c->log = NULL;
        }
        c->cfg.repair = true;
        c->cfg.verify_all_on_open = true;
        rv = fx_dlog_open(&c->log, "/root/s", &c->cfg, 0, &rep);
        if (rv != 0) {
            /* Only a damaged first header leaves repair without a start. */
            assert_int_equal(rv, FX_ESTORAGE_CORRUPT);
            assert_non_null(strstr(rep.message, "file=00000000000000000000.log, position=0)"));
            fx_memio_free(m);
            free(c);
            continue;
        }
        assert_int_equal(read_all(c->log), 0);
        check_log(c, fx_dlog_next_offset(c->log));
        fx_dlog_close(c->log, false);
        fx_memio_free(m);
        free(c);
    }
}

/* ---- the catalogue ------------------------------------------------------------ */

#define CAT_ROOT "/cat"
#define CAT_STREAMS 10

static const fx_catalog_params CAT_PARAMS = {
    .created_us = 1700000000000000ull,
    .segment_bytes = 1 << 20,
    .index_spacing_bytes = 4096,
};

/* What the changes of one catalogue run asked for and which were answered. */
typedef struct cat_state {
    bool declared[CAT_STREAMS];
    uint64_t retention[CAT_STREAMS];
} cat_state;

/* Change |k| of a run: streams 0-3 exist beforehand; even changes declare
 * the next stream, odd ones set a retention override on an existing one
 * (both rewrite the whole catalogue). Makes the call; returns its result. */
static int cat_call(fx_catalog *c, int k)
{
    char name[16];
    if (k % 2 == 0) {
        snprintf(name, sizeof(name), "s%d", 4 + k / 2);
        return fx_catalog_declare(c, "t", "n", name, &CAT_PARAMS, NULL, NULL);
    }
    snprintf(name, sizeof(name), "s%d", (k / 2) % 4);
    return fx_catalog_set_retention(c, "t", "n", name, 1000 + (uint64_t)k, 0);
}

/* What change |k| makes of the catalogue |st|. */
static void cat_apply(int k, cat_state *st)
{
    if (k % 2 == 0)
        st->declared[4 + k / 2] = true;
    else
        st->retention[(k / 2) % 4] = 1000 + (uint64_t)k;
}

/* Checks the reopened catalogue against |acked| (every answered change)
 * and |asked| (those plus the one in flight at the cut). */
static void cat_expect(fx_catalog *c, const cat_state *acked, const cat_state *asked)
{
    size_t n = 0;
    for (int i = 0; i < CAT_STREAMS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        const fx_catalog_entry *e = fx_catalog_find(c, "t", "n", name);
        if (acked->declared[i])
            assert_non_null(e);
        if (!asked->declared[i])
            assert_null(e);
        if (e == NULL)
            continue;
        n++;
        assert_true(e->retention_bytes == acked->retention[i] ||
                    e->retention_bytes == asked->retention[i]);
    }
    assert_int_equal(fx_catalog_count(c), n);
}

/* The catalogue through its public API under power cuts at every call,
 * torn with every model: it always opens; every change that was answered
 * is in it and the one in flight is there whole or not at all. A catalogue
 * written in place (a torn overwrite mixes old and new bytes) or renamed
 * into place without syncing the directory (an answered change is lost at
 * the cut) fails here. */
static void test_catalogue_changes_survive_torn_power_cuts(void **state)
{
    fx_log_set_level(FX_LOG_ERROR);
    for (uint64_t point = 1; point < 110; point++) {
        for (int model = 0; model < TEAR_NONE; model++) {
            fx_memio *m;
            assert_int_equal(fx_memio_new(&m), 0);
            fx_catalog *c = NULL;
            char err[256] = "";
            assert_int_equal(fx_catalog_open(&c, fx_memio_sio(m), CAT_ROOT, err, sizeof(err)), 0);
            cat_state acked = {0}, asked;
            for (int i = 0; i < 4; i++) {
                char name[16];
                snprintf(name, sizeof(name), "s%d", i);
                assert_int_equal(fx_catalog_declare(c, "t", "n", name, &CAT_PARAMS, NULL, NULL), 0);
                acked.declared[i] = true;
            }
            asked = acked;
            fx_memio_crash_after(m, point);
            for (int k = 0; k < 2 * (CAT_STREAMS - 4); k++) {
                cat_state want = acked;
                cat_apply(k, &want);
                asked = want;
                if (cat_call(c, k) != 0)
                    break; /* asked, not answered: in flight at the cut */
                acked = want;
            }
            fx_catalog_free(c);
            fx_memio_crash_torn(m, (fx_memio_tear)model, point * 7919 + (uint64_t)model);
            int rv = fx_catalog_open(&c, fx_memio_sio(m), CAT_ROOT, err, sizeof(err));
            if (rv != 0)
                fprintf(stderr, "point %" PRIu64 ", tear %s: catalog open: %s\n", point,
                        MODEL_NAMES[model], err);
            assert_int_equal(rv, 0);
            cat_expect(c, &acked, &asked);
            fx_catalog_free(c);
            fx_memio_free(m);
        }
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_on_commit_loses_no_acknowledged_record_at_any_crash_point),
    cmocka_unit_test(test_periodic_loss_stays_within_one_interval),
    cmocka_unit_test(test_periodic_loss_stays_within_the_unsynced_byte_bound),
    cmocka_unit_test(test_none_keeps_a_valid_prefix_and_every_rollover_flush),
    cmocka_unit_test(test_random_damage_is_refused_or_repaired_never_misread),
    cmocka_unit_test(test_catalogue_changes_survive_torn_power_cuts),
};
FX_TEST_MAIN(tests)
