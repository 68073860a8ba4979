/* Error codes shared by libfelix, the broker and the tools.
 * Functions return 0 on success and a negative value on failure: -errno for OS
 * errors, or one of the FX_E* codes below (all below -1000). fx_strerror()
 * names either kind. */
#ifndef FELIX_ERROR_H
#define FELIX_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values are stable: append, never renumber. */
#define FX_ERRORS(X)                                                                               \
    /* generic */                                                                                  \
    X(FX_EFULL, -1001, "queue full")                                                               \
    X(FX_ECLOSED, -1002, "closed")                                                                 \
    X(FX_ETIMEDOUT, -1003, "timed out")                                                            \
    X(FX_EEOF, -1004, "end of stream")                                                             \
    X(FX_EWOULDBLOCK_LOOP, -1005, "blocking call made from a callback on the client loop")         \
    X(FX_ETOOBIG, -1006, "request larger than the whole byte budget")                              \
    X(FX_ECONFIG, -1007, "invalid configuration")                                                  \
    X(FX_EINTERNAL, -1008, "internal error")                                                       \
    X(FX_ESHUTDOWN, -1009, "broker shutting down")                                                 \
    /* connection and TLS */                                                                       \
    X(FX_ENOTCONN, -1100, "not connected")                                                         \
    X(FX_ECONNLOST, -1101, "connection lost")                                                      \
    X(FX_ETLS, -1102, "TLS handshake failed")                                                      \
    X(FX_ETLS_UNKNOWN_CA, -1103, "TLS verification failed: unknown certificate authority")         \
    X(FX_ETLS_PIN, -1104, "TLS verification failed: certificate pin mismatch")                     \
    X(FX_ETLS_EXPIRED, -1105, "TLS verification failed: certificate expired or not yet valid")     \
    X(FX_ETLS_NAME, -1106, "TLS verification failed: certificate name mismatch")                   \
    X(FX_EQUIC, -1107, "QUIC protocol error")                                                      \
    X(FX_EIDLE, -1108, "connection idle timeout")                                                  \
    X(FX_ESTREAMS, -1109, "stream limit reached")                                                  \
    /* broker answers */                                                                           \
    X(FX_EAUTH, -1200, "auth refused")                                                             \
    X(FX_EFORBIDDEN, -1201, "forbidden")                                                           \
    X(FX_ENOSTREAM, -1202, "stream not found")                                                     \
    X(FX_ECURSOR_TOO_OLD, -1203, "cursor too old")                                                 \
    X(FX_ECURSOR_IN_FUTURE, -1204, "cursor in future")                                             \
    X(FX_EPROTO, -1205, "protocol error")                                                          \
    X(FX_EREMOTE, -1206, "error reported by the broker")                                           \
    X(FX_EOVERLOAD, -1207, "server overloaded")                                                    \
    X(FX_EREFUSED, -1208, "publish refused by the idempotent producer check")                      \
    X(FX_ENOTFOUND, -1209, "not found")                                                            \
    X(FX_EREDIRECT, -1210, "subscribe redirect not followed")                                      \
    X(FX_ENOTSERVING, -1211, "stream owner unavailable: the broker is past its cluster lease "     \
                             "deadline")                                                           \
    X(FX_EMOVING, -1212, "stream moving to another node: the publish was not appended; retry")   \
    /* wire codec */                                                                               \
    X(FX_EWIRE_MAGIC, -1300, "bad frame magic (expected FLX1)")                                    \
    X(FX_EWIRE_VERSION, -1301, "unsupported frame version")                                        \
    X(FX_EWIRE_FLAGS, -1302, "unsupported frame flags")                                            \
    X(FX_EWIRE_FLAGS_ACKED, -1303, "frame flag 0x0008 (acked) without 0x0001 (publish batch)")     \
    X(FX_EWIRE_FLAGS_OFFSETS, -1304, "frame flag 0x0020 (offsets) without an event batch flag")    \
    X(FX_EWIRE_FLAGS_KINDS, -1305, "frame flags name more than one body kind")                     \
    X(FX_EWIRE_TOO_LARGE, -1306, "frame length exceeds max_frame_bytes")                           \
    X(FX_EWIRE_TRUNCATED, -1307, "frame body truncated")                                           \
    X(FX_EWIRE_COUNT, -1308, "item count larger than the bytes that remain")                       \
    X(FX_EWIRE_UTF8, -1309, "name is not valid UTF-8")                                             \
    X(FX_EWIRE_JSON, -1310, "malformed JSON")                                                      \
    X(FX_EWIRE_JSON_TYPE, -1311, "unknown JSON message type")                                      \
    X(FX_EWIRE_FIELD_MISSING, -1312, "missing required field")                                     \
    X(FX_EWIRE_FIELD_TYPE, -1313, "field has the wrong type")                                      \
    X(FX_EWIRE_INT_RANGE, -1314, "integer out of range")                                           \
    X(FX_EWIRE_BASE64, -1315, "invalid base64")                                                    \
    X(FX_EWIRE_TRAILING, -1316, "trailing bytes after frame body")                                 \
    X(FX_EWIRE_ACK_MODE, -1317, "invalid ack mode")                                                \
    X(FX_EWIRE_STATUS, -1318, "invalid ack status")                                                \
    X(FX_EWIRE_NAME, -1319, "invalid name")                                                        \
    X(FX_EWIRE_KIND, -1320, "frame is not of the expected kind")                                   \
    X(FX_EWIRE_JSON_LIMIT, -1321, "JSON message has more elements than any message holds")         \
    /* durable storage */                                                                          \
    X(FX_ESTORAGE_CORRUPT, -1400, "storage corruption detected")                                   \
    X(FX_ESTORAGE_TOO_LARGE, -1401, "record payload exceeds the maximum supported size")           \
    X(FX_ESTORAGE_FAILED, -1402, "storage log stopped after a failed write or flush")              \
    X(FX_ESTORAGE_CATALOG, -1403, "malformed storage catalogue")                                   \
    X(FX_ESTORAGE_FULL, -1404, "storage full")                                                     \
    X(FX_ESTORAGE_ERROR, -1405, "storage error")                                                   \
    X(FX_ESTORAGE_QUOTA, -1406, "storage quota exceeded")                                          \
    X(FX_ESTORAGE_DAMAGED, -1407, "storage damaged")

enum fx_error {
#define FX_ERR_ENUM(name, value, msg) name = (value),
    FX_ERRORS(FX_ERR_ENUM)
#undef FX_ERR_ENUM
};

/* Returns a static, human-readable description of |rv| (an FX_E* code or a
 * negative errno). Any thread. */
const char *fx_strerror(int rv);

/* Returns the symbolic name of |rv| ("FX_EFULL", "ENOENT"), or "?" . */
const char *fx_errname(int rv);

#ifdef __cplusplus
}
#endif
#endif
