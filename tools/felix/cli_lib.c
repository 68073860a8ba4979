/* The pure layer of the felix CLI (see cli_lib.h): everything here takes
 * its inputs as arguments and returns text or values, so the unit tests in
 * tests/unit/test_cli.c can compile this file in and check it without a
 * broker. Any thread. */
#include "cli_lib.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/grow.h"

#ifndef FX_VERSION
#define FX_VERSION "dev"
#endif

/* ---- growable text buffer ------------------------------------------------ */

static int buf_reserve(fx_cli_buf *b, size_t extra)
{
    if (b->oom)
        return -ENOMEM;
    if (extra > SIZE_MAX / 2 - b->len - 1) {
        b->oom = true;
        return -ENOMEM;
    }
    char *p = fx_grow(b->p, &b->cap, b->len + extra + 1, 1, 64);
    if (p == NULL) {
        b->oom = true;
        return -ENOMEM;
    }
    b->p = p;
    return 0;
}

int fx_cli_buf_add(fx_cli_buf *b, const void *s, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -ENOMEM;
    if (n > 0)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int fx_cli_buf_printf(fx_cli_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if (buf_reserve(b, (size_t)n) != 0)
        return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void fx_cli_buf_reset(fx_cli_buf *b)
{
    b->len = 0;
    if (b->p != NULL)
        b->p[0] = '\0';
}

void fx_cli_buf_free(fx_cli_buf *b)
{
    free(b->p);
    *b = (fx_cli_buf){0};
}

static int seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* ---- option parsing --------------------------------------------------------- */

static const fx_cli_opt *opt_find(const fx_cli_opt *opts, const char *name, size_t len)
{
    for (const fx_cli_opt *o = opts; o->name != NULL; o++) {
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    }
    return NULL;
}

static int long_opt(fx_cli_args *a, const char *w, const fx_cli_opt *opts, int *id,
                    const char **val, char *err, size_t errlen)
{
    const char *name = w + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const fx_cli_opt *o = opt_find(opts, name, len);
    if (o == NULL)
        return seterr(err, errlen, "unknown option --%.*s", (int)len, name);
    *id = o->id;
    *val = NULL;
    if (o->has_arg == FX_CLI_NUM_ARG) {
        uint64_t n;
        if (eq != NULL)
            *val = eq + 1;
        else if (a->i < a->argc && !a->only_positional &&
                 fx_cli_parse_u64(a->argv[a->i], UINT64_MAX, &n) == 0)
            *val = a->argv[a->i++];
        return FX_CLI_ARG_OPT;
    }
    if (!o->has_arg) {
        if (eq != NULL)
            return seterr(err, errlen, "option --%s takes no value", o->name);
        return FX_CLI_ARG_OPT;
    }
    if (eq != NULL) {
        *val = eq + 1;
    } else if (a->i < a->argc) {
        *val = a->argv[a->i++];
    } else {
        return seterr(err, errlen, "option --%s needs a value", o->name);
    }
    return FX_CLI_ARG_OPT;
}

int fx_cli_args_next(fx_cli_args *a, const fx_cli_opt *opts, int *id, const char **val, char *err,
                     size_t errlen)
{
    while (a->i < a->argc) {
        const char *w = a->argv[a->i++];
        if (a->only_positional || w[0] != '-' || w[1] == '\0') {
            *val = w;
            return FX_CLI_ARG_POS;
        }
        if (strcmp(w, "--") == 0) {
            a->only_positional = true;
            continue;
        }
        if (w[1] == '-')
            return long_opt(a, w, opts, id, val, err, errlen);
        if (strcmp(w, "-h") == 0 && opt_find(opts, "help", 4) != NULL)
            return long_opt(a, "--help", opts, id, val, err, errlen);
        return seterr(err, errlen, "unknown option %s (options are long: --name)", w);
    }
    return FX_CLI_ARG_END;
}

int fx_cli_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL;
    uint64_t v = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*p - '0');
        if (v > (max - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int fx_cli_parse_size(const char *s, uint64_t max, uint64_t *out)
{
    if (s == NULL)
        return -EINVAL;
    size_t len = strlen(s);
    unsigned shift = 0;
    if (len > 1) {
        switch (s[len - 1]) {
        case 'K':
        case 'k':
            shift = 10;
            break;
        case 'M':
        case 'm':
            shift = 20;
            break;
        case 'G':
        case 'g':
            shift = 30;
            break;
        default:
            break;
        }
    }
    char num[32];
    size_t nlen = shift ? len - 1 : len;
    if (nlen == 0 || nlen >= sizeof(num))
        return -EINVAL;
    memcpy(num, s, nlen);
    num[nlen] = '\0';
    uint64_t v;
    if (fx_cli_parse_u64(num, max >> shift, &v) != 0)
        return -EINVAL;
    *out = v << shift;
    return 0;
}

int fx_cli_parse_rate(const char *s, double *out)
{
    if (s == NULL || *s == '\0' || *s == '-' || *s == '+' || *s == ' ')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v <= 0 || v > 1e9)
        return -EINVAL;
    *out = v;
    return 0;
}

int fx_cli_parse_ack(const char *s, fx_ack *out)
{
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "none") == 0)
        *out = FX_ACK_NONE;
    else if (strcmp(s, "per_message") == 0 || strcmp(s, "per-message") == 0)
        *out = FX_ACK_PER_MESSAGE;
    else if (strcmp(s, "per_batch") == 0 || strcmp(s, "per-batch") == 0)
        *out = FX_ACK_PER_BATCH;
    else
        return -EINVAL;
    return 0;
}

const char *fx_cli_ack_name(fx_ack ack)
{
    switch (ack) {
    case FX_ACK_PER_MESSAGE:
        return "per_message";
    case FX_ACK_PER_BATCH:
        return "per_batch";
    case FX_ACK_DEFAULT:
    case FX_ACK_NONE:
        return "none";
    }
    return "?";
}

int fx_cli_parse_start(const char *s, fx_start *out)
{
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "earliest") == 0) {
        *out = (fx_start){.kind = FX_START_EARLIEST};
        return 0;
    }
    if (strcmp(s, "latest") == 0) {
        *out = (fx_start){.kind = FX_START_LATEST};
        return 0;
    }
    uint64_t off;
    if (fx_cli_parse_u64(s, UINT64_MAX, &off) != 0)
        return -EINVAL;
    *out = (fx_start){.kind = FX_START_OFFSET, .offset = off};
    return 0;
}

/* ---- stream paths -------------------------------------------------------------- */

static int path_segment(const char *seg, size_t len, const char *what, char *dst, char *err,
                        size_t errlen)
{
    if (len == 0)
        return seterr(err, errlen, "empty %s in stream path (want TENANT/NS/STREAM)", what);
    if (len > FX_CLI_NAME_MAX)
        return seterr(err, errlen, "%s in stream path longer than %d bytes", what, FX_CLI_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)seg[i];
        if (ch < 0x20 || ch == 0x7f)
            return seterr(err, errlen, "%s in stream path contains a control byte", what);
    }
    memcpy(dst, seg, len);
    dst[len] = '\0';
    return 0;
}

int fx_cli_path_parse(const char *s, fx_cli_path *out, char *err, size_t errlen)
{
    static const char *const what[3] = {"tenant", "namespace", "stream"};
    char *dst[3] = {out->tenant, out->ns, out->stream};
    if (s == NULL)
        return seterr(err, errlen, "missing stream path TENANT/NS/STREAM");
    const char *p = s;
    for (int k = 0; k < 3; k++) {
        const char *slash = strchr(p, '/');
        if (k < 2 && slash == NULL)
            return seterr(err, errlen, "stream path '%s' has %d segment(s); want TENANT/NS/STREAM",
                          s, k + 1);
        if (k == 2 && slash != NULL)
            return seterr(err, errlen,
                          "stream path '%s' has more than 3 segments; want TENANT/NS/STREAM", s);
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        int rv = path_segment(p, len, what[k], dst[k], err, errlen);
        if (rv != 0)
            return rv;
        p += len + 1;
    }
    return 0;
}

/* ---- common connection options ------------------------------------------------ */

static const char *env_get(fx_cli_getenv_fn env, const char *name)
{
    const char *v = env(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

static int parse_bool(const char *s, bool *out)
{
    if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0 || strcmp(s, "yes") == 0)
        *out = true;
    else if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0 || strcmp(s, "no") == 0)
        *out = false;
    else
        return -EINVAL;
    return 0;
}

static int parse_timeout(const char *s, int *out)
{
    uint64_t v;
    if (fx_cli_parse_u64(s, 3600000, &v) != 0 || v == 0)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

int fx_cli_common_init(fx_cli_common *c, fx_cli_getenv_fn env, char *err, size_t errlen)
{
    *c = (fx_cli_common){
        .server = "127.0.0.1:5000",
        .server_name = NULL, /* libfelix: the host part of server */
        .tenant = "t1",
        .token = "",
        .admin = "127.0.0.1:8080",
        .timeout_ms = 5000,
    };
    const char *v;
    if ((v = env_get(env, "FELIX_SERVER")) != NULL)
        c->server = v;
    if ((v = env_get(env, "FELIX_SERVER_NAME")) != NULL)
        c->server_name = v;
    if ((v = env_get(env, "FELIX_TENANT")) == NULL)
        v = env_get(env, "FELIX_AUTH_TENANT");
    if (v != NULL) {
        c->tenant = v;
        c->tenant_set = true;
    }
    if ((v = env_get(env, "FELIX_TOKEN")) == NULL)
        v = env_get(env, "FELIX_AUTH_TOKEN");
    if (v != NULL)
        c->token = v;
    c->ca_file = env_get(env, "FELIX_CA");
    c->pin = env_get(env, "FELIX_PIN");
    if ((v = env_get(env, "FELIX_ADMIN")) != NULL)
        c->admin = v;
    c->admin_token = env_get(env, "FELIX_ADMIN_TOKEN");
    if ((v = env_get(env, "FELIX_INSECURE")) != NULL && parse_bool(v, &c->insecure) != 0)
        return seterr(err, errlen, "FELIX_INSECURE: expected 1 or 0, got '%s'", v);
    if ((v = env_get(env, "FELIX_CONNECT_TIMEOUT_MS")) != NULL && parse_timeout(v, &c->timeout_ms))
        return seterr(err, errlen, "FELIX_CONNECT_TIMEOUT_MS: expected milliseconds, got '%s'", v);
    return 0;
}

int fx_cli_common_apply(fx_cli_common *c, int id, const char *val, char *err, size_t errlen)
{
    switch (id) {
    case FX_CLI_OPT_SERVER:
        c->server = val;
        return 1;
    case FX_CLI_OPT_SERVER_NAME:
        c->server_name = val;
        return 1;
    case FX_CLI_OPT_TENANT:
        if (*val == '\0' || strchr(val, '/') != NULL)
            return seterr(err, errlen, "--tenant: expected a tenant name, got '%s'", val);
        c->tenant = val;
        c->tenant_set = true;
        return 1;
    case FX_CLI_OPT_TOKEN:
        c->token = val;
        c->token_flag = true;
        return 1;
    case FX_CLI_OPT_TOKEN_FILE:
        c->token_file = val;
        return 1;
    case FX_CLI_OPT_ADMIN_TOKEN_FILE:
        c->admin_token_file = val;
        return 1;
    case FX_CLI_OPT_CA:
        c->ca_file = val;
        return 1;
    case FX_CLI_OPT_PIN:
        c->pin = val;
        return 1;
    case FX_CLI_OPT_INSECURE:
        c->insecure = true;
        return 1;
    case FX_CLI_OPT_ADMIN:
        c->admin = val;
        return 1;
    case FX_CLI_OPT_ADMIN_TOKEN:
        c->admin_token = val;
        c->admin_token_flag = true;
        return 1;
    case FX_CLI_OPT_CONNECT_TIMEOUT:
        if (parse_timeout(val, &c->timeout_ms) != 0)
            return seterr(err, errlen, "--connect-timeout-ms: expected 1..3600000, got '%s'", val);
        return 1;
    default:
        return 0;
    }
}

/* A pin is 32 bytes of hex, optionally with ':' between digit pairs (the
 * forms the broker and openssl print). */
static bool pin_valid(const char *s)
{
    size_t digits = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p == ':')
            continue;
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return false;
        digits++;
    }
    return digits == 64;
}

/* Drops trailing blanks and line ends of |p| (|*n| bytes). */
static void trim_end(const char *p, size_t *n)
{
    while (*n > 0 &&
           (p[*n - 1] == '\n' || p[*n - 1] == '\r' || p[*n - 1] == ' ' || p[*n - 1] == '\t'))
        (*n)--;
}

int fx_cli_read_secret(const char *path, const char *what, char *out, size_t cap, char *err,
                       size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        int e = errno;
        seterr(err, errlen, "%s %s: %s", what, path, strerror(e));
        return -e;
    }
    /* One byte more than fits tells a secret that is too long. */
    size_t n = fread(out, 1, cap, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) {
        explicit_bzero(out, cap); /* what was read of the secret */
        return seterr(err, errlen, "%s %s: read error", what, path);
    }
    trim_end(out, &n);
    if (n >= cap) {
        explicit_bzero(out, cap);
        return seterr(err, errlen, "%s %s: longer than %zu bytes", what, path, cap - 1);
    }
    out[n] = '\0';
    if (n == 0)
        return seterr(err, errlen, "%s %s: the file is empty", what, path);
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f) {
            explicit_bzero(out, cap);
            return seterr(err, errlen,
                          "%s %s: holds a line break or control byte inside; put the secret "
                          "alone on one line",
                          what, path);
        }
    }
    return 0;
}

int fx_cli_common_finish(fx_cli_common *c, char *err, size_t errlen)
{
    if (c->token_file != NULL && c->token_flag)
        return seterr(err, errlen, "--token and --token-file: give one of them");
    if (c->admin_token_file != NULL && c->admin_token_flag)
        return seterr(err, errlen, "--admin-token and --admin-token-file: give one of them");
    int rv;
    if (c->token_file != NULL) {
        rv = fx_cli_read_secret(c->token_file, "--token-file", c->token_buf, sizeof(c->token_buf),
                                err, errlen);
        if (rv != 0)
            return rv;
        c->token = c->token_buf;
    }
    if (c->admin_token_file != NULL) {
        rv = fx_cli_read_secret(c->admin_token_file, "--admin-token-file", c->admin_token_buf,
                                sizeof(c->admin_token_buf), err, errlen);
        if (rv != 0)
            return rv;
        c->admin_token = c->admin_token_buf;
    }
    return 0;
}

int fx_cli_common_check(fx_cli_common *c, const fx_cli_path *path, char *err, size_t errlen)
{
    int ways = (c->ca_file != NULL) + (c->pin != NULL) + (c->insecure ? 1 : 0);
    if (ways == 0)
        return seterr(err, errlen,
                      "no way to trust the broker: pass --pin SHA256 (felix-broker prints "
                      "'TLS certificate SHA-256 <hex>' at start), --ca FILE or --insecure "
                      "(development only), or set FELIX_PIN, FELIX_CA or FELIX_INSECURE=1");
    if (c->insecure && ways > 1)
        return seterr(err, errlen, "--insecure cannot be combined with --pin or --ca");
    if (c->pin != NULL && c->ca_file != NULL)
        return seterr(err, errlen,
                      "--pin and --ca (or FELIX_PIN and FELIX_CA) cannot be combined: each "
                      "would decide alone; trust the broker by its pin or by a CA, not both");
    if (c->pin != NULL && !pin_valid(c->pin))
        return seterr(err, errlen, "--pin: expected 64 hex digits (SHA-256), got '%s'", c->pin);
    if (path == NULL)
        return 0;
    if (c->tenant_set && strcmp(c->tenant, path->tenant) != 0)
        return seterr(err, errlen,
                      "tenant '%s' in the stream path differs from --tenant/FELIX_TENANT '%s'",
                      path->tenant, c->tenant);
    c->tenant = path->tenant;
    return 0;
}

int fx_cli_admin_url(const char *admin, const char *suffix, char *out, size_t outlen)
{
    if (admin == NULL || *admin == '\0')
        return -EINVAL;
    bool has_scheme = strncmp(admin, "http://", 7) == 0 || strncmp(admin, "https://", 8) == 0;
    size_t alen = strlen(admin);
    while (alen > 0 && admin[alen - 1] == '/')
        alen--;
    int n = snprintf(out, outlen, "%s%.*s%s", has_scheme ? "" : "http://", (int)alen, admin,
                     suffix != NULL ? suffix : "");
    if (n < 0 || (size_t)n >= outlen)
        return -EINVAL;
    return 0;
}

/* ---- consumer groups (felix groups) --------------------------------------------- */

int fx_cli_group_check(const char *group, char *err, size_t errlen)
{
    size_t len = group != NULL ? strlen(group) : 0;
    if (len == 0)
        return seterr(err, errlen, "missing GROUP");
    if (len > FX_CLI_GROUP_MAX)
        return seterr(err, errlen, "group name longer than %d bytes", FX_CLI_GROUP_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)group[i];
        if (ch < 0x20 || ch == 0x7f)
            return seterr(err, errlen, "group name contains a control byte");
        if (ch == '/')
            return seterr(err, errlen, "group name contains '/', which the admin API cannot "
                                       "address");
    }
    return 0;
}

/* Parses RFC 3339 "2026-12-06T18:00:00Z" (a fraction of a second and a
 * "+01:00" zone allowed) into Unix milliseconds. 0 or -1. */
static int parse_rfc3339_ms(const char *s, uint64_t *pms)
{
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (p == NULL)
        return -1;
    uint64_t frac_ms = 0, scale = 100;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p))
            return -1;
        for (; isdigit((unsigned char)*p); p++, scale /= 10)
            frac_ms += (uint64_t)(*p - '0') * scale;
    }
    int64_t zone_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]) &&
               isdigit((unsigned char)p[2]) && p[3] == ':' && isdigit((unsigned char)p[4]) &&
               isdigit((unsigned char)p[5])) {
        int64_t hh = (p[1] - '0') * 10 + (p[2] - '0'), mm = (p[4] - '0') * 10 + (p[5] - '0');
        if (hh > 23 || mm > 59)
            return -1;
        zone_s = (*p == '+' ? 1 : -1) * (hh * 3600 + mm * 60);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    int64_t t = (int64_t)timegm(&tm) - zone_s;
    if (t < 0)
        return -1;
    *pms = (uint64_t)t * 1000 + frac_ms;
    return 0;
}

int fx_cli_group_start_body(const char *start, char *out, size_t len, char *err, size_t errlen)
{
    if (strncmp(start, "time:", 5) == 0) {
        uint64_t ms;
        const char *t = start + 5;
        if (fx_cli_parse_u64(t, INT64_MAX, &ms) != 0 && parse_rfc3339_ms(t, &ms) != 0)
            return seterr(err, errlen,
                          "--start: expected time:2026-12-06T18:00:00Z (RFC 3339) or "
                          "time:<Unix milliseconds>, got '%s'",
                          start);
        int n = snprintf(out, len, "{\"start\":{\"time_ms\":%llu}}", (unsigned long long)ms);
        if (n < 0 || (size_t)n >= len)
            return seterr(err, errlen, "--start: no room for the request body");
        return 0;
    }
    static const char *const words[] = {"all", "new", "last"};
    int n = -1;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strcmp(start, words[i]) == 0)
            n = snprintf(out, len, "{\"start\":\"%s\"}", words[i]);
    }
    uint64_t off;
    if (n < 0 && fx_cli_parse_u64(start, INT64_MAX, &off) == 0)
        n = snprintf(out, len, "{\"start\":{\"offset\":%llu}}", (unsigned long long)off);
    if (n < 0)
        return seterr(err, errlen, "--start: expected all, new, last, an offset or time:T, got '%s'",
                      start);
    if ((size_t)n >= len)
        return seterr(err, errlen, "--start: no room for the request body");
    return 0;
}

/* Appends "/" and |name| percent-encoded to |b|. */
static void route_part(fx_cli_buf *b, const char *name)
{
    static const char hex[] = "0123456789ABCDEF";
    fx_cli_buf_add(b, "/", 1);
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~", *p) != NULL;
        char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
        if (plain)
            fx_cli_buf_add(b, p, 1);
        else
            fx_cli_buf_add(b, esc, 3);
    }
}

int fx_cli_group_route(const fx_cli_path *p, const char *group, const char *action, char *out,
                       size_t len)
{
    fx_cli_buf b = {0};
    fx_cli_buf_printf(&b, "/v1/streams");
    route_part(&b, p->tenant);
    route_part(&b, p->ns);
    route_part(&b, p->stream);
    fx_cli_buf_printf(&b, "/groups");
    if (group != NULL)
        route_part(&b, group);
    if (action != NULL)
        fx_cli_buf_printf(&b, "/%s", action);
    int rv = !b.oom && b.len < len ? 0 : -EINVAL;
    if (rv == 0)
        memcpy(out, b.p, b.len + 1);
    fx_cli_buf_free(&b);
    return rv;
}

/* ---- publish pacing ------------------------------------------------------------- */

void fx_cli_pacer_init(fx_cli_pacer *p, double rate, uint64_t max_burst, uint64_t now_ns)
{
    *p = (fx_cli_pacer){
        .interval_ns = rate > 0 ? 1e9 / rate : 0,
        .start_ns = now_ns,
        .max_burst = max_burst ? max_burst : 1,
    };
}

uint64_t fx_cli_pacer_delay(const fx_cli_pacer *p, uint64_t n, uint64_t now_ns)
{
    if (p->interval_ns <= 0 || n == 0)
        return 0;
    /* A group of |n| sends goes when its last member is due, so a batch
     * never runs ahead of the rate. */
    double due = (double)p->start_ns + (double)(p->sent + n - 1) * p->interval_ns;
    double now = (double)now_ns;
    return due > now ? (uint64_t)(due - now) : 0;
}

void fx_cli_pacer_sent(fx_cli_pacer *p, uint64_t n, uint64_t now_ns)
{
    p->sent += n;
    if (p->interval_ns <= 0)
        return;
    double next = (double)p->start_ns + (double)p->sent * p->interval_ns;
    if ((double)now_ns > next + (double)p->max_burst * p->interval_ns) {
        /* Far behind (a stall): restart the schedule one interval from now
         * instead of sending the whole backlog at once. */
        p->start_ns = now_ns + (uint64_t)p->interval_ns;
        p->sent = 0;
    }
}

/* ---- Prometheus text ------------------------------------------------------------ */

static bool is_name_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == ':';
}

static bool is_name_char(char ch)
{
    return is_name_start(ch) || (ch >= '0' && ch <= '9');
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* Parses one quoted label value at |p| (after the opening quote), appending
 * it unescaped to |out|. Returns the position after the closing quote, or
 * NULL when malformed. */
static const char *label_value(const char *p, const char *end, fx_cli_buf *out)
{
    while (p < end && *p != '"') {
        char ch = *p++;
        if (ch == '\\') {
            if (p == end)
                return NULL;
            ch = *p++;
            if (ch == 'n')
                ch = '\n';
            else if (ch != '\\' && ch != '"')
                return NULL;
        }
        if (fx_cli_buf_add(out, &ch, 1) != 0)
            return NULL;
    }
    return p < end ? p + 1 : NULL;
}

/* Parses "{k="v",...}" at |p| into normalised "k=v,..." in |out|. Returns
 * the position after '}' or NULL. */
static const char *label_set(const char *p, const char *end, fx_cli_buf *out)
{
    p++; /* '{' */
    for (;;) {
        p = skip_blanks(p, end);
        if (p < end && *p == '}')
            return p + 1;
        const char *k = p;
        while (p < end && is_name_char(*p))
            p++;
        if (p == k || p >= end || *p != '=' || p + 1 >= end || p[1] != '"')
            return NULL;
        if (out->len > 0 && fx_cli_buf_add(out, ",", 1) != 0)
            return NULL;
        if (fx_cli_buf_add(out, k, (size_t)(p - k + 1)) != 0)
            return NULL;
        p = label_value(p + 2, end, out);
        if (p == NULL)
            return NULL;
        p = skip_blanks(p, end);
        if (p < end && *p == ',')
            p++;
        else if (p >= end || *p != '}')
            return NULL;
    }
}

static int prom_push(fx_cli_prom *p, const char *name, size_t nlen, const fx_cli_buf *labels,
                     double value)
{
    fx_cli_sample *v = fx_grow(p->v, &p->cap, p->n + 1, sizeof(*v), 64);
    if (v == NULL)
        return -ENOMEM;
    p->v = v;
    fx_cli_sample *s = &p->v[p->n];
    s->name = strndup(name, nlen);
    s->labels = strdup(labels->len ? labels->p : "");
    s->value = value;
    if (s->name == NULL || s->labels == NULL) {
        free(s->name);
        free(s->labels);
        return -ENOMEM;
    }
    p->n++;
    return 0;
}

/* Parses the sample line [p, end). Returns 0, -EINVAL or -ENOMEM. */
static int prom_line(fx_cli_prom *pr, const char *p, const char *end, fx_cli_buf *labels)
{
    const char *name = p;
    if (p == end || !is_name_start(*p))
        return -EINVAL;
    while (p < end && is_name_char(*p))
        p++;
    size_t nlen = (size_t)(p - name);
    fx_cli_buf_reset(labels);
    if (p < end && *p == '{') {
        p = label_set(p, end, labels);
        if (p == NULL)
            return labels->oom ? -ENOMEM : -EINVAL;
    }
    const char *v = skip_blanks(p, end);
    if (v == p || v == end)
        return -EINVAL;
    char num[64];
    size_t vlen = 0;
    while (v + vlen < end && v[vlen] != ' ' && v[vlen] != '\t')
        vlen++;
    if (vlen >= sizeof(num))
        return -EINVAL;
    memcpy(num, v, vlen);
    num[vlen] = '\0';
    char *numend = NULL;
    double value = strtod(num, &numend);
    if (numend == num || *numend != '\0')
        return -EINVAL;
    if (pr->n >= FX_CLI_PROM_MAX_SAMPLES)
        return -EINVAL;
    return prom_push(pr, name, nlen, labels, value);
}

int fx_cli_prom_parse(fx_cli_prom *p, const char *text, size_t len, char *err, size_t errlen)
{
    fx_cli_buf labels = {0};
    const char *s = text, *end = text + len;
    int rv = 0;
    for (size_t lineno = 1; s < end && rv == 0; lineno++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl != NULL ? nl : end;
        const char *q = skip_blanks(s, le);
        if (le > q && le[-1] == '\r')
            le--;
        if (q < le && *q != '#') {
            rv = prom_line(p, q, le, &labels);
            if (rv == -EINVAL)
                seterr(err, errlen, "metrics line %zu: %s", lineno,
                       p->n >= FX_CLI_PROM_MAX_SAMPLES ? "too many samples"
                                                       : "not a Prometheus sample");
        }
        s = nl != NULL ? nl + 1 : end;
    }
    fx_cli_buf_free(&labels);
    return rv;
}

bool fx_cli_prom_get(const fx_cli_prom *p, const char *name, const char *labels, double *out)
{
    if (labels == NULL)
        labels = "";
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->v[i].name, name) == 0 && strcmp(p->v[i].labels, labels) == 0) {
            *out = p->v[i].value;
            return true;
        }
    }
    return false;
}

void fx_cli_prom_free(fx_cli_prom *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].name);
        free(p->v[i].labels);
    }
    free(p->v);
    *p = (fx_cli_prom){0};
}

/* ---- checkpoint table ----------------------------------------------------------- */

typedef struct stat_def {
    const char *checkpoint;
    const char *what;
    const char *metric;
    const char *labels;
    bool gauge;
} stat_def;

/* The pipeline in publish-to-delivery order (docs/metrics.md, "The six
 * checkpoints"). Checkpoints 1 and 2 live in the publishing client and have
 * no broker metric. */
static const stat_def STAT_DEFS[] = {
    {"publish", "accepted", "felix_publish_requests_total", "result=accepted", false},
    {"publish", "ok", "felix_publish_requests_total", "result=ok", false},
    {"publish", "dropped", "felix_publish_requests_total", "result=dropped", false},
    {"publish", "error", "felix_publish_requests_total", "result=error", false},
    {"3-4 broker ingress", "queue depth", "felix_broker_ingress_queue_depth", NULL, true},
    {"3-4 broker ingress", "dropped", "felix_broker_ingress_dropped_total", NULL, false},
    {"3-4 broker ingress", "rejected", "felix_broker_ingress_rejected_total", NULL, false},
    {"3-4 broker ingress", "waited", "felix_broker_ingress_waited_total", NULL, false},
    {"3-4 broker ingress", "queue full", "felix_broker_ingress_queue_full_total", NULL, false},
    {"3-4 broker ingress", "bytes full", "felix_broker_ingress_bytes_full_total", NULL, false},
    {"3-4 broker ingress", "conn bytes full", "felix_broker_ingress_conn_bytes_full_total", NULL,
     false},
    {"5 subscriber queues", "depth", "felix_sub_queue_len", NULL, true},
    {"5 subscriber queues", "enqueued", "felix_sub_queue_enqueued_total", NULL, false},
    {"5 subscriber queues", "dropped", "felix_sub_queue_dropped_total", NULL, false},
    {"5 subscriber queues", "drop_old", "felix_sub_queue_drop_old_total", NULL, false},
    {"6 writer lanes", "dropped", "felix_subscriber_lane_dropped_total", NULL, false},
    {"subscribers", "disconnects", "felix_subscriber_disconnect_total", NULL, false},
    {"subscribers", "active connections", "felix_sub_active_connections", NULL, true},
};

size_t fx_cli_stats_nrows(void)
{
    return sizeof(STAT_DEFS) / sizeof(STAT_DEFS[0]);
}

void fx_cli_stats_rows(const fx_cli_prom *cur, const fx_cli_prom *prev, double dt_s,
                       fx_cli_stat_row *rows)
{
    for (size_t i = 0; i < fx_cli_stats_nrows(); i++) {
        const stat_def *d = &STAT_DEFS[i];
        fx_cli_stat_row *r = &rows[i];
        *r = (fx_cli_stat_row){.checkpoint = d->checkpoint,
                               .what = d->what,
                               .metric = d->metric,
                               .labels = d->labels,
                               .gauge = d->gauge};
        r->present = fx_cli_prom_get(cur, d->metric, d->labels, &r->value);
        double before;
        if (r->present && !d->gauge && prev != NULL && dt_s > 0 &&
            fx_cli_prom_get(prev, d->metric, d->labels, &before)) {
            /* A counter that went down means the broker restarted between
             * the scrapes: the rate since the restart is what it counted. */
            double delta = r->value >= before ? r->value - before : r->value;
            r->rate = delta / dt_s;
            r->has_rate = true;
        }
    }
}

static void fmt_value(char *out, size_t len, double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        snprintf(out, len, "%.0f", v);
    else
        snprintf(out, len, "%.6g", v);
}

int fx_cli_stats_table(const fx_cli_stat_row *rows, size_t n, fx_cli_buf *out)
{
    bool rates = false;
    for (size_t i = 0; i < n; i++)
        rates = rates || rows[i].has_rate;
    const char *hdr = rates ? "%-20s %-18s %14s %12s  %s\n" : "%-20s %-18s %14s%.0s  %s\n";
    fx_cli_buf_printf(out, hdr, "CHECKPOINT", "WHAT", "VALUE", "RATE/s", "METRIC");
    for (size_t i = 0; i < n; i++) {
        const fx_cli_stat_row *r = &rows[i];
        char val[32] = "-", rate[32] = "";
        if (r->present)
            fmt_value(val, sizeof(val), r->value);
        if (r->has_rate)
            snprintf(rate, sizeof(rate), "%.1f", r->rate);
        else if (rates && !r->gauge)
            snprintf(rate, sizeof(rate), "-");
        char metric[160];
        if (r->labels != NULL)
            snprintf(metric, sizeof(metric), "%s{%s}", r->metric, r->labels);
        else
            snprintf(metric, sizeof(metric), "%s", r->metric);
        fx_cli_buf_printf(out, hdr, r->checkpoint, r->what, val, rate, metric);
    }
    return out->oom ? -ENOMEM : 0;
}

/* ---- payload output ------------------------------------------------------------ */

/* Returns the length of the valid UTF-8 sequence at |p| (|n| bytes left)
 * and its code point in |*cp|, or 0 when the bytes there are not one. */
static size_t utf8_seq(const uint8_t *p, size_t n, uint32_t *cp)
{
    uint8_t b = p[0];
    size_t len;
    uint32_t c, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        len = 2, c = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3, c = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

bool fx_cli_utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = utf8_seq(p + i, n - i, &cp);
        if (len == 0)
            return false;
        i += len;
    }
    return true;
}

int fx_cli_escape_payload(const uint8_t *p, size_t n, fx_cli_buf *out)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t len = utf8_seq(p + i, n - i, &cp);
        const char *esc = NULL;
        if (p[i] == '\\')
            esc = "\\\\";
        else if (p[i] == '\n')
            esc = "\\n";
        else if (p[i] == '\r')
            esc = "\\r";
        else if (p[i] == '\t')
            esc = "\\t";
        if (esc != NULL) {
            fx_cli_buf_add(out, esc, 2);
            i++;
        } else if (len == 0 || cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
            fx_cli_buf_printf(out, "\\x%02x", p[i]);
            i++;
        } else {
            fx_cli_buf_add(out, p + i, len);
            i += len;
        }
    }
    return out->oom ? -ENOMEM : 0;
}

/* Code points a terminal acts on instead of showing: C1 controls (CSI
 * among them) and the bidi overrides and isolates that reorder what
 * follows them on the line. */
static bool cp_is_hidden(uint32_t cp)
{
    return cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

void fx_cli_cell_clean(char *s)
{
    size_t n = strlen(s), r = 0, w = 0;
    while (r < n) {
        uint32_t cp = 0;
        size_t len = utf8_seq((const uint8_t *)s + r, n - r, &cp);
        if (len == 0 || cp_is_hidden(cp)) {
            s[w++] = '?';
            r += len == 0 ? 1 : len;
        } else if (cp < 0x20) {
            s[w++] = ' ';
            r++;
        } else {
            memmove(s + w, s + r, len);
            w += len;
            r += len;
        }
    }
    s[w] = '\0';
}

int fx_cli_base64(const uint8_t *p, size_t n, fx_cli_buf *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        char q[4] = {A[v >> 18], A[(v >> 12) & 63], A[(v >> 6) & 63], A[v & 63]};
        fx_cli_buf_add(out, q, 4);
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        char q[4] = {A[v >> 18], A[(v >> 12) & 63], '=', '='};
        fx_cli_buf_add(out, q, 4);
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        char q[4] = {A[v >> 18], A[(v >> 12) & 63], A[(v >> 6) & 63], '='};
        fx_cli_buf_add(out, q, 4);
    }
    return out->oom ? -ENOMEM : 0;
}

/* Appends valid UTF-8 |p| as the inside of a JSON string. */
static void json_escape(const uint8_t *p, size_t n, fx_cli_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = p[i];
        if (ch == '"')
            fx_cli_buf_add(out, "\\\"", 2);
        else if (ch == '\\')
            fx_cli_buf_add(out, "\\\\", 2);
        else if (ch == '\n')
            fx_cli_buf_add(out, "\\n", 2);
        else if (ch == '\r')
            fx_cli_buf_add(out, "\\r", 2);
        else if (ch == '\t')
            fx_cli_buf_add(out, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7f)
            fx_cli_buf_printf(out, "\\u%04x", ch);
        else
            fx_cli_buf_add(out, &ch, 1);
    }
}

/* Appends "len":L,"payload":"..." and, for a payload that is not UTF-8
 * (then in base64), "encoding":"base64". */
static void json_payload(const uint8_t *p, size_t n, fx_cli_buf *out)
{
    fx_cli_buf_printf(out, ",\"len\":%zu,\"payload\":\"", n);
    bool text = fx_cli_utf8_valid(p, n);
    if (text)
        json_escape(p, n, out);
    else
        fx_cli_base64(p, n, out);
    fx_cli_buf_printf(out, "\"%s", text ? "" : ",\"encoding\":\"base64\"");
}

int fx_cli_json_event(const fx_event *ev, uint64_t recv_ms, fx_cli_buf *out)
{
    if (ev->has_offset)
        fx_cli_buf_printf(out, "{\"offset\":%llu", (unsigned long long)ev->offset);
    else
        fx_cli_buf_printf(out, "{\"offset\":null");
    json_payload(ev->payload, ev->len, out);
    if (ev->flags & FX_EVENT_GAP)
        fx_cli_buf_printf(out, ",\"gap\":%llu", (unsigned long long)ev->gap);
    fx_cli_buf_printf(out, ",\"recv_ms\":%llu}\n", (unsigned long long)recv_ms);
    return out->oom ? -ENOMEM : 0;
}

int fx_cli_json_group_msg(const fx_group_msg *m, uint64_t recv_ms, fx_cli_buf *out)
{
    fx_cli_buf_printf(out, "{\"offset\":%llu", (unsigned long long)m->offset);
    json_payload(m->payload, m->len, out);
    fx_cli_buf_printf(out, ",\"attempt\":%lu", (unsigned long)m->attempt);
    if (m->skipped != 0)
        fx_cli_buf_printf(out, ",\"skipped\":%llu", (unsigned long long)m->skipped);
    fx_cli_buf_printf(out, ",\"recv_ms\":%llu}\n", (unsigned long long)recv_ms);
    return out->oom ? -ENOMEM : 0;
}

void fx_cli_gen_payload(uint64_t seq, uint8_t *out, size_t size)
{
    char head[24];
    int n = snprintf(head, sizeof(head), "%llu ", (unsigned long long)seq);
    size_t hlen = (size_t)n < size ? (size_t)n : size;
    memcpy(out, head, hlen);
    memset(out + hlen, 'x', size - hlen);
}

/* ---- help -------------------------------------------------------------------- */

static const fx_cli_help HELP[] = {
    {
        "pub",
        "publish messages to a stream",
        "felix pub [options] TENANT/NS/STREAM [MESSAGE|-]\n"
        "\n"
        "Publishes MESSAGE (--count times), each line of standard input with '-',\n"
        "or --count generated payloads of --size bytes. Prints a summary line\n"
        "(published, acked, errors, elapsed, msg/s) to standard error.\n"
        "\n"
        "Options:\n"
        "  --ack none|per_message|per_batch  wait for the broker's answer (default none:\n"
        "                             return once admitted, flush to QUIC at the end)\n"
        "  --count N                  messages to publish (default 1; with '-': at most\n"
        "                             N lines, default all)\n"
        "  --rate R                   at most R messages per second (decimals allowed)\n"
        "  --size B                   generated payloads of B bytes (K, M suffixes);\n"
        "                             instead of MESSAGE\n"
        "  --batch K                  send K messages per batch frame (default 1)\n"
        "  --client-stats             at the end, print the client's own checkpoints 1\n"
        "                             (publish byte budget) and 2 (publish queues)\n"
        "  --idempotent               idempotent producer (implies --ack per_batch): a\n"
        "                             publish whose answer a lost connection or a broker\n"
        "                             restart cut off is re-sent and written once, so\n"
        "                             \"acked\" counts each message once\n",
        "felix pub --insecure --ack per_message --count 10 t1/default/demo hello\n"
        "  seq 1 100000 | felix pub --pin $PIN --idempotent t1/default/orders -\n"
        "  seq 1 100 | felix pub --pin $PIN t1/default/demo -\n"
        "  felix pub --insecure --size 1K --count 100000 --batch 64 --rate 50000 t1/default/demo",
        true,
    },
    {
        "sub",
        "subscribe to a stream and print its messages",
        "felix sub [options] TENANT/NS/STREAM\n"
        "\n"
        "Prints one line per message (non-printable bytes escaped as \\xNN), or with\n"
        "--json one JSON object per message. Writes \"subscribed\" to standard error\n"
        "once the subscription is active. Ends after --count messages, at the end of\n"
        "the stream, after --timeout-ms without a message, or on Ctrl-C (exit 0),\n"
        "with a summary on standard error.\n"
        "\n"
        "Options:\n"
        "  --from earliest|latest|OFFSET  where to start (default latest)\n"
        "  --count N                  exit after N messages (exit 1 if a timeout or the\n"
        "                             end of the stream comes first)\n"
        "  --json                     {\"offset\":N,\"len\":L,\"payload\":\"...\",\"gap\":G,\n"
        "                             \"recv_ms\":T}; binary payloads in base64 with\n"
        "                             \"encoding\":\"base64\"\n"
        "  --timeout-ms T             stop after T ms without a message\n",
        "felix sub --insecure --from earliest --count 10 t1/default/demo\n"
        "  felix sub --pin $PIN --json t1/default/demo | jq .payload",
        true,
    },
    {
        "consume",
        "read a stream as one member of a consumer group, settling each record",
        "felix consume --group G [options] TENANT/NS/STREAM\n"
        "\n"
        "Joins consumer group G on the stream and prints each record it is given, as\n"
        "felix sub prints messages (a redelivered record's attempt and the offsets\n"
        "skipped before one are in --json; the text form notes skips on standard\n"
        "error), then acks it once the line is written. Writes \"joined\" to standard\n"
        "error once a member. Ends after --count records, when the broker ends the\n"
        "member, after --timeout-ms without a record, or on Ctrl-C (exit 0); then\n"
        "leaves the group, with a summary on standard error.\n"
        "\n"
        "Options:\n"
        "  --group G                  the group's name (required)\n"
        "  --create all|new|OFFSET    create the group if absent, at every record the\n"
        "                             stream holds, new records only, or OFFSET\n"
        "                             (default: joining a missing group fails)\n"
        "  --member NAME              this member's name (default: generated); joining\n"
        "                             again under it gets back what it held\n"
        "  --window N                 records held unacked at most (default 256)\n"
        "  --ack-wait-ms T            redeliver a record not acked for T ms (default:\n"
        "                             the group's)\n"
        "  --nak [DELAY_MS]           nak each record instead of acking it: redelivered\n"
        "                             after DELAY_MS (default: the group's backoff)\n"
        "  --term REASON              term each record instead: never redelivered\n"
        "  --ack-sync                 before leaving, wait (--connect-timeout-ms) for the\n"
        "                             broker to make the settlements durable\n"
        "  --count N                  exit after N records (exit 1 if a timeout or the\n"
        "                             end of the member comes first)\n"
        "  --json                     {\"offset\":N,\"len\":L,\"payload\":\"...\",\n"
        "                             \"attempt\":A,\"skipped\":S,\"recv_ms\":T}\n"
        "  --timeout-ms T             stop after T ms without a record\n",
        "felix consume --insecure --group billing --create all --count 10 t1/default/orders\n"
        "  felix consume --pin $PIN --group billing --nak 500 --count 3 --json "
        "t1/default/orders",
        true,
    },
    {
        "stats",
        "print the broker's backpressure pipeline from its admin endpoint",
        "felix stats [options]\n"
        "\n"
        "Reads GET /metrics from the admin endpoint and prints one row per counter\n"
        "of each backpressure checkpoint (broker ingress, subscriber queues, writer\n"
        "lanes, disconnects). A metric the broker does not export shows as '-'.\n"
        "\n"
        "Options:\n"
        "  --interval MS              scrape twice, MS apart, and add per-second rates\n"
        "  --subs                     also list subscriptions (GET /v1/subscriptions),\n"
        "                             deepest queue first\n"
        "  --top N                    with --subs: at most N rows (default 20)\n",
        "felix stats --interval 1000\n"
        "  felix stats --admin 127.0.0.1:8080 --subs",
        true,
    },
    {
        "streams",
        "list, create, change or delete streams through the admin endpoint",
        "felix streams ls\n"
        "felix streams create [--durable [--retention-bytes N] [--retention-seconds S]]\n"
        "                     TENANT/NS/STREAM\n"
        "felix streams set [--retention-bytes N|none] [--retention-seconds S|none]\n"
        "                  TENANT/NS/STREAM\n"
        "felix streams delete TENANT/NS/STREAM\n"
        "\n"
        "GET /v1/streams, PUT, PATCH (set) or DELETE /v1/streams/TENANT/NS/STREAM on\n"
        "the admin endpoint. Off loopback, create, set and delete need the admin token\n"
        "(--admin-token-file FILE or FELIX_ADMIN_TOKEN).\n"
        "  --durable                  create the stream durable: its messages are kept in\n"
        "                             a log under the broker's durable_storage_dir\n"
        "  --retention-bytes N        this durable stream's retention by size (K, M, G\n"
        "                             suffixes), instead of durable_retention_bytes;\n"
        "                             set: none drops the override\n"
        "  --retention-seconds S      its retention by age in seconds, instead of\n"
        "                             durable_retention_seconds; set: none drops it\n",
        "felix streams create --durable --retention-bytes 10G t1/default/orders\n"
        "  felix streams set --retention-seconds 86400 t1/default/orders\n"
        "  felix streams ls",
        true,
    },
    {
        "groups",
        "list, describe, create, move or delete a stream's consumer groups; redrive or "
        "discard their dead letters",
        "felix groups ls TENANT/NS/STREAM\n"
        "felix groups info TENANT/NS/STREAM GROUP\n"
        "felix groups create [--start START] [SETTINGS] T/NS/STREAM GROUP\n"
        "felix groups seek --start START TENANT/NS/STREAM GROUP\n"
        "felix groups delete TENANT/NS/STREAM GROUP\n"
        "felix groups dead-letters TENANT/NS/STREAM GROUP\n"
        "felix groups redrive --offset N TENANT/NS/STREAM GROUP\n"
        "felix groups discard --offset N TENANT/NS/STREAM GROUP\n"
        "\n"
        "GET /v1/streams/TENANT/NS/STREAM/groups[/GROUP], PUT (create), POST .../seek,\n"
        "DELETE, GET .../dead-letters and POST .../redrive and .../discard on the admin\n"
        "endpoint. ls prints one row per group (lag, pending, members, deliveries, dead\n"
        "letters), info every field of one group and its members, dead-letters the\n"
        "records given up on. redrive delivers a dead letter again (attempt 1, before\n"
        "new records; listed as redriven until acked); discard drops it from the list\n"
        "(the record stays in the stream and the dead-letter stream). Off loopback,\n"
        "create, seek, delete, redrive and discard need the admin token\n"
        "(--admin-token-file FILE or FELIX_ADMIN_TOKEN). A group with members joined\n"
        "cannot be deleted.\n"
        "  --start START              where the group starts (create; default all, the\n"
        "                             oldest record the stream holds) or goes to (seek:\n"
        "                             required; what is pending is dropped): all, new,\n"
        "                             last, an OFFSET, or time:2026-12-06T18:00:00Z\n"
        "                             (RFC 3339, or time:<Unix ms>): the first record\n"
        "                             appended at or after it (durable streams only)\n"
        "  --offset N                 the dead letter to redrive or discard (required)\n"
        "  --json                     print the broker's JSON answer as is\n"
        "SETTINGS (create): the group's own, over the broker's group_* defaults; a\n"
        "create that finds the group with another value fails (409) naming the key\n"
        "  --ack-wait-ms N            a delivery's lease (1..43200000)\n"
        "  --max-ack-wait-ms N        cap of a lease and its extensions (1..43200000)\n"
        "  --max-deliver N            deliveries before dead-lettering (-1: unlimited)\n"
        "  --max-ack-pending N        records held unacked (checkpoint 5g, 1..1000000)\n"
        "  --max-ack-pending-bytes N  bytes held unacked (1..2^40)\n"
        "  --max-parked N             records waiting out a delayed nak (0..1000000)\n"
        "  --backoff D1,D2,...        delays in ms before the k-th redelivery (up to 8)\n",
        "felix groups create --start new t1/default/orders billing\n"
        "  felix groups create --max-deliver 3 --ack-wait-ms 5000 --backoff 100,1000,5000 \\\n"
        "      t1/default/orders billing\n"
        "  felix groups ls t1/default/orders\n"
        "  felix groups seek --start 1200 t1/default/orders billing\n"
        "  felix groups seek --start time:2026-12-06T09:00:00Z t1/default/orders billing\n"
        "  felix groups dead-letters --json t1/default/orders billing\n"
        "  felix groups redrive --offset 1042 t1/default/orders billing\n"
        "  felix groups discard --offset 1043 t1/default/orders billing",
        true,
    },
    {
        "cluster",
        "show a cluster broker's view, or rebalance its streams by graceful moves",
        "felix cluster status [--json] [--admin HOST:PORT]\n"
        "felix cluster rebalance [--dry-run] [--all] [--json] [--admin HOST:PORT]\n"
        "\n"
        "GET /v1/cluster on the admin endpoint of one broker of a cluster\n"
        "(docs/cluster.md): whether that node serves (and why not), its lease, TTL,\n"
        "incarnation and deadline; every node it sees (id, QUIC address,\n"
        "incarnation, lease, weight, streams owned, admin address, sorted by id);\n"
        "which node owns each placed stream and at which epoch (sorted by\n"
        "TENANT/NS/STREAM); its claim, lease and watch counters and its etcd\n"
        "requests. Any node answers for the whole cluster. A standalone broker\n"
        "answers 404 (exit 1).\n"
        "  --json                     print the broker's JSON answer as is\n"
        "\n"
        "rebalance: POST /v1/cluster/rebalance on the node of --admin (it needs the\n"
        "admin token): it plans moves of its in-memory streams to the nodes placement\n"
        "now prefers (never to one at its bounded-load cap) and starts them, at most\n"
        "cluster_move_rate a second; each move is a graceful handoff (gap 0 for\n"
        "subscribers). Prints each planned move, STREAM -> NODE.\n"
        "  --dry-run                  plan only: nothing moves\n"
        "  --all                      every node GET /v1/cluster lists (its admin address)\n",
        "felix cluster status --admin 127.0.0.1:8080\n"
        "  felix cluster rebalance --all --dry-run --admin 127.0.0.1:8080\n"
        "  . /tmp/felix-cluster/cluster.env && felix cluster status --json | jq .streams",
        true,
    },
    {
        "cache",
        "put, get or delete a key of the broker's cache",
        "felix cache put [--ttl-ms N] [options] NS/CACHE KEY VALUE|-\n"
        "felix cache get [options] NS/CACHE KEY\n"
        "felix cache del [options] NS/CACHE KEY\n"
        "\n"
        "One request to the broker's key-value cache (docs/cache.md), scoped by the\n"
        "tenant, NS, CACHE and KEY; TENANT/NS/CACHE is accepted too (TENANT must\n"
        "equal --tenant when both are given). put stores VALUE, or with '-' all of\n"
        "standard input (binary-safe, at most 16 MiB; the broker's\n"
        "cache_max_value_bytes, 1 MiB by default, may refuse less), replacing any\n"
        "entry. get writes the value as is to standard output (no newline added);\n"
        "a missing or expired key exits 1 with one line on standard error. del\n"
        "removes the key and prints 'deleted' (exit 0) or 'not found' (exit 1).\n"
        "\n"
        "Options:\n"
        "  --ttl-ms N                 put: the entry expires N ms after the broker\n"
        "                             stored it (default: never)\n",
        "felix cache put --ttl-ms 60000 default/sessions user-42 '{\"cart\":3}'\n"
        "  felix cache get default/sessions user-42\n"
        "  felix cache del default/sessions user-42\n"
        "  tar c notes | felix cache put default/blobs notes.tar -",
        true,
    },
    {
        "token",
        "make a development Ed25519 key pair and JWTs for auth_mode jwt",
        "felix token keygen --out-jwks FILE --out-key FILE [--kid K] [--force]\n"
        "felix token mint --key FILE --tenant T --perm P [--perm P]... [--ttl 1h]\n"
        "\n"
        "keygen writes a JWKS (the broker's jwks_file) and the private key as an\n"
        "OKP JWK (mode 0600); it refuses to replace files without --force.\n"
        "mint prints a JWT signed with that key on stdout.\n"
        "\n"
        "Options:\n"
        "  --kid K                    key id (keygen: default dev-k1; mint: default the\n"
        "                             key file's)\n"
        "  --tenant T                 the token's tid claim\n"
        "  --perm P                   a permission, ACTION:RESOURCE, such as\n"
        "                             stream.publish:stream:t1/*/* (repeatable)\n"
        "  --ttl D                    lifetime: 90s, 15m, 1h (default), 7d\n"
        "  --sub S, --iss I, --aud A  subject; issuer and audience (default felix-auth,\n"
        "                             felix-broker)\n",
        "felix token keygen --out-jwks jwks.json --out-key dev-key.json\n"
        "  felix token mint --key dev-key.json --tenant t1 --perm 'stream.publish:stream:t1/*/*' "
        "--ttl 1h",
        false,
    },
    {
        "bench",
        "run the benchmark harness (felix-bench, built beside felix)",
        "felix bench [felix-bench options]\n"
        "\n"
        "Runs felix-bench with the same arguments. Its modes (--mode): throughput,\n"
        "latency, overload, isolation, idle-subs, fsync-probe and replay, against an\n"
        "in-process broker or --server ADDR --pin HEX (fsync-probe needs no broker).\n"
        "'felix bench --help' shows this; 'felix-bench --help' lists every option.\n"
        "\n"
        "felix bench matrix --out DIR [--runs N] [--quick] [--peers nats-tls,redis]\n"
        "                   [--payloads \"16 256 1024 4096\"] [--fanouts \"1 10\"]\n"
        "                   [--modes \"throughput latency\"]\n"
        "  runs payload {16,256,1024,4096} x fanout {1,10} x {throughput, latency},\n"
        "  N runs per cell (default 3), against a fresh out-of-process broker per cell\n"
        "  and beside the peers of ../shared/peers; writes DIR/results.jsonl and SVG\n"
        "  charts (bench/matrix.sh; FELIX_BENCH_DIR locates it outside the tree).\n"
        "docs/performance.md has the workload and the measured figures;\n"
        "docs/perf-notes.md (\"What it measures\") every mode and JSON field.\n",
        "felix bench --mode latency --payload 1024 --fanout 10\n"
        "  felix bench --mode throughput --payload 1024 --fanout 1 --runs 3 --json\n"
        "  felix bench matrix --out /tmp/matrix --runs 3",
        false,
    },
    {
        "log",
        "print, verify or repair a durable stream's segment files",
        "felix log inspect [--limit N] [--payload] DIR|FILE.log\n"
        "felix log verify DIR|FILE.log\n"
        "felix log repair [--index-spacing BYTES] DIR\n"
        "\n"
        "Reads a durable stream's directory (<root>/<t>_<ns>_<s>_0-<hash>) or one\n"
        "segment file (docs/durability.md has the format). inspect prints each\n"
        "segment's header and one line per record (offset, byte position, timestamp,\n"
        "length); verify checks every segment header, record checksum and offset and\n"
        "exits 1 naming the file and byte position of the first damage; neither\n"
        "changes anything. repair, on a stopped broker's stream directory, checks\n"
        "every record and cuts the log at the first bad one, keeping the valid\n"
        "prefix, and prints what it dropped (bytes, whole segments, the first offset\n"
        "gone); the broker then serves the stream again from there. All three refuse\n"
        "(exit 1) a storage root a running broker holds.\n"
        "\n"
        "Options:\n"
        "  --limit N                  inspect: at most N records per segment\n"
        "  --payload                  inspect: also print up to 64 payload bytes\n"
        "  --index-spacing BYTES      repair: the stream's durable_index_spacing_bytes\n"
        "                             (4096) for the index entries it rebuilds\n",
        "felix log verify /var/lib/felix/t1_default_orders_0-9feaa7afc295f2ed\n"
        "  felix log repair /var/lib/felix/t1_default_orders_0-9feaa7afc295f2ed\n"
        "  felix log inspect --limit 10 --payload "
        "/var/lib/felix/t1_default_orders_0-9feaa7afc295f2ed",
        false,
    },
};

static const char COMMON_HELP[] =
    "Common options (environment variable in brackets):\n"
    "  --server HOST:PORT         broker QUIC address (FELIX_SERVER; 127.0.0.1:5000)\n"
    "  --server-name NAME         certificate name and SNI (FELIX_SERVER_NAME; default:\n"
    "                             the host of --server)\n"
    "  --tenant T                 tenant (FELIX_TENANT; default: the path's tenant, else\n"
    "                             t1); must equal the tenant in TENANT/NS/STREAM\n"
    "  --token-file FILE          read the auth token from FILE (or set FELIX_TOKEN);\n"
    "                             --token TOKEN works too but shows it to every user\n"
    "                             of this machine (ps)\n"
    "  --pin SHA256               trust the broker certificate with this SHA-256\n"
    "                             (FELIX_PIN; felix-broker prints it at start)\n"
    "  --ca FILE                  trust anchors in PEM (FELIX_CA)\n"
    "  --insecure                 accept any certificate, development only\n"
    "                             (FELIX_INSECURE=1; prints a warning)\n"
    "  --connect-timeout-ms T     connect and subscribe timeout (FELIX_CONNECT_TIMEOUT_MS;\n"
    "                             5000)\n"
    "  --admin HOST:PORT          admin HTTP endpoint (FELIX_ADMIN; 127.0.0.1:8080)\n"
    "  --admin-token-file FILE    bearer token for admin calls, read from FILE (or\n"
    "                             set FELIX_ADMIN_TOKEN; --admin-token TOKEN shows it\n"
    "                             in ps)\n"
    "  --help                     this help\n"
    "pub, sub, consume and cache need exactly one of --pin, --ca or --insecure.\n";

const fx_cli_help *fx_cli_help_all(size_t *n)
{
    *n = sizeof(HELP) / sizeof(HELP[0]);
    return HELP;
}

const fx_cli_help *fx_cli_help_find(const char *name)
{
    for (size_t i = 0; i < sizeof(HELP) / sizeof(HELP[0]); i++) {
        if (strcmp(HELP[i].name, name) == 0)
            return &HELP[i];
    }
    return NULL;
}

int fx_cli_help_text(const fx_cli_help *h, fx_cli_buf *out)
{
    if (h != NULL) {
        fx_cli_buf_printf(out, "Usage: %s\n%s%sExample:\n  %s\n", h->usage,
                          h->common_flags ? COMMON_HELP : "", h->common_flags ? "\n" : "",
                          h->example);
        return out->oom ? -ENOMEM : 0;
    }
    fx_cli_buf_printf(out,
                      "felix %s: command-line client of the Felix-C broker\n\n"
                      "Usage: felix COMMAND [options] ...\n\nCommands:\n",
                      FX_VERSION);
    for (size_t i = 0; i < sizeof(HELP) / sizeof(HELP[0]); i++)
        fx_cli_buf_printf(out, "  %-8s %s\n           e.g. %.*s\n", HELP[i].name, HELP[i].summary,
                          (int)strcspn(HELP[i].example, "\n"), HELP[i].example);
    fx_cli_buf_printf(out,
                      "\n%s\n'felix COMMAND --help' shows a command's options; "
                      "'felix --version' the version.\n"
                      "Exit status: 0 success, 1 refused or failed, 2 usage error, "
                      "130 pub interrupted.\n",
                      COMMON_HELP);
    return out->oom ? -ENOMEM : 0;
}
