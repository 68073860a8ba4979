/* fx_memio: an in-memory fx_sio for tests. It keeps two images of every file
 * and of the directory tree: what the process sees, and what a completed
 * fdatasync (for file contents) or directory sync (for names) has made
 * durable. fx_memio_crash() is a power cut: everything not yet covered by a
 * completed sync is discarded, or torn the ways a real file system tears
 * it (fx_memio_tear). Errors can be injected per call kind (EIO,
 * ENOSPC, ...), a capacity makes writes fail with ENOSPC once the "disk" is
 * full, and fx_memio_crash_after() makes the n-th next call and all later
 * ones fail, so a crash can land between any two system calls.
 * Simplification: renaming a directory is durable at once. Paths are used
 * as given (no "..", no symlinks); "/" always exists. An fdatasync makes
 * durable what the file held when it began, never what was written while it
 * ran (a real one may, but nothing may count on it). Any thread: each call
 * is atomic under one lock, and a flush in flight (held below, or running on
 * another thread) lets the other calls go on; a power cut while one is in
 * flight voids it (-EIO). */
#ifndef FX_STORAGE_MEMIO_H
#define FX_STORAGE_MEMIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/sio.h"

typedef struct fx_memio fx_memio;

/* Call kinds for fx_memio_fail(). */
typedef enum fx_memio_op {
    FX_MEMIO_OPEN,
    FX_MEMIO_PWRITE,
    FX_MEMIO_PREAD,
    FX_MEMIO_FDATASYNC,
    FX_MEMIO_FALLOCATE,
    FX_MEMIO_FTRUNCATE,
    FX_MEMIO_RENAME,
    FX_MEMIO_UNLINK,
    FX_MEMIO_SYNC_DIR,
    FX_MEMIO_NOPS,
} fx_memio_op;

/* Creates an empty file system in |*pm|. Returns 0 or -ENOMEM. */
int fx_memio_new(fx_memio **pm);

/* Frees |m| and every image; NULL does nothing. Handles die with it. */
void fx_memio_free(fx_memio *m);

/* The fx_sio to hand to the storage code. */
fx_sio *fx_memio_sio(fx_memio *m);

/* Makes the next |count| calls of kind |op| fail with |neg_errno| (such as
 * -EIO) without effect. A failing pwrite writes nothing. */
void fx_memio_fail(fx_memio *m, fx_memio_op op, int neg_errno, unsigned count);

/* Restricts the failures of fx_memio_fail() to calls on paths ending with
 * |suffix| (".index"); NULL or "" applies them to every call again. */
void fx_memio_fail_only(fx_memio *m, const char *suffix);

/* Limits the bytes all files may hold (sizes plus fallocate reservations) to
 * |bytes|; 0 removes the limit. A pwrite that does not fit writes what fits
 * and fails with -ENOSPC; fallocate beyond it fails with -ENOSPC. */
void fx_memio_set_capacity(fx_memio *m, uint64_t bytes);

/* Bytes currently held (as counted against the capacity). */
uint64_t fx_memio_used(const fx_memio *m);

/* After |n| more calls succeed, the next call and every later one fail with
 * -EIO and change nothing (the process has died mid-flight); fx_memio_crash()
 * ends that. */
void fx_memio_crash_after(fx_memio *m, uint64_t n);

/* Whether a crash_after point has been reached. */
bool fx_memio_is_down(const fx_memio *m);

/* How a power cut tears the bytes written since a file's last fdatasync.
 * In every model an in-place overwrite below the synced length persists
 * per 512-byte sector (a sector is written whole or not at all, as devices
 * guarantee; a page is not), and a truncation or an extension not yet
 * synced reaches the disk or not. For the appended bytes, in 4 KiB blocks
 * (pages written back as a unit; a block that does not persist reads as its
 * old contents, zeros past the synced length, as an unwritten extent does):
 *   PREFIX       a random prefix of them persists (the length anywhere
 *                between the synced one and the current one);
 *   ZERO_BLOCKS  the length is kept (the size update reached the journal
 *                first, as ext4 and XFS do with preallocated extents); a
 *                random number of leading blocks persist, the rest read as
 *                zeros, and one block among those may be zero too;
 *   REORDER      blocks are written out of order: each persists or not, at
 *                random, and the length is anywhere in between. */
typedef enum fx_memio_tear {
    FX_MEMIO_TEAR_PREFIX,
    FX_MEMIO_TEAR_ZERO_BLOCKS,
    FX_MEMIO_TEAR_REORDER,
} fx_memio_tear;

/* Simulates a power cut: every open handle is gone, every file's contents go
 * back to its last fdatasync image and the directory tree to its last synced
 * state. With |seed| non-zero, the unsynced contents of each file are torn
 * as |model| says, pseudo-randomly from the seed (directory entries are
 * never torn: a name is durable after its directory sync only). */
void fx_memio_crash_torn(fx_memio *m, fx_memio_tear model, uint64_t seed);

/* Sets the units of fx_memio_crash_torn: |block| bytes for appended data
 * (default 4096), |sector| bytes for overwrites (default 512); 0 restores a
 * default. Tests whose files are a few KiB scale them down so that one
 * unsynced stretch spans several blocks, as it does on a disk with larger
 * files. */
void fx_memio_set_tear_unit(fx_memio *m, size_t block, size_t sector);

/* fx_memio_crash_torn(m, FX_MEMIO_TEAR_PREFIX, torn_seed): with a zero seed
 * nothing unsynced survives. */
void fx_memio_crash(fx_memio *m, uint64_t torn_seed);

/* Simulates the death of the process (kill -9) without a power cut: every
 * open handle is gone and a crash_after point is cleared, but everything
 * written stays (it sat in the page cache), synced or not. */
void fx_memio_kill(fx_memio *m);

/* Number of calls made so far (all kinds). */
uint64_t fx_memio_calls(const fx_memio *m);
/* Number of calls of kind |op| made so far (those that failed included). */
uint64_t fx_memio_op_calls(const fx_memio *m, fx_memio_op op);

/* Holding a flush, to test what happens while one is in flight: the next
 * fdatasync waits, after its gate and its snapshot and before it takes
 * effect, until fx_memio_release(); wait_held returns once a sync is
 * waiting. Any thread. */
void fx_memio_hold_next_sync(fx_memio *m);
void fx_memio_wait_held(fx_memio *m);
void fx_memio_release(fx_memio *m);
/* Releases the held sync as fx_memio_release does, but it then fails with
 * |neg_errno| (such as -EIO) and makes nothing durable, as a device error
 * found during the flush. */
void fx_memio_release_failing(fx_memio *m, int neg_errno);

/* Test helpers acting on both images at once (as if the damage were on the
 * platter): XOR the byte at |off| of file |path| with |mask|; cut the file to
 * |len|; read its current length. Return 0 or -ENOENT/-EINVAL. */
int fx_memio_corrupt(fx_memio *m, const char *path, uint64_t off, uint8_t mask);
int fx_memio_cut(fx_memio *m, const char *path, uint64_t len);
int fx_memio_file_len(fx_memio *m, const char *path, uint64_t *plen);

#endif
