/* fx_cluster's private nouns, shared by its files: the tables of nodes and
 * owners (under |mu|), a move, and the struct itself. cluster.c runs
 * membership, the view and the claims, move.c the graceful moves and
 * rebalances, status.c GET /v1/cluster's body. The cluster thread runs
 * everything that talks to etcd; the tables are read by the broker's threads
 * under |mu|. */
#ifndef FX_CLUSTER_CLUSTER_INT_H
#define FX_CLUSTER_CLUSTER_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/loop.h"
#include "cluster/cluster.h"
#include "cluster/etcd.h"
#include "cluster/place.h"

#define KEY_MAX FX_PLACE_KEY_MAX
#define OWNER_BUCKETS 4096u
#define MAX_NODES 256u
#define RETRY_NS (500ull * 1000000ull)
/* A claim refused because a durable stream's pin names another node. */
#define FX_EPINNED (-EADDRINUSE)

/* ---- tables (under mu) --------------------------------------------------- */

typedef enum owner_state {
    OW_NONE,     /* known only by its epoch key (no owner now) */
    OW_OWNED,    /* an owner key names |node| */
    OW_CLAIMING, /* this node's claim is under way */
} owner_state;

typedef struct owner {
    struct owner *next;      /* bucket chain */
    struct owner *claim_next; /* claim queue (cluster thread) */
    uint64_t hash;
    char t[FX_PLACE_NAME_MAX + 1], ns[FX_PLACE_NAME_MAX + 1], s[FX_PLACE_NAME_MAX + 1];
    owner_state state;
    char node[FX_PLACE_ID_MAX + 1];
    uint64_t epoch;         /* the owner's epoch (OW_OWNED) */
    int64_t epoch_version;  /* version of epochs/<key> as last seen (0: absent) */
    int64_t create_rev;     /* the owner key's create revision (fencing token) */
    bool durable;           /* the claim asked for a durable stream */
    bool queued;            /* in the claim queue */
    bool pin_absent;        /* durable: the last look found no pin */
    uint8_t retries;        /* claims sent again after a stale view */
    int claim_rv;           /* the last claim's failure (0: none) */
    bool dur;               /* OW_OWNED: the owner key says kind durable */
    bool moving;            /* owned here, a move of it under way (no admission) */
    char move_to[FX_PLACE_ID_MAX + 1]; /* |moving|: the destination */
    /* handoff/<key> as last seen (|ho| false: absent) */
    bool ho;
    char ho_to[FX_PLACE_ID_MAX + 1];
    uint32_t ho_epoch;
    uint64_t ho_tail;
    /* Owned here by a claim that read a handoff of the epoch just before:
     * the previous epoch's end (subscribed's prev_epoch_end). */
    bool has_prev_end;
    uint64_t prev_end;
    char why[400];
} owner;

/* One graceful move of a stream this node owns (docs/cluster.md "Moves"):
 * queued, frozen by the broker, then the guard txn. Listed in
 * fx_cluster.moves (under mu) from its making to its end. */
typedef struct move_op {
    struct move_op *next, *prev; /* all moves */
    struct move_op *qnext;       /* the queue of moves not started */
    fx_cluster *c;
    owner *o;
    char to[FX_PLACE_ID_MAX + 1];
    fx_task task; /* the freeze's answer, back on the cluster thread */
    int rv;
    uint64_t tail;
    uint64_t epoch;
    int64_t rev;
} move_op;

typedef struct node {
    char id[FX_PLACE_ID_MAX + 1];
    fx_place_node_info info;
    int64_t create_rev; /* incarnation */
    int64_t lease;
    size_t owned; /* owner entries naming it (kept by owner_set) */
} node;

struct fx_cluster {
    fx_cluster_opts o;
    char *name, *node_id, *advertise, *internal, *admin, *server_name;
    char **endpoints;
    char *etcd_strs[5];
    fx_loop *loop;
    fx_etcd *etcd;
    bool started;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    owner *buckets[OWNER_BUCKETS]; /* mu */
    size_t n_owned_total;          /* mu: owner keys known, all nodes */
    size_t n_owned_here;           /* mu */
    node nodes[MAX_NODES];         /* mu */
    size_t nnodes;                 /* mu */
    owner *claims;                 /* mu: queue of claims to run */
    fx_task claim_task;
    char status_why[160];          /* mu: why not ready */
    fx_etcd_stats etcd_stats;      /* mu: a copy taken on the cluster thread */

    /* membership (cluster thread; atomics read anywhere) */
    _Atomic uint64_t deadline_ns; /* CLOCK_BOOTTIME; 0: not serving */
    atomic_bool registered;
    _Atomic int64_t lease;
    _Atomic int64_t incarnation;
    _Atomic uint32_t ttl_s;  /* as granted (read by fx_cluster_status_json) */
    uint64_t ka_sent_ns;     /* the keep-alive in flight: its send time */
    bool ka_in_flight;
    fx_timer ka_timer, reg_timer, list_timer;
    fx_etcd_watch *watch;
    bool listed;
    bool stopping;
    /* free: the revoke's answer */
    fx_task stop_task;
    bool stop_done;          /* mu */

    /* moves (mu, but the timers: cluster thread) */
    move_op *moves;               /* every move not ended */
    move_op *mq_head, *mq_tail;   /* queued, not started */
    uint64_t move_next_ns;        /* cluster thread: the next start allowed */
    uint64_t rng;                 /* cluster thread: the jitter's */
    bool in_listing;              /* cluster thread: applying a full listing */
    fx_task move_task;
    fx_timer move_timer, join_timer;

    /* counters (also in the metrics registry) */
    atomic_uint_fast64_t claims_won, claims_lost, claims_refused, claims_error;
    atomic_uint_fast64_t releases, renew_ok, renew_failed, leases_lost, late_appends;
    atomic_uint_fast64_t suspensions, watch_restarts;
    atomic_uint_fast64_t moves_started, moves_done, moves_failed, handoff_claims, moving_refused;
};

/* CLOCK_BOOTTIME in ns: the deadline rule's clock (it counts a suspend). */
static inline uint64_t fxcl_boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- cluster.c ----------------------------------------------------------- */

/* The entry of stream |t|/|ns|/|s| (NULL: none). mu. */
owner *fxcl_owner_find(fx_cluster *c, const char *t, const char *ns, const char *s);
/* Sets |o|'s owner (|nodeid| NULL: none), keeping the counts. mu. */
void fxcl_owner_set(fx_cluster *c, owner *o, const char *nodeid, uint64_t epoch, int64_t rev);
/* The live node |id| (NULL: not in the table). mu. */
node *fxcl_node_find(fx_cluster *c, const char *id);
/* Copies the etcd client's counters for readers on other threads (takes
 * mu). Cluster thread. */
void fxcl_copy_etcd_stats(fx_cluster *c);

/* ---- move.c -------------------------------------------------------------- */

/* Sets up the moves' task and timers (before the cluster thread starts). */
void fxcl_moves_init(fx_cluster *c);
/* Frees the moves still listed (at the free, the cluster thread stopped). */
void fxcl_moves_free(fx_cluster *c);
/* Node |id| joined the table: arms the rebalance towards it when
 * cluster_rebalance_on_join says so. Cluster thread, mu held. */
void fxcl_move_joined(fx_cluster *c, const char *id);

#endif
