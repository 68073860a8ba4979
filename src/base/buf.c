/* Refcounted immutable byte buffers: one malloc for header and bytes (or a
 * header pointing at wrapped external memory). The count is atomic so the
 * last reference can be dropped on any thread. */
#include "base/buf.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct fx_buf {
    atomic_size_t refs;
    size_t len;
    uint8_t *data; /* points at bytes[] or at wrapped memory */
    fx_buf_free_cb on_free;
    void *user;
    uint8_t bytes[];
};

static fx_buf *alloc_buf(size_t inline_len)
{
    if (inline_len > SIZE_MAX - sizeof(fx_buf))
        return NULL;
    fx_buf *b = malloc(sizeof(*b) + inline_len);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = inline_len;
    b->data = b->bytes;
    b->on_free = NULL;
    b->user = NULL;
    return b;
}

int fx_buf_new(fx_buf **pb, size_t len)
{
    fx_buf *b = alloc_buf(len);
    if (b == NULL)
        return -ENOMEM;
    *pb = b;
    return 0;
}

int fx_buf_new_copy(fx_buf **pb, const void *src, size_t len)
{
    int rv = fx_buf_new(pb, len);
    if (rv == 0 && len > 0)
        memcpy((*pb)->bytes, src, len);
    return rv;
}

int fx_buf_wrap(fx_buf **pb, void *data, size_t len, fx_buf_free_cb on_free, void *user)
{
    fx_buf *b = alloc_buf(0);
    if (b == NULL)
        return -ENOMEM;
    b->len = len;
    b->data = data;
    b->on_free = on_free;
    b->user = user;
    *pb = b;
    return 0;
}

fx_buf *fx_buf_ref(fx_buf *b)
{
    if (b != NULL)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void fx_buf_unref(fx_buf *b)
{
    if (b == NULL)
        return;
    /* acq_rel rather than release plus a fence: the freeing thread must see
     * every other holder's reads finished, and TSan understands this form. */
    size_t old = atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel);
    assert(old > 0);
    if (old != 1)
        return;
    if (b->on_free != NULL)
        b->on_free(b->data, b->len, b->user);
    free(b);
}

const uint8_t *fx_buf_data(const fx_buf *b)
{
    return b->data;
}

uint8_t *fx_buf_data_mut(fx_buf *b)
{
    assert(atomic_load_explicit(&b->refs, memory_order_relaxed) == 1);
    return b->data;
}

size_t fx_buf_len(const fx_buf *b)
{
    return b->len;
}

size_t fx_buf_refcount(const fx_buf *b)
{
    return atomic_load_explicit(&b->refs, memory_order_relaxed);
}
