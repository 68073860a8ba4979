/* Consumer-group state (group_state.h): the pending set of one shared group,
 * its lease and not-before timers, the redelivery queue and the fair-share
 * dispatch. Pure: no clock, no I/O, no globals; the stream's worker loop
 * owns it.
 *
 * Layout. Each pending offset is one 40-byte entry in a slab (indices are
 * stable across growth); an open-addressed table of 4-byte slab indices
 * (linear probing, backward-shift deletion, at most half full) finds an
 * entry by offset; AVAILABLE entries sit in a min-heap of 4-byte slab
 * indices ordered by offset (the entry keeps its heap position). The slab
 * grows by doubling but never past max_ack_pending + max_parked unless a
 * restore needs more, the table has at most 4 slots per slab entry and the
 * heap one: at most 40 + 16 + 4 = 60 bytes per entry of the bound, plus the
 * members and the fixed wheel below.
 *
 * Timers. ACQUIRED deadlines and PARKED not-before times live on a hashed
 * wheel of 1 ms ticks: level 0 has 4096 slots (the current 4096-tick epoch),
 * level 1 has 512 slots of one epoch each (about 35 minutes), and anything
 * further waits on an unsorted overflow list scanned once every 512 epochs.
 * Lists are doubly linked through the entries; a list's first entry names
 * its list in |tprev| (LIST_TAG), so unlinking needs no search. A bitmap of
 * non-empty slots per level keeps fxb_gs_next_deadline at a few word scans.
 * Unreported dead letters are one more list on the same links. */
#include "broker/group_state.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- constants and types -------------------------------------------------- */

#define NONE UINT32_MAX
#define LIST_TAG 0x80000000u
#define L0_BITS 12
#define L0_SLOTS (1u << L0_BITS)
#define L1_SLOTS 512u
#define LIST_L1 L0_SLOTS                  /* level-1 list ids follow level 0's */
#define LIST_OVF (L0_SLOTS + L1_SLOTS)    /* the overflow list */
#define LIST_DEAD (LIST_OVF + 1)          /* dead letters not yet reported */
#define N_LISTS (LIST_DEAD + 1)
#define MIN_SLAB 16u
#define DEFAULT_WINDOW 256u
#define MAX_DELAY_MS (INT64_C(1) << 40) /* about 35 years: keeps now + delay in range */

enum { ST_FREE = 0, ST_ACQUIRED, ST_AVAILABLE, ST_PARKED, ST_DEAD };
/* Entry flags; F_LEVEL says which timer counter the entry's list counts in. */
enum { F_REPORTED = 1, F_TERM = 2, F_L0 = 4, F_L1 = 8, F_OVF = 12, F_LEVEL = 12 };

typedef struct entry {
    uint64_t offset;
    uint64_t when;     /* ACQUIRED: lease deadline; PARKED: not-before (us) */
    uint32_t tprev;    /* previous entry, or LIST_TAG | list id when first */
    uint32_t tnext;    /* next entry, NONE; the free list uses it too */
    uint32_t aux;      /* ACQUIRED: holder member; AVAILABLE: heap position */
    uint32_t bytes;
    uint16_t attempts;
    uint8_t state;
    uint8_t flags;
} entry;
_Static_assert(sizeof(entry) <= 40, "a pending entry stays within 40 bytes");

typedef struct gmember {
    bool used;
    uint32_t window;
    uint32_t ack_wait_ms;
    uint32_t held;
    uint64_t turn; /* the pump turn that last served it */
} gmember;

struct fxb_gs {
    fxb_gs_config cfg;
    uint64_t floor, next;
    uint64_t restore_min;
    uint32_t acquired, available, parked, dead, dead_out;
    uint64_t pending_bytes;
    uint64_t capped_since;
    uint64_t skipped_unreported;
    uint64_t turn;
    fxb_gs_stats stats;
    fxb_gs_observer obs;
    void *obs_user;

    entry *slab;
    uint32_t slab_cap, n_entries, free_head, slab_used;
    uint32_t *table; /* slab indices, NONE empty */
    uint32_t table_cap;
    uint32_t *heap;
    uint32_t heap_n;

    gmember *members;
    uint32_t members_cap, n_members;

    /* Timer wheel: |cur| is the current tick (ms). */
    uint64_t cur;
    uint32_t n_l0, n_l1, n_ovf;
    uint32_t head[N_LISTS];
    uint64_t bits0[L0_SLOTS / 64];
    uint64_t bits1[L1_SLOTS / 64];
};

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
    fxb_gs_event e = {.type = type, .first = first, .count = count, .attempt = attempt,
                      .not_before_us = not_before, .reason = reason};
    g->obs(g->obs_user, &e);
}

/* ---- offset table ------------------------------------------------------------ */

static uint32_t home_of(const fxb_gs *g, uint64_t offset)
{
    uint64_t x = offset * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x ^ (x >> 32)) & (g->table_cap - 1);
}

static uint32_t table_pos(const fxb_gs *g, uint64_t offset)
{
    if (g->table_cap == 0)
        return NONE;
    for (uint32_t i = home_of(g, offset);; i = (i + 1) & (g->table_cap - 1)) {
        if (g->table[i] == NONE)
            return NONE;
        if (g->slab[g->table[i]].offset == offset)
            return i;
    }
}

static entry *find(const fxb_gs *g, uint64_t offset)
{
    uint32_t pos = table_pos(g, offset);
    return pos == NONE ? NULL : &g->slab[g->table[pos]];
}

static void table_put(fxb_gs *g, uint32_t idx)
{
    uint32_t i = home_of(g, g->slab[idx].offset);
    while (g->table[i] != NONE)
        i = (i + 1) & (g->table_cap - 1);
    g->table[i] = idx;
}

/* Backward-shift deletion: later entries of the probe chain move into the
 * hole unless their home lies cyclically in (hole, their slot]. */
static void table_del(fxb_gs *g, uint32_t hole)
{
    uint32_t mask = g->table_cap - 1;
    for (uint32_t j = (hole + 1) & mask; g->table[j] != NONE; j = (j + 1) & mask) {
        uint32_t h = home_of(g, g->slab[g->table[j]].offset);
        if (((j - h) & mask) >= ((j - hole) & mask)) {
            g->table[hole] = g->table[j];
            hole = j;
        }
    }
    g->table[hole] = NONE;
}

/* Grows slab, table and heap to hold |need| entries. 0 or -ENOMEM. */
static int grow(fxb_gs *g, uint32_t need)
{
    uint64_t limit = (uint64_t)g->cfg.max_ack_pending + g->cfg.max_parked;
    uint64_t cap = g->slab_cap ? (uint64_t)g->slab_cap * 2 : MIN_SLAB;
    if (cap > limit)
        cap = limit;
    if (cap < need)
        cap = need;
    if (cap > UINT32_MAX / 8)
        return -ENOMEM;
    uint32_t tcap = 16;
    while (tcap < 2 * cap)
        tcap *= 2;
    entry *ns = realloc(g->slab, cap * sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    g->slab = ns;
    uint32_t *nh = realloc(g->heap, cap * sizeof(*nh));
    uint32_t *nt = malloc(tcap * sizeof(*nt));
    if (nh == NULL || nt == NULL) {
        if (nh != NULL)
            g->heap = nh;
        free(nt);
        return -ENOMEM;
    }
    g->heap = nh;
    free(g->table);
    g->table = nt;
    g->table_cap = tcap;
    memset(nt, 0xff, tcap * sizeof(*nt));
    for (uint32_t i = 0; i < g->slab_used; i++)
        if (g->slab[i].state != ST_FREE)
            table_put(g, i);
    g->slab_cap = (uint32_t)cap;
    return 0;
}

/* A new entry for |offset| (state still FREE) or NULL on no memory. */
static entry *entry_new(fxb_gs *g, uint64_t offset, uint32_t bytes)
{
    if (g->free_head == NONE && g->slab_used == g->slab_cap && grow(g, g->slab_cap + 1) < 0)
        return NULL;
    uint32_t idx;
    if (g->free_head != NONE) {
        idx = g->free_head;
        g->free_head = g->slab[idx].tnext;
    } else {
        idx = g->slab_used++;
    }
    entry *e = &g->slab[idx];
    *e = (entry){.offset = offset, .tprev = NONE, .tnext = NONE, .aux = NONE, .bytes = bytes};
    table_put(g, idx);
    g->n_entries++;
    g->pending_bytes += bytes;
    return e;
}

static uint32_t idx_of(const fxb_gs *g, const entry *e)
{
    return (uint32_t)(e - g->slab);
}

/* ---- redelivery heap ------------------------------------------------------- */

static bool heap_less(const fxb_gs *g, uint32_t a, uint32_t b)
{
    return g->slab[g->heap[a]].offset < g->slab[g->heap[b]].offset;
}

static void heap_swap(fxb_gs *g, uint32_t a, uint32_t b)
{
    uint32_t t = g->heap[a];
    g->heap[a] = g->heap[b];
    g->heap[b] = t;
    g->slab[g->heap[a]].aux = a;
    g->slab[g->heap[b]].aux = b;
}

static void heap_up(fxb_gs *g, uint32_t i)
{
    while (i > 0 && heap_less(g, i, (i - 1) / 2)) {
        heap_swap(g, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(fxb_gs *g, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < g->heap_n && heap_less(g, l, m))
            m = l;
        if (l + 1 < g->heap_n && heap_less(g, l + 1, m))
            m = l + 1;
        if (m == i)
            return;
        heap_swap(g, i, m);
        i = m;
    }
}

/* The heap never outgrows the slab, so a push cannot fail. */
static void heap_push(fxb_gs *g, entry *e)
{
    uint32_t i = g->heap_n++;
    g->heap[i] = idx_of(g, e);
    e->aux = i;
    heap_up(g, i);
}

static void heap_remove(fxb_gs *g, entry *e)
{
    uint32_t i = e->aux, last = --g->heap_n;
    if (i != last) {
        heap_swap(g, i, last);
        heap_down(g, i);
        heap_up(g, i);
    }
    e->aux = NONE;
}

static entry *heap_top(const fxb_gs *g)
{
    return g->heap_n ? &g->slab[g->heap[0]] : NULL;
}

/* ---- lists and the timer wheel --------------------------------------------- */

static void bit_set(uint64_t *bits, uint32_t i, bool on)
{
    if (on)
        bits[i / 64] |= 1ull << (i % 64);
    else
        bits[i / 64] &= ~(1ull << (i % 64));
}

/* Which counter a list's entries count in, as a level tag for the entry. */
static uint8_t level_of(uint32_t list)
{
    if (list < L0_SLOTS)
        return F_L0;
    if (list < LIST_OVF)
        return F_L1;
    return list == LIST_OVF ? F_OVF : 0;
}

static uint32_t *level_count(fxb_gs *g, uint8_t level)
{
    switch (level) {
    case F_L0:
        return &g->n_l0;
    case F_L1:
        return &g->n_l1;
    case F_OVF:
        return &g->n_ovf;
    default:
        return NULL;
    }
}

static void list_push(fxb_gs *g, uint32_t list, entry *e)
{
    uint32_t idx = idx_of(g, e), old = g->head[list];
    e->tprev = LIST_TAG | list;
    e->tnext = old;
    if (old != NONE)
        g->slab[old].tprev = idx;
    g->head[list] = idx;
    e->flags = (uint8_t)((e->flags & ~F_LEVEL) | level_of(list));
    uint32_t *n = level_count(g, level_of(list));
    if (n != NULL)
        (*n)++;
    if (list < L0_SLOTS)
        bit_set(g->bits0, list, true);
    else if (list < LIST_OVF)
        bit_set(g->bits1, list - LIST_L1, true);
}

static void list_unlink(fxb_gs *g, entry *e)
{
    if (e->tprev == NONE)
        return;
    uint32_t list = NONE;
    if (e->tprev & LIST_TAG) {
        list = e->tprev & ~LIST_TAG;
        g->head[list] = e->tnext;
    } else {
        g->slab[e->tprev].tnext = e->tnext;
    }
    if (e->tnext != NONE)
        g->slab[e->tnext].tprev = e->tprev;
    uint32_t *n = level_count(g, e->flags & F_LEVEL);
    if (n != NULL)
        (*n)--;
    if (list != NONE && g->head[list] == NONE) {
        if (list < L0_SLOTS)
            bit_set(g->bits0, list, false);
        else if (list < LIST_OVF)
            bit_set(g->bits1, list - LIST_L1, false);
    }
    e->tprev = e->tnext = NONE;
    e->flags &= (uint8_t)~F_LEVEL;
}

static bool wheel_empty(const fxb_gs *g)
{
    return g->n_l0 + g->n_l1 + g->n_ovf == 0;
}

/* Places a timed entry by its tick relative to |cur|: this epoch (or the
 * past) on level 0, the next 511 epochs on level 1, later on overflow. */
static void wheel_place(fxb_gs *g, entry *e)
{
    uint64_t t = e->when / 1000, ep = g->cur >> L0_BITS;
    if (t < g->cur)
        t = g->cur;
    uint64_t te = t >> L0_BITS;
    if (te == ep)
        list_push(g, (uint32_t)(t & (L0_SLOTS - 1)), e);
    else if (te - ep < L1_SLOTS)
        list_push(g, LIST_L1 + (uint32_t)(te % L1_SLOTS), e);
    else
        list_push(g, LIST_OVF, e);
}

/* Arms |e|'s timer at |when|; |now_us| anchors an empty wheel. */
static void wheel_add(fxb_gs *g, entry *e, uint64_t when, uint64_t now_us)
{
    if (wheel_empty(g))
        g->cur = now_us / 1000;
    e->when = when;
    wheel_place(g, e);
}

/* Re-places every entry of |list| (after |cur| moved into a new epoch). */
static void wheel_spill(fxb_gs *g, uint32_t list)
{
    uint32_t i = g->head[list];
    while (i != NONE) {
        uint32_t nx = g->slab[i].tnext;
        list_unlink(g, &g->slab[i]);
        wheel_place(g, &g->slab[i]);
        i = nx;
    }
}

/* Moves |cur| to the first tick of the next epoch and cascades. */
static void wheel_next_epoch(fxb_gs *g)
{
    uint64_t ep = (g->cur >> L0_BITS) + 1;
    g->cur = ep << L0_BITS;
    if (ep % L1_SLOTS == 0)
        wheel_spill(g, LIST_OVF);
    wheel_spill(g, LIST_L1 + (uint32_t)(ep % L1_SLOTS));
}

/* ---- state changes ------------------------------------------------------------ */

static bool exhausted(const fxb_gs *g, const entry *e)
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
static void detach(fxb_gs *g, entry *e)
{
    switch (e->state) {
    case ST_ACQUIRED:
        g->members[e->aux].held--;
        g->acquired--;
        list_unlink(g, e);
        break;
    case ST_AVAILABLE:
        heap_remove(g, e);
        g->available--;
        break;
    case ST_PARKED:
        g->parked--;
        list_unlink(g, e);
        break;
    case ST_DEAD:
        g->dead--;
        if (e->flags & F_REPORTED)
            g->dead_out--;
        list_unlink(g, e);
        break;
    default:
        break;
    }
    e->state = ST_FREE;
    e->aux = NONE;
}

static void to_dead(fxb_gs *g, entry *e, bool term)
{
    e->state = ST_DEAD;
    e->flags = term ? F_TERM : 0; /* detached: on no list */
    g->dead++;
    list_push(g, LIST_DEAD, e);
}

/* A detached entry becomes AVAILABLE, or a dead letter when it has had all
 * its deliveries. */
static void to_available(fxb_gs *g, entry *e)
{
    if (exhausted(g, e)) {
        to_dead(g, e, false);
        return;
    }
    e->state = ST_AVAILABLE;
    g->available++;
    heap_push(g, e);
}

/* A detached entry waits until |when| (PARKED), or is AVAILABLE at once when
 * |when| is not in the future, the wait is moot (no delivery left) or 5p is
 * full (counted). */
static void to_parked(fxb_gs *g, entry *e, uint64_t when, uint64_t now_us)
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
    wheel_add(g, e, when, now_us);
}

/* Forgets a detached entry. */
static void entry_free(fxb_gs *g, entry *e)
{
    uint32_t pos = table_pos(g, e->offset);
    assert(pos != NONE);
    table_del(g, pos);
    g->pending_bytes -= e->bytes;
    g->n_entries--;
    e->state = ST_FREE;
    e->tnext = g->free_head;
    g->free_head = idx_of(g, e);
}

/* Moves the floor over settled offsets: to the lowest pending one, or to
 * next when nothing is pending. Each offset is passed once. */
static void floor_advance(fxb_gs *g)
{
    if (g->n_entries == 0) {
        g->floor = g->next;
        return;
    }
    while (g->floor < g->next && find(g, g->floor) == NULL)
        g->floor++;
}

static void settle(fxb_gs *g, entry *e)
{
    detach(g, e);
    entry_free(g, e);
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

static void drop_tables(fxb_gs *g)
{
    free(g->slab);
    free(g->table);
    free(g->heap);
    g->slab = NULL;
    g->table = NULL;
    g->heap = NULL;
    g->slab_cap = g->slab_used = g->table_cap = g->heap_n = g->n_entries = 0;
    g->free_head = NONE;
}

void fxb_gs_free(fxb_gs *g)
{
    if (g == NULL)
        return;
    drop_tables(g);
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

static gmember *member_at(const fxb_gs *g, uint32_t id)
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
        gmember *nm = realloc(g->members, cap * sizeof(*nm));
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
    g->members[id] = (gmember){.used = true, .window = window, .ack_wait_ms = ack_wait_ms};
    g->n_members++;
    *pid = id;
    return 0;
}

void fxb_gs_member_remove(fxb_gs *g, uint32_t id, uint64_t now_us)
{
    (void)now_us; /* its records are AVAILABLE at once: no timer to arm */
    gmember *m = member_at(g, id);
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < g->slab_used && m->held > 0; i++) {
        entry *e = &g->slab[i];
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
    gmember *m = member_at(g, id);
    return m ? m->held : 0;
}

uint32_t fxb_gs_member_window(const fxb_gs *g, uint32_t id)
{
    gmember *m = member_at(g, id);
    return m ? m->window : 0;
}

/* ---- pump: ring eviction ------------------------------------------------------- */

/* Settles the pending entry of |o| (if any) as skipped; true if there was one. */
static bool skip_one(fxb_gs *g, uint64_t o)
{
    entry *e = find(g, o);
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
        entry *e = &g->slab[i];
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

static bool has_room(const gmember *m)
{
    return m->used && m->held < m->window;
}

/* The member with room not yet served this turn holding least relative to
 * its window (ties: lowest id), or NONE. */
static uint32_t pick_member(const fxb_gs *g)
{
    uint32_t best = NONE;
    for (uint32_t i = 0; i < g->members_cap; i++) {
        const gmember *m = &g->members[i];
        if (!has_room(m) || m->turn == g->turn)
            continue;
        if (best == NONE)
            best = i;
        else {
            const gmember *b = &g->members[best];
            if ((uint64_t)m->held * b->window < (uint64_t)b->held * m->window)
                best = i;
        }
    }
    return best;
}

static void acquire(fxb_gs *g, entry *e, uint32_t id, uint64_t now_us)
{
    gmember *m = &g->members[id];
    e->state = ST_ACQUIRED;
    e->aux = id;
    if (e->attempts < UINT16_MAX) /* saturates: only reachable with max_deliver -1 */
        e->attempts++;
    m->held++;
    g->acquired++;
    wheel_add(g, e, now_us + (uint64_t)m->ack_wait_ms * 1000, now_us);
}

/* A run of redeliveries: the oldest AVAILABLE offset and those right after
 * it at the same attempt. */
static uint32_t run_redeliver(fxb_gs *g, uint32_t id, uint32_t lim, uint64_t now_us, fxb_gs_run *r)
{
    entry *e = heap_top(g);
    r->first = e->offset;
    uint16_t a0 = e->attempts;
    r->attempt = a0 < UINT16_MAX ? a0 + 1u : UINT16_MAX;
    uint32_t n = 0;
    while (n < lim && (e = heap_top(g)) != NULL && e->offset == r->first + n &&
           e->attempts == a0) {
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
static uint32_t run_first(fxb_gs *g, const fxb_gs_view *v, uint32_t id, uint32_t lim,
                          uint64_t now_us, fxb_gs_run *r)
{
    uint32_t busy = g->acquired + g->available + g->dead;
    if (lim > g->cfg.max_ack_pending - busy)
        lim = g->cfg.max_ack_pending - busy;
    if (lim > v->tail - g->next)
        lim = (uint32_t)(v->tail - g->next);
    r->first = g->next;
    r->attempt = 1;
    uint32_t n = 0;
    while (n < lim && g->pending_bytes < g->cfg.max_ack_pending_bytes) {
        uint32_t len = v->len ? v->len(v->user, g->next) : 0;
        entry *e = entry_new(g, g->next, len == UINT32_MAX ? 0 : len);
        if (e == NULL)
            break; /* no memory: the offset stays undelivered for a later turn */
        acquire(g, e, id, now_us);
        g->next++;
        n++;
    }
    return n;
}

/* Hands member |id| one run. Returns false when there is nothing it could be
 * given (no redelivery, no first delivery allowed); sets |*capped| when 5g
 * kept first deliveries back. */
static bool give_run(fxb_gs *g, const fxb_gs_view *v, uint32_t id, uint64_t now_us, fxb_gs_run *r,
                     bool *capped)
{
    gmember *m = &g->members[id];
    uint32_t lim = m->window - m->held, n;
    if (lim > g->cfg.max_run)
        lim = g->cfg.max_run;
    *r = (fxb_gs_run){.member = id};
    if (g->heap_n > 0) {
        n = run_redeliver(g, id, lim, now_us, r);
    } else {
        if (g->next >= v->tail)
            return false;
        if (capped_now(g)) {
            *capped = true;
            return false;
        }
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
        entry *e = &g->slab[g->head[LIST_DEAD]];
        list_unlink(g, e);
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

static void count_turn(fxb_gs *g, const fxb_gs_view *v, bool capped, bool out_full,
                       uint64_t now_us)
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
        if (g->members[i].used && g->members[i].held >= g->members[i].window)
            g->stats.member_full++;
}

size_t fxb_gs_pump(fxb_gs *g, const fxb_gs_view *v, uint64_t now_us, fxb_gs_run *out, size_t cap,
                   fxb_gs_dead *dead, size_t dcap, size_t *ndead)
{
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
            if (!give_run(g, v, id, now_us, &out[n], &capped)) {
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
        entry *e = find(g, o);
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
static entry *fenced(fxb_gs *g, int op, uint32_t member, uint64_t offset, uint32_t attempt,
                     fxb_gs_result *res)
{
    if (offset >= g->next) {
        g->stats.invalid++;
        *res = FXB_GS_INVALID;
        return NULL;
    }
    entry *e = offset < g->floor ? NULL : find(g, offset);
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
    entry *e = fenced(g, OP_NAK, member, offset, attempt, &res);
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
    entry *e = fenced(g, OP_PROGRESS, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    if (extend_ms == 0)
        extend_ms = g->members[member].ack_wait_ms;
    if (extend_ms > g->cfg.max_ack_wait_ms)
        extend_ms = g->cfg.max_ack_wait_ms;
    list_unlink(g, e);
    wheel_add(g, e, now_us + (uint64_t)extend_ms * 1000, now_us);
    g->stats.in_progress++;
    return FXB_GS_OK;
}

fxb_gs_result fxb_gs_term(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt,
                          uint64_t now_us)
{
    (void)now_us;
    fxb_gs_result res;
    entry *e = fenced(g, OP_TERM, member, offset, attempt, &res);
    if (e == NULL)
        return res;
    detach(g, e);
    to_dead(g, e, true);
    return FXB_GS_OK;
}

fxb_gs_result fxb_gs_release(fxb_gs *g, uint32_t member, uint64_t offset, uint32_t attempt)
{
    fxb_gs_result res;
    entry *e = fenced(g, OP_RELEASE, member, offset, attempt, &res);
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
    entry *e = offset < g->floor ? NULL : find(g, offset);
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
    entry *e = offset < g->floor ? NULL : find(g, offset);
    if (e == NULL || e->state != ST_DEAD || !(e->flags & F_REPORTED))
        return;
    e->flags &= (uint8_t)~F_REPORTED;
    g->dead_out--;
    list_push(g, LIST_DEAD, e);
}

/* ---- timers ------------------------------------------------------------------------- */

static uint64_t list_min(const fxb_gs *g, uint32_t list)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t i = g->head[list]; i != NONE; i = g->slab[i].tnext)
        if (g->slab[i].when < m)
            m = g->slab[i].when;
    return m;
}

/* The first set bit at or after |from| in |bits| of |n| bits, or NONE. */
static uint32_t first_bit(const uint64_t *bits, uint32_t n, uint32_t from)
{
    for (uint32_t w = from / 64; w < n / 64; w++) {
        uint64_t x = bits[w];
        if (w == from / 64)
            x &= ~0ull << (from % 64);
        if (x)
            return w * 64 + (uint32_t)__builtin_ctzll(x);
    }
    return NONE;
}

uint64_t fxb_gs_next_deadline(const fxb_gs *g)
{
    if (g->n_l0 > 0) {
        uint32_t s = first_bit(g->bits0, L0_SLOTS, (uint32_t)(g->cur & (L0_SLOTS - 1)));
        assert(s != NONE);
        return list_min(g, s);
    }
    if (g->n_l1 > 0) {
        /* Level 1 holds the epochs after this one, in ring order from ep+1. */
        uint32_t from = (uint32_t)(((g->cur >> L0_BITS) + 1) % L1_SLOTS);
        uint32_t s = first_bit(g->bits1, L1_SLOTS, from);
        if (s == NONE)
            s = first_bit(g->bits1, L1_SLOTS, 0);
        /* Overflow entries may come before level 1's once |cur| moved on. */
        uint64_t a = list_min(g, LIST_L1 + s), b = list_min(g, LIST_OVF);
        return a < b ? a : b;
    }
    return g->n_ovf > 0 ? list_min(g, LIST_OVF) : UINT64_MAX;
}

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
static void fire(fxb_gs *g, entry *e, uint64_t now_us)
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

/* The first tick of the epoch |cur| should move to next: the next epoch,
 * or, with only overflow entries, the next epoch that scans them. */
static uint64_t next_epoch_start(const fxb_gs *g)
{
    uint64_t ep = (g->cur >> L0_BITS) + 1;
    if (g->n_l0 == 0 && g->n_l1 == 0)
        ep = ((g->cur >> L0_BITS) / L1_SLOTS + 1) * L1_SLOTS;
    return ep << L0_BITS;
}

uint32_t fxb_gs_expire(fxb_gs *g, uint64_t now_us)
{
    uint64_t now = now_us / 1000;
    uint32_t n = 0;
    for (;;) {
        if (wheel_empty(g)) {
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
        uint64_t start = next_epoch_start(g);
        if (start > now) {
            g->cur = now;
            return n;
        }
        g->cur = start - 1;
        wheel_next_epoch(g);
    }
}

/* ---- seek, info, memory ----------------------------------------------------------- */

void fxb_gs_seek(fxb_gs *g, uint64_t offset)
{
    drop_tables(g);
    memset(g->head, 0xff, sizeof(g->head));
    memset(g->bits0, 0, sizeof(g->bits0));
    memset(g->bits1, 0, sizeof(g->bits1));
    g->n_l0 = g->n_l1 = g->n_ovf = 0;
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

const fxb_gs_stats *fxb_gs_stats_of(const fxb_gs *g)
{
    return &g->stats;
}

size_t fxb_gs_memory(const fxb_gs *g)
{
    return sizeof(*g) + (size_t)g->slab_cap * sizeof(entry) +
           (size_t)g->table_cap * sizeof(uint32_t) + (size_t)g->slab_cap * sizeof(uint32_t) +
           (size_t)g->members_cap * sizeof(gmember);
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
    entry *e = entry_new(g, offset, 0);
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
        wheel_add(g, e, not_before_us, not_before_us);
    }
    return 0;
}
