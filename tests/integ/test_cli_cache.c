/* `felix cache put|get|del` against a felix-broker (--dev), both run as
 * child processes: a value put from the command line and read back raw, a
 * binary value put from stdin ('-') and read back byte for byte, a miss
 * (exit 1, one line on stderr), a TTL, TENANT/NS/CACHE and its tenant check,
 * usage errors and --help. Timeouts are hang guards only. */
/* fx-test-libs: fx_base */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "integ/proc.h"

typedef struct cli {
    char dir[64];
    char felix[512], broker[512];
    char text[1 << 16];
    char server[64], pin[80];
    pid_t b;
} cli;

static void path_in(const cli *t, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", t->dir, name);
}

static void start(cli *t)
{
    proc_binary("felix", t->felix, sizeof(t->felix));
    proc_binary("felix-broker", t->broker, sizeof(t->broker));
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxclicaXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    char state[160], out[128], err[128];
    snprintf(state, sizeof(state), "state_dir=%s/state", t->dir);
    path_in(t, "broker.out", out, sizeof(out));
    path_in(t, "broker.err", err, sizeof(err));
    char *argv[] = {
        t->broker, "--dev", "--set", "quic_bind=127.0.0.1:0", "--set", "metrics_bind=127.0.0.1:0",
        "--set",   state,   NULL};
    t->b = proc_spawn(argv, out, err, NULL, false);
    proc_wait_text(out, "export FELIX_SERVER=", t->text, sizeof(t->text), t->b);
    const char *line = strstr(t->text, "export FELIX_SERVER=");
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", t->server, t->pin), 2);
}

static void stop(cli *t)
{
    assert_int_equal(kill(t->b, SIGTERM), 0);
    assert_int_equal(proc_wait(t->b, "felix-broker"), 0);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

/* Runs `felix cache ARGS...` (the broker's address and pin first) with
 * stdin from |in| (NULL: /dev/null); stdout into |out| and stderr into
 * |err| (paths under the test dir, read back with proc_slurp). Returns the
 * exit status. */
static int felix_cache(cli *t, const char *in, const char *out, const char *err,
                       const char *const *args)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof(cmd), "exec '%s' cache", t->felix);
    bool first = true;
    for (size_t i = 0; args[i] != NULL; i++) {
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " '%s'", args[i]);
        if (first) { /* after the subcommand word: the connection flags */
            n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " --server %s --pin %s", t->server,
                          t->pin);
            first = false;
        }
    }
    if (in != NULL)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " < '%s'", in);
    assert_true(n < (int)sizeof(cmd));
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return proc_wait(proc_spawn(argv, out, err, NULL, false), "felix cache");
}

static void test_cli_cache_put_then_get_prints_the_value_raw(void **state)
{
    (void)state;
    cli t;
    start(&t);
    char out[128], err[128];
    path_in(&t, "o", out, sizeof(out));
    path_in(&t, "e", err, sizeof(err));
    const char *put[] = {"put", "default/sessions", "user-42", "{\"cart\": 3}", NULL};
    if (felix_cache(&t, NULL, out, err, put) != 0) {
        proc_slurp(err, t.text, sizeof(t.text));
        fail_msg("felix cache put failed: %s", t.text);
    }
    const char *get[] = {"get", "default/sessions", "user-42", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get), 0);
    size_t n = proc_slurp(out, t.text, sizeof(t.text));
    assert_int_equal(n, strlen("{\"cart\": 3}")); /* no newline added */
    assert_string_equal(t.text, "{\"cart\": 3}");
    /* TENANT/NS/CACHE names the same entry (the tenant is t1). */
    const char *get3[] = {"get", "t1/default/sessions", "user-42", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get3), 0);
    proc_slurp(out, t.text, sizeof(t.text));
    assert_string_equal(t.text, "{\"cart\": 3}");
    stop(&t);
}

static void test_cli_cache_put_from_stdin_is_binary_safe(void **state)
{
    (void)state;
    cli t;
    start(&t);
    char in[128], out[128], err[128];
    path_in(&t, "in.bin", in, sizeof(in));
    path_in(&t, "o", out, sizeof(out));
    path_in(&t, "e", err, sizeof(err));
    unsigned char bin[3000];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (unsigned char)(i * 31 + 7); /* NULs, newlines, high bytes */
    FILE *f = fopen(in, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bin, 1, sizeof(bin), f), sizeof(bin));
    fclose(f);
    const char *put[] = {"put", "default/blobs", "b1", "-", NULL};
    assert_int_equal(felix_cache(&t, in, out, err, put), 0);
    const char *get[] = {"get", "default/blobs", "b1", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get), 0);
    f = fopen(out, "rb");
    assert_non_null(f);
    unsigned char back[4000];
    size_t n = fread(back, 1, sizeof(back), f);
    fclose(f);
    assert_int_equal(n, sizeof(bin));
    assert_memory_equal(back, bin, n);
    stop(&t);
}

static void test_cli_cache_get_of_a_missing_or_expired_key_exits_1(void **state)
{
    (void)state;
    cli t;
    start(&t);
    char out[128], err[128];
    path_in(&t, "o", out, sizeof(out));
    path_in(&t, "e", err, sizeof(err));
    const char *get[] = {"get", "default/sessions", "nobody", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get), 1);
    assert_int_equal(proc_slurp(out, t.text, sizeof(t.text)), 0);
    proc_slurp(err, t.text, sizeof(t.text));
    proc_assert_contains(t.text, "not found");
    int lines = 0;
    for (const char *p = t.text; *p != '\0'; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 1); /* one line */
    const char *put[] = {"put", "--ttl-ms", "50", "default/sessions", "brief", "v", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, put), 0);
    usleep(300 * 1000);
    const char *get2[] = {"get", "default/sessions", "brief", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get2), 1);
    stop(&t);
}

static void test_cli_cache_del_prints_deleted_then_not_found(void **state)
{
    (void)state;
    cli t;
    start(&t);
    char out[128], err[128];
    path_in(&t, "o", out, sizeof(out));
    path_in(&t, "e", err, sizeof(err));
    const char *put[] = {"put", "default/sessions", "gone-soon", "v", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, put), 0);
    const char *del[] = {"del", "default/sessions", "gone-soon", NULL};
    if (felix_cache(&t, NULL, out, err, del) != 0) {
        proc_slurp(err, t.text, sizeof(t.text));
        fail_msg("felix cache del failed: %s", t.text);
    }
    proc_slurp(out, t.text, sizeof(t.text));
    assert_string_equal(t.text, "deleted\n");
    assert_int_equal(felix_cache(&t, NULL, out, err, del), 1);
    proc_slurp(out, t.text, sizeof(t.text));
    assert_string_equal(t.text, "not found\n");
    const char *get[] = {"get", "default/sessions", "gone-soon", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, get), 1);
    stop(&t);
}

static void test_cli_cache_usage_errors_exit_2_and_help_shows_an_example(void **state)
{
    (void)state;
    cli t;
    start(&t);
    char out[128], err[128];
    path_in(&t, "o", out, sizeof(out));
    path_in(&t, "e", err, sizeof(err));
    const char *bad_op[] = {"fetch", "default/c", "k", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, bad_op), 2);
    const char *no_value[] = {"put", "default/c", "k", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, no_value), 2);
    const char *bad_scope[] = {"get", "justone", "k", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, bad_scope), 2);
    const char *other_tenant[] = {"get", "--tenant", "t2", "t1/default/c", "k", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, other_tenant), 2);
    proc_slurp(err, t.text, sizeof(t.text));
    proc_assert_contains(t.text, "differs from --tenant");
    const char *ttl_get[] = {"get", "--ttl-ms", "5", "default/c", "k", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, ttl_get), 2);
    const char *help[] = {"--help", NULL};
    assert_int_equal(felix_cache(&t, NULL, out, err, help), 0);
    proc_slurp(out, t.text, sizeof(t.text));
    proc_assert_contains(t.text, "felix cache put [--ttl-ms N]");
    proc_assert_contains(t.text, "Example:");
    stop(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_cli_cache_put_then_get_prints_the_value_raw, proc_teardown),
    cmocka_unit_test_teardown(test_cli_cache_put_from_stdin_is_binary_safe, proc_teardown),
    cmocka_unit_test_teardown(test_cli_cache_get_of_a_missing_or_expired_key_exits_1,
                              proc_teardown),
    cmocka_unit_test_teardown(test_cli_cache_del_prints_deleted_then_not_found, proc_teardown),
    cmocka_unit_test_teardown(test_cli_cache_usage_errors_exit_2_and_help_shows_an_example,
                              proc_teardown),
};
FX_TEST_MAIN(tests)
