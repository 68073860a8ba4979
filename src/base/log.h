/* Logging: one line per event, written with a single write(2) so lines from
 * different threads never interleave:
 *   2026-11-29T17:05:01.123Z INFO  quic conn=42 handshake completed peer=...
 * (UTC time with milliseconds, level, subsystem, message with key=value ids).
 * Lines go to stderr unless a sink is installed. A caller-embedded
 * fx_ratelimit keeps overload and drop warnings to one line per second per
 * cause and counts what it suppressed. Any thread. */
#ifndef FX_LOG_H
#define FX_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum fx_log_level {
    FX_LOG_ERROR = 0,
    FX_LOG_WARN,
    FX_LOG_INFO,
    FX_LOG_DEBUG,
    FX_LOG_TRACE,
} fx_log_level;

/* Longest line written, newline included. A longer message is cut and ends
 * with FX_LOG_TRUNC_MARKER; the "(N more since last report)" suffix is kept. */
#define FX_LOG_LINE_MAX 1024
#define FX_LOG_TRUNC_MARKER "...[truncated]"
/* Smallest buffer fx_log_format() accepts. */
#define FX_LOG_FORMAT_MIN 128

/* Private: the most verbose level that is emitted. */
extern atomic_int fx_log_threshold;

/* Returns true if lines at |level| are emitted. Any thread. */
static inline bool fx_log_is_enabled(fx_log_level level)
{
    return (int)level <= atomic_load_explicit(&fx_log_threshold, memory_order_relaxed);
}

/* Emits lines at |level| and more severe ones from now on; the default is
 * FX_LOG_WARN, so a program linking libfelix stays quiet unless it asks (the
 * broker daemon sets its configured `log_level`, info by default). Any thread. */
void fx_log_set_level(fx_log_level level);

/* Returns the current level. Any thread. */
fx_log_level fx_log_get_level(void);

/* Parses |s| ("error", "warn", "info", "debug", "trace"; ASCII case ignored)
 * into |*plevel|. Returns 0, or FX_ECONFIG for anything else (|*plevel| is
 * left alone). Any thread. */
int fx_log_level_parse(const char *s, fx_log_level *plevel);

/* Returns the upper-case name of |level| ("INFO"), or "?" if out of range. */
const char *fx_log_level_name(fx_log_level level);

/* ---- output ------------------------------------------------------------- */

/* Receives one finished line |line| of |len| bytes at |level|; |len| counts
 * the newline, and line[len] is a NUL. |line| is valid only during the call.
 * Called on the logging thread, possibly from several threads at once. */
typedef void (*fx_log_cb)(fx_log_level level, const char *line, size_t len, void *user);

typedef struct fx_log_sink {
    fx_log_cb on_line;
    void *user;
} fx_log_sink;

/* Sends lines to |sink| instead of stderr; NULL restores stderr. The caller
 * owns |sink| and keeps it alive until no thread can still be logging through
 * it (in practice: set once at start-up, or in single-threaded tests).
 * Any thread. */
void fx_log_set_sink(const fx_log_sink *sink);

/* ---- emitting ----------------------------------------------------------- */

/* Formats and writes one line at |level| for |subsys| (a short static name
 * such as "quic"). The message is printf |fmt|; control characters in it
 * become '?' so a message cannot forge or split lines. Does not check the
 * level: use the FX_LOG_* macros. Any thread. */
void fx_log_emit(fx_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As fx_log_emit(), and if |suppressed| > 0 appends
 * " (<suppressed> more since last report)". Any thread. */
void fx_log_emit_suppressed(fx_log_level level, const char *subsys, uint64_t suppressed,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Formats one line, exactly as emitted, into |buf| of |cap| bytes (cap at
 * least FX_LOG_FORMAT_MIN) with the wall-clock time |unix_ms| (milliseconds since the Unix
 * epoch, UTC). Returns its length (newline included, NUL not), always less
 * than |cap|. Pure function; any thread. */
size_t fx_log_format(char *buf, size_t cap, fx_log_level level, const char *subsys, int64_t unix_ms,
                     uint64_t suppressed, const char *fmt, va_list ap)
    __attribute__((format(printf, 7, 0)));

/* Logs at |level| if enabled; the arguments are not evaluated otherwise.
 * Usage: FX_LOG_INFO("quic", "conn=%" PRIu64 " handshake completed", id); */
#define FX_LOG(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if (fx_log_is_enabled(level))                                                              \
            fx_log_emit((level), (subsys), __VA_ARGS__);                                           \
    } while (0)
#define FX_LOG_ERROR(subsys, ...) FX_LOG(FX_LOG_ERROR, subsys, __VA_ARGS__)
#define FX_LOG_WARN(subsys, ...) FX_LOG(FX_LOG_WARN, subsys, __VA_ARGS__)
#define FX_LOG_INFO(subsys, ...) FX_LOG(FX_LOG_INFO, subsys, __VA_ARGS__)
#define FX_LOG_DEBUG(subsys, ...) FX_LOG(FX_LOG_DEBUG, subsys, __VA_ARGS__)
#define FX_LOG_TRACE(subsys, ...) FX_LOG(FX_LOG_TRACE, subsys, __VA_ARGS__)

/* ---- rate limiting ------------------------------------------------------ */

/* Minimum time between two lines of one fx_ratelimit. */
#define FX_RATELIMIT_INTERVAL_NS 1000000000ull

/* One cause of repeated log lines ("ingress queue full"), embedded by its
 * owner, typically as a static or a field of a long-lived object. Safe to hit
 * from several threads at once. */
typedef struct fx_ratelimit {
    _Atomic uint64_t next_ns;    /* earliest monotonic time of the next line */
    _Atomic uint64_t suppressed; /* events refused since the last line */
} fx_ratelimit;

#define FX_RATELIMIT_INIT                                                                          \
    {                                                                                              \
        0, 0                                                                                       \
    }

/* Initializes |rl|: the first event will be allowed. */
void fx_ratelimit_init(fx_ratelimit *rl);

/* Decides whether the event at monotonic time |now_ns| may log. Returns true
 * at most once per FX_RATELIMIT_INTERVAL_NS and then stores in |*psuppressed|
 * how many events were refused since the previous true (and restarts that
 * count); otherwise counts this event as suppressed and returns false.
 * Any thread. */
bool fx_ratelimit_allow(fx_ratelimit *rl, uint64_t now_ns, uint64_t *psuppressed);

/* Logs at |level| through |rl| at monotonic time |now_ns|: at most one line
 * per second, ending "(N more since last report)" when events were suppressed.
 * Nothing is evaluated or counted while |level| is off. */
#define FX_LOG_RATELIMITED(rl, now_ns, level, subsys, ...)                                         \
    do {                                                                                           \
        uint64_t fx_log_sup_;                                                                      \
        if (fx_log_is_enabled(level) && fx_ratelimit_allow((rl), (now_ns), &fx_log_sup_))          \
            fx_log_emit_suppressed((level), (subsys), fx_log_sup_, __VA_ARGS__);                   \
    } while (0)

#endif
