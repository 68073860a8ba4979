/* fx_placement: which loop runs what, decided in one place from the config so
 * it never depends on luck (creation order, kernel hashing), and shared by the
 * broker and libfelix (it depends on nothing else). A stream belongs
 * to worker handle_id % workers; QUIC endpoints go to io loops by role:
 * server endpoints spread over every io loop but the last, client endpoints
 * share the last, and a single io loop is shared by both roles.
 * io_threads = 0 runs QUIC on the worker loops (shared mode): server
 * endpoint k goes to worker k % workers and client endpoints to the last
 * worker. The broker creates exactly one server endpoint in this mode
 * (fx_placement_server_endpoints), so it and every connection run on worker
 * 0 (and the broker has no client endpoints). A client of libfelix gets the
 * pool's loops in turn. Pure functions; any thread. Every placement rule is
 * here: tests/lint/placement.sh fails the build's tests when their arithmetic
 * appears anywhere else. */
#ifndef FX_BASE_PLACEMENT_H
#define FX_BASE_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The worker that owns stream |handle_id| among |nworkers| (> 0): appends,
 * fans out and runs its feeders there. Returns handle_id % nworkers, or 0 if
 * |nworkers| is 0 (a configuration bug, asserted in debug builds). */
uint32_t fx_placement_worker_for(uint64_t handle_id, uint32_t nworkers);

/* The inverse pair of that rule, for a worker's table of its streams: the
 * position of stream |handle_id| in its worker's table (handle_id /
 * nworkers), and the stream at position |slot| of worker |worker|'s table
 * (slot * nworkers + worker). Both give 0 if |nworkers| is 0 (asserted). */
uint64_t fx_placement_worker_slot(uint64_t handle_id, uint32_t nworkers);
uint64_t fx_placement_stream_at(uint32_t worker, uint64_t slot, uint32_t nworkers);

/* The worker whose durable streams storage thread |storage| (0 .. nworkers
 * - 1) serves: one storage thread per worker, so a stream's appends, like
 * its fanout, have one home. Returns storage % nworkers, or 0 if |nworkers|
 * is 0 (asserted). */
uint32_t fx_placement_storage_worker(uint32_t storage, uint32_t nworkers);

/* A worker's share of a process-wide bound |total| split evenly over
 * |nworkers| (> 0) workers (cache_max_bytes over the workers' cache
 * stores): total / nworkers, at least 1; |total| if |nworkers| is 0
 * (asserted). */
uint64_t fx_placement_worker_share(uint64_t total, uint32_t nworkers);

/* How many worker loops `workers: auto` means on a host with |online_cpus|
 * CPUs: one per CPU but one, at least 1, at most 1024. The CPU left over runs
 * the kernel's UDP path and co-located clients; on the 2-core reference host
 * one worker (the streams on their connections' loop, no cross-thread hops)
 * beat two in throughput and latency alike (docs/performance.md, "Placement
 * and datagram defaults"). */
uint32_t fx_placement_auto_workers(long online_cpus);

/* The CPU worker |worker| is pinned to: CPU |worker| when |pin| (the
 * daemon's core_shards, fx_broker_opts.pin_workers), else -1 (not pinned:
 * the kernel schedules it). */
int fx_placement_worker_cpu(uint32_t worker, bool pin);

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

/* How many server endpoints a broker with |io_threads| io loops runs: one
 * (on worker 0 with io_threads 0, or on the one io loop), or with n >= 2 one
 * per io loop but the last (the one fx_placement_endpoint keeps for client
 * endpoints), members of one server group. */
uint32_t fx_placement_server_endpoints(uint32_t io_threads);

/* Most loops the client pool starts by default (FELIX_CLIENT_LOOPS unset). */
#define FX_PLACEMENT_CLIENT_LOOPS_MAX 4

/* The default size of libfelix's loop pool on a host with |online_cpus|
 * CPUs: one per CPU but one (left to the application's threads and a
 * co-located broker), at least 1, at most FX_PLACEMENT_CLIENT_LOOPS_MAX. */
size_t fx_placement_client_loops(long online_cpus);

/* The loop of the |nth| client (0, 1, ...) of a process among the pool's
 * |nloops| (> 0): round-robin, nth % nloops; 0 if |nloops| is 0 (asserted). */
size_t fx_placement_client_loop(uint64_t nth, size_t nloops);

#endif
