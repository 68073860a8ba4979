/* felix-bench --mode fsync-probe: what the disk itself gives the durable
 * log's write pattern, with no broker in the way. Records of payload + 28
 * bytes (the log's record header) are appended to preallocated files, one
 * pwrite and one fdatasync per group of sync_every records, as group commit
 * flushes; then one record per fdatasync, the cost an acked on_commit
 * publish with nothing else in flight pays. The records carry a fixed
 * pattern and no checksum: this measures the disk, not the CPU. Main
 * thread only. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "bench_run.h"

#define PROBE_LAT_CAP (16u << 20) /* grouped fdatasync samples kept at most */

typedef struct fsprobe {
    const fx_bench_cfg *cfg;
    fx_bench_result *r;
    int fd;
    unsigned files;   /* files created so far (names probe-<pid>-<n>.log) */
    char path[4096];  /* the open file */
    uint64_t pos;     /* bytes written to it */
    uint64_t *lat;    /* grouped fdatasync latencies, ns */
    size_t nlat, cap; /* taken, allocated */
    uint64_t unkept;  /* samples past PROBE_LAT_CAP, counted in the summary */
    uint64_t file_bytes;
} fsprobe;

static int probe_err(fsprobe *p, int rv, const char *what)
{
    snprintf(p->r->errmsg, sizeof(p->r->errmsg), "fsync-probe: %s %.300s: %s", what, p->path,
             strerror(-rv));
    p->r->error = rv;
    return rv;
}

/* Closes and removes the open file after an error already reported. */
static void discard_file(fsprobe *p)
{
    if (p->fd < 0)
        return;
    (void)close(p->fd); /* the run failed already; that error is the one reported */
    (void)unlink(p->path);
    p->fd = -1;
}

/* Closes and removes the open file (the log's retention removes whole
 * segments too). Returns 0 or -errno. */
static int close_file(fsprobe *p)
{
    if (p->fd < 0)
        return 0;
    int rv = close(p->fd) == 0 ? 0 : -errno;
    p->fd = -1;
    if (rv == 0 && unlink(p->path) != 0)
        rv = -errno;
    return rv != 0 ? probe_err(p, rv, "cannot remove") : 0;
}

/* Starts the next file: created, preallocated to file_bytes
 * with FALLOC_FL_KEEP_SIZE (its size grows with each append, as a
 * segment's does), the previous one removed. Returns 0 or -errno. */
static int next_file(fsprobe *p)
{
    int rv = close_file(p);
    if (rv != 0)
        return rv;
    snprintf(p->path, sizeof(p->path), "%s/probe-%ld-%u.log", p->cfg->dir, (long)getpid(),
             p->files++);
    p->fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (p->fd < 0)
        return probe_err(p, -errno, "cannot create");
    p->pos = 0;
    if (fallocate(p->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)p->file_bytes) != 0) {
        rv = -errno;
        probe_err(p, rv, "cannot preallocate");
        discard_file(p);
        return rv;
    }
    return 0;
}

/* Appends |len| bytes of |buf| at the end of the open file (a new file
 * when it would pass file_bytes). Returns 0 or -errno. */
static int append(fsprobe *p, const uint8_t *buf, size_t len)
{
    int rv;
    if (p->pos + len > p->file_bytes && (rv = next_file(p)) != 0)
        return rv;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(p->fd, buf + done, len - done, (off_t)(p->pos + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return probe_err(p, n < 0 ? -errno : -EIO, "cannot write");
        done += (size_t)n;
    }
    p->pos += len;
    return 0;
}

/* fdatasync of the open file; its duration in |*ns|. Returns 0 or -errno. */
static int sync_timed(fsprobe *p, uint64_t *ns)
{
    uint64_t t = fx_bench_now_ns();
    if (fdatasync(p->fd) != 0)
        return probe_err(p, -errno, "fdatasync failed on");
    *ns = fx_bench_now_ns() - t;
    return 0;
}

static int keep_sample(fsprobe *p, uint64_t ns)
{
    if (p->nlat == p->cap) {
        if (p->cap >= PROBE_LAT_CAP) {
            p->unkept++; /* enough samples for any percentile we print */
            return 0;
        }
        size_t cap = p->cap ? p->cap * 2 : 4096;
        uint64_t *v = realloc(p->lat, cap * sizeof(*v));
        if (v == NULL) {
            snprintf(p->r->errmsg, sizeof(p->r->errmsg), "fsync-probe: out of memory");
            return p->r->error = -ENOMEM;
        }
        p->lat = v;
        p->cap = cap;
    }
    p->lat[p->nlat++] = ns;
    return 0;
}

/* The grouped phase: groups of sync_every records, one pwrite and one
 * fdatasync each, until probe_records and min_seconds are both reached
 * (max_seconds bounds it). */
static int grouped(fsprobe *p, const uint8_t *group, size_t glen)
{
    const fx_bench_cfg *c = p->cfg;
    fx_bench_result *r = p->r;
    uint64_t t0 = fx_bench_now_ns(), now = t0, ns = 0;
    int rv = next_file(p);
    while (rv == 0) {
        double s = (double)(now - t0) / 1e9;
        if ((r->probe_records >= c->probe_records && s >= c->min_seconds) || s >= c->max_seconds)
            break;
        if ((rv = append(p, group, glen)) != 0 || (rv = sync_timed(p, &ns)) != 0 ||
            (rv = keep_sample(p, ns)) != 0)
            break;
        r->probe_records += c->sync_every;
        r->probe_syncs++;
        now = fx_bench_now_ns();
    }
    r->window_s = (double)(now - t0) / 1e9;
    return rv;
}

/* The single-record phase on a fresh file: one append, one fdatasync. */
static int single(fsprobe *p, const uint8_t *rec, size_t rlen, uint64_t *lat, size_t n)
{
    int rv = next_file(p);
    for (size_t i = 0; rv == 0 && i < n; i++)
        if ((rv = append(p, rec, rlen)) == 0)
            rv = sync_timed(p, &lat[i]);
    return rv;
}

/* Fills |r->fs_magic| and refuses nothing: |valid| says whether the
 * figures are a disk's. */
static int check_dir(const fx_bench_cfg *c, fx_bench_result *r)
{
    struct statfs sf;
    if (statfs(c->dir, &sf) != 0) {
        int rv = -errno;
        snprintf(r->errmsg, sizeof(r->errmsg), "fsync-probe: %s: %s", c->dir, strerror(-rv));
        return r->error = rv;
    }
    r->fs_magic = (long)sf.f_type;
    return 0;
}

static bool on_memory_fs(long magic)
{
    return magic == (long)TMPFS_MAGIC || magic == (long)RAMFS_MAGIC;
}

int fx_bench_probe_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    r->msgs_per_s = r->mb_per_s = NAN;
    int rv = check_dir(c, r);
    if (rv != 0)
        return rv;
    size_t rlen = c->payload + FX_BENCH_REC_HEADER, glen = rlen * c->sync_every;
    uint64_t want = c->probe_single ? c->probe_single : FX_BENCH_PROBE_SINGLE;
    size_t nsingle = (size_t)(c->probe_records < want ? c->probe_records : want);
    fsprobe p = {.cfg = c, .r = r, .fd = -1, .file_bytes = c->probe_file_bytes};
    if (p.file_bytes == 0)
        p.file_bytes = FX_BENCH_PROBE_FILE_BYTES;
    if (glen > p.file_bytes) {
        snprintf(r->errmsg, sizeof(r->errmsg),
                 "fsync-probe: a group of %zu bytes passes the "
                 "%llu-byte probe file",
                 glen, (unsigned long long)p.file_bytes);
        return r->error = -EINVAL;
    }
    uint8_t *group = malloc(glen);
    uint64_t *slat = malloc((nsingle ? nsingle : 1) * sizeof(*slat));
    if (group == NULL || slat == NULL) {
        snprintf(r->errmsg, sizeof(r->errmsg), "fsync-probe: out of memory");
        rv = r->error = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < glen; i++)
        group[i] = (uint8_t)('a' + i % 26);
    if ((rv = grouped(&p, group, glen)) == 0)
        rv = single(&p, group, rlen, slat, nsingle);
    if (rv == 0) /* else the first error stands; out: discards the file */
        rv = close_file(&p);
    if (rv != 0)
        goto out;
    uint64_t none = 0; /* qsort takes no NULL array, even an empty one */
    fx_bench_lat_summarize(p.nlat ? p.lat : &none, p.nlat, p.unkept, &r->lat);
    fx_bench_lat_summarize(slat, nsingle, 0, &r->single_lat);
    r->run_s = r->window_s;
    if (r->window_s > 0) {
        r->msgs_per_s = (double)r->probe_records / r->window_s;
        r->mb_per_s = r->msgs_per_s * (double)rlen / 1e6;
    }
    r->valid = !on_memory_fs(r->fs_magic);
    if (!r->valid)
        snprintf(r->why, sizeof(r->why),
                 "%s is on a memory file system (tmpfs or ramfs): fdatasync does nothing there",
                 c->dir);
out:
    discard_file(&p);
    free(p.lat);
    free(slat);
    free(group);
    return rv;
}
