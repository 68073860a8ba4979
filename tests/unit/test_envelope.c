/* Unit tests for fx_envelope and the feeder's coalescer: one encode per
 * envelope whatever the fanout, exact shared-frame bytes, and coalescing by
 * offsets, events and bytes, with per-subscriber frames for partial batches. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include "base/metrics.h"
#include "broker/envelope.h"
#include "broker/stream.h"
#include "felix/error.h"
#include "wire/binary.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fx_test.h"

static fx_wire_slice S(const char *s)
{
    return (fx_wire_slice){.ptr = (const uint8_t *)s, .len = strlen(s)};
}

static uint64_t shared_encodes(void)
{
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    return m.c.sub_shared_frame_encodes;
}

static uint64_t sub_encodes(void)
{
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    return m.c.sub_frame_encodes;
}

static fx_envelope *env1(uint64_t base, const char *msg)
{
    fx_wire_slice p = S(msg);
    fx_envelope *e;
    assert_int_equal(fx_envelope_new(&e, 1, base, NULL, &p, 1), 0);
    return e;
}

static fx_envelope *envn(uint64_t base, const char *const *msgs, uint32_t n)
{
    fx_wire_slice p[8];
    for (uint32_t i = 0; i < n; i++)
        p[i] = S(msgs[i]);
    fx_envelope *e;
    assert_int_equal(fx_envelope_new(&e, 1, base, NULL, p, n), 0);
    return e;
}

/* A pull source over an array of items (the test's references). */
typedef struct src {
    fx_env_item items[16];
    size_t n, next;
} src;

static bool src_pull(void *user, fx_env_item *out)
{
    src *s = user;
    if (s->next == s->n)
        return false;
    *out = s->items[s->next++];
    return true;
}

/* Decodes frame |f| and checks its kind, base offset and payload count. */
static void expect_frame(fx_buf *f, uint16_t flags, uint64_t base, uint32_t count, uint64_t sub_id)
{
    const uint8_t *p = fx_buf_data(f);
    assert_true(fx_buf_len(f) >= FX_WIRE_HEADER_LEN);
    assert_int_equal(fx_be32(p), FX_WIRE_MAGIC);
    assert_int_equal(fx_be16(p + 6), flags);
    assert_int_equal(fx_be32(p + 8), fx_buf_len(f) - FX_WIRE_HEADER_LEN);
    fx_wire_event_batch e;
    assert_int_equal(fx_wire_event_batch_decode(flags, p + FX_WIRE_HEADER_LEN,
                                                fx_buf_len(f) - FX_WIRE_HEADER_LEN, &e, NULL),
                     0);
    assert_true(e.has_offsets);
    assert_int_equal(e.base_offset, base);
    assert_int_equal(e.count, count);
    if (!e.shared)
        assert_int_equal(e.subscription_id, sub_id);
    fx_wire_event_batch_deinit(&e);
}

/* ---- shared frame ------------------------------------------------------------ */

/* The shared frame's size is worked out from the envelope's payload total:
 * it must be what the wire encoder writes, for every count and length mix
 * (empty payloads included). */
static void test_shared_frame_size_is_the_encoded_size(void **state)
{
    const char *msgs[] = {"", "a", "bc", "", "0123456789abcdef0123456789", "x", "", "yz"};
    for (uint32_t n = 1; n <= 8; n++) {
        fx_envelope *e = envn(100 + n, msgs, n);
        fx_wire_slice p[8];
        for (uint32_t i = 0; i < n; i++)
            p[i] = S(msgs[i]);
        fx_wire_event_batch b = {
            .shared = true, .has_offsets = true, .base_offset = 100 + n, .count = n, .payloads = p};
        fx_buf *f;
        assert_int_equal(fx_envelope_shared_frame(e, &f), 0);
        assert_int_equal(fx_envelope_shared_frame_size(e), fx_buf_len(f));
        assert_int_equal((ssize_t)fx_buf_len(f), fx_wire_event_batch_frame_size(&b));
        expect_frame(f, 0x0024, 100 + n, n, 0);
        fx_buf_unref(f);
        fx_envelope_unref(e);
    }
}

static void test_shared_frame_bytes_match_wire_example(void **state)
{
    /* felix-facts.md §3: shared+offsets, base 5, ["a","bc"]. */
    static const uint8_t want[] = {0x46, 0x4c, 0x58, 0x31, 0x00, 0x01, 0x00, 0x24, 0x00,
                                   0x00, 0x00, 0x17, 0,    0,    0,    0,    0,    0,
                                   0,    5,    0,    0,    0,    2,    0,    0,    0,
                                   1,    0x61, 0,    0,    0,    2,    0x62, 0x63};
    const char *msgs[] = {"a", "bc"};
    fx_envelope *e = envn(5, msgs, 2);
    assert_int_equal(fx_envelope_shared_frame_size(e), sizeof(want));
    fx_buf *f;
    assert_int_equal(fx_envelope_shared_frame(e, &f), 0);
    assert_int_equal(fx_buf_len(f), sizeof(want));
    assert_memory_equal(fx_buf_data(f), want, sizeof(want));
    fx_buf_unref(f);
    fx_envelope_unref(e);
}

static void test_two_subscribers_share_one_encoded_frame(void **state)
{
    fx_stream_opts o = {.handle_id = 3,
                        .log_capacity = 16,
                        .log_capacity_bytes = 1024,
                        .sub_queue_capacity = 4,
                        .sub_queue_policy = FX_QUEUE_DROP_NEW};
    fx_stream *s;
    assert_int_equal(fx_stream_new(&s, &o), 0);
    fx_subscriber *subs[3];
    fx_start st = {.kind = FX_START_LATEST};
    for (int i = 0; i < 3; i++) {
        fx_subscribe_opts so = {.subscription_id = (uint64_t)i + 1};
        fx_backlog bl;
        assert_int_equal(fx_stream_subscribe(s, &st, &so, &subs[i], &bl, NULL), 0);
        fx_backlog_free(&bl);
    }
    uint64_t enc0 = shared_encodes();
    fx_wire_slice p[] = {S("a"), S("bc")};
    fx_fanout_result res;
    assert_int_equal(fx_stream_publish(s, NULL, p, 2, 1, &res), 0);
    assert_int_equal(res.delivered, 3);
    assert_int_equal(shared_encodes() - enc0, 0); /* lazily: nobody needed it yet */

    fx_buf *frames[3];
    fx_envelope *envs[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fx_subscriber_pop(subs[i], 1, &envs[i]), 0);
        assert_int_equal(fx_envelope_shared_frame(envs[i], &frames[i]), 0);
    }
    assert_ptr_equal(envs[0], envs[1]);
    assert_ptr_equal(envs[1], envs[2]);
    assert_ptr_equal(frames[0], frames[1]); /* the same bytes, not a copy */
    assert_ptr_equal(frames[1], frames[2]);
    assert_int_equal(shared_encodes() - enc0, 1);
    assert_int_equal(fx_buf_refcount(frames[0]), 4); /* cache + 3 subscribers */
    expect_frame(frames[0], 0x0024, 0, 2, 0);
    for (int i = 0; i < 3; i++) {
        fx_buf_unref(frames[i]);
        fx_envelope_unref(envs[i]);
    }
    fx_stream_free(s);
}

static void test_sub_frame_for_a_range(void **state)
{
    const char *msgs[] = {"a", "bb", "ccc", "dddd"};
    fx_envelope *e = envn(10, msgs, 4);
    fx_buf *f;
    assert_int_equal(fx_envelope_sub_frame(e, 42, 1, 2, &f), 0);
    expect_frame(f, 0x0022, 11, 2, 42);
    assert_int_equal(fx_buf_len(f), fx_envelope_sub_frame_size(e, 1, 2));
    fx_buf_unref(f);
    assert_int_equal(fx_envelope_sub_frame(e, 42, 3, 2, &f), -EINVAL);
    assert_int_equal(fx_envelope_sub_frame(e, 42, 4, 1, &f), -EINVAL);
    assert_int_equal(fx_envelope_sub_frame(e, 42, 0, 0, &f), -EINVAL);
    assert_false(fx_envelope_has_shared_frame(e));
    fx_envelope_unref(e);
    assert_int_equal(fx_envelope_new(&e, 1, 0, NULL, NULL, 0), -EINVAL);
}

typedef struct race {
    fx_envelope *e;
    fx_buf *got;
} race;

static void *race_frame(void *p)
{
    race *r = p;
    return fx_envelope_shared_frame(r->e, &r->got) == 0 ? p : NULL;
}

static void test_concurrent_first_encodes_agree_on_one_frame(void **state)
{
    const char *msgs[] = {"a", "b", "c"};
    fx_envelope *e = envn(0, msgs, 3);
    race r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (race){.e = e};
        assert_int_equal(pthread_create(&th[i], NULL, race_frame, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_ptr_equal(ret, &r[i]);
    }
    for (int i = 1; i < 4; i++)
        assert_ptr_equal(r[i].got, r[0].got); /* racing encoders keep one result */
    assert_int_equal(fx_buf_refcount(r[0].got), 5);
    for (int i = 0; i < 4; i++)
        fx_buf_unref(r[i].got);
    fx_envelope_unref(e);
}

/* ---- coalescing ------------------------------------------------------------- */

static const fx_coalesce_opts big = {.subscription_id = 7, .max_events = 64, .max_bytes = 65536};

static void test_coalesce_chains_cached_frames_without_reencoding(void **state)
{
    fx_envelope *e[3] = {env1(0, "x"), env1(1, "y"), env1(2, "z")};
    uint64_t enc0 = shared_encodes(), sub0 = sub_encodes();
    fx_frame_list l1 = {0}, l2 = {0};
    for (int round = 0; round < 2; round++) { /* two subscribers, same envelopes */
        src s = {.n = 3};
        for (int i = 0; i < 3; i++)
            s.items[i] = (fx_env_item){.env = fx_envelope_ref(e[i])};
        fx_coalescer c;
        fx_coalescer_init(&c);
        fx_frame_list *l = round ? &l2 : &l1;
        assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &big, l), 0);
        assert_int_equal(l->n, 3);
        assert_int_equal(l->events, 3);
        assert_int_equal(l->first_offset, 0);
        assert_int_equal(l->end_offset, 3);
        assert_false(fx_coalescer_has_pending(&c));
        fx_coalescer_deinit(&c);
    }
    assert_int_equal(shared_encodes() - enc0, 3); /* one per envelope, not per subscriber */
    assert_int_equal(sub_encodes() - sub0, 0);
    size_t total = 0;
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(l1.frames[i], l2.frames[i]);
        assert_ptr_equal(l1.iov[i].iov_base, fx_buf_data(l1.frames[i]));
        assert_int_equal(l1.iov[i].iov_len, fx_buf_len(l1.frames[i]));
        expect_frame(l1.frames[i], 0x0024, (uint64_t)i, 1, 0);
        total += l1.iov[i].iov_len;
    }
    assert_int_equal(l1.bytes, total);
    fx_frame_list_clear(&l1);
    fx_frame_list_clear(&l2);
    assert_int_equal(l1.n, 0);
    for (int i = 0; i < 3; i++)
        fx_envelope_unref(e[i]);
}

static void test_coalesce_breaks_on_offset_gap(void **state)
{
    src s = {.n = 3};
    s.items[0] = (fx_env_item){.env = env1(0, "a")};
    s.items[1] = (fx_env_item){.env = env1(1, "b")};
    s.items[2] = (fx_env_item){.env = env1(5, "f")}; /* 2..4 were shed */
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &big, &l), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.first_offset, 0);
    assert_int_equal(l.end_offset, 2);
    assert_true(fx_coalescer_has_pending(&c));
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &big, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.first_offset, 5);
    assert_int_equal(l.end_offset, 6);
    assert_false(fx_coalescer_has_pending(&c));
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &big, &l), 0);
    assert_int_equal(l.n, 0);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_coalesce_respects_max_bytes(void **state)
{
    /* Each one-payload shared frame: 12 header + 8 offset + 4 count + 4 len + 4 = 32. */
    src s = {.n = 3};
    for (int i = 0; i < 3; i++)
        s.items[i] = (fx_env_item){.env = env1((uint64_t)i, "abcd")};
    assert_int_equal(fx_envelope_shared_frame_size(s.items[0].env), 32);
    fx_coalesce_opts o = {.subscription_id = 7, .max_events = 64, .max_bytes = 95};
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 2); /* 64 bytes; a third would make 96 > 95 */
    assert_int_equal(l.bytes, 64);
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.first_offset, 2);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_coalesce_respects_max_events(void **state)
{
    src s = {.n = 5};
    for (int i = 0; i < 5; i++)
        s.items[i] = (fx_env_item){.env = env1((uint64_t)i, "m")};
    fx_coalesce_opts o = {.subscription_id = 7, .max_events = 2, .max_bytes = 65536};
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    uint32_t sizes[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
        sizes[i] = l.events;
        assert_int_equal(l.first_offset, (uint64_t)i * 2);
    }
    assert_int_equal(sizes[0], 2);
    assert_int_equal(sizes[1], 2);
    assert_int_equal(sizes[2], 1);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_replay_inside_batch_uses_per_subscriber_frame(void **state)
{
    const char *msgs[] = {"a", "b", "c", "d"};
    src s = {.n = 2};
    s.items[0] = (fx_env_item){.env = envn(10, msgs, 4), .skip = 2};
    s.items[1] = (fx_env_item){.env = env1(14, "e")};
    uint64_t enc0 = shared_encodes(), sub0 = sub_encodes();
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &big, &l), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.events, 3);
    assert_int_equal(l.first_offset, 12);
    assert_int_equal(l.end_offset, 15);
    expect_frame(l.frames[0], 0x0022, 12, 2, 7); /* c, d for subscription 7 */
    expect_frame(l.frames[1], 0x0024, 14, 1, 0); /* then the shared frame */
    assert_int_equal(sub_encodes() - sub0, 1);
    assert_int_equal(shared_encodes() - enc0, 1);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_coalesce_splits_envelope_over_the_limits(void **state)
{
    const char *msgs[] = {"a", "b", "c", "d", "e"};
    src s = {.n = 1};
    s.items[0] = (fx_env_item){.env = envn(0, msgs, 5)};
    fx_coalesce_opts o = {.subscription_id = 9, .max_events = 2, .max_bytes = 65536};
    uint64_t enc0 = shared_encodes();
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    uint64_t first[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
        assert_int_equal(l.n, 1);
        first[i] = l.first_offset;
        expect_frame(l.frames[0], 0x0022, first[i], i < 2 ? 2 : 1, 9);
    }
    assert_int_equal(first[0], 0);
    assert_int_equal(first[1], 2);
    assert_int_equal(first[2], 4);
    assert_false(fx_coalescer_has_pending(&c));
    assert_int_equal(shared_encodes() - enc0, 0);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_coalesce_takes_whole_shared_frame_over_byte_cap(void **state)
{
    /* A publish batch whose frame is over max_bytes but within max_events
     * goes out as its one shared frame, not as per-subscriber splits. */
    const char *msgs[] = {"0123456789", "abcdefghij", "ABCDEFGHIJ"};
    src s = {.n = 2};
    s.items[0] = (fx_env_item){.env = envn(0, msgs, 3)};
    s.items[1] = (fx_env_item){.env = env1(3, "x")};
    fx_coalesce_opts o = {.subscription_id = 9, .max_events = 8, .max_bytes = 16};
    uint64_t enc0 = shared_encodes();
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 1);
    expect_frame(l.frames[0], 0x0024, 0, 3, 0);
    assert_int_equal(shared_encodes() - enc0, 1);
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.first_offset, 3);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static void test_coalesce_sends_oversized_single_payload_alone(void **state)
{
    src s = {.n = 2};
    s.items[0] = (fx_env_item){.env = env1(0, "0123456789abcdef0123456789")};
    s.items[1] = (fx_env_item){.env = env1(1, "x")};
    fx_coalesce_opts o = {.subscription_id = 9, .max_events = 8, .max_bytes = 16};
    fx_coalescer c;
    fx_coalescer_init(&c);
    fx_frame_list l = {0};
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 1);
    expect_frame(l.frames[0], 0x0024, 0, 1, 0); /* its shared frame, not a split */
    assert_int_equal(fx_coalesce_next(&c, src_pull, &s, &o, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.first_offset, 1);
    fx_frame_list_clear(&l);
    fx_coalescer_deinit(&c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_shared_frame_bytes_match_wire_example),
    cmocka_unit_test(test_shared_frame_size_is_the_encoded_size),
    cmocka_unit_test(test_two_subscribers_share_one_encoded_frame),
    cmocka_unit_test(test_sub_frame_for_a_range),
    cmocka_unit_test(test_concurrent_first_encodes_agree_on_one_frame),
    cmocka_unit_test(test_coalesce_chains_cached_frames_without_reencoding),
    cmocka_unit_test(test_coalesce_breaks_on_offset_gap),
    cmocka_unit_test(test_coalesce_respects_max_bytes),
    cmocka_unit_test(test_coalesce_respects_max_events),
    cmocka_unit_test(test_replay_inside_batch_uses_per_subscriber_frame),
    cmocka_unit_test(test_coalesce_splits_envelope_over_the_limits),
    cmocka_unit_test(test_coalesce_takes_whole_shared_frame_over_byte_cap),
    cmocka_unit_test(test_coalesce_sends_oversized_single_payload_alone),
};
FX_TEST_MAIN(tests)
