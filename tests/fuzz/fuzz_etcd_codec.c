/* libFuzzer target for fx_etcd's answer decoding (src/cluster/etcd_codec.c):
 * the first byte picks the answer kind and an HTTP status, the rest is the
 * body, decoded as a unary answer and, split into chunks at the second byte's
 * stride, as a watch stream whose lines are decoded as watch messages. The
 * decoders return only their documented codes, fill what they say, and leave
 * nothing allocated after the clear. Any broken promise aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cluster/etcd.h"
#include "felix/error.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kvs(const fx_etcd_kv *kvs, size_t n)
{
    CHECK(n == 0 || kvs != NULL);
    for (size_t i = 0; i < n; i++) {
        CHECK(kvs[i].key != NULL && kvs[i].key[kvs[i].key_len] == 0);
        CHECK(kvs[i].value == NULL || kvs[i].value[kvs[i].value_len] == 0);
    }
}

static void check_resp(const fx_etcd_resp *r, int depth)
{
    CHECK(depth < 4);
    check_kvs(r->kvs, r->n_kvs);
    check_kvs(r->prev_kvs, r->n_prev_kvs);
    CHECK(r->n_ops == 0 || r->ops != NULL);
    for (size_t i = 0; i < r->n_ops; i++)
        check_resp(&r->ops[i], depth + 1);
    if (r->kind == FX_ETCD_KIND_AUTH && r->rv == 0)
        CHECK(r->token != NULL);
}

static int on_line(const char *line, size_t len, void *user)
{
    CHECK(len > 0);
    fx_etcd_watch_msg m;
    int rv = fx_etcd_decode_watch_msg(line, len, &m);
    CHECK(rv == 0 || rv == FX_EPROTO || rv == FX_EREMOTE || rv == -ENOMEM);
    CHECK(rv == m.rv);
    if (rv == FX_EREMOTE)
        CHECK(m.message != NULL);
    for (size_t i = 0; i < m.n_events; i++) {
        CHECK(m.events[i].kv.key != NULL);
        CHECK(!m.events[i].has_prev || m.events[i].prev_kv.key != NULL);
    }
    fx_etcd_watch_msg_clear(&m);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fx_log_set_level(FX_LOG_ERROR);
    if (size < 2)
        return 0;
    static const int status[4] = {200, 400, 404, 503};
    fx_etcd_kind kind = (fx_etcd_kind)(data[0] % FX_ETCD_KIND_WATCH);
    int http = status[(data[0] >> 4) & 3];
    size_t stride = 1 + data[1] % 64;
    const char *body = (const char *)data + 2;
    size_t n = size - 2;
    fx_etcd_resp r;
    int rv = fx_etcd_decode_resp(kind, http, body, n, &r);
    CHECK(rv == r.rv);
    CHECK(rv == 0 || rv == FX_EPROTO || rv == FX_EREMOTE || rv == -ENOMEM);
    CHECK(rv != 0 || http == 200);
    check_resp(&r, 0);
    fx_etcd_resp_clear(&r);
    fx_etcd_lines p;
    fx_etcd_lines_init(&p, 4096);
    for (size_t off = 0; off < n; off += stride) {
        size_t k = n - off < stride ? n - off : stride;
        rv = fx_etcd_lines_feed(&p, body + off, k, on_line, NULL);
        CHECK(rv == 0 || rv == FX_ETOOBIG || rv == -ENOMEM);
        if (rv != 0)
            break;
    }
    fx_etcd_lines_deinit(&p);
    return 0;
}
