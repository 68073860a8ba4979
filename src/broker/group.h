/* Consumer groups (group.c): the group stage on the stream's worker loop.
 * Owns struct fxb_group (one group: its engine, fxb_gs in group_state.h,
 * its members, its lease timer and its pump task), the worker's table of
 * groups by stream, and a member's group part (fxb_sub.grp) except the
 * fields the connection loop keeps (|join|, |room_task|, |reply_task|
 * use). A group belongs to its stream's worker (the placement rule), so
 * every state change, timer and dispatch runs on the loop that appends to
 * the ring, with no lock; members' operations reach it through a small
 * locked inbox per member, bounded (checkpoint 5a), posted as a task.
 *
 * A member is a fxb_sub whose deliveries are built here instead of by a
 * feeder: GROUP_BATCH frames pushed on its writer lane (group frames take a
 * lane slot but never wait or are shed: the member's window bounds them). */
/* broker_internal.h embeds fxb_sub_group in fxb_sub and includes this
 * header back: it comes first, outside the guard. */
#include "broker/broker_internal.h"

#ifndef FX_BROKER_GROUP_H
#define FX_BROKER_GROUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/loop.h"
#include "broker/stream.h"
#include "wire/group.h"

/* Longest group and member names (the original's consumer name bound). */
#define FXB_GROUP_NAME_MAX 128

/* A member's inbox (checkpoint 5a): the bytes of its GROUP_ACKS frames
 * queued for its worker and not yet applied, each charged its body and its
 * bookkeeping (struct fxb_gops). Once a frame brings it to the bound, the
 * join stream stops reading (its input is not credited, so QUIC flow control
 * holds the client) until the worker has applied it down to the low mark.
 * Nothing is dropped: the frame that reached the bound is queued, so the
 * inbox holds at most the bound plus one frame. */
#define FXB_GROUP_OPS_INBOX_BYTES (256u * 1024u)
#define FXB_GROUP_OPS_INBOX_LOW (FXB_GROUP_OPS_INBOX_BYTES / 2u)
/* fxb_group_queue_ops: the frame was queued and the inbox is at its bound. */
#define FXB_GROUP_OPS_FULL 1

struct fxb_group;
struct fxb_gops;

/* How a join asks to create its group when it does not exist. */
typedef enum fxb_group_create {
    FXB_GROUP_NO_CREATE = 0, /* the group must exist */
    FXB_GROUP_CREATE_ALL,    /* from the oldest record the stream holds */
    FXB_GROUP_CREATE_NEW,    /* from the next record appended */
    FXB_GROUP_CREATE_LAST,   /* from the last record appended */
    FXB_GROUP_CREATE_OFFSET, /* from |create_offset| */
    FXB_GROUP_CREATE_TIME,   /* from the first record at or after |create_offset| (Unix us) */
} fxb_group_create;

/* A member's group part (fxb_sub.grp). Set by the join (connection loop)
 * before the subscription is shared; then the worker's fields are its own,
 * the inbox is shared under |mu|. */
typedef struct fxb_sub_group {
    bool is_member;
    char group[FXB_GROUP_NAME_MAX + 1];
    char member[FXB_GROUP_NAME_MAX + 1];
    uint32_t window;      /* asked (0: 256); the worker's clamp in |granted| */
    uint32_t ack_wait_ms; /* asked (0: the group's) */
    fxb_group_create create;
    uint64_t create_offset;
    /* Worker: */
    struct fxb_group *g;
    uint32_t mid;
    uint32_t granted;     /* window after the group's clamp */
    uint32_t lease_ms;    /* ack wait after the group's clamp */
    int join_rv;
    const char *why;      /* static text for a refused join */
    fx_task ops_task;
    fx_task leave_task;
    /* Connection loop: the join stream, which carries its acks and their
     * answers; NULL once it is gone. |room_task| (set by group_req.c, posted
     * by the worker) lets it read on once the inbox has room again. */
    fxb_bidi *join;
    fx_task room_task;
    /* Operations from the connection loop, oldest first, under |mu|, and
     * their bytes (FXB_GROUP_OPS_INBOX_BYTES), counted until the worker has
     * applied them; |ops_full|: the join stream stopped reading at the bound
     * and waits for |room_task|. */
    pthread_mutex_t mu;
    struct fxb_gops *ops_head, *ops_tail;
    size_t ops_bytes;
    bool ops_full;
} fxb_sub_group;

/* Makes |sub|'s group part (names, asks) and its inbox. Conn loop. */
void fxb_sub_group_init(fxb_sub *sub);
/* Frees operations still queued. Any thread, by the last reference. */
void fxb_sub_group_deinit(fxb_sub_group *gp);

/* Task callbacks of a member (fxb_feeder.reg_task / unreg_task and
 * fxb_sub_group.ops_task): joins its group (then answers on the connection's
 * loop through fxb_sub.reply_task), leaves it, applies its operations. Worker
 * loop. */
void fxb_group_member_register(fx_loop *l, fx_task *t, void *user);
void fxb_group_member_unregister(fx_loop *l, fx_task *t, void *user);
void fxb_group_member_ops(fx_loop *l, fx_task *t, void *user);
/* A member finished its join stream (a graceful leave): it leaves the
 * engine (what it holds becomes available), then its event stream is
 * finished after what is queued on it. Worker loop (fxb_sub_group.leave_task). */
void fxb_group_member_leave(fx_loop *l, fx_task *t, void *user);

/* Queues a member's decoded GROUP_ACKS (|body| is copied) for its worker;
 * |reply| (may be NULL) is the reply slot a request id asked for, completed
 * by the worker with a GROUP_ACKED frame. Returns 0, FXB_GROUP_OPS_FULL
 * (queued, and the inbox is at its bound: the caller stops reading the join
 * stream until |room_task| runs) or -ENOMEM (not queued). Conn loop. */
int fxb_group_queue_ops(fxb_sub *sub, const uint8_t *body, size_t len, struct fxb_reply *reply);

/* Records were appended to |h|'s stream on worker |w|: its groups hand them
 * out. Cheap when the worker has no group. Worker loop. */
void fxb_group_on_append(fxb_worker *w, fx_stream_handle *h);

/* True when |h| has a consumer group on |w|. O(1). Worker loop. */
bool fxb_group_any(fxb_worker *w, const fx_stream_handle *h);
/* Checkpoint 4g, the ring hold (worker.c), for an append that would evict
 * the ring's records below |end|: the lowest offset a group of |h| on |w|
 * has not settled, raised to the ring's oldest (what is gone already is
 * settled as skipped at the group's next pump); UINT64_MAX when no group
 * holds. A group's dead letters not yet written do not hold: one waits to
 * be queued on its dead-letter stream's worker, whose queue may be the one
 * the hold keeps full, so waiting could deadlock. When such records lie
 * between a group's floor and |end|, its floor counts past them and the
 * lowest floor passed so goes to |*pyield| (UINT64_MAX: none): the append
 * settles them as skipped. A group whose hold lapsed (fxb_group_hold_lapse)
 * does not hold until it catches up. O(groups of |h|), plus the offsets
 * below |end| of a group with dead letters waiting. Worker loop. */
uint64_t fxb_group_hold_floor(fxb_worker *w, const fx_stream_handle *h, uint64_t end,
                              uint64_t *pyield);
/* A held append to |h| went ahead at group_hold_timeout_ms, evicting up to
 * |end|: each group of |h| whose floor is below |end| stops holding until
 * its floor reaches |tail| (the tail after that append), so a stuck group
 * makes the stream's appends wait once per turn of the ring, not once per
 * append. Worker loop. */
void fxb_group_hold_lapse(fxb_worker *w, const fx_stream_handle *h, uint64_t end, uint64_t tail);

/* The stream of |h| was deleted: its groups go, and each member's event
 * stream is finished after what is queued on it. Worker loop. */
void fxb_group_end_stream(fxb_worker *w, fx_stream_handle *h);
/* Frees the worker's groups (teardown, loop stopped). */
void fxb_group_worker_deinit(fxb_worker *w);

#endif
