/* libFuzzer target for JWKS parsing (fx_auth_keyset_parse in
 * src/auth/auth.c): the input is the document. A parsed set holds 1 to
 * FX_AUTH_JWKS_MAX_KEYS keys, finds its key when it has exactly one, and is
 * freed by its last reference; a refused document gets FX_ECONFIG (or
 * -ENOMEM) with a message naming it. Any broken promise aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fx_log_set_level(FX_LOG_ERROR);
    char *doc = malloc(size ? size : 1);
    FX_FUZZ_CHECK(doc != NULL);
    if (size)
        memcpy(doc, data, size);
    fx_keyset *ks = NULL;
    char why[512] = "";
    int rv = fx_auth_keyset_parse(doc, size, "fuzz.json", &ks, why, sizeof(why));
    if (rv == 0) {
        size_t n = fx_auth_keyset_count(ks);
        FX_FUZZ_CHECK(n >= 1 && n <= FX_AUTH_JWKS_MAX_KEYS);
        uint8_t pub[FX_AUTH_KEY_BYTES];
        FX_FUZZ_CHECK(fx_auth_keyset_find(ks, NULL, pub) == (n == 1));
        fx_keyset *again = fx_auth_keyset_ref(ks);
        FX_FUZZ_CHECK(again == ks);
        fx_auth_keyset_unref(again);
        fx_auth_keyset_unref(ks);
    } else {
        FX_FUZZ_CHECK(rv == FX_ECONFIG || rv == -ENOMEM);
        FX_FUZZ_CHECK(ks == NULL);
        FX_FUZZ_CHECK(rv == -ENOMEM || strstr(why, "fuzz.json") != NULL);
    }
    free(doc);
    return 0;
}
