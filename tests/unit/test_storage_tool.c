/* Tests of `felix log verify|inspect` on a log written by fx_dlog in a
 * temporary directory: a sound log verifies (exit 0), a flipped payload bit
 * or a torn tail exits 1 naming the file and byte position, inspect prints
 * the records, bad usage exits 2. Runs the felix binary of the build tree
 * (FX_BINARY_DIR, set by CTest). */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fx_test.h"

typedef struct tool_dir {
    char tmp[64];
    char dir[128];
    char felix[512];
} tool_dir;

/* Writes 300 records of 100 bytes in 4 KiB segments. */
static void make_log(tool_dir *t)
{
    const char *bin = getenv("FX_BINARY_DIR");
    if (bin == NULL)
        fx_test_skip("FX_BINARY_DIR is not set (run through ctest)");
    snprintf(t->felix, sizeof(t->felix), "%s/felix", bin);
    if (access(t->felix, X_OK) != 0)
        fx_test_skip("the felix binary is not built");
    snprintf(t->tmp, sizeof(t->tmp), "/tmp/fx-logtool-XXXXXX");
    assert_non_null(mkdtemp(t->tmp));
    snprintf(t->dir, sizeof(t->dir), "%s/t1_default_orders_0-0000", t->tmp);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 4096;
    c.index_spacing_bytes = 512;
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, t->dir, &c, 1, NULL), 0);
    char p[100];
    memset(p, 'x', sizeof(p));
    for (int i = 0; i < 300; i++) {
        fx_dlog_iov r = {.data = p, .len = sizeof(p)};
        assert_int_equal(fx_dlog_append(log, &r, 1, 1000 + (uint64_t)i, NULL), 0);
    }
    assert_int_equal(fx_dlog_close(log, true), 0);
}

static void drop_log(tool_dir *t)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->tmp);
    assert_int_equal(system(cmd), 0);
}

/* Runs felix with |args|; returns its exit status and its output in |out|. */
static int run(const tool_dir *t, const char *args, char *out, size_t cap)
{
    char cmd[2048];
    int len = snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", t->felix, args);
    assert_true(len > 0 && (size_t)len < sizeof(cmd));
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void flip(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    fputc(c ^ 0x20, f);
    fclose(f);
}

static void test_verify_passes_a_sound_log(void **state)
{
    tool_dir t;
    make_log(&t);
    char out[4096], args[256];
    snprintf(args, sizeof(args), "log verify %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "records (offsets 0..300)"));
    drop_log(&t);
}

static void test_verify_names_file_and_position_of_a_flipped_bit(void **state)
{
    tool_dir t;
    make_log(&t);
    char seg[256], out[4096], args[512], want[600];
    snprintf(seg, sizeof(seg), "%s/00000000000000000001.log", t.dir);
    /* Second record of segment 1: header 32 + one record of 128 bytes, then 28 + 5. */
    flip(seg, 32 + 128 + 28 + 5);
    snprintf(args, sizeof(args), "log verify %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want), "record checksum mismatch (file=%s, position=160)", seg);
    if (strstr(out, want) == NULL)
        fprintf(stderr, "output: %s\n", out);
    assert_non_null(strstr(out, want));
    /* The same file alone. */
    snprintf(args, sizeof(args), "log verify %s", seg);
    assert_int_equal(run(&t, args, out, sizeof(out)), 1);
    drop_log(&t);
}

static void test_verify_reports_a_torn_tail(void **state)
{
    tool_dir t;
    make_log(&t);
    char out[4096], args[512], last[256];
    /* 300 records of 128 bytes, 31 per 4 KiB segment: segment 9 is the newest. */
    snprintf(last, sizeof(last), "%s/00000000000000000009.log", t.dir);
    assert_int_equal(truncate(last, 32 + 128 + 50), 0);
    snprintf(args, sizeof(args), "log verify %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "truncated"));
    assert_non_null(strstr(out, "position=160"));
    assert_non_null(strstr(out, "torn tail"));
    drop_log(&t);
}

static void test_inspect_prints_headers_and_records(void **state)
{
    tool_dir t;
    make_log(&t);
    char out[16384], args[256];
    snprintf(args, sizeof(args), "log inspect --limit 2 --payload %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "00000000000000000000.log: base_offset=0 created_us=1"));
    assert_non_null(strstr(out, "  offset=0 pos=32 ts_us=1000 len=100 payload=\"xxxx"));
    assert_non_null(strstr(out, "  offset=1 pos=160 ts_us=1001 len=100"));
    assert_non_null(strstr(out, "more records"));
    assert_int_equal(run(&t, "log", out, sizeof(out)), 2);
    assert_int_equal(run(&t, "log frobnicate /tmp", out, sizeof(out)), 2);
    assert_int_equal(run(&t, "log verify /nonexistent-dir-for-felix", out, sizeof(out)), 1);
    drop_log(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_verify_passes_a_sound_log),
    cmocka_unit_test(test_verify_names_file_and_position_of_a_flipped_bit),
    cmocka_unit_test(test_verify_reports_a_torn_tail),
    cmocka_unit_test(test_inspect_prints_headers_and_records),
};
FX_TEST_MAIN(tests)
