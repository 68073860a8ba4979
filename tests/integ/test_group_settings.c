/* Integration test of a consumer group's own settings and its /metrics
 * series (group_settings.c, group_metrics.c, the PUT route): a group made
 * with max_deliver 2 dead-letters a poison record after two deliveries
 * while another group of the same stream keeps the broker's default; bad
 * keys are 400, a conflicting re-create 409; a durable stream's group keeps
 * its settings across a restart and a damaged settings file refuses it; the
 * per-group series carry the right labels and values and the lateness
 * histogram moves after a lease lapses. In-process brokers and admin
 * endpoint; /metrics is read with fx_metrics_render (what the endpoint
 * serves) because the fixture's HTTP reader keeps 64 KiB. Timeouts are hang
 * guards only. */
/* fx-test-libs: fx_client fx_broker fx_storage fx_quic fx_wire fx_server fx_base */
#include "fx_test.h"
#include "integ/admin_fixture.h"

#include <errno.h>
#include <ftw.h>

#include "base/metrics.h"
#include "felix/felix.h"
#include "storage/syncpol.h"

#define G "/v1/streams/t1/default/jobs/groups"

static void expect_status(E *e, const char *method, const char *path, int status,
                          const char *body_has)
{
    http_resp r;
    http(e, method, path, &r);
    if (r.status != status)
        fail_msg("%s %s: %d %s (want %d)", method, path, r.status, r.body, status);
    if (body_has != NULL && strstr(r.body, body_has) == NULL)
        fail_msg("%s %s: body %s lacks '%s'", method, path, r.body, body_has);
}

static void expect_body(E *e, const char *method, const char *path, const char *body, int status,
                        const char *body_has)
{
    http_resp r;
    http_body(e, method, path, body, &r);
    if (r.status != status)
        fail_msg("%s %s %s: %d %s (want %d)", method, path, body, r.status, r.body, status);
    if (body_has != NULL && strstr(r.body, body_has) == NULL)
        fail_msg("%s %s %s: body %s lacks '%s'", method, path, body, r.body, body_has);
}

/* The value of series |series| (name and labels as rendered) in the
 * registry's text; -1 when absent. */
static double metric(const char *series)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fx_metrics_render(&text, &len, true), 0);
    double v = -1;
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    free(text);
    return v;
}

/* A per-group series of group |g| of t1/default/jobs. */
static double gseries(const char *name, const char *g)
{
    char s[256];
    snprintf(s, sizeof(s), "%s{tenant=\"t1\",namespace=\"default\",stream=\"jobs\",group=\"%s\"}",
             name, g);
    return metric(s);
}

static fx_group *join(fx_client *c, const char *group, uint32_t ack_wait_ms)
{
    fx_group_opts o;
    fx_group_opts_init(&o);
    o.ns = NS;
    o.stream = "jobs";
    o.group = group;
    o.window = 16;
    o.ack_wait_ms = ack_wait_ms;
    fx_group *g = NULL;
    int rv = fx_group_join(&g, c, &o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(c, msg, sizeof(msg));
        fail_msg("join %s: %s (%s)", group, fx_errname(rv), msg);
    }
    return g;
}

/* Takes the next record, which must be |offset| at |attempt|. */
static void take(fx_group *g, uint64_t offset, uint32_t attempt)
{
    fx_group_msg m;
    assert_int_equal(fx_group_next(g, &m, HANG_MS), 0);
    assert_int_equal(m.offset, offset);
    assert_int_equal(m.attempt, attempt);
}

/* Waits until series |name| of group |g| is |want| (published after a pump). */
static void wait_series(const char *name, const char *g, double want)
{
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * 1000000ull;
    double v;
    while ((v = gseries(name, g)) != want && fx_now_ns() < deadline)
        usleep(10000);
    if (v != want)
        fail_msg("%s{group=%s} is %g, want %g", name, g, v, want);
}

static void test_max_deliver_2_dead_letters_a_poison_record_the_default_group_goes_on(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e->metrics_per_stream = true;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/jobs", 201, NULL);
    expect_body(e, "PUT", G "/strict", "{\"start\":\"all\",\"max_deliver\":2,\"backoff_ms\":[0]}",
                201, "\"created\":true");
    expect_body(e, "PUT", G "/lenient", "{\"start\":\"all\"}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_publish(c, NS, "jobs", "poison", 6, FX_ACK_PER_MESSAGE), 0);

    fx_group *s = join(c, "strict", 60000);
    fx_group *l = join(c, "lenient", 60000);
    take(s, 0, 1);
    assert_int_equal(fx_group_nak(s, 0, 1, 0), 0);
    take(s, 0, 2);
    assert_int_equal(fx_group_nak(s, 0, 2, 0), 0); /* its last delivery: dead-lettered */
    for (uint32_t a = 1; a <= 3; a++) { /* the default (5) lets a third delivery through */
        take(l, 0, a);
        assert_int_equal(fx_group_nak(l, 0, a, 0), 0);
    }
    take(l, 0, 4);

    wait_series("felix_consumer_group_dead_lettered_total", "strict", 1);
    json_t *j = get_json(e, G "/strict");
    assert_int_equal(ju(json_object_get(j, "dead_lettered"), "max_deliver"), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "config"), "max_deliver")), 2);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "settings"), "max_deliver")), 2);
    json_decref(j);
    j = get_json(e, G "/lenient");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "config"), "max_deliver")), 5);
    assert_int_equal(json_object_size(json_object_get(j, "settings")), 0);
    assert_int_equal(ju(json_object_get(j, "dead_lettered"), "max_deliver"), 0);
    json_decref(j);

    /* The per-group series, labelled by group. */
    assert_true(gseries("felix_consumer_group_delivered_total", "strict") == 2);
    assert_true(gseries("felix_consumer_group_redelivered_total", "strict") == 1);
    assert_true(gseries("felix_consumer_group_pending", "strict") == 0);
    assert_true(gseries("felix_consumer_group_lag", "strict") ==
                0); /* settled by the dead letter */
    assert_true(gseries("felix_consumer_group_members", "strict") == 1);
    assert_true(gseries("felix_consumer_group_capped", "strict") == 0);
    wait_series("felix_consumer_group_delivered_total", "lenient", 4);
    assert_true(gseries("felix_consumer_group_redelivered_total", "lenient") == 3);
    assert_true(gseries("felix_consumer_group_pending", "lenient") == 1);
    assert_true(gseries("felix_consumer_group_lag", "lenient") == 1);
    assert_true(gseries("felix_consumer_group_dead_lettered_total", "lenient") == 0);
    assert_int_equal(fx_group_ack(l, 0), 0);
    wait_series("felix_consumer_group_acked_total", "lenient", 1);
    wait_series("felix_consumer_group_lag", "lenient", 0);
    fx_group_leave(s);
    fx_group_leave(l);
    wait_series("felix_consumer_group_members", "lenient", 0);

    /* A deleted group's series go. */
    expect_status(e, "DELETE", G "/strict", 200, NULL);
    assert_true(gseries("felix_consumer_group_delivered_total", "strict") == -1);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_a_lapse_moves_the_lateness_histogram(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/jobs", 201, NULL);
    expect_body(e, "PUT", G "/lapse", "{\"ack_wait_ms\":100}", 201, NULL);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    assert_int_equal(fx_publish(c, NS, "jobs", "slow", 4, FX_ACK_PER_MESSAGE), 0);
    double before = metric("felix_group_redelivery_lateness_seconds_count");
    assert_true(before >= 0);
    fx_group *g = join(c, "lapse", 0); /* the group's ack wait, 100 ms */
    take(g, 0, 1);
    take(g, 0, 2); /* not acked: the lease lapsed and it came back */
    assert_true(metric("felix_group_redelivery_lateness_seconds_count") >= before + 1);
    assert_true(metric("felix_group_redelivery_lateness_seconds_bucket{le=\"+Inf\"}") >=
                before + 1);
    json_t *j = get_json(e, G "/lapse");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "config"), "ack_wait_ms")), 100);
    json_decref(j);
    /* This endpoint shows no per-stream series: the scrape does not ask the
     * sources, the families are declared. */
    http_resp r;
    http(e, "GET", "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "group=\"lapse\""));
    assert_non_null(strstr(r.body, "# TYPE felix_consumer_group_lag gauge"));
    assert_non_null(strstr(r.body, "# TYPE felix_group_redelivery_lateness_seconds histogram"));
    assert_int_equal(fx_group_ack(g, 0), 0);
    fx_group_leave(g);
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
    e_free(e);
}

static void test_bad_settings_are_400_and_a_conflicting_recreate_is_409(void **state)
{
    (void)state;
    E *e = e_new();
    e->bo.auto_create_streams = false;
    e_start(e);
    expect_status(e, "PUT", "/v1/streams/t1/default/jobs", 201, NULL);
    expect_body(e, "PUT", G "/g", "{\"max_deliverr\":2}", 400,
                "unknown field \\\"max_deliverr\\\"");
    expect_body(e, "PUT", G "/g", "{\"max_deliver\":0}", 400, "\\\"max_deliver\\\" must be -1");
    expect_body(e, "PUT", G "/g", "{\"ack_wait_ms\":2000,\"max_ack_wait_ms\":1000}", 400,
                "max_ack_wait_ms is below ack_wait_ms");
    expect_body(e, "PUT", G "/g", "{\"backoff_ms\":[1,2,3,4,5,6,7,8,9]}", 400, "at most 8");
    expect_status(e, "GET", G "/g", 404, "consumer group not found"); /* none was made */

    expect_body(e, "PUT", G "/g",
                "{\"max_deliver\":-1,\"max_ack_pending\":10,\"backoff_ms\":[100,1000,5000]}", 201,
                NULL);
    expect_body(e, "PUT", G "/g", "{\"max_deliver\":-1,\"backoff_ms\":[100,1000,5000]}", 200,
                "\"created\":false");
    expect_body(e, "PUT", G "/g", "{\"start\":\"new\"}", 200, "\"created\":false");
    expect_body(e, "PUT", G "/g", "{\"max_parked\":10}", 200, NULL); /* max_ack_pending's */
    expect_body(e, "PUT", G "/g", "{\"max_deliver\":3}", 409,
                "exists with other settings: max_deliver (the group has -1, asked 3)");
    expect_body(e, "PUT", G "/g", "{\"backoff_ms\":[100]}", 409, "backoff_ms");
    expect_body(e, "PUT", G "/g", "{\"max_ack_pending\":11}", 409, "max_ack_pending");
    json_t *j = get_json(e, G "/g");
    json_t *cfg = json_object_get(j, "config");
    assert_int_equal(json_integer_value(json_object_get(cfg, "max_deliver")), -1);
    assert_int_equal(ju(cfg, "max_ack_pending"), 10);
    assert_int_equal(ju(cfg, "max_parked"), 10);
    assert_int_equal(ju(cfg, "member_window_max"), 5);
    assert_int_equal(ju(cfg, "ack_wait_ms"), 30000); /* the broker's default */
    assert_int_equal(json_array_size(json_object_get(cfg, "backoff_ms")), 3);
    assert_int_equal(json_object_size(json_object_get(j, "settings")), 3);
    json_decref(j);
    /* A group made without settings matches the defaults it follows. */
    expect_status(e, "PUT", G "/plain", 201, NULL);
    expect_body(e, "PUT", G "/plain", "{\"ack_wait_ms\":30000}", 200, NULL);
    expect_body(e, "PUT", G "/plain", "{\"ack_wait_ms\":30001}", 409, "ack_wait_ms");
    e_free(e);
}

/* ---- durable streams ---------------------------------------------------------------- */

static void start_on(fix_env *e, const char *root)
{
    fix_durable_opts(&e->bo, root);
    fix_env_start(e);
}

/* The group's JSON, waiting for the recovery to make it again. */
static json_t *group_json(fix_env *e, const char *group)
{
    char *js = NULL;
    int rv = FX_ENOSTREAM;
    uint64_t deadline = fx_now_ns() + (uint64_t)HANG_MS * 1000000ull;
    while ((rv = fx_broker_list_groups(e->b, "t1", NS, "jobs", group, HANG_MS * 1000000ull, &js,
                                       NULL)) != 0 &&
           fx_now_ns() < deadline)
        usleep(20000);
    if (rv != 0)
        fail_msg("group %s: %s", group, fx_errname(rv));
    json_t *j = json_loads(js, 0, NULL);
    free(js);
    assert_non_null(j);
    return j;
}

static char settings_file[4096];

static int find_settings(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    size_t n = strlen(path);
    if (flag == FTW_F && n > 9 && strcmp(path + n - 9, ".settings") == 0) {
        snprintf(settings_file, sizeof(settings_file), "%s", path);
        return 1;
    }
    return 0;
}

static void test_durable_settings_survive_a_restart_a_damaged_file_refuses(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxgsetXXXXXX";
    assert_non_null(mkdtemp(root));
    fix_env e;
    fix_env_init(&e, "gset");
    start_on(&e, root);
    fx_client_opts co;
    fix_client_opts(&co, e.b, e.server, "t1", "tok");
    co.reconnect = false;
    fx_client *c = fix_connect(&co);
    assert_int_equal(fx_publish(c, NS, "jobs", "x", 1, FX_ACK_PER_MESSAGE), 0);
    fx_broker_group_settings set = {.has = FX_BROKER_GSET_MAX_DELIVER | FX_BROKER_GSET_ACK_WAIT |
                                           FX_BROKER_GSET_BACKOFF,
                                    .max_deliver = 2,
                                    .ack_wait_ms = 1234,
                                    .backoff_ms = {10, 20},
                                    .n_backoff = 2};
    bool created = false;
    assert_int_equal(fx_broker_create_group(e.b, "t1", NS, "jobs", "keep", 0, 0, &set,
                                            HANG_MS * 1000000ull, &created, NULL),
                     0);
    assert_true(created);
    assert_int_equal(fx_broker_create_group(e.b, "t1", NS, "jobs", "plain", 0, 0, NULL,
                                            HANG_MS * 1000000ull, &created, NULL),
                     0);
    json_t *j = group_json(&e, "keep"); /* its files are made on the storage thread */
    json_decref(j);
    fix_close(c);
    fx_broker_free(e.b);
    e.b = NULL;

    /* Restarted: the settings came back with the group. */
    start_on(&e, root);
    j = group_json(&e, "keep");
    json_t *cfg = json_object_get(j, "config");
    assert_int_equal(json_integer_value(json_object_get(cfg, "max_deliver")), 2);
    assert_int_equal(ju(cfg, "ack_wait_ms"), 1234);
    assert_int_equal(json_array_size(json_object_get(cfg, "backoff_ms")), 2);
    assert_int_equal(json_object_size(json_object_get(j, "settings")), 3);
    assert_true(json_is_null(json_object_get(j, "journal_error")));
    json_decref(j);
    j = group_json(&e, "plain");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "config"), "max_deliver")), 5);
    json_decref(j);
    /* A re-create with other values is refused, with equal ones found. */
    set.max_deliver = 3;
    fx_registry_err err = {0};
    assert_int_equal(fx_broker_create_group(e.b, "t1", NS, "jobs", "keep", 0, 0, &set,
                                            HANG_MS * 1000000ull, &created, &err),
                     -EEXIST);
    assert_non_null(strstr(err.msg, "max_deliver"));
    set.max_deliver = 2;
    assert_int_equal(fx_broker_create_group(e.b, "t1", NS, "jobs", "keep", 0, 0, &set,
                                            HANG_MS * 1000000ull, &created, NULL),
                     0);
    assert_false(created);
    fx_broker_free(e.b);
    e.b = NULL;

    /* Only "keep" has a settings file; damaged, the group is refused with the reason. */
    settings_file[0] = '\0';
    assert_int_equal(nftw(root, find_settings, 16, FTW_PHYS), 1);
    FILE *f = fopen(settings_file, "w");
    assert_non_null(f);
    fputs("{\"max_deliver\": \"two\"", f);
    fclose(f);
    start_on(&e, root);
    j = group_json(&e, "keep");
    const char *je = json_string_value(json_object_get(j, "journal_error"));
    if (je == NULL || strstr(je, "settings file") == NULL)
        fail_msg("journal_error: %s", je != NULL ? je : "null");
    json_decref(j);
    j = group_json(&e, "plain"); /* the other group is fine */
    assert_true(json_is_null(json_object_get(j, "journal_error")));
    json_decref(j);
    fix_env_deinit(&e);
    fix_rm_dir(root);
}

/* ---- a start at a time ------------------------------------------------------------------ */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void publish_n(fx_client *c, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(fx_publish(c, NS, "jobs", "x", 1, FX_ACK_PER_MESSAGE), 0);
}

/* A durable stream finds the first record appended at or after a time; a
 * group created (PUT) or moved (seek) there over the admin API starts at
 * it; a stream in memory refuses a time (its records carry none). */
static void test_a_group_starts_at_the_first_record_at_or_after_a_time(void **state)
{
    (void)state;
    char root[64] = "/tmp/fxgtimeXXXXXX";
    assert_non_null(mkdtemp(root));
    E *e = e_new();
    fix_durable_opts(&e->bo, root);
    e_start(e);
    fx_client *c = e_client(e, FX_POLICY_BLOCK, 0, 0);
    publish_n(c, 5);
    usleep(30000);
    uint64_t t = wall_ms();
    usleep(30000);
    publish_n(c, 3);
    uint64_t off = UINT64_MAX;
    fx_registry_err err = {0};
    const uint64_t to = HANG_MS * 1000000ull;
    assert_int_equal(fx_broker_stream_offset_for_time(e->b, "t1", NS, "jobs", t, to, &off, &err),
                     0);
    assert_int_equal(off, 5);
    assert_int_equal(fx_broker_stream_offset_for_time(e->b, "t1", NS, "jobs", 0, to, &off, &err),
                     0);
    assert_int_equal(off, 0);
    assert_int_equal(fx_broker_stream_offset_for_time(e->b, "t1", NS, "jobs", wall_ms() + 60000,
                                                      to, &off, &err),
                     0);
    assert_int_equal(off, 8);
    assert_int_equal(fx_broker_stream_offset_for_time(e->b, "t1", NS, "nope", t, to, &off, &err),
                     FX_ENOSTREAM);

    char body[96];
    snprintf(body, sizeof(body), "{\"start\":{\"time_ms\":%llu}}", (unsigned long long)t);
    expect_body(e, "PUT", G "/g", body, 201, NULL);
    json_t *j = get_json(e, G "/g");
    assert_int_equal(ju(j, "floor"), 5);
    assert_int_equal(ju(j, "next"), 5);
    json_decref(j);
    expect_body(e, "POST", G "/g/seek", "{\"start\":{\"time_ms\":0}}", 200, "\"offset\":0");
    j = get_json(e, G "/g");
    assert_int_equal(ju(j, "floor"), 0);
    json_decref(j);
    fix_close(c);
    e_free(e);
    fix_rm_dir(root);

    /* In memory: refused (409) naming why; malformed: 400. */
    E *a = e_new();
    a->bo.auto_create_streams = false;
    e_start(a);
    expect_status(a, "PUT", "/v1/streams/t1/default/jobs", 201, NULL);
    expect_body(a, "PUT", G "/g", "{\"start\":{\"time_ms\":1000}}", 409,
                "needs a durable stream");
    expect_body(a, "PUT", G "/g", "{\"start\":{\"time_ms\":-1}}", 400, "time_ms");
    expect_body(a, "PUT", G "/g", "{\"start\":{\"time_ms\":1,\"offset\":2}}", 400, "time_ms");
    expect_status(a, "GET", G "/g", 404, NULL); /* none was made */
    e_free(a);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_max_deliver_2_dead_letters_a_poison_record_the_default_group_goes_on),
    cmocka_unit_test(test_a_lapse_moves_the_lateness_histogram),
    cmocka_unit_test(test_bad_settings_are_400_and_a_conflicting_recreate_is_409),
    cmocka_unit_test(test_durable_settings_survive_a_restart_a_damaged_file_refuses),
    cmocka_unit_test(test_a_group_starts_at_the_first_record_at_or_after_a_time),
};

FX_TEST_MAIN(tests)
