/* fx_loop: one thread, one epoll set. Owns fd watches, a timer heap with
 * nanosecond deadlines (epoll_pwait2), and an MPSC inbox of tasks that any
 * thread may post to; an eventfd doorbell wakes the loop, and wakeups are
 * coalesced (at most one write per wait that may block; none while the loop
 * is awake).
 * Everything registered on a loop is touched only by that loop's thread. */
#ifndef FX_LOOP_H
#define FX_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fx_loop fx_loop;

/* ---- time ------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. Any thread. */
uint64_t fx_now_ns(void);

/* Initialises |cv| with its timed waits on fx_now_ns()'s clock, so a wall
 * clock step (NTP, an operator) neither ends them early nor stretches them.
 * Returns 0 or an errno value, as pthread_cond_init. */
int fx_cond_init_monotonic(pthread_cond_t *cv);

/* The absolute time of fx_now_ns() instant |ns|, for pthread_cond_timedwait
 * on a condition made by fx_cond_init_monotonic. */
struct timespec fx_timespec_at(uint64_t ns);

#define FX_NS_PER_US 1000ull
#define FX_NS_PER_MS 1000000ull
#define FX_NS_PER_S 1000000000ull

/* ---- tasks (the control lane) ------------------------------------------ */

typedef struct fx_task fx_task;
typedef void (*fx_task_cb)(fx_loop *l, fx_task *t, void *user);

/* A caller-embedded task node. Posting never allocates, never fails and
 * never drops: this is the control lane (register, unregister, close,
 * resume). A task that is already pending is not queued twice (posting it
 * again is a no-op that returns false), which coalesces repeated resumes. */
struct fx_task {
    _Atomic(fx_task *) next; /* inbox link; private */
    atomic_bool pending;     /* private */
    fx_task_cb cb;
    void *user;
};

/* Initializes |t| to run |cb(loop, t, user)|. */
void fx_task_init(fx_task *t, fx_task_cb cb, void *user);

/* Queues |t| on |l|'s inbox and rings the doorbell if the loop may be asleep.
 * Returns true if queued, false if |t| was already pending. The caller keeps
 * ownership of |t| and must keep it alive until its callback has run.
 * Any thread, including the loop's own. */
bool fx_loop_post(fx_loop *l, fx_task *t);

/* Convenience: allocates a one-shot task that runs |cb(user)| once and is
 * freed after. Returns 0 or -ENOMEM. Any thread. */
int fx_loop_call(fx_loop *l, void (*cb)(void *user), void *user);

/* ---- asking loops and waiting for the answer --------------------------- */

/* Runs on an asked loop's thread: |i| is that loop's index in the ask (0
 * when one loop is asked), |data| the ask's copy of the caller's block. The
 * loops of one ask run at the same time: each writes only its own part. */
typedef void (*fx_loop_ask_fn)(size_t i, void *data);

/* Frees what the answers left in |data| once nobody will read it: the caller
 * gave up before every loop had answered. Runs once, after the last answer,
 * on the thread that drops the last reference (the caller's or a loop's). */
typedef void (*fx_loop_late_fn)(void *data);

/* No deadline: wait for every answer (shutdown paths, barriers). */
#define FX_LOOP_FOREVER (-1)

/* What to ask. The ask keeps its own copy of |size| bytes at |data|, which
 * the loops read and write; when every loop has answered the copy is
 * written back to |data|, and whatever it holds (references, allocations)
 * is the caller's again. When the caller gives up, the copy and what it
 * holds stay with the ask: |on_late| (may be NULL) frees it after the last
 * answer, and |data| is left as it was. With |size| 0, |data| is passed as
 * is and must outlive every answer: only for FX_LOOP_FOREVER or memory that
 * lives as long as the loops. */
typedef struct fx_loop_ask_req {
    fx_loop_ask_fn fn; /* NULL: nothing, only wait for the loops to get to it */
    void *data;
    size_t size;
    fx_loop_late_fn on_late;
    int64_t timeout_ns; /* from the call, on fx_now_ns()'s clock; or FX_LOOP_FOREVER */
} fx_loop_ask_req;

/* Runs |q->fn(i, copy)| on each |loops[i]|, i < |n|, and waits until every
 * loop has answered or |q->timeout_ns| has passed. A loop that is the
 * caller's own runs its part inline, before the wait (a loop never waits
 * for itself). Returns 0 (answers in |q->data|), FX_ETIMEDOUT (the ask is
 * abandoned, see fx_loop_ask_req; |*pmissing| (may be NULL) gets the index
 * of the first loop that did not answer, and a rate-limited warning names
 * it), or -ENOMEM (nothing was posted). The loops must run until their part
 * has run (fx_loop_stop runs pending tasks, so stopping them is fine).
 * Any thread. */
int fx_loop_ask_all(fx_loop *const *loops, size_t n, const fx_loop_ask_req *q, size_t *pmissing);

/* fx_loop_ask_all on the one loop |l|. With FX_LOOP_FOREVER and |q->size| 0
 * it needs no memory and never fails. Any thread. */
int fx_loop_ask(fx_loop *l, const fx_loop_ask_req *q);

/* Returns once |l| has run every task posted to it before this call (an ask
 * of nothing, without a deadline). Never fails. Any thread. */
void fx_loop_barrier(fx_loop *l);

/* ---- fd watches -------------------------------------------------------- */

typedef struct fx_watch fx_watch;
/* |events| is a mask of EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP. */
typedef void (*fx_watch_cb)(fx_loop *l, fx_watch *w, uint32_t events);

struct fx_watch {
    int fd;
    uint32_t events;
    fx_watch_cb cb;
    void *user;
};

/* Starts watching |w->fd| for |events| (level-triggered). |w| is caller-
 * embedded and must stay alive until fx_loop_unwatch(). Returns 0 or -errno.
 * Loop thread only (or before fx_loop_start). */
int fx_loop_watch(fx_loop *l, fx_watch *w, int fd, uint32_t events, fx_watch_cb cb, void *user);
/* Changes the event mask. Returns 0 or -errno. Loop thread only. */
int fx_loop_watch_mod(fx_loop *l, fx_watch *w, uint32_t events);
/* Stops watching; safe to call from inside |w|'s own callback. The fd is not
 * closed. Returns 0 or -errno. Loop thread only. */
int fx_loop_unwatch(fx_loop *l, fx_watch *w);

/* ---- timers ------------------------------------------------------------ */

typedef struct fx_timer fx_timer;
typedef void (*fx_timer_cb)(fx_loop *l, fx_timer *t, void *user);

/* Caller-embedded one-shot timer; re-arm from the callback for periodic. */
struct fx_timer {
    uint64_t deadline_ns; /* CLOCK_MONOTONIC */
    size_t heap_index;    /* private; SIZE_MAX when not armed */
    fx_timer_cb cb;
    void *user;
};

void fx_timer_init(fx_timer *t, fx_timer_cb cb, void *user);
/* Arms (or re-arms) |t| to fire at |deadline_ns|; a deadline in the past
 * fires once the current socket callback or task has returned and the turn's
 * socket events have been handled, without a wait in between (armed from a
 * timer callback: on the next turn). Returns 0 or -ENOMEM. Loop thread only. */
int fx_loop_timer_arm(fx_loop *l, fx_timer *t, uint64_t deadline_ns);
/* Disarms |t| if armed. Loop thread only. */
void fx_loop_timer_cancel(fx_loop *l, fx_timer *t);
bool fx_timer_is_armed(const fx_timer *t);

/* TEST HOOK. Makes the next |n| arms of a timer not yet armed whose callback
 * is |cb| fail with -ENOMEM, on any loop, as when the timer heap cannot
 * grow (re-arming an armed timer never fails). |cb| NULL or |n| 0 clears it.
 * Only tests call it. Any thread. */
void fx_loop_test_fail_timer_arms(fx_timer_cb cb, unsigned n);

/* ---- lifecycle --------------------------------------------------------- */

typedef struct fx_loop_opts {
    const char *name; /* thread name, at most 15 chars used; may be NULL */
    int cpu;          /* CPU to pin to, or -1 for no pinning */
} fx_loop_opts;

/* Creates a loop (epoll fd, eventfd, empty heap and inbox); no thread yet.
 * Returns 0, -ENOMEM or -errno. */
int fx_loop_new(fx_loop **pl, const fx_loop_opts *o);
/* Starts the loop's thread. If pinning was requested and the kernel refused,
 * the loop still runs and fx_loop_pin_error() returns the -errno.
 * Returns 0 or -errno (thread creation). Not from the loop itself. */
int fx_loop_start(fx_loop *l);
/* Runs the loop on the calling thread until fx_loop_stop(). Returns 0 or
 * -errno (epoll failure). */
int fx_loop_run(fx_loop *l);
/* Asks the loop to return after the current turn; joins its thread when
 * called from another thread and the loop was started with fx_loop_start.
 * Tasks still in the inbox at exit run before the loop returns. Any thread. */
void fx_loop_stop(fx_loop *l);
/* Frees a stopped loop. Watches and timers must be gone. NULL ok. */
void fx_loop_free(fx_loop *l);

/* Time read once at the start of this turn. Loop thread only. */
uint64_t fx_loop_now(const fx_loop *l);
/* True when called from |l|'s thread. Any thread. */
bool fx_loop_is_current(const fx_loop *l);
/* The loop whose thread is calling, or NULL. Any thread. */
fx_loop *fx_loop_current(void);
/* 0 if pinned as asked (or not asked), else the -errno sched_setaffinity gave. */
int fx_loop_pin_error(const fx_loop *l);
const char *fx_loop_name(const fx_loop *l);
/* True from fx_loop_stop() until the loop has returned, including while it
 * runs the tasks left in its inbox; a task that re-posts itself should stop
 * doing so then, or the loop cannot exit. Any thread. */
bool fx_loop_is_stopping(const fx_loop *l);
/* 0, or the -errno that made the last fx_loop_run() (or the thread started by
 * fx_loop_start) return early (an epoll wait failure). Tasks still pending
 * were run even then. Any thread; meaningful after fx_loop_stop() joined the
 * thread or fx_loop_run() returned. */
int fx_loop_run_error(const fx_loop *l);

/* Counters for tests and metrics (relaxed reads; any thread). */
typedef struct fx_loop_stats {
    uint64_t turns;     /* epoll_pwait2 returns */
    uint64_t wakeups;   /* doorbell writes actually made (none while awake) */
    uint64_t posts;     /* tasks posted */
    uint64_t tasks_run; /* tasks executed */
    uint64_t timers_fired;
} fx_loop_stats;
void fx_loop_get_stats(const fx_loop *l, fx_loop_stats *st);

#endif
