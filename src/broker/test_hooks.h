/* Test hooks of the broker: failure injection that only tests call (never
 * the daemon). Kept apart so the data plane carries no test code. Main
 * thread (or a test's thread), never from a broker loop. */
#ifndef FX_BROKER_TEST_HOOKS_H
#define FX_BROKER_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/broker.h"

/* TEST HOOK. Closes connections from the broker's side, as a network cut
 * seen by the client: every open connection, or with |only_subscribers|
 * only those with at least one live subscription. Each is closed with
 * application code 0x7e57 and reason "test hook: connection cut"; their
 * subscriptions are removed as for any closed connection. Waits until the
 * endpoint loop has done it. Returns how many were closed (>= 0), or
 * -ENOMEM, or -EINVAL (broker not started). */
int fx_broker_test_cut_connections(fx_broker *b, bool only_subscribers);

/* TEST HOOK. Makes worker loop |index| sleep |ms| milliseconds (a slow
 * worker: publishes and subscribes for its streams wait). Returns at once;
 * 0, -EINVAL (no such worker, broker not started) or -ENOMEM. */
int fx_broker_test_stall_worker(fx_broker *b, uint32_t index, unsigned ms);

#endif
