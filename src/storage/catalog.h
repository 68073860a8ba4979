/* fx_catalog: the list of durable streams kept at the storage root, in
 * <root>/catalog.json, so that every durable stream comes back at start with
 * its full name although stream directories are named by a sanitised,
 * hashed form (format.h). Each entry holds the names, the directory, the
 * creation parameters (time, segment_bytes, index_spacing_bytes) and the
 * per-stream retention overrides. Every change is written to catalog.json.tmp,
 * fdatasynced, renamed over catalog.json and the root synced, so a crash
 * leaves the old or the new catalogue, never a mix. Deleting a stream marks
 * its entry, removes its directory, then drops the entry; a deletion cut
 * short by a crash is finished at the next open. Declaring a stream whose
 * directory already exists (written by the original Felix broker, which had
 * no catalogue) adopts that directory. One thread at a time. */
#ifndef FX_STORAGE_CATALOG_H
#define FX_STORAGE_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/format.h"
#include "storage/sio.h"

#define FX_CATALOG_FILE "catalog.json"

typedef struct fx_catalog fx_catalog;

typedef struct fx_catalog_entry {
    char *tenant;
    char *ns;
    char *stream;
    char dir[FX_LOGFMT_DIR_NAME_MAX]; /* directory name under the root (shard 0) */
    uint64_t created_us;
    uint64_t segment_bytes;
    uint64_t index_spacing_bytes;
    uint64_t retention_bytes;   /* override; 0 = the broker's setting */
    uint64_t retention_seconds; /* override; 0 = the broker's setting */
    bool deleting;              /* a deletion is under way */
} fx_catalog_entry;

/* Creation parameters of a stream being declared. */
typedef struct fx_catalog_params {
    uint64_t created_us;
    uint64_t segment_bytes;
    uint64_t index_spacing_bytes;
    uint64_t retention_bytes;
    uint64_t retention_seconds;
} fx_catalog_params;

/* Opens the catalogue of storage root |root| through |io| (NULL: POSIX),
 * creating the root if needed, and finishes deletions a crash cut short.
 * A missing catalog.json is an empty catalogue. Returns 0 and |*pc|;
 * FX_ESTORAGE_CATALOG for a malformed file (|err| says which entry and
 * field); -errno. */
int fx_catalog_open(fx_catalog **pc, fx_sio *io, const char *root, char *err, size_t errlen);

/* Frees |c| (NULL: nothing). Entries returned earlier die with it. */
void fx_catalog_free(fx_catalog *c);

size_t fx_catalog_count(const fx_catalog *c);

/* The |i|-th entry (declaration order), or NULL past the end. */
const fx_catalog_entry *fx_catalog_at(const fx_catalog *c, size_t i);

/* The entry of tenant/ns/stream, or NULL. */
const fx_catalog_entry *fx_catalog_find(const fx_catalog *c, const char *tenant, const char *ns,
                                        const char *stream);

/* Writes "<root>/<e->dir>" into |out|. Returns 0 or -ENAMETOOLONG. */
int fx_catalog_dir_path(const fx_catalog *c, const fx_catalog_entry *e, char *out, size_t cap);

/* Declares a durable stream. An existing entry is returned as it is (its
 * parameters win: they are the stream's). Otherwise a new entry with |p| is
 * written; |*padopted| (may be NULL) tells whether its directory already
 * existed and is adopted. |*pe| (may be NULL) receives the entry, valid until
 * the next change. Returns 0; FX_ESTORAGE_CATALOG if another stream's entry
 * names the same directory; -errno (then nothing changed). */
int fx_catalog_declare(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                       const fx_catalog_params *p, bool *padopted, const fx_catalog_entry **pe);

/* Sets the retention overrides of a declared stream (0 = none). Returns 0,
 * -ENOENT, -errno. */
int fx_catalog_set_retention(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                             uint64_t bytes, uint64_t seconds);

/* Deletes a declared stream: its entry and its directory with every file.
 * The log must be closed. Returns 0, -ENOENT, -errno (the entry stays,
 * marked, and the next open finishes the deletion). */
int fx_catalog_remove(fx_catalog *c, const char *tenant, const char *ns, const char *stream);

/* Calls |cb| with the name of every directory under the root that no entry
 * names (a directory of the original's, or of a stream not declared again).
 * Returns 0, the callback's non-zero value, or -errno. */
int fx_catalog_list_undeclared(fx_catalog *c, fx_sio_list_cb cb, void *user);

#endif
