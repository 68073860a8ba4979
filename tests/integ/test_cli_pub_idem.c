/* `felix pub --idempotent` through a broker restart, the binaries run as
 * child processes: a felix-broker (--dev, a durable stream) is killed with
 * SIGKILL while felix pub publishes generated payloads and started again on
 * the same port and state; pub reconnects, re-sends what was unanswered,
 * and its summary counts every message acked once; the stream holds each
 * payload exactly once. Ports are 0 / the first run's; timeouts are hang
 * guards only (the publish ack timeout is raised above the client's idle
 * timeout, so a publish in doubt waits for the reconnect). */
/* fx-test-libs: fx_base */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A hang guard above the client's idle timeout (30 s): when the restarted
 * broker comes up after the client's retransmissions backed off, or their
 * packets are too small to draw a stateless reset, the loss is seen only
 * at the idle timeout; the client then reconnects and re-sends. */
#define PROC_HANG_MS 60000

#include "integ/proc.h"

#define N 600

typedef struct cli {
    char dir[64];
    char felix[512], broker[512];
    char text[1 << 16];
    char server[64], pin[80];
} cli;

static void path_in(const cli *t, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", t->dir, name);
}

/* Starts felix-broker on |bind| with the state and durable dirs of |t|
 * and waits for its address line; returns its pid. */
static pid_t broker_start(cli *t, const char *bind, const char *tag)
{
    char quic[96], state[160], durable[160], out[128], err[128], oname[32], ename[32];
    snprintf(quic, sizeof(quic), "quic_bind=%s", bind);
    snprintf(state, sizeof(state), "state_dir=%s/state", t->dir);
    snprintf(durable, sizeof(durable), "durable_storage_dir=%s/logs", t->dir);
    snprintf(oname, sizeof(oname), "broker-%s.out", tag);
    snprintf(ename, sizeof(ename), "broker-%s.err", tag);
    path_in(t, oname, out, sizeof(out));
    path_in(t, ename, err, sizeof(err));
    char *argv[] = {t->broker, "--dev", "--set", quic,    "--set", "metrics_bind=127.0.0.1:0",
                    "--set",   state,   "--set", durable, "--set", "durable_default=true",
                    NULL};
    pid_t pid = proc_spawn(argv, out, err, NULL, false);
    proc_wait_text(out, "export FELIX_SERVER=", t->text, sizeof(t->text), pid);
    const char *line = strstr(t->text, "export FELIX_SERVER=");
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", t->server, t->pin), 2);
    return pid;
}

static void test_idempotent_pub_counts_each_message_once_through_a_broker_kill(void **state)
{
    (void)state;
    cli t;
    proc_binary("felix", t.felix, sizeof(t.felix));
    proc_binary("felix-broker", t.broker, sizeof(t.broker));
    snprintf(t.dir, sizeof(t.dir), "/tmp/fxclipiXXXXXX");
    assert_non_null(mkdtemp(t.dir));
    pid_t b = broker_start(&t, "127.0.0.1:0", "1");
    char server[64], pin[80];
    snprintf(server, sizeof(server), "%s", t.server);
    snprintf(pin, sizeof(pin), "%s", t.pin);

    char out[128], err[128];
    path_in(&t, "pub.out", out, sizeof(out));
    path_in(&t, "pub.err", err, sizeof(err));
    char count[16];
    snprintf(count, sizeof(count), "%d", N);
    char *pub[] = {t.felix,  "pub", "--server", server, "--pin",  pin,   "--idempotent",
                   "--size", "16",  "--count",  count,  "--rate", "400", "t1/default/orders",
                   NULL};
    /* One publish connection: with the default pool, connection 0 stays
     * idle while another carries the publishes, so nothing it sends after
     * the kill draws the new broker's stateless reset; it still looks alive
     * at close, whose handshake then waits for idle_timeout_ms (30 s), with
     * or without --idempotent. */
    char *env[] = {"FELIX_PUB_CONN_POOL=1", "FELIX_PUBLISH_ACK_TIMEOUT_MS=50000", NULL};
    pid_t p = proc_spawn(pub, out, err, env, false);
    usleep(600 * 1000);
    assert_int_equal(kill(b, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(b, &st, 0), b);
    proc_track(b, false);
    b = broker_start(&t, server, "2"); /* same port, same certificate, same logs */
    assert_string_equal(t.pin, pin);
    int pst = proc_wait(p, "felix pub");
    proc_slurp(err, t.text, sizeof(t.text));
    if (pst != 0)
        fail_msg("felix pub --idempotent exited %d:\n%s", pst, t.text);
    char want[96];
    snprintf(want, sizeof(want), "published %d, acked %d, errors 0", N, N);
    proc_assert_contains(t.text, want);

    /* The stream holds every payload once. */
    path_in(&t, "sub.out", out, sizeof(out));
    path_in(&t, "sub.err", err, sizeof(err));
    char *sub[] = {
        t.felix,        "sub",  "--server",          server, "--pin", pin, "--from", "earliest",
        "--timeout-ms", "1500", "t1/default/orders", NULL};
    proc_wait(proc_spawn(sub, out, err, NULL, false), "felix sub");
    proc_slurp(out, t.text, sizeof(t.text));
    static bool seen[N];
    int lines = 0;
    for (char *l = strtok(t.text, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        unsigned long seq;
        if (sscanf(l, "%lu ", &seq) != 1 || seq >= N + 1)
            fail_msg("unexpected record '%s'", l);
        if (seen[seq % N]) /* generated payloads count from 0 or 1 */
            fail_msg("record '%s' is in the stream twice", l);
        seen[seq % N] = true;
        lines++;
    }
    assert_int_equal(lines, N);
    assert_int_equal(kill(b, SIGTERM), 0);
    assert_int_equal(proc_wait(b, "felix-broker"), 0);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t.dir);
    assert_int_equal(system(cmd), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_idempotent_pub_counts_each_message_once_through_a_broker_kill,
                              proc_teardown),
};
FX_TEST_MAIN(tests)
