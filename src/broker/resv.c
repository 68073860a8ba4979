/* The checkpoint-3 reservation of each frame a bidi stream reads: the bytes
 * its header announces, taken from the connection's share of the publish
 * budget before the body is read, the wait for them, the frame read timeout,
 * and the hand-over to the frame's publish job. Connection loop (a grant
 * arrives from the thread that freed the bytes and is posted back). */
#include "broker/resv.h"

#include <errno.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/broker_internal.h"
#include "felix/error.h"

/* ---- the checkpoint-3 reservation of each frame ------------------------------------ *
 * A header announcing L body bytes takes L from the connection's share and the
 * process-wide budget before any body byte is consumed or credited. When the
 * budget is exhausted the stream stops reading until the bytes are granted:
 * the budget is memory, and withholding credit while waiting for it is the
 * brake. Whatever policy the frame's publish has is applied at admission to
 * the bytes it needs beyond the reservation (its slice table). Since every
 * partial frame holds a reservation, the connection's share also caps the
 * partial frames of all its streams. From the reservation on, the body must
 * arrive within frame_read_timeout, or the stream is reset. */

static uint64_t frame_timeout_ns(const fx_broker *b)
{
    return b->o.frame_read_timeout_ns != 0 ? b->o.frame_read_timeout_ns
                                           : FXB_FRAME_READ_TIMEOUT_DEFAULT_NS;
}

/* The bytes of the frame being read are held: count them, start its clock
 * (not for a body already in the input: it cannot trickle). */
void fxb_ingress_resv_held(fxb_bidi *s, bool whole)
{
    FX_GAUGE_ADD(ingress_reserved_bytes, (int64_t)s->resv.permit.n);
    if (whole)
        return;
    fx_loop *l = s->conn->loop;
    if (fx_loop_timer_arm(l, &s->resv.frame_timer, fx_loop_now(l) + frame_timeout_ns(s->conn->b)) !=
        0)
        fxb_bidi_fail(s, "out of memory for a frame timer");
}

void fxb_ingress_resv_read(fxb_bidi *s)
{
    fx_loop_timer_cancel(s->conn->loop, &s->resv.frame_timer);
}

bool fxb_ingress_resv_granted(fxb_bidi *s)
{
    if (!s->resv.wait) /* fxb_bidi_close cancelled the wait first */
        return false;
    s->resv.wait = false;
    if (s->resv.rv != 0)
        fxb_bidi_fail(s, "publish byte budget closed");
    else if (s->ended)
        fx_permit_release(&s->resv.permit); /* the grant raced the end or close */
    else
        fxb_ingress_resv_held(s, false);
    return true;
}

void fxb_ingress_resv_adopt(fxb_bidi *s, fx_ingress_req *r)
{
    if (s->resv.permit.budget == NULL)
        return;
    FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)s->resv.permit.n);
    fx_ingress_req_adopt(r, &s->resv.permit);
}

/* Runs on the thread that freed the bytes (a worker) or closed the budget. */
static void on_resv_granted(void *user, int rv)
{
    fxb_bidi *s = user;
    s->resv.rv = rv;
    fx_loop_post(s->conn->loop, &s->resv.task);
}

/* Reserves |n| bytes for the frame whose header was just read. Returns 0
 * (held: read on), 1 (waiting: stop reading) or -1 (|s| failed). */
int fxb_ingress_reserve(fxb_bidi *s, uint16_t flags, size_t n, bool whole)
{
    fx_budget *b = &s->conn->budget;
    s->resv.flags = flags;
    int rv = fx_budget_try_acquire(b, n, &s->resv.permit);
    if (rv == FX_EFULL) {
        s->resv.wait = true; /* before acquire: the grant may come at once */
        s->refs++;           /* for |resv.task| */
        rv = fx_budget_acquire(b, n, &s->resv.w, &s->resv.permit);
        if (rv == -EAGAIN) {
            FX_COUNTER_INC(ingress_reserve_waited);
            return 1;
        }
        s->resv.wait = false;
        s->refs--;
    }
    if (rv == 0) {
        fxb_ingress_resv_held(s, whole);
        return s->ended ? -1 : 0;
    }
    fxb_bidi_fail(s, rv == FX_ETOOBIG ? "frame larger than the connection's publish byte share"
                                      : "publish byte budget closed");
    return -1;
}

static fx_ratelimit frame_timeout_rl = FX_RATELIMIT_INIT;

static void on_frame_timeout(fx_loop *l, fx_timer *t, void *user)
{
    (void)t;
    fxb_bidi *s = user;
    if (s->closed || s->ended)
        return;
    FX_COUNTER_INC(broker_frame_timeouts);
    FX_LOG_RATELIMITED(&frame_timeout_rl, fx_loop_now(l), FX_LOG_WARN, "broker",
                       "conn %llu stream %lld reset: a frame body of %zu bytes did not arrive "
                       "within frame_read_timeout_ms",
                       (unsigned long long)s->conn->id, (long long)s->sid,
                       (size_t)fx_frame_decoder_announced(&s->dec));
    fxb_ingress_resv_release(s);
    fxb_bidi_fail(s, "frame read timed out");
}

void fxb_ingress_resv_init(fxb_bidi *s, fx_task_cb on_granted)
{
    fx_task_init(&s->resv.task, on_granted, s);
    fx_timer_init(&s->resv.frame_timer, on_frame_timeout, s);
    s->resv.w.on_granted = on_resv_granted;
    s->resv.w.user = s;
}
