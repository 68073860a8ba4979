/* Configuration input: the value parsers (counts, sizes, durations, bools,
 * policies, addresses, stream lists) and the three layers that feed them,
 * the YAML file (libyaml's document API, whose marks give every message a
 * line and column), the FELIX_* environment and --set flags. Main thread
 * only; config.c orders the layers and checks the result. */
#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "base/grow.h"
#include "base/hostport.h"
#include "base/placement.h"
#include "felix/error.h"
#include "server/config_internal.h"

/* ---- value parsers ----------------------------------------------------- */
/* Each returns 0, or -1 with the reason written to |why|. */

struct unit {
    const char *name;
    uint64_t mult;
};

static const struct unit size_units[] = {
    {"B", 1},
    {"KiB", KiB},
    {"MiB", MiB},
    {"GiB", GiB},
    {"TiB", TiB},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
};
static const struct unit dur_units[] = {
    {"ns", 1}, {"us", US}, {"ms", MS}, {"s", SEC}, {"m", 60 * SEC}, {"h", HOUR},
};

/* Parses leading decimal digits of |s| into |*v|; |*end| gets the rest. */
static int parse_digits(const char *s, uint64_t *v, const char **end, char *why, size_t n)
{
    if (*s == '-') {
        snprintf(why, n, "negative values are not allowed");
        return -1;
    }
    if (!isdigit((unsigned char)*s)) {
        snprintf(why, n, "not a number");
        return -1;
    }
    uint64_t x = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned dg = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - dg) / 10) {
            snprintf(why, n, "number too large (overflow)");
            return -1;
        }
        x = x * 10 + dg;
    }
    *v = x;
    *end = s;
    return 0;
}

/* Parses "<digits>[ ]<unit>" where |units| lists the accepted suffixes and
 * |bare| is the multiplier of a plain number (0 = a unit is required). */
static int parse_scaled(const char *s, const struct unit *units, size_t nunits, uint64_t bare,
                        uint64_t *out, char *why, size_t n)
{
    uint64_t v;
    const char *u;
    if (parse_digits(s, &v, &u, why, n) < 0)
        return -1;
    uint64_t mult = bare;
    if (*u == ' ')
        u++;
    if (*u) {
        mult = 0;
        for (size_t i = 0; i < nunits; i++) {
            if (strcmp(u, units[i].name) == 0)
                mult = units[i].mult;
        }
        if (!mult) {
            snprintf(why, n, "unknown unit \"%.16s\"", u);
            return -1;
        }
    } else if (!mult) {
        snprintf(why, n, "needs a unit");
        return -1;
    }
    if (v && mult > UINT64_MAX / v) {
        snprintf(why, n, "number too large (overflow)");
        return -1;
    }
    *out = v * mult;
    return 0;
}

/* The multiplier of a plain number for duration key |name|: its suffix. */
static uint64_t dur_bare_unit(const char *name)
{
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, "_ms") == 0)
        return MS;
    if (n > 3 && strcmp(name + n - 3, "_us") == 0)
        return US;
    if (n > 2 && strcmp(name + n - 2, "_s") == 0)
        return SEC;
    if (n > 8 && strcmp(name + n - 8, "_seconds") == 0)
        return SEC;
    return 0;
}

/* Writes |v| in the largest unit of |k|'s type that divides it exactly: the
 * inverse of parse_scaled(), kept beside the unit tables it shares. */
void fx_config_format_number(const struct key *k, uint64_t v, char *buf, size_t n)
{
    const struct unit *units = NULL;
    size_t nu = 0;
    if (k->type == T_SIZE) {
        static const struct unit bin[] = {{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB}};
        units = bin;
        nu = 4;
    } else if (k->type == T_DUR) {
        units = dur_units;
        nu = sizeof(dur_units) / sizeof(dur_units[0]);
    }
    for (size_t i = nu; i-- > 0;) {
        if (v && v % units[i].mult == 0) {
            snprintf(buf, n, "%llu%s", (unsigned long long)(v / units[i].mult), units[i].name);
            return;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
}

static int parse_bool(const char *s, bool *out, char *why, size_t n)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    snprintf(why, n, "not a boolean (expected true/false, yes/no, on/off or 1/0)");
    return -1;
}

static int parse_enum(const struct enum_def *en, const char *s, int *out, char *why, size_t n)
{
    for (int i = 0; i < 5 && en->names[i]; i++) {
        if (strcmp(s, en->names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    if (en->alias != NULL && (*out = en->alias(s)) >= 0)
        return 0;
    if (en->refused && strcmp(s, en->refused) == 0)
        snprintf(why, n, "%s", en->refused_why);
    else
        snprintf(why, n, "unknown value; expected %s", en->expect);
    return -1;
}

static bool host_char_ok(char ch)
{
    return isalnum((unsigned char)ch) || ch == '.' || ch == '-' || ch == '_';
}

/* Accepts "host:port" (host a name or IPv4 address) and "[v6addr]:port". No
 * name is resolved here: start-up does that when it binds. */
static int parse_addr(const char *s, char *why, size_t n)
{
    fx_hostport hp;
    const char *w;
    if (fx_hostport_split(s, &hp, &w) != 0) {
        snprintf(why, n, "%s", w);
        return -1;
    }
    for (const char *p = hp.host; !hp.bracketed && *p; p++) {
        if (!host_char_ok(*p)) {
            snprintf(why, n, "invalid character in host (IPv6 addresses go in [ ])");
            return -1;
        }
    }
    return 0;
}

int fx_config_check_addr(const char *s, char *why, size_t n)
{
    return parse_addr(s, why, n);
}

static bool name_char_ok(char ch)
{
    return isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-';
}

/* Copies the |len|-byte name at |s| into |dst| if it is 1..255 of
 * [A-Za-z0-9._-]. */
static int copy_name(char *dst, const char *s, size_t len)
{
    if (len == 0 || len >= FX_CONFIG_NAME_MAX)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!name_char_ok(s[i]))
            return -1;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

/* Parses one "tenant/namespace/|what|" item of |len| bytes. */
static int parse_triple(const char *s, size_t len, fx_config_stream *st, const char *what,
                        char *why, size_t n)
{
    const char *a = memchr(s, '/', len);
    const char *b = a ? memchr(a + 1, '/', len - (size_t)(a + 1 - s)) : NULL;
    if (!b || copy_name(st->tenant, s, (size_t)(a - s)) < 0 ||
        copy_name(st->ns, a + 1, (size_t)(b - a - 1)) < 0 ||
        copy_name(st->stream, b + 1, len - (size_t)(b + 1 - s)) < 0) {
        snprintf(why, n, "\"%.*s\" is not tenant/namespace/%s (each 1-255 of A-Z a-z 0-9 . _ -)",
                 (int)(len > 80 ? 80 : len), s, what);
        return -1;
    }
    return 0;
}

/* Parses one "tenant/namespace/stream" item of |len| bytes. */
static int parse_stream(const char *s, size_t len, fx_config_stream *st, char *why, size_t n)
{
    return parse_triple(s, len, st, "stream", why, n);
}

/* Copies group name |s| (|len| bytes) into |dst|: 1-128 bytes, no '/' and
 * no control character (the broker checks the UTF-8). */
static int copy_group(char *dst, const char *s, size_t len, char *why, size_t n)
{
    if (len == 0 || len >= FX_CONFIG_GROUP_MAX) {
        snprintf(why, n, "group name \"%.*s\" is %s (allowed: 1 to %d bytes)",
                 (int)(len > 80 ? 80 : len), s, len ? "too long" : "empty",
                 FX_CONFIG_GROUP_MAX - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '/' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
            snprintf(why, n, "group name \"%.*s\" contains %s", (int)(len > 80 ? 80 : len), s,
                     s[i] == '/' ? "'/'" : "a control character");
            return -1;
        }
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

/* Parses the start suffix |s| (|len| bytes, after the '@') into |g|. */
static int parse_group_start(const char *s, size_t len, fx_config_group *g, char *why, size_t n)
{
    static const char *const names[] = {"all", "new", "last"};
    char buf[32], reason[64];
    for (size_t i = 0; i < 3; i++) {
        if (len == strlen(names[i]) && memcmp(s, names[i], len) == 0) {
            g->start = (fx_config_group_start)i;
            return 0;
        }
    }
    const char *end;
    if (len > 0 && len < sizeof(buf)) {
        memcpy(buf, s, len);
        buf[len] = '\0';
        if (parse_digits(buf, &g->offset, &end, reason, sizeof(reason)) == 0 && *end == '\0') {
            g->start = FX_CONFIG_GROUP_START_OFFSET;
            return 0;
        }
    }
    snprintf(why, n, "group start \"@%.*s\" is not @all, @new, @last or @<offset>",
             (int)(len > 40 ? 40 : len), s);
    return -1;
}

/* Parses one "tenant/namespace/stream/group[@start]" item of |len| bytes.
 * The start follows the last '@', so a group name holding '@' needs one. */
static int parse_group(const char *s, size_t len, fx_config_group *g, char *why, size_t n)
{
    memset(g, 0, sizeof(*g));
    size_t body = len;
    while (body > 0 && s[body - 1] != '@')
        body--;
    if (body > 0 && parse_group_start(s + body, len - body, g, why, n) < 0)
        return -1;
    body = body > 0 ? body - 1 : len;
    const char *slash = NULL, *from = s; /* the third '/' ends the stream */
    for (int i = 0; i < 3; i++) {
        slash = memchr(from, '/', body - (size_t)(from - s));
        if (!slash)
            break;
        from = slash + 1;
    }
    if (!slash || parse_stream(s, (size_t)(slash - s), &g->s, why, n) < 0) {
        snprintf(why, n,
                 "\"%.*s\" is not tenant/namespace/stream/group[@start] (tenant, namespace and "
                 "stream each 1-255 of A-Z a-z 0-9 . _ -)",
                 (int)(len > 80 ? 80 : len), s);
        return -1;
    }
    return copy_group(g->group, slash + 1, body - (size_t)(slash + 1 - s), why, n);
}

/* A list under construction, of streams or of groups; |items| is owned
 * until stored in a config. */
struct slist {
    bool groups; /* items are fx_config_group, else fx_config_stream */
    bool caches; /* items are caches (fx_config_stream) */
    void *items;
    size_t n, cap;
};

static bool same_stream(const fx_config_stream *a, const fx_config_stream *b)
{
    return !strcmp(a->tenant, b->tenant) && !strcmp(a->ns, b->ns) && !strcmp(a->stream, b->stream);
}

static int slist_add_stream(struct slist *l, const char *s, size_t len, char *why, size_t n)
{
    fx_config_stream *items = l->items, *st = &items[l->n];
    const char *what = l->caches ? "cache" : "stream";
    const char *at = l->caches ? memchr(s, '@', len) : NULL;
    st->durable = false;
    if (at != NULL) {
        /* "tenant/namespace/cache@durable": its writes go to a log. */
        size_t rest = len - (size_t)(at + 1 - s);
        if (rest != strlen("durable") || memcmp(at + 1, "durable", rest) != 0) {
            snprintf(why, n, "\"%.*s\": the only option after '@' is durable",
                     (int)(len > 80 ? 80 : len), s);
            return -1;
        }
        st->durable = true;
        len = (size_t)(at - s);
    }
    if (parse_triple(s, len, st, what, why, n) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (same_stream(&items[i], st)) {
            snprintf(why, n, "%s %s/%s/%s is listed twice", what, st->tenant, st->ns, st->stream);
            return -1;
        }
    }
    return 0;
}

static int slist_add_group(struct slist *l, const char *s, size_t len, char *why, size_t n)
{
    fx_config_group *items = l->items, *g = &items[l->n];
    if (parse_group(s, len, g, why, n) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (same_stream(&items[i].s, &g->s) && !strcmp(items[i].group, g->group)) {
            snprintf(why, n, "group %s/%s/%s/%s is listed twice", g->s.tenant, g->s.ns, g->s.stream,
                     g->group);
            return -1;
        }
    }
    return 0;
}

static int slist_add(struct slist *l, const char *s, size_t len, char *why, size_t n)
{
    size_t max = l->groups   ? FX_CONFIG_MAX_GROUPS
                 : l->caches ? FX_CONFIG_MAX_CACHES
                             : FX_CONFIG_MAX_STREAMS;
    if (l->n == max) {
        snprintf(why, n, "more than %zu %s", max,
                 l->groups   ? "groups"
                 : l->caches ? "caches"
                             : "streams");
        return -1;
    }
    size_t size = l->groups ? sizeof(fx_config_group) : sizeof(fx_config_stream);
    void *p = fx_grow(l->items, &l->cap, l->n + 1, size, 16);
    if (!p)
        return -ENOMEM;
    l->items = p;
    int rv = l->groups ? slist_add_group(l, s, len, why, n) : slist_add_stream(l, s, len, why, n);
    if (rv == 0)
        l->n++;
    return rv;
}

/* Parses a comma-separated list (environment and --set form). */
static int parse_stream_csv(const char *s, struct slist *l, char *why, size_t n)
{
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        int rv = slist_add(l, s, len, why, n);
        if (rv)
            return rv;
        s += len + (comma ? 1 : 0);
    }
    return 0;
}

/* ---- storing values ---------------------------------------------------- */

static int check_bounds(const struct key *k, uint64_t v, char *why, size_t n)
{
    if (v >= k->min && v <= k->max)
        return 0;
    char lo[32], hi[32];
    fx_config_format_number(k, k->min, lo, sizeof(lo));
    fx_config_format_number(k, k->max, hi, sizeof(hi));
    if (v == 0 && k->min > 0)
        snprintf(why, n, "must not be 0 (allowed: %s to %s)", lo, hi);
    else
        snprintf(why, n, "out of range (allowed: %s to %s)", lo, hi);
    return -1;
}

static int parse_number(const struct key *k, const char *s, uint64_t *v, char *why, size_t n)
{
    const char *end;
    switch (k->type) {
    case T_SIZE:
        if (parse_scaled(s, size_units, sizeof(size_units) / sizeof(size_units[0]), 1, v, why, n) <
            0)
            return -1;
        break;
    case T_DUR:
        if (parse_scaled(s, dur_units, sizeof(dur_units) / sizeof(dur_units[0]),
                         dur_bare_unit(k->name), v, why, n) < 0)
            return -1;
        break;
    default:
        if (parse_digits(s, v, &end, why, n) < 0)
            return -1;
        if (*end) {
            snprintf(why, n, "not a whole number");
            return -1;
        }
    }
    return check_bounds(k, *v, why, n);
}

static int store_workers(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    uint64_t v;
    if (strcmp(s, "auto") == 0) {
        c->workers = fx_placement_auto_workers(sysconf(_SC_NPROCESSORS_ONLN));
        c->workers_auto = true;
        return 0;
    }
    if (strcmp(s, "0") == 0) {
        snprintf(why, n, "0 workers is not allowed; write auto for one per online CPU but one");
        return -1;
    }
    if (parse_number(k, s, &v, why, n) < 0)
        return -1;
    c->workers = (uint32_t)v;
    c->workers_auto = false;
    return 0;
}

static int store_string(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    size_t len = strlen(s);
    if (len >= k->size) {
        snprintf(why, n, "longer than %zu bytes", k->size - 1);
        return -1;
    }
    if (len < k->min) {
        snprintf(why, n, "must not be empty");
        return -1;
    }
    if (k->type == T_ADDR && parse_addr(s, why, n) < 0)
        return -1;
    memcpy(fx_config_field(c, k), s, len + 1);
    return 0;
}

static void store_streams(fx_config *c, struct slist *l)
{
    if (l->caches) {
        free(c->caches);
        c->caches = l->items;
        c->ncaches = l->n;
    } else if (l->groups) {
        free(c->groups);
        c->groups = l->items;
        c->ngroups = l->n;
    } else {
        free(c->streams);
        c->streams = l->items;
        c->nstreams = l->n;
    }
    l->items = NULL;
    l->n = l->cap = 0;
}

/* Parses text |s| for key |k| and stores it in |c|. Returns 0, -1 (reason in
 * |why|) or -ENOMEM. T_WARN / T_REJECT keys are handled by the callers. */
int fx_config_store_text(fx_config *c, const struct key *k, const char *s, char *why, size_t n)
{
    uint64_t v;
    int e, rv;
    bool b;
    struct slist l = {0};
    switch (k->type) {
    case T_BOOL:
        if (parse_bool(s, &b, why, n) < 0)
            return -1;
        *(bool *)fx_config_field(c, k) = b;
        return 0;
    case T_U32:
    case T_SIZE:
    case T_DUR:
        if (parse_number(k, s, &v, why, n) < 0)
            return -1;
        if (k->type == T_U32)
            *(uint32_t *)fx_config_field(c, k) = (uint32_t)v;
        else
            *(uint64_t *)fx_config_field(c, k) = v;
        return 0;
    case T_WORKERS:
        return store_workers(c, k, s, why, n);
    case T_ENUM:
        if (parse_enum(k->en, s, &e, why, n) < 0)
            return -1;
        memcpy(fx_config_field(c, k), &e, sizeof(e));
        return 0;
    case T_STR:
    case T_ADDR:
        return store_string(c, k, s, why, n);
    case T_STREAMS:
    case T_GROUPS:
    case T_CACHES:
        l.groups = k->type == T_GROUPS;
        l.caches = k->type == T_CACHES;
        rv = parse_stream_csv(s, &l, why, n);
        if (rv == 0)
            store_streams(c, &l);
        free(l.items);
        return rv;
    case T_WARN:
    case T_REJECT:
        break;
    }
    assert(!"unreachable key type");
    return -1;
}

/* ---- applying one value ------------------------------------------------ */

/* Applies text |s| to key |i| from origin |o|: warns for T_WARN keys, fails
 * for T_REJECT keys and bad values, records the origin otherwise. */
static int apply(fx_config *c, int i, const char *s, const fx_config_origin *o, fx_config_diag *d)
{
    const struct key *k = &fx_config_keys[i];
    const char *spelled = o->from == FX_CONFIG_FROM_ENV ? o->name : (o->name ? o->name : k->name);
    char where[FX_CONFIG_PATH_MAX + 64], why[256];
    fx_config_format_where(c, o, where, sizeof(where));
    /* "env FELIX_X is ignored" reads better than repeating the name. */
    if (o->from == FX_CONFIG_FROM_ENV)
        spelled = "";
    const char *sep = *spelled ? ": " : "";
    if (k->type == T_WARN) {
        fx_config_warn(d, "%s%s%s is ignored: %s", where, sep, spelled, k->help);
        return 0;
    }
    if (k->type == T_REJECT)
        return fx_config_fail(d, "%s%s%s is not supported: %s", where, sep, spelled, k->help);
    int rv = fx_config_store_text(c, k, s, why, sizeof(why));
    if (rv == -ENOMEM)
        return rv;
    if (rv < 0)
        return fx_config_fail(d, "%s: %s = \"%.80s\": %s", where, k->name, s, why);
    c->origin[i] = *o;
    return 0;
}

/* ---- YAML -------------------------------------------------------------- */

static bool scalar_is_null(const yaml_node_t *nd)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (nd->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    for (size_t i = 0; i < 5; i++) {
        if (strcmp((const char *)nd->data.scalar.value, nulls[i]) == 0)
            return true;
    }
    return false;
}

static const char *node_kind(const yaml_node_t *nd)
{
    return nd->type == YAML_MAPPING_NODE ? "a mapping" : "a sequence";
}

static void set_file_origin(fx_config_origin *o, const yaml_node_t *nd, const char *alias)
{
    *o = (fx_config_origin){.from = FX_CONFIG_FROM_FILE,
                            .line = (uint32_t)nd->start_mark.line + 1,
                            .col = (uint32_t)nd->start_mark.column + 1,
                            .name = alias};
}

/* The `streams:` or `groups:` sequence |val| of key |i|. */
static int yaml_streams(fx_config *c, int i, yaml_document_t *doc, yaml_node_t *val,
                        const fx_config_origin *o, fx_config_diag *d)
{
    struct slist l = {.groups = fx_config_keys[i].type == T_GROUPS,
                      .caches = fx_config_keys[i].type == T_CACHES};
    const char *key = fx_config_keys[i].name;
    const char *shape = l.groups   ? "tenant/namespace/stream/group[@start]"
                        : l.caches ? "tenant/namespace/cache"
                                   : "tenant/namespace/stream";
    char why[320];
    int rv = 0;
    if (val->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = val->data.sequence.items.start;
             rv == 0 && it < val->data.sequence.items.top; it++) {
            yaml_node_t *item = yaml_document_get_node(doc, *it);
            size_t line = item->start_mark.line + 1, col = item->start_mark.column + 1;
            if (item->type != YAML_SCALAR_NODE) {
                rv = fx_config_fail(d, "%s:%zu:%zu: %s: an item is %s; expected \"%s\"", c->file,
                                    line, col, key, node_kind(item), shape);
                break;
            }
            rv = slist_add(&l, (const char *)item->data.scalar.value, item->data.scalar.length, why,
                           sizeof(why));
            if (rv == -1)
                rv = fx_config_fail(d, "%s:%zu:%zu: %s: %s", c->file, line, col, key, why);
        }
    } else if (!(val->type == YAML_SCALAR_NODE && scalar_is_null(val))) {
        rv = fx_config_fail(d, "%s:%u:%u: %s: expected a sequence of \"%s\" strings", c->file,
                            o->line, o->col, key, shape);
    }
    if (rv == 0) {
        store_streams(c, &l);
        c->origin[i] = *o;
    }
    free(l.items);
    return rv;
}

/* A key the registry does not know: a cache_* or durable_* key of the
 * original warns, anything else fails. |kl|:|kc| is its position. */
static int yaml_unknown_key(const fx_config *c, const char *name, size_t kl, size_t kc,
                            fx_config_diag *d)
{
    for (size_t p = 0; p < FX_CONFIG_NPREFIX_WARN; p++) {
        const char *prefix = fx_config_prefix_warn[p][0];
        if (strncmp(name, prefix, strlen(prefix)) == 0) {
            fx_config_warn(d, "%s:%zu:%zu: %s is ignored: %s", c->file, kl, kc, name,
                           fx_config_prefix_warn[p][1]);
            return 0;
        }
    }
    return fx_config_fail(d, "%s:%zu:%zu: unknown key \"%.80s\" (see docs/configuration.md)",
                          c->file, kl, kc, name);
}

/* Applies value node |vn| of scalar key |i|, positioned at |o|. */
static int yaml_value(fx_config *c, int i, const yaml_node_t *vn, const fx_config_origin *o,
                      fx_config_diag *d)
{
    const struct key *k = &fx_config_keys[i];
    if (vn->type != YAML_SCALAR_NODE)
        return fx_config_fail(d, "%s:%u:%u: %s: expected a single value, found %s", c->file,
                              o->line, o->col, k->name, node_kind(vn));
    const char *s = (const char *)vn->data.scalar.value;
    if (memchr(s, '\0', vn->data.scalar.length))
        return fx_config_fail(d, "%s:%u:%u: %s: value contains a NUL byte", c->file, o->line,
                              o->col, k->name);
    if (scalar_is_null(vn)) {
        if (k->type != T_STR)
            return fx_config_fail(d, "%s:%u:%u: %s has no value", c->file, o->line, o->col,
                                  k->name);
        s = "";
    }
    return apply(c, i, s, o, d);
}

/* Applies one `key: value` pair of the root mapping. |seen| holds, per key,
 * the line where the file first set it (0 = not yet). */
static int yaml_pair(fx_config *c, yaml_document_t *doc, yaml_node_pair_t *pair, uint32_t *seen,
                     fx_config_diag *d)
{
    yaml_node_t *kn = yaml_document_get_node(doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(doc, pair->value);
    size_t kl = kn->start_mark.line + 1, kc = kn->start_mark.column + 1;
    if (kn->type != YAML_SCALAR_NODE)
        return fx_config_fail(d, "%s:%zu:%zu: a key is %s; keys must be plain names", c->file, kl,
                              kc, node_kind(kn));
    const char *name = (const char *)kn->data.scalar.value;
    int i = fx_config_key_index(name);
    if (i < 0)
        return yaml_unknown_key(c, name, kl, kc, d);
    const struct key *k = &fx_config_keys[i];
    if (seen[i])
        return fx_config_fail(d, "%s:%zu:%zu: %s is set twice (first at line %u)", c->file, kl, kc,
                              k->name, seen[i]);
    seen[i] = (uint32_t)kl;
    fx_config_origin o;
    const char *alias = strcmp(name, k->name) ? k->alias : NULL;
    if (k->type == T_WARN || k->type == T_REJECT) {
        set_file_origin(&o, kn, alias); /* the key itself is the problem */
        return apply(c, i, "", &o, d);
    }
    set_file_origin(&o, vn, alias);
    if (k->type == T_STREAMS || k->type == T_GROUPS || k->type == T_CACHES)
        return yaml_streams(c, i, doc, vn, &o, d);
    return yaml_value(c, i, vn, &o, d);
}

static int yaml_parse_error(fx_config *c, yaml_parser_t *p, fx_config_diag *d)
{
    if (p->error == YAML_MEMORY_ERROR)
        return -ENOMEM;
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (!p->context)
        return fx_config_fail(d, "%s:%zu:%zu: YAML syntax error: %s", c->file,
                              p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
    return fx_config_fail(d, "%s:%zu:%zu: YAML syntax error: %s %s (started at %zu:%zu)", c->file,
                          p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                          p->context_mark.line + 1, p->context_mark.column + 1);
}

static int yaml_root(fx_config *c, yaml_document_t *doc, fx_config_diag *d)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root)
        return 0; /* an empty file sets nothing */
    if (root->type == YAML_SCALAR_NODE && scalar_is_null(root))
        return 0;
    if (root->type != YAML_MAPPING_NODE)
        return fx_config_fail(d, "%s:%zu:%zu: the file must be a mapping of key: value lines",
                              c->file, root->start_mark.line + 1, root->start_mark.column + 1);
    uint32_t seen[FX_CONFIG_MAX_KEYS] = {0};
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
         pr++) {
        int rv = yaml_pair(c, doc, pr, seen, d);
        if (rv)
            return rv;
    }
    return 0;
}

static int load_yaml_text(fx_config *c, const unsigned char *text, size_t len, fx_config_diag *d)
{
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p))
        return -ENOMEM;
    yaml_parser_set_input_string(&p, text, len);
    int rv;
    if (!yaml_parser_load(&p, &doc)) {
        rv = yaml_parse_error(c, &p, d);
        goto err_parser;
    }
    rv = yaml_root(c, &doc, d);
    yaml_document_delete(&doc);
    if (rv)
        goto err_parser;
    /* A second document is refused: which one wins would be a guess. */
    if (!yaml_parser_load(&p, &doc)) {
        rv = yaml_parse_error(c, &p, d);
        goto err_parser;
    }
    if (yaml_document_get_root_node(&doc))
        rv = fx_config_fail(d, "%s: more than one YAML document (---); put every key in one",
                            c->file);
    yaml_document_delete(&doc);
err_parser:
    yaml_parser_delete(&p);
    return rv;
}

/* Reads the whole file at |path| (at most FX_CONFIG_MAX_FILE_BYTES). */
static int read_file(const char *path, unsigned char **pbuf, size_t *plen, fx_config_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fx_config_fail(d, "cannot open config file %s: %s", path, strerror(errno));
    struct stat st;
    int rv = 0;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > FX_CONFIG_MAX_FILE_BYTES) {
        rv = fx_config_fail(d, "config file %s is not a regular file of at most %d bytes", path,
                            FX_CONFIG_MAX_FILE_BYTES);
        goto err_close;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rv = -ENOMEM;
        goto err_close;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rv = fx_config_fail(d, "cannot read config file %s: %s", path,
                                r ? strerror(errno) : "truncated");
            free(buf);
            goto err_close;
        }
        got += (size_t)r;
    }
    *pbuf = buf;
    *plen = got;
err_close:
    close(fd);
    return rv;
}

int fx_config_load_file_layer(fx_config *c, const fx_config_src *src, const char *path,
                              fx_config_diag *d)
{
    if (src->text) {
        snprintf(c->file, sizeof(c->file), "%s", src->text_name ? src->text_name : "<text>");
        return load_yaml_text(c, (const unsigned char *)src->text, strlen(src->text), d);
    }
    if (!path)
        return 0;
    if (strlen(path) >= sizeof(c->file))
        return fx_config_fail(d, "config file name longer than %d bytes", FX_CONFIG_PATH_MAX - 1);
    snprintf(c->file, sizeof(c->file), "%s", path);
    unsigned char *buf = NULL;
    size_t len = 0;
    int rv = read_file(path, &buf, &len, d);
    if (rv)
        return rv;
    rv = load_yaml_text(c, buf, len, d);
    free(buf);
    return rv;
}

/* ---- environment and flags --------------------------------------------- */

/* Returns the index of the key read from environment variable |name| (|n|
 * bytes, not NUL-terminated), and its registry spelling in |*penv|. */
static int env_index(const char *name, size_t n, const char **penv)
{
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        for (size_t j = 0; j < 3 && fx_config_keys[i].env[j]; j++) {
            if (strlen(fx_config_keys[i].env[j]) == n &&
                memcmp(fx_config_keys[i].env[j], name, n) == 0) {
                *penv = fx_config_keys[i].env[j];
                return (int)i;
            }
        }
    }
    return -1;
}

static int env_var(fx_config *c, const char *e, const char **set_by, fx_config_diag *d)
{
    const char *eq = strchr(e, '=');
    if (!eq)
        return 0;
    size_t n = (size_t)(eq - e);
    const char *env;
    int i = env_index(e, n, &env);
    if (i < 0) {
        if (n == strlen("FELIX_BROKER_CONFIG") && memcmp(e, "FELIX_BROKER_CONFIG", n) == 0)
            return 0;
        if (strncmp(e, "FELIX_CACHE_", 12) == 0 || strncmp(e, "FELIX_DURABLE_", 14) == 0)
            fx_config_warn(d, "env %.*s is ignored: %s", (int)n, e,
                           e[6] == 'C' ? "Felix-C has no cache"
                                       : "not a setting of Felix-C's durable storage");
        else
            fx_config_warn(d, "env %.*s is not a felix-broker setting; ignored", (int)n, e);
        return 0;
    }
    if (set_by[i])
        return fx_config_fail(
            d, "env %s and env %s are both set; they are the same setting (%s): unset one",
            set_by[i], env, fx_config_keys[i].name);
    set_by[i] = env;
    fx_config_origin o = {.from = FX_CONFIG_FROM_ENV, .name = env};
    return apply(c, i, eq + 1, &o, d);
}

int fx_config_load_env_layer(fx_config *c, char *const *envp, fx_config_diag *d)
{
    const char *set_by[FX_CONFIG_MAX_KEYS] = {0};
    for (size_t j = 0; envp && envp[j]; j++) {
        if (strncmp(envp[j], "FELIX_", 6) != 0)
            continue;
        int rv = env_var(c, envp[j], set_by, d);
        if (rv)
            return rv;
    }
    return 0;
}

int fx_config_load_flag(fx_config *c, const char *set, fx_config_diag *d)
{
    const char *eq = strchr(set, '=');
    char name[128];
    if (!eq || eq == set)
        return fx_config_fail(d, "flag --set %.80s: expected key=value", set);
    if ((size_t)(eq - set) >= sizeof(name))
        return fx_config_fail(d, "flag --set %.80s...: unknown key", set);
    memcpy(name, set, (size_t)(eq - set));
    name[eq - set] = '\0';
    int i = fx_config_key_index(name);
    if (i < 0)
        return fx_config_fail(d, "flag --set %.80s: unknown key \"%s\"", set, name);
    fx_config_origin o = {.from = FX_CONFIG_FROM_FLAG,
                          .name = strcmp(name, fx_config_keys[i].name) ? fx_config_keys[i].alias
                                                                       : NULL};
    return apply(c, i, eq + 1, &o, d);
}
