/* Per-source-address limits (see peers.h): a chained hash of addresses, each
 * with its open connections and an auth token bucket. An entry is forgotten
 * once it holds no connection and its bucket is full again, checked whenever
 * its chain is walked, so the table stays as small as the set of addresses
 * that hold connections or recently spent auth attempts. Any thread. */
#include "broker/peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/loop.h"

#define FXB_PEERS_BUCKETS 4096u

struct fxb_peer {
    fxb_peer_key k;
    uint32_t conns;
    uint32_t tokens;  /* auth verifications left in the bucket */
    uint64_t fill_ns; /* when |tokens| was last refilled */
    fxb_peer *next;
};

void fxb_peer_key_of(const struct sockaddr *sa, fxb_peer_key *k)
{
    memset(k, 0, sizeof(*k));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        k->family = 4;
        memcpy(k->addr, &in->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            k->family = 4;
            memcpy(k->addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            k->family = 6;
            memcpy(k->addr, in6->sin6_addr.s6_addr, 8); /* the /64 */
        }
    }
}

void fxb_peer_key_str(const fxb_peer_key *k, char *out, size_t n)
{
    char buf[INET6_ADDRSTRLEN];
    if (k->family == 4) {
        inet_ntop(AF_INET, k->addr, buf, sizeof(buf));
        snprintf(out, n, "%s", buf);
    } else if (k->family == 6) {
        uint8_t a[16] = {0};
        memcpy(a, k->addr, 8);
        inet_ntop(AF_INET6, a, buf, sizeof(buf));
        snprintf(out, n, "%s/64", buf);
    } else {
        snprintf(out, n, "unknown");
    }
}

static size_t bucket_of(const fxb_peer_key *k)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    h = (h ^ k->family) * 1099511628211ull;
    for (size_t i = 0; i < sizeof(k->addr); i++)
        h = (h ^ k->addr[i]) * 1099511628211ull;
    return (size_t)(h % FXB_PEERS_BUCKETS);
}

int fxb_peers_init(fxb_peers *t, uint32_t max_conns, uint32_t auth_rate)
{
    memset(t, 0, sizeof(*t));
    t->buckets = calloc(FXB_PEERS_BUCKETS, sizeof(*t->buckets));
    if (t->buckets == NULL)
        return -ENOMEM;
    int rv = pthread_mutex_init(&t->mu, NULL);
    if (rv != 0) {
        free(t->buckets);
        t->buckets = NULL;
        return -rv;
    }
    t->max_conns = max_conns;
    t->auth_rate = auth_rate;
    return 0;
}

void fxb_peers_deinit(fxb_peers *t)
{
    if (t->buckets == NULL)
        return;
    for (size_t i = 0; i < FXB_PEERS_BUCKETS; i++) {
        while (t->buckets[i] != NULL) {
            fxb_peer *p = t->buckets[i];
            t->buckets[i] = p->next;
            free(p);
        }
    }
    free(t->buckets);
    t->buckets = NULL;
    pthread_mutex_destroy(&t->mu);
}

/* Refills |p|'s bucket for the time since its last refill. */
static void refill(const fxb_peers *t, fxb_peer *p, uint64_t now_ns)
{
    if (p->tokens >= t->auth_rate || now_ns <= p->fill_ns) {
        if (p->tokens >= t->auth_rate)
            p->fill_ns = now_ns;
        return;
    }
    uint64_t add = (now_ns - p->fill_ns) * t->auth_rate / FX_NS_PER_S;
    if (add == 0)
        return;
    p->fill_ns += add * FX_NS_PER_S / t->auth_rate;
    uint64_t n = p->tokens + add;
    p->tokens = n > t->auth_rate ? t->auth_rate : (uint32_t)n;
}

/* The entry of |k| (created when |create|), forgetting idle entries of its
 * chain on the way. NULL when absent, or out of memory. Under |t->mu|. */
static fxb_peer *lookup(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns, bool create)
{
    fxb_peer **pp = &t->buckets[bucket_of(k)];
    fxb_peer *found = NULL;
    while (*pp != NULL) {
        fxb_peer *p = *pp;
        if (memcmp(&p->k, k, sizeof(*k)) == 0) {
            found = p;
        } else {
            refill(t, p, now_ns);
            if (p->conns == 0 && p->tokens >= t->auth_rate) {
                *pp = p->next;
                free(p);
                t->n--;
                continue;
            }
        }
        pp = &p->next;
    }
    if (found != NULL || !create)
        return found;
    fxb_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->k = *k;
    p->tokens = t->auth_rate;
    p->fill_ns = now_ns;
    p->next = t->buckets[bucket_of(k)];
    t->buckets[bucket_of(k)] = p;
    t->n++;
    return p;
}

/* Drops |p| if it holds nothing worth remembering. Under |t->mu|. */
static void maybe_forget(fxb_peers *t, fxb_peer *p, uint64_t now_ns)
{
    refill(t, p, now_ns);
    if (p->conns != 0 || p->tokens < t->auth_rate)
        return;
    for (fxb_peer **pp = &t->buckets[bucket_of(&p->k)]; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            free(p);
            t->n--;
            return;
        }
    }
}

bool fxb_peers_conn_take(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns)
{
    if (k->family == 0)
        return true;
    pthread_mutex_lock(&t->mu);
    fxb_peer *p = lookup(t, k, now_ns, true);
    /* Out of memory for an entry: the connection is served uncounted, as
     * refusing it would turn a memory shortage into an outage. */
    bool ok = p == NULL || t->max_conns == 0 || p->conns < t->max_conns;
    if (ok && p != NULL)
        p->conns++;
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void fxb_peers_conn_give(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns)
{
    if (k->family == 0)
        return;
    pthread_mutex_lock(&t->mu);
    fxb_peer *p = lookup(t, k, now_ns, false);
    if (p != NULL && p->conns > 0) {
        p->conns--;
        maybe_forget(t, p, now_ns);
    }
    pthread_mutex_unlock(&t->mu);
}

bool fxb_peers_auth_take(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns)
{
    if (k->family == 0 || t->auth_rate == 0)
        return true;
    pthread_mutex_lock(&t->mu);
    fxb_peer *p = lookup(t, k, now_ns, true);
    bool ok = true;
    if (p != NULL) {
        refill(t, p, now_ns);
        ok = p->tokens > 0;
        if (ok)
            p->tokens--;
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

uint32_t fxb_peers_conns(fxb_peers *t, const fxb_peer_key *k)
{
    pthread_mutex_lock(&t->mu);
    fxb_peer *p = lookup(t, k, 0, false);
    uint32_t n = p != NULL ? p->conns : 0;
    pthread_mutex_unlock(&t->mu);
    return n;
}

size_t fxb_peers_size(fxb_peers *t)
{
    pthread_mutex_lock(&t->mu);
    size_t n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}
