/* libfelix idempotent producer bookkeeping of one publish worker: the
 * per-stream sequences of its producer and the frames kept until answered
 * (sender.c freezes, sends, re-sends and releases them). Touches only the
 * worker's fxc_idem and the frames in it. Loop only. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint64_t fxc_idem_frame_rid(const pjob *j)
{
    return get_u64(j->frame + FX_WIRE_HEADER_LEN);
}

/* The names section of |j| (tenant, namespace, stream with their u16
 * lengths), which our own encoder wrote: it names the stream. */
static size_t names_len(const pjob *j, const uint8_t **pnames)
{
    size_t at = FX_WIRE_HEADER_LEN + FX_WIRE_IDEMPOTENT_PREFIX_LEN;
    size_t p = at;
    for (int i = 0; i < 3 && p + 2 <= j->len; i++)
        p += 2 + ((size_t)j->frame[p] << 8 | j->frame[p + 1]);
    *pnames = j->frame + at;
    return p <= j->len ? p - at : 0;
}

static fxc_seq *seq_find(fxc_idem *id, const uint8_t *key, size_t klen)
{
    for (fxc_seq *s = id->seqs; s != NULL; s = s->next)
        if (s->klen == klen && memcmp(s->key, key, klen) == 0)
            return s;
    fxc_seq *s = malloc(sizeof(*s) + klen);
    if (s == NULL)
        return NULL;
    s->next_seq = 0;
    s->klen = klen;
    memcpy(s->key, key, klen);
    s->next = id->seqs;
    id->seqs = s;
    return s;
}

int fxc_idem_freeze(fxc_idem *id, pjob *j)
{
    const uint8_t *key;
    size_t klen = names_len(j, &key);
    fxc_seq *s = seq_find(id, key, klen);
    if (s == NULL)
        return -ENOMEM;
    put_u64(j->frame + FXC_IDEM_PID_AT, id->pid);
    put_u64(j->frame + FXC_IDEM_SEQ_AT, s->next_seq++);
    j->pid = id->pid;
    j->rid = fxc_idem_frame_rid(j);
    j->knext = NULL;
    if (id->ktail != NULL)
        id->ktail->knext = j;
    else
        id->khead = j;
    id->ktail = j;
    if (id->resend == NULL)
        id->resend = j;
    return 0;
}

pjob *fxc_idem_take(fxc_idem *id, uint64_t rid)
{
    pjob *prev = NULL;
    for (pjob *j = id->khead; j != NULL; prev = j, j = j->knext) {
        if (j->rid != rid)
            continue;
        if (prev != NULL)
            prev->knext = j->knext;
        else
            id->khead = j->knext;
        if (id->ktail == j)
            id->ktail = prev;
        if (id->resend == j)
            id->resend = j->knext;
        j->knext = NULL;
        return j;
    }
    return NULL;
}

void fxc_idem_requeue(fxc_idem *id, pjob *j)
{
    j->knext = NULL;
    if (id->ktail != NULL)
        id->ktail->knext = j;
    else
        id->khead = j;
    id->ktail = j;
    if (id->resend == NULL)
        id->resend = j;
}

void fxc_idem_reset(fxc_idem *id)
{
    id->pid = 0;
    while (id->seqs != NULL) {
        fxc_seq *s = id->seqs;
        id->seqs = s->next;
        free(s);
    }
}

void fxc_idem_rewind(fxc_idem *id)
{
    id->resend = id->khead;
}

pjob *fxc_idem_clear(fxc_idem *id)
{
    pjob *all = id->khead;
    id->khead = id->ktail = id->resend = NULL;
    id->init_rid = 0;
    fxc_idem_reset(id);
    return all;
}
