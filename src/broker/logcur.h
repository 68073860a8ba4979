/* A read-only cursor over the segment files of a durable stream's log, for
 * the readers that are not the log's storage thread: a subscription's
 * catch-up replay (replay.c) and a consumer group's pages (group_page.c),
 * both on the worker's replay thread. It finds the segment that holds an
 * offset (binary search over the segment headers, then the sparse index,
 * then record headers), and moves to the next segment, or on in a segment
 * that grew, at the end of the bytes it knows. Reading the records at the
 * cursor is the caller's (fx_segwin_record on |win| at |pos|). Owns the
 * open segment's file descriptor and window. One thread at a time; the
 * storage thread may append, roll or delete segments meanwhile: a segment
 * that is gone reads as removed by retention. */
#ifndef FX_BROKER_LOGCUR_H
#define FX_BROKER_LOGCUR_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/format.h"
#include "storage/scan.h"
#include "storage/sio.h"

typedef struct fxb_logcur {
    fx_sio *io;
    const char *dir; /* the log's directory; borrowed, outlives the cursor */
    bool open;       /* a segment is open: the fields below are valid */
    int fd;
    uint64_t seg_id;
    uint64_t pos; /* the next record's position in the segment */
    fx_segwin win;
    char err[256]; /* why the last call failed */
} fxb_logcur;

/* A closed cursor over the log in |dir| through |io|. */
void fxb_logcur_init(fxb_logcur *c, fx_sio *io, const char *dir);
/* Closes the open segment, if any. */
void fxb_logcur_close(fxb_logcur *c);

/* Opens the segment holding offset |target| and moves the cursor to its
 * record. FX_ECURSOR_TOO_OLD when no segment holds it any more (retention
 * removed it, or a record below it is cut short), with |*pfirst| the base
 * of the oldest segment still there above |target| (UINT64_MAX when none
 * is); another error with |err| set. */
int fxb_logcur_seek(fxb_logcur *c, uint64_t target, uint64_t *pfirst);

/* At the end of the open segment's known bytes, where offset |next| would
 * be: goes on in the same segment if it grew (the active one), else in the
 * next segment, which must start at |next|. 0 or an error with |err|. */
int fxb_logcur_advance(fxb_logcur *c, uint64_t next);

/* The record at the cursor has status |st| (not OK): FX_ESTORAGE_CORRUPT
 * with |err| naming the status, position, segment and directory. */
int fxb_logcur_bad(fxb_logcur *c, fx_rec_status st);

#endif
