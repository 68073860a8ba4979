/* Private to the consumer-group journal files (gjournal_state.c: codecs
 * and state model; gjournal.c: the files): the snapshot's sizes and the
 * helper that words a corruption. */
#ifndef FX_STORAGE_GJOURNAL_INT_H
#define FX_STORAGE_GJOURNAL_INT_H

#include <stddef.h>

#include "storage/gjournal.h"

/* Snapshot layout: the fixed part (header, the counts, the CRC) of
 * version 1 and 2, one pending entry, one intent, one dead-letter entry;
 * the largest snapshot a state can need. */
#define SNAP_FIXED_V1 (4 + 2 + 8 + 8 + 8 + 4 + 4 + 4)
#define SNAP_FIXED (SNAP_FIXED_V1 + 8 + 4) /* version 2: the dead-letter list's head */
#define SNAP_PENDING 21
#define SNAP_INTENT 13
#define SNAP_DEAD 22
#define SNAP_MAX                                                                                   \
    (SNAP_FIXED + (size_t)FX_GJOURNAL_MAX_PENDING * (SNAP_PENDING + SNAP_INTENT) +                 \
     (size_t)FX_GJOURNAL_DEAD_MAX * SNAP_DEAD)

/* Writes the reason |fmt| into |why| (|whylen| bytes; NULL or 0: nowhere)
 * and returns FX_ESTORAGE_CORRUPT. */
int fx_gjournal_corrupt(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
