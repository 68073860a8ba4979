/* Process-wide metrics registry: counters, gauges and log-scale histograms
 * declared in metrics_defs.h, rendered in the Prometheus text format 0.0.4.
 * Counters and histograms are kept per thread (one cell each): each thread lazily gets its
 * own cell (so a loop's cell is written by that loop only) and increments it
 * with relaxed atomics; a scrape sums the cells. Gauges are one atomic each.
 * Any thread may update any metric; rendering runs on any thread (main).
 * Labels: a metric may carry one fixed "key=value" label given in its list
 * entry. Per-stream gauges (FX_METRICS_STREAMS) carry tenant, namespace and
 * stream labels whose values come from registered sources at scrape time. */
#ifndef FX_METRICS_H
#define FX_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/metrics_defs.h"

/* ---- value structs, generated from metrics_defs.h ----------------------- */

/* Finite buckets per histogram; one more bucket counts values above the last
 * bound (le="+Inf"). */
#define FX_HIST_NBUCKETS 24

/* One histogram's per-cell state. |buckets[i]| counts observations v with
 * 2^(lo+i-1) < v <= 2^(lo+i) (bucket 0 also takes everything <= 2^lo), and
 * |buckets[FX_HIST_NBUCKETS]| those above 2^(lo+FX_HIST_NBUCKETS-1). Counts
 * are per bucket, not cumulative; the count of observations is their sum. */
typedef struct fx_hist {
    _Atomic uint64_t buckets[FX_HIST_NBUCKETS + 1];
    _Atomic uint64_t sum;
} fx_hist;

#define FX_METRICS_NONE_(...)
#define FX_METRICS_CFIELD_(field, name, label, help) _Atomic uint64_t field;
#define FX_METRICS_GFIELD_(field, name, label, help) _Atomic int64_t field;
#define FX_METRICS_HFIELD_(field, name, label, help, lo) fx_hist field;
#define FX_METRICS_HLO_(field, name, label, help, lo) fx_hist_lo_##field = (lo),

/* Every counter, one field per C() entry. */
typedef struct fx_metrics_counters {
    FX_METRICS_ALL(FX_METRICS_CFIELD_, FX_METRICS_NONE_, FX_METRICS_NONE_)
} fx_metrics_counters;

/* Every gauge, one field per G() entry. */
typedef struct fx_metrics_gauges {
    FX_METRICS_ALL(FX_METRICS_NONE_, FX_METRICS_GFIELD_, FX_METRICS_NONE_)
} fx_metrics_gauges;

/* Every histogram, one field per H() entry. */
typedef struct fx_metrics_hists {
    FX_METRICS_ALL(FX_METRICS_NONE_, FX_METRICS_NONE_, FX_METRICS_HFIELD_)
} fx_metrics_hists;

/* fx_hist_lo_<field>: the |lo| exponent of each histogram. */
enum { FX_METRICS_ALL(FX_METRICS_NONE_, FX_METRICS_NONE_, FX_METRICS_HLO_) };

/* One thread's counters and histograms. */
typedef struct fx_metrics_cell {
    fx_metrics_counters c;
    fx_metrics_hists h;
} fx_metrics_cell;

/* A summed, private copy of the whole registry. Its fields are read like the
 * live ones (snap.c.ingress_dropped); nothing else writes them. */
typedef struct fx_metrics_snapshot {
    fx_metrics_counters c;
    fx_metrics_gauges g;
    fx_metrics_hists h;
} fx_metrics_snapshot;

/* ---- descriptors -------------------------------------------------------- */

typedef enum fx_metric_type {
    FX_METRIC_COUNTER,
    FX_METRIC_GAUGE,
    FX_METRIC_HISTOGRAM,
} fx_metric_type;

/* Describes one exported series. |off| is the field's offset in
 * fx_metrics_counters, fx_metrics_gauges or fx_metrics_hists (by |type|).
 * |label| is "" or "key=value". |lo| is used by histograms only. */
typedef struct fx_metric_desc {
    fx_metric_type type;
    const char *field;
    const char *name;
    const char *label;
    const char *help;
    size_t off;
    unsigned lo;
} fx_metric_desc;

/* Every series of metrics_defs.h, in list order. */
extern const fx_metric_desc fx_metrics_descs[];
extern const size_t fx_metrics_ndescs;

/* ---- updating ----------------------------------------------------------- */

/* The gauges. Update them with the FX_GAUGE_* macros. */
extern fx_metrics_gauges fx_gauges;

/* Private: the calling thread's cell, NULL until its first update. */
extern _Thread_local fx_metrics_cell *fx_metrics_tls_cell;

/* Returns the calling thread's cell, creating or reusing one on first use.
 * Never returns NULL: if memory runs out, the thread shares a static fallback
 * cell (still correct, as every update is an atomic add). When the thread
 * exits its cell is parked, values kept, for the next new thread to reuse, so
 * cells never outnumber threads alive at once. Any thread. */
fx_metrics_cell *fx_metrics_cell_attach(void);

static inline fx_metrics_cell *fx_metrics_cell_self(void)
{
    fx_metrics_cell *s = fx_metrics_tls_cell;
    return s ? s : fx_metrics_cell_attach();
}

/* Adds |v| to histogram |h| whose smallest bound is 2^|lo|. Any thread, but
 * |h| should be in the caller's own cell (FX_HIST_OBSERVE does that). */
void fx_hist_observe(fx_hist *h, unsigned lo, uint64_t v);

/* Adds |n| observations of the same value |v| to |h| at the cost of one. Any
 * thread, as fx_hist_observe(). */
void fx_hist_observe_n(fx_hist *h, unsigned lo, uint64_t v, uint64_t n);

/* Returns the bucket index (0..FX_HIST_NBUCKETS) value |v| falls in. */
unsigned fx_hist_bucket_index(unsigned lo, uint64_t v);

/* A histogram's fixed bucket bounds (an H() |lo| of FX_HIST_FIXED_*):
 * |n| finite bounds, ascending, in the unit observed; |le| the same bounds
 * as exported (|per_unit| observed units make one exported unit, so the
 * sum is exported divided by it). Bucket |n| counts values above the last
 * bound (le="+Inf"). */
typedef struct fx_hist_fixed {
    unsigned n;
    const uint64_t *bounds;
    const char *const *le;
    uint64_t per_unit;
} fx_hist_fixed;

/* The fixed bounds |lo| names, or NULL for a power-of-two histogram. */
const fx_hist_fixed *fx_hist_fixed_of(unsigned lo);

/* Counter updates on the calling thread's cell. |field| names a C() entry. */
#define FX_COUNTER_ADD(field, n)                                                                   \
    ((void)atomic_fetch_add_explicit(&fx_metrics_cell_self()->c.field, (uint64_t)(n),              \
                                     memory_order_relaxed))
#define FX_COUNTER_INC(field) FX_COUNTER_ADD(field, 1)

/* Gauge updates. |field| names a G() entry. */
#define FX_GAUGE_ADD(field, n)                                                                     \
    ((void)atomic_fetch_add_explicit(&fx_gauges.field, (int64_t)(n), memory_order_relaxed))
#define FX_GAUGE_SUB(field, n)                                                                     \
    ((void)atomic_fetch_sub_explicit(&fx_gauges.field, (int64_t)(n), memory_order_relaxed))
#define FX_GAUGE_SET(field, v)                                                                     \
    atomic_store_explicit(&fx_gauges.field, (int64_t)(v), memory_order_relaxed)

/* Records |v| in histogram |field| (an H() entry) on the calling thread's cell. */
#define FX_HIST_OBSERVE(field, v)                                                                  \
    fx_hist_observe(&fx_metrics_cell_self()->h.field, fx_hist_lo_##field, (uint64_t)(v))

/* Adds |n| observations to bucket |i| of histogram |field| and |sum| to its
 * sum, for a caller that bucketed them already with the same bounds (a
 * consumer group engine's lateness buckets, FX_HIST_FIXED_LATENESS). */
#define FX_HIST_ADD_BUCKET(field, i, n)                                                            \
    ((void)atomic_fetch_add_explicit(&fx_metrics_cell_self()->h.field.buckets[(i)], (uint64_t)(n), \
                                     memory_order_relaxed))
#define FX_HIST_ADD_SUM(field, v)                                                                  \
    ((void)atomic_fetch_add_explicit(&fx_metrics_cell_self()->h.field.sum, (uint64_t)(v),          \
                                     memory_order_relaxed))

/* Records |n| observations of |v| in histogram |field|. */
#define FX_HIST_OBSERVE_N(field, v, n)                                                             \
    fx_hist_observe_n(&fx_metrics_cell_self()->h.field, fx_hist_lo_##field, (uint64_t)(v),         \
                      (uint64_t)(n))

/* ---- per-stream series ---------------------------------------------------- */

#define FX_MSTREAM_ENUM_(id, name, help) id,
typedef enum fx_mstream_id { FX_METRICS_STREAMS(FX_MSTREAM_ENUM_) FX_MSTREAM_N } fx_mstream_id;

/* Name and help of each per-stream gauge, by fx_mstream_id. */
typedef struct fx_mstream_desc {
    const char *name;
    const char *help;
} fx_mstream_desc;
extern const fx_mstream_desc fx_mstream_descs[FX_MSTREAM_N];

/* One stream's values of every per-stream gauge. */
typedef struct fx_mstream_row {
    const char *tenant;
    const char *ns;
    const char *stream;
    int64_t v[FX_MSTREAM_N];
} fx_mstream_row;

/* Called by a source once per stream it shows; |sink| is the scrape's. */
typedef void (*fx_mstream_emit_fn)(void *sink, const fx_mstream_row *row);

/* A source of per-stream series, embedded in (and owned by) its provider.
 * |on_collect| calls |emit| for each of its streams, synchronously (it may
 * hold its own lock meanwhile; it must not add or remove sources). */
typedef struct fx_mstream_source {
    void (*on_collect)(void *user, fx_mstream_emit_fn emit, void *sink);
    void *user;
    struct fx_mstream_source *next; /* private */
} fx_mstream_source;

/* Adds |s| to the sources fx_metrics_render() asks at every scrape. Any
 * thread. */
void fx_metrics_stream_source_add(fx_mstream_source *s);

/* Removes |s| (not added: nothing); once it returns, no scrape calls |s|
 * any more. Any thread but inside |s|'s own callback. */
void fx_metrics_stream_source_remove(fx_mstream_source *s);

/* ---- per-group series ----------------------------------------------------- */

#define FX_MGROUP_ENUM_(id, name, type, help) id,
typedef enum fx_mgroup_id { FX_METRICS_GROUPS(FX_MGROUP_ENUM_) FX_MGROUP_N } fx_mgroup_id;

/* Name, type and help of each per-group series, by fx_mgroup_id. */
typedef struct fx_mgroup_desc {
    const char *name;
    fx_metric_type type;
    const char *help;
} fx_mgroup_desc;
extern const fx_mgroup_desc fx_mgroup_descs[FX_MGROUP_N];

/* One consumer group's values of every per-group series. */
typedef struct fx_mgroup_row {
    const char *tenant;
    const char *ns;
    const char *stream;
    const char *group;
    int64_t v[FX_MGROUP_N];
} fx_mgroup_row;

typedef void (*fx_mgroup_emit_fn)(void *sink, const fx_mgroup_row *row);

/* A source of per-group series, embedded in (and owned by) its provider;
 * as fx_mstream_source: |on_collect| calls |emit| for each of its groups,
 * synchronously (it may hold its own lock meanwhile; it must not add or
 * remove sources). */
typedef struct fx_mgroup_source {
    void (*on_collect)(void *user, fx_mgroup_emit_fn emit, void *sink);
    void *user;
    struct fx_mgroup_source *next; /* private */
} fx_mgroup_source;

/* Adds |s| to the sources fx_metrics_render() asks at every scrape with
 * |per_stream|. Any thread. */
void fx_metrics_group_source_add(fx_mgroup_source *s);
/* Removes |s| (not added: nothing); once it returns, no scrape calls |s|
 * any more. Any thread but inside |s|'s own callback. */
void fx_metrics_group_source_remove(fx_mgroup_source *s);

/* ---- per-tenant series ----------------------------------------------------- */

#define FX_MTENANT_ENUM_(id, name, type, help) id,
typedef enum fx_mtenant_id { FX_METRICS_TENANTS(FX_MTENANT_ENUM_) FX_MTENANT_N } fx_mtenant_id;

/* Name, type and help of each per-tenant series, by fx_mtenant_id. */
typedef struct fx_mtenant_desc {
    const char *name;
    fx_metric_type type;
    const char *help;
} fx_mtenant_desc;
extern const fx_mtenant_desc fx_mtenant_descs[FX_MTENANT_N];

/* One tenant's values of every per-tenant series. */
typedef struct fx_mtenant_row {
    const char *tenant;
    int64_t v[FX_MTENANT_N];
} fx_mtenant_row;

typedef void (*fx_mtenant_emit_fn)(void *sink, const fx_mtenant_row *row);

/* A source of per-tenant series, as fx_mgroup_source. */
typedef struct fx_mtenant_source {
    void (*on_collect)(void *user, fx_mtenant_emit_fn emit, void *sink);
    void *user;
    struct fx_mtenant_source *next; /* private */
} fx_mtenant_source;

/* Adds |s| to the sources fx_metrics_render() asks at every scrape with
 * |per_stream|. Any thread. */
void fx_metrics_tenant_source_add(fx_mtenant_source *s);
/* Removes |s| (not added: nothing); once it returns, no scrape calls |s|
 * any more. Any thread but inside |s|'s own callback. */
void fx_metrics_tenant_source_remove(fx_mtenant_source *s);

/* ---- reading and rendering ---------------------------------------------- */

/* Fills |snap| with the sum of every cell's counters and histograms and the
 * current gauges. Each value is read atomically, the set is not (a scrape
 * racing with updates may see some and not others). Any thread; takes the
 * cell-list mutex. */
void fx_metrics_snapshot_take(fx_metrics_snapshot *snap);

/* Renders descriptors |descs[0..n)| with values from |snap| in the Prometheus
 * text exposition format 0.0.4: for each metric name one "# HELP" and one
 * "# TYPE" line, then its samples; histograms as cumulative _bucket{le=...}
 * ending with le="+Inf", then _sum and _count. Help text and label values are
 * escaped. Series sharing a name must be adjacent in |descs|.
 * On success stores a malloc'd NUL-terminated string in |*pout| (the caller
 * frees it) and its length without the NUL in |*plen|, and returns 0.
 * Returns -ENOMEM (nothing stored) if memory runs out. Any thread. */
int fx_metrics_render_descs(const fx_metric_desc *descs, size_t n, const fx_metrics_snapshot *snap,
                            char **pout, size_t *plen);

/* Takes a snapshot and renders the whole registry (fx_metrics_descs) as
 * fx_metrics_render_descs() does, then every per-stream gauge and every
 * per-group series: HELP and TYPE always, and with |per_stream| one series
 * per stream (group) its sources emit (labelled with the stream's, and the
 * group's, names). Without |per_stream| the sources are not asked. Returns
 * 0 or -ENOMEM. Any thread. */
int fx_metrics_render(char **pout, size_t *plen, bool per_stream);

/* Returns how many cells exist (live and parked). For tests and the admin
 * endpoint. Any thread. */
size_t fx_metrics_cell_count(void);

/* Writes the reference table of docs/metrics.md as Markdown: one row per
 * exported metric name (series sharing a name are one row listing their label
 * values) with its type, labels, C field names and help text, in exposition
 * order. Generated from the registry, so the docs cannot drift (a test
 * compares them). Returns 0 or -EIO. Any thread. */
int fx_metrics_print_markdown(FILE *out);

#endif
