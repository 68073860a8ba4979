/* `felix stats`, `felix streams` and `felix groups`: read the broker's admin
 * endpoint (GET /metrics, /v1/subscriptions, /v1/streams; PUT and DELETE of
 * /v1/streams/T/NS/S; the consumer groups under /v1/streams/T/NS/S/groups)
 * and print what it says, or exactly why it could not; the admin call and the
 * JSON table are shared with `felix cluster` (cluster_cmd.c). Main thread. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define HTTP_TIMEOUT_MS 10000
/* Columns and cell width of the generic JSON tables. */
#define MAX_COLS 12
#define CELL_MAX 40

/* ---- shared ------------------------------------------------------------------ */

/* The broker's reason in |body|: the "error" member of a JSON object, else
 * the first line; at most 200 bytes, cleaned for the terminal, in |out|. */
static void body_reason(const char *body, size_t len, char *out, size_t cap)
{
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    const char *msg = json_string_value(json_object_get(j, "error"));
    int n = msg != NULL ? (int)strlen(msg) : (int)strcspn(body, "\r\n");
    snprintf(out, cap, "%.*s", n > 200 ? 200 : n, msg != NULL ? msg : body);
    json_decref(j);
    fx_cli_cell_clean(out);
}

/* Prints why a non-2xx answer is a failure, with the broker's reason. */
static void http_status_error(const char *cmd, const char *method, const char *url,
                              const fx_cli_http *resp)
{
    const char *body = resp->body.p != NULL ? resp->body.p : "";
    char reason[208];
    body_reason(body, resp->body.p != NULL ? resp->body.len : 0, reason, sizeof(reason));
    int blen = (int)strlen(reason);
    const char *hint = "";
    if (resp->status == 404 && strstr(url, "/v1/cluster") != NULL)
        hint = ""; /* the broker's sentence says it: a standalone broker */
    else if (resp->status == 404 && strstr(url, "/groups") != NULL)
        hint = " (no such stream or group, or this broker does not serve consumer groups yet)";
    else if (resp->status == 404 && strstr(url, "/v1/streams/") != NULL)
        hint = " (no such stream, or this broker does not serve the stream admin API yet)";
    else if (resp->status == 404)
        hint = " (this broker does not serve this route yet)";
    else if (resp->status == 401)
        hint = " (pass --admin-token-file FILE or set FELIX_ADMIN_TOKEN)";
    else if (resp->status == 503)
        hint = " (the broker is busy or draining)";
    fx_cli_errorf(cmd, "%s %s: HTTP %ld%s%s%s", method, url, resp->status, blen ? ": " : "", reason,
                  hint);
}

/* GETs/PUTs/DELETEs |path| on the admin endpoint. Returns 0 with a 2xx
 * answer in |resp| (free its body), or 1 after printing the failure. */
static int admin_call_body(const char *cmd, const fx_cli_common *c, const char *method,
                           const char *path, const char *body, fx_cli_http *resp);

static int admin_call(const char *cmd, const fx_cli_common *c, const char *method, const char *path,
                      fx_cli_http *resp)
{
    return admin_call_body(cmd, c, method, path, NULL, resp);
}

static int admin_call_body(const char *cmd, const fx_cli_common *c, const char *method,
                           const char *path, const char *body, fx_cli_http *resp)
{
    char url[2048], err[1024];
    if (fx_cli_admin_url(c->admin, path, url, sizeof(url)) != 0) {
        fx_cli_errorf(cmd, "--admin: bad address '%s'", c->admin);
        return 1;
    }
    if (fx_cli_http_request_body(method, url, c->admin_token, body, HTTP_TIMEOUT_MS, resp, err,
                                 sizeof(err)) != 0) {
        fx_cli_errorf(cmd, "%s (is felix-broker's admin endpoint at %s? see --admin)", err,
                      c->admin);
        return 1;
    }
    if (resp->status < 200 || resp->status > 299) {
        http_status_error(cmd, method, url, resp);
        fx_cli_buf_free(&resp->body);
        return 1;
    }
    return 0;
}

int fx_cli_admin_call(const char *cmd, const fx_cli_common *c, const char *method, const char *path,
                      fx_cli_http *resp)
{
    return admin_call_body(cmd, c, method, path, NULL, resp);
}

/* ---- generic JSON tables ------------------------------------------------------- */

static void cell_text(const json_t *v, char *out, size_t len)
{
    if (v == NULL || json_is_null(v)) {
        snprintf(out, len, "-");
    } else if (json_is_string(v)) {
        snprintf(out, len, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(out, len, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(out, len, "%.6g", json_real_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(out, len, "%s", json_is_true(v) ? "true" : "false");
    } else {
        char *s = json_dumps(v, JSON_COMPACT);
        snprintf(out, len, "%s", s != NULL ? s : "?");
        free(s);
    }
    /* Names are the tenants' choice: no terminal controls or bidi overrides
     * reach the operator's screen. */
    fx_cli_cell_clean(out);
}

/* Collects up to MAX_COLS keys of the objects in |rows|, in order of first
 * appearance. */
static size_t collect_cols(const json_t *rows, const char **cols)
{
    size_t ncols = 0, i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const char *k;
        json_t *v;
        json_object_foreach(row, k, v)
        {
            size_t j = 0;
            while (j < ncols && strcmp(cols[j], k) != 0)
                j++;
            if (j == ncols && ncols < MAX_COLS)
                cols[ncols++] = k;
        }
    }
    return ncols;
}

/* Prints the objects of |rows| (first |limit|) as an aligned table. */
static void print_table(const json_t *rows, size_t limit)
{
    const char *cols[MAX_COLS];
    size_t ncols = collect_cols(rows, cols);
    int width[MAX_COLS];
    char cell[CELL_MAX + 1];
    size_t n = json_array_size(rows) < limit ? json_array_size(rows) : limit;
    for (size_t j = 0; j < ncols; j++) {
        width[j] = (int)strlen(cols[j]);
        for (size_t i = 0; i < n; i++) {
            cell_text(json_object_get(json_array_get(rows, i), cols[j]), cell, sizeof(cell));
            if ((int)strlen(cell) > width[j])
                width[j] = (int)strlen(cell);
        }
    }
    for (size_t j = 0; j < ncols; j++)
        printf("%-*s%s", width[j], cols[j], j + 1 < ncols ? "  " : "\n");
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < ncols; j++) {
            cell_text(json_object_get(json_array_get(rows, i), cols[j]), cell, sizeof(cell));
            printf("%-*s%s", width[j], cell, j + 1 < ncols ? "  " : "\n");
        }
    }
}

void fx_cli_print_table(const struct json_t *rows, size_t limit)
{
    print_table(rows, limit);
}

/* Returns the array of objects in |root| (the root itself, or its member
 * |key|), or NULL when the document has another shape. */
static json_t *object_rows(json_t *root, const char *key)
{
    json_t *a = json_is_array(root) ? root : json_object_get(root, key);
    if (!json_is_array(a))
        return NULL;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_object(v))
            return NULL;
    }
    return a;
}

/* ---- felix stats ------------------------------------------------------------------- */

enum { O_INTERVAL = FX_CLI_OPT_FIRST_CMD, O_SUBS, O_TOP };

static const fx_cli_opt STATS_OPTS[] = {
    FX_CLI_COMMON_OPTS,
    {"interval", true, O_INTERVAL},
    {"subs", false, O_SUBS},
    {"top", true, O_TOP},
    {0},
};

typedef struct stats_args {
    uint64_t interval_ms;
    uint64_t top;
    bool subs;
} stats_args;

static int stats_opt(void *user, int id, const char *val, char *err, size_t errlen)
{
    stats_args *a = user;
    switch (id) {
    case O_INTERVAL:
        if (fx_cli_parse_u64(val, 3600000, &a->interval_ms) == 0 && a->interval_ms > 0)
            return 0;
        snprintf(err, errlen, "--interval: expected 1..3600000 ms, got '%s'", val);
        return -EINVAL;
    case O_SUBS:
        a->subs = true;
        return 0;
    case O_TOP:
        if (fx_cli_parse_u64(val, 1000000, &a->top) == 0 && a->top > 0)
            return 0;
        snprintf(err, errlen, "--top: expected a positive integer, got '%s'", val);
        return -EINVAL;
    default:
        return 0;
    }
}

/* Scrapes /metrics into |p|. Returns 0 or 1 (failure printed). */
static int scrape(const fx_cli_common *c, fx_cli_prom *p)
{
    fx_cli_http resp;
    if (admin_call("stats", c, "GET", "/metrics", &resp) != 0)
        return 1;
    char err[256];
    int rv = fx_cli_prom_parse(p, resp.body.p, resp.body.len, err, sizeof(err));
    fx_cli_buf_free(&resp.body);
    if (rv != 0) {
        fx_cli_errorf("stats", "GET /metrics: %s", rv == -ENOMEM ? "out of memory" : err);
        return 1;
    }
    return 0;
}

/* Sort key of a subscription: its queue depth, then its drops. */
static double sub_key(const json_t *o, const char *word)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        if (strstr(k, word) != NULL && json_is_number(v))
            return json_number_value(v);
    }
    return 0;
}

static int cmp_subs(const void *x, const void *y)
{
    const json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    double da = sub_key(a, "depth"), db = sub_key(b, "depth");
    if (da != db)
        return da < db ? 1 : -1;
    da = sub_key(a, "drop"), db = sub_key(b, "drop");
    return da < db ? 1 : da > db ? -1 : 0;
}

/* Prints the subscriptions from /v1/subscriptions, slowest first. */
static int print_subs(const fx_cli_common *c, uint64_t top)
{
    fx_cli_http resp;
    if (admin_call("stats", c, "GET", "/v1/subscriptions", &resp) != 0)
        return 1;
    json_error_t jerr;
    json_t *root = json_loadb(resp.body.p, resp.body.len, 0, &jerr);
    json_t *rows = root != NULL ? object_rows(root, "subscriptions") : NULL;
    int st = 0;
    if (rows == NULL) {
        /* Not the expected shape: show it as the broker sent it. */
        printf("\n/v1/subscriptions:\n%s\n", resp.body.p);
    } else {
        size_t n = json_array_size(rows);
        json_t **v = calloc(n ? n : 1, sizeof(*v));
        json_t *sorted = json_array();
        if (v == NULL || sorted == NULL) {
            fx_cli_errorf("stats", "out of memory");
            st = 1;
        } else {
            for (size_t i = 0; i < n; i++)
                v[i] = json_array_get(rows, i);
            qsort(v, n, sizeof(*v), cmp_subs);
            for (size_t i = 0; i < n; i++)
                json_array_append(sorted, v[i]);
            printf("\nsubscriptions: %zu (deepest queue first%s)\n", n,
                   n > top ? ", truncated by --top" : "");
            if (n > 0)
                print_table(sorted, (size_t)top);
        }
        free(v);
        json_decref(sorted);
    }
    json_decref(root);
    fx_cli_buf_free(&resp.body);
    return st;
}

int fx_cli_stats(int argc, char **argv)
{
    fx_cli_common c;
    stats_args a = {.top = 20};
    int npos = 0;
    int st = fx_cli_parse("stats", argc, argv, STATS_OPTS, &c, stats_opt, &a, NULL, 0, &npos, NULL);
    if (st >= 0)
        return st;
    if (fx_cli_signals_install() != 0)
        return FX_CLI_EXIT_FAIL;
    fx_cli_prom prev = {0}, cur = {0};
    fx_cli_stat_row rows[64];
    double dt = 0;
    st = FX_CLI_EXIT_FAIL;
    if (scrape(&c, a.interval_ms ? &prev : &cur) != 0)
        goto out;
    if (a.interval_ms > 0) {
        uint64_t t0 = fx_cli_now_ns();
        fx_cli_sleep_ns(a.interval_ms * 1000000u);
        if (fx_cli_stop)
            goto out;
        dt = (double)(fx_cli_now_ns() - t0) / 1e9;
        if (scrape(&c, &cur) != 0)
            goto out;
    }
    fx_cli_stats_rows(&cur, a.interval_ms ? &prev : NULL, dt, rows);
    fx_cli_buf table = {0};
    if (fx_cli_stats_table(rows, fx_cli_stats_nrows(), &table) != 0) {
        fx_cli_errorf("stats", "out of memory");
        fx_cli_buf_free(&table);
        goto out;
    }
    fputs(table.p, stdout);
    fx_cli_buf_free(&table);
    st = a.subs ? print_subs(&c, a.top) : FX_CLI_EXIT_OK;
out:
    fx_cli_prom_free(&prev);
    fx_cli_prom_free(&cur);
    return st;
}

/* ---- felix streams -------------------------------------------------------------- */

enum { O_DURABLE = FX_CLI_OPT_FIRST_CMD, O_RET_BYTES, O_RET_SECONDS };
static const fx_cli_opt STREAMS_OPTS[] = {FX_CLI_COMMON_OPTS,
                                          {"durable", false, O_DURABLE},
                                          {"retention-bytes", true, O_RET_BYTES},
                                          {"retention-seconds", true, O_RET_SECONDS},
                                          {0}};

/* Bounds of the broker's per-stream retention overrides. */
#define RET_MAX_BYTES (1024ull << 40)
#define RET_MAX_SECONDS (100000ull * 3600ull)

typedef struct streams_args {
    bool durable;
    bool set_bytes, set_seconds; /* given; value 0 = "none" (drop the override) */
    uint64_t bytes, seconds;
} streams_args;

/* Reads a retention bound: "none", or 1..|max| (bytes may end in K, M, G). */
static int retention_arg(const char *flag, const char *val, uint64_t max, bool size, uint64_t *out,
                         char *err, size_t errlen)
{
    if (strcmp(val, "none") == 0) {
        *out = 0;
        return 0;
    }
    int rv = size ? fx_cli_parse_size(val, max, out) : fx_cli_parse_u64(val, max, out);
    if (rv == 0 && *out > 0)
        return 0;
    snprintf(err, errlen, "--%s: expected %s1..%llu or none, got '%s'", flag,
             size ? "a size (K, M, G suffixes) " : "", (unsigned long long)max, val);
    return -EINVAL;
}

static int streams_opt(void *user, int id, const char *val, char *err, size_t errlen)
{
    streams_args *a = user;
    switch (id) {
    case O_DURABLE:
        a->durable = true;
        return 0;
    case O_RET_BYTES:
        a->set_bytes = true;
        return retention_arg("retention-bytes", val, RET_MAX_BYTES, true, &a->bytes, err, errlen);
    case O_RET_SECONDS:
        a->set_seconds = true;
        return retention_arg("retention-seconds", val, RET_MAX_SECONDS, false, &a->seconds, err,
                             errlen);
    default:
        return 0;
    }
}

/* The JSON body of create / set: NULL when there is nothing to send. */
static char *streams_body(const streams_args *a)
{
    if (!a->durable && !a->set_bytes && !a->set_seconds)
        return NULL;
    json_t *j = json_object();
    if (j == NULL)
        return NULL;
    if (a->durable)
        json_object_set_new(j, "durable", json_true());
    if (a->set_bytes)
        json_object_set_new(j, "retention_bytes",
                            a->bytes ? json_integer((json_int_t)a->bytes) : json_null());
    if (a->set_seconds)
        json_object_set_new(j, "retention_seconds",
                            a->seconds ? json_integer((json_int_t)a->seconds) : json_null());
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* Builds "/v1/streams/T/NS/S" with each name URL-escaped. */
static int stream_route(const fx_cli_path *p, char *out, size_t len)
{
    CURL *h = curl_easy_init();
    if (h == NULL)
        return -ENOMEM;
    char *t = curl_easy_escape(h, p->tenant, 0);
    char *n = curl_easy_escape(h, p->ns, 0);
    char *s = curl_easy_escape(h, p->stream, 0);
    int rv = -ENOMEM;
    if (t != NULL && n != NULL && s != NULL) {
        int w = snprintf(out, len, "/v1/streams/%s/%s/%s", t, n, s);
        rv = w > 0 && (size_t)w < len ? 0 : -EINVAL;
    }
    curl_free(t);
    curl_free(n);
    curl_free(s);
    curl_easy_cleanup(h);
    return rv;
}

static int streams_ls(const fx_cli_common *c)
{
    fx_cli_http resp;
    if (admin_call("streams", c, "GET", "/v1/streams", &resp) != 0)
        return FX_CLI_EXIT_FAIL;
    json_error_t jerr;
    json_t *root = json_loadb(resp.body.p, resp.body.len, 0, &jerr);
    json_t *rows = root != NULL ? object_rows(root, "streams") : NULL;
    json_t *list = json_is_array(root) ? root : json_object_get(root, "streams");
    if (rows != NULL && json_array_size(rows) > 0) {
        print_table(rows, SIZE_MAX);
    } else if (json_is_array(list)) {
        size_t i;
        json_t *v;
        char cell[FX_CLI_NAME_MAX * 3 + 8];
        json_array_foreach(list, i, v)
        {
            cell_text(v, cell, sizeof(cell));
            printf("%s\n", cell);
        }
    } else {
        fputs(resp.body.p, stdout);
        if (resp.body.len > 0 && resp.body.p[resp.body.len - 1] != '\n')
            putchar('\n');
    }
    json_decref(root);
    fx_cli_buf_free(&resp.body);
    return FX_CLI_EXIT_OK;
}

/* Prints " (retention bytes=N seconds=S)" from a PUT/PATCH answer, when it
 * carries the overrides. */
static void print_retention(const fx_cli_http *resp)
{
    json_error_t jerr;
    json_t *j = json_loadb(resp->body.p, resp->body.len, 0, &jerr);
    json_t *b = json_object_get(j, "retention_bytes"), *s = json_object_get(j, "retention_seconds");
    if (b != NULL || s != NULL) {
        char cb[32] = "none", cs[32] = "none";
        if (json_is_integer(b))
            snprintf(cb, sizeof(cb), "%lld", (long long)json_integer_value(b));
        if (json_is_integer(s))
            snprintf(cs, sizeof(cs), "%lld", (long long)json_integer_value(s));
        printf(" (retention bytes=%s seconds=%s)", cb, cs);
    }
    json_decref(j);
}

/* create, set or delete of one stream. */
static int streams_one(const fx_cli_common *c, const char *action, const char *arg,
                       const streams_args *a)
{
    bool create = strcmp(action, "create") == 0, set = strcmp(action, "set") == 0;
    fx_cli_path path;
    char err[512], route[3 * 3 * FX_CLI_NAME_MAX + 32];
    if (fx_cli_path_parse(arg, &path, err, sizeof(err)) != 0)
        return fx_cli_usage_error("streams", err);
    if (stream_route(&path, route, sizeof(route)) != 0) {
        fx_cli_errorf("streams", "out of memory");
        return FX_CLI_EXIT_FAIL;
    }
    char *body = create || set ? streams_body(a) : NULL;
    if ((create || set) && body == NULL && (a->durable || a->set_bytes || a->set_seconds)) {
        fx_cli_errorf("streams", "out of memory");
        return FX_CLI_EXIT_FAIL;
    }
    fx_cli_http resp;
    const char *method = create ? "PUT" : set ? "PATCH" : "DELETE";
    int st = admin_call_body("streams", c, method, route, body, &resp);
    free(body);
    if (st != 0)
        return FX_CLI_EXIT_FAIL;
    printf("%s %s/%s/%s%s",
           create ? "created"
           : set  ? "changed"
                  : "deleted",
           path.tenant, path.ns, path.stream, a->durable ? " (durable)" : "");
    if (create || set)
        print_retention(&resp);
    putchar('\n');
    fx_cli_buf_free(&resp.body);
    return FX_CLI_EXIT_OK;
}

int fx_cli_streams(int argc, char **argv)
{
    fx_cli_common c;
    const char *pos[2];
    int npos = 0;
    streams_args a = {0};
    int st =
        fx_cli_parse("streams", argc, argv, STREAMS_OPTS, &c, streams_opt, &a, pos, 2, &npos, NULL);
    if (st >= 0)
        return st;
    if (npos == 0)
        return fx_cli_usage_error("streams", "missing action: ls, create, set or delete");
    bool retention = a.set_bytes || a.set_seconds;
    if (strcmp(pos[0], "ls") == 0 || strcmp(pos[0], "list") == 0) {
        if (npos > 1)
            return fx_cli_usage_error("streams", "ls takes no stream path");
        if (a.durable || retention)
            return fx_cli_usage_error("streams", "ls takes no --durable or --retention-*");
        return streams_ls(&c);
    }
    bool create = strcmp(pos[0], "create") == 0, set = strcmp(pos[0], "set") == 0;
    if (!create && !set && strcmp(pos[0], "delete") != 0)
        return fx_cli_usage_error("streams", "unknown action: want ls, create, set or delete");
    if (a.durable && !create)
        return fx_cli_usage_error("streams", "--durable goes with create");
    if (create && retention && !a.durable)
        return fx_cli_usage_error("streams",
                                  "--retention-bytes and --retention-seconds go with --durable");
    if (set && !retention)
        return fx_cli_usage_error("streams",
                                  "set needs --retention-bytes and/or --retention-seconds");
    if (!create && !set && retention)
        return fx_cli_usage_error("streams", "--retention-* go with create or set");
    if (npos < 2)
        return fx_cli_usage_error("streams", "missing TENANT/NS/STREAM");
    return streams_one(&c, pos[0], pos[1], &a);
}

/* ---- felix groups --------------------------------------------------------------- */

enum {
    O_START = FX_CLI_OPT_FIRST_CMD,
    O_JSON,
    /* a group's own settings (create), in the order of GSET_KEYS */
    O_ACK_WAIT,
    O_MAX_ACK_WAIT,
    O_MAX_DELIVER,
    O_MAX_ACK_PENDING,
    O_MAX_ACK_PENDING_BYTES,
    O_MAX_PARKED,
    O_BACKOFF,
    O_OFFSET, /* redrive, discard */
};
static const fx_cli_opt GROUPS_OPTS[] = {FX_CLI_COMMON_OPTS,
                                         {"start", true, O_START},
                                         {"json", false, O_JSON},
                                         {"ack-wait-ms", true, O_ACK_WAIT},
                                         {"max-ack-wait-ms", true, O_MAX_ACK_WAIT},
                                         {"max-deliver", true, O_MAX_DELIVER},
                                         {"max-ack-pending", true, O_MAX_ACK_PENDING},
                                         {"max-ack-pending-bytes", true, O_MAX_ACK_PENDING_BYTES},
                                         {"max-parked", true, O_MAX_PARKED},
                                         {"backoff", true, O_BACKOFF},
                                         {"offset", true, O_OFFSET},
                                         {0}};

/* The body keys of the settings flags, by O_ACK_WAIT + i. The broker checks
 * the bounds (a 400 names the key); the CLI checks they are numbers. */
#define GSET_N 7
static const char *const GSET_KEYS[GSET_N] = {
    "ack_wait_ms",           "max_ack_wait_ms", "max_deliver", "max_ack_pending",
    "max_ack_pending_bytes", "max_parked",      "backoff_ms"};
static const char *const GSET_FLAGS[GSET_N] = {
    "ack-wait-ms",           "max-ack-wait-ms", "max-deliver", "max-ack-pending",
    "max-ack-pending-bytes", "max-parked",      "backoff"};
#define GSET_MAX_BACKOFF 8

typedef struct groups_args {
    const char *start;  /* --start, NULL: not given */
    const char *offset; /* --offset (redrive, discard), NULL: not given */
    bool json;
    bool has[GSET_N]; /* which settings flags were given */
    int64_t v[GSET_N];
    uint64_t backoff[GSET_MAX_BACKOFF];
    size_t nbackoff;
} groups_args;

/* --backoff D1,D2,...: up to 8 delays in ms. */
static int backoff_arg(groups_args *a, const char *val, char *err, size_t errlen)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", val);
    a->nbackoff = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (a->nbackoff == GSET_MAX_BACKOFF ||
            fx_cli_parse_u64(t, INT32_MAX, &a->backoff[a->nbackoff]) != 0) {
            snprintf(err, errlen,
                     "--backoff: expected up to %d delays in ms separated by commas, got '%s'",
                     GSET_MAX_BACKOFF, val);
            return -EINVAL;
        }
        a->nbackoff++;
    }
    return 0;
}

static int groups_opt(void *user, int id, const char *val, char *err, size_t errlen)
{
    groups_args *a = user;
    if (id == O_START) {
        a->start = val;
    } else if (id == O_OFFSET) {
        a->offset = val;
    } else if (id == O_JSON) {
        a->json = true;
    } else if (id == O_BACKOFF) {
        a->has[id - O_ACK_WAIT] = true;
        return backoff_arg(a, val, err, errlen);
    } else if (id >= O_ACK_WAIT && id < O_ACK_WAIT + GSET_N) {
        uint64_t u;
        size_t k = (size_t)(id - O_ACK_WAIT);
        bool neg = id == O_MAX_DELIVER && strcmp(val, "-1") == 0;
        if (!neg && fx_cli_parse_u64(val, INT64_MAX, &u) != 0) {
            snprintf(err, errlen, "--%s: expected a whole number%s, got '%s'", GSET_FLAGS[k],
                     id == O_MAX_DELIVER ? " (or -1: unlimited)" : "", val);
            return -EINVAL;
        }
        a->has[k] = true;
        a->v[k] = neg ? -1 : (int64_t)u;
    }
    return 0;
}

/* Whether any settings flag was given. */
static bool has_settings(const groups_args *a)
{
    for (size_t i = 0; i < GSET_N; i++)
        if (a->has[i])
            return true;
    return false;
}

/* The body of a create or seek: {"start": ...} and the group's settings;
 * NULL with nothing to send, or on error (|*perr| set: a usage error, or
 * out of memory). The caller frees it. */
static char *groups_body(const groups_args *a, char *err, size_t errlen, int *perr)
{
    *perr = 0;
    if (a->offset != NULL) { /* redrive, discard: checked a whole number by groups_usage */
        json_t *j = json_pack("{s:I}", "offset", (json_int_t)strtoll(a->offset, NULL, 10));
        char *body = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (body == NULL) {
            snprintf(err, errlen, "out of memory");
            *perr = -ENOMEM;
        }
        return body;
    }
    if (a->start == NULL && !has_settings(a))
        return NULL;
    char start[96];
    json_t *j = NULL;
    if (a->start != NULL) {
        if (fx_cli_group_start_body(a->start, start, sizeof(start), err, errlen) != 0) {
            *perr = -EINVAL;
            return NULL;
        }
        j = json_loads(start, 0, NULL);
    } else {
        j = json_object();
    }
    for (size_t i = 0; j != NULL && i < GSET_N; i++) {
        if (!a->has[i])
            continue;
        if (i == O_BACKOFF - O_ACK_WAIT) {
            json_t *arr = json_array();
            for (size_t k = 0; k < a->nbackoff; k++)
                json_array_append_new(arr, json_integer((json_int_t)a->backoff[k]));
            json_object_set_new(j, GSET_KEYS[i], arr);
        } else {
            json_object_set_new(j, GSET_KEYS[i], json_integer(a->v[i]));
        }
    }
    char *body = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (body == NULL) {
        snprintf(err, errlen, "out of memory");
        *perr = -ENOMEM;
    }
    return body;
}

/* Prints the body of |resp| as the broker sent it (--json), one line. */
static void print_raw(const fx_cli_http *resp)
{
    fputs(resp->body.p != NULL ? resp->body.p : "", stdout);
    if (resp->body.len == 0 || resp->body.p[resp->body.len - 1] != '\n')
        putchar('\n');
}

/* The sum of the integer members of object |o| (dead_lettered by reason). */
static json_int_t sum_members(const json_t *o)
{
    json_int_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        n += json_is_integer(v) ? json_integer_value(v) : 0;
    }
    return n;
}

/* One row of `groups ls` from a group object of the broker. */
static json_t *group_row(const json_t *g)
{
    static const char *const keep[] = {"group",        "lag",       "num_pending",
                                       "num_ack_pending", "delivered", "redelivered",
                                       "acked",        "capped_for_ms"};
    json_t *row = json_object();
    if (row == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        json_t *v = json_object_get(g, keep[i]);
        json_object_set(row, keep[i], v != NULL ? v : json_null());
    }
    json_object_set_new(row, "members",
                        json_integer((json_int_t)json_array_size(json_object_get(g, "members"))));
    json_object_set_new(row, "dead_lettered",
                        json_integer(sum_members(json_object_get(g, "dead_lettered"))));
    return row;
}

static void groups_print_ls(const json_t *root)
{
    json_t *groups = json_object_get(root, "groups"), *rows = json_array();
    size_t i;
    json_t *g;
    json_array_foreach(groups, i, g)
    {
        json_array_append_new(rows, group_row(g));
    }
    if (json_array_size(rows) == 0)
        printf("no consumer groups\n");
    else
        print_table(rows, SIZE_MAX);
    json_decref(rows);
}

/* `groups info`: the scalars as "key: value" lines, then the members. */
static void groups_print_info(const json_t *g)
{
    const char *k;
    json_t *v;
    char cell[CELL_MAX * 4 + 1];
    json_object_foreach((json_t *)g, k, v)
    {
        if (json_is_array(v) && strcmp(k, "members") == 0)
            continue;
        cell_text(v, cell, sizeof(cell));
        printf("%-24s %s\n", k, cell);
    }
    json_t *members = json_object_get(g, "members");
    printf("\nmembers: %zu\n", json_array_size(members));
    if (json_array_size(members) > 0)
        print_table(members, SIZE_MAX);
}

static void groups_print_dead(const json_t *root)
{
    json_t *rows = json_object_get(root, "dead_letters");
    if (json_array_size(rows) == 0)
        printf("no dead letters\n");
    else
        print_table(rows, SIZE_MAX);
    json_int_t forgotten = json_integer_value(json_object_get(root, "forgotten"));
    if (forgotten > 0)
        printf("and %lld older dead letters no longer listed\n", (long long)forgotten);
}

/* Prints a GET answer in the human form of |action|, or raw when it does
 * not have the expected shape. */
static void groups_print(const char *action, const fx_cli_http *resp)
{
    json_error_t jerr;
    json_t *root = json_loadb(resp->body.p, resp->body.len, 0, &jerr);
    if (!json_is_object(root))
        print_raw(resp);
    else if (strcmp(action, "ls") == 0)
        groups_print_ls(root);
    else if (strcmp(action, "info") == 0)
        groups_print_info(root);
    else
        groups_print_dead(root);
    json_decref(root);
}

/* The line a successful create, seek, delete, redrive or discard prints. */
static void groups_done(const char *action, const fx_cli_path *p, const char *group,
                        const groups_args *a, const fx_cli_http *resp)
{
    if (strcmp(action, "create") == 0) {
        bool created = resp->status == 201;
        printf("%s group %s on %s/%s/%s%s\n", created ? "created" : "found existing", group,
               p->tenant, p->ns, p->stream, created ? "" : " (its position is unchanged)");
    } else if (strcmp(action, "seek") == 0) {
        /* A time became an offset at the broker: say which. */
        json_t *root = json_loadb(resp->body.p != NULL ? resp->body.p : "", resp->body.len, 0, NULL);
        json_t *off = json_object_get(json_object_get(root, "start"), "offset");
        if (strncmp(a->start, "time:", 5) == 0 && json_is_integer(off))
            printf("moved group %s on %s/%s/%s to offset %lld (the first record at or after "
                   "%s)\n",
                   group, p->tenant, p->ns, p->stream, (long long)json_integer_value(off),
                   a->start + 5);
        else
            printf("moved group %s on %s/%s/%s to %s\n", group, p->tenant, p->ns, p->stream,
                   a->start);
        json_decref(root);
    } else if (strcmp(action, "redrive") == 0) {
        printf("redrove offset %s of group %s on %s/%s/%s: it is delivered again (attempt 1) "
               "and stays listed until acked\n",
               a->offset, group, p->tenant, p->ns, p->stream);
    } else if (strcmp(action, "discard") == 0) {
        printf("discarded dead letter %s of group %s on %s/%s/%s (the record stays in the "
               "stream and the dead-letter stream)\n",
               a->offset, group, p->tenant, p->ns, p->stream);
    } else {
        printf("deleted group %s on %s/%s/%s\n", group, p->tenant, p->ns, p->stream);
    }
}

/* Runs |action| (checked) on |p| and |group| (NULL for ls). */
static int groups_run(const fx_cli_common *c, const char *action, const fx_cli_path *p,
                      const char *group, const groups_args *a)
{
    bool create = strcmp(action, "create") == 0, seek = strcmp(action, "seek") == 0;
    bool del = strcmp(action, "delete") == 0, dead = strcmp(action, "dead-letters") == 0;
    bool redrive = strcmp(action, "redrive") == 0, discard = strcmp(action, "discard") == 0;
    char route[3 * 3 * FX_CLI_NAME_MAX + 3 * FX_CLI_GROUP_MAX + 64], err[256];
    const char *verb = seek      ? "seek"
                       : dead    ? "dead-letters"
                       : redrive ? "redrive"
                       : discard ? "discard"
                                 : NULL;
    if (fx_cli_group_route(p, group, verb, route, sizeof(route)) != 0) {
        fx_cli_errorf("groups", "out of memory");
        return FX_CLI_EXIT_FAIL;
    }
    int berr;
    char *body = groups_body(a, err, sizeof(err), &berr);
    if (berr == -EINVAL)
        return fx_cli_usage_error("groups", err);
    if (berr != 0) {
        fx_cli_errorf("groups", "%s", err);
        return FX_CLI_EXIT_FAIL;
    }
    const char *method = create                       ? "PUT"
                         : seek || redrive || discard ? "POST"
                         : del                        ? "DELETE"
                                                      : "GET";
    fx_cli_http resp;
    int rv = admin_call_body("groups", c, method, route, body, &resp);
    free(body);
    if (rv != 0)
        return FX_CLI_EXIT_FAIL;
    if (a->json)
        print_raw(&resp);
    else if (create || seek || del || redrive || discard)
        groups_done(action, p, group, a, &resp);
    else
        groups_print(action, &resp);
    fx_cli_buf_free(&resp.body);
    return FX_CLI_EXIT_OK;
}

/* Whether |s| is a whole number from 0 that fits a JSON integer (digits
 * only, at most 18 of them). */
static bool is_offset(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 18)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* Checks the words and flags of |action|. Returns NULL or the usage error. */
static const char *groups_usage(const char *action, int npos, const groups_args *a)
{
    bool ls = strcmp(action, "ls") == 0 || strcmp(action, "list") == 0;
    bool by_offset = strcmp(action, "redrive") == 0 || strcmp(action, "discard") == 0;
    bool known = ls || by_offset || strcmp(action, "create") == 0 || strcmp(action, "info") == 0 ||
                 strcmp(action, "seek") == 0 || strcmp(action, "delete") == 0 ||
                 strcmp(action, "dead-letters") == 0;
    if (!known)
        return "unknown action: want ls, info, create, seek, delete, dead-letters, redrive or "
               "discard";
    if (npos < 2)
        return "missing TENANT/NS/STREAM";
    if (ls && npos > 2)
        return "ls takes no GROUP (info GROUP describes one)";
    if (!ls && npos < 3)
        return "missing GROUP";
    bool takes_start = strcmp(action, "create") == 0 || strcmp(action, "seek") == 0;
    if (a->start != NULL && !takes_start)
        return "--start goes with create or seek";
    if (a->start == NULL && strcmp(action, "seek") == 0)
        return "seek needs --start all|new|last|OFFSET|time:T";
    if (has_settings(a) && strcmp(action, "create") != 0)
        return "--ack-wait-ms, --max-ack-wait-ms, --max-deliver, --max-ack-pending, "
               "--max-ack-pending-bytes, --max-parked and --backoff go with create";
    if (a->offset != NULL && !by_offset)
        return "--offset goes with redrive or discard";
    if (by_offset && a->offset == NULL)
        return "redrive and discard need --offset N (a dead letter's offset, from dead-letters)";
    if (by_offset && !is_offset(a->offset))
        return "--offset must be a whole number from 0";
    return NULL;
}

int fx_cli_groups(int argc, char **argv)
{
    fx_cli_common c;
    const char *pos[3];
    int npos = 0;
    groups_args a = {0};
    int st = fx_cli_parse("groups", argc, argv, GROUPS_OPTS, &c, groups_opt, &a, pos, 3, &npos,
                          NULL);
    if (st >= 0)
        return st;
    if (npos == 0)
        return fx_cli_usage_error("groups", "missing action: ls, info, create, seek, delete, "
                                            "dead-letters, redrive or discard");
    const char *why = groups_usage(pos[0], npos, &a);
    if (why != NULL)
        return fx_cli_usage_error("groups", why);
    fx_cli_path path;
    char err[512];
    if (fx_cli_path_parse(pos[1], &path, err, sizeof(err)) != 0)
        return fx_cli_usage_error("groups", err);
    const char *group = npos > 2 ? pos[2] : NULL;
    if (group != NULL && fx_cli_group_check(group, err, sizeof(err)) != 0)
        return fx_cli_usage_error("groups", err);
    const char *action = strcmp(pos[0], "list") == 0 ? "ls" : pos[0];
    return groups_run(&c, action, &path, group, &a);
}
