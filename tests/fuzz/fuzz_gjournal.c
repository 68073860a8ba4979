/* libFuzzer target: the two pure decoders of the consumer-group journal
 * (storage/gjournal.h). The input is a mode byte, then bytes: with bit 0
 * clear they are a stream of journal records, decoded one after the other
 * until one is short or bad; with it set, one snapshot. Checked: a decoded
 * record encodes back to the same bytes and applies to the state model
 * (ranges above 65,536 skipped, to keep runs fast), whose invariants hold
 * after every record (pending ascending within [floor, next), the floor at
 * the lowest pending offset, intents on pending offsets, dead-letter
 * entries distinct, bounded, a redriven one pending; the
 * REDRIVE and DISCARD records included) and whose snapshot
 * decodes back equal; a decoded snapshot encodes back to the same bytes (a
 * version 1 one, to a version 2 snapshot that decodes equal) and holds the
 * same invariants. Seeds: tests/fuzz/corpus/fuzz_gjournal.
 * Single-threaded. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "storage/gjournal.h"

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_invariants(const fx_gjournal_state *s)
{
    size_t n, nin;
    const fx_gjournal_pending *p = fx_gjournal_state_pending(s, &n);
    const fx_gjournal_intent *in = fx_gjournal_state_intents(s, &nin);
    FUZZ_CHECK(s->floor <= s->next);
    FUZZ_CHECK(n > 0 ? s->floor == p[0].offset : s->floor == s->next);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(p[i].offset >= s->floor && p[i].offset < s->next);
        FUZZ_CHECK(i == 0 || p[i].offset > p[i - 1].offset);
        FUZZ_CHECK(p[i].state == (p[i].not_before_us > 0 ? FX_GJ_PARKED : FX_GJ_AVAILABLE));
    }
    for (size_t i = 0; i < nin; i++) {
        FUZZ_CHECK(i == 0 || in[i].offset > in[i - 1].offset);
        bool pending = false;
        for (size_t k = 0; k < n && !pending; k++)
            pending = p[k].offset == in[i].offset;
        FUZZ_CHECK(pending);
    }
    size_t ndl, nred = 0;
    const fx_gjournal_dead *dl = fx_gjournal_state_dead(s, &ndl, NULL);
    FUZZ_CHECK(ndl <= FX_GJOURNAL_DEAD_MAX);
    for (size_t i = 0; i < ndl; i++) {
        for (size_t k = i + 1; k < ndl; k++)
            FUZZ_CHECK(dl[k].offset != dl[i].offset);
        if (!dl[i].redriven)
            continue;
        nred++;
        bool pending = false;
        for (size_t k = 0; k < n && !pending; k++)
            pending = p[k].offset == dl[i].offset;
        FUZZ_CHECK(pending);
    }
    FUZZ_CHECK(nred == s->nredriven);
}

/* The snapshot of |s| decodes back to |s|. */
static void check_snapshot_of(const fx_gjournal_state *s, uint64_t seq)
{
    uint8_t *buf;
    size_t len;
    if (fx_gjournal_encode_snapshot(s, seq, &buf, &len) != 0)
        return;
    fx_gjournal_state d;
    fx_gjournal_state_init(&d);
    uint64_t dseq = 0;
    int rv = fx_gjournal_decode_snapshot(buf, len, &d, &dseq, NULL, 0);
    FUZZ_CHECK(rv == 0 || rv == -ENOMEM);
    if (rv == 0) {
        FUZZ_CHECK(dseq == seq);
        FUZZ_CHECK(fx_gjournal_state_equal(&d, s));
    }
    fx_gjournal_state_deinit(&d);
    free(buf);
}

static void fuzz_records(const uint8_t *p, size_t n)
{
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_rec r;
    size_t used = 0;
    uint64_t last = 0;
    while (fx_gjournal_decode_record(p, n, &r, &used) == FX_GJ_REC_OK) {
        FUZZ_CHECK(used >= FX_GJOURNAL_REC_OVERHEAD && used <= FX_GJOURNAL_REC_MAX && used <= n);
        FUZZ_CHECK(fx_gjournal_rec_is_valid(&r));
        uint8_t again[FX_GJOURNAL_REC_MAX];
        FUZZ_CHECK(fx_gjournal_encode_record(&r, r.seq, again) == used);
        FUZZ_CHECK(memcmp(again, p, used) == 0);
        if (r.count <= 65536) {
            int rv = fx_gjournal_state_apply(&s, &r);
            FUZZ_CHECK(rv == 0 || rv == -ENOMEM);
            check_invariants(&s);
        }
        last = r.seq;
        p += used, n -= used;
    }
    check_snapshot_of(&s, last);
    fx_gjournal_state_deinit(&s);
}

static void fuzz_snapshot(const uint8_t *p, size_t n)
{
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    uint64_t seq = 0;
    char why[160];
    int rv = fx_gjournal_decode_snapshot(p, n, &s, &seq, why, sizeof(why));
    FUZZ_CHECK(rv == 0 || rv == FX_ESTORAGE_CORRUPT || rv == -ENOMEM);
    if (rv == 0) {
        check_invariants(&s);
        uint8_t *buf;
        size_t len;
        if (p[5] == 1) {
            check_snapshot_of(&s, seq); /* version 1: written back as version 2 */
        } else if (fx_gjournal_encode_snapshot(&s, seq, &buf, &len) == 0) {
            FUZZ_CHECK(len == n && memcmp(buf, p, n) == 0); /* one encoding per state */
            free(buf);
        }
    }
    fx_gjournal_state_deinit(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_snapshot(data + 1, size - 1);
    else
        fuzz_records(data + 1, size - 1);
    return 0;
}
