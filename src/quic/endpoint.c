/* QUIC endpoints: one UDP socket on one fx_loop, the map from our connection
 * IDs to connections, datagram dispatch (including the server's accept path
 * and its half-open cap), the wait list for a full socket, the reaper that
 * reports and frees finished connections, and the options. Loop thread only,
 * except option helpers (any thread). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <gnutls/crypto.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "quic/internal.h"

/* ---- options ------------------------------------------------------------------ */

void fx_quic_opts_default(fx_quic_opts *o)
{
    *o = (fx_quic_opts){
        .idle_timeout_ns = 30 * FX_NS_PER_S,
        .keepalive_ns = 10 * FX_NS_PER_S,
        .handshake_timeout_ns = 10 * FX_NS_PER_S,
        .stream_window = 1u << 20,
        .conn_window = 16u << 20,
        .max_stream_window = 16u << 20,
        .max_conn_window = 64u << 20,
        .unacked_cap = 16u << 20,
        .max_streams_bidi = 1024,
        .max_streams_uni = 1024,
        .udp_send_buffer = 8 << 20,
        .udp_recv_buffer = 8 << 20,
        .initial_mtu = 1200,
        .mtu_upper_bound = 1452,
        .max_udp_payload = FX_QUIC_MAX_DATAGRAM,
        .loopback_mtu = FX_QUIC_LOOPBACK_MTU,
        .gso = true,
        .gro = true,
        .max_half_open = 1024,
        .retry_half_open = 256,
        .stateless_reset_rate = 100,
        .alpn = "felix",
    };
}

static int env_size(const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) {
        fx_quic_log(FX_QLOG_ERROR, "%s=%s: expected an integer in [%llu, %llu]", name, v,
                    (unsigned long long)lo, (unsigned long long)hi);
        return FX_ECONFIG;
    }
    *out = x;
    return 0;
}

int fx_quic_opts_from_env(fx_quic_opts *o)
{
    uint64_t v;
    int rv, err = 0;
    if ((rv = env_size("FELIX_UDP_SEND_BUFFER", 4096, INT_MAX, &v)) == 0)
        o->udp_send_buffer = (int)v;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_UDP_RECV_BUFFER", 4096, INT_MAX, &v)) == 0)
        o->udp_recv_buffer = (int)v;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_INITIAL_MTU", 1200, 65507, &v)) == 0)
        o->initial_mtu = (size_t)v;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_MTU_UPPER_BOUND", 1200, 65507, &v)) == 0)
        o->mtu_upper_bound = (size_t)v;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_MAX_UDP_PAYLOAD", 1200, FX_QUIC_MAX_DATAGRAM, &v)) == 0)
        o->max_udp_payload = (size_t)v;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_CONN_STATS_MS", 0, 3600000, &v)) == 0)
        o->stats_log_ns = v * 1000000u;
    err = rv < 0 ? rv : err;
    if ((rv = env_size("FELIX_LOOPBACK_MTU", 0, 65507, &v)) == 0) {
        if (v != 0 && v < 1200) {
            fx_quic_log(FX_QLOG_ERROR, "FELIX_LOOPBACK_MTU=%llu: expected 0 or [1200, 65507]",
                        (unsigned long long)v);
            rv = FX_ECONFIG;
        }
        o->loopback_mtu = (size_t)v;
    }
    err = rv < 0 ? rv : err;
    return err;
}

static int check_opts(const fx_quic_opts *o)
{
    if (o->mtu_upper_bound < 1200 || o->mtu_upper_bound > 65507 || o->initial_mtu < 1200 ||
        o->max_udp_payload < 1200 || o->max_udp_payload > FX_QUIC_MAX_DATAGRAM ||
        (o->loopback_mtu != 0 && (o->loopback_mtu < 1200 || o->loopback_mtu > 65507)) ||
        o->unacked_cap == 0 || o->stream_window == 0 || o->conn_window == 0)
        return FX_ECONFIG;
    return 0;
}

/* ---- connection ID map --------------------------------------------------------- */

static size_t cid_bucket(const fx_quic_endpoint *ep, const uint8_t *p, size_t len)
{
    /* Keyed so that peer-chosen CIDs (a client's first DCID) cannot be
     * crafted to collide. */
    uint64_t h = ep->hash_seed ^ len;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    return (size_t)h & (ep->ncbuckets - 1);
}

static cident *cid_find(fx_quic_endpoint *ep, const uint8_t *p, size_t len)
{
    if (ep->ncbuckets == 0)
        return NULL;
    for (cident *e = ep->cbuckets[cid_bucket(ep, p, len)]; e != NULL; e = e->next)
        if (e->cid.datalen == len && memcmp(e->cid.data, p, len) == 0)
            return e;
    return NULL;
}

static int cid_grow(fx_quic_endpoint *ep)
{
    size_t n = ep->ncbuckets ? ep->ncbuckets * 2 : 64;
    cident **nb = calloc(n, sizeof(*nb));
    if (nb == NULL)
        return -ENOMEM;
    cident **old = ep->cbuckets;
    size_t oldn = ep->ncbuckets;
    ep->cbuckets = nb;
    ep->ncbuckets = n;
    for (size_t i = 0; i < oldn; i++) {
        for (cident *e = old[i], *next; e != NULL; e = next) {
            next = e->next;
            size_t b = cid_bucket(ep, e->cid.data, e->cid.datalen);
            e->next = nb[b];
            nb[b] = e;
        }
    }
    free(old);
    return 0;
}

int fx_quic_ep_cid_add(fx_quic_endpoint *ep, const ngtcp2_cid *cid, fx_quic_conn *c)
{
    if (cid_find(ep, cid->data, cid->datalen) != NULL)
        return FX_EINTERNAL; /* a 120-bit random collision, or a replayed Initial */
    if (ep->ncids >= ep->ncbuckets && cid_grow(ep) < 0)
        return -ENOMEM;
    cident *e = malloc(sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    e->cid = *cid;
    e->conn = c;
    size_t b = cid_bucket(ep, cid->data, cid->datalen);
    e->next = ep->cbuckets[b];
    ep->cbuckets[b] = e;
    ep->ncids++;
    return 0;
}

void fx_quic_ep_cid_remove(fx_quic_endpoint *ep, const ngtcp2_cid *cid)
{
    if (ep->ncbuckets == 0)
        return;
    for (cident **pp = &ep->cbuckets[cid_bucket(ep, cid->data, cid->datalen)]; *pp != NULL;
         pp = &(*pp)->next) {
        cident *e = *pp;
        if (ngtcp2_cid_eq(&e->cid, cid)) {
            *pp = e->next;
            free(e);
            ep->ncids--;
            return;
        }
    }
}

void fx_quic_ep_new_cid(fx_quic_endpoint *ep, ngtcp2_cid *cid)
{
    uint8_t b[FX_QUIC_SCID_LEN];
    (void)gnutls_rnd(GNUTLS_RND_NONCE, b, sizeof(b)); /* cannot fail once initialized */
    b[0] = ep->o.loop_id;
    ngtcp2_cid_init(cid, b, sizeof(b));
}

/* ---- dispatch ------------------------------------------------------------------ */

void fx_quic_ep_path(fx_quic_endpoint *ep, fx_quic_conn *c, ngtcp2_path *path)
{
    path->local.addr = (ngtcp2_sockaddr *)&c->local;
    path->local.addrlen = c->locallen;
    path->remote.addr = (ngtcp2_sockaddr *)&c->remote;
    path->remote.addrlen = c->remotelen;
    path->user_data = NULL;
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr_storage *b, socklen_t blen)
{
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return blen >= sizeof(*y) && x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
}

/* A stateless reset carries no connection ID of ours, only a token: hand
 * an unknown short-header datagram to the connections that talk to its
 * sender, which recognise their token (ngtcp2 ignores it otherwise). Client
 * endpoints only: they hold few connections, while on a server this would
 * be a scan per spoofed datagram. */
static bool maybe_reset(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                        const uint8_t *data, size_t len)
{
    bool matched = false;
    for (fx_quic_conn *c = ep->conns; c != NULL; c = c->next) {
        if (!c->dead && same_addr(from, &c->remote, c->remotelen)) {
            fx_quic_conn_read(c, from, fromlen, data, len);
            matched = true;
        }
    }
    return matched;
}

void fx_quic_ep_on_datagram(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                            const uint8_t *data, size_t len)
{
    ngtcp2_version_cid vc;
    int rv = ngtcp2_pkt_decode_version_cid(&vc, data, len, FX_QUIC_SCID_LEN);
    if (rv != 0) {
        /* Malformed, or an unsupported version: we answer neither. */
        ep->st.rx_dropped++;
        return;
    }
    cident *e = cid_find(ep, vc.dcid, vc.dcidlen);
    if (e != NULL) {
        if (!e->conn->dead)
            fx_quic_conn_read(e->conn, from, fromlen, data, len);
        return;
    }
    if (ep->group != NULL) {
        size_t owner = fx_quic_owner_of(vc.dcid, vc.dcidlen, fx_quic_server_group_size(ep->group));
        if (owner != ep->member) {
            if (!fx_quic_group_forward(ep, owner, from, fromlen, data, len))
                ep->st.rx_dropped++;
            return;
        }
    }
    if (ep->freeing) {
        ep->st.rx_dropped++;
    } else if (data[0] & 0x80) {
        if (ep->server)
            fx_quic_accept_initial(ep, from, fromlen, data, len);
        else
            ep->st.rx_dropped++;
    } else if (!ep->server && maybe_reset(ep, from, fromlen, data, len)) {
        return;
    } else {
        /* Counted as dropped whether or not a reset answers it. */
        ep->st.rx_dropped++;
        fx_quic_stateless_reset(ep, from, fromlen, vc.dcid, vc.dcidlen, len);
    }
}

static void on_socket(fx_loop *l, fx_watch *w, uint32_t events);
static void drain_deadline(fx_loop *l, fx_timer *t, void *user);

void fx_quic_ep_flush_dirty(fx_quic_endpoint *ep)
{
    while (ep->dirty_head != NULL) {
        fx_quic_conn *c = ep->dirty_head;
        ep->dirty_head = c->dnext;
        c->dirty = false;
        fx_quic_conn_flush(c); /* no-op for a connection that just ended */
    }
}

/* ---- socket back-pressure -------------------------------------------------- */

void fx_quic_ep_wait_writable(fx_quic_endpoint *ep, fx_quic_conn *c)
{
    if (!c->waiting) {
        c->waiting = true;
        c->wnext = NULL;
        if (ep->wait_tail != NULL)
            ep->wait_tail->wnext = c;
        else
            ep->wait_head = c;
        ep->wait_tail = c;
    }
    if (!ep->watch_out && fx_loop_watch_mod(ep->loop, &ep->watch, EPOLLIN | EPOLLOUT) == 0)
        ep->watch_out = true;
}

static void wait_remove(fx_quic_endpoint *ep, fx_quic_conn *c)
{
    if (!c->waiting)
        return;
    fx_quic_conn **pp = &ep->wait_head;
    fx_quic_conn *prev = NULL;
    while (*pp != c) {
        prev = *pp;
        pp = &(*pp)->wnext;
    }
    *pp = c->wnext;
    if (ep->wait_tail == c)
        ep->wait_tail = prev;
    c->waiting = false;
}

static void on_writable(fx_quic_endpoint *ep)
{
    if (ep->tx_pending) {
        int rv = fx_quic_udp_send(ep, (struct sockaddr *)&ep->tx_to, ep->tx_tolen,
                                  ep->tx_has_src ? (struct sockaddr *)&ep->tx_src : NULL, ep->tx,
                                  ep->tx_len, ep->tx_seg);
        if (rv == -EAGAIN)
            return;
        ep->tx_pending = false;
    }
    if (fx_loop_watch_mod(ep->loop, &ep->watch, EPOLLIN) == 0)
        ep->watch_out = false;
    while (ep->wait_head != NULL && !ep->tx_pending) {
        fx_quic_conn *c = ep->wait_head;
        wait_remove(ep, c);
        fx_quic_conn_flush(c);
    }
}

static void on_socket(fx_loop *l, fx_watch *w, uint32_t events)
{
    fx_quic_endpoint *ep = w->user;
    if (events & EPOLLOUT)
        on_writable(ep);
    if (events & (EPOLLIN | EPOLLERR))
        fx_quic_udp_read(ep);
}

/* ---- reaping ------------------------------------------------------------------ */

static void unlink_conn(fx_quic_endpoint *ep, fx_quic_conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        ep->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

static void log_stats(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fx_quic_endpoint *ep = user;
    for (fx_quic_conn *c = ep->conns; c != NULL; c = c->next)
        fx_quic_conn_log_stats(c);
    fx_quic_ep_stats_arm(ep);
}

void fx_quic_ep_stats_arm(fx_quic_endpoint *ep)
{
    if (ep->o.stats_log_ns == 0 || ep->conns == NULL || ep->freeing ||
        fx_timer_is_armed(&ep->stats_timer))
        return;
    if (fx_loop_timer_arm(ep->loop, &ep->stats_timer, fx_loop_now(ep->loop) + ep->o.stats_log_ns) <
        0)
        fx_quic_log(FX_QLOG_WARN, "cannot arm the connection statistics timer");
}

static void reap_all(fx_loop *l, fx_timer *t, void *user)
{
    fx_quic_endpoint *ep = user;
    while (ep->dead_head != NULL) {
        fx_quic_conn *c = ep->dead_head;
        ep->dead_head = c->next;
        wait_remove(ep, c);
        if (ep->cb.on_conn_closed != NULL)
            ep->cb.on_conn_closed(c, &c->info, c->user);
        fx_quic_conn_destroy(c);
        ep->st.conns_open--;
        FX_GAUGE_SUB(quic_conn_open, 1);
        FX_COUNTER_INC(quic_conn_closed);
    }
}

void fx_quic_ep_reap(fx_quic_endpoint *ep, fx_quic_conn *c)
{
    unlink_conn(ep, c);
    c->next = ep->dead_head;
    ep->dead_head = c;
    if (!ep->freeing)
        fx_loop_timer_arm(ep->loop, &ep->reap_timer, 0);
}

/* ---- lifecycle ------------------------------------------------------------------ */

static int parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        *len = sizeof(*a4);
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        *len = sizeof(*a6);
        return 0;
    }
    return FX_ECONFIG;
}

int fx_quic_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    return parse_addr(ip, port, ss, len);
}

int fx_quic_addr_for_socket(const fx_quic_endpoint *ep, struct sockaddr_storage *ss, socklen_t *len)
{
    if (ss->ss_family == ep->local.ss_family)
        return 0;
    if (ss->ss_family == AF_INET6)
        return FX_ECONFIG; /* this host gave us no IPv6 socket */
    struct sockaddr_in a4;
    memcpy(&a4, ss, sizeof(a4));
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = a4.sin_port};
    a6.sin6_addr.s6_addr[10] = 0xff;
    a6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&a6.sin6_addr.s6_addr[12], &a4.sin_addr, 4);
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, &a6, sizeof(a6));
    *len = sizeof(a6);
    return 0;
}

static int ep_new(fx_quic_endpoint **pep, fx_loop *loop, bool server, const fx_quic_opts *o,
                  const fx_quic_callbacks *cb, void *user)
{
    if (check_opts(o) < 0)
        return FX_ECONFIG;
    fx_quic_endpoint *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return -ENOMEM;
    ep->loop = loop;
    ep->o = *o;
    if (cb != NULL)
        ep->cb = *cb;
    ep->user = user;
    ep->server = server;
    ep->fd = -1;
    fx_timer_init(&ep->reap_timer, reap_all, ep);
    fx_timer_init(&ep->stats_timer, log_stats, ep);
    fx_timer_init(&ep->drain_timer, drain_deadline, ep);
    /* Room for one aggregate plus one more largest packet, which may have
     * to start the next aggregate. */
    size_t largest = o->mtu_upper_bound > o->loopback_mtu ? o->mtu_upper_bound : o->loopback_mtu;
    ep->tx_cap = FX_QUIC_GSO_MAX + largest;
    ep->tx = malloc(ep->tx_cap);
    ep->rx = malloc((size_t)FX_QUIC_RX_BATCH * FX_QUIC_RX_BUF);
    if (ep->tx == NULL || ep->rx == NULL ||
        gnutls_rnd(GNUTLS_RND_KEY, ep->reset_secret, sizeof(ep->reset_secret)) < 0 ||
        gnutls_rnd(GNUTLS_RND_KEY, ep->token_secret, sizeof(ep->token_secret)) < 0 ||
        gnutls_rnd(GNUTLS_RND_NONCE, &ep->hash_seed, sizeof(ep->hash_seed)) < 0 ||
        gnutls_rnd(GNUTLS_RND_NONCE, &ep->rng, sizeof(ep->rng)) < 0) {
        fx_quic_endpoint_free(ep);
        return -ENOMEM;
    }
    ep->rng |= 1;
    *pep = ep;
    return 0;
}

static bool is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    return memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &in6addr_any,
                  sizeof(in6addr_any)) == 0;
}

static int ep_start(fx_quic_endpoint *ep, const struct sockaddr_storage *ss, socklen_t len)
{
    /* Only servers answer from the address they were reached at; a client
     * keeps one local address per connection path. */
    ep->wildcard = ep->server && is_wildcard(ss);
    int rv = fx_quic_udp_open(ep, (const struct sockaddr *)ss, len);
    if (rv < 0)
        return rv;
    ep->rx_local = ep->local;
    ep->rx_locallen = ep->locallen;
    return fx_loop_watch(ep->loop, &ep->watch, ep->fd, EPOLLIN, on_socket, ep);
}

int fx_quic_server_new(fx_quic_endpoint **pep, fx_loop *loop, const char *ip, uint16_t port,
                       const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user)
{
    return fx_quic_server_new_member(pep, loop, ip, port, o, cb, user, NULL, 0);
}

int fx_quic_server_new_member(fx_quic_endpoint **pep, fx_loop *loop, const char *ip, uint16_t port,
                              const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user,
                              struct fx_quic_server_group *group, size_t member)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_addr(ip, port, &ss, &len) < 0)
        return FX_ECONFIG;
    fx_quic_endpoint *ep;
    int rv = ep_new(&ep, loop, true, o, cb, user);
    if (rv < 0)
        return rv;
    ep->group = group;
    ep->member = member;
    rv = fx_quic_tls_server_init(ep);
    if (rv == 0)
        rv = fx_quic_load_reset_secret(ep);
    if (rv == 0)
        rv = ep_start(ep, &ss, len);
    if (rv < 0) {
        fx_quic_endpoint_free(ep);
        return rv;
    }
    fx_quic_log(FX_QLOG_INFO, "quic server listening on %s port %u", ip, (unsigned)ep->port);
    *pep = ep;
    return 0;
}

/* Binds a client endpoint to |ip| (any port) or, when |ip| is NULL or empty,
 * to the dual-stack wildcard: "::" reaches IPv4 (mapped) and IPv6 servers
 * alike; a kernel without IPv6 refuses the family and we stay on IPv4. */
static int client_bind(fx_quic_endpoint *ep, const char *ip)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (ip != NULL && ip[0] != '\0') {
        int rv = parse_addr(ip, 0, &ss, &len);
        return rv < 0 ? rv : ep_start(ep, &ss, len);
    }
    struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, &any6, sizeof(any6));
    int rv = ep_start(ep, &ss, sizeof(any6));
    if (rv == -EAFNOSUPPORT) {
        struct sockaddr_in any = {.sin_family = AF_INET};
        memset(&ss, 0, sizeof(ss));
        memcpy(&ss, &any, sizeof(any));
        rv = ep_start(ep, &ss, sizeof(any));
    }
    return rv;
}

int fx_quic_client_new(fx_quic_endpoint **pep, fx_loop *loop, const fx_quic_opts *o,
                       const fx_quic_callbacks *cb, void *user)
{
    fx_quic_endpoint *ep;
    int rv = ep_new(&ep, loop, false, o, cb, user);
    if (rv < 0)
        return rv;
    rv = client_bind(ep, o->client_bind_ip);
    if (rv < 0) {
        fx_quic_endpoint_free(ep);
        return rv;
    }
    *pep = ep;
    return 0;
}

void fx_quic_endpoint_close_all(fx_quic_endpoint *ep)
{
    if (ep == NULL)
        return;
    ep->freeing = true;
    /* Say goodbye to every peer, then report synchronously. */
    while (ep->conns != NULL) {
        fx_quic_conn *c = ep->conns;
        if (!c->dead) {
            fx_quic_conn_close(c, 0, "endpoint shutting down");
            c->info.reason = FX_ESHUTDOWN;
            fx_quic_conn_flush(c);
        }
        if (!c->dead)
            fx_quic_conn_finish(c, FX_ESHUTDOWN);
    }
}

void fx_quic_endpoint_free(fx_quic_endpoint *ep)
{
    if (ep == NULL)
        return;
    fx_quic_endpoint_close_all(ep);
    fx_loop_timer_cancel(ep->loop, &ep->reap_timer);
    fx_loop_timer_cancel(ep->loop, &ep->drain_timer);
    fx_loop_timer_cancel(ep->loop, &ep->stats_timer);
    fx_quic_test_delay_free(ep);
    reap_all(ep->loop, &ep->reap_timer, ep);
    if (ep->fd >= 0) {
        fx_loop_unwatch(ep->loop, &ep->watch);
        close(ep->fd);
    }
    fx_quic_creds_unref(ep->creds);
    for (size_t i = 0; i < ep->ncbuckets; i++) {
        for (cident *e = ep->cbuckets[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e);
        }
    }
    free(ep->cbuckets);
    free(ep->tx);
    free(ep->rx);
    free(ep);
}

static void drain_deadline(fx_loop *l, fx_timer *t, void *user)
{
    fx_quic_endpoint *ep = user;
    for (fx_quic_conn *c = ep->conns; c != NULL; c = c->next)
        fx_quic_conn_close(c, 0, "draining: deadline reached");
}

int fx_quic_endpoint_drain(fx_quic_endpoint *ep, uint64_t deadline_ns)
{
    ep->draining = true;
    int rv = fx_loop_timer_arm(ep->loop, &ep->drain_timer, deadline_ns);
    /* Connections with nothing in flight close at their next write. */
    for (fx_quic_conn *c = ep->conns; c != NULL; c = c->next)
        fx_quic_conn_schedule(c);
    return rv;
}

uint16_t fx_quic_endpoint_port(const fx_quic_endpoint *ep)
{
    return ep->port;
}

const char *fx_quic_endpoint_fingerprint(const fx_quic_endpoint *ep)
{
    return ep->fingerprint;
}

int fx_quic_endpoint_set_credentials(fx_quic_endpoint *ep, fx_quic_creds *cr)
{
    if (!ep->server)
        return FX_ECONFIG;
    /* Connections hold their own reference: dropping ours frees the old
     * credentials only once the last session using them is gone. */
    fx_quic_creds *old = ep->creds;
    ep->creds = fx_quic_creds_ref(cr);
    memcpy(ep->fingerprint, cr->fingerprint, sizeof(ep->fingerprint));
    fx_quic_creds_unref(old);
    return 0;
}

int fx_quic_endpoint_reload_credentials(fx_quic_endpoint *ep)
{
    if (!ep->server)
        return FX_ECONFIG;
    fx_quic_creds *cr;
    int rv = fx_quic_creds_load(&cr, &ep->o);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "certificate not reloaded (%s): keeping sha256=%s",
                    rv == FX_ETLS ? "invalid certificate or key" : fx_strerror(rv),
                    ep->fingerprint);
        return rv;
    }
    rv = fx_quic_endpoint_set_credentials(ep, cr);
    fx_quic_creds_unref(cr);
    fx_quic_log(FX_QLOG_INFO, "certificate reloaded: new handshakes present sha256=%s",
                ep->fingerprint);
    return rv;
}

void fx_quic_endpoint_get_stats(const fx_quic_endpoint *ep, fx_quic_stats *st)
{
    *st = ep->st;
}

void fx_quic_endpoint_set_test_drop(fx_quic_endpoint *ep, uint32_t permille)
{
    ep->o.test_drop_permille = permille > 1000 ? 1000 : permille;
}

fx_loop *fx_quic_endpoint_loop(const fx_quic_endpoint *ep)
{
    return ep->loop;
}

fx_loop *fx_quic_conn_loop(const fx_quic_conn *c)
{
    return c->ep->loop;
}
