/* fx_budget: a byte budget for data in flight (checkpoints 1 and 3). Bytes are
 * taken as a permit that travels with its job and is released when the job is
 * processed. A budget may have a parent (a connection's share of the process
 * budget): taking from the child also takes from the parent.
 * Loop threads use the lock-free fx_budget_try_acquire() or the callback form
 * fx_budget_acquire(), which never sleeps; only fx_budget_acquire_wait(), for
 * the client's blocking calls on user threads, sleeps. Waiters are served in
 * FIFO order per budget. Any thread. */
#ifndef FX_BUDGET_H
#define FX_BUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fx_budget fx_budget;
typedef struct fx_budget_waiter fx_budget_waiter;

/* Bytes held from a budget (and its parents). Zero-initialize, fill by an
 * acquire, give back with fx_permit_release(). Plain value: copy it into the
 * job, but release only one copy. */
typedef struct fx_permit {
    fx_budget *budget; /* NULL when empty or released */
    size_t n;
} fx_permit;

/* Called once for a waiter that fx_budget_acquire() parked: |rv| is 0 (the
 * permit given to fx_budget_acquire is filled) or FX_ECLOSED (the budget or
 * its parent was closed; no bytes held). Runs on the thread that released the
 * bytes or closed the budget, outside the budget's locks. */
typedef void (*fx_budget_granted_cb)(void *user, int rv);

/* Caller-embedded; only on_granted and user are public. */
struct fx_budget_waiter {
    fx_budget_granted_cb on_granted;
    void *user;
    fx_budget_waiter *next; /* private, under the lock of |stage| */
    fx_budget_waiter *prev; /* private */
    fx_budget *origin;      /* private: the budget acquired on */
    fx_budget *stage;       /* private: where it waits (or failed) */
    fx_permit *out;         /* private */
    size_t n;               /* private */
    int rv;                 /* private */
    bool parked;            /* private */
};

/* Caller-embedded; fields are private. */
struct fx_budget {
    atomic_size_t in_use;
    atomic_size_t nwaiters;
    atomic_bool closed;
    size_t capacity;
    fx_budget *parent;
    pthread_mutex_t mu; /* guards the waiter list */
    fx_budget_waiter *head;
    fx_budget_waiter *tail;
    atomic_uint_fast64_t acquired;
    atomic_uint_fast64_t refused;
    atomic_uint_fast64_t waited;
    atomic_uint_fast64_t timeouts;
};

typedef struct fx_budget_stats {
    uint64_t acquired; /* permits granted (now or after waiting) */
    uint64_t refused;  /* try_acquire refusals by this budget (its own bytes ran out) */
    uint64_t waited;   /* acquires that had to park */
    uint64_t timeouts; /* fx_budget_acquire_wait timeouts */
    size_t in_use;
    size_t capacity;
    size_t waiters; /* parked on this budget now */
} fx_budget_stats;

/* Initializes |b| with |capacity| bytes (> 0) under |parent| (NULL for none;
 * the parent must outlive |b|). Returns 0, -EINVAL or -errno (mutex). */
int fx_budget_init(fx_budget *b, size_t capacity, fx_budget *parent);

/* Frees |b|'s resources. No waiter may be parked and no permit outstanding
 * (debug builds assert it); close it and wait for the jobs first. */
void fx_budget_deinit(fx_budget *b);

/* Takes |n| bytes from |b| and every parent without waiting, and fills |*p|.
 * Does not jump ahead of parked waiters. Returns 0, FX_EFULL (nothing held;
 * the refusing budget counts it), FX_ETOOBIG (|n| exceeds the capacity of |b|
 * or of a parent, so it could never succeed) or FX_ECLOSED. Lock-free unless
 * a release must wake waiters. Any thread. */
int fx_budget_try_acquire(fx_budget *b, size_t n, fx_permit *p);

/* As fx_budget_try_acquire(); on FX_EFULL also sets |*refused| (if not NULL)
 * to the budget that refused: |b| itself (e.g. a connection's share) or one of
 * its parents (the process-wide budget), so the caller can say which. */
int fx_budget_try_acquire_from(fx_budget *b, size_t n, fx_permit *p, const fx_budget **refused);

/* Takes |n| bytes for a loop thread without sleeping. Returns 0 (|*p| filled
 * now, |w| unused), FX_ETOOBIG or FX_ECLOSED, or -EAGAIN: |w| is parked FIFO
 * and |w->on_granted(w->user, rv)| will run exactly once later (unless
 * fx_budget_cancel() wins), after filling |*p| on success. |w| (on_granted
 * and user set by the caller) and |p| must stay alive until then. Bytes taken
 * from a child are held while waiting for the parent. Any thread. */
int fx_budget_acquire(fx_budget *b, size_t n, fx_budget_waiter *w, fx_permit *p);

/* Removes |w|, parked by fx_budget_acquire() on |b|, and gives back any bytes
 * it held. Returns true if it was still waiting (on_granted will not run),
 * false if it was not, or its on_granted is running or about to (keep |w|
 * alive until it has). The caller's timer uses this for timeouts. Any thread. */
bool fx_budget_cancel(fx_budget *b, fx_budget_waiter *w);

/* Takes |n| bytes, sleeping on a condition variable for at most |timeout_ns|
 * (-1 waits forever, 0 does not wait). Returns 0 (|*p| filled), FX_ETIMEDOUT,
 * FX_ETOOBIG, FX_ECLOSED or -errno. Never call it on a loop thread: for the
 * client's blocking calls on user threads only. */
int fx_budget_acquire_wait(fx_budget *b, size_t n, int64_t timeout_ns, fx_permit *p);

/* Gives the bytes of |p| back to its budget and parents and empties |p|, so a
 * second call is a no-op. NULL or an empty permit do nothing. May run waiters'
 * on_granted on this thread. Any thread. */
void fx_permit_release(fx_permit *p);

/* Closes |b|: later acquires fail with FX_ECLOSED, and every waiter parked on
 * |b| (or parked on a parent while acquiring on |b|) gets on_granted with
 * FX_ECLOSED, on this thread. Outstanding permits stay valid and are released
 * as usual. Children of |b| fail their waiters when they reach |b|.
 * Idempotent. Any thread. */
void fx_budget_close(fx_budget *b);

/* Bytes held now (relaxed). Any thread. */
size_t fx_budget_in_use(const fx_budget *b);
/* The configured capacity. Any thread. */
size_t fx_budget_capacity(const fx_budget *b);
/* Fills |st| with relaxed reads. Any thread. */
void fx_budget_get_stats(const fx_budget *b, fx_budget_stats *st);

#endif
