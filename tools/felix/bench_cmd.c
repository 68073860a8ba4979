/* `felix bench`: runs the benchmark harness, the felix-bench binary built
 * beside felix, with the same arguments. The harness is its own binary so
 * that it can embed an in-process broker; this subcommand is the front door
 * the CLI's users look for. `felix bench matrix ...` runs the matrix script
 * (bench/matrix.sh: payload x fanout x mode, Felix-C beside the peers, JSONL
 * and SVG charts) with the binaries beside felix. Main thread. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifndef FX_BENCH_DIR
#define FX_BENCH_DIR "bench"
#endif

/* Writes the directory of this executable into |out|. */
static int self_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0)
        return -errno;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash == NULL)
        return -ENOENT;
    *slash = '\0';
    return 0;
}

/* Replaces this process with |path| and the caller's arguments. Returns only
 * on failure, with the CLI's exit code. */
static int exec_with(const char *what, char *path, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 2, sizeof(*args));
    if (args == NULL) {
        fprintf(stderr, "%s: out of memory\n", what);
        return FX_CLI_EXIT_FAIL;
    }
    args[0] = path;
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    execv(path, args);
    fprintf(stderr, "%s: cannot run %s: %s\n", what, path, strerror(errno));
    free(args);
    return FX_CLI_EXIT_FAIL;
}

/* Runs bench/matrix.sh (FELIX_BENCH_DIR, else the source tree felix was built
 * from) with BUILD set to felix's own directory unless the caller set it. */
static int run_matrix(int argc, char **argv)
{
    const char *dir = getenv("FELIX_BENCH_DIR");
    char script[PATH_MAX + 16], build[PATH_MAX];
    int k = snprintf(script, sizeof(script), "%s/matrix.sh", dir ? dir : FX_BENCH_DIR);
    if (k <= 0 || (size_t)k >= sizeof(script) || access(script, X_OK) != 0) {
        fprintf(stderr,
                "felix bench matrix: cannot find the matrix script %s; set FELIX_BENCH_DIR to "
                "the bench/ folder of the Felix-C source tree\n",
                script);
        return FX_CLI_EXIT_FAIL;
    }
    if (getenv("BUILD") == NULL && self_dir(build, sizeof(build)) == 0)
        setenv("BUILD", build, 1);
    return exec_with("felix bench matrix", script, argc, argv);
}

/* Writes the path of felix-bench beside this executable into |out|. */
static int harness_path(char *out, size_t cap)
{
    char dir[PATH_MAX];
    int rv = self_dir(dir, sizeof(dir));
    if (rv != 0)
        return rv;
    int k = snprintf(out, cap, "%s/felix-bench", dir);
    return k > 0 && (size_t)k < cap ? 0 : -ENAMETOOLONG;
}

int fx_cli_bench(int argc, char **argv)
{
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0))
        return fx_cli_print_help("bench");
    if (argc > 0 && strcmp(argv[0], "matrix") == 0)
        return run_matrix(argc - 1, argv + 1);
    char path[PATH_MAX + 16];
    if (harness_path(path, sizeof(path)) != 0 || access(path, X_OK) != 0) {
        fprintf(stderr,
                "felix bench: the harness felix-bench is not beside felix (%s); build it with "
                "'make build'\n",
                path);
        return FX_CLI_EXIT_FAIL;
    }
    return exec_with("felix bench", path, argc, argv);
}
