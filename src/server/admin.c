/* Admin HTTP endpoint: libmicrohttpd glue, the built-in routes (/metrics,
 * /live, /ready) and the bearer-token rule for mutating calls. Request
 * handlers run on libmicrohttpd's threads; nothing here touches loop-owned
 * state. */
#include "server/admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/grow.h"
#include "base/hostport.h"
#include "base/log.h"
#include "base/metrics.h"
#include "felix/error.h"
#include "quic/quic.h"

#define LISTEN_BACKLOG 64
#define ALLOW_MAX 64 /* room for the Allow header of one path */

/* One listener: the main one (every route, Host and token checks) or the
 * probe one (/live and /ready only). */
typedef struct listener {
    struct fx_admin *a;
    struct MHD_Daemon *daemon;
    const fx_admin_route *routes;
    size_t nroutes;
    bool guarded; /* Host and token checks apply */
    uint16_t port;
} listener;

struct fx_admin {
    listener main, probe;
    fx_admin_route *routes; /* built-ins first (metrics, live, ready), then the caller's */
    size_t nroutes;
    char *token;              /* "" when none */
    bool metrics_per_stream;  /* /metrics carries the per-stream gauges */
    char *allowed_hosts;      /* "" when none */
    char bind_host[256];      /* the host part of the bind address */
    char *tls_cert, *tls_key; /* PEM, NULL without TLS */
    bool remote;
    size_t max_body;
    atomic_bool draining;
    bool (*ready)(void *user, char *why, size_t cap);
    void *ready_user;
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
    fx_hostport hp;
    const char *why;
    if (fx_hostport_split(s, &hp, &why) == 0 &&
        resolve_host(hp.host, hp.bracketed, hp.port, ss, plen, &why) == 0)
        return 0;
    set_err(err, errcap, "admin bind address '%s': %s", s ? s : "(null)", why);
    return FX_ECONFIG;
}

/* ---- built-in routes ----------------------------------------------------- */

static void route_metrics(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    fx_admin *a = user;
    char *text;
    size_t len;
    if (fx_metrics_render(&text, &len, a->metrics_per_stream) != 0) {
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
    char why[512];
    if (atomic_load_explicit(&a->draining, memory_order_relaxed))
        (void)fx_admin_resp_text(resp, 503, "draining");
    else if (a->ready != NULL && !a->ready(a->ready_user, why, sizeof(why)))
        (void)fx_admin_resp_text(resp, 503, why);
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
    char *p = fx_grow(r->body, &r->cap, r->len + n + 1, 1, 1024);
    if (!p) {
        r->too_big = true;
        return;
    }
    r->body = p;
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

/* The client's address as text, for refusal logs. */
static void peer_of(struct MHD_Connection *c, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, cap, "-");
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

static void refuse(struct MHD_Connection *c, fx_admin_refusal why, const fx_admin_req *req)
{
    char peer[INET6_ADDRSTRLEN], detail[160];
    peer_of(c, peer, sizeof(peer));
    snprintf(detail, sizeof(detail), "%s %.100s", req->method, req->path);
    fx_admin_count_refusal(why, peer, detail);
}

/* The Host and token checks of the main listener; false when |resp| holds
 * the refusal. */
static bool guard(fx_admin *a, struct MHD_Connection *c, const fx_admin_req *req,
                  fx_admin_resp *resp, reply_extra *x)
{
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!fx_admin_host_allowed(host, a->bind_host, a->allowed_hosts)) {
        refuse(c, FX_ADMIN_REFUSED_HOST, req);
        (void)fx_admin_resp_text(resp, 403,
                                 "forbidden: the Host header names neither this endpoint's "
                                 "address nor localhost nor a name of admin_allowed_hosts\n");
        return false;
    }
    const char *auth =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (fx_admin_authorized(a->remote, a->token, req->method, req->path, auth))
        return true;
    refuse(c, FX_ADMIN_REFUSED_TOKEN, req);
    if (!*a->token && fx_admin_method_is_mutating(req->method)) {
        /* No token can make this call pass: say how to configure one. */
        (void)fx_admin_resp_set(resp, 403, FX_ADMIN_JSON, FX_ADMIN_NO_TOKEN_BODY,
                                strlen(FX_ADMIN_NO_TOKEN_BODY));
        return false;
    }
    x->challenge = true;
    (void)fx_admin_resp_text(resp, 401,
                             *a->token ? "unauthorized: this call needs "
                                         "'Authorization: Bearer <admin token>'\n"
                                       : "unauthorized: no admin token is configured, so this "
                                         "call is refused off loopback\n");
    return false;
}

/* Picks the route for |req| among |l|'s and runs it, or answers
 * 404/405/403/401 itself. */
static void dispatch(const listener *l, struct MHD_Connection *c, fx_admin_req *req,
                     fx_admin_resp *resp, reply_extra *x)
{
    bool path_known = false;
    for (size_t i = 0; i < l->nroutes; i++) {
        const fx_admin_route *rt = &l->routes[i];
        const char *rest;
        if (!path_match(rt->path, req->path, &rest))
            continue;
        path_known = true;
        if (!method_match(rt->method, req->method)) {
            allow_add(x, rt->method);
            continue;
        }
        if (l->guarded && !guard(l->a, c, req, resp, x))
            return;
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

const char *fx_admin_req_arg(const fx_admin_req *req, const char *name)
{
    if (req->conn == NULL)
        return NULL;
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
    /* "?dry_run" alone: MHD answers NULL for a key without '=', so ask
     * whether the key is there at all. */
    if (v == NULL &&
        MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), NULL,
                                      NULL) == MHD_YES)
        return "";
    return v;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    const listener *l = cls;
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
        body_append(r, l->a->max_body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    fx_admin_req req = {.method = method,
                        .path = url,
                        .rest = "",
                        .body = r->body ? r->body : "",
                        .body_len = r->len,
                        .conn = c};
    fx_admin_resp resp = {0};
    reply_extra x = {.allow = ""};
    if (r->too_big) {
        refuse(c, FX_ADMIN_REFUSED_BODY, &req);
        (void)fx_admin_resp_text(&resp, 413, "request body too large\n");
    } else {
        dispatch(l, c, &req, &resp, &x);
    }
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

/* libmicrohttpd refuses a connection over MHD_OPTION_CONNECTION_LIMIT or
 * MHD_OPTION_PER_IP_CONNECTION_LIMIT, and answers 431 to headers over
 * MHD_OPTION_CONNECTION_MEMORY_LIMIT, with these messages and no other sign. */
#define MHD_CONN_LIMIT_MSG "Server reached connection limit"
#define MHD_431_MSG "Error processing request (HTTP response code is 431"

static fx_ratelimit mhd_log_rl = FX_RATELIMIT_INIT;

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (strncmp(line, MHD_CONN_LIMIT_MSG, strlen(MHD_CONN_LIMIT_MSG)) == 0) {
        fx_admin_count_refusal(FX_ADMIN_REFUSED_CONN_LIMIT, NULL, line);
        return;
    }
    if (strncmp(line, MHD_431_MSG, strlen(MHD_431_MSG)) == 0) {
        fx_admin_count_refusal(FX_ADMIN_REFUSED_HEADERS, NULL, "request headers too large (431)");
        return;
    }
    /* A client can make libmicrohttpd complain (bad TLS, bad requests):
     * at most one line a second. */
    FX_LOG_RATELIMITED(&mhd_log_rl, fx_now_ns(), FX_LOG_WARN, "admin", "libmicrohttpd: %s", line);
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

/* Reads the whole PEM file |path| into a NUL-terminated string. */
static int read_pem(const char *path, char **out, char *err, size_t errcap)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        set_err(err, errcap, "admin TLS file %s: %s", path, strerror(errno));
        return FX_ECONFIG;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1 || cap >= (1u << 20))
            break;
        char *p = realloc(buf, cap * 2);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    bool bad = ferror(f) || (buf && len == cap - 1);
    fclose(f);
    if (!buf)
        return -ENOMEM;
    buf[len] = '\0';
    if (bad || len == 0) {
        set_err(err, errcap, "admin TLS file %s: unreadable, empty or over 1 MiB", path);
        free(buf);
        return FX_ECONFIG;
    }
    *out = buf;
    return 0;
}

static int load_tls(fx_admin *a, const fx_admin_opts *o, char *err, size_t errcap)
{
    bool cert = o->tls_cert_file && *o->tls_cert_file, key = o->tls_key_file && *o->tls_key_file;
    if (!cert && !key)
        return 0;
    if (cert != key) {
        set_err(err, errcap, "admin TLS needs both a certificate and a key file");
        return FX_ECONFIG;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        set_err(err, errcap, "admin TLS: this libmicrohttpd was built without TLS support");
        return FX_ECONFIG;
    }
    int rv = read_pem(o->tls_cert_file, &a->tls_cert, err, errcap);
    if (rv == 0)
        rv = read_pem(o->tls_key_file, &a->tls_key, err, errcap);
    return rv;
}

/* What start_daemon() applies to one listener. */
typedef struct daemon_cfg {
    unsigned max_connections, per_ip, timeout_s, threads;
    size_t conn_memory;
    bool tls;
} daemon_cfg;

static int start_daemon(listener *l, const daemon_cfg *dc, int fd, int family)
{
    /* libmicrohttpd may or may not close a listen socket it was given when it
     * fails to start; handing it a duplicate keeps ours ours either way. */
    int mfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mfd < 0)
        return -errno;
    /* MHD_USE_ITC: without it MHD_stop_daemon() wakes the threads by shutting
     * the listen socket, which a thread at its connection limit no longer
     * polls; the stop then waits for that thread's idle timeout. */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (dc->tls)
        flags |= MHD_USE_TLS;
    /* A pool of one is refused with a warning: one thread is the default. */
    struct MHD_OptionItem pool_opts[] = {
        {MHD_OPTION_THREAD_POOL_SIZE, dc->threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, l->a->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, l->a->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    l->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, l, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, l,
        MHD_OPTION_LISTEN_SOCKET, mfd, MHD_OPTION_CONNECTION_LIMIT, dc->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, dc->per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        dc->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, dc->conn_memory,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, l, MHD_OPTION_ARRAY,
        dc->threads > 1 ? pool_opts : pool_opts + 1, MHD_OPTION_ARRAY,
        dc->tls ? tls_opts : tls_opts + 2, MHD_OPTION_END);
    return l->daemon ? 0 : FX_EINTERNAL;
}

/* Binds |bind| and starts listener |l| on it. */
static int listen_start(listener *l, const char *bind, const daemon_cfg *dc, char *err,
                        size_t errcap)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    int rv = fx_admin_parse_bind(bind, &ss, &sslen, err, errcap);
    if (rv != 0)
        return rv;
    int fd = listen_on(&ss, sslen);
    if (fd < 0) {
        set_err(err, errcap, "admin endpoint cannot listen on %s: %s", bind, fx_strerror(fd));
        return fd;
    }
    l->port = bound_port(fd);
    rv = start_daemon(l, dc, fd, ss.ss_family);
    close(fd); /* the daemon serves its duplicate */
    if (rv != 0)
        set_err(err, errcap, "admin endpoint on %s: libmicrohttpd failed to start (%s)", bind,
                fx_strerror(rv));
    return rv;
}

/* The host part of |bind| ("h:p" or "[v6]:p", parsed already) into |out|. */
static void bind_host_of(const char *bind, char *out, size_t cap)
{
    fx_hostport hp;
    snprintf(out, cap, "%s", fx_hostport_split(bind, &hp, NULL) == 0 ? hp.host : bind);
}

static int admin_init(fx_admin *a, const fx_admin_opts *o, const struct sockaddr_storage *ss)
{
    if (!(a->token = strdup(o->token ? o->token : "")) ||
        !(a->allowed_hosts = strdup(o->allowed_hosts ? o->allowed_hosts : "")) ||
        routes_init(a, o) != 0)
        return -ENOMEM;
    bind_host_of(o->bind, a->bind_host, sizeof(a->bind_host));
    a->remote = o->treat_as_remote || !fx_quic_addr_is_loopback((const struct sockaddr *)ss);
    a->metrics_per_stream = o->metrics_per_stream;
    a->max_body = o->max_body ? o->max_body : FX_ADMIN_DEFAULT_MAX_BODY;
    atomic_init(&a->draining, false);
    a->ready = o->ready;
    a->ready_user = o->ready_user;
    a->main = (listener){.a = a, .routes = a->routes, .nroutes = a->nroutes, .guarded = true};
    a->probe = (listener){.a = a, .routes = a->routes + 1, .nroutes = 2}; /* live, ready */
    return 0;
}

static int start_listeners(fx_admin *a, const fx_admin_opts *o, char *err, size_t errcap)
{
    daemon_cfg main_cfg = {
        .max_connections =
            o->max_connections ? o->max_connections : FX_ADMIN_DEFAULT_MAX_CONNECTIONS,
        .per_ip = o->per_ip_limit ? o->per_ip_limit : FX_ADMIN_DEFAULT_PER_IP,
        .timeout_s = o->timeout_s ? o->timeout_s : FX_ADMIN_DEFAULT_TIMEOUT_S,
        .threads = o->threads ? o->threads : FX_ADMIN_DEFAULT_THREADS,
        .conn_memory = o->conn_memory ? o->conn_memory : FX_ADMIN_DEFAULT_CONN_MEMORY,
        .tls = a->tls_cert != NULL,
    };
    int rv = listen_start(&a->main, o->bind, &main_cfg, err, errcap);
    if (rv != 0 || !o->probe_bind || !*o->probe_bind)
        return rv;
    daemon_cfg probe_cfg = {.max_connections = FX_ADMIN_PROBE_MAX_CONNECTIONS,
                            .per_ip = FX_ADMIN_PROBE_PER_IP,
                            .timeout_s = FX_ADMIN_PROBE_TIMEOUT_S,
                            .threads = 1,
                            .conn_memory = FX_ADMIN_DEFAULT_CONN_MEMORY};
    return listen_start(&a->probe, o->probe_bind, &probe_cfg, err, errcap);
}

int fx_admin_start(fx_admin **pa, const fx_admin_opts *o, char *err, size_t errcap)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    int rv = fx_admin_parse_bind(o->bind, &ss, &sslen, err, errcap);
    if (rv != 0)
        return rv;
    fx_admin *a = calloc(1, sizeof(*a));
    if (!a || admin_init(a, o, &ss) != 0) {
        set_err(err, errcap, "admin endpoint %s: out of memory", o->bind);
        fx_admin_free(a);
        return -ENOMEM;
    }
    if ((rv = load_tls(a, o, err, errcap)) != 0 || (rv = start_listeners(a, o, err, errcap)) != 0) {
        if (rv == -ENOMEM)
            set_err(err, errcap, "admin endpoint %s: out of memory", o->bind);
        fx_admin_free(a);
        return rv;
    }
    if (!*a->token)
        FX_LOG_WARN("admin",
                    "bind=%s: no admin_token is set, so stream create, change and delete "
                    "calls (PUT, PATCH, DELETE) are refused%s; set admin_token "
                    "(docs/auth.md)",
                    o->bind, a->remote ? ", and so are /v1 reads (not loopback)" : "");
    *pa = a;
    return 0;
}

uint16_t fx_admin_port(const fx_admin *a)
{
    return a->main.port;
}

uint16_t fx_admin_probe_port(const fx_admin *a)
{
    return a->probe.daemon ? a->probe.port : 0;
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
    if (!a)
        return;
    listener *ls[] = {&a->probe, &a->main};
    for (size_t i = 0; i < 2; i++) {
        if (ls[i]->daemon) {
            MHD_stop_daemon(ls[i]->daemon);
            ls[i]->daemon = NULL;
        }
    }
}

void fx_admin_free(fx_admin *a)
{
    if (!a)
        return;
    fx_admin_stop(a);
    free(a->routes);
    free(a->token);
    free(a->allowed_hosts);
    free(a->tls_cert);
    if (a->tls_key) {
        explicit_bzero(a->tls_key, strlen(a->tls_key));
        free(a->tls_key);
    }
    free(a);
}
