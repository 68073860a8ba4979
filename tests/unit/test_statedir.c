/* Unit tests for the state directory check (src/server/statedir.c): missing
 * levels are created 0700, an existing directory must belong to this user
 * and be writable by nobody else, a file is not a directory, and one
 * broker at a time holds it (the lock names the holder's PID); and the --dev
 * admin token file (generated 0600 once, then read and checked). Each case
 * works in its own mkdtemp directory and removes it. */
/* fx-test-libs: fx_server fx_base */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
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

/* ---- the --dev admin token ------------------------------------------------------ */

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_admin_token_generated_once_private_then_kept(void **state)
{
    (void)state;
    char dir[64], file[96], why[512] = "", tok[256], again[256];
    tmp_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/admin-token", dir);
    bool created = false;
    mode_t old = umask(0); /* the file's mode must not follow the umask */
    int rv = fx_state_dir_admin_token(dir, tok, sizeof(tok), &created, why, sizeof(why));
    umask(old);
    assert_int_equal(rv, 0);
    assert_true(created);
    assert_int_equal(mode_of(file), 0600);
    assert_int_equal(strlen(tok), FX_STATE_DIR_ADMIN_TOKEN_LEN);
    assert_int_equal(strspn(tok, "0123456789abcdef"), FX_STATE_DIR_ADMIN_TOKEN_LEN);
    assert_int_equal(
        fx_state_dir_admin_token(dir, again, sizeof(again), &created, why, sizeof(why)), 0);
    assert_false(created);
    assert_string_equal(again, tok);
    /* Another directory, another token. */
    char dir2[64];
    tmp_dir(dir2, sizeof(dir2));
    assert_int_equal(fx_state_dir_admin_token(dir2, again, sizeof(again), NULL, why, sizeof(why)),
                     0);
    assert_string_not_equal(again, tok);
    snprintf(file, sizeof(file), "%s/admin-token", dir2);
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir2), 0);
    snprintf(file, sizeof(file), "%s/admin-token", dir);
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_admin_token_file_written_by_hand_is_read_without_its_newline(void **state)
{
    (void)state;
    char dir[64], file[96], why[512] = "", tok[256];
    tmp_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/admin-token", dir);
    write_file(file, "My.Token_~+/=-1\n", 0600);
    assert_int_equal(fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)), 0);
    assert_string_equal(tok, "My.Token_~+/=-1");
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_admin_token_file_open_to_others_or_malformed_refused(void **state)
{
    (void)state;
    char dir[64], file[96], why[512], tok[16];
    tmp_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/admin-token", dir);
    write_file(file, "s3cret\n", 0640);
    assert_int_equal(fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)),
                     FX_ECONFIG);
    assert_contains(why, "is open to group or others (mode 0640): run chmod 600");
    const char *bad[] = {"", "\n", "two words\n", "s3cret\n\n", "a\tb", "0123456789abcdef\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(file, bad[i], 0600);
        why[0] = '\0';
        if (fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)) != FX_ECONFIG)
            fail_msg("accepted %zu: '%s'", i, bad[i]);
        assert_contains(why, "does not hold one token (1 to 15 of the characters");
    }
    /* A NUL inside is not a token character either. */
    int fd = open(file, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "ab\0cd\n", 6), 6);
    close(fd);
    assert_int_equal(fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)),
                     FX_ECONFIG);
    assert_int_equal(unlink(file), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_admin_token_symlink_refused_and_not_followed(void **state)
{
    (void)state;
    char dir[64], file[96], target[96], why[512] = "", tok[256];
    tmp_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/admin-token", dir);
    snprintf(target, sizeof(target), "%s/elsewhere", dir);
    /* A dangling link: following it would create the target. */
    assert_int_equal(symlink(target, file), 0);
    assert_int_equal(fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)),
                     FX_ECONFIG);
    assert_contains(why, "is a symbolic link");
    assert_int_equal(access(target, F_OK), -1);
    write_file(target, "s3cret\n", 0600);
    assert_int_equal(fx_state_dir_admin_token(dir, tok, sizeof(tok), NULL, why, sizeof(why)),
                     FX_ECONFIG);
    assert_int_equal(unlink(file), 0);
    assert_int_equal(unlink(target), 0);
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
    cmocka_unit_test(test_admin_token_generated_once_private_then_kept),
    cmocka_unit_test(test_admin_token_file_written_by_hand_is_read_without_its_newline),
    cmocka_unit_test(test_admin_token_file_open_to_others_or_malformed_refused),
    cmocka_unit_test(test_admin_token_symlink_refused_and_not_followed),
};

FX_TEST_MAIN(tests)
