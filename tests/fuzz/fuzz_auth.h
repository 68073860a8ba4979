/* Helpers shared by the libauth fuzz targets: a fixed key set (two Ed25519
 * keys, ids "k1" and "k2") and the checks every refusal must pass. Built
 * with FX_AUTH_FUZZ_SKIP_SIGNATURE (tests/fuzz/fuzz.cmake), so a token with
 * a well-formed 64-byte signature verifies whatever the signature is, and
 * the fuzzer reaches the payload and the claims. A failed check aborts.
 * Single-threaded (libFuzzer calls the target from one thread). */
#ifndef FX_FUZZ_AUTH_H
#define FX_FUZZ_AUTH_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "base/log.h"
#include "felix/error.h"

#define FX_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The RFC 8037 Appendix A.1 public key, twice under two ids. */
static const char fx_fuzz_jwks[] =
    "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k1\","
    "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"},"
    "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k2\",\"use\":\"sig\",\"alg\":\"EdDSA\","
    "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";

/* The key set, parsed on first use and kept for the process. */
static inline const fx_keyset *fx_fuzz_keyset(void)
{
    static fx_keyset *ks;
    if (ks == NULL) {
        fx_log_set_level(FX_LOG_ERROR);
        char why[256];
        FX_FUZZ_CHECK(fx_auth_keyset_parse(fx_fuzz_jwks, sizeof(fx_fuzz_jwks) - 1, "fuzz", &ks, why,
                                           sizeof(why)) == 0);
        FX_FUZZ_CHECK(fx_auth_keyset_count(ks) == 2);
    }
    return ks;
}

/* A refusal names a known reason and the text starts with it. */
static inline void fx_fuzz_check_refusal(int rv, fx_auth_refusal r, const char *why)
{
    if (rv == -ENOMEM)
        return;
    FX_FUZZ_CHECK(rv == FX_EAUTH);
    FX_FUZZ_CHECK(r > FX_AUTH_OK && r < FX_AUTH_REFUSAL_COUNT);
    const char *reason = fx_auth_refusal_str(r);
    FX_FUZZ_CHECK(strncmp(why, reason, strlen(reason)) == 0);
    FX_FUZZ_CHECK(strcmp(fx_auth_refusal_label(r), "?") != 0);
}

#endif
