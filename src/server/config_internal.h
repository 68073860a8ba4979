/* Private to src/server/config*.c: the key registry type and the helpers the
 * three parts of the configuration share. config.c owns the registry, the
 * defaults, load orchestration and the cross-key rules; config_parse.c the
 * value parsers and the YAML, environment and --set layers; config_print.c
 * --print-config and the Markdown tables. Main thread only, like config.h. */
#ifndef FX_SERVER_CONFIG_INTERNAL_H
#define FX_SERVER_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/config.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)
#define US 1000ull
#define MS (1000ull * US)
#define SEC (1000ull * MS)
#define HOUR (3600ull * SEC)

/* ---- the registry ------------------------------------------------------ */

enum ktype {
    T_BOOL,
    T_U32,
    T_WORKERS, /* "auto" or a positive count */
    T_SIZE,
    T_DUR,
    T_ENUM,
    T_STR,
    T_ADDR,
    T_STREAMS,
    T_GROUPS,
    T_CACHES, /* tenant/namespace/cache strings, stored as fx_config_stream */
    T_WARN,   /* a feature Felix-C does not have: warn, load anyway */
    T_REJECT, /* meaningless here: refuse to start */
};

struct enum_def {
    const char *names[5]; /* index = enum value */
    const char *expect;   /* "block, drop_new or drop_old" */
    const char *refused;  /* a value the original knows that we refuse, or NULL */
    const char *refused_why;
    /* Other spellings: returns the value of |s|, or -1. NULL: none. */
    int (*alias)(const char *s);
};

struct key {
    const char *name;
    const char *alias; /* a second YAML name, or NULL */
    const char *env[3];
    enum ktype type;
    const char *section; /* set on the first key of a section */
    size_t off, size;
    const char *def;
    uint64_t min, max; /* numbers: value bounds; strings: minimum length in |min| */
    const struct enum_def *en;
    const char *help; /* T_WARN / T_REJECT: the reason given to the user */
};

/* Every key, in print and documentation order; an fx_config_origin index is
 * an index into this table. At most FX_CONFIG_MAX_KEYS entries. */
extern const struct key fx_config_keys[];
extern const size_t fx_config_nkeys;

/* Unknown keys with these prefixes ({prefix, reason}) are features of the
 * original that Felix-C lacks: they warn instead of failing. */
#define FX_CONFIG_NPREFIX_WARN 2
extern const char *const fx_config_prefix_warn[FX_CONFIG_NPREFIX_WARN][2];

/* The field of key |k| inside |c|. */
static inline void *fx_config_field(fx_config *c, const struct key *k)
{
    return (char *)c + k->off;
}

static inline const void *fx_config_cfield(const fx_config *c, const struct key *k)
{
    return (const char *)c + k->off;
}

/* The value of numeric key |i| (count, size or duration) of |c|. */
uint64_t fx_config_get_u64(const fx_config *c, int i);

/* ---- diagnostics (config.c) -------------------------------------------- */

/* Writes the message to |d|->error and returns FX_ECONFIG. */
int fx_config_fail(fx_config_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends a warning to |d|, or counts it in warnings_dropped when full. */
void fx_config_warn(fx_config_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- values and layers (config_parse.c) -------------------------------- */

/* Parses text |s| for key |k| and stores it in |c|. Returns 0, -1 (reason in
 * |why|, |n| bytes) or -ENOMEM. T_WARN / T_REJECT keys are the callers'. */
int fx_config_store_text(fx_config *c, const struct key *k, const char *s, char *why, size_t n);

/* Checks that |s| is "host:port" or "[v6]:port" (as T_ADDR keys). Returns 0
 * or -1 with the reason in |why| (|n| bytes). */
int fx_config_check_addr(const char *s, char *why, size_t n);

/* Writes |v| in the largest unit of |k|'s type that divides it exactly. */
void fx_config_format_number(const struct key *k, uint64_t v, char *buf, size_t n);

/* Loads |src|->text, else the file at |path| (NULL = no file), into |c|.
 * Returns 0, FX_ECONFIG (message in |d|) or -ENOMEM. */
int fx_config_load_file_layer(fx_config *c, const fx_config_src *src, const char *path,
                              fx_config_diag *d);

/* Applies the FELIX_* variables of |envp| (NULL = none). Same returns. */
int fx_config_load_env_layer(fx_config *c, char *const *envp, fx_config_diag *d);

/* Applies one --set "key=value" |set|. Same returns. */
int fx_config_load_flag(fx_config *c, const char *set, fx_config_diag *d);

/* ---- the memory bound (config_memory.c) ------------------------------- */

/* Fills in the memory target when memory_limit_bytes is 0: |given| if not
 * 0, else the host's (fx_config_host_memory()); notes the source in the
 * key's origin. Warns if nothing is known. Returns 0. */
int fx_config_resolve_memory_target(fx_config *c, uint64_t given, fx_config_diag *d);

/* Lowers the defaults of quic_conn_recv_window_max (and the initial
 * window), then max_connections, until the bound fits the target. Explicit
 * settings are kept. */
void fx_config_derive_memory(fx_config *c);

/* Fails when the bound exceeds the target and some key of the bound was set
 * explicitly (naming them); warns when only defaults are involved. */
int fx_config_check_memory(const fx_config *c, fx_config_diag *d);

/* ---- text forms (config_print.c) --------------------------------------- */

/* Where a value came from, for messages: "x.yaml:3:7", "env FELIX_X", ... */
void fx_config_format_where(const fx_config *c, const fx_config_origin *o, char *buf, size_t n);

/* Key |i|'s value in |c| as YAML text ("64MiB", "auto", "[3 streams]"). */
void fx_config_format_value(const fx_config *c, int i, char *buf, size_t n);

#endif
