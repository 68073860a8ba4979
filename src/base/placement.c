/* Placement rules (see placement.h). Kept as arithmetic on the config so the
 * rule can be stated, tested, and shown by the admin endpoint. Any thread. */
#include "base/placement.h"

#include <assert.h>
#include <errno.h>

uint32_t fx_placement_worker_for(uint64_t handle_id, uint32_t nworkers)
{
    assert(nworkers > 0);
    if (nworkers == 0)
        return 0;
    return (uint32_t)(handle_id % nworkers);
}

uint64_t fx_placement_worker_slot(uint64_t handle_id, uint32_t nworkers)
{
    assert(nworkers > 0);
    if (nworkers == 0)
        return 0;
    return handle_id / nworkers;
}

uint64_t fx_placement_stream_at(uint32_t worker, uint64_t slot, uint32_t nworkers)
{
    assert(nworkers > 0);
    if (nworkers == 0)
        return 0;
    return slot * nworkers + worker;
}

uint32_t fx_placement_auto_workers(long online_cpus)
{
    if (online_cpus <= 2)
        return 1;
    return online_cpus > 1025 ? 1024 : (uint32_t)(online_cpus - 1);
}

int fx_placement_worker_cpu(uint32_t worker, bool pin)
{
    return pin ? (int)worker : -1;
}

int fx_placement_endpoint(fx_endpoint_role role, uint32_t k, uint32_t io_threads, uint32_t nworkers,
                          fx_loop_slot *out)
{
    fx_loop_kind kind = io_threads > 0 ? FX_LOOP_KIND_IO : FX_LOOP_KIND_WORKER;
    uint32_t n = io_threads > 0 ? io_threads : nworkers;
    if (n == 0)
        return -EINVAL;
    uint32_t index;
    if (n == 1)
        index = 0;
    else if (kind == FX_LOOP_KIND_WORKER && role == FX_ENDPOINT_SERVER)
        index = k % n;
    else if (role == FX_ENDPOINT_CLIENT)
        index = n - 1;
    else
        index = k % (n - 1);
    *out = (fx_loop_slot){.kind = kind, .index = index};
    return 0;
}

uint32_t fx_placement_server_endpoints(uint32_t io_threads)
{
    return io_threads >= 2 ? io_threads - 1 : 1;
}

size_t fx_placement_client_loops(long online_cpus)
{
    long n = online_cpus - 1;
    return n < 1                               ? 1
           : n > FX_PLACEMENT_CLIENT_LOOPS_MAX ? FX_PLACEMENT_CLIENT_LOOPS_MAX
                                               : (size_t)n;
}

size_t fx_placement_client_loop(uint64_t nth, size_t nloops)
{
    assert(nloops > 0);
    if (nloops == 0)
        return 0;
    return (size_t)(nth % nloops);
}

uint64_t fx_placement_worker_share(uint64_t total, uint32_t nworkers)
{
    assert(nworkers > 0);
    uint64_t share = nworkers ? total / nworkers : total;
    return share > 0 ? share : 1;
}

uint32_t fx_placement_storage_worker(uint32_t storage, uint32_t nworkers)
{
    assert(nworkers > 0);
    return nworkers ? storage % nworkers : 0;
}
