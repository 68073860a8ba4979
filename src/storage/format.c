/* Encoders and decoders of the segment, record and index layouts and of the
 * file and directory names (format.h). Pure; any thread. */
#include "storage/format.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <libdeflate.h>
#include <lzma.h>

#include "felix/error.h"

uint32_t fx_logfmt_crc(uint32_t crc, const void *p, size_t n)
{
    /* libdeflate_crc32 has zlib's crc32() conventions (0 starts, the result
     * continues) and takes a size_t length; like zlib it answers 0 for a NULL
     * buffer, so nothing to add (an empty payload's NULL) keeps |crc|. */
    return n > 0 ? libdeflate_crc32(crc, p, n) : crc;
}

/* ---- segment header ----------------------------------------------------- */

void fx_logfmt_seg_header_encode(uint8_t out[FX_SEG_HEADER_LEN], const fx_seg_header *h)
{
    fx_be32_put(out, FX_SEG_MAGIC);
    out[4] = 0, out[5] = (uint8_t)(h->version == FX_SEG_VERSION_V3 ? 3 : FX_SEG_VERSION);
    out[6] = 0, out[7] = 0;
    fx_be64_put(out + 8, h->base_offset);
    fx_be64_put(out + 16, h->created_us);
    fx_be32_put(out + 24, fx_logfmt_crc(0, out, 24));
    fx_be32_put(out + FX_SEG_POINT_POS, h->point);
}

int fx_logfmt_seg_header_decode(const uint8_t *p, size_t n, fx_seg_header *h, char *why,
                                size_t whylen)
{
    if (n < FX_SEG_HEADER_LEN) {
        snprintf(why, whylen, "truncated: needed %d bytes, %zu available", FX_SEG_HEADER_LEN, n);
        return FX_ESTORAGE_CORRUPT;
    }
    uint32_t magic = fx_be32_get(p);
    unsigned version = (unsigned)p[4] << 8 | p[5];
    unsigned flags = (unsigned)p[6] << 8 | p[7];
    uint32_t want = fx_logfmt_crc(0, p, 24), found = fx_be32_get(p + 24);
    if (magic != FX_SEG_MAGIC)
        snprintf(why, whylen, "bad segment magic 0x%08" PRIx32, magic);
    else if (version != FX_SEG_VERSION && version != FX_SEG_VERSION_V3)
        snprintf(why, whylen, "unsupported segment version %u", version);
    else if (flags != 0)
        snprintf(why, whylen, "unknown segment flags 0x%04x", flags);
    else if (want != found)
        snprintf(why, whylen,
                 "segment header checksum mismatch (expected 0x%08" PRIx32 ", found 0x%08" PRIx32
                 ")",
                 want, found);
    else {
        h->version = (uint16_t)version;
        h->base_offset = fx_be64_get(p + 8);
        h->created_us = fx_be64_get(p + 16);
        h->point = fx_be32_get(p + FX_SEG_POINT_POS);
        return 0;
    }
    return FX_ESTORAGE_CORRUPT;
}

/* ---- durable point ------------------------------------------------------ */

#define POINT_MANT_BITS 20
#define POINT_EXP_MAX 15

/* The check byte of the three value bytes of a point word. */
static uint8_t point_check(uint32_t w)
{
    uint8_t b[3] = {(uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8)};
    return (uint8_t)fx_logfmt_crc(0x46445054u /* "FDPT" */, b, sizeof(b));
}

uint32_t fx_logfmt_point_encode(uint64_t synced_len)
{
    unsigned e = 0;
    uint64_t m = synced_len;
    while (m >= (1ull << POINT_MANT_BITS) && e < POINT_EXP_MAX) {
        m >>= 1;
        e++;
    }
    if (m >= (1ull << POINT_MANT_BITS))
        m = (1ull << POINT_MANT_BITS) - 1; /* beyond 32 GiB: the largest point, still below */
    uint32_t w = (uint32_t)e << 28 | (uint32_t)m << 8;
    return w | point_check(w);
}

bool fx_logfmt_point_decode(uint32_t w, uint64_t *plen)
{
    if ((uint8_t)w != point_check(w))
        return false;
    uint64_t len = (uint64_t)(w >> 8 & ((1u << POINT_MANT_BITS) - 1)) << (w >> 28);
    if (len < FX_SEG_HEADER_LEN)
        return false;
    *plen = len;
    return true;
}

/* ---- records ------------------------------------------------------------ */

const char *fx_logfmt_rec_status_name(fx_rec_status s)
{
    switch (s) {
    case FX_REC_OK:
        return "ok";
    case FX_REC_TRUNCATED:
        return "truncated";
    case FX_REC_HEADER_CRC:
        return "record header checksum mismatch";
    case FX_REC_TOO_LARGE:
        return "record payload exceeds limit";
    case FX_REC_CRC:
        return "record checksum mismatch";
    case FX_REC_OUT_OF_ORDER:
        return "offset out of order";
    case FX_REC_FLAGS:
        return "record flags: both producer mark bits set";
    case FX_REC_MARK_IN_V2:
        return "producer mark in a version 2 segment";
    }
    return "?";
}

uint32_t fx_logfmt_rec_checksum(const uint8_t hdr[FX_REC_HEADER_LEN], const void *payload,
                                size_t len)
{
    return fx_logfmt_crc(fx_logfmt_crc(0, hdr, 24), payload, len);
}

void fx_logfmt_rec_header_encode(uint8_t out[FX_REC_HEADER_LEN], uint64_t offset, uint64_t ts_us,
                                 const void *payload, uint32_t len)
{
    fx_be32_put(out, len);
    fx_be64_put(out + 4, offset);
    fx_be64_put(out + 12, ts_us);
    fx_be32_put(out + 20, fx_logfmt_crc(0, out, 20));
    fx_be32_put(out + 24, fx_logfmt_rec_checksum(out, payload, len));
}

uint32_t fx_logfmt_rec_checksum_tagged(const uint8_t hdr[FX_REC_HEADER_LEN], const uint8_t *tag,
                                       const void *payload, size_t len)
{
    uint32_t crc = fx_logfmt_crc(0, hdr, 24);
    if (tag != NULL)
        crc = fx_logfmt_crc(crc, tag, FX_REC_TAG_LEN);
    return fx_logfmt_crc(crc, payload, len);
}

void fx_logfmt_tag_encode(uint8_t out[FX_REC_TAG_LEN], const fx_rec_tag *t)
{
    fx_be64_put(out, t->producer_id);
    fx_be64_put(out + 8, t->sequence);
    fx_be32_put(out + 16, t->len);
}

void fx_logfmt_tag_decode(const uint8_t p[FX_REC_TAG_LEN], fx_rec_tag *t)
{
    t->producer_id = fx_be64_get(p);
    t->sequence = fx_be64_get(p + 8);
    t->len = fx_be32_get(p + 16);
}

size_t fx_logfmt_rec_head_encode(uint8_t *out, uint64_t offset, uint64_t ts_us, uint32_t mark,
                                 const fx_rec_tag *tag, const void *payload, uint32_t len)
{
    fx_be32_put(out, len | mark);
    fx_be64_put(out + 4, offset);
    fx_be64_put(out + 12, ts_us);
    fx_be32_put(out + 20, fx_logfmt_crc(0, out, 20));
    const uint8_t *t = NULL;
    if (mark == FX_REC_MARK_OPEN) {
        fx_logfmt_tag_encode(out + FX_REC_HEADER_LEN, tag);
        t = out + FX_REC_HEADER_LEN;
    }
    fx_be32_put(out + 24, fx_logfmt_rec_checksum_tagged(out, t, payload, len));
    return FX_REC_HEADER_LEN + (t != NULL ? FX_REC_TAG_LEN : 0);
}

fx_rec_status fx_logfmt_rec_header_decode(const uint8_t p[FX_REC_HEADER_LEN], fx_rec_header *h)
{
    uint32_t word = fx_be32_get(p);
    h->len = word & ~FX_REC_MARK_BITS;
    h->mark = word & FX_REC_MARK_BITS;
    h->tag = (fx_rec_tag){0};
    h->offset = fx_be64_get(p + 4);
    h->ts_us = fx_be64_get(p + 12);
    h->header_crc = fx_be32_get(p + 20);
    h->checksum = fx_be32_get(p + 24);
    if (fx_logfmt_crc(0, p, 20) != h->header_crc)
        return FX_REC_HEADER_CRC;
    if (h->mark == FX_REC_MARK_BITS)
        return FX_REC_FLAGS;
    if (h->len > FX_REC_MAX_PAYLOAD)
        return FX_REC_TOO_LARGE;
    return FX_REC_OK;
}

/* ---- producer digests ---------------------------------------------------- */

/* CRC-64/XZ (ECMA-182, reflected, initial and final value all ones): the
 * original's producer digest chain. liblzma's, which folds with carry-less
 * multiplication where the CPU has it (several times a table's speed: the
 * broker digests every idempotent batch it appends, and a rebuild of the
 * producer table every marked payload it reads). */
uint64_t fx_crc64(uint64_t crc, const void *p, size_t n)
{
    return n == 0 ? crc : lzma_crc64(p, n, crc);
}

uint64_t fx_producer_digest_step(uint64_t d_prev, const void *payload, uint32_t len)
{
    uint8_t b[16];
    fx_be64_put(b, len);
    uint64_t r = fx_crc64(fx_crc64(0, b, 8), payload, len);
    fx_be64_put(b, d_prev);
    fx_be64_put(b + 8, r);
    return fx_crc64(0, b, 16);
}

/* ---- sparse index ------------------------------------------------------- */

void fx_logfmt_idx_header_encode(uint8_t out[FX_IDX_HEADER_LEN], uint64_t base_offset)
{
    fx_be32_put(out, FX_IDX_MAGIC);
    out[4] = 0, out[5] = FX_SEG_VERSION;
    out[6] = 0, out[7] = 0;
    fx_be64_put(out + 8, base_offset);
    fx_be64_put(out + 16, 0);
}

int fx_logfmt_idx_header_decode(const uint8_t *p, size_t n, uint64_t *pbase)
{
    if (n < FX_IDX_HEADER_LEN || fx_be32_get(p) != FX_IDX_MAGIC ||
        ((unsigned)p[4] << 8 | p[5]) != FX_SEG_VERSION)
        return FX_ESTORAGE_CORRUPT;
    *pbase = fx_be64_get(p + 8);
    return 0;
}

void fx_logfmt_idx_entry_encode(uint8_t out[FX_IDX_ENTRY_LEN], uint64_t offset, uint64_t pos)
{
    fx_be64_put(out, offset);
    fx_be64_put(out + 8, pos);
}

void fx_logfmt_idx_entry_decode(const uint8_t p[FX_IDX_ENTRY_LEN], uint64_t *poffset,
                                uint64_t *ppos)
{
    *poffset = fx_be64_get(p);
    *ppos = fx_be64_get(p + 8);
}

bool fx_idx_rule_next(fx_idx_rule *r, uint64_t rec_bytes)
{
    bool emit = !r->started || r->since >= r->spacing;
    if (emit) {
        r->started = true;
        r->since = 0;
    }
    r->since += rec_bytes;
    return emit;
}

/* ---- names -------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t fx_logfmt_fnv1a64(const void *p, size_t n)
{
    return fnv(0xcbf29ce484222325ull, p, n);
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    uint8_t len[8];
    fx_be64_put(len, strlen(s));
    return fnv(fnv(h, len, 8), s, strlen(s));
}

uint64_t fx_logfmt_dir_hash(const char *tenant, const char *ns, const char *stream, uint32_t shard)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv_str(fnv_str(fnv_str(h, tenant), ns), stream);
    uint8_t sh[4];
    fx_be32_put(sh, shard);
    return fnv(h, sh, 4);
}

char *fx_logfmt_sanitise(char *out, const char *s)
{
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && chars < 32;) {
        unsigned char c = *p++;
        bool keep =
            (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
        if (c >= 0x80) /* one character: the lead byte and its continuation bytes */
            while ((*p & 0xC0) == 0x80)
                p++;
        *out++ = keep ? (char)c : '_';
        chars++;
    }
    if (chars == 0)
        *out++ = '_';
    return out;
}

void fx_logfmt_dir_name(char *out, const char *tenant, const char *ns, const char *stream,
                        uint32_t shard)
{
    char *p = fx_logfmt_sanitise(out, tenant);
    *p++ = '_';
    p = fx_logfmt_sanitise(p, ns);
    *p++ = '_';
    p = fx_logfmt_sanitise(p, stream);
    snprintf(p, FX_LOGFMT_DIR_NAME_MAX - (size_t)(p - out), "_%" PRIu32 "-%016" PRIx64, shard,
             fx_logfmt_dir_hash(tenant, ns, stream, shard));
}

void fx_logfmt_file_name(char *out, uint64_t id, bool index)
{
    snprintf(out, FX_LOGFMT_FILE_NAME_MAX, "%020" PRIu64 ".%s", id, index ? "index" : "log");
}

bool fx_logfmt_parse_log_name(const char *name, uint64_t *pid)
{
    uint64_t v = 0;
    const char *p = name;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (strcmp(p, ".log") != 0)
        return false;
    *pid = v;
    return true;
}
