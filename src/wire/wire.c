/* Shared helpers of the wire codecs: error detail and strict UTF-8 validation.
 * Pure functions; any thread. */
#include "wire/wire.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int fx_wire_err_set(fx_wire_err *e, int code, const char *fmt, ...)
{
    if (!e)
        return code;
    e->code = code;
    if (!fmt) {
        snprintf(e->msg, sizeof(e->msg), "%s", fx_strerror(code));
        return code;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return code;
}

/* ---- UTF-8 ----------------------------------------------------------------
 * Follows the well-formed byte sequences table of Unicode 15 §3.9 (Table 3-7):
 * the second byte's range depends on the lead byte, which is what rules out
 * overlong forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4). */

static bool is_cont(uint8_t b)
{
    return (b & 0xC0u) == 0x80u;
}

/* Returns the length of the well-formed sequence at |p| (|n| bytes available),
 * or 0 if it is ill-formed or truncated. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
    uint8_t b = p[0];
    if (b < 0x80u)
        return 1;
    if (b < 0xC2u || b > 0xF4u)
        return 0; /* stray continuation, overlong C0/C1, or beyond U+10FFFF */
    size_t len = b < 0xE0u ? 2 : b < 0xF0u ? 3 : 4;
    if (n < len)
        return 0;
    uint8_t lo = 0x80u, hi = 0xBFu;
    if (b == 0xE0u)
        lo = 0xA0u;
    else if (b == 0xEDu)
        hi = 0x9Fu;
    else if (b == 0xF0u)
        lo = 0x90u;
    else if (b == 0xF4u)
        hi = 0x8Fu;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (!is_cont(p[i]))
            return 0;
    return len;
}

bool fx_wire_utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    /* Names and texts are mostly ASCII: eight bytes at a time while no byte
     * has its top bit set (memcpy: |p| need not be aligned). */
    while (n - i >= 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & UINT64_C(0x8080808080808080))
            break;
        i += 8;
    }
    while (i < n) {
        if (p[i] < 0x80u) { /* ASCII fast path */
            i++;
            continue;
        }
        size_t len = utf8_seq(p + i, n - i);
        if (len == 0)
            return false;
        i += len;
    }
    return true;
}
