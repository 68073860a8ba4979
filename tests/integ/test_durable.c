/* Integration tests of durable streams in the broker: creating them (admin
 * API, durable_default), the refusals (no storage configured, durability
 * flipped), the append path (every acked publish is in the log before its
 * ack, the ring continues at the log's offsets after a restart), group
 * commit and the durable_max_unsynced_bytes bound, and storage errors
 * (through the in-memory I/O layer's fault injection) failing publishes
 * without reaching subscribers. A real broker, its admin endpoint and
 * libfelix clients in this process (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "broker/idtable.h"
#include "broker/test_hooks.h"
#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/memio.h"
#include "storage/syncpol.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A broker whose durable root is |root| (a fresh temp dir unless set). */
static E *d_new(char *root, size_t cap, int mode)
{
    E *e = e_new();
    if (root[0] == '\0') {
        snprintf(root, cap, "/tmp/fxdurXXXXXX");
        assert_non_null(mkdtemp(root));
    }
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = mode;
    e->bo.durable.segment_bytes = 1 << 20;
    return e;
}

/* A broker whose durable root "/fxdur" is in the in-memory I/O layer |*pm|
 * (free it after the broker). */
static E *d_new_memio(fx_memio **pm, int mode)
{
    static char root[64];
    snprintf(root, sizeof(root), "/fxdur");
    assert_int_equal(fx_memio_new(pm), 0);
    E *e = d_new(root, sizeof(root), mode);
    e->bo.durable.io = fx_memio_sio(*pm);
    return e;
}

static void put_stream(E *e, const char *stream, const char *body, int status, const char *has)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", stream);
    http_body(e, "PUT", path, body, &r);
    if (r.status != status)
        fail_msg("PUT %s %s: %d %s (want %d)", path, body, r.status, r.body, status);
    if (has != NULL && strstr(r.body, has) == NULL)
        fail_msg("PUT %s: body %s lacks '%s'", path, r.body, has);
}

static void pub_ok(fx_client *c, const char *stream, const char *msg)
{
    int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
    if (rv != 0) {
        char why[512];
        fx_client_last_error(c, why, sizeof(why));
        fail_msg("publish %s: %s (%s)", msg, fx_strerror(rv), why);
    }
}

/* ---- creation and refusals ------------------------------------------------------ */

static void test_durable_without_storage_dir_is_refused_with_the_original_text(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    put_stream(e, "orders", "{\"durable\": true}", 400,
               "stream t1/default/orders is marked durable but this broker has no durable "
               "storage configured");
    /* Not registered: an in-memory create still works and is not durable. */
    put_stream(e, "orders", "", 201, "\"durable\":false");
    e_free(e);
}

static void test_durability_cannot_be_flipped_on_an_existing_stream(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_PERIODIC);
    e_start(e);
    put_stream(e, "d", "{\"durable\": true}", 201, "\"durable\":true");
    put_stream(e, "d", "{\"durable\": true}", 200, "\"durable\":true");
    put_stream(e, "d", "", 200, "\"durable\":true"); /* no body: find it as it is */
    put_stream(e, "d", "{\"durable\": false}", 409,
               "changing stream durability requires removal and recreation: tenant=t1 "
               "namespace=default stream=d current=true requested=false");
    put_stream(e, "m", "{\"durable\": false}", 201, "\"durable\":false");
    put_stream(e, "m", "{\"durable\": true}", 409, "current=false requested=true");
    put_stream(e, "x", "{\"durable\": 1}", 400, "must be true or false");
    put_stream(e, "x", "{\"durablee\": true}", 400, "unknown field");
    put_stream(e, "x", "[true]", 400, "JSON object");
    e_free(e);
    fix_rm_dir(root);
}

/* ---- the append path ------------------------------------------------------------ */

static void test_on_commit_acks_follow_the_log_and_offsets_continue_after_restart(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e_start(e);
    put_stream(e, "orders", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "orders");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    char msg[32];
    for (int i = 0; i < 20; i++) {
        snprintf(msg, sizeof(msg), "m%d", i);
        pub_ok(c, "orders", msg); /* acked: in the log and flushed before the ack */
    }
    for (int i = 0; i < 20; i++) {
        snprintf(msg, sizeof(msg), "m%d", i);
        fix_expect_event(s, (uint64_t)i, msg);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_append_records), 20);
    assert_true(DELTA(a, b, storage_syncs) >= 1);
    assert_int_equal(DELTA(a, b, storage_errors), 0);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;

    static char text[4096];
    assert_int_equal(fix_read_log(root, "orders", text, sizeof(text)), 20);
    assert_string_equal(text, "m0\nm1\nm2\nm3\nm4\nm5\nm6\nm7\nm8\nm9\nm10\nm11\nm12\nm13\n"
                              "m14\nm15\nm16\nm17\nm18\nm19\n");

    /* The same root again: the stream comes back from the catalogue at start
     * (found, not created) and the ring continues at its log's next offset. */
    e_start(e);
    put_stream(e, "orders", "{\"durable\": true}", 200, "\"created\":false");
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    s = subscribe(c, "orders");
    pub_ok(c, "orders", "after");
    fix_expect_event(s, 20, "after");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_durable_default_makes_auto_created_streams_durable(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e->bo.durable.durable_default = true;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_ok(c, "auto", "one");
    pub_ok(c, "auto", "two");
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    /* An explicit in-memory stream is still possible beside them. */
    put_stream(e, "mem", "{\"durable\": false}", 201, "\"durable\":false");
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;
    char text[256];
    assert_int_equal(fix_read_log(root, "auto", text, sizeof(text)), 2);
    assert_string_equal(text, "one\ntwo\n");
    e_free(e);
    fix_rm_dir(root);
}

/* Async acked publishes and their results. */
typedef struct acks {
    atomic_int ok, failed;
} acks;

static void on_ack(void *user, int rv)
{
    acks *a = user;
    atomic_fetch_add(rv == 0 ? &a->ok : &a->failed, 1);
}

/* Publishes |n| acked messages "p<i>" without waiting, then waits for all
 * answers and the events of subscription |s| (offsets from |first|). */
static void burst(fx_client *c, fx_subscription *s, const char *stream, int n, uint64_t first)
{
    acks a = {0};
    char msg[32];
    for (int i = 0; i < n; i++) {
        snprintf(msg, sizeof(msg), "p%d", i);
        assert_int_equal(
            fx_publish_async(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE, on_ack, &a), 0);
    }
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    assert_int_equal(atomic_load(&a.ok), n);
    assert_int_equal(atomic_load(&a.failed), 0);
    for (int i = 0; i < n; i++) {
        snprintf(msg, sizeof(msg), "p%d", i);
        fix_expect_event(s, first + (uint64_t)i, msg);
    }
}

static void test_on_commit_group_commit_serves_several_appends_per_flush(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 0;
    e_start(e);
    put_stream(e, "g", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "g");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    burst(c, s, "g", 200, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_append_records), 200);
    /* 200 appends in flight together need fewer flushes than appends. */
    assert_true(DELTA(a, b, storage_syncs) < 200);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* Jobs of one stream that queue on its storage thread while it flushes are
 * appended together, in one write, each at its own offsets: the flush of p0
 * is held until the jobs of two other connections wait behind it. With
 * durable_flush_pipeline off, the default (the storage thread runs the
 * fdatasync). */
static void test_jobs_queued_behind_a_flush_share_one_append(void **state)
{
    (void)state;
    fx_memio *m;
    E *e = d_new_memio(&m, FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 0;
    e_start(e);
    put_stream(e, "h", "{\"durable\": true}", 201, NULL);
    fx_client *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c[0], "h");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    acks k = {0};
    fx_memio_hold_next_sync(m);
    assert_int_equal(fx_publish_async(c[0], NS, "h", "p0", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    fx_memio_wait_held(m); /* p0 is written; its flush waits */
    assert_int_equal(fx_publish_async(c[1], NS, "h", "p1", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    assert_int_equal(fx_publish_async(c[2], NS, "h", "p2", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    for (int i = 0; i < 5000; i++) {
        fx_metrics_snapshot_take(&b);
        if (DELTA(a, b, publish_accepted) >= 3)
            break;
        sleep_ms(1);
    }
    assert_int_equal(DELTA(a, b, publish_accepted), 3);
    /* The worker hands both jobs to the storage thread, held in p0's flush
     * (nothing observable marks their arrival there: the gauges count jobs
     * until they finish). Too short a wait fails the test, never passes it. */
    sleep_ms(300);
    assert_int_equal(atomic_load(&k.ok), 0); /* on_commit: nothing acked before its flush */
    fx_memio_release(m);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_flush(c[i], HANG_MS), 0);
    assert_int_equal(atomic_load(&k.ok), 3);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_append_records), 3);
    assert_int_equal(DELTA(a, b, storage_append_writes), 2);  /* p0, then p1 + p2 together */
    assert_int_equal(DELTA(a, b, storage_sync_offloaded), 0); /* the storage thread flushed */
    fix_expect_event(s, 0, "p0");
    char got[2][3] = {{0}};
    for (int i = 0; i < 2; i++) {
        fx_event ev; /* its payload lasts until the next call */
        assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
        assert_int_equal(ev.offset, 1 + (uint64_t)i);
        assert_int_equal(ev.len, 2);
        memcpy(got[i], ev.payload, 2);
    }
    /* p1 and p2, once each, in either order (two connections). */
    assert_true((strcmp(got[0], "p1") == 0 && strcmp(got[1], "p2") == 0) ||
                (strcmp(got[0], "p2") == 0 && strcmp(got[1], "p1") == 0));
    fx_unsubscribe(s);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_client_close(c[i], HANG_MS), 0);
    e_free(e);
    fx_memio_free(m);
}

/* Waits (at most 10 s: only a broken pipeline gets there) until the storage
 * threads appended |n| records since |a|; the snapshot is left in |*b|. */
static void wait_appended(const fx_metrics_snapshot *a, fx_metrics_snapshot *b, uint64_t n)
{
    for (int i = 0; i < 10000; i++) {
        fx_metrics_snapshot_take(b);
        if (DELTA((*a), (*b), storage_append_records) >= (int64_t)n)
            return;
        sleep_ms(1);
    }
    fail_msg("%llu records appended, want %llu",
             (unsigned long long)DELTA((*a), (*b), storage_append_records), (unsigned long long)n);
}

/* The pipelined flush: while p0's fdatasync is held on the sync thread, the
 * storage thread goes on appending p1 and p2 (it would wait for the flush
 * otherwise, and the records would stay unappended); none of the three is
 * acknowledged until a flush covering it completed: p0 by the held one, p1
 * and p2 together by the next, which starts as the held one completes. */
static void test_appends_go_on_while_a_flush_is_in_flight_and_acks_wait_for_it(void **state)
{
    (void)state;
    fx_memio *m;
    E *e = d_new_memio(&m, FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 0;
    e->bo.durable.flush_inline = false; /* the pipeline */
    e_start(e);
    put_stream(e, "pl", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "pl");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    acks k = {0};
    fx_memio_hold_next_sync(m);
    assert_int_equal(fx_publish_async(c, NS, "pl", "p0", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    fx_memio_wait_held(m); /* p0 is written; its fdatasync waits on the sync thread */
    assert_int_equal(fx_publish_async(c, NS, "pl", "p1", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    wait_appended(&a, &b, 2);
    assert_int_equal(fx_publish_async(c, NS, "pl", "p2", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    wait_appended(&a, &b, 3);
    assert_int_equal(DELTA(a, b, storage_syncs), 0);
    assert_int_equal(DELTA(a, b, storage_sync_offloaded), 1);
    assert_int_equal(atomic_load(&k.ok) + atomic_load(&k.failed), 0); /* no flush completed */
    fx_memio_release(m);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    assert_int_equal(atomic_load(&k.ok), 3);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_syncs), 2);
    /* Fan-in: 1 (p0), then 2 (p1 and p2, appended during the first). */
    assert_int_equal(b.h.storage_sync_appends.sum - a.h.storage_sync_appends.sum, 3);
    fix_expect_event(s, 0, "p0");
    fix_expect_event(s, 1, "p1");
    fix_expect_event(s, 2, "p2");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fx_memio_free(m);
}

static void test_max_unsynced_bytes_keeps_one_job_in_storage_at_a_time(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 1; /* any job fills the bound alone */
    e_start(e);
    put_stream(e, "u", "{\"durable\": true}", 201, NULL);
    /* One frame per publish (no merging in libfelix): one job each. */
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.sub_queue_policy = FX_POLICY_BLOCK;
    o.reconnect = false;
    o.publish_coalesce = false;
    fx_client *c = fix_connect(&o);
    fx_subscription *s = subscribe(c, "u");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    burst(c, s, "u", 100, 0);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_append_records), 100);
    /* One job in storage at a time: every flush serves exactly one append
     * (the broker may still merge the frames of one read into one job), and
     * the jobs behind it waited on the worker. */
    uint64_t flushes = 0, appends = b.h.storage_sync_appends.sum - a.h.storage_sync_appends.sum;
    for (int i = 0; i <= FX_HIST_NBUCKETS; i++)
        flushes += b.h.storage_sync_appends.buckets[i] - a.h.storage_sync_appends.buckets[i];
    assert_true(flushes >= 2);
    assert_int_equal(appends, flushes);
    assert_int_equal(DELTA(a, b, storage_syncs), flushes);
    assert_true(DELTA(a, b, storage_bound_waits) >= 1);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- recovery at start ------------------------------------------------------------ */

/* The path of segment 0 of t1/default/|stream| under |root|. */
static void segment0(const char *root, const char *stream, char *out, size_t cap)
{
    fx_catalog *cat;
    char err[256];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, T, NS, stream);
    assert_non_null(ce);
    char dir[1024];
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    int n = snprintf(out, cap, "%s/00000000000000000000.log", dir);
    assert_true(n > 0 && (size_t)n < cap);
}

/* Runs a broker on |root| that publishes m0..m4 to durable stream "r". */
static void five_records(char *root, size_t cap)
{
    E *e = d_new(root, cap, FX_FSYNC_ON_COMMIT);
    e->bo.durable.preallocate = false;
    e_start(e);
    put_stream(e, "r", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    char msg[16];
    for (int i = 0; i < 5; i++) {
        snprintf(msg, sizeof(msg), "m%d", i);
        pub_ok(c, "r", msg);
    }
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

/* Opens the file and applies |edit| at byte |off| (flip) or at its end. */
static void damage(const char *path, long off, bool append)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (append) {
        assert_int_equal(fseek(f, 0, SEEK_END), 0);
        assert_int_equal(fwrite("torn-tail!", 1, 10, f), 10); /* < one record header */
    } else {
        assert_int_equal(fseek(f, off, SEEK_SET), 0);
        int ch = fgetc(f);
        assert_int_equal(fseek(f, off, SEEK_SET), 0);
        fputc(ch ^ 0x40, f);
    }
    fclose(f);
}

/* Waits until the broker has recovered every catalogued stream (after
 * the start, on the storage threads). */
static void wait_recovered(E *e)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_broker_recovery r;
    for (fx_broker_durable_recovery(e->b, &r); r.done < r.total;
         fx_broker_durable_recovery(e->b, &r)) {
        if (fx_now_ns() > deadline)
            fail_msg("recovered %llu of %llu durable streams", (unsigned long long)r.done,
                     (unsigned long long)r.total);
        sleep_ms(5);
    }
}

static void test_start_recovers_catalogued_streams_and_cuts_a_torn_tail(void **state)
{
    (void)state;
    char root[64] = "", seg[1200];
    five_records(root, sizeof(root));
    segment0(root, "r", seg, sizeof(seg));
    damage(seg, 0, true);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.auto_create_streams = false; /* the stream must come from the catalogue */
    e_start(e);
    wait_recovered(e);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_recovery_truncations), 1);
    assert_int_equal(DELTA(a, b, storage_recovery_truncated_bytes), 10);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "r");
    pub_ok(c, "r", "m5");
    fix_expect_event(s, 5, "m5");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    char text[256];
    assert_int_equal(fix_read_log(root, "r", text, sizeof(text)), 6);
    assert_string_equal(text, "m0\nm1\nm2\nm3\nm4\nm5\n");
    fix_rm_dir(root);
}

static void expect_pub_error(fx_client *c, const char *stream, const char *msg, const char *text);

static void test_interior_corruption_quarantines_the_stream_unless_repair(void **state)
{
    (void)state;
    char root[64] = "", seg[1200];
    five_records(root, sizeof(root));
    segment0(root, "r", seg, sizeof(seg));
    damage(seg, 32 + 2 * 30 + 28, false); /* the payload of record 2 of 5 */
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e_start(e); /* the damage no longer stops the start */
    wait_recovered(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    expect_pub_error(c, "r", "lost",
                     "storage damaged: corruption detected: record checksum mismatch");
    expect_pub_error(c, "r", "lost",
                     "(stream=t1/default/r/0, file=00000000000000000000.log, position=92)");
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);

    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.durable.repair = true;
    e_start(e);
    wait_recovered(e);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, storage_recovery_repairs), 1);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "r");
    pub_ok(c, "r", "new");
    fix_expect_event(s, 2, "new"); /* the log was cut at the bad record */
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- replay from disk ------------------------------------------------------------ */

/* Publishes "p<i>" for i in [from, to), acked. */
static void pub_range(fx_client *c, const char *stream, int from, int to)
{
    char msg[32];
    for (int i = from; i < to; i++) {
        snprintf(msg, sizeof(msg), "p%d", i);
        pub_ok(c, stream, msg);
    }
}

static void expect_range(fx_subscription *s, int from, int to)
{
    char msg[32];
    for (int i = from; i < to; i++) {
        snprintf(msg, sizeof(msg), "p%d", i);
        fix_expect_event(s, (uint64_t)i, msg);
    }
}

static void test_replay_from_earliest_or_an_offset_below_the_ring_reads_the_log(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e->bo.log_capacity = 8;             /* the ring keeps the last 8 messages */
    e->bo.durable.segment_bytes = 1024; /* history across several segments */
    e_start(e);
    put_stream(e, "h", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_range(c, "h", 0, 100);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s1 = fix_subscribe(c, "h", &st);
    st = (fx_start){.kind = FX_START_OFFSET, .offset = 37};
    fx_subscription *s2 = fix_subscribe(c, "h", &st);
    expect_range(s1, 0, 100);
    expect_range(s2, 37, 100);
    pub_range(c, "h", 100, 110); /* then live, no gap, no duplicate */
    expect_range(s1, 100, 110);
    expect_range(s2, 100, 110);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_replays), 2);
    assert_int_equal(DELTA(a, b, storage_replay_records), 100 + 63);
    fx_unsubscribe(s1);
    fx_unsubscribe(s2);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;

    /* After a restart the ring is empty: an old offset comes from disk. */
    e_start(e);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    st = (fx_start){.kind = FX_START_OFFSET, .offset = 95};
    s1 = fix_subscribe(c, "h", &st);
    expect_range(s1, 95, 110);
    pub_range(c, "h", 110, 112);
    expect_range(s1, 110, 112);
    fx_unsubscribe(s1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* Publishes "p<i>" for i in [0, n) from its own client, acked, async. */
typedef struct bg_pub {
    E *e;
    int n;
    atomic_int at; /* published so far */
} bg_pub;

static void *bg_pub_main(void *arg)
{
    bg_pub *p = arg;
    fx_client *c = e_client(p->e, FX_POLICY_BLOCK, 0, 0);
    acks a = {0};
    char msg[32];
    for (int i = 0; i < p->n; i++) {
        snprintf(msg, sizeof(msg), "p%d", i);
        assert_int_equal(
            fx_publish_async(c, NS, "live", msg, strlen(msg), FX_ACK_PER_MESSAGE, on_ack, &a), 0);
        atomic_store(&p->at, i + 1);
    }
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    assert_int_equal(atomic_load(&a.ok), p->n);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    return NULL;
}

static void test_replay_joins_live_under_concurrent_publishing_no_gap_no_duplicate(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_PERIODIC);
    e_lossless(e); /* the live queue fills during the catch-up: block, do not shed */
    e->bo.log_capacity = 16;
    e->bo.durable.segment_bytes = 16384;
    e_start(e);
    put_stream(e, "live", "{\"durable\": true}", 201, NULL);
    bg_pub p = {.e = e, .n = 3000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bg_pub_main, &p), 0);
    while (atomic_load(&p.at) < 1000)
        sleep_ms(1);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, "live", &st); /* while publishing goes on */
    /* Async publishes may take their offsets in another order than sent:
     * the check is every offset once, in order, each message once, and
     * the same sequence as the log holds. */
    static char got[3000 * 8], seen[3000];
    size_t len = 0;
    memset(seen, 0, sizeof(seen));
    for (uint64_t i = 0; i < 3000; i++) {
        fx_event ev;
        assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
        assert_true(ev.has_offset);
        assert_int_equal(ev.offset, i);
        int k;
        char txt[16];
        snprintf(txt, sizeof(txt), "%.*s", (int)ev.len, (const char *)ev.payload);
        assert_int_equal(sscanf(txt, "p%d", &k), 1);
        assert_true(k >= 0 && k < 3000 && !seen[k]);
        seen[k] = 1;
        len += (size_t)snprintf(got + len, sizeof(got) - len, "%s\n", txt);
    }
    pthread_join(th, NULL);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 100), FX_ETIMEDOUT); /* nothing more */
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;
    static char text[3000 * 8];
    assert_int_equal(fix_read_log(root, "live", text, sizeof(text)), 3000);
    assert_string_equal(text, got);
    e_free(e);
    fix_rm_dir(root);
}

static void test_offset_below_retention_gets_the_too_old_cursor_error(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e->bo.log_capacity = 4;
    e->bo.durable.segment_bytes = 512;
    e->bo.durable.retention_bytes = 1024; /* a few segments: the head goes */
    e_start(e);
    put_stream(e, "old", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    pub_range(c, "old", 0, 200);
    fx_metrics_snapshot_take(&b);
    assert_true(DELTA(a, b, storage_retention_segments) > 0);
    fx_start st = {.kind = FX_START_OFFSET, .offset = 0};
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "old", &st), FX_ECURSOR_TOO_OLD);
    fx_sub_error se;
    assert_int_equal(fx_subscription_error(s, &se), 0);
    assert_int_equal(se.code, FX_ECURSOR_TOO_OLD);
    assert_true(se.available > 0 && se.available < 196);
    fx_unsubscribe(s);
    /* From the first retained offset on it replays. */
    uint64_t first = se.available;
    st.offset = first;
    s = fix_subscribe(c, "old", &st);
    expect_range(s, (int)first, 200);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- operations -------------------------------------------------------------------- */

static json_t *stream_of(json_t *root, const char *name)
{
    json_t *arr = json_object_get(root, "streams");
    assert_true(json_is_array(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i);
        if (strcmp(json_string_value(json_object_get(x, "stream")), name) == 0)
            return x;
    }
    fail_msg("no stream %s in GET /v1/streams", name);
    return NULL;
}

static void test_list_streams_shows_durability_log_offsets_and_bytes_on_disk(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e_start(e);
    put_stream(e, "d", "{\"durable\": true}", 201, NULL);
    put_stream(e, "m", "", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_range(c, "d", 0, 3);
    pub_range(c, "m", 0, 2);
    json_t *root_j = get_json(e, "/v1/streams");
    json_t *d = stream_of(root_j, "d"), *m = stream_of(root_j, "m");
    assert_true(json_is_true(json_object_get(d, "durable")));
    assert_int_equal(ju(d, "log_first_offset"), 0);
    assert_int_equal(ju(d, "log_next_offset"), 3);
    assert_int_equal(ju(d, "segments"), 1);
    uint64_t bytes = ju(d, "bytes_on_disk");
    assert_true(bytes >= 32 + 3 * 30); /* segment header and three records, index beside */
    assert_true(json_is_false(json_object_get(m, "durable")));
    assert_true(json_is_null(json_object_get(m, "bytes_on_disk")));
    json_decref(root_j);
    fx_metrics_snapshot snap;
    fx_metrics_snapshot_take(&snap);
    assert_int_equal(snap.g.storage_segments, 1);
    assert_int_equal(snap.g.storage_bytes_on_disk, (int64_t)bytes);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_delete_removes_a_durable_stream_its_catalogue_entry_and_files(void **state)
{
    (void)state;
    char root[64] = "", seg[1200];
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e_start(e);
    put_stream(e, "gone", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_range(c, "gone", 0, 5);
    segment0(root, "gone", seg, sizeof(seg));
    char *slash = strrchr(seg, '/');
    *slash = '\0'; /* the stream's directory */
    struct stat sb;
    assert_int_equal(stat(seg, &sb), 0);
    http_resp r;
    http(e, "DELETE", "/v1/streams/" T "/" NS "/gone", &r);
    assert_int_equal(r.status, 200);
    uint64_t t0 = fx_now_ns();
    while (stat(seg, &sb) == 0) { /* its worker ends it, then its storage thread */
        if (fx_now_ns() - t0 > (uint64_t)HANG_MS * FX_NS_PER_MS)
            fail_msg("%s still exists after the deletion", seg);
        sleep_ms(2);
    }
    /* Created again, it starts empty: the old data does not come back. */
    put_stream(e, "gone", "{\"durable\": true}", 201, NULL);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, "gone", &st);
    pub_ok(c, "gone", "fresh");
    fix_expect_event(s, 0, "fresh");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    char text[64];
    assert_int_equal(fix_read_log(root, "gone", text, sizeof(text)), 1);
    assert_string_equal(text, "fresh\n");
    fix_rm_dir(root);
}

/* Worker |i|'s per-stream tables and its storage thread's. */
static fx_broker_test_stream_tables tables_of(E *e, uint32_t i)
{
    fx_broker_test_stream_tables t;
    assert_int_equal(fx_broker_test_stream_tables_get(e->b, i, &t), 0);
    return t;
}

static void delete_stream(E *e, const char *stream)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", stream);
    http(e, "DELETE", path, &r);
    if (r.status != 200)
        fail_msg("DELETE %s: %d %s", path, r.status, r.body);
}

/* Handle ids only grow, but what the workers and storage threads keep per
 * durable stream follows the live streams: 300 durable streams created,
 * published to once (every tenth also read back from its log by a
 * subscriber) and deleted, four live at a time over two workers, leave
 * every table small while it runs and empty, at its minimum size, once the
 * last is deleted (ASan: nothing of them leaks). */
static void test_stream_tables_follow_live_streams_under_churn(void **state)
{
    (void)state;
    enum { LIVE = 4, N = 300, WORKERS = 2 };
    char root[64] = "", name[32], live[LIVE][32] = {{0}};
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e->bo.workers = WORKERS;
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < N; i++) {
        char *slot = live[i % LIVE];
        if (slot[0] != '\0')
            delete_stream(e, slot);
        snprintf(name, sizeof(name), "ch%d", i);
        put_stream(e, name, "{\"durable\": true}", 201, NULL);
        pub_ok(c, name, name);
        if (i % 10 == 0) {
            fx_start st = {.kind = FX_START_EARLIEST};
            fx_subscription *s = fix_subscribe(c, name, &st);
            fix_expect_event(s, 0, name);
            fx_unsubscribe(s);
        }
        snprintf(slot, sizeof(live[0]), "%s", name);
        for (uint32_t w = 0; w < WORKERS; w++) {
            fx_broker_test_stream_tables t = tables_of(e, w);
            /* A few entries at most (a deletion's end may lag): 16 or 32 slots. */
            if (t.streams_cap > 32 || t.durable_cap > 32 || t.logs_cap > 32)
                fail_msg("after %d streams worker %u holds %zu/%zu/%zu slots", i + 1, w,
                         t.streams_cap, t.durable_cap, t.logs_cap);
        }
    }
    /* The live ones are in the tables: what is measured is the real state. */
    size_t durable = 0, logs = 0;
    for (uint32_t w = 0; w < WORKERS; w++) {
        fx_broker_test_stream_tables t = tables_of(e, w);
        durable += t.durable;
        logs += t.logs;
    }
    assert_true(durable >= LIVE && logs >= LIVE);
    for (int k = 0; k < LIVE; k++)
        delete_stream(e, live[k]);
    /* Each end runs on its worker, then on its storage thread. */
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (uint32_t w = 0; w < WORKERS; w++) {
        fx_broker_test_stream_tables t;
        while (t = tables_of(e, w), t.streams + t.durable + t.logs > 0) {
            if (fx_now_ns() > deadline)
                fail_msg("worker %u still holds %zu streams, %zu durable states, %zu logs", w,
                         t.streams, t.durable, t.logs);
            sleep_ms(2);
        }
        assert_true(t.streams_cap <= FXB_IDTABLE_MIN && t.durable_cap <= FXB_IDTABLE_MIN &&
                    t.logs_cap <= FXB_IDTABLE_MIN);
    }
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* Waits until |*v| reaches |want| (acks arrive on the clients' loops). */
static void wait_count(atomic_int *v, int want, const char *what)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (atomic_load(v) < want) {
        if (fx_now_ns() > deadline)
            fail_msg("%s: %d, want %d", what, atomic_load(v), want);
        sleep_ms(2);
    }
}

/* A durable stream deleted while one of its jobs is in storage (held
 * there through the test hook) and two more wait behind
 * durable_max_unsynced_bytes: its end runs once later jobs of another
 * stream completed; the two waiting are refused at once, the one in
 * storage when it comes back, and only then is its log closed and deleted
 * and its state freed. Every publish gets its answer. */
static void test_end_with_a_job_in_storage_deletes_the_log_after_it_comes_back(void **state)
{
    (void)state;
    char root[64] = "", dir[1200];
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.workers = 1;
    e->bo.durable.max_unsynced_bytes = 1; /* one job in storage at a time */
    e_start(e);
    put_stream(e, "a", "{\"durable\": true}", 201, NULL);
    put_stream(e, "b", "", 201, NULL);
    fx_client *c0 = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_ok(c0, "a", "first");
    segment0(root, "a", dir, sizeof(dir));
    *strrchr(dir, '/') = '\0'; /* the stream's directory */
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);

    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, true), 0);
    fx_metrics_snapshot m0, m;
    fx_metrics_snapshot_take(&m0);
    fx_client *c[3];
    acks a = {0};
    for (int i = 0; i < 3; i++) { /* one job each: separate connections */
        c[i] = e_client(e, FX_POLICY_BLOCK, 0, 0);
        assert_int_equal(fx_publish_async(c[i], NS, "a", "late", 4, FX_ACK_PER_MESSAGE, on_ack, &a),
                         0);
    }
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    for (fx_metrics_snapshot_take(&m); DELTA(m0, m, storage_bound_waits) < 2;
         fx_metrics_snapshot_take(&m)) {
        if (fx_now_ns() > deadline)
            fail_msg("%lld jobs wait behind the bound, want 2",
                     (long long)DELTA(m0, m, storage_bound_waits));
        sleep_ms(2);
    }
    delete_stream(e, "a");
    for (int i = 0; i < 4; i++) /* later jobs complete: the end's turn comes */
        pub_ok(c0, "b", "tick");
    wait_count(&a.failed, 2, "publishes refused while one is in storage");
    assert_int_equal(atomic_load(&a.ok), 0);
    assert_int_equal(stat(dir, &sb), 0); /* the job in storage still has its log */

    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, false), 0);
    wait_count(&a.failed, 3, "publishes answered");
    assert_int_equal(atomic_load(&a.ok), 0);
    deadline = fix_deadline_ns(HANG_MS);
    fx_broker_test_stream_tables t;
    while (t = tables_of(e, 0), t.durable + t.logs > 0 || stat(dir, &sb) == 0) {
        if (fx_now_ns() > deadline)
            fail_msg("after the last job: %zu durable states, %zu logs, directory %s", t.durable,
                     t.logs, stat(dir, &sb) == 0 ? "still there" : "gone");
        sleep_ms(2);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_client_close(c[i], HANG_MS), 0);
    assert_int_equal(fx_client_close(c0, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_drain_flushes_every_durable_stream(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_PERIODIC);
    e->bo.durable.fsync_interval_ns = 3600ull * FX_NS_PER_S; /* no timer flush in this test */
    e_start(e);
    put_stream(e, "a", "{\"durable\": true}", 201, NULL);
    put_stream(e, "b", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot m0, m1, m2;
    fx_metrics_snapshot_take(&m0);
    pub_range(c, "a", 0, 5);
    pub_range(c, "b", 0, 5);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, storage_syncs), 0); /* acked from the page cache */
    fx_broker_drain_report rep;
    assert_int_equal(fx_broker_drain(e->b, fix_deadline_ns(HANG_MS), &rep), 0);
    assert_int_equal(rep.durable_flush_rv, 0);
    fx_metrics_snapshot_take(&m2);
    assert_int_equal(DELTA(m1, m2, storage_syncs), 2); /* one per stream */
    (void)fx_client_close(c, 1000);
    e_free(e);
    fix_rm_dir(root);
}

/* Waits until storage_syncs has grown by |want| since |a|. */
static void wait_syncs(const fx_metrics_snapshot *a, int64_t want)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot b;
    for (fx_metrics_snapshot_take(&b); DELTA(*a, b, storage_syncs) < want;
         fx_metrics_snapshot_take(&b)) {
        if (fx_now_ns() > deadline)
            fail_msg("storage_syncs grew by %lld, want %lld",
                     (long long)DELTA(*a, b, storage_syncs), (long long)want);
        sleep_ms(2);
    }
}

/* When a durable log's flush timer cannot be armed (out of memory, through
 * the fault hook) what was appended is not left unflushed until the next
 * interval that no timer would start: it is flushed at once, counted; once
 * the timer arms again the interval applies as before. */
static void test_flush_timer_arm_failure_flushes_at_once(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_PERIODIC);
    e->bo.durable.fsync_interval_ns = 3600ull * FX_NS_PER_S; /* no timer flush in this test */
    e_start(e);
    put_stream(e, "nt", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot m0, m1;
    fx_metrics_snapshot_take(&m0);
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_DURABLE, 1), 0);
    pub_ok(c, "nt", "first");
    wait_syncs(&m0, 1);
    assert_int_equal(fx_broker_test_fail_timer_arms(FX_BROKER_TEST_TIMER_DURABLE, 0), 0);
    pub_ok(c, "nt", "second");
    sleep_ms(50);
    fx_metrics_snapshot_take(&m1);
    assert_int_equal(DELTA(m0, m1, broker_timer_arm_failures), 1);
    assert_int_equal(DELTA(m0, m1, storage_syncs), 1); /* the second waits for the interval */
    assert_int_equal(DELTA(m0, m1, storage_append_records), 2);
    (void)fx_client_close(c, 1000);
    e_free(e);
    fix_rm_dir(root);
}

static void test_two_workers_each_run_their_streams_logs_on_their_storage_thread(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.workers = 2;
    e->bo.log_capacity = 4;
    e_start(e);
    const char *names[] = {"w0", "w1", "w2", "w3", "w4"};
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < 5; i++) {
        put_stream(e, names[i], "{\"durable\": true}", 201, NULL);
        pub_range(c, names[i], 0, 10 + i);
    }
    for (int i = 0; i < 5; i++) { /* history from disk on both workers */
        fx_start st = {.kind = FX_START_EARLIEST};
        fx_subscription *s = fix_subscribe(c, names[i], &st);
        expect_range(s, 0, 10 + i);
        fx_unsubscribe(s);
    }
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;
    for (int i = 0; i < 5; i++) {
        char text[512];
        assert_int_equal(fix_read_log(root, names[i], text, sizeof(text)), (uint64_t)(10 + i));
    }
    e_free(e);
    fix_rm_dir(root);
}

/* Stopping the broker with jobs in storage and held by the bound strands
 * none of them (ASan reports a stranded job as a leak). */
static void test_stop_with_jobs_in_storage_completes_or_frees_every_job(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 1; /* the rest wait on the worker */
    e_start(e);
    put_stream(e, "stop", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    acks a = {0};
    for (int i = 0; i < 300; i++)
        assert_int_equal(fx_publish_async(c, NS, "stop", "x", 1, FX_ACK_PER_MESSAGE, on_ack, &a),
                         0);
    uint64_t t0 = fx_now_ns();
    while (atomic_load(&a.ok) < 20 && fx_now_ns() - t0 < (uint64_t)HANG_MS * FX_NS_PER_MS)
        sleep_ms(1);
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b); /* mid-burst */
    e->b = NULL;
    (void)fx_client_close(c, 1000);
    fx_metrics_snapshot m2;
    fx_metrics_snapshot_take(&m2);
    /* Whatever was appended is in the log, and no more than that. */
    char text[300 * 4];
    uint64_t n = fix_read_log(root, "stop", text, sizeof(text));
    assert_int_equal(n, m2.c.storage_append_records);
    assert_true(n >= (uint64_t)atomic_load(&a.ok));
    e_free(e);
    fix_rm_dir(root);
}

/* A broker stopped while subscribers catch up from disk frees every page
 * and reader (ASan reports a stranded one as a leak). */
static void test_stop_during_replay_frees_every_page(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_NONE);
    e->bo.log_capacity = 4;
    e_start(e);
    put_stream(e, "big", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    static fx_iov iov[500];
    static char body[2048];
    memset(body, 'b', sizeof(body));
    for (int i = 0; i < 500; i++)
        iov[i] = (fx_iov){body, sizeof(body)};
    for (int k = 0; k < 20; k++) /* 10,000 records, 20 MiB: about 20 pages each */
        assert_int_equal(fx_publish_batch(c, NS, "big", iov, 500, FX_ACK_PER_BATCH), 0);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s1 = fix_subscribe(c, "big", &st);
    fx_subscription *s2 = fix_subscribe(c, "big", &st);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s1, &ev, HANG_MS), 0);
    assert_int_equal(ev.offset, 0);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b); /* both are still catching up */
    e->b = NULL;
    fx_unsubscribe(s1);
    fx_unsubscribe(s2);
    (void)fx_client_close(c, 1000);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- storage errors -------------------------------------------------------------- */

static void expect_pub_error(fx_client *c, const char *stream, const char *msg, const char *text)
{
    int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
    char why[512];
    fx_client_last_error(c, why, sizeof(why));
    if (rv == 0 || strstr(why, text) == NULL)
        fail_msg("publish %s: %s (%s), want an error with '%s'", msg, fx_strerror(rv), why, text);
}

static void test_storage_full_fails_the_publish_and_it_never_reaches_a_subscriber(void **state)
{
    (void)state;
    fx_memio *m;
    E *e = d_new_memio(&m, FX_FSYNC_PERIODIC);
    e_start(e);
    put_stream(e, "f", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "f");
    pub_ok(c, "f", "first");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_memio_fail(m, FX_MEMIO_PWRITE, -ENOSPC, 1);
    expect_pub_error(c, "f", "lost", "storage full");
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_errors), 1);
    assert_int_equal(DELTA(a, b, storage_append_records), 0);
    /* Space is back: the stream goes on at the next offset, nothing skipped. */
    pub_ok(c, "f", "second");
    fix_expect_event(s, 0, "first");
    fix_expect_event(s, 1, "second");
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fx_memio_free(m);
}

static void test_failed_flush_fails_the_publish_with_storage_error(void **state)
{
    (void)state;
    fx_memio *m;
    E *e = d_new_memio(&m, FX_FSYNC_ON_COMMIT);
    e_start(e);
    put_stream(e, "f", "{\"durable\": true}", 201, NULL);
    put_stream(e, "other", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "f");
    pub_ok(c, "f", "first");
    pub_ok(c, "other", "o1");
    fx_memio_fail_only(m, NULL);
    fx_memio_fail(m, FX_MEMIO_FDATASYNC, -EIO, 1);
    expect_pub_error(c, "f", "unflushed", "storage error");
    /* A failed flush stops that log (its pages may be gone): later publishes
     * fail too, none reaches the subscriber; other streams go on. */
    expect_pub_error(c, "f", "later", "storage error");
    pub_ok(c, "other", "o2");
    fix_expect_event(s, 0, "first");
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 200), FX_ETIMEDOUT);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fx_memio_free(m);
}

/* A flush in flight that fails stops the log for good: the publish it
 * covered and the one appended while it ran fail with "storage error",
 * neither reaches the subscriber, and later publishes fail too. */
static void test_a_failed_flush_in_flight_fails_the_appends_made_meanwhile(void **state)
{
    (void)state;
    fx_memio *m;
    E *e = d_new_memio(&m, FX_FSYNC_ON_COMMIT);
    e->bo.durable.max_unsynced_bytes = 0;
    e->bo.durable.flush_inline = false; /* the pipeline */
    e_start(e);
    put_stream(e, "pf", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_subscription *s = subscribe(c, "pf");
    pub_ok(c, "pf", "first");
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    acks k = {0};
    fx_memio_hold_next_sync(m);
    assert_int_equal(fx_publish_async(c, NS, "pf", "p0", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    fx_memio_wait_held(m);
    assert_int_equal(fx_publish_async(c, NS, "pf", "p1", 2, FX_ACK_PER_MESSAGE, on_ack, &k), 0);
    wait_appended(&a, &b, 2);
    fx_memio_release_failing(m, -EIO);
    assert_int_equal(fx_flush(c, HANG_MS), 0);
    assert_int_equal(atomic_load(&k.ok), 0);
    assert_int_equal(atomic_load(&k.failed), 2);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_sync_failures), 1);
    expect_pub_error(c, "pf", "later", "storage error");
    fix_expect_event(s, 0, "first");
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, 200), FX_ETIMEDOUT);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fx_memio_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_durable_without_storage_dir_is_refused_with_the_original_text),
    cmocka_unit_test(test_durability_cannot_be_flipped_on_an_existing_stream),
    cmocka_unit_test(test_on_commit_acks_follow_the_log_and_offsets_continue_after_restart),
    cmocka_unit_test(test_durable_default_makes_auto_created_streams_durable),
    cmocka_unit_test(test_on_commit_group_commit_serves_several_appends_per_flush),
    cmocka_unit_test(test_flush_timer_arm_failure_flushes_at_once),
    cmocka_unit_test(test_jobs_queued_behind_a_flush_share_one_append),
    cmocka_unit_test(test_appends_go_on_while_a_flush_is_in_flight_and_acks_wait_for_it),
    cmocka_unit_test(test_a_failed_flush_in_flight_fails_the_appends_made_meanwhile),
    cmocka_unit_test(test_max_unsynced_bytes_keeps_one_job_in_storage_at_a_time),
    cmocka_unit_test(test_start_recovers_catalogued_streams_and_cuts_a_torn_tail),
    cmocka_unit_test(test_interior_corruption_quarantines_the_stream_unless_repair),
    cmocka_unit_test(test_replay_from_earliest_or_an_offset_below_the_ring_reads_the_log),
    cmocka_unit_test(test_replay_joins_live_under_concurrent_publishing_no_gap_no_duplicate),
    cmocka_unit_test(test_offset_below_retention_gets_the_too_old_cursor_error),
    cmocka_unit_test(test_list_streams_shows_durability_log_offsets_and_bytes_on_disk),
    cmocka_unit_test(test_delete_removes_a_durable_stream_its_catalogue_entry_and_files),
    cmocka_unit_test(test_stream_tables_follow_live_streams_under_churn),
    cmocka_unit_test(test_end_with_a_job_in_storage_deletes_the_log_after_it_comes_back),
    cmocka_unit_test(test_drain_flushes_every_durable_stream),
    cmocka_unit_test(test_two_workers_each_run_their_streams_logs_on_their_storage_thread),
    cmocka_unit_test(test_stop_with_jobs_in_storage_completes_or_frees_every_job),
    cmocka_unit_test(test_stop_during_replay_frees_every_page),
    cmocka_unit_test(test_storage_full_fails_the_publish_and_it_never_reaches_a_subscriber),
    cmocka_unit_test(test_failed_flush_fails_the_publish_with_storage_error),
};
FX_TEST_MAIN(tests)
