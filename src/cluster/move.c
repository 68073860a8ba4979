/* fx_cluster's graceful moves and rebalances (docs/cluster.md "Moves"): the
 * queue and its rate, the broker's freeze, the guard txn that hands a stream
 * to its destination, the rebalance plan and the trigger when a node joins.
 * The cluster thread runs them; fx_cluster_move and fx_cluster_rebalance
 * queue from the admin thread under |mu| (cluster_int.h). */
#include "cluster/cluster_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "cluster/etcd.h"
#include "cluster/place.h"
#include "felix/error.h"

static void move_start(fx_cluster *c, move_op *op);

/* Unlinks |op| from the moves and frees it. mu. */
static void move_unlink(fx_cluster *c, move_op *op)
{
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        c->moves = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    free(op);
}

/* A move that did not happen: the stream is served here again unless its
 * ownership was lost (|released|: the broker drops it, as on_release).
 * Cluster thread. */
static void move_fail(fx_cluster *c, move_op *op, bool released, const char *why)
{
    owner *o = op->o;
    char t[FX_PLACE_NAME_MAX + 1], ns[FX_PLACE_NAME_MAX + 1], s[FX_PLACE_NAME_MAX + 1];
    pthread_mutex_lock(&c->mu);
    o->moving = false;
    snprintf(t, sizeof(t), "%s", o->t);
    snprintf(ns, sizeof(ns), "%s", o->ns);
    snprintf(s, sizeof(s), "%s", o->s);
    bool mine = o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0;
    if (released && mine)
        fxcl_owner_set(c, o, NULL, 0, 0);
    /* Not owned here any more (its key vanished while it moved): dropped. */
    released = released || !mine;
    move_unlink(c, op);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    atomic_fetch_add(&c->moves_failed, 1);
    FX_COUNTER_INC(cluster_moves_failed);
    FX_LOG_WARN("cluster", "move of %s/%s/%s failed: %s", t, ns, s, why);
    if (c->o.unfreeze != NULL)
        c->o.unfreeze(t, ns, s, c->o.user);
    if (released && c->o.on_release != NULL) {
        atomic_fetch_add(&c->releases, 1);
        FX_COUNTER_INC(cluster_releases);
        c->o.on_release(t, ns, s, c->o.user);
    }
}

/* The guard txn answered. Cluster thread. */
static void on_guarded(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    move_op *op = user;
    fx_cluster *c = op->c;
    owner *o = op->o;
    fxcl_copy_etcd_stats(c);
    if (r->rv != 0) {
        /* Unknown whether it applied: if it did, the watch sees the owner
         * key deleted and the stream is released then. */
        char why[160];
        snprintf(why, sizeof(why), "the guard transaction failed in etcd (%s): it is served here "
                 "again", fx_strerror(r->rv));
        move_fail(c, op, false, why);
        return;
    }
    if (!r->succeeded) {
        move_fail(c, op, true, "this node owns it no more (its claim revision or lease changed): "
                  "released");
        return;
    }
    char t[FX_PLACE_NAME_MAX + 1], ns[FX_PLACE_NAME_MAX + 1], s[FX_PLACE_NAME_MAX + 1];
    char addr[FX_CLUSTER_ADDR_MAX + 1] = "";
    pthread_mutex_lock(&c->mu);
    /* Owned no more; until the destination claims, routing names it (the
     * handoff record, as the watch will show it). The watch may have shown
     * the owner key's deletion already, and even the destination's claim. */
    if (o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0)
        fxcl_owner_set(c, o, NULL, 0, 0);
    o->moving = false;
    if (o->state == OW_NONE) {
        o->ho = true;
        snprintf(o->ho_to, sizeof(o->ho_to), "%s", op->to);
        o->ho_epoch = (uint32_t)op->epoch;
        o->ho_tail = op->tail;
    }
    node *n = fxcl_node_find(c, op->to);
    if (n != NULL)
        snprintf(addr, sizeof(addr), "%s", n->info.addr);
    snprintf(t, sizeof(t), "%s", o->t);
    snprintf(ns, sizeof(ns), "%s", o->ns);
    snprintf(s, sizeof(s), "%s", o->s);
    char to[FX_PLACE_ID_MAX + 1];
    snprintf(to, sizeof(to), "%s", op->to);
    uint64_t gen = op->epoch + 1, tail = op->tail;
    move_unlink(c, op);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    atomic_fetch_add(&c->moves_done, 1);
    FX_COUNTER_INC(cluster_moves_done);
    FX_LOG_INFO("cluster", "moved %s/%s/%s to %s (epoch %" PRIu64 " ends at offset %" PRIu64
                "; the next is %" PRIu64 ")",
                t, ns, s, to, gen - 1, tail, gen);
    if (c->o.moved != NULL)
        c->o.moved(t, ns, s, to, addr[0] ? addr : NULL, gen, c->o.user);
}

/* The broker froze the stream and read its tail: the guard txn puts the
 * handoff record and deletes the owner key, only if this node's claim
 * still holds. Cluster thread. */
static void move_guard(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    move_op *op = user;
    fx_cluster *c = op->c;
    owner *o = op->o;
    if (op->rv != 0) {
        char why[160];
        snprintf(why, sizeof(why), "the broker could not freeze it (%s)", fx_strerror(op->rv));
        move_fail(c, op, false, why);
        return;
    }
    char okey[KEY_MAX], hkey[KEY_MAX];
    pthread_mutex_lock(&c->mu);
    bool mine = o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0;
    op->epoch = o->epoch;
    op->rev = o->create_rev;
    int ol = fx_place_key(okey, sizeof(okey), c->name, FX_PLACE_OWNERS, o->t, o->ns, o->s);
    int hl = fx_place_key(hkey, sizeof(hkey), c->name, FX_PLACE_HANDOFF, o->t, o->ns, o->s);
    pthread_mutex_unlock(&c->mu);
    if (!mine) {
        move_fail(c, op, false, "this node owns it no more");
        return;
    }
    fx_place_handoff h = {.epoch = (uint32_t)op->epoch, .final_tail = op->tail};
    snprintf(h.to, sizeof(h.to), "%s", op->to);
    size_t vl = 0;
    char *v = ol < 0 || hl < 0 ? NULL : fx_place_handoff_encode(&h, &vl);
    if (v == NULL) {
        move_fail(c, op, false, "its handoff record cannot be written");
        return;
    }
    int64_t lease = atomic_load(&c->lease);
    fx_etcd_cmp cmp[2] = {
        {.key = okey, .key_len = (size_t)ol, .target = FX_ETCD_CMP_CREATE,
         .result = FX_ETCD_EQUAL, .number = op->rev},
        {.key = okey, .key_len = (size_t)ol, .target = FX_ETCD_CMP_LEASE, .result = FX_ETCD_EQUAL,
         .number = lease},
    };
    fx_etcd_op succ[2] = {
        {.kind = FX_ETCD_PUT, .key = hkey, .key_len = (size_t)hl, .value = v, .value_len = vl,
         .lease = lease},
        {.kind = FX_ETCD_DELETE, .key = okey, .key_len = (size_t)ol},
    };
    fx_etcd_txn_req tx = {.cmp = cmp, .n_cmp = 2, .success = succ, .n_success = 2};
    int rv = fx_etcd_txn(c->etcd, &tx, on_guarded, op);
    free(v);
    if (rv != 0)
        move_fail(c, op, false, "the etcd client is full");
}

/* The broker's answer to the freeze (any thread): back to the cluster
 * thread. */
static void move_frozen(void *arg, int rv, uint64_t tail)
{
    move_op *op = arg;
    op->rv = rv;
    op->tail = tail;
    fx_task_init(&op->task, move_guard, op);
    fx_loop_post(op->c->loop, &op->task);
}

/* Starts |op|: the broker freezes its stream. Cluster thread. */
static void move_start(fx_cluster *c, move_op *op)
{
    owner *o = op->o;
    char t[FX_PLACE_NAME_MAX + 1], ns[FX_PLACE_NAME_MAX + 1], s[FX_PLACE_NAME_MAX + 1];
    pthread_mutex_lock(&c->mu);
    snprintf(t, sizeof(t), "%s", o->t);
    snprintf(ns, sizeof(ns), "%s", o->ns);
    snprintf(s, sizeof(s), "%s", o->s);
    bool mine = o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0;
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(&c->moves_started, 1);
    FX_COUNTER_INC(cluster_moves_started);
    if (!mine || !fx_cluster_serving(c)) {
        move_fail(c, op, false, mine ? "this node is suspended" : "this node owns it no more");
        return;
    }
    FX_LOG_INFO("cluster", "moving %s/%s/%s to %s", t, ns, s, op->to);
    c->o.freeze(t, ns, s, move_frozen, op, c->o.user);
}

/* xorshift64: the jitter of the move gaps and of the join trigger.
 * Cluster thread. */
static uint64_t next_rand(fx_cluster *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

/* Starts the queued moves at most move_rate per second, each gap jittered
 * by +-50% (so the subscribers of many moves do not reconnect in step).
 * Cluster thread. */
static void move_pump(fx_cluster *c)
{
    if (c->stopping)
        return;
    for (;;) {
        uint64_t now = fx_now_ns();
        pthread_mutex_lock(&c->mu);
        move_op *op = c->mq_head;
        if (op != NULL && now >= c->move_next_ns) {
            c->mq_head = op->qnext;
            if (c->mq_head == NULL)
                c->mq_tail = NULL;
        }
        bool more = c->mq_head != NULL;
        pthread_mutex_unlock(&c->mu);
        if (op == NULL)
            return;
        if (now < c->move_next_ns) {
            fx_loop_timer_arm(c->loop, &c->move_timer, c->move_next_ns);
            return;
        }
        uint64_t gap = 1000000000ull / (c->o.move_rate ? c->o.move_rate : 1);
        c->move_next_ns = now + gap / 2 + next_rand(c) % (gap + 1);
        move_start(c, op);
        if (!more)
            return;
    }
}

static void move_task_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    move_pump(user);
}

static void move_timer_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    move_pump(user);
}

/* Queues a move of |o| to |to| (checked by the caller). mu. */
static int move_queue(fx_cluster *c, owner *o, const char *to)
{
    move_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return -ENOMEM;
    op->c = c;
    op->o = o;
    snprintf(op->to, sizeof(op->to), "%s", to);
    op->next = c->moves;
    if (c->moves != NULL)
        c->moves->prev = op;
    c->moves = op;
    if (c->mq_tail != NULL)
        c->mq_tail->qnext = op;
    else
        c->mq_head = op;
    c->mq_tail = op;
    o->moving = true;
    snprintf(o->move_to, sizeof(o->move_to), "%s", to);
    fx_loop_post(c->loop, &c->move_task);
    return 0;
}

int fx_cluster_move(fx_cluster *c, const char *tenant, const char *ns, const char *stream,
                    const char *to, char *why, size_t cap)
{
    if (c->o.move_rate == 0 || c->o.freeze == NULL) {
        snprintf(why, cap, "moves are off (cluster_move_rate = 0)");
        return FX_ECONFIG;
    }
    int rv = 0;
    pthread_mutex_lock(&c->mu);
    owner *o = fxcl_owner_find(c, tenant, ns, stream);
    if (o == NULL || o->state != OW_OWNED || strcmp(o->node, c->node_id) != 0 || o->dur ||
        o->moving) {
        snprintf(why, cap, "%s/%s/%s: %s", tenant, ns, stream,
                 o != NULL && o->moving ? "already moving"
                 : o != NULL && o->dur  ? "durable streams stay with their log"
                                        : "not owned by this node");
        rv = FX_ENOSTREAM;
    } else if (strcmp(to, c->node_id) == 0 || fxcl_node_find(c, to) == NULL) {
        snprintf(why, cap, "%s is not another live node of the cluster", to);
        rv = FX_ENOTFOUND;
    } else if ((rv = move_queue(c, o, to)) != 0) {
        snprintf(why, cap, "out of memory");
    }
    pthread_mutex_unlock(&c->mu);
    return rv;
}

typedef struct plan_row {
    owner *o;
    char key[3 * (FX_PLACE_NAME_MAX + 1) * 3];
    size_t klen;
} plan_row;

static int cmp_row(const void *a, const void *b)
{
    const plan_row *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int r = memcmp(x->key, y->key, n);
    return r != 0 ? r : (x->klen > y->klen) - (x->klen < y->klen);
}

int fx_cluster_rebalance(fx_cluster *c, bool dry_run, char **pjson)
{
    *pjson = NULL;
    if (!dry_run && (c->o.move_rate == 0 || c->o.freeze == NULL))
        return FX_ECONFIG;
    json_t *moves = json_array();
    if (moves == NULL)
        return -ENOMEM;
    int rv = 0;
    ssize_t planned = 0;
    pthread_mutex_lock(&c->mu);
    size_t nrows = 0, cap = c->n_owned_here + 1;
    plan_row *rows = malloc(cap * sizeof(*rows));
    const void **keys = malloc(cap * sizeof(*keys));
    size_t *klens = malloc(cap * sizeof(*klens));
    ssize_t *to = malloc(cap * sizeof(*to));
    fx_place_node pn[MAX_NODES];
    ssize_t self = -1;
    for (size_t i = 0; i < c->nnodes; i++) {
        pn[i] = (fx_place_node){.id = c->nodes[i].id, .weight = c->nodes[i].info.weight,
                                .owned = c->nodes[i].owned, .up = true};
        if (strcmp(c->nodes[i].id, c->node_id) == 0)
            self = (ssize_t)i;
    }
    if (rows == NULL || keys == NULL || klens == NULL || to == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t b = 0; b < OWNER_BUCKETS && self >= 0; b++)
        for (owner *o = c->buckets[b]; o != NULL && nrows < cap; o = o->next) {
            if (o->state != OW_OWNED || strcmp(o->node, c->node_id) != 0 || o->dur || o->moving)
                continue;
            int kl = fx_place_stream_key(rows[nrows].key, sizeof(rows[nrows].key), o->t, o->ns,
                                         o->s);
            if (kl < 0)
                continue;
            rows[nrows].o = o;
            rows[nrows++].klen = (size_t)kl;
        }
    /* In key order: the same plan for the same view. */
    qsort(rows, nrows, sizeof(*rows), cmp_row);
    for (size_t i = 0; i < nrows; i++) {
        keys[i] = rows[i].key;
        klens[i] = rows[i].klen;
    }
    if (self >= 0 && nrows > 0)
        planned = fx_place_plan_moves(pn, c->nnodes, (size_t)self, keys, klens, nrows,
                                      c->n_owned_total, c->o.load_factor, to);
    if (planned < 0) {
        rv = (int)planned;
        goto out;
    }
    for (size_t i = 0; i < nrows; i++) {
        if (to[i] < 0)
            continue;
        owner *o = rows[i].o;
        const char *dest = c->nodes[to[i]].id;
        json_array_append_new(moves, json_pack("{s:s++++,s:s}", "stream", o->t, "/", o->ns, "/",
                                               o->s, "to", dest));
        if (!dry_run && (rv = move_queue(c, o, dest)) != 0)
            goto out;
    }
out:
    pthread_mutex_unlock(&c->mu);
    free(rows);
    free(keys);
    free(klens);
    free(to);
    if (rv != 0) {
        json_decref(moves);
        return rv;
    }
    FX_LOG_INFO("cluster", "rebalance%s: %zd of this node's in-memory streams %s",
                dry_run ? " (dry run)" : "", planned, dry_run ? "would move" : "move");
    json_t *root = json_pack("{s:s,s:b,s:I,s:o}", "node", c->node_id, "dry_run", dry_run,
                             "planned", (json_int_t)planned, "moves", moves);
    *pjson = root != NULL ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return *pjson != NULL ? 0 : -ENOMEM;
}

/* A node joined: every node runs a rebalance 1 to 3 s later (jittered, so
 * the nodes do not all move at once). Cluster thread. */
static void join_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fx_cluster *c = user;
    char *json = NULL;
    int rv = fx_cluster_rebalance(c, false, &json);
    if (rv != 0)
        FX_LOG_WARN("cluster", "rebalance after a node joined failed: %s", fx_strerror(rv));
    free(json);
}

void fxcl_move_joined(fx_cluster *c, const char *id)
{
    if (!c->in_listing && c->listed && strcmp(id, c->node_id) != 0 && c->o.rebalance_on_join &&
        c->o.move_rate > 0 && c->o.freeze != NULL && !c->stopping) {
        /* A node joined: rebalance towards it after 1 to 3 s. */
        uint64_t delay = 1000000000ull + next_rand(c) % 2000000000ull;
        fx_loop_timer_arm(c->loop, &c->join_timer, fx_now_ns() + delay);
    }
}

void fx_cluster_count_moving_refused(fx_cluster *c)
{
    atomic_fetch_add(&c->moving_refused, 1);
    FX_COUNTER_INC(cluster_moving_refused);
}

void fxcl_moves_init(fx_cluster *c)
{
    fx_task_init(&c->move_task, move_task_run, c);
    fx_timer_init(&c->move_timer, move_timer_fire, c);
    fx_timer_init(&c->join_timer, join_fire, c);
}

void fxcl_moves_free(fx_cluster *c)
{
    while (c->moves != NULL)
        move_unlink(c, c->moves);
}
