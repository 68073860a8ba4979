/* libFuzzer target: the durable catalogue (storage/catalog.h) read from
 * arbitrary bytes. The input is an options byte, then the text of
 * catalog.json. The options lay out the root on an fx_memio before the open:
 * bit 0 and 1 the original's directories of streams "a" and "b", bit 2 the
 * suffixed ".g3" directory of "a", bit 3 a plain file where "c"'s directory
 * would be, bit 4 a hidden directory, bit 5 no catalog.json at all, bit 6 a
 * failing rename under the first new declaration. Checked: an open either
 * succeeds or refuses with FX_ESTORAGE_CATALOG and a reason; an open
 * catalogue has unique non-zero generations, one live entry per name,
 * unique directories that are the stream's (the original's name or
 * ".g<generation>"), no deletion left pending; declarations, deletions
 * (begun, refused while the directory exists, finished) and retries keep
 * that; a failed declaration changes nothing; a reopened catalogue equals
 * the one that wrote it. tests/fuzz/seeds.c writes the seeds.
 * Single-threaded. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "felix/error.h"
#include "storage/catalog.h"
#include "storage/format.h"
#include "storage/memio.h"

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define ROOT "/r"
#define T "t1"
#define NS "default"

enum {
    OPT_DIR_A = 1,
    OPT_DIR_B = 2,
    OPT_DIR_A_G3 = 4,
    OPT_FILE_C = 8,
    OPT_HIDDEN = 16,
    OPT_NO_FILE = 32,
    OPT_FAIL_RENAME = 64,
};

static const fx_catalog_params PARAMS = {
    .created_us = 1700000000000000ull,
    .segment_bytes = 1 << 20,
    .index_spacing_bytes = 4096,
    .retention_bytes = 77,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, ROOT "/%s", name);
}

static bool make_dir(fx_memio *m, const char *name)
{
    char path[FX_CATALOG_DIR_MAX + 8];
    path_of(path, sizeof(path), name);
    return fx_sio_mkdirs(fx_memio_sio(m), path) == 0;
}

static bool write_file(fx_memio *m, const char *path, const void *p, size_t n)
{
    fx_sio *io = fx_memio_sio(m);
    int fd;
    if (io->ops->open(io, path, FX_SIO_CREATE, &fd) != 0)
        return false;
    int rv = n > 0 ? io->ops->pwrite(io, fd, p, n, 0) : 0;
    if (rv == 0)
        rv = io->ops->fdatasync(io, fd);
    io->ops->close(io, fd);
    return rv == 0;
}

static bool exists(fx_memio *m, const char *name)
{
    char path[FX_CATALOG_DIR_MAX + 8];
    path_of(path, sizeof(path), name);
    fx_sio *io = fx_memio_sio(m);
    bool is_dir;
    return io->ops->stat(io, path, &is_dir) == 0;
}

static void base_dir(char *out, const char *stream)
{
    fx_logfmt_dir_name(out, T, NS, stream, 0);
}

/* The root as the options say, and catalog.json from |p|. */
static bool lay_root(fx_memio *m, uint8_t opts, const uint8_t *p, size_t n)
{
    char name[FX_CATALOG_DIR_MAX];
    bool ok = fx_sio_mkdirs(fx_memio_sio(m), ROOT) == 0;
    if (ok && (opts & OPT_DIR_A))
        base_dir(name, "a"), ok = make_dir(m, name);
    if (ok && (opts & OPT_DIR_B))
        base_dir(name, "b"), ok = make_dir(m, name);
    if (ok && (opts & OPT_DIR_A_G3)) {
        char base[FX_LOGFMT_DIR_NAME_MAX];
        base_dir(base, "a");
        snprintf(name, sizeof(name), "%s.g3", base);
        ok = make_dir(m, name);
    }
    if (ok && (opts & OPT_FILE_C)) {
        char path[FX_CATALOG_DIR_MAX + 8];
        base_dir(name, "c");
        path_of(path, sizeof(path), name);
        ok = write_file(m, path, "x", 1);
    }
    if (ok && (opts & OPT_HIDDEN))
        ok = make_dir(m, ".hidden");
    if (ok && !(opts & OPT_NO_FILE))
        ok = write_file(m, ROOT "/" FX_CATALOG_FILE, p, n);
    return ok;
}

/* ---- invariants ------------------------------------------------------------------ */

static bool is_streams_dir(const fx_catalog_entry *e)
{
    char base[FX_LOGFMT_DIR_NAME_MAX], alt[FX_CATALOG_DIR_MAX];
    fx_logfmt_dir_name(base, e->tenant, e->ns, e->stream, 0);
    snprintf(alt, sizeof(alt), "%s.g%" PRIu64, base, e->generation);
    return strcmp(e->dir, base) == 0 || strcmp(e->dir, alt) == 0;
}

static bool same_names(const fx_catalog_entry *a, const fx_catalog_entry *b)
{
    return strcmp(a->tenant, b->tenant) == 0 && strcmp(a->ns, b->ns) == 0 &&
           strcmp(a->stream, b->stream) == 0;
}

static uint64_t max_generation(const fx_catalog *c)
{
    uint64_t g = 0;
    for (size_t i = 0; i < fx_catalog_count(c); i++)
        if (fx_catalog_at(c, i)->generation > g)
            g = fx_catalog_at(c, i)->generation;
    return g;
}

static void check(const fx_catalog *c)
{
    size_t n = fx_catalog_count(c);
    for (size_t i = 0; i < n; i++) {
        const fx_catalog_entry *e = fx_catalog_at(c, i);
        FUZZ_CHECK(e->generation != 0);
        FUZZ_CHECK(is_streams_dir(e));
        FUZZ_CHECK(fx_catalog_find_generation(c, e->generation) == e);
        if (!e->deleting)
            FUZZ_CHECK(fx_catalog_find(c, e->tenant, e->ns, e->stream) == e);
        for (size_t j = i + 1; j < n; j++) {
            const fx_catalog_entry *o = fx_catalog_at(c, j);
            FUZZ_CHECK(o->generation != e->generation);
            FUZZ_CHECK(strcmp(o->dir, e->dir) != 0);
            FUZZ_CHECK(e->deleting || o->deleting || !same_names(e, o));
        }
    }
    FUZZ_CHECK(fx_catalog_at(c, n) == NULL);
}

static void check_equal(const fx_catalog *a, const fx_catalog *b)
{
    FUZZ_CHECK(fx_catalog_count(a) == fx_catalog_count(b));
    for (size_t i = 0; i < fx_catalog_count(a); i++) {
        const fx_catalog_entry *x = fx_catalog_at(a, i), *y = fx_catalog_at(b, i);
        FUZZ_CHECK(same_names(x, y));
        FUZZ_CHECK(strcmp(x->dir, y->dir) == 0);
        FUZZ_CHECK(x->generation == y->generation);
        FUZZ_CHECK(x->created_us == y->created_us);
        FUZZ_CHECK(x->segment_bytes == y->segment_bytes);
        FUZZ_CHECK(x->index_spacing_bytes == y->index_spacing_bytes);
        FUZZ_CHECK(x->retention_bytes == y->retention_bytes);
        FUZZ_CHECK(x->retention_seconds == y->retention_seconds);
        FUZZ_CHECK(x->deleting == y->deleting);
    }
}

static fx_catalog *open_again(fx_memio *m)
{
    fx_catalog *c = NULL;
    char err[512] = "";
    int rv = fx_catalog_open(&c, fx_memio_sio(m), ROOT, err, sizeof(err));
    if (rv != 0)
        fprintf(stderr, "reopen: %s: %s\n", fx_strerror(rv), err);
    FUZZ_CHECK(rv == 0);
    check(c);
    return c;
}

/* Opening what |c| wrote gives |c| back (nothing is pending: the reopen's
 * retry of deletions changes nothing). */
static void check_reopen(fx_memio *m, const fx_catalog *c)
{
    FUZZ_CHECK(fx_catalog_pending_deletions(c) == 0);
    fx_catalog *c2 = open_again(m);
    check_equal(c, c2);
    fx_catalog_free(c2);
}

/* ---- operations ------------------------------------------------------------------ */

/* Declares |stream|: its live entry (adopted when the original's
 * directory was there and free), or NULL for a file in its place or
 * generations used up (a next_generation near 2^62 read). */
static const fx_catalog_entry *declare(fx_memio *m, fx_catalog *c, const char *stream)
{
    const fx_catalog_entry *before = fx_catalog_find(c, T, NS, stream), *e = NULL;
    char base[FX_LOGFMT_DIR_NAME_MAX];
    base_dir(base, stream);
    bool base_free = true;
    for (size_t i = 0; i < fx_catalog_count(c); i++)
        base_free = base_free && strcmp(fx_catalog_at(c, i)->dir, base) != 0;
    bool had_dir = exists(m, base), adopted = false;
    uint64_t top = max_generation(c);
    size_t n = fx_catalog_count(c);
    int rv = fx_catalog_declare(c, T, NS, stream, &PARAMS, &adopted, &e);
    if (rv == -ENOTDIR || rv == -EOVERFLOW) { /* nothing changed */
        FUZZ_CHECK(before == NULL && fx_catalog_count(c) == n);
        FUZZ_CHECK(fx_catalog_find(c, T, NS, stream) == NULL);
        FUZZ_CHECK(rv == -EOVERFLOW || (base_free && had_dir));
        return NULL;
    }
    if (rv != 0)
        fprintf(stderr, "declare %s: %s\n", stream, fx_strerror(rv));
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(e == fx_catalog_find(c, T, NS, stream));
    if (before != NULL) {
        FUZZ_CHECK(!adopted);
        return e;
    }
    FUZZ_CHECK(e->generation > top);
    FUZZ_CHECK(e->retention_bytes == PARAMS.retention_bytes);
    FUZZ_CHECK(adopted == (base_free && had_dir));
    FUZZ_CHECK(strcmp(e->dir, base) == 0 || !base_free);
    check(c);
    return e;
}

/* A declaration whose catalogue write fails changes nothing. */
static void declare_failing(fx_memio *m, fx_catalog *c)
{
    size_t n = fx_catalog_count(c);
    fx_memio_fail(m, FX_MEMIO_RENAME, -EIO, 1);
    int rv = fx_catalog_declare(c, T, NS, "failing", &PARAMS, NULL, NULL);
    fx_memio_fail(m, FX_MEMIO_RENAME, 0, 0);
    if (rv == 0) /* declared before (the input named it): no write */
        return;
    FUZZ_CHECK(rv == -EIO || rv == -EOVERFLOW); /* the generations used up: no write tried */
    FUZZ_CHECK(fx_catalog_count(c) == n);
    FUZZ_CHECK(fx_catalog_find(c, T, NS, "failing") == NULL);
    check_reopen(m, c);
}

/* Deletes |stream|'s live incarnation while its directory holds a file:
 * the names are free at once, the entry stays until the directory is gone,
 * and a declaration meanwhile gets an incarnation of its own. */
static void delete_and_redeclare(fx_memio *m, fx_catalog *c, const char *stream)
{
    const fx_catalog_entry *e = declare(m, c, stream);
    if (e == NULL)
        return;
    uint64_t gen = e->generation;
    char dir[FX_CATALOG_DIR_MAX], path[FX_CATALOG_DIR_MAX + 32];
    snprintf(dir, sizeof(dir), "%s", e->dir);
    FUZZ_CHECK(make_dir(m, dir));
    path_of(path, sizeof(path), dir);
    strcat(path, "/00000000000000000000.log");
    (void)fx_memio_sio(m)->ops->unlink(fx_memio_sio(m), path);
    FUZZ_CHECK(write_file(m, path, "seg", 3));
    FUZZ_CHECK(fx_catalog_begin_delete(c, gen) == 0);
    FUZZ_CHECK(fx_catalog_begin_delete(c, gen) == 0); /* idempotent */
    FUZZ_CHECK(fx_catalog_find(c, T, NS, stream) == NULL);
    FUZZ_CHECK(fx_catalog_end_delete(c, gen) == -ENOTEMPTY);
    FUZZ_CHECK(fx_catalog_pending_deletions(c) == 1);
    const fx_catalog_entry *again = declare(m, c, stream);
    uint64_t again_gen = again != NULL ? again->generation : 0;
    FUZZ_CHECK(again == NULL || (again_gen != gen && strcmp(again->dir, dir) != 0));
    char dir_path[FX_CATALOG_DIR_MAX + 8];
    path_of(dir_path, sizeof(dir_path), dir);
    FUZZ_CHECK(fx_sio_remove_dir(fx_memio_sio(m), dir_path) == 0);
    FUZZ_CHECK(fx_catalog_end_delete(c, gen) == 0);
    FUZZ_CHECK(fx_catalog_end_delete(c, gen) == -ENOENT);
    FUZZ_CHECK(fx_catalog_find_generation(c, gen) == NULL);
    const fx_catalog_entry *live = fx_catalog_find(c, T, NS, stream);
    FUZZ_CHECK(again == NULL ? live == NULL : live->generation == again_gen);
    check(c);
}

static void exercise(fx_memio *m, fx_catalog *c, uint8_t opts)
{
    check(c);
    FUZZ_CHECK(fx_catalog_pending_deletions(c) == 0); /* the memio lets every removal happen */
    check_reopen(m, c);
    if (opts & OPT_FAIL_RENAME)
        declare_failing(m, c);
    declare(m, c, "a");
    declare(m, c, "b");
    declare(m, c, "c");
    check_reopen(m, c);
    delete_and_redeclare(m, c, "a");
    const fx_catalog_entry *b = fx_catalog_find(c, T, NS, "b");
    if (b != NULL) {
        FUZZ_CHECK(fx_catalog_set_retention(c, T, NS, "b", 5, 6) == 0);
        FUZZ_CHECK(fx_catalog_remove(c, T, NS, "b") == 0);
        FUZZ_CHECK(fx_catalog_find(c, T, NS, "b") == NULL);
    }
    /* Deletions begun and left: retried, then gone. */
    for (size_t i = 0; i < fx_catalog_count(c); i++)
        if (i % 2 == 0)
            FUZZ_CHECK(fx_catalog_begin_delete(c, fx_catalog_at(c, i)->generation) == 0);
    size_t left = 1;
    FUZZ_CHECK(fx_catalog_retry_deletions(c, &left) == 0);
    FUZZ_CHECK(left == 0);
    check(c);
    check_reopen(m, c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fx_log_set_level(FX_LOG_ERROR);
    fx_memio *m;
    if (fx_memio_new(&m) != 0)
        return 0;
    if (!lay_root(m, data[0], data + 1, size - 1)) {
        fx_memio_free(m);
        return 0;
    }
    fx_catalog *c = NULL;
    char err[512] = "";
    int rv = fx_catalog_open(&c, fx_memio_sio(m), ROOT, err, sizeof(err));
    if (rv == 0) {
        exercise(m, c, data[0]);
        fx_catalog_free(c);
    } else if (rv != -ENOMEM) {
        if (rv != FX_ESTORAGE_CATALOG)
            fprintf(stderr, "open: %s: %s\n", fx_strerror(rv), err);
        FUZZ_CHECK(rv == FX_ESTORAGE_CATALOG);
        FUZZ_CHECK(err[0] != '\0');
    }
    fx_memio_free(m);
    return 0;
}
