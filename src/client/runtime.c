/* The process-wide client loop: one fx_loop thread shared by every fx_client
 * of the process, started when the first client connects and stopped when
 * the last one is closed. Any thread except the loop itself. */
#include <errno.h>
#include <pthread.h>

#include "client/client.h"

static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static fx_loop *rt_loop;
static size_t rt_refs;
/* Compared by address only, never dereferenced outside rt_mu. */
static _Atomic(fx_loop *) rt_cur;

bool fx_rt_is_current(void)
{
    fx_loop *cur = fx_loop_current();
    return cur != NULL && cur == atomic_load(&rt_cur);
}

int fx_rt_acquire(fx_loop **ploop)
{
    int rv = 0;
    pthread_mutex_lock(&rt_mu);
    if (rt_loop == NULL) {
        rv = fx_loop_new(&rt_loop, &(fx_loop_opts){.name = "felix-client", .cpu = -1});
        if (rv == 0) {
            rv = fx_loop_start(rt_loop);
            if (rv != 0) {
                fx_loop_free(rt_loop);
                rt_loop = NULL;
            }
        } else {
            rt_loop = NULL;
        }
    }
    if (rv == 0) {
        rt_refs++;
        *ploop = rt_loop;
        atomic_store(&rt_cur, rt_loop);
    }
    pthread_mutex_unlock(&rt_mu);
    return rv;
}

void fx_rt_release(void)
{
    pthread_mutex_lock(&rt_mu);
    if (--rt_refs == 0) {
        /* Stopping joins the thread; the inbox is run first, so any task a
         * closing client posted has finished when this returns. */
        atomic_store(&rt_cur, NULL);
        fx_loop_stop(rt_loop);
        fx_loop_free(rt_loop);
        rt_loop = NULL;
    }
    pthread_mutex_unlock(&rt_mu);
}
