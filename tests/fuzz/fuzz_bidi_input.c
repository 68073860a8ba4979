/* libFuzzer target: the broker's input side of client bidi streams (frame
 * feed, checkpoint-3 reservations, admission parking and the pending
 * buffer, credit, replies) with the whole data plane behind it, on one
 * thread: the broker is built by fx_broker_new as the daemon builds it, but
 * over a fake QUIC transport (fake_quic.c) and thread-free loops
 * (fake_loop.c), so the input decides every interleaving: which bytes
 * arrive on which stream, when the workers and the connection loop run,
 * when time passes, when the peer acknowledges, resets or disconnects.
 *
 * Input: 3 option bytes (workers, io thread, ingress policy, auth, budgets,
 * windows; see setup_opts()), then operations (see step()). After the last
 * one the run is settled (every task and timer run, everything acknowledged)
 * and checked: every byte delivered on a bidi stream that is not blocked
 * was credited and a FIN from the client was answered with the broker's,
 * no credit was ever given for bytes not delivered, what the
 * broker sent is whole frames, and once every connection is closed the
 * publish budgets and ingress gauges are back to zero. ASan/UBSan and leak
 * detection cover the rest. Single-threaded. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "broker/worker.h"
#include "fake_loop.h"
#include "fake_quic.h"
#include "fuzz_common.h"
#include "wire/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_CONNS 4
#define MAX_OPS 4096
#define REPEAT_BYTES (32u * 1024u)
#define REPEAT_TOTAL (64u * 1024u)

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

/* ---- a fake authenticator (auth_mode jwt without the JWT) ------------------------------------ */

/* Token "bad" is refused; any other is accepted and its text kept as the
 * claims. Streams whose name starts with 'x' are forbidden. */
static int fake_verify(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                       void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)now_s;
    FX_FUZZ_CHECK(strlen(token) == len);
    if (strcmp(token, "bad") == 0) {
        snprintf(why, whylen, "bad token");
        return -1;
    }
    char *ctx = strdup(token);
    FX_FUZZ_CHECK(ctx != NULL);
    *pctx = ctx;
    return 0;
}

static bool fake_allows(void *user, const void *ctx, fx_broker_auth_action action,
                        const char *tenant, const char *ns, const char *stream)
{
    (void)user, (void)action, (void)tenant, (void)ns;
    FX_FUZZ_CHECK(ctx != NULL);
    (void)strlen(ctx); /* the claims must still be alive */
    return stream[0] != 'x';
}

static void fake_release(void *user, void *ctx)
{
    (void)user;
    free(ctx);
}

/* ---- the run ------------------------------------------------------------------------------- */

typedef struct run {
    const uint8_t *last; /* the last data operation, for repeats */
    size_t last_len;
    int64_t last_sid;
    size_t repeated; /* bytes repeated so far (at most REPEAT_TOTAL a run) */
    fx_broker *b;
    fx_quic_endpoint *ep;
    fx_quic_conn *conns[MAX_CONNS];
    size_t nconns, cur;
    fx_loop *loops[8];
    size_t nloops;
} run;

static const fx_broker_stream_name precreated[] = {{"t1", "default", "demo"}};

/* Options from the first three bytes. Small budgets, windows and queues
 * make parking, reservation waits and FX_EFULL reachable with short
 * inputs. */
static void setup_opts(rd *r, fx_broker_opts *o, fq_config *q)
{
    static const uint64_t conn_bytes[] = {64, 512, 4096, 1u << 20};
    static const uint64_t all_bytes[] = {128, 1024, 1u << 20, 64u << 20};
    static const uint32_t depth[] = {1, 2, 4, 64};
    static const uint32_t max_frame[] = {256, 4096, 65536, FX_WIRE_DEFAULT_MAX_FRAME};
    static const size_t window[] = {64, 700, 8192, 1u << 20};
    static const uint64_t unacked[] = {1, 300, 8192, 16u << 20};
    uint8_t b0 = u8(r), b1 = u8(r), b2 = u8(r);
    fx_broker_opts_default(o);
    o->workers = 1 + (b0 & 1);
    o->io_threads = (b0 >> 1) & 1;
    o->pub_ingress_wait = (b0 & 4) != 0;
    o->ack_on_commit = (b0 & 8) != 0;
    if (b0 & 16)
        o->auth =
            (fx_broker_auth){.verify = fake_verify, .allows = fake_allows, .release = fake_release};
    o->auto_create_streams = (b0 & 32) == 0;
    o->streams = precreated;
    o->nstreams = 1;
    o->subscriber_queue_policy = (b0 & 64) ? FX_QUEUE_BLOCK : FX_QUEUE_DROP_NEW;
    o->subscriber_lane_queue_policy = (b0 & 128) ? FX_QUEUE_BLOCK : FX_QUEUE_DROP_OLD;
    o->pub_conn_inflight_bytes = conn_bytes[b1 & 3];
    o->pub_inflight_bytes = all_bytes[(b1 >> 2) & 3];
    o->pub_queue_depth = depth[(b1 >> 4) & 3];
    o->max_frame_bytes = max_frame[(b1 >> 6) & 3];
    o->max_subscriptions_per_conn = (b2 & 16) ? 1 : 4096;
    o->log_capacity = (b2 & 32) ? 4 : 1024;
    o->subscriber_queue_capacity = (b2 & 32) ? 2 : 512;
    o->subscriber_lane_queue_depth = (b2 & 32) ? 1 : 64;
    o->event_batch_max_delay_ns = (b2 & 64) ? 5 * FX_NS_PER_MS : 0;
    o->subscriber_flush_max_delay_ns = (b2 & 64) ? 3 * FX_NS_PER_MS : 0;
    o->fanout_batch_size = (b2 & 128) ? 1 : 64;
    o->publish_queue_wait_timeout_ns = 50 * FX_NS_PER_MS;
    o->ack_wait_timeout_ns = 40 * FX_NS_PER_MS;
    o->frame_read_timeout_ns = 100 * FX_NS_PER_MS;
    *q = (fq_config){.stream_window = window[b2 & 3],
                     .unacked_cap = unacked[(b2 >> 2) & 3],
                     .local_streams = (b2 & 16) ? 2 : 64};
}

static void collect_loops(run *x)
{
    fx_broker *b = x->b;
    for (uint32_t i = 0; i < b->nworkers; i++)
        x->loops[x->nloops++] = b->workers[i].loop;
    for (uint32_t i = 0; i < b->nio; i++)
        x->loops[x->nloops++] = b->io[i];
}

static void accept_conn(run *x)
{
    if (x->nconns == MAX_CONNS)
        return;
    fx_quic_conn *c = fq_accept(x->ep);
    x->conns[x->nconns++] = c;
    x->cur = x->nconns - 1;
}

/* A turn of |i|'s transport; forgets it once it ended. */
static void turn(run *x, size_t i)
{
    if (fq_turn(x->conns[i]))
        return;
    x->conns[i] = x->conns[--x->nconns];
    if (x->cur >= x->nconns)
        x->cur = 0;
}

static bool run_tasks(run *x, size_t li, unsigned n)
{
    bool any = false;
    while (n-- > 0 && fx_fake_loop_run_one(x->loops[li]))
        any = true;
    return any;
}

static bool run_all(run *x)
{
    bool any = false;
    for (unsigned round = 0; round < 100000; round++) {
        bool ran = false;
        for (size_t i = 0; i < x->nloops; i++)
            ran |= run_tasks(x, i, 64);
        if (!ran)
            break;
        any = true;
    }
    return any;
}

static bool fire_due(run *x)
{
    bool any = false;
    for (size_t i = 0; i < x->nloops; i++)
        while (fx_fake_loop_fire_one(x->loops[i]))
            any = true;
    return any;
}

static void advance(run *x, uint64_t ns)
{
    fx_fake_clock_advance(ns);
    fire_due(x);
}

/* The |k|-th uni stream the broker opened on |c|, or -1. */
static int64_t uni_sid(fx_quic_conn *c, unsigned k)
{
    size_t n = 0;
    for (size_t i = 0; fq_stream_at(c, i) != NULL; i++) {
        fq_stream *s = fq_stream_at(c, i);
        if ((s->sid & 3) == 3 && !s->closed && n++ == k)
            return s->sid;
    }
    return -1;
}

/* One operation: the low nibble picks it, the high nibble is its argument. */
static void step(run *x, rd *r)
{
    uint8_t op = u8(r), arg = op >> 4;
    fx_quic_conn *c = x->nconns > 0 ? x->conns[x->cur] : NULL;
    int64_t sid = 4 * (int64_t)(arg & 3); /* client bidi streams 0, 4, 8, 12 */
    switch (op & 15) {
    case 0:
    case 1:
    case 2:
    case 3: { /* stream data: [len][bytes]; len >= 0x80 takes a second byte */
        size_t len = u8(r);
        if (len & 0x80)
            len = ((len & 0x7f) << 8) | u8(r);
        if (len > r->n)
            len = r->n;
        if (c != NULL)
            fq_deliver(c, sid, r->p, len, (arg & 4) != 0);
        x->last = r->p;
        x->last_len = len;
        x->last_sid = sid;
        r->p += len;
        r->n -= len;
        break;
    }
    case 4: /* the client's FIN */
        if (c != NULL)
            fq_deliver(c, sid, NULL, 0, true);
        break;
    case 5: /* the client resets a bidi stream */
        if (c != NULL)
            fq_peer_reset(c, sid, 0x99);
        break;
    case 6: /* one loop runs a few tasks */
        if (x->nloops > 0)
            run_tasks(x, arg % x->nloops, 1 + (u8(r) & 15));
        break;
    case 7:
        run_all(x);
        break;
    case 8: /* time passes: up to ~0.5 s, finely below 10 ms */
        advance(x, (uint64_t)u8(r) * (arg < 8 ? 50 * FX_NS_PER_US : 2 * FX_NS_PER_MS));
        break;
    case 9:
        if (c != NULL)
            fq_ack(c);
        break;
    case 10:
        if (c != NULL)
            turn(x, x->cur);
        break;
    case 11: { /* the subscriber stops reading an event stream */
        int64_t u = c != NULL ? uni_sid(c, arg) : -1;
        if (u >= 0)
            fq_peer_reset(c, u, 0x10c);
        break;
    }
    case 12: /* the client disconnects */
        if (c != NULL) {
            fq_close_remote(c, 0);
            turn(x, x->cur);
        }
        break;
    case 13:
        if (arg & 8)
            accept_conn(x);
        else if (x->nconns > 0)
            x->cur = arg % x->nconns;
        break;
    case 14:
        if (arg == 0) /* the drain starts (what fx_broker_drain sets first) */
            atomic_store(&x->b->draining, true);
        else if (c != NULL && x->last_len > 0) { /* volume: the last data again, 128 x arg times */
            size_t times = 128u * arg;
            if (times > REPEAT_BYTES / x->last_len)
                times = REPEAT_BYTES / x->last_len; /* at most 32 KiB a time */
            for (size_t i = 0; i < times && x->repeated < REPEAT_TOTAL; i++) {
                fq_deliver(c, x->last_sid, x->last, x->last_len, false);
                x->repeated += x->last_len;
            }
        }
        break;
    case 15: /* a client uni stream: refused */
        if (c != NULL)
            fq_deliver(c, 2 + 4 * (int64_t)(arg & 3), (const uint8_t *)"x", 1, false);
        break;
    }
}

/* Runs everything that can still happen: tasks, due timers, acknowledgements
 * and transport turns, then the clock to the next deadline (at most 120 s
 * of fake time in all). */
static void settle(run *x)
{
    uint64_t waited = 0;
    for (unsigned round = 0; round < 2000; round++) {
        for (size_t i = x->nconns; i-- > 0;) {
            fq_ack(x->conns[i]);
            turn(x, i);
        }
        bool any = run_all(x);
        any |= fire_due(x);
        if (any)
            continue;
        bool quiet = true;
        for (size_t i = 0; i < x->nconns; i++)
            quiet &= fq_unacked(x->conns[i]) == 0;
        uint64_t next = UINT64_MAX, d;
        for (size_t i = 0; i < x->nloops; i++)
            if (fx_fake_loop_next_deadline(x->loops[i], &d) && d < next)
                next = d;
        if (next == UINT64_MAX) {
            if (quiet)
                return;
            continue;
        }
        uint64_t now = fx_now_ns();
        uint64_t dt = next > now ? next - now : 0;
        if (waited + dt > 120 * FX_NS_PER_S)
            return;
        waited += dt;
        advance(x, dt);
    }
}

/* ---- checks -------------------------------------------------------------------------------- */

static bool bidi_blocked(const fxb_bidi *s)
{
    return s->admit.parked != NULL || s->resv.wait || s->replies.full || s->sub_pending;
}

/* Settled, a bidi stream that is not blocked has credited every byte it
 * was given (a partial frame is covered by its reservation). */
static void check_credit(run *x)
{
    for (uint32_t e = 0; e < x->b->neps; e++)
        for (fxb_conn *bc = x->b->eps[e].conns; bc != NULL; bc = bc->cnext) {
            if (bc->qc == NULL)
                continue;
            for (fxb_bidi *s = bc->bidis; s != NULL; s = s->next) {
                fq_stream *fs = fq_stream_find(bc->qc, s->sid);
                FX_FUZZ_CHECK(fs != NULL);
                if (bidi_blocked(s) || s->closed || fs->closed)
                    continue;
                if (fs->rx_consumed != fs->rx_delivered) {
                    fprintf(stderr, "stream %lld: %zu of %zu delivered bytes credited\n",
                            (long long)s->sid, fs->rx_consumed, fs->rx_delivered);
                    FX_FUZZ_CHECK(fs->rx_consumed == fs->rx_delivered);
                }
                /* The client's FIN is answered once everything before it
                 * was handled (fx_client_close waits for it). */
                if (fs->rx_fin && !fs->reset && !fs->tx_fin) {
                    fprintf(stderr, "stream %lld: the client's FIN was never answered\n",
                            (long long)s->sid);
                    FX_FUZZ_CHECK(fs->tx_fin);
                }
            }
        }
}

/* What the broker sent on a stream is a sequence of whole frames (whole
 * once it sent its FIN). */
static void check_output(fq_stream *s)
{
    if (s->tx_truncated || s->tx_len == 0)
        return;
    fx_frame_decoder dec;
    fx_frame_decoder_init(&dec, FX_WIRE_DEFAULT_MAX_FRAME);
    size_t off = 0;
    while (off < s->tx_len) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err;
        int rv = fx_frame_decoder_feed(&dec, s->tx + off, s->tx_len - off, &used, &f, &err);
        if (rv < 0)
            fprintf(stderr, "stream %lld: broker sent a bad frame: %s\n", (long long)s->sid,
                    err.msg);
        FX_FUZZ_CHECK(rv >= 0);
        if (rv == FX_FRAME_READY)
            FX_FUZZ_CHECK(f.flags_rv == 0);
        off += used;
        if (used == 0 && rv != FX_FRAME_READY)
            break;
    }
    if (s->tx_fin)
        FX_FUZZ_CHECK(fx_frame_decoder_finish(&dec, NULL) == 0);
    fx_frame_decoder_deinit(&dec);
}

/* FX_FUZZ_VERBOSE=1 prints what each stream carried (to check seeds). */
static void dump_stream(size_t conn, const fq_stream *s)
{
    fprintf(stderr,
            "conn %zu stream %lld: in %zu credited %zu fin %d | out %zu fin %d%s reset %d%s%s\n",
            conn, (long long)s->sid, s->rx_delivered, s->rx_consumed, s->rx_fin, s->tx_bytes,
            s->tx_fin, s->tx_fin_acked ? " (acked)" : "", s->reset,
            s->reset_remote ? " (peer)" : "", s->closed ? " closed" : "");
}

static void check_outputs(run *x)
{
    bool verbose = getenv("FX_FUZZ_VERBOSE") != NULL;
    for (size_t i = 0; i < x->nconns; i++)
        for (size_t k = 0; fq_stream_at(x->conns[i], k) != NULL; k++) {
            if (verbose)
                dump_stream(i, fq_stream_at(x->conns[i], k));
            check_output(fq_stream_at(x->conns[i], k));
        }
}

typedef struct gauges {
    int64_t reserved, queued, subs, sub_conns;
} gauges;

static gauges gauges_now(void)
{
    return (gauges){
        atomic_load(&fx_gauges.ingress_reserved_bytes), atomic_load(&fx_gauges.ingress_queue_depth),
        atomic_load(&fx_gauges.sub_subscriptions), atomic_load(&fx_gauges.sub_active_connections)};
}

/* ---- entry points -------------------------------------------------------------------------- */

static void discard_line(fx_log_level level, const char *line, size_t len, void *user)
{
    (void)level, (void)line, (void)len, (void)user;
}

static const fx_log_sink quiet_sink = {.on_line = discard_line};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* Debug lines are formatted (their arguments come from the input) and
     * dropped. */
    fx_log_set_sink(&quiet_sink);
    fx_log_set_level(FX_LOG_DEBUG);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size};
    fx_broker_opts o;
    fq_config q;
    setup_opts(&r, &o, &q);
    fq_configure(&q);
    gauges before = gauges_now();
    run x = {0};
    FX_FUZZ_CHECK(fx_broker_new(&x.b, &o) == 0);
    x.ep = x.b->eps[0].ep;
    FX_FUZZ_CHECK(x.ep != NULL);
    collect_loops(&x);
    accept_conn(&x);
    for (unsigned i = 0; i < MAX_OPS && r.n > 0; i++)
        step(&x, &r);
    settle(&x);
    check_credit(&x);
    check_outputs(&x);
    /* Every client leaves; then nothing may be held. */
    while (x.nconns > 0) {
        fq_close_remote(x.conns[0], 0);
        turn(&x, 0);
    }
    settle(&x);
    FX_FUZZ_CHECK(fx_broker_budget_in_use(x.b) == 0);
    gauges after = gauges_now();
    FX_FUZZ_CHECK(after.reserved == before.reserved);
    FX_FUZZ_CHECK(after.queued == before.queued);
    FX_FUZZ_CHECK(after.subs == before.subs);
    FX_FUZZ_CHECK(after.sub_conns == before.sub_conns);
    fx_broker_free(x.b);
    return 0;
}
