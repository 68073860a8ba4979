/* The broker's state directory (state_dir): where the generated TLS key and
 * certificate live, and under --dev the generated admin token. Created 0700
 * when missing; an existing one must be a directory owned by the broker's
 * user that nobody else can write, since whoever can write it can replace
 * the key; and one broker at a time uses it (a lock, storage/rootlock.h).
 * Blocking file system calls: main thread, at start. */
#ifndef FX_SERVER_STATEDIR_H
#define FX_SERVER_STATEDIR_H

#include <stdbool.h>
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

/* Name of the admin token file fx_state_dir_admin_token() keeps in a state
 * directory. */
#define FX_STATE_DIR_ADMIN_TOKEN_FILE "admin-token"
/* Length of a generated token: 32 random bytes as lower-case hex. */
#define FX_STATE_DIR_ADMIN_TOKEN_LEN 64

/* Reads the admin token kept in |dir|/admin-token into |token| (|cap|
 * bytes), or generates one the first time: 32 bytes of getrandom() as 64
 * hex digits and a newline, written mode 0600 through a fresh temporary and
 * linked into place (never replacing a file another start created in
 * between, never through a link). An existing file must be a regular file
 * (a symbolic link is refused) owned by the effective user that group and
 * others can neither read nor write, holding one token of bearer-token
 * characters (letters, digits, - . _ ~ + / =) of at most |cap| - 1 bytes and
 * an optional line end. |*pcreated| (may be NULL) says whether it was
 * generated now. Returns 0; FX_ECONFIG when the file fails a check; a
 * negative errno when it cannot be read or written. On failure |why|
 * (|whylen| bytes, may be NULL) names the file and the fix. Main thread, at
 * start (blocking file system calls). */
int fx_state_dir_admin_token(const char *dir, char *token, size_t cap, bool *pcreated, char *why,
                             size_t whylen);

#endif
