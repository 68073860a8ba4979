/* Felix-C's own JSON wire vectors (tests/vectors/<dir>/<name>: a message's
 * bytes, the final newline not counted): read one, and check that a message
 * encodes to it byte for byte, decodes back to equal fields and re-encodes
 * to the same bytes. Shared by the unit tests of the additive messages. */
#ifndef FX_TEST_OWN_VECTORS_H
#define FX_TEST_OWN_VECTORS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"
#include "wire/message.h"

/* tests/vectors/|dir|/|name| as malloc'd bytes (at most 4 KiB) in |*plen|. */
static inline uint8_t *own_vector_load(const char *dir, const char *name, size_t *plen)
{
    const char *root = getenv("FX_SOURCE_DIR");
    if (!root)
        fx_test_skip("FX_SOURCE_DIR not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/vectors/%s/%s", root, dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    uint8_t *out = malloc(4096);
    assert_non_null(out);
    size_t n = fread(out, 1, 4096, f);
    while (n > 0 && out[n - 1] == '\n')
        n--;
    fclose(f);
    *plen = n;
    return out;
}

static inline void own_vector_expect(const fx_msg *m, const char *dir, const char *name)
{
    size_t len;
    uint8_t *want = own_vector_load(dir, name, &len);
    uint8_t *got;
    size_t glen;
    assert_int_equal(fx_msg_encode(m, &got, &glen), 0);
    if (glen != len || memcmp(got, want, len) != 0)
        fail_msg("%s: got %.*s", name, (int)glen, (const char *)got);
    fx_msg d;
    assert_int_equal(fx_msg_decode(&d, want, len, NULL), 0);
    assert_true(fx_msg_equal(m, &d));
    uint8_t *again;
    size_t alen;
    assert_int_equal(fx_msg_encode(&d, &again, &alen), 0);
    assert_int_equal(alen, len);
    assert_memory_equal(again, want, len);
    free(again);
    fx_msg_deinit(&d);
    free(got);
    free(want);
}

#endif
