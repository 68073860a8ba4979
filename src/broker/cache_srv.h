/* The original's cache requests on a client bidi stream (cache_srv.c,
 * felix-facts-durable-cache.md B2): cache_put and cache_get, and the
 * original's later cache_delete, cache_put_if and cache_delete_if, checked and
 * authorised on the connection loop (auth, tenant, cache.read /
 * cache.write, the cache's registration), then run on the cache's worker
 * against that worker's fxb_cache_store and answered through a reply slot
 * (reply.h) in request order. Owns struct fxb_caches (fx_broker.caches:
 * the tenants' byte accounts, shared by every worker's store) and struct
 * fxb_wcache (fxb_worker.cache: a worker's store, its sweep timer and the
 * counters it has published). docs/cache.md. Connection loop unless noted. */
#ifndef FX_BROKER_CACHE_SRV_H
#define FX_BROKER_CACHE_SRV_H

#include <stdbool.h>

#include "broker/broker_internal.h"
#include "wire/frame.h"
#include "wire/message.h"

/* The broker's defaults for fx_broker_opts fields left 0. */
#define FXB_CACHE_DEFAULT_MAX_BYTES (64ull << 20)
#define FXB_CACHE_DEFAULT_MAX_VALUE_BYTES (1u << 20)
#define FXB_CACHE_DEFAULT_MAX_KEY_BYTES 1024u
/* Expired entries one sweep turn frees at most; more wait for the next turn. */
#define FXB_CACHE_SWEEP_BUDGET 1024u

/* Caches one broker declares at most (the YAML's caches and the admin
 * API's PUT together); one more is refused. */
#define FXB_CACHE_MAX_DECLARED 65536u

/* Creates b->caches (the tenant accounts, the placement hash key and the
 * declared caches of b->o.caches). 0, FX_EWIRE_NAME, FX_EFULL or -ENOMEM
 * (logged). Main thread, before the workers. */
int fxb_caches_init(fx_broker *b);
/* Frees b->caches; after every worker's store is gone. Main thread. */
void fxb_caches_deinit(fx_broker *b);

/* Creates |w|'s store (its share of cache_max_bytes) and sweep timer.
 * 0, -EINVAL or -ENOMEM. Main thread, in fxb_worker_init. */
int fxb_cache_worker_init(fxb_worker *w);
/* Frees |w|'s store (its loop stopped). Main thread. */
void fxb_cache_worker_deinit(fxb_worker *w);

/* Declares / undeclares a cache (fx_broker_declare_cache). |durable|: 1
 * durable (its writes go to a log, cache_dur.h; -ENOTSUP without
 * durable_storage_dir, FX_ESTORAGE_ERROR when its directory cannot be
 * made), 0 in memory, -1 either (a declared cache keeps what it is); a
 * declared cache asked to be the other is -EEXIST. |*pdurable| (may be
 * NULL): what the declaration is. undeclare returns whether it was
 * declared. Any thread. */
int fxb_cache_declare(fx_broker *b, const char *tenant, const char *ns, const char *cache,
                      int durable, bool *pcreated, bool *pdurable, fx_registry_err *err);
bool fxb_cache_undeclare(fx_broker *b, const char *tenant, const char *ns, const char *cache);
/* Calls |fn| with each declared cache's names, under the lock (|fn| must
 * not call back into the caches). Any thread. */
void fxb_cache_declared_foreach(fx_broker *b,
                                void (*fn)(const char *tenant, const char *ns, const char *cache,
                                           bool durable, void *arg),
                                void *arg);

/* The byte account of |tenant|, made on first use; NULL on -ENOMEM. Any
 * thread. */
struct fxb_cache_tenant *fxb_cache_tenant_acct(fx_broker *b, const char *tenant);

/* |w|'s store (NULL without the cache stage). Its worker loop, or main
 * before the loops start. */
struct fxb_cache_store *fxb_cache_worker_store(fxb_worker *w);
/* Records |dc| as the durable part of cache id |scope| of |w|. 0 or
 * -ENOMEM. Main thread, at start (fxb_dcache_recover). */
struct fxb_dcache;
int fxb_cache_worker_set_durable(fxb_worker *w, uint32_t scope, struct fxb_dcache *dc);
/* Closes every durable cache's log with a flush. Main thread, the loops
 * stopped, before fxb_durable_free (which lets the root go). */
void fxb_cache_durable_close(fx_broker *b);

/* The worker of cache |tenant|/|ns|/|cache| (the placement rule). Any
 * thread. */
fxb_worker *fxb_cache_worker_of(fx_broker *b, const char *tenant, const char *ns,
                                const char *cache);

/* On |w|'s loop: frees every entry of the cache (publishing the counts).
 * Returns how many, or -1 when |w| never held the cache. */
int64_t fxb_cache_worker_drop(fxb_worker *w, const char *tenant, const char *ns, const char *cache);
/* On |w|'s loop: a JSON array of {tenant, namespace, cache, entries,
 * bytes} for every cache |w| holds; NULL on -ENOMEM. */
struct json_t *fxb_cache_worker_list(fxb_worker *w);

/* True for cache_put, cache_get, cache_delete, cache_put_if and
 * cache_delete_if. */
bool fxb_cache_is_request(fx_msg_type t);

/* Handles the decoded cache request |m| on |s| (authenticated, tenant
 * checked by the caller): refused here, or handed to the cache's worker.
 * The stream goes on after the answer when the request had a request_id
 * (except after a put without one: `ok`, then the end). */
void fxb_cache_json(fxb_bidi *s, const fx_msg *m);

/* Handles a binary cache request (wire/cache_bin.h: a Felix-C frame of kind
 * 4) on |s|: the checks, worker path and reply slot of fxb_cache_json(), the
 * tenant the stream's; answered with a CACHE_ANSWER frame in request order
 * (an error, refusals included, is status 2; the stream ends after
 * `forbidden` as for JSON, and goes on after the others). A
 * stream whose client did not negotiate FX_FEATURE_HI_CACHE_BINARY gets
 * "unsupported frame flags", as for any unknown flag. Returns 0 to go on,
 * -1 when the stream stops reading. Connection loop. */
int fxb_cache_binary(fxb_bidi *s, const fx_frame *f);

#endif
