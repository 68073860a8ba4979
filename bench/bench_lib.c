/* felix-bench's pure logic (see bench_lib.h): stamping, accounting,
 * percentiles, credit window, run-length guard, verdict. No I/O, no
 * libfelix; each function runs on its caller's thread. */
#include "bench_lib.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fx_bench_stamp(uint8_t *p, uint64_t seq, uint64_t t_ns)
{
    memcpy(p, &seq, 8);
    memcpy(p + 8, &t_ns, 8);
}

uint32_t fx_bench_stream_of(uint64_t seq, uint32_t batch, uint32_t nstreams)
{
    if (nstreams <= 1)
        return 0;
    return (uint32_t)((seq / (batch ? batch : 1)) % nstreams);
}

uint64_t fx_bench_stream_count(uint64_t total, uint32_t batch, uint32_t nstreams, uint32_t s)
{
    if (nstreams <= 1)
        return total;
    uint64_t b = batch ? batch : 1;
    uint64_t round = b * nstreams; /* one batch per stream */
    uint64_t full = total / round;
    uint64_t rest = total % round; /* the partial round starts at stream 0 */
    uint64_t start = (uint64_t)s * b;
    uint64_t extra = rest > start ? (rest - start < b ? rest - start : b) : 0;
    return full * b + extra;
}

/* ---- accounting --------------------------------------------------------------- */

void fx_bench_acct_init(fx_bench_acct *a, uint32_t stream, uint32_t nstreams, uint32_t batch,
                        uint64_t warmup, uint64_t *lat, size_t latcap)
{
    memset(a, 0, sizeof(*a));
    a->stream = stream;
    a->nstreams = nstreams ? nstreams : 1;
    a->batch = batch ? batch : 1;
    a->warmup = warmup;
    a->lat = lat;
    a->latcap = lat ? latcap : 0;
    /* The first sequence of this stream is the first of its first batch. */
    a->expected = (uint64_t)a->stream * a->batch;
    atomic_init(&a->progress, 0);
}

/* The sequence after |seq| on the same stream: batches of |batch| go
 * round-robin over the streams. */
static uint64_t next_on_stream(const fx_bench_acct *a, uint64_t seq)
{
    uint64_t n = seq + 1;
    if (a->nstreams > 1 && n % a->batch == 0)
        n += (uint64_t)(a->nstreams - 1) * a->batch;
    return n;
}

/* Messages of this stream strictly between sequences |from| (included) and
 * |to| (excluded). */
static uint64_t stream_span(const fx_bench_acct *a, uint64_t from, uint64_t to)
{
    uint64_t hi = fx_bench_stream_count(to, a->batch, a->nstreams, a->stream);
    uint64_t lo = fx_bench_stream_count(from, a->batch, a->nstreams, a->stream);
    return hi > lo ? hi - lo : 0;
}

static void accept_measured(fx_bench_acct *a, uint64_t ts, uint64_t now_ns)
{
    a->recv_meas++;
    if (a->first_meas_ns == 0)
        a->first_meas_ns = now_ns;
    a->last_meas_ns = now_ns;
    if (a->nlat < a->latcap)
        a->lat[a->nlat++] = now_ns > ts ? now_ns - ts : 0;
    else if (a->latcap != 0)
        a->lat_unkept++;
}

uint64_t fx_bench_acct_on_msg(fx_bench_acct *a, const uint8_t *data, size_t len, uint64_t now_ns)
{
    a->seen++;
    if (a->drop_every != 0 && a->seen % a->drop_every == 0)
        return UINT64_MAX; /* test-only loss: as if the message never arrived */
    if (len < FX_BENCH_HDR) {
        a->bad++;
        return UINT64_MAX;
    }
    uint64_t seq, ts;
    memcpy(&seq, data, 8);
    memcpy(&ts, data + 8, 8);
    if (fx_bench_stream_of(seq, a->batch, a->nstreams) != a->stream) {
        a->bad++;
        return seq;
    }
    if (seq < a->expected) {
        a->dups++;
        return seq;
    }
    a->gaps += stream_span(a, a->expected, seq);
    a->expected = next_on_stream(a, seq);
    a->in_order++;
    if (seq >= a->warmup)
        accept_measured(a, ts, now_ns);
    atomic_store_explicit(&a->progress, a->in_order + a->gaps, memory_order_release);
    return seq;
}

/* ---- percentiles -------------------------------------------------------------- */

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double fx_bench_pct_us(const uint64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return NAN;
    size_t k = (size_t)ceil(p * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)sorted[k - 1] / 1000.0;
}

void fx_bench_lat_summarize(uint64_t *v, size_t n, uint64_t unkept, fx_bench_lat *out)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)v[i];
    *out = (fx_bench_lat){
        .n = n,
        .p50_us = fx_bench_pct_us(v, n, 0.50),
        .p90_us = fx_bench_pct_us(v, n, 0.90),
        .p99_us = fx_bench_pct_us(v, n, 0.99),
        .p999_us = fx_bench_pct_us(v, n, 0.999),
        .max_us = n ? (double)v[n - 1] / 1000.0 : NAN,
        .mean_us = n ? sum / (double)n / 1000.0 : NAN,
        .unkept = unkept,
    };
}

int fx_bench_format_samples(char *buf, size_t cap, const fx_bench_lat *l)
{
    if (l->unkept == 0)
        return snprintf(buf, cap, " (%zu samples)", l->n);
    return snprintf(buf, cap, " (%zu samples, %" PRIu64 " not kept: buffer full)", l->n,
                    l->unkept);
}

double fx_bench_median(double *v, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            v[m++] = v[i];
    if (m == 0)
        return NAN;
    qsort(v, m, sizeof(*v), cmp_double);
    return m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2.0;
}

/* ---- credit window and guard -------------------------------------------------- */

uint64_t fx_bench_credit_window(size_t payload)
{
    if (payload == 0)
        payload = 1;
    uint64_t w = FX_BENCH_WINDOW_MAX_BYTES / payload;
    if (w > FX_BENCH_WINDOW_MAX_MSGS)
        w = FX_BENCH_WINDOW_MAX_MSGS;
    return w ? w : 1;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t fx_bench_bufferable(const fx_bench_buffers *b, size_t payload, uint32_t batch,
                             uint32_t fanout)
{
    uint64_t env = sat_mul(payload, batch ? batch : 1); /* one publish batch */
    uint64_t frame = env > b->batch_bytes_max ? env : b->batch_bytes_max;
    /* Stages every delivery passes once, shared by all subscribers. */
    uint64_t shared = sat_add(b->client_publish_budget, b->broker_ingress_bytes);
    shared = sat_add(shared, sat_mul(b->broker_worker_queue, env));
    /* Stages each subscriber has of its own. */
    uint64_t own = sat_mul(sat_add(b->sub_queue_batches, b->lane_queue_batches), env);
    own = sat_add(own, sat_add(b->sub_unacked_bytes, b->sub_recv_window));
    own = sat_add(own, sat_mul(b->client_sub_queue_batches, frame));
    uint64_t per_sub = sat_add(shared, own);
    uint64_t window = sat_mul(fx_bench_credit_window(payload), payload);
    if (per_sub > window)
        per_sub = window;
    return sat_mul(per_sub, fanout ? fanout : 1);
}

uint64_t fx_bench_guard_min_total(uint64_t bufferable, size_t payload, uint32_t fanout)
{
    uint64_t need = sat_mul(bufferable, FX_BENCH_GUARD_FACTOR);
    uint64_t per_msg = sat_mul(payload ? payload : 1, fanout ? fanout : 1);
    return need / per_msg + (need % per_msg != 0);
}

bool fx_bench_guard_ok(uint64_t total, double min_seconds, uint64_t bufferable, size_t payload,
                       uint32_t fanout, char *why, size_t cap)
{
    uint64_t need = fx_bench_guard_min_total(bufferable, payload, fanout);
    if (min_seconds < FX_BENCH_GUARD_MIN_SECONDS) {
        snprintf(why, cap, "run too short: %.1f s measured is under the %.0f s minimum",
                 min_seconds, FX_BENCH_GUARD_MIN_SECONDS);
        return false;
    }
    if (total < need) {
        snprintf(why, cap,
                 "run too short: %" PRIu64 " messages deliver %.1f MiB, under %u x the %.1f MiB "
                 "that can be buffered (need >= %" PRIu64 " messages)",
                 total, (double)sat_mul(sat_mul(total, payload), fanout) / 1048576.0,
                 FX_BENCH_GUARD_FACTOR, (double)bufferable / 1048576.0, need);
        return false;
    }
    if (why && cap)
        why[0] = '\0';
    return true;
}

/* ---- verdict ------------------------------------------------------------------ */

void fx_bench_totals_add(fx_bench_totals *t, const fx_bench_acct *r)
{
    t->delivered += r->recv_meas;
    t->dups += r->dups;
    t->bad += r->bad;
    t->gaps += r->gaps;
}

void fx_bench_totals_finish(fx_bench_totals *t)
{
    uint64_t missing = t->expected > t->delivered ? t->expected - t->delivered : 0;
    t->lost = missing > t->gaps ? missing : t->gaps;
}

bool fx_bench_verdict(const fx_bench_totals *t, char *why, size_t cap)
{
    if (t->lost)
        snprintf(why, cap, "lost %" PRIu64 " of %" PRIu64 " deliveries", t->lost, t->expected);
    else if (t->dups)
        snprintf(why, cap, "%" PRIu64 " duplicated deliveries", t->dups);
    else if (t->bad)
        snprintf(why, cap, "%" PRIu64 " malformed deliveries", t->bad);
    else if (t->timed_out)
        snprintf(why, cap, "timed out");
    else if (t->errors)
        snprintf(why, cap, "%" PRIu64 " errors", t->errors);
    else if (t->guard_failed)
        snprintf(why, cap, "shorter than the run-length guard");
    else if (t->sent_measured == 0)
        snprintf(why, cap, "nothing measured");
    else {
        if (why && cap)
            why[0] = '\0';
        return true;
    }
    return false;
}

int fx_bench_format_tput(char *buf, size_t cap, const fx_bench_tput *r)
{
    if (!r->valid)
        return snprintf(buf, cap, "INVALID (%s): lost %" PRIu64 ", duplicated %" PRIu64, r->why,
                        r->lost, r->dups);
    return snprintf(buf, cap,
                    "%10.0f msg/s %8.1f MB/s  per-sub %10.0f msg/s  submit %10.0f msg/s  "
                    "window %.2f s  lost 0, duplicated 0",
                    r->msgs_per_s, r->mb_per_s, r->per_sub_msgs_per_s, r->pub_msgs_per_s,
                    r->window_s);
}

/* ---- loss accounting ------------------------------------------------------------ */

uint64_t fx_bench_loss_missed(const fx_bench_loss *l)
{
    return l->expected > l->received ? l->expected - l->received : 0;
}

uint64_t fx_bench_loss_counted(const fx_bench_loss *l)
{
    return l->client_dropped + l->queue_dropped + l->lane_dropped + l->upstream;
}

/* ---- consumer groups ------------------------------------------------------------ */

static const char *const GCELL_NAMES[] = {"backlog", "live", "redelivery"};

int fx_bench_gcell_parse(const char *s, fx_bench_gcell *out)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, GCELL_NAMES[i]) == 0) {
            *out = (fx_bench_gcell)i;
            return 0;
        }
    return -1;
}

const char *fx_bench_gcell_name(fx_bench_gcell c)
{
    return (unsigned)c < 3 ? GCELL_NAMES[c] : "?";
}

int fx_bench_gtrack_init(fx_bench_gtrack *t, uint64_t cap)
{
    memset(t, 0, sizeof(*t));
    t->cap = cap;
    t->deliv = calloc(cap ? cap : 1, sizeof(*t->deliv));
    t->ackd = calloc(cap ? cap : 1, sizeof(*t->ackd));
    atomic_init(&t->acked_distinct, 0);
    if (t->deliv == NULL || t->ackd == NULL) {
        fx_bench_gtrack_deinit(t);
        return -ENOMEM;
    }
    return 0;
}

void fx_bench_gtrack_deinit(fx_bench_gtrack *t)
{
    free(t->deliv);
    free(t->ackd);
    t->deliv = t->ackd = NULL;
}

uint64_t fx_bench_gtrack_deliver(fx_bench_gtrack *t, const uint8_t *data, size_t len, uint8_t *prev)
{
    uint64_t seq;
    if (len < FX_BENCH_HDR)
        return UINT64_MAX;
    memcpy(&seq, data, sizeof(seq));
    if (seq >= t->cap)
        return UINT64_MAX;
    uint8_t p = atomic_fetch_add_explicit(&t->deliv[seq], 1, memory_order_relaxed);
    if (p >= 250) /* saturate: a count never wraps to look like one delivery */
        atomic_store_explicit(&t->deliv[seq], 250, memory_order_relaxed);
    *prev = p;
    return seq;
}

uint64_t fx_bench_gtrack_ack(fx_bench_gtrack *t, uint64_t seq)
{
    if (seq >= t->cap || atomic_exchange(&t->ackd[seq], 1))
        return 0;
    return atomic_fetch_add(&t->acked_distinct, 1) + 1;
}

void fx_bench_gtrack_tally(const fx_bench_gtrack *t, uint64_t expect, unsigned once,
                           const uint64_t *again, fx_bench_gcount *k)
{
    k->expected = expect;
    k->distinct = k->dups = k->extra = k->missing = k->acked = 0;
    for (uint64_t s = 0; s < expect; s++) {
        unsigned d = s < t->cap ? atomic_load_explicit(&t->deliv[s], memory_order_relaxed) : 0;
        k->distinct += d > 0;
        if (d > once) {
            k->dups++;
            k->extra += d - once;
        }
        k->missing += again != NULL ? (s >= t->cap || again[s] == 0) : d == 0;
        k->acked += s < t->cap && atomic_load_explicit(&t->ackd[s], memory_order_relaxed);
    }
}

bool fx_bench_group_verdict(const fx_bench_gcount *k, char *why, size_t cap)
{
    why[0] = '\0';
    if (k->missing || k->dups || k->acked < k->expected || k->skipped || k->bad)
        snprintf(why, cap,
                 "%" PRIu64 " missing, %" PRIu64 " duplicated (%" PRIu64 " extra deliveries), "
                 "%" PRIu64 " of %" PRIu64 " acked, %" PRIu64 " skipped, %" PRIu64 " bad",
                 k->missing, k->dups, k->extra, k->acked, k->expected, k->skipped, k->bad);
    else if (k->errors || k->ack_errors || k->pub_errors)
        snprintf(why, cap, "%" PRIu64 " errors, %" PRIu64 " ack errors, %" PRIu64 " publish errors",
                 k->errors, k->ack_errors, k->pub_errors);
    else if (k->hit_deadline)
        snprintf(why, cap, "hit --max-seconds before the last ack");
    return why[0] == '\0';
}

double fx_bench_pct_i64_ms(const int64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return NAN;
    size_t k = (size_t)ceil(p * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)sorted[k - 1] / 1e6;
}
