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
 * "broker shutting down", an unacked one is dropped; both are counted.
 * Returns true when the publish was refused. */
static bool refuse_draining(fxb_bidi *s, bool acked, bool binary, uint64_t request_id)
{
    fx_broker *b = s->conn->b;
    if (!fxb_is_draining(b))
        return false;
    atomic_fetch_add_explicit(&b->drain_refused, 1, memory_order_relaxed);
    if (acked) {
        FX_COUNTER_INC(publish_error);
        answer_now(s, binary, request_id, FXB_SHUTDOWN_TEXT);
    } else {
        FX_COUNTER_INC(publish_dropped);
    }
    return true;
}

static bool tenant_is(const fxb_bidi *s, fx_wire_slice t)
{
    return strlen(s->tenant) == t.len && memcmp(s->tenant, t.ptr, t.len) == 0;
}

int fxb_publish_binary(fxb_bidi *s, const fx_frame *f)
{
    bool acked = f->kind == FX_BODY_PUBLISH_BATCH_ACKED;
    uint64_t rid = 0;
    fx_wire_ack mode;
    fx_wire_err err;
    if (acked && fx_wire_publish_acked_prefix_decode(f->body, f->len, &rid, &mode, &err) != 0) {
        fxb_bidi_fail(s, err.msg);
        return -1;
    }
    if (refuse_draining(s, acked, true, rid))
        return 0;
    /* Decoded in place: the payloads are copied (or the decoder's buffer
     * taken) only when the frame's job is made (admission.c). */
    fx_wire_publish_batch pb;
    bool same = false;
    if (fx_wire_publish_batch_decode_cached(f->hdr.flags, f->body, f->len, &pb, &s->names, &same,
                                            &err) != 0) {
        if (!acked) {
            fxb_bidi_fail(s, err.msg);
            return -1;
        }
        answer_now(s, true, rid, "malformed publish batch");
        return 0;
    }
    int rv = 0;
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (!same)
        s->names_ok = false; /* other names: the cache holds them now */
    if (same && s->names_ok && fx_stream_handle_is_active(s->h)) {
        /* The names of the frame that passed the tenant check and resolved
         * |s->h| with the publish permission, byte for byte. */
        rv = pb.count == 0 ? 0 : fxb_ingress_add(s, s->h, f, &pb, acked, rid);
        if (pb.count == 0 && acked)
            answer_now(s, true, rid, NULL);
    } else if (!tenant_is(s, pb.tenant)) {
        fxb_bidi_error(s, "tenant mismatch", true);
        rv = -1;
    } else if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, pb.tenant, pb.ns, pb.stream, &h,
                                &rerr) != 0) {
        /* Unacked: nothing to answer (a forbidden one is counted and logged). */
        FX_COUNTER_INC(publish_error);
        if (acked)
            answer_now(s, true, rid, rerr.msg);
    } else {
        /* Only the names the cache holds can be vouched for next time. */
        s->names_ok = h == s->h;
        if (pb.count == 0) {
            if (acked)
                answer_now(s, true, rid, NULL);
        } else {
            rv = fxb_ingress_add(s, h, f, &pb, acked, rid);
        }
    }
    fx_wire_publish_batch_deinit(&pb);
    return rv;
}

/* Copies the payloads of a decoded JSON publish into one buffer. */
static int json_payloads(const fx_msg *m, fx_buf **pb, fx_wire_slice *slices, uint32_t count)
{
    const fx_msg_bytes *src = m->type == FX_MSG_PUBLISH ? &m->payload : m->payloads;
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++)
        total += src[i].len;
    int rv = fx_buf_new(pb, total);
    if (rv != 0)
        return rv;
    uint8_t *p = fx_buf_data_mut(*pb);
    for (uint32_t i = 0; i < count; i++) {
        if (src[i].len > 0)
            memcpy(p, src[i].p, src[i].len);
        slices[i] = (fx_wire_slice){p, src[i].len};
        p += src[i].len;
    }
    return 0;
}

static fx_wire_slice str_slice(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

int fxb_publish_json(fxb_bidi *s, const fx_msg *m)
{
    bool acked = fx_msg_effective_ack(m) != FX_WIRE_ACK_NONE;
    bool single = m->type == FX_MSG_PUBLISH;
    if (acked && !m->has_request_id) {
        fxb_bidi_error(s,
                       single ? "missing request_id for acked publish"
                              : "missing request_id for acked publish batch",
                       false);
        return 0;
    }
    if (refuse_draining(s, acked, false, m->request_id))
        return 0;
    fx_stream_handle *h;
    fx_registry_err rerr;
    if (fxb_bidi_resolve(s, FX_BROKER_AUTH_PUBLISH, str_slice(m->tenant_id), str_slice(m->ns),
                         str_slice(m->stream), &h, &rerr) != 0) {
        FX_COUNTER_INC(publish_error);
        if (acked)
            answer_now(s, false, m->request_id, rerr.msg);
        else
            fxb_bidi_error(s, rerr.msg, false);
        return 0;
    }
    size_t count = single ? 1 : m->n_payloads;
    if (count == 0) {
        if (acked)
            answer_now(s, false, m->request_id, NULL);
        return 0;
    }
    if (count > UINT32_MAX) {
        fxb_bidi_fail(s, "too many payloads");
        return -1;
    }
    fx_wire_slice *slices = malloc(count * sizeof(*slices));
    fx_buf *backing = NULL;
    if (slices == NULL || json_payloads(m, &backing, slices, (uint32_t)count) != 0) {
        free(slices);
        fxb_bidi_fail(s, "out of memory for a publish");
        return -1;
    }
    int rv =
        fxb_ingress_submit(s, h, backing, slices, (uint32_t)count, acked, false, m->request_id);
    free(slices);
    return rv;
}
