/* Streams of one connection: the id table, send queues of referenced
 * fx_buf slices released on ack (or on stream close and connection free;
 * a reset releases at once only what ngtcp2 never saw),
 * the round-robin send list, and explicit receive credit. Loop thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "quic/internal.h"

/* ---- id table ---------------------------------------------------------- */

static size_t bucket_of(const fx_quic_conn *c, int64_t id)
{
    /* Stream ids count up by 4 per kind; drop the two kind bits. */
    uint64_t h = ((uint64_t)id >> 2) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (c->nsbuckets - 1);
}

qstream *fx_quic_stream_find(fx_quic_conn *c, int64_t id)
{
    if (c->nsbuckets == 0)
        return NULL;
    for (qstream *s = c->sbuckets[bucket_of(c, id)]; s != NULL; s = s->hnext)
        if (s->id == id)
            return s;
    return NULL;
}

static int table_grow(fx_quic_conn *c)
{
    size_t n = c->nsbuckets ? c->nsbuckets * 2 : 16;
    qstream **nb = calloc(n, sizeof(*nb));
    if (nb == NULL)
        return -ENOMEM;
    qstream **old = c->sbuckets;
    size_t oldn = c->nsbuckets;
    c->sbuckets = nb;
    c->nsbuckets = n;
    for (size_t i = 0; i < oldn; i++) {
        for (qstream *s = old[i], *next; s != NULL; s = next) {
            next = s->hnext;
            size_t b = bucket_of(c, s->id);
            s->hnext = nb[b];
            nb[b] = s;
        }
    }
    free(old);
    return 0;
}

int fx_quic_stream_create(fx_quic_conn *c, int64_t id, void *user, qstream **ps)
{
    if (c->nstreams >= c->nsbuckets && table_grow(c) < 0)
        return -ENOMEM;
    qstream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->id = id;
    s->user = user;
    size_t b = bucket_of(c, id);
    s->hnext = c->sbuckets[b];
    c->sbuckets[b] = s;
    c->nstreams++;
    *ps = s;
    return 0;
}

static void table_unlink(fx_quic_conn *c, qstream *s)
{
    for (qstream **pp = &c->sbuckets[bucket_of(c, s->id)]; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == s) {
            *pp = s->hnext;
            c->nstreams--;
            return;
        }
    }
}

/* ---- send lists ---------------------------------------------------------- */

static void list_remove(qstream **head, qstream **tail, qstream *s)
{
    if (s->sprev != NULL)
        s->sprev->snext = s->snext;
    else
        *head = s->snext;
    if (s->snext != NULL)
        s->snext->sprev = s->sprev;
    else
        *tail = s->sprev;
    s->snext = s->sprev = NULL;
}

static void list_append(qstream **head, qstream **tail, qstream *s)
{
    s->snext = NULL;
    s->sprev = *tail;
    if (*tail != NULL)
        (*tail)->snext = s;
    else
        *head = s;
    *tail = s;
}

static void unlist(fx_quic_conn *c, qstream *s)
{
    if (s->slist == 1)
        list_remove(&c->sq_head, &c->sq_tail, s);
    else if (s->slist == 2)
        list_remove(&c->cb_head, &c->cb_tail, s);
    s->slist = 0;
}

void fx_quic_sendq_push(fx_quic_conn *c, qstream *s)
{
    unlist(c, s);
    s->blocked = QS_READY;
    list_append(&c->sq_head, &c->sq_tail, s);
    s->slist = 1;
}

void fx_quic_sendq_remove(fx_quic_conn *c, qstream *s)
{
    unlist(c, s);
}

void fx_quic_connblocked_push(fx_quic_conn *c, qstream *s)
{
    unlist(c, s);
    s->blocked = QS_BLOCKED_CONN;
    list_append(&c->cb_head, &c->cb_tail, s);
    s->slist = 2;
}

void fx_quic_connblocked_release(fx_quic_conn *c)
{
    if (c->cb_head == NULL || ngtcp2_conn_get_max_data_left(c->q) == 0)
        return;
    while (c->cb_head != NULL)
        fx_quic_sendq_push(c, c->cb_head);
}

bool fx_quic_stream_has_pending(const qstream *s)
{
    return s->wr != NULL || (s->fin_queued && !s->fin_sent);
}

/* ---- chunks ------------------------------------------------------------ */

/* A send refused with FX_EFULL hears on_writable once half the cap is free. */
static void report_room(fx_quic_conn *c)
{
    if (c->want_writable && c->unacked <= c->ep->o.unacked_cap / 2 && !c->dead) {
        c->want_writable = false;
        if (c->ep->cb.on_writable != NULL)
            c->ep->cb.on_writable(c, c->user);
    }
}

static void release_chunks(fx_quic_conn *c, qstream *s, uint64_t upto, bool all)
{
    while (s->head != NULL && (all || s->head->end <= upto)) {
        qchunk *k = s->head;
        s->head = k->next;
        if (s->wr == k) {
            s->wr = k->next;
            s->wr_off = 0;
        }
        c->unacked -= k->len;
        fx_buf_unref(k->buf);
        free(k);
    }
    if (s->head == NULL)
        s->tail = NULL;
    report_room(c);
}

void fx_quic_stream_acked(fx_quic_conn *c, qstream *s, uint64_t end)
{
    if (end > s->acked_end)
        s->acked_end = end;
    release_chunks(c, s, end, false);
}

/* Frees the chunks from |k| on, none of whose bytes ngtcp2 ever saw. */
static void free_unsent(fx_quic_conn *c, qchunk *k)
{
    while (k != NULL) {
        qchunk *next = k->next;
        c->unacked -= k->len;
        fx_buf_unref(k->buf);
        free(k);
        k = next;
    }
}

/* Cuts the queue of |s| after the last byte handed to ngtcp2 and frees the
 * rest (a partly sent chunk keeps only its sent bytes). */
static void drop_unsent(fx_quic_conn *c, qstream *s)
{
    qchunk *keep = NULL, *k = s->head;
    if (s->wr == NULL)
        return;
    for (; k != s->wr; k = k->next)
        keep = k;
    if (s->wr_off > 0) {
        c->unacked -= k->len - s->wr_off;
        k->end -= k->len - s->wr_off;
        k->len = s->wr_off;
        keep = k;
        k = k->next;
    }
    if (keep != NULL)
        keep->next = NULL;
    else
        s->head = NULL;
    s->tail = keep;
    free_unsent(c, k);
}

void fx_quic_stream_stop_writing(fx_quic_conn *c, qstream *s)
{
    /* ngtcp2 0.12 keeps the STREAM frames it already sent in its
     * retransmission buffer after a RESET_STREAM and resends them from our
     * bytes when they are declared lost, until the stream closes. So only
     * the bytes it never saw go now; the rest wait for their ack or for
     * the stream's close (fx_quic_stream_destroy). */
    drop_unsent(c, s);
    s->wr = NULL;
    s->wr_off = 0;
    s->queued_end = s->sent_end;
    s->shut_wr = true;
    s->fin_queued = false;
    s->want_sent = false;
    unlist(c, s);
    /* The shortened chunk may be acked already: no later ack would free it. */
    release_chunks(c, s, s->acked_end, false);
}

void fx_quic_stream_destroy(fx_quic_conn *c, qstream *s)
{
    release_chunks(c, s, 0, true);
    unlist(c, s);
    table_unlink(c, s);
    free(s);
}

void fx_quic_streams_destroy_all(fx_quic_conn *c)
{
    for (size_t i = 0; i < c->nsbuckets; i++) {
        while (c->sbuckets[i] != NULL)
            fx_quic_stream_destroy(c, c->sbuckets[i]);
    }
    free(c->sbuckets);
    c->sbuckets = NULL;
    c->nsbuckets = 0;
}

size_t fx_quic_stream_vecs(qstream *s, ngtcp2_vec *v, size_t cap, size_t want, bool *pfin)
{
    size_t n = 0, total = 0;
    qchunk *k = s->wr;
    size_t off = s->wr_off;
    /* Enough for one packet: more vectors would only be walked again. */
    for (; k != NULL && n < cap && total < want; k = k->next, off = 0) {
        v[n].base = (uint8_t *)k->data + off;
        v[n].len = k->len - off;
        total += v[n].len;
        n++;
    }
    *pfin = k == NULL && s->fin_queued && !s->fin_sent;
    return n;
}

void fx_quic_stream_sent(fx_quic_conn *c, qstream *s, size_t n, bool fin_offered, size_t offered)
{
    bool all = n == offered;
    s->sent_end += n;
    while (n > 0 && s->wr != NULL) {
        size_t left = s->wr->len - s->wr_off;
        if (n < left) {
            s->wr_off += n;
            n = 0;
            break;
        }
        n -= left;
        s->wr = s->wr->next;
        s->wr_off = 0;
    }
    if (fin_offered && all)
        s->fin_sent = true;
    if (s->want_sent && s->wr == NULL) {
        s->want_sent = false;
        c->sent_notify = true; /* reported after the burst (fx_quic_conn_flush) */
    }
    if (!fx_quic_stream_has_pending(s))
        unlist(c, s);
}

/* ---- public API ------------------------------------------------------------ */

static int open_stream(fx_quic_conn *c, bool bidi, void *user, int64_t *psid)
{
    if (c->closing || c->dead)
        return FX_ECLOSED;
    int64_t sid;
    int rv = bidi ? ngtcp2_conn_open_bidi_stream(c->q, &sid, NULL)
                  : ngtcp2_conn_open_uni_stream(c->q, &sid, NULL);
    if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED)
        return FX_ESTREAMS;
    if (rv != 0)
        return rv == NGTCP2_ERR_NOMEM ? -ENOMEM : FX_EQUIC;
    qstream *s;
    rv = fx_quic_stream_create(c, sid, user, &s);
    if (rv < 0) {
        ngtcp2_conn_shutdown_stream(c->q, sid, 0);
        return rv;
    }
    ngtcp2_conn_set_stream_user_data(c->q, sid, s);
    *psid = sid;
    return 0;
}

int fx_quic_conn_open_bidi(fx_quic_conn *c, void *stream_user, int64_t *psid)
{
    return open_stream(c, true, stream_user, psid);
}

int fx_quic_conn_open_uni(fx_quic_conn *c, void *stream_user, int64_t *psid)
{
    return open_stream(c, false, stream_user, psid);
}

void fx_quic_conn_grant_uni(fx_quic_conn *c, uint64_t n)
{
    if (!c->closing && !c->dead)
        ngtcp2_conn_extend_max_streams_uni(c->q, n);
}

int fx_quic_stream_set_user(fx_quic_conn *c, int64_t sid, void *stream_user)
{
    qstream *s = fx_quic_stream_find(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    s->user = stream_user;
    return 0;
}

static int queue_chunk(fx_quic_conn *c, qstream *s, fx_buf *buf, size_t off, size_t len)
{
    qchunk *k = malloc(sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    k->next = NULL;
    k->buf = fx_buf_ref(buf);
    k->data = fx_buf_data(buf) + off;
    k->len = len;
    s->queued_end += len;
    k->end = s->queued_end;
    if (s->tail != NULL)
        s->tail->next = k;
    else
        s->head = k;
    s->tail = k;
    if (s->wr == NULL) {
        s->wr = k;
        s->wr_off = 0;
    }
    c->unacked += len;
    return 0;
}

int fx_quic_stream_send(fx_quic_conn *c, int64_t sid, fx_buf *buf, size_t off, size_t len, bool fin)
{
    if (c->closing || c->dead)
        return FX_ECLOSED;
    qstream *s = fx_quic_stream_find(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    if (s->fin_queued || s->shut_wr)
        return FX_ECLOSED;
    if (len > 0 && (buf == NULL || off > fx_buf_len(buf) || len > fx_buf_len(buf) - off))
        return -EINVAL;
    if (c->unacked > 0 && c->unacked + len > c->ep->o.unacked_cap) {
        c->want_writable = true;
        return FX_EFULL;
    }
    if (len > 0) {
        int rv = queue_chunk(c, s, buf, off, len);
        if (rv < 0)
            return rv;
    }
    s->fin_queued = fin;
    if (s->slist == 0 && s->blocked == QS_READY)
        fx_quic_sendq_push(c, s);
    fx_quic_conn_schedule(c);
    return 0;
}

/* The stream of |sid| while it has bytes not yet written, else NULL. */
static qstream *sending_stream(fx_quic_conn *c, int64_t sid)
{
    if (c->closing || c->dead)
        return NULL;
    qstream *s = fx_quic_stream_find(c, sid);
    return s != NULL && s->wr != NULL ? s : NULL;
}

bool fx_quic_stream_is_sending(fx_quic_conn *c, int64_t sid)
{
    return sending_stream(c, sid) != NULL;
}

bool fx_quic_stream_notify_sent(fx_quic_conn *c, int64_t sid)
{
    qstream *s = sending_stream(c, sid);
    if (s == NULL)
        return false;
    s->want_sent = true;
    return true;
}

int fx_quic_stream_consume(fx_quic_conn *c, int64_t sid, size_t n)
{
    if (c->dead || n == 0)
        return 0;
    if (fx_quic_stream_find(c, sid) != NULL)
        ngtcp2_conn_extend_max_stream_offset(c->q, sid, n);
    ngtcp2_conn_extend_max_offset(c->q, n);
    fx_quic_conn_schedule(c);
    return 0;
}

int fx_quic_stream_shutdown(fx_quic_conn *c, int64_t sid)
{
    if (c->dead)
        return FX_ECLOSED;
    qstream *s = fx_quic_stream_find(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    if (s->fin_queued || s->shut_wr)
        return 0;
    s->fin_queued = true;
    if (s->slist == 0 && s->blocked == QS_READY)
        fx_quic_sendq_push(c, s);
    fx_quic_conn_schedule(c);
    return 0;
}

int fx_quic_stream_reset(fx_quic_conn *c, int64_t sid, uint64_t app_code)
{
    if (c->dead)
        return FX_ECLOSED;
    qstream *s = fx_quic_stream_find(c, sid);
    if (s == NULL)
        return FX_ENOSTREAM;
    fx_quic_stream_stop_writing(c, s);
    ngtcp2_conn_shutdown_stream(c->q, sid, app_code);
    fx_quic_conn_schedule(c);
    return 0;
}
