/* The catalogue of durable streams (catalog.h): JSON through jansson,
 * replaced atomically through fx_sio_write_file_atomic. */
#include "storage/catalog.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/grow.h"
#include "base/log.h"
#include "felix/error.h"

#define CATALOG_FORMAT 1
/* Largest generation and next_generation read or handed out. JSON
 * integers stop at INT64_MAX: a file naming a generation near it could not
 * be written again after the next declaration. Far above what declarations
 * reach; a declaration keeps room for its retries of a taken directory. */
#define GENERATION_MAX ((uint64_t)1 << 62)
#define DECLARE_GENERATIONS 128
/* At most this many directory names in the refusal of a missing catalogue. */
#define MISSING_LIST_MAX 8

struct fx_catalog {
    fx_sio *io;
    char *root;
    fx_catalog_entry *v;
    size_t n;
    size_t cap;
    uint64_t next_gen; /* the generation of the next declaration */
};

/* ---- entries ------------------------------------------------------------------- */

static void entry_clear(fx_catalog_entry *e)
{
    free(e->tenant);
    free(e->ns);
    free(e->stream);
    *e = (fx_catalog_entry){0};
}

static int entry_push(fx_catalog *c, const char *t, const char *ns, const char *s,
                      fx_catalog_entry **pe)
{
    fx_catalog_entry *v = fx_grow(c->v, &c->cap, c->n + 1, sizeof(*v), 8);
    if (v == NULL)
        return -ENOMEM;
    c->v = v;
    fx_catalog_entry *e = &c->v[c->n];
    *e = (fx_catalog_entry){.tenant = strdup(t), .ns = strdup(ns), .stream = strdup(s)};
    if (e->tenant == NULL || e->ns == NULL || e->stream == NULL) {
        entry_clear(e);
        return -ENOMEM;
    }
    c->n++;
    *pe = e;
    return 0;
}

static void entry_drop(fx_catalog *c, size_t i)
{
    entry_clear(&c->v[i]);
    memmove(&c->v[i], &c->v[i + 1], (c->n - i - 1) * sizeof(c->v[0]));
    c->n--;
}

/* The live entry of the names (entries being deleted are not the stream's). */
static ssize_t find_index(const fx_catalog *c, const char *t, const char *ns, const char *s)
{
    for (size_t i = 0; i < c->n; i++) {
        const fx_catalog_entry *e = &c->v[i];
        if (!e->deleting && strcmp(e->tenant, t) == 0 && strcmp(e->ns, ns) == 0 &&
            strcmp(e->stream, s) == 0)
            return (ssize_t)i;
    }
    return -1;
}

static ssize_t find_gen(const fx_catalog *c, uint64_t gen)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].generation == gen)
            return (ssize_t)i;
    return -1;
}

static bool dir_used(const fx_catalog *c, const char *dir, size_t except)
{
    for (size_t i = 0; i < c->n; i++)
        if (i != except && strcmp(c->v[i].dir, dir) == 0)
            return true;
    return false;
}

/* The directory of incarnation |gen| when the original's name is taken. */
static void suffixed(char *out, const char *base, uint64_t gen)
{
    snprintf(out, FX_CATALOG_DIR_MAX, "%s.g%" PRIu64, base, gen);
}

/* ---- JSON ------------------------------------------------------------------------ */

static int put_u64(json_t *o, const char *k, uint64_t v, bool omit_zero)
{
    if (omit_zero && v == 0)
        return 0;
    if (v > (uint64_t)INT64_MAX)
        return -ERANGE;
    return json_object_set_new(o, k, json_integer((json_int_t)v)) == 0 ? 0 : -ENOMEM;
}

static json_t *entry_json(const fx_catalog_entry *e)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s}", "tenant", e->tenant, "namespace", e->ns,
                          "stream", e->stream, "shard", 0, "dir", e->dir);
    if (o == NULL || put_u64(o, "generation", e->generation, true) != 0 ||
        put_u64(o, "created_at_us", e->created_us, false) != 0 ||
        put_u64(o, "segment_bytes", e->segment_bytes, false) != 0 ||
        put_u64(o, "index_spacing_bytes", e->index_spacing_bytes, false) != 0 ||
        put_u64(o, "retention_bytes", e->retention_bytes, true) != 0 ||
        put_u64(o, "retention_seconds", e->retention_seconds, true) != 0 ||
        (e->deleting && json_object_set_new(o, "deleting", json_true()) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Writes the catalogue durably. FX_ESTORAGE_CATALOG when it would be larger
 * than what fx_catalog_open reads back. */
static int persist(fx_catalog *c)
{
    json_t *list = json_array();
    json_t *doc = json_pack("{s:i, s:o}", "format", CATALOG_FORMAT, "streams", list);
    int rv = doc != NULL ? put_u64(doc, "next_generation", c->next_gen, false) : -ENOMEM;
    if (rv != 0) {
        json_decref(doc);
        return rv;
    }
    for (size_t i = 0; i < c->n; i++) {
        json_t *e = entry_json(&c->v[i]);
        if (e == NULL || json_array_append_new(list, e) != 0) {
            json_decref(doc);
            return -ENOMEM;
        }
    }
    char *text = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (text == NULL)
        return -ENOMEM;
    size_t len = strlen(text);
    if (len + 1 > FX_CATALOG_MAX_BYTES) {
        free(text);
        return FX_ESTORAGE_CATALOG;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", c->root, FX_CATALOG_FILE);
    text[len] = '\n'; /* json_dumps leaves room for the NUL we overwrite */
    rv = fx_sio_write_file_atomic(c->io, path, text, len + 1);
    free(text);
    return rv;
}

typedef struct perr {
    char *buf;
    size_t len;
} perr;

static int bad(perr *pe, size_t i, const char *what)
{
    snprintf(pe->buf, pe->len, "%s: stream entry %zu: %s", FX_CATALOG_FILE, i, what);
    return FX_ESTORAGE_CATALOG;
}

static int get_u64(json_t *o, const char *k, bool required, uint64_t *pv)
{
    json_t *v = json_object_get(o, k);
    if (v == NULL || json_is_null(v)) {
        *pv = 0;
        return required ? -1 : 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *pv = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_entry(fx_catalog *c, json_t *o, size_t i, perr *pe)
{
    const char *t = json_string_value(json_object_get(o, "tenant"));
    const char *ns = json_string_value(json_object_get(o, "namespace"));
    const char *s = json_string_value(json_object_get(o, "stream"));
    const char *dir = json_string_value(json_object_get(o, "dir"));
    if (!json_is_object(o) || t == NULL || ns == NULL || s == NULL || dir == NULL)
        return bad(pe, i, "needs string fields tenant, namespace, stream and dir");
    json_t *d = json_object_get(o, "deleting");
    if (d != NULL && !json_is_boolean(d))
        return bad(pe, i, "deleting must be a boolean");
    bool deleting = d != NULL && json_is_true(d);
    if (!deleting && find_index(c, t, ns, s) >= 0)
        return bad(pe, i, "declares its stream a second time");
    uint64_t gen;
    if (get_u64(o, "generation", false, &gen) != 0 || gen > GENERATION_MAX)
        return bad(pe, i, "generation must be a non-negative integer up to 2^62");
    if (gen != 0 && find_gen(c, gen) >= 0)
        return bad(pe, i, "repeats the generation of another entry");
    fx_catalog_entry *e;
    int rv = entry_push(c, t, ns, s, &e);
    if (rv != 0)
        return rv;
    e->generation = gen;
    e->deleting = deleting;
    char base[FX_LOGFMT_DIR_NAME_MAX], alt[FX_CATALOG_DIR_MAX];
    fx_logfmt_dir_name(base, t, ns, s, 0);
    suffixed(alt, base, gen);
    if (strcmp(dir, base) != 0 && (gen == 0 || strcmp(dir, alt) != 0)) {
        char what[512];
        snprintf(what, sizeof(what), "directory \"%.100s\" is not the stream's (\"%s\"%s%s%s)", dir,
                 base, gen != 0 ? " or \"" : "", gen != 0 ? alt : "", gen != 0 ? "\"" : "");
        return bad(pe, i, what);
    }
    snprintf(e->dir, sizeof(e->dir), "%s", dir);
    if (dir_used(c, e->dir, c->n - 1))
        return bad(pe, i, "names the directory of another entry");
    if (get_u64(o, "created_at_us", true, &e->created_us) != 0 ||
        get_u64(o, "segment_bytes", true, &e->segment_bytes) != 0 ||
        get_u64(o, "index_spacing_bytes", true, &e->index_spacing_bytes) != 0 ||
        get_u64(o, "retention_bytes", false, &e->retention_bytes) != 0 ||
        get_u64(o, "retention_seconds", false, &e->retention_seconds) != 0)
        return bad(pe, i,
                   "created_at_us, segment_bytes, index_spacing_bytes (and retention_*) "
                   "must be non-negative integers");
    if (gen >= c->next_gen)
        c->next_gen = gen + 1;
    return 0;
}

static int parse(fx_catalog *c, const char *text, size_t len, perr *pe)
{
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    if (doc == NULL) {
        snprintf(pe->buf, pe->len, "%s: line %d: %s", FX_CATALOG_FILE, je.line, je.text);
        return FX_ESTORAGE_CATALOG;
    }
    int rv = 0;
    json_t *fmt = json_object_get(doc, "format");
    json_t *list = json_object_get(doc, "streams");
    uint64_t next = 0;
    if (!json_is_integer(fmt) || json_integer_value(fmt) != CATALOG_FORMAT ||
        !json_is_array(list) || get_u64(doc, "next_generation", false, &next) != 0 ||
        next > GENERATION_MAX) {
        snprintf(pe->buf, pe->len,
                 "%s: needs \"format\": %d, a \"streams\" array (and a \"next_generation\" "
                 "from 0 to 2^62)",
                 FX_CATALOG_FILE, CATALOG_FORMAT);
        rv = FX_ESTORAGE_CATALOG;
    }
    if (next > c->next_gen)
        c->next_gen = next;
    for (size_t i = 0; rv == 0 && i < json_array_size(list); i++)
        rv = parse_entry(c, json_array_get(list, i), i, pe);
    json_decref(doc);
    /* Entries written before generations get one now (written with the
     * next change); their directory is the original's name. */
    for (size_t i = 0; rv == 0 && i < c->n; i++)
        if (c->v[i].generation == 0)
            c->v[i].generation = c->next_gen++;
    if (rv == 0 && c->next_gen > GENERATION_MAX) {
        snprintf(pe->buf, pe->len, "%s: the generations given to entries without one pass 2^62",
                 FX_CATALOG_FILE);
        rv = FX_ESTORAGE_CATALOG;
    }
    return rv;
}

/* ---- a missing catalogue ----------------------------------------------------------- */

typedef struct found_dirs {
    size_t n;
    char *list; /* "a, b, ..." */
    size_t len, cap;
} found_dirs;

static int on_found(void *user, const char *name, bool is_dir)
{
    found_dirs *f = user;
    if (!is_dir || name[0] == '.')
        return 0;
    if (f->n++ < MISSING_LIST_MAX && f->len < f->cap) { /* else counted, not listed */
        int k = snprintf(f->list + f->len, f->cap - f->len, "%s%s", f->len ? ", " : "", name);
        f->len = k < 0 ? f->cap : f->len + (size_t)k;
    }
    return 0;
}

/* A root without catalog.json: empty (written now), or refused when it holds
 * stream directories, which the catalogue alone names in full. */
static int missing_catalogue(fx_catalog *c, perr *pe)
{
    char list[1024] = "";
    found_dirs f = {.list = list, .cap = sizeof(list)};
    int rv = c->io->ops->list(c->io, c->root, on_found, &f);
    if (rv != 0) {
        snprintf(pe->buf, pe->len, "listing %s: %s", c->root, fx_strerror(rv));
        return rv;
    }
    if (f.n == 0) {
        c->next_gen = 1;
        rv = persist(c);
        if (rv != 0)
            snprintf(pe->buf, pe->len, "writing an empty %s/%s: %s", c->root, FX_CATALOG_FILE,
                     fx_strerror(rv));
        return rv;
    }
    snprintf(pe->buf, pe->len,
             "%s/%s is missing but the root holds %zu stream director%s (%s%s): restore "
             "catalog.json from a backup; or, to start without those streams (each directory "
             "is adopted again when a stream of its original name is declared), write "
             "{\"format\": 1, \"streams\": []} to %s/%s",
             c->root, FX_CATALOG_FILE, f.n, f.n == 1 ? "y" : "ies", list,
             f.n > MISSING_LIST_MAX ? ", ..." : "", c->root, FX_CATALOG_FILE);
    return FX_ESTORAGE_CATALOG;
}

/* ---- public ---------------------------------------------------------------------- */

int fx_catalog_open(fx_catalog **pc, fx_sio *io, const char *root, char *err, size_t errlen)
{
    fx_catalog *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->root = strdup(root)) == NULL) {
        free(c);
        return -ENOMEM;
    }
    c->io = io != NULL ? io : fx_sio_posix();
    c->next_gen = 1;
    perr pe = {.buf = err, .len = errlen};
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/%s", root, FX_CATALOG_FILE);
    int rv = fx_sio_mkdirs(c->io, root);
    if (rv != 0) {
        snprintf(err, errlen, "creating %s: %s", root, fx_strerror(rv));
        goto fail;
    }
    rv = fx_sio_read_file(c->io, path, FX_CATALOG_MAX_BYTES, &text, &len);
    if (rv == 0) {
        rv = parse(c, text, len, &pe);
        free(text);
    } else if (rv == -ENOENT) {
        rv = missing_catalogue(c, &pe);
    } else {
        snprintf(err, errlen, "reading %s: %s", path, fx_strerror(rv));
    }
    if (rv != 0)
        goto fail;
    size_t left = 0;
    int werr = fx_catalog_retry_deletions(c, &left);
    if (werr != 0 || left > 0) /* the streams are served meanwhile; the deletions retried */
        FX_LOG_WARN("storage", "%zu deletion%s under %s not finished%s%s", left,
                    left == 1 ? "" : "s", root, werr ? ": writing the catalogue: " : "",
                    werr ? fx_strerror(werr) : "");
    *pc = c;
    return 0;
fail:
    fx_catalog_free(c);
    return rv;
}

void fx_catalog_free(fx_catalog *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++)
        entry_clear(&c->v[i]);
    free(c->v);
    free(c->root);
    free(c);
}

size_t fx_catalog_count(const fx_catalog *c)
{
    return c->n;
}

const fx_catalog_entry *fx_catalog_at(const fx_catalog *c, size_t i)
{
    return i < c->n ? &c->v[i] : NULL;
}

const fx_catalog_entry *fx_catalog_find(const fx_catalog *c, const char *tenant, const char *ns,
                                        const char *stream)
{
    ssize_t i = find_index(c, tenant, ns, stream);
    return i < 0 ? NULL : &c->v[i];
}

const fx_catalog_entry *fx_catalog_find_generation(const fx_catalog *c, uint64_t gen)
{
    ssize_t i = find_gen(c, gen);
    return i < 0 ? NULL : &c->v[i];
}

int fx_catalog_dir_path(const fx_catalog *c, const fx_catalog_entry *e, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", c->root, e->dir);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Whether |name| exists under the root (a symlink too: never adopted). */
static int root_has(fx_catalog *c, const char *name, bool *pexists, bool *pis_dir)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", c->root, name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    int rv = c->io->ops->stat(c->io, path, pis_dir);
    *pexists = rv == 0;
    return rv == -ENOENT ? 0 : rv;
}

int fx_catalog_declare(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                       const fx_catalog_params *p, bool *padopted, const fx_catalog_entry **pe)
{
    ssize_t i = find_index(c, tenant, ns, stream);
    if (i >= 0) {
        if (padopted != NULL)
            *padopted = false;
        if (pe != NULL)
            *pe = &c->v[i];
        return 0;
    }
    if (c->next_gen > GENERATION_MAX - DECLARE_GENERATIONS)
        return -EOVERFLOW;
    fx_catalog_entry *e;
    int rv = entry_push(c, tenant, ns, stream, &e);
    if (rv != 0)
        return rv;
    uint64_t next0 = c->next_gen;
    e->generation = c->next_gen++;
    e->created_us = p->created_us;
    e->segment_bytes = p->segment_bytes;
    e->index_spacing_bytes = p->index_spacing_bytes;
    e->retention_bytes = p->retention_bytes;
    e->retention_seconds = p->retention_seconds;
    bool adopted = false, exists = false, is_dir = false;
    char base[FX_LOGFMT_DIR_NAME_MAX];
    fx_logfmt_dir_name(base, tenant, ns, stream, 0);
    if (!dir_used(c, base, c->n - 1)) {
        /* The original's name: adopted when a directory is there. */
        snprintf(e->dir, sizeof(e->dir), "%s", base);
        rv = root_has(c, base, &exists, &is_dir);
        adopted = rv == 0 && exists && is_dir;
        if (rv == 0 && exists && !is_dir)
            rv = -ENOTDIR; /* a file or a symlink there: never adopted, never replaced */
    } else {
        /* Another incarnation (being deleted) or another stream with the same
         * name holds it: one of our own, never an existing directory. */
        for (int tries = 0; rv == 0; tries++) {
            suffixed(e->dir, base, e->generation);
            if ((rv = root_has(c, e->dir, &exists, &is_dir)) != 0 || !exists)
                break;
            if (tries == 64) {
                rv = -EEXIST;
                break;
            }
            e->generation = c->next_gen++;
        }
    }
    if (rv == 0)
        rv = persist(c);
    if (rv != 0) {
        entry_drop(c, c->n - 1);
        c->next_gen = next0;
        return rv;
    }
    char path[PATH_MAX];
    if (adopted && fx_catalog_dir_path(c, e, path, sizeof(path)) == 0)
        FX_LOG_INFO("storage", "durable stream %s/%s/%s adopts the existing directory %s", tenant,
                    ns, stream, path);
    if (padopted != NULL)
        *padopted = adopted;
    if (pe != NULL)
        *pe = &c->v[c->n - 1];
    return 0;
}

int fx_catalog_set_retention(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                             uint64_t bytes, uint64_t seconds)
{
    ssize_t i = find_index(c, tenant, ns, stream);
    if (i < 0)
        return -ENOENT;
    fx_catalog_entry *e = &c->v[i];
    uint64_t ob = e->retention_bytes, os = e->retention_seconds;
    e->retention_bytes = bytes;
    e->retention_seconds = seconds;
    int rv = persist(c);
    if (rv != 0) {
        e->retention_bytes = ob;
        e->retention_seconds = os;
    }
    return rv;
}

int fx_catalog_begin_delete(fx_catalog *c, uint64_t gen)
{
    ssize_t i = find_gen(c, gen);
    if (i < 0)
        return -ENOENT;
    if (c->v[i].deleting)
        return 0;
    c->v[i].deleting = true;
    int rv = persist(c);
    if (rv != 0)
        c->v[i].deleting = false;
    return rv;
}

int fx_catalog_end_delete(fx_catalog *c, uint64_t gen)
{
    ssize_t i = find_gen(c, gen);
    if (i < 0)
        return -ENOENT;
    if (!c->v[i].deleting)
        return -EINVAL;
    bool exists = false, is_dir = false;
    int rv = root_has(c, c->v[i].dir, &exists, &is_dir);
    if (rv != 0)
        return rv;
    if (exists)
        return -ENOTEMPTY;
    fx_catalog_entry keep = c->v[i];
    memmove(&c->v[i], &c->v[i + 1], (c->n - (size_t)i - 1) * sizeof(c->v[0]));
    c->n--;
    if ((rv = persist(c)) != 0) { /* put it back where it was: still deleting */
        memmove(&c->v[i + 1], &c->v[i], (c->n - (size_t)i) * sizeof(c->v[0]));
        c->v[i] = keep;
        c->n++;
        return rv;
    }
    entry_clear(&keep);
    return 0;
}

int fx_catalog_remove(fx_catalog *c, const char *tenant, const char *ns, const char *stream)
{
    ssize_t i = find_index(c, tenant, ns, stream);
    if (i < 0)
        return -ENOENT;
    uint64_t gen = c->v[i].generation;
    char path[PATH_MAX];
    int rv = fx_catalog_dir_path(c, &c->v[i], path, sizeof(path));
    if (rv == 0)
        rv = fx_catalog_begin_delete(c, gen);
    if (rv == 0)
        rv = fx_sio_remove_dir(c->io, path);
    return rv != 0 ? rv : fx_catalog_end_delete(c, gen);
}

size_t fx_catalog_pending_deletions(const fx_catalog *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += c->v[i].deleting;
    return n;
}

int fx_catalog_retry_deletions(fx_catalog *c, size_t *pleft)
{
    size_t left = 0;
    int werr = 0;
    for (size_t i = 0; i < c->n;) {
        fx_catalog_entry *e = &c->v[i];
        if (!e->deleting) {
            i++;
            continue;
        }
        char path[PATH_MAX];
        int rv = fx_catalog_dir_path(c, e, path, sizeof(path));
        if (rv == 0)
            rv = fx_sio_remove_dir(c->io, path);
        if (rv != 0) {
            FX_LOG_WARN("storage",
                        "cannot finish deleting durable stream %s/%s/%s (generation %" PRIu64
                        ", %s): %s; tried again later, the stream's names stay usable",
                        e->tenant, e->ns, e->stream, e->generation, path, fx_strerror(rv));
            left++;
            i++;
            continue;
        }
        char label[3 * 256 + 64];
        snprintf(label, sizeof(label), "%s/%s/%s (generation %" PRIu64 ")", e->tenant, e->ns,
                 e->stream, e->generation);
        rv = fx_catalog_end_delete(c, e->generation);
        if (rv != 0) {
            werr = rv;
            left++;
            i++;
            continue;
        }
        FX_LOG_INFO("storage", "finished deleting durable stream %s", label);
    }
    if (pleft != NULL)
        *pleft = left;
    return werr;
}

typedef struct undeclared {
    fx_catalog *c;
    fx_sio_list_cb cb;
    void *user;
} undeclared;

static int on_root_entry(void *user, const char *name, bool is_dir)
{
    undeclared *u = user;
    if (!is_dir || name[0] == '.')
        return 0;
    if (dir_used(u->c, name, SIZE_MAX))
        return 0;
    return u->cb(u->user, name, true);
}

int fx_catalog_list_undeclared(fx_catalog *c, fx_sio_list_cb cb, void *user)
{
    undeclared u = {.c = c, .cb = cb, .user = user};
    return c->io->ops->list(c->io, c->root, on_root_entry, &u);
}
