/* Integration tests of durable caches (src/broker/cache_dur.c,
 * docs/cache.md "Durable caches"): declaring one (admin API; refused
 * without durable_storage_dir, durability not flipped), puts and deletes
 * that survive a restart on the same root with the declaration, an
 * expired entry that stays gone, a dropped cache whose log goes, and on_commit puts answered only
 * after their flush (the storage thread held) while periodic ones are answered at once; a
 * cache overwritten many times whose log compaction keeps small, versions kept across
 * restarts (a put_if with a version read before one applies after it) and entries evicted
 * from memory that stay gone. The record's bytes and compaction under crashes:
 * tests/unit/test_cache_dur.c. A real broker, its admin endpoint and libfelix
 * clients in this process (admin_fixture.h). The kill -9 case is in test_cache_durable_crash.c. */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/test_hooks.h"
#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/syncpol.h"

#define CPATH "/v1/tenants/" T "/namespaces/" NS "/caches/"

static E *d_new(char *root, size_t cap, int mode)
{
    E *e = e_new();
    if (root[0] == '\0') {
        snprintf(root, cap, "/tmp/fxdcXXXXXX");
        assert_non_null(mkdtemp(root));
    }
    e->bo.workers = 1;
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = mode;
    e->bo.durable.segment_bytes = 1 << 20;
    e->bo.durable.preallocate = false;
    return e;
}

static void put_cache(E *e, const char *cache, const char *body, int status, const char *has)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), CPATH "%s", cache);
    http_body(e, "PUT", path, body, &r);
    if (r.status != status)
        fail_msg("PUT %s %s: %d %s (want %d)", path, body, r.status, r.body, status);
    if (has != NULL && strstr(r.body, has) == NULL)
        fail_msg("PUT %s: body %s lacks '%s'", path, r.body, has);
}

static void put_ok(fx_client *c, const char *cache, const char *key, const char *v, uint64_t ttl)
{
    int rv = fx_cache_put(c, NS, cache, key, v, strlen(v), ttl);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        fail_msg("put %s/%s: %s (%s)", cache, key, fx_strerror(rv), msg);
    }
}

/* Checks |key|'s value: |want|, or a miss when NULL. */
static void get_eq(fx_client *c, const char *cache, const char *key, const char *want)
{
    char buf[256];
    size_t n = 0;
    int rv = fx_cache_get(c, NS, cache, key, buf, sizeof(buf), &n);
    if (want == NULL) {
        if (rv != FX_ENOTFOUND)
            fail_msg("get %s/%s: %s '%.*s', want a miss", cache, key, fx_strerror(rv), (int)n, buf);
        return;
    }
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        fail_msg("get %s/%s: %s (%s), want '%s'", cache, key, fx_strerror(rv), msg, want);
    }
    if (n != strlen(want) || memcmp(buf, want, n) != 0)
        fail_msg("get %s/%s: '%.*s', want '%s'", cache, key, (int)n, buf, want);
}

static void stop(E *e)
{
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;
}

/* ---- declaring ------------------------------------------------------------------- */

static void test_durable_without_storage_dir_is_refused(void **state)
{
    (void)state;
    E *e = e_new();
    e_start(e);
    put_cache(e, "s", "{\"durable\": true}", 400,
              "cache t1/default/s is marked durable but this broker has no durable storage "
              "configured (durable_storage_dir)");
    put_cache(e, "s", "{\"durable\": 1}", 400, "must be true or false");
    put_cache(e, "s", "{\"ttl\": 1}", 400, "unknown field");
    put_cache(e, "s", "", 201, "\"durable\":false");
    put_cache(e, "s", "{\"durable\": false}", 200, "\"created\":false");
    e_free(e);
}

/* ---- a restart --------------------------------------------------------------------- */

static void test_puts_and_deletes_survive_a_restart_and_expired_entries_stay_gone(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.auto_create_streams = false; /* served only while declared: the declaration survives */
    e_start(e);
    put_cache(e, "sess", "{\"durable\": true}", 201, "\"durable\":true");
    put_cache(e, "sess", "{\"durable\": true}", 200, "\"created\":false");
    put_cache(e, "sess", "", 200, "\"durable\":true");
    put_cache(e, "sess", "{\"durable\": false}", 409,
              "changing cache durability requires removal and recreation: tenant=t1 "
              "namespace=default cache=sess current=true requested=false");
    put_cache(e, "mem", "", 201, "\"durable\":false");
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    put_ok(c, "sess", "k1", "v1", 0);
    put_ok(c, "sess", "k2", "v2", 0);
    put_ok(c, "sess", "k1", "v1b", 0); /* last write wins */
    bool existed = false;
    assert_int_equal(fx_cache_delete(c, NS, "sess", "k2", &existed), 0);
    assert_true(existed);
    put_ok(c, "sess", "short", "gone", 300); /* expires before the restart */
    put_ok(c, "sess", "long", "kept", 600000);
    put_ok(c, "sess", "zero", "z", 0);
    assert_int_equal(fx_cache_delete(c, NS, "sess", "zero", &existed), 0);
    put_ok(c, "mem", "m", "memory only", 0);
    get_eq(c, "sess", "k1", "v1b");
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, cache_durable_records), 8); /* 6 puts, 2 deletes; none of mem */
    assert_int_equal(DELTA(a, b, cache_durable_errors), 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    usleep(400 * 1000); /* "short" expires meanwhile */
    stop(e);

    /* The log holds the records in the original's payload. */
    char dir[256], name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, T, NS, "sess", 0);
    snprintf(dir, sizeof(dir), "%s/caches/%s", root, name);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    char file[320];
    snprintf(file, sizeof(file), "%s/cache.json", dir);
    assert_int_equal(stat(file, &sb), 0);

    fx_metrics_snapshot_take(&a);
    e_start(e);
    fx_metrics_snapshot_take(&b);
    /* 8, and the delete logged when the sweep freed "short" if it ran. */
    assert_in_range(DELTA(a, b, cache_durable_rebuilt), 8, 9);
    put_cache(e, "sess", "", 200, "\"durable\":true"); /* declared again from its directory */
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    get_eq(c, "sess", "k1", "v1b");
    get_eq(c, "sess", "k2", NULL);
    get_eq(c, "sess", "short", NULL); /* expired by the wall clock: not resurrected */
    get_eq(c, "sess", "long", "kept");
    get_eq(c, "sess", "zero", NULL);
    /* "mem" was declared in memory: neither its entries nor its declaration remain. */
    char buf[16];
    size_t n;
    assert_int_equal(fx_cache_get(c, NS, "mem", "m", buf, sizeof(buf), &n), FX_EREMOTE);
    put_ok(c, "sess", "after", "restart", 0);

    /* Dropped: the log goes, and a restart does not bring it back. */
    http_resp r;
    http_body(e, "DELETE", CPATH "sess", "", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);
    assert_int_equal(stat(dir, &sb), -1);
    e_start(e);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_cache_get(c, NS, "sess", "k1", buf, sizeof(buf), &n), FX_EREMOTE);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- on_commit waits for the flush ------------------------------------------------ */

typedef struct slot {
    atomic_int done;
    atomic_int rv;
} slot;

static void put_cb(void *user, int rv, const void *value, size_t len)
{
    (void)value, (void)len;
    slot *s = user;
    atomic_store(&s->rv, rv);
    atomic_store(&s->done, 1);
}

static void wait_done(slot *s)
{
    for (int i = 0; i < HANG_MS && !atomic_load(&s->done); i++)
        usleep(1000);
    assert_int_equal(atomic_load(&s->done), 1);
}

static void held_put(int mode, bool answered_while_held)
{
    char root[64] = "";
    E *e = d_new(root, sizeof(root), mode);
    e_start(e);
    put_cache(e, "c", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    put_ok(c, "c", "first", "1", 0); /* the log is open */
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, true), 0);
    static slot s;
    atomic_store(&s.done, 0);
    assert_int_equal(fx_cache_put_async(c, NS, "c", "k", "v", 1, 0, put_cb, &s), 0);
    if (answered_while_held) {
        wait_done(&s);
    } else {
        usleep(300 * 1000);
        assert_int_equal(atomic_load(&s.done), 0); /* its flush has not run */
    }
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, false), 0);
    wait_done(&s);
    assert_int_equal(atomic_load(&s.rv), 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* Flips one byte inside the first record of the first segment file under
 * |dir| (a record before the durable point: damage, not a torn tail). */
static void damage_first_segment(const char *dir)
{
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    char file[512] = "";
    for (struct dirent *de; (de = readdir(dp)) != NULL;) {
        size_t n = strlen(de->d_name);
        if (n > 4 && strcmp(de->d_name + n - 4, ".log") == 0 &&
            (file[0] == '\0' || strcmp(de->d_name, strrchr(file, '/') + 1) < 0))
            snprintf(file, sizeof(file), "%s/%s", dir, de->d_name);
    }
    closedir(dp);
    assert_true(file[0] != '\0');
    int fd = open(file, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b = 0;
    off_t at = FX_SEG_HEADER_LEN + 28 + 4; /* inside the first record's payload */
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* A durable cache whose log is damaged does not stop the broker: it is
 * quarantined (every request to it answered "cache storage damaged",
 * naming the log), and the other caches are served. */
static void test_a_damaged_cache_log_quarantines_its_cache_and_the_broker_serves_the_rest(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e_start(e);
    put_cache(e, "bad", "{\"durable\": true}", 201, NULL);
    put_cache(e, "good", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    put_ok(c, "bad", "k", "lost to the damage", 0);
    put_ok(c, "bad", "k2", "v2", 0);
    put_ok(c, "good", "k", "kept", 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);
    char dir[256], name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, T, NS, "bad", 0);
    snprintf(dir, sizeof(dir), "%s/caches/%s", root, name);
    damage_first_segment(dir);

    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    e_start(e); /* starts: one damaged cache does not stop the broker */
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    get_eq(c, "good", "k", "kept");
    char buf[64], msg[512];
    size_t n = 0;
    assert_int_equal(fx_cache_get(c, NS, "bad", "k2", buf, sizeof(buf), &n), FX_EREMOTE);
    fx_client_last_error(c, msg, sizeof(msg));
    if (strstr(msg, "cache storage damaged") == NULL || strstr(msg, "bad") == NULL)
        fail_msg("the damaged cache answered: %s", msg);
    assert_int_equal(fx_cache_put(c, NS, "bad", "k3", "x", 1, 0), FX_EREMOTE);
    fx_metrics_snapshot_take(&b);
    assert_true(DELTA(a, b, cache_durable_errors) >= 1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_an_on_commit_put_is_answered_only_after_its_flush(void **state)
{
    (void)state;
    held_put(FX_FSYNC_ON_COMMIT, false);
}

static void test_a_periodic_put_is_answered_at_once(void **state)
{
    (void)state;
    held_put(FX_FSYNC_PERIODIC, true);
}

/* ---- durable_bytes_max ------------------------------------------------------------ */

static void test_durable_bytes_max_refuses_writes_once_the_logs_reach_it(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.durable.bytes_max = 16 << 10; /* the cache log's bytes on disk count */
    e_start(e);
    put_cache(e, "q", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    static char val[1024];
    memset(val, 'x', sizeof(val) - 1);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    int i, rv = 0;
    char key[16];
    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        if ((rv = fx_cache_put(c, NS, "q", key, val, strlen(val), 0)) != 0)
            break;
    }
    assert_int_equal(rv, FX_EREMOTE);
    assert_true(i >= 10 && i <= 20); /* about 16 KiB of 1 KiB records */
    char msg[256];
    fx_client_last_error(c, msg, sizeof(msg));
    assert_non_null(strstr(msg, "storage quota exceeded (durable_bytes_max)"));
    get_eq(c, "q", key, NULL); /* refused before it applied */
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, storage_quota_broker_bytes), 1);
    /* Dropped: its bytes are given back and writes go on (in memory now). */
    http_resp r;
    http_body(e, "DELETE", CPATH "q", "", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, true), 0); /* the drop has run */
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, false), 0);
    /* Its bytes are given back (q was the broker's only durable log): the
     * charged gauge is read until it is 0, at most 5 s, so a put refused
     * below names the quota's account, not a drop still running. */
    fx_metrics_snapshot g;
    for (int tries = 0;; tries++) {
        fx_metrics_snapshot_take(&g);
        if (g.g.storage_charged_bytes == 0)
            break;
        if (tries == 500)
            fail_msg("the dropped cache's %lld bytes are still charged 5 s after its DELETE",
                     (long long)g.g.storage_charged_bytes);
        usleep(10000);
    }
    put_cache(e, "q", "{\"durable\": true}", 201, NULL);
    put_ok(c, "q", "again", "1", 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- compaction, versions, evictions ----------------------------------------------- */

/* Bytes of the files in |dir| (the cache's segments and indexes). */
static uint64_t dir_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    uint64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[512];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            n += (uint64_t)sb.st_size;
    }
    closedir(d);
    return n;
}

static void cache_dir(const char *root, const char *cache, char *out, size_t cap)
{
    char name[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(name, T, NS, cache, 0);
    snprintf(out, cap, "%s/caches/%s", root, name);
}

static void test_a_durable_cache_overwritten_many_times_stays_bounded_on_disk(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_PERIODIC);
    e->bo.durable.segment_bytes = 64 << 10;
    e_start(e);
    put_cache(e, "hot", "{\"durable\": true}", 201, "\"durable\":true");
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    char v[600], k[16];
    enum { KEYS = 20, ROUNDS = 150 };
    put_ok(c, "hot", "cold1", "written once: copied by compaction", 0);
    put_ok(c, "hot", "cold2", "written once too", 0);
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < KEYS; i++) {
            snprintf(k, sizeof(k), "k%02d", i);
            int n = snprintf(v, sizeof(v), "%d-%d-", r, i);
            memset(v + n, 'x', 512 - (size_t)n);
            v[512] = '\0';
            put_ok(c, "hot", k, v, 0);
        }
    /* 3,000 puts of ~570 bytes (1.7 MB) into 64 KiB segments; 20 live
     * entries (11 KB): compaction keeps the log within a few segments. */
    char dir[320];
    cache_dir(root, "hot", dir, sizeof(dir));
    uint64_t bytes = dir_bytes(dir);
    for (int i = 0; i < 500 && bytes > 4 * (64 << 10); i++) {
        usleep(10 * 1000);
        bytes = dir_bytes(dir);
    }
    fx_metrics_snapshot_take(&b);
    if (bytes > 4 * (64 << 10))
        fail_msg("the log holds %llu bytes after %lld compactions",
                 (unsigned long long)bytes, (long long)DELTA(a, b, cache_durable_compactions));
    assert_true(DELTA(a, b, cache_durable_compactions) >= 1);
    assert_true(DELTA(a, b, cache_durable_compaction_copied) > 0);
    assert_true(DELTA(a, b, cache_durable_compaction_reclaimed) > 1000000);
    assert_int_equal(DELTA(a, b, cache_durable_errors), 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);

    e_start(e);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < KEYS; i++) {
        snprintf(k, sizeof(k), "k%02d", i);
        int n = snprintf(v, sizeof(v), "%d-%d-", ROUNDS - 1, i);
        memset(v + n, 'x', 512 - (size_t)n);
        v[512] = '\0';
        void *got = NULL;
        size_t len = 0;
        uint64_t ver = 0;
        assert_int_equal(fx_cache_get_versioned(c, NS, "hot", k, &got, &len, &ver), 0);
        assert_int_equal(len, 512);
        assert_memory_equal(got, v, 512);
        assert_int_equal(ver, (uint64_t)(ROUNDS - 1) * KEYS + (uint64_t)i + 3);
        free(got);
    }
    get_eq(c, "hot", "cold1", "written once: copied by compaction");
    get_eq(c, "hot", "cold2", "written once too");
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_versions_survive_a_restart_and_a_put_if_with_one_read_before_applies(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e_start(e);
    put_cache(e, "ver", "{\"durable\": true}", 201, "\"durable\":true");
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    put_ok(c, "ver", "a", "1", 0);
    put_ok(c, "ver", "a", "2", 0);
    put_ok(c, "ver", "b", "1", 0);
    void *got = NULL;
    size_t len = 0;
    uint64_t va = 0, vb = 0;
    assert_int_equal(fx_cache_get_versioned(c, NS, "ver", "a", &got, &len, &va), 0);
    free(got);
    assert_int_equal(va, 2);
    put_ok(c, "ver", "gone", "x", 0); /* version 4, then deleted: never given again */
    bool existed = false;
    assert_int_equal(fx_cache_delete(c, NS, "ver", "gone", &existed), 0);
    assert_true(existed);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);

    e_start(e);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_cache_get_versioned(c, NS, "ver", "a", &got, &len, &vb), 0);
    free(got);
    assert_int_equal(vb, va);
    assert_int_equal(fx_cache_get_versioned(c, NS, "ver", "b", &got, &len, &vb), 0);
    free(got);
    assert_int_equal(vb, 3);
    bool applied = false;
    uint64_t v = 0;
    assert_int_equal(fx_cache_put_if(c, NS, "ver", "a", "3", 1, 0, false, va, &applied, &v), 0);
    assert_true(applied);
    assert_int_equal(v, 5); /* past the deleted key's 4 */
    /* The version from before the write no longer matches. */
    assert_int_equal(fx_cache_put_if(c, NS, "ver", "a", "4", 1, 0, false, va, &applied, &v), 0);
    assert_false(applied);
    assert_int_equal(v, 5);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);

    /* Once more: the versions of the first restart stay. */
    e_start(e);
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_cache_get_versioned(c, NS, "ver", "a", &got, &len, &vb), 0);
    assert_int_equal(len, 1);
    assert_memory_equal(got, "3", 1);
    free(got);
    assert_int_equal(vb, 5);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_an_entry_evicted_from_memory_does_not_come_back_at_start(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root), FX_FSYNC_ON_COMMIT);
    e->bo.cache_max_bytes = 40 * 1200; /* ~40 entries of 1 KiB */
    e_start(e);
    put_cache(e, "small", "{\"durable\": true}", 201, "\"durable\":true");
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    char v[1025], k[16];
    memset(v, 'v', 1024);
    v[1024] = '\0';
    enum { KEYS = 100 };
    for (int i = 0; i < KEYS; i++) {
        snprintf(k, sizeof(k), "e%03d", i);
        put_ok(c, "small", k, v, 0);
    }
    fx_metrics_snapshot_take(&b);
    int64_t evicted = DELTA(a, b, cache_evictions);
    assert_true(evicted >= KEYS / 2);
    bool hit[KEYS];
    int hits = 0;
    for (int i = 0; i < KEYS; i++) {
        snprintf(k, sizeof(k), "e%03d", i);
        void *got = NULL;
        size_t len = 0;
        uint64_t ver = 0;
        int rv = fx_cache_get_versioned(c, NS, "small", k, &got, &len, &ver);
        free(got);
        assert_true(rv == 0 || rv == FX_ENOTFOUND);
        hit[i] = rv == 0;
        hits += hit[i];
    }
    assert_int_equal(hits, KEYS - evicted);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    stop(e);

    fx_metrics_snapshot_take(&a);
    e_start(e);
    fx_metrics_snapshot_take(&b);
    assert_int_equal(DELTA(a, b, cache_evictions), 0); /* the log holds what fits */
    c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < KEYS; i++) {
        snprintf(k, sizeof(k), "e%03d", i);
        void *got = NULL;
        size_t len = 0;
        uint64_t ver = 0;
        int rv = fx_cache_get_versioned(c, NS, "small", k, &got, &len, &ver);
        free(got);
        if (rv != (hit[i] ? 0 : FX_ENOTFOUND))
            fail_msg("%s: %s after the restart, %s before", k, fx_strerror(rv),
                     hit[i] ? "a hit" : "a miss");
    }
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_durable_without_storage_dir_is_refused),
    cmocka_unit_test(test_puts_and_deletes_survive_a_restart_and_expired_entries_stay_gone),
    cmocka_unit_test(test_a_damaged_cache_log_quarantines_its_cache_and_the_broker_serves_the_rest),
    cmocka_unit_test(test_an_on_commit_put_is_answered_only_after_its_flush),
    cmocka_unit_test(test_a_periodic_put_is_answered_at_once),
    cmocka_unit_test(test_durable_bytes_max_refuses_writes_once_the_logs_reach_it),
    cmocka_unit_test(test_a_durable_cache_overwritten_many_times_stays_bounded_on_disk),
    cmocka_unit_test(test_versions_survive_a_restart_and_a_put_if_with_one_read_before_applies),
    cmocka_unit_test(test_an_entry_evicted_from_memory_does_not_come_back_at_start),
};
FX_TEST_MAIN(tests)
