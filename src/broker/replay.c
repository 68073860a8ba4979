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
#include "broker/sub.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/scan.h"

/* Read window of the reader (as the log's own reads). */
#define REPLAY_WINDOW (64u << 10)

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
    /* reader cursor (replay thread) */
    bool open;
    int fd;
    uint64_t seg_id;
    uint64_t pos;
    fx_segwin win;
    /* the last page (written by the reader, taken by the worker) */
    int rv;
    fx_backlog page;
    char err[256];
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
    r->fd = -1;
    return r;
}

static void reader_close(fxb_replay *r)
{
    if (!r->open)
        return;
    fx_segwin_deinit(&r->win);
    r->io->ops->close(r->io, r->fd);
    r->fd = -1;
    r->open = false;
}

static void replay_free(fxb_replay *r)
{
    if (r == NULL)
        return;
    reader_close(r);
    fx_backlog_free(&r->page);
    free(r);
}

/* ---- reader (replay thread) ----------------------------------------------------- */

static int fail(fxb_replay *r, int rv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(fxb_replay *r, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    return rv;
}

/* Opens segment |id| and reads its base offset. -ENOENT if it is gone. */
static int seg_open(fxb_replay *r, uint64_t id, uint64_t *pbase)
{
    char path[PATH_MAX + FX_LOGFMT_FILE_NAME_MAX + 2], name[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(name, id, false);
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    int rv = r->io->ops->open(r->io, path, FX_SIO_READ, &r->fd);
    if (rv != 0)
        return rv;
    uint8_t hdr[FX_SEG_HEADER_LEN];
    fx_seg_header h;
    char why[128];
    uint64_t size = 0;
    ssize_t n = r->io->ops->pread(r->io, r->fd, hdr, sizeof(hdr), 0);
    if (n < 0 || (rv = r->io->ops->fsize(r->io, r->fd, &size)) != 0 ||
        (rv = fx_logfmt_seg_header_decode(hdr, (size_t)(n < 0 ? 0 : n), &h, why, sizeof(why))) !=
            0 ||
        (rv = fx_segwin_init(&r->win, r->io, r->fd, size, REPLAY_WINDOW)) != 0) {
        r->io->ops->close(r->io, r->fd);
        r->fd = -1;
        return n < 0 ? (int)n : rv;
    }
    r->open = true;
    r->seg_id = id;
    r->pos = FX_SEG_HEADER_LEN;
    *pbase = h.base_offset;
    return 0;
}

/* The segment of |ids| (ascending) that holds offset |r->next|: the last
 * one whose base is at or below it, found by binary search over their
 * headers. A segment that cannot be opened was removed by retention (it and
 * every older one count as below) unless it is the newest (a roll under
 * way, holding nothing of the range). Returns 0 with |*pid|, or -ENOENT. */
static int pick_segment(fxb_replay *r, const uint64_t *ids, size_t n, uint64_t *pid)
{
    size_t lo = 0, hi = n;
    bool found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t b = 0;
        int rv = seg_open(r, ids[mid], &b);
        if (rv == 0)
            reader_close(r);
        if (rv == 0 ? b <= r->next : mid + 1 < n) {
            if (rv == 0) {
                *pid = ids[mid];
                found = true;
            }
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return found ? 0 : -ENOENT;
}

/* Moves the cursor of the open segment (base |base|) to the nearest record
 * at or below |r->next| that its sparse index names, if that record is
 * there with that offset (the index is a hint), else to its first record.
 * Returns the offset of the record at the cursor. */
static uint64_t index_seek(fxb_replay *r, uint64_t base)
{
    char path[PATH_MAX + FX_LOGFMT_FILE_NAME_MAX + 2], name[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(name, r->seg_id, true);
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    fx_dlog_pos e = fx_dlog_index_seek(r->io, path, base, r->win.file_len, r->next);
    fx_rec_header h;
    fx_rec_status st;
    if (e.pos == FX_SEG_HEADER_LEN ||
        fx_segwin_record(&r->win, e.pos, e.offset, true, false, NULL, &h, &st) != 0 ||
        st != FX_REC_OK)
        return base;
    r->pos = e.pos;
    FX_COUNTER_INC(storage_replay_index_seeks);
    return e.offset;
}

/* Opens the segment holding offset |r->next| and moves the cursor to it:
 * to the sparse index's nearest entry below it, then record by record. */
static int seek(fxb_replay *r)
{
    uint64_t *ids = NULL, chosen = 0, base = 0;
    size_t n = 0;
    int rv = fx_dlog_list_segments(r->io, r->dir, &ids, &n);
    if (rv != 0)
        return fail(r, rv, "cannot list %s", r->dir);
    rv = pick_segment(r, ids, n, &chosen);
    free(ids);
    if (rv != 0 || (rv = seg_open(r, chosen, &base)) != 0)
        return fail(r, FX_ECURSOR_TOO_OLD, "offset %" PRIu64 " is no longer available", r->next);
    /* Skip the records below |next| by their headers. */
    for (uint64_t off = index_seek(r, base); off < r->next;) {
        fx_rec_header h;
        fx_rec_status st;
        if ((rv = fx_segwin_record(&r->win, r->pos, off, true, false, NULL, &h, &st)) != 0)
            return fail(r, rv, "read failed in %s", r->dir);
        if (st != FX_REC_OK)
            return fail(r, st == FX_REC_TRUNCATED ? FX_ECURSOR_TOO_OLD : FX_ESTORAGE_CORRUPT,
                        "%s at position %" PRIu64 " of segment %" PRIu64,
                        fx_logfmt_rec_status_name(st), r->pos, r->seg_id);
        r->pos += FX_REC_HEADER_LEN + h.len;
        off++;
    }
    return 0;
}

/* At the end of the open segment's known bytes: the file grew (the active
 * segment) or the range goes on in the next segment. */
static int advance(fxb_replay *r)
{
    uint64_t size = 0;
    int rv = r->io->ops->fsize(r->io, r->fd, &size);
    if (rv != 0)
        return fail(r, rv, "cannot size segment %" PRIu64, r->seg_id);
    if (size > r->win.file_len) {
        r->win.file_len = size;
        return 0;
    }
    uint64_t id = r->seg_id + 1, base;
    reader_close(r);
    if ((rv = seg_open(r, id, &base)) != 0)
        return fail(r, FX_ESTORAGE_ERROR, "segment %" PRIu64 " of %s is missing", id, r->dir);
    if (base != r->next)
        return fail(r, FX_ESTORAGE_CORRUPT,
                    "segment %" PRIu64 " starts at %" PRIu64 ", expected %" PRIu64, id, base,
                    r->next);
    return 0;
}

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

/* The record at |r->pos| has status |st| (not OK): fails the reader. */
static int bad_record(fxb_replay *r, fx_rec_status st)
{
    return fail(r, FX_ESTORAGE_CORRUPT, "%s at position %" PRIu64 " of segment %" PRIu64,
                fx_logfmt_rec_status_name(st), r->pos, r->seg_id);
}

/* Adds the record at |r->next| to page |p|, or moves to the next segment
 * at the end of this one. Returns 0 or the error; sets |*pfull| (nothing
 * read) when the record would take the page past FXB_REPLAY_PAGE_BYTES. */
static int page_add(fxb_replay *r, page_fill *p, bool *pfull)
{
    fx_rec_header h;
    fx_rec_status st;
    int rv;
    if ((rv = fx_segwin_record(&r->win, r->pos, r->next, true, false, NULL, &h, &st)) != 0)
        return rv;
    if (st == FX_REC_TRUNCATED && r->pos >= r->win.file_len)
        return advance(r);
    if (st != FX_REC_OK)
        return bad_record(r, st);
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
    if ((rv = fx_segwin_record(&r->win, r->pos, r->next, true, true, dst, &h, &st)) != 0)
        return rv;
    if (st != FX_REC_OK)
        return bad_record(r, st);
    p->sl[p->n++] = (fx_wire_slice){.ptr = dst, .len = h.len};
    p->used += h.len;
    r->pos += FX_REC_HEADER_LEN + h.len;
    r->next++;
    return 0;
}

/* Reads one page from |r->next|: at most |r->max_records| records and
 * FXB_REPLAY_PAGE_BYTES payload bytes (always one record), never past |to|. */
static int read_page(fxb_replay *r, const page_args *a)
{
    int rv;
    if (!r->open && (rv = seek(r)) != 0)
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
                    (unsigned long long)sub->id, r->next, fx_strerror(r->rv), r->err);
        sub->feed.ending = true; /* finish after what was delivered: no gap follows */
    } else {
        fx_backlog_free(&sub->feed.backlog); /* consumed */
        sub->feed.backlog = r->page;
        sub->feed.backlog_pos = 0;
        r->page = (fx_backlog){0};
        if (r->next >= r->to) {
            r->done = true;
            reader_close(r); /* the replay thread is done with it */
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
