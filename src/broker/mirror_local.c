/* The broker's side of the cluster mirrors (mirror_local.h): the mirror
 * stream in the registry, a subscribe served from it, and the ops a mirror
 * thread calls: its batches become jobs on the stream's worker (appended at
 * the owner's offsets, worker.c mirror_append), its idle check counts the
 * stream's references, its route asks the cluster, and its stop releases
 * the stream. */
#include "broker/mirror_local.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/job.h"
#include "broker/sub.h"
#include "broker/worker.h"
#include "felix/error.h"

static fx_ratelimit refuse_rl = FX_RATELIMIT_INIT;

static fx_wire_slice slice_of(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

bool fxb_mirror_subscribe(fxb_bidi *s, const fx_msg *m, const fx_cluster_route *r,
                          fx_stream_handle **ph)
{
    fx_broker *b = s->conn->b;
    fx_mirrors *mm = atomic_load_explicit(&b->mirrors, memory_order_acquire);
    if (mm == NULL || (s->client_features & FX_FEATURE_REDIRECT) != 0 ||
        (r->addr[0] == '\0' && r->internal[0] == '\0') || s->fwd_token == NULL)
        return false;
    fx_mirror_start start = FX_MIRROR_START_LATEST;
    uint64_t offset = 0;
    switch (fx_msg_effective_start(m)) {
    case FX_MSG_START_EARLIEST:
        start = FX_MIRROR_START_EARLIEST;
        break;
    case FX_MSG_START_OFFSET:
        start = FX_MIRROR_START_OFFSET;
        offset = m->start.offset;
        break;
    default:
        break;
    }
    fx_registry_err err;
    fx_stream_handle *h = NULL;
    bool created = false;
    int rv = fx_registry_create_durable(b->reg, slice_of(m->tenant_id), slice_of(m->ns),
                                        slice_of(m->stream), 0, &h, &created, &err);
    const char *why = NULL;
    if (rv != 0) {
        why = err.msg;
    } else if (!created && !fx_stream_handle_is_mirror(h)) {
        /* A stream of this node's own by that name (it owned it before and
         * has not released it yet): not served as a mirror. */
        why = "a local stream of that name is not a mirror";
        rv = -EEXIST;
    } else {
        if (created)
            fx_stream_handle_set_mirror(h, offset);
        fx_stream_handle *ref = fx_stream_handle_ref(h);
        bool fresh = false;
        /* The owner's internal listener when it has one (cluster_internal_bind). */
        const char *to = r->internal[0] ? r->internal : r->addr;
        rv = fx_mirror_attach(mm, m->tenant_id, m->ns, m->stream, to, s->fwd_token, start,
                              offset, ref, &fresh);
        if (rv == 0 && created && !fresh &&
            fx_mirror_stop(mm, m->tenant_id, m->ns, m->stream,
                           "its local stream was removed")) {
            /* The running mirror feeds a stream removed meanwhile (the
             * admin API): it stops, and a new one feeds the new stream. */
            rv = fx_mirror_attach(mm, m->tenant_id, m->ns, m->stream, to, s->fwd_token, start,
                                  offset, ref, &fresh);
        }
        if (!fresh)
            fx_stream_handle_unref(ref);
        if (rv != 0) {
            why = rv == FX_EFULL ? "the node runs its maximum of mirrors" : fx_strerror(rv);
            if (created)
                (void)fx_broker_release_stream(b, m->tenant_id, m->ns, m->stream);
        }
    }
    if (rv != 0) {
        fx_stream_handle_unref(h);
        FX_COUNTER_INC(cluster_mirror_refused);
        FX_LOG_RATELIMITED(&refuse_rl, fx_loop_now(s->conn->loop), FX_LOG_WARN, "cluster",
                           "subscribe to %s/%s/%s (owned by %s) not served from a mirror: %s",
                           m->tenant_id, m->ns, m->stream, r->node_id, why);
        return false;
    }
    /* The stream's resolve cache holds the reference, as for any stream. */
    fx_stream_handle_unref(s->resolved.h);
    s->resolved.h = h;
    *ph = h;
    return true;
}

/* The mirror is subscribed upstream: |arg|'s registration goes on. */
static void on_up(void *arg)
{
    fxb_sub *sub = arg;
    fxb_sub_post(sub, sub->w->loop, &sub->feed.reg_task);
    fxb_sub_unref(sub);
}

bool fxb_mirror_defer_register(fxb_sub *sub)
{
    fx_mirrors *mm = atomic_load_explicit(&sub->b->mirrors, memory_order_acquire);
    if (mm == NULL || !fx_stream_handle_is_mirror(sub->h))
        return false;
    fxb_sub_ref(sub); /* on_up's */
    if (fx_mirror_when_up(mm, fx_stream_handle_tenant(sub->h), fx_stream_handle_namespace(sub->h),
                          fx_stream_handle_stream(sub->h), on_up, sub))
        return true;
    fxb_sub_unref(sub);
    return false;
}

void fxb_mirror_owned(fx_broker *b, fx_stream_handle *h)
{
    if (h == NULL || !fx_stream_handle_is_mirror(h))
        return;
    const char *t = fx_stream_handle_tenant(h), *ns = fx_stream_handle_namespace(h),
               *st = fx_stream_handle_stream(h);
    fx_mirrors *mm = atomic_load_explicit(&b->mirrors, memory_order_acquire);
    if (mm != NULL)
        (void)fx_mirror_stop(mm, t, ns, st,
                             "this node owns the stream now: its local subscribers' event "
                             "streams end, and they are served by the owner's stream here when "
                             "they subscribe again");
    /* Released now (not when the mirror thread gets to it): the owner's
     * stream is made right after, under the same names. */
    FX_LOG_INFO("cluster", "stream %s/%s/%s: this node owns it now; its mirror stream is removed "
                "and its local subscribers' event streams end",
                t, ns, st);
    if (fx_broker_release_stream(b, t, ns, st) != 0)
        FX_LOG_ERROR("cluster", "out of memory removing the mirror stream %s/%s/%s", t, ns, st);
}

/* ---- the ops (mirror threads) ----------------------------------------------------------- */

static int op_append(void *user, void *stream, uint64_t offset, const fx_forward_iov *msgs,
                     size_t n, fx_mirror_done_cb done, void *done_user)
{
    fx_broker *b = user;
    fx_stream_handle *h = stream;
    if (!fx_stream_handle_is_active(h))
        return FX_ENOSTREAM;
    if (n == 0 || n > UINT32_MAX)
        return -EINVAL;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += msgs[i].len;
    fxb_job *j = calloc(1, sizeof(*j) + n * sizeof(fx_wire_slice));
    fx_buf *buf = NULL;
    if (j == NULL || fx_buf_new(&buf, bytes) != 0) {
        free(j);
        return -ENOMEM;
    }
    uint8_t *p = (uint8_t *)fx_buf_data(buf);
    j->payloads = (fx_wire_slice *)(j + 1);
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].len > 0)
            memcpy(p, msgs[i].data, msgs[i].len);
        j->payloads[i] = (fx_wire_slice){p, msgs[i].len};
        p += msgs[i].len;
    }
    j->backing = buf;
    j->count = (uint32_t)n;
    j->nreq = 1;
    j->payload_bytes = bytes;
    j->h = fx_stream_handle_ref(h);
    j->w = fxb_worker_for(b, h);
    j->arrived_ns = fx_now_ns();
    j->req.job = j;
    j->mirror = true;
    j->mirror_offset = offset;
    j->mirror_done = done;
    j->mirror_user = done_user;
    int rv = fx_queue_push(&j->w->jobs, j);
    if (rv != 0) {
        j->mirror_done = NULL; /* refused: the caller keeps |done_user| */
        fxb_job_free(j);
        return rv == FX_ECLOSED ? FX_ENOSTREAM : rv;
    }
    fxb_worker_kick(j->w);
    return 0;
}

static int op_in_use(void *user, void *stream, size_t appends)
{
    (void)user;
    fx_stream_handle *h = stream;
    if (!fx_stream_handle_is_active(h))
        return -1;
    /* The registry's reference, the mirror's and one per append in flight;
     * any other is a subscription, or a client's QUIC stream naming it. */
    return fx_stream_handle_refs(h) > 2 + appends ? 1 : 0;
}

static int op_route(void *user, const char *tenant, const char *ns, const char *stream,
                    char *addr, size_t cap)
{
    fx_broker *b = user;
    if (b->o.cluster == NULL) {
        snprintf(addr, cap, "not in a cluster");
        return -1;
    }
    fx_cluster_route r;
    fx_cluster_route_stream(b->o.cluster, tenant, ns, stream, false, &r);
    switch (r.kind) {
    case FX_CLUSTER_LOCAL:
        return 1;
    case FX_CLUSTER_REMOTE:
        if (r.addr[0] == '\0' && r.internal[0] == '\0') {
            snprintf(addr, cap, "the owner %s has no address", r.node_id);
            return -1;
        }
        /* Its internal listener when it has one, as the forwarder dials. */
        snprintf(addr, cap, "%s", r.internal[0] ? r.internal : r.addr);
        return 0;
    default:
        snprintf(addr, cap, "%s", r.why);
        return -1;
    }
}

static void op_stopped(void *user, void *stream, const char *why)
{
    fx_broker *b = user;
    fx_stream_handle *h = stream;
    const char *t = fx_stream_handle_tenant(h), *ns = fx_stream_handle_namespace(h),
               *st = fx_stream_handle_stream(h);
    /* Only this mirror's stream: the names may hold a newer one by now. */
    fx_stream_handle *cur = fx_registry_find(b->reg, slice_of(t), slice_of(ns), slice_of(st));
    if (cur == h) {
        FX_LOG_INFO("cluster", "mirror stream %s/%s/%s removed (%s): its local subscribers' "
                    "event streams end",
                    t, ns, st, why);
        if (fx_broker_release_stream(b, t, ns, st) != 0)
            FX_LOG_ERROR("cluster", "out of memory removing the mirror stream %s/%s/%s", t, ns,
                         st);
    }
    fx_stream_handle_unref(cur);
    fx_stream_handle_unref(h);
}

void fx_broker_mirror_opts(fx_broker *b, fx_mirror_opts *o)
{
    o->ops = (fx_mirror_ops){.append = op_append,
                             .in_use = op_in_use,
                             .route = op_route,
                             .stopped = op_stopped,
                             .user = b};
    o->lossless = b->o.subscriber_queue_policy == FX_QUEUE_BLOCK;
    /* The owners serve the certificate this broker serves (one per
     * cluster): its pin verifies them. */
    o->pin_sha256 = fx_broker_fingerprint(b);
}

void fx_broker_set_mirrors(fx_broker *b, struct fx_mirrors *m)
{
    atomic_store_explicit(&b->mirrors, m, memory_order_release);
}
