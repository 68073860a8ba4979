/* fx_catalog: the list of durable streams kept at the storage root, in
 * <root>/catalog.json, so that every durable stream comes back at start with
 * its full name although stream directories are named by a sanitised,
 * hashed form (format.h). Each entry holds the names, the directory, the
 * incarnation's generation, the creation parameters (time, segment_bytes,
 * index_spacing_bytes) and the per-stream retention overrides. Every change
 * is written to catalog.json.tmp, fdatasynced, renamed over catalog.json and
 * the root synced, so a crash leaves the old or the new catalogue, never a
 * mix.
 *
 * Incarnations. Every declaration of a stream gets a generation unique in
 * the root (a counter kept in the catalogue). Its directory is the
 * original's name when no other entry uses that name, else the name with
 * ".g<generation>" appended, so a stream declared again while an older
 * incarnation is being deleted never shares an entry or a directory with
 * it. Deleting marks the entry "deleting" (from then on the names are free
 * to be declared again), removes its directory, and only then drops the
 * entry; a deletion that fails stays marked and is retried
 * (fx_catalog_retry_deletions, also at every open), never inherited.
 * Declaring a stream whose directory already exists under the original's
 * name and no entry names (written by the original Felix broker, which had
 * no catalogue) adopts that directory. A root with stream directories but
 * no catalog.json is refused, naming them, never read as empty. One thread
 * at a time. */
#ifndef FX_STORAGE_CATALOG_H
#define FX_STORAGE_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/format.h"
#include "storage/sio.h"

#define FX_CATALOG_FILE "catalog.json"
/* Largest catalog.json written or read: a declaration that would make it
 * larger is refused (FX_ESTORAGE_CATALOG), so the broker can always read its
 * catalogue back. */
#define FX_CATALOG_MAX_BYTES (64u << 20)
/* A directory name: the original's (format.h) and ".g<generation>". */
#define FX_CATALOG_DIR_MAX (FX_LOGFMT_DIR_NAME_MAX + 24)

typedef struct fx_catalog fx_catalog;

typedef struct fx_catalog_entry {
    char *tenant;
    char *ns;
    char *stream;
    char dir[FX_CATALOG_DIR_MAX]; /* directory name under the root (shard 0) */
    uint64_t generation;          /* unique in the root (older entries get one at open) */
    uint64_t created_us;
    uint64_t segment_bytes;
    uint64_t index_spacing_bytes;
    uint64_t retention_bytes;   /* override; 0 = the broker's setting */
    uint64_t retention_seconds; /* override; 0 = the broker's setting */
    bool deleting;              /* a deletion is under way: not the stream's any more */
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
 * creating the root if needed, and retries the deletions left unfinished
 * (one that fails again stays marked and is logged: it does not stop the
 * open). A missing catalog.json in a root without directories is an empty
 * catalogue (written at once, so that a missing file later means a lost
 * one). Returns 0 and |*pc|; FX_ESTORAGE_CATALOG for a malformed file (|err|
 * says which entry and field; generations and next_generation are at most
 * 2^62) or a missing one beside stream directories
 * (|err| lists them); -errno. */
int fx_catalog_open(fx_catalog **pc, fx_sio *io, const char *root, char *err, size_t errlen);

/* Frees |c| (NULL: nothing). Entries returned earlier die with it. */
void fx_catalog_free(fx_catalog *c);

size_t fx_catalog_count(const fx_catalog *c);

/* The |i|-th entry (declaration order), or NULL past the end. */
const fx_catalog_entry *fx_catalog_at(const fx_catalog *c, size_t i);

/* The live entry of tenant/ns/stream (not one being deleted), or NULL. */
const fx_catalog_entry *fx_catalog_find(const fx_catalog *c, const char *tenant, const char *ns,
                                        const char *stream);

/* Writes "<root>/<e->dir>" into |out|. Returns 0 or -ENAMETOOLONG. */
int fx_catalog_dir_path(const fx_catalog *c, const fx_catalog_entry *e, char *out, size_t cap);

/* The entry of generation |gen| (live or being deleted), or NULL. */
const fx_catalog_entry *fx_catalog_find_generation(const fx_catalog *c, uint64_t gen);

/* Declares a durable stream. A live entry is returned as it is (its
 * parameters win: they are the stream's). Otherwise a new entry with |p|
 * and the next generation is written (an entry being deleted is never
 * returned or reused); |*padopted| (may be NULL) tells whether its directory
 * already existed under the original's name and is adopted. |*pe| (may be
 * NULL) receives the entry, valid until the next change. Returns 0;
 * FX_ESTORAGE_CATALOG when the catalogue would outgrow
 * FX_CATALOG_MAX_BYTES; -EOVERFLOW when the generations are used up (a
 * catalogue read with a next_generation near 2^62); -errno (then nothing
 * changed). */
int fx_catalog_declare(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                       const fx_catalog_params *p, bool *padopted, const fx_catalog_entry **pe);

/* Sets the retention overrides of a declared stream (0 = none). Returns 0,
 * -ENOENT, -errno. */
int fx_catalog_set_retention(fx_catalog *c, const char *tenant, const char *ns, const char *stream,
                             uint64_t bytes, uint64_t seconds);

/* First step of a deletion: marks the entry of generation |gen| deleting,
 * durably. From then on its names are free: a declaration makes a new
 * incarnation in another directory. Idempotent. Returns 0, -ENOENT, -errno
 * (then nothing changed). */
int fx_catalog_begin_delete(fx_catalog *c, uint64_t gen);

/* Last step: drops the entry of generation |gen|, marked deleting, once its
 * directory is gone (the caller removed it, for example with
 * fx_sio_remove_dir, outside any lock). Returns 0; -ENOENT; -EINVAL if it
 * is not marked; -ENOTEMPTY if its directory still exists; -errno. */
int fx_catalog_end_delete(fx_catalog *c, uint64_t gen);

/* Deletes the live incarnation of tenant/ns/stream: begin, directory, end.
 * The log must be closed. Returns 0, -ENOENT, -errno (the entry stays,
 * marked, and fx_catalog_retry_deletions finishes the deletion). */
int fx_catalog_remove(fx_catalog *c, const char *tenant, const char *ns, const char *stream);

/* Entries marked deleting whose deletion is not finished. */
size_t fx_catalog_pending_deletions(const fx_catalog *c);

/* Tries again to remove the directory of every entry marked deleting, and
 * drops those whose directory is gone. |*pleft| (may be NULL) receives how
 * many remain (each failure is logged, rate limited by the caller's
 * cadence). Returns 0 or the -errno of writing the catalogue. */
int fx_catalog_retry_deletions(fx_catalog *c, size_t *pleft);

/* Calls |cb| with the name of every directory under the root that no entry
 * names (a directory of the original's, or of a stream not declared again;
 * not the hidden ones, whose names start with '.'). Returns 0, the
 * callback's non-zero value, or -errno. */
int fx_catalog_list_undeclared(fx_catalog *c, fx_sio_list_cb cb, void *user);

#endif
