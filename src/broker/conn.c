/* Client connections: the QUIC callbacks, the connection's life from accept
 * to close (its bidi streams and subscriptions go with it), the endpoint's
 * connection list, the max_connections limit, the limits that hold before
 * authentication (auth deadline, connections per source address,
 * unauthenticated streams). Its references and lanes are in conn_life.c,
 * failed auths and the lifetime of its credentials in conn_auth.c. Runs on
 * the loop of the connection's endpoint. */
#include "broker/conn.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi.h"
#include "broker/conn_auth.h"
#include "broker/conn_life.h"
#include "broker/reply.h"
#include "broker/sub.h"
#include "broker/writer.h"
#include "felix/error.h"

/* ---- the endpoint's connection list ------------------------------------------------------ *
 * Kept on the endpoint's loop, the connection's own. */

static void list_add(fx_broker *b, fxb_conn *c)
{
    fxb_ep *e = &b->eps[c->epi];
    c->cprev = NULL;
    c->cnext = e->conns;
    if (e->conns != NULL)
        e->conns->cprev = c;
    e->conns = c;
    e->conns_listed++;
}

static void list_remove(fx_broker *b, fxb_conn *c)
{
    fxb_ep *e = &b->eps[c->epi];
    if (c->cprev != NULL)
        c->cprev->cnext = c->cnext;
    else if (e->conns == c)
        e->conns = c->cnext;
    else
        return; /* never listed */
    if (c->cnext != NULL)
        c->cnext->cprev = c->cprev;
    c->cnext = c->cprev = NULL;
    e->conns_listed--;
}

/* ---- connection lifecycle ---------------------------------------------------------------- */

/* Takes one of max_connections. Returns false when all are in use. */
static bool conn_slot_take(fx_broker *b)
{
    uint32_t max = b->o.max_connections;
    uint_fast32_t n = atomic_fetch_add_explicit(&b->nconns, 1, memory_order_relaxed);
    if (max == 0 || n < max)
        return true;
    atomic_fetch_sub_explicit(&b->nconns, 1, memory_order_relaxed);
    return false;
}

static void conn_slot_give(fx_broker *b)
{
    atomic_fetch_sub_explicit(&b->nconns, 1, memory_order_relaxed);
}

static fx_ratelimit conn_refused_rl = FX_RATELIMIT_INIT;
static fx_ratelimit per_ip_rl = FX_RATELIMIT_INIT;
static fx_ratelimit auth_timeout_rl = FX_RATELIMIT_INIT;
static fx_ratelimit unauth_streams_rl = FX_RATELIMIT_INIT;

/* ---- before authentication ----------------------------------------------------------------- */

/* No stream of |c| authenticated within auth_timeout_ms: it holds a
 * connection slot for nothing. */
static void on_auth_timeout(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_conn *c = user;
    if (c->auth.authed || c->dead || c->qc == NULL)
        return;
    char addr[64];
    fxb_peer_key_str(&c->auth.peer, addr, sizeof(addr));
    FX_COUNTER_INC(preauth_conn_auth_timeout);
    FX_LOG_RATELIMITED(&auth_timeout_rl, fx_loop_now(l), FX_LOG_WARN, "broker",
                       "conn %llu from %s closed: no stream authenticated within "
                       "auth_timeout_ms (%llu ms)",
                       (unsigned long long)c->id, addr,
                       (unsigned long long)(c->b->o.auth_timeout_ns / FX_NS_PER_MS));
    c->dead = true;
    fx_quic_conn_close(c->qc, FXB_CODE_AUTH_TIMEOUT, "auth timeout");
}

/* Takes the connection's place in its source address's count. Returns false
 * (counted, logged) when the address holds max_connections_per_ip. */
static bool peer_take(fxb_conn *c)
{
    if (fxb_peers_conn_take(&c->b->peers, &c->auth.peer, fx_loop_now(c->loop))) {
        c->auth.peer_counted = true;
        return true;
    }
    char addr[64];
    fxb_peer_key_str(&c->auth.peer, addr, sizeof(addr));
    FX_COUNTER_INC(preauth_conn_per_ip);
    FX_LOG_RATELIMITED(&per_ip_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                       "conn %llu refused: %s already holds max_connections_per_ip (%u)",
                       (unsigned long long)c->id, addr, (unsigned)c->b->o.max_connections_per_ip);
    return false;
}

/* A new connection of |b|: its memory, its share of the publish budget and
 * its writer lanes. NULL without memory. */
static fxb_conn *conn_alloc(fx_broker *b)
{
    fxb_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || fx_budget_init(&c->budget, b->o.pub_conn_inflight_bytes, &b->budget) != 0) {
        free(c);
        return NULL;
    }
    c->b = b;
    if (fxb_conn_lanes_init(c) != 0) {
        fx_budget_deinit(&c->budget);
        free(c);
        return NULL;
    }
    return c;
}

static void on_conn_new(fx_quic_conn *qc, void *user)
{
    fx_broker *b = user;
    fxb_conn *c = conn_alloc(b);
    if (c == NULL) {
        FX_LOG_ERROR("broker", "no memory for a new connection");
        fx_quic_conn_set_user(qc, NULL);
        fx_quic_conn_close(qc, 1, "out of memory");
        return;
    }
    atomic_init(&c->refs, 1);
    c->b = b;
    c->qc = qc;
    c->loop = fx_quic_conn_loop(qc);
    c->epi = fxb_ep_index(b, fx_quic_conn_endpoint(qc));
    if (b->internal_port != 0 && c->epi == b->neps - 1)
        FX_COUNTER_INC(cluster_internal_connections); /* the internal listener is the last */
    c->id = atomic_fetch_add(&b->next_conn_id, 1);
    fxb_conn_auth_init(c, on_auth_timeout);
    fxb_conn_writer_init(c);
    fx_quic_conn_set_user(qc, c);
    list_add(b, c);
    if (fxb_is_draining(b)) { /* the drain takes no new connections */
        c->dead = true;
        fx_quic_conn_close(qc, 0, FXB_SHUTDOWN_TEXT);
    }
}

/* A connection counts against max_connections once its handshake is done:
 * closing it then carries the reason to the client in 1-RTT (a close during
 * the handshake loses its reason phrase). Marked dead, it serves no stream. */
static void on_handshake_done(fx_quic_conn *qc, void *user)
{
    fxb_conn *c = user;
    if (c == NULL || c->dead)
        return;
    if (!peer_take(c)) {
        c->dead = true;
        fx_quic_conn_close(qc, FXB_CODE_TOO_MANY_CONNS, "too many connections from this address");
        return;
    }
    if (conn_slot_take(c->b)) {
        c->counted = true;
        uint64_t to = c->b->o.auth_timeout_ns;
        if (to != 0 && fx_loop_timer_arm(c->loop, &c->auth.timer, fx_loop_now(c->loop) + to) != 0) {
            c->dead = true;
            fx_quic_conn_close(qc, 1, "out of memory");
        }
        return;
    }
    c->dead = true;
    FX_COUNTER_INC(broker_conn_refused);
    FX_LOG_RATELIMITED(&conn_refused_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                       "conn %llu refused: max_connections (%u) reached", (unsigned long long)c->id,
                       (unsigned)c->b->o.max_connections);
    fx_quic_conn_close(qc, FXB_CODE_TOO_MANY_CONNS, "too many connections");
}

static void on_stream_open(fx_quic_conn *qc, int64_t sid, void *user)
{
    fxb_conn *c = user;
    if (c == NULL || c->dead)
        return;
    if ((sid & 0x2) != 0) { /* a client uni stream: not served (publish uses bidi) */
        fx_quic_stream_reset(qc, sid, FXB_CODE_MALFORMED);
        return;
    }
    if (c->auth.unauth_streams >= c->b->o.max_unauth_streams_per_conn) {
        FX_COUNTER_INC(preauth_unauth_streams);
        FX_LOG_RATELIMITED(&unauth_streams_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                           "conn %llu stream %lld reset: %u streams already wait for auth "
                           "(max_unauth_streams_per_conn)",
                           (unsigned long long)c->id, (long long)sid,
                           (unsigned)c->auth.unauth_streams);
        fx_quic_stream_reset(qc, sid, FXB_CODE_MALFORMED);
        return;
    }
    fxb_bidi *s = fxb_bidi_new(c, sid);
    if (s == NULL) {
        fx_quic_stream_reset(qc, sid, FXB_CODE_MALFORMED);
        return;
    }
    fx_quic_stream_set_user(qc, sid, s);
}

static void on_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *stream_user)
{
    (void)user;
    int *kind = stream_user;
    if (kind == NULL || *kind != FXB_KIND_BIDI) {
        fx_quic_stream_consume(qc, sid, len); /* nothing else reads: free the window */
        return;
    }
    fxb_bidi_on_data((fxb_bidi *)kind, data, len, fin);
}

static void on_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code, void *user,
                            void *stream_user)
{
    (void)qc;
    (void)sid;
    (void)reset;
    (void)code;
    (void)user;
    int *kind = stream_user;
    if (kind == NULL)
        return;
    if (*kind == FXB_KIND_BIDI)
        fxb_bidi_close((fxb_bidi *)kind);
    else if (*kind == FXB_KIND_SUB)
        fxb_sub_close((fxb_sub *)kind, false);
}

static void on_writable(fx_quic_conn *qc, void *user)
{
    (void)qc;
    fxb_conn *c = user;
    if (c == NULL || c->dead || !c->writer.want_writable)
        return;
    c->writer.want_writable = false;
    for (fxb_bidi *s = c->bidis; s != NULL; s = s->next)
        fxb_bidi_flush(s);
    fxb_conn_kick_writer(c);
}

static void on_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    (void)info;
    fxb_conn *c = user;
    if (c == NULL)
        return;
    fx_quic_conn_set_user(qc, NULL);
    c->dead = true;
    fxb_conn_writer_deinit(c);
    list_remove(c->b, c);
    while (c->subs != NULL)
        fxb_sub_close(c->subs, false);
    while (c->bidis != NULL)
        fxb_bidi_close(c->bidis);
    c->qc = NULL;
    fxb_conn_auth_deinit(c);
    fx_budget_close(&c->budget);
    if (c->counted)
        conn_slot_give(c->b);
    fxb_conn_unref(c);
}

const fx_quic_callbacks fxb_quic_callbacks = {
    .on_conn_new = on_conn_new,
    .on_handshake_done = on_handshake_done,
    .on_stream_open = on_stream_open,
    .on_stream_data = on_stream_data,
    .on_stream_close = on_stream_close,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};
