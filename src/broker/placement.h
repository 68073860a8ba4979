/* fx_placement: which loop runs what, decided in one place from the config so
 * it never depends on luck (creation order, kernel hashing). A stream belongs
 * to worker handle_id % workers; QUIC endpoints go to io loops by role:
 * server endpoints spread over every io loop but the last, client endpoints
 * share the last, and a single io loop is shared by both roles.
 * io_threads = 0 runs QUIC on the worker loops (shared mode): server
 * endpoint k goes to worker k % workers and client endpoints to the last
 * worker. The broker creates exactly one server endpoint in this mode, so it
 * and every connection run on worker 0 (and the broker has no client
 * endpoints). Pure functions; any thread. */
#ifndef FX_BROKER_PLACEMENT_H
#define FX_BROKER_PLACEMENT_H

#include <stdint.h>

/* The worker that owns stream |handle_id| among |nworkers| (> 0): appends,
 * fans out and runs its feeders there. Returns handle_id % nworkers, or 0 if
 * |nworkers| is 0 (a configuration bug, asserted in debug builds). */
uint32_t fx_placement_worker_for(uint64_t handle_id, uint32_t nworkers);

/* How many worker loops `workers: auto` means on a host with |online_cpus|
 * CPUs: one per CPU but one, at least 1, at most 1024. The CPU left over runs
 * the kernel's UDP path and co-located clients; on the 2-core reference host
 * one worker (the streams on their connections' loop, no cross-thread hops)
 * beat two in throughput and latency alike (docs/performance.md, "Placement
 * and datagram defaults"). */
uint32_t fx_placement_auto_workers(long online_cpus);

typedef enum fx_loop_kind {
    FX_LOOP_KIND_IO = 0, /* one of the io_threads loops */
    FX_LOOP_KIND_WORKER, /* a worker loop (io_threads = 0, shared mode) */
} fx_loop_kind;

typedef struct fx_loop_slot {
    fx_loop_kind kind;
    uint32_t index; /* among the loops of that kind */
} fx_loop_slot;

typedef enum fx_endpoint_role {
    FX_ENDPOINT_SERVER = 0, /* accepts connections */
    FX_ENDPOINT_CLIENT,     /* dials out */
} fx_endpoint_role;

/* The loop for the |k|-th endpoint (0, 1, ...) of |role|, given |io_threads|
 * io loops and |nworkers| worker loops. With n io loops: n = 1 shares the one
 * loop; n >= 2 puts server endpoint k on loop k % (n - 1) and every client
 * endpoint on loop n - 1, so a client endpoint never lands next to a server
 * one, independent of creation order. With io_threads 0: server endpoint k on
 * worker k % nworkers, client endpoints on worker nworkers - 1. Returns 0 and
 * fills |*out|, or -EINVAL when no loop exists (io_threads 0, nworkers 0). */
int fx_placement_endpoint(fx_endpoint_role role, uint32_t k, uint32_t io_threads, uint32_t nworkers,
                          fx_loop_slot *out);

#endif
