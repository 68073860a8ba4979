/* Shared fixture of the admin-route and drain integration tests: an
 * in-process broker (fx_broker, its own loop threads) on 127.0.0.1 port 0
 * with a generated certificate in a temp state dir, the admin endpoint on
 * port 0 serving the broker's routes with admin token FIX_ADMIN_TOKEN
 * (mutating calls need one), libfelix clients pinned by fingerprint (built
 * on fixture.h), and a tiny blocking HTTP/1.1 client that sends that token.
 * Timeouts are hang guards only. Included by one test file each (functions
 * are static inline). */
#ifndef FX_TESTS_INTEG_ADMIN_FIXTURE_H
#define FX_TESTS_INTEG_ADMIN_FIXTURE_H

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "integ/fixture.h"
#include "server/admin.h"
#include "server/admin_routes.h"

/* ---- broker, admin endpoint and clients --------------------------------------- */

/* The admin token of the fixture's endpoint. */
#define FIX_ADMIN_TOKEN "fixture-admin-token"

typedef struct E {
    fx_broker *b;
    fx_broker_opts bo;
    fx_admin *admin;
    char dir[64];
    char server[32];
    /* Set before e_start(): the endpoint's token (NULL: none configured) and
     * whether /metrics carries the per-stream gauges. */
    const char *token;
    bool metrics_per_stream;
} E;

static inline E *e_new(void)
{
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    fix_state_dir_new(e->dir, sizeof(e->dir), "adm");
    fix_broker_opts(&e->bo, e->dir);
    e->bo.event_batch_max_delay_ns = 0;
    e->token = FIX_ADMIN_TOKEN;
    return e;
}

static inline void e_lossless(E *e)
{
    fix_lossless(&e->bo);
}

/* Starts the broker and the admin endpoint (127.0.0.1 port 0, the broker's
 * routes). */
static inline void e_start(E *e)
{
    fix_broker_start(&e->b, &e->bo, e->server, sizeof(e->server));
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(e->b, routes);
    fx_admin_opts ao = {.bind = "127.0.0.1:0",
                        .token = e->token,
                        .metrics_per_stream = e->metrics_per_stream,
                        .routes = routes,
                        .nroutes = FX_ADMIN_BROKER_NROUTES};
    char err[256];
    assert_int_equal(fx_admin_start(&e->admin, &ao, err, sizeof(err)), 0);
}

static inline void e_free(E *e)
{
    fx_admin_free(e->admin); /* before the broker: the routes use it */
    fx_broker_free(e->b);
    fix_rm_dir(e->dir);
    free(e);
}

static inline fx_client *e_client(E *e, fx_policy pol, uint32_t window, uint32_t sub_cap)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, "t1", "any-token");
    o.sub_queue_policy = pol;
    o.stream_window_bytes = window;
    o.sub_queue_capacity = sub_cap;
    o.reconnect = false; /* a drained broker is gone: end, do not retry */
    return fix_connect(&o);
}

static inline fx_subscription *subscribe(fx_client *c, const char *stream)
{
    return fix_subscribe(c, stream, NULL);
}

/* ---- a tiny HTTP client --------------------------------------------------------- */

typedef struct http_resp {
    int status;
    char body[65536];
} http_resp;

static inline void http_auth(E *e, const char *method, const char *path, const char *body,
                             const char *token, http_resp *r);

/* Sends |method| |path| to the admin endpoint, with the endpoint's token
 * when it has one, and reads the whole answer. */
static inline void http(E *e, const char *method, const char *path, http_resp *r)
{
    http_auth(e, method, path, "", e->token, r);
}

/* The same with request body |body| ("" for none). */
static inline void http_body(E *e, const char *method, const char *path, const char *body,
                             http_resp *r)
{
    http_auth(e, method, path, body, e->token, r);
}

/* The same with bearer token |token| (NULL or "": no Authorization header). */
static inline void http_auth(E *e, const char *method, const char *path, const char *body,
                             const char *token, http_resp *r)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(fx_admin_port(e->admin))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[1024], auth[256] = "";
    if (token != NULL && token[0] != '\0')
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, path, auth, strlen(body), body);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    assert_int_equal(write(fd, req, (size_t)n), n);
    static char buf[sizeof(r->body) + 4096];
    size_t len = 0;
    ssize_t k;
    while (len < sizeof(buf) - 1 && (k = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", &r->status), 1);
    const char *b = strstr(buf, "\r\n\r\n");
    assert_non_null(b);
    snprintf(r->body, sizeof(r->body), "%s", b + 4);
}

/* GETs |path| and parses the JSON body (caller decrefs). */
static inline json_t *get_json(E *e, const char *path)
{
    static http_resp r;
    http(e, "GET", path, &r);
    assert_int_equal(r.status, 200);
    json_error_t err;
    json_t *j = json_loads(r.body, 0, &err);
    if (j == NULL)
        fail_msg("bad JSON from %s: %s: %s", path, err.text, r.body);
    return j;
}

static inline uint64_t ju(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("no integer %s", key);
    return (uint64_t)json_integer_value(v);
}

#endif
