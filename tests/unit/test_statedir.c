/* Unit tests for the state directory check (src/server/statedir.c): missing
 * levels are created 0700, an existing directory must belong to this user
 * and be writable by nobody else, a file is not a directory, and one
 * broker at a time holds it (the lock names the holder's PID). Each case
 * works in its own mkdtemp directory and removes it. */
/* fx-test-libs: fx_server fx_base */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fx_test.h"

#include "felix/error.h"
#include "server/statedir.h"

static void tmp_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/fx_statedir_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL)
        fail_msg("expected \"%s\" in \"%s\"", needle, hay);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void test_missing_levels_created_private(void **state)
{
    (void)state;
    char root[64], a[96], b[128], why[512] = "";
    tmp_dir(root, sizeof(root));
    snprintf(a, sizeof(a), "%s/a", root);
    snprintf(b, sizeof(b), "%s/a/b", root);
    mode_t old = umask(0);
    int rv = fx_state_dir_prepare(b, why, sizeof(why));
    umask(old);
    assert_int_equal(rv, 0);
    assert_int_equal(mode_of(a), 0700);
    assert_int_equal(mode_of(b), 0700);
    /* Running again on what it made is fine. */
    assert_int_equal(fx_state_dir_prepare(b, why, sizeof(why)), 0);
    assert_int_equal(rmdir(b), 0);
    assert_int_equal(rmdir(a), 0);
    assert_int_equal(rmdir(root), 0);
}

static void test_existing_private_or_readable_dir_accepted(void **state)
{
    (void)state;
    char dir[64], why[512] = "";
    tmp_dir(dir, sizeof(dir));
    assert_int_equal(fx_state_dir_prepare(dir, why, sizeof(why)), 0);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(fx_state_dir_prepare(dir, why, sizeof(why)), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_group_or_world_writable_dir_refused(void **state)
{
    (void)state;
    char dir[64], why[512] = "";
    tmp_dir(dir, sizeof(dir));
    assert_int_equal(chmod(dir, 0770), 0);
    assert_int_equal(fx_state_dir_prepare(dir, why, sizeof(why)), FX_ECONFIG);
    assert_contains(why, dir);
    assert_contains(why, "writable by group or others (mode 0770)");
    assert_contains(why, "chmod go-w");
    assert_int_equal(chmod(dir, 0703), 0);
    why[0] = '\0';
    assert_int_equal(fx_state_dir_prepare(dir, why, sizeof(why)), FX_ECONFIG);
    assert_contains(why, "(mode 0703)");
    /* Refused, not repaired: the mode is the operator's to fix. */
    assert_int_equal(mode_of(dir), 0703);
    assert_int_equal(rmdir(dir), 0);
}

static void test_foreign_owned_dir_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        fx_test_skip("giving a directory to another user needs root");
    char dir[64], why[512] = "";
    tmp_dir(dir, sizeof(dir));
    assert_int_equal(chown(dir, 65534, 65534), 0);
    assert_int_equal(fx_state_dir_prepare(dir, why, sizeof(why)), FX_ECONFIG);
    assert_contains(why, dir);
    assert_contains(why, "owned by uid 65534, not by this user (uid 0)");
    assert_int_equal(rmdir(dir), 0);
}

static void test_file_in_place_of_dir_refused(void **state)
{
    (void)state;
    char dir[64], file[96], why[512] = "";
    tmp_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/f", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(fx_state_dir_prepare(file, why, sizeof(why)), FX_ECONFIG);
    assert_contains(why, "is not a directory");
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_uncreatable_dir_reports_errno(void **state)
{
    (void)state;
    char why[512] = "";
    int rv = fx_state_dir_prepare("/proc/self/fx-no-such/state", why, sizeof(why));
    assert_true(rv < 0 && rv > -4096);
    assert_contains(why, "cannot create state_dir '/proc/self/fx-no-such/state'");
}

static void test_second_open_refused_naming_the_holder(void **state)
{
    (void)state;
    char dir[64], why[1024] = "", want[64], p[128];
    tmp_dir(dir, sizeof(dir));
    fx_rootlock *a = NULL, *b = NULL, *d = NULL;
    assert_int_equal(fx_state_dir_open(dir, &a, why, sizeof(why)), 0);
    assert_int_equal(fx_state_dir_open(dir, &b, why, sizeof(why)), -EBUSY);
    snprintf(want, sizeof(want), "pid %ld", (long)getpid());
    assert_contains(why, want);
    assert_contains(why, "state_dir '");
    assert_contains(why, dir);
    /* The durable storage root may be the same directory: its own lock file. */
    assert_int_equal(
        fx_rootlock_take(&d, dir, FX_ROOTLOCK_FILE, "durable_storage_dir", why, sizeof(why)), 0);
    fx_rootlock_free(d);
    fx_rootlock_free(a); /* released: the next broker opens it */
    assert_int_equal(fx_state_dir_open(dir, &b, why, sizeof(why)), 0);
    fx_rootlock_free(b);
    snprintf(p, sizeof(p), "%s/%s", dir, FX_STATE_DIR_LOCK);
    assert_int_equal(mode_of(p), 0600);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof(p), "%s/%s", dir, FX_ROOTLOCK_FILE);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(rmdir(dir), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_missing_levels_created_private),
    cmocka_unit_test(test_existing_private_or_readable_dir_accepted),
    cmocka_unit_test(test_group_or_world_writable_dir_refused),
    cmocka_unit_test(test_foreign_owned_dir_refused),
    cmocka_unit_test(test_file_in_place_of_dir_refused),
    cmocka_unit_test(test_uncreatable_dir_reports_errno),
    cmocka_unit_test(test_second_open_refused_naming_the_holder),
};

FX_TEST_MAIN(tests)
