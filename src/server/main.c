/* felix-broker: the broker daemon. Loads and validates the configuration
 * (defaults < YAML < FELIX_* environment < --set flags), prints or checks it
 * on request, and otherwise serves what exists: the admin HTTP endpoint
 * (/metrics, /live, /ready) until SIGINT or SIGTERM. The QUIC data plane is
 * not built yet and the daemon says so at start rather than pretending.
 * Main thread only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "felix/error.h"
#include "server/admin.h"
#include "server/config.h"

extern char **environ;

/* Exit statuses (docs/configuration.md). */
enum {
    EXIT_CONFIG = 1, /* the configuration is invalid */
    EXIT_USAGE = 2,  /* bad command line */
    EXIT_START = 4,  /* a listener could not start (address in use, ...) */
};

/* The original's implicit config path; we read files only when told to. */
#define ORIGINAL_CONFIG_PATH "/usr/local/felix/config.yml"

struct opts {
    const char *config;
    bool dev, print, markdown, check;
    const char **sets;
    size_t nsets;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: felix-broker [--config FILE | --dev] [--set key=value]...\n"
            "                    [--print-config [--markdown]] [--check-config]\n"
            "                    [--version] [--help]\n"
            "\n"
            "  --config FILE    YAML configuration (default: $FELIX_BROKER_CONFIG, else none)\n"
            "  --dev            use the built-in development configuration\n"
            "                   (QUIC 127.0.0.1:5000, admin 127.0.0.1:8080, ./build/run-state)\n"
            "  --set key=value  override one key; wins over the file and FELIX_* variables\n"
            "  --print-config   print the effective configuration and where each value\n"
            "                   came from, then exit\n"
            "  --markdown       with --print-config: print the key reference as Markdown\n"
            "  --check-config   validate the configuration; exit 0 if valid, 1 if not\n"
            "\n"
            "Precedence: defaults < file < environment < --set. Every key is described in\n"
            "docs/configuration.md.\n"
            "\n"
            "example:\n"
            "  felix-broker --config /etc/felix/broker.yaml --set pub_queue_depth=128 \\\n"
            "               --set subscriber_queue_policy=block --print-config\n"
            "\n"
            "exit status: 0 ok, 1 invalid configuration, 2 usage error,\n"
            "             3 configuration valid but the QUIC data plane is not built yet\n");
}

/* Returns the value of option |name| at argv[*i] ("--name=v" or "--name v"),
 * advancing *i past a separate value; NULL if argv[*i] is not that option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* Parses the command line into |o|. Returns 0, 1 for --help/--version (already
 * answered), or EXIT_USAGE. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--config", &missing)))
            o->config = v;
        else if ((v = opt_value(argc, argv, &i, "--set", &missing)))
            o->sets[o->nsets++] = v;
        else if (missing) {
            fprintf(stderr, "felix-broker: %s needs a value\n", argv[i]);
            return EXIT_USAGE;
        } else if (!strcmp(argv[i], "--dev"))
            o->dev = true;
        else if (!strcmp(argv[i], "--print-config"))
            o->print = true;
        else if (!strcmp(argv[i], "--markdown"))
            o->markdown = true;
        else if (!strcmp(argv[i], "--check-config"))
            o->check = true;
        else if (!strcmp(argv[i], "--version")) {
            printf("felix-broker %s\n", FX_VERSION);
            return 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else {
            fprintf(stderr, "felix-broker: unknown argument '%s' (try --help)\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (o->dev && o->config) {
        fprintf(stderr, "felix-broker: --dev and --config are exclusive\n");
        return EXIT_USAGE;
    }
    if (o->markdown && !o->print) {
        fprintf(stderr, "felix-broker: --markdown goes with --print-config\n");
        return EXIT_USAGE;
    }
    return 0;
}

static void log_warnings(const fx_config_diag *d)
{
    for (size_t i = 0; i < d->nwarnings; i++)
        fprintf(stderr, "felix-broker: warning: %s\n", d->warnings[i]);
    if (d->warnings_dropped)
        fprintf(stderr, "felix-broker: warning: %zu more warnings not shown\n",
                d->warnings_dropped);
}

/* The original read ORIGINAL_CONFIG_PATH when present; say so rather than
 * silently ignore a file an operator may expect to apply. */
static void warn_original_path(const struct opts *o)
{
    if (o->config || o->dev || getenv("FELIX_BROKER_CONFIG"))
        return;
    if (access(ORIGINAL_CONFIG_PATH, F_OK) == 0)
        fprintf(stderr,
                "felix-broker: warning: %s exists but is not read; pass --config to use it\n",
                ORIGINAL_CONFIG_PATH);
}

/* Serves the admin endpoint until SIGINT/SIGTERM; /ready turns 503 as soon
 * as the signal arrives. Returns 0 or EXIT_START. */
static int serve(const fx_config *c)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts */

    char err[256];
    fx_admin *admin = NULL;
    fx_admin_opts ao = {.bind = c->metrics_bind};
    int rv = fx_admin_start(&admin, &ao, err, sizeof(err));
    if (rv) {
        fprintf(stderr, "felix-broker: %s\n", err);
        return EXIT_START;
    }
    printf("felix-broker %s: admin HTTP on %s (port %u): /metrics /live /ready\n", FX_VERSION,
           c->metrics_bind, (unsigned)fx_admin_port(admin));
    printf("felix-broker: the QUIC data plane (%s) is not built yet: publish and subscribe "
           "are not served. Stop with Ctrl-C.\n",
           c->quic_bind);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fx_admin_set_draining(admin, true);
    fprintf(stderr, "felix-broker: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    fx_admin_free(admin);
    return 0;
}

static int run(const struct opts *o)
{
    fx_config c;
    fx_config_diag d;
    fx_config_src src = {.path = o->config,
                         .text = o->dev ? fx_config_dev_yaml : NULL,
                         .text_name = "<--dev>",
                         .envp = environ,
                         .sets = o->sets,
                         .nsets = o->nsets};
    fx_config_defaults(&c);
    warn_original_path(o);
    int rv = fx_config_load(&c, &src, &d);
    log_warnings(&d);
    if (rv) {
        fprintf(stderr, "felix-broker: invalid configuration: %s\n",
                d.error[0] ? d.error : fx_strerror(rv));
        fx_config_deinit(&c);
        return EXIT_CONFIG;
    }
    int status = 0;
    if (o->print) {
        status = fx_config_print(&c, stdout) ? EXIT_CONFIG : 0;
    } else if (o->check) {
        printf("felix-broker: configuration is valid\n");
    } else {
        status = serve(&c);
    }
    fx_config_deinit(&c);
    return status;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    o.sets = calloc((size_t)argc, sizeof(*o.sets));
    if (!o.sets) {
        fprintf(stderr, "felix-broker: out of memory\n");
        return EXIT_CONFIG;
    }
    int rv = parse_args(argc, argv, &o);
    if (rv == 1) /* --help or --version answered */
        rv = 0;
    else if (rv == 0 && o.markdown)
        rv = fx_config_print_markdown(stdout) ? EXIT_CONFIG : 0;
    else if (rv == 0)
        rv = run(&o);
    free(o.sets);
    return rv;
}
