/* Admin HTTP endpoint of felix-broker (libmicrohttpd): GET /metrics, /live,
 * /ready, plus routes registered by the broker (stream admin API). Requests
 * are served on libmicrohttpd's own threads, never on an fx_loop: a handler
 * that needs loop-owned state asks the loops with fx_loop_ask() or
 * fx_loop_ask_all() (base/loop.h; the broker's admin calls do), which wait
 * for the answers with a timeout. Started and stopped by main. */
#ifndef FX_SERVER_ADMIN_H
#define FX_SERVER_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/loop.h"

typedef struct fx_admin fx_admin;

#define FX_ADMIN_DEFAULT_MAX_CONNECTIONS 32u
#define FX_ADMIN_DEFAULT_TIMEOUT_S 10u
#define FX_ADMIN_DEFAULT_MAX_BODY (64u * 1024u)
#define FX_ADMIN_DEFAULT_THREADS 2u
/* Connections one client address may hold at once on the admin listener. */
#define FX_ADMIN_DEFAULT_PER_IP 8u
/* Memory libmicrohttpd gives one connection (request line, headers, buffers);
 * a request whose headers do not fit is answered 431 by libmicrohttpd. */
#define FX_ADMIN_DEFAULT_CONN_MEMORY (16u * 1024u)
/* The probe listener (/live and /ready only): its own connection slots,
 * per-address cap, idle timeout and one thread. */
#define FX_ADMIN_PROBE_MAX_CONNECTIONS 16u
#define FX_ADMIN_PROBE_PER_IP 4u
#define FX_ADMIN_PROBE_TIMEOUT_S 5u
/* Content types used by the endpoint. */
#define FX_ADMIN_TEXT "text/plain; charset=utf-8"
#define FX_ADMIN_PROMETHEUS "text/plain; version=0.0.4; charset=utf-8"
#define FX_ADMIN_JSON "application/json"
/* Body of the 503 sent when a loop did not answer in time. */
#define FX_ADMIN_TIMEOUT_BODY "timed out asking the broker\n"
/* Body (JSON) of the 403 sent to a mutating call when no token is
 * configured: what is refused and how to set and send a token. */
#define FX_ADMIN_NO_TOKEN_BODY                                                                     \
    "{\"error\":\"no admin_token is configured, so calls that change state (PUT, PATCH, "          \
    "DELETE) are refused, on loopback too. Set one on the broker: admin_token in its YAML "        \
    "configuration, FELIX_ADMIN_TOKEN in its environment, or --set admin_token=...; then send "    \
    "it as 'Authorization: Bearer <token>' (felix reads FELIX_ADMIN_TOKEN or "                     \
    "--admin-token-file FILE). See docs/auth.md.\"}\n"

/* One request as a route sees it. Valid only during the route callback: a
 * loop asked about it must get copies of what it reads. |rest| is the part
 * of |path| after a prefix route's path ("" for exact routes). |body| is
 * NUL-terminated (|body_len| excludes the NUL) and may contain NULs. */
typedef struct fx_admin_req {
    const char *method;
    const char *path;
    const char *rest;
    const char *body;
    size_t body_len;
    void *conn; /* internal: the HTTP connection (fx_admin_req_arg) */
} fx_admin_req;

/* The value of query argument |name| of |req| ("1" for ?dry_run=1, "" for
 * ?dry_run), or NULL when absent. Valid during the route callback. */
const char *fx_admin_req_arg(const fx_admin_req *req, const char *name);

/* An answer. |content_type| is a static string (NULL means FX_ADMIN_TEXT);
 * |body| is malloc'd and owned by the response (NULL when |len| is 0).
 * |status| 0 means "not answered" and is sent as 500. */
typedef struct fx_admin_resp {
    unsigned status;
    const char *content_type;
    char *body;
    size_t len;
} fx_admin_resp;

/* Replaces |r|'s content with |status|, |content_type| (static, may be NULL)
 * and a copy of the |len| bytes at |body|. Returns 0, or -ENOMEM (then |r|
 * holds status 500 with no body). Any thread. */
int fx_admin_resp_set(fx_admin_resp *r, unsigned status, const char *content_type, const void *body,
                      size_t len);

/* As fx_admin_resp_set() with the NUL-terminated text |text| as body and
 * FX_ADMIN_TEXT as content type. */
int fx_admin_resp_text(fx_admin_resp *r, unsigned status, const char *text);

/* Frees |r|'s body and zeroes it. NULL ok. */
void fx_admin_resp_deinit(fx_admin_resp *r);

/* Handles one request to a registered route: fills |resp| (initially zero).
 * Runs on a libmicrohttpd thread, possibly several at once: it must not touch
 * loop-owned state (ask the loop: fx_loop_ask()) and should return within a few
 * seconds, as it holds one of the endpoint's threads meanwhile. */
typedef void (*fx_admin_route_cb)(const fx_admin_req *req, fx_admin_resp *resp, void *user);

/* A route. |path| is matched exactly, or as a prefix when it ends in '/'
 * ("/v1/streams/" matches "/v1/streams/t/ns/s", with rest "t/ns/s").
 * |method| is an upper-case HTTP method; any method other than GET and HEAD
 * is mutating. Every request passes the Host check and the bearer-token rule
 * (fx_admin_host_allowed(), fx_admin_authorized()) before its route runs. A
 * path served by routes none of which has the request's method answers 405
 * with an Allow header. */
typedef struct fx_admin_route {
    const char *method;
    const char *path;
    fx_admin_route_cb on_request;
    void *user;
} fx_admin_route;

typedef struct fx_admin_opts {
    /* "host:port", "[v6addr]:port"; host may be a name (resolved here, first
     * address wins). Port 0 picks a free port (fx_admin_port()). */
    const char *bind;
    /* Bearer token of mutating calls (always) and of GET /v1/... off
     * loopback. NULL or "" = none: mutating calls are then refused (403 with
     * how to set one), on loopback too, and /v1 reads off loopback (401).
     * Copied. */
    const char *token;
    /* Host names, comma-separated, that the Host header may carry besides
     * addresses, localhost and the bind host (DNS rebinding). NULL = none.
     * Copied. */
    const char *allowed_hosts;
    /* A second listener that serves only GET /live and /ready, with its own
     * connection slots, so slow or idle clients of the main one cannot starve
     * the health probes; same syntax as |bind|. NULL or "" = none. */
    const char *probe_bind;
    /* PEM certificate chain and private key: both serve the main listener
     * over TLS (HTTPS), neither plain HTTP. Read at start. The probe listener
     * stays plain HTTP. */
    const char *tls_cert_file;
    const char *tls_key_file;
    unsigned per_ip_limit; /* connections per client address; 0 = FX_ADMIN_DEFAULT_PER_IP */
    size_t conn_memory;    /* per-connection memory; 0 = FX_ADMIN_DEFAULT_CONN_MEMORY */
    /* Asked by GET /ready besides draining: false answers 503 with |why|
     * (a cluster node that is suspended or not registered yet). NULL: none.
     * Runs on a libmicrohttpd thread. */
    bool (*ready)(void *user, char *why, size_t cap);
    void *ready_user;
    /* Apply the off-loopback rules even on a loopback address (tests). */
    bool treat_as_remote;
    /* GET /metrics includes the per-stream gauges (FX_METRICS_STREAMS),
     * which name every durable stream's tenant, namespace and stream, to
     * whoever reaches the endpoint (no token). false = left out. */
    bool metrics_per_stream;
    unsigned max_connections; /* 0 = FX_ADMIN_DEFAULT_MAX_CONNECTIONS */
    unsigned timeout_s;       /* idle connection timeout; 0 = FX_ADMIN_DEFAULT_TIMEOUT_S */
    size_t max_body;          /* request body limit (413 above); 0 = FX_ADMIN_DEFAULT_MAX_BODY */
    unsigned threads;         /* serving threads; 0 = FX_ADMIN_DEFAULT_THREADS */
    /* Extra routes, tried after the built-in ones; copied (the strings and
     * |user| must outlive the endpoint). */
    const fx_admin_route *routes;
    size_t nroutes;
} fx_admin_opts;

/* Binds |o|->bind (and |o|->probe_bind) and starts serving. On success
 * stores the endpoint in |*pa| and returns 0. On failure returns FX_ECONFIG
 * (unparsable address, unresolvable name, unreadable TLS file, or TLS asked
 * of a libmicrohttpd built without it), -errno from socket/bind/listen
 * (-EADDRINUSE, ...),
 * -ENOMEM, or FX_EINTERNAL (libmicrohttpd refused to start), and if |err| is
 * not NULL writes a one-line message naming the address into |err| (|errcap|
 * bytes, NUL-terminated). The caller frees the endpoint with fx_admin_free().
 * Main thread. */
int fx_admin_start(fx_admin **pa, const fx_admin_opts *o, char *err, size_t errcap);

/* The bound port (the real one when port 0 was asked). Any thread. */
uint16_t fx_admin_port(const fx_admin *a);

/* The probe listener's bound port, or 0 when there is none. Any thread. */
uint16_t fx_admin_probe_port(const fx_admin *a);

/* True if the endpoint treats callers as off-loopback (bound to a
 * non-loopback address, or treat_as_remote). Any thread. */
bool fx_admin_is_remote(const fx_admin *a);

/* Makes GET /ready answer 503 "draining" (true) or 200 "ok" (false).
 * Any thread. */
void fx_admin_set_draining(fx_admin *a, bool draining);

/* Stops serving: closes the listening socket and waits for requests in
 * progress (at most their fx_loop_ask() timeout). Idempotent. Main
 * thread; never from a route callback. */
void fx_admin_stop(fx_admin *a);

/* Stops |a| if needed and frees it. NULL ok. Main thread. */
void fx_admin_free(fx_admin *a);

/* ---- pure helpers (exposed for tests) ------------------------------------ */

/* Parses |s| ("host:port" or "[v6]:port") and resolves the host into |*ss| /
 * |*plen| (numeric hosts are not looked up; names use getaddrinfo and may
 * block). Returns 0 or FX_ECONFIG with a message in |err| (may be NULL).
 * Main thread (may block on DNS). */
int fx_admin_parse_bind(const char *s, struct sockaddr_storage *ss, socklen_t *plen, char *err,
                        size_t errcap);

/* True if a |method| request for |path| needs the bearer token: every
 * mutating call, wherever the endpoint listens; a read of /v1 or /v1/...
 * off loopback (|remote|). Reads of /metrics, /live and /ready never do. */
bool fx_admin_needs_token(bool remote, const char *method, const char *path);

/* The token rule: true when the request needs no token
 * (fx_admin_needs_token()), or |token| is non-empty and |authorization| (the
 * request's Authorization header, may be NULL) is "Bearer <token>" (scheme
 * case ignored, compared with fx_admin_token_equal()). So without a token
 * (NULL or "") every mutating call is refused. */
bool fx_admin_authorized(bool remote, const char *token, const char *method, const char *path,
                         const char *authorization);

/* Compares |given| with |token| in time that depends on neither their
 * contents nor their lengths (it compares their SHA-256 digests). */
bool fx_admin_token_equal(const char *given, const char *token);

/* True for methods that change state (anything but GET and HEAD). */
bool fx_admin_method_is_mutating(const char *method);

/* The Host check against DNS rebinding: true if |host| (the Host header;
 * NULL = none, allowed) is an IPv4 or bracketed IPv6 address, "localhost",
 * |bind_host| (the bind address's host, may be NULL) or one of the
 * comma-separated names of |allowed| (may be NULL), with an optional :port.
 * Names compare case-insensitively, a trailing dot ignored. */
bool fx_admin_host_allowed(const char *host, const char *bind_host, const char *allowed);

/* Why the endpoint refused a request or a connection. */
typedef enum fx_admin_refusal {
    FX_ADMIN_REFUSED_HOST,
    FX_ADMIN_REFUSED_TOKEN,
    FX_ADMIN_REFUSED_CONN_LIMIT,
    FX_ADMIN_REFUSED_HEADERS,
    FX_ADMIN_REFUSED_BODY,
    FX_ADMIN_NREFUSALS,
} fx_admin_refusal;

/* Counts a refusal in felix_admin_refused_total{reason} and logs it (WARN,
 * at most once a second per reason) with |peer| (client address, may be
 * NULL) and |detail| (may be NULL). Any thread. */
void fx_admin_count_refusal(fx_admin_refusal why, const char *peer, const char *detail);

#endif
