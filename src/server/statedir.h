/* The broker's state directory (state_dir): where the generated TLS key and
 * certificate live. Created 0700 when missing; an existing one must be a
 * directory owned by the broker's user that nobody else can write, since
 * whoever can write it can replace the key; and one broker at a time uses
 * it (a lock, storage/rootlock.h). Blocking file system calls: main thread,
 * at start. */
#ifndef FX_SERVER_STATEDIR_H
#define FX_SERVER_STATEDIR_H

#include <stddef.h>

#include "storage/rootlock.h"

/* The lock file in state_dir (not rootlock.h's ".lock", so that state_dir
 * may also be the durable storage root). */
#define FX_STATE_DIR_LOCK ".state.lock"

/* Creates |dir| and its missing parents with mode 0700, or checks the
 * existing |dir|: a directory (symbolic links are followed), owned by the
 * effective user, not writable by group or others. Returns 0; FX_ECONFIG
 * when an existing |dir| fails a check; a negative errno when it cannot be
 * created or examined. Either way |why| (|whylen| bytes, may be NULL) gets a
 * one-line reason naming |dir| and, for FX_ECONFIG, the fix. */
int fx_state_dir_prepare(const char *dir, char *why, size_t whylen);

/* fx_state_dir_prepare, then takes |dir| for this broker alone: an
 * exclusive lock on |dir|/.state.lock (0600, holding the PID), held until
 * fx_rootlock_free(*|plock|). Returns 0; what fx_state_dir_prepare returns;
 * -EBUSY when another process holds the lock (|why| names |dir| and the
 * PID); another -errno when the lock file cannot be opened or locked. */
int fx_state_dir_open(const char *dir, fx_rootlock **plock, char *why, size_t whylen);

#endif
