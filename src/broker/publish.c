/* Publish requests on a client bidi stream: a binary 0x0001 / 0x0009 frame
 * or a JSON publish / publish_batch is decoded into payload slices over one
 * refcounted buffer (copied at most once), its stream resolved, and handed
 * to ingress (binary frames of one read for one stream merge into one job);
 * refusals are answered here. Connection loop. */
#include "broker/publish.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/admission.h"
#include "broker/bidi_life.h"
#include "broker/reply.h"
#include "broker/resolve.h"
#include "cluster/cluster.h"
#include "cluster/forward.h"
#include "felix/error.h"
#include "wire/binary.h"

/* An immediate answer to an acked request (resolve errors, empty batches). */
static void answer_now(fxb_bidi *s, bool binary, uint64_t request_id, const char *err)
{
    fxb_reply *r = fxb_reply_new(s, binary, request_id);
    if (r == NULL) {
        fxb_bidi_fail(s, "out of memory for a reply");
        return;
    }
    fxb_reply_complete(r, err);
    fxb_bidi_flush(s);
}

/* While the broker drains it takes no new publish: an acked one is answered
 * "broker shutting down", an unacked one is dropped; both are counted. A
 * cluster node past its lease deadline (suspended) refuses the same way
 * with FX_ENOTSERVING's text. Returns true when the publish was refused. */
static bool refuse_draining(fxb_bidi *s, bool acked, bool binary, uint64_t request_id)
{
    fx_broker *b = s->conn->b;
    const char *why;
    if (fxb_is_draining(b)) {
        atomic_fetch_add_explicit(&b->drain_refused, 1, memory_order_relaxed);
        why = FXB_SHUTDOWN_TEXT;
    } else if (b->o.cluster != NULL && !fx_cluster_serving(b->o.cluster)) {
        FX_COUNTER_INC(cluster_suspended_refused);
        why = fx_strerror(FX_ENOTSERVING);
    } else {
        return false;
    }
    if (acked) {
        FX_COUNTER_INC(publish_error);
        answer_now(s, binary, request_id, why);
    } else {
        FX_COUNTER_INC(publish_dropped);
    }
    return true;
}

/* ---- forwarding (cluster) ------------------------------------------------------------------ */

/* The owner answered a forwarded acked publish (a client's loop thread):
 * its reply slot is completed with that answer. */
static void forwarded_acked(void *user, int rv, const char *why)
{
    fxb_reply *r = user;
    fxb_reply_complete(r, rv == 0 ? NULL : why);
    if (!fx_loop_post(r->loop, &r->task))
        fxb_reply_unref(r);
}

static void forwarded_unacked(void *user, int rv, const char *why)
{
    (void)user;
    (void)why;
    if (rv != 0)
        FX_COUNTER_INC(publish_dropped); /* the owner could not be reached: counted */
}

/* A publish whose stream another node owns (or is the candidate of) is
 * forwarded to it when this broker forwards (fx_broker_set_forwarder): the
 * owner verifies the publisher's token again and answers; an acked
 * publish's reply keeps its place in this stream's reply order. Returns
 * false when it cannot be forwarded (then the caller refuses it). */
static bool forward(fxb_bidi *s, fx_wire_slice ns, fx_wire_slice stream,
                    const fx_wire_slice *payloads, uint32_t count, bool acked, bool binary,
                    uint64_t rid)
{
    fx_forwarder *f = atomic_load_explicit(&s->conn->b->forwarder, memory_order_acquire);
    const fx_cluster_route *route = s->resolved.route;
    if (f == NULL || route == NULL || route->kind != FX_CLUSTER_REMOTE || route->addr[0] == '\0' ||
        s->fwd_token == NULL || ns.len > FX_REGISTRY_NAME_MAX || stream.len > FX_REGISTRY_NAME_MAX)
        return false;
    char nsz[FX_REGISTRY_NAME_MAX + 1], sz[FX_REGISTRY_NAME_MAX + 1];
    memcpy(nsz, ns.ptr, ns.len);
    nsz[ns.len] = '\0';
    memcpy(sz, stream.ptr, stream.len);
    sz[stream.len] = '\0';
    /* The payloads are copied by fx_forward_publish (or handed over at once
     * on its fast path): their list lives on the stack unless it is long. */
    fx_forward_iov small[16];
    fx_forward_iov *iov = count <= 16 ? small : malloc(count * sizeof(*iov));
    fxb_reply *r = NULL;
    if (iov == NULL || (acked && (r = fxb_reply_new(s, binary, rid)) == NULL)) {
        if (iov != small)
            free(iov);
        fxb_bidi_fail(s, "out of memory for a forwarded publish");
        return true;
    }
    for (uint32_t i = 0; i < count; i++)
        iov[i] = (fx_forward_iov){.data = payloads[i].ptr, .len = payloads[i].len};
    if (r != NULL)
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the forward's */
    /* The owner's internal listener when it has one (cluster_internal_bind). */
    const char *to = route->internal[0] ? route->internal : route->addr;
    int rv = fx_forward_publish(f, to, s->tenant, s->fwd_token, nsz, sz, iov, count, acked,
                                acked ? forwarded_acked : forwarded_unacked, r);
    if (iov != small)
        free(iov);
    if (rv == 0) {
        FX_COUNTER_INC(cluster_forwards);
        return true;
    }
    FX_COUNTER_INC(publish_error);
    if (r != NULL) {
        fxb_reply_complete(r, rv == FX_EFULL
                                  ? "overloaded: the queue of publishes forwarded to the "
                                    "stream's owner is full; retry"
                                  : "out of memory forwarding a publish");
        fxb_reply_unref(r); /* the forward's reference: it never ran */
        fxb_bidi_flush(s);
    } else {
        FX_COUNTER_INC(publish_dropped);
    }
    return true;
}

static bool tenant_is(const fxb_bidi *s, fx_wire_slice t)
{
    return strlen(s->tenant) == t.len && memcmp(s->tenant, t.ptr, t.len) == 0;
}

/* Reads the request id of an acked frame |f|. Returns false when |s| failed. */
static bool binary_ack_prefix(fxb_bidi *s, const fx_frame *f, uint64_t *prid)
{
    fx_wire_ack mode;
    fx_wire_err err;
    if (fx_wire_publish_acked_prefix_decode(f->body, f->len, prid, &mode, &err) == 0)
        return true;
    fxb_bidi_fail(s, err.msg);
    return false;
}

/* Decodes |f|'s batch into |pb| in place (|*psame|: with the names the cache
 * holds): the payloads are copied (or the decoder's buffer taken) only when
 * the frame's job is made (admission.c). Returns false when the batch is
 * malformed, with the publish's result in |*prv|. */
static bool binary_decode(fxb_bidi *s, const fx_frame *f, bool acked, uint64_t rid,
                          fx_wire_publish_batch *pb, bool *psame, int *prv)
{
    fx_wire_err err;
    if (fx_wire_publish_batch_decode_cached(f->hdr.flags, f->body, f->len, pb, &s->resolved.names,
                                            psame, &err) == 0)
        return true;
    if (!acked) {
        fxb_bidi_fail(s, err.msg);
        *prv = -1;
        return false;
    }
    answer_now(s, true, rid, "malformed publish batch");
    *prv = 0;
    return false;
}

/* Hands the payloads of |pb| for |h| to admission; an empty batch is only
 * answered. */
static int binary_add(fxb_bidi *s, fx_stream_handle *h, const fx_frame *f,
                      const fx_wire_publish_batch *pb, bool acked, uint64_t rid)
{
    if (pb->count == 0) {
        if (acked)
            answer_now(s, true, rid, NULL);
        return 0;
    }
    return fxb_ingress_add(s, h, f, pb, acked, rid);
}

/* Resolves the names of |pb| (permission included), then adds it. */
static int binary_resolve(fxb_bidi *s, const fx_frame *f, const fx_wire_publish_batch *pb,
                          bool acked, uint64_t rid)
{
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, pb->tenant, pb->ns, pb->stream, &h, &rerr) !=
        0) {
        if (rerr.code == FX_EREMOTE &&
            forward(s, pb->ns, pb->stream, pb->payloads, pb->count, acked, true, rid))
            return 0;
        /* Unacked: nothing to answer (a forbidden one is counted and logged). */
        FX_COUNTER_INC(publish_error);
        if (acked)
            answer_now(s, true, rid, rerr.msg);
        return 0;
    }
    /* Only the names the cache holds can be vouched for next time. */
    s->resolved.names_ok = h == s->resolved.h;
    return binary_add(s, h, f, pb, acked, rid);
}

/* Adds the decoded |pb|: straight to the cached stream when its names are
 * the ones that passed, else after the tenant check and resolution. */
static int binary_route(fxb_bidi *s, const fx_frame *f, const fx_wire_publish_batch *pb, bool same,
                        bool acked, uint64_t rid)
{
    if (!same)
        s->resolved.names_ok = false; /* other names: the cache holds them now */
    if (same && s->resolved.names_ok && fx_stream_handle_is_active(s->resolved.h)) {
        /* The names of the frame that passed the tenant check and resolved
         * |s->resolved.h| with the publish permission, byte for byte. */
        return binary_add(s, s->resolved.h, f, pb, acked, rid);
    }
    if (!tenant_is(s, pb->tenant)) {
        fxb_bidi_error(s, "tenant mismatch", true);
        return -1;
    }
    return binary_resolve(s, f, pb, acked, rid);
}

/* Copies |count| payloads |src| into one buffer |*pb| (|slices| point
 * there). */
static int copy_payloads(const fx_wire_slice *src, uint32_t count, fx_buf **pb,
                         fx_wire_slice *slices)
{
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++)
        total += src[i].len;
    int rv = fx_buf_new(pb, total);
    if (rv != 0)
        return rv;
    uint8_t *p = fx_buf_data_mut(*pb);
    for (uint32_t i = 0; i < count; i++) {
        if (src[i].len > 0)
            memcpy(p, src[i].ptr, src[i].len);
        slices[i] = (fx_wire_slice){p, src[i].len};
        p += src[i].len;
    }
    return 0;
}

/* Hands an idempotent batch of |count| payloads |src| for |h| to admission
 * (answers are JSON, for the binary frame too: facts §2.2). An empty batch
 * is refused: it has nothing to digest or append. */
static int idem_submit(fxb_bidi *s, fx_stream_handle *h, const fx_wire_slice *src, uint32_t count,
                       uint64_t rid, uint64_t producer_id, uint64_t sequence)
{
    if (count == 0) {
        FX_COUNTER_INC(publish_error);
        answer_now(s, false, rid, "an idempotent batch needs at least one payload");
        return 0;
    }
    fx_wire_slice *slices = malloc((size_t)count * sizeof(*slices));
    fx_buf *backing = NULL;
    if (slices == NULL || copy_payloads(src, count, &backing, slices) != 0) {
        free(slices);
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    fxb_job_idem x = {.features = s->client_features,
                      .features_hi = s->client_features_hi,
                      .producer_id = producer_id,
                      .sequence = sequence};
    int rv = fxb_ingress_submit_idem(s, h, backing, slices, count, rid, &x);
    free(slices);
    return rv;
}

/* A binary 0x0109 batch: decoded, its names checked and resolved every
 * time (not merged, not through the names cache), then handed over. */
static int binary_idem(fxb_bidi *s, const fx_frame *f)
{
    uint64_t rid, pid, seq;
    fx_wire_err err;
    if (fx_wire_publish_idem_prefix_decode(f->body, f->len, &rid, &pid, &seq, &err) != 0) {
        fxb_bidi_fail(s, err.msg);
        return -1;
    }
    if (refuse_draining(s, true, false, rid))
        return 0;
    fx_wire_publish_batch pb;
    if (fx_wire_publish_batch_decode(f->hdr.flags, f->body, f->len, &pb, &err) != 0) {
        answer_now(s, false, rid, "malformed publish batch");
        return 0;
    }
    int rv = 0;
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (!tenant_is(s, pb.tenant)) {
        fxb_bidi_error(s, "tenant mismatch", true);
        rv = -1;
    } else if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, pb.tenant, pb.ns, pb.stream, &h,
                                &rerr) != 0) {
        FX_COUNTER_INC(publish_error);
        answer_now(s, false, rid, rerr.msg);
    } else {
        rv = idem_submit(s, h, pb.payloads, pb.count, rid, pid, seq);
    }
    fx_wire_publish_batch_deinit(&pb);
    return rv;
}

int fxb_publish_binary(fxb_bidi *s, const fx_frame *f)
{
    if ((f->hdr.flags & FX_FLAG_PUBLISH_IDEMPOTENT) != 0)
        return binary_idem(s, f);
    bool acked = f->kind == FX_BODY_PUBLISH_BATCH_ACKED;
    uint64_t rid = 0;
    if (acked && !binary_ack_prefix(s, f, &rid))
        return -1;
    if (refuse_draining(s, acked, true, rid))
        return 0;
    fx_wire_publish_batch pb;
    bool same = false;
    int rv;
    if (!binary_decode(s, f, acked, rid, &pb, &same, &rv))
        return rv;
    rv = binary_route(s, f, &pb, same, acked, rid);
    fx_wire_publish_batch_deinit(&pb);
    return rv;
}

/* Copies the payloads of a decoded JSON publish into one buffer. */
static int json_payloads(const fx_msg *m, fx_buf **pb, fx_wire_slice *slices, uint32_t count)
{
    const fx_msg_bytes *src = m->type == FX_MSG_PUBLISH ? &m->payload : m->payloads;
    for (uint32_t i = 0; i < count; i++) /* where they are now; copied below, in place */
        slices[i] = (fx_wire_slice){src[i].p, src[i].len};
    return copy_payloads(slices, count, pb, slices);
}

static fx_wire_slice str_slice(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* An acked publish without a request id is answered with an error, and
 * while the broker drains none is taken. Returns true when |m| was refused. */
static bool json_refused(fxb_bidi *s, const fx_msg *m, bool acked)
{
    if (acked && !m->has_request_id) {
        fxb_bidi_error(s,
                       m->type == FX_MSG_PUBLISH ? "missing request_id for acked publish"
                                                 : "missing request_id for acked publish batch",
                       false);
        return true;
    }
    return refuse_draining(s, acked, false, m->request_id);
}

/* Forwards JSON publish |m| (forward()). */
static bool json_forward(fxb_bidi *s, const fx_msg *m, bool acked)
{
    size_t count = m->type == FX_MSG_PUBLISH ? 1 : m->n_payloads;
    if (count > UINT32_MAX)
        return false;
    const fx_msg_bytes *src = m->type == FX_MSG_PUBLISH ? &m->payload : m->payloads;
    fx_wire_slice *sl = malloc((count ? count : 1) * sizeof(*sl));
    if (sl == NULL)
        return false;
    for (size_t i = 0; i < count; i++)
        sl[i] = (fx_wire_slice){src[i].p, src[i].len};
    bool done = forward(s, str_slice(m->ns), str_slice(m->stream), sl, (uint32_t)count, acked,
                        false, m->request_id);
    free(sl);
    return done;
}

/* Resolves |m|'s stream into |*ph|. Returns false when it was refused
 * (answered, or an error reply when unacked) or, with |fwd|, forwarded to
 * the node that owns it. */
static bool json_resolve(fxb_bidi *s, const fx_msg *m, bool acked, fx_stream_handle **ph, bool fwd)
{
    fx_registry_err rerr;
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, str_slice(m->tenant_id), str_slice(m->ns),
                         str_slice(m->stream), ph, &rerr) == 0)
        return true;
    if (fwd && rerr.code == FX_EREMOTE && json_forward(s, m, acked))
        return false;
    FX_COUNTER_INC(publish_error);
    if (acked)
        answer_now(s, false, m->request_id, rerr.msg);
    else
        fxb_bidi_error(s, rerr.msg, false);
    return false;
}

/* Copies the |count| payloads of |m| and hands them to admission. */
static int json_submit(fxb_bidi *s, const fx_msg *m, fx_stream_handle *h, bool acked,
                       uint32_t count)
{
    fx_wire_slice *slices = malloc(count * sizeof(*slices));
    fx_buf *backing = NULL;
    if (slices == NULL || json_payloads(m, &backing, slices, count) != 0) {
        free(slices);
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    int rv = fxb_ingress_submit(s, h, backing, slices, count, acked, false, m->request_id);
    free(slices);
    return rv;
}

int fxb_publish_idempotent_json(fxb_bidi *s, const fx_msg *m)
{
    if (refuse_draining(s, true, false, m->request_id))
        return 0;
    fx_stream_handle *h;
    if (!json_resolve(s, m, true, &h, false)) /* never forwarded: refused naming the owner */
        return 0;
    if (m->n_payloads > UINT32_MAX) {
        fxb_bidi_fail(s, "too many payloads");
        return -1;
    }
    uint32_t count = (uint32_t)m->n_payloads;
    fx_wire_slice *src = malloc(((size_t)count + 1) * sizeof(*src));
    if (src == NULL) {
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    for (uint32_t i = 0; i < count; i++)
        src[i] = (fx_wire_slice){m->payloads[i].p, m->payloads[i].len};
    int rv = idem_submit(s, h, src, count, m->request_id, m->producer_id, m->sequence);
    free(src);
    return rv;
}

void fxb_producer_init(fxb_bidi *s, const fx_msg *m)
{
    fx_msg r;
    fx_msg_init_producer_init_ok(&r, m->request_id, fxb_idem_new_producer_id());
    FX_COUNTER_INC(idem_producers_init);
    if (fxb_bidi_reply_msg(s, &r) != 0)
        fxb_bidi_fail(s, "out of memory for a reply");
}

int fxb_publish_json(fxb_bidi *s, const fx_msg *m)
{
    bool acked = fx_msg_effective_ack(m) != FX_WIRE_ACK_NONE;
    if (json_refused(s, m, acked))
        return 0;
    fx_stream_handle *h;
    if (!json_resolve(s, m, acked, &h, true))
        return 0;
    size_t count = m->type == FX_MSG_PUBLISH ? 1 : m->n_payloads;
    if (count == 0) {
        if (acked)
            answer_now(s, false, m->request_id, NULL);
        return 0;
    }
    if (count > UINT32_MAX) {
        fxb_bidi_fail(s, "too many payloads");
        return -1;
    }
    return json_submit(s, m, h, acked, (uint32_t)count);
}
