/* The server's accept path: a datagram for no known connection becomes a
 * connection only if it is a well-formed Initial and policy allows it: not
 * draining, under the half-open cap, and, once many handshakes are in
 * flight, carrying a valid Retry token (address validation, so a spoofed
 * flood cannot create state). Loop thread only. */
#include <errno.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "quic/internal.h"

#define RETRY_TOKEN_TTL_NS (10 * FX_NS_PER_S)

static bool has_retry_token(const ngtcp2_pkt_hd *hd)
{
    return hd->token.len > 0 && hd->token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY;
}

/* Answers |hd| with a Retry carrying a token bound to the client address
 * and its original DCID. */
static void send_retry(fx_quic_endpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                       socklen_t fromlen)
{
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN];
    uint8_t buf[1500];
    ngtcp2_cid scid;
    fx_quic_ep_new_cid(ep, &scid);
    ngtcp2_ssize tlen = ngtcp2_crypto_generate_retry_token(
        token, ep->token_secret, sizeof(ep->token_secret), hd->version,
        (const ngtcp2_sockaddr *)from, fromlen, &scid, &hd->dcid, fx_loop_now(ep->loop));
    if (tlen < 0)
        return;
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(buf, sizeof(buf), hd->version, &hd->scid, &scid,
                                               &hd->dcid, token, (size_t)tlen);
    if (n < 0)
        return;
    if (fx_quic_udp_send(ep, from, fromlen, fx_quic_src_for(ep, &ep->rx_local), buf, (size_t)n,
                         (size_t)n) == 0)
        ep->st.retries_sent++;
}

/* Decides whether |hd| may create state. Returns 1 (accept; |*odcid| set
 * when it came back from a Retry), 0 (answered or dropped). */
static int admit(fx_quic_endpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                 socklen_t fromlen, ngtcp2_cid *odcid, bool *retried)
{
    *retried = false;
    if (ep->draining) {
        ep->st.rx_dropped++;
        return 0;
    }
    if (ep->half_open >= ep->o.max_half_open) {
        ep->st.half_open_refused++;
        ep->st.rx_dropped++;
        return 0;
    }
    if (has_retry_token(hd)) {
        if (ngtcp2_crypto_verify_retry_token(odcid, hd->token.base, hd->token.len, ep->token_secret,
                                             sizeof(ep->token_secret), hd->version,
                                             (const ngtcp2_sockaddr *)from, fromlen, &hd->dcid,
                                             RETRY_TOKEN_TTL_NS, fx_loop_now(ep->loop)) != 0) {
            ep->st.bad_tokens++;
            ep->st.rx_dropped++;
            return 0;
        }
        *retried = true;
        return 1;
    }
    if (ep->half_open >= ep->o.retry_half_open) {
        send_retry(ep, hd, from, fromlen);
        ep->st.rx_dropped++;
        return 0;
    }
    return 1;
}

void fx_quic_accept_initial(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                            const uint8_t *data, size_t len)
{
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data, len) != 0) {
        ep->st.rx_dropped++;
        return;
    }
    ngtcp2_cid odcid;
    bool retried;
    if (admit(ep, &hd, from, fromlen, &odcid, &retried) == 0)
        return;
    fx_quic_conn *c;
    int rv = fx_quic_conn_accept(ep, &hd, retried ? &odcid : NULL, from, fromlen, &c);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_WARN, "accept failed: %s", fx_strerror(rv));
        ep->st.rx_dropped++;
        return;
    }
    ep->st.conns_accepted++;
    FX_COUNTER_INC(quic_conn_accepted);
    if (ep->cb.on_conn_new != NULL)
        ep->cb.on_conn_new(c, c->user);
    if (!c->dead)
        fx_quic_conn_read(c, from, fromlen, data, len);
}

/* ---- stateless reset ------------------------------------------------------ */

/* A short-header datagram for a connection we do not know (state lost, or
 * reaped while the peer still talked): tell the peer at once instead of
 * letting it wait for its idle timeout. At most |stateless_reset_rate| per
 * second, and always smaller than the trigger, so two endpoints cannot
 * ping-pong resets. */
bool fx_quic_stateless_reset(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                             const uint8_t *dcid, size_t dcidlen, size_t len)
{
    if (dcidlen != FX_QUIC_SCID_LEN || len <= 41 || ep->o.stateless_reset_rate == 0)
        return false;
    uint64_t now = fx_loop_now(ep->loop);
    if (now - ep->sr_window_start >= FX_NS_PER_S) {
        ep->sr_window_start = now;
        ep->sr_sent_in_window = 0;
    }
    if (ep->sr_sent_in_window >= ep->o.stateless_reset_rate)
        return false;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[64], buf[64];
    size_t size = len - 1 < 43 ? len - 1 : 43;
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->reset_secret,
                                                     sizeof(ep->reset_secret), &cid) != 0 ||
        gnutls_rnd(GNUTLS_RND_NONCE, rnd, sizeof(rnd)) < 0)
        return false;
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(buf, size, token, rnd,
                                                      size - NGTCP2_STATELESS_RESET_TOKENLEN);
    if (n < 0 || fx_quic_udp_send(ep, from, fromlen, fx_quic_src_for(ep, &ep->rx_local), buf,
                                  (size_t)n, (size_t)n) < 0)
        return false;
    ep->sr_sent_in_window++;
    ep->st.stateless_resets_sent++;
    return true;
}
