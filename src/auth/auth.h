/* libauth: token authentication for the broker (auth_mode "jwt"): Ed25519
 * public keys from a JWKS file, verification of compact EdDSA JWTs (signature,
 * iss, aud, exp/nbf with leeway, tid, perms) and the publish/subscribe
 * permission check. Also mints key pairs and tokens for tests and the `felix
 * token` CLI, which links libauth and libfelix only (no broker code).
 * Pure: no sockets, no loops; callers pass `now`. Key sets are immutable and
 * shared between threads by reference count; the rest is any thread. */
#ifndef FX_AUTH_AUTH_H
#define FX_AUTH_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FX_AUTH_ISSUER_DEFAULT "felix-auth"
#define FX_AUTH_AUDIENCE_DEFAULT "felix-broker"
#define FX_AUTH_LEEWAY_DEFAULT_S 60
/* Longest token accepted; checked before any decoding. */
#define FX_AUTH_TOKEN_MAX_DEFAULT 8192u
/* Bounds on a JWKS file: its size, its keys and a key id's length. */
#define FX_AUTH_JWKS_MAX_BYTES (1u << 20)
#define FX_AUTH_JWKS_MAX_KEYS 256u
#define FX_AUTH_KID_MAX 128u
/* Ed25519 key and signature sizes. */
#define FX_AUTH_KEY_BYTES 32u
#define FX_AUTH_SIG_BYTES 64u

/* An immutable set of Ed25519 verification keys loaded from one JWKS
 * document. Reference counted: whoever holds a reference may use it from any
 * thread; the last fx_auth_keyset_unref() frees it. */
typedef struct fx_keyset fx_keyset;

/* The actions fx_auth_allows() checks. */
typedef enum fx_auth_action {
    FX_AUTH_PUBLISH,       /* perm action "stream.publish" */
    FX_AUTH_SUBSCRIBE,     /* perm action "stream.subscribe" */
    FX_AUTH_GROUP_CONSUME, /* "group.consume", implied by "stream.subscribe" */
    FX_AUTH_GROUP_MANAGE,  /* "group.manage", implied by "stream.manage" */
    FX_AUTH_CACHE_READ,    /* "cache.read" on "cache:<tenant>/<ns>/<cache>" */
    FX_AUTH_CACHE_WRITE,   /* "cache.write" on "cache:<tenant>/<ns>/<cache>" */
} fx_auth_action;

/* Why a token was refused; fx_auth_refusal_str() gives the reason text that
 * starts |why|, fx_auth_refusal_label() a metric label. Values are stable. */
typedef enum fx_auth_refusal {
    FX_AUTH_OK = 0,
    FX_AUTH_TOO_LARGE,      /* "token too large" */
    FX_AUTH_MALFORMED,      /* "malformed token" */
    FX_AUTH_BAD_ALG,        /* "unsupported alg" */
    FX_AUTH_NO_KEYS,        /* "no keys loaded" */
    FX_AUTH_UNKNOWN_KID,    /* "unknown key id" */
    FX_AUTH_MISSING_KID,    /* "missing key id" */
    FX_AUTH_BAD_SIGNATURE,  /* "bad signature" */
    FX_AUTH_WRONG_ISSUER,   /* "wrong issuer" */
    FX_AUTH_WRONG_AUDIENCE, /* "wrong audience" */
    FX_AUTH_MISSING_EXP,    /* "missing exp claim" */
    FX_AUTH_EXPIRED,        /* "token expired" */
    FX_AUTH_NOT_YET_VALID,  /* "token not yet valid" */
    FX_AUTH_MISSING_TID,    /* "missing tid claim" */
    FX_AUTH_BAD_PERMS,      /* "invalid perms claim" */
    FX_AUTH_WRONG_TENANT,   /* "wrong tenant" */
    FX_AUTH_REFUSAL_COUNT,
} fx_auth_refusal;

/* Returns the static reason text of |r| ("token expired"), "ok" for
 * FX_AUTH_OK, or "?" when out of range. Any thread. */
const char *fx_auth_refusal_str(fx_auth_refusal r);

/* Returns a static snake_case label of |r| ("expired", "bad_signature") for
 * a metric such as felix_auth_refused_total{reason=...}; "?" when out of
 * range. Any thread. */
const char *fx_auth_refusal_label(fx_auth_refusal r);

/* What fx_auth_verify() checks the claims against. A NULL issuer or
 * audience means the default; max_token_bytes 0 means
 * FX_AUTH_TOKEN_MAX_DEFAULT. leeway_s must be >= 0. */
typedef struct fx_auth_policy {
    const char *issuer;
    const char *audience;
    int64_t leeway_s;
    size_t max_token_bytes;
} fx_auth_policy;

#define FX_AUTH_POLICY_INIT                                                                        \
    {                                                                                              \
        .issuer = FX_AUTH_ISSUER_DEFAULT, .audience = FX_AUTH_AUDIENCE_DEFAULT,                    \
        .leeway_s = FX_AUTH_LEEWAY_DEFAULT_S, .max_token_bytes = FX_AUTH_TOKEN_MAX_DEFAULT,        \
    }

/* The claims of a verified token. Filled by fx_auth_verify(), released with
 * fx_auth_claims_deinit(). Strings are NUL-terminated heap copies owned by
 * the struct; |sub| and |kid| are NULL when absent. Each entry of |perms| is
 * a full permission string "action:resource-pattern". |refusal| is
 * FX_AUTH_OK after a success and names the reason after a refusal (every
 * other field is then zero/NULL). */
typedef struct fx_auth_claims {
    char *tid;
    char *sub;
    char *kid;
    int64_t exp;
    int64_t nbf; /* valid when has_nbf */
    int64_t iat; /* valid when has_iat */
    bool has_nbf;
    bool has_iat;
    char **perms;
    size_t nperms;
    fx_auth_refusal refusal;
} fx_auth_claims;

/* Frees what |c| owns and zeroes it. NULL or a zeroed struct is fine. */
void fx_auth_claims_deinit(fx_auth_claims *c);

/* ---- key sets ------------------------------------------------------------ */

/* Parses a JWKS document |json| of |len| bytes into a new key set (*pks,
 * one reference owned by the caller). |name| (a file name, or any label)
 * appears in error messages. Keys whose kty is not "OKP", crv not "Ed25519",
 * "use" not "sig" or "alg" not "EdDSA" are skipped, logged as a warning and
 * counted (fx_auth_keyset_skipped()). An Ed25519 key with a missing or bad
 * "x", a non-string or over-long "kid", or a kid used twice (two keys
 * without a kid count as the same kid) refuses the document.
 * Returns 0; FX_ECONFIG with |why| naming |name| when the document is not a
 * JWKS, holds no usable Ed25519 key, exceeds FX_AUTH_JWKS_MAX_BYTES or
 * FX_AUTH_JWKS_MAX_KEYS keys; -ENOMEM. |why| (may be NULL) gets a one-line
 * reason. Any thread. */
int fx_auth_keyset_parse(const char *json, size_t len, const char *name, fx_keyset **pks, char *why,
                         size_t whylen);

/* Reads the JWKS file |path| and parses it as fx_auth_keyset_parse() does.
 * Returns 0, a negative errno when the file cannot be read (|why| names the
 * file), or the errors of fx_auth_keyset_parse(). Blocking file I/O: main
 * thread (start-up, SIGHUP), never a loop. */
int fx_auth_keyset_load(const char *path, fx_keyset **pks, char *why, size_t whylen);

/* Adds a reference to |ks| and returns it (NULL stays NULL). Any thread. */
fx_keyset *fx_auth_keyset_ref(fx_keyset *ks);

/* Drops a reference; the last one frees the set. NULL does nothing. Any
 * thread. */
void fx_auth_keyset_unref(fx_keyset *ks);

/* Returns the number of usable Ed25519 keys in |ks| (>= 1). */
size_t fx_auth_keyset_count(const fx_keyset *ks);

/* Returns the number of keys of other types that were skipped. */
size_t fx_auth_keyset_skipped(const fx_keyset *ks);

/* Copies the public key whose key id is |kid| into |pub|; a NULL |kid|
 * selects the set's only key and finds nothing when it holds several.
 * Returns true if found. Any thread. */
bool fx_auth_keyset_find(const fx_keyset *ks, const char *kid, uint8_t pub[FX_AUTH_KEY_BYTES]);

/* A slot holding the current key set, swapped on reload (SIGHUP) while other
 * threads verify tokens. A reader takes its own reference with
 * fx_auth_keyslot_get(), so a verification in progress keeps the old set
 * alive after a swap. Caller-embedded; a short mutex guards the pointer. */
typedef struct fx_auth_keyslot {
    pthread_mutex_t mu;
    fx_keyset *ks;
} fx_auth_keyslot;

/* Initialises |slot| holding |ks| (may be NULL); takes ownership of the
 * caller's reference to |ks|. Returns 0 or a negative errno (then |ks| is
 * still the caller's). */
int fx_auth_keyslot_init(fx_auth_keyslot *slot, fx_keyset *ks);

/* Drops the slot's reference and destroys the mutex. No thread may use the
 * slot any more; references taken with _get stay valid. */
void fx_auth_keyslot_deinit(fx_auth_keyslot *slot);

/* Returns a new reference to the current set (release it with
 * fx_auth_keyset_unref()), or NULL when none is installed. Any thread. */
fx_keyset *fx_auth_keyslot_get(fx_auth_keyslot *slot);

/* Installs |ks| (takes ownership of the caller's reference; NULL empties
 * the slot) and drops the slot's reference to the previous set, which lives
 * on until its last holder lets go. Any thread. */
void fx_auth_keyslot_swap(fx_auth_keyslot *slot, fx_keyset *ks);

/* ---- verification -------------------------------------------------------- */

/* Verifies the compact JWS |token| (|len| bytes, no NUL needed) against
 * |ks| and returns its decoded payload in *ppayload (heap, NUL-terminated,
 * caller frees) and *ppayload_len. Checks, in order: |len| <=
 * |max_token_bytes| (0 = default) before any decoding; three unpadded
 * base64url parts; a JSON-object header with "alg":"EdDSA" (anything else,
 * "none" included, is refused), optional "typ" "JWT", optional string "kid",
 * no "crit"; the key chosen by kid (no kid: the set's only key, refused when
 * it holds several); a 64-byte signature over "header.payload" checked with
 * Ed25519. The payload is not interpreted.
 * Returns 0, or FX_EAUTH with *prefusal (may be NULL) set and |why| (may be
 * NULL) holding the reason text plus detail; -EINVAL for NULL |token|;
 * -ENOMEM. Any thread. */
int fx_auth_jws_verify(const fx_keyset *ks, const char *token, size_t len, size_t max_token_bytes,
                       uint8_t **ppayload, size_t *ppayload_len, fx_auth_refusal *prefusal,
                       char *why, size_t whylen);

/* Verifies the JWT |token| as fx_auth_jws_verify() does, then its claims
 * under |p| (NULL: defaults) at time |now_s| (Unix seconds): iss equal to the
 * issuer; aud (a string or an array of strings) containing the audience;
 * exp required, an integer, now_s <= exp + leeway; nbf optional, an integer,
 * now_s >= nbf - leeway; tid a non-empty string; perms absent or an array of
 * "action:resource" strings with a known action (stream.publish,
 * stream.subscribe, cache.read, cache.write, tenant.admin, tenant.observe,
 * ns.manage); sub optional string; iat optional integer. tid is returned,
 * not compared: use fx_auth_check_tenant().
 * On success fills |out| (the caller releases it with
 * fx_auth_claims_deinit()) and returns 0. On refusal returns FX_EAUTH,
 * zeroes |out| except out->refusal, and writes the reason to |why| (may be
 * NULL): it starts with fx_auth_refusal_str(out->refusal), optionally
 * followed by ": detail". Returns -EINVAL for a NULL |token| or |out| or a
 * negative leeway, -ENOMEM. Any thread (hold a reference on |ks|). */
int fx_auth_verify(const fx_keyset *ks, const char *token, size_t len, const fx_auth_policy *p,
                   int64_t now_s, fx_auth_claims *out, char *why, size_t whylen);

/* Compares the verified token's tid with |tenant|, the tenant the client
 * named in its auth message. Returns 0 when equal, else FX_EAUTH with |why|
 * "wrong tenant: ...". Any thread. */
int fx_auth_check_tenant(const fx_auth_claims *c, const char *tenant, char *why, size_t whylen);

/* Returns true if |c| permits |action| on stream |tenant|/|ns|/|stream|:
 * c->tid equals |tenant| and some perm "stream.publish:<pattern>" (or
 * "stream.subscribe:...") has a pattern matching the resource
 * "stream:<tenant>/<ns>/<stream>", where each '*' matches any run of bytes
 * (empty included, '/' included: a pattern "stream:t1/" plus a star covers
 * every stream of t1) and every other byte matches itself, case-sensitively.
 * The cache actions match "cache.read:" / "cache.write:" perms against
 * "cache:<tenant>/<ns>/<cache>" (|stream| names the cache). False for NULL
 * arguments. Allocates nothing. Any thread. */
bool fx_auth_allows(const fx_auth_claims *c, fx_auth_action action, const char *tenant,
                    const char *ns, const char *stream);

/* ---- minting ------------------------------------------------------------- */

/* Generates a random Ed25519 key pair (getrandom(2)): |priv| is the 32-byte
 * seed, |pub| the public key. Returns 0 or a negative errno. */
int fx_auth_keygen(uint8_t pub[FX_AUTH_KEY_BYTES], uint8_t priv[FX_AUTH_KEY_BYTES]);

/* Derives the public key |pub| of the 32-byte seed |priv|. */
void fx_auth_pubkey(const uint8_t priv[FX_AUTH_KEY_BYTES], uint8_t pub[FX_AUTH_KEY_BYTES]);

/* Signs raw |header| and |payload| bytes (normally JSON) with |priv| and
 * returns the compact JWS "b64u(header).b64u(payload).b64u(sig)" in *ptoken
 * (heap, NUL-terminated, caller frees). Does not look inside either part, so
 * it can build deliberately odd tokens for tests. Returns 0, -EINVAL,
 * -ENOMEM. Any thread. */
int fx_auth_sign_compact(const uint8_t priv[FX_AUTH_KEY_BYTES], const void *header, size_t hlen,
                         const void *payload, size_t plen, char **ptoken);

/* Claims for fx_auth_mint(). NULL issuer/audience mean the defaults; |sub|
 * is optional; |tid| is required; nbf/iat are written only when their has_
 * flag is set; |perms| has |nperms| entries. */
typedef struct fx_auth_mint_claims {
    const char *issuer;
    const char *audience;
    const char *sub;
    const char *tid;
    int64_t exp;
    int64_t nbf;
    int64_t iat;
    bool has_nbf;
    bool has_iat;
    const char *const *perms;
    size_t nperms;
} fx_auth_mint_claims;

/* Mints a JWT signed by |priv| with header {"alg":"EdDSA","typ":"JWT"} plus
 * "kid" when |kid| is not NULL, and the claims |c|. Returns the token in
 * *ptoken (heap, caller frees) and 0; -EINVAL for a missing tid; -ENOMEM.
 * Any thread. */
int fx_auth_mint(const uint8_t priv[FX_AUTH_KEY_BYTES], const char *kid,
                 const fx_auth_mint_claims *c, char **ptoken);

/* Writes a JWKS document holding one Ed25519 key (|pub|, key id |kid|, may
 * be NULL) to |f|, newline-terminated. Returns 0, -EINVAL, -ENOMEM, or -EIO
 * when writing fails. Caller's thread (blocking stdio). */
int fx_auth_jwks_write(FILE *f, const char *kid, const uint8_t pub[FX_AUTH_KEY_BYTES]);

#endif
