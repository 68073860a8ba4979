/* felix-broker: the broker daemon. Loads and validates the configuration
 * (defaults < YAML < FELIX_* environment < --set flags), prints or checks it
 * on request, and otherwise serves the QUIC data plane (fx_broker) and the
 * admin HTTP endpoint (/metrics, /live, /ready) until SIGINT or SIGTERM.
 * SIGTERM/SIGINT drain it (fx_broker_drain): /ready turns 503 first, then the
 * accepted work is finished within shutdown_drain_timeout_ms. Under systemd
 * (Type=notify) it reports READY=1 once both listeners are open (the
 * durable streams recover after, each served once its log is open) and
 * STOPPING=1 when the drain starts. Main thread, but for fx-sd-notify (an
 * fx_loop under systemd only): it asks for more start time
 * (EXTEND_TIMEOUT_USEC) until READY=1, then reports the recovery in STATUS=. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "base/hostport.h"
#include "base/log.h"
#include "base/loop.h"
#include "broker/broker.h"
#include "felix/error.h"
#include "server/admin.h"
#include "server/admin_routes.h"
#include "server/authn.h"
#include "server/cluster_node.h"
#include "server/config.h"
#include "server/memtrim.h"
#include "server/pipeline.h"
#include "server/pregroups.h"
#include "server/statedir.h"
#include "storage/syncpol.h"

extern char **environ;

/* Exit statuses (docs/configuration.md). */
enum {
    EXIT_CONFIG = 1, /* the configuration is invalid */
    EXIT_USAGE = 2,  /* bad command line */
    EXIT_START = 4,  /* a listener could not start (address in use, ...) */
    EXIT_DRAIN = 5,  /* the drain deadline cut work short (logged what was left) */
    EXIT_FORCED = 6, /* a second SIGINT/SIGTERM ended the drain at once */
};

/* The original's implicit config path; we read files only when told to. */
#define ORIGINAL_CONFIG_PATH "/usr/local/felix/config.yml"

struct opts {
    const char *config;
    bool dev, print, markdown, check;
    bool repair_durable; /* --repair-durable */
    const char **sets;
    size_t nsets;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: felix-broker [--config FILE | --dev] [--set key=value]...\n"
            "                    [--print-config [--markdown]] [--check-config]\n"
            "                    [--repair-durable] [--version] [--help]\n"
            "\n"
            "  --config FILE    YAML configuration (default: $FELIX_BROKER_CONFIG, else none)\n"
            "  --dev            use the built-in development configuration\n"
            "                   (QUIC 127.0.0.1:5000, admin 127.0.0.1:8080, ./build/run-state;\n"
            "                   without admin_token, one is generated into\n"
            "                   ./build/run-state/admin-token)\n"
            "  --set key=value  override one key; wins over the file and FELIX_* variables\n"
            "  --print-config   print the effective configuration and where each value\n"
            "                   came from, then exit\n"
            "  --markdown       with --print-config: print the key reference as Markdown\n"
            "  --check-config   validate the configuration; exit 0 if valid, 1 if not\n"
            "  --repair-durable at start, cut a damaged durable log at its first bad record\n"
            "                   (what was dropped is logged) instead of refusing to start\n"
            "\n"
            "Precedence: defaults < file < environment < --set. Every key is described in\n"
            "docs/configuration.md.\n"
            "\n"
            "example:\n"
            "  felix-broker --config /etc/felix/broker.yaml --set pub_queue_depth=128 \\\n"
            "               --set subscriber_queue_policy=block --print-config\n"
            "\n"
            "SIGTERM or SIGINT drains: /ready turns 503, new work is refused, accepted work\n"
            "is delivered within shutdown_drain_timeout_ms; a second signal exits at once.\n"
            "\n"
            "exit status: 0 ok (clean drain), 1 invalid configuration, 2 usage error,\n"
            "             4 a listener or durable storage could not start, 5 the drain\n"
            "             deadline cut work short, 6 a second signal ended the drain\n");
}

/* Returns the value of option |name| at argv[*i] ("--name=v" or "--name v"),
 * advancing *i past a separate value; NULL if argv[*i] is not that option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* Parses the command line into |o|. Returns 0, 1 for --help/--version (already
 * answered), or EXIT_USAGE. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--config", &missing)))
            o->config = v;
        else if ((v = opt_value(argc, argv, &i, "--set", &missing)))
            o->sets[o->nsets++] = v;
        else if (missing) {
            fprintf(stderr, "felix-broker: %s needs a value\n", argv[i]);
            return EXIT_USAGE;
        } else if (!strcmp(argv[i], "--dev"))
            o->dev = true;
        else if (!strcmp(argv[i], "--print-config"))
            o->print = true;
        else if (!strcmp(argv[i], "--markdown"))
            o->markdown = true;
        else if (!strcmp(argv[i], "--check-config"))
            o->check = true;
        else if (!strcmp(argv[i], "--repair-durable"))
            o->repair_durable = true;
        else if (!strcmp(argv[i], "--version")) {
            printf("felix-broker %s\n", FX_VERSION);
            return 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else {
            fprintf(stderr, "felix-broker: unknown argument '%s' (try --help)\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (o->dev && o->config) {
        fprintf(stderr, "felix-broker: --dev and --config are exclusive\n");
        return EXIT_USAGE;
    }
    if (o->markdown && !o->print) {
        fprintf(stderr, "felix-broker: --markdown goes with --print-config\n");
        return EXIT_USAGE;
    }
    return 0;
}

static void log_warnings(const fx_config_diag *d)
{
    for (size_t i = 0; i < d->nwarnings; i++)
        fprintf(stderr, "felix-broker: warning: %s\n", d->warnings[i]);
    if (d->warnings_dropped)
        fprintf(stderr, "felix-broker: warning: %zu more warnings not shown\n",
                d->warnings_dropped);
}

/* The original read ORIGINAL_CONFIG_PATH when present; say so rather than
 * silently ignore a file an operator may expect to apply. */
static void warn_original_path(const struct opts *o)
{
    if (o->config || o->dev || getenv("FELIX_BROKER_CONFIG"))
        return;
    if (access(ORIGINAL_CONFIG_PATH, F_OK) == 0)
        fprintf(stderr,
                "felix-broker: warning: %s exists but is not read; pass --config to use it\n",
                ORIGINAL_CONFIG_PATH);
}

static fx_queue_policy policy_of(fx_config_policy p)
{
    switch (p) {
    case FX_CONFIG_POLICY_BLOCK:
        return FX_QUEUE_BLOCK;
    case FX_CONFIG_POLICY_DROP_OLD:
        return FX_QUEUE_DROP_OLD;
    default:
        return FX_QUEUE_DROP_NEW;
    }
}

/* Splits "host:port" or "[v6]:port" into |ip| and |*port|. Returns 0 or -1. */
static int split_bind(const char *bind, char *ip, size_t cap, uint16_t *port)
{
    fx_hostport hp;
    if (fx_hostport_split(bind, &hp, NULL) != 0 || strlen(hp.host) >= cap)
        return -1;
    strcpy(ip, hp.host);
    *port = hp.port;
    return 0;
}

/* The address a local client should dial for a broker bound to |bind|: the
 * loopback address of the same family for a wildcard bind, else the bound
 * host (bracketed when IPv6). */
static void client_host(const char *bind, char *out, size_t cap)
{
    char ip[FX_CONFIG_ADDR_MAX];
    uint16_t port;
    if (split_bind(bind, ip, sizeof(ip), &port) != 0 || strcmp(ip, "0.0.0.0") == 0)
        snprintf(out, cap, "127.0.0.1");
    else if (strcmp(ip, "::") == 0)
        snprintf(out, cap, "[::1]");
    else if (strchr(ip, ':') != NULL)
        snprintf(out, cap, "[%s]", ip);
    else
        snprintf(out, cap, "%s", ip);
}

static void quic_opts_from_config(const fx_config *c, fx_quic_opts *q)
{
    fx_quic_opts_default(q);
    q->idle_timeout_ns = c->idle_timeout_ns;
    q->keepalive_ns = c->keepalive_interval_ns;
    q->stream_window = c->quic_stream_recv_window;
    q->conn_window = c->quic_conn_recv_window;
    q->max_stream_window = c->quic_stream_recv_window_max;
    q->max_conn_window = c->quic_conn_recv_window_max;
    q->unacked_cap = c->quic_unacked_send_bytes;
    q->initial_mtu = (size_t)c->initial_mtu;
    q->mtu_upper_bound = (size_t)c->mtu_upper_bound;
    q->max_udp_payload = (size_t)c->max_udp_payload;
    q->loopback_mtu = (size_t)c->loopback_mtu;
    q->stats_log_ns = c->conn_stats_ns;
    q->udp_send_buffer = (int)c->udp_send_buffer;
    q->udp_recv_buffer = (int)c->udp_recv_buffer;
    q->cert_file = c->tls_cert_file[0] ? c->tls_cert_file : NULL;
    q->key_file = c->tls_key_file[0] ? c->tls_key_file : NULL;
    q->state_dir = c->state_dir[0] ? c->state_dir : ".";
}

static fx_broker_lane_shard lane_shard_of(fx_config_lane_shard s)
{
    switch (s) {
    case FX_CONFIG_LANE_SHARD_SUBSCRIBER_ID_HASH:
        return FX_BROKER_LANE_SUBSCRIBER_ID_HASH;
    case FX_CONFIG_LANE_SHARD_CONNECTION_ID_HASH:
        return FX_BROKER_LANE_CONNECTION_ID_HASH;
    case FX_CONFIG_LANE_SHARD_ROUND_ROBIN_PIN:
        return FX_BROKER_LANE_ROUND_ROBIN_PIN;
    default:
        return FX_BROKER_LANE_AUTO;
    }
}

static void durable_opts_from_config(const fx_config *c, fx_broker_durable_opts *d)
{
    d->dir = c->durable_storage_dir[0] ? c->durable_storage_dir : NULL;
    d->durable_default = c->durable_default;
    d->fsync_mode = c->durable_fsync_mode;
    d->fsync_interval_ns = c->durable_fsync_interval_ns;
    d->segment_bytes = c->durable_segment_bytes;
    d->index_spacing_bytes = c->durable_index_spacing_bytes;
    d->max_unsynced_bytes = c->durable_max_unsynced_bytes;
    d->flush_inline = !c->durable_flush_pipeline;
    d->tenant_streams_max = c->tenant_durable_streams_max;
    d->tenant_bytes_max = c->tenant_durable_bytes_max;
    d->bytes_max = c->durable_bytes_max;
    d->retention_bytes = c->durable_retention_bytes;
    d->retention_ns = c->durable_retention_ns;
    d->retention_interval_ns = c->durable_retention_interval_ns;
    d->max_records_per_read = c->durable_max_records_per_read;
    d->compaction_bytes_per_sec = c->storage_compaction_bytes_per_sec;
    d->preallocate = c->durable_preallocate;
    d->verify_all_on_open = c->durable_verify_all_on_open;
    d->repair_checksum_tail = c->durable_repair_checksum_tail;
}

/* Maps the configuration to the data plane's options. |names| (nstreams +
 * ncaches + 1 entries, then ncaches bytes) receives the pre-created streams,
 * then the declared caches, then the caches' durability flags, and must
 * outlive fx_broker_new. */
static int broker_opts_from_config(const fx_config *c, fx_broker_opts *o, char *ip, size_t ipcap,
                                   fx_broker_stream_name *names)
{
    fx_broker_opts_default(o);
    if (split_bind(c->quic_bind, ip, ipcap, &o->port) != 0)
        return -1;
    o->bind_ip = ip;
    quic_opts_from_config(c, &o->quic);
    o->workers = c->workers;
    o->pin_workers = c->core_shards > 0;
    o->io_threads = c->io_threads;
    o->max_connections = c->max_connections;
    o->max_connections_per_ip = c->max_connections_per_ip;
    o->auth_timeout_ns = c->auth_timeout_ns;
    o->max_unauth_streams_per_conn = c->max_unauth_streams_per_conn;
    o->auth_failures_per_conn = c->auth_failures_per_conn;
    o->auth_rate_per_ip = c->auth_rate_per_ip;
    o->preauth_max_bytes = c->preauth_max_bytes;
    o->auto_create_streams = c->auto_create_streams;
    o->max_streams_per_tenant = c->max_streams_per_tenant;
    o->max_tenants = c->max_tenants;
    o->stream_idle_expiry_ns = c->stream_idle_expiry_ns;
    o->stream_delete_tombstone_ns = c->stream_delete_tombstone_ns;
    o->retained_bytes_limit = c->retained_bytes_limit;
    o->tenant_retained_bytes = c->tenant_retained_bytes;
    o->subscriber_block_timeout_ns = c->subscriber_block_timeout_ns;
    for (size_t i = 0; i < c->nstreams; i++)
        names[i] =
            (fx_broker_stream_name){c->streams[i].tenant, c->streams[i].ns, c->streams[i].stream};
    o->streams = names;
    o->nstreams = c->nstreams;
    /* The declared caches follow the streams in |names|. */
    for (size_t i = 0; i < c->ncaches; i++)
        names[c->nstreams + i] =
            (fx_broker_stream_name){c->caches[i].tenant, c->caches[i].ns, c->caches[i].stream};
    /* Their durability follows the names: |names| has room for |ncaches|
     * flags after its last entry (start_broker). */
    bool *durable = (bool *)(void *)(names + c->nstreams + c->ncaches + 1);
    for (size_t i = 0; i < c->ncaches; i++)
        durable[i] = c->caches[i].durable;
    o->caches_durable = durable;
    o->caches = names + c->nstreams;
    o->ncaches = c->ncaches;
    o->log_capacity = c->log_capacity;
    o->log_capacity_bytes = c->log_capacity_bytes;
    o->subscriber_queue_capacity = c->subscriber_queue_capacity;
    o->subscriber_queue_policy = policy_of(c->subscriber_queue_policy);
    o->max_subscriptions_per_conn = c->max_subscriptions_per_conn;
    o->group_visibility_timeout_ms = c->group_visibility_timeout_ms;
    o->group_max_visibility_ms = c->group_max_visibility_ms;
    o->group_max_attempts = c->group_max_attempts;
    o->group_max_in_flight = c->group_max_in_flight;
    o->group_max_wait_ms = c->group_max_wait_ms;
    o->cache_max_bytes = c->cache_max_bytes;
    o->cache_tenant_max_bytes = c->cache_tenant_max_bytes;
    o->cache_max_value_bytes = (uint32_t)c->cache_max_value_bytes; /* at most 1 GiB */
    o->cache_max_key_bytes = c->cache_max_key_bytes;
    o->group_nbackoff = c->group_nbackoff;
    memcpy(o->group_backoff_ms, c->group_backoff, sizeof(o->group_backoff_ms));
    o->max_groups_per_stream = c->max_groups_per_stream;
    o->group_hold_timeout_ns = c->group_hold_timeout_ns;
    o->max_frame_bytes = (uint32_t)c->max_frame_bytes;
    o->ack_on_commit = c->ack_on_commit;
    o->ack_wait_timeout_ns = c->ack_wait_timeout_ns;
    o->control_stream_drain_timeout_ns = c->control_stream_drain_timeout_ns;
    o->publish_queue_wait_timeout_ns = c->publish_queue_wait_timeout_ns;
    o->pub_queue_depth = c->pub_queue_depth;
    o->pub_inflight_bytes = c->pub_inflight_bytes;
    o->pub_conn_inflight_bytes = c->pub_conn_inflight_bytes;
    o->pub_ingress_wait = c->pub_ingress_wait;
    o->frame_read_timeout_ns = c->frame_read_timeout_ns;
    o->event_batch_max_events = c->event_batch_max_events;
    o->event_batch_max_bytes = c->event_batch_max_bytes;
    o->event_batch_max_delay_ns = c->event_batch_max_delay_ns;
    o->fanout_batch_size = c->fanout_batch_size;
    o->subscriber_writer_lanes = c->subscriber_writer_lanes;
    o->max_subscriber_writer_lanes = c->max_subscriber_writer_lanes;
    o->subscriber_lane_shard = lane_shard_of(c->subscriber_lane_shard);
    o->subscriber_single_writer_per_conn = c->subscriber_single_writer_per_conn;
    o->subscriber_lane_queue_depth = c->subscriber_lane_queue_depth;
    o->subscriber_lane_queue_policy = policy_of(c->subscriber_lane_queue_policy);
    o->subscriber_max_bytes_per_write = c->subscriber_max_bytes_per_write;
    o->subscriber_flush_max_items = c->subscriber_flush_max_items;
    o->subscriber_flush_max_delay_ns = c->subscriber_flush_max_delay_ns;
    durable_opts_from_config(c, &o->durable);
    return 0;
}

/* ---- authentication (auth_mode jwt) ------------------------------------------ */

/* Loads jwks_file for auth_mode jwt into a new authenticator (*pa; NULL for
 * auth_mode none). Returns 0 or EXIT_START with the file named. */
static int start_authn(const fx_config *c, fx_authn **pa)
{
    *pa = NULL;
    if (c->auth_mode != FX_CONFIG_AUTH_JWT)
        return 0;
    fx_authn_opts ao = {.jwks_file = c->jwks_file,
                        .issuer = c->jwt_issuer,
                        .audience = c->jwt_audience,
                        .leeway_s = (int64_t)(c->jwt_leeway_ns / 1000000000ull)};
    char why[FX_CONFIG_PATH_MAX + 256];
    int rv = fx_authn_new(pa, &ao, why, sizeof(why));
    if (rv != 0) {
        fprintf(stderr, "felix-broker: auth_mode jwt: cannot load jwks_file: %s\n",
                rv == -ENOMEM ? fx_strerror(rv) : why);
        return EXIT_START;
    }
    return 0;
}

/* SIGHUP, TLS part: new handshakes get the re-read certificate, open
 * connections keep theirs; a refused file keeps the old one (the quic
 * module logged which file and why). */
static void reload_tls(fx_broker *b)
{
    int rv = fx_broker_reload_tls(b);
    if (rv == 0)
        FX_LOG_INFO("server", "SIGHUP: reloaded the TLS certificate, sha256=%s",
                    fx_broker_fingerprint(b));
    else
        FX_LOG_ERROR("server", "SIGHUP: keeping the previous TLS certificate sha256=%s: %s",
                     fx_broker_fingerprint(b), fx_strerror(rv));
}

/* SIGHUP: re-reads the TLS certificate and the JWKS (a refused file keeps
 * the old certificate or keys). */
static void on_sighup(fx_authn *a, fx_broker *b)
{
    reload_tls(b);
    if (a == NULL) {
        FX_LOG_INFO("server", "SIGHUP: auth_mode none, no keys to reload");
        return;
    }
    char why[FX_CONFIG_PATH_MAX + 256];
    int rv = fx_authn_reload(a, why, sizeof(why));
    if (rv == 0) {
        FX_LOG_INFO("server", "SIGHUP: reloaded %s", why);
        fx_broker_auth_reloaded(b); /* ends what a removed key signed */
    } else {
        FX_LOG_ERROR("server", "SIGHUP: keeping the previous keys: %s",
                     rv == -ENOMEM ? fx_strerror(rv) : why);
    }
}

/* Before an idle trim (memtrim.h): every broker thread frees a block into its
 * own arena, and so does this one. At most 100 ms: the threads are idle. */
static void trim_arenas(void *arg)
{
    static const fx_broker_loop_call own_arena = {fx_memtrim_own_arena};
    fx_memtrim_own_arena();
    int rv = fx_broker_run_on_each_loop(arg, &own_arena, 100 * FX_NS_PER_MS);
    if (rv != 0 && rv != FX_ESHUTDOWN)
        FX_LOG_DEBUG("server", "idle: not every broker thread freed into its arena: %s",
                     fx_strerror(rv));
}

/* Waits for SIGINT or SIGTERM (returned), reloading the certificate and
 * keys on each SIGHUP. |set| holds the three signals, blocked in every
 * thread. Between signals, every 250 ms, gives freed heap back to the kernel
 * once the broker has been idle for allocator_idle_trim_ms (memtrim.h). */
static int wait_stop_signal(const sigset_t *set, fx_authn *a, fx_broker *b, const fx_config *c,
                            size_t retained)
{
    fx_memtrim trim;
    fx_memtrim_init(&trim, c->allocator_idle_trim_ns);
    trim.retain_bytes = retained; /* 0: the threshold was never set, leave it alone */
    trim.arenas_fn = trim_arenas;
    trim.arenas_arg = b;
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 250 * 1000 * 1000};
    for (;;) {
        int sig = sigtimedwait(set, NULL, c->allocator_idle_trim_ns ? &tick : NULL);
        if (sig < 0) {
            if (errno == EAGAIN)
                fx_memtrim_tick(&trim, fx_now_ns(), fx_memtrim_broker_activity());
            continue; /* EINTR, or the tick */
        }
        if (sig != SIGHUP)
            return sig;
        on_sighup(a, b);
    }
}

/* Creates and starts the data plane, authenticating with |authn| (NULL:
 * auth_mode none), repairing damaged durable logs with |repair|. Returns 0
 * or EXIT_START. */
static int start_broker(const fx_config *c, fx_authn *authn, bool repair, fx_cluster_node *cn,
                        fx_broker **pb)
{
    char why[4096] = "";
    char ip[FX_CONFIG_ADDR_MAX], iip[FX_CONFIG_ADDR_MAX];
    fx_broker_opts bo;
    /* The names, then one durability flag per cache (broker_opts_from_config). */
    fx_broker_stream_name *names =
        calloc(1, (c->nstreams + c->ncaches + 1) * sizeof(*names) + c->ncaches + 1);
    if (names == NULL) {
        fprintf(stderr, "felix-broker: out of memory\n");
        return EXIT_START;
    }
    if (broker_opts_from_config(c, &bo, ip, sizeof(ip), names) != 0) {
        fprintf(stderr, "felix-broker: cannot use quic_bind '%s' (want host:port)\n", c->quic_bind);
        free(names);
        return EXIT_START;
    }
    if (authn != NULL)
        fx_authn_broker_auth(authn, &bo.auth);
    bo.cluster = fx_cluster_node_cluster(cn);
    if (bo.cluster != NULL && c->cluster_internal_bind[0]) {
        if (split_bind(c->cluster_internal_bind, iip, sizeof(iip), &bo.internal_port) != 0) {
            fprintf(stderr, "felix-broker: cannot use cluster_internal_bind '%s' (want host:port)\n",
                    c->cluster_internal_bind);
            free(names);
            return EXIT_START;
        }
        bo.internal_ip = iip;
    }
    bo.durable.repair = repair;
    bo.durable.error = why;
    bo.durable.error_len = sizeof(why);
    int rv = fx_broker_new(pb, &bo);
    free(names);
    if (rv != 0 && why[0]) {
        fprintf(stderr, "felix-broker: cannot open durable storage in %s: %s\n",
                c->durable_storage_dir, why);
        return EXIT_START;
    }
    if (rv == 0 && (rv = fx_broker_start(*pb)) != 0) {
        fx_broker_free(*pb);
        *pb = NULL;
    }
    if (rv != 0) {
        fprintf(stderr, "felix-broker: cannot start QUIC on %s%s%s: %s\n", c->quic_bind,
                bo.internal_ip != NULL ? " and cluster_internal_bind " : "",
                bo.internal_ip != NULL ? c->cluster_internal_bind : "", fx_strerror(rv));
        return EXIT_START;
    }
    return 0;
}

/* Creates the groups of `groups:` on the started broker |b|. Returns 0 or
 * EXIT_START, the reason on stderr. */
static int create_groups(const fx_config *c, fx_broker *b)
{
    char why[2048];
    if (fx_pregroups_create(b, c, FX_ADMIN_BROKER_TIMEOUT_NS, why, sizeof(why)) == 0)
        return 0;
    fprintf(stderr, "felix-broker: cannot create the configured groups: %s\n", why);
    return EXIT_START;
}

/* The felix CLI built beside this binary, or plain "felix". */
static void cli_path(char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash = n > 0 ? memrchr(self, '/', (size_t)n) : NULL;
    if (slash == NULL) {
        snprintf(out, cap, "felix");
        return;
    }
    *slash = '\0';
    snprintf(out, cap, "%s/felix", self);
    if (access(out, X_OK) != 0)
        snprintf(out, cap, "felix");
}

/* Prints |s| single-quoted for a POSIX shell. */
static void print_shell_quoted(const char *s)
{
    putchar('\'');
    for (; *s != '\0'; s++) {
        if (*s == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*s);
    }
    putchar('\'');
}

/* |token_file|: the --dev admin token file ("" for none). */
static void print_banner(const fx_config *c, const fx_broker *b, const fx_admin *admin,
                         const char *token_file)
{
    int epw = fx_broker_endpoint_worker(b);
    printf("felix-broker %s: QUIC on %s (UDP port %u), %u worker loop(s), endpoint on %s\n",
           FX_VERSION, c->quic_bind, (unsigned)fx_broker_port(b), (unsigned)c->workers,
           epw >= 0 ? "worker 0" : "io loop 0");
    printf("felix-broker: TLS certificate SHA-256 %s\n", fx_broker_fingerprint(b));
    char bound[512];
    fx_config_format_bound(c, bound, sizeof(bound));
    printf("felix-broker: %s\n", bound);
    printf("felix-broker: admin %s on %s (port %u): /metrics /live /ready /v1/streams "
           "/v1/subscriptions /v1/pipeline /ui\n",
           c->admin_tls_cert_file[0] ? "HTTPS" : "HTTP", c->metrics_bind,
           (unsigned)fx_admin_port(admin));
    if (fx_admin_probe_port(admin))
        printf("felix-broker: health probes on %s (port %u): /live /ready\n", c->probe_bind,
               (unsigned)fx_admin_probe_port(admin));
    char cli[PATH_MAX + 16];
    cli_path(cli, sizeof(cli));
    printf("felix-broker: to publish and subscribe, in another terminal:\n");
    char host[FX_CONFIG_ADDR_MAX + 2];
    client_host(c->quic_bind, host, sizeof(host));
    printf("  export FELIX_SERVER=%s:%u FELIX_PIN=%s\n", host, (unsigned)fx_broker_port(b),
           fx_broker_fingerprint(b));
    if (token_file[0]) {
        /* The path, not the token: the banner may end up in a log. */
        fputs("  export FELIX_ADMIN_TOKEN=\"$(cat ", stdout);
        print_shell_quoted(token_file);
        fputs(")\"\n", stdout);
    }
    printf("  %s sub t1/default/demo\n", cli);
    printf("  %s pub --ack per_message t1/default/demo hello\n", cli);
    if (c->auth_mode == FX_CONFIG_AUTH_JWT)
        printf("felix-broker: auth_mode jwt: tokens verified against %s (SIGHUP reloads it). "
               "Stop with Ctrl-C.\n",
               c->jwks_file);
    else
        printf("felix-broker: auth_mode none: any token is accepted. Stop with Ctrl-C.\n");
    fflush(stdout);
}

/* Keeps up to allocator_retain_bytes of freed heap in the process. Under load
 * the broker frees and reallocates batch, frame and send buffers all the
 * time; glibc's default trimming hands the top of the heap back to the kernel
 * and faults it in again moments later, so RSS saw-tooths by megabytes and
 * every refill costs page faults. With a fixed trim threshold (and a fixed
 * mmap threshold, which glibc otherwise moves) RSS stays at its high-water
 * mark, which the configuration bounds (docs/design.md, "Memory bound"). */
static size_t retain_heap(const fx_config *c)
{
    if (c->allocator_retain_bytes == 0)
        return 0;
    size_t retain = c->allocator_retain_bytes > INT_MAX ? INT_MAX : c->allocator_retain_bytes;
    /* Buffers up to 4 MiB come from the heap (and are retained); larger ones
     * (rare: frames near max_frame_bytes) are mapped and unmapped. */
    if (mallopt(M_TRIM_THRESHOLD, (int)retain) != 1 || mallopt(M_MMAP_THRESHOLD, 4 << 20) != 1) {
        fprintf(stderr, "felix-broker: warning: the C library refused the allocator settings "
                        "(allocator_retain_bytes); RSS may follow the load\n");
        return 0;
    }
    return retain;
}

_Static_assert((int)FX_CONFIG_LOG_ERROR == (int)FX_LOG_ERROR &&
                   (int)FX_CONFIG_LOG_TRACE == (int)FX_LOG_TRACE,
               "config log levels map one to one onto fx_log_level");

/* ---- graceful drain ---------------------------------------------------------- */

static const char *sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
}

typedef struct drain_run {
    fx_broker *b;
    uint64_t deadline_ns;
    fx_broker_drain_report r;
    int rv;
    atomic_bool done;
} drain_run;

static void *drain_main(void *arg)
{
    drain_run *d = arg;
    d->rv = fx_broker_drain(d->b, d->deadline_ns, &d->r);
    atomic_store(&d->done, true);
    return NULL;
}

/* The connections the drain closed for lack of progress, if any. */
static void report_stalled(const fx_broker_drain_report *r)
{
    if (r->stalled_closed == 0)
        return;
    fprintf(stderr,
            "felix-broker: %llu connection(s) made no progress from half the drain deadline on "
            "and were closed; lost with them: %llu queued delivery(ies), %llu unacked byte(s)\n",
            (unsigned long long)r->stalled_closed, (unsigned long long)r->stalled_deliveries,
            (unsigned long long)r->stalled_unacked);
}

/* Client streams reset because they did not read their replies in time. */
static void report_unread(const fx_broker_drain_report *r)
{
    if (r->reply_streams_reset == 0)
        return;
    fprintf(stderr,
            "felix-broker: %llu client stream(s) did not read their replies within "
            "control_stream_drain_timeout_ms once the rest was done and were reset; %llu "
            "reply(ies) not delivered\n",
            (unsigned long long)r->reply_streams_reset, (unsigned long long)r->replies_abandoned);
}

static int drain_result(const fx_config *c, const drain_run *d)
{
    const fx_broker_drain_report *r = &d->r;
    report_stalled(r);
    report_unread(r);
    if (d->rv == 0 && (r->stalled_closed != 0 || r->reply_streams_reset != 0)) {
        fprintf(
            stderr,
            "felix-broker: drained in %llu ms: everything accepted was delivered but to the "
            "connection(s) and stream(s) above; %llu connection(s) closed, %llu late publish(es) "
            "refused\n",
            (unsigned long long)(r->elapsed_ns / 1000000ull), (unsigned long long)r->connections,
            (unsigned long long)r->publishes_refused);
        return 0;
    }
    if (d->rv == 0) {
        fprintf(stderr,
                "felix-broker: drained in %llu ms: everything accepted was delivered; %llu "
                "connection(s) closed, %llu late publish(es) refused\n",
                (unsigned long long)(r->elapsed_ns / 1000000ull),
                (unsigned long long)r->connections, (unsigned long long)r->publishes_refused);
        return 0;
    }
    if (d->rv != FX_ETIMEDOUT) {
        fprintf(stderr, "felix-broker: drain failed: %s\n", fx_strerror(d->rv));
        return EXIT_DRAIN;
    }
    fprintf(stderr,
            "felix-broker: drain deadline (shutdown_drain_timeout_ms %llu) reached; left: %llu "
            "publish job(s) queued, %llu delivery(ies) queued, %llu reply(ies) pending, %llu "
            "unacked byte(s), %llu connection(s) closed\n",
            (unsigned long long)(c->shutdown_drain_timeout_ns / 1000000ull),
            (unsigned long long)r->jobs_queued, (unsigned long long)r->deliveries_queued,
            (unsigned long long)r->replies_pending, (unsigned long long)r->unacked_bytes,
            (unsigned long long)r->connections);
    return EXIT_DRAIN;
}

/* Drains the broker on a helper thread while this one watches the signals:
 * a second SIGINT/SIGTERM exits at once with EXIT_FORCED. Returns 0 or
 * EXIT_DRAIN. */
static int drain(const fx_config *c, fx_broker *b, const sigset_t *set)
{
    drain_run d = {.b = b, .deadline_ns = fx_now_ns() + c->shutdown_drain_timeout_ns};
    atomic_init(&d.done, false);
    pthread_t th;
    if (pthread_create(&th, NULL, drain_main, &d) != 0) {
        drain_main(&d); /* no thread: drain here, without the second-signal exit */
        return drain_result(c, &d);
    }
    while (!atomic_load(&d.done)) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr,
                    "felix-broker: second signal (%s) during the drain: exiting at once "
                    "with status %d, queued work is lost\n",
                    sig_name(sig), EXIT_FORCED);
            _exit(EXIT_FORCED);
        }
        if (sig == SIGHUP)
            fprintf(stderr, "felix-broker: SIGHUP ignored while draining\n");
    }
    pthread_join(th, NULL);
    return drain_result(c, &d);
}

/* Tells systemd (Type=notify) |state|; without $NOTIFY_SOCKET, as outside
 * systemd, sd_notify does nothing. */
static void notify_systemd(const char *state)
{
    int rv = sd_notify(0, state);
    if (rv < 0)
        fprintf(stderr, "felix-broker: warning: sd_notify %s: %s\n", state, strerror(-rv));
}

/* The lock on state_dir (statedir.h), held from serve() until run() returns. */
static fx_rootlock *state_lock;

/* Under --dev without an admin_token, the token kept in state_dir (made at
 * the first start): the endpoint then refuses mutations without it, as it
 * does everywhere, and the banner says where the CLI finds it. |token|
 * (|cap| bytes) gets the token to use, |file| its file's absolute path ("" when
 * the configured admin_token applies). Returns 0 or EXIT_START. */
static int dev_admin_token(const fx_config *c, bool dev, char *token, size_t cap, char *file,
                           size_t filecap)
{
    snprintf(token, cap, "%s", c->admin_token);
    file[0] = '\0';
    if (!dev || c->admin_token[0] || !c->state_dir[0])
        return 0;
    char why[FX_CONFIG_PATH_MAX + 256], dir[PATH_MAX];
    bool created = false;
    if (fx_state_dir_admin_token(c->state_dir, token, cap, &created, why, sizeof(why)) != 0) {
        fprintf(stderr, "felix-broker: --dev: %s\n", why);
        return EXIT_START;
    }
    if (realpath(c->state_dir, dir) == NULL)
        snprintf(dir, sizeof(dir), "%s", c->state_dir);
    snprintf(file, filecap, "%s/%s", dir, FX_STATE_DIR_ADMIN_TOKEN_FILE);
    FX_LOG_INFO("admin", "--dev: admin token %s %s (mode 0600)",
                created ? "generated into" : "read from", file);
    return 0;
}

/* ---- start-up notices to systemd ----------------------------------------------------- */

/* Start-up work before READY=1 (state dir, TLS, the catalogue, the
 * listeners) could outlast systemd's start timeout on a slow machine, so
 * fx-sd-notify asks for more time every NOTICE_PERIOD_NS until READY=1;
 * after it, it reports the background recovery of the durable streams in
 * STATUS= until every one is done. */
#define NOTICE_PERIOD_NS (5 * FX_NS_PER_S)
#define NOTICE_EXTEND "EXTEND_TIMEOUT_USEC=30000000" /* six periods: a late tick is no kill */

typedef struct notices {
    fx_loop *loop;
    fx_timer timer;
    atomic_bool ready;      /* READY=1 was sent (main) */
    _Atomic(fx_broker *) b; /* set before |ready|, freed after the loop stops */
} notices;

/* Sends STATUS= with the recovery's progress; true once it is complete. */
static bool notice_recovery(fx_broker *b)
{
    fx_broker_recovery r;
    fx_broker_durable_recovery(b, &r);
    char st[192];
    snprintf(st, sizeof(st),
             "STATUS=serving; recovered %llu of %llu durable streams (%llu damaged, %llu failed "
             "to open)",
             (unsigned long long)r.done, (unsigned long long)r.total, (unsigned long long)r.damaged,
             (unsigned long long)r.failed);
    notify_systemd(st);
    return r.done == r.total;
}

static void notices_on_timer(fx_loop *l, fx_timer *t, void *user)
{
    notices *n = user;
    if (!atomic_load(&n->ready))
        notify_systemd(NOTICE_EXTEND);
    else if (notice_recovery(atomic_load(&n->b)))
        return; /* nothing left to report */
    if (fx_loop_timer_arm(l, t, fx_loop_now(l) + NOTICE_PERIOD_NS) != 0)
        fprintf(stderr, "felix-broker: warning: out of memory: no more start-up notices to "
                        "systemd\n");
}

static void notices_arm(void *user)
{
    notices *n = user;
    notices_on_timer(n->loop, &n->timer, n);
}

/* Starts fx-sd-notify under systemd ($NOTIFY_SOCKET set); a failure only
 * loses the notices (logged). */
static void notices_start(notices *n)
{
    *n = (notices){0};
    if (getenv("NOTIFY_SOCKET") == NULL)
        return;
    fx_loop_opts lo = {.name = "fx-sd-notify", .cpu = -1};
    fx_timer_init(&n->timer, notices_on_timer, n);
    int rv = fx_loop_new(&n->loop, &lo);
    if (rv == 0 && (rv = fx_loop_start(n->loop)) == 0)
        rv = fx_loop_call(n->loop, notices_arm, n);
    if (rv != 0) {
        fprintf(stderr, "felix-broker: warning: no start-up notices to systemd: %s\n",
                fx_strerror(rv));
        fx_loop_free(n->loop);
        n->loop = NULL;
    }
}

/* READY=1 (|b| serves from now on), then the recovery's progress. */
static void notices_ready(notices *n, fx_broker *b)
{
    atomic_store(&n->b, b);
    atomic_store(&n->ready, true);
    notify_systemd("READY=1"); /* both listeners are open */
    (void)notice_recovery(b);  /* the first STATUS= at once; fx-sd-notify the next ones */
}

static void notices_stop(notices *n)
{
    if (n->loop == NULL)
        return;
    fx_loop_stop(n->loop);
    /* A stop before the notices ran out leaves the timer armed; the loop
     * has stopped, so this thread may cancel it. */
    fx_loop_timer_cancel(n->loop, &n->timer);
    fx_loop_free(n->loop);
    n->loop = NULL;
}

/* Serves the data plane and the admin endpoint until one of the signals in
 * |sigs| (blocked) stops it; /ready turns 503 as soon as the signal arrives.
 * |dev|: started with --dev. Returns 0 or EXIT_START. */
static int serve_notified(const fx_config *c, bool repair_durable, bool dev, notices *n,
                          const sigset_t *sigs)
{
    sigset_t set = *sigs;
    fx_log_set_level((fx_log_level)c->log_level);
    if (c->auth_mode == FX_CONFIG_AUTH_NONE && !fx_config_addr_is_loopback(c->quic_bind))
        FX_LOG_WARN("server",
                    "quic_bind=%s is not loopback and auth_mode is none (allow_unauthenticated: "
                    "true): any client that reaches it may act as any tenant",
                    c->quic_bind);
    size_t retained = retain_heap(c);
    if (c->state_dir[0]) {
        char why[3 * FX_CONFIG_PATH_MAX + 512];
        if (fx_state_dir_open(c->state_dir, &state_lock, why, sizeof(why)) != 0) {
            fprintf(stderr, "felix-broker: %s\n", why);
            return EXIT_START;
        }
    }
    char token[FX_CONFIG_ADDR_MAX], token_file[PATH_MAX + 32];
    if (dev_admin_token(c, dev, token, sizeof(token), token_file, sizeof(token_file)) != 0)
        return EXIT_START;
    fx_authn *authn = NULL;
    fx_broker *b = NULL;
    fx_cluster_node *cn = NULL;
    char cwhy[512] = "";
    int rv = start_authn(c, &authn);
    if (rv == 0 && fx_cluster_node_start(c, &cn, cwhy, sizeof(cwhy)) != 0) {
        fprintf(stderr, "felix-broker: cannot join the cluster: %s\n", cwhy);
        fx_authn_free(authn);
        return EXIT_START;
    }
    if (rv == 0 && (rv = start_broker(c, authn, repair_durable, cn, &b)) != 0) {
        fx_cluster_node_free(cn);
        fx_authn_free(authn);
    }
    if (rv != 0)
        return rv;
    fx_cluster_node_attach(cn, b);
    if (create_groups(c, b) != 0) {
        fx_cluster_node_detach(cn);
        fx_broker_free(b);
        fx_cluster_node_free(cn);
        fx_authn_free(authn);
        return EXIT_START;
    }
    char err[256];
    fx_admin *admin = NULL;
    fx_pipeline *pipe = NULL;
    if (fx_pipeline_new(&pipe, b) != 0) {
        fprintf(stderr, "felix-broker: out of memory\n");
        fx_cluster_node_detach(cn);
        fx_broker_free(b);
        fx_cluster_node_free(cn);
        fx_authn_free(authn);
        return EXIT_START;
    }
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES + FX_PIPELINE_NROUTES + 1];
    fx_admin_broker_routes(b, routes);
    fx_pipeline_routes(pipe, routes + FX_ADMIN_BROKER_NROUTES);
    routes[FX_ADMIN_BROKER_NROUTES + FX_PIPELINE_NROUTES] = (fx_admin_route){
        .method = "GET", .path = "/v1/cluster", .on_request = fx_cluster_node_route, .user = cn};
    fx_admin_opts ao = {.bind = c->metrics_bind,
                        .token = token,
                        .metrics_per_stream = c->metrics_stream_labels,
                        .allowed_hosts = c->admin_allowed_hosts,
                        .probe_bind = c->probe_bind,
                        .tls_cert_file = c->admin_tls_cert_file,
                        .tls_key_file = c->admin_tls_key_file,
                        .routes = routes,
                        .nroutes = FX_ADMIN_BROKER_NROUTES + FX_PIPELINE_NROUTES + 1};
    fx_cluster_node_admin_opts(cn, &ao);
    if (fx_admin_start(&admin, &ao, err, sizeof(err)) != 0) {
        fprintf(stderr, "felix-broker: %s\n", err);
        fx_pipeline_free(pipe);
        fx_cluster_node_detach(cn);
        fx_broker_free(b);
        fx_cluster_node_free(cn);
        fx_authn_free(authn);
        return EXIT_START;
    }
    explicit_bzero(token, sizeof(token)); /* the endpoint keeps its copy */
    print_banner(c, b, admin, token_file);
    notices_ready(n, b);
    int sig = wait_stop_signal(&set, authn, b, c, retained);
    fx_admin_set_draining(admin, true); /* first: load balancers stop sending */
    notify_systemd("STOPPING=1");
    fprintf(stderr,
            "felix-broker: %s received, draining (at most %llu ms; a second signal exits "
            "at once)\n",
            sig_name(sig), (unsigned long long)(c->shutdown_drain_timeout_ns / 1000000ull));
    int status = drain(c, b, &set);
    notices_stop(n);      /* it reads the broker */
    fx_admin_free(admin); /* its routes use the pipeline view and the broker */
    fx_pipeline_free(pipe);
    fx_cluster_node_detach(cn);
    fx_broker_free(b);
    fx_cluster_node_free(cn); /* revokes the lease: the others claim at once */
    fx_authn_free(authn);     /* after the broker: its streams hold claims */
    return status;
}

static int serve(const fx_config *c, bool repair_durable, bool dev)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);                /* reloads TLS and JWKS (wait_stop_signal) */
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts */
    notices n;
    notices_start(&n);
    int status = serve_notified(c, repair_durable, dev, &n, &set);
    notices_stop(&n);
    return status;
}

static int run(const struct opts *o)
{
    fx_config c;
    fx_config_diag d;
    fx_config_src src = {.path = o->config,
                         .text = o->dev ? fx_config_dev_yaml : NULL,
                         .text_name = "<--dev>",
                         .envp = environ,
                         .sets = o->sets,
                         .nsets = o->nsets};
    fx_config_defaults(&c);
    warn_original_path(o);
    int rv = fx_config_load(&c, &src, &d);
    log_warnings(&d);
    if (rv) {
        fprintf(stderr, "felix-broker: invalid configuration: %s\n",
                d.error[0] ? d.error : fx_strerror(rv));
        fx_config_deinit(&c);
        return EXIT_CONFIG;
    }
    int status = 0;
    if (o->print) {
        status = fx_config_print(&c, stdout) ? EXIT_CONFIG : 0;
    } else if (o->check) {
        printf("felix-broker: configuration is valid\n");
    } else {
        status = serve(&c, o->repair_durable, o->dev);
        fx_rootlock_free(state_lock);
        state_lock = NULL;
    }
    fx_config_deinit(&c);
    return status;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    o.sets = calloc((size_t)argc, sizeof(*o.sets));
    if (!o.sets) {
        fprintf(stderr, "felix-broker: out of memory\n");
        return EXIT_CONFIG;
    }
    int rv = parse_args(argc, argv, &o);
    if (rv == 1) /* --help or --version answered */
        rv = 0;
    else if (rv == 0 && o.markdown)
        rv = fx_config_print_markdown(stdout) ? EXIT_CONFIG : 0;
    else if (rv == 0)
        rv = run(&o);
    free(o.sets);
    return rv;
}
