/* fx_etcd: the etcd v3 JSON-gateway client on one fx_loop (the cluster
 * thread's). libcurl's multi interface runs every request: its sockets are
 * fx_loop fd watches and its timeout one fx_timer, so nothing here blocks.
 * Requests are never started from inside a libcurl callback: submissions,
 * retries and watch stops queue work and arm the |kick| timer, which runs it
 * from the loop. Everything (client, requests, watches, sockets) is owned by
 * the loop thread. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/log.h"
#include "cluster/etcd.h"
#include "felix/error.h"

#define DEFAULT_TIMEOUT_MS 2000u
#define DEFAULT_CONNECT_TIMEOUT_MS 1000u
#define DEFAULT_MAX_IN_FLIGHT 256u
#define DEFAULT_MAX_RESPONSE (4u << 20)
#define WATCH_BACKOFF_MIN_MS 100u
#define WATCH_BACKOFF_MAX_MS 2000u

typedef struct req req;
typedef struct sock sock;

struct req {
    fx_etcd *e;
    fx_etcd_kind kind;
    const char *path;
    char *body;
    fx_etcd_cb cb;
    void *user;
    fx_etcd_watch *watch; /* the stream of this watch, or NULL (unary) */
    bool internal;        /* the authentication request: counts no slot */
    bool retry_safe;      /* may be sent again after a timeout or "no leader" */
    bool too_big;
    bool auth_retried;
    unsigned tries; /* sends so far */
    unsigned token_gen; /* the token it was sent with */
    size_t endpoint;
    CURL *h;
    struct curl_slist *hdrs;
    char *resp;
    size_t resp_len, resp_cap;
    uint64_t t0; /* submission, for the latency */
    req *next, *prev;
    struct req_list *on; /* the list |r| is on, or NULL */
    char errbuf[CURL_ERROR_SIZE];
};

/* A list of requests in one state. */
typedef struct req_list {
    req *head, *tail;
} req_list;

struct sock {
    fx_watch w;
    fx_etcd *e;
    curl_socket_t fd;
    sock *next, *prev;
};

struct fx_etcd_watch {
    fx_etcd *e;
    fx_etcd_watch_opts o; /* key and range_end point into |key|, |range_end| */
    uint8_t *key;
    uint8_t *range_end;
    fx_etcd_watch_cbs cbs;
    void *user;
    int64_t next_rev;
    req *r; /* the current stream, or NULL between two */
    fx_timer restart;
    fx_timer idle; /* idle_timeout_ms: the stream brought nothing for that long */
    uint32_t backoff_ms;
    fx_etcd_lines lines;
    bool stopped;
    bool restart_now; /* compaction: restart at once, no backoff */
    int end_rv;       /* why the stream was cut by us, if it was */
    int end_code;
    char *end_msg;
    fx_etcd_watch *next, *prev;
};

struct fx_etcd {
    fx_loop *loop;
    CURLM *multi;
    fx_timer timer; /* libcurl's timeout */
    fx_timer kick;  /* runs |pending| and stopped watches outside libcurl */
    char *endpoints[FX_ETCD_MAX_ENDPOINTS];
    size_t n_ep;
    size_t cur;
    uint32_t timeout_ms, connect_timeout_ms;
    size_t max_in_flight, max_response;
    char *ca, *cert, *key, *user, *password;
    char *token;
    unsigned token_gen; /* bumped with each new token */
    bool authing;
    req_list pending; /* to start at the next kick */
    req_list waiting; /* for a token */
    req_list active;  /* in libcurl */
    size_t in_flight; /* slots used: unary requests and watches */
    sock *socks;
    fx_etcd_watch *watches;
    fx_etcd_stats st;
};

static void list_push(req_list *l, req *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    r->on = l;
}

static void list_del(req_list *l, req *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->next = r->prev = NULL;
    r->on = NULL;
}

static void kick(fx_etcd *e)
{
    /* Re-arming an armed timer never fails; the first arm can only fail for
     * memory, and a timer stays in the heap's room once it has been in it. */
    if (!fx_timer_is_armed(&e->kick) && fx_loop_timer_arm(e->loop, &e->kick, 0) != 0)
        FX_LOG_ERROR("etcd", "cannot arm the request timer: requests wait for the next one");
}

/* ---- libcurl glue -------------------------------------------------------- */

static void process_done(fx_etcd *e);

static void on_sock(fx_loop *l, fx_watch *w, uint32_t events)
{
    sock *s = w->user;
    fx_etcd *e = s->e;
    int flags = 0;
    if (events & EPOLLIN)
        flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_ERR;
    int running = 0;
    /* |s| may be freed inside (CURL_POLL_REMOVE): not touched after. */
    CURLMcode mc = curl_multi_socket_action(e->multi, s->fd, flags, &running);
    if (mc != CURLM_OK)
        FX_LOG_ERROR("etcd", "libcurl socket action: %s", curl_multi_strerror(mc));
    process_done(e);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    fx_etcd *e = userp;
    sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            fx_loop_unwatch(e->loop, &s->w);
            if (s->prev != NULL)
                s->prev->next = s->next;
            else
                e->socks = s->next;
            if (s->next != NULL)
                s->next->prev = s->prev;
            free(s);
            curl_multi_assign(e->multi, fd, NULL);
        }
        return 0;
    }
    uint32_t ev = 0;
    if (what & CURL_POLL_IN)
        ev |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev |= EPOLLOUT;
    if (s != NULL)
        return fx_loop_watch_mod(e->loop, &s->w, ev) == 0 ? 0 : -1;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->e = e;
    s->fd = fd;
    if (fx_loop_watch(e->loop, &s->w, fd, ev, on_sock, s) != 0) {
        free(s);
        return -1;
    }
    s->next = e->socks;
    if (e->socks != NULL)
        e->socks->prev = s;
    e->socks = s;
    curl_multi_assign(e->multi, fd, s);
    return 0;
}

static void on_curl_timer(fx_loop *l, fx_timer *t, void *user)
{
    fx_etcd *e = user;
    int running = 0;
    CURLMcode mc = curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    if (mc != CURLM_OK)
        FX_LOG_ERROR("etcd", "libcurl timeout action: %s", curl_multi_strerror(mc));
    process_done(e);
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    fx_etcd *e = userp;
    if (timeout_ms < 0) {
        fx_loop_timer_cancel(e->loop, &e->timer);
        return 0;
    }
    uint64_t at = fx_now_ns() + (uint64_t)timeout_ms * FX_NS_PER_MS;
    return fx_loop_timer_arm(e->loop, &e->timer, at) == 0 ? 0 : -1;
}

/* ---- requests ------------------------------------------------------------ */

static void req_free(req *r)
{
    if (r == NULL)
        return;
    if (r->h != NULL)
        curl_easy_cleanup(r->h);
    curl_slist_free_all(r->hdrs);
    free(r->body);
    free(r->resp);
    free(r);
}

static size_t on_unary_data(char *p, size_t sz, size_t n, void *user)
{
    req *r = user;
    size_t len = sz * n;
    if (r->resp_len + len > r->e->max_response) {
        r->too_big = true;
        return 0; /* CURLE_WRITE_ERROR */
    }
    if (r->resp_len + len + 1 > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 512;
        while (cap < r->resp_len + len + 1)
            cap *= 2;
        char *b = realloc(r->resp, cap);
        if (b == NULL)
            return 0;
        r->resp = b;
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, p, len);
    r->resp_len += len;
    r->resp[r->resp_len] = '\0';
    return len;
}

static size_t on_watch_data(char *p, size_t sz, size_t n, void *user);

/* Hands |r| to libcurl on its endpoint. Returns 0 or a negative error. */
static int start_req(fx_etcd *e, req *r)
{
    char url[1024];
    r->endpoint = e->cur;
    snprintf(url, sizeof(url), "%s%s", e->endpoints[r->endpoint], r->path);
    if (r->h != NULL)
        curl_easy_cleanup(r->h);
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;
    r->resp_len = 0;
    r->too_big = false;
    r->h = curl_easy_init();
    if (r->h == NULL)
        return -ENOMEM;
    /* Without hasleader, a watch on a member without a leader hangs silently
     * and a put waits 7 s; with it both fail at once (design 1.7). An empty
     * Expect stops the 100-continue round trip curl adds to large bodies. */
    struct curl_slist *h = curl_slist_append(NULL, "Grpc-Metadata-hasleader: true");
    if (h != NULL)
        h = curl_slist_append(r->hdrs = h, "Expect:");
    if (h != NULL)
        h = curl_slist_append(r->hdrs = h, "Content-Type: application/json");
    if (h != NULL && e->token != NULL && !r->internal) {
        char auth[512];
        /* The gateway takes the bare token, no "Bearer". */
        snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
        r->token_gen = e->token_gen;
        h = curl_slist_append(r->hdrs = h, auth);
    }
    if (h == NULL)
        return -ENOMEM;
    r->hdrs = h;
    CURL *c = r->h;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(c, CURLOPT_PRIVATE, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)e->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    if (r->watch != NULL) {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, r->watch);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_unary_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
    }
    if (e->ca != NULL) {
        /* Trust that CA alone: not also the system's directory, which is
         * also slow to load on every handshake. */
        curl_easy_setopt(c, CURLOPT_CAINFO, e->ca);
        curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
    }
    if (e->cert != NULL)
        curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
    if (e->key != NULL)
        curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
    r->errbuf[0] = '\0';
    if (curl_multi_add_handle(e->multi, c) != CURLM_OK)
        return FX_EINTERNAL;
    r->tries++;
    e->st.requests[r->kind]++;
    list_push(&e->active, r);
    return 0;
}

static void deliver(fx_etcd *e, req *r, fx_etcd_resp *resp);
static void start_auth(fx_etcd *e);
static void watch_ended(fx_etcd *e, req *r, int rv, int code, const char *msg);

/* Fails |r| with |rv| without an answer from etcd. */
static void fail_req(fx_etcd *e, req *r, int rv, const char *msg)
{
    if (r->watch != NULL) {
        watch_ended(e, r, rv, 0, msg);
        return;
    }
    fx_etcd_resp resp = {.kind = r->kind, .rv = rv};
    if (msg != NULL)
        resp.message = strdup(msg);
    deliver(e, r, &resp);
}

static void on_kick(fx_loop *l, fx_timer *t, void *user)
{
    fx_etcd *e = user;
    /* Watches stopped since the last kick: their streams leave libcurl here,
     * outside any libcurl callback. */
    for (fx_etcd_watch *w = e->watches, *nw; w != NULL; w = nw) {
        nw = w->next;
        if (!w->stopped)
            continue;
        if (w->r != NULL) {
            req *r = w->r;
            if (r->on == &e->active)
                curl_multi_remove_handle(e->multi, r->h);
            if (r->on != NULL)
                list_del(r->on, r);
            req_free(r);
            w->r = NULL;
        }
        fx_loop_timer_cancel(e->loop, &w->restart);
        fx_loop_timer_cancel(e->loop, &w->idle);
        if (w->prev != NULL)
            w->prev->next = w->next;
        else
            e->watches = w->next;
        if (w->next != NULL)
            w->next->prev = w->prev;
        fx_etcd_lines_deinit(&w->lines);
        free(w->key);
        free(w->range_end);
        free(w->end_msg);
        free(w);
        e->in_flight--;
    }
    req_list todo = e->pending;
    e->pending = (req_list){0};
    for (req *r = todo.head, *nr; r != NULL; r = nr) {
        nr = r->next;
        r->next = r->prev = NULL;
        r->on = NULL;
        if (e->user != NULL && e->token == NULL && !r->internal) {
            list_push(&e->waiting, r);
            start_auth(e);
            continue;
        }
        int rv = start_req(e, r);
        if (rv != 0) {
            FX_LOG_ERROR("etcd", "cannot start a request: %s", fx_strerror(rv));
            fail_req(e, r, rv, NULL);
        }
    }
    /* Requests just added get going at libcurl's next timeout (armed by
     * curl_multi_add_handle), on this loop. */
}

static void queue_req(fx_etcd *e, req *r)
{
    list_push(&e->pending, r);
    kick(e);
}

static bool is_connect_error(CURLcode cc)
{
    return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
           cc == CURLE_COULDNT_RESOLVE_PROXY;
}

static bool is_tls_error(CURLcode cc)
{
    return cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_PEER_FAILED_VERIFICATION ||
           cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_CIPHER || cc == CURLE_SSL_CACERT_BADFILE ||
           cc == CURLE_SSL_ISSUER_ERROR || cc == CURLE_SSL_CRL_BADFILE;
}

/* The endpoint |ep| failed: later requests start at the next one. */
static void failover(fx_etcd *e, size_t ep, const char *why)
{
    if (e->n_ep < 2 || e->cur != ep)
        return;
    e->cur = (e->cur + 1) % e->n_ep;
    e->st.failovers++;
    FX_LOG_WARN("etcd", "endpoint %s failed (%s): using %s", e->endpoints[ep], why,
                e->endpoints[e->cur]);
}

/* Sends |r| again (next endpoint or new token) if it has tries left. */
static bool retry(fx_etcd *e, req *r)
{
    if (r->tries >= e->n_ep)
        return false;
    e->st.retries++;
    queue_req(e, r);
    return true;
}

static void record_latency(fx_etcd *e, uint64_t ns)
{
    fx_etcd_stats *s = &e->st;
    s->latency_count++;
    s->latency_ns_sum += ns;
    if (ns > s->latency_ns_max)
        s->latency_ns_max = ns;
    static const uint64_t bound[4] = {FX_NS_PER_MS, 10 * FX_NS_PER_MS, 100 * FX_NS_PER_MS,
                                      FX_NS_PER_S};
    size_t i = 0;
    while (i < 4 && ns > bound[i])
        i++;
    s->latency_buckets[i]++;
}

/* Runs |r|'s callback with |resp| and frees both. */
static void deliver(fx_etcd *e, req *r, fx_etcd_resp *resp)
{
    if (!r->internal) {
        record_latency(e, fx_now_ns() - r->t0);
        if (resp->rv == 0)
            e->st.ok++;
        e->in_flight--;
    }
    if (r->cb != NULL)
        r->cb(e, resp, r->user);
    fx_etcd_resp_clear(resp);
    req_free(r);
}

/* A request libcurl finished with |cc|. */
static void finish(fx_etcd *e, req *r, CURLcode cc)
{
    long status = 0, sent = 0;
    curl_off_t connect_us = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(r->h, CURLINFO_CONNECT_TIME_T, &connect_us);
    curl_easy_getinfo(r->h, CURLINFO_REQUEST_SIZE, &sent);
    /* Timed out before a connection was made and before a byte of the
     * request went out: it cannot have reached etcd. */
    bool unsent_timeout = cc == CURLE_OPERATION_TIMEDOUT && connect_us == 0 && sent == 0;
    const char *ep = e->endpoints[r->endpoint];
    if (r->watch != NULL) {
        fx_etcd_watch *w = r->watch;
        int rv = 0, code = 0;
        const char *msg = r->errbuf[0] ? r->errbuf : NULL;
        if (w->end_rv != 0) {
            rv = w->end_rv;
            code = w->end_code;
            msg = w->end_msg;
        } else if (is_connect_error(cc) || unsent_timeout) {
            e->st.err_connect++;
            failover(e, r->endpoint, "connect");
            rv = FX_ENOTCONN;
        } else if (is_tls_error(cc)) {
            e->st.err_tls++;
            rv = FX_ETLS;
        } else if (cc != CURLE_OK) {
            e->st.err_connect++;
            rv = FX_ECONNLOST;
        } else if (status == 401) {
            rv = FX_EAUTH;
            code = 16;
        } else if (status != 200) {
            e->st.err_remote++;
            rv = FX_EREMOTE;
        } else {
            rv = FX_EEOF;
        }
        watch_ended(e, r, rv, code, msg);
        return;
    }
    if (r->too_big) {
        e->st.err_too_big++;
        fail_req(e, r, FX_ETOOBIG, "answer larger than max_response_bytes");
        return;
    }
    if (is_connect_error(cc) || unsent_timeout) {
        /* Never reached etcd: safe to send anywhere else. */
        e->st.err_connect++;
        failover(e, r->endpoint, curl_easy_strerror(cc));
        if (retry(e, r))
            return;
        fail_req(e, r, cc == CURLE_OPERATION_TIMEDOUT ? FX_ETIMEDOUT : FX_ENOTCONN,
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
        return;
    }
    if (is_tls_error(cc)) {
        e->st.err_tls++;
        FX_LOG_WARN("etcd", "TLS with %s failed: %s", ep, r->errbuf);
        fail_req(e, r, FX_ETLS, r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
        return;
    }
    if (cc != CURLE_OK) {
        /* Timed out or cut after the request may have reached etcd. */
        bool timeout = cc == CURLE_OPERATION_TIMEDOUT;
        if (timeout)
            e->st.err_timeout++;
        else
            e->st.err_connect++;
        failover(e, r->endpoint, curl_easy_strerror(cc));
        if (r->retry_safe && retry(e, r))
            return;
        fail_req(e, r, timeout ? FX_ETIMEDOUT : FX_ECONNLOST,
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
        return;
    }
    fx_etcd_resp resp;
    int rv = fx_etcd_decode_resp(r->kind, (int)status, r->resp ? r->resp : "", r->resp_len, &resp);
    if (rv == FX_EREMOTE) {
        e->st.err_remote++;
        if (resp.grpc_code == 14 || status == 503) {
            /* etcd refuses a request on a member without a leader before it
             * proposes anything (the hasleader check), so any op may go to
             * the next endpoint. */
            bool no_leader = resp.message != NULL && strstr(resp.message, "no leader") != NULL;
            if (no_leader)
                e->st.err_no_leader++;
            failover(e, r->endpoint, no_leader ? "no leader" : "unavailable");
            /* "request timed out" (also code 14) may follow a proposal: only
             * safe ops go again then. */
            if ((no_leader || r->retry_safe) && retry(e, r)) {
                fx_etcd_resp_clear(&resp);
                return;
            }
        }
        if ((resp.grpc_code == 16 || status == 401) && e->user != NULL && !r->internal &&
            !r->auth_retried) {
            /* Simple tokens expire after 300 s idle: fetch a new one and send
             * this once more. */
            r->auth_retried = true;
            r->tries = 0;
            if (r->token_gen == e->token_gen) {
                /* Not if a newer token came meanwhile (several requests
                 * sent with the old one all come back refused). */
                free(e->token);
                e->token = NULL;
            }
            fx_etcd_resp_clear(&resp);
            e->st.retries++;
            queue_req(e, r);
            return;
        }
    } else if (rv == FX_EPROTO) {
        e->st.err_proto++;
        FX_LOG_WARN("etcd", "undecodable answer from %s%s (HTTP %ld)", ep, r->path, status);
    }
    if (rv == 0 && resp.kind == FX_ETCD_KIND_LEASE_KEEPALIVE && resp.lease_lost)
        e->st.leases_lost++;
    deliver(e, r, &resp);
}

static void process_done(fx_etcd *e)
{
    CURLMsg *m;
    int left = 0;
    while ((m = curl_multi_info_read(e->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *h = m->easy_handle;
        CURLcode cc = m->data.result;
        req *r = NULL;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
        curl_multi_remove_handle(e->multi, h);
        list_del(&e->active, r);
        finish(e, r, cc);
    }
}

/* ---- auth ---------------------------------------------------------------- */

static void auth_done(fx_etcd *e, const fx_etcd_resp *resp, void *user)
{
    e->authing = false;
    req_list w = e->waiting;
    e->waiting = (req_list){0};
    if (resp->rv == 0) {
        free(e->token);
        e->token = strdup(resp->token);
        e->token_gen++;
        e->st.auth++;
        for (req *r = w.head, *nr; r != NULL; r = nr) {
            nr = r->next;
            list_push(&e->pending, r);
        }
        kick(e);
        return;
    }
    int rv = resp->rv == FX_EREMOTE ? FX_EAUTH : resp->rv;
    FX_LOG_WARN("etcd", "authentication as %s failed: %s%s%s", e->user, fx_strerror(resp->rv),
                resp->message ? ": " : "", resp->message ? resp->message : "");
    for (req *r = w.head, *nr; r != NULL; r = nr) {
        nr = r->next;
        r->next = r->prev = NULL;
        r->on = NULL;
        fail_req(e, r, rv, resp->message);
    }
}

static req *req_new(fx_etcd *e, fx_etcd_kind kind, const char *path, char *body, fx_etcd_cb cb,
                    void *user)
{
    req *r = calloc(1, sizeof(*r));
    if (r == NULL || body == NULL) {
        free(r);
        free(body);
        return NULL;
    }
    r->e = e;
    r->kind = kind;
    r->path = path;
    r->body = body;
    r->cb = cb;
    r->user = user;
    r->t0 = fx_now_ns();
    return r;
}

static void start_auth(fx_etcd *e)
{
    if (e->authing)
        return;
    json_t *o = json_pack("{ssss}", "name", e->user, "password", e->password);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    req *r = req_new(e, FX_ETCD_KIND_AUTH, "/v3/auth/authenticate", body, auth_done, NULL);
    if (r == NULL) {
        fx_etcd_resp resp = {.kind = FX_ETCD_KIND_AUTH, .rv = -ENOMEM};
        auth_done(e, &resp, NULL);
        return;
    }
    r->internal = true;
    r->retry_safe = true;
    e->authing = true;
    queue_req(e, r);
}

/* ---- submission ---------------------------------------------------------- */

static int submit(fx_etcd *e, fx_etcd_kind kind, const char *path, char *body, bool retry_safe,
                  fx_etcd_cb cb, void *user)
{
    if (e->in_flight >= e->max_in_flight) {
        free(body);
        e->st.refused_full++;
        return FX_EFULL;
    }
    req *r = req_new(e, kind, path, body, cb, user);
    if (r == NULL)
        return -ENOMEM;
    r->retry_safe = retry_safe;
    e->in_flight++;
    queue_req(e, r);
    return 0;
}

int fx_etcd_range(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user)
{
    fx_etcd_op o = *op;
    o.kind = FX_ETCD_RANGE;
    return submit(e, FX_ETCD_KIND_RANGE, "/v3/kv/range", fx_etcd_encode_op(&o), true, cb, user);
}

int fx_etcd_put(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user)
{
    fx_etcd_op o = *op;
    o.kind = FX_ETCD_PUT;
    return submit(e, FX_ETCD_KIND_PUT, "/v3/kv/put", fx_etcd_encode_op(&o), false, cb, user);
}

int fx_etcd_delete(fx_etcd *e, const fx_etcd_op *op, fx_etcd_cb cb, void *user)
{
    fx_etcd_op o = *op;
    o.kind = FX_ETCD_DELETE;
    return submit(e, FX_ETCD_KIND_DELETE, "/v3/kv/deleterange", fx_etcd_encode_op(&o), false, cb,
                  user);
}

int fx_etcd_txn(fx_etcd *e, const fx_etcd_txn_req *t, fx_etcd_cb cb, void *user)
{
    return submit(e, FX_ETCD_KIND_TXN, "/v3/kv/txn", fx_etcd_encode_txn(t), false, cb, user);
}

static char *lease_body(int64_t id, int64_t ttl, bool keys)
{
    char b[128];
    size_t n = 0;
    const char *sep = "";
    b[n++] = '{';
    if (ttl != 0) {
        n += (size_t)snprintf(b + n, sizeof(b) - n, "\"TTL\":\"%" PRId64 "\"", ttl);
        sep = ",";
    }
    if (id != 0) {
        n += (size_t)snprintf(b + n, sizeof(b) - n, "%s\"ID\":\"%" PRId64 "\"", sep, id);
        sep = ",";
    }
    if (keys)
        n += (size_t)snprintf(b + n, sizeof(b) - n, "%s\"keys\":true", sep);
    snprintf(b + n, sizeof(b) - n, "}");
    return strdup(b);
}

int fx_etcd_lease_grant(fx_etcd *e, int64_t ttl_s, int64_t id, fx_etcd_cb cb, void *user)
{
    return submit(e, FX_ETCD_KIND_LEASE_GRANT, "/v3/lease/grant", lease_body(id, ttl_s, false),
                  false, cb, user);
}

int fx_etcd_lease_keepalive(fx_etcd *e, int64_t id, fx_etcd_cb cb, void *user)
{
    return submit(e, FX_ETCD_KIND_LEASE_KEEPALIVE, "/v3/lease/keepalive", lease_body(id, 0, false),
                  true, cb, user);
}

int fx_etcd_lease_revoke(fx_etcd *e, int64_t id, fx_etcd_cb cb, void *user)
{
    return submit(e, FX_ETCD_KIND_LEASE_REVOKE, "/v3/lease/revoke", lease_body(id, 0, false), true,
                  cb, user);
}

int fx_etcd_lease_timetolive(fx_etcd *e, int64_t id, bool keys, fx_etcd_cb cb, void *user)
{
    return submit(e, FX_ETCD_KIND_LEASE_TTL, "/v3/lease/timetolive", lease_body(id, 0, keys), true,
                  cb, user);
}

/* ---- watch --------------------------------------------------------------- */

/* (Re)starts the silence deadline of |w|'s stream, when it has one. */
static void arm_idle(fx_etcd_watch *w)
{
    if (w->o.idle_timeout_ms == 0 || !w->o.progress_notify)
        return;
    if (fx_loop_timer_arm(w->e->loop, &w->idle,
                          fx_now_ns() + (uint64_t)w->o.idle_timeout_ms * FX_NS_PER_MS) != 0)
        FX_LOG_ERROR("etcd", "cannot arm a watch's idle deadline: a silent stream goes unnoticed");
}

static void on_watch_idle(fx_loop *l, fx_timer *t, void *user)
{
    fx_etcd_watch *w = user;
    fx_etcd *e = w->e;
    req *r = w->r;
    if (w->stopped || r == NULL)
        return;
    if (r->on != &e->active) {
        arm_idle(w); /* not sent yet (waiting for a token): not silent */
        return;
    }
    /* From the loop, not inside libcurl: the stream can leave it here. */
    curl_multi_remove_handle(e->multi, r->h);
    list_del(&e->active, r);
    e->st.err_timeout++;
    failover(e, r->endpoint, "watch silent");
    watch_ended(e, r, FX_ETIMEDOUT, 0, "no event and no progress notification");
}

/* Cuts the current stream from inside its write callback. */
static int watch_cut(fx_etcd_watch *w, int rv, int code, const char *msg)
{
    if (w->end_rv == 0) {
        w->end_rv = rv;
        w->end_code = code;
        free(w->end_msg);
        w->end_msg = msg ? strdup(msg) : NULL;
    }
    return 1;
}

static int on_watch_line(const char *line, size_t len, void *user)
{
    fx_etcd_watch *w = user;
    fx_etcd *e = w->e;
    if (w->stopped)
        return 1;
    arm_idle(w);
    fx_etcd_watch_msg m;
    int rv = fx_etcd_decode_watch_msg(line, len, &m);
    if (rv != 0) {
        if (rv == FX_EPROTO)
            e->st.err_proto++;
        else
            e->st.err_remote++;
        if (m.grpc_code == 14) {
            e->st.err_no_leader++;
            failover(e, w->r->endpoint, "no leader");
        }
        rv = watch_cut(w, rv, m.grpc_code, m.message);
        fx_etcd_watch_msg_clear(&m);
        return rv;
    }
    if (m.canceled) {
        if (m.compact_revision > 0) {
            /* The history before |compact_revision| is gone: say so, then go
             * on from there (design 1.6). */
            e->st.watch_compactions++;
            w->next_rev = m.compact_revision;
            w->restart_now = true;
            if (w->cbs.on_compacted != NULL)
                w->cbs.on_compacted(w, m.compact_revision, w->user);
            rv = watch_cut(w, FX_ECURSOR_TOO_OLD, 11, "compacted");
        } else {
            e->st.err_remote++;
            rv = watch_cut(w, FX_EREMOTE, 0, m.message ? m.message : "watch canceled");
        }
        fx_etcd_watch_msg_clear(&m);
        return rv;
    }
    if (m.created) {
        w->backoff_ms = WATCH_BACKOFF_MIN_MS;
        /* A watch "from now" goes on after this revision if it restarts. */
        if (w->next_rev == 0 && m.revision > 0)
            w->next_rev = m.revision + 1;
    }
    if (m.n_events > 0) {
        for (size_t i = 0; i < m.n_events; i++)
            if (m.events[i].kv.mod_revision + 1 > w->next_rev)
                w->next_rev = m.events[i].kv.mod_revision + 1;
        e->st.watch_events += m.n_events;
        if (w->cbs.on_events != NULL)
            w->cbs.on_events(w, m.revision, m.events, m.n_events, w->user);
    } else if (!m.created && m.revision + 1 > w->next_rev && w->next_rev > 0) {
        /* A progress notification: everything up to |revision| was sent. */
        w->next_rev = m.revision + 1;
    }
    fx_etcd_watch_msg_clear(&m);
    return w->stopped ? 1 : 0;
}

static size_t on_watch_data(char *p, size_t sz, size_t n, void *user)
{
    fx_etcd_watch *w = user;
    int rv = fx_etcd_lines_feed(&w->lines, p, sz * n, on_watch_line, w);
    if (rv == 0)
        return sz * n;
    if (rv == FX_ETOOBIG) {
        w->e->st.err_too_big++;
        watch_cut(w, rv, 0, "watch message larger than max_response_bytes");
    } else if (rv < 0) {
        watch_cut(w, rv, 0, NULL);
    }
    return 0;
}

static int watch_send(fx_etcd_watch *w)
{
    fx_etcd_watch_opts o = w->o;
    if (w->next_rev > 0)
        o.start_revision = w->next_rev;
    req *r = req_new(w->e, FX_ETCD_KIND_WATCH, "/v3/watch", fx_etcd_encode_watch_create(&o), NULL,
                     NULL);
    if (r == NULL)
        return -ENOMEM;
    r->watch = w;
    r->retry_safe = true;
    w->r = r;
    w->end_rv = 0;
    w->end_code = 0;
    free(w->end_msg);
    w->end_msg = NULL;
    w->restart_now = false;
    w->lines.len = 0;
    queue_req(w->e, r);
    arm_idle(w);
    return 0;
}

static void on_watch_restart(fx_loop *l, fx_timer *t, void *user)
{
    fx_etcd_watch *w = user;
    if (w->stopped || w->r != NULL)
        return;
    int rv = watch_send(w);
    if (rv != 0) {
        FX_LOG_ERROR("etcd", "cannot restart a watch: %s; trying again", fx_strerror(rv));
        if (fx_loop_timer_arm(l, t, fx_now_ns() + WATCH_BACKOFF_MAX_MS * FX_NS_PER_MS) != 0)
            FX_LOG_ERROR("etcd", "cannot arm a watch restart: the watch stays down");
    }
}

/* The stream |r| of a watch ended (|rv| why): count, tell, restart later. */
static void watch_ended(fx_etcd *e, req *r, int rv, int code, const char *msg)
{
    fx_etcd_watch *w = r->watch;
    w->r = NULL;
    fx_loop_timer_cancel(e->loop, &w->idle);
    bool now = w->restart_now;
    bool stale_token = code == 16 && r->token_gen == e->token_gen;
    char *m = msg ? strdup(msg) : NULL;
    req_free(r);
    if (w->stopped) {
        free(m);
        return; /* freed by the next kick */
    }
    if (stale_token && e->user != NULL) {
        free(e->token);
        e->token = NULL;
    }
    e->st.watch_restarts++;
    if (!now) {
        FX_LOG_WARN("etcd", "watch stream ended (%s%s%s): restarting from revision %" PRId64,
                    fx_strerror(rv), m ? ": " : "", m ? m : "", w->next_rev);
        if (w->cbs.on_restart != NULL)
            w->cbs.on_restart(w, rv, m, w->user);
    }
    free(m);
    if (w->stopped)
        return;
    uint32_t delay = now ? 0 : w->backoff_ms;
    if (!now)
        w->backoff_ms = w->backoff_ms * 2 > WATCH_BACKOFF_MAX_MS ? WATCH_BACKOFF_MAX_MS
                                                                 : w->backoff_ms * 2;
    if (fx_loop_timer_arm(e->loop, &w->restart, fx_now_ns() + delay * FX_NS_PER_MS) != 0)
        FX_LOG_ERROR("etcd", "cannot arm a watch restart: the watch stays down");
}

static uint8_t *dup_bytes(const void *p, size_t n)
{
    uint8_t *b = malloc(n + 1);
    if (b != NULL) {
        memcpy(b, p, n);
        b[n] = 0;
    }
    return b;
}

int fx_etcd_watch_start(fx_etcd *e, const fx_etcd_watch_opts *o, const fx_etcd_watch_cbs *cbs,
                        void *user, fx_etcd_watch **pw)
{
    if (e->in_flight >= e->max_in_flight) {
        e->st.refused_full++;
        return FX_EFULL;
    }
    fx_etcd_watch *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->e = e;
    w->o = *o;
    size_t kl = o->key_len ? o->key_len : strlen(o->key);
    w->key = dup_bytes(o->key, kl);
    w->o.key = w->key;
    w->o.key_len = kl;
    if (o->range_end != NULL) {
        size_t rl = o->range_end_len ? o->range_end_len : strlen(o->range_end);
        w->range_end = dup_bytes(o->range_end, rl);
        w->o.range_end = w->range_end;
        w->o.range_end_len = rl;
        if (w->range_end == NULL)
            goto err;
    }
    if (w->key == NULL)
        goto err;
    if (cbs != NULL)
        w->cbs = *cbs;
    w->user = user;
    w->next_rev = o->start_revision;
    w->backoff_ms = WATCH_BACKOFF_MIN_MS;
    fx_timer_init(&w->restart, on_watch_restart, w);
    fx_timer_init(&w->idle, on_watch_idle, w);
    fx_etcd_lines_init(&w->lines, e->max_response);
    if (watch_send(w) != 0)
        goto err;
    w->next = e->watches;
    if (e->watches != NULL)
        e->watches->prev = w;
    e->watches = w;
    e->in_flight++;
    *pw = w;
    return 0;
err:
    free(w->key);
    free(w->range_end);
    free(w);
    return -ENOMEM;
}

void fx_etcd_watch_stop(fx_etcd_watch *w)
{
    if (w == NULL || w->stopped)
        return;
    w->stopped = true;
    kick(w->e);
}

int64_t fx_etcd_watch_next_revision(const fx_etcd_watch *w)
{
    return w->next_rev;
}

/* ---- lifecycle ----------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rv;

static void curl_init(void)
{
    curl_init_rv = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool dup_opt(char **dst, const char *s)
{
    *dst = NULL;
    return s == NULL || (*dst = strdup(s)) != NULL;
}

int fx_etcd_new(fx_etcd **pe, fx_loop *l, const fx_etcd_opts *o)
{
    if (o->n_endpoints == 0 || o->n_endpoints > FX_ETCD_MAX_ENDPOINTS ||
        (o->user == NULL) != (o->password == NULL))
        return FX_ECONFIG;
    for (size_t i = 0; i < o->n_endpoints; i++)
        if (o->endpoints[i] == NULL || (strncmp(o->endpoints[i], "http://", 7) != 0 &&
                                        strncmp(o->endpoints[i], "https://", 8) != 0))
            return FX_ECONFIG;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rv != CURLE_OK)
        return FX_EINTERNAL;
    fx_etcd *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    e->loop = l;
    e->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    e->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms
                                                  : DEFAULT_CONNECT_TIMEOUT_MS;
    e->max_in_flight = o->max_in_flight ? o->max_in_flight : DEFAULT_MAX_IN_FLIGHT;
    e->max_response = o->max_response_bytes ? o->max_response_bytes : DEFAULT_MAX_RESPONSE;
    fx_timer_init(&e->timer, on_curl_timer, e);
    fx_timer_init(&e->kick, on_kick, e);
    bool ok = dup_opt(&e->ca, o->ca_file) && dup_opt(&e->cert, o->cert_file) &&
              dup_opt(&e->key, o->key_file) && dup_opt(&e->user, o->user) &&
              dup_opt(&e->password, o->password);
    for (size_t i = 0; ok && i < o->n_endpoints; i++) {
        size_t n = strlen(o->endpoints[i]);
        while (n > 0 && o->endpoints[i][n - 1] == '/')
            n--; /* paths are appended: no double slash */
        ok = (e->endpoints[i] = strndup(o->endpoints[i], n)) != NULL;
        e->n_ep = i + 1;
    }
    if (ok)
        ok = (e->multi = curl_multi_init()) != NULL;
    if (!ok) {
        fx_etcd_free(e);
        return -ENOMEM;
    }
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    *pe = e;
    return 0;
}

static void free_list(fx_etcd *e, req_list *l, bool in_curl)
{
    for (req *r = l->head, *nr; r != NULL; r = nr) {
        nr = r->next;
        if (in_curl)
            curl_multi_remove_handle(e->multi, r->h);
        req_free(r);
    }
    *l = (req_list){0};
}

void fx_etcd_free(fx_etcd *e)
{
    if (e == NULL)
        return;
    if (e->multi != NULL) {
        free_list(e, &e->active, true);
        free_list(e, &e->pending, false);
        free_list(e, &e->waiting, false);
        curl_multi_cleanup(e->multi);
    }
    while (e->socks != NULL) {
        sock *s = e->socks;
        e->socks = s->next;
        fx_loop_unwatch(e->loop, &s->w);
        free(s);
    }
    for (fx_etcd_watch *w = e->watches, *nw; w != NULL; w = nw) {
        nw = w->next;
        fx_loop_timer_cancel(e->loop, &w->restart);
        fx_loop_timer_cancel(e->loop, &w->idle);
        fx_etcd_lines_deinit(&w->lines);
        free(w->key);
        free(w->range_end);
        free(w->end_msg);
        free(w);
    }
    fx_loop_timer_cancel(e->loop, &e->timer);
    fx_loop_timer_cancel(e->loop, &e->kick);
    for (size_t i = 0; i < e->n_ep; i++)
        free(e->endpoints[i]);
    free(e->ca);
    free(e->cert);
    free(e->key);
    free(e->user);
    free(e->password);
    free(e->token);
    free(e);
}

void fx_etcd_get_stats(const fx_etcd *e, fx_etcd_stats *st)
{
    *st = e->st;
}
