/* felix-broker's start-up as an operator meets it, the binary run as a child
 * process: a setting ngtcp2 cannot apply stops it with the reason and a
 * non-zero exit, a variable of the original's perf runner does not, a
 * state_dir that another user could write is refused, and a configured
 * consumer group is created or, refused by the broker, stops the start. Ports are 0 (picked by
 * the kernel); timeouts are hang guards only. */
/* fx-test-libs: fx_base */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integ/proc.h"

#define EXIT_CONFIG 1 /* felix-broker: the configuration is invalid */
#define EXIT_START 4  /* felix-broker: a listener or the state dir could not start */

typedef struct run {
    char dir[64];
    char broker[512];
    char out[128], err[128], state[128], state_set[160];
    char text[16384];
} run;

static void run_init(run *r)
{
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxstartXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state, sizeof(r->state), "%s/state", r->dir);
    snprintf(r->state_set, sizeof(r->state_set), "state_dir=%s", r->state);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Removes the run's directory and everything the broker left in state_dir
 * (the certificate, the key, the reset key, the lock file). */
static void run_deinit(run *r)
{
    assert_int_equal(nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* Starts the broker on ephemeral ports with |extra| --set values (NULL-
 * terminated, may be NULL) and the environment entries |env|. */
static pid_t start(run *r, const char *const *extra, char *const env[])
{
    char *argv[32] = {
        r->broker, "--set",     "quic_bind=127.0.0.1:0", "--set", "metrics_bind=127.0.0.1:0",
        "--set",   r->state_set};
    size_t n = 7;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 29; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra[i];
    }
    argv[n] = NULL;
    return proc_spawn(argv, r->out, r->err, env, false);
}

/* Starts with |extra| / |env| and expects exit |want| before serving, with
 * |needle| on stderr. */
static void expect_refused(run *r, const char *const *extra, char *const env[], int want,
                           const char *needle)
{
    int st = proc_wait(start(r, extra, env), "felix-broker");
    proc_slurp(r->err, r->text, sizeof(r->text));
    if (st != want)
        fail_msg("felix-broker exited %d, want %d; stderr:\n%s", st, want, r->text);
    proc_assert_contains(r->text, needle);
    proc_slurp(r->out, r->text, sizeof(r->text));
    if (strstr(r->text, "export FELIX_SERVER=") != NULL)
        fail_msg("felix-broker served before refusing:\n%s", r->text);
}

static void test_initial_cwnd_refused_with_reason_and_nonzero_exit(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    const char *why = "initial_cwnd is not supported: ngtcp2 0.12 has no initial congestion "
                      "window setting";
    const char *set[] = {"initial_cwnd=14720", NULL};
    expect_refused(&r, set, NULL, EXIT_CONFIG, why);
    char *env[] = {"FELIX_INITIAL_CWND=65536", NULL};
    expect_refused(&r, NULL, env, EXIT_CONFIG,
                   "env FELIX_INITIAL_CWND is not supported: ngtcp2 0.12 has no initial "
                   "congestion window setting");
    run_deinit(&r);
}

static void test_disable_timings_env_does_not_stop_start(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    char *env[] = {"FELIX_DISABLE_TIMINGS=1", NULL};
    pid_t pid = start(&r, NULL, env);
    proc_wait_text(r.out, "export FELIX_SERVER=", r.text, sizeof(r.text), pid);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st = proc_wait(pid, "felix-broker");
    proc_slurp(r.err, r.text, sizeof(r.text));
    if (st != 0)
        fail_msg("felix-broker exited %d after SIGTERM; stderr:\n%s", st, r.text);
    proc_assert_contains(r.text, "FELIX_DISABLE_TIMINGS is ignored");
    run_deinit(&r);
}

static void test_group_writable_state_dir_refused_at_start(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    assert_int_equal(mkdir(r.state, 0700), 0);
    assert_int_equal(chmod(r.state, 0777), 0);
    expect_refused(&r, NULL, NULL, EXIT_START, "is writable by group or others (mode 0777)");
    assert_int_equal(chmod(r.state, 0700), 0);
    run_deinit(&r);
}

/* groups: creates the group once the broker runs (its log says so), and a
 * group the broker refuses stops the start naming the entry. */
static void test_configured_group_created_and_refused_one_stops_start(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    const char *ok[] = {"groups=t1/default/orders/billing@new", NULL};
    pid_t pid = start(&r, ok, NULL);
    proc_wait_text(r.out, "export FELIX_SERVER=", r.text, sizeof(r.text), pid);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st = proc_wait(pid, "felix-broker");
    proc_slurp(r.err, r.text, sizeof(r.text));
    if (st != 0)
        fail_msg("felix-broker exited %d after SIGTERM; stderr:\n%s", st, r.text);
    proc_assert_contains(r.text, "group t1/default/orders/billing created from the configuration");
    const char *past[] = {"groups=t1/default/orders/billing@5", NULL};
    expect_refused(&r, past, NULL, EXIT_START,
                   "cannot create the configured groups: groups entry "
                   "t1/default/orders/billing: the start offset is past the stream's tail");
    run_deinit(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_initial_cwnd_refused_with_reason_and_nonzero_exit,
                              proc_teardown),
    cmocka_unit_test_teardown(test_disable_timings_env_does_not_stop_start, proc_teardown),
    cmocka_unit_test_teardown(test_group_writable_state_dir_refused_at_start, proc_teardown),
    cmocka_unit_test_teardown(test_configured_group_created_and_refused_one_stops_start,
                              proc_teardown),
};

FX_TEST_MAIN(tests)
