/* GROUP_ACKS frames for the ack-inbox tests (unit group_inbox, integ
 * group_flood): frame |i| has request id i + 1 and |nops| term ops with a
 * full-length reason on offsets i * nops .. i * nops + nops - 1. None of
 * them was delivered, so the broker refuses each one and its answer lists
 * them in order. */
#ifndef FX_TESTS_GROUP_FRAMES_H
#define FX_TESTS_GROUP_FRAMES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/group.h"

/* The frame, malloc'd (free() it), its size in |*plen|; NULL on failure. */
static inline uint8_t *fx_test_term_frame(uint32_t i, uint32_t nops, size_t *plen)
{
    static uint8_t reason[FX_GROUP_REASON_MAX];
    *plen = 0;
    memset(reason, 'r', sizeof(reason));
    fx_wire_group_op *ops = calloc(nops, sizeof(*ops));
    if (ops == NULL)
        return NULL;
    for (uint32_t j = 0; j < nops; j++)
        ops[j] = (fx_wire_group_op){.kind = FX_GROUP_OP_TERM,
                                    .first = (uint64_t)i * nops + j,
                                    .count = 1,
                                    .attempt = 1,
                                    .reason = {reason, sizeof(reason)}};
    fx_wire_group_acks a = {.request_id = i + 1, .nops = nops, .ops = ops};
    size_t n = fx_wire_group_acks_frame_size(&a);
    uint8_t *p = malloc(n);
    if (p != NULL && fx_wire_group_acks_encode(&a, p, n) != (ssize_t)n) {
        free(p);
        p = NULL;
    }
    free(ops);
    *plen = n;
    return p;
}

#endif
