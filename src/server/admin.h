/* Admin HTTP endpoint of felix-broker (libmicrohttpd): GET /metrics, /live,
 * /ready, plus routes registered by the broker (stream admin API). Requests
 * are served on libmicrohttpd's own threads, never on an fx_loop: a handler
 * that needs loop-owned state asks the loop with fx_admin_ask_loop(), which
 * waits for the answer with a timeout. Started and stopped by main. */
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
/* Content types used by the endpoint. */
#define FX_ADMIN_TEXT "text/plain; charset=utf-8"
#define FX_ADMIN_PROMETHEUS "text/plain; version=0.0.4; charset=utf-8"
#define FX_ADMIN_JSON "application/json"
/* Body of the 503 sent when a loop did not answer in time. */
#define FX_ADMIN_TIMEOUT_BODY "timed out asking the broker\n"

/* One request as a route sees it. Valid only during the route callback
 * (fx_admin_query_req() gives a copy owned by the query). |rest| is the part
 * of |path| after a prefix route's path ("" for exact routes). |body| is
 * NUL-terminated (|body_len| excludes the NUL) and may contain NULs. */
typedef struct fx_admin_req {
    const char *method;
    const char *path;
    const char *rest;
    const char *body;
    size_t body_len;
} fx_admin_req;

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
 * loop-owned state (use fx_admin_ask_loop()) and should return within a few
 * seconds, as it holds one of the endpoint's threads meanwhile. */
typedef void (*fx_admin_route_cb)(const fx_admin_req *req, fx_admin_resp *resp, void *user);

/* A route. |path| is matched exactly, or as a prefix when it ends in '/'
 * ("/v1/streams/" matches "/v1/streams/t/ns/s", with rest "t/ns/s").
 * |method| is an upper-case HTTP method; any method other than GET and HEAD
 * is mutating and passes the bearer-token check first (see
 * fx_admin_authorized()). A path served by routes none of which has the
 * request's method answers 405 with an Allow header. */
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
    /* Bearer token required by mutating calls when the endpoint is not bound
     * to a loopback address. NULL or "" = none: mutating calls are then
     * refused off loopback. Copied. */
    const char *token;
    /* Apply the off-loopback rules even on a loopback address (tests). */
    bool treat_as_remote;
    unsigned max_connections; /* 0 = FX_ADMIN_DEFAULT_MAX_CONNECTIONS */
    unsigned timeout_s;       /* idle connection timeout; 0 = FX_ADMIN_DEFAULT_TIMEOUT_S */
    size_t max_body;          /* request body limit (413 above); 0 = FX_ADMIN_DEFAULT_MAX_BODY */
    unsigned threads;         /* serving threads; 0 = FX_ADMIN_DEFAULT_THREADS */
    /* Extra routes, tried after the built-in ones; copied (the strings and
     * |user| must outlive the endpoint). */
    const fx_admin_route *routes;
    size_t nroutes;
} fx_admin_opts;

/* Binds |o|->bind and starts serving. On success stores the endpoint in
 * |*pa| and returns 0. On failure returns FX_ECONFIG (unparsable address or
 * unresolvable name), -errno from socket/bind/listen (-EADDRINUSE, ...),
 * -ENOMEM, or FX_EINTERNAL (libmicrohttpd refused to start), and if |err| is
 * not NULL writes a one-line message naming the address into |err| (|errcap|
 * bytes, NUL-terminated). The caller frees the endpoint with fx_admin_free().
 * Main thread. */
int fx_admin_start(fx_admin **pa, const fx_admin_opts *o, char *err, size_t errcap);

/* The bound port (the real one when port 0 was asked). Any thread. */
uint16_t fx_admin_port(const fx_admin *a);

/* True if the endpoint treats callers as off-loopback (bound to a
 * non-loopback address, or treat_as_remote). Any thread. */
bool fx_admin_is_remote(const fx_admin *a);

/* Makes GET /ready answer 503 "draining" (true) or 200 "ok" (false).
 * Any thread. */
void fx_admin_set_draining(fx_admin *a, bool draining);

/* Stops serving: closes the listening socket and waits for requests in
 * progress (at most their fx_admin_ask_loop() timeout). Idempotent. Main
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


/* The token rule for a mutating call: allowed when |remote| is false;
 * otherwise only when |token| is non-empty and |authorization| (the request's
 * Authorization header, may be NULL) is "Bearer <token>" (scheme case
 * ignored, compared in constant time). */
bool fx_admin_authorized(bool remote, const char *token, const char *authorization);

/* True for methods that change state (anything but GET and HEAD). */
bool fx_admin_method_is_mutating(const char *method);

/* ---- asking a loop ------------------------------------------------------- */

/* A question to one fx_loop. Refcounted: the asker and the loop each hold a
 * reference, so an answer that arrives after the asker gave up writes into
 * memory that is still alive and is then discarded. */
typedef struct fx_admin_query fx_admin_query;

/* Runs on the loop's thread with |q|. It must call fx_admin_query_answer(q,
 * ...) exactly once: before returning, or later from any thread (e.g. after
 * gathering state from other loops); until then the query stays allocated. */
typedef void (*fx_admin_query_cb)(fx_admin_query *q, void *user);

/* Posts |cb(q, user)| to loop |l| with a copy of |req| (may be NULL) and waits
 * up to |timeout_ns| for the answer, which it moves into |resp|. On timeout
 * |resp| is 503 FX_ADMIN_TIMEOUT_BODY and FX_ETIMEDOUT is returned; the late
 * answer is discarded when it comes. Returns 0, FX_ETIMEDOUT, or -ENOMEM
 * (|resp| then 500; nothing was posted). |user| must stay valid until |cb| has
 * run, which may be after this returns: pass a long-lived object. |l| must
 * keep running until then too (fx_loop_stop() runs pending tasks, so stopping
 * it is fine; freeing it is not). Any thread but |l|'s own (it would wait for
 * itself); in practice a route callback. */
int fx_admin_ask_loop(fx_loop *l, const fx_admin_req *req, uint64_t timeout_ns,
                      fx_admin_query_cb cb, void *user, fx_admin_resp *resp);

/* The request the query carries (a copy owned by the query; fields are never
 * NULL). Valid until fx_admin_query_answer(). Any thread. */
const fx_admin_req *fx_admin_query_req(const fx_admin_query *q);

/* Answers |q| with |status|, |content_type| (static, may be NULL) and a copy
 * of |body| (|len| bytes), then drops the loop's reference: |q| must not be
 * used afterwards. Returns 0 if delivered to the asker, FX_ETIMEDOUT if the
 * asker had already given up (answer discarded), -ENOMEM if the copy failed
 * (the asker gets a 500). Any thread. */
int fx_admin_query_answer(fx_admin_query *q, unsigned status, const char *content_type,
                          const void *body, size_t len);

/* Queries allocated and not yet freed, process-wide (tests, leak checks).
 * Any thread. */
size_t fx_admin_queries_live(void);

#endif
