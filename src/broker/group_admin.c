/* Admin operations on consumer groups (broker.h, "consumer groups"): list and
 * describe, create, seek, delete, the dead-letter list, redrive and discard. Each runs on the
 * caller's thread, which asks the stream's worker loop (fx_loop_ask) to do
 * the part that touches the group and waits for it with a deadline; the
 * answer is JSON built on the worker and handed back. */
#include <errno.h>
#include <unistd.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/group.h"
#include "broker/group_int.h"
#include "broker/group_journal.h"
#include "broker/group_page.h"
#include "broker/group_settings.h"
#include "base/loop.h"
#include "broker/worker.h"
#include "felix/error.h"

/* One ask: its arguments, and what the worker answers. */
typedef struct gask {
    fx_broker *b;
    fxb_worker *w;
    fx_stream_handle *h;
    const char *group; /* NULL: every group (list) */
    int start;         /* fx_broker_group_start */
    uint64_t offset;
    fx_broker_group_settings set; /* create: its own settings (a copy: the ask may outlive
                                     its caller) */
    char whybuf[256];             /* the reason made on the worker, when |why| is NULL */
    /* answers */
    int rv;
    const char *why; /* static text when rv != 0 */
    json_t *j;
    bool created, existed;
    uint64_t made, durable; /* the group's journal records: made, and written as its policy asks */
    const char *jerr;       /* the journal's failure, or NULL */
    void (*fn)(struct gask *a); /* the part, on the worker */
} gask;

static int set_u64(json_t *o, const char *key, uint64_t v)
{
    return json_object_set_new(o, key, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
}

static void late(void *data)
{
    gask *a = data;
    json_decref(a->j);
    a->j = NULL;
}

/* Runs the part on the worker, then drops the stream reference the ask
 * took: the part always runs, even after its asker gave up waiting. */
static void part_cb(size_t i, void *data)
{
    (void)i;
    gask *a = data;
    a->fn(a);
    fx_stream_handle_unref(a->h);
    a->h = NULL;
}

/* Resolves the stream and runs |fn| on its worker. Returns 0, FX_ENOSTREAM,
 * FX_ETIMEDOUT or -ENOMEM; |a->rv| then says what the worker did. */
static int ask(fx_broker *b, const char *t, const char *ns, const char *s, gask *a,
               void (*fn)(gask *a), uint64_t timeout_ns, fx_registry_err *err)
{
    fx_stream_handle *h = fx_registry_find(b->reg, (fx_wire_slice){(const uint8_t *)t, strlen(t)},
                                           (fx_wire_slice){(const uint8_t *)ns, strlen(ns)},
                                           (fx_wire_slice){(const uint8_t *)s, strlen(s)});
    if (h == NULL) {
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg),
                     "stream not found: tenant=%s namespace=%s stream=%s", t, ns, s);
        return FX_ENOSTREAM;
    }
    a->b = b;
    a->h = h;
    a->w = fxb_worker_for(b, h);
    a->fn = fn;
    fx_loop_ask_req q = {.fn = part_cb,
                         .data = a,
                         .size = sizeof(*a),
                         .on_late = late,
                         .timeout_ns = timeout_ns > INT64_MAX ? INT64_MAX : (int64_t)timeout_ns};
    int rv = fx_loop_ask(a->w->loop, &q);
    if (rv == -ENOMEM)
        fx_stream_handle_unref(h); /* nothing was posted */
    if (rv == 0 && a->rv != 0 && err != NULL && (a->why != NULL || a->whybuf[0] != '\0'))
        snprintf(err->msg, sizeof(err->msg), "%s", a->why != NULL ? a->why : a->whybuf);
    return rv != 0 ? rv : a->rv;
}

/* ---- describe ----------------------------------------------------------------------------- */

static const char *const LATE_BOUNDS[FXB_GS_LATE_BUCKETS] = {"0.0001", "0.00025", "0.0005", "0.001",
                                                             "0.0025", "0.005",   "0.01",   "0.025",
                                                             "0.05",   "0.1",     "0.25",   "+Inf"};

static json_t *describe(const struct fxb_group *g, uint64_t tail, uint64_t now_us)
{
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    const fxb_gs_stats *st = fxb_gs_stats_of(g->gs);
    const fxb_gs_config *c = fxb_gs_config_of(g->gs);
    json_t *o = json_object();
    json_object_set_new(o, "group", json_string(g->name));
    json_object_set_new(o, "durable", json_boolean(fx_stream_handle_is_durable(g->sg->h)));
    if (g->gj != NULL) {
        set_u64(o, "journal_records_made", fxb_gj_made(g));
        set_u64(o, "journal_records_written", fxb_gj_durable(g));
        const char *je = fxb_gj_error(g);
        json_object_set_new(o, "journal_error", je != NULL ? json_string(je) : json_null());
    }
    set_u64(o, "floor", in.floor);
    set_u64(o, "next", in.next);
    set_u64(o, "tail", tail);
    set_u64(o, "lag", tail > in.floor ? tail - in.floor : 0);
    set_u64(o, "num_pending", (tail > in.next ? tail - in.next : 0) + in.available);
    set_u64(o, "num_ack_pending", (uint64_t)in.acquired + in.available);
    set_u64(o, "acquired", in.acquired);
    set_u64(o, "available", in.available);
    set_u64(o, "parked", in.parked);
    set_u64(o, "pending_bytes", in.pending_bytes);
    set_u64(o, "dead_intents", in.dead_intents);
    if (in.capped_since_us != 0)
        set_u64(o, "capped_for_ms",
                now_us > in.capped_since_us ? (now_us - in.capped_since_us) / 1000 : 0);
    else
        json_object_set_new(o, "capped_for_ms", json_null());
    json_t *cfg = json_object();
    set_u64(cfg, "ack_wait_ms", c->ack_wait_ms);
    set_u64(cfg, "max_ack_wait_ms", c->max_ack_wait_ms);
    json_object_set_new(cfg, "max_deliver", json_integer(c->max_deliver));
    set_u64(cfg, "max_ack_pending", c->max_ack_pending);
    set_u64(cfg, "max_ack_pending_bytes", c->max_ack_pending_bytes);
    set_u64(cfg, "max_parked", c->max_parked);
    set_u64(cfg, "member_window_max", c->member_window_max);
    json_t *bo = json_array();
    for (uint32_t i = 0; i < c->n_backoff; i++)
        json_array_append_new(bo, json_integer(c->backoff_ms[i]));
    json_object_set_new(cfg, "backoff_ms", bo);
    json_object_set_new(o, "config", cfg);
    json_object_set_new(o, "settings", fxb_gset_json(&g->set)); /* its own, over the defaults */
    json_t *ms = json_array();
    for (uint32_t i = 0; i < g->members_cap; i++) {
        const fxb_sub *sub = g->members[i];
        if (sub == NULL)
            continue;
        json_t *m = json_object();
        json_object_set_new(m, "name", json_string(sub->grp.member));
        set_u64(m, "subscription_id", sub->id);
        set_u64(m, "held", fxb_gs_member_held(g->gs, i));
        set_u64(m, "window", fxb_gs_member_window(g->gs, i));
        set_u64(m, "ack_wait_ms", sub->grp.lease_ms);
        json_array_append_new(ms, m);
    }
    json_object_set_new(o, "members", ms);
    set_u64(o, "delivered", st->delivered);
    set_u64(o, "redelivered", st->redelivered);
    set_u64(o, "acked", st->acked);
    set_u64(o, "duplicate_acks", st->duplicate_acks);
    set_u64(o, "naked", st->naked);
    set_u64(o, "in_progress", st->in_progress);
    set_u64(o, "released", st->released);
    set_u64(o, "expired", st->expired);
    json_t *stale = json_object();
    set_u64(stale, "nak", st->stale[0]);
    set_u64(stale, "in_progress", st->stale[1]);
    set_u64(stale, "term", st->stale[2]);
    set_u64(stale, "release", st->stale[3]);
    json_object_set_new(o, "stale", stale);
    set_u64(o, "invalid", st->invalid);
    json_t *dead = json_object();
    set_u64(dead, "max_deliver", st->dead[FXB_GS_DEAD_MAX_DELIVER]);
    set_u64(dead, "term", st->dead[FXB_GS_DEAD_TERM]);
    json_object_set_new(o, "dead_lettered", dead);
    set_u64(o, "dead_letters_listed", g->ndead);
    set_u64(o, "dead_letters_forgotten", g->dead_forgotten);
    char dlq[FX_REGISTRY_NAME_MAX + 1];
    snprintf(dlq, sizeof(dlq), "%s.%s.dlq", fx_stream_handle_stream(g->sg->h), g->name);
    json_object_set_new(o, "dead_letter_stream", json_string(dlq));
    set_u64(o, "redriven", st->redriven);
    set_u64(o, "skipped", st->skipped);
    set_u64(o, "capped", st->capped);
    set_u64(o, "member_full", st->member_full);
    set_u64(o, "parked_overflow", st->parked_overflow);
    set_u64(o, "log_waits", st->waits);
    json_t *late_h = json_object();
    uint64_t cum = 0, n = 0;
    for (int i = 0; i < FXB_GS_LATE_BUCKETS; i++) {
        cum += st->late[i];
        set_u64(late_h, LATE_BOUNDS[i], cum);
    }
    n = cum;
    json_t *late_o = json_object();
    json_object_set_new(late_o, "buckets", late_h);
    set_u64(late_o, "count", n);
    set_u64(late_o, "sum_us", st->late_sum_us);
    json_object_set_new(o, "redelivery_lateness", late_o);
    return o;
}

static void list_part(gask *a)
{
    fx_stream *st = fxb_worker_stream_if_any(a->w, a->h);
    uint64_t tail = st != NULL ? fx_stream_tail(st) : 0;
    uint64_t now_us = fx_loop_now(a->w->loop) / 1000;
    fxb_sgroups *sg = fxb_group_sgroups(a->w, a->h);
    if (a->group != NULL) {
        struct fxb_group *g = fxb_group_find(sg, a->group);
        if (g == NULL) {
            a->rv = FX_ENOSTREAM;
            a->why = "consumer group not found";
            return;
        }
        fxb_group_dead_prune(g, false);
        a->j = describe(g, tail, now_us);
        return;
    }
    json_t *arr = json_array();
    for (struct fxb_group *g = sg != NULL ? sg->head : NULL; g != NULL; g = g->next) {
        fxb_group_dead_prune(g, false);
        json_array_append_new(arr, describe(g, tail, now_us));
    }
    a->j = json_object();
    json_object_set_new(a->j, "groups", arr);
}

static int dump(json_t *j, char **pjson)
{
    if (j == NULL)
        return -ENOMEM;
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    if (s == NULL)
        return -ENOMEM;
    *pjson = s;
    return 0;
}

int fx_broker_list_groups(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                          const char *group, uint64_t timeout_ns, char **pjson,
                          fx_registry_err *err)
{
    gask a = {.group = group};
    int rv = ask(b, tenant, ns, stream, &a, list_part, timeout_ns, err);
    if (rv != 0) {
        json_decref(a.j);
        return rv;
    }
    return dump(a.j, pjson);
}

/* ---- create, seek, delete ------------------------------------------------------------------ */

int fxb_group_span(fxb_worker *w, fx_stream_handle *h, const fx_stream *st, uint64_t *poldest,
                   uint64_t *ptail)
{
    *poldest = st != NULL ? fx_stream_oldest(st) : 0;
    *ptail = st != NULL ? fx_stream_tail(st) : 0;
    if (!fx_stream_handle_is_durable(h))
        return 0;
    uint64_t first = 0, next = 0;
    if (fxb_gpage_log_span(w, h, &first, &next) == -EAGAIN)
        return FX_ESTORAGE_ERROR;
    if (st == NULL)
        *ptail = next;
    if (first < *poldest)
        *poldest = first;
    return 0;
}

/* fxb_group_span for |a|'s stream; false with |a->rv| when its log is not
 * open now. */
static bool span_of(gask *a, const fx_stream *st, uint64_t *poldest, uint64_t *ptail)
{
    if (fxb_group_span(a->w, a->h, st, poldest, ptail) == 0)
        return true;
    a->rv = FX_ESTORAGE_ERROR;
    a->why = "the durable stream's log is not open (recovering, damaged or failed)";
    return false;
}

/* The first offset a start names, on stream |st| (NULL: a durable stream
 * with no ring here yet). Returns false when it is past the tail or the
 * stream's log is not open (|a->rv| set). */
static bool start_of(gask *a, const fx_stream *st, uint64_t *out)
{
    uint64_t oldest, tail;
    if (!span_of(a, st, &oldest, &tail))
        return false;
    switch (a->start) {
    case FX_BROKER_GROUP_START_NEW:
        *out = tail;
        break;
    case FX_BROKER_GROUP_START_LAST:
        *out = tail > oldest ? tail - 1 : tail;
        break;
    case FX_BROKER_GROUP_START_OFFSET:
        *out = a->offset;
        break;
    default:
        *out = oldest;
        break;
    }
    if (*out > tail) {
        a->rv = FX_ECURSOR_IN_FUTURE;
        a->why = "the start offset is past the stream's tail";
    }
    return *out <= tail;
}

static void create_part(gask *a)
{
    struct fxb_group *old = fxb_group_find(fxb_group_sgroups(a->w, a->h), a->group);
    if (old != NULL) {
        /* Exists: idempotent when every setting asked is the group's. */
        char diff[192];
        if (fxb_gset_differs(&a->set, fxb_gs_config_of(old->gs), diff, sizeof(diff))) {
            a->rv = -EEXIST;
            snprintf(a->whybuf, sizeof(a->whybuf),
                     "the consumer group exists with other settings: %s", diff);
        }
        return;
    }
    /* A durable stream's ring starts at its log's offset, which only its
     * storage answer gives: no ring is made here for one. */
    bool durable = fx_stream_handle_is_durable(a->h);
    fx_stream *st = durable ? fxb_worker_stream_if_any(a->w, a->h) : fxb_worker_stream(a->w, a->h);
    uint64_t start;
    if (st == NULL && !durable) {
        a->rv = -ENOMEM;
        return;
    }
    if (!start_of(a, st, &start))
        return;
    int rv;
    const char *why = NULL;
    if (fxb_group_new(a->w, a->h, a->group, start, &a->set, &rv, &why) == NULL) {
        a->rv = rv;
        a->why = rv == FX_EFULL ? "max_groups_per_stream reached" : rv == -EINVAL ? why : NULL;
        return;
    }
    a->created = true;
}

int fx_broker_create_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                           const char *group, int start, uint64_t offset,
                           const fx_broker_group_settings *set, uint64_t timeout_ns, bool *pcreated,
                           fx_registry_err *err)
{
    size_t len = strlen(group);
    fx_registry_err nerr;
    if (len == 0 || len > FXB_GROUP_NAME_MAX ||
        fx_registry_name_check("group", (fx_wire_slice){(const uint8_t *)group, len}, &nerr) != 0) {
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg),
                     "group names must be 1 to 128 bytes of UTF-8 with no '/'");
        return FX_EWIRE_NAME;
    }
    gask a = {.group = group, .start = start, .offset = offset};
    if (set != NULL)
        a.set = *set;
    int rv = ask(b, tenant, ns, stream, &a, create_part, timeout_ns, err);
    if (pcreated != NULL)
        *pcreated = a.created;
    return rv;
}

static void seek_part(gask *a)
{
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(a->w, a->h), a->group);
    if (g == NULL) {
        a->rv = FX_ENOSTREAM;
        a->why = "consumer group not found";
        return;
    }
    fx_stream *st = fxb_worker_stream_if_any(a->w, a->h);
    uint64_t to;
    if (!start_of(a, st, &to)) {
        if (a->rv == FX_ECURSOR_IN_FUTURE)
            a->why = "the offset is past the stream's tail";
        return;
    }
    fxb_gs_seek(g->gs, to);
    fxb_group_dead_prune(g, true); /* redriven records are dropped with the rest */
    fxb_group_pump(g);
}

int fx_broker_seek_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                         const char *group, int start, uint64_t offset, uint64_t timeout_ns,
                         fx_registry_err *err)
{
    gask a = {.group = group, .start = start, .offset = offset};
    return ask(b, tenant, ns, stream, &a, seek_part, timeout_ns, err);
}

static void delete_part(gask *a)
{
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(a->w, a->h), a->group);
    if (g == NULL)
        return;
    a->existed = true;
    if (g->nmembers + g->joining > 0) {
        a->rv = -EBUSY;
        a->why = "the consumer group has members joined: they must leave before it is deleted";
        return;
    }
    fxb_group_delete(g);
}

int fx_broker_delete_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                           const char *group, uint64_t timeout_ns, bool *pexisted,
                           fx_registry_err *err)
{
    gask a = {.group = group};
    int rv = ask(b, tenant, ns, stream, &a, delete_part, timeout_ns, err);
    if (pexisted != NULL)
        *pexisted = a.existed;
    return rv;
}

/* ---- dead letters -------------------------------------------------------------------------- */

static void dead_part(gask *a)
{
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(a->w, a->h), a->group);
    if (g == NULL) {
        a->rv = FX_ENOSTREAM;
        a->why = "consumer group not found";
        return;
    }
    fxb_group_dead_prune(g, false);
    json_t *arr = json_array();
    for (uint32_t k = 0; k < g->ndead; k++) {
        json_t *e = json_object();
        set_u64(e, "offset", g->dead[k].offset);
        set_u64(e, "attempts", g->dead[k].attempts);
        json_object_set_new(
            e, "reason",
            json_string(g->dead[k].reason == FXB_GS_DEAD_TERM ? "term" : "max_deliver"));
        json_object_set_new(e, "redriven", json_boolean(g->dead[k].redriven));
        json_array_append_new(arr, e);
    }
    a->j = json_object();
    json_object_set_new(a->j, "dead_letters", arr);
    set_u64(a->j, "forgotten", g->dead_forgotten);
}

int fx_broker_group_dead_letters(fx_broker *b, const char *tenant, const char *ns,
                                 const char *stream, const char *group, uint64_t timeout_ns,
                                 char **pjson, fx_registry_err *err)
{
    gask a = {.group = group};
    int rv = ask(b, tenant, ns, stream, &a, dead_part, timeout_ns, err);
    if (rv != 0) {
        json_decref(a.j);
        return rv;
    }
    return dump(a.j, pjson);
}

/* ---- redrive and discard ------------------------------------------------------------------- */

/* The dead-letter entry of |offset| in |g|, not redriven (redriven records
 * acked since are dropped first), or NULL with the reason in |why|. */
static fxb_dead_entry *dead_entry_of(struct fxb_group *g, uint64_t offset, char *why, size_t cap)
{
    fxb_group_dead_prune(g, false);
    fxb_dead_entry *e = fxb_group_dead_find(g, offset);
    if (e == NULL || e->redriven) {
        snprintf(why, cap, "offset %llu is not a dead letter of %s", (unsigned long long)offset,
                 g->name);
        return NULL;
    }
    return e;
}

int fxb_group_redrive(struct fxb_group *g, uint64_t offset, char *why, size_t cap)
{
    fxb_dead_entry *e = dead_entry_of(g, offset, why, cap);
    if (e == NULL)
        return -ESRCH;
    /* The record must still be readable: the ring of an in-memory stream,
     * the log of a durable one (a redriven record below the ring is read
     * from it, group_page.h). One no longer there is refused, not skipped. */
    gask a = {.w = g->w, .h = g->sg->h};
    fx_stream *st = fxb_worker_stream_if_any(a.w, a.h);
    uint64_t oldest = 0, tail = 0;
    if (!span_of(&a, st, &oldest, &tail)) {
        snprintf(why, cap, "%s", a.why != NULL ? a.why : fx_strerror(a.rv));
        return a.rv;
    }
    if ((st == NULL && !fx_stream_handle_is_durable(a.h)) || offset < oldest || offset >= tail) {
        snprintf(why, cap, "offset %llu is no longer in the stream", (unsigned long long)offset);
        return FX_ECURSOR_TOO_OLD;
    }
    int rv = fxb_gs_redrive(g->gs, offset, fx_loop_now(g->w->loop) / 1000);
    if (rv == -ENOENT) { /* listed, but owed already (a seek back handed it out again) */
        snprintf(why, cap, "offset %llu is not a dead letter of %s", (unsigned long long)offset,
                 g->name);
        return -ESRCH;
    }
    if (rv == -ENOSPC)
        snprintf(why, cap,
                 "the group's pending records are at max_ack_pending + max_parked: "
                 "redrive later");
    else if (rv != 0)
        snprintf(why, cap, "%s", fx_strerror(rv));
    if (rv != 0)
        return rv;
    e->redriven = true;
    g->dead_redriven++;
    fxb_group_pump(g);
    return 0;
}

int fxb_group_discard(struct fxb_group *g, uint64_t offset, char *why, size_t cap)
{
    fxb_dead_entry *e = dead_entry_of(g, offset, why, cap);
    if (e == NULL)
        return -ESRCH;
    fxb_group_dead_remove(g, e);
    fxb_gj_discard(g, offset);
    return 0;
}

/* The group of |a| for a redrive or discard, or NULL with |a->rv| set. */
static struct fxb_group *group_of(gask *a)
{
    struct fxb_group *g = fxb_group_find(fxb_group_sgroups(a->w, a->h), a->group);
    if (g == NULL) {
        a->rv = FX_ENOSTREAM;
        a->why = "consumer group not found";
    }
    return g;
}

static void redrive_part(gask *a)
{
    struct fxb_group *g = group_of(a);
    if (g != NULL)
        a->rv = fxb_group_redrive(g, a->offset, a->whybuf, sizeof(a->whybuf));
    if (g != NULL && a->rv == 0)
        a->made = fxb_gj_made(g);
}

static void journal_part(gask *a)
{
    struct fxb_group *g = group_of(a);
    if (g != NULL) {
        a->durable = fxb_gj_durable(g);
        a->jerr = fxb_gj_error(g);
    }
}

/* Waits until the journal of a durable stream's group wrote its first
 * |made| records (flushed as the stream's policy asks), so that a redrive
 * or discard answered ok survives a crash. A group in memory has none. */
static int wait_journal(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                        const char *group, uint64_t made, uint64_t timeout_ns,
                        fx_registry_err *err)
{
    /* Polls every millisecond (slept, so a test's stopped clock cannot
     * hold it forever). */
    for (uint64_t waited_ns = 0;; waited_ns += 1000000) {
        gask q = {.group = group};
        int rv = ask(b, tenant, ns, stream, &q, journal_part,
                     timeout_ns > waited_ns ? timeout_ns - waited_ns : 0, err);
        if (rv != 0)
            return rv;
        if (q.jerr != NULL) {
            if (err != NULL)
                snprintf(err->msg, sizeof(err->msg), "the group's journal failed: %s", q.jerr);
            return FX_ESTORAGE_ERROR;
        }
        if (q.durable >= made)
            return 0;
        if (waited_ns >= timeout_ns) {
            if (err != NULL)
                snprintf(err->msg, sizeof(err->msg),
                         "the group's journal did not write the change in time (it is applied "
                         "and will be written)");
            return FX_ETIMEDOUT;
        }
        usleep(1000);
    }
}

int fx_broker_redrive_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            const char *group, uint64_t offset, uint64_t timeout_ns,
                            fx_registry_err *err)
{
    uint64_t t0 = fx_now_ns();
    gask a = {.group = group, .offset = offset};
    int rv = ask(b, tenant, ns, stream, &a, redrive_part, timeout_ns, err);
    uint64_t spent = fx_now_ns() - t0;
    if (rv == 0 && a.made != 0)
        rv = wait_journal(b, tenant, ns, stream, group, a.made,
                          timeout_ns > spent ? timeout_ns - spent : 0, err);
    return rv;
}

static void discard_part(gask *a)
{
    struct fxb_group *g = group_of(a);
    if (g != NULL)
        a->rv = fxb_group_discard(g, a->offset, a->whybuf, sizeof(a->whybuf));
    if (g != NULL && a->rv == 0)
        a->made = fxb_gj_made(g);
}

int fx_broker_discard_group(fx_broker *b, const char *tenant, const char *ns, const char *stream,
                            const char *group, uint64_t offset, uint64_t timeout_ns,
                            fx_registry_err *err)
{
    uint64_t t0 = fx_now_ns();
    gask a = {.group = group, .offset = offset};
    int rv = ask(b, tenant, ns, stream, &a, discard_part, timeout_ns, err);
    uint64_t spent = fx_now_ns() - t0;
    if (rv == 0 && a.made != 0)
        rv = wait_journal(b, tenant, ns, stream, group, a.made,
                          timeout_ns > spent ? timeout_ns - spent : 0, err);
    return rv;
}
