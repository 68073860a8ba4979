/* The journal of a consumer group of a durable stream (group_journal.c):
 * the group's settled state and attempts kept on disk with fx_gjournal
 * (storage/gjournal.h) in <stream dir>/groups/, so that a restart finds
 * the group where its acks left it.
 *
 * Threads. Worker side (the stream's worker loop, with the group stage,
 * group.c): the engine's observer turns each change into an
 * fx_gjournal_rec appended to the group's buffer; once per loop turn the
 * buffer is handed to the stream's storage thread as one batch (a task
 * posted to the storage loop, as durable.c hands over appends). The buffer
 * and the batches in flight are bounded (FXB_GJ_MAX_UNWRITTEN records):
 * at the bound the group hands nothing out (counted) until storage caught
 * up; nothing is dropped. A GROUP_ACKED answer (ack_sync) is tagged with
 * the number of records made before it and released when storage reports
 * that many durable. Storage-thread side (durable_store.c calls it): the
 * batch is written with fx_gjournal_append, flushed following the stream's
 * fsync policy (on_commit: before it is reported; periodic: with the log's
 * periodic flush; none: never), applied to a state model and compacted at
 * fx_gjournal's thresholds; at a log's open every group found under
 * groups/ is recovered, clamped to the log's tail and re-created on the
 * worker.
 *
 * Ownership: an fxb_gjournal is shared by the two sides and freed by the
 * last of its references (the worker's, the storage's, and one for its
 * reply task while posted). The worker side owns the buffer and the
 * waiting answers; the storage side owns the fx_gjournal, the state model
 * and the link on its dstream's list. The group's name is kept beside its
 * files in <stem>.name (written once, at create; docs/durability.md). */
#ifndef FX_BROKER_GROUP_JOURNAL_H
#define FX_BROKER_GROUP_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/group_state.h"
#include "storage/gjournal.h"

struct fxb_group;
struct fxb_reply;
struct dstream;
struct fx_buf;
typedef struct fxb_gjournal fxb_gjournal;

/* Records made and not yet reported durable, beyond which the group stops
 * handing out. */
#define FXB_GJ_MAX_UNWRITTEN 8192u

/* ---- pure parts (tested alone) ---- */

/* The journal record of engine event |e| into |out| (FXB_GS_EV_REDRIVE:
 * a REDRIVE). Returns false for an event the journal does not keep (none
 * today). */
bool fxb_gj_event_rec(const fxb_gs_event *e, fx_gjournal_rec *out);
/* Rebuilds engine |gs| (new, no member) from recovered state |s| (clamped):
 * floor and next, then every pending record with its attempts, AVAILABLE
 * now, or PARKED for what is left of its delay: the journal keeps a delayed
 * nak's not-before time on the wall clock (|wall_us| now), the engine on
 * the loop's (|now_us| now). Dead intents come back as pending records,
 * dead-lettered again by the next pump when their deliveries are used up.
 * Returns 0, -EINVAL or -ENOMEM. */
int fxb_gj_restore(fxb_gs *gs, const fx_gjournal_state *s, uint64_t now_us, uint64_t wall_us);
/* The wall clock (CLOCK_REALTIME) in microseconds: the clock of a journal's
 * not-before times. */
uint64_t fxb_gj_wall_us(void);

/* Rebuilds |g|'s dead-letter list (group_int.h) from recovered state |s|:
 * its entries, redriven ones included, and the forgotten count. 0 or
 * -ENOMEM (the list left empty). Worker loop. */
int fxb_gj_restore_dead(struct fxb_group *g, const fx_gjournal_state *s);

/* ---- worker side (the stream's worker loop) ---- */

/* Gives group |g| of a durable stream a journal; with |create| its files
 * are made on the storage thread (name file, journal, a SEEK to |start|,
 * flushed). Sets the engine's observer. 0 or -ENOMEM. */
int fxb_gj_attach_new(struct fxb_group *g, uint64_t start);
/* The group is deleted (|remove|: its files go) or the stream ended: the
 * journal is closed on the storage thread; answers waiting are dropped. */
void fxb_gj_detach(struct fxb_group *g, bool remove);
/* Teardown (every loop stopped): frees what the worker holds. */
void fxb_gj_teardown(struct fxb_group *g);
/* Whether |g| may hand out more now (its unwritten records are below the
 * bound). Counts a wait when it may not; the report of storage's progress
 * pumps the group again. */
bool fxb_gj_room(struct fxb_group *g);
/* The dead-letter path of |d| begins (a DEAD_INTENT record). */
void fxb_gj_dead_intent(struct fxb_group *g, const fxb_gs_dead *d);
/* |offset|'s dead-letter entry was discarded (a DISCARD record; a redrive
 * is journaled by the engine's FXB_GS_EV_REDRIVE). */
void fxb_gj_discard(struct fxb_group *g, uint64_t offset);
/* Holds GROUP_ACKED |frame| for reply |r| until every record made so far is
 * durable; returns false (the caller answers now) when nothing is waiting.
 * Takes |r| and |frame| when it returns true. */
bool fxb_gj_defer_answer(struct fxb_group *g, struct fxb_reply *r, struct fx_buf *frame);
/* The journal's failure that refuses the group (its files could not be
 * opened or written), or NULL. */
const char *fxb_gj_error(const struct fxb_group *g);
/* Records made, and reported durable. */
uint64_t fxb_gj_made(const struct fxb_group *g);
uint64_t fxb_gj_durable(const struct fxb_group *g);

/* ---- storage-thread side ---- */

/* The log of |s| was opened: every group under <dir>/groups/ is opened,
 * clamped to the log's tail and sent to the worker to be re-created (a
 * group whose files fail to open is sent as refused, with the file and the
 * reason; logged, counted). Storage thread. */
void fxb_gj_store_recover(struct dstream *s);
/* Flushes every journal of |s| (the periodic flush of its log, the drain).
 * Storage thread. */
void fxb_gj_store_sync_all(struct dstream *s);
/* Closes every journal of |s| (flushed) before its log closes. Storage
 * thread, or teardown. */
void fxb_gj_store_close_all(struct dstream *s);

#endif
