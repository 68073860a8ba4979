/* Private to the storage stage: durable_store.c (the storage thread),
 * durable.c (the worker side), durable_ops.c (start-up, recovery, the drain
 * flush, shutdown) and durable_admin.c (retention overrides, the admin
 * view): the stage's state, a job's trip through storage and the test
 * hooks. The storage thread's functions: durable_store.h. Thread noted per
 * field. */
#ifndef FX_BROKER_DURABLE_INT_H
#define FX_BROKER_DURABLE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/metrics.h"
#include "broker/durable.h"
#include "broker/idtable.h"
#include "broker/job.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/rootlock.h"
#include "storage/syncpol.h"

typedef struct fxb_durable fxb_durable;

/* A job's trip through storage: made by the worker side when it takes a job
 * of a durable stream, sent to the storage thread, handed back to the
 * worker, and freed there when the job leaves for the ring. The job itself
 * carries nothing of it. Thread per field. */
typedef struct fxb_stored {
    fxb_job *job;            /* owned while on a list */
    struct fxb_stored *next; /* on a held, appending, waiting or ready list */
    fx_task task;            /* worker -> storage thread (fxb_store_on_job) */
    fx_task back;            /* storage thread -> worker: the stored job returns */
    int rv;                  /* storage: 0 or the storage error the job fails with */
    uint64_t first;          /* storage: offset of its first record in the log */
    uint64_t base;           /* storage: the log's next offset when it was opened */
    uint64_t bytes;          /* worker: what it counts against durable_max_unsynced_bytes */
} fxb_stored;

/* Queues |t| at the tail of list |*head|..|*tail|. */
static inline void trip_push(fxb_stored **head, fxb_stored **tail, fxb_stored *t)
{
    t->next = NULL;
    if (*tail != NULL)
        (*tail)->next = t;
    else
        *head = t;
    *tail = t;
}

/* Unlinks the head of list |*head|..|*tail|; NULL when it is empty. */
static inline fxb_stored *trip_pop(fxb_stored **head, fxb_stored **tail)
{
    fxb_stored *t = *head;
    if (t != NULL) {
        *head = t->next;
        if (*head == NULL)
            *tail = NULL;
        t->next = NULL;
    }
    return t;
}

/* Frees |t| and its job, unanswered (teardown). */
static inline void fxb_stored_free(fxb_stored *t)
{
    fxb_job_free(t->job);
    free(t);
}

/* Where a durable stream's log stands (GET /v1/streams "durable_state"). */
typedef enum dstate {
    DSTATE_RECOVERING = 0, /* catalogued at start; its storage thread has not opened it yet */
    DSTATE_OPEN,           /* open: publishes and subscribes are served */
    DSTATE_DAMAGED,        /* corruption found at open: quarantined until repaired */
    DSTATE_FAILED,         /* the last open failed (ENOSPC, EMFILE, EIO...): retried */
} dstate;

/* What GET /v1/streams shows of a durable stream's log: written by its
 * storage thread (relaxed atomics; |state| and |why| under |cat_mu|), read
 * by the admin thread under |cat_mu| (the entry leaves the list under it
 * before it is freed). Listed from the start for a catalogued stream (as
 * recovering), else while its dstream lives. */
typedef struct dstats {
    struct dstats *next;
    uint64_t handle_id;
    const fx_stream_handle *h; /* its names; a reference is held while it is listed */
    atomic_uint_fast64_t first, next_off, bytes, segments;
    atomic_uint_fast64_t producers; /* in the log's producer table */
    dstate state;
    char why[512]; /* DAMAGED, FAILED: the reason, naming file and position */
} dstats;

/* The flush of one log in flight: begun on the storage thread, its
 * fdatasync run on the storage thread's sync thread, completed back on the
 * storage thread. Thread per field. */
typedef struct dflight {
    fx_dlog_flush fl;  /* storage thread writes it before posting |sync_task|; sync thread reads */
    int rv;            /* fx_dlog_flush_run's result: sync thread writes, under st->sync_mu */
    bool synced;       /* |rv| is set (under st->sync_mu) */
    fx_task sync_task; /* on the sync thread: the fdatasync, then posts |done_task| */
    fx_task done_task; /* on the storage thread: the completion */
    bool busy;         /* storage: |sync_task| posted and |done_task| has not run yet */
    bool finished;     /* storage: completed by a wait before |done_task| ran */
    uint64_t start_ns; /* storage: when it began */
    uint64_t covers;   /* storage: the appends it serves */
} dflight;

/* The log of one durable stream on its storage thread. */
typedef struct dstream {
    struct fxb_storage *st;
    fx_stream_handle *h; /* reference */
    fx_dlog *log;
    int open_rv;       /* of the last open: 0, FX_ESTORAGE_DAMAGED (quarantined) or the failure */
    uint64_t retry_ns; /* a failed open (not damage) is tried again from then on */
    char why[512];     /* damaged or failed: what clients are told (no server path) */
    uint64_t gen;      /* its catalogue entry's generation (once declared) */
    char dirname[FX_CATALOG_DIR_MAX];     /* claimed from the declaration to the close */
    dstats *stats;                        /* listed while |log| is open */
    uint64_t shown_bytes, shown_segments; /* what the gauges hold of this log */
    uint64_t charged;     /* bytes on disk charged to its tenant's and the broker's quota */
    bool charge_reserved; /* |charged| counts the active segment's preallocation */
    atomic_uint_fast64_t first_offset; /* the log's next offset at open (the ring's start) */
    fx_syncpol pol;
    fxb_stored *ahead, *atail; /* taken, to be appended together (arrival order) */
    fx_task append_task;       /* appends them after the jobs queued now */
    fx_dlog_iov *iov;          /* the records of one merged append (reused) */
    size_t iov_cap;
    fxb_stored *whead, *wtail; /* appended, waiting for the policy's ack (offset order) */
    fx_task flush_task;        /* on_commit: flush after the appends queued now */
    bool flush_queued;         /* |flush_task| is posted and has not run yet */
    dflight flight;            /* the flush in flight, if any (one per log at a time) */
    fx_task *parked_end;       /* the stream's end, waiting for the flush in flight */
    fx_timer timer;            /* periodic flush, retention */
    uint64_t retain_due_ns;
    uint64_t retain_bytes, retain_ns; /* the catalogue's overrides, else the broker's */
    struct fxb_gjournal *gjs;         /* its groups' journals (group_journal.c) */
    uint64_t gj_sync_due_ns;          /* periodic: a journal waits for a flush until then */
} dstream;

/* One storage thread: the logs of one worker's durable streams. Its sync
 * thread runs the fdatasync of their flushes in flight (one per log at a
 * time, queued in the order they began) and touches nothing else of a log:
 * the storage thread begins and completes every flush (dflight). */
typedef struct fxb_storage {
    struct fxb_durable *d;
    fxb_worker *w;
    fx_loop *loop;           /* appends, flushes, retention */
    fx_loop *rloop;          /* replay reads from disk (replay.c): their own queue */
    fx_loop *sloop;          /* fx-sync-N: the fdatasync of the flushes in flight */
    pthread_mutex_t sync_mu; /* a flight's |rv| and |synced| */
    pthread_cond_t sync_cv;  /* signalled when a flight's fdatasync returned */
    fxb_idtable ds;          /* its open logs (dstream *) by handle id, until their stream ends */
    /* Start-up recovery (durable_ops.c): the catalogued streams whose logs
     * this thread opens one per task, references; filled on main before
     * the thread starts, then storage thread only. */
    fx_stream_handle **rq;
    size_t rqn, rqi, rqcap;
    fx_task rtask;
    bool in_recovery; /* the recovery task is opening a log (not a publish or subscribe) */
} fxb_storage;

struct fxb_durable {
    fx_broker *b;
    char dir[4096];
    fx_broker_durable_opts o;
    pthread_mutex_t cat_mu; /* the catalogue is shared by the storage threads */
    fx_rootlock *lock;      /* the root for this broker alone (NULL on a test I/O layer) */
    fx_catalog *cat;
    fx_retention_clock clock; /* time retention's guard against wall clock steps */
    /* Bytes on disk of every open log against durable_bytes_max (the
     * storage threads charge it with relaxed atomics; |refs| unused). */
    fx_retained bytes;
    struct open_dir *open; /* directories with an open log (under |cat_mu|) */
    dstats *stats;         /* of every open log (under |cat_mu|) */
    char error[6144];      /* why the start failed (main thread, start-up reports it) */
    fxb_storage *st;       /* one per worker */
    uint32_t nst;
    uint32_t nstarted; /* storage threads running (with their replay threads) */

    /* Deletions the catalogue could not finish are retried on storage
     * thread 0 (|retry_timer|, armed while any is left). */
    fx_task retry_task;
    atomic_bool retry_posted;
    fx_timer retry_timer;
    bool retry_armed; /* storage thread 0 */

    /* The per-stream gauges of the open logs (durable_admin.c). */
    fx_mstream_source msrc;

    /* Start-up recovery progress (fx_broker_durable_recovery): written by
     * the storage threads, read anywhere. */
    uint64_t rec_total; /* catalogued streams at start (set before the threads start) */
    uint64_t rec_t0;    /* when the storage threads started on them */
    atomic_uint_fast64_t rec_done, rec_damaged, rec_failed;
    atomic_uint_fast64_t rec_logged_ns; /* the last progress line */

    /* The broker is stopping (fxb_durable_stopping): no start-up recovery
     * begins and no consumer group is recovered from then on, so nothing is
     * sent to a worker loop after it stopped (a group's restore task would
     * never run). Set by the stopping thread, read by the storage threads. */
    atomic_bool stopping;
};

/* Per durable stream on its worker: bytes in storage and the jobs held
 * back by the bound. Made on first use, freed when the stream ends there
 * with nothing of it in storage (else when the last job comes back). */
typedef struct dws {
    bool known;        /* |base| came back from storage */
    bool ended;        /* its stream ended with jobs in storage: the last one back frees it */
    uint64_t base;     /* the log's next offset at open: the ring starts there */
    uint64_t bytes;    /* of jobs sent to storage and not yet back */
    uint64_t inflight; /* jobs sent to storage and not yet back */
    fxb_stored *hhead, *htail;
} dws;

/* A worker's side of the stage. */
struct fxb_dworker {
    fxb_storage *st;
    fxb_idtable s;             /* dws * by handle id */
    fxb_stored *rhead, *rtail; /* stored, waiting for ring + fanout */
    uint64_t pending;          /* taken, not yet completed */
};

/* A directory whose log is open: one writer per directory, also when a
 * deleted stream's log is still being closed as its name is created again. */
typedef struct open_dir {
    struct open_dir *next;
    char name[FX_CATALOG_DIR_MAX];
} open_dir;

/* A failed log open (not damage) is tried again this long after. */
#define FXB_OPEN_RETRY_NS (1000 * FX_NS_PER_MS)

/* ---- test hooks (test_hooks.c sets them) ---- */

/* Run before a recovery opens a log; NULL in the daemon. */
extern void (*_Atomic fxb_test_on_recover)(const fx_stream_handle *h);
/* Set by fx_broker_test_deletion_hook: called with the directory of every
 * deleted incarnation before it is removed, on the storage thread; a
 * non-zero return fails the removal with it. */
extern int (*_Atomic fxb_durable_delete_hook)(const char *path);
/* The stream's timer callback (|user| is the dstream): periodic flush and
 * retention sweep. Named so fx_broker_test_fail_timer_arms can aim at it.
 * Storage loop. */
void fxb_dstream_on_timer(fx_loop *l, fx_timer *t, void *user);

#endif
