/* Unit tests for the storage root's protection: files 0600 and directories
 * 0700 (sio.c), no symbolic link followed by stat, list, open or removal (a
 * symlinked stream directory is never adopted, and deleting through one
 * leaves its target alone), removal that recurses into subdirectories (also
 * on the in-memory layer), and the root lock (rootlock.c: owner and mode
 * checks, one holder at a time, the holder's PID in the message). Each case
 * works in its own mkdtemp directory under /tmp and removes it. */
/* fx-test-libs: fx_storage fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "felix/error.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"
#include "storage/rootlock.h"
#include "storage/sio.h"

#include "fx_test.h"

/* A uid that is not this process's, for the ownership cases. */
#define OTHER_UID 65534

typedef struct tmp {
    char base[64];
    char root[128];
    char outside[128]; /* a directory of someone else's, outside the root */
} tmp;

static void tmp_init(tmp *t)
{
    snprintf(t->base, sizeof(t->base), "/tmp/fx-root-XXXXXX");
    assert_non_null(mkdtemp(t->base));
    snprintf(t->root, sizeof(t->root), "%s/root", t->base);
    snprintf(t->outside, sizeof(t->outside), "%s/victim", t->base);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void tmp_deinit(tmp *t)
{
    assert_int_equal(nftw(t->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static bool exists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    int n = snprintf(p, sizeof(p), "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < sizeof(p));
    return lstat(p, &st) == 0;
}

static unsigned mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

/* The victim: a directory outside the root with two files and a
 * subdirectory, as the review's reproduction plants (N8). */
static void make_victim(const tmp *t)
{
    assert_int_equal(mkdir(t->outside, 0700), 0);
    put(t->outside, "tls-key.pem", "secret");
    put(t->outside, "notes", "keep");
    char sub[PATH_MAX];
    snprintf(sub, sizeof(sub), "%s/sub", t->outside);
    assert_int_equal(mkdir(sub, 0700), 0);
    put(sub, "deeper", "keep");
}

static void expect_victim_intact(const tmp *t)
{
    char sub[PATH_MAX];
    snprintf(sub, sizeof(sub), "%s/sub", t->outside);
    assert_true(exists(t->outside, "tls-key.pem"));
    assert_true(exists(t->outside, "notes"));
    assert_true(exists(sub, "deeper"));
}

/* ---- modes --------------------------------------------------------------------------- */

static void test_files_are_0600_and_directories_0700(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    mode_t old = umask(0); /* the modes asked for, not what a umask leaves of them */
    fx_catalog *cat;
    char err[256], dir[512];
    int rv = fx_catalog_open(&cat, NULL, t.root, err, sizeof(err));
    fx_catalog_params p = {.created_us = 1, .segment_bytes = 4096, .index_spacing_bytes = 512};
    const fx_catalog_entry *e = NULL;
    if (rv == 0)
        rv = fx_catalog_declare(cat, "t1", "default", "orders", &p, NULL, &e);
    umask(old);
    assert_int_equal(rv, 0);
    assert_int_equal(fx_catalog_dir_path(cat, e, dir, sizeof(dir)), 0);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 4096;
    c.index_spacing_bytes = 512;
    fx_dlog *log;
    umask(0);
    rv = fx_dlog_open(&log, dir, &c, 1, NULL);
    for (int i = 0; rv == 0 && i < 100; i++) { /* several segments */
        fx_dlog_iov r = {.data = "0123456789abcdef0123456789abcdef", .len = 32};
        rv = fx_dlog_append(log, &r, 1, 1000, NULL);
    }
    umask(old);
    assert_int_equal(rv, 0);
    assert_int_equal(fx_dlog_close(log, true), 0);
    fx_catalog_free(cat);

    assert_int_equal(mode_of(t.root), 0700);
    assert_int_equal(mode_of(dir), 0700);
    char p2[PATH_MAX];
    snprintf(p2, sizeof(p2), "%s/%s", t.root, FX_CATALOG_FILE);
    assert_int_equal(mode_of(p2), 0600);
    const char *files[] = {"00000000000000000000.log", "00000000000000000000.index",
                           "00000000000000000001.log", "00000000000000000001.index"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p2, sizeof(p2), "%s/%s", dir, files[i]);
        if (mode_of(p2) != 0600)
            fail_msg("%s has mode %04o, want 0600", files[i], mode_of(p2));
    }
    tmp_deinit(&t);
}

/* ---- symbolic links ------------------------------------------------------------------ */

static int on_entry(void *user, const char *name, bool is_dir)
{
    int *pdirs = user;
    if (is_dir)
        (*pdirs)++;
    else if (strcmp(name, "link") != 0 && strcmp(name, "file") != 0)
        fail_msg("unexpected entry %s", name);
    return 0;
}

static void test_stat_list_and_open_do_not_follow_a_symlink(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    make_victim(&t);
    assert_int_equal(mkdir(t.root, 0700), 0);
    char link[PATH_MAX], flink[PATH_MAX], victim_file[PATH_MAX];
    snprintf(link, sizeof(link), "%s/link", t.root);
    snprintf(flink, sizeof(flink), "%s/file", t.root);
    snprintf(victim_file, sizeof(victim_file), "%s/notes", t.outside);
    assert_int_equal(symlink(t.outside, link), 0);
    assert_int_equal(symlink(victim_file, flink), 0);
    fx_sio *io = fx_sio_posix();

    bool is_dir = true;
    assert_int_equal(io->ops->stat(io, link, &is_dir), 0);
    assert_false(is_dir); /* a link to a directory is not a directory */
    int dirs = 0;
    assert_int_equal(io->ops->list(io, t.root, on_entry, &dirs), 0);
    assert_int_equal(dirs, 0);
    int fd = -1;
    assert_int_equal(io->ops->open(io, flink, FX_SIO_READ, &fd), -ELOOP);
    assert_int_equal(io->ops->open(io, flink, FX_SIO_WRITE, &fd), -ELOOP);
    assert_true(io->ops->list(io, link, on_entry, &dirs) < 0); /* not listed through */
    assert_int_equal(fx_sio_mkdirs(io, link), -ENOTDIR);
    tmp_deinit(&t);
}

/* The review's N8 reproduction: a symbolic link where a stream's directory
 * would be, and a catalogue entry marked deleting for it. */
static void plant(const tmp *t, char name[FX_LOGFMT_DIR_NAME_MAX], bool deleting)
{
    fx_logfmt_dir_name(name, "t1", "default", "orders", 0);
    assert_int_equal(mkdir(t->root, 0700), 0);
    char link[PATH_MAX];
    snprintf(link, sizeof(link), "%s/%s", t->root, name);
    assert_int_equal(symlink(t->outside, link), 0);
    if (!deleting)
        return;
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"format\":1,\"streams\":[{\"tenant\":\"t1\",\"namespace\":\"default\","
             "\"stream\":\"orders\",\"shard\":0,\"dir\":\"%s\",\"created_at_us\":1,"
             "\"segment_bytes\":268435456,\"index_spacing_bytes\":4096,\"deleting\":true}]}\n",
             name);
    put(t->root, FX_CATALOG_FILE, text);
}

static void test_symlinked_stream_dir_is_not_adopted(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    make_victim(&t);
    char name[FX_LOGFMT_DIR_NAME_MAX], path[PATH_MAX];
    plant(&t, name, false);
    fx_catalog *cat;
    char err[256];
    assert_int_equal(fx_catalog_open(&cat, NULL, t.root, err, sizeof(err)), 0);
    fx_catalog_params p = {.created_us = 1, .segment_bytes = 4096, .index_spacing_bytes = 512};
    bool adopted = false;
    const fx_catalog_entry *e = NULL;
    /* The link is neither adopted nor replaced: the declaration is refused. */
    assert_int_equal(fx_catalog_declare(cat, "t1", "default", "orders", &p, &adopted, &e),
                     -ENOTDIR);
    assert_false(adopted);
    assert_int_equal(fx_catalog_count(cat), 0);
    fx_catalog_free(cat);
    /* Nor does a log open through it. */
    snprintf(path, sizeof(path), "%s/%s", t.root, name);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    fx_dlog *log = NULL;
    assert_int_equal(fx_dlog_open(&log, path, &c, 1, NULL), -ENOTDIR);
    assert_false(exists(t.outside, "00000000000000000000.log"));
    expect_victim_intact(&t);
    tmp_deinit(&t);
}

static void test_finishing_a_planted_deletion_spares_the_link_target(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    make_victim(&t);
    char name[FX_LOGFMT_DIR_NAME_MAX];
    plant(&t, name, true);
    fx_catalog *cat = NULL;
    char err[256] = "";
    int rv = fx_catalog_open(&cat, NULL, t.root, err, sizeof(err));
    if (rv != 0)
        fail_msg("open: %s: %s", fx_strerror(rv), err);
    assert_int_equal(fx_catalog_count(cat), 0); /* the deletion finished */
    fx_catalog_free(cat);
    assert_false(exists(t.root, name)); /* the link itself is gone */
    expect_victim_intact(&t);
    tmp_deinit(&t);
}

static void test_remove_dir_unlinks_a_symlink_never_its_target(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    make_victim(&t);
    assert_int_equal(mkdir(t.root, 0700), 0);
    char stream[256], inner[PATH_MAX];
    snprintf(stream, sizeof(stream), "%s/s", t.root);
    assert_int_equal(mkdir(stream, 0700), 0);
    put(stream, "00000000000000000000.log", "x");
    snprintf(inner, sizeof(inner), "%s/inner", stream);
    assert_int_equal(symlink(t.outside, inner), 0); /* a link inside the tree */
    assert_int_equal(fx_sio_remove_dir(fx_sio_posix(), stream), 0);
    assert_false(exists(t.root, "s"));
    expect_victim_intact(&t);

    char top[PATH_MAX]; /* a link as the directory to remove */
    snprintf(top, sizeof(top), "%s/top", t.root);
    assert_int_equal(symlink(t.outside, top), 0);
    assert_int_equal(fx_sio_remove_dir(fx_sio_posix(), top), 0);
    assert_false(exists(t.root, "top"));
    expect_victim_intact(&t);
    tmp_deinit(&t);
}

/* ---- recursive removal ----------------------------------------------------------------- */

static void test_remove_dir_recurses_into_subdirectories(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    char a[PATH_MAX], b[PATH_MAX];
    assert_int_equal(mkdir(t.root, 0700), 0);
    snprintf(a, sizeof(a), "%s/a", t.root);
    snprintf(b, sizeof(b), "%s/a/b", t.root);
    assert_int_equal(mkdir(a, 0700), 0);
    assert_int_equal(mkdir(b, 0700), 0);
    put(t.root, "00000000000000000000.log", "x");
    put(a, "f", "x");
    put(b, "g", "x");
    assert_int_equal(fx_sio_remove_dir(fx_sio_posix(), t.root), 0);
    assert_false(exists(t.base, "root"));
    assert_int_equal(fx_sio_remove_dir(fx_sio_posix(), t.root), 0); /* gone: nothing to do */
    tmp_deinit(&t);
}

static void mem_put(fx_sio *io, const char *path)
{
    int fd;
    assert_int_equal(io->ops->open(io, path, FX_SIO_CREATE, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "x", 1, 0), 0);
    assert_int_equal(io->ops->close(io, fd), 0);
}

static void test_remove_dir_recurses_on_the_memory_layer(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, "/r/s/a/b"), 0);
    assert_int_equal(fx_sio_mkdirs(io, "/r/other"), 0);
    mem_put(io, "/r/s/0.log");
    mem_put(io, "/r/s/a/f");
    mem_put(io, "/r/s/a/b/g");
    mem_put(io, "/r/other/keep");
    /* An injected unlink failure stops it like on disk, and a retry ends it. */
    fx_memio_fail(m, FX_MEMIO_UNLINK, -EIO, 1);
    assert_int_equal(fx_sio_remove_dir(io, "/r/s"), -EIO);
    assert_int_equal(fx_sio_remove_dir(io, "/r/s"), 0);
    bool is_dir;
    assert_int_equal(io->ops->stat(io, "/r/s", &is_dir), -ENOENT);
    assert_int_equal(io->ops->stat(io, "/r/s/a/b/g", &is_dir), -ENOENT);
    assert_int_equal(io->ops->stat(io, "/r/other/keep", &is_dir), 0);
    /* The removal is durable: a power cut does not bring it back. */
    fx_memio_crash(m, 0);
    assert_int_equal(io->ops->stat(io, "/r/s", &is_dir), -ENOENT);
    fx_memio_free(m);
}

/* ---- the root lock ------------------------------------------------------------------- */

static void test_lock_creates_a_missing_root_0700_and_resolves_a_link(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    char deep[256], link[PATH_MAX], why[1024] = "";
    snprintf(deep, sizeof(deep), "%s/a/b", t.root);
    mode_t old = umask(0);
    fx_rootlock *l = NULL;
    int rv = fx_rootlock_take(&l, deep, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why));
    umask(old);
    if (rv != 0)
        fail_msg("take: %s: %s", fx_strerror(rv), why);
    assert_int_equal(mode_of(t.root), 0700);
    assert_int_equal(mode_of(deep), 0700);
    char lockf[PATH_MAX];
    snprintf(lockf, sizeof(lockf), "%s/%s", deep, FX_ROOTLOCK_FILE);
    assert_int_equal(mode_of(lockf), 0600);
    fx_rootlock_free(l);

    snprintf(link, sizeof(link), "%s/link", t.base);
    assert_int_equal(symlink(deep, link), 0);
    assert_int_equal(
        fx_rootlock_take(&l, link, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)), 0);
    assert_string_equal(fx_rootlock_path(l), deep); /* the real path from now on */
    fx_rootlock_free(l);
    tmp_deinit(&t);
}

static void test_lock_held_is_refused_with_the_holders_pid(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    char why[1024] = "", want[64], text[64] = "";
    fx_rootlock *a = NULL, *b = NULL, *r = NULL;
    assert_int_equal(
        fx_rootlock_take(&a, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)), 0);
    char lockf[PATH_MAX];
    snprintf(lockf, sizeof(lockf), "%s/%s", t.root, FX_ROOTLOCK_FILE);
    FILE *f = fopen(lockf, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_int_equal(atol(text), (long)getpid());

    /* A second taker (another open file description: as another process). */
    assert_int_equal(
        fx_rootlock_take(&b, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        -EBUSY);
    assert_null(b);
    snprintf(want, sizeof(want), "pid %ld", (long)getpid());
    if (strstr(why, want) == NULL || strstr(why, t.root) == NULL)
        fail_msg("want the root and \"%s\" in: %s", want, why);
    /* A reader is refused too, naming the broker. */
    assert_int_equal(fx_rootlock_share(&r, t.root, why, sizeof(why)), -EBUSY);
    if (strstr(why, want) == NULL || strstr(why, "running felix-broker") == NULL)
        fail_msg("want the holder in: %s", why);

    fx_rootlock_free(a); /* released: the next one takes it */
    assert_int_equal(
        fx_rootlock_take(&b, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)), 0);
    fx_rootlock_free(b);
    /* Readers share; while one reads, no broker starts. */
    fx_rootlock *r2 = NULL;
    assert_int_equal(fx_rootlock_share(&r, t.root, why, sizeof(why)), 0);
    assert_int_equal(fx_rootlock_share(&r2, t.root, why, sizeof(why)), 0);
    assert_int_equal(
        fx_rootlock_take(&b, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        -EBUSY);
    fx_rootlock_free(r);
    fx_rootlock_free(r2);
    /* A directory no broker locked needs no lock to read. */
    assert_int_equal(fx_rootlock_share(&r, t.base, why, sizeof(why)), 0);
    assert_false(exists(t.base, FX_ROOTLOCK_FILE)); /* a reader creates nothing */
    fx_rootlock_free(r);
    tmp_deinit(&t);
}

static void test_lock_refuses_a_root_writable_by_others(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    assert_int_equal(mkdir(t.root, 0700), 0);
    assert_int_equal(chmod(t.root, 0777), 0);
    char why[1024] = "";
    fx_rootlock *l = NULL;
    assert_int_equal(
        fx_rootlock_take(&l, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        FX_ECONFIG);
    if (strstr(why, "is writable by group or others (mode 0777)") == NULL ||
        strstr(why, t.root) == NULL)
        fail_msg("unexpected reason: %s", why);
    assert_false(exists(t.root, FX_ROOTLOCK_FILE)); /* refused before writing anything */
    assert_int_equal(chmod(t.root, 0720), 0);
    assert_int_equal(
        fx_rootlock_take(&l, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        FX_ECONFIG);
    tmp_deinit(&t);
}

static void test_lock_refuses_a_root_owned_by_another_user(void **state)
{
    (void)state;
    if (geteuid() != 0)
        fx_test_skip("needs root to give a directory to another user (chown)");
    tmp t;
    tmp_init(&t);
    assert_int_equal(mkdir(t.root, 0700), 0);
    assert_int_equal(chown(t.root, OTHER_UID, OTHER_UID), 0);
    char why[1024] = "";
    fx_rootlock *l = NULL;
    assert_int_equal(
        fx_rootlock_take(&l, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        FX_ECONFIG);
    if (strstr(why, "is owned by uid 65534, not by this user (uid 0)") == NULL ||
        strstr(why, t.root) == NULL)
        fail_msg("unexpected reason: %s", why);
    assert_false(exists(t.root, FX_ROOTLOCK_FILE));
    tmp_deinit(&t);
}

static void test_lock_file_that_is_a_symlink_is_not_followed(void **state)
{
    (void)state;
    tmp t;
    tmp_init(&t);
    make_victim(&t);
    assert_int_equal(mkdir(t.root, 0700), 0);
    char lockf[PATH_MAX], target[PATH_MAX], why[1024] = "";
    snprintf(lockf, sizeof(lockf), "%s/%s", t.root, FX_ROOTLOCK_FILE);
    snprintf(target, sizeof(target), "%s/notes", t.outside);
    assert_int_equal(symlink(target, lockf), 0);
    fx_rootlock *l = NULL;
    assert_int_equal(
        fx_rootlock_take(&l, t.root, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        -ELOOP);
    FILE *f = fopen(target, "r");
    char text[16] = "";
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_string_equal(text, "keep"); /* no PID written through the link */
    tmp_deinit(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_files_are_0600_and_directories_0700),
    cmocka_unit_test(test_stat_list_and_open_do_not_follow_a_symlink),
    cmocka_unit_test(test_symlinked_stream_dir_is_not_adopted),
    cmocka_unit_test(test_finishing_a_planted_deletion_spares_the_link_target),
    cmocka_unit_test(test_remove_dir_unlinks_a_symlink_never_its_target),
    cmocka_unit_test(test_remove_dir_recurses_into_subdirectories),
    cmocka_unit_test(test_remove_dir_recurses_on_the_memory_layer),
    cmocka_unit_test(test_lock_creates_a_missing_root_0700_and_resolves_a_link),
    cmocka_unit_test(test_lock_held_is_refused_with_the_holders_pid),
    cmocka_unit_test(test_lock_refuses_a_root_writable_by_others),
    cmocka_unit_test(test_lock_refuses_a_root_owned_by_another_user),
    cmocka_unit_test(test_lock_file_that_is_a_symlink_is_not_followed),
};

FX_TEST_MAIN(tests)
