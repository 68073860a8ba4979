/* Consumer groups' pages from disk (group_page.h). The reader reads the
 * segment files itself, read-only, through the stream's fx_sio, as
 * replay.c's does: a page from |from| lists the segments, finds the one
 * holding |from| by their headers (a segment that cannot be opened was
 * removed by retention), seeks by its sparse index, then copies records
 * until |to|, the record bound or FXB_REPLAY_PAGE_BYTES. A page never
 * reads at or past the ring's oldest offset at the request, which the log
 * wrote (one pwrite per append) before the ring took it. No cursor is kept
 * between pages: a group holds no file open. Worker side: the group's
 * worker loop; reader side: its replay thread. */
#include "broker/group_page.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/durable_int.h"
#include "broker/logcur.h"
#include "broker/replay.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/scan.h"

struct fxb_gpage {
    fxb_worker *w;
    fx_loop *rloop;
    fx_sio *io;
    uint32_t max_records;
    fxb_gpage_cb cb;
    void *user;
    char dir[PATH_MAX];
    fx_task task;      /* worker <-> replay thread */
    fx_timer timer;    /* the retry after a failed read (worker) */
    bool timer_armed;  /* worker */
    uint64_t retry_ns; /* worker: no read before (0: none) */
    bool inflight;     /* worker: a read is on the replay thread */
    bool dead;         /* worker: freed meanwhile; the answer frees it */
    uint64_t low;      /* worker: the log's first offset as last seen */
    /* The page (worker). */
    uint8_t *buf;
    fx_wire_slice *sl;
    uint64_t base;
    uint32_t n;
    /* The request: written by the worker before it posts |task|. */
    uint64_t from, to;
    /* The answer: written by the reader before it posts |task| back. */
    int rv;
    uint64_t first; /* FX_ECURSOR_TOO_OLD: the log's first offset */
    uint8_t *nbuf;
    fx_wire_slice *nsl;
    uint32_t nn;
    size_t nbytes;
    fxb_logcur cur; /* the reader's cursor, for one page (replay thread); err: why */
};

static void worker_on_answer(fx_loop *l, fx_task *t, void *user);
static void on_retry(fx_loop *l, fx_timer *t, void *user);

/* ---- the log's place ---------------------------------------------------------------------- */

/* The durable stage of |w|'s storage thread, or NULL. */
static fxb_durable *stage_of(const fxb_worker *w)
{
    return w->dur != NULL && w->dur->st != NULL ? w->dur->st->d : NULL;
}

int fxb_gpage_log_span(fxb_worker *w, const fx_stream_handle *h, uint64_t *pfirst, uint64_t *pnext)
{
    fxb_durable *d = stage_of(w);
    if (d == NULL)
        return -ENOENT;
    int rv = -ENOENT;
    pthread_mutex_lock(&d->cat_mu);
    for (const dstats *x = d->stats; x != NULL; x = x->next) {
        if (x->handle_id != fx_stream_handle_id(h))
            continue;
        rv = -EAGAIN;
        if (x->state != DSTATE_OPEN)
            break;
        *pfirst = atomic_load_explicit(&x->first, memory_order_relaxed);
        *pnext = atomic_load_explicit(&x->next_off, memory_order_relaxed);
        rv = 0;
        break;
    }
    pthread_mutex_unlock(&d->cat_mu);
    return rv;
}

/* The directory of |h|'s log into |out| (empty when the catalogue has no
 * live entry for it: its reads then fail, counted). */
static void log_dir(fxb_durable *d, const fx_stream_handle *h, char *out, size_t cap)
{
    out[0] = '\0';
    pthread_mutex_lock(&d->cat_mu);
    const fx_catalog_entry *e =
        fx_catalog_find(d->cat, fx_stream_handle_tenant(h), fx_stream_handle_namespace(h),
                        fx_stream_handle_stream(h));
    if (e != NULL && fx_catalog_dir_path(d->cat, e, out, cap) != 0)
        out[0] = '\0';
    pthread_mutex_unlock(&d->cat_mu);
}

fxb_gpage *fxb_gpage_new(fxb_worker *w, const fx_stream_handle *h, fxb_gpage_cb cb, void *user,
                         int *prv)
{
    fxb_durable *d = stage_of(w);
    *prv = d == NULL ? -ENOTSUP : -ENOMEM;
    fxb_gpage *p = d != NULL ? calloc(1, sizeof(*p)) : NULL;
    if (p == NULL)
        return NULL;
    p->w = w;
    p->rloop = w->dur->st->rloop;
    p->io = d->o.io != NULL ? d->o.io : fx_sio_posix();
    p->max_records = d->o.max_records_per_read > 0 ? d->o.max_records_per_read : 1;
    p->cb = cb;
    p->user = user;
    log_dir(d, h, p->dir, sizeof(p->dir));
    fxb_logcur_init(&p->cur, p->io, p->dir);
    uint64_t next;
    if (fxb_gpage_log_span(w, h, &p->low, &next) != 0)
        p->low = 0; /* learnt from the first read */
    fx_timer_init(&p->timer, on_retry, p);
    *prv = 0;
    return p;
}

static void page_drop(uint8_t **buf, fx_wire_slice **sl, uint32_t *n)
{
    free(*buf);
    free(*sl);
    *buf = NULL;
    *sl = NULL;
    *n = 0;
}

static void gpage_destroy(fxb_gpage *p)
{
    page_drop(&p->buf, &p->sl, &p->n);
    page_drop(&p->nbuf, &p->nsl, &p->nn);
    free(p);
}

void fxb_gpage_free(fxb_gpage *p)
{
    if (p == NULL)
        return;
    if (p->timer_armed)
        fx_loop_timer_cancel(p->w->loop, &p->timer);
    p->timer_armed = false;
    if (p->inflight)
        p->dead = true; /* worker_on_answer frees it */
    else
        gpage_destroy(p);
}

void fxb_gpage_free_stopped(fxb_gpage *p)
{
    if (p == NULL)
        return;
    if (p->timer_armed)
        fx_loop_timer_cancel(p->w->loop, &p->timer); /* the loop is stopped: allowed */
    gpage_destroy(p);
}

uint64_t fxb_gpage_low(const fxb_gpage *p)
{
    return p->low;
}

uint32_t fxb_gpage_read(const fxb_gpage *p, uint64_t offset, uint32_t n, fx_wire_slice *out)
{
    if (offset < p->base || offset >= p->base + p->n)
        return 0;
    uint32_t i = (uint32_t)(offset - p->base), k = p->n - i < n ? p->n - i : n;
    memcpy(out, p->sl + i, k * sizeof(*out));
    return k;
}

/* ---- reader (replay thread) ------------------------------------------------------------- */

static int fail(fxb_gpage *p, int rv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(fxb_gpage *p, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->cur.err, sizeof(p->cur.err), fmt, ap);
    va_end(ap);
    return rv;
}

/* Moves the cursor to |p->from|. Below every segment still there, the
 * answer carries the log's first offset (FX_ECURSOR_TOO_OLD); when no
 * segment is above it either, it is a plain failure. */
static int seek(fxb_gpage *p)
{
    uint64_t first;
    int rv = fxb_logcur_seek(&p->cur, p->from, &first);
    if (rv != FX_ECURSOR_TOO_OLD)
        return rv;
    if (first == UINT64_MAX)
        return fail(p, FX_ESTORAGE_ERROR, "no segment of %s holds offset %" PRIu64, p->dir,
                    p->from);
    p->first = first;
    return rv;
}

/* Copies the record at the cursor (offset |off|) into the page being made,
 * or moves to the next segment at the end of this one. Sets |*pfull|
 * (nothing read) when it would take the page past FXB_REPLAY_PAGE_BYTES. */
static int page_add(fxb_gpage *p, uint64_t off, size_t *pcap, bool *pfull)
{
    fx_rec_header h;
    fx_rec_status st;
    int rv;
    fxb_logcur *c = &p->cur;
    if ((rv = fx_segwin_record(&c->win, c->pos, off, true, false, NULL, &h, &st)) != 0)
        return fail(p, rv, "read failed in %s", p->dir);
    if (st == FX_REC_TRUNCATED && c->pos >= c->win.file_len)
        return fxb_logcur_advance(c, off);
    if (st != FX_REC_OK)
        return fxb_logcur_bad(c, st);
    if (p->nn > 0 && p->nbytes + h.len > FXB_REPLAY_PAGE_BYTES) {
        *pfull = true;
        return 0;
    }
    if (p->nbytes + h.len > *pcap) { /* a first record above the page bytes */
        uint8_t *nb = realloc(p->nbuf, p->nbytes + h.len);
        if (nb == NULL)
            return fail(p, -ENOMEM, "no memory for a page of %s", p->dir);
        p->nbuf = nb;
        *pcap = p->nbytes + h.len;
    }
    if ((rv = fx_segwin_record(&c->win, c->pos, off, true, true, p->nbuf + p->nbytes, &h, &st)) !=
        0)
        return fail(p, rv, "read failed in %s", p->dir);
    if (st != FX_REC_OK)
        return fxb_logcur_bad(c, st);
    /* Positions for now: the buffer may still move. */
    p->nsl[p->nn++] = (fx_wire_slice){.ptr = (const uint8_t *)(uintptr_t)p->nbytes, .len = h.len};
    p->nbytes += h.len;
    c->pos += fx_rec_step(&h);
    return 0;
}

/* Reads the page [from, to): at most max_records records and
 * FXB_REPLAY_PAGE_BYTES payload bytes (always one record). */
static int read_page(fxb_gpage *p)
{
    uint32_t max = p->to - p->from < p->max_records ? (uint32_t)(p->to - p->from) : p->max_records;
    size_t cap = FXB_REPLAY_PAGE_BYTES;
    p->nsl = calloc(max, sizeof(*p->nsl));
    p->nbuf = malloc(cap);
    if (p->nsl == NULL || p->nbuf == NULL)
        return fail(p, -ENOMEM, "no memory for a page of %s", p->dir);
    int rv = seek(p);
    bool full = false;
    while (rv == 0 && !full && p->nn < max)
        rv = page_add(p, p->from + p->nn, &cap, &full);
    fxb_logcur_close(&p->cur);
    if (rv != 0)
        return rv;
    /* Keep only what is used (a failed shrink keeps the larger block). */
    uint8_t *nb = realloc(p->nbuf, p->nbytes > 0 ? p->nbytes : 1);
    if (nb != NULL)
        p->nbuf = nb;
    fx_wire_slice *ns = realloc(p->nsl, (p->nn > 0 ? p->nn : 1) * sizeof(*ns));
    if (ns != NULL)
        p->nsl = ns;
    for (uint32_t i = 0; i < p->nn; i++)
        p->nsl[i].ptr = p->nbuf + (uintptr_t)p->nsl[i].ptr;
    return 0;
}

static void reader_on_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gpage *p = user;
    p->nn = 0;
    p->nbytes = 0;
    p->cur.err[0] = '\0';
    p->rv = p->from < p->to ? read_page(p) : 0;
    if (p->rv != 0)
        page_drop(&p->nbuf, &p->nsl, &p->nn);
    fx_task_init(&p->task, worker_on_answer, p);
    fx_loop_post(p->w->loop, &p->task);
}

/* ---- worker side ------------------------------------------------------------------------- */

static fx_ratelimit read_rl = FX_RATELIMIT_INIT;

/* A failed read: counted, logged, tried again after FXB_GPAGE_RETRY_NS. */
static void read_failed(fxb_gpage *p, fx_loop *l)
{
    uint64_t now = fx_loop_now(l);
    FX_COUNTER_INC(group_log_read_errors);
    FX_LOG_RATELIMITED(&read_rl, now, FX_LOG_WARN, "broker",
                       "consumer group page of %s at offset %" PRIu64
                       " not read: %s (%s); tried again",
                       p->dir, p->from, fx_strerror(p->rv), p->cur.err);
    p->retry_ns = now + FXB_GPAGE_RETRY_NS;
    if (fx_loop_timer_arm(l, &p->timer, p->retry_ns) == 0)
        p->timer_armed = true;
    else
        p->retry_ns = 0; /* no timer: the next pump asks again */
}

static void worker_on_answer(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_gpage *p = user;
    p->inflight = false;
    if (p->dead) {
        gpage_destroy(p);
        return;
    }
    if (p->rv == FX_ECURSOR_TOO_OLD) {
        /* Retention removed it: the group settles what is below as skipped. */
        if (p->first > p->low)
            p->low = p->first;
    } else if (p->rv != 0) {
        read_failed(p, l);
    } else {
        page_drop(&p->buf, &p->sl, &p->n);
        p->buf = p->nbuf;
        p->sl = p->nsl;
        p->n = p->nn;
        p->base = p->from;
        p->nbuf = NULL;
        p->nsl = NULL;
        p->nn = 0;
        FX_COUNTER_INC(group_log_pages);
    }
    p->cb(p->user);
}

static void on_retry(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gpage *p = user;
    p->timer_armed = false;
    p->retry_ns = 0;
    p->cb(p->user);
}

void fxb_gpage_want(fxb_gpage *p, uint64_t want, uint64_t to)
{
    if (p->inflight || p->retry_ns != 0 || want >= to)
        return;
    if (want >= p->base && want < p->base + p->n)
        return; /* held: the group did not want it from here */
    p->from = want;
    p->to = to;
    p->inflight = true;
    fx_task_init(&p->task, reader_on_task, p);
    fx_loop_post(p->rloop, &p->task);
}
