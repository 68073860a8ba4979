/* Unit tests for the segment-file helpers shared by a log's recovery and the
 * replay readers (dlog.h): fx_dlog_list_segments (segment ids in numeric
 * order, other names ignored) and fx_dlog_index_seek (the greatest sparse
 * index entry at or below an offset; the first record when the index is
 * missing, foreign or damaged). On the in-memory I/O layer. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

#define DIR_ "/d"
#define IDX0 DIR_ "/00000000000000000000.index"

static void put_file(fx_sio *io, const char *path, const void *data, size_t len)
{
    int fd;
    int rv = io->ops->unlink(io, path);
    assert_true(rv == 0 || rv == -ENOENT);
    assert_int_equal(io->ops->open(io, path, FX_SIO_CREATE, &fd), 0);
    if (len > 0)
        assert_int_equal(io->ops->pwrite(io, fd, data, len, 0), 0);
    io->ops->close(io, fd);
}

static void test_list_segments_sorts_ids_and_ignores_other_names(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, DIR_), 0);
    const char *names[] = {"00000000000000000010.log",
                           "00000000000000000002.log",
                           "00000000000000000002.index",
                           "00000000000000000000.log",
                           "notes.log",
                           "catalog.json",
                           "7.log.tmp"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[64];
        snprintf(path, sizeof(path), DIR_ "/%s", names[i]);
        put_file(io, path, "x", 1);
    }
    uint64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(fx_dlog_list_segments(io, DIR_, &ids, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 10);
    free(ids);
    assert_int_equal(fx_dlog_list_segments(io, "/missing", &ids, &n), -ENOENT);
    fx_memio_free(m);
}

/* A log with 200 records of 16-byte payloads (44 bytes each) in one segment
 * whose index has an entry every |spacing| bytes. */
static fx_dlog *log_of(fx_memio *m, uint64_t spacing)
{
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.io = fx_memio_sio(m);
    c.index_spacing_bytes = spacing;
    c.segment_bytes = 1 << 20;
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, DIR_, &c, 1, NULL), 0);
    char p[16];
    memset(p, 'a', sizeof(p));
    for (int i = 0; i < 200; i++) {
        fx_dlog_iov iov = {.data = p, .len = sizeof(p)};
        assert_int_equal(fx_dlog_append(log, &iov, 1, 10, NULL), 0);
    }
    return log;
}

#define REC 44u
#define SEG_SIZE (FX_SEG_HEADER_LEN + 200u * REC)

static void test_index_seek_finds_the_nearest_entry_below_the_offset(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_dlog *log = log_of(m, 440); /* an entry every 10 records */
    fx_sio *io = fx_memio_sio(m);
    uint64_t want[][2] = {{0, 0}, {9, 0}, {10, 10}, {57, 50}, {199, 190}, {5000, 190}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        fx_dlog_pos p = fx_dlog_index_seek(io, IDX0, 0, SEG_SIZE, want[i][0]);
        assert_int_equal(p.offset, want[i][1]);
        assert_int_equal(p.pos, FX_SEG_HEADER_LEN + want[i][1] * REC);
    }
    /* Below the segment's base: its first record. */
    fx_dlog_pos p = fx_dlog_index_seek(io, IDX0, 100, SEG_SIZE, 50);
    assert_int_equal(p.offset, 100);
    assert_int_equal(p.pos, FX_SEG_HEADER_LEN);
    /* Entries past the segment's known bytes are not used. */
    p = fx_dlog_index_seek(io, IDX0, 0, FX_SEG_HEADER_LEN + 55 * REC, 199);
    assert_int_equal(p.offset, 50);
    fx_dlog_close(log, false);
    fx_memio_free(m);
}

static void test_index_seek_falls_back_to_the_first_record(void **state)
{
    (void)state;
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, DIR_), 0);
    /* Missing. */
    fx_dlog_pos p = fx_dlog_index_seek(io, IDX0, 7, SEG_SIZE, 100);
    assert_int_equal(p.offset, 7);
    assert_int_equal(p.pos, FX_SEG_HEADER_LEN);
    /* Garbage. */
    put_file(io, IDX0, "garbage garbage garbage garbage garbage", 40);
    p = fx_dlog_index_seek(io, IDX0, 7, SEG_SIZE, 100);
    assert_int_equal(p.offset, 7);
    assert_int_equal(p.pos, FX_SEG_HEADER_LEN);
    /* Another segment's index (base 0, not 7). */
    uint8_t buf[FX_IDX_HEADER_LEN + FX_IDX_ENTRY_LEN];
    fx_logfmt_idx_header_encode(buf, 0);
    fx_logfmt_idx_entry_encode(buf + FX_IDX_HEADER_LEN, 50, 500);
    put_file(io, IDX0, buf, sizeof(buf));
    p = fx_dlog_index_seek(io, IDX0, 7, SEG_SIZE, 100);
    assert_int_equal(p.offset, 7);
    /* Its own, with the entry: used. */
    fx_logfmt_idx_header_encode(buf, 7);
    fx_logfmt_idx_entry_encode(buf + FX_IDX_HEADER_LEN, 50, 500);
    put_file(io, IDX0, buf, sizeof(buf));
    p = fx_dlog_index_seek(io, IDX0, 7, SEG_SIZE, 100);
    assert_int_equal(p.offset, 50);
    assert_int_equal(p.pos, 500);
    /* A torn last entry is ignored. */
    put_file(io, IDX0, buf, sizeof(buf) - 3);
    p = fx_dlog_index_seek(io, IDX0, 7, SEG_SIZE, 100);
    assert_int_equal(p.offset, 7);
    fx_memio_free(m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_list_segments_sorts_ids_and_ignores_other_names),
    cmocka_unit_test(test_index_seek_finds_the_nearest_entry_below_the_offset),
    cmocka_unit_test(test_index_seek_falls_back_to_the_first_record),
};
FX_TEST_MAIN(tests)
