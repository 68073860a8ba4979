/* The worker loop (worker.c): drains its job queue (checkpoint 4's
 * consumer), appends and fans out (checkpoint 5), keeps its streams' state,
 * registers subscriptions and ends deleted streams. Worker loop unless
 * noted. Owns struct fxb_worker and fxb_end, and the worker fields of
 * fxb_sub (reg_task, unreg_task, stream, sub, registered, reg_rv, available,
 * wnext, wprev, ending, block_kicked, block_task). */
#ifndef FX_BROKER_WORKER_H
#define FX_BROKER_WORKER_H

#include "base/placement.h"
#include "broker/broker_internal.h"

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
/* Task callbacks: drain the job queue; continue a parked fanout. */
void fxb_worker_drain(fx_loop *l, fx_task *t, void *user);
void fxb_worker_resume(fx_loop *l, fx_task *t, void *user);
/* Task callbacks of a subscription (fxb_sub.reg_task / unreg_task): register
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
