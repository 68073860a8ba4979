/* libFuzzer target for compact JWS verification (fx_auth_jws_verify in
 * src/auth/auth.c): the input is the token. Before any signature, the size,
 * the three base64url parts, the header JSON (alg, typ, kid, crit) and the
 * key choice are checked; the fuzz build skips only the Ed25519 verify
 * itself. A success must return a NUL-terminated payload; a refusal a known
 * reason whose text starts the message. Any broken promise aborts. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const fx_keyset *ks = fx_fuzz_keyset();
    uint8_t *payload = NULL;
    size_t plen = 0;
    fx_auth_refusal r = FX_AUTH_OK;
    char why[256] = "";
    /* The token is not NUL-terminated: the verifier must use |size| only. */
    char *tok = malloc(size ? size : 1);
    FX_FUZZ_CHECK(tok != NULL);
    if (size)
        memcpy(tok, data, size);
    int rv = fx_auth_jws_verify(ks, tok, size, 0, &payload, &plen, &r, why, sizeof(why));
    if (rv == 0) {
        FX_FUZZ_CHECK(r == FX_AUTH_OK);
        FX_FUZZ_CHECK(payload != NULL && payload[plen] == '\0');
        FX_FUZZ_CHECK(size <= FX_AUTH_TOKEN_MAX_DEFAULT);
    } else {
        fx_fuzz_check_refusal(rv, r, why);
        FX_FUZZ_CHECK(payload == NULL && plen == 0);
    }
    free(payload);
    /* No key set: refused, never crashes. */
    rv = fx_auth_jws_verify(NULL, tok, size, 0, &payload, &plen, &r, why, sizeof(why));
    FX_FUZZ_CHECK(rv != 0);
    free(payload);
    free(tok);
    return 0;
}
