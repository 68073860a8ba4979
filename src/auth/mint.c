/* Minting for tests, demos and `felix token`: Ed25519 key pairs, compact
 * EdDSA JWTs and JWKS files, on nettle and jansson. The verifying side is in
 * auth.c; the contract of both is in auth.h. No sockets and no loops. */
#include "auth/auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>
#include <nettle/eddsa.h>

#include "wire/base64.h"

/* Room for the base64url text of |n| bytes plus a NUL. */
#define B64U_ROOM(n) (FX_BASE64_ENCODED_LEN(n, FX_BASE64_URL) + 1)

/* Encodes |n| bytes into |dst| (room B64U_ROOM(n)) without padding and
 * NUL-terminates; returns the length. */
static size_t b64url_encode(char *dst, const uint8_t *src, size_t n)
{
    size_t k = fx_base64_encode(dst, src, n, FX_BASE64_URL);
    dst[k] = '\0';
    return k;
}

/* ======================================================================== */
/* Minting                                                                  */
/* ======================================================================== */

int fx_auth_keygen(uint8_t pub[FX_AUTH_KEY_BYTES], uint8_t priv[FX_AUTH_KEY_BYTES])
{
    if (!pub || !priv)
        return -EINVAL;
    size_t got = 0;
    while (got < FX_AUTH_KEY_BYTES) {
        ssize_t n = getrandom(priv + got, FX_AUTH_KEY_BYTES - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    ed25519_sha512_public_key(pub, priv);
    return 0;
}

void fx_auth_pubkey(const uint8_t priv[FX_AUTH_KEY_BYTES], uint8_t pub[FX_AUTH_KEY_BYTES])
{
    ed25519_sha512_public_key(pub, priv);
}

int fx_auth_sign_compact(const uint8_t priv[FX_AUTH_KEY_BYTES], const void *header, size_t hlen,
                         const void *payload, size_t plen, char **ptoken)
{
    if (!priv || !ptoken || (!header && hlen) || (!payload && plen))
        return -EINVAL;
    *ptoken = NULL;
    size_t room = B64U_ROOM(hlen) + 1 + B64U_ROOM(plen) + 1 + B64U_ROOM(FX_AUTH_SIG_BYTES);
    char *t = malloc(room);
    if (!t)
        return -ENOMEM;
    size_t n = b64url_encode(t, header, hlen);
    t[n++] = '.';
    n += b64url_encode(t + n, payload, plen);
    uint8_t pub[FX_AUTH_KEY_BYTES], sig[FX_AUTH_SIG_BYTES];
    ed25519_sha512_public_key(pub, priv);
    ed25519_sha512_sign(pub, priv, n, (const uint8_t *)t, sig);
    t[n++] = '.';
    b64url_encode(t + n, sig, sizeof(sig));
    *ptoken = t;
    return 0;
}

/* Sets |key| of |obj| to a new string; false when jansson refuses it (not
 * UTF-8, or out of memory). */
static bool set_str(json_t *obj, const char *key, const char *s)
{
    return json_object_set_new(obj, key, json_string(s)) == 0;
}

static bool set_int(json_t *obj, const char *key, int64_t v)
{
    return json_object_set_new(obj, key, json_integer((json_int_t)v)) == 0;
}

static json_t *mint_payload(const fx_auth_mint_claims *c)
{
    json_t *o = json_object();
    json_t *perms = json_array();
    bool ok = o && perms;
    ok = ok && set_str(o, "iss", c->issuer ? c->issuer : FX_AUTH_ISSUER_DEFAULT);
    ok = ok && set_str(o, "aud", c->audience ? c->audience : FX_AUTH_AUDIENCE_DEFAULT);
    ok = ok && (!c->sub || set_str(o, "sub", c->sub));
    ok = ok && set_str(o, "tid", c->tid);
    ok = ok && (!c->has_iat || set_int(o, "iat", c->iat));
    ok = ok && (!c->has_nbf || set_int(o, "nbf", c->nbf));
    ok = ok && set_int(o, "exp", c->exp);
    for (size_t i = 0; ok && i < c->nperms; i++)
        ok = c->perms[i] && json_array_append_new(perms, json_string(c->perms[i])) == 0;
    ok = ok && json_object_set(o, "perms", perms) == 0;
    json_decref(perms);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Serialises |obj| compactly (insertion order) and signs it with |header|. */
static int sign_json(const uint8_t *priv, json_t *header, json_t *payload, char **ptoken)
{
    char *h = json_dumps(header, JSON_COMPACT);
    char *p = json_dumps(payload, JSON_COMPACT);
    int rv = -ENOMEM;
    if (h && p)
        rv = fx_auth_sign_compact(priv, h, strlen(h), p, strlen(p), ptoken);
    free(h);
    free(p);
    return rv;
}

int fx_auth_mint(const uint8_t priv[FX_AUTH_KEY_BYTES], const char *kid,
                 const fx_auth_mint_claims *c, char **ptoken)
{
    if (!priv || !c || !c->tid || !ptoken || (c->nperms && !c->perms))
        return -EINVAL;
    *ptoken = NULL;
    json_t *header = json_object();
    bool ok = header && set_str(header, "alg", "EdDSA") && set_str(header, "typ", "JWT") &&
              (!kid || set_str(header, "kid", kid));
    json_t *payload = ok ? mint_payload(c) : NULL;
    /* jansson reports invalid UTF-8 and exhausted memory alike. */
    int rv = payload ? sign_json(priv, header, payload, ptoken) : -EINVAL;
    json_decref(payload);
    json_decref(header);
    return rv;
}

int fx_auth_jwks_write(FILE *f, const char *kid, const uint8_t pub[FX_AUTH_KEY_BYTES])
{
    if (!f || !pub)
        return -EINVAL;
    char x[B64U_ROOM(FX_AUTH_KEY_BYTES)];
    b64url_encode(x, pub, FX_AUTH_KEY_BYTES);
    json_t *root = json_object(), *keys = json_array(), *jwk = json_object();
    bool ok = root && keys && jwk && set_str(jwk, "kty", "OKP") && set_str(jwk, "crv", "Ed25519") &&
              set_str(jwk, "use", "sig") && set_str(jwk, "alg", "EdDSA") &&
              (!kid || set_str(jwk, "kid", kid)) && set_str(jwk, "x", x) &&
              json_array_append(keys, jwk) == 0 && json_object_set(root, "keys", keys) == 0;
    int rv = -EINVAL;
    if (ok) {
        rv = 0;
        if (json_dumpf(root, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF || fflush(f) != 0)
            rv = -EIO;
    }
    json_decref(jwk);
    json_decref(keys);
    json_decref(root);
    return rv;
}
