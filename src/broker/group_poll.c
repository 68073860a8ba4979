/* The original's JSON consumer-group requests on the stream's worker loop
 * (group_poll.h): each runs on its group's engine and is answered through
 * its reply slot. A poll is served by a poll member (one engine member per
 * consumer name, anonymous polls sharing the name ""), whose window the
 * waiting poll at the head of its queue opens (held + records still
 * wanted, within the group's member_window_max, checkpoint 5m; the group's
 * max_ack_pending, 5g, bounds them all); the group stage hands that member's
 * runs here (fxb_gpoll_deliver) instead of pushing them on a lane, and
 * after each pump the polls that got records, or whose wait is over, are
 * answered. Held records stay held (their lease is the poll's
 * visibility_ms) until acked, naked, dead-lettered or lapsed. Worker loop. */
#include "broker/group_poll.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/group_int.h"
#include "broker/group_journal.h"
#include "broker/group_json.h"
#include "broker/reply.h"
#include "broker/worker.h"
#include "felix/error.h"

/* A poll member: its engine id and its polls waiting, oldest first (the
 * head's window is open). */
struct fxb_gpm {
    struct fxb_gpm *next;
    uint32_t mid;
    fxb_gjreq *head, *tail;
    char name[FXB_GROUP_NAME_MAX + 1];
};

/* A group's poll part (fxb_group.poll). */
struct fxb_gpoll {
    struct fxb_gpm *members;
    uint32_t nmembers;
    uint32_t waiting; /* polls queued on its members */
};

void fxb_gjreq_free(fxb_gjreq *q)
{
    if (q == NULL)
        return;
    for (uint32_t i = 0; i < q->nrecs; i++)
        free((void *)q->recs[i].payload.p);
    free(q->recs);
    if (q->reply != NULL)
        fxb_reply_unref(q->reply);
    fx_stream_handle_unref(q->h);
    free(q);
}

/* ---- answers ----------------------------------------------------------------------------- */

/* Completes |q|'s reply with |f| (NULL: could not be encoded, the stream is
 * reset) and frees |q|. */
static void complete(fxb_gjreq *q, fx_buf *f)
{
    struct fxb_reply *r = q->reply;
    q->reply = NULL;
    fxb_reply_complete_frame(r, f);
    if (!fx_loop_post(r->loop, &r->task))
        fxb_reply_unref(r);
    fxb_gjreq_free(q);
}

static fx_buf *frame_of(const fx_msg *m)
{
    fx_buf *f = NULL;
    if (fxb_msg_frame(m, &f) != 0) {
        FX_COUNTER_INC(group_json_refused_internal);
        return NULL;
    }
    return f;
}

static void answer(fxb_gjreq *q, const fx_msg *m)
{
    complete(q, frame_of(m));
}

/* Answers after the records the group's journal has made so far are
 * durable (a durable stream's group), else now: an ack is answered once it
 * would survive a restart, as the binary GROUP_ACKED is. */
static void answer_durable(fxb_gjreq *q, struct fxb_group *g, const fx_msg *m)
{
    fx_buf *f = frame_of(m);
    if (f != NULL && fxb_gj_defer_answer(g, q->reply, f)) {
        q->reply = NULL; /* taken */
        fxb_gjreq_free(q);
        return;
    }
    complete(q, f);
}

static void answer_ok(fxb_gjreq *q, struct fxb_group *g)
{
    fx_msg m = {.type = FX_MSG_CACHE_OK, .request_id = q->request_id, .has_request_id = true};
    answer_durable(q, g, &m);
}

static __attribute__((format(printf, 3, 4))) void refuse(fxb_gjreq *q, fxb_gjerr e, const char *fmt,
                                                         ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fx_msg m;
    fxb_gjson_error(&m, q->features, e, text);
    answer(q, &m);
}

/* ---- the group and the stream ------------------------------------------------------------ */

static struct fxb_group *group_of(const fxb_gjreq *q)
{
    return fxb_group_find(fxb_group_sgroups(q->w, q->h), q->group);
}

/* The stream's ring on this worker: made for a stream in memory; a durable
 * stream's comes with its log (NULL until then). */
static fx_stream *stream_of(fxb_gjreq *q)
{
    return fx_stream_handle_is_durable(q->h) ? fxb_worker_stream_if_any(q->w, q->h)
                                             : fxb_worker_stream(q->w, q->h);
}

/* The stream's oldest offset and tail; false (refused) when its log is not
 * open. */
static bool span(fxb_gjreq *q, uint64_t *poldest, uint64_t *ptail)
{
    if (fxb_group_span(q->w, q->h, stream_of(q), poldest, ptail) == 0)
        return true;
    refuse(q, FXB_GJ_INTERNAL,
           "the durable stream's log is not open (recovering, damaged or failed)");
    return false;
}

/* A new group of the request's stream starting at |start|; NULL when
 * refused (answered). */
static struct fxb_group *group_new(fxb_gjreq *q, uint64_t start)
{
    int rv;
    struct fxb_group *g = fxb_group_new(q->w, q->h, q->group, start, NULL, &rv, NULL);
    if (g != NULL)
        return g;
    if (rv == FX_EFULL)
        refuse(q, FXB_GJ_OVERLOADED, "max_groups_per_stream reached on %.128s",
               fx_stream_handle_stream(q->h));
    else
        refuse(q, FXB_GJ_INTERNAL, "consumer group %s could not be made: %s", q->group,
               fx_strerror(rv));
    return NULL;
}

/* The refusal of an op on |offset| >= next: stale_claim below the tail (an
 * old claim, the record will be delivered again), else invalid_request. */
static void not_handed_out(fxb_gjreq *q, struct fxb_group *g)
{
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    uint64_t oldest = 0, tail = 0;
    (void)fxb_group_span(q->w, q->h, stream_of(q), &oldest, &tail); /* tail 0: invalid */
    if (q->offset < tail)
        refuse(q, FXB_GJ_STALE,
               "offset %llu was not handed out by this group (next is %llu); the claim is stale "
               "and the record will be delivered again",
               (unsigned long long)q->offset, (unsigned long long)in.next);
    else
        refuse(q, FXB_GJ_INVALID, "offset %llu was not handed out by this group (next is %llu)",
               (unsigned long long)q->offset, (unsigned long long)in.next);
}

static void claim_gone(fxb_gjreq *q)
{
    refuse(q, FXB_GJ_STALE_FATAL, "the claim on offset %llu no longer stands",
           (unsigned long long)q->offset);
}

/* ---- poll members ------------------------------------------------------------------------ */

static struct fxb_gpm *pm_of(const struct fxb_group *g, uint32_t mid)
{
    for (struct fxb_gpm *pm = g->poll != NULL ? g->poll->members : NULL; pm != NULL; pm = pm->next)
        if (pm->mid == mid)
            return pm;
    return NULL;
}

bool fxb_gpoll_is_member(const struct fxb_group *g, uint32_t mid)
{
    return pm_of(g, mid) != NULL;
}

/* The poll member |name| of |g|, made (window closed) when new. 0,
 * FX_EFULL (FXB_GPOLL_MAX_MEMBERS) or -ENOMEM. */
static int pm_get(struct fxb_group *g, const char *name, struct fxb_gpm **ppm)
{
    struct fxb_gpoll *p = g->poll;
    for (struct fxb_gpm *pm = p->members; pm != NULL; pm = pm->next) {
        if (strcmp(pm->name, name) == 0) {
            *ppm = pm;
            return 0;
        }
    }
    if (p->nmembers >= FXB_GPOLL_MAX_MEMBERS)
        return FX_EFULL;
    struct fxb_gpm *pm = calloc(1, sizeof(*pm));
    if (pm == NULL || fxb_gs_member_add(g->gs, 1, 0, &pm->mid) != 0) {
        free(pm);
        return -ENOMEM;
    }
    fxb_gs_member_set_window(g->gs, pm->mid, 0); /* open only while a poll waits */
    snprintf(pm->name, sizeof(pm->name), "%s", name);
    pm->next = p->members;
    p->members = pm;
    p->nmembers++;
    *ppm = pm;
    return 0;
}

/* Opens |pm|'s window for its head poll (held + what it still wants), with
 * that poll's lease; closes it when no poll waits. */
static void pm_open(struct fxb_group *g, struct fxb_gpm *pm)
{
    fxb_gjreq *q = pm->head;
    if (q == NULL) {
        fxb_gs_member_set_window(g->gs, pm->mid, 0);
        return;
    }
    uint64_t w = (uint64_t)fxb_gs_member_held(g->gs, pm->mid) + (q->max_records - q->nrecs);
    fxb_gs_member_set_lease(
        g->gs, pm->mid, q->visibility_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)q->visibility_ms);
    fxb_gs_member_set_window(g->gs, pm->mid, w > UINT32_MAX ? UINT32_MAX : (uint32_t)w);
}

/* Takes |q| off |pm|'s queue (|prev| before it, NULL: the head). */
static void pm_unlink(struct fxb_group *g, struct fxb_gpm *pm, fxb_gjreq *prev, fxb_gjreq *q)
{
    if (prev != NULL)
        prev->next = q->next;
    else
        pm->head = q->next;
    if (pm->tail == q)
        pm->tail = prev;
    q->next = NULL;
    g->poll->waiting--;
    FX_GAUGE_SUB(group_json_polls_waiting, 1);
    if (q->timer_armed)
        fx_loop_timer_cancel(g->w->loop, &q->timer);
    q->timer_armed = false;
}

/* Answers a poll taken off its queue with what it collected. */
static void poll_answer(fxb_gjreq *q)
{
    if (q->nrecs == 0)
        FX_COUNTER_INC(group_json_polls_empty);
    if ((q->features & FX_FEATURE_GROUP_SKIPPED) == 0)
        for (uint32_t i = 0; i < q->nrecs; i++)
            q->recs[i].skipped_before = 0;
    fx_msg m = {.type = FX_MSG_GROUP_RECORDS,
                .records = q->recs,
                .n_records = q->nrecs,
                .request_id = q->request_id,
                .has_request_id = true};
    answer(q, &m);
}

int fxb_gpoll_deliver(struct fxb_group *g, const fxb_gs_run *r, const fx_wire_slice *sl)
{
    struct fxb_gpm *pm = pm_of(g, r->member);
    fxb_gjreq *q = pm != NULL ? pm->head : NULL;
    if (q == NULL)
        return 0; /* no poll waits (its window should be shut): given back */
    uint32_t n = 0;
    bool nomem = false;
    for (; n < r->count && q->nrecs < q->recs_cap; n++) {
        if (q->nrecs > 0 && q->bytes + sl[n].len > FXB_GPOLL_MAX_BYTES)
            break;
        uint8_t *p = malloc(sl[n].len != 0 ? sl[n].len : 1);
        if (p == NULL) {
            nomem = true;
            break;
        }
        memcpy(p, sl[n].ptr, sl[n].len);
        q->recs[q->nrecs++] = (fx_msg_group_record){
            .offset = r->first + n,
            .payload = {p, sl[n].len},
            .attempts = r->attempt,
            .skipped_before = n == 0 ? r->skipped_before : 0,
        };
        q->bytes += sl[n].len;
    }
    if (n < r->count) /* the byte bound (or no memory): nothing more for this poll */
        fxb_gs_member_set_window(g->gs, pm->mid, fxb_gs_member_held(g->gs, pm->mid));
    return nomem && n == 0 ? -ENOMEM : (int)n;
}

/* Answers |pm|'s polls that got records or whose wait is over. Returns
 * true when the head changed (the next poll's window opens). */
static bool pm_settle(struct fxb_group *g, struct fxb_gpm *pm, uint64_t now_ns)
{
    bool changed = false;
    fxb_gjreq *prev = NULL, *q = pm->head;
    while (q != NULL) {
        fxb_gjreq *next = q->next;
        if (q->nrecs > 0 || now_ns >= q->deadline_ns) {
            changed = changed || prev == NULL;
            pm_unlink(g, pm, prev, q);
            poll_answer(q);
        } else {
            prev = q;
        }
        q = next;
    }
    return changed;
}

void fxb_gpoll_after_pump(struct fxb_group *g)
{
    if (g->poll == NULL || g->poll->waiting == 0)
        return;
    uint64_t now_ns = fx_loop_now(g->w->loop);
    bool again = false;
    for (struct fxb_gpm *pm = g->poll->members; pm != NULL; pm = pm->next) {
        if (pm_settle(g, pm, now_ns) && pm->head != NULL)
            again = true;
        pm_open(g, pm);
    }
    if (again)
        fx_loop_post(g->w->loop, &g->pump_task); /* the next polls' windows are open */
}

/* A poll's wait is over: the group pumps once more (a lapse due now goes to
 * it), then answers it with what it has. */
static void wait_cb(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_gjreq *q = user;
    struct fxb_group *g = q->g;
    q->timer_armed = false;
    fxb_group_pump(g);
    fxb_gpoll_after_pump(g); /* also when the pump had no view (no ring yet) */
}

void fxb_gpoll_group_gone(struct fxb_group *g)
{
    if (g->poll == NULL)
        return;
    for (struct fxb_gpm *pm = g->poll->members; pm != NULL; pm = pm->next) {
        while (pm->head != NULL) {
            fxb_gjreq *q = pm->head;
            pm_unlink(g, pm, NULL, q);
            poll_answer(q);
        }
    }
}

void fxb_gpoll_free(struct fxb_group *g)
{
    struct fxb_gpoll *p = g->poll;
    if (p == NULL)
        return;
    while (p->members != NULL) {
        struct fxb_gpm *pm = p->members;
        p->members = pm->next;
        while (pm->head != NULL) {
            fxb_gjreq *q = pm->head;
            pm_unlink(g, pm, NULL, q);
            fxb_gjreq_free(q); /* teardown: unanswered, its stream is going too */
        }
        free(pm);
    }
    free(p);
    g->poll = NULL;
}

/* ---- the requests ------------------------------------------------------------------------ */

/* Queues poll |q| on its member and pumps; answered by the pump's end when
 * records came or wait_ms is 0, else at them or at its deadline. */
static void do_poll(fxb_gjreq *q, struct fxb_group *g, uint64_t now_ns)
{
    if (g->poll == NULL && (g->poll = calloc(1, sizeof(*g->poll))) == NULL) {
        refuse(q, FXB_GJ_INTERNAL, "out of memory for the group's polls");
        return;
    }
    struct fxb_gpoll *p = g->poll;
    if (p->waiting >= FXB_GPOLL_MAX_WAITING) {
        refuse(q, FXB_GJ_OVERLOADED, "%u polls already wait on group %s: try again later",
               (unsigned)p->waiting, g->name);
        return;
    }
    struct fxb_gpm *pm;
    int rv = pm_get(g, q->consumer, &pm);
    if (rv != 0) {
        refuse(q, rv == FX_EFULL ? FXB_GJ_OVERLOADED : FXB_GJ_INTERNAL,
               rv == FX_EFULL ? "group %s has %u consumers polling: no new consumer name now"
                              : "out of memory for a consumer of group %s (%u consumers)",
               g->name, (unsigned)p->nmembers);
        return;
    }
    q->recs_cap = q->max_records;
    if (q->max_records != 0 && (q->recs = calloc(q->max_records, sizeof(*q->recs))) == NULL) {
        refuse(q, FXB_GJ_INTERNAL, "out of memory for a poll's records");
        return;
    }
    q->g = g;
    q->pm = pm;
    q->deadline_ns = q->max_records == 0 ? now_ns : now_ns + q->wait_ms * 1000000u;
    fx_timer_init(&q->timer, wait_cb, q);
    if (q->deadline_ns > now_ns) {
        if (fx_loop_timer_arm(g->w->loop, &q->timer, q->deadline_ns) == 0)
            q->timer_armed = true;
        else
            q->deadline_ns = now_ns; /* no timer: answered at once, counted */
        if (!q->timer_armed)
            FX_COUNTER_INC(broker_timer_arm_failures);
    }
    if (pm->tail != NULL)
        pm->tail->next = q;
    else
        pm->head = q;
    pm->tail = q;
    p->waiting++;
    FX_GAUGE_ADD(group_json_polls_waiting, 1);
    if (pm->head == q)
        pm_open(g, pm);
    fxb_group_pump(g);
    fxb_gpoll_after_pump(g); /* |q| may be answered (freed) by now */
}

static void do_ack(fxb_gjreq *q, struct fxb_group *g, uint64_t now_us)
{
    if (fxb_gs_lookup(g->gs, q->offset, NULL, NULL) == FXB_GS_NEVER) {
        not_handed_out(q, g);
        return;
    }
    uint32_t n = fxb_gs_ack(g->gs, q->offset, 1, now_us, NULL); /* below the floor: harmless */
    FX_COUNTER_ADD(group_acked, n);
    fxb_group_pump(g); /* room under the caps: the waiting polls may get it */
    answer_ok(q, g);
}

static void do_nack(fxb_gjreq *q, struct fxb_group *g, uint64_t now_us)
{
    uint32_t mid = 0, att = 0;
    fxb_gs_where where = fxb_gs_lookup(g->gs, q->offset, &mid, &att);
    if (where == FXB_GS_NEVER) {
        not_handed_out(q, g);
        return;
    }
    if (q->attempts != 0 && (where != FXB_GS_HELD || att != q->attempts)) {
        claim_gone(q);
        return;
    }
    if (where == FXB_GS_HELD) { /* else settled, or owed already: nothing to do */
        int64_t delay = q->delay_ms > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)q->delay_ms;
        (void)fxb_gs_nak(g->gs, mid, q->offset, att, delay, now_us); /* held: cannot be stale */
        fxb_group_pump(g);
    }
    answer_ok(q, g);
}

static void do_extend(fxb_gjreq *q, struct fxb_group *g, uint64_t now_us)
{
    uint32_t mid = 0, att = 0;
    fxb_gs_where where = fxb_gs_lookup(g->gs, q->offset, &mid, &att);
    if (where == FXB_GS_NEVER) {
        not_handed_out(q, g);
        return;
    }
    if (where != FXB_GS_HELD || att != q->attempts) {
        claim_gone(q);
        return;
    }
    uint32_t cap = fxb_gs_config_of(g->gs)->max_ack_wait_ms;
    uint32_t ms = q->extend_ms < cap ? (uint32_t)q->extend_ms : cap;
    (void)fxb_gs_in_progress(g->gs, mid, q->offset, att, ms, now_us); /* held at |att| */
    fxb_group_pump(g); /* re-arms the group's lease timer */
    fx_msg m = {.type = FX_MSG_GROUP_EXTENDED,
                .visible_ms = ms,
                .request_id = q->request_id,
                .has_request_id = true};
    answer(q, &m);
}

static void do_dead_letter(fxb_gjreq *q, struct fxb_group *g, uint64_t now_us)
{
    uint32_t mid = 0, att = 0;
    fxb_gs_where where = fxb_gs_lookup(g->gs, q->offset, &mid, &att);
    switch (where) {
    case FXB_GS_NEVER:
        refuse(q, FXB_GJ_INVALID, "offset %llu was not handed out by this group",
               (unsigned long long)q->offset);
        return;
    case FXB_GS_SETTLED:
    case FXB_GS_DYING:
        refuse(q, FXB_GJ_INVALID, "offset %llu is not in play in group %s (already finished)",
               (unsigned long long)q->offset, g->name);
        return;
    case FXB_GS_OWED:
        refuse(q, FXB_GJ_INVALID,
               "offset %llu is waiting for its next delivery, not held: dead-letter it once a "
               "poll holds it",
               (unsigned long long)q->offset);
        return;
    default:
        break;
    }
    (void)fxb_gs_term(g->gs, mid, q->offset, att, now_us); /* held at |att| */
    fxb_group_pump(g); /* writes it to the dead-letter stream and lists it */
    answer_ok(q, g);
}

/* group_redrive / group_discard: a listed dead letter owed again (its
 * attempts start over) or forgotten (the record stays in the stream and the
 * dead-letter stream); anything else is not a dead letter of the group. */
static void do_redrive_discard(fxb_gjreq *q, struct fxb_group *g)
{
    char why[256];
    bool redrive = q->type == FX_MSG_GROUP_REDRIVE;
    int rv = redrive ? fxb_group_redrive(g, q->offset, why, sizeof(why))
                     : fxb_group_discard(g, q->offset, why, sizeof(why));
    if (rv == 0) {
        answer_ok(q, g);
        return;
    }
    fxb_gjerr e = rv == -ESRCH || rv == FX_ECURSOR_TOO_OLD ? FXB_GJ_INVALID
                  : rv == -ENOSPC                          ? FXB_GJ_OVERLOADED
                                                           : FXB_GJ_INTERNAL;
    refuse(q, e, "%s", why);
}

/* Dead letters listed (redriven ones are owed again, not dead). */
static uint64_t dead_listed(const struct fxb_group *g)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < g->ndead; i++)
        n += !g->dead[i].redriven;
    return n;
}

static void do_describe(fxb_gjreq *q, struct fxb_group *g)
{
    uint64_t oldest, tail;
    if (!span(q, &oldest, &tail))
        return;
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    fx_msg m = {.type = FX_MSG_GROUP_INFO,
                .committed = in.floor,
                .has_committed = true,
                .tail = tail,
                .in_flight = in.acquired,
                .owed = (uint64_t)in.available + in.parked,
                .dead_letters = dead_listed(g),
                .request_id = q->request_id,
                .has_request_id = true};
    answer(q, &m);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void do_dead_letters(fxb_gjreq *q, struct fxb_group *g)
{
    uint64_t *offs = g->ndead != 0 ? malloc(g->ndead * sizeof(*offs)) : NULL;
    if (g->ndead != 0 && offs == NULL) {
        refuse(q, FXB_GJ_INTERNAL, "out of memory for the dead-letter list");
        return;
    }
    /* Redriven entries are owed again, not dead: not listed (the
     * original's list). */
    size_t n = 0;
    for (uint32_t i = 0; i < g->ndead; i++)
        if (!g->dead[i].redriven)
            offs[n++] = g->dead[i].offset;
    qsort(offs, n, sizeof(*offs), cmp_u64);
    fx_msg m = {.type = FX_MSG_GROUP_DEAD_LETTER_LIST,
                .offsets = offs,
                .n_offsets = n,
                .request_id = q->request_id,
                .has_request_id = true};
    answer(q, &m);
    free(offs);
}

/* group_seek: moves the group (made when new) to earliest / latest / an
 * offset inside what the stream holds; with if_new, an existing group
 * stays where it is (moved false). */
static void do_seek(fxb_gjreq *q, struct fxb_group *g)
{
    uint64_t oldest, tail, to;
    if (!span(q, &oldest, &tail))
        return;
    switch (q->start.kind) {
    case FX_MSG_START_EARLIEST:
        to = oldest;
        break;
    case FX_MSG_START_OFFSET:
        to = q->start.offset;
        break;
    default:
        to = tail;
        break;
    }
    if (to < oldest || to > tail) {
        refuse(q, FXB_GJ_INVALID, "offset %llu is outside what the stream holds [%llu, %llu]",
               (unsigned long long)to, (unsigned long long)oldest, (unsigned long long)tail);
        return;
    }
    bool moved = true;
    if (g == NULL) {
        if ((g = group_new(q, to)) == NULL)
            return;
    } else if (q->if_new) {
        fxb_gs_info in;
        fxb_gs_get_info(g->gs, &in);
        to = in.floor;
        moved = false;
    } else {
        fxb_gs_seek(g->gs, to);
        fxb_group_pump(g);
    }
    fx_msg m = {.type = FX_MSG_GROUP_POSITION,
                .offset = to,
                .moved = moved,
                .request_id = q->request_id,
                .has_request_id = true};
    answer_durable(q, g, &m);
}

static void do_delete(fxb_gjreq *q, struct fxb_group *g)
{
    if (g != NULL && g->nmembers + g->joining > 0) {
        refuse(q, FXB_GJ_INVALID,
               "group %s has members joined (group_join): they must leave before it is deleted",
               g->name);
        return;
    }
    if (g != NULL)
        fxb_group_delete(g); /* its waiting polls are answered empty */
    fx_msg m = {.type = FX_MSG_GROUP_DELETED,
                .existed = g != NULL,
                .request_id = q->request_id,
                .has_request_id = true};
    answer(q, &m);
}

/* A poll on a group that does not exist makes it from the oldest record
 * the stream holds (the original's new group starts at the start of its
 * log). NULL when refused (answered). */
static struct fxb_group *poll_group(fxb_gjreq *q)
{
    struct fxb_group *g = group_of(q);
    uint64_t oldest, tail;
    if (g != NULL || !span(q, &oldest, &tail))
        return g;
    return group_new(q, oldest);
}

void fxb_gpoll_run(fx_loop *l, fx_task *t, void *user)
{
    (void)t;
    fxb_gjreq *q = user;
    uint64_t now_ns = fx_loop_now(l);
    FX_COUNTER_INC(group_json_requests);
    if (!fx_stream_handle_is_active(q->h)) {
        refuse(q, FXB_GJ_NOT_FOUND, "stream %.128s was deleted", fx_stream_handle_stream(q->h));
        return;
    }
    struct fxb_group *g = group_of(q);
    switch (q->type) {
    case FX_MSG_GROUP_POLL:
        if ((g = poll_group(q)) != NULL)
            do_poll(q, g, now_ns);
        return;
    case FX_MSG_GROUP_SEEK:
        do_seek(q, g);
        return;
    case FX_MSG_GROUP_DELETE:
        do_delete(q, g);
        return;
    default:
        break;
    }
    if (g == NULL) {
        refuse(q, FXB_GJ_NOT_FOUND, "consumer group %s not found on stream %.128s", q->group,
               fx_stream_handle_stream(q->h));
        return;
    }
    switch (q->type) {
    case FX_MSG_GROUP_ACK:
        do_ack(q, g, now_ns / 1000);
        break;
    case FX_MSG_GROUP_NACK:
        do_nack(q, g, now_ns / 1000);
        break;
    case FX_MSG_GROUP_EXTEND:
        do_extend(q, g, now_ns / 1000);
        break;
    case FX_MSG_GROUP_DEAD_LETTER:
        do_dead_letter(q, g, now_ns / 1000);
        break;
    case FX_MSG_GROUP_DESCRIBE:
        do_describe(q, g);
        break;
    case FX_MSG_GROUP_DEAD_LETTERS:
        do_dead_letters(q, g);
        break;
    case FX_MSG_GROUP_REDRIVE:
    case FX_MSG_GROUP_DISCARD:
        do_redrive_discard(q, g);
        break;
    default: /* the connection loop sends no other type */
        refuse(q, FXB_GJ_UNSUPPORTED, "%s is not served by this broker", fx_msg_type_name(q->type));
        break;
    }
}
