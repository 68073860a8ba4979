/* Durable caches (cache_dur.h, docs/cache.md "Durable caches"). The cache's
 * worker applies a write to its store, then sends the record here; the
 * worker's storage thread (the one of its durable streams) appends it to
 * the cache's log and, under on_commit, answers the write after the flush
 * that covers it (one flush for every record appended before it ran: group
 * commit). At start fxb_dcache_recover reads every log back into the
 * stores. Thread noted per function. */
#include "broker/cache_dur.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/cache_compact.h"
#include "broker/cache_srv.h"
#include "broker/cache_store.h"
#include "broker/durable_store.h"
#include "broker/worker.h"
#include "felix/error.h"
#include "storage/format.h"

/* ---- the record ------------------------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

size_t fxb_dcache_rec_encode(uint8_t *out, uint8_t op, uint64_t expires_ms, uint64_t version,
                             const void *key, uint32_t klen, const void *value, size_t vlen)
{
    out[0] = FXB_DCACHE_REC_VERSION;
    out[1] = op;
    put_le(out + 2, expires_ms, 8);
    put_le(out + 10, klen, 4);
    put_le(out + 14, version, 8);
    if (klen > 0)
        memcpy(out + FXB_DCACHE_REC_HEADER, key, klen);
    if (vlen > 0)
        memcpy(out + FXB_DCACHE_REC_HEADER + klen, value, vlen);
    return FXB_DCACHE_REC_HEADER + klen + vlen;
}

int fxb_dcache_rec_decode(const uint8_t *p, size_t n, fxb_dcache_rec *r)
{
    if (n < FXB_DCACHE_REC_HEADER_V1 || (p[0] != 1 && p[0] != 2) ||
        (p[1] != FXB_DCACHE_OP_PUT && p[1] != FXB_DCACHE_OP_DELETE))
        return -EINVAL;
    size_t hdr = p[0] == 2 ? FXB_DCACHE_REC_HEADER : FXB_DCACHE_REC_HEADER_V1;
    if (n < hdr)
        return -EINVAL;
    uint64_t klen = get_le(p + 10, 4);
    if (klen > n - hdr)
        return -EINVAL;
    r->format = p[0];
    r->op = p[1];
    r->expires_ms = get_le(p + 2, 8);
    r->version = p[0] == 2 ? get_le(p + 14, 8) : 0;
    r->key = p + hdr;
    r->klen = (uint32_t)klen;
    r->value = r->key + klen;
    r->vlen = n - hdr - (size_t)klen;
    return 0;
}

uint64_t fxb_dcache_wall_ms(void)
{
    return fxb_wall_us() / 1000u;
}

/* ---- the durable part of one cache ------------------------------------------------------ */

struct fxb_dcache_wr {
    fx_task task;
    fxb_dcache *dc;
    fxb_reply *r; /* on_commit: answered after the flush */
    fx_buf *f;    /* the answer */
    struct fxb_dcache_wr *next;
    size_t len;
    uint8_t rec[];
};

struct fxb_dcache {
    fxb_storage *st; /* its worker's storage thread, which owns what follows */
    fx_dlog *log;    /* NULL until the first write (or the start's rebuild), or after a failure */
    fxb_dcache_wr *whead, *wtail; /* appended, waiting for a flush (on_commit) */
    fx_task flush_task;           /* the flush after the records queued now */
    bool flush_queued;
    bool dropped;     /* on_drop ran: the queued flush task only frees it */
    fx_timer timer;   /* periodic: the flush one interval after an unflushed append */
    fxb_ccomp *comp;  /* the index of its log's newest records, and its compaction */
    fx_timer ctimer;  /* the next paced step of a compaction */
    fx_task ctask;    /* a check for a compaction after the start read the log back */
    bool comp_warned; /* a broken index was logged */
    uint64_t charged; /* its log's bytes on disk charged to durable_bytes_max's account */
    fx_task drop_task;
    char *damaged;                   /* quarantined at start: why (fxb_dcache_damaged) */
    char label[3 * 256 + 4];         /* "tenant/ns/cache" */
    const char *tenant, *ns, *cache; /* in |names| */
    char names[3 * 256 + 4];
    char dir[]; /* the log's directory */
};

static fx_ratelimit err_rl = FX_RATELIMIT_INIT;

static void on_flush(fx_loop *l, fx_task *t, void *user);
static void on_timer(fx_loop *l, fx_timer *t, void *user);
static void on_drop(fx_loop *l, fx_task *t, void *user);
static void on_compact(fx_loop *l, fx_timer *t, void *user);
static void on_check(fx_loop *l, fx_task *t, void *user);
static void charge_update(fxb_dcache *dc);

/* Writes "<root>/caches/<dir name>" into |out|; false when it does not fit. */
static bool dir_path(const char *root, const char *tenant, const char *ns, const char *cache,
                     char *out, size_t cap)
{
    char name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, tenant, ns, cache, 0);
    int n = snprintf(out, cap, "%s/caches/%s", root, name);
    return n > 0 && (size_t)n < cap;
}

fxb_dcache *fxb_dcache_new(fxb_worker *w, const char *tenant, const char *ns, const char *cache)
{
    fx_broker *b = w->b;
    if (b->dur == NULL || w->dur == NULL)
        return NULL;
    char dir[4096 + FX_LOGFMT_DIR_NAME_MAX + 16];
    if (!dir_path(b->dur->dir, tenant, ns, cache, dir, sizeof(dir)))
        return NULL;
    size_t n = strlen(dir) + 1;
    fxb_dcache *dc = calloc(1, sizeof(*dc) + n);
    if (dc == NULL)
        return NULL;
    memcpy(dc->dir, dir, n);
    snprintf(dc->label, sizeof(dc->label), "%s/%s/%s", tenant, ns, cache);
    size_t lt = strlen(tenant) + 1, ln = strlen(ns) + 1, lc = strlen(cache) + 1;
    if (lt + ln + lc > sizeof(dc->names)) {
        free(dc);
        return NULL;
    }
    dc->tenant = memcpy(dc->names, tenant, lt);
    dc->ns = memcpy(dc->names + lt, ns, ln);
    dc->cache = memcpy(dc->names + lt + ln, cache, lc);
    dc->st = w->dur->st;
    if (fxb_ccomp_new(&dc->comp) != 0) {
        free(dc);
        return NULL;
    }
    fx_task_init(&dc->flush_task, on_flush, dc);
    fx_task_init(&dc->ctask, on_check, dc);
    fx_timer_init(&dc->ctimer, on_compact, dc);
    fx_task_init(&dc->drop_task, on_drop, dc);
    fx_timer_init(&dc->timer, on_timer, dc);
    return dc;
}

bool fxb_dcache_waits(const fxb_dcache *dc)
{
    return dc->st->d->o.fsync_mode == FX_FSYNC_ON_COMMIT;
}

fxb_dcache_wr *fxb_dcache_wr_new(uint8_t op, uint64_t expires_ms, const void *key, size_t klen,
                                 const void *value, size_t vlen)
{
    if (klen > UINT32_MAX)
        return NULL;
    fxb_dcache_wr *wr = malloc(sizeof(*wr) + FXB_DCACHE_REC_HEADER + klen + vlen);
    if (wr == NULL)
        return NULL;
    memset(wr, 0, sizeof(*wr));
    wr->len = fxb_dcache_rec_encode(wr->rec, op, expires_ms, 0, key, (uint32_t)klen, value, vlen);
    return wr;
}

void fxb_dcache_wr_set(fxb_dcache_wr *wr, uint8_t op, uint64_t expires_ms, uint64_t version)
{
    uint8_t key_len[4];
    memcpy(key_len, wr->rec + 10, 4);
    uint32_t klen = (uint32_t)get_le(key_len, 4);
    wr->rec[1] = op;
    put_le(wr->rec + 2, expires_ms, 8);
    put_le(wr->rec + 14, version, 8);
    if (op == FXB_DCACHE_OP_DELETE)
        wr->len = FXB_DCACHE_REC_HEADER + klen; /* a delete carries no value */
}

void fxb_dcache_wr_free(fxb_dcache_wr *wr)
{
    free(wr);
}

#define NAMES_FILE "cache.json"

/* Makes directory |dir| of cache |tenant|/|ns|/|cache| with its names
 * file, if missing. 0 or -errno. */
static int ensure_dir(fx_sio *io, const char *dir, const char *tenant, const char *ns,
                      const char *cache)
{
    char file[4096 + FX_LOGFMT_DIR_NAME_MAX + 32];
    snprintf(file, sizeof(file), "%s/%s", dir, NAMES_FILE);
    bool is_dir;
    if (io->ops->stat(io, file, &is_dir) == 0)
        return 0;
    int rv = fx_sio_mkdirs(io, dir);
    if (rv != 0)
        return rv;
    json_t *j = json_pack("{s:s, s:s, s:s}", "tenant", tenant, "namespace", ns, "cache", cache);
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    rv = text != NULL ? fx_sio_write_file_atomic(io, file, text, strlen(text)) : -ENOMEM;
    free(text);
    return rv;
}

/* Opens the log of |dc| if it is not open. 0 or the failure (logged,
 * rate-limited). Storage thread (main thread at start). */
static int ensure_open(fxb_dcache *dc)
{
    if (dc->log != NULL)
        return 0;
    const fx_broker_durable_opts *o = &dc->st->d->o;
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    if (o->segment_bytes != 0)
        c.segment_bytes = o->segment_bytes;
    /* Compaction works in whole sealed segments: smaller ones keep a
     * cache's log near its live size (and reserve less when preallocated). */
    if (c.segment_bytes > FXB_DCACHE_SEGMENT_MAX)
        c.segment_bytes = FXB_DCACHE_SEGMENT_MAX;
    if (o->index_spacing_bytes != 0)
        c.index_spacing_bytes = o->index_spacing_bytes;
    c.preallocate = o->preallocate;
    c.verify_all_on_open = o->verify_all_on_open;
    c.repair_checksum_tail = o->repair_checksum_tail;
    c.repair = o->repair;
    c.label = dc->label;
    c.io = o->io;
    fx_sio *io = o->io != NULL ? o->io : fx_sio_posix();
    /* Its names too: a drop that raced a new declaration may have taken them. */
    int rv = ensure_dir(io, dc->dir, dc->tenant, dc->ns, dc->cache);
    fx_dlog_recovery rep = {0};
    if (rv == 0)
        rv = fx_dlog_open(&dc->log, dc->dir, &c, fxb_wall_us(), &rep);
    if (rv != 0) {
        dc->log = NULL;
        FX_COUNTER_INC(cache_durable_errors);
        FX_LOG_RATELIMITED(&err_rl, fx_now_ns(), FX_LOG_ERROR, "storage",
                           "cache %s: opening its log in %s failed: %s%s%s", dc->label, dc->dir,
                           fx_strerror(rv), rep.message[0] ? ": " : "", rep.message);
        return rv;
    }
    if (rep.message[0] != '\0')
        FX_LOG_WARN("storage", "cache %s: %s", dc->label, rep.message);
    charge_update(dc);
    return 0;
}

/* Brings what |dc| charges to the broker's durable bytes (durable_bytes_max,
 * the account durable streams charge) to its log's bytes on disk,
 * preallocation included. Storage thread (main thread at start and
 * teardown). */
static void charge_update(fxb_dcache *dc)
{
    uint64_t disk = dc->log != NULL ? fx_dlog_disk_bytes(dc->log) : 0;
    int64_t delta = (int64_t)(disk - dc->charged);
    atomic_fetch_add_explicit(&dc->st->d->bytes.bytes, delta, memory_order_relaxed);
    FX_GAUGE_ADD(storage_charged_bytes, delta);
    dc->charged = disk;
}

bool fxb_dcache_over_quota(const fxb_dcache *dc)
{
    const fx_retained *a = &dc->st->d->bytes;
    return a->limit != 0 &&
           atomic_load_explicit(&a->bytes, memory_order_relaxed) >= (int64_t)a->limit;
}

/* A write or flush of |dc|'s log failed with |rv|: counted, logged, and a
 * log left stopped is closed, so the next write reopens it (recovery then
 * reads what is really on disk). Storage thread. */
static void log_failed(fxb_dcache *dc, const char *what, int rv)
{
    FX_COUNTER_INC(cache_durable_errors);
    FX_LOG_RATELIMITED(&err_rl, fx_now_ns(), FX_LOG_ERROR, "storage", "cache %s: %s failed: %s",
                       dc->label, what, fx_strerror(rv));
    if (dc->log != NULL && fx_dlog_is_failed(dc->log)) {
        (void)fx_dlog_close(dc->log, false);
        dc->log = NULL;
        fxb_ccomp_disable(dc->comp); /* the reopened log may have lost what its index holds */
        charge_update(dc);
    }
}

/* Notes the record |p| (|n| bytes) at offset |off| of |dc|'s log in its
 * compaction index; without memory for it the log is no longer compacted
 * (logged once, counted). Storage thread (main thread at start). */
static void note(fxb_dcache *dc, uint64_t off, const uint8_t *p, size_t n)
{
    if (fxb_ccomp_note(dc->comp, off, p, n) != 0 && !dc->comp_warned) {
        dc->comp_warned = true;
        FX_COUNTER_INC(cache_durable_errors);
        FX_LOG_ERROR("storage",
                     "cache %s: no memory for its log's compaction index: the log is not "
                     "compacted until the next start",
                     dc->label);
    }
}

/* The bytes a second compaction may read (0: none). */
static uint64_t comp_rate(const fxb_dcache *dc)
{
    return dc->st->d->o.compaction_bytes_per_sec;
}

/* Begins a compaction of |dc|'s log if one is due (cache_compact.h says
 * when) and arms its first step. Storage thread. */
static void compact_check(fxb_dcache *dc, fx_loop *l)
{
    if (dc->log == NULL || comp_rate(dc) == 0 || fx_timer_is_armed(&dc->ctimer))
        return;
    if (!fxb_ccomp_running(dc->comp) && !fxb_ccomp_begin(dc->comp, dc->log))
        return;
    if (fx_loop_timer_arm(l, &dc->ctimer, fx_loop_now(l)) != 0)
        log_failed(dc, "arming a compaction step", -ENOMEM); /* tried again at the next write */
}

/* One paced step of a compaction: at most a quarter second's worth of
 * storage_compaction_bytes_per_sec (64 KiB to 1 MiB), the next one armed
 * as long after as the bytes read take at that rate. Storage thread. */
static void on_compact(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_dcache *dc = user;
    uint64_t rate = comp_rate(dc);
    if (dc->log == NULL || rate == 0)
        return;
    uint64_t budget = rate / 4;
    budget = budget < (64u << 10) ? (64u << 10) : budget > (1u << 20) ? (1u << 20) : budget;
    fxb_ccomp_stats a, b;
    fxb_ccomp_stats_get(dc->comp, &a);
    uint64_t before = fx_dlog_bytes_on_disk(dc->log);
    size_t read = 0;
    int rv = fxb_ccomp_step(dc->comp, dc->log, fxb_dcache_wall_ms(), fxb_wall_us(), budget, &read);
    fxb_ccomp_stats_get(dc->comp, &b);
    FX_COUNTER_ADD(cache_durable_compaction_copied, b.copied - a.copied);
    FX_COUNTER_ADD(cache_durable_compaction_reclaimed, b.reclaimed - a.reclaimed);
    FX_COUNTER_ADD(cache_durable_compactions, b.runs - a.runs);
    if (rv != 0)
        log_failed(dc, "a compaction", rv); /* abandoned: its copies are duplicates, harmless */
    if (dc->log == NULL)
        return;
    charge_update(dc); /* the copies added bytes, the deleted segments gave some back */
    if (b.runs != a.runs)
        FX_LOG_INFO("storage",
                    "cache %s: compaction done: its log holds %" PRIu64 " bytes (%" PRIu64
                    " live) after %" PRIu64 " before its last segment went",
                    dc->label, fx_dlog_bytes_on_disk(dc->log), fxb_ccomp_live_bytes(dc->comp),
                    before);
    if (!fxb_ccomp_running(dc->comp)) {
        compact_check(dc, l);
        return;
    }
    uint64_t wait = (uint64_t)read * 1000000000u / rate;
    if (fx_loop_timer_arm(l, &dc->ctimer, fx_loop_now(l) + wait) != 0)
        log_failed(dc, "arming a compaction step", -ENOMEM); /* resumed by the next write */
}

/* After the start read the log back: a compaction may be due already. */
static void on_check(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    compact_check(user, l);
}

/* Completes |r| with |f| and has its connection loop send it, dropping
 * the worker's reference (as cache_srv.c's complete). Any thread. */
static void reply_finish(fxb_reply *r, fx_buf *f)
{
    fxb_reply_complete_frame(r, f);
    if (!fx_loop_post(r->loop, &r->task))
        fxb_reply_unref(r);
}

/* Answers |wr| with its answer (|rv| 0) or an error naming |rv|, and frees
 * it. Storage thread. */
static void wr_answer(fxb_dcache_wr *wr, int rv)
{
    if (wr->r != NULL) {
        fx_buf *f = wr->f;
        if (rv != 0) {
            fx_buf_unref(f);
            char text[160];
            snprintf(text, sizeof(text), "cache write failed: storage error (%s)", fx_strerror(rv));
            fx_msg m;
            fx_msg_init_error(&m, text);
            if (fxb_msg_frame(&m, &f) != 0)
                f = NULL; /* the stream is reset when the slot reaches the head */
        }
        reply_finish(wr->r, f);
    }
    free(wr);
}

/* Takes the record |user| (an fxb_dcache_wr) for the log. Storage thread. */
static void on_write(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_dcache_wr *wr = user;
    fxb_dcache *dc = wr->dc;
    int rv = ensure_open(dc);
    if (rv == 0) {
        fx_dlog_iov iov = {wr->rec, (uint32_t)wr->len};
        uint64_t off = 0;
        rv = fx_dlog_append(dc->log, &iov, 1, fxb_wall_us(), &off);
        if (rv != 0)
            log_failed(dc, "an append", rv);
        else
            note(dc, off, wr->rec, wr->len);
    }
    if (rv != 0) {
        wr_answer(wr, rv); /* a periodic / none write was answered already: only counted */
        return;
    }
    FX_COUNTER_INC(cache_durable_records);
    charge_update(dc);
    compact_check(dc, l);
    if (wr->r != NULL) {
        wr->next = NULL;
        if (dc->wtail != NULL)
            dc->wtail->next = wr;
        else
            dc->whead = wr;
        dc->wtail = wr;
        if (!dc->flush_queued) {
            dc->flush_queued = true;
            (void)fx_loop_post(l, &dc->flush_task); /* behind the records queued now */
        }
        return;
    }
    free(wr);
    const fx_broker_durable_opts *o = &dc->st->d->o;
    if (o->fsync_mode == FX_FSYNC_PERIODIC && !fx_timer_is_armed(&dc->timer) &&
        fx_loop_timer_arm(l, &dc->timer, fx_loop_now(l) + o->fsync_interval_ns) != 0)
        log_failed(dc, "arming the periodic flush", -ENOMEM); /* flushed by the next write's arm */
}

/* Flushes the log and answers every write that waits. Storage thread. */
static void flush_now(fxb_dcache *dc)
{
    if (dc->log == NULL && dc->whead == NULL)
        return; /* nothing written since the last failure, nothing waits */
    int rv = dc->log != NULL ? fx_dlog_sync(dc->log, NULL) : FX_ESTORAGE_FAILED;
    if (rv != 0)
        log_failed(dc, "a flush", rv);
    fxb_dcache_wr *wr = dc->whead;
    dc->whead = dc->wtail = NULL;
    while (wr != NULL) {
        fxb_dcache_wr *next = wr->next;
        wr_answer(wr, rv);
        wr = next;
    }
}

static void on_flush(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    fxb_dcache *dc = user;
    dc->flush_queued = false;
    if (dc->dropped) {
        free(dc); /* on_drop did the rest and left the free to this queued task */
        return;
    }
    flush_now(dc);
}

static void on_timer(fx_loop *l, fx_timer *t, void *user)
{
    (void)l, (void)t;
    fxb_dcache *dc = user;
    if (dc->log != NULL && fx_dlog_unsynced_bytes(dc->log) > 0) {
        int rv = fx_dlog_sync(dc->log, NULL);
        if (rv != 0)
            log_failed(dc, "a periodic flush", rv);
    }
}

void fxb_dcache_write(fxb_dcache *dc, fxb_dcache_wr *wr, fxb_reply *r, fx_buf *f)
{
    wr->dc = dc;
    wr->r = r;
    wr->f = f;
    fx_task_init(&wr->task, on_write, wr);
    (void)fx_loop_post(dc->st->loop, &wr->task); /* a new task: never pending already */
}

/* Frees dropped |dc| now, or leaves that to its queued flush task. */
static void drop_free(fxb_dcache *dc)
{
    if (dc->flush_queued)
        dc->dropped = true;
    else
        free(dc);
}

static void on_drop(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_dcache *dc = user;
    /* Everything is done now, so the drop's bytes are given back and its
     * directory gone before anything posted after it runs (a new declaration
     * of the same cache, a caller waiting on this loop). A write that ran
     * before this may have queued its flush behind it: that flush is done
     * here, and the queued task only frees |dc|. */
    flush_now(dc);
    fx_loop_timer_cancel(l, &dc->timer);
    fx_loop_timer_cancel(l, &dc->ctimer);
    if (dc->log != NULL)
        (void)fx_dlog_close(dc->log, false);
    dc->log = NULL;
    charge_update(dc); /* gives its bytes back */
    const fx_broker_durable_opts *o = &dc->st->d->o;
    fx_sio *io = o->io != NULL ? o->io : fx_sio_posix();
    bool is_dir = false;
    if (io->ops->stat(io, dc->dir, &is_dir) != 0) {
        fxb_ccomp_free(dc->comp);
        dc->comp = NULL;
        drop_free(dc); /* an in-memory cache, or one never written: nothing on disk */
        return;
    }
    int rv = fx_sio_remove_dir(io, dc->dir);
    if (rv != 0) {
        FX_COUNTER_INC(cache_durable_errors);
        FX_LOG_ERROR("storage",
                     "cache %s was dropped but its log directory %s could not be removed (%s): "
                     "it comes back at the next start unless removed",
                     dc->label, dc->dir, fx_strerror(rv));
    } else {
        FX_LOG_INFO("storage", "cache %s dropped: its log %s removed", dc->label, dc->dir);
    }
    fxb_ccomp_free(dc->comp);
    dc->comp = NULL;
    drop_free(dc);
}

void fxb_dcache_drop(fxb_dcache *dc)
{
    (void)fx_loop_post(dc->st->loop, &dc->drop_task);
}

void fxb_dcache_close(fxb_dcache *dc)
{
    if (dc == NULL)
        return;
    fx_loop_timer_cancel(dc->st->loop, &dc->timer); /* the loop is stopped: allowed */
    fx_loop_timer_cancel(dc->st->loop, &dc->ctimer);
    if (dc->log != NULL) {
        int rv = fx_dlog_close(dc->log, true);
        if (rv != 0) {
            FX_COUNTER_INC(cache_durable_errors);
            FX_LOG_ERROR("storage", "cache %s: the flush at close failed: %s", dc->label,
                         fx_strerror(rv));
        }
    }
    dc->log = NULL;
    charge_update(dc);
    /* Writes whose flush never ran (the loops stopped): their connections
     * are gone; drop the answers. */
    for (fxb_dcache_wr *wr = dc->whead, *next; wr != NULL; wr = next) {
        next = wr->next;
        fx_buf_unref(wr->f);
        fxb_reply_unref(wr->r);
        free(wr);
    }
    dc->whead = dc->wtail = NULL;
}

void fxb_dcache_free(fxb_dcache *dc)
{
    if (dc != NULL && dc->log != NULL)
        (void)fx_dlog_close(dc->log, true); /* not closed first (a failed start): flushed here */
    if (dc != NULL) {
        free(dc->damaged);
        fxb_ccomp_free(dc->comp);
    }
    free(dc);
}

const char *fxb_dcache_damaged(const fxb_dcache *dc)
{
    return dc != NULL ? dc->damaged : NULL;
}

/* The log of |dc| (cache |scope| on |w|) could not be opened or read back at
 * start (|why|): one damaged cache does not stop the broker. The cache is
 * quarantined: its log closed and left as it is, every request to it
 * answered with the reason, counted. 0, or -ENOMEM (the start then fails). */
static int quarantine(fxb_worker *w, uint32_t scope, fxb_dcache *dc, const char *why)
{
    if (dc->log != NULL) {
        (void)fx_dlog_close(dc->log, false);
        dc->log = NULL;
    }
    if ((dc->damaged = strdup(why)) == NULL)
        return -ENOMEM;
    int rv = fxb_cache_worker_set_durable(w, scope, dc);
    if (rv != 0)
        return rv;
    FX_COUNTER_INC(cache_durable_errors);
    FX_LOG_ERROR("storage", "%s; the cache is quarantined (its requests are refused), the rest "
                 "of the broker is served: repair it with felix log repair on a stopped broker",
                 why);
    return 0;
}

/* ---- directories and the start ---------------------------------------------------------- */

int fxb_dcache_make_dir(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                        char *why, size_t n)
{
    fxb_durable *d = b->dur;
    fx_sio *io = d->o.io != NULL ? d->o.io : fx_sio_posix();
    char dir[4096 + FX_LOGFMT_DIR_NAME_MAX + 16];
    if (!dir_path(d->dir, tenant, ns, cache, dir, sizeof(dir))) {
        snprintf(why, n, "the cache's log directory name is too long");
        return -ENAMETOOLONG;
    }
    /* A drop of the same cache just answered may still be removing the
     * directory on its storage thread: what it removed under us is made
     * again (a few tries: it removes once). */
    int rv = ensure_dir(io, dir, tenant, ns, cache);
    for (int i = 0; rv == -ENOENT && i < 3; i++)
        rv = ensure_dir(io, dir, tenant, ns, cache);
    if (rv != 0) {
        FX_COUNTER_INC(cache_durable_errors);
        snprintf(why, n, "cannot make the cache's log directory %s: %s", dir, fx_strerror(rv));
    }
    return rv;
}

static void report(fx_broker *b, const char *why)
{
    FX_LOG_ERROR("storage", "%s", why);
    if (b->o.durable.error != NULL && b->o.durable.error_len > 0)
        snprintf(b->o.durable.error, b->o.durable.error_len, "%s", why);
}

/* Applies record |r| to cache |scope| of |st| at wall time |wall_ms| and
 * monotonic |now_us|, a put keeping the version its record carries (a
 * version 1 record's put gets one at the end of the rebuild). Counts into
 * |*pskipped| a put already expired. */
static void apply(fxb_cache_store *st, uint32_t scope, const fxb_dcache_rec *r, uint64_t wall_ms,
                  uint64_t now_us, uint64_t *pskipped, uint64_t *prefused)
{
    if (r->op == FXB_DCACHE_OP_PUT && (r->expires_ms == 0 || r->expires_ms > wall_ms)) {
        fxb_cache_put_opts po = {.ttl_ms = r->expires_ms != 0 ? r->expires_ms - wall_ms : 0,
                                 .restore = true,
                                 .restore_version = r->version};
        int rv = fxb_cache_put(st, scope, r->key, r->klen, r->value, r->vlen, &po, now_us, NULL);
        if (rv != FXB_CACHE_OK)
            (*prefused)++; /* counted by reason in the store's refusals */
        return;
    }
    if (r->op == FXB_DCACHE_OP_PUT)
        (*pskipped)++; /* expired by the wall clock: the key reads absent, as it would have */
    (void)fxb_cache_delete(st, scope, r->key, r->klen, now_us);
}

/* Rebuilds the cache whose directory is |name| under <root>/caches. */
static int rebuild_one(fx_broker *b, const char *name)
{
    fxb_durable *d = b->dur;
    fx_sio *io = d->o.io != NULL ? d->o.io : fx_sio_posix();
    char file[4096 + 2 * FX_LOGFMT_DIR_NAME_MAX + 32], why[12288];
    snprintf(file, sizeof(file), "%s/caches/%s/%s", d->dir, name, NAMES_FILE);
    char *text = NULL;
    size_t len = 0;
    int rv = fx_sio_read_file(io, file, 4096, &text, &len);
    json_t *j = rv == 0 ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    const char *t = NULL, *ns = NULL, *c = NULL;
    if (j == NULL ||
        json_unpack(j, "{s:s, s:s, s:s}", "tenant", &t, "namespace", &ns, "cache", &c) != 0) {
        /* Not a cache's directory (or one whose names were never written:
         * a crash while it was made): left as it is, not served. */
        FX_COUNTER_INC(cache_durable_errors);
        FX_LOG_ERROR("storage",
                     "durable cache directory %s/caches/%s skipped: its %s is %s (restore it, or "
                     "remove the directory)",
                     d->dir, name, NAMES_FILE,
                     rv != 0 ? fx_strerror(rv) : "not {tenant, namespace, cache}");
        json_decref(j);
        return 0;
    }
    fx_registry_err err = {0};
    rv = fxb_cache_declare(b, t, ns, c, 1, NULL, NULL, &err);
    fxb_worker *w = rv == 0 ? fxb_cache_worker_of(b, t, ns, c) : NULL;
    fxb_cache_tenant *acct = w != NULL ? fxb_cache_tenant_acct(b, t) : NULL;
    fxb_cache_store *st = w != NULL ? fxb_cache_worker_store(w) : NULL;
    uint32_t scope = 0;
    if (rv == 0 && (acct == NULL || st == NULL))
        rv = -ENOMEM;
    if (rv == 0)
        rv = fxb_cache_scope_open(st, t, ns, c, acct, &scope);
    fxb_dcache *dc = rv == 0 ? fxb_dcache_new(w, t, ns, c) : NULL;
    if (rv == 0 && dc == NULL)
        rv = -ENOMEM;
    if (rv == 0 && (rv = ensure_open(dc)) != 0 && rv != -ENOMEM) {
        snprintf(why, sizeof(why),
                 "durable cache %s/%s/%s (%s/caches/%s): opening its log failed: %s", t, ns, c,
                 d->dir, name, fx_strerror(rv));
        rv = quarantine(w, scope, dc, why);
        if (rv != 0)
            fxb_dcache_free(dc);
        json_decref(j);
        return rv;
    }
    if (rv != 0) {
        snprintf(why, sizeof(why), "durable cache %s/%s/%s (%s/caches/%s): %s", t, ns, c, d->dir,
                 name, err.msg[0] ? err.msg : fx_strerror(rv));
        fxb_dcache_free(dc);
        json_decref(j);
        report(b, why);
        return rv;
    }
    uint64_t wall_ms = fxb_dcache_wall_ms(), now_us = fx_now_ns() / 1000;
    uint64_t nrec = 0, skipped = 0, refused = 0, bad = 0;
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    for (uint64_t from = fx_dlog_first_offset(dc->log);;) {
        rv = fx_dlog_read(dc->log, from, 1u << 20, 1024, &pg);
        if (rv != 0 || pg.n == 0)
            break;
        for (size_t i = 0; i < pg.n; i++) {
            fxb_dcache_rec r;
            if (fxb_dcache_rec_decode(pg.recs[i].data, pg.recs[i].len, &r) != 0) {
                bad++; /* not a cache record: skipped (counted, logged below) */
                continue;
            }
            apply(st, scope, &r, wall_ms, now_us, &skipped, &refused);
            note(dc, pg.recs[i].offset, pg.recs[i].data, pg.recs[i].len);
        }
        nrec += pg.n;
        from = pg.next;
    }
    fx_dlog_page_deinit(&pg);
    if (rv != 0 && rv != -ENOMEM) {
        snprintf(why, sizeof(why), "durable cache %s/%s/%s: reading its log back failed: %s%s%s", t,
                 ns, c, fx_strerror(rv), fx_dlog_last_error(dc->log)[0] ? ": " : "",
                 fx_dlog_last_error(dc->log));
        /* What was read before the damage is not served. */
        (void)fxb_cache_scope_clear(st, scope);
        rv = quarantine(w, scope, dc, why);
        if (rv != 0)
            fxb_dcache_free(dc);
        json_decref(j);
        return rv;
    }
    if (rv != 0) {
        snprintf(why, sizeof(why), "durable cache %s/%s/%s: reading its log back failed: %s", t, ns,
                 c, fx_strerror(rv));
        fxb_dcache_close(dc);
        fxb_dcache_free(dc);
        json_decref(j);
        report(b, why);
        return rv;
    }
    FX_COUNTER_ADD(cache_durable_rebuilt, nrec);
    /* Versions go on past the largest the log holds (a delete's record
     * carries the cache's last): none is given twice across a restart. */
    uint64_t numbered = fxb_cache_scope_restore_done(st, scope, fxb_ccomp_max_version(dc->comp));
    if (bad > 0) {
        FX_COUNTER_ADD(cache_durable_errors, bad);
        FX_LOG_ERROR("storage",
                     "durable cache %s/%s/%s: %" PRIu64 " records are not cache records "
                     "(version 1 or 2): skipped",
                     t, ns, c, bad);
    }
    uint64_t entries = 0, bytes = 0;
    fxb_cache_scope_usage(st, scope, &entries, &bytes);
    FX_LOG_INFO("storage",
                "durable cache %s/%s/%s: %" PRIu64 " records read back, %" PRIu64
                " entries live (%" PRIu64 " bytes), %" PRIu64 " expired puts skipped, %" PRIu64
                " refused by a bound, %" PRIu64 " given new versions (version 1 records), "
                "versions go on from %" PRIu64,
                t, ns, c, nrec, entries, bytes, skipped, refused, numbered,
                fxb_cache_scope_version(st, scope));
    rv = fxb_cache_worker_set_durable(w, scope, dc);
    if (rv == 0)
        (void)fx_loop_post(dc->st->loop, &dc->ctask); /* a new task: never pending already */
    if (rv != 0) {
        fxb_dcache_close(dc);
        fxb_dcache_free(dc);
        snprintf(why, sizeof(why), "durable cache %s/%s/%s: %s", t, ns, c, fx_strerror(rv));
        report(b, why);
    }
    json_decref(j);
    return rv;
}

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int list_cb(void *user, const char *name, bool is_dir)
{
    names *l = user;
    if (!is_dir)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(name)) == NULL)
        return -ENOMEM;
    l->n++;
    return 0;
}

/* The caches the configuration declared durable: their directories. */
typedef struct mk_arg {
    fx_broker *b;
    int rv;
    char why[1024];
} mk_arg;

static void make_declared(const char *tenant, const char *ns, const char *cache, bool durable,
                          void *arg)
{
    mk_arg *a = arg;
    if (durable && a->rv == 0)
        a->rv = fxb_dcache_make_dir(a->b, tenant, ns, cache, a->why, sizeof(a->why));
}

int fxb_dcache_recover(fx_broker *b)
{
    fxb_durable *d = b->dur;
    if (d == NULL || b->caches == NULL)
        return 0;
    fx_sio *io = d->o.io != NULL ? d->o.io : fx_sio_posix();
    char dir[4096 + 16], why[12288];
    snprintf(dir, sizeof(dir), "%s/caches", d->dir);
    int rv = fx_sio_mkdirs(io, dir);
    mk_arg mk = {.b = b};
    if (rv == 0) {
        fxb_cache_declared_foreach(b, make_declared, &mk);
        rv = mk.rv;
    }
    names l = {0};
    if (rv == 0)
        rv = io->ops->list(io, dir, list_cb, &l);
    if (rv != 0) {
        snprintf(why, sizeof(why), "durable caches in %s: %s", dir,
                 mk.why[0] ? mk.why : fx_strerror(rv));
        report(b, why);
    }
    for (size_t i = 0; rv == 0 && i < l.n; i++)
        rv = rebuild_one(b, l.v[i]);
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i]);
    free(l.v);
    return rv;
}
