/* Unit tests for fx_ingress (checkpoints 3-4): the policy table, Drop and its
 * counters, Fail and its exact texts, Wait with one deadline over both
 * stages, Backpressure that never sheds, per-connection shares, a top-up wait
 * that holds nothing, and permits released when the worker finishes. Time is
 * a fake |now|. Then the reservation (resv.c) on its own
 * (sub_fixture.h, no QUIC): the reservation a frame header takes, its wait
 * for a full budget, its limit, its cancel and its hand-over to the job. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include "base/metrics.h"
#include "broker/ingress.h"
#include "felix/error.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "broker/bidi.h"
#include "broker/bidi_life.h"
#include "broker/conn_life.h"
#include "broker/reply.h"
#include "broker/resv.h"
#include "fx_test.h"
#include "sub_fixture.h"

#define MS 1000000ull

typedef struct job {
    fx_ingress_req req;
    int id;
} job;

typedef struct world {
    fx_budget global;
    fx_budget conn_a;
    fx_budget conn_b;
    fx_queue q;
    int resumes;
} world;

static void on_resume(void *user)
{
    ((world *)user)->resumes++;
}

/* Budgets: process-wide |global|, connection shares |conn| each; worker
 * queue of |qcap| items (BLOCK: it only refuses, the ingress decides). */
static void world_init(world *w, size_t global, size_t conn, size_t qcap)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(fx_budget_init(&w->global, global, NULL), 0);
    assert_int_equal(fx_budget_init(&w->conn_a, conn, &w->global), 0);
    assert_int_equal(fx_budget_init(&w->conn_b, conn, &w->global), 0);
    fx_queue_opts qo = {.capacity = qcap, .policy = FX_QUEUE_BLOCK};
    assert_int_equal(fx_queue_init(&w->q, &qo), 0);
}

/* The worker side: takes every queued job and finishes it. Returns how many. */
static int drain(world *w)
{
    int n = 0;
    void *item;
    while (fx_queue_pop(&w->q, &item) == 0) {
        fx_ingress_finish(&((job *)item)->req);
        n++;
    }
    return n;
}

static void world_deinit(world *w)
{
    drain(w);
    fx_queue_deinit(&w->q);
    assert_int_equal(fx_budget_in_use(&w->global), 0);
    fx_budget_deinit(&w->conn_a);
    fx_budget_deinit(&w->conn_b);
    fx_budget_deinit(&w->global);
}

static fx_ingress_outcome admit(world *w, fx_budget *conn, job *j, size_t n, fx_ingress_policy p,
                                uint64_t now)
{
    fx_ingress_req_init(&j->req, j, n, p, 100 * MS, on_resume, w);
    fx_ingress_target t = {.conn_budget = conn, .queue = &w->q};
    return fx_ingress_admit(&t, &j->req, now);
}

static fx_ingress_outcome again(world *w, fx_budget *conn, job *j, uint64_t now)
{
    fx_ingress_target t = {.conn_budget = conn, .queue = &w->q};
    return fx_ingress_admit(&t, &j->req, now);
}

static fx_metrics_snapshot snap(void)
{
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    return m;
}

static void test_policy_table(void **state)
{
    assert_int_equal(fx_ingress_policy_for(false, false, false), FX_INGRESS_DROP);
    assert_int_equal(fx_ingress_policy_for(false, true, false), FX_INGRESS_DROP);
    assert_int_equal(fx_ingress_policy_for(false, false, true), FX_INGRESS_BACKPRESSURE);
    assert_int_equal(fx_ingress_policy_for(true, false, false), FX_INGRESS_FAIL);
    assert_int_equal(fx_ingress_policy_for(true, false, true), FX_INGRESS_FAIL);
    assert_int_equal(fx_ingress_policy_for(true, true, false), FX_INGRESS_WAIT);
    assert_int_equal(fx_ingress_policy_for(true, true, true), FX_INGRESS_WAIT);
}

static void test_drop_counts(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    job j[4];
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 10, FX_INGRESS_DROP, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 10, FX_INGRESS_DROP, 0), FX_INGRESS_DROPPED);
    assert_int_equal(fx_budget_in_use(&w.global), 10); /* the dropped job's bytes came back */
    /* Bytes exhausted sheds too (90 left < 95). */
    assert_int_equal(admit(&w, &w.conn_a, &j[2], 95, FX_INGRESS_DROP, 0), FX_INGRESS_DROPPED);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.ingress_dropped - m0.c.ingress_dropped, 2);
    assert_int_equal(m1.c.ingress_queue_full - m0.c.ingress_queue_full, 1);
    assert_int_equal(m1.c.ingress_conn_bytes_full - m0.c.ingress_conn_bytes_full, 1);
    assert_int_equal(m1.c.ingress_rejected - m0.c.ingress_rejected, 0);
    assert_int_equal(m1.g.ingress_queue_depth - m0.g.ingress_queue_depth, 1);
    assert_int_equal(w.resumes, 0);
    assert_int_equal(drain(&w), 1);
    assert_int_equal(fx_budget_in_use(&w.global), 0);
    assert_int_equal(snap().g.ingress_queue_depth - m0.g.ingress_queue_depth, 0);
    world_deinit(&w);
}

static void test_fail_texts(void **state)
{
    world w;
    world_init(&w, 100, 60, 1);
    job j[6];
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 50, FX_INGRESS_FAIL, 0), FX_INGRESS_ADMITTED);
    /* Queue full. */
    assert_int_equal(admit(&w, &w.conn_b, &j[1], 1, FX_INGRESS_FAIL, 0), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, "publish queue full");
    /* conn_a has 10 of its 60 left. */
    assert_int_equal(admit(&w, &w.conn_a, &j[2], 20, FX_INGRESS_FAIL, 0), FX_INGRESS_FAILED);
    assert_string_equal(j[2].req.error, "publish ingress per-connection byte budget exhausted");
    /* conn_b has its whole share, but only 50 remain process-wide. */
    assert_int_equal(admit(&w, &w.conn_b, &j[3], 55, FX_INGRESS_FAIL, 0), FX_INGRESS_FAILED);
    assert_string_equal(j[3].req.error, "publish ingress byte budget exhausted");
    /* Larger than any budget could ever hold. */
    assert_int_equal(admit(&w, &w.conn_b, &j[4], 61, FX_INGRESS_FAIL, 0), FX_INGRESS_FAILED);
    assert_string_equal(j[4].req.error, FX_INGRESS_MSG_TOO_BIG);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.ingress_rejected - m0.c.ingress_rejected, 4);
    assert_int_equal(m1.c.ingress_dropped - m0.c.ingress_dropped, 0);
    assert_int_equal(m1.c.ingress_bytes_full - m0.c.ingress_bytes_full, 1);
    assert_int_equal(m1.c.ingress_conn_bytes_full - m0.c.ingress_conn_bytes_full, 1);
    assert_int_equal(fx_budget_in_use(&w.global), 50);
    world_deinit(&w);
}

static void test_conn_share_does_not_starve_other_conn(void **state)
{
    world w;
    world_init(&w, 100, 60, 16);
    job j[5];
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 60, FX_INGRESS_FAIL, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 1, FX_INGRESS_FAIL, 0), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, FX_INGRESS_MSG_CONN_BYTES);
    assert_int_equal(admit(&w, &w.conn_a, &j[2], 1, FX_INGRESS_DROP, 0), FX_INGRESS_DROPPED);
    /* conn_b still gets the 40 the process has left. */
    assert_int_equal(admit(&w, &w.conn_b, &j[3], 40, FX_INGRESS_FAIL, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(fx_budget_in_use(&w.conn_a), 60);
    assert_int_equal(fx_budget_in_use(&w.conn_b), 40);
    assert_int_equal(fx_budget_in_use(&w.global), 100);
    assert_int_equal(drain(&w), 2);
    assert_int_equal(fx_budget_in_use(&w.global), 0);
    world_deinit(&w);
}

static void test_backpressure_never_sheds(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    job j[3];
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 10, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_ADMITTED);
    /* Queue full: parks, however long it takes (no deadline). */
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 80, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_PARKED);
    /* Bytes exhausted (90 held, 20 asked): parks on the budget. */
    assert_int_equal(admit(&w, &w.conn_a, &j[2], 20, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_PARKED);
    assert_int_equal(w.resumes, 0);

    /* The worker takes job 0: the queue resumes job 1 and the freed bytes
     * grant job 2's budget wait. */
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 2);
    assert_int_equal(again(&w, &w.conn_a, &j[1], 3600000 * MS), FX_INGRESS_ADMITTED);
    assert_int_equal(again(&w, &w.conn_a, &j[2], 3600000 * MS), FX_INGRESS_PARKED); /* queue */
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 3);
    assert_int_equal(again(&w, &w.conn_a, &j[2], 3600000 * MS), FX_INGRESS_ADMITTED);
    assert_int_equal(drain(&w), 1);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.ingress_dropped - m0.c.ingress_dropped, 0);
    assert_int_equal(m1.c.ingress_rejected - m0.c.ingress_rejected, 0);
    assert_int_equal(m1.c.ingress_waited - m0.c.ingress_waited, 2); /* once per request */
    world_deinit(&w);
}

static void test_backpressure_cancel_on_connection_close(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    job j[3];
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 90, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_ADMITTED);
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 5, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_PARKED); /* on the queue, holding 5 bytes */
    assert_int_equal(admit(&w, &w.conn_a, &j[2], 20, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_PARKED); /* on the budget */
    fx_ingress_target t = {.conn_budget = &w.conn_a, .queue = &w.q};
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(fx_ingress_cancel(&t, &j[1].req), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, "publish cancelled: connection closed");
    assert_int_equal(fx_ingress_cancel(&t, &j[2].req), FX_INGRESS_FAILED);
    assert_int_equal(fx_budget_in_use(&w.global), 90);
    assert_int_equal(snap().c.ingress_backpressure_cancelled - m0.c.ingress_backpressure_cancelled,
                     2);
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 0); /* cancelled waiters are not resumed */
    world_deinit(&w);
}

static void test_wait_times_out_with_one_budget(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    fx_ingress_target t = {.conn_budget = &w.conn_a, .queue = &w.q};
    job j[3];
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 90, FX_INGRESS_WAIT, 0), FX_INGRESS_ADMITTED);
    /* t = 0: 20 bytes do not fit; wait with a 100 ms budget. */
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 20, FX_INGRESS_WAIT, 0), FX_INGRESS_PARKED);
    assert_int_equal(j[1].req.deadline_ns, 100 * MS);
    /* t = 60 ms: the worker frees the bytes (and the queue slot) ... */
    void *item;
    assert_int_equal(fx_queue_pop(&w.q, &item), 0);
    fx_ingress_finish(&((job *)item)->req);
    assert_int_equal(w.resumes, 1);
    /* ... but another job takes the slot first, so job 1 waits on the queue. */
    assert_int_equal(admit(&w, &w.conn_b, &j[2], 1, FX_INGRESS_FAIL, 60 * MS), FX_INGRESS_ADMITTED);
    assert_int_equal(again(&w, &w.conn_a, &j[1], 60 * MS), FX_INGRESS_PARKED);
    assert_int_equal(j[1].req.deadline_ns, 100 * MS); /* not restarted by the second stage */
    /* t = 100 ms: the timer fires. */
    assert_int_equal(fx_ingress_cancel(&t, &j[1].req), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, "publish enqueue timed out");
    assert_int_equal(fx_budget_in_use(&w.global), 1);

    /* Timing out in the first stage says so. */
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 100, FX_INGRESS_WAIT, 200 * MS),
                     FX_INGRESS_PARKED);
    assert_int_equal(fx_ingress_cancel(&t, &j[1].req), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, "publish admission timed out");
    world_deinit(&w);
}

static void test_wait_enqueues_when_space_frees_in_time(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    job j[2];
    fx_metrics_snapshot m0 = snap();
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 1, FX_INGRESS_WAIT, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 1, FX_INGRESS_WAIT, 10 * MS), FX_INGRESS_PARKED);
    assert_int_equal(j[1].req.deadline_ns, 110 * MS);
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 1);
    assert_int_equal(again(&w, &w.conn_a, &j[1], 109 * MS), FX_INGRESS_ADMITTED);
    fx_metrics_snapshot m1 = snap();
    assert_int_equal(m1.c.ingress_waited - m0.c.ingress_waited, 1);
    assert_int_equal(m1.c.ingress_rejected - m0.c.ingress_rejected, 0);
    assert_int_equal(m1.c.ingress_backpressure_cancelled - m0.c.ingress_backpressure_cancelled, 0);
    world_deinit(&w);
}

static void test_wait_late_resume_fails_after_deadline(void **state)
{
    world w;
    world_init(&w, 100, 100, 1);
    job j[2];
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 1, FX_INGRESS_WAIT, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(admit(&w, &w.conn_a, &j[1], 1, FX_INGRESS_WAIT, 0), FX_INGRESS_PARKED);
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 1);
    /* The resume is handled only at 150 ms, after the 100 ms deadline. */
    assert_int_equal(again(&w, &w.conn_a, &j[1], 150 * MS), FX_INGRESS_FAILED);
    assert_string_equal(j[1].req.error, FX_INGRESS_MSG_ENQUEUE_TIMEOUT);
    assert_int_equal(fx_budget_in_use(&w.global), 0);
    /* In time, it is admitted. */
    assert_int_equal(admit(&w, &w.conn_a, &j[0], 1, FX_INGRESS_WAIT, 200 * MS),
                     FX_INGRESS_ADMITTED);
    world_deinit(&w);
}

/* A job that needs more than its adopted reservation and must wait for the
 * rest gives the reservation back and waits for the whole: waiting while
 * holding it could deadlock behind a header reservation that waits for those
 * very bytes (the budget is FIFO). */
static void test_top_up_wait_holds_nothing(void **state)
{
    world w;
    world_init(&w, 100, 100, 4);
    job other, j;
    assert_int_equal(admit(&w, &w.conn_a, &other, 60, FX_INGRESS_BACKPRESSURE, 0),
                     FX_INGRESS_ADMITTED);
    fx_permit held = {0};
    assert_int_equal(fx_budget_try_acquire(&w.conn_a, 30, &held), 0); /* the frame header's */
    fx_ingress_req_init(&j.req, &j, 50, FX_INGRESS_BACKPRESSURE, 0, on_resume, &w);
    fx_ingress_req_adopt(&j.req, &held);
    fx_ingress_target t = {.conn_budget = &w.conn_a, .queue = &w.q};
    /* 90 in use, 20 more wanted: it parks and holds none of its 30. */
    assert_int_equal(fx_ingress_admit(&t, &j.req, 0), FX_INGRESS_PARKED);
    assert_int_equal(fx_budget_in_use(&w.conn_a), 60);
    /* The other job finishes: the whole 50 is granted. */
    assert_int_equal(drain(&w), 1);
    assert_int_equal(w.resumes, 1);
    assert_int_equal(fx_ingress_admit(&t, &j.req, 0), FX_INGRESS_ADMITTED);
    assert_int_equal(fx_budget_in_use(&w.conn_a), 50);
    assert_int_equal(drain(&w), 1);
    world_deinit(&w);
}

/* ---- the frame-header reservation (connection loop) ------------------------ */

/* A client bidi stream on the fixture's connection, whose share of
 * |share| bytes comes from a process-wide budget of |global|. */
static fxb_bidi *resv_bidi(fix *f, size_t global, size_t share)
{
    assert_int_equal(fx_budget_init(&f->b.budget, global, NULL), 0);
    assert_int_equal(fx_budget_init(&f->c.budget, share, &f->b.budget), 0);
    fxb_bidi *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->kind = FXB_KIND_BIDI;
    s->refs = 1;
    s->conn = &f->c;
    fxb_conn_ref(&f->c);
    fx_frame_decoder_init(&s->dec, f->b.o.max_frame_bytes);
    fxb_ingress_bidi_init(s);
    fxb_reply_bidi_init(s, NULL);
    return s;
}

static void resv_free(fix *f, fxb_bidi *s)
{
    fxb_ingress_resv_cancel(s);
    fix_drain(f);
    assert_int_equal(s->refs, 1);
    fxb_bidi_unref(s);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 0);
    fx_budget_deinit(&f->c.budget);
    fx_budget_deinit(&f->b.budget);
    fix_free(f);
}

static void test_header_reserves_the_announced_bytes(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = resv_bidi(f, 4096, 2048);
    fx_metrics_snapshot a = snap();
    assert_int_equal(fxb_ingress_reserve(s, 0x1, 1000, false), 0);
    fx_metrics_snapshot b = snap();
    assert_int_equal(s->resv.permit.n, 1000);
    assert_int_equal(fx_budget_in_use(&f->c.budget), 1000);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 1000);
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 1000);
    assert_true(fx_timer_is_armed(&s->resv.frame_timer)); /* frame_read_timeout runs */
    fxb_ingress_resv_release(s);
    b = snap();
    assert_int_equal(fx_budget_in_use(&f->b.budget), 0);
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 0);
    resv_free(f, s);
}

/* With the budget full the header waits (the stream reads nothing) and is
 * granted, on its loop, once bytes are freed. */
static void test_header_waits_for_a_full_budget_then_holds(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = resv_bidi(f, 1500, 1500);
    fx_permit other = {0};
    assert_int_equal(fx_budget_try_acquire(&f->c.budget, 1000, &other), 0);
    fx_metrics_snapshot a = snap();
    assert_int_equal(fxb_ingress_reserve(s, 0x1, 1000, false), 1);
    assert_true(s->resv.wait);
    assert_int_equal(s->refs, 2); /* for the grant's task */
    fx_metrics_snapshot b = snap();
    assert_int_equal(b.c.ingress_reserve_waited - a.c.ingress_reserve_waited, 1);
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 0);
    fx_permit_release(&other);
    fix_drain(f); /* the grant comes back to the connection's loop */
    assert_false(s->resv.wait);
    assert_int_equal(s->refs, 1);
    assert_int_equal(s->resv.permit.n, 1000);
    b = snap();
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 1000);
    resv_free(f, s);
}

/* A frame larger than the connection's share can never be held: the stream
 * fails (counted), nothing is taken. */
static void test_header_larger_than_the_share_fails_the_stream(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = resv_bidi(f, 8192, 1000);
    fx_metrics_snapshot a = snap();
    assert_int_equal(fxb_ingress_reserve(s, 0x1, 1001, false), -1);
    fx_metrics_snapshot b = snap();
    assert_true(s->ended);
    assert_int_equal(b.c.broker_stream_errors - a.c.broker_stream_errors, 1);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 0);
    resv_free(f, s);
}

/* A stream that goes away while its header waits cancels the wait: a later
 * free of bytes grants it nothing. */
static void test_cancel_while_waiting_takes_nothing(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = resv_bidi(f, 1500, 1500);
    fx_permit other = {0};
    assert_int_equal(fx_budget_try_acquire(&f->c.budget, 1000, &other), 0);
    assert_int_equal(fxb_ingress_reserve(s, 0x1, 1000, false), 1);
    fxb_ingress_resv_cancel(s);
    assert_false(s->resv.wait);
    assert_int_equal(s->refs, 1);
    fx_permit_release(&other);
    fix_drain(f);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 0);
    assert_int_equal(s->resv.permit.n, 0);
    resv_free(f, s);
}

/* The job takes the reservation over: the bytes stay held (by the job) and
 * leave felix_broker_ingress_reserved_bytes; they are freed with the job. */
static void test_job_adopts_the_reservation(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = resv_bidi(f, 4096, 4096);
    fx_metrics_snapshot a = snap();
    assert_int_equal(fxb_ingress_reserve(s, 0x1, 1000, false), 0);
    fx_loop_timer_cancel(f->loop, &s->resv.frame_timer); /* the body arrived */
    fx_ingress_req r;
    fx_ingress_req_init(&r, NULL, 1000, FX_INGRESS_DROP, 0, NULL, NULL);
    fxb_ingress_resv_adopt(s, &r);
    fx_metrics_snapshot b = snap();
    assert_null(s->resv.permit.budget);
    assert_int_equal(r.held.n, 1000);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 1000);
    assert_int_equal(b.g.ingress_reserved_bytes - a.g.ingress_reserved_bytes, 0);
    fx_ingress_finish(&r);
    assert_int_equal(fx_budget_in_use(&f->b.budget), 0);
    resv_free(f, s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_policy_table),
    cmocka_unit_test(test_drop_counts),
    cmocka_unit_test(test_fail_texts),
    cmocka_unit_test(test_conn_share_does_not_starve_other_conn),
    cmocka_unit_test(test_backpressure_never_sheds),
    cmocka_unit_test(test_backpressure_cancel_on_connection_close),
    cmocka_unit_test(test_wait_times_out_with_one_budget),
    cmocka_unit_test(test_wait_enqueues_when_space_frees_in_time),
    cmocka_unit_test(test_wait_late_resume_fails_after_deadline),
    cmocka_unit_test(test_top_up_wait_holds_nothing),
    cmocka_unit_test(test_header_reserves_the_announced_bytes),
    cmocka_unit_test(test_header_waits_for_a_full_budget_then_holds),
    cmocka_unit_test(test_header_larger_than_the_share_fails_the_stream),
    cmocka_unit_test(test_cancel_while_waiting_takes_nothing),
    cmocka_unit_test(test_job_adopts_the_reservation),
};
FX_TEST_MAIN(tests)
