/* fx_sio: the file-system calls durable storage makes, behind a small vtable,
 * so that every byte the log and the catalogue write goes through one place.
 * fx_sio_posix() is the real implementation (open/pwrite/pread/fdatasync/
 * fallocate/rename/unlink on the local file system); memio.h is an in-memory
 * one for tests that injects errors and simulates a power cut. A handle is a
 * small non-negative int (a file descriptor for the POSIX layer). All calls
 * return 0 (or a byte count) on success and -errno on failure. Thread: one
 * fx_sio may be used by one thread at a time unless the implementation says
 * otherwise (the POSIX one is stateless, any thread). */
#ifndef FX_STORAGE_SIO_H
#define FX_STORAGE_SIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct fx_sio fx_sio;

/* Open modes: read-only, read-write, or create a new file with mode 0600
 * (fails -EEXIST if the name exists). */
typedef enum fx_sio_mode {
    FX_SIO_READ = 0,
    FX_SIO_WRITE = 1,
    FX_SIO_CREATE = 2,
} fx_sio_mode;

/* Called once per entry name of a directory (not "." or ".."); |is_dir| is
 * false for a symbolic link, whatever it points to. Returning non-zero stops
 * the listing and is returned by list(). */
typedef int (*fx_sio_list_cb)(void *user, const char *name, bool is_dir);

typedef struct fx_sio_ops {
    /* Never opens through a symbolic link as the last component of |path|
     * (-ELOOP). */
    int (*open)(fx_sio *io, const char *path, fx_sio_mode mode, int *pfd);
    int (*close)(fx_sio *io, int fd);
    /* Writes all |n| bytes at |off| or fails; a failure may leave a part
     * written (the caller truncates). */
    int (*pwrite)(fx_sio *io, int fd, const void *buf, size_t n, uint64_t off);
    /* Reads up to |n| bytes at |off|; returns the count (short only at end of
     * file) or -errno. */
    ssize_t (*pread)(fx_sio *io, int fd, void *buf, size_t n, uint64_t off);
    int (*fdatasync)(fx_sio *io, int fd);
    /* Reserves |len| bytes from offset 0 without changing the file size
     * (FALLOC_FL_KEEP_SIZE). -EOPNOTSUPP when the file system cannot. */
    int (*fallocate)(fx_sio *io, int fd, uint64_t len);
    int (*ftruncate)(fx_sio *io, int fd, uint64_t len);
    int (*fsize)(fx_sio *io, int fd, uint64_t *psize);
    int (*rename)(fx_sio *io, const char *from, const char *to);
    int (*unlink)(fx_sio *io, const char *path);
    /* Creates directory |path| with mode 0700; -EEXIST if it exists. */
    int (*mkdir)(fx_sio *io, const char *path);
    int (*rmdir)(fx_sio *io, const char *path);
    /* Makes the entries of directory |path| (creates, renames, unlinks) durable. */
    int (*sync_dir)(fx_sio *io, const char *path);
    /* Lists directory |path|; a symbolic link at |path| is not followed
     * (-ELOOP or -ENOTDIR). */
    int (*list)(fx_sio *io, const char *path, fx_sio_list_cb cb, void *user);
    /* 0 if |path| exists, -ENOENT if not; *pis_dir tells whether it is a
     * directory. A symbolic link is not followed: it exists, and is not a
     * directory whatever it points to. */
    int (*stat)(fx_sio *io, const char *path, bool *pis_dir);
    /* Removes |path|: a directory with everything under it (depth first), a
     * file or a symbolic link itself. Never follows a symbolic link, at
     * |path| or below it. Returns 0; -ENOENT if |path| does not exist;
     * another -errno, having removed part of the tree, on failure. */
    int (*remove_tree)(fx_sio *io, const char *path);
} fx_sio_ops;

/* Implementations embed this as their first member. */
struct fx_sio {
    const fx_sio_ops *ops;
};

/* The local file system. Static; never freed. Any thread. */
fx_sio *fx_sio_posix(void);

/* Creates |path| and every missing parent (mkdir -p), syncing each parent
 * whose entries changed. Returns 0 or -errno. */
int fx_sio_mkdirs(fx_sio *io, const char *path);

/* Reads the whole file |path| into a malloc'd buffer (*pbuf, *plen; NUL
 * terminated, not counted), at most |max| bytes (-EFBIG beyond). The caller
 * frees *pbuf. Returns 0 or -errno. */
int fx_sio_read_file(fx_sio *io, const char *path, size_t max, char **pbuf, size_t *plen);

/* Replaces |path| atomically and durably with |len| bytes: writes
 * |path|.tmp, fdatasyncs it, renames it over |path| and syncs the directory.
 * Returns 0 or -errno (|path| then still holds its old contents). */
int fx_sio_write_file_atomic(fx_sio *io, const char *path, const void *buf, size_t len);

/* Removes directory |path| and everything under it (remove_tree: nothing
 * is followed through a symbolic link; a link at |path| is itself removed,
 * never its target), then syncs its parent directory. A missing |path| is
 * 0. Returns 0 or -errno. */
int fx_sio_remove_dir(fx_sio *io, const char *path);

#endif
