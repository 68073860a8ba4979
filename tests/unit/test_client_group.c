/* libfelix consumer-group members (src/client/group.c): the op queue on its
 * own, and members against a scripted stub broker on 127.0.0.1 port 0 (its
 * own loop thread) that answers auth and group_join, sends GROUP_BATCH
 * frames the test asks for, logs the GROUP_ACKS frames it receives and
 * answers those with a request id. Timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"
#include "client/client.h"
#include "felix/felix.h"
#include "fx_test.h"
#include "quic/quic.h"
#include "wire/frame.h"
#include "wire/group.h"
#include "wire/message.h"

/* ---- the op queue ------------------------------------------------------------- */

static void test_contiguous_acks_coalesce_into_one_range_op(void **state)
{
    (void)state;
    fxc_gops q;
    fxc_gops_init(&q, FXC_GROUP_OPS_MAX);
    for (uint64_t off = 10; off < 110; off++)
        assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, off, 0, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 9, 0, 0, NULL), 0);  /* below: extends */
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 50, 0, 0, NULL), 0); /* inside: nothing */
    assert_int_equal(q.n, 1);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_NAK, 200, 2, 5, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 300, 0, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 301, 0, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_TERM, 400, 1, 0, "bad input"), 0);
    assert_int_equal(q.n, 4);
    uint8_t *f = NULL;
    size_t n = 0;
    assert_int_equal(fxc_gops_encode(&q, 0, &f, &n), 0);
    assert_int_equal(fx_be16(f + 6), FX_FLAG_FELIXC);
    assert_int_equal(fx_be32(f + 8), n - 12);
    fx_wire_group_acks a;
    assert_int_equal(fx_wire_group_acks_decode(f + 12, n - 12, &a, NULL), 0);
    assert_int_equal(a.request_id, 0);
    assert_int_equal(a.nops, 4);
    assert_int_equal(a.ops[0].kind, FX_GROUP_OP_ACK);
    assert_int_equal(a.ops[0].first, 9);
    assert_int_equal(a.ops[0].count, 101);
    assert_int_equal(a.ops[1].kind, FX_GROUP_OP_NAK);
    assert_int_equal(a.ops[1].arg, 5);
    assert_int_equal(a.ops[2].first, 300);
    assert_int_equal(a.ops[2].count, 2);
    assert_int_equal(a.ops[3].kind, FX_GROUP_OP_TERM);
    assert_int_equal(a.ops[3].reason.len, 9);
    assert_memory_equal(a.ops[3].reason.ptr, "bad input", 9);
    fx_wire_group_acks_deinit(&a);
    free(f);
    fxc_gops_deinit(&q);
}

static void test_op_queue_is_bounded_and_merges_when_full(void **state)
{
    (void)state;
    fxc_gops q;
    fxc_gops_init(&q, 8);
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, i * 10, 0, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 1000, 0, 0, NULL), FX_EFULL);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_RELEASE, 1000, 1, 0, NULL), FX_EFULL);
    /* Still merges: a contiguous ack takes no room. */
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_ACK, 71, 0, 0, NULL), 0);
    assert_int_equal(q.n, 8);
    fxc_gops_clear(&q);
    assert_int_equal(q.n, 0);
    /* A newer in_progress of an offset replaces the queued one. */
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_IN_PROGRESS, 5, 1, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_IN_PROGRESS, 6, 1, 0, NULL), 0);
    assert_int_equal(fxc_gops_push(&q, FX_GROUP_OP_IN_PROGRESS, 5, 2, 0, NULL), 0);
    assert_int_equal(q.n, 2);
    assert_int_equal(q.ops[0].attempt, 2);
    /* Nothing to encode without a request id; a request id alone is a frame. */
    fxc_gops_clear(&q);
    uint8_t *f = NULL;
    size_t n = 0;
    assert_int_equal(fxc_gops_encode(&q, 0, &f, &n), -EINVAL);
    assert_int_equal(fxc_gops_encode(&q, 9, &f, &n), 0);
    fx_wire_group_acks a;
    assert_int_equal(fx_wire_group_acks_decode(f + 12, n - 12, &a, NULL), 0);
    assert_int_equal(a.request_id, 9);
    assert_int_equal(a.nops, 0);
    fx_wire_group_acks_deinit(&a);
    free(f);
    fxc_gops_deinit(&q);
}

/* ---- stub broker --------------------------------------------------------------- */

#define NS 64
#define MAXOPS 512

typedef struct sop {
    int kind;
    uint64_t first;
    uint32_t count, attempt, arg;
} sop;

typedef struct stub {
    fx_loop *loop;
    fx_quic_endpoint *ep;
    char dir[64];
    pthread_mutex_t mu;
    fx_frame_decoder dec[NS];
    bool used[NS];
    /* script */
    uint16_t flags;        /* server_flags of auth_ok */
    const char *refuse;    /* answer group_join with this error */
    int ack_wait_ms;       /* echoed in group_joined when > 0 */
    bool hold_acked;       /* do not answer GROUP_ACKS with a request id */
    uint64_t sub_id;
    /* observed (mu) */
    fx_quic_conn *conn;
    int64_t join_sid, uni;
    json_t *join;          /* the group_join received */
    int nframes;           /* GROUP_ACKS frames */
    uint32_t frame_nops[64];
    uint64_t frame_req[64];
    int nops;
    sop ops[MAXOPS];
    int answered;          /* GROUP_ACKED sent */
    bool join_fin;
} stub;

static stub *S;

static void ssend(int64_t sid, const void *p, size_t n, bool fin)
{
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new_copy(&b, p, n), 0);
    assert_int_equal(fx_quic_stream_send(S->conn, sid, b, 0, n, fin), 0);
    fx_buf_unref(b);
}

static void smsg(int64_t sid, const fx_msg *m)
{
    uint8_t *f = NULL;
    size_t n = 0;
    assert_int_equal(fx_msg_encode_frame(m, &f, &n), 0);
    ssend(sid, f, n, false);
    free(f);
}

static void sjson(int64_t sid, json_t *o, bool fin)
{
    char *js = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t n = strlen(js);
    uint8_t *f = malloc(n + 12);
    fx_frame_header_put(f, 0, (uint32_t)n);
    memcpy(f + 12, js, n);
    ssend(sid, f, n + 12, fin);
    free(f);
    free(js);
}

static void on_join(int64_t sid, json_t *o)
{
    S->join = json_incref(o);
    S->join_sid = sid;
    if (S->refuse != NULL) {
        sjson(sid, json_pack("{s:s,s:s}", "type", "error", "message", S->refuse), true);
        return;
    }
    assert_int_equal(fx_quic_conn_open_uni(S->conn, NULL, &S->uni), 0);
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, S->sub_id);
    smsg(S->uni, &m);
    json_t *r = json_pack("{s:s,s:I,s:O,s:i,s:b}", "type", "group_joined", "subscription_id",
                          (json_int_t)S->sub_id, "member", json_object_get(o, "member"), "window",
                          8, "durable", 1);
    if (S->ack_wait_ms > 0)
        json_object_set_new(r, "ack_wait_ms", json_integer(S->ack_wait_ms));
    sjson(sid, r, false);
}

static void on_json(int64_t sid, const fx_frame *f)
{
    json_t *o = json_loadb((const char *)f->body, f->len, 0, NULL);
    assert_non_null(o);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (strcmp(type, "auth") == 0) {
        fx_msg r;
        fx_msg_init_auth_ok(&r, S->flags);
        smsg(sid, &r);
    } else if (strcmp(type, "group_join") == 0) {
        on_join(sid, o);
    }
    json_decref(o);
}

static void on_acks(int64_t sid, const fx_frame *f)
{
    fx_wire_group_acks a;
    assert_int_equal(fx_wire_group_acks_decode(f->body, f->len, &a, NULL), 0);
    if (S->nframes < 64) {
        S->frame_nops[S->nframes] = a.nops;
        S->frame_req[S->nframes] = a.request_id;
    }
    S->nframes++;
    for (uint32_t i = 0; i < a.nops && S->nops < MAXOPS; i++)
        S->ops[S->nops++] = (sop){a.ops[i].kind, a.ops[i].first, a.ops[i].count,
                                  a.ops[i].attempt, a.ops[i].arg};
    if (a.request_id != 0 && !S->hold_acked) {
        fx_wire_group_acked r = {.request_id = a.request_id};
        uint8_t out[64];
        ssize_t n = fx_wire_group_acked_encode(&r, out, sizeof(out));
        assert_true(n > 0);
        ssend(sid, out, (size_t)n, false);
        S->answered++;
    }
    fx_wire_group_acks_deinit(&a);
}

static void s_on_data(fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t n, bool fin,
                      void *user, void *su)
{
    (void)user, (void)su;
    fx_quic_stream_consume(c, sid, n);
    if ((sid & 2) != 0 || (sid >> 2) >= NS)
        return;
    pthread_mutex_lock(&S->mu);
    int i = (int)(sid >> 2);
    if (!S->used[i]) {
        S->used[i] = true;
        fx_frame_decoder_init(&S->dec[i], 1u << 20);
    }
    while (n > 0) {
        size_t used = 0;
        fx_frame f;
        int rv = fx_frame_decoder_feed(&S->dec[i], d, n, &used, &f, NULL);
        assert_true(rv >= 0);
        d += used;
        n -= used;
        if (rv == FX_FRAME_READY && f.hdr.flags == FX_FLAG_FELIXC)
            on_acks(sid, &f);
        else if (rv == FX_FRAME_READY)
            on_json(sid, &f);
    }
    if (fin && sid == S->join_sid) {
        /* Like the broker: the member left; finish its streams. */
        S->join_fin = true;
        if (S->uni >= 0)
            fx_quic_stream_shutdown(c, S->uni);
    }
    if (fin) /* as the broker answers a publish stream's FIN (fx_client_close) */
        fx_quic_stream_shutdown(c, sid);
    pthread_mutex_unlock(&S->mu);
}

static void s_on_conn_new(fx_quic_conn *c, void *user)
{
    (void)user;
    pthread_mutex_lock(&S->mu);
    S->conn = c;
    pthread_mutex_unlock(&S->mu);
}

static void s_on_conn_closed(fx_quic_conn *c, const fx_quic_close_info *i, void *user)
{
    (void)i, (void)user;
    pthread_mutex_lock(&S->mu);
    if (S->conn == c)
        S->conn = NULL;
    pthread_mutex_unlock(&S->mu);
}

static const fx_quic_callbacks SCB = {
    .on_conn_new = s_on_conn_new, .on_stream_data = s_on_data, .on_conn_closed = s_on_conn_closed};

static char stub_dir[64];

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    remove(path);
    return 0;
}

static int stub_dir_teardown(void **state)
{
    (void)state;
    if (stub_dir[0] != '\0')
        nftw(stub_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    stub_dir[0] = '\0';
    return 0;
}

static void stub_start(uint16_t flags)
{
    fx_log_set_level(FX_LOG_ERROR);
    S = calloc(1, sizeof(*S));
    assert_non_null(S);
    pthread_mutex_init(&S->mu, NULL);
    S->flags = flags;
    S->sub_id = 91;
    S->uni = S->join_sid = -1;
    snprintf(S->dir, sizeof(S->dir), "/tmp/fxgrpXXXXXX");
    assert_non_null(mkdtemp(S->dir));
    snprintf(stub_dir, sizeof(stub_dir), "%s", S->dir);
    assert_int_equal(fx_loop_new(&S->loop, &(fx_loop_opts){.name = "stub", .cpu = -1}), 0);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = S->dir;
    o.udp_send_buffer = o.udp_recv_buffer = 1 << 20;
    assert_int_equal(fx_quic_server_new(&S->ep, S->loop, "127.0.0.1", 0, &o, &SCB, NULL), 0);
    assert_int_equal(fx_loop_start(S->loop), 0);
}

static void free_ep(void *u)
{
    (void)u;
    fx_quic_endpoint_free(S->ep);
}

static void stub_stop(void)
{
    assert_int_equal(fx_loop_call(S->loop, free_ep, NULL), 0);
    fx_loop_stop(S->loop);
    fx_loop_free(S->loop);
    for (int i = 0; i < NS; i++)
        if (S->used[i])
            fx_frame_decoder_deinit(&S->dec[i]);
    json_decref(S->join);
    stub_dir_teardown(NULL);
    pthread_mutex_destroy(&S->mu);
    free(S);
    S = NULL;
}

/* One run of a GROUP_BATCH the stub sends: |count| records whose payload is
 * "r<offset>". */
typedef struct srun {
    uint64_t first;
    uint32_t attempt, count;
    uint64_t skipped;
} srun;

typedef struct sbatch_req {
    srun runs[4];
    int nruns;
} sbatch_req;

static void send_batch_task(void *u)
{
    sbatch_req *r = u;
    uint8_t buf[4096];
    fx_wire_group_builder gb;
    pthread_mutex_lock(&S->mu);
    assert_int_equal(fx_wire_group_batch_begin(&gb, buf, sizeof(buf)), 0);
    for (int i = 0; i < r->nruns; i++) {
        const srun *s = &r->runs[i];
        assert_int_equal(fx_wire_group_batch_run(&gb, s->first, s->attempt, s->skipped), 0);
        for (uint32_t k = 0; k < s->count; k++) {
            char p[32];
            int n = snprintf(p, sizeof(p), "r%llu", (unsigned long long)(s->first + k));
            assert_int_equal(fx_wire_group_batch_record(&gb, p, (uint32_t)n), 0);
        }
    }
    ssize_t n = fx_wire_group_batch_finish(&gb);
    assert_true(n > 0);
    ssend(S->uni, buf, (size_t)n, false);
    pthread_mutex_unlock(&S->mu);
    free(r);
}

static void stub_send(const srun *runs, int nruns)
{
    sbatch_req *r = calloc(1, sizeof(*r));
    memcpy(r->runs, runs, sizeof(*runs) * (size_t)nruns);
    r->nruns = nruns;
    assert_int_equal(fx_loop_call(S->loop, send_batch_task, r), 0);
}

static int locked(const int *p)
{
    pthread_mutex_lock(&S->mu);
    int v = *p;
    pthread_mutex_unlock(&S->mu);
    return v;
}

/* Waits up to 3 s for the stub's |*p| to reach |want|. */
static bool wait_count(const int *p, int want)
{
    for (int i = 0; i < 3000 && locked(p) < want; i++)
        usleep(1000);
    return locked(p) >= want;
}

static bool fin_seen(void)
{
    pthread_mutex_lock(&S->mu);
    bool v = S->join_fin;
    pthread_mutex_unlock(&S->mu);
    return v;
}

/* ---- client helpers --------------------------------------------------------------- */

static char addr[64];

static fx_client *connect_stub(void)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", fx_quic_endpoint_port(S->ep));
    o.server = addr;
    o.insecure = true;
    o.connect_timeout_ms = 3000;
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), 0);
    return c;
}

static fx_group *join(fx_client *c, int ack_wait_ms)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = "default";
    o.stream = "orders";
    o.group = "billing";
    o.ack_wait_ms = ack_wait_ms;
    fx_start st = {.kind = FX_START_EARLIEST};
    o.create = &st;
    fx_group *g = NULL;
    assert_int_equal(fx_group_join(&g, c, &o), 0);
    return g;
}

static void finish(fx_client *c)
{
    assert_int_equal(fx_client_close(c, 2000), 0);
    stub_stop();
}

static void expect_msg(fx_group *g, uint64_t off, uint32_t attempt, uint64_t skipped)
{
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 3000), 0);
    assert_int_equal(m.offset, off);
    assert_int_equal(m.attempt, attempt);
    assert_int_equal(m.skipped, skipped);
    char want[32];
    int n = snprintf(want, sizeof(want), "r%llu", (unsigned long long)off);
    assert_int_equal(m.len, (size_t)n);
    assert_memory_equal(m.payload, want, (size_t)n);
}

/* Holds the client's loop until |*go| is set: what user threads do
 * meanwhile waits for one loop turn. */
static void hold_loop(void *u)
{
    atomic_bool *go = u;
    while (!atomic_load(go))
        usleep(500);
}

/* ---- members --------------------------------------------------------------------------- */

static void test_join_sends_group_join_with_the_options(void **state)
{
    (void)state;
    stub_start(0x803F);
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    pthread_mutex_lock(&S->mu);
    json_t *o = S->join;
    assert_string_equal(json_string_value(json_object_get(o, "group")), "billing");
    assert_string_equal(json_string_value(json_object_get(o, "namespace")), "default");
    assert_string_equal(json_string_value(json_object_get(o, "stream")), "orders");
    assert_string_equal(json_string_value(json_object_get(o, "tenant_id")), "t1");
    assert_string_equal(json_string_value(json_object_get(o, "create")), "all");
    const char *member = json_string_value(json_object_get(o, "member"));
    assert_non_null(member);
    assert_true(strlen(member) > 2); /* generated */
    assert_null(json_object_get(o, "window"));
    pthread_mutex_unlock(&S->mu);
    fx_member_stats st;
    assert_int_equal(fx_group_stats(g, &st), 0);
    assert_int_equal(st.received, 0);
    fx_group_leave(g);
    finish(c);
}

static void test_join_refused_when_the_broker_does_not_serve_groups(void **state)
{
    (void)state;
    stub_start(0x3F);
    fx_client *c = connect_stub();
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = "default";
    o.stream = "orders";
    o.group = "billing";
    fx_group *g = (fx_group *)1;
    assert_int_equal(fx_group_join(&g, c, &o), FX_EPROTO);
    assert_null(g);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "does not serve consumer groups"));
    finish(c);
}

static void test_join_error_from_the_broker_is_mapped(void **state)
{
    (void)state;
    stub_start(0x803F);
    S->refuse = "stream not found: default/orders";
    fx_client *c = connect_stub();
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = "default";
    o.stream = "orders";
    o.group = "billing";
    fx_group *g = NULL;
    assert_int_equal(fx_group_join(&g, c, &o), FX_ENOSTREAM);
    assert_null(g);
    o.group = NULL;
    assert_int_equal(fx_group_join(&g, c, &o), -EINVAL);
    finish(c);
}

static void test_next_returns_runs_in_order_with_attempt_and_skipped(void **state)
{
    (void)state;
    stub_start(0x803F);
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    srun runs[] = {{0, 1, 3, 0}, {5, 2, 2, 2}};
    stub_send(runs, 2);
    expect_msg(g, 0, 1, 0);
    expect_msg(g, 1, 1, 0);
    expect_msg(g, 2, 1, 0);
    expect_msg(g, 5, 2, 2);
    expect_msg(g, 6, 2, 0);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 0), FX_ETIMEDOUT);
    fx_member_stats st;
    fx_group_stats(g, &st);
    assert_int_equal(st.received, 5);
    assert_int_equal(st.delivered, 5);
    assert_int_equal(st.expired, 0);
    fx_group_leave(g);
    finish(c);
}

static void test_ops_made_in_one_loop_turn_travel_in_one_frame(void **state)
{
    (void)state;
    stub_start(0x803F);
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    atomic_bool go;
    atomic_init(&go, false);
    assert_int_equal(fx_loop_call(c->loop, hold_loop, &go), 0);
    for (uint64_t off = 0; off < 50; off++)
        assert_int_equal(fx_group_ack(g, off), 0);
    assert_int_equal(fx_group_nak(g, 60, 1, -1), 0);
    assert_int_equal(fx_group_in_progress(g, 61, 1), 0);
    assert_int_equal(fx_group_in_progress(g, 61, 1), 0);
    assert_int_equal(fx_group_term(g, 62, 3, "poison"), 0);
    atomic_store(&go, true);
    assert_true(wait_count(&S->nframes, 1));
    usleep(50000); /* no second frame follows */
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nframes, 1);
    assert_int_equal(S->frame_nops[0], 4);
    assert_int_equal(S->frame_req[0], 0);
    assert_int_equal(S->ops[0].kind, FX_GROUP_OP_ACK);
    assert_int_equal(S->ops[0].first, 0);
    assert_int_equal(S->ops[0].count, 50);
    assert_int_equal(S->ops[1].kind, FX_GROUP_OP_NAK);
    assert_int_equal(S->ops[1].arg, FX_GROUP_NAK_BACKOFF);
    assert_int_equal(S->ops[2].kind, FX_GROUP_OP_IN_PROGRESS);
    assert_int_equal(S->ops[3].kind, FX_GROUP_OP_TERM);
    assert_int_equal(S->ops[3].attempt, 3);
    pthread_mutex_unlock(&S->mu);
    fx_member_stats st;
    fx_group_stats(g, &st);
    assert_int_equal(st.frames_sent, 1);
    assert_int_equal(st.ops_sent, 4);
    assert_int_equal(fx_group_term(g, 63, 1, "\xff"), -EINVAL);
    fx_group_leave(g);
    finish(c);
}

static void test_expired_buffered_record_is_released_not_returned(void **state)
{
    (void)state;
    stub_start(0x803F);
    S->ack_wait_ms = 40;
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    srun runs[] = {{10, 1, 2, 0}};
    stub_send(runs, 1);
    fx_member_stats st;
    for (int i = 0; i < 3000; i++) {
        fx_group_stats(g, &st);
        if (st.received == 2)
            break;
        usleep(1000);
    }
    assert_int_equal(st.received, 2);
    usleep(80000); /* past arrival + 40 ms */
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 0), FX_ETIMEDOUT);
    fx_group_stats(g, &st);
    assert_int_equal(st.expired, 2);
    assert_int_equal(st.delivered, 0);
    assert_int_equal(fxc_grp_expired(g), 2);
    assert_true(wait_count(&S->nops, 2));
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->ops[0].kind, FX_GROUP_OP_RELEASE);
    assert_int_equal(S->ops[0].first, 10);
    assert_int_equal(S->ops[0].attempt, 1);
    assert_int_equal(S->ops[1].kind, FX_GROUP_OP_RELEASE);
    assert_int_equal(S->ops[1].first, 11);
    pthread_mutex_unlock(&S->mu);
    fx_group_leave(g);
    finish(c);
}

static void test_leave_releases_untaken_records_and_finishes_the_stream(void **state)
{
    (void)state;
    stub_start(0x803F);
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    srun runs[] = {{0, 1, 2, 0}, {7, 4, 1, 0}};
    stub_send(runs, 2);
    expect_msg(g, 0, 1, 0);
    fx_member_stats st;
    for (int i = 0; i < 3000; i++) {
        fx_group_stats(g, &st);
        if (st.received == 3)
            break;
        usleep(1000);
    }
    assert_int_equal(st.received, 3);
    assert_int_equal(fx_group_ack(g, 0), 0);
    fx_group_leave(g);
    for (int i = 0; i < 3000 && !fin_seen(); i++)
        usleep(1000);
    pthread_mutex_lock(&S->mu);
    assert_true(S->join_fin);
    /* ack 0, then release 1 and 7 (its attempt kept), then leave; all before
     * the FIN */
    assert_int_equal(S->nops, 4);
    assert_int_equal(S->ops[3].kind, FX_GROUP_OP_LEAVE);
    int rel = 0;
    for (int i = 0; i < 3; i++) {
        if (S->ops[i].kind == FX_GROUP_OP_RELEASE) {
            assert_true(S->ops[i].first == 1 || S->ops[i].first == 7);
            assert_int_equal(S->ops[i].attempt, S->ops[i].first == 7 ? 4 : 1);
            rel++;
        } else {
            assert_int_equal(S->ops[i].kind, FX_GROUP_OP_ACK);
            assert_int_equal(S->ops[i].first, 0);
        }
    }
    assert_int_equal(rel, 2);
    pthread_mutex_unlock(&S->mu);
    finish(c);
}

static void test_ack_sync_waits_for_its_group_acked_and_times_out(void **state)
{
    (void)state;
    stub_start(0x803F);
    S->hold_acked = true;
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    assert_int_equal(fx_group_ack(g, 3), 0);
    assert_int_equal(fx_group_ack_sync(g, 100), FX_ETIMEDOUT);
    assert_true(wait_count(&S->nframes, 1));
    pthread_mutex_lock(&S->mu);
    /* The ack travelled with the request (or just before it). */
    assert_true(S->frame_req[S->nframes - 1] != 0);
    assert_int_equal(S->nops, 1);
    S->hold_acked = false;
    int before = S->nframes;
    pthread_mutex_unlock(&S->mu);
    /* Nothing pending: a frame of zero ops carries the request. */
    assert_int_equal(fx_group_ack_sync(g, 3000), 0);
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nframes, before + 1);
    assert_int_equal(S->frame_nops[before], 0);
    assert_true(S->frame_req[before] > S->frame_req[before - 1]);
    assert_int_equal(S->answered, 1);
    pthread_mutex_unlock(&S->mu);
    fx_group_leave(g);
    finish(c);
}

static void test_calls_after_client_close_return_closed(void **state)
{
    (void)state;
    stub_start(0x803F);
    fx_client *c = connect_stub();
    fx_group *g = join(c, 0);
    assert_int_equal(fx_client_close(c, 2000), 0);
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, 100), FX_ECLOSED);
    assert_int_equal(fx_group_ack(g, 1), FX_ECLOSED);
    assert_int_equal(fx_group_ack_sync(g, 100), FX_ECLOSED);
    fx_group_leave(g);
    stub_stop();
}

#define CASE(f) cmocka_unit_test_teardown(f, stub_dir_teardown)
static const struct CMUnitTest tests[] = {
    CASE(test_contiguous_acks_coalesce_into_one_range_op),
    CASE(test_op_queue_is_bounded_and_merges_when_full),
    CASE(test_join_sends_group_join_with_the_options),
    CASE(test_join_refused_when_the_broker_does_not_serve_groups),
    CASE(test_join_error_from_the_broker_is_mapped),
    CASE(test_next_returns_runs_in_order_with_attempt_and_skipped),
    CASE(test_ops_made_in_one_loop_turn_travel_in_one_frame),
    CASE(test_expired_buffered_record_is_released_not_returned),
    CASE(test_leave_releases_untaken_records_and_finishes_the_stream),
    CASE(test_ack_sync_waits_for_its_group_acked_and_times_out),
    CASE(test_calls_after_client_close_return_closed),
};
FX_TEST_MAIN(tests)
