/* Filesystem helpers on the real filesystem: mkdir -p and the atomic
 * replace of a small file (temporary, fsync, rename, directory fsync).
 * Blocking calls: main thread or tools, never a loop. (The log store's
 * copies go through its own injectable I/O layer, src/storage/sio.h.) */
#ifndef FX_FSUTIL_H
#define FX_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Creates |path| and every missing parent with |mode| (mkdir -p); levels
 * that exist as directories are left alone. Returns 0 or -errno
 * (-ENOTDIR when a level is something else, -ENAMETOOLONG beyond
 * PATH_MAX); on failure |failed| (|cap| bytes, may be NULL) names the level
 * that could not be created. */
int fx_mkdirs(const char *path, mode_t mode, char *failed, size_t cap);

/* fx_file_write_atomic flags. */
#define FX_FILE_EXACT_MODE 0x1u /* |mode| exactly (fchmod): the umask cannot widen or narrow it */
#define FX_FILE_NO_REPLACE 0x2u /* refuse (-EEXIST) when |path| exists, never replace it */

/* Writes |len| bytes of |data| to |path| so that a crash leaves the old file
 * or the new one, never a mix: through "<path>.tmp", created with O_EXCL |
 * O_NOFOLLOW (a stale temporary is removed first; a file or link that takes
 * its place in between fails the call, nothing is written through it) and
 * |mode| (masked by the umask unless FX_FILE_EXACT_MODE), fsync'd, then
 * renamed (or, with FX_FILE_NO_REPLACE, linked) onto |path| and the
 * directory fsync'd. Returns 0 or -errno; on failure the temporary is gone
 * and |path| is as it was. */
int fx_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         unsigned flags);

#endif
