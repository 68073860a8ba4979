/* The original's JSON consumer-group requests on a client bidi stream
 * (group_json.c, felix-facts-groups.md §1.3): one request per stream,
 * checked and authorised here (group.consume / group.manage, shard 0, the
 * feature it belongs to), handed to the stream's worker (group_poll.h) and
 * answered once, after which the stream is finished. Also the error answer
 * both sides build. Connection loop, except fxb_gjson_error (any thread). */
#ifndef FX_BROKER_GROUP_JSON_H
#define FX_BROKER_GROUP_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/broker_internal.h"
#include "wire/message.h"

/* The features auth_ok.server_features advertises to a client that offered
 * client_features: exactly what is served (docs/protocol.md). Not
 * FX_FEATURE_GROUP_CONSUMER (reclaim is refused), not
 * FX_FEATURE_ERROR_CODES (only the group answers carry codes). */
#define FXB_SERVER_FEATURES                                                                        \
    (FX_FEATURE_CONSUMER_GROUP | FX_FEATURE_GROUP_DEAD_LETTERS | FX_FEATURE_GROUP_SKIPPED |        \
     FX_FEATURE_GROUP_ADMIN | FX_FEATURE_GROUP_CLAIM_CONTROL | FX_FEATURE_IDEMPOTENT_PRODUCER |    \
     FX_FEATURE_SEQUENCE_REUSED | FX_FEATURE_CACHE_DELETE | FX_FEATURE_CACHE_CONDITIONAL)
/* The second word, to a client that offered FX_FEATURE_EXTENDED: Felix-C's
 * publish_ok offset + duplicate for idempotent batches. */
#define FXB_SERVER_FEATURES_HI (FX_FEATURE_HI_PUBLISH_OFFSETS | FX_FEATURE_HI_CACHE_BINARY)

/* Why a group request is refused: each has its error code and retry class
 * (the original's), and its felix_group_json_refused_total reason. */
typedef enum fxb_gjerr {
    FXB_GJ_INVALID = 0, /* invalid_request, fatal */
    FXB_GJ_NOT_FOUND,   /* not_found, retry_after */
    FXB_GJ_FORBIDDEN,   /* forbidden, fatal */
    FXB_GJ_STALE,       /* stale_claim, retry (an ack or nack never handed out) */
    FXB_GJ_STALE_FATAL, /* stale_claim, fatal (a claim that no longer stands) */
    FXB_GJ_OVERLOADED,  /* overloaded, retry_after (bounds: waiting polls, members) */
    FXB_GJ_INTERNAL,    /* internal, fatal (no memory, storage) */
    FXB_GJ_UNSUPPORTED, /* invalid_request, fatal: a request or option not served */
} fxb_gjerr;

/* Fills |m| with the error answer |text| (borrowed) for a client that
 * offered |features|: code and retry only with FX_FEATURE_ERROR_CODES.
 * Counts the refusal. Any thread. */
void fxb_gjson_error(fx_msg *m, uint32_t features, fxb_gjerr e, const char *text);

/* True for the JSON group request types (group_poll ... group_delete). */
bool fxb_group_json_is_request(fx_msg_type t);

/* Handles the decoded group request |m| on |s| (authenticated, tenant
 * checked): refused here, or handed to the stream's worker. Either way the
 * stream takes no further request: it is finished after the answer. Conn
 * loop. */
void fxb_group_json(fxb_bidi *s, const fx_msg *m);

#endif
