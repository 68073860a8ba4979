/* UDP socket I/O for an endpoint: socket set-up (buffers read back, GRO,
 * don't-fragment), GSO aggregates on send with a sendmmsg fallback when the
 * kernel reports EIO, recvmmsg + GRO train splitting on receive, the ICMP
 * errors a client endpoint reads (IP_RECVERR), and the test hooks that drop
 * and delay datagrams. IPv6 sockets bound to "::" are dual-stack (IPv4 peers
 * appear as IPv4-mapped addresses). Loop thread only. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/metrics.h"
#include "felix/error.h"
#include "quic/internal.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* ---- set-up ------------------------------------------------------------------ */

/* Sets a socket buffer, preferring the FORCE variant (root passes the
 * rmem_max/wmem_max clamp), and returns the size the kernel really gives
 * (it reports twice the usable size; we log what it reports). */
static int set_buffer(int fd, int opt, int force_opt, int want)
{
    if (want > 0 && setsockopt(fd, SOL_SOCKET, force_opt, &want, sizeof(want)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want)); /* read back below */
    int got = 0;
    socklen_t len = sizeof(got);
    if (getsockopt(fd, SOL_SOCKET, opt, &got, &len) < 0)
        return -errno;
    return got;
}

static void set_options(fx_quic_endpoint *ep, int fd, int family)
{
    ep->st.sndbuf = set_buffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, ep->o.udp_send_buffer);
    ep->st.rcvbuf = set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, ep->o.udp_recv_buffer);
    if (ep->st.sndbuf < ep->o.udp_send_buffer || ep->st.rcvbuf < ep->o.udp_recv_buffer)
        fx_quic_log(FX_QLOG_WARN,
                    "udp buffers clamped by the kernel: send %d recv %d (asked %d / %d); "
                    "raise net.core.wmem_max / rmem_max",
                    ep->st.sndbuf, ep->st.rcvbuf, ep->o.udp_send_buffer, ep->o.udp_recv_buffer);
    else
        fx_quic_log(FX_QLOG_INFO, "udp buffers: send %d recv %d", ep->st.sndbuf, ep->st.rcvbuf);
    int one = 1;
    if (ep->o.gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) < 0) {
        fx_quic_log(FX_QLOG_WARN, "UDP_GRO unavailable (%s); GSO off too", strerror(errno));
        ep->o.gro = false;
        ep->gso = false;
    }
    if (ep->wildcard) {
        int on = 1;
        if (family == AF_INET)
            (void)setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof(on));
        else
            (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof(on));
    }
    /* QUIC does its own PMTUD: never fragment. An IPv6 socket sets the IPv4
     * option too, for the IPv4-mapped peers of a dual-stack socket (best
     * effort, like the rest: a kernel that refuses still delivers). */
    int pmtu = IP_PMTUDISC_DO;
    (void)setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
    if (family == AF_INET6) {
        int pmtu6 = IPV6_PMTUDISC_DO;
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu6, sizeof(pmtu6));
    }
    /* A client reads the ICMP errors its datagrams provoke ("ICMP errors"
     * below). An IPv6 socket needs the IPv4 option too, for its IPv4-mapped
     * peers. Best effort: without it a dead server is found by the idle
     * timeout, as before. */
    if (!ep->server) {
        int on = 1;
        bool ok = setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)) == 0;
        if (family == AF_INET6)
            ok = setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof(on)) == 0 || ok;
        ep->recverr = ok;
        if (!ok)
            fx_quic_log(FX_QLOG_WARN, "IP_RECVERR unavailable (%s): a dead server is found by "
                                      "the idle timeout only", strerror(errno));
    }
}

int fx_quic_udp_open(fx_quic_endpoint *ep, const struct sockaddr *addr, socklen_t len)
{
    int fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0)
        return -errno;
    ep->gso = ep->o.gso;
    set_options(ep, fd, addr->sa_family);
    int one = 1, zero = 0;
    /* "::" serves IPv4 too, whatever net.ipv6.bindv6only says. */
    if (addr->sa_family == AF_INET6 &&
        memcmp(&((const struct sockaddr_in6 *)addr)->sin6_addr, &in6addr_any,
               sizeof(in6addr_any)) == 0 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0) {
        int rv = -errno;
        close(fd);
        return rv;
    }
    if (ep->group != NULL && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        int rv = -errno;
        close(fd);
        return rv;
    }
    if (bind(fd, addr, len) < 0) {
        int rv = -errno;
        close(fd);
        return rv;
    }
    ep->locallen = sizeof(ep->local);
    if (getsockname(fd, (struct sockaddr *)&ep->local, &ep->locallen) < 0) {
        int rv = -errno;
        close(fd);
        return rv;
    }
    if (ep->local.ss_family == AF_INET)
        ep->port = ntohs(((struct sockaddr_in *)&ep->local)->sin_port);
    else
        ep->port = ntohs(((struct sockaddr_in6 *)&ep->local)->sin6_port);
    ep->fd = fd;
    return 0;
}

/* ---- test hook --------------------------------------------------------------- */

bool fx_quic_test_drop(fx_quic_endpoint *ep)
{
    if (ep->o.test_drop_permille == 0)
        return false;
    /* xorshift64: deterministic per endpoint, good enough to pick losses. */
    uint64_t x = ep->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ep->rng = x;
    if (x % 1000 >= ep->o.test_drop_permille)
        return false;
    ep->st.test_dropped++;
    return true;
}

/* One datagram held by the delay hook, with the addresses it came with. */
typedef struct qdelayed {
    uint64_t due;
    struct sockaddr_storage from, local;
    socklen_t fromlen, locallen;
    size_t len;
    uint8_t data[];
} qdelayed;

/* Releases every held datagram whose time has come, in arrival order, then
 * writes what they made the connections want to send. */
static void delay_release(fx_loop *l, fx_timer *t, void *user)
{
    fx_quic_endpoint *ep = user;
    uint64_t now = fx_loop_now(l);
    while (ep->tdq_len > 0 && !ep->freeing) {
        qdelayed *d = ep->tdq[ep->tdq_head];
        if (d->due > now)
            break;
        ep->tdq_head = (ep->tdq_head + 1) % FX_QUIC_TEST_DELAY_CAP;
        ep->tdq_len--;
        ep->tdq_bytes -= d->len;
        ep->rx_local = d->local;
        ep->rx_locallen = d->locallen;
        fx_quic_ep_on_datagram(ep, (struct sockaddr *)&d->from, d->fromlen, d->data, d->len);
        free(d);
    }
    fx_quic_ep_flush_dirty(ep);
    if (ep->tdq_len > 0 && !ep->freeing && fx_loop_timer_arm(l, t, ep->tdq[ep->tdq_head]->due) < 0)
        fx_quic_log(FX_QLOG_WARN, "delay hook: timer not armed; held datagrams wait for the next");
}

void fx_quic_test_delay_hold(fx_quic_endpoint *ep, const struct sockaddr *from, socklen_t fromlen,
                             const uint8_t *data, size_t len)
{
    qdelayed *d = NULL;
    if (ep->tdq_len < FX_QUIC_TEST_DELAY_CAP && ep->tdq_bytes + len <= FX_QUIC_TEST_DELAY_BYTES)
        d = malloc(sizeof(*d) + len);
    if (d == NULL) {
        ep->st.test_dropped++; /* a full (or unallocatable) FIFO loses it, like a router */
        return;
    }
    d->due = fx_loop_now(ep->loop) + ep->test_delay_ns;
    memcpy(&d->from, from, fromlen);
    d->fromlen = fromlen;
    d->local = ep->rx_local;
    d->locallen = ep->rx_locallen;
    d->len = len;
    memcpy(d->data, data, len);
    ep->tdq[(ep->tdq_head + ep->tdq_len) % FX_QUIC_TEST_DELAY_CAP] = d;
    ep->tdq_len++;
    ep->tdq_bytes += len;
    /* FIFO order means the head is due first; arm only when idle (or when a
     * re-arm failed earlier). */
    if (!fx_timer_is_armed(&ep->tdq_timer) &&
        fx_loop_timer_arm(ep->loop, &ep->tdq_timer, ep->tdq[ep->tdq_head]->due) < 0)
        fx_quic_log(FX_QLOG_WARN, "delay hook: timer not armed; held datagrams wait for the next");
}

int fx_quic_endpoint_set_test_delay(fx_quic_endpoint *ep, uint64_t delay_ns)
{
    if (ep->tdq == NULL && delay_ns != 0) {
        ep->tdq = calloc(FX_QUIC_TEST_DELAY_CAP, sizeof(*ep->tdq));
        if (ep->tdq == NULL)
            return -ENOMEM;
        fx_timer_init(&ep->tdq_timer, delay_release, ep);
    }
    ep->test_delay_ns = delay_ns;
    return 0;
}

void fx_quic_test_delay_free(fx_quic_endpoint *ep)
{
    if (ep->tdq == NULL)
        return;
    fx_loop_timer_cancel(ep->loop, &ep->tdq_timer);
    for (; ep->tdq_len > 0; ep->tdq_len--) {
        free(ep->tdq[ep->tdq_head]);
        ep->tdq_head = (ep->tdq_head + 1) % FX_QUIC_TEST_DELAY_CAP;
    }
    free(ep->tdq);
    ep->tdq = NULL;
    ep->tdq_bytes = 0;
}

/* ---- ICMP errors (client endpoints) -------------------------------------------- */

/* With IP_RECVERR the kernel queues every ICMP error one of our datagrams
 * provoked on the socket's error queue (the address the datagram went to,
 * the ICMP type and code, who sent it, and the start of the datagram), and
 * also reports the latest one once as the error of the next send or receive
 * call on the socket, whichever connection that call is for. That second
 * report carries nothing the queue lacks, so send and read absorb it (the
 * call is made again) and read_errors() decides from the queue.
 *
 * The socket is not connect()ed: a client endpoint's connections may reach
 * several servers (a cluster client keeps one per broker), so an error is
 * matched to a connection by the address its datagram went to. It ends that
 * connection only when it proves the peer gone:
 * - a port unreachable (ICMP 3/3, ICMPv6 1/4) sent by the peer's own host
 *   says nothing listens at the peer's address any more (a killed process):
 *   the connection ends at once with -ECONNREFUSED, in any state;
 * - a host or network unreachable (ICMP 3/1, 3/0; ICMPv6 1/3, 1/0), sent by
 *   any router, ends a connection still in its handshake (-EHOSTUNREACH,
 *   -ENETUNREACH), as a TCP connect fails; an established connection
 *   ignores it, as TCP does such soft errors: the path may heal, and the
 *   idle timeout ends it if it does not;
 * - anything else (a packet too big, a time exceeded, an administrative
 *   prohibition) proves nothing and is ignored.
 * The error's quote of our datagram must also name the connection's current
 * destination connection ID (or its first one) when it is long enough to
 * hold it, so an error for a packet of an earlier connection to the same
 * address (a server that restarted on its port) never ends a newer one.
 * Each error is counted (stats icmp_errors, icmp_closes, icmp_ignored). */

/* The errors read_errors() may have left to be reported by the next call. */
static bool icmp_reported(const fx_quic_endpoint *ep, int e)
{
    return ep->recverr && (e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH ||
                           e == EHOSTDOWN || e == ENONET || e == ENOPROTOOPT || e == EPROTO ||
                           e == EACCES || e == EOPNOTSUPP || e == EMSGSIZE);
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

static uint16_t port_of(const struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
                                   : ((const struct sockaddr_in6 *)a)->sin6_port;
}

/* 1 when the quoted start of our datagram |q| (|n| bytes) carries a DCID of
 * |c|, 0 when it carries another, -1 when it is too short to tell. */
static int quote_names(fx_quic_conn *c, const uint8_t *q, size_t n)
{
    const ngtcp2_cid *cur = ngtcp2_conn_get_dcid(c->q);
    const ngtcp2_cid *first = ngtcp2_conn_get_client_initial_dcid(c->q);
    const uint8_t *id;
    size_t len;
    if (n < 1)
        return -1;
    if (q[0] & 0x80) { /* long header: version, then the DCID with its length */
        if (n < 6 || n < 6 + (size_t)q[5])
            return -1;
        id = q + 6;
        len = q[5];
    } else {
        if (n < 1 + cur->datalen)
            return -1;
        id = q + 1;
        len = cur->datalen;
    }
    if ((len == cur->datalen && memcmp(id, cur->data, len) == 0) ||
        (len == first->datalen && memcmp(id, first->data, len) == 0))
        return 1;
    return 0;
}

static void ip_text(const struct sockaddr_storage *a, char *out, size_t cap)
{
    const void *p = a->ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
    if (inet_ntop(a->ss_family, p, out, (socklen_t)cap) == NULL)
        snprintf(out, cap, "?");
}

/* One queued error |ee| (from |off|, about our datagram to |to| that began
 * with |q|, |n| bytes): ends the connection it proves dead, or counts it
 * as ignored. */
static void on_icmp(fx_quic_endpoint *ep, const struct sock_extended_err *ee,
                    const struct sockaddr_storage *off, const struct sockaddr_storage *to,
                    const uint8_t *q, size_t n)
{
    bool v4 = ee->ee_origin == SO_EE_ORIGIN_ICMP, v6 = ee->ee_origin == SO_EE_ORIGIN_ICMP6;
    bool hard = (v4 && ee->ee_type == ICMP_DEST_UNREACH && ee->ee_code == ICMP_PORT_UNREACH) ||
                (v6 && ee->ee_type == ICMP6_DST_UNREACH && ee->ee_code == ICMP6_DST_UNREACH_NOPORT);
    bool soft =
        (v4 && ee->ee_type == ICMP_DEST_UNREACH &&
         (ee->ee_code == ICMP_HOST_UNREACH || ee->ee_code == ICMP_NET_UNREACH)) ||
        (v6 && ee->ee_type == ICMP6_DST_UNREACH &&
         (ee->ee_code == ICMP6_DST_UNREACH_ADDR || ee->ee_code == ICMP6_DST_UNREACH_NOROUTE));
    char who[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN];
    ip_text(off, who, sizeof(who));
    ip_text(to, dst, sizeof(dst));
    int ended = 0;
    fx_quic_conn *next;
    for (fx_quic_conn *c = ep->conns; (hard || soft) && c != NULL; c = next) {
        next = c->next; /* a connection that ends leaves the list */
        if (c->dead || c->server || c->q == NULL || !same_ip(&c->remote, to) ||
            port_of(&c->remote) != port_of(to))
            continue;
        const char *why = NULL;
        if (hard && !same_ip(off, &c->remote))
            why = "a port unreachable not sent by the peer's host";
        else if (soft && c->handshake_done)
            why = "a host or network unreachable for an established connection";
        else if (quote_names(c, q, n) == 0)
            why = "a packet of an earlier connection to that address";
        if (why != NULL) {
            fx_quic_log(FX_QLOG_DEBUG, "ICMP %s for %s:%u from %s ignored: %s",
                        fx_strerror(-(int)ee->ee_errno), dst, (unsigned)ntohs(port_of(to)), who,
                        why);
            continue;
        }
        /* The peer's address is the connection's own: only who answered. */
        if (hard)
            snprintf(c->info.text, sizeof(c->info.text),
                     "ICMP port unreachable from %s: nothing listens there", who);
        else
            snprintf(c->info.text, sizeof(c->info.text),
                     "ICMP host or network unreachable from %s during the handshake", who);
        fx_quic_log(FX_QLOG_INFO, "connection to %s:%u ended: %s", dst,
                    (unsigned)ntohs(port_of(to)), c->info.text);
        fx_quic_conn_finish(c, hard ? -ECONNREFUSED : -(int)ee->ee_errno);
        ended++;
    }
    if (ended > 0)
        ep->st.icmp_closes += (uint64_t)ended;
    else
        ep->st.icmp_ignored++;
}

/* Reads the socket's error queue empty (bounded per call). */
static void read_errors(fx_quic_endpoint *ep)
{
    for (int i = 0; i < FX_QUIC_RX_BUDGET && !ep->freeing; i++) {
        uint8_t q[64]; /* enough of our datagram for its header and DCID */
        struct sockaddr_storage to;
        union {
            char buf[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in6)) +
                     64];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = q, .iov_len = sizeof(q)};
        struct msghdr m = {.msg_name = &to,
                           .msg_namelen = sizeof(to),
                           .msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl.buf,
                           .msg_controllen = sizeof(ctl.buf)};
        memset(&to, 0, sizeof(to));
        ssize_t n = recvmsg(ep->fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                fx_quic_log(FX_QLOG_WARN, "recvmsg(MSG_ERRQUEUE): %s", strerror(errno));
            return;
        }
        ep->st.icmp_errors++;
        struct sock_extended_err ee;
        struct sockaddr_storage off;
        bool have = false;
        memset(&off, 0, sizeof(off));
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm)) {
            if (!((cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_RECVERR) ||
                  (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_RECVERR)) ||
                cm->cmsg_len < CMSG_LEN(sizeof(ee)))
                continue;
            memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
            size_t rest = cm->cmsg_len - CMSG_LEN(sizeof(ee)); /* SO_EE_OFFENDER */
            memcpy(&off, CMSG_DATA(cm) + sizeof(ee),
                   rest < sizeof(struct sockaddr_in6) ? rest : sizeof(struct sockaddr_in6));
            have = true;
        }
        if (!have || (m.msg_flags & MSG_CTRUNC)) {
            ep->st.icmp_ignored++;
            continue;
        }
        on_icmp(ep, &ee, &off, &to, q, (size_t)n);
    }
}

/* ---- send -------------------------------------------------------------------- */

/* Appends the source-address cmsg for |src| to |m| at |cm|; returns the
 * next cmsg slot. */
static struct cmsghdr *add_src(struct msghdr *m, struct cmsghdr *cm, const struct sockaddr *src)
{
    if (src->sa_family == AF_INET) {
        struct in_pktinfo pi = {.ipi_spec_dst = ((const struct sockaddr_in *)src)->sin_addr};
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(pi));
        memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    } else {
        struct in6_pktinfo pi = {.ipi6_addr = ((const struct sockaddr_in6 *)src)->sin6_addr};
        cm->cmsg_level = IPPROTO_IPV6;
        cm->cmsg_type = IPV6_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(pi));
        memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    }
    return CMSG_NXTHDR(m, cm);
}

typedef union {
    char buf[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(struct in6_pktinfo))];
    struct cmsghdr align;
} ctlbuf;

/* Fills |m|'s control data: the GSO segment size when |seg| < |len|, the
 * source address when |src|. */
static void set_control(struct msghdr *m, ctlbuf *u, const struct sockaddr *src, size_t len,
                        size_t seg)
{
    if (len <= seg && src == NULL)
        return;
    memset(u, 0, sizeof(*u));
    m->msg_control = u->buf;
    m->msg_controllen = sizeof(u->buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(m);
    size_t used = 0;
    if (len > seg) {
        cm->cmsg_level = IPPROTO_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t s = (uint16_t)seg;
        memcpy(CMSG_DATA(cm), &s, sizeof(s));
        used += CMSG_SPACE(sizeof(uint16_t));
        cm = CMSG_NXTHDR(m, cm);
    }
    if (src != NULL) {
        used += src->sa_family == AF_INET ? CMSG_SPACE(sizeof(struct in_pktinfo))
                                          : CMSG_SPACE(sizeof(struct in6_pktinfo));
        add_src(m, cm, src);
    }
    m->msg_controllen = used;
}

static int send_gso(fx_quic_endpoint *ep, const struct sockaddr *to, socklen_t tolen,
                    const struct sockaddr *src, const uint8_t *data, size_t len, size_t seg)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    ctlbuf u;
    struct msghdr m = {
        .msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov, .msg_iovlen = 1};
    set_control(&m, &u, src, len, seg);
    bool absorbed = false;
    ssize_t n;
    for (;;) {
        n = sendmsg(ep->fd, &m, 0);
        if (n >= 0 || !(errno == EINTR || (!absorbed && icmp_reported(ep, errno))))
            break;
        absorbed = absorbed || errno != EINTR;
    }
    if (n < 0)
        return -errno;
    ep->st.tx_sendmsg++;
    ep->st.tx_datagrams += (len + seg - 1) / seg;
    size_t first = seg < len ? seg : len; /* segments after the first are not larger */
    if (first > ep->st.tx_datagram_max)
        ep->st.tx_datagram_max = first;
    FX_COUNTER_ADD(quic_datagrams_out, (len + seg - 1) / seg);
    FX_COUNTER_ADD(quic_bytes_out, len);
    return 0;
}

/* Without GSO: one datagram per segment, in sendmmsg batches. */
static int send_each(fx_quic_endpoint *ep, const struct sockaddr *to, socklen_t tolen,
                     const struct sockaddr *src, const uint8_t *data, size_t len, size_t seg)
{
    struct mmsghdr mm[FX_QUIC_GSO_SEGS];
    struct iovec iov[FX_QUIC_GSO_SEGS];
    ctlbuf ctl[FX_QUIC_GSO_SEGS];
    size_t n = 0;
    for (size_t off = 0; off < len && n < FX_QUIC_GSO_SEGS; off += seg, n++) {
        iov[n].iov_base = (void *)(data + off);
        iov[n].iov_len = len - off < seg ? len - off : seg;
        mm[n] = (struct mmsghdr){
            .msg_hdr = {
                .msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov[n], .msg_iovlen = 1}};
        set_control(&mm[n].msg_hdr, &ctl[n], src, iov[n].iov_len, iov[n].iov_len);
    }
    size_t done = 0;
    bool absorbed = false;
    while (done < n) {
        int k = sendmmsg(ep->fd, mm + done, (unsigned)(n - done), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && !absorbed && icmp_reported(ep, errno)) {
            absorbed = true;
            continue;
        }
        if (k < 0) {
            /* Datagrams already sent stay sent; the rest count as lost and
             * QUIC's recovery resends them. */
            return done > 0 ? 0 : -errno;
        }
        ep->st.tx_sendmsg++;
        ep->st.tx_datagrams += (uint64_t)k;
        if (iov[done].iov_len > ep->st.tx_datagram_max)
            ep->st.tx_datagram_max = iov[done].iov_len; /* the first is the largest */
        FX_COUNTER_ADD(quic_datagrams_out, (uint64_t)k);
        for (int i = 0; i < k; i++)
            FX_COUNTER_ADD(quic_bytes_out, iov[done + (size_t)i].iov_len);
        done += (size_t)k;
    }
    return 0;
}

int fx_quic_udp_send(fx_quic_endpoint *ep, const struct sockaddr *to, socklen_t tolen,
                     const struct sockaddr *src, const uint8_t *data, size_t len, size_t seg)
{
    if (!ep->gso || len <= seg)
        return len <= seg ? send_gso(ep, to, tolen, src, data, len, len)
                          : send_each(ep, to, tolen, src, data, len, seg);
    int rv = send_gso(ep, to, tolen, src, data, len, seg);
    if (rv == -EIO) {
        /* The device (or kernel) cannot segment: it says so only now. */
        fx_quic_log(FX_QLOG_WARN, "sendmsg with UDP_SEGMENT failed (EIO): GSO off");
        ep->gso = false;
        ep->st.gso_disabled = 1;
        rv = send_each(ep, to, tolen, src, data, len, seg);
    }
    return rv;
}

const struct sockaddr *fx_quic_src_for(const fx_quic_endpoint *ep, const void *local)
{
    return ep->wildcard ? local : NULL;
}

/* ---- receive ----------------------------------------------------------------- */

/* Reads the GRO segment size (else |len|) and, on a wildcard server, the
 * local address the datagram was sent to into ep->rx_local. */
static size_t parse_control(fx_quic_endpoint *ep, struct msghdr *m, size_t len)
{
    size_t seg = len;
    ep->rx_local = ep->local;
    ep->rx_locallen = ep->locallen;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm != NULL; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(cm), sizeof(v));
            if (v > 0)
                seg = (size_t)v;
        } else if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
            ((struct sockaddr_in *)&ep->rx_local)->sin_addr = pi.ipi_addr;
        } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
            ((struct sockaddr_in6 *)&ep->rx_local)->sin6_addr = pi.ipi6_addr;
        }
    }
    return seg;
}

static void deliver(fx_quic_endpoint *ep, struct mmsghdr *mm)
{
    struct msghdr *m = &mm->msg_hdr;
    size_t len = mm->msg_len;
    if (m->msg_flags & MSG_TRUNC) {
        ep->st.rx_dropped++;
        return;
    }
    size_t seg = parse_control(ep, m, len);
    const uint8_t *p = m->msg_iov[0].iov_base;
    for (size_t off = 0; off < len; off += seg) {
        size_t n = len - off < seg ? len - off : seg;
        ep->st.rx_datagrams++;
        FX_COUNTER_INC(quic_datagrams_in);
        FX_COUNTER_ADD(quic_bytes_in, n);
        if (fx_quic_test_drop(ep))
            continue;
        if (ep->test_delay_ns != 0) { /* test hook: the only cost while off */
            fx_quic_test_delay_hold(ep, m->msg_name, m->msg_namelen, p + off, n);
            continue;
        }
        fx_quic_ep_on_datagram(ep, m->msg_name, m->msg_namelen, p + off, n);
    }
}

void fx_quic_udp_read(fx_quic_endpoint *ep)
{
    struct mmsghdr mm[FX_QUIC_RX_BATCH];
    struct iovec iov[FX_QUIC_RX_BATCH];
    struct sockaddr_storage from[FX_QUIC_RX_BATCH];
    union {
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct in6_pktinfo))];
        struct cmsghdr align;
    } ctl[FX_QUIC_RX_BATCH];
    if (ep->recverr)
        read_errors(ep);
    for (uint64_t budget = 0; budget < FX_QUIC_RX_BUDGET && !ep->freeing;) {
        for (size_t i = 0; i < FX_QUIC_RX_BATCH; i++) {
            iov[i] =
                (struct iovec){.iov_base = ep->rx + i * FX_QUIC_RX_BUF, .iov_len = FX_QUIC_RX_BUF};
            mm[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i],
                                                 .msg_namelen = sizeof(from[i]),
                                                 .msg_iov = &iov[i],
                                                 .msg_iovlen = 1,
                                                 .msg_control = ctl[i].buf,
                                                 .msg_controllen = sizeof(ctl[i].buf)}};
        }
        int n = recvmmsg(ep->fd, mm, FX_QUIC_RX_BATCH, 0, NULL);
        if (n < 0 && icmp_reported(ep, errno)) {
            /* An ICMP error that arrived since read_errors() ran: read it
             * from the queue, then go on reading datagrams. */
            read_errors(ep);
            budget++;
            continue;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                fx_quic_log(FX_QLOG_WARN, "recvmmsg: %s", strerror(errno));
            return;
        }
        for (int i = 0; i < n; i++)
            deliver(ep, &mm[i]);
        fx_quic_ep_flush_dirty(ep);
        budget += (uint64_t)n;
        if (n < FX_QUIC_RX_BATCH)
            return;
    }
}
