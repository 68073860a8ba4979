/* Compaction of a durable cache's log (docs/cache.md "Compaction"): an
 * index of the newest record of every key (its offset, bytes and expiry;
 * a delete removes the key) kept in step with the log, which tells the
 * live bytes, and the copying of the live records of the oldest sealed
 * segments to the tail before those segments are deleted. Sans clock and
 * threads: the caller passes the times and paces the steps. Owner: the
 * storage thread of the cache's worker (the main thread while the start
 * reads the log back), like the log itself. */
#ifndef FX_BROKER_CACHE_COMPACT_H
#define FX_BROKER_CACHE_COMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/dlog.h"

typedef struct fxb_ccomp fxb_ccomp;

/* What compactions did, summed since the index was made. */
typedef struct fxb_ccomp_stats {
    uint64_t runs;      /* compactions finished */
    uint64_t copied;    /* record bytes (28-byte headers included) copied to the tail */
    uint64_t reclaimed; /* bytes of the segment and index files deleted */
} fxb_ccomp_stats;

/* An empty index in |*pc|. 0 or -ENOMEM. Freed with fxb_ccomp_free. */
int fxb_ccomp_new(fxb_ccomp **pc);
/* Frees |c|. NULL ok. */
void fxb_ccomp_free(fxb_ccomp *c);

/* Notes the cache record |p| (|n| bytes) at offset |off| of the log, the
 * newest record of the log: read back at start, or just appended. The
 * largest version seen is kept (fxb_ccomp_max_version). Returns 0, or
 * -ENOMEM: the index can no longer tell live from dead, so this log is
 * not compacted again until the next start (fxb_ccomp_is_broken). A record
 * that is not a cache record is ignored here (compaction keeps it). */
int fxb_ccomp_note(fxb_ccomp *c, uint64_t off, const uint8_t *p, size_t n);

/* The log failed and is reopened later (recovery may cut what was not
 * flushed): the index no longer matches it, so no compaction until the
 * next start. */
void fxb_ccomp_disable(fxb_ccomp *c);

/* The largest version of the records noted (0: none carried one). */
uint64_t fxb_ccomp_max_version(const fxb_ccomp *c);
/* Bytes of the records (headers included) that are the newest put of
 * their key: the log's live data. */
uint64_t fxb_ccomp_live_bytes(const fxb_ccomp *c);
/* Whether a failed note left the index unusable. */
bool fxb_ccomp_is_broken(const fxb_ccomp *c);
/* Whether a compaction is under way (fxb_ccomp_step until it is not). */
bool fxb_ccomp_running(const fxb_ccomp *c);
/* Copies the sums into |*out|. */
void fxb_ccomp_stats_get(const fxb_ccomp *c, fxb_ccomp_stats *out);

/* Whether |log| should be compacted now; if so a compaction is begun.
 * True when the dead bytes (the log's bytes less the live ones) are more
 * than half the log, and a prefix of the sealed segments is at least half
 * dead: the longest such prefix is what the compaction copies from and
 * deletes (so every byte copied frees at least one). Checked again only
 * after the log's segments changed. -ENOMEM is a false. */
bool fxb_ccomp_begin(fxb_ccomp *c, const fx_dlog *log);

/* One step of the compaction under way: reads up to |budget| bytes of
 * records (at least one record) of the segments it compacts, appends the
 * live ones (the newest record of their key if a put not expired at
 * |wall_ms|, and the record carrying the largest version, so a restart
 * never gives it again) verbatim to the tail, notes them, and once a whole
 * segment was read flushes the log and deletes that segment: a crash at
 * any point leaves a log that reads back to the same entries (a record
 * copied twice is harmless: the later of a key wins, with the same
 * version). |*pread| gets the bytes read. Returns 0, or the log's error
 * (the compaction is then abandoned; nothing is lost). */
int fxb_ccomp_step(fxb_ccomp *c, fx_dlog *log, uint64_t wall_ms, uint64_t now_us, size_t budget,
                   size_t *pread);

#endif
