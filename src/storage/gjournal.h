/* fx_gjournal: the on-disk state of one consumer group of a durable stream:
 * an append-only journal of the group's changes (<stem>.jrnl) and two
 * alternating snapshots (<stem>.snap.a, <stem>.snap.b) in the stream's
 * "groups" directory, with their encoding, recovery and compaction, all
 * through fx_sio (so memio's crash and power-cut machinery covers them).
 * Thread: the storage thread of the stream only; not thread-safe, no locks.
 * Ownership: an fx_gjournal owns its open journal handle and its buffers;
 * an fx_gjournal_state owns its arrays (fx_gjournal_state_deinit frees
 * them). The caller owns the fx_sio, which must outlive the journal.
 * docs/durability.md "Consumer group state on disk" describes the files. */
#ifndef FX_STORAGE_GJOURNAL_H
#define FX_STORAGE_GJOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/sio.h"

/* ---- names ----------------------------------------------------------------- */

/* Length of a file stem ("orders-0123456789abcdef"), NUL included: the
 * sanitised name (at most 32 bytes), '-', 16 hex digits. */
#define FX_GJOURNAL_STEM_MAX (32 + 1 + 16 + 1)

/* FNV-1a 64 of the raw bytes of |group|. */
uint64_t fx_gjournal_name_hash(const char *group);

/* Writes the stem of |group|'s files into |out| (FX_GJOURNAL_STEM_MAX bytes):
 * the name sanitised as stream names are (fx_logfmt_sanitise), "-", then
 * fx_gjournal_name_hash() as 16 lower-case hex digits. */
void fx_gjournal_stem(char *out, const char *group);

/* ---- records ---------------------------------------------------------------- */

/* A journal record: u32 len (of the body) | u8 type | u8 flags (0) |
 * u16 reserved (0) | u64 seq | body | u32 crc32, big-endian; the CRC-32/IEEE
 * (fx_logfmt_crc) covers type to the end of the body. */
#define FX_GJOURNAL_REC_OVERHEAD 20
/* Largest encoded record (DEAD: a 17-byte body). */
#define FX_GJOURNAL_REC_MAX (FX_GJOURNAL_REC_OVERHEAD + 20)

typedef enum fx_gjournal_type {
    FX_GJ_DELIVER = 1,     /* [offset, offset+count) handed out at |attempt| */
    FX_GJ_ACK = 2,         /* [offset, offset+count) settled by acks */
    FX_GJ_NAK = 3,         /* |offset| back, |attempt| kept, AVAILABLE at not_before_us */
    FX_GJ_RELEASE = 4,     /* |offset| back, AVAILABLE now, |attempt| = what remains */
    FX_GJ_DEAD_INTENT = 5, /* |offset| (|attempt| deliveries) is being dead-lettered */
    FX_GJ_DEAD = 6,        /* |offset| dead-lettered at |dlq_offset|: settled */
    FX_GJ_SKIP = 7,        /* [offset, offset+count) settled unread */
    FX_GJ_SEEK = 8,        /* everything dropped; floor = next = |offset| */
    FX_GJ_REDRIVE = 9,     /* settled |offset| owed again: AVAILABLE, 0 attempts; its
                              dead-letter entry is marked redriven */
    FX_GJ_DISCARD = 10,    /* |offset|'s dead-letter entry removed (the record stays) */
} fx_gjournal_type;

/* One record, decoded. Fields a type does not carry are 0. */
typedef struct fx_gjournal_rec {
    fx_gjournal_type type;
    uint64_t seq;           /* assigned by fx_gjournal_append (ignored there) */
    uint64_t offset;        /* first offset of a range, or the offset */
    uint32_t count;         /* DELIVER, ACK, SKIP: >= 1 */
    uint32_t attempt;       /* DELIVER, NAK, RELEASE; DEAD_INTENT: attempts so far */
    uint64_t not_before_us; /* NAK: 0 = AVAILABLE now, else PARKED until then (wall clock, us) */
    uint64_t dlq_offset;    /* DEAD */
    uint8_t reason;         /* DEAD_INTENT, DEAD */
} fx_gjournal_rec;

/* Outcome of decoding one record. */
typedef enum fx_gjournal_status {
    FX_GJ_REC_OK = 0,
    FX_GJ_REC_SHORT, /* the buffer ends inside the record */
    FX_GJ_REC_BAD,   /* checksum mismatch, unknown type, wrong body length, nonzero
                        flags or reserved, a zero count, or a range past 2^64 */
} fx_gjournal_status;

/* Whether |r| is a record the journal can hold: a known type, and for a
 * range a count >= 1 that does not pass 2^64. Pure. */
bool fx_gjournal_rec_is_valid(const fx_gjournal_rec *r);

/* Writes record |r| with sequence number |seq| into |out| (at least
 * FX_GJOURNAL_REC_MAX bytes); returns its length. |r| must be valid (as
 * fx_gjournal_decode_record would accept it). Pure. */
size_t fx_gjournal_encode_record(const fx_gjournal_rec *r, uint64_t seq, uint8_t *out);

/* Decodes the record at the start of the |len| bytes at |buf| into |*r| and
 * its length into |*pused| (on OK). Pure, any bytes (fuzzed). */
fx_gjournal_status fx_gjournal_decode_record(const uint8_t *buf, size_t len, fx_gjournal_rec *r,
                                             size_t *pused);

/* ---- the state model ------------------------------------------------------ */

/* Most pending records a state holds (a bound on max_ack_pending +
 * max_parked); a journal or snapshot asking for more is corrupt. */
#define FX_GJOURNAL_MAX_PENDING (1u << 20)

typedef enum fx_gjournal_pstate {
    FX_GJ_AVAILABLE = 1, /* not_before_us == 0 */
    FX_GJ_PARKED = 2,    /* AVAILABLE at not_before_us (> 0) */
} fx_gjournal_pstate;

typedef struct fx_gjournal_pending {
    uint64_t offset;
    uint64_t not_before_us;
    uint32_t attempts;
    uint8_t state; /* fx_gjournal_pstate */
} fx_gjournal_pending;

typedef struct fx_gjournal_intent {
    uint64_t offset;
    uint32_t attempts;
    uint8_t reason;
} fx_gjournal_intent;

/* Most dead-letter entries a state lists (the group's list, DEAD_LIST_MAX
 * in group.c); past it the oldest is forgotten, counted. */
#define FX_GJOURNAL_DEAD_MAX 10000u

/* One entry of the dead-letter list: a record dead-lettered (and not
 * discarded), or redriven: owed again (pending) until it is acked. */
typedef struct fx_gjournal_dead {
    uint64_t offset;
    uint64_t dlq_offset; /* as the DEAD record says (0: not known) */
    uint32_t attempts;   /* deliveries when it was dead-lettered */
    uint8_t reason;      /* 1 max_deliver, 2 term */
    bool redriven;
} fx_gjournal_dead;

/* A group's durable state, as the group engine sees it (group_state.h):
 * offsets below |floor| are settled; in [floor, next) those in the pending
 * list are unsettled and every other one is settled; offsets >= next were
 * never handed out. A delivered record comes back AVAILABLE (leases are not
 * journaled). Dead intents name pending records whose dead letter was begun
 * and not finished. Read the lists with fx_gjournal_state_pending and
 * fx_gjournal_state_intents; the other fields are private. */
typedef struct fx_gjournal_state {
    uint64_t floor, next;
    fx_gjournal_pending *p; /* pending at p[head .. head+n), sorted by offset */
    size_t head, n, cap;
    fx_gjournal_intent *in; /* sorted by offset */
    size_t nin, incap;
    fx_gjournal_dead *dl; /* the dead-letter list, oldest first; one entry per offset */
    size_t ndl, dlcap, nredriven;
    uint64_t dead_forgotten;
} fx_gjournal_state;

/* An empty state: floor = next = 0, nothing pending. */
void fx_gjournal_state_init(fx_gjournal_state *s);
/* Frees the arrays of |s| and empties it; NULL does nothing. */
void fx_gjournal_state_deinit(fx_gjournal_state *s);

/* The pending list (sorted by offset) and its length in |*pn|. */
const fx_gjournal_pending *fx_gjournal_state_pending(const fx_gjournal_state *s, size_t *pn);
/* The dead intents (sorted by offset) and their count in |*pn|. */
const fx_gjournal_intent *fx_gjournal_state_intents(const fx_gjournal_state *s, size_t *pn);
/* The dead-letter list (oldest first), its length in |*pn| and the number
 * of entries forgotten past FX_GJOURNAL_DEAD_MAX in |*pforgotten|. */
const fx_gjournal_dead *fx_gjournal_state_dead(const fx_gjournal_state *s, size_t *pn,
                                               uint64_t *pforgotten);

/* Applies record |r| as the group engine made it (the replay rules):
 *   DELIVER  offsets >= next become pending at |attempt|, pending ones in
 *            the range take |attempt|, settled ones are left alone; next =
 *            max(next, offset+count);
 *   ACK      settles the pending offsets of the range (offsets >= next are
 *            refused, as the engine refuses them);
 *   SKIP     settles the range; next = max(next, offset+count);
 *   NAK      a pending offset takes |attempt|, AVAILABLE at not_before_us
 *            (PARKED if > 0); RELEASE: |attempt|, AVAILABLE now;
 *   DEAD_INTENT records the intent of a pending offset; DEAD settles a
 *            pending offset and lists it (attempts from its intent, else from its pending
 *            entry): a redriven entry of that offset is dead again, else a
 *            new entry goes last (the oldest forgotten, counted, past
 *            FX_GJOURNAL_DEAD_MAX);
 *   REDRIVE  a settled offset below next becomes pending, AVAILABLE with 0
 *            attempts (the floor may go down to it); its entry is marked
 *            redriven;
 *   DISCARD  removes the offset's entry unless it is redriven;
 *   SEEK     drops everything pending and the redriven entries; floor =
 *            next = |offset|.
 * Settling drops the offset's intent and moves the floor to the lowest
 * pending offset (next when none); an ACK or SKIP of a redriven offset
 * removes its entry. A NAK, RELEASE or intent of an offset that is not
 * pending, a REDRIVE of one that is not settled and a DISCARD of one not
 * listed change nothing. Returns 0, -ENOMEM (|s| unchanged),
 * or FX_ESTORAGE_CORRUPT when the pending list would pass
 * FX_GJOURNAL_MAX_PENDING. */
int fx_gjournal_state_apply(fx_gjournal_state *s, const fx_gjournal_rec *r);

/* Whether |a| and |b| hold the same floor, next, pending list, intents and
 * dead-letter list (forgotten count included). */
bool fx_gjournal_state_equal(const fx_gjournal_state *a, const fx_gjournal_state *b);

/* Makes |dst| (initialised) a copy of |src|. 0 or -ENOMEM (|dst| unchanged). */
int fx_gjournal_state_copy(fx_gjournal_state *dst, const fx_gjournal_state *src);

/* ---- snapshots ---------------------------------------------------------------- */

/* "FXGS" | u16 version (2) | u64 journal_seq | u64 floor | u64 next |
 * u32 npending | npending x (u64 offset, u32 attempts, u8 state,
 * u64 not_before_us) | u32 nintents x (u64 offset, u32 attempts, u8 reason)
 * | u64 dead_forgotten | u32 ndead x (u64 offset, u64 dlq_offset,
 * u32 attempts, u8 reason, u8 flags (1: redriven)) | u32 crc32 over
 * everything before it. Version 1 (no dead-letter list: it ends after the
 * intents) is still read, as a state with an empty list. */
#define FX_GJOURNAL_SNAP_MAGIC 0x46584753u /* "FXGS" */
#define FX_GJOURNAL_SNAP_VERSION 2

/* Encodes |s| as a snapshot covering the journal up to |journal_seq| into a
 * malloc'd buffer (*pbuf, *plen; the caller frees it). 0 or -ENOMEM. */
int fx_gjournal_encode_snapshot(const fx_gjournal_state *s, uint64_t journal_seq, uint8_t **pbuf,
                                size_t *plen);

/* Decodes the |len| bytes at |buf| into |s| (initialised; replaced on
 * success, unchanged on failure) and its journal sequence into *pseq.
 * Checks the magic, version, length, checksum, the bounds, that pending
 * offsets ascend within [floor, next) with a state that matches their
 * not-before, that intents ascend and name pending offsets, and that
 * dead-letter entries name distinct offsets with flags 0 or 1, a redriven
 * one a pending offset. Returns 0,
 * FX_ESTORAGE_CORRUPT with a reason in |why| (may be NULL), or -ENOMEM.
 * Pure, any bytes (fuzzed). */
int fx_gjournal_decode_snapshot(const uint8_t *buf, size_t len, fx_gjournal_state *s,
                                uint64_t *pseq, char *why, size_t whylen);

/* ---- recovery counters -------------------------------------------------------- */

typedef struct fx_gjournal_stats {
    uint64_t replayed;          /* journal records applied at open */
    uint64_t torn_tail_cut;     /* opens that cut a torn tail */
    uint64_t torn_bytes;        /* bytes those cuts removed */
    uint64_t snapshot_corrupt;  /* snapshots that failed to decode at open */
    uint64_t snapshot_fallback; /* opens that used the older snapshot */
    uint64_t clamped;           /* clamps that moved something */
    uint64_t appends;           /* fx_gjournal_append calls (one write each) */
    uint64_t records;           /* records appended */
    uint64_t syncs;             /* fdatasyncs of the journal */
    uint64_t compactions;
} fx_gjournal_stats;

/* Clamps |s| to a log whose next offset is |log_tail| (a power cut may have
 * lost log records that the group saw): floor = min(floor, tail), next =
 * min(next, tail), pending, intents and dead-letter entries >= tail dropped
 * (entries are dropped without counting a clamp). Adds 1 to
 * st->clamped (|st| may be NULL) when anything moved. Never goes below
 * |log_tail|. */
void fx_gjournal_clamp(fx_gjournal_state *s, uint64_t log_tail, fx_gjournal_stats *st);

/* ---- the journal ---------------------------------------------------------- */

typedef struct fx_gjournal fx_gjournal;

/* Compaction thresholds: the records appended since the newest snapshot. */
#define FX_GJOURNAL_COMPACT_BYTES (4u << 20)
#define FX_GJOURNAL_COMPACT_RECORDS 65536u

/* Opens the state of group |group| in directory |dir| (the stream's
 * directory + "/groups") on |io|: loads the newer valid snapshot (the other
 * one when it does not decode), replays the journal records after it,
 * cuts a torn tail past the journal's durable point (counted), and returns
 * the recovered state in |out| (initialised; replaced). With |create| a
 * group without files gets a new empty journal (and |dir| is made);
 * without, it is -ENOENT. Returns 0; -ENOENT; FX_ESTORAGE_CORRUPT with
 * "file=<name>, position=<byte>" and the reason in |why| (may be NULL) for
 * damage a crash cannot leave (a bad record before the durable point, a
 * sequence gap, both snapshots bad, a journal missing beside a snapshot);
 * -ENOMEM; or an I/O error (-errno). Counters are added to |st| (may be
 * NULL) and kept in the journal. The caller then clamps |out| to the log
 * (fx_gjournal_clamp). Frees with fx_gjournal_close. */
int fx_gjournal_open(fx_gjournal **pj, fx_sio *io, const char *dir, const char *group, bool create,
                     fx_gjournal_state *out, fx_gjournal_stats *st, char *why, size_t whylen);

/* Appends the |n| records at |recs| (their seq fields ignored: they get the
 * next sequence numbers) with one write. On failure nothing was appended
 * (a part written is cut off); if the cut fails too, the journal stops:
 * every later call returns FX_ESTORAGE_FAILED. Returns 0, -ENOMEM, -errno,
 * or FX_ESTORAGE_FAILED. */
int fx_gjournal_append(fx_gjournal *j, const fx_gjournal_rec *recs, size_t n);

/* Makes every record appended so far durable (fdatasync), then records the
 * new durable point in the journal's header (reaching the disk with the next
 * flush). The caller decides when, following the stream's fsync policy. A
 * failed flush stops the journal (its pages' fate is unknown). 0, -errno
 * or FX_ESTORAGE_FAILED. */
int fx_gjournal_sync(fx_gjournal *j);

/* Writes a snapshot of |s| (the state after every record appended so far)
 * over the older snapshot (tmp file, fdatasync, rename, directory sync),
 * then restarts the journal with the records since the snapshot it keeps
 * (so either snapshot plus the journal gives the state): a new file built
 * beside it, flushed, renamed over it and the directory synced. A crash
 * between any two steps recovers the same state. Returns 0, -ENOMEM, -errno
 * (the journal goes on), or FX_ESTORAGE_FAILED (a failure after the rename:
 * the journal stopped). */
int fx_gjournal_compact(fx_gjournal *j, const fx_gjournal_state *s);

/* Whether the records appended since the newest snapshot pass
 * FX_GJOURNAL_COMPACT_BYTES or FX_GJOURNAL_COMPACT_RECORDS (or the limits of
 * fx_gjournal_set_limits). */
bool fx_gjournal_should_compact(const fx_gjournal *j);

/* Overrides the compaction thresholds (0 keeps one), for tests. */
void fx_gjournal_set_limits(fx_gjournal *j, uint64_t bytes, uint64_t records);

/* Sequence number of the last record appended (0 if none ever). */
uint64_t fx_gjournal_seq(const fx_gjournal *j);
/* Bytes of the journal file. */
uint64_t fx_gjournal_size(const fx_gjournal *j);
const fx_gjournal_stats *fx_gjournal_stats_of(const fx_gjournal *j);

/* Closes |j|, first flushing it (and its durable point) when |sync|; frees
 * it in every case. Returns the flush's result (0 without |sync|). NULL
 * does nothing. */
int fx_gjournal_close(fx_gjournal *j, bool sync);

/* Deletes the files of |group| in |dir| (snapshots first, then the journal
 * and any temporary file) and syncs |dir|. Missing files are not an error;
 * a crash half-way leaves a group that opens as corrupt, so the caller
 * repeats the removal (the catalogue's deleting flag). 0 or -errno. */
int fx_gjournal_remove(fx_sio *io, const char *dir, const char *group);

#endif
