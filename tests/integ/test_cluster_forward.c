/* The publish forwarder (src/cluster/forward.h, docs/cluster.md
 * "Forwarding") driven directly, without etcd: the "owner" is a plain broker
 * in this process reached at its address, as a cluster node reaches the
 * node that owns a stream. Acked and unacked forwards, an owner nobody
 * answers (the sentence, the 500 ms fail-fast), the queue's byte bound, the
 * owner verifying the publisher's token (auth_mode jwt), the client pool's
 * bound and fx_forwarder_free with forwards queued. The processes-and-etcd
 * twin is tests/integ/test_cluster.c. Timeouts are hang guards, except the
 * fail-fast bound, which is the point of that case. */
/* fx-test-libs: fx_broker fx_client fx_server fx_cluster fx_quic fx_wire fx_base */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include "auth/auth.h"
#include "cluster/forward.h"
#include "felix/error.h"
#include "integ/fixture.h"
#include "server/authn.h"

/* ---- completions ------------------------------------------------------------------ */

/* One forward's completion, as its callback saw it (a client's loop thread
 * or the forwarder thread; read by the test's thread under |mu|). */
typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int rv;
    char why[512];
    uint64_t at_ns;
} done;

static void done_init(done *d)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
}

static void done_deinit(done *d)
{
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
}

static void on_done(void *user, int rv, const char *why)
{
    done *d = user;
    pthread_mutex_lock(&d->mu);
    d->calls++;
    d->rv = rv;
    snprintf(d->why, sizeof(d->why), "%s", why != NULL ? why : "");
    d->at_ns = fx_now_ns();
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Waits until |d|'s callback ran; returns its rv (the test fails after
 * HANG_MS). */
static int done_wait(done *d)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += HANG_MS / 1000 + 1;
    pthread_mutex_lock(&d->mu);
    while (d->calls == 0) {
        if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) != 0 && d->calls == 0) {
            pthread_mutex_unlock(&d->mu);
            fail_msg("a forward's callback never ran");
        }
    }
    int rv = d->rv;
    pthread_mutex_unlock(&d->mu);
    return rv;
}

static int done_calls(done *d)
{
    pthread_mutex_lock(&d->mu);
    int n = d->calls;
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* ---- the forwarder and its owner ------------------------------------------------------ */

/* A forwarder pinned to |owner|'s certificate, with |max_queue_bytes| and
 * |max_clients| (0: the defaults). */
static fx_forwarder *fwd_new(fx_broker *owner, size_t max_queue_bytes, size_t max_clients)
{
    fx_forward_opts o = {.pin_sha256 = fx_broker_fingerprint(owner),
                         .server_name = "localhost",
                         .max_queue_bytes = max_queue_bytes,
                         .max_clients = max_clients};
    fx_forwarder *f = NULL;
    assert_int_equal(fx_forwarder_new(&f, &o), 0);
    return f;
}

static fx_forward_stats fwd_stats(fx_forwarder *f)
{
    fx_forward_stats st;
    fx_forwarder_get_stats(f, &st);
    return st;
}

/* Forwards the one payload |p| to NS/|stream| at |addr| as |tenant| with
 * |token|; the queue must take it. */
static void forward1(fx_forwarder *f, const char *addr, const char *tenant, const char *token,
                     const char *stream, const char *p, bool acked, done *d)
{
    fx_forward_iov iov = {.data = p, .len = strlen(p)};
    assert_int_equal(
        fx_forward_publish(f, addr, tenant, token, NS, stream, &iov, 1, acked, on_done, d), 0);
}

static void expect_event(fx_subscription *s, const char *payload)
{
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    if (ev.len != strlen(payload) || memcmp(ev.payload, payload, ev.len) != 0)
        fail_msg("read '%.*s', want '%s'", (int)ev.len, (const char *)ev.payload, payload);
}

/* A bound UDP socket that never answers: an owner nobody answers at. */
static int dead_socket(char *addr, size_t cap)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(addr, cap, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    return fd;
}

/* Frees |f| (answering what it still held), then checks that each of the
 * |n| completions |d| ran exactly once, and releases them. */
static void free_and_check(fx_forwarder *f, done *d, int n)
{
    fx_forwarder_free(f);
    for (int i = 0; i < n; i++) {
        assert_int_equal(done_calls(&d[i]), 1);
        done_deinit(&d[i]);
    }
}

/* ---- forwards that reach the owner ------------------------------------------------------ */

static void test_an_acked_forward_is_answered_once_appended_and_read_in_order(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    fx_subscription *s = fix_subscribe(c, "f1", NULL);
    fx_forwarder *f = fwd_new(e.b, 0, 0);
    enum { N = 8 };
    char p[N][16];
    fx_forward_iov iov[N];
    for (int i = 0; i < N; i++) {
        int n = snprintf(p[i], sizeof(p[i]), "p%d", i);
        iov[i] = (fx_forward_iov){.data = p[i], .len = (size_t)n};
    }
    done d;
    done_init(&d);
    assert_int_equal(
        fx_forward_publish(f, e.server, "t1", "tok", NS, "f1", iov, N, true, on_done, &d), 0);
    if (done_wait(&d) != 0)
        fail_msg("acked forward: %s (%s)", fx_errname(d.rv), d.why);
    assert_string_equal(d.why, ""); /* why is NULL on success */
    /* Answered ok means appended: a subscriber from the stream's start
     * opened only now reads every one. */
    fx_start from0 = {.kind = FX_START_EARLIEST};
    fx_subscription *s0 = fix_subscribe(c, "f1", &from0);
    for (int i = 0; i < N; i++) {
        expect_event(s, p[i]);
        expect_event(s0, p[i]);
    }
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.forwards, 1);
    assert_int_equal(st.messages, N);
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.clients, 1);
    assert_int_equal(st.queued_bytes, 0);
    assert_int_equal(done_calls(&d), 1);
    fx_forwarder_free(f);
    assert_int_equal(done_calls(&d), 1);
    done_deinit(&d);
    fx_unsubscribe(s0);
    fx_unsubscribe(s);
    fix_close(c);
    fix_env_deinit(&e);
}

/* Once a client to the owner is connected, a one-message forward is sent
 * from the calling thread (stats.direct); a batch between such forwards goes
 * through the forwarder thread, and the owner still sees them in order. */
static void test_one_message_forwards_go_direct_once_connected_and_keep_their_order(void **state)
{
    (void)state;
    fix_env e;
    fix_env_init(&e, "fwdfast");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    fx_subscription *s = fix_subscribe(c, "ff", NULL);
    fx_forwarder *f = fwd_new(e.b, 0, 0);
    done first;
    done_init(&first);
    forward1(f, e.server, "t1", "tok", "ff", "m0", true, &first); /* connects: the queue */
    assert_int_equal(done_wait(&first), 0);
    assert_int_equal(fwd_stats(f).direct, 0);
    enum { ROUNDS = 50 };
    static done d[ROUNDS][2];
    char p[ROUNDS][3][16];
    for (int r = 0; r < ROUNDS; r++) {
        done_init(&d[r][0]);
        done_init(&d[r][1]);
        snprintf(p[r][0], sizeof(p[r][0]), "a%d", r);
        forward1(f, e.server, "t1", "tok", "ff", p[r][0], true, &d[r][0]);
        fx_forward_iov two[2];
        for (int k = 1; k < 3; k++) {
            int n = snprintf(p[r][k], sizeof(p[r][k]), "b%d.%d", r, k);
            two[k - 1] = (fx_forward_iov){.data = p[r][k], .len = (size_t)n};
        }
        assert_int_equal(
            fx_forward_publish(f, e.server, "t1", "tok", NS, "ff", two, 2, true, on_done, &d[r][1]),
            0);
    }
    for (int r = 0; r < ROUNDS; r++) {
        assert_int_equal(done_wait(&d[r][0]), 0);
        assert_int_equal(done_wait(&d[r][1]), 0);
    }
    expect_event(s, "m0");
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 3; k++)
            expect_event(s, p[r][k]);
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.forwards, 1 + 2 * ROUNDS);
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.connects, 1);
    /* Some one-message forwards found the queue empty and went direct; a
     * batch never does. */
    assert_true(st.direct >= 1);
    assert_true(st.direct <= ROUNDS);
    fx_forwarder_free(f);
    for (int r = 0; r < ROUNDS; r++) {
        assert_int_equal(done_calls(&d[r][0]), 1);
        assert_int_equal(done_calls(&d[r][1]), 1);
        done_deinit(&d[r][0]);
        done_deinit(&d[r][1]);
    }
    done_deinit(&first);
    fx_unsubscribe(s);
    fix_close(c);
    fix_env_deinit(&e);
}

static void test_an_unacked_forward_reaches_the_owner(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    fx_subscription *s = fix_subscribe(c, "f2", NULL);
    fx_forwarder *f = fwd_new(e.b, 0, 0);
    done d[3];
    for (int i = 0; i < 3; i++) {
        char p[16];
        snprintf(p, sizeof(p), "u%d", i);
        done_init(&d[i]);
        forward1(f, e.server, "t1", "tok", "f2", p, false, &d[i]);
    }
    for (int i = 0; i < 3; i++) {
        if (done_wait(&d[i]) != 0)
            fail_msg("unacked forward %d: %s (%s)", i, fx_errname(d[i].rv), d[i].why);
    }
    expect_event(s, "u0");
    expect_event(s, "u1");
    expect_event(s, "u2");
    assert_int_equal(fwd_stats(f).failed, 0);
    free_and_check(f, d, 3);
    fx_unsubscribe(s);
    fix_close(c);
    fix_env_deinit(&e);
}

/* ---- an owner nobody answers ---------------------------------------------------------- */

static void test_a_forward_to_a_dead_owner_names_it_and_the_next_fails_at_once(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    char dead[32];
    int fd = dead_socket(dead, sizeof(dead));
    fx_forwarder *f = fwd_new(e.b, 0, 0); /* the 1 s connect timeout */
    done d1, d2;
    done_init(&d1);
    done_init(&d2);
    forward1(f, dead, "t1", "tok", "f3", "x", true, &d1);
    assert_true(done_wait(&d1) < 0);
    if (strstr(d1.why, dead) == NULL)
        fail_msg("the failure does not name %s: %s", dead, d1.why);
    /* Within 500 ms the next forward to it fails without waiting out a
     * connect timeout. */
    uint64_t t0 = fx_now_ns();
    assert_true(t0 - d1.at_ns < 400 * FX_NS_PER_MS);
    forward1(f, dead, "t1", "tok", "f3", "y", true, &d2);
    assert_true(done_wait(&d2) < 0);
    uint64_t took = d2.at_ns - t0;
    if (took > 300 * FX_NS_PER_MS)
        fail_msg("the second forward took %llu ms", (unsigned long long)(took / FX_NS_PER_MS));
    if (strstr(d2.why, dead) == NULL)
        fail_msg("the failure does not name %s: %s", dead, d2.why);
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.connect_errors, 1);
    assert_int_equal(st.failed, 2);
    assert_int_equal(st.connects, 0);
    assert_int_equal(st.clients, 0);
    /* Past the 500 ms the owner is tried again. */
    sleep_ms(600);
    done d3;
    done_init(&d3);
    forward1(f, dead, "t1", "tok", "f3", "z", true, &d3);
    assert_true(done_wait(&d3) < 0);
    assert_int_equal(fwd_stats(f).connect_errors, 2);
    fx_forwarder_free(f);
    assert_int_equal(done_calls(&d1), 1);
    assert_int_equal(done_calls(&d2), 1);
    assert_int_equal(done_calls(&d3), 1);
    done_deinit(&d1);
    done_deinit(&d2);
    done_deinit(&d3);
    close(fd);
    fix_env_deinit(&e);
}

/* ---- the queue's byte bound ------------------------------------------------------------- */

static void test_a_forward_past_the_queue_byte_bound_is_refused_full_and_counted(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    char dead[32];
    int fd = dead_socket(dead, sizeof(dead));
    /* A forward of one 40-byte payload counts 56 bytes (payload + 16). */
    fx_forwarder *f = fwd_new(e.b, 64, 0);
    const char *p40 = "0123456789012345678901234567890123456789";
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    done d[3];
    for (int i = 0; i < 3; i++)
        done_init(&d[i]);
    /* The first keeps the forwarder thread busy connecting to a dead
     * owner (1 s); it left the queue once the thread took it. */
    forward1(f, dead, "t1", "tok", "f4", p40, true, &d[0]);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (fwd_stats(f).queued_bytes != 0) {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(1);
    }
    forward1(f, dead, "t1", "tok", "f4", p40, true, &d[1]);
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.queued_bytes, 56);
    fx_forward_iov iov = {.data = p40, .len = 40};
    assert_int_equal(
        fx_forward_publish(f, dead, "t1", "tok", NS, "f4", &iov, 1, true, on_done, &d[2]),
        FX_EFULL);
    st = fwd_stats(f);
    assert_int_equal(st.refused_full, 1);
    assert_int_equal(st.forwards, 2);
    assert_int_equal(st.queued_bytes, 56);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, cluster_forward_refused), 1);
    assert_true(done_wait(&d[0]) < 0);
    assert_true(done_wait(&d[1]) < 0);
    fx_forwarder_free(f);
    /* The refused forward's callback never runs. */
    assert_int_equal(done_calls(&d[2]), 0);
    for (int i = 0; i < 3; i++)
        done_deinit(&d[i]);
    close(fd);
    fix_env_deinit(&e);
}

/* ---- the owner verifies the token ------------------------------------------------------ */

static const char *const ALL_T1[] = {"stream.publish:stream:t1/*/*",
                                     "stream.subscribe:stream:t1/*/*"};
static const char *const SUB_T1[] = {"stream.subscribe:stream:t1/*/*"};

static char *mint_t1(const uint8_t *priv, const char *const *perms, size_t n)
{
    int64_t now = (int64_t)time(NULL);
    fx_auth_mint_claims c = {.sub = "tester",
                             .tid = "t1",
                             .iat = now,
                             .has_iat = true,
                             .exp = now + 3600,
                             .perms = perms,
                             .nperms = n};
    char *token = NULL;
    assert_int_equal(fx_auth_mint(priv, "k1", &c, &token), 0);
    return token;
}

static void test_the_owner_refuses_a_forward_with_a_bad_token_and_takes_a_good_one(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwdauth");
    char jwks[128];
    snprintf(jwks, sizeof(jwks), "%s/jwks.json", e.dir);
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
    assert_int_equal(fx_auth_keygen(pub, priv), 0);
    FILE *jf = fopen(jwks, "w");
    assert_non_null(jf);
    assert_int_equal(fx_auth_jwks_write(jf, "k1", pub), 0);
    assert_int_equal(fclose(jf), 0);
    char why[512];
    fx_authn *authn = NULL;
    fx_authn_opts ao = {.jwks_file = jwks, .leeway_s = 60};
    if (fx_authn_new(&authn, &ao, why, sizeof(why)) != 0)
        fail_msg("authn: %s", why);
    fx_authn_broker_auth(authn, &e.bo.auth);
    fix_env_start(&e);
    char *good = mint_t1(priv, ALL_T1, 2);
    char *subonly = mint_t1(priv, SUB_T1, 1);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", good);
    fx_client *c = fix_connect(&co);
    fx_subscription *s = fix_subscribe(c, "f5", NULL);
    fx_forwarder *f = fwd_new(e.b, 0, 0);
    done d[3];
    for (int i = 0; i < 3; i++)
        done_init(&d[i]);
    /* A token the owner's keys did not sign: refused at the owner. */
    forward1(f, e.server, "t1", "not-a-token", "f5", "bad", true, &d[0]);
    assert_int_equal(done_wait(&d[0]), FX_EAUTH);
    if (strstr(d[0].why, e.server) == NULL)
        fail_msg("the failure does not name the owner %s: %s", e.server, d[0].why);
    /* A good token right after passes: the owner answered the bad one, it is
     * not an owner nobody answers. */
    forward1(f, e.server, "t1", good, "f5", "good", true, &d[1]);
    if (done_wait(&d[1]) != 0)
        fail_msg("good token: %s (%s)", fx_errname(d[1].rv), d[1].why);
    expect_event(s, "good");
    /* A signed token without the publish permission: the owner forbids. */
    forward1(f, e.server, "t1", subonly, "f5", "forbidden", true, &d[2]);
    assert_int_equal(done_wait(&d[2]), FX_EFORBIDDEN);
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.failed, 2);
    assert_int_equal(st.connects, 2);
    free_and_check(f, d, 3);
    fx_unsubscribe(s);
    fix_close(c);
    free(good);
    free(subonly);
    fx_broker_free(e.b);
    e.b = NULL;
    fx_authn_free(authn);
    fix_env_deinit(&e);
}

/* ---- the client pool -------------------------------------------------------------------- */

static void test_more_publishers_than_max_clients_close_the_least_recently_used(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    fx_client *c = fix_connect(&co);
    fx_subscription *s = fix_subscribe(c, "f6", NULL);
    fx_forwarder *f = fwd_new(e.b, 0, 2);
    /* auth none takes any token: each token is another publisher, so
     * another client. a, b, c (a closed), a again (b closed), c (kept). */
    static const char *const toks[] = {"ta", "tb", "tc", "ta", "tc", "tb"};
    enum { N = sizeof(toks) / sizeof(toks[0]) };
    done d[N];
    for (int i = 0; i < N; i++) {
        char p[16];
        snprintf(p, sizeof(p), "c%d", i);
        done_init(&d[i]);
        forward1(f, e.server, "t1", toks[i], "f6", p, true, &d[i]);
        if (done_wait(&d[i]) != 0)
            fail_msg("forward %d (%s): %s (%s)", i, toks[i], fx_errname(d[i].rv), d[i].why);
        assert_true(fwd_stats(f).clients <= 2);
        expect_event(s, p);
    }
    fx_forward_stats st = fwd_stats(f);
    assert_int_equal(st.clients, 2);
    assert_int_equal(st.connects, 5); /* ta tb tc ta tb; tc was still pooled */
    assert_int_equal(st.failed, 0);
    free_and_check(f, d, N);
    fx_unsubscribe(s);
    fix_close(c);
    fix_env_deinit(&e);
}

/* ---- free ------------------------------------------------------------------------------- */

static void test_freeing_the_forwarder_answers_the_queued_forwards_closed(void **state)
{
    fix_env e;
    fix_env_init(&e, "fwd");
    fix_env_start(&e);
    char dead[32];
    int fd = dead_socket(dead, sizeof(dead));
    fx_forwarder *f = fwd_new(e.b, 0, 0);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    enum { N = 5 };
    done d[N];
    for (int i = 0; i < N; i++)
        done_init(&d[i]);
    /* The first keeps the thread connecting (1 s); the others wait queued. */
    forward1(f, dead, "t1", "tok", "f7", "q0", true, &d[0]);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (fwd_stats(f).queued_bytes != 0) {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(1);
    }
    for (int i = 1; i < N; i++)
        forward1(f, dead, "t1", "tok", "f7", "q", true, &d[i]);
    assert_int_equal(fwd_stats(f).queued_bytes, (N - 1) * (1 + 16));
    fx_forwarder_free(f);
    /* Every callback ran once, before free returned. */
    assert_int_equal(done_calls(&d[0]), 1);
    assert_true(d[0].rv < 0);
    for (int i = 1; i < N; i++) {
        assert_int_equal(done_calls(&d[i]), 1);
        assert_int_equal(d[i].rv, FX_ECLOSED);
        assert_non_null(strstr(d[i].why, "stopping"));
    }
    /* Each failed forward is counted, the ones the stop answered too. */
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, cluster_forward_failed), N);
    for (int i = 0; i < N; i++)
        done_deinit(&d[i]);
    close(fd);
    fix_env_deinit(&e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_an_acked_forward_is_answered_once_appended_and_read_in_order),
    cmocka_unit_test(test_one_message_forwards_go_direct_once_connected_and_keep_their_order),
    cmocka_unit_test(test_an_unacked_forward_reaches_the_owner),
    cmocka_unit_test(test_a_forward_to_a_dead_owner_names_it_and_the_next_fails_at_once),
    cmocka_unit_test(test_a_forward_past_the_queue_byte_bound_is_refused_full_and_counted),
    cmocka_unit_test(test_the_owner_refuses_a_forward_with_a_bad_token_and_takes_a_good_one),
    cmocka_unit_test(test_more_publishers_than_max_clients_close_the_least_recently_used),
    cmocka_unit_test(test_freeing_the_forwarder_answers_the_queued_forwards_closed),
};

FX_TEST_MAIN(tests)
