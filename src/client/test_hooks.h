/* Test hooks of libfelix, for tests and the benchmark harness only (not in
 * the public API): a client's link behind the QUIC transport's loss and
 * delay hooks. */
#ifndef FX_CLIENT_TEST_HOOKS_H
#define FX_CLIENT_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "felix/felix.h"
#include "quic/quic.h"

/* With |set|, puts client |c|'s link behind its endpoint's test hooks: each
 * datagram it receives is held |delay_ns|, and |drop_permille| per thousand
 * of those it sends and receives are dropped (0 and 0 heal it; datagrams
 * already held are still released at their time). Then reads the endpoint's
 * counters into |st| (may be NULL). Runs on |c|'s loop and waits up to 5 s
 * for it. Returns 0; FX_ECLOSED (the client has no endpoint: it is closing);
 * FX_ETIMEDOUT (the loop did not run the call in time); -ENOMEM; the delay
 * hook's error; FX_EWOULDBLOCK_LOOP on a client loop. Any thread but a
 * client loop. */
int fxc_client_test_link(fx_client *c, bool set, uint64_t delay_ns, uint32_t drop_permille,
                         fx_quic_stats *st);

#endif
