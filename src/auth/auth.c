/* libauth, shared by felix-broker and the felix CLI: JWKS key sets, compact
 * EdDSA JWT verification and permission matching, on nettle (Ed25519),
 * wire/base64 and jansson; minting is in mint.c. The contract is in auth.h.
 * No sockets and no loops; the only I/O is reading JWKS files on the main
 * thread. */
#include "auth/auth.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <nettle/eddsa.h>

#include "base/log.h"
#include "felix/error.h"
#include "wire/base64.h"

_Static_assert(FX_AUTH_KEY_BYTES == ED25519_KEY_SIZE, "Ed25519 key size");
_Static_assert(FX_AUTH_SIG_BYTES == ED25519_SIGNATURE_SIZE, "Ed25519 signature size");

/* Base64url lengths of a 32-byte key and a 64-byte signature, unpadded. */
#define KEY_B64_CHARS 43u
#define SIG_B64_CHARS 86u
/* Attacker-supplied strings quoted in |why| are cut to this many bytes. */
#define QUOTE_MAX 64

/* ======================================================================== */
/* Refusal reasons                                                          */
/* ======================================================================== */

static const char *const refusal_text[FX_AUTH_REFUSAL_COUNT] = {
    [FX_AUTH_OK] = "ok",
    [FX_AUTH_TOO_LARGE] = "token too large",
    [FX_AUTH_MALFORMED] = "malformed token",
    [FX_AUTH_BAD_ALG] = "unsupported alg",
    [FX_AUTH_NO_KEYS] = "no keys loaded",
    [FX_AUTH_UNKNOWN_KID] = "unknown key id",
    [FX_AUTH_MISSING_KID] = "missing key id",
    [FX_AUTH_BAD_SIGNATURE] = "bad signature",
    [FX_AUTH_WRONG_ISSUER] = "wrong issuer",
    [FX_AUTH_WRONG_AUDIENCE] = "wrong audience",
    [FX_AUTH_MISSING_EXP] = "missing exp claim",
    [FX_AUTH_EXPIRED] = "token expired",
    [FX_AUTH_NOT_YET_VALID] = "token not yet valid",
    [FX_AUTH_MISSING_TID] = "missing tid claim",
    [FX_AUTH_BAD_PERMS] = "invalid perms claim",
    [FX_AUTH_WRONG_TENANT] = "wrong tenant",
};

static const char *const refusal_labels[FX_AUTH_REFUSAL_COUNT] = {
    [FX_AUTH_OK] = "ok",
    [FX_AUTH_TOO_LARGE] = "too_large",
    [FX_AUTH_MALFORMED] = "malformed",
    [FX_AUTH_BAD_ALG] = "unsupported_alg",
    [FX_AUTH_NO_KEYS] = "no_keys",
    [FX_AUTH_UNKNOWN_KID] = "unknown_kid",
    [FX_AUTH_MISSING_KID] = "missing_kid",
    [FX_AUTH_BAD_SIGNATURE] = "bad_signature",
    [FX_AUTH_WRONG_ISSUER] = "wrong_issuer",
    [FX_AUTH_WRONG_AUDIENCE] = "wrong_audience",
    [FX_AUTH_MISSING_EXP] = "missing_exp",
    [FX_AUTH_EXPIRED] = "expired",
    [FX_AUTH_NOT_YET_VALID] = "not_yet_valid",
    [FX_AUTH_MISSING_TID] = "missing_tid",
    [FX_AUTH_BAD_PERMS] = "invalid_perms",
    [FX_AUTH_WRONG_TENANT] = "wrong_tenant",
};

const char *fx_auth_refusal_str(fx_auth_refusal r)
{
    if ((unsigned)r >= FX_AUTH_REFUSAL_COUNT)
        return "?";
    return refusal_text[r];
}

const char *fx_auth_refusal_label(fx_auth_refusal r)
{
    if ((unsigned)r >= FX_AUTH_REFUSAL_COUNT)
        return "?";
    return refusal_labels[r];
}

static void say(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || whylen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

/* Records refusal |r| in *pref and |why| ("reason" or "reason: detail") and
 * returns FX_EAUTH. |fmt| may be NULL for no detail. */
static int refuse(fx_auth_refusal *pref, char *why, size_t whylen, fx_auth_refusal r,
                  const char *fmt, ...)
{
    if (pref)
        *pref = r;
    if (!why || whylen == 0)
        return FX_EAUTH;
    int n = snprintf(why, whylen, "%s", refusal_text[r]);
    if (fmt && n >= 0 && (size_t)n + 2 < whylen) {
        memcpy(why + n, ": ", 3);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + n + 2, whylen - (size_t)n - 2, fmt, ap);
        va_end(ap);
    }
    return FX_EAUTH;
}

/* ======================================================================== */
/* Base64url (RFC 4648 §5, unpadded, as JWS requires)                      */
/* ======================================================================== */

/* Decodes canonical base64url into a new NUL-terminated heap buffer. */
static int b64url_decode_alloc(const char *s, size_t n, uint8_t **pbuf, size_t *plen)
{
    size_t room = FX_BASE64_DECODE_ROOM(n);
    uint8_t *buf = malloc(room + 1);
    if (!buf)
        return -ENOMEM;
    int rv = fx_base64_decode(s, n, FX_BASE64_URL, buf, room, plen);
    if (rv < 0) {
        free(buf);
        return rv;
    }
    buf[*plen] = '\0';
    *pbuf = buf;
    return 0;
}

/* ======================================================================== */
/* Key sets                                                                 */
/* ======================================================================== */

typedef struct fx_key {
    bool has_kid;
    char kid[FX_AUTH_KID_MAX + 1];
    uint8_t pub[FX_AUTH_KEY_BYTES];
} fx_key;

struct fx_keyset {
    atomic_size_t refs;
    size_t nkeys;
    size_t skipped;
    fx_key keys[];
};

fx_keyset *fx_auth_keyset_ref(fx_keyset *ks)
{
    if (ks)
        atomic_fetch_add_explicit(&ks->refs, 1, memory_order_relaxed);
    return ks;
}

void fx_auth_keyset_unref(fx_keyset *ks)
{
    if (!ks)
        return;
    /* acq_rel: the freeing thread must see every holder's last use. */
    if (atomic_fetch_sub_explicit(&ks->refs, 1, memory_order_acq_rel) == 1)
        free(ks);
}

size_t fx_auth_keyset_count(const fx_keyset *ks)
{
    return ks ? ks->nkeys : 0;
}

size_t fx_auth_keyset_skipped(const fx_keyset *ks)
{
    return ks ? ks->skipped : 0;
}

bool fx_auth_keyset_find(const fx_keyset *ks, const char *kid, uint8_t pub[FX_AUTH_KEY_BYTES])
{
    if (!ks || ks->nkeys == 0)
        return false;
    if (!kid) {
        if (ks->nkeys != 1)
            return false;
        memcpy(pub, ks->keys[0].pub, FX_AUTH_KEY_BYTES);
        return true;
    }
    for (size_t i = 0; i < ks->nkeys; i++) {
        if (ks->keys[i].has_kid && strcmp(ks->keys[i].kid, kid) == 0) {
            memcpy(pub, ks->keys[i].pub, FX_AUTH_KEY_BYTES);
            return true;
        }
    }
    return false;
}

/* A JWK member that must be absent or equal |want| for the key to be one of
 * ours; true if it fits. */
static bool member_fits(json_t *jwk, const char *name, const char *want)
{
    json_t *v = json_object_get(jwk, name);
    if (!v)
        return true;
    return json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

static bool is_ed25519_jwk(json_t *jwk)
{
    json_t *kty = json_object_get(jwk, "kty");
    json_t *crv = json_object_get(jwk, "crv");
    return json_is_string(kty) && strcmp(json_string_value(kty), "OKP") == 0 &&
           json_is_string(crv) && strcmp(json_string_value(crv), "Ed25519") == 0 &&
           member_fits(jwk, "use", "sig") && member_fits(jwk, "alg", "EdDSA");
}

static bool kid_taken(const fx_keyset *ks, const fx_key *k)
{
    for (size_t i = 0; i < ks->nkeys; i++) {
        const fx_key *o = &ks->keys[i];
        if (o->has_kid == k->has_kid && (!k->has_kid || strcmp(o->kid, k->kid) == 0))
            return true;
    }
    return false;
}

/* Adds JWK |jwk| (entry |idx| of document |name|) to |ks|, or counts it as
 * skipped when it is not an Ed25519 signing key. Returns 0 or FX_ECONFIG. */
static int add_jwk(fx_keyset *ks, json_t *jwk, size_t idx, const char *name, char *why,
                   size_t whylen)
{
    if (!json_is_object(jwk)) {
        say(why, whylen, "jwks %s: key %zu is not a JSON object", name, idx);
        return FX_ECONFIG;
    }
    if (!is_ed25519_jwk(jwk)) {
        ks->skipped++;
        return 0;
    }
    fx_key *k = &ks->keys[ks->nkeys];
    memset(k, 0, sizeof(*k));
    const char *x = json_string_value(json_object_get(jwk, "x"));
    if (!x || strlen(x) != KEY_B64_CHARS ||
        !fx_base64_is_canonical(x, KEY_B64_CHARS, FX_BASE64_URL)) {
        say(why, whylen, "jwks %s: key %zu: \"x\" is not a base64url 32-byte Ed25519 key", name,
            idx);
        return FX_ECONFIG;
    }
    uint8_t tmp[FX_BASE64_DECODE_ROOM(KEY_B64_CHARS)];
    size_t n = 0;
    if (fx_base64_decode(x, KEY_B64_CHARS, FX_BASE64_URL, tmp, sizeof(tmp), &n) != 0 ||
        n != FX_AUTH_KEY_BYTES) {
        say(why, whylen, "jwks %s: key %zu: \"x\" decodes to %zu bytes, not 32", name, idx, n);
        return FX_ECONFIG;
    }
    memcpy(k->pub, tmp, FX_AUTH_KEY_BYTES);
    json_t *kid = json_object_get(jwk, "kid");
    if (kid) {
        size_t kn = json_string_length(kid);
        if (!json_is_string(kid) || kn == 0 || kn > FX_AUTH_KID_MAX ||
            strlen(json_string_value(kid)) != kn) {
            say(why, whylen, "jwks %s: key %zu: \"kid\" is not a string of 1..%u bytes", name, idx,
                FX_AUTH_KID_MAX);
            return FX_ECONFIG;
        }
        k->has_kid = true;
        memcpy(k->kid, json_string_value(kid), kn + 1);
    }
    if (kid_taken(ks, k)) {
        say(why, whylen, "jwks %s: key %zu: kid \"%s\" is used by another key", name, idx,
            k->has_kid ? k->kid : "(none)");
        return FX_ECONFIG;
    }
    ks->nkeys++;
    return 0;
}

/* Returns the "keys" array of JWKS document |root|, or NULL. */
static json_t *jwks_keys(json_t *root)
{
    return json_is_object(root) ? json_object_get(root, "keys") : NULL;
}

int fx_auth_keyset_parse(const char *json, size_t len, const char *name, fx_keyset **pks, char *why,
                         size_t whylen)
{
    if (!json || !pks)
        return -EINVAL;
    *pks = NULL;
    name = name ? name : "(memory)";
    if (len > FX_AUTH_JWKS_MAX_BYTES) {
        say(why, whylen, "jwks %s: larger than %u bytes", name, FX_AUTH_JWKS_MAX_BYTES);
        return FX_ECONFIG;
    }
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        say(why, whylen, "jwks %s: invalid JSON at line %d: %s", name, jerr.line, jerr.text);
        return FX_ECONFIG;
    }
    int rv = FX_ECONFIG;
    json_t *keys = jwks_keys(root);
    size_t n = json_array_size(keys);
    if (!json_is_array(keys)) {
        say(why, whylen, "jwks %s: not a JWKS document (expected {\"keys\":[...]})", name);
        goto out_root;
    }
    if (n > FX_AUTH_JWKS_MAX_KEYS) {
        say(why, whylen, "jwks %s: %zu keys, more than %u", name, n, FX_AUTH_JWKS_MAX_KEYS);
        goto out_root;
    }
    fx_keyset *ks = calloc(1, sizeof(*ks) + (n ? n : 1) * sizeof(fx_key));
    if (!ks) {
        rv = -ENOMEM;
        goto out_root;
    }
    atomic_init(&ks->refs, 1);
    for (size_t i = 0; i < n; i++) {
        rv = add_jwk(ks, json_array_get(keys, i), i, name, why, whylen);
        if (rv < 0)
            goto err_free;
    }
    if (ks->nkeys == 0) {
        say(why, whylen, "jwks %s: no usable Ed25519 key (%zu keys of other types skipped)", name,
            ks->skipped);
        rv = FX_ECONFIG;
        goto err_free;
    }
    if (ks->skipped > 0)
        FX_LOG_WARN("auth", "jwks=%s skipped=%zu keys that are not Ed25519 signing keys", name,
                    ks->skipped);
    *pks = ks;
    rv = 0;
    goto out_root;
err_free:
    free(ks);
out_root:
    json_decref(root);
    return rv;
}

int fx_auth_keyset_load(const char *path, fx_keyset **pks, char *why, size_t whylen)
{
    if (!path || !pks)
        return -EINVAL;
    *pks = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int rv = -errno;
        say(why, whylen, "jwks %s: %s", path, strerror(-rv));
        return rv;
    }
    int rv;
    /* One byte more than the limit tells "too large" from "exactly at it". */
    char *buf = malloc(FX_AUTH_JWKS_MAX_BYTES + 1);
    if (!buf) {
        rv = -ENOMEM;
        goto out_close;
    }
    size_t n = fread(buf, 1, FX_AUTH_JWKS_MAX_BYTES + 1, f);
    if (ferror(f)) {
        say(why, whylen, "jwks %s: read error", path);
        rv = -EIO;
    } else if (n > FX_AUTH_JWKS_MAX_BYTES) {
        say(why, whylen, "jwks %s: larger than %u bytes", path, FX_AUTH_JWKS_MAX_BYTES);
        rv = FX_ECONFIG;
    } else {
        rv = fx_auth_keyset_parse(buf, n, path, pks, why, whylen);
    }
    free(buf);
out_close:
    fclose(f);
    return rv;
}

/* ======================================================================== */
/* Key slot: the current set, swapped on reload                             */
/* ======================================================================== */

int fx_auth_keyslot_init(fx_auth_keyslot *slot, fx_keyset *ks)
{
    int rv = pthread_mutex_init(&slot->mu, NULL);
    if (rv != 0)
        return -rv;
    slot->ks = ks;
    return 0;
}

void fx_auth_keyslot_deinit(fx_auth_keyslot *slot)
{
    fx_auth_keyset_unref(slot->ks);
    slot->ks = NULL;
    pthread_mutex_destroy(&slot->mu);
}

fx_keyset *fx_auth_keyslot_get(fx_auth_keyslot *slot)
{
    /* The lock makes "read the pointer, take a reference" one step, so a
     * concurrent swap cannot free the set in between. */
    pthread_mutex_lock(&slot->mu);
    fx_keyset *ks = fx_auth_keyset_ref(slot->ks);
    pthread_mutex_unlock(&slot->mu);
    return ks;
}

void fx_auth_keyslot_swap(fx_auth_keyslot *slot, fx_keyset *ks)
{
    pthread_mutex_lock(&slot->mu);
    fx_keyset *old = slot->ks;
    slot->ks = ks;
    pthread_mutex_unlock(&slot->mu);
    fx_auth_keyset_unref(old);
}

/* ======================================================================== */
/* JWS verification                                                         */
/* ======================================================================== */

typedef struct jws_parts {
    const char *hdr, *pay, *sig;
    size_t hdr_len, pay_len, sig_len;
} jws_parts;

/* Splits |t| into three dot-separated parts; false unless there are exactly
 * three and each is canonical base64url. */
static bool split_compact(const char *t, size_t len, jws_parts *jp)
{
    const char *end = t + len;
    const char *d1 = memchr(t, '.', len);
    if (!d1)
        return false;
    const char *d2 = memchr(d1 + 1, '.', (size_t)(end - d1 - 1));
    if (!d2 || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)))
        return false;
    *jp = (jws_parts){
        .hdr = t,
        .hdr_len = (size_t)(d1 - t),
        .pay = d1 + 1,
        .pay_len = (size_t)(d2 - d1 - 1),
        .sig = d2 + 1,
        .sig_len = (size_t)(end - d2 - 1),
    };
    return fx_base64_is_canonical(jp->hdr, jp->hdr_len, FX_BASE64_URL) &&
           fx_base64_is_canonical(jp->pay, jp->pay_len, FX_BASE64_URL) &&
           fx_base64_is_canonical(jp->sig, jp->sig_len, FX_BASE64_URL);
}

/* What the protected header told us. */
typedef struct jws_header {
    bool has_kid;
    char kid[FX_AUTH_KID_MAX + 1];
} jws_header;

/* Checks the decoded header object |h|: alg, typ, crit, kid. */
static int check_header_fields(json_t *h, jws_header *out, fx_auth_refusal *pref, char *why,
                               size_t whylen)
{
    json_t *alg = json_object_get(h, "alg");
    if (!json_is_string(alg))
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "header has no alg");
    if (strcmp(json_string_value(alg), "EdDSA") != 0)
        return refuse(pref, why, whylen, FX_AUTH_BAD_ALG, "\"%.*s\" (only EdDSA is accepted)",
                      QUOTE_MAX, json_string_value(alg));
    json_t *typ = json_object_get(h, "typ");
    if (typ && (!json_is_string(typ) || strcasecmp(json_string_value(typ), "JWT") != 0))
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "typ is not JWT");
    /* RFC 7515 §4.1.11: extensions we do not understand must be refused. */
    if (json_object_get(h, "crit"))
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "crit header is not supported");
    json_t *kid = json_object_get(h, "kid");
    if (!kid)
        return 0;
    size_t kn = json_string_length(kid);
    if (!json_is_string(kid) || kn > FX_AUTH_KID_MAX || strlen(json_string_value(kid)) != kn)
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "kid is not a string of <= %u bytes",
                      FX_AUTH_KID_MAX);
    out->has_kid = true;
    memcpy(out->kid, json_string_value(kid), kn + 1);
    return 0;
}

static int check_header(const jws_parts *jp, jws_header *out, fx_auth_refusal *pref, char *why,
                        size_t whylen)
{
    uint8_t *buf;
    size_t n;
    int rv = b64url_decode_alloc(jp->hdr, jp->hdr_len, &buf, &n);
    if (rv < 0)
        return rv;
    json_error_t jerr;
    json_t *h = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (!json_is_object(h)) {
        json_decref(h);
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "header is not a JSON object");
    }
    memset(out, 0, sizeof(*out));
    rv = check_header_fields(h, out, pref, why, whylen);
    json_decref(h);
    return rv;
}

#ifdef FX_AUTH_FUZZ_SKIP_SIGNATURE
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#error "FX_AUTH_FUZZ_SKIP_SIGNATURE belongs to the fuzz build (tests/fuzz/fuzz.cmake) only"
#endif
/* Fuzz build only: random input never carries a valid Ed25519 signature, so
 * without this the fuzzer could not reach the payload and the claim checks
 * behind the signature. Every check before it (size, shape, header, key,
 * signature length) still runs. */
static bool signature_ok(const uint8_t *pub, size_t len, const uint8_t *msg, const uint8_t *sig)
{
    (void)pub, (void)len, (void)msg, (void)sig;
    return true;
}
#else
static bool signature_ok(const uint8_t *pub, size_t len, const uint8_t *msg, const uint8_t *sig)
{
    return ed25519_sha512_verify(pub, len, msg, sig) != 0;
}
#endif

/* Picks the verification key for |hd| from |ks| into |pub|. */
static int select_key(const fx_keyset *ks, const jws_header *hd, uint8_t *pub,
                      fx_auth_refusal *pref, char *why, size_t whylen)
{
    if (!ks)
        return refuse(pref, why, whylen, FX_AUTH_NO_KEYS, NULL);
    if (fx_auth_keyset_find(ks, hd->has_kid ? hd->kid : NULL, pub))
        return 0;
    if (hd->has_kid)
        return refuse(pref, why, whylen, FX_AUTH_UNKNOWN_KID, "\"%.*s\"", QUOTE_MAX, hd->kid);
    return refuse(pref, why, whylen, FX_AUTH_MISSING_KID,
                  "token has no kid and the key set holds %zu keys", ks->nkeys);
}

/* Everything fx_auth_jws_verify() does, also returning the header. */
static int jws_verify(const fx_keyset *ks, const char *token, size_t len, size_t max,
                      jws_header *hd, uint8_t **ppayload, size_t *ppayload_len,
                      fx_auth_refusal *pref, char *why, size_t whylen)
{
    if (max == 0)
        max = FX_AUTH_TOKEN_MAX_DEFAULT;
    if (len > max)
        return refuse(pref, why, whylen, FX_AUTH_TOO_LARGE, "%zu bytes, the limit is %zu", len,
                      max);
    jws_parts jp;
    if (!split_compact(token, len, &jp))
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED,
                      "expected three unpadded base64url parts separated by dots");
    int rv = check_header(&jp, hd, pref, why, whylen);
    if (rv != 0)
        return rv;
    uint8_t pub[FX_AUTH_KEY_BYTES];
    rv = select_key(ks, hd, pub, pref, why, whylen);
    if (rv != 0)
        return rv;
    uint8_t sig[FX_BASE64_DECODE_ROOM(SIG_B64_CHARS)];
    size_t sig_len = 0;
    if (jp.sig_len != SIG_B64_CHARS ||
        fx_base64_decode(jp.sig, jp.sig_len, FX_BASE64_URL, sig, sizeof(sig), &sig_len) != 0 ||
        sig_len != FX_AUTH_SIG_BYTES)
        return refuse(pref, why, whylen, FX_AUTH_MALFORMED, "signature is not 64 bytes");
    /* The signing input is the token's own text up to the second dot. */
    if (!signature_ok(pub, jp.hdr_len + 1 + jp.pay_len, (const uint8_t *)token, sig))
        return refuse(pref, why, whylen, FX_AUTH_BAD_SIGNATURE, NULL);
    return b64url_decode_alloc(jp.pay, jp.pay_len, ppayload, ppayload_len);
}

int fx_auth_jws_verify(const fx_keyset *ks, const char *token, size_t len, size_t max_token_bytes,
                       uint8_t **ppayload, size_t *ppayload_len, fx_auth_refusal *prefusal,
                       char *why, size_t whylen)
{
    if (!token || !ppayload || !ppayload_len)
        return -EINVAL;
    *ppayload = NULL;
    *ppayload_len = 0;
    if (prefusal)
        *prefusal = FX_AUTH_OK;
    jws_header hd;
    return jws_verify(ks, token, len, max_token_bytes, &hd, ppayload, ppayload_len, prefusal, why,
                      whylen);
}

/* ======================================================================== */
/* Claims                                                                   */
/* ======================================================================== */

/* Reads NumericDate claim |name|: 1 present (in *v), 0 absent, -1 not a
 * number in range. A fractional value is rounded down. */
static int get_time(json_t *cl, const char *name, int64_t *v)
{
    json_t *j = json_object_get(cl, name);
    if (!j)
        return 0;
    if (json_is_integer(j)) {
        *v = (int64_t)json_integer_value(j);
        return 1;
    }
    if (!json_is_real(j))
        return -1;
    /* 2^62 bounds the cast (NaN fails both tests). */
    double d = json_real_value(j);
    if (!(d > -4611686018427387904.0 && d < 4611686018427387904.0))
        return -1;
    int64_t t = (int64_t)d; /* truncates toward zero: step down for negatives */
    *v = (double)t > d ? t - 1 : t;
    return 1;
}

static bool aud_contains(json_t *aud, const char *want)
{
    if (json_is_string(aud))
        return strcmp(json_string_value(aud), want) == 0;
    size_t i;
    json_t *v;
    json_array_foreach(aud, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
            return true;
    }
    return false;
}

static int check_iss_aud(json_t *cl, const fx_auth_policy *p, fx_auth_claims *out, char *why,
                         size_t whylen)
{
    const char *iss = p->issuer ? p->issuer : FX_AUTH_ISSUER_DEFAULT;
    const char *aud = p->audience ? p->audience : FX_AUTH_AUDIENCE_DEFAULT;
    json_t *j = json_object_get(cl, "iss");
    if (!json_is_string(j) || strcmp(json_string_value(j), iss) != 0)
        return refuse(&out->refusal, why, whylen, FX_AUTH_WRONG_ISSUER, "expected \"%s\"", iss);
    if (!aud_contains(json_object_get(cl, "aud"), aud))
        return refuse(&out->refusal, why, whylen, FX_AUTH_WRONG_AUDIENCE, "expected \"%s\"", aud);
    return 0;
}

static int check_times(json_t *cl, int64_t leeway, int64_t now, fx_auth_claims *out, char *why,
                       size_t whylen)
{
    fx_auth_refusal *pr = &out->refusal;
    int has = get_time(cl, "exp", &out->exp);
    if (has == 0)
        return refuse(pr, why, whylen, FX_AUTH_MISSING_EXP, NULL);
    if (has < 0)
        return refuse(pr, why, whylen, FX_AUTH_MALFORMED, "exp is not a number");
    /* Written so that no sum can overflow: exp + leeway < now. */
    if (out->exp <= INT64_MAX - leeway && now > out->exp + leeway)
        return refuse(pr, why, whylen, FX_AUTH_EXPIRED, "exp %lld, now %lld, leeway %llds",
                      (long long)out->exp, (long long)now, (long long)leeway);
    has = get_time(cl, "nbf", &out->nbf);
    if (has < 0)
        return refuse(pr, why, whylen, FX_AUTH_MALFORMED, "nbf is not a number");
    out->has_nbf = has > 0;
    if (out->has_nbf && out->nbf >= INT64_MIN + leeway && now < out->nbf - leeway)
        return refuse(pr, why, whylen, FX_AUTH_NOT_YET_VALID, "nbf %lld, now %lld, leeway %llds",
                      (long long)out->nbf, (long long)now, (long long)leeway);
    has = get_time(cl, "iat", &out->iat);
    if (has < 0)
        return refuse(pr, why, whylen, FX_AUTH_MALFORMED, "iat is not a number");
    out->has_iat = has > 0;
    return 0;
}

/* Copies string claim |j| (which must hold no NUL byte) into *dst. Returns 0,
 * 1 when |j| is not such a string, -ENOMEM. */
static int copy_string(json_t *j, char **dst)
{
    if (!json_is_string(j) || strlen(json_string_value(j)) != json_string_length(j))
        return 1;
    *dst = strdup(json_string_value(j));
    return *dst ? 0 : -ENOMEM;
}

static int copy_identity(json_t *cl, fx_auth_claims *out, char *why, size_t whylen)
{
    int rv = copy_string(json_object_get(cl, "tid"), &out->tid);
    if (rv < 0)
        return rv;
    if (rv > 0 || out->tid[0] == '\0')
        return refuse(&out->refusal, why, whylen, FX_AUTH_MISSING_TID, NULL);
    json_t *sub = json_object_get(cl, "sub");
    if (!sub)
        return 0;
    rv = copy_string(sub, &out->sub);
    if (rv > 0)
        return refuse(&out->refusal, why, whylen, FX_AUTH_MALFORMED, "sub is not a string");
    return rv;
}

/* The actions the original's permission parser knows; a perm naming any
 * other refuses the token, as there. */
static const char *const known_actions[] = {
    "stream.publish", "stream.subscribe", "cache.read",    "cache.write",   "tenant.admin",
    "tenant.observe", "ns.manage",        "stream.manage", "group.consume", "group.manage",
};

static bool perm_is_valid(const char *perm)
{
    const char *colon = strchr(perm, ':');
    if (!colon)
        return false;
    size_t n = (size_t)(colon - perm);
    for (size_t i = 0; i < sizeof(known_actions) / sizeof(known_actions[0]); i++)
        if (strlen(known_actions[i]) == n && memcmp(known_actions[i], perm, n) == 0)
            return true;
    return false;
}

static int copy_perms(json_t *cl, fx_auth_claims *out, char *why, size_t whylen)
{
    json_t *perms = json_object_get(cl, "perms");
    if (!perms)
        return 0;
    if (!json_is_array(perms))
        return refuse(&out->refusal, why, whylen, FX_AUTH_BAD_PERMS, "not an array");
    size_t n = json_array_size(perms);
    out->perms = calloc(n ? n : 1, sizeof(char *));
    if (!out->perms)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rv = copy_string(json_array_get(perms, i), &out->perms[i]);
        if (rv < 0)
            return rv;
        if (rv > 0)
            return refuse(&out->refusal, why, whylen, FX_AUTH_BAD_PERMS,
                          "entry %zu is not a string", i);
        out->nperms++;
        if (!perm_is_valid(out->perms[i]))
            return refuse(&out->refusal, why, whylen, FX_AUTH_BAD_PERMS,
                          "\"%.*s\" is not action:resource with a known action", QUOTE_MAX,
                          out->perms[i]);
    }
    return 0;
}

static int check_claims(const char *payload, size_t len, const fx_auth_policy *p, int64_t now,
                        fx_auth_claims *out, char *why, size_t whylen)
{
    json_error_t jerr;
    json_t *cl = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    int rv;
    if (!json_is_object(cl)) {
        rv = refuse(&out->refusal, why, whylen, FX_AUTH_MALFORMED, "payload is not a JSON object");
        goto out;
    }
    rv = check_iss_aud(cl, p, out, why, whylen);
    if (rv == 0)
        rv = check_times(cl, p->leeway_s, now, out, why, whylen);
    if (rv == 0)
        rv = copy_identity(cl, out, why, whylen);
    if (rv == 0)
        rv = copy_perms(cl, out, why, whylen);
out:
    json_decref(cl);
    return rv;
}

void fx_auth_claims_deinit(fx_auth_claims *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nperms; i++)
        free(c->perms[i]);
    free(c->perms);
    free(c->tid);
    free(c->sub);
    free(c->kid);
    memset(c, 0, sizeof(*c));
}

int fx_auth_verify(const fx_keyset *ks, const char *token, size_t len, const fx_auth_policy *p,
                   int64_t now_s, fx_auth_claims *out, char *why, size_t whylen)
{
    if (!token || !out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    const fx_auth_policy def = FX_AUTH_POLICY_INIT;
    if (!p)
        p = &def;
    if (p->leeway_s < 0)
        return -EINVAL;
    jws_header hd;
    uint8_t *payload = NULL;
    size_t plen = 0;
    int rv = jws_verify(ks, token, len, p->max_token_bytes, &hd, &payload, &plen, &out->refusal,
                        why, whylen);
    if (rv != 0)
        return rv;
    rv = check_claims((const char *)payload, plen, p, now_s, out, why, whylen);
    free(payload);
    if (rv == 0 && hd.has_kid && !(out->kid = strdup(hd.kid)))
        rv = -ENOMEM;
    if (rv != 0) {
        fx_auth_refusal r = out->refusal;
        fx_auth_claims_deinit(out);
        out->refusal = rv == FX_EAUTH ? r : FX_AUTH_OK;
    }
    return rv;
}

int fx_auth_check_tenant(const fx_auth_claims *c, const char *tenant, char *why, size_t whylen)
{
    if (c && c->tid && tenant && strcmp(c->tid, tenant) == 0)
        return 0;
    return refuse(NULL, why, whylen, FX_AUTH_WRONG_TENANT,
                  "token is for tenant \"%.*s\", the client asked for \"%.*s\"", QUOTE_MAX,
                  c && c->tid ? c->tid : "", QUOTE_MAX, tenant ? tenant : "");
}

/* ======================================================================== */
/* Permission matching                                                      */
/* ======================================================================== */

/* The resource "stream:<tenant>/<ns>/<stream>" as pieces, so matching needs
 * no allocation and no length limit. */
typedef struct resource {
    const char *piece[6];
    size_t len[6];
    size_t total;
} resource;

static void resource_init(resource *r, const char *kind, const char *tenant, const char *ns,
                          const char *stream)
{
    const char *p[6] = {kind, tenant, "/", ns, "/", stream};
    r->total = 0;
    for (int i = 0; i < 6; i++) {
        r->piece[i] = p[i];
        r->len[i] = strlen(p[i]);
        r->total += r->len[i];
    }
}

static char resource_at(const resource *r, size_t i)
{
    for (int k = 0; k < 6; k++) {
        if (i < r->len[k])
            return r->piece[k][i];
        i -= r->len[k];
    }
    return '\0'; /* not reached: callers stay below r->total */
}

/* Glob match of |pat| against |r|: '*' matches any run of bytes (empty
 * included), anything else itself. Backtracks only to the latest '*', which
 * is enough for this grammar and keeps the cost at O(|pat| * |r|). */
static bool glob_match(const char *pat, const resource *r)
{
    size_t p = 0, v = 0, plen = strlen(pat);
    size_t star = SIZE_MAX, resume = 0;
    while (v < r->total) {
        if (p < plen && pat[p] == '*') {
            star = p++;
            resume = v;
        } else if (p < plen && pat[p] == resource_at(r, v)) {
            p++;
            v++;
        } else if (star != SIZE_MAX) {
            p = star + 1;
            v = ++resume;
        } else {
            return false;
        }
    }
    while (p < plen && pat[p] == '*')
        p++;
    return p == plen;
}

/* The perm verbs that grant |action|: its own, then the stream action that
 * implies it (the original: stream.subscribe implies group.consume,
 * stream.manage implies group.manage); NULL-terminated. */
static const char *const *verbs_of(fx_auth_action action)
{
    static const char *const publish[] = {"stream.publish:", NULL};
    static const char *const subscribe[] = {"stream.subscribe:", NULL};
    static const char *const consume[] = {"group.consume:", "stream.subscribe:", NULL};
    static const char *const manage[] = {"group.manage:", "stream.manage:", NULL};
    static const char *const cread[] = {"cache.read:", NULL};
    static const char *const cwrite[] = {"cache.write:", NULL};
    switch (action) {
    case FX_AUTH_PUBLISH:
        return publish;
    case FX_AUTH_SUBSCRIBE:
        return subscribe;
    case FX_AUTH_GROUP_CONSUME:
        return consume;
    case FX_AUTH_GROUP_MANAGE:
        return manage;
    case FX_AUTH_CACHE_READ:
        return cread;
    case FX_AUTH_CACHE_WRITE:
        return cwrite;
    default:
        return NULL;
    }
}

bool fx_auth_allows(const fx_auth_claims *c, fx_auth_action action, const char *tenant,
                    const char *ns, const char *stream)
{
    if (!c || !c->tid || !tenant || !ns || !stream || strcmp(c->tid, tenant) != 0)
        return false;
    const char *const *verbs = verbs_of(action);
    if (verbs == NULL)
        return false;
    resource r;
    bool cache = action == FX_AUTH_CACHE_READ || action == FX_AUTH_CACHE_WRITE;
    resource_init(&r, cache ? "cache:" : "stream:", tenant, ns, stream);
    for (size_t i = 0; i < c->nperms; i++) {
        for (const char *const *v = verbs; *v != NULL; v++) {
            size_t vn = strlen(*v);
            if (strncmp(c->perms[i], *v, vn) == 0 && glob_match(c->perms[i] + vn, &r))
                return true;
        }
    }
    return false;
}
