/* libfelix against a felix-broker child process that gets kill -9: the ICMP
 * port unreachable its host sends for the client's next datagram ends the
 * connection at once (docs/client.md "A broker that dies"), far inside the
 * 30 s idle timeout, and a broker restarted on the same port takes the
 * client back. Timings are bounds the ICMP path meets with a wide margin
 * (it is one keep-alive period, 300 ms here), not measurements. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <sys/stat.h>

#include "integ/proc_broker.h"

#include "felix/felix.h"

#define NS "default"
#define KEEPALIVE_MS 300
#define IDLE_MS 30000

typedef struct run {
    char dir[64];
    char broker[512];
    char out[128], err[128], state_set[160], bind_set[64];
    char text[16384];
    char server[64], pin[80];
    pid_t pid;
} run;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void run_init(run *r)
{
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxicmpXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state_set, sizeof(r->state_set), "state_dir=%s/state", r->dir);
    snprintf(r->bind_set, sizeof(r->bind_set), "quic_bind=127.0.0.1:0");
}

/* Starts the broker (on the port |bind_set| names) and reads its address
 * and pin; the state directory keeps the certificate across restarts. */
static void start(run *r)
{
    char *argv[] = {r->broker,     "--set", r->bind_set, "--set", "metrics_bind=127.0.0.1:0",
                    "--set",       r->state_set,         NULL};
    unlink(r->out);
    r->pid = proc_spawn(argv, r->out, r->err, NULL, false);
    proc_broker_address(r->out, r->text, sizeof(r->text), r->pid, r->server, r->pin);
}

static void kill_9(run *r)
{
    assert_int_equal(kill(r->pid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(r->pid, &st, 0), r->pid);
    proc_track(r->pid, false);
    assert_true(WIFSIGNALED(st));
}

static void run_free(run *r)
{
    (void)nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A client with a 30 s idle timeout (a dead broker found by it would take
 * 30 s) and short keep-alives (the datagrams that draw the ICMP errors). */
static fx_client *connect_to(run *r, bool reconnect)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = r->server;
    o.server_name = "localhost";
    o.pin_sha256 = r->pin;
    o.tenant = "t1";
    o.token = "any-token";
    o.connect_timeout_ms = PROC_HANG_MS;
    o.idle_timeout_ms = IDLE_MS;
    o.keepalive_ms = KEEPALIVE_MS;
    o.reconnect = reconnect;
    o.reconnect_initial_ms = 50;
    o.reconnect_max_ms = 200;
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    if (rv != 0)
        fail_msg("connect to %s: %s", r->server, fx_strerror(rv));
    return c;
}

static void test_kill_9_of_its_broker_ends_a_subscription_within_1_s(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r);
    fx_client *c = connect_to(&r, false);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "icmp", NULL), 0);
    assert_int_equal(fx_publish(c, NS, "icmp", "live", 4, FX_ACK_PER_MESSAGE), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
    kill_9(&r);
    uint64_t t0 = proc_now_ms();
    int rv;
    while ((rv = fx_subscription_next(s, &ev, 50)) == FX_ETIMEDOUT) {
        if (proc_now_ms() - t0 > 5000)
            fail_msg("the subscription still waits %llu ms after kill -9",
                     (unsigned long long)(proc_now_ms() - t0));
    }
    uint64_t took = proc_now_ms() - t0;
    printf("kill -9 -> subscription ended in %llu ms (%s)\n", (unsigned long long)took,
           fx_strerror(rv));
    assert_true(took < 1000);
    fx_sub_error e;
    assert_int_equal(fx_subscription_error(s, &e), 0);
    assert_int_equal(e.code, -ECONNREFUSED);
    proc_assert_contains(e.message, "port unreachable");
    fx_client_stats st;
    assert_int_equal(fx_client_get_stats(c, &st), 0);
    assert_true(st.icmp_errors >= 1); /* each of its connections to the broker, at its turn */
    fx_unsubscribe(s);
    (void)fx_client_close(c, 1000); /* the broker is gone */
    run_free(&r);
}

static void test_a_broker_restarted_on_its_port_after_kill_9_takes_the_client_back(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r);
    fx_client *c = connect_to(&r, true);
    assert_int_equal(fx_publish(c, NS, "again", "before", 6, FX_ACK_PER_MESSAGE), 0);
    kill_9(&r);
    uint64_t t0 = proc_now_ms();
    fx_client_stats st;
    do {
        if (proc_now_ms() - t0 > 5000)
            fail_msg("no ICMP error counted %llu ms after kill -9",
                     (unsigned long long)(proc_now_ms() - t0));
        usleep(10000);
        assert_int_equal(fx_client_get_stats(c, &st), 0);
    } while (st.icmp_errors == 0);
    assert_true(proc_now_ms() - t0 < 1000);
    /* Back on the same port (same certificate): the reconnects, refused at
     * once while nothing listened, now complete. */
    const char *port = strrchr(r.server, ':');
    assert_non_null(port);
    snprintf(r.bind_set, sizeof(r.bind_set), "quic_bind=127.0.0.1%s", port);
    char before[64];
    snprintf(before, sizeof(before), "%s", r.server);
    start(&r);
    assert_string_equal(r.server, before);
    t0 = proc_now_ms();
    do {
        if (proc_now_ms() - t0 > PROC_HANG_MS)
            fail_msg("the client did not reconnect to the restarted broker");
        usleep(10000);
        assert_int_equal(fx_client_get_stats(c, &st), 0);
    } while (st.reconnects == 0);
    assert_int_equal(fx_publish(c, NS, "again", "after", 5, FX_ACK_PER_MESSAGE), 0);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "again", &(fx_start){.kind = FX_START_EARLIEST}), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
    assert_int_equal(ev.len, 5);
    assert_memory_equal(ev.payload, "after", 5);
    assert_true(st.icmp_errors >= 1);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r.pid, "felix-broker"), 0);
    run_free(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_kill_9_of_its_broker_ends_a_subscription_within_1_s,
                              proc_teardown),
    cmocka_unit_test_teardown(test_a_broker_restarted_on_its_port_after_kill_9_takes_the_client_back,
                              proc_teardown),
};
FX_TEST_MAIN(tests)
