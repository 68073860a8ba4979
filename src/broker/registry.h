/* fx_registry: the broker's stream catalogue, tenant -> namespace -> stream,
 * keyed by the three names and handing out refcounted stream handles with
 * dense ids from 1. Streams come from the config's list, an admin call, or
 * first use when auto-creation is on. I/O loops resolve names (once per QUIC
 * stream, not per message); creation and deletion are rare. Any thread: a
 * rwlock guards the tables, handles are atomically refcounted. */
#ifndef FX_BROKER_REGISTRY_H
#define FX_BROKER_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/* Longest tenant, namespace or stream name, in bytes. */
#define FX_REGISTRY_NAME_MAX 255u

typedef struct fx_registry fx_registry;
typedef struct fx_stream_handle fx_stream_handle;

/* A retained-bytes account: the bytes the stream rings charged to it (their
 * payload plus the per-message overhead, stream.h) against |limit| (0 = no
 * limit). The registry keeps one per tenant (tenant_retained_bytes), the
 * broker one for the process (retained_bytes_limit). Rings on any worker
 * add and subtract with relaxed atomics; refcounted so that a ring can
 * outlive the handle and the tenant record it was created for. */
typedef struct fx_retained {
    atomic_int refs;
    atomic_int_fast64_t bytes;
    uint64_t limit;
} fx_retained;

/* Adds a reference and returns |a| (NULL gives NULL). Any thread. */
fx_retained *fx_retained_ref(fx_retained *a);
/* Drops a reference; the last frees |a|. NULL does nothing. Any thread. */
void fx_retained_unref(fx_retained *a);

/* Error detail: |code| is the value also returned, |msg| a complete sentence
 * for error replies ("stream not found: tenant=t1 namespace=default stream=x").
 * Sized for three maximal names. Functions accept NULL. */
typedef struct fx_registry_err {
    int code;
    char msg[1024];
} fx_registry_err;

typedef struct fx_registry_opts {
    bool auto_create;                /* resolve creates unknown streams */
    uint32_t max_streams_per_tenant; /* active streams one tenant may hold; 0 = no limit */
    uint32_t max_tenants;            /* tenants holding streams at once; 0 = no limit */
    uint64_t tenant_retained_bytes;  /* limit of each tenant's fx_retained; 0 = none */
    bool durable_storage;            /* durable streams may be created (storage configured) */
    bool durable_default;            /* auto-created streams are durable (by a publish only) */
    /* Durable streams one tenant may hold (tenant_durable_streams_max); 0 =
     * no limit. Streams adopted from the catalogue at start are never
     * refused by it (FX_REGISTRY_DURABLE_ADOPT) but count. */
    uint32_t tenant_durable_streams_max;
    /* The limit of each tenant's durable-bytes account
     * (fx_stream_handle_durable_bytes, tenant_durable_bytes_max); 0 = none. */
    uint64_t tenant_durable_bytes_max;
    /* With auto_create: after fx_registry_remove, a resolve does not create
     * the same names again for this long (fx_registry_create does, and ends
     * the wait). 0 = off. */
    uint64_t delete_tombstone_ns;
} fx_registry_opts;

/* Creates an empty registry from |o| in |*pr|, its name hash (SipHash)
 * keyed with random bytes of its own. Returns 0 or -ENOMEM / -errno (rwlock)
 * / -EIO (libsodium would not initialise). The caller frees it with
 * fx_registry_free(). Any thread. */
int fx_registry_new(fx_registry **pr, const fx_registry_opts *o);

/* The registry's keyed hash of |n| bytes at |p|: the same bytes hash alike
 * in one registry and (but for chance) differently in another. Any thread. */
uint64_t fx_registry_hash(const fx_registry *r, const void *p, size_t n);

/* Deactivates every stream, drops the registry's handle references and frees
 * |r|. Handles held elsewhere stay valid (inactive) until unreffed. NULL does
 * nothing. No other thread may use |r| any more. */
void fx_registry_free(fx_registry *r);

/* Checks one name: non-empty, at most FX_REGISTRY_NAME_MAX bytes, valid UTF-8,
 * no '/' and no NUL. |what| is "tenant", "namespace" or "stream" (used in the
 * message). Returns 0 or FX_EWIRE_NAME with |err| saying which rule failed
 * (the offending name is not echoed: it may be binary). Any thread. */
int fx_registry_name_check(const char *what, fx_wire_slice name, fx_registry_err *err);

/* Creates the stream |tenant|/|ns|/|stream| (admin call or config list), or
 * finds it if it exists (idempotent). On success stores a new reference in
 * |*ph| (caller unrefs; pass NULL to take none) and sets |*pcreated| (may be
 * NULL). Returns 0, FX_EWIRE_NAME (a bad name), FX_EFULL when
 * the tenant already holds max_streams_per_tenant streams ("tenant t1 has
 * reached max_streams_per_tenant (N)") or when the stream would add a tenant
 * beyond max_tenants ("the broker holds max_tenants (N) tenants"), or
 * -ENOMEM. A stream made this way never expires by itself. Any thread. */
int fx_registry_create(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns, fx_wire_slice stream,
                       fx_stream_handle **ph, bool *pcreated, fx_registry_err *err);

/* |durable| of fx_registry_create_durable for a stream found in the
 * durable catalogue at start: durable, and not refused by
 * tenant_durable_streams_max (its data exists; it still counts). */
#define FX_REGISTRY_DURABLE_ADOPT 3

/* As fx_registry_create, with durability: |durable| 1 creates a durable
 * stream, 0 an in-memory one, -1 either (a new stream is then in memory),
 * FX_REGISTRY_DURABLE_ADOPT a durable one adopted at start. A new durable
 * stream (but an adopted one) beyond tenant_durable_streams_max returns
 * FX_ESTORAGE_QUOTA ("storage quota exceeded: tenant t1 holds
 * tenant_durable_streams_max (N) durable streams: stream not created"),
 * counted.
 * Durability is fixed at creation: asking an existing stream for the other
 * kind returns -EEXIST ("changing stream durability requires removal and
 * recreation: ..."), and a durable stream without durable_storage -ENOTSUP
 * ("stream T/NS/S is marked durable but this broker has no durable storage
 * configured"). Any thread. */
int fx_registry_create_durable(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                               fx_wire_slice stream, int durable, fx_stream_handle **ph,
                               bool *pcreated, fx_registry_err *err);

/* Resolves names to a handle for a publish or subscribe: finds the stream, or
 * creates it when auto-creation is on. Stores a new reference in |*ph| (caller
 * unrefs). Returns 0, FX_EWIRE_NAME, FX_ENOSTREAM ("stream not found:
 * tenant=X namespace=Y stream=Z", auto-creation off, or the same followed by
 * " (deleted recently: not auto-created again for N s, ...)" within
 * delete_tombstone_ns of its removal), FX_EFULL (tenant or
 * max_tenants limit, auto-creation on) or -ENOMEM. A stream created here is
 * auto-created: fx_registry_expire_idle may remove it; with durable_default
 * it is durable, and beyond tenant_durable_streams_max FX_ESTORAGE_QUOTA is
 * returned as by fx_registry_create_durable. Takes the read lock only when
 * the stream exists. Any thread. */
int fx_registry_resolve(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                        fx_wire_slice stream, fx_stream_handle **ph, fx_registry_err *err);

/* As fx_registry_resolve, for a subscribe: a subscribe never creates a
 * durable stream, so with durable_default a missing stream is not created
 * and FX_ENOSTREAM is returned ("stream not found: tenant=X namespace=Y
 * stream=Z (durable_default: a durable stream is created by its first
 * publish or the admin API, not by a subscribe)"), counted. Without
 * durable_default it is fx_registry_resolve. Any thread. */
int fx_registry_resolve_subscribe(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                                  fx_wire_slice stream, fx_stream_handle **ph,
                                  fx_registry_err *err);

/* Deletes the stream: it is deactivated (holders see it inactive) and its
 * names become free again (a later create gets a new id; with
 * delete_tombstone_ns a resolve does not auto-create them for that long).
 * Returns true if the stream existed, false otherwise. Any thread. */
bool fx_registry_remove(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                        fx_wire_slice stream);
/* As fx_registry_remove without the tombstone: the names may be created
 * again at once (a cluster node that stopped owning the stream). */
bool fx_registry_release(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                         fx_wire_slice stream);

/* Returns a reference to the active stream named (|tenant|, |ns|, |stream|),
 * for the caller to drop, or NULL if there is none (never created, removed,
 * or an invalid name). Creates nothing and does not count as use for idle
 * expiry. Any thread. */
fx_stream_handle *fx_registry_find(fx_registry *r, fx_wire_slice tenant, fx_wire_slice ns,
                                   fx_wire_slice stream);

/* Removes every auto-created stream that is idle at |now_ns|
 * (CLOCK_MONOTONIC): nobody holds its handle but the registry (no
 * publisher's or subscriber's QUIC stream, no queued job, no subscription)
 * and it was last resolved or appended to (fx_stream_handle_touch) more than
 * |idle_ns| ago. Each removed handle is passed to |cb| with a reference the
 * callback takes over, after the lock is released. Returns how many were
 * removed. Any thread. */
size_t fx_registry_expire_idle(fx_registry *r, uint64_t now_ns, uint64_t idle_ns,
                               void (*cb)(fx_stream_handle *h, void *user), void *user);

/* Number of tenants holding streams. Any thread. */
size_t fx_registry_tenants(fx_registry *r);

/* Number of active streams, in total or of one tenant. Any thread. */
size_t fx_registry_count(fx_registry *r);
size_t fx_registry_tenant_count(fx_registry *r, fx_wire_slice tenant);

/* Calls |cb(h, user)| for every active stream, under the read lock (|cb| must
 * not call into |r|; take a reference to keep |h|). Order unspecified. */
void fx_registry_foreach(fx_registry *r, void (*cb)(fx_stream_handle *h, void *user), void *user);

/* ---- handles ------------------------------------------------------------- */

/* Adds a reference to |h| and returns it (NULL gives NULL). Any thread. */
fx_stream_handle *fx_stream_handle_ref(fx_stream_handle *h);
/* Drops a reference; the last frees the handle. NULL does nothing. Any thread. */
void fx_stream_handle_unref(fx_stream_handle *h);

/* The dense id (1, 2, ...; never reused by this registry). Any thread. */
uint64_t fx_stream_handle_id(const fx_stream_handle *h);
/* False once the stream was removed (or the registry freed). Any thread. */
bool fx_stream_handle_is_active(const fx_stream_handle *h);
/* Set by the stream's worker once it has finished the subscribers of a
 * removed stream: publishes admitted before the removal were delivered, any
 * later one is refused. Set: the worker; read: any thread. */
void fx_stream_handle_set_ended(fx_stream_handle *h);
bool fx_stream_handle_is_ended(const fx_stream_handle *h);
/* A cluster move (fx_broker_freeze_stream): FX_HANDLE_MOVING refuses new
 * publishes at admission; FX_HANDLE_FROZEN, set once the jobs admitted
 * before are appended and the tail read, makes the worker refuse any
 * append. Any thread. */
enum { FX_HANDLE_SERVING = 0, FX_HANDLE_MOVING = 1, FX_HANDLE_FROZEN = 2 };
void fx_stream_handle_set_moving(fx_stream_handle *h, int state);
int fx_stream_handle_moving(const fx_stream_handle *h);
/* The publish jobs of |h| made and not freed yet (counted for a cluster's
 * in-memory streams: a move waits for them before it reads the tail).
 * Any thread. */
void fx_stream_handle_jobs_add(fx_stream_handle *h, int64_t delta);
int64_t fx_stream_handle_jobs(const fx_stream_handle *h);
/* Returns 0 if |h| is active, else FX_ENOSTREAM with "stream handle inactive:
 * tenant=X namespace=Y stream=Z" in |err|: a cached handle must be checked
 * this way before each use. Any thread. */
int fx_stream_handle_check(const fx_stream_handle *h, fx_registry_err *err);

/* Records activity at |now_ns| (CLOCK_MONOTONIC) for idle expiry: a resolve
 * or an append. Any thread (a relaxed store). */
void fx_stream_handle_touch(fx_stream_handle *h, uint64_t now_ns);
/* The retained-bytes account of the stream's tenant (borrowed while a
 * reference to |h| is held; take one with fx_retained_ref to keep it). Any
 * thread. */
fx_retained *fx_stream_handle_retained(const fx_stream_handle *h);

/* The durable-bytes account of |h|'s tenant: its durable logs charge their
 * bytes on disk to it (durable.c) against tenant_durable_bytes_max. NULL
 * for a stream in memory. Valid while |h| is. Any thread. */
fx_retained *fx_stream_handle_durable_bytes(const fx_stream_handle *h);
/* Whether the stream is durable (fixed at creation). Any thread. */
bool fx_stream_handle_is_durable(const fx_stream_handle *h);

/* Marks |h| as a cluster mirror (src/cluster/mirror.h): a local copy of a
 * stream another node owns, fed by the mirror and never appended to by a
 * publish; its ring numbers from |first_offset| until the first append.
 * Any thread. */
void fx_stream_handle_set_mirror(fx_stream_handle *h, uint64_t first_offset);
bool fx_stream_handle_is_mirror(const fx_stream_handle *h);
uint64_t fx_stream_handle_mirror_first(const fx_stream_handle *h);
/* The references held now (a snapshot, for the mirror's idle check: a
 * subscription or a client's QUIC stream holds one). Any thread. */
size_t fx_stream_handle_refs(const fx_stream_handle *h);

/* The names (NUL-terminated, valid while a reference is held). */
const char *fx_stream_handle_tenant(const fx_stream_handle *h);
const char *fx_stream_handle_namespace(const fx_stream_handle *h);
const char *fx_stream_handle_stream(const fx_stream_handle *h);

#endif
