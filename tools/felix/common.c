/* Helpers shared by the felix commands: one-line errors, help output,
 * signal handling, clocks, and connecting to the broker through libfelix.
 * Main thread (the signal handler only sets a flag). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

volatile sig_atomic_t fx_cli_stop;

void fx_cli_errorf(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One line, whatever the broker's text held. */
    for (char *p = msg; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    fprintf(stderr, "felix %s: %s\n", cmd, msg);
}

int fx_cli_print_help(const char *name)
{
    const fx_cli_help *h = NULL;
    if (name != NULL && (h = fx_cli_help_find(name)) == NULL) {
        fprintf(stderr, "felix: unknown command '%s'; see 'felix --help'\n", name);
        return FX_CLI_EXIT_USAGE;
    }
    fx_cli_buf b = {0};
    int rv = fx_cli_help_text(h, &b);
    if (rv == 0)
        fputs(b.p, stdout);
    else
        fprintf(stderr, "felix: out of memory\n");
    fx_cli_buf_free(&b);
    return rv == 0 ? FX_CLI_EXIT_OK : FX_CLI_EXIT_FAIL;
}

int fx_cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "felix %s: %s (see 'felix %s --help')\n", cmd, msg, cmd);
    return FX_CLI_EXIT_USAGE;
}

int fx_cli_parse(const char *cmd, int argc, char **argv, const fx_cli_opt *opts, fx_cli_common *c,
                 fx_cli_opt_fn on_opt, void *user, const char **pos, int maxpos, int *npos,
                 const char *extra_hint)
{
    char err[512] = "";
    if (fx_cli_common_init(c, fx_cli_getenv, err, sizeof(err)) != 0)
        return fx_cli_usage_error(cmd, err);
    fx_cli_args it = {.argc = argc, .argv = argv};
    int kind, id = 0;
    const char *val;
    *npos = 0;
    while ((kind = fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err))) > 0) {
        if (kind == FX_CLI_ARG_POS) {
            if (*npos == maxpos) {
                snprintf(err, sizeof(err), "unexpected argument '%s'%s%s", val,
                         extra_hint ? " " : "", extra_hint ? extra_hint : "");
                return fx_cli_usage_error(cmd, err);
            }
            pos[(*npos)++] = val;
            continue;
        }
        if (id == FX_CLI_OPT_HELP)
            return fx_cli_print_help(cmd);
        int rv = fx_cli_common_apply(c, id, val, err, sizeof(err));
        if (rv == 0 && on_opt != NULL)
            rv = on_opt(user, id, val, err, sizeof(err));
        if (rv < 0)
            return fx_cli_usage_error(cmd, err);
    }
    if (kind < 0)
        return fx_cli_usage_error(cmd, err);
    if (fx_cli_common_finish(c, err, sizeof(err)) != 0)
        return fx_cli_usage_error(cmd, err);
    return -1;
}

const char *fx_cli_getenv(const char *name)
{
    return getenv(name);
}

/* ---- signals and clocks ------------------------------------------------------ */

static void on_signal(int sig)
{
    (void)sig;
    fx_cli_stop = 1;
}

int fx_cli_signals_install(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked read returns EINTR */
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return -errno;
    /* A closed stdout (felix sub | head) is seen as EPIPE on write. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void fx_cli_signals_block(bool block)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

uint64_t fx_cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fx_cli_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void fx_cli_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    /* An interrupting signal ends the sleep early: the caller checks
     * fx_cli_stop. */
    if (!fx_cli_stop)
        nanosleep(&ts, NULL);
}

/* ---- connecting ---------------------------------------------------------------- */

/* Describes |rv| with libfelix's last error text of this thread: the text
 * alone when it already names the error, else "<error>: <text>". */
static void describe(int rv, char *out, size_t len)
{
    char detail[512];
    fx_client_last_error(NULL, detail, sizeof(detail));
    const char *name = fx_strerror(rv);
    if (detail[0] == '\0' || strcmp(detail, name) == 0)
        snprintf(out, len, "%s", name);
    else if (strstr(detail, name) != NULL)
        snprintf(out, len, "%s", detail);
    else
        snprintf(out, len, "%s: %s", name, detail);
}

void fx_cli_report(const char *cmd, const char *what, int rv)
{
    char text[600];
    describe(rv, text, sizeof(text));
    fx_cli_errorf(cmd, "%s: %s", what, text);
}

static const char *tls_hint(int rv)
{
    switch (rv) {
    case FX_ETLS_PIN:
        return " (check --pin against the 'TLS certificate SHA-256' line felix-broker printed)";
    case FX_ETLS_UNKNOWN_CA:
        return " (pass the broker's CA with --ca, or its fingerprint with --pin)";
    case FX_ETLS_NAME:
        return " (set --server-name to a name in the broker's certificate)";
    case FX_ETIMEDOUT:
        return " (is felix-broker running there? QUIC is UDP: a closed port looks like this)";
    default:
        return "";
    }
}

int fx_cli_connect(const char *cmd, const fx_cli_common *c, bool sub_block, fx_client **pc)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    if (sub_block)
        o.sub_queue_policy = FX_POLICY_BLOCK;
    int rv = fx_client_opts_from_env(&o);
    if (rv != 0) {
        fx_cli_report(cmd, "environment", rv);
        return rv;
    }
    o.server = c->server;
    o.server_name = c->server_name;
    o.tenant = c->tenant;
    o.token = c->token;
    o.ca_file = c->ca_file;
    o.pin_sha256 = c->pin;
    o.insecure = c->insecure;
    o.connect_timeout_ms = c->timeout_ms;
    if (c->idempotent)
        o.idempotent = true;
    if (c->insecure)
        fx_cli_errorf(cmd, "warning: --insecure: the broker's certificate is not verified, so "
                           "anyone on the network path can read and change this traffic; use "
                           "--pin or --ca outside development");
    /* libfelix's loop thread starts inside connect and inherits this mask,
     * so Ctrl-C is always delivered to the main thread. */
    fx_cli_signals_block(true);
    rv = fx_client_connect(pc, &o);
    fx_cli_signals_block(false);
    if (rv != 0) {
        char text[600];
        describe(rv, text, sizeof(text));
        fx_cli_errorf(cmd, "cannot connect to %s: %s%s", c->server, text, tls_hint(rv));
    }
    return rv;
}
