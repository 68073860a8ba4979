/* The pending set of a consumer group (group_state_int.h): the offset
 * table, the redelivery heap and the timer wheel under group_state.c.
 * Owner: the stream's worker loop, like the group.
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
#include "broker/group_state_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

fxb_gs_entry *fxb_gsp_find(const fxb_gs *g, uint64_t offset)
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
    fxb_gs_entry *ns = realloc(g->slab, cap * sizeof(*ns));
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
fxb_gs_entry *fxb_gsp_entry_new(fxb_gs *g, uint64_t offset, uint32_t bytes)
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
    fxb_gs_entry *e = &g->slab[idx];
    *e =
        (fxb_gs_entry){.offset = offset, .tprev = NONE, .tnext = NONE, .aux = NONE, .bytes = bytes,
                       .last = NONE};
    table_put(g, idx);
    g->n_entries++;
    g->pending_bytes += bytes;
    return e;
}

uint32_t fxb_gsp_idx_of(const fxb_gs *g, const fxb_gs_entry *e)
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
void fxb_gsp_heap_push(fxb_gs *g, fxb_gs_entry *e)
{
    uint32_t i = g->heap_n++;
    g->heap[i] = fxb_gsp_idx_of(g, e);
    e->aux = i;
    heap_up(g, i);
}

void fxb_gsp_heap_remove(fxb_gs *g, fxb_gs_entry *e)
{
    uint32_t i = e->aux, last = --g->heap_n;
    if (i != last) {
        heap_swap(g, i, last);
        heap_down(g, i);
        heap_up(g, i);
    }
    e->aux = NONE;
}

fxb_gs_entry *fxb_gsp_heap_top(const fxb_gs *g)
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

void fxb_gsp_list_push(fxb_gs *g, uint32_t list, fxb_gs_entry *e)
{
    uint32_t idx = fxb_gsp_idx_of(g, e), old = g->head[list];
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

void fxb_gsp_list_unlink(fxb_gs *g, fxb_gs_entry *e)
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

bool fxb_gsp_wheel_empty(const fxb_gs *g)
{
    return g->n_l0 + g->n_l1 + g->n_ovf == 0;
}

/* Places a timed entry by its tick relative to |cur|: this epoch (or the
 * past) on level 0, the next 511 epochs on level 1, later on overflow. */
static void wheel_place(fxb_gs *g, fxb_gs_entry *e)
{
    uint64_t t = e->when / 1000, ep = g->cur >> L0_BITS;
    if (t < g->cur)
        t = g->cur;
    uint64_t te = t >> L0_BITS;
    if (te == ep)
        fxb_gsp_list_push(g, (uint32_t)(t & (L0_SLOTS - 1)), e);
    else if (te - ep < L1_SLOTS)
        fxb_gsp_list_push(g, LIST_L1 + (uint32_t)(te % L1_SLOTS), e);
    else
        fxb_gsp_list_push(g, LIST_OVF, e);
}

/* Arms |e|'s timer at |when|; |now_us| anchors an empty wheel. */
void fxb_gsp_wheel_add(fxb_gs *g, fxb_gs_entry *e, uint64_t when, uint64_t now_us)
{
    if (fxb_gsp_wheel_empty(g))
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
        fxb_gsp_list_unlink(g, &g->slab[i]);
        wheel_place(g, &g->slab[i]);
        i = nx;
    }
}

/* Moves |cur| to the first tick of the next epoch and cascades. */
void fxb_gsp_wheel_next_epoch(fxb_gs *g)
{
    uint64_t ep = (g->cur >> L0_BITS) + 1;
    g->cur = ep << L0_BITS;
    if (ep % L1_SLOTS == 0)
        wheel_spill(g, LIST_OVF);
    wheel_spill(g, LIST_L1 + (uint32_t)(ep % L1_SLOTS));
}

/* Forgets a detached entry. */
void fxb_gsp_entry_free(fxb_gs *g, fxb_gs_entry *e)
{
    uint32_t pos = table_pos(g, e->offset);
    assert(pos != NONE);
    table_del(g, pos);
    g->pending_bytes -= e->bytes;
    g->n_entries--;
    e->state = ST_FREE;
    e->tnext = g->free_head;
    g->free_head = fxb_gsp_idx_of(g, e);
}

void fxb_gsp_drop_tables(fxb_gs *g)
{
    free(g->slab);
    free(g->table);
    free(g->heap);
    g->slab = NULL;
    g->table = NULL;
    g->heap = NULL;
    g->slab_cap = g->slab_used = g->table_cap = g->heap_n = g->n_entries = 0;
    g->free_head = NONE;
    memset(g->head, 0xff, sizeof(g->head));
    memset(g->bits0, 0, sizeof(g->bits0));
    memset(g->bits1, 0, sizeof(g->bits1));
    g->n_l0 = g->n_l1 = g->n_ovf = 0;
}

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

/* As fxb_gs_next_deadline, but a level-1 slot answers with the first tick of
 * its epoch instead of its earliest entry: no scan of a list that holds
 * every lease of the next seconds (with a 30 s ack wait, all of them). The
 * timer fires at that epoch's start at the latest, fxb_gs_expire moves the
 * slot to level 0, and the next call is exact. */
uint64_t fxb_gs_next_wakeup(const fxb_gs *g)
{
    if (g->n_l0 > 0 || g->n_l1 == 0)
        return fxb_gs_next_deadline(g);
    uint64_t ep = g->cur >> L0_BITS;
    uint32_t from = (uint32_t)((ep + 1) % L1_SLOTS);
    uint32_t s = first_bit(g->bits1, L1_SLOTS, from);
    if (s == NONE)
        s = first_bit(g->bits1, L1_SLOTS, 0);
    assert(s != NONE);
    /* The epochs on level 1 are ep+1 .. ep+511; slot |s| holds the one
     * congruent to it. */
    uint64_t e = ep + 1 + (uint64_t)((s + L1_SLOTS - from) % L1_SLOTS);
    uint64_t start_us = (e << L0_BITS) * 1000;
    uint64_t b = g->n_ovf > 0 ? list_min(g, LIST_OVF) : UINT64_MAX;
    return start_us < b ? start_us : b;
}

/* The first tick of the epoch |cur| should move to next: the next epoch,
 * or, with only overflow entries, the next epoch that scans them. */
uint64_t fxb_gsp_next_epoch_start(const fxb_gs *g)
{
    uint64_t ep = (g->cur >> L0_BITS) + 1;
    if (g->n_l0 == 0 && g->n_l1 == 0)
        ep = ((g->cur >> L0_BITS) / L1_SLOTS + 1) * L1_SLOTS;
    return ep << L0_BITS;
}
