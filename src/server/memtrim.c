/* The idle trimmer (memtrim.h). */
#include "server/memtrim.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/log.h"
#include "base/metrics.h"

void fx_memtrim_init(fx_memtrim *t, uint64_t idle_ns)
{
    *t = (fx_memtrim){.idle_ns = idle_ns};
}

size_t fx_memtrim_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (f == NULL)
        return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    if (n != 2)
        return 0;
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

uint64_t fx_memtrim_broker_activity(void)
{
    fx_metrics_snapshot *s = malloc(sizeof(*s));
    if (s == NULL)
        return 0; /* reads as a change: the idle clock restarts, nothing is trimmed */
    fx_metrics_snapshot_take(s);
    uint64_t v = s->c.quic_datagrams_in + s->c.quic_datagrams_out;
    free(s);
    return v;
}

void fx_memtrim_own_arena(void)
{
    void *p = malloc(FX_MEMTRIM_NUDGE_BYTES);
    if (p == NULL)
        return;
    /* The block is never used: keep the compiler from removing the pair. */
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
}

size_t fx_memtrim_free_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.fordblks;
}

static size_t rss_now(const fx_memtrim *t)
{
    return t->rss_fn != NULL ? t->rss_fn(t->arg) : fx_memtrim_rss_bytes();
}

static size_t free_now(const fx_memtrim *t)
{
    return t->free_fn != NULL ? t->free_fn(t->arg) : fx_memtrim_free_bytes();
}

static void set_threshold(const fx_memtrim *t, size_t bytes)
{
    if (t->threshold_fn != NULL)
        t->threshold_fn(t->arg, bytes);
    else if (mallopt(M_TRIM_THRESHOLD, (int)bytes) != 1)
        FX_LOG_WARN("server", "the C library refused M_TRIM_THRESHOLD %zu", bytes);
}

static void trim(fx_memtrim *t)
{
    size_t before = rss_now(t);
    if (t->arenas_fn != NULL)
        t->arenas_fn(t->arenas_arg);
    if (t->trim_fn != NULL)
        t->trim_fn(t->arg);
    else
        malloc_trim(0);
    size_t after = rss_now(t);
    t->rss_after = after;
    FX_COUNTER_INC(broker_allocator_trims);
    if (after < before)
        FX_COUNTER_ADD(broker_allocator_trimmed_bytes, before - after);
    FX_LOG_DEBUG("server",
                 "idle: returned %zu KiB of freed heap to the kernel (RSS %zu -> %zu KiB)",
                 before > after ? (before - after) >> 10 : 0, before >> 10, after >> 10);
}

int fx_memtrim_tick(fx_memtrim *t, uint64_t now_ns, uint64_t activity)
{
    if (t->idle_ns == 0)
        return 0;
    if (!t->started || activity != t->activity) {
        t->started = true;
        t->activity = activity;
        t->changed_ns = now_ns;
        t->idle = false;
        if (t->lowered) { /* traffic again: keep freed heap for it */
            set_threshold(t, t->retain_bytes);
            t->lowered = false;
        }
        return 0;
    }
    if (now_ns - t->changed_ns < t->idle_ns)
        return 0;
    size_t free_bytes = free_now(t);
    bool grown;
    if (!t->idle) { /* the first look at this idle period */
        t->idle = true;
        if (t->retain_bytes != 0) {
            set_threshold(t, FX_MEMTRIM_IDLE_THRESHOLD);
            t->lowered = true;
        }
        FX_COUNTER_INC(broker_allocator_idle_periods);
        /* RSS grew (a burst touched new pages), or heap was freed since
         * the last trim, also while datagrams moved (a client closing, a
         * stalled subscriber kicked): freeing never raises RSS. */
        grown = t->rss_after == 0 || rss_now(t) >= t->rss_after + FX_MEMTRIM_MIN_GROWTH ||
                free_bytes >= t->free_seen + FX_MEMTRIM_IDLE_GROWTH;
    } else {
        /* Against the free heap at the last trim (or its lowest since), so
         * that many small frees add up; or RSS grew since the last trim
         * while the free heap did not (freed pages touched again and freed
         * once more). */
        grown = free_bytes >= t->free_seen + FX_MEMTRIM_IDLE_GROWTH ||
                (t->rss_after != 0 && rss_now(t) >= t->rss_after + FX_MEMTRIM_MIN_GROWTH);
    }
    if (free_bytes < t->free_seen)
        t->free_seen = free_bytes;
    if (!grown)
        return 0;
    trim(t);
    t->free_seen = free_bytes;
    return 1;
}
