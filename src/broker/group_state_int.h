/* Internal to the consumer-group engine (group_state.c, group_pending.c):
 * the group's struct, its pending entries and members, and the pending
 * set's table, heap and timer-wheel operations. Owner: the stream's worker
 * loop; not thread-safe. Nothing outside the two files includes it. */
#ifndef FX_BROKER_GROUP_STATE_INT_H
#define FX_BROKER_GROUP_STATE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/group_state.h"

/* ---- constants and types -------------------------------------------------- */

#define NONE UINT32_MAX
#define LIST_TAG 0x80000000u
#define L0_BITS 12
#define L0_SLOTS (1u << L0_BITS)
#define L1_SLOTS 512u
#define LIST_L1 L0_SLOTS               /* level-1 list ids follow level 0's */
#define LIST_OVF (L0_SLOTS + L1_SLOTS) /* the overflow list */
#define LIST_DEAD (LIST_OVF + 1)       /* dead letters not yet reported */
#define N_LISTS (LIST_DEAD + 1)
#define MIN_SLAB 16u
#define DEFAULT_WINDOW 256u
#define MAX_DELAY_MS (INT64_C(1) << 40) /* about 35 years: keeps now + delay in range */

enum { ST_FREE = 0, ST_ACQUIRED, ST_AVAILABLE, ST_PARKED, ST_DEAD };
/* Entry flags; F_LEVEL says which timer counter the entry's list counts in. */
enum { F_REPORTED = 1, F_TERM = 2, F_L0 = 4, F_L1 = 8, F_OVF = 12, F_LEVEL = 12 };

typedef struct fxb_gs_entry {
    uint64_t offset;
    uint64_t when;  /* ACQUIRED: lease deadline; PARKED: not-before (us) */
    uint32_t tprev; /* previous entry, or LIST_TAG | list id when first */
    uint32_t tnext; /* next entry, NONE; the free list uses it too */
    uint32_t aux;   /* ACQUIRED: holder member; AVAILABLE: heap position */
    uint32_t bytes;
    uint32_t last;  /* the member that held it last (NONE: never held) */
    uint16_t attempts;
    uint8_t state;
    uint8_t flags;
} fxb_gs_entry;
_Static_assert(sizeof(fxb_gs_entry) <= 40, "a pending entry stays within 40 bytes");

typedef struct fxb_gs_member {
    bool used;
    uint32_t window;
    uint32_t ack_wait_ms;
    uint32_t held;
    uint64_t turn; /* the pump turn that last served it */
} fxb_gs_member;

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

    fxb_gs_entry *slab;
    uint32_t slab_cap, n_entries, free_head, slab_used;
    uint32_t *table; /* slab indices, NONE empty */
    uint32_t table_cap;
    uint32_t *heap;
    uint32_t heap_n;

    fxb_gs_member *members;
    uint32_t members_cap, n_members;

    /* Timer wheel: |cur| is the current tick (ms). */
    uint64_t cur;
    uint32_t n_l0, n_l1, n_ovf;
    uint32_t head[N_LISTS];
    uint64_t bits0[L0_SLOTS / 64];
    uint64_t bits1[L1_SLOTS / 64];
};

/* ---- pending set (group_pending.c) ------------------------------------------ */

/* The pending entry of |offset|, or NULL (settled, or never handed out). */
fxb_gs_entry *fxb_gsp_find(const fxb_gs *g, uint64_t offset);
/* A new entry of |offset| weighing |bytes| (state still FREE, on no list),
 * in the table and in pending_bytes; NULL on no memory. */
fxb_gs_entry *fxb_gsp_entry_new(fxb_gs *g, uint64_t offset, uint32_t bytes);
/* Forgets a detached entry (table, pending_bytes; its slot is reused). */
void fxb_gsp_entry_free(fxb_gs *g, fxb_gs_entry *e);
/* |e|'s slab index. */
uint32_t fxb_gsp_idx_of(const fxb_gs *g, const fxb_gs_entry *e);
/* Frees the slab, table and heap and empties the wheel (seek, free). */
void fxb_gsp_drop_tables(fxb_gs *g);

/* The redelivery heap, oldest offset on top; a push never fails (the heap
 * is as large as the slab). */
void fxb_gsp_heap_push(fxb_gs *g, fxb_gs_entry *e);
void fxb_gsp_heap_remove(fxb_gs *g, fxb_gs_entry *e);
fxb_gs_entry *fxb_gsp_heap_top(const fxb_gs *g);

/* Puts |e| first on list |list| (a wheel slot, LIST_OVF or LIST_DEAD);
 * unlink takes it off whatever list it is on (none: nothing). */
void fxb_gsp_list_push(fxb_gs *g, uint32_t list, fxb_gs_entry *e);
void fxb_gsp_list_unlink(fxb_gs *g, fxb_gs_entry *e);

/* Whether no timer is armed. */
bool fxb_gsp_wheel_empty(const fxb_gs *g);
/* Arms |e|'s timer at |when| (us); |now_us| anchors an empty wheel. */
void fxb_gsp_wheel_add(fxb_gs *g, fxb_gs_entry *e, uint64_t when, uint64_t now_us);
/* Moves |cur| to the first tick of the next epoch and cascades level 1
 * (and, every 512 epochs, the overflow list) into it. */
void fxb_gsp_wheel_next_epoch(fxb_gs *g);
/* The first tick of the next epoch expiry must stop at: the next one, or
 * with only overflow timers armed, the next that scans them. */
uint64_t fxb_gsp_next_epoch_start(const fxb_gs *g);

#endif
