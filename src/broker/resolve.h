/* The permission check and name resolution of a bidi stream's publish and
 * subscribe requests (resolve.c), cached per QUIC stream. Connection loop.
 * Owns struct fxb_resolved (fxb_bidi.resolved; publish.c keeps its |names|
 * and sets |names_ok|). Stands alone (no broker_internal.h): that header
 * embeds fxb_resolved. */
#ifndef FX_BROKER_RESOLVE_H
#define FX_BROKER_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"
#include "broker/registry.h"
#include "broker/stream.h"
#include "wire/binary.h"

typedef struct fxb_bidi fxb_bidi;

/* A bidi stream's last resolved stream (names resolved once per QUIC
 * stream) and the permission answers for those names: bit (1 << action) of
 * |perm_known| says |perm_ok| holds that action's answer. |names| is the
 * names section of the last binary publish whose names were validated
 * (publish.c), and |names_ok| whether those exact names passed the tenant
 * check and resolved to |h| with the publish permission: set by the frame
 * that resolved them, cleared whenever |h|, |hkey| or the cached names
 * change. Then a frame with the same names only needs |h| to be still
 * active. */
typedef struct fxb_resolved {
    fx_stream_handle *h;
    char hkey[3 * (FX_REGISTRY_NAME_MAX + 1)];
    size_t hkey_len;
    uint8_t perm_known, perm_ok;
    fx_wire_names_cache names;
    bool names_ok;
    /* In a cluster: where the last resolve that was refused because this
     * node does not own the stream found it (allocated on first use). */
    struct fx_cluster_route *route;
} fxb_resolved;

/* Drops what |s|'s cache holds (the stream is freed). */
void fxb_resolve_deinit(fxb_bidi *s);

/* Checks that |s|'s credentials permit |action| on the named stream (before
 * anything is created), then resolves the names (both cached per QUIC
 * stream). In a cluster the stream must be owned here (claimed first when
 * this node is its candidate): else FX_EREMOTE with |err| "stream T/NS/S is
 * served by NODE" and s->resolved.route naming the owner, or FX_EOVERLOAD
 * with why no owner can be named (retryable). Returns 0, FX_EFORBIDDEN with
 * |err| "forbidden" (counted and logged, rate-limited), or a registry error
 * with |err| filled. |*ph| is borrowed from the stream's cache. */
int fxb_bidi_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                     fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                     fx_registry_err *err);

/* Whether |s|'s credentials permit the cache |action| (cache.read or
 * cache.write) on cache |tenant|/|ns|/|cache| (NUL-terminated): always with
 * auth_mode none. Asked for each request, not cached (the stream's cache
 * above holds stream names). A refusal is counted
 * (felix_broker_auth_refused_total{reason=forbidden}) and logged,
 * rate-limited. */
bool fxb_bidi_cache_allows(fxb_bidi *s, fx_broker_auth_action action, const char *tenant,
                           const char *ns, const char *cache);

#endif
