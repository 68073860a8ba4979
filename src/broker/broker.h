/* fx_broker: one running broker instance, the data plane that joins the
 * registry, ingress, streams, feeders and the QUIC transport. It owns the
 * worker loops (stream s runs on worker handle_id % workers), optional io
 * loops, one QUIC server endpoint and the process-wide publish budget.
 * The options are a plain struct (the daemon fills it from fx_config), so this
 * module does not depend on src/server. Control functions: main thread (or a
 * test's thread), never from a broker loop. */
#ifndef FX_BROKER_BROKER_H
#define FX_BROKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/queue.h"
#include "broker/registry.h"
#include "quic/quic.h"

typedef struct fx_broker fx_broker;

/* One pre-created stream. */
typedef struct fx_broker_stream_name {
    const char *tenant;
    const char *ns;
    const char *stream;
} fx_broker_stream_name;

/* Every setting the data plane uses; fx_broker_opts_default() writes the
 * documented defaults (felix-facts.md §4, ARCHITECTURE.md). Sizes in bytes,
 * durations in nanoseconds. Strings are borrowed until fx_broker_new returns,
 * except |quic.*| strings, which must outlive the broker. */
typedef struct fx_broker_opts {
    const char *bind_ip; /* numeric; "127.0.0.1" */
    uint16_t port;       /* 0 picks one (fx_broker_port) */
    fx_quic_opts quic;   /* transport settings (windows, unacked cap, TLS files) */
    uint32_t workers;    /* worker loops, >= 1 */
    bool pin_workers;    /* core_shards: pin worker i to CPU i */
    uint32_t io_threads; /* 0: the endpoint runs on worker 0 (shared mode) */
    /* registry */
    bool auto_create_streams;
    uint32_t max_streams_per_tenant;
    const fx_broker_stream_name *streams; /* pre-created; |nstreams| of them */
    size_t nstreams;
    /* stream ring and subscriber queues (checkpoint 5) */
    uint32_t log_capacity;
    uint64_t log_capacity_bytes;
    uint32_t subscriber_queue_capacity;
    fx_queue_policy subscriber_queue_policy;
    uint32_t max_subscriptions_per_conn;
    /* ingress (checkpoints 3-4) */
    uint32_t max_frame_bytes;
    bool ack_on_commit;
    uint64_t publish_queue_wait_timeout_ns;
    uint32_t pub_queue_depth;
    uint64_t pub_inflight_bytes;
    uint64_t pub_conn_inflight_bytes;
    bool pub_ingress_wait;
    /* feeder coalescing */
    uint32_t event_batch_max_events;
    uint64_t event_batch_max_bytes;
    uint64_t event_batch_max_delay_ns;
    uint32_t fanout_batch_size; /* <= 1: single-event mode, no waiting */
    /* delivery (checkpoint 6) and the connection writer */
    uint32_t subscriber_lane_queue_depth;
    fx_queue_policy subscriber_lane_queue_policy;
    uint64_t subscriber_max_bytes_per_write;
    /* Unacknowledged bytes one subscription may have queued on its QUIC
     * stream before its writer waits (a flow-blocked subscriber stops here, so
     * it never fills the connection's unacked cap for its neighbours). */
    uint64_t subscriber_unacked_bytes;
} fx_broker_opts;

/* Writes the defaults into |o| (workers 1, 127.0.0.1 port 0, QUIC defaults). */
void fx_broker_opts_default(fx_broker_opts *o);

/* Creates the broker: registry (with the pre-created streams), budgets, worker
 * and io loops (not running yet) and the QUIC server endpoint bound to
 * |o->bind_ip|:|o->port|. Returns 0; -EINVAL (a bound is 0); FX_ECONFIG,
 * FX_ETLS, -errno from the endpoint; FX_EWIRE_NAME for a bad stream name;
 * -ENOMEM. The caller frees with fx_broker_free(). Main thread. */
int fx_broker_new(fx_broker **pb, const fx_broker_opts *o);

/* Starts the loop threads. Returns 0 or -errno. Main thread. */
int fx_broker_start(fx_broker *b);

/* Stops serving: frees the endpoint on its loop (every connection closes,
 * every subscription is removed), lets the loops finish the work already
 * handed to them, then stops and joins them. Idempotent. Main thread. */
void fx_broker_stop(fx_broker *b);

/* Stops the broker if needed and frees everything. NULL ok. Main thread. */
void fx_broker_free(fx_broker *b);

/* The bound UDP port. Any thread. */
uint16_t fx_broker_port(const fx_broker *b);
/* Hex SHA-256 of the server certificate (64 chars). Any thread. */
const char *fx_broker_fingerprint(const fx_broker *b);
/* The stream registry (any thread; see registry.h). */
fx_registry *fx_broker_registry(fx_broker *b);
/* Index of the worker loop the QUIC endpoint runs on, or -1 when it runs on
 * a dedicated io loop (io_threads > 0). Any thread. */
int fx_broker_endpoint_worker(const fx_broker *b);

#endif
