/* Subscribe redirects (docs/protocol.md "Redirects", docs/client.md
 * "Redirects"): brokers in this process made to answer not_leader for a
 * stream by the test hook fx_broker_test_redirect_subscribe, libfelix
 * following them (hops, loops, generations, the route cache), the bytes a
 * client without FEATURE_REDIRECT gets (raw frames, broker_client.h), and
 * connect's seed list skipping a dead first address. Every broker uses the
 * first one's certificate, so one pin verifies them all. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "broker/test_hooks.h"
#include "integ/broker_client.h"

#define NB 4

/* Brokers 0..|n|-1 (B[0] is the one clients connect to) with one
 * certificate, and their addresses. */
typedef struct R {
    fix_env e[NB];
    int n;
    char cert[128], key[128];
} R;

static R *r_new(int n)
{
    R *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->n = n;
    for (int i = 0; i < n; i++) {
        fix_env_init(&r->e[i], "redir");
        if (i > 0) {
            r->e[i].bo.quic.cert_file = r->cert;
            r->e[i].bo.quic.key_file = r->key;
        }
        fix_env_start(&r->e[i]);
        if (i == 0) {
            snprintf(r->cert, sizeof(r->cert), "%s/tls-cert.pem", r->e[0].dir);
            snprintf(r->key, sizeof(r->key), "%s/tls-key.pem", r->e[0].dir);
        }
    }
    for (int i = 1; i < n; i++)
        assert_string_equal(fx_broker_fingerprint(r->e[i].b), fx_broker_fingerprint(r->e[0].b));
    return r;
}

static void r_free(R *r)
{
    for (int i = 0; i < r->n; i++) {
        for (int j = 0; j < 8; j++) {
            char name[64];
            snprintf(name, sizeof(name), "t1/" NS "/r%d", j);
            fx_broker_test_redirect_subscribe(r->e[i].b, name, NULL, NULL, 0);
        }
        fix_env_deinit(&r->e[i]);
    }
    free(r);
}

/* Broker |i| answers subscribes to stream |s| with not_leader naming
 * broker |to| (-1: no address) at |gen|. */
static void redirect(R *r, int i, const char *s, int to, uint64_t gen)
{
    char name[64];
    snprintf(name, sizeof(name), "t1/" NS "/%s", s);
    assert_int_equal(fx_broker_test_redirect_subscribe(r->e[i].b, name, to < 0 ? "nowhere" : "nx",
                                                       to < 0 ? NULL : r->e[to].server, gen),
                     0);
}

static void unredirect(R *r, int i, const char *s)
{
    char name[64];
    snprintf(name, sizeof(name), "t1/" NS "/%s", s);
    assert_int_equal(fx_broker_test_redirect_subscribe(r->e[i].b, name, NULL, NULL, 0), 0);
}

static fx_client *r_connect(R *r, int i, const char *server)
{
    fx_client_opts o;
    fix_client_opts(&o, r->e[i].b, server != NULL ? server : r->e[i].server, "t1", "tok");
    return fix_connect(&o);
}

static fx_client_stats stats(fx_client *c)
{
    fx_client_stats st;
    assert_int_equal(fx_client_get_stats(c, &st), 0);
    return st;
}

/* Subscribing fails with FX_EREDIRECT, the text holding |what|. */
static void expect_refused(fx_client *c, const char *stream, const char *what)
{
    fx_subscription *s = NULL;
    int rv = fx_subscribe(&s, c, NS, stream, NULL);
    char msg[256];
    fx_client_last_error(NULL, msg, sizeof(msg));
    if (rv != FX_EREDIRECT || strstr(msg, what) == NULL)
        fail_msg("subscribe %s: %s (%s), want FX_EREDIRECT with '%s'", stream, fx_errname(rv), msg,
                 what);
    assert_null(s);
}

/* Publishes "m<i>" acked through |pub| and reads it from |s|. */
static void expect_delivery(fx_client *pub, fx_subscription *s, const char *stream, int i)
{
    char p[16];
    int n = snprintf(p, sizeof(p), "m%d", i);
    assert_int_equal(fx_publish(pub, NS, stream, p, (size_t)n, FX_ACK_PER_MESSAGE), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    assert_int_equal(ev.len, (size_t)n);
    assert_memory_equal(ev.payload, p, (size_t)n);
}

/* A bound UDP socket that never answers: a dead broker address. */
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

/* ---- libfelix follows ---------------------------------------------------------------- */

static void test_a_subscribe_redirected_to_the_owner_receives_what_is_published_there(void **state)
{
    R *r = r_new(2);
    redirect(r, 0, "r1", 1, 7);
    fx_client *c = r_connect(r, 0, NULL);
    fx_client *pub = r_connect(r, 1, NULL);
    fx_subscription *s = fix_subscribe(c, "r1", NULL);
    fx_client_stats st = stats(c);
    assert_int_equal(st.redirects, 1);
    assert_int_equal(st.redirects_refused, 0);
    expect_delivery(pub, s, "r1", 1);
    expect_delivery(pub, s, "r1", 2);
    /* The route cache sends the next subscribe straight to the owner: no
     * second redirect. */
    fx_subscription *s2 = fix_subscribe(c, "r1", NULL);
    st = stats(c);
    assert_int_equal(st.redirects, 1);
    assert_int_equal(st.route_misses, 0);
    expect_delivery(pub, s2, "r1", 3);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    assert_memory_equal(ev.payload, "m3", 2);
    /* A stream the broker serves itself is not redirected. */
    fx_subscription *s3 = fix_subscribe(c, "plain", NULL);
    assert_int_equal(stats(c).redirects, 1);
    fx_unsubscribe(s3);
    fx_unsubscribe(s2);
    fx_unsubscribe(s);
    fix_close(pub);
    fix_close(c);
    r_free(r);
}

static void test_a_redirect_loop_and_a_redirect_without_address_are_refused(void **state)
{
    R *r = r_new(2);
    redirect(r, 0, "r2", 1, 1);
    redirect(r, 1, "r2", 0, 1);
    redirect(r, 0, "r3", -1, 1);
    fx_client *c = r_connect(r, 0, NULL);
    expect_refused(c, "r2", "redirect loop");
    fx_client_stats st = stats(c);
    assert_int_equal(st.redirects, 1);
    assert_int_equal(st.redirects_refused, 1);
    expect_refused(c, "r3", "whose address the broker does not know");
    assert_int_equal(stats(c).redirects_refused, 2);
    /* The client goes on: the loop broken, the stream is served. */
    unredirect(r, 1, "r2");
    fx_subscription *s = fix_subscribe(c, "r2", NULL);
    fx_unsubscribe(s);
    fix_close(c);
    r_free(r);
}

static void test_a_fourth_redirect_is_over_the_hop_limit(void **state)
{
    R *r = r_new(4);
    redirect(r, 0, "r4", 1, 1);
    redirect(r, 1, "r4", 2, 1);
    redirect(r, 2, "r4", 3, 1);
    /* Three hops are fine. */
    fx_client *c = r_connect(r, 0, NULL);
    fx_client *pub = r_connect(r, 3, NULL);
    fx_subscription *s = fix_subscribe(c, "r4", NULL);
    assert_int_equal(stats(c).redirects, 3);
    expect_delivery(pub, s, "r4", 1);
    fx_unsubscribe(s);
    /* A fourth is not followed (a loop back to the first broker too, but
     * the limit is checked first). */
    redirect(r, 3, "r4", 0, 1);
    fx_client *c2 = r_connect(r, 0, NULL);
    expect_refused(c2, "r4", "over the limit");
    fx_client_stats st = stats(c2);
    assert_int_equal(st.redirects, 3);
    assert_int_equal(st.redirects_refused, 1);
    fix_close(c2);
    fix_close(pub);
    fix_close(c);
    r_free(r);
}

static void test_an_older_generation_is_not_followed_and_a_newer_one_is(void **state)
{
    R *r = r_new(2);
    redirect(r, 0, "r5", 1, 7);
    fx_client *c = r_connect(r, 0, NULL);
    fx_subscription *s = fix_subscribe(c, "r5", NULL);
    fx_unsubscribe(s);
    /* The owner (cached at generation 7) now names broker 0 at 5: stale. */
    redirect(r, 1, "r5", 0, 5);
    expect_refused(c, "r5", "older than generation 7");
    fx_client_stats st = stats(c);
    assert_int_equal(st.route_misses, 1);
    assert_int_equal(st.redirects_refused, 1);
    assert_int_equal(st.redirects, 1);
    /* At 8 it is followed back to broker 0, which serves it now. */
    unredirect(r, 0, "r5");
    redirect(r, 1, "r5", 0, 8);
    fx_client *pub = r_connect(r, 0, NULL);
    s = fix_subscribe(c, "r5", NULL);
    st = stats(c);
    assert_int_equal(st.route_misses, 2);
    assert_int_equal(st.redirects, 2);
    expect_delivery(pub, s, "r5", 1);
    fx_unsubscribe(s);
    fix_close(pub);
    fix_close(c);
    r_free(r);
}

static void test_a_subscription_whose_owner_connection_is_lost_asks_the_server_again(void **state)
{
    R *r = r_new(2);
    redirect(r, 0, "r6", 1, 7);
    fx_client *c = r_connect(r, 0, NULL);
    fx_client *pub = r_connect(r, 1, NULL);
    fx_subscription *s = fix_subscribe(c, "r6", NULL);
    expect_delivery(pub, s, "r6", 1);
    /* The owner cuts its subscribers' connections: the subscription goes
     * back to the server, which names the owner again. */
    assert_true(fx_broker_test_cut_connections(r->e[1].b, true) >= 1);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_sub_stats ss;
    do {
        assert_true(fx_now_ns() < deadline);
        sleep_ms(5);
        assert_int_equal(fx_subscription_stats(s, &ss), 0);
    } while (ss.reconnects < 1);
    assert_int_equal(stats(c).redirects, 2);
    /* It resumed after the last offset it took: the next message is the
     * next one, no gap. */
    expect_delivery(pub, s, "r6", 2);
    fx_unsubscribe(s);
    fix_close(pub);
    fix_close(c);
    r_free(r);
}

static void test_a_redirect_to_a_broker_that_never_answers_fails_the_subscribe(void **state)
{
    R *r = r_new(1);
    char dead[32], name[64];
    int fd = dead_socket(dead, sizeof(dead));
    snprintf(name, sizeof(name), "t1/" NS "/r7");
    assert_int_equal(fx_broker_test_redirect_subscribe(r->e[0].b, name, "n9", dead, 3), 0);
    fx_client_opts o;
    fix_client_opts(&o, r->e[0].b, r->e[0].server, "t1", "tok");
    o.connect_timeout_ms = 500; /* the handshake's bound and fx_subscribe's */
    fx_client *c = fix_connect(&o);
    fx_subscription *s = NULL;
    int rv = fx_subscribe(&s, c, NS, "r7", NULL);
    assert_true(rv < 0);
    assert_null(s);
    assert_int_equal(stats(c).redirects, 1);
    /* The client goes on. */
    s = fix_subscribe(c, "plain", NULL);
    fx_unsubscribe(s);
    fix_close(c);
    close(fd);
    r_free(r);
}

/* ---- the bytes, to clients with and without the bit --------------------------------------- */

static void auth_features(T *t, tstream *s, uint32_t features)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "any-token", true, 63);
    m.client_features = features;
    m.has_client_features = true;
    send_msg(s, &m);
    expect_msg(t, s, FX_MSG_AUTH_OK, NULL, NULL);
}

static void send_subscribe(tstream *s, const char *stream)
{
    fx_msg m = {.type = FX_MSG_SUBSCRIBE, .tenant_id = "t1", .ns = NS, .stream = stream};
    send_msg(s, &m);
}

static void test_not_leader_bytes_and_the_error_a_client_without_the_bit_gets(void **state)
{
    T *t = t_new();
    t_start(t);
    assert_int_equal(
        fx_broker_test_redirect_subscribe(t->b, "t1/" NS "/demo", "n2", "127.0.0.1:5001", 7), 0);
    assert_int_equal(fx_broker_test_redirect_subscribe(t->b, "t1/" NS "/lost", "n3", NULL, 9), 0);
    tconn *c = t_connect(t);
    static const struct {
        const char *stream;
        bool features;
        uint32_t bits;
        const char *want;
    } cases[] = {
        {"demo", false, 0,
         "{\"type\":\"error\",\"message\":\"stream t1/default/demo is served by n2\"}"},
        {"demo", true, 0,
         "{\"type\":\"error\",\"message\":\"stream t1/default/demo is served by n2\"}"},
        {"demo", true, FX_FEATURE_ERROR_CODES,
         "{\"type\":\"error\",\"message\":\"stream t1/default/demo is served by n2\","
         "\"code\":\"not_leader\",\"retry\":\"redirect\"}"},
        {"demo", true, FX_FEATURE_TOPOLOGY | FX_FEATURE_REDIRECT,
         "{\"type\":\"not_leader\",\"node_id\":\"n2\",\"addr\":\"127.0.0.1:5001\",\"generation\":"
         "7}"},
        {"lost", true, FX_FEATURE_REDIRECT,
         "{\"type\":\"not_leader\",\"node_id\":\"n3\",\"generation\":9}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tstream *s = open_bidi(c);
        if (cases[i].features)
            auth_features(t, s, cases[i].bits);
        else
            auth(t, s, "t1");
        send_subscribe(s, cases[i].stream);
        expect_json(t, s, cases[i].want);
        expect_end(t, s);
    }
    /* No event stream was opened for any of them. */
    for (int i = 0; i < MAX_STREAMS; i++)
        assert_false(c->s[i].used && c->s[i].uni);
    /* A client sending not_leader gets what any broker-only message gets. */
    tstream *s = open_bidi(c);
    auth(t, s, "t1");
    send_json(s, "{\"type\":\"not_leader\",\"node_id\":\"n2\",\"generation\":1}");
    expect_json(t, s, "{\"type\":\"error\",\"message\":\"unexpected message type\"}");
    fx_broker_test_redirect_subscribe(t->b, "t1/" NS "/demo", NULL, NULL, 0);
    fx_broker_test_redirect_subscribe(t->b, "t1/" NS "/lost", NULL, NULL, 0);
    t_free(t);
}

/* ---- seed list ---------------------------------------------------------------------- */

static void test_the_seed_list_skips_a_dead_first_address(void **state)
{
    R *r = r_new(1);
    char dead[32], list[96];
    int fd = dead_socket(dead, sizeof(dead));
    snprintf(list, sizeof(list), "%s, %s", dead, r->e[0].server);
    fx_client_opts o;
    fix_client_opts(&o, r->e[0].b, list, "t1", "tok");
    o.connect_timeout_ms = 1000; /* each address's own bound */
    fx_client *c = fix_connect(&o);
    fx_subscription *s = fix_subscribe(c, "seed", NULL);
    expect_delivery(c, s, "seed", 1);
    fx_unsubscribe(s);
    fix_close(c);
    /* Every address dead: the text names each. */
    snprintf(list, sizeof(list), "%s,%s", dead, dead);
    o.server = list;
    o.connect_timeout_ms = 300;
    c = NULL;
    assert_int_equal(fx_client_connect(&c, &o), FX_ETIMEDOUT);
    char msg[512];
    fx_client_last_error(NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "no server of the list answered"));
    /* A malformed list is refused before any address is tried. */
    static const char *const bad[] = {"127.0.0.1:1,,127.0.0.1:2", "127.0.0.1:1,", "127.0.0.1:1,x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.server = bad[i];
        assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    }
    /* So is a bad option, whatever the list. */
    o.server = list;
    o.tenant = "";
    assert_int_equal(fx_client_connect(&c, &o), FX_ECONFIG);
    close(fd);
    r_free(r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_subscribe_redirected_to_the_owner_receives_what_is_published_there),
    cmocka_unit_test(test_a_redirect_loop_and_a_redirect_without_address_are_refused),
    cmocka_unit_test(test_a_fourth_redirect_is_over_the_hop_limit),
    cmocka_unit_test(test_an_older_generation_is_not_followed_and_a_newer_one_is),
    cmocka_unit_test(test_a_subscription_whose_owner_connection_is_lost_asks_the_server_again),
    cmocka_unit_test(test_a_redirect_to_a_broker_that_never_answers_fails_the_subscribe),
    cmocka_unit_test(test_not_leader_bytes_and_the_error_a_client_without_the_bit_gets),
    cmocka_unit_test(test_the_seed_list_skips_a_dead_first_address),
};

FX_TEST_MAIN(tests)
