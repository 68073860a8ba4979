/* felix-bench: the pub/sub benchmark harness (issue 6). Parses options,
 * starts an in-process broker unless --server names an external one, runs
 * the chosen mode K times (bench_run.c) and prints a human table or one JSON
 * line per run with peerbench's field names, so results compare cell by
 * cell with ../shared/peers. Main thread only (the run engine starts the
 * reader threads). */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_lib.h"
#include "bench_run.h"
#include "broker/broker.h"
#include "base/placement.h"
#include "felix/felix.h"

#define MAX_RUNS 100

typedef struct opts {
    fx_bench_cfg c;
    int runs;
    bool json;
    const char *label;
    uint32_t workers;     /* in-process: worker loops (0: one per CPU but one) */
    uint32_t core_shards; /* in-process: pinned workers */
    uint32_t mtu;         /* pinned datagram size of every connection (0: the defaults) */
    bool total_set, warmup_set;
    bool fanout_set, batch_set, acked_set; /* --fanout/--batch; --publishers/--window */
    bool victim_set; /* --victim-delay-ms or --victim-drop-permille given */
    bool probe_set;  /* --records or --sync-every given */
    bool mins_set;   /* --min-seconds given */
    bool maxs_set;   /* --max-seconds given */
    bool window_set; /* --window given (throughput --ack, or group) */
    bool conns_set;  /* --connections given */
    uint64_t seen;   /* bit (option - O_MODE) of every option given */
} opts;

static const char *const MODE_NAMES[] = {"throughput", "latency",     "overload", "idle-subs",
                                         "isolation",  "fsync-probe", "replay",   "group",
                                         "cache"};
#define NMODES 9

/* cache: --connections default: one per client, at most this many (each
 * fx_client is a QUIC connection with its own loop thread). */
#define CACHE_CONNECTIONS_DEFAULT_MAX 8u

static void usage(FILE *out)
{
    fprintf(out,
            "usage: felix-bench [--mode throughput|latency|overload|idle-subs|isolation|\n"
            "                    fsync-probe|replay|group|cache] [options]\n"
            "  isolation          overload's workload (shedding profile) twice, on fresh\n"
            "                     connections: all F subscribers clean, then subscriber F-1\n"
            "                     (the victim) behind a delayed, lossy link; reports the\n"
            "                     other subscribers' msg/s and p99 impaired / clean, and\n"
            "                     what the victim received (needs --fanout >= 2)\n"
            "  fsync-probe        no broker: appends records of P + 28 bytes (the durable\n"
            "                     log's record header) to files in --dir preallocated with\n"
            "                     fallocate(KEEP_SIZE), one fdatasync per --sync-every\n"
            "                     records: records/s and fdatasync p50/p99; then one record\n"
            "                     per fdatasync (its p50: an on_commit ack's disk cost)\n"
            "  replay             throughput, fanout 1, on a stream of its own (live\n"
            "                     delivery), then a new subscriber from earliest takes the\n"
            "                     whole history (most of it from disk): msg/s of both,\n"
            "                     order, gaps and duplicates checked; the stream must be\n"
            "                     durable (an external broker with durable_default, or --dir)\n"
            "  group              consumer groups, cells as ../shared/peers' --mode group:\n"
            "                     C members (one client and thread each) of one group on a\n"
            "                     stream of the run's own take with fx_group_next and ack\n"
            "                     every record with fx_group_ack; every delivery checked by\n"
            "                     the sequence in its payload (dups, missing, redelivered;\n"
            "                     any dup or missing record makes the run INVALID)\n"
            "  --group-cell CELL  group: backlog (default): publish --count records, wait\n"
            "                     until the broker holds them, then drain: acked msg/s from\n"
            "                     the first delivery to the last ack; live: one publisher\n"
            "                     at most the credit window ahead of what the group acked:\n"
            "                     acked msg/s over --min-seconds, publish -> delivery p50/p99;\n"
            "                     redelivery: member A takes --count records (default 100)\n"
            "                     and leaves without acking them, member B gets them again\n"
            "                     when their ack wait lapses: lateness = (B's delivery -\n"
            "                     A's) - ack wait, p50/p99\n"
            "  --consumers C      group: members (default 4; redelivery: always A and B)\n"
            "  --count N          group backlog: records published first (default 1000000;\n"
            "                     the broker's stream ring must hold them: log_capacity >= N,\n"
            "                     log_capacity_bytes >= N x (P + 16), retained-bytes limits\n"
            "                     off); redelivery: records A takes (default 100)\n"
            "  --window W         group: records each member may hold unacked (default 256)\n"
            "  --ack-wait-ms MS   group: each member's ack wait (default 30000; redelivery\n"
            "                     1000)\n"
            "  cache              the broker's key-value cache, like redis-benchmark -t get|set\n"
            "                     -d P -c C -P N -r K: C closed-loop clients, each with N\n"
            "                     requests in flight, the next sent from the previous one's\n"
            "                     answer; keys \"key:%%012u\" drawn at random in [0, K) (a\n"
            "                     get run puts every key first, not measured); ops/s\n"
            "                     (answers in the measured window) and request -> answer\n"
            "                     p50/p99; any failed request, miss or value of another\n"
            "                     length makes the run INVALID\n"
            "  --op get|set|fill  cache: gets (default), puts of P-byte values without TTL,\n"
            "                     or fill: put K distinct keys once into a new cache and\n"
            "                     report the broker's RSS growth per entry (needs --server\n"
            "                     and --broker-pid; --admin also checks none was evicted)\n"
            "  --clients C        cache: closed-loop clients (default 50)\n"
            "  --pipeline N       cache: requests in flight per client (default 1)\n"
            "  --connections N    cache: fx_clients (QUIC connections) the clients share,\n"
            "                     client i on connection i mod N (default C, at most 8)\n"
            "  --keys K           cache: key space (default 10000)\n"
            "                     e.g. felix-bench --mode cache --op get --clients 50\n"
            "                          --pipeline 16 --payload 1024 --min-seconds 10\n"
            "  --dir DIR          fsync-probe: where the probe files go (needed; removed\n"
            "                     after); other modes: the in-process broker's durable\n"
            "                     storage root, every stream durable (durable_default,\n"
            "                     the other durable settings at their defaults)\n"
            "  --records N        fsync-probe: records appended at least (default 200000)\n"
            "  --sync-every K     fsync-probe: records per fdatasync (default 64)\n"
            "  --payload P        bytes per message, >= 16 (default 1024)\n"
            "  --fanout F         subscriber connections, one thread each (default 1)\n"
            "  --batch B          messages per publish call (default 1: fx_publish, one\n"
            "                     (group: the backlog's preload)\n"
            "                     message per call as the peers publish; B > 1:\n"
            "                     fx_publish_batch of B messages)\n"
            "  --streams S        spread messages over S streams (default 1)\n"
            "  --warmup W         unmeasured messages (default 2000; latency 500)\n"
            "  --total N          throughput: measured messages at least (default: 128 MiB\n"
            "                     delivered, and the run-length guard's minimum);\n"
            "                     latency: round trips (default 20000)\n"
            "  --min-seconds S    throughput/overload/isolation/replay: measured seconds at\n"
            "                     least (default 5; isolation: per phase); fsync-probe:\n"
            "                     the grouped phase lasts at least this long (default 0)\n"
            "  --max-seconds S    hard bound of the publish loop (default 60)\n"
            "  --runs K           repeat K times; the human table ends with medians\n"
            "  --ack              latency: acknowledged publishes (per message);\n"
            "                     throughput: acked publishing without subscribers:\n"
            "                     acked msg/s and ack latency p50/p99 (call to answer)\n"
            "  --publishers N     throughput --ack: N threads sharing one client (default 1)\n"
            "  --window W         throughput --ack: 0 (default) each thread makes one\n"
            "                     blocking fx_publish at a time; W: fx_publish_async,\n"
            "                     W in flight per thread\n"
            "  --rate R           latency: start at most R round trips per second (a fixed\n"
            "                     low rate; default: back to back); group live: publish at\n"
            "                     most R records per second\n"
            "  --subs N           idle-subs: N subscriptions on one stream, 1000 per client\n"
            "                     (needs --server, --broker-pid and --admin; default 10000)\n"
            "  --rss-watch S      overload: the broker's VmRSS every second for S seconds,\n"
            "                     from 10 s in (needs --broker-pid; lengthens the run)\n"
            "  --victim-delay-ms MS       isolation: the victim's client holds each datagram\n"
            "                     it receives MS ms (default 200)\n"
            "  --victim-drop-permille N   isolation: and drops N per thousand of the\n"
            "                     datagrams it sends and receives (default 50)\n"
            "  --callback         deliver by callback on the client loop\n"
            "  --idempotent       an idempotent client (fx_client_opts.idempotent): every\n"
            "                     acked publish carries a producer sequence\n"
            "  --no-redirect      clients do not offer FEATURE_REDIRECT (fx_client_opts.\n"
            "                     no_redirect): at a cluster node that does not own the\n"
            "                     stream the subscribers are served from its mirror\n"
            "  --server ADDR      external broker host:port (default: in-process broker)\n"
            "  --sub-server ADDR  the subscribers connect there instead (two nodes of a\n"
            "                     cluster: publish at one, subscribe at another)\n"
            "  --pin HEX          external broker's certificate SHA-256 (or --insecure)\n"
            "  --admin ADDR       external broker's admin host:port (drop counters)\n"
            "  --broker-pid PID   external broker's pid (CPU, peak RSS, wakeups)\n"
            "  --workers N --core-shards N   in-process broker placement\n"
            "  --mtu BYTES        pin the clients' datagram size (and the in-process broker's;\n"
            "                     start an external one with loopback_mtu=BYTES)\n"
            "  --json             one JSON line per run (peerbench field names)\n"
            "  libfelix's FELIX_* variables apply to the clients, e.g.\n"
            "  FELIX_PUBLISH_COALESCE=0 (one frame per publish call: the broker's\n"
            "  per-frame path) and FELIX_PUBLISH_LINGER_US\n"
            "  --label L --quiet  label for JSON lines; no progress line\n"
            "  --test-drop-every N  test only: readers discard every Nth message\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

enum {
    O_MODE = 256,
    O_PAYLOAD,
    O_FANOUT,
    O_BATCH,
    O_STREAMS,
    O_WARMUP,
    O_TOTAL,
    O_MINS,
    O_MAXS,
    O_RUNS,
    O_ACK,
    O_CB,
    O_IDEM,
    O_NO_REDIRECT,
    O_SUB_SERVER,
    O_SERVER,
    O_PIN,
    O_INSECURE,
    O_ADMIN,
    O_PID,
    O_WORKERS,
    O_SHARDS,
    O_MTU,
    O_JSON,
    O_LABEL,
    O_QUIET,
    O_DROP,
    O_SUBS,
    O_WATCH,
    O_VDELAY,
    O_VDROP,
    O_PUBLISHERS,
    O_WINDOW,
    O_RATE,
    O_DIR,
    O_RECORDS,
    O_SYNC_EVERY,
    O_GROUP_CELL,
    O_CONSUMERS,
    O_COUNT,
    O_ACK_WAIT,
    O_OP,
    O_CLIENTS,
    O_PIPELINE,
    O_CONNECTIONS,
    O_KEYS,
    O_HELP,
};

static const struct option LONG_OPTS[] = {
    {"mode", 1, 0, O_MODE},
    {"payload", 1, 0, O_PAYLOAD},
    {"fanout", 1, 0, O_FANOUT},
    {"batch", 1, 0, O_BATCH},
    {"streams", 1, 0, O_STREAMS},
    {"warmup", 1, 0, O_WARMUP},
    {"total", 1, 0, O_TOTAL},
    {"min-seconds", 1, 0, O_MINS},
    {"max-seconds", 1, 0, O_MAXS},
    {"runs", 1, 0, O_RUNS},
    {"ack", 0, 0, O_ACK},
    {"callback", 0, 0, O_CB},
    {"idempotent", 0, 0, O_IDEM},
    {"no-redirect", 0, 0, O_NO_REDIRECT},
    {"sub-server", 1, 0, O_SUB_SERVER},
    {"server", 1, 0, O_SERVER},
    {"pin", 1, 0, O_PIN},
    {"insecure", 0, 0, O_INSECURE},
    {"admin", 1, 0, O_ADMIN},
    {"broker-pid", 1, 0, O_PID},
    {"workers", 1, 0, O_WORKERS},
    {"core-shards", 1, 0, O_SHARDS},
    {"mtu", 1, 0, O_MTU},
    {"json", 0, 0, O_JSON},
    {"label", 1, 0, O_LABEL},
    {"quiet", 0, 0, O_QUIET},
    {"test-drop-every", 1, 0, O_DROP},
    {"subs", 1, 0, O_SUBS},
    {"rss-watch", 1, 0, O_WATCH},
    {"victim-delay-ms", 1, 0, O_VDELAY},
    {"victim-drop-permille", 1, 0, O_VDROP},
    {"publishers", 1, 0, O_PUBLISHERS},
    {"window", 1, 0, O_WINDOW},
    {"rate", 1, 0, O_RATE},
    {"dir", 1, 0, O_DIR},
    {"records", 1, 0, O_RECORDS},
    {"sync-every", 1, 0, O_SYNC_EVERY},
    {"group-cell", 1, 0, O_GROUP_CELL},
    {"consumers", 1, 0, O_CONSUMERS},
    {"count", 1, 0, O_COUNT},
    {"ack-wait-ms", 1, 0, O_ACK_WAIT},
    {"op", 1, 0, O_OP},
    {"clients", 1, 0, O_CLIENTS},
    {"pipeline", 1, 0, O_PIPELINE},
    {"connections", 1, 0, O_CONNECTIONS},
    {"keys", 1, 0, O_KEYS},
    {"help", 0, 0, O_HELP},
    {0, 0, 0, 0},
};

static int parse_mode(const char *s, fx_bench_mode *m)
{
    for (int i = 0; i < NMODES; i++)
        if (strcmp(s, MODE_NAMES[i]) == 0) {
            *m = (fx_bench_mode)i;
            return 0;
        }
    return -1;
}

/* Applies one numeric option. Returns 0 or -1 (bad value). */
static int parse_num(opts *o, int c, const char *arg)
{
    uint64_t v;
    double d;
    switch (c) {
    case O_PAYLOAD:
        return parse_u64(arg, FX_BENCH_HDR, FX_BENCH_PAYLOAD_MAX, &v) ? -1 : (o->c.payload = v, 0);
    case O_FANOUT:
        o->fanout_set = true;
        return parse_u64(arg, 1, 1024, &v) ? -1 : (o->c.fanout = (uint32_t)v, 0);
    case O_BATCH:
        o->batch_set = true;
        return parse_u64(arg, 1, 4096, &v) ? -1 : (o->c.batch = (uint32_t)v, 0);
    case O_PUBLISHERS:
        o->acked_set = true;
        return parse_u64(arg, 1, 1024, &v) ? -1 : (o->c.publishers = (uint32_t)v, 0);
    case O_WINDOW: /* throughput --ack, or group (finish_cfg tells) */
        o->window_set = true;
        return parse_u64(arg, 0, 65536, &v) ? -1 : (o->c.window = (uint32_t)v, 0);
    case O_CONSUMERS:
        return parse_u64(arg, 1, FX_BENCH_GROUP_CONSUMERS_MAX, &v)
                   ? -1
                   : (o->c.consumers = (uint32_t)v, 0);
    case O_COUNT: /* a stream ring holds at most 2^24 records (log_capacity) */
        return parse_u64(arg, 1, 1u << 24, &o->c.group_count);
    case O_ACK_WAIT:
        return parse_u64(arg, 1, 600000, &v) ? -1 : (o->c.ack_wait_ms = (uint32_t)v, 0);
    case O_CLIENTS:
        return parse_u64(arg, 1, 10000, &v) ? -1 : (o->c.clients = (uint32_t)v, 0);
    case O_PIPELINE:
        return parse_u64(arg, 1, 1024, &v) ? -1 : (o->c.pipeline = (uint32_t)v, 0);
    case O_CONNECTIONS:
        o->conns_set = true;
        return parse_u64(arg, 1, 256, &v) ? -1 : (o->c.connections = (uint32_t)v, 0);
    case O_KEYS:
        return parse_u64(arg, 1, 100000000, &o->c.keys);
    case O_RATE:
        return parse_u64(arg, 1, 1000000, &v) ? -1 : (o->c.rate = (uint32_t)v, 0);
    case O_RECORDS:
        o->probe_set = true;
        return parse_u64(arg, 1, 1000000000000ull, &o->c.probe_records);
    case O_SYNC_EVERY:
        o->probe_set = true;
        return parse_u64(arg, 1, 65536, &v) ? -1 : (o->c.sync_every = (uint32_t)v, 0);
    case O_STREAMS:
        return parse_u64(arg, 1, 64, &v) ? -1 : (o->c.streams = (uint32_t)v, 0);
    case O_WARMUP:
        o->warmup_set = true;
        return parse_u64(arg, 0, 100000000, &o->c.warmup);
    case O_TOTAL:
        o->total_set = true;
        return parse_u64(arg, 1, 1000000000, &o->c.total);
    case O_RUNS:
        return parse_u64(arg, 1, MAX_RUNS, &v) ? -1 : (o->runs = (int)v, 0);
    case O_PID:
        return parse_u64(arg, 1, 1u << 30, &v) ? -1 : (o->c.broker_pid = (int)v, 0);
    case O_WORKERS:
        return parse_u64(arg, 1, 64, &v) ? -1 : (o->workers = (uint32_t)v, 0);
    case O_SHARDS:
        return parse_u64(arg, 0, 64, &v) ? -1 : (o->core_shards = (uint32_t)v, 0);
    case O_MTU:
        return parse_u64(arg, 1200, 65507, &v) ? -1 : (o->mtu = (uint32_t)v, 0);
    case O_DROP:
        return parse_u64(arg, 1, UINT32_MAX, &o->c.drop_every);
    case O_SUBS:
        return parse_u64(arg, 1, 1000000, &o->c.subs);
    case O_WATCH:
        return parse_u64(arg, 1, 3600, &v) ? -1 : (o->c.watch_s = (uint32_t)v, 0);
    case O_VDELAY:
        o->victim_set = true;
        return parse_u64(arg, 0, 60000, &v) ? -1 : (o->c.victim_delay_ms = (uint32_t)v, 0);
    case O_VDROP:
        o->victim_set = true;
        return parse_u64(arg, 0, 1000, &v) ? -1 : (o->c.victim_drop_permille = (uint32_t)v, 0);
    case O_MINS:
    case O_MAXS:
        o->mins_set |= c == O_MINS;
        o->maxs_set |= c == O_MAXS;
        d = strtod(arg, NULL);
        if (!(d > 0 && d <= 3600))
            return -1;
        *(c == O_MINS ? &o->c.min_seconds : &o->c.max_seconds) = d;
        return 0;
    default:
        return -1;
    }
}

static const char *opt_name(int code)
{
    for (const struct option *p = LONG_OPTS; p->name; p++)
        if (p->val == code)
            return p->name;
    return "?";
}

/* Returns 0, 1 (help printed) or 2 (usage error, reported). */
static int parse_args(int argc, char **argv, opts *o)
{
    int c;
    while ((c = getopt_long(argc, argv, "h", LONG_OPTS, NULL)) != -1) {
        int bad = 0;
        if (c >= O_MODE && c < O_MODE + 64)
            o->seen |= 1ull << (c - O_MODE);
        switch (c) {
        case O_MODE:
            bad = parse_mode(optarg, &o->c.mode);
            break;
        case O_GROUP_CELL:
            bad = fx_bench_gcell_parse(optarg, &o->c.group_cell);
            break;
        case O_OP:
            bad = fx_bench_cache_op_parse(optarg, &o->c.cache_op);
            break;
        case O_ACK:
            o->c.ack = true;
            break;
        case O_CB:
            o->c.callback = true;
            break;
        case O_IDEM:
            o->c.idempotent = true;
            break;
        case O_NO_REDIRECT:
            o->c.no_redirect = true;
            break;
        case O_SUB_SERVER:
            o->c.sub_server = optarg;
            break;
        case O_SERVER:
            o->c.server = optarg;
            break;
        case O_PIN:
            o->c.pin = optarg;
            break;
        case O_INSECURE:
            o->c.insecure = true;
            break;
        case O_ADMIN:
            o->c.admin = optarg;
            break;
        case O_DIR:
            bad = optarg[0] == '\0';
            o->c.dir = optarg;
            break;
        case O_JSON:
            o->json = true;
            break;
        case O_LABEL:
            o->label = optarg;
            break;
        case O_QUIET:
            o->c.progress = false;
            break;
        case O_HELP:
        case 'h':
            usage(stdout);
            return 1;
        case '?':
            return 2;
        default:
            bad = parse_num(o, c, optarg);
            break;
        }
        if (bad) {
            fprintf(stderr, "felix-bench: bad value for --%s: '%s' (try --help)\n", opt_name(c),
                    optarg ? optarg : "");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "felix-bench: unexpected argument '%s' (try --help)\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* ---- configuration checks and the run-length guard ------------------------------- */

/* The buffering of the lossless profile with the defaults of broker.h,
 * felix.h and quic.h (the external broker is assumed to use them too;
 * the credit window caps the result anyway). */
static uint64_t bufferable_of(const fx_bench_cfg *c)
{
    fx_broker_opts bo;
    fx_broker_opts_default(&bo);
    fx_client_opts co;
    fx_client_opts_init(&co);
    uint64_t ingress = bo.pub_conn_inflight_bytes < bo.pub_inflight_bytes
                           ? bo.pub_conn_inflight_bytes
                           : bo.pub_inflight_bytes;
    fx_bench_buffers b = {
        .client_publish_budget = co.publish_inflight_bytes,
        .broker_ingress_bytes = ingress,
        .broker_worker_queue = bo.pub_queue_depth,
        .sub_queue_batches = bo.subscriber_queue_capacity,
        .lane_queue_batches = bo.subscriber_lane_queue_depth,
        .sub_unacked_bytes = bo.subscriber_unacked_bytes,
        .sub_recv_window = bo.quic.max_stream_window,
        .client_sub_queue_batches = co.sub_queue_capacity,
        .batch_bytes_max = bo.event_batch_max_bytes,
    };
    return fx_bench_bufferable(&b, c->payload, c->batch, c->fanout);
}

#define SEEN(o) (1ull << ((o)-O_MODE))

/* The options fsync-probe takes: it runs no broker and publishes nothing. */
static const uint64_t PROBE_OPTS = SEEN(O_MODE) | SEEN(O_PAYLOAD) | SEEN(O_MINS) | SEEN(O_MAXS) |
                                   SEEN(O_RUNS) | SEEN(O_JSON) | SEEN(O_LABEL) | SEEN(O_QUIET) |
                                   SEEN(O_DIR) | SEEN(O_RECORDS) | SEEN(O_SYNC_EVERY);

/* fsync-probe: --dir is a directory, a group fits one probe file, and no
 * option of the broker modes was given. Returns 0 or 2. */
static int finish_probe(opts *o)
{
    fx_bench_cfg *c = &o->c;
    uint64_t extra = o->seen & ~PROBE_OPTS;
    if (extra) {
        fprintf(stderr,
                "felix-bench: fsync-probe runs no broker and publishes nothing: --%s "
                "does not apply (it takes --dir, --records, --sync-every, --payload, "
                "--min-seconds, --max-seconds, --runs, --json, --label, --quiet)\n",
                opt_name(O_MODE + __builtin_ctzll(extra)));
        return 2;
    }
    if (c->dir == NULL) {
        fprintf(stderr, "felix-bench: fsync-probe needs --dir DIR (a directory on the disk to "
                        "measure)\n");
        return 2;
    }
    struct stat st;
    const char *why = stat(c->dir, &st) != 0 ? strerror(errno)
                      : !S_ISDIR(st.st_mode) ? "not a directory"
                                             : NULL;
    if (why != NULL) {
        fprintf(stderr, "felix-bench: --dir %s: %s\n", c->dir, why);
        return 2;
    }
    if ((c->payload + FX_BENCH_REC_HEADER) * (uint64_t)c->sync_every > FX_BENCH_PROBE_FILE_BYTES) {
        fprintf(stderr,
                "felix-bench: --sync-every %u records of %zu bytes do not fit one "
                "%llu MiB probe file\n",
                c->sync_every, c->payload + FX_BENCH_REC_HEADER,
                (unsigned long long)(FX_BENCH_PROBE_FILE_BYTES >> 20));
        return 2;
    }
    if (!o->mins_set)
        c->min_seconds = 0;
    if (c->max_seconds < c->min_seconds) {
        fprintf(stderr, "felix-bench: --max-seconds is below --min-seconds\n");
        return 2;
    }
    return 0;
}

/* replay: one subscriber on one stream that must be durable. Returns 0 or 2. */
static int finish_replay(opts *o)
{
    fx_bench_cfg *c = &o->c;
    if (c->fanout != 1 || c->streams != 1 || c->callback) {
        fprintf(stderr, "felix-bench: replay measures one subscriber on one stream with "
                        "fx_subscription_next: drop --fanout, --streams and --callback\n");
        return 2;
    }
    if (c->server == NULL && c->dir == NULL) {
        fprintf(stderr, "felix-bench: replay needs a durable stream: --dir DIR (the in-process "
                        "broker's storage), or --server of a broker with durable_storage_dir "
                        "and durable_default\n");
        return 2;
    }
    return 0;
}

/* The options group mode takes besides the connection and output ones. */
static const uint64_t GROUP_ONLY =
    SEEN(O_GROUP_CELL) | SEEN(O_CONSUMERS) | SEEN(O_COUNT) | SEEN(O_ACK_WAIT);
static const uint64_t GROUP_NOT = SEEN(O_FANOUT) | SEEN(O_STREAMS) | SEEN(O_ACK) | SEEN(O_CB) |
                                  SEEN(O_PUBLISHERS) | SEEN(O_SUBS) | SEEN(O_WATCH) |
                                  SEEN(O_VDELAY) | SEEN(O_VDROP) | SEEN(O_DIR) | SEEN(O_DROP) |
                                  SEEN(O_TOTAL) | SEEN(O_RECORDS) | SEEN(O_SYNC_EVERY);

/* Per-cell option checks of group mode. Returns 0 or 2. */
static int group_cell_opts(const opts *o)
{
    const fx_bench_cfg *c = &o->c;
    const char *bad = NULL;
    if (c->group_cell != FX_BENCH_GCELL_BACKLOG && (o->seen & SEEN(O_BATCH)))
        bad = "--batch (the backlog's preload)";
    else if (c->group_cell != FX_BENCH_GCELL_LIVE && (o->seen & SEEN(O_RATE)))
        bad = "--rate (the live publisher)";
    else if (c->group_cell == FX_BENCH_GCELL_LIVE && (o->seen & SEEN(O_COUNT)))
        bad = "--count (backlog and redelivery; live runs --min-seconds)";
    else if (c->group_cell == FX_BENCH_GCELL_REDELIVERY && (o->seen & SEEN(O_CONSUMERS)))
        bad = "--consumers (redelivery has members A and B)";
    if (bad != NULL) {
        fprintf(stderr, "felix-bench: group %s: %s does not apply\n",
                fx_bench_gcell_name(c->group_cell), bad);
        return 2;
    }
    return 0;
}

/* group: defaults per cell and the combination. Returns 0 or 2. */
static int finish_group(opts *o)
{
    fx_bench_cfg *c = &o->c;
    uint64_t extra = o->seen & GROUP_NOT;
    if (extra) {
        fprintf(stderr,
                "felix-bench: group mode: --%s does not apply (it takes --group-cell, "
                "--consumers, --count, --window, --ack-wait-ms, --payload, --batch, --rate, "
                "--warmup, --min-seconds, --max-seconds, --runs and the connection options)\n",
                opt_name(O_MODE + __builtin_ctzll(extra)));
        return 2;
    }
    if (group_cell_opts(o) != 0)
        return 2;
    if (!o->window_set)
        c->window = 256;
    if (c->window == 0) {
        fprintf(stderr, "felix-bench: group: --window must be at least 1\n");
        return 2;
    }
    bool redelivery = c->group_cell == FX_BENCH_GCELL_REDELIVERY;
    c->group_window = c->window;
    c->window = 0;
    if (c->group_count == 0)
        c->group_count = redelivery ? 100 : 1000000;
    if (c->ack_wait_ms == 0)
        c->ack_wait_ms = redelivery ? 1000 : 30000;
    if (c->consumers == 0)
        c->consumers = 4;
    if (!o->warmup_set)
        c->warmup = 2000;
    if (!o->maxs_set)
        c->max_seconds = 600;
    c->fanout = redelivery ? 2 : c->consumers;
    c->streams = 1;
    c->lossless = true;
    uint64_t window = fx_bench_credit_window(c->payload);
    if (c->batch > window)
        c->batch = (uint32_t)window;
    if (c->server && !c->pin && !c->insecure) {
        fprintf(stderr, "felix-bench: --server needs --pin HEX (the fingerprint felix-broker "
                        "prints at start) or --insecure\n");
        return 2;
    }
    return 0;
}

/* The options only cache mode takes, and those it does not. */
static const uint64_t CACHE_ONLY =
    SEEN(O_OP) | SEEN(O_CLIENTS) | SEEN(O_PIPELINE) | SEEN(O_CONNECTIONS) | SEEN(O_KEYS);
static const uint64_t CACHE_NOT =
    SEEN(O_FANOUT) | SEEN(O_BATCH) | SEEN(O_STREAMS) | SEEN(O_TOTAL) | SEEN(O_ACK) | SEEN(O_CB) |
    SEEN(O_PUBLISHERS) | SEEN(O_WINDOW) | SEEN(O_RATE) | SEEN(O_SUBS) | SEEN(O_WATCH) |
    SEEN(O_VDELAY) | SEEN(O_VDROP) | SEEN(O_DIR) | SEEN(O_DROP) | SEEN(O_RECORDS) |
    SEEN(O_SYNC_EVERY) | SEEN(O_GROUP_CELL) | SEEN(O_CONSUMERS) | SEEN(O_COUNT) |
    SEEN(O_ACK_WAIT) | SEEN(O_IDEM);

/* cache: defaults and the combination. Returns 0 or 2. */
static int finish_cache(opts *o)
{
    fx_bench_cfg *c = &o->c;
    uint64_t extra = o->seen & CACHE_NOT;
    if (extra) {
        fprintf(stderr,
                "felix-bench: cache mode: --%s does not apply (it takes --op, --clients, "
                "--pipeline, --connections, --keys, --payload, --warmup, --min-seconds, "
                "--max-seconds, --runs and the connection options)\n",
                opt_name(O_MODE + __builtin_ctzll(extra)));
        return 2;
    }
    bool fill = c->cache_op == FX_BENCH_CACHE_FILL;
    if (fill && (o->seen & (SEEN(O_PIPELINE) | SEEN(O_MINS) | SEEN(O_WARMUP)))) {
        fprintf(stderr, "felix-bench: cache fill puts each key once with --clients requests in "
                        "flight: --pipeline, --min-seconds and --warmup do not apply\n");
        return 2;
    }
    if (fill && (c->server == NULL || c->broker_pid == 0)) {
        fprintf(stderr, "felix-bench: cache fill measures an external broker's RSS: it needs "
                        "--server and --broker-pid (and --admin to check nothing was "
                        "evicted)\n");
        return 2;
    }
    if (c->clients == 0)
        c->clients = 50;
    if (c->pipeline == 0)
        c->pipeline = 1;
    if (c->keys == 0)
        c->keys = 10000;
    if (!o->conns_set)
        c->connections =
            c->clients < CACHE_CONNECTIONS_DEFAULT_MAX ? c->clients : CACHE_CONNECTIONS_DEFAULT_MAX;
    if (c->connections > c->clients) {
        fprintf(stderr, "felix-bench: cache: --connections %u is more than --clients %u\n",
                c->connections, c->clients);
        return 2;
    }
    if (!o->warmup_set)
        c->warmup = fill ? 0 : 2000;
    if (fill && !o->maxs_set)
        c->max_seconds = 600;
    if (c->max_seconds < c->min_seconds) {
        fprintf(stderr, "felix-bench: --max-seconds is below --min-seconds\n");
        return 2;
    }
    c->fanout = 0;
    c->streams = 0;
    c->batch = 0;
    if (c->server && !c->pin && !c->insecure) {
        fprintf(stderr, "felix-bench: --server needs --pin HEX (the fingerprint felix-broker "
                        "prints at start) or --insecure\n");
        return 2;
    }
    return 0;
}

/* Fills mode defaults and checks the combination. Returns 0 or 2. */
static int finish_cfg(opts *o)
{
    fx_bench_cfg *c = &o->c;
    if (c->mode == FX_BENCH_CACHE)
        return finish_cache(o);
    if (o->seen & CACHE_ONLY) {
        fprintf(stderr, "felix-bench: --op, --clients, --pipeline, --connections and --keys "
                        "need --mode cache\n");
        return 2;
    }
    if (c->mode == FX_BENCH_GROUP)
        return finish_group(o);
    if (o->seen & GROUP_ONLY) {
        fprintf(stderr, "felix-bench: --group-cell, --consumers, --count and --ack-wait-ms need "
                        "--mode group\n");
        return 2;
    }
    if (c->mode == FX_BENCH_FSYNC_PROBE)
        return finish_probe(o);
    if (o->probe_set) {
        fprintf(stderr, "felix-bench: --records and --sync-every need --mode fsync-probe\n");
        return 2;
    }
    if (c->dir != NULL && c->server != NULL) {
        fprintf(stderr, "felix-bench: --dir configures the in-process broker's durable storage; "
                        "start an external broker with durable_storage_dir and "
                        "durable_default instead\n");
        return 2;
    }
    if (c->mode == FX_BENCH_REPLAY && finish_replay(o) != 0)
        return 2;
    if (!o->warmup_set)
        c->warmup = c->mode == FX_BENCH_LATENCY ? 500 : 2000;
    if (c->mode == FX_BENCH_OVERLOAD && c->fanout < 2) {
        fprintf(stderr, "felix-bench: overload needs --fanout >= 2 (one subscriber stalls)\n");
        return 2;
    }
    if (c->mode == FX_BENCH_ISOLATION && c->fanout < 2) {
        fprintf(stderr, "felix-bench: isolation needs --fanout >= 2 (subscriber F-1 is the "
                        "victim; the others are measured)\n");
        return 2;
    }
    bool acked = c->mode == FX_BENCH_THROUGHPUT && c->ack;
    if ((o->acked_set || o->window_set) && !acked) {
        fprintf(stderr, "felix-bench: --publishers and --window need --mode throughput --ack\n");
        return 2;
    }
    if (c->ack && c->mode != FX_BENCH_THROUGHPUT && c->mode != FX_BENCH_LATENCY) {
        fprintf(stderr, "felix-bench: --ack applies to the latency and throughput modes\n");
        return 2;
    }
    if (acked && (o->fanout_set || (o->batch_set && c->batch != 1))) {
        fprintf(stderr, "felix-bench: throughput --ack measures acked publishing (one message "
                        "per call, no subscribers): drop --fanout and --batch\n");
        return 2;
    }
    if (c->rate && c->mode != FX_BENCH_LATENCY) {
        fprintf(stderr, "felix-bench: --rate needs --mode latency\n");
        return 2;
    }
    if (o->victim_set && c->mode != FX_BENCH_ISOLATION) {
        fprintf(stderr, "felix-bench: --victim-delay-ms and --victim-drop-permille need --mode "
                        "isolation\n");
        return 2;
    }
    if (c->mode == FX_BENCH_IDLE_SUBS && (!c->server || !c->broker_pid || !c->admin)) {
        fprintf(stderr, "felix-bench: idle-subs measures an external broker: it needs --server, "
                        "--broker-pid and --admin\n");
        return 2;
    }
    if (c->watch_s && (c->mode != FX_BENCH_OVERLOAD || !c->broker_pid)) {
        fprintf(stderr, "felix-bench: --rss-watch needs --mode overload and --broker-pid\n");
        return 2;
    }
    if (c->watch_s) { /* the run outlasts the watch: 10 s, then one sample a second */
        double need = 10.0 + c->watch_s + 1.0;
        if (c->min_seconds < need)
            c->min_seconds = need;
        if (c->max_seconds < c->min_seconds + 30)
            c->max_seconds = c->min_seconds + 30;
    }
    if (c->server && !c->pin && !c->insecure) {
        fprintf(stderr, "felix-bench: --server needs --pin HEX (the fingerprint felix-broker "
                        "prints at start) or --insecure\n");
        return 2;
    }
    c->lossless = c->mode != FX_BENCH_OVERLOAD && c->mode != FX_BENCH_ISOLATION;
    if (acked) {
        c->fanout = 0; /* no subscribers: no credit window or run-length guard */
        return 0;
    }
    uint64_t window = fx_bench_credit_window(c->payload);
    if (c->batch > window)
        c->batch = (uint32_t)window;
    /* Overload and isolation measure the default (shedding) profile. */
    c->lossless = c->mode != FX_BENCH_OVERLOAD && c->mode != FX_BENCH_ISOLATION;
    c->bufferable = bufferable_of(c);
    if (c->mode == FX_BENCH_IDLE_SUBS)
        return 0;
    if (c->mode == FX_BENCH_LATENCY) {
        if (!o->total_set)
            c->total = 20000;
        return 0;
    }
    uint64_t min_total = fx_bench_guard_min_total(c->bufferable, c->payload, c->fanout);
    if (!o->total_set) {
        uint64_t peer = ((128ull << 20) + c->payload * c->fanout - 1) / (c->payload * c->fanout);
        c->total = peer > min_total ? peer : min_total;
    }
    char why[256];
    if ((c->mode == FX_BENCH_THROUGHPUT || c->mode == FX_BENCH_REPLAY) &&
        !fx_bench_guard_ok(c->total, c->min_seconds, c->bufferable, c->payload, c->fanout, why,
                           sizeof(why))) {
        fprintf(stderr, "felix-bench: refusing the run: %s\n", why);
        return 2;
    }
    return 0;
}

/* ---- in-process broker ------------------------------------------------------------ */

typedef struct inproc {
    fx_broker *b;
    char dir[64];
    char addr[32];
    char pin[72];
} inproc;

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char path[320];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (unlink(path) != 0)
                fprintf(stderr, "felix-bench: cannot remove %s: %s\n", path, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(dir) != 0)
        fprintf(stderr, "felix-bench: cannot remove %s: %s\n", dir, strerror(errno));
}

static void profile(const opts *o, fx_broker_opts *bo)
{
    bo->workers = o->core_shards ? o->core_shards : o->workers;
    if (bo->workers == 0) /* the daemon's `workers: auto` */
        bo->workers = fx_placement_auto_workers(sysconf(_SC_NPROCESSORS_ONLN));
    bo->pin_workers = o->core_shards > 0;
    /* The daemon's datagram defaults (loopback_mtu pinned for 127.0.0.1,
     * PMTUD elsewhere) unless --mtu pins one size. */
    if (o->mtu) {
        bo->quic.initial_mtu = bo->quic.mtu_upper_bound = o->mtu;
        bo->quic.loopback_mtu = o->mtu;
    }
    if (o->c.lossless) {
        bo->subscriber_queue_policy = FX_QUEUE_BLOCK;
        bo->subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
        bo->pub_ingress_wait = true;
    }
}

/* group: the stream's ring holds the whole backlog (or the live run's
 * credit window) with room to spare, and no retained-bytes limit evicts it,
 * as bench/groups.sh starts an external broker. */
static void group_ring(const fx_bench_cfg *c, fx_broker_opts *bo)
{
    uint64_t n = c->group_count + fx_bench_credit_window(c->payload) + 1024;
    if (n > (1u << 24))
        n = 1u << 24;
    if (bo->log_capacity < n)
        bo->log_capacity = (uint32_t)n;
    uint64_t bytes = n * (c->payload + 64);
    if (bo->log_capacity_bytes < bytes)
        bo->log_capacity_bytes = bytes;
    bo->retained_bytes_limit = 0;
    bo->tenant_retained_bytes = 0;
}

static int inproc_start(const opts *o, inproc *ip)
{
    snprintf(ip->dir, sizeof(ip->dir), "/tmp/felix-bench-XXXXXX");
    if (mkdtemp(ip->dir) == NULL)
        return -errno;
    fx_broker_opts bo;
    fx_broker_opts_default(&bo);
    bo.quic.state_dir = ip->dir;
    profile(o, &bo);
    if (o->c.mode == FX_BENCH_GROUP)
        group_ring(&o->c, &bo);
    if (o->c.dir != NULL) { /* every stream durable, the durable settings' defaults */
        bo.durable.dir = o->c.dir;
        bo.durable.durable_default = true;
    }
    int rv = fx_broker_new(&ip->b, &bo);
    if (rv == 0 && (rv = fx_broker_start(ip->b)) != 0) {
        fx_broker_free(ip->b);
        ip->b = NULL;
    }
    if (rv != 0) {
        remove_dir(ip->dir);
        return rv;
    }
    snprintf(ip->addr, sizeof(ip->addr), "127.0.0.1:%u", (unsigned)fx_broker_port(ip->b));
    snprintf(ip->pin, sizeof(ip->pin), "%s", fx_broker_fingerprint(ip->b));
    return 0;
}

static void inproc_stop(inproc *ip)
{
    if (ip->b == NULL)
        return;
    fx_broker_free(ip->b);
    remove_dir(ip->dir);
}

/* ---- output ---------------------------------------------------------------------- */

/* Prints "name":value, or null for NaN. */
static void jnum(const char *name, double v, int prec)
{
    if (isnan(v) || isinf(v))
        printf("\"%s\":null,", name);
    else
        printf("\"%s\":%.*f,", name, prec, v);
}

/* Prints "name":"s", escaping quotes, backslashes and control bytes. */
static void jstr(const char *name, const char *s)
{
    printf("\"%s\":\"", name);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    printf("\",");
}

static void json_common(const opts *o, const fx_bench_result *r, int run)
{
    const fx_bench_cfg *c = &o->c;
    printf("{\"tool\":\"felix-bench\",\"label\":\"%s\",\"backend\":\"felix\",\"tls\":true,",
           o->label ? o->label : "");
    printf("\"mode\":\"%s\",\"payload\":%zu,\"fanout\":%u,\"streams\":%u,\"batch\":%u,"
           "\"warmup\":%llu,\"sent_measured\":%llu,\"expected\":%llu,\"delivered\":%llu,"
           "\"lost\":%llu,\"dups\":%llu,\"errors\":%llu,\"valid\":%s,",
           MODE_NAMES[c->mode], c->payload, c->fanout, c->streams,
           c->mode == FX_BENCH_LATENCY ? 1u : c->batch, (unsigned long long)c->warmup,
           (unsigned long long)r->t.sent_measured, (unsigned long long)r->t.expected,
           (unsigned long long)r->t.delivered, (unsigned long long)r->t.lost,
           (unsigned long long)r->t.dups, (unsigned long long)r->t.errors,
           r->valid ? "true" : "false");
    if (!r->valid)
        jstr("invalid_reason", r->why);
    printf("\"broker\":\"%s\",\"broker_mtu\":%u,\"run\":%d,",
           c->in_process ? "in-process" : "external", o->mtu, run);
}

static void json_tail(const opts *o, const fx_bench_result *r)
{
    jnum("run_s", r->run_s, 3);
    jnum("client_user_s", r->client_user_s, 3);
    jnum("client_sys_s", r->client_sys_s, 3);
    jnum("client_vcsw_per_msg", r->client_vcsw_per_msg, 3);
    if (r->have_server) {
        printf("\"server_pid\":%d,", o->c.broker_pid);
        jnum("server_user_s", r->server_user_s, 3);
        jnum("server_sys_s", r->server_sys_s, 3);
        jnum("server_cpu_pct", 100.0 * (r->server_user_s + r->server_sys_s) / r->run_s, 1);
        jnum("server_vcsw_per_msg", r->server_vcsw_per_msg, 3);
        printf("\"peak_rss_kb\":%llu,\"broker_hwm_kb\":%llu,", (unsigned long long)r->peak_rss_kb,
               (unsigned long long)r->hwm_kb);
    }
    if (r->broker_dgram_bytes > 0)
        jnum("broker_dgram_bytes", r->broker_dgram_bytes, 0);
    jnum("host_busy_cpu_s", r->host_busy_s, 3);
    /* CPU the host spent outside this process and the broker: foreign load. */
    if (r->have_server || o->c.in_process)
        jnum("other_cpu_s",
             r->host_busy_s - r->client_user_s - r->client_sys_s -
                 (r->have_server ? r->server_user_s + r->server_sys_s : 0),
             3);
    printf("\"ncpu\":%ld}\n", sysconf(_SC_NPROCESSORS_ONLN));
}

static void json_lat(const fx_bench_lat *l)
{
    printf("\"samples\":%zu,\"samples_unkept\":%llu,", l->n, (unsigned long long)l->unkept);
    jnum("p50_us", l->p50_us, 1);
    jnum("p90_us", l->p90_us, 1);
    jnum("p99_us", l->p99_us, 1);
    jnum("p999_us", l->p999_us, 1);
    jnum("max_us", l->max_us, 1);
    jnum("mean_us", l->mean_us, 1);
}


static void print_probe_json(const opts *o, const fx_bench_result *r, int run)
{
    const fx_bench_cfg *c = &o->c;
    printf("{\"tool\":\"felix-bench\",\"label\":\"%s\",\"backend\":\"disk\","
           "\"mode\":\"fsync-probe\",",
           o->label ? o->label : "");
    jstr("dir", c->dir);
    printf("\"fs_magic\":\"0x%lx\",\"payload\":%zu,\"record_bytes\":%zu,\"sync_every\":%u,"
           "\"records\":%llu,\"syncs\":%llu,\"valid\":%s,",
           (unsigned long)r->fs_magic, c->payload, c->payload + FX_BENCH_REC_HEADER, c->sync_every,
           (unsigned long long)r->probe_records, (unsigned long long)r->probe_syncs,
           r->valid ? "true" : "false");
    if (!r->valid)
        jstr("invalid_reason", r->why);
    printf("\"run\":%d,", run);
    jnum("window_s", r->window_s, 4);
    jnum("records_per_s", r->msgs_per_s, 0);
    jnum("mb_per_s", r->mb_per_s, 2);
    printf("\"fdatasync_samples\":%zu,", r->lat.n);
    jnum("fdatasync_p50_us", r->lat.p50_us, 1);
    jnum("fdatasync_p99_us", r->lat.p99_us, 1);
    jnum("fdatasync_max_us", r->lat.max_us, 1);
    printf("\"single_samples\":%zu,", r->single_lat.n);
    jnum("single_fdatasync_p50_us", r->single_lat.p50_us, 1);
    jnum("single_fdatasync_p99_us", r->single_lat.p99_us, 1);
    jnum("single_fdatasync_max_us", r->single_lat.max_us, 1);
    printf("\"ncpu\":%ld}\n", sysconf(_SC_NPROCESSORS_ONLN));
    fflush(stdout);
}

static void print_replay_json(const fx_bench_cfg *c, const fx_bench_result *r)
{
    printf("\"replay_msgs\":%llu,\"replay_gaps\":%llu,\"replay_dups\":%llu,"
           "\"replay_offset_jumps\":%llu,",
           (unsigned long long)r->replay_msgs, (unsigned long long)r->replay_gaps,
           (unsigned long long)r->replay_dups, (unsigned long long)r->replay_offset_gaps);
    if (r->replay_disk_records == UINT64_MAX)
        printf("\"replay_disk_records\":null,");
    else
        printf("\"replay_disk_records\":%llu,", (unsigned long long)r->replay_disk_records);
    jnum("replay_s", r->replay_s, 4);
    jnum("replay_first_ms", r->replay_first_ms, 2);
    jnum("replay_msgs_per_s", r->replay_msgs_per_s, 0);
    jnum("replay_mb_per_s", r->replay_msgs_per_s * (double)c->payload / 1e6, 2);
    jnum("replay_vs_live", r->replay_vs_live, 4);
}

/* Overload: the loss account of every subscriber (fx_bench_loss) and its
 * totals; "loss_exact" says each subscriber's missed equals its counted. */
static void json_loss(const fx_bench_result *r)
{
    printf("\"loss_accounted\":%s,\"loss_exact\":%s,", r->loss_accounted ? "true" : "false",
           r->loss_exact ? "true" : "false");
    if (!r->loss_accounted)
        jstr("loss_why", r->loss_why);
    printf("\"loss_missed\":%llu,\"loss_counted\":%llu,\"loss_ingress_messages\":%llu,"
           "\"loss_pub_lost\":%llu,\"loss_subs\":[",
           (unsigned long long)r->loss_missed, (unsigned long long)r->loss_counted,
           (unsigned long long)r->loss_ingress_messages, (unsigned long long)r->loss_pub_lost);
    for (uint32_t i = 0; i < r->loss_nsubs; i++) {
        const fx_bench_loss *l = &r->loss_subs[i];
        printf("%s{\"expected\":%llu,\"received\":%llu,\"missed\":%llu,\"client_dropped\":%llu,"
               "\"queue_dropped\":%llu,\"lane_dropped\":%llu,\"upstream\":%llu,\"counted\":%llu}",
               i ? "," : "", (unsigned long long)l->expected, (unsigned long long)l->received,
               (unsigned long long)fx_bench_loss_missed(l), (unsigned long long)l->client_dropped,
               (unsigned long long)l->queue_dropped, (unsigned long long)l->lane_dropped,
               (unsigned long long)l->upstream, (unsigned long long)fx_bench_loss_counted(l));
    }
    printf("],");
}

static void print_json(const opts *o, const fx_bench_result *r, int run)
{
    const fx_bench_cfg *c = &o->c;
    if (c->mode == FX_BENCH_FSYNC_PROBE) {
        print_probe_json(o, r, run);
        return;
    }
    json_common(o, r, run);
    if (c->mode == FX_BENCH_CACHE) {
        fx_bench_cache_json(c, r, jnum);
        json_lat(&r->lat); /* request -> answer (none for fill) */
        json_tail(o, r);
        fflush(stdout);
        return;
    }
    if (c->mode == FX_BENCH_GROUP) {
        fx_bench_group_json(c, r);
        json_tail(o, r);
        fflush(stdout);
        return;
    }
    if (c->mode == FX_BENCH_IDLE_SUBS) {
        printf("\"subs\":%llu,\"sub_clients\":%u,\"rss_idle_kb\":%llu,\"rss_subs_kb\":%llu,",
               (unsigned long long)c->subs, r->sub_clients, (unsigned long long)r->rss_idle_kb,
               (unsigned long long)r->rss_subs_kb);
        jnum("bytes_per_sub", r->bytes_per_sub, 0);
        jnum("subscribe_s", r->subscribe_s, 3);
        json_tail(o, r);
        fflush(stdout);
        return;
    }
    if (c->mode == FX_BENCH_THROUGHPUT && c->ack) {
        printf("\"ack\":true,\"idempotent\":%s,\"publishers\":%u,\"window\":%u,"
               "\"acked\":%llu,\"pub_errors\":%llu,",
               c->idempotent ? "true" : "false", c->publishers, c->window,
               (unsigned long long)r->acked,
               (unsigned long long)r->pub_errors);
        jnum("window_s", r->window_s, 4);
        jnum("msgs_per_s", r->msgs_per_s, 0);
        json_lat(&r->lat); /* ack latency: publish call to answer */
    } else if (c->mode == FX_BENCH_LATENCY) {
        printf("\"ack\":%s,\"delivery\":\"%s\",\"lat_timeouts\":%llu,\"rate\":%u,",
               c->ack ? "true" : "false", c->callback ? "callback" : "next",
               (unsigned long long)r->lat_timeouts, c->rate);
        json_lat(&r->lat);
        jnum("round_trips_per_s", r->round_trips_per_s, 0);
    } else {
        jnum("window_s", r->window_s, 4);
        jnum("msgs_per_s", r->msgs_per_s, 0);
        jnum("mb_per_s", r->mb_per_s, 2);
        jnum("per_sub_msgs_per_s", r->per_sub_msgs_per_s, 0);
        printf("\"per_sub_min_delivered\":%llu,", (unsigned long long)r->per_sub_min_delivered);
        jnum("pub_msgs_per_s", r->pub_msgs_per_s, 0);
        jnum("submit_msgs_per_s", r->submit_msgs_per_s, 0);
        printf("\"credit_window\":%llu,\"window_waits\":%llu,",
               (unsigned long long)r->credit_window, (unsigned long long)r->window_waits);
        jnum("delivered_mib", r->delivered_mib, 1);
        printf("\"bufferable_mib\":%.1f,", (double)c->bufferable / 1048576.0);
    }
    if (c->mode == FX_BENCH_ISOLATION) {
        json_lat(&r->lat); /* the impaired phase's healthy deliveries */
        printf("\"healthy_client_dropped\":%llu,\"victim_delay_ms\":%u,"
               "\"victim_drop_permille\":%u,",
               (unsigned long long)r->healthy_client_dropped, c->victim_delay_ms,
               c->victim_drop_permille);
        jnum("clean_msgs_per_s", r->clean_msgs_per_s, 0);
        jnum("clean_p99_us", r->clean_p99_us, 1);
        jnum("impaired_msgs_per_s", r->impaired_msgs_per_s, 0);
        jnum("impaired_p99_us", r->impaired_p99_us, 1);
        jnum("isolation_tput_ratio", r->isolation_tput_ratio, 4);
        jnum("isolation_p99_ratio", r->isolation_p99_ratio, 4);
        printf("\"victim_received\":%llu,\"victim_expected\":%llu,\"victim_gaps\":%llu,"
               "\"victim_link_dropped\":%llu,",
               (unsigned long long)r->victim_received, (unsigned long long)r->victim_expected,
               (unsigned long long)r->victim_gaps, (unsigned long long)r->victim_link_dropped);
    }
    if (c->mode == FX_BENCH_OVERLOAD) {
        json_lat(&r->lat);
        printf("\"healthy_client_dropped\":%llu,", (unsigned long long)r->healthy_client_dropped);
        printf("\"stalled_expected\":%llu,\"stalled_received\":%llu,\"stalled_dropped\":%llu,"
               "\"stalled_client_dropped\":%llu,",
               (unsigned long long)r->stalled_expected, (unsigned long long)r->stalled_received,
               (unsigned long long)r->stalled_dropped,
               (unsigned long long)r->stalled_client_dropped);
        json_loss(r);
    }
    if ((c->mode == FX_BENCH_OVERLOAD || c->mode == FX_BENCH_ISOLATION) && r->have_drops)
        printf("\"broker_subscribe_dropped\":%llu,\"broker_lane_dropped\":%llu,"
               "\"broker_lane_dropped_events\":%llu,"
               "\"broker_ingress_dropped\":%llu,\"broker_ingress_dropped_messages\":%llu,"
               "\"broker_subscriber_disconnect\":%llu,",
               (unsigned long long)r->drops.subscribe_dropped,
               (unsigned long long)r->drops.lane_dropped,
               (unsigned long long)r->drops.lane_dropped_events,
               (unsigned long long)r->drops.ingress_dropped,
               (unsigned long long)r->drops.ingress_dropped_messages,
               (unsigned long long)r->drops.subscriber_disconnect);
    if (c->watch_s) { /* overload only (finish_cfg) */
        printf("\"rss_watch_s\":%u,\"rss_watch_samples\":%llu,\"rss_watch_min_kb\":%llu,"
               "\"rss_watch_max_kb\":%llu,\"rss_watch_first_kb\":%llu,\"rss_watch_last_kb\":%llu,",
               c->watch_s, (unsigned long long)r->watch_samples,
               (unsigned long long)r->watch_min_kb, (unsigned long long)r->watch_max_kb,
               (unsigned long long)r->watch_first_kb, (unsigned long long)r->watch_last_kb);
        jnum("rss_watch_spread_pct", r->watch_spread_pct, 2);
    }
    if (c->mode == FX_BENCH_REPLAY)
        print_replay_json(c, r);
    json_tail(o, r);
    fflush(stdout);
}

static void print_probe_human(const opts *o, const fx_bench_result *r, int run)
{
    const fx_bench_cfg *c = &o->c;
    printf("run %d  fsync-probe  %s  records of %zu bytes, fdatasync every %u: ", run, c->dir,
           c->payload + FX_BENCH_REC_HEADER, c->sync_every);
    printf("%.0f records/s (%.1f MB/s) over %.2f s, fdatasync p50 %.1f  p99 %.1f us (%zu); "
           "one record per fdatasync: p50 %.1f  p99 %.1f us (%zu)%s%s\n",
           r->msgs_per_s, r->mb_per_s, r->window_s, r->lat.p50_us, r->lat.p99_us, r->lat.n,
           r->single_lat.p50_us, r->single_lat.p99_us, r->single_lat.n,
           r->valid ? "" : "  INVALID: ", r->valid ? "" : r->why);
    fflush(stdout);
}

static void print_human(const opts *o, const fx_bench_result *r, int run)
{
    const fx_bench_cfg *c = &o->c;
    char line[512], samples[96];
    if (c->mode == FX_BENCH_FSYNC_PROBE) {
        print_probe_human(o, r, run);
        return;
    }
    if (c->mode == FX_BENCH_CACHE) {
        fx_bench_cache_format(line, sizeof(line), c, r);
        printf("run %d  payload %zu  %s\n", run, c->payload, line);
        if (r->have_server)
            printf("       broker: peak RSS %.1f MB, CPU %.0f%%\n", (double)r->peak_rss_kb / 1024.0,
                   100.0 * (r->server_user_s + r->server_sys_s) / r->run_s);
        fflush(stdout);
        return;
    }
    if (c->mode == FX_BENCH_GROUP) {
        fx_bench_group_format(line, sizeof(line), c, r);
        printf("run %d  payload %zu  %s\n", run, c->payload, line);
        if (r->have_server)
            printf("       broker: peak RSS %.1f MB, CPU %.0f%%\n", (double)r->peak_rss_kb / 1024.0,
                   100.0 * (r->server_user_s + r->server_sys_s) / r->run_s);
        fflush(stdout);
        return;
    }
    fx_bench_format_samples(samples, sizeof(samples), &r->lat);
    printf("run %d  %s  payload %zu  fanout %u  streams %u  ", run, MODE_NAMES[c->mode], c->payload,
           c->fanout, c->streams);
    if (c->mode == FX_BENCH_IDLE_SUBS) {
        printf("%llu subscriptions over %u clients in %.1f s: broker RSS %.1f MB idle, %.1f MB "
               "with them: %.0f bytes per subscription\n",
               (unsigned long long)c->subs, r->sub_clients, r->subscribe_s,
               (double)r->rss_idle_kb / 1024.0, (double)r->rss_subs_kb / 1024.0, r->bytes_per_sub);
        fflush(stdout);
        return;
    }
    if (c->mode == FX_BENCH_THROUGHPUT && c->ack) {
        if (!r->valid)
            printf("acked INVALID (%s)\n", r->why);
        else
            printf("acked, %u publisher(s), %s: %.0f msg/s acked  ack latency p50 %.1f  p99 "
                   "%.1f  p999 %.1f us %s\n",
                   c->publishers, c->window ? "async window" : "one at a time", r->msgs_per_s,
                   r->lat.p50_us, r->lat.p99_us, r->lat.p999_us, samples);
        if (c->window)
            printf("       window %u in flight per publisher\n", c->window);
    } else if (c->mode == FX_BENCH_LATENCY) {
        if (!r->valid)
            printf("INVALID (%s)\n", r->why);
        else
            printf("%s %s  p50 %.1f  p90 %.1f  p99 %.1f  p999 %.1f  max %.1f us %s\n",
                   c->ack ? "acked" : "unacked", c->callback ? "callback" : "next", r->lat.p50_us,
                   r->lat.p90_us, r->lat.p99_us, r->lat.p999_us, r->lat.max_us, samples);
    } else if (c->mode == FX_BENCH_OVERLOAD) {
        printf("healthy: %.0f msg/s  per-sub %.0f msg/s  lost %llu (their client queues "
               "dropped %llu)%s%s\n",
               r->msgs_per_s, r->per_sub_msgs_per_s, (unsigned long long)r->t.lost,
               (unsigned long long)r->healthy_client_dropped,
               r->valid ? "" : "  INVALID: ", r->valid ? "" : r->why);
    } else if (c->mode == FX_BENCH_ISOLATION) {
        printf("healthy: clean %.0f msg/s p99 %.1f us, impaired %.0f msg/s p99 %.1f us: ratio "
               "msg/s %.3f, p99 %.3f; impaired lost %llu (their client queues dropped %llu)%s%s\n",
               r->clean_msgs_per_s, r->clean_p99_us, r->impaired_msgs_per_s, r->impaired_p99_us,
               r->isolation_tput_ratio, r->isolation_p99_ratio, (unsigned long long)r->t.lost,
               (unsigned long long)r->healthy_client_dropped,
               r->valid ? "" : "  INVALID: ", r->valid ? "" : r->why);
        printf("       victim (%u ms delay, %.1f%% loss): %llu of %llu received, %llu skipped in "
               "gaps, %llu datagrams dropped on its link; broker drops: subscriber queue %llu, "
               "lane %llu lists (%llu messages), ingress %llu\n",
               c->victim_delay_ms, (double)c->victim_drop_permille / 10.0,
               (unsigned long long)r->victim_received, (unsigned long long)r->victim_expected,
               (unsigned long long)r->victim_gaps, (unsigned long long)r->victim_link_dropped,
               (unsigned long long)r->drops.subscribe_dropped,
               (unsigned long long)r->drops.lane_dropped,
               (unsigned long long)r->drops.lane_dropped_events,
               (unsigned long long)r->drops.ingress_dropped);
    } else {
        fx_bench_tput t = {r->valid,
                           r->why,
                           r->msgs_per_s,
                           r->mb_per_s,
                           r->per_sub_msgs_per_s,
                           r->submit_msgs_per_s,
                           r->window_s,
                           r->t.lost,
                           r->t.dups};
        fx_bench_format_tput(line, sizeof(line), &t);
        printf("batch %u  %s%s\n", c->batch, c->mode == FX_BENCH_REPLAY ? "live: " : "", line);
    }
    if (c->mode == FX_BENCH_REPLAY && !isnan(r->replay_s))
        printf(
            "       replay from earliest: %llu messages in %.3f s: %.0f msg/s (%.3f x live), "
            "first after %.2f ms; %llu read from disk%s; %llu skipped, %llu duplicates, "
            "%llu offset jumps\n",
            (unsigned long long)r->replay_msgs, r->replay_s, r->replay_msgs_per_s,
            r->replay_vs_live, r->replay_first_ms,
            (unsigned long long)(r->replay_disk_records == UINT64_MAX ? 0 : r->replay_disk_records),
            r->replay_disk_records == UINT64_MAX ? " (unknown: no --admin)" : "",
            (unsigned long long)r->replay_gaps, (unsigned long long)r->replay_dups,
            (unsigned long long)r->replay_offset_gaps);
    if (c->mode == FX_BENCH_OVERLOAD)
        printf("       healthy p99 %.1f us%s; stalled subscriber: %llu of %llu received, %llu "
               "dropped; broker drops: subscriber queue %llu, lane %llu lists (%llu messages), "
               "ingress %llu\n",
               r->lat.p99_us, samples, (unsigned long long)r->stalled_received,
               (unsigned long long)r->stalled_expected, (unsigned long long)r->stalled_dropped,
               (unsigned long long)r->drops.subscribe_dropped,
               (unsigned long long)r->drops.lane_dropped,
               (unsigned long long)r->drops.lane_dropped_events,
               (unsigned long long)r->drops.ingress_dropped);
    if (c->watch_s)
        printf("       broker RSS watch: %llu of %u samples (1 s apart, from 10 s in): min %.1f "
               "MB, max %.1f MB, spread %.2f%%; first %.1f MB, last %.1f MB\n",
               (unsigned long long)r->watch_samples, c->watch_s, (double)r->watch_min_kb / 1024.0,
               (double)r->watch_max_kb / 1024.0, r->watch_spread_pct,
               (double)r->watch_first_kb / 1024.0, (double)r->watch_last_kb / 1024.0);
    if (r->have_server)
        printf("       broker: peak RSS %.1f MB, CPU %.0f%%\n", (double)r->peak_rss_kb / 1024.0,
               100.0 * (r->server_user_s + r->server_sys_s) / r->run_s);
    if (r->broker_dgram_bytes > 0)
        printf("       broker datagrams: %.0f bytes each on average\n", r->broker_dgram_bytes);
    fflush(stdout);
}

/* Median of one field over the runs (valid runs only). */
static double median_of(const fx_bench_result *rs, int n, size_t off)
{
    double v[MAX_RUNS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (rs[i].valid)
            v[k++] = *(const double *)((const char *)&rs[i] + off);
    return fx_bench_median(v, (size_t)k);
}

static void print_medians(const opts *o, const fx_bench_result *rs, int n)
{
    if (o->c.mode == FX_BENCH_FSYNC_PROBE)
        printf("median of %d: %.0f records/s  fdatasync p50 %.1f  p99 %.1f us; one record per "
               "fdatasync p50 %.1f us\n",
               n, median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p50_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p99_us)),
               median_of(rs, n, offsetof(fx_bench_result, single_lat.p50_us)));
    else if (o->c.mode == FX_BENCH_REPLAY)
        printf("median of %d: live %.0f msg/s, replay %.0f msg/s, replay / live %.3f\n", n,
               median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, replay_msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, replay_vs_live)));
    else if (o->c.mode == FX_BENCH_CACHE && o->c.cache_op == FX_BENCH_CACHE_FILL)
        printf("median of %d: %.0f bytes per entry\n", n,
               median_of(rs, n, offsetof(fx_bench_result, rss_per_entry_bytes)));
    else if (o->c.mode == FX_BENCH_CACHE)
        printf("median of %d: %.0f ops/s  p50 %.1f  p99 %.1f us\n", n,
               median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p50_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p99_us)));
    else if (o->c.mode == FX_BENCH_GROUP && o->c.group_cell == FX_BENCH_GCELL_REDELIVERY)
        printf("median of %d: lateness p50 %.3f  p99 %.3f ms\n", n,
               median_of(rs, n, offsetof(fx_bench_result, lateness_p50_ms)),
               median_of(rs, n, offsetof(fx_bench_result, lateness_p99_ms)));
    else if (o->c.mode == FX_BENCH_GROUP)
        printf("median of %d: %.0f acked msg/s  publish -> delivery p50 %.1f  p99 %.1f us\n", n,
               median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p50_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p99_us)));
    else if (o->c.mode == FX_BENCH_IDLE_SUBS)
        printf("median of %d: %.0f bytes per subscription\n", n,
               median_of(rs, n, offsetof(fx_bench_result, bytes_per_sub)));
    else if (o->c.mode == FX_BENCH_THROUGHPUT && o->c.ack)
        printf("median of %d: %.0f msg/s acked  ack latency p50 %.1f  p99 %.1f us\n", n,
               median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p50_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p99_us)));
    else if (o->c.mode == FX_BENCH_LATENCY)
        printf("median of %d: p50 %.1f  p99 %.1f  p999 %.1f us\n", n,
               median_of(rs, n, offsetof(fx_bench_result, lat.p50_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p99_us)),
               median_of(rs, n, offsetof(fx_bench_result, lat.p999_us)));
    else if (o->c.mode == FX_BENCH_ISOLATION)
        printf("median of %d: healthy impaired / clean: msg/s %.3f, p99 %.3f\n", n,
               median_of(rs, n, offsetof(fx_bench_result, isolation_tput_ratio)),
               median_of(rs, n, offsetof(fx_bench_result, isolation_p99_ratio)));
    else
        printf("median of %d: %.0f msg/s  %.1f MB/s  per-sub %.0f msg/s\n", n,
               median_of(rs, n, offsetof(fx_bench_result, msgs_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, mb_per_s)),
               median_of(rs, n, offsetof(fx_bench_result, per_sub_msgs_per_s)));
}

/* ---- main ------------------------------------------------------------------------ */

static int run_all(opts *o)
{
    static fx_bench_result rs[MAX_RUNS];
    int status = 0;
    for (int i = 0; i < o->runs; i++) {
        int rv = fx_bench_run_once(&o->c, &rs[i]);
        if (rv != 0) {
            fprintf(stderr, "felix-bench: %s\n", rs[i].errmsg);
            if (o->json)
                printf("{\"tool\":\"felix-bench\",\"label\":\"%s\",\"error\":\"%s\",\"run\":%d}\n",
                       o->label ? o->label : "", fx_strerror(rv), i + 1);
            return 1;
        }
        if (!rs[i].valid) {
            fprintf(stderr, "felix-bench: run %d INVALID: %s\n", i + 1, rs[i].why);
            status = 3;
        }
        if (o->json)
            print_json(o, &rs[i], i + 1);
        else
            print_human(o, &rs[i], i + 1);
    }
    if (!o->json && o->runs > 1)
        print_medians(o, rs, o->runs);
    return status;
}

int main(int argc, char **argv)
{
    opts o = {.c = {.mode = FX_BENCH_THROUGHPUT,
                    .payload = 1024,
                    .fanout = 1,
                    .batch = 1,
                    .publishers = 1,
                    .streams = 1,
                    .min_seconds = FX_BENCH_GUARD_MIN_SECONDS,
                    .max_seconds = 60,
                    .idle_seconds = 3,
                    .progress = true,
                    .ns = "bench",
                    .subs = 10000,
                    .victim_delay_ms = 200,
                    .victim_drop_permille = 50,
                    .probe_records = 200000,
                    .sync_every = 64},
              .runs = 1};
    int rv = parse_args(argc, argv, &o);
    if (rv != 0)
        return rv == 1 ? 0 : 2;
    if (finish_cfg(&o) != 0)
        return 2;
    fx_client_opts env;
    fx_client_opts_init(&env);
    if (fx_client_opts_from_env(&env) != 0) { /* the clients overlay the same variables */
        char why[256];
        fx_client_last_error(NULL, why, sizeof(why));
        fprintf(stderr, "felix-bench: %s\n", why);
        return 2;
    }
    if (env.idempotent) /* FELIX_IDEMPOTENT=1: reported as --idempotent */
        o.c.idempotent = true;
    if (o.mtu) { /* libfelix reads the transport variables when a client starts */
        char v[16];
        snprintf(v, sizeof(v), "%u", o.mtu);
        setenv("FELIX_LOOPBACK_MTU", v, 1);
        setenv("FELIX_INITIAL_MTU", v, 1);
        setenv("FELIX_MTU_UPPER_BOUND", v, 1);
    }
    inproc ip = {0};
    if (o.c.server == NULL && o.c.mode != FX_BENCH_FSYNC_PROBE) {
        if ((rv = inproc_start(&o, &ip)) != 0) {
            fprintf(stderr, "felix-bench: cannot start the in-process broker: %s\n",
                    fx_strerror(rv));
            return 1;
        }
        o.c.server = ip.addr;
        o.c.pin = ip.pin;
        o.c.insecure = false; /* the pin is known; libfelix takes one way to verify */
        o.c.in_process = true;
        o.c.broker = ip.b;
    }
    int status = run_all(&o);
    inproc_stop(&ip);
    return status;
}
