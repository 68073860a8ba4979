/* fx_place: the cluster's placement rules as pure functions: the etcd key
 * names under /felix/<cluster>/ and their inverse, the JSON values of node,
 * owner and durable-pin keys, and the choice of a stream's owner by weighted
 * rendezvous hashing with bounded loads (docs/cluster.md, "Placement").
 *
 * Thread: any. Nothing here keeps state, takes a lock or does I/O; every
 * broker computes the same answers from the same inputs. */
#ifndef FX_CLUSTER_PLACE_H
#define FX_CLUSTER_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- key names ---------------------------------------------------------- */

#define FX_PLACE_NAME_MAX 255u /* a tenant, namespace or stream name (bytes) */
#define FX_PLACE_ID_MAX 64u    /* a node id or a cluster name (bytes) */
#define FX_PLACE_KEY_MAX 2560u /* the longest key, NUL included */

typedef enum fx_place_key_kind {
    FX_PLACE_NODES,   /* nodes/<id>               lease of <id>, fx_place_node_info */
    FX_PLACE_LOAD,    /* load/<id>                lease of <id> */
    FX_PLACE_OWNERS,  /* owners/<t>/<ns>/<s>      lease of the owner, fx_place_owner */
    FX_PLACE_EPOCHS,  /* epochs/<t>/<ns>/<s>      no lease, "" (its version is the epoch) */
    FX_PLACE_DURABLE, /* durable/<t>/<ns>/<s>     no lease, fx_place_pin */
    FX_PLACE_HANDOFF, /* handoff/<t>/<ns>/<s>     lease of the source */
} fx_place_key_kind;

/* The word of |kind| in a key ("owners"), or NULL for a value out of range. */
const char *fx_place_kind_name(fx_place_key_kind kind);

/* Writes the key of |kind| for |cluster| into |out| (|cap| bytes, NUL
 * included): "/felix/<cluster>/<kind>/<a>" for FX_PLACE_NODES and
 * FX_PLACE_LOAD (|a| is the node id, |b| and |c| must be NULL), else
 * "/felix/<cluster>/<kind>/<a>/<b>/<c>" with |a|, |b|, |c| the tenant,
 * namespace and stream. Every component is percent-encoded: a byte outside
 * [A-Za-z0-9._-] (so '/', '%', spaces and every UTF-8 byte >= 0x80) becomes
 * %XX with upper-case hex, so no component can hold a '/' and one key is
 * never a prefix of another kind's. Returns the length written (without
 * the NUL), -EINVAL when |cluster| or a component is NULL, empty or too long
 * (cluster and node id: FX_PLACE_ID_MAX bytes, names: FX_PLACE_NAME_MAX) or
 * |kind| is out of range, or -ENAMETOOLONG when |cap| is too small (|out|
 * then holds an empty string when |cap| > 0). FX_PLACE_KEY_MAX always fits. */
int fx_place_key(char *out, size_t cap, const char *cluster, fx_place_key_kind kind, const char *a,
                 const char *b, const char *c);

/* Writes the prefix every key of |kind| starts with, "/felix/<cluster>/<kind>/",
 * for a range or a watch over all of them. Returns as fx_place_key. */
int fx_place_prefix(char *out, size_t cap, const char *cluster, fx_place_key_kind kind);

/* A key taken apart: |a| the node id (nodes, load; |b| and |c| empty) or
 * |a|, |b|, |c| the tenant, namespace and stream, decoded, NUL-terminated. */
typedef struct fx_place_key_parts {
    fx_place_key_kind kind;
    char a[FX_PLACE_NAME_MAX + 1];
    char b[FX_PLACE_NAME_MAX + 1];
    char c[FX_PLACE_NAME_MAX + 1];
} fx_place_key_parts;

/* The inverse of fx_place_key: parses the |len| bytes at |key| (etcd keys are
 * bytes, not NUL-terminated) as a key of |cluster| into |*out|. Returns 0, or
 * -EINVAL for anything fx_place_key would not have written: another cluster
 * or prefix, an unknown kind, the wrong number of components, an empty or
 * too long component, a byte that should have been encoded, an encoded byte
 * that should not have been (%41), lower-case or bad hex, %00. So a key
 * parses only when fx_place_key gives back exactly its bytes. |*out| is
 * unspecified on failure. */
int fx_place_key_parse(const char *key, size_t len, const char *cluster, fx_place_key_parts *out);

/* ---- values ------------------------------------------------------------- */

#define FX_PLACE_ADDR_MAX 128u /* an address "host:port" (bytes) */
#define FX_PLACE_WEIGHT_DEFAULT 100u
#define FX_PLACE_WEIGHT_MAX 10000u
#define FX_PLACE_EPOCH_MAX ((1u << 24) - 1) /* in-memory offsets are epoch << 40 | seq */
#define FX_PLACE_ERR_MAX 128u               /* room for a decoder's error text */

/* The value of nodes/<id>:
 * {"addr":"127.0.0.1:5000","internal":"127.0.0.1:5100","server_name":"localhost",
 *  "weight":100,"features":3,"admin":"127.0.0.1:8080"}. */
typedef struct fx_place_node_info {
    char addr[FX_PLACE_ADDR_MAX + 1];        /* clients dial this host:port (required) */
    char internal[FX_PLACE_ADDR_MAX + 1];    /* the broker-to-broker listener ("": none yet) */
    char server_name[FX_PLACE_NAME_MAX + 1]; /* TLS name of |addr| ("": the host of |addr|) */
    uint32_t weight;                         /* 1..FX_PLACE_WEIGHT_MAX (absent: 100) */
    uint32_t features;                       /* auth_ok.server_features bits (absent: 0) */
    char admin[FX_PLACE_ADDR_MAX + 1];       /* admin endpoint host:port ("": none) */
} fx_place_node_info;

typedef enum fx_place_owner_kind {
    FX_PLACE_MEM,
    FX_PLACE_DUR,
} fx_place_owner_kind;

/* The value of owners/<t>/<ns>/<s>: {"node":"n1","epoch":7,"kind":"mem"}. */
typedef struct fx_place_owner {
    char node[FX_PLACE_ID_MAX + 1];
    uint32_t epoch; /* 1..FX_PLACE_EPOCH_MAX */
    fx_place_owner_kind kind;
} fx_place_owner;

/* The value of durable/<t>/<ns>/<s>, the pin: {"node":"n1"}. */
typedef struct fx_place_pin {
    char node[FX_PLACE_ID_MAX + 1];
} fx_place_pin;

/* The value of handoff/<t>/<ns>/<s>, written by a graceful move under the
 * source's lease: {"to":"n2","epoch":7,"final_tail":7696581395666}. |epoch|
 * is the source's (the destination claims epoch + 1), |final_tail| the
 * offset one past the last message of that epoch (the next claim's
 * prev_epoch_end). */
typedef struct fx_place_handoff {
    char to[FX_PLACE_ID_MAX + 1];
    uint32_t epoch;      /* 1..FX_PLACE_EPOCH_MAX */
    uint64_t final_tail; /* 0..2^63-1 */
} fx_place_handoff;

/* Encoders: compact JSON with the keys in the order shown above, no spaces,
 * the same bytes for the same struct (the claim transaction compares the
 * pin's value byte for byte). fx_place_node_encode leaves out "internal",
 * "server_name" and "admin" when empty. Return a malloc'd NUL-terminated
 * string the caller frees, or NULL when a field is one the decoder would
 * refuse (an empty or unterminated string, a string that is not UTF-8, an
 * address that is not host:port, weight 0 or above the maximum, epoch 0 or
 * above the maximum, an
 * unknown kind) or on out-of-memory; |*plen| (may be NULL) gets the length. */
char *fx_place_node_encode(const fx_place_node_info *n, size_t *plen);
char *fx_place_owner_encode(const fx_place_owner *o, size_t *plen);
char *fx_place_pin_encode(const fx_place_pin *p, size_t *plen);
char *fx_place_handoff_encode(const fx_place_handoff *h, size_t *plen);

/* Decoders of the |len| bytes at |json| into |*out|, strict: a JSON object,
 * each known field of its type and range (addresses checked by
 * fx_hostport_split with a port above 0, strings without NUL), required
 * fields present; unknown fields are ignored, so a newer broker may add
 * some. Return 0, -ENOMEM, or FX_EPROTO with a sentence naming the field in
 * |err| (|errcap| bytes, may be 0; FX_PLACE_ERR_MAX is enough), for example
 * "weight: must be an integer from 1 to 10000". |*out| is unspecified on
 * failure. */
int fx_place_node_decode(const char *json, size_t len, fx_place_node_info *out, char *err,
                         size_t errcap);
int fx_place_owner_decode(const char *json, size_t len, fx_place_owner *out, char *err,
                          size_t errcap);
int fx_place_pin_decode(const char *json, size_t len, fx_place_pin *out, char *err, size_t errcap);
int fx_place_handoff_decode(const char *json, size_t len, fx_place_handoff *out, char *err,
                            size_t errcap);

/* ---- weighted rendezvous hashing with bounded loads ---------------------- */

#define FX_PLACE_MAX_NODES 1024u

/* One candidate: |id| its node id, |weight| 1..FX_PLACE_WEIGHT_MAX (0 is
 * taken as 1), |owned| the streams it owns now, |up| whether it may own. */
typedef struct fx_place_node {
    const char *id;
    uint32_t weight;
    size_t owned;
    bool up;
} fx_place_node;

/* The bytes placement hashes for a stream: "<t>/<ns>/<s>", each name
 * percent-encoded as in keys (so the same as the tail of its owners/ key).
 * Returns as fx_place_key; FX_PLACE_KEY_MAX always fits. */
int fx_place_stream_key(char *out, size_t cap, const char *tenant, const char *ns,
                        const char *stream);

/* The 64-bit hash of (node |id|, stream key |key| of |klen| bytes):
 * SipHash-2-4 under the fixed key "felix-place-hrw1" (its 16 ASCII bytes, as
 * SipHash reads a key) of u64le(strlen(id)) || id || key. Fixed so that
 * every broker, process and machine computes the same value. */
uint64_t fx_place_hash(const char *id, const void *key, size_t klen);

/* The weighted rendezvous score of |id| for |key|: with u = (h >> 11) + 0.5
 * over 2^53 in (0, 1), h = fx_place_hash, score = -weight / ln(u). The
 * node with the highest score owns the key; a node of twice the weight
 * wins twice as often. */
double fx_place_score(const char *id, const void *key, size_t klen, uint32_t weight);

/* Writes into |order| (room for |n|) the indices of the nodes of |nodes|
 * that are up, by score for |key|, best first; equal scores (never seen in
 * practice) go by node id, so the order does not depend on the order of
 * |nodes|. Returns how many, or -EINVAL when |n| > FX_PLACE_MAX_NODES or a
 * node that is up has a NULL id. */
ssize_t fx_place_order(const fx_place_node *nodes, size_t n, const void *key, size_t klen,
                       size_t *order);

/* The bounded-load cap: ceil(|factor| x (|placed| + 1) / |n_up|), where
 * |placed| counts the streams placed cluster-wide before this one. |factor|
 * is taken in thousandths (rounded; below 1.0 it counts as 1.0), so the
 * arithmetic is exact integers and equal on every broker. 0 when |n_up| is 0. */
size_t fx_place_cap(size_t placed, size_t n_up, double factor);

/* The owner for |key|: the first node in fx_place_order whose |owned| is
 * below fx_place_cap(|placed|, nodes up, |factor|). When none is (possible
 * only if the counts of |owned| add up to more than |placed|), the up node
 * owning the fewest, the earlier in the order on a tie. Returns its index in
 * |nodes|, -1 when no node is up, or fx_place_order's -EINVAL. */
ssize_t fx_place_pick(const fx_place_node *nodes, size_t n, const void *key, size_t klen,
                      size_t placed, double factor);

/* ---- rebalance: the moves one node plans ----------------------------------- */

/* Plans the moves of the streams node |self| owns (|keys|[i], |klens|[i],
 * i < |nstreams|, the stream keys of fx_place_stream_key, taken in that
 * order): a stream moves to the first node before |self| in its
 * fx_place_order whose |owned| count, counting the moves already planned,
 * is below the cap fx_place_cap(|placed| - 1, nodes up, |factor|) (the cap
 * of |placed| streams already placed); a stream whose order reaches |self|
 * first stays. Moves only go up a stream's order, so a planned stream is
 * never planned back (no ping-pong), and never to a node at its cap.
 * Writes into |to|[i] the index in |nodes| of the destination, or -1 for
 * a stream that stays. |nodes|[|self|] must be up. Returns how many move,
 * or -EINVAL (|self| out of range or down, or fx_place_order's). Pure:
 * the counts in |nodes| are not changed. */
ssize_t fx_place_plan_moves(const fx_place_node *nodes, size_t n, size_t self,
                            const void *const *keys, const size_t *klens, size_t nstreams,
                            size_t placed, double factor, ssize_t *to);

#endif
