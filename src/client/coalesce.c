/* libfelix natural batching: while a publish stream's previous frame is
 * still being written, the worker pops the publishes queued behind it into
 * a group (same stream, same ack mode, binary) and sends the group as one
 * batch frame once QUIC has taken the earlier bytes. The merged frame is
 * built by src/wire's batch builder; its parts' budget bytes and requests
 * move into it through fxc_pub_job_absorb (sender.c). Touches only its
 * fxc_group and the jobs in it. Loop only. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "client/client.h"

/* Payload-entry bytes of |j| (4-byte lengths and payloads). */
static size_t entry_bytes(const pjob *j)
{
    return fx_wire_batch_entries_len(j->len, j->marks);
}

/* Most payload-entry bytes a frame merged after |h| may hold: the
 * coalescing bound, and what max_frame_bytes leaves after |h|'s prefix and
 * names. */
static size_t bytes_cap(const fxc_group *g, const pjob *h)
{
    size_t cap = FX_PUBLISH_COALESCE_BYTES;
    size_t room = fx_wire_batch_entries_room(h->marks, g->max_body);
    return cap < room ? cap : room;
}

void fxc_coalesce_init(fxc_group *g, size_t max_body)
{
    *g = (fxc_group){.max_body = max_body};
}

bool fxc_coalesce_fits(const fxc_group *g, const pjob *j)
{
    const pjob *h = g->head;
    if (h == NULL)
        return true;
    if (!h->merge || !j->merge || h->wack != j->wack || g->next != NULL)
        return false;
    if (g->msgs + j->count > FX_WIRE_BATCH_MAX_MESSAGES ||
        g->bytes + entry_bytes(j) > bytes_cap(g, h))
        return false;
    fx_wire_slice a = fx_wire_batch_names(h->frame, h->marks);
    fx_wire_slice b = fx_wire_batch_names(j->frame, j->marks);
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

void fxc_coalesce_add(fxc_group *g, pjob *j)
{
    j->gnext = NULL;
    if (g->tail != NULL)
        g->tail->gnext = j;
    else
        g->head = j;
    g->tail = j;
    g->jobs++;
    g->msgs += j->count;
    g->bytes += j->merge ? entry_bytes(j) : j->len;
}

bool fxc_coalesce_full(const fxc_group *g)
{
    const pjob *h = g->head;
    if (h == NULL)
        return false;
    return !h->merge || g->next != NULL || g->msgs >= FX_WIRE_BATCH_MAX_MESSAGES ||
           g->bytes >= bytes_cap(g, h);
}

static void group_reset(fxc_group *g)
{
    g->head = g->tail = NULL;
    g->jobs = g->msgs = g->bytes = 0;
}

/* Takes the first job out of the group. */
static pjob *take_first(fxc_group *g)
{
    pjob *j = g->head;
    g->head = j->gnext;
    if (g->head == NULL)
        g->tail = NULL;
    g->jobs--;
    g->msgs -= j->count;
    g->bytes -= j->merge ? entry_bytes(j) : j->len;
    j->gnext = NULL;
    return j;
}

/* Writes the merged frame of the group into |m|: the first part's header,
 * ack prefix and names, then every part's entries. */
static void write_merged(const fxc_group *g, pjob *m)
{
    const pjob *h = g->head;
    fx_wire_batch_builder bb;
    int rv = fx_wire_batch_begin_as(&bb, m->frame, m->len, h->frame, h->marks);
    for (const pjob *j = h; j != NULL && rv == 0; j = j->gnext)
        rv = fx_wire_batch_append_frame(&bb, j->frame, j->len, j->marks);
    /* fits() kept the parts within the message limit and |m| holds them. */
    assert(rv == 0 && fx_wire_batch_left(&bb) == 0);
    ssize_t len = fx_wire_batch_finish(&bb, &m->marks);
    assert(len == (ssize_t)m->len);
    (void)rv, (void)len;
    m->count = (uint32_t)g->msgs;
    m->calls = (uint32_t)g->jobs;
    m->wack = h->wack;
    m->merge = false;
    m->idem = h->idem; /* every part is (same ack mode): frozen as one batch at its send */
    m->enq_ns = h->enq_ns;
}

void fxc_coalesce_take(fxc_group *g, pjob **pj)
{
    if (g->jobs == 1) {
        *pj = take_first(g);
        return;
    }
    const pjob *h = g->head;
    pjob *m = fxc_pub_job_alloc(h->c, fx_wire_batch_head_len(h->marks) + g->bytes);
    if (m == NULL) {
        *pj = take_first(g); /* no memory to merge: one at a time */
        return;
    }
    write_merged(g, m);
    pjob *parts = g->head;
    group_reset(g);
    fxc_pub_job_absorb(m, parts);
    *pj = m;
}

void fxc_coalesce_drain(fxc_group *g, void (*fn)(pjob *j, void *user), void *user)
{
    pjob *j = g->head;
    group_reset(g);
    while (j != NULL) {
        pjob *nx = j->gnext;
        j->gnext = NULL;
        fn(j, user);
        j = nx;
    }
    if (g->next != NULL) {
        pjob *n = g->next;
        g->next = NULL;
        fn(n, user);
    }
}
