/* felix-bench's acked publishing measurement (throughput mode with --ack):
 * N publisher threads share one client, as the threads of a web service
 * do; each publishes acked (FX_ACK_PER_MESSAGE) messages one at a time
 * with fx_publish (--window 0), or keeps up to W in flight with
 * fx_publish_async (--window W). No subscribers: it reports acked msg/s
 * (answers that arrived in the measured window over its length) and the
 * ack latency (publish call to answer) of the messages sent in it. Main
 * thread starts and joins the publishers; callbacks run on the client's
 * loop. */
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

#define ACKED_LAT_CAP (1u << 20) /* samples kept per publisher */

typedef struct acked_run acked_run;

/* One message in flight of an async publisher. */
typedef struct aslot {
    struct apub *p;
    uint64_t t_sent;
    bool measured;
} aslot;

typedef struct apub {
    acked_run *A;
    int index;
    pthread_t th;
    bool started;
    const char *stream;
    bool warm_done;     /* counted in acked_run.warm */
    pthread_mutex_t mu; /* async: the fields below, shared with the callbacks */
    pthread_cond_t cv;
    aslot *slots;
    uint32_t *free_slots, nfree;
    uint64_t *lat;
    size_t nlat;
    uint64_t lat_unkept; /* measured answers past ACKED_LAT_CAP: no sample kept */
    uint64_t in_window; /* answers that arrived inside the measured window */
    uint64_t errors;
    int first_err;
    char err_text[160];
} apub;

struct acked_run {
    const fx_bench_cfg *cfg;
    fx_client *cl;
    apub *pubs;
    char (*names)[32];
    atomic_int warm;                    /* publishers done with their warm-up */
    _Atomic uint64_t start_ns, stop_ns; /* 0 until set by the main thread */
    atomic_bool stop;
};

/* Counts one answer of |p| (mu held for async). */
static void account(apub *p, uint64_t t_sent, bool measured, int rv)
{
    uint64_t now = fx_bench_now_ns();
    if (rv != 0) {
        if (p->errors++ == 0) {
            p->first_err = rv;
            fx_client_last_error(NULL, p->err_text, sizeof(p->err_text));
        }
        return;
    }
    uint64_t start = atomic_load(&p->A->start_ns), stop = atomic_load(&p->A->stop_ns);
    if (start != 0 && now >= start && (stop == 0 || now <= stop))
        p->in_window++;
    if (measured && p->nlat < ACKED_LAT_CAP)
        p->lat[p->nlat++] = now - t_sent;
    else if (measured)
        p->lat_unkept++;
}

static void on_acked(void *user, int rv)
{
    aslot *s = user;
    apub *p = s->p;
    pthread_mutex_lock(&p->mu);
    account(p, s->t_sent, s->measured, rv);
    p->free_slots[p->nfree++] = (uint32_t)(s - p->slots);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Counts |p| as warmed up (once): the main thread starts measuring when
 * every publisher is, or has stopped early. */
static void warm_done(apub *p)
{
    if (!p->warm_done) {
        p->warm_done = true;
        atomic_fetch_add(&p->A->warm, 1);
    }
}

/* A publisher sends its warm-up share, then measured messages until told
 * to stop. */
static bool phase_done(apub *p, uint64_t sent, uint64_t warm_n)
{
    if (sent >= warm_n)
        warm_done(p);
    return sent >= warm_n && atomic_load(&p->A->stop);
}

static void *sync_main(void *arg)
{
    apub *p = arg;
    const fx_bench_cfg *c = p->A->cfg;
    uint8_t *buf = calloc(1, c->payload);
    uint64_t warm_n = c->warmup / c->publishers, sent = 0;
    while (buf != NULL && !phase_done(p, sent, warm_n)) {
        uint64_t t = fx_bench_now_ns();
        fx_bench_stamp(buf, sent, t);
        bool measured = sent >= warm_n && atomic_load(&p->A->start_ns) != 0;
        int rv = fx_publish(p->A->cl, c->ns, p->stream, buf, c->payload, FX_ACK_PER_MESSAGE);
        account(p, t, measured, rv);
        sent++;
        if (rv != 0)
            break;
    }
    warm_done(p); /* failed early: the main thread goes on */
    free(buf);
    return NULL;
}

/* Takes a free slot, waiting while the window is full. */
static aslot *slot_take(apub *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->nfree == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    aslot *s = &p->slots[p->free_slots[--p->nfree]];
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void *async_main(void *arg)
{
    apub *p = arg;
    const fx_bench_cfg *c = p->A->cfg;
    uint8_t *buf = calloc(1, c->payload);
    uint64_t warm_n = c->warmup / c->publishers, sent = 0;
    bool failed = buf == NULL;
    while (!failed && !phase_done(p, sent, warm_n)) {
        aslot *s = slot_take(p);
        s->t_sent = fx_bench_now_ns();
        s->measured = sent >= warm_n && atomic_load(&p->A->start_ns) != 0;
        fx_bench_stamp(buf, sent, s->t_sent);
        int rv = fx_publish_async(p->A->cl, c->ns, p->stream, buf, c->payload, FX_ACK_PER_MESSAGE,
                                  on_acked, s);
        if (rv != 0) { /* no callback: give the slot back and count the error */
            pthread_mutex_lock(&p->mu);
            account(p, s->t_sent, false, rv);
            p->free_slots[p->nfree++] = (uint32_t)(s - p->slots);
            pthread_mutex_unlock(&p->mu);
            failed = true;
        }
        sent++;
    }
    warm_done(p);
    pthread_mutex_lock(&p->mu); /* every callback has run once the window is whole */
    while (p->nfree < c->window)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    free(buf);
    return NULL;
}

static int apub_init(acked_run *A, apub *p, int i)
{
    const fx_bench_cfg *c = A->cfg;
    *p = (apub){.A = A, .index = i, .stream = A->names[(uint32_t)i % c->streams]};
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->lat = malloc(ACKED_LAT_CAP * sizeof(*p->lat));
    if (p->lat == NULL)
        return -ENOMEM;
    if (c->window == 0)
        return 0;
    p->slots = calloc(c->window, sizeof(*p->slots));
    p->free_slots = calloc(c->window, sizeof(*p->free_slots));
    if (p->slots == NULL || p->free_slots == NULL)
        return -ENOMEM;
    for (uint32_t k = 0; k < c->window; k++) {
        p->slots[k].p = p;
        p->free_slots[p->nfree++] = k;
    }
    return 0;
}

static void apub_deinit(apub *p)
{
    free(p->lat);
    free(p->slots);
    free(p->free_slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

static int acked_connect(acked_run *A, fx_bench_result *r)
{
    const fx_bench_cfg *c = A->cfg;
    fx_client_opts o;
    fx_bench_client_opts(c, &o, false);
    int rv = fx_client_connect(&A->cl, &o);
    if (rv != 0) {
        char detail[160];
        fx_client_last_error(NULL, detail, sizeof(detail));
        snprintf(r->errmsg, sizeof(r->errmsg), "cannot connect to the broker at %s: %s: %s",
                 c->server, fx_strerror(rv), detail);
        r->error = rv;
    }
    return rv;
}

/* Waits for the warm-up, then measures min_seconds (within max_seconds). */
static void acked_measure(acked_run *A)
{
    const fx_bench_cfg *c = A->cfg;
    uint64_t t0 = fx_bench_now_ns(), hard = t0 + (uint64_t)(c->max_seconds * 1e9);
    while (atomic_load(&A->warm) < (int)c->publishers && fx_bench_now_ns() < hard)
        usleep(1000);
    uint64_t start = fx_bench_now_ns();
    atomic_store(&A->start_ns, start);
    uint64_t stop = start + (uint64_t)(c->min_seconds * 1e9);
    if (stop > hard)
        stop = hard > start ? hard : start + 1;
    while (fx_bench_now_ns() < stop)
        usleep(1000);
    atomic_store(&A->stop_ns, fx_bench_now_ns());
    atomic_store(&A->stop, true);
}

static void acked_collect(acked_run *A, fx_bench_result *r)
{
    const fx_bench_cfg *c = A->cfg;
    size_t n = 0;
    uint64_t in_window = 0, errors = 0, unkept = 0;
    for (uint32_t i = 0; i < c->publishers; i++) {
        n += A->pubs[i].nlat;
        unkept += A->pubs[i].lat_unkept;
        in_window += A->pubs[i].in_window;
        errors += A->pubs[i].errors;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof(*all));
    size_t k = 0;
    for (uint32_t i = 0; all != NULL && i < c->publishers; i++) {
        memcpy(all + k, A->pubs[i].lat, A->pubs[i].nlat * sizeof(*all));
        k += A->pubs[i].nlat;
    }
    if (all != NULL)
        fx_bench_lat_summarize(all, n, unkept, &r->lat);
    free(all);
    r->window_s = (double)(atomic_load(&A->stop_ns) - atomic_load(&A->start_ns)) / 1e9;
    r->msgs_per_s = r->window_s > 0 ? (double)in_window / r->window_s : NAN;
    r->acked = in_window;
    r->pub_errors = errors;
    r->t.sent_measured = n + unkept;
    r->valid = all != NULL && errors == 0 && in_window > 0 && n > 0;
    for (uint32_t i = 0; i < c->publishers && errors > 0; i++)
        if (A->pubs[i].errors > 0) {
            snprintf(r->why, sizeof(r->why), "%llu acked publishes failed (first: %.30s: %.90s)",
                     (unsigned long long)errors, fx_strerror(A->pubs[i].first_err),
                     A->pubs[i].err_text);
            break;
        }
    if (all == NULL)
        snprintf(r->why, sizeof(r->why), "out of memory for the latency samples");
    else if (errors == 0 && !r->valid)
        snprintf(r->why, sizeof(r->why), "no acked publish completed in the measured window");
}

int fx_bench_acked_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    acked_run A = {.cfg = c};
    atomic_init(&A.warm, 0);
    atomic_init(&A.start_ns, 0);
    atomic_init(&A.stop_ns, 0);
    atomic_init(&A.stop, false);
    A.pubs = calloc(c->publishers, sizeof(*A.pubs));
    A.names = calloc(c->streams, sizeof(*A.names));
    if (A.pubs == NULL || A.names == NULL) {
        free(A.pubs);
        free(A.names);
        r->error = -ENOMEM;
        snprintf(r->errmsg, sizeof(r->errmsg), "out of memory");
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < c->streams; s++)
        snprintf(A.names[s], sizeof(A.names[s]), "acked-%u", (unsigned)s);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t t0 = fx_bench_now_ns();
    int rv = acked_connect(&A, r);
    for (uint32_t i = 0; rv == 0 && i < c->publishers; i++)
        if ((rv = apub_init(&A, &A.pubs[i], (int)i)) != 0) {
            r->error = rv;
            snprintf(r->errmsg, sizeof(r->errmsg), "out of memory for publisher %u", i);
        }
    for (uint32_t i = 0; rv == 0 && i < c->publishers; i++) {
        apub *p = &A.pubs[i];
        rv = -pthread_create(&p->th, NULL, c->window == 0 ? sync_main : async_main, p);
        p->started = rv == 0;
        if (rv != 0) {
            r->error = rv;
            snprintf(r->errmsg, sizeof(r->errmsg), "cannot start publisher %u", i);
            atomic_store(&A.stop, true);
        }
    }
    if (rv == 0)
        acked_measure(&A);
    atomic_store(&A.stop, true);
    for (uint32_t i = 0; i < c->publishers; i++)
        if (A.pubs[i].started)
            pthread_join(A.pubs[i].th, NULL);
    if (rv == 0)
        acked_collect(&A, r);
    if (A.cl != NULL && fx_client_close(A.cl, 10000) != 0 && rv == 0)
        r->valid = false, snprintf(r->why, sizeof(r->why), "close cut short");
    getrusage(RUSAGE_SELF, &ru1);
    r->run_s = (double)(fx_bench_now_ns() - t0) / 1e9;
    r->client_user_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                       (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6;
    r->client_sys_s = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                      (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    for (uint32_t i = 0; i < c->publishers; i++)
        if (A.pubs[i].A != NULL)
            apub_deinit(&A.pubs[i]);
    free(A.pubs);
    free(A.names);
    return rv;
}
