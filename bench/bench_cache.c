/* felix-bench's cache measurement (--mode cache), shaped like
 * `redis-benchmark -t get|set -d N -c C -P P -r K`: C closed-loop clients,
 * each with P requests in flight, issue cache gets or puts of N-byte values
 * on keys "key:%012u" drawn at random in [0, K) (redis-benchmark's
 * __rand_int__ with -r K), and a client issues its next request from the
 * completion of the previous one (fx_cache_*_async callbacks). The C clients
 * share --connections fx_clients (one QUIC connection each), client i on
 * connection i mod N. A get run first fills the K keys (not measured). The
 * fill op puts K distinct keys once and reports the broker's RSS growth per
 * entry (the memory cell). Main thread sets up, measures and joins; the
 * callbacks run on each fx_client's loop and touch only their slot and
 * their connection's counters (under its mutex). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_run.h"
#include "felix/felix.h"

#define CACHE_LAT_TOTAL (1u << 22)  /* latency samples kept over all connections */
#define CACHE_DRAIN_NS 15000000000u /* stop: wait this long for the requests in flight */

static const char *const OP_NAMES[] = {"get", "set", "fill"};

const char *fx_bench_cache_op_name(fx_bench_cache_op op)
{
    return (unsigned)op < 3 ? OP_NAMES[op] : "?";
}

int fx_bench_cache_op_parse(const char *s, fx_bench_cache_op *op)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, OP_NAMES[i]) == 0) {
            *op = (fx_bench_cache_op)i;
            return 0;
        }
    return -1;
}

typedef struct crun crun;

/* One connection (fx_client) and the counters of the requests it answered. */
typedef struct cconn {
    crun *R;
    fx_client *cl;
    pthread_mutex_t mu; /* the fields below: written by this client's callbacks */
    uint64_t *lat;
    size_t nlat, lat_cap;
    uint64_t lat_unkept; /* measured answers past lat_cap: no sample kept */
    uint64_t in_window;  /* answers that arrived inside the measured window */
    uint64_t done;       /* answers (any time) */
    uint64_t errors, misses, bad_len;
    int first_err;
    char err_text[160];
} cconn;

/* One request in flight of one client (a client has pipeline slots). */
typedef struct cslot {
    cconn *conn;
    uint64_t rng;
    uint64_t t_sent;
    bool measured;
    struct cslot *next_pending; /* on crun.pending (FX_EFULL from the loop) */
} cslot;

struct crun {
    const fx_bench_cfg *cfg;
    fx_bench_cache_op op; /* the phase running (a get run's fill is a fill) */
    char cache[48];
    cconn *conns;
    uint32_t nconns;
    cslot *slots;
    uint32_t nslots;
    uint8_t *value; /* a put's value: payload bytes */
    _Atomic uint64_t next_key; /* fill: the next key to put */
    _Atomic uint64_t total_done;
    _Atomic uint64_t start_ns, stop_ns; /* 0 until set by the main thread */
    atomic_bool stop;
    atomic_uint active;        /* slots with a request in flight or pending */
    pthread_mutex_t pend_mu;   /* pending, full_retries */
    cslot *pending;            /* slots whose reissue found the client full */
    uint64_t full_retries;
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void on_answer(void *user, int rv, const void *value, size_t len);

/* Sends |s|'s next request. Returns 0, 1 (nothing left to send: fill
 * done, or stopping) or the call's error. Any thread. */
static int cache_issue(cslot *s)
{
    crun *R = s->conn->R;
    const fx_bench_cfg *c = R->cfg;
    if (atomic_load(&R->stop))
        return 1;
    uint64_t k;
    if (R->op == FX_BENCH_CACHE_FILL) {
        k = atomic_fetch_add(&R->next_key, 1);
        if (k >= c->keys)
            return 1;
    } else {
        k = rng_next(&s->rng) % c->keys;
    }
    char key[32];
    snprintf(key, sizeof(key), "key:%012llu", (unsigned long long)k);
    s->t_sent = fx_bench_now_ns();
    uint64_t start = atomic_load(&R->start_ns);
    s->measured = start != 0 && s->t_sent >= start && atomic_load(&R->stop_ns) == 0;
    if (R->op == FX_BENCH_CACHE_GET)
        return fx_cache_get_async(s->conn->cl, c->ns, R->cache, key, on_answer, s);
    return fx_cache_put_async(s->conn->cl, c->ns, R->cache, key, R->value, c->payload, 0,
                              on_answer, s);
}

/* Counts a failed or refused request of |cn| (mu held). */
static void count_error(cconn *cn, int rv)
{
    if (cn->errors++ == 0) {
        cn->first_err = rv;
        fx_client_last_error(NULL, cn->err_text, sizeof(cn->err_text));
    }
}

/* |s| has nothing more to send: one slot less in flight. */
static void slot_idle(crun *R)
{
    atomic_fetch_sub(&R->active, 1);
}

/* Sends |s|'s next request from an answer, or parks it when the client is
 * full (the main thread retries it), or retires it. */
static void cache_reissue(cslot *s)
{
    crun *R = s->conn->R;
    int rv = cache_issue(s);
    if (rv == 0)
        return;
    if (rv == FX_EFULL) {
        pthread_mutex_lock(&R->pend_mu);
        s->next_pending = R->pending;
        R->pending = s;
        R->full_retries++;
        pthread_mutex_unlock(&R->pend_mu);
        return;
    }
    if (rv != 1) {
        pthread_mutex_lock(&s->conn->mu);
        count_error(s->conn, rv);
        pthread_mutex_unlock(&s->conn->mu);
    }
    slot_idle(R);
}

/* Client loop: one answer. Accounts it, then sends the slot's next request. */
static void on_answer(void *user, int rv, const void *value, size_t len)
{
    (void)value;
    cslot *s = user;
    cconn *cn = s->conn;
    crun *R = cn->R;
    uint64_t now = fx_bench_now_ns();
    pthread_mutex_lock(&cn->mu);
    cn->done++;
    if (rv == FX_ENOTFOUND && R->op == FX_BENCH_CACHE_GET) {
        cn->misses++;
    } else if (rv != 0) {
        count_error(cn, rv);
    } else if (R->op == FX_BENCH_CACHE_GET && len != R->cfg->payload) {
        cn->bad_len++;
    } else {
        uint64_t start = atomic_load(&R->start_ns), stop = atomic_load(&R->stop_ns);
        if (start != 0 && now >= start && (stop == 0 || now <= stop))
            cn->in_window++;
        if (s->measured && cn->nlat < cn->lat_cap)
            cn->lat[cn->nlat++] = now - s->t_sent;
        else if (s->measured)
            cn->lat_unkept++;
    }
    pthread_mutex_unlock(&cn->mu);
    atomic_fetch_add(&R->total_done, 1);
    cache_reissue(s);
}

/* Main thread: sends the parked slots' requests again. */
static void retry_pending(crun *R)
{
    pthread_mutex_lock(&R->pend_mu);
    cslot *s = R->pending;
    R->pending = NULL;
    pthread_mutex_unlock(&R->pend_mu);
    while (s != NULL) {
        cslot *next = s->next_pending;
        cache_reissue(s);
        s = next;
    }
}

/* Main thread: sleeps |ns| while retrying parked slots every millisecond;
 * returns early once |until| (if not NULL) says so. */
static void tick_until(crun *R, uint64_t deadline, bool (*until)(crun *))
{
    while (fx_bench_now_ns() < deadline && (until == NULL || !until(R))) {
        retry_pending(R);
        usleep(1000);
    }
    retry_pending(R);
}

static bool all_idle(crun *R)
{
    return atomic_load(&R->active) == 0;
}

static bool warm_enough(crun *R)
{
    return atomic_load(&R->total_done) >= R->cfg->warmup || atomic_load(&R->active) == 0;
}

static int cache_set_err(fx_bench_result *r, int rv, const char *what)
{
    char detail[160];
    fx_client_last_error(NULL, detail, sizeof(detail));
    snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s%s%s", what, fx_strerror(rv),
             detail[0] ? ": " : "", detail);
    r->error = rv;
    return rv;
}

/* Opens the connections; each may hold every request of its clients in
 * flight (cache_inflight), so a reissue from a callback is never FX_EFULL
 * but when the library holds a slot past its callback. */
static int cache_connect(crun *R, fx_bench_result *r)
{
    const fx_bench_cfg *c = R->cfg;
    uint32_t per_conn = (c->clients + R->nconns - 1) / R->nconns * c->pipeline;
    for (uint32_t i = 0; i < R->nconns; i++) {
        cconn *cn = &R->conns[i];
        fx_client_opts o;
        fx_bench_client_opts(c, &o, false);
        if (o.cache_inflight < per_conn + 64)
            o.cache_inflight = per_conn + 64;
        int rv = fx_client_connect(&cn->cl, &o);
        if (rv != 0) {
            char what[128];
            snprintf(what, sizeof(what), "cannot connect to the broker at %s", c->server);
            return cache_set_err(r, rv, what);
        }
    }
    return 0;
}

static void conns_reset(crun *R)
{
    for (uint32_t i = 0; i < R->nconns; i++) {
        cconn *cn = &R->conns[i];
        pthread_mutex_lock(&cn->mu);
        cn->nlat = cn->lat_unkept = cn->in_window = cn->done = 0;
        cn->errors = cn->misses = cn->bad_len = 0;
        cn->first_err = 0;
        cn->err_text[0] = '\0';
        pthread_mutex_unlock(&cn->mu);
    }
    atomic_store(&R->total_done, 0);
    atomic_store(&R->start_ns, 0);
    atomic_store(&R->stop_ns, 0);
    atomic_store(&R->stop, false);
    pthread_mutex_lock(&R->pend_mu);
    R->full_retries = 0;
    pthread_mutex_unlock(&R->pend_mu);
}

/* Starts every slot's first request. Returns 0 or the first error. */
static int start_slots(crun *R, fx_bench_result *r)
{
    for (uint32_t i = 0; i < R->nslots; i++) {
        cslot *s = &R->slots[i];
        atomic_fetch_add(&R->active, 1);
        int rv = cache_issue(s);
        if (rv == 1) {
            slot_idle(R);
            continue;
        }
        if (rv == FX_EFULL) { /* off the loop it waits; keep the slot for the retries */
            pthread_mutex_lock(&R->pend_mu);
            s->next_pending = R->pending;
            R->pending = s;
            R->full_retries++;
            pthread_mutex_unlock(&R->pend_mu);
            continue;
        }
        if (rv != 0) {
            slot_idle(R);
            atomic_store(&R->stop, true);
            return cache_set_err(r, rv, R->op == FX_BENCH_CACHE_GET ? "cache get" : "cache put");
        }
    }
    return 0;
}

/* Stops sending and waits for the requests in flight. Returns true when
 * every one was answered. */
static bool cache_drain(crun *R)
{
    atomic_store(&R->stop, true);
    tick_until(R, fx_bench_now_ns() + CACHE_DRAIN_NS, all_idle);
    return all_idle(R);
}

/* Puts the K keys once (the fill op, or a get run's preparation) with
 * every slot. Returns 0 or the setup error; |fill_s| the time it took. */
static int cache_fill(crun *R, fx_bench_result *r, double *fill_s)
{
    R->op = FX_BENCH_CACHE_FILL;
    atomic_store(&R->next_key, 0);
    conns_reset(R);
    uint64_t t0 = fx_bench_now_ns();
    int rv = start_slots(R, r);
    /* no stop flag: the slots retire when the keys run out */
    uint64_t hard = t0 + (uint64_t)(R->cfg->max_seconds * 1e9);
    tick_until(R, hard, all_idle);
    bool whole = all_idle(R) || cache_drain(R);
    *fill_s = (double)(fx_bench_now_ns() - t0) / 1e9;
    uint64_t errors = 0, done = 0;
    int first = 0;
    const char *text = "";
    for (uint32_t i = 0; i < R->nconns; i++) {
        if (R->conns[i].errors && !first)
            first = R->conns[i].first_err, text = R->conns[i].err_text;
        errors += R->conns[i].errors;
        done += R->conns[i].done - R->conns[i].errors;
    }
    if (rv != 0)
        return rv;
    if (errors > 0 || !whole || done < R->cfg->keys) {
        snprintf(r->why, sizeof(r->why),
                 "fill: %llu of %llu keys put in %.1f s, %llu failed (first: %.30s: %.80s)",
                 (unsigned long long)done, (unsigned long long)R->cfg->keys, *fill_s,
                 (unsigned long long)errors, first ? fx_strerror(first) : "none", text);
        return 1; /* the run took place but is not valid */
    }
    return 0;
}

/* Waits for the warm-up, then measures min_seconds (within max_seconds). */
static void cache_measure(crun *R)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t t0 = fx_bench_now_ns(), hard = t0 + (uint64_t)(c->max_seconds * 1e9);
    tick_until(R, hard, warm_enough);
    uint64_t start = fx_bench_now_ns();
    atomic_store(&R->start_ns, start);
    uint64_t stop = start + (uint64_t)(c->min_seconds * 1e9);
    if (stop > hard)
        stop = hard > start ? hard : start + 1;
    tick_until(R, stop, all_idle);
    atomic_store(&R->stop_ns, fx_bench_now_ns());
}

static void cache_collect(crun *R, fx_bench_result *r, bool drained)
{
    size_t n = 0;
    uint64_t in_window = 0, errors = 0, misses = 0, bad_len = 0, unkept = 0, done = 0;
    for (uint32_t i = 0; i < R->nconns; i++) {
        cconn *cn = &R->conns[i];
        pthread_mutex_lock(&cn->mu);
        n += cn->nlat;
        unkept += cn->lat_unkept;
        in_window += cn->in_window;
        errors += cn->errors;
        misses += cn->misses;
        bad_len += cn->bad_len;
        done += cn->done;
        pthread_mutex_unlock(&cn->mu);
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof(*all));
    size_t k = 0;
    for (uint32_t i = 0; all != NULL && i < R->nconns; i++) {
        memcpy(all + k, R->conns[i].lat, R->conns[i].nlat * sizeof(*all));
        k += R->conns[i].nlat;
    }
    if (all != NULL)
        fx_bench_lat_summarize(all, n, unkept, &r->lat);
    free(all);
    r->window_s = (double)(atomic_load(&R->stop_ns) - atomic_load(&R->start_ns)) / 1e9;
    r->msgs_per_s = r->window_s > 0 ? (double)in_window / r->window_s : NAN;
    r->cache_ops = in_window;
    r->cache_misses = misses;
    r->cache_bad_len = bad_len;
    r->t.errors = errors;
    r->t.sent_measured = n + unkept;
    r->cache_full_retries = R->full_retries;
    r->valid = all != NULL && errors == 0 && misses == 0 && bad_len == 0 && in_window > 0 &&
               n > 0 && drained;
    for (uint32_t i = 0; i < R->nconns && errors > 0; i++)
        if (R->conns[i].errors > 0) {
            snprintf(r->why, sizeof(r->why), "%llu requests failed (first: %.30s: %.90s)",
                     (unsigned long long)errors, fx_strerror(R->conns[i].first_err),
                     R->conns[i].err_text);
            return;
        }
    if (all == NULL)
        snprintf(r->why, sizeof(r->why), "out of memory for the latency samples");
    else if (misses > 0 || bad_len > 0)
        snprintf(r->why, sizeof(r->why),
                 "%llu gets missed and %llu answered a value of another length (a filled "
                 "key was evicted or expired?)",
                 (unsigned long long)misses, (unsigned long long)bad_len);
    else if (!drained)
        snprintf(r->why, sizeof(r->why), "requests still unanswered %.0f s after the end",
                 CACHE_DRAIN_NS / 1e9);
    else if (!r->valid)
        snprintf(r->why, sizeof(r->why), "no request completed in the measured window (%llu "
                 "answered in all)", (unsigned long long)done);
}

static int crun_init(crun *R, const fx_bench_cfg *c)
{
    static atomic_uint fills; /* a fill run's cache is its own: RSS growth of new keys */
    *R = (crun){.cfg = c, .op = c->cache_op};
    atomic_init(&R->next_key, 0);
    atomic_init(&R->total_done, 0);
    atomic_init(&R->start_ns, 0);
    atomic_init(&R->stop_ns, 0);
    atomic_init(&R->stop, false);
    atomic_init(&R->active, 0);
    pthread_mutex_init(&R->pend_mu, NULL);
    if (c->cache_op == FX_BENCH_CACHE_FILL)
        snprintf(R->cache, sizeof(R->cache), "fill-%ld-%u", (long)getpid(),
                 atomic_fetch_add(&fills, 1));
    else
        snprintf(R->cache, sizeof(R->cache), "bench");
    R->nconns = c->connections;
    R->nslots = c->clients * c->pipeline;
    R->conns = calloc(R->nconns, sizeof(*R->conns));
    R->slots = calloc(R->nslots, sizeof(*R->slots));
    R->value = malloc(c->payload);
    if (R->conns == NULL || R->slots == NULL || R->value == NULL)
        return -ENOMEM;
    memset(R->value, 'x', c->payload); /* redis-benchmark's value bytes */
    size_t cap = CACHE_LAT_TOTAL / R->nconns;
    for (uint32_t i = 0; i < R->nconns; i++) {
        cconn *cn = &R->conns[i];
        cn->R = R;
        pthread_mutex_init(&cn->mu, NULL);
        cn->lat_cap = cap;
        if ((cn->lat = malloc(cap * sizeof(*cn->lat))) == NULL)
            return -ENOMEM;
    }
    for (uint32_t i = 0; i < R->nslots; i++) /* client i / P; its connection i mod N */
        R->slots[i] = (cslot){.conn = &R->conns[(i / c->pipeline) % R->nconns],
                              .rng = 0x9E3779B97F4A7C15ull * (i + 1)};
    return 0;
}

static void crun_free(crun *R)
{
    for (uint32_t i = 0; R->conns != NULL && i < R->nconns; i++) {
        if (R->conns[i].R == NULL)
            continue;
        free(R->conns[i].lat);
        pthread_mutex_destroy(&R->conns[i].mu);
    }
    free(R->conns);
    free(R->slots);
    free(R->value);
    pthread_mutex_destroy(&R->pend_mu);
}

static double cache_tv_s(struct timeval t)
{
    return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

typedef struct cprobe {
    struct rusage ru;
    double host_busy, host_total, srv_user, srv_sys;
    uint64_t t;
} cprobe;

static void cprobe_take(const fx_bench_cfg *c, cprobe *p)
{
    getrusage(RUSAGE_SELF, &p->ru);
    fx_bench_host_cpu(&p->host_busy, &p->host_total);
    if (c->broker_pid > 0)
        fx_bench_proc_cpu(c->broker_pid, &p->srv_user, &p->srv_sys);
    p->t = fx_bench_now_ns();
}

static void cprobe_diff(const fx_bench_cfg *c, const cprobe *a, const cprobe *b,
                        fx_bench_result *r)
{
    r->run_s = (double)(b->t - a->t) / 1e9;
    r->client_user_s = cache_tv_s(b->ru.ru_utime) - cache_tv_s(a->ru.ru_utime);
    r->client_sys_s = cache_tv_s(b->ru.ru_stime) - cache_tv_s(a->ru.ru_stime);
    r->host_busy_s = b->host_busy - a->host_busy;
    r->have_server = c->broker_pid > 0;
    r->server_user_s = b->srv_user - a->srv_user;
    r->server_sys_s = b->srv_sys - a->srv_sys;
    r->client_vcsw_per_msg = NAN;
    r->server_vcsw_per_msg = NAN;
}

/* The fill op: K distinct keys, the broker's VmRSS before and after. */
static int fill_run(crun *R, fx_bench_result *r)
{
    const fx_bench_cfg *c = R->cfg;
    uint64_t hwm;
    int rv = fx_bench_proc_rss(c->broker_pid, &r->rss_idle_kb, &hwm);
    if (rv != 0)
        return cache_set_err(r, rv, "cannot read the broker's VmRSS (--broker-pid)");
    double fill_s = 0;
    rv = cache_fill(R, r, &fill_s);
    if (rv < 0)
        return rv;
    r->fill_s = fill_s;
    r->msgs_per_s = fill_s > 0 ? (double)c->keys / fill_s : NAN;
    r->window_s = fill_s;
    if ((rv = fx_bench_proc_rss(c->broker_pid, &r->rss_subs_kb, &r->hwm_kb)) != 0)
        return cache_set_err(r, rv, "cannot read the broker's VmRSS (--broker-pid)");
    r->peak_rss_kb = r->hwm_kb;
    r->rss_per_entry_bytes =
        ((double)r->rss_subs_kb - (double)r->rss_idle_kb) * 1024.0 / (double)c->keys;
    r->cache_entries = UINT64_MAX;
    if (c->admin != NULL && fx_bench_scrape_value(c->admin, "felix_cache_entries",
                                                  &r->cache_entries) != 0)
        r->cache_entries = UINT64_MAX;
    r->cache_ops = c->keys;
    r->cache_full_retries = R->full_retries;
    r->valid = rv == 0 && r->why[0] == '\0';
    /* Keys evicted during the fill make the growth per entry meaningless. */
    if (r->valid && r->cache_entries != UINT64_MAX && r->cache_entries < c->keys) {
        r->valid = false;
        snprintf(r->why, sizeof(r->why),
                 "the broker holds %llu cache entries after %llu puts: raise cache_max_bytes "
                 "(each worker's share must hold them)",
                 (unsigned long long)r->cache_entries, (unsigned long long)c->keys);
    }
    return 0;
}

int fx_bench_cache_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    r->lat = (fx_bench_lat){.p50_us = NAN, .p90_us = NAN, .p99_us = NAN, .p999_us = NAN,
                            .max_us = NAN, .mean_us = NAN};
    r->rss_per_entry_bytes = NAN;
    r->fill_s = NAN;
    crun R;
    int rv = crun_init(&R, c);
    if (rv != 0) {
        cache_set_err(r, rv, "out of memory");
        crun_free(&R);
        return rv;
    }
    cprobe a, b;
    cprobe_take(c, &a);
    rv = cache_connect(&R, r);
    if (rv == 0 && c->cache_op == FX_BENCH_CACHE_FILL) {
        rv = fill_run(&R, r);
    } else if (rv == 0) {
        double fill_s = 0;
        if (c->cache_op == FX_BENCH_CACHE_GET) /* the keys the gets read */
            rv = cache_fill(&R, r, &fill_s);
        r->fill_s = c->cache_op == FX_BENCH_CACHE_GET ? fill_s : NAN;
        if (rv == 0) {
            R.op = c->cache_op;
            conns_reset(&R);
            fx_bench_rss_sampler rss = {0};
            if (c->broker_pid > 0 && fx_bench_rss_start(&rss, c->broker_pid, 200) != 0)
                fprintf(stderr, "felix-bench: cannot start the RSS sampler; no peak_rss_kb\n");
            cprobe_take(c, &a);
            rv = start_slots(&R, r);
            if (rv == 0)
                cache_measure(&R);
            bool drained = cache_drain(&R);
            cprobe_take(c, &b);
            r->peak_rss_kb = fx_bench_rss_stop(&rss);
            uint64_t rss_now;
            if (c->broker_pid > 0)
                fx_bench_proc_rss(c->broker_pid, &rss_now, &r->hwm_kb);
            if (rv == 0)
                cache_collect(&R, r, drained);
            cprobe_diff(c, &a, &b, r);
        } else if (rv == 1) {
            rv = 0; /* the fill failed: an invalid run, its reason in r->why */
            r->valid = false;
        }
    }
    for (uint32_t i = 0; i < R.nconns; i++)
        if (R.conns[i].cl != NULL && fx_client_close(R.conns[i].cl, 5000) != 0 && rv == 0 &&
            r->valid) {
            r->valid = false;
            snprintf(r->why, sizeof(r->why), "close cut short");
        }
    if (c->cache_op == FX_BENCH_CACHE_FILL) {
        cprobe_take(c, &b);
        cprobe_diff(c, &a, &b, r);
    }
    r->connections = R.nconns;
    crun_free(&R);
    return rv;
}

void fx_bench_cache_json(const fx_bench_cfg *c, const fx_bench_result *r,
                         void (*jnum)(const char *, double, int))
{
    printf("\"op\":\"%s\",\"clients\":%u,\"pipeline\":%u,\"connections\":%u,\"keys\":%llu,"
           "\"ops\":%llu,\"misses\":%llu,\"bad_len\":%llu,\"full_retries\":%llu,",
           fx_bench_cache_op_name(c->cache_op), c->clients, c->pipeline, c->connections,
           (unsigned long long)c->keys, (unsigned long long)r->cache_ops,
           (unsigned long long)r->cache_misses, (unsigned long long)r->cache_bad_len,
           (unsigned long long)r->cache_full_retries);
    jnum("window_s", r->window_s, 4);
    jnum("ops_per_s", r->msgs_per_s, 0);
    jnum("fill_s", r->fill_s, 3);
    if (c->cache_op == FX_BENCH_CACHE_FILL) {
        printf("\"rss_before_kb\":%llu,\"rss_after_kb\":%llu,",
               (unsigned long long)r->rss_idle_kb, (unsigned long long)r->rss_subs_kb);
        if (r->cache_entries == UINT64_MAX)
            printf("\"cache_entries\":null,");
        else
            printf("\"cache_entries\":%llu,", (unsigned long long)r->cache_entries);
        jnum("rss_per_entry_bytes", r->rss_per_entry_bytes, 1);
    }
}

int fx_bench_cache_format(char *buf, size_t cap, const fx_bench_cfg *c, const fx_bench_result *r)
{
    if (c->cache_op == FX_BENCH_CACHE_FILL)
        return snprintf(buf, cap,
                        "cache fill  %llu keys of %zu bytes over %u connections in %.2f s "
                        "(%.0f puts/s): broker RSS %.1f -> %.1f MB: %.0f bytes per entry%s%s",
                        (unsigned long long)c->keys, c->payload, c->connections, r->fill_s,
                        r->msgs_per_s, (double)r->rss_idle_kb / 1024.0,
                        (double)r->rss_subs_kb / 1024.0, r->rss_per_entry_bytes,
                        r->valid ? "" : "  INVALID: ", r->valid ? "" : r->why);
    if (!r->valid)
        return snprintf(buf, cap, "cache %s INVALID (%s)", fx_bench_cache_op_name(c->cache_op),
                        r->why);
    return snprintf(buf, cap,
                    "cache %s  %u clients x %u in flight over %u connections, %llu keys: %.0f "
                    "ops/s  p50 %.1f  p99 %.1f  p999 %.1f us",
                    fx_bench_cache_op_name(c->cache_op), c->clients, c->pipeline,
                    c->connections, (unsigned long long)c->keys, r->msgs_per_s, r->lat.p50_us,
                    r->lat.p99_us, r->lat.p999_us);
}
