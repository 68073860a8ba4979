/* Integration test of a group member's op inbox (checkpoint 5a) on a real
 * broker spoken to in raw frames: a member floods GROUP_ACKS frames while
 * the group's worker is stalled again and again (the connection lives on
 * an io loop, the stream on worker 0). The broker's queued op bytes
 * (felix_group_ops_queued_bytes, sampled every millisecond) never exceed
 * the bound plus one frame, reading pauses are counted, and every frame is
 * applied and answered, in order. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "broker/test_hooks.h"
#include "integ/broker_client.h"
#include "unit/group_frames.h"
#include "wire/group.h"

/* Frames sent, each with a request id and OPS term ops carrying a 256-byte
 * reason (~1.1 KiB a frame: ~3.3 MiB in all, 13 times the bound). */
#define FRAMES 3000u
#define OPS 4u
/* broker/group.h's FXB_GROUP_OPS_INBOX_BYTES (that header, with the
 * broker's internals, cannot be included beside felix.h). */
#define INBOX_BYTES (256 * 1024)

/* The join stream of a member of group "g" on stream "flood". */
static tstream *join(T *t, tconn *c)
{
    tstream *s = open_bidi(c);
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63 | FX_FLAG_FELIXC);
    send_msg(s, &m);
    fx_msg r;
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, &r);
    fx_msg_deinit(&r);
    send_json(s, "{\"type\":\"group_join\",\"tenant_id\":\"t1\",\"namespace\":\"default\","
                 "\"stream\":\"flood\",\"group\":\"g\",\"create\":\"all\"}");
    expect_msg(t, s, FX_MSG_GROUP_JOINED, NULL, &r);
    fx_msg_deinit(&r);
    return s;
}

/* Sends frame |i| (request id i + 1): term ops on offsets i * OPS ..
 * i * OPS + OPS - 1, none delivered, so each is refused and its answer
 * lists them in order. Returns the frame's size. */
static size_t send_frame_i(tstream *s, uint32_t i)
{
    size_t size = 0;
    uint8_t *p = fx_test_term_frame(i, OPS, &size);
    assert_non_null(p);
    send_bytes(s, p, size);
    free(p);
    return size;
}

/* What the sampling predicate sees and keeps. */
typedef struct flood {
    tstream *s;
    int64_t peak; /* the most queued op bytes seen */
    uint32_t answered;
    uint64_t until_ns; /* 0: until every frame is answered */
} flood;

/* Checks the answers arrived so far: request ids 1, 2, ... and every op of
 * every frame refused, in order. */
static void take_answers(flood *fl)
{
    tframe *f;
    while ((f = fl->s->head) != NULL) {
        fl->s->head = f->next;
        if (fl->s->head == NULL)
            fl->s->tail = NULL;
        assert_int_equal(f->flags, FX_FLAG_FELIXC);
        fx_wire_group_acked a;
        assert_int_equal(fx_wire_group_acked_decode(f->body, f->len, &a, NULL), 0);
        assert_int_equal(a.request_id, fl->answered + 1);
        assert_int_equal(a.nrefused, OPS);
        for (uint32_t j = 0; j < OPS; j++)
            assert_int_equal(a.refused[j].offset, (uint64_t)fl->answered * OPS + j);
        fx_wire_group_acked_deinit(&a);
        tframe_free(f);
        fl->answered++;
    }
}

/* Run every millisecond: samples the broker's queued op bytes. */
static bool sample(T *t)
{
    flood *fl = t->arg;
    int64_t q = atomic_load_explicit(&fx_gauges.group_ops_queued_bytes, memory_order_relaxed);
    fl->peak = q > fl->peak ? q : fl->peak;
    take_answers(fl);
    if (fl->until_ns != 0)
        return fx_now_ns() >= fl->until_ns;
    return fl->answered == FRAMES;
}

static void test_a_member_flooding_acks_at_a_stalled_worker_is_held_at_the_bound(void **state)
{
    (void)state;
    T *t = t_new();
    t->bo.workers = 1;
    t->bo.io_threads = 1; /* the connection reads while worker 0 sleeps */
    t_start(t);
    flood fl = {.s = join(t, t_connect(t))};
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    /* Four batches, each sent while the worker sleeps 500 ms: the inbox
     * fills to its bound and the stream stops reading; between them the
     * worker drains it and the stream reads on. */
    size_t max_frame = 0;
    for (uint32_t k = 0; k < 4; k++) {
        assert_int_equal(fx_broker_test_stall_worker(t->b, 0, 500), 0);
        for (uint32_t i = k * FRAMES / 4; i < (k + 1) * FRAMES / 4; i++) {
            size_t n = send_frame_i(fl.s, i);
            max_frame = n > max_frame ? n : max_frame;
        }
        fl.until_ns = fx_now_ns() + 600 * FX_NS_PER_MS;
        assert_true(run_until_arg(t, sample, &fl, 2000));
    }
    fl.until_ns = 0;
    if (!run_until_arg(t, sample, &fl, 30000))
        fail_msg("%u of %u frames answered", fl.answered, FRAMES);
    fx_metrics_snapshot_take(&after);
    /* The bound was reached and held: at most the bound plus one frame's
     * bytes and bookkeeping. (A stall whose batch the network had not
     * brought to the bound in time pauses nothing: at least one did.) */
    assert_true(fl.peak >= (int64_t)INBOX_BYTES);
    assert_true(fl.peak <= (int64_t)(INBOX_BYTES + max_frame + 64));
    assert_true(DELTA(before, after, group_ops_paused) >= 1);
    assert_int_equal(DELTA(before, after, group_ops_failed), 0);
    assert_int_equal(after.g.group_ops_queued_bytes, 0);
    t_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_member_flooding_acks_at_a_stalled_worker_is_held_at_the_bound),
};

FX_TEST_MAIN(tests)
