/* fx_cluster: one broker's membership in a cluster coordinated by etcd, and
 * the ownership of the streams it serves (docs/cluster.md).
 *
 * Thread: the cluster thread, made by fx_cluster_start, runs its own fx_loop
 * and owns the etcd client (src/cluster/etcd.c), the lease and its
 * keep-alive, the watch of the cluster's keys and every claim. It owns the
 * node and owner tables; other threads read them under |mu| through the
 * calls marked "any thread" below (the broker's connection loops and
 * workers), which never wait for etcd except fx_cluster_route while a claim
 * it asked for is under way (bounded by claim_timeout_ms).
 *
 * Membership: a lease of lease_ttl_s seconds, kept alive every TTL/3, and
 * the key nodes/<id> under it (created only if absent; its create revision is
 * this broker's incarnation). The local deadline rule: the broker serves its
 * streams until (send time of the last keep-alive etcd answered with a TTL)
 * + TTL - margin on CLOCK_BOOTTIME, and is suspended after it (no admission,
 * no append, /ready 503) until a keep-alive succeeds again (same lease: the
 * same epochs go on) or the lease is found lost (every owned stream is
 * released, a new lease and incarnation are registered).
 *
 * Ownership: a stream is placed by weighted rendezvous hashing with bounded
 * loads over the live nodes (src/cluster/place.h) and claimed by its
 * candidate with one etcd transaction that creates owners/<t>/<ns>/<s> under
 * the candidate's lease only if absent and bumps epochs/<t>/<ns>/<s>, whose
 * version is the stream's epoch. In-memory streams number their messages
 * (epoch << 40) | seq, so offsets never repeat across owners. */
#ifndef FX_CLUSTER_CLUSTER_H
#define FX_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fx_cluster fx_cluster;

#define FX_CLUSTER_ID_MAX 64    /* node id bytes */
#define FX_CLUSTER_ADDR_MAX 128 /* host:port bytes */
/* Offsets of an in-memory stream: the epoch in the bits above these. */
#define FX_CLUSTER_EPOCH_SHIFT 40

typedef struct fx_cluster_opts {
    const char *const *endpoints; /* etcd client URLs */
    size_t n_endpoints;
    const char *name;      /* cluster_name: keys live under /felix/<name>/ */
    const char *node_id;   /* cluster_node_id */
    const char *advertise; /* cluster_advertise: host:port clients dial */
    const char *internal;  /* host:port the other nodes dial to forward (NULL: advertise) */
    const char *admin;     /* the admin address shown to operators (may be NULL) */
    const char *server_name; /* TLS name clients should expect (may be NULL) */
    uint32_t weight;         /* placement weight, 1..10000 (0: 100) */
    uint32_t lease_ttl_s;    /* >= 2 */
    uint32_t margin_ms;      /* the deadline's margin; < TTL * 2/3 */
    double load_factor;      /* bounded loads: c >= 1 (0: 1.25) */
    uint32_t claim_timeout_ms; /* how long fx_cluster_route waits for its claim (0: 2,000) */
    /* etcd's own TLS and auth (NULL: none) */
    const char *etcd_ca_file, *etcd_cert_file, *etcd_key_file;
    const char *etcd_user, *etcd_password;
    /* Called on the cluster thread when this broker stops owning a stream
     * (its lease was lost): the broker ends the stream's subscribers and
     * drops its ring, so a later claim starts at the new epoch. */
    void (*on_release)(const char *tenant, const char *ns, const char *stream, void *user);
    void *user;
} fx_cluster_opts;

/* Checks |o| and makes the cluster (not started). Returns 0, FX_ECONFIG with
 * |why| filled, or -ENOMEM. */
int fx_cluster_new(fx_cluster **pc, const fx_cluster_opts *o, char *why, size_t why_cap);
/* Starts the cluster thread: registers this node (waiting out a previous
 * incarnation's key) and starts the watch. Returns 0 once the thread runs;
 * registration goes on in the background (fx_cluster_ready says when). */
int fx_cluster_start(fx_cluster *c);
/* Releases what this node owns (deletes its owner keys and revokes its
 * lease: the others can claim at once), stops the thread and frees |c|.
 * NULL ok. Not from the cluster thread. */
void fx_cluster_free(fx_cluster *c);

typedef enum fx_cluster_route_kind {
    FX_CLUSTER_LOCAL,       /* this node owns the stream (epoch set) */
    FX_CLUSTER_REMOTE,      /* another node owns it, or is its candidate (epoch 0) */
    FX_CLUSTER_UNAVAILABLE, /* no owner can be named now (|why| says why; retry) */
} fx_cluster_route_kind;

typedef struct fx_cluster_route {
    fx_cluster_route_kind kind;
    uint64_t epoch; /* ownership generation; REMOTE to a candidate that has not
                     * claimed yet: the epoch its claim will take */
    char node_id[FX_CLUSTER_ID_MAX + 1];
    char addr[FX_CLUSTER_ADDR_MAX + 1];
    /* REMOTE: the node's internal listener, which forwards dial ("": none,
     * dial |addr|) */
    char internal[FX_CLUSTER_ADDR_MAX + 1];
    char why[400];
} fx_cluster_route;

/* Where stream |tenant|/|ns|/|stream| (NUL-terminated) is served. An
 * unplaced stream whose candidate is this node is claimed first: the call
 * then waits for the claim, at most claim_timeout_ms. |durable|: the stream
 * is durable here (claimed only if its pin names this node). Any thread but
 * the cluster thread. */
void fx_cluster_route_stream(fx_cluster *c, const char *tenant, const char *ns, const char *stream,
                             bool durable, fx_cluster_route *out);

/* Whether this broker may admit and append now (before its deadline, and
 * registered). Any thread; cheap (one clock read). */
bool fx_cluster_serving(const fx_cluster *c);
/* The base offset of in-memory stream |tenant|/|ns|/|stream| this node
 * owns: epoch << FX_CLUSTER_EPOCH_SHIFT (0 when not owned). Any thread. */
uint64_t fx_cluster_first_offset(fx_cluster *c, const char *tenant, const char *ns,
                                 const char *stream);
/* Counts an append made past the deadline (the residual of the deadline
 * rule: the check before it passed). Any thread. */
void fx_cluster_count_late_append(fx_cluster *c);
/* Whether /ready may answer 200; else |why| says why (registering,
 * suspended). Any thread. */
bool fx_cluster_ready(const fx_cluster *c, char *why, size_t cap);
/* The cluster as this node sees it, as JSON (GET /v1/cluster): a malloc'd
 * string, or NULL for out of memory. Any thread. */
char *fx_cluster_status_json(fx_cluster *c);
/* This node's id. Any thread. */
const char *fx_cluster_node_id(const fx_cluster *c);

#endif
