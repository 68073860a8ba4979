/* The broker instance: builds the registry, the process-wide publish budget,
 * the worker loops (each with its job queue and lazily created streams), the
 * optional io loops and the QUIC server endpoint, and tears them down in an
 * order that leaves no task unrun. Control functions run on the main thread;
 * worker helpers run on their worker loop. */
#include "broker/broker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/placement.h"
#include "broker/cache_dur.h"
#include "broker/cache_srv.h"
#include "broker/conn.h"
#include "broker/conn_auth.h"
#include "broker/durable.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/syncpol.h"

/* The defaults, every one a constant; the QUIC ones are fx_quic_opts_default's. */
static const fx_broker_opts defaults = {
    .bind_ip = "127.0.0.1",
    .workers = 1,
    .auto_create_streams = true,
    .max_tenants = 1024,
    .stream_idle_expiry_ns = 3600 * FX_NS_PER_S,
    .stream_delete_tombstone_ns = 30 * FX_NS_PER_S,
    .log_capacity = 1024,
    .log_capacity_bytes = 64u << 20,
    .retained_bytes_limit = 1ull << 30,
    .tenant_retained_bytes = 256ull << 20,
    .subscriber_queue_capacity = 512,
    .subscriber_queue_policy = FX_QUEUE_DROP_NEW,
    .max_subscriptions_per_conn = 4096,
    .max_groups_per_stream = 64,
    .group_hold_timeout_ns = 60 * FX_NS_PER_S,
    .max_frame_bytes = FX_WIRE_DEFAULT_MAX_FRAME,
    .publish_queue_wait_timeout_ns = 2000 * FX_NS_PER_MS,
    .pub_queue_depth = 64,
    .pub_inflight_bytes = 64u << 20,
    .pub_conn_inflight_bytes = 32u << 20,
    .event_batch_max_events = 64,
    .event_batch_max_bytes = 65536,
    .event_batch_max_delay_ns = 0,
    .fanout_batch_size = 64,
    .subscriber_writer_lanes = 4,
    .max_subscriber_writer_lanes = 8,
    .subscriber_lane_shard = FX_BROKER_LANE_AUTO,
    .subscriber_single_writer_per_conn = false,
    .subscriber_lane_queue_depth = 64,
    .subscriber_lane_queue_policy = FX_QUEUE_DROP_NEW,
    .subscriber_max_bytes_per_write = 65536,
    .ack_wait_timeout_ns = 2 * FX_NS_PER_S,
    .control_stream_drain_timeout_ns = 50 * FX_NS_PER_MS,
    .subscriber_flush_max_items = 16,
    .subscriber_flush_max_delay_ns = 0,
    .subscriber_unacked_bytes = 1u << 20,
    .durable = {.fsync_mode = FX_FSYNC_PERIODIC,
                .fsync_interval_ns = FX_SYNCPOL_DEFAULT_INTERVAL_NS,
                .segment_bytes = FX_DLOG_DEFAULT_SEGMENT_BYTES,
                .index_spacing_bytes = FX_DLOG_DEFAULT_INDEX_SPACING,
                .max_unsynced_bytes = 8u << 20,
                .flush_inline = true, /* as durable_flush_pipeline's default */
                .tenant_streams_max = 256,
                .tenant_bytes_max = 64ull << 30,
                .retention_interval_ns = 60 * FX_NS_PER_S,
                .max_records_per_read = 10000,
                .compaction_bytes_per_sec = 64u << 20,
                .preallocate = true},
    .frame_read_timeout_ns = 10000 * FX_NS_PER_MS,
    .auth_timeout_ns = 10000 * FX_NS_PER_MS,
    .max_connections_per_ip = 256,
    .max_unauth_streams_per_conn = 16,
    .auth_failures_per_conn = 3,
    .auth_rate_per_ip = 1000,
    .preauth_max_bytes = FXB_PREAUTH_MAX_BYTES_DEFAULT,
};

void fx_broker_opts_default(fx_broker_opts *o)
{
    *o = defaults;
    fx_quic_opts_default(&o->quic);
}

/* ---- construction ---------------------------------------------------------- */

static int check_opts(const fx_broker_opts *o)
{
    if (o->durable.dir != NULL && o->durable.dir[0] &&
        (o->durable.retention_interval_ns == 0 || o->durable.max_records_per_read == 0))
        return -EINVAL;
    if (o->workers == 0 || o->log_capacity == 0 || o->log_capacity_bytes == 0 ||
        o->subscriber_queue_capacity == 0 || o->pub_queue_depth == 0 ||
        o->pub_inflight_bytes == 0 || o->pub_conn_inflight_bytes == 0 ||
        o->subscriber_lane_queue_depth == 0 || o->max_frame_bytes == 0 ||
        o->event_batch_max_events == 0 || o->event_batch_max_bytes == 0 ||
        o->subscriber_max_bytes_per_write == 0 || o->subscriber_flush_max_items == 0 ||
        o->ack_wait_timeout_ns == 0 || o->subscriber_unacked_bytes == 0 ||
        o->subscriber_writer_lanes == 0 || o->max_subscriber_writer_lanes == 0 ||
        o->subscriber_lane_shard > FX_BROKER_LANE_ROUND_ROBIN_PIN || o->bind_ip == NULL ||
        o->max_unauth_streams_per_conn == 0 || o->auth_failures_per_conn == 0 ||
        o->preauth_max_bytes == 0)
        return -EINVAL;
    return 0;
}

static int create_streams(fx_broker *b)
{
    for (size_t i = 0; i < b->o.nstreams; i++) {
        const fx_broker_stream_name *n = &b->o.streams[i];
        fx_wire_slice t = {(const uint8_t *)n->tenant, strlen(n->tenant)};
        fx_wire_slice ns = {(const uint8_t *)n->ns, strlen(n->ns)};
        fx_wire_slice s = {(const uint8_t *)n->stream, strlen(n->stream)};
        fx_registry_err err;
        int rv = fx_registry_create(b->reg, t, ns, s, NULL, NULL, &err);
        if (rv != 0) {
            FX_LOG_ERROR("broker", "stream %s/%s/%s: %s", n->tenant, n->ns, n->stream, err.msg);
            return rv;
        }
    }
    return 0;
}

static int create_loops(fx_broker *b)
{
    int crv = fxb_caches_init(b);
    if (crv != 0)
        return crv;
    b->workers = calloc(b->nworkers, sizeof(*b->workers));
    if (b->workers == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->nworkers; i++) {
        int rv = fxb_worker_init(b, &b->workers[i], i);
        if (rv != 0)
            return rv;
    }
    if (b->o.io_threads == 0)
        return 0;
    b->io = calloc(b->o.io_threads, sizeof(*b->io));
    if (b->io == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->o.io_threads; i++) {
        char name[24];
        snprintf(name, sizeof(name), "fx-io-%u", (unsigned)(i % 100000u));
        int rv = fx_loop_new(&b->io[i], &(fx_loop_opts){.name = name, .cpu = -1});
        if (rv != 0)
            return rv;
        b->nio++;
    }
    return 0;
}

/* Places endpoint |k| of the server's by the stated rule (placement.h) and
 * notes its loop in |loops[k]|. */
static int place_endpoint(fx_broker *b, uint32_t k, fx_loop **loops)
{
    fx_loop_slot slot;
    int rv = fx_placement_endpoint(FX_ENDPOINT_SERVER, k, b->o.io_threads, b->nworkers, &slot);
    if (rv != 0)
        return rv;
    fxb_ep *e = &b->eps[k];
    bool worker = slot.kind == FX_LOOP_KIND_WORKER;
    e->loop = worker ? b->workers[slot.index].loop : b->io[slot.index];
    e->worker = worker ? (int)slot.index : -1;
    fx_task_init(&e->auth_task, fxb_conn_auth_recheck, e);
    loops[k] = e->loop;
    return 0;
}

/* Opens the QUIC server on the |n| placed |loops|: alone, or as a group
 * sharing the port. */
static int open_server(fx_broker *b, fx_loop **loops, uint32_t n)
{
    b->neps = n;
    if (n == 1)
        return fx_quic_server_new(&b->eps[0].ep, loops[0], b->o.bind_ip, b->o.port, &b->o.quic,
                                  &fxb_quic_callbacks, b);
    int rv = fx_quic_server_group_new(&b->grp, loops, n, b->o.bind_ip, b->o.port, &b->o.quic,
                                      &fxb_quic_callbacks, b);
    for (uint32_t k = 0; rv == 0 && k < n; k++) {
        b->eps[k].ep = fx_quic_server_group_member(b->grp, k);
        b->eps[k].member = true;
    }
    return rv;
}

/* The internal listener: one more endpoint, bound to internal_ip:
 * internal_port, on the loop of the first server endpoint. A forwarded
 * publish then takes the path a direct one takes (with io_threads 0, the
 * connection's loop is worker 0, which appends: no thread hop at all). */
static int open_internal(fx_broker *b)
{
    fxb_ep *e = &b->eps[b->neps];
    e->loop = b->eps[0].loop;
    e->worker = b->eps[0].worker;
    fx_task_init(&e->auth_task, fxb_conn_auth_recheck, e);
    int rv = fx_quic_server_new(&e->ep, e->loop, b->o.internal_ip, b->o.internal_port,
                                &b->o.quic, &fxb_quic_callbacks, b);
    if (rv != 0)
        return rv;
    b->neps++;
    b->internal_port = fx_quic_endpoint_port(e->ep);
    return 0;
}

/* Notes the bound port and the certificate fingerprint of the first endpoint. */
static void note_identity(fx_broker *b)
{
    b->port = fx_quic_endpoint_port(b->eps[0].ep);
    const char *fp = fx_quic_endpoint_fingerprint(b->eps[0].ep);
    size_t len = strnlen(fp, sizeof(b->fingerprint) - 1);
    memcpy(b->fingerprint, fp, len);
    b->fingerprint[len] = '\0';
}

/* The server endpoints, placed by the stated rule (placement.h): one on
 * worker 0 (io_threads 0) or io loop 0 (io_threads 1); with io_threads n >= 2
 * one per io loop but the last (the rule keeps that one for client
 * endpoints), sharing the port as a server group. */
static int create_endpoint(fx_broker *b)
{
    uint32_t n = fx_placement_server_endpoints(b->o.io_threads);
    bool internal = b->o.internal_ip != NULL;
    b->eps = calloc(n + internal, sizeof(*b->eps));
    fx_loop **loops = calloc(n, sizeof(*loops));
    int rv = b->eps == NULL || loops == NULL ? -ENOMEM : 0;
    for (uint32_t k = 0; rv == 0 && k < n; k++)
        rv = place_endpoint(b, k, loops);
    if (rv == 0)
        rv = open_server(b, loops, n);
    free(loops);
    if (rv == 0 && internal)
        rv = open_internal(b);
    if (rv != 0)
        return rv;
    note_identity(b);
    return 0;
}

/* The process-wide publish budget, the per-address limits and the retained
 * account. On failure nothing is left to undo. */
static int init_shared(fx_broker *b, const fx_broker_opts *o)
{
    int rv = fx_budget_init(&b->budget, o->pub_inflight_bytes, NULL);
    if (rv == 0 &&
        (rv = fxb_peers_init(&b->peers, o->max_connections_per_ip, o->auth_rate_per_ip)) != 0)
        fx_budget_deinit(&b->budget);
    if (rv != 0)
        return rv;
    atomic_init(&b->retained.refs, 1);
    atomic_init(&b->retained.bytes, 0);
    b->retained.limit = o->retained_bytes_limit;
    return 0;
}

static fx_registry_opts registry_opts(const fx_broker_opts *o)
{
    return (fx_registry_opts){.auto_create = o->auto_create_streams,
                              .max_streams_per_tenant = o->max_streams_per_tenant,
                              .max_tenants = o->max_tenants,
                              .tenant_retained_bytes = o->tenant_retained_bytes,
                              .durable_storage = o->durable.dir != NULL && o->durable.dir[0],
                              .durable_default = o->durable.durable_default,
                              .tenant_durable_streams_max = o->durable.tenant_streams_max,
                              .tenant_durable_bytes_max = o->durable.tenant_bytes_max,
                              .delete_tombstone_ns = o->stream_delete_tombstone_ns};
}

/* The registry, the loops, durable storage and its recovery, the configured
 * streams and the endpoints, in that order. The catalogue's durable streams
 * come first: a configured stream of the same name then finds its durable
 * stream. */
static int build(fx_broker *b, const fx_registry_opts *ro)
{
    int rv;
    if ((rv = fx_registry_new(&b->reg, ro)) != 0 || (rv = create_loops(b)) != 0 ||
        (rv = fxb_durable_init(b)) != 0 || (rv = fxb_durable_recover(b)) != 0 ||
        (rv = fxb_dcache_recover(b)) != 0 || (rv = create_streams(b)) != 0 ||
        (rv = create_endpoint(b)) != 0)
        return rv;
    return 0;
}

int fx_broker_new(fx_broker **pb, const fx_broker_opts *o)
{
    int rv = check_opts(o);
    if (rv != 0)
        return rv;
    fx_broker *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->o = *o;
    b->o.streams = NULL; /* borrowed: used only below */
    /* Clients never open unidirectional streams (events flow the other
     * way): advertise none, so no client can make us track any. */
    b->o.quic.max_streams_uni = 0;
    b->nworkers = o->workers;
    atomic_init(&b->next_sub_id, 1);
    atomic_init(&b->next_conn_id, 1);
    if ((rv = init_shared(b, o)) != 0) {
        free(b);
        return rv;
    }
    fx_registry_opts ro = registry_opts(o);
    b->o.streams = o->streams;
    rv = build(b, &ro);
    b->o.streams = NULL;
    b->o.caches = NULL; /* borrowed: declared by fxb_caches_init in build */
    b->o.caches_durable = NULL;
    b->o.ncaches = 0;
    if (rv != 0) {
        b->stopped = true;
        fx_broker_free(b);
        return rv;
    }
    *pb = b;
    return 0;
}

int fx_broker_start(fx_broker *b)
{
    int srv = fxb_durable_start(b);
    if (srv != 0)
        return srv;
    for (uint32_t i = 0; i < b->nworkers; i++) {
        int rv = fx_loop_start(b->workers[i].loop);
        if (rv != 0)
            return rv;
        if (fx_loop_pin_error(b->workers[i].loop) != 0)
            FX_LOG_WARN("broker", "worker %u could not be pinned: %s", (unsigned)i,
                        fx_strerror(fx_loop_pin_error(b->workers[i].loop)));
    }
    for (uint32_t i = 0; i < b->nio; i++) {
        int rv = fx_loop_start(b->io[i]);
        if (rv != 0)
            return rv;
    }
    b->started = true;
    return 0;
}

/* ---- teardown ---------------------------------------------------------------- */

/* Runs |fn(0, arg)| on loop |l| and waits for it however long it takes
 * (main thread, loop running): stop and reload must not go on without it. */
static void run_on(fx_loop *l, fx_loop_ask_fn fn, void *arg)
{
    /* Without a deadline the ask cannot fail. */
    (void)fx_loop_ask(l, &(fx_loop_ask_req){.fn = fn, .data = arg, .timeout_ns = FX_LOOP_FOREVER});
}

/* On an endpoint's loop: closes its connections, and frees it unless it is a
 * group member (the group is freed once every member loop has stopped). */
static void close_endpoint(size_t i, void *arg)
{
    (void)i;
    fxb_ep *e = arg;
    if (e->member) {
        fx_quic_endpoint_close_all(e->ep);
    } else {
        fx_quic_endpoint_free(e->ep);
        e->ep = NULL;
    }
}

/* Frees what is left of the endpoints: the lone one (if the broker never
 * ran), or the group, whose member loops must have stopped. */
static void free_endpoints(fx_broker *b)
{
    if (b->grp != NULL) {
        fx_quic_server_group_free(b->grp);
        b->grp = NULL;
    }
    for (uint32_t i = 0; b->eps != NULL && i < b->neps; i++) {
        if (!b->eps[i].member) /* NULL once close_endpoint freed it */
            fx_quic_endpoint_free(b->eps[i].ep);
    }
    free(b->eps);
    b->eps = NULL;
    b->neps = 0;
}

/* Every loop runs what was posted to it before; repeated so that tasks those
 * tasks posted (unregister -> worker, completions -> connection loop) run too. */
static void barrier_all(fx_broker *b)
{
    for (int round = 0; round < 3; round++) {
        fxb_durable_barrier(b); /* appends and flushes hand their jobs back */
        for (uint32_t i = 0; i < b->nworkers; i++)
            fx_loop_barrier(b->workers[i].loop);
        for (uint32_t i = 0; i < b->nio; i++)
            fx_loop_barrier(b->io[i]);
    }
}

typedef struct pending_count {
    fxb_worker *w;
    uint64_t n;
} pending_count;

static void count_pending(size_t i, void *arg)
{
    (void)i;
    pending_count *p = arg;
    p->n = fxb_durable_pending(p->w);
}

/* Jobs of durable streams make several trips (worker, storage, worker, and
 * those held by durable_max_unsynced_bytes go later): run the loops until
 * none is left, so that none is stranded on a stopped loop. */
static void settle_durable(fx_broker *b)
{
    for (int round = 0; b->dur != NULL && round < 100000; round++) {
        uint64_t n = 0;
        for (uint32_t i = 0; i < b->nworkers; i++) {
            pending_count p = {.w = &b->workers[i]};
            run_on(b->workers[i].loop, count_pending, &p);
            n += p.n;
        }
        if (n == 0)
            break;
        fxb_durable_barrier(b);
    }
    /* The last jobs to come back may have sent their stream's end (a
     * deleted durable stream's log and catalogue entry) to storage, and an
     * end may queue itself once more behind a flush: let both run. */
    fxb_durable_barrier(b);
    fxb_durable_barrier(b);
}

void fx_broker_stop(fx_broker *b)
{
    if (b == NULL || b->stopped)
        return;
    b->stopped = true;
    fxb_durable_stopping(b);
    if (b->started) {
        for (uint32_t i = 0; i < b->neps; i++)
            run_on(b->eps[i].loop, close_endpoint, &b->eps[i]);
        barrier_all(b);
        settle_durable(b);
        if (b->dur != NULL) {
            /* The durable caches' records the workers sent (the loops do
             * not run their queues once stopped), then the flushes those
             * queued behind them (cache_dur.c). */
            fxb_durable_barrier(b);
            fxb_durable_barrier(b);
        }
        barrier_all(b); /* the completions those sent to the connection loops */
        for (uint32_t i = 0; i < b->nio; i++)
            fx_loop_stop(b->io[i]);
        for (uint32_t i = 0; i < b->nworkers; i++)
            fx_loop_stop(b->workers[i].loop);
        fxb_durable_stop(b);
    }
    free_endpoints(b);
}

void fx_broker_free(fx_broker *b)
{
    if (b == NULL)
        return;
    fx_broker_stop(b);
    free_endpoints(b);
    fxb_cache_durable_close(b); /* the durable caches' logs, while the root is held */
    fxb_durable_free(b);        /* closes the logs; before the workers free the stored jobs */
    for (uint32_t i = 0; b->workers != NULL && i < b->nworkers; i++)
        fxb_worker_deinit(&b->workers[i]);
    free(b->workers);
    fxb_caches_deinit(b); /* after the stores, which release their tenants' bytes */
    for (uint32_t i = 0; i < b->nio; i++)
        fx_loop_free(b->io[i]);
    free(b->io);
    fx_registry_free(b->reg);
    fx_budget_deinit(&b->budget);
    fxb_peers_deinit(&b->peers);
    free(b);
}

/* ---- certificate reload -------------------------------------------------- */

typedef struct tls_swap {
    fxb_ep *e;
    fx_quic_creds *cr;
    int rv;
} tls_swap;

static void swap_creds(size_t i, void *arg)
{
    (void)i;
    tls_swap *s = arg;
    s->rv = s->e->ep != NULL ? fx_quic_endpoint_set_credentials(s->e->ep, s->cr) : FX_ESHUTDOWN;
}

int fx_broker_reload_tls(fx_broker *b)
{
    if (b->stopped)
        return FX_ESHUTDOWN;
    /* Disk I/O here on the main thread; the endpoint's loop only swaps. */
    fx_quic_creds *cr;
    int rv = fx_quic_creds_load(&cr, &b->o.quic);
    if (rv != 0)
        return rv;
    /* Every endpoint swaps on its own loop; a failure stops the round (the
     * credentials were loaded and checked above, so none is expected). */
    tls_swap s = {.cr = cr};
    for (uint32_t i = 0; i < b->neps && s.rv == 0; i++) {
        s.e = &b->eps[i];
        if (b->started)
            run_on(s.e->loop, swap_creds, &s);
        else
            swap_creds(0, &s);
    }
    if (s.rv == 0)
        snprintf(b->fingerprint, sizeof(b->fingerprint), "%s", fx_quic_creds_fingerprint(cr));
    fx_quic_creds_unref(cr);
    return s.rv;
}

uint16_t fx_broker_port(const fx_broker *b)
{
    return b->port;
}

uint16_t fx_broker_internal_port(const fx_broker *b)
{
    return b->internal_port;
}

const char *fx_broker_fingerprint(const fx_broker *b)
{
    return b->fingerprint;
}

const fx_broker_opts *fx_broker_get_opts(const fx_broker *b)
{
    return &b->o;
}

uint32_t fx_broker_worker_count(const fx_broker *b)
{
    return b->nworkers;
}

size_t fx_broker_budget_in_use(const fx_broker *b)
{
    return fx_budget_in_use(&b->budget);
}

fx_registry *fx_broker_registry(fx_broker *b)
{
    return b->reg;
}

int fx_broker_endpoint_worker(const fx_broker *b)
{
    return b->eps != NULL ? b->eps[0].worker : -1; /* -1 too once stopped */
}
