/* A real crash of felix-broker, the binary run as a child process, with a
 * durable stream under on_commit: kill -9 while a publisher keeps 32 acked
 * publishes in flight, start the broker again on the same storage root,
 * and check that every acknowledged record is in the log after the
 * restart, in order, exactly once, and that new publishes continue at the
 * next offset. Ports are 0; timeouts are hang guards only. */
/* fx-test-libs: fx_client fx_storage fx_quic fx_wire fx_base */
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
#include "storage/catalog.h"
#include "storage/dlog.h"

#define NS "default"
#define STREAM "crash"
#define MAX_SEQ 200000 /* more than the publisher reaches before the kill */
#define IN_FLIGHT 32
#define ACKED_BEFORE_KILL 400

typedef struct run {
    char dir[64];
    char broker[512];
    char out[128], err[128], state_set[160], data[128], data_set[160];
    char text[16384];
    char server[64], pin[80];
    pid_t pid;
} run;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void run_init(run *r)
{
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxcrashXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state_set, sizeof(r->state_set), "state_dir=%s/state", r->dir);
    snprintf(r->data, sizeof(r->data), "%s/data", r->dir);
    snprintf(r->data_set, sizeof(r->data_set), "durable_storage_dir=%s", r->data);
}

/* Starts the broker and reads its address and certificate pin. */
/* The admin token of the daemon and of the CLI that calls it (the broker
 * and felix read the same variable), winning over one this process has. */
static char *admin_env[] = {"FELIX_ADMIN_TOKEN=durable-crash-admin-token", NULL};

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
                    "durable_default=true",
                    "--set",
                    "durable_segment_bytes=65536", /* rollovers under load too */
                    NULL};
    unlink(r->out);
    r->pid = proc_spawn(argv, r->out, r->err, admin_env, false);
    proc_broker_address(r->out, r->text, sizeof(r->text), r->pid, r->server, r->pin);
}

static fx_client *connect_to(run *r)
{
    return proc_broker_connect(r->server, r->pin, FX_POLICY_BLOCK);
}

/* ---- the publisher --------------------------------------------------------------- */

typedef struct pub {
    fx_client *c;
    atomic_bool stop;
    atomic_int inflight;
    atomic_int nacked;
    atomic_bool acked[MAX_SEQ];
} pub;

typedef struct ack_ctx {
    pub *p;
    int seq;
} ack_ctx;

static ack_ctx ctxs[MAX_SEQ];

static void on_ack(void *user, int rv)
{
    ack_ctx *a = user;
    if (rv == 0) {
        atomic_store(&a->p->acked[a->seq], true);
        atomic_fetch_add(&a->p->nacked, 1);
    }
    atomic_fetch_sub(&a->p->inflight, 1);
}

static void *pub_main(void *arg)
{
    pub *p = arg;
    char msg[32];
    for (int seq = 0; seq < MAX_SEQ && !atomic_load(&p->stop); seq++) {
        while (atomic_load(&p->inflight) >= IN_FLIGHT && !atomic_load(&p->stop))
            usleep(100);
        snprintf(msg, sizeof(msg), "k%d", seq);
        ctxs[seq] = (ack_ctx){.p = p, .seq = seq};
        atomic_fetch_add(&p->inflight, 1);
        if (fx_publish_async(p->c, NS, STREAM, msg, strlen(msg), FX_ACK_PER_MESSAGE, on_ack,
                             &ctxs[seq]) != 0) {
            atomic_fetch_sub(&p->inflight, 1);
            break; /* the broker is gone */
        }
    }
    return NULL;
}

/* ---- the log ------------------------------------------------------------------- */

/* Checks the log of the stream: "k<seq>" records with strictly rising seq,
 * each acked seq present, then |tail| (if not NULL) as the last record.
 * Returns the number of "k" records. */
static uint64_t check_log(run *r, const pub *p, const char *tail)
{
    fx_catalog *cat;
    char err[256], dir[1024];
    assert_int_equal(fx_catalog_open(&cat, NULL, r->data, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, "t1", NS, STREAM);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 65536;
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, dir, &c, 1, NULL), 0);
    assert_int_equal(fx_dlog_first_offset(log), 0);
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    static bool seen[MAX_SEQ];
    memset(seen, 0, sizeof(seen));
    long last = -1;
    uint64_t nk = 0;
    bool tail_seen = false;
    for (uint64_t from = 0;;) {
        assert_int_equal(fx_dlog_read(log, from, 1 << 20, 4096, &pg), 0);
        if (pg.n == 0)
            break;
        for (size_t i = 0; i < pg.n; i++) {
            char txt[32];
            snprintf(txt, sizeof(txt), "%.*s", (int)pg.recs[i].len, (const char *)pg.recs[i].data);
            assert_false(tail_seen); /* |tail| is the last record */
            if (tail != NULL && strcmp(txt, tail) == 0) {
                assert_int_equal(pg.recs[i].offset, nk);
                tail_seen = true;
                continue;
            }
            long seq;
            assert_int_equal(sscanf(txt, "k%ld", &seq), 1);
            if (seq <= last)
                fail_msg("record %s at offset %llu after k%ld: out of order or duplicated", txt,
                         (unsigned long long)pg.recs[i].offset, last);
            last = seq;
            seen[seq] = true;
            nk++;
        }
        from = pg.next;
    }
    fx_dlog_page_deinit(&pg);
    fx_dlog_close(log, false);
    assert_true(tail == NULL || tail_seen);
    for (int s = 0; s < MAX_SEQ; s++)
        if (atomic_load(&p->acked[s]) && !seen[s])
            fail_msg("acknowledged record k%d is missing after the crash", s);
    return nk;
}

static void test_kill_9_under_on_commit_loses_no_acknowledged_record(void **state)
{
    (void)state;
    static pub p;
    memset(&p, 0, sizeof(p));
    run r;
    run_init(&r);
    start(&r);
    p.c = connect_to(&r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pub_main, &p), 0);
    uint64_t t0 = proc_now_ms();
    while (atomic_load(&p.nacked) < ACKED_BEFORE_KILL) {
        if (proc_now_ms() - t0 > PROC_HANG_MS)
            fail_msg("only %d publishes acknowledged", atomic_load(&p.nacked));
        usleep(1000);
    }
    assert_int_equal(kill(r.pid, SIGKILL), 0); /* mid-load: 32 publishes in flight */
    int st;
    assert_int_equal(waitpid(r.pid, &st, 0), r.pid);
    proc_track(r.pid, false);
    assert_true(WIFSIGNALED(st));
    atomic_store(&p.stop, true);
    pthread_join(th, NULL);
    (void)fx_client_close(p.c, 1000); /* the broker is gone: in-flight publishes fail */
    int acked = atomic_load(&p.nacked);

    /* Restart on the same root: the stream comes back from the catalogue and
     * a new publish continues at the next offset. */
    start(&r);
    fx_client *c = connect_to(&r);
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, STREAM, NULL), 0);
    assert_int_equal(fx_publish(c, NS, STREAM, "after", 5, FX_ACK_PER_MESSAGE), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
    assert_true(ev.has_offset);
    uint64_t next = ev.offset;
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r.pid, "felix-broker"), 0);

    uint64_t nk = check_log(&r, &p, "after");
    assert_int_equal(next, nk); /* "after" took the offset after the recovered records */
    assert_true(nk >= (uint64_t)acked);
    printf("kill -9 after %d acknowledged publishes: %llu records recovered, none lost\n", acked,
           (unsigned long long)nk);
    (void)nftw(r.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Runs `felix streams create [--durable] t1/default/NAME` against the
 * daemon's admin endpoint; returns its exit status, its stderr in r->text. */
static int cli_create(run *r, const char *felix, const char *admin, bool durable, const char *name)
{
    char path[64], out[160], err[160];
    snprintf(path, sizeof(path), "t1/default/%s", name);
    snprintf(out, sizeof(out), "%s/cli.out", r->dir);
    snprintf(err, sizeof(err), "%s/cli.err", r->dir);
    char *argv[] = {(char *)felix,
                    "streams",
                    "create",
                    "--admin",
                    (char *)admin,
                    durable ? "--durable" : path,
                    durable ? path : NULL,
                    NULL};
    int st = proc_wait(proc_spawn(argv, out, err, admin_env, false), "felix streams create");
    proc_slurp(err, r->text, sizeof(r->text));
    if (st == 0)
        proc_slurp(out, r->text, sizeof(r->text));
    return st;
}

static void test_cli_streams_create_durable_makes_the_stream_durable(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    char felix[512];
    proc_binary("felix", felix, sizeof(felix));
    start(&r);
    const char *line = strstr(r.text, "felix-broker: admin HTTP on ");
    assert_non_null(line);
    unsigned port = 0;
    const char *p = strstr(line, "(port ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "(port %u)", &port), 1);
    char admin[32];
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", port);
    assert_int_equal(cli_create(&r, felix, admin, true, "viacli"), 0);
    proc_assert_contains(r.text, "created t1/default/viacli (durable)");
    assert_int_equal(cli_create(&r, felix, admin, false, "mem"), 0);
    /* The flag reaches the broker: an in-memory stream cannot become durable. */
    assert_true(cli_create(&r, felix, admin, true, "mem") != 0);
    proc_assert_contains(r.text, "changing stream durability requires removal and recreation");
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r.pid, "felix-broker"), 0);
    (void)nftw(r.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_kill_9_under_on_commit_loses_no_acknowledged_record,
                              proc_teardown),
    cmocka_unit_test_teardown(test_cli_streams_create_durable_makes_the_stream_durable,
                              proc_teardown),
};
FX_TEST_MAIN(tests)
