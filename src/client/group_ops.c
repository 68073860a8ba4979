/* libfelix consumer groups: a member's op queue (client.h fxc_gops), the
 * ack / nak / in_progress / term / release ops the application makes,
 * merged as they are queued and encoded as one GROUP_ACKS frame per loop
 * turn. Pure code on memory; the member's users hold the client's mutex. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "client/client.h"
#include "wire/group.h"

void fxc_gops_init(fxc_gops *q, size_t max)
{
    *q = (fxc_gops){.max = max};
}

void fxc_gops_clear(fxc_gops *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->ops[i].reason);
    q->n = 0;
}

void fxc_gops_deinit(fxc_gops *q)
{
    fxc_gops_clear(q);
    free(q->ops);
    q->ops = NULL;
    q->cap = 0;
}

/* Merges an ack of |off| into the last op when that is an ack range it
 * touches or holds. Only the last: merging past other ops could move an
 * ack of an offset before an earlier op on it. */
static bool ack_merge(fxc_gops *q, uint64_t off)
{
    if (q->n == 0 || q->ops[q->n - 1].kind != FX_GROUP_OP_ACK)
        return false;
    fxc_gop *o = &q->ops[q->n - 1];
    if (off >= o->first && off - o->first < o->count)
        return true; /* already in it */
    if (off == o->first + o->count && o->count < UINT32_MAX && off != UINT64_MAX) {
        o->count++;
        return true;
    }
    if (off + 1 == o->first && o->count < UINT32_MAX) {
        o->first = off;
        o->count++;
        return true;
    }
    return false;
}

/* A queued in_progress of |off| is replaced by the newer one. */
static bool progress_merge(fxc_gops *q, uint64_t off, uint32_t attempt, uint32_t arg)
{
    for (size_t i = q->n; i-- > 0;) {
        fxc_gop *o = &q->ops[i];
        if (o->first == off && o->kind != FX_GROUP_OP_ACK) {
            if (o->kind != FX_GROUP_OP_IN_PROGRESS)
                return false; /* settled after: keep the order */
            o->attempt = attempt;
            o->arg = arg;
            return true;
        }
    }
    return false;
}

int fxc_gops_push(fxc_gops *q, int kind, uint64_t offset, uint32_t attempt, uint32_t arg,
                  const char *reason)
{
    if (kind == FX_GROUP_OP_ACK && ack_merge(q, offset))
        return 0;
    if (kind == FX_GROUP_OP_IN_PROGRESS && progress_merge(q, offset, attempt, arg))
        return 0;
    if (q->n >= q->max)
        return FX_EFULL;
    if (q->n == q->cap) {
        fxc_gop *n = fx_grow(q->ops, &q->cap, q->n + 1, sizeof(*n), 16);
        if (n == NULL)
            return -ENOMEM;
        q->ops = n;
    }
    char *r = NULL;
    if (reason != NULL && reason[0] != '\0' && (r = strdup(reason)) == NULL)
        return -ENOMEM;
    q->ops[q->n++] = (fxc_gop){.kind = (uint8_t)kind, .first = offset, .count = 1,
                               .attempt = attempt, .arg = arg, .reason = r};
    return 0;
}

int fxc_gops_encode(const fxc_gops *q, uint64_t request_id, uint8_t **pout, size_t *plen)
{
    fx_wire_group_op *ops = q->n > 0 ? calloc(q->n, sizeof(*ops)) : NULL;
    if (q->n > 0 && ops == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < q->n; i++) {
        const fxc_gop *o = &q->ops[i];
        ops[i] = (fx_wire_group_op){.kind = (fx_group_op_kind)o->kind, .first = o->first,
                                    .count = o->count, .attempt = o->attempt, .arg = o->arg};
        if (o->reason != NULL)
            ops[i].reason = (fx_wire_slice){(const uint8_t *)o->reason, strlen(o->reason)};
    }
    fx_wire_group_acks a = {.request_id = request_id, .nops = (uint32_t)q->n, .ops = ops};
    size_t n = fx_wire_group_acks_frame_size(&a);
    uint8_t *out = malloc(n);
    ssize_t w = out == NULL ? -ENOMEM : fx_wire_group_acks_encode(&a, out, n);
    free(ops);
    if (w < 0) {
        free(out);
        return (int)w;
    }
    *pout = out;
    *plen = (size_t)w;
    return 0;
}

