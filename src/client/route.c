/* libfelix redirects: a subscribe answered not_leader (a cluster broker that
 * does not own the stream, docs/protocol.md "Redirects") is sent again to
 * the broker it names, over a connection to it (client.c fxc_client_peer),
 * at most FXC_REDIRECT_HOPS times per attempt and never twice to one
 * broker; a small route cache (stream -> owner, generation) sends later
 * subscribes straight to the owner and refuses redirects older than what
 * it saw. The client loop only. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hostport.h"
#include "client/client.h"

/* One cached route. |name| is "ns\0stream" of the client's tenant. */
typedef struct fxc_route {
    struct fxc_route *next;
    char ip[64];
    uint16_t port;
    uint64_t generation;
    size_t nlen;
    char name[];
} fxc_route;

/* ---- addresses ------------------------------------------------------------------ */

void fxc_route_key(const char *ip, uint16_t port, char *key)
{
    bool v6 = strchr(ip, ':') != NULL;
    snprintf(key, FXC_ADDR_MAX, "%s%s%s:%u", v6 ? "[" : "", ip, v6 ? "]" : "", (unsigned)port);
}

int fxc_route_parse_addr(const char *addr, char *ip, uint16_t *pport)
{
    fx_hostport hp;
    if (fx_hostport_split(addr, &hp, NULL) != 0 || hp.port == 0)
        return FX_EREDIRECT;
    /* Numeric only: a name would need a DNS lookup, which blocks, and the
     * loop never blocks. The canonical form makes one broker one key. */
    unsigned char bin[16];
    int af = strchr(hp.host, ':') != NULL ? AF_INET6 : AF_INET;
    if (inet_pton(af, hp.host, bin) != 1 || inet_ntop(af, bin, ip, 64) == NULL)
        return FX_EREDIRECT;
    *pport = hp.port;
    return 0;
}

/* ---- the route cache ----------------------------------------------------------- */

static size_t route_name(const fx_subscription *s, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s%c%s", s->ns, 0, s->stream);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* The route of |name| (|nlen| bytes), moved to the front; or NULL. */
static fxc_route *route_find(fx_client *c, const char *name, size_t nlen)
{
    for (fxc_route **p = &c->routes; *p != NULL; p = &(*p)->next) {
        fxc_route *r = *p;
        if (r->nlen != nlen || memcmp(r->name, name, nlen) != 0)
            continue;
        *p = r->next;
        r->next = c->routes;
        c->routes = r;
        return r;
    }
    return NULL;
}

/* Records |ip|:|port| at |generation| as the owner of |name|; the least
 * recently used route goes beyond FXC_ROUTES_MAX. Without memory nothing is
 * cached: redirects are still followed, one more hop each time. */
static void route_learn(fx_client *c, const char *name, size_t nlen, const char *ip, uint16_t port,
                        uint64_t generation)
{
    fxc_route *r = route_find(c, name, nlen);
    if (r == NULL) {
        r = malloc(sizeof(*r) + nlen);
        if (r == NULL) {
            FX_LOG_WARN("client", "no memory to cache a route: not cached");
            return;
        }
        r->nlen = nlen;
        memcpy(r->name, name, nlen);
        r->next = c->routes;
        c->routes = r;
        if (++c->nroutes > FXC_ROUTES_MAX) {
            fxc_route **p = &c->routes;
            while ((*p)->next != NULL)
                p = &(*p)->next;
            free(*p);
            *p = NULL;
            c->nroutes--;
        }
    }
    snprintf(r->ip, sizeof(r->ip), "%s", ip);
    r->port = port;
    r->generation = generation;
}

void fxc_route_forget(fx_client *c, const char *ns, const char *stream)
{
    char name[1024];
    int n = snprintf(name, sizeof(name), "%s%c%s", ns, 0, stream);
    if (n <= 0 || (size_t)n >= sizeof(name))
        return;
    fxc_route *r = route_find(c, name, (size_t)n);
    if (r != NULL) {
        c->routes = r->next; /* route_find moved it to the front */
        c->nroutes--;
        free(r);
    }
}

void fxc_route_free(fx_client *c)
{
    while (c->routes != NULL) {
        fxc_route *r = c->routes;
        c->routes = r->next;
        free(r);
    }
    c->nroutes = 0;
}

/* ---- attempts ------------------------------------------------------------------- */

void fxc_route_attempt(fx_subscription *s)
{
    s->hops = 0;
    s->nvisited = 1;
    snprintf(s->visited[0], sizeof(s->visited[0]), "%s", s->conn->key);
}

cconn *fxc_route_first(fx_subscription *s)
{
    fx_client *c = s->c;
    int rv = 0;
    char name[1024];
    size_t nlen = route_name(s, name, sizeof(name));
    fxc_route *r = nlen > 0 ? route_find(c, name, nlen) : NULL;
    cconn *cc = c->conns[0];
    if (r != NULL) {
        cc = fxc_client_peer(c, r->ip, r->port, &rv);
        if (cc == NULL) {
            /* The cached owner cannot be reached now: ask the server. */
            FX_LOG_WARN("client", "cached owner %s:%u of %s/%s: %s; asking the server", r->ip,
                        (unsigned)r->port, s->ns, s->stream, fx_strerror(rv));
            fxc_route_forget(c, s->ns, s->stream);
            cc = c->conns[0];
        }
    }
    s->conn = cc;
    fxc_route_attempt(s);
    return cc;
}

static cconn *refuse(fx_subscription *s, int *prv)
{
    atomic_fetch_add(&s->c->redirects_refused, 1);
    *prv = FX_EREDIRECT;
    return NULL;
}

cconn *fxc_route_follow(fx_subscription *s, const fx_msg *m, int *prv, char *why, size_t cap)
{
    fx_client *c = s->c;
    const char *node = m->node_id;
    if (!m->has_addr) {
        snprintf(why, cap, "stream %s/%s is served by %s, whose address the broker does not know",
                 s->ns, s->stream, node);
        return refuse(s, prv);
    }
    char ip[64];
    uint16_t port;
    if (fxc_route_parse_addr(m->addr, ip, &port) != 0) {
        snprintf(why, cap, "stream %s/%s is served by %s at '%s': not a numeric host:port", s->ns,
                 s->stream, node, m->addr);
        return refuse(s, prv);
    }
    char name[1024];
    size_t nlen = route_name(s, name, sizeof(name));
    fxc_route *r = nlen > 0 ? route_find(c, name, nlen) : NULL;
    char key[FXC_ADDR_MAX];
    if (r != NULL && s->hops == 0) {
        /* The first broker asked was the cached owner: the route moved. */
        fxc_route_key(r->ip, r->port, key);
        if (strcmp(key, s->conn->key) == 0)
            atomic_fetch_add(&c->route_misses, 1);
    }
    if (r != NULL && m->generation < r->generation) {
        snprintf(why, cap,
                 "redirect of %s/%s to %s (%s) names generation %" PRIu64
                 ", older than generation %" PRIu64 " already seen: not followed",
                 s->ns, s->stream, node, m->addr, m->generation, r->generation);
        return refuse(s, prv);
    }
    fxc_route_key(ip, port, key);
    if (s->hops >= FXC_REDIRECT_HOPS) {
        snprintf(why, cap,
                 "%s/%s: %u redirects followed, the next one (to %s, %s) is over the limit", s->ns,
                 s->stream, FXC_REDIRECT_HOPS, node, key);
        return refuse(s, prv);
    }
    for (uint32_t i = 0; i < s->nvisited; i++) {
        if (strcmp(s->visited[i], key) == 0) {
            snprintf(why, cap,
                     "redirect loop: %s/%s sent to %s (%s), which this subscribe already asked",
                     s->ns, s->stream, node, key);
            return refuse(s, prv);
        }
    }
    if (nlen > 0)
        route_learn(c, name, nlen, ip, port, m->generation);
    cconn *cc = fxc_client_peer(c, ip, port, prv);
    if (cc == NULL) {
        snprintf(why, cap, "redirect of %s/%s to %s (%s): %s", s->ns, s->stream, node, key,
                 *prv == FX_EREDIRECT ? "too many brokers" : fx_strerror(*prv));
        if (*prv == FX_EREDIRECT)
            atomic_fetch_add(&c->redirects_refused, 1);
        return NULL;
    }
    s->hops++;
    snprintf(s->visited[s->nvisited++], FXC_ADDR_MAX, "%s", key);
    atomic_fetch_add(&c->redirects, 1);
    return cc;
}
