/* Strict base64 for the JSON codec and the token verifier: a canonical-form
 * check in front of nettle's decoder, which on its own skips whitespace and
 * ignores non-zero trailing bits, so that one byte string has exactly one
 * accepted text. Pure functions on bytes; any thread. */
#include "wire/base64.h"

#include <errno.h>
#include <nettle/base64.h>
#include <string.h>

#include "felix/error.h"

_Static_assert(FX_BASE64_DECODE_ROOM(86) == BASE64_DECODE_LENGTH(86), "decode room is nettle's");
_Static_assert(FX_BASE64_ENCODED_LEN(32, FX_BASE64_URL) == BASE64_ENCODE_LENGTH(32),
               "unpadded length is nettle's update length");
_Static_assert(FX_BASE64_ENCODED_LEN(31, FX_BASE64_STD) == BASE64_ENCODE_RAW_LENGTH(31),
               "padded length is nettle's raw length");

/* The 6-bit value of |c| in variant |v|'s alphabet, or -1. */
static int sextet(uint8_t c, fx_base64_variant v)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (v == FX_BASE64_URL ? '-' : '+'))
        return 62;
    if (c == (v == FX_BASE64_URL ? '_' : '/'))
        return 63;
    return -1;
}

/* Trailing '=' characters of a STD text: at most two are padding; a third
 * is left in the data, where the alphabet check refuses it. */
static size_t pad_count(const char *s, size_t n)
{
    if (n < 4 || s[n - 1] != '=')
        return 0;
    return s[n - 2] == '=' ? 2 : 1;
}

bool fx_base64_is_canonical(const char *s, size_t n, fx_base64_variant v)
{
    size_t pad = 0;
    if (v == FX_BASE64_STD) {
        if (n % 4 != 0)
            return false;
        pad = pad_count(s, n);
    } else if (n % 4 == 1) {
        return false; /* six bits cannot end a byte */
    }
    size_t data = n - pad;
    for (size_t i = 0; i < data; i++)
        if (sextet((uint8_t)s[i], v) < 0)
            return false;
    /* The bits of the last character below the last whole byte must be zero. */
    if (data % 4 == 2)
        return (sextet((uint8_t)s[data - 1], v) & 0x0F) == 0;
    if (data % 4 == 3)
        return (sextet((uint8_t)s[data - 1], v) & 0x03) == 0;
    return true;
}

/* Decoded length of canonical |s|: three bytes per four data characters,
 * plus one or two for a partial last group. */
static size_t decoded_len(const char *s, size_t n, fx_base64_variant v)
{
    size_t data = n - (v == FX_BASE64_STD ? pad_count(s, n) : 0);
    return data / 4 * 3 + data % 4 * 3 / 4;
}

int fx_base64_decode(const char *s, size_t n, fx_base64_variant v, uint8_t *dst, size_t cap,
                     size_t *plen)
{
    if (!fx_base64_is_canonical(s, n, v))
        return FX_EWIRE_BASE64;
    if (cap < FX_BASE64_DECODE_ROOM(n))
        return -ENOSPC;
    struct base64_decode_ctx ctx;
    size_t got = 0;
    if (v == FX_BASE64_URL)
        base64url_decode_init(&ctx);
    else
        base64_decode_init(&ctx);
    if (!base64_decode_update(&ctx, &got, dst, n, s))
        return FX_EWIRE_BASE64;
    /* nettle's final check wants padding, so only the padded variant asks it;
     * unpadded text was fully vetted by the canonical check above. */
    if (v == FX_BASE64_STD && !base64_decode_final(&ctx))
        return FX_EWIRE_BASE64;
    if (got != decoded_len(s, n, v))
        return FX_EWIRE_BASE64;
    *plen = got;
    return 0;
}

size_t fx_base64_encode(char *dst, const uint8_t *src, size_t n, fx_base64_variant v)
{
    if (n == 0)
        return 0;
    struct base64_encode_ctx ctx;
    if (v == FX_BASE64_URL)
        base64url_encode_init(&ctx);
    else
        base64_encode_init(&ctx);
    /* update() writes only whole sextets (BASE64_ENCODE_LENGTH(n) at most);
     * final() adds the last partial one and the padding, which goes through
     * |tail| so the URL variant can drop it without needing room for it. */
    size_t k = base64_encode_update(&ctx, dst, n, src);
    char tail[BASE64_ENCODE_FINAL_LENGTH];
    size_t t = base64_encode_final(&ctx, tail);
    if (v == FX_BASE64_URL)
        while (t > 0 && tail[t - 1] == '=')
            t--;
    memcpy(dst + k, tail, t);
    return k + t;
}
