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

/* A log with producer marks: 3 unmarked records (segment 0, v2), then
 * batch 0 of producer 42 (3 records), batch 1 (1 record) and an unmarked
 * record (offset 7, position 196) in segment 1 (v3), then the first record
 * of batch 2 (of 2) open at the tail. */
static void make_marked_log(tool_dir *t)
{
    make_log(t);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.preallocate = false;
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, t->dir, &c, 1, NULL), 0);
    fx_dlog_iov r[3] = {{"abc", 3}, {"def", 3}, {"ghi", 3}};
    assert_int_equal(fx_dlog_append(log, r, 3, 10, NULL), 0);
    fx_dlog_mark m = {.producer_id = 42, .sequence = 0, .count = 3};
    assert_int_equal(fx_dlog_append_marked(log, r, 3, 11, &m, NULL), 0);
    m = (fx_dlog_mark){.producer_id = 42, .sequence = 1, .count = 1};
    assert_int_equal(fx_dlog_append_marked(log, r, 1, 12, &m, NULL), 0);
    fx_dlog_iov x = {"xyz", 3};
    assert_int_equal(fx_dlog_append(log, &x, 1, 12, NULL), 0);
    m = (fx_dlog_mark){.producer_id = 42, .sequence = 2, .count = 2};
    assert_int_equal(fx_dlog_append_marked(log, r, 1, 13, &m, NULL), 0);
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

/* Rewrites the length word of the unmarked-size record at |pos| of |path|
 * (payload |body|, 3 bytes) to |word|, with matching checksums. */
static void set_len_word(const char *path, long pos, uint32_t word, const char *body)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint8_t b[28];
    assert_int_equal(fseek(f, pos, SEEK_SET), 0);
    assert_int_equal(fread(b, 1, 28, f), 28);
    fx_be32_put(b, word);
    fx_be32_put(b + 20, fx_logfmt_crc(0, b, 20));
    fx_be32_put(b + 24, fx_logfmt_rec_checksum(b, body, 3));
    assert_int_equal(fseek(f, pos, SEEK_SET), 0);
    assert_int_equal(fwrite(b, 1, 28, f), 28);
    fclose(f);
}

static void test_inspect_shows_producer_marks_and_verify_checks_them(void **state)
{
    tool_dir t;
    make_marked_log(&t);
    char out[16384], args[512], seg[256];
    snprintf(args, sizeof(args), "log inspect --payload %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "00000000000000000000.log: base_offset=0 created_us=1"));
    assert_non_null(strstr(out, "version=2"));
    assert_non_null(strstr(out, "00000000000000000001.log: base_offset=3"));
    assert_non_null(strstr(out, "version=3"));
    /* The opening record: 28 + 20 tag + 3; its payload read past the tag. */
    assert_non_null(strstr(out, "  offset=3 pos=32 ts_us=11 len=3 producer=42 sequence=0 "
                                "batch_len=3 payload=\"abc\""));
    assert_non_null(strstr(out, "  offset=4 pos=83 ts_us=11 len=3 batch_cont payload=\"def\""));
    assert_non_null(strstr(out, "producer=42 sequence=2 batch_len=2"));
    snprintf(args, sizeof(args), "log verify %s", t.dir);
    assert_int_equal(run(&t, args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "producer marks: 3 batches, 5 marked records, 1 batches partial "
                                "(the last one open at the tail"));
    /* A continuation with no batch open: the unmarked record at offset 7
     * rewritten with bit 30. */
    snprintf(seg, sizeof(seg), "%s/00000000000000000001.log", t.dir);
    set_len_word(seg, 196, 0x40000003u, "xyz");
    assert_int_equal(run(&t, args, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "producer mark continues no open batch (offset 7)"));
    assert_non_null(strstr(out, "position=196"));
    set_len_word(seg, 196, 3, "xyz");
    assert_int_equal(run(&t, args, out, sizeof(out)), 0);
    /* A mark in a v2 segment: offset 1 of segment 0. */
    snprintf(seg, sizeof(seg), "%s/00000000000000000000.log", t.dir);
    set_len_word(seg, 32 + 31, 0x40000003u, "def");
    assert_int_equal(run(&t, args, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "producer mark in a version 2 segment"));
    assert_non_null(strstr(out, "position=63"));
    drop_log(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_verify_passes_a_sound_log),
    cmocka_unit_test(test_verify_names_file_and_position_of_a_flipped_bit),
    cmocka_unit_test(test_verify_reports_a_torn_tail),
    cmocka_unit_test(test_inspect_prints_headers_and_records),
    cmocka_unit_test(test_inspect_shows_producer_marks_and_verify_checks_them),
};
FX_TEST_MAIN(tests)
