/* felix-bench's run engine (see bench_run.h). The main thread sets up the
 * clients, publishes (paced by the end-to-end credit window in throughput,
 * overload and isolation modes, one message in flight in latency mode) and
 * sums the results; each subscription has a reader thread that takes
 * deliveries with fx_subscription_next (or, with callbacks, the client loop
 * accounts them and the reader thread only watches for the end). Readers
 * talk to the publisher through atomics and futex wakeups only. Isolation
 * mode runs the overload workload twice (run_phase): once with every link
 * clean, once with the victim's client endpoint behind the QUIC test hooks
 * (delay and loss), through libfelix's test hook (client/test_hooks.h). */
#include "bench_run.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "broker/broker.h"     /* in-process broker: fx_broker_list_subscriptions */
#include "client/test_hooks.h" /* isolation: the victim's link */
#include "felix/felix.h"
#include "quic/quic.h"

#define NO_FINAL UINT64_MAX
#define LAT_WAIT_NS 1000000000ull  /* one round trip longer than this is a timeout */
#define MAX_LAT_SAMPLES (4u << 20) /* per reader, overload mode */

typedef struct run run;
typedef struct subscriber subscriber;

typedef struct reader {
    fx_bench_acct acct;
    run *R;
    subscriber *owner;
    fx_subscription *sub;
    pthread_t th;
    bool started;
    uint64_t woken_target;
    _Atomic bool ended; /* stopped before the end (error or timeout) */
    bool cb;            /* deliveries come by callback (the loop accounts them) */
    int err;
    bool timed_out;
} reader;

struct subscriber {
    fx_client *c;
    reader *readers; /* cfg->streams of them */
    bool stalled;    /* overload: never reads until the end */
    bool victim;     /* isolation: reads, but is neither measured nor paces the publisher */
};

struct run {
    const fx_bench_cfg *cfg;
    subscriber *subs;
    reader *readers; /* fanout x streams */
    size_t nreaders;
    fx_client *pub;
    char (*names)[32];
    uint64_t window, deadline_ns;
    _Atomic uint64_t final_total; /* messages published, once the publisher ended */
    _Atomic uint64_t end_ns;      /* when it ended (stored before final_total) */
    _Atomic int wake_ctr, pub_waiting, acks;
    _Atomic uint64_t wait_target, cur_seq;
    int ack_target;
    /* Voluntary context switches of reader threads that have exited: they
     * leave /proc/self/task before the closing probe, so each adds its own. */
    _Atomic uint64_t exited_vcsw;
};

/* ---- readers -------------------------------------------------------------------- */

/* Subscribers measured and pacing the publisher: all but subscriber F-1 in
 * overload (stalled) and isolation (the victim) modes. */
static uint32_t healthy_of(const fx_bench_cfg *c)
{
    return c->mode == FX_BENCH_OVERLOAD || c->mode == FX_BENCH_ISOLATION ? c->fanout - 1
                                                                         : c->fanout;
}

static bool measured(const subscriber *s)
{
    return !s->stalled && !s->victim;
}

static uint64_t sub_progress(const subscriber *s, uint32_t nstreams)
{
    uint64_t p = 0;
    for (uint32_t i = 0; i < nstreams; i++)
        p += atomic_load_explicit(&s->readers[i].acct.progress, memory_order_acquire);
    return p;
}

/* Progress of the slowest healthy subscriber still reading. The isolation
 * victim never paces, in the clean phase either, so both phases publish
 * the same way. */
static uint64_t min_progress(run *R)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t i = 0; i < R->cfg->fanout; i++) {
        subscriber *s = &R->subs[i];
        if (!measured(s) || atomic_load(&s->readers[0].ended))
            continue; /* a dead reader must not deadlock the publisher */
        uint64_t p = sub_progress(s, R->cfg->streams);
        m = p < m ? p : m;
    }
    return m;
}

static void on_delivery(reader *r, const uint8_t *data, size_t len)
{
    run *R = r->R;
    uint64_t seq = fx_bench_acct_on_msg(&r->acct, data, len, fx_bench_now_ns());
    if (seq == UINT64_MAX)
        return;
    if (R->cfg->mode == FX_BENCH_LATENCY) {
        if (seq == atomic_load(&R->cur_seq) && atomic_fetch_add(&R->acks, 1) + 1 >= R->ack_target)
            fx_bench_futex_wake(&R->acks);
        return;
    }
    if (!atomic_load(&R->pub_waiting))
        return;
    uint64_t tgt = atomic_load(&R->wait_target);
    if (tgt != r->woken_target && sub_progress(r->owner, R->cfg->streams) >= tgt) {
        r->woken_target = tgt;
        atomic_fetch_add(&R->wake_ctr, 1);
        fx_bench_futex_wake(&R->wake_ctr);
    }
}

static void on_event_cb(void *user, const fx_event *ev)
{
    on_delivery(user, ev->payload, ev->len);
}

static bool reader_done(reader *r)
{
    uint64_t fin = atomic_load(&r->R->final_total);
    if (fin == NO_FINAL)
        return false;
    const fx_bench_cfg *c = r->R->cfg;
    uint64_t want = fx_bench_stream_count(fin, c->mode == FX_BENCH_LATENCY ? 1 : c->batch,
                                          c->streams, r->acct.stream);
    return atomic_load(&r->acct.progress) >= want;
}

/* Waits for one delivery (or, with callbacks, for progress). Returns 1 if
 * something arrived, 0 if not, or an error. */
static int reader_step(reader *r, uint64_t *seen)
{
    if (r->cb) {
        usleep(2000);
        uint64_t p = atomic_load(&r->acct.progress);
        bool moved = p != *seen;
        *seen = p;
        return moved;
    }
    fx_event ev;
    int rv = fx_subscription_next(r->sub, &ev, 100);
    if (rv == 0) {
        on_delivery(r, ev.payload, ev.len);
        return 1;
    }
    return rv == FX_ETIMEDOUT ? 0 : rv;
}

/* True once the isolation victim is done: it reads until idle_seconds after
 * the publisher's end at most, however much its slow link still holds
 * (what has not arrived by then counts as not received). */
static bool victim_cut(const reader *r, uint64_t now)
{
    const run *R = r->R;
    if (!r->owner->victim || atomic_load(&R->final_total) == NO_FINAL)
        return false;
    return now - atomic_load(&R->end_ns) > (uint64_t)(R->cfg->idle_seconds * 1e9);
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    run *R = r->R;
    uint64_t idle_ns = (uint64_t)(R->cfg->idle_seconds * 1e9), seen = 0;
    uint64_t last = fx_bench_now_ns();
    while (!reader_done(r)) {
        int rv = reader_step(r, &seen);
        uint64_t now = fx_bench_now_ns();
        if (rv < 0) {
            r->err = rv;
            break;
        }
        if (victim_cut(r, now))
            break;
        if (rv > 0) {
            last = now;
            continue;
        }
        bool ended = atomic_load(&R->final_total) != NO_FINAL;
        /* After the end: missing messages are loss. Before it: the whole run
         * is stuck (or far past its bound). */
        if ((ended && now - last > idle_ns) || now > R->deadline_ns ||
            (!ended && now - last > 3 * idle_ns + 10000000000ull)) {
            r->timed_out = !ended || now > R->deadline_ns;
            break;
        }
    }
    if (!reader_done(r))
        atomic_store(&r->ended, true);
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0)
        atomic_fetch_add(&R->exited_vcsw, (uint64_t)ru.ru_nvcsw);
    return NULL;
}

/* ---- setup ---------------------------------------------------------------------- */

void fx_bench_client_opts(const fx_bench_cfg *c, fx_client_opts *o, bool stalled)
{
    fx_client_opts_init(o);
    /* libfelix's FELIX_* variables apply (FELIX_PUBLISH_COALESCE=0 measures
     * the broker's one-message-per-frame path); felix-bench's main checked
     * them at start, so a bad one cannot fail here. */
    (void)fx_client_opts_from_env(o);
    if (c->idempotent)
        o->idempotent = true;
    o->no_redirect = c->no_redirect;
    o->server = c->server;
    o->server_name = "localhost";
    o->pin_sha256 = c->pin;
    o->insecure = c->insecure;
    o->publish_conn_pool = 1;
    o->publish_streams_per_conn = c->streams < 64 ? c->streams : 64;
    o->event_conn_pool = 1;
    o->connect_timeout_ms = 3000;
    if (c->lossless || stalled)
        o->sub_queue_policy = FX_POLICY_BLOCK;
    if (stalled)
        o->stream_window_bytes = 64u << 10; /* stall at the broker soon */
}

static int set_err(fx_bench_result *res, int rv, const char *what)
{
    char detail[160];
    fx_client_last_error(NULL, detail, sizeof(detail));
    snprintf(res->errmsg, sizeof(res->errmsg), "%s: %s%s%s", what, fx_strerror(rv),
             detail[0] ? ": " : "", detail);
    res->error = rv;
    return rv;
}

/* Connects the publisher, or a subscriber (|sub|: to sub_server when set). */
static int connect_one(run *R, fx_client **pc, bool stalled, bool sub, fx_bench_result *res)
{
    fx_client_opts o;
    fx_bench_client_opts(R->cfg, &o, stalled);
    if (sub && R->cfg->sub_server != NULL)
        o.server = R->cfg->sub_server;
    int rv = fx_client_connect(pc, &o);
    if (rv != 0) {
        char what[128];
        snprintf(what, sizeof(what), "cannot connect to the broker at %s%s", o.server,
                 rv == FX_ETIMEDOUT ? " (is felix-broker running there?)" : "");
        return set_err(res, rv, what);
    }
    return 0;
}

/* Latency samples one reader keeps: none for unmeasured subscribers. */
static size_t lat_cap(const fx_bench_cfg *c, bool unmeasured)
{
    if (unmeasured || c->mode == FX_BENCH_THROUGHPUT)
        return 0;
    if (c->mode == FX_BENCH_LATENCY)
        return (size_t)c->total + 1;
    return MAX_LAT_SAMPLES;
}

static int subscribe_one(run *R, subscriber *s, fx_bench_result *res)
{
    const fx_bench_cfg *c = R->cfg;
    uint32_t batch = c->mode == FX_BENCH_LATENCY ? 1 : c->batch;
    for (uint32_t k = 0; k < c->streams; k++) {
        reader *r = &s->readers[k];
        size_t cap = lat_cap(c, !measured(s));
        uint64_t *lat = cap ? malloc(cap * sizeof(*lat)) : NULL;
        if (cap && lat == NULL)
            return set_err(res, -ENOMEM, "latency samples");
        fx_bench_acct_init(&r->acct, k, c->streams, batch, c->warmup, lat, cap);
        r->acct.drop_every = measured(s) ? c->drop_every : 0;
        r->R = R;
        r->owner = s;
        /* The isolation victim always reads on its thread: it stops before
         * its stream ends, and its counts are read once that thread is
         * joined, which a loop callback could still be changing. */
        r->cb = c->callback && measured(s);
        int rv = fx_subscribe(&r->sub, s->c, c->ns, R->names[k], NULL);
        if (rv != 0 && fx_publish_batch(s->c, c->ns, R->names[k], NULL, 0, FX_ACK_PER_BATCH) == 0)
            /* Under durable_default a subscribe creates no stream: an empty
             * acked batch (no message) creates it, then the subscribe again. */
            rv = fx_subscribe(&r->sub, s->c, c->ns, R->names[k], NULL);
        if (rv != 0)
            return set_err(res, rv, "subscribe");
        if (r->cb && (rv = fx_subscription_set_callback(r->sub, on_event_cb, r)) != 0)
            return set_err(res, rv, "set callback");
    }
    return 0;
}

static int start_readers(run *R, fx_bench_result *res)
{
    for (uint32_t i = 0; i < R->cfg->fanout; i++) {
        if (R->subs[i].stalled)
            continue;
        for (uint32_t k = 0; k < R->cfg->streams; k++) {
            reader *r = &R->subs[i].readers[k];
            int rv = pthread_create(&r->th, NULL, reader_main, r);
            if (rv != 0)
                return set_err(res, -rv, "reader thread");
            r->started = true;
        }
    }
    return 0;
}

static int setup(run *R, fx_bench_result *res)
{
    const fx_bench_cfg *c = R->cfg;
    R->subs = calloc(c->fanout, sizeof(*R->subs));
    R->nreaders = (size_t)c->fanout * c->streams;
    R->readers = calloc(R->nreaders, sizeof(*R->readers));
    R->names = calloc(c->streams, sizeof(*R->names));
    if (R->subs == NULL || R->readers == NULL || R->names == NULL)
        return set_err(res, -ENOMEM, "setup");
    for (uint32_t k = 0; k < c->streams; k++)
        snprintf(R->names[k], sizeof(R->names[k]), "%.20s%u",
                 c->stream_prefix ? c->stream_prefix : "bench", (unsigned)k);
    int rv = connect_one(R, &R->pub, false, false, res);
    for (uint32_t i = 0; rv == 0 && i < c->fanout; i++) {
        subscriber *s = &R->subs[i];
        s->readers = &R->readers[(size_t)i * c->streams];
        s->stalled = c->mode == FX_BENCH_OVERLOAD && i == c->fanout - 1;
        s->victim = c->mode == FX_BENCH_ISOLATION && i == c->fanout - 1;
        rv = connect_one(R, &s->c, s->stalled, true, res);
        if (rv == 0)
            rv = subscribe_one(R, s, res);
    }
    if (rv == 0)
        rv = start_readers(R, res);
    return rv;
}

/* Ends every reader (the final total is set by then, or the run failed),
 * unsubscribes and closes the clients. */
static void teardown(run *R)
{
    uint64_t none = NO_FINAL;
    atomic_compare_exchange_strong(&R->final_total, &none, 0); /* a failed setup ends readers */
    for (size_t i = 0; i < R->nreaders; i++)
        if (R->readers[i].started)
            pthread_join(R->readers[i].th, NULL);
    for (size_t i = 0; i < R->nreaders; i++) {
        fx_unsubscribe(R->readers[i].sub);
        free(R->readers[i].acct.lat);
    }
    for (uint32_t i = 0; R->subs && i < R->cfg->fanout; i++)
        fx_client_close(R->subs[i].c, 2000);
    fx_client_close(R->pub, 2000);
    free(R->subs);
    free(R->readers);
    free(R->names);
}

/* ---- publishing ----------------------------------------------------------------- */

typedef struct pubstate {
    uint8_t *buf; /* batch x payload bytes */
    fx_iov *iov;
    uint64_t seq;
    uint64_t t_first_meas; /* send stamp of message |warmup| */
    uint64_t t_last_submit;
    uint64_t cached_min;
    bool hit_deadline, failed;
} pubstate;

/* Blocks until the slowest subscriber is within the credit window of
 * sending |n| more. Returns false at the deadline. */
static bool credit_wait(run *R, pubstate *p, uint64_t n, fx_bench_result *res)
{
    if (p->seq + n <= p->cached_min + R->window)
        return true;
    p->cached_min = min_progress(R);
    if (p->cached_min == UINT64_MAX || p->seq + n <= p->cached_min + R->window)
        return true;
    res->window_waits++;
    uint64_t target = p->seq + n - R->window / 2;
    atomic_store(&R->wait_target, target);
    atomic_store(&R->pub_waiting, 1);
    bool ok = true;
    for (;;) {
        int v = atomic_load(&R->wake_ctr);
        p->cached_min = min_progress(R);
        if (p->cached_min == UINT64_MAX || p->cached_min >= target)
            break;
        if (fx_bench_now_ns() >= R->deadline_ns) {
            ok = false;
            break;
        }
        fx_bench_futex_wait(&R->wake_ctr, v, 2000000ull);
    }
    atomic_store(&R->pub_waiting, 0);
    return ok;
}

static void progress_line(run *R, pubstate *p, uint64_t t0, uint64_t *next)
{
    uint64_t now = fx_bench_now_ns();
    if (!R->cfg->progress || now < *next)
        return;
    *next = now + 2000000000ull;
    double s = (double)(now - t0) / 1e9;
    fprintf(stderr, "felix-bench: %.0f s, %llu published (%.0f msg/s submitted)\r", s,
            (unsigned long long)p->seq, (double)p->seq / s);
    fflush(stderr);
}

/* Sends the batch starting at p->seq of |n| messages. */
static int send_batch(run *R, pubstate *p, uint32_t n)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t t = fx_bench_now_ns();
    for (uint32_t i = 0; i < n; i++)
        fx_bench_stamp(p->buf + (size_t)i * c->payload, p->seq + i, t);
    if (p->seq <= c->warmup && c->warmup < p->seq + n)
        p->t_first_meas = t;
    uint32_t s = fx_bench_stream_of(p->seq, c->batch, c->streams);
    /* One message per call is fx_publish, as applications (and the peers'
     * harness) publish. */
    int rv =
        n == 1 ? fx_publish(R->pub, c->ns, R->names[s], p->iov[0].data, p->iov[0].len, FX_ACK_NONE)
               : fx_publish_batch(R->pub, c->ns, R->names[s], p->iov, n, FX_ACK_NONE);
    p->seq += n;
    p->t_last_submit = fx_bench_now_ns();
    return rv;
}

static void publish_paced(run *R, pubstate *p, fx_bench_result *res)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t want = c->warmup + c->total,
             hard = c->warmup + (c->total > 50000000 ? c->total : 50000000);
    uint64_t t0 = fx_bench_now_ns(), next = t0 + 2000000000ull;
    while (p->seq < hard) {
        uint32_t n = c->batch; /* whole batches: each stays on one stream */
        if (!credit_wait(R, p, n, res)) {
            p->hit_deadline = true;
            break;
        }
        int rv = send_batch(R, p, n);
        if (rv != 0) {
            set_err(res, rv, "publish");
            res->error = 0; /* a failed publish invalidates the run, it is not setup */
            res->pub_errors++;
            p->failed = true;
            break;
        }
        progress_line(R, p, t0, &next);
        uint64_t now = fx_bench_now_ns();
        if (p->seq >= want && p->t_first_meas &&
            (double)(now - p->t_first_meas) / 1e9 >= c->min_seconds)
            break;
        if (now >= R->deadline_ns) {
            p->hit_deadline = true;
            break;
        }
    }
    if (c->progress && fx_bench_now_ns() - t0 > 2000000000ull)
        fprintf(stderr, "\n");
}

static void publish_latency(run *R, pubstate *p, fx_bench_result *res)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t rounds = c->warmup + c->total, t0 = fx_bench_now_ns(), next = t0 + 2000000000ull;
    fx_ack ack = c->ack ? FX_ACK_PER_MESSAGE : FX_ACK_NONE;
    for (; p->seq < rounds; p->seq++) {
        if (c->rate > 0) { /* a fixed low rate: round trip k starts at t0 + k / rate */
            uint64_t due = t0 + p->seq * 1000000000ull / c->rate, now = fx_bench_now_ns();
            if (due > now)
                usleep((useconds_t)((due - now) / 1000));
        }
        atomic_store(&R->acks, 0);
        atomic_store(&R->cur_seq, p->seq);
        uint64_t t = fx_bench_now_ns();
        fx_bench_stamp(p->buf, p->seq, t);
        if (p->seq == c->warmup)
            p->t_first_meas = t;
        uint32_t s = fx_bench_stream_of(p->seq, 1, c->streams);
        int rv = fx_publish(R->pub, c->ns, R->names[s], p->buf, c->payload, ack);
        if (rv != 0) {
            set_err(res, rv, "publish");
            res->error = 0;
            res->pub_errors++;
            p->failed = true;
            p->seq++;
            break;
        }
        int a;
        while ((a = atomic_load(&R->acks)) < R->ack_target) {
            uint64_t now = fx_bench_now_ns();
            if (now - t > LAT_WAIT_NS || now >= R->deadline_ns) {
                res->lat_timeouts++;
                break;
            }
            fx_bench_futex_wait(&R->acks, a, 100000000ull);
        }
        progress_line(R, p, t0, &next);
        if (fx_bench_now_ns() >= R->deadline_ns) {
            p->hit_deadline = true;
            p->seq++;
            break;
        }
    }
    if (c->progress && fx_bench_now_ns() - t0 > 2000000000ull)
        fprintf(stderr, "\n");
}

static int publish(run *R, pubstate *p, fx_bench_result *res)
{
    const fx_bench_cfg *c = R->cfg;
    uint32_t batch = c->mode == FX_BENCH_LATENCY ? 1 : c->batch;
    p->buf = calloc(batch, c->payload);
    p->iov = calloc(batch, sizeof(*p->iov));
    if (p->buf == NULL || p->iov == NULL)
        return set_err(res, -ENOMEM, "publish buffer");
    for (size_t i = 0; i < (size_t)batch * c->payload; i++)
        p->buf[i] = (uint8_t)('a' + i % 26);
    for (uint32_t i = 0; i < batch; i++)
        p->iov[i] = (fx_iov){p->buf + (size_t)i * c->payload, c->payload};
    if (c->mode == FX_BENCH_LATENCY)
        publish_latency(R, p, res);
    else
        publish_paced(R, p, res);
    /* Unacked publishes are in flight until QUIC acknowledges them. */
    int rv = fx_flush(R->pub, 10000);
    if (rv != 0 && !p->failed) {
        set_err(res, rv, "flush");
        res->error = 0;
        res->pub_errors++;
    }
    atomic_store(&R->end_ns, fx_bench_now_ns());
    atomic_store(&R->final_total, p->seq);
    return 0;
}

/* ---- results -------------------------------------------------------------------- */

typedef struct probes {
    struct rusage ru;
    double srv_user, srv_sys, host_busy, host_total;
    uint64_t cli_vcsw, srv_vcsw, t;
    fx_bench_drops drops;
    bool have_drops;
} probes;

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void probe(const fx_bench_cfg *c, probes *p)
{
    getrusage(RUSAGE_SELF, &p->ru);
    fx_bench_host_cpu(&p->host_busy, &p->host_total);
    p->cli_vcsw = fx_bench_proc_vcsw(0);
    if (c->broker_pid > 0) {
        fx_bench_proc_cpu(c->broker_pid, &p->srv_user, &p->srv_sys);
        p->srv_vcsw = fx_bench_proc_vcsw(c->broker_pid);
    }
    p->have_drops = false;
    if (c->admin != NULL)
        p->have_drops = fx_bench_scrape_drops(c->admin, &p->drops) == 0;
    else if (c->in_process)
        p->have_drops = fx_bench_local_drops(&p->drops) == 0;
    p->t = fx_bench_now_ns();
}

static void diff_probes(const fx_bench_cfg *c, const probes *a, const probes *b, fx_bench_result *r,
                        uint64_t units)
{
    r->run_s = (double)(b->t - a->t) / 1e9;
    r->client_user_s = tv_s(b->ru.ru_utime) - tv_s(a->ru.ru_utime);
    r->client_sys_s = tv_s(b->ru.ru_stime) - tv_s(a->ru.ru_stime);
    r->host_busy_s = b->host_busy - a->host_busy;
    r->have_server = c->broker_pid > 0;
    r->server_user_s = b->srv_user - a->srv_user;
    r->server_sys_s = b->srv_sys - a->srv_sys;
    double u = units ? (double)units : NAN;
    r->client_vcsw_per_msg = (double)(b->cli_vcsw - a->cli_vcsw) / u;
    r->server_vcsw_per_msg = r->have_server ? (double)(b->srv_vcsw - a->srv_vcsw) / u : NAN;
    r->have_drops = a->have_drops && b->have_drops;
    if (r->have_drops)
        r->drops = (fx_bench_drops){
            .subscribe_dropped = b->drops.subscribe_dropped - a->drops.subscribe_dropped,
            .lane_dropped = b->drops.lane_dropped - a->drops.lane_dropped,
            .lane_dropped_events = b->drops.lane_dropped_events - a->drops.lane_dropped_events,
            .ingress_dropped = b->drops.ingress_dropped - a->drops.ingress_dropped,
            .ingress_dropped_messages =
                b->drops.ingress_dropped_messages - a->drops.ingress_dropped_messages,
            .subscriber_disconnect =
                b->drops.subscriber_disconnect - a->drops.subscriber_disconnect,
        };
    r->broker_dgram_bytes = 0;
    if (r->have_drops && !c->in_process && b->drops.datagrams_sent > a->drops.datagrams_sent)
        r->broker_dgram_bytes = (double)(b->drops.bytes_sent - a->drops.bytes_sent) /
                                (double)(b->drops.datagrams_sent - a->drops.datagrams_sent);
}

/* Takes what |rd|'s client still holds into its accounting until nothing
 * came for 300 ms or |end|. Readers delivering by callback are the loop's. */
static void drain_reader(reader *rd, uint64_t end)
{
    fx_event ev;
    if (rd->cb)
        return;
    while (fx_bench_now_ns() < end && fx_subscription_next(rd->sub, &ev, 300) == 0)
        fx_bench_acct_on_msg(&rd->acct, ev.payload, ev.len, fx_bench_now_ns());
}

static void drain_all(run *R, uint64_t end)
{
    for (size_t i = 0; i < R->nreaders; i++)
        drain_reader(&R->readers[i], end);
}

/* The broker's counters on every subscription of the run, by the ids the
 * broker gave them: from the in-process broker or its admin endpoint.
 * Returns 0, or the error with the reason in |why|. */
static int read_sub_counters(run *R, fx_bench_sub_counter *sc, char *why, size_t cap)
{
    const fx_bench_cfg *c = R->cfg;
    for (size_t i = 0; i < R->nreaders; i++) {
        fx_sub_stats st;
        int rv = fx_subscription_stats(R->readers[i].sub, &st);
        if (rv != 0) {
            snprintf(why, cap, "subscription stats: %s", fx_strerror(rv));
            return rv;
        }
        sc[i].id = st.subscription_id;
    }
    int rv;
    if (c->broker != NULL) {
        char *json = NULL;
        rv = fx_broker_list_subscriptions(c->broker, 2000000000ull, &json);
        if (rv == 0)
            rv = fx_bench_sub_counters_parse(json, sc, R->nreaders);
        free(json);
    } else if (c->admin != NULL) {
        rv = fx_bench_sub_counters(c->admin, sc, R->nreaders);
    } else {
        snprintf(why, cap, "no admin endpoint (--admin) to read the subscriptions' drops from");
        return -EINVAL;
    }
    if (rv != 0)
        snprintf(why, cap, "GET /v1/subscriptions: %s",
                 rv == -ENOENT ? "a subscription of the run is not listed" : fx_strerror(rv));
    return rv;
}

/* After the run: reads every subscriber's rest, waits (at most 10 s) until
 * the broker holds nothing more for any of them (queue, lane, unacked
 * bytes: later drops would be missed), reads again, then
 * accounts each subscriber's losses against every counter that covers
 * them (fx_bench_loss) with the broker's ingress drops taken since |a|.
 * The stalled subscriber's backlog is most of what is read here. */
static void account_losses(run *R, const probes *a, fx_bench_result *r)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t fin = atomic_load(&R->final_total), end = fx_bench_now_ns() + 10000000000ull;
    fx_bench_sub_counter *sc = calloc(R->nreaders, sizeof(*sc));
    if (sc == NULL) {
        snprintf(r->loss_why, sizeof(r->loss_why), "out of memory");
        return;
    }
    int rv;
    for (;;) {
        drain_all(R, end);
        rv = read_sub_counters(R, sc, r->loss_why, sizeof(r->loss_why));
        uint64_t held = 0;
        for (size_t i = 0; rv == 0 && i < R->nreaders; i++)
            held += sc[i].held;
        if ((rv == 0 && held == 0) || rv == -ENOENT || rv == -EINVAL || fx_bench_now_ns() >= end)
            break;
        if (rv != 0)
            usleep(100000); /* e.g. 503 from a busy broker: ask again */
    }
    drain_all(R, fx_bench_now_ns() + 2000000000ull); /* what the last read saw leave */
    if (rv == 0)
        rv = read_sub_counters(R, sc, r->loss_why, sizeof(r->loss_why));
    for (size_t i = 0; rv == 0 && i < R->nreaders; i++)
        if (sc[i].held != 0) {
            snprintf(r->loss_why, sizeof(r->loss_why),
                     "the broker still holds messages for a subscription after 10 s");
            rv = -EAGAIN;
        }
    fx_bench_drops d;
    bool have = false;
    if (rv == 0 && a->have_drops) {
        have = (c->admin != NULL ? fx_bench_scrape_drops(c->admin, &d)
                : c->in_process  ? fx_bench_local_drops(&d)
                                 : -EINVAL) == 0;
        if (!have)
            snprintf(r->loss_why, sizeof(r->loss_why), "cannot read the broker's ingress drops");
    } else if (rv == 0) {
        snprintf(r->loss_why, sizeof(r->loss_why), "no broker counters before the run");
    }
    fx_client_stats ps;
    if (have && fx_client_get_stats(R->pub, &ps) != 0) {
        have = false;
        snprintf(r->loss_why, sizeof(r->loss_why), "cannot read the publisher's client stats");
    }
    if (have && ps.publishes_lost > 0 && c->batch != 1) {
        have = false; /* a lost fx_publish_batch call is one publish of |batch| messages? */
        snprintf(r->loss_why, sizeof(r->loss_why),
                 "the publisher's connection lost %llu publishes of batches",
                 (unsigned long long)ps.publishes_lost);
    }
    if (have) {
        r->loss_ingress_messages = d.ingress_dropped_messages - a->drops.ingress_dropped_messages;
        r->loss_pub_lost = ps.publishes_lost;
        r->loss_accounted = true;
        r->loss_exact = true;
    }
    for (uint32_t i = 0; i < c->fanout; i++) {
        subscriber *s = &R->subs[i];
        fx_bench_loss l = {.expected = fin,
                           .upstream = r->loss_ingress_messages + r->loss_pub_lost};
        for (uint32_t k = 0; k < c->streams; k++) {
            size_t x = (size_t)i * c->streams + k;
            reader *rd = &s->readers[k];
            fx_sub_stats st;
            if (fx_subscription_stats(rd->sub, &st) == 0)
                l.client_dropped += st.dropped;
            l.received += rd->acct.in_order;
            l.queue_dropped += sc[x].queue_dropped;
            l.lane_dropped += sc[x].lane_dropped;
        }
        if (i < FX_BENCH_LOSS_SUBS_MAX)
            r->loss_subs[i] = l;
        r->loss_missed += fx_bench_loss_missed(&l);
        r->loss_counted += fx_bench_loss_counted(&l);
        r->loss_exact &= fx_bench_loss_missed(&l) == fx_bench_loss_counted(&l);
        if (s->stalled) {
            r->stalled_client_dropped += l.client_dropped;
            r->stalled_expected += l.expected;
            r->stalled_received += l.received;
        }
    }
    r->loss_nsubs = c->fanout < FX_BENCH_LOSS_SUBS_MAX ? c->fanout : FX_BENCH_LOSS_SUBS_MAX;
    r->stalled_dropped =
        r->stalled_expected > r->stalled_received ? r->stalled_expected - r->stalled_received : 0;
    if (!r->loss_accounted)
        r->loss_exact = false;
    free(sc);
}

static void collect_latency(run *R, fx_bench_result *r)
{
    size_t n = 0;
    for (size_t i = 0; i < R->nreaders; i++)
        n += R->readers[i].acct.nlat;
    uint64_t *all = malloc((n ? n : 1) * sizeof(*all));
    if (all == NULL) {
        r->lat = (fx_bench_lat){.n = 0,
                                .p50_us = NAN,
                                .p90_us = NAN,
                                .p99_us = NAN,
                                .p999_us = NAN,
                                .max_us = NAN,
                                .mean_us = NAN};
        snprintf(r->why, sizeof(r->why), "out of memory summarising latency");
        r->t.errors++;
        return;
    }
    size_t k = 0;
    uint64_t unkept = 0;
    for (size_t i = 0; i < R->nreaders; i++) {
        const fx_bench_acct *a = &R->readers[i].acct;
        unkept += a->lat_unkept;
        if (a->nlat == 0)
            continue; /* |lat| may be NULL */
        memcpy(all + k, a->lat, a->nlat * sizeof(*all));
        k += a->nlat;
    }
    fx_bench_lat_summarize(all, n, unkept, &r->lat);
    free(all);
}

static void collect(run *R, const pubstate *p, fx_bench_result *r)
{
    const fx_bench_cfg *c = R->cfg;
    uint32_t healthy = healthy_of(c);
    uint64_t meas = p->seq > c->warmup ? p->seq - c->warmup : 0, last = 0;
    r->t.sent_measured = meas;
    r->t.expected = meas * healthy;
    r->t.errors += r->pub_errors + r->lat_timeouts;
    r->t.timed_out = p->hit_deadline;
    r->per_sub_min_delivered = UINT64_MAX;
    for (uint32_t i = 0; i < c->fanout; i++) {
        subscriber *s = &R->subs[i];
        if (!measured(s))
            continue;
        uint64_t got = 0;
        for (uint32_t k = 0; k < c->streams; k++) {
            reader *rd = &s->readers[k];
            got += rd->acct.recv_meas;
            last = rd->acct.last_meas_ns > last ? rd->acct.last_meas_ns : last;
            r->t.errors += rd->err != 0;
            fx_sub_stats st;
            if (fx_subscription_stats(rd->sub, &st) == 0)
                r->healthy_client_dropped += st.dropped;
            r->t.timed_out |= rd->timed_out;
        }
        r->per_sub_min_delivered = got < r->per_sub_min_delivered ? got : r->per_sub_min_delivered;
    }
    /* The healthy subscribers are the first |healthy|, their readers contiguous. */
    for (size_t i = 0; i < (size_t)healthy * c->streams; i++)
        fx_bench_totals_add(&r->t, &R->readers[i].acct);
    fx_bench_totals_finish(&r->t);
    r->window_s =
        last > p->t_first_meas && p->t_first_meas ? (double)(last - p->t_first_meas) / 1e9 : NAN;
    double pub_s = (double)(p->t_last_submit - p->t_first_meas) / 1e9;
    r->submit_msgs_per_s = p->t_first_meas && pub_s > 0 ? (double)meas / pub_s : NAN;
    r->delivered_mib = (double)r->t.delivered * (double)c->payload / 1048576.0;
    double guard_s = c->guard_min_seconds > 0 ? c->guard_min_seconds : FX_BENCH_GUARD_MIN_SECONDS;
    if (c->mode == FX_BENCH_THROUGHPUT && !isnan(r->window_s) &&
        (r->window_s < guard_s || (double)r->t.delivered * (double)c->payload <
                                      (double)c->bufferable * FX_BENCH_GUARD_FACTOR))
        r->t.guard_failed = true;
}

static void rates(const fx_bench_cfg *c, fx_bench_result *r)
{
    uint32_t healthy = healthy_of(c);
    r->msgs_per_s = r->mb_per_s = r->per_sub_msgs_per_s = r->pub_msgs_per_s = NAN;
    r->round_trips_per_s = NAN;
    /* Overload and isolation report the healthy subscribers' rate even when
     * they lost messages (the loss is the finding); other modes give no
     * figure. */
    bool always = c->mode == FX_BENCH_OVERLOAD || c->mode == FX_BENCH_ISOLATION;
    if ((!r->valid && !always) || isnan(r->window_s) || r->window_s <= 0)
        return;
    if (c->mode == FX_BENCH_LATENCY) {
        r->round_trips_per_s = (double)r->t.sent_measured / r->window_s;
        return;
    }
    r->msgs_per_s = (double)r->t.delivered / r->window_s;
    r->mb_per_s = r->msgs_per_s * (double)c->payload / 1e6;
    r->per_sub_msgs_per_s = r->msgs_per_s / healthy;
    r->pub_msgs_per_s = (double)r->t.sent_measured / r->window_s;
}

/* ---- isolation: the victim's link ------------------------------------------------- */

/* Puts client |c|'s link behind the QUIC test hooks (fxc_client_test_link):
 * each datagram it receives is held |delay_ns|, and |drop_permille| per
 * thousand of those it sends and receives are dropped (0 and 0 heal it).
 * Returns 0 with the datagrams the drop hook discarded so far in |*dropped|
 * (may be NULL), or fxc_client_test_link's error. Main thread. */
static int set_link(fx_client *c, uint64_t delay_ns, uint32_t drop_permille, uint64_t *dropped)
{
    fx_quic_stats st;
    int rv = fxc_client_test_link(c, true, delay_ns, drop_permille, &st);
    if (rv == 0 && dropped != NULL)
        *dropped = st.test_dropped;
    return rv;
}

static subscriber *victim_of(run *R)
{
    return &R->subs[R->cfg->fanout - 1];
}

/* Impairs the victim's link before the impaired phase publishes. Returns 0
 * or the error (in r->error/errmsg). */
static int impair_victim(run *R, fx_bench_result *r)
{
    const fx_bench_cfg *c = R->cfg;
    int rv = set_link(victim_of(R)->c, (uint64_t)c->victim_delay_ms * 1000000ull,
                      c->victim_drop_permille, NULL);
    if (rv != 0) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "cannot put the victim's link behind the test hooks: %s", fx_strerror(rv));
        r->error = rv;
    }
    return rv;
}

/* Counts what the victim got once its readers were joined, then heals its
 * link so that closing its client does not crawl. */
static void victim_count(run *R, fx_bench_result *r)
{
    subscriber *s = victim_of(R);
    r->victim_expected = atomic_load(&R->final_total); /* its streams carry every message */
    for (uint32_t k = 0; k < R->cfg->streams; k++) {
        r->victim_received += s->readers[k].acct.in_order;
        r->victim_gaps += s->readers[k].acct.gaps;
    }
    int rv = set_link(s->c, 0, 0, &r->victim_link_dropped);
    if (rv != 0)
        fprintf(stderr,
                "felix-bench: cannot heal the victim's link (%s); closing it may take "
                "a while\n",
                fx_strerror(rv));
}

/* impaired / clean, NaN unless both are positive figures. */
static double ratio(double impaired, double clean)
{
    return isfinite(impaired) && isfinite(clean) && impaired > 0 && clean > 0 ? impaired / clean
                                                                              : NAN;
}

/* Prefixes r->why with |prefix| (e.g. "clean phase: "), cutting the end of
 * the reason if both do not fit. */
static void why_in(fx_bench_result *r, const char *prefix)
{
    size_t cap = sizeof(r->why), pl = strlen(prefix), len = strnlen(r->why, cap - 1);
    if (pl >= cap)
        return;
    if (pl + len >= cap)
        len = cap - 1 - pl;
    memmove(r->why + pl, r->why, len);
    memcpy(r->why, prefix, pl);
    r->why[pl + len] = '\0';
}

static int run_phase(const fx_bench_cfg *c, fx_bench_result *r, bool impair);

/* The isolation case: the overload workload (shedding profile, F
 * subscribers, batches paced by the healthy ones) once with every link
 * clean and once with the victim (subscriber F-1) behind a delayed, lossy
 * link, each on fresh connections. |r| is the impaired phase's result with
 * the clean phase's healthy rate and p99 and the ratios added. */
static int isolation_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    fx_bench_result clean;
    int rv = run_phase(c, &clean, false);
    if (rv != 0) {
        *r = clean;
        return rv;
    }
    if ((rv = run_phase(c, r, true)) != 0)
        return rv;
    r->clean_msgs_per_s = clean.msgs_per_s;
    r->clean_p99_us = clean.lat.p99_us;
    r->impaired_msgs_per_s = r->msgs_per_s;
    r->impaired_p99_us = r->lat.p99_us;
    r->isolation_tput_ratio = ratio(r->impaired_msgs_per_s, r->clean_msgs_per_s);
    r->isolation_p99_ratio = ratio(r->impaired_p99_us, r->clean_p99_us);
    /* Healthy subscribers must lose nothing in either phase. */
    if (!clean.valid) {
        memcpy(r->why, clean.why, sizeof(r->why));
        why_in(r, "clean phase: ");
        r->valid = false;
    } else if (!r->valid) {
        why_in(r, "impaired phase: ");
    }
    return 0;
}

/* ---- idle subscriptions ---------------------------------------------------------- */

#define IDLE_WAIT_NS 60000000000ull /* hang guard: the gauge reaches N by then */
#define IDLE_SETTLE_US 1000000      /* after the gauge: let the broker's allocations settle */

static int idle_err(fx_bench_result *r, int rv, const char *what)
{
    snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s", what, fx_strerror(rv));
    r->error = rv;
    return rv;
}

/* Polls the broker's felix_sub_subscriptions gauge until it reaches |want|.
 * Returns 0, FX_ETIMEDOUT or the scrape error (in r->errmsg). */
static int wait_subscriptions(const fx_bench_cfg *c, uint64_t want, fx_bench_result *r)
{
    uint64_t end = fx_bench_now_ns() + IDLE_WAIT_NS, v = 0;
    for (;;) {
        int rv = fx_bench_scrape_value(c->admin, "felix_sub_subscriptions", &v);
        if (rv != 0)
            return idle_err(r, rv, "scrape felix_sub_subscriptions");
        if (v >= want)
            return 0;
        if (fx_bench_now_ns() >= end) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "felix_sub_subscriptions is %llu after 60 s, want %llu", (unsigned long long)v,
                     (unsigned long long)want);
            return r->error = FX_ETIMEDOUT;
        }
        usleep(100000);
    }
}

/* Reads the broker's VmRSS before any client, opens c->subs subscriptions
 * on one stream over ceil(subs / FX_BENCH_SUBS_PER_CLIENT) clients, waits
 * until the broker counts them all, and reads VmRSS again. */
static int idle_subs_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    run R = {.cfg = c};
    r->sub_clients =
        (uint32_t)((c->subs + FX_BENCH_SUBS_PER_CLIENT - 1) / FX_BENCH_SUBS_PER_CLIENT);
    fx_client **cl = calloc(r->sub_clients, sizeof(*cl));
    fx_subscription **subs = calloc(c->subs, sizeof(*subs));
    uint64_t hwm, base = 0;
    int rv = cl != NULL && subs != NULL ? 0 : idle_err(r, -ENOMEM, "idle-subs setup");
    if (rv == 0 && (rv = fx_bench_proc_rss(c->broker_pid, &r->rss_idle_kb, &hwm)) != 0)
        idle_err(r, rv, "read the broker's VmRSS");
    if (rv == 0 && (rv = fx_bench_scrape_value(c->admin, "felix_sub_subscriptions", &base)) != 0)
        idle_err(r, rv, "scrape felix_sub_subscriptions");
    probes a, b;
    probe(c, &a);
    for (uint32_t i = 0; rv == 0 && i < r->sub_clients; i++)
        rv = connect_one(&R, &cl[i], false, true, r);
    for (uint64_t j = 0; rv == 0 && j < c->subs; j++)
        if ((rv = fx_subscribe(&subs[j], cl[j / FX_BENCH_SUBS_PER_CLIENT], c->ns, "bench0",
                               NULL)) != 0)
            set_err(r, rv, "subscribe");
    if (rv == 0)
        rv = wait_subscriptions(c, base + c->subs, r);
    if (rv == 0) {
        r->subscribe_s = (double)(fx_bench_now_ns() - a.t) / 1e9;
        usleep(IDLE_SETTLE_US);
        if ((rv = fx_bench_proc_rss(c->broker_pid, &r->rss_subs_kb, &r->hwm_kb)) != 0)
            idle_err(r, rv, "read the broker's VmRSS");
    }
    if (rv == 0) {
        probe(c, &b);
        diff_probes(c, &a, &b, r, c->subs);
        r->peak_rss_kb = r->hwm_kb;
        r->bytes_per_sub =
            ((double)r->rss_subs_kb - (double)r->rss_idle_kb) * 1024.0 / (double)c->subs;
        r->valid = true;
    }
    for (uint64_t j = 0; subs != NULL && j < c->subs; j++)
        fx_unsubscribe(subs[j]);
    for (uint32_t i = 0; cl != NULL && i < r->sub_clients; i++)
        fx_client_close(cl[i], 2000);
    free(subs);
    free(cl);
    return rv;
}

/* One run on fresh clients: set up, publish, join the readers, sum up,
 * tear down. With |impair| (isolation) the victim's link is impaired
 * before publishing. Returns 0 or the setup error, as fx_bench_run_once. */
static int run_phase(const fx_bench_cfg *c, fx_bench_result *r, bool impair)
{
    memset(r, 0, sizeof(*r));
    run R = {.cfg = c};
    atomic_init(&R.final_total, NO_FINAL);
    atomic_init(&R.end_ns, 0);
    R.window = c->mode == FX_BENCH_LATENCY ? 1 : fx_bench_credit_window(c->payload);
    R.ack_target = (int)healthy_of(c);
    r->credit_window = R.window;
    R.deadline_ns = fx_bench_now_ns() + (uint64_t)((c->max_seconds + 30) * 1e9);
    int rv = setup(&R, r);
    if (rv == 0 && impair)
        rv = impair_victim(&R, r);
    if (rv != 0) {
        teardown(&R);
        return rv;
    }
    usleep(50000); /* let the subscriptions settle, as peerbench does */
    fx_bench_rss_sampler rss = {0};
    if (c->broker_pid > 0 && fx_bench_rss_start(&rss, c->broker_pid, 200) != 0)
        fprintf(stderr, "felix-bench: cannot start the RSS sampler; no peak_rss_kb\n");
    fx_bench_rss_sampler watch = {0};
    if (c->watch_s > 0 &&
        fx_bench_rss_watch_start(&watch, c->broker_pid, 10000, 1000, c->watch_s) != 0)
        fprintf(stderr, "felix-bench: cannot start the RSS watch\n");
    probes a, b;
    probe(c, &a);
    R.deadline_ns = a.t + (uint64_t)(c->max_seconds * 1e9);
    pubstate p = {0};
    publish(&R, &p, r);
    for (size_t i = 0; i < R.nreaders; i++)
        if (R.readers[i].started) {
            pthread_join(R.readers[i].th, NULL);
            R.readers[i].started = false;
        }
    probe(c, &b);
    /* The readers' switches before |a| are in a.cli_vcsw, their whole lives
     * in exited_vcsw: the difference is what they did during the run. */
    b.cli_vcsw += atomic_load(&R.exited_vcsw);
    r->peak_rss_kb = fx_bench_rss_stop(&rss);
    r->watch_max_kb = fx_bench_rss_stop(&watch);
    r->watch_samples = atomic_load(&watch.samples);
    r->watch_first_kb = atomic_load(&watch.first_kb);
    r->watch_last_kb = atomic_load(&watch.last_kb);
    r->watch_min_kb = r->watch_samples ? atomic_load(&watch.min_kb) : 0;
    r->watch_spread_pct = r->watch_samples ? 100.0 * (double)(r->watch_max_kb - r->watch_min_kb) /
                                                 (double)r->watch_min_kb
                                           : NAN;
    uint64_t rss_now;
    if (c->broker_pid > 0)
        fx_bench_proc_rss(c->broker_pid, &rss_now, &r->hwm_kb);
    if (c->mode == FX_BENCH_OVERLOAD)
        account_losses(&R, &a, r);
    if (impair)
        victim_count(&R, r);
    collect(&R, &p, r);
    if (c->mode != FX_BENCH_THROUGHPUT)
        collect_latency(&R, r);
    diff_probes(c, &a, &b, r, c->mode == FX_BENCH_LATENCY ? p.seq : r->t.delivered);
    r->valid = fx_bench_verdict(&r->t, r->why, sizeof(r->why));
    if (!r->valid && r->errmsg[0])
        snprintf(r->why + strlen(r->why), sizeof(r->why) - strlen(r->why), " (%s)", r->errmsg);
    rates(c, r);
    free(p.buf);
    free(p.iov);
    teardown(&R);
    return 0;
}

int fx_bench_live_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    return run_phase(c, r, false);
}

int fx_bench_run_once(const fx_bench_cfg *c, fx_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    if (c->mode == FX_BENCH_FSYNC_PROBE)
        return fx_bench_probe_run(c, r);
    if (c->mode == FX_BENCH_REPLAY)
        return fx_bench_replay_run(c, r);
    if (c->mode == FX_BENCH_GROUP)
        return fx_bench_group_run(c, r);
    if (c->mode == FX_BENCH_CACHE)
        return fx_bench_cache_run(c, r);
    if (c->mode == FX_BENCH_IDLE_SUBS)
        return idle_subs_run(c, r);
    if (c->mode == FX_BENCH_ISOLATION)
        return isolation_run(c, r);
    if (c->mode == FX_BENCH_THROUGHPUT && c->ack)
        return fx_bench_acked_run(c, r);
    return run_phase(c, r, false);
}
