/* For the unit tests (on conn_fixture.h) of the broker calls that ask its
 * loops and wait for the answer (fx_loop_ask / fx_loop_ask_all): the admin
 * gathers and the drain of control.c, the retention change of
 * durable_admin.c, the flush of durable_ops.c, a started broker's stop. The
 * fake loops answer an ask on the calling thread; this file sets their ask
 * hook so that each ask first runs one settle step of the fixture set with
 * cw_use (tasks, due timers, acknowledgements, transport turns), as the
 * other threads would progress while the caller waits. An ask with nothing
 * left to run moves the fake clock 1 ms, so deadlines on it pass.
 * Included by one test file, after conn_fixture.h. */
#ifndef FX_TESTS_UNIT_CF_WAITS_H
#define FX_TESTS_UNIT_CF_WAITS_H

static cf *cw_f;               /* the fixture the asks drive */
static void (*cw_hook)(cf *f); /* run once, at the next ask */
static unsigned cw_depth;

/* The asks drive |f| (NULL: only the loops). */
static void cw_on_ask(void);
static inline void cw_use(cf *f)
{
    cw_f = f;
    fx_fake_loop_ask_hook = cw_on_ask;
}

/* Runs |hook| once, from inside the next ask of the broker (the caller of
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

/* The fake loops' ask hook: a broker call that asks its loops (and, like
 * the drain, may poll them until a deadline) lets the fixture move on by one
 * step each time; with nothing left to run the fake clock moves 1 ms, so a
 * deadline on it passes. */
static void cw_on_ask(void)
{
    if (!cw_step())
        fx_fake_clock_advance(FX_NS_PER_MS);
}

#endif
