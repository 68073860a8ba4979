/* Unit tests for fx_catalog: names and parameters come back at open though
 * directories are hashed, declaring twice keeps the first entry, adopting a
 * directory the original broker wrote, deletion (also cut short by a
 * failure), retention overrides, malformed files, crashes at every write
 * (old or new catalogue, never a mix), and real files. */
/* fx-test-libs: fx_storage fx_base */
#include "felix/error.h"
#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/memio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fx_test.h"

#define ROOT "/data"

static const fx_catalog_params PARAMS = {
    .created_us = 1700000000000000ull,
    .segment_bytes = 1 << 20,
    .index_spacing_bytes = 4096,
};

static fx_catalog *open_ok(fx_memio *m)
{
    fx_catalog *c = NULL;
    char err[256] = "";
    int rv = fx_catalog_open(&c, fx_memio_sio(m), ROOT, err, sizeof(err));
    if (rv != 0)
        fprintf(stderr, "catalog open: %s\n", err);
    assert_int_equal(rv, 0);
    return c;
}

static void expect_malformed(const char *text, const char *want);

static void write_file(fx_memio *m, const char *path, const char *text)
{
    fx_sio *io = fx_memio_sio(m);
    (void)io->ops->unlink(io, path);
    int fd;
    assert_int_equal(io->ops->open(io, path, FX_SIO_CREATE, &fd), 0);
    assert_int_equal(io->ops->pwrite(io, fd, text, strlen(text), 0), 0);
    io->ops->close(io, fd);
}

static void test_names_and_parameters_come_back_at_open(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 0);
    bool adopted = true;
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "acme", "default", "orders", &PARAMS, &adopted, &e), 0);
    assert_false(adopted);
    assert_string_equal(e->dir, "acme_default_orders_0-0d3aed4b998d2798");
    fx_catalog_params p2 = PARAMS;
    p2.retention_bytes = 5000;
    assert_int_equal(fx_catalog_declare(c, "a.b", "caf\xc3\xa9", "x/y", &p2, NULL, NULL), 0);
    fx_catalog_free(c);

    c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 2);
    e = fx_catalog_find(c, "a.b", "caf\xc3\xa9", "x/y");
    assert_non_null(e);
    assert_string_equal(e->tenant, "a.b");
    assert_string_equal(e->stream, "x/y");
    assert_int_equal(e->retention_bytes, 5000);
    assert_int_equal(e->segment_bytes, 1 << 20);
    assert_int_equal(e->created_us, PARAMS.created_us);
    e = fx_catalog_at(c, 0);
    assert_string_equal(e->stream, "orders");
    assert_null(fx_catalog_at(c, 2));
    assert_null(fx_catalog_find(c, "acme", "default", "other"));
    fx_catalog_free(c);
    fx_memio_free(m);
}

static void test_declaring_again_keeps_the_first_entry(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, NULL), 0);
    fx_catalog_params other = PARAMS;
    other.segment_bytes = 777;
    const fx_catalog_entry *e;
    bool adopted = true;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &other, &adopted, &e), 0);
    assert_false(adopted);
    assert_int_equal(e->segment_bytes, 1 << 20);
    assert_int_equal(fx_catalog_count(c), 1);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static int count_any(void *user, const char *name, bool is_dir)
{
    (*(int *)user)++;
    return 0;
}

static void test_a_directory_written_by_the_original_is_adopted(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    /* The original broker: no catalogue, a log in the hashed directory. */
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.io = fx_memio_sio(m);
    fx_dlog *log;
    assert_int_equal(
        fx_dlog_open(&log, ROOT "/acme_default_orders_0-0d3aed4b998d2798", &cfg, 1, NULL), 0);
    fx_dlog_iov r = {.data = "old", .len = 3};
    assert_int_equal(fx_dlog_append(log, &r, 1, 1, NULL), 0);
    assert_int_equal(fx_dlog_close(log, true), 0);

    /* No catalogue beside a stream directory: refused, naming it. */
    fx_catalog *c = NULL;
    char err[512] = "";
    assert_int_equal(fx_catalog_open(&c, fx_memio_sio(m), ROOT, err, sizeof(err)),
                     FX_ESTORAGE_CATALOG);
    assert_null(c);
    assert_non_null(strstr(err, "catalog.json is missing"));
    assert_non_null(strstr(err, "acme_default_orders_0-0d3aed4b998d2798"));
    /* The operator writes an empty one, as the message says. */
    write_file(m, ROOT "/catalog.json", "{\"format\": 1, \"streams\": []}");
    c = open_ok(m);
    int n = 0;
    assert_int_equal(fx_catalog_list_undeclared(c, count_any, &n), 0);
    assert_int_equal(n, 1); /* not declared yet */
    bool adopted = false;
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "acme", "default", "orders", &PARAMS, &adopted, &e), 0);
    assert_true(adopted);
    char path[256];
    assert_int_equal(fx_catalog_dir_path(c, e, path, sizeof(path)), 0);
    assert_int_equal(fx_dlog_open(&log, path, &cfg, 2, NULL), 0);
    assert_int_equal(fx_dlog_next_offset(log), 1);
    fx_dlog_close(log, false);
    n = 0;
    assert_int_equal(fx_catalog_list_undeclared(c, count_any, &n), 0);
    assert_int_equal(n, 0);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static int count_dirs(void *user, const char *name, bool is_dir)
{
    int *n = user;
    (*n)++;
    assert_true(is_dir);
    assert_string_equal(name, "stray_dir");
    return 0;
}

static void test_undeclared_directories_are_listed(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, NULL), 0);
    fx_sio *io = fx_memio_sio(m);
    char path[256];
    assert_int_equal(fx_catalog_dir_path(c, fx_catalog_find(c, "t", "n", "s"), path, sizeof(path)),
                     0);
    assert_int_equal(io->ops->mkdir(io, path), 0);
    assert_int_equal(io->ops->mkdir(io, ROOT "/stray_dir"), 0);
    int n = 0;
    assert_int_equal(fx_catalog_list_undeclared(c, count_dirs, &n), 0);
    assert_int_equal(n, 1);
    fx_catalog_free(c);
    fx_memio_free(m);
}

/* Declares t/n/s in |c| and creates its log's files at |path| (its directory). */
static void declare_with_log(fx_memio *m, fx_catalog *c, char *path, size_t cap)
{
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, &e), 0);
    assert_int_equal(fx_catalog_dir_path(c, e, path, cap), 0);
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.io = fx_memio_sio(m);
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, path, &cfg, 1, NULL), 0);
    fx_dlog_close(log, true);
}

/* Removes t/n/s from |c| with the unlink of its .log files failing |n|
 * times: the removal fails with EIO and leaves the entry marked. */
static void remove_failing(fx_memio *m, fx_catalog *c, unsigned n)
{
    fx_memio_fail_only(m, ".log");
    fx_memio_fail(m, FX_MEMIO_UNLINK, -EIO, n);
    assert_int_equal(fx_catalog_remove(c, "t", "n", "s"), -EIO);
}

static void test_remove_deletes_the_entry_and_the_files(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char path[256];
    declare_with_log(m, c, path, sizeof(path));
    assert_int_equal(fx_catalog_remove(c, "t", "n", "x"), -ENOENT);
    assert_int_equal(fx_catalog_remove(c, "t", "n", "s"), 0);
    assert_int_equal(fx_catalog_count(c), 0);
    bool is_dir;
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(io->ops->stat(io, path, &is_dir), -ENOENT);
    fx_catalog_free(c);
    c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 0);
    /* Declared again, it starts empty and is not "adopted". */
    bool adopted = true;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, &adopted, NULL), 0);
    assert_false(adopted);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static void test_a_deletion_cut_short_is_finished_at_open(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char path[256];
    declare_with_log(m, c, path, sizeof(path));
    remove_failing(m, c, 1);
    assert_null(fx_catalog_find(c, "t", "n", "s")); /* no longer the stream's */
    assert_int_equal(fx_catalog_count(c), 1);
    assert_true(fx_catalog_at(c, 0)->deleting);
    assert_int_equal(fx_catalog_pending_deletions(c), 1);
    fx_catalog_free(c);
    fx_memio_fail_only(m, NULL);
    c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 0);
    bool is_dir;
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(io->ops->stat(io, path, &is_dir), -ENOENT);
    fx_catalog_free(c);
    fx_memio_free(m);
}

/* Appends one record |text| to the log in |path| and flushes it (what an
 * on_commit ack stands for). */
static void append_synced(fx_memio *m, const char *path, const char *text)
{
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.io = fx_memio_sio(m);
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, path, &cfg, 1, NULL), 0);
    fx_dlog_iov r = {.data = text, .len = strlen(text)};
    assert_int_equal(fx_dlog_append(log, &r, 1, 1, NULL), 0);
    assert_int_equal(fx_dlog_sync(log, NULL), 0);
    assert_int_equal(fx_dlog_close(log, false), 0);
}

static uint64_t records_in(fx_memio *m, const char *path)
{
    fx_dlog_config cfg;
    fx_dlog_config_default(&cfg);
    cfg.io = fx_memio_sio(m);
    fx_dlog *log;
    assert_int_equal(fx_dlog_open(&log, path, &cfg, 1, NULL), 0);
    uint64_t n = fx_dlog_next_offset(log) - fx_dlog_first_offset(log);
    fx_dlog_close(log, false);
    return n;
}

/* A deletion that failed part-way leaves its entry marked; the stream
 * declared again must not inherit it: it gets a new generation and
 * directory, and its acknowledged records survive the next open, which
 * finishes the old deletion. */
static void test_a_stream_declared_again_after_a_failed_deletion_keeps_its_records(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char old_path[256], path[256];
    declare_with_log(m, c, old_path, sizeof(old_path));
    uint64_t old_gen = fx_catalog_find(c, "t", "n", "s")->generation;
    remove_failing(m, c, 1);
    fx_memio_fail_only(m, NULL);
    const fx_catalog_entry *e;
    bool adopted = true;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, &adopted, &e), 0);
    assert_false(e->deleting);
    assert_false(adopted);
    assert_true(e->generation > old_gen);
    assert_int_equal(fx_catalog_dir_path(c, e, path, sizeof(path)), 0);
    assert_string_not_equal(path, old_path);
    assert_int_equal(fx_catalog_count(c), 2);
    append_synced(m, path, "acked");
    fx_catalog_free(c);

    c = open_ok(m); /* the next start: the old deletion finishes */
    assert_int_equal(fx_catalog_count(c), 1);
    assert_int_equal(fx_catalog_pending_deletions(c), 0);
    e = fx_catalog_find(c, "t", "n", "s");
    assert_non_null(e);
    char again[256];
    assert_int_equal(fx_catalog_dir_path(c, e, again, sizeof(again)), 0);
    assert_string_equal(again, path);
    assert_int_equal(records_in(m, path), 1);
    bool is_dir;
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(io->ops->stat(io, old_path, &is_dir), -ENOENT);
    fx_catalog_free(c);
    fx_memio_free(m);
}

/* Delete and declare again interleaved as two storage threads can: the old
 * incarnation is marked, a new one declared and written, then the old
 * directory removed. The removal touches only the old incarnation. */
static void test_a_deletion_finished_after_a_new_declaration_removes_only_the_old_one(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char old_path[256], path[256];
    declare_with_log(m, c, old_path, sizeof(old_path));
    uint64_t old_gen = fx_catalog_find(c, "t", "n", "s")->generation;
    assert_int_equal(fx_catalog_begin_delete(c, old_gen), 0);
    assert_null(fx_catalog_find(c, "t", "n", "s"));
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, &e), 0);
    uint64_t gen = e->generation;
    assert_int_equal(fx_catalog_dir_path(c, e, path, sizeof(path)), 0);
    assert_string_not_equal(path, old_path);
    append_synced(m, path, "acked");
    /* The entry goes only once its directory is gone. */
    assert_int_equal(fx_catalog_end_delete(c, old_gen), -ENOTEMPTY);
    assert_int_equal(fx_catalog_end_delete(c, gen), -EINVAL); /* not marked */
    assert_int_equal(fx_sio_remove_dir(fx_memio_sio(m), old_path), 0);
    assert_int_equal(fx_catalog_end_delete(c, old_gen), 0);
    fx_catalog_free(c);
    c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 1);
    e = fx_catalog_find(c, "t", "n", "s");
    assert_non_null(e);
    assert_int_equal(e->generation, gen);
    assert_int_equal(records_in(m, path), 1);
    /* Generations are never reused, also after a restart. */
    assert_int_equal(fx_catalog_declare(c, "t", "n", "other", &PARAMS, NULL, &e), 0);
    assert_true(e->generation > gen);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static void test_a_failed_deletion_is_retried_until_it_is_done(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char path[256];
    declare_with_log(m, c, path, sizeof(path));
    remove_failing(m, c, 2);
    size_t left = 0;
    assert_int_equal(fx_catalog_retry_deletions(c, &left), 0); /* fails again */
    assert_int_equal(left, 1);
    fx_memio_fail_only(m, NULL);
    assert_int_equal(fx_catalog_retry_deletions(c, &left), 0);
    assert_int_equal(left, 0);
    assert_int_equal(fx_catalog_count(c), 0);
    bool is_dir;
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(io->ops->stat(io, path, &is_dir), -ENOENT);
    fx_catalog_free(c);
    fx_memio_free(m);
}

/* A deletion that cannot finish at open does not stop the open. */
static void test_a_deletion_failing_at_open_does_not_stop_the_open(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    char path[256];
    declare_with_log(m, c, path, sizeof(path));
    remove_failing(m, c, 2);
    fx_catalog_free(c);
    c = open_ok(m);
    assert_int_equal(fx_catalog_pending_deletions(c), 1);
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, NULL), 0);
    fx_memio_fail_only(m, NULL);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static void test_a_new_root_gets_an_empty_catalogue_and_losing_it_is_refused(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    fx_sio *io = fx_memio_sio(m);
    bool is_dir = true;
    assert_int_equal(io->ops->stat(io, ROOT "/catalog.json", &is_dir), 0);
    assert_false(is_dir);
    char path[256];
    declare_with_log(m, c, path, sizeof(path));
    fx_catalog_free(c);
    assert_int_equal(io->ops->unlink(io, ROOT "/catalog.json"), 0);
    char err[512] = "";
    assert_int_equal(fx_catalog_open(&c, io, ROOT, err, sizeof(err)), FX_ESTORAGE_CATALOG);
    assert_non_null(strstr(err, strrchr(path, '/') + 1));
    fx_memio_free(m);
}

static void test_generations_and_suffixed_directories_are_checked_at_open(void **state)
{
    char dir[FX_LOGFMT_DIR_NAME_MAX], text[1024];
    fx_logfmt_dir_name(dir, "t", "n", "s", 0);
    /* A deleting entry and a live one of the same names: accepted. */
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, ROOT), 0);
    snprintf(
        text, sizeof(text),
        "{\"format\":1,\"next_generation\":9,\"streams\":["
        "{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\",\"dir\":\"%s\","
        "\"generation\":3,\"created_at_us\":1,\"segment_bytes\":1,\"index_spacing_bytes\":1,"
        "\"deleting\":true},"
        "{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\",\"dir\":\"%s.g7\","
        "\"generation\":7,\"created_at_us\":1,\"segment_bytes\":1,\"index_spacing_bytes\":1}]}",
        dir, dir);
    write_file(m, ROOT "/catalog.json", text);
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_count(c), 1); /* the deletion finished (nothing on disk) */
    assert_int_equal(fx_catalog_find(c, "t", "n", "s")->generation, 7);
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "x", &PARAMS, NULL, &e), 0);
    assert_int_equal(e->generation, 9);
    fx_catalog_free(c);
    fx_memio_free(m);
    /* Two live entries, a suffix of another generation, a repeated one: refused. */
    snprintf(text, sizeof(text),
             "{\"format\":1,\"streams\":[{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\","
             "\"dir\":\"%s.g4\",\"generation\":5,\"created_at_us\":1,\"segment_bytes\":1,"
             "\"index_spacing_bytes\":1}]}",
             dir);
    expect_malformed(text, "is not the stream's");
    snprintf(text, sizeof(text),
             "{\"format\":1,\"streams\":[{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\","
             "\"dir\":\"%s\",\"generation\":5,\"created_at_us\":1,\"segment_bytes\":1,"
             "\"index_spacing_bytes\":1,\"deleting\":true},{\"tenant\":\"t\",\"namespace\":\"n\","
             "\"stream\":\"s\",\"dir\":\"%s.g5\",\"generation\":5,\"created_at_us\":1,"
             "\"segment_bytes\":1,\"index_spacing_bytes\":1}]}",
             dir, dir);
    expect_malformed(text, "repeats the generation");
}

static void test_retention_overrides_are_kept(void **state)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, NULL), 0);
    assert_int_equal(fx_catalog_set_retention(c, "t", "n", "s", 1000, 60), 0);
    assert_int_equal(fx_catalog_set_retention(c, "t", "n", "zz", 1, 1), -ENOENT);
    fx_catalog_free(c);
    c = open_ok(m);
    const fx_catalog_entry *e = fx_catalog_find(c, "t", "n", "s");
    assert_int_equal(e->retention_bytes, 1000);
    assert_int_equal(e->retention_seconds, 60);
    /* A failed write leaves the old values. */
    fx_memio_fail(m, FX_MEMIO_RENAME, -EIO, 1);
    assert_int_equal(fx_catalog_set_retention(c, "t", "n", "s", 5, 5), -EIO);
    assert_int_equal(e->retention_bytes, 1000);
    fx_catalog_free(c);
    c = open_ok(m);
    assert_int_equal(fx_catalog_find(c, "t", "n", "s")->retention_bytes, 1000);
    fx_catalog_free(c);
    fx_memio_free(m);
}

static void expect_malformed(const char *text, const char *want)
{
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    fx_sio *io = fx_memio_sio(m);
    assert_int_equal(fx_sio_mkdirs(io, ROOT), 0);
    write_file(m, ROOT "/catalog.json", text);
    fx_catalog *c = NULL;
    char err[256] = "";
    assert_int_equal(fx_catalog_open(&c, io, ROOT, err, sizeof(err)), FX_ESTORAGE_CATALOG);
    assert_null(c);
    if (strstr(err, want) == NULL)
        fprintf(stderr, "got: %s\n", err);
    assert_non_null(strstr(err, want));
    fx_memio_free(m);
}

static void test_malformed_catalogue_is_refused_with_the_reason(void **state)
{
    expect_malformed("{\"format\":1,", "catalog.json: line 1:");
    expect_malformed("{\"format\":2,\"streams\":[]}", "needs \"format\": 1");
    expect_malformed("{\"format\":1,\"streams\":[{\"tenant\":\"t\"}]}",
                     "stream entry 0: needs string fields");
    expect_malformed("{\"format\":1,\"streams\":[{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":"
                     "\"s\",\"dir\":\"elsewhere\",\"created_at_us\":1,\"segment_bytes\":1,"
                     "\"index_spacing_bytes\":1}]}",
                     "directory \"elsewhere\" is not the stream's");
    char text[512];
    char dir[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(dir, "t", "n", "s", 0);
    snprintf(text, sizeof(text),
             "{\"format\":1,\"streams\":[{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\","
             "\"dir\":\"%s\",\"created_at_us\":1,\"segment_bytes\":-5,\"index_spacing_bytes\":1}]}",
             dir);
    expect_malformed(text, "must be non-negative integers");
}

/* A generation the next declaration would push past what JSON holds made
 * every later change of the catalogue fail, with a misleading "out of
 * memory": such a file is refused at open, naming the field, and a
 * declaration at the bound is refused and changes nothing. */
static void test_a_generation_too_large_to_write_back_is_refused_at_open(void **state)
{
    expect_malformed("{\"format\":1,\"streams\":[],\"next_generation\":9223372036854775807}",
                     "\"next_generation\" from 0 to 2^62");
    char text[512];
    char dir[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(dir, "t", "n", "s", 0);
    snprintf(text, sizeof(text),
             "{\"format\":1,\"streams\":[{\"tenant\":\"t\",\"namespace\":\"n\",\"stream\":\"s\","
             "\"dir\":\"%s\",\"generation\":9223372036854775807,\"created_at_us\":1,"
             "\"segment_bytes\":1,\"index_spacing_bytes\":1}]}",
             dir);
    expect_malformed(text, "generation must be a non-negative integer up to 2^62");
    fx_memio *m;
    assert_int_equal(fx_memio_new(&m), 0);
    assert_int_equal(fx_sio_mkdirs(fx_memio_sio(m), ROOT), 0);
    write_file(m, ROOT "/catalog.json",
               "{\"format\":1,\"streams\":[],\"next_generation\":4611686018427387904}");
    fx_catalog *c = open_ok(m);
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, NULL), -EOVERFLOW);
    assert_int_equal(fx_catalog_count(c), 0);
    fx_catalog_free(c);
    write_file(m, ROOT "/catalog.json",
               "{\"format\":1,\"streams\":[],\"next_generation\":4611686018427380000}");
    c = open_ok(m);
    const fx_catalog_entry *e;
    assert_int_equal(fx_catalog_declare(c, "t", "n", "s", &PARAMS, NULL, &e), 0);
    assert_int_equal(e->generation, 4611686018427380000ull);
    fx_catalog_free(c);
    c = open_ok(m);
    assert_int_equal(fx_catalog_find(c, "t", "n", "s")->generation, 4611686018427380000ull);
    fx_catalog_free(c);
    fx_memio_free(m);
}

/* Declares streams with a crash after a random number of calls; the
 * catalogue read back holds every stream declared before the crash and at
 * most the one being declared. */
static void test_crash_at_any_write_leaves_the_old_or_new_catalogue(void **state)
{
    for (uint64_t point = 1; point < 120; point++) {
        fx_memio *m;
        assert_int_equal(fx_memio_new(&m), 0);
        fx_catalog *c = open_ok(m);
        fx_memio_crash_after(m, point);
        int done = 0;
        for (int i = 0; i < 8; i++) {
            char s[32];
            snprintf(s, sizeof(s), "s%d", i);
            if (fx_catalog_declare(c, "t", "n", s, &PARAMS, NULL, NULL) != 0)
                break;
            done++;
        }
        fx_catalog_free(c);
        fx_memio_crash(m, point);
        c = open_ok(m);
        size_t n = fx_catalog_count(c);
        assert_true(n == (size_t)done || n == (size_t)done + 1);
        for (size_t i = 0; i < n; i++) {
            char s[32];
            snprintf(s, sizeof(s), "s%zu", i);
            assert_non_null(fx_catalog_find(c, "t", "n", s));
        }
        fx_catalog_free(c);
        fx_memio_free(m);
    }
}

static void test_posix_catalogue_round_trip(void **state)
{
    char tmpl[] = "/tmp/fx-catalog-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char root[256];
    snprintf(root, sizeof(root), "%s/root", tmpl);
    fx_catalog *c = NULL;
    char err[256];
    assert_int_equal(fx_catalog_open(&c, NULL, root, err, sizeof(err)), 0);
    assert_int_equal(fx_catalog_declare(c, "t1", "default", "orders", &PARAMS, NULL, NULL), 0);
    fx_catalog_free(c);
    assert_int_equal(fx_catalog_open(&c, NULL, root, err, sizeof(err)), 0);
    assert_int_equal(fx_catalog_count(c), 1);
    assert_int_equal(fx_catalog_remove(c, "t1", "default", "orders"), 0);
    fx_catalog_free(c);
    char path[300];
    snprintf(path, sizeof(path), "%s/catalog.json", root);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(root), 0);
    assert_int_equal(rmdir(tmpl), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_names_and_parameters_come_back_at_open),
    cmocka_unit_test(test_declaring_again_keeps_the_first_entry),
    cmocka_unit_test(test_a_directory_written_by_the_original_is_adopted),
    cmocka_unit_test(test_undeclared_directories_are_listed),
    cmocka_unit_test(test_remove_deletes_the_entry_and_the_files),
    cmocka_unit_test(test_a_deletion_cut_short_is_finished_at_open),
    cmocka_unit_test(test_a_stream_declared_again_after_a_failed_deletion_keeps_its_records),
    cmocka_unit_test(test_a_deletion_finished_after_a_new_declaration_removes_only_the_old_one),
    cmocka_unit_test(test_a_failed_deletion_is_retried_until_it_is_done),
    cmocka_unit_test(test_a_deletion_failing_at_open_does_not_stop_the_open),
    cmocka_unit_test(test_a_new_root_gets_an_empty_catalogue_and_losing_it_is_refused),
    cmocka_unit_test(test_generations_and_suffixed_directories_are_checked_at_open),
    cmocka_unit_test(test_retention_overrides_are_kept),
    cmocka_unit_test(test_malformed_catalogue_is_refused_with_the_reason),
    cmocka_unit_test(test_a_generation_too_large_to_write_back_is_refused_at_open),
    cmocka_unit_test(test_crash_at_any_write_leaves_the_old_or_new_catalogue),
    cmocka_unit_test(test_posix_catalogue_round_trip),
};
FX_TEST_MAIN(tests)
