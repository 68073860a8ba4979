/* The per-group series of /metrics (group_metrics.h): per worker, a list of
 * records under a mutex, their values atomics the worker writes and a
 * scrape reads. Worker loop, but for collect() (the scrape's thread). */
#include "broker/group_metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/worker.h"

/* One group's record. The names are written before it is linked, then only
 * read; |v| is written by the worker, read by a scrape, both relaxed. */
struct fxb_gmetric {
    struct fxb_gmetric *next, *prev;
    char tenant[FX_REGISTRY_NAME_MAX + 1];
    char ns[FX_REGISTRY_NAME_MAX + 1];
    char stream[FX_REGISTRY_NAME_MAX + 1];
    char group[FXB_GROUP_NAME_MAX + 1];
    _Atomic int64_t v[FX_MGROUP_N];
};

/* A worker's records: |head| guarded by |mu|. */
struct fxb_gmset {
    pthread_mutex_t mu;
    struct fxb_gmetric *head;
    fx_mgroup_source src;
};

/* The scrape: one row per group. Any thread (the scrape's). */
static void collect(void *user, fx_mgroup_emit_fn emit, void *sink)
{
    struct fxb_gmset *set = user;
    pthread_mutex_lock(&set->mu);
    for (const struct fxb_gmetric *m = set->head; m != NULL; m = m->next) {
        fx_mgroup_row r = {
            .tenant = m->tenant, .ns = m->ns, .stream = m->stream, .group = m->group};
        for (size_t i = 0; i < FX_MGROUP_N; i++)
            r.v[i] = atomic_load_explicit(&m->v[i], memory_order_relaxed);
        emit(sink, &r);
    }
    pthread_mutex_unlock(&set->mu);
}

static struct fxb_gmset *set_of(fxb_worker *w)
{
    if (w->gmetrics != NULL)
        return w->gmetrics;
    struct fxb_gmset *set = calloc(1, sizeof(*set));
    if (set == NULL)
        return NULL;
    pthread_mutex_init(&set->mu, NULL);
    set->src = (fx_mgroup_source){.on_collect = collect, .user = set};
    fx_metrics_group_source_add(&set->src);
    w->gmetrics = set;
    return set;
}

void fxb_gmetric_add(struct fxb_group *g)
{
    struct fxb_gmset *set = set_of(g->w);
    struct fxb_gmetric *m = set != NULL ? calloc(1, sizeof(*m)) : NULL;
    if (m == NULL) {
        FX_LOG_WARN("broker", "consumer group %s: no memory for its /metrics series: not shown",
                    g->name);
        return;
    }
    fx_stream_handle *h = g->sg->h;
    snprintf(m->tenant, sizeof(m->tenant), "%s", fx_stream_handle_tenant(h));
    snprintf(m->ns, sizeof(m->ns), "%s", fx_stream_handle_namespace(h));
    snprintf(m->stream, sizeof(m->stream), "%s", fx_stream_handle_stream(h));
    snprintf(m->group, sizeof(m->group), "%s", g->name);
    for (size_t i = 0; i < FX_MGROUP_N; i++)
        atomic_init(&m->v[i], 0);
    pthread_mutex_lock(&set->mu);
    m->next = set->head;
    if (set->head != NULL)
        set->head->prev = m;
    set->head = m;
    pthread_mutex_unlock(&set->mu);
    g->gm = m;
}

static void put(struct fxb_gmetric *m, fx_mgroup_id id, uint64_t v)
{
    atomic_store_explicit(&m->v[id], v > INT64_MAX ? INT64_MAX : (int64_t)v, memory_order_relaxed);
}

void fxb_gmetric_publish(struct fxb_group *g, uint64_t tail)
{
    struct fxb_gmetric *m = g->gm;
    if (m == NULL)
        return;
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    const fxb_gs_stats *st = fxb_gs_stats_of(g->gs);
    put(m, FX_MGROUP_PENDING, (uint64_t)in.acquired + in.available);
    put(m, FX_MGROUP_PARKED, in.parked);
    put(m, FX_MGROUP_MEMBERS, in.members);
    put(m, FX_MGROUP_CAPPED, in.capped_since_us != 0);
    if (tail != UINT64_MAX)
        put(m, FX_MGROUP_LAG, tail > in.floor ? tail - in.floor : 0);
    put(m, FX_MGROUP_DELIVERED, st->delivered);
    put(m, FX_MGROUP_REDELIVERED, st->redelivered);
    put(m, FX_MGROUP_ACKED, st->acked);
    put(m, FX_MGROUP_DEAD_LETTERED, st->dead[FXB_GS_DEAD_MAX_DELIVER] + st->dead[FXB_GS_DEAD_TERM]);
    put(m, FX_MGROUP_SKIPPED, st->skipped);
    put(m, FX_MGROUP_STALE, st->stale[0] + st->stale[1] + st->stale[2] + st->stale[3]);
}

void fxb_gmetric_remove(struct fxb_group *g)
{
    struct fxb_gmetric *m = g->gm;
    struct fxb_gmset *set = g->w->gmetrics;
    if (m == NULL || set == NULL)
        return;
    pthread_mutex_lock(&set->mu);
    if (m->prev != NULL)
        m->prev->next = m->next;
    else
        set->head = m->next;
    if (m->next != NULL)
        m->next->prev = m->prev;
    pthread_mutex_unlock(&set->mu);
    free(m);
    g->gm = NULL;
}

void fxb_gmetric_worker_deinit(fxb_worker *w)
{
    struct fxb_gmset *set = w->gmetrics;
    if (set == NULL)
        return;
    fx_metrics_group_source_remove(&set->src); /* no scrape reads it after this */
    while (set->head != NULL) {
        struct fxb_gmetric *m = set->head;
        set->head = m->next;
        free(m);
    }
    pthread_mutex_destroy(&set->mu);
    free(set);
    w->gmetrics = NULL;
}
