/* Unit tests of a group member's op inbox (checkpoint 5a: group.c
 * fxb_group_queue_ops / fxb_group_member_ops, group_req.c, bidi.c) on the
 * one-thread broker of conn_fixture.h, with the connection on an io loop
 * so the test can hold the stream's worker loop back: the join stream
 * stops reading at the bound (its input uncredited, the client held by the
 * stream window), reads on once the worker has applied the inbox, loses no
 * frame and answers them in order; a FIN behind the full inbox waits for
 * the frames before it. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"
#include "unit/group_frames.h"

#include "broker/group.h"
#include "wire/group.h"

#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))

/* Ops per frame (term ops with a 256-byte reason: a frame is ~1.1 KiB, its
 * answer small enough for the fake transport's 256 KiB log), and the frames
 * a test sends: past the 256 KiB bound, and fewer replies than a stream's
 * reply bound (1536). */
#define OPS 4u
static uint32_t nframes;

static void tune(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->io_threads = 1; /* the connection on fx-io-0, the stream on fx-worker-0 */
}

/* A 64 KiB stream window: what the broker keeps unread is that at most, and
 * the client is held once its transport's outbox (256 KiB) is full too. */
static void tune_small_window(fx_broker_opts *o, fq_config *q)
{
    tune(o, q);
    q->stream_window = 64u * 1024u;
}

static int64_t queued_bytes(void)
{
    fx_metrics_snapshot s;
    fx_metrics_snapshot_take(&s);
    return s.g.group_ops_queued_bytes;
}

/* Authenticates |sid| offering the group frames, joins group "g" of stream
 * "s" (created) and reads group_joined. */
static void join(cf *f, int64_t sid)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "token", true, 63 | FX_FLAG_FELIXC);
    cf_write_msg(f, sid, &m);
    cf_settle(f);
    cf_expect_msg(f, sid, FX_MSG_AUTH_OK, NULL);
    fx_msg_init_group_join(&m, "t1", "default", "s", "g");
    m.create.kind = FX_MSG_CREATE_ALL;
    cf_write_msg(f, sid, &m);
    cf_settle(f);
    cf_expect_msg(f, sid, FX_MSG_GROUP_JOINED, NULL);
}

/* Frame |i| (request id i + 1): OPS term ops on offsets
 * i * OPS .. i * OPS + OPS - 1, none delivered, so each is refused and the
 * answer lists them in order. Returns the frame (free() it). */
static uint8_t *ops_frame(uint32_t i, size_t *plen)
{
    uint8_t *p = fx_test_term_frame(i, OPS, plen);
    assert_non_null(p);
    return p;
}

/* Runs every loop but the worker's, and the transport, until quiet. */
static void run_all_but_worker(cf *f)
{
    for (unsigned i = 0; i < 1000; i++) {
        bool any = cf_run_but(f, "fx-worker");
        cf_turn(f);
        any |= cf_run_but(f, "fx-worker");
        if (!any)
            return;
    }
}

/* The client writes frames from |*next| on while the fake transport's
 * outbox takes them whole; |max_frame| gets the largest frame. */
static void write_frames(cf *f, int64_t sid, uint32_t *next, size_t *max_frame)
{
    while (*next < nframes) {
        size_t n;
        uint8_t *p = ops_frame(*next, &n);
        fq_stream *s = cf_stream(f, sid);
        bool room = s->out_len + n <= FQ_OUTBOX_MAX;
        if (room) {
            cf_write(f, sid, p, n, false);
            (*next)++;
            *max_frame = n > *max_frame ? n : *max_frame;
        }
        free(p);
        if (!room)
            return;
    }
}

/* Reads the GROUP_ACKED answers of frames |*next| on, checking each one's
 * request id and refusals: every op of every frame, in order. */
static void read_answers(cf *f, int64_t sid, uint32_t *next)
{
    cf_frame fr;
    while (cf_read_frame(f, sid, &fr)) {
        assert_int_equal(fr.kind, FX_BODY_FELIXC);
        fx_wire_group_acked a;
        assert_int_equal(fx_wire_group_acked_decode(fr.body, fr.len, &a, NULL), 0);
        assert_true(*next < nframes);
        assert_int_equal(a.request_id, *next + 1);
        assert_int_equal(a.nrefused, OPS);
        for (uint32_t j = 0; j < OPS; j++)
            assert_int_equal(a.refused[j].offset, (uint64_t)*next * OPS + j);
        fx_wire_group_acked_deinit(&a);
        (*next)++;
    }
}

/* With the worker held, the join stream reads up to the bound, stops once
 * (counted) with the rest uncredited, and the inbox holds at most the bound
 * plus one frame; released, the worker drains it, the stream reads on, and
 * every frame is applied and answered once, in order. */
static void test_the_inbox_stops_reading_at_its_bound_and_resumes_once_drained(void **state)
{
    (void)state;
    nframes = 1000;
    cf *f = cf_new(tune_small_window);
    join(f, 0);
    fx_metrics_snapshot before, after;
    fx_metrics_snapshot_take(&before);
    uint32_t sent = 0, answered = 0;
    size_t max_frame = 0;
    write_frames(f, 0, &sent, &max_frame);
    run_all_but_worker(f);
    write_frames(f, 0, &sent, &max_frame);
    run_all_but_worker(f);
    /* Held: the client could not send everything and nothing was answered. */
    assert_true(sent < nframes);
    fq_stream *s = cf_stream(f, 0);
    assert_true(s->out_len > 0);
    assert_true(s->rx_consumed < s->rx_delivered); /* read, kept, not credited */
    int64_t q = queued_bytes();
    assert_true(q >= (int64_t)FXB_GROUP_OPS_INBOX_BYTES);
    assert_true(q <= (int64_t)(FXB_GROUP_OPS_INBOX_BYTES + max_frame + 64));
    fx_metrics_snapshot_take(&after);
    assert_int_equal(DELTA(before, after, group_ops_paused), 1);
    read_answers(f, 0, &answered);
    assert_int_equal(answered, 0);
    /* Released: each turn the worker drains, the stream reads on. */
    for (unsigned round = 0; answered < nframes && round < 1000; round++) {
        cf_settle(f);
        assert_true(queued_bytes() <= (int64_t)(FXB_GROUP_OPS_INBOX_BYTES + max_frame + 64));
        read_answers(f, 0, &answered);
        write_frames(f, 0, &sent, &max_frame);
    }
    assert_int_equal(answered, nframes);
    assert_int_equal(queued_bytes(), 0);
    s = cf_stream(f, 0);
    assert_int_equal(s->out_len, 0);
    assert_int_equal(s->rx_consumed, s->rx_delivered); /* all credited */
    fx_metrics_snapshot_take(&after);
    assert_true(DELTA(before, after, group_ops_paused) >= 1);
    assert_int_equal(DELTA(before, after, group_ops_failed), 0);
    cf_free(f);
}

/* The client finishes its join stream while frames wait unread behind the
 * full inbox: the member leaves only after they were applied, so every one
 * is answered, in order, before the stream's FIN. */
static void test_a_fin_behind_a_full_inbox_answers_every_frame_before_the_leave(void **state)
{
    (void)state;
    nframes = 400; /* ~450 KiB: all within the 1 MiB window, past the bound */
    cf *f = cf_new(tune);
    join(f, 0);
    uint32_t sent = 0, answered = 0;
    size_t max_frame = 0;
    write_frames(f, 0, &sent, &max_frame);
    run_all_but_worker(f);
    assert_int_equal(sent, nframes);
    assert_int_equal(cf_stream(f, 0)->out_len, 0); /* all with the broker */
    assert_true(cf_stream(f, 0)->rx_consumed < cf_stream(f, 0)->rx_delivered);
    cf_write(f, 0, NULL, 0, true); /* FIN while the inbox is full */
    run_all_but_worker(f);
    assert_false(cf_stream(f, 0)->tx_fin); /* no leave yet: frames wait */
    cf_settle(f);
    read_answers(f, 0, &answered);
    assert_int_equal(answered, sent);
    assert_true(cf_stream(f, 0)->tx_fin);
    assert_int_equal(queued_bytes(), 0);
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_inbox_stops_reading_at_its_bound_and_resumes_once_drained),
    cmocka_unit_test(test_a_fin_behind_a_full_inbox_answers_every_frame_before_the_leave),
};

FX_TEST_MAIN(tests)
