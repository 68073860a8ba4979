/* Broker configuration: the memory bound and the memory target it must fit.
 * Detects the target (memory_limit_bytes, else the cgroup v2 memory.max,
 * else half of RAM), derives the defaults of max_connections and the
 * connection receive window from it, and refuses explicit settings whose
 * bound exceeds it. docs/configuration.md ("Memory bound") has the formula.
 * Main thread only (reads /proc and /sys at start-up). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "felix/error.h"
#include "server/config.h"
#include "server/config_internal.h"

/* The connection count the derivation keeps before it shrinks windows: one
 * address's worth of connections at the usual per-address cap. */
#define MIN_DERIVED_CONNECTIONS 256u
/* The smallest connection receive window ceiling the derivation picks. */
#define MIN_DERIVED_CONN_WINDOW MiB

/* ---- detecting the target ---------------------------------------------- */

/* Reads the first line of |path| into |buf|; false if it cannot. */
static bool read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* The v2 cgroup path of this process from |proc_cgroup| ("0::/a/b"). */
static bool cgroup_v2_path(const char *proc_cgroup, char *out, size_t n)
{
    FILE *f = fopen(proc_cgroup, "re");
    if (!f)
        return false;
    char line[FX_CONFIG_PATH_MAX];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        found = (size_t)snprintf(out, n, "%s", line + 3) < n;
    }
    fclose(f);
    return found;
}

/* The smallest memory.max from the process's cgroup up to the root (a
 * parent's limit binds its children too); 0 when none is set. */
static uint64_t cgroup_memory_max(const char *proc_cgroup, const char *root)
{
    char rel[FX_CONFIG_PATH_MAX], path[2 * FX_CONFIG_PATH_MAX], val[64];
    if (!cgroup_v2_path(proc_cgroup, rel, sizeof(rel)))
        return 0;
    uint64_t best = 0;
    for (;;) {
        snprintf(path, sizeof(path), "%s%s/memory.max", root, strcmp(rel, "/") ? rel : "");
        char *end;
        if (read_line(path, val, sizeof(val)) && val[0] >= '0' && val[0] <= '9') {
            unsigned long long v = strtoull(val, &end, 10);
            if (*end == '\0' && v > 0 && (best == 0 || v < best))
                best = v;
        }
        char *slash = strrchr(rel, '/');
        if (!slash || slash == rel)
            break;
        *slash = '\0';
    }
    return best;
}

uint64_t fx_config_host_memory(const char *proc_cgroup, const char *cgroup_root, uint64_t ram,
                               const char **psource)
{
    uint64_t max = cgroup_memory_max(proc_cgroup, cgroup_root);
    if (max > 0 && (ram == 0 || max < ram)) {
        *psource = "cgroup memory.max";
        return max;
    }
    *psource = "half of RAM";
    return ram / 2;
}

static uint64_t host_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

int fx_config_resolve_memory_target(fx_config *c, uint64_t given, fx_config_diag *d)
{
    int i = fx_config_key_index("memory_limit_bytes");
    if (c->memory_limit_bytes != 0)
        return 0;
    const char *source = "given by the caller";
    uint64_t t = given;
    if (t == 0) /* whole MiB, so --print-config writes a readable size */
        t = fx_config_host_memory("/proc/self/cgroup", "/sys/fs/cgroup", host_ram(), &source) /
            MiB * MiB;
    if (t == 0) {
        fx_config_warn(d, "memory_limit_bytes: cannot read the host's memory size; the defaults "
                          "are not derived from it, set memory_limit_bytes");
        return 0;
    }
    c->memory_limit_bytes = t;
    c->origin[i].note = source;
    return 0;
}

/* ---- the bound --------------------------------------------------------- */

/* Per storage thread and its replay thread: the encoding copy and iov of
 * the append being written (the largest is one frame's batch: records of
 * 28-byte headers and 16-byte iov entries, at most 65,536 of them) and the
 * replay page being read with its slices. Both are given back after use
 * (docs/durability.md, "Memory"). */
static uint64_t durable_thread_bytes(const fx_config *c)
{
    uint64_t page = c->max_frame_bytes > MiB ? c->max_frame_bytes : MiB;
    return c->max_frame_bytes + 65536ull * (28 + 16) + page +
           (uint64_t)c->durable_max_records_per_read * 16;
}

static bool same_stream(const fx_config_stream *a, const fx_config_stream *b)
{
    return !strcmp(a->tenant, b->tenant) && !strcmp(a->ns, b->ns) && !strcmp(a->stream, b->stream);
}

/* Whether group |i|'s stream is in streams or named by an earlier group. */
static bool group_stream_counted(const fx_config *c, size_t i)
{
    const fx_config_stream *st = &c->groups[i].s;
    for (size_t j = 0; j < c->nstreams; j++) {
        if (same_stream(&c->streams[j], st))
            return true;
    }
    for (size_t j = 0; j < i; j++) {
        if (same_stream(&c->groups[j].s, st))
            return true;
    }
    return false;
}

/* The streams created at start: those of streams, and those groups name
 * that streams does not (made in memory before their groups). */
static size_t prestreams(const fx_config *c)
{
    size_t n = c->nstreams;
    for (size_t i = 0; i < c->ngroups; i++)
        n += !group_stream_counted(c, i);
    return n;
}

void fx_config_memory_bound(const fx_config *c, fx_config_bound *b)
{
    b->per_conn = c->quic_conn_recv_window_max + c->quic_unacked_send_bytes;
    b->conns = (uint64_t)c->max_connections * b->per_conn;
    b->ingress = c->pub_inflight_bytes;
    b->retained = c->allocator_retain_bytes;
    b->rings = (uint64_t)prestreams(c) * (c->log_capacity_bytes + c->max_frame_bytes);
    b->durable = c->durable_storage_dir[0] ? (uint64_t)c->workers * durable_thread_bytes(c) : 0;
    b->caches = c->cache_max_bytes;
    b->total = b->conns + b->ingress + b->retained + b->rings + b->durable + b->caches;
}

/* "1.5 GiB", "64 MiB", "512 KiB" */
static void fmt_size(uint64_t v, char *buf, size_t n)
{
    if (v >= GiB)
        snprintf(buf, n, "%.1f GiB", (double)v / (double)GiB);
    else if (v >= MiB)
        snprintf(buf, n, "%llu MiB", (unsigned long long)(v / MiB));
    else
        snprintf(buf, n, "%llu KiB", (unsigned long long)(v / KiB));
}

void fx_config_format_bound(const fx_config *c, char *buf, size_t n)
{
    fx_config_bound b;
    fx_config_memory_bound(c, &b);
    char total[32], win[32], un[32], in[32], ret[32], ring[32], lim[32], cache[32];
    fmt_size(b.total, total, sizeof(total));
    fmt_size(c->quic_conn_recv_window_max, win, sizeof(win));
    fmt_size(c->quic_unacked_send_bytes, un, sizeof(un));
    fmt_size(b.ingress, in, sizeof(in));
    fmt_size(b.retained, ret, sizeof(ret));
    fmt_size(c->log_capacity_bytes + c->max_frame_bytes, ring, sizeof(ring));
    fmt_size(c->memory_limit_bytes, lim, sizeof(lim));
    fmt_size(b.caches, cache, sizeof(cache));
    const fx_config_origin *o = fx_config_origin_of(c, "memory_limit_bytes");
    char dur[96] = "";
    if (b.durable > 0) {
        char per[32];
        fmt_size(b.durable / c->workers, per, sizeof(per));
        snprintf(dur, sizeof(dur), " + %u storage threads x %s durable buffers",
                 (unsigned)c->workers, per);
    }
    snprintf(buf, n,
             "memory bound %s = %u connections x (%s receive window + %s unacked) + %s "
             "ingress + %s retained heap + %s caches + %zu streams x %s%s (streams created later "
             "add %s each); memory_limit_bytes %s (%s)",
             total, (unsigned)c->max_connections, win, un, in, ret, cache, prestreams(c), ring, dur,
             ring, lim, o->note ? o->note : "set");
}

/* ---- deriving the defaults --------------------------------------------- */

static bool is_default(const fx_config *c, const char *key)
{
    return fx_config_origin_of(c, key)->from == FX_CONFIG_FROM_DEFAULT;
}

static void set_derived(fx_config *c, const char *key, uint64_t v)
{
    int i = fx_config_key_index(key);
    const struct key *k = &fx_config_keys[i];
    if (k->type == T_U32)
        *(uint32_t *)fx_config_field(c, k) = (uint32_t)v;
    else
        *(uint64_t *)fx_config_field(c, k) = v;
    c->origin[i].note = "derived from memory_limit_bytes";
}

static uint64_t pow2_floor(uint64_t v)
{
    uint64_t p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

/* The connection receive window ceiling for |conns| connections sharing
 * |budget| bytes, each also holding |unacked|: the default if it fits, else
 * the largest power of two that does, within [|floor|, the default]. */
static uint64_t fit_window(uint64_t budget, uint64_t conns, uint64_t unacked, uint64_t def,
                           uint64_t floor)
{
    uint64_t share = budget / conns;
    if (share >= def + unacked)
        return def;
    uint64_t w = share > unacked ? pow2_floor(share - unacked) : 0;
    if (w < floor)
        w = floor;
    return w < def ? w : def;
}

void fx_config_derive_memory(fx_config *c)
{
    fx_config_bound b;
    fx_config_memory_bound(c, &b);
    uint64_t fixed = b.ingress + b.retained + b.rings + b.durable + b.caches;
    if (c->memory_limit_bytes == 0)
        return;
    uint64_t budget = c->memory_limit_bytes > fixed ? c->memory_limit_bytes - fixed : 0;
    uint64_t unacked = c->quic_unacked_send_bytes;
    if (is_default(c, "quic_conn_recv_window_max")) {
        uint64_t conns =
            is_default(c, "max_connections") ? MIN_DERIVED_CONNECTIONS : c->max_connections;
        uint64_t floor = MIN_DERIVED_CONN_WINDOW;
        if (!is_default(c, "quic_conn_recv_window") && c->quic_conn_recv_window > floor)
            floor = c->quic_conn_recv_window; /* the ceiling never starts below the window */
        uint64_t w = fit_window(budget, conns, unacked, c->quic_conn_recv_window_max, floor);
        if (w < c->quic_conn_recv_window_max)
            set_derived(c, "quic_conn_recv_window_max", w);
        if (is_default(c, "quic_conn_recv_window") && c->quic_conn_recv_window > w)
            set_derived(c, "quic_conn_recv_window", w);
    }
    if (is_default(c, "max_connections")) {
        uint64_t n = budget / (c->quic_conn_recv_window_max + unacked);
        if (n < 1)
            n = 1;
        if (n < c->max_connections)
            set_derived(c, "max_connections", n);
    }
}

/* ---- checking the bound ------------------------------------------------ */

/* The keys of the bound; an explicit one that makes it exceed the target is
 * refused. */
static const char *const bound_keys[] = {
    "memory_limit_bytes",
    "max_connections",
    "quic_conn_recv_window",
    "quic_conn_recv_window_max",
    "quic_unacked_send_bytes",
    "pub_inflight_bytes",
    "allocator_retain_bytes",
    "log_capacity_bytes",
    "max_frame_bytes",
    "streams",
    "groups",
    "durable_storage_dir",
    "durable_max_records_per_read",
    "workers",
    "cache_max_bytes",
};

int fx_config_check_memory(const fx_config *c, fx_config_diag *d)
{
    fx_config_bound b;
    fx_config_memory_bound(c, &b);
    if (c->memory_limit_bytes == 0 || b.total <= c->memory_limit_bytes)
        return 0;
    char bound[512], set[320] = "", where[FX_CONFIG_PATH_MAX + 64];
    fx_config_format_bound(c, bound, sizeof(bound));
    size_t len = 0;
    for (size_t i = 0; i < sizeof(bound_keys) / sizeof(bound_keys[0]); i++) {
        const fx_config_origin *o = fx_config_origin_of(c, bound_keys[i]);
        if (o->from == FX_CONFIG_FROM_DEFAULT || (i == 0 && o->note))
            continue; /* a detected target (memory_limit_bytes: 0) is not a setting */
        fx_config_format_where(c, o, where, sizeof(where));
        int w = snprintf(set + len, sizeof(set) - len, "%s%s (%s)", len ? ", " : "", bound_keys[i],
                         where);
        if (w < 0 || (size_t)w >= sizeof(set) - len)
            break;
        len += (size_t)w;
    }
    if (len == 0) {
        fx_config_warn(d, "the defaults do not fit this host: %s", bound);
        return 0;
    }
    return fx_config_fail(d,
                          "%s: the bound exceeds the target. Set explicitly: %s; lower them or "
                          "raise memory_limit_bytes",
                          bound, set);
}
