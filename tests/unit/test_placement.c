/* Unit tests for fx_placement: stream -> worker, and QUIC endpoints -> loops
 * by role for io_threads 0 (shared mode on the workers), 1, 2 and 3. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include "broker/placement.h"

#include <errno.h>
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

static void test_no_loops_is_an_error(void **state)
{
    fx_loop_slot slot;
    assert_int_equal(fx_placement_endpoint(FX_ENDPOINT_SERVER, 0, 0, 0, &slot), -EINVAL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_worker_is_handle_id_mod_workers),
    cmocka_unit_test(test_placement_table_for_io_threads),
    cmocka_unit_test(test_auto_workers_leave_one_cpu),
    cmocka_unit_test(test_no_loops_is_an_error),
};
FX_TEST_MAIN(tests)
