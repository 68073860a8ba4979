/* libfelix tests against a scripted stub broker built on src/quic and
 * src/wire, running on its own loop thread on 127.0.0.1 port 0. The stub
 * answers auth, publishes (optionally holding acks to answer them out of
 * order) and subscribes, and sends event batches the test asks for.
 * Timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"
#include "client/client.h"
#include "felix/felix.h"
#include "fx_test.h"
#include "quic/quic.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

/* ---- stub broker ------------------------------------------------------------- */

#define NS 64

typedef struct sst {
    fx_frame_decoder dec;
    bool used, authed;
} sst;

typedef struct stub {
    fx_loop *loop;
    fx_quic_endpoint *ep;
    char dir[64];
    pthread_mutex_t mu;
    /* script */
    bool legacy;              /* answer auth with ok */
    int hold_acks;            /* answer acked publishes in reverse once this many wait */
    const char *pub_error;    /* answer acked publishes with this error */
    bool hello_first;         /* open the event stream before `subscribed` */
    bool cursor_error;        /* answer subscribe with a cursor error */
    uint64_t sub_id;          /* id to assign */
    bool no_answer;           /* never answer acked publishes */
    const char *fail_payload; /* answer an acked frame holding this payload with pub_error */
    bool hold_credit;         /* consume nothing until stub_release_credit */
    /* observed (mu) */
    fx_quic_conn *conn;
    sst st[NS];
    int unacked_frames, acked_binary, acked_json;
    uint8_t first_frame[256];
    size_t first_len;
    int64_t uni;
    bool uni_reset;
    uint64_t held_ids[64];
    uint16_t held_kind[64];
    int64_t held_sid[64];
    int nheld;
    /* every binary publish frame: its message count; every message, in
     * arrival order (first 15 bytes) */
    int nframes;
    uint32_t frame_msgs[4096];
    int nlog;
    char log[8192][16];
    size_t held_bytes[NS]; /* hold_credit: bytes not consumed yet */
    size_t max_body;       /* largest binary publish frame body seen */
    int bogus_answers;     /* before answering an acked publish, answer this many unknown ids */
    bool closed_by_peer;   /* the client closed the connection */
    uint64_t close_code;   /* with this application code */
} stub;

/* Receive window per stream of the next stub (0: the transport's). */
static uint32_t stub_window;

static stub *S;

static void ssend(fx_quic_conn *c, int64_t sid, const void *p, size_t n, bool fin)
{
    fx_buf *b = NULL;
    assert_int_equal(fx_buf_new_copy(&b, p, n), 0);
    assert_int_equal(fx_quic_stream_send(c, sid, b, 0, n, fin), 0);
    fx_buf_unref(b);
}

static void smsg(fx_quic_conn *c, int64_t sid, const fx_msg *m, bool fin)
{
    uint8_t *f = NULL;
    size_t n = 0;
    assert_int_equal(fx_msg_encode_frame(m, &f, &n), 0);
    ssend(c, sid, f, n, fin);
    free(f);
}

static void answer_pub(fx_quic_conn *c, int64_t sid, uint64_t id, bool binary)
{
    if (binary) {
        fx_wire_publish_ack a = {.ok = S->pub_error == NULL, .request_id = id};
        if (S->pub_error != NULL)
            a.message = (fx_wire_slice){(const uint8_t *)S->pub_error, strlen(S->pub_error)};
        uint8_t f[700];
        ssize_t n = fx_wire_publish_ack_encode(&a, f, sizeof(f));
        assert_true(n > 0);
        ssend(c, sid, f, (size_t)n, false);
        return;
    }
    fx_msg m;
    if (S->pub_error != NULL)
        fx_msg_init_publish_error(&m, id, S->pub_error);
    else
        fx_msg_init_publish_ok(&m, id);
    smsg(c, sid, &m, false);
}

static void hold_or_answer(fx_quic_conn *c, int64_t sid, uint64_t id, bool binary)
{
    if (S->no_answer)
        return;
    for (int i = 0; i < S->bogus_answers; i++)
        answer_pub(c, sid, id + 100000 + (uint64_t)i, binary);
    if (S->hold_acks == 0) {
        answer_pub(c, sid, id, binary);
        return;
    }
    S->held_ids[S->nheld] = id;
    S->held_kind[S->nheld] = binary;
    S->held_sid[S->nheld++] = sid;
    if (S->nheld < S->hold_acks)
        return;
    for (int i = S->nheld - 1; i >= 0; i--)
        answer_pub(c, S->held_sid[i], S->held_ids[i], S->held_kind[i]);
    S->nheld = 0;
}

static void open_events(fx_quic_conn *c)
{
    assert_int_equal(fx_quic_conn_open_uni(c, NULL, &S->uni), 0);
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, S->sub_id);
    smsg(c, S->uni, &m, false);
}

static void on_subscribe(fx_quic_conn *c, int64_t sid, const fx_msg *m)
{
    fx_msg r;
    if (S->cursor_error && m->start.kind == FX_MSG_START_OFFSET) {
        fx_msg_init_subscribe_cursor_error(&r, FX_MSG_CURSOR_IN_FUTURE, m->start.offset, 3);
        smsg(c, sid, &r, true);
        return;
    }
    if (S->hello_first)
        open_events(c);
    fx_msg_init_subscribed(&r, S->sub_id);
    smsg(c, sid, &r, true);
    if (!S->hello_first)
        open_events(c);
}

static void on_json(fx_quic_conn *c, int64_t sid, sst *t, const fx_frame *f)
{
    fx_msg m;
    assert_int_equal(fx_msg_decode(&m, f->body, f->len, NULL), 0);
    fx_msg r;
    if (m.type == FX_MSG_AUTH) {
        t->authed = true;
        if (S->legacy)
            fx_msg_init_ok(&r);
        else
            fx_msg_init_auth_ok(&r, 0x3F);
        smsg(c, sid, &r, false);
    } else if (m.type == FX_MSG_PUBLISH || m.type == FX_MSG_PUBLISH_BATCH) {
        S->acked_json++;
        hold_or_answer(c, sid, m.request_id, false);
    } else if (m.type == FX_MSG_SUBSCRIBE) {
        on_subscribe(c, sid, &m);
    }
    fx_msg_deinit(&m);
}

/* Logs the messages of a binary publish frame; true if one of them is
 * S->fail_payload. */
static bool log_batch(const fx_frame *f)
{
    fx_wire_publish_batch b;
    assert_int_equal(fx_wire_publish_batch_decode(f->hdr.flags, f->body, f->len, &b, NULL), 0);
    bool bad = false;
    if (S->nframes < 4096)
        S->frame_msgs[S->nframes++] = b.count;
    if (f->len > S->max_body)
        S->max_body = f->len;
    for (uint32_t i = 0; i < b.count; i++) {
        size_t n = b.payloads[i].len < 15 ? b.payloads[i].len : 15;
        if (S->nlog < 8192) {
            memcpy(S->log[S->nlog], b.payloads[i].ptr, n);
            S->log[S->nlog++][n] = '\0';
        }
        bad |= S->fail_payload != NULL && b.payloads[i].len == strlen(S->fail_payload) &&
               memcmp(b.payloads[i].ptr, S->fail_payload, b.payloads[i].len) == 0;
    }
    fx_wire_publish_batch_deinit(&b);
    return bad;
}

static void on_frame(fx_quic_conn *c, int64_t sid, sst *t, const fx_frame *f)
{
    bool bad = false;
    if (f->kind == FX_BODY_PUBLISH_BATCH || f->kind == FX_BODY_PUBLISH_BATCH_ACKED)
        bad = log_batch(f);
    if (f->kind == FX_BODY_JSON) {
        on_json(c, sid, t, f);
    } else if (f->kind == FX_BODY_PUBLISH_BATCH) {
        if (S->unacked_frames++ == 0 && f->len + 12 <= sizeof(S->first_frame)) {
            fx_frame_header_put(S->first_frame, f->hdr.flags, (uint32_t)f->len);
            memcpy(S->first_frame + 12, f->body, f->len);
            S->first_len = f->len + 12;
        }
    } else if (f->kind == FX_BODY_PUBLISH_BATCH_ACKED) {
        uint64_t id;
        fx_wire_ack ack;
        assert_int_equal(fx_wire_publish_acked_prefix_decode(f->body, f->len, &id, &ack, NULL), 0);
        S->acked_binary++;
        if (S->fail_payload != NULL) {
            const char *keep = S->pub_error;
            if (!bad)
                S->pub_error = NULL;
            answer_pub(c, sid, id, true);
            S->pub_error = keep;
            return;
        }
        hold_or_answer(c, sid, id, true);
    }
}

static void s_on_data(fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t n, bool fin,
                      void *user, void *su)
{
    if ((sid & 2) != 0 || (sid >> 2) >= NS) {
        fx_quic_stream_consume(c, sid, n);
        return;
    }
    pthread_mutex_lock(&S->mu);
    if (S->hold_credit)
        S->held_bytes[sid >> 2] += n;
    else
        fx_quic_stream_consume(c, sid, n);
    sst *t = &S->st[sid >> 2];
    if (!t->used) {
        t->used = true;
        fx_frame_decoder_init(&t->dec, 16u << 20);
    }
    while (n > 0) {
        size_t used = 0;
        fx_frame f;
        int rv = fx_frame_decoder_feed(&t->dec, d, n, &used, &f, NULL);
        assert_true(rv >= 0);
        d += used;
        n -= used;
        if (rv == FX_FRAME_READY)
            on_frame(c, sid, t, &f);
    }
    /* Like the broker: answer the client's FIN with ours once its frames are
     * handled (fx_client_close waits for it). */
    if (fin)
        fx_quic_stream_shutdown(c, sid);
    pthread_mutex_unlock(&S->mu);
}

static void s_on_conn_new(fx_quic_conn *c, void *user)
{
    pthread_mutex_lock(&S->mu);
    S->conn = c;
    pthread_mutex_unlock(&S->mu);
}

static void s_on_stream_close(fx_quic_conn *c, int64_t sid, bool reset, uint64_t code, void *user,
                              void *su)
{
    pthread_mutex_lock(&S->mu);
    if (sid == S->uni && reset)
        S->uni_reset = true;
    pthread_mutex_unlock(&S->mu);
}

static void s_on_conn_closed(fx_quic_conn *c, const fx_quic_close_info *i, void *user)
{
    pthread_mutex_lock(&S->mu);
    if (S->conn == c && i->remote && i->app) {
        S->closed_by_peer = true;
        S->close_code = i->code;
    }
    if (S->conn == c)
        S->conn = NULL;
    pthread_mutex_unlock(&S->mu);
}

static const fx_quic_callbacks SCB = {.on_conn_new = s_on_conn_new,
                                      .on_stream_data = s_on_data,
                                      .on_stream_close = s_on_stream_close,
                                      .on_conn_closed = s_on_conn_closed};

/* The stub's state directory (certificate, quic-reset.key), kept apart from
 * |S| so the per-test teardown can still remove it after a failed test
 * left the stub running. "" when there is none. */
static char stub_dir[64];

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes the stub's state directory and everything in it, if any. */
static void stub_dir_remove(void)
{
    if (stub_dir[0] != '\0')
        nftw(stub_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    stub_dir[0] = '\0';
}

/* Every case's teardown: cmocka runs it after a failed case too, whose
 * stub_stop never ran. */
static int stub_dir_teardown(void **state)
{
    (void)state;
    stub_dir_remove();
    return 0;
}

/* Starts the stub server; with |spec| on a certificate generated for it
 * (else the endpoint's own, for localhost and 127.0.0.1). */
static void stub_start_with(const fx_quic_cert_spec *spec)
{
    fx_log_set_level(FX_LOG_ERROR);
    S = calloc(1, sizeof(*S));
    assert_non_null(S);
    pthread_mutex_init(&S->mu, NULL);
    S->sub_id = 77;
    S->uni = -1;
    snprintf(S->dir, sizeof(S->dir), "/tmp/fxcliXXXXXX");
    assert_non_null(mkdtemp(S->dir));
    snprintf(stub_dir, sizeof(stub_dir), "%s", S->dir);
    assert_int_equal(fx_loop_new(&S->loop, &(fx_loop_opts){.name = "stub", .cpu = -1}), 0);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = S->dir;
    o.udp_send_buffer = o.udp_recv_buffer = 1 << 20;
    char cert[128], key[128];
    if (spec != NULL) {
        snprintf(cert, sizeof(cert), "%s/tls-cert.pem", S->dir);
        snprintf(key, sizeof(key), "%s/tls-key.pem", S->dir);
        assert_int_equal(fx_quic_cert_generate(cert, key, spec), 0);
        o.cert_file = cert;
        o.key_file = key;
    }
    if (stub_window != 0)
        o.stream_window = o.max_stream_window = stub_window;
    assert_int_equal(fx_quic_server_new(&S->ep, S->loop, "127.0.0.1", 0, &o, &SCB, NULL), 0);
    assert_int_equal(fx_loop_start(S->loop), 0);
}

static void stub_start(void)
{
    stub_start_with(NULL);
}

static void free_ep(void *u)
{
    fx_quic_endpoint_free(S->ep);
}

static void stub_stop(void)
{
    assert_int_equal(fx_loop_call(S->loop, free_ep, NULL), 0);
    fx_loop_stop(S->loop);
    fx_loop_free(S->loop);
    for (int i = 0; i < NS; i++)
        if (S->st[i].used)
            fx_frame_decoder_deinit(&S->st[i].dec);
    stub_dir_remove();
    pthread_mutex_destroy(&S->mu);
    free(S);
    S = NULL;
}

/* Sends |n| one-byte-tagged events with offsets from |base| on the event
 * stream, as one shared batch per event. */
typedef struct sendev {
    uint64_t base;
    int n;
    size_t size;
} sendev;

static void send_events_task(void *u)
{
    sendev *e = u;
    pthread_mutex_lock(&S->mu);
    uint8_t *pl = calloc(1, e->size + 1);
    for (int i = 0; i < e->n; i++) {
        uint64_t off = e->base + (uint64_t)i;
        memcpy(pl, &off, e->size < 8 ? e->size : 8);
        fx_wire_event_batch b = {
            .shared = true, .has_offsets = true, .base_offset = off, .count = 1};
        b.payloads = b.inline_payloads;
        b.payloads[0] = (fx_wire_slice){pl, e->size};
        uint8_t *f = malloc(e->size + 64);
        ssize_t n = fx_wire_event_batch_encode(&b, f, e->size + 64);
        assert_true(n > 0);
        ssend(S->conn, S->uni, f, (size_t)n, false);
        free(f);
    }
    free(pl);
    pthread_mutex_unlock(&S->mu);
    free(e);
}

static void stub_send_events(uint64_t base, int n, size_t size)
{
    sendev *e = malloc(sizeof(*e));
    *e = (sendev){base, n, size < 8 ? 8 : size};
    assert_int_equal(fx_loop_call(S->loop, send_events_task, e), 0);
}

static void release_credit_task(void *u)
{
    (void)u;
    pthread_mutex_lock(&S->mu);
    S->hold_credit = false;
    for (int i = 0; i < NS; i++) {
        if (S->held_bytes[i] > 0 && S->conn != NULL)
            fx_quic_stream_consume(S->conn, (int64_t)i << 2, S->held_bytes[i]);
        S->held_bytes[i] = 0;
    }
    pthread_mutex_unlock(&S->mu);
}

/* Grants the credit held back since hold_credit was set, and stops holding. */
static void stub_release_credit(void)
{
    assert_int_equal(fx_loop_call(S->loop, release_credit_task, NULL), 0);
}

typedef struct unacked_q {
    uint64_t n;
    atomic_bool done;
} unacked_q;

static void unacked_task(void *u)
{
    unacked_q *q = u;
    pthread_mutex_lock(&S->mu);
    q->n = S->conn != NULL ? fx_quic_conn_unacked(S->conn) : 0;
    pthread_mutex_unlock(&S->mu);
    atomic_store(&q->done, true);
}

/* The stub connection's unacked bytes, read on its loop (which owns them). */
static uint64_t stub_unacked(void)
{
    unacked_q q = {.n = 0};
    atomic_init(&q.done, false);
    assert_int_equal(fx_loop_call(S->loop, unacked_task, &q), 0);
    while (!atomic_load(&q.done))
        usleep(200);
    return q.n;
}

/* ---- client helpers ------------------------------------------------------------ */

static char addr[64];

static void opts(fx_client_opts *o)
{
    fx_client_opts_init(o);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", fx_quic_endpoint_port(S->ep));
    o->server = addr;
    o->insecure = true;
    o->connect_timeout_ms = 3000;
}

static fx_client *connect_stub(fx_client_opts *o)
{
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, o);
    assert_int_equal(rv, 0);
    return c;
}

static fx_client *start_default(void)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    return connect_stub(&o);
}

static void finish(fx_client *c)
{
    assert_int_equal(fx_client_close(c, 2000), 0);
    stub_stop();
}

/* Reads a stub field under its lock. */
static int locked(const int *p)
{
    pthread_mutex_lock(&S->mu);
    int v = *p;
    pthread_mutex_unlock(&S->mu);
    return v;
}
#define LOCKED(field) locked(&(field))

static bool wait_until(bool (*pred)(void), int ms)
{
    for (int i = 0; i < ms; i++) {
        if (pred())
            return true;
        usleep(1000);
    }
    return pred();
}

/* ---- options ------------------------------------------------------------------- */

static void test_opts_defaults_match_api_doc(void **state)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    assert_int_equal(o.size, sizeof(o));
    assert_string_equal(o.server, "127.0.0.1:5000");
    assert_null(o.server_name); /* the host part of o.server */
    assert_string_equal(o.tenant, "t1");
    assert_int_equal(o.publish_conn_pool, 4);
    assert_int_equal(o.publish_streams_per_conn, 2);
    assert_int_equal(o.publish_queue_depth, 64);
    assert_int_equal(o.publish_inflight_bytes, 4u << 20);
    assert_int_equal(o.publish_sharding, FX_SHARDING_HASH_STREAM);
    assert_int_equal(o.event_conn_pool, 1);
    assert_int_equal(o.sub_queue_capacity, 256);
    assert_int_equal(o.sub_queue_policy, FX_POLICY_DROP_NEW);
    assert_int_equal(o.max_frame_bytes, 16u << 20);
    assert_int_equal(o.connect_timeout_ms, 5000);
    assert_int_equal(o.idle_timeout_ms, 30000);
    assert_int_equal(o.keepalive_ms, 10000);
    assert_true(o.reconnect);
    assert_int_equal(o.reconnect_initial_ms, 50);
    assert_int_equal(o.reconnect_max_ms, 5000);
}

static void test_opts_from_env_rejects_bad_value_naming_it(void **state)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    setenv("FELIX_PUB_CONN_POOL", "3", 1);
    setenv("FELIX_CLIENT_SUB_QUEUE_POLICY", "block", 1);
    assert_int_equal(fx_client_opts_from_env(&o), 0);
    assert_int_equal(o.publish_conn_pool, 3);
    assert_int_equal(o.sub_queue_policy, FX_POLICY_BLOCK);
    setenv("FELIX_PUBLISH_QUEUE_DEPTH", "12x", 1);
    assert_int_equal(fx_client_opts_from_env(&o), FX_ECONFIG);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "FELIX_PUBLISH_QUEUE_DEPTH"));
    assert_int_equal(o.publish_queue_depth, 64);
    unsetenv("FELIX_PUBLISH_QUEUE_DEPTH");
    setenv("FELIX_PUB_SHARDING", "random", 1);
    assert_int_equal(fx_client_opts_from_env(&o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "FELIX_PUB_SHARDING"));
    unsetenv("FELIX_PUB_SHARDING");
    unsetenv("FELIX_PUB_CONN_POOL");
    unsetenv("FELIX_CLIENT_SUB_QUEUE_POLICY");
}

static void assert_host(const char *server, const char *want)
{
    char host[64];
    assert_int_equal(fxc_client_server_host(server, host, sizeof(host)), 0);
    assert_string_equal(host, want);
}

/* With no server_name the certificate is checked against the host of
 * |server|, here an IP address: a certificate that names 127.0.0.1 but not
 * localhost verifies, and naming localhost explicitly then fails. */
static void test_server_name_defaults_to_the_host_of_server(void **state)
{
    assert_host("127.0.0.1:5000", "127.0.0.1");
    assert_host("[::1]:5000", "::1");
    assert_host("broker.example.com:7000", "broker.example.com");
    char host[8];
    assert_int_equal(fxc_client_server_host("no-port", host, sizeof(host)), FX_ECONFIG);
    assert_int_equal(fxc_client_server_host("much-too-long-a-name:1", host, sizeof(host)),
                     FX_ECONFIG);

    time_t now = time(NULL);
    fx_quic_cert_spec spec = {.not_before = (int64_t)now - 3600,
                              .not_after = (int64_t)now + 86400,
                              .dns_name = "broker.invalid",
                              .ip_address = "127.0.0.1"};
    stub_start_with(&spec);
    char ca[128];
    snprintf(ca, sizeof(ca), "%s/tls-cert.pem", S->dir);
    fx_client_opts o;
    opts(&o);
    o.insecure = false;
    o.ca_file = ca;
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), 0);
    assert_int_equal(fx_client_close(c, 2000), 0);
    o.server_name = "localhost";
    c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), FX_ETLS_NAME);
    assert_null(c);
    stub_stop();
}

/* A pin and a CA file would each decide alone: the combination is refused
 * before anything is sent, as is "insecure" with either. */
/* Subscriptions share the client's first connection; a larger event pool
 * would be accepted and not applied, so it is refused with the reason. */
static void test_event_conn_pool_above_one_refused(void **state)
{
    (void)state;
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = "127.0.0.1:9";
    o.insecure = true;
    o.event_conn_pool = 2;
    fx_client *c = NULL;
    char msg[256];
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    assert_null(c);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "event_conn_pool"));
}

static void test_pin_with_ca_or_insecure_refused(void **state)
{
    static const char pin[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = "127.0.0.1:9";
    o.pin_sha256 = pin;
    o.ca_file = "/etc/ssl/certs/ca-certificates.crt";
    fx_client *c = NULL;
    char msg[256];
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    assert_null(c);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "pin_sha256: cannot be combined with ca_file"));
    o.ca_file = NULL;
    o.insecure = true;
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "insecure: cannot be combined"));
    o.pin_sha256 = NULL;
    o.ca_file = "/etc/ssl/certs/ca-certificates.crt";
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    assert_null(c);
}

/* ---- connect --------------------------------------------------------------------- */

static void test_connect_fails_fast_on_wrong_pin(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.insecure = false;
    o.pin_sha256 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), FX_ETLS_PIN);
    assert_null(c);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "pin"));
    /* The right pin connects. */
    char pin[65];
    snprintf(pin, sizeof(pin), "%s", fx_quic_endpoint_fingerprint(S->ep));
    o.pin_sha256 = pin;
    assert_int_equal(fx_client_connect(&c, &o), 0);
    finish(c);
}

static void test_connect_to_nothing_times_out(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    stub_stop(); /* the port is now closed */
    o.connect_timeout_ms = 300;
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    assert_true(rv == FX_ETIMEDOUT || rv == -ECONNREFUSED);
    assert_null(c);
}

static bool legacy_json_seen(void)
{
    return LOCKED(S->acked_json) == 1;
}

static void test_legacy_ok_reply_means_flags_7(void **state)
{
    stub_start();
    S->legacy = true;
    fx_client_opts o;
    opts(&o);
    fx_client *c = connect_stub(&o);
    assert_int_equal(fx_publish(c, "default", "demo", "hi", 2, FX_ACK_PER_MESSAGE), 0);
    assert_true(legacy_json_seen());
    assert_int_equal(LOCKED(S->acked_binary), 0);
    finish(c);
}

/* ---- publish ---------------------------------------------------------------------- */

static bool one_unacked(void)
{
    return LOCKED(S->unacked_frames) >= 1;
}

static void test_unacked_publish_sends_binary_batch(void **state)
{
    fx_client *c = start_default();
    assert_int_equal(fx_publish(c, "default", "demo", "hello", 5, FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(c, 2000), 0);
    assert_true(wait_until(one_unacked, 2000));
    static const uint8_t want[] = {0x46, 0x4c, 0x58, 0x31, 0,   1,   0,   1,   0,   0,   0,
                                   0x20, 0,    2,    't',  '1', 0,   7,   'd', 'e', 'f', 'a',
                                   'u',  'l',  't',  0,    4,   'd', 'e', 'm', 'o', 0,   0,
                                   0,    1,    0,    0,    0,   5,   'h', 'e', 'l', 'l', 'o'};
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->first_len, sizeof(want));
    assert_memory_equal(S->first_frame, want, sizeof(want));
    pthread_mutex_unlock(&S->mu);
    finish(c);
}

static void test_publish_larger_than_budget_fails_at_once(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.publish_inflight_bytes = 1024;
    fx_client *c = connect_stub(&o);
    char big[2048] = {0};
    assert_int_equal(fx_publish(c, "default", "demo", big, sizeof(big), FX_ACK_NONE), FX_ETOOBIG);
    assert_int_equal(fx_publish(c, "default", "demo", big, 100, FX_ACK_NONE), 0);
    finish(c);
}

typedef struct acks {
    pthread_mutex_t mu;
    int done, fails;
    int order[8];
} acks;

typedef struct slot {
    acks *a;
    int i;
} slot;

static void on_ack_slot(void *user, int rv)
{
    slot *s = user;
    pthread_mutex_lock(&s->a->mu);
    s->a->order[s->a->done++] = rv == 0 ? s->i : -1;
    pthread_mutex_unlock(&s->a->mu);
}

static acks *A;
static bool all_acked(void)
{
    pthread_mutex_lock(&A->mu);
    bool d = A->done == 3;
    pthread_mutex_unlock(&A->mu);
    return d;
}

static void test_acked_publish_pairs_by_request_id_out_of_order(void **state)
{
    stub_start();
    S->hold_acks = 3; /* answered in reverse order */
    fx_client_opts o;
    opts(&o);
    o.publish_coalesce = false; /* three frames, three request ids */
    fx_client *c = connect_stub(&o);
    acks a = {.done = 0};
    pthread_mutex_init(&a.mu, NULL);
    A = &a;
    slot sl[3];
    for (int i = 0; i < 3; i++) {
        sl[i] = (slot){&a, i};
        assert_int_equal(
            fx_publish_async(c, "default", "demo", "x", 1, FX_ACK_PER_MESSAGE, on_ack_slot, &sl[i]),
            0);
    }
    assert_true(wait_until(all_acked, 3000));
    /* Reverse answers reach the right requests: 2, 1, 0, none failed. */
    assert_int_equal(a.order[0], 2);
    assert_int_equal(a.order[1], 1);
    assert_int_equal(a.order[2], 0);
    assert_int_equal(LOCKED(S->acked_binary), 3);
    assert_int_equal(fx_flush(c, 2000), 0);
    finish(c);
    pthread_mutex_destroy(&a.mu);
}

static void test_publish_error_surfaces_message(void **state)
{
    stub_start();
    S->pub_error = "stream not found: tenant=t1 namespace=default stream=nope";
    fx_client_opts o;
    opts(&o);
    fx_client *c = connect_stub(&o);
    assert_int_equal(fx_publish(c, "default", "nope", "x", 1, FX_ACK_PER_MESSAGE), FX_ENOSTREAM);
    char msg[256];
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "publish failed: stream not found"));
    S->pub_error = "forbidden";
    assert_int_equal(fx_publish(c, "default", "nope", "x", 1, FX_ACK_PER_BATCH), FX_EFORBIDDEN);
    finish(c);
}

static void test_publish_batch_acked_is_one_frame_one_answer(void **state)
{
    fx_client *c = start_default();
    fx_iov msgs[3] = {{"a", 1}, {"bb", 2}, {"ccc", 3}};
    assert_int_equal(fx_publish_batch(c, "default", "demo", msgs, 3, FX_ACK_PER_BATCH), 0);
    assert_int_equal(LOCKED(S->acked_binary), 1);
    assert_int_equal(fx_publish_batch(c, "default", "demo", msgs, 3, FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(c, 2000), 0);
    assert_true(wait_until(one_unacked, 2000));
    finish(c);
}

/* ---- subscribe ---------------------------------------------------------------------- */

static fx_subscription *sub_stub(fx_client *c)
{
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, "default", "demo", NULL), 0);
    return s;
}

static void expect_events(fx_subscription *s, uint64_t base, int n)
{
    for (int i = 0; i < n; i++) {
        fx_event ev;
        assert_int_equal(fx_subscription_next(s, &ev, 3000), 0);
        assert_true(ev.has_offset);
        assert_int_equal(ev.offset, base + (uint64_t)i);
        uint64_t v;
        memcpy(&v, ev.payload, 8);
        assert_int_equal(v, base + (uint64_t)i);
    }
}

static void test_subscribe_receives_events_in_order(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    stub_send_events(0, 50, 16);
    expect_events(s, 0, 50);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 0), FX_ETIMEDOUT);
    fx_sub_stats st;
    fx_subscription_stats(s, &st);
    assert_int_equal(st.received, 50);
    assert_int_equal(st.gaps, 0);
    fx_unsubscribe(s);
    finish(c);
}

static void test_subscribe_adopts_server_subscription_id(void **state)
{
    stub_start();
    S->sub_id = 4242;
    fx_client_opts o;
    opts(&o);
    fx_client *c = connect_stub(&o);
    fx_subscription *s = sub_stub(c);
    fx_sub_stats st;
    fx_subscription_stats(s, &st);
    assert_int_equal(st.subscription_id, 4242);
    stub_send_events(3, 2, 8);
    expect_events(s, 3, 2);
    fx_unsubscribe(s);
    finish(c);
}

static void test_event_stream_before_subscribed_reply_is_routed(void **state)
{
    stub_start();
    S->hello_first = true;
    fx_client_opts o;
    opts(&o);
    fx_client *c = connect_stub(&o);
    fx_subscription *s = sub_stub(c);
    stub_send_events(10, 5, 8);
    expect_events(s, 10, 5);
    fx_unsubscribe(s);
    finish(c);
}

static void test_gap_in_offsets_reported(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    stub_send_events(0, 2, 8);
    stub_send_events(7, 1, 8);
    expect_events(s, 0, 2);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 3000), 0);
    assert_int_equal(ev.offset, 7);
    assert_true(ev.flags & FX_EVENT_GAP);
    assert_int_equal(ev.gap, 5);
    fx_sub_stats st;
    fx_subscription_stats(s, &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.missed, 5);
    fx_unsubscribe(s);
    finish(c);
}

static void test_block_policy_withholds_credit(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.sub_queue_capacity = 4;
    o.stream_window_bytes = 64 * 1024;
    fx_client *c = connect_stub(&o);
    fx_subscription *s = sub_stub(c);
    const int n = 200; /* 200 x 4 KiB: far beyond 4 batches + a 64 KiB window */
    stub_send_events(0, n, 4096);
    usleep(300 * 1000);
    fx_sub_stats st;
    fx_subscription_stats(s, &st);
    assert_true(st.received < (uint64_t)n);
    assert_true(stub_unacked() > 0); /* the broker's sends stall */
    expect_events(s, 0, n);
    fx_subscription_stats(s, &st);
    assert_int_equal(st.received, n);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.gaps, 0);
    fx_unsubscribe(s);
    finish(c);
}

static fx_subscription *DS;
static bool all_received(void)
{
    fx_sub_stats st;
    fx_subscription_stats(DS, &st);
    return st.received == 20;
}

static void test_drop_new_policy_counts_drops(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.sub_queue_capacity = 4;
    fx_client *c = connect_stub(&o);
    fx_subscription *s = sub_stub(c);
    DS = s;
    stub_send_events(0, 20, 8);
    assert_true(wait_until(all_received, 3000));
    fx_sub_stats st;
    fx_subscription_stats(s, &st);
    assert_int_equal(st.dropped, 16);
    assert_int_equal(st.queue_depth, 4);
    expect_events(s, 0, 4);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 0), FX_ETIMEDOUT);
    fx_unsubscribe(s);
    finish(c);
}

typedef struct cbst {
    pthread_mutex_t mu;
    int n;
    pthread_t caller;
    bool other_thread;
    int publish_rv, flush_rv;
    fx_client *c;
} cbst;

static cbst CB;

static void on_event(void *user, const fx_event *ev)
{
    cbst *b = user;
    int prv = fx_publish(b->c, "default", "demo", "x", 1, FX_ACK_NONE);
    int frv = fx_flush(b->c, 100);
    pthread_mutex_lock(&b->mu);
    b->n++;
    b->other_thread = !pthread_equal(pthread_self(), b->caller);
    b->publish_rv = prv;
    b->flush_rv = frv;
    pthread_mutex_unlock(&b->mu);
}

static bool cb_done(void)
{
    pthread_mutex_lock(&CB.mu);
    bool d = CB.n == 3;
    pthread_mutex_unlock(&CB.mu);
    return d;
}

static void test_callback_runs_on_loop_and_blocking_call_returns_wouldblock(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    CB = (cbst){.caller = pthread_self(), .c = c};
    pthread_mutex_init(&CB.mu, NULL);
    assert_int_equal(fx_subscription_set_callback(s, on_event, &CB), 0);
    stub_send_events(0, 3, 8);
    assert_true(wait_until(cb_done, 3000));
    assert_true(CB.other_thread);
    assert_int_equal(CB.publish_rv, FX_EWOULDBLOCK_LOOP);
    assert_int_equal(CB.flush_rv, FX_EWOULDBLOCK_LOOP);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 0), -EINVAL);
    fx_unsubscribe(s);
    finish(c);
    pthread_mutex_destroy(&CB.mu);
}

typedef struct waiter {
    fx_subscription *s;
    int rv;
} waiter;

static void *blocked_next(void *u)
{
    waiter *w = u;
    fx_event ev;
    w->rv = fx_subscription_next(w->s, &ev, 10000);
    return NULL;
}

static void test_close_wakes_blocked_next_with_closed(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    waiter w = {.s = s, .rv = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blocked_next, &w), 0);
    usleep(50 * 1000);
    assert_int_equal(fx_client_close(c, 1000), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.rv, FX_ECLOSED);
    fx_unsubscribe(s);
    stub_stop();
}

/* The reader sleeps between deliveries: each event, sent only once it is
 * asleep, wakes it well inside its 10 s bound. */
typedef struct sleeper {
    fx_subscription *s;
    atomic_int got;
    int rv;
    uint64_t max_wait_ns;
} sleeper;

static void *sleepy_reader(void *u)
{
    sleeper *r = u;
    for (int i = 0; i < 5; i++) {
        fx_event ev;
        uint64_t t0 = fx_now_ns();
        r->rv = fx_subscription_next(r->s, &ev, 10000);
        uint64_t d = fx_now_ns() - t0;
        if (d > r->max_wait_ns)
            r->max_wait_ns = d;
        if (r->rv != 0)
            break;
        uint64_t v;
        memcpy(&v, ev.payload, 8);
        if (v != (uint64_t)i) {
            r->rv = -1000 - i;
            break;
        }
        atomic_fetch_add(&r->got, 1);
    }
    return NULL;
}

static void test_blocked_next_is_woken_by_each_delivery(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    sleeper r = {.s = s, .rv = 1};
    atomic_init(&r.got, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sleepy_reader, &r), 0);
    for (int i = 0; i < 5; i++) {
        usleep(30 * 1000); /* the reader is asleep in next() by now */
        stub_send_events((uint64_t)i, 1, 16);
        for (int k = 0; k < 3000 && atomic_load(&r.got) <= i; k++)
            usleep(1000);
        assert_int_equal(atomic_load(&r.got), i + 1);
    }
    pthread_join(th, NULL);
    assert_int_equal(r.rv, 0);
    assert_true(r.max_wait_ns < 5 * FX_NS_PER_S);
    fx_unsubscribe(s);
    finish(c);
}

static void test_blocked_next_times_out_at_its_bound(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    fx_event ev;
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_subscription_next(s, &ev, 150), FX_ETIMEDOUT);
    uint64_t d = fx_now_ns() - t0;
    assert_true(d >= 150 * FX_NS_PER_MS);
    assert_true(d < 5 * FX_NS_PER_S);
    fx_unsubscribe(s);
    finish(c);
}

static void test_cursor_error_is_typed(void **state)
{
    stub_start();
    S->cursor_error = true;
    fx_client_opts o;
    opts(&o);
    fx_client *c = connect_stub(&o);
    fx_subscription *s = NULL;
    fx_start st = {.kind = FX_START_OFFSET, .offset = 9999};
    assert_int_equal(fx_subscribe(&s, c, "default", "demo", &st), FX_ECURSOR_IN_FUTURE);
    assert_non_null(s);
    fx_sub_error e;
    assert_int_equal(fx_subscription_error(s, &e), 0);
    assert_int_equal(e.code, FX_ECURSOR_IN_FUTURE);
    assert_int_equal(e.requested, 9999);
    assert_int_equal(e.available, 3);
    fx_unsubscribe(s);
    finish(c);
}

static bool uni_reset(void)
{
    pthread_mutex_lock(&S->mu);
    bool v = S->uni_reset;
    pthread_mutex_unlock(&S->mu);
    return v;
}

static void test_unsubscribe_frees_and_stub_sees_reset(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    stub_send_events(0, 1, 8);
    expect_events(s, 0, 1);
    fx_unsubscribe(s);
    assert_true(wait_until(uni_reset, 3000));
    finish(c);
}

/* ---- natural batching ----------------------------------------------------------- */

static int NLOG_WANT;
static bool log_complete(void)
{
    return LOCKED(S->nlog) >= NLOG_WANT;
}

/* One worker, so every publish shares one stream and one queue. */
static void one_worker(fx_client_opts *o)
{
    o->publish_conn_pool = 1;
    o->publish_streams_per_conn = 1;
}

/* A 96 KiB publish against a 64 KiB receive window that the stub does not
 * give back: the stream is busy until stub_release_credit, and the 200
 * small publishes made meanwhile queue behind it. Returns the number of
 * frames the stub saw for all 201 messages, checking their order. */
static int publish_behind_busy_stream(bool coalesce)
{
    stub_window = 64u << 10;
    stub_start();
    stub_window = 0;
    S->hold_credit = true;
    fx_client_opts o;
    opts(&o);
    one_worker(&o);
    o.publish_coalesce = coalesce;
    fx_client *c = connect_stub(&o);
    static char big[96u << 10];
    memcpy(big, "big", 4);
    assert_int_equal(fx_publish(c, "default", "demo", big, sizeof(big), FX_ACK_NONE), 0);
    for (int i = 0; i < 200; i++) {
        char m[16];
        snprintf(m, sizeof(m), "m%03d", i);
        assert_int_equal(fx_publish(c, "default", "demo", m, strlen(m), FX_ACK_NONE), 0);
    }
    stub_release_credit();
    assert_int_equal(fx_flush(c, 5000), 0);
    NLOG_WANT = 201;
    assert_true(wait_until(log_complete, 5000));
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nlog, 201);
    assert_string_equal(S->log[0], "big");
    for (int i = 0; i < 200; i++) {
        char m[16];
        snprintf(m, sizeof(m), "m%03d", i);
        assert_string_equal(S->log[1 + i], m);
    }
    int frames = S->nframes;
    pthread_mutex_unlock(&S->mu);
    finish(c);
    return frames;
}

static void test_publishes_behind_a_busy_stream_merge_in_order(void **state)
{
    int frames = publish_behind_busy_stream(true);
    /* The big one alone, then the 200 small ones in very few frames
     * (one, unless the loop took some before the stream got busy). */
    assert_true(frames >= 2 && frames <= 4);
}

static void test_coalesce_off_sends_one_frame_per_publish(void **state)
{
    assert_int_equal(publish_behind_busy_stream(false), 201);
}

/* max_frame_bytes 8 KiB: messages queued behind a busy stream merge into
 * frames that never exceed it, in order. */
static void test_merged_frames_stay_within_max_frame_bytes(void **state)
{
    stub_window = 64u << 10;
    stub_start();
    stub_window = 0;
    S->hold_credit = true;
    fx_client_opts o;
    opts(&o);
    one_worker(&o);
    o.max_frame_bytes = 8192;
    fx_client *c = connect_stub(&o);
    enum { N = 300 };
    static char m[1000];
    for (int i = 0; i < N; i++) {
        memset(m, 'a' + i % 26, sizeof(m));
        snprintf(m, 16, "m%03d", i);
        assert_int_equal(fx_publish(c, "default", "demo", m, sizeof(m), FX_ACK_NONE), 0);
    }
    stub_release_credit();
    assert_int_equal(fx_flush(c, 5000), 0);
    NLOG_WANT = N;
    assert_true(wait_until(log_complete, 5000));
    pthread_mutex_lock(&S->mu);
    assert_true(S->max_body <= 8192);
    assert_true(S->nframes < N); /* some merged */
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof(want), "m%03d", i);
        assert_string_equal(S->log[i], want);
    }
    pthread_mutex_unlock(&S->mu);
    finish(c);
}

typedef struct res {
    pthread_mutex_t mu;
    int calls[32];
    int rv[32];
    char text[32][128];
    int done;
} res;

typedef struct rslot {
    res *r;
    int i;
} rslot;

static void on_res(void *user, int rv)
{
    rslot *s = user;
    pthread_mutex_lock(&s->r->mu);
    s->r->calls[s->i]++;
    s->r->rv[s->i] = rv;
    fx_client_last_error(NULL, s->r->text[s->i], sizeof(s->r->text[s->i]));
    s->r->done++;
    pthread_mutex_unlock(&s->r->mu);
}

static res *R;
static int R_WANT;
static bool res_done(void)
{
    pthread_mutex_lock(&R->mu);
    bool d = R->done >= R_WANT;
    pthread_mutex_unlock(&R->mu);
    return d;
}

/* Three groups of five acked publishes, each group made inside one linger
 * window so it travels as one frame; the stub refuses the frame holding
 * "bad". Every publish learns its own frame's answer, exactly once. */
static void test_merged_acked_publishes_each_learn_the_result_refusal_mid_stream(void **state)
{
    stub_start();
    S->pub_error = "stream not found";
    S->fail_payload = "bad";
    fx_client_opts o;
    opts(&o);
    one_worker(&o);
    o.publish_linger_us = 300000;
    fx_client *c = connect_stub(&o);
    res r = {.done = 0};
    pthread_mutex_init(&r.mu, NULL);
    R = &r;
    static const char *pay[15] = {"a0", "a1", "a2", "a3", "a4", "b0", "b1", "bad",
                                  "b3", "b4", "c0", "c1", "c2", "c3", "c4"};
    rslot sl[15];
    for (int g = 0; g < 3; g++) {
        for (int i = g * 5; i < g * 5 + 5; i++) {
            sl[i] = (rslot){&r, i};
            assert_int_equal(fx_publish_async(c, "default", "demo", pay[i], strlen(pay[i]),
                                              FX_ACK_PER_MESSAGE, on_res, &sl[i]),
                             0);
        }
        R_WANT = g * 5 + 5;
        assert_true(wait_until(res_done, 5000));
    }
    assert_int_equal(LOCKED(S->acked_binary), 3);
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nframes, 3);
    for (int f = 0; f < 3; f++)
        assert_int_equal(S->frame_msgs[f], 5);
    for (int i = 0; i < 15; i++)
        assert_string_equal(S->log[i], pay[i]);
    pthread_mutex_unlock(&S->mu);
    for (int i = 0; i < 15; i++) {
        assert_int_equal(r.calls[i], 1);
        if (i >= 5 && i < 10) {
            assert_int_equal(r.rv[i], FX_ENOSTREAM);
            assert_non_null(strstr(r.text[i], "publish failed: stream not found"));
        } else {
            assert_int_equal(r.rv[i], 0);
        }
    }
    finish(c);
    pthread_mutex_destroy(&r.mu);
}

static void test_linger_holds_a_lone_publish_for_its_bound_only(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.publish_linger_us = 200000;
    fx_client *c = connect_stub(&o);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish(c, "default", "demo", "x", 1, FX_ACK_PER_MESSAGE), 0);
    uint64_t took = fx_now_ns() - t0;
    /* Held the whole linger (nothing else came to fill the frame), then
     * sent: not held until some later event. */
    assert_true(took >= 200 * FX_NS_PER_MS);
    assert_true(took < 2000 * FX_NS_PER_MS);
    finish(c);
}

static void test_close_while_a_batch_is_built_sends_it_once(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    one_worker(&o);
    o.publish_linger_us = 1000000; /* the group would wait a second */
    fx_client *c = connect_stub(&o);
    res r = {.done = 0};
    pthread_mutex_init(&r.mu, NULL);
    rslot sl[20];
    char pay[20][16];
    for (int i = 0; i < 20; i++) {
        sl[i] = (rslot){&r, i};
        snprintf(pay[i], sizeof(pay[i]), "p%02d", i);
        assert_int_equal(fx_publish_async(c, "default", "demo", pay[i], strlen(pay[i]), FX_ACK_NONE,
                                          on_res, &sl[i]),
                         0);
    }
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_client_close(c, 5000), 0);
    /* The close sent the group at once instead of waiting for the linger. */
    assert_true(fx_now_ns() - t0 < 900 * FX_NS_PER_MS);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(r.calls[i], 1); /* QUIC acknowledged, reported once */
        assert_int_equal(r.rv[i], 0);
    }
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nlog, 20);
    for (int i = 0; i < 20; i++)
        assert_string_equal(S->log[i], pay[i]);
    assert_true(S->nframes < 20);
    pthread_mutex_unlock(&S->mu);
    stub_stop();
    pthread_mutex_destroy(&r.mu);
}

static void test_ack_timeout_fails_unanswered_publish(void **state)
{
    stub_start();
    S->no_answer = true;
    fx_client_opts o;
    opts(&o);
    o.publish_ack_timeout_ms = 200;
    fx_client *c = connect_stub(&o);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish(c, "default", "demo", "x", 1, FX_ACK_PER_MESSAGE), FX_ETIMEDOUT);
    assert_true(fx_now_ns() - t0 >= 200 * FX_NS_PER_MS);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "may or may not have been appended"));
    res r = {.done = 0};
    pthread_mutex_init(&r.mu, NULL);
    R = &r;
    R_WANT = 1;
    rslot sl = {&r, 0};
    assert_int_equal(fx_publish_async(c, "default", "demo", "y", 1, FX_ACK_PER_BATCH, on_res, &sl),
                     0);
    assert_true(wait_until(res_done, 3000));
    assert_int_equal(r.rv[0], FX_ETIMEDOUT);
    assert_int_equal(r.calls[0], 1);
    /* Nothing is left outstanding: the timed-out requests are finished. */
    assert_int_equal(fx_flush(c, 2000), 0);
    assert_int_equal(LOCKED(S->acked_binary), 2);
    finish(c);
    pthread_mutex_destroy(&r.mu);
}

static void test_publish_batch_over_the_message_limit_is_refused(void **state)
{
    fx_client *c = start_default();
    size_t n = FX_WIRE_BATCH_MAX_MESSAGES + 1;
    fx_iov *v = calloc(n, sizeof(*v));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (fx_iov){"", 0};
    assert_int_equal(fx_publish_batch(c, "default", "demo", v, n, FX_ACK_NONE), -EINVAL);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "65536"));
    assert_int_equal(fx_publish_batch(c, "default", "demo", v, n - 1, FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(c, 5000), 0);
    free(v);
    finish(c);
}

typedef struct mt {
    fx_client *c;
    int t;
    int fails;
} mt;

enum { MT_THREADS = 6, MT_STREAMS = 3, MT_EACH = 300 };

static void *mt_main(void *arg)
{
    mt *m = arg;
    for (int i = 0; i < MT_EACH; i++) {
        char stream[16], p[16];
        snprintf(stream, sizeof(stream), "s%d", (m->t + i) % MT_STREAMS);
        snprintf(p, sizeof(p), "%d:%d", m->t, i);
        fx_ack ack = m->t % 2 == 0 ? FX_ACK_NONE : FX_ACK_PER_MESSAGE;
        if (fx_publish(m->c, "default", stream, p, strlen(p), ack) != 0)
            m->fails++;
    }
    return NULL;
}

/* Threads publish to several streams at once, acked and not: every
 * message arrives once, and each thread's messages arrive in its order. */
static void test_many_threads_many_streams_coalesce_without_loss(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.publish_conn_pool = 1;
    o.publish_streams_per_conn = 2;
    o.publish_linger_us = 500;
    fx_client *c = connect_stub(&o);
    pthread_t th[MT_THREADS];
    mt m[MT_THREADS];
    for (int t = 0; t < MT_THREADS; t++) {
        m[t] = (mt){.c = c, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, mt_main, &m[t]), 0);
    }
    for (int t = 0; t < MT_THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(m[t].fails, 0);
    }
    assert_int_equal(fx_flush(c, 5000), 0);
    NLOG_WANT = MT_THREADS * MT_EACH;
    assert_true(wait_until(log_complete, 5000));
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->nlog, MT_THREADS * MT_EACH);
    int next[MT_THREADS] = {0};
    for (int i = 0; i < S->nlog; i++) {
        int t = -1, k = -1;
        assert_int_equal(sscanf(S->log[i], "%d:%d", &t, &k), 2);
        assert_true(t >= 0 && t < MT_THREADS);
        /* Per stream a thread's order holds; across its streams it may
         * interleave, so check the order per (thread, stream). */
        (void)k;
        next[t]++;
    }
    for (int t = 0; t < MT_THREADS; t++)
        assert_int_equal(next[t], MT_EACH);
    int last[MT_THREADS][MT_STREAMS];
    memset(last, -1, sizeof(last));
    for (int i = 0; i < S->nlog; i++) {
        int t, k;
        sscanf(S->log[i], "%d:%d", &t, &k);
        int st = (t + k) % MT_STREAMS;
        assert_true(k > last[t][st]);
        last[t][st] = k;
    }
    pthread_mutex_unlock(&S->mu);
    finish(c);
}

static void test_opts_publish_batching_from_env_and_checked(void **state)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    assert_true(o.publish_coalesce);
    assert_int_equal(o.publish_linger_us, 0);
    assert_int_equal(o.publish_ack_timeout_ms, 30000);
    setenv("FELIX_PUBLISH_COALESCE", "0", 1);
    setenv("FELIX_PUBLISH_LINGER_US", "250", 1);
    setenv("FELIX_PUBLISH_ACK_TIMEOUT_MS", "1500", 1);
    assert_int_equal(fx_client_opts_from_env(&o), 0);
    assert_false(o.publish_coalesce);
    assert_int_equal(o.publish_linger_us, 250);
    assert_int_equal(o.publish_ack_timeout_ms, 1500);
    setenv("FELIX_PUBLISH_LINGER_US", "0", 1);
    assert_int_equal(fx_client_opts_from_env(&o), 0);
    assert_int_equal(o.publish_linger_us, 0);
    char msg[256];
    setenv("FELIX_PUBLISH_COALESCE", "maybe", 1);
    assert_int_equal(fx_client_opts_from_env(&o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "FELIX_PUBLISH_COALESCE"));
    unsetenv("FELIX_PUBLISH_COALESCE");
    setenv("FELIX_PUBLISH_LINGER_US", "2000000", 1);
    assert_int_equal(fx_client_opts_from_env(&o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "FELIX_PUBLISH_LINGER_US"));
    unsetenv("FELIX_PUBLISH_LINGER_US");
    unsetenv("FELIX_PUBLISH_ACK_TIMEOUT_MS");
    /* The option itself is checked at connect. */
    fx_client_opts_init(&o);
    o.server = "127.0.0.1:1";
    o.publish_linger_us = 1000001;
    fx_client *c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "publish_linger_us"));
    fx_client_opts_init(&o);
    o.server = "127.0.0.1:1";
    o.publish_ack_timeout_ms = -5;
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "publish_ack_timeout_ms"));
}

/* ---- a hostile broker (review N11) ------------------------------------------------ */

/* What the stub's hostile task did: uni streams it could open. */
typedef struct hostile {
    int want;         /* streams to open */
    uint32_t len;     /* each announces a frame of this many body bytes ... */
    size_t send;      /* ... and sends this many of them */
    bool fin;         /* and ends each stream */
    int opened;       /* out */
    atomic_bool done; /* out */
} hostile;

static void hostile_task(void *u)
{
    hostile *h = u;
    pthread_mutex_lock(&S->mu);
    uint8_t *body = calloc(1, h->send + FX_WIRE_HEADER_LEN);
    fx_frame_header_put(body, 0, h->len); /* JSON: the client waits for a hello */
    for (int i = 0; i < h->want && S->conn != NULL; i++) {
        int64_t sid;
        if (fx_quic_conn_open_uni(S->conn, NULL, &sid) != 0)
            break;
        h->opened++;
        ssend(S->conn, sid, body, FX_WIRE_HEADER_LEN + h->send, h->fin);
    }
    free(body);
    pthread_mutex_unlock(&S->mu);
    atomic_store(&h->done, true);
}

static int stub_hostile(int want, uint32_t len, size_t send, bool fin)
{
    hostile h = {.want = want, .len = len, .send = send, .fin = fin};
    atomic_init(&h.done, false);
    assert_int_equal(fx_loop_call(S->loop, hostile_task, &h), 0);
    while (!atomic_load(&h.done))
        usleep(200);
    return h.opened;
}

static bool stub_closed_by_client(void)
{
    pthread_mutex_lock(&S->mu);
    bool v = S->closed_by_peer;
    pthread_mutex_unlock(&S->mu);
    return v;
}

/* A broker announcing large frames on several streams and sending most of
 * their bytes made the client credit (and buffer) every partial byte:
 * 1,024 streams x max_frame_bytes. Beyond 2 x max_frame_bytes of
 * unfinished frames on one connection the client now closes it, saying
 * why. */
static void test_partial_frames_beyond_twice_max_frame_bytes_close_the_connection(void **state)
{
    stub_start();
    fx_client_opts o;
    opts(&o);
    o.max_frame_bytes = 64 << 10; /* the bound: 128 KiB */
    fx_client *c = connect_stub(&o);
    /* Within it: two streams of 60 KiB partial frames stay open. */
    assert_int_equal(stub_hostile(2, 63 << 10, 60 << 10, false), 2);
    usleep(300 * 1000);
    assert_false(stub_closed_by_client());
    /* A third pushes the connection past it. */
    assert_int_equal(stub_hostile(1, 63 << 10, 60 << 10, false), 1);
    assert_true(wait_until(stub_closed_by_client, 3000));
    pthread_mutex_lock(&S->mu);
    assert_int_equal(S->close_code, FXC_PARTIAL_CLOSE_CODE);
    pthread_mutex_unlock(&S->mu);
    fx_client_close(c, 2000); /* the publish connection is gone: its result is not checked */
    stub_stop();
}

/* The broker may open a few streams, then one per subscribe request; a
 * stream that ends gives no credit back (before: 1,024, each returned as
 * it ended, so opening and finishing streams never stopped). */
static void test_broker_opened_streams_are_credited_per_subscribe_only(void **state)
{
    fx_client *c = start_default();
    fx_subscription *s = sub_stub(c);
    stub_send_events(0, 1, 8);
    expect_events(s, 0, 1); /* the subscribe's credit came, and its stream used it */
    int first = stub_hostile(40, 4, 0, true);
    assert_true(first >= (int)FXC_UNI_STREAMS_FIRST - 1 && first <= (int)FXC_UNI_STREAMS_FIRST);
    usleep(300 * 1000); /* the client has seen them end */
    assert_int_equal(stub_hostile(5, 4, 0, true), 0);
    fx_unsubscribe(s);
    finish(c);
}

static atomic_int late_lines;

static void count_late(fx_log_level level, const char *line, size_t len, void *user)
{
    (void)level, (void)len, (void)user;
    if (strstr(line, "unknown or timed-out request id") != NULL)
        atomic_fetch_add(&late_lines, 1);
}

/* Answers for request ids the client does not know were each a WARN line:
 * a broker could flood the application's log. One line a second now. */
static void test_answers_for_unknown_request_ids_log_once_a_second(void **state)
{
    stub_start();
    S->bogus_answers = 200;
    fx_client_opts o;
    opts(&o);
    atomic_store(&late_lines, 0);
    static const fx_log_sink sink = {.on_line = count_late};
    fx_log_set_sink(&sink);
    fx_log_set_level(FX_LOG_WARN); /* the stub quiets the log to errors */
    fx_client *c = connect_stub(&o);
    uint64_t t0 = fx_now_ns();
    assert_int_equal(fx_publish(c, "default", "demo", "x", 1, FX_ACK_PER_MESSAGE), 0);
    uint64_t secs = (fx_now_ns() - t0) / FX_NS_PER_S;
    finish(c);
    fx_log_set_sink(NULL);
    fx_log_set_level(FX_LOG_ERROR);
    int lines = atomic_load(&late_lines);
    assert_true(lines >= 1 && (uint64_t)lines <= secs + 1);
}

/* A case whose stub directory goes even when it fails. */
#define CASE(f) cmocka_unit_test_teardown(f, stub_dir_teardown)

static const struct CMUnitTest tests[] = {
    CASE(test_opts_defaults_match_api_doc),
    CASE(test_opts_publish_batching_from_env_and_checked),
    CASE(test_publishes_behind_a_busy_stream_merge_in_order),
    CASE(test_coalesce_off_sends_one_frame_per_publish),
    CASE(test_merged_frames_stay_within_max_frame_bytes),
    CASE(test_merged_acked_publishes_each_learn_the_result_refusal_mid_stream),
    CASE(test_linger_holds_a_lone_publish_for_its_bound_only),
    CASE(test_close_while_a_batch_is_built_sends_it_once),
    CASE(test_ack_timeout_fails_unanswered_publish),
    CASE(test_publish_batch_over_the_message_limit_is_refused),
    CASE(test_many_threads_many_streams_coalesce_without_loss),
    CASE(test_opts_from_env_rejects_bad_value_naming_it),
    CASE(test_server_name_defaults_to_the_host_of_server),
    CASE(test_event_conn_pool_above_one_refused),
    CASE(test_pin_with_ca_or_insecure_refused),
    CASE(test_connect_fails_fast_on_wrong_pin),
    CASE(test_connect_to_nothing_times_out),
    CASE(test_legacy_ok_reply_means_flags_7),
    CASE(test_unacked_publish_sends_binary_batch),
    CASE(test_publish_larger_than_budget_fails_at_once),
    CASE(test_acked_publish_pairs_by_request_id_out_of_order),
    CASE(test_publish_error_surfaces_message),
    CASE(test_publish_batch_acked_is_one_frame_one_answer),
    CASE(test_subscribe_receives_events_in_order),
    CASE(test_subscribe_adopts_server_subscription_id),
    CASE(test_event_stream_before_subscribed_reply_is_routed),
    CASE(test_gap_in_offsets_reported),
    CASE(test_block_policy_withholds_credit),
    CASE(test_drop_new_policy_counts_drops),
    CASE(test_callback_runs_on_loop_and_blocking_call_returns_wouldblock),
    CASE(test_close_wakes_blocked_next_with_closed),
    CASE(test_blocked_next_is_woken_by_each_delivery),
    CASE(test_blocked_next_times_out_at_its_bound),
    CASE(test_cursor_error_is_typed),
    CASE(test_unsubscribe_frees_and_stub_sees_reset),
    CASE(test_partial_frames_beyond_twice_max_frame_bytes_close_the_connection),
    CASE(test_broker_opened_streams_are_credited_per_subscribe_only),
    CASE(test_answers_for_unknown_request_ids_log_once_a_second),
};
FX_TEST_MAIN(tests)
