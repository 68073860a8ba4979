/* Integration tests of the per-stream retention overrides of durable
 * streams: set at creation (PUT) and changed later (PATCH) through the
 * admin API with their bounds checked, shown by GET /v1/streams, kept in the
 * storage catalogue across a restart, and applied to that stream's log only
 * (its sealed segments go sooner, the others' stay), and a change the
 * storage thread answers too late; the admin token every
 * create, change and delete needs, on loopback too; and the per-stream
 * gauges of /metrics (durable streams only, when asked for). A real broker,
 * its admin endpoint and libfelix clients in this process
 * (admin_fixture.h). */
/* fx-test-libs: fx_broker fx_client fx_server fx_storage fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "broker/test_hooks.h"
#include "integ/admin_fixture.h"
#include "integ/durable_fixture.h"
#include "integ/proc.h"
#include "storage/catalog.h"
#include "storage/syncpol.h"

/* A broker whose durable root is |root| (a fresh temp dir unless set). */
static E *d_new(char *root, size_t cap)
{
    E *e = e_new();
    if (root[0] == '\0') {
        snprintf(root, cap, "/tmp/fxdretXXXXXX");
        assert_non_null(mkdtemp(root));
    }
    e->bo.durable.dir = root;
    e->bo.durable.fsync_mode = FX_FSYNC_NONE;
    e->bo.durable.segment_bytes = 1 << 20;
    return e;
}

/* |method| on stream |stream| with |body|: checks the status and that the
 * answer contains |has| (NULL: anything). */
static void call(E *e, const char *method, const char *stream, const char *body, int status,
                 const char *has)
{
    char path[256];
    http_resp r;
    snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", stream);
    http_body(e, method, path, body, &r);
    if (r.status != status)
        fail_msg("%s %s %s: %d %s (want %d)", method, path, body, r.status, r.body, status);
    if (has != NULL && strstr(r.body, has) == NULL)
        fail_msg("%s %s: body %s lacks '%s'", method, path, r.body, has);
}

static json_t *stream_of(json_t *root, const char *name)
{
    json_t *arr = json_object_get(root, "streams");
    assert_true(json_is_array(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i);
        if (strcmp(json_string_value(json_object_get(x, "stream")), name) == 0)
            return x;
    }
    fail_msg("no stream %s in GET /v1/streams", name);
    return NULL;
}

/* GET /v1/streams: stream |name|'s field |key| (-1 when null). */
static int64_t listed(E *e, const char *name, const char *key)
{
    json_t *root = get_json(e, "/v1/streams");
    json_t *v = json_object_get(stream_of(root, name), key);
    assert_non_null(v);
    int64_t out = json_is_null(v) ? -1 : (int64_t)json_integer_value(v);
    assert_true(json_is_null(v) || json_is_integer(v));
    json_decref(root);
    return out;
}

static void pub_n(fx_client *c, const char *stream, int n)
{
    char msg[64];
    for (int i = 0; i < n; i++) {
        snprintf(msg, sizeof(msg), "payload-%04d-of-stream-%s", i, stream);
        int rv = fx_publish(c, NS, stream, msg, strlen(msg), FX_ACK_PER_MESSAGE);
        if (rv != 0)
            fail_msg("publish %s #%d: %s", stream, i, fx_strerror(rv));
    }
}

/* ---- the admin API --------------------------------------------------------------- */

static void test_put_sets_retention_overrides_and_get_shows_them(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    call(e, "PUT", "r",
         "{\"durable\": true, \"retention_bytes\": 1048576, \"retention_seconds\": 3600}", 201,
         "\"retention_bytes\":1048576,\"retention_seconds\":3600");
    assert_int_equal(listed(e, "r", "retention_bytes"), 1048576);
    assert_int_equal(listed(e, "r", "retention_seconds"), 3600);
    /* A durable stream without overrides lists null (the broker's setting). */
    call(e, "PUT", "plain", "{\"durable\": true}", 201, NULL);
    assert_int_equal(listed(e, "plain", "retention_bytes"), -1);
    assert_int_equal(listed(e, "plain", "retention_seconds"), -1);
    /* PUT again on the existing stream changes what it names. */
    call(e, "PUT", "r", "{\"durable\": true, \"retention_seconds\": 60}", 200,
         "\"retention_bytes\":1048576,\"retention_seconds\":60");
    e_free(e);
    fix_rm_dir(root);
}

/* The storage thread does not answer in time: the change fails with
 * FX_ETIMEDOUT and says why, still runs once the thread is free, and its
 * late answer drops the stream reference it held (ASan: no leak). */
static void test_retention_change_the_storage_thread_misses_times_out(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->bo.workers = 1;
    e_start(e);
    call(e, "PUT", "r", "{\"durable\": true}", 201, NULL);
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, true), 0);
    fx_broker_retention want = {.set_seconds = true, .seconds = 60};
    fx_registry_err err = {0};
    assert_int_equal(fx_broker_set_stream_retention(e->b, T, NS, "r", &want, 1, 50 * FX_NS_PER_MS,
                                                    NULL, NULL, &err),
                     FX_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "did not answer in time"));
    assert_int_equal(fx_broker_test_hold_storage(e->b, 0, false), 0);
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    while (listed(e, "r", "retention_seconds") != 60) {
        if (fx_now_ns() > deadline)
            fail_msg("the late retention change was not applied");
        sleep_ms(2);
    }
    e_free(e);
    fix_rm_dir(root);
}

static void test_patch_changes_or_drops_overrides_of_an_existing_durable_stream(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    call(e, "PUT", "r", "{\"durable\": true, \"retention_bytes\": 4096}", 201, NULL);
    call(e, "PATCH", "r", "{\"retention_seconds\": 7200}", 200,
         "\"retention_bytes\":4096,\"retention_seconds\":7200");
    assert_int_equal(listed(e, "r", "retention_seconds"), 7200);
    call(e, "PATCH", "r", "{\"retention_bytes\": null}", 200,
         "\"retention_bytes\":null,\"retention_seconds\":7200");
    assert_int_equal(listed(e, "r", "retention_bytes"), -1);
    /* Stating the durability it has is accepted; flipping it is not. */
    call(e, "PATCH", "r", "{\"durable\": true, \"retention_bytes\": 8192}", 200,
         "\"retention_bytes\":8192");
    call(e, "PATCH", "r", "{\"durable\": false, \"retention_bytes\": 8192}", 409,
         "changing stream durability requires removal and recreation: tenant=t1 "
         "namespace=default stream=r current=true requested=false");
    call(e, "PUT", "r", "{\"durable\": false}", 409, "current=true requested=false");
    assert_int_equal(listed(e, "r", "retention_bytes"), 8192);
    e_free(e);
    fix_rm_dir(root);
}

static void test_bad_retention_bodies_get_a_clear_400_and_change_nothing(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    call(e, "PUT", "r", "{\"durable\": true, \"retention_bytes\": 4096}", 201, NULL);
    const char *range = "must be a whole number from 1 to";
    call(e, "PATCH", "r", "{\"retention_bytes\": 0}", 400, range);
    call(e, "PATCH", "r", "{\"retention_bytes\": -5}", 400, range);
    call(e, "PATCH", "r", "{\"retention_bytes\": \"1G\"}", 400, range);
    call(e, "PATCH", "r", "{\"retention_bytes\": 1.5}", 400, range);
    call(e, "PATCH", "r", "{\"retention_bytes\": 1125899906842625}", 400,
         "\\\"retention_bytes\\\" must be a whole number from 1 to 1125899906842624");
    call(e, "PATCH", "r", "{\"retention_seconds\": 360000001}", 400,
         "\\\"retention_seconds\\\" must be a whole number from 1 to 360000000");
    call(e, "PATCH", "r", "{\"retention_age\": 5}", 400, "unknown field");
    call(e, "PATCH", "r", "{}", 400, "nothing to change");
    call(e, "PATCH", "r", "", 400, "nothing to change");
    call(e, "PATCH", "r", "[1]", 400, "JSON object");
    assert_int_equal(listed(e, "r", "retention_bytes"), 4096);
    /* Retention needs a durable stream: at creation and after. */
    call(e, "PUT", "m", "{\"retention_bytes\": 4096}", 400, "need \\\"durable\\\": true");
    call(e, "PUT", "m", "{\"durable\": false, \"retention_bytes\": 4096}", 400,
         "need \\\"durable\\\": true");
    call(e, "PUT", "m", "", 201, "\"durable\":false");
    call(e, "PATCH", "m", "{\"retention_bytes\": 4096}", 400,
         "retention overrides apply to durable streams only; stream t1/default/m is kept in "
         "memory");
    call(e, "PATCH", "nope", "{\"retention_bytes\": 4096}", 404, "stream not found");
    e_free(e);
    fix_rm_dir(root);
}

/* ---- the catalogue ------------------------------------------------------------------ */

static void test_overrides_survive_a_restart_through_the_catalogue(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    call(e, "PUT", "keep",
         "{\"durable\": true, \"retention_bytes\": 65536, \"retention_seconds\": 600}", 201, NULL);
    call(e, "PATCH", "keep", "{\"retention_seconds\": 900}", 200, NULL);
    fx_admin_free(e->admin);
    e->admin = NULL;
    fx_broker_free(e->b);
    e->b = NULL;

    /* On disk: the catalogue holds the last change. */
    fx_catalog *cat;
    char err[256];
    assert_int_equal(fx_catalog_open(&cat, NULL, root, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, T, NS, "keep");
    assert_non_null(ce);
    assert_int_equal(ce->retention_bytes, 65536);
    assert_int_equal(ce->retention_seconds, 900);
    fx_catalog_free(cat);

    /* The stream comes back with them. */
    e_start(e);
    assert_int_equal(listed(e, "keep", "retention_bytes"), 65536);
    assert_int_equal(listed(e, "keep", "retention_seconds"), 900);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- retention ---------------------------------------------------------------------- */

static void test_override_deletes_sealed_segments_of_that_stream_only(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->bo.durable.segment_bytes = 512; /* a dozen records a segment */
    e->bo.log_capacity = 4;
    e_start(e);
    call(e, "PUT", "short", "{\"durable\": true, \"retention_bytes\": 1024}", 201, NULL);
    call(e, "PUT", "long", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    pub_n(c, "short", 200);
    pub_n(c, "long", 200);
    fx_metrics_snapshot_take(&b);
    /* The broker has no retention of its own: only the override deletes. */
    assert_true(DELTA(a, b, storage_retention_segments) > 0);
    assert_true(listed(e, "short", "log_first_offset") > 0);
    assert_true(listed(e, "short", "bytes_on_disk") <= 1024 + 512 + 512);
    assert_int_equal(listed(e, "long", "log_first_offset"), 0);
    assert_int_equal(listed(e, "long", "log_next_offset"), 200);
    int64_t long_segs = listed(e, "long", "segments");
    assert_true(long_segs > 10);
    /* Set on the other stream later, it applies at once. */
    call(e, "PATCH", "long", "{\"retention_bytes\": 2048}", 200, NULL);
    assert_true(listed(e, "long", "log_first_offset") > 0);
    assert_true(listed(e, "long", "segments") < long_segs);
    assert_true(listed(e, "long", "bytes_on_disk") <= 2048 + 512 + 512);
    /* A subscriber from offset 0 of the trimmed stream gets the too-old error. */
    fx_start st = {.kind = FX_START_OFFSET, .offset = 0};
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, c, NS, "long", &st), FX_ECURSOR_TOO_OLD);
    fx_unsubscribe(s);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- the CLI --------------------------------------------------------------------------- */

typedef struct cli_run {
    char felix[512], admin[32], out[128], err[128];
    char text[4096];   /* stdout, then stderr */
    const char *token; /* FELIX_ADMIN_TOKEN of the CLI; NULL: set empty */
} cli_run;

/* Runs `felix streams --admin ADDR ARGS...` (NULL-terminated); returns its
 * exit status with its stdout and stderr in |c->text|. */
static int felix_streams(cli_run *c, ...)
{
    char *argv[16] = {c->felix, "streams", "--admin", c->admin};
    int n = 4;
    va_list ap;
    va_start(ap, c);
    for (char *a; n < 15 && (a = va_arg(ap, char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char env_token[128];
    snprintf(env_token, sizeof(env_token), "FELIX_ADMIN_TOKEN=%s", c->token ? c->token : "");
    char *env[] = {env_token, NULL}; /* wins over one this process may have */
    int st = proc_wait(proc_spawn(argv, c->out, c->err, env, false), "felix streams");
    size_t k = proc_slurp(c->out, c->text, sizeof(c->text));
    proc_slurp(c->err, c->text + k, sizeof(c->text) - k);
    return st;
}

static void expect_cli(cli_run *c, int st, int want, const char *has)
{
    if (st != want || strstr(c->text, has) == NULL)
        fail_msg("felix streams exited %d (want %d), output lacks '%s':\n%s", st, want, has,
                 c->text);
}

static void test_felix_streams_create_and_set_change_the_overrides(void **state)
{
    (void)state;
    cli_run c = {.token = FIX_ADMIN_TOKEN};
    proc_binary("felix", c.felix, sizeof(c.felix));
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    snprintf(c.admin, sizeof(c.admin), "127.0.0.1:%u", (unsigned)fx_admin_port(e->admin));
    snprintf(c.out, sizeof(c.out), "%s/cli.out", root);
    snprintf(c.err, sizeof(c.err), "%s/cli.err", root);
    int st = felix_streams(&c, "create", "--durable", "--retention-bytes", "64K",
                           "--retention-seconds", "600", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 0, "created t1/default/cli (durable) (retention bytes=65536 seconds=600)");
    assert_int_equal(listed(e, "cli", "retention_bytes"), 65536);
    assert_int_equal(listed(e, "cli", "retention_seconds"), 600);
    st = felix_streams(&c, "set", "--retention-seconds", "none", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 0, "changed t1/default/cli (retention bytes=65536 seconds=none)");
    assert_int_equal(listed(e, "cli", "retention_seconds"), -1);
    /* Usage errors: nothing is sent. */
    st = felix_streams(&c, "set", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 2, "set needs --retention-bytes and/or --retention-seconds");
    st = felix_streams(&c, "create", "--retention-bytes", "5", T "/" NS "/x", NULL);
    expect_cli(&c, st, 2, "go with --durable");
    st = felix_streams(&c, "set", "--retention-bytes", "0", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 2, "--retention-bytes: expected");
    st = felix_streams(&c, "delete", "--retention-seconds", "5", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 2, "go with create or set");
    assert_int_equal(listed(e, "cli", "retention_bytes"), 65536);
    /* The broker's refusals come back as failures with its reason. */
    st = felix_streams(&c, "set", "--retention-bytes", "4096", T "/" NS "/nope", NULL);
    expect_cli(&c, st, 1, "HTTP 404");
    /* Without the token: refused, with the way to pass it. */
    c.token = NULL;
    st = felix_streams(&c, "delete", T "/" NS "/cli", NULL);
    expect_cli(&c, st, 1, "HTTP 401");
    expect_cli(&c, st, 1, "set FELIX_ADMIN_TOKEN");
    assert_int_equal(listed(e, "cli", "retention_bytes"), 65536);
    e_free(e);
    fix_rm_dir(root);
}

/* ---- the admin token ----------------------------------------------------------------- */

/* A durable stream |name| with |n| records, created by its first publish
 * (durable_default), not through the admin API. */
static void publish_durable(E *e, const char *name, int n)
{
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_n(c, name, n);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
}

static void test_mutations_without_a_configured_token_are_refused_on_loopback(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->token = NULL;
    e->bo.durable.durable_default = true;
    e_start(e);
    assert_false(fx_admin_is_remote(e->admin));
    publish_durable(e, "x", 5);
    int64_t bytes = listed(e, "x", "bytes_on_disk");
    assert_true(bytes > 0);
    /* Create, change and delete: each refused with how to set a token, and a
     * token the client makes up changes nothing. */
    const char *const tries[][3] = {
        {"PUT", "y", "{\"durable\": true}"},
        {"PATCH", "x", "{\"retention_bytes\": 1}"},
        {"DELETE", "x", ""},
    };
    for (size_t i = 0; i < 3; i++) {
        for (int with = 0; with < 2; with++) {
            char path[128];
            http_resp r;
            snprintf(path, sizeof(path), "/v1/streams/" T "/" NS "/%s", tries[i][1]);
            http_auth(e, tries[i][0], path, tries[i][2], with ? "made-up" : NULL, &r);
            if (r.status != 403 || strstr(r.body, "no admin_token is configured") == NULL ||
                strstr(r.body, "--set admin_token=") == NULL ||
                strstr(r.body, "FELIX_ADMIN_TOKEN") == NULL)
                fail_msg("%s %s: %d %s (want 403 saying how to set a token)", tries[i][0], path,
                         r.status, r.body);
        }
    }
    /* Reads are served as before, and nothing changed. */
    json_t *root_j = get_json(e, "/v1/streams");
    json_t *arr = json_object_get(root_j, "streams");
    assert_int_equal(json_array_size(arr), 1);
    json_decref(root_j);
    assert_int_equal(listed(e, "x", "bytes_on_disk"), bytes);
    assert_int_equal(listed(e, "x", "retention_bytes"), -1);
    json_decref(get_json(e, "/v1/subscriptions"));
    /* The CLI shows the broker's reason. */
    cli_run c = {.token = "made-up"};
    proc_binary("felix", c.felix, sizeof(c.felix));
    snprintf(c.admin, sizeof(c.admin), "127.0.0.1:%u", (unsigned)fx_admin_port(e->admin));
    snprintf(c.out, sizeof(c.out), "%s/cli.out", root);
    snprintf(c.err, sizeof(c.err), "%s/cli.err", root);
    int st = felix_streams(&c, "delete", T "/" NS "/x", NULL);
    expect_cli(&c, st, 1, "HTTP 403: no admin_token is configured");
    assert_int_equal(listed(e, "x", "bytes_on_disk"), bytes);
    e_free(e);
    fix_rm_dir(root);
}

static void test_mutations_need_the_token_and_pass_with_it(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e_start(e);
    publish_durable(e, "x", 5);
    const char *p = "/v1/streams/" T "/" NS "/x";
    const char *const wrong[] = {NULL, "fixture-admin-toke", "fixture-admin-tokenn"};
    http_resp r;
    for (size_t i = 0; i < 3; i++) {
        http_auth(e, "PUT", "/v1/streams/" T "/" NS "/y", "{\"durable\": true}", wrong[i], &r);
        assert_int_equal(r.status, 401);
        http_auth(e, "PATCH", p, "{\"retention_bytes\": 4096}", wrong[i], &r);
        assert_int_equal(r.status, 401);
        http_auth(e, "DELETE", p, "", wrong[i], &r);
        assert_int_equal(r.status, 401);
    }
    assert_int_equal(listed(e, "x", "retention_bytes"), -1);
    call(e, "PUT", "y", "{\"durable\": true}", 201, NULL);
    call(e, "PATCH", "x", "{\"retention_bytes\": 4096}", 200, "\"retention_bytes\":4096");
    assert_int_equal(listed(e, "x", "retention_bytes"), 4096);
    call(e, "DELETE", "x", "", 200, "\"deleted\":true");
    call(e, "DELETE", "y", "", 200, "\"deleted\":true");
    e_free(e);
    fix_rm_dir(root);
}

/* ---- per-stream metrics ------------------------------------------------------------- */

/* The value of series |name|{tenant="t1",namespace="default",stream=|stream|}
 * in GET /metrics, or -1 when there is none. */
static int64_t metric_of(E *e, const char *name, const char *stream)
{
    static http_resp r;
    http(e, "GET", "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_true(strlen(r.body) < sizeof(r.body) - 1); /* all of it, not cut */
    assert_non_null(strstr(r.body, "# TYPE felix_storage_stream_next_offset gauge\n"));
    char key[256];
    snprintf(key, sizeof(key), "\n%s{tenant=\"" T "\",namespace=\"" NS "\",stream=\"%s\"} ", name,
             stream);
    const char *p = strstr(r.body, key);
    return p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static void test_metrics_show_bytes_on_disk_and_offsets_per_durable_stream_only(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->metrics_per_stream = true;
    e_start(e);
    call(e, "PUT", "d1", "{\"durable\": true}", 201, NULL);
    call(e, "PUT", "d2", "{\"durable\": true}", 201, NULL);
    call(e, "PUT", "mem", "", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_n(c, "d1", 7);
    pub_n(c, "d2", 3);
    pub_n(c, "mem", 2);
    int64_t bytes = listed(e, "d1", "bytes_on_disk");
    assert_true(bytes > 7 * 28);
    assert_int_equal(metric_of(e, "felix_storage_stream_bytes_on_disk", "d1"), bytes);
    assert_int_equal(metric_of(e, "felix_storage_stream_bytes_on_disk", "d2"),
                     listed(e, "d2", "bytes_on_disk"));
    assert_int_equal(metric_of(e, "felix_storage_stream_next_offset", "d1"), 7);
    assert_int_equal(metric_of(e, "felix_storage_stream_first_offset", "d1"), 0);
    assert_int_equal(metric_of(e, "felix_storage_stream_segments", "d1"), 1);
    /* A stream in memory has no series. */
    assert_int_equal(metric_of(e, "felix_storage_stream_bytes_on_disk", "mem"), -1);
    /* Deleted, its series goes with its log. */
    http_resp r;
    http(e, "DELETE", "/v1/streams/" T "/" NS "/d1", &r);
    assert_int_equal(r.status, 200);
    uint64_t t0 = fx_now_ns();
    while (metric_of(e, "felix_storage_stream_bytes_on_disk", "d1") != -1) {
        if (fx_now_ns() - t0 > (uint64_t)HANG_MS * FX_NS_PER_MS)
            fail_msg("the series of deleted stream d1 is still exported");
        sleep_ms(2);
    }
    assert_true(metric_of(e, "felix_storage_stream_bytes_on_disk", "d2") > 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* The per-stream gauges are emitted with the catalogue lock released (the
 * rows are copied under it first): a scrape of many streams no longer holds
 * up a storage thread opening or closing a log, nor waits behind a slow
 * catalogue write for more than the copy. */
static void test_metrics_rows_are_emitted_without_the_catalogue_lock(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    call(e, "PUT", "d1", "{\"durable\": true}", 201, NULL);
    call(e, "PUT", "d2", "{\"durable\": true}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    pub_n(c, "d1", 2);
    pub_n(c, "d2", 2);
    size_t rows = 0, held = 0;
    assert_int_equal(fx_broker_test_collect_storage_rows(e->b, &rows, &held), 0);
    assert_int_equal(rows, 2);
    assert_int_equal(held, 0);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

/* GET /v1/streams shows each durable stream's own figures and overrides
 * among many (taken from one copy per request, found by handle id and by
 * name), and nulls for streams in memory. */
static void test_streams_list_shows_each_durable_streams_own_fields_among_many(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e_start(e);
    char name[16], body[96];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "s%02d", i);
        snprintf(body, sizeof(body), "{\"durable\": %s, \"retention_bytes\": %d}",
                 i % 3 == 2 ? "false" : "true", 100000 + i);
        call(e, "PUT", name, i % 3 == 2 ? "" : body, 201, NULL);
    }
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "s%02d", i);
        pub_n(c, name, i + 1);
    }
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "s%02d", i);
        bool durable = i % 3 != 2;
        assert_int_equal(listed(e, name, "log_next_offset"), durable ? i + 1 : -1);
        assert_int_equal(listed(e, name, "retention_bytes"), durable ? 100000 + i : -1);
        assert_int_equal(listed(e, name, "retention_seconds"), -1);
    }
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
    fix_rm_dir(root);
}

static void test_metrics_name_durable_streams_only_when_opted_in(void **state)
{
    (void)state;
    char root[64] = "";
    E *e = d_new(root, sizeof(root));
    e->bo.durable.durable_default = true;
    e_start(e);
    publish_durable(e, "secret-name", 3);
    assert_true(listed(e, "secret-name", "bytes_on_disk") > 0);
    static http_resp r;
    http(e, "GET", "/metrics", &r);
    assert_int_equal(r.status, 200);
    /* Declared, without series: no name of any tenant or stream. */
    assert_non_null(strstr(r.body, "# TYPE felix_storage_stream_bytes_on_disk gauge\n"));
    assert_null(strstr(r.body, "secret-name"));
    assert_null(strstr(r.body, "tenant=\""));
    assert_int_equal(metric_of(e, "felix_storage_stream_next_offset", "secret-name"), -1);
    fx_admin_free(e->admin);
    /* Opted in: the same broker's endpoint names it. */
    e->metrics_per_stream = true;
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(e->b, routes);
    fx_admin_opts ao = {.bind = "127.0.0.1:0",
                        .token = e->token,
                        .metrics_per_stream = true,
                        .routes = routes,
                        .nroutes = FX_ADMIN_BROKER_NROUTES};
    char err[256];
    assert_int_equal(fx_admin_start(&e->admin, &ao, err, sizeof(err)), 0);
    assert_int_equal(metric_of(e, "felix_storage_stream_next_offset", "secret-name"), 3);
    e_free(e);
    fix_rm_dir(root);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_sets_retention_overrides_and_get_shows_them),
    cmocka_unit_test(test_patch_changes_or_drops_overrides_of_an_existing_durable_stream),
    cmocka_unit_test(test_bad_retention_bodies_get_a_clear_400_and_change_nothing),
    cmocka_unit_test(test_retention_change_the_storage_thread_misses_times_out),
    cmocka_unit_test(test_overrides_survive_a_restart_through_the_catalogue),
    cmocka_unit_test(test_override_deletes_sealed_segments_of_that_stream_only),
    cmocka_unit_test(test_metrics_show_bytes_on_disk_and_offsets_per_durable_stream_only),
    cmocka_unit_test(test_metrics_rows_are_emitted_without_the_catalogue_lock),
    cmocka_unit_test(test_streams_list_shows_each_durable_streams_own_fields_among_many),
    cmocka_unit_test_teardown(test_felix_streams_create_and_set_change_the_overrides,
                              proc_teardown),
    cmocka_unit_test_teardown(test_mutations_without_a_configured_token_are_refused_on_loopback,
                              proc_teardown),
    cmocka_unit_test(test_mutations_need_the_token_and_pass_with_it),
    cmocka_unit_test(test_metrics_name_durable_streams_only_when_opted_in),
};
FX_TEST_MAIN(tests)
