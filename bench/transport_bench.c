/* felix-transport-bench: measures src/quic on 127.0.0.1 in one process. The
 * server side runs on one fx_loop thread, the clients on another (pinned to
 * two different CPUs unless --no-pin). Modes: bulk (throughput and CPU per
 * GB, checksummed), echo (64-byte round trips) and relay (client A -> middle
 * -> client B, the shape of publish -> broker -> subscriber). Threads: main
 * parses options, starts and tears down each run and waits; the loops do all
 * transport work, so every QUIC object is touched only by its own loop. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/loop.h"
#include "felix/error.h"
#include "quic/quic.h"

#define CHUNK (1u << 20)   /* largest single fx_quic_stream_send in bulk */
#define STREAM_SKEW 65536u /* streams start at different pattern offsets */
#define MSG_HDR 16         /* echo/relay message: send time, sequence */
#define MAX_MSG 16384
#define TEARDOWN_TIMEOUT_S 10.0

typedef enum { MODE_BULK, MODE_ECHO, MODE_RELAY, MODE_IDLE } bench_mode;

static const char *const MODE_NAMES[] = {"bulk", "echo", "relay", "idle"};

typedef struct cfg {
    bench_mode mode;
    int streams;
    uint64_t mib;
    size_t chunk;
    size_t mtu; /* 0: transport default (PMTUD from 1200 up to the bound) */
    bool gso;
    bool pin_cpus;
    bool json;
    bool verify;
    bool relay_rtt;      /* relay: B echoes back through the middle to A */
    bool insecure;       /* clients accept any certificate instead of the pin */
    const char *pin_hex; /* pin to check instead of the server's (tests refusal) */
    int rounds;
    int warmup;
    int runs;
    size_t msg;
    double timeout_s;
} cfg;

/* What one run produced. Latencies in microseconds; NaN where not measured. */
typedef struct result {
    double mb_per_s, cpu_s_per_gb, secs;
    double p50, p90, p99, p999, max;
    double segs_per_sendmsg, payload_per_dgram;
    double rev_dgrams, rev_sendmsg; /* server -> client datagrams and sendmsg calls */
    double cli_turns, srv_turns;    /* loop turns (epoll returns) over the whole run */
    uint64_t rx_dropped;
    bool gso_disabled;
    int sndbuf, rcvbuf;
} result;

/* ---- running checksum --------------------------------------------------- */

/* Fletcher-style sums over little-endian 64-bit words: |a| catches changed
 * bytes, |b| weighs each word by its position, so reordering is caught too.
 * Bytes arrive in arbitrary pieces; |carry| holds an unfinished word. */
typedef struct fsum {
    uint64_t a, b, len;
    uint8_t carry[8];
    size_t n;
} fsum;

static void fsum_word(fsum *s, const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    s->a += w;
    s->b += s->a;
}

static void fsum_update(fsum *s, const uint8_t *p, size_t len)
{
    s->len += len;
    if (s->n > 0) {
        size_t k = 8 - s->n < len ? 8 - s->n : len;
        memcpy(s->carry + s->n, p, k);
        s->n += k;
        p += k;
        len -= k;
        if (s->n < 8)
            return;
        fsum_word(s, s->carry);
        s->n = 0;
    }
    if (len == 0)
        return;
    uint64_t a = s->a, b = s->b;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, sizeof(w));
        a += w;
        b += a;
    }
    s->a = a;
    s->b = b;
    memcpy(s->carry, p, len);
    s->n = len;
}

static void fsum_final(fsum *s)
{
    if (s->n > 0) {
        memset(s->carry + s->n, 0, 8 - s->n);
        fsum_word(s, s->carry);
        s->n = 0;
    }
}

static bool fsum_equal(const fsum *x, const fsum *y)
{
    return x->a == y->a && x->b == y->b && x->len == y->len;
}

/* ---- shared, read-only after setup -------------------------------------- */

typedef struct shared {
    cfg c;
    fx_buf *pat; /* random bytes, CHUNK + STREAM_SKEW long */
    fsum *expect;
    char state_dir[64];
    size_t dgram; /* mtu_upper_bound in use */
    bool dgram_pinned;
    int cpus[2];
    int ncpus;
} shared;

static uint64_t stream_bytes(const cfg *c, int i)
{
    uint64_t total = c->mib << 20;
    uint64_t per = total / (uint64_t)c->streams;
    return per + ((uint64_t)i < total % (uint64_t)c->streams ? 1 : 0);
}

/* Stream |i| carries pattern[skew(i) + (offset mod CHUNK)]: every stream
 * differs, so bytes delivered on the wrong stream fail the checksum. */
static size_t stream_skew(int i)
{
    return ((size_t)i * 1031u) % STREAM_SKEW;
}

static int pattern_setup(shared *sh)
{
    int rv = fx_buf_new(&sh->pat, CHUNK + STREAM_SKEW);
    if (rv < 0)
        return rv;
    uint8_t *p = fx_buf_data_mut(sh->pat);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < CHUNK + STREAM_SKEW; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
    return 0;
}

/* What the server must compute for each stream, worked out before any run
 * so it costs nothing inside the measurement. */
static int expect_setup(shared *sh)
{
    sh->expect = calloc((size_t)sh->c.streams, sizeof(*sh->expect));
    if (sh->expect == NULL)
        return -ENOMEM;
    const uint8_t *pat = fx_buf_data(sh->pat);
    for (int i = 0; i < sh->c.streams && sh->c.verify; i++) {
        uint64_t left = stream_bytes(&sh->c, i);
        while (left > 0) {
            size_t n = left < CHUNK ? (size_t)left : CHUNK;
            fsum_update(&sh->expect[i], pat + stream_skew(i), n);
            left -= n;
        }
        fsum_final(&sh->expect[i]);
    }
    return 0;
}

/* ---- one run ------------------------------------------------------------ */

/* A client connection (loop: the client loop) and its message reassembly. */
typedef struct peer {
    fx_quic_conn *c;
    int64_t sid;
    bool hs_done;
    uint8_t acc[MAX_MSG];
    size_t nacc;
} peer;

typedef struct rxstream {
    fsum sum;
    uint64_t got;
    bool fin;
} rxstream;

typedef struct run {
    const shared *sh;
    const cfg *c;
    int index;
    fx_loop *sl, *cl;
    fx_quic_endpoint *srv, *cep_a, *cep_b;
    char pin[65];
    uint16_t port;
    peer a, b;
    /* bulk sender (client loop) */
    int64_t *sids;
    uint64_t *sent;
    int rr, unfinished;
    bool parked;
    /* bulk receiver (server loop) */
    rxstream *rx;
    int fins;
    /* relay middle (server loop) */
    fx_quic_conn *mid_a, *mid_b;
    int64_t mid_a_sid, mid_b_sid;
    /* latency (client loop) */
    uint64_t seq;
    uint64_t *lat;
    /* progress, read by main only for a timeout message */
    atomic_uint_fast64_t progress;
    atomic_int handshakes;
    atomic_bool closing; /* teardown began: ignore closes */
    atomic_bool finished;
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int err;
    char why[256];
    uint64_t t0, t1;
    double cpu0, cpu1;
    fx_quic_stats cst, sst;
} run;

static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static struct timespec deadline_in(double secs)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(secs * 1e9);
    ts.tv_sec += (time_t)(ns / FX_NS_PER_S);
    ts.tv_nsec = (long)(ns % FX_NS_PER_S);
    return ts;
}

/* Ends the run: the first call wins; |err| 0 is success. Any thread. */
static void finish(run *r, int err, const char *fmt, ...)
{
    if (atomic_exchange(&r->finished, true))
        return;
    pthread_mutex_lock(&r->mu);
    r->done = true;
    r->err = err;
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->why, sizeof(r->why), fmt, ap);
        va_end(ap);
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void mark_start(run *r)
{
    pthread_mutex_lock(&r->mu);
    r->t0 = fx_now_ns();
    r->cpu0 = cpu_seconds();
    pthread_mutex_unlock(&r->mu);
}

static void mark_end(run *r)
{
    pthread_mutex_lock(&r->mu);
    r->t1 = fx_now_ns();
    r->cpu1 = cpu_seconds();
    pthread_mutex_unlock(&r->mu);
    finish(r, 0, NULL);
}

/* ---- bulk: client sends, server verifies --------------------------------- */

static void bulk_pump(run *r)
{
    const cfg *c = r->c;
    while (r->unfinished > 0 && r->a.c != NULL) {
        int i = r->rr;
        uint64_t total = stream_bytes(c, i), at = r->sent[i];
        if (at >= total) {
            r->rr = (i + 1) % c->streams;
            continue;
        }
        size_t in_chunk = (size_t)(at % CHUNK), len = c->chunk;
        if (len > CHUNK - in_chunk)
            len = CHUNK - in_chunk;
        if (len > total - at)
            len = (size_t)(total - at);
        bool fin = at + len == total;
        int rv = fx_quic_stream_send(r->a.c, r->sids[i], r->sh->pat, stream_skew(i) + in_chunk, len,
                                     fin);
        if (rv == FX_EFULL) {
            r->parked = true; /* on_writable resumes with the same stream */
            return;
        }
        if (rv < 0) {
            finish(r, rv, "bulk: send on stream %d: %s", i, fx_strerror(rv));
            return;
        }
        r->sent[i] += len;
        r->unfinished -= fin;
        r->rr = (i + 1) % c->streams;
    }
}

static void bulk_start(run *r)
{
    for (int i = 0; i < r->c->streams; i++) {
        int rv = fx_quic_conn_open_bidi(r->a.c, NULL, &r->sids[i]);
        if (rv < 0) {
            finish(r, rv, "bulk: opening stream %d: %s", i, fx_strerror(rv));
            return;
        }
    }
    r->unfinished = r->c->streams;
    mark_start(r);
    bulk_pump(r);
}

static void bulk_stream_done(run *r, int i, rxstream *s)
{
    if (r->c->verify) {
        fsum_final(&s->sum);
        if (!fsum_equal(&s->sum, &r->sh->expect[i])) {
            finish(r, FX_EINTERNAL, "bulk: checksum mismatch on stream %d", i);
            return;
        }
    }
    if (s->got != stream_bytes(r->c, i)) {
        finish(r, FX_EINTERNAL, "bulk: stream %d ended after %" PRIu64 " of %" PRIu64 " bytes", i,
               s->got, stream_bytes(r->c, i));
        return;
    }
    if (++r->fins == r->c->streams)
        mark_end(r);
}

static void bulk_rx(run *r, fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t len, bool fin)
{
    /* Credit goes back as soon as the bytes are consumed (checked). */
    if (len > 0)
        fx_quic_stream_consume(c, sid, len);
    int64_t i = sid >> 2;
    if ((sid & 3) != 0 || i >= r->c->streams) {
        finish(r, FX_EINTERNAL, "bulk: data on unexpected stream %" PRId64, sid);
        return;
    }
    rxstream *s = &r->rx[i];
    if (s->fin) {
        finish(r, FX_EINTERNAL, "bulk: data after FIN on stream %" PRId64, sid);
        return;
    }
    if (r->c->verify)
        fsum_update(&s->sum, d, len);
    s->got += len;
    atomic_fetch_add_explicit(&r->progress, len, memory_order_relaxed);
    if (fin) {
        s->fin = true;
        bulk_stream_done(r, (int)i, s);
    }
}

/* ---- echo and relay: one message in flight ------------------------------- */

static int send_copy(fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t len)
{
    fx_buf *x;
    int rv = fx_buf_new_copy(&x, d, len);
    if (rv < 0)
        return rv;
    rv = fx_quic_stream_send(c, sid, x, 0, len, false);
    fx_buf_unref(x);
    return rv;
}

/* A sends message |r->seq| carrying its send time. */
static void msg_send(run *r)
{
    uint8_t m[MAX_MSG];
    uint64_t now = fx_now_ns();
    memcpy(m, &now, 8);
    memcpy(m + 8, &r->seq, 8);
    memset(m + MSG_HDR, 0xa5, r->c->msg - MSG_HDR);
    int rv = send_copy(r->a.c, r->a.sid, m, r->c->msg);
    if (rv < 0)
        finish(r, rv, "%s: send: %s", MODE_NAMES[r->c->mode], fx_strerror(rv));
}

static void msg_record(run *r, uint64_t sent_at)
{
    uint64_t now = fx_now_ns();
    int warm = r->c->warmup;
    if (r->seq >= (uint64_t)warm)
        r->lat[r->seq - (uint64_t)warm] = now - sent_at;
    if (r->seq == (uint64_t)warm)
        mark_start(r);
    r->seq++;
    atomic_store_explicit(&r->progress, r->seq, memory_order_relaxed);
    if (r->seq == (uint64_t)warm + (uint64_t)r->c->rounds) {
        mark_end(r);
        return;
    }
    msg_send(r);
}

/* A whole message reached |p| (client loop). */
static void msg_arrived(run *r, peer *p, const uint8_t *m)
{
    uint64_t sent_at, seq;
    memcpy(&sent_at, m, 8);
    memcpy(&seq, m + 8, 8);
    if (seq != r->seq) {
        finish(r, FX_EINTERNAL, "%s: got message %" PRIu64 ", expected %" PRIu64,
               MODE_NAMES[r->c->mode], seq, r->seq);
        return;
    }
    if (r->c->mode == MODE_RELAY && r->c->relay_rtt && p == &r->b) {
        int rv = send_copy(r->b.c, r->b.sid, m, r->c->msg); /* B answers via the middle */
        if (rv < 0)
            finish(r, rv, "relay: B's reply: %s", fx_strerror(rv));
        return;
    }
    msg_record(r, sent_at);
}

static void client_rx(run *r, peer *p, const uint8_t *d, size_t len)
{
    size_t msg = r->c->msg;
    while (len > 0) {
        size_t n = msg - p->nacc < len ? msg - p->nacc : len;
        memcpy(p->acc + p->nacc, d, n);
        p->nacc += n;
        d += n;
        len -= n;
        if (p->nacc == msg) {
            p->nacc = 0;
            msg_arrived(r, p, p->acc);
        }
    }
}

static uint8_t ROLE_A[1] = {'A'};
static uint8_t ROLE_B[1] = {'B'};

/* relay: a client names itself to the middle with one byte on its stream. */
static int send_role(peer *p, uint8_t *role)
{
    fx_buf *x;
    int rv = fx_buf_wrap(&x, role, 1, NULL, NULL);
    if (rv < 0)
        return rv;
    rv = fx_quic_stream_send(p->c, p->sid, x, 0, 1, false);
    fx_buf_unref(x);
    return rv;
}

/* Posted by the middle to the client loop once it knows both A and B. */
static void relay_go(void *user)
{
    run *r = user;
    if (atomic_load(&r->closing) || r->a.c == NULL)
        return; /* the run ended before this task ran */
    msg_send(r);
}

static bool mid_register(run *r, fx_quic_conn *c, int64_t sid, uint8_t role)
{
    if (role == 'A' && r->mid_a == NULL) {
        r->mid_a = c;
        r->mid_a_sid = sid;
    } else if (role == 'B' && r->mid_b == NULL) {
        r->mid_b = c;
        r->mid_b_sid = sid;
    } else {
        finish(r, FX_EINTERNAL, "relay: unexpected role byte 0x%02x", role);
        return false;
    }
    if (r->mid_a != NULL && r->mid_b != NULL && fx_loop_call(r->cl, relay_go, r) < 0) {
        finish(r, -ENOMEM, "relay: posting the start to the client loop");
        return false;
    }
    return true;
}

/* Middle (server loop): echo back, or forward A's bytes to B and B's to A. */
static void mid_rx(run *r, fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t len)
{
    if (len > 0)
        fx_quic_stream_consume(c, sid, len);
    if (r->c->mode == MODE_RELAY && c != r->mid_a && c != r->mid_b) {
        if (len == 0 || !mid_register(r, c, sid, d[0]))
            return;
        d++;
        len--;
    }
    if (len == 0)
        return;
    fx_quic_conn *to = c;
    int64_t tsid = sid;
    if (r->c->mode == MODE_RELAY) {
        to = c == r->mid_a ? r->mid_b : r->mid_a;
        tsid = c == r->mid_a ? r->mid_b_sid : r->mid_a_sid;
    }
    int rv = to == NULL ? FX_ENOSTREAM : send_copy(to, tsid, d, len);
    if (rv < 0)
        finish(r, rv, "%s: middle forwarding: %s", MODE_NAMES[r->c->mode], fx_strerror(rv));
}

/* ---- callbacks ----------------------------------------------------------- */

static peer *peer_of(run *r, fx_quic_conn *c)
{
    if (c == r->a.c)
        return &r->a;
    if (c == r->b.c)
        return &r->b;
    return NULL;
}

static void on_handshake_done(fx_quic_conn *c, void *user)
{
    run *r = user;
    peer *p = fx_quic_conn_is_server(c) ? NULL : peer_of(r, c);
    if (p == NULL)
        return;
    p->hs_done = true;
    atomic_fetch_add(&r->handshakes, 1);
    if (r->c->mode == MODE_BULK) {
        bulk_start(r);
        return;
    }
    int rv = fx_quic_conn_open_bidi(c, NULL, &p->sid);
    if (rv == 0 && r->c->mode == MODE_RELAY)
        rv = send_role(p, p == &r->a ? ROLE_A : ROLE_B);
    else if (rv == 0)
        msg_send(r);
    if (rv < 0)
        finish(r, rv, "%s: opening the stream: %s", MODE_NAMES[r->c->mode], fx_strerror(rv));
}

static void on_stream_data(fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t len, bool fin,
                           void *user, void *stream_user)
{
    run *r = user;
    if (fx_quic_conn_is_server(c)) {
        if (r->c->mode == MODE_BULK)
            bulk_rx(r, c, sid, d, len, fin);
        else
            mid_rx(r, c, sid, d, len);
        return;
    }
    if (len > 0)
        fx_quic_stream_consume(c, sid, len);
    peer *p = peer_of(r, c);
    if (p != NULL && len > 0)
        client_rx(r, p, d, len);
}

static void on_writable(fx_quic_conn *c, void *user)
{
    run *r = user;
    if (!fx_quic_conn_is_server(c) && c == r->a.c && r->parked) {
        r->parked = false;
        bulk_pump(r);
    }
}

static void on_conn_closed(fx_quic_conn *c, const fx_quic_close_info *info, void *user)
{
    run *r = user;
    bool server = fx_quic_conn_is_server(c);
    peer *p = server ? NULL : peer_of(r, c);
    if (p != NULL)
        p->c = NULL;
    if (server && c == r->mid_a)
        r->mid_a = NULL;
    if (server && c == r->mid_b)
        r->mid_b = NULL;
    if (atomic_load(&r->closing))
        return;
    const char *what = p == NULL    ? "server connection closed"
                       : p->hs_done ? "client connection closed"
                                    : "handshake failed";
    const char *err = fx_strerror(info->reason);
    bool same = strcmp(err, info->text) == 0 || info->text[0] == '\0';
    finish(r, info->reason != 0 ? info->reason : FX_ECLOSED, "%s: %s%s%s%s", what, err,
           info->remote ? " (by the peer)" : "", same ? "" : ": ", same ? "" : info->text);
}

static const fx_quic_callbacks CALLBACKS = {
    .on_handshake_done = on_handshake_done,
    .on_stream_data = on_stream_data,
    .on_writable = on_writable,
    .on_conn_closed = on_conn_closed,
};

/* ---- running work on a loop from main ------------------------------------ */

static void state_dir_remove(void);

typedef struct sync_call {
    void (*fn)(run *r);
    run *r;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} sync_call;

static void sync_call_run(void *user)
{
    sync_call *sc = user;
    sc->fn(sc->r);
    pthread_mutex_lock(&sc->mu);
    sc->done = true;
    pthread_cond_signal(&sc->cv);
    pthread_mutex_unlock(&sc->mu);
}

/* Runs |fn(r)| on |l| and waits for it. A loop that does not answer within
 * TEARDOWN_TIMEOUT_S is wedged: there is nothing safe left to do but exit. */
static void run_on(fx_loop *l, void (*fn)(run *r), run *r)
{
    sync_call *sc = calloc(1, sizeof(*sc)); /* leaked if the loop is wedged */
    if (sc == NULL) {
        fprintf(stderr, "felix-transport-bench: out of memory\n");
        exit(1);
    }
    sc->fn = fn;
    sc->r = r;
    pthread_mutex_init(&sc->mu, NULL);
    cond_init_mono(&sc->cv);
    if (fx_loop_call(l, sync_call_run, sc) < 0) {
        fprintf(stderr, "felix-transport-bench: cannot post to loop %s\n", fx_loop_name(l));
        exit(1);
    }
    struct timespec dl = deadline_in(TEARDOWN_TIMEOUT_S);
    pthread_mutex_lock(&sc->mu);
    while (!sc->done)
        if (pthread_cond_timedwait(&sc->cv, &sc->mu, &dl) == ETIMEDOUT && !sc->done) {
            fprintf(stderr, "felix-transport-bench: loop %s does not answer, giving up\n",
                    fx_loop_name(l));
            state_dir_remove();
            _exit(1);
        }
    pthread_mutex_unlock(&sc->mu);
    pthread_mutex_destroy(&sc->mu);
    pthread_cond_destroy(&sc->cv);
    free(sc);
}

static void connect_one(run *r, fx_quic_endpoint *ep, peer *p)
{
    fx_quic_connect_opts co = {.server_name = "localhost"};
    if (r->c->insecure)
        co.insecure = true;
    else
        co.pin_sha256 = r->c->pin_hex != NULL ? r->c->pin_hex : r->pin;
    int rv = fx_quic_connect(ep, "127.0.0.1", r->port, &co, r, &p->c);
    if (rv < 0)
        finish(r, rv, "connect to 127.0.0.1:%u: %s", r->port, fx_strerror(rv));
}

static void connect_clients(run *r)
{
    connect_one(r, r->cep_a, &r->a);
    if (r->cep_b != NULL)
        connect_one(r, r->cep_b, &r->b);
}

static void client_teardown(run *r)
{
    fx_quic_endpoint_get_stats(r->cep_a, &r->cst);
    fx_quic_endpoint_free(r->cep_a);
    fx_quic_endpoint_free(r->cep_b);
    r->cep_a = r->cep_b = NULL;
}

static void server_teardown(run *r)
{
    fx_quic_endpoint_get_stats(r->srv, &r->sst);
    fx_quic_endpoint_free(r->srv);
    r->srv = NULL;
}

/* ---- run setup ------------------------------------------------------------ */

static void opts_for(const shared *sh, fx_quic_opts *o)
{
    fx_quic_opts_default(o);
    if (fx_quic_opts_from_env(o) < 0)
        fprintf(stderr, "felix-transport-bench: ignoring an invalid FELIX_* variable\n");
    o->state_dir = sh->state_dir;
    o->gso = sh->c.gso;
    if (sh->c.mtu > 0)
        o->initial_mtu = o->mtu_upper_bound = sh->c.mtu;
}

static int loops_new(run *r)
{
    const shared *sh = r->sh;
    bool pin = sh->c.pin_cpus && sh->ncpus >= 2;
    int rv =
        fx_loop_new(&r->sl, &(fx_loop_opts){.name = "bench-srv", .cpu = pin ? sh->cpus[0] : -1});
    if (rv == 0)
        rv = fx_loop_new(&r->cl,
                         &(fx_loop_opts){.name = "bench-cli", .cpu = pin ? sh->cpus[1] : -1});
    return rv;
}

static int endpoints_new(run *r)
{
    fx_quic_opts o;
    opts_for(r->sh, &o);
    int rv = fx_quic_server_new(&r->srv, r->sl, "127.0.0.1", 0, &o, &CALLBACKS, r);
    if (rv < 0)
        return rv;
    snprintf(r->pin, sizeof(r->pin), "%s", fx_quic_endpoint_fingerprint(r->srv));
    r->port = fx_quic_endpoint_port(r->srv);
    rv = fx_quic_client_new(&r->cep_a, r->cl, &o, &CALLBACKS, r);
    if (rv == 0 && r->c->mode == MODE_RELAY)
        rv = fx_quic_client_new(&r->cep_b, r->cl, &o, &CALLBACKS, r);
    return rv;
}

static int run_alloc(run *r)
{
    const cfg *c = r->c;
    if (c->mode == MODE_BULK) {
        r->sids = calloc((size_t)c->streams, sizeof(*r->sids));
        r->sent = calloc((size_t)c->streams, sizeof(*r->sent));
        r->rx = calloc((size_t)c->streams, sizeof(*r->rx));
        return r->sids && r->sent && r->rx ? 0 : -ENOMEM;
    }
    r->lat = calloc((size_t)c->rounds, sizeof(*r->lat));
    return r->lat != NULL ? 0 : -ENOMEM;
}

static void run_free(run *r)
{
    free(r->sids);
    free(r->sent);
    free(r->rx);
    free(r->lat);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

/* Explains a timeout by the phase the run was in. */
static void timeout_why(run *r)
{
    int want = r->c->mode == MODE_RELAY ? 2 : 1;
    uint64_t got = atomic_load(&r->progress);
    if (atomic_load(&r->handshakes) < want)
        snprintf(r->why, sizeof(r->why), "timed out after %.0f s: handshake not complete",
                 r->c->timeout_s);
    else if (r->c->mode == MODE_BULK)
        snprintf(r->why, sizeof(r->why),
                 "timed out after %.0f s: %" PRIu64 " of %" PRIu64 " bytes received",
                 r->c->timeout_s, got, r->c->mib << 20);
    else
        snprintf(r->why, sizeof(r->why),
                 "timed out after %.0f s: %" PRIu64 " of %d messages delivered", r->c->timeout_s,
                 got, r->c->warmup + r->c->rounds);
}

static void wait_done(run *r)
{
    struct timespec dl = deadline_in(r->c->timeout_s);
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) != ETIMEDOUT || r->done)
            continue;
        if (atomic_exchange(&r->finished, true)) {
            while (!r->done) /* a finish() is under way: let it land */
                pthread_cond_wait(&r->cv, &r->mu);
            break;
        }
        r->done = true;
        r->err = -ETIMEDOUT;
        timeout_why(r);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- results -------------------------------------------------------------- */

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Nearest-rank percentile of sorted |v|, in microseconds. */
static double pct_us(const uint64_t *v, int n, double p)
{
    double rank = p * n;
    int i = (int)rank;
    if ((double)i < rank)
        i++;
    i = i < 1 ? 0 : i - 1;
    return (double)v[i < n ? i : n - 1] / 1e3;
}

static void result_of(run *r, result *res)
{
    const cfg *c = r->c;
    *res = (result){.mb_per_s = NAN,
                    .cpu_s_per_gb = NAN,
                    .p50 = NAN,
                    .p90 = NAN,
                    .p99 = NAN,
                    .p999 = NAN,
                    .max = NAN};
    res->secs = (double)(r->t1 - r->t0) / 1e9;
    if (c->mode == MODE_BULK) {
        double bytes = (double)(c->mib << 20);
        res->mb_per_s = bytes / res->secs / 1e6;
        res->cpu_s_per_gb = (r->cpu1 - r->cpu0) / (bytes / 1e9);
        res->payload_per_dgram = r->cst.tx_datagrams ? bytes / (double)r->cst.tx_datagrams : 0;
    } else {
        int n = c->rounds;
        qsort(r->lat, (size_t)n, sizeof(*r->lat), cmp_u64);
        res->p50 = pct_us(r->lat, n, 0.50);
        res->p90 = pct_us(r->lat, n, 0.90);
        res->p99 = pct_us(r->lat, n, 0.99);
        res->p999 = pct_us(r->lat, n, 0.999);
        res->max = (double)r->lat[n - 1] / 1e3;
    }
    res->segs_per_sendmsg =
        r->cst.tx_sendmsg ? (double)r->cst.tx_datagrams / (double)r->cst.tx_sendmsg : 0;
    res->rx_dropped = r->sst.rx_dropped;
    res->rev_dgrams = (double)r->sst.tx_datagrams;
    res->rev_sendmsg = (double)r->sst.tx_sendmsg;
    fx_loop_stats ls;
    fx_loop_get_stats(r->cl, &ls);
    res->cli_turns = (double)ls.turns;
    fx_loop_get_stats(r->sl, &ls);
    res->srv_turns = (double)ls.turns;
    res->gso_disabled = r->cst.gso_disabled != 0;
    res->sndbuf = r->cst.sndbuf;
    res->rcvbuf = r->sst.rcvbuf;
}

/* Runs one measurement from fresh loops, endpoints and connections. Returns
 * 0 and fills |res|, or prints why it failed and returns the error. */
static int run_once(const shared *sh, int index, result *res)
{
    run *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->sh = sh;
    r->c = &sh->c;
    r->index = index;
    pthread_mutex_init(&r->mu, NULL);
    cond_init_mono(&r->cv);
    int rv = run_alloc(r);
    if (rv == 0)
        rv = loops_new(r);
    if (rv == 0)
        rv = endpoints_new(r);
    if (rv < 0) {
        fprintf(stderr, "felix-transport-bench: setup: %s\n", fx_strerror(rv));
        goto out_free;
    }
    rv = fx_loop_start(r->sl);
    if (rv == 0 && (rv = fx_loop_start(r->cl)) < 0)
        fx_loop_stop(r->sl);
    if (rv < 0) {
        fprintf(stderr, "felix-transport-bench: starting the loops: %s\n", fx_strerror(rv));
        goto out_free;
    }
    if (index == 1 && (fx_loop_pin_error(r->sl) < 0 || fx_loop_pin_error(r->cl) < 0))
        fprintf(stderr, "felix-transport-bench: warning: CPU pinning refused\n");
    run_on(r->cl, connect_clients, r);
    wait_done(r);
    atomic_store(&r->closing, true);
    run_on(r->cl, client_teardown, r);
    run_on(r->sl, server_teardown, r);
    fx_loop_stop(r->cl);
    fx_loop_stop(r->sl);
    rv = r->err;
    if (rv < 0)
        fprintf(stderr, "felix-transport-bench: %s run %d: %s\n", MODE_NAMES[sh->c.mode], index,
                r->why[0] ? r->why : fx_strerror(rv));
    else
        result_of(r, res);
out_free:
    if (r->srv != NULL || r->cep_a != NULL || r->cep_b != NULL) {
        fx_quic_endpoint_free(r->cep_a); /* never started: still the caller's */
        fx_quic_endpoint_free(r->cep_b);
        fx_quic_endpoint_free(r->srv);
    }
    fx_loop_free(r->cl);
    fx_loop_free(r->sl);
    run_free(r);
    free(r);
    return rv;
}

/* ---- output ----------------------------------------------------------------- */

static void json_num(const char *key, double v, int prec, bool comma)
{
    if (isnan(v))
        printf("\"%s\":null", key);
    else
        printf("\"%s\":%.*f", key, prec, v);
    if (comma)
        putchar(',');
}

static void layout_text(const shared *sh, char *out, size_t n)
{
    const cfg *c = &sh->c;
    char s[16] = " unpinned", k[16] = " unpinned";
    if (c->pin_cpus && sh->ncpus >= 2) {
        snprintf(s, sizeof(s), "@cpu%d", sh->cpus[0]);
        snprintf(k, sizeof(k), "@cpu%d", sh->cpus[1]);
    }
    if (c->mode == MODE_RELAY)
        snprintf(out, n, "middle%s; A+B%s (one client loop, two sockets)", s, k);
    else
        snprintf(out, n, "server%s; client%s", s, k);
}

static void print_json(const shared *sh, const result *x, const char *label, int runs)
{
    const cfg *c = &sh->c;
    char layout[96];
    layout_text(sh, layout, sizeof(layout));
    printf("{\"mode\":\"%s\",\"run\":\"%s\",\"runs\":%d,\"streams\":%d,\"mib\":%" PRIu64 ",",
           MODE_NAMES[c->mode], label, runs, c->mode == MODE_BULK ? c->streams : 1,
           c->mode == MODE_BULK ? c->mib : 0);
    json_num("mb_per_s", x->mb_per_s, 1, true);
    json_num("cpu_s_per_gb", x->cpu_s_per_gb, 3, true);
    printf("\"dgram\":%zu,\"dgram_pinned\":%s,\"gso\":%s,", sh->dgram,
           sh->dgram_pinned ? "true" : "false", c->gso && !x->gso_disabled ? "true" : "false");
    json_num("p50_us", x->p50, 1, true);
    json_num("p90_us", x->p90, 1, true);
    json_num("p99_us", x->p99, 1, true);
    json_num("p999_us", x->p999, 1, true);
    json_num("max_us", x->max, 1, true);
    printf("\"msg\":%zu,\"rounds\":%d,\"relay\":\"%s\",\"verify\":%s,", c->msg, c->rounds,
           c->mode != MODE_RELAY ? ""
           : c->relay_rtt        ? "rtt"
                                 : "oneway",
           c->verify ? "true" : "false");
    json_num("segs_per_sendmsg", x->segs_per_sendmsg, 1, true);
    json_num("payload_per_dgram", x->payload_per_dgram, 0, true);
    json_num("rev_dgrams", x->rev_dgrams, 0, true);
    json_num("rev_sendmsg", x->rev_sendmsg, 0, true);
    json_num("cli_turns", x->cli_turns, 0, true);
    json_num("srv_turns", x->srv_turns, 0, false);
    printf(",\"rx_dropped\":%" PRIu64 ",\"layout\":\"%s\"}\n", x->rx_dropped, layout);
}

static void print_text(const shared *sh, const result *x, const char *label, int runs)
{
    const cfg *c = &sh->c;
    char layout[96];
    layout_text(sh, layout, sizeof(layout));
    if (c->mode == MODE_BULK) {
        printf("bulk  %d stream%s %" PRIu64 " MiB, dgram %zu%s, GSO %s: %.1f MB/s, %.3f CPU-s/GB"
               " (%.1f dgrams/sendmsg, %.0f B payload/dgram) [%s%s%d; %s]\n",
               c->streams, c->streams > 1 ? "s" : "", c->mib, sh->dgram,
               sh->dgram_pinned ? " pinned" : " max (PMTUD)",
               c->gso && !x->gso_disabled ? "on" : "off", x->mb_per_s, x->cpu_s_per_gb,
               x->segs_per_sendmsg, x->payload_per_dgram, label,
               strcmp(label, "median") == 0 ? " of " : "/", runs, layout);
        return;
    }
    printf("%s %s%zu B x %d (+%d warm-up): p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f us"
           " [%s%s%d; %s]\n",
           MODE_NAMES[c->mode],
           c->mode != MODE_RELAY ? " "
           : c->relay_rtt        ? "A->mid->B->mid->A "
                                 : "A->mid->B ",
           c->msg, c->rounds, c->warmup, x->p50, x->p90, x->p99, x->p999, x->max, label,
           strcmp(label, "median") == 0 ? " of " : "/", runs, layout);
}

static void print_result(const shared *sh, const result *x, const char *label, int runs)
{
    if (sh->c.json)
        print_json(sh, x, label, runs);
    else
        print_text(sh, x, label, runs);
    fflush(stdout);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median_of(const result *rs, int n, size_t field)
{
    double v[128];
    for (int i = 0; i < n; i++)
        memcpy(&v[i], (const char *)&rs[i] + field, sizeof(double));
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Each measured field's median over the runs, taken separately. */
static void print_median(const shared *sh, const result *rs, int n)
{
    result m = rs[0];
    static const size_t fields[] = {
        offsetof(result, mb_per_s),
        offsetof(result, cpu_s_per_gb),
        offsetof(result, p50),
        offsetof(result, p90),
        offsetof(result, p99),
        offsetof(result, p999),
        offsetof(result, max),
        offsetof(result, segs_per_sendmsg),
        offsetof(result, rev_dgrams),
        offsetof(result, rev_sendmsg),
        offsetof(result, cli_turns),
        offsetof(result, srv_turns),
        offsetof(result, payload_per_dgram),
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        double v = median_of(rs, n, fields[i]);
        memcpy((char *)&m + fields[i], &v, sizeof(v));
    }
    m.rx_dropped = 0;
    for (int i = 0; i < n; i++) {
        m.rx_dropped += rs[i].rx_dropped;
        m.gso_disabled |= rs[i].gso_disabled;
    }
    print_result(sh, &m, "median", n);
}

/* ---- command line -------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: felix-transport-bench bulk|echo|relay|idle [options]\n"
               "\n"
               "Server and client(s) of src/quic on 127.0.0.1 in this process, each side on its\n"
               "own fx_loop thread, pinned to two different CPUs when there are two or more.\n"
               "  bulk   client sends --mib MiB over --streams streams; the server grants credit\n"
               "         as it consumes and checks a running checksum per stream. Reports MB/s\n"
               "         (10^6 B/s, first byte sent to last byte received) and CPU-s/GB (process\n"
               "         user+sys over that interval, per 10^9 bytes).\n"
               "  echo   --msg-byte writes (64), each echoed back on the same bidi stream\n"
               "         before the next; --rounds round trips after --warmup; reports\n"
               "         p50/p90/p99/p99.9/max in us.\n"
               "  relay  client A -> middle (server loop) -> client B on another connection\n"
               "         (A and B share the client loop); one message in flight; one-way\n"
               "         latency from A's send time carried in the payload (--rtt: B answers\n"
               "         back through the middle and A measures the round trip).\n"
               "  idle   one server endpoint on its running loop, nothing connected: RSS.\n"
               "\n"
               "options:\n"
               "  --streams N      bulk streams (1..1024, default 1)\n"
               "  --mib N          bulk MiB (default 256)\n"
               "  --chunk-kib N    bulk bytes per stream_send call, KiB (1..1024, default 1024)\n"
               "  --mtu N          pin the datagram size (initial_mtu = mtu_upper_bound = N,\n"
               "                   1200..65507); default: PMTUD from 1200 up to 1452\n"
               "  --no-gso         send without UDP_SEGMENT\n"
               "  --no-verify      bulk: skip the checksum\n"
               "  --msg N          echo/relay message bytes (16..16384, default 64)\n"
               "  --rounds N       measured round trips (default 10000)\n"
               "  --warmup N       unmeasured round trips first (default 1000)\n"
               "  --rtt            relay: measure A->middle->B->middle->A\n"
               "  --runs K         repeat K times (1..100), print each run and the median\n"
               "  --timeout-s T    fail a run that takes longer than T seconds (default 60)\n"
               "  --no-pin         do not pin the loops to CPUs\n"
               "  --insecure       clients skip certificate checks (default: they pin the\n"
               "                   generated certificate's SHA-256)\n"
               "  --pin HEX        pin this SHA-256 instead (a wrong one shows a refused\n"
               "                   handshake)\n"
               "  --json           one JSON line per run (and one for the median)\n"
               "  -h, --help       this text\n"
               "\n"
               "FELIX_UDP_SEND_BUFFER, FELIX_UDP_RECV_BUFFER, FELIX_INITIAL_MTU,\n"
               "FELIX_MTU_UPPER_BOUND and FELIX_MAX_UDP_PAYLOAD apply as in the broker.\n"
               "\n"
               "example:\n"
               "  felix-transport-bench bulk --streams 8 --mtu 1452 --runs 5 --json\n"
               "  felix-transport-bench echo --runs 5\n");
}

static bool parse_num(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Options that take a number: name, bounds, and where it goes. */
static int parse_valued(cfg *c, const char *name, const char *val)
{
    static const struct {
        const char *name;
        long long lo, hi;
    } T[] = {{"--streams", 1, 1024},     {"--mib", 1, 1 << 20},       {"--chunk-kib", 1, 1024},
             {"--mtu", 1200, 65507},     {"--msg", MSG_HDR, MAX_MSG}, {"--rounds", 1, 100000000},
             {"--warmup", 0, 100000000}, {"--runs", 1, 100},          {"--timeout-s", 1, 86400}};
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
        long long v;
        if (strcmp(name, T[i].name) != 0)
            continue;
        if (val == NULL || !parse_num(val, T[i].lo, T[i].hi, &v)) {
            fprintf(stderr, "felix-transport-bench: %s wants an integer in %lld..%lld\n", name,
                    T[i].lo, T[i].hi);
            return -1;
        }
        switch (i) {
        case 0:
            c->streams = (int)v;
            break;
        case 1:
            c->mib = (uint64_t)v;
            break;
        case 2:
            c->chunk = (size_t)v << 10;
            break;
        case 3:
            c->mtu = (size_t)v;
            break;
        case 4:
            c->msg = (size_t)v;
            break;
        case 5:
            c->rounds = (int)v;
            break;
        case 6:
            c->warmup = (int)v;
            break;
        case 7:
            c->runs = (int)v;
            break;
        default:
            c->timeout_s = (double)v;
            break;
        }
        return 1;
    }
    return 0;
}

static bool parse_flag(cfg *c, const char *a)
{
    if (strcmp(a, "--no-gso") == 0)
        c->gso = false;
    else if (strcmp(a, "--no-pin") == 0)
        c->pin_cpus = false;
    else if (strcmp(a, "--json") == 0)
        c->json = true;
    else if (strcmp(a, "--no-verify") == 0)
        c->verify = false;
    else if (strcmp(a, "--insecure") == 0)
        c->insecure = true;
    else if (strcmp(a, "--rtt") == 0)
        c->relay_rtt = true;
    else
        return false;
    return true;
}

/* Returns 0, or the exit status for a bad command line (or --help: 0 with
 * |*quit| set). */
static int parse_args(cfg *c, int argc, char **argv, bool *quit)
{
    int mode = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            *quit = true;
            return 0;
        }
        if (parse_flag(c, a))
            continue;
        if (strcmp(a, "--pin") == 0 && i + 1 < argc) {
            c->pin_hex = argv[++i];
            continue;
        }
        int rv = parse_valued(c, a, i + 1 < argc ? argv[i + 1] : NULL);
        if (rv < 0)
            return 2;
        if (rv > 0) {
            i++;
            continue;
        }
        for (int m = 0; m < 4 && mode < 0 && a[0] != '-'; m++)
            if (strcmp(a, MODE_NAMES[m]) == 0)
                mode = m;
        if (mode < 0 || a[0] == '-') {
            fprintf(stderr, "felix-transport-bench: unknown argument '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (mode < 0) {
        fprintf(stderr,
                "felix-transport-bench: give a mode: bulk, echo, relay or idle (try --help)\n");
        return 2;
    }
    c->mode = (bench_mode)mode;
    return 0;
}

/* ---- main -------------------------------------------------------------------- */

static char g_state_dir[64];

/* Removes the temporary state directory and the certificate in it. */
static void state_dir_remove(void)
{
    if (g_state_dir[0] == '\0')
        return;
    DIR *d = opendir(g_state_dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char p[PATH_MAX];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof(p), "%s/%s", g_state_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_state_dir);
    g_state_dir[0] = '\0';
}

static void cpus_pick(shared *sh)
{
    cpu_set_t set;
    sh->ncpus = 0;
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return;
    for (int i = 0; i < CPU_SETSIZE && sh->ncpus < 2; i++)
        if (CPU_ISSET(i, &set))
            sh->cpus[sh->ncpus++] = i;
}

static int setup(shared *sh)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_state_dir, sizeof(g_state_dir), "%s/fxbench-XXXXXX",
             tmp != NULL && strlen(tmp) < 40 ? tmp : "/tmp");
    if (mkdtemp(g_state_dir) == NULL) {
        fprintf(stderr, "felix-transport-bench: mkdtemp %s: %s\n", g_state_dir, strerror(errno));
        g_state_dir[0] = '\0';
        return -errno;
    }
    atexit(state_dir_remove);
    snprintf(sh->state_dir, sizeof(sh->state_dir), "%s", g_state_dir);
    cpus_pick(sh);
    fx_quic_opts o;
    opts_for(sh, &o);
    sh->dgram = o.mtu_upper_bound;
    sh->dgram_pinned = o.initial_mtu >= o.mtu_upper_bound;
    int rv = pattern_setup(sh);
    if (rv == 0 && sh->c.mode == MODE_BULK)
        rv = expect_setup(sh);
    return rv;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

/* idle: one server endpoint on its running loop, nothing connected; reports
 * the process RSS before the endpoint exists and after it has settled. */
static int run_idle(shared *sh)
{
    run *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->sh = sh;
    r->c = &sh->c;
    fx_quic_opts o;
    opts_for(sh, &o);
    long before = rss_kib();
    int rv = loops_new(r);
    if (rv == 0)
        rv = fx_quic_server_new(&r->srv, r->sl, "127.0.0.1", 0, &o, &CALLBACKS, r);
    if (rv == 0)
        rv = fx_loop_start(r->sl);
    if (rv == 0) {
        usleep(200000);
        long after = rss_kib();
        if (sh->c.json)
            printf("{\"mode\":\"idle\",\"rss_kib\":%ld,\"rss_before_endpoint_kib\":%ld}\n", after,
                   before);
        else
            printf("idle  server endpoint on a running loop: RSS %ld KiB (%ld KiB before it)\n",
                   after, before);
        fflush(stdout);
        run_on(r->sl, server_teardown, r);
        fx_loop_stop(r->sl);
    } else {
        fprintf(stderr, "felix-transport-bench: idle: %s\n", fx_strerror(rv));
        fx_quic_endpoint_free(r->srv);
    }
    fx_loop_free(r->sl);
    fx_loop_free(r->cl);
    free(r);
    return rv;
}

int main(int argc, char **argv)
{
    shared sh = {.c = {.streams = 1,
                       .mib = 256,
                       .chunk = CHUNK,
                       .gso = true,
                       .pin_cpus = true,
                       .verify = true,
                       .rounds = 10000,
                       .warmup = 1000,
                       .runs = 1,
                       .msg = 64,
                       .timeout_s = 60}};
    bool quit = false;
    int rv = parse_args(&sh.c, argc, argv, &quit);
    if (rv != 0 || quit)
        return rv;
    fx_log_set_level(FX_LOG_WARN);
    rv = setup(&sh);
    if (rv == 0 && sh.c.mode == MODE_IDLE)
        rv = run_idle(&sh);
    result rs[100];
    for (int i = 0; rv == 0 && sh.c.mode != MODE_IDLE && i < sh.c.runs; i++) {
        rv = run_once(&sh, i + 1, &rs[i]);
        char name[16];
        snprintf(name, sizeof(name), "%d", i + 1);
        if (rv == 0)
            print_result(&sh, &rs[i], name, sh.c.runs);
    }
    if (rv == 0 && sh.c.mode != MODE_IDLE && sh.c.runs > 1)
        print_median(&sh, rs, sh.c.runs);
    fx_buf_unref(sh.pat);
    free(sh.expect);
    return rv == 0 ? 0 : 1;
}
