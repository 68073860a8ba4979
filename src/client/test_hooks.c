/* libfelix's test hooks (see test_hooks.h). Any thread but a client loop. */
#include "client/test_hooks.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "client/client.h"

#define LINK_WAIT_NS (5 * FX_NS_PER_S) /* a client loop runs a posted call by then */

/* One call run on the client's loop, the only thread that may touch its
 * endpoint. Owned by the caller and the loop together and freed by the last
 * to let go, so a caller that gave up waiting on a hung loop leaves nothing
 * dangling. */
typedef struct link_call {
    fx_client *c;
    bool set;
    uint64_t delay_ns;
    uint32_t drop_permille;
    int rv;
    fx_quic_stats st;
    atomic_bool done;
    atomic_int refs;
} link_call;

static void link_put(link_call *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1)
        free(k);
}

static void link_on_loop(void *user)
{
    link_call *k = user;
    k->rv = FX_ECLOSED;
    if (k->c->ep != NULL) {
        k->rv = 0;
        if (k->set) {
            fx_quic_endpoint_set_test_drop(k->c->ep, k->drop_permille);
            k->rv = fx_quic_endpoint_set_test_delay(k->c->ep, k->delay_ns);
        }
        fx_quic_endpoint_get_stats(k->c->ep, &k->st);
    }
    atomic_store(&k->done, true);
    link_put(k);
}

int fxc_client_test_link(fx_client *c, bool set, uint64_t delay_ns, uint32_t drop_permille,
                         fx_quic_stats *st)
{
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    link_call *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    *k = (link_call){.c = c, .set = set, .delay_ns = delay_ns, .drop_permille = drop_permille};
    atomic_init(&k->done, false);
    atomic_init(&k->refs, 2); /* this caller and the loop */
    int rv = fx_loop_call(c->loop, link_on_loop, k);
    if (rv != 0) {
        free(k);
        return rv;
    }
    uint64_t end = fx_now_ns() + LINK_WAIT_NS;
    while (!atomic_load(&k->done) && fx_now_ns() < end)
        usleep(1000);
    rv = atomic_load(&k->done) ? k->rv : FX_ETIMEDOUT;
    if (rv == 0 && st != NULL)
        *st = k->st;
    link_put(k);
    return rv;
}
