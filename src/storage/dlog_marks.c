/* Producer marks of the durable log (format v3): rebuilding the producer
 * table at open from the retired file, the `producers` snapshot and the
 * marks of the v3 segments after it; writing the snapshot at each roll; the
 * retired file before retention deletes a segment. A log with no v3
 * segment has no marks and is not rescanned. Runs on the log's owner
 * thread, inside fx_dlog_open, the roll and fx_dlog_retain. */
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

/* The batch being read back: a record opening a batch starts one, a
 * continuation adds to it while it holds fewer records than its tag says,
 * an unmarked record ends it. */
typedef struct replay {
    fx_dlog *log;
    fx_dlog_recovery *rep;
    bool cur;
    uint64_t id, seq, first, digest, last_offset;
    uint32_t count, held;
    uint8_t *buf;
    size_t cap;
} replay;

static int on_mark(replay *r, const fx_rec_header *h, const uint8_t *payload)
{
    fx_producers *t = r->log->prod;
    if (h->mark == FX_REC_MARK_OPEN) {
        r->cur = true;
        r->id = h->tag.producer_id;
        r->seq = h->tag.sequence;
        r->count = h->tag.len;
        r->first = h->offset;
        r->held = 0;
        r->digest = 0;
    } else if (!r->cur || r->held >= r->count) {
        fx_producers_stats_get(t)->orphan_marks++;
        r->cur = false;
        return 0;
    }
    r->held++;
    r->digest = fx_producer_digest_step(r->digest, payload, h->len);
    r->last_offset = h->offset;
    r->rep->producer_marks_read++;
    return fx_producers_note(t, r->id, r->seq, r->first, r->count, r->held, r->digest, true);
}

/* Reads the marks of segment |s| (handle |fd|) into the table. */
static int replay_seg(replay *r, const dl_seg *s, int fd)
{
    fx_dlog *log = r->log;
    fx_segwin w;
    int rv = fx_segwin_init(&w, log->io, fd, s->size, FX_SEGWIN_DEFAULT);
    if (rv != 0)
        return rv;
    w.version = s->version;
    uint64_t pos = FX_SEG_HEADER_LEN, off = s->base;
    while (rv == 0 && off < s->next) {
        fx_rec_header h;
        fx_rec_status st;
        if ((rv = fx_segwin_record(&w, pos, off, true, false, NULL, &h, &st)) != 0)
            break;
        if (st == FX_REC_OK && h.mark != 0) {
            uint8_t *b = fx_grow(r->buf, &r->cap, h.len > 0 ? h.len : 1, 1, 4096);
            if (b == NULL) {
                rv = -ENOMEM;
                break;
            }
            r->buf = b;
            if ((rv = fx_segwin_record(&w, pos, off, true, true, r->buf, &h, &st)) != 0)
                break;
        }
        if (st != FX_REC_OK) {
            char file[FX_LOGFMT_FILE_NAME_MAX];
            fx_logfmt_file_name(file, s->id, false);
            rv = dl_fail(log, FX_ESTORAGE_CORRUPT,
                         "corruption detected: %s (stream=%s, dir=%s, file=%s, position=%" PRIu64
                         ")",
                         fx_logfmt_rec_status_name(st), log->label, log->dir, file, pos);
            break;
        }
        if (h.mark != 0)
            rv = on_mark(r, &h, r->buf);
        else
            r->cur = false;
        pos += fx_rec_step(&h);
        off++;
    }
    fx_segwin_deinit(&w);
    return rv;
}

int dl_marks_rebuild(fx_dlog *log, uint64_t now_us, fx_dlog_recovery *rep)
{
    fx_producers *t = log->prod;
    log->v3 = dl_active(log)->version >= FX_SEG_VERSION_V3;
    log->ob.open = false;
    int rv = fx_producers_retired_load(t, log->io, log->dir, now_us);
    if (rv == FX_ESTORAGE_CORRUPT) {
        /* Its producers answer "unknown" instead of "expired" now: a re-send
         * is still never written twice (an unknown producer's sequence > 0
         * is refused). */
        FX_LOG_WARN("storage", "stream=%s the retired producers file is damaged; ignored",
                    log->label);
        fx_producers_stats_get(t)->retired_forgotten++;
        rv = 0;
    }
    if (rv != 0)
        return dl_fail(log, rv, "reading %s/%s: %s", log->dir, FX_PRODUCERS_RETIRED_NAME,
                       fx_strerror(rv));
    size_t from = log->nsegs;
    for (size_t i = 0; i < log->nsegs; i++) {
        if (log->segs[i].version >= FX_SEG_VERSION_V3) {
            from = i;
            break;
        }
    }
    if (from == log->nsegs)
        return 0; /* no marks anywhere: a log written before them is not rescanned */
    uint64_t as_of = 0;
    size_t snap = log->nsegs;
    if (fx_producers_snapshot_load(t, log->io, log->dir, log->segs[0].base,
                                   fx_dlog_next_offset(log), &as_of) == 0) {
        for (size_t i = 0; i < log->nsegs; i++) {
            if (log->segs[i].base == as_of) {
                snap = i;
                break;
            }
        }
    }
    if (snap < log->nsegs) {
        rep->producers_from_snapshot = true;
        if (snap > from)
            from = snap;
    } else {
        fx_producers_clear(t);
        fx_producers_stats_get(t)->snapshot_rebuilds++;
        rep->producers_rebuilt = true;
        FX_LOG_INFO("storage",
                    "stream=%s producers snapshot missing, damaged or out of range; rebuilding "
                    "the producer table from the log",
                    log->label);
    }
    replay r = {.log = log, .rep = rep};
    uint64_t nid;
    fx_prod_batch nb;
    if (snap < log->nsegs && fx_producers_newest(t, &nid, &nb) && nb.held < nb.count &&
        nb.first + nb.held == as_of) {
        /* The snapshot's open batch: its rest may continue in the segment
         * the replay starts with. */
        r.cur = true;
        r.id = nid;
        r.seq = nb.sequence;
        r.first = nb.first;
        r.count = nb.count;
        r.held = nb.held;
        r.digest = nb.digest;
        r.last_offset = as_of - 1;
    }
    for (size_t i = from; rv == 0 && i < log->nsegs; i++) {
        const dl_seg *s = &log->segs[i];
        if (s->version < FX_SEG_VERSION_V3 || s->next == s->base)
            continue;
        if (i == log->nsegs - 1) {
            rv = replay_seg(&r, s, log->fd);
            break;
        }
        char path[PATH_MAX];
        dl_path(log, s->id, false, path);
        int fd;
        if ((rv = log->io->ops->open(log->io, path, FX_SIO_READ, &fd)) != 0) {
            rv = dl_fail(log, rv, "opening %s: %s", path, fx_strerror(rv));
            break;
        }
        rv = replay_seg(&r, s, fd);
        log->io->ops->close(log->io, fd);
    }
    free(r.buf);
    if (rv != 0)
        return rv;
    /* A batch whose records so far are the last of the log is open: its
     * re-send completes it (fx_dlog_append_marked with held > 0). It may
     * come from the snapshot alone (the roll right after its last record). */
    uint64_t id;
    fx_prod_batch b;
    if (fx_producers_newest(t, &id, &b) && b.held < b.count &&
        b.first + b.held == fx_dlog_next_offset(log))
        log->ob = (__typeof__(log->ob)){.open = true,
                                        .producer_id = id,
                                        .sequence = b.sequence,
                                        .first = b.first,
                                        .at = fx_dlog_next_offset(log),
                                        .count = b.count,
                                        .held = b.held};
    return 0;
}

void dl_marks_snapshot(fx_dlog *log)
{
    int rv = fx_producers_snapshot_write(log->prod, log->io, log->dir, dl_active(log)->base);
    if (rv != 0)
        FX_LOG_WARN("storage",
                    "stream=%s writing the producers snapshot failed; the next open rebuilds "
                    "the producer table from the log: %s",
                    log->label, fx_strerror(rv));
}

int dl_marks_before_delete(fx_dlog *log, uint64_t first_kept, uint64_t now_us)
{
    if (!fx_producers_would_retire(log->prod, first_kept))
        return 0;
    int rv = fx_producers_retired_write(log->prod, log->io, log->dir, first_kept, now_us);
    if (rv != 0)
        FX_LOG_WARN("storage",
                    "stream=%s writing the retired producers file failed; retention waits: %s",
                    log->label, fx_strerror(rv));
    return rv;
}
