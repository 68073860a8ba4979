/* felix-bench --mode group: consumer groups (fx_group_*), measured cell by
 * cell as ../shared/peers/peerbench --mode group measures NATS JetStream
 * and Redis streams (see bench_run.h, fx_bench_group_run). The main thread
 * sets up, publishes (the preload, or the live publisher), takes member A's
 * records in the redelivery cell and sums up; every other member is one
 * fx_client on its own thread. Threads share the per-sequence atomics of
 * fx_bench_gtrack and a futex doorbell for the live publisher. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_run.h"
#include "broker/broker.h" /* in-process broker: fx_broker_list_streams */
#include "felix/felix.h"

#define GROUP_NAME "bench-group"
#define LIVE_SEQ_CAP (64ull << 20)    /* live: sequences tracked (zeroed pages) */
#define STORED_WAIT_NS 30000000000ull /* preload: the broker holds it all by then */
#define TAKE_WAIT_NS 30000000000ull   /* redelivery: A has its records by then */
#define READY_SLACK_NS 15000000000ull /* redelivery: deadline past 3 ack waits */
#define NEXT_MS 100                   /* one fx_group_next wait */
#define ACK_SYNC_MS 5000              /* fx_group_ack_sync bound */
#define LAT_CAP (4u << 20)            /* live: samples kept per member */

typedef struct grun grun;

typedef struct gmember {
    grun *G;
    char name[24];
    bool is_a; /* redelivery: the member that takes and never acks */
    fx_client *cl;
    fx_group *g;
    pthread_t th;
    bool started;
    uint64_t delivered, redelivered, skipped, acks, ack_errors, errors, bad;
    uint64_t first_ns, last_ack_ns;
    uint64_t *lat; /* live: publish -> first delivery, measured sequences */
    size_t nlat;
    uint64_t lat_unkept;
    char errmsg[200];
} gmember;

struct grun {
    const fx_bench_cfg *cfg;
    char stream[48];
    fx_client *pub;
    gmember *m; /* consumers [0, n); the redelivery cell's A at [n] */
    uint32_t n;
    uint64_t npre; /* records published before the consumers start */
    fx_bench_gtrack tr;
    uint64_t *t_first, *t_again; /* redelivery: A's and B's delivery of each sequence */
    _Atomic int go, done, hit_deadline, alive, pub_waiting, wake_ctr;
    _Atomic uint64_t wait_target, target;
    uint64_t deadline_ns, meas_from;
};

static int gerr(fx_bench_result *r, int rv, const char *what)
{
    char detail[200];
    fx_client_last_error(NULL, detail, sizeof(detail));
    snprintf(r->errmsg, sizeof(r->errmsg), "group: %s: %s%s%s", what, fx_strerror(rv),
             detail[0] ? ": " : "", detail);
    r->error = rv;
    return rv;
}

static void note_err(gmember *m, int rv, const char *what)
{
    if (m->errmsg[0])
        return;
    char detail[120];
    fx_client_last_error(m->cl, detail, sizeof(detail));
    snprintf(m->errmsg, sizeof(m->errmsg), "member %s: %s: %s%s%s", m->name, what, fx_strerror(rv),
             detail[0] ? ": " : "", detail);
}

/* ---- members -------------------------------------------------------------------- */

static bool running(grun *G)
{
    if (atomic_load(&G->done))
        return false;
    if (fx_bench_now_ns() > G->deadline_ns) {
        atomic_store(&G->hit_deadline, 1);
        return false;
    }
    return true;
}

static void wake_publisher(grun *G)
{
    atomic_fetch_add(&G->wake_ctr, 1);
    fx_bench_futex_wake(&G->wake_ctr);
}

/* Live: keeps the publish -> first delivery time of a measured sequence. */
static void keep_latency(gmember *m, const fx_group_msg *msg, uint64_t t)
{
    uint64_t ts;
    memcpy(&ts, msg->payload + 8, sizeof(ts));
    if (t <= ts)
        return;
    if (m->nlat < LAT_CAP && m->lat != NULL)
        m->lat[m->nlat++] = t - ts;
    else
        m->lat_unkept++;
}

/* Redelivery: A's first delivery of |seq|, and B's first after it. A takes
 * all its records before B joins, and B alone writes t_again. */
static void note_redelivery(gmember *m, uint64_t seq, uint64_t t)
{
    grun *G = m->G;
    if (m->is_a) {
        if (G->t_first[seq] == 0)
            G->t_first[seq] = t;
    } else if (G->t_first[seq] != 0 && G->t_again[seq] == 0) {
        G->t_again[seq] = t;
    }
}

/* Counts one delivery; returns its sequence or UINT64_MAX (bad). */
static uint64_t on_deliver(gmember *m, const fx_group_msg *msg)
{
    grun *G = m->G;
    uint64_t t = fx_bench_now_ns();
    uint8_t prev = 0;
    uint64_t seq = fx_bench_gtrack_deliver(&G->tr, msg->payload, msg->len, &prev);
    m->skipped += msg->skipped;
    if (seq == UINT64_MAX) {
        m->bad++;
        return seq;
    }
    m->delivered++;
    m->redelivered += msg->attempt > 1;
    if (m->first_ns == 0)
        m->first_ns = t;
    if (G->cfg->group_cell == FX_BENCH_GCELL_LIVE && prev == 0 && seq >= G->meas_from)
        keep_latency(m, msg, t);
    if (G->cfg->group_cell == FX_BENCH_GCELL_REDELIVERY)
        note_redelivery(m, seq, t);
    return seq;
}

/* The run's last ack: it reaches the broker before the clock stops. */
static void complete(gmember *m)
{
    int rv = fx_group_ack_sync(m->g, ACK_SYNC_MS);
    if (rv != 0) {
        m->ack_errors++;
        note_err(m, rv, "fx_group_ack_sync");
    }
    m->last_ack_ns = fx_bench_now_ns();
    atomic_store(&m->G->done, 1);
}

/* Counts the ack of |seq| the client took. */
static void note_acked(gmember *m, uint64_t seq)
{
    grun *G = m->G;
    m->acks++;
    uint64_t n = fx_bench_gtrack_ack(&G->tr, seq);
    if (n == 0)
        return;
    m->last_ack_ns = fx_bench_now_ns();
    if (atomic_load(&G->pub_waiting) && n >= atomic_load(&G->wait_target))
        wake_publisher(G);
    if (n >= atomic_load(&G->target))
        complete(m);
}

/* One record: verify, then ack it (one fx_group_ack per record, as the
 * peers ack every message). */
static void take_one(gmember *m, const fx_group_msg *msg)
{
    uint64_t seq = on_deliver(m, msg);
    int rv = fx_group_ack(m->g, msg->offset);
    if (rv != 0) {
        m->ack_errors++;
        note_err(m, rv, "fx_group_ack");
        return;
    }
    if (seq != UINT64_MAX)
        note_acked(m, seq);
}

static void wait_go(grun *G)
{
    while (!atomic_load(&G->go) && fx_bench_now_ns() < G->deadline_ns)
        fx_bench_futex_wait(&G->go, 0, 50000000ull);
}

static void *member_main(void *arg)
{
    gmember *m = arg;
    grun *G = m->G;
    wait_go(G);
    while (running(G)) {
        fx_group_msg msg;
        int rv = fx_group_next(m->g, &msg, NEXT_MS);
        if (rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0) {
            m->errors++;
            note_err(m, rv, "fx_group_next");
            break;
        }
        take_one(m, &msg);
    }
    int rv = fx_group_ack_sync(m->g, ACK_SYNC_MS);
    if (rv != 0 && m->errors == 0) {
        m->ack_errors++;
        note_err(m, rv, "fx_group_ack_sync");
    }
    atomic_fetch_sub(&G->alive, 1);
    wake_publisher(G); /* a publisher waiting for acks must see a dead group */
    return NULL;
}

/* Connects |m|'s client and joins the group with |window| (the first
 * member creates the group from the stream's earliest record). */
static int member_join(grun *G, gmember *m, uint32_t window, bool create, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    fx_client_opts o;
    fx_bench_client_opts(c, &o, false);
    int rv = fx_client_connect(&m->cl, &o);
    if (rv != 0)
        return gerr(r, rv, "cannot connect to the broker");
    fx_start from = {.kind = FX_START_EARLIEST};
    fx_group_opts go;
    fx_group_opts_init(&go);
    go.ns = c->ns;
    go.stream = G->stream;
    go.group = GROUP_NAME;
    go.member = m->name;
    go.window = window;
    go.ack_wait_ms = (int)c->ack_wait_ms;
    go.create = create ? &from : NULL;
    if ((rv = fx_group_join(&m->g, m->cl, &go)) != 0) {
        char what[64];
        snprintf(what, sizeof(what), "member %s: fx_group_join", m->name);
        return gerr(r, rv, what);
    }
    return 0;
}

/* ---- publishing ----------------------------------------------------------------- */

static int stream_counts(const fx_bench_cfg *c, const char *stream, fx_bench_stream_info *sc)
{
    if (c->admin != NULL)
        return fx_bench_stream_counts(c->admin, c->ns, stream, sc);
    if (c->broker == NULL)
        return -ENOTSUP;
    char *json = NULL;
    int rv = fx_broker_list_streams(c->broker, 2000000000ull, &json);
    if (rv == 0)
        rv = fx_bench_stream_counts_parse(json, c->ns, stream, sc);
    free(json);
    return rv;
}

/* Waits until the broker holds the |n| records published (an acked empty
 * batch orders after them first). Without --admin or an in-process broker
 * the acked batch is the only check (r->stored UINT64_MAX). */
static int wait_stored(grun *G, uint64_t n, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    int rv = fx_publish_batch(G->pub, c->ns, G->stream, NULL, 0, FX_ACK_PER_BATCH);
    if (rv != 0)
        return gerr(r, rv, "acked publish after the preload");
    uint64_t dl = fx_bench_now_ns() + STORED_WAIT_NS;
    fx_bench_stream_info sc = {0};
    for (;;) {
        rv = stream_counts(c, G->stream, &sc);
        if (rv == -ENOTSUP) {
            r->stored = UINT64_MAX;
            return 0;
        }
        r->stored = sc.durable ? sc.next_offset : sc.messages;
        if (rv == 0 && r->stored >= n)
            return 0; /* a durable stream's group reads below the ring from its log */
        if (rv == 0 && sc.next_offset >= n) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "group: the stream's ring holds %" PRIu64 " of the %" PRIu64
                     " records published: start the broker with log_capacity >= %" PRIu64
                     ", log_capacity_bytes >= %" PRIu64
                     " and tenant_retained_bytes / retained_bytes_limit 0 (no limit)",
                     sc.messages, n, n, n * (uint64_t)(c->payload + 64));
            return r->error = -ENOSPC;
        }
        if (fx_bench_now_ns() > dl) {
            snprintf(r->errmsg, sizeof(r->errmsg),
                     "group: the broker holds %" PRIu64 " of %" PRIu64 " records after 30 s (%s)",
                     sc.messages, n, rv == 0 ? "listed" : fx_strerror(rv));
            return r->error = FX_ETIMEDOUT;
        }
        usleep(20000);
    }
}

/* Publishes sequences [0, n): one fx_publish per record, or batches of
 * |cfg|->batch with fx_publish_batch. */
static int preload(grun *G, uint64_t n, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    uint32_t b = c->batch ? c->batch : 1;
    uint8_t *buf = calloc(b, c->payload);
    fx_iov *iov = calloc(b, sizeof(*iov));
    int rv = buf && iov ? 0 : -ENOMEM;
    uint64_t t0 = fx_bench_now_ns();
    for (uint64_t seq = 0; rv == 0 && seq < n; seq += b) {
        uint32_t k = n - seq < b ? (uint32_t)(n - seq) : b;
        for (uint32_t i = 0; i < k; i++) {
            fx_bench_stamp(buf + (size_t)i * c->payload, seq + i, fx_bench_now_ns());
            iov[i] = (fx_iov){buf + (size_t)i * c->payload, c->payload};
        }
        rv = k == 1 ? fx_publish(G->pub, c->ns, G->stream, buf, c->payload, FX_ACK_NONE)
                    : fx_publish_batch(G->pub, c->ns, G->stream, iov, k, FX_ACK_NONE);
    }
    free(buf);
    free(iov);
    if (rv == 0 && (rv = fx_flush(G->pub, 60000)) != 0)
        return gerr(r, rv, "flush after the preload");
    if (rv != 0) {
        r->grp.pub_errors++;
        return gerr(r, rv, "preload publish");
    }
    rv = wait_stored(G, n, r);
    r->preload_s = (double)(fx_bench_now_ns() - t0) / 1e9;
    r->preload_msgs_per_s = (double)n / r->preload_s;
    return rv;
}

/* Live, with --rate: sleeps until record |seq| is due. */
static void pace(const fx_bench_cfg *c, uint64_t t0, uint64_t seq)
{
    if (c->rate == 0)
        return;
    uint64_t due = t0 + (uint64_t)((double)seq * 1e9 / c->rate), t = fx_bench_now_ns();
    if (due > t) {
        struct timespec ts = {(time_t)((due - t) / 1000000000ull),
                              (long)((due - t) % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

/* Live: blocks until the group acked up to |seq| - |k| / 2 + 1. Returns
 * false at the deadline or when no member is left. */
static bool window_wait(grun *G, uint64_t seq, uint64_t k, fx_bench_result *r)
{
    uint64_t target = seq - k / 2 + 1;
    r->window_waits++;
    atomic_store(&G->wait_target, target);
    atomic_store(&G->pub_waiting, 1);
    bool ok = true;
    for (;;) {
        int v = atomic_load(&G->wake_ctr);
        if (atomic_load(&G->tr.acked_distinct) >= target)
            break;
        if (fx_bench_now_ns() > G->deadline_ns) {
            atomic_store(&G->hit_deadline, 1);
            ok = false;
            break;
        }
        if (atomic_load(&G->alive) <= 0) {
            ok = false;
            break;
        }
        fx_bench_futex_wait(&G->wake_ctr, v, 2000000ull);
    }
    atomic_store(&G->pub_waiting, 0);
    return ok;
}

/* Live: one record per fx_publish, at most the credit window ahead of what
 * the group acked, until min_seconds of measured publishing. Returns the
 * records published; |*t_meas0| is when the first measured one went. */
static uint64_t publish_live(grun *G, fx_bench_result *r, uint64_t *t_meas0)
{
    const fx_bench_cfg *c = G->cfg;
    uint64_t k = fx_bench_credit_window(c->payload), seq, t0 = fx_bench_now_ns();
    uint8_t *buf = calloc(1, c->payload);
    r->credit_window = k;
    for (seq = 0; buf != NULL && seq < G->tr.cap; seq++) {
        pace(c, t0, seq);
        uint64_t t = fx_bench_now_ns();
        if (t > G->deadline_ns) {
            atomic_store(&G->hit_deadline, 1);
            break;
        }
        if (*t_meas0 && t - *t_meas0 >= (uint64_t)(c->min_seconds * 1e9))
            break;
        if (seq >= atomic_load(&G->tr.acked_distinct) + k && !window_wait(G, seq, k, r))
            break;
        t = fx_bench_now_ns();
        fx_bench_stamp(buf, seq, t);
        if (seq == c->warmup)
            *t_meas0 = t;
        int rv = fx_publish(G->pub, c->ns, G->stream, buf, c->payload, FX_ACK_NONE);
        if (rv != 0) {
            r->grp.pub_errors++;
            gerr(r, rv, "live publish");
            r->error = 0; /* a failed publish is a finding, not a setup error */
            break;
        }
    }
    free(buf);
    if (fx_flush(G->pub, 10000) != 0)
        r->grp.pub_errors++;
    uint64_t t_end = fx_bench_now_ns();
    if (*t_meas0 && seq > c->warmup)
        r->group_pub_msgs_per_s = (double)(seq - c->warmup) / ((double)(t_end - *t_meas0) / 1e9);
    return seq;
}

/* ---- setup and teardown ------------------------------------------------------------ */

static int alloc_run(grun *G, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    fx_bench_gcell cell = c->group_cell;
    G->n = cell == FX_BENCH_GCELL_REDELIVERY ? 1 : c->consumers;
    G->npre = cell == FX_BENCH_GCELL_LIVE ? 0 : c->group_count;
    G->meas_from = cell == FX_BENCH_GCELL_LIVE ? c->warmup : 0;
    uint64_t cap = cell == FX_BENCH_GCELL_LIVE ? c->warmup + LIVE_SEQ_CAP : c->group_count;
    G->m = calloc(G->n + 1, sizeof(*G->m));
    if (G->m == NULL || fx_bench_gtrack_init(&G->tr, cap) != 0)
        return gerr(r, -ENOMEM, "tracking");
    if (cell == FX_BENCH_GCELL_REDELIVERY) {
        G->t_first = calloc(cap, sizeof(*G->t_first));
        G->t_again = calloc(cap, sizeof(*G->t_again));
        if (G->t_first == NULL || G->t_again == NULL)
            return gerr(r, -ENOMEM, "tracking");
    }
    for (uint32_t i = 0; i <= G->n; i++) {
        gmember *m = &G->m[i];
        m->G = G;
        m->is_a = cell == FX_BENCH_GCELL_REDELIVERY && i == G->n;
        if (cell == FX_BENCH_GCELL_REDELIVERY)
            snprintf(m->name, sizeof(m->name), "%s", m->is_a ? "A" : "B");
        else
            snprintf(m->name, sizeof(m->name), "c%u", i);
        if (cell == FX_BENCH_GCELL_LIVE && i < G->n && (m->lat = malloc(LAT_CAP * 8)) == NULL)
            return gerr(r, -ENOMEM, "latency samples");
    }
    atomic_init(&G->target, cell == FX_BENCH_GCELL_LIVE ? UINT64_MAX : G->npre);
    return 0;
}

/* A stream of the run's own, created empty, and the publisher's client. */
static int setup_stream(grun *G, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    snprintf(G->stream, sizeof(G->stream), "group%lx-%llx", (long)getpid(),
             (unsigned long long)(fx_bench_now_ns() % 0xffffffffull));
    fx_client_opts o;
    fx_bench_client_opts(c, &o, false);
    int rv = fx_client_connect(&G->pub, &o);
    if (rv != 0)
        return gerr(r, rv, "cannot connect to the broker");
    /* An acked empty batch creates the stream, as the run engine's subscribe does. */
    if ((rv = fx_publish_batch(G->pub, c->ns, G->stream, NULL, 0, FX_ACK_PER_BATCH)) != 0)
        return gerr(r, rv, "create the stream");
    return G->npre ? preload(G, G->npre, r) : 0;
}

/* Redelivery: member A joins alone and takes every record, acking none
 * (its window is the record count, so it can hold them all), and stays
 * joined: its leases lapse. */
static int take_unacked(grun *G, fx_bench_result *r)
{
    gmember *a = &G->m[G->n];
    int rv = member_join(G, a, (uint32_t)G->npre, true, r);
    uint64_t dl = fx_bench_now_ns() + TAKE_WAIT_NS;
    while (rv == 0 && a->delivered + a->bad < G->npre && fx_bench_now_ns() < dl) {
        fx_group_msg msg;
        rv = fx_group_next(a->g, &msg, NEXT_MS);
        if (rv == 0)
            on_deliver(a, &msg);
        else if (rv == FX_ETIMEDOUT)
            rv = 0;
        else
            gerr(r, rv, "member A: fx_group_next");
    }
    if (rv == 0 && a->delivered < G->npre) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "group redelivery: member A took %" PRIu64 " of %" PRIu64 " records", a->delivered,
                 G->npre);
        rv = r->error = FX_ETIMEDOUT;
    }
    r->taken_by_a = a->delivered;
    uint64_t late = fx_bench_now_ns() + (uint64_t)G->cfg->ack_wait_ms * 3000000ull + READY_SLACK_NS;
    if (late < G->deadline_ns)
        G->deadline_ns = late;
    return rv;
}

/* Joins the consumers (the first creates the group unless A did) and
 * starts their threads; they wait for |go|. */
static int start_members(grun *G, fx_bench_result *r)
{
    bool redelivery = G->cfg->group_cell == FX_BENCH_GCELL_REDELIVERY;
    int rv = redelivery ? take_unacked(G, r) : 0;
    atomic_store(&G->alive, (int)G->n);
    for (uint32_t i = 0; rv == 0 && i < G->n; i++)
        rv = member_join(G, &G->m[i], G->cfg->group_window, i == 0 && !redelivery, r);
    for (uint32_t i = 0; rv == 0 && i < G->n; i++) {
        if ((rv = -pthread_create(&G->m[i].th, NULL, member_main, &G->m[i])) != 0)
            return gerr(r, rv, "consumer thread");
        G->m[i].started = true;
    }
    /* Redelivery: A "freezes": it stays joined and never acks, so each record
     * it took comes back when its lease lapses, to B (a redelivery goes to
     * another member than the one that let it lapse). A leaving member's
     * records would come back at once instead. A leaves at the end. */
    return rv;
}

static void stop_members(grun *G)
{
    atomic_store(&G->done, 1);
    atomic_store(&G->go, 1);
    fx_bench_futex_wake(&G->go);
    for (uint32_t i = 0; G->m != NULL && i <= G->n; i++)
        if (G->m[i].started) {
            pthread_join(G->m[i].th, NULL);
            G->m[i].started = false;
        }
}

static void group_teardown(grun *G)
{
    stop_members(G);
    for (uint32_t i = 0; G->m != NULL && i <= G->n; i++) {
        if (G->m[i].g != NULL)
            fx_group_leave(G->m[i].g);
        fx_client_close(G->m[i].cl, 2000);
        free(G->m[i].lat);
    }
    fx_client_close(G->pub, 2000);
    fx_bench_gtrack_deinit(&G->tr);
    free(G->t_first);
    free(G->t_again);
    free(G->m);
}

/* ---- results -------------------------------------------------------------------- */

typedef struct gprobe {
    struct rusage ru;
    double srv_user, srv_sys, host_busy, host_total;
    uint64_t t;
} gprobe;

static void group_probe(const fx_bench_cfg *c, gprobe *p)
{
    getrusage(RUSAGE_SELF, &p->ru);
    fx_bench_host_cpu(&p->host_busy, &p->host_total);
    if (c->broker_pid > 0)
        fx_bench_proc_cpu(c->broker_pid, &p->srv_user, &p->srv_sys);
    p->t = fx_bench_now_ns();
}

static double secs_of(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void group_diff(const fx_bench_cfg *c, const gprobe *a, const gprobe *b, fx_bench_result *r)
{
    r->run_s = (double)(b->t - a->t) / 1e9;
    r->client_user_s = secs_of(b->ru.ru_utime) - secs_of(a->ru.ru_utime);
    r->client_sys_s = secs_of(b->ru.ru_stime) - secs_of(a->ru.ru_stime);
    r->host_busy_s = b->host_busy - a->host_busy;
    r->have_server = c->broker_pid > 0;
    r->server_user_s = b->srv_user - a->srv_user;
    r->server_sys_s = b->srv_sys - a->srv_sys;
    r->client_vcsw_per_msg = r->server_vcsw_per_msg = NAN;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* Redelivery: (B's delivery - A's) - ack wait of every record B got again. */
static void lateness(grun *G, fx_bench_result *r)
{
    uint64_t n = G->npre;
    int64_t *late = malloc((n ? n : 1) * sizeof(*late));
    size_t k = 0;
    for (uint64_t s = 0; late != NULL && s < n; s++)
        if (G->t_first[s] && G->t_again[s])
            late[k++] =
                (int64_t)(G->t_again[s] - G->t_first[s]) - (int64_t)G->cfg->ack_wait_ms * 1000000;
    if (late != NULL)
        qsort(late, k, sizeof(*late), cmp_i64);
    r->lateness_p50_ms = fx_bench_pct_i64_ms(late, k, 0.50);
    r->lateness_p99_ms = fx_bench_pct_i64_ms(late, k, 0.99);
    r->lateness_max_ms = k ? (double)late[k - 1] / 1e6 : NAN;
    r->lateness_min_ms = k ? (double)late[0] / 1e6 : NAN;
    free(late);
    /* The clients' view above loses A's own delivery delay under load; the
     * broker's histogram times the lease's timer itself. */
    if (G->cfg->admin != NULL &&
        fx_bench_group_lateness(G->cfg->admin, G->cfg->ns, G->stream, GROUP_NAME,
                                &r->broker_late_p50_ms, &r->broker_late_p99_ms,
                                &r->broker_late_n) != 0)
        fprintf(stderr, "felix-bench: the group's lateness histogram could not be read\n");
}

static void live_latency(grun *G, fx_bench_result *r)
{
    size_t n = 0;
    uint64_t unkept = 0;
    for (uint32_t i = 0; i < G->n; i++)
        n += G->m[i].nlat, unkept += G->m[i].lat_unkept;
    uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
    size_t k = 0;
    for (uint32_t i = 0; v != NULL && i < G->n; i++) {
        memcpy(v + k, G->m[i].lat, G->m[i].nlat * sizeof(*v));
        k += G->m[i].nlat;
    }
    fx_bench_lat_summarize(v, k, unkept + (n - k), &r->lat);
    free(v);
}

/* Sums the members' counters into r->grp; the window is consumers only. */
static void sum_members(grun *G, fx_bench_result *r, uint64_t *first, uint64_t *last)
{
    fx_bench_gcount *k = &r->grp;
    *first = UINT64_MAX;
    *last = 0;
    for (uint32_t i = 0; i <= G->n; i++) {
        gmember *m = &G->m[i];
        if (i == G->n && !m->is_a)
            break;
        k->delivered += m->delivered;
        k->redelivered += m->redelivered;
        k->skipped += m->skipped;
        k->errors += m->errors;
        k->ack_errors += m->ack_errors;
        k->bad += m->bad;
        fx_member_stats st;
        if (m->g != NULL && fx_group_stats(m->g, &st) == 0) {
            k->ack_ops += st.ops_sent;
            k->ack_frames += st.frames_sent;
        }
        if (m->errmsg[0])
            fprintf(stderr, "felix-bench: %s\n", m->errmsg);
        if (!m->is_a && m->first_ns && m->first_ns < *first)
            *first = m->first_ns;
        if (m->last_ack_ns > *last)
            *last = m->last_ack_ns;
        if (i < FX_BENCH_GROUP_CONSUMERS_MAX && !m->is_a)
            r->per_consumer_acked[i] = m->acks;
    }
}

static void group_collect(grun *G, fx_bench_result *r, uint64_t sent, uint64_t t_meas0,
                          bool finished)
{
    const fx_bench_cfg *c = G->cfg;
    fx_bench_gcell cell = c->group_cell;
    uint64_t first, last;
    sum_members(G, r, &first, &last);
    fx_bench_gcount *k = &r->grp;
    uint64_t expect = cell == FX_BENCH_GCELL_LIVE ? sent : G->npre;
    bool redelivery = cell == FX_BENCH_GCELL_REDELIVERY;
    fx_bench_gtrack_tally(&G->tr, expect, redelivery ? 2 : 1, redelivery ? G->t_again : NULL, k);
    k->hit_deadline = !finished || atomic_load(&G->hit_deadline);
    r->valid = fx_bench_group_verdict(k, r->why, sizeof(r->why));
    if (!r->valid && r->errmsg[0])
        snprintf(r->why + strlen(r->why), sizeof(r->why) - strlen(r->why), " (%s)", r->errmsg);
    uint64_t meas_n =
        cell == FX_BENCH_GCELL_LIVE ? (sent > c->warmup ? sent - c->warmup : 0) : expect;
    uint64_t from = cell == FX_BENCH_GCELL_LIVE ? t_meas0 : first;
    r->window_s = r->msgs_per_s = r->mb_per_s = NAN;
    if (!redelivery && from && from != UINT64_MAX && last > from) {
        r->window_s = (double)(last - from) / 1e9;
        r->msgs_per_s = (double)meas_n / r->window_s;
        r->mb_per_s = r->msgs_per_s * (double)c->payload / 1e6;
    }
    r->t = (fx_bench_totals){.sent_measured = meas_n,
                             .expected = expect,
                             .delivered = k->distinct,
                             .lost = k->missing,
                             .dups = k->dups,
                             .bad = k->bad,
                             .errors = k->errors + k->ack_errors + k->pub_errors,
                             .timed_out = k->hit_deadline};
    if (cell == FX_BENCH_GCELL_LIVE)
        live_latency(G, r);
    if (redelivery)
        lateness(G, r);
}

static void init_nans(fx_bench_result *r)
{
    r->msgs_per_s = r->window_s = r->mb_per_s = r->preload_s = r->preload_msgs_per_s = NAN;
    r->group_pub_msgs_per_s = r->lateness_p50_ms = r->lateness_p99_ms = NAN;
    r->lateness_max_ms = r->lateness_min_ms = NAN;
    r->broker_late_p50_ms = r->broker_late_p99_ms = NAN;
    r->lat = (fx_bench_lat){
        .p50_us = NAN, .p90_us = NAN, .p99_us = NAN, .p999_us = NAN, .max_us = NAN, .mean_us = NAN};
}

/* Publishes (live), waits for the last ack or the deadline, stops the members. */
static void measure(grun *G, fx_bench_result *r)
{
    const fx_bench_cfg *c = G->cfg;
    gprobe a, b;
    fx_bench_rss_sampler rss = {0};
    if (c->broker_pid > 0 && fx_bench_rss_start(&rss, c->broker_pid, 200) != 0)
        fprintf(stderr, "felix-bench: cannot start the RSS sampler; no peak_rss_kb\n");
    group_probe(c, &a);
    atomic_store(&G->go, 1);
    fx_bench_futex_wake(&G->go);
    uint64_t sent = G->npre, t_meas0 = 0;
    if (c->group_cell == FX_BENCH_GCELL_LIVE) {
        sent = publish_live(G, r, &t_meas0);
        atomic_store(&G->target, sent);
        if (atomic_load(&G->tr.acked_distinct) >= sent)
            atomic_store(&G->done, 1);
    }
    while (!atomic_load(&G->done) && atomic_load(&G->alive) > 0 &&
           fx_bench_now_ns() < G->deadline_ns)
        usleep(1000);
    bool finished = atomic_load(&G->done);
    group_probe(c, &b);
    stop_members(G);
    r->peak_rss_kb = fx_bench_rss_stop(&rss);
    if (c->broker_pid > 0) {
        uint64_t now_kb;
        fx_bench_proc_rss(c->broker_pid, &now_kb, &r->hwm_kb);
    }
    group_collect(G, r, sent, t_meas0, finished);
    group_diff(c, &a, &b, r);
}

int fx_bench_group_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    init_nans(r);
    grun G = {.cfg = c};
    atomic_init(&G.go, 0);
    atomic_init(&G.done, 0);
    G.deadline_ns = fx_bench_now_ns() + (uint64_t)(c->max_seconds * 1e9);
    int rv = alloc_run(&G, r);
    if (rv == 0)
        rv = setup_stream(&G, r);
    if (rv == 0)
        rv = start_members(&G, r);
    if (rv == 0)
        measure(&G, r);
    group_teardown(&G);
    return rv;
}

/* ---- output --------------------------------------------------------------------- */

static void jnum(const char *name, double v, int prec)
{
    if (isnan(v) || isinf(v))
        printf("\"%s\":null,", name);
    else
        printf("\"%s\":%.*f,", name, prec, v);
}

void fx_bench_group_json(const fx_bench_cfg *c, const fx_bench_result *r)
{
    const fx_bench_gcount *k = &r->grp;
    bool redelivery = c->group_cell == FX_BENCH_GCELL_REDELIVERY;
    printf("\"group_cell\":\"%s\",\"consumers\":%u,\"member_window\":%u,\"ack_wait_ms\":%u,",
           fx_bench_gcell_name(c->group_cell), redelivery ? 2u : c->consumers, c->group_window,
           c->ack_wait_ms);
    jnum("msgs_per_s", r->msgs_per_s, 0);
    jnum("mb_per_s", r->mb_per_s, 2);
    jnum("window_s", r->window_s, 4);
    printf("\"missing\":%" PRIu64 ",\"redelivered\":%" PRIu64 ",\"count\":%" PRIu64
           ",\"distinct\":%" PRIu64 ",\"acked\":%" PRIu64 ",\"extra_deliveries\":%" PRIu64
           ",\"deliveries\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"bad\":%" PRIu64
           ",\"ack_errors\":%" PRIu64 ",\"pub_errors\":%" PRIu64 ",\"hit_deadline\":%s,",
           k->missing, k->redelivered, k->expected, k->distinct, k->acked, k->extra, k->delivered,
           k->skipped, k->bad, k->ack_errors, k->pub_errors, k->hit_deadline ? "true" : "false");
    printf("\"ack_ops\":%" PRIu64 ",\"ack_frames\":%" PRIu64 ",", k->ack_ops, k->ack_frames);
    if (c->group_cell != FX_BENCH_GCELL_LIVE) {
        jnum("preload_s", r->preload_s, 3);
        jnum("preload_msgs_per_s", r->preload_msgs_per_s, 0);
        if (r->stored == UINT64_MAX)
            printf("\"stored\":null,");
        else
            printf("\"stored\":%" PRIu64 ",", r->stored);
    }
    if (c->group_cell == FX_BENCH_GCELL_LIVE) {
        printf("\"rate\":%u,\"credit_window\":%" PRIu64 ",\"window_waits\":%" PRIu64 ",", c->rate,
               r->credit_window, r->window_waits);
        jnum("pub_msgs_per_s", r->group_pub_msgs_per_s, 0);
        printf("\"samples\":%zu,\"samples_unkept\":%" PRIu64 ",", r->lat.n, r->lat.unkept);
        jnum("p50_us", r->lat.p50_us, 1);
        jnum("p90_us", r->lat.p90_us, 1);
        jnum("p99_us", r->lat.p99_us, 1);
        jnum("p999_us", r->lat.p999_us, 1);
        jnum("max_us", r->lat.max_us, 1);
    }
    if (redelivery) {
        jnum("lateness_p50_ms", r->lateness_p50_ms, 3);
        jnum("lateness_p99_ms", r->lateness_p99_ms, 3);
        jnum("lateness_max_ms", r->lateness_max_ms, 3);
        jnum("lateness_min_ms", r->lateness_min_ms, 3);
        jnum("broker_lateness_p50_ms", r->broker_late_p50_ms, 3);
        jnum("broker_lateness_p99_ms", r->broker_late_p99_ms, 3);
        printf("\"broker_lateness_n\":%" PRIu64 ",", r->broker_late_n);
        printf("\"redeliver_n\":%" PRIu64 ",\"taken_by_a\":%" PRIu64 ",", c->group_count,
               r->taken_by_a);
    }
    uint32_t n = redelivery ? 1 : c->consumers;
    printf("\"per_consumer_acked\":[");
    for (uint32_t i = 0; i < n && i < FX_BENCH_GROUP_CONSUMERS_MAX; i++)
        printf("%s%" PRIu64, i ? "," : "", r->per_consumer_acked[i]);
    printf("],");
}

int fx_bench_group_format(char *buf, size_t cap, const fx_bench_cfg *c, const fx_bench_result *r)
{
    const fx_bench_gcount *k = &r->grp;
    char fig[200];
    if (c->group_cell == FX_BENCH_GCELL_REDELIVERY)
        snprintf(fig, sizeof(fig),
                 "A took %" PRIu64 ", B got %" PRIu64
                 " again: lateness p50 %.3f  p99 %.3f  max %.3f ms",
                 r->taken_by_a, k->expected - k->missing, r->lateness_p50_ms, r->lateness_p99_ms,
                 r->lateness_max_ms);
    else if (c->group_cell == FX_BENCH_GCELL_LIVE)
        snprintf(fig, sizeof(fig),
                 "%.0f acked msg/s over %.2f s; publish -> delivery p50 %.1f  p99 %.1f us",
                 r->msgs_per_s, r->window_s, r->lat.p50_us, r->lat.p99_us);
    else
        snprintf(fig, sizeof(fig), "%.0f acked msg/s over %.2f s (preload %.0f msg/s)",
                 r->msgs_per_s, r->window_s, r->preload_msgs_per_s);
    return snprintf(buf, cap,
                    "group %s, %u consumers, window %u: %s; %" PRIu64 " of %" PRIu64
                    " acked, %" PRIu64 " missing, %" PRIu64 " duplicated, %" PRIu64
                    " redelivered%s%s",
                    fx_bench_gcell_name(c->group_cell),
                    c->group_cell == FX_BENCH_GCELL_REDELIVERY ? 2u : c->consumers, c->group_window,
                    fig, k->acked, k->expected, k->missing, k->dups, k->redelivered,
                    r->valid ? "" : "  INVALID: ", r->valid ? "" : r->why);
}
