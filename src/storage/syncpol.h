/* fx_syncpol: when to flush a durable log, and which appends that makes
 * durable or acknowledgeable. Pure policy (no I/O, no clock: the caller
 * passes |now|); the storage thread asks it after every append and at its
 * deadline, begins the flush (fx_dlog_sync_begin: its fdatasync may run on
 * another thread while appends go on) and reports the result once the
 * flush completed (fx_dlog_sync_complete).
 *   none      never flushes by itself (the log flushes at rollover and at
 *             close); appends are acknowledged once written to the page
 *             cache: they survive a process crash, not a power cut.
 *   periodic  flushes |interval_ns| after the previous flush started when
 *             something is unflushed, and also as soon as the unflushed bytes
 *             reach |max_unsynced_bytes| (0: no byte bound); appends are
 *             acknowledged once written. A power cut loses at most what was
 *             appended since the last completed flush: the appends of one
 *             interval plus the flush's own duration, and never more than
 *             max_unsynced_bytes plus one batch.
 *   on_commit appends are acknowledged only once a flush covering them
 *             completed. Group commit: one flush at a time; appends made
 *             while it runs wait and are all covered by the next one, so one
 *             flush serves every waiting append.
 * One thread at a time (the owner of the log). */
#ifndef FX_STORAGE_SYNCPOL_H
#define FX_STORAGE_SYNCPOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum fx_fsync_mode {
    FX_FSYNC_NONE,
    FX_FSYNC_PERIODIC,
    FX_FSYNC_ON_COMMIT,
} fx_fsync_mode;

/* The original's default interval: 250 ms. */
#define FX_SYNCPOL_DEFAULT_INTERVAL_NS (250ull * 1000000ull)

/* Parses the original's spellings (ASCII case ignored): none|off, periodic,
 * on_commit|on-commit|commit. Returns 0, or FX_ECONFIG (|*pmode| untouched). */
int fx_fsync_mode_parse(const char *s, fx_fsync_mode *pmode);

/* "none", "periodic", "on_commit". */
const char *fx_fsync_mode_name(fx_fsync_mode mode);

typedef struct fx_syncpol_config {
    fx_fsync_mode mode;
    uint64_t interval_ns;        /* periodic: > 0 */
    uint64_t max_unsynced_bytes; /* periodic: flush early at this many bytes; 0 = off */
} fx_syncpol_config;

typedef struct fx_syncpol_stats {
    uint64_t syncs; /* completed flushes */
    uint64_t sync_failures;
    uint64_t synced_appends; /* appends covered, summed over flushes (fan-in = / syncs) */
    uint64_t max_fan_in;     /* most appends one flush covered */
} fx_syncpol_stats;

typedef struct fx_syncpol {
    fx_syncpol_config cfg;
    uint64_t written;        /* offsets below are appended */
    uint64_t durable;        /* offsets below are flushed */
    uint64_t unsynced_bytes; /* appended and not yet flushed (a running flush's included) */
    uint64_t waiting;        /* appends not covered by a started flush */
    uint64_t oldest_ns;      /* time of the oldest of them */
    uint64_t last_start_ns;  /* when the last flush started (init time before any) */
    bool in_flight;
    uint64_t flight_target; /* the running flush covers offsets below */
    uint64_t flight_bytes;
    uint64_t flight_appends;
    uint64_t flight_oldest_ns;
    fx_syncpol_stats st;
} fx_syncpol;

/* Checks |cfg|: periodic needs interval_ns > 0. Returns 0 or FX_ECONFIG. */
int fx_syncpol_config_check(const fx_syncpol_config *cfg);

/* Starts the policy at time |now_ns| for a log whose next offset (all of it
 * durable, as after recovery) is |next|. */
void fx_syncpol_init(fx_syncpol *p, const fx_syncpol_config *cfg, uint64_t now_ns, uint64_t next);

/* An append of |bytes| bytes at |now_ns| made offsets below |end| written. */
void fx_syncpol_appended(fx_syncpol *p, uint64_t end, uint64_t bytes, uint64_t now_ns);

/* Whether a flush should start at |now_ns|. */
bool fx_syncpol_is_due(const fx_syncpol *p, uint64_t now_ns);

/* The earliest time a flush becomes due without further appends (|now| or
 * earlier if due already); UINT64_MAX when none will be. */
uint64_t fx_syncpol_deadline(const fx_syncpol *p);

/* A flush starts at |now_ns|; it covers the offsets below the returned
 * target (everything written so far). */
uint64_t fx_syncpol_begin(fx_syncpol *p, uint64_t now_ns);

/* The running flush ended with |rv| (0 or an error); on success the log
 * reported |durable| (fx_dlog_sync_complete's offset, which covers the
 * target and nothing appended after the flush began). */
void fx_syncpol_end(fx_syncpol *p, int rv, uint64_t durable);

/* Offsets below this may be acknowledged: the durable ones under
 * on_commit, every written one otherwise. */
uint64_t fx_syncpol_ack_upto(const fx_syncpol *p);

/* Time retention's clock. Segments are deleted by the timestamps of their
 * records, written from the wall clock; "now" is the wall clock too, but
 * never more than |tolerance_us| ahead of the wall clock at |anchor| (taken
 * at start) plus the monotonic time elapsed since. A forward step of the
 * wall clock while the broker runs (NTP correcting a machine that booted
 * without a real-time clock, a restored VM snapshot, an operator's
 * mistake) then cannot delete segments early: retention follows the
 * monotonic clock until the next start. A backward step only keeps data
 * longer. A step made before the start cannot be told from the time the
 * broker was down. */
typedef struct fx_retention_clock {
    uint64_t wall_us; /* the wall clock at the anchor */
    uint64_t mono_ns; /* the monotonic clock at the anchor */
} fx_retention_clock;

/* Retention's "now" for |wall_us| and |mono_ns| read together; *pheld (may
 * be NULL) tells whether the guard held the wall clock back. */
uint64_t fx_retention_now_us(const fx_retention_clock *anchor, uint64_t wall_us, uint64_t mono_ns,
                             uint64_t tolerance_us, bool *pheld);

#endif
