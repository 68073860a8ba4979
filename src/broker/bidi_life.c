/* A bidi stream's life below the stages that work on it (reply, resv,
 * admission, publish, subscribe): its references, its reset, whether all
 * it read is handled, and giving back what it holds: the pre-auth allowance, the frame's
 * reservation (or its wait) and the merge scratch. Connection loop. */
#include "broker/bidi_life.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/conn_life.h"
#include "broker/resolve.h"

/* ---- references -------------------------------------------------------------------------- */

/* Empties the merge, giving back what it still holds. */
void fxb_merge_reset(fxb_bidi *s)
{
    fxb_merge *m = &s->admit.merge;
    if (m->held.budget != NULL) {
        FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)m->held.n);
        fx_permit_release(&m->held);
    }
    fx_stream_handle_unref(m->h);
    m->h = NULL;
    free(m->owned);
    m->owned = NULL;
    m->nreq = m->nsl = 0;
    m->bytes = m->payload_bytes = 0;
}

static void merge_free(fxb_bidi *s)
{
    fxb_merge_reset(s);
    free(s->admit.merge.parts);
    free(s->admit.merge.sl);
    free(s->admit.merge.acks);
}

void fxb_bidi_unref(fxb_bidi *s)
{
    if (--s->refs > 0)
        return;
    fx_frame_decoder_deinit(&s->dec);
    merge_free(s);
    fxb_resolve_deinit(s);
    const fx_broker_auth *a = &s->conn->b->o.auth;
    if (s->auth_ctx != NULL && a->release != NULL)
        a->release(a->user, s->auth_ctx);
    free(s->pend);
    if (s->fwd_token != NULL) {
        explicit_bzero(s->fwd_token, strlen(s->fwd_token));
        free(s->fwd_token);
    }
    fxb_conn_unref(s->conn);
    free(s);
}

/* ---- reset ------------------------------------------------------------------------------- */

void fxb_bidi_fail(fxb_bidi *s, const char *why)
{
    if (s->closed)
        return;
    FX_COUNTER_INC(broker_stream_errors);
    FX_LOG_DEBUG("broker", "conn %llu stream %lld reset: %s", (unsigned long long)s->conn->id,
                 (long long)s->sid, why);
    s->ended = true;
    fxb_bidi_preauth_uncharge(s);
    fxb_ingress_resv_cancel(s); /* a reset frame will not complete */
    if (s->conn->qc != NULL)
        fx_quic_stream_reset(s->conn->qc, s->sid, FXB_CODE_MALFORMED);
}

/* ---- what it waits for ------------------------------------------------------------------- */

bool fxb_bidi_is_input_handled(const fxb_bidi *s)
{
    return s->admit.parked == NULL && s->admit.deferred == NULL && !s->resv.wait &&
           !s->sub_pending && s->pend_len == s->pend_off;
}

/* ---- what it holds ----------------------------------------------------------------------- */

void fxb_bidi_preauth_uncharge(fxb_bidi *s)
{
    if (s->preauth_charge == 0)
        return;
    atomic_fetch_sub_explicit(&s->conn->b->preauth_bytes, s->preauth_charge, memory_order_relaxed);
    FX_GAUGE_SUB(preauth_held_bytes, s->preauth_charge);
    s->conn->auth.preauth_bytes -= s->preauth_charge;
    s->preauth_charge = 0;
}

void fxb_bidi_preauth_release(fxb_bidi *s)
{
    fxb_bidi_preauth_uncharge(s);
    fx_loop_timer_cancel(s->conn->loop, &s->auth_timer);
    if (s->unauth_counted) {
        s->unauth_counted = false;
        s->conn->auth.unauth_streams--;
    }
}

/* Gives back the reservation of the frame just handled, if no job took it.
 * Never while a grant may be filling |s->resv.permit| on another thread. */
void fxb_ingress_resv_release(fxb_bidi *s)
{
    if (s->resv.wait || s->resv.permit.budget == NULL)
        return;
    FX_GAUGE_SUB(ingress_reserved_bytes, (int64_t)s->resv.permit.n);
    fx_permit_release(&s->resv.permit);
}

/* Gives back the reservation, or cancels its wait, as the stream goes away. */
void fxb_ingress_resv_cancel(fxb_bidi *s)
{
    fx_loop_timer_cancel(s->conn->loop, &s->resv.frame_timer);
    if (!s->resv.wait) {
        fxb_ingress_resv_release(s);
        return;
    }
    if (fx_budget_cancel(&s->conn->budget, &s->resv.w)) { /* nothing held */
        s->resv.wait = false;
        s->refs--; /* |resv.task| will not run; the caller still holds |s| */
    }
    /* else the grant is on its way: resv_resume releases it */
}
