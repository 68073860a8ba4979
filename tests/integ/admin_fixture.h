/* Shared fixture of the admin-route and drain integration tests: an
 * in-process broker (fx_broker, its own loop threads) on 127.0.0.1 port 0
 * with a generated certificate in a temp state dir, the admin endpoint on
 * port 0 serving the broker's routes, libfelix clients pinned by
 * fingerprint, and a tiny blocking HTTP/1.1 client. Timeouts are hang guards
 * only. Included by one test file each (functions are static inline). */
#ifndef FX_TESTS_INTEG_ADMIN_FIXTURE_H
#define FX_TESTS_INTEG_ADMIN_FIXTURE_H

#include <arpa/inet.h>
#include <dirent.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "fx_test.h"

#include "base/log.h"
#include "broker/broker.h"
#include "felix/felix.h"
#include "server/admin.h"
#include "server/admin_routes.h"

#define HANG_MS 15000
#define NS "default"

/* ---- broker, admin endpoint and clients --------------------------------------- */

typedef struct E {
    fx_broker *b;
    fx_broker_opts bo;
    fx_admin *admin;
    char dir[64];
    char server[32];
} E;

static inline E *e_new(void)
{
    fx_log_set_level(FX_LOG_ERROR);
    E *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/fxadmXXXXXX");
    assert_non_null(mkdtemp(e->dir));
    fx_broker_opts_default(&e->bo);
    e->bo.quic.state_dir = e->dir;
    e->bo.quic.udp_send_buffer = e->bo.quic.udp_recv_buffer = 1 << 20;
    e->bo.event_batch_max_delay_ns = 0;
    return e;
}

/* Lossless mode: Block at checkpoints 5 and 6, Backpressure at 4. */
static inline void e_lossless(E *e)
{
    e->bo.subscriber_queue_policy = FX_QUEUE_BLOCK;
    e->bo.subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    e->bo.pub_ingress_wait = true;
}

/* Starts the broker and the admin endpoint (127.0.0.1 port 0, the broker's
 * routes). */
static inline void e_start(E *e)
{
    assert_int_equal(fx_broker_new(&e->b, &e->bo), 0);
    assert_int_equal(fx_broker_start(e->b), 0);
    snprintf(e->server, sizeof(e->server), "127.0.0.1:%u", (unsigned)fx_broker_port(e->b));
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(e->b, routes);
    fx_admin_opts ao = {
        .bind = "127.0.0.1:0", .routes = routes, .nroutes = FX_ADMIN_BROKER_NROUTES};
    char err[256];
    assert_int_equal(fx_admin_start(&e->admin, &ao, err, sizeof(err)), 0);
}

static inline void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline void e_free(E *e)
{
    fx_admin_free(e->admin); /* before the broker: the routes use it */
    fx_broker_free(e->b);
    rm_dir(e->dir);
    free(e);
}

static inline fx_client *e_client(E *e, fx_policy pol, uint32_t window, uint32_t sub_cap)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = e->server;
    o.server_name = "localhost";
    o.pin_sha256 = fx_broker_fingerprint(e->b);
    o.tenant = "t1";
    o.token = "any-token";
    o.connect_timeout_ms = HANG_MS;
    o.sub_queue_policy = pol;
    o.stream_window_bytes = window;
    o.sub_queue_capacity = sub_cap;
    o.reconnect = false; /* a drained broker is gone: end, do not retry */
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    if (rv != 0)
        fail_msg("connect: %s", fx_errname(rv));
    return c;
}

static inline fx_subscription *subscribe(fx_client *c, const char *stream)
{
    fx_subscription *s = NULL;
    int rv = fx_subscribe(&s, c, NS, stream, NULL);
    if (rv != 0)
        fail_msg("subscribe %s: %s", stream, fx_errname(rv));
    return s;
}

static inline void sleep_ms(unsigned ms)
{
    usleep(ms * 1000u);
}

/* ---- a tiny HTTP client --------------------------------------------------------- */

typedef struct http_resp {
    int status;
    char body[65536];
} http_resp;

/* Sends |method| |path| to the admin endpoint and reads the whole answer. */
static inline void http(E *e, const char *method, const char *path, http_resp *r)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = HANG_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(fx_admin_port(e->admin))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Length: 0\r\n\r\n",
                     method, path);
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
