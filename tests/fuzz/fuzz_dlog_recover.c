/* libFuzzer target: recovery of a durable log from arbitrary segment and
 * index files (segment versions 2 and 3, producer marks in the records)
 * and producer files. The input is an options byte, then files: a kind byte
 * (low three bits the segment id, 0x08 for its .index instead of its .log;
 * 0x10 the `producers` snapshot, 0x20 `producers.retired` instead), a
 * big-endian u16 length and that many bytes (cut short at the input's end).
 * They are written into an fx_memio directory and the log opened without
 * repair, then with repair. Checked: opening either succeeds or refuses with
 * FX_ESTORAGE_CORRUPT naming a file and a position (repair refuses only a
 * damaged first header); an open log reads back as contiguous offsets (with
 * repair and verify_all_on_open every record reads); appends continue at
 * the tail and read back, and so does a marked batch, which the producer
 * table then answers as a duplicate, also after the second open (rebuilt
 * from the marks); a second open of what recovery left cuts nothing
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
#include "storage/format.h"
#include "storage/memio.h"
#include "storage/producers.h"

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
        if (kind & 0x10u)
            snprintf(path, sizeof(path), DIR_ "/" FX_PRODUCERS_SNAPSHOT_NAME);
        else if (kind & 0x20u)
            snprintf(path, sizeof(path), DIR_ "/" FX_PRODUCERS_RETIRED_NAME);
        else
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

/* A producer (one the input cannot know) whose batch this target appends. */
#define FUZZ_PRODUCER 0xF0220000F0220000ull

/* Appends a marked batch of two records for FUZZ_PRODUCER at the sequence
 * the table expects (0 when unknown) and checks the table's answer. Returns
 * the sequence, or UINT64_MAX when nothing was appended. */
static uint64_t append_marked(fx_dlog *log)
{
    fx_producers *t = fx_dlog_producers(log);
    fx_prod_batch b;
    uint64_t seq = fx_producers_last(t, FUZZ_PRODUCER, &b) ? b.sequence + 1 : 0;
    static const char r0[] = "mark", r1[] = "ed";
    fx_dlog_iov iov[2] = {{.data = r0, .len = sizeof(r0)}, {.data = r1, .len = sizeof(r1)}};
    uint64_t d = fx_producer_digest_step(fx_producer_digest_step(0, r0, sizeof(r0)), r1, sizeof(r1));
    fx_prod_answer a;
    fx_producers_lookup(t, FUZZ_PRODUCER, seq, d, 1, &a);
    FUZZ_CHECK(a.verdict == FX_PROD_NEXT);
    fx_dlog_mark m = {
        .producer_id = FUZZ_PRODUCER, .sequence = seq, .count = 2, .held = 0, .digest = d};
    uint64_t first = 0, next = fx_dlog_next_offset(log);
    int rv = fx_dlog_append_marked(log, iov, 2, 1, &m, &first);
    if (rv == -ENOMEM)
        return UINT64_MAX;
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(first == next);
    fx_producers_lookup(t, FUZZ_PRODUCER, seq, d, 1, &a);
    FUZZ_CHECK(a.verdict == FX_PROD_DUPLICATE && a.first == first && a.count == 2);
    return seq;
}

/* A refusal names the file and the position; with repair only a damaged
 * header of the first segment is refused (the log's start is unknown). */
static void check_refusal(int rv, const fx_dlog_recovery *rep, bool repair)
{
    if (rv == -ENOMEM)
        return;
    if (rv != FX_ESTORAGE_CORRUPT || strstr(rep->message, "file=") == NULL)
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
    uint64_t seq = append_marked(log);
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
    if (seq != UINT64_MAX) {
        fx_prod_answer a;
        fx_producers_lookup(fx_dlog_producers(log), FUZZ_PRODUCER, seq, 0, 1, &a);
        FUZZ_CHECK(a.verdict == FX_PROD_REUSED && a.count == 2);
    }
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
