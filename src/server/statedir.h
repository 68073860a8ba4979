/* The broker's state directory (state_dir): where the generated TLS key and
 * certificate live. Created 0700 when missing; an existing one must be a
 * directory owned by the broker's user that nobody else can write, since
 * whoever can write it can replace the key. Blocking file system calls:
 * main thread, at start. */
#ifndef FX_SERVER_STATEDIR_H
#define FX_SERVER_STATEDIR_H

#include <stddef.h>

/* Creates |dir| and its missing parents with mode 0700, or checks the
 * existing |dir|: a directory (symbolic links are followed), owned by the
 * effective user, not writable by group or others. Returns 0; FX_ECONFIG
 * when an existing |dir| fails a check; a negative errno when it cannot be
 * created or examined. Either way |why| (|whylen| bytes, may be NULL) gets a
 * one-line reason naming |dir| and, for FX_ECONFIG, the fix. */
int fx_state_dir_prepare(const char *dir, char *why, size_t whylen);

#endif
