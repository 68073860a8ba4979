/* Binary cache frames of Felix-C (flag 0x8000, kinds 4 and 5): CACHE_REQUEST
 * and CACHE_ANSWER. Decoders walk a bounds-checked cursor and point into the
 * input; encoders refuse what the decoders refuse. Pure functions; any
 * thread. */
#include "wire/cache_bin.h"

#include <errno.h>
#include <string.h>

#include "wire/frame.h"
#include "wire/reader.h"

#define REQ_HEAD 10u /* kind, op, request_id */
#define ANS_HEAD 10u /* kind, status, request_id */

/* ---- bounds-checked reader --------------------------------------------------------- */


static int truncated(fx_wire_err *err, const char *what)
{
    return fx_rd_truncated(err, "cache", what);
}

static int trailing(const fx_rd *r, fx_wire_err *err)
{
    return fx_rd_trailing(r, err, "cache");
}

/* Reads a u16 length and that many bytes (valid UTF-8, no NUL; not empty
 * when |name|, as the JSON codec wants a namespace and a cache) into |s|. */
static int rd_str(fx_rd *r, fx_wire_slice *s, bool name, const char *what, fx_wire_err *err)
{
    const uint8_t *p = fx_rd_take(r, 2);
    if (!p)
        return truncated(err, what);
    size_t n = fx_be16(p);
    const uint8_t *q = fx_rd_take(r, n);
    if (!q)
        return truncated(err, what);
    if (!fx_wire_utf8_valid(q, n))
        return fx_wire_err_set(err, FX_EWIRE_UTF8, "cache frame: %s is not valid UTF-8", what);
    if (n && memchr(q, 0, n) != NULL)
        return fx_wire_err_set(err, FX_EWIRE_NAME, "cache frame: %s holds a NUL byte", what);
    if (name && n == 0)
        return fx_wire_err_set(err, FX_EWIRE_NAME, "cache frame: %s is empty", what);
    *s = (fx_wire_slice){q, n};
    return 0;
}

static uint8_t *put_str(uint8_t *p, fx_wire_slice s)
{
    p = fx_put16(p, (uint16_t)s.len);
    if (s.len)
        memcpy(p, s.ptr, s.len);
    return p + s.len;
}

bool fx_wire_cache_bin_is(const uint8_t *body, size_t len)
{
    return len > 0 &&
           (body[0] == FX_CACHE_BIN_FRAME_REQUEST || body[0] == FX_CACHE_BIN_FRAME_ANSWER);
}

/* ---- CACHE_REQUEST ----------------------------------------------------------------- */

int fx_wire_cache_req_decode(const uint8_t *body, size_t len, fx_wire_cache_req *req,
                             fx_wire_err *err)
{
    fx_rd r = {body, len};
    memset(req, 0, sizeof(*req));
    const uint8_t *p = fx_rd_take(&r, 1);
    if (!p)
        return truncated(err, "the frame kind");
    if (p[0] != FX_CACHE_BIN_FRAME_REQUEST)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "cache frame kind %u where %u was expected",
                               (unsigned)p[0], FX_CACHE_BIN_FRAME_REQUEST);
    p = fx_rd_take(&r, REQ_HEAD - 1);
    if (!p)
        return truncated(err, "the request head");
    req->op = p[0];
    if (req->op < FX_CACHE_BIN_GET || req->op > FX_CACHE_BIN_DELETE)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "unknown cache op %u", (unsigned)req->op);
    req->request_id = fx_be64(p + 1);
    int rv;
    if ((rv = rd_str(&r, &req->ns, true, "the namespace", err)) < 0 ||
        (rv = rd_str(&r, &req->cache, true, "the cache name", err)) < 0 ||
        (rv = rd_str(&r, &req->key, false, "the key", err)) < 0)
        return rv;
    if (req->op != FX_CACHE_BIN_PUT)
        return trailing(&r, err);
    p = fx_rd_take(&r, 8);
    if (!p)
        return truncated(err, "ttl_ms");
    req->ttl_ms = fx_be64(p);
    req->value = (fx_wire_slice){r.p, r.left};
    return 0;
}

size_t fx_wire_cache_req_frame_size(const fx_wire_cache_req *req)
{
    if (req->op < FX_CACHE_BIN_GET || req->op > FX_CACHE_BIN_DELETE)
        return 0;
    if (req->ns.len > FX_CACHE_BIN_NAME_MAX || req->cache.len > FX_CACHE_BIN_NAME_MAX ||
        req->key.len > FX_CACHE_BIN_NAME_MAX)
        return 0;
    size_t body = REQ_HEAD + 6 + req->ns.len + req->cache.len + req->key.len;
    if (req->op == FX_CACHE_BIN_PUT) {
        if (req->value.len > SIZE_MAX - body - 8)
            return 0;
        body += 8 + req->value.len;
    }
    return fx_frame_size(body);
}

ssize_t fx_wire_cache_req_encode(const fx_wire_cache_req *req, uint8_t *out, size_t cap)
{
    size_t size = fx_wire_cache_req_frame_size(req);
    if (size == 0)
        return (req->op < FX_CACHE_BIN_GET || req->op > FX_CACHE_BIN_DELETE) ? FX_EWIRE_KIND
                                                                             : FX_EWIRE_TOO_LARGE;
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(size - FX_WIRE_HEADER_LEN));
    *p++ = FX_CACHE_BIN_FRAME_REQUEST;
    *p++ = req->op;
    p = fx_put64(p, req->request_id);
    p = put_str(p, req->ns);
    p = put_str(p, req->cache);
    p = put_str(p, req->key);
    if (req->op == FX_CACHE_BIN_PUT) {
        p = fx_put64(p, req->ttl_ms);
        if (req->value.len)
            memcpy(p, req->value.ptr, req->value.len);
    }
    return (ssize_t)size;
}

/* ---- CACHE_ANSWER ------------------------------------------------------------------ */

int fx_wire_cache_ans_decode(const uint8_t *body, size_t len, fx_wire_cache_ans *ans,
                             fx_wire_err *err)
{
    fx_rd r = {body, len};
    memset(ans, 0, sizeof(*ans));
    const uint8_t *p = fx_rd_take(&r, 1);
    if (!p)
        return truncated(err, "the frame kind");
    if (p[0] != FX_CACHE_BIN_FRAME_ANSWER)
        return fx_wire_err_set(err, FX_EWIRE_KIND, "cache frame kind %u where %u was expected",
                               (unsigned)p[0], FX_CACHE_BIN_FRAME_ANSWER);
    p = fx_rd_take(&r, ANS_HEAD - 1);
    if (!p)
        return truncated(err, "the answer head");
    ans->status = p[0];
    ans->request_id = fx_be64(p + 1);
    switch (ans->status) {
    case FX_CACHE_BIN_OK:
        ans->value = (fx_wire_slice){r.p, r.left};
        return 0;
    case FX_CACHE_BIN_MISS:
        return trailing(&r, err);
    case FX_CACHE_BIN_ERROR: {
        int rv = rd_str(&r, &ans->text, false, "the error text", err);
        return rv < 0 ? rv : trailing(&r, err);
    }
    default:
        return fx_wire_err_set(err, FX_EWIRE_STATUS, "unknown cache answer status %u",
                               (unsigned)ans->status);
    }
}

size_t fx_wire_cache_ans_frame_size(const fx_wire_cache_ans *ans)
{
    size_t body = ANS_HEAD;
    switch (ans->status) {
    case FX_CACHE_BIN_OK:
        if (ans->value.len > SIZE_MAX - body)
            return 0;
        body += ans->value.len;
        break;
    case FX_CACHE_BIN_MISS:
        if (ans->value.len || ans->text.len)
            return 0;
        break;
    case FX_CACHE_BIN_ERROR:
        if (ans->text.len > FX_CACHE_BIN_NAME_MAX || ans->value.len)
            return 0;
        body += 2 + ans->text.len;
        break;
    default:
        return 0;
    }
    return fx_frame_size(body);
}

ssize_t fx_wire_cache_ans_encode(const fx_wire_cache_ans *ans, uint8_t *out, size_t cap)
{
    size_t size = fx_wire_cache_ans_frame_size(ans);
    if (size == 0) {
        /* A shape the status does not allow, else a length that does not fit. */
        bool bad_shape = ans->status > FX_CACHE_BIN_ERROR ||
                         (ans->status == FX_CACHE_BIN_MISS && (ans->value.len || ans->text.len)) ||
                         (ans->status == FX_CACHE_BIN_ERROR && ans->value.len);
        return bad_shape ? FX_EWIRE_STATUS : FX_EWIRE_TOO_LARGE;
    }
    if (cap < size)
        return -ENOSPC;
    uint8_t *p = fx_frame_header_put(out, FX_FLAG_FELIXC, (uint32_t)(size - FX_WIRE_HEADER_LEN));
    *p++ = FX_CACHE_BIN_FRAME_ANSWER;
    *p++ = ans->status;
    p = fx_put64(p, ans->request_id);
    if (ans->status == FX_CACHE_BIN_OK && ans->value.len)
        memcpy(p, ans->value.ptr, ans->value.len);
    else if (ans->status == FX_CACHE_BIN_ERROR)
        put_str(p, ans->text);
    return (ssize_t)size;
}
