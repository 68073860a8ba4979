/* Replay of a durable stream's history from disk (replay.h). The reader
 * reads the segment files itself (read-only, through the stream's fx_sio)
 * rather than through the storage thread's fx_dlog, so a catch-up never
 * queues behind appends and flushes: it only reads records below the
 * range's end, which were written before the subscription registered, so
 * the writer's later appends and rollovers do not disturb it (a segment it
 * has open stays readable even if retention unlinks it). Its cursor (open
 * segment, position, window) lives between pages. Worker side: the
 * subscription's worker; reader side: the replay thread. */
#include "broker/replay.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/logcur.h"
#include "broker/sub.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/scan.h"

struct fxb_replay {
    fx_loop *rloop;
    fx_sio *io;
    uint32_t max_records; /* per page */
    char dir[PATH_MAX];
    uint64_t first; /* the log's first offset when the subscription came */
    uint64_t next;  /* the range left: [next, to) */
    uint64_t to;
    fx_task task;  /* worker <-> replay thread; holds a subscription reference */
    fxb_sub *sub;  /* set while a page is being read */
    bool inflight; /* a page is being read */
    bool dead;     /* unsubscribed meanwhile: freed when the page comes back */
    bool failed;   /* a read failed: nothing more is delivered */
    bool done;     /* the whole range went to the feeder */
    fxb_logcur cur; /* reader cursor (replay thread); its err says why a read failed */
    /* the last page (written by the reader, taken by the worker) */
    int rv;
    fx_backlog page;
};

fxb_replay *fxb_replay_new(const char *dir, fx_sio *io, uint64_t first, fx_loop *rloop,
                           uint32_t max_records)
{
    fxb_replay *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    r->io = io != NULL ? io : fx_sio_posix();
    r->first = first;
    r->rloop = rloop;
    r->max_records = max_records > 0 ? max_records : 1;
    fxb_logcur_init(&r->cur, r->io, r->dir);
    return r;
}

static void replay_free(fxb_replay *r)
{
    if (r == NULL)
        return;
    fxb_logcur_close(&r->cur);
    fx_backlog_free(&r->page);
    free(r);
}

/* ---- reader (replay thread) ----------------------------------------------------- */

/* Splits the page's records (payloads in |buf|) into envelopes of at most
 * |per| messages each. */
static int build_page(fxb_replay *r, fx_buf *buf, const fx_wire_slice *sl, uint32_t n,
                      uint64_t base, uint32_t per, uint64_t handle_id)
{
    size_t ne = (n + per - 1) / per;
    r->page.items = calloc(ne, sizeof(*r->page.items));
    if (r->page.items == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i += per) {
        uint32_t k = n - i < per ? n - i : per;
        fx_envelope *e;
        int rv = fx_envelope_new(&e, handle_id, base + i, buf, sl + i, k);
        if (rv != 0)
            return rv;
        r->page.items[r->page.n++] = (fx_env_item){.env = e, .skip = 0};
    }
    return 0;
}

typedef struct page_args {
    uint32_t per;       /* messages per envelope */
    uint64_t handle_id; /* of the stream */
} page_args;

/* A page being read: its buffer (made for its first record), the records'
 * slices and their payload bytes. */
typedef struct page_fill {
    fx_buf *buf;
    fx_wire_slice *sl;
    uint32_t n;
    size_t used;
} page_fill;

/* Adds the record at |r->next| to page |p|, or moves to the next segment
 * at the end of this one. Returns 0 or the error; sets |*pfull| (nothing
 * read) when the record would take the page past FXB_REPLAY_PAGE_BYTES. */
static int page_add(fxb_replay *r, page_fill *p, bool *pfull)
{
    fx_rec_header h;
    fx_rec_status st;
    int rv;
    fxb_logcur *c = &r->cur;
    if ((rv = fx_segwin_record(&c->win, c->pos, r->next, true, false, NULL, &h, &st)) != 0)
        return rv;
    if (st == FX_REC_TRUNCATED && c->pos >= c->win.file_len)
        return fxb_logcur_advance(c, r->next);
    if (st != FX_REC_OK)
        return fxb_logcur_bad(c, st);
    if (p->n > 0 && p->used + h.len > FXB_REPLAY_PAGE_BYTES) {
        *pfull = true;
        return 0;
    }
    if (p->buf == NULL) { /* one buffer per page, sized by its first record */
        size_t cap = h.len > FXB_REPLAY_PAGE_BYTES ? h.len : FXB_REPLAY_PAGE_BYTES;
        if ((rv = fx_buf_new(&p->buf, cap)) != 0)
            return rv;
    }
    uint8_t *dst = fx_buf_data_mut(p->buf) + p->used;
    if ((rv = fx_segwin_record(&c->win, c->pos, r->next, true, true, dst, &h, &st)) != 0)
        return rv;
    if (st != FX_REC_OK)
        return fxb_logcur_bad(c, st);
    p->sl[p->n++] = (fx_wire_slice){.ptr = dst, .len = h.len};
    p->used += h.len;
    c->pos += fx_rec_step(&h);
    r->next++;
    return 0;
}

/* Reads one page from |r->next|: at most |r->max_records| records and
 * FXB_REPLAY_PAGE_BYTES payload bytes (always one record), never past |to|. */
static int read_page(fxb_replay *r, const page_args *a)
{
    int rv;
    uint64_t first;
    if (!r->cur.open && (rv = fxb_logcur_seek(&r->cur, r->next, &first)) != 0)
        return rv;
    page_fill p = {.sl = calloc(r->max_records, sizeof(*p.sl))};
    if (p.sl == NULL)
        return -ENOMEM;
    uint64_t base = r->next;
    bool full = false;
    rv = 0;
    while (rv == 0 && !full && r->next < r->to && p.n < r->max_records)
        rv = page_add(r, &p, &full);
    if (rv == 0)
        rv = p.n > 0 ? build_page(r, p.buf, p.sl, p.n, base, a->per, a->handle_id) : 0;
    if (rv == 0) {
        FX_COUNTER_ADD(storage_replay_records, p.n);
        FX_COUNTER_ADD(storage_replay_bytes, p.used);
    }
    fx_buf_unref(p.buf); /* the envelopes hold their references */
    free(p.sl);
    return rv;
}

static void worker_on_page(fx_loop *l, fx_task *t, void *user);

static void reader_on_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_replay *r = user;
    const fx_broker_opts *o = &r->sub->b->o;
    uint32_t per = o->fanout_batch_size <= 1                          ? 1
                   : o->event_batch_max_events < o->fanout_batch_size ? o->event_batch_max_events
                                                                      : o->fanout_batch_size;
    page_args a = {.per = per, .handle_id = fx_stream_handle_id(r->sub->h)};
    r->rv = read_page(r, &a);
    if (r->rv != 0)
        fx_backlog_free(&r->page);
    fx_task_init(&r->task, worker_on_page, r);
    fx_loop_post(r->sub->w->loop, &r->task);
}

/* ---- worker side ------------------------------------------------------------------ */

static void request_page(fxb_replay *r, fxb_sub *sub)
{
    r->inflight = true;
    r->sub = sub;
    fxb_sub_ref(sub); /* until the page is back */
    fx_task_init(&r->task, reader_on_task, r);
    fx_loop_post(r->rloop, &r->task);
}

static void worker_on_page(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_replay *r = user;
    fxb_sub *sub = r->sub;
    r->inflight = false;
    r->sub = NULL;
    if (r->dead) {
        replay_free(r);
        fxb_sub_unref(sub);
        return;
    }
    if (r->rv != 0) {
        r->failed = true;
        FX_COUNTER_INC(storage_replay_failures);
        FX_LOG_WARN("storage",
                    "subscription %llu: replay from disk failed at offset %" PRIu64
                    ": %s (%s); its event stream ends",
                    (unsigned long long)sub->id, r->next, fx_strerror(r->rv), r->cur.err);
        sub->feed.ending = true; /* finish after what was delivered: no gap follows */
    } else {
        fx_backlog_free(&sub->feed.backlog); /* consumed */
        sub->feed.backlog = r->page;
        sub->feed.backlog_pos = 0;
        r->page = (fx_backlog){0};
        if (r->next >= r->to) {
            r->done = true;
            fxb_logcur_close(&r->cur); /* the replay thread is done with it */
        }
    }
    fxb_sub_post(sub, l, &sub->feed.feed_task);
    fxb_sub_unref(sub);
}

bool fxb_replay_prepare(fxb_sub *sub, fx_stream *st)
{
    fxb_replay *r = sub->feed.replay;
    if (r == NULL)
        return true;
    uint64_t oldest = fx_stream_oldest(st), tail = fx_stream_tail(st);
    uint64_t from = sub->start.kind == FX_START_EARLIEST ? r->first : sub->start.offset;
    bool below = sub->start.kind != FX_START_LATEST && from < oldest && from <= tail;
    if (below && from < r->first) {
        sub->feed.reg_rv = FX_ECURSOR_TOO_OLD;
        sub->feed.available = r->first;
        replay_free(r);
        sub->feed.replay = NULL;
        return false;
    }
    if (!below) { /* the ring covers it (or a cursor error follows) */
        replay_free(r);
        sub->feed.replay = NULL;
        return true;
    }
    r->next = from;
    sub->start = (fx_start){.kind = FX_START_LATEST};
    return true;
}

void fxb_replay_begin(fxb_sub *sub, fx_stream *st)
{
    fxb_replay *r = sub->feed.replay;
    if (r == NULL)
        return;
    /* fxb_replay_prepare made the start the tail, and a subscription
     * registered at the tail gets no backlog: the ring holds nothing at or
     * past the tail, and one added while a fanout is parked starts after
     * the parked envelope (fx_fanout_subs_add), which is below the tail.
     * So the range ends at the tail and the live queue follows it. */
    assert(sub->feed.backlog.n == 0);
    r->to = fx_stream_tail(st);
    FX_COUNTER_INC(storage_replays);
    if (r->next >= r->to)
        r->done = true;
}

bool fxb_replay_holds(fxb_sub *sub)
{
    fxb_replay *r = sub->feed.replay;
    if (r == NULL)
        return false;
    if (r->failed)
        return true;
    if (r->inflight)
        return true;
    if (!r->done) {
        request_page(r, sub);
        return true;
    }
    /* The range is delivered: the live queue follows. */
    replay_free(r);
    sub->feed.replay = NULL;
    return false;
}

bool fxb_replay_pending(const fxb_sub *sub)
{
    return sub->feed.replay != NULL && !sub->feed.replay->failed;
}

void fxb_replay_drop(fxb_sub *sub)
{
    fxb_replay *r = sub->feed.replay;
    sub->feed.replay = NULL;
    if (r == NULL)
        return;
    if (r->inflight)
        r->dead = true; /* worker_on_page frees it */
    else
        replay_free(r);
}
