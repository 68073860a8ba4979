/* Unit tests for client/runtime.c, the process-wide pool of client loops:
 * its size from FELIX_CLIENT_LOOPS (refused when out of range, nothing
 * started), loops given out round-robin and started on first use, the
 * "am I on a client loop" check from outside and inside a loop, and the
 * pool stopped with its last user and sized again after. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include "base/loop.h"
#include "client/client.h"
#include "felix/felix.h"

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

static int unset_env(void **state)
{
    unsetenv("FELIX_CLIENT_LOOPS");
    return 0;
}

static void test_bad_pool_sizes_are_refused(void **state)
{
    const char *bad[] = {"0", "65", "-1", "2x", "many"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("FELIX_CLIENT_LOOPS", bad[i], 1);
        fx_loop *l = (fx_loop *)&l;
        assert_int_equal(fxc_rt_acquire(&l), -EINVAL);
        assert_ptr_equal(l, (fx_loop *)&l); /* untouched */
        char why[256];
        fx_client_last_error(NULL, why, sizeof(why));
        assert_non_null(strstr(why, "FELIX_CLIENT_LOOPS"));
        assert_non_null(strstr(why, bad[i]));
    }
    /* Refusals leave no pool: a good size afterwards works. */
    setenv("FELIX_CLIENT_LOOPS", "1", 1);
    fx_loop *l = NULL;
    assert_int_equal(fxc_rt_acquire(&l), 0);
    assert_non_null(l);
    fxc_rt_release();
}

static void test_loops_are_given_out_round_robin(void **state)
{
    setenv("FELIX_CLIENT_LOOPS", "2", 1);
    fx_loop *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    assert_int_equal(fxc_rt_acquire(&a), 0);
    assert_int_equal(fxc_rt_acquire(&b), 0);
    assert_int_equal(fxc_rt_acquire(&c), 0);
    assert_int_equal(fxc_rt_acquire(&d), 0);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(a, c);
    assert_ptr_equal(b, d);
    for (int i = 0; i < 4; i++)
        fxc_rt_release();
}

typedef struct probe {
    sem_t done;
    atomic_bool on_loop;
} probe;

static void ask(void *user)
{
    probe *p = user;
    atomic_store(&p->on_loop, fxc_rt_is_current());
    sem_post(&p->done);
}

static void test_is_current_only_on_a_pool_loop(void **state)
{
    setenv("FELIX_CLIENT_LOOPS", "1", 1);
    assert_false(fxc_rt_is_current());
    fx_loop *l = NULL;
    assert_int_equal(fxc_rt_acquire(&l), 0);
    assert_false(fxc_rt_is_current());
    probe p;
    sem_init(&p.done, 0, 0);
    atomic_init(&p.on_loop, false);
    assert_int_equal(fx_loop_call(l, ask, &p), 0);
    sem_wait(&p.done);
    assert_true(atomic_load(&p.on_loop));
    sem_destroy(&p.done);
    /* A loop of someone else's is not a client loop. */
    fx_loop *mine = NULL;
    assert_int_equal(fx_loop_new(&mine, &(fx_loop_opts){.name = "other", .cpu = -1}), 0);
    assert_int_equal(fx_loop_start(mine), 0);
    sem_init(&p.done, 0, 0);
    atomic_store(&p.on_loop, true);
    assert_int_equal(fx_loop_call(mine, ask, &p), 0);
    sem_wait(&p.done);
    assert_false(atomic_load(&p.on_loop));
    sem_destroy(&p.done);
    fx_loop_stop(mine);
    fx_loop_free(mine);
    fxc_rt_release();
}

static void test_last_release_stops_the_pool_and_size_is_read_again(void **state)
{
    setenv("FELIX_CLIENT_LOOPS", "1", 1);
    fx_loop *a = NULL, *b = NULL;
    assert_int_equal(fxc_rt_acquire(&a), 0);
    assert_int_equal(fxc_rt_acquire(&b), 0);
    assert_ptr_equal(a, b);
    /* While in use, a new size is not read. */
    setenv("FELIX_CLIENT_LOOPS", "3", 1);
    fx_loop *c = NULL;
    assert_int_equal(fxc_rt_acquire(&c), 0);
    assert_ptr_equal(c, a);
    fxc_rt_release();
    fxc_rt_release();
    fxc_rt_release();
    /* Stopped; the next user gets a pool of the new size. */
    fx_loop *v[3] = {0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(fxc_rt_acquire(&v[i]), 0);
    assert_ptr_not_equal(v[0], v[1]);
    assert_ptr_not_equal(v[1], v[2]);
    assert_ptr_not_equal(v[0], v[2]);
    fx_loop *again = NULL;
    assert_int_equal(fxc_rt_acquire(&again), 0);
    assert_ptr_equal(again, v[0]);
    for (int i = 0; i < 4; i++)
        fxc_rt_release();
}

#define T(name) cmocka_unit_test_teardown(name, unset_env)
static const struct CMUnitTest tests[] = {
    T(test_bad_pool_sizes_are_refused),
    T(test_loops_are_given_out_round_robin),
    T(test_is_current_only_on_a_pool_loop),
    T(test_last_release_stops_the_pool_and_size_is_read_again),
};

FX_TEST_MAIN(tests)
