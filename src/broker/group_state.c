/* Consumer-group state (group_state.h): the dispatch, acknowledgement,
 * timer and dead-letter rules of one shared group over the pending set of
 * group_pending.c (its layout is described there). Pure: no clock, no I/O,
 * no globals; the stream's worker loop owns it. */
#include "broker/group_state.h"
#include "broker/group_state_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- config ----------------------------------------------------------------- */

void fxb_gs_config_default(fxb_gs_config *c)
{
    *c = (fxb_gs_config){
        .ack_wait_ms = 30000,
        .max_ack_wait_ms = 600000,
        .n_backoff = 0,
        .max_deliver = 5,
        .max_ack_pending = 1000,
        .max_ack_pending_bytes = 64ull << 20,
        .max_parked = 1000,
        .member_window_max = 500,
        .max_run = 64,
    };
}

int fxb_gs_config_check(const fxb_gs_config *c, const char **why)
{
    const char *w = NULL;
    if (c->ack_wait_ms < 1)
        w = "ack_wait_ms must be at least 1";
    else if (c->max_ack_wait_ms < c->ack_wait_ms)
        w = "max_ack_wait_ms must be at least ack_wait_ms";
    else if (c->max_deliver != -1 && c->max_deliver < 1)
        w = "max_deliver must be -1 or at least 1";
    else if (c->max_ack_pending < 1)
        w = "max_ack_pending must be at least 1";
    else if (c->member_window_max < 1)
        w = "member_window_max must be at least 1";
    else if (c->max_run < 1)
        w = "max_run must be at least 1";
    else if (c->n_backoff > FXB_GS_MAX_BACKOFF)
        w = "n_backoff must be at most FXB_GS_MAX_BACKOFF";
    if (why != NULL)
        *why = w;
    return w != NULL ? -EINVAL : 0;
}

/* ---- events ----------------------------------------------------------------- */

static void emit(fxb_gs *g, fxb_gs_ev_type type, uint64_t first, uint32_t count, uint32_t attempt,
                 uint64_t not_before, fxb_gs_reason reason)
{
    if (g->obs == NULL)
        return;
    fxb_gs_event e = {.type = type,
                      .first = first,
                      .count = count,
                      .attempt = attempt,
                      .not_before_us = not_before,
                      .reason = reason};
    g->obs(g->obs_user, &e);
}

/* ---- state changes ------------------------------------------------------------ */

static bool exhausted(const fxb_gs *g, const fxb_gs_entry *e)
{
    return g->cfg.max_deliver > 0 && e->attempts >= (uint32_t)g->cfg.max_deliver;
}

static uint64_t backoff_us(const fxb_gs *g, uint32_t attempts)
{
    if (g->cfg.n_backoff == 0 || attempts == 0)
        return 0;
    uint32_t k = attempts - 1;
    if (k >= g->cfg.n_backoff)
        k = g->cfg.n_backoff - 1;
    return (uint64_t)g->cfg.backoff_ms[k] * 1000;
}

/* Takes |e| out of whatever it is in (holder, wheel, heap, dead list). */
static void detach(fxb_gs *g, fxb_gs_entry *e)
{
    switch (e->state) {
    case ST_ACQUIRED:
        g->members[e->aux].held--;
        g->acquired--;
        fxb_gsp_list_unlink(g, e);
        break;
    case ST_AVAILABLE:
        fxb_gsp_heap_remove(g, e);
        g->available--;
        break;
    case ST_PARKED:
        g->parked--;
        fxb_gsp_list_unlink(g, e);
        break;
    case ST_DEAD:
        g->dead--;
        if (e->flags & F_REPORTED)
            g->dead_out--;
        fxb_gsp_list_unlink(g, e);
        break;
    default:
        break;
    }
    e->state = ST_FREE;
    e->aux = NONE;
}

static void to_dead(fxb_gs *g, fxb_gs_entry *e, bool term)
{
    e->state = ST_DEAD;
    e->flags = term ? F_TERM : 0; /* detached: on no list */
    g->dead++;
    fxb_gsp_list_push(g, LIST_DEAD, e);
}

/* A detached entry becomes AVAILABLE, or a dead letter when it has had all
 * its deliveries. */
static void to_available(fxb_gs *g, fxb_gs_entry *e)
{
    if (exhausted(g, e)) {
        to_dead(g, e, false);
        return;
    }
    e->state = ST_AVAILABLE;
    g->available++;
    fxb_gsp_heap_push(g, e);
}

/* A detached entry waits until |when| (PARKED), or is AVAILABLE at once when
 * |when| is not in the future, the wait is moot (no delivery left) or 5p is
 * full (counted). */
static void to_parked(fxb_gs *g, fxb_gs_entry *e, uint64_t when, uint64_t now_us)
{
    if (when <= now_us || exhausted(g, e)) {
        to_available(g, e);
        return;
    }
    if (g->parked >= g->cfg.max_parked) {
        g->stats.parked_overflow++;
        to_available(g, e);
        return;
    }
    e->state = ST_PARKED;
    g->parked++;
    fxb_gsp_wheel_add(g, e, when, now_us);
}

/* Moves the floor over settled offsets: to the lowest pending one, or to
 * next when nothing is pending. Each offset is passed once. */
static void floor_advance(fxb_gs *g)
{
    if (g->n_entries == 0) {
        g->floor = g->next;
        return;
    }
    if (fxb_gsp_find(g, g->floor) != NULL)
        return;
    if (g->next - g->floor > 2 * (uint64_t)g->slab_used + 64) {
        /* A long settled span (a redriven record far below the others
         * settled): one scan of the slab finds the lowest pending offset
         * sooner than a walk over the span. */
        uint64_t low = g->next;
        for (uint32_t i = 0; i < g->slab_used; i++)
            if (g->slab[i].state != ST_FREE && g->slab[i].offset < low)
                low = g->slab[i].offset;
        g->floor = low;
        return;
    }
    while (g->floor < g->next && fxb_gsp_find(g, g->floor) == NULL)
        g->floor++;
}

static void settle(fxb_gs *g, fxb_gs_entry *e)
{
    detach(g, e);
    fxb_gsp_entry_free(g, e);
}

/* ---- group life ----------------------------------------------------------------- */

fxb_gs *fxb_gs_new(const fxb_gs_config *cfg, uint64_t start)
{
    assert(fxb_gs_config_check(cfg, NULL) == 0);
    fxb_gs *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->cfg = *cfg;
    g->floor = g->next = start;
    g->free_head = NONE;
    memset(g->head, 0xff, sizeof(g->head));
    return g;
}

void fxb_gs_free(fxb_gs *g)
{
    if (g == NULL)
        return;
    fxb_gsp_drop_tables(g);
    free(g->members);
    free(g);
}

const fxb_gs_config *fxb_gs_config_of(const fxb_gs *g)
{
    return &g->cfg;
}

void fxb_gs_set_observer(fxb_gs *g, fxb_gs_observer fn, void *user)
{
    g->obs = fn;
    g->obs_user = user;
}

/* ---- members ------------------------------------------------------------------- */

static fxb_gs_member *member_at(const fxb_gs *g, uint32_t id)
{
    if (id >= g->members_cap || !g->members[id].used)
        return NULL;
    return &g->members[id];
}

int fxb_gs_member_add(fxb_gs *g, uint32_t window, uint32_t ack_wait_ms, uint32_t *pid)
{
    uint32_t id = 0;
    while (id < g->members_cap && g->members[id].used)
        id++;
    if (id == g->members_cap) {
        uint32_t cap = g->members_cap ? g->members_cap * 2 : 4;
        fxb_gs_member *nm = realloc(g->members, cap * sizeof(*nm));
        if (nm == NULL)
            return -ENOMEM;
        memset(nm + g->members_cap, 0, (cap - g->members_cap) * sizeof(*nm));
        g->members = nm;
        g->members_cap = cap;
    }
    if (window == 0)
        window = DEFAULT_WINDOW;
    if (window > g->cfg.member_window_max)
        window = g->cfg.member_window_max;
    if (ack_wait_ms == 0)
        ack_wait_ms = g->cfg.ack_wait_ms;
    if (ack_wait_ms > g->cfg.max_ack_wait_ms)
        ack_wait_ms = g->cfg.max_ack_wait_ms;
    g->members[id] = (fxb_gs_member){.used = true, .window = window, .ack_wait_ms = ack_wait_ms};
    g->n_members++;
    *pid = id;
    return 0;
}

void fxb_gs_member_remove(fxb_gs *g, uint32_t id, uint64_t now_us)
{
    (void)now_us; /* its records are AVAILABLE at once: no timer to arm */
    fxb_gs_member *m = member_at(g, id);
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < g->slab_used && m->held > 0; i++) {
        fxb_gs_entry *e = &g->slab[i];
        if (e->state == ST_ACQUIRED && e->aux == id) {
            detach(g, e);
            to_available(g, e);
        }
    }
    m->used = false;
    g->n_members--;
}

uint32_t fxb_gs_member_held(const fxb_gs *g, uint32_t id)
{
    fxb_gs_member *m = member_at(g, id);
    return m ? m->held : 0;
}

uint32_t fxb_gs_member_window(const fxb_gs *g, uint32_t id)
{
    fxb_gs_member *m = member_at(g, id);
    return m ? m->window : 0;
}

void fxb_gs_member_set_window(fxb_gs *g, uint32_t id, uint32_t window)
{
    fxb_gs_member *m = member_at(g, id);
    if (m != NULL)
        m->window = window > g->cfg.member_window_max ? g->cfg.member_window_max : window;
}

void fxb_gs_member_set_lease(fxb_gs *g, uint32_t id, uint32_t ack_wait_ms)
{
    fxb_gs_member *m = member_at(g, id);
    if (m == NULL)
        return;
    if (ack_wait_ms == 0)
        ack_wait_ms = g->cfg.ack_wait_ms;
    m->ack_wait_ms = ack_wait_ms > g->cfg.max_ack_wait_ms ? g->cfg.max_ack_wait_ms : ack_wait_ms;
}

fxb_gs_where fxb_gs_lookup(const fxb_gs *g, uint64_t offset, uint32_t *pmember, uint32_t *pattempt)
{
    if (offset >= g->next)
        return FXB_GS_NEVER;
    const fxb_gs_entry *e = offset < g->floor ? NULL : fxb_gsp_find(g, offset);
    if (e == NULL)
        return FXB_GS_SETTLED;
    if (pattempt != NULL)
        *pattempt = e->attempts;
    switch (e->state) {
    case ST_ACQUIRED:
        if (pmember != NULL)
            *pmember = e->aux;
        return FXB_GS_HELD;
    case ST_DEAD:
        return FXB_GS_DYING;
    default:
        return FXB_GS_OWED;
    }
}

/* ---- pump: ring eviction ------------------------------------------------------- */

/* Settles the pending entry of |o| (if any) as skipped; true if there was one. */
static bool skip_one(fxb_gs *g, uint64_t o)
{
    fxb_gs_entry *e = fxb_gsp_find(g, o);
    if (e == NULL)
        return false;
    settle(g, e);
    return true;
}

/* Settles every pending offset below |low|, in offset order when the span is
 * short, else by a slab scan (one event per offset). */
static uint64_t skip_pending_below(fxb_gs *g, uint64_t low)
{
    uint64_t n = 0, span = low - g->floor;
    if (span <= 2 * (uint64_t)g->n_entries + 64) {
        uint64_t run = 0;
        for (uint64_t o = g->floor; o < low; o++) {
            if (skip_one(g, o)) {
                run++;
                continue;
            }
            if (run)
                emit(g, FXB_GS_EV_SKIP, o - run, (uint32_t)run, 0, 0, 0);
            n += run;
            run = 0;
        }
        if (run)
            emit(g, FXB_GS_EV_SKIP, low - run, (uint32_t)run, 0, 0, 0);
        return n + run;
    }
    for (uint32_t i = 0; i < g->slab_used; i++) {
        fxb_gs_entry *e = &g->slab[i];
        if (e->state == ST_FREE || e->offset >= low)
            continue;
        uint64_t o = e->offset;
        settle(g, e);
        emit(g, FXB_GS_EV_SKIP, o, 1, 0, 0, 0);
        n++;
    }
    return n;
}

static void evict(fxb_gs *g, uint64_t low)
{
    if (low <= g->floor)
        return;
    uint64_t n = 0, top = low < g->next ? low : g->next;
    if (g->n_entries > 0)
        n = skip_pending_below(g, top);
    while (low > g->next) {
        uint64_t k = low - g->next;
        if (k > UINT32_MAX)
            k = UINT32_MAX;
        emit(g, FXB_GS_EV_SKIP, g->next, (uint32_t)k, 0, 0, 0);
        n += k;
        g->next += k;
    }
    g->stats.skipped += n;
    g->skipped_unreported += n;
    if (g->floor < low)
        g->floor = low;
    floor_advance(g);
}

/* ---- pump: runs ------------------------------------------------------------------ */

static bool has_room(const fxb_gs_member *m)
{
    return m->used && m->held < m->window;
}

/* The member with room not yet served this turn holding least relative to
 * its window (ties: lowest id), or NONE. */
static uint32_t pick_member(const fxb_gs *g)
{
    uint32_t best = NONE;
    for (uint32_t i = 0; i < g->members_cap; i++) {
        const fxb_gs_member *m = &g->members[i];
        if (!has_room(m) || m->turn == g->turn)
            continue;
        if (best == NONE)
            best = i;
        else {
            const fxb_gs_member *b = &g->members[best];
            if ((uint64_t)m->held * b->window < (uint64_t)b->held * m->window)
                best = i;
        }
    }
    return best;
}

static void acquire(fxb_gs *g, fxb_gs_entry *e, uint32_t id, uint64_t now_us)
{
    fxb_gs_member *m = &g->members[id];
    e->state = ST_ACQUIRED;
    e->aux = id;
    e->last = id;
    if (e->attempts < UINT16_MAX) /* saturates: only reachable with max_deliver -1 */
        e->attempts++;
    m->held++;
    g->acquired++;
    fxb_gsp_wheel_add(g, e, now_us + (uint64_t)m->ack_wait_ms * 1000, now_us);
}

/* Whether |offset|'s payload is not loaded now (FXB_GS_LEN_WAIT): then it
 * is noted in |v->want| and counted. |*plen| gets the length otherwise. */
static bool waits(fxb_gs *g, fxb_gs_view *v, uint64_t offset, uint32_t *plen)
{
    uint32_t len = v->len ? v->len(v->user, offset) : 0;
    if (len != FXB_GS_LEN_WAIT) {
        *plen = len;
        return false;
    }
    if (offset < v->want)
        v->want = offset;
    g->stats.waits++;
    return true;
}

/* A run of redeliveries: the oldest AVAILABLE offset and those right after
 * it at the same attempt, up to the first one not loaded. */
static uint32_t run_redeliver(fxb_gs *g, fxb_gs_view *v, uint32_t id, uint32_t lim, uint64_t now_us,
                              fxb_gs_run *r)
{
    fxb_gs_entry *e = fxb_gsp_heap_top(g);
    r->first = e->offset;
    uint16_t a0 = e->attempts;
    r->attempt = a0 < UINT16_MAX ? a0 + 1u : UINT16_MAX;
    uint32_t n = 0, len;
    uint32_t last0 = e->last;
    while (n < lim && (e = fxb_gsp_heap_top(g)) != NULL && e->offset == r->first + n &&
           e->attempts == a0 && (n == 0 || e->last == last0) && !waits(g, v, e->offset, &len)) {
        detach(g, e);
        acquire(g, e, id, now_us);
        n++;
    }
    if (r->attempt > 1)
        g->stats.redelivered += n;
    return n;
}

static bool capped_now(const fxb_gs *g)
{
    return g->acquired + g->available + g->dead >= g->cfg.max_ack_pending ||
           g->pending_bytes >= g->cfg.max_ack_pending_bytes;
}

/* A run of first deliveries from |next|, within 5g. */
static uint32_t run_first(fxb_gs *g, fxb_gs_view *v, uint32_t id, uint32_t lim, uint64_t now_us,
                          fxb_gs_run *r)
{
    uint32_t busy = g->acquired + g->available + g->dead;
    if (lim > g->cfg.max_ack_pending - busy)
        lim = g->cfg.max_ack_pending - busy;
    if (lim > v->tail - g->next)
        lim = (uint32_t)(v->tail - g->next);
    r->first = g->next;
    r->attempt = 1;
    uint32_t n = 0, len;
    while (n < lim && g->pending_bytes < g->cfg.max_ack_pending_bytes &&
           !waits(g, v, g->next, &len)) {
        fxb_gs_entry *e = fxb_gsp_entry_new(g, g->next, len == UINT32_MAX ? 0 : len);
        if (e == NULL)
            break; /* no memory: the offset stays undelivered for a later turn */
        acquire(g, e, id, now_us);
        g->next++;
        n++;
    }
    return n;
}

/* True if a member other than |id| has room: a redelivery that |id| held
 * last (it let the lease lapse, gave it back or left) goes to another member
 * when there is one, so a frozen or failing member does not get the same
 * record again and again until max_deliver. */
static bool other_has_room(const fxb_gs *g, uint32_t id)
{
    for (uint32_t i = 0; i < g->members_cap; i++)
        if (i != id && has_room(&g->members[i]))
            return true;
    return false;
}

/* Hands member |id| one run. Returns false when there is nothing it could be
 * given (no redelivery, no first delivery allowed); sets |*capped| when 5g
 * kept first deliveries back, |*passed| when only this member was passed
 * over (the waiting redelivery is for another member). */
static bool give_run(fxb_gs *g, fxb_gs_view *v, uint32_t id, uint64_t now_us, fxb_gs_run *r,
                     bool *capped, bool *passed)
{
    fxb_gs_member *m = &g->members[id];
    uint32_t lim = m->window - m->held, n = 0;
    if (lim > g->cfg.max_run)
        lim = g->cfg.max_run;
    *r = (fxb_gs_run){.member = id};
    bool pass = g->heap_n > 0 && fxb_gsp_heap_top(g)->last == id && other_has_room(g, id);
    if (g->heap_n > 0 && !pass)
        n = run_redeliver(g, v, id, lim, now_us, r);
    if (n == 0) { /* no redelivery for it, or the oldest one is not loaded */
        /* Passed over when a redelivery waits for others or for its load. */
        *passed = g->heap_n > 0;
        if (g->next >= v->tail)
            return false;
        if (capped_now(g)) {
            *capped = true;
            return false;
        }
        *r = (fxb_gs_run){.member = id};
        n = run_first(g, v, id, lim, now_us, r);
    }
    if (n == 0)
        return false;
    r->count = n;
    g->stats.delivered += n;
    r->skipped_before = g->skipped_unreported;
    g->skipped_unreported = 0;
    emit(g, FXB_GS_EV_DELIVER, r->first, n, r->attempt, 0, 0);
    return true;
}

static size_t report_dead(fxb_gs *g, fxb_gs_dead *dead, size_t dcap)
{
    size_t n = 0;
    while (n < dcap && g->head[LIST_DEAD] != NONE) {
        fxb_gs_entry *e = &g->slab[g->head[LIST_DEAD]];
        fxb_gsp_list_unlink(g, e);
        e->flags |= F_REPORTED;
        g->dead_out++;
        dead[n++] = (fxb_gs_dead){
            .offset = e->offset,
            .attempts = e->attempts,
            .reason = (e->flags & F_TERM) ? FXB_GS_DEAD_TERM : FXB_GS_DEAD_MAX_DELIVER,
        };
    }
    return n;
}

/* Whether a member could be given something now (for 5m). */
static bool work_waiting(const fxb_gs *g, const fxb_gs_view *v)
{
    return g->heap_n > 0 || (g->next < v->tail && !capped_now(g));
}

static void count_turn(fxb_gs *g, const fxb_gs_view *v, bool capped, bool out_full, uint64_t now_us)
{
    if (capped) {
        g->stats.capped++;
        if (g->capped_since == 0)
            g->capped_since = now_us ? now_us : 1;
    } else if (!capped_now(g)) {
        g->capped_since = 0;
    }
    if (out_full || !work_waiting(g, v))
        return;
    for (uint32_t i = 0; i < g->members_cap; i++)
        if (g->members[i].used && g->members[i].window != 0 &&
            g->members[i].held >= g->members[i].window)
            g->stats.member_full++; /* a closed window (0) is not full: it takes nothing */
}

size_t fxb_gs_pump(fxb_gs *g, fxb_gs_view *v, uint64_t now_us, fxb_gs_run *out, size_t cap,
                   fxb_gs_dead *dead, size_t dcap, size_t *ndead)
{
    v->want = UINT64_MAX;
    evict(g, v->low);
    size_t nd = report_dead(g, dead, dcap);
    if (ndead != NULL)
        *ndead = nd;
    size_t n = 0;
    bool capped = false, gave = true, idle = false;
    while (gave && !idle && n < cap) {
        gave = false;
        g->turn++;
        uint32_t id;
        while (n < cap && (id = pick_member(g)) != NONE) {
            g->members[id].turn = g->turn;
            bool passed = false;
            if (!give_run(g, v, id, now_us, &out[n], &capped, &passed)) {
                if (passed)
                    continue; /* a redelivery waits for another member */
                idle = true; /* nothing for anyone */
                break;
            }
            n++;
            gave = true;
        }
    }
    count_turn(g, v, capped, n == cap, now_us);
    return n;
}

/* ---- acknowledgements ------------------------------------------------------------ */

/* Settles the pending offsets of [lo, hi), one ACK event per contiguous
 * run; returns how many were pending. */
static uint64_t ack_span(fxb_gs *g, uint64_t lo, uint64_t hi)
{
    uint64_t settled = 0, run = 0;
    for (uint64_t o = lo; o < hi; o++) {
        fxb_gs_entry *e = fxb_gsp_find(g, o);
        if (e != NULL) {
            settle(g, e);
            run++;
            continue;
        }
        if (run)
            emit(g, FXB_GS_EV_ACK, o - run, (uint32_t)run, 0, 0, 0);
        settled += run;
        run = 0;
    }
    if (run)
        emit(g, FXB_GS_EV_ACK, hi - run, (uint32_t)run, 0, 0, 0);
    return settled + run;
}

uint32_t fxb_gs_ack(fxb_gs *g, uint64_t first, uint32_t count, uint64_t now_us, uint32_t *pinvalid)
{
    (void)now_us;
    uint64_t end = first + count;
    uint64_t lo = first > g->floor ? first : g->floor;
    uint64_t hi = end < g->next ? end : g->next;
    uint64_t invalid = end > g->next ? end - (first > g->next ? first : g->next) : 0;
    uint64_t settled = lo < hi ? ack_span(g, lo, hi) : 0;
    g->stats.acked += settled;
    g->stats.duplicate_acks += count - invalid - settled;
    g->stats.invalid += invalid;
    if (pinvalid != NULL)
        *pinvalid += (uint32_t)invalid;
    if (settled > 0) {
        floor_advance(g);
        if (g->capped_since && !capped_now(g))
            g->capped_since = 0;
    }
    return (uint32_t)settled;
}

enum { OP_NAK = 0, OP_PROGRESS, OP_TERM, OP_RELEASE };

/* The fenced lookup of nak/in_progress/term/release: the entry held by
 * |member| at |attempt|, or NULL with the result in |*res|. */
static fxb_gs_entry *fenced(fxb_gs *g, int op, uint32_t member, uint64_t offset, uint32_t attempt,
                            fxb_gs_result *res)
{
    if (offset >= g->next) {
        g->stats.invalid++;
        *res = FXB_GS_INVALID;
        return NULL;
    }
    fxb_gs_entry *e = offset < g->floor ? NULL : fxb_gsp_find(g, offset);
    if (e == NULL) {
        *res = FXB_GS_DUPLICATE;
        return NULL;
    }
    if (e->state != ST_ACQUIRED || e->aux != member || e->attempts != attempt) {
        g->stats.stale[op]++;
        *res = FXB_GS_STALE;
        return NULL;
    }
    *res = FXB_GS_OK;
    return e;
}

fxb_gs_result fxb_gs_nak(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                         int64_t delay_ms, uint64_t now_us)
{
    fxb_gs_result res;
    fxb_gs_entry *e = fenced(g, OP_NAK, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    detach(g, e);
    if (delay_ms > MAX_DELAY_MS)
        delay_ms = MAX_DELAY_MS;
    uint64_t delay_us = delay_ms < 0 ? backoff_us(g, e->attempts) : (uint64_t)delay_ms * 1000;
    to_parked(g, e, now_us + delay_us, now_us);
    g->stats.naked++;
    emit(g, FXB_GS_EV_NAK, offset, 1, e->attempts, e->state == ST_PARKED ? e->when : 0, 0);
    return FXB_GS_OK;
}

fxb_gs_result fxb_gs_in_progress(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                                 uint32_t extend_ms, uint64_t now_us)
{
    fxb_gs_result res;
    fxb_gs_entry *e = fenced(g, OP_PROGRESS, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    if (extend_ms == 0)
        extend_ms = g->members[member].ack_wait_ms;
    if (extend_ms > g->cfg.max_ack_wait_ms)
        extend_ms = g->cfg.max_ack_wait_ms;
    fxb_gsp_list_unlink(g, e);
    fxb_gsp_wheel_add(g, e, now_us + (uint64_t)extend_ms * 1000, now_us);
    g->stats.in_progress++;
    return FXB_GS_OK;
}

fxb_gs_result fxb_gs_term(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                          uint64_t now_us)
{
    (void)now_us;
    fxb_gs_result res;
    fxb_gs_entry *e = fenced(g, OP_TERM, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    detach(g, e);
    to_dead(g, e, true);
    return FXB_GS_OK;
}

fxb_gs_result fxb_gs_release(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt)
{
    fxb_gs_result res;
    fxb_gs_entry *e = fenced(g, OP_RELEASE, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    detach(g, e);
    e->attempts--;
    to_available(g, e);
    g->stats.released++;
    emit(g, FXB_GS_EV_RELEASE, offset, 1, e->attempts, 0, 0);
    return FXB_GS_OK;
}

void fxb_gs_dead_done(fxb_gs *g, uint64_t offset)
{
    fxb_gs_entry *e = offset < g->floor ? NULL : fxb_gsp_find(g, offset);
    if (e == NULL || e->state != ST_DEAD)
        return;
    fxb_gs_reason why = (e->flags & F_TERM) ? FXB_GS_DEAD_TERM : FXB_GS_DEAD_MAX_DELIVER;
    uint32_t attempts = e->attempts;
    settle(g, e);
    g->stats.dead[why]++;
    emit(g, FXB_GS_EV_DEAD, offset, 1, attempts, 0, why);
    floor_advance(g);
}

void fxb_gs_dead_failed(fxb_gs *g, uint64_t offset)
{
    fxb_gs_entry *e = offset < g->floor ? NULL : fxb_gsp_find(g, offset);
    if (e == NULL || e->state != ST_DEAD || !(e->flags & F_REPORTED))
        return;
    e->flags &= (uint8_t)~F_REPORTED;
    g->dead_out--;
    fxb_gsp_list_push(g, LIST_DEAD, e);
}

/* ---- redrive ------------------------------------------------------------------------ */

bool fxb_gs_is_settled(const fxb_gs *g, uint64_t offset)
{
    return offset < g->next && (offset < g->floor || fxb_gsp_find(g, offset) == NULL);
}

int fxb_gs_redrive(fxb_gs *g, uint64_t offset, uint64_t now_us)
{
    (void)now_us; /* AVAILABLE at once: no timer to arm */
    if (!fxb_gs_is_settled(g, offset))
        return -ENOENT;
    /* The bound the slab grows to (group_pending.c): a redrive never takes
     * the pending set past it. */
    if ((uint64_t)g->n_entries >= (uint64_t)g->cfg.max_ack_pending + g->cfg.max_parked)
        return -ENOSPC;
    fxb_gs_entry *e = fxb_gsp_entry_new(g, offset, 0);
    if (e == NULL)
        return -ENOMEM;
    e->attempts = 0;
    e->state = ST_AVAILABLE;
    g->available++;
    fxb_gsp_heap_push(g, e);
    if (offset < g->floor)
        g->floor = offset;
    g->stats.redriven++;
    emit(g, FXB_GS_EV_REDRIVE, offset, 1, 0, 0, 0);
    return 0;
}

/* ---- timers ------------------------------------------------------------------------- */

static void observe_late(fxb_gs *g, uint64_t late)
{
    static const uint64_t bound[FXB_GS_LATE_BUCKETS - 1] = {
        100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000};
    uint32_t b = 0;
    while (b < FXB_GS_LATE_BUCKETS - 1 && late > bound[b])
        b++;
    g->stats.late[b]++;
    g->stats.late_sum_us += late;
}

/* One due timer: a lapsed lease or the end of a parked wait. */
static void fire(fxb_gs *g, fxb_gs_entry *e, uint64_t now_us)
{
    uint64_t due = e->when;
    observe_late(g, now_us - due);
    if (e->state == ST_ACQUIRED) {
        g->stats.expired++;
        detach(g, e);
        to_parked(g, e, due + backoff_us(g, e->attempts), now_us);
    } else {
        detach(g, e);
        to_available(g, e);
    }
}

/* Fires the due entries of level-0 slot |s|. */
static uint32_t fire_slot(fxb_gs *g, uint32_t s, uint64_t now_us)
{
    uint32_t n = 0, i = g->head[s];
    while (i != NONE) {
        uint32_t nx = g->slab[i].tnext;
        if (g->slab[i].when <= now_us) {
            fire(g, &g->slab[i], now_us);
            n++;
        }
        i = nx;
    }
    return n;
}

uint32_t fxb_gs_expire(fxb_gs *g, uint64_t now_us)
{
    uint64_t now = now_us / 1000;
    uint32_t n = 0;
    for (;;) {
        if (fxb_gsp_wheel_empty(g)) {
            g->cur = now;
            return n;
        }
        n += fire_slot(g, (uint32_t)(g->cur & (L0_SLOTS - 1)), now_us);
        if (g->cur >= now)
            return n;
        bool epoch_end = ((g->cur + 1) & (L0_SLOTS - 1)) == 0;
        if (g->n_l0 > 0 && !epoch_end) {
            g->cur++;
            continue;
        }
        /* Level 0 is empty now (or this epoch is over): skip ahead. */
        uint64_t start = fxb_gsp_next_epoch_start(g);
        if (start > now) {
            g->cur = now;
            return n;
        }
        g->cur = start - 1;
        fxb_gsp_wheel_next_epoch(g);
    }
}

/* ---- seek, info, memory ----------------------------------------------------------- */

void fxb_gs_seek(fxb_gs *g, uint64_t offset)
{
    fxb_gsp_drop_tables(g);
    g->acquired = g->available = g->parked = g->dead = g->dead_out = 0;
    g->pending_bytes = 0;
    g->capped_since = 0;
    g->skipped_unreported = 0;
    for (uint32_t i = 0; i < g->members_cap; i++)
        g->members[i].held = 0;
    g->floor = g->next = offset;
    emit(g, FXB_GS_EV_SEEK, offset, 0, 0, 0, 0);
}

void fxb_gs_get_info(const fxb_gs *g, fxb_gs_info *out)
{
    *out = (fxb_gs_info){
        .floor = g->floor,
        .next = g->next,
        .acquired = g->acquired,
        .available = g->available,
        .parked = g->parked,
        .pending_bytes = g->pending_bytes,
        .members = g->n_members,
        .capped_since_us = g->capped_since,
        .dead_intents = g->dead,
    };
}

uint64_t fxb_gs_floor_past_dead(const fxb_gs *g, uint64_t limit)
{
    for (uint64_t o = g->floor; o < limit; o++) {
        if (o >= g->next)
            return o; /* never handed out */
        const fxb_gs_entry *e = fxb_gsp_find(g, o);
        if (e != NULL && e->state != ST_DEAD)
            return o;
    }
    return limit;
}

const fxb_gs_stats *fxb_gs_stats_of(const fxb_gs *g)
{
    return &g->stats;
}

size_t fxb_gs_memory(const fxb_gs *g)
{
    return sizeof(*g) + (size_t)g->slab_cap * sizeof(fxb_gs_entry) +
           (size_t)g->table_cap * sizeof(uint32_t) + (size_t)g->slab_cap * sizeof(uint32_t) +
           (size_t)g->members_cap * sizeof(fxb_gs_member);
}

/* ---- recovery ------------------------------------------------------------------------ */

int fxb_gs_restore(fxb_gs *g, uint64_t floor, uint64_t next)
{
    if (floor > next || g->n_entries > 0 || g->n_members > 0)
        return -EINVAL;
    g->floor = g->next = next; /* all settled until a pending offset comes */
    g->next = next;
    g->restore_min = floor;
    return 0;
}

int fxb_gs_restore_pending(fxb_gs *g, uint64_t offset, uint32_t attempts, uint64_t not_before_us)
{
    if (offset < g->restore_min || offset >= g->next || attempts > UINT16_MAX)
        return -EINVAL;
    fxb_gs_entry *e = fxb_gsp_entry_new(g, offset, 0);
    if (e == NULL)
        return -ENOMEM;
    e->attempts = (uint16_t)attempts;
    if (g->n_entries == 1)
        g->floor = offset;
    g->restore_min = offset + 1;
    if (not_before_us == 0) {
        to_available(g, e);
    } else {
        /* Restored waits keep their time even past max_parked. */
        e->state = ST_PARKED;
        g->parked++;
        fxb_gsp_wheel_add(g, e, not_before_us, not_before_us);
    }
    return 0;
}
