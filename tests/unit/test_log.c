/* Unit tests for base/log: level filtering, line shape, level parsing,
 * truncation and per-cause rate limiting (with an explicit clock). */
/* fx-test-libs: fx_base */
#include "fx_test.h"

#include <inttypes.h>
#include <pthread.h>

#include "base/log.h"
#include "felix/error.h"

/* ---- capture sink ------------------------------------------------------- */

#define CAP_LINES 16

typedef struct capture {
    size_t n;
    char lines[CAP_LINES][FX_LOG_LINE_MAX + 1];
    size_t lens[CAP_LINES];
    fx_log_level levels[CAP_LINES];
} capture;

static void capture_line(fx_log_level level, const char *line, size_t len, void *user)
{
    capture *c = user;
    assert_true(len <= FX_LOG_LINE_MAX);
    assert_int_equal(line[len], '\0');
    if (c->n < CAP_LINES) {
        memcpy(c->lines[c->n], line, len + 1);
        c->lens[c->n] = len;
        c->levels[c->n] = level;
    }
    c->n++;
}

static capture cap;
static fx_log_sink cap_sink = {.on_line = capture_line, .user = &cap};

static void capture_start(void)
{
    memset(&cap, 0, sizeof(cap));
    fx_log_set_sink(&cap_sink);
}

static void capture_stop(void)
{
    fx_log_set_sink(NULL);
    fx_log_set_level(FX_LOG_INFO);
}

static int side_effects;

static int count_call(void)
{
    return ++side_effects;
}

/* Formats with fx_log_format() through a va_list. */
__attribute__((format(printf, 6, 7))) static size_t
fmt_line(char *buf, size_t cap_, int64_t ms, uint64_t sup, fx_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = fx_log_format(buf, cap_, level, "quic", ms, sup, fmt, ap);
    va_end(ap);
    return n;
}

/* ---- levels ------------------------------------------------------------- */

static void test_level_filter_suppresses_lower_levels(void **state)
{
    capture_start();
    fx_log_set_level(FX_LOG_WARN);
    side_effects = 0;
    FX_LOG_TRACE("test", "trace %d", count_call());
    FX_LOG_DEBUG("test", "debug %d", count_call());
    FX_LOG_INFO("test", "info %d", count_call());
    FX_LOG_WARN("test", "warn");
    FX_LOG_ERROR("test", "error");
    assert_int_equal(side_effects, 0); /* arguments of disabled lines not evaluated */
    assert_int_equal(cap.n, 2);
    assert_int_equal(cap.levels[0], FX_LOG_WARN);
    assert_int_equal(cap.levels[1], FX_LOG_ERROR);

    fx_log_set_level(FX_LOG_TRACE);
    FX_LOG_TRACE("test", "trace %d", count_call());
    assert_int_equal(side_effects, 1);
    assert_int_equal(cap.n, 3);
    assert_non_null(strstr(cap.lines[2], " TRACE test trace 1\n"));
    capture_stop();
}

static void test_level_parse_rejects_unknown(void **state)
{
    fx_log_level l = FX_LOG_ERROR;
    assert_int_equal(fx_log_level_parse("info", &l), 0);
    assert_int_equal(l, FX_LOG_INFO);
    assert_int_equal(fx_log_level_parse("TRACE", &l), 0);
    assert_int_equal(l, FX_LOG_TRACE);
    assert_int_equal(fx_log_level_parse("Warn", &l), 0);
    assert_int_equal(l, FX_LOG_WARN);
    assert_int_equal(fx_log_level_parse("error", &l), 0);
    assert_int_equal(l, FX_LOG_ERROR);
    assert_int_equal(fx_log_level_parse("debug", &l), 0);
    assert_int_equal(l, FX_LOG_DEBUG);

    const char *bad[] = {"", "inf", "infos", "verbose", "0", " info", "info "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        l = FX_LOG_DEBUG;
        assert_int_equal(fx_log_level_parse(bad[i], &l), FX_ECONFIG);
        assert_int_equal(l, FX_LOG_DEBUG); /* untouched on error */
    }
    assert_int_equal(fx_log_level_parse(NULL, &l), FX_ECONFIG);
}

/* ---- line shape --------------------------------------------------------- */

/* Checks "YYYY-MM-DDTHH:MM:SS.mmmZ " at the start of |s|. */
static void assert_timestamp(const char *s)
{
    const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd')
            assert_true(s[i] >= '0' && s[i] <= '9');
        else
            assert_int_equal(s[i], shape[i]);
    }
}

static void test_line_has_level_time_subsystem(void **state)
{
    char buf[FX_LOG_LINE_MAX];
    /* 2026-11-29T17:05:01.123Z */
    size_t n =
        fmt_line(buf, sizeof(buf), INT64_C(1795971901123), 0, FX_LOG_INFO,
                 "conn=%" PRIu64 " handshake completed peer=%s", (uint64_t)42, "127.0.0.1:5555");
    const char *want =
        "2026-11-29T17:05:01.123Z INFO  quic conn=42 handshake completed peer=127.0.0.1:5555\n";
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));

    fmt_line(buf, sizeof(buf), 7, 0, FX_LOG_ERROR, "x");
    assert_string_equal(buf, "1970-01-01T00:00:00.007Z ERROR quic x\n");

    /* The real path: current time, through the sink, one line per call. */
    capture_start();
    FX_LOG_WARN("broker", "stream=%s full", "s1");
    assert_int_equal(cap.n, 1);
    assert_timestamp(cap.lines[0]);
    assert_string_equal(cap.lines[0] + 25, "WARN  broker stream=s1 full\n");
    assert_int_equal(strncmp(cap.lines[0], "20", 2), 0); /* this century, UTC */
    capture_stop();
}

static void test_control_characters_cannot_split_a_line(void **state)
{
    char buf[FX_LOG_LINE_MAX];
    fmt_line(buf, sizeof(buf), 0, 0, FX_LOG_INFO, "name=%s", "a\nb\rc\x1b[0m");
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z INFO  quic name=a?b?c?[0m\n");
}

static void test_long_line_truncated_with_marker(void **state)
{
    char big[3 * FX_LOG_LINE_MAX];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    capture_start();
    FX_LOG_ERROR("test", "v=%s", big);
    assert_int_equal(cap.n, 1);
    size_t len = cap.lens[0];
    const char *line = cap.lines[0];
    const char *tail = FX_LOG_TRUNC_MARKER "\n";
    assert_int_equal(len, FX_LOG_LINE_MAX - 1);
    assert_string_equal(line + len - strlen(tail), tail);
    assert_non_null(strstr(line, " ERROR test v=xxxx"));
    capture_stop();

    /* The suppressed count survives truncation; a line that fits has no marker. */
    char buf[FX_LOG_FORMAT_MIN];
    size_t n = fmt_line(buf, sizeof(buf), 0, 1234, FX_LOG_WARN, "%s", big);
    assert_true(n < sizeof(buf));
    assert_non_null(strstr(buf, FX_LOG_TRUNC_MARKER " (1234 more since last report)\n"));
    n = fmt_line(buf, sizeof(buf), 0, 0, FX_LOG_WARN, "short");
    assert_null(strstr(buf, FX_LOG_TRUNC_MARKER));
    assert_int_equal(buf[n - 1], '\n');
}

/* ---- rate limiting ------------------------------------------------------ */

static void test_ratelimit_emits_once_per_second_and_counts_suppressed(void **state)
{
    const uint64_t s = FX_RATELIMIT_INTERVAL_NS;
    const uint64_t t0 = 5000 * s;
    fx_ratelimit rl;
    fx_ratelimit_init(&rl);
    uint64_t sup = 99;

    assert_true(fx_ratelimit_allow(&rl, t0, &sup));
    assert_int_equal(sup, 0);
    for (int i = 1; i <= 5; i++)
        assert_false(fx_ratelimit_allow(&rl, t0 + (uint64_t)i * s / 6, &sup));
    assert_false(fx_ratelimit_allow(&rl, t0 + s - 1, &sup));
    assert_true(fx_ratelimit_allow(&rl, t0 + s, &sup));
    assert_int_equal(sup, 6);
    assert_false(fx_ratelimit_allow(&rl, t0 + s + s / 2, &sup));
    assert_true(fx_ratelimit_allow(&rl, t0 + 3 * s, &sup));
    assert_int_equal(sup, 1);
    assert_true(fx_ratelimit_allow(&rl, t0 + 5 * s, &sup));
    assert_int_equal(sup, 0);

    /* Through the macro: the next emitted line reports the count. */
    capture_start();
    static fx_ratelimit drops = FX_RATELIMIT_INIT;
    for (uint64_t i = 0; i < 1235; i++)
        FX_LOG_RATELIMITED(&drops, t0 + i * 1000, FX_LOG_WARN, "broker", "ingress queue full");
    assert_int_equal(cap.n, 1);
    FX_LOG_RATELIMITED(&drops, t0 + 2 * s, FX_LOG_WARN, "broker", "ingress queue full");
    assert_int_equal(cap.n, 2);
    assert_non_null(strstr(cap.lines[0], " WARN  broker ingress queue full\n"));
    assert_non_null(
        strstr(cap.lines[1], " broker ingress queue full (1234 more since last report)\n"));
    capture_stop();
}

#define RL_THREADS 4
#define RL_CALLS 20000

typedef struct rl_arg {
    fx_ratelimit *rl;
    uint64_t now;
    uint64_t allowed;
    uint64_t reported;
} rl_arg;

static void *rl_hammer(void *p)
{
    rl_arg *a = p;
    for (int i = 0; i < RL_CALLS; i++) {
        uint64_t sup;
        if (fx_ratelimit_allow(a->rl, a->now, &sup)) {
            a->allowed++;
            a->reported += sup;
        }
    }
    return NULL;
}

static void test_ratelimit_concurrent_callers_emit_once_and_lose_no_count(void **state)
{
    fx_ratelimit rl;
    fx_ratelimit_init(&rl);
    uint64_t now = 77 * FX_RATELIMIT_INTERVAL_NS;
    rl_arg args[RL_THREADS];
    pthread_t th[RL_THREADS];
    for (int i = 0; i < RL_THREADS; i++) {
        args[i] = (rl_arg){.rl = &rl, .now = now};
        assert_int_equal(pthread_create(&th[i], NULL, rl_hammer, &args[i]), 0);
    }
    uint64_t allowed = 0;
    for (int i = 0; i < RL_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        allowed += args[i].allowed;
    }
    assert_int_equal(allowed, 1);
    uint64_t sup = 0;
    assert_true(fx_ratelimit_allow(&rl, now + FX_RATELIMIT_INTERVAL_NS, &sup));
    assert_int_equal(sup, (uint64_t)RL_THREADS * RL_CALLS - 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_level_filter_suppresses_lower_levels),
    cmocka_unit_test(test_level_parse_rejects_unknown),
    cmocka_unit_test(test_line_has_level_time_subsystem),
    cmocka_unit_test(test_control_characters_cannot_split_a_line),
    cmocka_unit_test(test_long_line_truncated_with_marker),
    cmocka_unit_test(test_ratelimit_emits_once_per_second_and_counts_suppressed),
    cmocka_unit_test(test_ratelimit_concurrent_callers_emit_once_and_lose_no_count),
};
FX_TEST_MAIN(tests)
