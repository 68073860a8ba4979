/* Durable caches (docs/cache.md "Durable caches"): a cache declared durable
 * keeps its puts and deletes in an fx_dlog (the storage layer of durable
 * streams, so the same I/O layer and crash tests apply) in
 * <durable_storage_dir>/caches/<tenant>_<ns>_<cache>_0-<hash>/, one record
 * per applied write in the original's cache record payload, appended and
 * flushed by the storage thread of the cache's worker; at start every log
 * there is read back into its worker's store. A struct fxb_dcache is the
 * durable part of one cache: made by its worker (or at start), written to
 * only by that worker's storage thread (its log, its waiting answers), and
 * freed by the storage thread when the cache is dropped, else at teardown.
 * Thread noted per function. */
#ifndef FX_BROKER_CACHE_DUR_H
#define FX_BROKER_CACHE_DUR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/broker_internal.h"
#include "broker/reply.h"

typedef struct fxb_dcache fxb_dcache;

/* The original's cache record payload (felix-facts-groups.md 1.7),
 * little-endian as the original writes it: u8 version, u8 op (0 put,
 * 1 delete), u64 expires_at_millis (wall clock, 0 never), u32 key_len,
 * version 2 only: u64 version, then the key, then the value (the rest of
 * the record). Felix-C writes version 2: a put carries its entry's
 * version, a delete the cache's last version (so a restart never gives a
 * version twice); version 1 records (written before, or by the original)
 * are read, their puts getting new versions at start. */
#define FXB_DCACHE_REC_VERSION 2u
#define FXB_DCACHE_OP_PUT 0u
#define FXB_DCACHE_OP_DELETE 1u
#define FXB_DCACHE_REC_HEADER 22u
#define FXB_DCACHE_REC_HEADER_V1 14u

/* A decoded record; |key| and |value| point into the payload. */
typedef struct fxb_dcache_rec {
    uint8_t format; /* 1 or 2 */
    uint8_t op;
    uint64_t expires_ms; /* 0: never */
    uint64_t version;    /* version 2; 0 for a version 1 record (unknown) */
    const uint8_t *key;
    uint32_t klen;
    const uint8_t *value;
    size_t vlen;
} fxb_dcache_rec;

/* Writes the version 2 record into |out| (FXB_DCACHE_REC_HEADER + klen +
 * vlen bytes) and returns its length. Any thread. */
size_t fxb_dcache_rec_encode(uint8_t *out, uint8_t op, uint64_t expires_ms, uint64_t version,
                             const void *key, uint32_t klen, const void *value, size_t vlen);
/* Decodes |n| bytes at |p| (version 1 or 2): 0, or -EINVAL (too short,
 * another version, an unknown op, a key_len past the end). Any thread. */
int fxb_dcache_rec_decode(const uint8_t *p, size_t n, fxb_dcache_rec *r);

/* A cache's log rolls at durable_segment_bytes or this, the smaller. */
#define FXB_DCACHE_SEGMENT_MAX (16u << 20)

/* The wall clock in milliseconds (expires_at_millis). Any thread. */
uint64_t fxb_dcache_wall_ms(void);

/* One record on its way to the log: made by the cache's worker, taken by
 * fxb_dcache_write. */
typedef struct fxb_dcache_wr fxb_dcache_wr;
/* A record of |op| for |key| (and |value| for a put) expiring at
 * |expires_ms|; NULL on -ENOMEM. Worker loop. */
fxb_dcache_wr *fxb_dcache_wr_new(uint8_t op, uint64_t expires_ms, const void *key, size_t klen,
                                 const void *value, size_t vlen);

/* Sets |wr|'s op, expiry and version (a put: the entry's; a delete: the
 * cache's last, fxb_cache_scope_version); a delete drops the value.
 * Worker loop. */
void fxb_dcache_wr_set(fxb_dcache_wr *wr, uint8_t op, uint64_t expires_ms, uint64_t version);
/* Frees a record that was not sent. NULL ok. Worker loop. */
void fxb_dcache_wr_free(fxb_dcache_wr *wr);

/* The durable part of cache |tenant|/|ns|/|cache| of worker |w| (whose
 * storage thread will own its log, opened on its first write); NULL on
 * -ENOMEM. Worker loop, or main thread at start. */
fxb_dcache *fxb_dcache_new(fxb_worker *w, const char *tenant, const char *ns, const char *cache);

/* Whether a write to |dc| is answered only after the flush that covers it
 * (durable_fsync_mode on_commit). Any thread. */
bool fxb_dcache_waits(const fxb_dcache *dc);
/* Why |dc| is quarantined (its log was damaged when the broker started: the
 * cache answers every request with an error naming it, the rest of the
 * broker is served; `felix log repair` or --repair-durable cuts the log),
 * or NULL. Worker loop. */
const char *fxb_dcache_damaged(const fxb_dcache *dc);

/* Whether the broker's durable bytes (the logs of durable streams and
 * caches) are at or past durable_bytes_max: a write to a durable cache is
 * then refused before it applies. Any thread. */
bool fxb_dcache_over_quota(const fxb_dcache *dc);

/* Sends |wr| (taken) to the storage thread of |dc|'s worker, which appends
 * it after every record sent before. With |r| (on_commit: the caller
 * checked fxb_dcache_waits) the answer |f| (taken) completes |r| (the
 * worker's reference, taken) once a flush covered the record, or an error
 * answer does if it could not be written; without, the caller has
 * answered. Worker loop. */
void fxb_dcache_write(fxb_dcache *dc, fxb_dcache_wr *wr, fxb_reply *r, fx_buf *f);

/* The cache was dropped (admin API): its storage thread answers what
 * waits, closes the log, deletes its directory and frees |dc|. Worker
 * loop; |dc| is not used after. */
void fxb_dcache_drop(fxb_dcache *dc);

/* Closes |dc|'s log with a flush (loops stopped, before the root's lock
 * goes) and frees what waits on it. NULL ok. Main thread, teardown. */
void fxb_dcache_close(fxb_dcache *dc);
/* Frees |dc| (after fxb_dcache_close). NULL ok. Main thread, teardown. */
void fxb_dcache_free(fxb_dcache *dc);

/* Makes the directory of a durable cache and its `cache.json` (the names,
 * read at start), if missing. 0 or -errno with the reason in |why|. Any
 * thread, once b->dur exists (the root is held). */
int fxb_dcache_make_dir(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                        char *why, size_t n);

/* Start-up, after fxb_durable_recover: makes the directories of the
 * caches the configuration declares durable, then declares every durable
 * cache found under <root>/caches and rebuilds its entries into its
 * worker's store (last write wins, deletes remove, expired entries are
 * skipped, the TTL left goes to the monotonic clock; the store's bounds
 * apply, evicting as puts do). Returns 0, or a failure with the reason in
 * opts.durable.error (a damaged log, an unreadable directory). Main
 * thread, before the loops start. */
int fxb_dcache_recover(fx_broker *b);

#endif
