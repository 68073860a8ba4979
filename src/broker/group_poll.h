/* The original's JSON consumer-group requests served on our group engine
 * (group_poll.c, the worker side; the connection side is group_json.c):
 * one request per bidi stream, carried to the stream's worker as a struct
 * fxb_gjreq, run there on the group (fxb_group, group_int.h), answered
 * through the stream's reply slot (reply.h), which the worker completes and
 * posts back. A group_poll is served by a poll member of the group: an
 * engine member per consumer name (anonymous polls share one per group)
 * whose window is open only while one of its polls waits, and whose
 * deliveries are collected into that poll's group_records answer instead of
 * being pushed on a lane. Owns struct fxb_gjreq and the group's poll part
 * (struct fxb_gpoll, fxb_group.poll). Worker loop, but fxb_gjreq is made on
 * the connection loop and handed over once, by the post. */
#ifndef FX_BROKER_GROUP_POLL_H
#define FX_BROKER_GROUP_POLL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/loop.h"
#include "broker/group.h"
#include "broker/group_state.h"
#include "wire/message.h"

struct fxb_group;
struct fxb_reply;

/* Records one group_poll hands out at most (the original's bound), and the
 * payload bytes after which it stops (a single larger record still goes,
 * alone); the rest of a run past them goes back unattempted. */
#define FXB_GPOLL_MAX_RECORDS 1000u
#define FXB_GPOLL_MAX_BYTES (4u << 20)
/* wait_ms cap when fx_broker_opts.group_max_wait_ms is 0. */
#define FXB_GPOLL_MAX_WAIT_MS 30000u
/* Polls one group may have waiting (refused beyond, counted), and the poll
 * members (consumer names) it keeps (refused beyond, counted). */
#define FXB_GPOLL_MAX_WAITING 1024u
#define FXB_GPOLL_MAX_MEMBERS 1024u

/* One JSON group request on its way to (and on) the stream's worker. Made
 * and filled by the connection loop, posted once; from then on the
 * worker's, which answers it (completing |reply|) and frees it. */
typedef struct fxb_gjreq {
    fx_task task; /* fxb_gpoll_run on the worker */
    fxb_worker *w;
    fx_stream_handle *h;     /* a reference */
    struct fxb_reply *reply; /* the answer's slot: the worker's reference */
    fx_msg_type type;
    uint32_t features; /* what the client offered (auth.client_features) */
    char group[FXB_GROUP_NAME_MAX + 1];
    char consumer[FXB_GROUP_NAME_MAX + 1]; /* "" : anonymous */
    uint64_t request_id;
    uint64_t offset;        /* ack, nack, extend, dead_letter */
    uint64_t wait_ms;       /* poll, capped by the connection loop */
    uint64_t visibility_ms; /* poll (0: the group's lease) */
    uint64_t delay_ms;      /* nack */
    uint64_t extend_ms;     /* extend (> 0) */
    uint32_t max_records;   /* poll, capped at FXB_GPOLL_MAX_RECORDS */
    uint32_t attempts;      /* nack (0: any), extend */
    bool if_new;            /* seek */
    fx_msg_start start;     /* seek */
    /* Worker, while a poll waits: its group's queue of the member's polls,
     * its deadline timer, and the records collected for its answer (each
     * payload a heap copy). */
    struct fxb_gjreq *next;
    struct fxb_group *g;
    struct fxb_gpm *pm;
    uint64_t deadline_ns; /* answered then (loop time) with what it has */
    fx_timer timer;
    bool timer_armed;
    fx_msg_group_record *recs;
    uint32_t nrecs, recs_cap;
    uint64_t bytes;
} fxb_gjreq;

/* Task callback (fxb_gjreq.task): runs the request on its group and
 * answers it, now or, for a poll that waits, later. Worker loop. */
void fxb_gpoll_run(fx_loop *l, fx_task *t, void *user);

/* Frees |q| unanswered (its reply reference dropped; the stream resets
 * the slot when it reaches the head). Any thread; the caller owns |q|. */
void fxb_gjreq_free(fxb_gjreq *q);

/* ---- hooks of the group stage (group.c) ---------------------------------- */

/* True when engine member |mid| of |g| is a poll member. */
bool fxb_gpoll_is_member(const struct fxb_group *g, uint32_t mid);
/* The engine handed run |r| to a poll member: its |sl| payloads (r->count)
 * are copied into the member's waiting poll; what passes the poll's byte
 * bound goes back unattempted (fxb_gs_release). Returns the records taken,
 * or -ENOMEM (nothing taken: the caller gives the run back). */
int fxb_gpoll_deliver(struct fxb_group *g, const fxb_gs_run *r, const fx_wire_slice *sl);
/* After a pump of |g|: answers the waiting polls that got records or whose
 * deadline passed, and opens the window for the next poll of each member.
 * Worker loop. */
void fxb_gpoll_after_pump(struct fxb_group *g);
/* |g| is deleted (group_delete or its stream deleted): its waiting polls
 * are answered with no record. */
void fxb_gpoll_group_gone(struct fxb_group *g);
/* Frees |g|'s poll part (the group is freed; waiting polls unanswered at
 * teardown). */
void fxb_gpoll_free(struct fxb_group *g);

#endif
