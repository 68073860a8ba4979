/* felix-bench's run engine: one run of one mode against a broker reachable
 * at an address (in-process or external), with one publisher connection and
 * F subscriber connections (one fx_client each; one reader thread per
 * subscription). The caller's thread publishes; readers run on their own
 * threads (or, with callback delivery, on the client library's loop). */
#ifndef FX_BENCH_RUN_H
#define FX_BENCH_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench_lib.h"
#include "bench_sys.h"
#include "felix/felix.h"

typedef enum fx_bench_mode {
    FX_BENCH_THROUGHPUT,
    FX_BENCH_LATENCY,
    FX_BENCH_OVERLOAD,
    FX_BENCH_IDLE_SUBS, /* N idle subscriptions: the broker's RSS per subscription */
    FX_BENCH_ISOLATION, /* overload's workload twice: all links clean, then one behind a bad link */
    FX_BENCH_FSYNC_PROBE, /* no broker: the disk's append + fdatasync rate (bench_probe.c) */
    FX_BENCH_REPLAY,      /* throughput fanout 1, then a catch-up replay of it (bench_replay.c) */
    FX_BENCH_GROUP,       /* consumer groups: competing consumers with acks (bench_group.c) */
    FX_BENCH_CACHE,       /* cache gets/puts, closed-loop clients (bench_cache.c) */
} fx_bench_mode;

/* --mode cache --op: what the clients send. */
typedef enum fx_bench_cache_op {
    FX_BENCH_CACHE_GET,  /* gets of keys filled first */
    FX_BENCH_CACHE_SET,  /* puts */
    FX_BENCH_CACHE_FILL, /* puts of K distinct keys once: the broker's RSS per entry */
} fx_bench_cache_op;

/* Everything one run needs. Strings are borrowed for the run. */
typedef struct fx_bench_cfg {
    fx_bench_mode mode;
    size_t payload;      /* bytes, >= FX_BENCH_HDR */
    uint32_t fanout;     /* subscriber connections */
    uint32_t batch;      /* messages per publish call (throughput, overload) */
    uint32_t streams;    /* messages spread over this many streams */
    uint64_t warmup;     /* messages not measured */
    uint64_t total;      /* throughput/overload/isolation: measured messages at least;
                          * latency: round trips */
    double min_seconds;  /* throughput/overload/isolation (per phase): measured time at least */
    double max_seconds;  /* hard bound on the publish loop */
    double idle_seconds; /* a reader silent this long after the end stops */
    bool ack;            /* latency: FX_ACK_PER_MESSAGE; throughput: acked publishing
                          * (fx_bench_acked_run: no subscribers) */
    uint32_t publishers; /* throughput --ack: publisher threads sharing one client */
    uint32_t window;     /* throughput --ack: 0 blocking fx_publish, one at a time per
                          * thread; W: fx_publish_async, W in flight per thread */
    uint32_t rate;       /* latency: round trips started per second at most (0: back to back) */
    bool callback;       /* deliver by callback instead of fx_subscription_next */
    bool idempotent;     /* fx_client_opts.idempotent (also FELIX_IDEMPOTENT=1) */
    bool no_redirect;    /* fx_client_opts.no_redirect (a cluster mirror serves it) */
    bool lossless;       /* client Block queues (the broker's profile is the caller's) */
    const char *server;  /* "127.0.0.1:port" */
    const char *sub_server; /* the subscribers' broker, when not |server| (NULL) */
    const char *pin;     /* hex SHA-256 of the broker's certificate, or NULL */
    bool insecure;       /* accept any certificate */
    const char *admin;   /* external broker's admin "host:port", or NULL */
    bool in_process;     /* read drop counters from this process's registry */
    struct fx_broker *broker; /* in-process broker (its subscriptions' counters), or NULL */
    int broker_pid;           /* external broker's pid (CPU, RSS, wakeups), or 0 */
    uint64_t drop_every;      /* test-only loss: readers discard every Nth message */
    uint64_t bufferable;      /* bytes the configuration can buffer (guard) */
    bool progress;            /* print a progress line to stderr on long runs */
    const char *ns;           /* namespace of the benchmark streams */
    uint64_t subs;            /* idle-subs: subscriptions to open */
    uint32_t watch_s;         /* overload: VmRSS every second for this long, from 10 s in */
    /* isolation: the victim's (subscriber F-1) link in the impaired phase:
     * each datagram its client receives is held this long, and this many
     * per thousand of those it sends and receives are dropped. */
    uint32_t victim_delay_ms;
    uint32_t victim_drop_permille;
    /* fsync-probe: the directory of the probe files, records appended at
     * least (whole groups), records per fdatasync. */
    const char *dir;
    uint64_t probe_records;
    uint32_t sync_every;
    uint64_t probe_file_bytes; /* bytes per probe file (0: FX_BENCH_PROBE_FILE_BYTES) */
    uint32_t probe_single;     /* single-record appends (0: FX_BENCH_PROBE_SINGLE) */
    /* Tests only: the finished run's guard minimum in seconds (0:
     * FX_BENCH_GUARD_MIN_SECONDS), so a small run can be valid. */
    double guard_min_seconds;
    /* Streams are named <stream_prefix><k> (NULL: "bench"). */
    const char *stream_prefix;
    /* group: the cell, consumers (members, one client and thread each;
     * the redelivery cell always has A and B), records published before
     * the consumers start (backlog) or taken by A (redelivery), each
     * member's window (records it may hold unacked) and its ack wait (ms). */
    fx_bench_gcell group_cell;
    uint32_t consumers;
    uint64_t group_count;
    uint32_t group_window;
    uint32_t ack_wait_ms;
    /* cache: the op, closed-loop clients, requests in flight per client,
     * the fx_clients (connections) they share (client i on i mod N), and
     * the keys "key:%012u" in [0, keys) (get/set: drawn at random; fill:
     * each once). */
    fx_bench_cache_op cache_op;
    uint32_t clients;
    uint32_t pipeline;
    uint32_t connections;
    uint64_t keys;
} fx_bench_cfg;

/* Most consumers of a group run. */
#define FX_BENCH_GROUP_CONSUMERS_MAX 64u

/* Subscribers whose loss account a result keeps. */
#define FX_BENCH_LOSS_SUBS_MAX 16u

/* What one run measured. NaN where not measured. */
typedef struct fx_bench_result {
    int error;        /* setup failure (no figures): the code */
    char errmsg[512]; /* and its text */
    bool valid;
    char why[192];     /* reason when !valid */
    fx_bench_totals t; /* over measured readers (overload: the healthy ones) */
    uint64_t credit_window, window_waits, per_sub_min_delivered, pub_errors;
    double window_s, msgs_per_s, mb_per_s, per_sub_msgs_per_s, pub_msgs_per_s;
    double submit_msgs_per_s, delivered_mib;
    fx_bench_lat lat; /* latency: per delivery; overload: healthy queueing delay */
    uint64_t lat_timeouts;
    uint64_t acked; /* throughput --ack: answers inside the measured window */
    double round_trips_per_s;
    double run_s, client_user_s, client_sys_s;
    bool have_server;
    double server_user_s, server_sys_s, host_busy_s;
    uint64_t peak_rss_kb, hwm_kb; /* external broker only */
    double client_vcsw_per_msg, server_vcsw_per_msg;
    /* overload */
    uint64_t healthy_client_dropped; /* dropped by healthy subscribers' client queues */
    uint64_t stalled_expected, stalled_received, stalled_dropped, stalled_client_dropped;
    /* overload: every subscriber's losses against the counters that cover
     * them (fx_bench_loss), read once the broker held nothing more for the
     * run's subscriptions. |loss_accounted| false: the counters could not be
     * read (|loss_why|); |loss_exact|: each subscriber's missed equals its
     * counted. The first FX_BENCH_LOSS_SUBS_MAX subscribers are kept. */
    bool loss_accounted, loss_exact;
    char loss_why[160];
    uint64_t loss_missed, loss_counted; /* summed over the subscribers */
    uint64_t loss_ingress_messages;     /* broker ingress drops during the run (messages) */
    uint64_t loss_pub_lost;             /* publisher's client: publishes lost with a connection */
    uint32_t loss_nsubs;
    fx_bench_loss loss_subs[FX_BENCH_LOSS_SUBS_MAX];
    bool have_drops;
    fx_bench_drops drops; /* broker counters, delta over the run */
    /* External broker: mean UDP payload per datagram it sent during the run
     * (ACK-only datagrams included), i.e. the datagram size in use; 0 when
     * unknown (no --admin, or an in-process broker sharing the counters
     * with the clients). */
    double broker_dgram_bytes;
    /* overload --rss-watch: the broker's VmRSS samples */
    uint64_t watch_samples, watch_min_kb, watch_max_kb, watch_first_kb, watch_last_kb;
    double watch_spread_pct; /* (max - min) / min, percent */
    /* idle-subs */
    uint32_t sub_clients;              /* clients (one event connection each) */
    uint64_t rss_idle_kb, rss_subs_kb; /* broker VmRSS before and with the subscriptions */
    double bytes_per_sub, subscribe_s; /* (after - before) / N; time to open them */
    /* isolation: the healthy subscribers' (all but the victim) delivery rate
     * and p99 queueing delay in the clean and the impaired phase, and their
     * ratios impaired / clean (NaN when a figure is missing). Every other
     * field (t, lat, rates, drops, CPU) is the impaired phase's; |valid|
     * needs both phases valid. */
    double clean_msgs_per_s, clean_p99_us, impaired_msgs_per_s, impaired_p99_us;
    double isolation_tput_ratio, isolation_p99_ratio;
    /* isolation, impaired phase: what the victim got of every message
     * published (warm-up included) within idle_seconds of the publisher's
     * end, the messages it saw reported as skipped (sequence gaps), and the
     * datagrams its link's drop hook discarded. */
    uint64_t victim_expected, victim_received, victim_gaps, victim_link_dropped;
    /* fsync-probe: msgs_per_s and mb_per_s are records/s and MB/s of the
     * grouped phase, window_s its length, lat its fdatasync latencies;
     * single_lat the fdatasync latency of one record at a time. */
    uint64_t probe_records, probe_syncs;
    fx_bench_lat single_lat;
    long fs_magic; /* statfs f_type of the probe directory */
    /* replay: the throughput phase's figures are in the fields above (live
     * delivery, one subscriber); the replay from earliest of everything it
     * published: messages, seconds from the subscribe call to the last
     * delivery, msg/s, time to the first delivery, records the broker read
     * from disk for it (felix_storage_read_records_total; UINT64_MAX when
     * it cannot be read), and live / replay figures compared. */
    uint64_t replay_msgs, replay_disk_records, replay_gaps, replay_dups, replay_offset_gaps;
    double replay_s, replay_msgs_per_s, replay_first_ms, replay_vs_live;
    /* group: the verification counts (peerbench's), msgs_per_s (acked
     * msg/s), window_s and lat (live: publish -> first delivery) above;
     * the preload (backlog, redelivery), what the broker held after it,
     * the live publisher's rate and credit waits, the redelivery lateness
     * ((B's delivery - A's) - ack wait, ms), what A took, and the acks of
     * each consumer. */
    fx_bench_gcount grp;
    double preload_s, preload_msgs_per_s, group_pub_msgs_per_s;
    uint64_t stored, taken_by_a;
    double lateness_p50_ms, lateness_p99_ms, lateness_max_ms, lateness_min_ms;
    /* redelivery: the broker's own histogram of the group (timer firing -
     * lease deadline), bucket upper bounds; NAN without --admin */
    double broker_late_p50_ms, broker_late_p99_ms;
    uint64_t broker_late_n;
    uint64_t per_consumer_acked[FX_BENCH_GROUP_CONSUMERS_MAX];
    /* cache: msgs_per_s is ops/s (answers inside the measured window),
     * lat request -> answer, t.errors the failed requests; the answers in
     * the window, gets that missed or answered a value of another length
     * (each makes the run invalid), requests re-sent by the main thread
     * after FX_EFULL, connections used, the fill's seconds (fill op, and a
     * get run's preparation); fill op: rss_idle_kb / rss_subs_kb are the
     * broker's VmRSS before and after, their difference per key, and the
     * broker's felix_cache_entries after (UINT64_MAX: no --admin). */
    uint64_t cache_ops, cache_misses, cache_bad_len, cache_full_retries, cache_entries;
    uint32_t connections;
    double fill_s, rss_per_entry_bytes;
} fx_bench_result;

/* Runs |cfg| once and fills |r|. Returns 0 when the run took place (valid
 * or not: see r->valid), or the setup error (also in r->error/errmsg):
 * FX_ETIMEDOUT / -ECONNREFUSED / FX_ETLS* when the broker is unreachable,
 * -ENOMEM, -errno. Main thread. */
int fx_bench_run_once(const fx_bench_cfg *cfg, fx_bench_result *r);

/* Throughput with |cfg|->ack: |cfg|->publishers threads publish acked
 * messages (blocking, or |cfg|->window in flight each with
 * fx_publish_async) for min_seconds after a warm-up; fills msgs_per_s
 * (acked msg/s), lat (ack latency, call to answer), acked, pub_errors,
 * window_s and |valid| (no publish failed). Returns 0 or the setup error.
 * Main thread. */
int fx_bench_acked_run(const fx_bench_cfg *cfg, fx_bench_result *r);

/* The fsync probe (--mode fsync-probe): no broker. In |cfg|->dir,
 * appends records of |cfg|->payload + 28 bytes (the log's record header)
 * to files preallocated with fallocate(FALLOC_FL_KEEP_SIZE) (a new file
 * every probe_file_bytes, the previous one removed, as the log
 * rolls segments), one pwrite and one fdatasync per |cfg|->sync_every
 * records, until |cfg|->probe_records are written and min_seconds passed;
 * then probe_single (at most probe_records) appends of one record,
 * each followed by its own fdatasync. Fills msgs_per_s (records/s),
 * mb_per_s, window_s, lat (grouped fdatasync), single_lat, probe_records,
 * probe_syncs, fs_magic and |valid| (false on tmpfs or ramfs, where
 * fdatasync is a no-op). Removes its files. Returns 0 or -errno (also in
 * r->error/errmsg). Main thread. */
int fx_bench_probe_run(const fx_bench_cfg *cfg, fx_bench_result *r);

#define FX_BENCH_PROBE_FILE_BYTES (256ull << 20) /* durable_segment_bytes' default */
#define FX_BENCH_PROBE_SINGLE 2000u
#define FX_BENCH_REC_HEADER 28u /* the durable log's record header */

/* Replay (--mode replay): a throughput run of |cfg| (fanout 1, one stream,
 * a stream of its own named after |cfg|->stream_prefix) whose figures are
 * live delivery, then a new client subscribes to that stream from earliest
 * and takes every message published (warm-up included), checking order,
 * no gap and no duplicate by sequence and by offset. The stream must be
 * durable (a broker with durable_default) and longer than the ring, so
 * the replay reads from disk: |valid| is false when it could not, or when
 * anything was lost, reordered or duplicated. Returns 0 or the setup
 * error. Main thread. */
int fx_bench_replay_run(const fx_bench_cfg *cfg, fx_bench_result *r);

/* Consumer groups (--mode group, bench_group.c), measured as peerbench
 * --mode group measures the peers: one stream of the run's own, one group,
 * |cfg|->consumers members, each its own fx_client and thread, taking with
 * fx_group_next and acking every record with fx_group_ack; every delivery
 * is checked against the sequence in its payload. Cells (|cfg|->group_cell):
 * backlog publishes group_count records (one per fx_publish call, or
 * batches of |cfg|->batch), waits until the broker holds them all, then
 * starts the consumers: acked msg/s from the first delivery to the last
 * ack. live: one publisher at most the credit window ahead of what the
 * group acked, for min_seconds after a warm-up: acked msg/s and publish ->
 * first delivery. redelivery: member A takes group_count records and
 * leaves without acking them once member B has joined (records taken and
 * not settled wait for their ack wait), B gets them again when their
 * leases lapse: lateness = (B's delivery - A's) - ack_wait_ms.
 * |valid| is false with anything missing, duplicated, unacked or skipped,
 * or any error. The broker's stream ring must hold group_count records
 * (log_capacity, log_capacity_bytes, the retained-bytes limits). Returns 0
 * or the setup error. Main thread. */
int fx_bench_group_run(const fx_bench_cfg *cfg, fx_bench_result *r);

/* Prints the group fields of |r| to stdout as JSON members, each followed
 * by a comma (felix-bench's JSON line frames them). Main thread. */
void fx_bench_group_json(const fx_bench_cfg *cfg, const fx_bench_result *r);

/* Formats |r| as one human line into |buf| (INVALID and the reason when
 * not valid). Returns snprintf's result. */
int fx_bench_group_format(char *buf, size_t cap, const fx_bench_cfg *cfg, const fx_bench_result *r);

/* Cache (--mode cache, bench_cache.c), shaped like redis-benchmark -t
 * get|set -d P -c C -P pipeline -r keys: cfg->clients closed-loop clients
 * over cfg->connections fx_clients, each client with cfg->pipeline requests
 * in flight (fx_cache_get_async / fx_cache_put_async of payload bytes, no
 * TTL, in cache "bench" of namespace cfg->ns) and its next request sent
 * from the previous one's callback; keys drawn at random in [0, keys). A
 * get run first puts every key (not measured). After cfg->warmup answers,
 * min_seconds are measured: ops/s and request -> answer latency. The fill
 * op puts each of the keys once into a cache of its own (the broker's
 * VmRSS before and after: needs cfg->broker_pid). Returns 0 (valid or not)
 * or the setup error. Main thread. */
int fx_bench_cache_run(const fx_bench_cfg *cfg, fx_bench_result *r);
/* Prints the cache fields of |r| as JSON members, each followed by a comma;
 * |jnum| prints one number (null for NaN). Main thread. */
void fx_bench_cache_json(const fx_bench_cfg *cfg, const fx_bench_result *r,
                         void (*jnum)(const char *, double, int));
/* Formats |r| as one human line into |buf|. Returns snprintf's result. */
int fx_bench_cache_format(char *buf, size_t cap, const fx_bench_cfg *cfg, const fx_bench_result *r);
/* The op's name, and its parse (0 or -1). */
const char *fx_bench_cache_op_name(fx_bench_cache_op op);
int fx_bench_cache_op_parse(const char *s, fx_bench_cache_op *op);

/* One throughput-shaped run (bench_run.c): set up, publish, collect. Used
 * by the replay mode for its live phase. */
int fx_bench_live_run(const fx_bench_cfg *cfg, fx_bench_result *r);
/* Fills |o| for one felix-bench client of |cfg|: libfelix defaults and
 * FELIX_* variables (felix-bench's main checked them at start), the broker
 * address and its certificate check, one publish connection with up to 64
 * streams, one event connection; a lossless run's or a |stalled|
 * subscriber's queue blocks, and a |stalled| one has a small stream window.
 * Every felix-bench client (run engine and acked publishers) is made so. */
void fx_bench_client_opts(const fx_bench_cfg *cfg, fx_client_opts *o, bool stalled);

/* Subscriptions per client in idle-subs mode: under the 1024 concurrent
 * uni streams one connection allows. */
#define FX_BENCH_SUBS_PER_CLIENT 1000u

#endif
