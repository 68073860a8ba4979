/* `felix token`: development key pairs and tokens for auth_mode "jwt".
 * `keygen` writes a JWKS for the broker's jwks_file and the private key as
 * an OKP JWK; `mint` signs an EdDSA JWT with it. Signing and the JWKS text
 * come from libauth (src/auth), the code the broker verifies with. Main
 * thread. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "base/fsutil.h"
#include "cli.h"

#define CMD "token"
#define PERMS_MAX 64

enum {
    O_OUT_JWKS = FX_CLI_OPT_FIRST_CMD,
    O_OUT_KEY,
    O_KID,
    O_FORCE,
    O_KEY,
    O_TENANT_CLAIM,
    O_PERM,
    O_TTL,
    O_SUB,
    O_ISS,
    O_AUD,
};

static const fx_cli_opt TOKEN_OPTS[] = {
    {"help", false, FX_CLI_OPT_HELP},
    {"out-jwks", true, O_OUT_JWKS},
    {"out-key", true, O_OUT_KEY},
    {"kid", true, O_KID},
    {"force", false, O_FORCE},
    {"key", true, O_KEY},
    {"tenant", true, O_TENANT_CLAIM},
    {"perm", true, O_PERM},
    {"ttl", true, O_TTL},
    {"sub", true, O_SUB},
    {"iss", true, O_ISS},
    {"aud", true, O_AUD},
    {0},
};

typedef struct token_args {
    const char *action;
    const char *out_jwks, *out_key, *kid, *key, *tenant, *sub, *iss, *aud;
    const char *perms[PERMS_MAX];
    size_t nperms;
    uint64_t ttl_s;
    bool force;
} token_args;

/* ---- base64url of keys ------------------------------------------------------------ */

static const char B64U[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Encodes 32 bytes as 43 unpadded base64url characters plus NUL. */
static void key_encode(const uint8_t k[FX_AUTH_KEY_BYTES], char out[44])
{
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < FX_AUTH_KEY_BYTES; i++) {
        acc = acc << 8 | k[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = B64U[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        out[o++] = B64U[(acc << (6 - bits)) & 63];
    out[o] = '\0';
}

/* Decodes exactly 32 bytes from unpadded base64url. Returns 0 or -EINVAL. */
static int key_decode(const char *s, uint8_t k[FX_AUTH_KEY_BYTES])
{
    if (strlen(s) != 43)
        return -EINVAL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (const char *p = s; *p != '\0'; p++) {
        const char *at = strchr(B64U, *p);
        if (at == NULL)
            return -EINVAL;
        acc = acc << 6 | (uint32_t)(at - B64U);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            k[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o == FX_AUTH_KEY_BYTES ? 0 : -EINVAL;
}

/* ---- arguments ---------------------------------------------------------------------- */

/* Parses "90", "90s", "15m", "1h", "7d" into seconds. */
static int parse_ttl(const char *s, uint64_t *out)
{
    char num[32];
    size_t len = strlen(s);
    uint64_t mul = 1;
    if (len == 0 || len >= sizeof(num))
        return -EINVAL;
    memcpy(num, s, len + 1);
    switch (num[len - 1]) {
    case 's':
        num[--len] = '\0';
        break;
    case 'm':
        mul = 60, num[--len] = '\0';
        break;
    case 'h':
        mul = 3600, num[--len] = '\0';
        break;
    case 'd':
        mul = 86400, num[--len] = '\0';
        break;
    default:
        break;
    }
    uint64_t v;
    if (fx_cli_parse_u64(num, 10u * 365 * 86400 / mul, &v) != 0 || v == 0)
        return -EINVAL;
    *out = v * mul;
    return 0;
}

static int token_option(token_args *a, int id, const char *val, char *err, size_t errlen)
{
    switch (id) {
    case O_OUT_JWKS:
        a->out_jwks = val;
        return 0;
    case O_OUT_KEY:
        a->out_key = val;
        return 0;
    case O_KID:
        a->kid = val;
        return 0;
    case O_FORCE:
        a->force = true;
        return 0;
    case O_KEY:
        a->key = val;
        return 0;
    case O_TENANT_CLAIM:
        a->tenant = val;
        return 0;
    case O_SUB:
        a->sub = val;
        return 0;
    case O_ISS:
        a->iss = val;
        return 0;
    case O_AUD:
        a->aud = val;
        return 0;
    case O_PERM:
        if (a->nperms == PERMS_MAX) {
            snprintf(err, errlen, "--perm: at most %d permissions", PERMS_MAX);
            return -EINVAL;
        }
        if (strchr(val, ':') == NULL) {
            snprintf(err, errlen,
                     "--perm: expected ACTION:RESOURCE such as "
                     "stream.publish:stream:t1/*/*, got '%s'",
                     val);
            return -EINVAL;
        }
        a->perms[a->nperms++] = val;
        return 0;
    case O_TTL:
        if (parse_ttl(val, &a->ttl_s) == 0)
            return 0;
        snprintf(err, errlen, "--ttl: expected a duration such as 90s, 15m, 1h or 7d, got '%s'",
                 val);
        return -EINVAL;
    default:
        return 0;
    }
}

/* Returns -1 to continue, or the exit status. */
static int token_parse(int argc, char **argv, token_args *a)
{
    char err[512] = "";
    *a = (token_args){.ttl_s = 3600};
    fx_cli_args it = {.argc = argc, .argv = argv};
    int kind, id = 0;
    const char *val;
    while ((kind = fx_cli_args_next(&it, TOKEN_OPTS, &id, &val, err, sizeof(err))) > 0) {
        if (kind == FX_CLI_ARG_OPT && id == FX_CLI_OPT_HELP)
            return fx_cli_print_help(CMD);
        if (kind == FX_CLI_ARG_POS && a->action != NULL) {
            snprintf(err, sizeof(err), "unexpected argument '%s'", val);
            return fx_cli_usage_error(CMD, err);
        }
        if (kind == FX_CLI_ARG_POS)
            a->action = val;
        else if (token_option(a, id, val, err, sizeof(err)) != 0)
            return fx_cli_usage_error(CMD, err);
    }
    if (kind < 0)
        return fx_cli_usage_error(CMD, err);
    if (a->action == NULL)
        return fx_cli_usage_error(CMD, "missing action: keygen or mint");
    return -1;
}

/* ---- keygen ------------------------------------------------------------------------- */

/* A file keygen writes: built in memory, then written with
 * fx_file_write_atomic (through "<path>.tmp" opened O_EXCL | O_NOFOLLOW,
 * never through a link someone planted, so a key is never half-written),
 * with its mode exactly when |exact_mode| (the umask cannot widen it and an
 * old file's mode is not inherited). */
typedef struct out_file {
    const char *path;
    mode_t mode;
    bool exact_mode;
    char *buf;
    size_t len;
    FILE *f; /* open_memstream over |buf| */
} out_file;

static int out_open(out_file *o, const char *path, mode_t mode, bool exact_mode)
{
    *o = (out_file){.path = path, .mode = mode, .exact_mode = exact_mode};
    o->f = open_memstream(&o->buf, &o->len);
    if (o->f == NULL) {
        fx_cli_errorf(CMD, "cannot write %s: %s", path, strerror(errno));
        return -ENOMEM;
    }
    return 0;
}

/* Forgets what |o| holds (a private key, maybe: wiped). */
static void out_abort(out_file *o)
{
    if (o->f != NULL) {
        fclose(o->f);
        o->f = NULL;
    }
    if (o->buf != NULL) {
        explicit_bzero(o->buf, o->len);
        free(o->buf);
        o->buf = NULL;
    }
}

/* Writes |o| onto its path: replacing an existing file with |force|,
 * refusing one without. */
static int out_commit(out_file *o, bool force)
{
    int rv = fclose(o->f) == 0 ? 0 : -EIO;
    o->f = NULL;
    unsigned flags = (o->exact_mode ? FX_FILE_EXACT_MODE : 0) | (force ? 0 : FX_FILE_NO_REPLACE);
    if (rv == 0)
        rv = fx_file_write_atomic(o->path, o->buf, o->len, o->mode, flags);
    if (rv != 0)
        fx_cli_errorf(CMD, "cannot write %s: %s%s", o->path, strerror(-rv),
                      rv == -EEXIST ? " (pass --force to replace it)" : "");
    out_abort(o);
    return rv;
}

/* Without --force, refuses before anything is generated or written. */
static bool outputs_free(const token_args *a)
{
    const char *paths[2] = {a->out_key, a->out_jwks};
    for (int i = 0; i < 2 && !a->force; i++) {
        struct stat st;
        if (lstat(paths[i], &st) == 0) {
            fx_cli_errorf(CMD, "%s exists (pass --force to replace it)", paths[i]);
            return false;
        }
    }
    return true;
}

static int write_key(FILE *f, const char *kid, const uint8_t pub[FX_AUTH_KEY_BYTES],
                     const uint8_t priv[FX_AUTH_KEY_BYTES])
{
    char x[44], d[44];
    key_encode(pub, x);
    key_encode(priv, d);
    json_t *jwk = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "kty", "OKP", "crv", "Ed25519",
                            "use", "sig", "alg", "EdDSA", "kid", kid, "x", x, "d", d);
    int rv =
        jwk != NULL && json_dumpf(jwk, f, JSON_INDENT(2)) == 0 && fputc('\n', f) != EOF ? 0 : -EIO;
    json_decref(jwk);
    explicit_bzero(d, sizeof(d));
    return rv;
}

/* Writes the private key, then the JWKS; a JWKS that cannot be written
 * takes back a key file this run created. */
static int write_both(const token_args *a, const char *kid, const uint8_t pub[FX_AUTH_KEY_BYTES],
                      const uint8_t priv[FX_AUTH_KEY_BYTES])
{
    out_file k, j;
    if (out_open(&k, a->out_key, 0600, true) != 0)
        return -1;
    if (write_key(k.f, kid, pub, priv) != 0) {
        fx_cli_errorf(CMD, "writing %s failed", k.path);
        out_abort(&k);
        return -1;
    }
    if (out_open(&j, a->out_jwks, 0644, false) != 0) {
        out_abort(&k);
        return -1;
    }
    if (fx_auth_jwks_write(j.f, kid, pub) != 0) {
        fx_cli_errorf(CMD, "writing %s failed", j.path);
        out_abort(&j);
        out_abort(&k);
        return -1;
    }
    if (out_commit(&k, a->force) != 0) {
        out_abort(&j);
        return -1;
    }
    if (out_commit(&j, a->force) != 0) {
        if (!a->force)
            unlink(a->out_key);
        return -1;
    }
    return 0;
}

static int token_keygen(const token_args *a)
{
    if (a->out_jwks == NULL || a->out_key == NULL)
        return fx_cli_usage_error(CMD, "keygen needs --out-jwks FILE and --out-key FILE");
    if (strcmp(a->out_jwks, a->out_key) == 0)
        return fx_cli_usage_error(CMD, "--out-jwks and --out-key name the same file");
    if (!outputs_free(a))
        return FX_CLI_EXIT_FAIL;
    const char *kid = a->kid != NULL ? a->kid : "dev-k1";
    uint8_t pub[FX_AUTH_KEY_BYTES], priv[FX_AUTH_KEY_BYTES];
    int rv = fx_auth_keygen(pub, priv);
    if (rv != 0) {
        fx_cli_errorf(CMD, "keygen: %s", fx_strerror(rv));
        return FX_CLI_EXIT_FAIL;
    }
    rv = write_both(a, kid, pub, priv);
    explicit_bzero(priv, sizeof(priv));
    if (rv != 0)
        return FX_CLI_EXIT_FAIL;
    fprintf(stderr, "felix token: wrote private key %s (kid %s, mode 0600) and JWKS %s\n",
            a->out_key, kid, a->out_jwks);
    return FX_CLI_EXIT_OK;
}

/* ---- mint ----------------------------------------------------------------------------- */

/* Reads the OKP JWK written by keygen. Returns 0 or prints why. */
static int read_key(const char *path, uint8_t priv[FX_AUTH_KEY_BYTES], char *kid, size_t kidlen)
{
    json_error_t jerr;
    json_t *jwk = json_load_file(path, 0, &jerr);
    if (jwk == NULL) {
        fx_cli_errorf(CMD, "--key %s: %s", path, jerr.text);
        return -EINVAL;
    }
    const char *d = json_string_value(json_object_get(jwk, "d"));
    const char *k = json_string_value(json_object_get(jwk, "kid"));
    int rv = d != NULL ? key_decode(d, priv) : -EINVAL;
    if (rv != 0)
        fx_cli_errorf(CMD, "--key %s: not an Ed25519 private JWK (written by felix token keygen)",
                      path);
    else
        snprintf(kid, kidlen, "%s", k != NULL ? k : "");
    json_decref(jwk);
    return rv;
}

static int token_mint(const token_args *a)
{
    if (a->key == NULL || a->tenant == NULL)
        return fx_cli_usage_error(CMD, "mint needs --key FILE and --tenant T");
    if (a->nperms == 0)
        return fx_cli_usage_error(CMD, "mint needs at least one --perm, e.g. "
                                       "--perm 'stream.publish:stream:t1/*/*'");
    uint8_t priv[FX_AUTH_KEY_BYTES];
    char filekid[FX_AUTH_KID_MAX + 1];
    if (read_key(a->key, priv, filekid, sizeof(filekid)) != 0)
        return FX_CLI_EXIT_FAIL;
    const char *kid = a->kid != NULL ? a->kid : (filekid[0] ? filekid : NULL);
    int64_t now = (int64_t)time(NULL);
    fx_auth_mint_claims c = {
        .issuer = a->iss,
        .audience = a->aud,
        .sub = a->sub,
        .tid = a->tenant,
        .exp = now + (int64_t)a->ttl_s,
        .iat = now,
        .has_iat = true,
        .perms = a->perms,
        .nperms = a->nperms,
    };
    char *token = NULL;
    int rv = fx_auth_mint(priv, kid, &c, &token);
    explicit_bzero(priv, sizeof(priv));
    if (rv != 0) {
        fx_cli_errorf(CMD, "mint: %s", fx_strerror(rv));
        return FX_CLI_EXIT_FAIL;
    }
    printf("%s\n", token);
    free(token);
    return FX_CLI_EXIT_OK;
}

int fx_cli_token(int argc, char **argv)
{
    token_args a;
    int st = token_parse(argc, argv, &a);
    if (st >= 0)
        return st;
    if (strcmp(a.action, "keygen") == 0)
        return token_keygen(&a);
    if (strcmp(a.action, "mint") == 0)
        return token_mint(&a);
    return fx_cli_usage_error(CMD, "unknown action: want keygen or mint");
}
