/* Unit tests for base/metrics: the X-macro lists, per-thread counter cells,
 * gauges, histogram buckets, and the Prometheus text rendering, which is
 * checked by a strict parser of the 0.0.4 exposition format written here.
 * Also runs under ThreadSanitizer (metrics.tsan.*). */
/* fx-test-libs: fx_base */
#include "fx_test.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>

#include "base/metrics.h"

/* ---- a strict parser of the text exposition format ---------------------- */

#define P_MAX_SAMPLES 2048
#define P_MAX_FAMILIES 512
#define P_MAX_LABELS 8
#define P_NAME 128
#define P_LABELS 512

typedef struct p_sample {
    char name[P_NAME];
    char labels[P_LABELS]; /* k="v",... sorted by key, values as escaped in the text */
    double value;
} p_sample;

typedef struct p_family {
    char name[P_NAME];
    char type[16];
    bool help;
    size_t nsamples;
} p_family;

/* Histogram state per family and label set (le excluded). */
typedef struct p_hist {
    char key[P_NAME + P_LABELS];
    double last_le, last_cum, inf, count;
    bool any, inf_seen, count_seen, sum_seen;
} p_hist;

typedef struct parsed {
    p_sample s[P_MAX_SAMPLES];
    size_t ns;
    p_family f[P_MAX_FAMILIES];
    size_t nf;
    p_hist h[P_MAX_FAMILIES];
    size_t nh;
    p_family *cur; /* family of the last TYPE line */
    char err[256];
} parsed;

/* snprintf that fails the test instead of truncating. */
__attribute__((format(printf, 3, 4))) static void fmt_to(char *dst, size_t cap, const char *fmt,
                                                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < cap);
}

/* Records why the text was rejected (cut to fit) and returns -1. */
__attribute__((format(printf, 2, 3))) static int p_fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, 256, fmt, ap);
    va_end(ap);
    return -1;
}

#define P_FAIL(p, ...) p_fail((p)->err, __VA_ARGS__)

typedef struct p_label {
    char key[P_NAME];
    char val[P_LABELS];
} p_label;

static bool is_name_char(char c, bool first, bool colon)
{
    if (isalpha((unsigned char)c) || c == '_' || (colon && c == ':'))
        return true;
    return !first && isdigit((unsigned char)c);
}

/* Reads a metric (|colon|) or label name at |*pp| into |out|. */
static bool read_name(const char **pp, char *out, bool colon)
{
    const char *p = *pp;
    size_t n = 0;
    while (is_name_char(p[n], n == 0, colon) && n < P_NAME - 1)
        n++;
    if (n == 0 || is_name_char(p[n], false, colon))
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    *pp = p + n;
    return true;
}

/* Reads a quoted label value with escapes \\ \" \n, keeping it escaped. */
static bool read_label_value(const char **pp, char *out)
{
    const char *p = *pp;
    size_t n = 0;
    if (*p++ != '"')
        return false;
    while (*p != '"') {
        if (*p == '\0' || *p == '\n' || n + 3 >= P_LABELS)
            return false;
        if (*p == '\\') {
            if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                return false;
            out[n++] = *p++;
        }
        out[n++] = *p++;
    }
    out[n] = '\0';
    *pp = p + 1;
    return true;
}

static int label_cmp(const void *a, const void *b)
{
    return strcmp(((const p_label *)a)->key, ((const p_label *)b)->key);
}

/* Parses `{k="v",...}` into sorted |ls|; returns the count or -1. */
static int read_labels(const char **pp, p_label *ls)
{
    const char *p = *pp;
    int n = 0;
    if (*p != '{')
        return 0;
    p++;
    while (*p != '}') {
        if (n == P_MAX_LABELS || (n > 0 && *p++ != ','))
            return -1;
        if (!read_name(&p, ls[n].key, false) || *p++ != '=' || !read_label_value(&p, ls[n].val))
            return -1;
        n++;
    }
    if (n == 0)
        return -1;
    qsort(ls, (size_t)n, sizeof(*ls), label_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(ls[i].key, ls[i - 1].key) == 0)
            return -1;
    *pp = p + 1;
    return n;
}

/* Joins |ls| into `k="v",...`, skipping the key |skip| (may be NULL). */
static void join_labels(const p_label *ls, int n, const char *skip, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (skip && strcmp(ls[i].key, skip) == 0)
            continue;
        len += (size_t)snprintf(out + len, cap - len, "%s%s=\"%s\"", len ? "," : "", ls[i].key,
                                ls[i].val);
        assert_true(len < cap);
    }
}

static p_family *find_family(parsed *p, const char *name)
{
    for (size_t i = 0; i < p->nf; i++)
        if (strcmp(p->f[i].name, name) == 0)
            return &p->f[i];
    return NULL;
}

static p_family *get_family(parsed *p, const char *name)
{
    p_family *f = find_family(p, name);
    if (f || p->nf == P_MAX_FAMILIES)
        return f;
    f = &p->f[p->nf++];
    memset(f, 0, sizeof(*f));
    fmt_to(f->name, sizeof(f->name), "%s", name);
    return f;
}

static bool valid_help(const char *t)
{
    for (; *t; t++)
        if (*t == '\\' && *++t != '\\' && *t != 'n')
            return false;
    return true;
}

static int parse_comment(parsed *p, const char *line)
{
    bool help = strncmp(line, "# HELP ", 7) == 0;
    if (!help && strncmp(line, "# TYPE ", 7) != 0)
        return P_FAIL(p, "unexpected comment: %s", line);
    const char *q = line + 7;
    char name[P_NAME];
    if (!read_name(&q, name, true) || *q++ != ' ')
        return P_FAIL(p, "bad metric name in: %s", line);
    p_family *f = get_family(p, name);
    if (!f)
        return P_FAIL(p, "too many families");
    if (help) {
        if (f->help || !valid_help(q))
            return P_FAIL(p, "duplicate or badly escaped HELP: %s", line);
        f->help = true;
        return 0;
    }
    static const char *types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    bool ok = false;
    for (size_t i = 0; i < 5; i++)
        ok = ok || strcmp(q, types[i]) == 0;
    if (!ok || f->type[0] || f->nsamples)
        return P_FAIL(p, "bad, duplicate or late TYPE: %s", line);
    fmt_to(f->type, sizeof(f->type), "%s", q);
    p->cur = f;
    return 0;
}

static const char *hist_suffix(const char *name, const char *family)
{
    size_t n = strlen(family);
    if (strncmp(name, family, n) != 0)
        return NULL;
    const char *s = name + n;
    if (strcmp(s, "_bucket") == 0 || strcmp(s, "_sum") == 0 || strcmp(s, "_count") == 0)
        return s;
    return NULL;
}

static p_hist *get_hist(parsed *p, const char *key)
{
    for (size_t i = 0; i < p->nh; i++)
        if (strcmp(p->h[i].key, key) == 0)
            return &p->h[i];
    if (p->nh == P_MAX_FAMILIES)
        return NULL;
    p_hist *h = &p->h[p->nh++];
    memset(h, 0, sizeof(*h));
    fmt_to(h->key, sizeof(h->key), "%s", key);
    return h;
}

static int check_bucket(parsed *p, p_hist *h, const p_label *ls, int nl, double v)
{
    const char *le = NULL;
    for (int i = 0; i < nl; i++)
        if (strcmp(ls[i].key, "le") == 0)
            le = ls[i].val;
    if (!le)
        return P_FAIL(p, "bucket without le in %s", h->key);
    char *end;
    double bound = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, &end);
    if (!isinf(bound) && (*le == '\0' || *end != '\0'))
        return P_FAIL(p, "bad le=\"%s\" in %s", le, h->key);
    if (h->inf_seen || (h->any && (bound <= h->last_le || v < h->last_cum)))
        return P_FAIL(p, "buckets not increasing/cumulative at le=%s in %s", le, h->key);
    h->any = true;
    h->last_le = bound;
    h->last_cum = v;
    if (isinf(bound)) {
        h->inf_seen = true;
        h->inf = v;
    }
    return 0;
}

static bool has_label(const p_label *ls, int nl, const char *key)
{
    for (int i = 0; i < nl; i++)
        if (strcmp(ls[i].key, key) == 0)
            return true;
    return false;
}

/* Validates a sample against its family; histogram samples feed p_hist. */
static int check_family(parsed *p, const char *name, const p_label *ls, int nl, double v)
{
    p_family *f = p->cur;
    if (!f)
        return P_FAIL(p, "sample %s before any TYPE", name);
    f->nsamples++;
    bool hist = strcmp(f->type, "histogram") == 0;
    if (!hist) {
        if (strcmp(name, f->name) != 0)
            return P_FAIL(p, "sample %s outside its family (current %s)", name, f->name);
        if (strcmp(f->type, "counter") == 0 && !(v >= 0))
            return P_FAIL(p, "negative counter %s", name);
        return 0;
    }
    const char *sfx = hist_suffix(name, f->name);
    if (!sfx)
        return P_FAIL(p, "sample %s outside histogram %s", name, f->name);
    char key[P_NAME + P_LABELS], rest[P_LABELS];
    join_labels(ls, nl, "le", rest, sizeof(rest));
    fmt_to(key, sizeof(key), "%s{%s}", f->name, rest);
    p_hist *h = get_hist(p, key);
    if (!h)
        return P_FAIL(p, "too many histograms");
    if (strcmp(sfx, "_bucket") == 0)
        return check_bucket(p, h, ls, nl, v);
    bool *seen = strcmp(sfx, "_sum") == 0 ? &h->sum_seen : &h->count_seen;
    if (*seen || has_label(ls, nl, "le"))
        return P_FAIL(p, "duplicate %s or le on it in %s", sfx, key);
    *seen = true;
    if (strcmp(sfx, "_count") == 0)
        h->count = v;
    return 0;
}

static int add_sample(parsed *p, const char *name, const p_label *ls, int nl, double v)
{
    if (p->ns == P_MAX_SAMPLES)
        return P_FAIL(p, "too many samples");
    p_sample *s = &p->s[p->ns];
    fmt_to(s->name, sizeof(s->name), "%s", name);
    join_labels(ls, nl, NULL, s->labels, sizeof(s->labels));
    s->value = v;
    for (size_t i = 0; i < p->ns; i++)
        if (strcmp(p->s[i].name, name) == 0 && strcmp(p->s[i].labels, s->labels) == 0)
            return P_FAIL(p, "duplicate series %s{%s}", name, s->labels);
    p->ns++;
    return 0;
}

static int parse_sample(parsed *p, const char *line)
{
    const char *q = line;
    char name[P_NAME];
    p_label ls[P_MAX_LABELS];
    if (!read_name(&q, name, true))
        return P_FAIL(p, "bad sample name: %s", line);
    int nl = read_labels(&q, ls);
    if (nl < 0 || *q++ != ' ' || *q == '\0' || isspace((unsigned char)*q))
        return P_FAIL(p, "bad labels or separator: %s", line);
    char *end;
    double v = strtod(q, &end);
    if (*end != '\0')
        return P_FAIL(p, "bad value (or a timestamp) in: %s", line);
    if (check_family(p, name, ls, nl, v) != 0)
        return -1;
    return add_sample(p, name, ls, nl, v);
}

static int check_hists_complete(parsed *p)
{
    for (size_t i = 0; i < p->nh; i++) {
        p_hist *h = &p->h[i];
        if (!h->inf_seen || !h->sum_seen || !h->count_seen || h->inf != h->count)
            return P_FAIL(p, "histogram %s incomplete or +Inf != _count", h->key);
    }
    for (size_t i = 0; i < p->nf; i++)
        if (!p->f[i].type[0])
            return P_FAIL(p, "family %s has HELP but no TYPE", p->f[i].name);
    return 0;
}

/* Parses |text| strictly; returns 0, or -1 with the reason in p->err. */
static int parse_exposition(const char *text, parsed *p)
{
    memset(p, 0, sizeof(*p));
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return P_FAIL(p, "text must end with a newline");
    char line[1024];
    for (const char *q = text; *q;) {
        const char *nl = strchr(q, '\n');
        size_t n = (size_t)(nl - q);
        if (n == 0 || n >= sizeof(line))
            return P_FAIL(p, "empty or overlong line");
        memcpy(line, q, n);
        line[n] = '\0';
        q = nl + 1;
        int rv = line[0] == '#' ? parse_comment(p, line) : parse_sample(p, line);
        if (rv != 0)
            return rv;
    }
    return check_hists_complete(p);
}

static parsed *parse_ok(const char *text)
{
    parsed *p = malloc(sizeof(*p));
    assert_non_null(p);
    if (parse_exposition(text, p) != 0)
        fail_msg("exposition rejected: %s", p->err);
    return p;
}

/* Returns the value of series |name|{|labels|}; fails the test if absent. */
static double value_of(const parsed *p, const char *name, const char *labels)
{
    for (size_t i = 0; i < p->ns; i++)
        if (strcmp(p->s[i].name, name) == 0 && strcmp(p->s[i].labels, labels) == 0)
            return p->s[i].value;
    fail_msg("no series %s{%s}", name, labels);
    return NAN;
}

/* Renders the registry; |per_stream| as fx_metrics_render() takes it. */
static char *render_with(bool per_stream)
{
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(fx_metrics_render(&out, &len, per_stream), 0);
    assert_non_null(out);
    assert_int_equal(strlen(out), len);
    return out;
}

static char *render_all(void)
{
    return render_with(true);
}

/* ---- the parser itself --------------------------------------------------- */

static void test_parser_rejects_malformed_exposition(void **state)
{
    static const char *bad[] = {
        "felix_x_total 1\n",                                                /* no TYPE */
        "# TYPE felix_x_total counter\nfelix_x_total 1",                    /* no final newline */
        "# TYPE felix_x_total counter\nfelix_x_total 1\nfelix_x_total 2\n", /* duplicate */
        "# TYPE 1bad counter\n1bad 1\n",                                    /* bad name */
        "# TYPE felix_x counter\nfelix_x{a=\"1\",a=\"2\"} 1\n",             /* repeated label */
        "# TYPE felix_x counter\nfelix_x{a=\"\\q\"} 1\n",                   /* bad escape */
        "# TYPE felix_x counter\nfelix_x 1 1700000000\n",                   /* timestamp */
        "# TYPE felix_x counter\nfelix_x -1\n",                             /* negative counter */
        "# TYPE felix_x counter\nfelix_y 1\n",                              /* outside family */
        "# TYPE felix_x gauge\n# TYPE felix_x gauge\nfelix_x 1\n",          /* two TYPEs */
        "# HELP felix_x a\\tb\n# TYPE felix_x gauge\nfelix_x 1\n",          /* bad help escape */
        "# TYPE felix_h histogram\nfelix_h_bucket{le=\"1\"} 2\nfelix_h_bucket{le=\"2\"} 1\n"
        "felix_h_bucket{le=\"+Inf\"} 2\nfelix_h_sum 1\nfelix_h_count 2\n", /* not cumulative */
        "# TYPE felix_h histogram\nfelix_h_bucket{le=\"1\"} 2\n"
        "felix_h_bucket{le=\"+Inf\"} 2\nfelix_h_sum 1\nfelix_h_count 3\n", /* +Inf != count */
        "# TYPE felix_h histogram\nfelix_h_bucket{le=\"1\"} 2\nfelix_h_sum 1\n"
        "felix_h_count 2\n", /* no +Inf */
    };
    parsed *p = malloc(sizeof(*p));
    assert_non_null(p);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse_exposition(bad[i], p) == 0)
            fail_msg("accepted bad input %zu: %s", i, bad[i]);
    }
    const char *good = "# HELP felix_h a\\\\b\\nc\n# TYPE felix_h histogram\n"
                       "felix_h_bucket{r=\"x\",le=\"1\"} 1\nfelix_h_bucket{r=\"x\",le=\"+Inf\"} 3\n"
                       "felix_h_sum{r=\"x\"} 9\nfelix_h_count{r=\"x\"} 3\n";
    if (parse_exposition(good, p) != 0)
        fail_msg("rejected good input: %s", p->err);
    assert_true(value_of(p, "felix_h_count", "r=\"x\"") == 3);
    free(p);
}

/* ---- lists and descriptors ----------------------------------------------- */

static size_t count_type(fx_metric_type t)
{
    size_t n = 0;
    for (size_t i = 0; i < fx_metrics_ndescs; i++)
        n += fx_metrics_descs[i].type == t;
    return n;
}

static bool ends_with(const char *s, const char *sfx)
{
    size_t a = strlen(s), b = strlen(sfx);
    return a >= b && strcmp(s + a - b, sfx) == 0;
}

static void check_name_and_label(const fx_metric_desc *d)
{
    const char *q = d->name;
    char buf[P_NAME];
    assert_int_equal(strncmp(d->name, "felix_", 6), 0);
    assert_true(read_name(&q, buf, true) && *q == '\0');
    assert_true(d->help[0] != '\0');
    assert_int_equal(ends_with(d->name, "_total"), d->type == FX_METRIC_COUNTER);
    if (d->label[0]) {
        q = d->label;
        assert_true(read_name(&q, buf, false) && *q == '=' && q[1] != '\0');
        assert_true(strncmp(d->label, "__", 2) != 0 && strncmp(d->label, "le=", 3) != 0);
    }
}

static void check_offset(const fx_metric_desc *d, bool *seen_c, bool *seen_g, bool *seen_h)
{
    size_t size = d->type == FX_METRIC_HISTOGRAM ? sizeof(fx_hist) : sizeof(uint64_t);
    size_t total = d->type == FX_METRIC_COUNTER ? sizeof(fx_metrics_counters)
                   : d->type == FX_METRIC_GAUGE ? sizeof(fx_metrics_gauges)
                                                : sizeof(fx_metrics_hists);
    bool *seen = d->type == FX_METRIC_COUNTER ? seen_c
                 : d->type == FX_METRIC_GAUGE ? seen_g
                                              : seen_h;
    assert_int_equal(d->off % size, 0);
    assert_true(d->off + size <= total);
    assert_false(seen[d->off / size]); /* every field exactly once */
    seen[d->off / size] = true;
    if (d->type == FX_METRIC_HISTOGRAM)
        assert_true(d->lo + FX_HIST_NBUCKETS <= 64 || fx_hist_fixed_of(d->lo) != NULL);
}

static void test_lists_cover_structs_and_names_are_unique(void **state)
{
    size_t nc = sizeof(fx_metrics_counters) / sizeof(_Atomic uint64_t);
    size_t ng = sizeof(fx_metrics_gauges) / sizeof(_Atomic int64_t);
    size_t nh = sizeof(fx_metrics_hists) / sizeof(fx_hist);
    assert_int_equal(count_type(FX_METRIC_COUNTER), nc);
    assert_int_equal(count_type(FX_METRIC_GAUGE), ng);
    assert_int_equal(count_type(FX_METRIC_HISTOGRAM), nh);
    assert_int_equal(nc + ng + nh, fx_metrics_ndescs);

    bool seen_c[256] = {0}, seen_g[256] = {0}, seen_h[256] = {0};
    assert_true(nc <= 256 && ng <= 256 && nh <= 256);
    for (size_t i = 0; i < fx_metrics_ndescs; i++) {
        const fx_metric_desc *d = &fx_metrics_descs[i];
        check_name_and_label(d);
        check_offset(d, seen_c, seen_g, seen_h);
        for (size_t j = 0; j < i; j++) {
            const fx_metric_desc *e = &fx_metrics_descs[j];
            assert_true(strcmp(d->field, e->field) != 0);
            if (strcmp(d->name, e->name) != 0)
                continue;
            /* A shared name: adjacent, same type and help, distinct labels. */
            assert_true(strcmp(fx_metrics_descs[i - 1].name, d->name) == 0);
            assert_int_equal(d->type, e->type);
            assert_string_equal(d->help, e->help);
            assert_true(d->label[0] && strcmp(d->label, e->label) != 0);
        }
    }
}

/* ---- rendering ------------------------------------------------------------ */

static void test_render_parses_as_prometheus_text(void **state)
{
    FX_COUNTER_ADD(ingress_dropped, 3);
    FX_COUNTER_INC(publish_error);
    FX_GAUGE_SET(quic_conn_open, -2);
    FX_HIST_OBSERVE(publish_latency_ns, 5000);
    FX_HIST_OBSERVE(publish_latency_ns, UINT64_C(1) << 40);

    char *text = render_all();
    parsed *p = parse_ok(text);
    size_t families = 0;
    for (size_t i = 0; i < fx_metrics_ndescs; i++) {
        const fx_metric_desc *d = &fx_metrics_descs[i];
        families += i == 0 || strcmp(d->name, fx_metrics_descs[i - 1].name) != 0;
        p_family *f = find_family(p, d->name);
        assert_non_null(f);
        assert_true(f->help);
        static const char *tn[] = {"counter", "gauge", "histogram"};
        assert_string_equal(f->type, tn[d->type]);
    }
    for (size_t i = 0; i < FX_MSTREAM_N; i++) {
        p_family *f = find_family(p, fx_mstream_descs[i].name);
        assert_non_null(f);
        assert_string_equal(f->type, "gauge");
    }
    for (size_t i = 0; i < FX_MGROUP_N; i++) {
        p_family *f = find_family(p, fx_mgroup_descs[i].name);
        assert_non_null(f);
        assert_string_equal(f->type,
                            fx_mgroup_descs[i].type == FX_METRIC_GAUGE ? "gauge" : "counter");
    }
    for (size_t i = 0; i < FX_MTENANT_N; i++) {
        p_family *f = find_family(p, fx_mtenant_descs[i].name);
        assert_non_null(f);
        assert_string_equal(f->type,
                            fx_mtenant_descs[i].type == FX_METRIC_GAUGE ? "gauge" : "counter");
    }
    assert_int_equal(p->nf, families + FX_MSTREAM_N + FX_MGROUP_N + FX_MTENANT_N);
    assert_true(value_of(p, "felix_broker_ingress_dropped_total", "") >= 3);
    assert_true(value_of(p, "felix_publish_requests_total", "result=\"error\"") >= 1);
    assert_true(value_of(p, "felix_quic_connections_open", "") == -2);
    assert_true(value_of(p, "felix_publish_latency_ns_count", "") >= 2);
    assert_true(value_of(p, "felix_publish_latency_ns_bucket", "le=\"+Inf\"") >= 2);
    free(p);
    free(text);
}

static void test_render_escapes_help_and_label_values(void **state)
{
    fx_metric_desc d[] = {
        {.type = FX_METRIC_COUNTER,
         .field = "x",
         .name = "felix_t_total",
         .label = "k=a\"b\\c\nd",
         .help = "back\\slash\nnew \"quoted\"",
         .off = offsetof(fx_metrics_counters, publish_ok)},
        {.type = FX_METRIC_HISTOGRAM,
         .field = "y",
         .name = "felix_t_ns",
         .label = "mode=x",
         .help = "h",
         .off = offsetof(fx_metrics_hists, publish_latency_ns),
         .lo = 0},
    };
    fx_metrics_snapshot *snap = calloc(1, sizeof(*snap));
    assert_non_null(snap);
    atomic_store(&snap->c.publish_ok, 7);
    atomic_store(&snap->h.publish_latency_ns.buckets[0], 1);
    atomic_store(&snap->h.publish_latency_ns.buckets[2], 2);
    atomic_store(&snap->h.publish_latency_ns.buckets[FX_HIST_NBUCKETS], 1);
    atomic_store(&snap->h.publish_latency_ns.sum, 100);
    char *out;
    size_t len;
    assert_int_equal(fx_metrics_render_descs(d, 2, snap, &out, &len), 0);
    assert_non_null(strstr(out, "# HELP felix_t_total back\\\\slash\\nnew \"quoted\"\n"));
    assert_non_null(strstr(out, "\nfelix_t_total{k=\"a\\\"b\\\\c\\nd\"} 7\n"));
    assert_non_null(strstr(out, "\nfelix_t_ns_bucket{mode=\"x\",le=\"1\"} 1\n"));
    assert_non_null(strstr(out, "\nfelix_t_ns_bucket{mode=\"x\",le=\"4\"} 3\n"));
    assert_non_null(strstr(out, "\nfelix_t_ns_bucket{mode=\"x\",le=\"+Inf\"} 4\n"));
    assert_non_null(
        strstr(out, "\nfelix_t_ns_sum{mode=\"x\"} 100\nfelix_t_ns_count{mode=\"x\"} 4\n"));
    parsed *p = parse_ok(out);
    assert_true(value_of(p, "felix_t_ns_bucket", "le=\"2\",mode=\"x\"") == 1);
    free(p);
    free(out);

    assert_int_equal(fx_metrics_render_descs(d, 0, snap, &out, &len), 0);
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    free(out);
    free(snap);
}

/* ---- counters across threads ---------------------------------------------- */

#define N_THREADS 4
#define N_INCS 20000

static atomic_int writers_left;

static void *count_worker(void *arg)
{
    for (int i = 0; i < N_INCS; i++) {
        FX_COUNTER_INC(quic_datagrams_in);
        FX_COUNTER_ADD(quic_bytes_in, 3);
        FX_HIST_OBSERVE(publish_latency_ns, 2048);
    }
    atomic_fetch_sub(&writers_left, 1);
    return arg;
}

static void test_counters_from_many_threads_sum_exactly(void **state)
{
    fx_metrics_snapshot *before = malloc(sizeof(*before)), *after = malloc(sizeof(*after));
    assert_true(before && after);
    fx_metrics_snapshot_take(before);
    atomic_store(&writers_left, N_THREADS);
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, count_worker, NULL), 0);
    /* Scrape while the writers run, as the admin endpoint would. */
    for (int scrapes = 0; atomic_load(&writers_left) > 0 && scrapes < 1000; scrapes++) {
        fx_metrics_snapshot_take(after);
        assert_true(after->c.quic_datagrams_in >= before->c.quic_datagrams_in);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    fx_metrics_snapshot_take(after);
    uint64_t n = (uint64_t)N_THREADS * N_INCS;
    assert_int_equal(after->c.quic_datagrams_in - before->c.quic_datagrams_in, n);
    assert_int_equal(after->c.quic_bytes_in - before->c.quic_bytes_in, 3 * n);
    unsigned b = fx_hist_bucket_index(fx_hist_lo_publish_latency_ns, 2048);
    assert_int_equal(
        after->h.publish_latency_ns.buckets[b] - before->h.publish_latency_ns.buckets[b], n);
    assert_int_equal(after->h.publish_latency_ns.sum - before->h.publish_latency_ns.sum, 2048 * n);
    free(before);
    free(after);
}

static void *inc_once(void *arg)
{
    FX_COUNTER_INC(quic_conn_closed);
    return arg;
}

static void test_shards_are_reused_after_thread_exit(void **state)
{
    FX_COUNTER_INC(quic_conn_closed); /* the main thread has its cell */
    fx_metrics_snapshot *snap = malloc(sizeof(*snap));
    assert_non_null(snap);
    fx_metrics_snapshot_take(snap);
    uint64_t v0 = snap->c.quic_conn_closed;
    size_t n0 = fx_metrics_cell_count();
    for (int i = 0; i < 6; i++) {
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, inc_once, NULL), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
    }
    assert_true(fx_metrics_cell_count() <= n0 + 1);
    fx_metrics_snapshot_take(snap);
    assert_int_equal(snap->c.quic_conn_closed - v0, 6); /* parked cells keep their counts */
    free(snap);
}

/* ---- gauges --------------------------------------------------------------- */

static void *gauge_worker(void *arg)
{
    for (int i = 0; i < N_INCS; i++) {
        FX_GAUGE_ADD(sub_queue_len, 2);
        FX_GAUGE_SUB(sub_queue_len, 2);
    }
    FX_GAUGE_ADD(sub_queue_len, 3);
    return arg;
}

static void test_gauge_add_sub_and_set(void **state)
{
    fx_metrics_snapshot *snap = malloc(sizeof(*snap));
    assert_non_null(snap);
    FX_GAUGE_SET(sub_queue_len, 10);
    FX_GAUGE_ADD(sub_queue_len, 5);
    FX_GAUGE_SUB(sub_queue_len, 20);
    fx_metrics_snapshot_take(snap);
    assert_int_equal(snap->g.sub_queue_len, -5);

    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, gauge_worker, NULL), 0);
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    fx_metrics_snapshot_take(snap);
    assert_int_equal(snap->g.sub_queue_len, -5 + 3 * N_THREADS);

    char *text = render_all();
    parsed *p = parse_ok(text);
    assert_true(value_of(p, "felix_sub_queue_len", "") == -5 + 3 * N_THREADS);
    FX_GAUGE_SET(sub_queue_len, 0);
    free(p);
    free(text);
    free(snap);
}

/* ---- histograms ----------------------------------------------------------- */

static void test_histogram_observe_puts_values_in_right_buckets(void **state)
{
    /* lo = 10: bounds 1024, 2048, ... */
    assert_int_equal(fx_hist_bucket_index(10, 0), 0);
    assert_int_equal(fx_hist_bucket_index(10, 1024), 0);
    assert_int_equal(fx_hist_bucket_index(10, 1025), 1);
    assert_int_equal(fx_hist_bucket_index(10, 2048), 1);
    assert_int_equal(fx_hist_bucket_index(10, 2049), 2);
    uint64_t top = UINT64_C(1) << (10 + FX_HIST_NBUCKETS - 1);
    assert_int_equal(fx_hist_bucket_index(10, top), FX_HIST_NBUCKETS - 1);
    assert_int_equal(fx_hist_bucket_index(10, top + 1), FX_HIST_NBUCKETS);
    assert_int_equal(fx_hist_bucket_index(10, UINT64_MAX), FX_HIST_NBUCKETS);
    assert_int_equal(fx_hist_bucket_index(0, 1), 0);
    assert_int_equal(fx_hist_bucket_index(0, 2), 1);
    assert_int_equal(fx_hist_bucket_index(0, 3), 2);
    assert_int_equal(fx_hist_bucket_index(40, UINT64_C(1) << 63), FX_HIST_NBUCKETS - 1);

    /* Observing through a cell, then reading the cumulative rendering. */
    char *text = render_all();
    parsed *p0 = parse_ok(text);
    free(text);
    uint64_t vals[] = {1, 1024, 1500, 3000, 3000, UINT64_C(1) << 36};
    for (size_t i = 0; i < 6; i++)
        FX_HIST_OBSERVE(publish_latency_ns, vals[i]);
    text = render_all();
    parsed *p1 = parse_ok(text);
    const char *name = "felix_publish_latency_ns_bucket";
    struct {
        const char *le;
        double added;
    } want[] = {{"le=\"1024\"", 2}, {"le=\"2048\"", 3},       {"le=\"4096\"", 5},
                {"le=\"8192\"", 5}, {"le=\"8589934592\"", 5}, {"le=\"+Inf\"", 6}};
    for (size_t i = 0; i < 6; i++)
        assert_true(value_of(p1, name, want[i].le) - value_of(p0, name, want[i].le) ==
                    want[i].added);
    double sum = 1 + 1024 + 1500 + 3000 + 3000 + (double)(UINT64_C(1) << 36);
    assert_true(value_of(p1, "felix_publish_latency_ns_sum", "") -
                    value_of(p0, "felix_publish_latency_ns_sum", "") ==
                sum);
    free(p0);
    free(p1);
    free(text);
}

/* ---- per-stream series -------------------------------------------------------- */

static void two_streams(void *user, fx_mstream_emit_fn emit, void *sink)
{
    int *calls = user;
    (*calls)++;
    fx_mstream_row r = {.tenant = "t1", .ns = "default", .stream = "a\"b"};
    for (int i = 0; i < FX_MSTREAM_N; i++)
        r.v[i] = 10 + i;
    emit(sink, &r);
    r.stream = "c";
    r.v[FX_MSTREAM_BYTES_ON_DISK] = 4096;
    emit(sink, &r);
}

static void test_stream_sources_render_one_labelled_series_per_stream(void **state)
{
    (void)state;
    int calls = 0;
    fx_mstream_source src = {.on_collect = two_streams, .user = &calls};
    fx_metrics_stream_source_add(&src);
    char *text = render_all();
    parsed *p = parse_ok(text); /* also: the quote in a label value is escaped */
    assert_int_equal(calls, 1);
    const char *bytes = "felix_storage_stream_bytes_on_disk";
    assert_true(value_of(p, bytes, "namespace=\"default\",stream=\"c\",tenant=\"t1\"") == 4096);
    assert_true(value_of(p, bytes, "namespace=\"default\",stream=\"a\\\"b\",tenant=\"t1\"") == 10);
    assert_true(value_of(p, "felix_storage_stream_next_offset",
                         "namespace=\"default\",stream=\"c\",tenant=\"t1\"") ==
                10 + FX_MSTREAM_NEXT_OFFSET);
    free(p);
    free(text);
    /* Removed: no longer asked, its series are gone. */
    fx_metrics_stream_source_remove(&src);
    text = render_all();
    assert_int_equal(calls, 1);
    assert_null(strstr(text, "stream=\"c\""));
    free(text);
}

static void test_stream_sources_not_asked_without_per_stream(void **state)
{
    (void)state;
    int calls = 0;
    fx_mstream_source src = {.on_collect = two_streams, .user = &calls};
    fx_metrics_stream_source_add(&src);
    char *text = render_with(false);
    parsed *p = parse_ok(text);
    assert_int_equal(calls, 0);
    /* The families are declared, with no series and so no names. */
    for (size_t i = 0; i < FX_MSTREAM_N; i++) {
        p_family *f = find_family(p, fx_mstream_descs[i].name);
        assert_non_null(f);
        assert_string_equal(f->type, "gauge");
    }
    assert_null(strstr(text, "tenant=\""));
    assert_null(strstr(text, "stream=\"c\""));
    free(p);
    free(text);
    text = render_with(true);
    assert_int_equal(calls, 1);
    assert_non_null(strstr(text, "stream=\"c\""));
    free(text);
    fx_metrics_stream_source_remove(&src);
}

/* ---- fixed-bounds histograms, per-group series ----------------------------------- */

static void test_fixed_histogram_renders_its_bounds_in_seconds(void **state)
{
    (void)state;
    const fx_hist_fixed *fx = fx_hist_fixed_of(fx_hist_lo_group_redelivery_lateness);
    assert_non_null(fx);
    assert_int_equal(fx->n, 11);
    /* The bounds are the engine's (group_state.c): 100 us in the first, 250 ms in the last. */
    assert_int_equal(fx_hist_bucket_index(FX_HIST_FIXED_LATENESS, 0), 0);
    assert_int_equal(fx_hist_bucket_index(FX_HIST_FIXED_LATENESS, 100), 0);
    assert_int_equal(fx_hist_bucket_index(FX_HIST_FIXED_LATENESS, 101), 1);
    assert_int_equal(fx_hist_bucket_index(FX_HIST_FIXED_LATENESS, 250000), 10);
    assert_int_equal(fx_hist_bucket_index(FX_HIST_FIXED_LATENESS, 250001), 11);
    char *before = render_all();
    parsed *p = parse_ok(before);
    double c0 = value_of(p, "felix_group_redelivery_lateness_seconds_count", "");
    double b1 = value_of(p, "felix_group_redelivery_lateness_seconds_bucket", "le=\"0.00025\"");
    double s0 = value_of(p, "felix_group_redelivery_lateness_seconds_sum", "");
    free(p);
    free(before);
    FX_HIST_OBSERVE(group_redelivery_lateness, 200);      /* le 0.00025 */
    FX_HIST_ADD_BUCKET(group_redelivery_lateness, 11, 2); /* above 250 ms */
    FX_HIST_ADD_SUM(group_redelivery_lateness, 1500000);
    char *text = render_all();
    p = parse_ok(text);
    assert_true(value_of(p, "felix_group_redelivery_lateness_seconds_count", "") == c0 + 3);
    assert_true(value_of(p, "felix_group_redelivery_lateness_seconds_bucket", "le=\"0.00025\"") ==
                b1 + 1);
    assert_true(value_of(p, "felix_group_redelivery_lateness_seconds_bucket", "le=\"+Inf\"") ==
                c0 + 3);
    double s1 = value_of(p, "felix_group_redelivery_lateness_seconds_sum", "");
    assert_true(s1 - s0 > 1.5001 && s1 - s0 < 1.5003);
    /* Twelve buckets: eleven bounds and +Inf. */
    size_t nb = 0;
    for (const char *q = text;
         (q = strstr(q, "felix_group_redelivery_lateness_seconds_bucket{")) != NULL; q++)
        nb++;
    assert_int_equal(nb, 12);
    free(p);
    free(text);
}

static void two_groups(void *user, fx_mgroup_emit_fn emit, void *sink)
{
    int *calls = user;
    (*calls)++;
    fx_mgroup_row r = {.tenant = "t1", .ns = "default", .stream = "s", .group = "g1"};
    for (int i = 0; i < FX_MGROUP_N; i++)
        r.v[i] = 20 + i;
    emit(sink, &r);
    r.group = "g2";
    r.v[FX_MGROUP_LAG] = 7;
    emit(sink, &r);
}

static void test_group_sources_render_one_labelled_series_per_group(void **state)
{
    (void)state;
    int calls = 0;
    fx_mgroup_source src = {.on_collect = two_groups, .user = &calls};
    fx_metrics_group_source_add(&src);
    char *text = render_with(false);
    assert_int_equal(calls, 0); /* only with the per-stream series */
    assert_null(strstr(text, "group=\"g1\""));
    free(text);
    text = render_all();
    parsed *p = parse_ok(text);
    assert_int_equal(calls, 1);
    assert_true(value_of(p, "felix_consumer_group_lag",
                         "group=\"g2\",namespace=\"default\",stream=\"s\",tenant=\"t1\"") == 7);
    assert_true(value_of(p, "felix_consumer_group_acked_total",
                         "group=\"g1\",namespace=\"default\",stream=\"s\",tenant=\"t1\"") ==
                20 + FX_MGROUP_ACKED);
    free(p);
    free(text);
    fx_metrics_group_source_remove(&src);
    text = render_all();
    assert_int_equal(calls, 1);
    assert_null(strstr(text, "group=\"g1\""));
    free(text);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_parser_rejects_malformed_exposition),
    cmocka_unit_test(test_lists_cover_structs_and_names_are_unique),
    cmocka_unit_test(test_render_parses_as_prometheus_text),
    cmocka_unit_test(test_render_escapes_help_and_label_values),
    cmocka_unit_test(test_counters_from_many_threads_sum_exactly),
    cmocka_unit_test(test_shards_are_reused_after_thread_exit),
    cmocka_unit_test(test_gauge_add_sub_and_set),
    cmocka_unit_test(test_histogram_observe_puts_values_in_right_buckets),
    cmocka_unit_test(test_stream_sources_render_one_labelled_series_per_stream),
    cmocka_unit_test(test_stream_sources_not_asked_without_per_stream),
    cmocka_unit_test(test_fixed_histogram_renders_its_bounds_in_seconds),
    cmocka_unit_test(test_group_sources_render_one_labelled_series_per_group),
};
FX_TEST_MAIN(tests)
