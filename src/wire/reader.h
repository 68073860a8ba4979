/* A bounds-checked reader over a frame body, shared by the decoders of the
 * binary group and cache frames (group.c, cache_bin.c): take n bytes or
 * fail, and the two error sentences every such decoder gives ("<frame>
 * frame truncated in <field>", "<n> trailing bytes after the <frame>
 * frame"). Internal to src/wire; any thread. */
#ifndef FX_WIRE_READER_H
#define FX_WIRE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

typedef struct fx_rd {
    const uint8_t *p;
    size_t left;
} fx_rd;

/* The next |n| bytes, or NULL (nothing consumed) when fewer are left. */
static inline const uint8_t *fx_rd_take(fx_rd *r, size_t n)
{
    if (r->left < n)
        return NULL;
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline int fx_rd_truncated(fx_wire_err *err, const char *frame, const char *what)
{
    return fx_wire_err_set(err, FX_EWIRE_TRUNCATED, "%s frame truncated in %s", frame, what);
}

/* 0 when |r| is used up, else FX_EWIRE_TRAILING. */
static inline int fx_rd_trailing(const fx_rd *r, fx_wire_err *err, const char *frame)
{
    if (r->left == 0)
        return 0;
    return fx_wire_err_set(err, FX_EWIRE_TRAILING, "%zu trailing bytes after the %s frame",
                           r->left, frame);
}

#endif
