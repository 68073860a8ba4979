/* Unit tests for fsutil: mkdir -p and the atomic file write, in a temporary
 * directory. */
/* fx-test-libs: fx_base */
#include "base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fx_test.h"

static void tmpdir(char *d, size_t cap)
{
    snprintf(d, cap, "/tmp/fxfsXXXXXX");
    assert_non_null(mkdtemp(d));
}

static void read_text(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void test_mkdirs_creates_every_missing_level_with_the_mode(void **state)
{
    char d[64], p[160], failed[160] = "";
    tmpdir(d, sizeof(d));
    snprintf(p, sizeof(p), "%s/a//b/c", d);
    mode_t old = umask(0);
    assert_int_equal(fx_mkdirs(p, 0700, failed, sizeof(failed)), 0);
    umask(old);
    assert_int_equal(mode_of(p), 0700);
    snprintf(p, sizeof(p), "%s/a", d);
    assert_int_equal(mode_of(p), 0700);
    snprintf(p, sizeof(p), "%s/a/b/c", d);
    assert_int_equal(fx_mkdirs(p, 0700, NULL, 0), 0); /* all there: fine */
    /* A file where a level should be: refused, naming that level. */
    snprintf(p, sizeof(p), "%s/f", d);
    assert_int_equal(fx_file_write_atomic(p, "x", 1, 0600, 0), 0);
    snprintf(p, sizeof(p), "%s/f/g", d);
    assert_int_equal(fx_mkdirs(p, 0700, failed, sizeof(failed)), -ENOTDIR);
    snprintf(p, sizeof(p), "%s/f", d);
    assert_string_equal(failed, p);
    assert_int_equal(fx_mkdirs(p, 0700, failed, sizeof(failed)), -ENOTDIR);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
    assert_int_equal(system(cmd), 0);
}

static void test_atomic_write_replaces_with_the_exact_mode_and_leaves_no_temporary(void **state)
{
    char d[64], p[160], tmp[170], got[64];
    tmpdir(d, sizeof(d));
    snprintf(p, sizeof(p), "%s/key", d);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    /* A stale temporary from a crash is removed first. */
    assert_int_equal(fx_file_write_atomic(tmp, "stale", 5, 0644, 0), 0);
    mode_t old = umask(077);
    assert_int_equal(fx_file_write_atomic(p, "one", 3, 0644, FX_FILE_EXACT_MODE), 0);
    assert_int_equal(mode_of(p), 0644); /* the umask did not narrow it */
    assert_int_equal(fx_file_write_atomic(p, "two!", 4, 0600, 0), 0);
    umask(old);
    read_text(p, got, sizeof(got));
    assert_string_equal(got, "two!");
    assert_int_equal(access(tmp, F_OK), -1);
    /* No replace: the existing file stays as it was. */
    assert_int_equal(fx_file_write_atomic(p, "three", 5, 0600, FX_FILE_NO_REPLACE), -EEXIST);
    read_text(p, got, sizeof(got));
    assert_string_equal(got, "two!");
    assert_int_equal(access(tmp, F_OK), -1);
    snprintf(p, sizeof(p), "%s/new", d);
    assert_int_equal(fx_file_write_atomic(p, "n", 1, 0600, FX_FILE_NO_REPLACE), 0);
    read_text(p, got, sizeof(got));
    assert_string_equal(got, "n");
    /* A directory in the way: the rename fails, nothing is left behind. */
    snprintf(p, sizeof(p), "%s/dir", d);
    assert_int_equal(fx_mkdirs(p, 0700, NULL, 0), 0);
    char inner[200];
    snprintf(inner, sizeof(inner), "%s/x", p);
    assert_int_equal(fx_file_write_atomic(inner, "x", 1, 0600, 0), 0);
    assert_true(fx_file_write_atomic(p, "x", 1, 0600, 0) < 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    assert_int_equal(access(tmp, F_OK), -1);
    /* A link planted under the temporary's name is removed, never written
     * through. */
    char target[170];
    snprintf(target, sizeof(target), "%s/target", d);
    snprintf(p, sizeof(p), "%s/cfg", d);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    assert_int_equal(symlink(target, tmp), 0);
    assert_int_equal(fx_file_write_atomic(p, "c", 1, 0600, 0), 0);
    assert_int_equal(access(target, F_OK), -1);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
    assert_int_equal(system(cmd), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mkdirs_creates_every_missing_level_with_the_mode),
    cmocka_unit_test(test_atomic_write_replaces_with_the_exact_mode_and_leaves_no_temporary),
};
FX_TEST_MAIN(tests)
