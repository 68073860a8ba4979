/* Felix v1 JSON control messages (frame flags 0): a tagged struct, a decoder
 * from JSON bytes with precise error detail, and an encoder producing the exact
 * compact bytes the original serde codec writes (field-declaration order,
 * absent optionals omitted, cache_put.ttl_ms written as null). Pure functions
 * on bytes; any thread (a message is used by one thread at a time). */
#ifndef FX_WIRE_MESSAGE_H
#define FX_WIRE_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/wire.h"

/* Feature bits of auth.client_features / auth_ok.server_features (the
 * original's u32 word; felix-facts-groups.md §1.3 and §3.1). A broker
 * advertises only what it serves; a client offers what it reads. */
/* The original's cluster bits (design/cluster.md §8.1 "Routing and wire"):
 * a cluster broker advertises all four, a standalone broker none. */
#define FX_FEATURE_TOPOLOGY 0x00000001u     /* topology request */
#define FX_FEATURE_REDIRECT 0x00000002u     /* a subscribe may be answered not_leader */
#define FX_FEATURE_SHARD_MOVED 0x00001000u  /* shard_moved ends a moved subscription */
#define FX_FEATURE_SHARD_OWNERS 0x00040000u /* shard_owners request */

#define FX_FEATURE_CACHE_DELETE 0x00000004u       /* cache_delete */
#define FX_FEATURE_CONSUMER_GROUP 0x00000008u     /* group_poll, group_ack, group_nack */
#define FX_FEATURE_IDEMPOTENT_PRODUCER 0x00000200u /* producer_init, publish_idempotent, 0x0100 */
#define FX_FEATURE_GROUP_DEAD_LETTERS 0x00000010u /* dead_letters, discard, redrive */
#define FX_FEATURE_ERROR_CODES 0x00000800u        /* error.code / error.retry */
#define FX_FEATURE_GROUP_CONSUMER 0x00100000u     /* group_poll consumer + reclaim */
#define FX_FEATURE_GROUP_SKIPPED 0x00400000u      /* group_records skipped_before */
#define FX_FEATURE_GROUP_PUBLISHER 0x00800000u
#define FX_FEATURE_GROUP_ADMIN 0x01000000u /* group_seek, group_describe, group_delete */
/* cache_put_if, cache_delete_if, cache_condition_result; cache_value.version
 * is written only to a client that offered this bit. */
#define FX_FEATURE_CACHE_CONDITIONAL 0x02000000u
#define FX_FEATURE_SEQUENCE_REUSED 0x00004000u /* publish_refused "sequence_reused" */
#define FX_FEATURE_RECORD_TIMESTAMPS 0x04000000u
#define FX_FEATURE_GROUP_CLAIM_CONTROL                                                             \
    0x08000000u                         /* extend, dead_letter, nack delay/attempts,               \
                                           poll visibility_ms */
#define FX_FEATURE_EXTENDED 0x80000000u /* a second word (_hi) follows */
/* Felix-C's own bits of the second word (client_features_hi, offered with
 * FX_FEATURE_EXTENDED set in the first): taken from the top so the
 * original's (from 0x1 up) never meet them. */
#define FX_FEATURE_HI_PUBLISH_OFFSETS 0x40000000u /* publish_ok offset + duplicate (idempotent) */
/* Binary cache get / put / delete (wire/cache_bin.h): Felix-C frames of kind 4
 * (request) and 5 (answer) on a cache stream. */
#define FX_FEATURE_HI_CACHE_BINARY 0x20000000u

typedef enum fx_msg_type {
    FX_MSG_NONE = 0, /* zeroed struct; never on the wire */
    FX_MSG_AUTH,
    FX_MSG_AUTH_OK,
    FX_MSG_PUBLISH,
    FX_MSG_PUBLISH_BATCH,
    FX_MSG_SUBSCRIBE,
    FX_MSG_SUBSCRIBED,
    FX_MSG_EVENT_STREAM_HELLO,
    FX_MSG_EVENT,       /* legacy, unused by the original broker */
    FX_MSG_EVENT_BATCH, /* legacy, unused by the original broker */
    FX_MSG_CACHE_PUT,
    FX_MSG_CACHE_GET,
    FX_MSG_CACHE_VALUE,
    FX_MSG_CACHE_OK,
    FX_MSG_PUBLISH_OK,
    FX_MSG_PUBLISH_ERROR,
    FX_MSG_OK,
    FX_MSG_ERROR,
    FX_MSG_SUBSCRIBE_CURSOR_ERROR,
    FX_MSG_GROUP_JOIN,   /* Felix-C: client -> broker, join a consumer group */
    FX_MSG_GROUP_JOINED, /* Felix-C: broker -> client, the join's answer */
    /* The original's JSON consumer-group requests and their answers
     * (felix-facts-groups.md §1.3): one exchange per stream. */
    FX_MSG_GROUP_POLL,
    FX_MSG_GROUP_RECORDS,
    FX_MSG_GROUP_ACK,
    FX_MSG_GROUP_NACK,
    FX_MSG_GROUP_EXTEND,
    FX_MSG_GROUP_EXTENDED,
    FX_MSG_GROUP_DEAD_LETTER,
    FX_MSG_GROUP_DEAD_LETTERS,
    FX_MSG_GROUP_DEAD_LETTER_LIST,
    FX_MSG_GROUP_DISCARD,
    FX_MSG_GROUP_REDRIVE,
    FX_MSG_GROUP_SEEK,
    FX_MSG_GROUP_POSITION,
    FX_MSG_GROUP_DESCRIBE,
    FX_MSG_GROUP_INFO,
    FX_MSG_GROUP_DELETE,
    FX_MSG_GROUP_DELETED,
    /* The original's idempotent producer (felix-facts-groups.md §2.2). */
    FX_MSG_PRODUCER_INIT,
    FX_MSG_PRODUCER_INIT_OK,
    FX_MSG_PUBLISH_IDEMPOTENT,
    FX_MSG_PUBLISH_REFUSED,
    /* The original's later cache requests (felix-facts-groups.md §3.2). */
    FX_MSG_CACHE_DELETE,
    FX_MSG_CACHE_PUT_IF,
    FX_MSG_CACHE_DELETE_IF,
    FX_MSG_CACHE_CONDITION_RESULT,
    /* The original's subscribe redirect (design/cluster.md §8.1): broker ->
     * client, instead of subscribed, to a client offering
     * FX_FEATURE_REDIRECT; the broker then finishes the stream. */
    FX_MSG_NOT_LEADER,
    /* The original's shard_moved (felix-facts-groups.md §3.5): broker ->
     * client, the last frame of an event stream whose stream moved to
     * another node (a graceful handoff, docs/cluster.md "Moves"), sent only
     * to a client offering FX_FEATURE_SHARD_MOVED; the broker then finishes
     * the event stream. Fields as not_leader's. */
    FX_MSG_SHARD_MOVED,
    FX_MSG_TYPE_COUNT
} fx_msg_type;

/* subscribe.start. NONE (field absent) and LATEST mean the same position but
 * are kept apart so a decoded message re-encodes to the same bytes. */
typedef enum fx_msg_start_kind {
    FX_MSG_START_NONE = 0,
    FX_MSG_START_LATEST,
    FX_MSG_START_EARLIEST,
    FX_MSG_START_OFFSET,
} fx_msg_start_kind;

typedef struct fx_msg_start {
    fx_msg_start_kind kind;
    uint64_t offset; /* only for FX_MSG_START_OFFSET */
} fx_msg_start;

/* group_join.create: where a group that does not exist yet starts. NONE is
 * the field absent; "all" | "new" | "last" | {"offset": n} | {"time_us": t}. */
typedef enum fx_msg_create_kind {
    FX_MSG_CREATE_NONE = 0,
    FX_MSG_CREATE_ALL,
    FX_MSG_CREATE_NEW,
    FX_MSG_CREATE_LAST,
    FX_MSG_CREATE_OFFSET,
    FX_MSG_CREATE_TIME,
} fx_msg_create_kind;

typedef struct fx_msg_create {
    fx_msg_create_kind kind;
    uint64_t value; /* the offset (OFFSET) or time_us (TIME); else 0 */
} fx_msg_create;

/* publish_refused.reason: "unknown_producer" | "sequence_expired" |
 * "sequence_reused" | {"sequence_gap": {"expected": n}}. */
typedef enum fx_msg_refusal_kind {
    FX_MSG_REFUSAL_SEQUENCE_GAP = 0,
    FX_MSG_REFUSAL_UNKNOWN_PRODUCER,
    FX_MSG_REFUSAL_SEQUENCE_EXPIRED,
    FX_MSG_REFUSAL_SEQUENCE_REUSED,
} fx_msg_refusal_kind;

typedef struct fx_msg_refusal {
    fx_msg_refusal_kind kind;
    uint64_t expected; /* SEQUENCE_GAP only */
} fx_msg_refusal;

/* cache_put_if.condition: "absent" (the key has no live entry) or
 * {"version": n} (the key's live entry has exactly version n). NONE is the
 * zeroed value; never on the wire (the field is required). */
typedef enum fx_msg_condition_kind {
    FX_MSG_CONDITION_NONE = 0,
    FX_MSG_CONDITION_ABSENT,
    FX_MSG_CONDITION_VERSION,
} fx_msg_condition_kind;

typedef struct fx_msg_condition {
    fx_msg_condition_kind kind;
    uint64_t version; /* only for FX_MSG_CONDITION_VERSION */
} fx_msg_condition;

/* Longest group member (and group_poll consumer) name, in bytes (and at
 * least 1). */
#define FX_MSG_MEMBER_MAX 128u

typedef enum fx_msg_cursor_reason {
    FX_MSG_CURSOR_TOO_OLD = 0,
    FX_MSG_CURSOR_IN_FUTURE,
} fx_msg_cursor_reason;

/* A byte string (payload, cache value). |p| may be NULL when |len| is 0. */
typedef struct fx_msg_bytes {
    const uint8_t *p;
    size_t len;
} fx_msg_bytes;

/* One record of group_records. Decoded, |payload| and |publisher| point into
 * the message's arena. */
typedef struct fx_msg_group_record {
    uint64_t offset;
    fx_msg_bytes payload;
    uint32_t attempts;         /* this delivery, 1 the first; absent decodes as 0; always written */
    uint64_t skipped_before;   /* 0 is omitted */
    const char *publisher;     /* NULL: absent */
    uint64_t timestamp_micros; /* when has_timestamp_micros */
    bool has_timestamp_micros;
} fx_msg_group_record;

/* Largest integer the codec carries: jansson's json_int_t is signed 64-bit, so
 * u64 fields (request ids, offsets, ttl) are limited to 0..2^63-1 both ways. */
#define FX_MSG_INT_MAX ((uint64_t)INT64_MAX)

/* One JSON message. Only the fields of |type| are meaningful (see the table
 * in message.c); has_* flags tell an absent optional field from a present one.
 *
 * Ownership: after fx_msg_decode() every pointer points into one allocation
 * owned by the message and released by fx_msg_deinit(). A message built by the
 * caller (fx_msg_init_* or by hand) only borrows its strings and bytes, which
 * must outlive any fx_msg_encode*() call; fx_msg_deinit() on it does nothing. */
typedef struct fx_msg {
    fx_msg_type type;

    const char *tenant_id;
    const char *ns; /* "namespace" on the wire */
    const char *stream;
    const char *cache;
    const char *key;     /* cache key; may be empty */
    const char *token;   /* auth */
    const char *message; /* error, publish_error */

    fx_msg_bytes payload;         /* publish, event */
    const fx_msg_bytes *payloads; /* publish_batch, event_batch */
    size_t n_payloads;
    fx_msg_bytes value; /* cache_put; cache_value when has_value */
    bool has_value;     /* cache_value: false = miss, "value":null */

    uint64_t request_id;
    bool has_request_id;
    fx_wire_ack ack;
    bool has_ack;
    uint16_t client_flags;
    bool has_client_flags;
    uint16_t server_flags;
    /* Feature negotiation (felix-facts-groups.md §3.1): auth's
     * client_features / client_features_hi, auth_ok's server_features /
     * server_features_hi, all optional u32 words (FX_FEATURE_*). */
    uint32_t client_features;
    bool has_client_features;
    uint32_t client_features_hi;
    bool has_client_features_hi;
    uint32_t server_features;
    bool has_server_features;
    uint32_t server_features_hi;
    bool has_server_features_hi;
    /* error: the optional code and retry class ("stale_claim", "retry"),
     * sent only to clients offering FX_FEATURE_ERROR_CODES. */
    const char *code;
    bool has_code;
    const char *retry;
    bool has_retry;

    uint64_t subscription_id; /* optional in subscribe */
    bool has_subscription_id;
    fx_msg_start start;

    uint64_t offset; /* event */
    bool has_offset;
    uint64_t base_offset; /* event_batch */
    bool has_base_offset;
    uint64_t ttl_ms; /* cache_put; absent is written as null */
    bool has_ttl_ms;

    fx_msg_cursor_reason reason; /* subscribe_cursor_error */
    uint64_t requested;
    uint64_t available;

    const char *group;  /* group_join */
    const char *member; /* group_join (optional: has_member), group_joined */
    bool has_member;
    uint32_t window; /* group_join (optional), group_joined */
    bool has_window;
    uint64_t ack_wait_ms; /* group_join, group_joined (the member's lease) */
    bool has_ack_wait_ms;
    fx_msg_create create; /* group_join; kind NONE: absent */
    bool durable;         /* group_joined */

    /* The original's group requests: tenant_id, ns, stream, shard and group
     * name the group; request_id is required in all of them (and their
     * answers), offset names the record (group_position: the position),
     * start is group_seek's. */
    uint32_t shard;
    uint32_t max_records; /* group_poll */
    uint64_t wait_ms;     /* group_poll; absent decodes as 0; always written */
    const char *consumer; /* group_poll (optional: has_consumer), as member */
    bool has_consumer;
    bool reclaim;           /* group_poll; false is omitted */
    uint64_t visibility_ms; /* group_poll; 0 is omitted */
    uint64_t delay_ms;      /* group_nack; 0 is omitted */
    uint32_t attempts;      /* group_nack (0 is omitted), group_extend */
    bool if_new;            /* group_seek; false is omitted */
    uint64_t extend_ms;     /* group_extend */
    uint64_t visible_ms;    /* group_extended */
    bool moved;             /* group_position */
    bool existed;           /* group_deleted */
    uint64_t committed;     /* group_info (optional: has_committed) */
    bool has_committed;
    uint64_t tail, in_flight, owed, dead_letters; /* group_info */
    const uint64_t *offsets;                      /* group_dead_letter_list */
    size_t n_offsets;
    const fx_msg_group_record *records; /* group_records */
    size_t n_records;

    /* Idempotent producers: producer_init_ok and publish_idempotent carry
     * producer_id (the codec's u64 range: the broker picks 63 random bits),
     * publish_idempotent the batch's sequence; publish_refused the reason
     * (with message); publish_ok the batch's first offset (has_offset) and
     * duplicate (false is omitted), both Felix-C additions sent only to
     * clients offering FX_FEATURE_HI_PUBLISH_OFFSETS. */
    uint64_t producer_id;
    uint64_t sequence;
    fx_msg_refusal refusal;
    bool duplicate;

    /* Cache versions: cache_put_if's condition; cache_delete_if's version
     * (required); cache_value's and cache_condition_result's version
     * (optional: has_version); cache_condition_result's applied. */
    fx_msg_condition condition;
    uint64_t version;
    bool has_version;
    bool applied;

    /* not_leader: the owner's node_id, its addr ("host:port"; has_addr
     * false when the owner's address is unknown) and the stream's ownership
     * generation (epoch). The original's generation is a u64; this codec
     * carries 0..FX_MSG_INT_MAX like every integer. */
    const char *node_id;
    const char *addr;
    bool has_addr;
    uint64_t generation;
    /* subscribed, from a cluster broker serving an in-memory stream: the
     * serving |epoch| (its offsets are epoch << 40 | seq) and, after a
     * graceful handoff, |prev_epoch_end|: the offset one past the last
     * message of the previous epoch. Both optional (standalone brokers send
     * neither). */
    uint64_t epoch;
    bool has_epoch;
    uint64_t prev_epoch_end;
    bool has_prev_epoch_end;

    void *arena; /* internal: the decoded allocation, or NULL */
} fx_msg;

/* ---- decoding ------------------------------------------------------------ */

/* Decodes the JSON body |json|[0..|len|) of a flags-0 frame into |m|, which is
 * overwritten (it must not own a previous decode: call fx_msg_deinit first).
 * Unknown fields are ignored; null counts as absent for optional fields.
 * Returns 0, or (filling |err| when not NULL):
 *   FX_EWIRE_JSON           syntax error, not an object, duplicate key, NUL in a
 *                           key, nesting deeper than 128 (serde_json's limit)
 *   FX_EWIRE_JSON_LIMIT     more than 1,048,576 elements (objects, arrays and
 *                           comma-separated values, counted before parsing)
 *   FX_EWIRE_UTF8           invalid UTF-8 in the input
 *   FX_EWIRE_JSON_TYPE      unknown "type"
 *   FX_EWIRE_FIELD_MISSING  required field absent (message names field and type)
 *   FX_EWIRE_FIELD_TYPE     field of the wrong JSON type (null included for a
 *                           required field), a bad start / create / reason /
 *                           condition value, or a NUL inside token, key, message or a
 *                           record's publisher
 *   FX_EWIRE_INT_RANGE      negative, above FX_MSG_INT_MAX (named when the
 *                           layout allows), above 65535 for client_flags /
 *                           server_flags, or above UINT32_MAX for window,
 *                           shard, max_records and attempts
 *   FX_EWIRE_ACK_MODE       ack not none / per_message / per_batch
 *   FX_EWIRE_BASE64         payload / value not canonical padded standard base64
 *   FX_EWIRE_NAME           tenant_id, namespace, stream, cache or group empty,
 *                           or any of them holding a NUL; member or consumer
 *                           empty, over FX_MSG_MEMBER_MAX bytes or holding a
 *                           NUL
 *   -ENOMEM
 * On failure |m| is left zeroed (fx_msg_deinit is still safe). Any thread. */
int fx_msg_decode(fx_msg *m, const uint8_t *json, size_t len, fx_wire_err *err);

/* Releases what fx_msg_decode allocated and zeroes |m|. NULL is a no-op. */
void fx_msg_deinit(fx_msg *m);

/* ---- encoding ------------------------------------------------------------ */

/* Returns the exact length of the JSON encoding of |m|, or a negative error:
 *   FX_EWIRE_JSON_TYPE      |m|->type is not a message type
 *   FX_EWIRE_FIELD_MISSING  a required string is NULL, group_seek without a
 *                           start, or bytes / a list with its pointer NULL and
 *                           a count > 0
 *   FX_EWIRE_NAME           a name (tenant_id, namespace, stream, cache, group)
 *                           is empty, or member / consumer is empty or over
 *                           FX_MSG_MEMBER_MAX bytes
 *   FX_EWIRE_UTF8           a string is not valid UTF-8
 *   FX_EWIRE_INT_RANGE      an integer above FX_MSG_INT_MAX
 *   FX_EWIRE_ACK_MODE       ack / start / create / reason outside its enum,
 *                           or a condition of kind NONE
 *   FX_EWIRE_TOO_LARGE      the encoding would not fit a frame (> UINT32_MAX)
 * The encoder refuses exactly what fx_msg_decode would refuse, so every
 * encodable message decodes back to equal fields. Any thread. */
ssize_t fx_msg_encoded_len(const fx_msg *m);

/* Writes the JSON of |m| into |buf| (|cap| bytes) and its length to |*plen|.
 * Errors as fx_msg_encoded_len, plus FX_ETOOBIG if |cap| is too small (nothing
 * useful is written then). Any thread. */
int fx_msg_encode_into(const fx_msg *m, uint8_t *buf, size_t cap, size_t *plen);

/* Encodes |m| as JSON into a new buffer |*pout| (|*plen| bytes, caller frees
 * with free()). Errors as fx_msg_encoded_len, or -ENOMEM. Any thread. */
int fx_msg_encode(const fx_msg *m, uint8_t **pout, size_t *plen);

/* Encodes |m| as a whole frame: the 12-byte FLX1 header (version 1, flags 0,
 * big-endian body length) then the JSON. |*pout| is a new buffer of |*plen|
 * bytes the caller frees with free(). Errors as fx_msg_encode. Any thread. */
int fx_msg_encode_frame(const fx_msg *m, uint8_t **pout, size_t *plen);

/* ---- helpers: pure functions of their arguments; any thread -------------- */

/* The wire name of |t| ("publish_batch"), or NULL if |t| is not a message. */
const char *fx_msg_type_name(fx_msg_type t);

/* The ack mode the broker applies to a publish: an explicit "ack", else
 * per_message for publish and per_batch for publish_batch (the original's
 * default). FX_WIRE_ACK_NONE for every other type. */
fx_wire_ack fx_msg_effective_ack(const fx_msg *m);

/* The start position a subscribe asks for: absent means latest. */
fx_msg_start_kind fx_msg_effective_start(const fx_msg *m);

/* True if |a| and |b| have the same type and equal fields for that type
 * (strings and bytes by content, has_* flags included). */
bool fx_msg_equal(const fx_msg *a, const fx_msg *b);

/* ---- constructors --------------------------------------------------------
 * Each zeroes |m| and fills one message type. Strings are borrowed: they must
 * outlive the encode call. Any thread. */

/* auth; without |has_client_flags| the field is absent (a pre-negotiation
 * client, answered with ok instead of auth_ok). */
void fx_msg_init_auth(fx_msg *m, const char *tenant_id, const char *token, bool has_client_flags,
                      uint16_t client_flags);
void fx_msg_init_auth_ok(fx_msg *m, uint16_t server_flags);
/* The broker's reply to a successful |auth|: auth_ok{|server_flags|} if the
 * client offered client_flags, else a plain ok (old clients know no auth_ok). */
void fx_msg_init_auth_reply(fx_msg *m, const fx_msg *auth, uint16_t server_flags);
void fx_msg_init_ok(fx_msg *m);
void fx_msg_init_error(fx_msg *m, const char *message);
void fx_msg_init_publish_ok(fx_msg *m, uint64_t request_id);
void fx_msg_init_publish_error(fx_msg *m, uint64_t request_id, const char *message);
void fx_msg_init_subscribed(fx_msg *m, uint64_t subscription_id);
void fx_msg_init_event_stream_hello(fx_msg *m, uint64_t subscription_id);
void fx_msg_init_subscribe_cursor_error(fx_msg *m, fx_msg_cursor_reason reason, uint64_t requested,
                                        uint64_t available);
void fx_msg_init_producer_init_ok(fx_msg *m, uint64_t request_id, uint64_t producer_id);
/* publish_refused{|request_id|, |refusal|, |message|}. */
void fx_msg_init_publish_refused(fx_msg *m, uint64_t request_id, fx_msg_refusal refusal,
                                 const char *message);
/* group_join for |group| on |stream| with no optional field; set member /
 * window / ack_wait_ms (with their has_* flags), create and request_id
 * (has_request_id) afterwards as needed. */
void fx_msg_init_group_join(fx_msg *m, const char *tenant_id, const char *ns, const char *stream,
                            const char *group);
/* group_joined: the member's |subscription_id| (its event stream's hello
 * names it), |member| name, credit |window| and whether the group is
 * |durable|; request_id (has_request_id) echoes the join's. */
void fx_msg_init_group_joined(fx_msg *m, uint64_t subscription_id, const char *member,
                              uint32_t window, bool durable);

/* not_leader{|node_id|, |addr|, |generation|}; |addr| NULL leaves the field
 * absent (the owner's address is unknown). */
void fx_msg_init_not_leader(fx_msg *m, const char *node_id, const char *addr, uint64_t generation);

/* shard_moved{|node_id|, |addr|, |generation|}; |addr| NULL leaves the
 * field absent. */
void fx_msg_init_shard_moved(fx_msg *m, const char *node_id, const char *addr, uint64_t generation);

/* The last frame of an event stream whose stream |tenant_id|/|ns|/|stream|
 * moved to |node_id| at |generation|, chosen by the subscriber's
 * client_features: shard_moved to a client offering FX_FEATURE_SHARD_MOVED,
 * else error "stream T/NS/S moved to NODE" (written into |text|, |cap|
 * bytes). Strings are borrowed. Any thread. */
void fx_msg_init_moved_reply(fx_msg *m, uint32_t client_features, const char *tenant_id,
                             const char *ns, const char *stream, const char *node_id,
                             const char *addr, uint64_t generation, char *text, size_t cap);

/* error.code / error.retry of a refused subscribe whose stream another
 * broker owns (the original's code 6 not_leader, retry class redirect). */
#define FX_MSG_CODE_NOT_LEADER "not_leader"
#define FX_MSG_RETRY_REDIRECT "redirect"

/* The answer to a subscribe for |tenant_id|/|ns|/|stream| owned by another
 * broker, chosen by the subscriber's auth.client_features |client_features|:
 *   FX_FEATURE_REDIRECT offered: not_leader{|node_id|, |addr|, |generation|}
 *     (|addr| NULL: absent);
 *   else error "stream T/NS/S is served by NODE", plus code not_leader and
 *     retry redirect if FX_FEATURE_ERROR_CODES was offered.
 * The error text is written into |text| (|cap| bytes, truncated if short).
 * Strings are borrowed (|text| included): they must outlive the encode
 * call. Any thread. */
void fx_msg_init_redirect_reply(fx_msg *m, uint32_t client_features, const char *tenant_id,
                                const char *ns, const char *stream, const char *node_id,
                                const char *addr, uint64_t generation, char *text, size_t cap);

/* The answer to an acked publish the broker appended and did not see
 * flushed within ack_wait_timeout_ms: its outcome is not known yet (an
 * idempotent client re-sends the same batch; libfelix does). */
#define FX_MSG_COMMIT_TIMEOUT_TEXT "publish commit timeout"

#endif
