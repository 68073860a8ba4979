/* The cluster_ configuration keys made into an fx_cluster, its release hook
 * aimed at the broker, and its admin surface (cluster_node.h). */
#include "server/cluster_node.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hostport.h"
#include "base/log.h"
#include "cluster/cluster.h"
#include "cluster/forward.h"
#include "cluster/mirror.h"
#include "felix/error.h"

#define MAX_ENDPOINTS 16

struct fx_cluster_node {
    fx_cluster *cl;
    _Atomic(fx_broker *) b; /* NULL before attach and after detach */
    bool forward;           /* cluster_forward */
    fx_forwarder *fwd;      /* made at attach (it needs the broker's certificate) */
    fx_mirrors *mirrors;    /* made at attach, freed at detach (its ops use the broker) */
};

static void on_release(const char *tenant, const char *ns, const char *stream, void *user)
{
    fx_cluster_node *n = user;
    fx_broker *b = atomic_load(&n->b);
    if (b != NULL && fx_broker_release_stream(b, tenant, ns, stream) != 0)
        FX_LOG_ERROR("cluster", "out of memory releasing %s/%s/%s: its subscribers stay until "
                     "the stream is deleted",
                     tenant, ns, stream);
}

/* Moves (cluster thread): the broker freezes, ends and unfreezes. Without a
 * broker attached (starting or stopping) a freeze fails. */
static void on_freeze(const char *tenant, const char *ns, const char *stream,
                      fx_cluster_frozen_cb done, void *arg, void *user)
{
    fx_cluster_node *n = user;
    fx_broker *b = atomic_load(&n->b);
    if (b == NULL) {
        done(arg, FX_ESHUTDOWN, 0);
        return;
    }
    fx_broker_freeze_stream(b, tenant, ns, stream, done, arg);
}

static void on_unfreeze(const char *tenant, const char *ns, const char *stream, void *user)
{
    fx_cluster_node *n = user;
    fx_broker *b = atomic_load(&n->b);
    if (b != NULL)
        fx_broker_unfreeze_stream(b, tenant, ns, stream);
}

static void on_moved(const char *tenant, const char *ns, const char *stream, const char *node_id,
                     const char *addr, uint64_t generation, void *user)
{
    fx_cluster_node *n = user;
    fx_broker *b = atomic_load(&n->b);
    if (b != NULL &&
        fx_broker_move_stream(b, tenant, ns, stream, node_id, addr, generation) != 0)
        FX_LOG_ERROR("cluster", "out of memory ending moved stream %s/%s/%s: its subscribers "
                     "stay until the stream is deleted",
                     tenant, ns, stream);
}

/* The first line of |path| into |out|. */
static int read_secret(const char *path, char *out, size_t cap, char *why, size_t wcap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, wcap, "cluster_etcd_password_file %s: %s", path, strerror(errno));
        return FX_ECONFIG;
    }
    if (fgets(out, (int)cap, f) == NULL)
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
    return 0;
}

/* The address the other nodes dial for this node's internal listener:
 * cluster_internal_bind, with cluster_advertise's host when it binds a
 * wildcard address; "" without one. */
static void internal_addr(const fx_config *c, char *out, size_t cap)
{
    fx_hostport bind, adv;
    out[0] = '\0';
    if (!c->cluster_internal_bind[0] || fx_hostport_split(c->cluster_internal_bind, &bind, NULL) != 0)
        return;
    bool wild = strcmp(bind.host, "0.0.0.0") == 0 || strcmp(bind.host, "::") == 0;
    if (wild && fx_hostport_split(c->cluster_advertise, &adv, NULL) == 0)
        fx_hostport_format(&adv, bind.port, out, cap);
    else
        fx_hostport_format(&bind, bind.port, out, cap);
}

int fx_cluster_node_start(const fx_config *c, fx_cluster_node **pn, char *why, size_t cap)
{
    *pn = NULL;
    if (!c->cluster_etcd_endpoints[0])
        return 0;
    char eps[FX_CONFIG_PATH_MAX];
    snprintf(eps, sizeof(eps), "%s", c->cluster_etcd_endpoints);
    const char *list[MAX_ENDPOINTS];
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(eps, ", ", &save); tok != NULL;
         tok = strtok_r(NULL, ", ", &save)) {
        if (n == MAX_ENDPOINTS) {
            snprintf(why, cap, "cluster_etcd_endpoints: at most %d endpoints", MAX_ENDPOINTS);
            return FX_ECONFIG;
        }
        list[n++] = tok;
    }
    char password[512] = "";
    if (c->cluster_etcd_password_file[0] &&
        read_secret(c->cluster_etcd_password_file, password, sizeof(password), why, cap) != 0)
        return FX_ECONFIG;
    char internal[FX_CONFIG_ADDR_MAX + 8] = "";
    internal_addr(c, internal, sizeof(internal));
    fx_cluster_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return -ENOMEM;
    node->forward = c->cluster_forward;
    fx_cluster_opts o = {
        .endpoints = list,
        .n_endpoints = n,
        .name = c->cluster_name,
        .node_id = c->cluster_node_id,
        .advertise = c->cluster_advertise,
        .internal = internal[0] ? internal : NULL,
        .admin = c->metrics_bind,
        .weight = c->cluster_weight,
        .lease_ttl_s = c->cluster_lease_ttl_s,
        .margin_ms = (uint32_t)(c->cluster_deadline_margin_ns / 1000000ull),
        .etcd_ca_file = c->cluster_etcd_ca_file[0] ? c->cluster_etcd_ca_file : NULL,
        .etcd_cert_file = c->cluster_etcd_cert_file[0] ? c->cluster_etcd_cert_file : NULL,
        .etcd_key_file = c->cluster_etcd_key_file[0] ? c->cluster_etcd_key_file : NULL,
        .etcd_user = c->cluster_etcd_user[0] ? c->cluster_etcd_user : NULL,
        .etcd_password = c->cluster_etcd_user[0] ? password : NULL,
        .on_release = on_release,
        .freeze = on_freeze,
        .unfreeze = on_unfreeze,
        .moved = on_moved,
        .move_rate = c->cluster_move_rate,
        .rebalance_on_join = c->cluster_rebalance_on_join,
        .user = node,
    };
    int rv = fx_cluster_new(&node->cl, &o, why, cap);
    explicit_bzero(password, sizeof(password));
    if (rv == 0 && (rv = fx_cluster_start(node->cl)) != 0)
        snprintf(why, cap, "cannot start the cluster thread: %s", fx_strerror(rv));
    if (rv != 0) {
        if (rv == -ENOMEM)
            snprintf(why, cap, "out of memory");
        fx_cluster_free(node->cl);
        free(node);
        return rv;
    }
    *pn = node;
    return 0;
}

struct fx_cluster *fx_cluster_node_cluster(fx_cluster_node *n)
{
    return n != NULL ? n->cl : NULL;
}

void fx_cluster_node_attach(fx_cluster_node *n, fx_broker *b)
{
    if (n == NULL)
        return;
    atomic_store(&n->b, b);
    if (!n->forward)
        return;
    /* The owners serve the certificate this broker serves (one per cluster):
     * its pin verifies them. */
    fx_forward_opts fo = {.pin_sha256 = fx_broker_fingerprint(b)};
    int rv = fx_forwarder_new(&n->fwd, &fo);
    if (rv != 0) {
        FX_LOG_ERROR("cluster", "cannot make the publish forwarder (%s): publishes for streams "
                     "other nodes own are refused naming the owner",
                     fx_strerror(rv));
        return;
    }
    fx_broker_set_forwarder(b, n->fwd);
    /* Subscribers without FEATURE_REDIRECT: served from local mirrors
     * (docs/cluster.md "Mirror"). */
    fx_mirror_opts mo = {0};
    fx_broker_mirror_opts(b, &mo);
    rv = fx_mirrors_new(&n->mirrors, &mo);
    if (rv != 0) {
        FX_LOG_ERROR("cluster", "cannot make the mirrors (%s): subscribers without the redirect "
                     "feature are refused naming the owner",
                     fx_strerror(rv));
        return;
    }
    fx_broker_set_mirrors(b, n->mirrors);
}

void fx_cluster_node_detach(fx_cluster_node *n)
{
    if (n == NULL)
        return;
    fx_broker *b = atomic_exchange(&n->b, NULL);
    if (b != NULL) {
        fx_broker_set_forwarder(b, NULL);
        fx_broker_set_mirrors(b, NULL);
    }
    /* While the broker runs: each mirror's stop removes its local stream. */
    fx_mirrors_free(n->mirrors);
    n->mirrors = NULL;
}

static bool ready(void *user, char *why, size_t cap)
{
    fx_cluster_node *n = user;
    return fx_cluster_ready(n->cl, why, cap);
}

void fx_cluster_node_admin_opts(fx_cluster_node *n, fx_admin_opts *ao)
{
    if (n == NULL)
        return;
    ao->ready = ready;
    ao->ready_user = n;
}

/* |json| (the cluster's status, taken) with "mirrors": the mirrors running
 * here (their stream, owner, next offset, counters). NULL: no memory. */
static char *with_mirrors(fx_cluster_node *n, char *json)
{
    if (json == NULL || n->mirrors == NULL)
        return json;
    char *ms = fx_mirrors_json(n->mirrors);
    json_t *root = json_loads(json, 0, NULL);
    json_t *arr = ms != NULL ? json_loads(ms, 0, NULL) : NULL;
    free(ms);
    char *out = NULL;
    if (root != NULL && arr != NULL && json_object_set_new(root, "mirrors", arr) == 0) {
        arr = NULL;
        out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    json_decref(arr);
    json_decref(root);
    free(json);
    return out;
}

void fx_cluster_node_route(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    fx_cluster_node *n = user;
    if (n == NULL) {
        (void)fx_admin_resp_text(resp, 404,
                                 "this broker is standalone (cluster_etcd_endpoints is empty)");
        return;
    }
    char *json = fx_cluster_status_json(n->cl);
    json = with_mirrors(n, json);
    if (json == NULL) {
        (void)fx_admin_resp_text(resp, 500, "out of memory");
        return;
    }
    (void)fx_admin_resp_set(resp, 200, FX_ADMIN_JSON, json, strlen(json));
    free(json);
}

void fx_cluster_node_rebalance_route(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    fx_cluster_node *n = user;
    if (n == NULL) {
        (void)fx_admin_resp_text(resp, 404,
                                 "this broker is standalone (cluster_etcd_endpoints is empty)");
        return;
    }
    const char *d = fx_admin_req_arg(req, "dry_run");
    bool dry = d != NULL && strcmp(d, "0") != 0 && strcmp(d, "false") != 0;
    char *json = NULL;
    int rv = fx_cluster_rebalance(n->cl, dry, &json);
    if (rv == FX_ECONFIG) {
        (void)fx_admin_resp_text(resp, 409, "moves are off on this node (cluster_move_rate = 0)");
        return;
    }
    if (rv != 0) {
        (void)fx_admin_resp_text(resp, 500, fx_strerror(rv));
        return;
    }
    (void)fx_admin_resp_set(resp, 200, FX_ADMIN_JSON, json, strlen(json));
    free(json);
}

void fx_cluster_node_free(fx_cluster_node *n)
{
    if (n == NULL)
        return;
    atomic_store(&n->b, NULL);
    fx_forwarder_free(n->fwd); /* after the broker: no stream can forward any more */
    fx_cluster_free(n->cl);
    free(n);
}
