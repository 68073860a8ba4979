/* The permission check and name resolution of a bidi stream's publish and
 * subscribe requests: the authenticator is asked before the registry (a
 * refused client never auto-creates a stream), and both answers are cached
 * per QUIC stream, so the frames of one stream naming the same stream again
 * and again cost a compare. Connection loop. */
#include "broker/resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/broker_internal.h"
#include "broker/mirror_local.h"
#include "cluster/cluster.h"
#include "felix/error.h"

static fx_ratelimit forbidden_rl = FX_RATELIMIT_INIT;

/* Asks the authenticator about |action| on the NUL-terminated |names|;
 * always true with auth_mode none (the tenant was checked by the caller). */
static bool ask_allows(fxb_bidi *s, fx_broker_auth_action action,
                       char names[3][FX_REGISTRY_NAME_MAX + 1])
{
    const fx_broker_auth *a = &s->conn->b->o.auth;
    if (a->verify == NULL)
        return true;
    if (s->auth_ctx == NULL || a->allows == NULL)
        return false;
    return a->allows(a->user, s->auth_ctx, action, names[0], names[1], names[2]);
}

/* The cached answer for |action| on the names in s->resolved.hkey, asked once. */
static bool permits(fxb_bidi *s, fx_broker_auth_action action,
                    char names[3][FX_REGISTRY_NAME_MAX + 1])
{
    uint8_t bit = (uint8_t)(1u << action);
    if ((s->resolved.perm_known & bit) == 0) {
        if (ask_allows(s, action, names))
            s->resolved.perm_ok |= bit;
        s->resolved.perm_known |= bit;
    }
    return (s->resolved.perm_ok & bit) != 0;
}

static const char *action_name(fx_broker_auth_action action)
{
    switch (action) {
    case FX_BROKER_AUTH_PUBLISH:
        return "publish";
    case FX_BROKER_AUTH_GROUP_CONSUME:
        return "group.consume";
    case FX_BROKER_AUTH_GROUP_MANAGE:
        return "group.manage";
    case FX_BROKER_AUTH_CACHE_READ:
        return "cache.read";
    case FX_BROKER_AUTH_CACHE_WRITE:
        return "cache.write";
    default:
        return "subscribe";
    }
}

static int forbid(fxb_bidi *s, fx_broker_auth_action action,
                  char names[3][FX_REGISTRY_NAME_MAX + 1], fx_registry_err *err)
{
    FX_COUNTER_INC(broker_auth_forbidden);
    FX_LOG_RATELIMITED(&forbidden_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld: %s to %s/%s/%s forbidden: the token lacks the "
                       "permission",
                       (unsigned long long)s->conn->id, (long long)s->sid, action_name(action),
                       names[0], names[1], names[2]);
    err->code = FX_EFORBIDDEN;
    snprintf(err->msg, sizeof(err->msg), "forbidden");
    return FX_EFORBIDDEN;
}

/* Splits the names into |names| and the cache key "t/ns/stream/" |key|
 * (|*pn| bytes). Returns false when a name cannot be a stream name (too
 * long, or holding '/' or NUL): the registry then refuses it, uncached. */
static bool split_names(const fx_wire_slice parts[3], char names[3][FX_REGISTRY_NAME_MAX + 1],
                        char *key, size_t *pn)
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (parts[i].len > FX_REGISTRY_NAME_MAX || memchr(parts[i].ptr, '/', parts[i].len) ||
            memchr(parts[i].ptr, '\0', parts[i].len))
            return false;
        memcpy(names[i], parts[i].ptr, parts[i].len);
        names[i][parts[i].len] = '\0';
        memcpy(key + n, parts[i].ptr, parts[i].len);
        n += parts[i].len;
        key[n++] = '/';
    }
    *pn = n;
    return true;
}

/* True when |parts| are the names of the key "t/ns/stream/" cached in
 * s->resolved.hkey. Sound without looking for '/' in |parts|: the key holds exactly
 * three, and each part must end at one with the lengths adding up. */
static bool key_matches(const fxb_bidi *s, const fx_wire_slice parts[3])
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        size_t len = parts[i].len;
        if (n + len + 1 > s->resolved.hkey_len ||
            memcmp(s->resolved.hkey + n, parts[i].ptr, len) != 0 ||
            s->resolved.hkey[n + len] != '/')
            return false;
        n += len + 1;
    }
    return n == s->resolved.hkey_len;
}

/* The frames of a stream name the same stream again and again: answers from
 * the cache, without copying the names, when the stream is the cached one,
 * still active, and the permission was granted. */
static bool resolve_cached(fxb_bidi *s, fx_broker_auth_action action, const fx_wire_slice parts[3],
                           fx_stream_handle **ph)
{
    uint8_t bit = (uint8_t)(1u << action);
    if (s->resolved.h == NULL || (s->resolved.perm_ok & bit) == 0 || !key_matches(s, parts) ||
        !fx_stream_handle_is_active(s->resolved.h))
        return false;
    *ph = s->resolved.h;
    return true;
}

/* The registry's resolve for |action|: a subscribe never creates a durable
 * stream (fx_registry_resolve_subscribe); a group request creates nothing
 * (the stream must exist: FX_ENOSTREAM otherwise). */
static int registry_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                            fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                            fx_registry_err *err)
{
    fx_registry *r = s->conn->b->reg;
    if (action == FX_BROKER_AUTH_GROUP_CONSUME || action == FX_BROKER_AUTH_GROUP_MANAGE) {
        *ph = fx_registry_find(r, tenant, ns, stream);
        if (*ph != NULL)
            return 0;
        err->code = FX_ENOSTREAM;
        snprintf(err->msg, sizeof(err->msg), "stream not found: %.*s/%.*s/%.*s",
                 (int)(tenant.len > 128 ? 128 : tenant.len), (const char *)tenant.ptr,
                 (int)(ns.len > 128 ? 128 : ns.len), (const char *)ns.ptr,
                 (int)(stream.len > 128 ? 128 : stream.len), (const char *)stream.ptr);
        return FX_ENOSTREAM;
    }
    if (action == FX_BROKER_AUTH_SUBSCRIBE)
        return fx_registry_resolve_subscribe(r, tenant, ns, stream, ph, err);
    return fx_registry_resolve(r, tenant, ns, stream, ph, err);
}

static fx_wire_slice slice_str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* In a cluster: whether this node serves the stream named |names|; else
 * fills |err| (and s->resolved.route). */
static int cluster_route(fxb_bidi *s, char names[3][FX_REGISTRY_NAME_MAX + 1],
                         fx_registry_err *err)
{
    fx_broker *b = s->conn->b;
    if (b->o.cluster == NULL)
        return 0;
    if (s->resolved.route == NULL && (s->resolved.route = malloc(sizeof(fx_cluster_route))) == NULL) {
        err->code = -ENOMEM;
        snprintf(err->msg, sizeof(err->msg), "out of memory");
        return -ENOMEM;
    }
    fx_cluster_route *r = s->resolved.route;
    fx_stream_handle *h = fx_registry_find(b->reg, slice_str(names[0]), slice_str(names[1]),
                                           slice_str(names[2]));
    bool durable = h != NULL && fx_stream_handle_is_durable(h);
    fx_cluster_route_stream(b->o.cluster, names[0], names[1], names[2], durable, r);
    if (r->kind == FX_CLUSTER_LOCAL)
        fxb_mirror_owned(b, h); /* a mirror of it goes first (docs/cluster.md "Mirror") */
    fx_stream_handle_unref(h);
    if (r->kind == FX_CLUSTER_LOCAL)
        return 0;
    FX_COUNTER_INC(cluster_refused);
    if (r->kind == FX_CLUSTER_REMOTE) {
        err->code = FX_EREMOTE;
        snprintf(err->msg, sizeof(err->msg), "stream %s/%s/%s is served by %s", names[0], names[1],
                 names[2], r->node_id);
        return FX_EREMOTE;
    }
    err->code = FX_EOVERLOAD;
    snprintf(err->msg, sizeof(err->msg), "%s", r->why);
    return FX_EOVERLOAD;
}

int fxb_bidi_resolve(fxb_bidi *s, fx_broker_auth_action action, fx_wire_slice tenant,
                     fx_wire_slice ns, fx_wire_slice stream, fx_stream_handle **ph,
                     fx_registry_err *err)
{
    char key[sizeof(s->resolved.hkey)];
    char names[3][FX_REGISTRY_NAME_MAX + 1];
    size_t n;
    fx_wire_slice parts[3] = {tenant, ns, stream};
    if (resolve_cached(s, action, parts, ph))
        return 0;
    if (!split_names(parts, names, key, &n)) {
        s->resolved.names_ok = false; /* resolved past the cache: |ph| is not |h| */
        if (s->conn->b->o.cluster != NULL) {
            /* Such names never resolve (the registry refuses them too), and
             * a cluster could not place them. */
            err->code = FX_EWIRE_NAME;
            snprintf(err->msg, sizeof(err->msg),
                     "invalid stream name: longer than %u bytes or holding '/' or NUL",
                     FX_REGISTRY_NAME_MAX);
            return FX_EWIRE_NAME;
        }
        return registry_resolve(s, action, tenant, ns, stream, ph, err);
    }
    s->resolved.names_ok = false; /* |h| or its permission may change below */
    if (n != s->resolved.hkey_len || memcmp(key, s->resolved.hkey, n) != 0) {
        fx_stream_handle_unref(s->resolved.h);
        s->resolved.h = NULL;
        memcpy(s->resolved.hkey, key, n);
        s->resolved.hkey_len = n;
        s->resolved.perm_known = s->resolved.perm_ok = 0;
    }
    /* Before the registry: a refused client must not auto-create streams. */
    if (!permits(s, action, names))
        return forbid(s, action, names, err);
    if (s->resolved.h != NULL && fx_stream_handle_is_active(s->resolved.h)) {
        *ph = s->resolved.h;
        return 0;
    }
    fx_stream_handle *h;
    int rv = cluster_route(s, names, err);
    if (rv == 0)
        rv = registry_resolve(s, action, tenant, ns, stream, &h, err);
    if (rv != 0)
        return rv;
    fx_stream_handle_unref(s->resolved.h);
    s->resolved.h = h;
    *ph = h;
    return 0;
}

void fxb_resolve_deinit(fxb_bidi *s)
{
    free(s->resolved.route);
    s->resolved.route = NULL;
    fx_stream_handle_unref(s->resolved.h);
}

bool fxb_bidi_cache_allows(fxb_bidi *s, fx_broker_auth_action action, const char *tenant,
                           const char *ns, const char *cache)
{
    const fx_broker_auth *a = &s->conn->b->o.auth;
    if (a->verify == NULL)
        return true;
    if (s->auth_ctx != NULL && a->allows != NULL &&
        a->allows(a->user, s->auth_ctx, action, tenant, ns, cache))
        return true;
    FX_COUNTER_INC(broker_auth_forbidden);
    FX_LOG_RATELIMITED(&forbidden_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld: %s on cache %.128s/%.128s/%.128s forbidden: the "
                       "token lacks the permission",
                       (unsigned long long)s->conn->id, (long long)s->sid, action_name(action),
                       tenant, ns, cache);
    return false;
}
