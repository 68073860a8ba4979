/* Unit tests for the worker stage (worker.c) on its own: a worker made by
 * fxb_worker_init whose loop never runs a thread (sub_fixture.h drains it on
 * the test thread), fed jobs by hand through its queue. Its stream table by
 * the placement slot, jobs appended in queue order and their commit results,
 * a job for a deleted stream, a job back from storage whose log offset is
 * not the ring's tail, and a deleted stream's end that waits for the jobs
 * queued before it. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_base */
#include "sub_fixture.h"

#include <stdio.h>

#include "base/placement.h"
#include "broker/conn_life.h"
#include "broker/durable.h"
#include "broker/registry.h"
#include "broker/worker.h"
#include "felix/error.h"

typedef struct wfix {
    fix *f;
    fx_registry *reg;
    fxb_worker w; /* worker |index| of |nworkers| */
} wfix;

static wfix *wfix_new(uint32_t nworkers, uint32_t index)
{
    wfix *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    x->f = fix_new(NULL);
    x->f->b.nworkers = nworkers;
    assert_int_equal(fxb_worker_init(&x->f->b, &x->w, index), 0);
    fx_registry_opts ro = {.auto_create = true};
    assert_int_equal(fx_registry_new(&x->reg, &ro), 0);
    return x;
}

static void wfix_free(wfix *x)
{
    fx_loop_stop(x->w.loop);
    assert_int_equal(fx_loop_run(x->w.loop), 0);
    fxb_worker_deinit(&x->w);
    fx_registry_free(x->reg);
    fix_free(x->f);
    free(x);
}

static fx_wire_slice S(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* The handle of stream |name| (the caller's reference). */
static fx_stream_handle *handle(wfix *x, const char *name)
{
    fx_stream_handle *h;
    fx_registry_err err;
    assert_int_equal(fx_registry_resolve(x->reg, S("t"), S("ns"), S(name), &h, &err), 0);
    return h;
}

static const fx_wire_slice PAY[2] = {{(const uint8_t *)"x", 1}, {(const uint8_t *)"yy", 2}};

/* A job of |count| static payloads for |h| on the fixture's connection, as
 * ingress makes one (no bytes held), queued on the worker. */
static void queue_job(wfix *x, fx_stream_handle *h, uint32_t count)
{
    fxb_job *j = calloc(1, sizeof(*j) + count * sizeof(fx_wire_slice));
    assert_non_null(j);
    j->payloads = (fx_wire_slice *)(j + 1);
    for (uint32_t i = 0; i < count; i++)
        j->payloads[i] = PAY[i % 2];
    j->count = count;
    j->nreq = 1;
    j->h = fx_stream_handle_ref(h);
    j->conn = &x->f->c;
    fxb_conn_ref(&x->f->c);
    j->w = &x->w;
    fx_ingress_req_init(&j->req, j, 0, FX_INGRESS_DROP, 0, NULL, NULL);
    assert_int_equal(fx_queue_push(&x->w.jobs, j), 0);
}

/* Moves the job queue_job just queued to the storage stage as back from
 * storage, its records written to the log from offset |sfirst| (the queue
 * holds only it). */
static void mark_stored(wfix *x, uint64_t sfirst)
{
    void *item;
    assert_int_equal(fx_queue_pop(&x->w.jobs, &item), 0);
    assert_int_equal(fxb_durable_test_stored(&x->w, item, sfirst), 0);
}

/* Runs the worker's doorbell task and whatever it posts. */
static void drain(wfix *x)
{
    fxb_worker_kick(&x->w);
    fx_loop_stop(x->w.loop);
    assert_int_equal(fx_loop_run(x->w.loop), 0);
}

/* ---- the stream table ----------------------------------------------------------- */

/* Worker 1 of 3 (ids k * 3 + 1) creates a stream's state on first use and
 * finds it again without creating. */
static void test_streams_created_on_first_use_and_found_again(void **state)
{
    wfix *x = wfix_new(3, 1);
    fx_stream_handle *h[3];
    const char *names[] = {"a", "b", "c", "d", "e", "f", "g"};
    size_t mine = 0;
    for (size_t i = 0; i < 7 && mine < 3; i++) {
        fx_stream_handle *hh = handle(x, names[i]);
        if (fx_placement_worker_for(fx_stream_handle_id(hh), 3) == 1)
            h[mine++] = hh;
        else
            fx_stream_handle_unref(hh);
    }
    assert_int_equal(mine, 3);
    for (size_t i = 0; i < 3; i++) {
        uint64_t id = fx_stream_handle_id(h[i]);
        assert_null(fxb_worker_stream_if_any(&x->w, h[i]));
        fx_stream *st = fxb_worker_stream(&x->w, h[i]);
        assert_non_null(st);
        assert_int_equal(fx_placement_worker_for(id, 3), 1);
        assert_ptr_equal(fxb_worker_stream_if_any(&x->w, h[i]), st);
        assert_ptr_equal(fxb_worker_stream(&x->w, h[i]), st);
    }
    for (size_t i = 0; i < 3; i++)
        fx_stream_handle_unref(h[i]);
    wfix_free(x);
}

/* Deletes stream |name| (the registry's side) and ends it on the worker, as
 * a deletion's end task does once older jobs completed. */
static void delete_stream(wfix *x, fx_stream_handle *h, const char *name)
{
    assert_true(fx_registry_remove(x->reg, S("t"), S("ns"), S(name)));
    fxb_worker_end_stream(&x->w, h);
    assert_null(fxb_worker_stream_if_any(&x->w, h));
}

/* Handle ids only grow, but the worker's table follows the streams it
 * holds: 3000 streams created and deleted (4 live at a time) leave it at
 * its minimum size; 200 live streams grow it, all found, and deleting them
 * shrinks it back. */
static void test_stream_table_size_follows_live_streams_under_churn(void **state)
{
    wfix *x = wfix_new(3, 1);
    enum { LIVE = 4, CHURN = 3000, MANY = 200 };
    fx_stream_handle *live[LIVE] = {0};
    char names[LIVE][16];
    char name[16];
    size_t mine = 0;
    for (int i = 0; i < CHURN; i++) {
        snprintf(name, sizeof(name), "c%d", i);
        fx_stream_handle *h = handle(x, name);
        if (fx_placement_worker_for(fx_stream_handle_id(h), 3) != 1) {
            fx_stream_handle_unref(h);
            continue;
        }
        size_t k = mine++ % LIVE;
        if (live[k] != NULL) {
            assert_non_null(fxb_worker_stream_if_any(&x->w, live[k]));
            delete_stream(x, live[k], names[k]);
            fx_stream_handle_unref(live[k]);
        }
        live[k] = h;
        snprintf(names[k], sizeof(names[k]), "%s", name);
        assert_non_null(fxb_worker_stream(&x->w, h));
        assert_true(fxb_worker_stream_capacity(&x->w) <= 16);
    }
    assert_true(mine > 900);
    assert_true(fx_stream_handle_id(live[(mine - 1) % LIVE]) > 2900);
    for (size_t k = 0; k < LIVE; k++) {
        delete_stream(x, live[k], names[k]);
        fx_stream_handle_unref(live[k]);
    }

    fx_stream_handle *many[MANY];
    fx_stream *st[MANY];
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        many[i] = handle(x, name);
        st[i] = fxb_worker_stream(&x->w, many[i]);
        assert_non_null(st[i]);
    }
    size_t cap = fxb_worker_stream_capacity(&x->w);
    assert_true(cap >= 2 * MANY && cap <= 8 * MANY);
    for (int i = 0; i < MANY; i++)
        assert_ptr_equal(fxb_worker_stream_if_any(&x->w, many[i]), st[i]);
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        delete_stream(x, many[i], name);
        /* The others stay found while entries move. */
        for (int j = i + 1; j < MANY; j += 17)
            assert_ptr_equal(fxb_worker_stream_if_any(&x->w, many[j]), st[j]);
        fx_stream_handle_unref(many[i]);
    }
    assert_true(fxb_worker_stream_capacity(&x->w) <= 16);
    wfix_free(x);
}

/* ---- jobs ------------------------------------------------------------------------ */

/* Jobs are appended in queue order, each completed once (counted, its
 * connection reference given back). */
static void test_jobs_append_in_queue_order(void **state)
{
    wfix *x = wfix_new(1, 0);
    fx_stream_handle *h = handle(x, "s");
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    queue_job(x, h, 1);
    queue_job(x, h, 2);
    queue_job(x, h, 1);
    drain(x);
    fx_stream *st = fxb_worker_stream_if_any(&x->w, h);
    assert_non_null(st);
    assert_int_equal(fx_stream_tail(st), 4);
    fx_wire_slice p;
    assert_int_equal(fx_stream_ring_get(st, 1, &p), 0);
    assert_int_equal(p.len, 1); /* job 2's first payload follows job 1 */
    assert_int_equal(fx_stream_ring_get(st, 2, &p), 0);
    assert_int_equal(p.len, 2);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_ok), 3);
    assert_int_equal(x->w.jobs_done, 3);
    assert_int_equal(atomic_load(&x->f->c.refs), 1);
    fx_stream_handle_unref(h);
    wfix_free(x);
}

/* A job for a stream deleted before it ran, with no state on the worker, is
 * refused (counted as an error) and creates nothing. */
static void test_job_for_a_deleted_stream_without_state_is_refused(void **state)
{
    wfix *x = wfix_new(1, 0);
    fx_stream_handle *h = handle(x, "gone");
    assert_true(fx_registry_remove(x->reg, S("t"), S("ns"), S("gone")));
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    queue_job(x, h, 1);
    drain(x);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_error), 1);
    assert_int_equal(DELTA(m0, m1, publish_ok), 0);
    assert_null(fxb_worker_stream_if_any(&x->w, h));
    assert_int_equal(x->w.jobs_done, 1);
    fx_stream_handle_unref(h);
    wfix_free(x);
}

/* ---- stored jobs: the log and the ring agree ------------------------------------------- */

/* A job back from storage is appended only where the log put it: its first
 * log offset must be the ring's tail. One the log wrote one past the tail
 * (or one before it) is refused as a storage error, counted, and appended
 * nowhere; the matching one after it is appended at the tail. */
static void test_stored_job_whose_log_offset_is_not_the_ring_tail_is_refused(void **state)
{
    wfix *x = wfix_new(1, 0);
    fx_stream_handle *h = handle(x, "o");
    queue_job(x, h, 2);
    mark_stored(x, 0);
    drain(x);
    fx_stream *st = fxb_worker_stream_if_any(&x->w, h);
    assert_non_null(st);
    assert_int_equal(fx_stream_tail(st), 2);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    queue_job(x, h, 1);
    mark_stored(x, 3); /* the log skipped offset 2 */
    drain(x);
    queue_job(x, h, 1);
    mark_stored(x, 1); /* the log wrote offset 1 again */
    drain(x);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_error), 2);
    assert_int_equal(DELTA(m0, m1, storage_errors), 2);
    assert_int_equal(DELTA(m0, m1, publish_ok), 0);
    assert_int_equal(fx_stream_tail(st), 2);
    queue_job(x, h, 1);
    mark_stored(x, 2);
    drain(x);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_ok), 1);
    assert_int_equal(DELTA(m0, m1, storage_errors), 2);
    assert_int_equal(fx_stream_tail(st), 3);
    assert_int_equal(x->w.jobs_done, 4);
    assert_int_equal(atomic_load(&x->f->c.refs), 1);
    fx_stream_handle_unref(h);
    wfix_free(x);
}

/* ---- deleted streams ---------------------------------------------------------------- */

/* A deletion's end waits for the jobs queued before it: those jobs are
 * appended (their events belong to the subscribers there are), then the
 * stream is ended, and a job after that is refused. */
static void test_end_of_a_deleted_stream_waits_for_older_jobs(void **state)
{
    wfix *x = wfix_new(1, 0);
    fx_stream_handle *h = handle(x, "d");
    assert_non_null(fxb_worker_stream(&x->w, h)); /* state exists (as for a subscriber) */
    queue_job(x, h, 1);
    queue_job(x, h, 1);
    assert_true(fx_registry_remove(x->reg, S("t"), S("ns"), S("d")));
    fxb_end *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    e->w = &x->w;
    e->h = fx_stream_handle_ref(h);
    fx_task_init(&e->task, fxb_worker_end_task, e);
    fx_loop_post(x->w.loop, &e->task); /* runs before the doorbell below */
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    drain(x);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_ok), 2); /* admitted first: appended */
    assert_true(fx_stream_handle_is_ended(h));
    assert_null(x->w.ends);
    /* Nobody uses the stream's state any more: it is gone. */
    assert_null(fxb_worker_stream_if_any(&x->w, h));
    queue_job(x, h, 1);
    drain(x);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, publish_error), 1);
    fx_stream_handle_unref(h);
    wfix_free(x);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_streams_created_on_first_use_and_found_again),
    cmocka_unit_test(test_stream_table_size_follows_live_streams_under_churn),
    cmocka_unit_test(test_jobs_append_in_queue_order),
    cmocka_unit_test(test_job_for_a_deleted_stream_without_state_is_refused),
    cmocka_unit_test(test_stored_job_whose_log_offset_is_not_the_ring_tail_is_refused),
    cmocka_unit_test(test_end_of_a_deleted_stream_waits_for_older_jobs),
};
FX_TEST_MAIN(tests)
