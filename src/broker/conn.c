/* Client connections: the QUIC callbacks, the connection's life from accept
 * to close (its bidi streams and subscriptions go with it), the endpoint's
 * connection list and the max_connections limit. Runs on the loop of the
 * connection's endpoint. */
#include <errno.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "felix/error.h"

/* ---- references -------------------------------------------------------------------------- */

void fxb_conn_ref(fxb_conn *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void fxb_conn_unref(fxb_conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    fxb_conn_lanes_deinit(c);
    fx_budget_deinit(&c->budget);
    free(c);
}

/* ---- the endpoint's connection list ------------------------------------------------------ */

void fxb_conn_list_add(fx_broker *b, fxb_conn *c)
{
    fxb_ep *e = &b->eps[c->epi];
    c->cprev = NULL;
    c->cnext = e->conns;
    if (e->conns != NULL)
        e->conns->cprev = c;
    e->conns = c;
    e->conns_listed++;
}

void fxb_conn_list_remove(fx_broker *b, fxb_conn *c)
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

static void on_conn_new(fx_quic_conn *qc, void *user)
{
    fx_broker *b = user;
    fxb_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || fx_budget_init(&c->budget, b->o.pub_conn_inflight_bytes, &b->budget) != 0) {
        free(c);
        c = NULL;
    }
    if (c != NULL) {
        c->b = b;
        if (fxb_conn_lanes_init(c) != 0) {
            fx_budget_deinit(&c->budget);
            free(c);
            c = NULL;
        }
    }
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
    c->epi = fxb_ep_index(b, c->loop);
    c->id = atomic_fetch_add(&b->next_conn_id, 1);
    fx_task_init(&c->writer_task, fxb_writer_run, c);
    fx_timer_init(&c->flush_timer, fxb_writer_flush_due, c);
    fx_quic_conn_set_user(qc, c);
    fxb_conn_list_add(b, c);
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
    if (conn_slot_take(c->b)) {
        c->counted = true;
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
    if (c == NULL || c->dead || !c->want_writable)
        return;
    c->want_writable = false;
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
    fx_loop_timer_cancel(c->loop, &c->flush_timer);
    fxb_conn_list_remove(c->b, c);
    while (c->subs != NULL)
        fxb_sub_close(c->subs, false);
    while (c->bidis != NULL)
        fxb_bidi_close(c->bidis);
    c->qc = NULL;
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
