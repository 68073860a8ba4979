/* Reading segment files: a window reader (one bounded buffer refilled with
 * pread) and a record scanner that checks every record of a segment in the
 * original's decode order (28 header bytes present, header checksum,
 * payload limit, payload present, record checksum, then the offset). Used by
 * recovery, range reads and `felix log verify|inspect`. Memory is the window
 * (fixed at init), whatever the record sizes. One thread at a time. */
#ifndef FX_STORAGE_SCAN_H
#define FX_STORAGE_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/format.h"
#include "storage/sio.h"

/* Default window: 1 MiB reads keep verification near the device's speed. */
#define FX_SEGWIN_DEFAULT (1u << 20)

typedef struct fx_segwin {
    fx_sio *io;
    int fd;
    uint64_t file_len; /* bytes of the segment that count */
    uint8_t *buf;
    size_t cap;
    uint64_t off; /* file position of buf[0] */
    size_t len;   /* valid bytes in buf */
    /* The segment's version (its header's): FX_SEG_VERSION (what init sets)
     * refuses producer marks (FX_REC_MARK_IN_V2), FX_SEG_VERSION_V3 reads
     * them. A reader that decoded the header sets it. */
    uint16_t version;
} fx_segwin;

/* Prepares |w| to read the first |file_len| bytes of |fd| through |io| with a
 * |cap|-byte window (at least 4 KiB). Returns 0 or -ENOMEM. */
int fx_segwin_init(fx_segwin *w, fx_sio *io, int fd, uint64_t file_len, size_t cap);
void fx_segwin_deinit(fx_segwin *w);

/* Reads and checks the record at |pos| (a record opening a producer batch:
 * its tag too, into h->tag; the next record is at pos + fx_rec_step(h)).
 * Its header goes to |*h| and the
 * outcome to |*st|; the offset check uses |expect| (skipped when |check| is
 * false). With |verify| false the payload is neither read nor checked (only
 * the header checksum is); with |dst| non-NULL the payload is copied there
 * (h->len bytes; implies verify). Returns 0, or -errno on an I/O error. */
int fx_segwin_record(fx_segwin *w, uint64_t pos, uint64_t expect, bool check, bool verify,
                     uint8_t *dst, fx_rec_header *h, fx_rec_status *st);

/* Result of scanning a segment. */
typedef struct fx_scan {
    uint64_t end_pos;     /* end of the last valid record (where a bad one starts) */
    uint64_t next_offset; /* offset after the last valid record */
    uint64_t records;
    uint64_t payload_bytes;
    uint64_t last_ts;     /* timestamp of the last valid record; 0 if none */
    fx_rec_status status; /* FX_REC_OK when every byte up to file_len is valid */
    fx_rec_header bad;    /* header of the bad record, as far as decoded */
} fx_scan;

/* Called for every valid record found at |pos|; non-zero stops the scan and
 * is returned. */
typedef int (*fx_scan_cb)(void *user, uint64_t pos, const fx_rec_header *h);

/* Scans records from |pos| (expected offset |offset|) to the end of |w|.
 * Returns 0 with |*out| filled (the status tells whether all was valid), a
 * callback's non-zero value, or -errno. */
int fx_seg_scan(fx_segwin *w, uint64_t pos, uint64_t offset, fx_scan_cb cb, void *user,
                fx_scan *out);

#endif
