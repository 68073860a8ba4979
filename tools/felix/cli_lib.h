/* The pure layer of the felix CLI: option and argument parsing, stream path
 * parsing, publish pacing, Prometheus text parsing and the checkpoint table,
 * payload escaping and JSON event lines, and the help texts. No sockets, no
 * clocks, no globals that change: callers pass `now` and the environment.
 * Any thread (the CLI is single threaded apart from libfelix's own loop). */
#ifndef FX_CLI_LIB_H
#define FX_CLI_LIB_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "felix/felix.h"

/* Exit statuses of every felix command (docs/cli.md). */
enum {
    FX_CLI_EXIT_OK = 0,     /* success */
    FX_CLI_EXIT_FAIL = 1,   /* the broker, the admin endpoint or the system refused */
    FX_CLI_EXIT_USAGE = 2,  /* bad command line or environment: nothing was attempted */
    FX_CLI_EXIT_INTR = 130, /* `felix pub` interrupted by SIGINT/SIGTERM */
};

/* Longest tenant, namespace or stream name (the wire's u16 length prefix is
 * far larger; 255 bytes keeps command lines and URLs sane). */
#define FX_CLI_NAME_MAX 255

/* ---- growable text buffer ------------------------------------------------ */

/* A NUL-terminated string that grows by doubling. Zero-initialise it; after
 * an allocation failure |oom| stays set and further appends do nothing.
 * Release with fx_cli_buf_free. */
typedef struct fx_cli_buf {
    char *p;
    size_t len;
    size_t cap;
    bool oom;
} fx_cli_buf;

/* Appends |n| bytes of |s|. Returns 0 or -ENOMEM (then |b->oom| is set). */
int fx_cli_buf_add(fx_cli_buf *b, const void *s, size_t n);
/* Appends printf-formatted text. Returns 0 or -ENOMEM. */
int fx_cli_buf_printf(fx_cli_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties |b| keeping its memory. */
void fx_cli_buf_reset(fx_cli_buf *b);
/* Frees the memory of |b| and zeroes it. */
void fx_cli_buf_free(fx_cli_buf *b);

/* ---- option parsing --------------------------------------------------------- */

/* |has_arg| of an option whose value is optional: "--name=value", or the
 * next word when that is a decimal number (so a path or an option after it
 * is never taken), else none (NULL). */
#define FX_CLI_NUM_ARG 2

/* One long option, "--name" or "--name=value" / "--name value" when
 * |has_arg| is true (FX_CLI_NUM_ARG: see above). A table ends with a zero
 * entry (name NULL). */
typedef struct fx_cli_opt {
    const char *name;
    int has_arg; /* false, true or FX_CLI_NUM_ARG */
    int id;
} fx_cli_opt;

/* Iterator over argv. |i| is the next index. After "--" every word is a
 * positional argument; "-" alone is positional (stdin). */
typedef struct fx_cli_args {
    int argc;
    char **argv;
    int i;
    bool only_positional;
} fx_cli_args;

enum {
    FX_CLI_ARG_END = 0, /* no more words */
    FX_CLI_ARG_OPT,     /* an option: *id and *val (NULL without argument) */
    FX_CLI_ARG_POS,     /* a positional word in *val */
};

/* Takes the next word of |a| and classifies it against |opts|. Returns one
 * of FX_CLI_ARG_*, or -EINVAL with a one-line reason in |err| (unknown
 * option, missing or unexpected value). |*val| points into argv. */
int fx_cli_args_next(fx_cli_args *a, const fx_cli_opt *opts, int *id, const char **val, char *err,
                     size_t errlen);

/* Parses a decimal unsigned integer (no sign, no spaces) of at most |max|.
 * Returns 0 or -EINVAL. */
int fx_cli_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Parses a byte size: a decimal number optionally followed by K, M or G
 * (powers of 1024), at most |max|. Returns 0 or -EINVAL. */
int fx_cli_parse_size(const char *s, uint64_t max, uint64_t *out);

/* Parses a positive finite rate (messages per second, decimals allowed) up
 * to 10^9. Returns 0 or -EINVAL. */
int fx_cli_parse_rate(const char *s, double *out);

/* Parses "none", "per_message" or "per_batch" (also "per-message",
 * "per-batch"). Returns 0 or -EINVAL. */
int fx_cli_parse_ack(const char *s, fx_ack *out);

/* Returns the canonical name of |ack| ("none", "per_message", ...). */
const char *fx_cli_ack_name(fx_ack ack);

/* Parses "earliest", "latest" or a decimal offset. Returns 0 or -EINVAL. */
int fx_cli_parse_start(const char *s, fx_start *out);

/* ---- stream paths -------------------------------------------------------------- */

/* TENANT/NS/STREAM split into NUL-terminated names. */
typedef struct fx_cli_path {
    char tenant[FX_CLI_NAME_MAX + 1];
    char ns[FX_CLI_NAME_MAX + 1];
    char stream[FX_CLI_NAME_MAX + 1];
} fx_cli_path;

/* Parses |s| as exactly three non-empty '/'-separated segments of at most
 * FX_CLI_NAME_MAX bytes each, without control bytes. Returns 0, or -EINVAL
 * with the reason in |err|. */
int fx_cli_path_parse(const char *s, fx_cli_path *out, char *err, size_t errlen);

/* ---- common connection options ------------------------------------------------ */

/* Longest secret read by --token-file / --admin-token-file (the broker's
 * token limit is 8 KiB). */
#define FX_CLI_SECRET_MAX 8192

/* The flags every command shares. Strings point into argv, the environment
 * or the struct's own buffers (secrets read from files). The *_set flags
 * record that a value came from the command line or the environment (not a
 * default). */
typedef struct fx_cli_common {
    const char *server;      /* --server, FELIX_SERVER; "127.0.0.1:5000" */
    const char *server_name; /* --server-name, FELIX_SERVER_NAME; NULL: server's host */
    const char *tenant;      /* --tenant, FELIX_TENANT; "t1" */
    const char *token;       /* --token, --token-file, FELIX_TOKEN; "" */
    const char *ca_file;     /* --ca, FELIX_CA */
    const char *pin;         /* --pin, FELIX_PIN */
    bool insecure;           /* --insecure, FELIX_INSECURE=1 */
    const char *admin;       /* --admin, FELIX_ADMIN; "127.0.0.1:8080" */
    const char *admin_token; /* --admin-token, --admin-token-file, FELIX_ADMIN_TOKEN; NULL */
    int timeout_ms;          /* --connect-timeout-ms; 5000 */
    bool tenant_set;
    /* --token-file / --admin-token-file paths, read by fx_cli_common_finish. */
    const char *token_file;
    const char *admin_token_file;
    bool token_flag, admin_token_flag; /* --token / --admin-token given */
    char token_buf[FX_CLI_SECRET_MAX + 1];
    char admin_token_buf[FX_CLI_SECRET_MAX + 1];
    bool idempotent; /* `felix pub --idempotent` (fx_client_opts.idempotent) */
} fx_cli_common;

/* Option ids of the common flags; command-specific ids start at
 * FX_CLI_OPT_FIRST_CMD. */
enum {
    FX_CLI_OPT_HELP = 1,
    FX_CLI_OPT_SERVER,
    FX_CLI_OPT_SERVER_NAME,
    FX_CLI_OPT_TENANT,
    FX_CLI_OPT_TOKEN,
    FX_CLI_OPT_CA,
    FX_CLI_OPT_PIN,
    FX_CLI_OPT_INSECURE,
    FX_CLI_OPT_ADMIN,
    FX_CLI_OPT_ADMIN_TOKEN,
    FX_CLI_OPT_CONNECT_TIMEOUT,
    FX_CLI_OPT_TOKEN_FILE,
    FX_CLI_OPT_ADMIN_TOKEN_FILE,
    FX_CLI_OPT_FIRST_CMD = 100,
};

/* Initialiser entries for the common flags, to place in a command's table. */
#define FX_CLI_COMMON_OPTS                                                                         \
    {"help", false, FX_CLI_OPT_HELP}, {"server", true, FX_CLI_OPT_SERVER},                         \
        {"server-name", true, FX_CLI_OPT_SERVER_NAME}, {"tenant", true, FX_CLI_OPT_TENANT},        \
        {"token", true, FX_CLI_OPT_TOKEN}, {"ca", true, FX_CLI_OPT_CA},                            \
        {"pin", true, FX_CLI_OPT_PIN}, {"insecure", false, FX_CLI_OPT_INSECURE},                   \
        {"admin", true, FX_CLI_OPT_ADMIN}, {"admin-token", true, FX_CLI_OPT_ADMIN_TOKEN},          \
        {"token-file", true, FX_CLI_OPT_TOKEN_FILE},                                               \
        {"admin-token-file", true, FX_CLI_OPT_ADMIN_TOKEN_FILE},                                   \
    {                                                                                              \
        "connect-timeout-ms", true, FX_CLI_OPT_CONNECT_TIMEOUT                                     \
    }

/* Looks a variable up; getenv, or a table in tests. */
typedef const char *(*fx_cli_getenv_fn)(const char *name);

/* Fills |c| with the defaults, then overlays the FELIX_* variables above
 * that are set and non-empty, read through |env|. Returns 0, or -EINVAL
 * with |err| naming the variable (FELIX_INSECURE other than 0/1,
 * FELIX_CONNECT_TIMEOUT_MS not a number). */
int fx_cli_common_init(fx_cli_common *c, fx_cli_getenv_fn env, char *err, size_t errlen);

/* Applies common option |id| with value |val| to |c|. Returns 1 if |id| is
 * a common option and was applied, 0 if it is not a common option, -EINVAL
 * with |err| for a bad value. FX_CLI_OPT_HELP is not handled (returns 0). */
int fx_cli_common_apply(fx_cli_common *c, int id, const char *val, char *err, size_t errlen);

/* Reads the secret in file |path| into |out| (|cap| bytes, NUL-terminated):
 * the whole file less trailing spaces, tabs and line ends. Refuses an empty
 * secret, one longer than |cap| - 1 bytes, and one holding a NUL, a line end
 * or another control byte inside. Returns 0, -EINVAL with a one-line |err|
 * naming |path| and |what| ("--token-file"), or a negative errno (unreadable
 * file, named in |err| too). */
int fx_cli_read_secret(const char *path, const char *what, char *out, size_t cap, char *err,
                       size_t errlen);

/* Reads the secrets named by --token-file and --admin-token-file into |c|
 * after every option was applied (a file given with the same secret's flag
 * too is a usage error; a file wins over the environment). Returns 0, or
 * -EINVAL / -errno with a one-line |err|. */
int fx_cli_common_finish(fx_cli_common *c, char *err, size_t errlen);

/* Checks that the data-plane commands have exactly one way to trust the
 * broker (ca_file, pin or insecure: a pin and a CA file would each decide
 * alone, so both are refused) and a tenant consistent with |path| (when not
 * NULL): the path's tenant becomes c->tenant unless a tenant was given,
 * which must then be equal. Returns 0 or -EINVAL with a one-line |err| that
 * says how to fix it. */
int fx_cli_common_check(fx_cli_common *c, const fx_cli_path *path, char *err, size_t errlen);

/* Writes the base URL of the admin endpoint for c->admin into |out|:
 * "http://HOST:PORT" (a value already starting with http:// or https:// is
 * kept). Returns 0 or -EINVAL (empty, or longer than |outlen|). */
int fx_cli_admin_url(const char *admin, const char *suffix, char *out, size_t outlen);

/* ---- consumer groups (felix groups) --------------------------------------------- */

/* Longest consumer group name the broker accepts. */
#define FX_CLI_GROUP_MAX 128

/* Checks a consumer group name: 1 to FX_CLI_GROUP_MAX bytes, no '/' (the
 * admin endpoint splits paths at it) and no control bytes. Returns 0 or
 * -EINVAL with the reason in |err|. */
int fx_cli_group_check(const char *group, char *err, size_t errlen);

/* Writes the body of a group create or seek for --start |start| ("all",
 * "new", "last" or a decimal offset) into |out|: {"start":"new"} or
 * {"start":{"offset":N}}. Returns 0, or -EINVAL with the reason in |err|
 * (also when |out| is too small). */
int fx_cli_group_start_body(const char *start, char *out, size_t len, char *err, size_t errlen);

/* Writes the admin path /v1/streams/T/NS/S/groups of |p|, followed by
 * "/GROUP" when |group| is not NULL and "/ACTION" when |action| is not NULL
 * (seek, dead-letters), each name percent-encoded (all but A-Z a-z 0-9 - . _
 * ~), into |out|. Returns 0 or -EINVAL (|out| too small). */
int fx_cli_group_route(const fx_cli_path *p, const char *group, const char *action, char *out,
                       size_t len);

/* ---- publish pacing ------------------------------------------------------------- */

/* Paces sends at |rate| per second on an absolute schedule (send k is due
 * at start + k / rate), so sleeping late does not accumulate drift. After a
 * stall it does not catch up with a burst longer than |max_burst| sends. A
 * rate of 0 means unpaced. Times are in nanoseconds of a monotonic clock. */
typedef struct fx_cli_pacer {
    double interval_ns; /* 0: unpaced */
    uint64_t start_ns;
    uint64_t sent; /* sends accounted since start_ns */
    uint64_t max_burst;
} fx_cli_pacer;

/* Starts |p| at |now_ns|. |rate| 0 disables pacing; |max_burst| 0 means 1. */
void fx_cli_pacer_init(fx_cli_pacer *p, double rate, uint64_t max_burst, uint64_t now_ns);

/* Returns how many nanoseconds to wait at |now_ns| before the next |n|
 * sends may go (0: now). Does not account them. */
uint64_t fx_cli_pacer_delay(const fx_cli_pacer *p, uint64_t n, uint64_t now_ns);

/* Accounts |n| sends made at |now_ns|. When the sender is more than
 * |max_burst| sends behind the schedule, the schedule restarts at now. */
void fx_cli_pacer_sent(fx_cli_pacer *p, uint64_t n, uint64_t now_ns);

/* ---- Prometheus text ------------------------------------------------------------ */

/* One sample: metric name, labels normalised to `k=v` pairs joined by ','
 * in the order written (values unescaped; "" without labels), value. */
typedef struct fx_cli_sample {
    char *name;
    char *labels;
    double value;
} fx_cli_sample;

/* A parsed exposition. Zero-initialise; release with fx_cli_prom_free. */
typedef struct fx_cli_prom {
    fx_cli_sample *v;
    size_t n;
    size_t cap;
} fx_cli_prom;

/* At most this many samples are kept from one scrape. */
#define FX_CLI_PROM_MAX_SAMPLES 65536

/* Parses Prometheus text format 0.0.4 from |text| (|len| bytes, no NUL
 * needed) into |p|, which must be empty. Comments and blank lines are
 * skipped; timestamps are ignored. Returns 0; -EINVAL with the line number
 * in |err| for a malformed sample line or more than FX_CLI_PROM_MAX_SAMPLES
 * samples; -ENOMEM. |p| may hold part of the samples after an error: free
 * it either way. */
int fx_cli_prom_parse(fx_cli_prom *p, const char *text, size_t len, char *err, size_t errlen);

/* Finds the sample |name| whose normalised labels equal |labels| (NULL or
 * "" for none) and stores its value. Returns true if found. */
bool fx_cli_prom_get(const fx_cli_prom *p, const char *name, const char *labels, double *out);

/* Releases what |p| holds and zeroes it. */
void fx_cli_prom_free(fx_cli_prom *p);

/* One row of the checkpoint table. */
typedef struct fx_cli_stat_row {
    const char *checkpoint; /* "3-4 broker ingress" */
    const char *what;       /* "dropped" */
    const char *metric;     /* Prometheus name */
    const char *labels;     /* normalised labels or NULL */
    bool gauge;
    bool present; /* the broker exported it */
    double value;
    bool has_rate; /* a counter with a previous scrape */
    double rate;   /* per second */
} fx_cli_stat_row;

/* Number of rows fx_cli_stats_rows fills. */
size_t fx_cli_stats_nrows(void);

/* Fills |rows| (fx_cli_stats_nrows() entries) from the scrape |cur| and,
 * when |prev| is not NULL and |dt_s| > 0, per-second rates of the counters
 * from the earlier scrape |prev|. A metric the broker does not export is a
 * row with present=false, never a made-up zero. */
void fx_cli_stats_rows(const fx_cli_prom *cur, const fx_cli_prom *prev, double dt_s,
                       fx_cli_stat_row *rows);

/* Renders |n| rows as an aligned text table into |out|: checkpoint, what,
 * value ("-" when absent), rate/s (when any row has one), metric name.
 * Returns 0 or -ENOMEM. */
int fx_cli_stats_table(const fx_cli_stat_row *rows, size_t n, fx_cli_buf *out);

/* ---- payload output ------------------------------------------------------------ */

/* Returns true if |p| of |n| bytes is valid UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
bool fx_cli_utf8_valid(const uint8_t *p, size_t n);

/* Appends |p| as one printable line fragment: printable ASCII and valid
 * UTF-8 characters from U+00A0 up as they are; backslash as "\\"; \n, \r,
 * \t as "\n", "\r", "\t"; every other byte (controls, DEL, C1 controls,
 * invalid UTF-8) as "\xNN". Returns 0 or -ENOMEM. */
int fx_cli_escape_payload(const uint8_t *p, size_t n, fx_cli_buf *out);

/* Makes the NUL-terminated |s| safe to print in a table cell or on one
 * line, in place (it never grows): each C0 control (below 0x20) becomes a
 * space; DEL, C1 controls (U+0080-U+009F, such as U+009B CSI), the bidi
 * overrides and isolates (U+202A-U+202E, U+2066-U+2069) and bytes that are
 * not valid UTF-8 each become one '?'. Other UTF-8 text stays as it is. */
void fx_cli_cell_clean(char *s);

/* Appends standard base64 (with padding) of |p|. Returns 0 or -ENOMEM. */
int fx_cli_base64(const uint8_t *p, size_t n, fx_cli_buf *out);

/* Appends one JSON object line (with '\n') for |ev|:
 * {"offset":N|null,"len":L,"payload":"...","gap":G,"recv_ms":T} where
 * payload is the UTF-8 text JSON-escaped when valid, else base64 followed
 * by "encoding":"base64"; "gap" appears only with FX_EVENT_GAP; recv_ms is
 * |recv_ms| (the client's receive time, Unix milliseconds). Returns 0 or
 * -ENOMEM. */
int fx_cli_json_event(const fx_event *ev, uint64_t recv_ms, fx_cli_buf *out);

/* Appends one JSON object line (with '\n') for the group record |m|:
 * {"offset":N,"len":L,"payload":"...","attempt":A,"skipped":S,"recv_ms":T},
 * the payload as in fx_cli_json_event; "skipped" appears only when not 0.
 * Returns 0 or -ENOMEM. */
int fx_cli_json_group_msg(const fx_group_msg *m, uint64_t recv_ms, fx_cli_buf *out);

/* Fills |out| with a generated payload of exactly |size| bytes for message
 * number |seq|: its decimal number, a space, then 'x' up to |size|
 * (truncated when |size| is smaller). */
void fx_cli_gen_payload(uint64_t seq, uint8_t *out, size_t size);

/* ---- help -------------------------------------------------------------------- */

/* One command's help: its name, a one-line summary, the usage text (with
 * its own options) and at least one example command line. */
typedef struct fx_cli_help {
    const char *name;
    const char *summary;
    const char *usage;
    const char *example;
    bool common_flags; /* takes the common connection flags */
} fx_cli_help;

/* Returns the help entries of every command and their count in |*n|. */
const fx_cli_help *fx_cli_help_all(size_t *n);

/* Returns the help of command |name| ("pub", "streams"), or NULL. */
const fx_cli_help *fx_cli_help_find(const char *name);

/* Appends the full help of |h| (usage, options, common flags, example) or,
 * with |h| NULL, the top-level help (every command with an example). Returns
 * 0 or -ENOMEM. */
int fx_cli_help_text(const fx_cli_help *h, fx_cli_buf *out);

#endif
