/* Strict base64 (RFC 4648) over nettle: the canonical-form check both of our
 * base64 users need (JSON payloads use the padded standard alphabet, JWS the
 * unpadded URL alphabet), and decode/encode helpers that apply it. Pure
 * functions on bytes; any thread. */
#ifndef FX_WIRE_BASE64_H
#define FX_WIRE_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum fx_base64_variant {
    FX_BASE64_STD, /* RFC 4648 §4: "+/" alphabet, '='-padded to a multiple of 4 */
    FX_BASE64_URL, /* RFC 4648 §5: "-_" alphabet, no padding (as JWS requires) */
} fx_base64_variant;

/* Characters fx_base64_encode() writes for |n| bytes in variant |v| (no NUL).
 * A constant expression when both arguments are. */
#define FX_BASE64_ENCODED_LEN(n, v) ((v) == FX_BASE64_STD ? ((n) + 2) / 3 * 4 : ((n)*8 + 5) / 6)

/* Room fx_base64_decode() needs for |n| characters: nettle's documented
 * bound, at least the decoded length. A constant expression when |n| is. */
#define FX_BASE64_DECODE_ROOM(n) ((((n) + 1) * 6) / 8)

/* True if |s| (|n| chars, no NUL needed) is the one canonical text of some
 * byte string in variant |v|: only alphabet characters, a length that can end
 * a byte sequence (STD: a multiple of 4 with at most two trailing '='; URL:
 * not 1 mod 4), and zero spare bits in the last data character. Whitespace,
 * stray or missing padding and non-zero trailing bits, all of which nettle
 * alone would tolerate, are refused. Any thread. */
bool fx_base64_is_canonical(const char *s, size_t n, fx_base64_variant v);

/* Decodes |s| (|n| chars) in variant |v| into |dst| of |cap| bytes, which
 * must be at least FX_BASE64_DECODE_ROOM(|n|); sets |*plen| to the decoded
 * length. Returns 0, FX_EWIRE_BASE64 if |s| is not canonical
 * (fx_base64_is_canonical()) or -ENOSPC if |cap| is too small; on error
 * nothing is written to |*plen|. The caller owns every buffer. Any thread. */
int fx_base64_decode(const char *s, size_t n, fx_base64_variant v, uint8_t *dst, size_t cap,
                     size_t *plen);

/* Encodes |n| bytes of |src| (may be NULL when |n| is 0) in variant |v| into
 * |dst|, which must have room for FX_BASE64_ENCODED_LEN(|n|, |v|) chars: STD
 * padded, URL unpadded. Writes no NUL. Returns the chars written. Any
 * thread. */
size_t fx_base64_encode(char *dst, const uint8_t *src, size_t n, fx_base64_variant v);

#endif
