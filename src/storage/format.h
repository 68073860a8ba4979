/* The on-disk format of durable streams, byte-compatible with the original
 * Felix broker's formats v2 and v3: segment files "FLSG" (32-byte header,
 * then records of a 28-byte header, in v3 a 20-byte producer tag on the
 * record that opens a producer batch, and the payload), sparse index files "FLSI"
 * (24-byte header, 16-byte entries), file names `<segment id:020>.log|.index`
 * and stream directory names `<t>_<ns>_<s>_<shard>-<fnv1a64:016x>`. All
 * integers big-endian; checksums CRC-32/IEEE (libdeflate_crc32(), the
 * values of zlib's crc32()). Pure functions; any thread. docs/durability.md
 * describes the layout. */
#ifndef FX_STORAGE_FORMAT_H
#define FX_STORAGE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FX_SEG_MAGIC 0x464C5347u /* "FLSG" */
#define FX_IDX_MAGIC 0x464C5349u /* "FLSI" */
#define FX_SEG_VERSION 2    /* segments without producer marks (what we write by default) */
#define FX_SEG_VERSION_V3 3 /* segments that may hold producer marks */
#define FX_SEG_HEADER_LEN 32
#define FX_REC_HEADER_LEN 28
#define FX_IDX_HEADER_LEN 24
#define FX_IDX_ENTRY_LEN 16
/* Largest payload of one record. */
#define FX_REC_MAX_PAYLOAD (64u << 20)
/* Smallest segment_bytes: a header and one record of 0..28 bytes. */
#define FX_SEG_MIN_BYTES 60
/* Longest name fx_logfmt_dir_name() writes, NUL included. */
#define FX_LOGFMT_DIR_NAME_MAX (4 * 33 + 10 + 1 + 16 + 1)
/* Length of a segment file name ("00000000000000000001.index"), NUL included. */
#define FX_LOGFMT_FILE_NAME_MAX 32

/* CRC-32/IEEE of |n| bytes at |p| continuing |crc| (0 to start). */
uint32_t fx_logfmt_crc(uint32_t crc, const void *p, size_t n);

/* ---- segment header ----------------------------------------------------- */

typedef struct fx_seg_header {
    uint16_t version; /* FX_SEG_VERSION or FX_SEG_VERSION_V3; 0 encodes as FX_SEG_VERSION */
    uint64_t base_offset;
    uint64_t created_us;
    uint32_t point; /* bytes 28..32, the original's reserved word: a durable point or 0 */
} fx_seg_header;

/* Byte offset of the durable point in a segment file (the reserved word of
 * the header, written 0 and never read by the original). */
#define FX_SEG_POINT_POS 28

/* Writes the 32-byte header for |h| into |out|. */
void fx_logfmt_seg_header_encode(uint8_t out[FX_SEG_HEADER_LEN], const fx_seg_header *h);

/* Decodes |n| bytes at |p| into |*h|, checking in order: length, magic,
 * version (2 or 3: both read), flags, checksum (the reserved word is not checked: it is returned
 * in h->point as it is). Returns 0, or
 * FX_ESTORAGE_CORRUPT with the reason in |why| (as the original words it:
 * "bad segment magic 0x...", "unsupported segment version N", ...). */
int fx_logfmt_seg_header_decode(const uint8_t *p, size_t n, fx_seg_header *h, char *why,
                                size_t whylen);

/* ---- durable point ------------------------------------------------------ */

/* The durable point of a segment: its length up to which every byte was
 * covered by a completed fdatasync, kept in the header's reserved word. 32
 * bits: a 4-bit exponent e, a 20-bit mantissa m (the point is m << e: exact
 * below 1 MiB, rounded down to 20 significant bits above, at most 32 GiB)
 * and an 8-bit check (a CRC-32 of the other three bytes with a seed of its
 * own, low byte) so that a damaged word, or the original's 0, reads as no
 * point. Rounding down only makes the point older, which is safe. */
uint32_t fx_logfmt_point_encode(uint64_t synced_len);

/* Decodes word |w|: true and |*plen| (at least the header's 32 bytes) for a
 * point, false for none (0, a failed check, or a length below 32). */
bool fx_logfmt_point_decode(uint32_t w, uint64_t *plen);

/* ---- records ------------------------------------------------------------ */

/* Producer marks (format v3), the high bits of payload_len: bit 31 opens a
 * producer batch and adds the 20-byte tag after the header; bit 30
 * continues the batch of the previous record (no tag); a one-record batch
 * has only bit 31; both bits are corruption. An unmarked record is
 * byte-identical to v2. */
#define FX_REC_MARK_OPEN 0x80000000u
#define FX_REC_MARK_CONT 0x40000000u
#define FX_REC_MARK_BITS (FX_REC_MARK_OPEN | FX_REC_MARK_CONT)
#define FX_REC_TAG_LEN 20

/* The tag of a record that opens a producer batch: u64 producer_id, u64
 * sequence, u32 len (records in the batch), big-endian. */
typedef struct fx_rec_tag {
    uint64_t producer_id;
    uint64_t sequence;
    uint32_t len;
} fx_rec_tag;

typedef struct fx_rec_header {
    uint32_t len; /* payload bytes (payload_len without the mark bits) */
    uint32_t mark; /* 0, FX_REC_MARK_OPEN or FX_REC_MARK_CONT */
    uint64_t offset;
    uint64_t ts_us;
    uint32_t header_crc;
    uint32_t checksum; /* over the first 24 header bytes, then the tag if any, then the payload */
    fx_rec_tag tag;    /* mark FX_REC_MARK_OPEN: filled by the scanner (fx_segwin_record) */
} fx_rec_header;

/* Bytes from the start of the record of |h| to the next one: 28, the tag's
 * 20 when it opens a batch, the payload. */
static inline uint64_t fx_rec_step(const fx_rec_header *h)
{
    return 28u + (h->mark == FX_REC_MARK_OPEN ? FX_REC_TAG_LEN : 0u) + (uint64_t)h->len;
}

/* Bytes before the payload of the record of |h|. */
static inline uint64_t fx_rec_body_pos(const fx_rec_header *h)
{
    return 28u + (h->mark == FX_REC_MARK_OPEN ? FX_REC_TAG_LEN : 0u);
}

/* Outcome of decoding one record, in the order the checks run. */
typedef enum fx_rec_status {
    FX_REC_OK = 0,
    FX_REC_TRUNCATED,    /* the file ends inside the header or the payload */
    FX_REC_HEADER_CRC,   /* header checksum mismatch */
    FX_REC_TOO_LARGE,    /* payload_len above FX_REC_MAX_PAYLOAD */
    FX_REC_CRC,          /* record checksum mismatch */
    FX_REC_OUT_OF_ORDER, /* offset is not the expected next one */
    FX_REC_FLAGS,        /* both producer mark bits set (the original's RecordFlags) */
    FX_REC_MARK_IN_V2,   /* a producer mark in a version 2 segment */
} fx_rec_status;

/* A short name of |s| ("truncated", "record checksum mismatch", ...). */
const char *fx_logfmt_rec_status_name(fx_rec_status s);

/* Writes the 28-byte header of a record at |offset| with timestamp |ts_us|
 * and the |len| payload bytes at |payload| into |out|. */
void fx_logfmt_rec_header_encode(uint8_t out[FX_REC_HEADER_LEN], uint64_t offset, uint64_t ts_us,
                                 const void *payload, uint32_t len);

/* Writes the header of a record carrying producer mark |mark| (0,
 * FX_REC_MARK_OPEN with |tag|, FX_REC_MARK_CONT) into |out| (28 bytes, then
 * the 20 tag bytes when it opens a batch) and returns the bytes written.
 * Mark 0 writes what fx_logfmt_rec_header_encode writes. */
size_t fx_logfmt_rec_head_encode(uint8_t *out, uint64_t offset, uint64_t ts_us, uint32_t mark,
                                 const fx_rec_tag *tag, const void *payload, uint32_t len);

void fx_logfmt_tag_encode(uint8_t out[FX_REC_TAG_LEN], const fx_rec_tag *t);
void fx_logfmt_tag_decode(const uint8_t p[FX_REC_TAG_LEN], fx_rec_tag *t);

/* Decodes a 28-byte record header and checks, in order, its header
 * checksum, the mark bits (not both) and the payload limit. Returns
 * FX_REC_OK, FX_REC_HEADER_CRC, FX_REC_FLAGS or FX_REC_TOO_LARGE; |*h| is
 * filled in every case (h->len without the mark bits, h->mark with them; the
 * tag is not part of these bytes). Whether a mark may appear at all depends
 * on the segment's version: the scanner checks that. */
fx_rec_status fx_logfmt_rec_header_decode(const uint8_t p[FX_REC_HEADER_LEN], fx_rec_header *h);

/* The record checksum for header bytes |hdr| and |len| payload bytes. */
uint32_t fx_logfmt_rec_checksum(const uint8_t hdr[FX_REC_HEADER_LEN], const void *payload,
                                size_t len);

/* The same with the 20 tag bytes |tag| (NULL: none) between them. */
uint32_t fx_logfmt_rec_checksum_tagged(const uint8_t hdr[FX_REC_HEADER_LEN], const uint8_t *tag,
                                       const void *payload, size_t len);

/* ---- producer digests (CRC-64/XZ) ----------------------------------------- */

/* CRC-64/XZ (reflected polynomial 0x42F0E1EBA9EA3693, init and xorout all
 * ones; check value of "123456789" 0x995DC9BBDF1939FA) of |n| bytes at |p|
 * continuing |crc| (0 to start), zlib's conventions. Table-driven. */
uint64_t fx_crc64(uint64_t crc, const void *p, size_t n);

/* One step of a producer batch's digest, the original's chain: with
 * r = crc64(u64 payload_len || payload), the next digest is
 * crc64(u64 d_prev || u64 r), d0 = 0. The u64s are big-endian here (the
 * original's doc does not say; everything else in the format is
 * big-endian). */
uint64_t fx_producer_digest_step(uint64_t d_prev, const void *payload, uint32_t len);

/* ---- sparse index ------------------------------------------------------- */

void fx_logfmt_idx_header_encode(uint8_t out[FX_IDX_HEADER_LEN], uint64_t base_offset);

/* Checks magic and version of a 24-byte index header (flags and reserved
 * are not checked, as in the original) and returns its base offset. Returns
 * 0 or FX_ESTORAGE_CORRUPT. */
int fx_logfmt_idx_header_decode(const uint8_t *p, size_t n, uint64_t *pbase);

void fx_logfmt_idx_entry_encode(uint8_t out[FX_IDX_ENTRY_LEN], uint64_t offset, uint64_t pos);
void fx_logfmt_idx_entry_decode(const uint8_t p[FX_IDX_ENTRY_LEN], uint64_t *poffset,
                                uint64_t *ppos);

/* The rule shared by the writer and the rebuild (so both produce the same
 * bytes): an entry at a segment's first record, then at a record once the
 * records since the last entry (that one included) reach |spacing| bytes. */
typedef struct fx_idx_rule {
    uint64_t spacing;
    uint64_t since; /* bytes of records since the last entry, that one included */
    bool started;
} fx_idx_rule;

/* Returns true if the record of |rec_bytes| (header included) about to be
 * placed gets an index entry, and advances the rule past it. */
bool fx_idx_rule_next(fx_idx_rule *r, uint64_t rec_bytes);

/* ---- names -------------------------------------------------------------- */

/* FNV-1a 64 over u64be len|tenant|u64be len|ns|u64be len|stream|u32be shard. */
uint64_t fx_logfmt_dir_hash(const char *tenant, const char *ns, const char *stream, uint32_t shard);

/* Writes the directory name of a stream shard into |out| (at least
 * FX_LOGFMT_DIR_NAME_MAX bytes): each component keeps ASCII letters, digits
 * and '-', every other character (a UTF-8 sequence counts as one) becomes
 * '_', cut to 32 characters, "_" when empty; then "_<shard>-<hash:016x>". */
void fx_logfmt_dir_name(char *out, const char *tenant, const char *ns, const char *stream,
                        uint32_t shard);

/* FNV-1a 64 of the |n| bytes at |p| (offset basis 0xcbf29ce484222325). */
uint64_t fx_logfmt_fnv1a64(const void *p, size_t n);

/* Writes the sanitised name component |s| at |out| (at most 32 bytes, no
 * NUL) and returns its end: ASCII letters, digits and '-' are kept, every
 * other character (a UTF-8 sequence counts as one) becomes '_', cut to 32
 * characters, "_" when empty. */
char *fx_logfmt_sanitise(char *out, const char *s);

/* Writes "<id:020>.log" (or ".index") into |out| (FX_LOGFMT_FILE_NAME_MAX). */
void fx_logfmt_file_name(char *out, uint64_t id, bool index);

/* Parses "<digits>.log" into |*pid|; false for any other name. */
bool fx_logfmt_parse_log_name(const char *name, uint64_t *pid);

/* Big-endian helpers. */
static inline void fx_be32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void fx_be64_put(uint8_t *p, uint64_t v)
{
    fx_be32_put(p, (uint32_t)(v >> 32));
    fx_be32_put(p + 4, (uint32_t)v);
}
static inline uint32_t fx_be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t fx_be64_get(const uint8_t *p)
{
    return (uint64_t)fx_be32_get(p) << 32 | fx_be32_get(p + 4);
}

#endif
