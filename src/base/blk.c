/* The block cache (see blk.h): one LIFO list per size class, linked through
 * the blocks' headers, under its own mutex. It is touched once per block, so
 * a mutex costs nothing measurable next to filling the block. */
#include "base/blk.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define NCLASS (FX_BLK_MAX_CLASS - FX_BLK_MIN_CLASS + 1)
#define NO_CLASS 0xffu

/* Precedes the caller's bytes; its size keeps them 16-byte aligned. */
typedef struct hdr {
    alignas(16) unsigned cls; /* index into classes, or NO_CLASS */
    struct hdr *next;         /* while cached */
} hdr;
_Static_assert(sizeof(hdr) == 16, "the header keeps 16-byte alignment");

typedef struct klass {
    pthread_mutex_t mu;
    size_t bytes; /* cached in this class */
    hdr *head;    /* most recently freed first */
} klass;

static klass classes[NCLASS] = {
#define K                                                                                          \
    {                                                                                              \
        .mu = PTHREAD_MUTEX_INITIALIZER                                                            \
    }
    K, K, K, K, K, K, K, K, K, K, K, K, K,
#undef K
};
_Static_assert(NCLASS == 13, "one initializer per class");

static atomic_size_t cached_bytes;

static size_t class_size(unsigned cls)
{
    return (size_t)1 << (cls + FX_BLK_MIN_CLASS);
}

/* The smallest class holding |total| bytes, or NO_CLASS. */
static unsigned class_of(size_t total)
{
    if (total < class_size(0) / 2 || total > class_size(NCLASS - 1))
        return NO_CLASS; /* under 128 bytes: malloc's fast bins do well */
    unsigned c = 0;
    while (class_size(c) < total)
        c++;
    return c;
}

void *fx_blk_alloc(size_t len)
{
    if (len > SIZE_MAX - sizeof(hdr))
        return NULL;
    size_t total = len + sizeof(hdr);
    unsigned cls = class_of(total);
    hdr *h = NULL;
    if (cls != NO_CLASS) {
        klass *k = &classes[cls];
        pthread_mutex_lock(&k->mu);
        if (k->head != NULL) {
            h = k->head;
            k->head = h->next;
            k->bytes -= class_size(cls);
        }
        pthread_mutex_unlock(&k->mu);
        if (h != NULL)
            atomic_fetch_sub_explicit(&cached_bytes, class_size(cls), memory_order_relaxed);
        else
            h = malloc(class_size(cls));
    } else {
        h = malloc(total);
    }
    if (h == NULL)
        return NULL;
    h->cls = cls;
    return h + 1;
}

void fx_blk_free(void *p)
{
    if (p == NULL)
        return;
    hdr *h = (hdr *)p - 1;
    if (h->cls != NO_CLASS) {
        klass *k = &classes[h->cls];
        size_t sz = class_size(h->cls);
        pthread_mutex_lock(&k->mu);
        /* The global bound is read without its own lock: it may overshoot by
         * a block per concurrent freer, which is harmless. */
        bool kept =
            k->bytes + sz <= FX_BLK_CLASS_BYTES &&
            atomic_load_explicit(&cached_bytes, memory_order_relaxed) + sz <= FX_BLK_CACHE_BYTES;
        if (kept) {
            h->next = k->head;
            k->head = h;
            k->bytes += sz;
            atomic_fetch_add_explicit(&cached_bytes, sz, memory_order_relaxed);
        }
        pthread_mutex_unlock(&k->mu);
        if (kept)
            return;
    }
    free(h);
}

size_t fx_blk_cached_bytes(void)
{
    return atomic_load_explicit(&cached_bytes, memory_order_relaxed);
}

void fx_blk_trim(void)
{
    for (unsigned c = 0; c < NCLASS; c++) {
        klass *k = &classes[c];
        pthread_mutex_lock(&k->mu);
        while (k->head != NULL) {
            hdr *h = k->head;
            k->head = h->next;
            k->bytes -= class_size(c);
            atomic_fetch_sub_explicit(&cached_bytes, class_size(c), memory_order_relaxed);
            free(h);
        }
        pthread_mutex_unlock(&k->mu);
    }
}
