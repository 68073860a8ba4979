/* The broker's JWT authenticator: the fx_broker_auth callbacks over auth.c.
 * verify and allows run on the broker's connection loops (several at once):
 * each verification takes its own reference on the current key set, so a
 * SIGHUP swap on the main thread never pulls keys from under it. Loading and
 * reloading the JWKS file is main thread only (blocking I/O). */
#include "server/authn.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "felix/error.h"

struct fx_authn {
    fx_auth_keyslot slot;
    fx_auth_policy policy; /* issuer and audience point at the copies below */
    char *jwks_file;
    char *issuer;
    char *audience;
};

/* The claims of a verified token and the key that signed it, so that a
 * reload can tell whether that key is still trusted. |claims| comes first:
 * allows and release see an fx_auth_claims. */
typedef struct authn_ctx {
    fx_auth_claims claims;
    uint8_t pub[FX_AUTH_KEY_BYTES];
} authn_ctx;

static void set_why(char *why, size_t whylen, const char *fmt, const char *arg)
{
    if (why != NULL && whylen > 0)
        snprintf(why, whylen, fmt, arg);
}

/* ---- the broker callbacks (connection loops) ---------------------------------- */

static int verify_cb(void *user, const char *tenant, const char *token, size_t len, int64_t now_s,
                     void **pctx, char *why, size_t whylen)
{
    fx_authn *a = user;
    authn_ctx *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        set_why(why, whylen, "%s", "out of memory");
        return -ENOMEM;
    }
    fx_auth_claims *c = &x->claims;
    fx_keyset *ks = fx_auth_keyslot_get(&a->slot);
    int rv = fx_auth_verify(ks, token, len, &a->policy, now_s, c, why, whylen);
    if (rv == 0 && !fx_auth_keyset_find(ks, c->kid, x->pub))
        rv = FX_EAUTH; /* verified by this very set: cannot happen */
    fx_auth_keyset_unref(ks);
    if (rv == 0)
        rv = fx_auth_check_tenant(c, tenant, why, whylen);
    if (rv != 0) {
        if (rv != FX_EAUTH)
            set_why(why, whylen, "%s", fx_strerror(rv));
        fx_auth_claims_deinit(c);
        free(x);
        return rv;
    }
    *pctx = x;
    return 0;
}

/* The token holds through exp plus the leeway the verification allowed. */
static int64_t expiry_cb(void *user, const void *ctx)
{
    const fx_authn *a = user;
    const authn_ctx *x = ctx;
    return x->claims.exp > INT64_MAX - a->policy.leeway_s ? INT64_MAX
                                                          : x->claims.exp + a->policy.leeway_s;
}

/* True while the current key set still holds the key (same kid, same bytes)
 * that signed |ctx|. */
static bool key_valid_cb(void *user, const void *ctx)
{
    fx_authn *a = user;
    const authn_ctx *x = ctx;
    uint8_t pub[FX_AUTH_KEY_BYTES];
    fx_keyset *ks = fx_auth_keyslot_get(&a->slot);
    bool ok = ks != NULL && fx_auth_keyset_find(ks, x->claims.kid, pub) &&
              memcmp(pub, x->pub, sizeof(pub)) == 0;
    fx_auth_keyset_unref(ks);
    return ok;
}

static bool allows_cb(void *user, const void *ctx, fx_broker_auth_action action, const char *tenant,
                      const char *ns, const char *stream)
{
    (void)user;
    fx_auth_action act;
    switch (action) {
    case FX_BROKER_AUTH_PUBLISH:
        act = FX_AUTH_PUBLISH;
        break;
    case FX_BROKER_AUTH_GROUP_CONSUME:
        act = FX_AUTH_GROUP_CONSUME;
        break;
    case FX_BROKER_AUTH_GROUP_MANAGE:
        act = FX_AUTH_GROUP_MANAGE;
        break;
    case FX_BROKER_AUTH_CACHE_READ:
        act = FX_AUTH_CACHE_READ;
        break;
    case FX_BROKER_AUTH_CACHE_WRITE:
        act = FX_AUTH_CACHE_WRITE;
        break;
    default:
        act = FX_AUTH_SUBSCRIBE;
        break;
    }
    return fx_auth_allows(&((const authn_ctx *)ctx)->claims, act, tenant, ns, stream);
}

static void release_cb(void *user, void *ctx)
{
    (void)user;
    authn_ctx *x = ctx;
    fx_auth_claims_deinit(&x->claims);
    free(x);
}

void fx_authn_broker_auth(fx_authn *a, fx_broker_auth *out)
{
    *out = (fx_broker_auth){.verify = verify_cb,
                            .allows = allows_cb,
                            .release = release_cb,
                            .expiry = expiry_cb,
                            .key_valid = key_valid_cb,
                            .user = a};
}

/* ---- life cycle (main thread) ---------------------------------------------------- */

static char *dup_or(const char *s, const char *def)
{
    return strdup(s != NULL ? s : def);
}

void fx_authn_free(fx_authn *a)
{
    if (a == NULL)
        return;
    fx_auth_keyslot_deinit(&a->slot);
    free(a->jwks_file);
    free(a->issuer);
    free(a->audience);
    free(a);
}

int fx_authn_new(fx_authn **pa, const fx_authn_opts *o, char *why, size_t whylen)
{
    if (o->jwks_file == NULL || o->jwks_file[0] == '\0' || o->leeway_s < 0) {
        set_why(why, whylen, "%s", "jwks_file is required for auth_mode jwt");
        return -EINVAL;
    }
    fx_keyset *ks = NULL;
    int rv = fx_auth_keyset_load(o->jwks_file, &ks, why, whylen);
    if (rv != 0)
        return rv;
    fx_authn *a = calloc(1, sizeof(*a));
    rv = a == NULL ? -ENOMEM : fx_auth_keyslot_init(&a->slot, ks);
    if (rv != 0) {
        fx_auth_keyset_unref(ks);
        free(a);
        return rv;
    }
    a->jwks_file = strdup(o->jwks_file);
    a->issuer = dup_or(o->issuer, FX_AUTH_ISSUER_DEFAULT);
    a->audience = dup_or(o->audience, FX_AUTH_AUDIENCE_DEFAULT);
    if (a->jwks_file == NULL || a->issuer == NULL || a->audience == NULL) {
        fx_authn_free(a);
        return -ENOMEM;
    }
    a->policy = (fx_auth_policy){.issuer = a->issuer,
                                 .audience = a->audience,
                                 .leeway_s = o->leeway_s,
                                 .max_token_bytes = FX_AUTH_TOKEN_MAX_DEFAULT};
    *pa = a;
    return 0;
}

int fx_authn_reload(fx_authn *a, char *why, size_t whylen)
{
    fx_keyset *ks = NULL;
    int rv = fx_auth_keyset_load(a->jwks_file, &ks, why, whylen);
    if (rv != 0)
        return rv; /* the slot keeps the old set */
    if (why != NULL && whylen > 0)
        snprintf(why, whylen, "jwks %s: %zu keys (%zu of other types skipped)", a->jwks_file,
                 fx_auth_keyset_count(ks), fx_auth_keyset_skipped(ks));
    fx_auth_keyslot_swap(&a->slot, ks);
    return 0;
}

const char *fx_authn_jwks_file(const fx_authn *a)
{
    return a->jwks_file;
}
