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

/* Largest catalog.json read. */
#define CATALOG_MAX (64u << 20)
#define CATALOG_FORMAT 1

struct fx_catalog {
    fx_sio *io;
    char *root;
    fx_catalog_entry *v;
    size_t n;
    size_t cap;
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
    fx_logfmt_dir_name(e->dir, t, ns, s, 0);
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

static ssize_t find_index(const fx_catalog *c, const char *t, const char *ns, const char *s)
{
    for (size_t i = 0; i < c->n; i++) {
        const fx_catalog_entry *e = &c->v[i];
        if (strcmp(e->tenant, t) == 0 && strcmp(e->ns, ns) == 0 && strcmp(e->stream, s) == 0)
            return (ssize_t)i;
    }
    return -1;
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
    if (o == NULL || put_u64(o, "created_at_us", e->created_us, false) != 0 ||
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

/* Writes the catalogue durably. */
static int persist(fx_catalog *c)
{
    json_t *list = json_array();
    json_t *doc = json_pack("{s:i, s:o}", "format", CATALOG_FORMAT, "streams", list);
    if (doc == NULL)
        return -ENOMEM;
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
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", c->root, FX_CATALOG_FILE);
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for the NUL we overwrite */
    int rv = fx_sio_write_file_atomic(c->io, path, text, len + 1);
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
    if (find_index(c, t, ns, s) >= 0)
        return bad(pe, i, "declares its stream a second time");
    fx_catalog_entry *e;
    int rv = entry_push(c, t, ns, s, &e);
    if (rv != 0)
        return rv;
    if (strcmp(e->dir, dir) != 0) {
        char what[320];
        snprintf(what, sizeof(what), "directory \"%.100s\" is not the stream's (\"%s\")", dir,
                 e->dir);
        return bad(pe, i, what);
    }
    if (get_u64(o, "created_at_us", true, &e->created_us) != 0 ||
        get_u64(o, "segment_bytes", true, &e->segment_bytes) != 0 ||
        get_u64(o, "index_spacing_bytes", true, &e->index_spacing_bytes) != 0 ||
        get_u64(o, "retention_bytes", false, &e->retention_bytes) != 0 ||
        get_u64(o, "retention_seconds", false, &e->retention_seconds) != 0)
        return bad(pe, i,
                   "created_at_us, segment_bytes, index_spacing_bytes (and retention_*) "
                   "must be non-negative integers");
    json_t *d = json_object_get(o, "deleting");
    if (d != NULL && !json_is_boolean(d))
        return bad(pe, i, "deleting must be a boolean");
    e->deleting = d != NULL && json_is_true(d);
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
    if (!json_is_integer(fmt) || json_integer_value(fmt) != CATALOG_FORMAT ||
        !json_is_array(list)) {
        snprintf(pe->buf, pe->len, "%s: needs \"format\": %d and a \"streams\" array",
                 FX_CATALOG_FILE, CATALOG_FORMAT);
        rv = FX_ESTORAGE_CATALOG;
    }
    for (size_t i = 0; rv == 0 && i < json_array_size(list); i++)
        rv = parse_entry(c, json_array_get(list, i), i, pe);
    json_decref(doc);
    return rv;
}

/* ---- public ---------------------------------------------------------------------- */

static int finish_deletions(fx_catalog *c)
{
    bool changed = false;
    for (size_t i = 0; i < c->n;) {
        if (!c->v[i].deleting) {
            i++;
            continue;
        }
        char path[PATH_MAX];
        int rv = fx_catalog_dir_path(c, &c->v[i], path, sizeof(path));
        if (rv == 0)
            rv = fx_sio_remove_dir(c->io, path);
        if (rv != 0)
            return rv;
        FX_LOG_INFO("storage", "finished deleting durable stream %s/%s/%s", c->v[i].tenant,
                    c->v[i].ns, c->v[i].stream);
        entry_drop(c, i);
        changed = true;
    }
    return changed ? persist(c) : 0;
}

int fx_catalog_open(fx_catalog **pc, fx_sio *io, const char *root, char *err, size_t errlen)
{
    fx_catalog *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->root = strdup(root)) == NULL) {
        free(c);
        return -ENOMEM;
    }
    c->io = io != NULL ? io : fx_sio_posix();
    perr pe = {.buf = err, .len = errlen};
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/%s", root, FX_CATALOG_FILE);
    int rv = fx_sio_mkdirs(c->io, root);
    if (rv != 0) {
        snprintf(err, errlen, "creating %s: %s", root, fx_strerror(rv));
        goto fail;
    }
    rv = fx_sio_read_file(c->io, path, CATALOG_MAX, &text, &len);
    if (rv == 0) {
        rv = parse(c, text, len, &pe);
        free(text);
    } else if (rv == -ENOENT) {
        rv = 0;
    } else {
        snprintf(err, errlen, "reading %s: %s", path, fx_strerror(rv));
    }
    if (rv == 0 && (rv = finish_deletions(c)) != 0)
        snprintf(err, errlen, "finishing a deletion under %s: %s", root, fx_strerror(rv));
    if (rv != 0)
        goto fail;
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

int fx_catalog_dir_path(const fx_catalog *c, const fx_catalog_entry *e, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", c->root, e->dir);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int fx_catalog_declare(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                       const fx_catalog_params *p, bool *padopted, const fx_catalog_entry **pe)
{
    bool adopted = false;
    ssize_t i = find_index(c, tenant, ns, stream);
    if (i >= 0) {
        if (padopted != NULL)
            *padopted = false;
        if (pe != NULL)
            *pe = &c->v[i];
        return 0;
    }
    fx_catalog_entry *e;
    int rv = entry_push(c, tenant, ns, stream, &e);
    if (rv != 0)
        return rv;
    for (size_t k = 0; k + 1 < c->n; k++) {
        if (strcmp(c->v[k].dir, e->dir) == 0) {
            entry_drop(c, c->n - 1);
            return FX_ESTORAGE_CATALOG;
        }
    }
    e->created_us = p->created_us;
    e->segment_bytes = p->segment_bytes;
    e->index_spacing_bytes = p->index_spacing_bytes;
    e->retention_bytes = p->retention_bytes;
    e->retention_seconds = p->retention_seconds;
    char path[PATH_MAX];
    bool is_dir = false;
    if ((rv = fx_catalog_dir_path(c, e, path, sizeof(path))) == 0)
        adopted = c->io->ops->stat(c->io, path, &is_dir) == 0 && is_dir;
    if (rv == 0)
        rv = persist(c);
    if (rv != 0) {
        entry_drop(c, c->n - 1);
        return rv;
    }
    if (adopted)
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

int fx_catalog_remove(fx_catalog *c, const char *tenant, const char *ns, const char *stream)
{
    ssize_t i = find_index(c, tenant, ns, stream);
    if (i < 0)
        return -ENOENT;
    c->v[i].deleting = true;
    int rv = persist(c);
    if (rv != 0) {
        c->v[i].deleting = false;
        return rv;
    }
    char path[PATH_MAX];
    if ((rv = fx_catalog_dir_path(c, &c->v[i], path, sizeof(path))) != 0 ||
        (rv = fx_sio_remove_dir(c->io, path)) != 0)
        return rv;
    entry_drop(c, (size_t)i);
    return persist(c);
}

typedef struct undeclared {
    fx_catalog *c;
    fx_sio_list_cb cb;
    void *user;
} undeclared;

static int on_root_entry(void *user, const char *name, bool is_dir)
{
    undeclared *u = user;
    if (!is_dir)
        return 0;
    for (size_t i = 0; i < u->c->n; i++) {
        if (strcmp(u->c->v[i].dir, name) == 0)
            return 0;
    }
    return u->cb(u->user, name, true);
}

int fx_catalog_list_undeclared(fx_catalog *c, fx_sio_list_cb cb, void *user)
{
    undeclared u = {.c = c, .cb = cb, .user = user};
    return c->io->ops->list(c->io, c->root, on_root_entry, &u);
}
