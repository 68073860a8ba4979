/* Unit tests of a consumer group's pages from disk (group_page.c) without a
 * broker: a real log written with fx_dlog in a catalogued directory, the
 * durable stage's nouns filled by hand (a worker loop and a replay loop on
 * their own threads), and the page read on the replay loop and answered on
 * the worker loop. Bounds (records, bytes, the end), the log's first offset
 * from the stage and from a read below retention, a failed read counted
 * and retried, and a page freed while its read is in flight. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_base */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/metrics.h"
#include <time.h>

#include "base/loop.h"
#include "broker/durable_int.h"
#include "broker/group_page.h"
#include "broker/registry.h"
#include "broker/replay.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "fx_test.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/format.h"

#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))

/* ---- fixture: a stage of one worker and a log ------------------------------------------- */

typedef struct fix {
    char root[64];
    char dir[1024];
    fx_registry *reg;
    fx_stream_handle *h;
    fx_catalog *cat;
    fxb_durable d;
    fxb_storage st;
    struct fxb_dworker dw;
    fxb_worker w;
    fx_dlog *log;
    fxb_gpage *p;
    _Atomic int answers;
} fix;

static void on_answer(void *user)
{
    fix *f = user;
    atomic_fetch_add(&f->answers, 1);
}

static fix *fix_new(uint64_t segment_bytes)
{
    fix *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->root, sizeof(f->root), "/tmp/fxgpageXXXXXX");
    assert_non_null(mkdtemp(f->root));
    fx_registry_opts ro = {.auto_create = true};
    assert_int_equal(fx_registry_new(&f->reg, &ro), 0);
    fx_registry_err err;
    bool created;
    assert_int_equal(fx_registry_create(f->reg, (fx_wire_slice){(const uint8_t *)"t1", 2},
                                        (fx_wire_slice){(const uint8_t *)"ns", 2},
                                        (fx_wire_slice){(const uint8_t *)"s", 1}, &f->h, &created,
                                        &err),
                     0);
    char why[512];
    assert_int_equal(fx_catalog_open(&f->cat, NULL, f->root, why, sizeof(why)), 0);
    const fx_catalog_entry *e;
    fx_catalog_params cp = {.segment_bytes = segment_bytes, .index_spacing_bytes = 256};
    assert_int_equal(fx_catalog_declare(f->cat, "t1", "ns", "s", &cp, NULL, &e), 0);
    assert_int_equal(fx_catalog_dir_path(f->cat, e, f->dir, sizeof(f->dir)), 0);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = segment_bytes;
    c.index_spacing_bytes = 256;
    c.preallocate = false;
    assert_int_equal(fx_dlog_open(&f->log, f->dir, &c, 1, NULL), 0);
    pthread_mutex_init(&f->d.cat_mu, NULL);
    f->d.cat = f->cat;
    f->d.o.max_records_per_read = 16;
    f->st.d = &f->d;
    f->dw.st = &f->st;
    f->w.dur = &f->dw;
    assert_int_equal(fx_loop_new(&f->w.loop, &(fx_loop_opts){.name = "w", .cpu = -1}), 0);
    assert_int_equal(fx_loop_new(&f->st.rloop, &(fx_loop_opts){.name = "r", .cpu = -1}), 0);
    assert_int_equal(fx_loop_start(f->w.loop), 0);
    assert_int_equal(fx_loop_start(f->st.rloop), 0);
    return f;
}

/* Appends |n| records "rec-<offset>" padded to |len| bytes (0: unpadded). */
static void append(fix *f, uint64_t n, size_t len)
{
    char *buf = malloc(len > 64 ? len : 64);
    assert_non_null(buf);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = fx_dlog_next_offset(f->log);
        int k = snprintf(buf, 64, "rec-%llu", (unsigned long long)off);
        size_t sz = len > (size_t)k ? len : (size_t)k;
        memset(buf + k, 'x', sz - (size_t)k);
        fx_dlog_iov iov = {buf, (uint32_t)sz};
        uint64_t first;
        assert_int_equal(fx_dlog_append(f->log, &iov, 1, 1, &first), 0);
        assert_int_equal(first, off);
    }
    free(buf);
}

static void fix_free(fix *f)
{
    fx_loop_stop(f->st.rloop);
    fx_loop_stop(f->w.loop);
    fxb_gpage_free_stopped(f->p);
    fx_loop_free(f->st.rloop);
    fx_loop_free(f->w.loop);
    fx_dlog_close(f->log, false);
    for (dstats *x = f->d.stats; x != NULL;) {
        dstats *n = x->next;
        free(x);
        x = n;
    }
    fx_catalog_free(f->cat);
    pthread_mutex_destroy(&f->d.cat_mu);
    fx_stream_handle_unref(f->h);
    fx_registry_free(f->reg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->root);
    assert_int_equal(system(cmd), 0);
    free(f);
}

/* ---- calls on the worker loop --------------------------------------------------------- */

typedef struct call {
    fix *f;
    int op; /* 0 new, 1 want, 2 want then free */
    uint64_t want, to;
    int rv;
} call;

static void on_worker(size_t i, void *data)
{
    (void)i;
    call *c = data;
    fix *f = c->f;
    switch (c->op) {
    case 0:
        f->p = fxb_gpage_new(&f->w, f->h, on_answer, f, &c->rv);
        break;
    case 1:
        fxb_gpage_want(f->p, c->want, c->to);
        break;
    default:
        fxb_gpage_want(f->p, c->want, c->to);
        fxb_gpage_free(f->p); /* its answer frees it */
        f->p = NULL;
        break;
    }
}

static void run(fix *f, int op, uint64_t want, uint64_t to)
{
    call c = {.f = f, .op = op, .want = want, .to = to};
    fx_loop_ask_req q = {.fn = on_worker, .data = &c, .size = 0, .timeout_ns = FX_LOOP_FOREVER};
    assert_int_equal(fx_loop_ask(f->w.loop, &q), 0);
    assert_int_equal(c.rv, 0);
}

/* Asks for the page at |want| (ending before |to|) and waits for its answer:
 * the reader ran (replay loop), then the answer (worker loop). */
static void want_page(fix *f, uint64_t want, uint64_t to)
{
    int before = atomic_load(&f->answers);
    run(f, 1, want, to);
    fx_loop_barrier(f->st.rloop);
    fx_loop_barrier(f->w.loop);
    assert_int_equal(atomic_load(&f->answers), before + 1);
}

/* Checks that the page holds [from, from + n) and nothing next to it. */
static void expect_page(fix *f, uint64_t from, uint32_t n)
{
    fx_wire_slice sl[64];
    assert_true(n <= 64);
    assert_int_equal(fxb_gpage_read(f->p, from, 64, sl), n);
    for (uint32_t i = 0; i < n; i++) {
        char want[32];
        int k = snprintf(want, sizeof(want), "rec-%llu", (unsigned long long)(from + i));
        assert_true(sl[i].len >= (size_t)k);
        assert_memory_equal(sl[i].ptr, want, (size_t)k);
    }
    assert_int_equal(fxb_gpage_read(f->p, from + n, 1, sl), 0);
    if (from > 0)
        assert_int_equal(fxb_gpage_read(f->p, from - 1, 1, sl), 0);
}

/* ---- cases ---------------------------------------------------------------------------- */

static void test_a_page_holds_at_most_max_records_and_never_reaches_its_end(void **state)
{
    (void)state;
    fix *f = fix_new(1024); /* a few dozen records a segment: reads cross segments */
    append(f, 100, 0);
    run(f, 0, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    want_page(f, 0, 100);
    expect_page(f, 0, 16);
    want_page(f, 37, 45); /* mid-segment, through the sparse index; ends before 45 */
    expect_page(f, 37, 8);
    want_page(f, 90, 100);
    expect_page(f, 90, 10);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, group_log_pages), 3);
    assert_int_equal(DELTA(a, b, group_log_read_errors), 0);
    /* A page that holds the offset asked is not read again. */
    int before = atomic_load(&f->answers);
    run(f, 1, 95, 100);
    fx_loop_barrier(f->st.rloop);
    fx_loop_barrier(f->w.loop);
    assert_int_equal(atomic_load(&f->answers), before);
    fix_free(f);
}

static void test_a_page_holds_at_most_one_mib_of_payloads_or_one_larger_record(void **state)
{
    (void)state;
    fix *f = fix_new(16u << 20);
    append(f, 5, 300u << 10); /* 300 KiB each: three make a page */
    append(f, 1, (3u << 20) / 2);
    append(f, 1, 0);
    run(f, 0, 0, 0);
    want_page(f, 0, 7);
    expect_page(f, 0, 3);
    want_page(f, 5, 7); /* 1.5 MiB alone */
    fx_wire_slice sl[2];
    assert_int_equal(fxb_gpage_read(f->p, 5, 2, sl), 1);
    assert_int_equal(sl[0].len, (3u << 20) / 2);
    fix_free(f);
}

static void test_the_first_offset_comes_from_the_stage_then_from_a_read(void **state)
{
    (void)state;
    fix *f = fix_new(512);
    append(f, 200, 0);
    fx_dlog_retained r;
    assert_int_equal(fx_dlog_retain(f->log, 1024, 0, 1, &r), 0);
    assert_true(r.first_offset > 20);
    /* The storage thread published an older first offset. */
    dstats *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    x->handle_id = fx_stream_handle_id(f->h);
    x->state = DSTATE_OPEN;
    atomic_store(&x->first, 7);
    atomic_store(&x->next_off, 200);
    f->d.stats = x;
    uint64_t first = 0, next = 0;
    assert_int_equal(fxb_gpage_log_span(&f->w, f->h, &first, &next), 0);
    assert_int_equal(first, 7);
    assert_int_equal(next, 200);
    run(f, 0, 0, 0);
    assert_int_equal(fxb_gpage_low(f->p), 7);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    want_page(f, 10, 200); /* gone: the answer says where the log starts */
    assert_int_equal(fxb_gpage_low(f->p), r.first_offset);
    fx_wire_slice sl;
    assert_int_equal(fxb_gpage_read(f->p, 10, 1, &sl), 0);
    want_page(f, r.first_offset, 200);
    expect_page(f, r.first_offset, 16);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, group_log_read_errors), 0);
    x->state = DSTATE_RECOVERING;
    assert_int_equal(fxb_gpage_log_span(&f->w, f->h, &first, &next), -EAGAIN);
    fix_free(f);
}

static void test_a_failed_read_is_counted_and_tried_again_after_the_retry_delay(void **state)
{
    (void)state;
    fix *f = fix_new(1024);
    append(f, 50, 0);
    run(f, 0, 0, 0);
    /* Damage the payload of record 3 (its checksum no longer matches). */
    char seg[1200];
    snprintf(seg, sizeof(seg), "%s/00000000000000000000.log", f->dir);
    FILE *fp = fopen(seg, "r+b");
    assert_non_null(fp);
    /* Records 0..9 are "rec-N", 5 bytes: 3's payload, after its header. */
    long pos = FX_SEG_HEADER_LEN + 3 * (FX_REC_HEADER_LEN + 5) + FX_REC_HEADER_LEN + 1;
    assert_int_equal(fseek(fp, pos, SEEK_SET), 0);
    assert_int_equal(fputc('#', fp), '#');
    fclose(fp);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    uint64_t t0 = fx_now_ns();
    want_page(f, 0, 50);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, group_log_read_errors), 1);
    assert_int_equal(DELTA(a, b, group_log_pages), 0);
    fx_wire_slice sl;
    assert_int_equal(fxb_gpage_read(f->p, 0, 1, &sl), 0); /* nothing skipped, nothing read */
    /* Asked again at once: it waits for its retry. */
    int before = atomic_load(&f->answers);
    run(f, 1, 0, 50);
    fx_loop_barrier(f->st.rloop);
    fx_loop_barrier(f->w.loop);
    assert_int_equal(atomic_load(&f->answers), before);
    /* The retry timer calls back once it is due. */
    while (atomic_load(&f->answers) == before && fx_now_ns() - t0 < 5000000000ull)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    assert_int_equal(atomic_load(&f->answers), before + 1);
    assert_true(fx_now_ns() - t0 >= FXB_GPAGE_RETRY_NS);
    /* From past the damage it reads. */
    want_page(f, 4, 50);
    expect_page(f, 4, 16);
    fix_free(f);
}

static void test_a_page_freed_while_its_read_is_in_flight_is_freed_by_the_answer(void **state)
{
    (void)state;
    fix *f = fix_new(1024);
    append(f, 50, 0);
    run(f, 0, 0, 0);
    int before = atomic_load(&f->answers);
    run(f, 2, 0, 50);
    fx_loop_barrier(f->st.rloop);
    fx_loop_barrier(f->w.loop);
    assert_int_equal(atomic_load(&f->answers), before); /* no callback to a freed group */
    assert_null(f->p);
    fix_free(f); /* ASan: nothing leaked, nothing used after its free */
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_page_holds_at_most_max_records_and_never_reaches_its_end),
    cmocka_unit_test(test_a_page_holds_at_most_one_mib_of_payloads_or_one_larger_record),
    cmocka_unit_test(test_the_first_offset_comes_from_the_stage_then_from_a_read),
    cmocka_unit_test(test_a_failed_read_is_counted_and_tried_again_after_the_retry_delay),
    cmocka_unit_test(test_a_page_freed_while_its_read_is_in_flight_is_freed_by_the_answer),
};

FX_TEST_MAIN(tests)
