/* The producer table of one stream (idempotent publish): per producer id the
 * last FX_PRODUCERS_WINDOW batches it wrote (sequence, first offset, record
 * count, records held, digest), at most max_producers producers (the one
 * whose newest batch is oldest is forgotten first, and counted), and the
 * producers retention retired (known as "expired" for a time to live). On a
 * durable stream the owner is the stream's fx_dlog (dlog.h), which rebuilds
 * the table at open from the producer marks of its v3 segments, helped by
 * the `producers` snapshot ("FLPS", written at each rollover), and keeps it
 * in step with every marked append; in-memory streams may own one directly.
 * Owner: the storage thread of the stream (the log's owner); no locks, no
 * other thread. Digests: fx_producer_digest_step (format.h), big-endian. */
#ifndef FX_STORAGE_PRODUCERS_H
#define FX_STORAGE_PRODUCERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/sio.h"

#define FX_PRODUCERS_WINDOW 64
#define FX_PRODUCERS_DEFAULT_MAX 4096
#define FX_PRODUCERS_DEFAULT_TTL_S 86400u
/* Retired producers kept at most (the oldest retired go first, counted). */
#define FX_PRODUCERS_RETIRED_MAX 65536

/* File names in the stream's directory. */
#define FX_PRODUCERS_SNAPSHOT_NAME "producers"
#define FX_PRODUCERS_RETIRED_NAME "producers.retired"
#define FX_PRODUCERS_SNAPSHOT_MAGIC 0x464C5053u /* "FLPS" */
#define FX_PRODUCERS_SNAPSHOT_VERSION 2
#define FX_PRODUCERS_RETIRED_MAGIC 0x464C5052u /* "FLPR" */

typedef struct fx_producers fx_producers;

/* What a lookup answers for (producer, sequence, digest). */
typedef enum fx_prod_verdict {
    FX_PROD_NEXT = 0,  /* the next expected sequence (or 0 of a new producer): append */
    FX_PROD_DUPLICATE, /* remembered with the same digest: answer first/count, append nothing */
    FX_PROD_REUSED,    /* remembered with another digest */
    FX_PROD_GAP,       /* ahead of the next expected (expected) */
    FX_PROD_EXPIRED,   /* older than the window, or the producer was retired by retention */
    FX_PROD_UNKNOWN,   /* no state for this producer and sequence != 0 */
    FX_PROD_PARTIAL,   /* the batch is only partly in the log (held records; digest of them) */
} fx_prod_verdict;

typedef struct fx_prod_answer {
    fx_prod_verdict verdict;
    uint64_t first;    /* DUPLICATE, PARTIAL: the batch's first offset */
    uint32_t count;    /* DUPLICATE, PARTIAL: records of the batch (its tag's len) */
    uint32_t held;     /* PARTIAL: records of it in the log */
    uint64_t digest;   /* PARTIAL: digest of the held records (the caller compares its own
                        * records' prefix: another start is REUSED) */
    uint64_t expected; /* GAP: the next expected sequence */
} fx_prod_answer;

/* Counters since the table was made. */
typedef struct fx_producers_stats {
    uint64_t forgotten;         /* producers dropped by the max_producers bound */
    uint64_t retired;           /* producers retired because retention removed their last batch */
    uint64_t retired_forgotten; /* retired producers dropped (ttl passed or the bound) */
    uint64_t snapshot_rebuilds; /* snapshot missing, damaged or out of range: rebuilt from the log */
    uint64_t snapshot_write_failures;
    uint64_t retired_write_failures;
    uint64_t orphan_marks; /* continuation marks with no open batch before them (ignored) */
} fx_producers_stats;

/* Makes an empty table of at most |max_producers| producers (0: the default
 * 4,096) that keeps retired producers for |ttl_s| seconds. Returns 0 or
 * -ENOMEM. */
int fx_producers_new(fx_producers **ptab, size_t max_producers, uint64_t ttl_s);
void fx_producers_free(fx_producers *tab);

/* Empties the table (producers and batches; retired ones and counters stay). */
void fx_producers_clear(fx_producers *tab);

/* Answers for a batch of |count| records of producer |id| at |sequence|
 * whose records' chained digest is |digest|, at |now_us| (retired entries
 * past their ttl are not counted as known). Pure: nothing changes. */
void fx_producers_lookup(const fx_producers *tab, uint64_t id, uint64_t sequence, uint64_t digest,
                         uint64_t now_us, fx_prod_answer *ans);

/* Records that batch |sequence| of producer |id| (|count| records, the
 * first at offset |first|) now has |held| records in the log whose chained
 * digest is |digest| (has_digest false: a batch without one, which matches
 * any digest). A sequence already in the window updates that batch; one
 * after the newest is pushed (the window drops its oldest beyond 64); a
 * sequence not following the newest starts the window over. A new producer
 * beyond the bound forgets the one whose newest batch is oldest (counted).
 * Clears a retired entry of |id|. Returns 0 or -ENOMEM. */
int fx_producers_note(fx_producers *tab, uint64_t id, uint64_t sequence, uint64_t first,
                      uint32_t count, uint32_t held, uint64_t digest, bool has_digest);

/* Retention removed every record below offset |first_kept|: batches that
 * started there are dropped; a producer left with none is retired at
 * |now_us| (a later lookup answers EXPIRED until the ttl passes). */
void fx_producers_retire_below(fx_producers *tab, uint64_t first_kept, uint64_t now_us);

/* Whether retire_below(|first_kept|) would retire a producer (the caller
 * writes the retired file first only then). */
bool fx_producers_would_retire(const fx_producers *tab, uint64_t first_kept);

size_t fx_producers_count(const fx_producers *tab);
size_t fx_producers_retired_count(const fx_producers *tab);
fx_producers_stats *fx_producers_stats_get(fx_producers *tab);

/* ---- files --------------------------------------------------------------------- */

/* Writes the snapshot of |tab| as of offset |as_of| (everything below it is
 * in the table) to |dir|/producers via a temporary file and a rename, not
 * flushed (it is derived; damage only costs a rebuild). A failure is
 * counted and returned. */
int fx_producers_snapshot_write(fx_producers *tab, fx_sio *io, const char *dir, uint64_t as_of);

/* Loads |dir|/producers into |tab| (emptied first) if it is whole and its
 * as_of lies in [|lo|, |hi|]; returns 0 with |*pas_of|, or a negative value
 * (missing, damaged, out of range, -ENOMEM) with |tab| empty. Batches below
 * |lo| (removed by retention) are dropped. The caller replays the log from
 * *pas_of on: the snapshot is never trusted over the log. */
int fx_producers_snapshot_load(fx_producers *tab, fx_sio *io, const char *dir, uint64_t lo,
                               uint64_t hi, uint64_t *pas_of);

/* Writes the retired producers still inside the ttl at |now_us|, plus every
 * producer retire_below(|first_kept|) would retire (stamped |now_us|), to
 * |dir|/producers.retired, flushed
 * (temporary file, fdatasync, rename, directory sync): called before
 * retention deletes a segment. Returns 0 or -errno (counted). */
int fx_producers_retired_write(fx_producers *tab, fx_sio *io, const char *dir, uint64_t first_kept,
                               uint64_t now_us);

/* Loads |dir|/producers.retired (missing: nothing) keeping entries younger
 * than the ttl at |now_us|. Returns 0, or FX_ESTORAGE_CORRUPT for a damaged
 * file (nothing loaded), -errno. */
int fx_producers_retired_load(fx_producers *tab, fx_sio *io, const char *dir, uint64_t now_us);

/* ---- reading state (snapshots, tools, tests) ------------------------------------ */

typedef struct fx_prod_batch {
    uint64_t sequence;
    uint64_t first;
    uint64_t digest;
    uint32_t count;
    uint32_t held;
    bool has_digest;
} fx_prod_batch;

/* The producer that wrote the newest batch (|*pid|) and that batch; false
 * for an empty table. */
bool fx_producers_newest(const fx_producers *tab, uint64_t *pid, fx_prod_batch *out);

/* The newest batch of producer |id|; false if the producer is not known. */
bool fx_producers_last(const fx_producers *tab, uint64_t id, fx_prod_batch *out);

#endif
