/* Unit tests for config_memory.c: the memory target (cgroup v2 memory.max
 * up the hierarchy, else half of RAM; a caller's value; an explicit one
 * kept), the bound's terms, the defaults it derives to fit the target
 * (explicit settings kept) and the check that refuses explicit settings
 * over it but only warns about defaults. Cgroup files are laid out in a
 * mkdtemp directory. */
/* fx-test-libs: fx_server fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include "felix/error.h"
#include "server/config.h"
#include "server/config_internal.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fx_test.h"

static char base[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void mkd(const char *rel)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    assert_int_equal(mkdir(path, 0700), 0);
}

static int setup(void **state)
{
    snprintf(base, sizeof(base), "/tmp/fx-cgroup-XXXXXX");
    return mkdtemp(base) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    return nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_host_memory_takes_the_smallest_cgroup_limit_up_the_tree(void **state)
{
    char proc[128], root[128];
    snprintf(proc, sizeof(proc), "%s/cgroup", base);
    snprintf(root, sizeof(root), "%s/fs", base);
    put("cgroup", "1:cpu:/ignored\n0::/a/b\n");
    mkd("fs");
    mkd("fs/a");
    mkd("fs/a/b");
    put("fs/memory.max", "max\n");
    put("fs/a/memory.max", "2000\n");
    put("fs/a/b/memory.max", "3000\n");
    const char *src = NULL;
    assert_int_equal(fx_config_host_memory(proc, root, 10000, &src), 2000);
    assert_string_equal(src, "cgroup memory.max");
    /* A limit above the RAM does not bind: half of RAM. */
    assert_int_equal(fx_config_host_memory(proc, root, 1000, &src), 500);
    assert_string_equal(src, "half of RAM");
    /* Unknown RAM: the cgroup limit. */
    assert_int_equal(fx_config_host_memory(proc, root, 0, &src), 2000);
}

static void test_host_memory_without_a_cgroup_limit_is_half_of_ram(void **state)
{
    char proc[128], root[128], missing[128];
    snprintf(proc, sizeof(proc), "%s/cgroup", base);
    snprintf(root, sizeof(root), "%s/fs", base);
    snprintf(missing, sizeof(missing), "%s/none", base);
    const char *src = NULL;
    assert_int_equal(fx_config_host_memory(missing, root, 8000, &src), 4000);
    assert_string_equal(src, "half of RAM");
    /* Only cgroup v1 lines, or limits that are "max", 0 or garbage. */
    put("cgroup", "3:memory:/x\n");
    assert_int_equal(fx_config_host_memory(proc, root, 8000, &src), 4000);
    put("cgroup", "0::/x\n");
    mkd("fs");
    mkd("fs/x");
    put("fs/x/memory.max", "0\n");
    put("fs/memory.max", "12abc\n");
    assert_int_equal(fx_config_host_memory(proc, root, 8000, &src), 4000);
    put("fs/x/memory.max", "max\n");
    assert_int_equal(fx_config_host_memory(proc, root, 8000, &src), 4000);
}

static void test_target_given_or_explicit(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    assert_int_equal(fx_config_resolve_memory_target(&c, 5 * GiB, &d), 0);
    assert_int_equal(c.memory_limit_bytes, 5 * GiB);
    const fx_config_origin *o = fx_config_origin_of(&c, "memory_limit_bytes");
    assert_string_equal(o->note, "given by the caller");
    fx_config_deinit(&c);
    fx_config_defaults(&c);
    c.memory_limit_bytes = 3 * GiB;
    assert_int_equal(fx_config_resolve_memory_target(&c, 5 * GiB, &d), 0);
    assert_int_equal(c.memory_limit_bytes, 3 * GiB);
    fx_config_deinit(&c);
    /* Detected from this host: whole MiB. */
    fx_config_defaults(&c);
    assert_int_equal(fx_config_resolve_memory_target(&c, 0, &d), 0);
    assert_int_equal(c.memory_limit_bytes % MiB, 0);
    fx_config_deinit(&c);
}

static void test_bound_sums_its_terms(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    c.quic_conn_recv_window_max = 4 * MiB;
    c.quic_unacked_send_bytes = 1 * MiB;
    c.max_connections = 10;
    c.pub_inflight_bytes = 7 * MiB;
    c.allocator_retain_bytes = 3 * MiB;
    c.log_capacity_bytes = 2 * MiB;
    c.max_frame_bytes = 1 * MiB;
    c.cache_max_bytes = 0; /* its own term, checked below */
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(&c, "streams=a/b/c,a/b/d", &d), 0);
    fx_config_bound b;
    fx_config_memory_bound(&c, &b);
    assert_int_equal(b.per_conn, 5 * MiB);
    assert_int_equal(b.conns, 50 * MiB);
    assert_int_equal(b.ingress, 7 * MiB);
    assert_int_equal(b.retained, 3 * MiB);
    assert_int_equal(b.rings, 6 * MiB);
    assert_int_equal(b.durable, 0);
    assert_int_equal(b.total, 66 * MiB);
    /* Durable buffers count per worker once storage is on. */
    snprintf(c.durable_storage_dir, sizeof(c.durable_storage_dir), "/data");
    c.workers = 2;
    c.durable_max_records_per_read = 100;
    fx_config_memory_bound(&c, &b);
    assert_int_equal(b.durable, 2 * (1 * MiB + 65536ull * 44 + 1 * MiB + 100 * 16));
    assert_int_equal(b.total, 66 * MiB + b.durable);
    /* The caches count cache_max_bytes. */
    c.cache_max_bytes = 5 * MiB;
    fx_config_memory_bound(&c, &b);
    assert_int_equal(b.caches, 5 * MiB);
    assert_int_equal(b.total, 71 * MiB + b.durable);
    c.cache_max_bytes = 0;
    char line[512];
    fx_config_format_bound(&c, line, sizeof(line));
    assert_non_null(strstr(line, "10 connections x (4 MiB receive window + 1 MiB unacked)"));
    assert_non_null(strstr(line, "2 streams x 3 MiB"));
    assert_non_null(strstr(line, "2 storage threads x"));
    fx_config_deinit(&c);
}

/* A group's stream not in streams is made at start: it counts as a ring. */
static void test_bound_counts_the_streams_groups_make(void **state)
{
    (void)state;
    fx_config c;
    fx_config_defaults(&c);
    c.log_capacity_bytes = 2 * MiB;
    c.max_frame_bytes = 1 * MiB;
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(&c, "streams=a/b/c", &d), 0);
    assert_int_equal(fx_config_load_flag(&c, "groups=a/b/c/g,a/b/x/g,a/b/x/h,z/b/x/g", &d), 0);
    fx_config_bound b;
    fx_config_memory_bound(&c, &b);
    assert_int_equal(b.rings, 3 * 3 * MiB);
    char line[512];
    fx_config_format_bound(&c, line, sizeof(line));
    assert_non_null(strstr(line, "3 streams x 3 MiB"));
    fx_config_deinit(&c);
}

static void test_derivation_shrinks_defaults_to_fit_the_target(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    c.memory_limit_bytes = 1 * GiB;
    uint64_t win_def = c.quic_conn_recv_window_max;
    uint32_t conns_def = c.max_connections;
    fx_config_derive_memory(&c);
    assert_true(c.quic_conn_recv_window_max < win_def);
    assert_true(c.quic_conn_recv_window_max >= MiB);
    /* A power of two. */
    assert_int_equal(c.quic_conn_recv_window_max & (c.quic_conn_recv_window_max - 1), 0);
    assert_true(c.quic_conn_recv_window <= c.quic_conn_recv_window_max);
    assert_true(c.max_connections < conns_def);
    assert_string_equal(fx_config_origin_of(&c, "max_connections")->note,
                        "derived from memory_limit_bytes");
    fx_config_bound b;
    fx_config_memory_bound(&c, &b);
    assert_true(b.total <= c.memory_limit_bytes);
    fx_config_diag d = {0};
    assert_int_equal(fx_config_check_memory(&c, &d), 0);
    assert_int_equal(d.nwarnings, 0);
    fx_config_deinit(&c);
}

static void test_derivation_keeps_explicit_settings(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(&c, "quic_conn_recv_window_max=32MiB", &d), 0);
    assert_int_equal(fx_config_load_flag(&c, "max_connections=100", &d), 0);
    c.memory_limit_bytes = 1 * GiB;
    fx_config_derive_memory(&c);
    assert_int_equal(c.quic_conn_recv_window_max, 32 * MiB);
    assert_int_equal(c.max_connections, 100);
    /* Without a target nothing is derived. */
    fx_config_deinit(&c);
    fx_config_defaults(&c);
    uint32_t conns = c.max_connections;
    c.memory_limit_bytes = 0;
    fx_config_derive_memory(&c);
    assert_int_equal(c.max_connections, conns);
    fx_config_deinit(&c);
}

static void test_check_refuses_explicit_settings_over_the_target(void **state)
{
    fx_config c;
    fx_config_defaults(&c);
    fx_config_diag d = {0};
    assert_int_equal(fx_config_load_flag(&c, "max_connections=100000", &d), 0);
    c.memory_limit_bytes = 1 * GiB;
    assert_int_equal(fx_config_check_memory(&c, &d), FX_ECONFIG);
    assert_non_null(strstr(d.error, "the bound exceeds the target"));
    assert_non_null(strstr(d.error, "max_connections (flag --set)"));
    fx_config_deinit(&c);
    /* Only defaults over it: a warning. */
    fx_config_defaults(&c);
    memset(&d, 0, sizeof(d));
    c.memory_limit_bytes = 64 * MiB;
    c.origin[fx_config_key_index("memory_limit_bytes")].note = "half of RAM";
    assert_int_equal(fx_config_check_memory(&c, &d), 0);
    assert_int_equal(d.nwarnings, 1);
    assert_non_null(strstr(d.warnings[0], "the defaults do not fit this host"));
    fx_config_deinit(&c);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_host_memory_takes_the_smallest_cgroup_limit_up_the_tree),
    T(test_host_memory_without_a_cgroup_limit_is_half_of_ram),
    T(test_target_given_or_explicit),
    T(test_bound_sums_its_terms),
    T(test_bound_counts_the_streams_groups_make),
    T(test_derivation_shrinks_defaults_to_fit_the_target),
    T(test_derivation_keeps_explicit_settings),
    T(test_check_refuses_explicit_settings_over_the_target),
};

FX_TEST_MAIN(tests)
