/* felix: the command-line client of Felix-C. Dispatches to the command
 * (pub, sub, consume, stats, streams, groups, token, bench, log, cache, cluster) and answers
 * --help and --version. Main thread; libfelix runs its own loop thread while
 * pub, sub and consume are connected. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef FX_VERSION
#define FX_VERSION "dev"
#endif

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} command;

static const command COMMANDS[] = {
    {"pub", fx_cli_pub},         {"sub", fx_cli_sub},       {"consume", fx_cli_consume},
    {"stats", fx_cli_stats},     {"streams", fx_cli_streams}, {"groups", fx_cli_groups},
    {"token", fx_cli_token},     {"bench", fx_cli_bench},   {"log", fx_cli_log},
    {"cache", fx_cli_cache},     {"cluster", fx_cli_cluster},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "felix: missing command; see 'felix --help'\n");
        return FX_CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)
        return fx_cli_print_help(argc > 2 && strcmp(cmd, "help") == 0 ? argv[2] : NULL);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("felix %s\n", FX_VERSION);
        return FX_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++) {
        if (strcmp(cmd, COMMANDS[i].name) == 0)
            return COMMANDS[i].run(argc - 2, argv + 2);
    }
    fprintf(stderr, "felix: unknown command '%s'; see 'felix --help'\n", cmd);
    return FX_CLI_EXIT_USAGE;
}
