/* `felix sub`: subscribes to one stream and prints its messages, one line
 * (or one JSON object) each, until a count, the end of the stream, an idle
 * timeout or Ctrl-C. Main thread; it is the subscription's one consumer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "sub"
/* How long one wait for an event lasts before the stop flag is checked. */
#define SLICE_MS 200

enum { O_FROM = FX_CLI_OPT_FIRST_CMD, O_COUNT, O_JSON, O_TIMEOUT };

static const fx_cli_opt SUB_OPTS[] = {
    FX_CLI_COMMON_OPTS,      {"from", true, O_FROM},          {"count", true, O_COUNT},
    {"json", false, O_JSON}, {"timeout-ms", true, O_TIMEOUT}, {0},
};

typedef struct sub_args {
    fx_cli_common common;
    fx_cli_path path;
    const char *from_text;
    fx_start from;
    uint64_t count;      /* 0: unlimited */
    uint64_t timeout_ms; /* 0: none */
    bool json;
} sub_args;

/* Why the receive loop ended. */
typedef enum sub_end {
    END_COUNT,
    END_SIGNAL,
    END_TIMEOUT,
    END_EOF,
    END_OUTPUT_CLOSED,
    END_OUTPUT_ERROR,
    END_ERROR,
} sub_end;

typedef struct sub_run {
    const sub_args *a;
    fx_subscription *s;
    fx_cli_buf out;
    uint64_t received;
} sub_run;

/* ---- arguments ---------------------------------------------------------------- */

/* sub's own options (fx_cli_parse applies the common ones). */
static int sub_option(void *user, int id, const char *val, char *err, size_t errlen)
{
    sub_args *a = user;
    switch (id) {
    case O_FROM:
        a->from_text = val;
        if (fx_cli_parse_start(val, &a->from) == 0)
            return 0;
        snprintf(err, errlen, "--from: expected earliest, latest or an offset, got '%s'", val);
        return -EINVAL;
    case O_COUNT:
        if (fx_cli_parse_u64(val, UINT64_MAX, &a->count) == 0 && a->count > 0)
            return 0;
        snprintf(err, errlen, "--count: expected a positive integer, got '%s'", val);
        return -EINVAL;
    case O_JSON:
        a->json = true;
        return 0;
    case O_TIMEOUT:
        if (fx_cli_parse_u64(val, UINT32_MAX, &a->timeout_ms) == 0 && a->timeout_ms > 0)
            return 0;
        snprintf(err, errlen, "--timeout-ms: expected a positive number of ms, got '%s'", val);
        return -EINVAL;
    default:
        return 0;
    }
}

/* Returns -1 to continue, or the exit status (help shown, usage error). */
static int sub_parse(int argc, char **argv, sub_args *a)
{
    *a = (sub_args){.from_text = "latest", .from = {.kind = FX_START_LATEST}};
    const char *pos[1];
    int npos;
    int st =
        fx_cli_parse(CMD, argc, argv, SUB_OPTS, &a->common, sub_option, a, pos, 1, &npos, NULL);
    if (st >= 0)
        return st;
    char err[512] = "";
    if (npos == 0)
        return fx_cli_usage_error(CMD, "missing TENANT/NS/STREAM");
    if (fx_cli_path_parse(pos[0], &a->path, err, sizeof(err)) != 0 ||
        fx_cli_common_check(&a->common, &a->path, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    return -1;
}

/* ---- receiving ------------------------------------------------------------------ */

/* Writes one event. Returns 0, or -EPIPE / -errno when stdout fails. */
static int print_event(sub_run *r, const fx_event *ev)
{
    fx_cli_buf_reset(&r->out);
    int rv;
    if (r->a->json) {
        rv = fx_cli_json_event(ev, fx_cli_wall_ms(), &r->out);
    } else {
        if ((ev->flags & FX_EVENT_GAP) && ev->has_offset)
            fx_cli_errorf(CMD, "gap: %llu message(s) missed before offset %llu",
                          (unsigned long long)ev->gap, (unsigned long long)ev->offset);
        else if (ev->flags & FX_EVENT_GAP)
            fx_cli_errorf(CMD, "gap: %llu message(s) missed", (unsigned long long)ev->gap);
        rv = fx_cli_escape_payload(ev->payload, ev->len, &r->out);
        if (rv == 0)
            rv = fx_cli_buf_add(&r->out, "\n", 1);
    }
    if (rv != 0)
        return rv;
    errno = 0;
    if (fwrite(r->out.p, 1, r->out.len, stdout) != r->out.len)
        return errno ? -errno : -EIO;
    return 0;
}

/* Takes the next event, flushing stdout before any wait so a reader sees
 * every line already received. Returns as fx_subscription_next, FX_ETIMEDOUT
 * once --timeout-ms passed without an event, -EAGAIN after one wait slice,
 * or 1 when flushing stdout failed (errno in |*out_err|). */
static int next_event(sub_run *r, fx_event *ev, uint64_t idle_since, int *out_err)
{
    int rv = fx_subscription_next(r->s, ev, 0);
    if (rv != FX_ETIMEDOUT)
        return rv;
    errno = 0;
    if (fflush(stdout) != 0) {
        *out_err = errno ? -errno : -EIO;
        return 1;
    }
    int wait = SLICE_MS;
    if (r->a->timeout_ms > 0) {
        uint64_t idle_ms = (fx_cli_now_ns() - idle_since) / 1000000u;
        if (idle_ms >= r->a->timeout_ms)
            return FX_ETIMEDOUT;
        if (r->a->timeout_ms - idle_ms < (uint64_t)wait)
            wait = (int)(r->a->timeout_ms - idle_ms);
    }
    rv = fx_subscription_next(r->s, ev, wait);
    return rv == FX_ETIMEDOUT ? -EAGAIN : rv;
}

static sub_end sub_loop(sub_run *r, int *perr)
{
    uint64_t idle_since = fx_cli_now_ns();
    for (;;) {
        if (fx_cli_stop)
            return END_SIGNAL;
        if (r->a->count > 0 && r->received >= r->a->count)
            return END_COUNT;
        fx_event ev;
        int rv = next_event(r, &ev, idle_since, perr);
        if (rv == 1)
            return *perr == -EPIPE ? END_OUTPUT_CLOSED : END_OUTPUT_ERROR;
        if (rv == -EAGAIN)
            continue;
        if (rv == FX_ETIMEDOUT)
            return END_TIMEOUT;
        if (rv == FX_EEOF)
            return END_EOF;
        *perr = rv;
        if (rv != 0)
            return END_ERROR;
        r->received++;
        idle_since = fx_cli_now_ns();
        if ((rv = print_event(r, &ev)) != 0) {
            *perr = rv;
            return rv == -EPIPE ? END_OUTPUT_CLOSED : END_OUTPUT_ERROR;
        }
    }
}

/* ---- start and end ---------------------------------------------------------------- */

/* Subscribes; on failure prints why and returns the error. */
static int sub_start(sub_run *r, fx_client *c)
{
    const sub_args *a = r->a;
    int rv = fx_subscribe(&r->s, c, a->path.ns, a->path.stream, &a->from);
    if (rv == FX_ECURSOR_TOO_OLD || rv == FX_ECURSOR_IN_FUTURE) {
        fx_sub_error e = {0};
        fx_subscription_error(r->s, &e);
        fx_cli_errorf(CMD, "--from %s: %s: requested offset %llu, %s offset %llu", a->from_text,
                      fx_strerror(rv), (unsigned long long)e.requested,
                      rv == FX_ECURSOR_TOO_OLD ? "oldest available" : "next available",
                      (unsigned long long)e.available);
        fx_unsubscribe(r->s);
        r->s = NULL;
        return rv;
    }
    if (rv != 0) {
        char what[1024];
        snprintf(what, sizeof(what), "subscribe to %.255s/%.255s/%.255s", a->path.tenant,
                 a->path.ns, a->path.stream);
        fx_cli_report(CMD, what, rv);
        return rv;
    }
    /* Scripts wait for this line before publishing. */
    fputs("subscribed\n", stderr);
    fflush(stderr);
    return 0;
}

static const char *end_text(sub_end end)
{
    switch (end) {
    case END_COUNT:
        return "count reached";
    case END_SIGNAL:
        return "interrupted";
    case END_TIMEOUT:
        return "idle timeout";
    case END_EOF:
        return "end of stream";
    case END_OUTPUT_CLOSED:
        return "output closed";
    case END_OUTPUT_ERROR:
    case END_ERROR:
        return "error";
    }
    return "?";
}

/* Prints the end reason when it is a failure or cuts a --count short and
 * returns the exit status. */
static int sub_status(const sub_run *r, sub_end end, int err)
{
    fx_sub_error e = {0};
    fx_subscription_error(r->s, &e);
    bool short_count = r->a->count > 0 && r->received < r->a->count;
    switch (end) {
    case END_COUNT:
    case END_SIGNAL:
    case END_OUTPUT_CLOSED:
        return FX_CLI_EXIT_OK;
    case END_OUTPUT_ERROR:
        fx_cli_errorf(CMD, "writing to stdout: %s", strerror(-err));
        return FX_CLI_EXIT_FAIL;
    case END_TIMEOUT:
        if (!short_count)
            return FX_CLI_EXIT_OK;
        fx_cli_errorf(CMD, "no message for %llu ms: got %llu of %llu",
                      (unsigned long long)r->a->timeout_ms, (unsigned long long)r->received,
                      (unsigned long long)r->a->count);
        return FX_CLI_EXIT_FAIL;
    case END_EOF:
        if (e.code != 0 && e.code != FX_EEOF) {
            fx_cli_errorf(CMD, "subscription ended: %s%s%s", fx_strerror(e.code),
                          e.message[0] ? ": " : "", e.message);
            return FX_CLI_EXIT_FAIL;
        }
        if (!short_count)
            return FX_CLI_EXIT_OK;
        fx_cli_errorf(CMD, "stream ended after %llu of %llu messages%s%s",
                      (unsigned long long)r->received, (unsigned long long)r->a->count,
                      e.message[0] ? ": " : "", e.message);
        return FX_CLI_EXIT_FAIL;
    case END_ERROR:
        break;
    }
    if (e.message[0] != '\0')
        fx_cli_errorf(CMD, "receive: %s: %s", fx_strerror(err), e.message);
    else
        fx_cli_report(CMD, "receive", err);
    return FX_CLI_EXIT_FAIL;
}

static void sub_summary(const sub_run *r, sub_end end, double elapsed_s)
{
    fx_sub_stats st = {0};
    fx_subscription_stats(r->s, &st);
    fprintf(stderr,
            "felix sub: received %llu in %.3f s (%s); gaps %llu, missed %llu, client drops "
            "%llu\n",
            (unsigned long long)r->received, elapsed_s, end_text(end), (unsigned long long)st.gaps,
            (unsigned long long)st.missed, (unsigned long long)st.dropped);
}

int fx_cli_sub(int argc, char **argv)
{
    sub_args a;
    int st = sub_parse(argc, argv, &a);
    if (st >= 0)
        return st;
    if (fx_cli_signals_install() != 0) {
        fx_cli_errorf(CMD, "cannot install signal handlers: %s", strerror(errno));
        return FX_CLI_EXIT_FAIL;
    }
    fx_client *c = NULL;
    if (fx_cli_connect(CMD, &a.common, true, &c) != 0)
        return FX_CLI_EXIT_FAIL;
    sub_run r = {.a = &a};
    st = FX_CLI_EXIT_FAIL;
    if (sub_start(&r, c) == 0) {
        uint64_t t0 = fx_cli_now_ns();
        int err = 0;
        sub_end end = sub_loop(&r, &err);
        if (end != END_OUTPUT_CLOSED && end != END_OUTPUT_ERROR && fflush(stdout) != 0 &&
            errno != EPIPE) {
            err = -errno;
            end = END_OUTPUT_ERROR;
        }
        st = sub_status(&r, end, err);
        sub_summary(&r, end, (double)(fx_cli_now_ns() - t0) / 1e9);
        fx_unsubscribe(r.s);
    }
    fx_cli_buf_free(&r.out);
    /* Nothing was published: there is nothing to flush, and the outcome is
     * already decided by the subscription. */
    (void)fx_client_close(c, 1000);
    return st;
}
