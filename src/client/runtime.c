/* The process-wide client loops: a small pool of fx_loop threads shared by
 * every fx_client of the process. Each client (with all its connections)
 * lives on one loop, given out round-robin (fx_placement_client_loop), so a
 * process with several clients encrypts, decrypts and dispatches on several
 * cores. A loop starts when the round-robin first reaches it (a process with
 * one client has one loop thread); all stop when the last client is closed.
 * FELIX_CLIENT_LOOPS sets the pool size, read when the pool is empty
 * (default fx_placement_client_loops: one per online CPU but one, at least 1
 * and at most 4, leaving a CPU to the application's threads and a co-located
 * broker: on 2 CPUs one loop beat two in every cell of docs/performance.md,
 * "Client loops"). Any thread except the loops themselves. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/placement.h"
#include "client/client.h"

#define FX_RT_MAX_LOOPS 64

static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static fx_loop *rt_loops[FX_RT_MAX_LOOPS]; /* NULL until first given out */
static size_t rt_nloops;                   /* pool size; 0 = no pool */
static size_t rt_next;
static size_t rt_refs;
/* Compared by address only, never dereferenced outside rt_mu. */
static _Atomic(fx_loop *) rt_cur[FX_RT_MAX_LOOPS];

bool fxc_rt_is_current(void)
{
    fx_loop *cur = fx_loop_current();
    if (cur == NULL)
        return false;
    /* Loops start in index order, so the first empty slot ends the scan. */
    for (size_t i = 0; i < FX_RT_MAX_LOOPS; i++) {
        fx_loop *l = atomic_load_explicit(&rt_cur[i], memory_order_relaxed);
        if (l == cur)
            return true;
        if (l == NULL)
            return false;
    }
    return false;
}

/* The pool size from FELIX_CLIENT_LOOPS. Returns 0 or -EINVAL (with the
 * thread's error text set). */
static int pool_size(size_t *pn)
{
    const char *v = getenv("FELIX_CLIENT_LOOPS");
    if (v == NULL || *v == '\0') {
        *pn = fx_placement_client_loops(sysconf(_SC_NPROCESSORS_ONLN));
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > FX_RT_MAX_LOOPS || v[0] == '-')
        return fxc_client_set_error(-EINVAL, "FELIX_CLIENT_LOOPS='%s': expected an integer 1..%d",
                                    v, FX_RT_MAX_LOOPS);
    *pn = n;
    return 0;
}

static void pool_stop(void)
{
    for (size_t i = 0; i < rt_nloops; i++) {
        if (rt_loops[i] == NULL)
            continue;
        /* Stopping joins the thread; the inbox is run first, so any task a
         * closing client posted has finished when this returns. */
        atomic_store(&rt_cur[i], NULL);
        fx_loop_stop(rt_loops[i]);
        fx_loop_free(rt_loops[i]);
        rt_loops[i] = NULL;
    }
    rt_nloops = 0;
}

/* Starts loop |i| of the pool. Returns 0 or -errno/-ENOMEM. */
static int loop_start(size_t i)
{
    char name[16];
    snprintf(name, sizeof(name), i == 0 ? "felix-client" : "felix-client%zu", i);
    fx_loop *l = NULL;
    int rv = fx_loop_new(&l, &(fx_loop_opts){.name = name, .cpu = -1});
    if (rv == 0 && (rv = fx_loop_start(l)) != 0)
        fx_loop_free(l);
    if (rv != 0)
        return rv;
    rt_loops[i] = l;
    atomic_store(&rt_cur[i], l);
    return 0;
}

int fxc_rt_acquire(fx_loop **ploop)
{
    int rv = 0;
    pthread_mutex_lock(&rt_mu);
    if (rt_nloops == 0) {
        rv = pool_size(&rt_nloops);
        rt_next = 0;
    }
    size_t i = rv == 0 ? fx_placement_client_loop(rt_next, rt_nloops) : 0;
    if (rv == 0 && rt_loops[i] == NULL)
        rv = loop_start(i);
    if (rv == 0) {
        rt_next++;
        rt_refs++;
        *ploop = rt_loops[i];
    } else if (rt_refs == 0) {
        pool_stop(); /* nothing uses the pool: read the size again next time */
    }
    pthread_mutex_unlock(&rt_mu);
    return rv;
}

void fxc_rt_release(void)
{
    pthread_mutex_lock(&rt_mu);
    if (--rt_refs == 0)
        pool_stop();
    pthread_mutex_unlock(&rt_mu);
}
