/* `felix cluster status`: one broker's view of its cluster from the admin
 * endpoint (GET /v1/cluster, docs/cluster.md): the nodes with their
 * addresses, incarnations, leases and streams, whether this node serves and
 * why not, its deadline, counters and etcd requests, and which node owns
 * which stream. `felix cluster rebalance`: POST /v1/cluster/rebalance on one
 * node or every node (--all), printing the moves each plans. Main thread. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { O_JSON = FX_CLI_OPT_FIRST_CMD, O_DRY_RUN, O_ALL };
static const fx_cli_opt CLUSTER_OPTS[] = {FX_CLI_COMMON_OPTS,
                                          {"json", false, O_JSON},
                                          {"dry-run", false, O_DRY_RUN},
                                          {"all", false, O_ALL},
                                          {0}};

typedef struct cluster_args {
    bool json;
    bool dry_run; /* rebalance: plan only */
    bool all;     /* rebalance: every node GET /v1/cluster lists */
} cluster_args;

static int cluster_opt(void *user, int id, const char *val, char *err, size_t errlen)
{
    (void)val, (void)err, (void)errlen;
    cluster_args *a = user;
    if (id == O_JSON)
        a->json = true;
    else if (id == O_DRY_RUN)
        a->dry_run = true;
    else if (id == O_ALL)
        a->all = true;
    return 0;
}

/* The string member |key| of |o|, or "" (a broker may leave a field out). */
static const char *str_of(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s != NULL ? s : "";
}

static int cmp_nodes(const void *x, const void *y)
{
    return strcmp(str_of(*(json_t *const *)x, "node_id"), str_of(*(json_t *const *)y, "node_id"));
}

static int cmp_streams(const void *x, const void *y)
{
    const json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    int d = strcmp(str_of(a, "tenant"), str_of(b, "tenant"));
    if (d == 0)
        d = strcmp(str_of(a, "namespace"), str_of(b, "namespace"));
    return d != 0 ? d : strcmp(str_of(a, "stream"), str_of(b, "stream"));
}

/* The objects of array |a| in a new array sorted by |cmp| (NULL: out of
 * memory). */
static json_t *sorted(const json_t *a, int (*cmp)(const void *, const void *))
{
    size_t n = json_array_size(a);
    json_t **v = calloc(n ? n : 1, sizeof(*v));
    json_t *out = json_array();
    if (v == NULL || out == NULL) {
        free(v);
        json_decref(out);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (json_is_object(json_array_get(a, i)))
            v[k++] = json_array_get(a, i);
    qsort(v, k, sizeof(*v), cmp);
    for (size_t i = 0; i < k; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

/* The nodes table: one row per node, sorted by id, in a fixed column order
 * (the broker's order of fields is its own). */
static int print_nodes(const json_t *root)
{
    static const char *const cols[] = {"node_id", "addr",    "incarnation", "lease",
                                       "weight",  "streams", "admin"};
    json_t *nodes = sorted(json_object_get(root, "nodes"), cmp_nodes);
    json_t *rows = json_array();
    if (nodes == NULL || rows == NULL) {
        json_decref(nodes);
        json_decref(rows);
        return -ENOMEM;
    }
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
    {
        json_t *row = json_object();
        for (size_t k = 0; row != NULL && k < sizeof(cols) / sizeof(cols[0]); k++) {
            json_t *v = json_object_get(n, cols[k]);
            json_object_set(row, cols[k], v != NULL ? v : json_null());
        }
        json_array_append_new(rows, row);
    }
    printf("\nnodes: %zu\n", json_array_size(rows));
    if (json_array_size(rows) > 0)
        fx_cli_print_table(rows, SIZE_MAX);
    json_decref(rows);
    json_decref(nodes);
    return 0;
}

/* Which node owns which stream, sorted by tenant, namespace and stream.
 * Printed here rather than as a generic table: a stream's path may be
 * longer than a table cell. */
static int print_streams(const json_t *root)
{
    json_t *streams = sorted(json_object_get(root, "streams"), cmp_streams);
    if (streams == NULL)
        return -ENOMEM;
    size_t n = json_array_size(streams);
    char *paths = calloc(n ? n : 1, 3 * FX_CLI_NAME_MAX + 3);
    if (paths == NULL) {
        json_decref(streams);
        return -ENOMEM;
    }
    int width = (int)strlen("stream"), nwidth = (int)strlen("node");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(streams, i);
        char *p = paths + i * (3 * FX_CLI_NAME_MAX + 3);
        snprintf(p, 3 * FX_CLI_NAME_MAX + 3, "%s/%s/%s", str_of(s, "tenant"),
                 str_of(s, "namespace"), str_of(s, "stream"));
        /* Names are the tenants' choice: no terminal controls reach the screen. */
        fx_cli_cell_clean(p);
        if ((int)strlen(p) > width)
            width = (int)strlen(p);
        if ((int)strlen(str_of(s, "node")) > nwidth)
            nwidth = (int)strlen(str_of(s, "node"));
    }
    printf("\nstreams: %lld placed in the cluster, %lld here\n",
           (long long)json_integer_value(json_object_get(root, "streams_placed")),
           (long long)json_integer_value(json_object_get(root, "streams_here")));
    if (n > 0)
        printf("%-*s  %-*s  %s\n", width, "stream", nwidth, "node", "epoch");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(streams, i);
        char node[FX_CLI_NAME_MAX + 1];
        snprintf(node, sizeof(node), "%s", str_of(s, "node"));
        fx_cli_cell_clean(node);
        printf("%-*s  %-*s  %lld\n", width, paths + i * (3 * FX_CLI_NAME_MAX + 3), nwidth, node,
               (long long)json_integer_value(json_object_get(s, "epoch")));
    }
    free(paths);
    json_decref(streams);
    return 0;
}

/* The integer members of object |key| of |root| as "name value" lines under
 * |title| (nothing when absent: an older broker). */
static void print_counts(const json_t *root, const char *key, const char *title)
{
    json_t *o = json_object_get(root, key);
    if (json_object_size(o) == 0)
        return;
    printf("\n%s:\n", title);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        printf("  %-16s %lld\n", k, (long long)json_integer_value(v));
    }
}

/* The human form of a GET /v1/cluster answer. */
static int print_status(const json_t *root)
{
    bool serving = json_is_true(json_object_get(root, "serving"));
    printf("cluster %s, as node %s sees it\n", str_of(root, "cluster"), str_of(root, "node_id"));
    if (serving) {
        printf("serving: yes\n");
    } else {
        const char *why = str_of(root, "why");
        printf("serving: no: %s\n",
               why[0] ? why : "suspended: no lease keep-alive answered before the deadline");
    }
    printf("registered: %s\n", json_is_true(json_object_get(root, "registered")) ? "yes" : "no");
    printf("lease: %s (TTL %lld s), incarnation %lld, deadline in %lld ms\n", str_of(root, "lease"),
           (long long)json_integer_value(json_object_get(root, "lease_ttl_s")),
           (long long)json_integer_value(json_object_get(root, "incarnation")),
           (long long)json_integer_value(json_object_get(root, "deadline_in_ms")));
    if (print_nodes(root) != 0 || print_streams(root) != 0)
        return -ENOMEM;
    print_counts(root, "counters", "counters");
    print_counts(root, "etcd_requests", "etcd requests");
    json_t *etcd = json_object_get(root, "etcd_requests");
    json_int_t n = json_integer_value(json_object_get(etcd, "latency_count"));
    if (n > 0)
        printf("  %-16s %.3f ms\n", "mean latency",
               (double)json_integer_value(json_object_get(etcd, "latency_ns_sum")) / (double)n /
                   1e6);
    return 0;
}

static int cluster_status(const fx_cli_common *c, const cluster_args *a)
{
    fx_cli_http resp;
    if (fx_cli_admin_call("cluster", c, "GET", "/v1/cluster", &resp) != 0)
        return FX_CLI_EXIT_FAIL;
    int st = FX_CLI_EXIT_OK;
    if (a->json) {
        fputs(resp.body.p != NULL ? resp.body.p : "", stdout);
        if (resp.body.len == 0 || resp.body.p[resp.body.len - 1] != '\n')
            putchar('\n');
    } else {
        json_error_t jerr;
        json_t *root = json_loadb(resp.body.p, resp.body.len, 0, &jerr);
        if (!json_is_object(root)) {
            fx_cli_errorf("cluster", "GET /v1/cluster: not a JSON object: %s", jerr.text);
            st = FX_CLI_EXIT_FAIL;
        } else if (print_status(root) != 0) {
            fx_cli_errorf("cluster", "out of memory");
            st = FX_CLI_EXIT_FAIL;
        }
        json_decref(root);
    }
    fx_cli_buf_free(&resp.body);
    return st;
}

/* POST /v1/cluster/rebalance on the admin endpoint of |c| and prints its
 * plan. Returns an exit status. */
static int rebalance_one(const fx_cli_common *c, const cluster_args *a)
{
    fx_cli_http resp;
    const char *path = a->dry_run ? "/v1/cluster/rebalance?dry_run=1" : "/v1/cluster/rebalance";
    if (fx_cli_admin_call("cluster", c, "POST", path, &resp) != 0)
        return FX_CLI_EXIT_FAIL;
    int st = FX_CLI_EXIT_OK;
    json_error_t jerr;
    json_t *root = a->json ? NULL : json_loadb(resp.body.p, resp.body.len, 0, &jerr);
    if (a->json) {
        fputs(resp.body.p != NULL ? resp.body.p : "", stdout);
        if (resp.body.len == 0 || resp.body.p[resp.body.len - 1] != '\n')
            putchar('\n');
    } else if (!json_is_object(root)) {
        fx_cli_errorf("cluster", "POST %s: not a JSON object: %s", path, jerr.text);
        st = FX_CLI_EXIT_FAIL;
    } else {
        char node[FX_CLI_NAME_MAX + 1];
        snprintf(node, sizeof(node), "%s", str_of(root, "node_id")[0] ? str_of(root, "node_id")
                                                                       : str_of(root, "node"));
        fx_cli_cell_clean(node);
        printf("%s: %lld move%s %s\n", node,
               (long long)json_integer_value(json_object_get(root, "planned")),
               json_integer_value(json_object_get(root, "planned")) == 1 ? "" : "s",
               a->dry_run ? "planned (dry run: nothing moves)" : "started");
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(root, "moves"), i, m)
        {
            char stream[3 * FX_CLI_NAME_MAX + 3], to[FX_CLI_NAME_MAX + 1];
            snprintf(stream, sizeof(stream), "%s", str_of(m, "stream"));
            snprintf(to, sizeof(to), "%s", str_of(m, "to"));
            fx_cli_cell_clean(stream);
            fx_cli_cell_clean(to);
            printf("  %s -> %s\n", stream, to);
        }
    }
    json_decref(root);
    fx_cli_buf_free(&resp.body);
    return st;
}

/* `felix cluster rebalance`: on the node of --admin, or with --all on every
 * node its GET /v1/cluster lists with an admin address. */
static int cluster_rebalance(const fx_cli_common *c, const cluster_args *a)
{
    if (!a->all)
        return rebalance_one(c, a);
    fx_cli_http resp;
    if (fx_cli_admin_call("cluster", c, "GET", "/v1/cluster", &resp) != 0)
        return FX_CLI_EXIT_FAIL;
    json_error_t jerr;
    json_t *root = json_loadb(resp.body.p, resp.body.len, 0, &jerr);
    fx_cli_buf_free(&resp.body);
    if (!json_is_object(root)) {
        fx_cli_errorf("cluster", "GET /v1/cluster: not a JSON object: %s", jerr.text);
        json_decref(root);
        return FX_CLI_EXIT_FAIL;
    }
    json_t *nodes = sorted(json_object_get(root, "nodes"), cmp_nodes);
    int st = nodes != NULL ? FX_CLI_EXIT_OK : FX_CLI_EXIT_FAIL;
    size_t i, asked = 0;
    json_t *n;
    json_array_foreach(nodes, i, n)
    {
        const char *admin = str_of(n, "admin");
        if (admin[0] == '\0') {
            fx_cli_errorf("cluster", "node %s lists no admin address: skipped",
                          str_of(n, "node_id"));
            st = FX_CLI_EXIT_FAIL;
            continue;
        }
        fx_cli_common one = *c;
        one.admin = admin;
        asked++;
        if (rebalance_one(&one, a) != FX_CLI_EXIT_OK)
            st = FX_CLI_EXIT_FAIL;
    }
    if (nodes != NULL && asked == 0) {
        fx_cli_errorf("cluster", "no node of the cluster lists an admin address");
        st = FX_CLI_EXIT_FAIL;
    }
    json_decref(nodes);
    json_decref(root);
    return st;
}

int fx_cli_cluster(int argc, char **argv)
{
    fx_cli_common c;
    const char *pos[1];
    int npos = 0;
    cluster_args a = {0};
    int st =
        fx_cli_parse("cluster", argc, argv, CLUSTER_OPTS, &c, cluster_opt, &a, pos, 1, &npos, NULL);
    if (st >= 0)
        return st;
    if (npos == 0)
        return fx_cli_usage_error("cluster", "missing action: status or rebalance");
    if (strcmp(pos[0], "rebalance") == 0)
        return cluster_rebalance(&c, &a);
    if (strcmp(pos[0], "status") != 0)
        return fx_cli_usage_error("cluster", "unknown action: want status or rebalance");
    if (a.dry_run || a.all)
        return fx_cli_usage_error("cluster", "--dry-run and --all go with rebalance");
    return cluster_status(&c, &a);
}
