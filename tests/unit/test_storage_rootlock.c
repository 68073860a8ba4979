/* Unit tests for rootlock.c on its own: an exclusive lock taken, refused
 * while held (in this process too: flock belongs to the open file) and
 * free again once released; the lock file's mode and PID text; the shared
 * reader's lock against the exclusive one; the path it resolves and the
 * inputs it refuses. Each case works in its own mkdtemp directory. */
/* fx-test-libs: fx_storage fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "felix/error.h"
#include "storage/rootlock.h"

#include "fx_test.h"

static char base[64];

static int setup(void **state)
{
    snprintf(base, sizeof(base), "/tmp/fx-rootlock-XXXXXX");
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

static void sub(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", base, name);
}

static void test_take_then_second_take_is_busy_until_free(void **state)
{
    char dir[128], why[512] = "";
    sub(dir, sizeof(dir), "root");
    fx_rootlock *a = NULL, *b = NULL;
    assert_int_equal(
        fx_rootlock_take(&a, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)), 0);
    assert_int_equal(
        fx_rootlock_take(&b, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)),
        -EBUSY);
    assert_null(b);
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
    assert_non_null(strstr(why, pid));
    assert_non_null(strstr(why, "durable_storage_dir"));
    fx_rootlock_free(a);
    assert_int_equal(fx_rootlock_take(&b, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", NULL, 0),
                     0);
    fx_rootlock_free(b);
    fx_rootlock_free(NULL);
}

static void test_lock_file_is_0600_and_holds_the_pid(void **state)
{
    char dir[128], file[192];
    sub(dir, sizeof(dir), "a/b/root");
    fx_rootlock *l = NULL;
    assert_int_equal(fx_rootlock_take(&l, dir, "state.lock", "state_dir", NULL, 0), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(file, sizeof(file), "%s/state.lock", dir);
    assert_int_equal(stat(file, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    char text[32] = "", want[32];
    FILE *f = fopen(file, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    snprintf(want, sizeof(want), "%ld\n", (long)getpid());
    assert_string_equal(text, want);
    fx_rootlock_free(l);
    /* The file stays after release. */
    assert_int_equal(stat(file, &st), 0);
}

static void test_two_file_names_lock_one_directory_twice(void **state)
{
    char dir[128];
    sub(dir, sizeof(dir), "both");
    fx_rootlock *a = NULL, *b = NULL;
    assert_int_equal(fx_rootlock_take(&a, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", NULL, 0),
                     0);
    assert_int_equal(fx_rootlock_take(&b, dir, "state.lock", "state_dir", NULL, 0), 0);
    fx_rootlock_free(a);
    fx_rootlock_free(b);
}

static void test_shared_readers_exclude_the_exclusive_holder(void **state)
{
    char dir[128], why[512] = "";
    sub(dir, sizeof(dir), "shared");
    fx_rootlock *w = NULL, *r1 = NULL, *r2 = NULL;
    assert_int_equal(fx_rootlock_take(&w, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", NULL, 0),
                     0);
    assert_int_equal(fx_rootlock_share(&r1, dir, why, sizeof(why)), -EBUSY);
    assert_non_null(strstr(why, "in use by a running felix-broker"));
    fx_rootlock_free(w);
    assert_int_equal(fx_rootlock_share(&r1, dir, NULL, 0), 0);
    assert_int_equal(fx_rootlock_share(&r2, dir, NULL, 0), 0);
    assert_int_equal(fx_rootlock_take(&w, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", NULL, 0),
                     -EBUSY);
    fx_rootlock_free(r1);
    fx_rootlock_free(r2);
    assert_int_equal(fx_rootlock_take(&w, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", NULL, 0),
                     0);
    fx_rootlock_free(w);
}

static void test_share_without_a_lock_file_needs_no_lock(void **state)
{
    fx_rootlock *r = NULL;
    assert_int_equal(fx_rootlock_share(&r, base, NULL, 0), 0);
    assert_non_null(r);
    assert_string_equal(fx_rootlock_path(r), base);
    fx_rootlock_free(r);
    char file[128];
    sub(file, sizeof(file), FX_ROOTLOCK_FILE);
    /* Sharing created nothing. */
    assert_int_equal(access(file, F_OK), -1);
    char missing[128];
    sub(missing, sizeof(missing), "missing");
    assert_int_equal(fx_rootlock_share(&r, missing, NULL, 0), -ENOENT);
}

static void test_path_is_the_resolved_directory(void **state)
{
    char dir[128], link[128], real[PATH_MAX];
    sub(dir, sizeof(dir), "real");
    sub(link, sizeof(link), "via");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(symlink(dir, link), 0);
    fx_rootlock *l = NULL;
    assert_int_equal(fx_rootlock_take(&l, link, FX_ROOTLOCK_FILE, "state_dir", NULL, 0), 0);
    assert_non_null(realpath(dir, real));
    assert_string_equal(fx_rootlock_path(l), real);
    fx_rootlock_free(l);
}

static void test_refuses_bad_file_names_and_a_file_as_root(void **state)
{
    char file[128], why[512] = "";
    fx_rootlock *l = NULL;
    assert_int_equal(fx_rootlock_take(&l, base, "a/b", "state_dir", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "bad lock file name"));
    sub(file, sizeof(file), "plain");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(fx_rootlock_take(&l, file, FX_ROOTLOCK_FILE, "state_dir", why, sizeof(why)),
                     FX_ECONFIG);
    assert_non_null(strstr(why, "not a directory"));
    assert_null(l);
}

static void test_refuses_a_group_writable_root(void **state)
{
    char dir[128], why[512] = "";
    sub(dir, sizeof(dir), "open");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0770), 0);
    fx_rootlock *l = NULL;
    assert_int_equal(fx_rootlock_take(&l, dir, FX_ROOTLOCK_FILE, "state_dir", why, sizeof(why)),
                     FX_ECONFIG);
    assert_non_null(strstr(why, "chmod go-w"));
    assert_int_equal(chmod(dir, 0750), 0);
    assert_int_equal(fx_rootlock_take(&l, dir, FX_ROOTLOCK_FILE, "state_dir", NULL, 0), 0);
    fx_rootlock_free(l);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_take_then_second_take_is_busy_until_free),
    T(test_lock_file_is_0600_and_holds_the_pid),
    T(test_two_file_names_lock_one_directory_twice),
    T(test_shared_readers_exclude_the_exclusive_holder),
    T(test_share_without_a_lock_file_needs_no_lock),
    T(test_path_is_the_resolved_directory),
    T(test_refuses_bad_file_names_and_a_file_as_root),
    T(test_refuses_a_group_writable_root),
};

FX_TEST_MAIN(tests)
