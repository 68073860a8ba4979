/* `felix cluster status`, `felix cluster rebalance` and scripts/cluster.sh,
 * the binaries run as child processes: the script starts etcd and three brokers sharing one
 * certificate (it returns once every /ready answers 200) and writes
 * cluster.env; the CLI, asked through any node, names the three nodes and
 * the owner and epoch of a stream placed by a publish, and --json prints the
 * broker's body; the script's stop ends every broker by its PID and removes
 * the data but the logs. Against a standalone broker the command prints the
 * broker's 404 sentence and exits 1. A case whose etcd cannot start fails
 * with the reason (scripts/deps.sh installs etcd-server). */
/* fx-test-libs: fx_base */
#define _XOPEN_SOURCE 700
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integ/proc.h"

#define NB 3

typedef struct ctx {
    char dir[64];
    char script[512], felix[512], broker[512];
    char out[128], err[128];
    char server[NB][64], admin[NB][64], pin[80];
    pid_t pid[NB];
    bool started;
    char text[65536];
} ctx;

static ctx *T;

static int ctx_setup(void **state)
{
    (void)state;
    T = calloc(1, sizeof(*T));
    assert_non_null(T);
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL)
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    snprintf(T->script, sizeof(T->script), "%s/scripts/cluster.sh", src);
    proc_binary("felix", T->felix, sizeof(T->felix));
    proc_binary("felix-broker", T->broker, sizeof(T->broker));
    snprintf(T->dir, sizeof(T->dir), "/tmp/fxclicluXXXXXX");
    assert_non_null(mkdtemp(T->dir));
    snprintf(T->out, sizeof(T->out), "%s/out", T->dir);
    snprintf(T->err, sizeof(T->err), "%s/err", T->dir);
    return 0;
}

/* Runs scripts/cluster.sh |verb| on T->dir; its exit status, its standard
 * error in T->text. */
static int cluster_sh(const char *verb)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "FELIX_BROKER='%s' bash '%s' %s '%s' >'%s' 2>'%s'", T->broker,
             T->script, verb, T->dir, T->out, T->err);
    int st = system(cmd);
    proc_slurp(T->err, T->text, sizeof(T->text));
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int ctx_teardown(void **state)
{
    if (T->started && cluster_sh("stop") != 0)
        fprintf(stderr, "cluster.sh stop failed: %s\n", T->text);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", T->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", T->dir);
    free(T);
    T = NULL;
    return proc_teardown(state);
}

/* Starts the cluster and reads DIR/cluster.env. */
static void cluster_start(void)
{
    T->started = true;
    if (cluster_sh("start") != 0)
        fail_msg("cluster.sh start failed: %s", T->text);
    char path[128], env[4096], servers[256];
    snprintf(path, sizeof(path), "%s/cluster.env", T->dir);
    proc_slurp(path, env, sizeof(env));
    const char *p = strstr(env, "export FELIX_SERVER=");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "export FELIX_SERVER=%255s FELIX_PIN=%79s", servers, T->pin), 2);
    for (int i = 0; i < NB; i++) {
        char key[32];
        snprintf(key, sizeof(key), "N%d_SERVER=", i + 1);
        p = strstr(env, key);
        assert_non_null(p);
        char fmt[96];
        snprintf(fmt, sizeof(fmt), "N%d_SERVER=%%63s N%d_ADMIN=%%63s N%d_PID=%%d", i + 1, i + 1,
                 i + 1);
        int pid = 0;
        assert_int_equal(sscanf(p, fmt, T->server[i], T->admin[i], &pid), 3);
        T->pid[i] = (pid_t)pid;
        /* FELIX_SERVER is the seed list of every node. */
        assert_non_null(strstr(servers, T->server[i]));
        assert_int_equal(kill(T->pid[i], 0), 0);
    }
}

/* Runs felix with the NULL-terminated |args| after argv[0]: its exit status;
 * standard output then error in T->text. */
static int felix(char *const args[])
{
    char *argv[24] = {T->felix};
    for (int i = 0; args[i] != NULL && i < 22; i++)
        argv[i + 1] = args[i];
    int st = proc_wait(proc_spawn(argv, T->out, T->err, NULL, false), "felix");
    size_t n = proc_slurp(T->out, T->text, sizeof(T->text));
    proc_slurp(T->err, T->text + n, sizeof(T->text) - n);
    return st;
}

/* Publishes to t1/default/|stream| through node |via|, then through the
 * node it names: the node that acked it (the owner, or a node that
 * forwarded it there). */
static int place(int via, const char *stream)
{
    char path[64];
    snprintf(path, sizeof(path), "t1/default/%s", stream);
    for (int hop = 0; hop < 3; hop++) {
        char *args[] = {"pub",   "--server",    T->server[via], "--pin", T->pin,
                        "--ack", "per_message", path,           "hello", NULL};
        if (felix(args) == 0)
            return via;
        const char *p = strstr(T->text, "is served by n");
        if (p == NULL)
            fail_msg("publish %s through n%d: %s", path, via + 1, T->text);
        via = p[strlen("is served by n")] - '1';
        assert_true(via >= 0 && via < NB);
    }
    fail_msg("publish %s: more than 3 hops", path);
    return -1;
}

/* Whether T->text has a line starting with |prefix|. */
static bool has_line(const char *prefix)
{
    for (const char *p = T->text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0)
            return true;
    return false;
}

static void test_cluster_status_names_the_nodes_and_the_owner_of_a_placed_stream(void **state)
{
    (void)state;
    cluster_start();
    /* Published through n1: appended by the owner (forwarded there when
     * n1 is not it), whom every view must name alike. */
    (void)place(0, "where");
    int owner = -1;
    for (int via = 0; via < NB; via++) {
        char *args[] = {"cluster", "status", "--admin", T->admin[via], NULL};
        if (felix(args) != 0)
            fail_msg("felix cluster status --admin %s: %s", T->admin[via], T->text);
        char want[128];
        snprintf(want, sizeof(want), "cluster felix, as node n%d sees it", via + 1);
        proc_assert_contains(T->text, want);
        proc_assert_contains(T->text, "serving: yes");
        proc_assert_contains(T->text, "nodes: 3");
        for (int i = 0; i < NB; i++) {
            snprintf(want, sizeof(want), "n%d  ", i + 1);
            if (!has_line(want))
                fail_msg("no row for n%d in:\n%s", i + 1, T->text);
            /* Each row names the node's QUIC and admin addresses. */
            proc_assert_contains(T->text, T->server[i]);
            proc_assert_contains(T->text, T->admin[i]);
        }
        if (owner < 0) {
            const char *p = strstr(T->text, "\nt1/default/where  n");
            if (p == NULL)
                fail_msg("t1/default/where is not placed in:\n%s", T->text);
            owner = p[strlen("\nt1/default/where  n")] - '1';
            assert_true(owner >= 0 && owner < NB);
        }
        snprintf(want, sizeof(want), "t1/default/where  n%d    1", owner + 1);
        if (!has_line(want))
            fail_msg("no line '%s' in:\n%s", want, T->text);
        proc_assert_contains(T->text, "claims_won");
    }
    char *json[] = {"cluster", "status", "--json", "--admin", T->admin[1], NULL};
    assert_int_equal(felix(json), 0);
    assert_true(T->text[0] == '{');
    proc_assert_contains(T->text, "\"node_id\":\"n2\"");
    proc_assert_contains(T->text, "\"stream\":\"where\"");
    /* The admin address comes from FELIX_ADMIN too, as for felix stats. */
    char env[96];
    snprintf(env, sizeof(env), "FELIX_ADMIN=%s", T->admin[2]);
    char *envp[] = {env, NULL};
    char *argv[] = {T->felix, "cluster", "status", NULL};
    assert_int_equal(proc_wait(proc_spawn(argv, T->out, T->err, envp, false), "felix"), 0);
    proc_slurp(T->out, T->text, sizeof(T->text));
    proc_assert_contains(T->text, "as node n3 sees it");

    /* stop: every broker ended by its PID, the data gone, the logs kept. */
    assert_int_equal(cluster_sh("stop"), 0);
    T->started = false;
    for (int i = 0; i < NB; i++)
        assert_int_not_equal(kill(T->pid[i], 0), 0);
    char path[128];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/s1", T->dir);
    assert_int_not_equal(stat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/etcd", T->dir);
    assert_int_not_equal(stat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/n1.pid", T->dir);
    assert_int_not_equal(stat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/n1.log", T->dir);
    assert_int_equal(stat(path, &sb), 0);
}

static void test_cluster_rebalance_all_asks_every_node_and_a_dry_run_moves_nothing(void **state)
{
    (void)state;
    /* An admin token (POST needs one), and no rebalance of their own. */
    setenv("FX_CLUSTER_SET", "admin_token=cli-rebalance-token cluster_rebalance_on_join=false", 1);
    cluster_start();
    unsetenv("FX_CLUSTER_SET");
    (void)place(0, "where");
    char *all[] = {"cluster",      "rebalance", "--all",         "--dry-run", "--admin",
                   T->admin[1],    "--admin-token", "cli-rebalance-token", NULL};
    if (felix(all) != 0)
        fail_msg("felix cluster rebalance --all --dry-run: %s", T->text);
    /* Every node answered, in node id order; placed at its first choice,
     * the stream stays. */
    for (int i = 0; i < NB; i++) {
        char want[96];
        snprintf(want, sizeof(want), "n%d: 0 moves planned (dry run: nothing moves)", i + 1);
        if (!has_line(want))
            fail_msg("no line '%s' in:\n%s", want, T->text);
    }
    char *json[] = {"cluster",   "rebalance",     "--json",
                    "--admin",   T->admin[0],     "--admin-token",
                    "cli-rebalance-token", NULL};
    assert_int_equal(felix(json), 0);
    proc_assert_contains(T->text, "\"node\":\"n1\",\"dry_run\":false,\"planned\":0");
    /* Without the token the node refuses, and felix says why (exit 1). */
    char *bare[] = {"cluster", "rebalance", "--admin", T->admin[0], NULL};
    assert_int_equal(felix(bare), 1);
    proc_assert_contains(T->text, "felix cluster: POST ");
    /* --all belongs to rebalance. */
    char *bad[] = {"cluster", "status", "--all", "--admin", T->admin[0], NULL};
    assert_int_equal(felix(bad), 2);
}

static void test_cluster_status_of_a_standalone_broker_prints_its_404_and_exits_1(void **state)
{
    (void)state;
    char logp[128], errp[128], bstate[128];
    snprintf(logp, sizeof(logp), "%s/broker.out", T->dir);
    snprintf(errp, sizeof(errp), "%s/broker.err", T->dir);
    snprintf(bstate, sizeof(bstate), "state_dir=%s/state", T->dir);
    char *argv[] = {T->broker, "--dev",
                    "--set",   "quic_bind=127.0.0.1:0",
                    "--set",   "metrics_bind=127.0.0.1:0",
                    "--set",   "probe_bind=",
                    "--set",   bstate,
                    NULL};
    pid_t pid = proc_spawn(argv, logp, errp, NULL, false);
    proc_wait_text(logp, "export FELIX_SERVER=", T->text, sizeof(T->text), pid);
    const char *p = strstr(T->text, "felix-broker: admin HTTP on ");
    assert_non_null(p);
    p = strstr(p, "(port ");
    assert_non_null(p);
    unsigned port = 0;
    assert_int_equal(sscanf(p, "(port %u)", &port), 1);
    char admin[32];
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", port);
    char *args[] = {"cluster", "status", "--admin", admin, NULL};
    assert_int_equal(felix(args), 1);
    proc_assert_contains(T->text, "felix cluster: GET ");
    proc_assert_contains(T->text, "/v1/cluster: HTTP 404: this broker is standalone");
    /* The sentence is the whole reason: no guess about an older broker. */
    assert_null(strstr(T->text, "does not serve this route"));
    /* Usage errors exit 2. */
    char *none[] = {"cluster", "--admin", admin, NULL};
    assert_int_equal(felix(none), 2);
    proc_assert_contains(T->text, "missing action: status");
    char *bad[] = {"cluster", "stats", NULL};
    assert_int_equal(felix(bad), 2);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    proc_track(pid, false);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(
        test_cluster_status_names_the_nodes_and_the_owner_of_a_placed_stream, ctx_setup,
        ctx_teardown),
    cmocka_unit_test_setup_teardown(
        test_cluster_status_of_a_standalone_broker_prints_its_404_and_exits_1, ctx_setup,
        ctx_teardown),
    cmocka_unit_test_setup_teardown(
        test_cluster_rebalance_all_asks_every_node_and_a_dry_run_moves_nothing, ctx_setup,
        ctx_teardown),
};
FX_TEST_MAIN(tests)
