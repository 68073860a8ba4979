/* fxb_peers: what the broker remembers per source address, for the limits
 * that hold before a client has proven anything: connections open from the
 * address (max_connections_per_ip) and a token bucket of auth verifications
 * (auth_rate_per_ip). An IPv4 address (or an IPv4-mapped IPv6 one) is one
 * source; an IPv6 address counts by its /64, the block one host usually
 * holds. Shared by every endpoint loop under one mutex: it is touched once
 * per connection and once per auth attempt, never per message. Any thread. */
#ifndef FX_BROKER_PEERS_H
#define FX_BROKER_PEERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A source address reduced to what the limits count by. */
typedef struct fxb_peer_key {
    uint8_t family; /* 4 or 6; 0 = unknown (never limited) */
    uint8_t addr[8];
} fxb_peer_key;

typedef struct fxb_peer fxb_peer;

typedef struct fxb_peers {
    pthread_mutex_t mu;
    fxb_peer **buckets; /* FXB_PEERS_BUCKETS chains */
    size_t n;           /* entries */
    uint32_t max_conns; /* per address; 0 = no limit */
    uint32_t auth_rate; /* verifications per second per address (also the burst); 0 = no limit */
} fxb_peers;

/* Fills |k| from |sa| (AF_INET or AF_INET6; anything else gives family 0). */
void fxb_peer_key_of(const struct sockaddr *sa, fxb_peer_key *k);

/* Writes the address of |k| as text ("127.0.0.2", "2001:db8::/64") into
 * |out| (|n| bytes). */
void fxb_peer_key_str(const fxb_peer_key *k, char *out, size_t n);

/* Sets up an empty table with the two limits. Returns 0 or -ENOMEM. */
int fxb_peers_init(fxb_peers *t, uint32_t max_conns, uint32_t auth_rate);

/* Frees every entry. No thread may use |t| any more. */
void fxb_peers_deinit(fxb_peers *t);

/* Counts one more connection from |k| at |now_ns| (CLOCK_MONOTONIC, used to
 * forget idle entries on the way). Returns true, or false (nothing
 * counted) when the address already holds |max_conns|. */
bool fxb_peers_conn_take(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns);

/* Gives back a connection counted by fxb_peers_conn_take(). */
void fxb_peers_conn_give(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns);

/* Takes one auth verification from |k|'s bucket at |now_ns| (CLOCK_MONOTONIC):
 * the bucket holds |auth_rate| tokens and refills at |auth_rate| per second.
 * Returns false when it is empty (the attempt must be refused unverified). */
bool fxb_peers_auth_take(fxb_peers *t, const fxb_peer_key *k, uint64_t now_ns);

/* Connections counted for |k| now (tests and logs). */
uint32_t fxb_peers_conns(fxb_peers *t, const fxb_peer_key *k);

/* Entries held (tests). */
size_t fxb_peers_size(fxb_peers *t);

#endif
