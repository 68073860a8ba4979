/* Admin HTTP endpoint: libmicrohttpd glue, the built-in routes (/metrics,
 * /live, /ready), the bearer-token rule for mutating calls, and the
 * ask-a-loop helper (a refcounted query posted to an fx_loop and awaited with
 * a timeout). Request handlers run on libmicrohttpd's threads; nothing here
 * touches loop-owned state. */
#include "server/admin.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/log.h"
#include "base/metrics.h"
#include "felix/error.h"
#include "quic/quic.h"

#define LISTEN_BACKLOG 64
#define ALLOW_MAX 64 /* room for the Allow header of one path */

struct fx_admin {
    struct MHD_Daemon *daemon;
    fx_admin_route *routes; /* built-ins first, then the caller's */
    size_t nroutes;
    char *token; /* "" when none */
    bool remote;
    uint16_t port;
    size_t max_body;
    atomic_bool draining;
};

/* ---- responses ----------------------------------------------------------- */

static void resp_oom(fx_admin_resp *r)
{
    *r = (fx_admin_resp){.status = 500};
}

int fx_admin_resp_set(fx_admin_resp *r, unsigned status, const char *content_type, const void *body,
                      size_t len)
{
    char *copy = NULL;
    if (len > 0) {
        copy = malloc(len + 1);
        if (!copy) {
            fx_admin_resp_deinit(r);
            resp_oom(r);
            return -ENOMEM;
        }
        memcpy(copy, body, len);
        copy[len] = '\0';
    }
    fx_admin_resp_deinit(r);
    *r = (fx_admin_resp){.status = status, .content_type = content_type, .body = copy, .len = len};
    return 0;
}

int fx_admin_resp_text(fx_admin_resp *r, unsigned status, const char *text)
{
    return fx_admin_resp_set(r, status, FX_ADMIN_TEXT, text, strlen(text));
}

void fx_admin_resp_deinit(fx_admin_resp *r)
{
    if (!r)
        return;
    free(r->body);
    *r = (fx_admin_resp){0};
}

/* ---- pure helpers -------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t cap, const char *fmt,
                                                          ...)
{
    if (!err || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* Parses the decimal port at |s| (whole string). Returns 0..65535 or -1. */
static int parse_port(const char *s)
{
    if (*s == '\0' || strlen(s) > 5)
        return -1;
    int port = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        port = port * 10 + (*s - '0');
    }
    return port <= 65535 ? port : -1;
}

/* Resolves |host| (numeric or a name) into |ss| with |port|. */
static int resolve_host(const char *host, bool bracketed, int port, struct sockaddr_storage *ss,
                        socklen_t *plen, const char **pwhy)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (bracketed) {
        if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1) {
            *pwhy = "not an IPv6 address inside [ ]";
            return FX_ECONFIG;
        }
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *plen = sizeof(*v6);
        return 0;
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *plen = sizeof(*v4);
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || !res || res->ai_addrlen > sizeof(*ss)) {
        *pwhy = gai != 0 ? gai_strerror(gai) : "no usable address";
        if (res)
            freeaddrinfo(res);
        return FX_ECONFIG;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *plen = res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET)
        v4->sin_port = htons((uint16_t)port);
    else
        v6->sin6_port = htons((uint16_t)port);
    return 0;
}

int fx_admin_parse_bind(const char *s, struct sockaddr_storage *ss, socklen_t *plen, char *err,
                        size_t errcap)
{
    char host[256];
    const char *why = "expected host:port or [ipv6]:port";
    const char *hs = s, *he, *colon;
    bool bracketed = s && s[0] == '[';
    if (!s)
        goto err;
    if (bracketed) {
        hs = s + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            goto err;
        colon = he + 1;
    } else {
        colon = strrchr(s, ':');
        he = colon;
        if (colon && memchr(s, ':', (size_t)(colon - s))) {
            why = "IPv6 addresses go in [ ] (e.g. [::1]:8080)";
            goto err;
        }
    }
    if (!colon || he == hs || (size_t)(he - hs) >= sizeof(host))
        goto err;
    int port = parse_port(colon + 1);
    if (port < 0) {
        why = "port must be a number from 0 to 65535";
        goto err;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    if (resolve_host(host, bracketed, port, ss, plen, &why) == 0)
        return 0;
err:
    set_err(err, errcap, "admin bind address '%s': %s", s ? s : "(null)", why);
    return FX_ECONFIG;
}

/* Compares without an early exit, so the time taken does not reveal how
 * many leading bytes of a guessed token were right. */
static bool equal_const_time(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

bool fx_admin_authorized(bool remote, const char *token, const char *authorization)
{
    if (!remote)
        return true;
    if (!token || !*token || !authorization)
        return false;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    return equal_const_time(given, strlen(given), token, strlen(token));
}

bool fx_admin_method_is_mutating(const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
}

/* ---- asking a loop ------------------------------------------------------- */

struct fx_admin_query {
    fx_task task;
    atomic_uint refs; /* the asker's and the loop's */
    fx_admin_query_cb cb;
    void *user;
    fx_admin_req req; /* strings point into |strings| */
    char *strings;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool answered;      /* guarded by mu */
    bool abandoned;     /* guarded by mu: the asker timed out */
    fx_admin_resp resp; /* guarded by mu */
};

static atomic_size_t queries_live;
static fx_ratelimit timeout_rl = FX_RATELIMIT_INIT;

size_t fx_admin_queries_live(void)
{
    return atomic_load_explicit(&queries_live, memory_order_relaxed);
}

static void query_free(fx_admin_query *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    fx_admin_resp_deinit(&q->resp);
    free(q->strings);
    free(q);
    atomic_fetch_sub_explicit(&queries_live, 1, memory_order_relaxed);
}

static void query_unref(fx_admin_query *q)
{
    if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) == 1)
        query_free(q);
}

/* Copies |req| into one allocation: method, path, rest and body, each
 * NUL-terminated. */
static int query_copy_req(fx_admin_query *q, const fx_admin_req *req)
{
    static const fx_admin_req empty = {.method = "", .path = "", .rest = "", .body = ""};
    if (!req)
        req = &empty;
    const char *method = req->method ? req->method : "";
    const char *path = req->path ? req->path : "";
    const char *rest = req->rest ? req->rest : "";
    size_t nm = strlen(method) + 1, np = strlen(path) + 1, nr = strlen(rest) + 1;
    size_t nb = req->body ? req->body_len : 0;
    char *p = malloc(nm + np + nr + nb + 1);
    if (!p)
        return -ENOMEM;
    q->strings = p;
    q->req.method = memcpy(p, method, nm);
    q->req.path = memcpy(p + nm, path, np);
    q->req.rest = memcpy(p + nm + np, rest, nr);
    char *body = p + nm + np + nr;
    if (nb)
        memcpy(body, req->body, nb);
    body[nb] = '\0';
    q->req.body = body;
    q->req.body_len = nb;
    return 0;
}

static void query_run(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    fx_admin_query *q = user;
    q->cb(q, q->user); /* may free |q| (it answers and drops the last ref) */
}

static int query_new(fx_admin_query **pq, const fx_admin_req *req, fx_admin_query_cb cb, void *user)
{
    fx_admin_query *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    if (query_copy_req(q, req) != 0)
        goto err_free_q;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto err_free_strings;
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* always valid on Linux */
    int rv = pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rv != 0)
        goto err_free_strings;
    pthread_mutex_init(&q->mu, NULL);
    atomic_init(&q->refs, 2);
    q->cb = cb;
    q->user = user;
    fx_task_init(&q->task, query_run, q);
    atomic_fetch_add_explicit(&queries_live, 1, memory_order_relaxed);
    *pq = q;
    return 0;
err_free_strings:
    free(q->strings);
err_free_q:
    free(q);
    return -ENOMEM;
}

const fx_admin_req *fx_admin_query_req(const fx_admin_query *q)
{
    return &q->req;
}

int fx_admin_query_answer(fx_admin_query *q, unsigned status, const char *content_type,
                          const void *body, size_t len)
{
    fx_admin_resp r = {0};
    int rv = fx_admin_resp_set(&r, status, content_type, body, len);
    pthread_mutex_lock(&q->mu);
    assert(!q->answered && "a query is answered exactly once");
    bool late = q->abandoned;
    if (!late) {
        q->resp = r;
        q->answered = true;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    if (late)
        fx_admin_resp_deinit(&r);
    query_unref(q);
    if (rv != 0)
        return rv;
    return late ? FX_ETIMEDOUT : 0;
}

static struct timespec deadline_after(uint64_t timeout_ns)
{
    uint64_t at = fx_now_ns() + timeout_ns;
    return (struct timespec){.tv_sec = (time_t)(at / FX_NS_PER_S),
                             .tv_nsec = (long)(at % FX_NS_PER_S)};
}

int fx_admin_ask_loop(fx_loop *l, const fx_admin_req *req, uint64_t timeout_ns,
                      fx_admin_query_cb cb, void *user, fx_admin_resp *resp)
{
    assert(!fx_loop_is_current(l) && "a loop cannot wait for its own answer");
    fx_admin_query *q;
    if (query_new(&q, req, cb, user) != 0) {
        resp_oom(resp);
        return -ENOMEM;
    }
    struct timespec deadline = deadline_after(timeout_ns);
    (void)fx_loop_post(l, &q->task); /* a fresh task is never already pending */
    pthread_mutex_lock(&q->mu);
    while (!q->answered) {
        if (pthread_cond_timedwait(&q->cv, &q->mu, &deadline) == ETIMEDOUT)
            break;
    }
    bool answered = q->answered;
    if (answered) {
        *resp = q->resp;
        q->resp = (fx_admin_resp){0};
    } else {
        q->abandoned = true; /* the loop's answer, when it comes, is discarded */
    }
    pthread_mutex_unlock(&q->mu);
    query_unref(q);
    if (answered)
        return 0;
    FX_LOG_RATELIMITED(&timeout_rl, fx_now_ns(), FX_LOG_WARN, "admin",
                       "loop=%s did not answer %s %s within %llu ms", fx_loop_name(l),
                       req && req->method ? req->method : "-", req && req->path ? req->path : "-",
                       (unsigned long long)(timeout_ns / FX_NS_PER_MS));
    *resp = (fx_admin_resp){0};
    (void)fx_admin_resp_text(resp, 503, FX_ADMIN_TIMEOUT_BODY); /* on OOM: a bare 500 */
    return FX_ETIMEDOUT;
}

/* ---- built-in routes ----------------------------------------------------- */

static void route_metrics(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    char *text;
    size_t len;
    if (fx_metrics_render(&text, &len) != 0) {
        (void)fx_admin_resp_text(resp, 500, "out of memory rendering metrics\n");
        return;
    }
    *resp = (fx_admin_resp){
        .status = 200, .content_type = FX_ADMIN_PROMETHEUS, .body = text, .len = len};
}

static void route_live(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)fx_admin_resp_text(resp, 200, "ok");
}

static void route_ready(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    fx_admin *a = user;
    if (atomic_load_explicit(&a->draining, memory_order_relaxed))
        (void)fx_admin_resp_text(resp, 503, "draining");
    else
        (void)fx_admin_resp_text(resp, 200, "ok");
}

/* ---- request dispatch ---------------------------------------------------- */

/* One request's state across libmicrohttpd's calls (headers, body chunks,
 * end of body). */
typedef struct conn_req {
    char *body;
    size_t len, cap;
    bool too_big;
} conn_req;

/* Extra headers a dispatch decision adds to the response. */
typedef struct reply_extra {
    char allow[ALLOW_MAX];
    bool challenge; /* WWW-Authenticate: Bearer */
} reply_extra;

static void body_append(conn_req *r, size_t max_body, const char *data, size_t n)
{
    if (r->too_big)
        return;
    if (n > max_body - r->len) {
        r->too_big = true; /* keep reading and discarding; 413 at the end */
        return;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *p = realloc(r->body, cap);
        if (!p) {
            r->too_big = true;
            return;
        }
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
}

/* Matches |url| against route path |path|; stores the remainder in |*prest|. */
static bool path_match(const char *path, const char *url, const char **prest)
{
    size_t n = strlen(path);
    if (n > 0 && path[n - 1] == '/') {
        if (strncmp(url, path, n) != 0)
            return false;
        *prest = url + n;
        return true;
    }
    *prest = "";
    return strcmp(url, path) == 0;
}

static bool method_match(const char *route_method, const char *method)
{
    return strcmp(route_method, method) == 0 ||
           (strcmp(route_method, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

static void allow_add(reply_extra *x, const char *method)
{
    if (strstr(x->allow, method))
        return;
    size_t n = strlen(x->allow);
    snprintf(x->allow + n, sizeof(x->allow) - n, "%s%s", n ? ", " : "", method);
}

/* Picks the route for |req| and runs it, or answers 404/405/401 itself. */
static void dispatch(fx_admin *a, struct MHD_Connection *c, fx_admin_req *req, fx_admin_resp *resp,
                     reply_extra *x)
{
    bool path_known = false;
    for (size_t i = 0; i < a->nroutes; i++) {
        const fx_admin_route *rt = &a->routes[i];
        const char *rest;
        if (!path_match(rt->path, req->path, &rest))
            continue;
        path_known = true;
        if (!method_match(rt->method, req->method)) {
            allow_add(x, rt->method);
            continue;
        }
        if (fx_admin_method_is_mutating(req->method) &&
            !fx_admin_authorized(
                a->remote, a->token,
                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
            x->challenge = true;
            (void)fx_admin_resp_text(resp, 401,
                                     *a->token ? "unauthorized: this call needs "
                                                 "'Authorization: Bearer <admin token>'\n"
                                               : "unauthorized: no admin token is configured, "
                                                 "so mutating calls are refused off loopback\n");
            return;
        }
        req->rest = rest;
        rt->on_request(req, resp, rt->user);
        if (resp->status == 0) {
            fx_admin_resp_deinit(resp);
            (void)fx_admin_resp_text(resp, 500, "internal error: the route gave no answer\n");
        }
        return;
    }
    if (path_known)
        (void)fx_admin_resp_text(resp, 405, "method not allowed\n");
    else
        (void)fx_admin_resp_text(resp, 404, "not found\n");
}

/* Queues |resp| on |c|, taking its body. */
static enum MHD_Result send_resp(struct MHD_Connection *c, fx_admin_resp *resp,
                                 const reply_extra *x)
{
    struct MHD_Response *mr;
    if (resp->len > 0)
        mr = MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE);
    else
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!mr) {
        fx_admin_resp_deinit(resp);
        return MHD_NO; /* libmicrohttpd closes the connection */
    }
    if (resp->len > 0)
        resp->body = NULL; /* libmicrohttpd frees it now */
    unsigned status = resp->status ? resp->status : 500;
    const char *ctype = resp->content_type ? resp->content_type : FX_ADMIN_TEXT;
    enum MHD_Result ok = MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (ok == MHD_YES && status == 405 && x->allow[0])
        ok = MHD_add_response_header(mr, MHD_HTTP_HEADER_ALLOW, x->allow);
    if (ok == MHD_YES && x->challenge)
        ok = MHD_add_response_header(mr, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, mr);
    MHD_destroy_response(mr);
    fx_admin_resp_deinit(resp);
    return ok;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    fx_admin *a = cls;
    conn_req *r = *con_cls;
    if (!r) {
        /* Headers only so far; the body (if any) follows in later calls. */
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        body_append(r, a->max_body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    fx_admin_req req = {.method = method,
                        .path = url,
                        .rest = "",
                        .body = r->body ? r->body : "",
                        .body_len = r->len};
    fx_admin_resp resp = {0};
    reply_extra x = {.allow = ""};
    if (r->too_big)
        (void)fx_admin_resp_text(&resp, 413, "request body too large\n");
    else
        dispatch(a, c, &req, &resp, &x);
    return send_resp(c, &resp, &x);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    conn_req *r = *con_cls;
    if (!r)
        return;
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    FX_LOG_WARN("admin", "libmicrohttpd: %s", line);
}

/* ---- lifecycle ----------------------------------------------------------- */

/* Opens, binds and listens on |ss|; returns the fd or -errno. */
static int listen_on(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        goto err_close_fd;
    if (ss->ss_family == AF_INET6) {
        /* "[::]" means dual stack; any other IPv6 address only itself. */
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(a6);
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) != 0)
            goto err_close_fd;
    }
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, LISTEN_BACKLOG) != 0)
        goto err_close_fd;
    return fd;
err_close_fd:;
    int rv = -errno;
    close(fd);
    return rv;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* Builds the route table: the three built-ins, then the caller's. */
static int routes_init(fx_admin *a, const fx_admin_opts *o)
{
    const fx_admin_route builtin[] = {
        {.method = "GET", .path = "/metrics", .on_request = route_metrics, .user = a},
        {.method = "GET", .path = "/live", .on_request = route_live, .user = a},
        {.method = "GET", .path = "/ready", .on_request = route_ready, .user = a},
    };
    size_t nb = sizeof(builtin) / sizeof(builtin[0]);
    a->routes = calloc(nb + o->nroutes, sizeof(*a->routes));
    if (!a->routes)
        return -ENOMEM;
    memcpy(a->routes, builtin, sizeof(builtin));
    if (o->nroutes)
        memcpy(a->routes + nb, o->routes, o->nroutes * sizeof(*o->routes));
    a->nroutes = nb + o->nroutes;
    return 0;
}

static int start_daemon(fx_admin *a, const fx_admin_opts *o, int fd, int family)
{
    /* libmicrohttpd may or may not close a listen socket it was given when it
     * fails to start; handing it a duplicate keeps ours ours either way. */
    int mfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mfd < 0)
        return -errno;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned threads = o->threads ? o->threads : FX_ADMIN_DEFAULT_THREADS;
    a->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, a, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, a,
        MHD_OPTION_LISTEN_SOCKET, mfd, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(o->max_connections ? o->max_connections : FX_ADMIN_DEFAULT_MAX_CONNECTIONS),
        MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(o->timeout_s ? o->timeout_s : FX_ADMIN_DEFAULT_TIMEOUT_S),
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
        MHD_OPTION_END);
    return a->daemon ? 0 : FX_EINTERNAL;
}

int fx_admin_start(fx_admin **pa, const fx_admin_opts *o, char *err, size_t errcap)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    int rv = fx_admin_parse_bind(o->bind, &ss, &sslen, err, errcap);
    if (rv != 0)
        return rv;
    fx_admin *a = calloc(1, sizeof(*a));
    if (!a || !(a->token = strdup(o->token ? o->token : "")) || routes_init(a, o) != 0) {
        set_err(err, errcap, "admin endpoint %s: out of memory", o->bind);
        fx_admin_free(a);
        return -ENOMEM;
    }
    a->remote = o->treat_as_remote || !fx_quic_addr_is_loopback((struct sockaddr *)&ss);
    a->max_body = o->max_body ? o->max_body : FX_ADMIN_DEFAULT_MAX_BODY;
    atomic_init(&a->draining, false);
    int fd = listen_on(&ss, sslen);
    if (fd < 0) {
        set_err(err, errcap, "admin endpoint cannot listen on %s: %s", o->bind, fx_strerror(fd));
        fx_admin_free(a);
        return fd;
    }
    a->port = bound_port(fd);
    rv = start_daemon(a, o, fd, ss.ss_family);
    close(fd); /* the daemon serves its duplicate */
    if (rv != 0) {
        set_err(err, errcap, "admin endpoint on %s: libmicrohttpd failed to start (%s)", o->bind,
                fx_strerror(rv));
        fx_admin_free(a);
        return rv;
    }
    if (a->remote && !*a->token)
        FX_LOG_WARN("admin",
                    "bind=%s is not loopback and no admin token is set: mutating "
                    "admin calls will be refused",
                    o->bind);
    *pa = a;
    return 0;
}

uint16_t fx_admin_port(const fx_admin *a)
{
    return a->port;
}

bool fx_admin_is_remote(const fx_admin *a)
{
    return a->remote;
}

void fx_admin_set_draining(fx_admin *a, bool draining)
{
    atomic_store_explicit(&a->draining, draining, memory_order_relaxed);
}

void fx_admin_stop(fx_admin *a)
{
    if (a && a->daemon) {
        MHD_stop_daemon(a->daemon);
        a->daemon = NULL;
    }
}

void fx_admin_free(fx_admin *a)
{
    if (!a)
        return;
    fx_admin_stop(a);
    free(a->routes);
    free(a->token);
    free(a);
}
