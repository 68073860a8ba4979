/* Recovery of a durable log at open: lists the segment files, discards what
 * an unfinished rollover left (a headerless newest segment, or an empty one
 * that does not continue its predecessor), checks every sealed segment (the
 * part after its last index entry, or all of it with verify_all_on_open or
 * when the index is missing or inconsistent, which also rebuilds the index),
 * scans the active segment fully and cuts a torn tail: anything that does
 * not decode after the segment's durable point (format.h), or without one
 * (the original's segments) a partial last record or zeros a power cut
 * left. Damage anywhere else, before the point included, refuses the
 * open, naming stream, directory, file and byte position, unless repair is
 * requested: then the log is cut at the first bad record and what was
 * dropped is reported. Runs inside fx_dlog_open, on the opening thread.
 * Also the segment listing and the sparse-index seek that the log's
 * recovery and the replay readers (src/broker/replay.c) share. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "base/log.h"
#include "felix/error.h"
#include "storage/dlog_int.h"
#include "storage/scan.h"

/* ---- listing and index seeks (dlog.h; shared with replay readers) ---------------- */

typedef struct ids {
    uint64_t *v;
    size_t n;
    size_t cap;
} ids;

static int collect(void *user, const char *name, bool is_dir)
{
    ids *l = user;
    uint64_t id;
    if (is_dir || !fx_logfmt_parse_log_name(name, &id))
        return 0;
    uint64_t *v = fx_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 16);
    if (v == NULL)
        return -ENOMEM;
    l->v = v;
    l->v[l->n++] = id;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int fx_dlog_list_segments(fx_sio *io, const char *dir, uint64_t **pids, size_t *pn)
{
    ids l = {0};
    int rv = io->ops->list(io, dir, collect, &l);
    if (rv != 0) {
        free(l.v);
        return rv;
    }
    if (l.n > 1)
        qsort(l.v, l.n, sizeof(*l.v), cmp_u64);
    *pids = l.v;
    *pn = l.n;
    return 0;
}

fx_dlog_pos fx_dlog_index_seek(fx_sio *io, const char *index_path, uint64_t base, uint64_t seg_size,
                               uint64_t off)
{
    fx_dlog_pos e = {.offset = base, .pos = FX_SEG_HEADER_LEN};
    int fd;
    uint64_t size = 0, ibase = 0;
    uint8_t b[FX_IDX_HEADER_LEN];
    if (off < base || io->ops->open(io, index_path, FX_SIO_READ, &fd) != 0)
        return e;
    if (io->ops->fsize(io, fd, &size) != 0 || size < FX_IDX_HEADER_LEN ||
        io->ops->pread(io, fd, b, sizeof(b), 0) != (ssize_t)sizeof(b) ||
        fx_logfmt_idx_header_decode(b, sizeof(b), &ibase) != 0 || ibase != base)
        size = 0;
    /* Binary search for the greatest entry at or below |off| inside the
     * segment's bytes; an entry that cannot belong to the segment is passed
     * over (the index is a hint: the caller checks the record it points at). */
    size_t lo = 0, hi = size > 0 ? (size_t)((size - FX_IDX_HEADER_LEN) / FX_IDX_ENTRY_LEN) : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t o, p;
        if (io->ops->pread(io, fd, b, FX_IDX_ENTRY_LEN,
                           FX_IDX_HEADER_LEN + (uint64_t)mid * FX_IDX_ENTRY_LEN) !=
            FX_IDX_ENTRY_LEN)
            break;
        fx_logfmt_idx_entry_decode(b, &o, &p);
        if (o <= off && p < seg_size) { /* positions ascend with offsets */
            if (o >= base && p >= FX_SEG_HEADER_LEN)
                e = (fx_dlog_pos){.offset = o, .pos = p};
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    io->ops->close(io, fd);
    return e;
}

/* ---- small steps ------------------------------------------------------------------ */

static int corrupt(fx_dlog *log, uint64_t id, uint64_t pos, const char *what)
{
    char file[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(file, id, false);
    return dl_fail(log, FX_ESTORAGE_CORRUPT,
                   "corruption detected: %s (stream=%s, dir=%s, file=%s, position=%" PRIu64 ")",
                   what, log->label, log->dir, file, pos);
}

static int corrupt_scan(fx_dlog *log, uint64_t id, const fx_scan *sc)
{
    char what[160];
    if (sc->status == FX_REC_OUT_OF_ORDER)
        snprintf(what, sizeof(what),
                 "offset out of order (expected %" PRIu64 ", found %" PRIu64 ")", sc->next_offset,
                 sc->bad.offset);
    else if (sc->status == FX_REC_TOO_LARGE)
        snprintf(what, sizeof(what), "record payload %" PRIu32 " exceeds limit %u", sc->bad.len,
                 FX_REC_MAX_PAYLOAD);
    else
        snprintf(what, sizeof(what), "%s", fx_logfmt_rec_status_name(sc->status));
    return corrupt(log, id, sc->end_pos, what);
}

/* Removes segment |id|'s files and syncs the directory. */
static int remove_segment(fx_dlog *log, uint64_t id)
{
    fx_sio *io = log->io;
    char path[PATH_MAX];
    dl_path(log, id, false, path);
    int rv = io->ops->unlink(io, path);
    if (rv != 0 && rv != -ENOENT)
        return rv;
    dl_path(log, id, true, path);
    rv = io->ops->unlink(io, path);
    if (rv != 0 && rv != -ENOENT)
        return rv;
    return io->ops->sync_dir(io, log->dir);
}

static int file_size(fx_dlog *log, uint64_t id, uint64_t *psize)
{
    char path[PATH_MAX];
    dl_path(log, id, false, path);
    int fd;
    int rv = log->io->ops->open(log->io, path, FX_SIO_READ, &fd);
    if (rv != 0)
        return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
    rv = log->io->ops->fsize(log->io, fd, psize);
    log->io->ops->close(log->io, fd);
    return rv;
}

/* Reads and checks the 32-byte header of the open segment |fd|. */
static int read_header(fx_dlog *log, uint64_t id, int fd, uint64_t size, fx_seg_header *h)
{
    uint8_t b[FX_SEG_HEADER_LEN];
    ssize_t n = log->io->ops->pread(log->io, fd, b, sizeof(b), 0);
    if (n < 0)
        return dl_fail(log, (int)n, "reading segment %" PRIu64 ": %s", id, fx_strerror((int)n));
    char why[160];
    if (fx_logfmt_seg_header_decode(b, (size_t)n, h, why, sizeof(why)) != 0)
        return corrupt(log, id, 0, why);
    return 0;
}

/* Scan callback context: rebuilds the index with the writer's rule. */
typedef struct rebuild {
    dl_seg *seg;
    fx_idx_rule rule;
    size_t emitted; /* check_only: entries the rule asks for */
    bool check_only;
} rebuild;

static int on_record(void *user, uint64_t pos, const fx_rec_header *h)
{
    rebuild *r = user;
    if (!fx_idx_rule_next(&r->rule, fx_rec_step(h)))
        return 0;
    if (r->check_only) {
        r->emitted++;
        return 0;
    }
    return dl_idx_push(r->seg, h->offset, pos);
}

/* Full scan of segment |s| from its first record; rebuilds its index. */
static int full_scan(fx_dlog *log, int fd, dl_seg *s, uint64_t file_len, fx_scan *sc,
                     fx_idx_rule *prule)
{
    fx_segwin w;
    int rv = fx_segwin_init(&w, log->io, fd, file_len, FX_SEGWIN_DEFAULT);
    if (rv != 0)
        return rv;
    w.version = s->version;
    s->nidx = 0;
    rebuild r = {.seg = s, .rule = {.spacing = log->cfg.index_spacing_bytes}};
    rv = fx_seg_scan(&w, FX_SEG_HEADER_LEN, s->base, on_record, &r, sc);
    fx_segwin_deinit(&w);
    if (prule != NULL)
        *prule = r.rule;
    return rv;
}

/* Loads the index file of |s| (size |size|) into memory if it is usable:
 * right magic, version and base, entries ascending from (base, 32) inside
 * the file. A torn last entry is ignored. Returns true if usable. */
static bool load_index(fx_dlog *log, dl_seg *s, uint64_t size)
{
    char path[PATH_MAX], *buf = NULL;
    size_t len = 0;
    dl_path(log, s->id, true, path);
    size_t max = (size_t)(size / FX_REC_HEADER_LEN + 2) * FX_IDX_ENTRY_LEN + FX_IDX_HEADER_LEN;
    uint64_t base;
    if (fx_sio_read_file(log->io, path, max, &buf, &len) != 0)
        return false;
    bool ok = fx_logfmt_idx_header_decode((uint8_t *)buf, len, &base) == 0 && base == s->base;
    size_t n = ok ? (len - FX_IDX_HEADER_LEN) / FX_IDX_ENTRY_LEN : 0;
    s->nidx = 0;
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t off, pos;
        fx_logfmt_idx_entry_decode((uint8_t *)buf + FX_IDX_HEADER_LEN + i * FX_IDX_ENTRY_LEN, &off,
                                   &pos);
        const dl_entry *prev = s->nidx > 0 ? &s->idx[s->nidx - 1] : NULL;
        if (prev == NULL)
            ok = off == s->base && pos == FX_SEG_HEADER_LEN;
        else
            ok = off > prev->offset && pos > prev->pos && pos < size;
        ok = ok && dl_idx_push(s, off, pos) == 0;
    }
    free(buf);
    return ok && s->nidx > 0;
}

/* Checks the part of sealed segment |s| after its last index entry: it must
 * decode to the end of the file and need no further index entry. */
static bool tail_matches_index(fx_dlog *log, int fd, dl_seg *s, uint64_t size)
{
    fx_segwin w;
    if (fx_segwin_init(&w, log->io, fd, size, FX_SEGWIN_DEFAULT) != 0)
        return false;
    w.version = s->version;
    dl_entry last = s->idx[s->nidx - 1];
    rebuild r = {.seg = s, .rule = {.spacing = log->cfg.index_spacing_bytes}, .check_only = true};
    fx_scan sc;
    int rv = fx_seg_scan(&w, last.pos, last.offset, on_record, &r, &sc);
    fx_segwin_deinit(&w);
    if (rv != 0 || sc.status != FX_REC_OK || sc.end_pos != size || sc.records == 0 ||
        r.emitted != 1)
        return false;
    s->next = sc.next_offset;
    s->last_ts = sc.last_ts;
    return true;
}

/* Rewrites the index file of |s| (best effort: a failure is counted and the
 * index is rebuilt again at the next open). */
static void store_index(fx_dlog *log, const dl_seg *s, int *pifd)
{
    char path[PATH_MAX];
    dl_path(log, s->id, true, path);
    fx_sio *io = log->io;
    int ifd = -1;
    int rv = io->ops->unlink(io, path);
    if (rv == 0 || rv == -ENOENT)
        rv = io->ops->open(io, path, FX_SIO_CREATE, &ifd);
    if (rv == 0)
        rv = dl_write_index(log, ifd, s);
    if (rv != 0) {
        log->st.index_write_failures++;
        FX_LOG_WARN("storage",
                    "stream=%s sparse index write failed; the index will be rebuilt on next open: "
                    "%s",
                    log->label, fx_strerror(rv));
    }
    if (pifd != NULL && rv == 0) {
        *pifd = ifd;
        return;
    }
    if (ifd >= 0)
        io->ops->close(io, ifd);
    if (pifd != NULL)
        *pifd = -1;
}

/* ---- sealed segments ---------------------------------------------------------------- */

/* Checks sealed segment |id| and appends it to the log. On damage returns
 * FX_ESTORAGE_CORRUPT with |*pheader| telling whether the header itself is
 * bad. */
static int check_sealed(fx_dlog *log, uint64_t id, fx_dlog_recovery *rep, bool *pheader)
{
    char path[PATH_MAX];
    dl_path(log, id, false, path);
    fx_sio *io = log->io;
    int fd;
    uint64_t size;
    fx_seg_header h;
    int rv = io->ops->open(io, path, FX_SIO_READ, &fd);
    if (rv != 0)
        return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
    if ((rv = io->ops->fsize(io, fd, &size)) != 0)
        goto out;
    if ((rv = read_header(log, id, fd, size, &h)) != 0) {
        *pheader = true;
        goto out;
    }
    uint64_t want = log->nsegs > 0 ? dl_active(log)->next : h.base_offset;
    if (h.base_offset != want) {
        char what[160];
        snprintf(what, sizeof(what),
                 "offset out of order (expected %" PRIu64 ", found %" PRIu64 ")", want,
                 h.base_offset);
        rv = corrupt(log, id, 0, what);
        goto out;
    }
    dl_seg *s;
    if ((rv = dl_seg_push(log, id, h.base_offset, &s)) != 0)
        goto out;
    s->version = h.version;
    s->size = size;
    if (!log->cfg.verify_all_on_open && load_index(log, s, size) &&
        tail_matches_index(log, fd, s, size)) {
        dl_seg_forget_index(s);
        goto out;
    }
    fx_scan sc;
    if ((rv = full_scan(log, fd, s, size, &sc, NULL)) != 0)
        goto out;
    if (sc.status != FX_REC_OK || sc.end_pos != size) {
        rv = corrupt_scan(log, id, &sc);
        free(s->idx);
        log->nsegs--;
        goto out;
    }
    s->next = sc.next_offset;
    s->last_ts = sc.last_ts;
    rep->index_rebuilds++;
    store_index(log, s, NULL);
    dl_seg_forget_index(s);
out:
    io->ops->close(io, fd);
    return rv;
}

/* ---- the active segment ----------------------------------------------------------------- */

/* Whether a damaged last record may be cut with repair_checksum_tail. */
static bool tail_repairable(const fx_scan *sc, uint64_t size)
{
    uint64_t pos = sc->end_pos;
    switch (sc->status) {
    case FX_REC_HEADER_CRC:
    case FX_REC_FLAGS:
    case FX_REC_MARK_IN_V2:
        return pos + FX_REC_HEADER_LEN >= size;
    case FX_REC_CRC:
    case FX_REC_OUT_OF_ORDER:
        /* The record reaches the end of the file: it is the last one. */
        return pos + fx_rec_step(&sc->bad) >= size;
    case FX_REC_TOO_LARGE:
        return pos + fx_rec_step(&sc->bad) > size;
    default:
        return false;
    }
}

/* Makes |s| (already in the list, last) the active segment: opens it for
 * writing, rewrites its index and derives the index rule state. */
static int activate(fx_dlog *log, dl_seg *s)
{
    char path[PATH_MAX];
    dl_path(log, s->id, false, path);
    int rv = log->io->ops->open(log->io, path, FX_SIO_WRITE, &log->fd);
    if (rv != 0)
        return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
    if (s->idx == NULL && s->next > s->base) {
        /* A sealed segment becoming active again (its successor was
         * dropped): its index entries are needed in memory once more. */
        fx_scan sc;
        if ((rv = full_scan(log, log->fd, s, s->size, &sc, NULL)) != 0)
            return dl_fail(log, rv, "reading %s: %s", path, fx_strerror(rv));
        if (sc.status != FX_REC_OK || sc.end_pos != s->size)
            return corrupt_scan(log, s->id, &sc);
        s->idx_bytes = 0;
    }
    if ((rv = log->io->ops->fdatasync(log->io, log->fd)) != 0)
        return dl_fail(log, rv, "flushing %s: %s", path, fx_strerror(rv));
    /* Everything recovered is on the disk now: that is the durable point. */
    log->point = 0;
    dl_write_point(log, s->size);
    store_index(log, s, &log->ifd);
    log->idx_broken = log->ifd < 0;
    log->rule = (fx_idx_rule){.spacing = log->cfg.index_spacing_bytes,
                              .started = s->nidx > 0,
                              .since = s->nidx > 0 ? s->size - s->idx[s->nidx - 1].pos : 0};
    log->durable = s->next;
    log->synced_size = s->size;
    return 0;
}

/* Cuts segment |id| (open as |fd|) to |len| and flushes. */
static int cut(fx_dlog *log, int fd, uint64_t len)
{
    int rv = log->io->ops->ftruncate(log->io, fd, len);
    if (rv == 0)
        rv = log->io->ops->fdatasync(log->io, fd);
    return rv == 0 ? 0 : dl_fail(log, rv, "cutting the log: %s", fx_strerror(rv));
}

/* Drops the newest segment, whole (repair or an abandoned roll), and makes
 * its predecessor active. */
static int drop_newest(fx_dlog *log, uint64_t id, uint64_t size, fx_dlog_recovery *rep,
                       bool abandoned, uint64_t now_us)
{
    int rv = remove_segment(log, id);
    if (rv != 0)
        return dl_fail(log, rv, "removing segment %" PRIu64 ": %s", id, fx_strerror(rv));
    if (abandoned) {
        rep->abandoned_segments++;
        FX_LOG_WARN("storage",
                    "stream=%s discarding %s segment left behind by an uninstalled "
                    "rollover (id %" PRIu64 ")",
                    log->label, size < FX_SEG_HEADER_LEN ? "a headerless" : "an empty", id);
    } else {
        rep->repaired = true;
        rep->dropped_bytes += size;
        rep->dropped_segments++;
    }
    if (log->nsegs == 0)
        return dl_create_segment(log, 0, 0, now_us);
    return activate(log, dl_active(log));
}

/* Whether every byte of |fd| from |pos| to |size| is zero: a file system
 * may extend a file before its data reaches the disk, and a crash then
 * leaves zeros. No record is all zeros (its header checksum would not
 * match), so such a tail holds nothing that was written. */
static bool zero_tail(fx_dlog *log, int fd, uint64_t pos, uint64_t size)
{
    uint8_t b[4096];
    while (pos < size) {
        size_t k = size - pos < sizeof(b) ? (size_t)(size - pos) : sizeof(b);
        ssize_t r = log->io->ops->pread(log->io, fd, b, k, pos);
        if (r != (ssize_t)k)
            return false;
        for (size_t i = 0; i < k; i++) {
            if (b[i] != 0)
                return false;
        }
        pos += k;
    }
    return true;
}

/* Whether a segment's header never reached the disk: the file is shorter
 * than a header, or all zeros (its length did, its data did not). Records
 * are appended only after the header's flush, so such a file holds none. */
static bool never_written(fx_dlog *log, int fd, uint64_t size)
{
    return size < FX_SEG_HEADER_LEN || zero_tail(log, fd, 0, size);
}

/* The unit a file system writes back (a page): a power cut can zero whole
 * blocks of an append, never part of one. */
#define FS_BLOCK 4096u

/* The first block boundary after |lo| from which every byte of |fd| up to
 * |size| is zero (|size| when the last block is not), read backwards from
 * the end one block at a time; an unreadable block counts as not zero. */
static uint64_t zero_blocks_from(fx_dlog *log, int fd, uint64_t lo, uint64_t size)
{
    uint64_t b = (size - 1) / FS_BLOCK * FS_BLOCK;
    uint64_t from = size;
    while (b > lo && zero_tail(log, fd, b, from)) {
        from = b;
        b -= FS_BLOCK;
    }
    return from;
}

/* Without a durable point (a segment of the original's): whether the bad
 * record at sc->end_pos is what a power cut leaves when the file's length
 * reached the disk before its data: zeros from a block boundary inside the
 * record to the end of the file, nothing written after them. */
static bool zero_blocks_tail(fx_dlog *log, int fd, const fx_scan *sc, uint64_t size)
{
    uint64_t reach = sc->end_pos + FX_REC_HEADER_LEN;
    if (sc->status == FX_REC_CRC)
        reach = sc->end_pos + fx_rec_step(&sc->bad);
    else if (sc->status != FX_REC_HEADER_CRC)
        return false;
    if (size <= sc->end_pos)
        return false;
    uint64_t from = zero_blocks_from(log, fd, sc->end_pos, size);
    return from < size && from < reach;
}

/* Whether the damage the scan stopped at is a torn tail. With a durable
 * point (|point| > 0) anything from the point on is: those bytes were never
 * covered by a completed flush, so never acknowledged under on_commit.
 * Without one, a partial last record, or zeros a file system left. */
static bool tail_is_torn(fx_dlog *log, int fd, uint64_t size, const fx_scan *sc, uint64_t point)
{
    if (point > 0)
        return sc->end_pos >= point;
    return sc->status == FX_REC_TRUNCATED ||
           (sc->status == FX_REC_HEADER_CRC && zero_tail(log, fd, sc->end_pos, size)) ||
           zero_blocks_tail(log, fd, sc, size);
}

/* Lowers the durable point of segment |fd| to |len| before a repair cuts
 * below it (a lower point is safe at any time; the cut's flush makes both
 * durable). */
static int lower_point(fx_dlog *log, int fd, uint64_t len)
{
    uint8_t b[4];
    fx_be32_put(b, fx_logfmt_point_encode(len));
    int rv = log->io->ops->pwrite(log->io, fd, b, sizeof(b), FX_SEG_POINT_POS);
    return rv == 0 ? 0 : dl_fail(log, rv, "writing the durable point: %s", fx_strerror(rv));
}

/* A segment shorter than its durable point lost flushed bytes: corruption,
 * or with repair the point comes down to what is left. */
static int settle_short(fx_dlog *log, uint64_t id, int fd, uint64_t size, const fx_scan *sc,
                        uint64_t point, fx_dlog_recovery *rep)
{
    char what[160];
    snprintf(what, sizeof(what), "segment ends before its durable point %" PRIu64, point);
    int rv = corrupt(log, id, size, what);
    if (!log->cfg.repair)
        return rv;
    if ((rv = lower_point(log, fd, size)) != 0 || (rv = cut(log, fd, size)) != 0)
        return rv;
    rep->repaired = true;
    rep->dropped_from = sc->next_offset;
    return 0;
}

/* Applies the verdict of the full scan of the active segment, whose header
 * holds durable point |point| (0: none). */
static int settle_tail(fx_dlog *log, uint64_t id, int fd, uint64_t size, const fx_scan *sc,
                       uint64_t point, fx_dlog_recovery *rep)
{
    if (sc->status == FX_REC_OK)
        return point > size ? settle_short(log, id, fd, size, sc, point, rep) : 0;
    bool torn = tail_is_torn(log, fd, size, sc, point);
    bool fix = torn || (log->cfg.repair_checksum_tail && tail_repairable(sc, size));
    if (!fix && !log->cfg.repair)
        return corrupt_scan(log, id, sc);
    int rv = point > sc->end_pos ? lower_point(log, fd, sc->end_pos) : 0;
    if (rv != 0 || (rv = cut(log, fd, sc->end_pos)) != 0)
        return rv;
    uint64_t dropped = size - sc->end_pos;
    char file[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(file, id, false);
    if (fix) {
        rep->truncated_bytes += dropped;
        FX_LOG_WARN(
            "storage",
            "stream=%s repaired a torn tail in the active segment: file=%s position=%" PRIu64
            " discarded_bytes=%" PRIu64 " cause=%s durable_point=%" PRIu64,
            log->label, file, sc->end_pos, dropped, fx_logfmt_rec_status_name(sc->status), point);
    } else {
        rep->repaired = true;
        rep->dropped_bytes += dropped;
        rep->dropped_from = sc->next_offset;
        FX_LOG_WARN("storage",
                    "stream=%s repair cut the log at a bad record: file=%s position=%" PRIu64
                    " dropped_bytes=%" PRIu64 " cause=%s",
                    log->label, file, sc->end_pos, dropped, fx_logfmt_rec_status_name(sc->status));
    }
    return 0;
}

static int open_active(fx_dlog *log, uint64_t id, fx_dlog_recovery *rep, uint64_t now_us)
{
    char path[PATH_MAX];
    dl_path(log, id, false, path);
    fx_sio *io = log->io;
    int fd;
    uint64_t size;
    fx_seg_header h;
    int rv = io->ops->open(io, path, FX_SIO_WRITE, &fd);
    if (rv != 0)
        return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
    if ((rv = io->ops->fsize(io, fd, &size)) != 0)
        goto err_close;
    if (log->nsegs == 0 && id == 0 && never_written(log, fd, size)) {
        /* The very first segment never got its header: no record was ever
         * written; start over. */
        io->ops->close(io, fd);
        rep->abandoned_segments++;
        if ((rv = remove_segment(log, id)) != 0)
            return dl_fail(log, rv, "removing %s: %s", path, fx_strerror(rv));
        return dl_create_segment(log, 0, 0, now_us);
    }
    bool has_prev = log->nsegs > 0;
    if ((rv = read_header(log, id, fd, size, &h)) != 0) {
        if (!has_prev || !log->cfg.repair)
            goto err_close;
        io->ops->close(io, fd);
        rep->dropped_from = dl_active(log)->next;
        return drop_newest(log, id, size, rep, false, now_us);
    }
    uint64_t prev_next = has_prev ? dl_active(log)->next : h.base_offset;
    if (has_prev && h.base_offset != prev_next) {
        io->ops->close(io, fd);
        if (size == FX_SEG_HEADER_LEN)
            return drop_newest(log, id, size, rep, true, now_us);
        if (log->cfg.repair) {
            rep->dropped_from = prev_next;
            return drop_newest(log, id, size, rep, false, now_us);
        }
        char what[160];
        snprintf(what, sizeof(what),
                 "offset out of order (expected %" PRIu64 ", found %" PRIu64 ")", prev_next,
                 h.base_offset);
        return corrupt(log, id, 0, what);
    }
    dl_seg *s;
    if ((rv = dl_seg_push(log, id, h.base_offset, &s)) != 0)
        goto err_close;
    s->version = h.version;
    fx_scan sc;
    if ((rv = full_scan(log, fd, s, size, &sc, &log->rule)) != 0)
        goto err_close;
    uint64_t point = 0;
    if (!fx_logfmt_point_decode(h.point, &point))
        point = 0;
    if ((rv = settle_tail(log, id, fd, size, &sc, point, rep)) != 0)
        goto err_close;
    s->size = sc.end_pos;
    s->next = sc.next_offset;
    s->last_ts = sc.last_ts;
    io->ops->close(io, fd);
    return activate(log, s);
err_close:
    io->ops->close(io, fd);
    return rv;
}

/* Whether the header of segment |id| never reached the disk (never_written). */
static int header_unwritten(fx_dlog *log, uint64_t id, bool *punwritten)
{
    char path[PATH_MAX];
    dl_path(log, id, false, path);
    int fd;
    uint64_t size = 0;
    int rv = log->io->ops->open(log->io, path, FX_SIO_READ, &fd);
    if (rv != 0)
        return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
    if ((rv = log->io->ops->fsize(log->io, fd, &size)) == 0)
        *punwritten = never_written(log, fd, size);
    log->io->ops->close(log->io, fd);
    return rv;
}

/* ---- the whole log ----------------------------------------------------------------------- */

/* Repair at sealed segment index |i|: removes every later segment file. */
static int drop_after(fx_dlog *log, const ids *l, size_t i, fx_dlog_recovery *rep)
{
    for (size_t k = l->n; k-- > i + 1;) {
        uint64_t size = 0;
        int rv = file_size(log, l->v[k], &size);
        if (rv == 0)
            rv = remove_segment(log, l->v[k]);
        if (rv != 0)
            return dl_fail(log, rv, "repair: removing segment %" PRIu64 ": %s", l->v[k],
                           fx_strerror(rv));
        rep->dropped_bytes += size;
        rep->dropped_segments++;
    }
    rep->repaired = true;
    return 0;
}

static void report(fx_dlog *log, fx_dlog_recovery *rep)
{
    if (rep->repaired) {
        uint64_t first_dropped = rep->dropped_from;
        snprintf(rep->message, sizeof(rep->message),
                 "repair dropped %" PRIu64 " bytes (%" PRIu64
                 " whole segments) from offset %" PRIu64 " on: %.300s",
                 rep->dropped_bytes, rep->dropped_segments, first_dropped, log->err);
        FX_LOG_WARN("storage", "stream=%s %s", log->label, rep->message);
    } else if (rep->truncated_bytes > 0) {
        snprintf(rep->message, sizeof(rep->message),
                 "cut a torn tail of %" PRIu64 " bytes; the log ends at offset %" PRIu64,
                 rep->truncated_bytes, fx_dlog_next_offset(log));
        FX_LOG_WARN("storage", "stream=%s recovered log after an unclean shutdown: %s", log->label,
                    rep->message);
    }
}

int dl_recover(fx_dlog *log, uint64_t now_us, fx_dlog_recovery *rep)
{
    int rv = fx_sio_mkdirs(log->io, log->dir);
    if (rv != 0)
        return dl_fail(log, rv, "creating %s: %s", log->dir, fx_strerror(rv));
    ids l = {0};
    if ((rv = fx_dlog_list_segments(log->io, log->dir, &l.v, &l.n)) != 0)
        return dl_fail(log, rv, "listing %s: %s", log->dir, fx_strerror(rv));
    l.cap = l.n;
    bool unwritten = false;
    /* A newest segment whose header never reached the disk is an unfinished
     * rollover. */
    while (l.n > 1 && (rv = header_unwritten(log, l.v[l.n - 1], &unwritten)) == 0 && unwritten) {
        if ((rv = remove_segment(log, l.v[l.n - 1])) != 0)
            break;
        rep->abandoned_segments++;
        FX_LOG_WARN("storage",
                    "stream=%s discarding a headerless segment left behind by an "
                    "uninstalled rollover (id %" PRIu64 ")",
                    log->label, l.v[l.n - 1]);
        l.n--;
    }
    if (rv == 0 && l.n == 0)
        rv = dl_create_segment(log, 0, 0, now_us);
    size_t n = l.n;
    for (size_t i = 0; rv == 0 && i + 1 < n; i++) {
        bool bad_header = false;
        rv = check_sealed(log, l.v[i], rep, &bad_header);
        /* Repair needs a known start: the first segment's header. */
        if (rv == FX_ESTORAGE_CORRUPT && log->cfg.repair && !(bad_header && i == 0)) {
            if ((rv = drop_after(log, &l, i, rep)) == 0)
                n = i + 1;
            break;
        }
    }
    if (rv == 0 && n > 0)
        rv = open_active(log, l.v[n - 1], rep, now_us);
    free(l.v);
    if (rv == 0 && rep->repaired) {
        /* The producers snapshot may describe batches the repair removed:
         * gone, durably, before anything new is appended. */
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", log->dir, FX_PRODUCERS_SNAPSHOT_NAME);
        rv = log->io->ops->unlink(log->io, path);
        rv = rv == 0 ? log->io->ops->sync_dir(log->io, log->dir) : rv == -ENOENT ? 0 : rv;
        if (rv != 0)
            dl_fail(log, rv, "removing %s: %s", path, fx_strerror(rv));
    }
    if (rv == 0)
        report(log, rep);
    return rv;
}
