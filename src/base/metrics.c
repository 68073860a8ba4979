/* Metrics registry: per-thread cells, snapshots, Prometheus text rendering.
 * Cells live in one list guarded by a mutex that is taken only when a thread
 * gets or parks its cell and when a scrape sums them; updates never lock.
 * Any thread. */
#include "base/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

/* ---- descriptor table ---------------------------------------------------- */

#define DESC_C(f, n, l, h)                                                                         \
    {.type = FX_METRIC_COUNTER,                                                                    \
     .field = #f,                                                                                  \
     .name = n,                                                                                    \
     .label = l,                                                                                   \
     .help = h,                                                                                    \
     .off = offsetof(fx_metrics_counters, f)},
#define DESC_G(f, n, l, h)                                                                         \
    {.type = FX_METRIC_GAUGE,                                                                      \
     .field = #f,                                                                                  \
     .name = n,                                                                                    \
     .label = l,                                                                                   \
     .help = h,                                                                                    \
     .off = offsetof(fx_metrics_gauges, f)},
#define DESC_H(f, n, l, h, lo_)                                                                    \
    {.type = FX_METRIC_HISTOGRAM,                                                                  \
     .field = #f,                                                                                  \
     .name = n,                                                                                    \
     .label = l,                                                                                   \
     .help = h,                                                                                    \
     .off = offsetof(fx_metrics_hists, f),                                                         \
     .lo = (lo_)},

const fx_metric_desc fx_metrics_descs[] = {FX_METRICS_ALL(DESC_C, DESC_G, DESC_H)};
const size_t fx_metrics_ndescs = sizeof(fx_metrics_descs) / sizeof(fx_metrics_descs[0]);

/* The value structs are read as arrays of equal-sized fields, so each must be
 * exactly its list's entries with no padding. */
#define COUNT_ONE(...) +1
_Static_assert(sizeof(fx_metrics_counters) ==
                   (0 FX_METRICS_ALL(COUNT_ONE, FX_METRICS_NONE_, FX_METRICS_NONE_)) *
                       sizeof(_Atomic uint64_t),
               "fx_metrics_counters has padding or fields outside the lists");
_Static_assert(sizeof(fx_metrics_gauges) ==
                   (0 FX_METRICS_ALL(FX_METRICS_NONE_, COUNT_ONE, FX_METRICS_NONE_)) *
                       sizeof(_Atomic int64_t),
               "fx_metrics_gauges has padding or fields outside the lists");
_Static_assert(sizeof(fx_metrics_hists) ==
                   (0 FX_METRICS_ALL(FX_METRICS_NONE_, FX_METRICS_NONE_, COUNT_ONE)) *
                       sizeof(fx_hist),
               "fx_metrics_hists has padding or fields outside the lists");
#define CHECK_LO(f, n, l, h, lo_)                                                                  \
    _Static_assert((lo_) + FX_HIST_NBUCKETS <= 64 || (lo_) >= FX_HIST_FIXED_BASE,                  \
                   "histogram " #f " bounds overflow 64 bits");
FX_METRICS_ALL(FX_METRICS_NONE_, FX_METRICS_NONE_, CHECK_LO)

/* ---- cells ------------------------------------------------------------- */

/* A cell plus its list link. Aligned to a cache line so two threads' cells
 * never share one. |in_use| and |next| are guarded by cells_mu. */
typedef struct cell_node {
    fx_metrics_cell s;
    struct cell_node *next;
    bool in_use;
} cell_node;

#define CELL_ALIGN 64

fx_metrics_gauges fx_gauges;
_Thread_local fx_metrics_cell *fx_metrics_tls_cell;

static pthread_mutex_t cells_mu = PTHREAD_MUTEX_INITIALIZER;
static cell_node *cells;
static size_t ncells;
/* Shared by threads that could not get a cell of their own (out of memory). */
static cell_node fallback_cell;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static bool exit_key_ok;

/* Runs when a thread that has a cell exits: parks the cell for reuse. The
 * values stay, so nothing counted is lost; the mutex orders the old owner's
 * writes before the next owner's. */
static void cell_park(void *p)
{
    cell_node *n = p;
    /* An update from a later destructor of this thread attaches afresh. */
    fx_metrics_tls_cell = NULL;
    pthread_mutex_lock(&cells_mu);
    n->in_use = false;
    pthread_mutex_unlock(&cells_mu);
}

static void make_exit_key(void)
{
    /* Without the key, cells of exited threads are simply not reused. */
    exit_key_ok = pthread_key_create(&exit_key, cell_park) == 0;
}

/* Returns a parked cell marked in use, or a new one, or NULL on OOM.
 * Caller holds cells_mu. */
static cell_node *cell_take_locked(void)
{
    for (cell_node *n = cells; n; n = n->next) {
        if (!n->in_use) {
            n->in_use = true;
            return n;
        }
    }
    size_t size = (sizeof(cell_node) + CELL_ALIGN - 1) / CELL_ALIGN * CELL_ALIGN;
    cell_node *n = aligned_alloc(CELL_ALIGN, size);
    if (!n)
        return NULL;
    memset(n, 0, size);
    n->in_use = true;
    n->next = cells;
    cells = n;
    ncells++;
    return n;
}

fx_metrics_cell *fx_metrics_cell_attach(void)
{
    pthread_once(&key_once, make_exit_key);
    pthread_mutex_lock(&cells_mu);
    cell_node *n = cell_take_locked();
    pthread_mutex_unlock(&cells_mu);
    if (!n)
        return &fallback_cell.s; /* not cached: retry on the next update */
    /* If this fails the thread's exit goes unnoticed and its cell is never
     * reused: a bounded leak of one cell, not a wrong count. */
    if (exit_key_ok)
        (void)pthread_setspecific(exit_key, n);
    fx_metrics_tls_cell = &n->s;
    return &n->s;
}

size_t fx_metrics_cell_count(void)
{
    pthread_mutex_lock(&cells_mu);
    size_t n = ncells;
    pthread_mutex_unlock(&cells_mu);
    return n;
}

/* ---- histograms --------------------------------------------------------- */

static const uint64_t LATE_BOUNDS[] = {100,   250,   500,   1000,   2500,  5000,
                                       10000, 25000, 50000, 100000, 250000};
static const char *const LATE_LE[] = {"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
                                      "0.01",   "0.025",   "0.05",   "0.1",   "0.25"};
static const fx_hist_fixed FIXED[] = {
    [FX_HIST_FIXED_LATENESS -
     FX_HIST_FIXED_BASE] = {.n = sizeof(LATE_BOUNDS) / sizeof(LATE_BOUNDS[0]),
                            .bounds = LATE_BOUNDS,
                            .le = LATE_LE,
                            .per_unit = 1000000},
};
_Static_assert(sizeof(LATE_BOUNDS) / sizeof(LATE_BOUNDS[0]) == sizeof(LATE_LE) / sizeof(LATE_LE[0]),
               "every fixed bound has its exported text");
_Static_assert(sizeof(LATE_BOUNDS) / sizeof(LATE_BOUNDS[0]) < FX_HIST_NBUCKETS,
               "fixed bounds fit a histogram's buckets");

const fx_hist_fixed *fx_hist_fixed_of(unsigned lo)
{
    if (lo < FX_HIST_FIXED_BASE || lo - FX_HIST_FIXED_BASE >= sizeof(FIXED) / sizeof(FIXED[0]))
        return NULL;
    return &FIXED[lo - FX_HIST_FIXED_BASE];
}

unsigned fx_hist_bucket_index(unsigned lo, uint64_t v)
{
    const fx_hist_fixed *fx = fx_hist_fixed_of(lo);
    if (fx != NULL) {
        unsigned i = 0;
        while (i < fx->n && v > fx->bounds[i])
            i++;
        return i;
    }
    if (v <= (UINT64_C(1) << lo))
        return 0;
    /* ceil(log2(v)) for v >= 2 */
    unsigned e = 64u - (unsigned)__builtin_clzll(v - 1);
    unsigned i = e - lo;
    return i < FX_HIST_NBUCKETS ? i : FX_HIST_NBUCKETS;
}

void fx_hist_observe(fx_hist *h, unsigned lo, uint64_t v)
{
    fx_hist_observe_n(h, lo, v, 1);
}

void fx_hist_observe_n(fx_hist *h, unsigned lo, uint64_t v, uint64_t n)
{
    unsigned i = fx_hist_bucket_index(lo, v);
    atomic_fetch_add_explicit(&h->buckets[i], n, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v * n, memory_order_relaxed);
}

/* ---- snapshots ---------------------------------------------------------- */

static _Atomic uint64_t *u64_at(const void *base, size_t off)
{
    return (_Atomic uint64_t *)((char *)base + off);
}

static void add_u64(_Atomic uint64_t *dst, const _Atomic uint64_t *src)
{
    uint64_t v = atomic_load_explicit(src, memory_order_relaxed);
    atomic_store_explicit(dst, atomic_load_explicit(dst, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static void hist_add(fx_hist *dst, const fx_hist *src)
{
    for (size_t i = 0; i <= FX_HIST_NBUCKETS; i++)
        add_u64(&dst->buckets[i], &src->buckets[i]);
    add_u64(&dst->sum, &src->sum);
}

static void cell_add(fx_metrics_snapshot *snap, const fx_metrics_cell *s)
{
    size_t nc = sizeof(fx_metrics_counters) / sizeof(_Atomic uint64_t);
    for (size_t i = 0; i < nc; i++)
        add_u64(u64_at(&snap->c, i * sizeof(uint64_t)), u64_at(&s->c, i * sizeof(uint64_t)));
    size_t nh = sizeof(fx_metrics_hists) / sizeof(fx_hist);
    const fx_hist *src = (const fx_hist *)&s->h;
    fx_hist *dst = (fx_hist *)&snap->h;
    for (size_t i = 0; i < nh; i++)
        hist_add(&dst[i], &src[i]);
}

void fx_metrics_snapshot_take(fx_metrics_snapshot *snap)
{
    memset(snap, 0, sizeof(*snap));
    size_t ng = sizeof(fx_metrics_gauges) / sizeof(_Atomic int64_t);
    const _Atomic int64_t *g = (const _Atomic int64_t *)&fx_gauges;
    _Atomic int64_t *dg = (_Atomic int64_t *)&snap->g;
    for (size_t i = 0; i < ng; i++)
        atomic_store_explicit(&dg[i], atomic_load_explicit(&g[i], memory_order_relaxed),
                              memory_order_relaxed);
    pthread_mutex_lock(&cells_mu);
    for (const cell_node *n = cells; n; n = n->next)
        cell_add(snap, &n->s);
    pthread_mutex_unlock(&cells_mu);
    cell_add(snap, &fallback_cell.s);
}

/* ---- growable text buffer ------------------------------------------------ */

typedef struct strbuf {
    char *p;
    size_t len;
    size_t cap;
    int err; /* first error; later appends are no-ops */
} strbuf;

static int sb_reserve(strbuf *b, size_t extra)
{
    if (b->err)
        return b->err;
    char *p = fx_grow(b->p, &b->cap, b->len + extra + 1, 1, 4096);
    if (!p)
        return b->err = -ENOMEM;
    b->p = p;
    return 0;
}

static void sb_putc(strbuf *b, char c)
{
    if (sb_reserve(b, 1) == 0) {
        b->p[b->len++] = c;
        b->p[b->len] = '\0';
    }
}

static void sb_puts(strbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (sb_reserve(b, n) == 0) {
        memcpy(b->p + b->len, s, n + 1);
        b->len += n;
    }
}

__attribute__((format(printf, 2, 3))) static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    /* Only numbers and short tokens go through here. */
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        if (!b->err)
            b->err = -ENOMEM;
        return;
    }
    sb_puts(b, tmp);
}

/* Appends |s| escaped for the exposition format: backslash and newline always,
 * the double quote too inside label values. */
static void sb_escaped(strbuf *b, const char *s, size_t n, bool quote)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\')
            sb_puts(b, "\\\\");
        else if (c == '\n')
            sb_puts(b, "\\n");
        else if (c == '"' && quote)
            sb_puts(b, "\\\"");
        else
            sb_putc(b, c);
    }
}

/* ---- rendering ----------------------------------------------------------- */

static const char *type_name(fx_metric_type t)
{
    switch (t) {
    case FX_METRIC_COUNTER:
        return "counter";
    case FX_METRIC_GAUGE:
        return "gauge";
    case FX_METRIC_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

static void render_header(strbuf *b, const fx_metric_desc *d)
{
    sb_puts(b, "# HELP ");
    sb_puts(b, d->name);
    sb_putc(b, ' ');
    sb_escaped(b, d->help, strlen(d->help), false);
    sb_puts(b, "\n# TYPE ");
    sb_puts(b, d->name);
    sb_putc(b, ' ');
    sb_puts(b, type_name(d->type));
    sb_putc(b, '\n');
}

/* Appends `name[suffix]{label,le="x"}` with whichever labels apply. */
static void render_series(strbuf *b, const fx_metric_desc *d, const char *suffix, const char *le)
{
    const char *eq = strchr(d->label, '=');
    sb_puts(b, d->name);
    sb_puts(b, suffix);
    if (!eq && !le)
        return;
    sb_putc(b, '{');
    if (eq) {
        sb_escaped(b, d->label, (size_t)(eq - d->label), false);
        sb_puts(b, "=\"");
        sb_escaped(b, eq + 1, strlen(eq + 1), true);
        sb_putc(b, '"');
    }
    if (eq && le)
        sb_putc(b, ',');
    if (le)
        sb_printf(b, "le=\"%s\"", le);
    sb_putc(b, '}');
}

/* A histogram of fixed bounds: its finite buckets, +Inf (every count
 * above), and its sum in the exported unit. */
static void render_hist_fixed(strbuf *b, const fx_metric_desc *d, const fx_hist *h,
                              const fx_hist_fixed *fx)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i <= FX_HIST_NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i >= fx->n && i < FX_HIST_NBUCKETS)
            continue; /* folded into +Inf */
        render_series(b, d, "_bucket", i < fx->n ? fx->le[i] : "+Inf");
        sb_printf(b, " %" PRIu64 "\n", cum);
    }
    uint64_t sum = atomic_load_explicit(&h->sum, memory_order_relaxed);
    render_series(b, d, "_sum", NULL);
    sb_printf(b, " %" PRIu64 ".%06" PRIu64 "\n", sum / fx->per_unit,
              (sum % fx->per_unit) * 1000000 / fx->per_unit);
    render_series(b, d, "_count", NULL);
    sb_printf(b, " %" PRIu64 "\n", cum);
}

static void render_hist(strbuf *b, const fx_metric_desc *d, const fx_hist *h)
{
    const fx_hist_fixed *fx = fx_hist_fixed_of(d->lo);
    if (fx != NULL) {
        render_hist_fixed(b, d, h, fx);
        return;
    }
    uint64_t cum = 0;
    char le[32];
    for (unsigned i = 0; i <= FX_HIST_NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < FX_HIST_NBUCKETS)
            snprintf(le, sizeof(le), "%" PRIu64, UINT64_C(1) << (d->lo + i));
        else
            snprintf(le, sizeof(le), "+Inf");
        render_series(b, d, "_bucket", le);
        sb_printf(b, " %" PRIu64 "\n", cum);
    }
    render_series(b, d, "_sum", NULL);
    sb_printf(b, " %" PRIu64 "\n", atomic_load_explicit(&h->sum, memory_order_relaxed));
    render_series(b, d, "_count", NULL);
    sb_printf(b, " %" PRIu64 "\n", cum);
}

static void render_one(strbuf *b, const fx_metric_desc *d, const fx_metrics_snapshot *snap)
{
    switch (d->type) {
    case FX_METRIC_COUNTER:
        render_series(b, d, "", NULL);
        sb_printf(b, " %" PRIu64 "\n",
                  atomic_load_explicit(u64_at(&snap->c, d->off), memory_order_relaxed));
        break;
    case FX_METRIC_GAUGE: {
        const _Atomic int64_t *g = (const _Atomic int64_t *)((const char *)&snap->g + d->off);
        render_series(b, d, "", NULL);
        sb_printf(b, " %" PRId64 "\n", atomic_load_explicit(g, memory_order_relaxed));
        break;
    }
    case FX_METRIC_HISTOGRAM:
        render_hist(b, d, (const fx_hist *)((const char *)&snap->h + d->off));
        break;
    }
}

int fx_metrics_render_descs(const fx_metric_desc *descs, size_t n, const fx_metrics_snapshot *snap,
                            char **pout, size_t *plen)
{
    strbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(descs[i].name, descs[i - 1].name) != 0)
            render_header(&b, &descs[i]);
        render_one(&b, &descs[i], snap);
    }
    if (sb_reserve(&b, 0) != 0) {
        free(b.p);
        return b.err;
    }
    b.p[b.len] = '\0';
    *pout = b.p;
    *plen = b.len;
    return 0;
}

/* ---- per-stream series ---------------------------------------------------- */

/* Writes the HELP and TYPE lines of |n| labelled families |d| to |out|, each
 * followed by the rows gathered in |bufs[i]| (freed here). Returns 0 or the
 * first error of a buffer or of |out|. */
static int flush_families(strbuf *out, const fx_metric_desc *d, strbuf *bufs, size_t n)
{
    int rv = 0;
    for (size_t i = 0; i < n; i++) {
        render_header(out, &d[i]);
        if (bufs[i].err)
            rv = bufs[i].err;
        else if (bufs[i].len > 0)
            sb_puts(out, bufs[i].p);
        free(bufs[i].p);
    }
    return rv != 0 ? rv : out->err;
}

#define MSTREAM_DESC_(id, n, h) [id] = {.name = n, .help = h},
const fx_mstream_desc fx_mstream_descs[FX_MSTREAM_N] = {FX_METRICS_STREAMS(MSTREAM_DESC_)};

/* A list of labelled-series sources of type T (with a |next| link), and a
 * scrape in progress, under one mutex |mu|: removal waits for a scrape that
 * may be calling the source. Defines |add| and |remove|. */
#define SOURCE_LIST(T, mu, head, add, remove)                                                      \
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;                                         \
    static T *head;                                                                                \
    void add(T *s)                                                                                 \
    {                                                                                              \
        pthread_mutex_lock(&mu);                                                                   \
        s->next = head;                                                                            \
        head = s;                                                                                  \
        pthread_mutex_unlock(&mu);                                                                 \
    }                                                                                              \
    void remove(T *s)                                                                              \
    {                                                                                              \
        pthread_mutex_lock(&mu);                                                                   \
        for (T **pp = &head; *pp != NULL; pp = &(*pp)->next) {                                     \
            if (*pp == s) {                                                                        \
                *pp = s->next;                                                                     \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
        pthread_mutex_unlock(&mu);                                                                 \
    }

SOURCE_LIST(fx_mstream_source, mstream_mu, mstream_sources, fx_metrics_stream_source_add,
            fx_metrics_stream_source_remove)

/* One text buffer per gauge: a source's rows are split across them. */
typedef struct mstream_sink {
    strbuf b[FX_MSTREAM_N];
} mstream_sink;

static void mstream_label(strbuf *b, const char *key, const char *v, bool comma)
{
    if (comma)
        sb_putc(b, ',');
    sb_puts(b, key);
    sb_puts(b, "=\"");
    sb_escaped(b, v, strlen(v), true);
    sb_putc(b, '"');
}

static void mstream_emit(void *user, const fx_mstream_row *row)
{
    mstream_sink *k = user;
    for (size_t i = 0; i < FX_MSTREAM_N; i++) {
        strbuf *b = &k->b[i];
        sb_puts(b, fx_mstream_descs[i].name);
        sb_putc(b, '{');
        mstream_label(b, "tenant", row->tenant, false);
        mstream_label(b, "namespace", row->ns, true);
        mstream_label(b, "stream", row->stream, true);
        sb_printf(b, "} %" PRId64 "\n", row->v[i]);
    }
}

/* Appends every per-stream gauge to |out|: its HELP and TYPE lines, and
 * with |per_stream| the series of every source. */
static int render_streams(strbuf *out, bool per_stream)
{
    mstream_sink k = {0};
    pthread_mutex_lock(&mstream_mu);
    for (fx_mstream_source *s = mstream_sources; per_stream && s != NULL; s = s->next)
        s->on_collect(s->user, mstream_emit, &k);
    pthread_mutex_unlock(&mstream_mu);
    fx_metric_desc d[FX_MSTREAM_N];
    for (size_t i = 0; i < FX_MSTREAM_N; i++)
        d[i] = (fx_metric_desc){.type = FX_METRIC_GAUGE,
                                .name = fx_mstream_descs[i].name,
                                .help = fx_mstream_descs[i].help};
    return flush_families(out, d, k.b, FX_MSTREAM_N);
}

/* ---- per-group series ----------------------------------------------------- */

#define MGROUP_DESC_(id, n, t, h) [id] = {.name = n, .type = t, .help = h},
const fx_mgroup_desc fx_mgroup_descs[FX_MGROUP_N] = {FX_METRICS_GROUPS(MGROUP_DESC_)};

SOURCE_LIST(fx_mgroup_source, mgroup_mu, mgroup_sources, fx_metrics_group_source_add,
            fx_metrics_group_source_remove)

typedef struct mgroup_sink {
    strbuf b[FX_MGROUP_N];
} mgroup_sink;

static void mgroup_emit(void *user, const fx_mgroup_row *row)
{
    mgroup_sink *k = user;
    for (size_t i = 0; i < FX_MGROUP_N; i++) {
        strbuf *b = &k->b[i];
        sb_puts(b, fx_mgroup_descs[i].name);
        sb_putc(b, '{');
        mstream_label(b, "tenant", row->tenant, false);
        mstream_label(b, "namespace", row->ns, true);
        mstream_label(b, "stream", row->stream, true);
        mstream_label(b, "group", row->group, true);
        sb_printf(b, "} %" PRId64 "\n", row->v[i]);
    }
}

/* Appends every per-group series to |out|: HELP and TYPE, and with
 * |per_stream| the series of every source. */
static int render_groups(strbuf *out, bool per_stream)
{
    mgroup_sink k = {0};
    pthread_mutex_lock(&mgroup_mu);
    for (fx_mgroup_source *s = mgroup_sources; per_stream && s != NULL; s = s->next)
        s->on_collect(s->user, mgroup_emit, &k);
    pthread_mutex_unlock(&mgroup_mu);
    fx_metric_desc d[FX_MGROUP_N];
    for (size_t i = 0; i < FX_MGROUP_N; i++)
        d[i] = (fx_metric_desc){.type = fx_mgroup_descs[i].type,
                                .name = fx_mgroup_descs[i].name,
                                .help = fx_mgroup_descs[i].help};
    return flush_families(out, d, k.b, FX_MGROUP_N);
}

/* ---- per-tenant series ----------------------------------------------------- */

#define MTENANT_DESC_(id, n, t, h) [id] = {.name = n, .type = t, .help = h},
const fx_mtenant_desc fx_mtenant_descs[FX_MTENANT_N] = {FX_METRICS_TENANTS(MTENANT_DESC_)};

SOURCE_LIST(fx_mtenant_source, mtenant_mu, mtenant_sources, fx_metrics_tenant_source_add,
            fx_metrics_tenant_source_remove)

typedef struct mtenant_sink {
    strbuf b[FX_MTENANT_N];
} mtenant_sink;

static void mtenant_emit(void *user, const fx_mtenant_row *row)
{
    mtenant_sink *k = user;
    for (size_t i = 0; i < FX_MTENANT_N; i++) {
        strbuf *b = &k->b[i];
        sb_puts(b, fx_mtenant_descs[i].name);
        sb_putc(b, '{');
        mstream_label(b, "tenant", row->tenant, false);
        sb_printf(b, "} %" PRId64 "\n", row->v[i]);
    }
}

/* Appends every per-tenant series to |out|: HELP and TYPE, and with
 * |per_stream| the series of every source. */
static int render_tenants(strbuf *out, bool per_stream)
{
    mtenant_sink k = {0};
    pthread_mutex_lock(&mtenant_mu);
    for (fx_mtenant_source *s = mtenant_sources; per_stream && s != NULL; s = s->next)
        s->on_collect(s->user, mtenant_emit, &k);
    pthread_mutex_unlock(&mtenant_mu);
    fx_metric_desc d[FX_MTENANT_N];
    for (size_t i = 0; i < FX_MTENANT_N; i++)
        d[i] = (fx_metric_desc){.type = fx_mtenant_descs[i].type,
                                .name = fx_mtenant_descs[i].name,
                                .help = fx_mtenant_descs[i].help};
    return flush_families(out, d, k.b, FX_MTENANT_N);
}

int fx_metrics_render(char **pout, size_t *plen, bool per_stream)
{
    fx_metrics_snapshot *snap = malloc(sizeof(*snap));
    if (!snap)
        return -ENOMEM;
    fx_metrics_snapshot_take(snap);
    char *text = NULL;
    size_t len = 0;
    int rv = fx_metrics_render_descs(fx_metrics_descs, fx_metrics_ndescs, snap, &text, &len);
    free(snap);
    if (rv != 0)
        return rv;
    strbuf b = {.p = text, .len = len, .cap = len + 1};
    if ((rv = render_streams(&b, per_stream)) != 0 || (rv = render_groups(&b, per_stream)) != 0 ||
        (rv = render_tenants(&b, per_stream)) != 0) {
        free(b.p);
        return rv;
    }
    *pout = b.p;
    *plen = b.len;
    return 0;
}

/* ---- Markdown reference (docs/metrics.md) -------------------------------- */

/* Writes |s| with the characters that would break a table cell escaped. */
static void md_cell(FILE *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '|')
            fputs("\\|", out);
        else if (s[i] == '\n')
            fputc(' ', out);
        else
            fputc(s[i], out);
    }
}

/* Writes the Labels cell of the |n| series starting at |d| (one name):
 * "`key`: `v1`, `v2`", or "-" when unlabelled. */
static void md_labels(FILE *out, const fx_metric_desc *d, size_t n)
{
    const char *eq = strchr(d->label, '=');
    if (!eq) {
        fputs("-", out);
        return;
    }
    fputc('`', out);
    md_cell(out, d->label, (size_t)(eq - d->label));
    fputs("`: ", out);
    for (size_t i = 0; i < n; i++) {
        const char *v = strchr(d[i].label, '=');
        fputs(i ? ", `" : "`", out);
        if (v)
            md_cell(out, v + 1, strlen(v + 1));
        fputc('`', out);
    }
}

static void md_row(FILE *out, const fx_metric_desc *d, size_t n)
{
    fprintf(out, "| `%s` | %s", d->name, type_name(d->type));
    const fx_hist_fixed *fx = d->type == FX_METRIC_HISTOGRAM ? fx_hist_fixed_of(d->lo) : NULL;
    if (fx != NULL)
        fprintf(out, " (le %s .. %s, +Inf)", fx->le[0], fx->le[fx->n - 1]);
    else if (d->type == FX_METRIC_HISTOGRAM)
        fprintf(out, " (le 2^%u .. 2^%u, +Inf)", d->lo, d->lo + FX_HIST_NBUCKETS - 1);
    fputs(" | ", out);
    md_labels(out, d, n);
    fputs(" | ", out);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s`%s`", i ? ", " : "", d[i].field);
    fputs(" | ", out);
    md_cell(out, d->help, strlen(d->help));
    fputs(" |\n", out);
}

int fx_metrics_print_markdown(FILE *out)
{
    fputs("| Metric | Type | Labels | C field | Help |\n", out);
    fputs("|---|---|---|---|---|\n", out);
    for (size_t i = 0; i < fx_metrics_ndescs;) {
        size_t n = 1;
        while (i + n < fx_metrics_ndescs &&
               strcmp(fx_metrics_descs[i + n].name, fx_metrics_descs[i].name) == 0)
            n++;
        md_row(out, &fx_metrics_descs[i], n);
        i += n;
    }
    for (size_t i = 0; i < FX_MSTREAM_N; i++) {
        fprintf(out,
                "| `%s` | gauge | `tenant`, `namespace`, `stream` (one series per durable "
                "stream, with `metrics_stream_labels: true` only) | - | ",
                fx_mstream_descs[i].name);
        md_cell(out, fx_mstream_descs[i].help, strlen(fx_mstream_descs[i].help));
        fputs(" |\n", out);
    }
    for (size_t i = 0; i < FX_MGROUP_N; i++) {
        fprintf(out,
                "| `%s` | %s | `tenant`, `namespace`, `stream`, `group` (one series per "
                "consumer group, with `metrics_stream_labels: true` only) | - | ",
                fx_mgroup_descs[i].name, type_name(fx_mgroup_descs[i].type));
        md_cell(out, fx_mgroup_descs[i].help, strlen(fx_mgroup_descs[i].help));
        fputs(" |\n", out);
    }
    for (size_t i = 0; i < FX_MTENANT_N; i++) {
        fprintf(out,
                "| `%s` | %s | `tenant` (one series per tenant that used a cache, with "
                "`metrics_stream_labels: true` only) | - | ",
                fx_mtenant_descs[i].name, type_name(fx_mtenant_descs[i].type));
        md_cell(out, fx_mtenant_descs[i].help, strlen(fx_mtenant_descs[i].help));
        fputs(" |\n", out);
    }
    return ferror(out) ? -EIO : 0;
}
