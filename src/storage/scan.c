/* Window reader and record scanner over segment files (scan.h). Payload
 * checksums are computed as the bytes stream through the window, so a
 * 64 MiB record costs no more memory than a small one. The checksum is
 * CRC-32/IEEE, the value zlib's crc32() gives (fx_logfmt_crc), computed
 * with libdeflate's carry-less-multiply implementation: about 4x zlib's
 * speed on 1 KiB records, and the CRC is most of a verify's or a
 * recovery's CPU time. One thread per window. */
#include "storage/scan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

/* fx_logfmt_crc's result, faster. */
static uint32_t scan_crc(uint32_t crc, const uint8_t *p, size_t n)
{
    return libdeflate_crc32(crc, p, n);
}

int fx_segwin_init(fx_segwin *w, fx_sio *io, int fd, uint64_t file_len, size_t cap)
{
    if (cap < 4096)
        cap = 4096;
    *w = (fx_segwin){
        .io = io, .fd = fd, .file_len = file_len, .cap = cap, .version = FX_SEG_VERSION};
    w->buf = malloc(cap);
    return w->buf != NULL ? 0 : -ENOMEM;
}

void fx_segwin_deinit(fx_segwin *w)
{
    free(w->buf);
    w->buf = NULL;
}

/* Makes [pos, pos+n) (n <= cap, inside file_len) available; returns it in *pp. */
static int win_get(fx_segwin *w, uint64_t pos, size_t n, const uint8_t **pp)
{
    if (pos < w->off || pos + n > w->off + w->len) {
        uint64_t left = w->file_len - pos;
        size_t want = left < w->cap ? (size_t)left : w->cap;
        ssize_t r = w->io->ops->pread(w->io, w->fd, w->buf, want, pos);
        if (r < 0)
            return (int)r;
        w->off = pos;
        w->len = (size_t)r;
        if ((size_t)r < n)
            return -EIO; /* the file is shorter than it was a moment ago */
    }
    *pp = w->buf + (pos - w->off);
    return 0;
}

/* Streams |n| payload bytes at |pos| into the checksum |*crc|, copying them
 * to |dst| when not NULL. Large copies are read straight into |dst|. */
static int win_payload(fx_segwin *w, uint64_t pos, size_t n, uint8_t *dst, uint32_t *crc)
{
    if (dst != NULL && n > w->cap / 2) {
        ssize_t r = w->io->ops->pread(w->io, w->fd, dst, n, pos);
        if (r < 0)
            return (int)r;
        if ((size_t)r < n)
            return -EIO;
        *crc = scan_crc(*crc, dst, n);
        return 0;
    }
    while (n > 0) {
        size_t k = n < w->cap ? n : w->cap;
        const uint8_t *p = NULL;
        if (pos >= w->off && pos < w->off + w->len) {
            size_t avail = (size_t)(w->off + w->len - pos);
            k = k < avail ? k : avail;
        }
        int rv = win_get(w, pos, k, &p);
        if (rv != 0)
            return rv;
        *crc = scan_crc(*crc, p, k);
        if (dst != NULL) {
            memcpy(dst, p, k);
            dst += k;
        }
        pos += k;
        n -= k;
    }
    return 0;
}

int fx_segwin_record(fx_segwin *w, uint64_t pos, uint64_t expect, bool check, bool verify,
                     uint8_t *dst, fx_rec_header *h, fx_rec_status *st)
{
    memset(h, 0, sizeof(*h));
    if (pos > w->file_len || w->file_len - pos < FX_REC_HEADER_LEN) {
        *st = FX_REC_TRUNCATED;
        return 0;
    }
    const uint8_t *p = NULL;
    int rv = win_get(w, pos, FX_REC_HEADER_LEN, &p);
    if (rv != 0)
        return rv;
    uint8_t hdr[FX_REC_HEADER_LEN];
    memcpy(hdr, p, sizeof(hdr));
    if ((*st = fx_logfmt_rec_header_decode(hdr, h)) != FX_REC_OK)
        return 0;
    if (h->mark != 0 && w->version < FX_SEG_VERSION_V3) {
        *st = FX_REC_MARK_IN_V2;
        return 0;
    }
    uint64_t body = fx_rec_body_pos(h);
    if (w->file_len - pos - FX_REC_HEADER_LEN < body - FX_REC_HEADER_LEN + h->len) {
        *st = FX_REC_TRUNCATED;
        return 0;
    }
    uint8_t tag[FX_REC_TAG_LEN];
    if (h->mark == FX_REC_MARK_OPEN) {
        if ((rv = win_get(w, pos + FX_REC_HEADER_LEN, FX_REC_TAG_LEN, &p)) != 0)
            return rv;
        memcpy(tag, p, sizeof(tag));
        fx_logfmt_tag_decode(tag, &h->tag);
    }
    if (verify || dst != NULL) {
        /* The header checksum (verified) is the CRC of bytes 0..20: go on from it. */
        uint32_t crc = scan_crc(h->header_crc, hdr + 20, 4);
        if (h->mark == FX_REC_MARK_OPEN)
            crc = scan_crc(crc, tag, sizeof(tag));
        if ((rv = win_payload(w, pos + body, h->len, dst, &crc)) != 0)
            return rv;
        if (crc != h->checksum) {
            *st = FX_REC_CRC;
            return 0;
        }
    }
    *st = check && h->offset != expect ? FX_REC_OUT_OF_ORDER : FX_REC_OK;
    return 0;
}

int fx_seg_scan(fx_segwin *w, uint64_t pos, uint64_t offset, fx_scan_cb cb, void *user,
                fx_scan *out)
{
    *out = (fx_scan){.end_pos = pos, .next_offset = offset, .status = FX_REC_OK};
    while (pos < w->file_len) {
        fx_rec_header h;
        fx_rec_status st;
        int rv = fx_segwin_record(w, pos, offset, true, true, NULL, &h, &st);
        if (rv != 0)
            return rv;
        if (st != FX_REC_OK) {
            out->status = st;
            out->bad = h;
            return 0;
        }
        if (cb != NULL && (rv = cb(user, pos, &h)) != 0)
            return rv;
        pos += fx_rec_step(&h);
        offset++;
        out->end_pos = pos;
        out->next_offset = offset;
        out->records++;
        out->payload_bytes += h.len;
        out->last_ts = h.ts_us;
    }
    return 0;
}
