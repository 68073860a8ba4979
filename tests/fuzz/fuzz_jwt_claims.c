/* libFuzzer target for JWT claim checks (fx_auth_verify, fx_auth_check_tenant
 * and fx_auth_allows in src/auth/auth.c): the input is the payload JSON,
 * wrapped into a token with a fixed EdDSA header (kid "k1") and a
 * well-formed signature, which the fuzz build does not verify. A verified
 * token must carry a non-empty tid, an exp, and perms of the form
 * "action:resource"; a refusal a known reason. The permission matcher runs on
 * resource names taken from the input. Any broken promise aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_auth.h"
#include "wire/base64.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW INT64_C(1700000000)
#define HEADER_B64 "eyJhbGciOiJFZERTQSIsImtpZCI6ImsxIn0" /* {"alg":"EdDSA","kid":"k1"} */

static void check_claims(const fx_auth_claims *c, const uint8_t *data, size_t size)
{
    FX_FUZZ_CHECK(c->refusal == FX_AUTH_OK);
    FX_FUZZ_CHECK(c->tid != NULL && c->tid[0] != '\0');
    FX_FUZZ_CHECK(c->nperms == 0 || c->perms != NULL);
    for (size_t i = 0; i < c->nperms; i++)
        FX_FUZZ_CHECK(c->perms[i] != NULL && strchr(c->perms[i], ':') != NULL);
    char why[256];
    FX_FUZZ_CHECK(fx_auth_check_tenant(c, c->tid, why, sizeof(why)) == 0);
    /* Stream names from the input's tail: the matcher must stay in bounds. */
    char ns[32] = "ns", stream[32] = "s";
    size_t n = size < sizeof(stream) - 1 ? size : sizeof(stream) - 1;
    memcpy(stream, data + size - n, n);
    stream[strnlen(stream, n)] = '\0';
    (void)fx_auth_allows(c, FX_AUTH_PUBLISH, c->tid, ns, stream);
    (void)fx_auth_allows(c, FX_AUTH_SUBSCRIBE, c->tid, ns, stream);
    FX_FUZZ_CHECK(!fx_auth_allows(c, FX_AUTH_PUBLISH, "", ns, stream) || c->tid[0] == '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FX_AUTH_TOKEN_MAX_DEFAULT)
        return 0;
    const fx_keyset *ks = fx_fuzz_keyset();
    size_t cap = sizeof(HEADER_B64) + 2 + FX_BASE64_ENCODED_LEN(size, FX_BASE64_URL) + 87;
    char *tok = malloc(cap);
    FX_FUZZ_CHECK(tok != NULL);
    size_t n = sizeof(HEADER_B64) - 1;
    memcpy(tok, HEADER_B64 ".", n + 1);
    n += 1;
    n += fx_base64_encode(tok + n, data, size, FX_BASE64_URL);
    tok[n++] = '.';
    memset(tok + n, 'A', 86); /* 64 zero bytes */
    n += 86;
    fx_auth_policy p = FX_AUTH_POLICY_INIT;
    p.max_token_bytes = cap;
    fx_auth_claims c;
    char why[256] = "";
    int rv = fx_auth_verify(ks, tok, n, &p, NOW, &c, why, sizeof(why));
    if (rv == 0)
        check_claims(&c, data, size);
    else
        fx_fuzz_check_refusal(rv, c.refusal, why);
    fx_auth_claims_deinit(&c);
    free(tok);
    return 0;
}
