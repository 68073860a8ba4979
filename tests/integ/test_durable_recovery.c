/* Integration tests of the start of a broker with durable streams: a
 * damaged log quarantines its stream only (its publishes and subscribes get
 * "storage damaged" naming file and position, GET /v1/streams and a gauge
 * say so, other tenants are served end to end); the broker serves before
 * the logs are recovered and a stream whose recovery is held is served once
 * it is done; a failed log open is tried again and succeeds once its cause
 * is gone. Then the daemon: it starts on a damaged log, `felix log repair`
 * keeps the valid prefix, and under systemd it asks for start time before
 * READY=1 and reports the recovery after it. In-process brokers (with
 * admin_fixture.h) and the built binaries (proc.h); timeouts are hang
 * guards only. */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "broker/test_hooks.h"
#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "integ/proc.h"
#include "storage/catalog.h"
#include "storage/memio.h"
#include "storage/syncpol.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A broker whose durable root is |root| (a fresh temp dir unless set). */
static E *r_new(char *root, size_t cap)
{
    E *e = e_new();
    if (root[0] == '\0') {
        snprintf(root, cap, "/tmp/fxrecXXXXXX");
        assert_non_null(mkdtemp(root));
    }
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_ON_COMMIT;
    e->bo.durable.segment_bytes = 1 << 20;
    e->bo.durable.preallocate = false;
    return e;
}

static fx_client *tenant_client(E *e, const char *tenant)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, tenant, "any-token");
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.reconnect = false;
    return fix_connect(&o);
}

static void put_durable(E *e, const char *tenant, const char *stream)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/%s/" NS "/%s", tenant, stream);
    http_body(e, "PUT", path, "{\"durable\": true}", &r);
    if (r.status != 201)
        fail_msg("PUT %s: %d %s", path, r.status, r.body);
}

static void pub_ok(fx_client *c, const char *stream, const char *msg)
{
    int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
    if (rv != 0) {
        char why[512];
        fx_client_last_error(c, why, sizeof(why));
        fail_msg("publish %s to %s: %s (%s)", msg, stream, fx_strerror(rv), why);
    }
}

/* Publishes |msg| and expects a failure whose text holds each of |texts|
 * (NULL-terminated). */
static void pub_fails_with(fx_client *c, const char *stream, const char *msg,
                           const char *const *texts)
{
    int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
    char why[1024];
    fx_client_last_error(c, why, sizeof(why));
    if (rv == 0)
        fail_msg("publish %s to %s succeeded, want an error", msg, stream);
    for (size_t i = 0; texts[i] != NULL; i++)
        if (strstr(why, texts[i]) == NULL)
            fail_msg("publish %s to %s: '%s' lacks '%s'", msg, stream, why, texts[i]);
}

/* The path of segment 0 of |tenant|/default/|stream| under |root|. */
static void segment0(const char *root, const char *tenant, const char *stream, char *out,
                     size_t cap)
{
    fx_catalog *cat;
    char err[256], dir[1024];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, tenant, NS, stream);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    int n = snprintf(out, cap, "%s/00000000000000000000.log", dir);
    assert_true(n > 0 && (size_t)n < cap);
}

/* Flips a bit of the byte at |off| of file |path|. */
static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_true(ch != EOF);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    fputc(ch ^ 0x40, f);
    fclose(f);
}

/* The entry of |tenant|/default/|stream| in GET /v1/streams (caller decrefs
 * |*pall|). */
static json_t *stream_entry(E *e, const char *tenant, const char *stream, json_t **pall)
{
    json_t *all = get_json(e, "/v1/streams");
    json_t *list = json_is_array(all) ? all : json_object_get(all, "streams");
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x)
    {
        if (strcmp(json_string_value(json_object_get(x, "tenant")), tenant) == 0 &&
            strcmp(json_string_value(json_object_get(x, "stream")), stream) == 0) {
            *pall = all;
            return x;
        }
    }
    fail_msg("no %s/%s in GET /v1/streams", tenant, stream);
    return NULL;
}

static const char *state_of(const json_t *x)
{
    const char *s = json_string_value(json_object_get(x, "durable_state"));
    return s != NULL ? s : "(null)";
}

/* Waits until every catalogued stream's recovery is done. */
static void wait_recovered(E *e)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_broker_recovery r;
    for (;;) {
        fx_broker_durable_recovery(e->b, &r);
        if (r.done == r.total)
            return;
        if (fx_now_ns() > deadline)
            fail_msg("recovered %llu of %llu durable streams", (unsigned long long)r.done,
                     (unsigned long long)r.total);
        sleep_ms(5);
    }
}

/* Runs a broker on |root| with t1/default/r holding m0..m4 (records of 30
 * bytes from byte 32 of segment 0) and t2/default/ok holding o0. */
static void two_tenants(char *root, size_t cap)
{
    E *e = r_new(root, cap);
    e_start(e);
    put_durable(e, "t1", "r");
    put_durable(e, "t2", "ok");
    fx_client *c1 = tenant_client(e, "t1"), *c2 = tenant_client(e, "t2");
    char msg[16];
    for (int i = 0; i < 5; i++) {
        snprintf(msg, sizeof(msg), "m%d", i);
        pub_ok(c1, "r", msg);
    }
    pub_ok(c2, "ok", "o0");
    fix_close(c1);
    fix_close(c2);
    e_free(e);
}

/* ---- a damaged log ----------------------------------------------------------------- */

static void test_damaged_log_quarantines_its_stream_and_other_tenants_are_served(void **state)
{
    (void)state;
    char root[64] = "", seg[1200];
    two_tenants(root, sizeof(root));
    segment0(root, "t1", "r", seg, sizeof(seg));
    flip_byte(seg, 32 + 2 * 30 + 28); /* the payload of record 2 of 5, all flushed */
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    E *e = r_new(root, sizeof(root));
    e->bo.auto_create_streams = false; /* the streams come from the catalogue */
    e_start(e);
    wait_recovered(e);
    fx_broker_recovery r;
    fx_broker_durable_recovery(e->b, &r);
    assert_int_equal(r.total, 2);
    assert_int_equal(r.damaged, 1);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(m1.g.storage_quarantined_streams - m0.g.storage_quarantined_streams, 1);

    /* The damaged stream: a clear error naming the file and position, and
     * not the server's directory. */
    fx_client *c1 = tenant_client(e, "t1");
    const char *want[] = {"publish failed: storage damaged", "record checksum mismatch",
                          "file=00000000000000000000.log, position=92", NULL};
    pub_fails_with(c1, "r", "lost", want);
    char why[1024];
    fx_client_last_error(c1, why, sizeof(why));
    if (strstr(why, root) != NULL)
        fail_msg("the error names the storage root: %s", why);
    fx_subscription *s = NULL;
    assert_true(fx_subscribe(&s, c1, NS, "r", NULL) != 0);
    fx_client_last_error(c1, why, sizeof(why));
    if (strstr(why, "storage damaged") == NULL || strstr(why, "position=92") == NULL)
        fail_msg("subscribe to a damaged stream: '%s'", why);

    /* Another tenant: its durable stream is served end to end. */
    fx_client *c2 = tenant_client(e, "t2");
    fx_start from0 = {.kind = FX_START_OFFSET, .offset = 0};
    fx_subscription *s2 = fix_subscribe(c2, "ok", &from0);
    pub_ok(c2, "ok", "o1");
    fix_expect_event(s2, 0, "o0");
    fix_expect_event(s2, 1, "o1");
    fx_unsubscribe(s2);

    json_t *all;
    json_t *x = stream_entry(e, "t1", "r", &all);
    assert_string_equal(state_of(x), "damaged");
    const char *err = json_string_value(json_object_get(x, "durable_error"));
    assert_non_null(err);
    assert_non_null(strstr(err, "position=92"));
    assert_true(json_is_null(json_object_get(x, "log_next_offset")));
    json_decref(all);
    x = stream_entry(e, "t2", "ok", &all);
    assert_string_equal(state_of(x), "open");
    assert_int_equal(ju(x, "log_next_offset"), 2);
    json_decref(all);
    fix_close(c1);
    fix_close(c2);
    e_free(e);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(m1.g.storage_quarantined_streams - m0.g.storage_quarantined_streams, 0);

    /* --repair-durable cuts it at the bad record: served again from there. */
    e = r_new(root, sizeof(root));
    e->bo.durable.repair = true;
    e_start(e);
    c1 = tenant_client(e, "t1");
    s = fix_subscribe(c1, "r", NULL);
    pub_ok(c1, "r", "new");
    fix_expect_event(s, 2, "new");
    fx_unsubscribe(s);
    fix_close(c1);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- serving before recovery ends ------------------------------------------------ */

typedef struct ack_wait {
    atomic_int done; /* 0 pending, 1 ok, 2 failed */
} ack_wait;

static void on_ack(void *user, int rv)
{
    ack_wait *a = user;
    atomic_store(&a->done, rv == 0 ? 1 : 2);
}

static void test_broker_serves_before_a_held_recovery_ends_and_the_stream_after(void **state)
{
    (void)state;
    char root[64] = "";
    two_tenants(root, sizeof(root));
    fx_broker_test_hold_recovery("r", true);
    E *e = r_new(root, sizeof(root));
    e->bo.workers = 2;
    e_start(e); /* returns while the recovery of t1/default/r is held */
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (!fx_broker_test_recovery_is_held()) {
        if (fx_now_ns() > deadline)
            fail_msg("the recovery of t1/default/r never started");
        sleep_ms(5);
    }
    fx_broker_recovery r;
    fx_broker_durable_recovery(e->b, &r);
    assert_int_equal(r.total, 2);
    assert_true(r.done < 2);
    json_t *all;
    json_t *x = stream_entry(e, "t1", "r", &all);
    assert_string_equal(state_of(x), "recovering");
    json_decref(all);
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    assert_true(m.g.storage_recovering_streams >= 1);

    /* The listener answers: another tenant publishes and subscribes now. */
    fx_client *c2 = tenant_client(e, "t2");
    fx_subscription *s2 = fix_subscribe(c2, "mem", NULL);
    pub_ok(c2, "mem", "x");
    fix_expect_event(s2, 0, "x");
    fx_unsubscribe(s2);

    /* A publish to the stream being recovered waits for its recovery. */
    fx_client *c1 = tenant_client(e, "t1");
    static ack_wait a;
    atomic_store(&a.done, 0);
    assert_int_equal(fx_publish_async(c1, NS, "r", "m5", 2, FX_ACK_PER_MESSAGE, on_ack, &a), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&a.done), 0);
    fx_broker_test_hold_recovery("r", false);
    deadline = fix_deadline_ns(HANG_MS);
    while (atomic_load(&a.done) == 0) {
        if (fx_now_ns() > deadline)
            fail_msg("the publish to the recovered stream was never answered");
        sleep_ms(5);
    }
    assert_int_equal(atomic_load(&a.done), 1);
    wait_recovered(e);
    x = stream_entry(e, "t1", "r", &all);
    assert_string_equal(state_of(x), "open");
    json_decref(all);
    fx_start from0 = {.kind = FX_START_OFFSET, .offset = 0};
    fx_subscription *s = fix_subscribe(c1, "r", &from0);
    char msg[16];
    for (int i = 0; i < 6; i++) {
        snprintf(msg, sizeof(msg), "m%d", i);
        fix_expect_event(s, (uint64_t)i, msg); /* m5 continued the recovered log */
    }
    fx_unsubscribe(s);
    fix_close(c1);
    fix_close(c2);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- a failed open is tried again ---------------------------------------------------- */

static void test_failed_log_open_is_retried_and_succeeds_once_the_cause_is_gone(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    static char root[] = "/fxrec";
    E *e = r_new(root, sizeof(root));
    e->bo.durable.io = fx_memio_sio(m);
    e_start(e);
    put_durable(e, "t1", "f");
    fx_client *c = tenant_client(e, "t1");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_memio_fail_only(m, ".log");
    fx_memio_fail(m, FX_MEMIO_OPEN, -EMFILE, 1); /* out of descriptors, once */
    const char *want[] = {"publish failed: storage error", NULL};
    pub_fails_with(c, "f", "a", want);
    /* Not tried again within the second: refused at once, one failure. */
    pub_fails_with(c, "f", "b", want);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_open_failures), 1);
    json_t *all;
    json_t *x = stream_entry(e, "t1", "f", &all);
    assert_string_equal(state_of(x), "failed");
    json_decref(all);
    /* The cause is gone: the next use after the backoff opens the log. */
    sleep_ms(1100);
    fx_subscription *s = fix_subscribe(c, "f", NULL);
    pub_ok(c, "f", "c");
    fix_expect_event(s, 0, "c");
    fx_unsubscribe(s);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_open_failures), 1);
    x = stream_entry(e, "t1", "f", &all);
    assert_string_equal(state_of(x), "open");
    json_decref(all);
    fix_close(c);
    e_free(e);
    fx_memio_free(m);
}

/* ---- the daemon -------------------------------------------------------------------- */

typedef struct run {
    char dir[64];
    char broker[512], felix[512];
    char out[128], err[128], state_set[160], data[128], data_set[160];
    char text[16384];
    char server[64], pin[80];
    pid_t pid;
} run;

static void run_init(run *r)
{
    proc_binary("felix-broker", r->broker, sizeof(r->broker));
    proc_binary("felix", r->felix, sizeof(r->felix));
    snprintf(r->dir, sizeof(r->dir), "/tmp/fxrecdXXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->out, sizeof(r->out), "%s/out", r->dir);
    snprintf(r->err, sizeof(r->err), "%s/err", r->dir);
    snprintf(r->state_set, sizeof(r->state_set), "state_dir=%s/state", r->dir);
    snprintf(r->data, sizeof(r->data), "%s/data", r->dir);
    snprintf(r->data_set, sizeof(r->data_set), "durable_storage_dir=%s", r->data);
}

/* Starts the daemon (|env| put first in its environment, may be NULL) and
 * reads its address and certificate pin. */
static void start(run *r, char *const env[])
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
                    NULL};
    unlink(r->out);
    r->pid = proc_spawn(argv, r->out, r->err, env, false);
    proc_wait_text(r->out, "export FELIX_SERVER=", r->text, sizeof(r->text), r->pid);
    const char *line = strstr(r->text, "export FELIX_SERVER=");
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", r->server, r->pin), 2);
}

static void stop(run *r)
{
    assert_int_equal(kill(r->pid, SIGTERM), 0);
    assert_int_equal(proc_wait(r->pid, "felix-broker"), 0);
}

static fx_client *connect_to(run *r)
{
    fx_client_opts o;
    fix_daemon_client_opts(&o, r->server, r->pin);
    return fix_connect(&o);
}

/* Runs `felix log |sub| |dir|`; returns its exit status, its output in
 * r->text. */
static int felix_log(run *r, const char *sub, const char *dir)
{
    char out[160], err[160];
    snprintf(out, sizeof(out), "%s/cli.out", r->dir);
    snprintf(err, sizeof(err), "%s/cli.err", r->dir);
    char *argv[] = {r->felix, "log", (char *)sub, (char *)dir, NULL};
    int st = proc_wait(proc_spawn(argv, out, err, NULL, false), "felix log");
    char e[4096];
    proc_slurp(out, r->text, sizeof(r->text));
    proc_slurp(err, e, sizeof(e));
    size_t n = strlen(r->text);
    snprintf(r->text + n, sizeof(r->text) - n, "%s", e);
    return st;
}

static void test_daemon_starts_on_a_damaged_log_and_felix_log_repair_keeps_the_prefix(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r, NULL);
    fx_client *c = connect_to(&r);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fx_publish(c, NS, "crash", "abc", 3, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    stop(&r);
    /* Flip a payload byte of record 2 of 5 (records of 28 + 3 bytes from 32). */
    char seg[1200], dir[1200];
    segment0(r.data, "t1", "crash", seg, sizeof(seg));
    flip_byte(seg, 32 + 2 * 31 + 28);
    snprintf(dir, sizeof(dir), "%s", seg);
    *strrchr(dir, '/') = '\0';

    /* It starts (it used to exit 4) and serves the other streams. */
    start(&r, NULL);
    c = connect_to(&r);
    const char *want[] = {"storage damaged", "file=00000000000000000000.log, position=94", NULL};
    pub_fails_with(c, "crash", "lost", want);
    fx_subscription *s = NULL;
    /* A publish creates the durable stream (a subscribe never does). */
    assert_int_equal(fx_publish(c, NS, "other", "fine", 4, FX_ACK_PER_MESSAGE), 0);
    fx_start from = {.kind = FX_START_EARLIEST};
    assert_int_equal(fx_subscribe(&s, c, NS, "other", &from), 0);
    fix_expect_event(s, 0, "fine");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    stop(&r);
    proc_slurp(r.err, r.text, sizeof(r.text));
    proc_assert_contains(r.text, "the log of t1/default/crash/0 is damaged");

    /* Offline repair keeps records 0 and 1 and says what it dropped. */
    assert_int_equal(felix_log(&r, "verify", dir), 1);
    if (felix_log(&r, "repair", dir) != 0)
        fail_msg("felix log repair failed:\n%s", r.text);
    proc_assert_contains(r.text, "repaired: dropped 93 bytes (0 whole segments) from offset 2 on");
    proc_assert_contains(r.text, "kept offsets 0..2");
    assert_int_equal(felix_log(&r, "verify", dir), 0);
    assert_int_equal(felix_log(&r, "repair", dir), 0);
    proc_assert_contains(r.text, "nothing to repair: offsets 0..2 intact");

    start(&r, NULL);
    c = connect_to(&r);
    s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "crash", NULL), 0);
    assert_int_equal(fx_publish(c, NS, "crash", "after", 5, FX_ACK_PER_MESSAGE), 0);
    fix_expect_event(s, 2, "after");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    stop(&r);
    fix_rm_dir(r.dir);
}

/* Reads the datagrams sent to |fd| into |buf| (each on its own line) until
 * one holds |needle|; fails on a hang. */
static void notify_wait(int fd, const char *needle, char *buf, size_t cap)
{
    uint64_t deadline = proc_now_ms() + PROC_HANG_MS;
    for (;;) {
        size_t len = strlen(buf);
        if (len + 2 >= cap)
            fail_msg("too many notifications:\n%s", buf);
        ssize_t n = recv(fd, buf + len, cap - len - 2, MSG_DONTWAIT);
        if (n > 0) {
            buf[len + (size_t)n] = '\n';
            buf[len + (size_t)n + 1] = '\0';
            if (strstr(buf + len, needle) != NULL)
                return;
            continue;
        }
        if (proc_now_ms() > deadline)
            fail_msg("no '%s' among the notifications:\n%s", needle, buf);
        usleep(10000);
    }
}

static void test_systemd_gets_extend_timeout_then_ready_then_recovery_status(void **state)
{
    (void)state;
    run r;
    run_init(&r);
    start(&r, NULL);
    fx_client *c = connect_to(&r);
    assert_int_equal(fx_publish(c, NS, "a", "x", 1, FX_ACK_PER_MESSAGE), 0);
    assert_int_equal(fx_client_close(c, PROC_HANG_MS), 0);
    stop(&r);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", r.dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char env_notify[160];
    snprintf(env_notify, sizeof(env_notify), "NOTIFY_SOCKET=%s", sa.sun_path);
    char *env[] = {env_notify, NULL};
    start(&r, env);
    static char got[8192];
    got[0] = '\0';
    notify_wait(fd, "READY=1", got, sizeof(got));
    const char *extend = strstr(got, "EXTEND_TIMEOUT_USEC=");
    const char *ready = strstr(got, "READY=1");
    if (extend == NULL || extend > ready)
        fail_msg("no EXTEND_TIMEOUT_USEC before READY=1:\n%s", got);
    notify_wait(fd, "recovered 1 of 1 durable streams", got, sizeof(got));
    stop(&r);
    close(fd);
    fix_rm_dir(r.dir);
}

static int teardown(void **state)
{
    fx_broker_test_hold_recovery("", false);
    return proc_teardown(state);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_damaged_log_quarantines_its_stream_and_other_tenants_are_served),
    cmocka_unit_test_teardown(test_broker_serves_before_a_held_recovery_ends_and_the_stream_after,
                              teardown),
    cmocka_unit_test(test_failed_log_open_is_retried_and_succeeds_once_the_cause_is_gone),
    cmocka_unit_test_teardown(
        test_daemon_starts_on_a_damaged_log_and_felix_log_repair_keeps_the_prefix, teardown),
    cmocka_unit_test_teardown(test_systemd_gets_extend_timeout_then_ready_then_recovery_status,
                              teardown),
};
FX_TEST_MAIN(tests)
