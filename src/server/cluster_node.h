/* The broker process's cluster membership (docs/cluster.md): makes the
 * fx_cluster from the cluster_ configuration keys, connects its release
 * hook to the broker, and serves GET /v1/cluster and the /ready check.
 * Main thread, but the callbacks (cluster thread, admin threads). */
#ifndef FX_SERVER_CLUSTER_NODE_H
#define FX_SERVER_CLUSTER_NODE_H

#include <stdbool.h>
#include <stddef.h>

#include "broker/broker.h"
#include "server/admin.h"
#include "server/config.h"

typedef struct fx_cluster_node fx_cluster_node;

/* Makes and starts the membership of |c| (NULL in |*pn| when
 * cluster_etcd_endpoints is empty: a standalone broker). Returns 0, or
 * FX_ECONFIG / -errno with |why| filled. */
int fx_cluster_node_start(const fx_config *c, fx_cluster_node **pn, char *why, size_t cap);
/* The fx_cluster for fx_broker_opts.cluster (NULL: standalone). */
struct fx_cluster *fx_cluster_node_cluster(fx_cluster_node *n);
/* From now on a stream this node stops owning is released in |b|. */
void fx_cluster_node_attach(fx_cluster_node *n, fx_broker *b);
/* Fills the admin options' /ready hook. NULL |n|: nothing. */
void fx_cluster_node_admin_opts(fx_cluster_node *n, fx_admin_opts *ao);
/* GET /v1/cluster: this node's view of the cluster as JSON (404 on a
 * standalone broker). |user| is the fx_cluster_node (may be NULL). */
void fx_cluster_node_route(const fx_admin_req *req, fx_admin_resp *resp, void *user);
/* POST /v1/cluster/rebalance[?dry_run=1]: plans the moves of this node's
 * in-memory streams (fx_cluster_rebalance) and, unless a dry run, starts
 * them; answers {"node","dry_run","planned","moves":[{"stream","to"}]}.
 * 404 standalone, 409 when moves are off. |user| is the fx_cluster_node. */
void fx_cluster_node_rebalance_route(const fx_admin_req *req, fx_admin_resp *resp, void *user);
/* Detaches the broker first (call before fx_broker_free), then. */
void fx_cluster_node_detach(fx_cluster_node *n);
/* Revokes the lease (the other nodes may claim this node's streams at once)
 * and frees. After fx_broker_free. NULL ok. */
void fx_cluster_node_free(fx_cluster_node *n);

#endif
