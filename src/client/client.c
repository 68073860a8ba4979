/* libfelix client: connect (resolve, handshake, auth), the QUIC callbacks
 * that route stream events to publish workers and subscriptions, lazy
 * connections, and close. Each client owns one QUIC client endpoint (its own
 * UDP socket and transport options) on the process-wide client loop.
 * Public functions: any thread; static callbacks: the client loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/hostport.h"
#include "base/log.h"
#include "client/client.h"

/* ---- small helpers ---------------------------------------------------------- */

uint64_t fxc_client_deadline(int timeout_ms)
{
    if (timeout_ms < 0)
        return 0;
    return fx_now_ns() + (uint64_t)timeout_ms * FX_NS_PER_MS;
}

int fxc_client_wait(fx_client *c, pthread_cond_t *cv, uint64_t deadline_ns)
{
    return fxc_client_wait_on(&c->mu, cv, deadline_ns);
}

int fxc_client_wait_on(pthread_mutex_t *mu, pthread_cond_t *cv, uint64_t deadline_ns)
{
    if (deadline_ns == 0) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    uint64_t now = fx_now_ns();
    if (now >= deadline_ns)
        return FX_ETIMEDOUT;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t abs = (uint64_t)ts.tv_sec * FX_NS_PER_S + (uint64_t)ts.tv_nsec + (deadline_ns - now);
    ts.tv_sec = (time_t)(abs / FX_NS_PER_S);
    ts.tv_nsec = (long)(abs % FX_NS_PER_S);
    int rv = pthread_cond_timedwait(cv, mu, &ts);
    return rv == ETIMEDOUT ? FX_ETIMEDOUT : 0;
}

bool fxc_client_post(fx_client *c, fx_task *t)
{
    pthread_mutex_lock(&c->mu);
    bool ok = !c->closed;
    if (ok)
        fx_loop_post(c->loop, t);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

int fxc_client_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rv = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return -rv;
}

int fxc_client_send_copy(cconn *cc, int64_t sid, const void *p, size_t len, bool fin)
{
    if (cc->qc == NULL)
        return FX_ECLOSED;
    fx_buf *b = NULL;
    int rv = fx_buf_new_copy(&b, p, len);
    if (rv != 0)
        return rv;
    rv = fx_quic_stream_send(cc->qc, sid, b, 0, len, fin);
    fx_buf_unref(b);
    return rv;
}

int fxc_client_send_msg(cconn *cc, int64_t sid, const fx_msg *m, bool fin)
{
    uint8_t *f = NULL;
    size_t n = 0;
    int rv = fx_msg_encode_frame(m, &f, &n);
    if (rv != 0)
        return rv;
    rv = fxc_client_send_copy(cc, sid, f, n, fin);
    free(f);
    return rv;
}

int fxc_client_send_auth(cconn *cc, int64_t sid)
{
    fx_msg m;
    bool idem = cc->c->o.idempotent;
    fx_msg_init_auth(&m, cc->c->o.tenant, cc->c->o.token, true,
                     FX_CLIENT_FLAGS | (idem ? FX_FLAG_PUBLISH_IDEMPOTENT : 0));
    /* The cache bits (wire-cache): cache_delete is used, and cache_value
     * may carry the entry's version (conditional writes). */
    m.client_features = FX_FEATURE_CACHE_DELETE | FX_FEATURE_CACHE_CONDITIONAL;
    m.has_client_features = true;
    /* A cluster broker may answer a subscribe not_leader, which route.c
     * follows; a standalone broker never does. */
    if (!cc->c->o.no_redirect) /* it follows moves as it follows redirects */
        m.client_features |= FX_FEATURE_REDIRECT | FX_FEATURE_SHARD_MOVED;
    /* Binary cache get / put / delete (cache.c) where the broker serves
     * them: a bit of the second word. */
    m.client_features |= FX_FEATURE_EXTENDED;
    m.client_features_hi = FX_FEATURE_HI_CACHE_BINARY;
    m.has_client_features_hi = true;
    if (idem) {
        /* The idempotent producer's bits: producer_init and 0x0109 served,
         * sequence_reused reported, publish_ok with offset and duplicate. */
        m.client_features |= FX_FEATURE_IDEMPOTENT_PRODUCER | FX_FEATURE_SEQUENCE_REUSED;
        m.client_features_hi |= FX_FEATURE_HI_PUBLISH_OFFSETS;
    }
    return fxc_client_send_msg(cc, sid, &m, false);
}

void fxc_client_ref(fx_client *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void client_free(fx_client *c)
{
    fxc_pub_deinit(c);
    fxc_cache_deinit(c);
    for (size_t i = 0; i < c->nconns; i++)
        free(c->conns[i]);
    free(c->conns);
    for (size_t i = 0; i < c->npeers; i++)
        free(c->peers[i]);
    free(c->peers);
    fxc_route_free(c);
    fx_budget_deinit(&c->budget);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->strs);
    free(c);
}

void fxc_client_unref(fx_client *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1)
        client_free(c);
}

/* ---- QUIC callbacks ------------------------------------------------------------ */

static void on_handshake_done(fx_quic_conn *qc, void *user)
{
    cconn *cc = user;
    (void)qc;
    cc->state = CS_READY;
    cc->was_ready = true;
    cc->backoff_ms = 0; /* a success resets the backoff */
    if (cc->gen > 0 && !cc->peer)
        atomic_fetch_add(&cc->c->reconnects, 1);
    fxc_pub_conn_ready(cc->c, cc);
    fxc_sub_conn_ready(cc->c, cc);
    fxc_grp_conn_ready(cc->c, cc);
    fxc_cache_conn_ready(cc->c, cc);
}

static void on_stream_open(fx_quic_conn *qc, int64_t sid, void *user)
{
    cconn *cc = user;
    if ((sid & 0x2) != 0) {
        fxc_evs_open(cc, sid);
        return;
    }
    /* The broker never opens bidi streams towards a client. */
    FX_LOG_WARN("client", "broker opened bidi stream %lld: reset", (long long)sid);
    fx_quic_stream_reset(qc, sid, 0);
}

static void on_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *su)
{
    (void)user;
    if (su == NULL) {
        fx_quic_stream_consume(qc, sid, len);
        return;
    }
    switch (*(int *)su) {
    case SK_WORKER:
        fxc_pub_on_data(su, data, len, fin);
        break;
    case SK_SUBREQ:
        fxc_sub_on_req_data(su, data, len, fin);
        break;
    case SK_EVENTS:
        fxc_evs_on_data(su, data, len, fin);
        break;
    case SK_GROUP:
        fxc_grp_on_req_data(su, data, len, fin);
        break;
    case SK_CACHE:
        fxc_cache_on_data(su, data, len, fin);
        break;
    }
}

static void on_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code, void *user,
                            void *su)
{
    (void)qc, (void)sid, (void)user;
    if (su == NULL)
        return;
    switch (*(int *)su) {
    case SK_WORKER:
        fxc_pub_on_close(su, reset, code);
        break;
    case SK_SUBREQ:
        fxc_sub_on_req_close(su, reset, code);
        break;
    case SK_EVENTS:
        fxc_evs_on_close(su, reset, code);
        break;
    case SK_GROUP:
        fxc_grp_on_req_close(su, reset, code);
        break;
    case SK_CACHE:
        fxc_cache_on_close(su, reset, code);
        break;
    }
}

static void on_writable(fx_quic_conn *qc, void *user)
{
    (void)qc;
    cconn *cc = user;
    fxc_pub_conn_ready(cc->c, cc);
    fxc_grp_conn_writable(cc->c, cc);
    fxc_cache_conn_ready(cc->c, cc);
}

static int close_reason(const fx_quic_close_info *info)
{
    if (info->reason == FX_ECLOSED && info->remote)
        return FX_ECONNLOST;
    return info->reason;
}

/* Whether |rv| closed a connection on an ICMP error (quic.h): the broker
 * at that address is gone, said at once. */
static bool icmp_closed(int rv)
{
    return rv == -ECONNREFUSED || rv == -EHOSTUNREACH || rv == -ENETUNREACH;
}

/* ---- reconnect ------------------------------------------------------------------- */

/* Failures that another attempt cannot fix: a refused certificate, or our
 * own endpoint going away. */
static bool retryable(int rv)
{
    return rv != FX_ESHUTDOWN && !(rv <= FX_ETLS && rv >= FX_ETLS_NAME);
}

/* Whether |cc|, just closed with |rv|, should be re-established: the client
 * finished connecting, is not being closed, and the option is on. */
static bool want_retry(fx_client *c, int rv)
{
    if (!c->o.reconnect || c->closing || c->ep == NULL || !retryable(rv))
        return false;
    pthread_mutex_lock(&c->mu);
    bool connected = c->connect_rv == 0;
    pthread_mutex_unlock(&c->mu);
    return connected;
}

/* Arms the backoff timer: reconnect_initial_ms, doubling up to
 * reconnect_max_ms; on_handshake_done resets it. Returns 0 or -ENOMEM. */
static int schedule_retry(fx_client *c, cconn *cc)
{
    uint64_t delay = cc->backoff_ms != 0 ? cc->backoff_ms : (uint64_t)c->o.reconnect_initial_ms;
    uint64_t next = delay * 2;
    cc->backoff_ms =
        next > (uint64_t)c->o.reconnect_max_ms ? (uint64_t)c->o.reconnect_max_ms : next;
    return fx_loop_timer_arm(c->loop, &cc->retry, fx_now_ns() + delay * FX_NS_PER_MS);
}

static void retry_fire(fx_loop *l, fx_timer *t, void *user)
{
    (void)l, (void)t;
    cconn *cc = user;
    fx_client *c = cc->c;
    if (c->closing || c->ep == NULL || cc->state != CS_RETRY)
        return;
    int rv = fx_quic_connect(c->ep, cc->ip, cc->port, &c->qco, cc, &cc->qc);
    if (rv == 0) {
        cc->state = CS_CONNECTING;
        return;
    }
    cc->qc = NULL;
    FX_LOG_WARN("client", "reconnect to %s failed: %s", c->o.server, fx_strerror(rv));
    if (schedule_retry(c, cc) != 0) {
        /* No memory for a timer: give up loudly, as a closed connection. */
        cc->state = CS_CLOSED;
        cc->close_rv = rv;
        snprintf(cc->close_text, sizeof(cc->close_text), "reconnect: %s", fx_strerror(rv));
        fxc_pub_conn_closed(c, cc, rv, cc->close_text, false);
        fxc_sub_conn_closed(c, cc, rv, cc->close_text, false);
        fxc_grp_conn_closed(c, cc, rv, cc->close_text, false);
        fxc_cache_conn_closed(c, cc, rv, cc->close_text, false);
    }
}

static void on_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    (void)qc;
    cconn *cc = user;
    fx_client *c = cc->c;
    cc->qc = NULL;
    cc->gen++; /* frames QUIC still holds for this connection are lost now */
    cc->close_rv = close_reason(info);
    if (icmp_closed(cc->close_rv))
        atomic_fetch_add(&c->icmp_errors, 1);
    snprintf(cc->close_text, sizeof(cc->close_text), "%s%s%s", fx_strerror(cc->close_rv),
             info->text[0] ? ": " : "", info->text);
    bool retry = want_retry(c, cc->close_rv);
    if (cc->peer) {
        /* A redirect's broker is not called again: its subscriptions go
         * back to the server (subscribe.c), which names the owner anew
         * (|retry| tells them to). */
        FX_LOG_WARN("client", "connection to %s lost (%s)", cc->key, cc->close_text);
        cc->state = CS_CLOSED;
        fxc_sub_conn_closed(c, cc, cc->close_rv, cc->close_text, retry);
        return;
    }
    if (retry && schedule_retry(c, cc) != 0) {
        FX_LOG_ERROR("client", "no memory to schedule a reconnect");
        retry = false;
    }
    if (retry)
        FX_LOG_WARN("client", "connection to %s lost (%s): reconnecting", c->o.server,
                    cc->close_text);
    cc->state = retry ? CS_RETRY : CS_CLOSED;
    fxc_pub_conn_closed(c, cc, cc->close_rv, cc->close_text, retry);
    fxc_sub_conn_closed(c, cc, cc->close_rv, cc->close_text, retry);
    fxc_grp_conn_closed(c, cc, cc->close_rv, cc->close_text, retry);
    fxc_cache_conn_closed(c, cc, cc->close_rv, cc->close_text, retry);
    pthread_mutex_lock(&c->mu);
    if (c->connect_rv == 1 && cc == c->conns[0]) {
        c->connect_rv = cc->close_rv;
        snprintf(c->connect_msg, sizeof(c->connect_msg), "connect failed: %s", cc->close_text);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static const fx_quic_callbacks CBS = {
    .on_handshake_done = on_handshake_done,
    .on_stream_open = on_stream_open,
    .on_stream_data = on_stream_data,
    .on_stream_close = on_stream_close,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};

/* ---- connections ---------------------------------------------------------------- */

/* Connects |cc| (new, or closed for good) to its address. */
static void conn_start(fx_client *c, cconn *cc)
{
    cc->state = CS_CONNECTING;
    cc->was_ready = false;
    int rv = fx_quic_connect(c->ep, cc->ip, cc->port, &c->qco, cc, &cc->qc);
    if (rv != 0) {
        cc->qc = NULL;
        cc->state = CS_CLOSED;
        cc->close_rv = rv;
        snprintf(cc->close_text, sizeof(cc->close_text), "connect: %s", fx_strerror(rv));
    }
}

static cconn *conn_new(fx_client *c, const char *ip, uint16_t port)
{
    cconn *cc = calloc(1, sizeof(*cc));
    if (cc == NULL)
        return NULL;
    cc->c = c;
    snprintf(cc->ip, sizeof(cc->ip), "%s", ip);
    cc->port = port;
    fxc_route_key(ip, port, cc->key);
    fx_timer_init(&cc->retry, retry_fire, cc);
    conn_start(c, cc);
    return cc;
}

cconn *fxc_client_conn(fx_client *c, size_t i)
{
    if (c->conns[i] == NULL)
        c->conns[i] = conn_new(c, c->ip, c->port);
    return c->conns[i];
}

/* Pacing of a peer an ICMP error closed, at most this long between attempts. */
#define PEER_REFUSED_MAX_MS 500

/* A peer whose connection an ICMP error ended (its broker's process died)
 * is still named by the cluster until that broker's lease expires, and
 * being refused takes no time, so its subscriptions would go round (home,
 * not_leader, refused) as fast as the loop runs: it is connected again
 * after a backoff instead, reconnect_initial_ms doubling up to 500 ms (and
 * not above reconnect_max_ms), reset by a handshake. Its subscriptions wait
 * for it as for any connection being made. */
static void peer_retry_later(fx_client *c, cconn *cc)
{
    uint64_t cap = (uint64_t)c->o.reconnect_max_ms < PEER_REFUSED_MAX_MS
                       ? (uint64_t)c->o.reconnect_max_ms
                       : PEER_REFUSED_MAX_MS;
    uint64_t delay = cc->backoff_ms != 0 ? cc->backoff_ms : (uint64_t)c->o.reconnect_initial_ms;
    if (delay > cap)
        delay = cap;
    cc->backoff_ms = delay * 2 > cap ? cap : delay * 2;
    if (fx_loop_timer_arm(c->loop, &cc->retry, fx_now_ns() + delay * FX_NS_PER_MS) != 0) {
        conn_start(c, cc); /* no timer: at once, as before */
        return;
    }
    cc->state = CS_RETRY;
    cc->was_ready = false; /* a subscribe waiting for it fails if this attempt does */
}

cconn *fxc_client_peer(fx_client *c, const char *ip, uint16_t port, int *prv)
{
    char key[FXC_ADDR_MAX];
    fxc_route_key(ip, port, key);
    if (strcmp(key, c->conns[0]->key) == 0)
        return c->conns[0];
    for (size_t i = 0; i < c->npeers; i++) {
        cconn *cc = c->peers[i];
        if (strcmp(cc->key, key) != 0)
            continue;
        if (cc->state == CS_CLOSED && c->ep != NULL) {
            if (icmp_closed(cc->close_rv))
                peer_retry_later(c, cc);
            else
                conn_start(c, cc);
        }
        if (cc->state == CS_CLOSED) {
            *prv = cc->close_rv;
            return NULL;
        }
        return cc;
    }
    if (c->npeers >= FXC_PEERS_MAX) {
        *prv = FX_EREDIRECT;
        return NULL;
    }
    cconn **np = realloc(c->peers, (c->npeers + 1) * sizeof(*np));
    if (np == NULL) {
        *prv = -ENOMEM;
        return NULL;
    }
    c->peers = np;
    cconn *cc = conn_new(c, ip, port);
    if (cc == NULL) {
        *prv = -ENOMEM;
        return NULL;
    }
    cc->peer = true;
    c->peers[c->npeers++] = cc;
    if (cc->state == CS_CLOSED) {
        *prv = cc->close_rv;
        return NULL;
    }
    return cc;
}

/* Called by publish.c when worker 0 finished its auth during connect. */
void fxc_client_on_first_auth(fx_client *c, int rv, uint16_t flags, const char *text)
{
    pthread_mutex_lock(&c->mu);
    if (c->connect_rv == 1) {
        c->server_flags = flags;
        c->connect_rv = rv;
        if (rv != 0)
            snprintf(c->connect_msg, sizeof(c->connect_msg), "auth rejected: %s", text);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static void connect_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_client *c = user;
    int rv = fx_quic_client_new(&c->ep, c->loop, &c->qo, &CBS, c);
    if (rv == 0) {
        cconn *cc = fxc_client_conn(c, 0);
        rv = cc == NULL ? -ENOMEM : cc->close_rv;
    }
    if (rv != 0)
        fxc_client_on_first_auth(c, rv, 0, fx_strerror(rv));
}

static void fin_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fxc_pub_finish(user);
}

static void close_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_client *c = user;
    /* Stops reconnecting: no timer may outlive the client on the shared loop. */
    c->closing = true;
    for (size_t i = 0; i < c->nconns; i++) {
        if (c->conns[i] != NULL)
            fx_loop_timer_cancel(c->loop, &c->conns[i]->retry);
    }
    for (size_t i = 0; i < c->npeers; i++)
        fx_loop_timer_cancel(c->loop, &c->peers[i]->retry);
    fxc_pub_shutdown(c);
    fxc_sub_shutdown(c);
    fxc_grp_shutdown(c);
    fxc_cache_shutdown(c);
    fx_quic_endpoint_free(c->ep);
    c->ep = NULL;
    pthread_mutex_lock(&c->mu);
    c->close_done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* ---- connect -------------------------------------------------------------------- */

/* Splits "host:port" / "[v6]:port" and resolves host to a numeric address. */
static int resolve(fx_client *c, const char *server)
{
    fx_hostport hp;
    const char *why;
    if (fx_hostport_split(server, &hp, &why) != 0)
        return fxc_client_set_error(FX_ECONFIG, "option server: '%s' is not host:port: %s",
                                    server != NULL ? server : "(null)", why);
    if (hp.port == 0)
        return fxc_client_set_error(FX_ECONFIG, "option server: port 0 in '%s'", server);
    const char *host = hp.host;
    long port = hp.port;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    int g = getaddrinfo(host, NULL, &hints, &res);
    if (g != 0)
        return fxc_client_set_error(FX_ECONFIG, "option server: cannot resolve '%s': %s", host,
                                    gai_strerror(g));
    const void *a = res->ai_family == AF_INET6
                        ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                        : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
    inet_ntop(res->ai_family, a, c->ip, sizeof(c->ip));
    freeaddrinfo(res);
    c->port = (uint16_t)port;
    return 0;
}

static char *dup_into(char **p, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    memcpy(*p, s, n);
    char *r = *p;
    *p += n;
    return r;
}

/* Copies the option strings into one allocation the client owns. */
static int own_strings(fx_client *c)
{
    fx_client_opts *o = &c->o;
    char host[256];
    if (o->server_name == NULL || o->server_name[0] == '\0') {
        int rv = fxc_client_server_host(o->server, host, sizeof(host));
        if (rv != 0)
            return rv;
        o->server_name = host;
    }
    const char *s[] = {o->server, o->server_name, o->ca_file, o->pin_sha256, o->tenant, o->token};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        n += s[i] != NULL ? strlen(s[i]) + 1 : 0;
    c->strs = malloc(n + 1);
    if (c->strs == NULL)
        return -ENOMEM;
    char *p = c->strs;
    o->server = dup_into(&p, o->server);
    o->server_name = dup_into(&p, o->server_name);
    o->ca_file = dup_into(&p, o->ca_file);
    o->pin_sha256 = dup_into(&p, o->pin_sha256);
    o->tenant = dup_into(&p, o->tenant);
    o->token = dup_into(&p, o->token);
    return 0;
}

/* Transport settings: the defaults, the process-wide FELIX_* transport
 * variables the broker also reads (datagram sizes, socket buffers), then the
 * client's own options. Returns 0 or FX_ECONFIG naming the bad variable. */
static int transport_opts(fx_client *c)
{
    fx_quic_opts_default(&c->qo);
    if (fx_quic_opts_from_env(&c->qo) != 0)
        return fxc_client_set_error(FX_ECONFIG,
                                    "invalid FELIX_UDP_*/FELIX_*_MTU/FELIX_MAX_UDP_PAYLOAD "
                                    "variable in the environment");
    c->qo.idle_timeout_ns = (uint64_t)c->o.idle_timeout_ms * FX_NS_PER_MS;
    c->qo.keepalive_ns = (uint64_t)c->o.keepalive_ms * FX_NS_PER_MS;
    c->qo.handshake_timeout_ns = (uint64_t)c->o.connect_timeout_ms * FX_NS_PER_MS;
    /* Broker-opened streams are event streams, one per subscribe request
     * (subscribe.c send_subscribe grants each): not the transport's 1,024
     * given back as they end, which let a broker make the client hold
     * that many partial frames (and grow ngtcp2's per-stream records). */
    c->qo.max_streams_uni = FXC_UNI_STREAMS_FIRST;
    c->qo.uni_credit_granted = true;
    if (c->o.stream_window_bytes != 0) {
        c->qo.stream_window = c->o.stream_window_bytes;
        c->qo.max_stream_window = c->o.stream_window_bytes;
    }
    c->qco = (fx_quic_connect_opts){.server_name = c->o.server_name,
                                    .ca_file = c->o.ca_file,
                                    .pin_sha256 = c->o.pin_sha256,
                                    .insecure = c->o.insecure};
    return 0;
}

static int client_new(fx_client **pc, const fx_client_opts *o)
{
    fx_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    atomic_init(&c->refs, 1);
    atomic_init(&c->next_request_id, 1);
    int rv = fxc_client_opts_check(o, &c->o);
    if (rv == 0)
        rv = own_strings(c);
    if (rv == 0)
        rv = resolve(c, c->o.server);
    if (rv == 0)
        rv = transport_opts(c);
    if (rv == 0)
        rv = -pthread_mutex_init(&c->mu, NULL);
    if (rv != 0) {
        free(c->strs);
        free(c);
        return rv;
    }
    fxc_client_cond_init(&c->cv);
    fx_task_init(&c->connect_task, connect_task, c);
    fx_task_init(&c->close_task, close_task, c);
    fx_task_init(&c->fin_task, fin_task, c);
    rv = fx_budget_init(&c->budget, c->o.publish_inflight_bytes, NULL);
    if (rv == 0)
        rv = fxc_pub_init(c);
    if (rv == 0 && (rv = fxc_cache_init(c)) != 0)
        fxc_pub_deinit(c);
    if (rv != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c->strs);
        free(c);
        return rv;
    }
    *pc = c;
    return 0;
}

/* Tears down on the loop and releases the runtime; the caller's reference
 * is dropped. */
static void client_teardown(fx_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    fx_budget_close(&c->budget);
    for (size_t i = 0; i < c->nworkers; i++)
        fx_queue_close(&c->workers[i].q);
    fx_loop_post(c->loop, &c->close_task);
    pthread_mutex_lock(&c->mu);
    while (!c->close_done)
        fxc_client_wait(c, &c->cv, 0);
    pthread_mutex_unlock(&c->mu);
    fxc_rt_release();
    fxc_client_unref(c);
}

static int wait_connected(fx_client *c)
{
    uint64_t deadline = fxc_client_deadline(c->o.connect_timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (c->connect_rv == 1) {
        if (fxc_client_wait(c, &c->cv, deadline) == FX_ETIMEDOUT && c->connect_rv == 1) {
            c->connect_rv = FX_ETIMEDOUT;
            snprintf(c->connect_msg, sizeof(c->connect_msg), "connect to %s timed out after %d ms",
                     c->o.server, c->o.connect_timeout_ms);
        }
    }
    int rv = c->connect_rv;
    if (rv != 0) /* the text was written on the loop: copy it to this thread */
        fxc_client_set_error(rv, "%s", c->connect_msg);
    pthread_mutex_unlock(&c->mu);
    return rv;
}

/* Connects to the one server |o->server|. */
static int connect_one(fx_client **pc, const fx_client_opts *o)
{
    fx_client *c = NULL;
    int rv = client_new(&c, o);
    if (rv != 0)
        return rv;
    rv = fxc_rt_acquire(&c->loop);
    if (rv != 0) {
        fxc_client_unref(c);
        return rv;
    }
    c->connect_rv = 1;
    fx_loop_post(c->loop, &c->connect_task);
    rv = wait_connected(c);
    if (rv != 0) {
        client_teardown(c);
        return rv;
    }
    *pc = c;
    return 0;
}

#define SEEDS_MAX 16

/* A seed list "host:port,host:port": each is tried in turn, with its own
 * connect_timeout_ms, until one completes the handshake and answers auth.
 * A list that is not all host:port is FX_ECONFIG before any is tried; a
 * failure of every seed returns the last one's code, the text naming each. */
static int connect_seeds(fx_client **pc, const fx_client_opts *o)
{
    /* The options once, the caller's |size| honoured; a seed's own failures
     * (its name not resolving included) then move on to the next. */
    fx_client_opts full;
    int rv = fxc_client_opts_check(o, &full);
    if (rv != 0)
        return rv;
    char *list = strdup(o->server);
    if (list == NULL)
        return -ENOMEM;
    char *seeds[SEEDS_MAX];
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p != NULL;
         p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        for (char *e = p + strlen(p); e > p && e[-1] == ' ';)
            *--e = '\0';
        fx_hostport hp;
        const char *why = NULL;
        if (n == SEEDS_MAX) {
            rv = fxc_client_set_error(FX_ECONFIG, "option server: more than %d addresses",
                                      SEEDS_MAX);
            break;
        }
        int sr = fx_hostport_split(p, &hp, &why);
        if (sr == 0 && hp.port == 0)
            why = "port 0";
        if (sr != 0 || hp.port == 0) {
            rv = fxc_client_set_error(FX_ECONFIG,
                                      "option server: '%s' in the list '%s' is not host:port: %s",
                                      p, o->server, why);
            break;
        }
        seeds[n++] = p;
    }
    /* "a,,b" and a trailing comma leave strtok_r nothing to say. */
    if (rv == 0 && (strstr(o->server, ",,") != NULL || o->server[0] == ',' ||
                    o->server[strlen(o->server) - 1] == ','))
        rv = fxc_client_set_error(FX_ECONFIG, "option server: empty address in the list '%s'",
                                  o->server);
    char text[1024] = "";
    size_t tl = 0;
    for (size_t i = 0; rv == 0 && i < n; i++) {
        fx_client_opts one = full;
        one.server = seeds[i];
        int r = connect_one(pc, &one);
        if (r == 0)
            break;
        char msg[384];
        fx_client_last_error(NULL, msg, sizeof(msg));
        FX_LOG_WARN("client", "server %s of the list: %s", seeds[i], msg);
        if (r == FX_EWOULDBLOCK_LOOP || r == -ENOMEM) {
            rv = r; /* every seed would fail the same: the text is set */
            break;
        }
        int w =
            snprintf(text + tl, sizeof(text) - tl, "%s%s: %s", i > 0 ? "; " : "", seeds[i], msg);
        if (w > 0)
            tl = (size_t)w < sizeof(text) - tl ? tl + (size_t)w : sizeof(text) - 1;
        if (i + 1 == n)
            rv = fxc_client_set_error(r, "no server of the list answered: %s", text);
    }
    free(list);
    return rv;
}

int fx_client_connect(fx_client **pc, const fx_client_opts *o)
{
    if (pc == NULL)
        return -EINVAL;
    *pc = NULL;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    if (o != NULL && o->server != NULL && strchr(o->server, ',') != NULL)
        return connect_seeds(pc, o);
    return connect_one(pc, o);
}

/* The close handshake: every live publish stream FINs after its queue, and
 * the broker FINs back only once it has handled every frame sent before
 * (QUIC acknowledging the bytes is not enough: frames parked at the
 * broker's ingress would be discarded when the connection closes). Waits
 * until |deadline_ns| (0 = no limit). Returns 0, FX_ETIMEDOUT, or the
 * failure of a stream (e.g. FX_ECONNLOST). fin_task is posted before
 * close_task, so it runs first. */
static int finish_streams(fx_client *c, uint64_t deadline_ns)
{
    pthread_mutex_lock(&c->mu);
    c->fin_left = -1;
    c->fin_rv = 0;
    pthread_mutex_unlock(&c->mu);
    if (!fxc_client_post(c, &c->fin_task))
        return FX_ECLOSED;
    int rv = 0;
    pthread_mutex_lock(&c->mu);
    while (c->fin_left != 0 && rv == 0)
        rv = fxc_client_wait(c, &c->cv, deadline_ns);
    if (c->fin_left == 0)
        rv = c->fin_rv;
    pthread_mutex_unlock(&c->mu);
    return rv;
}

int fx_client_close(fx_client *c, int timeout_ms)
{
    if (c == NULL)
        return 0;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    uint64_t deadline = fxc_client_deadline(timeout_ms);
    atomic_store(&c->pub_closing, true); /* new publishes fail FX_ECLOSED */
    int rv = fx_flush(c, timeout_ms);
    if (rv == 0)
        rv = finish_streams(c, deadline);
    if (rv == FX_ECLOSED)
        rv = 0;
    client_teardown(c);
    return rv;
}

int fx_client_get_stats(fx_client *c, fx_client_stats *st)
{
    if (c == NULL || st == NULL)
        return -EINVAL;
    *st = (fx_client_stats){.publishes_lost = atomic_load(&c->pub_lost),
                            .reconnects = atomic_load(&c->reconnects),
                            .redirects = atomic_load(&c->redirects),
                            .redirects_refused = atomic_load(&c->redirects_refused),
                            .route_misses = atomic_load(&c->route_misses),
                            .icmp_errors = atomic_load(&c->icmp_errors)};
    fx_budget_stats b;
    fx_budget_get_stats(&c->budget, &b);
    st->publish_budget_bytes = b.capacity;
    st->publish_budget_in_use = b.in_use;
    st->publish_budget_waits = b.waited;
    for (size_t i = 0; i < c->nworkers; i++) {
        fx_queue_stats q;
        fx_queue_get_stats(&c->workers[i].q, &q);
        st->publish_queue_capacity += q.capacity;
        st->publish_queue_depth += q.depth;
        st->publish_queue_waits += q.parks;
        const fxc_idem *id = &c->workers[i].idem;
        st->producer_inits += atomic_load_explicit(&id->inits, memory_order_relaxed);
        st->idempotent_resent += atomic_load_explicit(&id->resent, memory_order_relaxed);
        st->idempotent_duplicates += atomic_load_explicit(&id->duplicates, memory_order_relaxed);
        st->idempotent_refused += atomic_load_explicit(&id->refused, memory_order_relaxed);
    }
    return 0;
}
