/* Unit and crash tests of the consumer-group journal (storage/gjournal.h)
 * on the in-memory I/O layer: the record and snapshot codecs, the replay
 * rules, recovery (torn tails cut at every byte, interior damage refused
 * with its file and position, the fallback to the older snapshot), the
 * clamp to a shorter log, compaction, and crash runs: a random workload of
 * appends, flushes and compactions dies after a random number of system
 * calls, then either the process is killed (everything written stays) or
 * the power is cut (what no completed sync covered is dropped or torn, the
 * ways memio tears it); the reopened group must hold the state the
 * workload had after some record (the same record for a kill, at least
 * the last flushed one for a power cut) and every flushed ack. In half the
 * runs the first reopen dies part-way too (its cut, its restart, its
 * flush) and is crashed again the same way before the reopen checked.
 * FX_GJOURNAL_CRASH_RUNS sets the runs per kind (default 300). */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/format.h"
#include "storage/gjournal.h"
#include "storage/memio.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#define DIR_ "/s/groups"
#define GROUP "orders"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static fx_gjournal_rec rec_range(fx_gjournal_type t, uint64_t first, uint32_t count,
                                 uint32_t attempt)
{
    return (fx_gjournal_rec){.type = t, .offset = first, .count = count, .attempt = attempt};
}

static fx_gjournal_rec rec_nak(uint64_t off, uint32_t attempt, uint64_t not_before)
{
    return (fx_gjournal_rec){
        .type = FX_GJ_NAK, .offset = off, .attempt = attempt, .not_before_us = not_before};
}

static fx_gjournal_rec rec_one(fx_gjournal_type t, uint64_t off, uint32_t attempt, uint8_t reason)
{
    return (fx_gjournal_rec){.type = t, .offset = off, .attempt = attempt, .reason = reason};
}

static char journal_path[128], snap_path[2][128];

static void paths(void)
{
    char stem[FX_GJOURNAL_STEM_MAX];
    fx_gjournal_stem(stem, GROUP);
    snprintf(journal_path, sizeof(journal_path), "%s/%s.jrnl", DIR_, stem);
    snprintf(snap_path[0], sizeof(snap_path[0]), "%s/%s.snap.a", DIR_, stem);
    snprintf(snap_path[1], sizeof(snap_path[1]), "%s/%s.snap.b", DIR_, stem);
}

static int gopen(fx_memio *m, fx_gjournal **pj, bool create, fx_gjournal_state *s,
                 fx_gjournal_stats *st, char *why)
{
    return fx_gjournal_open(pj, fx_memio_sio(m), DIR_, GROUP, create, s, st, why, 256);
}

/* Appends |n| records to |j| and applies them to |model|. */
static void put(fx_gjournal *j, fx_gjournal_state *model, const fx_gjournal_rec *r, size_t n)
{
    assert_int_equal(fx_gjournal_append(j, r, n), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(fx_gjournal_state_apply(model, &r[i]), 0);
}

/* A workload touching every record type. */
static const fx_gjournal_rec WORK[] = {
    {.type = FX_GJ_SEEK, .offset = 100},
    {.type = FX_GJ_DELIVER, .offset = 100, .count = 8, .attempt = 1},
    {.type = FX_GJ_ACK, .offset = 100, .count = 2},
    {.type = FX_GJ_ACK, .offset = 104, .count = 1},
    {.type = FX_GJ_NAK, .offset = 102, .attempt = 1, .not_before_us = 5000},
    {.type = FX_GJ_RELEASE, .offset = 103, .attempt = 0},
    {.type = FX_GJ_DEAD_INTENT, .offset = 105, .attempt = 1, .reason = 2},
    {.type = FX_GJ_DEAD_INTENT, .offset = 106, .attempt = 1, .reason = 1},
    {.type = FX_GJ_DEAD, .offset = 105, .dlq_offset = 7, .reason = 2},
    {.type = FX_GJ_DELIVER, .offset = 103, .count = 1, .attempt = 2},
    {.type = FX_GJ_SKIP, .offset = 107, .count = 5},
    {.type = FX_GJ_DELIVER, .offset = 112, .count = 3, .attempt = 1},
};
#define NWORK (sizeof(WORK) / sizeof(WORK[0]))

/* ---- codecs ----------------------------------------------------------------- */

static void test_record_round_trip_of_each_type(void **state)
{
    const fx_gjournal_rec recs[] = {
        rec_range(FX_GJ_DELIVER, 0x0102030405060708ull, 7, 3),
        rec_range(FX_GJ_ACK, 9, 0xFFFFFFFFu, 0),
        rec_nak(11, 4, 0xA1A2A3A4A5A6A7A8ull),
        rec_one(FX_GJ_RELEASE, 12, 2, 0),
        rec_one(FX_GJ_DEAD_INTENT, 13, 5, 1),
        {.type = FX_GJ_DEAD, .offset = 14, .dlq_offset = 0xDEADBEEFull, .reason = 2},
        rec_range(FX_GJ_SKIP, 15, 4, 0),
        {.type = FX_GJ_SEEK, .offset = UINT64_MAX},
        {.type = FX_GJ_REDRIVE, .offset = 16},
        {.type = FX_GJ_DISCARD, .offset = 17},
    };
    static const size_t body[] = {16, 12, 20, 12, 13, 17, 12, 8, 8, 8};
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
        uint8_t b[FX_GJOURNAL_REC_MAX + 8];
        size_t n = fx_gjournal_encode_record(&recs[i], 1000 + i, b);
        assert_int_equal(n, FX_GJOURNAL_REC_OVERHEAD + body[i]);
        assert_int_equal(fx_be32_get(b), body[i]);
        assert_int_equal(b[4], recs[i].type);
        assert_int_equal(fx_be64_get(b + 8), 1000 + i);
        /* The CRC is the log's (CRC-32/IEEE) over type .. end of body. */
        assert_int_equal(fx_be32_get(b + n - 4), fx_logfmt_crc(0, b + 4, n - 8));
        fx_gjournal_rec d;
        size_t used = 0;
        assert_int_equal(fx_gjournal_decode_record(b, n + 8, &d, &used), FX_GJ_REC_OK);
        assert_int_equal(used, n);
        fx_gjournal_rec want = recs[i];
        want.seq = 1000 + i;
        assert_memory_equal(&d, &want, sizeof(d));
        for (size_t k = 0; k < n; k++)
            assert_int_equal(fx_gjournal_decode_record(b, k, &d, &used), FX_GJ_REC_SHORT);
        for (size_t k = 4; k < n; k++) {
            b[k] ^= 0x10;
            assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
            b[k] ^= 0x10;
        }
    }
}

/* Re-seals |b| (|n| bytes) after an edit, as a writer with a bug would. */
static void reseal(uint8_t *b, size_t n)
{
    fx_be32_put(b + n - 4, fx_logfmt_crc(0, b + 4, n - 8));
}

static void test_record_decode_refuses_malformed_fields_even_with_a_good_crc(void **state)
{
    fx_gjournal_rec d, r = rec_range(FX_GJ_ACK, 5, 1, 0);
    uint8_t b[FX_GJOURNAL_REC_MAX];
    size_t used, n = fx_gjournal_encode_record(&r, 1, b);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_OK);
    b[5] = 1; /* flags */
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    b[5] = 0, b[7] = 1; /* reserved */
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    b[7] = 0, b[4] = FX_GJ_SKIP + 9; /* unknown type */
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    b[4] = FX_GJ_DELIVER; /* a DELIVER's body is 16 bytes, not 12 */
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    b[4] = FX_GJ_ACK;
    fx_be32_put(b + 24, 0); /* count 0 */
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    fx_be64_put(b + 16, UINT64_MAX); /* a range past 2^64 */
    fx_be32_put(b + 24, 2);
    reseal(b, n);
    assert_int_equal(fx_gjournal_decode_record(b, n, &d, &used), FX_GJ_REC_BAD);
    memset(b, 0, sizeof(b)); /* a zeroed block */
    assert_int_equal(fx_gjournal_decode_record(b, sizeof(b), &d, &used), FX_GJ_REC_BAD);
}

/* Re-seals a snapshot of |n| bytes after an edit. */
static void reseal_snapshot(uint8_t *b, size_t n)
{
    fx_be32_put(b + n - 4, fx_logfmt_crc(0, b, n - 4));
}

/* A state with AVAILABLE, PARKED and redelivered records, two intents and
 * one dead letter. */
static void build_state(fx_gjournal_state *s)
{
    fx_gjournal_state_init(s);
    for (size_t i = 0; i < NWORK; i++)
        assert_int_equal(fx_gjournal_state_apply(s, &WORK[i]), 0);
}

static void test_snapshot_round_trip(void **state)
{
    fx_gjournal_state s, d;
    build_state(&s);
    fx_gjournal_state_init(&d);
    size_t n, nin;
    fx_gjournal_state_pending(&s, &n);
    fx_gjournal_state_intents(&s, &nin);
    assert_true(n >= 4 && nin == 1);
    uint8_t *buf;
    size_t len;
    assert_int_equal(fx_gjournal_encode_snapshot(&s, 77, &buf, &len), 0);
    size_t ndl;
    fx_gjournal_state_dead(&s, &ndl, NULL);
    assert_int_equal(ndl, 1);
    assert_int_equal(len, 4 + 2 + 24 + 4 + n * 21 + 4 + nin * 13 + 8 + 4 + ndl * 22 + 4);
    assert_int_equal(buf[5], 2);                     /* version 2: with the dead-letter list */
    assert_int_equal(fx_be32_get(buf), 0x46584753u); /* "FXGS" */
    uint64_t seq = 0;
    char why[128];
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)), 0);
    assert_int_equal(seq, 77);
    assert_true(fx_gjournal_state_equal(&s, &d));
    for (size_t k = 0; k < len; k++) {
        buf[k] ^= 0x01;
        assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)),
                         FX_ESTORAGE_CORRUPT);
        buf[k] ^= 0x01;
    }
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len - 1, &d, &seq, why, sizeof(why)),
                     FX_ESTORAGE_CORRUPT);
    assert_true(fx_gjournal_state_equal(&s, &d)); /* a refused decode changed nothing */
    free(buf);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&d);
}

static void test_stem_is_the_sanitised_name_and_the_fnv_of_the_raw_name(void **state)
{
    char out[FX_GJOURNAL_STEM_MAX];
    assert_int_equal(fx_gjournal_name_hash(""), 0xcbf29ce484222325ull);
    assert_int_equal(fx_gjournal_name_hash("a"), 0xaf63dc4c8601ec8cull);
    fx_gjournal_stem(out, "a");
    assert_string_equal(out, "a-af63dc4c8601ec8c");
    fx_gjournal_stem(out, "b/c \xC3\xA9");
    assert_int_equal(strncmp(out, "b_c__-", 6), 0);
    assert_int_equal(strlen(out), 6 + 16);
    fx_gjournal_stem(out, "");
    assert_string_equal(out, "_-cbf29ce484222325");
    char longname[100];
    memset(longname, 'x', 99);
    longname[99] = '\0';
    fx_gjournal_stem(out, longname);
    assert_int_equal(strlen(out), 32 + 1 + 16);
}

/* ---- the replay rules --------------------------------------------------------- */

static void expect_pending(const fx_gjournal_state *s, size_t i, uint64_t off, uint32_t attempts,
                           uint8_t st, uint64_t nb)
{
    size_t n;
    const fx_gjournal_pending *p = fx_gjournal_state_pending(s, &n);
    assert_true(i < n);
    assert_int_equal(p[i].offset, off);
    assert_int_equal(p[i].attempts, attempts);
    assert_int_equal(p[i].state, st);
    assert_int_equal(p[i].not_before_us, nb);
}

static void test_replay_follows_the_group_engine_rules(void **state)
{
    fx_gjournal_state s;
    build_state(&s);
    /* Acked 100, 101, 104; dead 105; skipped 107..111 (next moved to 112 by
     * the skip); 102 parked, 103 redelivered (attempt 2, AVAILABLE), 106 an
     * intent; 112..114 delivered. */
    assert_int_equal(s.floor, 102);
    assert_int_equal(s.next, 115);
    size_t n, nin;
    fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 6);
    expect_pending(&s, 0, 102, 1, FX_GJ_PARKED, 5000);
    expect_pending(&s, 1, 103, 2, FX_GJ_AVAILABLE, 0);
    expect_pending(&s, 2, 106, 1, FX_GJ_AVAILABLE, 0);
    expect_pending(&s, 3, 112, 1, FX_GJ_AVAILABLE, 0);
    const fx_gjournal_intent *in = fx_gjournal_state_intents(&s, &nin);
    assert_int_equal(nin, 1);
    assert_int_equal(in[0].offset, 106);
    assert_int_equal(in[0].reason, 1);
    /* An ack of offsets never handed out is refused; one of settled ones
     * is a duplicate; acking the lowest moves the floor over settled ones. */
    fx_gjournal_rec r = rec_range(FX_GJ_ACK, 114, 10, 0);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    assert_int_equal(s.next, 115);
    r = rec_range(FX_GJ_ACK, 102, 2, 0);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    assert_int_equal(s.floor, 106);
    /* Settling 106 drops its intent. */
    r = rec_range(FX_GJ_SKIP, 106, 1, 0);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    fx_gjournal_state_intents(&s, &nin);
    assert_int_equal(nin, 0);
    assert_int_equal(s.floor, 112);
    /* A nak of an offset not pending changes nothing; a seek drops all. */
    r = rec_nak(50, 9, 1);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 2);
    r = (fx_gjournal_rec){.type = FX_GJ_SEEK, .offset = 40};
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 0);
    assert_int_equal(s.floor, 40);
    assert_int_equal(s.next, 40);
    /* A delivery past the pending bound is corruption, not an allocation. */
    r = rec_range(FX_GJ_DELIVER, 40, 0xFFFFFFFFu, 1);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), FX_ESTORAGE_CORRUPT);
    fx_gjournal_state_deinit(&s);
}

/* ---- the dead-letter list ---------------------------------------------------- */

static void expect_dead(const fx_gjournal_state *s, size_t i, uint64_t off, uint32_t attempts,
                        uint8_t reason, bool redriven)
{
    size_t n;
    const fx_gjournal_dead *d = fx_gjournal_state_dead(s, &n, NULL);
    assert_true(i < n);
    assert_int_equal(d[i].offset, off);
    assert_int_equal(d[i].attempts, attempts);
    assert_int_equal(d[i].reason, reason);
    assert_int_equal(d[i].redriven, redriven);
}

static size_t dead_count(const fx_gjournal_state *s)
{
    size_t n;
    (void)fx_gjournal_state_dead(s, &n, NULL);
    return n;
}

static void apply_all(fx_gjournal_state *s, const fx_gjournal_rec *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(fx_gjournal_state_apply(s, &r[i]), 0);
}

static void test_dead_list_follows_dead_redrive_ack_discard_and_seek(void **state)
{
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    const fx_gjournal_rec r[] = {
        {.type = FX_GJ_SEEK, .offset = 10},
        rec_range(FX_GJ_DELIVER, 10, 6, 3),
        rec_one(FX_GJ_DEAD_INTENT, 11, 3, 1),
        {.type = FX_GJ_DEAD, .offset = 11, .dlq_offset = 70, .reason = 1},
        rec_one(FX_GJ_DEAD_INTENT, 13, 2, 2),
        {.type = FX_GJ_DEAD, .offset = 13, .dlq_offset = 71, .reason = 2},
        rec_range(FX_GJ_ACK, 10, 6, 0),
    };
    apply_all(&s, r, sizeof(r) / sizeof(r[0]));
    assert_int_equal(s.floor, 16);
    assert_int_equal(dead_count(&s), 2);
    expect_dead(&s, 0, 11, 3, 1, false);
    expect_dead(&s, 1, 13, 2, 2, false);
    /* REDRIVE: pending again at 0 attempts below the floor; listed as redriven. */
    fx_gjournal_rec x = {.type = FX_GJ_REDRIVE, .offset = 11};
    assert_int_equal(fx_gjournal_state_apply(&s, &x), 0);
    assert_int_equal(s.floor, 11);
    expect_pending(&s, 0, 11, 0, FX_GJ_AVAILABLE, 0);
    expect_dead(&s, 0, 11, 3, 1, true);
    /* A second redrive, and a discard of a redriven entry, change nothing. */
    assert_int_equal(fx_gjournal_state_apply(&s, &x), 0);
    x.type = FX_GJ_DISCARD;
    assert_int_equal(fx_gjournal_state_apply(&s, &x), 0);
    assert_int_equal(dead_count(&s), 2);
    /* Delivered at attempt 1, dead again: the same entry, not redriven. */
    const fx_gjournal_rec again[] = {
        rec_range(FX_GJ_DELIVER, 11, 1, 1),
        rec_one(FX_GJ_DEAD_INTENT, 11, 1, 2),
        {.type = FX_GJ_DEAD, .offset = 11, .dlq_offset = 72, .reason = 2},
    };
    apply_all(&s, again, 3);
    assert_int_equal(dead_count(&s), 2);
    expect_dead(&s, 0, 11, 1, 2, false);
    assert_int_equal(s.floor, 16);
    /* Redriven again and acked: its entry goes. */
    const fx_gjournal_rec acked[] = {
        {.type = FX_GJ_REDRIVE, .offset = 11},
        rec_range(FX_GJ_DELIVER, 11, 1, 1),
        rec_range(FX_GJ_ACK, 11, 1, 0),
    };
    apply_all(&s, acked, 3);
    assert_int_equal(dead_count(&s), 1);
    expect_dead(&s, 0, 13, 2, 2, false);
    assert_int_equal(s.floor, 16);
    /* DISCARD removes a dead entry; the record stays settled. */
    x = (fx_gjournal_rec){.type = FX_GJ_DISCARD, .offset = 13};
    assert_int_equal(fx_gjournal_state_apply(&s, &x), 0);
    assert_int_equal(dead_count(&s), 0);
    assert_int_equal(s.floor, 16);
    /* A redrive of an offset never handed out, or pending, changes nothing. */
    x = (fx_gjournal_rec){.type = FX_GJ_REDRIVE, .offset = 16};
    assert_int_equal(fx_gjournal_state_apply(&s, &x), 0);
    assert_int_equal(s.floor, 16);
    /* A seek drops the redriven entries with the pending records, and keeps
     * the dead ones. */
    const fx_gjournal_rec sk[] = {
        rec_range(FX_GJ_DELIVER, 16, 2, 5),
        rec_one(FX_GJ_DEAD_INTENT, 16, 5, 1),
        {.type = FX_GJ_DEAD, .offset = 16, .reason = 1},
        rec_one(FX_GJ_DEAD_INTENT, 17, 5, 1),
        {.type = FX_GJ_DEAD, .offset = 17, .reason = 1},
        {.type = FX_GJ_REDRIVE, .offset = 17},
        {.type = FX_GJ_SEEK, .offset = 30},
    };
    apply_all(&s, sk, sizeof(sk) / sizeof(sk[0]));
    assert_int_equal(dead_count(&s), 1);
    expect_dead(&s, 0, 16, 5, 1, false);
    assert_int_equal(s.nredriven, 0);
    fx_gjournal_state_deinit(&s);
}

static void test_dead_list_forgets_its_oldest_past_the_bound_and_snapshots_it(void **state)
{
    fx_gjournal_state s, d;
    fx_gjournal_state_init(&s);
    fx_gjournal_state_init(&d);
    fx_gjournal_rec r = rec_range(FX_GJ_DELIVER, 0, FX_GJOURNAL_DEAD_MAX + 5, 1);
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    for (uint64_t o = 0; o < FX_GJOURNAL_DEAD_MAX + 5; o++) {
        r = (fx_gjournal_rec){.type = FX_GJ_DEAD, .offset = o, .dlq_offset = o + 1, .reason = 1};
        assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    }
    size_t n;
    uint64_t forgotten = 0;
    const fx_gjournal_dead *dl = fx_gjournal_state_dead(&s, &n, &forgotten);
    assert_int_equal(n, FX_GJOURNAL_DEAD_MAX);
    assert_int_equal(forgotten, 5);
    assert_int_equal(dl[0].offset, 5);
    assert_int_equal(dl[0].dlq_offset, 6);
    assert_int_equal(dl[0].attempts, 1);
    r = (fx_gjournal_rec){.type = FX_GJ_REDRIVE, .offset = 9};
    assert_int_equal(fx_gjournal_state_apply(&s, &r), 0);
    uint8_t *buf;
    size_t len;
    uint64_t seq = 0;
    char why[128];
    assert_int_equal(fx_gjournal_encode_snapshot(&s, 5, &buf, &len), 0);
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)), 0);
    assert_true(fx_gjournal_state_equal(&s, &d));
    assert_int_equal(d.nredriven, 1);
    /* Golden bytes of the list's head and its first entry. */
    size_t at = 4 + 2 + 24 + 4 + 1 * 21 + 4;
    assert_int_equal(fx_be64_get(buf + at), 5);
    assert_int_equal(fx_be32_get(buf + at + 8), FX_GJOURNAL_DEAD_MAX);
    assert_int_equal(fx_be64_get(buf + at + 12), 5);
    assert_int_equal(fx_be64_get(buf + at + 20), 6);
    assert_int_equal(fx_be32_get(buf + at + 28), 1);
    assert_int_equal(buf[at + 32], 1);
    assert_int_equal(buf[at + 33], 0);
    assert_int_equal(buf[at + 12 + 4 * 22 + 21], 1); /* offset 9: redriven */
    /* An entry listed twice, or redriven but not pending, is refused. */
    fx_be64_put(buf + at + 12 + 22, 5);
    reseal_snapshot(buf, len);
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)),
                     FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(why, "listed twice"));
    fx_be64_put(buf + at + 12 + 22, 6);
    buf[at + 12 + 21] = 1;
    reseal_snapshot(buf, len);
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)),
                     FX_ESTORAGE_CORRUPT);
    free(buf);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&d);
}

static void test_a_version_1_snapshot_reads_as_a_state_with_no_dead_list(void **state)
{
    fx_gjournal_state s, d;
    build_state(&s);
    fx_gjournal_state_init(&d);
    uint8_t *buf;
    size_t len;
    assert_int_equal(fx_gjournal_encode_snapshot(&s, 9, &buf, &len), 0);
    /* The version 1 bytes: the same up to the intents, then the CRC. */
    size_t n, nin, ndl;
    fx_gjournal_state_pending(&s, &n);
    fx_gjournal_state_intents(&s, &nin);
    fx_gjournal_state_dead(&s, &ndl, NULL);
    size_t v1 = len - 12 - ndl * 22;
    buf[5] = 1;
    reseal_snapshot(buf, v1);
    uint64_t seq = 0;
    char why[128];
    assert_int_equal(fx_gjournal_decode_snapshot(buf, v1, &d, &seq, why, sizeof(why)), 0);
    assert_int_equal(seq, 9);
    assert_int_equal(dead_count(&d), 0);
    assert_int_equal(d.floor, s.floor);
    assert_int_equal(d.next, s.next);
    /* A version 1 snapshot with the list's bytes is refused by its length. */
    reseal_snapshot(buf, len);
    assert_int_equal(fx_gjournal_decode_snapshot(buf, len, &d, &seq, why, sizeof(why)),
                     FX_ESTORAGE_CORRUPT);
    free(buf);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&d);
}

static void test_clamp_after_a_lost_log_tail_never_goes_to_zero(void **state)
{
    fx_gjournal_state s;
    build_state(&s); /* floor 102, next 115 */
    fx_gjournal_stats st = {0};
    fx_gjournal_clamp(&s, 200, &st); /* the log is longer: nothing moves */
    assert_int_equal(st.clamped, 0);
    assert_int_equal(s.next, 115);
    fx_gjournal_clamp(&s, 106, &st); /* the log lost 106.. */
    assert_int_equal(st.clamped, 1);
    assert_int_equal(s.floor, 102);
    assert_int_equal(s.next, 106);
    size_t n, nin;
    const fx_gjournal_pending *p = fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 2);
    assert_int_equal(p[1].offset, 103);
    fx_gjournal_state_intents(&s, &nin);
    assert_int_equal(nin, 0);       /* 106's intent went with it */
    fx_gjournal_clamp(&s, 90, &st); /* below the floor: floor = next = tail, not 0 */
    assert_int_equal(st.clamped, 2);
    assert_int_equal(s.floor, 90);
    assert_int_equal(s.next, 90);
    fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 0);
    fx_gjournal_clamp(&s, 0, &st); /* only an empty log takes it to 0 */
    assert_int_equal(s.floor, 0);
    assert_int_equal(s.next, 0);
    fx_gjournal_state_deinit(&s);
}

/* ---- the journal ---------------------------------------------------------------- */

/* Opens a new group and appends WORK in three batches, the first two flushed. */
static fx_gjournal *open_with_work(fx_memio *m, fx_gjournal_state *model)
{
    fx_gjournal *j;
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_state_init(model);
    char why[256];
    assert_int_equal(gopen(m, &j, true, &s, NULL, why), 0);
    assert_int_equal(s.floor, 0);
    put(j, model, WORK, 4);
    assert_int_equal(fx_gjournal_sync(j), 0);
    put(j, model, WORK + 4, 4);
    assert_int_equal(fx_gjournal_sync(j), 0);
    put(j, model, WORK + 8, NWORK - 8);
    fx_gjournal_state_deinit(&s);
    return j;
}

static void test_journal_round_trip_through_a_reopen(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = open_with_work(m, &model);
    assert_int_equal(fx_gjournal_seq(j), NWORK);
    uint64_t writes = fx_memio_op_calls(m, FX_MEMIO_PWRITE);
    put(j, &model, WORK + 9, 3); /* one batch, one write */
    assert_int_equal(fx_memio_op_calls(m, FX_MEMIO_PWRITE), writes + 1);
    assert_int_equal(fx_gjournal_close(j, true), 0);
    fx_memio_crash(m, 0); /* a clean close flushed it all */
    fx_gjournal_state_init(&s);
    fx_gjournal_stats st = {0};
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    assert_int_equal(st.replayed, NWORK + 3);
    assert_int_equal(st.torn_tail_cut, 0);
    assert_int_equal(fx_gjournal_seq(j), NWORK + 3);
    fx_gjournal_rec r = rec_range(FX_GJ_ACK, 103, 1, 0);
    put(j, &model, &r, 1); /* numbering goes on after a reopen */
    assert_int_equal(fx_gjournal_close(j, true), 0);
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    assert_int_equal(fx_gjournal_seq(j), NWORK + 4);
    fx_gjournal_close(j, false);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

static void test_open_without_create_of_a_missing_group_is_enoent(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal *j = NULL;
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), -ENOENT);
    assert_null(j);
    fx_memio_free(m);
}

/* The state after the first |k| records of WORK. */
static void state_after(size_t k, fx_gjournal_state *s)
{
    fx_gjournal_state_init(s);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(fx_gjournal_state_apply(s, &WORK[i]), 0);
}

static void test_torn_tail_is_cut_at_every_byte_of_the_last_record_and_counted(void **state)
{
    paths();
    for (int mode = 0; mode < 2; mode++) { /* 0: cut at each byte, 1: damage each byte */
        uint64_t last_start = 0, end = 0;
        for (uint64_t k = 0;; k++) {
            fx_memio *m;
            assert_int_equal(fx_memio_new(&m), 0);
            fx_gjournal_state model, s, want;
            fx_gjournal *j = open_with_work(m, &model);
            end = fx_gjournal_size(j);
            fx_gjournal_rec r = rec_range(FX_GJ_ACK, 106, 1, 0);
            put(j, &model, &r, 1); /* the last record, never flushed */
            fx_gjournal_close(j, false);
            last_start = end;
            end += FX_GJOURNAL_REC_OVERHEAD + 12;
            if (last_start + k >= end) {
                fx_memio_free(m);
                fx_gjournal_state_deinit(&model);
                break;
            }
            if (mode == 0)
                assert_int_equal(fx_memio_cut(m, journal_path, last_start + k), 0);
            else
                assert_int_equal(fx_memio_corrupt(m, journal_path, last_start + k, 0x40), 0);
            fx_gjournal_stats st = {0};
            char why[256];
            fx_gjournal_state_init(&s);
            assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
            state_after(NWORK, &want);
            assert_true(fx_gjournal_state_equal(&s, &want));
            assert_int_equal(st.torn_tail_cut, mode == 0 && k == 0 ? 0 : 1);
            assert_int_equal(st.torn_bytes, mode == 0 ? k : end - last_start);
            assert_int_equal(fx_gjournal_size(j), last_start);
            assert_int_equal(fx_gjournal_seq(j), NWORK);
            fx_gjournal_close(j, false);
            /* The open flushed what it recovered, the cut included: after a
             * power cut a second open cuts nothing and finds the same. */
            fx_memio_crash(m, 0);
            fx_gjournal_stats st2 = {0};
            assert_int_equal(gopen(m, &j, false, &s, &st2, why), 0);
            assert_int_equal(st2.torn_tail_cut, 0);
            assert_true(fx_gjournal_state_equal(&s, &want));
            fx_gjournal_close(j, false);
            fx_gjournal_state_deinit(&s);
            fx_gjournal_state_deinit(&want);
            fx_gjournal_state_deinit(&model);
            fx_memio_free(m);
        }
    }
}

static void test_interior_corruption_is_refused_with_file_and_position(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = open_with_work(m, &model);
    assert_int_equal(fx_gjournal_close(j, true), 0);
    /* The third record (after the 32-byte header: SEEK 28 bytes, DELIVER
     * 36) is damaged; valid flushed records follow it. */
    uint64_t pos = 32 + 28 + 36;
    assert_int_equal(fx_memio_corrupt(m, journal_path, pos + 20, 0x01), 0);
    fx_gjournal_state_init(&s);
    char why[256], want[128];
    fx_gjournal_stats st = {0};
    j = NULL;
    assert_int_equal(gopen(m, &j, false, &s, &st, why), FX_ESTORAGE_CORRUPT);
    assert_null(j);
    char stem[FX_GJOURNAL_STEM_MAX];
    fx_gjournal_stem(stem, GROUP);
    snprintf(want, sizeof(want), "file=%s.jrnl, position=%" PRIu64 ":", stem, pos);
    assert_non_null(strstr(why, want));
    assert_int_equal(s.next, 0); /* nothing was handed back */
    assert_int_equal(st.torn_tail_cut, 0);
    /* The journal's header is damage too, never a reset. */
    assert_int_equal(fx_memio_corrupt(m, journal_path, pos + 20, 0x01), 0);
    assert_int_equal(fx_memio_corrupt(m, journal_path, 3, 0x01), 0);
    assert_int_equal(gopen(m, &j, false, &s, &st, why), FX_ESTORAGE_CORRUPT);
    snprintf(want, sizeof(want), "file=%s.jrnl, position=0:", stem);
    assert_non_null(strstr(why, want));
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

/* Runs WORK with a compaction after records 4 and 8; returns the journal. */
static fx_gjournal *work_with_compactions(fx_memio *m, fx_gjournal_state *model)
{
    fx_gjournal *j;
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_state_init(model);
    char why[256];
    assert_int_equal(gopen(m, &j, true, &s, NULL, why), 0);
    put(j, model, WORK, 4);
    assert_int_equal(fx_gjournal_compact(j, model), 0);
    put(j, model, WORK + 4, 4);
    assert_int_equal(fx_gjournal_compact(j, model), 0);
    put(j, model, WORK + 8, NWORK - 8);
    assert_int_equal(fx_gjournal_sync(j), 0);
    fx_gjournal_state_deinit(&s);
    return j;
}

static void test_newer_snapshot_corrupt_the_older_one_and_the_longer_journal_agree(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = work_with_compactions(m, &model);
    assert_int_equal(fx_gjournal_stats_of(j)->compactions, 2);
    fx_gjournal_close(j, false);
    /* The newer snapshot is .b (the second compaction), covering seq 8;
     * the older .a covers seq 4, and the journal holds seq 5.. . */
    fx_gjournal_state_init(&s);
    fx_gjournal_stats st = {0};
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    assert_int_equal(st.replayed, NWORK - 8);
    assert_int_equal(st.snapshot_fallback, 0);
    fx_gjournal_close(j, false);
    assert_int_equal(fx_memio_corrupt(m, snap_path[1], 10, 0x80), 0);
    memset(&st, 0, sizeof(st));
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    assert_int_equal(st.snapshot_corrupt, 1);
    assert_int_equal(st.snapshot_fallback, 1);
    assert_int_equal(st.replayed, NWORK - 4);
    /* The next compaction replaces the bad one, never the good one. */
    assert_int_equal(fx_gjournal_compact(j, &model), 0);
    fx_gjournal_close(j, false);
    memset(&st, 0, sizeof(st));
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_int_equal(st.snapshot_corrupt, 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    fx_gjournal_close(j, false);
    /* Both bad: refused, naming a snapshot file. */
    assert_int_equal(fx_memio_corrupt(m, snap_path[0], 10, 0x80), 0);
    assert_int_equal(fx_memio_corrupt(m, snap_path[1], 10, 0x80), 0);
    assert_int_equal(gopen(m, &j, false, &s, &st, why), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(why, ".snap."));
    assert_non_null(strstr(why, "position=0"));
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

static void test_a_snapshot_older_than_the_journal_start_is_refused(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = work_with_compactions(m, &model);
    assert_int_equal(fx_gjournal_compact(j, &model), 0); /* .a: seq 12; journal after 8 */
    fx_gjournal_close(j, false);
    /* .a is newer now; with it bad, .b (seq 8) and the journal (after 8)
     * still agree... */
    assert_int_equal(fx_memio_corrupt(m, snap_path[0], 10, 0x80), 0);
    fx_gjournal_state_init(&s);
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    fx_gjournal_close(j, false);
    /* ...but with .b gone too the journal cannot rebuild from nothing. */
    assert_int_equal(fx_memio_sio(m)->ops->unlink(fx_memio_sio(m), snap_path[1]), 0);
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), FX_ESTORAGE_CORRUPT);
    assert_non_null(strstr(why, "journal starts after seq 8"));
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

static void test_compaction_keeps_the_state_and_bounds_the_journal(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal *j;
    fx_gjournal_state model, s;
    fx_gjournal_state_init(&model);
    fx_gjournal_state_init(&s);
    char why[256];
    assert_int_equal(gopen(m, &j, true, &s, NULL, why), 0);
    fx_gjournal_set_limits(j, 2000, 50);
    uint64_t max_size = 0, compactions = 0, next = 0;
    for (int i = 0; i < 3000; i++) {
        fx_gjournal_rec r[2] = {rec_range(FX_GJ_DELIVER, next, 2, 1),
                                rec_range(FX_GJ_ACK, next, 1, 0)};
        put(j, &model, r, 2);
        next += 2;
        if (fx_gjournal_should_compact(j)) {
            assert_int_equal(fx_gjournal_compact(j, &model), 0);
            compactions++;
        }
        max_size = fx_gjournal_size(j) > max_size ? fx_gjournal_size(j) : max_size;
    }
    /* A compaction once more than 50 records follow the snapshot: every 26
     * batches (52 records, 26 * 68 bytes). */
    assert_int_equal(compactions, 3000 / 26);
    /* The journal holds the records since the older snapshot: two
     * intervals at most. */
    assert_true(max_size <= 32 + 2 * 26 * 68);
    assert_true(max_size > 32 + 26 * 68);
    assert_int_equal(fx_gjournal_seq(j), 6000);
    assert_int_equal(fx_gjournal_close(j, true), 0);
    fx_memio_crash(m, 0);
    fx_gjournal_stats st = {0};
    assert_int_equal(gopen(m, &j, false, &s, &st, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    assert_true(st.replayed <= 50);
    size_t n;
    fx_gjournal_state_pending(&s, &n);
    assert_int_equal(n, 3000); /* every odd offset, from the snapshots */
    fx_gjournal_close(j, false);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

static void test_remove_deletes_every_file_of_the_group(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = work_with_compactions(m, &model);
    fx_gjournal_close(j, true);
    fx_sio *io = fx_memio_sio(m);
    bool is_dir;
    assert_int_equal(io->ops->stat(io, snap_path[0], &is_dir), 0);
    assert_int_equal(fx_gjournal_remove(io, DIR_, GROUP), 0);
    assert_int_equal(io->ops->stat(io, snap_path[0], &is_dir), -ENOENT);
    assert_int_equal(io->ops->stat(io, snap_path[1], &is_dir), -ENOENT);
    assert_int_equal(io->ops->stat(io, journal_path, &is_dir), -ENOENT);
    fx_memio_crash(m, 0); /* the removal was synced */
    fx_gjournal_state_init(&s);
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), -ENOENT);
    assert_int_equal(fx_gjournal_remove(io, DIR_, GROUP), 0); /* again: nothing to do */
    assert_int_equal(fx_gjournal_remove(io, "/nowhere", GROUP), 0);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

static void test_a_failed_append_appends_nothing(void **state)
{
    paths();
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_gjournal_state model, s;
    fx_gjournal *j = open_with_work(m, &model);
    uint64_t size = fx_gjournal_size(j), seq = fx_gjournal_seq(j);
    fx_memio_fail(m, FX_MEMIO_PWRITE, -ENOSPC, 1);
    fx_gjournal_rec r = rec_range(FX_GJ_ACK, 102, 1, 0);
    assert_int_equal(fx_gjournal_append(j, &r, 1), -ENOSPC);
    assert_int_equal(fx_gjournal_size(j), size);
    assert_int_equal(fx_gjournal_seq(j), seq);
    fx_gjournal_rec bad = rec_range(FX_GJ_ACK, 102, 0, 0);
    assert_int_equal(fx_gjournal_append(j, &bad, 1), -EINVAL);
    put(j, &model, &r, 1); /* the journal goes on */
    assert_int_equal(fx_gjournal_close(j, true), 0);
    fx_gjournal_state_init(&s);
    char why[256];
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), 0);
    assert_true(fx_gjournal_state_equal(&s, &model));
    fx_gjournal_close(j, false);
    /* A failed flush stops the journal: its pages' fate is unknown. */
    assert_int_equal(gopen(m, &j, false, &s, NULL, why), 0);
    put(j, &model, &r, 1);
    fx_memio_fail(m, FX_MEMIO_FDATASYNC, -EIO, 1);
    assert_int_equal(fx_gjournal_sync(j), -EIO);
    assert_int_equal(fx_gjournal_append(j, &r, 1), FX_ESTORAGE_FAILED);
    assert_int_equal(fx_gjournal_sync(j), FX_ESTORAGE_FAILED);
    fx_gjournal_close(j, false);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_state_deinit(&model);
    fx_memio_free(m);
}

/* ---- crash runs ------------------------------------------------------------------ */

#define MAX_SEQ 4096

/* A run: the workload's state after every record (by sequence number), the
 * acks, and what was appended and flushed when the I/O layer died. */
typedef struct crun {
    fx_memio *m;
    fx_gjournal *j;
    fx_gjournal_state model;
    fx_gjournal_state *hist; /* hist[k]: the state after record k */
    uint64_t rng, now;
    uint64_t written, synced;
    bool compacting; /* the I/O died inside a compaction */
    bool batch_acked; /* the batch being made has an ACK (not in |acks| yet) */
    struct {
        uint64_t seq, first, end; /* acked [first, end) at record seq */
    } acks[MAX_SEQ];
    size_t nacks;
} crun;

/* A random pending offset of the model, or false. */
static bool pick_pending(crun *c, fx_gjournal_pending *out)
{
    size_t n;
    const fx_gjournal_pending *p = fx_gjournal_state_pending(&c->model, &n);
    if (n == 0)
        return false;
    *out = p[mix(&c->rng) % n];
    return true;
}

/* Whether an ack recorded so far covered |off|. */
static bool acked_ever(const crun *c, uint64_t off)
{
    for (size_t a = 0; a < c->nacks; a++)
        if (off >= c->acks[a].first && off < c->acks[a].end)
            return true;
    return false;
}

/* One record the group engine could write in the model's state. */
static fx_gjournal_rec gen_rec(crun *c)
{
    fx_gjournal_state *s = &c->model;
    fx_gjournal_pending p;
    unsigned k = (unsigned)(mix(&c->rng) % 100);
    uint32_t n = 1 + (uint32_t)(mix(&c->rng) % 4);
    if (k < 30 || !pick_pending(c, &p))
        return rec_range(FX_GJ_DELIVER, s->next, n, 1);
    if (k < 40)
        return rec_range(FX_GJ_DELIVER, p.offset, 1, p.attempts + 1);
    if (k < 65) {
        c->batch_acked = true;
        return rec_range(FX_GJ_ACK, p.offset, n, 0);
    }
    if (k < 72)
        return rec_nak(p.offset, p.attempts, k % 2 ? 0 : c->now + 1000 * n);
    if (k < 77)
        return rec_one(FX_GJ_RELEASE, p.offset, p.attempts - (p.attempts > 0), 0);
    if (k < 84)
        return rec_one(FX_GJ_DEAD_INTENT, p.offset, p.attempts, (uint8_t)(1 + k % 2));
    size_t nin;
    const fx_gjournal_intent *in = fx_gjournal_state_intents(s, &nin);
    if (k < 90 && nin > 0)
        return (fx_gjournal_rec){.type = FX_GJ_DEAD,
                                 .offset = in[0].offset,
                                 .dlq_offset = c->now,
                                 .reason = in[0].reason};
    size_t ndl;
    const fx_gjournal_dead *dl = fx_gjournal_state_dead(s, &ndl, NULL);
    if (k < 94 && ndl > 0) {
        /* A redrive of a dead letter never acked (check_acks holds acked
         * offsets settled for good), or a discard. */
        const fx_gjournal_dead *e = &dl[mix(&c->rng) % ndl];
        if (k < 92 && !e->redriven && !c->batch_acked && !acked_ever(c, e->offset))
            return (fx_gjournal_rec){.type = FX_GJ_REDRIVE, .offset = e->offset};
        if (k >= 92)
            return (fx_gjournal_rec){.type = FX_GJ_DISCARD, .offset = e->offset};
    }
    if (k < 97)
        return rec_range(FX_GJ_SKIP, s->floor, n, 0);
    /* Seeks go forward only, so an acked offset is never pending again. */
    return (fx_gjournal_rec){.type = FX_GJ_SEEK, .offset = s->next + n};
}

/* Appends a batch of 1..4 records; returns the journal's result. */
static int step_append(crun *c)
{
    fx_gjournal_rec r[4];
    size_t n = 1 + (size_t)(mix(&c->rng) % 4);
    fx_gjournal_state trial;
    fx_gjournal_state_init(&trial);
    assert_int_equal(fx_gjournal_state_copy(&trial, &c->model), 0);
    c->batch_acked = false;
    for (size_t i = 0; i < n; i++) { /* each record made on the state before it */
        r[i] = gen_rec(c);
        assert_int_equal(fx_gjournal_state_apply(&c->model, &r[i]), 0);
    }
    fx_gjournal_state_deinit(&c->model);
    c->model = trial;
    if (c->written + n >= MAX_SEQ)
        return 1;
    int rv = fx_gjournal_append(c->j, r, n);
    if (rv != 0)
        return rv;
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = ++c->written;
        if (r[i].type == FX_GJ_ACK && r[i].offset < c->model.next) {
            uint64_t end = r[i].offset + r[i].count;
            c->acks[c->nacks].seq = seq;
            c->acks[c->nacks].first = r[i].offset;
            c->acks[c->nacks++].end = end < c->model.next ? end : c->model.next;
        }
        assert_int_equal(fx_gjournal_state_apply(&c->model, &r[i]), 0);
        assert_int_equal(fx_gjournal_state_copy(&c->hist[seq], &c->model), 0);
    }
    return 0;
}

/* Appends, flushes and compactions until the I/O layer dies (or the
 * workload ends). */
static void drive(crun *c)
{
    for (int step = 0; step < 400; step++) {
        c->now += 1 + mix(&c->rng) % 3000;
        if (step_append(c) != 0)
            return;
        if (mix(&c->rng) % 3 == 0) {
            if (fx_gjournal_sync(c->j) != 0)
                return;
            c->synced = c->written;
        }
        if (fx_gjournal_should_compact(c->j) || mix(&c->rng) % 50 == 0) {
            if (fx_gjournal_compact(c->j, &c->model) != 0) {
                c->compacting = true;
                return;
            }
            c->synced = c->written; /* the snapshot and the new journal are flushed */
        }
    }
}

/* Kinds of crash: a kill, or a power cut with memio's tear models. */
enum { KILL = -1, CUT_NONE = 3 };

static void crash(crun *c, int kind, uint64_t seed)
{
    if (kind == KILL)
        fx_memio_kill(c->m);
    else if (kind == CUT_NONE)
        fx_memio_crash(c->m, 0);
    else
        fx_memio_crash_torn(c->m, (fx_memio_tear)kind, seed);
}

/* Every ack at or below |upto| is in |s|: its offsets settled. */
static void check_acks(const crun *c, const fx_gjournal_state *s, uint64_t upto)
{
    size_t n;
    const fx_gjournal_pending *p = fx_gjournal_state_pending(s, &n);
    for (size_t a = 0; a < c->nacks && c->acks[a].seq <= upto; a++) {
        assert_true(c->acks[a].end <= s->next);
        for (size_t i = 0; i < n; i++)
            assert_false(p[i].offset >= c->acks[a].first && p[i].offset < c->acks[a].end);
    }
}

/* After recovery: one more record, flushed, then a power cut keeping only
 * that: nothing is cut (recovery left no torn bytes behind) and the state
 * has the record. */
static void check_goes_on(crun *c, fx_gjournal_state *s)
{
    fx_gjournal_state_deinit(&c->model);
    c->model = *s;
    fx_gjournal_state_init(s);
    fx_gjournal_rec r = rec_range(FX_GJ_DELIVER, c->model.next, 2, 1);
    put(c->j, &c->model, &r, 1);
    assert_int_equal(fx_gjournal_sync(c->j), 0);
    fx_gjournal_close(c->j, false);
    fx_memio_crash(c->m, 0);
    fx_gjournal_stats st = {0};
    char why[256];
    assert_int_equal(gopen(c->m, &c->j, false, s, &st, why), 0);
    assert_int_equal(st.torn_tail_cut, 0);
    assert_true(fx_gjournal_state_equal(s, &c->model));
    fx_gjournal_close(c->j, false);
}

typedef struct tally {
    uint64_t runs, lost_records, synced_acks, torn_cuts, fallbacks;
    uint64_t died;          /* runs whose I/O died before the workload ended */
    uint64_t in_compaction; /* of which inside a compaction */
} tally;

/* A new group on a fresh memio, started at offset 1000 and flushed. */
static crun *crun_new(uint64_t seed)
{
    crun *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->hist = calloc(MAX_SEQ, sizeof(*c->hist));
    assert_non_null(c->hist);
    c->rng = seed;
    assert_int_equal(fx_memio_new(&c->m), 0);
    fx_memio_set_tear_unit(c->m, 64, 32); /* files of a few KiB: small blocks */
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_state_init(&c->model);
    char why[256];
    assert_int_equal(gopen(c->m, &c->j, true, &s, NULL, why), 0);
    fx_gjournal_state_deinit(&s);
    fx_gjournal_set_limits(c->j, 1500, 40);
    fx_gjournal_rec start = {.type = FX_GJ_SEEK, .offset = 1000};
    put(c->j, &c->model, &start, 1);
    assert_int_equal(fx_gjournal_state_copy(&c->hist[1], &c->model), 0);
    c->written = 1;
    assert_int_equal(fx_gjournal_sync(c->j), 0);
    c->synced = 1;
    return c;
}

static void crun_free(crun *c)
{
    for (size_t i = 0; i < MAX_SEQ; i++)
        fx_gjournal_state_deinit(&c->hist[i]);
    free(c->hist);
    fx_gjournal_state_deinit(&c->model);
    fx_memio_free(c->m);
    free(c);
}

/* Checks the reopened state |s| at record |seq| after crash |kind|. */
static void check_recovered(const crun *c, int kind, uint64_t seed, const fx_gjournal_state *s,
                            uint64_t seq)
{
    if (seq < c->synced || seq > c->written || (kind == KILL && seq != c->written))
        fprintf(stderr,
                "seed %" PRIu64 " kind %d: written %" PRIu64 " synced %" PRIu64
                " recovered %" PRIu64 "\n",
                seed, kind, c->written, c->synced, seq);
    assert_true(seq >= c->synced && seq <= c->written);
    if (kind == KILL)
        assert_int_equal(seq, c->written); /* a kill loses nothing written */
    /* Prefix-consistent: exactly the state after record |seq|. */
    assert_true(fx_gjournal_state_equal(s, &c->hist[seq]));
    check_acks(c, s, c->synced);
}

static void crash_run(int kind, uint64_t seed, tally *t)
{
    crun *c = crun_new(seed);
    fx_memio_crash_after(c->m, 1 + mix(&c->rng) % 900);
    drive(c);
    t->died += fx_memio_is_down(c->m);
    t->in_compaction += c->compacting;
    fx_gjournal_close(c->j, false);
    crash(c, kind, seed);
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_stats st = {0};
    char why[256];
    if (mix(&c->rng) % 2 == 0) { /* half the runs: the recovery itself dies part-way */
        fx_memio_crash_after(c->m, mix(&c->rng) % 16);
        if (gopen(c->m, &c->j, false, &s, NULL, why) == 0)
            fx_gjournal_close(c->j, false);
        crash(c, kind, seed + 1);
    }
    int rv = gopen(c->m, &c->j, false, &s, &st, why);
    if (rv != 0)
        fprintf(stderr, "seed %" PRIu64 " kind %d: reopen failed: %d %s\n", seed, kind, rv, why);
    assert_int_equal(rv, 0);
    uint64_t seq = fx_gjournal_seq(c->j);
    check_recovered(c, kind, seed, &s, seq);
    t->runs++;
    t->lost_records += c->written - seq;
    for (size_t a = 0; a < c->nacks && c->acks[a].seq <= c->synced; a++)
        t->synced_acks++;
    t->torn_cuts += st.torn_tail_cut;
    t->fallbacks += st.snapshot_fallback;
    check_goes_on(c, &s);
    fx_gjournal_state_deinit(&s);
    crun_free(c);
}

static int runs(void)
{
    const char *s = getenv("FX_GJOURNAL_CRASH_RUNS");
    int n = s != NULL ? atoi(s) : 0;
    return n > 0 ? n : 300;
}

static void test_kill_at_any_crash_point_loses_nothing_written(void **state)
{
    paths();
    tally t = {0};
    for (int i = 0; i < runs(); i++)
        crash_run(KILL, 100 + (uint64_t)i, &t);
    printf("kill -9: %" PRIu64 " runs (%" PRIu64 " died mid-run, %" PRIu64
           " in a compaction), %" PRIu64 " flushed acks kept, %" PRIu64 " records lost\n",
           t.runs, t.died, t.in_compaction, t.synced_acks, t.lost_records);
    assert_true(t.died > t.runs / 2 && t.in_compaction > 0);
    assert_int_equal(t.runs, (uint64_t)runs());
    assert_int_equal(t.lost_records, 0);
    assert_true(t.synced_acks > 0);
}

static void test_power_cut_at_any_crash_point_keeps_every_flushed_ack(void **state)
{
    paths();
    static const char *const names[] = {"prefix", "zero blocks", "reorder", "none"};
    tally t[4] = {{0}};
    for (int i = 0; i < runs(); i++) {
        int kind = i % 4; /* the tear models in turn; CUT_NONE keeps nothing unsynced */
        crash_run(kind, 7000 + (uint64_t)i, &t[kind]);
    }
    uint64_t lost = 0;
    for (int k = 0; k < 4; k++) {
        printf("power cut, tear %s: %" PRIu64 " runs (%" PRIu64 " died mid-run, %" PRIu64
               " in a compaction), %" PRIu64 " flushed acks kept, %" PRIu64
               " unflushed records lost, %" PRIu64 " torn tails cut, %" PRIu64
               " snapshot fallbacks\n",
               names[k], t[k].runs, t[k].died, t[k].in_compaction, t[k].synced_acks,
               t[k].lost_records, t[k].torn_cuts, t[k].fallbacks);
        assert_true(t[k].runs > 0 && t[k].in_compaction > 0);
        lost += t[k].lost_records;
    }
    assert_true(lost > 0); /* the runs do exercise loss */
    assert_true(t[0].torn_cuts + t[1].torn_cuts + t[2].torn_cuts > 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_record_round_trip_of_each_type),
    cmocka_unit_test(test_record_decode_refuses_malformed_fields_even_with_a_good_crc),
    cmocka_unit_test(test_snapshot_round_trip),
    cmocka_unit_test(test_stem_is_the_sanitised_name_and_the_fnv_of_the_raw_name),
    cmocka_unit_test(test_replay_follows_the_group_engine_rules),
    cmocka_unit_test(test_dead_list_follows_dead_redrive_ack_discard_and_seek),
    cmocka_unit_test(test_dead_list_forgets_its_oldest_past_the_bound_and_snapshots_it),
    cmocka_unit_test(test_a_version_1_snapshot_reads_as_a_state_with_no_dead_list),
    cmocka_unit_test(test_clamp_after_a_lost_log_tail_never_goes_to_zero),
    cmocka_unit_test(test_journal_round_trip_through_a_reopen),
    cmocka_unit_test(test_open_without_create_of_a_missing_group_is_enoent),
    cmocka_unit_test(test_torn_tail_is_cut_at_every_byte_of_the_last_record_and_counted),
    cmocka_unit_test(test_interior_corruption_is_refused_with_file_and_position),
    cmocka_unit_test(test_newer_snapshot_corrupt_the_older_one_and_the_longer_journal_agree),
    cmocka_unit_test(test_a_snapshot_older_than_the_journal_start_is_refused),
    cmocka_unit_test(test_compaction_keeps_the_state_and_bounds_the_journal),
    cmocka_unit_test(test_remove_deletes_every_file_of_the_group),
    cmocka_unit_test(test_a_failed_append_appends_nothing),
    cmocka_unit_test(test_kill_at_any_crash_point_loses_nothing_written),
    cmocka_unit_test(test_power_cut_at_any_crash_point_keeps_every_flushed_ack),
};
FX_TEST_MAIN(tests)
