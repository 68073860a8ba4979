/* Unit tests for fx_placement: stream -> worker and its inverse, QUIC
 * endpoints -> loops by role for io_threads 0 (shared mode on the workers),
 * 1, 2 and 3, the broker's server endpoint count, and libfelix's client
 * loops, and the storage thread of each worker. The module links nothing
 * but fx_base. */
/* fx-test-libs: fx_base */
#include "base/placement.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "fx_test.h"

static void test_worker_is_handle_id_mod_workers(void **state)
{
    assert_int_equal(fx_placement_worker_for(1, 1), 0);
    assert_int_equal(fx_placement_worker_for(1, 4), 1);
    assert_int_equal(fx_placement_worker_for(4, 4), 0);
    assert_int_equal(fx_placement_worker_for(7, 4), 3);
    assert_int_equal(fx_placement_worker_for(UINT64_MAX, 10), 5); /* 2^64-1 ends in 5 */
    /* The same id always lands on the same worker: order of a stream holds. */
    for (uint64_t id = 1; id < 100; id++)
        assert_int_equal(fx_placement_worker_for(id, 3), fx_placement_worker_for(id + 3, 3));
}

typedef struct row {
    uint32_t io_threads;
    uint32_t workers;
    fx_loop_kind kind;
    uint32_t server[4]; /* loops of server endpoints 0..3 */
    uint32_t client[2]; /* loops of client endpoints 0..1 */
} row;

static void test_placement_table_for_io_threads(void **state)
{
    static const row table[] = {
        /* 0: shared mode, servers over all 4 workers; clients on the last. */
        {0, 4, FX_LOOP_KIND_WORKER, {0, 1, 2, 3}, {3, 3}},
        /* 0 with one worker: everything on it. */
        {0, 1, FX_LOOP_KIND_WORKER, {0, 0, 0, 0}, {0, 0}},
        /* 1: one io loop shared by both roles. */
        {1, 4, FX_LOOP_KIND_IO, {0, 0, 0, 0}, {0, 0}},
        /* 2: servers on io 0, clients on io 1. */
        {2, 4, FX_LOOP_KIND_IO, {0, 0, 0, 0}, {1, 1}},
        /* 3: servers over io 0 and 1, clients on io 2. */
        {3, 4, FX_LOOP_KIND_IO, {0, 1, 0, 1}, {2, 2}},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const row *r = &table[i];
        fx_loop_slot slot;
        for (uint32_t k = 0; k < 4; k++) {
            assert_int_equal(
                fx_placement_endpoint(FX_ENDPOINT_SERVER, k, r->io_threads, r->workers, &slot), 0);
            assert_int_equal(slot.kind, r->kind);
            assert_int_equal(slot.index, r->server[k]);
        }
        for (uint32_t k = 0; k < 2; k++) {
            assert_int_equal(
                fx_placement_endpoint(FX_ENDPOINT_CLIENT, k, r->io_threads, r->workers, &slot), 0);
            assert_int_equal(slot.kind, r->kind);
            assert_int_equal(slot.index, r->client[k]);
        }
    }
}

/* `workers: auto`: one per CPU but one, never 0, capped at the key's 1024. */
static void test_auto_workers_leave_one_cpu(void **state)
{
    (void)state;
    assert_int_equal(fx_placement_auto_workers(-1), 1); /* sysconf failed */
    assert_int_equal(fx_placement_auto_workers(1), 1);
    assert_int_equal(fx_placement_auto_workers(2), 1);
    assert_int_equal(fx_placement_auto_workers(3), 2);
    assert_int_equal(fx_placement_auto_workers(16), 15);
    assert_int_equal(fx_placement_auto_workers(1025), 1024);
    assert_int_equal(fx_placement_auto_workers(5000), 1024);
}

/* core_shards pins worker i to CPU i; without it no worker is pinned. */
static void test_pinned_worker_i_runs_on_cpu_i(void **state)
{
    (void)state;
    assert_int_equal(fx_placement_worker_cpu(0, true), 0);
    assert_int_equal(fx_placement_worker_cpu(3, true), 3);
    assert_int_equal(fx_placement_worker_cpu(0, false), -1);
    assert_int_equal(fx_placement_worker_cpu(3, false), -1);
}

static void test_no_loops_is_an_error(void **state)
{
    fx_loop_slot slot;
    assert_int_equal(fx_placement_endpoint(FX_ENDPOINT_SERVER, 0, 0, 0, &slot), -EINVAL);
}

/* The slot and its inverse: every stream id lands on exactly one (worker,
 * slot), consecutive slots of a worker hold ids |nworkers| apart, and going
 * there and back gives the id again. */
static void test_worker_slot_and_its_inverse(void **state)
{
    assert_int_equal(fx_placement_worker_slot(1, 1), 1);
    assert_int_equal(fx_placement_worker_slot(7, 4), 1);
    assert_int_equal(fx_placement_worker_slot(8, 4), 2);
    assert_int_equal(fx_placement_stream_at(3, 1, 4), 7);
    assert_int_equal(fx_placement_stream_at(0, 2, 4), 8);
    for (uint32_t n = 1; n <= 5; n++) {
        for (uint64_t id = 0; id < 64; id++) {
            uint32_t w = fx_placement_worker_for(id, n);
            uint64_t slot = fx_placement_worker_slot(id, n);
            assert_int_equal(fx_placement_stream_at(w, slot, n), id);
            assert_int_equal(fx_placement_worker_slot(id + n, n), slot + 1);
        }
    }
}

/* One endpoint without io loops or with one; one per io loop but the last
 * (which fx_placement_endpoint keeps for clients) from two on. */
static void test_server_endpoints_leave_the_client_loop(void **state)
{
    assert_int_equal(fx_placement_server_endpoints(0), 1);
    assert_int_equal(fx_placement_server_endpoints(1), 1);
    assert_int_equal(fx_placement_server_endpoints(2), 1);
    assert_int_equal(fx_placement_server_endpoints(3), 2);
    assert_int_equal(fx_placement_server_endpoints(8), 7);
    /* No server endpoint lands on the client loop. */
    for (uint32_t io = 2; io <= 8; io++) {
        fx_loop_slot cl, sv;
        assert_int_equal(fx_placement_endpoint(FX_ENDPOINT_CLIENT, 0, io, 1, &cl), 0);
        for (uint32_t k = 0; k < fx_placement_server_endpoints(io); k++) {
            assert_int_equal(fx_placement_endpoint(FX_ENDPOINT_SERVER, k, io, 1, &sv), 0);
            assert_int_equal(sv.index, k);
            assert_int_not_equal(sv.index, cl.index);
        }
    }
}

/* The client pool: one loop per CPU but one, 1..4; clients in turn. */
static void test_client_loops_default_and_round_robin(void **state)
{
    assert_int_equal(fx_placement_client_loops(-1), 1); /* sysconf failed */
    assert_int_equal(fx_placement_client_loops(1), 1);
    assert_int_equal(fx_placement_client_loops(2), 1);
    assert_int_equal(fx_placement_client_loops(3), 2);
    assert_int_equal(fx_placement_client_loops(5), FX_PLACEMENT_CLIENT_LOOPS_MAX);
    assert_int_equal(fx_placement_client_loops(64), FX_PLACEMENT_CLIENT_LOOPS_MAX);
    size_t seen[3] = {0};
    for (uint64_t nth = 0; nth < 9; nth++) {
        size_t i = fx_placement_client_loop(nth, 3);
        assert_int_equal(i, nth % 3);
        seen[i]++;
    }
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[1], 3);
    assert_int_equal(seen[2], 3);
    assert_int_equal(fx_placement_client_loop(UINT64_MAX, 1), 0);
}

/* One storage thread per worker: storage thread i serves worker i, so a
 * stream's appends and its fanout have the same home. */
static void test_storage_thread_i_serves_worker_i(void **state)
{
    (void)state;
    for (uint32_t n = 1; n <= 8; n++) {
        bool seen[8] = {false};
        for (uint32_t i = 0; i < n; i++) {
            uint32_t w = fx_placement_storage_worker(i, n);
            assert_int_equal(w, i);
            seen[w] = true;
        }
        for (uint32_t i = 0; i < n; i++)
            assert_true(seen[i]); /* every worker has one */
    }
    assert_int_equal(fx_placement_storage_worker(5, 4), 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_worker_is_handle_id_mod_workers),
    cmocka_unit_test(test_placement_table_for_io_threads),
    cmocka_unit_test(test_auto_workers_leave_one_cpu),
    cmocka_unit_test(test_pinned_worker_i_runs_on_cpu_i),
    cmocka_unit_test(test_no_loops_is_an_error),
    cmocka_unit_test(test_worker_slot_and_its_inverse),
    cmocka_unit_test(test_server_endpoints_leave_the_client_loop),
    cmocka_unit_test(test_client_loops_default_and_round_robin),
    cmocka_unit_test(test_storage_thread_i_serves_worker_i),
};
FX_TEST_MAIN(tests)
