/* Control plane of the broker: the admin operations (list, create and delete
 * streams, list subscriptions) and the graceful drain. The caller's thread
 * (the admin endpoint's or main) never reads loop-owned state: it asks every
 * loop at once with fx_loop_ask_all (every worker, plus each endpoint's loop
 * for the connection side), each loop answers with a part, and the caller
 * waits for all parts with a timeout. A late part lands in the ask's own copy
 * and is discarded. Public functions: any thread but a broker loop. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/placement.h"
#include "broker/bidi_life.h"
#include "broker/cache_srv.h"
#include "broker/durable.h"
#include "broker/durable_admin.h"
#include "broker/idem.h"
#include "broker/worker.h"
#include "cluster/cluster.h"
#include "felix/error.h"

/* ---- asking every loop ---------------------------------------------------------- */

/* What one loop counts as unfinished work during a drain. */
typedef struct work {
    uint64_t jobs;       /* publish jobs queued, parked at a worker or at ingress */
    uint64_t deliveries; /* envelopes and frame lists not yet written */
    uint64_t replies;    /* replies queued on client streams */
    uint64_t unacked;    /* bytes QUIC has not seen acknowledged */
    uint64_t conns;      /* connections open */
} work;

typedef struct gather gather;

/* One loop's answer. |worker| is the worker index, or -1 for the connection
 * side of endpoint |epi| on its loop (or for any other loop: run_on_each_loop). */
typedef struct gpart {
    fx_loop *loop; /* where it runs */
    int worker;
    uint32_t epi;
    json_t *j;
    work w;
} gpart;

/* Fills |p| on its loop. */
typedef void (*gather_fn)(fx_broker *b, gpart *p, void *arg);

/* What the loops are asked. fx_loop_ask_all gives each loop the ask's own
 * copy, and copies it back once every part is in; a copy given up on frees
 * its parts' answers when the last one comes (gather_late). */
struct gather {
    fx_broker *b;
    gather_fn fn;
    void *arg; /* read-only for the tasks; owned by the asker, see gather_run */
    size_t nparts;
    gpart parts[];
};

static void gather_free(gather *g)
{
    for (size_t i = 0; i < g->nparts; i++)
        json_decref(g->parts[i].j);
    free(g);
}

static void gather_late(void *data)
{
    gather *g = data;
    for (size_t i = 0; i < g->nparts; i++)
        json_decref(g->parts[i].j);
}

static void gather_cb(size_t i, void *data)
{
    gather *g = data;
    g->fn(g->b, &g->parts[i], g->arg);
}

static size_t gather_size(size_t n)
{
    return sizeof(gather) + n * sizeof(gpart);
}

/* A gather of |n| parts, each to be given its loop. */
static gather *gather_alloc(fx_broker *b, gather_fn fn, void *arg, size_t n)
{
    gather *g = calloc(1, gather_size(n));
    if (g == NULL)
        return NULL;
    g->b = b;
    g->fn = fn;
    g->arg = arg;
    g->nparts = n;
    for (size_t i = 0; i < n; i++)
        g->parts[i].worker = -1;
    return g;
}

static gather *gather_new(fx_broker *b, gather_fn fn, void *arg, bool workers, bool conns)
{
    size_t nw = workers ? b->nworkers : 0;
    gather *g = gather_alloc(b, fn, arg, nw + (conns ? b->neps : 0));
    if (g == NULL)
        return NULL;
    for (size_t i = 0; i < g->nparts; i++) {
        gpart *p = &g->parts[i];
        p->worker = i < nw ? (int)i : -1;
        p->epi = i < nw ? 0 : (uint32_t)(i - nw);
        p->loop = i < nw ? b->workers[i].loop : b->eps[p->epi].loop;
    }
    return g;
}

/* Asks every part of |g| of its loop and waits up to |timeout_ns| for all
 * answers. Returns 0 with |g| in |*pg| (release with gather_free), or
 * FX_ETIMEDOUT / -ENOMEM (|g| released). */
static int gather_wait(gather *g, uint64_t timeout_ns, gather **pg)
{
    fx_loop **loops = malloc((g->nparts + 1) * sizeof(*loops));
    int rv = -ENOMEM;
    if (loops != NULL) {
        for (size_t i = 0; i < g->nparts; i++)
            loops[i] = g->parts[i].loop;
        fx_loop_ask_req q = {.fn = gather_cb,
                             .data = g,
                             .size = gather_size(g->nparts),
                             .on_late = gather_late,
                             .timeout_ns =
                                 timeout_ns > INT64_MAX ? INT64_MAX : (int64_t)timeout_ns};
        rv = fx_loop_ask_all(loops, g->nparts, &q, NULL);
        free(loops);
    }
    if (rv != 0) {
        gather_free(g);
        return rv;
    }
    *pg = g;
    return 0;
}

/* Asks |fn| of every worker (|workers|) and/or every endpoint loop (|conns|)
 * and waits up to |timeout_ns| for all answers. Returns 0 with the parts in
 * |*pg| (release with gather_free), FX_ETIMEDOUT or -ENOMEM. |arg| must stay
 * valid until every task ran: only pass stack memory when a timeout cannot
 * leave a task behind, else NULL. */
static int gather_run(fx_broker *b, gather_fn fn, void *arg, bool workers, bool conns,
                      uint64_t timeout_ns, gather **pg)
{
    gather *g = gather_new(b, fn, arg, workers, conns);
    if (g == NULL)
        return -ENOMEM;
    return gather_wait(g, timeout_ns, pg);
}

/* ---- running on every thread -------------------------------------------------------- */

static void call_part(fx_broker *b, gpart *p, void *arg)
{
    (void)b;
    (void)p;
    ((const fx_broker_loop_call *)arg)->fn();
}

/* Calls |cb(l, arg)| with every loop the broker runs. */
static void each_loop(fx_broker *b, void (*cb)(fx_loop *l, void *arg), void *arg)
{
    for (uint32_t i = 0; i < b->nworkers; i++)
        cb(b->workers[i].loop, arg);
    for (uint32_t i = 0; i < b->nio; i++)
        cb(b->io[i], arg);
    fxb_durable_each_loop(b, cb, arg);
}

static void count_loop(fx_loop *l, void *arg)
{
    (void)l;
    (*(size_t *)arg)++;
}

/* Adds a part on |l| to the gather |arg| (sized for every loop). */
static void add_loop(fx_loop *l, void *arg)
{
    gather *g = arg;
    g->parts[g->nparts++].loop = l;
}

int fx_broker_run_on_each_loop(fx_broker *b, const fx_broker_loop_call *c, uint64_t timeout_ns)
{
    if (b == NULL || !b->started || b->stopped)
        return FX_ESHUTDOWN;
    size_t n = 0;
    each_loop(b, count_loop, &n);
    gather *g = gather_alloc(b, call_part, (void *)c, n);
    if (g == NULL)
        return -ENOMEM;
    g->nparts = 0;
    each_loop(b, add_loop, g);
    int rv = gather_wait(g, timeout_ns, &g);
    if (rv == 0)
        gather_free(g);
    return rv;
}

/* ---- JSON helpers ------------------------------------------------------------------ */

static int set_u64(json_t *o, const char *key, uint64_t v)
{
    return json_object_set_new(o, key, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
}

static int set_str(json_t *o, const char *key, const char *v)
{
    return json_object_set_new(o, key, json_string(v));
}

static void id_key(char *buf, size_t cap, uint64_t id)
{
    snprintf(buf, cap, "%" PRIu64, id);
}

/* Serialises |j| (consumed) into |*pjson|. */
static int dump(json_t *j, char **pjson)
{
    if (j == NULL)
        return -ENOMEM;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        return -ENOMEM;
    *pjson = s;
    return 0;
}

/* ---- GET /v1/streams ------------------------------------------------------------------ */

/* Worker side: the state of every stream the worker holds, by handle id. */
static void streams_part(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    if (p->worker < 0)
        return;
    fxb_worker *w = &b->workers[p->worker];
    json_t *o = json_object();
    size_t pos = 0;
    for (fxb_idslot *s; o != NULL && (s = fxb_idtable_next(&w->streams, &pos)) != NULL;) {
        fx_stream *st = s->p;
        json_t *e = json_object();
        if (e == NULL)
            break;
        set_u64(e, "messages", fx_stream_ring_messages(st));
        set_u64(e, "bytes", fx_stream_ring_bytes(st));
        set_u64(e, "first_offset", fx_stream_oldest(st));
        set_u64(e, "next_offset", fx_stream_tail(st));
        set_u64(e, "subscribers", fx_stream_subscriber_count(st));
        set_u64(e, "producers", fxb_idem_producers(w, s->id));
        char key[24];
        id_key(key, sizeof(key), s->id);
        json_object_set_new(o, key, e);
    }
    p->j = o;
}

typedef struct handles {
    fx_stream_handle **h;
    size_t n, cap;
    bool oom;
} handles;

static void collect_handle(fx_stream_handle *h, void *user)
{
    handles *hs = user;
    if (hs->n == hs->cap) {
        size_t cap = hs->cap ? hs->cap * 2 : 16;
        fx_stream_handle **p = realloc(hs->h, cap * sizeof(*p));
        if (p == NULL) {
            hs->oom = true;
            return;
        }
        hs->h = p;
        hs->cap = cap;
    }
    hs->h[hs->n++] = fx_stream_handle_ref(h);
}

static void handles_free(handles *hs)
{
    for (size_t i = 0; i < hs->n; i++)
        fx_stream_handle_unref(hs->h[i]);
    free(hs->h);
}

static int cmp_handle(const void *a, const void *b)
{
    uint64_t x = fx_stream_handle_id(*(fx_stream_handle *const *)a);
    uint64_t y = fx_stream_handle_id(*(fx_stream_handle *const *)b);
    return x < y ? -1 : x > y;
}

/* One entry of the answer: names from the registry, state from the worker
 * (a stream nobody used yet has no state: zeros). */
static json_t *stream_entry(fx_broker *b, gather *g, const fxb_durable_view *dv,
                            fx_stream_handle *h)
{
    uint64_t id = fx_stream_handle_id(h);
    json_t *e = json_object();
    if (e == NULL)
        return NULL;
    set_str(e, "tenant", fx_stream_handle_tenant(h));
    set_str(e, "namespace", fx_stream_handle_namespace(h));
    set_str(e, "stream", fx_stream_handle_stream(h));
    set_u64(e, "id", id);
    char key[24];
    id_key(key, sizeof(key), id);
    json_t *st = json_object_get(g->parts[fx_placement_worker_for(id, b->nworkers)].j, key);
    const char *fields[] = {"messages",    "bytes",       "first_offset",
                            "next_offset", "subscribers", "producers"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_t *v = st != NULL ? json_object_get(st, fields[i]) : NULL;
        set_u64(e, fields[i], v != NULL ? (uint64_t)json_integer_value(v) : 0);
    }
    fxb_durable_describe(dv, h, e);
    fxb_durable_describe_retention(dv, h, e);
    return e;
}

int fx_broker_list_streams(fx_broker *b, uint64_t timeout_ns, char **pjson)
{
    handles hs = {0};
    fx_registry_foreach(b->reg, collect_handle, &hs);
    if (hs.oom) {
        handles_free(&hs);
        return -ENOMEM;
    }
    if (hs.n > 1) /* qsort must not see a NULL array, even empty */
        qsort(hs.h, hs.n, sizeof(*hs.h), cmp_handle);
    gather *g;
    int rv = gather_run(b, streams_part, NULL, true, false, timeout_ns, &g);
    if (rv != 0) {
        handles_free(&hs);
        return rv;
    }
    fxb_durable_view *dv = NULL;
    json_t *arr = fxb_durable_view_take(b, &dv) == 0 ? json_array() : NULL;
    for (size_t i = 0; arr != NULL && i < hs.n; i++) {
        json_t *e = stream_entry(b, g, dv, hs.h[i]);
        if (e == NULL || json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    fxb_durable_view_free(dv);
    gather_free(g);
    handles_free(&hs);
    json_t *root = arr != NULL ? json_pack("{s:o}", "streams", arr) : NULL;
    return dump(root, pjson);
}

/* ---- caches: PUT / DELETE /v1/tenants/{t}/namespaces/{ns}/caches/{c}, GET /v1/caches -------- */

int fx_broker_declare_cache(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                            bool *pcreated, fx_registry_err *err)
{
    return fxb_cache_declare(b, tenant, ns, cache, -1, pcreated, NULL, err);
}

int fx_broker_declare_cache_durable(fx_broker *b, const char *tenant, const char *ns,
                                    const char *cache, int durable, bool *pcreated, bool *pdurable,
                                    fx_registry_err *err)
{
    return fxb_cache_declare(b, tenant, ns, cache, durable, pcreated, pdurable, err);
}

/* What the cache's worker is asked to drop. */
typedef struct drop_arg {
    const char *tenant, *ns, *cache;
} drop_arg;

/* Worker side: frees the cache's entries; its count, or -1 (never held). */
static void drop_part(fx_broker *b, gpart *p, void *arg)
{
    const drop_arg *d = arg;
    int64_t n = fxb_cache_worker_drop(&b->workers[p->worker], d->tenant, d->ns, d->cache);
    p->j = json_integer(n);
}

int fx_broker_drop_cache(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                         uint64_t timeout_ns, uint64_t *pentries, fx_registry_err *err)
{
    if (pentries)
        *pentries = 0;
    const char *names[3] = {tenant, ns, cache}, *what[3] = {"tenant", "namespace", "cache"};
    for (int i = 0; i < 3; i++) {
        int rv = fx_registry_name_check(
            what[i], (fx_wire_slice){(const uint8_t *)names[i], strlen(names[i])}, err);
        if (rv != 0)
            return rv;
    }
    if (b->caches == NULL)
        return -ENOTSUP; /* a broker without the cache stage */
    bool declared = fxb_cache_undeclare(b, tenant, ns, cache);
    fxb_worker *w = fxb_cache_worker_of(b, tenant, ns, cache);
    /* The worker reads the names when it gets the ask, which may be after
     * a timeout returned: they are copied into an allocation of their own
     * (freed once the answer is in; left to the worker's late read on a
     * timeout, a small loss on a rare path). */
    size_t lt = strlen(tenant) + 1, ln = strlen(ns) + 1, lc = strlen(cache) + 1;
    gather *g = gather_alloc(b, drop_part, NULL, 1);
    char *copy = g != NULL ? malloc(sizeof(drop_arg) + lt + ln + lc) : NULL;
    if (copy == NULL) {
        free(g);
        return -ENOMEM;
    }
    drop_arg *d = (drop_arg *)(void *)copy;
    char *p = copy + sizeof(drop_arg);
    d->tenant = memcpy(p, tenant, lt);
    d->ns = memcpy(p + lt, ns, ln);
    d->cache = memcpy(p + lt + ln, cache, lc);
    g->arg = d;
    g->parts[0].worker = (int)(w - b->workers);
    g->parts[0].loop = w->loop;
    int rv = gather_wait(g, timeout_ns, &g);
    if (rv != 0) {
        if (rv != FX_ETIMEDOUT)
            free(copy);
        return rv;
    }
    int64_t n = json_integer_value(g->parts[0].j);
    gather_free(g);
    free(copy);
    if (n < 0 && !declared) {
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg), "cache %s/%s/%s not found", tenant, ns, cache);
        return -ENOENT;
    }
    if (pentries)
        *pentries = n > 0 ? (uint64_t)n : 0;
    return 0;
}

/* Worker side: the caches it holds. */
static void caches_part(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    p->j = fxb_cache_worker_list(&b->workers[p->worker]);
}

static void declared_entry(const char *tenant, const char *ns, const char *cache, bool durable,
                           void *arg)
{
    (void)durable; /* not listed yet (docs/cache.md, "Durable caches") */
    json_t *all = arg;
    char key[3 * (FX_REGISTRY_NAME_MAX + 1)];
    snprintf(key, sizeof(key), "%s/%s/%s", tenant, ns, cache);
    json_t *e = json_object_get(all, key);
    if (e != NULL) {
        json_object_set_new(e, "declared", json_true());
        return;
    }
    e = json_pack("{s:s, s:s, s:s, s:b, s:i, s:i}", "tenant", tenant, "namespace", ns, "cache",
                  cache, "declared", 1, "entries", 0, "bytes", 0);
    if (e != NULL)
        json_object_set_new(all, key, e);
}

static int cmp_cache(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int fx_broker_list_caches(fx_broker *b, uint64_t timeout_ns, char **pjson)
{
    gather *g;
    int rv = gather_run(b, caches_part, NULL, true, false, timeout_ns, &g);
    if (rv != 0)
        return rv;
    /* Keyed by "tenant/ns/cache" (a cache lives on one worker), then the
     * declared ones no worker has used yet. */
    json_t *all = json_object();
    for (size_t i = 0; all != NULL && i < g->nparts; i++) {
        if (g->parts[i].j == NULL) {
            json_decref(all);
            all = NULL;
            break;
        }
        size_t k;
        json_t *e;
        json_array_foreach(g->parts[i].j, k, e)
        {
            char key[3 * (FX_REGISTRY_NAME_MAX + 1)];
            snprintf(key, sizeof(key), "%s/%s/%s", json_string_value(json_object_get(e, "tenant")),
                     json_string_value(json_object_get(e, "namespace")),
                     json_string_value(json_object_get(e, "cache")));
            json_object_set_new(e, "declared", json_false());
            json_object_set(all, key, e);
        }
    }
    gather_free(g);
    if (all != NULL)
        fxb_cache_declared_foreach(b, declared_entry, all);
    size_t n = all != NULL ? json_object_size(all) : 0;
    const char **keys = all != NULL ? malloc((n + 1) * sizeof(*keys)) : NULL;
    json_t *arr = keys != NULL ? json_array() : NULL;
    if (arr != NULL) {
        size_t i = 0;
        const char *key;
        json_t *v;
        json_object_foreach(all, key, v) keys[i++] = key;
        if (n > 1)
            qsort(keys, n, sizeof(*keys), cmp_cache);
        for (i = 0; i < n; i++) {
            json_t *e = json_object_get(all, keys[i]);
            /* The order of the fields: names, declared, then the figures. */
            json_t *o = json_pack(
                "{s:O, s:O, s:O, s:O, s:O, s:O}", "tenant", json_object_get(e, "tenant"),
                "namespace", json_object_get(e, "namespace"), "cache", json_object_get(e, "cache"),
                "declared", json_object_get(e, "declared"), "entries",
                json_object_get(e, "entries"), "bytes", json_object_get(e, "bytes"));
            if (o == NULL || json_array_append_new(arr, o) != 0) {
                json_decref(arr);
                arr = NULL;
                break;
            }
        }
    }
    free(keys);
    json_decref(all);
    json_t *root = arr != NULL ? json_pack("{s:o}", "caches", arr) : NULL;
    return dump(root, pjson);
}

/* ---- GET /v1/subscriptions ---------------------------------------------------------------- */

/* Worker side: subscriber queue state by subscription id. */
static void subs_worker(fxb_worker *w, gpart *p)
{
    json_t *o = json_object();
    for (fxb_sub *sub = w->subs; o != NULL && sub != NULL; sub = sub->feed.wnext) {
        fx_subscriber_stats st;
        fx_subscriber_get_stats(sub->feed.sub, &st);
        json_t *e = json_object();
        if (e == NULL)
            break;
        set_u64(e, "queue_depth", st.depth);
        set_u64(e, "queue_capacity", st.capacity);
        set_u64(e, "queue_dropped", st.dropped_items);
        char key[24];
        id_key(key, sizeof(key), sub->id);
        json_object_set_new(o, key, e);
    }
    p->j = o;
}

/* Connection side: every subscription with its connection and lane. */
static void subs_conns(fx_broker *b, gpart *p)
{
    json_t *arr = json_array();
    uint64_t now = fx_now_ns();
    for (fxb_conn *c = b->eps[p->epi].conns; arr != NULL && c != NULL; c = c->cnext) {
        for (fxb_sub *sub = c->subs; sub != NULL; sub = sub->next) {
            json_t *e = json_object();
            if (e == NULL)
                break;
            set_u64(e, "id", sub->id);
            set_str(e, "tenant", fx_stream_handle_tenant(sub->h));
            set_str(e, "namespace", fx_stream_handle_namespace(sub->h));
            set_str(e, "stream", fx_stream_handle_stream(sub->h));
            set_u64(e, "connection_id", c->id);
            set_u64(e, "lane", sub->lane.lane->index);
            set_u64(e, "lanes", c->lanes.n);
            set_u64(e, "lane_depth", fx_queue_depth(&sub->lane.q));
            set_u64(e, "lane_len", atomic_load(&sub->lane.lane->count));
            set_u64(e, "lane_capacity", sub->lane.lane->capacity);
            set_u64(e, "lane_dropped", atomic_load(&sub->lane.dropped_events));
            set_u64(e, "unacked_bytes", sub->writer.inflight);
            set_u64(e, "delivered", sub->writer.delivered);
            json_object_set_new(
                e, "last_delivery_age_ms",
                sub->writer.last_write_ns == 0
                    ? json_null()
                    : json_integer((json_int_t)((now - sub->writer.last_write_ns) / FX_NS_PER_MS)));
            json_array_append_new(arr, e);
        }
    }
    p->j = arr;
}

static void subs_part(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    if (p->worker >= 0)
        subs_worker(&b->workers[p->worker], p);
    else
        subs_conns(b, p);
}

static uint64_t get_u64(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v != NULL && json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* Adds the worker side of |e| (found in any worker's part) and the totals. */
static void merge_sub(gather *g, json_t *e)
{
    char key[24];
    id_key(key, sizeof(key), get_u64(e, "id"));
    json_t *ws = NULL;
    for (size_t i = 0; ws == NULL && i < g->nparts && g->parts[i].worker >= 0; i++)
        ws = json_object_get(g->parts[i].j, key);
    uint64_t qdrop = get_u64(ws, "queue_dropped");
    set_u64(e, "queue_depth", get_u64(ws, "queue_depth"));
    set_u64(e, "queue_capacity", get_u64(ws, "queue_capacity"));
    set_u64(e, "queue_dropped", qdrop);
    set_u64(e, "drops", qdrop + get_u64(e, "lane_dropped"));
}

/* Most drops first, then deepest queue: the slow subscriber leads. */
static int cmp_sub(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    uint64_t dx = get_u64(x, "drops"), dy = get_u64(y, "drops");
    if (dx != dy)
        return dx > dy ? -1 : 1;
    uint64_t qx = get_u64(x, "queue_depth") + get_u64(x, "lane_depth");
    uint64_t qy = get_u64(y, "queue_depth") + get_u64(y, "lane_depth");
    if (qx != qy)
        return qx > qy ? -1 : 1;
    uint64_t ix = get_u64(x, "id"), iy = get_u64(y, "id");
    return ix < iy ? -1 : ix > iy;
}

int fx_broker_list_subscriptions(fx_broker *b, uint64_t timeout_ns, char **pjson)
{
    gather *g;
    int rv = gather_run(b, subs_part, NULL, true, true, timeout_ns, &g);
    if (rv != 0)
        return rv;
    /* The connection side: one array per endpoint, after the workers' parts. */
    size_t n = 0;
    bool oom = false;
    for (size_t i = b->nworkers; i < g->nparts; i++) {
        oom |= g->parts[i].j == NULL;
        n += g->parts[i].j != NULL ? json_array_size(g->parts[i].j) : 0;
    }
    json_t **v = calloc(n + 1, sizeof(*v));
    json_t *arr = json_array();
    if (oom || v == NULL || arr == NULL) {
        free(v);
        json_decref(arr);
        gather_free(g);
        return -ENOMEM;
    }
    n = 0;
    for (size_t i = b->nworkers; i < g->nparts; i++) {
        for (size_t k = 0; k < json_array_size(g->parts[i].j); k++) {
            v[n] = json_array_get(g->parts[i].j, k);
            merge_sub(g, v[n++]);
        }
    }
    qsort(v, n, sizeof(*v), cmp_sub);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_deep_copy(v[i])); /* no object shared across threads */
    free(v);
    gather_free(g);
    return dump(json_pack("{s:o}", "subscriptions", arr), pjson);
}

/* ---- create and delete -------------------------------------------------------------------- */

static fx_wire_slice slice_of(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

int fx_broker_create_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            bool *pcreated, fx_registry_err *err)
{
    return fx_broker_create_stream_durable(b, tenant, ns, stream, -1, pcreated, NULL, err);
}

int fx_broker_create_stream_durable(fx_broker *b, const char *tenant, const char *ns,
                                    const char *stream, int durable, bool *pcreated, bool *pdurable,
                                    fx_registry_err *err)
{
    if (fxb_is_draining(b)) {
        if (err != NULL) {
            err->code = FX_ESHUTDOWN;
            snprintf(err->msg, sizeof(err->msg), "%s", FXB_SHUTDOWN_TEXT);
        }
        return FX_ESHUTDOWN;
    }
    fx_stream_handle *h = NULL;
    int rv = fx_registry_create_durable(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream),
                                        durable, &h, pcreated, err);
    if (pdurable != NULL)
        *pdurable = h != NULL && fx_stream_handle_is_durable(h);
    fx_stream_handle_unref(h);
    if (rv == 0 && pcreated != NULL && *pcreated)
        FX_LOG_INFO("broker", "stream %s/%s/%s created by the admin API%s", tenant, ns, stream,
                    durable == 1 ? " (durable)" : "");
    return rv;
}

typedef struct moved_to {
    const char *node_id, *addr;
    uint64_t generation;
} moved_to;

static int remove_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                         fx_registry_err *err, bool release, const moved_to *mv);

int fx_broker_delete_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            fx_registry_err *err)
{
    return remove_stream(b, tenant, ns, stream, err, false, NULL);
}

int fx_broker_release_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream)
{
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    bool durable = h != NULL && fx_stream_handle_is_durable(h);
    fx_stream_handle_unref(h);
    if (h == NULL || durable)
        return 0; /* nothing here, or a durable stream: its log stays (pinned here) */
    return remove_stream(b, tenant, ns, stream, NULL, true, NULL);
}

/* ---- cluster moves ----------------------------------------------------------------------- */

typedef struct freeze_ctx {
    fx_task task;
    fx_timer timer;
    uint32_t waits;
    fxb_worker *w;
    fx_stream_handle *h;
    void (*done)(void *arg, int rv, uint64_t tail);
    void *arg;
} freeze_ctx;

/* The base offset of |h|'s epoch: what its tail is before any append. */
static uint64_t epoch_base(fx_broker *b, fx_stream_handle *h)
{
    return b->o.cluster != NULL
               ? fx_cluster_first_offset(b->o.cluster, fx_stream_handle_tenant(h),
                                         fx_stream_handle_namespace(h), fx_stream_handle_stream(h))
               : 0;
}

#define FREEZE_POLL_NS 1000000ull /* 1 ms */
#define FREEZE_WAITS 3000u          /* 3 s: then the move fails */

/* On the stream's worker: once every publish job admitted before the
 * freeze is done (appended: its ack may have gone at admission already),
 * the tail is exact, and any later job was refused at admission. */
static void freeze_check(fx_loop *l, freeze_ctx *f)
{
    if (fx_stream_handle_jobs(f->h) > 0 && f->waits < FREEZE_WAITS) {
        f->waits++;
        if (fx_loop_timer_arm(l, &f->timer, fx_loop_now(l) + FREEZE_POLL_NS) == 0)
            return;
    }
    if (fx_stream_handle_jobs(f->h) > 0) {
        fx_stream_handle_set_moving(f->h, FX_HANDLE_SERVING);
        f->done(f->arg, FX_ETIMEDOUT, 0);
    } else {
        fx_stream_handle_set_moving(f->h, FX_HANDLE_FROZEN);
        fx_stream *st = fxb_worker_stream_if_any(f->w, f->h);
        f->done(f->arg, 0, st != NULL ? fx_stream_tail(st) : epoch_base(f->w->b, f->h));
    }
    fx_stream_handle_unref(f->h);
    free(f);
}

static void freeze_task(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    freeze_check(l, user);
}

static void freeze_timer(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    freeze_check(l, user);
}

void fx_broker_freeze_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                             void (*done)(void *arg, int rv, uint64_t tail), void *arg)
{
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    if (h == NULL) {
        /* Never published to here: nothing to freeze, its tail is its base. */
        done(arg, 0,
             b->o.cluster != NULL ? fx_cluster_first_offset(b->o.cluster, tenant, ns, stream) : 0);
        return;
    }
    if (fx_stream_handle_is_durable(h)) {
        fx_stream_handle_unref(h);
        done(arg, FX_ENOSTREAM, 0);
        return;
    }
    freeze_ctx *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        fx_stream_handle_unref(h);
        done(arg, -ENOMEM, 0);
        return;
    }
    /* Set before the task is posted: every job the worker runs after the
     * task sees it. */
    fx_stream_handle_set_moving(h, FX_HANDLE_MOVING);
    f->w = fxb_worker_for(b, h);
    fx_timer_init(&f->timer, freeze_timer, f);
    f->h = h;
    f->done = done;
    f->arg = arg;
    fx_task_init(&f->task, freeze_task, f);
    fx_loop_post(f->w->loop, &f->task);
}

void fx_broker_unfreeze_stream(fx_broker *b, const char *tenant, const char *ns,
                               const char *stream)
{
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    if (h != NULL)
        fx_stream_handle_set_moving(h, FX_HANDLE_SERVING);
    fx_stream_handle_unref(h);
}

int fx_broker_move_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                          const char *node_id, const char *addr, uint64_t generation)
{
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    bool durable = h != NULL && fx_stream_handle_is_durable(h);
    fx_stream_handle_unref(h);
    if (h == NULL || durable)
        return 0;
    moved_to mv = {.node_id = node_id, .addr = addr, .generation = generation};
    int rv = remove_stream(b, tenant, ns, stream, NULL, true, &mv);
    return rv == FX_ENOSTREAM ? 0 : rv;
}

void fx_broker_set_forwarder(fx_broker *b, struct fx_forwarder *f)
{
    atomic_store_explicit(&b->forwarder, f, memory_order_release);
}

static int remove_stream(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                         fx_registry_err *err, bool release, const moved_to *mv)
{
    fx_stream_handle *h =
        fx_registry_find(b->reg, slice_of(tenant), slice_of(ns), slice_of(stream));
    fxb_end *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        fx_stream_handle_unref(h);
        return -ENOMEM;
    }
    bool removed = h != NULL &&
                   (release ? fx_registry_release(b->reg, slice_of(tenant), slice_of(ns),
                                                  slice_of(stream))
                            : fx_registry_remove(b->reg, slice_of(tenant), slice_of(ns),
                                                 slice_of(stream)));
    if (!removed) {
        fx_stream_handle_unref(h);
        free(e);
        if (err != NULL) {
            err->code = FX_ENOSTREAM;
            snprintf(err->msg, sizeof(err->msg),
                     "stream not found: tenant=%.255s namespace=%.255s stream=%.255s", tenant, ns,
                     stream);
        }
        return FX_ENOSTREAM;
    }
    /* Inactive from now on: resolves fail, so no new publish or subscribe
     * reaches the worker for it; the worker finishes its subscribers. */
    e->h = h;
    e->w = fxb_worker_for(b, h);
    if (mv != NULL) {
        e->moved = true;
        snprintf(e->moved_to, sizeof(e->moved_to), "%s", mv->node_id);
        snprintf(e->moved_addr, sizeof(e->moved_addr), "%s", mv->addr != NULL ? mv->addr : "");
        e->moved_gen = mv->generation;
    }
    fx_task_init(&e->task, fxb_worker_end_task, e);
    fx_loop_post(e->w->loop, &e->task);
    FX_LOG_INFO("broker", "stream %s/%s/%s %s%s", tenant, ns, stream,
                mv != NULL ? "moved to "
                : release  ? "released: this node owns it no more (its subscribers are ended)"
                           : "deleted by the admin API",
                mv != NULL ? mv->node_id : "");
    return 0;
}

/* ---- graceful drain ---------------------------------------------------------------------- */

static void work_worker(fxb_worker *w, work *k)
{
    k->jobs += fx_queue_depth(&w->jobs) + (w->parked_job != NULL) + fxb_durable_pending(w);
    for (fxb_sub *sub = w->subs; sub != NULL; sub = sub->feed.wnext) {
        fx_subscriber_stats st;
        fx_subscriber_get_stats(sub->feed.sub, &st);
        k->deliveries += st.depth + (sub->feed.backlog.n - sub->feed.backlog_pos) +
                         (sub->feed.held != NULL) + fx_coalescer_has_pending(&sub->feed.co);
    }
}

static void work_conns(fxb_ep *e, work *k)
{
    for (fxb_conn *c = e->conns; c != NULL; c = c->cnext) {
        k->conns++;
        if (c->qc != NULL)
            k->unacked += fx_quic_conn_unacked(c->qc);
        for (fxb_bidi *s = c->bidis; s != NULL; s = s->next) {
            k->jobs += (s->admit.parked != NULL) + (s->admit.deferred != NULL);
            for (fxb_reply *r = s->replies.head; r != NULL; r = r->next)
                k->replies++;
        }
        for (fxb_sub *sub = c->subs; sub != NULL; sub = sub->next)
            k->deliveries += fx_queue_depth(&sub->lane.q) + (sub->writer.cur != NULL);
    }
}

static void work_part(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    if (p->worker >= 0)
        work_worker(&b->workers[p->worker], &p->w);
    else
        work_conns(&b->eps[p->epi], &p->w);
}

/* Adds one ask of the workers or of the connections to |k|. Returns 0 or
 * FX_ETIMEDOUT / -ENOMEM. */
static int work_ask(fx_broker *b, bool workers, uint64_t timeout_ns, work *k)
{
    gather *g;
    int rv = gather_run(b, work_part, NULL, workers, !workers, timeout_ns, &g);
    if (rv != 0)
        return rv;
    for (size_t i = 0; i < g->nparts; i++) {
        k->jobs += g->parts[i].w.jobs;
        k->deliveries += g->parts[i].w.deliveries;
        k->replies += g->parts[i].w.replies;
        k->unacked += g->parts[i].w.unacked;
        k->conns += g->parts[i].w.conns;
    }
    gather_free(g);
    return 0;
}

static bool work_done(const work *k)
{
    return k->jobs == 0 && k->deliveries == 0 && k->replies == 0 && k->unacked == 0;
}

/* One round: connections, then workers, then connections again, one after
 * the other. No new work is accepted while draining and work only moves
 * downstream (ingress -> worker -> lane and replies -> QUIC), so anything
 * that existed when the round started is counted by one of the asks or has
 * been acknowledged: a clean round means everything accepted is done. The
 * connection count is the last ask's. */
static int work_round(fx_broker *b, uint64_t timeout_ns, work *k)
{
    work c1 = {0}, w = {0}, c2 = {0};
    int rv = work_ask(b, false, timeout_ns, &c1);
    if (rv == 0)
        rv = work_ask(b, true, timeout_ns, &w);
    if (rv == 0)
        rv = work_ask(b, false, timeout_ns, &c2);
    if (rv != 0)
        return rv;
    *k = (work){.jobs = c1.jobs + w.jobs + c2.jobs,
                .deliveries = c1.deliveries + w.deliveries + c2.deliveries,
                .replies = c1.replies + c2.replies,
                .unacked = c1.unacked + c2.unacked,
                .conns = c2.conns};
    return 0;
}

/* ---- stalled connections during a drain ---------------------------------------------- */

/* A connection's progress: unacknowledged bytes, messages written to its
 * event streams, queued replies. Any change between two checks is progress.
 * |*plists| gets the frame lists still queued for it, |*pready| the replies
 * ready but not yet written. */
static void conn_progress(fxb_conn *c, uint64_t sig[3], uint64_t *plists, uint64_t *pready)
{
    uint64_t delivered = 0, lists = 0, replies = 0, ready = 0;
    for (fxb_sub *sub = c->subs; sub != NULL; sub = sub->next) {
        delivered += sub->writer.delivered;
        lists += fx_queue_depth(&sub->lane.q) + (sub->writer.cur != NULL);
    }
    for (fxb_bidi *s = c->bidis; s != NULL; s = s->next) {
        for (fxb_reply *r = s->replies.head; r != NULL; r = r->next) {
            replies++;
            ready += atomic_load_explicit(&r->done, memory_order_acquire);
        }
    }
    sig[0] = fx_quic_conn_unacked(c->qc);
    sig[1] = delivered;
    sig[2] = replies;
    *plists = lists;
    *pready = ready;
}

static fx_ratelimit stall_rl = FX_RATELIMIT_INIT;
static const bool stall_sample = false, stall_close = true;

/* Connection side of a stall check (|arg| points to stall_close or
 * stall_sample): with stall_close, closes every connection that has work
 * left and whose progress is what the previous check saw, adding it to
 * |p->w| (conns, deliveries, unacked); then records the others' progress. */
static void stall_part(fx_broker *b, gpart *p, void *arg)
{
    bool close = *(const bool *)arg;
    for (fxb_conn *c = b->eps[p->epi].conns; c != NULL; c = c->cnext) {
        if (c->qc == NULL)
            continue;
        uint64_t sig[3], lists, ready;
        conn_progress(c, sig, &lists, &ready);
        /* Only work the client holds up counts: a reply still waiting for
         * its worker (a commit ack) is the broker's, not the client's. */
        bool pending = sig[0] != 0 || ready != 0 || lists != 0;
        if (close && pending && c->drain_sampled && memcmp(sig, c->drain_sig, sizeof(sig)) == 0) {
            p->w.conns++;
            p->w.deliveries += lists;
            p->w.unacked += sig[0];
            FX_COUNTER_INC(drain_stalled_closed);
            FX_LOG_RATELIMITED(&stall_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                               "drain: closing connection %llu, no progress since the last "
                               "check (%llu unacked bytes, %llu queued frame lists)",
                               (unsigned long long)c->id, (unsigned long long)sig[0],
                               (unsigned long long)lists);
            fx_quic_conn_close(c->qc, 0, FXB_SHUTDOWN_TEXT ": no progress");
            continue;
        }
        memcpy(c->drain_sig, sig, sizeof(sig));
        c->drain_sampled = true;
    }
}

/* Runs one stall check on every endpoint loop; adds the closed connections
 * and what they held to |r|. */
static void stall_check(fx_broker *b, bool close, uint64_t timeout_ns, fx_broker_drain_report *r)
{
    gather *g;
    if (gather_run(b, stall_part, (void *)(close ? &stall_close : &stall_sample), false, true,
                   timeout_ns, &g) != 0)
        return; /* a loop did not answer in time: the next check asks again */
    for (size_t i = 0; i < g->nparts; i++) {
        r->stalled_closed += g->parts[i].w.conns;
        r->stalled_deliveries += g->parts[i].w.deliveries;
        r->stalled_unacked += g->parts[i].w.unacked;
    }
    gather_free(g);
}

/* ---- replies the clients do not read (control_stream_drain_timeout) ----------------------- */

static fx_ratelimit reply_drain_rl = FX_RATELIMIT_INIT;

/* Resets every client stream of the endpoint whose replies are not all
 * written (queued here, or held by QUIC for want of the client's credit);
 * counts streams in |p->w.conns| and queued replies in |p->w.replies|. */
static void reset_unread_part(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    for (fxb_conn *c = b->eps[p->epi].conns; c != NULL; c = c->cnext) {
        fxb_bidi *next;
        for (fxb_bidi *s = c->bidis; s != NULL; s = next) {
            next = s->next;
            if (s->closed || (s->replies.head == NULL && !fx_quic_stream_is_sending(c->qc, s->sid)))
                continue;
            p->w.conns++;
            p->w.replies += s->replies.n;
            FX_LOG_RATELIMITED(&reply_drain_rl, fx_now_ns(), FX_LOG_WARN, "broker",
                               "drain: conn %llu stream %lld reset with %zu unwritten "
                               "replies (control_stream_drain_timeout_ms)",
                               (unsigned long long)c->id, (long long)s->sid, s->replies.n);
            fxb_bidi_fail(s, "replies not read within control_stream_drain_timeout_ms");
        }
    }
}

static void reset_unread(fx_broker *b, uint64_t timeout_ns, fx_broker_drain_report *r)
{
    gather *g;
    if (gather_run(b, reset_unread_part, NULL, false, true, timeout_ns, &g) != 0)
        return;
    for (size_t i = 0; i < g->nparts; i++) {
        r->reply_streams_reset += g->parts[i].w.conns;
        r->replies_abandoned += g->parts[i].w.replies;
    }
    gather_free(g);
}

static void close_conns(fx_broker *b, gpart *p, void *arg)
{
    (void)arg;
    for (fxb_conn *c = b->eps[p->epi].conns; c != NULL; c = c->cnext)
        if (c->qc != NULL)
            fx_quic_conn_close(c->qc, 0, FXB_SHUTDOWN_TEXT);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / FX_NS_PER_S),
                          .tv_nsec = (long)(ns % FX_NS_PER_S)};
    nanosleep(&ts, NULL);
}

static uint64_t until(uint64_t deadline_ns, uint64_t cap_ns)
{
    uint64_t now = fx_now_ns();
    uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
    return left < cap_ns ? left : cap_ns;
}

/* Polls rounds until one is clean or the deadline passes. Stall checks run
 * at a quarter of the time (a sample), at half and at three quarters (close
 * what did not move since the previous check, sample the rest). */
static bool wait_done(fx_broker *b, uint64_t start_ns, uint64_t deadline_ns, work *k,
                      fx_broker_drain_report *r)
{
    uint64_t quarter = deadline_ns > start_ns ? (deadline_ns - start_ns) / 4 : 0;
    uint64_t replies_since = 0; /* only replies left since then */
    int checks = 0;
    while (fx_now_ns() < deadline_ns) {
        int rv = work_round(b, until(deadline_ns, FX_NS_PER_S), k);
        if (rv == 0 && work_done(k))
            return true;
        /* Jobs and deliveries done: what is left are replies and bytes not
         * yet acknowledged, which a client that reads nothing never frees. */
        bool only_replies = rv == 0 && k->jobs == 0 && k->deliveries == 0;
        if (!only_replies) {
            replies_since = 0;
        } else if (replies_since == 0) {
            replies_since = fx_now_ns();
        } else if (fx_now_ns() - replies_since >= b->o.control_stream_drain_timeout_ns) {
            reset_unread(b, until(deadline_ns, FX_NS_PER_S), r);
            replies_since = 0;
        }
        if (checks < 3 && quarter > 0 && fx_now_ns() >= start_ns + (uint64_t)(checks + 1) * quarter)
            stall_check(b, checks++ > 0, until(deadline_ns, FX_NS_PER_S), r);
        sleep_ns(until(deadline_ns, 2 * FX_NS_PER_MS));
    }
    return false;
}

/* Closes every connection and waits (bounded) for them to be gone. */
static void close_all(fx_broker *b)
{
    gather *g;
    if (gather_run(b, close_conns, NULL, false, true, FX_NS_PER_S, &g) == 0)
        gather_free(g);
    uint64_t end = fx_now_ns() + FX_NS_PER_S;
    work left = {0};
    while (fx_now_ns() < end) {
        left = (work){0};
        if (work_ask(b, false, until(end, FX_NS_PER_S), &left) == 0 && left.conns == 0)
            break;
        sleep_ns(2 * FX_NS_PER_MS);
    }
    if (left.conns != 0)
        FX_LOG_WARN("broker", "%llu connection(s) still open after the close",
                    (unsigned long long)left.conns);
}

int fx_broker_drain(fx_broker *b, uint64_t deadline_ns, fx_broker_drain_report *r)
{
    *r = (fx_broker_drain_report){0};
    if (!b->started || b->stopped)
        return -EINVAL;
    uint64_t start = fx_now_ns();
    atomic_store_explicit(&b->draining, true, memory_order_release);
    work k = {0};
    bool done = wait_done(b, start, deadline_ns, &k, r);
    if (r->stalled_closed != 0)
        FX_LOG_WARN("broker",
                    "drain: closed %llu connection(s) that made no progress, holding %llu queued "
                    "frame list(s) and %llu unacknowledged byte(s)",
                    (unsigned long long)r->stalled_closed,
                    (unsigned long long)r->stalled_deliveries,
                    (unsigned long long)r->stalled_unacked);
    r->timed_out = !done;
    if (!done) {
        r->jobs_queued = k.jobs;
        r->deliveries_queued = k.deliveries;
        r->replies_pending = k.replies;
        r->unacked_bytes = k.unacked;
    }
    r->connections = k.conns;
    close_all(b);
    r->durable_flush_rv = fxb_durable_flush_all(b, deadline_ns); /* acked data on disk */
    r->publishes_refused = atomic_load(&b->drain_refused);
    r->elapsed_ns = fx_now_ns() - start;
    return done ? 0 : FX_ETIMEDOUT;
}

bool fx_broker_is_draining(const fx_broker *b)
{
    return fxb_is_draining(b);
}
