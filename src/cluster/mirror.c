/* The mirrors (mirror.h): a thread per mirror takes its upstream libfelix
 * subscription's events in order, batches the contiguous ones and hands
 * each batch to the local stream's worker (ops.append), at most
 * max_inflight_bytes at a time; it routes and subscribes again when the
 * upstream ends, and stops after linger_ms without a local subscriber. */
#include "cluster/mirror.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/felix.h"

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "felix/error.h"

#define ADDR_MAX 136 /* "host:port" */

typedef struct waiter {
    struct waiter *next;
    void (*cb)(void *arg);
    void *arg;
} waiter;

/* One mirror. Refcounted: its thread holds one reference, each append in
 * flight one (its completion runs on the worker, maybe after the thread
 * left). */
typedef struct mirror {
    struct mirror *next; /* fx_mirrors.mu */
    fx_mirrors *m;       /* the thread only: the set outlives its threads */
    atomic_int refs;
    char *tenant, *ns, *stream, *token;
    fx_mirror_start start;
    uint64_t offset;
    void *ref; /* the local stream (ops), handed to ops.stopped */
    atomic_bool stop;
    bool stopping; /* fx_mirrors.mu: no attach joins it any more */
    /* |mu|: shared with the completions and the status. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t inflight_bytes, inflight_appends;
    char owner[ADDR_MAX];
    char why[256];
    atomic_bool gone; /* a completion found the local stream gone */
    bool up;          /* |mu|: subscribed upstream once */
    struct waiter *waiters; /* |mu|: fx_mirror_when_up's, until |up| */
    /* The mirror thread only. */
    fx_client *c;
    fx_subscription *sub;
    bool have_next;
    uint64_t next_off; /* the next offset expected from upstream */
    bool have_appended;
    uint64_t appended_end; /* the end of the last batch handed over */
    uint64_t up_dropped;   /* the upstream client queue's drops counted so far */
    /* Counters: written by the thread, read by the status (relaxed). */
    atomic_uint_fast64_t messages, gaps, missed, dropped, restarts;
    atomic_uint_fast64_t next_seen; /* |next| for the status */
} mirror;

struct fx_mirrors {
    fx_mirror_opts o;
    char *pin, *ca, *sname;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* |threads| went down */
    mirror *list;      /* mu */
    size_t count;      /* mu: mirrors listed (not stopping) */
    size_t threads;    /* mu: mirror threads running */
    bool closing;      /* mu */
    atomic_uint_fast64_t started, messages, gaps, missed, dropped, restarts, refused;
};

static fx_ratelimit route_rl = FX_RATELIMIT_INIT;
static fx_ratelimit up_rl = FX_RATELIMIT_INIT;

static void mirror_unref(mirror *mi)
{
    if (atomic_fetch_sub(&mi->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&mi->mu);
    pthread_cond_destroy(&mi->cv);
    free(mi->tenant);
    free(mi->ns);
    free(mi->stream);
    free(mi->token);
    free(mi);
}

/* ---- completions (the worker) ----------------------------------------------------------- */

typedef struct append_ctx {
    mirror *mi;
    size_t bytes;
} append_ctx;

static void on_appended(void *user, int rv, uint64_t skipped)
{
    (void)skipped; /* the jump was counted when the batch was handed over */
    append_ctx *a = user;
    mirror *mi = a->mi;
    if (rv == FX_ENOSTREAM || rv == FX_ECLOSED) /* the stream, or the broker, is gone */
        atomic_store(&mi->gone, true);
    else if (rv != 0)
        FX_LOG_RATELIMITED(&up_rl, fx_now_ns(), FX_LOG_WARN, "cluster",
                           "mirror of %s/%s/%s: an append failed: %s", mi->tenant, mi->ns,
                           mi->stream, fx_strerror(rv));
    pthread_mutex_lock(&mi->mu);
    mi->inflight_bytes -= a->bytes;
    mi->inflight_appends--;
    pthread_mutex_unlock(&mi->mu);
    pthread_cond_broadcast(&mi->cv);
    free(a);
    mirror_unref(mi);
}

/* ---- the mirror thread ------------------------------------------------------------------ */

/* A batch of contiguous upstream events, copied (an event's payload lives
 * until the next call on the subscription). */
typedef struct batch {
    uint64_t offset;
    size_t n, cap;
    fx_forward_iov *iov;
    size_t *lens;
    uint8_t *data;
    size_t bytes, data_cap;
} batch;

static bool stopped(mirror *mi)
{
    return atomic_load(&mi->stop) || atomic_load(&mi->gone);
}

static void set_why(mirror *mi, const char *why)
{
    pthread_mutex_lock(&mi->mu);
    if (!mi->why[0])
        snprintf(mi->why, sizeof(mi->why), "%s", why);
    pthread_mutex_unlock(&mi->mu);
}

/* Waits up to |ms| or until stopped. */
static void pause_ms(mirror *mi, uint32_t ms)
{
    uint64_t until = fx_now_ns() + (uint64_t)ms * FX_NS_PER_MS;
    pthread_mutex_lock(&mi->mu);
    while (!stopped(mi) && fx_now_ns() < until) {
        struct timespec ts = fx_timespec_at(until);
        pthread_cond_timedwait(&mi->cv, &mi->mu, &ts);
    }
    pthread_mutex_unlock(&mi->mu);
}

/* Marks the mirror up and runs the waiters (fx_mirror_when_up), once. */
static void run_waiters(mirror *mi)
{
    pthread_mutex_lock(&mi->mu);
    mi->up = true;
    waiter *w = mi->waiters;
    mi->waiters = NULL;
    pthread_mutex_unlock(&mi->mu);
    while (w != NULL) {
        waiter *next = w->next;
        w->cb(w->arg);
        free(w);
        w = next;
    }
}

static void count_drop(mirror *mi, size_t n);

/* Counts what the upstream subscription's own client queue shed (the
 * shedding profile: its policy is drop_new) as the mirror's drops. */
static void count_upstream_drops(mirror *mi)
{
    fx_sub_stats st;
    if (mi->sub == NULL || fx_subscription_stats(mi->sub, &st) != 0 || st.dropped <= mi->up_dropped)
        return;
    count_drop(mi, (size_t)(st.dropped - mi->up_dropped));
    mi->up_dropped = st.dropped;
}

static void upstream_close(mirror *mi)
{
    count_upstream_drops(mi);
    mi->up_dropped = 0; /* the next subscription counts from 0 */
    fx_unsubscribe(mi->sub);
    mi->sub = NULL;
    if (mi->c != NULL)
        (void)fx_client_close(mi->c, 500);
    mi->c = NULL;
}

/* Routes the stream and subscribes to its owner. Returns true when
 * subscribed; false to try again later (or stopped). */
static bool upstream_open(mirror *mi)
{
    fx_mirrors *m = mi->m;
    char addr[ADDR_MAX];
    int r = m->o.ops.route(m->o.ops.user, mi->tenant, mi->ns, mi->stream, addr, sizeof(addr));
    if (r == 1) {
        set_why(mi, "this node owns the stream now: its subscribers subscribe again and are "
                    "served by the owner's stream here");
        atomic_store(&mi->stop, true);
        return false;
    }
    if (r != 0) {
        FX_LOG_RATELIMITED(&route_rl, fx_now_ns(), FX_LOG_WARN, "cluster",
                           "mirror of %s/%s/%s: no owner to subscribe to now (%s); retrying",
                           mi->tenant, mi->ns, mi->stream, addr);
        return false;
    }
    pthread_mutex_lock(&mi->mu);
    snprintf(mi->owner, sizeof(mi->owner), "%s", addr);
    pthread_mutex_unlock(&mi->mu);
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = addr;
    o.server_name = m->sname;
    o.pin_sha256 = m->pin;
    o.ca_file = m->ca;
    o.tenant = mi->tenant;
    o.token = mi->token;
    o.connect_timeout_ms = m->o.connect_timeout_ms;
    /* A dead owner is noticed within 1.5 s (below the shortest lease TTL);
     * the mirror then routes again itself: a reconnect would keep dialling
     * the dead address. */
    o.idle_timeout_ms = 1500;
    o.keepalive_ms = 500;
    o.reconnect = false;
    /* Lossless: a full queue stops granting QUIC credit, so the owner's
     * fanout waits for this mirror as for any block subscriber. */
    o.sub_queue_capacity = 1024;
    o.sub_queue_policy = m->o.lossless ? FX_POLICY_BLOCK : FX_POLICY_DROP_NEW;
    int rv = fx_client_connect(&mi->c, &o);
    if (rv != 0) {
        char text[200];
        fx_client_last_error(NULL, text, sizeof(text));
        FX_LOG_RATELIMITED(&up_rl, fx_now_ns(), FX_LOG_WARN, "cluster",
                           "mirror of %s/%s/%s: cannot connect to the owner at %s: %s; retrying",
                           mi->tenant, mi->ns, mi->stream, addr, text[0] ? text : fx_strerror(rv));
        mi->c = NULL;
        return false;
    }
    fx_start st = {.kind = FX_START_LATEST};
    if (mi->have_next)
        st = (fx_start){.kind = FX_START_OFFSET, .offset = mi->next_off};
    else if (mi->start == FX_MIRROR_START_EARLIEST)
        st.kind = FX_START_EARLIEST;
    else if (mi->start == FX_MIRROR_START_OFFSET)
        st = (fx_start){.kind = FX_START_OFFSET, .offset = mi->offset};
    rv = fx_subscribe(&mi->sub, mi->c, mi->ns, mi->stream, &st);
    if (rv == FX_ECURSOR_TOO_OLD || rv == FX_ECURSOR_IN_FUTURE) {
        /* The owner's ring moved past where we stopped (or a new owner
         * numbers from its own epoch): take what it holds; the jump is
         * the gap the local subscribers see. */
        fx_unsubscribe(mi->sub);
        mi->sub = NULL;
        st = (fx_start){.kind = rv == FX_ECURSOR_TOO_OLD ? FX_START_EARLIEST : FX_START_LATEST};
        rv = fx_subscribe(&mi->sub, mi->c, mi->ns, mi->stream, &st);
    }
    if (rv != 0) {
        char text[200];
        fx_client_last_error(mi->c, text, sizeof(text));
        FX_LOG_RATELIMITED(&up_rl, fx_now_ns(), FX_LOG_WARN, "cluster",
                           "mirror of %s/%s/%s: cannot subscribe at the owner %s: %s; retrying",
                           mi->tenant, mi->ns, mi->stream, addr, text[0] ? text : fx_strerror(rv));
        if (mi->sub != NULL)
            fx_unsubscribe(mi->sub);
        mi->sub = NULL;
        (void)fx_client_close(mi->c, 500);
        mi->c = NULL;
        return false;
    }
    return true;
}

static int batch_add(batch *b, const fx_event *ev)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        size_t *lens = realloc(b->lens, cap * sizeof(*lens));
        if (lens == NULL)
            return -ENOMEM;
        b->lens = lens;
        fx_forward_iov *iov = realloc(b->iov, cap * sizeof(*iov));
        if (iov == NULL)
            return -ENOMEM;
        b->iov = iov;
        b->cap = cap;
    }
    if (b->bytes + ev->len > b->data_cap) {
        size_t cap = b->data_cap ? b->data_cap : 4096;
        while (cap < b->bytes + ev->len)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (d == NULL)
            return -ENOMEM;
        b->data = d;
        b->data_cap = cap;
    }
    if (b->n == 0)
        b->offset = ev->offset;
    if (ev->len > 0)
        memcpy(b->data + b->bytes, ev->payload, ev->len);
    b->lens[b->n++] = ev->len;
    b->bytes += ev->len;
    return 0;
}

static void count_drop(mirror *mi, size_t n)
{
    atomic_fetch_add(&mi->dropped, n);
    atomic_fetch_add(&mi->m->dropped, n);
    FX_COUNTER_ADD(cluster_mirror_dropped, n);
}

/* Hands |b| to the worker: under the lossless profile waits for room
 * within max_inflight_bytes (the upstream queue fills meanwhile), else
 * sheds it when there is none (counted). Empties |b|. */
static void batch_flush(mirror *mi, batch *b)
{
    fx_mirrors *m = mi->m;
    if (b->n == 0)
        return;
    size_t charge = b->bytes + b->n * 16;
    pthread_mutex_lock(&mi->mu);
    bool room = true;
    if (m->o.lossless) {
        while (!stopped(mi) && mi->inflight_bytes > 0 &&
               mi->inflight_bytes + charge > m->o.max_inflight_bytes) {
            struct timespec ts = fx_timespec_at(fx_now_ns() + 200 * FX_NS_PER_MS);
            pthread_cond_timedwait(&mi->cv, &mi->mu, &ts);
        }
    } else if (mi->inflight_bytes > 0 && mi->inflight_bytes + charge > m->o.max_inflight_bytes) {
        room = false;
    }
    pthread_mutex_unlock(&mi->mu);
    if (stopped(mi))
        goto out;
    if (!room) {
        count_drop(mi, b->n);
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->iov[i] = (fx_forward_iov){.data = b->data + off, .len = b->lens[i]};
        off += b->lens[i];
    }
    append_ctx *a = malloc(sizeof(*a));
    if (a == NULL) {
        count_drop(mi, b->n);
        goto out;
    }
    *a = (append_ctx){.mi = mi, .bytes = charge};
    atomic_fetch_add(&mi->refs, 1);
    pthread_mutex_lock(&mi->mu);
    mi->inflight_bytes += charge;
    mi->inflight_appends++;
    pthread_mutex_unlock(&mi->mu);
    int rv;
    while ((rv = m->o.ops.append(m->o.ops.user, mi->ref, b->offset, b->iov, b->n, on_appended,
                                 a)) == FX_EFULL &&
           m->o.lossless && !stopped(mi))
        pause_ms(mi, 1); /* the worker's queue is full: it drains, we wait */
    if (rv != 0) {
        pthread_mutex_lock(&mi->mu);
        mi->inflight_bytes -= charge;
        mi->inflight_appends--;
        pthread_mutex_unlock(&mi->mu);
        free(a);
        mirror_unref(mi);
        if (rv == FX_ENOSTREAM)
            atomic_store(&mi->gone, true);
        else
            count_drop(mi, b->n);
        goto out;
    }
    if (mi->have_appended && b->offset > mi->appended_end) {
        uint64_t missed = b->offset - mi->appended_end;
        atomic_fetch_add(&mi->gaps, 1);
        atomic_fetch_add(&mi->missed, missed);
        atomic_fetch_add(&m->gaps, 1);
        atomic_fetch_add(&m->missed, missed);
        FX_COUNTER_INC(cluster_mirror_gaps);
    }
    mi->have_appended = true;
    mi->appended_end = b->offset + b->n;
    atomic_fetch_add(&mi->messages, b->n);
    atomic_fetch_add(&m->messages, b->n);
    FX_COUNTER_ADD(cluster_mirror_messages, b->n);
out:
    b->n = 0;
    b->bytes = 0;
}

/* Takes |ev| into |b| (a jump in offsets starts a new batch). */
static void take(mirror *mi, batch *b, const fx_event *ev)
{
    if (!ev->has_offset) {
        count_drop(mi, 1); /* an owner always sends offsets: nowhere to place it */
        return;
    }
    if (mi->have_next && ev->offset < mi->next_off) {
        /* A subscription made again starts at the next offset, so the
         * owner's offsets went back: the stream was deleted and made again
         * there at the same epoch. The local ring cannot go back: the
         * mirror stops, its subscribers subscribe again to a new one. */
        set_why(mi, "the owner's offsets went back (the stream was deleted and made again "
                    "there): its local subscribers subscribe again");
        atomic_store(&mi->stop, true);
        return;
    }
    if (b->n > 0 && (ev->offset != b->offset + b->n || b->n >= mi->m->o.batch_messages))
        batch_flush(mi, b);
    if (batch_add(b, ev) != 0) {
        count_drop(mi, 1); /* out of memory: the next append shows the jump */
        FX_LOG_RATELIMITED(&up_rl, fx_now_ns(), FX_LOG_ERROR, "cluster",
                           "mirror of %s/%s/%s: out of memory batching: a message was shed",
                           mi->tenant, mi->ns, mi->stream);
    }
    mi->have_next = true;
    mi->next_off = ev->offset + 1;
    atomic_store_explicit(&mi->next_seen, mi->next_off, memory_order_relaxed);
}

static void *mirror_main(void *arg)
{
    mirror *mi = arg;
    fx_mirrors *m = mi->m;
    batch b = {0};
    uint64_t idle_since = 0, last_check = 0;
    while (!stopped(mi)) {
        if (mi->sub == NULL) {
            if (!upstream_open(mi)) {
                if (!stopped(mi))
                    pause_ms(mi, 500);
                continue;
            }
            run_waiters(mi); /* the first local subscribers register now */
        }
        fx_event ev;
        int rv = fx_subscription_next(mi->sub, &ev, 200);
        if (rv == 0) {
            take(mi, &b, &ev);
            /* More that already arrived go in the same batches. */
            for (uint32_t i = 0; i < 4 * m->o.batch_messages && !stopped(mi); i++) {
                if (fx_subscription_next(mi->sub, &ev, 0) != 0)
                    break;
                take(mi, &b, &ev);
            }
            batch_flush(mi, &b);
        } else if (rv != FX_ETIMEDOUT) {
            fx_sub_error e = {0};
            (void)fx_subscription_error(mi->sub, &e);
            FX_LOG_RATELIMITED(&up_rl, fx_now_ns(), FX_LOG_WARN, "cluster",
                               "mirror of %s/%s/%s: the upstream subscription ended (%s%s%s): "
                               "subscribing again from offset %llu",
                               mi->tenant, mi->ns, mi->stream, fx_strerror(rv),
                               e.message[0] ? ": " : "", e.message,
                               (unsigned long long)mi->next_off);
            upstream_close(mi);
            atomic_fetch_add(&mi->restarts, 1);
            atomic_fetch_add(&m->restarts, 1);
            FX_COUNTER_INC(cluster_mirror_restarts);
        }
        uint64_t now = fx_now_ns();
        if (now - last_check < 250 * FX_NS_PER_MS)
            continue;
        last_check = now;
        count_upstream_drops(mi);
        pthread_mutex_lock(&mi->mu);
        size_t appends = mi->inflight_appends;
        pthread_mutex_unlock(&mi->mu);
        int use = m->o.ops.in_use(m->o.ops.user, mi->ref, appends);
        if (use < 0) {
            set_why(mi, "its local stream was removed");
            break;
        }
        if (use > 0) {
            idle_since = 0;
        } else if (idle_since == 0) {
            idle_since = now;
        } else if (now - idle_since >= (uint64_t)m->o.linger_ms * FX_NS_PER_MS) {
            char why[128];
            snprintf(why, sizeof(why), "no local subscriber for %u ms", m->o.linger_ms);
            set_why(mi, why);
            break;
        }
    }
    if (atomic_load(&mi->gone))
        set_why(mi, "its local stream was removed");
    upstream_close(mi);
    run_waiters(mi); /* they register and find the stream ending */
    free(b.iov);
    free(b.lens);
    free(b.data);
    /* Unlisted first: an attach from now on makes a new mirror. */
    pthread_mutex_lock(&m->mu);
    for (mirror **p = &m->list; *p != NULL; p = &(*p)->next)
        if (*p == mi) {
            *p = mi->next;
            break;
        }
    if (!mi->stopping)
        m->count--;
    mi->stopping = true;
    pthread_mutex_unlock(&m->mu);
    FX_GAUGE_SUB(cluster_mirrors, 1);
    pthread_mutex_lock(&mi->mu);
    char why[256];
    snprintf(why, sizeof(why), "%s", mi->why[0] ? mi->why : "stopped");
    pthread_mutex_unlock(&mi->mu);
    FX_LOG_INFO("cluster", "mirror of %s/%s/%s stopped: %s", mi->tenant, mi->ns, mi->stream, why);
    m->o.ops.stopped(m->o.ops.user, mi->ref, why);
    mi->ref = NULL;
    mirror_unref(mi);
    /* Under the lock: fx_mirrors_free may free |m| as soon as it is let go. */
    pthread_mutex_lock(&m->mu);
    m->threads--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- any thread ------------------------------------------------------------------------- */

int fx_mirrors_new(fx_mirrors **pm, const fx_mirror_opts *o)
{
    *pm = NULL;
    if ((o->pin_sha256 == NULL) == (o->ca_file == NULL) || o->ops.append == NULL ||
        o->ops.in_use == NULL || o->ops.route == NULL || o->ops.stopped == NULL)
        return FX_ECONFIG;
    fx_mirrors *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->o = *o;
    if (m->o.linger_ms == 0)
        m->o.linger_ms = 10000;
    if (m->o.max_mirrors == 0)
        m->o.max_mirrors = 256;
    if (m->o.max_inflight_bytes == 0)
        m->o.max_inflight_bytes = 4u << 20;
    if (m->o.batch_messages == 0)
        m->o.batch_messages = 256;
    if (m->o.connect_timeout_ms == 0)
        m->o.connect_timeout_ms = 2000;
    m->pin = o->pin_sha256 ? strdup(o->pin_sha256) : NULL;
    m->ca = o->ca_file ? strdup(o->ca_file) : NULL;
    m->sname = o->server_name ? strdup(o->server_name) : NULL;
    pthread_mutex_init(&m->mu, NULL);
    fx_cond_init_monotonic(&m->cv);
    if ((o->pin_sha256 && !m->pin) || (o->ca_file && !m->ca) || (o->server_name && !m->sname)) {
        fx_mirrors_free(m);
        return -ENOMEM;
    }
    *pm = m;
    return 0;
}

void fx_mirrors_free(fx_mirrors *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->closing = true;
    for (mirror *mi = m->list; mi != NULL; mi = mi->next) {
        set_why(mi, "the broker is stopping");
        atomic_store(&mi->stop, true);
        pthread_cond_broadcast(&mi->cv);
    }
    while (m->threads > 0)
        pthread_cond_wait(&m->cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->pin);
    free(m->ca);
    free(m->sname);
    free(m);
}

static bool same(const mirror *mi, const char *t, const char *ns, const char *s)
{
    return strcmp(mi->tenant, t) == 0 && strcmp(mi->ns, ns) == 0 && strcmp(mi->stream, s) == 0;
}

int fx_mirror_attach(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                     const char *addr, const char *token, fx_mirror_start start, uint64_t offset,
                     void *stream_ref, bool *pnew)
{
    *pnew = false;
    pthread_mutex_lock(&m->mu);
    for (mirror *mi = m->list; mi != NULL; mi = mi->next)
        if (!mi->stopping && same(mi, tenant, ns, stream)) {
            pthread_mutex_unlock(&m->mu);
            return 0;
        }
    if (m->closing || m->count >= m->o.max_mirrors) {
        pthread_mutex_unlock(&m->mu);
        atomic_fetch_add(&m->refused, 1);
        return FX_EFULL;
    }
    mirror *mi = calloc(1, sizeof(*mi));
    if (mi == NULL || (mi->tenant = strdup(tenant)) == NULL || (mi->ns = strdup(ns)) == NULL ||
        (mi->stream = strdup(stream)) == NULL || (mi->token = strdup(token ? token : "")) == NULL) {
        pthread_mutex_unlock(&m->mu);
        if (mi != NULL) {
            free(mi->tenant);
            free(mi->ns);
            free(mi->stream);
            free(mi);
        }
        return -ENOMEM;
    }
    mi->m = m;
    atomic_init(&mi->refs, 1);
    mi->start = start;
    mi->offset = offset;
    mi->ref = stream_ref;
    snprintf(mi->owner, sizeof(mi->owner), "%s", addr);
    pthread_mutex_init(&mi->mu, NULL);
    fx_cond_init_monotonic(&mi->cv);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 512u << 10);
    pthread_t thr;
    int rv = pthread_create(&thr, &at, mirror_main, mi);
    pthread_attr_destroy(&at);
    if (rv != 0) {
        pthread_mutex_unlock(&m->mu);
        mi->ref = NULL;
        mirror_unref(mi);
        return -rv;
    }
    mi->next = m->list;
    m->list = mi;
    m->count++;
    m->threads++;
    pthread_mutex_unlock(&m->mu);
    atomic_fetch_add(&m->started, 1);
    FX_GAUGE_ADD(cluster_mirrors, 1);
    FX_LOG_INFO("cluster", "mirror of %s/%s/%s started: subscribing to the owner at %s", tenant, ns,
                stream, addr);
    *pnew = true;
    return 0;
}

bool fx_mirror_stop(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                    const char *why)
{
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (mirror *mi = m->list; mi != NULL; mi = mi->next)
        if (!mi->stopping && same(mi, tenant, ns, stream)) {
            set_why(mi, why);
            mi->stopping = true;
            m->count--;
            atomic_store(&mi->stop, true);
            pthread_cond_broadcast(&mi->cv);
            found = true;
        }
    pthread_mutex_unlock(&m->mu);
    return found;
}

bool fx_mirror_when_up(fx_mirrors *m, const char *tenant, const char *ns, const char *stream,
                       void (*cb)(void *arg), void *arg)
{
    bool queued = false;
    pthread_mutex_lock(&m->mu);
    for (mirror *mi = m->list; mi != NULL && !queued; mi = mi->next) {
        if (mi->stopping || !same(mi, tenant, ns, stream))
            continue;
        pthread_mutex_lock(&mi->mu);
        waiter *w = mi->up ? NULL : malloc(sizeof(*w));
        if (w != NULL) {
            *w = (waiter){.next = mi->waiters, .cb = cb, .arg = arg};
            mi->waiters = w;
            queued = true;
        }
        pthread_mutex_unlock(&mi->mu);
        break;
    }
    pthread_mutex_unlock(&m->mu);
    return queued;
}

void fx_mirrors_get_stats(fx_mirrors *m, fx_mirror_stats *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&m->mu);
    st->mirrors = m->count;
    pthread_mutex_unlock(&m->mu);
    st->started = atomic_load(&m->started);
    st->messages = atomic_load(&m->messages);
    st->gaps = atomic_load(&m->gaps);
    st->missed = atomic_load(&m->missed);
    st->dropped = atomic_load(&m->dropped);
    st->upstream_restarts = atomic_load(&m->restarts);
    st->refused = atomic_load(&m->refused);
}

char *fx_mirrors_json(fx_mirrors *m)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return NULL;
    bool oom = false;
    pthread_mutex_lock(&m->mu);
    for (mirror *mi = m->list; mi != NULL; mi = mi->next) {
        char name[3 * 256 + 3];
        snprintf(name, sizeof(name), "%s/%s/%s", mi->tenant, mi->ns, mi->stream);
        pthread_mutex_lock(&mi->mu);
        json_t *o = json_pack(
            "{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "stream", name, "owner", mi->owner,
            "subscribed", mi->up,
            "next_offset", (json_int_t)atomic_load(&mi->next_seen), "queued_bytes", (json_int_t)mi->inflight_bytes,
            "messages", (json_int_t)atomic_load(&mi->messages), "gaps",
            (json_int_t)atomic_load(&mi->gaps), "dropped", (json_int_t)atomic_load(&mi->dropped),
            "upstream_restarts", (json_int_t)atomic_load(&mi->restarts), "stopping",
            mi->stopping);
        pthread_mutex_unlock(&mi->mu);
        oom |= o == NULL || json_array_append_new(arr, o) != 0;
    }
    pthread_mutex_unlock(&m->mu);
    char *s = oom ? NULL : json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return s;
}
