/* Durable streams for the unit tests on conn_fixture.h
 * (test_durable_ops.c, test_durable_admin.c): a broker whose streams are
 * durable by default, on the storage module's in-memory file system
 * (storage/memio.h), which outlives the broker so that a second broker can
 * recover from it or a test can read the logs it left. Header-only,
 * included by one test file each, after conn_fixture.h. */
#ifndef FX_TESTS_UNIT_DUR_FIXTURE_H
#define FX_TESTS_UNIT_DUR_FIXTURE_H

#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/memio.h"

#define DF_ROOT "/fxdur"

static fx_memio *df_mem;           /* the file system of the brokers being built */
static fx_fsync_mode df_fsync;     /* of the next broker */
static uint64_t df_fsync_interval; /* periodic; 0 = the default */

static inline void df_tune(fx_broker_opts *o, fq_config *q)
{
    (void)q;
    o->durable.dir = DF_ROOT;
    o->durable.io = fx_memio_sio(df_mem);
    o->durable.durable_default = true;
    o->durable.fsync_mode = df_fsync;
    if (df_fsync_interval != 0)
        o->durable.fsync_interval_ns = df_fsync_interval;
    o->durable.segment_bytes = 1 << 20;
    o->durable.preallocate = false;
}

/* A file system for the brokers of one test. */
static inline void df_mem_new(void)
{
    assert_int_equal(fx_memio_new(&df_mem), 0);
    df_fsync = FX_FSYNC_NONE;
    df_fsync_interval = 0;
}

static inline void df_mem_free(void)
{
    fx_memio_free(df_mem);
    df_mem = NULL;
}

/* A broker on the test's file system (df_mem_new first). */
static inline cf *df_new(void)
{
    return cf_new(df_tune);
}

/* Reads t1/default/|stream|'s log (no broker writing it) into |out|
 * ("payload\n" each); returns the log's next offset. */
static inline uint64_t df_read_log(const char *stream, char *out, size_t cap)
{
    fx_sio *io = fx_memio_sio(df_mem);
    fx_catalog *cat;
    char err[512], dir[1024];
    if (fx_catalog_open(&cat, io, DF_ROOT, err, sizeof(err)) != 0)
        fail_msg("the catalogue: %s", err);
    const fx_catalog_entry *ce = fx_catalog_find(cat, "t1", "default", stream);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 1 << 20;
    c.preallocate = false;
    c.io = io;
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, dir, &c, 1, NULL), 0);
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    size_t len = 0;
    out[0] = '\0';
    for (uint64_t from = fx_dlog_first_offset(log);;) {
        assert_int_equal(fx_dlog_read(log, from, 4096, 64, &pg), 0);
        if (pg.n == 0)
            break;
        for (size_t i = 0; i < pg.n; i++) {
            int n = snprintf(out + len, cap - len, "%.*s\n", (int)pg.recs[i].len,
                             (const char *)pg.recs[i].data);
            assert_true(n > 0 && (size_t)n < cap - len);
            len += (size_t)n;
        }
        from = pg.next;
    }
    fx_dlog_page_deinit(&pg);
    uint64_t next = fx_dlog_next_offset(log);
    fx_dlog_close(log, false);
    return next;
}

#endif
