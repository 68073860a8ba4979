/* Server groups (which loop an endpoint runs on is fx_placement_endpoint's
 * rule, base/placement.h). A server group is one server endpoint per server loop,
 * all bound to one port with SO_REUSEPORT; a classic BPF program steers each
 * datagram to member (first DCID byte mod n), and our connection IDs start
 * with the owning member's index, so an established connection's datagrams
 * land on its loop. A datagram that still reaches another member (no BPF, a
 * kernel that reorders the group) is forwarded to the owner through its
 * loop's inbox, never reset. Group creation and free happen before the loops
 * run or after they stop; forwarding runs on the loops. */
#include <errno.h>
#include <linux/filter.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "felix/error.h"
#include "quic/internal.h"

/* Forwarded datagrams in flight towards one member; beyond, drop and count. */
#define FORWARD_CAP 4096

struct fx_quic_server_group {
    size_t n;
    bool closing;
    fx_quic_endpoint **members;
    atomic_uint_fast32_t *inflight; /* per member: forwards queued to it */
};

typedef struct fwd_msg {
    fx_task task;
    fx_quic_server_group *g;
    size_t to;
    struct sockaddr_storage from, local;
    socklen_t fromlen, locallen;
    size_t len;
    uint8_t data[];
} fwd_msg;

/* ---- steering ------------------------------------------------------------------ */

size_t fx_quic_owner_of(const uint8_t *dcid, size_t dcidlen, size_t n)
{
    return dcidlen == 0 ? 0 : dcid[0] % n;
}

/* cBPF over the UDP payload: short header -> DCID at byte 1, long header ->
 * DCID at byte 6; returns that byte mod n, the member index. A truncated
 * datagram makes the program return 0 (member 0 drops it). */
static int attach_bpf(int fd, size_t n)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0), BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x80, 2, 0),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1), BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6), BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, (uint32_t)n),
        BPF_STMT(BPF_RET | BPF_A, 0),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) < 0)
        return -errno;
    return 0;
}

/* ---- forwarding ------------------------------------------------------------------ */

static void fwd_run(fx_loop *l, fx_task *t, void *user)
{
    fwd_msg *m = user;
    fx_quic_endpoint *ep = m->g->members[m->to];
    atomic_fetch_sub_explicit(&m->g->inflight[m->to], 1, memory_order_relaxed);
    if (!m->g->closing && !ep->freeing) {
        ep->st.rx_forwarded_in++;
        ep->rx_local = m->local;
        ep->rx_locallen = m->locallen;
        fx_quic_ep_on_datagram(ep, (struct sockaddr *)&m->from, m->fromlen, m->data, m->len);
        fx_quic_ep_flush_dirty(ep);
    }
    free(m);
}

bool fx_quic_group_forward(fx_quic_endpoint *ep, size_t to, const struct sockaddr *from,
                           socklen_t fromlen, const uint8_t *data, size_t len)
{
    fx_quic_server_group *g = ep->group;
    if (atomic_load_explicit(&g->inflight[to], memory_order_relaxed) >= FORWARD_CAP)
        return false;
    fwd_msg *m = malloc(sizeof(*m) + len);
    if (m == NULL)
        return false;
    fx_task_init(&m->task, fwd_run, m);
    m->g = g;
    m->to = to;
    memcpy(&m->from, from, fromlen);
    m->fromlen = fromlen;
    m->local = ep->rx_local;
    m->locallen = ep->rx_locallen;
    m->len = len;
    memcpy(m->data, data, len);
    atomic_fetch_add_explicit(&g->inflight[to], 1, memory_order_relaxed);
    ep->st.rx_forwarded_out++;
    fx_loop_post(g->members[to]->loop, &m->task);
    return true;
}

/* ---- lifecycle ------------------------------------------------------------------- */

/* A port already served (by another broker, or anything else) must refuse
 * start-up: with SO_REUSEPORT a second process would silently take part of
 * the connections. A plain bind succeeds only on a free port. */
static int probe_port(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rv = bind(fd, (const struct sockaddr *)ss, len) < 0 ? -errno : 0;
    close(fd);
    return rv;
}

static int group_members(fx_quic_server_group *g, fx_loop **loops, const char *ip, uint16_t port,
                         const fx_quic_opts *o, const fx_quic_callbacks *cb, void *user)
{
    for (size_t i = 0; i < g->n; i++) {
        fx_quic_opts mo = *o;
        mo.loop_id = (uint8_t)i;
        int rv = fx_quic_server_new_member(&g->members[i], loops[i], ip, port, &mo, cb, user, g, i);
        if (rv < 0)
            return rv;
        port = g->members[0]->port; /* port 0: the others join the chosen one */
        if (i == 0 && g->n > 1 && !o->test_no_reuseport_bpf) {
            rv = attach_bpf(g->members[0]->fd, g->n);
            if (rv < 0)
                fx_quic_log(FX_QLOG_WARN,
                            "reuseport BPF not attached (%s): strays are "
                            "forwarded instead",
                            fx_strerror(rv));
        }
    }
    return 0;
}

int fx_quic_server_group_new(fx_quic_server_group **pg, fx_loop **loops, size_t n, const char *ip,
                             uint16_t port, const fx_quic_opts *o, const fx_quic_callbacks *cb,
                             void *user)
{
    if (n == 0 || n > 256)
        return FX_ECONFIG;
    struct sockaddr_storage ss;
    socklen_t len;
    if (fx_quic_parse_addr(ip, port, &ss, &len) < 0)
        return FX_ECONFIG;
    if (port != 0) {
        int rv = probe_port(&ss, len);
        if (rv < 0)
            return rv;
    }
    fx_quic_server_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    g->n = n;
    g->members = calloc(n, sizeof(*g->members));
    g->inflight = calloc(n, sizeof(*g->inflight));
    int rv = g->members != NULL && g->inflight != NULL ? 0 : -ENOMEM;
    if (rv == 0)
        rv = group_members(g, loops, ip, port, o, cb, user);
    if (rv < 0) {
        fx_quic_server_group_free(g);
        return rv;
    }
    *pg = g;
    return 0;
}

void fx_quic_server_group_free(fx_quic_server_group *g)
{
    if (g == NULL)
        return;
    /* A member may have forwarded to a sibling whose loop had already
     * stopped: run what is left in each member loop's inbox (the loops are
     * stopped, so running them here returns at once after draining). */
    g->closing = true;
    for (size_t i = 0; g->members != NULL && i < g->n; i++) {
        if (g->members[i] != NULL) {
            fx_loop_stop(g->members[i]->loop);
            fx_loop_run(g->members[i]->loop);
        }
    }
    for (size_t i = 0; g->members != NULL && i < g->n; i++)
        fx_quic_endpoint_free(g->members[i]);
    free(g->members);
    free(g->inflight);
    free(g);
}

size_t fx_quic_server_group_size(const fx_quic_server_group *g)
{
    return g->n;
}

fx_quic_endpoint *fx_quic_server_group_member(const fx_quic_server_group *g, size_t i)
{
    return i < g->n ? g->members[i] : NULL;
}

uint16_t fx_quic_server_group_port(const fx_quic_server_group *g)
{
    return g->members[0]->port;
}
