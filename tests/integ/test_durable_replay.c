/* Integration tests of the replay reader's seek: a subscription that starts
 * below the ring reads the log from the sparse index entry nearest below its
 * offset, not record by record from the segment's start. Proven by damage
 * before that entry: a replay from past it never reads the damaged record
 * and succeeds, a replay from before it fails. A real broker, its admin
 * endpoint and libfelix clients in this process (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "storage/catalog.h"
#include "storage/syncpol.h"

/* The path of segment 0 of t1/default/|stream| under |root|. */
static void segment0(const char *root, const char *stream, char *out, size_t cap)
{
    fx_catalog *cat;
    char err[256], dir[1024];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, T, NS, stream);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    int n = snprintf(out, cap, "%s/00000000000000000000.log", dir);
    assert_true(n > 0 && (size_t)n < cap);
}

/* Flips one bit of the byte at |pos| of file |path|. */
static void flip(const char *path, off_t pos)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, pos), 1);
    b ^= 0x01;
    assert_int_equal(pwrite(fd, &b, 1, pos), 1);
    close(fd);
}

static void test_replay_seeks_with_the_sparse_index_past_damage_before_its_entry(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxdrpXXXXXX", seg[1200], msg[32];
    assert_non_null(mkdtemp(root));
    E *e = e_new();
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_NONE;
    e->bo.durable.segment_bytes = 1 << 20;
    e->bo.durable.index_spacing_bytes = 256; /* an entry every 8 or so records */
    e->bo.log_capacity = 4;                  /* the ring holds the last few only */
    e_start(e);
    http_resp r;
    http_body(e, "PUT", "/v1/streams/" T "/" NS "/h", "{\"durable\": true}", &r);
    assert_int_equal(r.status, 201);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < 300; i++) {
        snprintf(msg, sizeof(msg), "p%03d", i);
        assert_int_equal(fx_publish(c, NS, "h", msg, strlen(msg), FX_ACK_PER_MESSAGE), 0);
    }
    /* Damage record 1's header checksum (records are 28 + 4 bytes from 32). */
    segment0(root, "h", seg, sizeof(seg));
    flip(seg, 32 + 32 + 20);

    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_start st = {.kind = FX_START_OFFSET, .offset = 250};
    fx_subscription *s = fix_subscribe(c, "h", &st);
    for (int i = 250; i < 300; i++) {
        snprintf(msg, sizeof(msg), "p%03d", i);
        fix_expect_event(s, (uint64_t)i, msg);
    }
    fx_unsubscribe(s);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_replay_index_seeks), 1);
    assert_int_equal(DELTA(a, b, storage_replay_failures), 0);

    /* From offset 0 the reader meets the damage in its first page: the
     * replay fails and the event stream ends with nothing delivered. */
    st.offset = 0;
    s = NULL;
    int rv = fx_subscribe(&s, c, NS, "h", &st);
    fx_event ev;
    if (rv == 0)
        rv = fx_subscription_next(s, &ev, HANG_MS);
    assert_int_equal(rv, FX_EEOF);
    fx_unsubscribe(s);
    fx_metrics_snapshot_take(&a);
    assert_int_equal(DELTA(b, a, storage_replay_failures), 1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* A catching-up subscriber under the shipped shedding lane policy (drop_new)
 * slows its own replay instead of losing it: its client reads nothing for a
 * while (a 4 KiB stream window and a 4-event queue), so its one-list lane
 * stays full, and the history from disk waits for room. Every record arrives
 * in order and the lane counts no drop. */
static void test_replay_on_a_full_shedding_lane_waits_and_loses_nothing(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxdrpXXXXXX", msg[32];
    assert_non_null(mkdtemp(root));
    E *e = e_new();
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_NONE;
    e->bo.log_capacity = 8;
    e->bo.subscriber_lane_queue_policy = FX_QUEUE_DROP_NEW;
    e->bo.subscriber_lane_queue_depth = 1;
    e->bo.fanout_batch_size = 1; /* one event per list: many pushes */
    e_start(e);
    http_resp r;
    http_body(e, "PUT", "/v1/streams/" T "/" NS "/h", "{\"durable\": true}", &r);
    assert_int_equal(r.status, 201);
    fx_client *pub = e_client(e, FX_POLICY_BLOCK, 0, 0);
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        snprintf(msg, sizeof(msg), "p%04d", i);
        assert_int_equal(fx_publish(pub, NS, "h", msg, strlen(msg), FX_ACK_PER_MESSAGE), 0);
    }
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 4096, 4);
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = fix_subscribe(c, "h", &st);
    usleep(300 * 1000); /* the reader stalls: the lane fills */
    for (int i = 0; i < N; i++) {
        snprintf(msg, sizeof(msg), "p%04d", i);
        fix_expect_event(s, (uint64_t)i, msg);
    }
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, subscriber_lane_dropped), 0);
    assert_true(DELTA(a, b, storage_replay_records) >= N - 8);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    assert_int_equal(fx_client_close(pub, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_replay_on_a_full_shedding_lane_waits_and_loses_nothing),
    cmocka_unit_test(test_replay_seeks_with_the_sparse_index_past_damage_before_its_entry),
};
FX_TEST_MAIN(tests)
