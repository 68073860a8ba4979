/* The files of one consumer group (gjournal.h): names, the journal and its
 * recovery, appends, flushes, compaction and removal, all through fx_sio.
 * Storage thread of the stream only. The codecs and the state model are in
 * gjournal_state.c. */
#include "storage/gjournal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "storage/format.h"
#include "storage/gjournal_int.h"

/* ---- names ----------------------------------------------------------------- */

uint64_t fx_gjournal_name_hash(const char *group)
{
    return fx_logfmt_fnv1a64(group, strlen(group));
}

void fx_gjournal_stem(char *out, const char *group)
{
    char *p = fx_logfmt_sanitise(out, group);
    snprintf(p, FX_GJOURNAL_STEM_MAX - (size_t)(p - out), "-%016" PRIx64,
             fx_gjournal_name_hash(group));
}

/* ---- the journal files ------------------------------------------------------ */

/* Journal header, 32 bytes: "FXGJ" | u16 version (1) | u16 reserved |
 * u64 base_seq (the records start at base_seq + 1) | u64 durable point
 * (bytes a completed fdatasync covered) | u32 reserved | u32 crc32 of bytes
 * 0..28. It fits one sector, so an in-place rewrite of the point is whole
 * or absent after a power cut, never torn. */
#define JRNL_MAGIC 0x46584A47u /* "FXGJ" */
#define JRNL_VERSION 1
#define HDR 32
/* Bytes read per pread while replaying, and copied per step of a restart. */
#define CHUNK 65536

struct fx_gjournal {
    fx_sio *io;
    int fd;
    int slot;           /* snapshot slot holding the newest snapshot; -1: none */
    int failed;         /* the error that stopped the journal, or 0 */
    uint64_t len;       /* bytes of the journal (header included) */
    uint64_t point;     /* durable point: bytes a completed fdatasync covered */
    uint64_t base_seq;  /* the journal's records start at base_seq + 1 */
    uint64_t seq;       /* last sequence number appended */
    uint64_t snap_seq;  /* journal sequence the newest snapshot covers */
    uint64_t carry_pos; /* where the records after snap_seq begin */
    uint64_t lim_bytes, lim_records;
    uint8_t *buf;
    size_t bufcap;
    fx_gjournal_stats st;
    char stem[FX_GJOURNAL_STEM_MAX];
    char dir[PATH_MAX];
};

static const char *const SNAP_SUFFIX[2] = {".snap.a", ".snap.b"};

static int path_of(const fx_gjournal *j, const char *suffix, char out[PATH_MAX])
{
    int n = snprintf(out, PATH_MAX, "%s/%s%s", j->dir, j->stem, suffix);
    return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

static void header_encode(uint8_t h[HDR], uint64_t base_seq, uint64_t point)
{
    memset(h, 0, HDR);
    fx_be32_put(h, JRNL_MAGIC);
    h[5] = JRNL_VERSION;
    fx_be64_put(h + 8, base_seq);
    fx_be64_put(h + 16, point);
    fx_be32_put(h + 28, fx_logfmt_crc(0, h, 28));
}

static const char *header_decode(const uint8_t h[HDR], uint64_t *pbase, uint64_t *ppoint)
{
    if (fx_be32_get(h) != JRNL_MAGIC)
        return "bad journal magic";
    if (h[4] != 0 || h[5] != JRNL_VERSION)
        return "unsupported journal version";
    if (fx_logfmt_crc(0, h, 28) != fx_be32_get(h + 28))
        return "journal header checksum mismatch";
    *pbase = fx_be64_get(h + 8);
    *ppoint = fx_be64_get(h + 16);
    return *ppoint < HDR ? "journal durable point inside the header" : NULL;
}

/* Stops the journal after a failure whose effect on the file is unknown. */
static int fail(fx_gjournal *j, int rv)
{
    if (j->failed == 0)
        j->failed = rv;
    return rv;
}

/* Copies [lo, hi) of the open journal into |fd| from |at|. */
static int copy_range(fx_gjournal *j, int fd, uint64_t lo, uint64_t hi, uint64_t at)
{
    uint8_t *b = malloc(CHUNK);
    if (b == NULL)
        return -ENOMEM;
    int rv = 0;
    while (rv == 0 && lo < hi) {
        size_t n = hi - lo < CHUNK ? (size_t)(hi - lo) : CHUNK;
        ssize_t got = j->io->ops->pread(j->io, j->fd, b, n, lo);
        if (got < 0)
            rv = (int)got;
        else if ((size_t)got != n)
            rv = -EIO; /* the journal is shorter than we wrote it */
        else
            rv = j->io->ops->pwrite(j->io, fd, b, n, at);
        lo += n, at += n;
    }
    free(b);
    return rv;
}

/* Writes the file of a new journal beside the current one, |tmp|: a header
 * for |base_seq|, then the bytes [lo, hi) of the current journal (none if
 * it is not open), flushed. */
static int write_new(fx_gjournal *j, const char *tmp, uint64_t base_seq, uint64_t lo, uint64_t hi)
{
    fx_sio *io = j->io;
    int rv = io->ops->unlink(io, tmp);
    if (rv != 0 && rv != -ENOENT)
        return rv;
    int fd;
    if ((rv = io->ops->open(io, tmp, FX_SIO_CREATE, &fd)) != 0)
        return rv;
    uint8_t h[HDR];
    header_encode(h, base_seq, HDR + (hi - lo));
    rv = io->ops->pwrite(io, fd, h, HDR, 0);
    if (rv == 0)
        rv = copy_range(j, fd, lo, hi, HDR);
    if (rv == 0)
        rv = io->ops->fdatasync(io, fd);
    int crv = io->ops->close(io, fd);
    if (rv == 0)
        rv = crv;
    if (rv != 0)
        (void)io->ops->unlink(io, tmp); /* best effort: the current journal is intact */
    return rv;
}

/* Restarts the journal: a new file with base |base_seq| holding the records
 * [lo, hi) of the current one replaces it atomically (rename, directory
 * sync); the journal then writes to it. Before the rename a failure leaves
 * the current journal in use; after it, the journal stops. */
static int restart(fx_gjournal *j, uint64_t base_seq, uint64_t lo, uint64_t hi)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    int rv = path_of(j, ".jrnl.tmp", tmp);
    if (rv == 0)
        rv = path_of(j, ".jrnl", path);
    if (rv == 0)
        rv = write_new(j, tmp, base_seq, lo, hi);
    if (rv == 0 && (rv = j->io->ops->rename(j->io, tmp, path)) != 0)
        (void)j->io->ops->unlink(j->io, tmp);
    if (rv != 0)
        return rv;
    if (j->fd >= 0)
        (void)j->io->ops->close(j->io, j->fd); /* read-write; nothing to lose */
    j->fd = -1;
    rv = j->io->ops->open(j->io, path, FX_SIO_WRITE, &j->fd);
    if (rv == 0)
        rv = j->io->ops->sync_dir(j->io, j->dir);
    if (rv != 0)
        return fail(j, rv);
    j->base_seq = base_seq;
    j->len = j->point = j->carry_pos = HDR + (hi - lo);
    return 0;
}

/* ---- open: snapshots ---------------------------------------------------------- */

/* Reads snapshot slot |k| into |t|: 0, -ENOENT (no file),
 * FX_ESTORAGE_CORRUPT (reason in |reason|) or another error. */
static int load_one(fx_gjournal *j, int k, fx_gjournal_state *t, uint64_t *pseq, char *reason,
                    size_t rlen)
{
    char path[PATH_MAX], *buf;
    size_t len;
    int rv = path_of(j, SNAP_SUFFIX[k], path);
    if (rv == 0)
        rv = fx_sio_read_file(j->io, path, SNAP_MAX, &buf, &len);
    if (rv == -EFBIG)
        return fx_gjournal_corrupt(reason, rlen, "snapshot larger than %zu bytes",
                                   (size_t)SNAP_MAX);
    if (rv != 0)
        return rv;
    rv = fx_gjournal_decode_snapshot((const uint8_t *)buf, len, t, pseq, reason, rlen);
    free(buf);
    return rv;
}

/* Loads the newest valid snapshot into |s| (untouched when none is valid)
 * and tells in *pany whether a snapshot file exists at all. Both files bad
 * is corruption; one bad one is a fallback to the other (or, with none, to
 * the empty state before the journal's first record: the journal's base
 * then decides whether that is whole). */
static int load_snapshots(fx_gjournal *j, fx_gjournal_state *s, bool *pany, char *why,
                          size_t whylen)
{
    int bad = -1, nbad = 0;
    char reason[160] = "";
    *pany = false;
    for (int k = 0; k < 2; k++) {
        fx_gjournal_state t;
        fx_gjournal_state_init(&t);
        uint64_t seq = 0;
        int rv = load_one(j, k, &t, &seq, reason, sizeof(reason));
        if (rv == -ENOENT)
            continue;
        *pany = true;
        if (rv == FX_ESTORAGE_CORRUPT) {
            bad = k, nbad++;
            continue;
        }
        if (rv != 0)
            return rv;
        if (j->slot < 0 || seq > j->snap_seq) {
            fx_gjournal_state_deinit(s);
            *s = t;
            j->slot = k, j->snap_seq = seq;
        } else {
            fx_gjournal_state_deinit(&t);
        }
    }
    j->st.snapshot_corrupt += (uint64_t)nbad;
    if (nbad == 2)
        return fx_gjournal_corrupt(why, whylen,
                                   "file=%s%s, position=0: %s (and the other snapshot)", j->stem,
                                   SNAP_SUFFIX[bad], reason);
    if (bad >= 0)
        j->st.snapshot_fallback++;
    return 0;
}

/* ---- open: the journal -------------------------------------------------------- */

/* Opens the journal file, making a new one for a new group. */
static int open_journal(fx_gjournal *j, bool create, bool any_snapshot, char *why, size_t whylen)
{
    char path[PATH_MAX];
    int rv = path_of(j, ".jrnl", path);
    if (rv == 0)
        rv = j->io->ops->open(j->io, path, FX_SIO_WRITE, &j->fd);
    if (rv != -ENOENT)
        return rv;
    j->fd = -1;
    if (any_snapshot)
        return fx_gjournal_corrupt(
            why, whylen, "file=%s.jrnl, position=0: journal missing beside a snapshot", j->stem);
    if (!create)
        return -ENOENT;
    rv = fx_sio_mkdirs(j->io, j->dir);
    return rv != 0 ? rv : restart(j, 0, 0, 0);
}

/* Reads the header; checks it against the file's length and the snapshot. */
static int read_header(fx_gjournal *j, uint64_t size, char *why, size_t whylen)
{
    uint8_t h[HDR];
    ssize_t got = size >= HDR ? j->io->ops->pread(j->io, j->fd, h, HDR, 0) : 0;
    if (got < 0)
        return (int)got;
    const char *bad = got == HDR ? header_decode(h, &j->base_seq, &j->point) : "journal too short";
    if (bad != NULL)
        return fx_gjournal_corrupt(why, whylen, "file=%s.jrnl, position=0: %s", j->stem, bad);
    if (j->point > size)
        return fx_gjournal_corrupt(why, whylen,
                                   "file=%s.jrnl, position=%" PRIu64
                                   ": the file ends before its durable "
                                   "point %" PRIu64,
                                   j->stem, size, j->point);
    if (j->snap_seq < j->base_seq)
        return fx_gjournal_corrupt(why, whylen,
                                   "file=%s.jrnl, position=0: the journal starts after seq %" PRIu64
                                   " but the snapshot covers only up to %" PRIu64,
                                   j->stem, j->base_seq, j->snap_seq);
    return 0;
}

/* A window on the journal file for the replay. */
typedef struct reader {
    uint8_t *b;
    uint64_t at;   /* file position of b[0] */
    size_t lo, hi; /* the current record is at b[lo], the bytes end at b[hi] */
    uint64_t size;
} reader;

/* Makes at least one whole record (or the end of the file) visible. */
static int fill(fx_gjournal *j, reader *r)
{
    if (r->hi - r->lo >= FX_GJOURNAL_REC_MAX || r->at + r->hi >= r->size)
        return 0;
    memmove(r->b, r->b + r->lo, r->hi - r->lo);
    r->at += r->lo, r->hi -= r->lo, r->lo = 0;
    uint64_t left = r->size - (r->at + r->hi);
    size_t n = left < CHUNK - r->hi ? (size_t)left : CHUNK - r->hi;
    ssize_t got = j->io->ops->pread(j->io, j->fd, r->b + r->hi, n, r->at + r->hi);
    if (got < 0)
        return (int)got;
    r->hi += (size_t)got;
    if ((size_t)got < n)
        r->size = r->at + r->hi;
    return 0;
}

/* The record at |pos| is bad: past the durable point it is a torn tail
 * (the journal ends there), before it damage no crash leaves. */
static int bad_record(fx_gjournal *j, uint64_t pos, const char *what, char *why, size_t whylen)
{
    if (pos < j->point)
        return fx_gjournal_corrupt(
            why, whylen, "file=%s.jrnl, position=%" PRIu64 ": %s before the durable point %" PRIu64,
            j->stem, pos, what, j->point);
    j->len = pos;
    return 0;
}

/* Replays the journal records after the snapshot onto |s|; sets j->len to
 * the end of the valid records and j->seq to the last one's. */
static int replay(fx_gjournal *j, fx_gjournal_state *s, uint64_t size, char *why, size_t whylen)
{
    reader r = {.b = malloc(CHUNK), .at = HDR, .size = size};
    if (r.b == NULL)
        return -ENOMEM;
    uint64_t expect = j->base_seq + 1;
    int rv = 0;
    j->len = size;
    j->carry_pos = UINT64_MAX;
    while (rv == 0 && (rv = fill(j, &r)) == 0 && r.hi > r.lo) {
        uint64_t pos = r.at + r.lo;
        fx_gjournal_rec rec;
        size_t used = 0;
        fx_gjournal_status st = fx_gjournal_decode_record(r.b + r.lo, r.hi - r.lo, &rec, &used);
        if (st == FX_GJ_REC_OK && rec.seq != expect)
            st = FX_GJ_REC_BAD;
        if (st != FX_GJ_REC_OK) {
            rv = bad_record(j, pos, st == FX_GJ_REC_SHORT ? "a truncated record" : "a bad record",
                            why, whylen);
            break;
        }
        if (rec.seq > j->snap_seq) {
            if (j->carry_pos == UINT64_MAX)
                j->carry_pos = pos;
            if ((rv = fx_gjournal_state_apply(s, &rec)) == FX_ESTORAGE_CORRUPT)
                rv = fx_gjournal_corrupt(
                    why, whylen, "file=%s.jrnl, position=%" PRIu64 ": more than %u pending records",
                    j->stem, pos, FX_GJOURNAL_MAX_PENDING);
            j->st.replayed++;
        }
        r.lo += used, expect++;
    }
    free(r.b);
    j->seq = expect - 1;
    if (rv == 0 && r.at + r.hi < size && j->len == size)
        j->len = r.at + r.hi; /* the file shrank under us: what was read is all */
    return rv;
}

/* After the replay: cuts a torn tail (flushed, so that later appends never
 * sit before old bytes), and restarts a journal the snapshot has passed
 * (a power cut after a compaction's snapshot lost records it covers: the
 * next sequence numbers must follow the snapshot's). */
static int settle_tail(fx_gjournal *j, uint64_t size)
{
    int rv = 0;
    if (j->len < size) {
        j->st.torn_tail_cut++;
        j->st.torn_bytes += size - j->len;
        rv = j->io->ops->ftruncate(j->io, j->fd, j->len);
        if (rv == 0)
            rv = j->io->ops->fdatasync(j->io, j->fd);
        if (rv != 0)
            return rv;
    }
    if (j->snap_seq > j->seq) {
        j->seq = j->snap_seq;
        return restart(j, j->snap_seq, 0, 0);
    }
    if (j->carry_pos == UINT64_MAX)
        j->carry_pos = j->len;
    return 0;
}

static int recover(fx_gjournal *j, bool create, fx_gjournal_state *s, char *why, size_t whylen)
{
    bool any = false;
    int rv = load_snapshots(j, s, &any, why, whylen);
    if (rv == 0)
        rv = open_journal(j, create, any, why, whylen);
    uint64_t size = 0;
    if (rv == 0)
        rv = j->io->ops->fsize(j->io, j->fd, &size);
    if (rv == 0)
        rv = read_header(j, size, why, whylen);
    if (rv == 0)
        rv = replay(j, s, size, why, whylen);
    if (rv == 0)
        rv = settle_tail(j, size);
    /* What was recovered becomes durable before anything builds on it: a
     * killed process leaves written records and renames that no flush
     * covered, and a power cut after the open must not take them back. */
    if (rv == 0)
        rv = j->io->ops->sync_dir(j->io, j->dir);
    if (rv == 0 && j->point < j->len)
        rv = fx_gjournal_sync(j);
    return rv;
}

int fx_gjournal_open(fx_gjournal **pj, fx_sio *io, const char *dir, const char *group, bool create,
                     fx_gjournal_state *out, fx_gjournal_stats *st, char *why, size_t whylen)
{
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (strlen(dir) >= PATH_MAX)
        return -ENAMETOOLONG;
    fx_gjournal *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    *j = (fx_gjournal){.io = io, .fd = -1, .slot = -1};
    j->lim_bytes = FX_GJOURNAL_COMPACT_BYTES, j->lim_records = FX_GJOURNAL_COMPACT_RECORDS;
    fx_gjournal_stem(j->stem, group);
    memcpy(j->dir, dir, strlen(dir) + 1);
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    int rv = recover(j, create, &s, why, whylen);
    if (st != NULL) {
        st->replayed += j->st.replayed;
        st->torn_tail_cut += j->st.torn_tail_cut;
        st->torn_bytes += j->st.torn_bytes;
        st->snapshot_corrupt += j->st.snapshot_corrupt;
        st->snapshot_fallback += j->st.snapshot_fallback;
    }
    if (rv != 0) {
        fx_gjournal_state_deinit(&s);
        if (j->fd >= 0)
            (void)io->ops->close(io, j->fd); /* nothing written to lose */
        free(j);
        return rv;
    }
    fx_gjournal_state_deinit(out);
    *out = s;
    *pj = j;
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

int fx_gjournal_append(fx_gjournal *j, const fx_gjournal_rec *recs, size_t n)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / FX_GJOURNAL_REC_MAX)
        return -EINVAL;
    if (j->bufcap < n * FX_GJOURNAL_REC_MAX) {
        uint8_t *b = realloc(j->buf, n * FX_GJOURNAL_REC_MAX);
        if (b == NULL)
            return -ENOMEM;
        j->buf = b, j->bufcap = n * FX_GJOURNAL_REC_MAX;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!fx_gjournal_rec_is_valid(&recs[i]))
            return -EINVAL;
        len += fx_gjournal_encode_record(&recs[i], j->seq + 1 + i, j->buf + len);
    }
    int rv = j->io->ops->pwrite(j->io, j->fd, j->buf, len, j->len);
    if (rv != 0) {
        /* A part may be on the file: cut it, or later appends would follow it. */
        int trv = j->io->ops->ftruncate(j->io, j->fd, j->len);
        return trv != 0 ? fail(j, rv) : rv;
    }
    j->len += len;
    j->seq += n;
    j->st.appends++;
    j->st.records += n;
    return 0;
}

/* Records the durable point |point| in the header (no flush of its own). */
static int write_point(fx_gjournal *j, uint64_t point)
{
    uint8_t h[HDR];
    header_encode(h, j->base_seq, point);
    int rv = j->io->ops->pwrite(j->io, j->fd, h, HDR, 0);
    if (rv != 0)
        return fail(j, rv);
    j->point = point;
    return 0;
}

int fx_gjournal_sync(fx_gjournal *j)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    if (j->point == j->len)
        return 0;
    uint64_t covered = j->len;
    int rv = j->io->ops->fdatasync(j->io, j->fd);
    if (rv != 0)
        return fail(j, rv);
    j->st.syncs++;
    /* Written only once the flush returned: a point on the disk is never
     * ahead of the data it vouches for. */
    return write_point(j, covered);
}

int fx_gjournal_compact(fx_gjournal *j, const fx_gjournal_state *s)
{
    if (j->failed != 0)
        return FX_ESTORAGE_FAILED;
    uint8_t *buf;
    size_t len;
    int rv = fx_gjournal_encode_snapshot(s, j->seq, &buf, &len);
    if (rv != 0)
        return rv;
    int slot = j->slot == 0 ? 1 : 0; /* never the newest one */
    char path[PATH_MAX];
    rv = path_of(j, SNAP_SUFFIX[slot], path);
    if (rv == 0)
        rv = fx_sio_write_file_atomic(j->io, path, buf, len);
    free(buf);
    if (rv != 0)
        return rv;
    /* The snapshot kept beside the new one covers up to |kept|: the new
     * journal holds every record after it, so either snapshot recovers. */
    uint64_t kept = j->snap_seq, lo = j->carry_pos, hi = j->len;
    j->slot = slot;
    j->snap_seq = j->seq;
    j->carry_pos = j->len;
    if ((rv = restart(j, kept, lo, hi)) != 0)
        return rv;
    j->st.compactions++;
    return 0;
}

bool fx_gjournal_should_compact(const fx_gjournal *j)
{
    return j->len - j->carry_pos > j->lim_bytes || j->seq - j->snap_seq > j->lim_records;
}

void fx_gjournal_set_limits(fx_gjournal *j, uint64_t bytes, uint64_t records)
{
    if (bytes > 0)
        j->lim_bytes = bytes;
    if (records > 0)
        j->lim_records = records;
}

uint64_t fx_gjournal_seq(const fx_gjournal *j)
{
    return j->seq;
}

uint64_t fx_gjournal_size(const fx_gjournal *j)
{
    return j->len;
}

const fx_gjournal_stats *fx_gjournal_stats_of(const fx_gjournal *j)
{
    return &j->st;
}

int fx_gjournal_close(fx_gjournal *j, bool sync)
{
    if (j == NULL)
        return 0;
    int rv = 0;
    if (sync && j->point != j->len) {
        rv = fx_gjournal_sync(j);
        /* No next flush carries the new point: give it one. */
        if (rv == 0 && (rv = j->io->ops->fdatasync(j->io, j->fd)) != 0)
            fail(j, rv);
    }
    if (j->fd >= 0)
        (void)j->io->ops->close(j->io, j->fd); /* flushed above when asked */
    free(j->buf);
    free(j);
    return rv;
}

int fx_gjournal_remove(fx_sio *io, const char *dir, const char *group)
{
    static const char *const suffixes[] = {".snap.a",     ".snap.b", ".snap.a.tmp",
                                           ".snap.b.tmp", ".jrnl",   ".jrnl.tmp"};
    char stem[FX_GJOURNAL_STEM_MAX], path[PATH_MAX];
    fx_gjournal_stem(stem, group);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        int n = snprintf(path, sizeof(path), "%s/%s%s", dir, stem, suffixes[i]);
        if (n < 0 || n >= (int)sizeof(path))
            return -ENAMETOOLONG;
        int rv = io->ops->unlink(io, path);
        if (rv != 0 && rv != -ENOENT)
            return rv;
    }
    int rv = io->ops->sync_dir(io, dir);
    return rv == -ENOENT ? 0 : rv;
}
