/* Consumer-group state (group_state.c): the pure engine of one shared group
 * on one stream. It decides who gets which offset, and what happens on an
 * ack, a nak, a lapsed lease or a ring eviction; it does no I/O and reads
 * no clock (every call gets |now_us|). Owner: the stream's worker loop (the
 * group stage, group.c, calls it); not thread-safe, no locks.
 *
 * Model. Offsets below |floor| are settled (the floor is the lowest
 * unsettled offset; only a redrive, fxb_gs_redrive, moves it back).
 * [floor, next) holds the unsettled offsets ("pending"), each ACQUIRED
 * (held by a member until its deadline), AVAILABLE (waiting to be handed
 * out again, oldest first) or PARKED (a delayed nak, AVAILABLE at its
 * not-before time); everything else in [floor, next) is settled. Offsets >= next were never handed out.
 * Memory is O(pending + members): the settled offsets above the floor are
 * implicit, and pending is bounded by max_ack_pending (acquired + available)
 * plus max_parked (a redrive, which may pass max_ack_pending, never takes
 * the pending set past that sum).
 *
 * Checkpoints (docs/design.md): 5g  pending >= max_ack_pending (or its
 * bytes): no first delivery for anyone (redeliveries still go out), counted
 * in fxb_gs_stats.capped and shown by capped_since_us; 5m a member's held ==
 * window: that member gets nothing, counted in member_full; 5p parked ==
 * max_parked: a further delayed nak becomes immediate, counted in
 * parked_overflow. Nothing is ever shed. */
#ifndef FX_BROKER_GROUP_STATE_H
#define FX_BROKER_GROUP_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FXB_GS_MAX_BACKOFF 8
#define FXB_GS_NO_MEMBER UINT32_MAX
/* fxb_gs_nak delay: use the group's backoff list. */
#define FXB_GS_BACKOFF (-1)
/* Histogram buckets of redelivery lateness (now - deadline), upper bounds in
 * microseconds: 100 us, 250 us, 500 us, 1, 2.5, 5, 10, 25, 50, 100, 250 ms,
 * then +Inf. */
#define FXB_GS_LATE_BUCKETS 12

typedef struct fxb_gs_config {
    uint32_t ack_wait_ms;          /* lease of a delivery [30,000] */
    uint32_t max_ack_wait_ms;      /* cap of an in_progress extension and a join's ack wait [600,000] */
    uint32_t backoff_ms[FXB_GS_MAX_BACKOFF]; /* delay before the k-th redelivery after a
                                                lapse or a nak without a delay; last repeats */
    uint32_t n_backoff;            /* 0: redeliver at once */
    int32_t max_deliver;           /* deliveries before dead-lettering [5]; -1 unlimited */
    uint32_t max_ack_pending;      /* 5g, records [1,000] */
    uint64_t max_ack_pending_bytes;/* 5g, bytes [64 MiB] */
    uint32_t max_parked;           /* 5p [= max_ack_pending] */
    uint32_t member_window_max;    /* largest window a member may ask [max_ack_pending / 2] */
    uint32_t max_run;              /* most records of one run handed to a member per turn [64] */
} fxb_gs_config;

/* The defaults above; then callers override. */
void fxb_gs_config_default(fxb_gs_config *c);
/* Checks the bounds (ack_wait_ms >= 1, max_ack_wait_ms >= ack_wait_ms,
 * max_deliver -1 or >= 1, max_ack_pending >= 1, member_window_max >= 1,
 * max_run >= 1, n_backoff <= FXB_GS_MAX_BACKOFF). 0 or -EINVAL with a
 * reason in |why| (static string). */
int fxb_gs_config_check(const fxb_gs_config *c, const char **why);

/* Why a record leaves the group without an ack. */
typedef enum fxb_gs_reason {
    FXB_GS_DEAD_MAX_DELIVER = 1, /* delivered max_deliver times */
    FXB_GS_DEAD_TERM = 2,        /* a member's term */
} fxb_gs_reason;

/* What an operation on one delivery did. */
typedef enum fxb_gs_result {
    FXB_GS_OK = 0,
    FXB_GS_DUPLICATE,  /* already settled (below the floor, or acked): harmless, counted */
    FXB_GS_STALE,      /* nak/in_progress/term/release for an attempt that is not the current
                          delivery's, or by a member that does not hold it: refused, counted */
    FXB_GS_INVALID,    /* never handed out (>= next): refused */
} fxb_gs_result;

typedef struct fxb_gs_stats {
    uint64_t delivered;          /* records handed out, first deliveries and redeliveries */
    uint64_t redelivered;        /* of which attempt > 1 */
    uint64_t acked;
    uint64_t duplicate_acks;
    uint64_t naked;
    uint64_t in_progress;
    uint64_t released;
    uint64_t expired;            /* leases lapsed */
    uint64_t stale[4];           /* refused as stale: [0] nak [1] in_progress [2] term [3] release */
    uint64_t invalid;            /* ops naming offsets never handed out */
    uint64_t dead[3];            /* dead-lettered: [1] max_deliver [2] term */
    uint64_t skipped;            /* settled unread: evicted from the ring / trimmed */
    uint64_t capped;             /* 5g: a turn that found the cap full with records waiting */
    uint64_t member_full;        /* 5m: a turn that found a member's window full with work */
    uint64_t parked_overflow;    /* 5p: a delayed nak made immediate */
    uint64_t waits;              /* runs stopped at a record not loaded (FXB_GS_LEN_WAIT) */
    uint64_t redriven;           /* settled records owed again by fxb_gs_redrive */
    uint64_t late[FXB_GS_LATE_BUCKETS]; /* redelivery lateness histogram */
    uint64_t late_sum_us;
} fxb_gs_stats;

/* Gauges, read on the owner's thread. */
typedef struct fxb_gs_info {
    uint64_t floor, next;
    uint32_t acquired, available, parked; /* pending = acquired + available (+ parked) */
    uint64_t pending_bytes;   /* of every pending record, parked and dead ones included */
    uint32_t members;
    uint64_t capped_since_us; /* 0: not capped (5g) */
    uint32_t dead_intents;    /* dead letters reported (or about to be) by fxb_gs_pump, not yet done */
} fxb_gs_info;

/* One run handed to a member: |count| records from |first|, all at
 * |attempt| (1 = first delivery); |skipped_before| offsets were settled
 * unread (ring eviction, retention) since the group's previous run (to any
 * member): each skip is reported once. */
typedef struct fxb_gs_run {
    uint32_t member;
    uint64_t first;
    uint32_t count;
    uint32_t attempt;
    uint64_t skipped_before;
} fxb_gs_run;

/* A record to dead-letter: the caller writes it to the dead-letter stream,
 * then calls fxb_gs_dead_done (or fxb_gs_dead_failed). Until then it stays
 * pending (counted against 5g) and is not handed out. */
typedef struct fxb_gs_dead {
    uint64_t offset;
    uint32_t attempts;
    fxb_gs_reason reason;
} fxb_gs_dead;

/* fxb_gs_view.len: the record is readable but its payload is not in memory
 * now (a durable stream's record below its ring, not in the page read from
 * the log). */
#define FXB_GS_LEN_WAIT (UINT32_MAX - 1)

/* What the stream can give the group now. |low| is the oldest offset still
 * readable (below it, records are gone: settled as skipped), |tail| the next
 * offset to be appended. len(user, offset) returns the payload length of a
 * readable offset (for the byte cap), UINT32_MAX if it cannot tell now (the
 * record is then counted as 0 bytes), or FXB_GS_LEN_WAIT if it is not loaded:
 * the record is then neither skipped nor handed out (nor its attempt
 * counted); the run or redelivery stops before it, the wait is counted in
 * fxb_gs_stats.waits, and fxb_gs_pump sets |want| to the lowest offset
 * that waited in the call (UINT64_MAX: none), for the caller to load. */
typedef struct fxb_gs_view {
    uint64_t low, tail;
    uint32_t (*len)(void *user, uint64_t offset);
    void *user;
    uint64_t want; /* out: the lowest offset that waited, or UINT64_MAX */
} fxb_gs_view;

typedef struct fxb_gs fxb_gs;

/* A group whose first undelivered offset is |start| (floor = next = start).
 * |cfg| is copied (it must pass fxb_gs_config_check). NULL on no memory. */
fxb_gs *fxb_gs_new(const fxb_gs_config *cfg, uint64_t start);
void fxb_gs_free(fxb_gs *g);
const fxb_gs_config *fxb_gs_config_of(const fxb_gs *g);

/* Adds a member with a window (clamped to 1..member_window_max; 0 means 256
 * clamped) and a lease (0: the group's ack_wait_ms; clamped to
 * max_ack_wait_ms). Its id in |*pid| (small, reused after removal).
 * 0 or -ENOMEM. */
int fxb_gs_member_add(fxb_gs *g, uint32_t window, uint32_t ack_wait_ms, uint32_t *pid);
/* Removes member |id|: what it holds becomes AVAILABLE now (the attempt
 * stays counted). */
void fxb_gs_member_remove(fxb_gs *g, uint32_t id, uint64_t now_us);
/* Records member |id| holds now, and its window. */
uint32_t fxb_gs_member_held(const fxb_gs *g, uint32_t id);
uint32_t fxb_gs_member_window(const fxb_gs *g, uint32_t id);

/* Sets member |id|'s window (clamped to member_window_max; 0 allowed: it
 * gets nothing until it is opened again) and its lease for later
 * deliveries (|ack_wait_ms| 0: the group's ack_wait_ms; clamped to
 * max_ack_wait_ms). What it holds stays held. A poll member's window is
 * opened only while a poll waits (group_poll.c). Nothing for an unknown id. */
void fxb_gs_member_set_window(fxb_gs *g, uint32_t id, uint32_t window);
void fxb_gs_member_set_lease(fxb_gs *g, uint32_t id, uint32_t ack_wait_ms);

/* Where |offset| stands. */
typedef enum fxb_gs_where {
    FXB_GS_NEVER = 0, /* >= next: never handed out */
    FXB_GS_SETTLED,   /* below the floor, acked, dead-lettered or skipped */
    FXB_GS_HELD,      /* ACQUIRED: |*pmember| holds it at |*pattempt| */
    FXB_GS_OWED,      /* AVAILABLE or PARKED: waits for its next delivery */
    FXB_GS_DYING,     /* a dead letter not written yet */
} fxb_gs_where;
/* Looks |offset| up; |pmember| and |pattempt| (may be NULL) are set for
 * FXB_GS_HELD (the attempt also for OWED: the deliveries so far). */
fxb_gs_where fxb_gs_lookup(const fxb_gs *g, uint64_t offset, uint32_t *pmember, uint32_t *pattempt);

/* One dispatch turn: settles what fell below |v->low| as skipped, then hands
 * out runs to members with room, redeliveries first (AVAILABLE, oldest
 * first), then first deliveries from |next| up to |v->tail| while 5g allows;
 * members in turn, the one holding least relative to its window first (fair
 * share), at most max_run records per run. Writes up to |cap| runs to |out|
 * and up to |dcap| dead letters to |dead| (records whose next delivery would
 * exceed max_deliver), returning the run count in the return value and the
 * dead count in |*ndead|. Call again while it fills |out| (more may be
 * waiting). A record the view says is not loaded waits (see fxb_gs_view):
 * the lowest such offset is in |v->want|. */
size_t fxb_gs_pump(fxb_gs *g, fxb_gs_view *v, uint64_t now_us, fxb_gs_run *out, size_t cap,
                   fxb_gs_dead *dead, size_t dcap, size_t *ndead);

/* Settles [first, first+count) (from any member, any attempt): each offset
 * counts as OK, DUPLICATE or INVALID; returns the number settled now and
 * adds the refused (INVALID) count to |*pinvalid| when not NULL. */
uint32_t fxb_gs_ack(fxb_gs *g, uint64_t first, uint32_t count, uint64_t now_us, uint32_t *pinvalid);
/* Gives |offset| back, AVAILABLE after |delay_ms| (0 now; FXB_GS_BACKOFF, or
 * any negative value, the group's backoff for its attempt; PARKED meanwhile,
 * within max_parked). A record with no delivery left goes to the dead
 * letters at once. Only the member |member| holding it at |attempt|. */
fxb_gs_result fxb_gs_nak(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                         int64_t delay_ms, uint64_t now_us);
/* Extends the lease to now + |extend_ms| (0: the member's ack wait), capped by
 * max_ack_wait_ms. */
fxb_gs_result fxb_gs_in_progress(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                                 uint32_t extend_ms, uint64_t now_us);
/* Dead-letters at once (reported by the next fxb_gs_pump as FXB_GS_DEAD_TERM). */
fxb_gs_result fxb_gs_term(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt, uint64_t now_us);
/* Gives back unprocessed: AVAILABLE at once, the attempt not counted. */
fxb_gs_result fxb_gs_release(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt);

/* The dead letter of |offset| was written: settles it. */
void fxb_gs_dead_done(fxb_gs *g, uint64_t offset);
/* Its write failed: reported again by a later pump. */
void fxb_gs_dead_failed(fxb_gs *g, uint64_t offset);

/* Redrive (docs/groups.md): owes settled |offset| (below next; a dead
 * letter the caller lists) again. It becomes AVAILABLE with no attempt
 * counted, so its next delivery is attempt 1, and is handed out before new
 * records like any redelivery; the floor lowers to it when it is below
 * (nothing else ever moves the floor back). It counts 0 bytes against the
 * byte cap (its length is not known here) and one record against 5g while
 * pending. Reported to the observer as FXB_GS_EV_REDRIVE. Memory: the
 * pending set never passes max_ack_pending + max_parked entries for it.
 * Returns 0; -ENOENT when |offset| is not settled (pending now, or never
 * handed out: >= next); -ENOSPC when the pending set is at that bound
 * (try later); -ENOMEM. */
int fxb_gs_redrive(fxb_gs *g, uint64_t offset, uint64_t now_us);
/* Whether |offset| was handed out and is settled now (below next, not
 * pending). */
bool fxb_gs_is_settled(const fxb_gs *g, uint64_t offset);

/* Earliest lease deadline or not-before time, in us; UINT64_MAX if none. */
uint64_t fxb_gs_next_deadline(const fxb_gs *g);
/* A time at or before fxb_gs_next_deadline, found without scanning a list:
 * exact within the wheel's current 4.096 s epoch, else the start of the
 * epoch holding the earliest deadline. For arming a timer on every pump;
 * UINT64_MAX if nothing is timed. */
uint64_t fxb_gs_next_wakeup(const fxb_gs *g);
/* Lapses every lease due at |now_us| (AVAILABLE, after the backoff for its
 * attempt if any: PARKED until then, within max_parked like a nak) and makes
 * due PARKED records AVAILABLE, observing each lateness (now - deadline).
 * Returns how many changed. */
uint32_t fxb_gs_expire(fxb_gs *g, uint64_t now_us);

/* Moves the group: every pending record is dropped, floor = next = |offset|
 * (members' held counts go to 0). Later ops on old deliveries follow the
 * usual rules: DUPLICATE below |offset|, INVALID at or above it until handed
 * out again; a seek back that hands an offset out again at the same attempt
 * to the same member cannot tell an old nak from a new one. */
void fxb_gs_seek(fxb_gs *g, uint64_t offset);

void fxb_gs_get_info(const fxb_gs *g, fxb_gs_info *out);
/* The lowest unsettled offset that is not a dead letter waiting to be
 * written (reported or to be reported by fxb_gs_pump: it waits for the
 * caller's fxb_gs_dead_done, not for a member), looked for below |limit|
 * only: |limit| when there is none below it. O(limit - floor). */
uint64_t fxb_gs_floor_past_dead(const fxb_gs *g, uint64_t limit);
const fxb_gs_stats *fxb_gs_stats_of(const fxb_gs *g);
/* Bytes the group's state takes now (tables, members), for the memory goal. */
size_t fxb_gs_memory(const fxb_gs *g);

/* ---- persistence hooks (durable streams) ---------------------------------
 * Every change of settled state or of attempts is reported to the observer,
 * in the order it happened, so a journal can replay it; recovery rebuilds a
 * group with fxb_gs_restore / fxb_gs_restore_pending. */
typedef enum fxb_gs_ev_type {
    FXB_GS_EV_DELIVER = 1, /* [first, first+count) handed out at |attempt| */
    FXB_GS_EV_ACK,         /* [first, first+count) settled by acks */
    FXB_GS_EV_NAK,         /* |first| given back, AVAILABLE at |not_before_us| (0 now) */
    FXB_GS_EV_RELEASE,     /* |first| given back, its attempt not counted (|attempt| = what remains) */
    FXB_GS_EV_DEAD,        /* |first| dead-lettered (settled), |reason| */
    FXB_GS_EV_SKIP,        /* [first, first+count) settled unread */
    FXB_GS_EV_SEEK,        /* everything dropped; floor = next = |first| */
    FXB_GS_EV_REDRIVE,     /* settled |first| owed again: AVAILABLE, 0 attempts */
} fxb_gs_ev_type;

typedef struct fxb_gs_event {
    fxb_gs_ev_type type;
    uint64_t first;
    uint32_t count;
    uint32_t attempt;
    uint64_t not_before_us;
    fxb_gs_reason reason;
} fxb_gs_event;

typedef void (*fxb_gs_observer)(void *user, const fxb_gs_event *e);
void fxb_gs_set_observer(fxb_gs *g, fxb_gs_observer fn, void *user);

/* Recovery, on a group with no member and nothing pending: sets floor and
 * next (floor <= next), then adds each unsettled offset in [floor, next)
 * with its attempts so far, AVAILABLE at |not_before_us| (0: now; PARKED
 * until then, even past max_parked). Offsets in [floor, next) never
 * restored are settled. Restored records count 0 bytes against the byte cap.
 * 0, -EINVAL (out of order or out of range) or -ENOMEM. */
int fxb_gs_restore(fxb_gs *g, uint64_t floor, uint64_t next);
int fxb_gs_restore_pending(fxb_gs *g, uint64_t offset, uint32_t attempts, uint64_t not_before_us);

#endif
