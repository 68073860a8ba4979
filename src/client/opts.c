/* libfelix options: defaults, the FELIX_* environment overlay, validation,
 * and the per-thread "last error" text that explains a failed call.
 * Any thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hostport.h"
#include "base/log.h"
#include "client/client.h"

/* ---- last error text -------------------------------------------------------- */

static _Thread_local char tls_err[512];

int fxc_client_set_error(int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_err, sizeof(tls_err), fmt, ap);
    va_end(ap);
    return rv;
}

size_t fx_client_last_error(const fx_client *c, char *buf, size_t len)
{
    (void)c; /* the text is per thread, whatever the client */
    if (buf != NULL && len > 0)
        snprintf(buf, len, "%s", tls_err);
    return strlen(tls_err);
}

int fxc_client_map_remote(const char *msg)
{
    if (msg == NULL)
        return FX_EREMOTE;
    if (strstr(msg, "stream not found") != NULL)
        return FX_ENOSTREAM;
    if (strstr(msg, "forbidden") != NULL)
        return FX_EFORBIDDEN;
    if (strstr(msg, "broker shutting down") != NULL)
        return FX_ESHUTDOWN;
    /* A cluster stream frozen for a move: not appended, retry (at the new
     * owner once it is named). */
    if (strstr(msg, "not appended") != NULL || strstr(msg, "is moving to") != NULL)
        return FX_EMOVING;
    if (strstr(msg, "overloaded") != NULL || strstr(msg, "queue full") != NULL)
        return FX_EOVERLOAD;
    if (strstr(msg, "auth") != NULL)
        return FX_EAUTH;
    return FX_EREMOTE;
}

/* ---- defaults ---------------------------------------------------------------- */

void fx_client_opts_init(fx_client_opts *o)
{
    *o = (fx_client_opts){
        .size = sizeof(*o),
        .server = "127.0.0.1:5000",
        .server_name = NULL, /* the host part of |server| */
        .tenant = "t1",
        .token = "",
        .publish_conn_pool = 4,
        .publish_streams_per_conn = 2,
        .publish_queue_depth = 64,
        .publish_inflight_bytes = 4u << 20,
        .publish_sharding = FX_SHARDING_HASH_STREAM,
        .event_conn_pool = 1,
        .sub_queue_capacity = 256,
        .sub_queue_policy = FX_POLICY_DROP_NEW,
        .max_frame_bytes = 16u << 20,
        .connect_timeout_ms = 5000,
        .idle_timeout_ms = 30000,
        .keepalive_ms = 10000,
        .reconnect = true,
        .reconnect_initial_ms = 50,
        .reconnect_max_ms = 5000,
        .publish_coalesce = true,
        .publish_ack_timeout_ms = 30000,
        .cache_streams = 4,
        .cache_inflight = 4096,
        .cache_timeout_ms = 5000,
    };
}

/* ---- environment ----------------------------------------------------------- */

static int bad_env(const char *name, const char *val, const char *want)
{
    fxc_client_set_error(FX_ECONFIG, "%s: %s, got '%s'", name, want, val);
    FX_LOG_ERROR("client", "%s: %s, got '%s'", name, want, val);
    return FX_ECONFIG;
}

/* Parses an unsigned decimal up to |max|. 0 keeps the current value. */
static int env_u64(const char *name, uint64_t max, uint64_t *out, bool *set)
{
    const char *v = getenv(name);
    *set = false;
    if (v == NULL || *v == '\0')
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || v[0] == '-' || v[0] == '+' || x > max)
        return bad_env(name, v, "expected an unsigned integer in range");
    if (x == 0)
        return 0;
    *out = x;
    *set = true;
    return 0;
}

static int env_u32(const char *name, uint32_t max, uint32_t *field)
{
    uint64_t x = 0;
    bool set;
    int rv = env_u64(name, max, &x, &set);
    if (rv == 0 && set)
        *field = (uint32_t)x;
    return rv;
}

static int env_sharding(fx_client_opts *o)
{
    const char *v = getenv("FELIX_PUB_SHARDING");
    if (v == NULL || *v == '\0')
        return 0;
    if (strcmp(v, "hash_stream") == 0)
        o->publish_sharding = FX_SHARDING_HASH_STREAM;
    else if (strcmp(v, "rr") == 0)
        o->publish_sharding = FX_SHARDING_RR;
    else
        return bad_env("FELIX_PUB_SHARDING", v, "expected hash_stream or rr");
    return 0;
}

static int env_policy(fx_client_opts *o)
{
    const char *v = getenv("FELIX_CLIENT_SUB_QUEUE_POLICY");
    if (v == NULL || *v == '\0')
        return 0;
    if (strcmp(v, "block") == 0)
        o->sub_queue_policy = FX_POLICY_BLOCK;
    else if (strcmp(v, "drop_new") == 0)
        o->sub_queue_policy = FX_POLICY_DROP_NEW;
    else if (strcmp(v, "drop_old") == 0)
        o->sub_queue_policy = FX_POLICY_DROP_OLD;
    else
        return bad_env("FELIX_CLIENT_SUB_QUEUE_POLICY", v, "expected block, drop_new or drop_old");
    return 0;
}

static void env_str(const char *name, const char **field)
{
    const char *v = getenv(name);
    if (v != NULL && *v != '\0')
        *field = v;
}

/* The publish batching and ack-timeout variables. FELIX_PUBLISH_LINGER_US
 * takes 0 (no linger) too; FELIX_PUBLISH_COALESCE and FELIX_IDEMPOTENT are booleans. */
static int env_publish(fx_client_opts *o)
{
    const char *v = getenv("FELIX_PUBLISH_COALESCE");
    if (v != NULL && *v != '\0') {
        if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0)
            o->publish_coalesce = true;
        else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0)
            o->publish_coalesce = false;
        else
            return bad_env("FELIX_PUBLISH_COALESCE", v, "expected 1/true/on or 0/false/off");
    }
    v = getenv("FELIX_IDEMPOTENT");
    if (v != NULL && *v != '\0') {
        if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0)
            o->idempotent = true;
        else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0)
            o->idempotent = false;
        else
            return bad_env("FELIX_IDEMPOTENT", v, "expected 1/true/on or 0/false/off");
    }
    v = getenv("FELIX_PUBLISH_LINGER_US");
    if (v != NULL && strcmp(v, "0") == 0)
        o->publish_linger_us = 0;
    int rv = env_u32("FELIX_PUBLISH_LINGER_US", FX_CLIENT_LINGER_MAX_US, &o->publish_linger_us);
    uint32_t ms = 0;
    if (rv == 0)
        rv = env_u32("FELIX_PUBLISH_ACK_TIMEOUT_MS", FX_CLIENT_ACK_TIMEOUT_MAX_MS, &ms);
    if (rv == 0 && ms != 0)
        o->publish_ack_timeout_ms = (int)ms;
    return rv;
}

/* The cache request variables (fx_cache_*). */
static int env_cache(fx_client_opts *o)
{
    int rv = env_u32("FELIX_CACHE_STREAMS", FX_CLIENT_CACHE_STREAMS_MAX, &o->cache_streams);
    if (rv == 0)
        rv = env_u32("FELIX_CACHE_INFLIGHT", FX_CLIENT_CACHE_INFLIGHT_MAX, &o->cache_inflight);
    uint32_t ms = 0;
    if (rv == 0)
        rv = env_u32("FELIX_CACHE_TIMEOUT_MS", FX_CLIENT_ACK_TIMEOUT_MAX_MS, &ms);
    if (rv == 0 && ms != 0)
        o->cache_timeout_ms = (int)ms;
    return rv;
}

int fx_client_opts_from_env(fx_client_opts *o)
{
    int rv = 0;
    uint64_t bytes = o->publish_inflight_bytes;
    bool set;
    env_str("FELIX_AUTH_TENANT", &o->tenant);
    env_str("FELIX_AUTH_TOKEN", &o->token);
    if (rv == 0)
        rv = env_u32("FELIX_PUB_CONN_POOL", 64, &o->publish_conn_pool);
    if (rv == 0)
        rv = env_u32("FELIX_PUB_STREAMS_PER_CONN", 64, &o->publish_streams_per_conn);
    if (rv == 0)
        rv = env_u32("FELIX_PUBLISH_QUEUE_DEPTH", 1u << 20, &o->publish_queue_depth);
    if (rv == 0)
        rv = env_u64("FELIX_PUBLISH_INFLIGHT_BYTES", (uint64_t)1 << 40, &bytes, &set);
    if (rv == 0 && set)
        o->publish_inflight_bytes = (size_t)bytes;
    if (rv == 0)
        rv = env_sharding(o);
    if (rv == 0)
        rv = env_u32("FELIX_SUB_CONNS", 1024, &o->event_conn_pool);
    if (rv == 0)
        rv = env_u32("FELIX_EVENT_CONN_POOL", 1024, &o->event_conn_pool);
    if (rv == 0)
        rv = env_u32("FELIX_CLIENT_SUB_QUEUE_CAPACITY", 1u << 20, &o->sub_queue_capacity);
    if (rv == 0)
        rv = env_policy(o);
    if (rv == 0)
        rv = env_u32("FELIX_MAX_FRAME_BYTES", UINT32_MAX, &o->max_frame_bytes);
    if (rv == 0)
        rv = env_publish(o);
    if (rv == 0)
        rv = env_cache(o);
    return rv;
}

/* ---- validation ----------------------------------------------------------- */

static int bad_opt(const char *field, const char *why)
{
    return fxc_client_set_error(FX_ECONFIG, "option %s: %s", field, why);
}

/* Copies |o| into |out| field by field up to o->size, so an older caller's
 * shorter struct gets defaults for the fields it does not know. */
static int opts_copy(const fx_client_opts *o, fx_client_opts *out)
{
    fx_client_opts_init(out);
    if (o == NULL)
        return 0;
    if (o->size < offsetof(fx_client_opts, publish_conn_pool) || o->size > sizeof(*o))
        return bad_opt("size", "not sizeof(fx_client_opts): call fx_client_opts_init");
    memcpy(out, o, o->size);
    out->size = sizeof(*out);
    return 0;
}

static void fill_zero_defaults(fx_client_opts *o)
{
    fx_client_opts d;
    fx_client_opts_init(&d);
#define DEF(f)                                                                                     \
    if (o->f == 0)                                                                                 \
    o->f = d.f
    DEF(publish_conn_pool);
    DEF(publish_streams_per_conn);
    DEF(publish_queue_depth);
    DEF(publish_inflight_bytes);
    DEF(publish_sharding);
    DEF(event_conn_pool);
    DEF(sub_queue_capacity);
    DEF(sub_queue_policy);
    DEF(max_frame_bytes);
    DEF(connect_timeout_ms);
    DEF(idle_timeout_ms);
    DEF(keepalive_ms);
    DEF(reconnect_initial_ms);
    DEF(reconnect_max_ms);
    DEF(publish_ack_timeout_ms);
    DEF(cache_streams);
    DEF(cache_inflight);
    DEF(cache_timeout_ms);
#undef DEF
    if (o->server == NULL)
        o->server = d.server;
    if (o->tenant == NULL)
        o->tenant = d.tenant;
    if (o->token == NULL)
        o->token = d.token;
}

int fxc_client_server_host(const char *server, char *host, size_t cap)
{
    fx_hostport hp;
    const char *why;
    if (fx_hostport_split(server, &hp, &why) != 0)
        return fxc_client_set_error(FX_ECONFIG, "option server: '%s' is not host:port: %s",
                                    server != NULL ? server : "(null)", why);
    if (strlen(hp.host) >= cap)
        return fxc_client_set_error(FX_ECONFIG, "option server: host too long");
    strcpy(host, hp.host);
    return 0;
}

/* One way to verify the broker: a pin and a CA file would each decide alone
 * (and "insecure" overrides both), so a combination is refused rather than
 * one of them silently ignored. */
static int check_trust(const fx_client_opts *o)
{
    bool pin = o->pin_sha256 != NULL && o->pin_sha256[0] != '\0';
    bool ca = o->ca_file != NULL && o->ca_file[0] != '\0';
    if (pin && ca)
        return bad_opt("pin_sha256", "cannot be combined with ca_file: set one way to verify "
                                     "the broker's certificate");
    if (o->insecure && (pin || ca))
        return bad_opt("insecure", "cannot be combined with pin_sha256 or ca_file");
    return 0;
}

static int check_publish(const fx_client_opts *o)
{
    if (o->publish_linger_us > FX_CLIENT_LINGER_MAX_US)
        return bad_opt("publish_linger_us", "at most 1000000 (1 s)");
    if (o->publish_ack_timeout_ms < 0 || o->publish_ack_timeout_ms > FX_CLIENT_ACK_TIMEOUT_MAX_MS)
        return bad_opt("publish_ack_timeout_ms", "expected 1 .. 86400000 (0: the default)");
    if (o->cache_streams > FX_CLIENT_CACHE_STREAMS_MAX)
        return bad_opt("cache_streams", "at most 64");
    if (o->cache_inflight > FX_CLIENT_CACHE_INFLIGHT_MAX)
        return bad_opt("cache_inflight", "at most 1048576");
    if (o->cache_timeout_ms < 0 || o->cache_timeout_ms > FX_CLIENT_ACK_TIMEOUT_MAX_MS)
        return bad_opt("cache_timeout_ms", "expected 1 .. 86400000 (0: the default)");
    /* Every subscription shares the client's first connection: a larger
     * pool would be accepted and not applied. */
    if (o->event_conn_pool > 1)
        return bad_opt("event_conn_pool", "more than 1 is not supported: every subscription "
                                          "shares the client's first connection");
    return 0;
}

int fxc_client_opts_check(const fx_client_opts *o, fx_client_opts *out)
{
    int rv = opts_copy(o, out);
    if (rv != 0)
        return rv;
    fill_zero_defaults(out);
    if ((rv = check_trust(out)) != 0)
        return rv;
    if (out->tenant[0] == '\0')
        return bad_opt("tenant", "empty");
    if (out->publish_conn_pool > 64 || out->publish_streams_per_conn > 64)
        return bad_opt("publish_conn_pool", "pool x streams must be at most 64 x 64");
    if (out->publish_sharding > FX_SHARDING_RR)
        return bad_opt("publish_sharding", "unknown value");
    if (out->sub_queue_policy > FX_POLICY_DROP_OLD)
        return bad_opt("sub_queue_policy", "unknown value");
    if (out->sub_queue_capacity > FX_QUEUE_MAX_CAPACITY || out->publish_queue_depth > (1u << 20))
        return bad_opt("sub_queue_capacity", "too large");
    if (out->connect_timeout_ms < 0 || out->idle_timeout_ms < 0 || out->keepalive_ms < 0)
        return bad_opt("connect_timeout_ms", "negative duration");
    if (out->max_frame_bytes < FX_WIRE_HEADER_LEN)
        return bad_opt("max_frame_bytes", "too small");
    return check_publish(out);
}
