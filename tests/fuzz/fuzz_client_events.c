/* libFuzzer target: libfelix's event-stream parser (src/client/subscribe.c:
 * the broker's uni streams, hello routing in either arrival order, event
 * batch decoding, the subscription queue and its policy, Block credit) and
 * the subscribe request stream's replies, reached through the public API
 * over a fake QUIC transport (fake_quic.c): no socket. The client runs on
 * its real loop thread; the harness thread is the application (subscribe,
 * next, callbacks, unsubscribe) and injects the broker's bytes on the loop,
 * waiting for each step, so runs are repeatable. A small scripted broker in
 * the transport's send hook answers auth, subscribe and the close
 * handshake; everything on the event streams comes from the input.
 *
 * Input: 2 option bytes (queue policy and capacity, callback or next(),
 * one or two subscriptions, start position, receive window, whether the
 * first event stream bytes arrive before the `subscribed` answer), that
 * early chunk if so, then operations (see step()). Checked: credit is only
 * given for delivered bytes (in the fake), every event handed out is
 * readable (ASan), counters are consistent, and everything is freed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "client/client.h"
#include "fake_quic.h"
#include "felix/felix.h"
#include "fuzz_common.h"
#include "wire/frame.h"
#include "wire/message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define NSUBS 2
#define MAX_OPS 2048

typedef struct rd {
    const uint8_t *p;
    size_t n;
} rd;

static uint8_t u8(rd *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

/* [len][bytes]; len >= 0x80 takes a second byte. */
static size_t chunk(rd *r, const uint8_t **pp)
{
    size_t len = u8(r);
    if (len & 0x80)
        len = ((len & 0x7f) << 8) | u8(r);
    if (len > r->n)
        len = r->n;
    *pp = r->p;
    r->p += len;
    r->n -= len;
    return len;
}

/* Event stream |k| of the broker: server-initiated uni streams 3, 7, ... */
static int64_t evs_sid(unsigned k)
{
    return 3 + 4 * (int64_t)k;
}

/* ---- the scripted broker (client loop thread) ------------------------------------------------ */

typedef struct mb_stream {
    fx_quic_conn *c;
    int64_t sid;
    fx_frame_decoder dec;
    bool subscribe; /* a subscribe arrived on it */
} mb_stream;

typedef struct broker {
    mb_stream st[16];
    size_t nst;
    int nsubscribes;
    int64_t req_sid[NSUBS]; /* request stream of each subscription, or -1 */
    fx_quic_conn *req_conn[NSUBS];
    const uint8_t *early; /* event stream bytes sent before the first `subscribed` */
    size_t early_len;
} broker;

static broker mb;

typedef struct reply {
    fx_quic_conn *c;
    int64_t sid;
    bool fin;
    const uint8_t *early;
    size_t early_len;
    size_t n;
    uint8_t bytes[];
} reply;

/* The broker's answer goes out on a later loop turn, as over a network. */
static void reply_run(void *user)
{
    reply *r = user;
    fx_quic_endpoint *ep = fq_last_endpoint();
    if (ep != NULL && fq_conn_alive(ep, r->c)) {
        if (r->early_len > 0)
            fq_deliver(r->c, evs_sid(0), r->early, r->early_len, false);
        fq_deliver(r->c, r->sid, r->bytes, r->n, r->fin);
    }
    free(r);
}

static void send_reply(fx_quic_conn *c, int64_t sid, const fx_msg *m, bool fin, bool early)
{
    uint8_t *f = NULL;
    size_t n = 0;
    if (m != NULL)
        FX_FUZZ_CHECK(fx_msg_encode_frame(m, &f, &n) == 0);
    reply *r = malloc(sizeof(*r) + n);
    FX_FUZZ_CHECK(r != NULL);
    *r = (reply){.c = c, .sid = sid, .fin = fin, .n = n};
    if (early) {
        r->early = mb.early;
        r->early_len = mb.early_len;
    }
    if (n > 0)
        memcpy(r->bytes, f, n);
    free(f);
    FX_FUZZ_CHECK(fx_loop_call(fx_quic_conn_loop(c), reply_run, r) == 0);
}

static mb_stream *mb_find(fx_quic_conn *c, int64_t sid)
{
    for (size_t i = 0; i < mb.nst; i++)
        if (mb.st[i].c == c && mb.st[i].sid == sid)
            return &mb.st[i];
    if (mb.nst == sizeof(mb.st) / sizeof(mb.st[0]))
        return NULL;
    mb_stream *s = &mb.st[mb.nst++];
    *s = (mb_stream){.c = c, .sid = sid};
    fx_frame_decoder_init(&s->dec, FX_WIRE_DEFAULT_MAX_FRAME);
    return s;
}

static void mb_message(mb_stream *s, const fx_msg *m)
{
    fx_msg r;
    switch (m->type) {
    case FX_MSG_AUTH:
        fx_msg_init_auth_ok(&r, 0x3f);
        send_reply(s->c, s->sid, &r, false, false);
        break;
    case FX_MSG_SUBSCRIBE: {
        int k = mb.nsubscribes++;
        s->subscribe = true;
        if (k < NSUBS) {
            mb.req_sid[k] = s->sid;
            mb.req_conn[k] = s->c;
        }
        fx_msg_init_subscribed(&r, (uint64_t)k + 1);
        send_reply(s->c, s->sid, &r, true, k == 0);
        break;
    }
    default:
        break; /* publishes are not part of this target */
    }
}

/* What the client sends, as the broker reads it. A publish stream's FIN
 * (the close handshake) is answered with ours. */
static void mb_on_send(fx_quic_conn *c, fq_stream *fs, const uint8_t *p, size_t n, bool fin,
                       void *user)
{
    (void)user;
    mb_stream *s = mb_find(c, fs->sid);
    FX_FUZZ_CHECK(s != NULL);
    while (n > 0) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err;
        int rv = fx_frame_decoder_feed(&s->dec, p, n, &used, &f, &err);
        /* The client's own frames are always well formed. */
        FX_FUZZ_CHECK(rv >= 0);
        p += used;
        n -= used;
        fx_msg m;
        if (rv == FX_FRAME_READY && f.kind == FX_BODY_JSON &&
            fx_msg_decode(&m, f.body, f.len, NULL) == 0) {
            mb_message(s, &m);
            fx_msg_deinit(&m);
        }
    }
    if (fin && !s->subscribe)
        send_reply(c, s->sid, NULL, true, false);
}

static void mb_reset(void)
{
    for (size_t i = 0; i < mb.nst; i++)
        fx_frame_decoder_deinit(&mb.st[i].dec);
    mb = (broker){.req_sid = {-1, -1}};
}

/* ---- running steps on the client loop -------------------------------------------------------- */

static fx_loop *loop;

typedef struct lcall {
    void (*fn)(void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} lcall;

static void lcall_run(void *user)
{
    lcall *k = user;
    k->fn(k->arg);
    pthread_mutex_lock(&k->mu);
    k->done = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* Runs |fn(arg)| on the client loop and waits for it. */
static void on_loop(void (*fn)(void *arg), void *arg)
{
    lcall k = {.fn = fn, .arg = arg};
    pthread_mutex_init(&k.mu, NULL);
    pthread_cond_init(&k.cv, NULL);
    FX_FUZZ_CHECK(fx_loop_call(loop, lcall_run, &k) == 0);
    pthread_mutex_lock(&k.mu);
    while (!k.done)
        pthread_cond_wait(&k.cv, &k.mu);
    pthread_mutex_unlock(&k.mu);
    pthread_cond_destroy(&k.cv);
    pthread_mutex_destroy(&k.mu);
}

static void nothing(void *arg)
{
    (void)arg;
}

/* Tasks posted so far (and those they post in turn) have run. */
static void barrier(void)
{
    for (int i = 0; i < 2; i++)
        on_loop(nothing, NULL);
}

static fx_quic_conn *conn0(void)
{
    fx_quic_endpoint *ep = fq_last_endpoint();
    fx_quic_conn *c = ep != NULL ? fq_conn_at(ep, 0) : NULL;
    return c != NULL && !fq_is_closing(c) ? c : NULL;
}

/* Without Block the client holds no credit back: every byte delivered on
 * an event stream that is routed and not buffering was credited (whole
 * frames when handled, partial ones as they arrive). Client loop. */
static fx_client *cur_client;
static bool check_full_credit;

static void check_evs_credit(void)
{
    if (!check_full_credit || cur_client == NULL || cur_client->nconns == 0)
        return;
    cconn *cc = cur_client->conns[0];
    if (cc == NULL || cc->qc == NULL)
        return;
    for (evs *e = cc->evlist; e != NULL; e = e->next) {
        fq_stream *fs = fq_stream_find(cc->qc, e->sid);
        if (fs == NULL || fs->closed || e->gone || e->stalled != NULL || e->rx_len > 0)
            continue;
        if (fs->rx_consumed != fs->rx_delivered) {
            fprintf(stderr, "event stream %lld: %zu of %zu delivered bytes credited\n",
                    (long long)e->sid, fs->rx_consumed, fs->rx_delivered);
            FX_FUZZ_CHECK(fs->rx_consumed == fs->rx_delivered);
        }
    }
}

static void check_evs_credit_cb(void *arg)
{
    (void)arg;
    check_evs_credit();
}

typedef struct delivery {
    int64_t sid; /* -1: the request stream of subscription |sub| */
    int sub;
    const uint8_t *p;
    size_t n;
    bool fin;
    int what; /* 0 data, 1 reset, 2 close the connection, 3 turn + ack */
} delivery;

static void deliver_run(void *arg)
{
    delivery *d = arg;
    fx_quic_conn *c = conn0();
    if (c == NULL)
        return;
    int64_t sid = d->sid;
    if (sid < 0) {
        if (mb.req_sid[d->sub] < 0 || mb.req_conn[d->sub] != c)
            return;
        sid = mb.req_sid[d->sub];
    }
    switch (d->what) {
    case 0:
        fq_deliver(c, sid, d->p, d->n, d->fin);
        break;
    case 1:
        fq_peer_reset(c, sid, 0x1);
        break;
    case 2:
        fq_close_remote(c, 0);
        break;
    case 3:
        fq_ack(c);
        fq_turn(c);
        break;
    }
    check_evs_credit();
}

static void deliver(const delivery *d)
{
    delivery copy = *d;
    on_loop(deliver_run, &copy);
}

/* ---- the application ------------------------------------------------------------------------- */

typedef struct app {
    fx_client *c;
    fx_subscription *subs[NSUBS];
    uint64_t cb_events; /* events the callback saw (client loop) */
    uint64_t sum;       /* a fold of every payload byte read (so each is touched) */
} app;

static void touch(app *a, const fx_event *ev)
{
    for (size_t i = 0; i < ev->len; i++)
        a->sum += ev->payload[i];
    if (ev->flags & FX_EVENT_GAP)
        FX_FUZZ_CHECK(ev->has_offset && ev->gap > 0);
}

static void on_event(void *user, const fx_event *ev)
{
    app *a = user;
    a->cb_events++;
    touch(a, ev);
}

/* Reads up to |n| events of subscription |j| without waiting; when the
 * queue runs dry, lets the loop run what the reads posted (credit, a
 * stalled batch resumed) and reads on while that brought more. */
static void consume(app *a, int j, unsigned n)
{
    fx_subscription *s = a->subs[j];
    if (s == NULL)
        return;
    bool more = true;
    while (n > 0 && more) {
        more = false;
        fx_event ev;
        while (n > 0 && fx_subscription_next(s, &ev, 0) == 0) {
            touch(a, &ev);
            n--;
            more = true;
        }
        barrier();
    }
}

/* The subscription's counters add up: each event received is delivered,
 * dropped or still queued. */
static void check_stats(app *a, int j)
{
    fx_sub_stats st;
    if (a->subs[j] == NULL)
        return;
    FX_FUZZ_CHECK(fx_subscription_stats(a->subs[j], &st) == 0);
    FX_FUZZ_CHECK(st.delivered + st.dropped <= st.received);
    FX_FUZZ_CHECK(st.missed >= st.gaps);
    fx_sub_error e;
    FX_FUZZ_CHECK(fx_subscription_error(a->subs[j], &e) == 0);
    FX_FUZZ_CHECK(memchr(e.message, '\0', sizeof(e.message)) != NULL);
    if (getenv("FX_FUZZ_VERBOSE") != NULL) /* to check seeds */
        fprintf(stderr,
                "sub %d id %llu: received %llu delivered %llu dropped %llu queued %llu gaps %llu "
                "callback %llu; error %d %s\n",
                j, (unsigned long long)st.subscription_id, (unsigned long long)st.received,
                (unsigned long long)st.delivered, (unsigned long long)st.dropped,
                (unsigned long long)st.queue_depth, (unsigned long long)st.gaps,
                (unsigned long long)a->cb_events, e.code, e.message);
}

static void unsubscribe(app *a, int j)
{
    if (a->subs[j] == NULL)
        return;
    check_stats(a, j);
    fx_unsubscribe(a->subs[j]);
    a->subs[j] = NULL;
}

/* One operation: the low 3 bits pick it, the rest is its argument. */
static void step(app *a, rd *r)
{
    uint8_t op = u8(r), arg = op >> 3;
    delivery d = {.sid = evs_sid(arg & 3), .fin = (arg & 4) != 0};
    switch (op & 7) {
    case 0:
    case 1:
    case 2: /* bytes on an event stream */
        d.n = chunk(r, &d.p);
        deliver(&d);
        break;
    case 3: /* the broker resets an event stream */
        d.what = 1;
        deliver(&d);
        break;
    case 4: /* the application reads */
        consume(a, arg & 1, 1 + (arg >> 1));
        break;
    case 5: /* more bytes on a subscribe request stream */
        d = (delivery){.sid = -1, .sub = arg & 1, .fin = (arg & 2) != 0};
        d.n = chunk(r, &d.p);
        deliver(&d);
        break;
    case 6: /* acknowledgements and a transport turn (the peer sends what credit allows) */
        d.what = 3;
        deliver(&d);
        break;
    case 7:
        switch (arg & 7) {
        case 0:
        case 1:
            unsubscribe(a, arg & 1);
            barrier();
            break;
        case 2:
        case 3:
            if (a->subs[arg & 1] != NULL)
                (void)fx_subscription_set_callback(a->subs[arg & 1], on_event, a);
            barrier();
            break;
        case 4: /* the connection is lost */
            d.what = 2;
            deliver(&d);
            barrier();
            break;
        case 5:
            check_stats(a, 0);
            check_stats(a, 1);
            break;
        case 6: /* the broker resets a subscribe request stream */
            d = (delivery){.sid = -1, .sub = (arg >> 3) & 1, .what = 1};
            deliver(&d);
            break;
        case 7: /* the broker's FIN alone on an event stream */
            d.fin = true;
            deliver(&d);
            break;
        }
        break;
    }
}

/* ---- entry points ---------------------------------------------------------------------------- */

static void discard_line(fx_log_level level, const char *line, size_t len, void *user)
{
    (void)level, (void)line, (void)len, (void)user;
}

static const fx_log_sink quiet_sink = {.on_line = discard_line};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fx_log_set_sink(&quiet_sink);
    fx_log_set_level(FX_LOG_DEBUG);
    setenv("FELIX_CLIENT_LOOPS", "1", 1);
    /* One reference on the client loop for the whole process, so each run
     * does not start and join a thread (every run drains it before it
     * returns). */
    FX_FUZZ_CHECK(fxc_rt_acquire(&loop) == 0);
    return 0;
}

static void client_opts(rd *r, fx_client_opts *o, fq_config *q, fx_start *start, int *nsubs,
                        bool *callback)
{
    static const fx_policy policy[] = {FX_POLICY_DROP_NEW, FX_POLICY_BLOCK, FX_POLICY_DROP_OLD,
                                       FX_POLICY_BLOCK};
    static const uint32_t capacity[] = {1, 2, 8, 256};
    static const size_t window[] = {64, 700, 8192, 1u << 20};
    uint8_t b0 = u8(r), b1 = u8(r);
    fx_client_opts_init(o);
    o->server = "127.0.0.1:4433";
    o->tenant = "t1";
    o->token = "tok";
    o->insecure = true;
    o->publish_conn_pool = 1;
    o->publish_streams_per_conn = 1;
    o->reconnect = false;
    o->connect_timeout_ms = 5000;
    o->sub_queue_policy = policy[b0 & 3];
    o->sub_queue_capacity = capacity[b1 & 3];
    o->max_frame_bytes = (b0 & 128) ? 4096 : 16u << 20;
    *callback = (b0 & 4) != 0;
    *nsubs = 1 + ((b0 >> 3) & 1);
    static const fx_start_kind kinds[] = {FX_START_LATEST, FX_START_EARLIEST, FX_START_OFFSET,
                                          FX_START_LATEST};
    *start = (fx_start){.kind = kinds[(b0 >> 5) & 3], .offset = 5};
    *q = (fq_config){.stream_window = window[(b1 >> 2) & 3],
                     .unacked_cap = 16u << 20,
                     .local_streams = 64,
                     .auto_turn = true,
                     .on_send = mb_on_send};
    if (b0 & 16)
        mb.early_len = chunk(r, &mb.early);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size};
    fx_client_opts o;
    fq_config q;
    fx_start start;
    int nsubs;
    bool callback;
    mb_reset();
    client_opts(&r, &o, &q, &start, &nsubs, &callback);
    fq_configure(&q);
    app a = {0};
    check_full_credit = o.sub_queue_policy != FX_POLICY_BLOCK;
    int rv = fx_client_connect(&a.c, &o);
    if (rv != 0)
        fprintf(stderr, "connect over the fake transport failed: %s\n", fx_strerror(rv));
    FX_FUZZ_CHECK(rv == 0);
    FX_FUZZ_CHECK(fx_quic_endpoint_loop(fq_last_endpoint()) == loop);
    cur_client = a.c;
    for (int j = 0; j < nsubs; j++) {
        rv = fx_subscribe(&a.subs[j], a.c, "default", "demo", &start);
        if (rv != 0 && a.subs[j] != NULL) /* a cursor error keeps the subscription */
            unsubscribe(&a, j);
    }
    if (callback && a.subs[0] != NULL)
        FX_FUZZ_CHECK(fx_subscription_set_callback(a.subs[0], on_event, &a) == 0);
    for (unsigned i = 0; i < MAX_OPS && r.n > 0; i++)
        step(&a, &r);
    barrier();
    for (int j = 0; j < NSUBS; j++) {
        consume(&a, j, 1u << 20);
        unsubscribe(&a, j);
    }
    on_loop(check_evs_credit_cb, NULL);
    cur_client = NULL;
    (void)fx_client_close(a.c, 5000);
    barrier(); /* answers still queued for the closed connection are dropped now */
    FX_FUZZ_CHECK(fq_last_endpoint() == NULL); /* freed by the close */
    mb_reset();
    return 0;
}
