/* `felix cache put|get|del`: one request to the broker's key-value cache
 * (docs/cache.md) through libfelix's fx_cache_* calls. put takes the value
 * from the command line or, with '-', all of standard input (binary-safe);
 * get writes the value raw to standard output. A miss exits 1 with one
 * line on standard error. Main thread; libfelix sends on its loop thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define CMD "cache"
/* Largest value read from stdin: the default max frame (base64 makes it a
 * third larger on the wire; the broker's cache_max_value_bytes, 1 MiB by
 * default, refuses more first). */
#define VALUE_MAX (16u << 20)

enum { O_TTL = FX_CLI_OPT_FIRST_CMD };

static const fx_cli_opt CACHE_OPTS[] = {
    FX_CLI_COMMON_OPTS,
    {"ttl-ms", true, O_TTL},
    {0},
};

typedef struct cache_args {
    fx_cli_common common;
    const char *op;   /* put, get, del */
    fx_cli_path path; /* stream: the cache's name */
    const char *key;
    const char *value; /* put; NULL with '-' */
    uint64_t ttl_ms;
    bool ttl_set;
} cache_args;

static int cache_option(void *user, int id, const char *val, char *err, size_t errlen)
{
    cache_args *a = user;
    if (id != O_TTL)
        return 0;
    if (fx_cli_parse_u64(val, (uint64_t)INT64_MAX, &a->ttl_ms) == 0 && a->ttl_ms > 0) {
        a->ttl_set = true;
        return 0;
    }
    snprintf(err, errlen, "--ttl-ms: expected a positive number of milliseconds, got '%s'", val);
    return -EINVAL;
}

/* NS/CACHE (the tenant from --tenant, FELIX_TENANT or t1) or
 * TENANT/NS/CACHE (checked against --tenant as for pub). */
static int parse_scope(const char *s, cache_args *a, bool *with_tenant, char *err, size_t errlen)
{
    int slashes = 0;
    for (const char *p = s; *p != '\0'; p++)
        slashes += *p == '/';
    if (slashes == 2) {
        *with_tenant = true;
        return fx_cli_path_parse(s, &a->path, err, errlen);
    }
    *with_tenant = false;
    char buf[2 * FX_CLI_NAME_MAX + 16];
    if (slashes != 1 || strlen(s) >= sizeof(buf) - 4) {
        snprintf(err, errlen, "expected NS/CACHE or TENANT/NS/CACHE, got '%s'", s);
        return -EINVAL;
    }
    /* The path parser checks the segments: give it a placeholder tenant. */
    snprintf(buf, sizeof(buf), "t/%s", s);
    int rv = fx_cli_path_parse(buf, &a->path, err, errlen);
    if (rv != 0)
        snprintf(err, errlen, "expected NS/CACHE or TENANT/NS/CACHE, got '%s'", s);
    return rv;
}

/* Returns -1 to continue, or the exit status (help shown, usage error). */
static int cache_parse(int argc, char **argv, cache_args *a)
{
    *a = (cache_args){0};
    const char *pos[4];
    int npos;
    int st = fx_cli_parse(CMD, argc, argv, CACHE_OPTS, &a->common, cache_option, a, pos, 4, &npos,
                          "(quote a value containing spaces)");
    if (st >= 0)
        return st;
    if (npos == 0)
        return fx_cli_usage_error(CMD, "missing put, get or del");
    a->op = pos[0];
    bool put = strcmp(a->op, "put") == 0;
    if (!put && strcmp(a->op, "get") != 0 && strcmp(a->op, "del") != 0)
        return fx_cli_usage_error(CMD, "expected put, get or del");
    int want = put ? 4 : 3;
    if (npos < 2)
        return fx_cli_usage_error(CMD, "missing NS/CACHE");
    if (npos < 3)
        return fx_cli_usage_error(CMD, "missing KEY");
    if (npos < want)
        return fx_cli_usage_error(CMD, "missing VALUE ('-' reads it from stdin)");
    if (npos > want)
        return fx_cli_usage_error(CMD, "too many arguments (quote a value containing spaces)");
    if (a->ttl_set && !put)
        return fx_cli_usage_error(CMD, "--ttl-ms applies to put only");
    char err[512] = "";
    bool with_tenant = false;
    if (parse_scope(pos[1], a, &with_tenant, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    a->key = pos[2];
    if (a->key[0] == '\0')
        return fx_cli_usage_error(CMD, "KEY is empty");
    if (put && strcmp(pos[3], "-") != 0)
        a->value = pos[3];
    if (fx_cli_common_check(&a->common, with_tenant ? &a->path : NULL, err, sizeof(err)) != 0)
        return fx_cli_usage_error(CMD, err);
    return -1;
}

/* Reads all of stdin into |out|. Returns 0, or -E2BIG / -errno. */
static int read_all(fx_cli_buf *out)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR && !fx_cli_stop)
                continue;
            return -errno;
        }
        if (out->len + (size_t)n > VALUE_MAX)
            return -E2BIG;
        if (fx_cli_buf_add(out, chunk, (size_t)n) != 0)
            return -ENOMEM;
    }
}

static int write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int run(const cache_args *a, fx_client *c, const void *value, size_t vlen)
{
    const char *ns = a->path.ns, *cache = a->path.stream;
    if (strcmp(a->op, "put") == 0) {
        int rv = fx_cache_put(c, ns, cache, a->key, value, vlen, a->ttl_ms);
        if (rv != 0) {
            fx_cli_report(CMD, "put", rv);
            return FX_CLI_EXIT_FAIL;
        }
        return FX_CLI_EXIT_OK;
    }
    if (strcmp(a->op, "get") == 0) {
        void *v = NULL;
        size_t n = 0;
        int rv = fx_cache_get_alloc(c, ns, cache, a->key, &v, &n);
        if (rv == FX_ENOTFOUND) {
            fx_cli_errorf(CMD, "get: %s/%s/%s key '%s' not found", a->common.tenant, ns, cache,
                          a->key);
            return FX_CLI_EXIT_FAIL;
        }
        if (rv != 0) {
            fx_cli_report(CMD, "get", rv);
            return FX_CLI_EXIT_FAIL;
        }
        rv = write_all(v, n);
        free(v);
        if (rv != 0) {
            fx_cli_errorf(CMD, "get: writing stdout: %s", strerror(-rv));
            return FX_CLI_EXIT_FAIL;
        }
        return FX_CLI_EXIT_OK;
    }
    bool existed = false;
    int rv = fx_cache_delete(c, ns, cache, a->key, &existed);
    if (rv != 0) {
        fx_cli_report(CMD, "del", rv);
        return FX_CLI_EXIT_FAIL;
    }
    printf("%s\n", existed ? "deleted" : "not found");
    return existed ? FX_CLI_EXIT_OK : FX_CLI_EXIT_FAIL;
}

int fx_cli_cache(int argc, char **argv)
{
    cache_args a;
    int st = cache_parse(argc, argv, &a);
    if (st >= 0)
        return st;
    if (fx_cli_signals_install() != 0) {
        fx_cli_errorf(CMD, "cannot install signal handlers: %s", strerror(errno));
        return FX_CLI_EXIT_FAIL;
    }
    fx_cli_buf in = {0};
    const void *value = a.value;
    size_t vlen = a.value != NULL ? strlen(a.value) : 0;
    if (strcmp(a.op, "put") == 0 && a.value == NULL) {
        int rv = read_all(&in);
        if (rv != 0) {
            fx_cli_errorf(CMD, "put: reading stdin: %s",
                          rv == -E2BIG ? "value larger than 16 MiB" : strerror(-rv));
            fx_cli_buf_free(&in);
            return FX_CLI_EXIT_FAIL;
        }
        value = in.p != NULL ? in.p : "";
        vlen = in.len;
    }
    fx_client *c = NULL;
    if (fx_cli_connect(CMD, &a.common, false, &c) != 0) {
        fx_cli_buf_free(&in);
        return FX_CLI_EXIT_FAIL;
    }
    st = run(&a, c, value, vlen);
    int crv = fx_client_close(c, 5000);
    if (crv != 0 && st == FX_CLI_EXIT_OK) {
        fx_cli_report(CMD, "close", crv);
        st = FX_CLI_EXIT_FAIL;
    }
    fx_cli_buf_free(&in);
    return st;
}
