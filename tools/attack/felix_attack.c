/* felix-attack: a hostile Felix client for hardening tests and the soak. It
 * connects to a running broker over real QUIC (optionally from another
 * loopback address, --bind 127.0.0.2) and misbehaves in one chosen way for
 * a fixed time, then prints one JSON line of what it did and how the broker
 * answered. It never authenticates unless the attack is about auth.
 * Threads: main parses options; one fx_loop runs every connection. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hostport.h"
#include "base/log.h"
#include "base/loop.h"
#include "felix/error.h"
#include "quic/quic.h"
#include "wire/frame.h"

#define MAX_CONNS 8192
#define TICK_NS 1000000ull /* 1 ms between rounds of the repeating attacks */
#define FLAG_UNKNOWN 0x0040

typedef enum {
    A_BUDGET_HOG,
    A_REPLY_FLOOD,
    A_JSON_BOMB,
    A_UNI_CHURN,
    A_IDLE_CONNS,
    A_AUTH_FLOOD,
} attack_kind;

static const char *const ATTACK_NAMES[] = {"budget-hog", "reply-flood", "json-bomb",
                                           "uni-churn",  "idle-conns",  "auth-flood"};

typedef struct cfg {
    attack_kind kind;
    const char *host;
    uint16_t port;
    const char *pin;
    const char *bind_ip;
    double seconds;
    int conns;
    int streams;
    int frames;
    uint32_t announce;
    size_t bomb_bytes;
} cfg;

typedef struct aconn {
    struct atk *a;
    fx_quic_conn *qc;
    bool up, closed;
    int streams_open;
    fx_buf *pending; /* a send refused with FX_EFULL, retried on writable */
    int64_t pending_sid;
} aconn;

typedef struct atk {
    cfg c;
    fx_loop *loop;
    fx_quic_endpoint *ep;
    fx_timer tick, end;
    aconn *conns;
    fx_buf *unit; /* the attack's frame bytes, shared by every send */
    uint64_t next_bomb_ns;
    int bomb_conn;
    /* what happened */
    uint64_t up, refused_conns, closed_by_peer, streams_opened, stream_limit_hits, sends, send_full,
        bytes_sent, stream_resets_seen, bytes_received;
    char last_close[128];
} atk;

/* ---- frames ------------------------------------------------------------------ */

static int frame_buf(fx_buf **pb, uint16_t flags, const uint8_t *body, size_t len, int copies)
{
    size_t one = FX_WIRE_HEADER_LEN + len;
    int rv = fx_buf_new(pb, one * (size_t)copies);
    if (rv < 0)
        return rv;
    uint8_t *p = fx_buf_data_mut(*pb);
    for (int i = 0; i < copies; i++) {
        p = fx_frame_header_put(p, flags, (uint32_t)len);
        if (len > 0)
            memcpy(p, body, len);
        p += len;
    }
    return 0;
}

/* "[{},{},...,{}]" filling |n| bytes: about n / 3 empty objects. */
static int bomb_buf(fx_buf **pb, size_t n)
{
    if (n < 4)
        n = 4;
    uint8_t *body = malloc(n);
    if (body == NULL)
        return -ENOMEM;
    body[0] = '[';
    size_t i = 1;
    while (i + 3 < n) {
        memcpy(body + i, i == 1 ? "{}" : ",{}", i == 1 ? 2 : 3);
        i += i == 1 ? 2 : 3;
    }
    body[i++] = ']';
    int rv = frame_buf(pb, 0, body, i, 1);
    free(body);
    return rv;
}

static int auth_buf(fx_buf **pb)
{
    static const char msg[] =
        "{\"type\":\"auth\",\"tenant_id\":\"t1\",\"token\":\"eyJhbGciOiJFZERTQSJ9."
        "eyJzdWIiOiJ4In0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}";
    return frame_buf(pb, 0, (const uint8_t *)msg, sizeof(msg) - 1, 1);
}

static int unit_for(atk *a)
{
    switch (a->c.kind) {
    case A_BUDGET_HOG: /* a header announcing a big body that never comes */
        a->unit = NULL;
        if (fx_buf_new(&a->unit, FX_WIRE_HEADER_LEN) < 0)
            return -ENOMEM;
        fx_frame_header_put(fx_buf_data_mut(a->unit), FX_FLAG_PUBLISH_BATCH, a->c.announce);
        return 0;
    case A_REPLY_FLOOD:
        return frame_buf(&a->unit, FLAG_UNKNOWN, NULL, 0, a->c.frames);
    case A_JSON_BOMB:
        return bomb_buf(&a->unit, a->c.bomb_bytes);
    case A_AUTH_FLOOD:
        return auth_buf(&a->unit);
    case A_UNI_CHURN:
        return fx_buf_new_copy(&a->unit, "x", 1);
    case A_IDLE_CONNS:
        return 0;
    }
    return 0;
}

/* ---- sending ----------------------------------------------------------------- */

static void send_on(aconn *c, int64_t sid, bool fin)
{
    atk *a = c->a;
    int rv = fx_quic_stream_send(c->qc, sid, a->unit, 0, fx_buf_len(a->unit), fin);
    if (rv == FX_EFULL && c->pending == NULL) {
        a->send_full++;
        c->pending = fx_buf_ref(a->unit);
        c->pending_sid = sid;
        return;
    }
    if (rv == 0) {
        a->sends++;
        a->bytes_sent += fx_buf_len(a->unit);
    }
}

/* Opens one bidi stream on |c| and sends the attack's unit on it. */
static bool open_and_send(aconn *c, bool fin)
{
    int64_t sid;
    int rv = fx_quic_conn_open_bidi(c->qc, c, &sid);
    if (rv == FX_ESTREAMS) {
        c->a->stream_limit_hits++;
        return false;
    }
    if (rv < 0)
        return false;
    c->a->streams_opened++;
    c->streams_open++;
    send_on(c, sid, fin);
    return true;
}

static void uni_churn(aconn *c, int n)
{
    for (int i = 0; i < n; i++) {
        int64_t sid;
        int rv = fx_quic_conn_open_uni(c->qc, c, &sid);
        if (rv == FX_ESTREAMS) {
            c->a->stream_limit_hits++;
            return;
        }
        if (rv < 0)
            return;
        c->a->streams_opened++;
        if (i % 2 == 0)
            send_on(c, sid, true);
        else
            fx_quic_stream_reset(c->qc, sid, 0);
    }
}

/* The first action on a connection once its handshake is done. */
static void start_conn(aconn *c)
{
    atk *a = c->a;
    switch (a->c.kind) {
    case A_BUDGET_HOG:
    case A_REPLY_FLOOD:
        for (int i = 0; i < a->c.streams && open_and_send(c, false); i++)
            ;
        break;
    default:
        break;
    }
}

/* The repeating attacks: every tick, on every live connection. */
static void on_tick(fx_loop *l, fx_timer *t, void *user)
{
    atk *a = user;
    uint64_t now = fx_loop_now(l);
    for (int i = 0; i < a->c.conns; i++) {
        aconn *c = &a->conns[i];
        if (!c->up || c->closed)
            continue;
        if (a->c.kind == A_UNI_CHURN)
            uni_churn(c, 64);
        else if (a->c.kind == A_AUTH_FLOOD && c->streams_open < a->c.streams)
            open_and_send(c, false);
    }
    if (a->c.kind == A_JSON_BOMB && now >= a->next_bomb_ns) {
        aconn *c = &a->conns[a->bomb_conn++ % a->c.conns];
        if (c->up && !c->closed && fx_quic_conn_unacked(c->qc) == 0)
            open_and_send(c, false);
        a->next_bomb_ns = now + 1000000000ull;
    }
    fx_loop_timer_arm(l, t, now + TICK_NS);
}

static void on_end(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    (void)user;
    fx_loop_stop(l);
}

/* ---- transport callbacks ----------------------------------------------------- */

static void on_handshake_done(fx_quic_conn *qc, void *user)
{
    aconn *c = user;
    (void)qc;
    c->up = true;
    c->a->up++;
    start_conn(c);
}

static void on_stream_data(fx_quic_conn *qc, int64_t sid, const uint8_t *data, size_t len, bool fin,
                           void *user, void *stream_user)
{
    aconn *c = user;
    (void)data;
    (void)fin;
    (void)stream_user;
    c->a->bytes_received += len;
    /* The reply flood never opens its receive window: replies pile up at the
     * broker. Every other attack reads what it gets. */
    if (c->a->c.kind != A_REPLY_FLOOD)
        fx_quic_stream_consume(qc, sid, len);
}

static void on_stream_close(fx_quic_conn *qc, int64_t sid, bool reset, uint64_t code, void *user,
                            void *stream_user)
{
    aconn *c = user;
    (void)qc;
    (void)sid;
    (void)code;
    (void)stream_user;
    if (reset)
        c->a->stream_resets_seen++;
    if (c->streams_open > 0 && (sid & 0x2) == 0)
        c->streams_open--;
}

static void on_writable(fx_quic_conn *qc, void *user)
{
    aconn *c = user;
    if (c->pending == NULL)
        return;
    fx_buf *b = c->pending;
    c->pending = NULL;
    if (fx_quic_stream_send(qc, c->pending_sid, b, 0, fx_buf_len(b), false) == 0) {
        c->a->sends++;
        c->a->bytes_sent += fx_buf_len(b);
    }
    fx_buf_unref(b);
}

static void on_conn_closed(fx_quic_conn *qc, const fx_quic_close_info *info, void *user)
{
    aconn *c = user;
    (void)qc;
    c->closed = true;
    c->qc = NULL;
    if (!c->up)
        c->a->refused_conns++;
    else if (info->remote)
        c->a->closed_by_peer++;
    if (info->text[0] != '\0')
        snprintf(c->a->last_close, sizeof(c->a->last_close), "%s", info->text);
    fx_buf_unref(c->pending);
    c->pending = NULL;
}

static const fx_quic_callbacks CBS = {
    .on_handshake_done = on_handshake_done,
    .on_stream_data = on_stream_data,
    .on_stream_close = on_stream_close,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};

/* ---- main -------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: felix-attack --server HOST:PORT --pin HEX --attack NAME [options]\n"
               "  Misbehaves against a running felix-broker for a fixed time, then prints\n"
               "  one JSON line of what it did and how the broker answered.\n"
               "attacks:\n"
               "  budget-hog   each stream sends one 12-byte publish-batch header announcing\n"
               "               --announce bytes (default 16 MiB) and never the body\n"
               "  reply-flood  each stream sends --frames frames with an unknown flag and\n"
               "               never reads the error replies\n"
               "  json-bomb    once a second, a --bomb-bytes JSON frame of empty objects\n"
               "  uni-churn    unidirectional streams opened and finished or reset, nonstop\n"
               "  idle-conns   --conns connections that never open a stream\n"
               "  auth-flood   auth messages with a bad token, --streams in flight per conn\n"
               "options:\n"
               "  --bind IP        send from this local address (e.g. 127.0.0.2)\n"
               "  --seconds S      how long (default 20)\n"
               "  --conns N        connections (default 16; idle-conns 4300, reply-flood 1)\n"
               "  --streams N      streams per connection (default 4; reply-flood 1000)\n"
               "  --frames N       reply-flood frames per stream (default 1536)\n"
               "example:\n"
               "  felix-attack --server 127.0.0.1:5000 --pin $FELIX_PIN --bind 127.0.0.2 \\\n"
               "      --attack budget-hog --conns 16 --streams 4 --seconds 20\n");
}

static int parse_kind(const char *s, attack_kind *k)
{
    for (size_t i = 0; i < sizeof(ATTACK_NAMES) / sizeof(ATTACK_NAMES[0]); i++)
        if (strcmp(s, ATTACK_NAMES[i]) == 0) {
            *k = (attack_kind)i;
            return 0;
        }
    return -1;
}

static int parse_server(const char *s, cfg *c)
{
    static fx_hostport hp;
    if (fx_hostport_split(s, &hp, NULL) != 0 || hp.port == 0)
        return -1;
    c->host = hp.host;
    c->port = hp.port;
    return 0;
}

static int parse_args(int argc, char **argv, cfg *c)
{
    static const struct option opts[] = {
        {"server", 1, 0, 's'},     {"pin", 1, 0, 'p'},     {"attack", 1, 0, 'a'},
        {"bind", 1, 0, 'b'},       {"seconds", 1, 0, 't'}, {"conns", 1, 0, 'c'},
        {"streams", 1, 0, 'n'},    {"frames", 1, 0, 'f'},  {"announce", 1, 0, 'A'},
        {"bomb-bytes", 1, 0, 'B'}, {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    *c = (cfg){.seconds = 20,
               .conns = -1,
               .streams = -1,
               .frames = 1536,
               .announce = 16u << 20,
               .bomb_bytes = (16u << 20) - 64};
    bool have_kind = false;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            if (parse_server(optarg, c) < 0)
                return -1;
            break;
        case 'p':
            c->pin = optarg;
            break;
        case 'a':
            if (parse_kind(optarg, &c->kind) < 0)
                return -1;
            have_kind = true;
            break;
        case 'b':
            c->bind_ip = optarg;
            break;
        case 't':
            c->seconds = strtod(optarg, NULL);
            break;
        case 'c':
            c->conns = atoi(optarg);
            break;
        case 'n':
            c->streams = atoi(optarg);
            break;
        case 'f':
            c->frames = atoi(optarg);
            break;
        case 'A':
            c->announce = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'B':
            c->bomb_bytes = (size_t)strtoull(optarg, NULL, 10);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (c->conns < 0)
        c->conns = c->kind == A_IDLE_CONNS ? 4300 : c->kind == A_REPLY_FLOOD ? 1 : 16;
    if (c->streams < 0)
        c->streams = c->kind == A_REPLY_FLOOD ? 1000 : 4;
    if (!have_kind || c->host == NULL || c->pin == NULL || c->conns < 1 || c->conns > MAX_CONNS ||
        c->streams < 1 || c->frames < 1 || c->seconds <= 0)
        return -1;
    return 0;
}

static void report(const atk *a)
{
    printf("{\"attack\":\"%s\",\"seconds\":%.1f,\"conns\":%d,\"conns_up\":%" PRIu64
           ",\"conns_refused\":%" PRIu64 ",\"conns_closed_by_broker\":%" PRIu64
           ",\"streams_opened\":%" PRIu64 ",\"stream_limit_hits\":%" PRIu64 ",\"sends\":%" PRIu64
           ",\"sends_refused_full\":%" PRIu64 ",\"bytes_sent\":%" PRIu64
           ",\"bytes_received\":%" PRIu64 ",\"stream_resets_seen\":%" PRIu64
           ",\"last_close\":\"%s\"}\n",
           ATTACK_NAMES[a->c.kind], a->c.seconds, a->c.conns, a->up, a->refused_conns,
           a->closed_by_peer, a->streams_opened, a->stream_limit_hits, a->sends, a->send_full,
           a->bytes_sent, a->bytes_received, a->stream_resets_seen, a->last_close);
}

static int connect_all(atk *a)
{
    fx_quic_connect_opts co = {.server_name = "localhost", .pin_sha256 = a->c.pin};
    for (int i = 0; i < a->c.conns; i++) {
        a->conns[i].a = a;
        int rv = fx_quic_connect(a->ep, a->c.host, a->c.port, &co, &a->conns[i], &a->conns[i].qc);
        if (rv < 0) {
            fprintf(stderr, "felix-attack: connect: %s\n", fx_strerror(rv));
            return rv;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    atk a = {0};
    if (parse_args(argc, argv, &a.c) < 0) {
        usage(stderr);
        return 2;
    }
    fx_log_set_level(FX_LOG_ERROR);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.client_bind_ip = a.c.bind_ip;
    a.conns = calloc((size_t)a.c.conns, sizeof(*a.conns));
    int rv = a.conns == NULL ? -ENOMEM : unit_for(&a);
    if (rv == 0)
        rv = fx_loop_new(&a.loop, &(fx_loop_opts){.name = "attack", .cpu = -1});
    if (rv == 0)
        rv = fx_quic_client_new(&a.ep, a.loop, &o, &CBS, &a);
    if (rv == 0)
        rv = connect_all(&a);
    if (rv < 0) {
        fprintf(stderr, "felix-attack: %s\n", fx_strerror(rv));
        return 1;
    }
    fx_timer_init(&a.tick, on_tick, &a);
    fx_timer_init(&a.end, on_end, &a);
    uint64_t now = fx_now_ns();
    fx_loop_timer_arm(a.loop, &a.tick, now + TICK_NS);
    fx_loop_timer_arm(a.loop, &a.end, now + (uint64_t)(a.c.seconds * 1e9));
    rv = fx_loop_run(a.loop);
    fx_loop_timer_cancel(a.loop, &a.tick);
    fx_quic_endpoint_free(a.ep);
    report(&a);
    fx_buf_unref(a.unit);
    fx_loop_free(a.loop);
    free(a.conns);
    return rv < 0 ? 1 : 0;
}
