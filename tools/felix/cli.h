/* The felix command-line tool: entry points of its commands and the few
 * helpers they share (error lines, signals, connecting through libfelix,
 * HTTP to the admin endpoint). Main thread only. */
#ifndef FX_CLI_H
#define FX_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli_lib.h"
#include "felix/felix.h"

/* Commands: |argc|/|argv| start after the command word. Each returns an
 * FX_CLI_EXIT_* status. */
int fx_cli_pub(int argc, char **argv);
int fx_cli_sub(int argc, char **argv);
/* `felix consume --group G`: one member of a consumer group (consume.c). */
int fx_cli_consume(int argc, char **argv);
int fx_cli_stats(int argc, char **argv);
int fx_cli_streams(int argc, char **argv);
int fx_cli_groups(int argc, char **argv);
int fx_cli_token(int argc, char **argv);
/* `felix bench`: execs felix-bench (built beside felix) with the same arguments. */
int fx_cli_bench(int argc, char **argv);
/* `felix log inspect|verify DIR`: reads durable storage files (log_cmd.c). */
int fx_cli_log(int argc, char **argv);
/* `felix cache put|get|del`: one cache request (cache_cmd.c). */
int fx_cli_cache(int argc, char **argv);

/* `felix cluster status`: GET /v1/cluster (cluster_cmd.c). */
int fx_cli_cluster(int argc, char **argv);

/* Prints "felix CMD: <message>" as one line on stderr. */
void fx_cli_errorf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the help of command |name| to stdout. Returns FX_CLI_EXIT_OK. */
int fx_cli_print_help(const char *name);

/* Prints a usage error line plus "see 'felix CMD --help'" and returns
 * FX_CLI_EXIT_USAGE. */
int fx_cli_usage_error(const char *cmd, const char *msg);

/* getenv(3) with the type fx_cli_common_init takes. */
const char *fx_cli_getenv(const char *name);

/* A command's own option: applies |id| with value |val| to |user|. Returns
 * 0, or -EINVAL with a one-line |err|. */
typedef int (*fx_cli_opt_fn)(void *user, int id, const char *val, char *err, size_t errlen);

/* Parses the arguments of command |cmd|: the common options into |c| (first
 * the FELIX_* environment, then the flags), --help, the command's own options
 * through |on_opt| (may be NULL), and at most |maxpos| positional words into
 * |pos| (|*npos| of them; one more is a usage error naming it, followed by
 * |extra_hint| when not NULL). Returns -1 to go on, or the exit status after
 * printing the help or the usage error. */
int fx_cli_parse(const char *cmd, int argc, char **argv, const fx_cli_opt *opts, fx_cli_common *c,
                 fx_cli_opt_fn on_opt, void *user, const char **pos, int maxpos, int *npos,
                 const char *extra_hint);

/* Set by the SIGINT/SIGTERM handler; commands poll it. */
extern volatile sig_atomic_t fx_cli_stop;

/* Installs the SIGINT/SIGTERM handler (without SA_RESTART, so a blocking
 * read returns EINTR) and ignores SIGPIPE. Returns 0 or -errno. */
int fx_cli_signals_install(void);

/* Blocks (|block| true) or unblocks SIGINT/SIGTERM in the calling thread.
 * Blocked around fx_client_connect so libfelix's loop thread inherits a
 * mask without them and the signals reach the main thread. */
void fx_cli_signals_block(bool block);

/* Monotonic clock in nanoseconds, and wall clock in Unix milliseconds. */
uint64_t fx_cli_now_ns(void);
uint64_t fx_cli_wall_ms(void);

/* Sleeps up to |ns| nanoseconds; returns early when fx_cli_stop is set. */
void fx_cli_sleep_ns(uint64_t ns);

/* Connects to the broker with |c| (checked by fx_cli_common_check) on top
 * of the FELIX_* tuning variables libfelix reads itself. |sub_block| makes
 * the client's subscription queue lossless (Block policy). Prints the error
 * line for |cmd| on failure. Returns 0 and |*pc|, or the libfelix error. */
int fx_cli_connect(const char *cmd, const fx_cli_common *c, bool sub_block, fx_client **pc);

/* Prints "felix CMD: WHAT: <fx_strerror>[: <libfelix last error>]". */
void fx_cli_report(const char *cmd, const char *what, int rv);

/* Result of one HTTP request to the admin endpoint. */
typedef struct fx_cli_http {
    long status;     /* HTTP status, 0 when no answer */
    fx_cli_buf body; /* response body (bounded), NUL-terminated */
} fx_cli_http;

/* Sends |method| (GET, PUT, DELETE) to |url| with the optional bearer
 * |token| (NULL: none), within |timeout_ms|. Returns 0 with |resp| filled
 * (any status), or -EIO with |err| describing the transport failure
 * (connection refused, timeout, body over 16 MiB). Free resp->body. */
int fx_cli_http_request(const char *method, const char *url, const char *token, int timeout_ms,
                        fx_cli_http *resp, char *err, size_t errlen);
/* The same with a JSON request |body| (NUL-terminated; NULL: none) for PUT. */
int fx_cli_http_request_body(const char *method, const char *url, const char *token,
                             const char *body, int timeout_ms, fx_cli_http *resp, char *err,
                             size_t errlen);

/* Sends |method| to |path| (such as "/v1/cluster") on the admin endpoint of
 * |c| (--admin, FELIX_ADMIN; the admin token when set). Returns 0 with a 2xx
 * answer in |resp| (free resp->body), or 1 after printing for |cmd| why it
 * failed: the transport error, or the HTTP status with the broker's reason
 * (admin_cmds.c). */
int fx_cli_admin_call(const char *cmd, const fx_cli_common *c, const char *method, const char *path,
                      fx_cli_http *resp);

struct json_t;
/* Prints the first |limit| objects of the JSON array |rows| as an aligned
 * table, one column per key in order of first appearance (at most 12), each
 * cell at most 40 bytes and cleaned for the terminal (admin_cmds.c). */
void fx_cli_print_table(const struct json_t *rows, size_t limit);

#endif
