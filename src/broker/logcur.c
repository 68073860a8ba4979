/* The read-only log cursor of the replay thread's readers (logcur.h). */
#include "broker/logcur.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "storage/dlog.h"

/* Window of the open segment: records stream through it. */
#define LOGCUR_WINDOW (64u << 10)

void fxb_logcur_init(fxb_logcur *c, fx_sio *io, const char *dir)
{
    *c = (fxb_logcur){.io = io, .dir = dir, .fd = -1};
}

void fxb_logcur_close(fxb_logcur *c)
{
    if (!c->open)
        return;
    fx_segwin_deinit(&c->win);
    c->io->ops->close(c->io, c->fd);
    c->fd = -1;
    c->open = false;
}

static int fail(fxb_logcur *c, int rv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(fxb_logcur *c, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return rv;
}

int fxb_logcur_bad(fxb_logcur *c, fx_rec_status st)
{
    return fail(c, FX_ESTORAGE_CORRUPT, "%s at position %" PRIu64 " of segment %" PRIu64 " of %s",
                fx_logfmt_rec_status_name(st), c->pos, c->seg_id, c->dir);
}

/* Opens segment |id| and reads its base offset. -errno (-ENOENT: gone). */
static int seg_open(fxb_logcur *c, uint64_t id, uint64_t *pbase)
{
    char path[PATH_MAX + FX_LOGFMT_FILE_NAME_MAX + 2], name[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(name, id, false);
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    int rv = c->io->ops->open(c->io, path, FX_SIO_READ, &c->fd);
    if (rv != 0)
        return rv;
    uint8_t hdr[FX_SEG_HEADER_LEN];
    fx_seg_header h;
    char why[128];
    uint64_t size = 0;
    ssize_t n = c->io->ops->pread(c->io, c->fd, hdr, sizeof(hdr), 0);
    if (n < 0 || (rv = c->io->ops->fsize(c->io, c->fd, &size)) != 0 ||
        (rv = fx_logfmt_seg_header_decode(hdr, (size_t)(n < 0 ? 0 : n), &h, why, sizeof(why))) !=
            0 ||
        (rv = fx_segwin_init(&c->win, c->io, c->fd, size, LOGCUR_WINDOW)) != 0) {
        c->io->ops->close(c->io, c->fd);
        c->fd = -1;
        return n < 0 ? (int)n : rv;
    }
    c->win.version = h.version; /* a v3 segment may hold producer marks */
    c->open = true;
    c->seg_id = id;
    c->pos = FX_SEG_HEADER_LEN;
    *pbase = h.base_offset;
    return 0;
}

/* The segment of |ids| (ascending) that holds |target|: the last one whose
 * base is at or below it, by binary search over their headers. A segment
 * that cannot be opened was removed by retention (it and every older one
 * count as below) unless it is the newest (a roll under way, holding
 * nothing of the range). 0 with |*pid|, or -ENOENT. */
static int pick_segment(fxb_logcur *c, const uint64_t *ids, size_t n, uint64_t target,
                        uint64_t *pid)
{
    size_t lo = 0, hi = n;
    bool found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t b = 0;
        int rv = seg_open(c, ids[mid], &b);
        if (rv == 0)
            fxb_logcur_close(c);
        if (rv == 0 ? b <= target : mid + 1 < n) {
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

/* |target| is below every segment: the base of the oldest one still there
 * above it, or UINT64_MAX. */
static uint64_t oldest_above(fxb_logcur *c, const uint64_t *ids, size_t n, uint64_t target)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t base;
        if (seg_open(c, ids[i], &base) != 0)
            continue;
        fxb_logcur_close(c);
        return base > target ? base : UINT64_MAX; /* else one came meanwhile that holds it */
    }
    return UINT64_MAX;
}

/* Moves the open segment's cursor (base |base|) to the sparse index's
 * nearest record at or below |target| if that record is there with that
 * offset (the index is a hint), else to its first record; returns the
 * offset of the record at the cursor. */
static uint64_t index_seek(fxb_logcur *c, uint64_t base, uint64_t target)
{
    char path[PATH_MAX + FX_LOGFMT_FILE_NAME_MAX + 2], name[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(name, c->seg_id, true);
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    fx_dlog_pos e = fx_dlog_index_seek(c->io, path, base, c->win.file_len, target);
    fx_rec_header h;
    fx_rec_status st;
    if (e.pos == FX_SEG_HEADER_LEN ||
        fx_segwin_record(&c->win, e.pos, e.offset, true, false, NULL, &h, &st) != 0 ||
        st != FX_REC_OK)
        return base;
    c->pos = e.pos;
    FX_COUNTER_INC(storage_replay_index_seeks);
    return e.offset;
}

/* Skips the records of the open segment from |off| up to |target| by their
 * headers. */
static int skip_to(fxb_logcur *c, uint64_t off, uint64_t target)
{
    for (; off < target; off++) {
        fx_rec_header h;
        fx_rec_status st;
        int rv = fx_segwin_record(&c->win, c->pos, off, true, false, NULL, &h, &st);
        if (rv != 0)
            return fail(c, rv, "read failed in %s", c->dir);
        if (st == FX_REC_TRUNCATED)
            return fail(c, FX_ECURSOR_TOO_OLD, "offset %" PRIu64 " is no longer available", target);
        if (st != FX_REC_OK)
            return fxb_logcur_bad(c, st);
        c->pos += fx_rec_step(&h);
    }
    return 0;
}

int fxb_logcur_seek(fxb_logcur *c, uint64_t target, uint64_t *pfirst)
{
    uint64_t *ids = NULL, chosen = 0, base = 0;
    size_t n = 0;
    *pfirst = UINT64_MAX;
    fxb_logcur_close(c);
    int rv = fx_dlog_list_segments(c->io, c->dir, &ids, &n);
    if (rv != 0) {
        free(ids);
        return fail(c, rv, "cannot list %s", c->dir);
    }
    rv = pick_segment(c, ids, n, target, &chosen);
    if (rv != 0)
        *pfirst = oldest_above(c, ids, n, target);
    free(ids);
    if (rv != 0 || (rv = seg_open(c, chosen, &base)) != 0)
        return fail(c, FX_ECURSOR_TOO_OLD, "offset %" PRIu64 " is no longer available", target);
    return skip_to(c, index_seek(c, base, target), target);
}

int fxb_logcur_advance(fxb_logcur *c, uint64_t next)
{
    uint64_t size = 0;
    int rv = c->io->ops->fsize(c->io, c->fd, &size);
    if (rv != 0)
        return fail(c, rv, "cannot size segment %" PRIu64 " of %s", c->seg_id, c->dir);
    if (size > c->win.file_len) {
        c->win.file_len = size;
        return 0;
    }
    uint64_t id = c->seg_id + 1, base;
    fxb_logcur_close(c);
    if ((rv = seg_open(c, id, &base)) != 0)
        return fail(c, FX_ESTORAGE_ERROR, "segment %" PRIu64 " of %s is missing", id, c->dir);
    if (base != next)
        return fail(c, FX_ESTORAGE_CORRUPT,
                    "segment %" PRIu64 " of %s starts at %" PRIu64 ", expected %" PRIu64, id,
                    c->dir, base, next);
    return 0;
}
