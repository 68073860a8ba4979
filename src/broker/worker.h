/* The worker loop (worker.c): drains its job queue (checkpoint 4's
 * consumer), appends and fans out (checkpoint 5), keeps its streams' state,
 * registers subscriptions and ends deleted streams. Worker loop unless
 * noted. Owns struct fxb_worker and fxb_end, and with the feeder the
 * registration fields of a subscription's feeder part (fxb_feeder in
 * feeder.h: reg_task, unreg_task, stream, sub, registered, reg_rv,
 * available, wnext, wprev, ending, block_kicked, block_task). */
#ifndef FX_BROKER_WORKER_H
#define FX_BROKER_WORKER_H

#include "base/placement.h"
#include "base/queue.h"
#include "broker/broker_internal.h"
#include "broker/idtable.h"

/* Jobs one worker turn takes before yielding to other tasks. */
#define FXB_WORKER_BATCH 64
/* Close reason of a connection closed by subscriber_block_timeout
 * (FXB_CODE_SLOW_SUBSCRIBER). */
#define FXB_SLOW_SUBSCRIBER_TEXT "subscriber blocked longer than subscriber_block_timeout_ms"

/* A worker loop: owns its streams, drains its job queue (checkpoint 4),
 * appends and fans out (checkpoint 5) and runs its streams' feeders. */
struct fxb_worker {
    fx_broker *b;
    uint32_t index;
    fx_loop *loop;
    fx_queue jobs;       /* fxb_job*, policy BLOCK (ingress decides) */
    fx_task doorbell;    /* drains |jobs|; coalesced */
    fx_task resume_task; /* a parked fanout may continue */
    /* Worker thread only: */
    fxb_idtable streams; /* its streams' state (fx_stream *), by handle id */
    fxb_idtable groups;  /* its streams' consumer groups (group.c), by handle id */
    fxb_idtable idem;    /* its in-memory streams' producer tables (idem.c), by handle id */
    fxb_job *parked_job; /* its fanout waits on a full block queue */
    fx_stream *parked_stream;
    fxb_sub *subs;        /* registered subscriptions (feed.wnext / feed.wprev) */
    uint64_t jobs_done;   /* jobs taken from |jobs| and completed */
    struct fxb_end *ends; /* deleted streams waiting for older jobs (worker.c) */
    /* subscriber_block_timeout: runs while the fanout is parked; |block_seq|
     * is the park (fx_stream_park_seq) it was armed for. */
    fx_timer block_timer;
    uint64_t block_seq;
    /* Checkpoint 4g, the ring hold: |parked_job| is not appended yet; it
     * waits for a group of its stream to settle what its append would evict
     * (not a parked fanout). |hold_timer| is group_hold_timeout. */
    bool group_held;
    fx_timer hold_timer;
    /* stream_idle_expiry sweeps (worker 0 only). */
    fx_task expiry_start;
    fx_timer expiry_timer;
    struct fxb_dworker *dur; /* durable streams' storage stage (durable.c), or NULL */
    struct fxb_gmset *gmetrics; /* its groups' /metrics series (group_metrics.c), or NULL */
    /* Its caches' store and sweep timer (cache_srv.c). */
    struct fxb_wcache *cache;
};

/* Posted to the deleted stream's worker; holds a handle reference. Jobs
 * queued before the deletion may still be waiting (a publish is acknowledged
 * when admitted unless ack_on_commit), and their events belong to the
 * subscribers: the end waits until the worker has completed as many jobs as
 * were queued or parked when it arrived (the queue is FIFO and a parked job
 * holds the rest back), then the feeders send what is queued and the FIN. */
typedef struct fxb_end {
    fx_task task;
    fxb_worker *w;
    fx_stream_handle *h;
    uint64_t target; /* w->jobs_done once every older job has completed */
    /* A cluster move: the subscribers' last frame names the new owner. */
    bool moved;
    char moved_to[65];
    char moved_addr[129];
    uint64_t moved_gen;
    struct fxb_end *next;
} fxb_end;

/* The worker that owns |h| (fx_placement_worker_for over the broker's
 * workers). Any thread. */
static inline fxb_worker *fxb_worker_for(fx_broker *b, const fx_stream_handle *h)
{
    return &b->workers[fx_placement_worker_for(fx_stream_handle_id(h), b->nworkers)];
}
/* Rings |w|'s doorbell (jobs were queued). Any thread. */
void fxb_worker_kick(fxb_worker *w);
/* The fx_stream of |h| on worker |w|, created on first use. Worker thread.
 * Returns NULL on -ENOMEM. */
fx_stream *fxb_worker_stream(fxb_worker *w, fx_stream_handle *h);
/* The worker's state for |h| if it has any; never creates it. Worker thread. */
fx_stream *fxb_worker_stream_if_any(fxb_worker *w, const fx_stream_handle *h);
/* Slots of the worker's stream table: at most eight times the streams it
 * holds, or 16. Worker thread. */
size_t fxb_worker_stream_capacity(const fxb_worker *w);
/* Creates worker |i| of |b| (its loop, not started, and its job queue).
 * Returns 0 or -errno. Main thread. */
int fxb_worker_init(fx_broker *b, fxb_worker *w, uint32_t i);
/* Frees what fxb_worker_init made and the worker's streams (loop stopped). */
void fxb_worker_deinit(fxb_worker *w);
/* A group of |h| may have settled records (checkpoint 4g): if |w| holds an
 * append to |h|, it checks again (resume_task). Worker thread. */
void fxb_worker_hold_kick(fxb_worker *w, const fx_stream_handle *h);
/* Task callbacks: drain the job queue; continue a parked fanout, or check a
 * held append again. */
void fxb_worker_drain(fx_loop *l, fx_task *t, void *user);
void fxb_worker_resume(fx_loop *l, fx_task *t, void *user);
/* Task callbacks of a subscription (fxb_feeder.reg_task / unreg_task): register
 * it with its stream (then answer on the connection's loop) or remove it. */
void fxb_worker_sub_register(fx_loop *l, fx_task *t, void *user);
void fxb_worker_sub_unregister(fx_loop *l, fx_task *t, void *user);
/* The stream of |h| was deleted: its subscriptions on |w| finish their event
 * streams after what is queued (FIN), and the worker's fx_stream is freed
 * once nobody uses it. Worker thread. */
void fxb_worker_end_stream(fxb_worker *w, fx_stream_handle *h);
/* Task callback of a posted fxb_end (fx_broker_delete_stream). */
void fxb_worker_end_task(fx_loop *l, fx_task *t, void *user);
/* Ends the deleted streams whose older jobs have all completed. Worker
 * thread; called after each completed job while |w->ends| is set. */
void fxb_worker_run_due_ends(fxb_worker *w);
/* Drops the ends still waiting (teardown). */
void fxb_worker_free_ends(fxb_worker *w);

#endif
