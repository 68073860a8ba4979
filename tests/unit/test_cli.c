/* Unit tests of the felix CLI's pure layer (tools/felix/cli_lib.c, compiled
 * in): option and path parsing, the common connection flags, publish
 * pacing, Prometheus parsing into the checkpoint table, payload escaping,
 * JSON event lines, the options of `felix consume` and the help texts. No
 * broker, no clock, no network. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/felix/cli_lib.c"
#include "../../tools/felix/consume_args.c"
#include "fx_test.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A fake environment: NULL-terminated name/value pairs. */
static const char *const *fake_env;

static const char *env_lookup(const char *name)
{
    for (const char *const *p = fake_env; p != NULL && p[0] != NULL; p += 2) {
        if (strcmp(p[0], name) == 0)
            return p[1];
    }
    return NULL;
}

static const fx_cli_stat_row *row_of(const fx_cli_stat_row *rows, const char *checkpoint,
                                     const char *what)
{
    for (size_t i = 0; i < fx_cli_stats_nrows(); i++) {
        if (strcmp(rows[i].checkpoint, checkpoint) == 0 && strcmp(rows[i].what, what) == 0)
            return &rows[i];
    }
    fail_msg("no row %s / %s", checkpoint, what);
    return NULL;
}

/* Returns the table line that starts with |checkpoint| and names |metric|. */
static const char *table_line(const char *table, const char *metric, char *out, size_t len)
{
    const char *p = strstr(table, metric);
    assert_non_null(p);
    const char *start = p;
    while (start > table && start[-1] != '\n')
        start--;
    size_t n = strcspn(start, "\n");
    assert_true(n < len);
    memcpy(out, start, n);
    out[n] = '\0';
    return out;
}

/* ---- paths and options ------------------------------------------------------------- */

static void test_path_parse_accepts_three_segments_and_rejects_others(void **state)
{
    (void)state;
    fx_cli_path p;
    char err[256];
    assert_int_equal(fx_cli_path_parse("t1/default/orders", &p, err, sizeof(err)), 0);
    assert_string_equal(p.tenant, "t1");
    assert_string_equal(p.ns, "default");
    assert_string_equal(p.stream, "orders");
    assert_int_equal(fx_cli_path_parse("t-1/ns.a/s é", &p, err, sizeof(err)), 0);
    assert_string_equal(p.stream, "s é");

    static const char *const bad[] = {"",      "t1",     "t1/ns",     "t1/ns/s/x", "t1//s",
                                      "/ns/s", "t1/ns/", "t1/n\ts/s", "//",        "a/b/c/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(fx_cli_path_parse(bad[i], &p, err, sizeof(err)), -EINVAL);
        assert_true(strlen(err) > 0);
    }
    fx_cli_path_parse("t1/ns", &p, err, sizeof(err));
    assert_non_null(strstr(err, "TENANT/NS/STREAM"));
    fx_cli_path_parse("t1//s", &p, err, sizeof(err));
    assert_non_null(strstr(err, "namespace"));

    /* 255 bytes per segment are fine, 256 are not. */
    char longp[600];
    memset(longp, 'a', 255);
    memcpy(longp + 255, "/n/s", 5);
    assert_int_equal(fx_cli_path_parse(longp, &p, err, sizeof(err)), 0);
    assert_int_equal(strlen(p.tenant), 255);
    memset(longp, 'a', 256);
    memcpy(longp + 256, "/n/s", 5);
    assert_int_equal(fx_cli_path_parse(longp, &p, err, sizeof(err)), -EINVAL);
    assert_int_equal(fx_cli_path_parse(NULL, &p, err, sizeof(err)), -EINVAL);
}

static void test_ack_mode_parse(void **state)
{
    (void)state;
    fx_ack a = FX_ACK_DEFAULT;
    assert_int_equal(fx_cli_parse_ack("none", &a), 0);
    assert_int_equal(a, FX_ACK_NONE);
    assert_int_equal(fx_cli_parse_ack("per_message", &a), 0);
    assert_int_equal(a, FX_ACK_PER_MESSAGE);
    assert_int_equal(fx_cli_parse_ack("per_batch", &a), 0);
    assert_int_equal(a, FX_ACK_PER_BATCH);
    assert_int_equal(fx_cli_parse_ack("per-message", &a), 0);
    assert_int_equal(a, FX_ACK_PER_MESSAGE);
    a = FX_ACK_PER_BATCH;
    static const char *const bad[] = {"", "PER_MESSAGE", "all", "per_messages", "1", "none "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(fx_cli_parse_ack(bad[i], &a), -EINVAL);
    assert_int_equal(a, FX_ACK_PER_BATCH); /* unchanged on error */
    assert_int_equal(fx_cli_parse_ack(NULL, &a), -EINVAL);
    assert_string_equal(fx_cli_ack_name(FX_ACK_PER_MESSAGE), "per_message");
    assert_string_equal(fx_cli_ack_name(FX_ACK_PER_BATCH), "per_batch");
    assert_string_equal(fx_cli_ack_name(FX_ACK_DEFAULT), "none");

    fx_start s;
    assert_int_equal(fx_cli_parse_start("earliest", &s), 0);
    assert_int_equal(s.kind, FX_START_EARLIEST);
    assert_int_equal(fx_cli_parse_start("latest", &s), 0);
    assert_int_equal(s.kind, FX_START_LATEST);
    assert_int_equal(fx_cli_parse_start("18446744073709551615", &s), 0);
    assert_int_equal(s.kind, FX_START_OFFSET);
    assert_true(s.offset == UINT64_MAX);
    assert_int_equal(fx_cli_parse_start("18446744073709551616", &s), -EINVAL);
    assert_int_equal(fx_cli_parse_start("-1", &s), -EINVAL);
    assert_int_equal(fx_cli_parse_start("first", &s), -EINVAL);
}

static void test_option_parser_long_forms_values_and_positionals(void **state)
{
    (void)state;
    enum { O_COUNT = FX_CLI_OPT_FIRST_CMD, O_JSON };
    static const fx_cli_opt opts[] = {
        FX_CLI_COMMON_OPTS, {"count", true, O_COUNT}, {"json", false, O_JSON}, {0}};
    char *argv[] = {"--count", "5", "t1/ns/s", "--json", "--server=h:1", "-", "--", "--json"};
    fx_cli_args it = {.argc = 8, .argv = argv};
    int id = 0;
    const char *val = NULL;
    char err[128];
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, O_COUNT);
    assert_string_equal(val, "5");
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_POS);
    assert_string_equal(val, "t1/ns/s");
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, O_JSON);
    assert_null(val);
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, FX_CLI_OPT_SERVER);
    assert_string_equal(val, "h:1");
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_POS);
    assert_string_equal(val, "-");
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_POS);
    assert_string_equal(val, "--json"); /* after "--" */
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_END);

    char *bad1[] = {"--nope"};
    it = (fx_cli_args){.argc = 1, .argv = bad1};
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "unknown option --nope");
    char *bad2[] = {"--count"};
    it = (fx_cli_args){.argc = 1, .argv = bad2};
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "option --count needs a value");
    char *bad3[] = {"--json=1"};
    it = (fx_cli_args){.argc = 1, .argv = bad3};
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "option --json takes no value");
    char *h[] = {"-h"};
    it = (fx_cli_args){.argc = 1, .argv = h};
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, FX_CLI_OPT_HELP);

    uint64_t v;
    assert_int_equal(fx_cli_parse_size("1K", 1u << 24, &v), 0);
    assert_int_equal(v, 1024);
    assert_int_equal(fx_cli_parse_size("16M", 1u << 24, &v), 0);
    assert_int_equal(v, 16u << 20);
    assert_int_equal(fx_cli_parse_size("17M", 1u << 24, &v), -EINVAL);
    assert_int_equal(fx_cli_parse_size("K", 1u << 24, &v), -EINVAL);
    assert_int_equal(fx_cli_parse_size("1.5K", 1u << 24, &v), -EINVAL);
    double r;
    assert_int_equal(fx_cli_parse_rate("2.5", &r), 0);
    assert_true(r == 2.5);
    assert_int_equal(fx_cli_parse_rate("0", &r), -EINVAL);
    assert_int_equal(fx_cli_parse_rate("-3", &r), -EINVAL);
    assert_int_equal(fx_cli_parse_rate("inf", &r), -EINVAL);
    assert_int_equal(fx_cli_parse_rate("5/s", &r), -EINVAL);
}

static void test_common_flags_require_trust_and_matching_tenant(void **state)
{
    (void)state;
    fx_cli_common c;
    fx_cli_path p;
    char err[512];
    assert_int_equal(fx_cli_path_parse("t9/ns/s", &p, err, sizeof(err)), 0);

    fake_env = NULL;
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), 0);
    assert_string_equal(c.server, "127.0.0.1:5000");
    assert_string_equal(c.admin, "127.0.0.1:8080");
    assert_string_equal(c.tenant, "t1");
    /* No pin, CA or --insecure: refused, and the message says how to fix it. */
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--pin"));
    assert_non_null(strstr(err, "FELIX_PIN"));
    assert_non_null(strstr(err, "TLS certificate SHA-256"));
    /* The path's tenant becomes the client's when none was given. */
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_INSECURE, NULL, err, sizeof(err)), 1);
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), 0);
    assert_string_equal(c.tenant, "t9");
    /* An explicit, different tenant is an error. */
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_TENANT, "t1", err, sizeof(err)), 1);
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "t9"));
    /* --insecure with a pin is contradictory. */
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_TENANT, "t9", err, sizeof(err)), 1);
    fx_cli_common_apply(&c, FX_CLI_OPT_PIN, "ab", err, sizeof(err));
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), -EINVAL);
    assert_int_equal(fx_cli_common_apply(&c, 999, "x", err, sizeof(err)), 0);

    /* The environment supplies defaults; a malformed pin is refused early. */
    static const char *const env[] = {"FELIX_SERVER", "10.0.0.1:7000", "FELIX_PIN",
                                      "zz",           "FELIX_TENANT",  "t9",
                                      "FELIX_ADMIN",  "h:81",          NULL};
    fake_env = env;
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), 0);
    assert_string_equal(c.server, "10.0.0.1:7000");
    assert_string_equal(c.admin, "h:81");
    assert_true(c.tenant_set);
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "64 hex digits"));
    c.pin = "A7:7a:d1:99:e3:62:39:3a:96:be:b0:a3:1a:83:a0:06:e6:de:3c:c1:2e:25:60:b8:01:50:39:2e:"
            "ec:f9:1d:de";
    assert_int_equal(fx_cli_common_check(&c, &p, err, sizeof(err)), 0);

    static const char *const bad_env[] = {"FELIX_INSECURE", "maybe", NULL};
    fake_env = bad_env;
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "FELIX_INSECURE"));
    fake_env = NULL;

    char url[64];
    assert_int_equal(fx_cli_admin_url("127.0.0.1:8080", "/metrics", url, sizeof(url)), 0);
    assert_string_equal(url, "http://127.0.0.1:8080/metrics");
    assert_int_equal(fx_cli_admin_url("https://[::1]:9/", "/v1/streams", url, sizeof(url)), 0);
    assert_string_equal(url, "https://[::1]:9/v1/streams");
    assert_int_equal(fx_cli_admin_url("", "/x", url, sizeof(url)), -EINVAL);
    assert_int_equal(
        fx_cli_admin_url("h:1", "/very/long/path/that/overflows/the/buffer/xxxxxxxxx", url, 16),
        -EINVAL);
}

static void test_pin_and_ca_together_refused(void **state)
{
    (void)state;
    fx_cli_common c;
    char err[512];
    fake_env = NULL;
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), 0);
    assert_null(c.server_name); /* libfelix then checks the host of --server */
    c.pin = "a77ad199e362393a96beb0a31a83a006e6de3cc12e2560b80150392eecf91dde";
    assert_int_equal(fx_cli_common_check(&c, NULL, err, sizeof(err)), 0);
    c.ca_file = "/etc/felix/ca.pem";
    assert_int_equal(fx_cli_common_check(&c, NULL, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--pin and --ca"));
    c.pin = NULL;
    assert_int_equal(fx_cli_common_check(&c, NULL, err, sizeof(err)), 0);
}

/* Writes |text| to a new temporary file named in |path|. */
static void secret_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/fx_test_secret_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

static void test_secret_file_trims_line_end_and_refuses_bad_content(void **state)
{
    (void)state;
    char path[64], out[16], err[512];
    secret_file(path, sizeof(path), "eyJ.tok.sig\r\n");
    assert_int_equal(fx_cli_read_secret(path, "--token-file", out, sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "eyJ.tok.sig");
    unlink(path);
    /* Exactly the buffer less the NUL fits; one byte more does not. */
    secret_file(path, sizeof(path), "0123456789abcde\n");
    assert_int_equal(fx_cli_read_secret(path, "--token-file", out, sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "0123456789abcde");
    unlink(path);
    secret_file(path, sizeof(path), "0123456789abcdef");
    assert_int_equal(fx_cli_read_secret(path, "--token-file", out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "longer than 15 bytes"));
    unlink(path);
    secret_file(path, sizeof(path), "\n\n");
    assert_int_equal(fx_cli_read_secret(path, "--token-file", out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "empty"));
    unlink(path);
    secret_file(path, sizeof(path), "one\ntwo\n");
    assert_int_equal(
        fx_cli_read_secret(path, "--admin-token-file", out, sizeof(out), err, sizeof(err)),
        -EINVAL);
    assert_non_null(strstr(err, "--admin-token-file"));
    assert_non_null(strstr(err, "line break"));
    unlink(path);
    assert_int_equal(fx_cli_read_secret(path, "--token-file", out, sizeof(out), err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, path));
}

static void test_token_files_fill_secrets_and_exclude_inline_flags(void **state)
{
    (void)state;
    fx_cli_common c;
    char tok[64], adm[64], err[512];
    secret_file(tok, sizeof(tok), "from-file\n");
    secret_file(adm, sizeof(adm), "admin-secret\n");
    /* A file wins over the environment, as every flag does. */
    static const char *const env[] = {"FELIX_TOKEN", "from-env", "FELIX_ADMIN_TOKEN", "env-adm",
                                      NULL};
    fake_env = env;
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), 0);
    assert_string_equal(c.token, "from-env");
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_TOKEN_FILE, tok, err, sizeof(err)), 1);
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_ADMIN_TOKEN_FILE, adm, err, sizeof(err)),
                     1);
    assert_int_equal(fx_cli_common_finish(&c, err, sizeof(err)), 0);
    assert_string_equal(c.token, "from-file");
    assert_string_equal(c.admin_token, "admin-secret");
    /* The same secret twice on the command line is a usage error. */
    assert_int_equal(fx_cli_common_apply(&c, FX_CLI_OPT_TOKEN, "inline", err, sizeof(err)), 1);
    assert_int_equal(fx_cli_common_finish(&c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--token and --token-file"));
    assert_int_equal(fx_cli_common_init(&c, env_lookup, err, sizeof(err)), 0);
    fx_cli_common_apply(&c, FX_CLI_OPT_ADMIN_TOKEN, "inline", err, sizeof(err));
    fx_cli_common_apply(&c, FX_CLI_OPT_ADMIN_TOKEN_FILE, adm, err, sizeof(err));
    assert_int_equal(fx_cli_common_finish(&c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--admin-token and --admin-token-file"));
    /* The option table knows both names. */
    static const fx_cli_opt opts[] = {FX_CLI_COMMON_OPTS, {0}};
    char *argv[] = {"--token-file", tok, "--admin-token-file=/x"};
    fx_cli_args it = {.argc = 3, .argv = argv};
    int id = 0;
    const char *val = NULL;
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, FX_CLI_OPT_TOKEN_FILE);
    assert_string_equal(val, tok);
    assert_int_equal(fx_cli_args_next(&it, opts, &id, &val, err, sizeof(err)), FX_CLI_ARG_OPT);
    assert_int_equal(id, FX_CLI_OPT_ADMIN_TOKEN_FILE);
    assert_string_equal(val, "/x");
    fake_env = NULL;
    unlink(tok);
    unlink(adm);
}

/* ---- pacing -------------------------------------------------------------------------- */

static void test_rate_pacing_schedule(void **state)
{
    (void)state;
    const uint64_t MS = 1000000, t0 = 5000 * MS;
    fx_cli_pacer p;
    fx_cli_pacer_init(&p, 100, 5, t0); /* one send every 10 ms */
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0), 0);
    fx_cli_pacer_sent(&p, 1, t0);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0), 10 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 4 * MS), 6 * MS);
    /* Sleeping late does not shift the schedule: send 2 is still due at 20 ms. */
    fx_cli_pacer_sent(&p, 1, t0 + 13 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 13 * MS), 7 * MS);
    /* A batch of 5 goes when its last member is due: sends 2..6, at 60 ms. */
    assert_int_equal(fx_cli_pacer_delay(&p, 5, t0 + 13 * MS), 47 * MS);
    fx_cli_pacer_sent(&p, 5, t0 + 60 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 60 * MS), 10 * MS);
    /* Slightly behind (within the burst allowance): catch up at once. */
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 95 * MS), 0);
    fx_cli_pacer_sent(&p, 1, t0 + 95 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 95 * MS), 0); /* send 8 was due at 80 ms */
    /* A long stall: the schedule restarts instead of bursting 100 sends. */
    fx_cli_pacer_sent(&p, 1, t0 + 1095 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0 + 1095 * MS), 10 * MS);
    assert_int_equal(fx_cli_pacer_delay(&p, 3, t0 + 1095 * MS), 30 * MS);

    /* Rate 0 never waits; a fractional rate paces in seconds. */
    fx_cli_pacer_init(&p, 0, 0, t0);
    fx_cli_pacer_sent(&p, 1000, t0);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0), 0);
    fx_cli_pacer_init(&p, 0.5, 1, t0);
    fx_cli_pacer_sent(&p, 1, t0);
    assert_int_equal(fx_cli_pacer_delay(&p, 1, t0), 2000 * MS);
}

/* ---- Prometheus and the checkpoint table ------------------------------------------- */

static const char METRICS_A[] = "# HELP felix_broker_ingress_dropped_total Unacked publishes shed\n"
                                "# TYPE felix_broker_ingress_dropped_total counter\n"
                                "felix_broker_ingress_dropped_total 77\n"
                                "felix_broker_ingress_rejected_total 3 1700000000000\n"
                                "felix_broker_ingress_queue_depth 12\r\n"
                                "felix_sub_queue_len 4\n"
                                "felix_sub_queue_dropped_total 1000\n"
                                "felix_sub_queue_drop_old_total 250\n"
                                "felix_subscriber_lane_dropped_total 9\n"
                                "felix_subscriber_disconnect_total 2\n"
                                "\n"
                                "felix_publish_requests_total{result=\"ok\"} 500\n"
                                "felix_publish_requests_total{ result=\"error\" , } 7\n"
                                "felix_publish_latency_ns_bucket{le=\"+Inf\"} 500\n"
                                "felix_publish_latency_ns_sum 1.5e+06\n"
                                "odd_metric{path=\"a\\\"b\\\\c\\n\",x=\"1\"} NaN\n";

static const char METRICS_B[] = "felix_broker_ingress_dropped_total 97\n"
                                "felix_broker_ingress_rejected_total 3\n"
                                "felix_broker_ingress_queue_depth 2\n"
                                "felix_sub_queue_dropped_total 1500\n"
                                "felix_publish_requests_total{result=\"ok\"} 400\n";

static void test_prometheus_table_extracts_checkpoint_counters(void **state)
{
    (void)state;
    fx_cli_prom a = {0}, b = {0};
    char err[128];
    assert_int_equal(fx_cli_prom_parse(&a, METRICS_A, strlen(METRICS_A), err, sizeof(err)), 0);
    double v;
    assert_true(fx_cli_prom_get(&a, "felix_publish_requests_total", "result=error", &v));
    assert_true(v == 7);
    assert_true(fx_cli_prom_get(&a, "felix_publish_latency_ns_bucket", "le=+Inf", &v));
    assert_true(v == 500);
    assert_true(fx_cli_prom_get(&a, "felix_publish_latency_ns_sum", NULL, &v));
    assert_true(v == 1.5e6);
    assert_true(fx_cli_prom_get(&a, "odd_metric", "path=a\"b\\c\n,x=1", &v));
    assert_true(isnan(v));
    assert_false(fx_cli_prom_get(&a, "felix_publish_requests_total", NULL, &v));

    fx_cli_stat_row rows[64];
    assert_true(fx_cli_stats_nrows() <= 64);
    fx_cli_stats_rows(&a, NULL, 0, rows);
    const fx_cli_stat_row *r = row_of(rows, "3-4 broker ingress", "dropped");
    assert_true(r->present && r->value == 77 && !r->has_rate);
    r = row_of(rows, "3-4 broker ingress", "rejected");
    assert_true(r->present && r->value == 3);
    r = row_of(rows, "3-4 broker ingress", "queue depth");
    assert_true(r->present && r->gauge && r->value == 12);
    r = row_of(rows, "5 subscriber queues", "depth");
    assert_true(r->present && r->value == 4);
    r = row_of(rows, "5 subscriber queues", "dropped");
    assert_true(r->present && r->value == 1000);
    r = row_of(rows, "5 subscriber queues", "drop_old");
    assert_true(r->present && r->value == 250);
    r = row_of(rows, "6 writer lanes", "dropped");
    assert_true(r->present && r->value == 9);
    r = row_of(rows, "subscribers", "disconnects");
    assert_true(r->present && r->value == 2);
    /* Not exported by this broker: absent, not a made-up zero. */
    r = row_of(rows, "3-4 broker ingress", "waited");
    assert_false(r->present);

    fx_cli_buf t = {0};
    assert_int_equal(fx_cli_stats_table(rows, fx_cli_stats_nrows(), &t), 0);
    char line[256];
    assert_non_null(strstr(t.p, "CHECKPOINT"));
    assert_null(strstr(t.p, "RATE/s")); /* one scrape: no rates */
    table_line(t.p, "felix_broker_ingress_dropped_total", line, sizeof(line));
    assert_non_null(strstr(line, "3-4 broker ingress"));
    assert_non_null(strstr(line, " 77 "));
    table_line(t.p, "felix_broker_ingress_waited_total", line, sizeof(line));
    assert_non_null(strstr(line, " - "));
    table_line(t.p, "felix_sub_queue_drop_old_total", line, sizeof(line));
    assert_non_null(strstr(line, " 250 "));
    fx_cli_buf_free(&t);

    /* A second scrape 2 s later gives per-second rates of counters; a
     * counter that went down (a restart) counts from zero. */
    assert_int_equal(fx_cli_prom_parse(&b, METRICS_B, strlen(METRICS_B), err, sizeof(err)), 0);
    fx_cli_stats_rows(&b, &a, 2.0, rows);
    r = row_of(rows, "3-4 broker ingress", "dropped");
    assert_true(r->has_rate && r->rate == 10.0);
    r = row_of(rows, "5 subscriber queues", "dropped");
    assert_true(r->has_rate && r->rate == 250.0);
    r = row_of(rows, "publish", "ok");
    assert_true(r->has_rate && r->rate == 200.0);
    r = row_of(rows, "3-4 broker ingress", "queue depth");
    assert_false(r->has_rate); /* gauges have no rate */
    assert_int_equal(fx_cli_stats_table(rows, fx_cli_stats_nrows(), &t), 0);
    assert_non_null(strstr(t.p, "RATE/s"));
    table_line(t.p, "felix_broker_ingress_dropped_total", line, sizeof(line));
    assert_non_null(strstr(line, " 10.0 "));
    fx_cli_buf_free(&t);
    fx_cli_prom_free(&a);
    fx_cli_prom_free(&b);

    /* Malformed lines are refused with their line number. */
    static const char *const bad[] = {
        "ok 1\nbad line here\n", "x{a=\"1} 2\n", "x{a=1} 2\n", "x 1abc\n", "9x 1\n", "x\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_cli_prom c = {0};
        assert_int_equal(fx_cli_prom_parse(&c, bad[i], strlen(bad[i]), err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "line"));
        fx_cli_prom_free(&c);
    }
}

/* ---- payload output --------------------------------------------------------------- */

static void test_payload_escaping_of_nonprintable(void **state)
{
    (void)state;
    fx_cli_buf b = {0};
    static const uint8_t in[] = "a\x01"
                                "b\\c\n\t\r\x7f\xff"
                                "\xc3\xa9"  /* é: kept */
                                "\xc2\x85"  /* U+0085, a C1 control: escaped */
                                "\xc0\x80"  /* overlong NUL: escaped */
                                "\xe2\x82"; /* truncated sequence: escaped */
    assert_int_equal(fx_cli_escape_payload(in, sizeof(in) - 1, &b), 0);
    assert_string_equal(b.p, "a\\x01b\\\\c\\n\\t\\r\\x7f\\xff\xc3\xa9\\xc2\\x85\\xc0\\x80"
                             "\\xe2\\x82");
    fx_cli_buf_reset(&b);
    static const uint8_t zero[] = {'x', 0, 'y'};
    assert_int_equal(fx_cli_escape_payload(zero, 3, &b), 0);
    assert_string_equal(b.p, "x\\x00y");
    fx_cli_buf_reset(&b);
    assert_int_equal(fx_cli_escape_payload((const uint8_t *)"plain text", 10, &b), 0);
    assert_string_equal(b.p, "plain text");
    fx_cli_buf_free(&b);

    assert_true(fx_cli_utf8_valid((const uint8_t *)"\xf0\x9f\x98\x80", 4));
    assert_false(fx_cli_utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));     /* surrogate */
    assert_false(fx_cli_utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); /* > U+10FFFF */

    uint8_t gen[8];
    fx_cli_gen_payload(42, gen, sizeof(gen));
    assert_memory_equal(gen, "42 xxxxx", 8);
    fx_cli_gen_payload(123456, gen, 3);
    assert_memory_equal(gen, "123", 3);
}

/* Cleans a copy of |in| and compares it with |want|. */
static void expect_clean(const char *in, const char *want)
{
    char cell[128];
    snprintf(cell, sizeof(cell), "%s", in);
    fx_cli_cell_clean(cell);
    if (strcmp(cell, want) != 0)
        fail_msg("cleaned '%s' to '%s', want '%s'", in, cell, want);
}

static void test_table_cells_replace_controls_c1_and_bidi_overrides(void **state)
{
    (void)state;
    expect_clean("plain-name_1", "plain-name_1");
    expect_clean("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect_clean("a\tb\nc\x1b[2Jd", "a b c [2Jd"); /* C0: a space each, as before */
    expect_clean("x\x7fy", "x?y");                 /* DEL */
    /* C1 controls, first, CSI and last: one '?' each. */
    expect_clean("\xc2\x80"
                 "a\xc2\x9b"
                 "31mb\xc2\x9f",
                 "?a?31mb?");
    /* U+00A0 and U+00FF are text. */
    expect_clean("\xc2\xa0\xc3\xbf", "\xc2\xa0\xc3\xbf");
    /* Bidi embeddings and overrides U+202A-U+202E, isolates U+2066-U+2069. */
    expect_clean("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad\xe2\x80\xae", "?????");
    expect_clean("evil\xe2\x80\xaetxt.exe", "evil?txt.exe");
    expect_clean("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9!", "???"
                                                                      "?!");
    /* Their neighbours stay: U+2029 and U+202F, U+2065 and U+206A. */
    expect_clean("\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa",
                 "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa");
    /* Not UTF-8 (a lone C1 byte, an overlong form, a cut sequence): '?' a byte. */
    expect_clean("a\x9b"
                 "b\xc0\x80"
                 "c\xe2\x80",
                 "a?b??c??");
}

static void test_json_event_line_uses_base64_for_binary(void **state)
{
    (void)state;
    fx_cli_buf b = {0};
    static const uint8_t text[] = "say \"hi\"\\\n\x01 é";
    fx_event ev = {.payload = text, .len = sizeof(text) - 1, .offset = 41, .has_offset = true};
    assert_int_equal(fx_cli_json_event(&ev, 1700000000123u, &b), 0);
    assert_string_equal(b.p, "{\"offset\":41,\"len\":14,\"payload\":\"say \\\"hi\\\"\\\\\\n\\u0001 "
                             "\xc3\xa9\",\"recv_ms\":1700000000123}\n");

    fx_cli_buf_reset(&b);
    static const uint8_t bin[] = {0x00, 0xff, 0x10, 0x80, 0x41};
    ev = (fx_event){.payload = bin,
                    .len = sizeof(bin),
                    .offset = 7,
                    .has_offset = true,
                    .flags = FX_EVENT_GAP,
                    .gap = 3};
    assert_int_equal(fx_cli_json_event(&ev, 5, &b), 0);
    assert_string_equal(b.p, "{\"offset\":7,\"len\":5,\"payload\":\"AP8QgEE=\",\"encoding\":"
                             "\"base64\",\"gap\":3,\"recv_ms\":5}\n");

    fx_cli_buf_reset(&b);
    ev = (fx_event){.payload = (const uint8_t *)"", .len = 0};
    assert_int_equal(fx_cli_json_event(&ev, 0, &b), 0);
    assert_string_equal(b.p, "{\"offset\":null,\"len\":0,\"payload\":\"\",\"recv_ms\":0}\n");

    /* Base64 padding for every remainder. */
    static const struct {
        const char *in, *out;
    } b64[] = {{"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}};
    for (size_t i = 0; i < sizeof(b64) / sizeof(b64[0]); i++) {
        fx_cli_buf_reset(&b);
        assert_int_equal(fx_cli_base64((const uint8_t *)b64[i].in, strlen(b64[i].in), &b), 0);
        assert_string_equal(b.p, b64[i].out);
    }
    fx_cli_buf_free(&b);
}

/* ---- felix consume options ---------------------------------------------------------- */

/* Parses |argv| as `felix consume` does, without the environment and the
 * help: options through fx_cli_common_apply and fx_cli_consume_option, the
 * one positional word into |*pos|, then fx_cli_consume_check. Returns 0 or
 * -EINVAL with |err|. */
static int consume_parse(int argc, char **argv, fx_cli_consume_args *a, const char **pos, char *err,
                         size_t errlen)
{
    fx_cli_consume_args_init(a);
    fake_env = NULL;
    assert_int_equal(fx_cli_common_init(&a->common, env_lookup, err, errlen), 0);
    fx_cli_args it = {.argc = argc, .argv = argv};
    int kind, id = 0;
    const char *val;
    *pos = NULL;
    while ((kind = fx_cli_args_next(&it, FX_CLI_CONSUME_OPTS, &id, &val, err, errlen)) > 0) {
        if (kind == FX_CLI_ARG_POS) {
            assert_null(*pos);
            *pos = val;
            continue;
        }
        int rv = fx_cli_common_apply(&a->common, id, val, err, errlen);
        if (rv == 0)
            rv = fx_cli_consume_option(a, id, val, err, errlen);
        if (rv < 0)
            return rv;
    }
    if (kind < 0)
        return kind;
    return fx_cli_consume_check(a, err, errlen);
}

#define NARGS(v) ((int)(sizeof(v) / sizeof((v)[0])))

static void test_consume_defaults_ack_each_record_and_join_without_create(void **state)
{
    (void)state;
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *argv[] = {"--group", "billing", "t1/default/orders"};
    assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), 0);
    assert_string_equal(a.group, "billing");
    assert_string_equal(pos, "t1/default/orders");
    assert_int_equal(a.settle, FX_CLI_SETTLE_ACK);
    assert_null(a.create_text);
    assert_null(a.member);
    assert_int_equal(a.window, 0);
    assert_int_equal(a.ack_wait_ms, 0);
    assert_int_equal(a.nak_delay_ms, -1);
    assert_false(a.ack_sync);
    assert_false(a.json);
    assert_true(a.count == 0 && a.timeout_ms == 0);
}

static void test_consume_options_fill_member_window_ack_wait_count_and_sync(void **state)
{
    (void)state;
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *argv[] = {"--group=g1",         "--member",   "m-7",        "--window", "32",
                    "--ack-wait-ms=1500", "--ack-sync", "--count",    "10",       "--json",
                    "--timeout-ms",       "2000",       "--insecure", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), 0);
    assert_string_equal(a.group, "g1");
    assert_string_equal(a.member, "m-7");
    assert_int_equal(a.window, 32);
    assert_int_equal(a.ack_wait_ms, 1500);
    assert_true(a.ack_sync);
    assert_true(a.json);
    assert_true(a.count == 10 && a.timeout_ms == 2000);
    assert_true(a.common.insecure); /* the common flags still apply */
    assert_string_equal(pos, "t1/ns/s");
}

static void test_consume_numbers_must_be_positive_and_in_range(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"--window", "0"},      {"--window", "4294967296"},      {"--window", "-1"},
        {"--ack-wait-ms", "0"}, {"--ack-wait-ms", "2147483648"}, {"--count", "0"},
        {"--count", "ten"},     {"--timeout-ms", "0"},           {"--timeout-ms", "1.5"},
        {"--window", ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fx_cli_consume_args a;
        const char *pos;
        char err[256] = "";
        char *argv[] = {"--group", "g", (char *)bad[i][0], (char *)bad[i][1], "t1/ns/s"};
        assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), -EINVAL);
        /* The message names the option that was refused. */
        assert_non_null(strstr(err, bad[i][0]));
    }
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *ok[] = {"--group",       "g",          "--window", "4294967295",
                  "--ack-wait-ms", "2147483647", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(ok), ok, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.window, UINT32_MAX);
    assert_int_equal(a.ack_wait_ms, 2147483647);
}

static void test_consume_create_maps_all_new_and_offset_and_refuses_last(void **state)
{
    (void)state;
    fx_start st = {.kind = FX_START_OFFSET, .offset = 9};
    assert_int_equal(fx_cli_parse_group_create("all", &st), 0);
    assert_int_equal(st.kind, FX_START_EARLIEST);
    assert_int_equal(fx_cli_parse_group_create("new", &st), 0);
    assert_int_equal(st.kind, FX_START_LATEST);
    assert_int_equal(fx_cli_parse_group_create("42", &st), 0);
    assert_int_equal(st.kind, FX_START_OFFSET);
    assert_int_equal(st.offset, 42);
    assert_int_equal(fx_cli_parse_group_create("last", &st), -ENOTSUP);
    static const char *const bad[] = {"", "ALL", "earliest", "latest", "-1", "1x", "new "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(fx_cli_parse_group_create(bad[i], &st), -EINVAL);
    assert_int_equal(st.kind, FX_START_OFFSET); /* unchanged on error */
    assert_int_equal(st.offset, 42);
    assert_int_equal(fx_cli_parse_group_create(NULL, &st), -EINVAL);

    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *argv[] = {"--group", "g", "--create", "all", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), 0);
    assert_string_equal(a.create_text, "all");
    assert_int_equal(a.create.kind, FX_START_EARLIEST);
    char *last[] = {"--group", "g", "--create", "last", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(last), last, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--create last"));
    char *bogus[] = {"--group", "g", "--create=first", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(bogus), bogus, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'first'"));
}

static void test_consume_nak_takes_an_optional_numeric_delay(void **state)
{
    (void)state;
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    /* No value: the group's backoff, and the path after it stays the path. */
    char *bare[] = {"--group", "g", "--nak", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(bare), bare, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.settle, FX_CLI_SETTLE_NAK);
    assert_int_equal(a.nak_delay_ms, -1);
    assert_string_equal(pos, "t1/ns/s");
    /* A number after it is its delay; an option after it is not taken. */
    char *num[] = {"--nak", "500", "t1/ns/s", "--group", "g"};
    assert_int_equal(consume_parse(NARGS(num), num, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.nak_delay_ms, 500);
    assert_string_equal(pos, "t1/ns/s");
    char *opt[] = {"t1/ns/s", "--nak", "--group", "g"};
    assert_int_equal(consume_parse(NARGS(opt), opt, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.nak_delay_ms, -1);
    assert_string_equal(a.group, "g");
    char *zero[] = {"--group", "g", "--nak=0", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(zero), zero, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.nak_delay_ms, 0);
    /* At the end of the line: no value. */
    char *end[] = {"--group", "g", "t1/ns/s", "--nak"};
    assert_int_equal(consume_parse(NARGS(end), end, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.nak_delay_ms, -1);
    /* "--name=value" must be a delay in range. */
    char *bad[] = {"--group", "g", "--nak=soon", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(bad), bad, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--nak"));
    char *big[] = {"--group", "g", "--nak=2147483648", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(big), big, &a, &pos, err, sizeof(err)), -EINVAL);
}

static void test_consume_term_keeps_its_reason_up_to_256_bytes(void **state)
{
    (void)state;
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *argv[] = {"--group", "g", "--term", "bad payload", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(a.settle, FX_CLI_SETTLE_TERM);
    assert_string_equal(a.term_reason, "bad payload");
    char *empty[] = {"--group", "g", "--term=", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(empty), empty, &a, &pos, err, sizeof(err)), 0);
    assert_null(a.term_reason); /* none */
    char reason[258];
    memset(reason, 'r', 256);
    reason[256] = '\0';
    char *fits[] = {"--group", "g", "--term", reason, "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(fits), fits, &a, &pos, err, sizeof(err)), 0);
    assert_int_equal(strlen(a.term_reason), 256);
    reason[256] = 'r';
    reason[257] = '\0';
    assert_int_equal(consume_parse(NARGS(fits), fits, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "256"));
}

static void test_consume_needs_a_group_and_one_settle_mode(void **state)
{
    (void)state;
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *nogroup[] = {"t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(nogroup), nogroup, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--group"));
    char *both[] = {"--group", "g", "--nak", "--term", "x", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(both), both, &a, &pos, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--nak"));
    char *twice[] = {"--group", "g", "--nak", "1", "--nak", "2", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(twice), twice, &a, &pos, err, sizeof(err)), -EINVAL);
    char *one[] = {"--group", "g", "--nak", "1", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(one), one, &a, &pos, err, sizeof(err)), 0);
}

static void test_consume_group_and_member_names_refuse_empty_long_and_controls(void **state)
{
    (void)state;
    char longname[300];
    memset(longname, 'n', 256);
    longname[256] = '\0';
    static const char *const opts[] = {"--group", "--member"};
    const char *bad[] = {"", "a\tb", "a\x7f", longname};
    for (size_t o = 0; o < 2; o++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            fx_cli_consume_args a;
            const char *pos;
            char err[256] = "";
            char *argv[] = {"--group", "g", (char *)opts[o], (char *)bad[i], "t1/ns/s"};
            assert_int_equal(consume_parse(NARGS(argv), argv, &a, &pos, err, sizeof(err)), -EINVAL);
            assert_non_null(strstr(err, opts[o]));
        }
    }
    longname[255] = '\0';
    fx_cli_consume_args a;
    const char *pos;
    char err[256] = "";
    char *ok[] = {"--group", longname, "--member", "é-1", "t1/ns/s"};
    assert_int_equal(consume_parse(NARGS(ok), ok, &a, &pos, err, sizeof(err)), 0);
    assert_string_equal(a.member, "é-1");
}

static void test_json_group_record_line_has_attempt_and_skipped(void **state)
{
    (void)state;
    fx_cli_buf b = {0};
    fx_group_msg m = {
        .payload = (const uint8_t *)"hi \"x\"", .len = 6, .offset = 7, .attempt = 3, .skipped = 0};
    assert_int_equal(fx_cli_json_group_msg(&m, 1700000000123u, &b), 0);
    assert_string_equal(b.p, "{\"offset\":7,\"len\":6,\"payload\":\"hi \\\"x\\\"\",\"attempt\":3,"
                             "\"recv_ms\":1700000000123}\n");
    fx_cli_buf_reset(&b);
    static const uint8_t bin[] = {0xff, 0x00};
    m = (fx_group_msg){.payload = bin, .len = 2, .offset = 12, .attempt = 1, .skipped = 4};
    assert_int_equal(fx_cli_json_group_msg(&m, 5, &b), 0);
    assert_string_equal(b.p,
                        "{\"offset\":12,\"len\":2,\"payload\":\"/wA=\",\"encoding\":\"base64\","
                        "\"attempt\":1,\"skipped\":4,\"recv_ms\":5}\n");
    fx_cli_buf_free(&b);
}

static void test_consume_help_shows_its_options_and_a_group_example(void **state)
{
    (void)state;
    const fx_cli_help *h = fx_cli_help_find("consume");
    assert_non_null(h);
    fx_cli_buf b = {0};
    assert_int_equal(fx_cli_help_text(h, &b), 0);
    static const char *const want[] = {"--group G",     "--create all|new|OFFSET",
                                       "--member",      "--window",
                                       "--ack-wait-ms", "--nak [DELAY_MS]",
                                       "--term REASON", "--ack-sync",
                                       "--count",       "--timeout-ms",
                                       "--json",        "Example:\n  felix consume "};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (strstr(b.p, want[i]) == NULL)
            fail_msg("felix consume --help lacks '%s'", want[i]);
    }
    /* Every option the table takes is in the help. */
    for (const fx_cli_opt *o = FX_CLI_CONSUME_OPTS; o->name != NULL; o++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s", o->name);
        if (strstr(b.p, flag) == NULL)
            fail_msg("felix consume --help lacks %s", flag);
    }
    const char *ex = strstr(b.p, "Example:\n  ");
    assert_non_null(strstr(ex, "--group "));
    fx_cli_buf_free(&b);
}

/* ---- help -------------------------------------------------------------------------- */

static void test_help_text_has_example_for_every_command(void **state)
{
    (void)state;
    size_t n = 0;
    const fx_cli_help *all = fx_cli_help_all(&n);
    assert_true(n >= 4);
    static const char *const want[] = {"pub", "sub", "consume", "stats", "streams", "groups", "cluster"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_non_null(fx_cli_help_find(want[i]));
    assert_null(fx_cli_help_find("nope"));

    fx_cli_buf top = {0};
    assert_int_equal(fx_cli_help_text(NULL, &top), 0);
    for (size_t i = 0; i < n; i++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "felix %s", all[i].name);
        /* The command's own help: usage, an example that runs the command,
         * and the common flags. */
        fx_cli_buf b = {0};
        assert_int_equal(fx_cli_help_text(&all[i], &b), 0);
        assert_true(strncmp(b.p, "Usage: felix ", 13) == 0);
        const char *ex = strstr(b.p, "Example:\n  ");
        assert_non_null(ex);
        assert_true(strncmp(ex + 11, prefix, strlen(prefix)) == 0);
        if (all[i].common_flags)
            assert_non_null(strstr(b.p, "--server"));
        fx_cli_buf_free(&b);
        /* The top-level help lists it with an example. */
        char eg[80];
        snprintf(eg, sizeof(eg), "e.g. %s", prefix);
        assert_non_null(strstr(top.p, eg));
    }
    assert_non_null(strstr(top.p, "Exit status"));
    fx_cli_buf_free(&top);
}

/* ---- consumer groups ------------------------------------------------------------------ */

static void test_group_start_body_names_each_start_and_refuses_others(void **state)
{
    (void)state;
    char body[96], err[256];
    static const struct {
        const char *start, *body;
    } ok[] = {
        {"all", "{\"start\":\"all\"}"},
        {"new", "{\"start\":\"new\"}"},
        {"last", "{\"start\":\"last\"}"},
        {"0", "{\"start\":{\"offset\":0}}"},
        {"1200", "{\"start\":{\"offset\":1200}}"},
        {"9223372036854775807", "{\"start\":{\"offset\":9223372036854775807}}"},
        {"time:1765040000000", "{\"start\":{\"time_ms\":1765040000000}}"},
        {"time:2026-12-06T18:00:00Z", "{\"start\":{\"time_ms\":1796580000000}}"},
        {"time:2026-12-06T18:00:00.25Z", "{\"start\":{\"time_ms\":1796580000250}}"},
        {"time:2026-12-06T19:30:00+01:30", "{\"start\":{\"time_ms\":1796580000000}}"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(fx_cli_group_start_body(ok[i].start, body, sizeof(body), err, sizeof(err)),
                         0);
        assert_string_equal(body, ok[i].body);
    }
    static const char *const bad[] = {"",   "ALL",  "earliest", "-1", "1.5",
                                      "1k", " 12", "9223372036854775808", "time:",
                                      "time:2026-12-06", "time:2026-12-06T18:00:00",
                                      "time:2026-12-06T18:00:00+25:00", "time:yesterday"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(fx_cli_group_start_body(bad[i], body, sizeof(body), err, sizeof(err)),
                         -EINVAL);
        assert_non_null(strstr(err, "--start: expected "));
    }
    /* No room: refused, not cut. */
    assert_int_equal(fx_cli_group_start_body("1200", body, 10, err, sizeof(err)), -EINVAL);
}

static void test_group_route_escapes_names_and_appends_the_action(void **state)
{
    (void)state;
    fx_cli_path p;
    char err[256], route[1024];
    assert_int_equal(fx_cli_path_parse("t1/default/orders.eu", &p, err, sizeof(err)), 0);
    assert_int_equal(fx_cli_group_route(&p, NULL, NULL, route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t1/default/orders.eu/groups");
    assert_int_equal(fx_cli_group_route(&p, "billing", NULL, route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t1/default/orders.eu/groups/billing");
    assert_int_equal(fx_cli_group_route(&p, "bill ing?#%", "seek", route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t1/default/orders.eu/groups/bill%20ing%3F%23%25/seek");
    assert_int_equal(fx_cli_group_route(&p, "g~_-.", "dead-letters", route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t1/default/orders.eu/groups/g~_-./dead-letters");
    assert_int_equal(fx_cli_group_route(&p, "g", "redrive", route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t1/default/orders.eu/groups/g/redrive");
    assert_int_equal(fx_cli_path_parse("t 1/n\xc3\xa9/s", &p, err, sizeof(err)), 0);
    assert_int_equal(fx_cli_group_route(&p, "g", NULL, route, sizeof(route)), 0);
    assert_string_equal(route, "/v1/streams/t%201/n%C3%A9/s/groups/g");
    /* Too small: refused whole. */
    assert_int_equal(fx_cli_group_route(&p, "g", NULL, route, 20), -EINVAL);
}

static void test_group_names_are_checked_before_any_call(void **state)
{
    (void)state;
    char err[256], name[FX_CLI_GROUP_MAX + 2];
    assert_int_equal(fx_cli_group_check("billing", err, sizeof(err)), 0);
    memset(name, 'g', FX_CLI_GROUP_MAX);
    name[FX_CLI_GROUP_MAX] = '\0';
    assert_int_equal(fx_cli_group_check(name, err, sizeof(err)), 0);
    name[FX_CLI_GROUP_MAX] = 'g';
    name[FX_CLI_GROUP_MAX + 1] = '\0';
    assert_int_equal(fx_cli_group_check(name, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "longer than 128 bytes"));
    assert_int_equal(fx_cli_group_check("", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "missing GROUP"));
    assert_int_equal(fx_cli_group_check("a/b", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'/'"));
    assert_int_equal(fx_cli_group_check("a\tb", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "control byte"));
}

static void test_groups_help_shows_every_action_and_an_example(void **state)
{
    (void)state;
    const fx_cli_help *h = fx_cli_help_find("groups");
    assert_non_null(h);
    fx_cli_buf b = {0};
    assert_int_equal(fx_cli_help_text(h, &b), 0);
    static const char *const want[] = {"felix groups ls ",
                                       "felix groups info ",
                                       "felix groups create ",
                                       "felix groups seek ",
                                       "felix groups delete ",
                                       "felix groups dead-letters ",
                                       "felix groups redrive --offset N ",
                                       "felix groups discard --offset N ",
                                       "--offset N",
                                       "felix groups redrive --offset 1042",
                                       "--start START",
                                       "time:2026-12-06T18:00:00Z",
                                       "--json",
                                       "Example:\n  felix groups create --start new"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (strstr(b.p, want[i]) == NULL)
            fail_msg("groups help lacks '%s'", want[i]);
    }
    fx_cli_buf_free(&b);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_path_parse_accepts_three_segments_and_rejects_others),
    cmocka_unit_test(test_ack_mode_parse),
    cmocka_unit_test(test_option_parser_long_forms_values_and_positionals),
    cmocka_unit_test(test_common_flags_require_trust_and_matching_tenant),
    cmocka_unit_test(test_pin_and_ca_together_refused),
    cmocka_unit_test(test_secret_file_trims_line_end_and_refuses_bad_content),
    cmocka_unit_test(test_token_files_fill_secrets_and_exclude_inline_flags),
    cmocka_unit_test(test_rate_pacing_schedule),
    cmocka_unit_test(test_prometheus_table_extracts_checkpoint_counters),
    cmocka_unit_test(test_payload_escaping_of_nonprintable),
    cmocka_unit_test(test_table_cells_replace_controls_c1_and_bidi_overrides),
    cmocka_unit_test(test_json_event_line_uses_base64_for_binary),
    cmocka_unit_test(test_consume_defaults_ack_each_record_and_join_without_create),
    cmocka_unit_test(test_consume_options_fill_member_window_ack_wait_count_and_sync),
    cmocka_unit_test(test_consume_numbers_must_be_positive_and_in_range),
    cmocka_unit_test(test_consume_create_maps_all_new_and_offset_and_refuses_last),
    cmocka_unit_test(test_consume_nak_takes_an_optional_numeric_delay),
    cmocka_unit_test(test_consume_term_keeps_its_reason_up_to_256_bytes),
    cmocka_unit_test(test_consume_needs_a_group_and_one_settle_mode),
    cmocka_unit_test(test_consume_group_and_member_names_refuse_empty_long_and_controls),
    cmocka_unit_test(test_json_group_record_line_has_attempt_and_skipped),
    cmocka_unit_test(test_consume_help_shows_its_options_and_a_group_example),
    cmocka_unit_test(test_help_text_has_example_for_every_command),
    cmocka_unit_test(test_group_start_body_names_each_start_and_refuses_others),
    cmocka_unit_test(test_group_route_escapes_names_and_appends_the_action),
    cmocka_unit_test(test_group_names_are_checked_before_any_call),
    cmocka_unit_test(test_groups_help_shows_every_action_and_an_example),
};
FX_TEST_MAIN(tests)
