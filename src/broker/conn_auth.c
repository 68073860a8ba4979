/* A connection's authentication state: the end of its pre-auth limits once
 * a stream authenticated, closing it after too many failed verifications,
 * and the lifetime of the credentials its streams and subscriptions hold
 * (expiry, key removal on reload). Connection loop (fx_broker_auth_reloaded:
 * any thread). */
#include "broker/conn_auth.h"

#include <stdint.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "broker/bidi_life.h"
#include "broker/reply.h"
#include "broker/sub.h"

static fx_ratelimit auth_failures_rl = FX_RATELIMIT_INIT;
static fx_ratelimit lapsed_rl = FX_RATELIMIT_INIT;

static void watch_expiry(fxb_conn *c, int64_t exp_s);

/* ---- the part ------------------------------------------------------------------------------ */

void fxb_conn_auth_init(fxb_conn *c, fx_timer_cb on_timeout)
{
    fxb_peer_key_of(fx_quic_conn_remote(c->qc, NULL), &c->auth.peer);
    fx_timer_init(&c->auth.timer, on_timeout, c);
    fx_timer_init(&c->auth.exp_timer, fxb_conn_on_expiry, c);
    c->auth.exp_next_s = INT64_MAX;
}

void fxb_conn_auth_deinit(fxb_conn *c)
{
    fx_loop_timer_cancel(c->loop, &c->auth.timer);
    fx_loop_timer_cancel(c->loop, &c->auth.exp_timer);
    if (c->auth.peer_counted)
        fxb_peers_conn_give(&c->b->peers, &c->auth.peer, fx_loop_now(c->loop));
}

/* ---- authenticated or not ---------------------------------------------------------------- */

void fxb_conn_on_authed(fxb_conn *c, fxb_bidi *s)
{
    if (!c->auth.authed) {
        c->auth.authed = true;
        fx_loop_timer_cancel(c->loop, &c->auth.timer);
    }
    fxb_bidi_preauth_release(s);
    watch_expiry(c, s->auth_exp_s);
}

void fxb_conn_on_auth_failed(fxb_conn *c)
{
    if (++c->auth.failures < c->b->o.auth_failures_per_conn || c->dead || c->qc == NULL)
        return;
    char addr[64];
    fxb_peer_key_str(&c->auth.peer, addr, sizeof(addr));
    FX_COUNTER_INC(preauth_conn_auth_failures);
    FX_LOG_RATELIMITED(&auth_failures_rl, fx_loop_now(c->loop), FX_LOG_WARN, "broker",
                       "conn %llu from %s closed after %u failed auths (auth_failures_per_conn)",
                       (unsigned long long)c->id, addr, (unsigned)c->auth.failures);
    c->dead = true;
    fx_quic_conn_close(c->qc, FXB_CODE_AUTH_FAILED, "too many failed auths");
}

/* ---- credential lifetime ------------------------------------------------------------------- */

static int64_t unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* token times are Unix seconds */
    return (int64_t)ts.tv_sec;
}

/* Arms |c|'s expiry timer for the Unix second |exp_s| (the credentials hold
 * through that second). */
static void arm_expiry(fxb_conn *c, int64_t exp_s)
{
    c->auth.exp_next_s = exp_s;
    if (exp_s == INT64_MAX) {
        fx_loop_timer_cancel(c->loop, &c->auth.exp_timer);
        return;
    }
    int64_t left = exp_s + 1 - unix_now();
    uint64_t now = fx_loop_now(c->loop);
    uint64_t at = left <= 0 ? now : now + (uint64_t)left * FX_NS_PER_S;
    if (fx_loop_timer_arm(c->loop, &c->auth.exp_timer, at) != 0) {
        /* Without a timer the lifetime cannot be enforced: close instead. */
        FX_LOG_ERROR("broker", "conn %llu closed: no memory for its token expiry timer",
                     (unsigned long long)c->id);
        c->dead = true;
        fx_quic_conn_close(c->qc, FXB_CODE_AUTH_EXPIRED, "out of memory");
    }
}

/* Watches the expiry |exp_s| (Unix seconds) of credentials held on |c|. */
static void watch_expiry(fxb_conn *c, int64_t exp_s)
{
    if (exp_s < c->auth.exp_next_s && c->qc != NULL)
        arm_expiry(c, exp_s);
}

static const char EXPIRED[] = "token expired";

/* Why credentials |ctx| expiring at |exp_s| no longer hold, or NULL. */
static const char *lapsed(const fx_broker_auth *a, const void *ctx, int64_t exp_s, int64_t now_s,
                          bool keys)
{
    if (ctx == NULL)
        return NULL;
    if (now_s > exp_s)
        return EXPIRED;
    if (keys && a->key_valid != NULL && !a->key_valid(a->user, ctx))
        return "token key removed";
    return NULL;
}

static void log_lapsed(fxb_conn *c, const char *what, long long id, const char *why)
{
    if (why == EXPIRED)
        FX_COUNTER_INC(broker_auth_expired);
    else
        FX_COUNTER_INC(broker_auth_key_removed);
    FX_LOG_RATELIMITED(&lapsed_rl, fx_loop_now(c->loop), FX_LOG_INFO, "broker",
                       "conn %llu %s %lld ended: %s", (unsigned long long)c->id, what, id, why);
}

/* Ends what on |c| holds lapsed credentials (expired or, with |keys|, signed
 * by a removed key), then re-arms the timer at the next expiry. */
static void sweep(fxb_conn *c, bool keys)
{
    const fx_broker_auth *a = &c->b->o.auth;
    int64_t now_s = unix_now(), next = INT64_MAX;
    for (fxb_bidi *s = c->bidis; s != NULL; s = s->next) {
        if (!s->authed || s->ended)
            continue;
        const char *why = lapsed(a, s->auth_ctx, s->auth_exp_s, now_s, keys);
        if (why != NULL) {
            log_lapsed(c, "stream", (long long)s->sid, why);
            fxb_bidi_error(s, why, true);
        } else if (s->auth_ctx != NULL && s->auth_exp_s < next) {
            next = s->auth_exp_s;
        }
    }
    for (fxb_sub *sub = c->subs, *n; sub != NULL; sub = n) {
        n = sub->next;
        const char *why = lapsed(a, sub->auth_ctx, sub->auth_exp_s, now_s, keys);
        if (why != NULL) {
            log_lapsed(c, "subscription", (long long)sub->id, why);
            /* Reset with our own code: the client tells it from an unsubscribe. */
            bool open = sub->writer.uni_open;
            int64_t sid = sub->writer.uni_sid;
            fxb_sub_close(sub, false); /* may free |sub| */
            if (open)
                fx_quic_stream_reset(c->qc, sid, FXB_CODE_AUTH_EXPIRED);
        } else if (sub->auth_ctx != NULL && sub->auth_exp_s < next) {
            next = sub->auth_exp_s;
        }
    }
    arm_expiry(c, next);
}

void fxb_conn_on_expiry(fx_loop *l, fx_timer *t, void *user)
{
    (void)l;
    (void)t;
    fxb_conn *c = user;
    if (!c->dead && c->qc != NULL)
        sweep(c, false);
}

void fxb_conn_auth_recheck(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fxb_ep *e = user;
    for (fxb_conn *c = e->conns; c != NULL; c = c->cnext)
        if (!c->dead && c->qc != NULL)
            sweep(c, true);
}

void fx_broker_auth_reloaded(fx_broker *b)
{
    if (b->o.auth.key_valid == NULL || !b->started || b->stopped)
        return;
    for (uint32_t i = 0; i < b->neps; i++)
        fx_loop_post(b->eps[i].loop, &b->eps[i].auth_task); /* coalesced if pending */
}
