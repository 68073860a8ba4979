/* Unit tests for config_print.c: where a value came from as messages say
 * it, each key type's value as YAML text (numbers in their largest exact
 * unit, strings quoted only when plain YAML would misread them), the
 * --print-config output (origins, aliases, redacted secrets, no ignored
 * keys; it loads back to the same values) and the Markdown tables. */
/* fx-test-libs: fx_server fx_wire fx_base */
#include "felix/error.h"
#include "server/config.h"
#include "server/config_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

static int idx(const char *name)
{
    int i = fx_config_key_index(name);
    assert_true(i >= 0);
    return i;
}

static const char *value(const fx_config *c, const char *name)
{
    static char buf[1024];
    fx_config_format_value(c, idx(name), buf, sizeof(buf));
    return buf;
}

/* The --print-config text of |c| (malloc'd). */
static char *printed(const fx_config *c)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    assert_non_null(f);
    assert_int_equal(fx_config_print(c, f), 0);
    fclose(f);
    return s;
}

static void set(fx_config *c, const char *kv)
{
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(c, kv, &d), 0);
}

static void test_where_names_each_origin(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    snprintf(c.file, sizeof(c.file), "/etc/felix.yaml");
    char buf[256];
    fx_config_format_where(&c, &(fx_config_origin){.from = FX_CONFIG_FROM_DEFAULT}, buf,
                           sizeof(buf));
    assert_string_equal(buf, "default");
    fx_config_format_where(&c,
                           &(fx_config_origin){.from = FX_CONFIG_FROM_FILE, .line = 3, .col = 7},
                           buf, sizeof(buf));
    assert_string_equal(buf, "/etc/felix.yaml:3:7");
    fx_config_format_where(&c, &(fx_config_origin){.from = FX_CONFIG_FROM_ENV, .name = "FELIX_X"},
                           buf, sizeof(buf));
    assert_string_equal(buf, "env FELIX_X");
    fx_config_format_where(&c, &(fx_config_origin){.from = FX_CONFIG_FROM_FLAG}, buf, sizeof(buf));
    assert_string_equal(buf, "flag --set");
    fx_config_deinit(&c);
}

static void test_numbers_print_in_their_largest_exact_unit(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    assert_string_equal(value(&c, "log_capacity_bytes"), "64MiB");
    assert_string_equal(value(&c, "durable_fsync_interval_ms"), "250ms");
    assert_string_equal(value(&c, "stream_idle_expiry_s"), "1h");
    assert_string_equal(value(&c, "pub_queue_depth"), "64");
    set(&c, "max_frame_bytes=1025");
    assert_string_equal(value(&c, "max_frame_bytes"), "1025");
    set(&c, "idle_timeout_ms=1500ms");
    assert_string_equal(value(&c, "idle_timeout_ms"), "1500ms");
    set(&c, "idle_timeout_ms=120s");
    assert_string_equal(value(&c, "idle_timeout_ms"), "2m");
    fx_config_deinit(&c);
}

static void test_bools_enums_workers_and_streams(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    assert_string_equal(value(&c, "ack_on_commit"), "false");
    set(&c, "ack_on_commit=yes");
    assert_string_equal(value(&c, "ack_on_commit"), "true");
    set(&c, "subscriber_queue_policy=drop_old");
    assert_string_equal(value(&c, "subscriber_queue_policy"), "drop_old");
    set(&c, "workers=auto");
    assert_string_equal(value(&c, "workers"), "auto");
    set(&c, "workers=3");
    assert_string_equal(value(&c, "workers"), "3");
    set(&c, "streams=a/b/c,d/e/f");
    assert_string_equal(value(&c, "streams"), "[2 streams]");
    set(&c, "groups=a/b/c/g");
    assert_string_equal(value(&c, "groups"), "[1 groups]");
    fx_config_deinit(&c);
}

static void test_strings_are_quoted_only_when_needed(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    struct {
        const char *in, *out;
    } cases[] = {
        {"/var/lib/felix", "/var/lib/felix"},
        {"", "\"\""},
        {"null", "\"null\""},
        {"-x", "\"-x\""},
        {"a b", "\"a b\""},
        {"say \"hi\"", "\"say \\\"hi\\\"\""},
        {"back\\slash", "\"back\\\\slash\""},
        {"tab\there", "\"tab\\x09here\""},
    };
    int i = idx("state_dir");
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        snprintf(c.state_dir, sizeof(c.state_dir), "%s", cases[k].in);
        char buf[256];
        fx_config_format_value(&c, i, buf, sizeof(buf));
        assert_string_equal(buf, cases[k].out);
    }
    fx_config_deinit(&c);
}

static void test_print_names_origins_and_redacts_the_token(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    set(&c, "admin_token=s3cret-value");
    set(&c, "admin_bind=127.0.0.1:9001");
    fx_config_diag d = {0};
    char *env[] = {"FELIX_BROKER_PUB_QUEUE_DEPTH=77", NULL};
    assert_int_equal(fx_config_load_env_layer(&c, env, &d), 0);
    char *s = printed(&c);
    assert_non_null(strstr(s, "# felix-broker effective configuration (file: none)"));
    assert_null(strstr(s, "s3cret-value"));
    assert_non_null(strstr(s, "admin_token: '<redacted>'  # flag --set\n"));
    assert_non_null(strstr(s, "metrics_bind: 127.0.0.1:9001  # flag --set (as admin_bind)\n"));
    assert_non_null(strstr(s, "pub_queue_depth: 77  # env FELIX_BROKER_PUB_QUEUE_DEPTH\n"));
    assert_non_null(strstr(s, "log_capacity_bytes: 64MiB  # default\n"));
    assert_non_null(strstr(s, "\n# --- listeners and security ---\n"));
    /* Keys Felix-C ignores or refuses are not printed. */
    assert_null(strstr(s, "initial_cwnd"));
    assert_null(strstr(s, "pump_colocate"));
    free(s);
    fx_config_deinit(&c);
}

static void test_print_loads_back_to_the_same_values(void **state)
{
    fx_config a, b;
    fx_config_defaults(&a);
    set(&a, "pub_queue_depth=5");
    set(&a, "max_frame_bytes=3000");
    set(&a, "streams=t/n/s");
    set(&a, "groups=t/n/s/g@new,t/n/u/a@b@last,t/n/u/o@9,t/n/u/all");
    set(&a, "state_dir=/tmp/odd dir");
    set(&a, "durable_fsync_mode=on_commit");
    char *s = printed(&a);
    fx_config_defaults(&b);
    fx_config_diag d = {0};
    fx_config_src src = {.text = s, .text_name = "printed"};
    assert_int_equal(fx_config_load_file_layer(&b, &src, NULL, &d), 0);
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        char va[1024], vb[1024];
        fx_config_format_value(&a, (int)i, va, sizeof(va));
        fx_config_format_value(&b, (int)i, vb, sizeof(vb));
        assert_string_equal(va, vb);
    }
    assert_string_equal(b.streams[0].stream, "s");
    assert_int_equal(b.ngroups, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(b.groups[i].s.stream, a.groups[i].s.stream);
        assert_string_equal(b.groups[i].group, a.groups[i].group);
        assert_int_equal(b.groups[i].start, a.groups[i].start);
        assert_int_equal(b.groups[i].offset, a.groups[i].offset);
    }
    assert_non_null(strstr(s, "groups: [\"t/n/s/g@new\", \"t/n/u/a@b@last\", \"t/n/u/o@9\", "
                              "\"t/n/u/all@all\"]  # flag --set"));
    free(s);
    fx_config_deinit(&a);
    fx_config_deinit(&b);
}

static void test_markdown_lists_every_key_in_its_table(void **state)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    assert_int_equal(fx_config_print_markdown(f), 0);
    fclose(f);
    const char *warn = strstr(s, "Keys of the original that load with a warning:");
    const char *reject = strstr(s, "Keys of the original that stop start-up:");
    assert_non_null(warn);
    assert_non_null(reject);
    assert_true(warn < reject);
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        char row[128];
        snprintf(row, sizeof(row), "| `%s`", k->name);
        const char *at = strstr(s, row);
        assert_non_null(at);
        if (k->type == T_WARN)
            assert_true(at > warn && at < reject);
        else if (k->type == T_REJECT)
            assert_true(at > reject);
        else
            assert_true(at < warn);
    }
    assert_non_null(strstr(s,
                           "| `metrics_bind` (alias `admin_bind`) | `FELIX_BROKER_METRICS_BIND`, "
                           "`FELIX_METRICS_BIND` (alias) | host:port |"));
    assert_non_null(strstr(s, "| `pub_queue_depth` | `FELIX_BROKER_PUB_QUEUE_DEPTH` | integer "
                              "1..1048576 | `64` |"));
    free(s);
}

static void test_write_errors_are_reported(void **state)
{
    FILE *f = fopen("/dev/full", "w");
    if (f == NULL)
        fx_test_skip("no /dev/full");
    setvbuf(f, NULL, _IONBF, 0);
    fx_config c;
    fx_config_defaults(&c);
    assert_int_equal(fx_config_print(&c, f), -EIO);
    clearerr(f);
    assert_int_equal(fx_config_print_markdown(f), -EIO);
    fclose(f);
    fx_config_deinit(&c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_where_names_each_origin),
    cmocka_unit_test(test_numbers_print_in_their_largest_exact_unit),
    cmocka_unit_test(test_bools_enums_workers_and_streams),
    cmocka_unit_test(test_strings_are_quoted_only_when_needed),
    cmocka_unit_test(test_print_names_origins_and_redacts_the_token),
    cmocka_unit_test(test_print_loads_back_to_the_same_values),
    cmocka_unit_test(test_markdown_lists_every_key_in_its_table),
    cmocka_unit_test(test_write_errors_are_reported),
};

FX_TEST_MAIN(tests)
