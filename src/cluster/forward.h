/* fx_forwarder: publishes sent to a broker that does not own their stream,
 * forwarded to the owner (docs/cluster.md "Forwarding"). The owner is reached
 * as any client reaches it: a libfelix client per (owner address, tenant,
 * token), so the owner verifies the publisher's token again and applies its
 * own admission; the forwarding broker never appends for a stream it does
 * not own.
 *
 * Thread: the forwarder thread, made by fx_forwarder_new, owns its clients
 * and takes the queued forwards in order; fx_forward_publish may be called
 * from any thread (the broker's connection loops), and itself hands a
 * one-message forward to its client when the client is connected and
 * nothing waits in the queue (a thread hop less; the order is the same). Completions run on a
 * client's loop thread (acked: when the owner answered; unacked: when the
 * owner's transport took the bytes), or on the forwarder thread for a
 * forward that could not be sent.
 *
 * Bounds: the bytes queued and not yet handed to a client are at most
 * max_queue_bytes (a forward past it is refused with FX_EFULL, counted);
 * at most max_clients clients, the least recently used closed first. An
 * owner that could not be reached fails the forwards to it at once for the
 * next 500 ms (each would otherwise wait out the connect timeout while a
 * dead owner's lease runs out). */
#ifndef FX_CLUSTER_FORWARD_H
#define FX_CLUSTER_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fx_forwarder fx_forwarder;

/* One payload to forward (the header stays free of libfelix's, whose names
 * the broker's own headers share). */
typedef struct fx_forward_iov {
    const void *data;
    size_t len;
} fx_forward_iov;

typedef struct fx_forward_opts {
    /* How the owners' certificates are verified: the SHA-256 pin of the
     * certificate every node of the cluster serves (one certificate, as
     * scripts/cluster.sh sets up), or a CA file; |server_name| the name
     * their certificates carry. */
    const char *pin_sha256;
    const char *ca_file;
    const char *server_name;
    size_t max_queue_bytes; /* 0: 64 MiB */
    size_t max_clients;     /* 0: 64 */
    int connect_timeout_ms; /* 0: 1,000 */
} fx_forward_opts;

/* Makes the forwarder and starts its thread. Returns 0, FX_ECONFIG or -errno. */
int fx_forwarder_new(fx_forwarder **pf, const fx_forward_opts *o);
/* Fails the forwards still queued (FX_ECLOSED), closes every client, joins
 * the thread and frees. NULL ok. */
void fx_forwarder_free(fx_forwarder *f);

/* |rv| 0 when the owner answered ok (acked) or took the bytes (unacked);
 * else the error, with |why| a sentence (NULL when |rv| is 0). */
typedef void (*fx_forward_cb)(void *user, int rv, const char *why);

/* Queues the |n| payloads |msgs| (copied) for |tenant|'s |ns|/|stream| to
 * the owner at |addr| ("host:port", numeric), authenticating with |token|;
 * |acked| asks the owner for an answer. Returns 0 (|cb| runs exactly once
 * later), FX_EFULL (the queue's byte bound; counted) or -ENOMEM; then |cb|
 * never runs. Any thread. */
int fx_forward_publish(fx_forwarder *f, const char *addr, const char *tenant, const char *token,
                       const char *ns, const char *stream, const fx_forward_iov *msgs, size_t n,
                       bool acked, fx_forward_cb cb, void *user);

typedef struct fx_forward_stats {
    uint64_t forwards;     /* forwards queued */
    uint64_t messages;     /* messages in them */
    uint64_t failed;       /* forwards answered with an error */
    uint64_t refused_full; /* forwards refused by max_queue_bytes */
    uint64_t connects;     /* clients connected to owners */
    uint64_t connect_errors;
    uint64_t direct;       /* of |forwards|: sent by the fast path, from the caller's thread */
    uint64_t queued_bytes; /* now */
    uint64_t clients;      /* now */
} fx_forward_stats;

/* Any thread. */
void fx_forwarder_get_stats(fx_forwarder *f, fx_forward_stats *st);

#endif
