/* fx_dlog: appending, rolling, flushing, range reads and retention of one
 * stream's durable log (dlog.h). Recovery at open lives in dlog_open.c.
 * Threads: the log belongs to one owner thread, which makes every call; the
 * only exception is fx_dlog_flush_run, the fdatasync of a flush in flight,
 * which another thread may run meanwhile: it reads nothing but the
 * fx_dlog_flush the owner filled before handing it over, and the owner
 * keeps that segment's handle open and active until it completes the flush.
 * Every call may block on the disk. */
#include "storage/dlog.h"

#include <assert.h>
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

/* Window of range reads. */
#define READ_WINDOW (64u << 10)

/* ---- configuration -------------------------------------------------------- */

void fx_dlog_config_default(fx_dlog_config *c)
{
    *c = (fx_dlog_config){
        .segment_bytes = FX_DLOG_DEFAULT_SEGMENT_BYTES,
        .index_spacing_bytes = FX_DLOG_DEFAULT_INDEX_SPACING,
        .preallocate = true,
        .producer_ttl_s = FX_PRODUCERS_DEFAULT_TTL_S,
    };
}

int fx_dlog_config_check(const fx_dlog_config *c, char *err, size_t errlen)
{
    if (c->segment_bytes < FX_SEG_MIN_BYTES) {
        snprintf(err, errlen, "segment_bytes is too small to hold a single record");
        return FX_ECONFIG;
    }
    if (c->index_spacing_bytes == 0) {
        snprintf(err, errlen, "index_spacing_bytes must be greater than zero");
        return FX_ECONFIG;
    }
    return 0;
}

/* ---- helpers shared with dlog_open.c ---------------------------------------- */

void dl_path(const fx_dlog *log, uint64_t id, bool index, char *out)
{
    char name[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(name, id, index);
    int n = snprintf(out, PATH_MAX, "%s/%s", log->dir, name);
    assert(n > 0 && n < PATH_MAX); /* fx_dlog_open refused a directory too long for it */
    (void)n;
}

int dl_fail(fx_dlog *log, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log->err, sizeof(log->err), fmt, ap);
    va_end(ap);
    return rv;
}

int dl_idx_push(dl_seg *s, uint64_t offset, uint64_t pos)
{
    dl_entry *v = fx_grow(s->idx, &s->idx_cap, s->nidx + 1, sizeof(*v), 16);
    if (v == NULL)
        return -ENOMEM;
    s->idx = v;
    s->idx[s->nidx++] = (dl_entry){.offset = offset, .pos = pos};
    return 0;
}

int dl_seg_push(fx_dlog *log, uint64_t id, uint64_t base, dl_seg **ps)
{
    dl_seg *v = fx_grow(log->segs, &log->segs_cap, log->nsegs + 1, sizeof(*v), 8);
    if (v == NULL)
        return -ENOMEM;
    log->segs = v;
    dl_seg *s = &log->segs[log->nsegs++];
    *s = (dl_seg){.id = id, .base = base, .next = base, .size = FX_SEG_HEADER_LEN};
    *ps = s;
    return 0;
}

int dl_write_index(fx_dlog *log, int ifd, const dl_seg *s)
{
    size_t len = FX_IDX_HEADER_LEN + s->nidx * FX_IDX_ENTRY_LEN;
    uint8_t *b = malloc(len);
    if (b == NULL)
        return -ENOMEM;
    fx_logfmt_idx_header_encode(b, s->base);
    for (size_t i = 0; i < s->nidx; i++)
        fx_logfmt_idx_entry_encode(b + FX_IDX_HEADER_LEN + i * FX_IDX_ENTRY_LEN, s->idx[i].offset,
                                   s->idx[i].pos);
    fx_sio *io = log->io;
    int rv = io->ops->pwrite(io, ifd, b, len, 0);
    free(b);
    if (rv == 0)
        rv = io->ops->ftruncate(io, ifd, len);
    if (rv == 0)
        rv = io->ops->fdatasync(io, ifd);
    return rv;
}

/* Opens (creating or replacing) the index file of segment |id| with only a
 * header for |base|. */
static int create_index(fx_dlog *log, uint64_t id, uint64_t base, int *pifd)
{
    char path[PATH_MAX];
    dl_path(log, id, true, path);
    fx_sio *io = log->io;
    int rv = io->ops->unlink(io, path); /* a stale one, left by a deletion cut short */
    if (rv != 0 && rv != -ENOENT)
        return rv;
    if ((rv = io->ops->open(io, path, FX_SIO_CREATE, pifd)) != 0)
        return rv;
    uint8_t h[FX_IDX_HEADER_LEN];
    fx_logfmt_idx_header_encode(h, base);
    if ((rv = io->ops->pwrite(io, *pifd, h, sizeof(h), 0)) != 0) {
        io->ops->close(io, *pifd);
        return rv;
    }
    return 0;
}

/* Creates and fills the file of a new segment; returns its handle. */
static int create_segment_file(fx_dlog *log, const char *path, uint64_t base, uint64_t now_us,
                               int *pfd)
{
    fx_sio *io = log->io;
    int rv = io->ops->open(io, path, FX_SIO_CREATE, pfd);
    if (rv != 0)
        return rv;
    if (log->cfg.preallocate) {
        rv = io->ops->fallocate(io, *pfd, log->cfg.segment_bytes);
        if (rv == -EOPNOTSUPP || rv == -ENOSYS)
            rv = 0; /* the file system cannot reserve: fine, only slower */
    }
    if (rv == 0)
        rv = io->ops->sync_dir(io, log->dir);
    uint8_t h[FX_SEG_HEADER_LEN];
    /* The header carries the point 32 from the start: it is only believed
     * when the header decodes, and then those 32 bytes are on the disk. */
    fx_logfmt_seg_header_encode(
        h, &(fx_seg_header){.version = log->v3 ? FX_SEG_VERSION_V3 : FX_SEG_VERSION,
                            .base_offset = base,
                            .created_us = now_us,
                            .point = fx_logfmt_point_encode(FX_SEG_HEADER_LEN)});
    if (rv == 0)
        rv = io->ops->pwrite(io, *pfd, h, sizeof(h), 0);
    if (rv == 0)
        rv = io->ops->fdatasync(io, *pfd);
    if (rv != 0)
        io->ops->close(io, *pfd);
    return rv;
}

int dl_create_segment(fx_dlog *log, uint64_t id, uint64_t base, uint64_t now_us)
{
    fx_sio *io = log->io;
    char path[PATH_MAX], ipath[PATH_MAX];
    dl_path(log, id, false, path);
    dl_path(log, id, true, ipath);
    int fd = -1, ifd = -1;
    dl_seg *s;
    int rv = create_segment_file(log, path, base, now_us, &fd);
    if (rv != 0) {
        (void)io->ops->unlink(io, path); /* best effort; recovery discards a headerless one */
        return dl_fail(log, rv, "creating segment %s: %s", path, fx_strerror(rv));
    }
    if ((rv = create_index(log, id, base, &ifd)) != 0) {
        /* The index is rebuilt at the next open; count and go on without one. */
        log->st.index_write_failures++;
        FX_LOG_WARN("storage",
                    "stream=%s sparse index write failed; the index will be rebuilt "
                    "on next open: %s",
                    log->label, fx_strerror(rv));
        ifd = -1;
    }
    if ((rv = dl_seg_push(log, id, base, &s)) != 0) {
        io->ops->close(io, fd);
        if (ifd >= 0)
            io->ops->close(io, ifd);
        return rv;
    }
    s->version = log->v3 ? FX_SEG_VERSION_V3 : FX_SEG_VERSION;
    log->fd = fd;
    log->ifd = ifd;
    log->rule = (fx_idx_rule){.spacing = log->cfg.index_spacing_bytes};
    log->idx_broken = ifd < 0;
    log->synced_size = FX_SEG_HEADER_LEN;
    log->point = fx_logfmt_point_encode(FX_SEG_HEADER_LEN);
    return 0;
}

/* Why the point can never be ahead of the data after a crash: it is written
 * only after the fdatasync that covered |synced_len| bytes returned, so
 * whenever the word reaches the disk (at the next flush, at the seal, or
 * earlier by writeback), those bytes are there already. A torn word fails
 * its check and reads as no point; a word that reaches the disk late, or
 * not at all, is an older point, which only treats more of the tail as
 * unacknowledged. Writing it before the fdatasync of its own bytes would be
 * wrong: the device may persist the header's sector and not the data. A
 * point that has to go down (repair cutting below it) is written before the
 * cut's flush instead (dlog_open.c): a lower point is safe at any time. */
void dl_write_point(fx_dlog *log, uint64_t synced_len)
{
    uint32_t w = fx_logfmt_point_encode(synced_len);
    if (w == log->point)
        return;
    uint8_t b[4];
    fx_be32_put(b, w);
    int rv = log->io->ops->pwrite(log->io, log->fd, b, sizeof(b), FX_SEG_POINT_POS);
    if (rv == 0) {
        log->point = w;
        log->point_dirty = true;
        return;
    }
    log->st.point_write_failures++;
    if (!log->point_warned)
        FX_LOG_WARN("storage",
                    "stream=%s writing the durable point failed; recovery will treat more of "
                    "the tail as unacknowledged: %s",
                    log->label, fx_strerror(rv));
    log->point_warned = true;
}

/* ---- open / close ---------------------------------------------------------- */

int fx_dlog_open(fx_dlog **plog, const char *dir, const fx_dlog_config *cfg, uint64_t now_us,
                 fx_dlog_recovery *rep)
{
    fx_dlog_recovery dummy;
    if (rep == NULL)
        rep = &dummy;
    *rep = (fx_dlog_recovery){0};
    int rv = fx_dlog_config_check(cfg, rep->message, sizeof(rep->message));
    if (rv != 0)
        return rv;
    /* Every file of the log is |dir|, '/' and a name of bounded length
     * (dl_path): checked once here, so no path is ever cut short. */
    if (strlen(dir) + 1 + FX_LOGFMT_FILE_NAME_MAX > PATH_MAX) {
        snprintf(rep->message, sizeof(rep->message),
                 "the log directory's path is too long (%zu bytes, at most %d)", strlen(dir),
                 PATH_MAX - 1 - FX_LOGFMT_FILE_NAME_MAX);
        return -ENAMETOOLONG;
    }
    fx_dlog *log = calloc(1, sizeof(*log));
    if (log == NULL || (log->dir = strdup(dir)) == NULL) {
        free(log);
        return -ENOMEM;
    }
    log->cfg = *cfg;
    log->cfg.label = NULL;
    log->io = cfg->io != NULL ? cfg->io : fx_sio_posix();
    log->fd = log->ifd = -1;
    snprintf(log->label, sizeof(log->label), "%s", cfg->label != NULL ? cfg->label : dir);
    if ((rv = fx_producers_new(&log->prod, cfg->max_producers, cfg->producer_ttl_s)) != 0) {
        free(log->dir);
        free(log);
        return rv;
    }
    if ((rv = dl_recover(log, now_us, rep)) == 0 &&
        (rv = dl_marks_rebuild(log, now_us, rep)) != 0)
        snprintf(rep->message, sizeof(rep->message), "%s", log->err);
    if (rv != 0) {
        if (rep->message[0] == '\0')
            snprintf(rep->message, sizeof(rep->message), "%s", log->err);
        fx_dlog_close(log, false);
        return rv;
    }
    log->err[0] = '\0';
    *plog = log;
    return 0;
}

int fx_dlog_close(fx_dlog *log, bool sync)
{
    if (log == NULL)
        return 0;
    /* The flush's thread may still use the handle closed below. */
    assert(!log->flushing);
    int rv = 0;
    if (sync && log->fd >= 0)
        rv = fx_dlog_sync(log, NULL);
    /* A clean close has no next flush for the last point to ride on. */
    if (sync && rv == 0 && log->fd >= 0 && log->point_dirty && !log->failed)
        rv = log->io->ops->fdatasync(log->io, log->fd);
    if (log->fd >= 0)
        log->io->ops->close(log->io, log->fd);
    if (log->ifd >= 0)
        log->io->ops->close(log->io, log->ifd);
    for (size_t i = 0; i < log->nsegs; i++)
        free(log->segs[i].idx);
    free(log->segs);
    free(log->enc);
    fx_producers_free(log->prod);
    free(log->dir);
    free(log);
    return rv;
}

/* ---- append ------------------------------------------------------------------ */

/* Counts and logs a failed write of the sparse index (error |rv|): the log
 * goes on, and the next open rebuilds the index. */
static void index_write_failed(fx_dlog *log, int rv)
{
    log->st.index_write_failures++;
    FX_LOG_WARN("storage",
                "stream=%s sparse index write failed; the index will be rebuilt on next open: %s",
                log->label, fx_strerror(rv));
}

/* Seals the active segment (flush, complete index, drop the preallocation)
 * and creates the next one at the tail. On failure the old segment stays
 * active (sealing it changed nothing a later append cannot continue). */
static int roll(fx_dlog *log, uint64_t now_us)
{
    fx_sio *io = log->io;
    dl_seg *a = dl_active(log);
    int rv = io->ops->fdatasync(io, log->fd);
    if (rv == 0)
        dl_write_point(log, a->size); /* made durable by the seal's second flush */
    if (rv == 0 && log->ifd >= 0) {
        int irv =
            log->idx_broken ? dl_write_index(log, log->ifd, a) : io->ops->fdatasync(io, log->ifd);
        if (irv != 0)
            index_write_failed(log, irv);
    }
    if (rv == 0)
        rv = io->ops->ftruncate(io, log->fd, a->size);
    if (rv == 0)
        rv = io->ops->fdatasync(io, log->fd);
    if (rv != 0) {
        /* A failed flush may have lost pages: stop, as fx_dlog_sync does. */
        log->failed = true;
        log->st.sync_failures++;
        return dl_fail(log, rv, "stream=%s sealing segment %" PRIu64 " failed: %s", log->label,
                       a->id, fx_strerror(rv));
    }
    log->durable = a->next;
    log->synced_size = a->size;
    int old_fd = log->fd, old_ifd = log->ifd;
    if ((rv = dl_create_segment(log, a->id + 1, a->next, now_us)) != 0) {
        log->st.roll_failures++;
        return rv;
    }
    dl_seg_forget_index(&log->segs[log->nsegs - 2]);
    io->ops->close(io, old_fd);
    if (old_ifd >= 0)
        io->ops->close(io, old_ifd);
    log->st.rolls++;
    if (log->v3)
        dl_marks_snapshot(log);
    return 0;
}

/* The mark of record |i| of an append under mark |m| (NULL: none). */
static uint32_t rec_mark(const fx_dlog_mark *m, size_t i)
{
    if (m == NULL)
        return 0;
    return m->held == 0 && i == 0 ? FX_REC_MARK_OPEN : FX_REC_MARK_CONT;
}

/* Bytes of record |i| of an append under mark |m|, header and tag included. */
static uint64_t rec_bytes(const fx_dlog_iov *recs, const fx_dlog_mark *m, size_t i)
{
    return FX_REC_HEADER_LEN + (rec_mark(m, i) == FX_REC_MARK_OPEN ? FX_REC_TAG_LEN : 0) +
           (uint64_t)recs[i].len;
}

/* Encodes the batch (|total| bytes, records with their headers and, under
 * mark |m|, the tag) into log->enc. Returns 0 or -ENOMEM. */
static int encode_batch(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t first,
                        uint64_t ts_us, size_t total, const fx_dlog_mark *m)
{
    uint8_t *grown = fx_grow(log->enc, &log->enc_cap, total, 1, 64 * 1024);
    if (grown == NULL)
        return -ENOMEM;
    log->enc = grown;
    uint8_t *p = log->enc;
    fx_rec_tag tag = {0};
    if (m != NULL)
        tag = (fx_rec_tag){.producer_id = m->producer_id, .sequence = m->sequence, .len = m->count};
    for (size_t i = 0; i < n; i++) {
        size_t h = fx_logfmt_rec_head_encode(p, first + i, ts_us, rec_mark(m, i), &tag,
                                             recs[i].data, recs[i].len);
        if (recs[i].len > 0)
            memcpy(p + h, recs[i].data, recs[i].len);
        p += h + recs[i].len;
    }
    return 0;
}

/* Frees an encoding buffer grown past FX_DLOG_ENC_KEEP_BYTES by the append
 * just written: the next one allocates what it needs (a log that took one
 * 16 MiB frame would otherwise hold 16 MiB until it is closed). */
static void enc_trim(fx_dlog *log)
{
    if (log->enc_cap <= FX_DLOG_ENC_KEEP_BYTES)
        return;
    free(log->enc);
    log->enc = NULL;
    log->enc_cap = 0;
}

/* Entries of one append written to the index file per pwrite. */
#define INDEX_WRITE_CHUNK 256

/* Writes in-memory entries [from, a->nidx) of the active segment to its
 * index file, where they follow each other, in as few pwrites as the chunk
 * allows (one for every append of a few MiB). */
static int index_write_entries(fx_dlog *log, const dl_seg *a, size_t from)
{
    uint8_t b[INDEX_WRITE_CHUNK * FX_IDX_ENTRY_LEN];
    while (from < a->nidx) {
        size_t n = a->nidx - from < INDEX_WRITE_CHUNK ? a->nidx - from : INDEX_WRITE_CHUNK;
        for (size_t i = 0; i < n; i++)
            fx_logfmt_idx_entry_encode(b + i * FX_IDX_ENTRY_LEN, a->idx[from + i].offset,
                                       a->idx[from + i].pos);
        int rv = log->io->ops->pwrite(log->io, log->ifd, b, n * FX_IDX_ENTRY_LEN,
                                      FX_IDX_HEADER_LEN + from * FX_IDX_ENTRY_LEN);
        if (rv != 0)
            return rv;
        from += n;
    }
    return 0;
}

/* Adds the index entries of the batch just written at |pos|: in memory,
 * then to the index file without a flush, all of them in one write (a
 * failed write only marks the index for a rewrite at seal). */
static void index_batch(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t first,
                        uint64_t pos, const fx_dlog_mark *m)
{
    dl_seg *a = dl_active(log);
    size_t before = a->nidx;
    int rv = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t sz = rec_bytes(recs, m, i);
        if (fx_idx_rule_next(&log->rule, sz)) {
            int prv = dl_idx_push(a, first + i, pos);
            if (rv == 0)
                rv = prv;
        }
        pos += sz;
    }
    if (rv == 0 && log->ifd >= 0 && !log->idx_broken)
        rv = index_write_entries(log, a, before);
    if (rv != 0 && !log->idx_broken) {
        log->idx_broken = true;
        index_write_failed(log, rv);
    }
}

/* The roll rule: a non-empty active segment rolls when a batch of |bytes|
 * does not fit in it; the batch then opens the new one. */
static bool batch_rolls(const fx_dlog *log, uint64_t bytes)
{
    const dl_seg *a = &log->segs[log->nsegs - 1];
    return a->next > a->base && a->size + bytes > log->cfg.segment_bytes;
}

/* Whether batch |m| (held > 0) is the one open at the tail with m->held
 * records. */
static bool continues_open_batch(const fx_dlog *log, const fx_dlog_mark *m)
{
    return log->ob.open && log->ob.at == fx_dlog_next_offset(log) &&
           log->ob.producer_id == m->producer_id && log->ob.sequence == m->sequence &&
           log->ob.count == m->count && log->ob.held == m->held;
}

/* Before the first marked record: a v2 active segment is rolled, and every
 * segment from now on is v3. */
static int go_v3(fx_dlog *log, uint64_t ts_us)
{
    log->v3 = true;
    if (dl_active(log)->version >= FX_SEG_VERSION_V3)
        return 0;
    if (log->flushing) {
        log->v3 = false;
        return -EBUSY; /* the flush in flight holds the active segment */
    }
    int rv = roll(log, ts_us);
    if (rv != 0) {
        log->v3 = false;
        log->st.append_failures++;
        return rv;
    }
    log->st.v3_rolls++;
    return 0;
}

static int append(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t ts_us,
                  const fx_dlog_mark *m, uint64_t *pfirst)
{
    if (log->failed)
        return FX_ESTORAGE_FAILED;
    if (n == 0)
        return -EINVAL;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].len > FX_REC_MAX_PAYLOAD)
            return FX_ESTORAGE_TOO_LARGE;
        total += rec_bytes(recs, m, i);
    }
    if (total > SIZE_MAX / 2)
        return FX_ESTORAGE_TOO_LARGE;
    int rv;
    if (m != NULL && dl_active(log)->version < FX_SEG_VERSION_V3 && (rv = go_v3(log, ts_us)) != 0)
        return rv;
    dl_seg *a = dl_active(log);
    if (batch_rolls(log, total)) {
        if (log->flushing)
            return -EBUSY; /* the flush in flight holds the active segment */
        if ((rv = roll(log, ts_us)) != 0) {
            log->st.append_failures++;
            return rv;
        }
        a = dl_active(log);
    }
    uint64_t first = a->next;
    if ((rv = encode_batch(log, recs, n, first, ts_us, (size_t)total, m)) != 0)
        return rv;
    fx_sio *io = log->io;
    rv = io->ops->pwrite(io, log->fd, log->enc, (size_t)total, a->size);
    enc_trim(log);
    if (rv != 0) {
        log->st.append_failures++;
        int trv = io->ops->ftruncate(io, log->fd, a->size);
        if (trv != 0) {
            log->failed = true;
            return dl_fail(log, rv,
                           "stream=%s segment writer stopped: append failed (%s) and could not "
                           "be rolled back (%s)",
                           log->label, fx_strerror(rv), fx_strerror(trv));
        }
        return dl_fail(log, rv, "stream=%s append failed: %s", log->label, fx_strerror(rv));
    }
    index_batch(log, recs, n, first, a->size, m);
    a->size += total;
    a->next += n;
    a->last_ts = ts_us;
    log->st.append_batches++;
    log->st.append_records += n;
    log->st.append_bytes += total;
    if (pfirst != NULL)
        *pfirst = first;
    log->ob.open = false;
    if (m != NULL) {
        uint64_t bfirst = m->held == 0 ? first : log->ob.first;
        uint32_t held = m->held + (uint32_t)n;
        log->st.marked_batches++;
        log->ob.producer_id = m->producer_id;
        log->ob.sequence = m->sequence;
        log->ob.count = m->count;
        log->ob.first = bfirst;
        log->ob.held = held;
        log->ob.at = a->next;
        log->ob.open = held < m->count;
        /* The records are in the log whatever happens to the table: a failed
         * note (memory) only costs a lookup answering from older state, and
         * the next open rebuilds it from the marks. */
        rv = fx_producers_note(log->prod, m->producer_id, m->sequence, bfirst, m->count, held,
                               m->digest, true);
        if (rv != 0)
            FX_LOG_WARN("storage", "stream=%s producer table update failed: %s", log->label,
                        fx_strerror(rv));
    }
    return 0;
}

int fx_dlog_append(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t ts_us,
                   uint64_t *pfirst)
{
    return append(log, recs, n, ts_us, NULL, pfirst);
}

int fx_dlog_append_marked(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t ts_us,
                          const fx_dlog_mark *m, uint64_t *pfirst)
{
    if (n == 0 || m->count == 0 || (uint64_t)m->held + n > m->count)
        return dl_fail(log, -EINVAL, "stream=%s marked append: %zu records do not fit batch of %" PRIu32 " holding %" PRIu32, log->label, n, m->count, m->held);
    if (m->held > 0 && !continues_open_batch(log, m))
        return dl_fail(log, -EINVAL,
                       "stream=%s marked append: batch %" PRIu64 " of producer %" PRIu64
                       " is not open at the tail with %" PRIu32 " records",
                       log->label, m->sequence, m->producer_id, m->held);
    return append(log, recs, n, ts_us, m, pfirst);
}

fx_producers *fx_dlog_producers(fx_dlog *log)
{
    return log->prod;
}

bool fx_dlog_batch_is_open(const fx_dlog *log, uint64_t producer_id, uint64_t sequence,
                           uint32_t *pheld)
{
    if (!log->ob.open || log->ob.at != fx_dlog_next_offset(log) ||
        log->ob.producer_id != producer_id || log->ob.sequence != sequence)
        return false;
    if (pheld != NULL)
        *pheld = log->ob.held;
    return true;
}

uint64_t fx_dlog_room_after(const fx_dlog *log, uint64_t first_bytes)
{
    const dl_seg *a = &log->segs[log->nsegs - 1];
    uint64_t seg = log->cfg.segment_bytes;
    uint64_t after = (batch_rolls(log, first_bytes) ? FX_SEG_HEADER_LEN : a->size) + first_bytes;
    return after >= seg ? 0 : seg - after;
}

bool fx_dlog_append_rolls(const fx_dlog *log, uint64_t bytes)
{
    return batch_rolls(log, bytes);
}

bool fx_dlog_marked_append_rolls(const fx_dlog *log, uint64_t bytes)
{
    return log->segs[log->nsegs - 1].version < FX_SEG_VERSION_V3 || batch_rolls(log, bytes);
}

bool fx_dlog_is_flushing(const fx_dlog *log)
{
    return log->flushing;
}

int fx_dlog_sync_begin(fx_dlog *log, fx_dlog_flush *f)
{
    if (log->failed)
        return FX_ESTORAGE_FAILED;
    if (log->flushing)
        return -EBUSY;
    dl_seg *a = dl_active(log);
    *f = (fx_dlog_flush){.io = log->io, .fd = -1, .target = log->durable, .size = log->synced_size};
    if (log->durable < a->next) {
        f->fd = log->fd;
        f->target = a->next;
        f->size = a->size;
    }
    log->flushing = true;
    return 0;
}

int fx_dlog_flush_run(const fx_dlog_flush *f)
{
    return f->fd < 0 ? 0 : f->io->ops->fdatasync(f->io, f->fd);
}

/* Why the durable offset and the point come from |f| and not from the log as
 * it stands: appends made while the fdatasync ran may or may not be on the
 * device (the call guarantees only what was written before it began), so
 * the completion claims exactly what the begin fixed. The active segment is
 * still the one |f| flushed: no rollover happens while a flush is in flight
 * (fx_dlog_append refuses it). */
int fx_dlog_sync_complete(fx_dlog *log, const fx_dlog_flush *f, int rv, uint64_t *pdurable)
{
    assert(log->flushing);
    log->flushing = false;
    if (rv != 0) {
        log->failed = true;
        log->st.sync_failures++;
        return dl_fail(log, rv, "stream=%s durability sync failed: %s", log->label,
                       fx_strerror(rv));
    }
    if (log->failed)
        return FX_ESTORAGE_FAILED;
    if (f->fd >= 0) {
        assert(f->fd == log->fd && f->size <= dl_active(log)->size);
        if (f->target > log->durable)
            log->durable = f->target;
        if (f->size > log->synced_size)
            log->synced_size = f->size;
        log->st.syncs++;
        dl_write_point(log, f->size);
    }
    if (pdurable != NULL)
        *pdurable = log->durable;
    return 0;
}

int fx_dlog_sync(fx_dlog *log, uint64_t *pdurable)
{
    fx_dlog_flush f;
    int rv = fx_dlog_sync_begin(log, &f);
    if (rv != 0)
        return rv;
    return fx_dlog_sync_complete(log, &f, fx_dlog_flush_run(&f), pdurable);
}

/* ---- reads ----------------------------------------------------------------------- */

void fx_dlog_page_init(fx_dlog_page *p)
{
    *p = (fx_dlog_page){0};
}

void fx_dlog_page_deinit(fx_dlog_page *p)
{
    free(p->recs);
    free(p->buf);
    *p = (fx_dlog_page){0};
}

/* Index of the segment holding |off| (base <= off < next), or the last one. */
static size_t find_seg(const fx_dlog *log, uint64_t off)
{
    size_t lo = 0, hi = log->nsegs - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (log->segs[mid].base <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The greatest index entry at or below |off| (position 32 when none). */
static dl_entry seek(const dl_seg *s, uint64_t off)
{
    dl_entry e = {.offset = s->base, .pos = FX_SEG_HEADER_LEN};
    size_t lo = 0, hi = s->nidx;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->idx[mid].offset <= off) {
            e = s->idx[mid];
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return e;
}

/* An index entry that can be right for |s|. */
static bool entry_plausible(const dl_seg *s, uint64_t off, uint64_t pos)
{
    return off >= s->base && off < s->next && pos >= FX_SEG_HEADER_LEN && pos < s->size;
}

/* The greatest entry at or below |off| in the index file of sealed segment
 * |s|, found by binary search with pread (position 32 when the file is
 * missing or unusable). The caller checks the record it points at. */
static dl_entry seek_file(fx_dlog *log, const dl_seg *s, uint64_t off)
{
    dl_entry e = {.offset = s->base, .pos = FX_SEG_HEADER_LEN};
    char path[PATH_MAX];
    dl_path(log, s->id, true, path);
    fx_sio *io = log->io;
    int fd;
    uint64_t size = 0, base = 0;
    uint8_t b[FX_IDX_HEADER_LEN];
    if (io->ops->open(io, path, FX_SIO_READ, &fd) != 0)
        return e;
    if (io->ops->fsize(io, fd, &size) != 0 || size < FX_IDX_HEADER_LEN ||
        io->ops->pread(io, fd, b, sizeof(b), 0) != (ssize_t)sizeof(b) ||
        fx_logfmt_idx_header_decode(b, sizeof(b), &base) != 0 || base != s->base)
        size = 0;
    size_t lo = 0, hi = size > 0 ? (size_t)((size - FX_IDX_HEADER_LEN) / FX_IDX_ENTRY_LEN) : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t o, p;
        if (io->ops->pread(io, fd, b, FX_IDX_ENTRY_LEN,
                           FX_IDX_HEADER_LEN + mid * FX_IDX_ENTRY_LEN) != FX_IDX_ENTRY_LEN)
            break;
        fx_logfmt_idx_entry_decode(b, &o, &p);
        if (o <= off) {
            if (entry_plausible(s, o, p))
                e = (dl_entry){.offset = o, .pos = p};
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    io->ops->close(io, fd);
    return e;
}

static int page_room(fx_dlog_page *p, size_t len)
{
    fx_dlog_record *v = fx_grow(p->recs, &p->recs_cap, p->n + 1, sizeof(*v), 64);
    if (v == NULL)
        return -ENOMEM;
    p->recs = v;
    uint8_t *b = fx_grow(p->buf, &p->buf_cap, p->bytes + len, 1, 4096);
    if (b == NULL)
        return -ENOMEM;
    p->buf = b;
    return 0;
}

typedef struct read_req {
    uint64_t from;
    size_t max_bytes;
    size_t max_records;
    bool full; /* the budget stopped the read */
} read_req;

static int read_corrupt(fx_dlog *log, const dl_seg *s, uint64_t pos, fx_rec_status st,
                        const fx_rec_header *h, uint64_t expect)
{
    char file[FX_LOGFMT_FILE_NAME_MAX];
    fx_logfmt_file_name(file, s->id, false);
    if (st == FX_REC_OUT_OF_ORDER)
        return dl_fail(log, FX_ESTORAGE_CORRUPT,
                       "corruption detected: offset out of order (expected %" PRIu64
                       ", found %" PRIu64 ") (stream=%s, dir=%s, file=%s, position=%" PRIu64 ")",
                       expect, h->offset, log->label, log->dir, file, pos);
    return dl_fail(log, FX_ESTORAGE_CORRUPT,
                   "corruption detected: %s (stream=%s, dir=%s, file=%s, position=%" PRIu64 ")",
                   fx_logfmt_rec_status_name(st), log->label, log->dir, file, pos);
}

/* Reads the records of segment |s| through handle |fd| into |p|. */
static int read_seg(fx_dlog *log, const dl_seg *s, int fd, read_req *q, fx_dlog_page *p)
{
    fx_segwin w;
    int rv = fx_segwin_init(&w, log->io, fd, s->size, READ_WINDOW);
    if (rv != 0)
        return rv;
    w.version = s->version;
    uint64_t from = q->from > s->base ? q->from : s->base;
    bool sealed = s != dl_active(log);
    dl_entry e = sealed ? seek_file(log, s, from) : seek(s, from);
    uint64_t pos = e.pos, expect = e.offset;
    bool unchecked = sealed && pos != FX_SEG_HEADER_LEN; /* the index file may be stale */
    while (expect < s->next) {
        fx_rec_header h;
        fx_rec_status st;
        bool want = expect >= from;
        if ((rv = fx_segwin_record(&w, pos, expect, true, false, NULL, &h, &st)) != 0)
            break;
        if (st != FX_REC_OK && unchecked) {
            /* The index file does not match the log: read from the start. */
            pos = FX_SEG_HEADER_LEN;
            expect = s->base;
            unchecked = false;
            continue;
        }
        unchecked = false;
        if (st != FX_REC_OK) {
            rv = read_corrupt(log, s, pos, st, &h, expect);
            break;
        }
        if (want) {
            if (p->n > 0 && (p->n >= q->max_records || p->bytes + h.len > q->max_bytes)) {
                q->full = true;
                break;
            }
            if ((rv = page_room(p, h.len)) != 0)
                break;
            if ((rv = fx_segwin_record(&w, pos, expect, true, true, p->buf + p->bytes, &h, &st)) !=
                0)
                break;
            if (st != FX_REC_OK) {
                rv = read_corrupt(log, s, pos, st, &h, expect);
                break;
            }
            /* |data| holds the offset into buf until the page is complete. */
            p->recs[p->n++] = (fx_dlog_record){.offset = h.offset,
                                               .ts_us = h.ts_us,
                                               .data = (const uint8_t *)(uintptr_t)p->bytes,
                                               .len = h.len};
            p->bytes += h.len;
            p->next = expect + 1;
        }
        pos += fx_rec_step(&h);
        expect++;
    }
    fx_segwin_deinit(&w);
    return rv;
}

int fx_dlog_read(fx_dlog *log, uint64_t from, size_t max_bytes, size_t max_records,
                 fx_dlog_page *page)
{
    page->n = 0;
    page->bytes = 0;
    page->next = from;
    if (from < log->segs[0].base)
        return dl_fail(log, FX_ECURSOR_TOO_OLD,
                       "offset %" PRIu64 " is no longer available; the log starts at %" PRIu64,
                       from, log->segs[0].base);
    read_req q = {
        .from = from, .max_bytes = max_bytes, .max_records = max_records ? max_records : 1};
    int rv = 0;
    for (size_t i = find_seg(log, from); i < log->nsegs && !q.full && rv == 0; i++) {
        const dl_seg *s = &log->segs[i];
        if (s->next <= from)
            continue;
        if (i == log->nsegs - 1) {
            rv = read_seg(log, s, log->fd, &q, page);
            break;
        }
        char path[PATH_MAX];
        dl_path(log, s->id, false, path);
        int fd;
        if ((rv = log->io->ops->open(log->io, path, FX_SIO_READ, &fd)) != 0)
            return dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
        rv = read_seg(log, s, fd, &q, page);
        log->io->ops->close(log->io, fd);
    }
    for (size_t i = 0; i < page->n; i++)
        page->recs[i].data = page->buf + (uintptr_t)page->recs[i].data;
    if (rv != 0) {
        page->n = 0;
        page->bytes = 0;
        page->next = from;
        return rv;
    }
    log->st.read_records += page->n;
    log->st.read_bytes += page->bytes;
    return 0;
}

/* ---- retention --------------------------------------------------------------------- */

static bool head_expired(const fx_dlog *log, uint64_t max_bytes, uint64_t max_age_us,
                         uint64_t now_us)
{
    const dl_seg *h = &log->segs[0];
    /* An empty sealed segment (the v2 one rolled before a log's first
     * marked record) holds nothing and has no age: it goes with any bound,
     * or it would hold back the segments after it forever. */
    if (h->next == h->base && (max_bytes > 0 || max_age_us > 0))
        return true;
    if (max_bytes > 0 && fx_dlog_bytes_on_disk(log) > max_bytes)
        return true;
    return max_age_us > 0 && h->last_ts > 0 && now_us > h->last_ts &&
           now_us - h->last_ts > max_age_us;
}

/* Removes the head segment's files (log first: discovery only looks at .log
 * files, so a crash in between leaves a stale index and no gap). */
static int delete_head(fx_dlog *log)
{
    fx_sio *io = log->io;
    dl_seg *h = &log->segs[0];
    char path[PATH_MAX];
    dl_path(log, h->id, false, path);
    int rv = io->ops->unlink(io, path);
    if (rv == 0 || rv == -ENOENT) {
        dl_path(log, h->id, true, path);
        rv = io->ops->unlink(io, path);
        rv = rv == -ENOENT ? 0 : rv;
    }
    if (rv == 0)
        rv = io->ops->sync_dir(io, log->dir);
    return rv;
}

/* Deletes head segments while |below| (non-zero) lies past all of the
 * head's records, or else while head_expired says so. */
static int retain(fx_dlog *log, uint64_t below, uint64_t max_bytes, uint64_t max_age_us,
                  uint64_t now_us, fx_dlog_retained *out)
{
    fx_dlog_retained r = {0};
    int rv = 0;
    while (log->nsegs > 1 && (below != 0 ? log->segs[0].next <= below
                                         : head_expired(log, max_bytes, max_age_us, now_us))) {
        dl_seg *h = &log->segs[0];
        uint64_t bytes = h->size + dl_seg_idx_bytes(h);
        uint64_t kept = h->next;
        if ((rv = dl_marks_before_delete(log, kept, now_us)) != 0 ||
            (rv = delete_head(log)) != 0) {
            log->st.retention_failures++;
            dl_fail(log, rv, "stream=%s retention sweep failed: %s", log->label, fx_strerror(rv));
            break;
        }
        free(h->idx);
        memmove(&log->segs[0], &log->segs[1], (log->nsegs - 1) * sizeof(log->segs[0]));
        log->nsegs--;
        r.segments++;
        r.bytes += bytes;
        fx_producers_retire_below(log->prod, kept, now_us);
    }
    log->st.retention_segments_deleted += r.segments;
    log->st.retention_bytes_reclaimed += r.bytes;
    r.first_offset = log->segs[0].base;
    if (r.segments > 0 && below == 0)
        FX_LOG_INFO("storage",
                    "stream=%s retention deleted segments=%" PRIu64 " bytes=%" PRIu64
                    " first_offset=%" PRIu64,
                    log->label, r.segments, r.bytes, r.first_offset);
    if (out != NULL)
        *out = r;
    return rv;
}

int fx_dlog_retain(fx_dlog *log, uint64_t max_bytes, uint64_t max_age_us, uint64_t now_us,
                   fx_dlog_retained *out)
{
    return retain(log, 0, max_bytes, max_age_us, now_us, out);
}

int fx_dlog_retain_below(fx_dlog *log, uint64_t offset, uint64_t now_us, fx_dlog_retained *out)
{
    if (offset == 0) {
        if (out != NULL)
            *out = (fx_dlog_retained){.first_offset = log->segs[0].base};
        return 0;
    }
    return retain(log, offset, 0, 0, now_us, out);
}

bool fx_dlog_segment_at(const fx_dlog *log, size_t i, uint64_t *pbase, uint64_t *pnext,
                        uint64_t *pbytes)
{
    if (i >= log->nsegs)
        return false;
    const dl_seg *g = &log->segs[i];
    if (pbase)
        *pbase = g->base;
    if (pnext)
        *pnext = g->next;
    if (pbytes)
        *pbytes = g->size + dl_seg_idx_bytes(g);
    return true;
}

/* ---- accessors ------------------------------------------------------------------------ */

uint64_t fx_dlog_first_offset(const fx_dlog *log)
{
    return log->segs[0].base;
}

uint64_t fx_dlog_next_offset(const fx_dlog *log)
{
    return log->segs[log->nsegs - 1].next;
}

uint64_t fx_dlog_durable_offset(const fx_dlog *log)
{
    return log->durable;
}

uint64_t fx_dlog_bytes_on_disk(const fx_dlog *log)
{
    uint64_t b = 0;
    for (size_t i = 0; i < log->nsegs; i++)
        b += log->segs[i].size + dl_seg_idx_bytes(&log->segs[i]);
    return b;
}

size_t fx_dlog_buffer_bytes(const fx_dlog *log)
{
    const dl_seg *a = &log->segs[log->nsegs - 1];
    return log->enc_cap + a->idx_cap * sizeof(*a->idx);
}

/* What preallocation holds of a segment of |size| bytes and not written. */
static uint64_t reserved(const fx_dlog *log, uint64_t size)
{
    return log->cfg.preallocate && size < log->cfg.segment_bytes ? log->cfg.segment_bytes - size
                                                                 : 0;
}

uint64_t fx_dlog_disk_bytes(const fx_dlog *log)
{
    return fx_dlog_bytes_on_disk(log) + reserved(log, log->segs[log->nsegs - 1].size);
}

uint64_t fx_dlog_disk_bytes_after(const fx_dlog *log, uint64_t bytes)
{
    const dl_seg *a = &log->segs[log->nsegs - 1];
    /* Sealing on a roll cuts the old segment's reservation. */
    if (batch_rolls(log, bytes))
        return fx_dlog_bytes_on_disk(log) + FX_SEG_HEADER_LEN + FX_IDX_HEADER_LEN + bytes +
               reserved(log, FX_SEG_HEADER_LEN + bytes);
    return fx_dlog_bytes_on_disk(log) + bytes + reserved(log, a->size + bytes);
}

size_t fx_dlog_segment_count(const fx_dlog *log)
{
    return log->nsegs;
}

uint64_t fx_dlog_unsynced_bytes(const fx_dlog *log)
{
    return log->segs[log->nsegs - 1].size - log->synced_size;
}

bool fx_dlog_is_failed(const fx_dlog *log)
{
    return log->failed;
}

const fx_dlog_stats *fx_dlog_stats_get(const fx_dlog *log)
{
    return &log->st;
}

const char *fx_dlog_last_error(const fx_dlog *log)
{
    return log->err;
}
