/* fx_queue: a bounded queue of `void *` items between threads, with one
 * policy for when it is full (block, drop_new, drop_old) and its own counters.
 * By default push and pop are lock-free (a preallocated ring of cells with
 * sequence numbers). A queue created with initial_cells instead starts small
 * and doubles its ring on demand, under a short mutex, up to what the capacity
 * needs: the form for the many queues that are mostly empty (one per
 * subscription). Either way the logical bound is exactly the capacity. A producer that finds a
 * BLOCK queue full never sleeps: it parks a caller-embedded waiter and is
 * resumed by callback once the consumer has drained to the low watermark.
 * Any number of producer threads; one consumer thread is the intended use,
 * several are safe. Notification is by plain callback: the callee posts to
 * its own loop if it needs to. */
#ifndef FX_QUEUE_H
#define FX_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum fx_queue_policy {
    FX_QUEUE_BLOCK = 0, /* full: refuse (FX_EFULL) and keep the item with the caller */
    FX_QUEUE_DROP_NEW,  /* full: shed the new item through on_drop, count it */
    FX_QUEUE_DROP_OLD,  /* full: evict the oldest queued item, count it, queue the new */
} fx_queue_policy;

/* Releases an item the queue sheds or still holds at deinit. */
typedef void (*fx_queue_drop_cb)(void *item, void *user);
/* Tells a parked producer that it may push again. */
typedef void (*fx_queue_resume_cb)(void *user);

typedef struct fx_queue_opts {
    size_t capacity;          /* logical bound in items, 1 .. FX_QUEUE_MAX_CAPACITY */
    fx_queue_policy policy;   /* see above */
    size_t low_watermark;     /* resume parked producers when depth <= this;
                                 0 means capacity / 2; must be < capacity */
    fx_queue_drop_cb on_drop; /* may be NULL when items need no release */
    void *user;               /* passed to on_drop */
    size_t initial_cells;     /* 0: allocate the whole ring now, lock-free push
                                 and pop. N > 0: start with N cells (rounded up
                                 to a power of two) and double when full; the
                                 ring keeps its high-water size until deinit */
} fx_queue_opts;

#define FX_QUEUE_MAX_CAPACITY ((size_t)1 << 30)

/* A caller-embedded parking slot for one producer. Initialize it once with
 * fx_queue_waiter_init(); it may be parked again after each resume. */
typedef struct fx_queue_waiter {
    fx_queue_resume_cb on_resume;
    void *user;
    struct fx_queue_waiter *next; /* private, under the queue's wait lock */
    struct fx_queue_waiter *prev; /* private */
    bool parked;                  /* private */
} fx_queue_waiter;

typedef struct fx_queue_cell {
    atomic_size_t seq;
    void *item;
} fx_queue_cell;

/* Padding that keeps the producers' and the consumer's hot words on separate
 * cache lines without raising the struct's alignment (an over-aligned member
 * would make malloc'd containers misaligned). */
#define FX_QUEUE_PAD(name) char name[64 - sizeof(atomic_size_t)]

/* Caller-embedded; all fields are private (use the functions below). */
typedef struct fx_queue {
    atomic_size_t tail; /* next enqueue position */
    FX_QUEUE_PAD(pad_tail);
    atomic_size_t head; /* next dequeue position */
    FX_QUEUE_PAD(pad_head);
    atomic_size_t depth; /* reserved + queued items: the logical bound */
    FX_QUEUE_PAD(pad_depth);
    atomic_size_t nwaiters;
    atomic_bool closed;
    atomic_uint_fast64_t enqueued;
    atomic_uint_fast64_t dequeued;
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t parks;
    fx_queue_cell *cells; /* the lock-free ring (NULL when growable) */
    size_t mask;
    /* The growable ring: items[(ghead + i) & (gsize - 1)] for i < gcount,
     * all under ring_mu. */
    void **items;
    size_t gsize, ghead, gcount, gmax;
    pthread_mutex_t ring_mu;
    bool growable;
    size_t capacity;
    size_t low_wm;
    fx_queue_policy policy;
    fx_queue_drop_cb on_drop;
    void *user;
    pthread_mutex_t wait_mu; /* guards only the waiter list (slow path) */
    fx_queue_waiter *whead;
    fx_queue_waiter *wtail;
} fx_queue;

typedef struct fx_queue_stats {
    uint64_t enqueued; /* pushes accepted */
    uint64_t dequeued; /* pops that returned an item */
    uint64_t dropped;  /* items shed: DROP_NEW refusals plus DROP_OLD evictions */
    uint64_t parks;    /* producers parked (fx_queue_park calls that registered) */
    size_t depth;      /* items queued now (incl. pushes in progress) */
    size_t capacity;
    size_t waiters; /* producers parked now */
} fx_queue_stats;

/* Initializes |q| from |o| (the ring is rounded up to a power of two, the
 * bound stays o->capacity). Returns 0, -EINVAL (capacity 0 or too large,
 * low_watermark >= capacity, unknown policy) or -ENOMEM. Before any sharing. */
int fx_queue_init(fx_queue *q, const fx_queue_opts *o);

/* Releases every item still queued through on_drop (not counted as dropped),
 * then frees the ring. No thread may use |q| any more and no waiter may be
 * parked (debug builds assert it). */
void fx_queue_deinit(fx_queue *q);

/* Queues |item| (any value, NULL included) at the tail. Returns:
 *  0            queued; the queue owns |item|. Under DROP_OLD a full queue
 *               first evicted its oldest item (on_drop, dropped++).
 *  FX_EFULL     the queue is full. BLOCK: nothing happened, the caller still
 *               owns |item| and may fx_queue_park(). DROP_NEW: |item| was shed
 *               (on_drop already called on it, dropped++); do not touch it.
 *  FX_ECLOSED   fx_queue_close() was called; the caller still owns |item|.
 *  -ENOMEM      growable queue only: its ring had to grow and could not;
 *               nothing happened, the caller still owns |item|.
 * Never waits for the consumer (a growable queue holds its ring mutex only
 * for a few stores); a lock-free DROP_OLD queue may briefly spin while
 * another thread finishes a push or pop of the cell it evicts. Any thread. */
int fx_queue_push(fx_queue *q, void *item);

/* Takes the oldest item into |*pitem|. Returns 0, or -EAGAIN when empty (a
 * push still in progress on another thread also reads as empty). When the
 * depth is then at or below the low watermark and producers are parked, it
 * resumes all of them (FIFO) by calling their on_resume on this thread,
 * outside any lock. Any thread (usually the one consumer). */
int fx_queue_pop(fx_queue *q, void **pitem);

/* Initializes a waiter that calls |on_resume(user)| when resumed. */
void fx_queue_waiter_init(fx_queue_waiter *w, fx_queue_resume_cb on_resume, void *user);

/* Parks |w| (not parked already) after a push returned FX_EFULL. Registers
 * first, then re-checks the depth: if room appeared in between (depth at or
 * below the low watermark) the waiters are resumed at once, so on_resume may
 * run on this thread before fx_queue_park returns; set up whatever on_resume
 * touches before calling, and hold no lock on_resume needs. After a 0 return,
 * on_resume runs exactly once (unless fx_queue_unpark() wins), in park order,
 * and |w| must stay alive until then. After fx_queue_close() the waiter is
 * resumed so its next push sees FX_ECLOSED.
 * Returns 0, or FX_ECLOSED if the queue was already closed (not parked).
 * Any thread. */
int fx_queue_park(fx_queue *q, fx_queue_waiter *w);

/* Cancels a parked waiter (its producer is going away). Returns true if |w|
 * was still parked and now will not be resumed; false if it was not parked,
 * or its on_resume is already running or about to (then keep |w| and its
 * user alive until it has run). Any thread. */
bool fx_queue_unpark(fx_queue *q, fx_queue_waiter *w);

/* Closes |q|: later pushes and parks fail with FX_ECLOSED, and every parked
 * waiter is resumed (on this thread). Items already queued can still be
 * popped. Idempotent. Any thread. */
void fx_queue_close(fx_queue *q);

/* Items queued now, including pushes in progress (relaxed). Any thread. */
size_t fx_queue_depth(const fx_queue *q);
/* The configured bound. Any thread. */
size_t fx_queue_capacity(const fx_queue *q);
/* Cells the ring holds now: the whole ring, or a growable queue's current
 * size. Any thread. */
size_t fx_queue_ring_cells(const fx_queue *q);
/* True once fx_queue_close() was called. Any thread. */
bool fx_queue_is_closed(const fx_queue *q);
/* Fills |st| with relaxed reads of the counters and gauges. Any thread. */
void fx_queue_get_stats(const fx_queue *q, fx_queue_stats *st);

/* Parses a config policy name: "block", "drop_new" or "drop_old" (exact,
 * lowercase, as in the config files and FELIX_* env). Returns 0 and sets
 * |*out|, or FX_ECONFIG for anything else (|*out| untouched). */
int fx_queue_policy_parse(const char *s, fx_queue_policy *out);
/* The config name of |p| ("block", "drop_new", "drop_old"), or "?" if invalid. */
const char *fx_queue_policy_name(fx_queue_policy p);

#endif
