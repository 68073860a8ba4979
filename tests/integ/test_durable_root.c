/* One broker per storage root, as an operator meets it: felix-broker run as
 * a child process. A second broker on a live durable_storage_dir (or
 * state_dir) refuses to start, naming the directory and the first one's PID,
 * and leaves every file of the first one's storage as it was; felix log
 * verify refuses a live root and reads it once the broker has stopped; a
 * root another user could write, or owns, is refused; and a broker freed in
 * this process gives its root back. Ports are 0; timeouts are hang guards
 * only. */
/* fx-test-libs: fx_broker fx_client fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integ/fixture.h"
#include "integ/proc.h"

#include "felix/felix.h"
#include "storage/format.h"

#define EXIT_START 4 /* felix-broker: a listener or a directory could not start */
#define STREAM "roots"
#define OTHER_UID 65534

typedef struct broker_proc {
    char out[160], err[160], state_set[160];
    pid_t pid;
    char server[64], pin[80];
} broker_proc;

typedef struct run {
    char dir[64];
    char broker[512], felix[512];
    char data[128], data_set[160];
    broker_proc a, b;
    char text[16384];
} run;

static void brk_init(broker_proc *k, const char *dir, const char *tag, const char *state)
{
    snprintf(k->out, sizeof(k->out), "%s/%s.out", dir, tag);
    snprintf(k->err, sizeof(k->err), "%s/%s.err", dir, tag);
    snprintf(k->state_set, sizeof(k->state_set), "state_dir=%s/%s", dir, state);
}

static void run_init(run *r)
{
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    proc_binary("felix", r->felix, sizeof(r->felix));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxrootXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->data, sizeof(r->data), "%s/data", r->dir);
    snprintf(r->data_set, sizeof(r->data_set), "durable_storage_dir=%s", r->data);
    brk_init(&r->a, r->dir, "a", "state-a");
    brk_init(&r->b, r->dir, "b", "state-b");
}

static void run_deinit(run *r)
{
    fix_rm_dir(r->dir);
}

/* Starts broker |k|, with the durable root unless |durable| is false. */
static pid_t spawn(run *r, broker_proc *k, bool durable)
{
    char *argv[] = {r->broker,
                    "--set",
                    "quic_bind=127.0.0.1:0",
                    "--set",
                    "metrics_bind=127.0.0.1:0",
                    "--set",
                    k->state_set,
                    "--set",
                    "durable_default=true",
                    "--set",
                    "durable_fsync_mode=on_commit",
                    "--set",
                    r->data_set,
                    NULL};
    if (!durable)
        argv[7] = NULL;
    unlink(k->out);
    k->pid = proc_spawn(argv, k->out, k->err, NULL, false);
    return k->pid;
}

/* Starts broker |k| and waits until it serves. */
static void start(run *r, broker_proc *k, bool durable)
{
    spawn(r, k, durable);
    proc_wait_text(k->out, "export FELIX_SERVER=", r->text, sizeof(r->text), k->pid);
    const char *line = strstr(r->text, "export FELIX_SERVER=");
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", k->server, k->pin), 2);
}

static void stop(broker_proc *k)
{
    assert_int_equal(kill(k->pid, SIGTERM), 0);
    assert_int_equal(proc_wait(k->pid, "felix-broker"), 0);
}

/* Starts broker |k| and expects it to refuse with EXIT_START before serving,
 * with every |needles| (NULL-terminated) on stderr. */
static void expect_refused(run *r, broker_proc *k, bool durable, const char *const *needles)
{
    int st = proc_wait(spawn(r, k, durable), "the second felix-broker");
    proc_slurp(k->err, r->text, sizeof(r->text));
    if (st != EXIT_START)
        fail_msg("felix-broker exited %d, want %d; stderr:\n%s", st, EXIT_START, r->text);
    for (size_t i = 0; needles[i] != NULL; i++)
        proc_assert_contains(r->text, needles[i]);
    proc_slurp(k->out, r->text, sizeof(r->text));
    if (strstr(r->text, "export FELIX_SERVER=") != NULL)
        fail_msg("felix-broker served before refusing:\n%s", r->text);
}

/* Publishes |n| acknowledged records through broker |k|. */
static void publish(const broker_proc *k, int n)
{
    fx_client_opts o;
    fix_daemon_client_opts(&o, k->server, k->pin);
    fx_client *c = fix_connect(&o);
    for (int i = 0; i < n; i++)
        assert_int_equal(fx_publish(c, NS, STREAM, "payload", 7, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
}

/* ---- what the storage root holds --------------------------------------------------- */

static char *snap_buf;
static size_t snap_len, snap_cap;

static uint64_t file_hash(const char *path)
{
    uint64_t h = 0xcbf29ce484222325ull;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    for (int c; (c = fgetc(f)) != EOF;)
        h = (h ^ (uint8_t)c) * 0x100000001b3ull;
    fclose(f);
    return h;
}

static int snap_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    uint64_t h = type == FTW_F ? file_hash(path) : 0;
    int n = snprintf(snap_buf + snap_len, snap_cap - snap_len,
                     "%s ino=%llu size=%lld mtime=%lld.%09ld mode=%o hash=%016llx\n", path,
                     (unsigned long long)st->st_ino, (long long)st->st_size,
                     (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (unsigned)st->st_mode,
                     (unsigned long long)h);
    assert_true(n > 0 && (size_t)n < snap_cap - snap_len);
    snap_len += (size_t)n;
    return 0;
}

/* Every entry under |root| with its inode, size, mtime, mode and contents'
 * hash, into |out| (|cap| bytes). */
static void snapshot(const char *root, char *out, size_t cap)
{
    snap_buf = out;
    snap_len = 0;
    snap_cap = cap;
    out[0] = '\0';
    assert_int_equal(nftw(root, snap_entry, 16, FTW_PHYS), 0);
}

/* ---- cases ------------------------------------------------------------------------- */

static void test_second_broker_on_a_live_root_refuses_naming_it_and_the_pid(void **state)
{
    (void)state;
    static char before[65536], after[65536];
    run r;
    run_init(&r);
    start(&r, &r.a, true);
    publish(&r.a, 5);
    snapshot(r.data, before, sizeof(before));

    char root[200], pid[32];
    snprintf(root, sizeof(root), "durable_storage_dir '%s'", r.data);
    snprintf(pid, sizeof(pid), "pid %ld", (long)r.a.pid);
    const char *want[] = {root, pid, "stop the other one or choose another durable_storage_dir",
                          NULL};
    expect_refused(&r, &r.b, true, want);

    /* It changed nothing: no tail cut, no index re-created, no catalogue
     * rewritten. */
    snapshot(r.data, after, sizeof(after));
    if (strcmp(before, after) != 0)
        fail_msg("the second broker changed the live root:\nbefore:\n%s\nafter:\n%s", before,
                 after);
    publish(&r.a, 1); /* the first one serves on */
    stop(&r.a);
    run_deinit(&r);
}

static void test_felix_log_verify_refuses_a_live_root_and_reads_a_stopped_one(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r, &r.a, true);
    publish(&r.a, 3);
    char name[FX_LOGFMT_DIR_NAME_MAX], cmd[1200], pid[32];
    fx_logfmt_dir_name(name, "t1", NS, STREAM, 0);
    snprintf(cmd, sizeof(cmd), "'%s' log verify '%s/%s' 2>&1", r.felix, r.data, name);
    snprintf(pid, sizeof(pid), "pid %ld", (long)r.a.pid);

    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(r.text, 1, sizeof(r.text) - 1, f);
    r.text[n] = '\0';
    int st = pclose(f);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
        fail_msg("felix log verify on a live root: status %d, want exit 1:\n%s", st, r.text);
    proc_assert_contains(r.text, "is in use by a running felix-broker");
    proc_assert_contains(r.text, pid);
    proc_assert_contains(r.text, r.data);

    stop(&r.a);
    f = popen(cmd, "r");
    assert_non_null(f);
    n = fread(r.text, 1, sizeof(r.text) - 1, f);
    r.text[n] = '\0';
    st = pclose(f);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("felix log verify after the broker stopped: status %d:\n%s", st, r.text);
    proc_assert_contains(r.text, "ok: 1 segments, 3 records");
    run_deinit(&r);
}

static void test_second_broker_on_a_live_state_dir_refuses(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r, &r.a, false);
    snprintf(r.b.state_set, sizeof(r.b.state_set), "%s", r.a.state_set);
    char dir[200], pid[32];
    snprintf(dir, sizeof(dir), "state_dir '%s/state-a'", r.dir);
    snprintf(pid, sizeof(pid), "pid %ld", (long)r.a.pid);
    const char *want[] = {dir, pid, NULL};
    expect_refused(&r, &r.b, false, want);
    stop(&r.a);
    run_deinit(&r);
}

static void test_durable_root_writable_by_others_is_refused(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    assert_int_equal(mkdir(r.data, 0700), 0);
    assert_int_equal(chmod(r.data, 0777), 0);
    char why[256];
    snprintf(why, sizeof(why),
             "durable_storage_dir '%s' is writable by group or others (mode 0777)", r.data);
    const char *want[] = {why, NULL};
    expect_refused(&r, &r.a, true, want);
    assert_int_equal(access(r.data, F_OK), 0);
    char cat[200];
    snprintf(cat, sizeof(cat), "%s/catalog.json", r.data);
    assert_int_equal(access(cat, F_OK), -1); /* nothing written in it */
    run_deinit(&r);
}

static void test_durable_root_owned_by_another_user_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        fx_test_skip("needs root to give a directory to another user (chown)");
    run r;
    run_init(&r);
    assert_int_equal(mkdir(r.data, 0700), 0);
    assert_int_equal(chown(r.data, OTHER_UID, OTHER_UID), 0);
    char why[256];
    snprintf(why, sizeof(why), "durable_storage_dir '%s' is owned by uid %d", r.data, OTHER_UID);
    const char *want[] = {why, NULL};
    expect_refused(&r, &r.a, true, want);
    run_deinit(&r);
}

/* In this process: the second fx_broker_new on a root is refused while the
 * first broker lives, and succeeds once fx_broker_free gave the root back. */
static void test_freeing_the_broker_gives_the_root_back(void **state)
{
    (void)state;
    char sa[64], sb[64], data[128], why[4096] = "", pid[32];
    fix_state_dir_new(sa, sizeof(sa), "roota");
    fix_state_dir_new(sb, sizeof(sb), "rootb");
    snprintf(data, sizeof(data), "%s/data", sa);
    fx_broker_opts oa, ob;
    fix_broker_opts(&oa, sa);
    fix_broker_opts(&ob, sb);
    oa.durable.dir = ob.durable.dir = data;
    ob.durable.error = why;
    ob.durable.error_len = sizeof(why);
    fx_broker *a = NULL, *b = NULL;
    assert_int_equal(fx_broker_new(&a, &oa), 0);
    assert_int_equal(fx_broker_new(&b, &ob), -EBUSY);
    snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
    proc_assert_contains(why, pid);
    proc_assert_contains(why, data);
    fx_broker_free(a);
    assert_int_equal(fx_broker_new(&b, &ob), 0);
    fx_broker_free(b);
    fix_rm_dir(sa);
    fix_rm_dir(sb);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_second_broker_on_a_live_root_refuses_naming_it_and_the_pid,
                              proc_teardown),
    cmocka_unit_test_teardown(test_felix_log_verify_refuses_a_live_root_and_reads_a_stopped_one,
                              proc_teardown),
    cmocka_unit_test_teardown(test_second_broker_on_a_live_state_dir_refuses, proc_teardown),
    cmocka_unit_test_teardown(test_durable_root_writable_by_others_is_refused, proc_teardown),
    cmocka_unit_test_teardown(test_durable_root_owned_by_another_user_is_refused, proc_teardown),
    cmocka_unit_test(test_freeing_the_broker_gives_the_root_back),
};

FX_TEST_MAIN(tests)
