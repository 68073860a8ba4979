/* Broker test hooks (see test_hooks.h). Each runs its work as a task on the
 * loop that owns the state (the endpoint loop for connections, a worker
 * loop for its streams and subscriptions); the caller's thread waits for it
 * and never reads loop-owned data itself. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/durable_int.h"
#include "broker/parked.h"
#include "broker/reply.h"
#include "broker/test_hooks.h"
#include "broker/worker.h"
#include "felix/error.h"

/* ---- running a function on a loop and waiting ---------------------------- */

typedef struct wait_call {
    void (*fn)(void *arg);
    void *arg;
} wait_call;

static void wait_call_run(size_t i, void *data)
{
    (void)i;
    wait_call *w = data;
    w->fn(w->arg);
}

/* Runs |fn(arg)| on |l| and returns once it ran: 0 (an ask without a
 * deadline cannot fail). */
static int run_and_wait(fx_loop *l, void (*fn)(void *arg), void *arg)
{
    wait_call w = {.fn = fn, .arg = arg};
    return fx_loop_ask(
        l, &(fx_loop_ask_req){.fn = wait_call_run, .data = &w, .timeout_ns = FX_LOOP_FOREVER});
}

static bool running(const fx_broker *b)
{
    return b != NULL && b->started && !b->stopped;
}

/* ---- timer faults ---------------------------------------------------------- */

int fx_broker_test_fail_timer_arms(fx_broker_test_timer which, unsigned n)
{
    static const fx_timer_cb cbs[] = {
        [FX_BROKER_TEST_TIMER_COMMIT] = fxb_reply_commit_timer_cb,
        [FX_BROKER_TEST_TIMER_INGRESS_WAIT] = fxb_parked_expired,
        [FX_BROKER_TEST_TIMER_DURABLE] = fxb_dstream_on_timer,
    };
    if ((unsigned)which >= sizeof(cbs) / sizeof(cbs[0]))
        return -EINVAL;
    fx_loop_test_fail_timer_arms(cbs[which], n);
    return 0;
}

/* ---- connection cuts and stalls ------------------------------------------ */

#define CUT_CODE 0x7e57u

typedef struct cut_req {
    fxb_ep *e;
    bool only_subscribers;
    int n;
} cut_req;

static void cut_on_loop(void *user)
{
    cut_req *r = user;
    /* fx_quic_conn_close defers on_conn_closed to the end of the loop turn,
     * so the list does not change while we walk it. */
    for (fxb_conn *c = r->e->conns; c != NULL; c = c->cnext) {
        if (c->qc == NULL || c->dead || (r->only_subscribers && c->subs == NULL))
            continue;
        fx_quic_conn_close(c->qc, CUT_CODE, "test hook: connection cut");
        r->n++;
    }
}

int fx_broker_test_cut_connections(fx_broker *b, bool only_subscribers)
{
    if (!running(b))
        return -EINVAL;
    int n = 0;
    for (uint32_t i = 0; i < b->neps; i++) {
        cut_req r = {.e = &b->eps[i], .only_subscribers = only_subscribers};
        int rv = run_and_wait(b->eps[i].loop, cut_on_loop, &r);
        if (rv != 0)
            return rv;
        n += r.n;
    }
    return n;
}

typedef struct stall_req {
    unsigned ms;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} stall_req;

static void stall_on_loop(void *user)
{
    stall_req *r = user;
    unsigned ms = r->ms; /* |r| is the caller's: gone once it sees |started| */
    pthread_mutex_lock(&r->mu);
    r->started = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    usleep((useconds_t)ms * 1000u);
}

/* Returns once the worker runs the stall, not when it is posted: a worker
 * still inside an earlier task (a drain that keeps taking jobs from its
 * queue) would otherwise run the publishes the caller sends next before it
 * stalls. */
int fx_broker_test_stall_worker(fx_broker *b, uint32_t index, unsigned ms)
{
    if (!running(b) || index >= b->nworkers)
        return -EINVAL;
    stall_req r = {.ms = ms};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int rv = fx_loop_call(b->workers[index].loop, stall_on_loop, &r);
    if (rv == 0) {
        pthread_mutex_lock(&r.mu);
        while (!r.started)
            pthread_cond_wait(&r.cv, &r.mu);
        pthread_mutex_unlock(&r.mu);
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return rv;
}

/* The gate a held storage thread waits at. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool storage_held;

static void hold_on_loop(void *user)
{
    (void)user;
    pthread_mutex_lock(&hold_mu);
    while (storage_held)
        pthread_cond_wait(&hold_cv, &hold_mu);
    pthread_mutex_unlock(&hold_mu);
}

int fx_broker_test_hold_storage(fx_broker *b, uint32_t index, bool hold)
{
    if (!running(b) || index >= b->nworkers || b->workers[index].dur == NULL)
        return -EINVAL;
    pthread_mutex_lock(&hold_mu);
    storage_held = hold;
    pthread_cond_broadcast(&hold_cv);
    pthread_mutex_unlock(&hold_mu);
    if (!hold)
        return 0;
    int rv = fx_loop_call(b->workers[index].dur->st->loop, hold_on_loop, NULL);
    if (rv != 0) {
        pthread_mutex_lock(&hold_mu);
        storage_held = false;
        pthread_mutex_unlock(&hold_mu);
    }
    return rv;
}

/* ---- holding a start-up recovery ------------------------------------------ */

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rec_cv = PTHREAD_COND_INITIALIZER;
static char rec_stream[256]; /* the stream whose recovery waits */
static bool rec_hold, rec_waiting;

/* Runs on a storage thread before each recovery opens a log. */
static void hold_recovery(const fx_stream_handle *h)
{
    pthread_mutex_lock(&rec_mu);
    if (rec_hold && strcmp(fx_stream_handle_stream(h), rec_stream) == 0) {
        rec_waiting = true;
        pthread_cond_broadcast(&rec_cv);
        while (rec_hold)
            pthread_cond_wait(&rec_cv, &rec_mu);
        rec_waiting = false;
    }
    pthread_mutex_unlock(&rec_mu);
}

void fx_broker_test_hold_recovery(const char *stream, bool hold)
{
    pthread_mutex_lock(&rec_mu);
    if (hold) {
        snprintf(rec_stream, sizeof(rec_stream), "%s", stream);
        fxb_test_on_recover = hold_recovery;
    }
    rec_hold = hold;
    pthread_cond_broadcast(&rec_cv);
    pthread_mutex_unlock(&rec_mu);
}

bool fx_broker_test_recovery_is_held(void)
{
    pthread_mutex_lock(&rec_mu);
    bool held = rec_waiting;
    pthread_mutex_unlock(&rec_mu);
    return held;
}

/* ---- durable deletions ----------------------------------------------------- */

static pthread_mutex_t del_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t del_cv = PTHREAD_COND_INITIALIZER;
static bool del_hold;
static unsigned del_waiting, del_nfail;
static int del_rv;

static int deletion_hook(const char *path)
{
    (void)path;
    pthread_mutex_lock(&del_mu);
    del_waiting++;
    pthread_cond_broadcast(&del_cv);
    while (del_hold)
        pthread_cond_wait(&del_cv, &del_mu);
    del_waiting--;
    int rv = 0;
    if (del_nfail > 0) {
        del_nfail--;
        rv = del_rv;
    }
    pthread_mutex_unlock(&del_mu);
    return rv;
}

void fx_broker_test_deletions(bool hold, int fail_rv, unsigned nfail)
{
    pthread_mutex_lock(&del_mu);
    del_hold = hold;
    del_rv = fail_rv;
    del_nfail = fail_rv != 0 ? nfail : 0;
    pthread_cond_broadcast(&del_cv);
    pthread_mutex_unlock(&del_mu);
    bool on = hold || del_nfail > 0;
    atomic_store(&fxb_durable_delete_hook, on ? deletion_hook : NULL);
}

bool fx_broker_test_deletion_held(unsigned timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&del_mu);
    while (del_waiting == 0 && pthread_cond_timedwait(&del_cv, &del_mu, &until) == 0)
        ;
    bool held = del_waiting > 0;
    pthread_mutex_unlock(&del_mu);
    return held;
}

/* ---- stream placement ------------------------------------------------------ */

/* One worker's part: its registered subscriptions of the stream. */
typedef struct where_part {
    fxb_worker *w;
    const fx_stream_handle *h;
    uint32_t subs, fed;
    uint64_t appended;
    bool in_slot;
} where_part;

static void where_on_worker(void *arg)
{
    where_part *p = arg;
    fxb_worker *w = p->w;
    fx_stream *held = fxb_worker_stream_if_any(w, p->h);
    p->in_slot = true;
    for (fxb_sub *sub = w->subs; sub != NULL; sub = sub->feed.wnext) {
        if (sub->h != p->h || !sub->feed.registered || sub->feed.stream == NULL)
            continue;
        fx_subscriber_stats st;
        fx_subscriber_get_stats(sub->feed.sub, &st);
        p->subs++;
        p->fed += st.dequeued > 0;
        p->appended = fx_stream_tail(sub->feed.stream);
        p->in_slot = p->in_slot && held == sub->feed.stream;
    }
}

static int stream_where(fx_broker *b, const fx_stream_handle *h, fx_broker_test_stream_where *out)
{
    *out = (fx_broker_test_stream_where){.handle_id = fx_stream_handle_id(h), .owner_worker = -1};
    for (uint32_t i = 0; i < b->nworkers; i++) {
        where_part p = {.w = &b->workers[i], .h = h};
        int rv = run_and_wait(p.w->loop, where_on_worker, &p);
        if (rv != 0)
            return rv;
        if (p.subs == 0)
            continue;
        out->owner_worker = out->owner_worker == -1 ? (int)i : -2;
        out->subs += p.subs;
        out->subs_fed += p.fed;
        out->appended = p.appended;
        out->in_slot = p.in_slot;
    }
    return 0;
}

int fx_broker_test_stream_placement(fx_broker *b, const char *tenant, const char *ns,
                                    const char *stream, fx_broker_test_stream_where *out)
{
    if (!running(b) || tenant == NULL || ns == NULL || stream == NULL || out == NULL)
        return -EINVAL;
    fx_stream_handle *h =
        fx_registry_find(b->reg, (fx_wire_slice){(const uint8_t *)tenant, strlen(tenant)},
                         (fx_wire_slice){(const uint8_t *)ns, strlen(ns)},
                         (fx_wire_slice){(const uint8_t *)stream, strlen(stream)});
    if (h == NULL)
        return FX_ENOSTREAM;
    int rv = stream_where(b, h, out);
    fx_stream_handle_unref(h);
    return rv;
}

/* ---- worker activity ----------------------------------------------------------- */

static void activity_on_worker(void *arg)
{
    fx_broker_test_worker_activity *a = arg;
    /* This runs on the worker's thread, so "self" is that loop's cell. */
    const fx_metrics_counters *c = &fx_metrics_cell_self()->c;
    a->publish_ok = atomic_load_explicit(&c->publish_ok, memory_order_relaxed);
    a->enqueued = atomic_load_explicit(&c->sub_queue_enqueued, memory_order_relaxed);
    a->dequeued = atomic_load_explicit(&c->sub_queue_dequeued, memory_order_relaxed);
}

int fx_broker_test_worker_activity_get(fx_broker *b, uint32_t index,
                                       fx_broker_test_worker_activity *out)
{
    if (!running(b) || index >= b->nworkers || out == NULL)
        return -EINVAL;
    *out = (fx_broker_test_worker_activity){0};
    int rv = run_and_wait(b->workers[index].loop, activity_on_worker, out);
    out->pin_error = fx_loop_pin_error(b->workers[index].loop);
    return rv;
}

/* ---- per-stream tables ------------------------------------------------------------ */

typedef struct tables_req {
    fxb_worker *w;
    fx_broker_test_stream_tables *out;
} tables_req;

static void tables_on_worker(void *arg)
{
    tables_req *r = arg;
    r->out->streams = fxb_idtable_count(&r->w->streams);
    r->out->streams_cap = fxb_idtable_capacity(&r->w->streams);
    if (r->w->dur != NULL) {
        r->out->durable = fxb_idtable_count(&r->w->dur->s);
        r->out->durable_cap = fxb_idtable_capacity(&r->w->dur->s);
    }
}

static void tables_on_storage(void *arg)
{
    tables_req *r = arg;
    r->out->logs = fxb_idtable_count(&r->w->dur->st->ds);
    r->out->logs_cap = fxb_idtable_capacity(&r->w->dur->st->ds);
}

int fx_broker_test_stream_tables_get(fx_broker *b, uint32_t index,
                                     fx_broker_test_stream_tables *out)
{
    if (!running(b) || index >= b->nworkers || out == NULL)
        return -EINVAL;
    *out = (fx_broker_test_stream_tables){0};
    tables_req r = {.w = &b->workers[index], .out = out};
    int rv = run_and_wait(r.w->loop, tables_on_worker, &r);
    if (rv == 0 && r.w->dur != NULL)
        rv = run_and_wait(r.w->dur->st->loop, tables_on_storage, &r);
    return rv;
}

/* ---- connection placement --------------------------------------------------------- */

typedef struct conns_req {
    fx_broker *b;
    fxb_ep *e; /* the endpoint whose connections are walked now */
    fx_broker_test_conn_where *out;
    size_t cap, n;
    bool stray; /* a connection on a loop the broker does not own */
} conns_req;

static bool slot_of(const fx_broker *b, const fx_loop *l, fx_loop_slot *slot)
{
    for (uint32_t i = 0; i < b->nworkers; i++)
        if (b->workers[i].loop == l) {
            *slot = (fx_loop_slot){.kind = FX_LOOP_KIND_WORKER, .index = i};
            return true;
        }
    for (uint32_t i = 0; i < b->nio; i++)
        if (b->io[i] == l) {
            *slot = (fx_loop_slot){.kind = FX_LOOP_KIND_IO, .index = i};
            return true;
        }
    return false;
}

/* Inserts |w| into the first |r->cap| entries kept ordered by id. */
static void conns_insert(conns_req *r, const fx_broker_test_conn_where *w)
{
    size_t kept = r->n < r->cap ? r->n : r->cap;
    size_t i = kept;
    while (i > 0 && r->out[i - 1].conn_id > w->conn_id)
        i--;
    if (i >= r->cap)
        return;
    size_t move = kept < r->cap ? kept - i : kept - i - 1;
    memmove(&r->out[i + 1], &r->out[i], move * sizeof(*r->out));
    r->out[i] = *w;
}

static void conns_on_loop(void *arg)
{
    conns_req *r = arg;
    for (fxb_conn *c = r->e->conns; c != NULL; c = c->cnext) {
        if (c->qc == NULL || c->dead)
            continue;
        fx_broker_test_conn_where w = {.conn_id = c->id};
        if (!slot_of(r->b, fx_quic_conn_loop(c->qc), &w.loop)) {
            r->stray = true;
            continue;
        }
        conns_insert(r, &w);
        r->n++;
    }
}

int fx_broker_test_conn_loops(fx_broker *b, fx_broker_test_conn_where *out, size_t cap)
{
    if (!running(b) || (out == NULL && cap > 0))
        return -EINVAL;
    conns_req r = {.b = b, .out = out, .cap = cap};
    for (uint32_t i = 0; i < b->neps; i++) {
        r.e = &b->eps[i];
        int rv = run_and_wait(b->eps[i].loop, conns_on_loop, &r);
        if (rv != 0)
            return rv;
    }
    if (r.stray)
        return FX_EINTERNAL;
    return r.n > (size_t)INT32_MAX ? INT32_MAX : (int)r.n;
}

/* ---- the per-stream gauges' collection ------------------------------------ */

typedef struct collect_probe {
    fxb_durable *d;
    size_t rows, held;
    int rv;
} collect_probe;

/* Another thread's attempt at the catalogue lock: what a storage thread
 * opening a log would meet. */
static void *try_cat_mu(void *arg)
{
    collect_probe *p = arg;
    if (pthread_mutex_trylock(&p->d->cat_mu) == 0) {
        pthread_mutex_unlock(&p->d->cat_mu);
        return NULL;
    }
    return p; /* held */
}

static void probe_emit(void *sink, const fx_mstream_row *row)
{
    (void)row;
    collect_probe *p = sink;
    pthread_t t;
    void *held = NULL;
    int rv = pthread_create(&t, NULL, try_cat_mu, p);
    if (rv != 0) {
        p->rv = -rv;
        return;
    }
    pthread_join(t, &held);
    p->rows++;
    p->held += held != NULL;
}

int fx_broker_test_collect_storage_rows(fx_broker *b, size_t *prows, size_t *pheld)
{
    fxb_durable *d = b->dur;
    if (d == NULL || d->msrc.on_collect == NULL)
        return -EINVAL;
    collect_probe p = {.d = d};
    d->msrc.on_collect(d->msrc.user, probe_emit, &p);
    *prows = p.rows;
    *pheld = p.held;
    return p.rv;
}

/* ---- subscribe redirects ------------------------------------------------------ */

/* One fx_broker_test_redirect_subscribe entry. The list is read on the
 * connection loops under redir_mu: a test hook, so a lock is fine there,
 * and only taken once an entry exists (redir_count). */
typedef struct redir {
    struct redir *next;
    const fx_broker *b;
    char stream[512]; /* "tenant/ns/stream" */
    char node_id[128];
    char addr[128];
    bool has_addr;
    uint64_t generation;
} redir;

static pthread_mutex_t redir_mu = PTHREAD_MUTEX_INITIALIZER;
static redir *redirs;
static atomic_uint redir_count;

int fx_broker_test_redirect_subscribe(fx_broker *b, const char *stream, const char *node_id,
                                      const char *addr, uint64_t generation)
{
    if (b == NULL || stream == NULL || strlen(stream) >= sizeof(((redir *)0)->stream) ||
        (node_id != NULL && strlen(node_id) >= sizeof(((redir *)0)->node_id)) ||
        (addr != NULL && strlen(addr) >= sizeof(((redir *)0)->addr)))
        return -EINVAL;
    int rv = 0;
    pthread_mutex_lock(&redir_mu);
    redir **p = &redirs;
    while (*p != NULL && ((*p)->b != b || strcmp((*p)->stream, stream) != 0))
        p = &(*p)->next;
    redir *r = *p;
    if (node_id == NULL) {
        if (r != NULL) {
            *p = r->next;
            free(r);
            atomic_fetch_sub(&redir_count, 1);
        }
    } else {
        if (r == NULL && (r = calloc(1, sizeof(*r))) != NULL) {
            r->b = b;
            snprintf(r->stream, sizeof(r->stream), "%s", stream);
            r->next = redirs;
            redirs = r;
            atomic_fetch_add(&redir_count, 1);
        }
        if (r == NULL) {
            rv = -ENOMEM;
        } else {
            snprintf(r->node_id, sizeof(r->node_id), "%s", node_id);
            snprintf(r->addr, sizeof(r->addr), "%s", addr != NULL ? addr : "");
            r->has_addr = addr != NULL;
            r->generation = generation;
        }
    }
    pthread_mutex_unlock(&redir_mu);
    return rv;
}

bool fxb_test_subscribe_redirected(fxb_bidi *s, const fx_msg *m)
{
    if (atomic_load(&redir_count) == 0)
        return false;
    char name[512];
    snprintf(name, sizeof(name), "%s/%s/%s", m->tenant_id, m->ns, m->stream);
    /* The reply borrows its strings: copy the entry's under the lock. */
    redir r;
    bool found = false;
    pthread_mutex_lock(&redir_mu);
    for (const redir *e = redirs; e != NULL; e = e->next) {
        if (e->b == s->conn->b && strcmp(e->stream, name) == 0) {
            r = *e;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&redir_mu);
    if (!found)
        return false;
    fx_msg reply;
    char text[768];
    fx_msg_init_redirect_reply(&reply, s->client_features, m->tenant_id, m->ns, m->stream,
                               r.node_id, r.has_addr ? r.addr : NULL, r.generation, text,
                               sizeof(text));
    FX_COUNTER_INC(subscribe_req_error);
    if (fxb_bidi_reply_msg(s, &reply) == 0)
        fxb_bidi_end(s);
    else
        fxb_bidi_fail(s, "out of memory for a not_leader answer");
    return true;
}
