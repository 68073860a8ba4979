/* fx_etcd codec: request bodies and answer decoding for etcd 3.4's JSON
 * gateway, as pure functions on bytes (any thread). The gateway's rules
 * (design/cluster.md 1.3): bytes are padded standard base64, int64 fields are
 * strings, zero values are left out of answers (a missing field is 0, false,
 * "" or []), streamed answers are one JSON object per line wrapped in
 * "result", and errors come in two shapes. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/etcd.h"
#include "felix/error.h"
#include "wire/base64.h"

/* ---- encoding ------------------------------------------------------------ */

static size_t blen(const void *p, size_t n)
{
    return (n == 0 && p != NULL) ? strlen(p) : n;
}

/* Sets |obj[name]| to the base64 of |n| bytes at |p|; false on no memory. */
static bool set_b64(json_t *obj, const char *name, const void *p, size_t n)
{
    size_t cap = FX_BASE64_ENCODED_LEN(n, FX_BASE64_STD);
    char *s = malloc(cap + 1);
    if (s == NULL)
        return false;
    size_t w = fx_base64_encode(s, p, n, FX_BASE64_STD);
    s[w] = '\0';
    int rv = json_object_set_new(obj, name, json_stringn(s, w));
    free(s);
    return rv == 0;
}

/* int64 fields go as strings, as the gateway itself writes them. */
static bool set_i64(json_t *obj, const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    return json_object_set_new(obj, name, json_string(s)) == 0;
}

size_t fx_etcd_prefix_end(const void *key, size_t n, uint8_t *end, size_t cap)
{
    const uint8_t *k = key;
    if (cap < n + 1)
        return 0;
    memcpy(end, k, n);
    for (size_t i = n; i > 0; i--) {
        if (end[i - 1] < 0xff) {
            end[i - 1]++;
            return i;
        }
    }
    end[0] = 0; /* every byte 0xff: to the end of the keyspace */
    return 1;
}

/* Writes the key and range_end of a range, delete or watch. */
static bool set_range(json_t *o, const void *key, size_t key_len, bool prefix, const void *re,
                      size_t re_len)
{
    size_t kl = blen(key, key_len);
    if (!set_b64(o, "key", key, kl))
        return false;
    if (prefix) {
        uint8_t *end = malloc(kl + 1);
        if (end == NULL)
            return false;
        size_t el = fx_etcd_prefix_end(key, kl, end, kl + 1);
        bool ok = set_b64(o, "range_end", end, el);
        free(end);
        return ok;
    }
    if (re != NULL)
        return set_b64(o, "range_end", re, blen(re, re_len));
    return true;
}

static json_t *op_json(const fx_etcd_op *op)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    bool ok = true;
    switch (op->kind) {
    case FX_ETCD_RANGE:
        ok = set_range(o, op->key, op->key_len, op->prefix, op->range_end, op->range_end_len);
        if (ok && op->limit != 0)
            ok = set_i64(o, "limit", op->limit);
        if (ok && op->revision != 0)
            ok = set_i64(o, "revision", op->revision);
        if (ok && op->serializable)
            ok = json_object_set_new(o, "serializable", json_true()) == 0;
        if (ok && op->keys_only)
            ok = json_object_set_new(o, "keys_only", json_true()) == 0;
        if (ok && op->count_only)
            ok = json_object_set_new(o, "count_only", json_true()) == 0;
        break;
    case FX_ETCD_PUT:
        ok = set_b64(o, "key", op->key, blen(op->key, op->key_len));
        if (ok && op->value != NULL && blen(op->value, op->value_len) > 0)
            ok = set_b64(o, "value", op->value, blen(op->value, op->value_len));
        if (ok && op->lease != 0)
            ok = set_i64(o, "lease", op->lease);
        if (ok && op->prev_kv)
            ok = json_object_set_new(o, "prev_kv", json_true()) == 0;
        break;
    case FX_ETCD_DELETE:
        ok = set_range(o, op->key, op->key_len, op->prefix, op->range_end, op->range_end_len);
        if (ok && op->prev_kv)
            ok = json_object_set_new(o, "prev_kv", json_true()) == 0;
        break;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump(json_t *o)
{
    if (o == NULL)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

char *fx_etcd_encode_op(const fx_etcd_op *op)
{
    return dump(op_json(op));
}

static const char *const cmp_target[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
static const char *const cmp_field[] = {"version", "create_revision", "mod_revision", "value",
                                        "lease"};
static const char *const cmp_result[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};

static json_t *cmp_json(const fx_etcd_cmp *c)
{
    json_t *o = json_object();
    if (o == NULL || (unsigned)c->target > FX_ETCD_CMP_LEASE ||
        (unsigned)c->result > FX_ETCD_NOT_EQUAL) {
        json_decref(o);
        return NULL;
    }
    bool ok = set_b64(o, "key", c->key, blen(c->key, c->key_len)) &&
              json_object_set_new(o, "target", json_string(cmp_target[c->target])) == 0 &&
              json_object_set_new(o, "result", json_string(cmp_result[c->result])) == 0;
    if (ok && c->target == FX_ETCD_CMP_VALUE)
        ok = set_b64(o, "value", c->value, c->value == NULL ? 0 : blen(c->value, c->value_len));
    else if (ok)
        ok = set_i64(o, cmp_field[c->target], c->number);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static bool add_ops(json_t *txn, const char *name, const fx_etcd_op *ops, size_t n)
{
    if (n == 0)
        return true;
    json_t *a = json_array();
    if (a == NULL || json_object_set_new(txn, name, a) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        static const char *const wrap[] = {"request_range", "request_put", "request_delete_range"};
        if ((unsigned)ops[i].kind > FX_ETCD_DELETE)
            return false;
        json_t *w = json_object();
        json_t *o = op_json(&ops[i]);
        if (w == NULL || o == NULL || json_object_set_new(w, wrap[ops[i].kind], o) != 0 ||
            json_array_append_new(a, w) != 0) {
            json_decref(w);
            return false;
        }
    }
    return true;
}

char *fx_etcd_encode_txn(const fx_etcd_txn_req *t)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    if (t->n_cmp > 0) {
        json_t *a = json_array();
        if (a == NULL || json_object_set_new(o, "compare", a) != 0)
            goto err;
        for (size_t i = 0; i < t->n_cmp; i++)
            if (json_array_append_new(a, cmp_json(&t->cmp[i])) != 0)
                goto err;
    }
    if (!add_ops(o, "success", t->success, t->n_success) ||
        !add_ops(o, "failure", t->failure, t->n_failure))
        goto err;
    return dump(o);
err:
    json_decref(o);
    return NULL;
}

char *fx_etcd_encode_watch_create(const fx_etcd_watch_opts *w)
{
    json_t *o = json_object();
    json_t *c = json_object();
    if (o == NULL || c == NULL || json_object_set_new(o, "create_request", c) != 0) {
        json_decref(o);
        return NULL;
    }
    bool ok = set_range(c, w->key, w->key_len, w->prefix, w->range_end, w->range_end_len);
    if (ok && w->start_revision > 0)
        ok = set_i64(c, "start_revision", w->start_revision);
    if (ok && w->progress_notify)
        ok = json_object_set_new(c, "progress_notify", json_true()) == 0;
    if (ok && w->prev_kv)
        ok = json_object_set_new(c, "prev_kv", json_true()) == 0;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return dump(o);
}

/* ---- decoding ------------------------------------------------------------ */

/* An int64 field: a decimal string (the gateway's form) or a JSON integer;
 * absent is 0. Returns false for anything else. */
static bool get_i64(const json_t *obj, const char *name, int64_t *out)
{
    const json_t *v = json_object_get(obj, name);
    *out = 0;
    if (v == NULL)
        return true;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > 20)
        return false;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || end != s + n || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
        return false;
    *out = x;
    return true;
}

static bool get_bool(const json_t *obj, const char *name, bool *out)
{
    const json_t *v = json_object_get(obj, name);
    *out = false;
    if (v == NULL)
        return true;
    if (!json_is_boolean(v))
        return false;
    *out = json_is_true(v);
    return true;
}

/* Decodes base64 field |name| into a malloc'd NUL-terminated copy; absent is
 * the empty string. 0, FX_EPROTO or -ENOMEM. */
static int get_bytes(const json_t *obj, const char *name, uint8_t **out, size_t *len)
{
    const json_t *v = json_object_get(obj, name);
    *out = NULL;
    *len = 0;
    const char *s = "";
    size_t n = 0;
    if (v != NULL) {
        if (!json_is_string(v))
            return FX_EPROTO;
        s = json_string_value(v);
        n = json_string_length(v);
    }
    size_t cap = FX_BASE64_DECODE_ROOM(n) + 1;
    uint8_t *b = malloc(cap);
    if (b == NULL)
        return -ENOMEM;
    size_t w = 0;
    if (n > 0 && fx_base64_decode(s, n, FX_BASE64_STD, b, cap, &w) != 0) {
        free(b);
        return FX_EPROTO;
    }
    b[w] = '\0';
    *out = b;
    *len = w;
    return 0;
}

static void kv_clear(fx_etcd_kv *kv)
{
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

static int kv_decode(const json_t *o, fx_etcd_kv *kv)
{
    memset(kv, 0, sizeof(*kv));
    if (!json_is_object(o))
        return FX_EPROTO;
    int rv = get_bytes(o, "key", &kv->key, &kv->key_len);
    if (rv == 0)
        rv = get_bytes(o, "value", &kv->value, &kv->value_len);
    if (rv == 0 && !(get_i64(o, "create_revision", &kv->create_revision) &&
                     get_i64(o, "mod_revision", &kv->mod_revision) &&
                     get_i64(o, "version", &kv->version) && get_i64(o, "lease", &kv->lease)))
        rv = FX_EPROTO;
    if (rv != 0)
        kv_clear(kv);
    return rv;
}

/* Decodes the array field |name| of kvs (absent: none). */
static int kvs_decode(const json_t *obj, const char *name, fx_etcd_kv **out, size_t *n)
{
    const json_t *a = json_object_get(obj, name);
    *out = NULL;
    *n = 0;
    if (a == NULL)
        return 0;
    if (!json_is_array(a))
        return FX_EPROTO;
    size_t m = json_array_size(a);
    if (m == 0)
        return 0;
    fx_etcd_kv *kvs = calloc(m, sizeof(*kvs));
    if (kvs == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m; i++) {
        int rv = kv_decode(json_array_get(a, i), &kvs[i]);
        if (rv != 0) {
            for (size_t j = 0; j < i; j++)
                kv_clear(&kvs[j]);
            free(kvs);
            return rv;
        }
    }
    *out = kvs;
    *n = m;
    return 0;
}

static void kvs_free(fx_etcd_kv *kvs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kv_clear(&kvs[i]);
    free(kvs);
}

void fx_etcd_resp_clear(fx_etcd_resp *r)
{
    if (r == NULL)
        return;
    free(r->message);
    kvs_free(r->kvs, r->n_kvs);
    kvs_free(r->prev_kvs, r->n_prev_kvs);
    kvs_free(r->lease_keys, r->n_lease_keys);
    for (size_t i = 0; i < r->n_ops; i++)
        fx_etcd_resp_clear(&r->ops[i]);
    free(r->ops);
    free(r->token);
    fx_etcd_kind k = r->kind;
    memset(r, 0, sizeof(*r));
    r->kind = k;
}

/* The two error shapes: unary {"error":"msg","message":"msg","code":N} and
 * streamed {"error":{"grpc_code":N,"http_code":H,"message":"msg",...}}.
 * Returns true (and fills |code|, |*msg|) when |o| is one of them. */
static bool error_shape(const json_t *o, int *code, char **msg)
{
    const json_t *e = json_object_get(o, "error");
    if (e == NULL)
        return false;
    const char *m = NULL;
    int64_t c = 0;
    if (json_is_object(e)) {
        if (!get_i64(e, "grpc_code", &c))
            c = 0;
        m = json_string_value(json_object_get(e, "message"));
    } else if (json_is_string(e)) {
        if (!get_i64(o, "code", &c))
            c = 0;
        m = json_string_value(json_object_get(o, "message"));
        if (m == NULL)
            m = json_string_value(e);
    } else {
        return false;
    }
    *code = (int)c;
    *msg = strdup(m != NULL ? m : "etcd error");
    return true;
}

static int header_rev(const json_t *o, int64_t *rev)
{
    const json_t *h = json_object_get(o, "header");
    *rev = 0;
    if (h == NULL)
        return 0;
    if (!json_is_object(h) || !get_i64(h, "revision", rev))
        return FX_EPROTO;
    return 0;
}

static int decode_body(fx_etcd_kind kind, const json_t *o, fx_etcd_resp *r);

static int decode_txn(const json_t *o, fx_etcd_resp *r)
{
    if (!get_bool(o, "succeeded", &r->succeeded))
        return FX_EPROTO;
    const json_t *a = json_object_get(o, "responses");
    if (a == NULL)
        return 0;
    if (!json_is_array(a))
        return FX_EPROTO;
    size_t m = json_array_size(a);
    if (m == 0)
        return 0;
    r->ops = calloc(m, sizeof(*r->ops));
    if (r->ops == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m; i++) {
        const json_t *w = json_array_get(a, i);
        static const struct {
            const char *name;
            fx_etcd_kind kind;
        } kinds[] = {{"response_range", FX_ETCD_KIND_RANGE},
                     {"response_put", FX_ETCD_KIND_PUT},
                     {"response_delete_range", FX_ETCD_KIND_DELETE},
                     {"response_txn", FX_ETCD_KIND_TXN}};
        const json_t *body = NULL;
        fx_etcd_kind k = FX_ETCD_KIND_RANGE;
        for (size_t j = 0; j < sizeof(kinds) / sizeof(kinds[0]) && body == NULL; j++) {
            body = json_object_get(w, kinds[j].name);
            k = kinds[j].kind;
        }
        r->n_ops = i + 1;
        r->ops[i].kind = k;
        if (body == NULL || !json_is_object(body))
            return FX_EPROTO;
        int rv = decode_body(k, body, &r->ops[i]);
        if (rv != 0)
            return rv;
    }
    return 0;
}

static int decode_body(fx_etcd_kind kind, const json_t *o, fx_etcd_resp *r)
{
    int rv = header_rev(o, &r->revision);
    if (rv != 0)
        return rv;
    switch (kind) {
    case FX_ETCD_KIND_RANGE:
        rv = kvs_decode(o, "kvs", &r->kvs, &r->n_kvs);
        if (rv == 0 && !(get_i64(o, "count", &r->count) && get_bool(o, "more", &r->more)))
            rv = FX_EPROTO;
        return rv;
    case FX_ETCD_KIND_PUT: {
        const json_t *p = json_object_get(o, "prev_kv");
        if (p == NULL)
            return 0;
        r->prev_kvs = calloc(1, sizeof(*r->prev_kvs));
        if (r->prev_kvs == NULL)
            return -ENOMEM;
        rv = kv_decode(p, r->prev_kvs);
        if (rv == 0)
            r->n_prev_kvs = 1;
        return rv;
    }
    case FX_ETCD_KIND_DELETE:
        rv = kvs_decode(o, "prev_kvs", &r->prev_kvs, &r->n_prev_kvs);
        if (rv == 0 && !get_i64(o, "deleted", &r->deleted))
            rv = FX_EPROTO;
        return rv;
    case FX_ETCD_KIND_TXN:
        return decode_txn(o, r);
    case FX_ETCD_KIND_LEASE_GRANT:
        if (!get_i64(o, "ID", &r->lease_id) || !get_i64(o, "TTL", &r->ttl))
            return FX_EPROTO;
        r->granted_ttl = r->ttl;
        return 0;
    case FX_ETCD_KIND_LEASE_KEEPALIVE:
        if (!get_i64(o, "ID", &r->lease_id) || !get_i64(o, "TTL", &r->ttl))
            return FX_EPROTO;
        /* A renewal of a lease etcd no longer has answers 200 without TTL. */
        r->lease_lost = r->ttl <= 0;
        return 0;
    case FX_ETCD_KIND_LEASE_REVOKE:
        return 0;
    case FX_ETCD_KIND_LEASE_TTL: {
        if (!get_i64(o, "ID", &r->lease_id) || !get_i64(o, "TTL", &r->ttl) ||
            !get_i64(o, "grantedTTL", &r->granted_ttl))
            return FX_EPROTO;
        r->lease_lost = r->ttl < 0;
        const json_t *a = json_object_get(o, "keys");
        if (a == NULL)
            return 0;
        if (!json_is_array(a))
            return FX_EPROTO;
        size_t m = json_array_size(a);
        if (m == 0)
            return 0;
        r->lease_keys = calloc(m, sizeof(*r->lease_keys));
        if (r->lease_keys == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < m; i++) {
            json_t *w = json_pack("{sO}", "key", json_array_get(a, i));
            if (w == NULL)
                return -ENOMEM;
            rv = get_bytes(w, "key", &r->lease_keys[i].key, &r->lease_keys[i].key_len);
            json_decref(w);
            if (rv != 0)
                return rv;
            r->n_lease_keys = i + 1;
        }
        return 0;
    }
    case FX_ETCD_KIND_AUTH: {
        const char *t = json_string_value(json_object_get(o, "token"));
        if (t == NULL)
            return FX_EPROTO;
        r->token = strdup(t);
        return r->token == NULL ? -ENOMEM : 0;
    }
    case FX_ETCD_KIND_WATCH: /* streams go through fx_etcd_decode_watch_msg */
    case FX_ETCD_KIND_COUNT_:
        break;
    }
    return FX_EPROTO;
}

int fx_etcd_decode_resp(fx_etcd_kind kind, int http_status, const char *body, size_t n,
                        fx_etcd_resp *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->http_status = http_status;
    json_error_t jerr;
    /* A streamed answer (keepalive) is one object and a newline; an error
     * body may be followed by nothing else we need (the trailer is HTTP's). */
    json_t *o = json_loadb(body, n, JSON_DISABLE_EOF_CHECK, &jerr);
    if (o == NULL || !json_is_object(o)) {
        json_decref(o);
        if (http_status != 200) {
            r->rv = FX_EREMOTE;
            char m[64];
            snprintf(m, sizeof(m), "HTTP %d", http_status);
            r->message = strdup(m);
        } else {
            r->rv = FX_EPROTO;
        }
        return r->rv;
    }
    int code = 0;
    char *msg = NULL;
    if (error_shape(o, &code, &msg)) {
        r->rv = msg == NULL ? -ENOMEM : FX_EREMOTE;
        r->grpc_code = code;
        r->message = msg;
        json_decref(o);
        return r->rv;
    }
    if (http_status != 200) {
        r->rv = FX_EREMOTE;
        char m[64];
        snprintf(m, sizeof(m), "HTTP %d", http_status);
        r->message = strdup(m);
        json_decref(o);
        return r->rv;
    }
    const json_t *res = json_object_get(o, "result");
    int rv = decode_body(kind, json_is_object(res) ? res : o, r);
    json_decref(o);
    if (rv != 0) {
        fx_etcd_resp_clear(r);
        r->http_status = http_status;
        r->rv = rv;
    }
    return r->rv;
}

/* ---- streams ------------------------------------------------------------- */

void fx_etcd_lines_init(fx_etcd_lines *p, size_t max)
{
    memset(p, 0, sizeof(*p));
    p->max = max;
}

void fx_etcd_lines_deinit(fx_etcd_lines *p)
{
    free(p->buf);
    memset(p, 0, sizeof(*p));
}

static int lines_append(fx_etcd_lines *p, const char *d, size_t n)
{
    if (p->len + n > p->max)
        return FX_ETOOBIG;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (b == NULL)
            return -ENOMEM;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, d, n);
    p->len += n;
    return 0;
}

int fx_etcd_lines_feed(fx_etcd_lines *p, const char *data, size_t n,
                       int (*on_line)(const char *line, size_t len, void *user), void *user)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        if (nl == NULL)
            return lines_append(p, data, n);
        size_t k = (size_t)(nl - data);
        const char *line = data;
        size_t len = k;
        if (p->len > 0) {
            int rv = lines_append(p, data, k);
            if (rv != 0)
                return rv;
            line = p->buf;
            len = p->len;
        } else if (k > p->max) {
            return FX_ETOOBIG;
        }
        data += k + 1;
        n -= k + 1;
        /* Tolerate \r\n and blank lines: only objects matter. */
        if (len > 0 && line[len - 1] == '\r')
            len--;
        int rv = len > 0 ? on_line(line, len, user) : 0;
        p->len = 0;
        if (rv != 0)
            return rv;
    }
    return 0;
}

void fx_etcd_watch_msg_clear(fx_etcd_watch_msg *m)
{
    if (m == NULL)
        return;
    free(m->message);
    for (size_t i = 0; i < m->n_events; i++) {
        kv_clear(&m->events[i].kv);
        kv_clear(&m->events[i].prev_kv);
    }
    free(m->events);
    memset(m, 0, sizeof(*m));
}

int fx_etcd_decode_watch_msg(const char *line, size_t n, fx_etcd_watch_msg *m)
{
    memset(m, 0, sizeof(*m));
    json_error_t jerr;
    json_t *o = json_loadb(line, n, 0, &jerr);
    if (o == NULL || !json_is_object(o)) {
        json_decref(o);
        return m->rv = FX_EPROTO;
    }
    int code = 0;
    char *msg = NULL;
    if (error_shape(o, &code, &msg)) {
        m->rv = msg == NULL ? -ENOMEM : FX_EREMOTE;
        m->grpc_code = code;
        m->message = msg;
        json_decref(o);
        return m->rv;
    }
    const json_t *r = json_object_get(o, "result");
    int rv = FX_EPROTO;
    if (!json_is_object(r) || header_rev(r, &m->revision) != 0 ||
        !get_i64(r, "watch_id", &m->watch_id) || !get_bool(r, "created", &m->created) ||
        !get_bool(r, "canceled", &m->canceled) ||
        !get_i64(r, "compact_revision", &m->compact_revision))
        goto out;
    const char *reason = json_string_value(json_object_get(r, "cancel_reason"));
    if (reason != NULL && (m->message = strdup(reason)) == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    const json_t *a = json_object_get(r, "events");
    if (a != NULL) {
        if (!json_is_array(a)) {
            rv = FX_EPROTO;
            goto out;
        }
        size_t k = json_array_size(a);
        if (k > 0 && (m->events = calloc(k, sizeof(*m->events))) == NULL) {
            rv = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < k; i++) {
            const json_t *e = json_array_get(a, i);
            fx_etcd_event *ev = &m->events[i];
            m->n_events = i + 1;
            const json_t *t = json_object_get(e, "type");
            /* PUT is enum 0, so a put event has no "type". */
            if (t != NULL && !(json_is_string(t) && (strcmp(json_string_value(t), "DELETE") == 0 ||
                                                     strcmp(json_string_value(t), "PUT") == 0))) {
                rv = FX_EPROTO;
                goto out;
            }
            ev->is_delete = t != NULL && strcmp(json_string_value(t), "DELETE") == 0;
            if ((rv = kv_decode(json_object_get(e, "kv"), &ev->kv)) != 0)
                goto out;
            const json_t *p = json_object_get(e, "prev_kv");
            if (p != NULL) {
                if ((rv = kv_decode(p, &ev->prev_kv)) != 0)
                    goto out;
                ev->has_prev = true;
            }
        }
    }
    rv = 0;
out:
    json_decref(o);
    if (rv != 0) {
        fx_etcd_watch_msg_clear(m);
        m->rv = rv;
    }
    return m->rv;
}
