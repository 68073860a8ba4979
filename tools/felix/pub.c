/* `felix pub`: publishes a message N times, each line of stdin, or
 * generated payloads, optionally paced and batched, and prints a summary.
 * Main thread; libfelix does the sending on its loop thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "pub"
/* A batch is sent early when its payloads reach this many bytes, so memory
 * stays bounded whatever --batch and the line lengths are. */
#define BATCH_BYTES_MAX (1u << 20)
/* Longest stdin line and --size payload: the default max frame. */
#define PAYLOAD_MAX (16u << 20)
#define BATCH_MAX 4096u
/* Error lines printed before the rest are only counted. */
#define ERRORS_SHOWN 5

enum { O_ACK = FX_CLI_OPT_FIRST_CMD, O_COUNT, O_RATE, O_SIZE, O_BATCH, O_CLIENT_STATS, O_IDEM };

static const fx_cli_opt PUB_OPTS[] = {
    FX_CLI_COMMON_OPTS,
    {"ack", true, O_ACK},
    {"count", true, O_COUNT},
    {"rate", true, O_RATE},
    {"size", true, O_SIZE},
    {"batch", true, O_BATCH},
    {"client-stats", false, O_CLIENT_STATS},
    {"idempotent", false, O_IDEM},
    {0},
};

typedef struct pub_args {
    fx_cli_common common;
    fx_cli_path path;
    fx_ack ack;
    bool ack_set;   /* --ack given */
    uint64_t count; /* 0: not given */
    double rate;    /* 0: unpaced */
    uint64_t size;  /* 0: not given */
    uint64_t batch;
    const char *message; /* NULL with '-' or --size */
    bool from_stdin;
    bool client_stats; /* print checkpoints 1 and 2 of our own client at the end */
} pub_args;

typedef struct pub_run {
    const pub_args *a;
    fx_client *c;
    fx_cli_pacer pacer;
    fx_cli_buf arena; /* payloads of the batch being filled */
    size_t off[BATCH_MAX];
    size_t len[BATCH_MAX];
    size_t n;
    fx_cli_buf line; /* the stdin line */
    uint8_t *gen;    /* the generated payload (--size) */
    uint64_t next_seq;
    uint64_t published, acked, errors;
    int fatal; /* first error that ends the run */
} pub_run;

/* ---- arguments ---------------------------------------------------------------- */

/* pub's own options (fx_cli_parse applies the common ones). */
static int pub_option(void *user, int id, const char *val, char *err, size_t errlen)
{
    pub_args *a = user;
    switch (id) {
    case O_ACK:
        if (fx_cli_parse_ack(val, &a->ack) == 0) {
            a->ack_set = true;
            return 0;
        }
        snprintf(err, errlen, "--ack: expected none, per_message or per_batch, got '%s'", val);
        return -EINVAL;
    case O_COUNT:
        if (fx_cli_parse_u64(val, UINT64_MAX, &a->count) == 0 && a->count > 0)
            return 0;
        snprintf(err, errlen, "--count: expected a positive integer, got '%s'", val);
        return -EINVAL;
    case O_RATE:
        if (fx_cli_parse_rate(val, &a->rate) == 0)
            return 0;
        snprintf(err, errlen, "--rate: expected messages per second > 0, got '%s'", val);
        return -EINVAL;
    case O_SIZE:
        if (fx_cli_parse_size(val, PAYLOAD_MAX, &a->size) == 0 && a->size > 0)
            return 0;
        snprintf(err, errlen, "--size: expected 1 byte to 16M, got '%s'", val);
        return -EINVAL;
    case O_BATCH:
        if (fx_cli_parse_u64(val, BATCH_MAX, &a->batch) == 0 && a->batch > 0)
            return 0;
        snprintf(err, errlen, "--batch: expected 1..%u, got '%s'", BATCH_MAX, val);
        return -EINVAL;
    case O_CLIENT_STATS:
        a->client_stats = true;
        return 0;
    case O_IDEM:
        a->common.idempotent = true;
        return 0;
    default:
        return 0;
    }
}

/* Returns -1 to continue, or the exit status (help shown, usage error). */
static int pub_parse(int argc, char **argv, pub_args *a)
{
    *a = (pub_args){.ack = FX_ACK_NONE, .batch = 1};
    const char *pos[2];
    int npos;
    int st = fx_cli_parse(CMD, argc, argv, PUB_OPTS, &a->common, pub_option, a, pos, 2, &npos,
                          "(quote a message containing spaces)");
    if (st >= 0)
        return st;
    char err[512] = "";
    if (npos == 0)
        return fx_cli_usage_error(CMD, "missing TENANT/NS/STREAM");
    if (fx_cli_path_parse(pos[0], &a->path, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    if (npos == 2 && strcmp(pos[1], "-") == 0)
        a->from_stdin = true;
    else if (npos == 2)
        a->message = pos[1];
    if (a->size > 0 && (a->message != NULL || a->from_stdin))
        return fx_cli_usage_error(CMD, "--size generates payloads: give no MESSAGE or '-'");
    if (a->size == 0 && a->message == NULL && !a->from_stdin)
        return fx_cli_usage_error(CMD, "missing MESSAGE ('-' reads lines from stdin, --size "
                                       "generates payloads)");
    if (a->message != NULL && strlen(a->message) > PAYLOAD_MAX)
        return fx_cli_usage_error(CMD, "MESSAGE larger than 16 MiB");
    if (a->count == 0 && !a->from_stdin)
        a->count = 1;
    /* Idempotence is a property of acked publishes: it implies an answer. */
    if (a->common.idempotent && !a->ack_set)
        a->ack = FX_ACK_PER_BATCH;
    else if (a->common.idempotent && a->ack == FX_ACK_NONE)
        return fx_cli_usage_error(CMD, "--idempotent needs an acked publish: drop --ack none");
    if (fx_cli_common_check(&a->common, &a->path, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    return -1;
}

/* ---- message source -------------------------------------------------------------- */

/* Reads one line of at most PAYLOAD_MAX bytes without its "\n" / "\r\n".
 * Returns 1, 0 at end of input, or -EINTR, -E2BIG, -errno. */
static int read_line(FILE *f, fx_cli_buf *line)
{
    fx_cli_buf_reset(line);
    for (;;) {
        errno = 0;
        int ch = getc(f);
        if (ch == EOF) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                clearerr(f);
                return -e;
            }
            return line->len > 0 ? 1 : 0;
        }
        if (ch == '\n')
            break;
        if (line->len >= PAYLOAD_MAX)
            return -E2BIG;
        char c = (char)ch;
        if (fx_cli_buf_add(line, &c, 1) != 0)
            return -ENOMEM;
    }
    if (line->len > 0 && line->p[line->len - 1] == '\r')
        line->p[--line->len] = '\0';
    return 1;
}

/* Produces the next payload in |*data|/|*len|. Returns 1, 0 when done, or
 * a negative error (already reported). */
static int next_message(pub_run *r, const void **data, size_t *len)
{
    const pub_args *a = r->a;
    if (a->count > 0 && r->next_seq >= a->count)
        return 0;
    if (a->from_stdin) {
        int rv;
        while ((rv = read_line(stdin, &r->line)) == -EINTR && !fx_cli_stop)
            ;
        if (rv == -EINTR)
            return 0;
        if (rv < 0) {
            fx_cli_errorf(CMD, "stdin line %llu: %s", (unsigned long long)r->next_seq + 1,
                          rv == -E2BIG ? "longer than 16 MiB" : strerror(-rv));
            return rv;
        }
        if (rv == 0)
            return 0;
        *data = r->line.p != NULL ? r->line.p : "";
        *len = r->line.len;
    } else if (a->size > 0) {
        fx_cli_gen_payload(r->next_seq, r->gen, (size_t)a->size);
        *data = r->gen;
        *len = (size_t)a->size;
    } else {
        *data = a->message;
        *len = strlen(a->message);
    }
    r->next_seq++;
    return 1;
}

/* ---- sending ---------------------------------------------------------------------- */

/* Errors after which further publishes cannot succeed. A refusal of the
 * idempotent check (--idempotent: e.g. unknown_producer after an in-memory
 * broker restart) fails that publish only: the client makes a new producer. */
static bool is_fatal(int rv)
{
    return rv != FX_EOVERLOAD && rv != FX_EREMOTE && rv != FX_ETOOBIG && rv != FX_ESHUTDOWN &&
           rv != FX_EREFUSED;
}

static void send_batch(pub_run *r)
{
    const pub_args *a = r->a;
    size_t n = r->n;
    if (n == 0)
        return;
    uint64_t delay = fx_cli_pacer_delay(&r->pacer, n, fx_cli_now_ns());
    if (delay > 0)
        fx_cli_sleep_ns(delay);
    fx_iov iov[BATCH_MAX];
    for (size_t i = 0; i < n; i++)
        iov[i] = (fx_iov){.data = r->arena.p + r->off[i], .len = r->len[i]};
    int rv = n == 1 ? fx_publish(r->c, a->path.ns, a->path.stream, iov[0].data, iov[0].len, a->ack)
                    : fx_publish_batch(r->c, a->path.ns, a->path.stream, iov, n, a->ack);
    fx_cli_pacer_sent(&r->pacer, n, fx_cli_now_ns());
    r->n = 0;
    fx_cli_buf_reset(&r->arena);
    if (rv == 0) {
        r->published += n;
        if (a->ack != FX_ACK_NONE)
            r->acked += n;
        return;
    }
    r->errors += n;
    if (r->errors <= ERRORS_SHOWN)
        fx_cli_report(CMD, "publish", rv);
    if (is_fatal(rv))
        r->fatal = rv;
}

/* Publishes until the source ends, a fatal error, or a signal. */
static int pub_loop(pub_run *r)
{
    const void *data;
    size_t len;
    int rv = 0;
    while (!fx_cli_stop && r->fatal == 0 && (rv = next_message(r, &data, &len)) > 0) {
        if (r->n > 0 && r->arena.len + len > BATCH_BYTES_MAX)
            send_batch(r);
        r->off[r->n] = r->arena.len;
        r->len[r->n] = len;
        if (fx_cli_buf_add(&r->arena, data, len) != 0) {
            fx_cli_errorf(CMD, "out of memory");
            return -ENOMEM;
        }
        if (++r->n == r->a->batch)
            send_batch(r);
    }
    if (!fx_cli_stop && r->fatal == 0)
        send_batch(r);
    return rv < 0 ? rv : 0;
}

static void pub_summary(const pub_run *r, double elapsed_s)
{
    char acked[32];
    if (r->a->ack == FX_ACK_NONE)
        snprintf(acked, sizeof(acked), "- (--ack none)");
    else
        snprintf(acked, sizeof(acked), "%llu", (unsigned long long)r->acked);
    fprintf(stderr,
            "felix pub: published %llu, acked %s, errors %llu, elapsed %.3f s, %.1f msg/s%s\n",
            (unsigned long long)r->published, acked, (unsigned long long)r->errors, elapsed_s,
            elapsed_s > 0 ? (double)r->published / elapsed_s : 0.0,
            r->errors > ERRORS_SHOWN ? " (only the first errors were shown)" : "");
}

/* Checkpoints 1 and 2 live in the client: what ours saw during the run. */
static void pub_client_stats(fx_client *c)
{
    fx_client_stats st;
    if (fx_client_get_stats(c, &st) != 0)
        return;
    fprintf(
        stderr,
        "felix pub: client checkpoint 1 (publish byte budget): %llu of %llu bytes held, "
        "%llu publishes waited\n"
        "felix pub: client checkpoint 2 (publish queues): %llu of %llu held, %llu publishes "
        "waited; reconnects %llu, publishes possibly lost %llu\n",
        (unsigned long long)st.publish_budget_in_use, (unsigned long long)st.publish_budget_bytes,
        (unsigned long long)st.publish_budget_waits, (unsigned long long)st.publish_queue_depth,
        (unsigned long long)st.publish_queue_capacity, (unsigned long long)st.publish_queue_waits,
        (unsigned long long)st.reconnects, (unsigned long long)st.publishes_lost);
    if (st.producer_inits > 0)
        fprintf(stderr,
                "felix pub: idempotent producer: %llu producer inits, %llu batches re-sent, "
                "%llu publishes answered duplicate, %llu refused\n",
                (unsigned long long)st.producer_inits, (unsigned long long)st.idempotent_resent,
                (unsigned long long)st.idempotent_duplicates,
                (unsigned long long)st.idempotent_refused);
}

/* Waits for what was sent, closes the client. Returns 0 or the error. */
static int pub_finish(pub_run *r)
{
    int timeout = fx_cli_stop ? 2000 : 30000;
    int rv = fx_flush(r->c, timeout);
    if (rv != 0 && r->fatal == 0)
        fx_cli_report(CMD, "flush", rv);
    if (r->a->client_stats)
        pub_client_stats(r->c);
    int crv = fx_client_close(r->c, timeout);
    r->c = NULL;
    if (crv != 0 && rv == 0 && r->fatal == 0)
        fx_cli_report(CMD, "close", crv);
    return rv != 0 ? rv : crv;
}

int fx_cli_pub(int argc, char **argv)
{
    pub_args a;
    int st = pub_parse(argc, argv, &a);
    if (st >= 0)
        return st;
    if (fx_cli_signals_install() != 0) {
        fx_cli_errorf(CMD, "cannot install signal handlers: %s", strerror(errno));
        return FX_CLI_EXIT_FAIL;
    }
    pub_run r = {.a = &a};
    if (a.size > 0 && (r.gen = malloc((size_t)a.size)) == NULL) {
        fx_cli_errorf(CMD, "out of memory");
        return FX_CLI_EXIT_FAIL;
    }
    if (fx_cli_connect(CMD, &a.common, false, &r.c) != 0) {
        free(r.gen);
        return FX_CLI_EXIT_FAIL;
    }
    uint64_t t0 = fx_cli_now_ns();
    fx_cli_pacer_init(&r.pacer, a.rate, a.rate > 10 ? (uint64_t)(a.rate / 10) : 1, t0);
    int rv = pub_loop(&r);
    int frv = pub_finish(&r);
    pub_summary(&r, (double)(fx_cli_now_ns() - t0) / 1e9);
    fx_cli_buf_free(&r.arena);
    fx_cli_buf_free(&r.line);
    free(r.gen);
    if (rv != 0 || r.errors > 0 || frv != 0)
        return FX_CLI_EXIT_FAIL;
    return fx_cli_stop ? FX_CLI_EXIT_INTR : FX_CLI_EXIT_OK;
}
