/* libFuzzer target for fx_place (src/cluster/place.c): the first byte picks
 * what the rest is fed to: a key parsed for cluster "felix" or "c/1", a node,
 * owner or pin value decoded, or a stream key ordered over four nodes. What
 * parses must be what the encoders write (a parsed key encodes back to the
 * same bytes, a decoded value encodes and decodes to the same struct), the
 * decoders return only their documented codes with a terminated error text,
 * and an order is a permutation of the nodes up. Any broken promise aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/place.h"
#include "felix/error.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_key(const char *key, size_t n, const char *cluster)
{
    fx_place_key_parts p;
    int rv = fx_place_key_parse(key, n, cluster, &p);
    CHECK(rv == 0 || rv == -EINVAL);
    if (rv != 0)
        return;
    char again[FX_PLACE_KEY_MAX];
    bool node = p.kind == FX_PLACE_NODES || p.kind == FX_PLACE_LOAD;
    int len = fx_place_key(again, sizeof again, cluster, p.kind, p.a, node ? NULL : p.b,
                           node ? NULL : p.c);
    CHECK(len > 0 && (size_t)len == n && memcmp(again, key, n) == 0);
}

static void check_err(int rv, const char *err)
{
    CHECK(rv == 0 || rv == FX_EPROTO || rv == -ENOMEM);
    CHECK(memchr(err, 0, FX_PLACE_ERR_MAX) != NULL);
    if (rv == FX_EPROTO)
        CHECK(err[0] != 0 && strchr(err, ':') != NULL);
}

static void check_node(const char *json, size_t n)
{
    char err[FX_PLACE_ERR_MAX];
    fx_place_node_info a, b;
    int rv = fx_place_node_decode(json, n, &a, err, sizeof err);
    check_err(rv, err);
    if (rv != 0)
        return;
    size_t len = 0;
    char *s = fx_place_node_encode(&a, &len);
    CHECK(s != NULL && len == strlen(s));
    CHECK(fx_place_node_decode(s, len, &b, err, sizeof err) == 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(s);
}

static void check_owner(const char *json, size_t n)
{
    char err[FX_PLACE_ERR_MAX];
    fx_place_owner a, b;
    int rv = fx_place_owner_decode(json, n, &a, err, sizeof err);
    check_err(rv, err);
    if (rv != 0)
        return;
    CHECK(a.epoch >= 1 && a.epoch <= FX_PLACE_EPOCH_MAX);
    size_t len = 0;
    char *s = fx_place_owner_encode(&a, &len);
    CHECK(s != NULL && len == strlen(s));
    CHECK(fx_place_owner_decode(s, len, &b, err, sizeof err) == 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(s);
}

static void check_pin(const char *json, size_t n)
{
    char err[FX_PLACE_ERR_MAX];
    fx_place_pin a, b;
    int rv = fx_place_pin_decode(json, n, &a, err, sizeof err);
    check_err(rv, err);
    if (rv != 0)
        return;
    size_t len = 0;
    char *s = fx_place_pin_encode(&a, &len);
    CHECK(s != NULL && len == strlen(s));
    CHECK(fx_place_pin_decode(s, len, &b, err, sizeof err) == 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(s);
}

static void check_order(uint8_t sel, const char *key, size_t n)
{
    fx_place_node nodes[4] = {{"n1", 100, 0, (sel & 1) != 0},
                              {"n2", 200, 3, (sel & 2) != 0},
                              {"n3", 1, 1, (sel & 4) != 0},
                              {"node/4", 10000, 2, (sel & 8) != 0}};
    size_t order[4];
    ssize_t m = fx_place_order(nodes, 4, key, n, order);
    ssize_t up = (sel & 1) + ((sel >> 1) & 1) + ((sel >> 2) & 1) + ((sel >> 3) & 1);
    CHECK(m == up);
    bool seen[4] = {false};
    for (ssize_t i = 0; i < m; i++) {
        CHECK(order[i] < 4 && nodes[order[i]].up && !seen[order[i]]);
        seen[order[i]] = true;
    }
    ssize_t p = fx_place_pick(nodes, 4, key, n, 6, 1.25);
    CHECK(m == 0 ? p == -1 : (p >= 0 && p < 4 && nodes[p].up));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 5) {
    case 0:
        check_key(body, n, (data[0] & 0x80) ? "c/1" : "felix");
        break;
    case 1:
        check_node(body, n);
        break;
    case 2:
        check_owner(body, n);
        break;
    case 3:
        check_pin(body, n);
        break;
    default:
        check_order(data[0] >> 3, body, n);
        break;
    }
    return 0;
}
