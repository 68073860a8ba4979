/* Shared by the durable-stream integration tests (test_durable*.c): the
 * tenant they publish as and reading one event with its offset and payload
 * checked, and reading a stopped broker's log through its catalogue
 * (fix_rm_dir, in fixture.h, removes a durable root). Include after
 * admin_fixture.h (or fixture.h). */
#ifndef FX_TESTS_DURABLE_FIXTURE_H
#define FX_TESTS_DURABLE_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "storage/catalog.h"
#include "storage/dlog.h"

#define T "t1"

/* Takes the next event of |s| and checks its offset and payload. */
static inline void fix_expect_event(fx_subscription *s, uint64_t offset, const char *msg)
{
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, HANG_MS), 0);
    assert_true(ev.has_offset);
    if (ev.offset != offset || ev.len != strlen(msg) || memcmp(ev.payload, msg, ev.len) != 0)
        fail_msg("event at %llu '%.*s', want %llu '%s'", (unsigned long long)ev.offset, (int)ev.len,
                 (const char *)ev.payload, (unsigned long long)offset, msg);
}

/* Reads every record of t1/default/|stream|'s log under |root| into
 * |out| ("payload\n" each) and returns the log's next offset. */
static inline uint64_t fix_read_log(const char *root, const char *stream, char *out, size_t cap)
{
    fx_catalog *cat;
    char err[512], dir[1024];
    if (fx_catalog_open(&cat, NULL, root, err, sizeof(err)) != 0)
        fail_msg("the catalogue under %s: %s", root, err);
    const fx_catalog_entry *ce = fx_catalog_find(cat, T, NS, stream);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 1 << 20;
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
            assert_int_equal(pg.recs[i].offset, from + i);
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

/* The number of entries (live or being deleted) in the catalogue under
 * |root| (its broker stopped). */
static inline size_t fix_catalog_entries(const char *root)
{
    fx_catalog *cat;
    char err[512];
    if (fx_catalog_open(&cat, NULL, root, err, sizeof(err)) != 0)
        fail_msg("the catalogue under %s: %s", root, err);
    size_t n = fx_catalog_count(cat);
    fx_catalog_free(cat);
    return n;
}

#endif
