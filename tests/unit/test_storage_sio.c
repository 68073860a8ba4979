/* Unit tests for sio.c: the POSIX layer's calls and the errors they return
 * (missing names, existing names, reads at and past the end, a write on a
 * read-only handle), directory listing and removal, and the helpers that
 * work on any fx_sio (mkdirs, read_file, write_file_atomic, remove_dir),
 * whose failure paths run on the in-memory layer. Each case works in its
 * own mkdtemp directory. */
/* fx-test-libs: fx_storage fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/memio.h"
#include "storage/sio.h"

#include "fx_test.h"

static char base[64];

static int setup(void **state)
{
    snprintf(base, sizeof(base), "/tmp/fx-sio-XXXXXX");
    return mkdtemp(base) == NULL ? -1 : 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int teardown(void **state)
{
    return nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *at(const char *name)
{
    static char bufs[4][192];
    static int k;
    char *p = bufs[k++ % 4];
    snprintf(p, 192, "%s/%s", base, name);
    return p;
}

static void test_open_modes_and_their_errors(void **state)
{
    fx_sio *io = fx_sio_posix();
    int fd = -1;
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_READ, &fd), -ENOENT);
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_WRITE, &fd), -ENOENT);
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_CREATE, &fd), 0);
    struct stat st;
    assert_int_equal(stat(at("f"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(io->ops->close(io, fd), 0);
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_CREATE, &fd), -EEXIST);
    assert_int_equal(symlink(at("f"), at("l")), 0);
    assert_int_equal(io->ops->open(io, at("l"), FX_SIO_READ, &fd), -ELOOP);
    /* A read-only handle refuses a write. */
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_READ, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "x", 1, 0), -EBADF);
    io->ops->close(io, fd);
}

static void test_pread_is_short_only_at_the_end(void **state)
{
    fx_sio *io = fx_sio_posix();
    int fd;
    assert_int_equal(io->ops->open(io, at("f"), FX_SIO_CREATE, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "0123456789", 10, 0), 0);
    assert_int_equal(io->ops->pwrite(io, fd, "AB", 2, 4), 0);
    char buf[32] = "";
    assert_int_equal(io->ops->pread(io, fd, buf, 4, 3), 4);
    assert_memory_equal(buf, "3AB6", 4);
    assert_int_equal(io->ops->pread(io, fd, buf, sizeof(buf), 7), 3);
    assert_memory_equal(buf, "789", 3);
    assert_int_equal(io->ops->pread(io, fd, buf, sizeof(buf), 10), 0);
    assert_int_equal(io->ops->pread(io, fd, buf, sizeof(buf), 1000), 0);
    uint64_t size = 0;
    assert_int_equal(io->ops->fsize(io, fd, &size), 0);
    assert_int_equal(size, 10);
    assert_int_equal(io->ops->ftruncate(io, fd, 4), 0);
    assert_int_equal(io->ops->fsize(io, fd, &size), 0);
    assert_int_equal(size, 4);
    /* A reservation does not change the size. */
    int rv = io->ops->fallocate(io, fd, 1 << 16);
    assert_true(rv == 0 || rv == -EOPNOTSUPP);
    assert_int_equal(io->ops->fsize(io, fd, &size), 0);
    assert_int_equal(size, 4);
    assert_int_equal(io->ops->fdatasync(io, fd), 0);
    io->ops->close(io, fd);
    assert_int_equal(io->ops->pread(io, fd, buf, 1, 0), -EBADF);
}

static void test_names_rename_unlink_mkdir_rmdir_and_stat(void **state)
{
    fx_sio *io = fx_sio_posix();
    bool is_dir = true;
    assert_int_equal(io->ops->stat(io, at("nope"), &is_dir), -ENOENT);
    assert_int_equal(io->ops->rename(io, at("nope"), at("x")), -ENOENT);
    assert_int_equal(io->ops->unlink(io, at("nope")), -ENOENT);
    assert_int_equal(io->ops->rmdir(io, at("nope")), -ENOENT);
    assert_int_equal(io->ops->mkdir(io, at("d")), 0);
    assert_int_equal(io->ops->mkdir(io, at("d")), -EEXIST);
    struct stat st;
    assert_int_equal(stat(at("d"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(io->ops->stat(io, at("d"), &is_dir), 0);
    assert_true(is_dir);
    assert_int_equal(io->ops->sync_dir(io, at("d")), 0);
    int fd;
    assert_int_equal(io->ops->open(io, at("d/f"), FX_SIO_CREATE, &fd), 0);
    io->ops->close(io, fd);
    assert_int_equal(io->ops->rmdir(io, at("d")), -ENOTEMPTY);
    assert_int_equal(io->ops->rename(io, at("d/f"), at("g")), 0);
    assert_int_equal(io->ops->stat(io, at("g"), &is_dir), 0);
    assert_false(is_dir);
    assert_int_equal(io->ops->rmdir(io, at("d")), 0);
    assert_int_equal(io->ops->unlink(io, at("g")), 0);
    assert_int_equal(io->ops->stat(io, at("g"), &is_dir), -ENOENT);
}

typedef struct listing {
    char names[8][32];
    bool dirs[8];
    int n;
    int stop_after;
} listing;

static int on_entry(void *user, const char *name, bool is_dir)
{
    listing *l = user;
    snprintf(l->names[l->n], sizeof(l->names[0]), "%s", name);
    l->dirs[l->n++] = is_dir;
    return l->stop_after != 0 && l->n == l->stop_after ? 9 : 0;
}

static bool listed(const listing *l, const char *name, bool is_dir)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return l->dirs[i] == is_dir;
    return false;
}

static void test_list_names_entries_and_stops_on_request(void **state)
{
    fx_sio *io = fx_sio_posix();
    assert_int_equal(mkdir(at("d"), 0700), 0);
    assert_int_equal(mkdir(at("d/sub"), 0700), 0);
    FILE *f = fopen(at("d/file"), "w");
    fclose(f);
    assert_int_equal(symlink(at("d/sub"), at("d/link")), 0);
    listing l = {0};
    assert_int_equal(io->ops->list(io, at("d"), on_entry, &l), 0);
    assert_int_equal(l.n, 3);
    assert_true(listed(&l, "sub", true));
    assert_true(listed(&l, "file", false));
    assert_true(listed(&l, "link", false)); /* a link to a directory is not one */
    listing s = {.stop_after = 1};
    assert_int_equal(io->ops->list(io, at("d"), on_entry, &s), 9);
    assert_int_equal(s.n, 1);
    listing m = {0};
    assert_int_equal(io->ops->list(io, at("missing"), on_entry, &m), -ENOENT);
    int rv = io->ops->list(io, at("d/link"), on_entry, &m);
    assert_true(rv == -ELOOP || rv == -ENOTDIR);
    assert_int_equal(m.n, 0);
}

static void test_mkdirs_creates_parents_and_refuses_a_file(void **state)
{
    fx_sio *io = fx_sio_posix();
    assert_int_equal(fx_sio_mkdirs(io, at("a/b/c")), 0);
    bool is_dir = false;
    assert_int_equal(io->ops->stat(io, at("a/b/c"), &is_dir), 0);
    assert_true(is_dir);
    assert_int_equal(fx_sio_mkdirs(io, at("a/b/c")), 0); /* again: nothing to do */
    FILE *f = fopen(at("a/file"), "w");
    fclose(f);
    assert_int_equal(fx_sio_mkdirs(io, at("a/file")), -ENOTDIR);
    assert_int_equal(fx_sio_mkdirs(io, at("a/file/x")), -ENOTDIR);
}

static void test_read_file_bounds_and_terminates(void **state)
{
    fx_sio *io = fx_sio_posix();
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(fx_sio_read_file(io, at("f"), 100, &buf, &len), -ENOENT);
    assert_int_equal(fx_sio_write_file_atomic(io, at("f"), "hello", 5), 0);
    assert_int_equal(access(at("f.tmp"), F_OK), -1);
    assert_int_equal(fx_sio_read_file(io, at("f"), 4, &buf, &len), -EFBIG);
    assert_null(buf);
    assert_int_equal(fx_sio_read_file(io, at("f"), 5, &buf, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal(buf, "hello");
    free(buf);
    /* A replacement, over a stale .tmp left by a crash. */
    FILE *f = fopen(at("f.tmp"), "w");
    fputs("stale", f);
    fclose(f);
    assert_int_equal(fx_sio_write_file_atomic(io, at("f"), "hi", 2), 0);
    assert_int_equal(fx_sio_read_file(io, at("f"), 100, &buf, &len), 0);
    assert_string_equal(buf, "hi");
    free(buf);
}

static void test_atomic_write_failure_keeps_the_old_file(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, "/d"), 0);
    assert_int_equal(fx_sio_write_file_atomic(io, "/d/cfg", "old", 3), 0);
    fx_memio_op ops[] = {FX_MEMIO_PWRITE, FX_MEMIO_FDATASYNC, FX_MEMIO_RENAME};
    for (size_t i = 0; i < 3; i++) {
        fx_memio_fail(m, ops[i], -EIO, 1);
        assert_int_equal(fx_sio_write_file_atomic(io, "/d/cfg", "new", 3), -EIO);
        char *buf = NULL;
        size_t len;
        assert_int_equal(fx_sio_read_file(io, "/d/cfg", 10, &buf, &len), 0);
        assert_string_equal(buf, "old");
        free(buf);
        bool is_dir;
        assert_int_equal(io->ops->stat(io, "/d/cfg.tmp", &is_dir), -ENOENT);
    }
    fx_memio_free(m);
}

static void test_remove_dir_removes_a_tree_and_tolerates_missing(void **state)
{
    fx_sio *io = fx_sio_posix();
    assert_int_equal(fx_sio_mkdirs(io, at("t/x/y")), 0);
    assert_int_equal(fx_sio_write_file_atomic(io, at("t/x/y/f"), "1", 1), 0);
    assert_int_equal(fx_sio_write_file_atomic(io, at("t/g"), "2", 1), 0);
    assert_int_equal(io->ops->remove_tree(io, at("missing")), -ENOENT);
    assert_int_equal(fx_sio_remove_dir(io, at("missing")), 0);
    assert_int_equal(fx_sio_remove_dir(io, at("t")), 0);
    assert_int_equal(access(at("t"), F_OK), -1);
    /* A plain file is removed too. */
    assert_int_equal(fx_sio_write_file_atomic(io, at("h"), "3", 1), 0);
    assert_int_equal(io->ops->remove_tree(io, at("h")), 0);
    assert_int_equal(access(at("h"), F_OK), -1);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_open_modes_and_their_errors),
    T(test_pread_is_short_only_at_the_end),
    T(test_names_rename_unlink_mkdir_rmdir_and_stat),
    T(test_list_names_entries_and_stops_on_request),
    T(test_mkdirs_creates_parents_and_refuses_a_file),
    T(test_read_file_bounds_and_terminates),
    T(test_atomic_write_failure_keeps_the_old_file),
    T(test_remove_dir_removes_a_tree_and_tolerates_missing),
};

FX_TEST_MAIN(tests)
