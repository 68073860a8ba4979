/* Returning freed heap to the kernel once the broker goes idle.
 *
 * Under load the broker keeps freed heap (allocator_retain_bytes) so that a
 * burst does not fault its buffers in again and again. That memory is only
 * worth keeping while traffic flows: after a peak (a stalled lossless
 * subscriber, a burst of large frames) glibc would otherwise hold the peak's
 * heap for the rest of the process's life. The idle trimmer watches a
 * monotonic activity count (datagrams sent and received); once it has not
 * moved for allocator_idle_trim_ms it calls malloc_trim(0), which gives back
 * every whole free page of every arena, when one of two things says there is
 * something to give back: at the start of an idle period, RSS has grown by
 * FX_MEMTRIM_MIN_GROWTH or the free heap by FX_MEMTRIM_IDLE_GROWTH since the
 * last trim (so a client that publishes every few seconds does not pay for a
 * trim each time); later in the same idle
 * period, the free heap has grown by FX_MEMTRIM_IDLE_GROWTH since the last
 * trim or the first look (the broker
 * frees memory while no datagram moves: a stream expiring, retention, a
 * stalled subscriber closed), or RSS by FX_MEMTRIM_MIN_GROWTH since the last
 * trim. While idle it also lowers glibc's trim
 * threshold from allocator_retain_bytes to FX_MEMTRIM_IDLE_THRESHOLD,  and
 * puts it back at the first tick that sees a datagram: malloc_trim madvises free chunks of
 * every arena but shrinks the top of the main arena only, and a thread
 * arena's top gives its pages back only when a free of 64 KiB or more into
 * that arena finds the top over the threshold, so a peak's top stays
 * resident for good under a 64 MiB threshold (measured: 2-4 MB of a 9 MB
 * idle broker, varying cycle to cycle). An idle thread may make no such free
 * (measured: one arena 2.5 MB resident with 0.24 MB in use after the trim,
 * 1 cycle of 80 in a 30-minute soak), so before each trim every broker
 * thread frees a FX_MEMTRIM_NUDGE_BYTES block into its own arena
 * (fx_memtrim_own_arena, run there through |arenas_fn|). Counted in
 * felix_broker_allocator_idle_periods_total, felix_broker_allocator_trims_total
 * and felix_broker_allocator_trimmed_bytes_total.
 *
 * One thread drives a trimmer (felix-broker's main thread, between signals). */
#ifndef FX_SERVER_MEMTRIM_H
#define FX_SERVER_MEMTRIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RSS growth since the last trim below which a new idle period does not
 * trim. */
#define FX_MEMTRIM_MIN_GROWTH ((size_t)1 << 20)
/* Free-heap growth, since the last trim or the first look at the idle period
 * (or its lowest since), below which a later tick of it does not trim. */
#define FX_MEMTRIM_IDLE_GROWTH ((size_t)256 << 10)
/* glibc's trim threshold while idle (its own default). */
#define FX_MEMTRIM_IDLE_THRESHOLD ((size_t)128 << 10)
/* The block each thread frees into its arena before a trim: at least glibc's
 * 64 KiB (FASTBIN_CONSOLIDATION_THRESHOLD), above which a free checks the
 * arena's top against the trim threshold, and under the mmap threshold
 * (128 KiB by default, 4 MiB with allocator_retain_bytes), so that it comes
 * from the arena. */
#define FX_MEMTRIM_NUDGE_BYTES ((size_t)96 << 10)

typedef struct fx_memtrim {
    uint64_t idle_ns;    /* 0: never trims */
    uint64_t activity;   /* the count at the last tick */
    uint64_t changed_ns; /* when it last moved */
    bool idle;           /* the current idle period has been looked at */
    bool started;        /* a first tick has run */
    size_t rss_after;    /* RSS after the last trim (0: none yet) */
    size_t free_seen;    /* free heap at the last trim or first idle look, or lowest since */
    size_t retain_bytes; /* M_TRIM_THRESHOLD under load (0: not set) */
    bool lowered;        /* the idle threshold is in effect */
    /* Before each trim: has every thread that allocates run
     * fx_memtrim_own_arena on itself, and returns once they have or after a
     * bound (NULL: no thread arena's top is trimmed; malloc_trim still
     * shrinks the main arena's top and frees pages inside every arena). */
    void (*arenas_fn)(void *arenas_arg);
    void *arenas_arg;
    /* Tests only: replace the readings and the trim (NULL: the real ones). */
    size_t (*rss_fn)(void *arg);
    size_t (*free_fn)(void *arg);
    void (*trim_fn)(void *arg);
    void (*threshold_fn)(void *arg, size_t bytes);
    void *arg;
} fx_memtrim;

/* Sets up |t| to trim after |idle_ns| without activity (0: never). */
void fx_memtrim_init(fx_memtrim *t, uint64_t idle_ns);

/* Looks at |activity| (any count that moves whenever the broker works) at
 * time |now_ns|. Returns 1 if it trimmed, 0 if not. */
int fx_memtrim_tick(fx_memtrim *t, uint64_t now_ns, uint64_t activity);

/* The broker's activity count: UDP datagrams received plus sent, from the
 * metrics registry. Any thread. */
uint64_t fx_memtrim_broker_activity(void);

/* The process's resident set in bytes (/proc/self/statm), 0 if unreadable. */
size_t fx_memtrim_rss_bytes(void);

/* Frees a FX_MEMTRIM_NUDGE_BYTES block into the calling thread's arena, so
 * that the arena's top goes back to the kernel down to the trim threshold.
 * Any thread. */
void fx_memtrim_own_arena(void);

/* Free bytes the allocator holds in its arenas (mallinfo2's fordblks). Walks
 * every arena under its lock: for idle moments. */
size_t fx_memtrim_free_bytes(void);

#endif
