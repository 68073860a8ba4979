/* The per-stream table by handle id (idtable.h): open addressing with
 * linear probing and backward-shift deletion, so lookups need no
 * tombstones and the table can shrink as streams go. Owning loop only. */
#include "broker/idtable.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

static size_t home_of(const fxb_idtable *t, uint64_t id)
{
    /* Spreads the ids one loop gets (one in every nworkers). */
    uint64_t x = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(x ^ (x >> 32)) & (t->cap - 1);
}

fxb_idslot *fxb_idtable_find(const fxb_idtable *t, uint64_t id)
{
    if (t->cap == 0 || id == 0)
        return NULL;
    for (size_t i = home_of(t, id);; i = (i + 1) & (t->cap - 1)) {
        if (t->slots[i].id == id)
            return &t->slots[i];
        if (t->slots[i].id == 0)
            return NULL;
    }
}

/* Moves every entry into a table of |cap| slots. Returns 0 or -ENOMEM (|t|
 * unchanged). */
static int resize(fxb_idtable *t, size_t cap)
{
    fxb_idslot *ns = calloc(cap, sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    fxb_idtable nt = {.slots = ns, .cap = cap, .n = t->n};
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].id == 0)
            continue;
        size_t j = home_of(&nt, t->slots[i].id);
        while (ns[j].id != 0)
            j = (j + 1) & (cap - 1);
        ns[j] = t->slots[i];
    }
    free(t->slots);
    *t = nt;
    return 0;
}

int fxb_idtable_insert(fxb_idtable *t, uint64_t id, void *p)
{
    assert(id != 0 && fxb_idtable_find(t, id) == NULL);
    if ((t->n + 1) * 2 > t->cap) {
        int rv = resize(t, t->cap ? t->cap * 2 : FXB_IDTABLE_MIN);
        if (rv != 0 && t->n + 1 >= t->cap)
            return rv; /* a fuller table still works while a slot stays free */
    }
    size_t i = home_of(t, id);
    while (t->slots[i].id != 0)
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = (fxb_idslot){.id = id, .p = p};
    t->n++;
    return 0;
}

void fxb_idtable_remove(fxb_idtable *t, fxb_idslot *e)
{
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(e - t->slots);
    assert(hole < t->cap && e->id != 0);
    for (size_t i = (hole + 1) & mask; t->slots[i].id != 0; i = (i + 1) & mask) {
        size_t home = home_of(t, t->slots[i].id);
        /* The entry at |i| may fill the hole if its home is not in (hole, i]. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            t->slots[hole] = t->slots[i];
            hole = i;
        }
    }
    t->slots[hole] = (fxb_idslot){0};
    t->n--;
    if (t->cap > FXB_IDTABLE_MIN && t->n * 8 < t->cap)
        (void)resize(t, t->cap / 2); /* a failed shrink only keeps memory */
}

fxb_idslot *fxb_idtable_next(const fxb_idtable *t, size_t *pos)
{
    for (size_t i = *pos; i < t->cap; i++) {
        if (t->slots[i].id != 0) {
            *pos = i + 1;
            return &t->slots[i];
        }
    }
    *pos = t->cap;
    return NULL;
}

size_t fxb_idtable_capacity(const fxb_idtable *t)
{
    return t->cap;
}

size_t fxb_idtable_count(const fxb_idtable *t)
{
    return t->n;
}

void fxb_idtable_deinit(fxb_idtable *t)
{
    free(t->slots);
    *t = (fxb_idtable){0};
}
