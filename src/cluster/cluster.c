/* fx_cluster: membership, the local deadline rule, the view of the cluster's
 * keys, the claims of stream ownership and the routes (cluster.h,
 * docs/cluster.md). The cluster thread runs everything that talks to etcd;
 * the tables (cluster_int.h) are shared with the broker's threads under
 * |mu|. The moves are in move.c, the status JSON in status.c. */
#include "cluster/cluster_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "cluster/etcd.h"
#include "cluster/place.h"
#include "felix/error.h"

static uint64_t fnv(const char *t, const char *ns, const char *s)
{
    uint64_t h = 1469598103934665603ull;
    const char *parts[3] = {t, ns, s};
    for (int i = 0; i < 3; i++) {
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        h = (h ^ 0x1f) * 1099511628211ull;
    }
    return h;
}

owner *fxcl_owner_find(fx_cluster *c, const char *t, const char *ns, const char *s)
{
    uint64_t h = fnv(t, ns, s);
    for (owner *o = c->buckets[h % OWNER_BUCKETS]; o != NULL; o = o->next)
        if (o->hash == h && strcmp(o->t, t) == 0 && strcmp(o->ns, ns) == 0 && strcmp(o->s, s) == 0)
            return o;
    return NULL;
}

static owner *owner_get(fx_cluster *c, const char *t, const char *ns, const char *s)
{
    owner *o = fxcl_owner_find(c, t, ns, s);
    if (o != NULL)
        return o;
    if (strlen(t) > FX_PLACE_NAME_MAX || strlen(ns) > FX_PLACE_NAME_MAX ||
        strlen(s) > FX_PLACE_NAME_MAX)
        return NULL;
    o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->hash = fnv(t, ns, s);
    strcpy(o->t, t);
    strcpy(o->ns, ns);
    strcpy(o->s, s);
    o->next = c->buckets[o->hash % OWNER_BUCKETS];
    c->buckets[o->hash % OWNER_BUCKETS] = o;
    return o;
}

/* Sets |o|'s owner (|nodeid| NULL: none). Keeps the counts: all, this
 * node's, and each known node's (placement reads them on every claim
 * decision, so they are kept, not counted). mu. */
void fxcl_owner_set(fx_cluster *c, owner *o, const char *nodeid, uint64_t epoch, int64_t rev)
{
    if (o->state == OW_OWNED) {
        c->n_owned_total--;
        if (strcmp(o->node, c->node_id) == 0)
            c->n_owned_here--;
        node *was = fxcl_node_find(c, o->node);
        if (was != NULL && was->owned > 0)
            was->owned--;
    }
    if (nodeid == NULL) {
        o->state = OW_NONE;
        o->node[0] = '\0';
        o->epoch = 0;
        o->create_rev = 0;
        FX_GAUGE_SET(cluster_owned_streams, (int64_t)c->n_owned_here);
        return;
    }
    o->state = OW_OWNED;
    snprintf(o->node, sizeof(o->node), "%s", nodeid);
    o->epoch = epoch;
    o->create_rev = rev;
    c->n_owned_total++;
    if (strcmp(o->node, c->node_id) == 0)
        c->n_owned_here++;
    node *now = fxcl_node_find(c, o->node);
    if (now != NULL)
        now->owned++;
    FX_GAUGE_SET(cluster_owned_streams, (int64_t)c->n_owned_here);
}

node *fxcl_node_find(fx_cluster *c, const char *id)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].id, id) == 0)
            return &c->nodes[i];
    return NULL;
}

/* Counts the owner entries naming |id| (a node that joins the table: its
 * count is kept from then on). mu. */
static size_t owned_by(fx_cluster *c, const char *id)
{
    size_t n = 0;
    for (size_t b = 0; b < OWNER_BUCKETS; b++)
        for (owner *o = c->buckets[b]; o != NULL; o = o->next)
            if (o->state == OW_OWNED && strcmp(o->node, id) == 0)
                n++;
    return n;
}

/* ---- options ------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

int fx_cluster_new(fx_cluster **pc, const fx_cluster_opts *o, char *why, size_t why_cap)
{
    *pc = NULL;
#define REFUSE(...)                                                                                \
    do {                                                                                           \
        snprintf(why, why_cap, __VA_ARGS__);                                                       \
        return FX_ECONFIG;                                                                         \
    } while (0)
    if (o->n_endpoints == 0)
        REFUSE("cluster_etcd_endpoints is empty");
    if (o->node_id == NULL || o->node_id[0] == '\0' || strlen(o->node_id) > FX_PLACE_ID_MAX)
        REFUSE("cluster_node_id must be 1 to %u bytes", FX_PLACE_ID_MAX);
    if (o->name == NULL || o->name[0] == '\0' || strlen(o->name) > FX_PLACE_ID_MAX)
        REFUSE("cluster_name must be 1 to %u bytes", FX_PLACE_ID_MAX);
    char probe[KEY_MAX];
    if (fx_place_key(probe, sizeof(probe), o->name, FX_PLACE_NODES, o->node_id, NULL, NULL) < 0)
        REFUSE("cluster_name or cluster_node_id cannot name an etcd key");
    if (o->advertise == NULL || o->advertise[0] == '\0' ||
        strlen(o->advertise) > FX_CLUSTER_ADDR_MAX)
        REFUSE("cluster_advertise (the host:port clients dial) is required in a cluster");
    if (o->internal != NULL && strlen(o->internal) > FX_CLUSTER_ADDR_MAX)
        REFUSE("the internal listener's address is longer than %u bytes", FX_CLUSTER_ADDR_MAX);
    if (o->lease_ttl_s < 2)
        REFUSE("cluster_lease_ttl_s must be at least 2 (etcd's lease floor)");
    if ((uint64_t)o->margin_ms * 3 >= (uint64_t)o->lease_ttl_s * 2000)
        REFUSE("cluster_deadline_margin_ms (%u) must stay below 2/3 of the lease TTL (%u s): one "
               "late keep-alive would suspend a healthy broker",
               o->margin_ms, o->lease_ttl_s);
    if (o->weight > FX_PLACE_WEIGHT_MAX)
        REFUSE("cluster_weight must be 1 to %u", FX_PLACE_WEIGHT_MAX);
    if (o->load_factor != 0 && (o->load_factor < 1.0 || o->load_factor > 10.0))
        REFUSE("cluster_placement_load_factor must be from 1.0 to 10.0");
#undef REFUSE
    fx_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->o = *o;
    if (c->o.weight == 0)
        c->o.weight = FX_PLACE_WEIGHT_DEFAULT;
    if (c->o.load_factor == 0)
        c->o.load_factor = 1.25;
    if (c->o.claim_timeout_ms == 0)
        c->o.claim_timeout_ms = 2000;
    c->name = strdup(o->name);
    c->node_id = strdup(o->node_id);
    c->advertise = strdup(o->advertise);
    c->internal = o->internal != NULL && o->internal[0] ? strdup(o->internal) : NULL;
    c->admin = dup_or_null(o->admin);
    c->server_name = dup_or_null(o->server_name);
    c->endpoints = calloc(o->n_endpoints, sizeof(char *));
    bool oom = c->name == NULL || c->node_id == NULL || c->advertise == NULL ||
               (o->internal != NULL && o->internal[0] && c->internal == NULL) ||
               (o->admin != NULL && c->admin == NULL) ||
               (o->server_name != NULL && c->server_name == NULL) || c->endpoints == NULL;
    for (size_t i = 0; !oom && i < o->n_endpoints; i++)
        oom = (c->endpoints[i] = strdup(o->endpoints[i])) == NULL;
    const char *es[5] = {o->etcd_ca_file, o->etcd_cert_file, o->etcd_key_file, o->etcd_user,
                         o->etcd_password};
    for (int i = 0; !oom && i < 5; i++)
        oom = es[i] != NULL && (c->etcd_strs[i] = strdup(es[i])) == NULL;
    pthread_mutex_init(&c->mu, NULL);
    fx_cond_init_monotonic(&c->cv);
    snprintf(c->status_why, sizeof(c->status_why), "registering with etcd");
    if (oom) {
        fx_cluster_free(c);
        return -ENOMEM;
    }
    *pc = c;
    return 0;
}

/* ---- membership ------------------------------------------------------------ */

static void register_node(fx_cluster *c);
static void list_all(fx_cluster *c);
static void release_all(fx_cluster *c, const char *why);

static void set_why(fx_cluster *c, const char *fmt, const char *arg)
{
    pthread_mutex_lock(&c->mu);
    snprintf(c->status_why, sizeof(c->status_why), fmt, arg);
    pthread_mutex_unlock(&c->mu);
}

static void arm_ka(fx_cluster *c, uint64_t delay_ns)
{
    if (!c->stopping)
        fx_loop_timer_arm(c->loop, &c->ka_timer, fx_now_ns() + delay_ns);
}

static void on_keepalive(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    fx_cluster *c = user;
    c->ka_in_flight = false;
    uint64_t period = (uint64_t)c->ttl_s * 1000000000ull / 3;
    if (r->rv == 0 && r->lease_lost) {
        atomic_fetch_add(&c->leases_lost, 1);
        FX_COUNTER_INC(cluster_renewals_lost);
        FX_LOG_WARN("cluster", "lease %" PRIx64 " is gone (expired or revoked): every stream this "
                    "node owned is released and it registers again",
                    (uint64_t)atomic_load(&c->lease));
        atomic_store(&c->deadline_ns, 0);
        atomic_store(&c->registered, false);
        FX_GAUGE_SET(cluster_suspended, 1);
        release_all(c, "lease lost");
        set_why(c, "%s", "lease lost: registering again");
        register_node(c);
        return;
    }
    if (r->rv != 0 || r->ttl <= 0) {
        atomic_fetch_add(&c->renew_failed, 1);
        FX_COUNTER_INC(cluster_renewals_failed);
        FX_LOG_WARN("cluster", "lease keep-alive failed: %s%s%s (serving until the deadline)",
                    fx_strerror(r->rv), r->message ? ": " : "", r->message ? r->message : "");
        arm_ka(c, period / 2 > RETRY_NS ? RETRY_NS : period / 2);
        return;
    }
    atomic_fetch_add(&c->renew_ok, 1);
    FX_COUNTER_INC(cluster_renewals_ok);
    uint64_t dl = c->ka_sent_ns + (uint64_t)c->ttl_s * 1000000000ull -
                  (uint64_t)c->o.margin_ms * 1000000ull;
    uint64_t old = atomic_exchange(&c->deadline_ns, dl);
    if (old != 0 && old < c->ka_sent_ns) {
        FX_LOG_INFO("cluster", "lease kept: serving again in the same epochs after a suspension");
        set_why(c, "%s", "");
    }
    FX_GAUGE_SET(cluster_suspended, 0);
    arm_ka(c, period);
}

/* Copies the etcd client's counters for readers on other threads. Cluster
 * thread. */
void fxcl_copy_etcd_stats(fx_cluster *c)
{
    fx_etcd_stats st;
    fx_etcd_get_stats(c->etcd, &st);
    pthread_mutex_lock(&c->mu);
    c->etcd_stats = st;
    pthread_mutex_unlock(&c->mu);
}

static void ka_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fx_cluster *c = user;
    fxcl_copy_etcd_stats(c);
    if (c->stopping || !atomic_load(&c->registered) || c->ka_in_flight)
        return;
    c->ka_sent_ns = fxcl_boottime_ns();
    uint64_t dl = atomic_load(&c->deadline_ns);
    if (dl != 0 && c->ka_sent_ns >= dl) {
        atomic_fetch_add(&c->suspensions, 1);
        set_why(c, "%s", "suspended: no keep-alive answered before the deadline");
        FX_GAUGE_SET(cluster_suspended, 1);
    }
    if (fx_etcd_lease_keepalive(c->etcd, atomic_load(&c->lease), on_keepalive, c) == 0)
        c->ka_in_flight = true;
    else
        arm_ka(c, RETRY_NS);
}

static void on_node_created(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    fx_cluster *c = user;
    if (c->stopping)
        return;
    if (r->rv != 0) {
        FX_LOG_WARN("cluster", "registering node %s failed: %s%s%s; retrying", c->node_id,
                    fx_strerror(r->rv), r->message ? ": " : "", r->message ? r->message : "");
        fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + RETRY_NS);
        return;
    }
    if (!r->succeeded) {
        /* A previous incarnation's key is still there: wait out its lease. */
        set_why(c, "waiting for the previous incarnation of node %s to expire in etcd",
                c->node_id);
        FX_LOG_WARN("cluster", "nodes/%s exists (a previous incarnation's lease has not expired "
                    "yet): retrying",
                    c->node_id);
        fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + RETRY_NS);
        return;
    }
    atomic_store(&c->incarnation, r->revision);
    atomic_store(&c->registered, true);
    set_why(c, "%s", "");
    FX_GAUGE_SET(cluster_suspended, 0);
    FX_LOG_INFO("cluster", "node %s registered in cluster %s (incarnation %" PRId64
                ", lease %" PRIx64 ", TTL %u s)",
                c->node_id, c->name, r->revision, (uint64_t)atomic_load(&c->lease), c->ttl_s);
    arm_ka(c, (uint64_t)c->ttl_s * 1000000000ull / 3);
}

static void on_granted(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    fx_cluster *c = user;
    if (c->stopping)
        return;
    if (r->rv != 0 || r->lease_id == 0) {
        set_why(c, "registering: etcd unreachable (%s)", fx_strerror(r->rv));
        FX_LOG_WARN("cluster", "lease grant failed: %s%s%s; retrying", fx_strerror(r->rv),
                    r->message ? ": " : "", r->message ? r->message : "");
        fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + RETRY_NS);
        return;
    }
    atomic_store(&c->lease, r->lease_id);
    c->ttl_s = r->ttl > 0 ? (uint32_t)r->ttl : c->o.lease_ttl_s;
    /* The grant counts as the first renewal: sent at ka_sent_ns. */
    atomic_store(&c->deadline_ns, c->ka_sent_ns + (uint64_t)c->ttl_s * 1000000000ull -
                                      (uint64_t)c->o.margin_ms * 1000000ull);
    register_node(c);
    (void)e;
}

static char *node_value(fx_cluster *c, size_t *plen)
{
    fx_place_node_info n;
    memset(&n, 0, sizeof(n));
    snprintf(n.addr, sizeof(n.addr), "%s", c->advertise);
    snprintf(n.internal, sizeof(n.internal), "%s", c->internal ? c->internal : "");
    snprintf(n.server_name, sizeof(n.server_name), "%s", c->server_name ? c->server_name : "");
    snprintf(n.admin, sizeof(n.admin), "%s", c->admin ? c->admin : "");
    n.weight = c->o.weight;
    n.features = 0x2u | 0x1000u; /* what auth_ok offers: FEATURE_REDIRECT, FEATURE_SHARD_MOVED */
    return fx_place_node_encode(&n, plen);
}

static void reg_fire(fx_loop *l, fx_timer *t, void *user);

/* Grants a lease when there is none, else creates nodes/<id> under it. */
static void register_node(fx_cluster *c)
{
    if (c->stopping)
        return;
    if (atomic_load(&c->lease) == 0 || !atomic_load(&c->registered)) {
        if (atomic_load(&c->deadline_ns) == 0 || atomic_load(&c->lease) == 0) {
            c->ka_sent_ns = fxcl_boottime_ns();
            if (fx_etcd_lease_grant(c->etcd, c->o.lease_ttl_s, 0, on_granted, c) != 0)
                fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + RETRY_NS);
            return;
        }
    }
    char key[KEY_MAX];
    int kl = fx_place_key(key, sizeof(key), c->name, FX_PLACE_NODES, c->node_id, NULL, NULL);
    size_t vl = 0;
    char *v = node_value(c, &vl);
    if (kl < 0 || v == NULL) {
        free(v);
        FX_LOG_ERROR("cluster", "cannot encode this node's key or value: %s",
                     kl < 0 ? "key" : "value (cluster_advertise?)");
        fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + 10 * RETRY_NS);
        return;
    }
    fx_etcd_cmp cmp = {.key = key, .key_len = (size_t)kl, .target = FX_ETCD_CMP_CREATE,
                       .result = FX_ETCD_EQUAL, .number = 0};
    fx_etcd_op put = {.kind = FX_ETCD_PUT, .key = key, .key_len = (size_t)kl, .value = v,
                      .value_len = vl, .lease = atomic_load(&c->lease)};
    fx_etcd_op get = {.kind = FX_ETCD_RANGE, .key = key, .key_len = (size_t)kl};
    fx_etcd_txn_req t = {.cmp = &cmp, .n_cmp = 1, .success = &put, .n_success = 1,
                         .failure = &get, .n_failure = 1};
    int rv = fx_etcd_txn(c->etcd, &t, on_node_created, c);
    free(v);
    if (rv != 0)
        fx_loop_timer_arm(c->loop, &c->reg_timer, fx_now_ns() + RETRY_NS);
}

static void reg_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fx_cluster *c = user;
    /* A lease that was granted but whose node key failed: keep the lease if
     * it still serves, else start over. */
    if (atomic_load(&c->deadline_ns) != 0 && fxcl_boottime_ns() >= atomic_load(&c->deadline_ns))
        atomic_store(&c->lease, 0);
    register_node(c);
}

/* ---- the view: listing and watch -------------------------------------------- */

/* Marks |o| as being claimed by this node (|durable|: its pin is compared)
 * and queues it for the claim task, once. mu, or the cluster thread. */
static void claim_start(fx_cluster *c, owner *o, bool durable)
{
    o->state = OW_CLAIMING;
    o->durable = durable;
    o->retries = 0;
    if (!o->queued) {
        o->queued = true;
        o->claim_next = c->claims;
        c->claims = o;
    }
    fx_loop_post(c->loop, &c->claim_task);
}

/* Whether |o|'s handoff record names the stream's candidate: its
 * destination is a live node below the bounded-load cap, as a node that
 * placement picks must be (fx_place_pick). A destination at its cap does not
 * take the stream: normal placement picks the owner, whose claim still reads
 * the record. Every node decides it from its own view, as placement. mu. */
static bool handoff_takes(fx_cluster *c, const owner *o)
{
    if (!o->ho)
        return false;
    node *n = fxcl_node_find(c, o->ho_to);
    return n != NULL && n->owned < fx_place_cap(c->n_owned_total, c->nnodes, c->o.load_factor);
}

/* A handoff names this node and nobody owns the stream: claim it at once
 * (eager), so its subscribers and publishers find it served, unless this
 * node is at its bounded-load cap (handoff_takes). mu. */
static void claim_handoff(fx_cluster *c, owner *o)
{
    if (!o->ho || o->state != OW_NONE || strcmp(o->ho_to, c->node_id) != 0 || c->stopping ||
        !fx_cluster_serving(c))
        return;
    if (!handoff_takes(c, o)) {
        FX_LOG_INFO("cluster", "the handoff of %s/%s/%s to this node is not claimed: this node is "
                    "at its bounded-load cap (or not in its own view); placement picks its owner",
                    o->t, o->ns, o->s);
        return;
    }
    claim_start(c, o, false);
}

/* Applies one key (|value| NULL: deleted) to the tables. Cluster thread, mu held. */
static void apply_key(fx_cluster *c, const fx_etcd_kv *kv, bool deleted)
{
    fx_place_key_parts p;
    if (fx_place_key_parse((const char *)kv->key, kv->key_len, c->name, &p) != 0)
        return;
    char err[FX_PLACE_ERR_MAX];
    switch (p.kind) {
    case FX_PLACE_NODES: {
        node *n = fxcl_node_find(c, p.a);
        if (deleted) {
            if (n != NULL) {
                FX_LOG_INFO("cluster", "node %s left the cluster", p.a);
                *n = c->nodes[--c->nnodes];
            }
            return;
        }
        fx_place_node_info info;
        if (fx_place_node_decode((const char *)kv->value, kv->value_len, &info, err,
                                 sizeof(err)) != 0) {
            FX_LOG_WARN("cluster", "nodes/%s holds a value this broker cannot read: %s", p.a, err);
            return;
        }
        if (n == NULL) {
            if (c->nnodes == MAX_NODES)
                return;
            n = &c->nodes[c->nnodes++];
            memset(n, 0, sizeof(*n));
            snprintf(n->id, sizeof(n->id), "%.*s", (int)FX_PLACE_ID_MAX, p.a);
            n->owned = owned_by(c, n->id);
            FX_LOG_INFO("cluster", "node %s (%s) is in the cluster", p.a, info.addr);
            fxcl_move_joined(c, p.a);
        }
        n->info = info;
        n->create_rev = kv->create_revision;
        n->lease = kv->lease;
        return;
    }
    case FX_PLACE_OWNERS: {
        owner *o = owner_get(c, p.a, p.b, p.c);
        if (o == NULL)
            return;
        /* An event older than the claim this view holds (a claim's answer
         * can come before the watch shows the previous owner's key going):
         * it is history, not news. */
        int64_t ev_rev = deleted ? kv->mod_revision : kv->create_revision;
        if (o->state == OW_OWNED && ev_rev > 0 && ev_rev < o->create_rev)
            return;
        if (deleted) {
            bool mine = o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0;
            if (o->state == OW_OWNED)
                fxcl_owner_set(c, o, NULL, 0, 0);
            claim_handoff(c, o); /* the owner key of a handoff to this node went */
            if (mine && o->moving)
                return; /* the move's guard deleted it (its answer may come later) */
            if (mine && !c->stopping) {
                /* Not released by this node: its lease expired or an
                 * operator removed the key. It serves the stream no more. */
                atomic_fetch_add(&c->releases, 1);
                FX_COUNTER_INC(cluster_releases);
                FX_LOG_WARN("cluster", "owner key of %s/%s/%s vanished: the stream is released",
                            p.a, p.b, p.c);
                if (c->o.on_release != NULL) {
                    pthread_mutex_unlock(&c->mu);
                    c->o.on_release(p.a, p.b, p.c, c->o.user);
                    pthread_mutex_lock(&c->mu);
                }
            }
            return;
        }
        fx_place_owner ov;
        if (fx_place_owner_decode((const char *)kv->value, kv->value_len, &ov, err,
                                  sizeof(err)) != 0) {
            FX_LOG_WARN("cluster", "owners/%s/%s/%s holds a value this broker cannot read: %s", p.a,
                        p.b, p.c, err);
            return;
        }
        if (o->state == OW_CLAIMING)
            return; /* the claim's answer sets it */
        bool had_prev = o->has_prev_end && o->state == OW_OWNED && strcmp(o->node, ov.node) == 0 &&
                        o->epoch == ov.epoch;
        fxcl_owner_set(c, o, ov.node, ov.epoch, kv->create_revision);
        o->dur = ov.kind == FX_PLACE_DUR;
        o->has_prev_end = had_prev; /* known only to the claimant, and kept by it */
        return;
    }
    case FX_PLACE_HANDOFF: {
        owner *o = owner_get(c, p.a, p.b, p.c);
        if (o == NULL)
            return;
        if (deleted) {
            o->ho = false;
            return;
        }
        fx_place_handoff h;
        if (fx_place_handoff_decode((const char *)kv->value, kv->value_len, &h, err,
                                    sizeof(err)) != 0) {
            FX_LOG_WARN("cluster", "handoff/%s/%s/%s holds a value this broker cannot read: %s",
                        p.a, p.b, p.c, err);
            return;
        }
        o->ho = true;
        snprintf(o->ho_to, sizeof(o->ho_to), "%s", h.to);
        o->ho_epoch = h.epoch;
        o->ho_tail = h.final_tail;
        claim_handoff(c, o);
        return;
    }
    case FX_PLACE_EPOCHS: {
        owner *o = owner_get(c, p.a, p.b, p.c);
        if (o != NULL)
            o->epoch_version = deleted ? 0 : kv->version;
        return;
    }
    default:
        return;
    }
}

static void on_events(fx_etcd_watch *w, int64_t revision, const fx_etcd_event *ev, size_t n,
                      void *user)
{
    (void)w;
    (void)revision;
    fx_cluster *c = user;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++)
        apply_key(c, &ev[i].kv, ev[i].is_delete);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
}

static void on_compacted(fx_etcd_watch *w, int64_t rev, void *user)
{
    (void)w;
    fx_cluster *c = user;
    atomic_fetch_add(&c->watch_restarts, 1);
    FX_COUNTER_INC(cluster_watch_compacted);
    FX_LOG_WARN("cluster", "the watch fell behind etcd's compaction (revision %" PRId64
                "): listing the cluster's keys again",
                rev);
    list_all(c);
}

static void on_restart(fx_etcd_watch *w, int rv, const char *msg, void *user)
{
    (void)w;
    fx_cluster *c = user;
    atomic_fetch_add(&c->watch_restarts, 1);
    FX_COUNTER_INC(cluster_watch_restarts);
    FX_LOG_WARN("cluster", "watch restarting: %s%s%s", fx_strerror(rv), msg ? ": " : "",
                msg ? msg : "");
}


static void on_listed(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    fx_cluster *c = user;
    if (c->stopping)
        return;
    if (r->rv != 0) {
        FX_LOG_WARN("cluster", "listing the cluster's keys failed: %s; retrying",
                    fx_strerror(r->rv));
        fx_loop_timer_arm(c->loop, &c->list_timer, fx_now_ns() + RETRY_NS);
        return;
    }
    pthread_mutex_lock(&c->mu);
    /* A fresh view: forget the nodes and the owners (but the claims under
     * way) and apply the listing. */
    c->nnodes = 0;
    for (size_t b = 0; b < OWNER_BUCKETS; b++)
        for (owner *o = c->buckets[b]; o != NULL; o = o->next) {
            o->epoch_version = 0;
            if (o->state == OW_OWNED)
                fxcl_owner_set(c, o, NULL, 0, 0);
        }
    c->in_listing = true; /* the nodes listed are not joining */
    for (size_t b = 0; b < OWNER_BUCKETS; b++)
        for (owner *o = c->buckets[b]; o != NULL; o = o->next)
            o->ho = false;
    for (size_t i = 0; i < r->n_kvs; i++)
        apply_key(c, &r->kvs[i], false);
    c->in_listing = false;
    c->listed = true;
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    if (c->watch == NULL) {
        char prefix[KEY_MAX];
        int pl = snprintf(prefix, sizeof(prefix), "/felix/%s/", c->name);
        fx_etcd_watch_opts wo = {.key = prefix, .key_len = (size_t)pl, .prefix = true,
                                 .start_revision = r->revision + 1};
        fx_etcd_watch_cbs cbs = {.on_events = on_events, .on_compacted = on_compacted,
                                 .on_restart = on_restart};
        if (fx_etcd_watch_start(c->etcd, &wo, &cbs, c, &c->watch) != 0)
            FX_LOG_ERROR("cluster", "cannot start the watch of the cluster's keys");
    }
}

static void list_all(fx_cluster *c)
{
    char prefix[KEY_MAX];
    int pl = snprintf(prefix, sizeof(prefix), "/felix/%s/", c->name);
    fx_etcd_op op = {.kind = FX_ETCD_RANGE, .key = prefix, .key_len = (size_t)pl, .prefix = true};
    if (fx_etcd_range(c->etcd, &op, on_listed, c) != 0)
        fx_loop_timer_arm(c->loop, &c->list_timer, fx_now_ns() + RETRY_NS);
}

static void list_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    list_all(user);
}

/* ---- claims -------------------------------------------------------------------- */

typedef struct claim_ctx {
    fx_cluster *c;
    owner *o;
    uint64_t epoch;
} claim_ctx;

static void claim_done(fx_cluster *c, owner *o, int rv, const char *why)
{
    pthread_mutex_lock(&c->mu);
    if (o->state == OW_CLAIMING)
        o->state = OW_NONE;
    o->claim_rv = rv;
    snprintf(o->why, sizeof(o->why), "%s", why ? why : "");
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
}

static void on_claimed(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    claim_ctx *cx = user;
    fx_cluster *c = cx->c;
    owner *o = cx->o;
    fxcl_copy_etcd_stats(c);
    if (r->rv != 0) {
        atomic_fetch_add(&c->claims_error, 1);
        FX_COUNTER_INC(cluster_claims_error);
        char why[160];
        snprintf(why, sizeof(why), "stream owner unavailable: the claim failed in etcd (%s)",
                 fx_strerror(r->rv));
        claim_done(c, o, r->rv, why);
        free(cx);
        return;
    }
    if (r->succeeded) {
        atomic_fetch_add(&c->claims_won, 1);
        FX_COUNTER_INC(cluster_claims_won);
        /* An in-memory claim read (and deleted) the handoff record: the
         * previous epoch's exact end, when it was the epoch just before. */
        fx_place_handoff h;
        char herr[FX_PLACE_ERR_MAX];
        bool read_ho = !o->durable && r->n_ops >= 3 && r->ops[2].n_kvs > 0;
        bool from_handoff =
            read_ho &&
            fx_place_handoff_decode((const char *)r->ops[2].kvs[0].value,
                                    r->ops[2].kvs[0].value_len, &h, herr, sizeof(herr)) == 0 &&
            (uint64_t)h.epoch + 1 == cx->epoch;
        pthread_mutex_lock(&c->mu);
        o->state = OW_NONE;
        fxcl_owner_set(c, o, c->node_id, cx->epoch, r->revision);
        o->dur = o->durable;
        o->epoch_version = (int64_t)cx->epoch;
        o->claim_rv = 0;
        o->has_prev_end = from_handoff;
        o->prev_end = from_handoff ? h.final_tail : 0;
        o->ho = false;
        pthread_mutex_unlock(&c->mu);
        pthread_cond_broadcast(&c->cv);
        if (from_handoff) {
            atomic_fetch_add(&c->handoff_claims, 1);
            FX_COUNTER_INC(cluster_handoff_claims);
        }
        FX_LOG_INFO("cluster", "claimed %s/%s/%s (epoch %" PRIu64 ", revision %" PRId64 "%s)",
                    o->t, o->ns, o->s, cx->epoch, r->revision,
                    from_handoff ? ", from a handoff"
                    : read_ho    ? ", a stale handoff record dropped"
                                 : "");
        free(cx);
        return;
    }
    /* Lost: another node owns it, or our epoch was stale. The failure ops
     * read the owner key and the epoch key. */
    atomic_fetch_add(&c->claims_lost, 1);
    FX_COUNTER_INC(cluster_claims_lost);
    pthread_mutex_lock(&c->mu);
    o->state = OW_NONE;
    for (size_t i = 0; i < r->n_ops; i++)
        for (size_t k = 0; k < r->ops[i].n_kvs; k++)
            apply_key(c, &r->ops[i].kvs[k], false);
    if (o->state != OW_OWNED && r->n_ops >= 2 && r->ops[1].n_kvs == 0)
        o->epoch_version = 0;
    bool again = false;
    o->claim_rv = o->state == OW_OWNED ? 0 : FX_EREMOTE;
    snprintf(o->why, sizeof(o->why), "%s",
             o->state == OW_OWNED ? "" : "stream owner unavailable: a concurrent claim; retry");
    if (o->state != OW_OWNED && o->durable && r->n_ops >= 3) {
        fx_place_pin pin;
        char err[FX_PLACE_ERR_MAX];
        if (r->ops[2].n_kvs == 0) {
            again = !o->pin_absent;
            o->pin_absent = true;
        } else if (fx_place_pin_decode((const char *)r->ops[2].kvs[0].value,
                                       r->ops[2].kvs[0].value_len, &pin, err, sizeof(err)) != 0) {
            snprintf(o->why, sizeof(o->why), "stream owner unavailable: its pin is unreadable (%.128s)",
                     err);
        } else if (strcmp(pin.node, c->node_id) != 0) {
            o->claim_rv = FX_EPINNED;
            snprintf(o->why, sizeof(o->why),
                     "stream owner unavailable: durable stream %.60s/%.60s/%.60s is pinned to "
                     "node %s, which holds its log",
                     o->t, o->ns, o->s, pin.node);
            FX_COUNTER_INC(cluster_claims_refused);
        } else {
            again = o->pin_absent;
            o->pin_absent = false;
        }
    }
    /* A stale epoch or pin view: try once more with what the failure read. */
    if (o->state != OW_OWNED && o->claim_rv == FX_EREMOTE && o->retries < 2 &&
        (again || r->n_ops < 3 || !o->durable)) {
        o->retries++;
        o->state = OW_CLAIMING;
        o->claim_next = c->claims;
        c->claims = o;
        o->queued = true;
        fx_loop_post(c->loop, &c->claim_task);
    } else {
        o->retries = 0;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    free(cx);
}

/* Sends the claim txn of |o| (cluster thread). */
static void claim_send(fx_cluster *c, owner *o)
{
    char okey[KEY_MAX], ekey[KEY_MAX], pkey[KEY_MAX];
    pthread_mutex_lock(&c->mu);
    int ol = fx_place_key(okey, sizeof(okey), c->name, FX_PLACE_OWNERS, o->t, o->ns, o->s);
    int el = fx_place_key(ekey, sizeof(ekey), c->name, FX_PLACE_EPOCHS, o->t, o->ns, o->s);
    int pl = fx_place_key(pkey, sizeof(pkey), c->name, FX_PLACE_DURABLE, o->t, o->ns, o->s);
    char hkey[KEY_MAX];
    int hl = fx_place_key(hkey, sizeof(hkey), c->name, FX_PLACE_HANDOFF, o->t, o->ns, o->s);
    int64_t ev = o->epoch_version;
    bool durable = o->durable;
    bool pin_absent = o->pin_absent;
    pthread_mutex_unlock(&c->mu);
    if (ol < 0 || el < 0 || pl < 0 || hl < 0) {
        claim_done(c, o, -EINVAL, "stream names too long for the cluster's keys");
        return;
    }
    if ((uint64_t)ev + 1 > FX_PLACE_EPOCH_MAX) {
        claim_done(c, o, -ERANGE, "stream owner unavailable: the stream's epochs are exhausted");
        return;
    }
    claim_ctx *cx = malloc(sizeof(*cx));
    fx_place_owner ov = {.epoch = (uint32_t)(ev + 1), .kind = durable ? FX_PLACE_DUR : FX_PLACE_MEM};
    snprintf(ov.node, sizeof(ov.node), "%s", c->node_id);
    size_t vl = 0;
    char *v = fx_place_owner_encode(&ov, &vl);
    fx_place_pin pin;
    snprintf(pin.node, sizeof(pin.node), "%s", c->node_id);
    size_t pinl = 0;
    char *pv = fx_place_pin_encode(&pin, &pinl);
    if (cx == NULL || v == NULL || pv == NULL) {
        free(cx);
        free(v);
        free(pv);
        claim_done(c, o, -ENOMEM, "out of memory for a claim");
        return;
    }
    cx->c = c;
    cx->o = o;
    cx->epoch = ov.epoch;
    fx_etcd_cmp cmp[3] = {
        {.key = okey, .key_len = (size_t)ol, .target = FX_ETCD_CMP_CREATE, .result = FX_ETCD_EQUAL,
         .number = 0},
        {.key = ekey, .key_len = (size_t)el, .target = FX_ETCD_CMP_VERSION,
         .result = FX_ETCD_EQUAL, .number = ev},
        /* A durable stream's pin must name this node (or be absent: the
         * first claim writes it); an in-memory claim needs no pin at all. */
        {.key = pkey, .key_len = (size_t)pl, .target = FX_ETCD_CMP_CREATE, .result = FX_ETCD_EQUAL,
         .number = 0},
    };
    fx_etcd_op succ[4] = {
        {.kind = FX_ETCD_PUT, .key = okey, .key_len = (size_t)ol, .value = v, .value_len = vl,
         .lease = atomic_load(&c->lease)},
        {.kind = FX_ETCD_PUT, .key = ekey, .key_len = (size_t)el},
        {.kind = FX_ETCD_PUT, .key = pkey, .key_len = (size_t)pl, .value = pv, .value_len = pinl},
        {.kind = FX_ETCD_DELETE, .key = hkey, .key_len = (size_t)hl},
    };
    fx_etcd_op fail[3] = {
        {.kind = FX_ETCD_RANGE, .key = okey, .key_len = (size_t)ol},
        {.kind = FX_ETCD_RANGE, .key = ekey, .key_len = (size_t)el},
        {.kind = FX_ETCD_RANGE, .key = pkey, .key_len = (size_t)pl},
    };
    size_t ncmp = 2, nsucc = 2;
    if (!durable) {
        /* An in-memory claim reads the handoff record a graceful move left
         * (the previous epoch's end) and deletes it, in the same round trip. */
        succ[2] = (fx_etcd_op){.kind = FX_ETCD_RANGE, .key = hkey, .key_len = (size_t)hl};
        nsucc = 4;
    }
    if (durable) {
        /* The pin must name this node; when it is absent (the stream's
         * first claim) the claim writes it, only if still absent. */
        ncmp = 3;
        if (pin_absent) {
            nsucc = 3;
        } else {
            cmp[2].target = FX_ETCD_CMP_VALUE;
            cmp[2].value = pv;
            cmp[2].value_len = pinl;
        }
    }
    fx_etcd_txn_req t = {.cmp = cmp, .n_cmp = ncmp, .success = succ, .n_success = nsucc,
                         .failure = fail, .n_failure = durable ? 3 : 2};
    int rv = fx_etcd_txn(c->etcd, &t, on_claimed, cx);
    free(v);
    free(pv);
    if (rv != 0) {
        free(cx);
        claim_done(c, o, rv, "stream owner unavailable: the etcd client is full; retry");
    }
}

static void claim_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fx_cluster *c = user;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        owner *o = c->claims;
        if (o != NULL) {
            c->claims = o->claim_next;
            o->queued = false;
        }
        pthread_mutex_unlock(&c->mu);
        if (o == NULL)
            return;
        claim_send(c, o);
    }
}

/* Drops every stream this node owns (its lease is gone): the broker ends
 * them, and the table forgets them. Cluster thread. */
static void release_all(fx_cluster *c, const char *why)
{
    for (;;) {
        char t[FX_PLACE_NAME_MAX + 1], ns[FX_PLACE_NAME_MAX + 1], s[FX_PLACE_NAME_MAX + 1];
        bool found = false;
        pthread_mutex_lock(&c->mu);
        for (size_t b = 0; b < OWNER_BUCKETS && !found; b++)
            for (owner *o = c->buckets[b]; o != NULL && !found; o = o->next)
                if (o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0) {
                    fxcl_owner_set(c, o, NULL, 0, 0);
                    strcpy(t, o->t);
                    strcpy(ns, o->ns);
                    strcpy(s, o->s);
                    found = true;
                }
        pthread_mutex_unlock(&c->mu);
        if (!found)
            return;
        atomic_fetch_add(&c->releases, 1);
        FX_COUNTER_INC(cluster_releases);
        FX_LOG_WARN("cluster", "released %s/%s/%s: %s", t, ns, s, why);
        if (c->o.on_release != NULL)
            c->o.on_release(t, ns, s, c->o.user);
    }
}


bool fx_cluster_stream_epoch(fx_cluster *c, const char *tenant, const char *ns, const char *stream,
                             uint64_t *epoch, uint64_t *prev_end, bool *has_prev)
{
    pthread_mutex_lock(&c->mu);
    owner *o = fxcl_owner_find(c, tenant, ns, stream);
    bool mine = o != NULL && o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0;
    *epoch = mine ? o->epoch : 0;
    *has_prev = mine && o->has_prev_end;
    *prev_end = *has_prev ? o->prev_end : 0;
    pthread_mutex_unlock(&c->mu);
    return mine;
}

/* ---- what the broker asks (any thread) --------------------------------------- */

bool fx_cluster_serving(const fx_cluster *c)
{
    uint64_t dl = atomic_load_explicit(&c->deadline_ns, memory_order_acquire);
    return dl != 0 && atomic_load_explicit(&c->registered, memory_order_acquire) &&
           fxcl_boottime_ns() < dl;
}

const char *fx_cluster_node_id(const fx_cluster *c)
{
    return c->node_id;
}

void fx_cluster_count_late_append(fx_cluster *c)
{
    atomic_fetch_add(&c->late_appends, 1);
    FX_COUNTER_INC(cluster_late_appends);
}

bool fx_cluster_ready(const fx_cluster *c, char *why, size_t cap)
{
    if (fx_cluster_serving(c))
        return true;
    fx_cluster *m = (fx_cluster *)c;
    pthread_mutex_lock(&m->mu);
    snprintf(why, cap, "%s",
             m->status_why[0] ? m->status_why
                              : "suspended: no lease keep-alive answered before the deadline");
    pthread_mutex_unlock(&m->mu);
    return false;
}

uint64_t fx_cluster_first_offset(fx_cluster *c, const char *tenant, const char *ns,
                                 const char *stream)
{
    pthread_mutex_lock(&c->mu);
    owner *o = fxcl_owner_find(c, tenant, ns, stream);
    uint64_t e = o != NULL && o->state == OW_OWNED && strcmp(o->node, c->node_id) == 0 ? o->epoch
                                                                                       : 0;
    pthread_mutex_unlock(&c->mu);
    return e << FX_CLUSTER_EPOCH_SHIFT;
}

/* The route to the owner or candidate |id|. mu. */
static void route_remote(fx_cluster *c, fx_cluster_route *out, const char *id, uint64_t epoch)
{
    out->kind = FX_CLUSTER_REMOTE;
    out->epoch = epoch;
    snprintf(out->node_id, sizeof(out->node_id), "%s", id);
    node *n = fxcl_node_find(c, id);
    if (n != NULL) {
        snprintf(out->addr, sizeof(out->addr), "%s", n->info.addr);
        snprintf(out->internal, sizeof(out->internal), "%s", n->info.internal);
    } else {
        out->addr[0] = out->internal[0] = '\0';
    }
}

void fx_cluster_route_stream(fx_cluster *c, const char *tenant, const char *ns, const char *stream,
                             bool durable, fx_cluster_route *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = FX_CLUSTER_UNAVAILABLE;
    if (!fx_cluster_serving(c)) {
        fx_cluster_ready(c, out->why, sizeof(out->why));
        return;
    }
    uint64_t give_up = fx_now_ns() + (uint64_t)c->o.claim_timeout_ms * 1000000ull;
    pthread_mutex_lock(&c->mu);
    while (!c->listed) {
        struct timespec ts = fx_timespec_at(give_up);
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT)
            break;
    }
    if (!c->listed) {
        pthread_mutex_unlock(&c->mu);
        snprintf(out->why, sizeof(out->why),
                 "stream owner unavailable: this broker has not read the cluster's keys yet");
        return;
    }
    owner *o = owner_get(c, tenant, ns, stream);
    if (o == NULL) {
        pthread_mutex_unlock(&c->mu);
        snprintf(out->why, sizeof(out->why), "stream names too long for the cluster");
        return;
    }
    bool asked = false;
    for (;;) {
        if (o->state == OW_OWNED && o->moving && strcmp(o->node, c->node_id) == 0) {
            /* Frozen for a move: refused, retryable; the new owner serves
             * it once the handoff is in etcd. */
            snprintf(out->why, sizeof(out->why), "stream %s/%s/%s is moving to %s; retry", tenant,
                     ns, stream, o->move_to);
            atomic_fetch_add(&c->moving_refused, 1);
            FX_COUNTER_INC(cluster_moving_refused);
            break;
        }
        if (o->state == OW_OWNED) {
            if (strcmp(o->node, c->node_id) == 0) {
                out->kind = FX_CLUSTER_LOCAL;
                out->epoch = o->epoch;
                snprintf(out->node_id, sizeof(out->node_id), "%s", c->node_id);
                snprintf(out->addr, sizeof(out->addr), "%s", c->advertise);
            } else {
                route_remote(c, out, o->node, o->epoch);
                FX_COUNTER_INC(cluster_routes_remote);
            }
            break;
        }
        if (o->state == OW_NONE && asked) {
            /* Our claim ended without ownership. */
            snprintf(out->why, sizeof(out->why), "%s",
                     o->why[0] ? o->why : "stream owner unavailable; retry");
            break;
        }
        if (o->state == OW_NONE && !asked && !durable && handoff_takes(c, o)) {
            /* A graceful move named its destination: it is the candidate
             * while the handoff record exists and it is below its cap (it
             * claims eagerly). */
            if (strcmp(o->ho_to, c->node_id) != 0) {
                route_remote(c, out, o->ho_to, (uint64_t)o->ho_epoch + 1);
                FX_COUNTER_INC(cluster_routes_remote);
                break;
            }
            claim_start(c, o, false);
            asked = true;
        }
        if (o->state == OW_NONE) {
            /* Unplaced: the candidate by rendezvous hashing with bounded
             * loads over the live nodes claims it. */
            fx_place_node pn[MAX_NODES];
            for (size_t i = 0; i < c->nnodes; i++)
                pn[i] = (fx_place_node){.id = c->nodes[i].id, .weight = c->nodes[i].info.weight,
                                        .owned = c->nodes[i].owned, .up = true};
            char key[3 * (FX_PLACE_NAME_MAX + 1)];
            int kl = fx_place_stream_key(key, sizeof(key), tenant, ns, stream);
            ssize_t pick = kl < 0 ? -1
                                  : fx_place_pick(pn, c->nnodes, key, (size_t)kl,
                                                  c->n_owned_total, c->o.load_factor);
            if (pick < 0 && fxcl_node_find(c, c->node_id) == NULL) {
                snprintf(out->why, sizeof(out->why),
                         "stream owner unavailable: no node is registered yet");
                break;
            }
            if (durable || pick < 0 || strcmp(c->nodes[pick].id, c->node_id) == 0) {
                /* This node claims (a durable stream only here, where its
                 * log is; its pin decides). */
                claim_start(c, o, durable);
                asked = true;
            } else {
                /* Unclaimed: the candidate will claim the next epoch, so
                 * a redirect names that generation (a client never follows
                 * one older than it has seen). */
                route_remote(c, out, c->nodes[pick].id, (uint64_t)o->epoch_version + 1);
                FX_COUNTER_INC(cluster_routes_remote);
                break;
            }
        }
        /* OW_CLAIMING: ours or another thread's; wait for it. */
        struct timespec ts = fx_timespec_at(give_up);
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT &&
            o->state == OW_CLAIMING) {
            snprintf(out->why, sizeof(out->why),
                     "stream owner unavailable: the claim did not finish within %u ms; retry",
                     c->o.claim_timeout_ms);
            break;
        }
        asked = true;
    }
    pthread_mutex_unlock(&c->mu);
}


/* ---- lifecycle ------------------------------------------------------------------- */

static void start_task(void *user)
{
    fx_cluster *c = user;
    fx_timer_init(&c->ka_timer, ka_fire, c);
    fx_timer_init(&c->reg_timer, reg_fire, c);
    fx_timer_init(&c->list_timer, list_fire, c);
    c->rng = fnv(c->node_id, c->name, "rng") ^ fx_now_ns();
    if (c->rng == 0)
        c->rng = 1;
    list_all(c);
    register_node(c);
}

int fx_cluster_start(fx_cluster *c)
{
    fx_loop_opts lo = {.name = "fx-cluster", .cpu = -1};
    int rv = fx_loop_new(&c->loop, &lo);
    if (rv != 0)
        return rv;
    fx_etcd_opts eo = {.endpoints = (const char *const *)c->endpoints,
                       .n_endpoints = c->o.n_endpoints,
                       .max_response_bytes = 64u << 20,
                       .ca_file = c->etcd_strs[0],
                       .cert_file = c->etcd_strs[1],
                       .key_file = c->etcd_strs[2],
                       .user = c->etcd_strs[3],
                       .password = c->etcd_strs[4]};
    rv = fx_etcd_new(&c->etcd, c->loop, &eo);
    if (rv != 0) {
        fx_loop_free(c->loop);
        c->loop = NULL;
        return rv;
    }
    fx_task_init(&c->claim_task, claim_run, c);
    fxcl_moves_init(c);
    rv = fx_loop_start(c->loop);
    if (rv != 0) {
        fx_etcd_free(c->etcd);
        c->etcd = NULL;
        fx_loop_free(c->loop);
        c->loop = NULL;
        return rv;
    }
    c->started = true;
    return fx_loop_call(c->loop, start_task, c);
}

static void on_revoked(fx_etcd *e, const fx_etcd_resp *r, void *user)
{
    (void)e;
    fx_cluster *c = user;
    if (r->rv != 0)
        FX_LOG_WARN("cluster", "revoking the lease at stop failed: %s (its keys expire with it)",
                    fx_strerror(r->rv));
    pthread_mutex_lock(&c->mu);
    c->stop_done = true;
    pthread_mutex_unlock(&c->mu);
    pthread_cond_broadcast(&c->cv);
}

static void stop_task(void *user)
{
    fx_cluster *c = user;
    c->stopping = true;
    atomic_store(&c->deadline_ns, 0);
    fx_loop_timer_cancel(c->loop, &c->ka_timer);
    fx_loop_timer_cancel(c->loop, &c->reg_timer);
    fx_loop_timer_cancel(c->loop, &c->list_timer);
    fx_loop_timer_cancel(c->loop, &c->move_timer);
    fx_loop_timer_cancel(c->loop, &c->join_timer);
    fx_etcd_watch_stop(c->watch);
    c->watch = NULL;
    int64_t lease = atomic_load(&c->lease);
    /* Revoking the lease deletes nodes/<id> and every owner key under it,
     * so the other nodes can claim this node's streams at once. */
    if (lease == 0 || fx_etcd_lease_revoke(c->etcd, lease, on_revoked, c) != 0)
        on_revoked(c->etcd, &(fx_etcd_resp){0}, c);
}

void fx_cluster_free(fx_cluster *c)
{
    if (c == NULL)
        return;
    if (c->started) {
        if (fx_loop_call(c->loop, stop_task, c) == 0) {
            uint64_t until = fx_now_ns() + 3000000000ull;
            pthread_mutex_lock(&c->mu);
            while (!c->stop_done) {
                struct timespec ts = fx_timespec_at(until);
                if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT)
                    break;
            }
            pthread_mutex_unlock(&c->mu);
        }
        fx_loop_stop(c->loop);
    }
    fx_etcd_free(c->etcd);
    fx_loop_free(c->loop);
    /* Moves queued or under way at the stop: their txn ended without its
     * callback (fx_etcd_free). */
    fxcl_moves_free(c);
    for (size_t b = 0; b < OWNER_BUCKETS; b++)
        for (owner *o = c->buckets[b], *next; o != NULL; o = next) {
            next = o->next;
            free(o);
        }
    for (size_t i = 0; c->endpoints != NULL && i < c->o.n_endpoints; i++)
        free(c->endpoints[i]);
    free(c->endpoints);
    for (int i = 0; i < 5; i++)
        free(c->etcd_strs[i]);
    free(c->name);
    free(c->node_id);
    free(c->advertise);
    free(c->internal);
    free(c->admin);
    free(c->server_name);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}
