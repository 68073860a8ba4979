/* Consumer groups on the stream's worker loop: a group's engine (group_state.c)
 * fed with what the stream's ring holds, its members' deliveries built as
 * GROUP_BATCH frames and pushed on their writer lanes, their operations
 * applied, and its lease timer. Worker loop, except the inbox (any thread,
 * under the member's mutex; bounded, checkpoint 5a) and the part's
 * init/deinit. */
#include "broker/group.h"
#include "broker/group_int.h"
#include "broker/group_settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/durable.h"
#include "broker/group_journal.h"
#include "broker/group_metrics.h"
#include "broker/group_page.h"
#include "broker/group_poll.h"
#include "broker/group_state.h"
#include "broker/job.h"
#include "broker/lane.h"
#include "broker/reply.h"
#include "broker/sub.h"
#include "broker/worker.h"
#include "felix/error.h"

/* Runs and dead letters one engine call may hand out, and engine calls
 * one pump makes before it yields to the loop's other tasks. */
#define PUMP_RUNS 32
#define PUMP_DEAD 16
#define PUMP_TURNS 64
/* Dead letters a group keeps listed (the original's list mode); older ones
 * are forgotten, counted. The journal's model keeps the same bound. */
#define DEAD_LIST_MAX FX_GJOURNAL_DEAD_MAX

/* ---- a member's part --------------------------------------------------------------------- */

void fxb_sub_group_init(fxb_sub *sub)
{
    fxb_sub_group *gp = &sub->grp;
    gp->is_member = true;
    gp->mid = FXB_GS_NO_MEMBER;
    pthread_mutex_init(&gp->mu, NULL);
    fx_task_init(&gp->ops_task, fxb_group_member_ops, sub);
    fx_task_init(&gp->leave_task, fxb_group_member_leave, sub);
}

static void gops_free(struct fxb_gops *o)
{
    if (o->reply != NULL)
        fxb_reply_unref(o->reply);
    free(o);
}

void fxb_sub_group_deinit(fxb_sub_group *gp)
{
    if (!gp->is_member)
        return;
    struct fxb_gops *o = gp->ops_head;
    while (o != NULL) {
        struct fxb_gops *next = o->next;
        gops_free(o);
        o = next;
    }
    gp->ops_head = gp->ops_tail = NULL;
    FX_GAUGE_SUB(group_ops_queued_bytes, gp->ops_bytes);
    gp->ops_bytes = 0;
    pthread_mutex_destroy(&gp->mu);
}

/* What one queued frame costs the inbox (FXB_GROUP_OPS_INBOX_BYTES). */
static size_t gops_charge(const struct fxb_gops *o)
{
    return sizeof(*o) + o->len;
}

int fxb_group_queue_ops(fxb_sub *sub, const uint8_t *body, size_t len, struct fxb_reply *reply)
{
    struct fxb_gops *o = malloc(sizeof(*o) + len);
    if (o == NULL)
        return -ENOMEM;
    o->next = NULL;
    o->reply = reply;
    o->len = len;
    memcpy(o->body, body, len);
    fxb_sub_group *gp = &sub->grp;
    size_t charge = gops_charge(o);
    pthread_mutex_lock(&gp->mu);
    if (gp->ops_tail != NULL)
        gp->ops_tail->next = o;
    else
        gp->ops_head = o;
    gp->ops_tail = o;
    gp->ops_bytes += charge;
    /* The flag is set under the lock the worker reads it with, so its
     * drain below the low mark always sees it and posts |room_task|. */
    bool full = gp->ops_bytes >= FXB_GROUP_OPS_INBOX_BYTES;
    if (full)
        gp->ops_full = true;
    pthread_mutex_unlock(&gp->mu);
    FX_GAUGE_ADD(group_ops_queued_bytes, charge);
    fxb_sub_post(sub, sub->w->loop, &gp->ops_task);
    return full ? FXB_GROUP_OPS_FULL : 0;
}

/* ---- the worker's groups ----------------------------------------------------------------- */

fxb_sgroups *fxb_group_sgroups(fxb_worker *w, const fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&w->groups, fx_stream_handle_id(h));
    return e != NULL ? e->p : NULL;
}

struct fxb_group *fxb_group_find(fxb_sgroups *sg, const char *name)
{
    for (struct fxb_group *g = sg != NULL ? sg->head : NULL; g != NULL; g = g->next)
        if (strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

static void pump_task_cb(fx_loop *l, fx_task *t, void *user);
static void timer_cb(fx_loop *l, fx_timer *t, void *user);

/* The oldest record |h|'s stream holds: the ring's, or a durable stream's
 * log's first (0 if its log does not say: the first read finds it). */
static uint64_t oldest_of(fxb_worker *w, fx_stream_handle *h, const fx_stream *st)
{
    uint64_t first, next;
    if (!fx_stream_handle_is_durable(h))
        return fx_stream_oldest(st);
    if (fxb_gpage_log_span(w, h, &first, &next) != 0)
        return 0;
    return first < fx_stream_oldest(st) ? first : fx_stream_oldest(st);
}

static uint64_t start_offset(const fxb_sub *sub, const fx_stream *st)
{
    const fxb_sub_group *gp = &sub->grp;
    uint64_t oldest = oldest_of(sub->w, sub->h, st), tail = fx_stream_tail(st);
    switch (gp->create) {
    case FXB_GROUP_CREATE_NEW:
        return tail;
    case FXB_GROUP_CREATE_LAST:
        return tail > oldest ? tail - 1 : tail;
    case FXB_GROUP_CREATE_OFFSET:
        return gp->create_offset;
    default:
        return oldest;
    }
}

/* The group configuration from the broker's defaults. */
static void group_config(const fx_broker_opts *o, fxb_gs_config *c)
{
    fxb_gs_config_default(c);
    if (o->group_visibility_timeout_ms != 0)
        c->ack_wait_ms = o->group_visibility_timeout_ms;
    if (o->group_max_visibility_ms != 0)
        c->max_ack_wait_ms = o->group_max_visibility_ms;
    if (c->max_ack_wait_ms < c->ack_wait_ms)
        c->max_ack_wait_ms = c->ack_wait_ms;
    if (o->group_nbackoff != 0) {
        c->n_backoff =
            o->group_nbackoff > FXB_GS_MAX_BACKOFF ? FXB_GS_MAX_BACKOFF : o->group_nbackoff;
        memcpy(c->backoff_ms, o->group_backoff_ms, c->n_backoff * sizeof(c->backoff_ms[0]));
    }
    if (o->group_max_attempts != 0)
        c->max_deliver = o->group_max_attempts;
    if (o->group_max_in_flight != 0) {
        c->max_ack_pending = o->group_max_in_flight;
        c->max_parked = o->group_max_in_flight;
        c->member_window_max = o->group_max_in_flight / 2 > 0 ? o->group_max_in_flight / 2 : 1;
    }
}

struct fxb_group *fxb_group_make(fxb_worker *w, fx_stream_handle *h, const char *name,
                                 uint64_t start, const fx_broker_group_settings *set, int *prv,
                                 const char **pwhy)
{
    fxb_sgroups *sg = fxb_group_sgroups(w, h);
    uint32_t max = w->b->o.max_groups_per_stream;
    if (sg != NULL && max != 0 && sg->n >= max) {
        *prv = FX_EFULL;
        return NULL;
    }
    fxb_gs_config cfg;
    const char *why = NULL;
    group_config(&w->b->o, &cfg);
    if (fxb_gset_apply(set, &cfg, &why) != 0) {
        *prv = -EINVAL;
        if (pwhy != NULL)
            *pwhy = why;
        return NULL;
    }
    *prv = -ENOMEM;
    struct fxb_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    if (set != NULL)
        g->set = *set;
    g->gs = fxb_gs_new(&cfg, start);
    if (g->gs == NULL) {
        free(g);
        return NULL;
    }
    if (sg == NULL) {
        sg = calloc(1, sizeof(*sg));
        if (sg == NULL || fxb_idtable_insert(&w->groups, fx_stream_handle_id(h), sg) != 0) {
            free(sg);
            fxb_gs_free(g->gs);
            free(g);
            return NULL;
        }
        sg->h = fx_stream_handle_ref(h);
    }
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->w = w;
    g->sg = sg;
    fx_timer_init(&g->timer, timer_cb, g);
    fx_task_init(&g->pump_task, pump_task_cb, g);
    g->next = sg->head;
    sg->head = g;
    sg->n++;
    FX_GAUGE_ADD(group_groups, 1);
    fxb_gmetric_add(g);
    return g;
}

struct fxb_group *fxb_group_new(fxb_worker *w, fx_stream_handle *h, const char *name,
                                uint64_t start, const fx_broker_group_settings *set, int *prv,
                                const char **pwhy)
{
    struct fxb_group *g = fxb_group_make(w, h, name, start, set, prv, pwhy);
    if (g == NULL || w->dur == NULL || !fx_stream_handle_is_durable(h))
        return g;
    if (fxb_gj_attach_new(g, start) != 0) {
        *prv = -ENOMEM;
        fxb_group_delete(g);
        return NULL;
    }
    return g;
}

static void group_free(struct fxb_group *g)
{
    fxb_gmetric_remove(g);
    fxb_gpoll_free(g);
    fxb_gj_teardown(g); /* teardown only: a deleted group let go of its journal */
    for (uint32_t i = 0; i < g->members_cap; i++)
        if (g->members[i] != NULL)
            fxb_sub_unref(g->members[i]);
    free(g->members);
    free(g->dead);
    if (g->dlq != NULL)
        fx_stream_handle_unref(g->dlq);
    fxb_gpage_free(g->page); /* or its read in flight does */
    fxb_gs_free(g->gs);
    FX_GAUGE_SUB(group_groups, 1);
    free(g);
}

void fxb_group_worker_deinit(fxb_worker *w)
{
    size_t pos = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&w->groups, &pos)) != NULL;) {
        fxb_sgroups *sg = e->p;
        while (sg->head != NULL) {
            struct fxb_group *g = sg->head;
            sg->head = g->next;
            fx_loop_timer_cancel(w->loop, &g->timer); /* the loop is stopped: allowed */
            fxb_gpage_free_stopped(g->page);
            g->page = NULL;
            group_free(g);
        }
        fx_stream_handle_unref(sg->h);
        free(sg);
    }
    fxb_idtable_deinit(&w->groups);
    fxb_gmetric_worker_deinit(w);
}

static int members_put(struct fxb_group *g, uint32_t mid, fxb_sub *sub)
{
    if (mid >= g->members_cap) {
        uint32_t cap = g->members_cap != 0 ? g->members_cap : 4;
        while (cap <= mid)
            cap *= 2;
        fxb_sub **m = realloc(g->members, cap * sizeof(*m));
        if (m == NULL)
            return -ENOMEM;
        memset(m + g->members_cap, 0, (cap - g->members_cap) * sizeof(*m));
        g->members = m;
        g->members_cap = cap;
    }
    g->members[mid] = sub;
    return 0;
}

/* ---- delivery ---------------------------------------------------------------------------- */

/* Where a group's payloads are: the stream's ring, and for a durable
 * stream the page read from its log (records below the ring). */
typedef struct gsrc {
    const fx_stream *st;
    const fxb_gpage *page; /* NULL: a stream in memory */
} gsrc;

/* Up to |n| payloads from |offset| on, from the ring or the page, into
 * |out|. Returns how many (0: neither holds |offset|). */
static uint32_t src_read(const gsrc *s, uint64_t offset, uint32_t n, fx_wire_slice *out)
{
    uint32_t k = fx_stream_ring_read(s->st, offset, n, out);
    if (k == 0 && s->page != NULL)
        k = fxb_gpage_read(s->page, offset, n, out);
    return k;
}

static uint32_t ring_len(void *user, uint64_t offset)
{
    const gsrc *s = user;
    fx_wire_slice sl;
    if (src_read(s, offset, 1, &sl) == 1)
        return (uint32_t)sl.len;
    /* A durable stream's record below the ring, not in the page: it waits
     * for its page (view.want). */
    return s->page != NULL ? FXB_GS_LEN_WAIT : UINT32_MAX;
}

/* The payloads of |r| into |sl|. The engine handed out only what the ring
 * or the page holds (it settles what is gone as skipped, and waits for what
 * is not loaded): every record is there; a run may begin in the page and
 * go on in the ring. */
static void run_payloads(const gsrc *src, const fxb_gs_run *r, fx_wire_slice *sl)
{
    uint32_t got = 0, k = 1;
    while (got < r->count && k > 0) {
        k = src_read(src, r->first + got, r->count - got, sl + got);
        got += k;
    }
    for (uint32_t i = got; i < r->count; i++)
        sl[i] = (fx_wire_slice){0};
}

/* Builds the GROUP_BATCH frame of |r| from the ring (and the page) into a
 * frame list. Returns NULL on no memory. */
static fx_frame_list *build_run(const gsrc *src, const fxb_gs_run *r)
{
    fx_wire_slice one[64], *sl = one;
    if (r->count > 64 && (sl = calloc(r->count, sizeof(*sl))) == NULL)
        return NULL;
    run_payloads(src, r, sl);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < r->count; i++)
        bytes += sl[i].len;
    size_t size = fx_wire_group_batch_frame_size(1, r->count, bytes);
    fx_buf *f;
    if (fx_buf_new(&f, size) != 0) {
        if (sl != one)
            free(sl);
        return NULL;
    }
    fx_wire_group_builder gb;
    ssize_t n = -EINVAL;
    if (fx_wire_group_batch_begin(&gb, fx_buf_data_mut(f), size) == 0 &&
        fx_wire_group_batch_run(&gb, r->first, r->attempt, r->skipped_before) == 0) {
        int rv = 0;
        for (uint32_t i = 0; i < r->count && rv == 0; i++)
            rv = fx_wire_group_batch_record(&gb, sl[i].ptr, (uint32_t)sl[i].len);
        if (rv == 0)
            n = fx_wire_group_batch_finish(&gb);
    }
    if (sl != one)
        free(sl);
    fx_frame_list *l = n > 0 ? calloc(1, sizeof(*l)) : NULL;
    if (l == NULL) {
        fx_buf_unref(f);
        return NULL;
    }
    l->n = 1;
    l->frames[0] = f;
    l->iov[0] = (struct iovec){.iov_base = (void *)fx_buf_data(f), .iov_len = (size_t)n};
    l->bytes = (size_t)n;
    l->events = r->count;
    l->first_offset = r->first;
    l->end_offset = r->first + r->count;
    return l;
}

/* Gives run |r| back from its |taken|-th record on: unprocessed, the
 * attempts not counted; the timer or the next change retries. */
static void give_back(struct fxb_group *g, const fxb_gs_run *r, uint32_t taken)
{
    for (uint32_t i = taken; i < r->count; i++)
        (void)fxb_gs_release(g->gs, r->member, r->first + i, r->attempt);
}

static void count_sent(const fxb_gs_run *r, uint32_t n)
{
    FX_COUNTER_ADD(group_delivered, n);
    if (r->attempt > 1)
        FX_COUNTER_ADD(group_redelivered, n);
}

/* A run for a JSON poll member: its payloads go into the waiting poll's
 * answer (group_poll.c), not on a lane. */
static void poll_run(struct fxb_group *g, const gsrc *src, const fxb_gs_run *r)
{
    fx_wire_slice one[64], *sl = one;
    int n = -ENOMEM;
    if (r->count <= 64 || (sl = calloc(r->count, sizeof(*sl))) != NULL) {
        run_payloads(src, r, sl);
        n = fxb_gpoll_deliver(g, r, sl);
    }
    if (sl != one)
        free(sl);
    if (n < 0)
        FX_COUNTER_INC(group_send_failed);
    give_back(g, r, n < 0 ? 0 : (uint32_t)n);
    if (n > 0)
        count_sent(r, (uint32_t)n);
}

static void send_run(struct fxb_group *g, const gsrc *src, const fxb_gs_run *r)
{
    if (fxb_gpoll_is_member(g, r->member)) {
        poll_run(g, src, r);
        return;
    }
    fxb_sub *sub = r->member < g->members_cap ? g->members[r->member] : NULL;
    fx_frame_list *l = sub != NULL ? build_run(src, r) : NULL;
    if (l == NULL) {
        /* No memory (or no member): the records go back unprocessed. */
        give_back(g, r, 0);
        FX_COUNTER_INC(group_send_failed);
        return;
    }
    count_sent(r, r->count);
    /* CLOSED: the member is leaving; its unregister makes them available. */
    (void)fxb_lane_push_group(sub, l);
}

/* Lists |d|: a redriven entry of its offset is dead again (the journal's
 * model does the same, gjournal.h); else it goes last, the oldest
 * forgotten (counted) at DEAD_LIST_MAX. */
static void dead_list_add(struct fxb_group *g, const fxb_gs_dead *d)
{
    fxb_dead_entry *old = fxb_group_dead_find(g, d->offset);
    if (old != NULL) {
        if (old->redriven)
            g->dead_redriven--;
        *old = (fxb_dead_entry){
            .offset = d->offset, .attempts = d->attempts, .reason = (uint8_t)d->reason};
        return;
    }
    if (g->ndead == g->dead_cap) {
        if (g->dead_cap >= DEAD_LIST_MAX) {
            fxb_group_dead_remove(g, &g->dead[0]);
            g->dead_forgotten++;
        } else {
            uint32_t cap = g->dead_cap != 0 ? g->dead_cap * 2 : 16;
            if (cap > DEAD_LIST_MAX)
                cap = DEAD_LIST_MAX;
            fxb_dead_entry *n = realloc(g->dead, cap * sizeof(*n));
            if (n == NULL) {
                g->dead_forgotten++;
                return;
            }
            g->dead = n;
            g->dead_cap = cap;
        }
    }
    g->dead[g->ndead++] = (fxb_dead_entry){
        .offset = d->offset, .attempts = d->attempts, .reason = (uint8_t)d->reason};
}

fxb_dead_entry *fxb_group_dead_find(struct fxb_group *g, uint64_t offset)
{
    for (uint32_t k = 0; k < g->ndead; k++)
        if (g->dead[k].offset == offset)
            return &g->dead[k];
    return NULL;
}

void fxb_group_dead_remove(struct fxb_group *g, fxb_dead_entry *e)
{
    if (e->redriven)
        g->dead_redriven--;
    size_t k = (size_t)(e - g->dead);
    memmove(e, e + 1, (g->ndead - k - 1) * sizeof(*e));
    g->ndead--;
}

void fxb_group_dead_prune(struct fxb_group *g, bool all)
{
    if (g->dead_redriven == 0)
        return;
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->ndead; i++) {
        const fxb_dead_entry *e = &g->dead[i];
        if (e->redriven && (all || fxb_gs_is_settled(g->gs, e->offset)))
            g->dead_redriven--;
        else
            g->dead[k++] = *e;
    }
    g->ndead = k;
}

int fxb_group_dead_load(struct fxb_group *g, const fxb_dead_entry *e, uint32_t n,
                        uint64_t forgotten)
{
    free(g->dead);
    g->dead = NULL;
    g->ndead = g->dead_cap = g->dead_redriven = 0;
    g->dead_forgotten = forgotten;
    if (n == 0)
        return 0;
    if (n > DEAD_LIST_MAX || (g->dead = malloc(n * sizeof(*g->dead))) == NULL)
        return -ENOMEM;
    memcpy(g->dead, e, n * sizeof(*g->dead));
    g->ndead = g->dead_cap = n;
    for (uint32_t k = 0; k < n; k++)
        g->dead_redriven += e[k].redriven ? 1 : 0;
    return 0;
}

static fx_ratelimit dead_rl = FX_RATELIMIT_INIT;

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The dead-letter record of |d| (docs/groups.md): "FXDL" | u16 version 1 |
 * u64 source offset | u32 attempts | u8 reason (1 max_deliver, 2 term) |
 * u64 time (Unix us) | u16 group length, group | payload. */
static fx_buf *dead_record(const struct fxb_group *g, const fxb_gs_dead *d, fx_wire_slice p)
{
    size_t glen = strlen(g->name);
    size_t n = 4 + 2 + 8 + 4 + 1 + 8 + 2 + glen + p.len;
    fx_buf *b;
    if (fx_buf_new(&b, n) != 0)
        return NULL;
    uint8_t *o = fx_buf_data_mut(b);
    memcpy(o, "FXDL", 4);
    fx_put16(o + 4, 1);
    fx_put64(o + 6, d->offset);
    fx_put32(o + 14, d->attempts);
    o[18] = (uint8_t)d->reason;
    fx_put64(o + 19, wall_us());
    fx_put16(o + 27, (uint16_t)glen);
    memcpy(o + 29, g->name, glen);
    if (p.len > 0)
        memcpy(o + 29 + glen, p.ptr, p.len);
    return b;
}

/* The dead-letter stream of |g|: `<stream>.<group>.dlq` in the same tenant
 * and namespace, made on first use (in memory, like its source). */
static fx_stream_handle *dlq_of(struct fxb_group *g)
{
    if (g->dlq != NULL && fx_stream_handle_is_active(g->dlq))
        return g->dlq;
    if (g->dlq != NULL)
        fx_stream_handle_unref(g->dlq);
    g->dlq = NULL;
    fx_stream_handle *src = g->sg->h;
    char name[FX_REGISTRY_NAME_MAX + 1];
    int n = snprintf(name, sizeof(name), "%s.%s.dlq", fx_stream_handle_stream(src), g->name);
    if (n < 0 || (size_t)n >= sizeof(name))
        return NULL;
    const char *t = fx_stream_handle_tenant(src), *ns = fx_stream_handle_namespace(src);
    fx_registry_err err;
    if (fx_registry_create_durable(g->w->b->reg, (fx_wire_slice){(const uint8_t *)t, strlen(t)},
                                   (fx_wire_slice){(const uint8_t *)ns, strlen(ns)},
                                   (fx_wire_slice){(const uint8_t *)name, (size_t)n}, 0, &g->dlq,
                                   NULL, &err) != 0)
        return NULL;
    return g->dlq;
}

/* Appends |d|'s record to the dead-letter stream: a job queued on that
 * stream's worker like a publish (a broker-made job holds no connection and
 * no budget permit). Returns 0, or an error: the record stays a dead intent
 * and is tried again (FX_EFULL: the worker's queue is full). */
static int dlq_append(struct fxb_group *g, const gsrc *src, const fxb_gs_dead *d, uint64_t now_ns)
{
    fx_stream_handle *h = dlq_of(g);
    if (h == NULL)
        return FX_ENOSTREAM;
    fx_wire_slice p = {0};
    /* Pending records are in the ring, or loaded (the caller checked). */
    (void)src_read(src, d->offset, 1, &p);
    fx_buf *rec = dead_record(g, d, p);
    fxb_job *j = rec != NULL ? calloc(1, sizeof(*j) + sizeof(fx_wire_slice)) : NULL;
    if (j == NULL) {
        fx_buf_unref(rec);
        return -ENOMEM;
    }
    j->payloads = (fx_wire_slice *)(j + 1);
    j->payloads[0] = (fx_wire_slice){fx_buf_data(rec), fx_buf_len(rec)};
    j->count = 1;
    j->nreq = 1;
    j->payload_bytes = fx_buf_len(rec);
    j->backing = rec;
    j->h = fx_stream_handle_ref(h);
    j->w = fxb_worker_for(g->w->b, h);
    j->arrived_ns = now_ns;
    j->req.job = j;
    int rv = fx_queue_push(&j->w->jobs, j);
    if (rv != 0) {
        fxb_job_free(j);
        return rv;
    }
    fxb_worker_kick(j->w);
    return 0;
}

/* A record given up on: appended to the group's dead-letter stream, listed
 * (the original's dead-letter list) and settled for the group. Returns
 * false when the dead-letter stream cannot take it now (retried). */
static bool dead_letter(struct fxb_group *g, const gsrc *src, const fxb_gs_dead *d, uint64_t now_ns)
{
    fxb_gj_dead_intent(g, d); /* a durable stream's group: journaled before the write */
    int rv = dlq_append(g, src, d, now_ns);
    if (rv != 0) {
        fxb_gs_dead_failed(g->gs, d->offset);
        FX_COUNTER_INC(group_dead_retried);
        FX_LOG_RATELIMITED(&dead_rl, now_ns, FX_LOG_WARN, "broker",
                           "group %s: dead letter of offset %llu not written yet: %s", g->name,
                           (unsigned long long)d->offset, fx_strerror(rv));
        return false;
    }
    dead_list_add(g, d);
    fxb_gs_dead_done(g->gs, d->offset);
    if (d->reason == FXB_GS_DEAD_TERM)
        FX_COUNTER_INC(group_dead_term);
    else
        FX_COUNTER_INC(group_dead_max_deliver);
    FX_LOG_RATELIMITED(&dead_rl, now_ns, FX_LOG_WARN, "broker",
                       "group %s: offset %llu dead-lettered after %u deliveries (%s)", g->name,
                       (unsigned long long)d->offset, (unsigned)d->attempts,
                       d->reason == FXB_GS_DEAD_TERM ? "term" : "max_deliver");
    return true;
}

/* How long a dead letter the dead-letter stream could not take waits. */
#define DLQ_RETRY_NS 10000000ull

static void arm_timer(struct fxb_group *g)
{
    uint64_t d = fxb_gs_next_wakeup(g->gs);
    uint64_t at = d == UINT64_MAX ? 0 : (d + 1) * 1000; /* the lease lapses after |d| us */
    if (g->dlq_retry_ns != 0 && (at == 0 || g->dlq_retry_ns < at))
        at = g->dlq_retry_ns;
    if (at == g->timer_at_ns)
        return;
    if (g->timer_at_ns != 0)
        fx_loop_timer_cancel(g->w->loop, &g->timer);
    g->timer_at_ns = 0;
    if (at != 0 && fx_loop_timer_arm(g->w->loop, &g->timer, at) == 0)
        g->timer_at_ns = at;
    else if (at != 0)
        fx_loop_post(g->w->loop, &g->pump_task); /* no timer: poll from the loop */
}

/* A page of |g|'s log came back (or its retry is due): pump after it. */
static void on_page(void *user)
{
    struct fxb_group *g = user;
    fx_loop_post(g->w->loop, &g->pump_task);
}

static fx_ratelimit page_rl = FX_RATELIMIT_INIT;

/* The engine's view of |st| for |g|, with |src| as its user. A durable
 * stream's group reads below the ring from its log: |low| is the log's
 * first offset, retention's (what the ring still holds stays readable);
 * with no page (no memory) nothing is handed out this time, counted.
 * Returns false when there is no view now. */
static bool view_of(struct fxb_group *g, fx_stream *st, gsrc *src, fxb_gs_view *v)
{
    *src = (gsrc){.st = st};
    *v = (fxb_gs_view){.low = fx_stream_oldest(st), .tail = fx_stream_tail(st), .len = ring_len};
    v->user = src;
    if (!fx_stream_handle_is_durable(g->sg->h))
        return true;
    int rv = 0;
    if (g->page == NULL && (g->page = fxb_gpage_new(g->w, g->sg->h, on_page, g, &rv)) == NULL) {
        FX_COUNTER_INC(group_log_read_errors);
        FX_LOG_RATELIMITED(&page_rl, fx_loop_now(g->w->loop), FX_LOG_WARN, "broker",
                           "group %s: no reader of its durable stream's log: %s", g->name,
                           fx_strerror(rv));
        return false; /* the next change tries again */
    }
    src->page = g->page;
    uint64_t low = fxb_gpage_low(g->page); /* <= the ring's oldest but for retention */
    if (low < v->low)
        v->low = low;
    return true;
}

/* Dead-letters |dead| (|nd| of them). One whose payload is not loaded goes
 * back (reported again by a later pump) and is wanted in |*want|; then no
 * dead letter is taken until the page comes (|*dead_ok|). */
static void dead_letters(struct fxb_group *g, const gsrc *src, const fxb_gs_dead *dead, size_t nd,
                         uint64_t now_ns, bool *dead_ok, uint64_t *want)
{
    for (size_t i = 0; i < nd; i++) {
        fx_wire_slice p;
        bool loaded = src->page == NULL || src_read(src, dead[i].offset, 1, &p) == 1;
        if (!loaded && dead[i].offset < *want)
            *want = dead[i].offset;
        if (!loaded || !dead_letter(g, src, &dead[i], now_ns)) {
            for (size_t k = i + (loaded ? 1 : 0); k < nd; k++)
                fxb_gs_dead_failed(g->gs, dead[k].offset);
            *dead_ok = false; /* try again after DLQ_RETRY_NS, or once loaded */
            if (loaded)
                g->dlq_retry_ns = now_ns + DLQ_RETRY_NS;
            return;
        }
    }
}

static void after_pump(struct fxb_group *g);

/* Adds what the engine's lateness histogram gained since the last call to
 * felix_group_redelivery_lateness_seconds (same bounds, so bucket by
 * bucket): the engine is pure and keeps no metrics. */
_Static_assert(FXB_GS_LATE_BUCKETS == 12,
               "the engine's lateness buckets are FX_HIST_FIXED_LATENESS's eleven and +Inf");
static void count_lateness(struct fxb_group *g)
{
    const fxb_gs_stats *st = fxb_gs_stats_of(g->gs);
    for (int i = 0; i < FXB_GS_LATE_BUCKETS; i++) {
        if (st->late[i] > g->late_counted[i])
            FX_HIST_ADD_BUCKET(group_redelivery_lateness, i, st->late[i] - g->late_counted[i]);
        g->late_counted[i] = st->late[i];
    }
    if (st->late_sum_us > g->late_sum_counted)
        FX_HIST_ADD_SUM(group_redelivery_lateness, st->late_sum_us - g->late_sum_counted);
    g->late_sum_counted = st->late_sum_us;
}

/* Hands out what the group can now. */
static void pump(struct fxb_group *g)
{
    if (g->deleted)
        return;
    fx_loop *l = g->w->loop;
    uint64_t now_ns = fx_loop_now(l);
    uint64_t now_us = now_ns / 1000, want = UINT64_MAX;
    fx_stream *st = fxb_worker_stream_if_any(g->w, g->sg->h);
    gsrc src;
    fxb_gs_view v;
    if (st == NULL || !view_of(g, st, &src, &v))
        return;
    (void)fxb_gs_expire(g->gs, now_us);
    count_lateness(g);
    fxb_gs_run runs[PUMP_RUNS];
    fxb_gs_dead dead[PUMP_DEAD];
    bool dead_ok = g->dlq_retry_ns == 0 || now_ns >= g->dlq_retry_ns;
    g->dlq_retry_ns = 0;
    /* A durable stream's journal may be behind (counted): its report pumps again. */
    for (int turn = 0; fxb_gj_room(g); turn++) {
        if (turn == PUMP_TURNS) {
            fx_loop_post(l, &g->pump_task); /* more to hand out: yield first */
            break;
        }
        size_t nd = 0, cap = dead_ok ? PUMP_DEAD : 0;
        size_t n = fxb_gs_pump(g->gs, &v, now_us, runs, PUMP_RUNS, dead, cap, &nd);
        want = v.want < want ? v.want : want;
        for (size_t i = 0; i < n; i++)
            send_run(g, &src, &runs[i]);
        dead_letters(g, &src, dead, nd, now_ns, &dead_ok, &want);
        if (n < PUMP_RUNS && (nd < PUMP_DEAD || !dead_ok))
            break;
    }
    if (want != UINT64_MAX && g->page != NULL)
        fxb_gpage_want(g->page, want, fx_stream_oldest(st));
    arm_timer(g);
    after_pump(g);
    fxb_gmetric_publish(g, fx_stream_tail(st));
}

static void group_free(struct fxb_group *g);

static void pump_task_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    struct fxb_group *g = user;
    if (!g->deleted)
        pump(g);
    else if (g->joining == 0)
        group_free(g); /* else the last joiner's unjoin posts this again */
}

/* A joined member of |g| will not become one (it left, or |g| is deleted). */
static void unjoin(struct fxb_group *g)
{
    g->joining--;
    if (g->deleted && g->joining == 0)
        fx_loop_post(g->w->loop, &g->pump_task); /* frees it */
}

void fxb_group_pump(struct fxb_group *g)
{
    pump(g);
}

void fxb_group_delete(struct fxb_group *g)
{
    fxb_sgroups *sg = g->sg;
    for (struct fxb_group **pp = &sg->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    sg->n--;
    fxb_gmetric_remove(g);  /* its series go with it */
    fxb_gpoll_group_gone(g); /* its waiting JSON polls are answered empty */
    fxb_gj_detach(g, true); /* its files go */
    fx_loop_timer_cancel(g->w->loop, &g->timer);
    /* A pump task may be pending: it must not run on freed memory. */
    g->deleted = true;
    fxb_worker_hold_kick(g->w, sg->h); /* 4g: it holds no more */
    if (!fx_loop_post(g->w->loop, &g->pump_task))
        return; /* the pending run frees it */
}

static void timer_cb(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    struct fxb_group *g = user;
    g->timer_at_ns = 0;
    pump(g);
}

static void member_out(fx_loop *l, fxb_sub *sub);
static void finish_events(fxb_sub *sub);

void fxb_group_end_stream(fxb_worker *w, fx_stream_handle *h)
{
    fxb_idslot *e = fxb_idtable_find(&w->groups, fx_stream_handle_id(h));
    if (e == NULL)
        return;
    fxb_sgroups *sg = e->p;
    fxb_idtable_remove(&w->groups, e);
    while (sg->head != NULL) {
        struct fxb_group *g = sg->head;
        g->deleted = true; /* no more deliveries; joiners end when they come */
        for (uint32_t i = 0; i < g->members_cap; i++) {
            fxb_sub *sub = g->members[i];
            if (sub == NULL)
                continue;
            fxb_sub_ref(sub); /* member_out drops the group's */
            member_out(w->loop, sub);
            finish_events(sub);
            fxb_sub_unref(sub);
        }
        fxb_group_delete(g); /* unlinks it from |sg| */
    }
    fx_stream_handle_unref(sg->h);
    free(sg);
}

void fxb_group_on_append(fxb_worker *w, fx_stream_handle *h)
{
    if (fxb_idtable_count(&w->groups) == 0)
        return;
    fxb_sgroups *sg = fxb_group_sgroups(w, h);
    for (struct fxb_group *g = sg != NULL ? sg->head : NULL; g != NULL; g = g->next)
        fx_loop_post(w->loop, &g->pump_task); /* after the job: coalesced per turn */
}

/* ---- members ----------------------------------------------------------------------------- */

/* Joins |sub| to its group (created when the join asks for it). Returns 0
 * or an error with sub->grp.why set. */
static int join(fxb_sub *sub)
{
    fxb_sub_group *gp = &sub->grp;
    if (!fx_stream_handle_is_active(sub->h)) {
        gp->why = "stream deleted";
        return FX_ENOSTREAM;
    }
    fx_stream *st = fxb_worker_stream(sub->w, sub->h);
    if (st == NULL)
        return -ENOMEM;
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(sub->w, sub->h), gp->group);
    if (g == NULL) {
        if (gp->create == FXB_GROUP_NO_CREATE) {
            gp->why = "consumer group not found (join with create to make it)";
            return FX_ENOSTREAM;
        }
        if (gp->create == FXB_GROUP_CREATE_TIME) {
            gp->why = "a join does not create a group at a time: create it at a time with the "
                      "admin API ({\"start\": {\"time_ms\": T}}, durable streams only) or "
                      "join with all, new, last or an offset";
            return -ENOTSUP;
        }
        uint64_t start = start_offset(sub, st);
        if (start > fx_stream_tail(st)) {
            gp->why = "the start offset is past the stream's tail";
            return FX_ECURSOR_IN_FUTURE;
        }
        int rv;
        g = fxb_group_new(sub->w, sub->h, gp->group, start, NULL, &rv, NULL);
        if (g == NULL) {
            if (rv == FX_EFULL)
                gp->why = "max_groups_per_stream reached";
            return rv;
        }
    }
    /* The member enters the engine once its event stream is open
     * (activate): nothing is handed to it before. */
    gp->g = g;
    g->joining++;
    const fxb_gs_config *c = fxb_gs_config_of(g->gs);
    uint32_t win = gp->window != 0 ? gp->window : 256;
    gp->granted = win > c->member_window_max ? c->member_window_max : win;
    uint32_t lease = gp->ack_wait_ms != 0 ? gp->ack_wait_ms : c->ack_wait_ms;
    gp->lease_ms = lease > c->max_ack_wait_ms ? c->max_ack_wait_ms : lease;
    return 0;
}

/* Puts a joined member whose event stream is open into its group's
 * engine. Returns 0 or -ENOMEM (the member then gets nothing; its leave
 * cleans up). */
static int activate(fxb_sub *sub, uint64_t now_us)
{
    fxb_sub_group *gp = &sub->grp;
    struct fxb_group *g = gp->g;
    uint32_t mid;
    int rv = fxb_gs_member_add(g->gs, gp->granted, gp->lease_ms, &mid);
    if (rv != 0)
        return rv;
    if (members_put(g, mid, sub) != 0) {
        fxb_gs_member_remove(g->gs, mid, now_us);
        return -ENOMEM;
    }
    fxb_sub_ref(sub); /* the group's */
    gp->mid = mid;
    g->nmembers++;
    FX_GAUGE_ADD(group_members, 1);
    return 0;
}

/* Refuses a join to a group whose journal failed (its reason is in the
 * group's admin object). Returns 0 or FX_ESTORAGE_ERROR. */
static int journal_refused(fxb_sub *sub)
{
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(sub->w, sub->h), sub->grp.group);
    if (g == NULL || fxb_gj_error(g) == NULL)
        return 0;
    sub->grp.why = "the group's journal failed (see journal_error in the group's admin object)";
    return FX_ESTORAGE_ERROR;
}

void fxb_group_member_register(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_sub *sub = user;
    bool failed = false;
    /* A durable stream's ring starts where its log is: the log opens first
     * (the storage thread posts this task back with the reference), and its
     * groups are recovered before (the storage thread posts them ahead). */
    if (!atomic_load_explicit(&sub->closed, memory_order_acquire) &&
        !fxb_durable_sub_ready(sub, &failed))
        return;
    if (failed) {
        sub->grp.join_rv = sub->feed.reg_rv;
        sub->grp.why = sub->feed.reg_rv == FX_ENOSTREAM
                           ? "stream deleted"
                           : "the durable stream's log cannot be opened";
    } else if (atomic_load_explicit(&sub->closed, memory_order_acquire)) {
        sub->grp.join_rv = FX_ECLOSED;
    } else if ((sub->grp.join_rv = journal_refused(sub)) == 0) {
        sub->grp.join_rv = join(sub);
    }
    fxb_sub_post(sub, sub->conn->loop, &sub->reply_task);
    fxb_sub_unref(sub);
}

/* Takes |sub| out of its group's engine: what it holds becomes available.
 * Worker. */
static void member_out(fx_loop *l, fxb_sub *sub)
{
    fxb_sub_group *gp = &sub->grp;
    struct fxb_group *g = gp->g;
    gp->g = NULL;
    if (g != NULL && gp->mid == FXB_GS_NO_MEMBER)
        unjoin(g);
    if (g != NULL && gp->mid != FXB_GS_NO_MEMBER) {
        fxb_gs_member_remove(g->gs, gp->mid, fx_loop_now(l) / 1000);
        g->members[gp->mid] = NULL;
        gp->mid = FXB_GS_NO_MEMBER;
        g->nmembers--;
        FX_GAUGE_SUB(group_members, 1);
        pump(g);
        fxb_sub_unref(sub); /* the group's */
    }
}

void fxb_group_member_unregister(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    member_out(l, sub);
    fxb_sub_unref(sub);
}

/* Finishes |sub|'s event stream after the lists queued on it. */
static void finish_events(fxb_sub *sub)
{
    atomic_store_explicit(&sub->lane.fin_req, true, memory_order_release);
    fxb_conn_kick_writer(sub->conn);
}

void fxb_group_member_leave(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    member_out(l, sub); /* its operations queued before the FIN ran first (posted earlier) */
    finish_events(sub);
    fxb_sub_unref(sub);
}

/* ---- operations -------------------------------------------------------------------------- */

/* Applies one op; adds a refusal to |ref| (room for |cap|) when refused. */
static void apply_op(struct fxb_group *g, uint32_t mid, const fx_wire_group_op *op, uint64_t now_us,
                     fx_wire_group_refusal *ref, uint32_t cap, uint32_t *nref)
{
    fxb_gs_result r = FXB_GS_OK;
    switch (op->kind) {
    case FX_GROUP_OP_ACK: {
        uint32_t invalid = 0;
        uint32_t n = fxb_gs_ack(g->gs, op->first, op->count, now_us, &invalid);
        FX_COUNTER_ADD(group_acked, n);
        if (invalid != 0)
            r = FXB_GS_INVALID;
        break;
    }
    case FX_GROUP_OP_NAK:
        r = fxb_gs_nak(g->gs, mid, op->first, op->attempt,
                       op->arg == FX_GROUP_NAK_BACKOFF ? FXB_GS_BACKOFF : (int64_t)op->arg, now_us);
        break;
    case FX_GROUP_OP_IN_PROGRESS:
        r = fxb_gs_in_progress(g->gs, mid, op->first, op->attempt, op->arg, now_us);
        break;
    case FX_GROUP_OP_TERM:
        r = fxb_gs_term(g->gs, mid, op->first, op->attempt, now_us);
        break;
    case FX_GROUP_OP_RELEASE:
        r = fxb_gs_release(g->gs, mid, op->first, op->attempt);
        break;
    case FX_GROUP_OP_LEAVE:
        break; /* the caller ends the membership after the frame's other ops */
    }
    if (r == FXB_GS_STALE)
        FX_COUNTER_INC(group_stale_ops);
    if ((r == FXB_GS_STALE || r == FXB_GS_INVALID) && *nref < cap)
        ref[(*nref)++] = (fx_wire_group_refusal){
            op->first, r == FXB_GS_STALE ? FX_GROUP_WHY_STALE : FX_GROUP_WHY_INVALID};
}

/* Answers |o|'s request id with GROUP_ACKED. */
static void answer(struct fxb_group *g, struct fxb_gops *o, uint64_t request_id,
                   fx_wire_group_refusal *ref, uint32_t nref)
{
    fxb_gs_info info;
    fxb_gs_get_info(g->gs, &info);
    fx_wire_group_acked a = {
        .request_id = request_id, .floor = info.floor, .nrefused = nref, .refused = ref};
    size_t size = fx_wire_group_acked_frame_size(&a);
    fx_buf *f = NULL;
    if (fx_buf_new(&f, size) == 0 && fx_wire_group_acked_encode(&a, fx_buf_data_mut(f), size) < 0) {
        fx_buf_unref(f);
        f = NULL;
    }
    struct fxb_reply *r = o->reply;
    o->reply = NULL;
    if (f != NULL && fxb_gj_defer_answer(g, r, f))
        return; /* durable stream: once the records made so far are written */
    fxb_reply_complete_frame(r, f);
    if (!fx_loop_post(r->loop, &r->task))
        fxb_reply_unref(r);
}

/* Refusals one GROUP_ACKED reports; more are counted, not listed. */
#define MAX_REFUSALS 256

/* Applies one GROUP_ACKS; returns true when it ends with a leave. */
static bool apply(struct fxb_group *g, uint32_t mid, struct fxb_gops *o, uint64_t now_us)
{
    fx_wire_group_acks acks;
    fx_wire_err err;
    fx_wire_group_refusal ref[MAX_REFUSALS];
    uint32_t nref = 0;
    if (fx_wire_group_acks_decode(o->body, o->len, &acks, &err) != 0) {
        /* The connection loop decoded it before queuing: only memory. */
        FX_COUNTER_INC(group_ops_failed);
        if (o->reply != NULL)
            answer(g, o, 0, ref, 0);
        return false;
    }
    bool leave = false;
    for (uint32_t i = 0; i < acks.nops; i++) {
        apply_op(g, mid, &acks.ops[i], now_us, ref, MAX_REFUSALS, &nref);
        leave = leave || acks.ops[i].kind == FX_GROUP_OP_LEAVE;
    }
    if (o->reply != NULL)
        answer(g, o, acks.request_id, ref, nref);
    fx_wire_group_acks_deinit(&acks);
    return leave;
}


/* Takes the member's queued operations, oldest first. Their bytes stay
 * counted in the inbox until ops_applied gives them back, so the bound
 * covers the frames being applied too. */
static struct fxb_gops *ops_take(fxb_sub_group *gp)
{
    pthread_mutex_lock(&gp->mu);
    struct fxb_gops *o = gp->ops_head;
    gp->ops_head = gp->ops_tail = NULL;
    pthread_mutex_unlock(&gp->mu);
    return o;
}

/* |bytes| of the inbox were applied (or dropped with their member): a join
 * stream that stopped reading at the bound reads on once the inbox is at
 * the low mark, told on its connection's loop. */
static void ops_applied(fxb_sub *sub, size_t bytes)
{
    fxb_sub_group *gp = &sub->grp;
    bool room = false;
    pthread_mutex_lock(&gp->mu);
    gp->ops_bytes -= bytes;
    if (gp->ops_full && gp->ops_bytes <= FXB_GROUP_OPS_INBOX_LOW) {
        gp->ops_full = false;
        room = true;
    }
    pthread_mutex_unlock(&gp->mu);
    FX_GAUGE_SUB(group_ops_queued_bytes, bytes);
    if (room)
        fxb_sub_post(sub, sub->conn->loop, &gp->room_task);
}

/* A member whose event stream opened enters its group's engine at its first
 * operations task. Returns its group, or NULL when it has none (closed,
 * not active yet, or it could not enter: then its event stream ends). */
static struct fxb_group *member_enter(fxb_sub *sub, uint64_t now_us)
{
    fxb_sub_group *gp = &sub->grp;
    struct fxb_group *g = gp->g;
    if (g == NULL || gp->mid != FXB_GS_NO_MEMBER)
        return g;
    if (atomic_load_explicit(&sub->closed, memory_order_acquire) ||
        !atomic_load_explicit(&sub->active, memory_order_acquire))
        return NULL; /* its unregister comes: member_out unjoins it */
    if (g->deleted || activate(sub, now_us) != 0) {
        unjoin(g); /* deleted meanwhile, or no memory: it gets nothing, its stream ends */
        gp->g = NULL;
        finish_events(sub);
        return NULL;
    }
    g->joining--; /* a member now */
    return g;
}

void fxb_group_member_ops(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_sub *sub = user;
    fxb_sub_group *gp = &sub->grp;
    struct fxb_gops *o = ops_take(gp);
    uint64_t now_us = fx_loop_now(l) / 1000;
    struct fxb_group *g = member_enter(sub, now_us);
    size_t bytes = 0;
    while (o != NULL) {
        struct fxb_gops *next = o->next;
        if (g != NULL && apply(g, gp->mid, o, now_us)) {
            member_out(l, sub); /* pumps: what it released goes to the others */
            finish_events(sub);
            g = NULL;
        }
        bytes += gops_charge(o);
        gops_free(o); /* a reply not answered (left the group) is dropped with its stream */
        o = next;
    }
    ops_applied(sub, bytes);
    if (g != NULL)
        pump(g);
    fxb_sub_unref(sub);
}

/* ---- the ring hold (checkpoint 4g) ------------------------------------------------------- */

bool fxb_group_any(fxb_worker *w, const fx_stream_handle *h)
{
    fxb_sgroups *sg = fxb_idtable_count(&w->groups) != 0 ? fxb_group_sgroups(w, h) : NULL;
    return sg != NULL && sg->head != NULL;
}

/* |g|'s floor raised to the ring's oldest offset |oldest|, and past the
 * dead letters waiting to be written below |end| (they do not hold: one may
 * wait for room in the very queue the hold keeps full); the floor before
 * that goes to |*pdead| when it moved (else UINT64_MAX). */
static uint64_t hold_floor_of(const struct fxb_group *g, uint64_t oldest, uint64_t end,
                              uint64_t *pdead)
{
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    uint64_t f = in.floor > oldest ? in.floor : oldest, past = f;
    if (in.dead_intents > 0 && in.floor >= oldest && f < end)
        past = fxb_gs_floor_past_dead(g->gs, end);
    *pdead = past > f ? f : UINT64_MAX;
    return past;
}

uint64_t fxb_group_hold_floor(fxb_worker *w, const fx_stream_handle *h, uint64_t end,
                              uint64_t *pyield)
{
    *pyield = UINT64_MAX;
    fxb_sgroups *sg = fxb_idtable_count(&w->groups) != 0 ? fxb_group_sgroups(w, h) : NULL;
    const fx_stream *st = sg != NULL ? fxb_worker_stream_if_any(w, h) : NULL;
    if (st == NULL)
        return UINT64_MAX;
    uint64_t floor = UINT64_MAX, oldest = fx_stream_oldest(st);
    for (const struct fxb_group *g = sg->head; g != NULL; g = g->next) {
        uint64_t dead, f = hold_floor_of(g, oldest, end, &dead);
        if (g->deleted || f < g->hold_lapsed_to)
            continue;
        *pyield = dead < *pyield ? dead : *pyield;
        floor = f < floor ? f : floor;
    }
    return floor;
}

void fxb_group_hold_lapse(fxb_worker *w, const fx_stream_handle *h, uint64_t end, uint64_t tail)
{
    fxb_sgroups *sg = fxb_group_sgroups(w, h);
    const fx_stream *st = sg != NULL ? fxb_worker_stream_if_any(w, h) : NULL;
    if (st == NULL)
        return;
    for (struct fxb_group *g = sg->head; g != NULL; g = g->next) {
        uint64_t dead, f = hold_floor_of(g, fx_stream_oldest(st), end, &dead);
        if (f < end && f >= g->hold_lapsed_to)
            g->hold_lapsed_to = tail;
    }
}

/* After a pump: counts what the engine settled as skipped, and lets a held
 * append check again (the floor may have moved). */
static void after_pump(struct fxb_group *g)
{
    uint64_t skipped = fxb_gs_stats_of(g->gs)->skipped;
    if (skipped > g->skipped_counted)
        FX_COUNTER_ADD(group_skipped, skipped - g->skipped_counted);
    g->skipped_counted = skipped;
    fxb_worker_hold_kick(g->w, g->sg->h);
    fxb_gpoll_after_pump(g); /* JSON polls that got records, or whose wait is over */
}
