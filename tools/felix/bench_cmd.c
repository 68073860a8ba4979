/* `felix bench`: runs the benchmark harness, the felix-bench binary built
 * beside felix, with the same arguments. The harness is its own binary so
 * that it can embed an in-process broker; this subcommand is the front door
 * the CLI's users look for. Main thread. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Writes the path of felix-bench beside this executable into |out|. */
static int harness_path(char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return -errno;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return -ENOENT;
    *slash = '\0';
    int k = snprintf(out, cap, "%s/felix-bench", self);
    return k > 0 && (size_t)k < cap ? 0 : -ENAMETOOLONG;
}

int fx_cli_bench(int argc, char **argv)
{
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0))
        return fx_cli_print_help("bench");
    char path[PATH_MAX + 16];
    if (harness_path(path, sizeof(path)) != 0 || access(path, X_OK) != 0) {
        fprintf(stderr,
                "felix bench: the harness felix-bench is not beside felix (%s); build it with "
                "'make build'\n",
                path);
        return FX_CLI_EXIT_FAIL;
    }
    char **args = calloc((size_t)argc + 2, sizeof(*args));
    if (args == NULL) {
        fprintf(stderr, "felix bench: out of memory\n");
        return FX_CLI_EXIT_FAIL;
    }
    args[0] = path;
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    execv(path, args);
    fprintf(stderr, "felix bench: cannot run %s: %s\n", path, strerror(errno));
    free(args);
    return FX_CLI_EXIT_FAIL;
}
