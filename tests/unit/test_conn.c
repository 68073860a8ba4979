/* Unit twin of src/broker/conn.c: a client connection's life on the
 * one-thread broker of conn_fixture.h: the max_connections limit, the close
 * that takes its subscriptions and streams with it, the token expiry timer,
 * and the connection-wide cap on unwritten replies that stops its streams
 * reading. */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include <time.h>

/* The fixture's client now talks over |qc| (a connection the test
 * accepted): the helpers read and write there. */
static void use_conn(cf *f, fx_quic_conn *qc)
{
    f->qc = qc;
    f->ended = false;
    f->nrd = 0;
}

/* Whether the broker closed (or is closing) |qc| with application code
 * |code|. */
static bool conn_closed_with(const fx_quic_conn *qc, uint64_t code)
{
    return fq_is_closing(qc) && qc->info.app && !qc->info.remote && qc->info.code == code;
}

static uint64_t counter(size_t off)
{
    fx_metrics_snapshot s;
    fx_metrics_snapshot_take(&s);
    return *(const uint64_t *)((const char *)&s.c + off);
}

#define COUNTER(field) counter(offsetof(fx_metrics_counters, field))

/* ---- max_connections ----------------------------------------------------------------------- */

static void one_conn(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->max_connections = 1;
    o->max_connections_per_ip = 0;
}

/* With max_connections 1, a second connection is closed with
 * FXB_CODE_TOO_MANY_CONNS (counted) while the first is served; once the
 * first is gone its slot takes a new connection. */
static void test_max_connections_refused(void **state)
{
    (void)state;
    cf *f = cf_new(one_conn);
    uint64_t refused = COUNTER(broker_conn_refused);
    fx_quic_conn *second = fq_accept(f->ep);
    assert_non_null(second);
    assert_true(conn_closed_with(second, FXB_CODE_TOO_MANY_CONNS));
    assert_string_equal(second->info.text, "too many connections");
    assert_false(fq_turn(second)); /* it ends */
    assert_int_equal(COUNTER(broker_conn_refused) - refused, 1);
    assert_true(cf_is_open(f));
    cf_auth(f, 0, "t1");
    fq_close_remote(f->qc, 0);
    cf_turn(f);
    assert_true(f->ended);
    cf_settle(f);
    fx_quic_conn *third = fq_accept(f->ep);
    assert_false(fq_is_closing(third));
    use_conn(f, third);
    cf_auth(f, 0, "t1");
    assert_int_equal(COUNTER(broker_conn_refused) - refused, 1);
    cf_free(f);
}

/* ---- close ---------------------------------------------------------------------------------- */

/* The client closes a connection holding two subscriptions, an
 * authenticated stream and a stream with half a frame: the subscriptions
 * are unregistered (gauges back) and the broker goes on serving the same
 * streams to a new connection, whose subscription gets only what is
 * published after it. */
static void test_close_releases_subscriptions_and_streams(void **state)
{
    (void)state;
    cf *f = cf_new(NULL);
    int64_t subs = atomic_load(&fx_gauges.sub_subscriptions);
    int64_t conns = atomic_load(&fx_gauges.sub_active_connections);
    cf_auth(f, 0, "t1");
    cf_subscribed(f, 0, "t1", "a");
    cf_auth(f, 4, "t1");
    cf_subscribed(f, 4, "t1", "b");
    cf_auth(f, 8, "t1");
    size_t n;
    const char *pl[] = {"half"};
    uint8_t *p = cf_publish_frame("t1", "a", pl, 1, false, 0, &n);
    cf_write(f, 8, p, n / 2, false);
    cf_settle(f);
    assert_int_equal(atomic_load(&fx_gauges.sub_subscriptions), subs + 2);
    assert_int_equal(atomic_load(&fx_gauges.sub_active_connections), conns + 1);
    fq_close_remote(f->qc, 0);
    cf_turn(f);
    assert_true(f->ended);
    cf_settle(f);
    assert_int_equal(atomic_load(&fx_gauges.sub_subscriptions), subs);
    assert_int_equal(atomic_load(&fx_gauges.sub_active_connections), conns);
    use_conn(f, fq_accept(f->ep));
    cf_auth(f, 0, "t1");
    cf_write(f, 0, p, n, false);
    free(p);
    cf_publish(f, 0, "t1", "b", "later");
    cf_settle(f);
    cf_auth(f, 4, "t1");
    int64_t uni = cf_subscribed(f, 4, "t1", "a");
    cf_auth(f, 8, "t1");
    cf_publish(f, 8, "t1", "a", "new");
    cf_settle(f);
    char ev[4][64];
    assert_int_equal(cf_read_events(f, uni, ev, 4), 1);
    assert_string_equal(ev[0], "new");
    cf_free(f);
}

/* ---- token expiry --------------------------------------------------------------------------- */

static int64_t exp_at; /* the Unix second after which the tokens no longer hold */

static int64_t unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int verify_any(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                      void **pctx, char *why, size_t whylen)
{
    (void)user, (void)tenant, (void)token, (void)len, (void)now_s, (void)why, (void)whylen;
    *pctx = &exp_at;
    return 0;
}

static bool allows_all(void *user, const void *ctx, fx_broker_auth_action action,
                       const char *tenant, const char *ns, const char *stream)
{
    (void)user, (void)ctx, (void)action, (void)tenant, (void)ns, (void)stream;
    return true;
}

static void release_none(void *user, void *ctx)
{
    (void)user, (void)ctx;
}

static int64_t expiry_of(void *user, const void *ctx)
{
    (void)user;
    return *(const int64_t *)ctx;
}

static void expiring(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->auth = (fx_broker_auth){
        .verify = verify_any, .allows = allows_all, .release = release_none, .expiry = expiry_of};
    o->auth_rate_per_ip = 1000;
}

/* Tokens that expire after the current Unix second: once that second has
 * passed, nothing ends until the connection's expiry timer fires; then the
 * authenticated stream is ended with "token expired", the subscription's
 * event stream is reset with FXB_CODE_AUTH_EXPIRED (both counted), and the
 * connection stays open. */
static void test_token_expiry_timer_ends_streams(void **state)
{
    (void)state;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_nsec > 500000000L) /* at least half a second ahead for the set-up */
        sleep_ms(1000 - ts.tv_nsec / 1000000L + 5);
    exp_at = unix_now();
    cf *f = cf_new(expiring);
    uint64_t expired = COUNTER(broker_auth_expired);
    cf_auth(f, 0, "t1");
    int64_t uni = cf_subscribed(f, 0, "t1", "s");
    cf_auth(f, 4, "t1");
    while (unix_now() <= exp_at)
        sleep_ms(5);
    cf_settle(f); /* the clock of the loops has not moved: no check yet */
    cf_frame fr;
    assert_false(cf_read_frame(f, 4, &fr));
    assert_false(cf_stream(f, uni)->reset);
    cf_advance(f, FX_NS_PER_S);
    cf_settle(f);
    cf_expect_msg(f, 4, FX_MSG_ERROR, "token expired");
    assert_true(cf_stream(f, 4)->tx_fin);
    fq_stream *u = cf_stream(f, uni);
    assert_true(u->reset);
    assert_int_equal(u->reset_code, FXB_CODE_AUTH_EXPIRED);
    assert_int_equal(COUNTER(broker_auth_expired) - expired, 2);
    assert_true(cf_is_open(f));
    cf_free(f);
}

/* ---- unwritten replies ---------------------------------------------------------------------- */

static void no_room(fx_broker_opts *o, fq_config *q)
{
    (void)o;
    q->unacked_cap = 1; /* the first reply fills it: the rest stay queued */
}

/* cf_settle for a client whose every acknowledgement lets one more reply
 * out: as many rounds as that takes. */
static void settle_slowly(cf *f)
{
    for (unsigned i = 0; i < 100000; i++) {
        cf_ack(f);
        cf_turn(f);
        bool any = cf_run(f);
        any |= cf_fire_due();
        if (!any && (f->qc == NULL || fq_unacked(f->qc) == 0))
            return;
    }
    fail_msg("the broker never settled");
}

/* Writes |count| acked publishes (request ids from |id|) on |sid| as one
 * write. */
static void publish_acked(cf *f, int64_t sid, uint64_t id, unsigned count)
{
    const char *pl[] = {"x"};
    size_t one;
    uint8_t *frame = cf_publish_frame("t1", "s", pl, 1, true, 0, &one);
    free(frame);
    uint8_t *all = malloc(one * count);
    assert_non_null(all);
    for (unsigned i = 0; i < count; i++) {
        size_t n;
        uint8_t *p = cf_publish_frame("t1", "s", pl, 1, true, id + i, &n);
        assert_int_equal(n, one);
        memcpy(all + (size_t)i * one, p, n);
        free(p);
    }
    assert_int_equal(cf_write(f, sid, all, one * count, false), one * count);
    free(all);
}

/* A client that reads no replies: once FXB_CONN_REPLIES_HIGH of them wait
 * on its streams (each stream under its own mark), no stream of the
 * connection reads a byte more (counted); once the client reads, they are
 * written and reading resumes, in order. */
static void test_conn_reply_cap_stops_reading(void **state)
{
    (void)state;
    cf *f = cf_new(no_room);
    uint64_t full = COUNTER(broker_conn_replies_full);
    for (int64_t sid = 0; sid <= 12; sid += 4) {
        fx_msg m;
        fx_msg_init_auth(&m, "t1", "token", true, 0);
        cf_write_msg(f, sid, &m);
        settle_slowly(f);
        cf_expect_msg(f, sid, FX_MSG_AUTH_OK, NULL);
    }
    unsigned per = FXB_CONN_REPLIES_HIGH / 3 + 8; /* under FXB_REPLIES_HIGH each */
    assert_true(per < FXB_REPLIES_HIGH);
    for (int64_t sid = 0; sid <= 8; sid += 4) {
        publish_acked(f, sid, 1 + (uint64_t)sid * 1000, per);
        cf_pump(f);
    }
    assert_int_equal(COUNTER(broker_conn_replies_full) - full, 1);
    fq_stream *s12 = cf_stream(f, 12);
    size_t consumed = s12->rx_consumed;
    publish_acked(f, 12, 12001, 1);
    cf_pump(f);
    assert_int_equal(s12->rx_consumed, consumed); /* not read */
    cf_frame fr;
    assert_false(cf_read_frame(f, 12, &fr));
    settle_slowly(f);
    assert_true(s12->rx_consumed > consumed);
    cf_expect_ack(f, 12, 12001, NULL);
    for (unsigned i = 0; i < per; i++)
        cf_expect_ack(f, 8, 8001 + i, NULL);
    settle_slowly(f);
    cf_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_max_connections_refused),
    cmocka_unit_test(test_close_releases_subscriptions_and_streams),
    cmocka_unit_test(test_token_expiry_timer_ends_streams),
    cmocka_unit_test(test_conn_reply_cap_stops_reading),
};

FX_TEST_MAIN(tests)
