/* Binary cache frames of Felix-C (docs/protocol.md, "Binary cache frames"):
 * a compact get / put / delete request and its answer, for clients that
 * negotiated FX_FEATURE_HI_CACHE_BINARY (auth client_features_hi /
 * auth_ok server_features_hi). They replace the JSON cache_get / cache_put /
 * cache_delete and their cache_value / cache_ok answers, whose JSON and base64
 * dominate the cost of a small value.
 *
 * Frame flags 0x8000 (FX_FLAG_FELIXC) alone, like the group frames: the
 * original's free bits end below it and 0x8000 already names "Felix-C frame,
 * kind in the first body byte" (wire/group.h kinds 1..3). The cache frames
 * are kinds 4 and 5:
 *
 *   kind 4  CACHE_REQUEST  client -> broker, on a cache stream
 *       u8 4 | u8 op | u64 request_id | u16 ns_len | ns | u16 cache_len |
 *       cache | u16 key_len | key [ | u64 ttl_ms | value (the rest) ]
 *       op 1 get, 2 put, 3 delete; ttl_ms and value only for put (ttl_ms 0:
 *       no expiry); get and delete end after the key.
 *   kind 5  CACHE_ANSWER   broker -> client, on the same stream, in request
 *                          order
 *       u8 5 | u8 status | u64 request_id [ | value (the rest) ]
 *                                          [ | u16 len | text ]
 *       status 0 ok (a get's hit: the value follows, may be empty; a put done
 *       or a delete that removed: nothing follows), 1 miss (get) or nothing
 *       removed (delete), nothing follows; 2 error: u16 len | text, the same
 *       text as the JSON error reply.
 *
 * All integers big-endian; names UTF-8 without NUL, namespace and cache not
 * empty. Decoders check every length against
 * the bytes left, refuse trailing bytes where the body has a fixed end, and
 * point into the input (no copies). Pure functions; any thread. */
#ifndef FX_WIRE_CACHE_BIN_H
#define FX_WIRE_CACHE_BIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/wire.h"

#define FX_CACHE_BIN_FRAME_REQUEST 4u
#define FX_CACHE_BIN_FRAME_ANSWER 5u

typedef enum fx_cache_bin_op {
    FX_CACHE_BIN_GET = 1,
    FX_CACHE_BIN_PUT = 2,
    FX_CACHE_BIN_DELETE = 3,
} fx_cache_bin_op;

typedef enum fx_cache_bin_status {
    FX_CACHE_BIN_OK = 0,
    FX_CACHE_BIN_MISS = 1,
    FX_CACHE_BIN_ERROR = 2,
} fx_cache_bin_status;

/* Most bytes of a name or error text (the u16 length field). */
#define FX_CACHE_BIN_NAME_MAX 65535u

/* A request. Decoded slices point into the body; |ttl_ms| and |value| are
 * meaningful for FX_CACHE_BIN_PUT only (0 / empty otherwise). */
typedef struct fx_wire_cache_req {
    uint8_t op; /* fx_cache_bin_op */
    uint64_t request_id;
    fx_wire_slice ns;
    fx_wire_slice cache;
    fx_wire_slice key;
    uint64_t ttl_ms;
    fx_wire_slice value;
} fx_wire_cache_req;

/* An answer. |value| is set for status 0 (empty for a put or a delete),
 * |text| for status 2 only. */
typedef struct fx_wire_cache_ans {
    uint8_t status; /* fx_cache_bin_status */
    uint64_t request_id;
    fx_wire_slice value;
    fx_wire_slice text;
} fx_wire_cache_ans;

/* True if |body| (a Felix-C frame body) is one of the cache kinds (4 or 5):
 * the dispatcher's test before handing the body to the group codec. */
bool fx_wire_cache_bin_is(const uint8_t *body, size_t len);

/* Decodes a CACHE_REQUEST body (frame header stripped, kind byte first) into
 * |req|. Returns 0 or FX_EWIRE_TRUNCATED (a field or a name past the body),
 * FX_EWIRE_KIND (not kind 4, or an unknown op), FX_EWIRE_UTF8 (a name),
 * FX_EWIRE_NAME (a NUL byte in a name, an empty namespace or cache; the
 * key may be empty, as in JSON), FX_EWIRE_TRAILING (bytes after a get's or delete's key). |err| may
 * be NULL. */
int fx_wire_cache_req_decode(const uint8_t *body, size_t len, fx_wire_cache_req *req,
                             fx_wire_err *err);

/* Size of the whole frame (header included) for |req|, or 0 if it cannot be
 * encoded (unknown op, a name over FX_CACHE_BIN_NAME_MAX, a frame over the
 * u32 length). */
size_t fx_wire_cache_req_frame_size(const fx_wire_cache_req *req);

/* Writes the whole frame for |req| to |out| of |cap| bytes (the value is
 * copied once, here). Returns the frame size, -ENOSPC, or FX_EWIRE_KIND /
 * FX_EWIRE_TOO_LARGE for what fx_wire_cache_req_frame_size() refuses. */
ssize_t fx_wire_cache_req_encode(const fx_wire_cache_req *req, uint8_t *out, size_t cap);

/* Decodes a CACHE_ANSWER body into |ans|. Returns 0 or FX_EWIRE_TRUNCATED,
 * FX_EWIRE_KIND (not kind 5), FX_EWIRE_STATUS (unknown status),
 * FX_EWIRE_UTF8 / FX_EWIRE_NAME (the error text), FX_EWIRE_TRAILING (bytes after a miss or
 * after the error text). */
int fx_wire_cache_ans_decode(const uint8_t *body, size_t len, fx_wire_cache_ans *ans,
                             fx_wire_err *err);

/* Size of the whole frame for |ans|, or 0 if it cannot be encoded (unknown
 * status, a miss with a value, a text over FX_CACHE_BIN_NAME_MAX, too
 * large). */
size_t fx_wire_cache_ans_frame_size(const fx_wire_cache_ans *ans);

/* Writes the whole frame for |ans|. Returns the frame size, -ENOSPC, or
 * FX_EWIRE_STATUS / FX_EWIRE_TOO_LARGE for what the size refuses. */
ssize_t fx_wire_cache_ans_encode(const fx_wire_cache_ans *ans, uint8_t *out, size_t cap);

#endif
