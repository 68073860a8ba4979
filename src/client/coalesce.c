/* libfelix natural batching: while a publish stream's previous frame is
 * still being written, the worker pops the publishes queued behind it into
 * a group (same stream, same ack mode, binary) and sends the group as one
 * batch frame once QUIC has taken the earlier bytes. Each part keeps its
 * budget bytes (moved into the merged frame's permit) and its request
 * (chained, so each publish learns the merged frame's result). Loop only. */
#include <stdint.h>
#include <string.h>

#include "client/client.h"

/* Payload-entry bytes of |j| (4-byte lengths and payloads). */
static size_t entry_bytes(const pjob *j)
{
    return j->len - j->entries_off;
}

/* Bytes of the tenant/namespace/stream section of |j|. */
static size_t names_len(const pjob *j)
{
    return j->entries_off - 4 - j->names_off;
}

/* Most payload-entry bytes a frame merged after |h| may hold: the
 * coalescing bound, and what max_frame_bytes leaves after |h|'s prefix and
 * names. */
static size_t bytes_cap(const fx_client *c, const pjob *h)
{
    size_t cap = FX_PUBLISH_COALESCE_BYTES;
    size_t head = h->entries_off - FX_WIRE_HEADER_LEN;
    size_t room = c->o.max_frame_bytes > head ? c->o.max_frame_bytes - head : 0;
    return cap < room ? cap : room;
}

bool fxc_coalesce_fits(const pworker *w, const pjob *j)
{
    const pjob *h = w->ghead;
    if (h == NULL)
        return true;
    if (!h->merge || !j->merge || h->wack != j->wack || w->next != NULL)
        return false;
    if (w->gmsgs + j->count > FX_WIRE_BATCH_MAX_MESSAGES ||
        w->gbytes + entry_bytes(j) > bytes_cap(w->c, h))
        return false;
    return names_len(h) == names_len(j) &&
           memcmp(h->frame + h->names_off, j->frame + j->names_off, names_len(h)) == 0;
}

void fxc_coalesce_add(pworker *w, pjob *j)
{
    j->gnext = NULL;
    if (w->gtail != NULL)
        w->gtail->gnext = j;
    else
        w->ghead = j;
    w->gtail = j;
    w->gjobs++;
    w->gmsgs += j->count;
    w->gbytes += j->merge ? entry_bytes(j) : j->len;
}

bool fxc_coalesce_full(const pworker *w)
{
    const pjob *h = w->ghead;
    if (h == NULL)
        return false;
    return !h->merge || w->next != NULL || w->gmsgs >= FX_WIRE_BATCH_MAX_MESSAGES ||
           w->gbytes >= bytes_cap(w->c, h);
}

static void group_reset(pworker *w)
{
    w->ghead = w->gtail = NULL;
    w->gjobs = w->gmsgs = w->gbytes = 0;
}

/* Takes the first job out of the group. */
static pjob *take_first(pworker *w)
{
    pjob *j = w->ghead;
    w->ghead = j->gnext;
    if (w->ghead == NULL)
        w->gtail = NULL;
    w->gjobs--;
    w->gmsgs -= j->count;
    w->gbytes -= j->merge ? entry_bytes(j) : j->len;
    j->gnext = NULL;
    return j;
}

/* Writes the merged frame of the group into |m|: the first part's header,
 * ack prefix and names, then every part's entries. */
static void write_merged(const pworker *w, pjob *m)
{
    const pjob *h = w->ghead;
    memcpy(m->frame, h->frame, h->entries_off);
    fx_put32(m->frame + 8, (uint32_t)(m->len - FX_WIRE_HEADER_LEN));
    fx_put32(m->frame + h->entries_off - 4, (uint32_t)w->gmsgs);
    uint8_t *p = m->frame + h->entries_off;
    for (const pjob *j = h; j != NULL; j = j->gnext) {
        memcpy(p, j->frame + j->entries_off, entry_bytes(j));
        p += entry_bytes(j);
    }
    m->count = (uint32_t)w->gmsgs;
    m->calls = (uint32_t)w->gjobs;
    m->names_off = h->names_off;
    m->entries_off = h->entries_off;
    m->wack = h->wack;
    m->merge = false;
    m->enq_ns = h->enq_ns;
}

/* Moves every part's permit and request into |m| and releases the parts. */
static void absorb_parts(pworker *w, pjob *m)
{
    fx_client *c = w->c;
    m->permit = (fx_permit){.budget = w->ghead->permit.budget, .n = 0};
    preq **tail = &m->req;
    /* The merged job is counted before its parts are released, so
     * fx_flush never sees zero in between. */
    atomic_fetch_add(&c->outstanding, 1);
    for (pjob *j = w->ghead, *nx; j != NULL; j = nx) {
        nx = j->gnext;
        m->permit.n += j->permit.n;
        j->permit = (fx_permit){0};
        if (j->req != NULL) {
            *tail = j->req;
            tail = &j->req->grp;
            j->req = NULL;
        }
        fxc_pub_job_put(j); /* nothing left to give back: frees the part */
    }
    *tail = NULL;
}

void fxc_coalesce_take(pworker *w, pjob **pj)
{
    if (w->gjobs == 1) {
        *pj = take_first(w);
        return;
    }
    const pjob *h = w->ghead;
    pjob *m = fxc_pub_job_alloc(w->c, h->entries_off + w->gbytes);
    if (m == NULL) {
        *pj = take_first(w); /* no memory to merge: one at a time */
        return;
    }
    write_merged(w, m);
    absorb_parts(w, m);
    group_reset(w);
    *pj = m;
}

void fxc_coalesce_drain(pworker *w, void (*fn)(pjob *j, void *user), void *user)
{
    pjob *j = w->ghead;
    group_reset(w);
    while (j != NULL) {
        pjob *nx = j->gnext;
        j->gnext = NULL;
        fn(j, user);
        j = nx;
    }
    if (w->next != NULL) {
        pjob *n = w->next;
        w->next = NULL;
        fn(n, user);
    }
}
