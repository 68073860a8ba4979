/* Felix v1 JSON message codec. One table lists, per message type, its fields in
 * the original's declaration order; the decoder (jansson, then two passes: check
 * and size, then copy into one arena) and the encoder (a small writer that
 * reproduces serde_json's compact output byte for byte) both walk that table.
 * Pure functions on bytes; any thread. */
#include "wire/message.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/base64.h"
#include "wire/binary.h"

/* ==== field table ======================================================== */

enum kind {
    K_NAME,       /* non-empty string: tenant_id, namespace, stream, cache */
    K_STR,        /* any string without NUL */
    K_BYTES,      /* base64 string -> fx_msg_bytes */
    K_BYTES_LIST, /* array of base64 strings -> payloads / n_payloads */
    K_U64,        /* 0..FX_MSG_INT_MAX */
    K_U16,        /* 0..65535 */
    K_ACK,        /* "none" | "per_message" | "per_batch" */
    K_START,      /* "latest" | "earliest" | {"offset": n} */
    K_REASON,     /* "too_old" | "in_future" */
    K_MEMBER,     /* string of 1..FX_MSG_MEMBER_MAX bytes without NUL */
    K_U32,        /* 0..UINT32_MAX */
    K_BOOL,       /* true | false */
    K_CREATE,     /* "all" | "new" | "last" | {"offset": n} | {"time_us": t} */
    K_U64_LIST,   /* array of u64 -> offsets / n_offsets */
    K_RECORDS,    /* array of group records -> records / n_records */
    K_REFUSAL,    /* publish_refused.reason: a string or {"sequence_gap":{"expected":n}} */
    K_CONDITION,  /* cache_put_if.condition: "absent" | {"version": n} */
};

enum presence {
    P_REQ,      /* must be present and not null */
    P_OPT,      /* missing or null = absent; omitted when absent */
    P_NULL_OPT, /* missing or null = absent; written as null (cache_put.ttl_ms) */
    P_NULL_REQ, /* must be present; null = absent; written as null (cache_value.value) */
    P_ZERO,     /* missing or null = 0 / false; omitted when 0 / false (group_nack.delay_ms) */
    P_DEFAULT,  /* missing or null = 0; always written (group_poll.wait_ms) */
};

#define NO_HAS 0xFFFFu

struct field {
    const char *name;
    uint8_t kind;
    uint8_t pres;
    uint16_t off;     /* of the value in fx_msg */
    uint16_t has_off; /* of its bool has_* flag, or NO_HAS */
};

#define REQ(n, k, mem)                                                                             \
    {                                                                                              \
        n, k, P_REQ, offsetof(fx_msg, mem), NO_HAS                                                 \
    }
#define OPT(n, k, mem, has)                                                                        \
    {                                                                                              \
        n, k, P_OPT, offsetof(fx_msg, mem), offsetof(fx_msg, has)                                  \
    }
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, 0, 0, 0                                                                           \
    }
#define ZERO(n, k, mem)                                                                            \
    {                                                                                              \
        n, k, P_ZERO, offsetof(fx_msg, mem), NO_HAS                                                \
    }
#define TRIPLE REQ("tenant_id", K_NAME, tenant_id), REQ("namespace", K_NAME, ns)
#define REQUEST_ID OPT("request_id", K_U64, request_id, has_request_id)

static const struct field f_auth[] = {
    REQ("tenant_id", K_NAME, tenant_id),
    REQ("token", K_STR, token),
    OPT("client_flags", K_U16, client_flags, has_client_flags),
    OPT("client_features", K_U32, client_features, has_client_features),
    OPT("client_features_hi", K_U32, client_features_hi, has_client_features_hi),
    END};
static const struct field f_auth_ok[] = {
    REQ("server_flags", K_U16, server_flags),
    OPT("server_features", K_U32, server_features, has_server_features),
    OPT("server_features_hi", K_U32, server_features_hi, has_server_features_hi), END};
static const struct field f_publish[] = {
    TRIPLE,     REQ("stream", K_NAME, stream),   REQ("payload", K_BYTES, payload),
    REQUEST_ID, OPT("ack", K_ACK, ack, has_ack), END};
static const struct field f_publish_batch[] = {
    TRIPLE,     REQ("stream", K_NAME, stream),   REQ("payloads", K_BYTES_LIST, payloads),
    REQUEST_ID, OPT("ack", K_ACK, ack, has_ack), END};
static const struct field f_subscribe[] = {
    TRIPLE,
    REQ("stream", K_NAME, stream),
    OPT("subscription_id", K_U64, subscription_id, has_subscription_id),
    {"start", K_START, P_OPT, offsetof(fx_msg, start), NO_HAS},
    END};
static const struct field f_sub_id[] = {REQ("subscription_id", K_U64, subscription_id), END};
/* subscribed: a cluster broker adds the serving epoch of an in-memory
 * stream and, after a graceful handoff, the previous epoch's end. */
static const struct field f_subscribed[] = {REQ("subscription_id", K_U64, subscription_id),
                                            OPT("epoch", K_U64, epoch, has_epoch),
                                            OPT("prev_epoch_end", K_U64, prev_epoch_end,
                                                has_prev_epoch_end),
                                            END};
static const struct field f_event[] = {TRIPLE, REQ("stream", K_NAME, stream),
                                       REQ("payload", K_BYTES, payload),
                                       OPT("offset", K_U64, offset, has_offset), END};
static const struct field f_event_batch[] = {
    TRIPLE, REQ("stream", K_NAME, stream), REQ("payloads", K_BYTES_LIST, payloads),
    OPT("base_offset", K_U64, base_offset, has_base_offset), END};
static const struct field f_cache_put[] = {
    TRIPLE,
    REQ("cache", K_NAME, cache),
    REQ("key", K_STR, key),
    REQ("value", K_BYTES, value),
    REQUEST_ID,
    {"ttl_ms", K_U64, P_NULL_OPT, offsetof(fx_msg, ttl_ms), offsetof(fx_msg, has_ttl_ms)},
    END};
static const struct field f_cache_get[] = {TRIPLE, REQ("cache", K_NAME, cache),
                                           REQ("key", K_STR, key), REQUEST_ID, END};
static const struct field f_cache_value[] = {
    TRIPLE,
    REQ("cache", K_NAME, cache),
    REQ("key", K_STR, key),
    {"value", K_BYTES, P_NULL_REQ, offsetof(fx_msg, value), offsetof(fx_msg, has_value)},
    OPT("version", K_U64, version, has_version),
    REQUEST_ID,
    END};
/* The original's later cache requests (felix-facts-groups.md §3.2): delete
 * (request_id optional, as put / get), the conditional writes and their
 * answer (request_id required). */
static const struct field f_cache_delete[] = {TRIPLE, REQ("cache", K_NAME, cache),
                                              REQ("key", K_STR, key), REQUEST_ID, END};
static const struct field f_cache_put_if[] = {
    TRIPLE,
    REQ("cache", K_NAME, cache),
    REQ("key", K_STR, key),
    REQ("value", K_BYTES, value),
    {"ttl_ms", K_U64, P_NULL_OPT, offsetof(fx_msg, ttl_ms), offsetof(fx_msg, has_ttl_ms)},
    {"condition", K_CONDITION, P_REQ, offsetof(fx_msg, condition), NO_HAS},
    REQ("request_id", K_U64, request_id),
    END};
static const struct field f_cache_delete_if[] = {TRIPLE,
                                                 REQ("cache", K_NAME, cache),
                                                 REQ("key", K_STR, key),
                                                 REQ("version", K_U64, version),
                                                 REQ("request_id", K_U64, request_id),
                                                 END};
static const struct field f_cache_condition_result[] = {
    REQ("applied", K_BOOL, applied), OPT("version", K_U64, version, has_version),
    REQ("request_id", K_U64, request_id), END};
static const struct field f_request_id[] = {REQ("request_id", K_U64, request_id), END};
static const struct field f_publish_error[] = {REQ("request_id", K_U64, request_id),
                                               REQ("message", K_STR, message), END};
static const struct field f_none[] = {END};
static const struct field f_error[] = {REQ("message", K_STR, message),
                                       OPT("code", K_STR, code, has_code),
                                       OPT("retry", K_STR, retry, has_retry), END};
static const struct field f_cursor_error[] = {REQ("reason", K_REASON, reason),
                                              REQ("requested", K_U64, requested),
                                              REQ("available", K_U64, available), END};
static const struct field f_group_join[] = {
    TRIPLE,
    REQ("stream", K_NAME, stream),
    REQ("group", K_NAME, group),
    OPT("member", K_MEMBER, member, has_member),
    OPT("window", K_U32, window, has_window),
    OPT("ack_wait_ms", K_U64, ack_wait_ms, has_ack_wait_ms),
    {"create", K_CREATE, P_OPT, offsetof(fx_msg, create), NO_HAS},
    REQUEST_ID,
    END};
static const struct field f_group_joined[] = {REQ("subscription_id", K_U64, subscription_id),
                                              REQ("member", K_MEMBER, member),
                                              REQ("window", K_U32, window),
                                              REQ("durable", K_BOOL, durable),
                                              OPT("ack_wait_ms", K_U64, ack_wait_ms,
                                                  has_ack_wait_ms),
                                              REQUEST_ID,
                                              END};

/* The original's group requests: its serde order is the group's scope, the
 * request's own fields, request_id, then the fields added later (optional). */
#define GSCOPE                                                                                     \
    TRIPLE, REQ("stream", K_NAME, stream), REQ("shard", K_U32, shard), REQ("group", K_NAME, group)
#define REQ_ID REQ("request_id", K_U64, request_id)
static const struct field f_group_poll[] = {
    GSCOPE,
    REQ("max_records", K_U32, max_records),
    {"wait_ms", K_U64, P_DEFAULT, offsetof(fx_msg, wait_ms), NO_HAS},
    REQ_ID,
    OPT("consumer", K_MEMBER, consumer, has_consumer),
    ZERO("reclaim", K_BOOL, reclaim),
    ZERO("visibility_ms", K_U64, visibility_ms),
    END};
static const struct field f_group_records[] = {REQ("records", K_RECORDS, records), REQ_ID, END};
static const struct field f_group_offset[] = {GSCOPE, REQ("offset", K_U64, offset), REQ_ID, END};
static const struct field f_group_nack[] = {GSCOPE,
                                            REQ("offset", K_U64, offset),
                                            REQ_ID,
                                            ZERO("delay_ms", K_U64, delay_ms),
                                            ZERO("attempts", K_U32, attempts),
                                            END};
static const struct field f_group_extend[] = {GSCOPE,
                                              REQ("offset", K_U64, offset),
                                              REQ("attempts", K_U32, attempts),
                                              REQ("extend_ms", K_U64, extend_ms),
                                              REQ_ID,
                                              END};
static const struct field f_group_extended[] = {REQ("visible_ms", K_U64, visible_ms), REQ_ID, END};
static const struct field f_group_scope[] = {GSCOPE, REQ_ID, END};
static const struct field f_group_dl_list[] = {REQ("offsets", K_U64_LIST, offsets), REQ_ID, END};
static const struct field f_group_seek[] = {
    GSCOPE,
    {"start", K_START, P_REQ, offsetof(fx_msg, start), NO_HAS},
    ZERO("if_new", K_BOOL, if_new),
    REQ_ID,
    END};
static const struct field f_group_position[] = {REQ("offset", K_U64, offset),
                                                REQ("moved", K_BOOL, moved), REQ_ID, END};
static const struct field f_group_info[] = {OPT("committed", K_U64, committed, has_committed),
                                            REQ("tail", K_U64, tail),
                                            REQ("in_flight", K_U64, in_flight),
                                            REQ("owed", K_U64, owed),
                                            REQ("dead_letters", K_U64, dead_letters),
                                            REQ_ID,
                                            END};
static const struct field f_group_deleted[] = {REQ("existed", K_BOOL, existed), REQ_ID, END};
/* Idempotent producers (felix-facts-groups.md §2.2); publish_ok's offset is
 * the original's optional field, duplicate Felix-C's. */
static const struct field f_publish_ok[] = {REQ_ID, OPT("offset", K_U64, offset, has_offset),
                                            ZERO("duplicate", K_BOOL, duplicate), END};
static const struct field f_producer_init_ok[] = {REQ_ID, REQ("producer_id", K_U64, producer_id),
                                                  END};
static const struct field f_publish_idempotent[] = {TRIPLE,
                                                    REQ("stream", K_NAME, stream),
                                                    REQ("payloads", K_BYTES_LIST, payloads),
                                                    REQ_ID,
                                                    REQ("producer_id", K_U64, producer_id),
                                                    REQ("sequence", K_U64, sequence),
                                                    END};
static const struct field f_publish_refused[] = {
    REQ_ID,
    {"reason", K_REFUSAL, P_REQ, offsetof(fx_msg, refusal), NO_HAS},
    REQ("message", K_STR, message),
    END};

/* The original's subscribe redirect: node_id, addr (absent when the owner's
 * address is unknown), generation, in its declaration order. */
static const struct field f_not_leader[] = {REQ("node_id", K_STR, node_id),
                                            OPT("addr", K_STR, addr, has_addr),
                                            REQ("generation", K_U64, generation), END};

struct schema {
    const char *name;
    const struct field *fields;
};

static const struct schema schemas[FX_MSG_TYPE_COUNT] = {
    [FX_MSG_AUTH] = {"auth", f_auth},
    [FX_MSG_AUTH_OK] = {"auth_ok", f_auth_ok},
    [FX_MSG_PUBLISH] = {"publish", f_publish},
    [FX_MSG_PUBLISH_BATCH] = {"publish_batch", f_publish_batch},
    [FX_MSG_SUBSCRIBE] = {"subscribe", f_subscribe},
    [FX_MSG_SUBSCRIBED] = {"subscribed", f_subscribed},
    [FX_MSG_EVENT_STREAM_HELLO] = {"event_stream_hello", f_sub_id},
    [FX_MSG_EVENT] = {"event", f_event},
    [FX_MSG_EVENT_BATCH] = {"event_batch", f_event_batch},
    [FX_MSG_CACHE_PUT] = {"cache_put", f_cache_put},
    [FX_MSG_CACHE_GET] = {"cache_get", f_cache_get},
    [FX_MSG_CACHE_VALUE] = {"cache_value", f_cache_value},
    [FX_MSG_CACHE_OK] = {"cache_ok", f_request_id},
    [FX_MSG_PUBLISH_OK] = {"publish_ok", f_publish_ok},
    [FX_MSG_PUBLISH_ERROR] = {"publish_error", f_publish_error},
    [FX_MSG_OK] = {"ok", f_none},
    [FX_MSG_ERROR] = {"error", f_error},
    [FX_MSG_SUBSCRIBE_CURSOR_ERROR] = {"subscribe_cursor_error", f_cursor_error},
    [FX_MSG_GROUP_JOIN] = {"group_join", f_group_join},
    [FX_MSG_GROUP_JOINED] = {"group_joined", f_group_joined},
    [FX_MSG_GROUP_POLL] = {"group_poll", f_group_poll},
    [FX_MSG_GROUP_RECORDS] = {"group_records", f_group_records},
    [FX_MSG_GROUP_ACK] = {"group_ack", f_group_offset},
    [FX_MSG_GROUP_NACK] = {"group_nack", f_group_nack},
    [FX_MSG_GROUP_EXTEND] = {"group_extend", f_group_extend},
    [FX_MSG_GROUP_EXTENDED] = {"group_extended", f_group_extended},
    [FX_MSG_GROUP_DEAD_LETTER] = {"group_dead_letter", f_group_offset},
    [FX_MSG_GROUP_DEAD_LETTERS] = {"group_dead_letters", f_group_scope},
    [FX_MSG_GROUP_DEAD_LETTER_LIST] = {"group_dead_letter_list", f_group_dl_list},
    [FX_MSG_GROUP_DISCARD] = {"group_discard", f_group_offset},
    [FX_MSG_GROUP_REDRIVE] = {"group_redrive", f_group_offset},
    [FX_MSG_GROUP_SEEK] = {"group_seek", f_group_seek},
    [FX_MSG_GROUP_POSITION] = {"group_position", f_group_position},
    [FX_MSG_GROUP_DESCRIBE] = {"group_describe", f_group_scope},
    [FX_MSG_GROUP_INFO] = {"group_info", f_group_info},
    [FX_MSG_GROUP_DELETE] = {"group_delete", f_group_scope},
    [FX_MSG_GROUP_DELETED] = {"group_deleted", f_group_deleted},
    [FX_MSG_PRODUCER_INIT] = {"producer_init", f_request_id},
    [FX_MSG_PRODUCER_INIT_OK] = {"producer_init_ok", f_producer_init_ok},
    [FX_MSG_PUBLISH_IDEMPOTENT] = {"publish_idempotent", f_publish_idempotent},
    [FX_MSG_PUBLISH_REFUSED] = {"publish_refused", f_publish_refused},
    [FX_MSG_CACHE_DELETE] = {"cache_delete", f_cache_delete},
    [FX_MSG_CACHE_PUT_IF] = {"cache_put_if", f_cache_put_if},
    [FX_MSG_CACHE_DELETE_IF] = {"cache_delete_if", f_cache_delete_if},
    [FX_MSG_CACHE_CONDITION_RESULT] = {"cache_condition_result", f_cache_condition_result},
    [FX_MSG_NOT_LEADER] = {"not_leader", f_not_leader},
    [FX_MSG_SHARD_MOVED] = {"shard_moved", f_not_leader},
};

static const char *const ack_names[] = {"none", "per_message", "per_batch"};
static const char *const reason_names[] = {"too_old", "in_future"};
/* create's string values, indexed by fx_msg_create_kind (NONE unused). */
static const char *const create_names[] = {NULL, "all", "new", "last"};
/* publish_refused's string reasons, indexed by fx_msg_refusal_kind (GAP is
 * the object form). */
static const char *const refusal_names[] = {"sequence_gap", "unknown_producer",
                                            "sequence_expired", "sequence_reused"};

/* Typed views of a field's storage inside a message. */
#define AT(m, f, T) ((T *)(void *)((char *)(m) + (f)->off))
#define CAT(m, f, T) ((T const *)(const void *)((const char *)(m) + (f)->off))

static bool *has_flag(fx_msg *m, const struct field *f)
{
    return f->has_off == NO_HAS ? NULL : (bool *)(void *)((char *)m + f->has_off);
}

/* Whether an optional field carries a value in |m| (required fields always do). */
static bool is_present(const fx_msg *m, const struct field *f)
{
    if (f->kind == K_START)
        return CAT(m, f, fx_msg_start)->kind != FX_MSG_START_NONE;
    if (f->kind == K_CREATE)
        return CAT(m, f, fx_msg_create)->kind != FX_MSG_CREATE_NONE;
    if (f->pres == P_ZERO)
        return f->kind == K_BOOL  ? *CAT(m, f, bool)
               : f->kind == K_U32 ? *CAT(m, f, uint32_t) != 0
                                  : *CAT(m, f, uint64_t) != 0;
    if (f->has_off == NO_HAS)
        return true;
    return *(const bool *)(const void *)((const char *)m + f->has_off);
}

const char *fx_msg_type_name(fx_msg_type t)
{
    if ((int)t <= FX_MSG_NONE || t >= FX_MSG_TYPE_COUNT)
        return NULL;
    return schemas[t].name;
}

/* True if JSON string |v| is exactly |s| (a NUL inside |v| must not match). */
static bool str_is(json_t *v, const char *s)
{
    size_t n = strlen(s);
    return json_string_length(v) == n && memcmp(json_string_value(v), s, n) == 0;
}

static int lookup(const char *const *names, size_t n, json_t *v)
{
    for (size_t i = 0; i < n; i++)
        if (str_is(v, names[i]))
            return (int)i;
    return -1;
}

/* ==== decoding: pass 1, check every field and size the arena ============= */

struct dec {
    const char *tname; /* message type, for error text */
    size_t arena;      /* bytes needed for strings and payload bytes */
    size_t list;       /* bytes needed for the payloads array */
    fx_wire_err *err;
};

static int bad_type(struct dec *d, const struct field *f, const char *what)
{
    return fx_wire_err_set(d->err, FX_EWIRE_FIELD_TYPE, "field '%s' in %s must be %s", f->name,
                           d->tname, what);
}

static int check_string(struct dec *d, const struct field *f, json_t *v)
{
    if (!json_is_string(v))
        return bad_type(d, f, "a string");
    size_t n = json_string_length(v);
    bool name = f->kind == K_NAME || f->kind == K_MEMBER;
    if (memchr(json_string_value(v), 0, n)) {
        int code = name ? FX_EWIRE_NAME : FX_EWIRE_FIELD_TYPE;
        return fx_wire_err_set(d->err, code, "field '%s' in %s contains a NUL character", f->name,
                               d->tname);
    }
    if (name && n == 0)
        return fx_wire_err_set(d->err, FX_EWIRE_NAME, "field '%s' in %s must not be empty", f->name,
                               d->tname);
    if (f->kind == K_MEMBER && n > FX_MSG_MEMBER_MAX)
        return fx_wire_err_set(d->err, FX_EWIRE_NAME, "field '%s' in %s is longer than %u bytes",
                               f->name, d->tname, FX_MSG_MEMBER_MAX);
    d->arena += n + 1;
    return 0;
}

static int check_b64(struct dec *d, const struct field *f, json_t *v, size_t index)
{
    if (!json_is_string(v))
        return bad_type(d, f,
                        f->kind == K_BYTES ? "a base64 string" : "an array of base64 strings");
    size_t n = json_string_length(v);
    if (!fx_base64_is_canonical(json_string_value(v), n, FX_BASE64_STD)) {
        if (f->kind == K_BYTES)
            return fx_wire_err_set(d->err, FX_EWIRE_BASE64, "field '%s' in %s is not base64",
                                   f->name, d->tname);
        return fx_wire_err_set(d->err, FX_EWIRE_BASE64, "field '%s[%zu]' in %s is not base64",
                               f->name, index, d->tname);
    }
    d->arena += FX_BASE64_DECODE_ROOM(n);
    return 0;
}

static int check_list(struct dec *d, const struct field *f, json_t *v)
{
    if (!json_is_array(v))
        return bad_type(d, f, "an array of base64 strings");
    size_t n = json_array_size(v);
    if (n > FX_WIRE_BATCH_MAX_MESSAGES) /* as a binary batch's count */
        return fx_wire_err_set(d->err, FX_EWIRE_COUNT,
                               "field '%s' in %s has %zu elements, more than %u (the most one "
                               "batch carries)",
                               f->name, d->tname, n, FX_WIRE_BATCH_MAX_MESSAGES);
    for (size_t i = 0; i < n; i++) {
        int rv = check_b64(d, f, json_array_get(v, i), i);
        if (rv < 0)
            return rv;
    }
    d->list = n * sizeof(fx_msg_bytes);
    return 0;
}

/* Reads an integer in 0..|max| into |*pv|. */
static int get_uint(struct dec *d, const char *name, json_t *v, uint64_t max, uint64_t *pv)
{
    if (!json_is_integer(v))
        return fx_wire_err_set(d->err, FX_EWIRE_FIELD_TYPE, "field '%s' in %s must be an integer",
                               name, d->tname);
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i > max)
        return fx_wire_err_set(d->err, FX_EWIRE_INT_RANGE,
                               "field '%s' in %s is out of range (0..%" PRIu64 ")", name, d->tname,
                               max);
    *pv = (uint64_t)i;
    return 0;
}

static int check_start(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    fx_msg_start *st = AT(m, f, fx_msg_start);
    if (json_is_string(v) && (str_is(v, "latest") || str_is(v, "earliest"))) {
        st->kind = str_is(v, "latest") ? FX_MSG_START_LATEST : FX_MSG_START_EARLIEST;
        return 0;
    }
    json_t *off = json_is_object(v) ? json_object_get(v, "offset") : NULL;
    if (off && json_object_size(v) == 1) {
        st->kind = FX_MSG_START_OFFSET;
        return get_uint(d, "start.offset", off, FX_MSG_INT_MAX, &st->offset);
    }
    return bad_type(d, f, "\"latest\", \"earliest\" or {\"offset\": n}");
}

/* create: a string naming where a new group starts, or a one-member object
 * with an offset or a time in microseconds. */
static int check_create(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    fx_msg_create *c = AT(m, f, fx_msg_create);
    int i = json_is_string(v) ? lookup(create_names + 1, 3, v) : -1;
    if (i >= 0) {
        c->kind = (fx_msg_create_kind)(FX_MSG_CREATE_ALL + i);
        return 0;
    }
    json_t *off = json_is_object(v) ? json_object_get(v, "offset") : NULL;
    json_t *time = json_is_object(v) ? json_object_get(v, "time_us") : NULL;
    if ((off || time) && json_object_size(v) == 1) {
        c->kind = off ? FX_MSG_CREATE_OFFSET : FX_MSG_CREATE_TIME;
        return get_uint(d, off ? "create.offset" : "create.time_us", off ? off : time,
                        FX_MSG_INT_MAX, &c->value);
    }
    return bad_type(d, f, "\"all\", \"new\", \"last\", {\"offset\": n} or {\"time_us\": t}");
}

/* cache_put_if.condition: the string "absent" or the one-member object
 * {"version": n}. */
static int check_condition(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    fx_msg_condition *c = AT(m, f, fx_msg_condition);
    if (json_is_string(v) && str_is(v, "absent")) {
        c->kind = FX_MSG_CONDITION_ABSENT;
        return 0;
    }
    json_t *ver = json_is_object(v) ? json_object_get(v, "version") : NULL;
    if (ver && json_object_size(v) == 1) {
        c->kind = FX_MSG_CONDITION_VERSION;
        return get_uint(d, "condition.version", ver, FX_MSG_INT_MAX, &c->version);
    }
    return bad_type(d, f, "\"absent\" or {\"version\": n}");
}

/* publish_refused.reason: a string naming the refusal, or the one-member
 * object {"sequence_gap": {"expected": n}}. */
static int check_refusal(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    fx_msg_refusal *r = AT(m, f, fx_msg_refusal);
    int i = json_is_string(v) ? lookup(refusal_names + 1, 3, v) : -1;
    if (i >= 0) {
        r->kind = (fx_msg_refusal_kind)(FX_MSG_REFUSAL_UNKNOWN_PRODUCER + i);
        return 0;
    }
    json_t *gap = json_is_object(v) ? json_object_get(v, "sequence_gap") : NULL;
    json_t *exp = json_is_object(gap) ? json_object_get(gap, "expected") : NULL;
    if (exp != NULL && json_object_size(v) == 1 && json_object_size(gap) == 1) {
        r->kind = FX_MSG_REFUSAL_SEQUENCE_GAP;
        return get_uint(d, "reason.sequence_gap.expected", exp, FX_MSG_INT_MAX, &r->expected);
    }
    return bad_type(d, f,
                    "\"unknown_producer\", \"sequence_expired\", \"sequence_reused\" or "
                    "{\"sequence_gap\": {\"expected\": n}}");
}

static int check_enum(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    bool ack = f->kind == K_ACK;
    if (!json_is_string(v))
        return bad_type(d, f, "a string");
    int i = ack ? lookup(ack_names, 3, v) : lookup(reason_names, 2, v);
    if (i < 0 && ack)
        return fx_wire_err_set(d->err, FX_EWIRE_ACK_MODE,
                               "field 'ack' in %s must be none, per_message or per_batch",
                               d->tname);
    if (i < 0)
        return bad_type(d, f, "too_old or in_future");
    if (ack)
        *AT(m, f, fx_wire_ack) = (fx_wire_ack)i;
    else
        *AT(m, f, fx_msg_cursor_reason) = (fx_msg_cursor_reason)i;
    return 0;
}

/* ---- the original's group answers: offsets and records ---- */

/* True if |v| is an integer in 0..|max| (stored in |*pv|); else the error
 * is for the caller to name. */
static bool uint_ok(json_t *v, uint64_t max, uint64_t *pv)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return false;
    *pv = (uint64_t)json_integer_value(v);
    return true;
}

static int check_u64_list(struct dec *d, const struct field *f, json_t *v)
{
    if (!json_is_array(v))
        return bad_type(d, f, "an array of integers");
    size_t n = json_array_size(v);
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        json_t *e = json_array_get(v, i);
        if (!uint_ok(e, FX_MSG_INT_MAX, &u)) {
            char name[48];
            snprintf(name, sizeof(name), "%s[%zu]", f->name, i);
            return get_uint(d, name, e, FX_MSG_INT_MAX, &u);
        }
    }
    d->list = n * sizeof(uint64_t);
    return 0;
}

/* Member |key| of record |i|: an integer in 0..|max|, required or not
 * (absent or null: not there). The name is formatted only for an error. */
static int record_uint(struct dec *d, json_t *rec, size_t i, const char *key, uint64_t max,
                       bool req)
{
    json_t *v = json_object_get(rec, key);
    uint64_t u;
    if ((!v || json_is_null(v)) && !req)
        return 0;
    if (v && uint_ok(v, max, &u))
        return 0;
    char name[64];
    snprintf(name, sizeof(name), "records[%zu].%s", i, key);
    if (!v)
        return fx_wire_err_set(d->err, FX_EWIRE_FIELD_MISSING, "missing required field '%s' in %s",
                               name, d->tname);
    return get_uint(d, name, v, max, &u);
}

/* Record |i| of group_records: offset and payload required, attempts,
 * skipped_before, publisher and timestamp_micros optional. */
static int check_record(struct dec *d, json_t *rec, size_t i)
{
    if (!json_is_object(rec))
        return fx_wire_err_set(d->err, FX_EWIRE_FIELD_TYPE,
                               "field 'records[%zu]' in %s must be an object", i, d->tname);
    int rv = record_uint(d, rec, i, "offset", FX_MSG_INT_MAX, true);
    if (rv == 0)
        rv = record_uint(d, rec, i, "attempts", UINT32_MAX, false);
    if (rv == 0)
        rv = record_uint(d, rec, i, "skipped_before", FX_MSG_INT_MAX, false);
    if (rv == 0)
        rv = record_uint(d, rec, i, "timestamp_micros", FX_MSG_INT_MAX, false);
    if (rv < 0)
        return rv;
    json_t *p = json_object_get(rec, "payload");
    if (!p)
        return fx_wire_err_set(d->err, FX_EWIRE_FIELD_MISSING,
                               "missing required field 'records[%zu].payload' in %s", i, d->tname);
    if (!json_is_string(p) ||
        !fx_base64_is_canonical(json_string_value(p), json_string_length(p), FX_BASE64_STD))
        return fx_wire_err_set(d->err, json_is_string(p) ? FX_EWIRE_BASE64 : FX_EWIRE_FIELD_TYPE,
                               "field 'records[%zu].payload' in %s is not base64", i, d->tname);
    d->arena += FX_BASE64_DECODE_ROOM(json_string_length(p));
    json_t *pub = json_object_get(rec, "publisher");
    if (!pub || json_is_null(pub))
        return 0;
    if (!json_is_string(pub) || memchr(json_string_value(pub), 0, json_string_length(pub)))
        return fx_wire_err_set(d->err, FX_EWIRE_FIELD_TYPE,
                               "field 'records[%zu].publisher' in %s must be a string without NUL",
                               i, d->tname);
    d->arena += json_string_length(pub) + 1;
    return 0;
}

static int check_records(struct dec *d, const struct field *f, json_t *v)
{
    if (!json_is_array(v))
        return bad_type(d, f, "an array of records");
    size_t n = json_array_size(v);
    for (size_t i = 0; i < n; i++) {
        int rv = check_record(d, json_array_get(v, i), i);
        if (rv < 0)
            return rv;
    }
    d->list = n * sizeof(fx_msg_group_record);
    return 0;
}

/* Checks the present, non-null value |v| of |f|; stores scalars in |m| now
 * and counts the arena bytes strings and payloads will need in pass 2. */
static int check_value(struct dec *d, const struct field *f, json_t *v, fx_msg *m)
{
    uint64_t u = 0;
    int rv;
    switch (f->kind) {
    case K_NAME:
    case K_STR:
    case K_MEMBER:
        return check_string(d, f, v);
    case K_BYTES:
        return check_b64(d, f, v, 0);
    case K_BYTES_LIST:
        return check_list(d, f, v);
    case K_U64:
        if ((rv = get_uint(d, f->name, v, FX_MSG_INT_MAX, &u)) == 0)
            *AT(m, f, uint64_t) = u;
        return rv;
    case K_U16:
        if ((rv = get_uint(d, f->name, v, UINT16_MAX, &u)) == 0)
            *AT(m, f, uint16_t) = (uint16_t)u;
        return rv;
    case K_U32:
        if ((rv = get_uint(d, f->name, v, UINT32_MAX, &u)) == 0)
            *AT(m, f, uint32_t) = (uint32_t)u;
        return rv;
    case K_BOOL:
        if (!json_is_boolean(v))
            return bad_type(d, f, "true or false");
        *AT(m, f, bool) = json_is_true(v);
        return 0;
    case K_START:
        return check_start(d, f, v, m);
    case K_CREATE:
        return check_create(d, f, v, m);
    case K_REFUSAL:
        return check_refusal(d, f, v, m);
    case K_CONDITION:
        return check_condition(d, f, v, m);
    case K_U64_LIST:
        return check_u64_list(d, f, v);
    case K_RECORDS:
        return check_records(d, f, v);
    default:
        return check_enum(d, f, v, m);
    }
}

static int check_fields(struct dec *d, const struct field *fields, json_t *root, fx_msg *m)
{
    for (const struct field *f = fields; f->name; f++) {
        json_t *v = json_object_get(root, f->name);
        if (!v && (f->pres == P_REQ || f->pres == P_NULL_REQ))
            return fx_wire_err_set(d->err, FX_EWIRE_FIELD_MISSING,
                                   "missing required field '%s' in %s", f->name, d->tname);
        if (!v || (json_is_null(v) && f->pres != P_REQ))
            continue; /* absent: has_* stays false */
        int rv = check_value(d, f, v, m);
        if (rv < 0)
            return rv;
        bool *has = has_flag(m, f);
        if (has)
            *has = true;
    }
    return 0;
}

/* ==== decoding: pass 2, copy strings and bytes into the arena ============= */

struct arena {
    char *p;
    void *list; /* the one list a message holds, where malloc's alignment applies */
};

static const char *copy_string(struct arena *a, json_t *v)
{
    size_t n = json_string_length(v);
    char *s = a->p;
    memcpy(s, json_string_value(v), n + 1);
    a->p += n + 1;
    return s;
}

static bool copy_b64(struct arena *a, json_t *v, fx_msg_bytes *out)
{
    size_t n = json_string_length(v), dec = 0;
    uint8_t *dst = (uint8_t *)a->p;
    if (fx_base64_decode(json_string_value(v), n, FX_BASE64_STD, dst, FX_BASE64_DECODE_ROOM(n),
                         &dec) != 0)
        return false;
    a->p += FX_BASE64_DECODE_ROOM(n);
    out->p = dst;
    out->len = dec;
    return true;
}

/* Member |key| of a record pass 1 accepted: 0 when absent or null. */
static uint64_t record_get(json_t *rec, const char *key, bool *phas)
{
    json_t *v = json_object_get(rec, key);
    bool has = v && json_is_integer(v);
    if (phas)
        *phas = has;
    return has ? (uint64_t)json_integer_value(v) : 0;
}

static bool copy_record(struct arena *a, json_t *rec, fx_msg_group_record *r)
{
    r->offset = record_get(rec, "offset", NULL);
    r->attempts = (uint32_t)record_get(rec, "attempts", NULL);
    r->skipped_before = record_get(rec, "skipped_before", NULL);
    r->timestamp_micros = record_get(rec, "timestamp_micros", &r->has_timestamp_micros);
    json_t *pub = json_object_get(rec, "publisher");
    r->publisher = pub && json_is_string(pub) ? copy_string(a, pub) : NULL;
    return copy_b64(a, json_object_get(rec, "payload"), &r->payload);
}

/* Fills the list field |f| (payloads, offsets or records) from |v|. */
static bool copy_list(const struct field *f, json_t *v, fx_msg *m, struct arena *a)
{
    size_t n = json_array_size(v);
    bool ok = true;
    if (f->kind == K_BYTES_LIST) {
        fx_msg_bytes *list = a->list;
        m->n_payloads = n, m->payloads = list;
        for (size_t i = 0; ok && i < n; i++)
            ok = copy_b64(a, json_array_get(v, i), &list[i]);
    } else if (f->kind == K_U64_LIST) {
        uint64_t *list = a->list;
        m->n_offsets = n, m->offsets = list;
        for (size_t i = 0; i < n; i++)
            list[i] = (uint64_t)json_integer_value(json_array_get(v, i));
    } else {
        fx_msg_group_record *list = a->list;
        m->n_records = n, m->records = list;
        for (size_t i = 0; ok && i < n; i++)
            ok = copy_record(a, json_array_get(v, i), &list[i]);
    }
    return ok;
}

static int copy_fields(const struct field *fields, json_t *root, fx_msg *m, struct arena *a)
{
    for (const struct field *f = fields; f->name; f++) {
        json_t *v = json_object_get(root, f->name);
        if (!v || json_is_null(v))
            continue;
        bool ok = true;
        if (f->kind == K_NAME || f->kind == K_STR || f->kind == K_MEMBER) {
            *AT(m, f, const char *) = copy_string(a, v);
        } else if (f->kind == K_BYTES) {
            ok = copy_b64(a, v, AT(m, f, fx_msg_bytes));
        } else if (f->kind == K_BYTES_LIST || f->kind == K_U64_LIST || f->kind == K_RECORDS) {
            ok = copy_list(f, v, m, a);
        }
        if (!ok) /* pass 1 accepted it, so this is our bug, but never trust it */
            return FX_EWIRE_BASE64;
    }
    return 0;
}

/* ==== decoding: entry points ============================================== */

/* serde_json refuses documents nested deeper than 128; match it before jansson
 * (whose own limit is 2048) recurses. Our messages nest at most two deep. */
#define MAX_DEPTH 128

/* jansson builds a node of ~50-100 bytes per element, so a 16 MiB frame of
 * "[{},{},...]" would cost a gigabyte before any schema check. Elements are
 * counted before parsing as the objects, arrays and commas outside strings
 * (a comma separates two elements or two members): a message is a few dozen
 * fields and at most one list (a batch's payloads, at most
 * FX_WIRE_BATCH_MAX_MESSAGES once parsed, check_list), so only a document
 * far past any valid message reaches this. */
#define MAX_ELEMENTS (1u << 20)

/* Checks depth and element count in one pass. Returns 0, or an FX_EWIRE_*
 * code with |err| filled. */
static int shape_ok(const uint8_t *p, size_t n, fx_wire_err *err)
{
    size_t depth = 0, elements = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > MAX_DEPTH)
                return fx_wire_err_set(err, FX_EWIRE_JSON, "malformed JSON: nested deeper than %d",
                                       MAX_DEPTH);
            elements++;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        } else if (c == ',') {
            elements++;
        }
        if (elements > MAX_ELEMENTS)
            return fx_wire_err_set(err, FX_EWIRE_JSON_LIMIT,
                                   "JSON message has more than %u elements", MAX_ELEMENTS);
    }
    return 0;
}

static bool in_set(uint8_t c, const char *set)
{
    return c != 0 && strchr(set, c) != NULL;
}

/* jansson reports an integer beyond json_int_t as a parse error at the end of
 * the number. Walk back over `"key" : <number>` to name the field when the
 * layout is that simple; otherwise |name| stays empty. */

static void overflow_field(const uint8_t *p, size_t n, size_t pos, char *name, size_t cap)
{
    name[0] = 0;
    size_t i = pos < n ? pos : n;
    while (i > 0 && in_set(p[i - 1], "0123456789+-.eE"))
        i--;
    while (i > 0 && in_set(p[i - 1], " \t\r\n"))
        i--;
    if (i < 2 || p[i - 1] != ':')
        return;
    i--;
    while (i > 0 && in_set(p[i - 1], " \t\r\n"))
        i--;
    if (i < 2 || p[i - 1] != '"')
        return;
    size_t end = --i;
    while (i > 0 && p[i - 1] != '"' && p[i - 1] != '\\' && end - i < cap - 1)
        i--;
    if (i == 0 || p[i - 1] != '"')
        return;
    memcpy(name, p + i, end - i);
    name[end - i] = 0;
}

static int parse_error(const uint8_t *p, size_t n, const json_error_t *je, fx_wire_err *err)
{
    char name[40];
    switch (json_error_code(je)) {
    case json_error_numeric_overflow:
        overflow_field(p, n, je->position > 0 ? (size_t)je->position : 0, name, sizeof(name));
        if (name[0])
            return fx_wire_err_set(err, FX_EWIRE_INT_RANGE,
                                   "field '%s' is out of range (0..%" PRIu64 ")", name,
                                   FX_MSG_INT_MAX);
        return fx_wire_err_set(err, FX_EWIRE_INT_RANGE, "number out of range: %s", je->text);
    case json_error_invalid_utf8:
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "malformed JSON: %s", je->text);
    case json_error_out_of_memory:
        return fx_wire_err_set(err, -ENOMEM, "out of memory parsing JSON");
    default:
        return fx_wire_err_set(err, FX_EWIRE_JSON, "malformed JSON: %s", je->text);
    }
}

static json_t *parse(const uint8_t *p, size_t n, fx_wire_err *err, int *prv)
{
    int rv = shape_ok(p, n, err);
    if (rv != 0) {
        *prv = rv;
        return NULL;
    }
    json_error_t je;
    /* NUL is allowed by the parser so that it can be reported per field. */
    json_t *root = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        *prv = parse_error(p, n, &je, err);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *prv = fx_wire_err_set(err, FX_EWIRE_JSON, "malformed JSON: message is not an object");
        return NULL;
    }
    return root;
}

static int read_type(json_t *root, fx_msg_type *pt, fx_wire_err *err)
{
    json_t *v = json_object_get(root, "type");
    if (!v)
        return fx_wire_err_set(err, FX_EWIRE_FIELD_MISSING, "missing required field 'type'");
    if (!json_is_string(v))
        return fx_wire_err_set(err, FX_EWIRE_FIELD_TYPE, "field 'type' must be a string");
    for (int t = FX_MSG_NONE + 1; t < FX_MSG_TYPE_COUNT; t++) {
        if (str_is(v, schemas[t].name)) {
            *pt = (fx_msg_type)t;
            return 0;
        }
    }
    return fx_wire_err_set(err, FX_EWIRE_JSON_TYPE, "unknown message type '%.60s'",
                           json_string_value(v));
}

static int decode_root(fx_msg *m, json_t *root, fx_wire_err *err)
{
    int rv = read_type(root, &m->type, err);
    if (rv < 0)
        return rv;
    const struct schema *s = &schemas[m->type];
    struct dec d = {.tname = s->name, .err = err};
    if ((rv = check_fields(&d, s->fields, root, m)) < 0)
        return rv;
    if (d.list + d.arena == 0)
        return 0;
    m->arena = malloc(d.list + d.arena);
    if (!m->arena)
        return fx_wire_err_set(err, -ENOMEM, "out of memory decoding %s", s->name);
    /* The payloads array goes first, where malloc's alignment applies. */
    struct arena a = {.p = (char *)m->arena + d.list, .list = m->arena};
    if ((rv = copy_fields(s->fields, root, m, &a)) < 0)
        return fx_wire_err_set(err, rv, "base64 decoding failed in %s", s->name);
    return 0;
}

int fx_msg_decode(fx_msg *m, const uint8_t *json, size_t len, fx_wire_err *err)
{
    int rv = 0;
    memset(m, 0, sizeof(*m));
    json_t *root = parse(json, len, err, &rv);
    if (!root)
        return rv;
    rv = decode_root(m, root, err);
    json_decref(root);
    if (rv < 0)
        fx_msg_deinit(m);
    return rv;
}

void fx_msg_deinit(fx_msg *m)
{
    if (!m)
        return;
    free(m->arena);
    memset(m, 0, sizeof(*m));
}

/* ==== encoding: validation ================================================ */

static int check_out_string(const struct field *f, const char *s)
{
    if (!s)
        return FX_EWIRE_FIELD_MISSING;
    if ((f->kind == K_NAME || f->kind == K_MEMBER) && s[0] == 0)
        return FX_EWIRE_NAME;
    if (f->kind == K_MEMBER && strlen(s) > FX_MSG_MEMBER_MAX)
        return FX_EWIRE_NAME;
    if (!fx_wire_utf8_valid((const uint8_t *)s, strlen(s)))
        return FX_EWIRE_UTF8;
    return 0;
}

static int check_out_bytes(const fx_msg_bytes *b)
{
    if (b->len > UINT32_MAX)
        return FX_EWIRE_TOO_LARGE;
    return b->p || b->len == 0 ? 0 : FX_EWIRE_FIELD_MISSING;
}

static int check_out_list(const fx_msg *m)
{
    if (!m->payloads && m->n_payloads > 0)
        return FX_EWIRE_FIELD_MISSING;
    for (size_t i = 0; i < m->n_payloads; i++) {
        int rv = check_out_bytes(&m->payloads[i]);
        if (rv < 0)
            return rv;
    }
    return 0;
}

static int check_out_offsets(const fx_msg *m)
{
    if (!m->offsets && m->n_offsets > 0)
        return FX_EWIRE_FIELD_MISSING;
    for (size_t i = 0; i < m->n_offsets; i++)
        if (m->offsets[i] > FX_MSG_INT_MAX)
            return FX_EWIRE_INT_RANGE;
    return 0;
}

static int check_out_records(const fx_msg *m)
{
    if (!m->records && m->n_records > 0)
        return FX_EWIRE_FIELD_MISSING;
    for (size_t i = 0; i < m->n_records; i++) {
        const fx_msg_group_record *r = &m->records[i];
        if (r->offset > FX_MSG_INT_MAX || r->skipped_before > FX_MSG_INT_MAX ||
            (r->has_timestamp_micros && r->timestamp_micros > FX_MSG_INT_MAX))
            return FX_EWIRE_INT_RANGE;
        if (r->publisher &&
            !fx_wire_utf8_valid((const uint8_t *)r->publisher, strlen(r->publisher)))
            return FX_EWIRE_UTF8;
        int rv = check_out_bytes(&r->payload);
        if (rv < 0)
            return rv;
    }
    return 0;
}

/* Refuses what fx_msg_decode would refuse, so encode/decode round-trips. */
static int check_out_field(const struct field *f, const fx_msg *m)
{
    const fx_msg_start *st = CAT(m, f, fx_msg_start);
    const fx_msg_create *c = CAT(m, f, fx_msg_create);
    switch (f->kind) {
    case K_NAME:
    case K_STR:
    case K_MEMBER:
        return check_out_string(f, *CAT(m, f, const char *));
    case K_BYTES:
        return check_out_bytes(CAT(m, f, fx_msg_bytes));
    case K_BYTES_LIST:
        return check_out_list(m);
    case K_U64:
        return *CAT(m, f, uint64_t) > FX_MSG_INT_MAX ? FX_EWIRE_INT_RANGE : 0;
    case K_U16:
    case K_U32:
    case K_BOOL:
        return 0;
    case K_U64_LIST:
        return check_out_offsets(m);
    case K_RECORDS:
        return check_out_records(m);
    case K_REFUSAL: {
        const fx_msg_refusal *r = CAT(m, f, fx_msg_refusal);
        if ((unsigned)r->kind > FX_MSG_REFUSAL_SEQUENCE_REUSED)
            return FX_EWIRE_ACK_MODE;
        return r->kind == FX_MSG_REFUSAL_SEQUENCE_GAP && r->expected > FX_MSG_INT_MAX
                   ? FX_EWIRE_INT_RANGE
                   : 0;
    }
    case K_CONDITION: {
        const fx_msg_condition *cd = CAT(m, f, fx_msg_condition);
        if (cd->kind != FX_MSG_CONDITION_ABSENT && cd->kind != FX_MSG_CONDITION_VERSION)
            return FX_EWIRE_ACK_MODE;
        return cd->kind == FX_MSG_CONDITION_VERSION && cd->version > FX_MSG_INT_MAX
                   ? FX_EWIRE_INT_RANGE
                   : 0;
    }
    case K_CREATE:
        if ((unsigned)c->kind > FX_MSG_CREATE_TIME)
            return FX_EWIRE_ACK_MODE;
        return c->kind >= FX_MSG_CREATE_OFFSET && c->value > FX_MSG_INT_MAX ? FX_EWIRE_INT_RANGE
                                                                            : 0;
    case K_ACK:
        return (unsigned)m->ack > FX_WIRE_ACK_PER_BATCH ? FX_EWIRE_ACK_MODE : 0;
    case K_START:
        if ((unsigned)st->kind > FX_MSG_START_OFFSET)
            return FX_EWIRE_ACK_MODE;
        return st->kind == FX_MSG_START_OFFSET && st->offset > FX_MSG_INT_MAX ? FX_EWIRE_INT_RANGE
                                                                              : 0;
    default:
        return (unsigned)m->reason > FX_MSG_CURSOR_IN_FUTURE ? FX_EWIRE_ACK_MODE : 0;
    }
}

static int check_out(const fx_msg *m)
{
    if (!fx_msg_type_name(m->type))
        return FX_EWIRE_JSON_TYPE;
    for (const struct field *f = schemas[m->type].fields; f->name; f++) {
        if (!is_present(m, f)) {
            /* Only group_seek's start can be required and absent. */
            if (f->pres == P_REQ)
                return FX_EWIRE_FIELD_MISSING;
            continue;
        }
        int rv = check_out_field(f, m);
        if (rv < 0)
            return rv;
    }
    return 0;
}

/* ==== encoding: writer ==================================================== */

/* With |p| NULL the writer only counts, which sizes the output exactly. */
struct out {
    uint8_t *p;
    size_t n;
};

static void put(struct out *o, const void *s, size_t len)
{
    if (o->p)
        memcpy(o->p + o->n, s, len);
    o->n += len;
}

static void put_str(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Writes a JSON string the way serde_json does: escapes only '"', '\\' and
 * control characters (short forms where JSON has them, else \u00xx in lower
 * case); everything else, UTF-8 included, goes out as is. */
static void put_json_string(struct out *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(o, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        uint8_t c = (uint8_t)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(o, run, (size_t)(s - run));
        run = s + 1;
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc) {
            put_str(o, esc);
        } else {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(o, u, sizeof(u));
        }
    }
    put(o, run, (size_t)(s - run));
    put(o, "\"", 1);
}

static void put_quoted(struct out *o, const char *s)
{
    put(o, "\"", 1);
    put_str(o, s);
    put(o, "\"", 1);
}

static void put_uint(struct out *o, uint64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof(buf), "%" PRIu64, v);
    put(o, buf, (size_t)n);
}

static void put_b64(struct out *o, const fx_msg_bytes *b)
{
    put(o, "\"", 1);
    /* The sizing pass (no buffer) counts what the writing pass will write. */
    if (o->p)
        o->n += fx_base64_encode((char *)o->p + o->n, b->p, b->len, FX_BASE64_STD);
    else
        o->n += FX_BASE64_ENCODED_LEN(b->len, FX_BASE64_STD);
    put(o, "\"", 1);
}

static void put_list(struct out *o, const fx_msg *m)
{
    put(o, "[", 1);
    for (size_t i = 0; i < m->n_payloads; i++) {
        if (i > 0)
            put(o, ",", 1);
        put_b64(o, &m->payloads[i]);
    }
    put(o, "]", 1);
}

static void put_start(struct out *o, const fx_msg_start *st)
{
    if (st->kind == FX_MSG_START_OFFSET) {
        put_str(o, "{\"offset\":");
        put_uint(o, st->offset);
        put(o, "}", 1);
    } else {
        put_quoted(o, st->kind == FX_MSG_START_LATEST ? "latest" : "earliest");
    }
}

static void put_create(struct out *o, const fx_msg_create *c)
{
    if (c->kind >= FX_MSG_CREATE_OFFSET) {
        put_str(o, c->kind == FX_MSG_CREATE_OFFSET ? "{\"offset\":" : "{\"time_us\":");
        put_uint(o, c->value);
        put(o, "}", 1);
    } else {
        put_quoted(o, create_names[c->kind]);
    }
}

static void put_condition(struct out *o, const fx_msg_condition *c)
{
    if (c->kind == FX_MSG_CONDITION_VERSION) {
        put_str(o, "{\"version\":");
        put_uint(o, c->version);
        put(o, "}", 1);
    } else {
        put_quoted(o, "absent");
    }
}

static void put_refusal(struct out *o, const fx_msg_refusal *r)
{
    if (r->kind == FX_MSG_REFUSAL_SEQUENCE_GAP) {
        put_str(o, "{\"sequence_gap\":{\"expected\":");
        put_uint(o, r->expected);
        put(o, "}}", 2);
    } else {
        put_quoted(o, refusal_names[r->kind]);
    }
}

static void put_offsets(struct out *o, const fx_msg *m)
{
    put(o, "[", 1);
    for (size_t i = 0; i < m->n_offsets; i++) {
        if (i > 0)
            put(o, ",", 1);
        put_uint(o, m->offsets[i]);
    }
    put(o, "]", 1);
}

/* A record as the original writes it: offset, payload, attempts always;
 * skipped_before unless 0, publisher and timestamp_micros when present. */
static void put_record(struct out *o, const fx_msg_group_record *r)
{
    put_str(o, "{\"offset\":");
    put_uint(o, r->offset);
    put_str(o, ",\"payload\":");
    put_b64(o, &r->payload);
    put_str(o, ",\"attempts\":");
    put_uint(o, r->attempts);
    if (r->skipped_before) {
        put_str(o, ",\"skipped_before\":");
        put_uint(o, r->skipped_before);
    }
    if (r->publisher) {
        put_str(o, ",\"publisher\":");
        put_json_string(o, r->publisher);
    }
    if (r->has_timestamp_micros) {
        put_str(o, ",\"timestamp_micros\":");
        put_uint(o, r->timestamp_micros);
    }
    put(o, "}", 1);
}

static void put_records(struct out *o, const fx_msg *m)
{
    put(o, "[", 1);
    for (size_t i = 0; i < m->n_records; i++) {
        if (i > 0)
            put(o, ",", 1);
        put_record(o, &m->records[i]);
    }
    put(o, "]", 1);
}

static void put_value(struct out *o, const struct field *f, const fx_msg *m)
{
    switch (f->kind) {
    case K_NAME:
    case K_STR:
    case K_MEMBER:
        put_json_string(o, *CAT(m, f, const char *));
        break;
    case K_BYTES:
        put_b64(o, CAT(m, f, fx_msg_bytes));
        break;
    case K_BYTES_LIST:
        put_list(o, m);
        break;
    case K_U64:
        put_uint(o, *CAT(m, f, uint64_t));
        break;
    case K_U16:
        put_uint(o, *CAT(m, f, uint16_t));
        break;
    case K_U32:
        put_uint(o, *CAT(m, f, uint32_t));
        break;
    case K_BOOL:
        put_str(o, *CAT(m, f, bool) ? "true" : "false");
        break;
    case K_START:
        put_start(o, CAT(m, f, fx_msg_start));
        break;
    case K_CREATE:
        put_create(o, CAT(m, f, fx_msg_create));
        break;
    case K_REFUSAL:
        put_refusal(o, CAT(m, f, fx_msg_refusal));
        break;
    case K_CONDITION:
        put_condition(o, CAT(m, f, fx_msg_condition));
        break;
    case K_U64_LIST:
        put_offsets(o, m);
        break;
    case K_RECORDS:
        put_records(o, m);
        break;
    case K_ACK:
        put_quoted(o, ack_names[m->ack]);
        break;
    default:
        put_quoted(o, reason_names[m->reason]);
        break;
    }
}

static void put_msg(struct out *o, const fx_msg *m)
{
    put_str(o, "{\"type\":");
    put_quoted(o, schemas[m->type].name);
    for (const struct field *f = schemas[m->type].fields; f->name; f++) {
        bool present = is_present(m, f);
        if (!present && (f->pres == P_OPT || f->pres == P_ZERO))
            continue;
        put_str(o, ",\"");
        put_str(o, f->name);
        put_str(o, "\":");
        if (present)
            put_value(o, f, m);
        else
            put_str(o, "null");
    }
    put(o, "}", 1);
}

/* ==== encoding: entry points ============================================== */

ssize_t fx_msg_encoded_len(const fx_msg *m)
{
    int rv = check_out(m);
    if (rv < 0)
        return rv;
    struct out o = {0};
    put_msg(&o, m);
    if (o.n > UINT32_MAX - FX_WIRE_HEADER_LEN)
        return FX_EWIRE_TOO_LARGE;
    return (ssize_t)o.n;
}

int fx_msg_encode_into(const fx_msg *m, uint8_t *buf, size_t cap, size_t *plen)
{
    ssize_t n = fx_msg_encoded_len(m);
    if (n < 0)
        return (int)n;
    if ((size_t)n > cap)
        return FX_ETOOBIG;
    struct out o = {.p = buf};
    put_msg(&o, m);
    *plen = o.n;
    return 0;
}

/* Allocates |head| + the JSON length and writes the JSON after |head| bytes. */
static int encode_alloc(const fx_msg *m, size_t head, uint8_t **pout, size_t *plen)
{
    ssize_t n = fx_msg_encoded_len(m);
    if (n < 0)
        return (int)n;
    uint8_t *buf = malloc(head + (size_t)n);
    if (!buf)
        return -ENOMEM;
    struct out o = {.p = buf + head};
    put_msg(&o, m);
    *pout = buf;
    *plen = head + o.n;
    return 0;
}

int fx_msg_encode(const fx_msg *m, uint8_t **pout, size_t *plen)
{
    return encode_alloc(m, 0, pout, plen);
}

int fx_msg_encode_frame(const fx_msg *m, uint8_t **pout, size_t *plen)
{
    int rv = encode_alloc(m, FX_WIRE_HEADER_LEN, pout, plen);
    if (rv < 0)
        return rv;
    uint8_t *p = fx_put32(*pout, FX_WIRE_MAGIC);
    p = fx_put16(p, FX_WIRE_VERSION);
    p = fx_put16(p, 0);
    fx_put32(p, (uint32_t)(*plen - FX_WIRE_HEADER_LEN));
    return 0;
}

/* ==== helpers ============================================================= */

fx_wire_ack fx_msg_effective_ack(const fx_msg *m)
{
    if (m->type == FX_MSG_PUBLISH)
        return m->has_ack ? m->ack : FX_WIRE_ACK_PER_MESSAGE;
    if (m->type == FX_MSG_PUBLISH_BATCH)
        return m->has_ack ? m->ack : FX_WIRE_ACK_PER_BATCH;
    return FX_WIRE_ACK_NONE;
}

fx_msg_start_kind fx_msg_effective_start(const fx_msg *m)
{
    return m->start.kind == FX_MSG_START_NONE ? FX_MSG_START_LATEST : m->start.kind;
}

static bool str_equal(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool bytes_equal(const fx_msg_bytes *a, const fx_msg_bytes *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

static bool list_equal(const fx_msg *a, const fx_msg *b)
{
    if (a->n_payloads != b->n_payloads)
        return false;
    for (size_t i = 0; i < a->n_payloads; i++)
        if (!bytes_equal(&a->payloads[i], &b->payloads[i]))
            return false;
    return true;
}

static bool offsets_equal(const fx_msg *a, const fx_msg *b)
{
    return a->n_offsets == b->n_offsets &&
           (a->n_offsets == 0 || memcmp(a->offsets, b->offsets, a->n_offsets * 8) == 0);
}

static bool record_equal(const fx_msg_group_record *a, const fx_msg_group_record *b)
{
    return a->offset == b->offset && bytes_equal(&a->payload, &b->payload) &&
           a->attempts == b->attempts && a->skipped_before == b->skipped_before &&
           str_equal(a->publisher, b->publisher) &&
           a->has_timestamp_micros == b->has_timestamp_micros &&
           (!a->has_timestamp_micros || a->timestamp_micros == b->timestamp_micros);
}

static bool records_equal(const fx_msg *a, const fx_msg *b)
{
    if (a->n_records != b->n_records)
        return false;
    for (size_t i = 0; i < a->n_records; i++)
        if (!record_equal(&a->records[i], &b->records[i]))
            return false;
    return true;
}

static bool value_equal(const struct field *f, const fx_msg *a, const fx_msg *b)
{
    const fx_msg_start *sa = CAT(a, f, fx_msg_start), *sb = CAT(b, f, fx_msg_start);
    const fx_msg_create *ca = CAT(a, f, fx_msg_create), *cb = CAT(b, f, fx_msg_create);
    switch (f->kind) {
    case K_NAME:
    case K_STR:
    case K_MEMBER:
        return str_equal(*CAT(a, f, const char *), *CAT(b, f, const char *));
    case K_BYTES:
        return bytes_equal(CAT(a, f, fx_msg_bytes), CAT(b, f, fx_msg_bytes));
    case K_BYTES_LIST:
        return list_equal(a, b);
    case K_U64:
        return *CAT(a, f, uint64_t) == *CAT(b, f, uint64_t);
    case K_U16:
        return *CAT(a, f, uint16_t) == *CAT(b, f, uint16_t);
    case K_U32:
        return *CAT(a, f, uint32_t) == *CAT(b, f, uint32_t);
    case K_BOOL:
        return *CAT(a, f, bool) == *CAT(b, f, bool);
    case K_START:
        return sa->kind == sb->kind &&
               (sa->kind != FX_MSG_START_OFFSET || sa->offset == sb->offset);
    case K_CREATE:
        return ca->kind == cb->kind && (ca->kind < FX_MSG_CREATE_OFFSET || ca->value == cb->value);
    case K_CONDITION: {
        const fx_msg_condition *da = CAT(a, f, fx_msg_condition),
                               *db = CAT(b, f, fx_msg_condition);
        return da->kind == db->kind &&
               (da->kind != FX_MSG_CONDITION_VERSION || da->version == db->version);
    }
    case K_REFUSAL: {
        const fx_msg_refusal *ra = CAT(a, f, fx_msg_refusal), *rb = CAT(b, f, fx_msg_refusal);
        return ra->kind == rb->kind &&
               (ra->kind != FX_MSG_REFUSAL_SEQUENCE_GAP || ra->expected == rb->expected);
    }
    case K_U64_LIST:
        return offsets_equal(a, b);
    case K_RECORDS:
        return records_equal(a, b);
    case K_ACK:
        return a->ack == b->ack;
    default:
        return a->reason == b->reason;
    }
}

bool fx_msg_equal(const fx_msg *a, const fx_msg *b)
{
    if (a->type != b->type || !fx_msg_type_name(a->type))
        return a->type == b->type;
    for (const struct field *f = schemas[a->type].fields; f->name; f++) {
        bool pa = is_present(a, f), pb = is_present(b, f);
        if (pa != pb)
            return false;
        if (pa && !value_equal(f, a, b))
            return false;
    }
    return true;
}

/* ==== constructors ======================================================== */

static void init_type(fx_msg *m, fx_msg_type t)
{
    memset(m, 0, sizeof(*m));
    m->type = t;
}

void fx_msg_init_auth(fx_msg *m, const char *tenant_id, const char *token, bool has_client_flags,
                      uint16_t client_flags)
{
    init_type(m, FX_MSG_AUTH);
    m->tenant_id = tenant_id;
    m->token = token;
    m->has_client_flags = has_client_flags;
    m->client_flags = has_client_flags ? client_flags : 0;
}

void fx_msg_init_auth_ok(fx_msg *m, uint16_t server_flags)
{
    init_type(m, FX_MSG_AUTH_OK);
    m->server_flags = server_flags;
}

void fx_msg_init_auth_reply(fx_msg *m, const fx_msg *auth, uint16_t server_flags)
{
    if (auth->type == FX_MSG_AUTH && auth->has_client_flags)
        fx_msg_init_auth_ok(m, server_flags);
    else
        fx_msg_init_ok(m);
}

void fx_msg_init_ok(fx_msg *m)
{
    init_type(m, FX_MSG_OK);
}

void fx_msg_init_error(fx_msg *m, const char *message)
{
    init_type(m, FX_MSG_ERROR);
    m->message = message;
}

void fx_msg_init_publish_ok(fx_msg *m, uint64_t request_id)
{
    init_type(m, FX_MSG_PUBLISH_OK);
    m->request_id = request_id;
}

void fx_msg_init_producer_init_ok(fx_msg *m, uint64_t request_id, uint64_t producer_id)
{
    init_type(m, FX_MSG_PRODUCER_INIT_OK);
    m->request_id = request_id;
    m->producer_id = producer_id;
}

void fx_msg_init_publish_refused(fx_msg *m, uint64_t request_id, fx_msg_refusal refusal,
                                 const char *message)
{
    init_type(m, FX_MSG_PUBLISH_REFUSED);
    m->request_id = request_id;
    m->refusal = refusal;
    m->message = message;
}

void fx_msg_init_publish_error(fx_msg *m, uint64_t request_id, const char *message)
{
    init_type(m, FX_MSG_PUBLISH_ERROR);
    m->request_id = request_id;
    m->message = message;
}

void fx_msg_init_subscribed(fx_msg *m, uint64_t subscription_id)
{
    init_type(m, FX_MSG_SUBSCRIBED);
    m->subscription_id = subscription_id;
}

void fx_msg_init_event_stream_hello(fx_msg *m, uint64_t subscription_id)
{
    init_type(m, FX_MSG_EVENT_STREAM_HELLO);
    m->subscription_id = subscription_id;
}

void fx_msg_init_subscribe_cursor_error(fx_msg *m, fx_msg_cursor_reason reason, uint64_t requested,
                                        uint64_t available)
{
    init_type(m, FX_MSG_SUBSCRIBE_CURSOR_ERROR);
    m->reason = reason;
    m->requested = requested;
    m->available = available;
}

void fx_msg_init_group_join(fx_msg *m, const char *tenant_id, const char *ns, const char *stream,
                            const char *group)
{
    init_type(m, FX_MSG_GROUP_JOIN);
    m->tenant_id = tenant_id;
    m->ns = ns;
    m->stream = stream;
    m->group = group;
}

void fx_msg_init_group_joined(fx_msg *m, uint64_t subscription_id, const char *member,
                              uint32_t window, bool durable)
{
    init_type(m, FX_MSG_GROUP_JOINED);
    m->subscription_id = subscription_id;
    m->member = member;
    m->window = window;
    m->durable = durable;
}

void fx_msg_init_not_leader(fx_msg *m, const char *node_id, const char *addr, uint64_t generation)
{
    init_type(m, FX_MSG_NOT_LEADER);
    m->node_id = node_id;
    m->addr = addr;
    m->has_addr = addr != NULL;
    m->generation = generation;
}

void fx_msg_init_shard_moved(fx_msg *m, const char *node_id, const char *addr, uint64_t generation)
{
    fx_msg_init_not_leader(m, node_id, addr, generation);
    m->type = FX_MSG_SHARD_MOVED;
}

void fx_msg_init_moved_reply(fx_msg *m, uint32_t client_features, const char *tenant_id,
                             const char *ns, const char *stream, const char *node_id,
                             const char *addr, uint64_t generation, char *text, size_t cap)
{
    if ((client_features & FX_FEATURE_SHARD_MOVED) != 0) {
        fx_msg_init_shard_moved(m, node_id, addr, generation);
        return;
    }
    snprintf(text, cap, "stream %s/%s/%s moved to %s", tenant_id, ns, stream, node_id);
    fx_msg_init_error(m, text);
}

void fx_msg_init_redirect_reply(fx_msg *m, uint32_t client_features, const char *tenant_id,
                                const char *ns, const char *stream, const char *node_id,
                                const char *addr, uint64_t generation, char *text, size_t cap)
{
    if ((client_features & FX_FEATURE_REDIRECT) != 0) {
        fx_msg_init_not_leader(m, node_id, addr, generation);
        return;
    }
    /* A client that cannot follow a redirect still learns who serves the
     * stream (the original's text), and with error codes that it is a
     * redirect rather than a refusal. */
    snprintf(text, cap, "stream %s/%s/%s is served by %s", tenant_id, ns, stream, node_id);
    fx_msg_init_error(m, text);
    if ((client_features & FX_FEATURE_ERROR_CODES) != 0) {
        m->code = FX_MSG_CODE_NOT_LEADER;
        m->has_code = true;
        m->retry = FX_MSG_RETRY_REDIRECT;
        m->has_retry = true;
    }
}
