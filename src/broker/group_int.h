/* Consumer groups' private nouns, shared by the group stage (group.c,
 * worker loop) and its admin operations (group_admin.c, whose parts run on
 * the same worker loop): a group, the groups of one stream, a dead-letter
 * entry, and the worker-side calls the admin needs. Worker loop only. */
#ifndef FX_BROKER_GROUP_INT_H
#define FX_BROKER_GROUP_INT_H

#include "broker/group.h"
#include "broker/group_state.h"

/* One GROUP_ACKS frame waiting for the worker (the body copied). */
struct fxb_gops {
    struct fxb_gops *next;
    struct fxb_reply *reply; /* a request id's slot (a reference), or NULL */
    size_t len;
    uint8_t body[];
};

/* One entry of a group's dead-letter list: a record dead-lettered, or
 * redriven (owed again) until it is acked (docs/groups.md). */
typedef struct fxb_dead_entry {
    uint64_t offset;
    uint64_t dlq_offset; /* its record in the dead-letter stream (0: not known) */
    uint32_t attempts;
    uint8_t reason;
    bool redriven;
} fxb_dead_entry;

/* The groups of one stream on its worker. */
typedef struct fxb_sgroups {
    fx_stream_handle *h; /* reference */
    struct fxb_group *head;
    uint32_t n;
} fxb_sgroups;

struct fxb_group {
    struct fxb_group *next;
    fxb_sgroups *sg;
    fxb_worker *w;
    char name[FXB_GROUP_NAME_MAX + 1];
    fxb_gs *gs;
    fxb_sub **members; /* by engine member id; a reference each */
    uint32_t members_cap;
    fx_timer timer;
    uint64_t timer_at_ns; /* 0: not armed */
    fx_task pump_task;
    fxb_dead_entry *dead; /* dead letters, oldest first */
    uint32_t ndead, dead_cap;
    uint64_t dead_forgotten;
    uint32_t dead_redriven; /* entries of |dead| redriven */
    fx_stream_handle *dlq;  /* its dead-letter stream, once used (a reference) */
    uint64_t dlq_retry_ns;  /* a dead letter waits for room in the stream's worker queue */
    struct fxb_gpage *page; /* a durable stream's records below the ring (group_page.h), or NULL */
    uint32_t nmembers;      /* members in the engine */
    uint32_t joining;       /* members joined whose event stream is not open yet */
    bool deleted;           /* removed: freed once no member is joining (pump task) */
    struct fxb_gjournal *gj; /* its journal on a durable stream (group_journal.h), or NULL */
    /* Checkpoint 4g: an append went ahead at group_hold_timeout_ms past
     * this group's floor; it does not hold the ring again until its floor
     * (raised to the ring's oldest) reaches this offset (0: it holds). */
    uint64_t hold_lapsed_to;
    uint64_t skipped_counted; /* of the engine's skipped, in felix_group_skipped_total */
    /* Its own settings, given at its create (the broker's defaults for the
     * others; group_settings.h). */
    fx_broker_group_settings set;
    /* Its /metrics series (group_metrics.h), or NULL (no memory: not shown). */
    struct fxb_gmetric *gm;
    /* Of the engine's lateness histogram, what felix_group_redelivery_lateness_seconds has. */
    uint64_t late_counted[FXB_GS_LATE_BUCKETS];
    uint64_t late_sum_counted;
    struct fxb_gpoll *poll; /* its JSON polls' members and waiting polls (group_poll.c), or NULL */
};

/* The groups of |h| on |w| (NULL: none). */
fxb_sgroups *fxb_group_sgroups(fxb_worker *w, const fx_stream_handle *h);
/* The group |name| of |sg| (NULL: none). */
struct fxb_group *fxb_group_find(fxb_sgroups *sg, const char *name);
/* A new group of |h| whose first delivery is |start|, with its own
 * settings |set| over the broker's defaults (NULL: none; copied); NULL with
 * |*prv| (-ENOMEM, FX_EFULL at max_groups_per_stream, -EINVAL for settings
 * that do not fit, the reason in |*pwhy| when not NULL). On a durable
 * stream its journal's files are made (group_journal.h), its settings with
 * them. */
struct fxb_group *fxb_group_new(fxb_worker *w, fx_stream_handle *h, const char *name,
                                uint64_t start, const fx_broker_group_settings *set, int *prv,
                                const char **pwhy);
/* fxb_group_new without a journal: the group a recovered journal rebuilds
 * (group_journal.c). */
struct fxb_group *fxb_group_make(fxb_worker *w, fx_stream_handle *h, const char *name,
                                 uint64_t start, const fx_broker_group_settings *set, int *prv,
                                 const char **pwhy);
/* Removes and frees |g| (no member joined). */
void fxb_group_delete(struct fxb_group *g);
/* Hands out what |g| can now and arms its timer. */
void fxb_group_pump(struct fxb_group *g);
/* The oldest offset and the tail of |h|'s stream on |w|: its ring's (|st|,
 * may be NULL), or for a durable stream its log's first offset and, with
 * no ring here yet, its log's next offset. 0, or FX_ESTORAGE_ERROR when its
 * log is not open now (recovering, damaged or failed). group_admin.c. */
int fxb_group_span(fxb_worker *w, fx_stream_handle *h, const fx_stream *st, uint64_t *poldest,
                   uint64_t *ptail);

/* The dead-letter list (group.c; the journal keeps the same list on disk,
 * group_journal.c). The entry of |offset| (NULL: none). */
fxb_dead_entry *fxb_group_dead_find(struct fxb_group *g, uint64_t offset);
/* Removes |e| from the list. */
void fxb_group_dead_remove(struct fxb_group *g, fxb_dead_entry *e);
/* Drops the redriven entries whose record the engine settled since (acked,
 * skipped; |all|: every redriven entry, a seek dropped their records). */
void fxb_group_dead_prune(struct fxb_group *g, bool all);
/* Redrives dead letter |offset| of |g| (group_admin.c; docs/groups.md
 * "Redrive and discard"): its entry is marked redriven and the engine owes
 * the record again (journaled, then pumped). Returns 0; -ESRCH (not a dead
 * letter of |g|: not listed, or redriven), FX_ECURSOR_TOO_OLD (the stream no
 * longer holds it), -ENOSPC (the pending set at its bound), FX_ESTORAGE_ERROR
 * (a durable stream's log not open) or -ENOMEM, with the reason in |why|
 * (|cap| bytes). */
int fxb_group_redrive(struct fxb_group *g, uint64_t offset, char *why, size_t cap);
/* Discards dead letter |offset| of |g|: its entry goes (journaled); the
 * record stays in the stream and the dead-letter stream. 0, or -ESRCH with
 * the reason in |why|. */
int fxb_group_discard(struct fxb_group *g, uint64_t offset, char *why, size_t cap);
/* Replaces the list with the |n| entries at |e| (oldest first) and
 * |forgotten| (recovery). 0 or -ENOMEM (the list left empty). */
int fxb_group_dead_load(struct fxb_group *g, const fxb_dead_entry *e, uint32_t n,
                        uint64_t forgotten);

#endif
