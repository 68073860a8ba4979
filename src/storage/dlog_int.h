/* Private to the fx_dlog files (dlog.c: writing, reading, retention;
 * dlog_open.c: recovery): the log's state and the helpers both use. */
#ifndef FX_STORAGE_DLOG_INT_H
#define FX_STORAGE_DLOG_INT_H

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>

#include "storage/dlog.h"
#include "storage/format.h"

typedef struct dl_entry {
    uint64_t offset;
    uint64_t pos;
} dl_entry;

/* One segment file. The newest is the active one; the others are sealed. */
typedef struct dl_seg {
    uint64_t id;
    uint64_t base;    /* offset of its first record */
    uint64_t next;    /* offset after its last record */
    uint64_t size;    /* logical file size: header plus records */
    uint64_t last_ts; /* timestamp of its newest record; 0 when empty */
    uint16_t version; /* its header's: FX_SEG_VERSION or FX_SEG_VERSION_V3 */
    dl_entry *idx;    /* active segment: its sparse index, in memory */
    size_t nidx;
    size_t idx_cap;
    uint64_t idx_bytes; /* sealed segment: length of its index file (entries not kept) */
} dl_seg;

/* Drops the in-memory index of a segment being sealed: reads of sealed
 * segments search the index file, so memory does not grow with history. */
static inline void dl_seg_forget_index(dl_seg *s)
{
    s->idx_bytes = FX_IDX_HEADER_LEN + s->nidx * FX_IDX_ENTRY_LEN;
    free(s->idx);
    s->idx = NULL;
    s->nidx = s->idx_cap = 0;
}

/* Bytes of the index file of |s|. */
static inline uint64_t dl_seg_idx_bytes(const dl_seg *s)
{
    return s->idx_bytes > 0 ? s->idx_bytes : FX_IDX_HEADER_LEN + s->nidx * FX_IDX_ENTRY_LEN;
}

struct fx_dlog {
    fx_sio *io;
    fx_dlog_config cfg;
    char *dir;
    char label[256];
    dl_seg *segs; /* oldest first; segs[nsegs-1] is active */
    size_t nsegs;
    size_t segs_cap;
    int fd;               /* active segment, read-write */
    int ifd;              /* its index file; -1 when it could not be opened */
    fx_idx_rule rule;     /* index rule state of the active segment */
    bool idx_broken;      /* an index write failed: rewrite it whole at seal */
    uint64_t durable;     /* offsets below are flushed */
    uint64_t synced_size; /* active segment bytes covered by the last flush */
    uint32_t point;       /* the durable point word last written to the active segment */
    bool point_warned;    /* a failed point write was logged since the open */
    bool point_dirty;     /* a point word was written since the open: a clean close flushes it */
    bool failed;
    bool flushing; /* a flush is in flight (fx_dlog_sync_begin, not yet completed) */
    uint8_t *enc;
    size_t enc_cap;
    bool v3;            /* new segments are written version 3 (a mark was ever written) */
    fx_producers *prod; /* the producer table (producers.h) */
    /* The producer batch open at the tail: its records so far are the last
     * ones of the log (|at| is the log's next offset after them). */
    struct {
        bool open;
        uint64_t producer_id, sequence, first, at;
        uint32_t count, held;
    } ob;
    fx_dlog_stats st;
    char err[512];
};

static inline dl_seg *dl_active(fx_dlog *log)
{
    return &log->segs[log->nsegs - 1];
}

/* Writes "<dir>/<id:020>.log|.index" into |out| (PATH_MAX). */
void dl_path(const fx_dlog *log, uint64_t id, bool index, char *out);

/* Records "<fmt>" as the last error and returns |rv|. */
int dl_fail(fx_dlog *log, int rv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends an index entry to |s| in memory. Returns 0 or -ENOMEM. */
int dl_idx_push(dl_seg *s, uint64_t offset, uint64_t pos);

/* Appends a segment slot (zeroed but |id|, |base|) to the log. */
int dl_seg_push(fx_dlog *log, uint64_t id, uint64_t base, dl_seg **ps);

/* Creates segment |id| at |base| (file, preallocation, directory sync,
 * header, index header, flush) and makes it the active one: opens log->fd
 * and log->ifd and pushes its slot. On failure both files are removed and
 * the log is unchanged. */
int dl_create_segment(fx_dlog *log, uint64_t id, uint64_t base, uint64_t now_us);

/* Records |synced_len| as the durable point of the active segment (its
 * header's reserved word) once a completed fdatasync covers that many
 * bytes; the write rides on the next flush. A failed write is counted and
 * logged (once per open), never fatal: an older point is safe. */
void dl_write_point(fx_dlog *log, uint64_t synced_len);

/* Rewrites the whole index file of |s| from its in-memory entries through
 * handle |ifd| (header + entries, cut to length) and flushes it. */
int dl_write_index(fx_dlog *log, int ifd, const dl_seg *s);

/* Recovery (dlog_open.c): fills the segment list and opens the active one. */
int dl_recover(fx_dlog *log, uint64_t now_us, fx_dlog_recovery *rep);

/* Producer marks (dlog_marks.c). Rebuilds log->prod (and log->ob) at open
 * from the retired file, the snapshot and the marks of the v3 segments. */
int dl_marks_rebuild(fx_dlog *log, uint64_t now_us, fx_dlog_recovery *rep);

/* Writes the snapshot as of the active segment's base (after a roll). */
void dl_marks_snapshot(fx_dlog *log);

/* Before retention deletes the head segment: writes the retired file if a
 * producer's last batch is in it. Returns 0 or -errno (do not delete). */
int dl_marks_before_delete(fx_dlog *log, uint64_t first_kept, uint64_t now_us);

#endif
