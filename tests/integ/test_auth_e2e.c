/* End-to-end tests of token auth, tenant isolation and max_connections: the
 * real client library (libfelix) against a broker in this process with
 * auth_mode jwt, its authenticator (src/server/authn) reading a JWKS file
 * written to a temp dir from a freshly generated Ed25519 key. Broker counters
 * are checked as differences of fx_metrics_snapshot_take() around a scenario.
 * Timeouts are hang guards only; nothing asserts on speed. */
/* fx-test-libs: fx_broker fx_client fx_server fx_quic fx_wire fx_base */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "integ/fixture.h"
#include "server/authn.h"

static const char *const ALL_T1[] = {"stream.publish:stream:t1/*/*",
                                     "stream.subscribe:stream:t1/*/*"};

/* ---- broker with auth_mode jwt ----------------------------------------------- */

typedef struct A {
    fx_broker *b;
    fx_broker_opts bo;
    fx_authn *authn;
    char dir[64];
    char jwks[128];
    char server[32];
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
} A;

/* Writes a JWKS holding |pub| (key id |kid|) to |path|, replacing it
 * atomically as an operator's deploy would. */
static void write_jwks(const char *path, const char *kid, const uint8_t *pub)
{
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_int_equal(fx_auth_jwks_write(f, kid, pub), 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
}

static A *a_new(void)
{
    A *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    fix_state_dir_new(a->dir, sizeof(a->dir), "auth");
    snprintf(a->jwks, sizeof(a->jwks), "%s/jwks.json", a->dir);
    assert_int_equal(fx_auth_keygen(a->pub, a->priv), 0);
    write_jwks(a->jwks, "k1", a->pub);
    char why[512];
    fx_authn_opts ao = {.jwks_file = a->jwks, .leeway_s = 60};
    int rv = fx_authn_new(&a->authn, &ao, why, sizeof(why));
    if (rv != 0)
        fail_msg("authn: %s", why);
    fix_broker_opts(&a->bo, a->dir);
    a->bo.event_batch_max_delay_ns = 0;
    fx_authn_broker_auth(a->authn, &a->bo.auth);
    return a;
}

static void a_start(A *a)
{
    fix_broker_start(&a->b, &a->bo, a->server, sizeof(a->server));
}

static void a_free(A *a)
{
    fx_broker_free(a->b);
    fx_authn_free(a->authn);
    fix_rm_dir(a->dir);
    free(a);
}

/* ---- tokens ------------------------------------------------------------------- */

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

typedef struct tok {
    const uint8_t *priv;
    const char *kid;
    const char *tid;
    const char *aud; /* NULL: felix-broker */
    int64_t exp_in;  /* seconds from now; 0: one hour */
    const char *const *perms;
    size_t nperms;
} tok;

static char *mint(const tok *t)
{
    fx_auth_mint_claims c = {.audience = t->aud,
                             .sub = "tester",
                             .tid = t->tid,
                             .iat = now_s(),
                             .has_iat = true,
                             .exp = now_s() + (t->exp_in != 0 ? t->exp_in : 3600),
                             .perms = t->perms,
                             .nperms = t->nperms};
    char *token = NULL;
    assert_int_equal(fx_auth_mint(t->priv, t->kid, &c, &token), 0);
    return token;
}

/* A token of |a|'s key k1 for t1 with |perms|. */
static char *mint_t1(A *a, const char *const *perms, size_t n)
{
    tok t = {.priv = a->priv, .kid = "k1", .tid = "t1", .perms = perms, .nperms = n};
    return mint(&t);
}

/* ---- clients ------------------------------------------------------------------ */

/* One connection per client, so max_connections counts clients. */
static void copts(A *a, fx_client_opts *o, const char *tenant, const char *token)
{
    fix_client_opts(o, a->b, a->server, tenant, token);
    o->publish_conn_pool = 1;
    o->publish_streams_per_conn = 1;
    o->event_conn_pool = 1;
}

/* Connects as |tenant| with |token|. Returns the result; *pc is set on 0 and
 * |msg| (may be NULL) gets the library's error text. */
static int try_connect(A *a, const char *tenant, const char *token, fx_client **pc, char *msg,
                       size_t n)
{
    fx_client_opts o;
    copts(a, &o, tenant, token);
    *pc = NULL;
    int rv = fx_client_connect(pc, &o);
    if (msg != NULL)
        fx_client_last_error(NULL, msg, n);
    return rv;
}

static fx_client *connect_ok(A *a, const char *tenant, const char *token)
{
    fx_client *c;
    char msg[256];
    int rv = try_connect(a, tenant, token, &c, msg, sizeof(msg));
    if (rv != 0)
        fail_msg("connect: %s (%s)", fx_errname(rv), msg);
    return c;
}

static void close_client(fx_client *c)
{
    fix_close(c);
}

/* Expects |token| for |tenant| to be refused with "auth failed", counted
 * once as auth_failed and never as forbidden. */
static void expect_auth_failed(A *a, const char *tenant, const char *token)
{
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_client *c;
    char msg[256];
    assert_int_equal(try_connect(a, tenant, token, &c, msg, sizeof(msg)), FX_EAUTH);
    assert_null(c);
    assert_non_null(strstr(msg, "auth failed"));
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, broker_auth_failed), 1);
    assert_int_equal(DELTA(m0, m1, broker_auth_forbidden), 0);
}

static fx_subscription *subscribe_ok(fx_client *c, const char *stream)
{
    return fix_subscribe(c, stream, NULL);
}

static void expect_event(fx_subscription *s, const char *payload)
{
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    assert_int_equal(ev.len, strlen(payload));
    assert_memory_equal(ev.payload, payload, ev.len);
}

/* Waits until the broker's forbidden counter moved |n| past |m0|. */
static void wait_forbidden(const fx_metrics_snapshot *m0, int64_t n)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot m;
    for (;;) {
        fx_metrics_snapshot_take(&m);
        if (DELTA(*m0, m, broker_auth_forbidden) >= n)
            break;
        if (fx_now_ns() > deadline)
            fail_msg("forbidden counted %lld times, want %lld",
                     (long long)DELTA(*m0, m, broker_auth_forbidden), (long long)n);
        usleep(5000);
    }
    assert_int_equal(DELTA(*m0, m, broker_auth_forbidden), n);
}

/* ---- tokens accepted and refused ------------------------------------------------ */

static void test_valid_token_publishes_and_subscribes(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    char *token = mint_t1(a, ALL_T1, 2);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_client *c = connect_ok(a, "t1", token);
    fx_subscription *s = subscribe_ok(c, "orders");
    assert_int_equal(fx_publish(c, NS, "orders", "hello", 5, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_publish(c, NS, "orders", "again", 5, FX_ACK_NONE), 0);
    fx_iov two[2] = {{"b1", 2}, {"b2", 2}};
    assert_int_equal(fx_publish_batch(c, NS, "orders", two, 2, FX_ACK_PER_BATCH), 0);
    expect_event(s, "hello");
    expect_event(s, "again");
    expect_event(s, "b1");
    expect_event(s, "b2");
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, broker_auth_failed), 0);
    assert_int_equal(DELTA(m0, m1, broker_auth_forbidden), 0);
    fx_unsubscribe(s);
    close_client(c);
    free(token);
    a_free(a);
}

static void test_wrong_audience_refused_with_counter(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    tok t = {.priv = a->priv,
             .kid = "k1",
             .tid = "t1",
             .aud = "someone-else",
             .perms = ALL_T1,
             .nperms = 2};
    char *token = mint(&t);
    expect_auth_failed(a, "t1", token);
    free(token);
    /* The same token with the right audience passes. */
    t.aud = NULL;
    token = mint(&t);
    close_client(connect_ok(a, "t1", token));
    free(token);
    a_free(a);
}

static void test_expired_token_refused(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    /* Past exp + 60 s of leeway. */
    tok t = {
        .priv = a->priv, .kid = "k1", .tid = "t1", .exp_in = -600, .perms = ALL_T1, .nperms = 2};
    char *token = mint(&t);
    expect_auth_failed(a, "t1", token);
    free(token);
    /* Expired 10 s ago: inside the leeway, accepted. */
    t.exp_in = -10;
    token = mint(&t);
    close_client(connect_ok(a, "t1", token));
    free(token);
    a_free(a);
}

static void test_wrong_tenant_refused(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    /* A token for t2 presented by a client naming t1. */
    tok t = {.priv = a->priv, .kid = "k1", .tid = "t2", .perms = ALL_T1, .nperms = 2};
    char *token = mint(&t);
    expect_auth_failed(a, "t1", token);
    close_client(connect_ok(a, "t2", token));
    free(token);
    a_free(a);
}

static void test_bad_signature_refused(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    /* Signed by another key under the trusted key id. */
    uint8_t pub2[FX_AUTH_KEY_BYTES], priv2[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    tok t = {.priv = priv2, .kid = "k1", .tid = "t1", .perms = ALL_T1, .nperms = 2};
    char *token = mint(&t);
    expect_auth_failed(a, "t1", token);
    /* A good token with its signature's last character changed. */
    char *good = mint_t1(a, ALL_T1, 2);
    size_t n = strlen(good);
    good[n - 2] = good[n - 2] == 'A' ? 'B' : 'A';
    expect_auth_failed(a, "t1", good);
    /* No token at all. */
    expect_auth_failed(a, "t1", "");
    free(good);
    free(token);
    a_free(a);
}

/* ---- permissions ------------------------------------------------------------------ */

static void test_missing_publish_permission_forbidden_and_counted(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    static const char *const perms[] = {"stream.publish:stream:t1/default/allowed",
                                        "stream.subscribe:stream:t1/*/*"};
    char *token = mint_t1(a, perms, 2);
    fx_client *c = connect_ok(a, "t1", token);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    size_t streams0 = fx_registry_count(fx_broker_registry(a->b));
    char msg[256];
    /* Acked (binary 0x0009): an error ack "forbidden". */
    assert_int_equal(fx_publish(c, NS, "denied", "x", 1, FX_ACK_PER_MESSAGE), FX_EFORBIDDEN);
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "forbidden"));
    fx_iov one = {"y", 1};
    assert_int_equal(fx_publish_batch(c, NS, "denied", &one, 1, FX_ACK_PER_BATCH), FX_EFORBIDDEN);
    /* Unacked: refused silently, but counted. */
    assert_int_equal(fx_publish(c, NS, "denied", "z", 1, FX_ACK_NONE), 0);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    wait_forbidden(&m0, 3);
    /* A refused publish creates no stream, even with auto-creation on. */
    assert_int_equal(fx_registry_count(fx_broker_registry(a->b)), streams0);
    /* The same publish stream still serves the permitted stream. */
    fx_subscription *s = subscribe_ok(c, "allowed");
    assert_int_equal(fx_publish(c, NS, "allowed", "ok", 2, FX_ACK_PER_MESSAGE), 0);
    expect_event(s, "ok");
    /* Subscribing needs its own permission: a publish-only token is refused. */
    static const char *const pub_only[] = {"stream.publish:stream:t1/*/*"};
    char *token2 = mint_t1(a, pub_only, 1);
    fx_client *c2 = connect_ok(a, "t1", token2);
    fx_subscription *s2 = NULL;
    assert_int_equal(fx_subscribe(&s2, c2, NS, "allowed", NULL), FX_EFORBIDDEN);
    assert_null(s2);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, broker_auth_forbidden), 4);
    assert_int_equal(DELTA(m0, m1, broker_auth_failed), 0);
    assert_int_equal(DELTA(m0, m1, subscribe_req_error), 1);
    fx_unsubscribe(s);
    close_client(c2);
    close_client(c);
    free(token2);
    free(token);
    a_free(a);
}

static void test_tenant_t1_cannot_subscribe_to_t2_stream(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    /* t1's token carries wildcards that would match any tenant's streams. */
    static const char *const greedy[] = {"stream.publish:stream:*", "stream.subscribe:stream:*"};
    char *t1tok = mint_t1(a, greedy, 2);
    static const char *const t2perms[] = {"stream.publish:stream:t2/*/*",
                                          "stream.subscribe:stream:t2/*/*"};
    tok t = {.priv = a->priv, .kid = "k1", .tid = "t2", .perms = t2perms, .nperms = 2};
    char *t2tok = mint(&t);
    /* t1's token cannot open a t2 session, whatever its perms say. */
    expect_auth_failed(a, "t2", t1tok);
    fx_client *c2 = connect_ok(a, "t2", t2tok);
    fx_client *c1 = connect_ok(a, "t1", t1tok);
    fx_subscription *s2 = subscribe_ok(c2, "secret");
    fx_subscription *s1 = subscribe_ok(c1, "secret"); /* t1's own stream of that name */
    assert_int_equal(fx_publish(c2, NS, "secret", "t2-only", 7, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_publish(c1, NS, "secret", "t1-only", 7, FX_ACK_PER_MESSAGE), 0);
    expect_event(s2, "t2-only");
    expect_event(s1, "t1-only"); /* t2's message never reached t1 first */
    fx_event ev;
    assert_int_equal(fx_subscription_next(s1, &ev, 100), FX_ETIMEDOUT);
    assert_int_equal(fx_subscription_next(s2, &ev, 100), FX_ETIMEDOUT);
    fx_unsubscribe(s1);
    fx_unsubscribe(s2);
    close_client(c1);
    close_client(c2);
    free(t1tok);
    free(t2tok);
    a_free(a);
}

/* ---- key reload ---------------------------------------------------------------------- */

static void test_jwks_reload_accepts_new_key(void **state)
{
    (void)state;
    A *a = a_new();
    a_start(a);
    uint8_t pub2[FX_AUTH_KEY_BYTES], priv2[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub2, priv2), 0);
    tok t = {.priv = priv2, .kid = "k2", .tid = "t1", .perms = ALL_T1, .nperms = 2};
    char *new_tok = mint(&t);
    char *old_tok = mint_t1(a, ALL_T1, 2);
    expect_auth_failed(a, "t1", new_tok); /* unknown key id */
    fx_client *old = connect_ok(a, "t1", old_tok);
    /* Rotate: the file now holds only k2; reload as SIGHUP does. */
    write_jwks(a->jwks, "k2", pub2);
    char why[512];
    assert_int_equal(fx_authn_reload(a->authn, why, sizeof(why)), 0);
    assert_non_null(strstr(why, a->jwks));
    close_client(connect_ok(a, "t1", new_tok));
    expect_auth_failed(a, "t1", old_tok);
    /* A stream authenticated before the reload keeps working. */
    assert_int_equal(fx_publish(old, NS, "s", "x", 1, FX_ACK_PER_MESSAGE), 0);
    /* A broken file is refused and the keys in use stay. */
    FILE *f = fopen(a->jwks, "w");
    assert_non_null(f);
    fputs("{\"keys\": [", f);
    fclose(f);
    assert_int_not_equal(fx_authn_reload(a->authn, why, sizeof(why)), 0);
    assert_non_null(strstr(why, a->jwks));
    close_client(connect_ok(a, "t1", new_tok));
    close_client(old);
    free(new_tok);
    free(old_tok);
    a_free(a);
}

/* ---- limits ------------------------------------------------------------------------------ */

static void test_max_connections_refuses_extra_connection(void **state)
{
    (void)state;
    A *a = a_new();
    a->bo.max_connections = 1;
    a_start(a);
    char *token = mint_t1(a, ALL_T1, 2);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    fx_client *first = connect_ok(a, "t1", token);
    fx_client *extra;
    char msg[256];
    assert_int_not_equal(try_connect(a, "t1", token, &extra, msg, sizeof(msg)), 0);
    assert_null(extra);
    assert_non_null(strstr(msg, "too many connections"));
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, broker_conn_refused), 1);
    /* The connection being served is untouched. */
    fx_subscription *s = subscribe_ok(first, "s");
    assert_int_equal(fx_publish(first, NS, "s", "still", 5, FX_ACK_PER_MESSAGE), 0);
    expect_event(s, "still");
    fx_unsubscribe(s);
    close_client(first);
    /* Its slot is given back once the broker saw it close. */
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_client *next = NULL;
    while (try_connect(a, "t1", token, &next, NULL, 0) != 0) {
        if (fx_now_ns() > deadline)
            fail_msg("the slot of a closed connection was never given back");
        usleep(20000);
    }
    close_client(next);
    free(token);
    a_free(a);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_valid_token_publishes_and_subscribes),
    cmocka_unit_test(test_wrong_audience_refused_with_counter),
    cmocka_unit_test(test_expired_token_refused),
    cmocka_unit_test(test_wrong_tenant_refused),
    cmocka_unit_test(test_bad_signature_refused),
    cmocka_unit_test(test_missing_publish_permission_forbidden_and_counted),
    cmocka_unit_test(test_tenant_t1_cannot_subscribe_to_t2_stream),
    cmocka_unit_test(test_jwks_reload_accepts_new_key),
    cmocka_unit_test(test_max_connections_refuses_extra_connection),
};
FX_TEST_MAIN(tests)
