/* fx_grow: the one growth policy of our dynamic arrays and byte buffers
 * (doubling from a first capacity, overflow-checked realloc). Pure; any
 * thread (on the caller's own array). */
#ifndef FX_GROW_H
#define FX_GROW_H

#include <stddef.h>

/* Makes room for |need| elements of |size| bytes in the array |v| (NULL
 * when empty) whose capacity is |*pcap| elements. Returns |v| itself when
 * it has room; otherwise the reallocated array, whose capacity (written to
 * |*pcap|) is |*pcap| (or |first| when 0) doubled until it holds |need|.
 * Returns NULL on out-of-memory or overflow, with |v| still valid and
 * |*pcap| unchanged: the caller keeps the old array. |need| 0 counts as 1;
 * |first| 0 counts as 1. */
void *fx_grow(void *v, size_t *pcap, size_t need, size_t size, size_t first);

#endif
