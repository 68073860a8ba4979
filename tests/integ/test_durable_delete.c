/* Integration tests of deleting a durable stream and creating it again: a
 * deletion that fails part-way, or one still removing the old files on one
 * storage thread while the new stream is acknowledged on another, never
 * takes the new stream's records (every incarnation has its own catalogue
 * entry and directory, storage/catalog.h). A real broker, its admin
 * endpoint and libfelix clients in this process (admin_fixture.h), with
 * the deletion test hook (broker/test_hooks.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <sys/stat.h>

#include "broker/test_hooks.h"
#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "storage/syncpol.h"

static E *d_new(char *root, size_t cap)
{
    E *e = e_new();
    snprintf(root, cap, "/tmp/fxdelXXXXXX");
    assert_non_null(mkdtemp(root));
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_ON_COMMIT;
    e->bo.durable.segment_bytes = 1 << 20;
    e->bo.workers = 2;
    return e;
}

static void admin(E *e, const char *method, const char *stream, int want)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", stream);
    http_body(e, method, path, strcmp(method, "PUT") == 0 ? "{\"durable\": true}" : "", &r);
    if (r.status != want)
        fail_msg("%s %s: %d %s (want %d)", method, path, r.status, r.body, want);
}

/* Publishes "<prefix><i>" for i in [0, n), each acknowledged after its flush. */
static void pub_acked(fx_client *c, const char *stream, const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char msg[32];
        snprintf(msg, sizeof(msg), "%s%d", prefix, i);
        int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
        if (rv != 0) {
            char why[512];
            fx_client_last_error(c, why, sizeof(why));
            fail_msg("publish %s: %s (%s)", msg, fx_strerror(rv), why);
        }
    }
}

static void stop_broker(E *e)
{
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;
}

static const char NEW10[] = "new0\nnew1\nnew2\nnew3\nnew4\nnew5\nnew6\nnew7\nnew8\nnew9\n";

/* The old stream's files are still being removed (its storage thread is
 * held after closing the log) while the stream is created again and ten
 * publishes are acknowledged on the other worker's storage thread. Once the
 * removal runs, the new records are all there, also after a restart. */
static void test_a_stream_created_again_while_its_old_files_go_keeps_its_records(void **state)
{
    (void)state;
    char root[64];
    E *e = d_new(root, sizeof(root));
    e_start(e);
    admin(e, "PUT", "x", 201);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_acked(c, "x", "old", 5);
    fx_broker_test_deletions(true, 0, 0);
    admin(e, "DELETE", "x", 200);
    assert_true(fx_broker_test_deletion_held(HANG_MS)); /* entry marked, log closed */
    admin(e, "PUT", "x", 201);                          /* the next handle id: the other worker */
    pub_acked(c, "x", "new", 10);
    fx_broker_test_deletions(false, 0, 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop_broker(e); /* after the storage threads ran everything queued */

    static char text[4096];
    assert_int_equal(fix_read_log(root, "x", text, sizeof(text)), 10);
    assert_string_equal(text, NEW10);
    assert_int_equal(fix_catalog_entries(root),
                     1); /* the old incarnation's entry went with its files */

    e_start(e); /* and the restarted broker serves them */
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, "x", &st);
    fix_expect_event(s, 0, "new0");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* A deletion whose file removal fails leaves its entry marked. The stream
 * created again under the same name gets its own entry and directory: its
 * acknowledged records survive the restart, which finishes the old
 * deletion (the broker starts; nothing of the old stream comes back). */
static void test_a_failed_deletion_never_takes_the_stream_created_again(void **state)
{
    (void)state;
    char root[64];
    E *e = d_new(root, sizeof(root));
    e_start(e);
    admin(e, "PUT", "x", 201);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_acked(c, "x", "old", 5);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_broker_test_deletions(false, -EIO, 1);
    admin(e, "DELETE", "x", 200);
    uint64_t t0 = fx_now_ns();
    for (;;) { /* its worker ends it, then its storage thread fails the removal */
        fx_metrics_snapshot_take(&b);
        if (DELTA(a, b, storage_delete_failures) == 1)
            break;
        if (fx_now_ns() - t0 > (uint64_t)HANG_MS * FX_NS_PER_MS)
            fail_msg("the deletion did not fail as injected");
        sleep_ms(2);
    }
    fx_broker_test_deletions(false, 0, 0);
    admin(e, "PUT", "x", 201);
    pub_acked(c, "x", "new", 10);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop_broker(e);

    e_start(e); /* the old deletion finishes at start */
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, "x", &st);
    for (int i = 0; i < 10; i++) {
        char msg[16];
        snprintf(msg, sizeof(msg), "new%d", i);
        fix_expect_event(s, (uint64_t)i, msg);
    }
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop_broker(e);

    static char text[4096];
    assert_int_equal(fix_read_log(root, "x", text, sizeof(text)), 10);
    assert_string_equal(text, NEW10);
    assert_int_equal(fix_catalog_entries(root), 1);
    e_free(e);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_stream_created_again_while_its_old_files_go_keeps_its_records),
    cmocka_unit_test(test_a_failed_deletion_never_takes_the_stream_created_again),
};
FX_TEST_MAIN(tests)
