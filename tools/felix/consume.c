/* `felix consume`: joins a consumer group on one stream as one member,
 * prints each record it is given as `felix sub` prints messages, then acks
 * (or naks, or terms) it; leaves the group at a count, when the broker ends
 * the member, at an idle timeout or on Ctrl-C. Main thread; it is the
 * member's one consumer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "consume_args.h"

#define CMD "consume"
/* How long one wait for a record lasts before the stop flag is checked. */
#define SLICE_MS 200

/* Why the receive loop ended. */
typedef enum consume_end {
    END_COUNT,
    END_SIGNAL,
    END_TIMEOUT,
    END_EOF,
    END_OUTPUT_CLOSED,
    END_OUTPUT_ERROR,
    END_SETTLE_ERROR,
    END_ERROR,
} consume_end;

typedef struct consume_run {
    const fx_cli_consume_args *a;
    fx_group *g;
    fx_cli_buf out;
    uint64_t received;
    uint64_t settled;
} consume_run;

/* ---- arguments ---------------------------------------------------------------- */

/* Returns -1 to continue, or the exit status (help shown, usage error). */
static int consume_parse(int argc, char **argv, fx_cli_consume_args *a)
{
    fx_cli_consume_args_init(a);
    const char *pos[1];
    int npos;
    int st = fx_cli_parse(CMD, argc, argv, FX_CLI_CONSUME_OPTS, &a->common, fx_cli_consume_option,
                          a, pos, 1, &npos, NULL);
    if (st >= 0)
        return st;
    char err[512] = "";
    if (fx_cli_consume_check(a, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    if (npos == 0)
        return fx_cli_usage_error(CMD, "missing TENANT/NS/STREAM");
    if (fx_cli_path_parse(pos[0], &a->path, err, sizeof(err)) != 0 ||
        fx_cli_common_check(&a->common, &a->path, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    return -1;
}

/* ---- receiving ------------------------------------------------------------------ */

/* Writes one record and flushes it, so a record is settled only once its
 * line left the process. Returns 0, or -EPIPE / -errno when stdout fails. */
static int print_record(consume_run *r, const fx_group_msg *m)
{
    fx_cli_buf_reset(&r->out);
    int rv;
    if (r->a->json) {
        rv = fx_cli_json_group_msg(m, fx_cli_wall_ms(), &r->out);
    } else {
        if (m->skipped > 0)
            fx_cli_errorf(CMD, "skipped: %llu offset(s) settled as skipped before offset %llu",
                          (unsigned long long)m->skipped, (unsigned long long)m->offset);
        rv = fx_cli_escape_payload(m->payload, m->len, &r->out);
        if (rv == 0)
            rv = fx_cli_buf_add(&r->out, "\n", 1);
    }
    if (rv != 0)
        return rv;
    errno = 0;
    if (fwrite(r->out.p, 1, r->out.len, stdout) != r->out.len || fflush(stdout) != 0)
        return errno ? -errno : -EIO;
    return 0;
}

/* Acks, naks or terms |m| as the options say. Returns as fx_group_ack. */
static int settle(consume_run *r, const fx_group_msg *m)
{
    const fx_cli_consume_args *a = r->a;
    switch (a->settle) {
    case FX_CLI_SETTLE_NAK:
        return fx_group_nak(r->g, m->offset, m->attempt, a->nak_delay_ms);
    case FX_CLI_SETTLE_TERM:
        return fx_group_term(r->g, m->offset, m->attempt, a->term_reason);
    case FX_CLI_SETTLE_ACK:
        break;
    }
    return fx_group_ack(r->g, m->offset);
}

/* Waits up to one slice for the next record. Returns as fx_group_next,
 * FX_ETIMEDOUT once --timeout-ms passed without a record, or -EAGAIN after
 * one slice. */
static int next_record(consume_run *r, fx_group_msg *m, uint64_t idle_since)
{
    int wait = SLICE_MS;
    if (r->a->timeout_ms > 0) {
        uint64_t idle_ms = (fx_cli_now_ns() - idle_since) / 1000000u;
        if (idle_ms >= r->a->timeout_ms)
            return FX_ETIMEDOUT;
        if (r->a->timeout_ms - idle_ms < (uint64_t)wait)
            wait = (int)(r->a->timeout_ms - idle_ms);
    }
    int rv = fx_group_next(r->g, m, wait);
    return rv == FX_ETIMEDOUT ? -EAGAIN : rv;
}

static consume_end consume_loop(consume_run *r, int *perr)
{
    uint64_t idle_since = fx_cli_now_ns();
    for (;;) {
        if (fx_cli_stop)
            return END_SIGNAL;
        if (r->a->count > 0 && r->received >= r->a->count)
            return END_COUNT;
        fx_group_msg m;
        int rv = next_record(r, &m, idle_since);
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
        if ((rv = print_record(r, &m)) != 0) {
            *perr = rv;
            return rv == -EPIPE ? END_OUTPUT_CLOSED : END_OUTPUT_ERROR;
        }
        if ((rv = settle(r, &m)) != 0) {
            *perr = rv;
            return END_SETTLE_ERROR;
        }
        r->settled++;
    }
}

/* ---- start and end ---------------------------------------------------------------- */

/* Joins the group; on failure prints why and returns the error. */
static int consume_start(consume_run *r, fx_client *c)
{
    const fx_cli_consume_args *a = r->a;
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = a->path.ns;
    o.stream = a->path.stream;
    o.group = a->group;
    o.member = a->member;
    o.window = a->window;
    o.ack_wait_ms = a->ack_wait_ms;
    o.create = a->create_text != NULL ? &a->create : NULL;
    int rv = fx_group_join(&r->g, c, &o);
    if (rv != 0) {
        char what[1400];
        snprintf(what, sizeof(what), "join group %.255s on %.255s/%.255s/%.255s%s", a->group,
                 a->path.tenant, a->path.ns, a->path.stream,
                 rv == FX_EPROTO ? " (does the broker serve consumer groups?)" : "");
        fx_cli_report(CMD, what, rv);
        return rv;
    }
    /* Scripts wait for this line before publishing. */
    fputs("joined\n", stderr);
    fflush(stderr);
    return 0;
}

static const char *end_text(consume_end end)
{
    switch (end) {
    case END_COUNT:
        return "count reached";
    case END_SIGNAL:
        return "interrupted";
    case END_TIMEOUT:
        return "idle timeout";
    case END_EOF:
        return "member ended by the broker";
    case END_OUTPUT_CLOSED:
        return "output closed";
    case END_OUTPUT_ERROR:
    case END_SETTLE_ERROR:
    case END_ERROR:
        return "error";
    }
    return "?";
}

/* Prints the end reason when it is a failure or cuts a --count short and
 * returns the exit status. */
static int consume_status(const consume_run *r, consume_end end, int err)
{
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
        fx_cli_errorf(CMD, "no record for %llu ms: got %llu of %llu",
                      (unsigned long long)r->a->timeout_ms, (unsigned long long)r->received,
                      (unsigned long long)r->a->count);
        return FX_CLI_EXIT_FAIL;
    case END_EOF:
        if (!short_count)
            return FX_CLI_EXIT_OK;
        fx_cli_errorf(CMD, "the broker ended the member after %llu of %llu records",
                      (unsigned long long)r->received, (unsigned long long)r->a->count);
        return FX_CLI_EXIT_FAIL;
    case END_SETTLE_ERROR:
        fx_cli_report(CMD, "settle", err);
        return FX_CLI_EXIT_FAIL;
    case END_ERROR:
        break;
    }
    fx_cli_report(CMD, "receive", err);
    return FX_CLI_EXIT_FAIL;
}

/* --ack-sync: waits for the broker to make the settlements durable. Returns
 * the exit status |st| or, when that fails, FX_CLI_EXIT_FAIL. */
static int consume_ack_sync(const consume_run *r, int st)
{
    int rv = fx_group_ack_sync(r->g, r->a->common.timeout_ms);
    if (rv == 0)
        return st;
    fx_cli_report(CMD, "ack-sync", rv);
    return FX_CLI_EXIT_FAIL;
}

static void consume_summary(const consume_run *r, consume_end end, double elapsed_s)
{
    static const char *const verb[] = {"acked", "naked", "termed"};
    fx_member_stats st = {0};
    fx_group_stats(r->g, &st);
    fprintf(stderr,
            "felix consume: received %llu in %.3f s (%s); %s %llu; expired %llu, refused %llu, "
            "rejoins %llu\n",
            (unsigned long long)r->received, elapsed_s, end_text(end), verb[r->a->settle],
            (unsigned long long)r->settled, (unsigned long long)st.expired,
            (unsigned long long)st.refused, (unsigned long long)st.reconnects);
}

/* Runs the member from join to leave. Returns the exit status. */
static int consume_run_member(consume_run *r, fx_client *c)
{
    if (consume_start(r, c) != 0)
        return FX_CLI_EXIT_FAIL;
    uint64_t t0 = fx_cli_now_ns();
    int err = 0;
    consume_end end = consume_loop(r, &err);
    int st = consume_status(r, end, err);
    /* A member the broker ended has no one to answer an ack_sync. */
    if (r->a->ack_sync && end != END_EOF)
        st = consume_ack_sync(r, st);
    consume_summary(r, end, (double)(fx_cli_now_ns() - t0) / 1e9);
    fx_group_leave(r->g);
    r->g = NULL;
    return st;
}

int fx_cli_consume(int argc, char **argv)
{
    fx_cli_consume_args a;
    int st = consume_parse(argc, argv, &a);
    if (st >= 0)
        return st;
    if (fx_cli_signals_install() != 0) {
        fx_cli_errorf(CMD, "cannot install signal handlers: %s", strerror(errno));
        return FX_CLI_EXIT_FAIL;
    }
    fx_client *c = NULL;
    if (fx_cli_connect(CMD, &a.common, false, &c) != 0)
        return FX_CLI_EXIT_FAIL;
    consume_run r = {.a = &a};
    st = consume_run_member(&r, c);
    fx_cli_buf_free(&r.out);
    /* Nothing was published; fx_group_leave already sent the member's ops. */
    (void)fx_client_close(c, 1000);
    return st;
}
