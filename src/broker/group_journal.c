/* The journal of a consumer group of a durable stream (group_journal.h):
 * the worker side (engine events to records, the bounded buffer, the
 * hand-off once per loop turn, ack_sync answers held until durable) and
 * the storage-thread side (appends, the fsync policy, compaction, the
 * group files' creation and removal, recovery at a log's open). Thread
 * noted per function and per field. */
#include "broker/group_journal.h"
#include "broker/group_settings.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/durable_store.h"
#include "broker/group_int.h"
#include "broker/reply.h"
#include "broker/worker.h"
#include "felix/error.h"

/* An answer waiting for the records made before it. */
typedef struct gj_wait {
    struct gj_wait *next;
    uint64_t seq;
    struct fxb_reply *r;
    fx_buf *frame;
} gj_wait;

struct fxb_gjournal {
    atomic_uint refs;
    /* Set at creation, read-only after: */
    fxb_worker *w;
    fxb_storage *sto;
    fx_stream_handle *h; /* a reference */
    char name[FXB_GROUP_NAME_MAX + 1];
    bool create;    /* made by a create: the storage thread makes its files */
    uint64_t start; /* create: its first offset (a SEEK record) */
    /* The group's own settings: given at create (written to <stem>.settings
     * when it has any), or read back from that file by recovery. */
    fx_broker_group_settings set;
    /* Worker: */
    struct fxb_group *g; /* NULL once detached */
    fx_gjournal_rec *buf;
    uint32_t n, cap;
    uint64_t made, seen; /* records made; reported durable */
    fx_task handoff;
    bool handoff_posted, stalled;
    gj_wait *whead, *wtail;
    char *werr; /* the storage failure, once seen */
    /* Storage -> worker: */
    atomic_uint_fast64_t durable;
    atomic_int srv; /* the storage failure that stopped the journal, or 0 */
    char why[384];  /* its text: written once before |srv| (release) */
    atomic_bool back_posted;
    fx_task back;
    /* Storage thread: */
    fx_task open_task, close_task, restore_task;
    bool remove;       /* close_task: delete the files */
    bool store_done;   /* the storage's reference is dropped */
    struct dstream *s; /* linked on its list */
    struct fxb_gjournal *snext;
    fx_gjournal *j;
    fx_gjournal_state state; /* the model compaction snapshots */
    bool dirty;              /* appended since the last flush */
};

typedef struct gj_batch {
    fx_task task;
    fxb_gjournal *gj;
    uint64_t end; /* gj->made after its last record */
    uint32_t n;
    fx_gjournal_rec *recs;
} gj_batch;

static fx_ratelimit gj_rl = FX_RATELIMIT_INIT;

/* ---- pure parts ------------------------------------------------------------------------- */

bool fxb_gj_event_rec(const fxb_gs_event *e, fx_gjournal_rec *out)
{
    *out = (fx_gjournal_rec){.offset = e->first, .count = e->count, .attempt = e->attempt};
    switch (e->type) {
    case FXB_GS_EV_DELIVER:
        out->type = FX_GJ_DELIVER;
        break;
    case FXB_GS_EV_ACK:
        out->type = FX_GJ_ACK, out->attempt = 0;
        break;
    case FXB_GS_EV_NAK:
        out->type = FX_GJ_NAK, out->count = 0, out->not_before_us = e->not_before_us;
        break;
    case FXB_GS_EV_RELEASE:
        out->type = FX_GJ_RELEASE, out->count = 0;
        break;
    case FXB_GS_EV_DEAD:
        out->type = FX_GJ_DEAD, out->count = 0, out->attempt = 0, out->reason = (uint8_t)e->reason;
        break;
    case FXB_GS_EV_SKIP:
        out->type = FX_GJ_SKIP, out->attempt = 0;
        break;
    case FXB_GS_EV_SEEK:
        out->type = FX_GJ_SEEK, out->count = 0, out->attempt = 0;
        break;
    case FXB_GS_EV_REDRIVE:
        out->type = FX_GJ_REDRIVE, out->count = 0, out->attempt = 0;
        break;
    default:
        return false;
    }
    return fx_gjournal_rec_is_valid(out);
}

int fxb_gj_restore(fxb_gs *gs, const fx_gjournal_state *s, uint64_t now_us, uint64_t wall_us)
{
    size_t np = 0;
    /* Dead intents name pending records: they come back with them. */
    const fx_gjournal_pending *p = fx_gjournal_state_pending(s, &np);
    int rv = fxb_gs_restore(gs, s->floor, s->next);
    for (size_t i = 0; i < np && rv == 0; i++) {
        /* A parked record waits out what is left of its delay (its time is
         * the wall clock's; a journal of an older build kept the process's
         * monotonic clock, which reads as long past). */
        uint64_t nb = p[i].not_before_us > wall_us ? now_us + (p[i].not_before_us - wall_us) : 0;
        rv = fxb_gs_restore_pending(gs, p[i].offset, p[i].attempts, nb);
    }
    return rv;
}

uint64_t fxb_gj_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int fxb_gj_restore_dead(struct fxb_group *g, const fx_gjournal_state *s)
{
    size_t n = 0;
    uint64_t forgotten = 0;
    const fx_gjournal_dead *d = fx_gjournal_state_dead(s, &n, &forgotten);
    fxb_dead_entry *e = n > 0 ? malloc(n * sizeof(*e)) : NULL;
    if (n > 0 && e == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        e[i] = (fxb_dead_entry){.offset = d[i].offset,
                                .dlq_offset = d[i].dlq_offset,
                                .attempts = d[i].attempts,
                                .reason = d[i].reason,
                                .redriven = d[i].redriven};
    int rv = fxb_group_dead_load(g, e, (uint32_t)n, forgotten);
    free(e);
    return rv;
}

/* ---- references ------------------------------------------------------------------------- */

static void gj_free(fxb_gjournal *gj)
{
    for (gj_wait *x = gj->whead, *nx; x != NULL; x = nx) {
        nx = x->next;
        fx_buf_unref(x->frame);
        fxb_reply_unref(x->r);
        free(x);
    }
    free(gj->buf);
    free(gj->werr);
    fx_gjournal_state_deinit(&gj->state);
    fx_stream_handle_unref(gj->h);
    free(gj);
}

static void gj_unref(fxb_gjournal *gj)
{
    if (atomic_fetch_sub_explicit(&gj->refs, 1, memory_order_acq_rel) == 1)
        gj_free(gj);
}

static void on_back(fx_loop *l, fx_task *t, void *user);
static void on_handoff(fx_loop *l, fx_task *t, void *user);
static void on_open(fx_loop *l, fx_task *t, void *user);
static void on_close(fx_loop *l, fx_task *t, void *user);
static void on_restore(fx_loop *l, fx_task *t, void *user);

/* A journal of group |name| of |h| on |w|, with the worker's and the
 * storage's references. NULL on no memory. Any thread. */
static fxb_gjournal *gj_new(fxb_storage *sto, fxb_worker *w, fx_stream_handle *h, const char *name)
{
    fxb_gjournal *gj = calloc(1, sizeof(*gj));
    if (gj == NULL)
        return NULL;
    atomic_init(&gj->refs, 2);
    atomic_init(&gj->durable, 0);
    atomic_init(&gj->srv, 0);
    atomic_init(&gj->back_posted, false);
    gj->w = w;
    gj->sto = sto;
    gj->h = fx_stream_handle_ref(h);
    snprintf(gj->name, sizeof(gj->name), "%s", name);
    fx_gjournal_state_init(&gj->state);
    fx_task_init(&gj->handoff, on_handoff, gj);
    fx_task_init(&gj->back, on_back, gj);
    fx_task_init(&gj->open_task, on_open, gj);
    fx_task_init(&gj->close_task, on_close, gj);
    fx_task_init(&gj->restore_task, on_restore, gj);
    return gj;
}

/* ---- worker side ------------------------------------------------------------------------- */

/* Appends |r| to the buffer and has it handed over at the end of the turn.
 * Worker. */
static void emit(fxb_gjournal *gj, const fx_gjournal_rec *r)
{
    if (gj->n == gj->cap) {
        uint32_t cap = gj->cap != 0 ? gj->cap * 2 : 64;
        fx_gjournal_rec *b = realloc(gj->buf, cap * sizeof(*b));
        if (b == NULL) {
            /* The record cannot be kept: the journal no longer follows the
             * group, so the group is refused from here on (counted). */
            if (atomic_load_explicit(&gj->srv, memory_order_acquire) == 0 && gj->werr == NULL) {
                gj->werr = strdup("out of memory buffering its journal");
                FX_COUNTER_INC(group_journal_errors);
            }
            FX_COUNTER_INC(group_journal_dropped);
            return;
        }
        gj->buf = b;
        gj->cap = cap;
    }
    gj->buf[gj->n++] = *r;
    gj->made++;
    if (!gj->handoff_posted) {
        gj->handoff_posted = true;
        atomic_fetch_add_explicit(&gj->refs, 1, memory_order_relaxed); /* the posted task's */
        fx_loop_post(gj->w->loop, &gj->handoff);
    }
}

static void on_event(void *user, const fxb_gs_event *e)
{
    fx_gjournal_rec r;
    if (!fxb_gj_event_rec(e, &r))
        return;
    if (r.not_before_us != 0) {
        /* The engine's times are the loop's monotonic clock, which a restart
         * resets: the journal keeps the wall clock's. */
        fxb_gjournal *gj = user;
        uint64_t now_us = fx_loop_now(gj->w->loop) / 1000, wall = fxb_gj_wall_us();
        r.not_before_us = r.not_before_us > now_us ? wall + (r.not_before_us - now_us) : wall;
    }
    emit(user, &r);
}

static void on_batch(fx_loop *l, fx_task *t, void *user);

/* Hands the buffer to the storage thread as one batch. Returns false when
 * it could not (no memory: tried again next turn). Worker. */
static bool hand_over(fxb_gjournal *gj)
{
    if (gj->n == 0)
        return true;
    if (gj->werr != NULL) {
        /* Failed: what the journal holds stays the state of the last
         * confirmed ack_sync; nothing later is written (counted). */
        FX_COUNTER_ADD(group_journal_dropped, gj->n);
        gj->n = 0;
        return true;
    }
    gj_batch *b = malloc(sizeof(*b));
    if (b == NULL) {
        FX_COUNTER_INC(group_journal_errors);
        return false;
    }
    fx_task_init(&b->task, on_batch, b);
    b->gj = gj;
    b->end = gj->made;
    b->n = gj->n;
    b->recs = gj->buf;
    gj->buf = NULL;
    gj->n = gj->cap = 0;
    fx_loop_post(gj->sto->loop, &b->task);
    return true;
}

/* Worker: hands the records of this turn over (the posted task holds a
 * reference). */
static void on_handoff(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_gjournal *gj = user;
    gj->handoff_posted = false;
    if (!hand_over(gj)) {
        if (gj->g != NULL && !fx_loop_is_stopping(l)) {
            gj->handoff_posted = true; /* tried again next turn, with the same reference */
            fx_loop_post(l, &gj->handoff);
            return;
        }
        FX_COUNTER_ADD(group_journal_dropped, gj->n); /* the group went meanwhile */
        gj->n = 0;
    }
    gj_unref(gj);
}

/* Answers |x| now (its records are durable). Worker. */
static void release_wait(gj_wait *x)
{
    fxb_reply_complete_frame(x->r, x->frame);
    if (!fx_loop_post(x->r->loop, &x->r->task))
        fxb_reply_unref(x->r);
    free(x);
}

/* Drops every waiting answer (the group went, or its journal failed):
 * the member never hears that those acks are durable. Counted. Worker. */
static void drop_waits(fxb_gjournal *gj)
{
    for (gj_wait *x = gj->whead, *nx; x != NULL; x = nx) {
        nx = x->next;
        fx_buf_unref(x->frame);
        fxb_reply_unref(x->r);
        free(x);
        FX_COUNTER_INC(group_ack_sync_dropped);
    }
    gj->whead = gj->wtail = NULL;
}

/* Worker: the storage thread reported progress (or a failure). */
static void on_back(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gjournal *gj = user;
    /* seq_cst with post_back: either it sees the flag cleared and posts
     * again, or this load sees its durable point. */
    atomic_store_explicit(&gj->back_posted, false, memory_order_seq_cst);
    gj->seen = atomic_load_explicit(&gj->durable, memory_order_seq_cst);
    while (gj->whead != NULL && gj->whead->seq <= gj->seen) {
        gj_wait *x = gj->whead;
        gj->whead = x->next;
        if (gj->whead == NULL)
            gj->wtail = NULL;
        release_wait(x);
    }
    if (atomic_load_explicit(&gj->srv, memory_order_acquire) != 0 && gj->werr == NULL) {
        gj->werr = strdup(gj->why);
        drop_waits(gj);
    }
    if (gj->stalled && gj->g != NULL && gj->made - gj->seen < FXB_GJ_MAX_UNWRITTEN) {
        gj->stalled = false;
        fxb_group_pump(gj->g);
    }
    gj_unref(gj); /* the posted task's */
}

int fxb_gj_attach_new(struct fxb_group *g, uint64_t start)
{
    fxb_gjournal *gj = gj_new(g->w->dur->st, g->w, g->sg->h, g->name);
    if (gj == NULL)
        return -ENOMEM;
    gj->create = true;
    gj->start = start;
    gj->set = g->set;
    gj->g = g;
    g->gj = gj;
    fxb_gs_set_observer(g->gs, on_event, gj);
    fx_loop_post(gj->sto->loop, &gj->open_task);
    return 0;
}

void fxb_gj_detach(struct fxb_group *g, bool remove)
{
    fxb_gjournal *gj = g->gj;
    if (gj == NULL)
        return;
    fxb_gs_set_observer(g->gs, NULL, NULL);
    g->gj = NULL;
    gj->g = NULL;
    drop_waits(gj);
    if (remove || !hand_over(gj)) /* what the group did last is kept, unless it goes */
        gj->n = 0;
    gj->remove = remove;
    fx_loop_post(gj->sto->loop, &gj->close_task); /* takes the worker's reference */
}

void fxb_gj_teardown(struct fxb_group *g)
{
    fxb_gjournal *gj = g->gj;
    if (gj == NULL)
        return;
    g->gj = NULL;
    /* Every loop stopped: a reply task posted to a stopped worker never ran,
     * and a journal whose open never linked it was not closed by its log. */
    if (atomic_load_explicit(&gj->back_posted, memory_order_acquire))
        gj_unref(gj);
    if (gj->handoff_posted)
        gj_unref(gj);
    if (!gj->store_done) {
        gj->store_done = true;
        (void)fx_gjournal_close(gj->j, false);
        gj->j = NULL;
        gj_unref(gj);
    }
    gj_unref(gj);
}

bool fxb_gj_room(struct fxb_group *g)
{
    fxb_gjournal *gj = g->gj;
    if (gj == NULL || (gj->werr == NULL && gj->made - gj->seen < FXB_GJ_MAX_UNWRITTEN))
        return true;
    gj->stalled = true;
    FX_COUNTER_INC(group_journal_waits);
    return false;
}

void fxb_gj_dead_intent(struct fxb_group *g, const fxb_gs_dead *d)
{
    if (g->gj == NULL)
        return;
    fx_gjournal_rec r = {.type = FX_GJ_DEAD_INTENT,
                         .offset = d->offset,
                         .attempt = d->attempts,
                         .reason = (uint8_t)d->reason};
    emit(g->gj, &r);
}

void fxb_gj_discard(struct fxb_group *g, uint64_t offset)
{
    if (g->gj == NULL)
        return;
    fx_gjournal_rec r = {.type = FX_GJ_DISCARD, .offset = offset};
    emit(g->gj, &r);
}

bool fxb_gj_defer_answer(struct fxb_group *g, struct fxb_reply *r, struct fx_buf *frame)
{
    fxb_gjournal *gj = g->gj;
    if (gj == NULL || gj->made == gj->seen)
        return false;
    gj_wait *x = gj->werr == NULL ? malloc(sizeof(*x)) : NULL;
    if (x == NULL) {
        /* Not confirmed (no memory, or the journal failed): the member's
         * ack_sync times out (counted). */
        fx_buf_unref(frame);
        fxb_reply_unref(r);
        FX_COUNTER_INC(group_ack_sync_dropped);
        return true;
    }
    *x = (gj_wait){.seq = gj->made, .r = r, .frame = frame};
    if (gj->wtail != NULL)
        gj->wtail->next = x;
    else
        gj->whead = x;
    gj->wtail = x;
    FX_COUNTER_INC(group_ack_sync_deferred);
    return true;
}

const char *fxb_gj_error(const struct fxb_group *g)
{
    return g->gj != NULL ? g->gj->werr : NULL;
}

uint64_t fxb_gj_made(const struct fxb_group *g)
{
    return g->gj != NULL ? g->gj->made : 0;
}

uint64_t fxb_gj_durable(const struct fxb_group *g)
{
    return g->gj != NULL ? g->gj->seen : 0;
}

/* ---- storage-thread side ----------------------------------------------------------------- */

static fx_sio *io_of(const fxb_storage *sto)
{
    return sto->d->o.io != NULL ? sto->d->o.io : fx_sio_posix();
}

/* <root>/<stream dir>/groups of |s|. */
static int groups_dir(const dstream *s, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s/groups", s->st->d->dir, s->dirname);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* <dir>/<stem of |name|>.name */
static int name_path(const char *dir, const char *name, char *out, size_t cap)
{
    char stem[FX_GJOURNAL_STEM_MAX];
    fx_gjournal_stem(stem, name);
    int n = snprintf(out, cap, "%s/%s.name", dir, stem);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* <dir>/<stem of |name|>.settings: the group's own settings (JSON), beside
 * its name; absent when it has none. */
static int settings_path(const char *dir, const char *name, char *out, size_t cap)
{
    char stem[FX_GJOURNAL_STEM_MAX];
    fx_gjournal_stem(stem, name);
    int n = snprintf(out, cap, "%s/%s.settings", dir, stem);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Writes the settings file of |gj| in |dir| when its group has its own
 * settings (once, at create, after the name and before the journal: a
 * journal that opens had its settings written). 0 or -errno. */
static int settings_write(fx_sio *io, const fxb_gjournal *gj, const char *dir)
{
    if (gj->set.has == 0)
        return 0;
    char path[4096 + 64];
    int rv = settings_path(dir, gj->name, path, sizeof(path));
    if (rv != 0)
        return rv;
    size_t len = 0;
    char *text = fxb_gset_encode(&gj->set, &len);
    if (text == NULL)
        return -ENOMEM;
    rv = fx_sio_write_file_atomic(io, path, text, len);
    free(text);
    return rv;
}

/* Reads the settings file of |gj| in |dir| into gj->set (none: no file).
 * 0, or the failure with its reason in |why|. */
static int settings_read(fx_sio *io, fxb_gjournal *gj, const char *dir, char *why, size_t wl)
{
    char path[4096 + 64];
    char *text = NULL;
    size_t len = 0;
    int rv = settings_path(dir, gj->name, path, sizeof(path));
    if (rv == 0)
        rv = fx_sio_read_file(io, path, FXB_GSET_TEXT_MAX, &text, &len);
    if (rv == -ENOENT)
        return 0; /* the group follows the broker's defaults */
    char stem[FX_GJOURNAL_STEM_MAX];
    fx_gjournal_stem(stem, gj->name);
    if (rv != 0) {
        snprintf(why, wl, "%s.settings", stem);
        return rv;
    }
    char reason[256];
    rv = fxb_gset_decode(text, len, &gj->set, reason, sizeof(reason));
    free(text);
    if (rv != 0) {
        snprintf(why, wl, "%s.settings: %s", stem, reason);
        return FX_ESTORAGE_CORRUPT;
    }
    return 0;
}

/* Has the worker look at the journal's progress. Storage thread. */
static void post_back(fxb_gjournal *gj)
{
    if (atomic_exchange_explicit(&gj->back_posted, true, memory_order_seq_cst))
        return;
    atomic_fetch_add_explicit(&gj->refs, 1, memory_order_relaxed); /* the posted task's */
    fx_loop_post(gj->w->loop, &gj->back);
}

/* Records the failure that stops |gj| (the first one), logs and counts it. */
static void set_failed(fxb_gjournal *gj, int rv, const char *what, const char *detail)
{
    if (atomic_load_explicit(&gj->srv, memory_order_relaxed) != 0)
        return;
    snprintf(gj->why, sizeof(gj->why), "%s: %s%s%s", what, fx_strerror(rv),
             detail != NULL && detail[0] ? ": " : "", detail != NULL ? detail : "");
    atomic_store_explicit(&gj->srv, rv != 0 ? rv : FX_ESTORAGE_ERROR, memory_order_release);
    FX_COUNTER_INC(group_journal_errors);
    FX_LOG_ERROR("storage",
                 "consumer group %s of %s/%s/%s: its journal failed (%s); the group hands "
                 "nothing out, confirms no ack_sync and refuses joins (journal_error in its "
                 "admin object)",
                 gj->name, fx_stream_handle_tenant(gj->h), fx_stream_handle_namespace(gj->h),
                 fx_stream_handle_stream(gj->h), gj->why);
}

static void store_fail(fxb_gjournal *gj, int rv, const char *what, const char *detail)
{
    set_failed(gj, rv, what, detail);
    post_back(gj);
}

static void link_on(dstream *s, fxb_gjournal *gj)
{
    gj->s = s;
    gj->snext = s->gjs;
    s->gjs = gj;
}

static void unlink_from(fxb_gjournal *gj)
{
    if (gj->s == NULL)
        return;
    for (fxb_gjournal **pp = &gj->s->gjs; *pp != NULL; pp = &(*pp)->snext) {
        if (*pp == gj) {
            *pp = gj->snext;
            break;
        }
    }
    gj->s = NULL;
}

static fxb_gjournal *find_on(const dstream *s, const char *name)
{
    for (fxb_gjournal *x = s->gjs; x != NULL; x = x->snext)
        if (strcmp(x->name, name) == 0)
            return x;
    return NULL;
}

/* Flushes |gj| if it appended since its last flush. */
static int sync_one(fxb_gjournal *gj)
{
    if (!gj->dirty || gj->j == NULL)
        return 0;
    int rv = fx_gjournal_sync(gj->j);
    if (rv == 0) {
        gj->dirty = false;
        FX_COUNTER_INC(group_journal_syncs);
    }
    return rv;
}

/* Deletes the files of |gj| in |dir|: the journal's, its settings, then
 * its name. */
static int remove_files(fx_sio *io, const char *dir, const char *name)
{
    char path[4096 + 64];
    int rv = fx_gjournal_remove(io, dir, name);
    if (rv == 0 && (rv = settings_path(dir, name, path, sizeof(path))) == 0) {
        rv = io->ops->unlink(io, path);
        if (rv == -ENOENT)
            rv = 0;
    }
    if (rv == 0 && (rv = name_path(dir, name, path, sizeof(path))) == 0) {
        rv = io->ops->unlink(io, path);
        if (rv == -ENOENT)
            rv = 0;
        if (rv == 0)
            rv = io->ops->sync_dir(io, dir);
    }
    return rv;
}

/* The storage side lets go of |gj|: flushed and closed, its files removed
 * with |remove|, its reference dropped. Storage thread, or teardown. */
static void store_close(fxb_gjournal *gj, bool remove)
{
    if (gj->store_done)
        return;
    gj->store_done = true;
    char dir[4096 + 64] = "";
    if (gj->s != NULL && groups_dir(gj->s, dir, sizeof(dir)) != 0)
        dir[0] = '\0';
    unlink_from(gj);
    int rv = fx_gjournal_close(gj->j, !remove && gj->dirty);
    gj->j = NULL;
    if (rv != 0)
        set_failed(gj, rv, "final flush", NULL);
    if (remove && dir[0] != '\0' && (rv = remove_files(io_of(gj->sto), dir, gj->name)) != 0) {
        FX_COUNTER_INC(group_journal_errors);
        FX_LOG_ERROR("storage", "consumer group %s of %s/%s/%s: removing its files in %s: %s",
                     gj->name, fx_stream_handle_tenant(gj->h), fx_stream_handle_namespace(gj->h),
                     fx_stream_handle_stream(gj->h), dir, fx_strerror(rv));
    }
    gj_unref(gj);
}

/* Makes the files of a new group in |dir|: its name (first: a name without
 * a journal is a create that did not finish, dropped at recovery), the
 * journal, and a SEEK to its start, flushed. */
static int create_files(fxb_gjournal *gj, const char *dir, char *why, size_t wl)
{
    fx_sio *io = io_of(gj->sto);
    char path[4096 + 64];
    int rv = fx_sio_mkdirs(io, dir);
    if (rv == 0)
        rv = name_path(dir, gj->name, path, sizeof(path));
    if (rv == 0)
        rv = fx_sio_write_file_atomic(io, path, gj->name, strlen(gj->name));
    if (rv == 0)
        rv = settings_write(io, gj, dir);
    if (rv == 0)
        rv = fx_gjournal_open(&gj->j, io, dir, gj->name, true, &gj->state, NULL, why, wl);
    if (rv != 0)
        return rv;
    fx_gjournal_rec seek = {.type = FX_GJ_SEEK, .offset = gj->start};
    rv = fx_gjournal_append(gj->j, &seek, 1);
    if (rv == 0)
        rv = fx_gjournal_state_apply(&gj->state, &seek);
    if (rv == 0)
        rv = fx_gjournal_sync(gj->j);
    return rv;
}

/* Storage thread: the files of a group just created. */
static void on_open(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gjournal *gj = user;
    if (gj->store_done)
        return; /* detached before: nothing to make */
    dstream *s = fxb_dstream_get(gj->sto, gj->h);
    if (s == NULL || s->open_rv != 0) {
        store_fail(gj, s != NULL ? s->open_rv : FX_ESTORAGE_ERROR, "the stream's log is not open",
                   s != NULL ? s->why : NULL);
        return;
    }
    if (find_on(s, gj->name) != NULL) {
        /* Recovered by this very open (a create before the log was open):
         * the worker keeps the recovered group (yield_fresh). */
        snprintf(gj->why, sizeof(gj->why), "a group of that name was recovered from its files");
        atomic_store_explicit(&gj->srv, -EEXIST, memory_order_release);
        post_back(gj);
        return;
    }
    char dir[4096 + 64], why[384] = "";
    int rv = groups_dir(s, dir, sizeof(dir));
    if (rv == 0)
        rv = create_files(gj, dir, why, sizeof(why));
    if (rv != 0) {
        (void)fx_gjournal_close(gj->j, false);
        gj->j = NULL;
        store_fail(gj, rv, "creating its files", why);
        return;
    }
    link_on(s, gj);
}

/* Storage thread: the worker let go of the group (deleted, or its stream
 * ended); takes the worker's reference. */
static void on_close(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gjournal *gj = user;
    store_close(gj, gj->remove);
    gj_unref(gj);
}

static void compact(fxb_gjournal *gj)
{
    int rv = fx_gjournal_compact(gj->j, &gj->state);
    if (rv == 0) {
        FX_COUNTER_INC(group_journal_compactions);
        gj->dirty = false; /* the restarted journal was flushed */
        return;
    }
    if (rv == FX_ESTORAGE_FAILED) {
        set_failed(gj, rv, "compaction", NULL);
        return;
    }
    FX_COUNTER_INC(group_journal_errors); /* the journal goes on; tried at the next batch */
    FX_LOG_RATELIMITED(&gj_rl, fx_now_ns(), FX_LOG_WARN, "storage",
                       "consumer group %s: compacting its journal failed: %s (tried again)",
                       gj->name, fx_strerror(rv));
}

/* Appends batch |b|, applies it to the model and flushes it when the policy
 * is on_commit. Returns 0 or the failure (|*pwhat| says where). */
static int write_batch(fxb_gjournal *gj, const gj_batch *b, const char **pwhat)
{
    *pwhat = "append";
    int rv = fx_gjournal_append(gj->j, b->recs, b->n);
    for (uint32_t i = 0; i < b->n && rv == 0; i++)
        rv = fx_gjournal_state_apply(&gj->state, &b->recs[i]);
    if (rv != 0)
        return rv;
    FX_COUNTER_ADD(group_journal_records, b->n);
    gj->dirty = true;
    *pwhat = "flush";
    fx_fsync_mode mode = gj->s->st->d->o.fsync_mode;
    if (mode == FX_FSYNC_ON_COMMIT && (rv = sync_one(gj)) != 0)
        return rv;
    if (mode == FX_FSYNC_PERIODIC)
        fxb_dstream_journal_dirty(gj->s, fx_loop_now(gj->sto->loop));
    if (fx_gjournal_should_compact(gj->j))
        compact(gj);
    return atomic_load_explicit(&gj->srv, memory_order_relaxed);
}

/* Storage thread: a batch of records from the worker. */
static void on_batch(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    gj_batch *b = user;
    fxb_gjournal *gj = b->gj;
    if (gj->j == NULL || gj->store_done ||
        atomic_load_explicit(&gj->srv, memory_order_relaxed) != 0) {
        FX_COUNTER_ADD(group_journal_dropped, b->n); /* the journal failed or closed */
    } else {
        const char *what = "";
        int rv = write_batch(gj, b, &what);
        if (rv != 0) {
            store_fail(gj, rv, what, NULL);
        } else {
            atomic_store_explicit(&gj->durable, b->end, memory_order_seq_cst);
            post_back(gj);
        }
    }
    free(b->recs);
    free(b);
}

void fxb_gj_store_sync_all(dstream *s)
{
    s->gj_sync_due_ns = 0;
    for (fxb_gjournal *gj = s->gjs; gj != NULL; gj = gj->snext) {
        if (atomic_load_explicit(&gj->srv, memory_order_relaxed) != 0)
            continue;
        int rv = sync_one(gj);
        if (rv != 0)
            store_fail(gj, rv, "flush", NULL);
    }
}

void fxb_gj_store_close_all(dstream *s)
{
    while (s->gjs != NULL)
        store_close(s->gjs, false);
}

/* ---- recovery ---------------------------------------------------------------------------- */

typedef struct name_list {
    char **v;
    size_t n, cap;
    int rv;
} name_list;

/* Lists the "<stem>.name" files of a groups directory. */
static int collect_name(void *user, const char *name, bool is_dir)
{
    name_list *nl = user;
    size_t len = strlen(name);
    if (is_dir || len <= 5 || strcmp(name + len - 5, ".name") != 0)
        return 0;
    if (nl->n == nl->cap) {
        size_t cap = nl->cap != 0 ? nl->cap * 2 : 8;
        char **v = realloc(nl->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        nl->v = v;
        nl->cap = cap;
    }
    if ((nl->v[nl->n] = strdup(name)) == NULL)
        return -ENOMEM;
    nl->n++;
    return 0;
}

/* Logs and counts a group of |s| that recovery refuses or drops. */
static void recover_log(const dstream *s, const char *file, const char *what)
{
    FX_LOG_ERROR("storage", "consumer group file %s of %s/%s/%s: %s", file,
                 fx_stream_handle_tenant(s->h), fx_stream_handle_namespace(s->h),
                 fx_stream_handle_stream(s->h), what);
}

/* Reads the group name kept in |dir|/|file| and checks that it names the
 * file. Returns the name (malloc'd) or NULL (logged, counted). */
static char *read_name(const dstream *s, const char *dir, const char *file)
{
    fx_sio *io = io_of(s->st);
    char path[4096 + 64], stem[FX_GJOURNAL_STEM_MAX];
    char *name = NULL;
    size_t len = 0;
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    int rv = n < 0 || (size_t)n >= sizeof(path)
                 ? -ENAMETOOLONG
                 : fx_sio_read_file(io, path, FXB_GROUP_NAME_MAX, &name, &len);
    if (rv == 0 && (len == 0 || strlen(name) != len))
        rv = FX_ESTORAGE_CORRUPT;
    if (rv == 0) {
        fx_gjournal_stem(stem, name);
        if (strlen(file) != strlen(stem) + 5 || strncmp(file, stem, strlen(stem)) != 0)
            rv = FX_ESTORAGE_CORRUPT;
    }
    if (rv != 0) {
        FX_COUNTER_INC(group_journal_refused);
        recover_log(s, file,
                    rv == FX_ESTORAGE_CORRUPT
                        ? "the group name it holds does not name it; the group is "
                          "not recovered"
                        : "unreadable; the group is not recovered");
        free(name);
        return NULL;
    }
    return name;
}

/* Opens the files of group |name| in |dir| into |gj|, clamped to the log
 * of |s|. Returns 0, -ENOENT (a create that did not finish) or the failure
 * (with its reason in gj->why; logged, counted). */
static int recover_open(dstream *s, fxb_gjournal *gj, const char *dir)
{
    char why[384] = "";
    fx_gjournal_stats st = {0};
    int rv = fx_gjournal_open(&gj->j, io_of(s->st), dir, gj->name, false, &gj->state, &st, why,
                              sizeof(why));
    if (rv == -ENOENT)
        return rv;
    if (rv != 0) {
        FX_COUNTER_INC(group_journal_refused);
        set_failed(gj, rv, "its journal does not open", why);
        return rv;
    }
    FX_COUNTER_ADD(group_journal_torn_cut, st.torn_tail_cut);
    fx_gjournal_clamp(&gj->state, fx_dlog_next_offset(s->log), &st);
    FX_COUNTER_ADD(group_journal_clamped, st.clamped);
    if (st.clamped != 0)
        FX_LOG_WARN("storage",
                    "consumer group %s of %s/%s/%s: its state was past the log's tail %" PRIu64
                    " (records lost with the log's unflushed tail): clamped to it",
                    gj->name, fx_stream_handle_tenant(s->h), fx_stream_handle_namespace(s->h),
                    fx_stream_handle_stream(s->h), fx_dlog_next_offset(s->log));
    return 0;
}

/* Recovers group file |file| (a "<stem>.name") of |s| in |dir| and sends
 * it to the worker. */
static void recover_one(dstream *s, const char *dir, const char *file)
{
    char *name = read_name(s, dir, file);
    fxb_gjournal *gj = name != NULL ? gj_new(s->st, s->st->w, s->h, name) : NULL;
    free(name);
    if (gj == NULL)
        return;
    char why[384] = "";
    int rv = settings_read(io_of(s->st), gj, dir, why, sizeof(why));
    if (rv != 0) {
        /* Refused like a damaged journal: the group shows the reason and
         * serves nothing; its files stay for an operator. */
        FX_COUNTER_INC(group_journal_refused);
        set_failed(gj, rv, "its settings file is damaged or unreadable", why);
        gj->set = (fx_broker_group_settings){0};
    } else {
        rv = recover_open(s, gj, dir);
    }
    if (rv == -ENOENT) {
        /* Its create stopped before the journal: the group never was. */
        rv = remove_files(io_of(s->st), dir, gj->name);
        recover_log(s, file,
                    rv == 0 ? "a group whose create did not finish: removed"
                            : "a group whose create did not finish: removing it failed");
        gj_free(gj);
        return;
    }
    if (rv == 0) {
        link_on(s, gj);
        FX_COUNTER_INC(group_journal_recovered);
    } else {
        gj->store_done = true; /* refused: nothing of it stays open here */
        atomic_fetch_sub_explicit(&gj->refs, 1, memory_order_relaxed);
    }
    fx_loop_post(gj->w->loop, &gj->restore_task); /* the worker's reference */
}

void fxb_gj_store_recover(dstream *s)
{
    fx_sio *io = io_of(s->st);
    char dir[4096 + 64];
    bool is_dir = false;
    /* Stopping: a restore sent now might reach a worker already stopped,
     * and never run; the files stay for the next start. */
    if (atomic_load_explicit(&s->st->d->stopping, memory_order_acquire))
        return;
    if (s->st->w == NULL || groups_dir(s, dir, sizeof(dir)) != 0 ||
        io->ops->stat(io, dir, &is_dir) != 0 || !is_dir)
        return; /* no group was ever made */
    name_list nl = {0};
    int rv = io->ops->list(io, dir, collect_name, &nl);
    if (rv != 0) {
        FX_COUNTER_INC(group_journal_errors);
        recover_log(s, "groups/", "cannot be listed; its groups are not recovered");
    }
    for (size_t i = 0; i < nl.n; i++) {
        if (rv == 0)
            recover_one(s, dir, nl.v[i]);
        free(nl.v[i]);
    }
    free(nl.v);
}

/* A group of that name created here (the admin API, the broker's YAML)
 * while its stream's log was not open yet, with no member: the files on disk
 * win, so it goes (its own files were never made: the open found them). */
static void yield_fresh(fxb_worker *w, const fxb_gjournal *gj)
{
    struct fxb_group *old = fxb_group_find(fxb_group_sgroups(w, gj->h), gj->name);
    if (old == NULL || old->gj == NULL || !old->gj->create || old->nmembers != 0 ||
        old->joining != 0)
        return;
    FX_LOG_INFO("broker",
                "consumer group %s: created before its stream's log opened; the "
                "state recovered from its files replaces it",
                gj->name);
    fxb_group_delete(old);
}

/* Worker: a group recovered by the storage thread is made again. */
static void on_restore(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gjournal *gj = user;
    fxb_worker *w = gj->w;
    int rv = FX_ENOSTREAM;
    struct fxb_group *g = NULL;
    if (fx_stream_handle_is_active(gj->h)) {
        yield_fresh(w, gj);
        if (fxb_group_find(fxb_group_sgroups(w, gj->h), gj->name) == NULL)
            g = fxb_group_make(w, gj->h, gj->name, 0, &gj->set, &rv, NULL);
    }
    if (g == NULL) {
        FX_COUNTER_INC(group_journal_errors);
        FX_LOG_ERROR("broker", "consumer group %s recovered from disk cannot be made again: %s",
                     gj->name, fx_strerror(rv));
        fx_loop_post(gj->sto->loop, &gj->close_task); /* its files stay */
        return;
    }
    if (atomic_load_explicit(&gj->srv, memory_order_acquire) != 0) {
        gj->werr = strdup(gj->why); /* refused: counted and logged by the recovery */
    } else if (fxb_gj_restore(g->gs, &gj->state, fx_loop_now(w->loop) / 1000, fxb_gj_wall_us()) !=
               0) {
        gj->werr = strdup("its recovered state does not fit the group engine");
        FX_COUNTER_INC(group_journal_errors);
    } else if (fxb_gj_restore_dead(g, &gj->state) != 0) {
        /* The group goes on; its list starts empty (the journal's stays
         * right: its entries come back at the next restart). */
        FX_COUNTER_INC(group_journal_errors);
        FX_LOG_ERROR("broker", "consumer group %s: no memory for its recovered dead-letter list",
                     gj->name);
    }
    gj->g = g;
    g->gj = gj;
    fxb_gs_set_observer(g->gs, on_event, gj);
}
