/* `felix log inspect|verify|repair DIR`: reads a durable stream's directory
 * (or one segment file) in the on-disk format of durable storage (segment
 * versions 2 and 3). inspect prints each segment header and record, with
 * its producer mark; verify checks every header, checksum, offset and
 * producer mark (a continuation follows an open batch, a batch holds no
 * more records than its tag says) and exits 1 naming the file and byte
 * position of the first damage; neither changes anything. repair (a directory of a stopped
 * broker) cuts the log at its first bad record, keeping the valid prefix,
 * and reports what it dropped. Each holds a shared lock on the storage root
 * (the directory above the stream's) while it works, and refuses a root a
 * running broker holds: a live log's unsynced tail would read as damage, and
 * a repair must never cut a log a broker writes. Main thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/grow.h"
#include "cli.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/rootlock.h"
#include "storage/scan.h"

#define CMD "log"

typedef struct log_opts {
    bool verify;
    bool repair;
    bool payload;
    uint64_t index_spacing; /* repair: of the rebuilt index entries */
    uint64_t limit;
    const char *path;
} log_opts;

typedef struct totals {
    uint64_t segments, records, bytes, payload;
    uint64_t next; /* expected base of the next segment */
    bool have_next;
    /* Producer marks: batches opened, marked records, batches left partial;
     * the batch being read (it may continue into the next segment). */
    uint64_t batches, marked, partial;
    bool in_batch;
    uint32_t batch_len, batch_held;
} totals;

/* ---- listing --------------------------------------------------------------------- */

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Collects the segment ids of directory |dir|, sorted. */
static int list_segments(const char *dir, uint64_t **pids, size_t *pn)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint64_t id;
        if (!fx_logfmt_parse_log_name(e->d_name, &id))
            continue;
        uint64_t *v = fx_grow(ids, &cap, n + 1, sizeof(*v), 16);
        if (v == NULL) {
            free(ids);
            closedir(d);
            return -ENOMEM;
        }
        ids = v;
        ids[n++] = id;
    }
    closedir(d);
    if (n > 1)
        qsort(ids, n, sizeof(*ids), cmp_id);
    *pids = ids;
    *pn = n;
    return 0;
}

/* ---- one segment -------------------------------------------------------------------- */

typedef struct inspect_ctx {
    const log_opts *o;
    int fd;
    uint64_t shown;
    totals *t;
    char bad[160]; /* a mark that breaks the batch rules; "" if none */
    uint64_t bad_pos;
} inspect_ctx;

static void print_escaped(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
            putchar(p[i]);
        else
            printf("\\x%02x", p[i]);
    }
}

/* Checks the producer mark of the record of |h| against the batch being
 * read; returns 1 (with c->bad) when it breaks the rules. A batch cut short
 * by the next opening or an unmarked record is partial, which the format
 * allows (a torn batch is completed only while open at the tail). */
static int check_mark(inspect_ctx *c, uint64_t pos, const fx_rec_header *h)
{
    totals *t = c->t;
    if (h->mark == 0 || h->mark == FX_REC_MARK_OPEN) {
        if (t->in_batch && t->batch_held < t->batch_len)
            t->partial++;
        t->in_batch = false;
    }
    if (h->mark == FX_REC_MARK_OPEN) {
        if (h->tag.len == 0) {
            snprintf(c->bad, sizeof(c->bad), "producer batch of 0 records (offset %" PRIu64 ")",
                     h->offset);
            c->bad_pos = pos;
            return 1;
        }
        t->batches++;
        t->in_batch = true;
        t->batch_len = h->tag.len;
        t->batch_held = 0;
    } else if (h->mark == FX_REC_MARK_CONT && (!t->in_batch || t->batch_held >= t->batch_len)) {
        snprintf(c->bad, sizeof(c->bad),
                 "producer mark continues no open batch (offset %" PRIu64 ")", h->offset);
        c->bad_pos = pos;
        return 1;
    }
    if (h->mark != 0) {
        t->marked++;
        t->batch_held++;
    }
    return 0;
}

static int on_record(void *user, uint64_t pos, const fx_rec_header *h)
{
    inspect_ctx *c = user;
    if (check_mark(c, pos, h) != 0)
        return 1;
    if (c->o->verify || (c->o->limit > 0 && c->shown >= c->o->limit))
        return 0;
    c->shown++;
    printf("  offset=%" PRIu64 " pos=%" PRIu64 " ts_us=%" PRIu64 " len=%" PRIu32, h->offset, pos,
           h->ts_us, h->len);
    if (h->mark == FX_REC_MARK_OPEN)
        printf(" producer=%" PRIu64 " sequence=%" PRIu64 " batch_len=%" PRIu32, h->tag.producer_id,
               h->tag.sequence, h->tag.len);
    else if (h->mark == FX_REC_MARK_CONT)
        printf(" batch_cont");
    if (c->o->payload && h->len > 0) {
        uint8_t b[64];
        size_t k = h->len < sizeof(b) ? h->len : sizeof(b);
        fx_sio *io = fx_sio_posix();
        ssize_t r = io->ops->pread(io, c->fd, b, k, pos + fx_rec_body_pos(h));
        if (r > 0) {
            printf(" payload=\"");
            print_escaped(b, (size_t)r);
            printf("\"%s", h->len > k ? "..." : "");
        }
    }
    putchar('\n');
    return 0;
}

static void report_damage(const char *file, uint64_t pos, const char *what, bool last)
{
    fx_cli_errorf(CMD, "corruption detected: %s (file=%s, position=%" PRIu64 ")%s", what, file, pos,
                  last ? "; at the end of the newest segment this is a torn tail, which "
                         "recovery cuts"
                       : "");
}

/* Describes a scan failure like the broker does. */
static void scan_what(const fx_scan *sc, char *out, size_t cap)
{
    if (sc->status == FX_REC_OUT_OF_ORDER)
        snprintf(out, cap, "offset out of order (expected %" PRIu64 ", found %" PRIu64 ")",
                 sc->next_offset, sc->bad.offset);
    else if (sc->status == FX_REC_TOO_LARGE)
        snprintf(out, cap, "record payload %" PRIu32 " exceeds limit %u", sc->bad.len,
                 FX_REC_MAX_PAYLOAD);
    else
        snprintf(out, cap, "%s", fx_logfmt_rec_status_name(sc->status));
}

/* Checks (and with inspect prints) one segment file. Returns 0, 1 on damage,
 * or -errno. */
static int do_segment(const log_opts *o, const char *file, bool last, totals *t)
{
    fx_sio *io = fx_sio_posix();
    int fd;
    int rv = io->ops->open(io, file, FX_SIO_READ, &fd);
    uint64_t size = 0;
    if (rv == 0)
        rv = io->ops->fsize(io, fd, &size);
    /* One pass from start to end: let the kernel read further ahead (a
     * hint; the scan is correct without it). */
    if (rv == 0)
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (rv != 0) {
        fx_cli_errorf(CMD, "%s: %s", file, fx_strerror(rv));
        return rv;
    }
    uint8_t hb[FX_SEG_HEADER_LEN];
    ssize_t n = io->ops->pread(io, fd, hb, sizeof(hb), 0);
    fx_seg_header h;
    char why[200];
    if (n < 0 ||
        fx_logfmt_seg_header_decode(hb, n < 0 ? 0 : (size_t)n, &h, why, sizeof(why)) != 0) {
        report_damage(file, 0, n < 0 ? fx_strerror((int)n) : why, false);
        io->ops->close(io, fd);
        return 1;
    }
    if (t->have_next && h.base_offset != t->next) {
        snprintf(why, sizeof(why), "offset out of order (expected %" PRIu64 ", found %" PRIu64 ")",
                 t->next, h.base_offset);
        report_damage(file, 0, why, false);
        io->ops->close(io, fd);
        return 1;
    }
    if (!o->verify)
        printf("%s: base_offset=%" PRIu64 " created_us=%" PRIu64 " bytes=%" PRIu64
               " version=%u\n",
               file, h.base_offset, h.created_us, size, (unsigned)h.version);
    fx_segwin w;
    fx_scan sc;
    inspect_ctx ic = {.o = o, .fd = fd, .t = t};
    if ((rv = fx_segwin_init(&w, io, fd, size, FX_SEGWIN_DEFAULT)) == 0) {
        w.version = h.version;
        rv = fx_seg_scan(&w, FX_SEG_HEADER_LEN, h.base_offset, on_record, &ic, &sc);
        fx_segwin_deinit(&w);
    }
    io->ops->close(io, fd);
    if (rv == 1 && ic.bad[0] != '\0') {
        report_damage(file, ic.bad_pos, ic.bad, false);
        return 1;
    }
    if (rv != 0) {
        fx_cli_errorf(CMD, "%s: %s", file, fx_strerror(rv));
        return rv;
    }
    t->segments++;
    t->records += sc.records;
    t->payload += sc.payload_bytes;
    t->bytes += size;
    t->next = sc.next_offset;
    t->have_next = true;
    if (!o->verify && ic.shown < sc.records)
        printf("  ... %" PRIu64 " more records\n", sc.records - ic.shown);
    if (sc.status != FX_REC_OK) {
        scan_what(&sc, why, sizeof(why));
        report_damage(file, sc.end_pos, why, last && sc.status == FX_REC_TRUNCATED);
        return 1;
    }
    return 0;
}

/* ---- command ------------------------------------------------------------------------ */

static int parse_args(int argc, char **argv, log_opts *o)
{
    if (argc < 1)
        return fx_cli_usage_error(CMD, "missing subcommand (inspect, verify or repair)");
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        return fx_cli_print_help(CMD);
    }
    o->index_spacing = 4096; /* the broker's durable_index_spacing_bytes */
    if (strcmp(argv[0], "verify") == 0)
        o->verify = true;
    else if (strcmp(argv[0], "repair") == 0)
        o->repair = true;
    else if (strcmp(argv[0], "inspect") != 0)
        return fx_cli_usage_error(CMD, "unknown subcommand (inspect, verify or repair)");
    bool inspect = !o->verify && !o->repair;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return fx_cli_print_help(CMD);
        } else if (inspect && strcmp(a, "--payload") == 0) {
            o->payload = true;
        } else if (inspect && strcmp(a, "--limit") == 0 && i + 1 < argc) {
            if (fx_cli_parse_u64(argv[++i], UINT64_MAX, &o->limit) != 0)
                return fx_cli_usage_error(CMD, "--limit needs a non-negative integer");
        } else if (o->repair && strcmp(a, "--index-spacing") == 0 && i + 1 < argc) {
            if (fx_cli_parse_u64(argv[++i], UINT32_MAX, &o->index_spacing) != 0 ||
                o->index_spacing == 0)
                return fx_cli_usage_error(CMD, "--index-spacing needs a positive integer");
        } else if (a[0] == '-') {
            char msg[128];
            snprintf(msg, sizeof(msg), "unknown option '%.60s'", a);
            return fx_cli_usage_error(CMD, msg);
        } else if (o->path == NULL) {
            o->path = a;
        } else {
            return fx_cli_usage_error(CMD, "one DIR or FILE.log only");
        }
    }
    if (o->path == NULL)
        return fx_cli_usage_error(CMD, "missing DIR or FILE.log");
    return -1;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run_dir(const log_opts *o, totals *t)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    int rv = list_segments(o->path, &ids, &n);
    if (rv != 0) {
        fx_cli_errorf(CMD, "%s: %s", o->path, fx_strerror(rv));
        return FX_CLI_EXIT_FAIL;
    }
    if (n == 0)
        fx_cli_errorf(CMD, "%s: no segment files (<id>.log)", o->path);
    int status = n == 0 ? FX_CLI_EXIT_FAIL : FX_CLI_EXIT_OK;
    for (size_t i = 0; i < n && status == FX_CLI_EXIT_OK; i++) {
        char name[FX_LOGFMT_FILE_NAME_MAX], file[PATH_MAX];
        fx_logfmt_file_name(name, ids[i], false);
        snprintf(file, sizeof(file), "%s/%s", o->path, name);
        if (do_segment(o, file, i + 1 == n, t) != 0)
            status = FX_CLI_EXIT_FAIL;
    }
    free(ids);
    return status;
}

/* Takes the shared lock of the storage root above |path| (resolved: a
 * stream directory, or a segment file in one). */
static int lock_root(const char *path, bool is_dir, fx_rootlock **pl)
{
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s", path);
    for (int up = is_dir ? 1 : 2; up > 0; up--) {
        char *slash = strrchr(root, '/');
        if (slash == NULL)
            return -EINVAL; /* a resolved path has one */
        slash[slash == root ? 1 : 0] = '\0';
    }
    char why[3 * PATH_MAX];
    int rv = fx_rootlock_share(pl, root, why, sizeof(why));
    if (rv != 0)
        fx_cli_errorf(CMD, "%s", why);
    return rv;
}

/* ---- repair ------------------------------------------------------------------------- */

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Opens the log of directory |o->path| with repair on (every record
 * checked), which cuts it at the first bad record, and says what went. */
static int run_repair(const log_opts *o)
{
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.index_spacing_bytes = o->index_spacing;
    c.preallocate = false; /* change nothing but the cut */
    c.verify_all_on_open = true;
    c.repair_checksum_tail = true;
    c.repair = true;
    fx_dlog_recovery rep = {0};
    fx_dlog *log = NULL;
    int rv = fx_dlog_open(&log, o->path, &c, wall_us(), &rep);
    if (rv != 0) {
        fx_cli_errorf(CMD, "cannot repair %s: %s%s%s", o->path, fx_strerror(rv),
                      rep.message[0] ? ": " : "", rep.message);
        return FX_CLI_EXIT_FAIL;
    }
    uint64_t first = fx_dlog_first_offset(log), next = fx_dlog_next_offset(log);
    rv = fx_dlog_close(log, true);
    if (rv != 0) {
        fx_cli_errorf(CMD, "%s: the final flush failed: %s", o->path, fx_strerror(rv));
        return FX_CLI_EXIT_FAIL;
    }
    if (rep.repaired)
        printf("repaired: dropped %" PRIu64 " bytes (%" PRIu64
               " whole segments) from offset %" PRIu64 " on; kept offsets %" PRIu64 "..%" PRIu64
               "\n%s\n",
               rep.dropped_bytes, rep.dropped_segments, rep.dropped_from, first, next, rep.message);
    else if (rep.truncated_bytes > 0)
        printf("repaired: cut a torn tail of %" PRIu64 " bytes; kept offsets %" PRIu64 "..%" PRIu64
               "\n%s\n",
               rep.truncated_bytes, first, next, rep.message);
    else
        printf("nothing to repair: offsets %" PRIu64 "..%" PRIu64 " intact\n", first, next);
    return FX_CLI_EXIT_OK;
}

int fx_cli_log(int argc, char **argv)
{
    log_opts o = {0};
    int rv = parse_args(argc, argv, &o);
    if (rv >= 0)
        return rv;
    char real[PATH_MAX];
    struct stat st;
    if (realpath(o.path, real) == NULL || stat(real, &st) != 0) {
        fx_cli_errorf(CMD, "%s: %s", o.path, strerror(errno));
        return FX_CLI_EXIT_FAIL;
    }
    o.path = real;
    fx_rootlock *lock = NULL;
    if (lock_root(real, S_ISDIR(st.st_mode), &lock) != 0)
        return FX_CLI_EXIT_FAIL;
    if (o.repair) {
        int status = FX_CLI_EXIT_FAIL;
        if (!S_ISDIR(st.st_mode))
            fx_cli_errorf(CMD, "%s: repair takes a stream's directory", o.path);
        else
            status = run_repair(&o);
        fx_rootlock_free(lock);
        return status;
    }
    totals t = {0};
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    int status;
    if (S_ISDIR(st.st_mode))
        status = run_dir(&o, &t);
    else
        status = do_segment(&o, o.path, true, &t) == 0 ? FX_CLI_EXIT_OK : FX_CLI_EXIT_FAIL;
    double secs = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (status == FX_CLI_EXIT_OK && o.verify) {
        printf("ok: %" PRIu64 " segments, %" PRIu64 " records (offsets %" PRIu64 "..%" PRIu64
               "), %" PRIu64 " bytes verified in %.3f s (%.2f GB/s; CPU %.3f s)\n",
               t.segments, t.records, t.next - t.records, t.next, t.bytes, secs,
               secs > 0 ? (double)t.bytes / secs / 1e9 : 0.0, cpu);
        if (t.batches > 0)
            printf("producer marks: %" PRIu64 " batches, %" PRIu64 " marked records, %" PRIu64
                   " batches partial (%s)\n",
                   t.batches, t.marked,
                   t.partial + (t.in_batch && t.batch_held < t.batch_len ? 1 : 0),
                   t.in_batch && t.batch_held < t.batch_len
                       ? "the last one open at the tail: its re-send completes it"
                       : "none open at the tail");
    }
    fx_rootlock_free(lock);
    return status;
}
