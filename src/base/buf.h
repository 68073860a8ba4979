/* fx_buf: an immutable, atomically refcounted byte buffer. One allocation holds
 * the header and the bytes; fanout takes a reference per consumer instead of
 * copying, and the last fx_buf_unref() frees it, on whatever thread that is.
 * A buffer can also wrap memory owned elsewhere (a frame encoded by another
 * module) and hand it back through a free callback. Any thread. */
#ifndef FX_BUF_H
#define FX_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct fx_buf fx_buf;

/* Releases wrapped external memory: called once with the |data| and |len|
 * given to fx_buf_wrap() and its |user|, by the thread dropping the last
 * reference. */
typedef void (*fx_buf_free_cb)(void *data, size_t len, void *user);

/* Allocates a buffer of |len| bytes (uninitialized; 0 is allowed) with one
 * reference, stored in |*pb|. The creator may write the bytes through
 * fx_buf_data_mut() until it first shares the buffer (fx_buf_ref or hands it
 * to another thread); after that it is immutable.
 * Returns 0 or -ENOMEM (also when |len| overflows the allocation size).
 * The caller owns the reference. Any thread. */
int fx_buf_new(fx_buf **pb, size_t len);

/* Like fx_buf_new() and copies |len| bytes from |src| (NULL only if |len| is
 * 0). Returns 0 or -ENOMEM. Any thread. */
int fx_buf_new_copy(fx_buf **pb, const void *src, size_t len);

/* Wraps |len| bytes at |data| (not copied) in a new buffer with one reference.
 * Takes ownership of |data| on success: |on_free(data, len, user)| runs when the
 * last reference goes (|on_free| may be NULL for static memory). On failure
 * the caller keeps |data|. Returns 0 or -ENOMEM. Any thread. */
int fx_buf_wrap(fx_buf **pb, void *data, size_t len, fx_buf_free_cb on_free, void *user);

/* Adds a reference to |b| and returns it (NULL gives NULL). Any thread. */
fx_buf *fx_buf_ref(fx_buf *b);

/* Drops one reference; the last one frees the buffer (and runs the wrap
 * callback). NULL does nothing. Any thread. */
void fx_buf_unref(fx_buf *b);

/* The bytes (never NULL for a buffer from fx_buf_new, even when empty). */
const uint8_t *fx_buf_data(const fx_buf *b);

/* Writable bytes, for the creator before it shares |b|. Debug builds assert
 * that the caller holds the only reference. Not for wrapped buffers' readers. */
uint8_t *fx_buf_data_mut(fx_buf *b);

/* Length in bytes. */
size_t fx_buf_len(const fx_buf *b);

/* Current reference count (relaxed read: for tests and assertions only). */
size_t fx_buf_refcount(const fx_buf *b);

#endif
