/* fx_grow (grow.h). */
#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *fx_grow(void *v, size_t *pcap, size_t need, size_t size, size_t first)
{
    if (need == 0)
        need = 1;
    if (v != NULL && need <= *pcap)
        return v;
    size_t cap = *pcap ? *pcap : (first ? first : 1);
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return NULL;
        cap *= 2;
    }
    if (size != 0 && cap > SIZE_MAX / size)
        return NULL;
    void *p = realloc(v, cap * size);
    if (p == NULL)
        return NULL;
    *pcap = cap;
    return p;
}
