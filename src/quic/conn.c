/* QUIC connections on ngtcp2 0.12: creation (server accept, client connect),
 * the ngtcp2 callbacks, reading datagrams, the write path (stream
 * coalescing with WRITE_STREAM_FLAG_MORE, GSO aggregates, the 0.12 pacing
 * workaround), the one timer per connection that serves both ngtcp2's expiry
 * and "write at the end of this turn", and closing with a reason.
 * Loop thread only. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "quic/internal.h"

static void on_timer(fx_loop *l, fx_timer *t, void *user);
static void handle_error(fx_quic_conn *c, int rv);

/* ---- ngtcp2 callbacks ------------------------------------------------------ */

static void cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len); /* no failure mode once initialized */
}

static int cb_new_cid(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *user)
{
    fx_quic_conn *c = user;
    (void)cidlen; /* we always use our own length, fixed at creation */
    fx_quic_ep_new_cid(c->ep, cid);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, c->ep->reset_secret,
                                                     sizeof(c->ep->reset_secret), cid) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    if (fx_quic_conn_cid_remember(c, cid) < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_remove_cid(ngtcp2_conn *q, const ngtcp2_cid *cid, void *user)
{
    fx_quic_conn_cid_forget(user, cid);
    return 0;
}

static int cb_handshake_completed(ngtcp2_conn *q, void *user)
{
    fx_quic_conn *c = user;
    c->handshake_done = true;
    if (c->half_open) {
        c->half_open = false;
        c->ep->half_open--;
    }
    fx_quic_tls_note_alpn(c);
    if (c->ep->cb.on_handshake_done != NULL && !c->closing)
        c->ep->cb.on_handshake_done(c, c->user);
    return 0;
}

static int cb_stream_open(ngtcp2_conn *q, int64_t sid, void *user)
{
    fx_quic_conn *c = user;
    qstream *s;
    if (fx_quic_stream_create(c, sid, NULL, &s) < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_set_stream_user_data(q, sid, s);
    if (c->ep->draining) {
        /* Draining: no new work. The stream closes through ngtcp2. */
        ngtcp2_conn_shutdown_stream(q, sid, FX_QUIC_DRAIN_CODE);
        return 0;
    }
    if (c->ep->cb.on_stream_open != NULL && !c->closing)
        c->ep->cb.on_stream_open(c, sid, c->user);
    return 0;
}

static qstream *stream_of(fx_quic_conn *c, int64_t sid, void *stream_user)
{
    return stream_user != NULL ? stream_user : fx_quic_stream_find(c, sid);
}

/* ngtcp2 0.12 never closes a stream the peer opened in one direction: its
 * close test wants our (nonexistent) sending side acknowledged. So once
 * such a stream has delivered its FIN, or was reset, it ends here: the
 * layer above hears on_stream_close and the peer gets the stream credit
 * back. ngtcp2 keeps its small per-stream record until the connection
 * ends; an upgrade to ngtcp2 >= 0.14 makes this unnecessary. */
static void remote_uni_done(fx_quic_conn *c, int64_t sid, bool reset, uint64_t code)
{
    qstream *s = fx_quic_stream_find(c, sid);
    if (s == NULL)
        return; /* already ended (the layer above reset it) */
    void *su = s->user;
    ngtcp2_conn_set_stream_user_data(c->q, sid, NULL);
    fx_quic_stream_destroy(c, s);
    if (!c->ep->o.uni_credit_granted)
        ngtcp2_conn_extend_max_streams_uni(c->q, 1);
    if (c->ep->cb.on_stream_close != NULL && !c->dead)
        c->ep->cb.on_stream_close(c, sid, reset, code, c->user, su);
}

static bool is_remote_uni(fx_quic_conn *c, int64_t sid)
{
    return !ngtcp2_is_bidi_stream(sid) && !ngtcp2_conn_is_local_stream(c->q, sid);
}

static int cb_recv_stream_data(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t offset,
                               const uint8_t *data, size_t len, void *user, void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s == NULL || c->closing)
        return 0; /* the bytes still hold credit; the connection is going anyway */
    bool fin = (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0;
    if (c->ep->cb.on_stream_data != NULL)
        c->ep->cb.on_stream_data(c, sid, data, len, fin, c->user, s->user);
    if (fin && is_remote_uni(c, sid))
        remote_uni_done(c, sid, false, 0);
    return 0;
}

static int cb_acked(ngtcp2_conn *q, int64_t sid, uint64_t offset, uint64_t len, void *user,
                    void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s != NULL)
        fx_quic_stream_acked(c, s, offset + len);
    return 0;
}

static int cb_stream_close(ngtcp2_conn *q, uint32_t flags, int64_t sid, uint64_t code, void *user,
                           void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s == NULL)
        return 0;
    bool reset = (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0 || s->reset_seen;
    if (s->reset_seen && !(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = s->reset_code;
    void *su = s->user;
    fx_quic_stream_destroy(c, s);
    /* ngtcp2 0.12 never returns stream credit by itself: without this the
     * 1025th stream the peer opens would wait for ever. */
    if (!ngtcp2_conn_is_local_stream(q, sid)) {
        if (ngtcp2_is_bidi_stream(sid))
            ngtcp2_conn_extend_max_streams_bidi(q, 1);
        else if (!c->ep->o.uni_credit_granted)
            ngtcp2_conn_extend_max_streams_uni(q, 1);
    }
    if (c->ep->cb.on_stream_close != NULL && !c->dead)
        c->ep->cb.on_stream_close(c, sid, reset, code, c->user, su);
    return 0;
}

static int cb_stream_reset(ngtcp2_conn *q, int64_t sid, uint64_t final_size, uint64_t code,
                           void *user, void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s == NULL)
        return 0;
    s->reset_seen = true;
    s->reset_code = code;
    if (is_remote_uni(c, sid))
        remote_uni_done(c, sid, true, code);
    return 0;
}

static int cb_stop_sending(ngtcp2_conn *q, int64_t sid, uint64_t code, void *user,
                           void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s == NULL)
        return 0;
    /* ngtcp2 0.12 calls this when we stop reading |sid| before its end
     * (our fx_quic_stream_reset), not when the peer sends STOP_SENDING:
     * 0.12 reports that to no one and answers it with RESET_STREAM itself;
     * write_pkt then learns it from NGTCP2_ERR_STREAM_SHUT_WR. */
    s->reset_seen = true;
    s->reset_code = code;
    fx_quic_stream_stop_writing(c, s);
    return 0;
}

static int cb_extend_stream_data(ngtcp2_conn *q, int64_t sid, uint64_t max_data, void *user,
                                 void *stream_user)
{
    fx_quic_conn *c = user;
    qstream *s = stream_of(c, sid, stream_user);
    if (s != NULL && s->blocked == QS_BLOCKED_STREAM && fx_quic_stream_has_pending(s))
        fx_quic_sendq_push(c, s);
    return 0;
}

static int cb_stateless_reset(ngtcp2_conn *q, const ngtcp2_pkt_stateless_reset *sr, void *user)
{
    fx_quic_conn *c = user;
    c->info.reason = FX_ECONNLOST;
    snprintf(c->info.text, sizeof(c->info.text), "stateless reset from the peer");
    return 0;
}

static const ngtcp2_callbacks CALLBACKS = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = cb_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = cb_recv_stream_data,
    .acked_stream_data_offset = cb_acked,
    .stream_open = cb_stream_open,
    .stream_close = cb_stream_close,
    .recv_stateless_reset = cb_stateless_reset,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .rand = cb_rand,
    .get_new_connection_id = cb_new_cid,
    .remove_connection_id = cb_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = cb_stream_reset,
    .extend_max_stream_data = cb_extend_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = cb_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* ---- ngtcp2's allocator ------------------------------------------------------ */

/* ngtcp2 0.12 loses STREAM frame chains under packet loss. A frame with
 * more than 3 data vectors is malloc'ed, a smaller one comes from the
 * connection's frame pool, and ngtcp2_frame_chain_objalloc_del tells the
 * two apart by the frame's current vector count. Retransmission copies a
 * lost frame (malloc'ed when it has many vectors) into the stream's resend
 * queue; when ngtcp2 then shrinks it below the threshold (splitting it to
 * fit a packet, or trimming acknowledged bytes), deleting it pushes the
 * malloc'ed block onto the pool's free list, and ngtcp2_conn_del frees only
 * the pool's own slabs, never that list: 128-300 bytes lost per occurrence
 * (upstream issue 1244, fixed in ngtcp2 1.6). So every connection gives
 * ngtcp2 this allocator, which links its blocks in a list, and after
 * ngtcp2_conn_del frees whatever is still on it: nothing ngtcp2 allocated
 * outlives its connection. While the connection lives the lost blocks are
 * reused by the pool like its own, so they do not accumulate. Remove with
 * the upgrade to ngtcp2 >= 1.6. */

static void block_link(fx_quic_conn *c, qblock *b)
{
    b->l.prev = NULL;
    b->l.next = c->blocks;
    if (c->blocks != NULL)
        c->blocks->l.prev = b;
    c->blocks = b;
}

static void block_unlink(fx_quic_conn *c, qblock *b)
{
    if (b->l.prev != NULL)
        b->l.prev->l.next = b->l.next;
    else
        c->blocks = b->l.next;
    if (b->l.next != NULL)
        b->l.next->l.prev = b->l.prev;
}

static void *mem_malloc(size_t size, void *user)
{
    if (size > SIZE_MAX - sizeof(qblock))
        return NULL;
    qblock *b = malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    block_link(user, b);
    return b + 1;
}

static void mem_free(void *p, void *user)
{
    if (p == NULL)
        return;
    qblock *b = (qblock *)p - 1;
    block_unlink(user, b);
    free(b);
}

static void *mem_calloc(size_t n, size_t size, void *user)
{
    if (size != 0 && n > (SIZE_MAX - sizeof(qblock)) / size)
        return NULL;
    qblock *b = calloc(1, sizeof(*b) + n * size);
    if (b == NULL)
        return NULL;
    block_link(user, b);
    return b + 1;
}

static void *mem_realloc(void *p, size_t size, void *user)
{
    if (p == NULL)
        return mem_malloc(size, user);
    if (size > SIZE_MAX - sizeof(qblock))
        return NULL;
    qblock *old = (qblock *)p - 1;
    block_unlink(user, old);
    qblock *b = realloc(old, sizeof(*b) + size);
    if (b == NULL) {
        block_link(user, old); /* |p| stays valid */
        return NULL;
    }
    block_link(user, b);
    return b + 1;
}

/* Frees the blocks ngtcp2 left behind; after ngtcp2_conn_del, nothing
 * refers to them. Returns how many there were. */
static uint64_t blocks_free_all(fx_quic_conn *c)
{
    uint64_t n = 0;
    while (c->blocks != NULL) {
        qblock *b = c->blocks;
        c->blocks = b->l.next;
        free(b);
        n++;
    }
    return n;
}

/* ---- creation ------------------------------------------------------------------ */

int fx_quic_conn_cid_remember(fx_quic_conn *c, const ngtcp2_cid *cid)
{
    if (c->ncids == c->capcids) {
        size_t n = c->capcids ? c->capcids * 2 : 4;
        ngtcp2_cid *p = realloc(c->cids, n * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        c->cids = p;
        c->capcids = n;
    }
    int rv = fx_quic_ep_cid_add(c->ep, cid, c);
    if (rv < 0)
        return rv;
    c->cids[c->ncids++] = *cid;
    return 0;
}

void fx_quic_conn_cid_forget(fx_quic_conn *c, const ngtcp2_cid *cid)
{
    for (size_t i = 0; i < c->ncids; i++) {
        if (ngtcp2_cid_eq(&c->cids[i], cid)) {
            fx_quic_ep_cid_remove(c->ep, cid);
            c->cids[i] = c->cids[--c->ncids];
            return;
        }
    }
}

bool fx_quic_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* Datagram size: a loopback peer gets |loopback_mtu| from the first packet
 * (ngtcp2 0.12's path MTU discovery never probes above 1444 bytes, so on
 * loopback it would leave 90% of the per-datagram cost on the table); any
 * other peer starts at |initial_mtu| and probes, unless that size already
 * reaches |mtu_upper_bound|, which pins it. */
static void fill_settings(const fx_quic_conn *c, ngtcp2_settings *s, uint64_t now)
{
    const fx_quic_opts *o = &c->ep->o;
    ngtcp2_settings_default(s);
    s->initial_ts = now;
    s->max_window = o->max_conn_window;
    s->max_stream_window = o->max_stream_window;
    s->handshake_timeout = o->handshake_timeout_ns ? o->handshake_timeout_ns : UINT64_MAX;
    s->max_tx_udp_payload_size = o->mtu_upper_bound;
    bool pinned = o->initial_mtu >= o->mtu_upper_bound;
    if (o->loopback_mtu != 0 && fx_quic_addr_is_loopback((const struct sockaddr *)&c->remote)) {
        s->max_tx_udp_payload_size = o->loopback_mtu;
        pinned = true;
    }
    if (pinned) {
        /* Pinned size: send it from the first packet; no probing. */
        s->no_tx_udp_payload_size_shaping = 1;
        s->no_pmtud = 1;
    }
}

static void fill_params(const fx_quic_endpoint *ep, ngtcp2_transport_params *p)
{
    const fx_quic_opts *o = &ep->o;
    ngtcp2_transport_params_default(p);
    p->initial_max_stream_data_bidi_local = o->stream_window;
    p->initial_max_stream_data_bidi_remote = o->stream_window;
    p->initial_max_stream_data_uni = o->stream_window;
    p->initial_max_data = o->conn_window;
    p->initial_max_streams_bidi = o->max_streams_bidi;
    p->initial_max_streams_uni = o->max_streams_uni;
    p->max_idle_timeout = o->idle_timeout_ns;
    p->max_udp_payload_size = o->max_udp_payload;
    p->active_connection_id_limit = 4;
}

static fx_quic_conn *conn_alloc(fx_quic_endpoint *ep, const struct sockaddr *remote, socklen_t len,
                                void *user)
{
    fx_quic_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->ep = ep;
    c->user = user;
    memcpy(&c->remote, remote, len);
    c->remotelen = len;
    /* The local side of the path: for a server on a wildcard address, the
     * address this client reached (the datagram being processed). */
    c->local = ep->rx_local;
    c->locallen = ep->rx_locallen;
    fx_timer_init(&c->timer, on_timer, c);
    c->mem = (ngtcp2_mem){.user_data = c,
                          .malloc = mem_malloc,
                          .free = mem_free,
                          .calloc = mem_calloc,
                          .realloc = mem_realloc};
    return c;
}

static void conn_link(fx_quic_endpoint *ep, fx_quic_conn *c)
{
    c->prev = NULL;
    c->next = ep->conns;
    if (ep->conns != NULL)
        ep->conns->prev = c;
    ep->conns = c;
    ep->st.conns_open++;
    FX_GAUGE_ADD(quic_conn_open, 1);
    fx_quic_ep_stats_arm(ep);
}

void fx_quic_conn_log_stats(fx_quic_conn *c)
{
    if (c->dead || !c->handshake_done || !fx_log_is_enabled(FX_LOG_INFO))
        return;
    char addr[INET6_ADDRSTRLEN];
    uint16_t port;
    if (c->remote.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&c->remote;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof(addr));
        port = ntohs(a->sin6_port);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&c->remote;
        inet_ntop(AF_INET, &a->sin_addr, addr, sizeof(addr));
        port = ntohs(a->sin_port);
    }
    char cid[2 * 4 + 1] = "-"; /* our first connection ID, to tell a peer's connections apart */
    if (c->ncids > 0 && c->cids[0].datalen >= 4)
        snprintf(cid, sizeof(cid), "%02x%02x%02x%02x", c->cids[0].data[0], c->cids[0].data[1],
                 c->cids[0].data[2], c->cids[0].data[3]);
    ngtcp2_conn_stat cs;
    ngtcp2_conn_get_conn_stat(c->q, &cs);
    double us = 1e-3;
    fx_quic_log(
        FX_QLOG_INFO,
        "conn stats %s port %u cid %s: rtt smoothed %.0f us, min %.0f us, var %.0f us; cwnd %llu "
        "bytes, in flight %llu bytes, pto count %zu, datagram %zu bytes, unacked %llu bytes",
        addr, (unsigned)port, cid, (double)cs.smoothed_rtt * us,
        cs.min_rtt == UINT64_MAX ? 0.0 : (double)cs.min_rtt * us, (double)cs.rttvar * us,
        (unsigned long long)cs.cwnd, (unsigned long long)cs.bytes_in_flight, cs.pto_count,
        cs.max_tx_udp_payload_size, (unsigned long long)c->unacked);
}

int fx_quic_conn_accept(fx_quic_endpoint *ep, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *odcid,
                        const struct sockaddr *from, socklen_t fromlen, fx_quic_conn **pc)
{
    fx_quic_conn *c = conn_alloc(ep, from, fromlen, ep->user);
    if (c == NULL)
        return -ENOMEM;
    c->server = true;
    ngtcp2_cid scid;
    fx_quic_ep_new_cid(ep, &scid);
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    fill_settings(c, &s, fx_loop_now(ep->loop));
    fill_params(ep, &p);
    if (odcid != NULL) {
        /* After a Retry: the client's first DCID, and the one we chose. */
        p.original_dcid = *odcid;
        p.retry_scid = hd->dcid;
        p.retry_scid_present = 1;
    } else {
        p.original_dcid = hd->dcid;
    }
    p.stateless_reset_token_present = 1;
    int rv = ngtcp2_crypto_generate_stateless_reset_token(p.stateless_reset_token, ep->reset_secret,
                                                          sizeof(ep->reset_secret), &scid);
    ngtcp2_path path;
    fx_quic_ep_path(ep, c, &path);
    if (rv == 0)
        rv = ngtcp2_conn_server_new(&c->q, &hd->scid, &scid, &path, hd->version, &CALLBACKS, &s, &p,
                                    &c->mem, c);
    if (rv != 0) {
        fx_quic_conn_destroy(c);
        return rv == NGTCP2_ERR_NOMEM ? -ENOMEM : FX_EQUIC;
    }
    if (ep->o.keepalive_ns > 0)
        ngtcp2_conn_set_keep_alive_timeout(c->q, ep->o.keepalive_ns);
    rv = fx_quic_tls_session(c);
    if (rv == 0)
        rv = fx_quic_conn_cid_remember(c, &scid);
    if (rv == 0)
        rv = fx_quic_conn_cid_remember(c, &hd->dcid);
    if (rv < 0) {
        fx_quic_conn_destroy(c);
        return rv;
    }
    c->half_open = true;
    ep->half_open++;
    conn_link(ep, c);
    *pc = c;
    return 0;
}

static int client_conn_init(fx_quic_conn *c, const fx_quic_connect_opts *co)
{
    fx_quic_endpoint *ep = c->ep;
    int rv = fx_quic_tls_client_creds(c, co);
    if (rv < 0)
        return rv;
    uint8_t d[18];
    (void)gnutls_rnd(GNUTLS_RND_NONCE, d, sizeof(d));
    ngtcp2_cid dcid, scid;
    ngtcp2_cid_init(&dcid, d, sizeof(d));
    fx_quic_ep_new_cid(ep, &scid);
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    fill_settings(c, &s, fx_loop_now(ep->loop));
    fill_params(ep, &p);
    ngtcp2_path path;
    fx_quic_ep_path(ep, c, &path);
    rv = ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &CALLBACKS, &s, &p,
                                &c->mem, c);
    if (rv != 0)
        return rv == NGTCP2_ERR_NOMEM ? -ENOMEM : FX_EQUIC;
    if (ep->o.keepalive_ns > 0)
        ngtcp2_conn_set_keep_alive_timeout(c->q, ep->o.keepalive_ns);
    rv = fx_quic_tls_session(c);
    if (rv == 0)
        rv = fx_quic_conn_cid_remember(c, &scid);
    return rv;
}

int fx_quic_connect(fx_quic_endpoint *ep, const char *ip, uint16_t port,
                    const fx_quic_connect_opts *co, void *user, fx_quic_conn **pc)
{
    static const fx_quic_connect_opts none = {0};
    struct sockaddr_storage ss;
    socklen_t len;
    if (ep->server || ep->freeing || fx_quic_parse_addr(ip, port, &ss, &len) < 0 ||
        fx_quic_addr_for_socket(ep, &ss, &len) < 0)
        return FX_ECONFIG;
    if (co == NULL)
        co = &none;
    fx_quic_conn *c = conn_alloc(ep, (struct sockaddr *)&ss, len, user);
    if (c == NULL)
        return -ENOMEM;
    c->server_name = strdup(co->server_name != NULL ? co->server_name : ip);
    int rv = c->server_name != NULL ? client_conn_init(c, co) : -ENOMEM;
    if (rv < 0) {
        fx_quic_conn_destroy(c);
        return rv;
    }
    conn_link(ep, c);
    fx_quic_conn_schedule(c);
    *pc = c;
    return 0;
}

void fx_quic_conn_destroy(fx_quic_conn *c)
{
    fx_loop_timer_cancel(c->ep->loop, &c->timer);
    for (size_t i = 0; i < c->ncids; i++)
        fx_quic_ep_cid_remove(c->ep, &c->cids[i]);
    free(c->cids);
    if (c->q != NULL)
        ngtcp2_conn_del(c->q);
    /* After ngtcp2 let go of the STREAM frames pointing into them. */
    fx_quic_streams_destroy_all(c);
    uint64_t orphans = blocks_free_all(c);
    if (orphans > 0) {
        c->ep->st.ngtcp2_orphans_freed += orphans;
        fx_quic_log(FX_QLOG_DEBUG, "freed %llu blocks ngtcp2 lost track of",
                    (unsigned long long)orphans);
    }
    if (c->tls != NULL)
        gnutls_deinit(c->tls);
    fx_quic_creds_unref(c->screds); /* after the session that used them */
    if (c->ccred != NULL)
        gnutls_certificate_free_credentials(c->ccred);
    free(c->server_name);
    free(c);
}

/* ---- ending ------------------------------------------------------------------ */

void fx_quic_conn_finish(fx_quic_conn *c, int reason)
{
    if (c->dead)
        return;
    c->dead = true;
    c->closing = true;
    if (c->info.reason == 0)
        c->info.reason = reason;
    if (c->half_open) {
        c->half_open = false;
        c->ep->half_open--;
    }
    fx_loop_timer_cancel(c->ep->loop, &c->timer);
    fx_quic_log(FX_QLOG_DEBUG, "conn closed: %s%s%s", fx_strerror(c->info.reason),
                c->info.text[0] ? ": " : "", c->info.text);
    fx_quic_ep_reap(c->ep, c);
}

/* Sends one CONNECTION_CLOSE built from |cc|; best effort (the peer's idle
 * timeout covers a lost one). */
static void send_close(fx_quic_conn *c, const ngtcp2_connection_close_error *cc)
{
    uint8_t buf[2048];
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    c->close_sent = true;
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, buf, sizeof(buf), cc,
                                                        fx_loop_now(c->ep->loop));
    if (n <= 0 || fx_quic_test_drop(c->ep))
        return;
    int rv =
        fx_quic_udp_send(c->ep, (struct sockaddr *)ps.path.remote.addr, ps.path.remote.addrlen,
                         fx_quic_src_for(c->ep, ps.path.local.addr), buf, (size_t)n, (size_t)n);
    if (rv < 0)
        fx_quic_log(FX_QLOG_DEBUG, "CONNECTION_CLOSE not sent: %s", fx_strerror(rv));
}

static void copy_text(char *dst, size_t cap, const uint8_t *p, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        dst[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    dst[n] = '\0';
}

/* The peer closed: translate its CONNECTION_CLOSE. */
static void peer_closed(fx_quic_conn *c)
{
    if (c->info.reason != 0)
        return; /* stateless reset, already described */
    ngtcp2_connection_close_error cc;
    ngtcp2_conn_get_connection_close_error(c->q, &cc);
    fx_quic_close_info *in = &c->info;
    in->remote = true;
    in->code = cc.error_code;
    copy_text(in->text, sizeof(in->text), cc.reason, cc.reason ? cc.reasonlen : 0);
    if (cc.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION) {
        in->app = true;
        in->reason = FX_ECLOSED;
    } else if (cc.error_code == NGTCP2_NO_ERROR) {
        in->reason = FX_ECLOSED;
    } else if (cc.error_code == NGTCP2_APPLICATION_ERROR) {
        /* An application close sent before the handshake was confirmed
         * travels as this transport code, without the code or reason. */
        in->app = true;
        in->reason = FX_ECLOSED;
    } else if (cc.error_code >= NGTCP2_CRYPTO_ERROR && cc.error_code <= NGTCP2_CRYPTO_ERROR + 255) {
        in->tls_alert = (uint8_t)(cc.error_code - NGTCP2_CRYPTO_ERROR);
        in->reason = FX_ETLS;
        /* Our peers name the verification failure in the reason phrase. */
        for (int r = FX_ETLS_UNKNOWN_CA; r >= FX_ETLS_NAME; r--)
            if (strcmp(in->text, fx_strerror(r)) == 0)
                in->reason = r;
    } else {
        in->reason = FX_EQUIC;
    }
}

/* Our TLS stack failed: close with CRYPTO_ERROR carrying the alert and the
 * reason, so the peer can say why. */
static void tls_failed(fx_quic_conn *c)
{
    int reason = c->tls_reason != 0 ? c->tls_reason : FX_ETLS;
    uint8_t alert = ngtcp2_conn_get_tls_alert(c->q);
    if (alert == 0)
        alert = 40; /* handshake_failure */
    const char *text = fx_strerror(reason);
    ngtcp2_connection_close_error cc;
    ngtcp2_connection_close_error_set_transport_error_tls_alert(&cc, alert, (const uint8_t *)text,
                                                                strlen(text));
    send_close(c, &cc);
    c->info.tls_alert = alert;
    c->info.code = NGTCP2_CRYPTO_ERROR + alert;
    snprintf(c->info.text, sizeof(c->info.text), "%s", text);
    fx_quic_log(FX_QLOG_WARN, "tls handshake failed: %s (alert %u)", text, (unsigned)alert);
    FX_COUNTER_INC(quic_handshake_failed);
    fx_quic_conn_finish(c, reason);
}

static void handle_error(fx_quic_conn *c, int rv)
{
    ngtcp2_connection_close_error cc;
    switch (rv) {
    case NGTCP2_ERR_DRAINING:
        peer_closed(c);
        fx_quic_conn_finish(c, FX_ECLOSED);
        return;
    case NGTCP2_ERR_IDLE_CLOSE:
        snprintf(c->info.text, sizeof(c->info.text), "no packet from the peer within %llu ms",
                 (unsigned long long)(c->ep->o.idle_timeout_ns / FX_NS_PER_MS));
        fx_quic_conn_finish(c, FX_EIDLE);
        return;
    case NGTCP2_ERR_HANDSHAKE_TIMEOUT:
        snprintf(c->info.text, sizeof(c->info.text), "handshake timed out");
        fx_quic_conn_finish(c, FX_ETIMEDOUT);
        return;
    case NGTCP2_ERR_DROP_CONN:
    case NGTCP2_ERR_CLOSING:
        fx_quic_conn_finish(c, FX_EQUIC);
        return;
    case NGTCP2_ERR_CRYPTO:
        tls_failed(c);
        return;
    default:
        snprintf(c->info.text, sizeof(c->info.text), "%s", ngtcp2_strerror(rv));
        ngtcp2_connection_close_error_set_transport_error_liberr(&cc, rv, NULL, 0);
        send_close(c, &cc);
        fx_quic_conn_finish(c, rv == NGTCP2_ERR_NOMEM ? -ENOMEM : FX_EQUIC);
        return;
    }
}

void fx_quic_conn_close(fx_quic_conn *c, uint64_t app_code, const char *reason)
{
    if (c->closing || c->dead)
        return;
    c->closing = true;
    c->close_code = app_code;
    c->info = (fx_quic_close_info){.reason = FX_ECLOSED, .app = true, .code = app_code};
    snprintf(c->info.text, sizeof(c->info.text), "%s", reason != NULL ? reason : "");
    fx_quic_conn_schedule(c);
}

/* ---- reading ------------------------------------------------------------------ */

void fx_quic_conn_read(fx_quic_conn *c, const struct sockaddr *from, socklen_t fromlen,
                       const uint8_t *data, size_t len)
{
    ngtcp2_path path;
    fx_quic_ep_path(c->ep, c, &path);
    path.local.addr = (ngtcp2_sockaddr *)&c->ep->rx_local;
    path.local.addrlen = c->ep->rx_locallen;
    path.remote.addr = (ngtcp2_sockaddr *)from;
    path.remote.addrlen = fromlen;
    ngtcp2_pkt_info pi = {0};
    int rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, data, len, fx_loop_now(c->ep->loop));
    if (rv != 0) {
        handle_error(c, rv);
        return;
    }
    if (!c->dirty) {
        c->dirty = true;
        c->dnext = c->ep->dirty_head;
        c->ep->dirty_head = c;
    }
}

/* ---- writing ------------------------------------------------------------------ */

static void arm(fx_quic_conn *c, uint64_t deadline)
{
    /* Only growing the timer heap can fail; the connection would then sit
     * until its next datagram, so say so. */
    int rv = fx_loop_timer_arm(c->ep->loop, &c->timer, deadline);
    if (rv < 0)
        fx_quic_log(FX_QLOG_ERROR, "cannot arm a connection timer: %s", fx_strerror(rv));
}

void fx_quic_conn_schedule(fx_quic_conn *c)
{
    /* A deadline in the past fires after this turn's socket events: every
     * datagram of the batch is read before we answer. */
    if (c->dead)
        return;
    fx_loop *l = c->ep->loop;
    if (fx_timer_is_armed(&c->timer) && c->timer.deadline_ns <= fx_loop_now(l))
        return; /* already due */
    arm(c, 0);
}

static void arm_expiry(fx_quic_conn *c, bool more)
{
    ngtcp2_tstamp exp = more ? 0 : ngtcp2_conn_get_expiry(c->q);
    if (exp == UINT64_MAX)
        fx_loop_timer_cancel(c->ep->loop, &c->timer);
    else
        arm(c, exp);
}

static void on_timer(fx_loop *l, fx_timer *t, void *user)
{
    fx_quic_conn *c = user;
    uint64_t now = fx_loop_now(l);
    if (ngtcp2_conn_get_expiry(c->q) <= now) {
        int rv = ngtcp2_conn_handle_expiry(c->q, now);
        if (rv != 0) {
            handle_error(c, rv);
            return;
        }
    }
    fx_quic_conn_flush(c);
}

static void stream_blocked(fx_quic_conn *c, qstream *s)
{
    if (ngtcp2_conn_get_max_stream_data_left(c->q, s->id) == 0) {
        fx_quic_sendq_remove(c, s);
        s->blocked = QS_BLOCKED_STREAM;
    } else {
        fx_quic_connblocked_push(c, s);
    }
}

/* Writes one packet, coalescing frames of as many streams as fit. Returns
 * its length, 0 when nothing may be sent now, or an ngtcp2 error. */
static ngtcp2_ssize write_pkt(fx_quic_conn *c, ngtcp2_path_storage *ps, uint8_t *dest,
                              size_t destlen, uint64_t ts)
{
    for (;;) {
        qstream *s = c->sq_head;
        ngtcp2_vec v[FX_QUIC_STREAM_VECS];
        size_t nv = 0, offered = 0;
        bool fin = false;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        if (s != NULL) {
            nv = fx_quic_stream_vecs(s, v, FX_QUIC_STREAM_VECS, destlen, &fin);
            for (size_t i = 0; i < nv; i++)
                offered += v[i].len;
            if (fin)
                flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        }
        ngtcp2_ssize nd = -1;
        ngtcp2_pkt_info pi;
        ngtcp2_ssize n = ngtcp2_conn_writev_stream(c->q, &ps->path, &pi, dest, destlen, &nd, flags,
                                                   s != NULL ? s->id : -1, v, nv, ts);
        if (s != NULL && nd >= 0) {
            fx_quic_stream_sent(c, s, (size_t)nd, fin, offered);
            if (s->slist == 1 && c->sq_head == s && s->snext != NULL)
                fx_quic_sendq_push(c, s); /* round robin: to the back */
        }
        if (n == NGTCP2_ERR_WRITE_MORE)
            continue;
        if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
            stream_blocked(c, s);
            continue;
        }
        if (n == NGTCP2_ERR_STREAM_SHUT_WR || n == NGTCP2_ERR_STREAM_NOT_FOUND) {
            /* The peer's STOP_SENDING: what ngtcp2 never saw can go now. */
            fx_quic_stream_stop_writing(c, s);
            continue;
        }
        return n;
    }
}

/* Sends the aggregate in ep->tx; on EAGAIN keeps it pending. */
static void send_agg(fx_quic_conn *c, const ngtcp2_path *path, size_t len, size_t seg)
{
    fx_quic_endpoint *ep = c->ep;
    int rv = fx_quic_udp_send(ep, (struct sockaddr *)path->remote.addr, path->remote.addrlen,
                              fx_quic_src_for(ep, path->local.addr), ep->tx, len, seg);
    if (rv == -EAGAIN) {
        ep->tx_pending = true;
        ep->tx_len = len;
        ep->tx_seg = seg;
        memcpy(&ep->tx_to, path->remote.addr, path->remote.addrlen);
        ep->tx_tolen = path->remote.addrlen;
        ep->tx_has_src = ep->wildcard;
        if (ep->wildcard)
            memcpy(&ep->tx_src, path->local.addr, path->local.addrlen);
        fx_quic_ep_wait_writable(ep, c);
    } else if (rv < 0) {
        /* Lost datagrams: QUIC's recovery resends what mattered. */
        fx_quic_log(FX_QLOG_DEBUG, "udp send: %s", fx_strerror(rv));
    }
}

static void after_burst(fx_quic_conn *c, uint64_t ts, bool more)
{
    /* ngtcp2 0.12 paces the first flight with its 333 ms initial RTT and
     * stalls the handshake for ~25 ms; until an RTT sample exists, skip. */
    ngtcp2_conn_stat cs;
    ngtcp2_conn_get_conn_stat(c->q, &cs);
    if (cs.min_rtt != UINT64_MAX)
        ngtcp2_conn_update_pkt_tx_time(c->q, ts);
    arm_expiry(c, more);
}

/* Produces at most one aggregate (send quantum, 64 KiB, 64 segments). */
static int write_burst(fx_quic_conn *c, uint64_t ts, bool *pmore)
{
    fx_quic_endpoint *ep = c->ep;
    size_t pmax = ngtcp2_conn_get_max_tx_udp_payload_size(c->q);
    size_t cap = ngtcp2_conn_get_send_quantum(c->q);
    cap = cap < pmax ? pmax : cap > FX_QUIC_GSO_MAX ? FX_QUIC_GSO_MAX : cap;
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    size_t off = 0, seg = 0, nseg = 0;
    *pmore = false;
    for (;;) {
        ngtcp2_ssize n = write_pkt(c, &ps, ep->tx + off, pmax, ts);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        if (fx_quic_test_drop(ep))
            continue;
        if (off > 0 && (size_t)n > seg) {
            /* Larger than the segment size: cannot join this aggregate. */
            send_agg(c, &ps.path, off, seg);
            if (ep->tx_pending)
                return 0; /* this packet is lost; recovery resends it */
            memmove(ep->tx, ep->tx + off, (size_t)n);
            off = 0;
        }
        if (off == 0)
            seg = (size_t)n, nseg = 0;
        off += (size_t)n;
        nseg++;
        if ((size_t)n < seg || nseg >= FX_QUIC_GSO_SEGS || off + pmax > cap) {
            *pmore = (size_t)n == seg; /* stopped by size, not by ngtcp2 */
            break;
        }
    }
    if (off > 0)
        send_agg(c, &ps.path, off, seg);
    return 0;
}

void fx_quic_conn_flush(fx_quic_conn *c)
{
    if (c->dead)
        return;
    if (c->ep->tx_pending) {
        fx_quic_ep_wait_writable(c->ep, c);
        return;
    }
    if (c->closing) {
        ngtcp2_connection_close_error cc;
        ngtcp2_connection_close_error_set_application_error(
            &cc, c->close_code, (const uint8_t *)c->info.text, strlen(c->info.text));
        send_close(c, &cc);
        fx_quic_conn_finish(c, FX_ECLOSED);
        return;
    }
    if (c->ep->draining && c->unacked == 0 && c->handshake_done) {
        fx_quic_conn_close(c, 0, "draining");
        fx_quic_conn_flush(c);
        return;
    }
    fx_quic_connblocked_release(c);
    uint64_t ts = fx_loop_now(c->ep->loop);
    bool more;
    int rv = write_burst(c, ts, &more);
    if (rv < 0) {
        handle_error(c, rv);
        return;
    }
    if (!c->waiting)
        after_burst(c, ts, more);
    /* After the timer is re-armed: a send made by the callback schedules
     * the next write itself. */
    if (c->sent_notify && !c->dead && !c->closing) {
        c->sent_notify = false;
        if (c->ep->cb.on_writable != NULL)
            c->ep->cb.on_writable(c, c->user);
    }
}

/* ---- accessors ------------------------------------------------------------------ */

void fx_quic_conn_set_user(fx_quic_conn *c, void *user)
{
    c->user = user;
}

void *fx_quic_conn_get_user(const fx_quic_conn *c)
{
    return c->user;
}

fx_quic_endpoint *fx_quic_conn_endpoint(const fx_quic_conn *c)
{
    return c->ep;
}

bool fx_quic_conn_is_server(const fx_quic_conn *c)
{
    return c->server;
}

const struct sockaddr *fx_quic_conn_remote(const fx_quic_conn *c, socklen_t *plen)
{
    if (plen != NULL)
        *plen = c->remotelen;
    return (const struct sockaddr *)&c->remote;
}

const char *fx_quic_conn_alpn(const fx_quic_conn *c)
{
    return c->alpn;
}

uint64_t fx_quic_conn_unacked(const fx_quic_conn *c)
{
    return c->unacked;
}
