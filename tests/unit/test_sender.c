/* Tests of the client's publish sender (src/client/sender.c) over the fake
 * QUIC transport of the fuzz targets (tests/fuzz/fake_quic.c): no socket.
 * The client runs on its real loop thread; a scripted broker in the
 * transport's send hook answers auth, decodes every publish frame with
 * src/wire, answers acked ones as the test asks, acknowledges the bytes
 * and FINs back on the close handshake. A gate parks the loop so that
 * publishes queue up behind one another, as they do behind a busy stream. */
/* fx-test-libs: fx_client fx_wire fx_base */
#include "fx_test.h"

#include <pthread.h>

#include "client/client.h"
#include "felix/felix.h"
#include "fuzz/fake_quic.c"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

/* Loop-thread checks cannot use cmocka's asserts (they jump back into the
 * test on its own thread): a failure there aborts the test. */
#define LOOP_CHECK(cond) FX_FUZZ_CHECK(cond)

/* ---- the scripted broker (client loop) ------------------------------------------------ */

enum { ANSWER_OK = 0, ANSWER_ERROR, ANSWER_NONE };

typedef struct broker {
    fx_frame_decoder dec[8]; /* by stream index (sid / 4) */
    bool dec_init[8];
    int answer; /* for acked frames */
    /* What arrived, in order. */
    int frames;
    int msgs;
    uint64_t request_ids[16];
    int acked_frames;
    char payloads[1024]; /* every payload, each followed by ',' */
    size_t payloads_len;
    bool fin;
} broker;

static broker mb;

typedef struct reply {
    fx_quic_conn *c;
    int64_t sid;
    bool fin;
    size_t n;
    uint8_t bytes[];
} reply;

/* The broker's bytes go out on a later loop turn, as over a network, with
 * the acknowledgement of everything the client sent so far. */
static void reply_run(void *user)
{
    reply *r = user;
    fx_quic_endpoint *ep = fq_last_endpoint();
    if (ep != NULL && fq_conn_alive(ep, r->c)) {
        fq_ack(r->c);
        if (r->n > 0 || r->fin)
            fq_deliver(r->c, r->sid, r->bytes, r->n, r->fin);
    }
    free(r);
}

static void send_bytes(fx_quic_conn *c, int64_t sid, const uint8_t *p, size_t n, bool fin)
{
    reply *r = malloc(sizeof(*r) + n);
    LOOP_CHECK(r != NULL);
    *r = (reply){.c = c, .sid = sid, .fin = fin, .n = n};
    if (n > 0)
        memcpy(r->bytes, p, n);
    LOOP_CHECK(fx_loop_call(fx_quic_conn_loop(c), reply_run, r) == 0);
}

static void on_publish(fx_quic_conn *c, int64_t sid, const fx_frame *f)
{
    fx_wire_publish_batch b;
    LOOP_CHECK(fx_wire_publish_batch_decode(f->hdr.flags, f->body, f->len, &b, NULL) == 0);
    mb.frames++;
    mb.msgs += (int)b.count;
    for (uint32_t i = 0; i < b.count; i++) {
        LOOP_CHECK(mb.payloads_len + b.payloads[i].len + 1 <= sizeof(mb.payloads));
        memcpy(mb.payloads + mb.payloads_len, b.payloads[i].ptr, b.payloads[i].len);
        mb.payloads_len += b.payloads[i].len;
        mb.payloads[mb.payloads_len++] = ',';
    }
    if (b.ack != FX_WIRE_ACK_NONE) {
        LOOP_CHECK(mb.acked_frames < 16);
        mb.request_ids[mb.acked_frames++] = b.request_id;
        if (mb.answer != ANSWER_NONE) {
            fx_wire_publish_ack a = {.ok = mb.answer == ANSWER_OK, .request_id = b.request_id};
            if (!a.ok)
                a.message = (fx_wire_slice){(const uint8_t *)"stream not found", 16};
            uint8_t out[128];
            ssize_t n = fx_wire_publish_ack_encode(&a, out, sizeof(out));
            LOOP_CHECK(n > 0);
            send_bytes(c, sid, out, (size_t)n, false);
        }
    }
    fx_wire_publish_batch_deinit(&b);
}

static void on_frame_in(fx_quic_conn *c, int64_t sid, const fx_frame *f)
{
    if (f->kind == FX_BODY_PUBLISH_BATCH || f->kind == FX_BODY_PUBLISH_BATCH_ACKED) {
        on_publish(c, sid, f);
        return;
    }
    fx_msg m;
    LOOP_CHECK(f->kind == FX_BODY_JSON && fx_msg_decode(&m, f->body, f->len, NULL) == 0);
    if (m.type == FX_MSG_AUTH) {
        fx_msg r;
        fx_msg_init_auth_ok(&r, 0x3f);
        uint8_t *p = NULL;
        size_t n = 0;
        LOOP_CHECK(fx_msg_encode_frame(&r, &p, &n) == 0);
        send_bytes(c, sid, p, n, false);
        free(p);
    }
    fx_msg_deinit(&m);
}

/* What the client sends, as the broker reads it. */
static void mb_on_send(fx_quic_conn *c, fq_stream *fs, const uint8_t *p, size_t n, bool fin,
                       void *user)
{
    (void)user;
    size_t k = (size_t)fs->sid / 4;
    LOOP_CHECK(k < 8);
    if (!mb.dec_init[k]) {
        fx_frame_decoder_init(&mb.dec[k], FX_WIRE_DEFAULT_MAX_FRAME);
        mb.dec_init[k] = true;
    }
    while (n > 0) {
        size_t used = 0;
        fx_frame f;
        int rv = fx_frame_decoder_feed(&mb.dec[k], p, n, &used, &f, NULL);
        LOOP_CHECK(rv >= 0); /* the client's frames are well formed */
        p += used;
        n -= used;
        if (rv == FX_FRAME_READY)
            on_frame_in(c, fs->sid, &f);
    }
    /* Every send is acknowledged soon after; the close handshake's FIN is
     * answered with ours. */
    send_bytes(c, fs->sid, NULL, 0, fin);
    if (fin)
        mb.fin = true;
}

static void mb_reset(void)
{
    for (size_t k = 0; k < 8; k++)
        if (mb.dec_init[k])
            fx_frame_decoder_deinit(&mb.dec[k]);
    mb = (broker){0};
}

/* ---- the loop gate -------------------------------------------------------------------- */

static fx_loop *loop;

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool parked, open;
} gate;

static gate gt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};

static void gate_run(void *user)
{
    (void)user;
    pthread_mutex_lock(&gt.mu);
    gt.parked = true;
    pthread_cond_broadcast(&gt.cv);
    while (!gt.open)
        pthread_cond_wait(&gt.cv, &gt.mu);
    gt.parked = false;
    pthread_cond_broadcast(&gt.cv);
    pthread_mutex_unlock(&gt.mu);
}

/* Parks the client loop until gate_open(): what is posted meanwhile waits. */
static void gate_close(void)
{
    pthread_mutex_lock(&gt.mu);
    gt.open = false;
    pthread_mutex_unlock(&gt.mu);
    assert_int_equal(fx_loop_call(loop, gate_run, NULL), 0);
    pthread_mutex_lock(&gt.mu);
    while (!gt.parked)
        pthread_cond_wait(&gt.cv, &gt.mu);
    pthread_mutex_unlock(&gt.mu);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gt.mu);
    gt.open = true;
    pthread_cond_broadcast(&gt.cv);
    while (gt.parked)
        pthread_cond_wait(&gt.cv, &gt.mu);
    pthread_mutex_unlock(&gt.mu);
}

/* ---- fixture ---------------------------------------------------------------------------- */

/* Async completions, in the order they ran (client loop). */
typedef struct completions {
    pthread_mutex_t mu;
    int n;
    int who[16];
    int rv[16];
} completions;

static completions done = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct call {
    int index;
} call;

static void on_ack(void *user, int rv)
{
    call *k = user;
    pthread_mutex_lock(&done.mu);
    if (done.n < 16) {
        done.who[done.n] = k->index;
        done.rv[done.n] = rv;
    }
    done.n++;
    pthread_mutex_unlock(&done.mu);
}

static void quiet(fx_log_level level, const char *line, size_t len, void *user)
{
    (void)level, (void)line, (void)len, (void)user;
}

static const fx_log_sink quiet_sink = {.on_line = quiet};

static fx_client *connect_client(bool coalesce, int ack_timeout_ms)
{
    fx_log_set_sink(&quiet_sink);
    setenv("FELIX_CLIENT_LOOPS", "1", 1);
    assert_int_equal(fxc_rt_acquire(&loop), 0);
    mb_reset();
    pthread_mutex_lock(&done.mu);
    done.n = 0;
    pthread_mutex_unlock(&done.mu);
    fq_config q = {.stream_window = 1u << 20,
                   .unacked_cap = 16u << 20,
                   .local_streams = 64,
                   .auto_turn = true,
                   .on_send = mb_on_send};
    fq_configure(&q);
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = "127.0.0.1:4433";
    o.tenant = "t1";
    o.token = "tok";
    o.insecure = true;
    o.publish_conn_pool = 1;
    o.publish_streams_per_conn = 1;
    o.reconnect = false;
    o.connect_timeout_ms = 5000;
    o.publish_coalesce = coalesce;
    if (ack_timeout_ms > 0)
        o.publish_ack_timeout_ms = ack_timeout_ms;
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), 0);
    assert_ptr_equal(fx_quic_endpoint_loop(fq_last_endpoint()), loop);
    return c;
}

/* Closes |c| (the close handshake must finish cleanly) and checks that
 * nothing is left behind. */
static void close_client(fx_client *c)
{
    assert_int_equal(fx_client_close(c, 5000), 0);
    assert_true(mb.fin);
    assert_null(fq_last_endpoint());
    mb_reset();
    fxc_rt_release();
}

/* |n| async publishes of "p<i>" on one stream while the loop is parked:
 * they wait in the worker's queue together. */
static void publish_parked(fx_client *c, call *calls, int n, fx_ack ack)
{
    gate_close();
    for (int i = 0; i < n; i++) {
        char p[8];
        int len = snprintf(p, sizeof(p), "p%d", i);
        calls[i].index = i;
        assert_int_equal(fx_publish_async(c, "ns", "s", p, (size_t)len, ack, on_ack, &calls[i]), 0);
    }
    gate_open();
}

/* ---- cases ------------------------------------------------------------------------------ */

/* Publishes that queued up together leave as one frame, in call order;
 * each unacked callback runs, successful, once QUIC acknowledged it. */
static void test_queued_publishes_leave_as_one_frame(void **state)
{
    fx_client *c = connect_client(true, 0);
    call calls[5];
    publish_parked(c, calls, 5, FX_ACK_NONE);
    assert_int_equal(fx_flush(c, 5000), 0);
    assert_int_equal(mb.frames, 1);
    assert_int_equal(mb.msgs, 5);
    assert_int_equal(mb.payloads_len, 15);
    assert_memory_equal(mb.payloads, "p0,p1,p2,p3,p4,", 15);
    assert_int_equal(done.n, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(done.who[i], i);
        assert_int_equal(done.rv[i], 0);
    }
    close_client(c);
}

/* publish_coalesce off: one frame per call, whatever queued up. */
static void test_without_coalescing_one_frame_per_call(void **state)
{
    fx_client *c = connect_client(false, 0);
    call calls[4];
    publish_parked(c, calls, 4, FX_ACK_NONE);
    assert_int_equal(fx_flush(c, 5000), 0);
    assert_int_equal(mb.frames, 4);
    assert_int_equal(mb.msgs, 4);
    assert_int_equal(done.n, 4);
    close_client(c);
}

/* Acked publishes merged into one frame are sent under the first one's
 * request id; the broker's one answer completes every call. */
static void test_merged_acked_publishes_share_one_answer(void **state)
{
    fx_client *c = connect_client(true, 0);
    call calls[3];
    publish_parked(c, calls, 3, FX_ACK_PER_MESSAGE);
    assert_int_equal(fx_flush(c, 5000), 0);
    assert_int_equal(mb.frames, 1);
    assert_int_equal(mb.acked_frames, 1);
    assert_int_equal(mb.msgs, 3);
    assert_int_equal(done.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(done.who[i], i);
        assert_int_equal(done.rv[i], 0);
    }
    close_client(c);
}

/* A synchronous acked publish returns the broker's answer: ok, or its
 * error text mapped to a code. */
static void test_acked_publish_returns_the_answer(void **state)
{
    fx_client *c = connect_client(true, 0);
    assert_int_equal(fx_publish(c, "ns", "s", "x", 1, FX_ACK_PER_MESSAGE), 0);
    mb.answer = ANSWER_ERROR; /* the loop reads it on the next frame, after this store */
    assert_int_equal(fx_publish(c, "ns", "s", "y", 1, FX_ACK_PER_MESSAGE), FX_ENOSTREAM);
    char text[256];
    fx_client_last_error(c, text, sizeof(text));
    assert_non_null(strstr(text, "stream not found"));
    assert_int_equal(mb.acked_frames, 2);
    assert_true(mb.request_ids[1] != mb.request_ids[0]);
    close_client(c);
}

/* An acked publish the broker never answers fails with FX_ETIMEDOUT after
 * publish_ack_timeout_ms (the loop's ack timer). */
static void test_unanswered_publish_times_out(void **state)
{
    fx_client *c = connect_client(true, 100);
    mb.answer = ANSWER_NONE;
    call k = {.index = 7};
    assert_int_equal(fx_publish_async(c, "ns", "s", "z", 1, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    assert_int_equal(fx_flush(c, 5000), 0); /* the timer finishes it */
    assert_int_equal(done.n, 1);
    assert_int_equal(done.who[0], 7);
    assert_int_equal(done.rv[0], FX_ETIMEDOUT);
    assert_int_equal(mb.acked_frames, 1);
    close_client(c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_queued_publishes_leave_as_one_frame),
    cmocka_unit_test(test_without_coalescing_one_frame_per_call),
    cmocka_unit_test(test_merged_acked_publishes_share_one_answer),
    cmocka_unit_test(test_acked_publish_returns_the_answer),
    cmocka_unit_test(test_unanswered_publish_times_out),
};

FX_TEST_MAIN(tests)
