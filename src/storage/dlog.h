/* fx_dlog: the durable log of one stream in one directory, in the original
 * Felix format (format.h): append-only segments with a CRC per record, a
 * sparse offset index, rollover at segment_bytes with preallocation,
 * recovery at open (torn tail cut, interior damage refused or repaired, index
 * rebuilt), bounded range reads, retention by bytes and age in whole sealed
 * segments. No threads and no timers: the caller passes the time, decides
 * when to sync (syncpol.h says when) and runs all of it on one thread, the
 * owner (a storage thread, never a loop thread: every call may block on the
 * disk), except the fdatasync of a flush in flight (fx_dlog_flush_run), which
 * any one other thread may run while the owner goes on appending.
 * All I/O goes through the fx_sio of the configuration. */
#ifndef FX_STORAGE_DLOG_H
#define FX_STORAGE_DLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/producers.h"
#include "storage/sio.h"

typedef struct fx_dlog fx_dlog;

/* Defaults, as in the original (FELIX_DURABLE_* of the same meaning). */
#define FX_DLOG_DEFAULT_SEGMENT_BYTES (256ull << 20)
#define FX_DLOG_DEFAULT_INDEX_SPACING 4096ull

typedef struct fx_dlog_config {
    uint64_t segment_bytes;       /* rollover size, 32-byte header included; >= 60 */
    uint64_t index_spacing_bytes; /* sparse index interval; > 0 */
    bool preallocate;             /* reserve segment_bytes when a segment is created */
    bool verify_all_on_open;      /* check every record of sealed segments at open */
    bool repair_checksum_tail;    /* also cut a damaged last record of the active segment */
    bool repair;                  /* cut the log at the first bad record anywhere */
    const char *label;            /* "tenant/ns/stream/0" in messages; NULL: the directory */
    fx_sio *io;                   /* NULL: fx_sio_posix() */
    /* Idempotent producers: how long a producer whose last batch retention
     * removed stays known (lookups answer "expired"), and the bound of the
     * producer table (0: FX_PRODUCERS_DEFAULT_MAX). */
    uint64_t producer_ttl_s;
    size_t max_producers;
} fx_dlog_config;

/* Fills |c| with the defaults (256 MiB segments, 4 KiB spacing, preallocate,
 * no verify-all, no repair, POSIX I/O, producer ttl 86,400 s, 4,096
 * producers). */
void fx_dlog_config_default(fx_dlog_config *c);

/* Checks the bounds of |c|. Returns 0, or FX_ECONFIG with the reason in
 * |err| ("segment_bytes is too small to hold a single record"). */
int fx_dlog_config_check(const fx_dlog_config *c, char *err, size_t errlen);

/* What recovery found and did at open. */
typedef struct fx_dlog_recovery {
    uint64_t truncated_bytes;    /* torn tail cut from the active segment */
    uint64_t index_rebuilds;     /* index files rebuilt from the log */
    uint64_t abandoned_segments; /* empty or headerless segments of an unfinished roll */
    bool repaired;               /* repair cut the log at a bad record */
    uint64_t dropped_bytes;      /* repair: bytes removed (that segment's rest + later ones) */
    uint64_t dropped_segments;   /* repair: whole later segments removed */
    uint64_t dropped_from;       /* repair: first offset no longer in the log */
    /* The producer table: whether it came from the `producers` snapshot
     * (plus the segments after it), was rebuilt from every v3 segment (the
     * snapshot missing, damaged or out of range), or nothing was read (no
     * v3 segment: a log written before marks is not rescanned). */
    bool producers_from_snapshot;
    bool producers_rebuilt;
    uint64_t producer_marks_read; /* marked records read to rebuild it */
    /* On failure the error ("corruption detected: ... (stream=..., file=...,
     * position=...)"); after a repair or a cut tail what was removed; else "". */
    char message[512];
} fx_dlog_recovery;

/* Counters of one log since it was opened. */
typedef struct fx_dlog_stats {
    uint64_t append_batches, append_records, append_bytes, append_failures;
    uint64_t syncs, sync_failures;
    uint64_t rolls, roll_failures, index_write_failures, point_write_failures;
    uint64_t read_records, read_bytes;
    uint64_t retention_segments_deleted, retention_bytes_reclaimed, retention_failures;
    uint64_t marked_batches, v3_rolls; /* marked appends; v2 segments rolled before a mark */
} fx_dlog_stats;

/* Opens (creating if needed) the log in directory |dir| with |cfg| and
 * recovers it; |now_us| (wall clock, microseconds) stamps a new segment.
 * |*rep| (may be NULL) receives what recovery did. Returns 0 and |*plog|, or:
 * FX_ECONFIG (bad |cfg|), FX_ESTORAGE_CORRUPT (damage that is not a torn tail
 * and repair is off; rep->message names stream, directory, file and byte
 * position), -ENAMETOOLONG (|dir| leaves no room below PATH_MAX for a file
 * name), -errno. The caller frees |*plog| with fx_dlog_close(). */
int fx_dlog_open(fx_dlog **plog, const char *dir, const fx_dlog_config *cfg, uint64_t now_us,
                 fx_dlog_recovery *rep);

/* With |sync|, flushes first (fx_dlog_sync); then closes the files and frees
 * |log|. Returns the sync's result (the log is freed either way). NULL: 0.
 * Never while a flush is in flight (complete it first: fx_dlog_sync_begin). */
int fx_dlog_close(fx_dlog *log, bool sync);

/* One record to append. */
typedef struct fx_dlog_iov {
    const void *data;
    uint32_t len;
} fx_dlog_iov;

/* Appends |n| records as one batch stamped |ts_us|: offsets next..next+n-1
 * in order (*pfirst = the first), one pwrite, never split across segments
 * (the active segment rolls first if the batch does not fit and it already
 * holds a record). Returns 0; -EINVAL (n == 0); FX_ESTORAGE_TOO_LARGE (a
 * payload above 64 MiB); -ENOSPC, -EIO, ...: nothing of the batch is in the
 * log (the file was cut back) and a later append may succeed;
 * FX_ESTORAGE_FAILED: the log stopped earlier (see below); -EBUSY: the
 * batch needs a rollover and a flush is in flight (nothing written; append
 * it once the flush completed). */
int fx_dlog_append(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t ts_us,
                   uint64_t *pfirst);

/* A producer mark for an append (format v3, format.h): the append's records
 * are records [held, held + n) of batch |sequence| of |producer_id|, which
 * holds |count| records in all. held 0 opens the batch: its first record
 * gets bit 31 and the tag, the others bit 30; held > 0 continues a batch
 * still open at the tail (its records so far are the last ones of the log):
 * all get bit 30. |digest| is the chained digest (fx_producer_digest_step)
 * of the batch's records [0, held + n): the producer table keeps it. */
typedef struct fx_dlog_mark {
    uint64_t producer_id;
    uint64_t sequence;
    uint32_t count;
    uint32_t held;
    uint64_t digest;
} fx_dlog_mark;

/* fx_dlog_append with producer mark |m| (see fx_dlog_mark), and the
 * producer table updated (fx_dlog_producers). The first marked append of a
 * log whose active segment is version 2 rolls it first (a marked batch is
 * never written into a v2 segment); every segment made from then on is
 * version 3 (logs that never take a mark stay v2, byte for byte). Errors as
 * fx_dlog_append, and -EINVAL: n == 0, count 0, held + n > count, or held
 * > 0 and that batch is not the one open at the tail with |held| records
 * (another append came in between, or it is complete). */
int fx_dlog_append_marked(fx_dlog *log, const fx_dlog_iov *recs, size_t n, uint64_t ts_us,
                          const fx_dlog_mark *m, uint64_t *pfirst);

/* The producer table of the log, rebuilt at open and kept in step with
 * marked appends, retention and repair. Owned by the log (owner thread). */
fx_producers *fx_dlog_producers(fx_dlog *log);

/* Whether batch |sequence| of |producer_id| is open at the tail (only part
 * of it written, nothing after it), with |*pheld| (may be NULL) its
 * records so far: only then can fx_dlog_append_marked complete it. A
 * partial batch that is not open (other records followed it) stays partial
 * in the producer table. */
bool fx_dlog_batch_is_open(const fx_dlog *log, uint64_t producer_id, uint64_t sequence,
                           uint32_t *pheld);

/* The bytes of records (28-byte headers included) that can follow an
 * append of |first_bytes| bytes made now without a rollover before them:
 * a caller merging consecutive batches into one fx_dlog_append keeps each
 * in the segment it would have gone to on its own by adding a batch only
 * while it fits in what is left. 0 when nothing more fits. */
uint64_t fx_dlog_room_after(const fx_dlog *log, uint64_t first_bytes);

/* Flushes appended records to the device (fdatasync). On success
 * |*pdurable| (may be NULL) is the offset up to which (exclusive) every
 * record is durable; a log with nothing new returns at once. A failed flush
 * leaves the log stopped (FX_ESTORAGE_FAILED for every later append and
 * sync): the kernel may have dropped the unflushed pages, so only reopening
 * (recovery reads what really is on disk) can tell what survived. -EBUSY
 * while a flush begun by fx_dlog_sync_begin is in flight. It is
 * fx_dlog_sync_begin, fx_dlog_flush_run and fx_dlog_sync_complete in a row. */
int fx_dlog_sync(fx_dlog *log, uint64_t *pdurable);

/* ---- a flush in flight: the fdatasync on another thread -------------------------
 * fx_dlog_sync in three steps, so that the owner of the log keeps appending
 * (pwrite into the page cache) while the fdatasync runs on another thread:
 *   begin     (owner)      fixes what the flush covers: the records appended so far;
 *   run       (any thread) the fdatasync of the active segment, nothing else;
 *   complete  (owner)      with run's result: the covered records become durable and
 *                          the durable point records the covered length.
 * One flush in flight per log. While it is, appends go on, but none that needs a
 * rollover (-EBUSY: the segment being flushed must stay the active one, and its
 * handle open, until the flush completes; fx_dlog_append_rolls tells beforehand),
 * and fx_dlog_sync and fx_dlog_close must wait for the completion. Retention and
 * reads may run (they never touch the active segment's file). A power cut before
 * complete loses nothing the log ever called durable: what the flush covers counts
 * only once complete has seen it succeed. */

/* What a flush in flight covers. Filled by fx_dlog_sync_begin; the owner keeps
 * it until fx_dlog_sync_complete. */
typedef struct fx_dlog_flush {
    fx_sio *io;
    int fd;          /* the handle fx_dlog_flush_run flushes; -1: nothing to flush */
    uint64_t target; /* offsets below are durable once the flush succeeded */
    uint64_t size;   /* bytes of the active segment it covers (the durable point) */
} fx_dlog_flush;

/* Begins a flush of everything appended so far into |*f|. Returns 0 (with
 * f->fd -1 when nothing is new: run does nothing, complete reports the
 * durable offset), FX_ESTORAGE_FAILED (the log stopped), -EBUSY (a flush is
 * in flight). Owner thread. */
int fx_dlog_sync_begin(fx_dlog *log, fx_dlog_flush *f);

/* The fdatasync of flush |f| (0 at once when f->fd is -1). Returns 0 or
 * -errno. Any thread, once per begun flush, while the owner goes on with the
 * log; it touches nothing of the log but the file handle in |f|. */
int fx_dlog_flush_run(const fx_dlog_flush *f);

/* Ends flush |f| with |rv|, fx_dlog_flush_run's result (the caller must not
 * invent one: 0 only when the fdatasync returned 0). On success the records
 * below f->target are durable (|*pdurable|, may be NULL, gets the durable
 * offset, which never passes f->target while later appends are unflushed)
 * and the durable point of the active segment is written as f->size. A
 * failed flush stops the log, as fx_dlog_sync's does, and returns |rv|; a log
 * stopped meanwhile (a failed append could not be cut back) returns
 * FX_ESTORAGE_FAILED. Owner thread. */
int fx_dlog_sync_complete(fx_dlog *log, const fx_dlog_flush *f, int rv, uint64_t *pdurable);

/* Whether a flush is in flight (begun and not completed). */
bool fx_dlog_is_flushing(const fx_dlog *log);

/* Whether an append of |bytes| bytes of records (28-byte headers included)
 * made now would roll the active segment first. For a marked append count
 * FX_REC_TAG_LEN more for a record opening a batch and use
 * fx_dlog_marked_append_rolls, which also knows the roll of a v2 segment
 * before the first mark. */
bool fx_dlog_append_rolls(const fx_dlog *log, uint64_t bytes);

/* fx_dlog_append_rolls for fx_dlog_append_marked: also true while the
 * active segment is version 2 (it rolls before the first marked record). */
bool fx_dlog_marked_append_rolls(const fx_dlog *log, uint64_t bytes);

/* One record of a page; |data| points into the page's buffer. */
typedef struct fx_dlog_record {
    uint64_t offset;
    uint64_t ts_us;
    const uint8_t *data;
    uint32_t len;
} fx_dlog_record;

/* A page of records: reused across reads, freed with fx_dlog_page_deinit. */
typedef struct fx_dlog_page {
    fx_dlog_record *recs;
    size_t n;
    uint64_t next; /* offset to read next (after the last record; |from| if none) */
    size_t bytes;  /* payload bytes in the page */
    size_t recs_cap;
    uint8_t *buf;
    size_t buf_cap;
} fx_dlog_page;

void fx_dlog_page_init(fx_dlog_page *p);
void fx_dlog_page_deinit(fx_dlog_page *p);

/* Reads records from offset |from| into |page| (its old records go): at most
 * |max_records| and |max_bytes| payload bytes, but always the first record
 * even when larger; stops at the first record that does not fit, so a page
 * never skips an offset. Every returned record's checksum is verified.
 * |from| at or past the tail gives an empty page. Returns 0,
 * FX_ECURSOR_TOO_OLD (|from| is below fx_dlog_first_offset: retention
 * removed it), FX_ESTORAGE_CORRUPT (fx_dlog_last_error names the file and
 * position), -ENOMEM, -errno. Memory: the page (bounded by the budget) and
 * a 64 KiB window, whatever the history. */
int fx_dlog_read(fx_dlog *log, uint64_t from, size_t max_bytes, size_t max_records,
                 fx_dlog_page *page);

/* What one retention pass removed. */
typedef struct fx_dlog_retained {
    uint64_t segments;
    uint64_t bytes;
    uint64_t first_offset; /* the log's first offset afterwards */
} fx_dlog_retained;

/* Deletes whole sealed segments from the head, oldest first, while the log
 * holds more than |max_bytes| (0: no bound) or the head's newest record is
 * older than |max_age_us| at |now_us| (0: no bound). Never deletes the
 * active segment. |*out| may be NULL. Returns 0 or -errno (what was deleted
 * before the error stays deleted and counted). */
int fx_dlog_retain(fx_dlog *log, uint64_t max_bytes, uint64_t max_age_us, uint64_t now_us,
                   fx_dlog_retained *out);

/* Deletes whole sealed segments from the head, oldest first, while the
 * head's records all lie below |offset| (a cache log's compaction copied
 * what lives in them to the tail and flushed it). Never deletes the active
 * segment. |*out| may be NULL. Returns 0 or -errno (what was deleted before
 * the error stays deleted and counted). */
int fx_dlog_retain_below(fx_dlog *log, uint64_t offset, uint64_t now_us, fx_dlog_retained *out);

/* Segment |i| of the log (0 the oldest, fx_dlog_segment_count - 1 the
 * active one): the offset of its first record, the offset after its last
 * and its bytes on disk (segment and index files, preallocation not
 * counted). False when there is no such segment. Outputs may be NULL. */
bool fx_dlog_segment_at(const fx_dlog *log, size_t i, uint64_t *pbase, uint64_t *pnext,
                        uint64_t *pbytes);

/* The oldest offset still in the log; the offset the next append gets; the
 * offset below which everything is durable. */
uint64_t fx_dlog_first_offset(const fx_dlog *log);
uint64_t fx_dlog_next_offset(const fx_dlog *log);
uint64_t fx_dlog_durable_offset(const fx_dlog *log);

/* The encoding buffer a log keeps between appends: an append larger than
 * this encodes into a buffer that is freed once it is written, so one large
 * append does not pin its size for the log's life. */
#define FX_DLOG_ENC_KEEP_BYTES (256u << 10)

/* Bytes of memory the log holds for appends between calls: the encoding
 * buffer (at most FX_DLOG_ENC_KEEP_BYTES after any append) and the active
 * segment's sparse index (16 bytes per index_spacing_bytes of it). */
size_t fx_dlog_buffer_bytes(const fx_dlog *log);

/* The bytes the log takes on disk as the quotas count them: its segment and
 * index files plus, with preallocate, what is reserved and not yet written
 * of the active segment (segment_bytes in all). */
uint64_t fx_dlog_disk_bytes(const fx_dlog *log);

/* fx_dlog_disk_bytes after an append made now of |bytes| bytes of records
 * (28-byte headers included), a rollover before it included; the index
 * entries it adds are not (at most 16 bytes per index_spacing_bytes). */
uint64_t fx_dlog_disk_bytes_after(const fx_dlog *log, uint64_t bytes);

/* Bytes of the segment and index files (logical sizes, preallocation not
 * counted), the number of segments, and appended bytes not yet flushed. */
uint64_t fx_dlog_bytes_on_disk(const fx_dlog *log);
size_t fx_dlog_segment_count(const fx_dlog *log);
uint64_t fx_dlog_unsynced_bytes(const fx_dlog *log);

/* Whether a failed write or flush stopped the log. */
bool fx_dlog_is_failed(const fx_dlog *log);

const fx_dlog_stats *fx_dlog_stats_get(const fx_dlog *log);

/* The message of the last error (corruption detail, failed call); "" if none. */
const char *fx_dlog_last_error(const fx_dlog *log);

/* The first offset whose record was appended at or after |ts_us| (the
 * append clock, microseconds since the Unix epoch) into |*poff|: the
 * segments' newest-record times pick the segment, then a binary search over
 * its records (one record read per step, O(log n) reads). The log's next
 * offset when every record is older; its first offset when none is. Times
 * are the broker's wall clock at append, non-decreasing unless the clock
 * stepped back (then the answer is one of the offsets around the step).
 * Returns 0 or fx_dlog_read's errors. Storage thread (dlog_time.c). */
int fx_dlog_offset_for_time(fx_dlog *log, uint64_t ts_us, uint64_t *poff);

/* ---- reading the files without an open log (replay readers) ----------------- */

/* The ids of the segment files ("<id:020>.log") in directory |dir|, sorted
 * ascending, into |*pids| (malloc'd, the caller frees; NULL when none) and
 * |*pn|; other names are ignored. Returns 0 or -errno (-ENOMEM). Any thread:
 * it only lists the directory. */
int fx_dlog_list_segments(fx_sio *io, const char *dir, uint64_t **pids, size_t *pn);

/* A record's offset and byte position in its segment file. */
typedef struct fx_dlog_pos {
    uint64_t offset;
    uint64_t pos;
} fx_dlog_pos;

/* The greatest entry at or below offset |off| in the sparse index file
 * |index_path| of the segment whose first record is |base| and which holds
 * |seg_size| bytes, found by binary search with pread. An unusable file
 * (missing, wrong magic, version or base) or no entry gives (|base|, 32),
 * the first record; entries that cannot belong to the segment are passed
 * over. The index is never trusted: the caller checks that the record at
 * the position has the offset. Any thread. */
fx_dlog_pos fx_dlog_index_seek(fx_sio *io, const char *index_path, uint64_t base, uint64_t seg_size,
                               uint64_t off);

#endif
