/* fxb_idtable: per-stream pointers by handle id for the loop that owns
 * them (a worker's fx_streams and durable-stream state, a storage thread's
 * logs). Open addressing with linear probing, |cap| a power of two (0
 * before the first entry), at most half full, and halved when under an
 * eighth full, so its size follows the live entries however many ids
 * create/delete churn used up (handle ids only grow). Single-threaded: the
 * owning loop's thread only (or teardown, loops stopped). */
#ifndef FX_BROKER_IDTABLE_H
#define FX_BROKER_IDTABLE_H

#include <stddef.h>
#include <stdint.h>

/* One entry: |id| 0 is a free slot (handle ids start at 1). */
typedef struct fxb_idslot {
    uint64_t id;
    void *p;
} fxb_idslot;

/* Embedded by its owner; all-zero is an empty table (no allocation yet). */
typedef struct fxb_idtable {
    fxb_idslot *slots;
    size_t cap;
    size_t n;
} fxb_idtable;

/* The smallest table once allocated; it never shrinks below this. */
#define FXB_IDTABLE_MIN 16u

/* The entry of |id| (> 0), or NULL. The pointer stays valid until the next
 * insert or remove. */
fxb_idslot *fxb_idtable_find(const fxb_idtable *t, uint64_t id);

/* Adds |p| under |id| (> 0, not present; asserted in debug builds),
 * doubling the table when it would pass half full. Returns 0 or -ENOMEM
 * (|t| unchanged). The caller keeps ownership of |p|. */
int fxb_idtable_insert(fxb_idtable *t, uint64_t id, void *p);

/* Empties |e| (an entry of |t|, from fxb_idtable_find or fxb_idtable_next)
 * and halves a table under an eighth full (a failed shrink only keeps the
 * memory). Entries move: pointers to other entries are stale afterwards.
 * Does not free |e->p|. */
void fxb_idtable_remove(fxb_idtable *t, fxb_idslot *e);

/* Iteration: the next entry at or after slot |*pos| (start at 0), with
 * |*pos| advanced past it; NULL when none is left. The table must not
 * change (insert, remove) during an iteration. */
fxb_idslot *fxb_idtable_next(const fxb_idtable *t, size_t *pos);

/* Slots allocated (0 before the first insert): what the table costs. */
size_t fxb_idtable_capacity(const fxb_idtable *t);
/* Entries held. */
size_t fxb_idtable_count(const fxb_idtable *t);

/* Frees the slots (not what the entries point to) and empties |t|. */
void fxb_idtable_deinit(fxb_idtable *t);

#endif
