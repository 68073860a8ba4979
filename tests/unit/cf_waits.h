/* For the unit tests (on conn_fixture.h) of the broker calls that wait for
 * its loops on a condition variable: the admin gathers of control.c, the
 * retention change of durable_admin.c, the flush of durable_ops.c, and
 * fxb_run_on when a started broker stops. On the fake loops nothing would
 * ever answer them, so this file defines pthread_cond_timedwait and
 * pthread_cond_wait for the test executable: a wait unlocks its mutex, runs
 * one settle step of the fixture set with cw_use (tasks, due timers,
 * acknowledgements, transport turns) and locks it again, as a waiter woken
 * by the loop thread would be. A timed wait with nothing left to run moves
 * the fake clock 1 ms (so deadlines on it pass) and reports a timeout.
 * Included by one test file, after conn_fixture.h. */
#ifndef FX_TESTS_UNIT_CF_WAITS_H
#define FX_TESTS_UNIT_CF_WAITS_H

#include <errno.h>
#include <pthread.h>

static cf *cw_f;               /* the fixture the waits drive */
static void (*cw_hook)(cf *f); /* run once, at the next wait */
static unsigned cw_depth;

/* The waits drive |f| (NULL: only the loops). */
static inline void cw_use(cf *f)
{
    cw_f = f;
}

/* Runs |hook| once, from inside the next wait of the broker (the caller of
 * that broker function is blocked there). */
static inline void cw_at_next_wait(void (*hook)(cf *f))
{
    cw_hook = hook;
}

/* One step; returns whether anything ran. */
static bool cw_step(void)
{
    if (cw_depth > 0)
        return false;
    cw_depth++;
    if (cw_hook != NULL) {
        void (*h)(cf * f) = cw_hook;
        cw_hook = NULL;
        h(cw_f);
    }
    if (cw_f != NULL) {
        cf_ack(cw_f);
        cf_turn(cw_f);
    }
    bool any = cf_run(cw_f);
    any |= cf_fire_due();
    if (cw_f != NULL)
        cf_turn(cw_f);
    cw_depth--;
    return any;
}

int pthread_cond_timedwait(pthread_cond_t *restrict cv, pthread_mutex_t *restrict mu,
                           const struct timespec *restrict at)
{
    (void)cv;
    (void)at;
    pthread_mutex_unlock(mu);
    bool any = cw_step();
    if (!any)
        fx_fake_clock_advance(FX_NS_PER_MS);
    pthread_mutex_lock(mu);
    return any ? 0 : ETIMEDOUT;
}

int pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    (void)cv;
    static unsigned idle;
    pthread_mutex_unlock(mu);
    bool any = cw_step();
    pthread_mutex_lock(mu);
    idle = any ? 0 : idle + 1;
    if (idle > 100000)
        fail_msg("a wait for a loop that has nothing to run");
    return 0;
}

#endif
