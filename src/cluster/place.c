/* fx_place (see place.h): etcd key names and their inverse, the JSON values
 * of the node, owner and pin keys, and weighted rendezvous hashing with
 * bounded loads. Pure functions, any thread: no state, no lock, no I/O. */
#include "cluster/place.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hostport.h"
#include "felix/error.h"

/* ---- key names ---------------------------------------------------------- */

static const char *const kind_names[] = {
    [FX_PLACE_NODES] = "nodes",   [FX_PLACE_LOAD] = "load",       [FX_PLACE_OWNERS] = "owners",
    [FX_PLACE_EPOCHS] = "epochs", [FX_PLACE_DURABLE] = "durable", [FX_PLACE_HANDOFF] = "handoff",
};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])

const char *fx_place_kind_name(fx_place_key_kind kind)
{
    return (unsigned)kind < N_KINDS ? kind_names[kind] : NULL;
}

static bool per_node(fx_place_key_kind kind)
{
    return kind == FX_PLACE_NODES || kind == FX_PLACE_LOAD;
}

/* The bytes a component keeps as they are; every other one is %XX. */
static bool plain(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
}

static const char hex[] = "0123456789ABCDEF";

/* A key under construction: |len| counts every byte asked for, so an
 * overflow is known at the end without checking each write. */
typedef struct kbuf {
    char *out;
    size_t cap;
    size_t len;
} kbuf;

static void put_ch(kbuf *k, char ch)
{
    if (k->len + 1 < k->cap)
        k->out[k->len] = ch;
    k->len++;
}

static void put_str(kbuf *k, const char *s)
{
    for (; *s != 0; s++)
        put_ch(k, *s);
}

/* Appends |s| percent-encoded; false when it is NULL, empty or longer than
 * |max| bytes. */
static bool put_enc(kbuf *k, const char *s, size_t max)
{
    if (s == NULL)
        return false;
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (plain(ch)) {
            put_ch(k, (char)ch);
        } else {
            put_ch(k, '%');
            put_ch(k, hex[ch >> 4]);
            put_ch(k, hex[ch & 15]);
        }
    }
    return true;
}

static int finish(kbuf *k)
{
    if (k->len >= k->cap) {
        if (k->cap > 0)
            k->out[0] = 0;
        return -ENAMETOOLONG;
    }
    k->out[k->len] = 0;
    return (int)k->len;
}

static bool put_prefix(kbuf *k, const char *cluster, fx_place_key_kind kind)
{
    if ((unsigned)kind >= N_KINDS)
        return false;
    put_str(k, "/felix/");
    if (!put_enc(k, cluster, FX_PLACE_ID_MAX))
        return false;
    put_ch(k, '/');
    put_str(k, kind_names[kind]);
    put_ch(k, '/');
    return true;
}

int fx_place_prefix(char *out, size_t cap, const char *cluster, fx_place_key_kind kind)
{
    kbuf k = {out, cap, 0};
    if (!put_prefix(&k, cluster, kind))
        return -EINVAL;
    return finish(&k);
}

static bool put_stream(kbuf *k, const char *t, const char *ns, const char *s)
{
    if (!put_enc(k, t, FX_PLACE_NAME_MAX))
        return false;
    put_ch(k, '/');
    if (!put_enc(k, ns, FX_PLACE_NAME_MAX))
        return false;
    put_ch(k, '/');
    return put_enc(k, s, FX_PLACE_NAME_MAX);
}

int fx_place_key(char *out, size_t cap, const char *cluster, fx_place_key_kind kind, const char *a,
                 const char *b, const char *c)
{
    kbuf k = {out, cap, 0};
    if (!put_prefix(&k, cluster, kind))
        return -EINVAL;
    if (per_node(kind)) {
        if (b != NULL || c != NULL || !put_enc(&k, a, FX_PLACE_ID_MAX))
            return -EINVAL;
    } else if (!put_stream(&k, a, b, c)) {
        return -EINVAL;
    }
    return finish(&k);
}

int fx_place_stream_key(char *out, size_t cap, const char *tenant, const char *ns,
                        const char *stream)
{
    kbuf k = {out, cap, 0};
    if (!put_stream(&k, tenant, ns, stream))
        return -EINVAL;
    return finish(&k);
}

static int unhex(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1; /* lower case is not what the encoder writes */
}

/* Decodes the component at |p| (|n| bytes, no '/') into |out| (|max| + 1
 * bytes), accepting only the encoder's own spelling. */
static bool get_enc(const char *p, size_t n, char *out, size_t max)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '%') {
            if (n - i < 3)
                return false;
            int hi = unhex(p[i + 1]), lo = unhex(p[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            ch = (unsigned char)(hi << 4 | lo);
            if (ch == 0 || plain(ch))
                return false;
            i += 2;
        } else if (!plain(ch)) {
            return false;
        }
        if (o == max)
            return false;
        out[o++] = (char)ch;
    }
    out[o] = 0;
    return o > 0;
}

int fx_place_key_parse(const char *key, size_t len, const char *cluster, fx_place_key_parts *out)
{
    if (key == NULL || out == NULL)
        return -EINVAL;
    char pre[FX_PLACE_KEY_MAX];
    kbuf k = {pre, sizeof pre, 0};
    put_str(&k, "/felix/");
    if (!put_enc(&k, cluster, FX_PLACE_ID_MAX))
        return -EINVAL;
    put_ch(&k, '/');
    int plen = finish(&k);
    if (plen < 0 || len <= (size_t)plen || memcmp(key, pre, (size_t)plen) != 0)
        return -EINVAL;
    const char *p = key + plen, *end = key + len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash == NULL)
        return -EINVAL;
    size_t wlen = (size_t)(slash - p);
    out->kind = (fx_place_key_kind)N_KINDS;
    for (size_t i = 0; i < N_KINDS; i++)
        if (strlen(kind_names[i]) == wlen && memcmp(kind_names[i], p, wlen) == 0)
            out->kind = (fx_place_key_kind)i;
    if ((unsigned)out->kind >= N_KINDS)
        return -EINVAL;
    p = slash + 1;
    char *dst[3] = {out->a, out->b, out->c};
    size_t want = per_node(out->kind) ? 1 : 3;
    size_t max = per_node(out->kind) ? FX_PLACE_ID_MAX : FX_PLACE_NAME_MAX;
    out->a[0] = out->b[0] = out->c[0] = 0;
    for (size_t i = 0; i < want; i++) {
        slash = memchr(p, '/', (size_t)(end - p));
        const char *stop = slash == NULL ? end : slash;
        /* The last component ends the key; the others end at a '/'. */
        if ((i + 1 < want) != (slash != NULL))
            return -EINVAL;
        if (!get_enc(p, (size_t)(stop - p), dst[i], max))
            return -EINVAL;
        p = stop + (slash != NULL);
    }
    return 0;
}

/* ---- values ------------------------------------------------------------- */

static bool str_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    return n > 0 && n < cap;
}

static bool addr_ok(const char *s)
{
    fx_hostport hp;
    return fx_hostport_split(s, &hp, NULL) == 0 && hp.port > 0;
}

static char *dump(json_t *o, bool ok, size_t *plen)
{
    char *s = NULL;
    if (o != NULL && ok)
        s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (s != NULL && plen != NULL)
        *plen = strlen(s);
    return s;
}

static bool set(json_t *o, const char *k, json_t *v)
{
    return o != NULL && json_object_set_new(o, k, v) == 0;
}

char *fx_place_node_encode(const fx_place_node_info *n, size_t *plen)
{
    /* Refuse what the decoder would refuse, so a value written is one every
     * broker reads. */
    if (n == NULL || !str_ok(n->addr, sizeof n->addr) || !addr_ok(n->addr) ||
        strnlen(n->internal, sizeof n->internal) == sizeof n->internal ||
        (n->internal[0] != 0 && !addr_ok(n->internal)) ||
        strnlen(n->server_name, sizeof n->server_name) == sizeof n->server_name ||
        strnlen(n->admin, sizeof n->admin) == sizeof n->admin ||
        (n->admin[0] != 0 && !addr_ok(n->admin)) || n->weight == 0 ||
        n->weight > FX_PLACE_WEIGHT_MAX)
        return NULL;
    json_t *o = json_object();
    bool ok = set(o, "addr", json_string(n->addr));
    if (ok && n->internal[0] != 0)
        ok = set(o, "internal", json_string(n->internal));
    if (ok && n->server_name[0] != 0)
        ok = set(o, "server_name", json_string(n->server_name));
    ok = ok && set(o, "weight", json_integer(n->weight)) &&
         set(o, "features", json_integer(n->features));
    if (ok && n->admin[0] != 0)
        ok = set(o, "admin", json_string(n->admin));
    return dump(o, ok, plen);
}

static const char *const owner_kinds[] = {[FX_PLACE_MEM] = "mem", [FX_PLACE_DUR] = "durable"};

char *fx_place_owner_encode(const fx_place_owner *w, size_t *plen)
{
    if (w == NULL || !str_ok(w->node, sizeof w->node) || w->epoch == 0 ||
        w->epoch > FX_PLACE_EPOCH_MAX || (unsigned)w->kind > FX_PLACE_DUR)
        return NULL;
    json_t *o = json_object();
    bool ok = set(o, "node", json_string(w->node)) && set(o, "epoch", json_integer(w->epoch)) &&
              set(o, "kind", json_string(owner_kinds[w->kind]));
    return dump(o, ok, plen);
}

char *fx_place_pin_encode(const fx_place_pin *p, size_t *plen)
{
    if (p == NULL || !str_ok(p->node, sizeof p->node))
        return NULL;
    json_t *o = json_object();
    return dump(o, set(o, "node", json_string(p->node)), plen);
}

char *fx_place_handoff_encode(const fx_place_handoff *h, size_t *plen)
{
    if (h == NULL || !str_ok(h->to, sizeof h->to) || h->epoch == 0 ||
        h->epoch > FX_PLACE_EPOCH_MAX || h->final_tail > (uint64_t)INT64_MAX)
        return NULL;
    json_t *o = json_object();
    bool ok = set(o, "to", json_string(h->to)) && set(o, "epoch", json_integer(h->epoch)) &&
              set(o, "final_tail", json_integer((json_int_t)h->final_tail));
    return dump(o, ok, plen);
}

/* Decoding: |why| formats the refusal into the caller's buffer. */
typedef struct dctx {
    char *err;
    size_t errcap;
} dctx;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
why(dctx *d, const char *fmt, ...)
{
    if (d->errcap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->errcap, fmt, ap);
        va_end(ap);
    }
    return FX_EPROTO;
}

static int load(dctx *d, const char *json, size_t len, json_t **po)
{
    if (d->errcap > 0)
        d->err[0] = 0;
    if (json == NULL)
        return why(d, "value: missing");
    json_error_t jerr;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (o == NULL) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return -ENOMEM;
        return why(d, "value: not JSON (%s at byte %d)", jerr.text, jerr.position);
    }
    if (!json_is_object(o)) {
        json_decref(o);
        return why(d, "value: must be a JSON object");
    }
    *po = o;
    return 0;
}

/* Copies string field |k| of |o| into |out| (|cap| bytes): absent leaves
 * |out| empty unless |required|. */
static int get_str(dctx *d, json_t *o, const char *k, bool required, char *out, size_t cap)
{
    json_t *v = json_object_get(o, k);
    out[0] = 0;
    if (v == NULL)
        return required ? why(d, "%s: missing", k) : 0;
    if (!json_is_string(v))
        return why(d, "%s: must be a string", k);
    size_t n = json_string_length(v);
    if (n == 0 || n >= cap || strlen(json_string_value(v)) != n)
        return why(d, "%s: must be 1 to %zu bytes without NUL", k, cap - 1);
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

static int get_addr(dctx *d, json_t *o, const char *k, bool required, char *out, size_t cap)
{
    int rv = get_str(d, o, k, required, out, cap);
    if (rv == 0 && out[0] != 0 && !addr_ok(out))
        return why(d, "%s: must be host:port or [ipv6]:port with a port from 1 to 65535", k);
    return rv;
}

/* Integer field |k| of |o| in [lo, hi] into |*out|; absent gives |dflt|
 * unless |required|. */
static int get_u32(dctx *d, json_t *o, const char *k, bool required, uint32_t dflt, uint32_t lo,
                   uint32_t hi, uint32_t *out)
{
    json_t *v = json_object_get(o, k);
    if (v == NULL) {
        *out = dflt;
        return required ? why(d, "%s: missing", k) : 0;
    }
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (!json_is_integer(v) || x < (json_int_t)lo || x > (json_int_t)hi)
        return why(d, "%s: must be an integer from %u to %u", k, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

int fx_place_node_decode(const char *json, size_t len, fx_place_node_info *out, char *err,
                         size_t errcap)
{
    dctx d = {err, errcap};
    json_t *o = NULL;
    int rv = load(&d, json, len, &o);
    if (rv != 0)
        return rv;
    memset(out, 0, sizeof *out);
    if ((rv = get_addr(&d, o, "addr", true, out->addr, sizeof out->addr)) == 0 &&
        (rv = get_addr(&d, o, "internal", false, out->internal, sizeof out->internal)) == 0 &&
        (rv = get_str(&d, o, "server_name", false, out->server_name, sizeof out->server_name)) ==
            0 &&
        (rv = get_u32(&d, o, "weight", false, FX_PLACE_WEIGHT_DEFAULT, 1, FX_PLACE_WEIGHT_MAX,
                      &out->weight)) == 0 &&
        (rv = get_u32(&d, o, "features", false, 0, 0, UINT32_MAX, &out->features)) == 0)
        rv = get_addr(&d, o, "admin", false, out->admin, sizeof out->admin);
    json_decref(o);
    return rv;
}

int fx_place_owner_decode(const char *json, size_t len, fx_place_owner *out, char *err,
                          size_t errcap)
{
    dctx d = {err, errcap};
    json_t *o = NULL;
    int rv = load(&d, json, len, &o);
    if (rv != 0)
        return rv;
    memset(out, 0, sizeof *out);
    if ((rv = get_str(&d, o, "node", true, out->node, sizeof out->node)) == 0 &&
        (rv = get_u32(&d, o, "epoch", true, 0, 1, FX_PLACE_EPOCH_MAX, &out->epoch)) == 0) {
        json_t *k = json_object_get(o, "kind");
        const char *ks = json_string_value(k); /* NULL unless a string */
        if (k == NULL)
            rv = why(&d, "kind: missing");
        else if (ks != NULL && strcmp(ks, "mem") == 0 && json_string_length(k) == 3)
            out->kind = FX_PLACE_MEM;
        else if (ks != NULL && strcmp(ks, "durable") == 0 && json_string_length(k) == 7)
            out->kind = FX_PLACE_DUR;
        else
            rv = why(&d, "kind: must be \"mem\" or \"durable\"");
    }
    json_decref(o);
    return rv;
}

int fx_place_pin_decode(const char *json, size_t len, fx_place_pin *out, char *err, size_t errcap)
{
    dctx d = {err, errcap};
    json_t *o = NULL;
    int rv = load(&d, json, len, &o);
    if (rv != 0)
        return rv;
    memset(out, 0, sizeof *out);
    rv = get_str(&d, o, "node", true, out->node, sizeof out->node);
    json_decref(o);
    return rv;
}

int fx_place_handoff_decode(const char *json, size_t len, fx_place_handoff *out, char *err,
                            size_t errcap)
{
    dctx d = {err, errcap};
    json_t *o = NULL;
    int rv = load(&d, json, len, &o);
    if (rv != 0)
        return rv;
    memset(out, 0, sizeof *out);
    if ((rv = get_str(&d, o, "to", true, out->to, sizeof out->to)) == 0 &&
        (rv = get_u32(&d, o, "epoch", true, 0, 1, FX_PLACE_EPOCH_MAX, &out->epoch)) == 0) {
        json_t *v = json_object_get(o, "final_tail");
        if (v == NULL)
            rv = why(&d, "final_tail: missing");
        else if (!json_is_integer(v) || json_integer_value(v) < 0)
            rv = why(&d, "final_tail: must be an integer from 0 to 2^63-1");
        else
            out->final_tail = (uint64_t)json_integer_value(v);
    }
    json_decref(o);
    return rv;
}

/* ---- weighted rendezvous hashing with bounded loads ---------------------- */

/* SipHash-2-4 (Aumasson and Bernstein), fed in pieces: a fixed key, so the
 * same (node, stream) hashes alike on every broker. The inputs are names
 * operators choose, not an attacker's flood, and a hash-flooded order would
 * only move streams, which the caps still bound. */
typedef struct sip {
    uint64_t v0, v1, v2, v3;
    uint64_t tail; /* the bytes not yet in a full word, little-endian */
    size_t len;    /* bytes fed in all */
} sip;

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(s)                                                                                \
    do {                                                                                           \
        (s)->v0 += (s)->v1;                                                                        \
        (s)->v1 = ROTL((s)->v1, 13);                                                               \
        (s)->v1 ^= (s)->v0;                                                                        \
        (s)->v0 = ROTL((s)->v0, 32);                                                               \
        (s)->v2 += (s)->v3;                                                                        \
        (s)->v3 = ROTL((s)->v3, 16);                                                               \
        (s)->v3 ^= (s)->v2;                                                                        \
        (s)->v0 += (s)->v3;                                                                        \
        (s)->v3 = ROTL((s)->v3, 21);                                                               \
        (s)->v3 ^= (s)->v0;                                                                        \
        (s)->v2 += (s)->v1;                                                                        \
        (s)->v1 = ROTL((s)->v1, 17);                                                               \
        (s)->v1 ^= (s)->v2;                                                                        \
        (s)->v2 = ROTL((s)->v2, 32);                                                               \
    } while (0)

static uint64_t le64(const unsigned char *p)
{
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = x << 8 | p[i];
    return x;
}

static void sip_init(sip *s, const unsigned char key[16])
{
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    s->v0 = 0x736f6d6570736575ull ^ k0;
    s->v1 = 0x646f72616e646f6dull ^ k1;
    s->v2 = 0x6c7967656e657261ull ^ k0;
    s->v3 = 0x7465646279746573ull ^ k1;
    s->tail = 0;
    s->len = 0;
}

static void sip_word(sip *s, uint64_t m)
{
    s->v3 ^= m;
    SIPROUND(s);
    SIPROUND(s);
    s->v0 ^= m;
}

static void sip_feed(sip *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        s->tail |= (uint64_t)p[i] << (8 * (s->len & 7));
        if ((++s->len & 7) == 0) {
            sip_word(s, s->tail);
            s->tail = 0;
        }
    }
}

static uint64_t sip_final(sip *s)
{
    sip_word(s, s->tail | (uint64_t)s->len << 56);
    s->v2 ^= 0xff;
    SIPROUND(s);
    SIPROUND(s);
    SIPROUND(s);
    SIPROUND(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* Exposed for the test of SipHash's published vectors only (not in place.h). */
uint64_t fx_place_siphash(const unsigned char key[16], const void *data, size_t n);
uint64_t fx_place_siphash(const unsigned char key[16], const void *data, size_t n)
{
    sip s;
    sip_init(&s, key);
    sip_feed(&s, data, n);
    return sip_final(&s);
}

static const unsigned char hrw_key[16] = "felix-place-hrw1";

uint64_t fx_place_hash(const char *id, const void *key, size_t klen)
{
    size_t idlen = strlen(id);
    unsigned char n[8];
    for (int i = 0; i < 8; i++)
        n[i] = (unsigned char)((uint64_t)idlen >> (8 * i));
    sip s;
    sip_init(&s, hrw_key);
    sip_feed(&s, n, sizeof n);
    sip_feed(&s, id, idlen);
    sip_feed(&s, key, klen);
    return sip_final(&s);
}

double fx_place_score(const char *id, const void *key, size_t klen, uint32_t weight)
{
    /* The top 53 bits plus one half, over 2^53: exactly representable, never
     * 0 nor 1, so the logarithm is finite and negative. */
    double u = ((double)(fx_place_hash(id, key, klen) >> 11) + 0.5) * 0x1p-53;
    return -(double)(weight == 0 ? 1 : weight) / log(u);
}

/* True when (|sa|, |ia|) ranks before (|sb|, |ib|). */
static bool before(double sa, const char *ia, double sb, const char *ib)
{
    if (sa != sb)
        return sa > sb;
    return strcmp(ia, ib) < 0;
}

ssize_t fx_place_order(const fx_place_node *nodes, size_t n, const void *key, size_t klen,
                       size_t *order)
{
    if (n > FX_PLACE_MAX_NODES || (n > 0 && (nodes == NULL || order == NULL)))
        return -EINVAL;
    double score[FX_PLACE_MAX_NODES];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!nodes[i].up)
            continue;
        if (nodes[i].id == NULL)
            return -EINVAL;
        double s = fx_place_score(nodes[i].id, key, klen, nodes[i].weight);
        /* Insertion: clusters have a handful of nodes. */
        size_t j = m++;
        for (; j > 0 && before(s, nodes[i].id, score[j - 1], nodes[order[j - 1]].id); j--) {
            score[j] = score[j - 1];
            order[j] = order[j - 1];
        }
        score[j] = s;
        order[j] = i;
    }
    return (ssize_t)m;
}

size_t fx_place_cap(size_t placed, size_t n_up, double factor)
{
    if (n_up == 0)
        return 0;
    /* Thousandths, so every broker gets the same integer from the same
     * setting whatever its floating point does with 1.25 x 10,001 / 3. */
    uint64_t milli = 1000;
    if (factor > 1.0)
        milli = factor >= 1e6 ? 1000000000ull : (uint64_t)llround(factor * 1000.0);
    unsigned __int128 num = (unsigned __int128)((uint64_t)placed + 1) * milli;
    unsigned __int128 den = (unsigned __int128)n_up * 1000;
    unsigned __int128 cap = (num + den - 1) / den;
    return cap > SIZE_MAX ? SIZE_MAX : (size_t)cap;
}

ssize_t fx_place_pick(const fx_place_node *nodes, size_t n, const void *key, size_t klen,
                      size_t placed, double factor)
{
    size_t order[FX_PLACE_MAX_NODES];
    ssize_t m = fx_place_order(nodes, n, key, klen, order);
    if (m <= 0)
        return m < 0 ? m : -1;
    size_t cap = fx_place_cap(placed, (size_t)m, factor);
    size_t least = order[0];
    for (ssize_t i = 0; i < m; i++) {
        const fx_place_node *p = &nodes[order[i]];
        if (p->owned < cap)
            return (ssize_t)order[i];
        if (p->owned < nodes[least].owned)
            least = order[i];
    }
    return (ssize_t)least;
}

ssize_t fx_place_plan_moves(const fx_place_node *nodes, size_t n, size_t self,
                            const void *const *keys, const size_t *klens, size_t nstreams,
                            size_t placed, double factor, ssize_t *to)
{
    if (n > FX_PLACE_MAX_NODES || self >= n || !nodes[self].up)
        return -EINVAL;
    size_t owned[FX_PLACE_MAX_NODES], order[FX_PLACE_MAX_NODES], n_up = 0;
    for (size_t i = 0; i < n; i++) {
        owned[i] = nodes[i].owned;
        n_up += nodes[i].up;
    }
    size_t cap = fx_place_cap(placed > 0 ? placed - 1 : 0, n_up, factor);
    ssize_t moves = 0;
    for (size_t k = 0; k < nstreams; k++) {
        to[k] = -1;
        ssize_t m = fx_place_order(nodes, n, keys[k], klens[k], order);
        if (m < 0)
            return m;
        /* Only the nodes before this one in the stream's order: a move
         * goes up the order, never down, so no plan ever undoes another. */
        for (ssize_t i = 0; i < m && order[i] != self; i++) {
            if (owned[order[i]] < cap) {
                to[k] = (ssize_t)order[i];
                owned[order[i]]++;
                owned[self] -= owned[self] > 0;
                moves++;
                break;
            }
        }
    }
    return moves;
}
