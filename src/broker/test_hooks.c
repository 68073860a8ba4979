/* Broker test hooks (see test_hooks.h). The work runs on the endpoint loop,
 * which owns the connection list; the caller waits for it. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "broker/broker_internal.h"
#include "broker/test_hooks.h"

#define CUT_CODE 0x7e57u

typedef struct cut_req {
    fx_broker *b;
    bool only_subscribers;
    int n;
    bool done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} cut_req;

static void cut_on_loop(void *user)
{
    cut_req *r = user;
    /* fx_quic_conn_close defers on_conn_closed to the end of the loop turn,
     * so the list does not change while we walk it. */
    for (fxb_conn *c = r->b->conns; c != NULL; c = c->cnext) {
        if (c->qc == NULL || c->dead || (r->only_subscribers && c->subs == NULL))
            continue;
        fx_quic_conn_close(c->qc, CUT_CODE, "test hook: connection cut");
        r->n++;
    }
    pthread_mutex_lock(&r->mu);
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int fx_broker_test_cut_connections(fx_broker *b, bool only_subscribers)
{
    if (b == NULL || !b->started || b->stopped)
        return -EINVAL;
    cut_req r = {.b = b, .only_subscribers = only_subscribers};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int rv = fx_loop_call(b->ep_loop, cut_on_loop, &r);
    if (rv == 0) {
        pthread_mutex_lock(&r.mu);
        while (!r.done)
            pthread_cond_wait(&r.cv, &r.mu);
        pthread_mutex_unlock(&r.mu);
        rv = r.n;
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return rv;
}

static void stall_on_loop(void *user)
{
    usleep((useconds_t)(uintptr_t)user * 1000u);
}

int fx_broker_test_stall_worker(fx_broker *b, uint32_t index, unsigned ms)
{
    if (b == NULL || !b->started || b->stopped || index >= b->nworkers)
        return -EINVAL;
    return fx_loop_call(b->workers[index].loop, stall_on_loop, (void *)(uintptr_t)ms);
}
