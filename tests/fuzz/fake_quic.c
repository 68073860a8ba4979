/* Fake QUIC transport (see fake_quic.h): quic/quic.h over in-memory
 * connections the harness drives as the peer. Runs on whatever thread the
 * harness and the endpoint's loop use (one at a time). */
#include "fake_quic.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "fuzz_common.h"

struct fx_quic_endpoint {
    fx_loop *loop;
    fx_quic_callbacks cb;
    void *user;
    bool server;
    fq_config cfg;
    fx_quic_conn *conns;
};

struct fx_quic_conn {
    fx_quic_endpoint *ep;
    void *user;
    fq_stream **streams;
    size_t nstreams, cap;
    uint32_t opened_bidi, opened_uni; /* local streams opened so far */
    bool closing, dead;
    bool want_writable;
    uint64_t unacked;
    fx_buf **held; /* references of sent buffers, until acknowledged */
    size_t nheld, heldcap;
    fx_quic_close_info info;
    fx_task turn_task; /* auto_turn */
    fx_task hs_task;   /* client: the handshake completes on the loop */
    bool zombie;       /* ended while one of those tasks was queued: freed by it */
    fx_quic_conn *next;
};

static fq_config cfg_next = {
    .stream_window = 1u << 20, .unacked_cap = 16u << 20, .local_streams = 1024};
static fx_quic_endpoint *last_ep;

void fq_configure(const fq_config *cfg)
{
    cfg_next = *cfg;
}

fx_quic_endpoint *fq_last_endpoint(void)
{
    return last_ep;
}

/* ---- options, endpoints, credentials ------------------------------------------------------- */

void fx_quic_opts_default(fx_quic_opts *o)
{
    *o = (fx_quic_opts){.idle_timeout_ns = 30 * FX_NS_PER_S,
                        .keepalive_ns = 10 * FX_NS_PER_S,
                        .handshake_timeout_ns = 10 * FX_NS_PER_S,
                        .stream_window = 1u << 20,
                        .conn_window = 16u << 20,
                        .max_stream_window = 16u << 20,
                        .max_conn_window = 64u << 20,
                        .unacked_cap = 16u << 20,
                        .max_streams_bidi = 1024,
                        .max_streams_uni = 1024,
                        .alpn = "felix"};
}

int fx_quic_opts_from_env(fx_quic_opts *o)
{
    (void)o;
    return 0;
}

static int ep_new(fx_quic_endpoint **pep, fx_loop *loop, const fx_quic_callbacks *cb, void *user,
                  bool server)
{
    fx_quic_endpoint *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return -ENOMEM;
    ep->loop = loop;
    ep->cb = *cb;
    ep->user = user;
    ep->server = server;
    ep->cfg = cfg_next;
    last_ep = ep;
    *pep = ep;
    return 0;
}

int fx_quic_server_new(fx_quic_endpoint **pep, fx_loop *loop, const char *ip, uint16_t port,
                       const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user)
{
    (void)ip, (void)port, (void)o;
    return ep_new(pep, loop, cb, user, true);
}

int fx_quic_client_new(fx_quic_endpoint **pep, fx_loop *loop, const fx_quic_opts *o,
                       const fx_quic_callbacks *cb, void *user)
{
    (void)o;
    return ep_new(pep, loop, cb, user, false);
}

static void conn_free(fx_quic_conn *c);

/* Ends |c| now (on_conn_closed) and frees it. */
static void conn_end(fx_quic_conn *c)
{
    fx_quic_endpoint *ep = c->ep;
    c->dead = true;
    if (ep->cb.on_conn_closed != NULL)
        ep->cb.on_conn_closed(c, &c->info, c->user);
    for (fx_quic_conn **pp = &ep->conns; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (atomic_load(&c->turn_task.pending) || atomic_load(&c->hs_task.pending))
        c->zombie = true; /* a queued task still points at |c| */
    else
        conn_free(c);
}

void fx_quic_endpoint_close_all(fx_quic_endpoint *ep)
{
    while (ep != NULL && ep->conns != NULL) {
        fx_quic_conn *c = ep->conns;
        if (!c->closing)
            c->info = (fx_quic_close_info){.reason = FX_ESHUTDOWN};
        conn_end(c);
    }
}

void fx_quic_endpoint_free(fx_quic_endpoint *ep)
{
    if (ep == NULL)
        return;
    fx_quic_endpoint_close_all(ep);
    if (last_ep == ep)
        last_ep = NULL;
    free(ep);
}

int fx_quic_endpoint_drain(fx_quic_endpoint *ep, uint64_t deadline_ns)
{
    (void)ep, (void)deadline_ns;
    return 0;
}

uint16_t fx_quic_endpoint_port(const fx_quic_endpoint *ep)
{
    (void)ep;
    return 4433;
}

const char *fx_quic_endpoint_fingerprint(const fx_quic_endpoint *ep)
{
    (void)ep;
    return "";
}

int fx_quic_creds_load(fx_quic_creds **pcr, const fx_quic_opts *o)
{
    (void)pcr, (void)o;
    return FX_ETLS; /* no TLS in the fake */
}

fx_quic_creds *fx_quic_creds_ref(fx_quic_creds *cr)
{
    return cr;
}

void fx_quic_creds_unref(fx_quic_creds *cr)
{
    (void)cr;
}

const char *fx_quic_creds_fingerprint(const fx_quic_creds *cr)
{
    (void)cr;
    return "";
}

int fx_quic_endpoint_set_credentials(fx_quic_endpoint *ep, fx_quic_creds *cr)
{
    (void)ep, (void)cr;
    return 0;
}

int fx_quic_endpoint_reload_credentials(fx_quic_endpoint *ep)
{
    (void)ep;
    return 0;
}

bool fx_quic_addr_is_loopback(const struct sockaddr *sa)
{
    (void)sa;
    return true;
}

void fx_quic_endpoint_get_stats(const fx_quic_endpoint *ep, fx_quic_stats *st)
{
    (void)ep;
    *st = (fx_quic_stats){0};
}

void fx_quic_endpoint_set_test_drop(fx_quic_endpoint *ep, uint32_t permille)
{
    (void)ep, (void)permille;
}

int fx_quic_endpoint_set_test_delay(fx_quic_endpoint *ep, uint64_t delay_ns)
{
    (void)ep, (void)delay_ns;
    return 0;
}

int fx_quic_server_group_new(fx_quic_server_group **pg, fx_loop **loops, size_t n, const char *ip,
                             uint16_t port, const fx_quic_opts *o, const fx_quic_callbacks *cb,
                             void *user)
{
    (void)pg, (void)loops, (void)n, (void)ip, (void)port, (void)o, (void)cb, (void)user;
    return -ENOTSUP; /* one endpoint only in the fake */
}

void fx_quic_server_group_free(fx_quic_server_group *g)
{
    (void)g;
}

fx_quic_endpoint *fx_quic_server_group_member(const fx_quic_server_group *g, size_t i)
{
    (void)g, (void)i;
    return NULL;
}

size_t fx_quic_server_group_size(const fx_quic_server_group *g)
{
    (void)g;
    return 0;
}

uint16_t fx_quic_server_group_port(const fx_quic_server_group *g)
{
    (void)g;
    return 0;
}

/* ---- connections ----------------------------------------------------------------------------- */

/* A zombie is freed by the last of its queued tasks. */
static bool reap(fx_quic_conn *c)
{
    if (!c->zombie)
        return false;
    if (!atomic_load(&c->turn_task.pending) && !atomic_load(&c->hs_task.pending))
        conn_free(c);
    return true;
}

static void turn_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    if (!reap(user))
        fq_turn(user);
}

static void schedule_turn(fx_quic_conn *c)
{
    if (c->ep->cfg.auto_turn)
        fx_loop_post(c->ep->loop, &c->turn_task);
}

static fx_quic_conn *conn_new(fx_quic_endpoint *ep)
{
    fx_quic_conn *c = calloc(1, sizeof(*c));
    FX_FUZZ_CHECK(c != NULL);
    c->ep = ep;
    c->user = ep->user;
    fx_task_init(&c->turn_task, turn_cb, c);
    c->next = ep->conns;
    ep->conns = c;
    return c;
}

static void conn_free(fx_quic_conn *c)
{
    for (size_t i = 0; i < c->nheld; i++)
        fx_buf_unref(c->held[i]);
    free(c->held);
    for (size_t i = 0; i < c->nstreams; i++) {
        free(c->streams[i]->tx);
        free(c->streams[i]->out);
        free(c->streams[i]);
    }
    free(c->streams);
    free(c);
}

fx_quic_conn *fq_accept(fx_quic_endpoint *ep)
{
    fx_quic_conn *c = conn_new(ep);
    if (ep->cb.on_conn_new != NULL)
        ep->cb.on_conn_new(c, ep->user);
    if (!c->closing && ep->cb.on_handshake_done != NULL)
        ep->cb.on_handshake_done(c, c->user);
    return c;
}

static void handshake_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fx_quic_conn *c = user;
    if (reap(c))
        return;
    if (!c->closing && !c->dead && c->ep->cb.on_handshake_done != NULL)
        c->ep->cb.on_handshake_done(c, c->user);
}

int fx_quic_connect(fx_quic_endpoint *ep, const char *ip, uint16_t port,
                    const fx_quic_connect_opts *co, void *user, fx_quic_conn **pc)
{
    (void)ip, (void)port, (void)co;
    if (ep->server)
        return FX_ECONFIG;
    fx_quic_conn *c = conn_new(ep);
    c->user = user;
    fx_task_init(&c->hs_task, handshake_cb, c);
    fx_loop_post(ep->loop, &c->hs_task);
    *pc = c;
    return 0;
}

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
    return c->ep->server;
}

const struct sockaddr *fx_quic_conn_remote(const fx_quic_conn *c, socklen_t *plen)
{
    /* Every fake peer is 127.0.0.1, one source address for the per-address
     * limits. */
    static struct sockaddr_in lo;
    (void)c;
    lo.sin_family = AF_INET;
    lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (plen != NULL)
        *plen = sizeof(lo);
    return (const struct sockaddr *)&lo;
}

/* The fake writes a send at once: a stream is never still sending. */
bool fx_quic_stream_is_sending(fx_quic_conn *c, int64_t sid)
{
    (void)c;
    (void)sid;
    return false;
}

/* Never sending, so no on_writable is ever arranged. */
bool fx_quic_stream_notify_sent(fx_quic_conn *c, int64_t sid)
{
    (void)c;
    (void)sid;
    return false;
}

const char *fx_quic_conn_alpn(const fx_quic_conn *c)
{
    (void)c;
    return "felix";
}

void fx_quic_conn_close(fx_quic_conn *c, uint64_t app_code, const char *reason)
{
    if (c->closing || c->dead)
        return;
    c->closing = true;
    c->info = (fx_quic_close_info){.reason = FX_ECLOSED, .app = true, .code = app_code};
    snprintf(c->info.text, sizeof(c->info.text), "%s", reason != NULL ? reason : "");
    schedule_turn(c);
}

void fq_close_remote(fx_quic_conn *c, uint64_t code)
{
    if (c->closing || c->dead)
        return;
    c->closing = true;
    c->info = (fx_quic_close_info){.reason = FX_ECLOSED, .remote = true, .app = true, .code = code};
    schedule_turn(c);
}

bool fq_is_closing(const fx_quic_conn *c)
{
    return c->closing || c->dead;
}

uint64_t fx_quic_conn_unacked(const fx_quic_conn *c)
{
    return c->unacked;
}

uint64_t fq_unacked(const fx_quic_conn *c)
{
    return c->unacked;
}

fx_loop *fx_quic_conn_loop(const fx_quic_conn *c)
{
    return c->ep->loop;
}

fx_loop *fx_quic_endpoint_loop(const fx_quic_endpoint *ep)
{
    return ep->loop;
}

/* ---- streams --------------------------------------------------------------------------------- */

fx_quic_conn *fq_conn_at(fx_quic_endpoint *ep, size_t i)
{
    fx_quic_conn *c = ep->conns;
    while (c != NULL && i-- > 0)
        c = c->next;
    return c;
}

bool fq_conn_alive(fx_quic_endpoint *ep, const fx_quic_conn *c)
{
    for (fx_quic_conn *k = ep->conns; k != NULL; k = k->next)
        if (k == c)
            return !c->dead;
    return false;
}

fq_stream *fq_stream_at(fx_quic_conn *c, size_t i)
{
    return i < c->nstreams ? c->streams[i] : NULL;
}

fq_stream *fq_stream_find(fx_quic_conn *c, int64_t sid)
{
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i]->sid == sid)
            return c->streams[i];
    return NULL;
}

/* A stream the layer above may still use: known and not closed. */
static fq_stream *live(fx_quic_conn *c, int64_t sid)
{
    fq_stream *s = fq_stream_find(c, sid);
    return s != NULL && !s->closed ? s : NULL;
}

static fq_stream *stream_add(fx_quic_conn *c, int64_t sid, void *user, bool peer)
{
    if (c->nstreams == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        fq_stream **p = realloc(c->streams, cap * sizeof(*p));
        FX_FUZZ_CHECK(p != NULL);
        c->streams = p;
        c->cap = cap;
    }
    fq_stream *s = calloc(1, sizeof(*s));
    FX_FUZZ_CHECK(s != NULL);
    s->sid = sid;
    s->user = user;
    s->peer_opened = peer;
    c->streams[c->nstreams++] = s;
    return s;
}

/* Bit 0 of a stream id: 1 = server-initiated; bit 1: 1 = unidirectional. */
static int open_local(fx_quic_conn *c, bool bidi, void *user, int64_t *psid)
{
    if (c->closing || c->dead)
        return FX_ECLOSED;
    uint32_t *n = bidi ? &c->opened_bidi : &c->opened_uni;
    if (*n >= c->ep->cfg.local_streams)
        return FX_ESTREAMS;
    int64_t sid = (int64_t)(*n)++ * 4 + (bidi ? 0 : 2) + (c->ep->server ? 1 : 0);
    stream_add(c, sid, user, false);
    *psid = sid;
    return 0;
}

int fx_quic_conn_open_bidi(fx_quic_conn *c, void *stream_user, int64_t *psid)
{
    return open_local(c, true, stream_user, psid);
}

int fx_quic_conn_open_uni(fx_quic_conn *c, void *stream_user, int64_t *psid)
{
    return open_local(c, false, stream_user, psid);
}

/* The fake transport has no stream limit: nothing to grant. */
void fx_quic_conn_grant_uni(fx_quic_conn *c, uint64_t n)
{
    (void)c, (void)n;
}

int fx_quic_stream_set_user(fx_quic_conn *c, int64_t sid, void *stream_user)
{
    fq_stream *s = live(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    s->user = stream_user;
    return 0;
}

static void hold(fx_quic_conn *c, fx_buf *b)
{
    if (c->nheld == c->heldcap) {
        size_t cap = c->heldcap ? 2 * c->heldcap : 16;
        fx_buf **p = realloc(c->held, cap * sizeof(*p));
        FX_FUZZ_CHECK(p != NULL);
        c->held = p;
        c->heldcap = cap;
    }
    c->held[c->nheld++] = fx_buf_ref(b);
}

static void tx_log(fq_stream *s, const uint8_t *p, size_t n)
{
    s->tx_bytes += n;
    if (s->tx_truncated || n == 0)
        return;
    if (s->tx_len + n > FQ_TX_LOG) {
        s->tx_truncated = true;
        return;
    }
    uint8_t *q = realloc(s->tx, s->tx_len + n);
    FX_FUZZ_CHECK(q != NULL);
    memcpy(q + s->tx_len, p, n);
    s->tx = q;
    s->tx_len += n;
}

int fx_quic_stream_send(fx_quic_conn *c, int64_t sid, fx_buf *buf, size_t off, size_t len, bool fin)
{
    if (c->closing || c->dead)
        return FX_ECLOSED;
    fq_stream *s = live(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    /* Only the side that opened a uni stream sends on it. */
    FX_FUZZ_CHECK(!(s->peer_opened && (sid & 2) != 0));
    if (s->tx_fin || s->reset)
        return FX_ECLOSED;
    if (len > 0 && (buf == NULL || off > fx_buf_len(buf) || len > fx_buf_len(buf) - off))
        return -EINVAL;
    if (c->unacked > 0 && c->unacked + len > c->ep->cfg.unacked_cap) {
        c->want_writable = true;
        return FX_EFULL;
    }
    if (len > 0) {
        hold(c, buf);
        tx_log(s, fx_buf_data(buf) + off, len);
        c->unacked += len;
    }
    s->tx_fin = fin;
    if (c->ep->cfg.on_send != NULL)
        c->ep->cfg.on_send(c, s, len > 0 ? fx_buf_data(buf) + off : NULL, len, fin,
                           c->ep->cfg.hook_user);
    return 0;
}

int fx_quic_stream_consume(fx_quic_conn *c, int64_t sid, size_t n)
{
    if (c->dead || n == 0)
        return 0;
    fq_stream *s = fq_stream_find(c, sid);
    /* Credit is only ever given for bytes that were delivered. */
    FX_FUZZ_CHECK(s != NULL);
    FX_FUZZ_CHECK(n <= s->rx_delivered - s->rx_consumed);
    s->rx_consumed += n;
    return 0;
}

int fx_quic_stream_shutdown(fx_quic_conn *c, int64_t sid)
{
    if (c->dead)
        return FX_ECLOSED;
    fq_stream *s = live(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    FX_FUZZ_CHECK(!(s->peer_opened && (sid & 2) != 0));
    bool was = s->tx_fin;
    if (!s->reset)
        s->tx_fin = true;
    if (!was && s->tx_fin && c->ep->cfg.on_send != NULL)
        c->ep->cfg.on_send(c, s, NULL, 0, true, c->ep->cfg.hook_user);
    schedule_turn(c);
    return 0;
}

int fx_quic_stream_reset(fx_quic_conn *c, int64_t sid, uint64_t app_code)
{
    if (c->dead)
        return FX_ECLOSED;
    fq_stream *s = live(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    if (!s->reset) {
        s->reset = true;
        s->reset_code = app_code;
    }
    schedule_turn(c);
    return 0;
}

/* ---- the peer's side ------------------------------------------------------------------------- */

static bool is_peer_stream(const fx_quic_conn *c, int64_t sid)
{
    return ((sid & 1) != 0) != c->ep->server;
}

/* Delivers what the window allows of the peer's waiting bytes on |s|. */
static size_t pump(fx_quic_conn *c, fq_stream *s)
{
    if (s->closed || s->reset || s->rx_fin || c->closing || c->dead)
        return 0;
    size_t avail = s->rx_consumed + c->ep->cfg.stream_window - s->rx_delivered;
    size_t n = s->out_len < avail ? s->out_len : avail;
    bool f = s->out_fin && n == s->out_len;
    if (n == 0 && !f)
        return 0;
    /* The bytes are valid only during the call, as with the real transport:
     * copied out so that a callback that keeps a pointer is caught. */
    uint8_t *p = NULL;
    if (n > 0) {
        p = malloc(n);
        FX_FUZZ_CHECK(p != NULL);
        memcpy(p, s->out, n);
        memmove(s->out, s->out + n, s->out_len - n);
    }
    s->out_len -= n;
    s->rx_delivered += n;
    s->rx_fin = f;
    if (c->ep->cb.on_stream_data != NULL)
        c->ep->cb.on_stream_data(c, s->sid, p, n, f, c->user, s->user);
    free(p);
    /* A peer's uni stream ends with its FIN (the real transport does this
     * inside the same receive callback). */
    if (f && (s->sid & 2) != 0 && !s->closed && !c->dead) {
        s->closed = true;
        if (c->ep->cb.on_stream_close != NULL)
            c->ep->cb.on_stream_close(c, s->sid, false, 0, c->user, s->user);
    }
    return n;
}

#define FQ_OUTBOX_MAX (256u * 1024u) /* what the peer may have queued on one stream */

size_t fq_deliver(fx_quic_conn *c, int64_t sid, const uint8_t *data, size_t len, bool fin)
{
    if (c->closing || c->dead)
        return 0;
    fq_stream *s = fq_stream_find(c, sid);
    if (s == NULL) {
        if (!is_peer_stream(c, sid))
            return 0;
        s = stream_add(c, sid, NULL, true);
        if (c->ep->cb.on_stream_open != NULL)
            c->ep->cb.on_stream_open(c, sid, c->user);
    }
    /* The peer cannot send on our uni streams, nor after its FIN or a reset. */
    if (s->closed || s->reset || s->out_fin || (!s->peer_opened && (sid & 2) != 0) || c->closing)
        return 0;
    if (len > FQ_OUTBOX_MAX - s->out_len)
        len = FQ_OUTBOX_MAX - s->out_len;
    if (len > 0) {
        uint8_t *q = realloc(s->out, s->out_len + len);
        FX_FUZZ_CHECK(q != NULL);
        memcpy(q + s->out_len, data, len);
        s->out = q;
        s->out_len += len;
    }
    s->out_fin = fin;
    return pump(c, s);
}

void fq_peer_reset(fx_quic_conn *c, int64_t sid, uint64_t code)
{
    fq_stream *s = live(c, sid);
    if (s == NULL || s->reset || c->closing)
        return;
    s->reset = true;
    s->reset_remote = true;
    s->reset_code = code;
    schedule_turn(c);
}

void fq_ack(fx_quic_conn *c)
{
    if (c->dead)
        return;
    for (size_t i = 0; i < c->nheld; i++)
        fx_buf_unref(c->held[i]);
    c->nheld = 0;
    c->unacked = 0;
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i]->tx_fin)
            c->streams[i]->tx_fin_acked = true;
    if (c->want_writable && !c->closing) {
        c->want_writable = false;
        if (c->ep->cb.on_writable != NULL)
            c->ep->cb.on_writable(c, c->user);
    }
    schedule_turn(c);
}

/* True when |s| is finished both ways (or reset) and closes now. */
static bool stream_done(const fx_quic_conn *c, const fq_stream *s)
{
    if (s->closed)
        return false;
    if (s->reset)
        return true;
    bool uni = (s->sid & 2) != 0;
    if (uni)
        return !s->peer_opened && s->tx_fin_acked;
    (void)c;
    return s->rx_fin && s->tx_fin_acked;
}

bool fq_turn(fx_quic_conn *c)
{
    if (c->dead)
        return false;
    if (c->closing) {
        conn_end(c);
        return false;
    }
    /* The peer sends what new credit allows. */
    for (size_t i = 0; i < c->nstreams && !c->closing; i++)
        if (c->streams[i]->peer_opened)
            pump(c, c->streams[i]);
    for (size_t i = 0; i < c->nstreams && !c->closing; i++) {
        fq_stream *s = c->streams[i];
        if (!stream_done(c, s))
            continue;
        s->closed = true;
        if (c->ep->cb.on_stream_close != NULL)
            c->ep->cb.on_stream_close(c, s->sid, s->reset, s->reset_code, c->user, s->user);
    }
    return true;
}
