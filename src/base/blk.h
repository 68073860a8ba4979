/* fx_blk: large, short-lived byte blocks (a publish frame being sent, an event
 * batch being read) recycled through a small process-wide cache. glibc gives
 * a freed block of this size back to the kernel when it tops the heap, and
 * the next allocation faults every page in again: at a few thousand batches a
 * second that was the client's largest kernel cost. Small blocks have a cost
 * of their own: a publish frame is encoded on the caller's thread and freed
 * on the client loop, which defeats glibc's per-thread cache (and a 1 KiB
 * message's frame is above its sizes anyway), so malloc and free take the
 * locked, binned path for every message. Blocks of 128 bytes up to 1 MiB
 * (header included) come from power-of-two size classes (256 bytes to
 * 1 MiB). Each class keeps up to FX_BLK_CLASS_BYTES of freed blocks and
 * the cache up to FX_BLK_CACHE_BYTES in all, enough for a client's whole
 * publish budget (4 MiB by default) to cycle through it; only the pages a
 * block's users wrote are resident. Smaller and larger blocks are plain
 * malloc. Any thread: a block may be freed on another thread than the one
 * that allocated it. */
#ifndef FX_BLK_H
#define FX_BLK_H

#include <stddef.h>

#define FX_BLK_MIN_CLASS 8                    /* 256 bytes */
#define FX_BLK_MAX_CLASS 20                   /* 1 MiB */
#define FX_BLK_CLASS_BYTES ((size_t)8 << 20)  /* cached per class at most */
#define FX_BLK_CACHE_BYTES ((size_t)16 << 20) /* cached in all at most */

/* Returns |len| writable bytes (uninitialized, 16-byte aligned), or NULL when
 * memory is exhausted. Free with fx_blk_free(). Any thread. */
void *fx_blk_alloc(size_t len);

/* Returns |p| (from fx_blk_alloc) to the cache, or to malloc when its class is
 * full or it has none. NULL does nothing. Any thread. */
void fx_blk_free(void *p);

/* Bytes held by the cache now (relaxed; for tests and metrics). */
size_t fx_blk_cached_bytes(void);

/* Frees every cached block (tests, and processes that want the memory back). */
void fx_blk_trim(void);

#endif
