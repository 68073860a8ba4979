/* Log lines and per-cause rate limits. A line is formatted into a stack
 * buffer and handed to the sink (or stderr) whole, so concurrent loggers never
 * interleave and nothing here allocates or locks. Any thread. */
#include "base/log.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "felix/error.h"

atomic_int fx_log_threshold = FX_LOG_WARN;
static _Atomic(const fx_log_sink *) log_sink;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
#define NLEVELS (sizeof(level_names) / sizeof(level_names[0]))

/* ---- levels ------------------------------------------------------------- */

void fx_log_set_level(fx_log_level level)
{
    atomic_store_explicit(&fx_log_threshold, (int)level, memory_order_relaxed);
}

fx_log_level fx_log_get_level(void)
{
    return (fx_log_level)atomic_load_explicit(&fx_log_threshold, memory_order_relaxed);
}

const char *fx_log_level_name(fx_log_level level)
{
    if ((unsigned)level >= NLEVELS)
        return "?";
    return level_names[level];
}

int fx_log_level_parse(const char *s, fx_log_level *plevel)
{
    if (!s)
        return FX_ECONFIG;
    for (size_t i = 0; i < NLEVELS; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *plevel = (fx_log_level)i;
            return 0;
        }
    }
    return FX_ECONFIG;
}

void fx_log_set_sink(const fx_log_sink *sink)
{
    atomic_store_explicit(&log_sink, sink, memory_order_release);
}

/* ---- formatting --------------------------------------------------------- */

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL subsys " and returns the length it
 * needed (as snprintf does). */
static size_t format_prefix(char *buf, size_t cap, fx_log_level level, const char *subsys,
                            int64_t unix_ms)
{
    if (unix_ms < 0)
        unix_ms = 0;
    time_t secs = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (!gmtime_r(&secs, &tm))
        memset(&tm, 0, sizeof(tm));
    int n = snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %-5s %s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(unix_ms % 1000), fx_log_level_name(level), subsys ? subsys : "-");
    return n < 0 ? 0 : (size_t)n;
}

/* Replaces control characters so that a message (which may quote peer data)
 * stays on its own line and cannot imitate another. */
static void sanitize(char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f)
            p[i] = '?';
    }
}

size_t fx_log_format(char *buf, size_t cap, fx_log_level level, const char *subsys, int64_t unix_ms,
                     uint64_t suppressed, const char *fmt, va_list ap)
{
    assert(cap >= FX_LOG_FORMAT_MIN);
    char tail[64] = "";
    size_t tlen = 0;
    if (suppressed > 0)
        tlen = (size_t)snprintf(tail, sizeof(tail), " (%" PRIu64 " more since last report)",
                                suppressed);
    /* The prefix and message share buf[0..room); the tail, newline and NUL
     * always fit after it. */
    size_t room = cap - tlen - 2;
    size_t pos = format_prefix(buf, room + 1, level, subsys, unix_ms);
    size_t msg = pos;
    if (pos < room) {
        int n = vsnprintf(buf + pos, room + 1 - pos, fmt, ap);
        pos += n < 0 ? 0 : (size_t)n;
    }
    if (msg < room)
        sanitize(buf + msg, (pos < room ? pos : room) - msg);
    if (pos > room) {
        size_t mlen = strlen(FX_LOG_TRUNC_MARKER);
        pos = room - mlen;
        memcpy(buf + pos, FX_LOG_TRUNC_MARKER, mlen);
        pos += mlen;
    }
    memcpy(buf + pos, tail, tlen);
    pos += tlen;
    buf[pos++] = '\n';
    buf[pos] = '\0';
    return pos;
}

/* ---- output ------------------------------------------------------------- */

static int64_t wall_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One write(2) per line keeps lines whole; a short write (rare, e.g. a pipe
 * under pressure) continues with the rest. A failing stderr has nowhere to be
 * reported, so the line is dropped. */
static void write_line(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void emit_v(fx_log_level level, const char *subsys, uint64_t suppressed, const char *fmt,
                   va_list ap)
{
    char line[FX_LOG_LINE_MAX];
    size_t n = fx_log_format(line, sizeof(line), level, subsys, wall_ms(), suppressed, fmt, ap);
    const fx_log_sink *sink = atomic_load_explicit(&log_sink, memory_order_acquire);
    if (sink)
        sink->on_line(level, line, n, sink->user);
    else
        write_line(line, n);
}

void fx_log_emit(fx_log_level level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit_v(level, subsys, 0, fmt, ap);
    va_end(ap);
}

void fx_log_emit_suppressed(fx_log_level level, const char *subsys, uint64_t suppressed,
                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit_v(level, subsys, suppressed, fmt, ap);
    va_end(ap);
}

/* ---- rate limiting ------------------------------------------------------ */

void fx_ratelimit_init(fx_ratelimit *rl)
{
    atomic_init(&rl->next_ns, 0);
    atomic_init(&rl->suppressed, 0);
}

bool fx_ratelimit_allow(fx_ratelimit *rl, uint64_t now_ns, uint64_t *psuppressed)
{
    uint64_t next = atomic_load_explicit(&rl->next_ns, memory_order_relaxed);
    /* Of the threads that see the interval elapsed, the one whose CAS moves
     * the deadline wins the line; the others count as suppressed. */
    if (now_ns >= next && atomic_compare_exchange_strong_explicit(
                              &rl->next_ns, &next, now_ns + FX_RATELIMIT_INTERVAL_NS,
                              memory_order_relaxed, memory_order_relaxed)) {
        *psuppressed = atomic_exchange_explicit(&rl->suppressed, 0, memory_order_relaxed);
        return true;
    }
    atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
    return false;
}
