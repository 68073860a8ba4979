/* fx_rootlock: one broker per directory. It owns a lock file in the
 * directory (<root>/.lock for durable storage; mode 0600, holding the
 * holder's PID as text) and the flock on it: a broker takes it exclusively
 * on its durable storage root and on its state_dir before reading or
 * writing anything there, so a second broker on
 * the same directory refuses to start instead of "repairing" the live one's
 * logs; an offline reader (felix log) takes it shared. Taking it also checks
 * the directory as state_dir is checked: created 0700 when missing, owned by
 * the effective user, not writable by group or others. Blocking file system
 * calls: main thread or tools, never a loop. */
#ifndef FX_STORAGE_ROOTLOCK_H
#define FX_STORAGE_ROOTLOCK_H

#include <stddef.h>

/* The lock file's name in a durable storage root. */
#define FX_ROOTLOCK_FILE ".lock"

typedef struct fx_rootlock fx_rootlock;

/* Takes |dir| for this process alone: creates it and its missing parents
 * with mode 0700 (syncing the parents' entries), resolves it once to its
 * real path (the one symbolic link an operator may point a setting through;
 * nothing below it is followed), checks that it is a directory owned by the
 * effective user and not writable by group or others, then takes a
 * non-blocking exclusive flock on the lock file |dir|/|file| (created 0600,
 * never through a symbolic link) and writes this process's PID into it.
 * |what| names the setting in messages ("durable_storage_dir",
 * "state_dir"); two settings naming one directory need two |file| names. Returns 0 and
 * *|pl| (the caller frees it with fx_rootlock_free, which releases the
 * lock); -EBUSY when another process holds the lock (|why| names |dir| and
 * the PID the lock file holds); FX_ECONFIG when |dir| fails a check (|why|
 * says which and the fix); another -errno when it cannot be created,
 * resolved or opened. |why| (|whylen| bytes, may be NULL) gets a one-line
 * reason on failure. */
int fx_rootlock_take(fx_rootlock **pl, const char *dir, const char *file, const char *what,
                     char *why, size_t whylen);

/* Takes a shared flock on |dir|/.lock (FX_ROOTLOCK_FILE) for a reader that changes nothing, so
 * that no broker starts on |dir| while it reads. A |dir| without a lock file
 * (never opened by a broker, or a copy) needs no lock: 0 and *|pl| set all
 * the same. Returns 0; -EBUSY when a process holds the lock exclusively (a
 * broker is running on |dir|; |why| names it and the PID); -errno when the
 * lock file cannot be opened. Free *|pl| with fx_rootlock_free. */
int fx_rootlock_share(fx_rootlock **pl, const char *dir, char *why, size_t whylen);

/* The real path of the directory |l| guards (what fx_rootlock_take
 * resolved; as given for fx_rootlock_share). Lives as long as |l|. */
const char *fx_rootlock_path(const fx_rootlock *l);

/* Releases the lock and frees |l|; NULL does nothing. The lock file stays
 * (removing it would let a third process lock a new file while a second
 * still holds the old one). */
void fx_rootlock_free(fx_rootlock *l);

#endif
