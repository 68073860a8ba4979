/* The consumer groups of the broker's `groups:` key, created on the broker
 * once it has started (after the streams of `streams:`), so that a
 * configured group exists before the first client arrives. Main thread,
 * at start. */
#ifndef FX_SERVER_PREGROUPS_H
#define FX_SERVER_PREGROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"
#include "server/config.h"

/* Creates every group of |c|->groups on started broker |b|, in order: its
 * stream first when the broker has none of that name (in memory, as a
 * stream of `streams:`), then the group at its start (a group that exists
 * already is left where it is). Each broker call waits at most |timeout_ns|.
 * Returns 0, or at the first entry that fails the broker's error
 * (FX_ESTORAGE_ERROR: a durable stream's log is not open; FX_EFULL,
 * FX_ECURSOR_IN_FUTURE, FX_EWIRE_NAME, FX_ETIMEDOUT, -ENOMEM, ...) with a
 * sentence naming the entry in |why| (|n| bytes). Groups created before the
 * failure stay. Main thread. */
int fx_pregroups_create(fx_broker *b, const fx_config *c, uint64_t timeout_ns, char *why, size_t n);

#endif
