/* GET /v1/cluster's body (docs/cluster.md "GET /v1/cluster"): this node's lease and
 * deadline, its counters, the nodes and the owners in its view, the etcd
 * client's requests. Any thread (the admin endpoint's); it reads the tables
 * under |mu| (cluster_int.h). */
#include "cluster/cluster_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include <jansson.h>

char *fx_cluster_status_json(fx_cluster *c)
{
    json_t *root = json_object();
    json_t *nodes = json_array();
    json_t *streams = json_array();
    if (root == NULL || nodes == NULL || streams == NULL) {
        json_decref(root);
        json_decref(nodes);
        json_decref(streams);
        return NULL;
    }
    uint64_t dl = atomic_load(&c->deadline_ns), now = fxcl_boottime_ns();
    json_object_set_new(root, "cluster", json_string(c->name));
    json_object_set_new(root, "node_id", json_string(c->node_id));
    json_object_set_new(root, "serving", json_boolean(fx_cluster_serving(c)));
    json_object_set_new(root, "registered", json_boolean(atomic_load(&c->registered)));
    json_object_set_new(root, "lease", json_sprintf("%" PRIx64, (uint64_t)atomic_load(&c->lease)));
    json_object_set_new(root, "incarnation", json_integer(atomic_load(&c->incarnation)));
    json_object_set_new(root, "lease_ttl_s", json_integer(c->ttl_s ? c->ttl_s : c->o.lease_ttl_s));
    json_object_set_new(root, "deadline_in_ms",
                        json_integer(dl > now ? (json_int_t)((dl - now) / 1000000ull) : 0));
    json_t *counters = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "claims_won",
        (json_int_t)atomic_load(&c->claims_won), "claims_lost",
        (json_int_t)atomic_load(&c->claims_lost), "claims_refused",
        (json_int_t)atomic_load(&c->claims_refused), "claims_error",
        (json_int_t)atomic_load(&c->claims_error), "releases", (json_int_t)atomic_load(&c->releases),
        "renewals_ok", (json_int_t)atomic_load(&c->renew_ok), "renewals_failed",
        (json_int_t)atomic_load(&c->renew_failed), "leases_lost",
        (json_int_t)atomic_load(&c->leases_lost), "suspensions",
        (json_int_t)atomic_load(&c->suspensions), "late_appends",
        (json_int_t)atomic_load(&c->late_appends), "watch_restarts",
        (json_int_t)atomic_load(&c->watch_restarts), "moves_started",
        (json_int_t)atomic_load(&c->moves_started), "moves_done",
        (json_int_t)atomic_load(&c->moves_done), "moves_failed",
        (json_int_t)atomic_load(&c->moves_failed), "handoff_claims",
        (json_int_t)atomic_load(&c->handoff_claims), "moving_refused",
        (json_int_t)atomic_load(&c->moving_refused));
    pthread_mutex_lock(&c->mu);
    if (c->status_why[0] != '\0')
        json_object_set_new(root, "why", json_string(c->status_why));
    for (size_t i = 0; i < c->nnodes; i++) {
        const node *n = &c->nodes[i];
        json_t *jn = json_pack("{s:s,s:s,s:I,s:I,s:I}", "node_id", n->id, "addr", n->info.addr,
                               "weight", (json_int_t)n->info.weight, "incarnation",
                               (json_int_t)n->create_rev, "streams",
                               (json_int_t)n->owned);
        if (jn != NULL && n->info.admin[0] != '\0')
            json_object_set_new(jn, "admin", json_string(n->info.admin));
        if (jn != NULL && n->info.internal[0] != '\0')
            json_object_set_new(jn, "internal", json_string(n->info.internal));
        if (jn != NULL)
            json_object_set_new(jn, "lease", json_sprintf("%" PRIx64, (uint64_t)n->lease));
        json_array_append_new(nodes, jn);
    }
    for (size_t b = 0; b < OWNER_BUCKETS; b++)
        for (owner *o = c->buckets[b]; o != NULL; o = o->next)
            if (o->state == OW_OWNED)
                json_array_append_new(streams,
                                      json_pack("{s:s,s:s,s:s,s:s,s:I}", "tenant", o->t,
                                                "namespace", o->ns, "stream", o->s, "node",
                                                o->node, "epoch", (json_int_t)o->epoch));
    const fx_etcd_stats *es = &c->etcd_stats;
    json_t *etcd = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "range",
        (json_int_t)es->requests[FX_ETCD_KIND_RANGE], "put", (json_int_t)es->requests[FX_ETCD_KIND_PUT],
        "delete", (json_int_t)es->requests[FX_ETCD_KIND_DELETE], "txn",
        (json_int_t)es->requests[FX_ETCD_KIND_TXN], "lease_grant",
        (json_int_t)es->requests[FX_ETCD_KIND_LEASE_GRANT], "keepalive",
        (json_int_t)es->requests[FX_ETCD_KIND_LEASE_KEEPALIVE], "watch",
        (json_int_t)es->requests[FX_ETCD_KIND_WATCH], "errors",
        (json_int_t)(es->err_connect + es->err_timeout + es->err_tls + es->err_remote +
                     es->err_proto + es->err_too_big),
        "no_leader", (json_int_t)es->err_no_leader, "failovers", (json_int_t)es->failovers,
        "latency_count", (json_int_t)es->latency_count, "latency_ns_sum",
        (json_int_t)es->latency_ns_sum);
    if (etcd != NULL)
        json_object_set_new(root, "etcd_requests", etcd);
    json_object_set_new(root, "streams_placed", json_integer((json_int_t)c->n_owned_total));
    json_object_set_new(root, "streams_here", json_integer((json_int_t)c->n_owned_here));
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(root, "streams", streams);
    if (counters != NULL)
        json_object_set_new(root, "counters", counters);
    char *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}
