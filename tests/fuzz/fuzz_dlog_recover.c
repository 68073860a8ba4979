/* libFuzzer target: recovery of a durable log from arbitrary segment and
 * index files. The input is an options byte, then files: a kind byte (low
 * three bits the segment id, 0x08 for its .index instead of its .log), a
 * big-endian u16 length and that many bytes (cut short at the input's end).
 * They are written into an fx_memio directory and the log opened without
 * repair, then with repair. Checked: opening either succeeds or refuses with
 * FX_ESTORAGE_CORRUPT naming a file and a position (repair refuses only a
 * damaged first header); an open log reads back as contiguous offsets (with
 * repair and verify_all_on_open every record reads); appends continue at
 * the tail and read back; a second open of what recovery left cuts nothing
 * more (recovery is idempotent). tests/fuzz/seeds.c writes the seeds.
 * Single-threaded. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "felix/error.h"
#include "storage/dlog.h"
#include "storage/memio.h"

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define DIR_ "/s"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the files of the input into DIR_, durably. Returns false when the
 * memio could not hold them (out of memory). */
static bool lay_files(fx_memio *m, const uint8_t *p, size_t n)
{
    fx_sio *io = fx_memio_sio(m);
    if (fx_sio_mkdirs(io, DIR_) != 0)
        return false;
    while (n >= 3) {
        uint8_t kind = p[0];
        size_t len = (size_t)p[1] << 8 | p[2];
        p += 3, n -= 3;
        len = len < n ? len : n;
        char path[64];
        snprintf(path, sizeof(path), DIR_ "/%020u.%s", kind & 7u, kind & 8u ? "index" : "log");
        (void)io->ops->unlink(io, path); /* a later file of the same name replaces it */
        int fd;
        if (io->ops->open(io, path, FX_SIO_CREATE, &fd) != 0)
            return false;
        int rv = len > 0 ? io->ops->pwrite(io, fd, p, len, 0) : 0;
        if (rv == 0)
            rv = io->ops->fdatasync(io, fd);
        io->ops->close(io, fd);
        if (rv != 0)
            return false;
        p += len, n -= len;
    }
    return io->ops->sync_dir(io, DIR_) == 0;
}

/* Reads the whole log; returns 0 or the first error. Offsets must follow
 * each other from the first one. */
static int read_all(fx_dlog *log)
{
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    uint64_t at = fx_dlog_first_offset(log), end = fx_dlog_next_offset(log);
    int rv = 0;
    while (rv == 0 && at < end) {
        rv = fx_dlog_read(log, at, 1 << 16, 64, &pg);
        if (rv != 0)
            break;
        FUZZ_CHECK(pg.n > 0);
        for (size_t i = 0; i < pg.n; i++)
            FUZZ_CHECK(pg.recs[i].offset == at + i);
        at += pg.n;
        FUZZ_CHECK(pg.next == at);
    }
    fx_dlog_page_deinit(&pg);
    return rv;
}

/* Appends one record at the tail and reads it back. */
static void append_one(fx_dlog *log)
{
    static const char rec[] = "fuzz";
    uint64_t next = fx_dlog_next_offset(log), first = 0;
    fx_dlog_iov iov = {.data = rec, .len = sizeof(rec)};
    int rv = fx_dlog_append(log, &iov, 1, 1, &first);
    if (rv == -ENOMEM)
        return;
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(first == next);
    FUZZ_CHECK(fx_dlog_sync(log, NULL) == 0);
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    FUZZ_CHECK(fx_dlog_read(log, next, 1 << 16, 1, &pg) == 0);
    FUZZ_CHECK(pg.n == 1 && pg.recs[0].offset == next && pg.recs[0].len == sizeof(rec));
    FUZZ_CHECK(memcmp(pg.recs[0].data, rec, sizeof(rec)) == 0);
    fx_dlog_page_deinit(&pg);
}

/* A refusal names the file and the position; with repair only a damaged
 * header of the first segment is refused (the log's start is unknown). */
static void check_refusal(int rv, const fx_dlog_recovery *rep, bool repair)
{
    if (rv == -ENOMEM)
        return;
    if (rv != FX_ESTORAGE_CORRUPT)
        fprintf(stderr, "open: %d %s\n", rv, rep->message);
    FUZZ_CHECK(rv == FX_ESTORAGE_CORRUPT);
    FUZZ_CHECK(strstr(rep->message, "file=") != NULL);
    FUZZ_CHECK(strstr(rep->message, repair ? "position=0)" : "position=") != NULL);
}

/* Opens with |cfg|; on success reads, appends, closes with a flush and
 * opens again, which must find nothing to cut. */
static void open_and_use(const fx_dlog_config *cfg)
{
    fx_dlog *log = NULL;
    fx_dlog_recovery rep;
    int rv = fx_dlog_open(&log, DIR_, cfg, 1, &rep);
    if (rv != 0) {
        check_refusal(rv, &rep, cfg->repair);
        return;
    }
    int rrv = read_all(log);
    FUZZ_CHECK(rrv == 0 || rrv == -ENOMEM || (!cfg->repair && rrv == FX_ESTORAGE_CORRUPT));
    append_one(log);
    uint64_t next = fx_dlog_next_offset(log);
    FUZZ_CHECK(fx_dlog_close(log, true) == 0);
    rv = fx_dlog_open(&log, DIR_, cfg, 2, &rep);
    if (rv == -ENOMEM)
        return;
    if (rv != 0)
        fprintf(stderr, "second open: %s\n", rep.message);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(rep.truncated_bytes == 0 && !rep.repaired);
    FUZZ_CHECK(fx_dlog_next_offset(log) == next);
    fx_dlog_close(log, false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t SPACING[4] = {64, 128, 512, 4096};
    static const uint64_t SEGMENT[4] = {256, 1024, 4096, 1 << 20};
    if (size < 1)
        return 0;
    fx_log_set_level(FX_LOG_ERROR);
    fx_memio *m;
    if (fx_memio_new(&m) != 0)
        return 0;
    if (!lay_files(m, data + 1, size - 1)) {
        fx_memio_free(m);
        return 0;
    }
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.io = fx_memio_sio(m);
    cfg.repair_checksum_tail = data[0] & 1;
    cfg.verify_all_on_open = data[0] & 2;
    cfg.index_spacing_bytes = SPACING[data[0] >> 2 & 3];
    cfg.segment_bytes = SEGMENT[data[0] >> 4 & 3];
    fx_dlog_recovery rep;
    fx_dlog *log = NULL;
    int rv = fx_dlog_open(&log, DIR_, &cfg, 1, &rep);
    if (rv == 0)
        fx_dlog_close(log, false);
    else
        check_refusal(rv, &rep, false);
    open_and_use(&cfg);
    cfg.repair = true;
    cfg.verify_all_on_open = true;
    open_and_use(&cfg);
    fx_memio_free(m);
    return 0;
}
