/* Shared by the durable-stream integration tests (test_durable*.c): the
 * tenant they publish as and reading one event with its offset and payload
 * checked (fix_rm_dir, in fixture.h, removes a durable root). Include after
 * admin_fixture.h (or fixture.h). */
#ifndef FX_TESTS_DURABLE_FIXTURE_H
#define FX_TESTS_DURABLE_FIXTURE_H

#include <stdio.h>
#include <string.h>

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

#endif
