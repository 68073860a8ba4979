/* A real crash of felix-broker, the binary run as a child process, with a
 * durable cache under on_commit (docs/cache.md "Durable caches"): a client
 * keeps 32 puts in flight and records each answered one, the broker is
 * killed with SIGKILL mid-load and started again on the same storage root,
 * and every answered put must be readable with its value (an unanswered
 * one may or may not be there, and if it is, with its value). The second
 * case overwrites 64 keys with compaction paced slow, so the kill lands
 * while the log's live records are being copied and its old segments
 * deleted: every key must read its last answered value or a later one.
 * Ports are 0; timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integ/proc_broker.h"

#include "felix/felix.h"

#define NS "default"
#define CACHE "crash"
#define MAX_SEQ 100000 /* more than the client reaches before the kill */
#define IN_FLIGHT 32
#define ANSWERED_BEFORE_KILL 400

typedef struct run {
    char dir[64];
    char broker[512];
    char out[128], err[128], state_set[160], data_set[160];
    char text[16384];
    char server[64], pin[80];
    pid_t pid;
    bool overwrite; /* 64 keys overwritten, 256 KiB segments, compaction at 64 KiB/s */
} run;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void run_init(run *r)
{
    memset(r, 0, sizeof(*r));
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxdccrashXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state_set, sizeof(r->state_set), "state_dir=%s/state", r->dir);
    snprintf(r->data_set, sizeof(r->data_set), "durable_storage_dir=%s/data", r->dir);
}

static char *env[] = {"FELIX_ADMIN_TOKEN=cache-crash-admin-token", NULL};

static void start(run *r)
{
    char *argv[] = {r->broker,
                    "--set",
                    "quic_bind=127.0.0.1:0",
                    "--set",
                    "metrics_bind=127.0.0.1:0",
                    "--set",
                    r->state_set,
                    "--set",
                    r->data_set,
                    "--set",
                    "durable_fsync_mode=on_commit",
                    "--set",
                    "durable_segment_bytes=65536", /* rollovers under load too */
                    "--set",
                    "auto_create_streams=false", /* served only because it is declared */
                    "--set",
                    "caches=t1/" NS "/" CACHE "@durable",
                    NULL, /* [17], [18]: the overwrite case's compaction pace */
                    NULL,
                    NULL};
    if (r->overwrite) {
        argv[12] = "durable_segment_bytes=262144";
        argv[17] = "--set";
        argv[18] = "storage_compaction_bytes_per_sec=65536";
    }
    unlink(r->out);
    r->pid = proc_spawn(argv, r->out, r->err, env, false);
    proc_broker_address(r->out, r->text, sizeof(r->text), r->pid, r->server, r->pin);
}

static fx_client *connect_to(run *r)
{
    return proc_broker_connect(r->server, r->pin, FX_POLICY_DEFAULT);
}

/* ---- the client ------------------------------------------------------------------ */

typedef struct putter {
    fx_client *c;
    int keys; /* 0: a key per put; else seq % keys */
    atomic_bool stop;
    atomic_int inflight;
    atomic_int nanswered;
    atomic_int sent;
    atomic_bool answered[MAX_SEQ];
} putter;

typedef struct put_ctx {
    putter *p;
    int seq;
} put_ctx;

static put_ctx ctxs[MAX_SEQ];

static void on_put(void *user, int rv, const void *value, size_t len)
{
    (void)value, (void)len;
    put_ctx *a = user;
    if (rv == 0) {
        atomic_store(&a->p->answered[a->seq], true);
        atomic_fetch_add(&a->p->nanswered, 1);
    }
    atomic_fetch_sub(&a->p->inflight, 1);
}

static void *put_main(void *arg)
{
    putter *p = arg;
    char key[32], val[32];
    for (int seq = 0; seq < MAX_SEQ && !atomic_load(&p->stop); seq++) {
        while (atomic_load(&p->inflight) >= IN_FLIGHT && !atomic_load(&p->stop))
            usleep(100);
        snprintf(key, sizeof(key), "k%d", p->keys ? seq % p->keys : seq);
        snprintf(val, sizeof(val), "v%d-%d", seq, seq * 7);
        ctxs[seq] = (put_ctx){.p = p, .seq = seq};
        atomic_fetch_add(&p->inflight, 1);
        if (fx_cache_put_async(p->c, NS, CACHE, key, val, strlen(val), 0, on_put, &ctxs[seq]) !=
            0) {
            atomic_fetch_sub(&p->inflight, 1);
            break; /* the broker is gone */
        }
        atomic_store(&p->sent, seq + 1);
    }
    return NULL;
}

static void test_kill_9_under_on_commit_loses_no_answered_cache_put(void **state)
{
    (void)state;
    static putter p;
    memset(&p, 0, sizeof(p));
    run r;
    run_init(&r);
    start(&r);
    p.c = connect_to(&r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, put_main, &p), 0);
    uint64_t t0 = proc_now_ms();
    while (atomic_load(&p.nanswered) < ANSWERED_BEFORE_KILL) {
        if (proc_now_ms() - t0 > PROC_HANG_MS)
            fail_msg("only %d puts answered", atomic_load(&p.nanswered));
        usleep(1000);
    }
    assert_int_equal(kill(r.pid, SIGKILL), 0); /* mid-load: puts in flight */
    int st;
    assert_int_equal(waitpid(r.pid, &st, 0), r.pid);
    proc_track(r.pid, false);
    assert_true(WIFSIGNALED(st));
    atomic_store(&p.stop, true);
    pthread_join(th, NULL);
    (void)fx_client_close(p.c, 1000); /* the broker is gone: the puts in flight fail */
    int answered = atomic_load(&p.nanswered), sent = atomic_load(&p.sent);

    /* Restart on the same root: the cache is rebuilt from its log. */
    start(&r);
    fx_client *c = connect_to(&r);
    int present = 0;
    for (int seq = 0; seq < sent; seq++) {
        char key[32], want[32], buf[64];
        snprintf(key, sizeof(key), "k%d", seq);
        snprintf(want, sizeof(want), "v%d-%d", seq, seq * 7);
        size_t n = 0;
        int rv = fx_cache_get(c, NS, CACHE, key, buf, sizeof(buf), &n);
        if (rv == FX_ENOTFOUND && !atomic_load(&p.answered[seq]))
            continue; /* never answered: may be lost */
        if (rv != 0)
            fail_msg("answered put %s is missing after the crash: %s", key, fx_strerror(rv));
        if (n != strlen(want) || memcmp(buf, want, n) != 0)
            fail_msg("%s reads '%.*s' after the crash, want '%s'", key, (int)n, buf, want);
        present++;
    }
    assert_true(present >= answered);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r.pid, "felix-broker"), 0);
    printf("kill -9 after %d answered cache puts (%d sent): %d present after the restart, none "
           "lost\n",
           answered, sent, present);
    (void)nftw(r.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool first_segment_gone = true;

static int find_first(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    if (strcmp(p + ftw->base, "00000000000000000000.log") == 0 && strstr(p, "/caches/") != NULL)
        first_segment_gone = false;
    return 0;
}

#define KEYS 64

static void test_kill_9_during_a_compaction_loses_no_answered_overwrite(void **state)
{
    (void)state;
    static putter p;
    memset(&p, 0, sizeof(p));
    p.keys = KEYS;
    run r;
    run_init(&r);
    r.overwrite = true;
    start(&r);
    p.c = connect_to(&r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, put_main, &p), 0);
    /* Until a compaction deleted the first segment; then one more step
     * and a half (a step a second): the kill lands in the next one. */
    uint64_t t0 = proc_now_ms();
    for (;;) {
        first_segment_gone = true;
        (void)nftw(r.dir, find_first, 16, FTW_PHYS);
        if (first_segment_gone && atomic_load(&p.nanswered) > 1000)
            break;
        if (proc_now_ms() - t0 > PROC_HANG_MS)
            fail_msg("no compaction after %d answered puts", atomic_load(&p.nanswered));
        usleep(10 * 1000);
    }
    usleep(1500 * 1000);
    assert_int_equal(kill(r.pid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(r.pid, &st, 0), r.pid);
    proc_track(r.pid, false);
    assert_true(WIFSIGNALED(st));
    atomic_store(&p.stop, true);
    pthread_join(th, NULL);
    (void)fx_client_close(p.c, 1000);
    int answered = atomic_load(&p.nanswered), sent = atomic_load(&p.sent);
    /* The newest answered put of each key. */
    int last[KEYS];
    for (int k = 0; k < KEYS; k++)
        last[k] = -1;
    for (int seq = 0; seq < sent; seq++)
        if (atomic_load(&p.answered[seq]))
            last[seq % KEYS] = seq;

    start(&r);
    fx_client *c = connect_to(&r);
    for (int k = 0; k < KEYS; k++) {
        char key[32], buf[64];
        snprintf(key, sizeof(key), "k%d", k);
        size_t n = 0;
        int rv = fx_cache_get(c, NS, CACHE, key, buf, sizeof(buf), &n);
        if (rv == FX_ENOTFOUND && last[k] < 0)
            continue;
        if (rv != 0)
            fail_msg("%s is missing after the crash (last answered put %d): %s", key, last[k],
                     fx_strerror(rv));
        buf[n < sizeof(buf) ? n : sizeof(buf) - 1] = '\0';
        int seq = -1, x = -1;
        if (sscanf(buf, "v%d-%d", &seq, &x) != 2 || x != seq * 7 || seq % KEYS != k ||
            seq < last[k] || seq >= sent)
            fail_msg("%s reads '%s' after the crash: its last answered put was %d (%d sent)",
                     key, buf, last[k], sent);
    }
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r.pid, "felix-broker"), 0);
    printf("kill -9 during a compaction after %d answered overwrites of %d keys (%d sent): "
           "every key reads its last answered value or a later one\n",
           answered, KEYS, sent);
    (void)nftw(r.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_kill_9_under_on_commit_loses_no_answered_cache_put,
                              proc_teardown),
    cmocka_unit_test_teardown(test_kill_9_during_a_compaction_loses_no_answered_overwrite,
                              proc_teardown),
};
FX_TEST_MAIN(tests)
