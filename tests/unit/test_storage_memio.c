/* Unit tests for memio.c as a model of a disk: a power cut drops what no
 * completed fdatasync covered and names no directory sync covered; a flush
 * makes durable what the file held when it began; injected failures, the
 * capacity limit, the crash point and the damage helpers; the torn models'
 * bounds. */
/* fx-test-libs: fx_storage fx_base */
#include "storage/memio.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fx_test.h"

typedef struct fs {
    fx_memio *m;
    fx_sio *io;
} fs;

static fs mk(void)
{
    fs f;
    assert_int_equal(fx_memio_new(&f.m), 0);
    f.io = fx_memio_sio(f.m);
    return f;
}

/* Creates |path| and makes its name durable. */
static int create_durable(fs *f, const char *path)
{
    int fd;
    assert_int_equal(f->io->ops->open(f->io, path, FX_SIO_CREATE, &fd), 0);
    assert_int_equal(f->io->ops->sync_dir(f->io, "/"), 0);
    return fd;
}

static uint64_t len_of(fs *f, const char *path)
{
    uint64_t n = 0;
    assert_int_equal(fx_memio_file_len(f->m, path, &n), 0);
    return n;
}

static void test_crash_drops_unsynced_bytes(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "hello", 5, 0), 0);
    assert_int_equal(len_of(&f, "/a"), 5);
    fx_memio_crash(f.m, 0);
    assert_int_equal(len_of(&f, "/a"), 0);
    /* The handle died with the process. */
    char b[8];
    assert_int_equal(f.io->ops->pread(f.io, fd, b, 1, 0), -EBADF);
    fx_memio_free(f.m);
}

static void test_fdatasync_keeps_what_it_covered(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "abcd", 4, 0), 0);
    assert_int_equal(f.io->ops->fdatasync(f.io, fd), 0);
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "efgh", 4, 4), 0);
    /* An overwrite of synced bytes is lost too. */
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "X", 1, 0), 0);
    fx_memio_crash(f.m, 0);
    assert_int_equal(len_of(&f, "/a"), 4);
    assert_int_equal(f.io->ops->open(f.io, "/a", FX_SIO_READ, &fd), 0);
    char b[8] = "";
    assert_int_equal(f.io->ops->pread(f.io, fd, b, sizeof(b), 0), 4);
    assert_memory_equal(b, "abcd", 4);
    fx_memio_free(f.m);
}

static void test_names_need_a_directory_sync(void **state)
{
    fs f = mk();
    int old = create_durable(&f, "/old");
    int fd;
    assert_int_equal(f.io->ops->open(f.io, "/new", FX_SIO_CREATE, &fd), 0);
    assert_int_equal(f.io->ops->fdatasync(f.io, fd), 0);
    assert_int_equal(f.io->ops->rename(f.io, "/old", "/renamed"), 0);
    bool is_dir;
    assert_int_equal(f.io->ops->stat(f.io, "/renamed", &is_dir), 0);
    fx_memio_crash(f.m, 0);
    /* The file synced but never named durably is gone; the rename undone. */
    assert_int_equal(f.io->ops->stat(f.io, "/new", &is_dir), -ENOENT);
    assert_int_equal(f.io->ops->stat(f.io, "/renamed", &is_dir), -ENOENT);
    assert_int_equal(f.io->ops->stat(f.io, "/old", &is_dir), 0);
    (void)old;
    fx_memio_free(f.m);
}

static void test_injected_failures_count_down_and_filter_by_suffix(void **state)
{
    fs f = mk();
    int a = create_durable(&f, "/seg.log");
    int b = create_durable(&f, "/seg.index");
    uint64_t before = fx_memio_op_calls(f.m, FX_MEMIO_PWRITE);
    fx_memio_fail(f.m, FX_MEMIO_PWRITE, -ENOSPC, 2);
    fx_memio_fail_only(f.m, ".index");
    assert_int_equal(f.io->ops->pwrite(f.io, a, "x", 1, 0), 0);
    assert_int_equal(f.io->ops->pwrite(f.io, b, "x", 1, 0), -ENOSPC);
    assert_int_equal(f.io->ops->pwrite(f.io, b, "x", 1, 0), -ENOSPC);
    assert_int_equal(len_of(&f, "/seg.index"), 0); /* a failing pwrite writes nothing */
    assert_int_equal(f.io->ops->pwrite(f.io, b, "x", 1, 0), 0);
    assert_int_equal(fx_memio_op_calls(f.m, FX_MEMIO_PWRITE) - before, 4);
    fx_memio_fail_only(f.m, NULL);
    fx_memio_fail(f.m, FX_MEMIO_FDATASYNC, -EIO, 1);
    assert_int_equal(f.io->ops->fdatasync(f.io, a), -EIO);
    assert_int_equal(f.io->ops->fdatasync(f.io, a), 0);
    fx_memio_free(f.m);
}

static void test_capacity_writes_what_fits_then_enospc(void **state)
{
    fs f = mk();
    fx_memio_set_capacity(f.m, 10);
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "0123456", 7, 0), 0);
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "789ABC", 6, 7), -ENOSPC);
    assert_int_equal(len_of(&f, "/a"), 10);
    assert_int_equal(fx_memio_used(f.m), 10);
    assert_int_equal(f.io->ops->fallocate(f.io, fd, 11), -ENOSPC);
    assert_int_equal(f.io->ops->ftruncate(f.io, fd, 2), 0);
    assert_int_equal(fx_memio_used(f.m), 2);
    assert_int_equal(f.io->ops->fallocate(f.io, fd, 8), 0);
    assert_int_equal(fx_memio_used(f.m), 8);
    fx_memio_set_capacity(f.m, 0);
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "0123456789", 10, 2), 0);
    fx_memio_free(f.m);
}

static void test_crash_after_fails_every_later_call(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    uint64_t calls = fx_memio_calls(f.m);
    fx_memio_crash_after(f.m, 2);
    assert_false(fx_memio_is_down(f.m));
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "ab", 2, 0), 0);
    assert_int_equal(f.io->ops->fdatasync(f.io, fd), 0);
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "cd", 2, 2), -EIO);
    assert_true(fx_memio_is_down(f.m));
    assert_int_equal(f.io->ops->unlink(f.io, "/a"), -EIO);
    assert_int_equal(len_of(&f, "/a"), 2); /* the failed write changed nothing */
    assert_true(fx_memio_calls(f.m) - calls >= 2);
    fx_memio_crash(f.m, 0);
    assert_false(fx_memio_is_down(f.m));
    assert_int_equal(len_of(&f, "/a"), 2);
    fx_memio_free(f.m);
}

static void test_damage_helpers_change_both_images(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "abcdef", 6, 0), 0);
    assert_int_equal(f.io->ops->fdatasync(f.io, fd), 0);
    assert_int_equal(fx_memio_corrupt(f.m, "/a", 1, 0x20), 0);
    assert_int_equal(fx_memio_cut(f.m, "/a", 4), 0);
    assert_int_equal(fx_memio_corrupt(f.m, "/missing", 0, 1), -ENOENT);
    assert_int_equal(fx_memio_cut(f.m, "/missing", 0), -ENOENT);
    uint64_t n;
    assert_int_equal(fx_memio_file_len(f.m, "/missing", &n), -ENOENT);
    fx_memio_crash(f.m, 0);
    assert_int_equal(f.io->ops->open(f.io, "/a", FX_SIO_READ, &fd), 0);
    char b[8] = "";
    assert_int_equal(f.io->ops->pread(f.io, fd, b, sizeof(b), 0), 4);
    assert_memory_equal(b, "aBcd", 4);
    fx_memio_free(f.m);
}

static void test_torn_models_stay_between_synced_and_written(void **state)
{
    static uint8_t data[8192];
    memset(data, 0xab, sizeof(data));
    for (uint64_t seed = 1; seed <= 20; seed++) {
        for (int model = FX_MEMIO_TEAR_PREFIX; model <= FX_MEMIO_TEAR_REORDER; model++) {
            fs f = mk();
            fx_memio_set_tear_unit(f.m, 512, 64);
            int fd = create_durable(&f, "/a");
            assert_int_equal(f.io->ops->pwrite(f.io, fd, data, 1024, 0), 0);
            assert_int_equal(f.io->ops->fdatasync(f.io, fd), 0);
            assert_int_equal(f.io->ops->pwrite(f.io, fd, data, 4096, 1024), 0);
            fx_memio_crash_torn(f.m, (fx_memio_tear)model, seed);
            uint64_t n = len_of(&f, "/a");
            assert_true(n >= 1024 && n <= 5120);
            if (model == FX_MEMIO_TEAR_ZERO_BLOCKS)
                assert_int_equal(n, 5120);
            /* The synced bytes are intact whatever tore. */
            uint8_t b[1024];
            assert_int_equal(f.io->ops->open(f.io, "/a", FX_SIO_READ, &fd), 0);
            assert_int_equal(f.io->ops->pread(f.io, fd, b, sizeof(b), 0), 1024);
            assert_memory_equal(b, data, 1024);
            fx_memio_free(f.m);
        }
    }
}

typedef struct syncer {
    fs *f;
    int fd;
    int rv;
} syncer;

static void *run_sync(void *arg)
{
    syncer *s = arg;
    s->rv = s->f->io->ops->fdatasync(s->f->io, s->fd);
    return NULL;
}

static void test_held_flush_covers_only_what_preceded_it(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "1234", 4, 0), 0);
    fx_memio_hold_next_sync(f.m);
    syncer s = {.f = &f, .fd = fd, .rv = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_sync, &s), 0);
    fx_memio_wait_held(f.m);
    /* Other calls go on while the flush is held. */
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "5678", 4, 4), 0);
    fx_memio_release(f.m);
    pthread_join(t, NULL);
    assert_int_equal(s.rv, 0);
    fx_memio_crash(f.m, 0);
    assert_int_equal(len_of(&f, "/a"), 4);
    fx_memio_free(f.m);
}

static void test_held_flush_released_failing_makes_nothing_durable(void **state)
{
    fs f = mk();
    int fd = create_durable(&f, "/a");
    assert_int_equal(f.io->ops->pwrite(f.io, fd, "1234", 4, 0), 0);
    fx_memio_hold_next_sync(f.m);
    syncer s = {.f = &f, .fd = fd, .rv = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_sync, &s), 0);
    fx_memio_wait_held(f.m);
    fx_memio_release_failing(f.m, -EIO);
    pthread_join(t, NULL);
    assert_int_equal(s.rv, -EIO);
    fx_memio_crash(f.m, 0);
    assert_int_equal(len_of(&f, "/a"), 0);
    fx_memio_free(f.m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_crash_drops_unsynced_bytes),
    cmocka_unit_test(test_fdatasync_keeps_what_it_covered),
    cmocka_unit_test(test_names_need_a_directory_sync),
    cmocka_unit_test(test_injected_failures_count_down_and_filter_by_suffix),
    cmocka_unit_test(test_capacity_writes_what_fits_then_enospc),
    cmocka_unit_test(test_crash_after_fails_every_later_call),
    cmocka_unit_test(test_damage_helpers_change_both_images),
    cmocka_unit_test(test_torn_models_stay_between_synced_and_written),
    cmocka_unit_test(test_held_flush_covers_only_what_preceded_it),
    cmocka_unit_test(test_held_flush_released_failing_makes_nothing_durable),
};

FX_TEST_MAIN(tests)
