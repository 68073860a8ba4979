/* Configuration output: --print-config (the effective values as YAML that
 * loads back, each with its source) and the Markdown reference tables of
 * docs/configuration.md, both generated from the key registry; also the text
 * forms of values and origins that error messages reuse. Main thread only. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/config_internal.h"

/* ---- text forms -------------------------------------------------------- */

/* Where a value came from, for messages: "x.yaml:3:7", "env FELIX_X", ... */
void fx_config_format_where(const fx_config *c, const fx_config_origin *o, char *buf, size_t n)
{
    switch (o->from) {
    case FX_CONFIG_FROM_DEFAULT:
        snprintf(buf, n, "default");
        break;
    case FX_CONFIG_FROM_FILE:
        snprintf(buf, n, "%s:%u:%u", c->file, o->line, o->col);
        break;
    case FX_CONFIG_FROM_ENV:
        snprintf(buf, n, "env %s", o->name);
        break;
    case FX_CONFIG_FROM_FLAG:
        snprintf(buf, n, "flag --set");
        break;
    }
}

static bool plain_ok(const char *s)
{
    if (!*s || strchr("[{&*!|>'\"%@`-?:,#~ ", *s))
        return false;
    for (; *s; s++) {
        if (!isalnum((unsigned char)*s) && !strchr("._/-:", *s))
            return false;
    }
    return true;
}

/* Writes |s| as a YAML scalar: plain when that is unambiguous, else double-
 * quoted with escapes. |n| must be at least 4 * strlen(s) + 3. */
static void format_string(const char *s, char *buf, size_t n)
{
    if (plain_ok(s) && strcasecmp(s, "null") != 0) {
        snprintf(buf, n, "%s", s);
        return;
    }
    size_t o = 0;
    buf[o++] = '"';
    for (; *s && o + 6 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            o += (size_t)snprintf(buf + o, n - o, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
        else
            buf[o++] = (char)ch;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

void fx_config_format_value(const fx_config *c, int i, char *buf, size_t n)
{
    const struct key *k = &fx_config_keys[i];
    int e;
    switch (k->type) {
    case T_BOOL:
        snprintf(buf, n, "%s", *(const bool *)fx_config_cfield(c, k) ? "true" : "false");
        break;
    case T_WORKERS:
        if (c->workers_auto) {
            snprintf(buf, n, "auto");
            break;
        }
        /* fall through */
    case T_U32:
    case T_SIZE:
    case T_DUR:
        fx_config_format_number(k, fx_config_get_u64(c, i), buf, n);
        break;
    case T_ENUM:
        memcpy(&e, fx_config_cfield(c, k), sizeof(e));
        snprintf(buf, n, "%s", k->en->names[e]);
        break;
    case T_STR:
    case T_ADDR:
        format_string((const char *)fx_config_cfield(c, k), buf, n);
        break;
    case T_STREAMS:
        snprintf(buf, n, "[%zu streams]", c->nstreams);
        break;
    case T_GROUPS:
        snprintf(buf, n, "[%zu groups]", c->ngroups);
        break;
    case T_CACHES:
        snprintf(buf, n, "[%zu caches]", c->ncaches);
        break;
    case T_WARN:
    case T_REJECT:
        buf[0] = '\0';
        break;
    }
}

/* ---- --print-config ---------------------------------------------------- */

static void print_streams(const fx_config *c, FILE *out)
{
    fprintf(out, "streams: [");
    for (size_t i = 0; i < c->nstreams; i++)
        fprintf(out, "%s%s/%s/%s", i ? ", " : "", c->streams[i].tenant, c->streams[i].ns,
                c->streams[i].stream);
    fprintf(out, "]");
}

static void print_caches(const fx_config *c, FILE *out)
{
    fprintf(out, "caches: [");
    for (size_t i = 0; i < c->ncaches; i++)
        fprintf(out, "%s%s/%s/%s%s", i ? ", " : "", c->caches[i].tenant, c->caches[i].ns,
                c->caches[i].stream, c->caches[i].durable ? "@durable" : "");
    fprintf(out, "]");
}

/* Groups print quoted: a group name may hold YAML's flow characters. */
static void print_groups(const fx_config *c, FILE *out)
{
    static const char *const starts[] = {"all", "new", "last"};
    char item[FX_CONFIG_NAME_MAX * 3 + FX_CONFIG_GROUP_MAX + 32], quoted[4 * sizeof(item) + 3];
    fprintf(out, "groups: [");
    for (size_t i = 0; i < c->ngroups; i++) {
        const fx_config_group *g = &c->groups[i];
        char start[24];
        if (g->start == FX_CONFIG_GROUP_START_OFFSET)
            snprintf(start, sizeof(start), "%llu", (unsigned long long)g->offset);
        else
            snprintf(start, sizeof(start), "%s", starts[g->start]);
        snprintf(item, sizeof(item), "%s/%s/%s/%s@%s", g->s.tenant, g->s.ns, g->s.stream, g->group,
                 start);
        format_string(item, quoted, sizeof(quoted));
        fprintf(out, "%s%s", i ? ", " : "", quoted);
    }
    fprintf(out, "]");
}

static void print_origin(const fx_config *c, int i, FILE *out)
{
    const fx_config_origin *o = &c->origin[i];
    char where[FX_CONFIG_PATH_MAX + 64];
    fx_config_format_where(c, o, where, sizeof(where));
    if (o->from == FX_CONFIG_FROM_FILE)
        snprintf(where, sizeof(where), "%s:%u", c->file, o->line);
    fprintf(out, "  # %s", where);
    if (o->name && o->from != FX_CONFIG_FROM_ENV)
        fprintf(out, " (as %s)", o->name);
    if (fx_config_keys[i].type == T_WORKERS && c->workers_auto)
        fprintf(out, " (%u online CPUs)", c->workers);
    if (o->note)
        fprintf(out, "; %s", o->note);
    fputc('\n', out);
}

/* Keys whose values are credentials. */
static bool is_secret(const struct key *k)
{
    size_t n = strlen(k->name);
    return n >= 6 && strcmp(k->name + n - 6, "_token") == 0;
}

int fx_config_print(const fx_config *c, FILE *out)
{
    char val[4 * FX_CONFIG_PATH_MAX + 8];
    fprintf(out, "# felix-broker effective configuration (file: %s)\n",
            c->file[0] ? c->file : "none");
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        if (k->section)
            fprintf(out, "\n# --- %s ---\n", k->section);
        if (k->type == T_STREAMS) {
            print_streams(c, out);
        } else if (k->type == T_GROUPS) {
            print_groups(c, out);
        } else if (k->type == T_CACHES) {
            print_caches(c, out);
        } else {
            fx_config_format_value(c, (int)i, val, sizeof(val));
            /* Secrets are never printed: the output goes to terminals and logs. */
            if (is_secret(k) && val[0] && strcmp(val, "\"\"") != 0)
                snprintf(val, sizeof(val), "'<redacted>'");
            fprintf(out, "%s: %s", k->name, val);
        }
        print_origin(c, (int)i, out);
    }
    return ferror(out) ? -EIO : 0;
}

/* ---- Markdown ---------------------------------------------------------- */

static void md_type(const struct key *k, char *buf, size_t n)
{
    char lo[32], hi[32];
    fx_config_format_number(k, k->min, lo, sizeof(lo));
    fx_config_format_number(k, k->max, hi, sizeof(hi));
    switch (k->type) {
    case T_BOOL:
        snprintf(buf, n, "bool");
        break;
    case T_U32:
        snprintf(buf, n, "integer %s..%s", lo, hi);
        break;
    case T_WORKERS:
        snprintf(buf, n, "`auto` or integer %s..%s", lo, hi);
        break;
    case T_SIZE:
        snprintf(buf, n, "size %s..%s", lo, hi);
        break;
    case T_DUR:
        snprintf(buf, n, "duration %s..%s", lo, hi);
        break;
    case T_ENUM:
        snprintf(buf, n, "%s", k->en->expect);
        break;
    case T_STR:
        snprintf(buf, n, "%s", k->min ? "path" : "path or empty");
        break;
    case T_ADDR:
        snprintf(buf, n, "host:port");
        break;
    case T_STREAMS:
        snprintf(buf, n, "list of tenant/namespace/stream");
        break;
    case T_GROUPS:
        snprintf(buf, n, "list of tenant/namespace/stream/group[@start]");
        break;
    case T_CACHES:
        snprintf(buf, n, "list of tenant/namespace/cache");
        break;
    case T_WARN:
    case T_REJECT:
        buf[0] = '\0';
        break;
    }
}

static void md_names(const struct key *k, FILE *out)
{
    fprintf(out, "| `%s`", k->name);
    if (k->alias)
        fprintf(out, " (alias `%s`)", k->alias);
    fprintf(out, " | ");
    for (size_t j = 0; j < 3 && k->env[j]; j++)
        fprintf(out, "%s`%s`%s", j ? ", " : "", k->env[j], j ? " (alias)" : "");
    if (!k->env[0])
        fprintf(out, "-");
}

/* One row per key of |type| (T_WARN or T_REJECT): names and the reason. */
static void md_reasons(enum ktype type, FILE *out)
{
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        if (fx_config_keys[i].type != type)
            continue;
        md_names(&fx_config_keys[i], out);
        fprintf(out, " | %s |\n", fx_config_keys[i].help);
    }
}

/* The main table: every key Felix-C reads, grouped by section. */
static void md_keys(FILE *out)
{
    char type[128];
    fprintf(out, "| Key | Environment | Type | Default | Meaning |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        if (k->section)
            fprintf(out, "| **%s** | | | | |\n", k->section);
        md_type(k, type, sizeof(type));
        md_names(k, out);
        fprintf(out, " | %s | `%s` | %s |\n", type,
                k->type == T_STREAMS || k->type == T_GROUPS || k->type == T_CACHES
                    ? "[]"
                    : (k->def[0] ? k->def : "\"\""),
                k->help);
    }
}

int fx_config_print_markdown(FILE *out)
{
    md_keys(out);
    fprintf(out, "\nKeys of the original that load with a warning:\n\n"
                 "| Key | Environment | Why |\n|---|---|---|\n");
    md_reasons(T_WARN, out);
    fprintf(out,
            "| `cache_*` (other keys) | `FELIX_CACHE_*` | %s |\n"
            "| `durable_*` | `FELIX_DURABLE_*` | %s |\n",
            fx_config_prefix_warn[0][1], fx_config_prefix_warn[1][1]);
    fprintf(out, "\nKeys of the original that stop start-up:\n\n"
                 "| Key | Environment | Why |\n|---|---|---|\n");
    md_reasons(T_REJECT, out);
    return ferror(out) ? -EIO : 0;
}
