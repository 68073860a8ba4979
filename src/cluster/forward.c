/* The forwarder (forward.h): a queue of forwards taken in order by the
 * forwarder thread, which hands each to a libfelix client connected to the
 * owner as the publisher (its tenant and token). The fast path: a forward of
 * one message whose client is connected, made while nothing waits in the
 * queue or on the thread, goes to that client from the calling thread
 * (fx_publish_try_async: it never waits), a thread hop less; anything else
 * (no client yet, a full client, a batch, a queue not empty) takes the
 * queue, so the order of the forwards is kept either way. */
#include "cluster/forward.h"

#include <errno.h>
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

typedef struct fwd_item {
    struct fwd_item *next;
    const char *addr, *tenant, *token, *ns, *stream; /* in |blob| */
    fx_iov *iov;
    size_t n, bytes;
    bool acked;
    bool retried; /* sent again once already, on a fresh client */
    fx_forward_cb cb;
    void *user;
    char blob[]; /* strings, the iov array, then the payloads */
} fwd_item;

typedef struct fwd_client {
    struct fwd_client *next;
    char *addr, *tenant, *token;
    fx_client *c;
    uint64_t used;    /* forwarder thread's tick at its last use */
    atomic_bool dead; /* a completion saw its connection end */
} fwd_client;

/* An owner address that could not be reached lately: forwards to it fail
 * at once until |until_ns| instead of each waiting out a connect timeout
 * (a dead owner stays named until its lease expires). */
#define FAILED_SLOTS 16
#define FAILED_HOLD_NS (500ull * 1000000ull)

typedef struct failed_addr {
    char addr[136];
    uint64_t until_ns;
    int rv;
} failed_addr;

struct fx_forwarder {
    fx_forward_opts o;
    char *pin, *ca, *sname;
    pthread_t thr;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fwd_item *head, *tail; /* mu */
    size_t queued_bytes;   /* mu */
    bool stop;             /* mu */
    bool busy;             /* mu: the forwarder thread is sending an item it took */
    /* Changed by the forwarder thread under mu, read under mu by the fast
     * path (a client is freed only once unlinked). */
    fwd_client *clients;
    failed_addr failed_addrs[FAILED_SLOTS]; /* forwarder thread */
    size_t nclients;       /* forwarder thread */
    uint64_t tick;         /* mu */
    atomic_uint_fast64_t forwards, messages, failed, refused_full, connects, connect_errors,
        nclients_now, direct;
};

/* One forward's completion, counted down by its messages' answers. */
typedef struct fwd_done {
    atomic_size_t left;
    atomic_size_t ok;   /* messages the owner took */
    atomic_size_t sent; /* messages handed to the client (their callbacks run) */
    atomic_int rv;
    fwd_item *it;   /* owned: sent again when the reused connection was found gone */
    bool may_retry; /* the client was reused (its connection may have died idle) */
    fx_forward_cb cb;
    void *user;
    fwd_client *fc;
    fx_forwarder *f;
    char addr[136];
} fwd_done;

static bool conn_gone(int rv)
{
    /* -ECONNREFUSED and the unreachables: an ICMP error ended the client's
     * connection (the owner's process or host is gone). */
    return rv == FX_ECONNLOST || rv == FX_ECLOSED || rv == FX_ENOTCONN || rv == FX_EIDLE ||
           rv == FX_ESHUTDOWN || rv == FX_ETLS || rv == FX_EQUIC || rv == -ECONNREFUSED ||
           rv == -EHOSTUNREACH || rv == -ENETUNREACH;
}

static void requeue(fx_forwarder *f, fwd_item *it);

static void done_one(fwd_done *d, int rv, bool msg)
{
    if (rv != 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&d->rv, &zero, rv);
        if (conn_gone(rv))
            atomic_store(&d->fc->dead, true);
    } else if (msg) {
        atomic_fetch_add(&d->ok, 1);
    }
    if (atomic_fetch_sub(&d->left, 1) != 1)
        return;
    int r = atomic_load(&d->rv);
    if (r != 0 && conn_gone(r) && d->may_retry && atomic_load(&d->sent) == 0) {
        /* A reused connection had died while idle (its owner paused or
         * restarted): the client refused every message at once, so none
         * can have reached the owner, and the forward goes again, once, on
         * a fresh client. (A message the client took may have been
         * appended: it is never sent twice.) */
        d->it->retried = true;
        requeue(d->f, d->it);
        free(d);
        return;
    }
    free(d->it);
    char why[256];
    if (r != 0) {
        atomic_fetch_add(&d->f->failed, 1);
        FX_COUNTER_INC(cluster_forward_failed);
        snprintf(why, sizeof(why), "publish forwarded to the stream's owner at %s failed: %s",
                 d->addr, fx_strerror(r));
    }
    d->cb(d->user, r, r != 0 ? why : NULL);
    free(d);
}

static void on_ack(void *user, int rv)
{
    done_one(user, rv, true);
}

int fx_forwarder_new(fx_forwarder **pf, const fx_forward_opts *o)
{
    *pf = NULL;
    if ((o->pin_sha256 == NULL) == (o->ca_file == NULL))
        return FX_ECONFIG; /* exactly one way to verify the owners */
    fx_forwarder *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->o = *o;
    if (f->o.max_queue_bytes == 0)
        f->o.max_queue_bytes = 64u << 20;
    if (f->o.max_clients == 0)
        f->o.max_clients = 64;
    if (f->o.connect_timeout_ms == 0)
        f->o.connect_timeout_ms = 1000;
    f->pin = o->pin_sha256 ? strdup(o->pin_sha256) : NULL;
    f->ca = o->ca_file ? strdup(o->ca_file) : NULL;
    f->sname = o->server_name ? strdup(o->server_name) : NULL;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if ((o->pin_sha256 && !f->pin) || (o->ca_file && !f->ca) || (o->server_name && !f->sname)) {
        fx_forwarder_free(f);
        return -ENOMEM;
    }
    *pf = f;
    return 0;
}

/* ---- the forwarder thread ------------------------------------------------------ */

static void client_free(fx_forwarder *f, fwd_client *fc)
{
    (void)fx_client_close(fc->c, 1000);
    free(fc->addr);
    free(fc->tenant);
    free(fc->token);
    free(fc);
    f->nclients--;
    atomic_store(&f->nclients_now, f->nclients);
}

/* Unlinks |fc| from the list. mu. */
static void client_unlink(fx_forwarder *f, fwd_client *fc)
{
    for (fwd_client **p = &f->clients; *p != NULL; p = &(*p)->next)
        if (*p == fc) {
            *p = fc->next;
            return;
        }
}

/* Drops |fc| from the list and frees it. Forwarder thread, mu not held
 * (the close waits for its connection). */
static void client_drop(fx_forwarder *f, fwd_client *fc)
{
    pthread_mutex_lock(&f->mu);
    client_unlink(f, fc);
    pthread_mutex_unlock(&f->mu);
    client_free(f, fc);
}

/* The client of (|addr|, |tenant|, |token|) in the list, or NULL. mu. */
static fwd_client *client_find(fx_forwarder *f, const char *addr, const char *tenant,
                               const char *token)
{
    for (fwd_client *fc = f->clients; fc != NULL; fc = fc->next)
        if (strcmp(fc->addr, addr) == 0 && strcmp(fc->tenant, tenant) == 0 &&
            strcmp(fc->token, token) == 0)
            return fc;
    return NULL;
}

/* The client for |it|'s owner, tenant and token, connected now if need
 * be; NULL with |*prv| and |why| when that failed. */
static fwd_client *client_for(fx_forwarder *f, const fwd_item *it, int *prv, char *why,
                              size_t cap)
{
    pthread_mutex_lock(&f->mu);
    fwd_client *fc = client_find(f, it->addr, it->tenant, it->token);
    bool dead = fc != NULL && atomic_load(&fc->dead);
    if (fc != NULL && !dead)
        fc->used = ++f->tick;
    pthread_mutex_unlock(&f->mu);
    if (fc != NULL && !dead)
        return fc;
    if (dead)
        client_drop(f, fc); /* its connection ended: connect again */
    uint64_t now = fx_now_ns();
    failed_addr *slot = &f->failed_addrs[0];
    for (int i = 0; i < FAILED_SLOTS; i++) {
        failed_addr *fa = &f->failed_addrs[i];
        if (strcmp(fa->addr, it->addr) == 0 && now < fa->until_ns) {
            *prv = fa->rv;
            snprintf(why, cap,
                     "the stream's owner at %s could not be reached a moment ago: %s; retry",
                     it->addr, fx_strerror(fa->rv));
            return NULL;
        }
        if (fa->until_ns < slot->until_ns)
            slot = fa; /* the oldest, to reuse below */
    }
    if (f->nclients >= f->o.max_clients) {
        pthread_mutex_lock(&f->mu);
        fwd_client *lru = f->clients;
        for (fwd_client *x = f->clients; x != NULL; x = x->next)
            if (x->used < lru->used)
                lru = x;
        client_unlink(f, lru);
        pthread_mutex_unlock(&f->mu);
        client_free(f, lru);
    }
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = it->addr;
    o.server_name = f->sname;
    o.pin_sha256 = f->pin;
    o.ca_file = f->ca;
    o.tenant = it->tenant;
    o.token = it->token;
    o.connect_timeout_ms = f->o.connect_timeout_ms;
    /* A dead owner is noticed within 1.5 s (below the shortest lease TTL, 2 s):
     * a forward waiting on it fails then and the next goes to the new owner. */
    o.idle_timeout_ms = 1500;
    o.keepalive_ms = 500;
    /* No reconnect: a forward must not wait for an owner that may be gone
     * for good (run_item retries once on a fresh client instead). */
    o.reconnect = false;
    o.publish_ack_timeout_ms = 10000;
    o.publish_conn_pool = 1; /* one connection: the owner sees one publisher, in order */
    fc = calloc(1, sizeof(*fc));
    if (fc == NULL || (fc->addr = strdup(it->addr)) == NULL ||
        (fc->tenant = strdup(it->tenant)) == NULL || (fc->token = strdup(it->token)) == NULL) {
        if (fc != NULL) {
            free(fc->addr);
            free(fc->tenant);
            free(fc);
        }
        *prv = -ENOMEM;
        snprintf(why, cap, "out of memory forwarding to the stream's owner");
        return NULL;
    }
    int rv = fx_client_connect(&fc->c, &o);
    if (rv != 0) {
        char text[200];
        fx_client_last_error(NULL, text, sizeof(text));
        atomic_fetch_add(&f->connect_errors, 1);
        snprintf(why, cap, "cannot forward to the stream's owner at %s: %s", it->addr,
                 text[0] ? text : fx_strerror(rv));
        /* An owner that refused this publisher's token answered: it is
         * reachable, and other publishers' forwards to it must go on. */
        if (rv != FX_EAUTH) {
            snprintf(slot->addr, sizeof(slot->addr), "%s", it->addr);
            slot->until_ns = fx_now_ns() + FAILED_HOLD_NS;
            slot->rv = rv;
        }
        free(fc->addr);
        free(fc->tenant);
        free(fc->token);
        free(fc);
        *prv = rv;
        return NULL;
    }
    atomic_fetch_add(&f->connects, 1);
    pthread_mutex_lock(&f->mu);
    fc->used = ++f->tick;
    fc->next = f->clients;
    f->clients = fc;
    pthread_mutex_unlock(&f->mu);
    f->nclients++;
    atomic_store(&f->nclients_now, f->nclients);
    return fc;
}

/* Sends |it| (taken: freed once answered). */
static void run_item(fx_forwarder *f, fwd_item *it)
{
    int rv = 0;
    char why[320];
    uint64_t connects = atomic_load(&f->connects);
    fwd_client *fc = client_for(f, it, &rv, why, sizeof(why));
    if (fc == NULL) {
        atomic_fetch_add(&f->failed, 1);
        FX_COUNTER_INC(cluster_forward_failed);
        it->cb(it->user, rv, why);
        free(it);
        return;
    }
    fwd_done *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        atomic_fetch_add(&f->failed, 1);
        FX_COUNTER_INC(cluster_forward_failed);
        it->cb(it->user, -ENOMEM, "out of memory forwarding to the stream's owner");
        free(it);
        return;
    }
    d->it = it;
    d->may_retry = !it->retried && atomic_load(&f->connects) == connects; /* reused */
    atomic_init(&d->ok, 0);
    atomic_init(&d->sent, 0);
    atomic_init(&d->left, it->n + 1); /* + 1: held until every message is handed over */
    atomic_init(&d->rv, 0);
    d->cb = it->cb;
    d->user = it->user;
    d->fc = fc;
    d->f = f;
    snprintf(d->addr, sizeof(d->addr), "%s", it->addr);
    for (size_t i = 0; i < it->n; i++) {
        rv = fx_publish_async(fc->c, it->ns, it->stream, it->iov[i].data, it->iov[i].len,
                              it->acked ? FX_ACK_PER_MESSAGE : FX_ACK_NONE, on_ack, d);
        if (rv != 0)
            done_one(d, rv, true); /* not sent: its callback never runs */
        else
            atomic_fetch_add(&d->sent, 1);
    }
    FX_COUNTER_ADD(cluster_forwarded_messages, it->n);
    done_one(d, 0, false); /* |it| may be freed from here on */
}

static void *forwarder_main(void *arg)
{
    fx_forwarder *f = arg;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        while (f->head == NULL && !f->stop)
            pthread_cond_wait(&f->cv, &f->mu);
        fwd_item *it = f->head;
        if (it != NULL) {
            f->head = it->next;
            if (f->head == NULL)
                f->tail = NULL;
            f->queued_bytes -= it->bytes;
        }
        bool stop = f->stop;
        f->busy = it != NULL; /* until run_item handed it over: no fast path meanwhile */
        pthread_mutex_unlock(&f->mu);
        if (it == NULL && stop)
            break;
        if (stop) {
            atomic_fetch_add(&f->failed, 1); /* answered with an error: counted as failed */
            FX_COUNTER_INC(cluster_forward_failed);
            it->cb(it->user, FX_ECLOSED, "the broker is stopping: the forward was not sent");
            free(it);
        } else {
            run_item(f, it);
        }
        pthread_mutex_lock(&f->mu);
        f->busy = false;
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_lock(&f->mu); /* |stop| is set: the fast path takes no client now */
    fwd_client *list = f->clients;
    f->clients = NULL;
    pthread_mutex_unlock(&f->mu);
    while (list != NULL) {
        fwd_client *fc = list;
        list = fc->next;
        client_free(f, fc);
    }
    return NULL;
}

/* Puts |it| back at the head of the queue (a retry keeps its place). Any
 * thread. */
static void requeue(fx_forwarder *f, fwd_item *it)
{
    pthread_mutex_lock(&f->mu);
    if (f->stop) { /* the thread may have left its loop: answer here */
        pthread_mutex_unlock(&f->mu);
        it->cb(it->user, FX_ECLOSED, "the broker is stopping: the forward was not sent");
        free(it);
        return;
    }
    it->next = f->head;
    f->head = it;
    if (f->tail == NULL)
        f->tail = it;
    f->queued_bytes += it->bytes;
    pthread_mutex_unlock(&f->mu);
    pthread_cond_signal(&f->cv);
}

static int start_thread(fx_forwarder *f)
{
    if (f->started)
        return 0;
    int rv = pthread_create(&f->thr, NULL, forwarder_main, f);
    if (rv != 0)
        return -rv;
    f->started = true;
    return 0;
}

/* ---- any thread ----------------------------------------------------------------- */

/* The fast path (top of this file): sends the one message |m| on its
 * client from this thread when that keeps the order. Returns the forward's
 * completion, held once (the caller lets it go after unlocking), or NULL
 * when the queue must take the forward. mu. */
static fwd_done *try_direct(fx_forwarder *f, const char *addr, const char *tenant,
                            const char *token, const char *ns, const char *stream,
                            const fx_forward_iov *m, bool acked, fx_forward_cb cb, void *user)
{
    if (f->stop || f->head != NULL || f->busy)
        return NULL; /* earlier forwards wait: this one goes after them */
    fwd_client *fc = client_find(f, addr, tenant, token);
    if (fc == NULL || atomic_load(&fc->dead))
        return NULL;
    fwd_done *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    atomic_init(&d->ok, 0);
    atomic_init(&d->sent, 1);
    atomic_init(&d->left, 2); /* the message, and this call's hold */
    atomic_init(&d->rv, 0);
    d->cb = cb;
    d->user = user;
    d->fc = fc;
    d->f = f;
    snprintf(d->addr, sizeof(d->addr), "%s", addr);
    /* A full client or a connection found gone: nothing was sent, and the
     * forwarder thread takes it (waiting, or connecting again). */
    if (fx_publish_try_async(fc->c, ns, stream, m->data, m->len,
                             acked ? FX_ACK_PER_MESSAGE : FX_ACK_NONE, on_ack, d) != 0) {
        free(d);
        return NULL;
    }
    fc->used = ++f->tick;
    return d;
}

int fx_forward_publish(fx_forwarder *f, const char *addr, const char *tenant, const char *token,
                       const char *ns, const char *stream, const fx_forward_iov *msgs, size_t n,
                       bool acked, fx_forward_cb cb, void *user)
{
    if (token == NULL)
        token = "";
    if (n == 1) {
        pthread_mutex_lock(&f->mu);
        fwd_done *d = try_direct(f, addr, tenant, token, ns, stream, msgs, acked, cb, user);
        pthread_mutex_unlock(&f->mu);
        if (d != NULL) {
            atomic_fetch_add(&f->forwards, 1);
            atomic_fetch_add(&f->messages, 1);
            atomic_fetch_add(&f->direct, 1);
            FX_COUNTER_ADD(cluster_forwarded_messages, 1);
            done_one(d, 0, false); /* |cb| may run from here on */
            return 0;
        }
    }
    const char *strs[5] = {addr, tenant, token, ns, stream};
    size_t slen[5], total = 0, bytes = 0;
    for (int i = 0; i < 5; i++)
        total += (slen[i] = strlen(strs[i])) + 1;
    for (size_t i = 0; i < n; i++)
        bytes += msgs[i].len;
    size_t align = (total + 7) & ~(size_t)7;
    fwd_item *it = malloc(sizeof(*it) + align + n * sizeof(fx_iov) + bytes);
    if (it == NULL)
        return -ENOMEM;
    char *p = it->blob;
    const char **dst[5] = {&it->addr, &it->tenant, &it->token, &it->ns, &it->stream};
    for (int i = 0; i < 5; i++) {
        memcpy(p, strs[i], slen[i] + 1);
        *dst[i] = p;
        p += slen[i] + 1;
    }
    it->iov = (fx_iov *)(void *)(it->blob + align);
    uint8_t *data = (uint8_t *)(it->iov + n);
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].len > 0)
            memcpy(data, msgs[i].data, msgs[i].len);
        it->iov[i] = (fx_iov){.data = data, .len = msgs[i].len};
        data += msgs[i].len;
    }
    it->n = n;
    it->bytes = bytes + n * 16;
    it->acked = acked;
    it->retried = false;
    it->cb = cb;
    it->user = user;
    it->next = NULL;
    pthread_mutex_lock(&f->mu);
    int rv = start_thread(f);
    if (rv == 0 && (f->stop || f->queued_bytes + it->bytes > f->o.max_queue_bytes))
        rv = FX_EFULL;
    if (rv == 0) {
        if (f->tail != NULL)
            f->tail->next = it;
        else
            f->head = it;
        f->tail = it;
        f->queued_bytes += it->bytes;
    }
    pthread_mutex_unlock(&f->mu);
    if (rv != 0) {
        if (rv == FX_EFULL) {
            atomic_fetch_add(&f->refused_full, 1);
            FX_COUNTER_INC(cluster_forward_refused);
        }
        free(it);
        return rv;
    }
    atomic_fetch_add(&f->forwards, 1);
    atomic_fetch_add(&f->messages, n);
    pthread_cond_signal(&f->cv);
    return 0;
}

void fx_forwarder_get_stats(fx_forwarder *f, fx_forward_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->forwards = atomic_load(&f->forwards);
    st->messages = atomic_load(&f->messages);
    st->failed = atomic_load(&f->failed);
    st->refused_full = atomic_load(&f->refused_full);
    st->connects = atomic_load(&f->connects);
    st->connect_errors = atomic_load(&f->connect_errors);
    st->direct = atomic_load(&f->direct);
    st->clients = atomic_load(&f->nclients_now);
    pthread_mutex_lock(&f->mu);
    st->queued_bytes = f->queued_bytes;
    pthread_mutex_unlock(&f->mu);
}

void fx_forwarder_free(fx_forwarder *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    bool started = f->started;
    pthread_mutex_unlock(&f->mu);
    pthread_cond_broadcast(&f->cv);
    if (started)
        pthread_join(f->thr, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->pin);
    free(f->ca);
    free(f->sname);
    free(f);
}
