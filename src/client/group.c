/* libfelix consumer groups: a member's join stream (auth, `group_join`,
 * then `group_joined` or an error; it stays open for the member's
 * GROUP_ACKS frames and the broker's GROUP_ACKED answers), its deliveries
 * (GROUP_BATCH frames on the event stream the broker opens, routed here by
 * subscribe.c), the buffer fx_group_next reads, the op queue coalesced on
 * the loop, leave and re-join after a reconnect.
 * Public functions: any thread; fxc_grp_* callbacks: the client loop. The
 * member's shared state is guarded by the client's mutex (c->mu). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/log.h"
#include "client/client.h"
#include "wire/group.h"

enum { GS_PENDING = 0, GS_LIVE, GS_ENDED };
#define RESET_CODE 0x10c           /* as an unsubscribe: the broker only sees a reset */
#define DEFAULT_WINDOW 256u
#define DEFAULT_ACK_WAIT_MS 30000u /* when neither the broker nor the options say */

/* One GROUP_BATCH frame as received: decoded slices point into |body|;
 * the cursor (run, in_run, rec) is the consumer's. */
typedef struct gbatch {
    struct gbatch *next;
    uint32_t gen;         /* the member's connection generation it arrived in */
    uint64_t deadline_ns; /* arrival + ack wait: later, it is released, not handed out */
    fx_wire_group_batch gb;
    uint32_t run, in_run, rec;
    uint8_t body[];
} gbatch;

struct fx_group {
    int kind;        /* SK_GROUP: its join stream's user pointer */
    atomic_int refs; /* user + loop + callers inside */
    fx_client *c;
    char *ns, *stream, *name, *member;
    uint32_t want_window;
    int want_ack_wait_ms;
    bool has_create;
    fx_start create;
    /* join stream (loop) */
    cconn *conn;
    int64_t sid;
    fx_frame_decoder dec;
    bool authed;
    bool loop_gone;   /* the loop's reference dropped */
    bool rejoin_need; /* the connection was lost: join again when it is ready */
    bool rejoin_wait; /* a re-join waits for its answer */
    uint8_t *held;    /* an encoded GROUP_ACKS frame QUIC refused (FX_EFULL) */
    size_t held_len;
    evs *ev;
    fx_group *lnext, *lprev; /* c->groups */
    fx_task flush_task, leave_task;
    /* shared (c->mu) */
    pthread_cond_t cv;
    int state;
    int err_code;
    char err_msg[256];
    bool closed; /* fx_group_leave called */
    uint32_t window;
    uint64_t ack_wait_ns;
    uint32_t gen;       /* bumped when the connection is lost */
    gbatch *head, *tail; /* received, not taken */
    size_t held_recs;   /* records in them (and the rest of |cur|) */
    fxc_gops ops;
    uint64_t sync_want, sync_sent, sync_done, sync_failed; /* ack_sync request ids */
    int sync_fail_rv;
    /* consumer */
    gbatch *cur;
    /* stats */
    atomic_uint_fast64_t id, received, delivered, expired, dropped, ops_sent, frames_sent, refused,
        reconnects;
};

static void flush(fx_group *g);

/* ---- lifetime ------------------------------------------------------------------- */

static void batch_free(gbatch *b)
{
    if (b == NULL)
        return;
    fx_wire_group_batch_deinit(&b->gb);
    free(b);
}

static void grp_unref(fx_group *g)
{
    if (g == NULL || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    batch_free(g->cur);
    while (g->head != NULL) {
        gbatch *b = g->head;
        g->head = b->next;
        batch_free(b);
    }
    fxc_gops_deinit(&g->ops);
    fx_frame_decoder_deinit(&g->dec);
    pthread_cond_destroy(&g->cv);
    free(g->held);
    fx_client *c = g->c;
    free(g->ns);
    free(g->stream);
    free(g->name);
    free(g->member);
    free(g);
    fxc_client_unref(c);
}

/* Ends |g| with |code| (once) and wakes its callers. */
static void grp_end(fx_group *g, int code, const char *msg)
{
    fx_client *c = g->c;
    pthread_mutex_lock(&c->mu);
    if (g->state != GS_ENDED) {
        g->state = GS_ENDED;
        g->err_code = code;
        snprintf(g->err_msg, sizeof(g->err_msg), "%s", msg);
    }
    pthread_cond_broadcast(&g->cv);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void unlink_member(fx_group *g)
{
    fx_client *c = g->c;
    if (g->lprev != NULL)
        g->lprev->lnext = g->lnext;
    else if (c->groups == g)
        c->groups = g->lnext;
    if (g->lnext != NULL)
        g->lnext->lprev = g->lprev;
    g->lnext = g->lprev = NULL;
}

/* Lets the event stream run to the broker's FIN, discarding what comes
 * (a reset instead would read as a failure). */
static void ev_detach(fx_group *g)
{
    if (g->ev == NULL)
        return;
    g->ev->grp = NULL;
    g->ev->left = true;
    g->ev->ended = true;
    g->ev = NULL;
}

/* Detaches |g| from the loop: |reset| abandons its streams (a failed or
 * abandoned join, the close path), else the caller has finished them. */
static void grp_stop(fx_group *g, bool reset)
{
    if (g->loop_gone)
        return;
    g->loop_gone = true;
    cconn *cc = g->conn;
    if (cc != NULL && cc->qc != NULL && g->sid >= 0) {
        fx_quic_stream_set_user(cc->qc, g->sid, NULL);
        if (reset)
            fx_quic_stream_reset(cc->qc, g->sid, RESET_CODE);
    }
    if (reset && g->ev != NULL && cc != NULL && cc->qc != NULL) {
        fx_quic_stream_set_user(cc->qc, g->ev->sid, NULL);
        fx_quic_stream_reset(cc->qc, g->ev->sid, RESET_CODE);
        g->ev->grp = NULL;
        g->ev->ended = true;
        g->ev = NULL;
    }
    ev_detach(g);
    unlink_member(g);
    grp_unref(g);
}

void fxc_grp_shutdown(fx_client *c)
{
    while (c->groups != NULL) {
        fx_group *g = c->groups;
        grp_end(g, FX_ECLOSED, "client closed");
        grp_stop(g, true);
    }
}

/* ---- the join stream -------------------------------------------------------------- */

static int send_frame(cconn *cc, int64_t sid, const uint8_t *p, size_t n)
{
    return fxc_client_send_copy(cc, sid, p, n, false);
}

/* Writes the `group_join` JSON body; the codec's message types do not
 * carry it yet, so it is built here. Returns a new string or NULL. */
static char *join_json(const fx_group *g)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "type", json_string("group_join"));
    json_object_set_new(o, "tenant_id", json_string(g->c->o.tenant));
    json_object_set_new(o, "namespace", json_string(g->ns));
    json_object_set_new(o, "stream", json_string(g->stream));
    json_object_set_new(o, "group", json_string(g->name));
    json_object_set_new(o, "member", json_string(g->member));
    if (g->want_window != 0)
        json_object_set_new(o, "window", json_integer(g->want_window));
    if (g->want_ack_wait_ms > 0)
        json_object_set_new(o, "ack_wait_ms", json_integer(g->want_ack_wait_ms));
    if (g->has_create) {
        static const char *const names[] = {"new", "all"};
        json_t *cr = g->create.kind == FX_START_OFFSET
                         ? json_pack("{s:I}", "offset", (json_int_t)g->create.offset)
                         : json_string(names[g->create.kind]);
        json_object_set_new(o, "create", cr);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static int send_join(fx_group *g, cconn *cc)
{
    int rv = fx_quic_conn_open_bidi(cc->qc, g, &g->sid);
    if (rv != 0)
        return rv;
    g->authed = false;
    fx_frame_decoder_deinit(&g->dec);
    fx_frame_decoder_init(&g->dec, g->c->o.max_frame_bytes);
    fx_quic_conn_grant_uni(cc->qc, 1); /* its event stream, as for a subscribe */
    rv = fxc_client_send_auth(cc, g->sid);
    char *js = rv == 0 ? join_json(g) : NULL;
    if (rv == 0 && js == NULL)
        rv = -ENOMEM;
    if (rv != 0)
        return rv;
    size_t n = strlen(js);
    uint8_t *f = malloc(FX_WIRE_HEADER_LEN + n);
    if (f != NULL) {
        fx_frame_header_put(f, 0, (uint32_t)n);
        memcpy(f + FX_WIRE_HEADER_LEN, js, n);
        rv = send_frame(cc, g->sid, f, FX_WIRE_HEADER_LEN + n);
    }
    free(js);
    free(f);
    return f == NULL ? -ENOMEM : rv;
}

/* Ends a join that failed, or a member the broker refused or ended. */
static void fail(fx_group *g, int code, const char *msg)
{
    g->rejoin_wait = false;
    grp_end(g, code, msg);
    ev_detach(g);
}

static void on_auth(fx_group *g, json_t *o, const char *type)
{
    json_int_t flags = json_integer_value(json_object_get(o, "server_flags"));
    if (strcmp(type, "auth_ok") != 0 || (flags & FX_FLAG_FELIXC) == 0) {
        fail(g, FX_EPROTO, "broker does not serve consumer groups");
        return;
    }
    g->authed = true;
}

/* Attaches the event stream the broker may have opened before answering. */
static void claim_events(fx_group *g, uint64_t id)
{
    for (evs *e = g->conn->evlist; e != NULL && g->ev == NULL; e = e->next) {
        if (e->hello && e->sub == NULL && e->grp == NULL && !e->left && e->sub_id == id)
            fxc_evs_attach_group(e, g);
    }
}

static void on_joined(fx_group *g, json_t *o)
{
    json_t *id = json_object_get(o, "subscription_id"), *w = json_object_get(o, "window");
    json_t *mem = json_object_get(o, "member"), *aw = json_object_get(o, "ack_wait_ms");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || (mem != NULL && !json_is_string(mem))) {
        fail(g, FX_EPROTO, "malformed group_joined");
        return;
    }
    fx_client *c = g->c;
    uint64_t ack_wait_ms = g->want_ack_wait_ms > 0 ? (uint64_t)g->want_ack_wait_ms
                                                    : DEFAULT_ACK_WAIT_MS;
    if (json_is_integer(aw) && json_integer_value(aw) > 0)
        ack_wait_ms = (uint64_t)json_integer_value(aw);
    uint32_t window = g->want_window != 0 ? g->want_window : DEFAULT_WINDOW;
    if (json_is_integer(w) && json_integer_value(w) > 0 && json_integer_value(w) <= UINT32_MAX)
        window = (uint32_t)json_integer_value(w);
    if (mem != NULL && strcmp(json_string_value(mem), g->member) != 0) {
        char *m = strdup(json_string_value(mem));
        if (m != NULL) {
            free(g->member);
            g->member = m;
        }
    }
    if (g->rejoin_wait)
        atomic_fetch_add(&g->reconnects, 1);
    g->rejoin_wait = false;
    atomic_store(&g->id, (uint64_t)json_integer_value(id));
    pthread_mutex_lock(&c->mu);
    g->window = window;
    g->ack_wait_ns = ack_wait_ms * FX_NS_PER_MS;
    if (g->state == GS_PENDING)
        g->state = GS_LIVE;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    claim_events(g, (uint64_t)json_integer_value(id));
    flush(g); /* ops queued while away, and ack_sync requests */
}

static void on_json(fx_group *g, const fx_frame *f)
{
    json_error_t je;
    json_t *o = json_loadb((const char *)f->body, f->len, 0, &je);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (type == NULL) {
        fail(g, FX_EPROTO, "malformed message on the group join stream");
    } else if (strcmp(type, "error") == 0) {
        const char *m = json_string_value(json_object_get(o, "message"));
        char msg[256];
        snprintf(msg, sizeof(msg), "group join failed: %s", m != NULL ? m : "");
        fail(g, fxc_client_map_remote(m), msg);
    } else if (!g->authed) {
        on_auth(g, o, type);
    } else if (strcmp(type, "group_joined") == 0) {
        on_joined(g, o);
    } else {
        fail(g, FX_EPROTO, "unexpected message on the group join stream");
    }
    json_decref(o);
}

static void on_acked(fx_group *g, const fx_frame *f)
{
    fx_wire_group_acked a;
    fx_wire_err err = {0};
    if (fx_wire_group_acked_decode(f->body, f->len, &a, &err) != 0) {
        fail(g, FX_EPROTO, err.msg);
        return;
    }
    fx_client *c = g->c;
    atomic_fetch_add(&g->refused, a.nrefused);
    pthread_mutex_lock(&c->mu);
    if (a.request_id > g->sync_done && a.request_id <= g->sync_sent)
        g->sync_done = a.request_id;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&c->mu);
    fx_wire_group_acked_deinit(&a);
}

static bool on_req_frame(fx_group *g, const fx_frame *f)
{
    if (f->hdr.flags == FX_FLAG_FELIXC && g->authed && f->len > 0 &&
        f->body[0] == FX_GROUP_FRAME_ACKED) {
        on_acked(g, f);
    } else if (f->flags_rv == 0 && f->kind == FX_BODY_JSON) {
        on_json(g, f);
    } else {
        fail(g, FX_EPROTO, "unexpected frame on the group join stream");
    }
    return g->state != GS_ENDED;
}

void fxc_grp_on_req_data(fx_group *g, const uint8_t *data, size_t len, bool fin)
{
    fx_quic_stream_consume(g->conn->qc, g->sid, len);
    while (len > 0 && g->state != GS_ENDED) {
        size_t used = 0;
        fx_frame f;
        fx_wire_err err = {0};
        int rv = fx_frame_decoder_feed(&g->dec, data, len, &used, &f, &err);
        data += used;
        len -= used;
        if (rv < 0) {
            fail(g, FX_EPROTO, err.msg);
            break;
        }
        if (rv == FX_FRAME_READY && !on_req_frame(g, &f))
            break;
    }
    if (g->state == GS_ENDED) {
        grp_stop(g, true);
        return;
    }
    if (fin)
        fail(g, g->state == GS_PENDING ? FX_EPROTO : FX_EEOF,
             g->state == GS_PENDING ? "group join stream ended without an answer"
                                    : "the broker ended the member");
}

void fxc_grp_on_req_close(fx_group *g, bool reset, uint64_t code)
{
    (void)code;
    g->sid = -1;
    if (g->state != GS_ENDED)
        fail(g, reset ? FX_ECONNLOST : FX_EEOF, "group join stream closed");
    grp_stop(g, true);
}

/* ---- sending ops -------------------------------------------------------------------- */

/* Sends the frame QUIC refused earlier. Returns false if it must wait more. */
static bool send_held(fx_group *g)
{
    if (g->held == NULL)
        return true;
    int rv = send_frame(g->conn, g->sid, g->held, g->held_len);
    if (rv == FX_EFULL)
        return false;
    if (rv != 0)
        FX_LOG_WARN("client", "group %s: sending acks failed: %s", g->name, fx_strerror(rv));
    free(g->held);
    g->held = NULL;
    return true;
}

static bool joined(const fx_group *g)
{
    return !g->loop_gone && g->state == GS_LIVE && !g->rejoin_need && !g->rejoin_wait &&
           g->sid >= 0 && g->conn != NULL && g->conn->qc != NULL;
}

/* Takes the queued ops (and an ack_sync request) as one frame. Returns 0,
 * 1 with nothing to send, or -ENOMEM (the ops stay queued). c->mu held. */
static int take_frame(fx_group *g, uint8_t **pf, size_t *plen)
{
    uint64_t req = g->sync_want > g->sync_sent ? g->sync_want : 0;
    if (g->ops.n == 0 && req == 0)
        return 1;
    int rv = fxc_gops_encode(&g->ops, req, pf, plen);
    if (rv != 0)
        return rv;
    atomic_fetch_add(&g->ops_sent, g->ops.n);
    atomic_fetch_add(&g->frames_sent, 1);
    if (req != 0)
        g->sync_sent = req;
    fxc_gops_clear(&g->ops);
    pthread_cond_broadcast(&g->cv); /* room for callers waiting on a full queue */
    return 0;
}

/* One GROUP_ACKS frame per loop turn: every op call posts flush_task, which
 * a pending post coalesces, so the ops made meanwhile travel together. */
static void flush(fx_group *g)
{
    if (!joined(g) || !send_held(g))
        return;
    uint8_t *f = NULL;
    size_t n = 0;
    pthread_mutex_lock(&g->c->mu);
    int rv = take_frame(g, &f, &n);
    pthread_mutex_unlock(&g->c->mu);
    if (rv < 0)
        FX_LOG_ERROR("client", "group %s: no memory to send acks: %s", g->name, fx_strerror(rv));
    if (rv != 0)
        return;
    rv = send_frame(g->conn, g->sid, f, n);
    if (rv == FX_EFULL) {
        g->held = f;
        g->held_len = n;
        return;
    }
    if (rv != 0)
        FX_LOG_WARN("client", "group %s: sending acks failed: %s", g->name, fx_strerror(rv));
    free(f);
}

static void flush_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    flush(user);
}

void fxc_grp_conn_writable(fx_client *c, cconn *cc)
{
    for (fx_group *g = c->groups; g != NULL; g = g->lnext) {
        if (g->conn == cc && g->held != NULL)
            flush(g);
    }
}

/* ---- deliveries ------------------------------------------------------------------- */

bool fxc_grp_on_events(fx_group *g, const fx_frame *f)
{
    if (f->hdr.flags != FX_FLAG_FELIXC) {
        fail(g, FX_EPROTO, "unexpected frame on a group event stream");
        return false;
    }
    gbatch *b = malloc(sizeof(*b) + f->len);
    fx_wire_err err = {0};
    int rv = b == NULL ? -ENOMEM : 0;
    if (rv == 0)
        rv = fx_wire_group_batch_decode(memcpy(b->body, f->body, f->len), f->len, &b->gb, &err);
    if (rv != 0) {
        free(b);
        fail(g, rv == -ENOMEM ? -ENOMEM : FX_EPROTO, rv == -ENOMEM ? "out of memory" : err.msg);
        return false;
    }
    b->next = NULL;
    b->run = b->in_run = b->rec = 0;
    fx_client *c = g->c;
    bool over = false;
    pthread_mutex_lock(&c->mu);
    b->gen = g->gen;
    b->deadline_ns = fx_loop_now(c->loop) + g->ack_wait_ns;
    /* The broker never has more than |window| records of this member
     * unsettled; more here is its bug, and the bound of this buffer. */
    over = g->held_recs + b->gb.nrecords > g->window;
    if (!over && !g->closed) {
        if (g->tail != NULL)
            g->tail->next = b;
        else
            g->head = b;
        g->tail = b;
        g->held_recs += b->gb.nrecords;
        atomic_fetch_add(&g->received, b->gb.nrecords);
        pthread_cond_signal(&g->cv);
        b = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    batch_free(b); /* refused, or arrived after fx_group_leave (the broker releases it) */
    if (over)
        fail(g, FX_EPROTO, "the broker sent more records than the member's window");
    return !over;
}

void fxc_grp_set_events(fx_group *g, evs *e)
{
    g->ev = e;
}

void fxc_grp_on_events_end(fx_group *g, int rv, const char *text)
{
    g->ev = NULL;
    if (g->state == GS_LIVE && !g->rejoin_need)
        fail(g, rv, text);
}

fx_group *fxc_grp_find(fx_client *c, cconn *cc, uint64_t id)
{
    for (fx_group *g = c->groups; g != NULL; g = g->lnext) {
        if (g->conn == cc && g->state == GS_LIVE && !g->rejoin_wait && g->ev == NULL &&
            atomic_load(&g->id) == id)
            return g;
    }
    return NULL;
}

bool fxc_grp_waiting(fx_client *c, cconn *cc)
{
    for (fx_group *g = c->groups; g != NULL; g = g->lnext) {
        if (g->conn == cc && !g->loop_gone && (g->state == GS_PENDING || g->rejoin_wait))
            return true;
    }
    return false;
}

/* ---- reconnect ---------------------------------------------------------------------- */

/* The connection is gone: what arrived and was not taken is dropped (the
 * broker redelivers it), and an ack_sync whose request was sent fails. */
static void grp_lost(fx_group *g)
{
    fx_client *c = g->c;
    g->sid = -1;
    g->authed = false;
    g->rejoin_need = true;
    g->rejoin_wait = false;
    free(g->held); /* its connection is gone: its acks arrive with the next frame or not */
    g->held = NULL;
    pthread_mutex_lock(&c->mu);
    g->gen++;
    while (g->head != NULL) {
        gbatch *b = g->head;
        g->head = b->next;
        atomic_fetch_add(&g->dropped, b->gb.nrecords);
        batch_free(b);
    }
    g->tail = NULL;
    g->held_recs = 0;
    g->sync_failed = g->sync_sent;
    g->sync_fail_rv = FX_ECONNLOST;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&c->mu);
}

void fxc_grp_conn_closed(fx_client *c, cconn *cc, int rv, const char *text, bool retry)
{
    for (fx_group *g = c->groups, *nx; g != NULL; g = nx) {
        nx = g->lnext;
        if (g->conn != cc)
            continue;
        g->ev = NULL; /* freed with the connection's event streams */
        if (retry && g->state != GS_ENDED) {
            grp_lost(g);
            continue;
        }
        g->sid = -1;
        fail(g, rv, text);
        grp_stop(g, false);
    }
}

void fxc_grp_conn_ready(fx_client *c, cconn *cc)
{
    for (fx_group *g = c->groups, *nx; g != NULL; g = nx) {
        nx = g->lnext;
        if (g->conn != cc || !g->rejoin_need || g->state == GS_ENDED)
            continue;
        g->rejoin_need = false;
        g->rejoin_wait = g->state == GS_LIVE;
        int rv = send_join(g, cc);
        if (rv != 0) {
            fail(g, rv, "join again after reconnect failed");
            grp_stop(g, true);
        }
    }
}

/* ---- loop tasks ----------------------------------------------------------------------- */

static void join_task(void *user)
{
    fx_group *g = user;
    fx_client *c = g->c;
    if (c->ep == NULL || g->loop_gone) {
        grp_end(g, FX_ECLOSED, "client closed");
        grp_stop(g, true);
        return;
    }
    g->lnext = c->groups;
    if (c->groups != NULL)
        c->groups->lprev = g;
    c->groups = g;
    cconn *cc = c->conns[0]; /* the event connection, as for subscriptions */
    g->conn = cc;
    if (cc->state == CS_CONNECTING || cc->state == CS_RETRY) {
        g->rejoin_need = true; /* sent by fxc_grp_conn_ready */
        return;
    }
    int rv = cc->qc == NULL ? cc->close_rv : send_join(g, cc);
    if (rv != 0) {
        grp_end(g, rv, fx_strerror(rv));
        grp_stop(g, true);
    }
}

/* fx_group_leave: the releases and the ops queued go out in a last frame,
 * then our FIN; the broker finishes the event stream, read to its end. */
static void leave(fx_group *g)
{
    if (g->loop_gone)
        return;
    if (!joined(g)) {
        grp_stop(g, true);
        return;
    }
    flush(g);
    /* A frame QUIC still refuses is given up: the broker releases what a
     * leaving member held anyway. */
    int rv = fx_quic_stream_shutdown(g->conn->qc, g->sid);
    if (rv != 0)
        FX_LOG_WARN("client", "group %s: leave: %s", g->name, fx_strerror(rv));
    grp_stop(g, rv != 0);
}

static void leave_task(fx_loop *l, fx_task *t, void *user)
{
    (void)l, (void)t;
    leave(user);
    grp_unref(user); /* fx_group_leave's reference for this task */
}

/* ---- public --------------------------------------------------------------------------- */

void fx_group_opts_init(fx_group_opts *o)
{
    if (o != NULL)
        *o = (fx_group_opts){.size = sizeof(*o)};
}

/* A member name for a caller that gave none: unique in practice. */
static char *gen_member(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = fx_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&r;
    char buf[32];
    snprintf(buf, sizeof(buf), "m-%016" PRIx64, r);
    return strdup(buf);
}

static int check_opts(const fx_group_opts *o)
{
    if (o == NULL || o->size < sizeof(*o) || o->ns == NULL || o->stream == NULL ||
        o->group == NULL || o->ns[0] == '\0' || o->stream[0] == '\0' || o->group[0] == '\0' ||
        (o->member != NULL && o->member[0] == '\0') || o->ack_wait_ms < 0 ||
        (o->create != NULL && (unsigned)o->create->kind > FX_START_OFFSET))
        return -EINVAL;
    return 0;
}

static int grp_new(fx_group **pg, fx_client *c, const fx_group_opts *o)
{
    fx_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    g->kind = SK_GROUP;
    atomic_init(&g->refs, 2);
    g->c = c;
    g->sid = -1;
    g->ns = strdup(o->ns);
    g->stream = strdup(o->stream);
    g->name = strdup(o->group);
    g->member = o->member != NULL ? strdup(o->member) : gen_member();
    g->want_window = o->window;
    g->want_ack_wait_ms = o->ack_wait_ms;
    g->has_create = o->create != NULL;
    if (o->create != NULL)
        g->create = *o->create;
    g->window = o->window != 0 ? o->window : DEFAULT_WINDOW;
    fxc_gops_init(&g->ops, FXC_GROUP_OPS_MAX);
    fx_frame_decoder_init(&g->dec, c->o.max_frame_bytes);
    fx_task_init(&g->flush_task, flush_task, g);
    fx_task_init(&g->leave_task, leave_task, g);
    int rv = fxc_client_cond_init(&g->cv);
    if (rv != 0 || g->ns == NULL || g->stream == NULL || g->name == NULL || g->member == NULL) {
        if (rv == 0)
            pthread_cond_destroy(&g->cv);
        fx_frame_decoder_deinit(&g->dec);
        free(g->ns), free(g->stream), free(g->name), free(g->member);
        free(g);
        return rv != 0 ? rv : -ENOMEM;
    }
    fxc_client_ref(c);
    *pg = g;
    return 0;
}

int fx_group_join(fx_group **pg, fx_client *c, const fx_group_opts *o)
{
    if (pg == NULL || c == NULL || check_opts(o) != 0)
        return -EINVAL;
    *pg = NULL;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    if ((c->server_flags & FX_FLAG_FELIXC) == 0)
        return fxc_client_set_error(FX_EPROTO, "broker does not serve consumer groups");
    fx_group *g = NULL;
    int rv = grp_new(&g, c, o);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&c->mu);
    rv = c->closed ? FX_ECLOSED : fx_loop_call(c->loop, join_task, g);
    pthread_mutex_unlock(&c->mu);
    if (rv != 0) {
        atomic_fetch_sub(&g->refs, 1); /* the loop never saw it */
        grp_unref(g);
        return rv;
    }
    uint64_t deadline = fxc_client_deadline(c->o.connect_timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (g->state == GS_PENDING && !c->closed && rv == 0)
        rv = fxc_client_wait(c, &c->cv, deadline);
    int st = g->state, code = g->err_code;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", g->err_msg);
    pthread_mutex_unlock(&c->mu);
    if (st == GS_LIVE) {
        *pg = g;
        return 0;
    }
    fx_group_leave(g);
    if (st == GS_ENDED)
        return fxc_client_set_error(code, "%s", msg);
    return fxc_client_set_error(rv != 0 ? rv : FX_ECLOSED, "group join: no answer");
}

/* Hands out the next record buffered, releasing those whose ack wait
 * passed meanwhile. Returns true with |m| filled. c->mu held. */
static bool take_record(fx_group *g, uint64_t now, fx_group_msg *m)
{
    for (;;) {
        gbatch *b = g->cur;
        if (b != NULL && b->gen != g->gen) {
            /* Arrived before a lost connection: the broker redelivers. */
            atomic_fetch_add(&g->dropped, b->gb.nrecords - b->rec);
            b->rec = b->gb.nrecords;
        }
        if (b != NULL && b->rec == b->gb.nrecords) {
            batch_free(b);
            g->cur = b = NULL;
        }
        if (b == NULL) {
            if (g->head == NULL)
                return false;
            g->cur = g->head;
            g->head = g->head->next;
            if (g->head == NULL)
                g->tail = NULL;
            continue;
        }
        const fx_wire_group_run *r = &b->gb.runs[b->run];
        *m = (fx_group_msg){.payload = b->gb.payloads[b->rec].ptr,
                            .len = b->gb.payloads[b->rec].len,
                            .offset = r->first + b->in_run,
                            .attempt = r->attempt,
                            .skipped = b->in_run == 0 ? r->skipped_before : 0};
        b->rec++;
        if (++b->in_run == r->count) {
            b->run++;
            b->in_run = 0;
        }
        g->held_recs--;
        if (now < b->deadline_ns) {
            atomic_fetch_add(&g->delivered, 1);
            return true;
        }
        /* Its deadline passed here: the broker redelivers it anyway, the
         * release only makes that sooner, so a full queue skips it. */
        atomic_fetch_add(&g->expired, 1);
        if (fxc_gops_push(&g->ops, FX_GROUP_OP_RELEASE, m->offset, m->attempt, 0, NULL) == 0)
            fx_loop_post(g->c->loop, &g->flush_task);
    }
}

/* Waits on |g| (c->mu held) until woken or |deadline_ns| (0: none). */
static int grp_wait(fx_group *g, uint64_t deadline_ns)
{
    return fxc_client_wait(g->c, &g->cv, deadline_ns);
}

int fx_group_next(fx_group *g, fx_group_msg *m, int timeout_ms)
{
    if (g == NULL || m == NULL)
        return -EINVAL;
    if (timeout_ms != 0 && fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    fx_client *c = g->c;
    atomic_fetch_add(&g->refs, 1);
    uint64_t deadline = fxc_client_deadline(timeout_ms);
    int rv = 0;
    bool timed_out = false;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (g->closed || c->closed) {
            rv = FX_ECLOSED;
            break;
        }
        if (take_record(g, fx_now_ns(), m))
            break;
        if (g->state == GS_ENDED) {
            rv = g->err_code;
            break;
        }
        if (timeout_ms == 0 || timed_out) {
            rv = FX_ETIMEDOUT;
            break;
        }
        timed_out = grp_wait(g, deadline) == FX_ETIMEDOUT;
    }
    pthread_mutex_unlock(&c->mu);
    grp_unref(g);
    return rv;
}

/* Queues one op, waiting while the queue is full, and has the loop send it. */
static int push_op(fx_group *g, int kind, uint64_t off, uint32_t attempt, uint32_t arg,
                   const char *reason)
{
    if (g == NULL)
        return -EINVAL;
    fx_client *c = g->c;
    bool on_loop = fxc_rt_is_current();
    int rv;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (g->closed || c->closed) {
            rv = FX_ECLOSED;
            break;
        }
        if (g->state == GS_ENDED) {
            rv = g->err_code;
            break;
        }
        rv = fxc_gops_push(&g->ops, kind, off, attempt, arg, reason);
        if (rv != FX_EFULL || on_loop)
            break;
        fx_loop_post(c->loop, &g->flush_task);
        grp_wait(g, 0);
    }
    if (rv == 0)
        fx_loop_post(c->loop, &g->flush_task);
    pthread_mutex_unlock(&c->mu);
    return rv;
}

int fx_group_ack(fx_group *g, uint64_t offset)
{
    return push_op(g, FX_GROUP_OP_ACK, offset, 0, 0, NULL);
}

int fx_group_nak(fx_group *g, uint64_t offset, uint32_t attempt, int delay_ms)
{
    if (delay_ms < -1)
        return -EINVAL;
    uint32_t arg = delay_ms == -1 ? FX_GROUP_NAK_BACKOFF : (uint32_t)delay_ms;
    return push_op(g, FX_GROUP_OP_NAK, offset, attempt, arg, NULL);
}

int fx_group_in_progress(fx_group *g, uint64_t offset, uint32_t attempt)
{
    return push_op(g, FX_GROUP_OP_IN_PROGRESS, offset, attempt, 0, NULL);
}

int fx_group_term(fx_group *g, uint64_t offset, uint32_t attempt, const char *reason)
{
    if (reason != NULL && (strlen(reason) > FX_GROUP_REASON_MAX ||
                           !fx_wire_utf8_valid((const uint8_t *)reason, strlen(reason))))
        return -EINVAL;
    return push_op(g, FX_GROUP_OP_TERM, offset, attempt, 0, reason);
}

int fx_group_ack_sync(fx_group *g, int timeout_ms)
{
    if (g == NULL)
        return -EINVAL;
    if (fxc_rt_is_current())
        return FX_EWOULDBLOCK_LOOP;
    fx_client *c = g->c;
    atomic_fetch_add(&g->refs, 1);
    uint64_t deadline = fxc_client_deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    /* Ids rise across the client, so the answer to a later request (one
     * frame on one stream, handled in order) answers this one too. */
    uint64_t id = atomic_fetch_add(&c->next_request_id, 1);
    if (id > g->sync_want)
        g->sync_want = id;
    bool posted = !g->closed && !c->closed && fx_loop_post(c->loop, &g->flush_task);
    (void)posted; /* already pending is as good */
    int rv = 0;
    for (;;) {
        if (g->closed || c->closed) {
            rv = FX_ECLOSED;
        } else if (g->sync_done >= id) {
            rv = 0;
        } else if (g->sync_failed >= id) {
            rv = g->sync_fail_rv;
        } else if (g->state == GS_ENDED) {
            rv = g->err_code;
        } else if ((rv = grp_wait(g, deadline)) == 0) {
            continue;
        }
        break;
    }
    pthread_mutex_unlock(&c->mu);
    grp_unref(g);
    return rv;
}

int fx_group_stats(fx_group *g, fx_member_stats *st)
{
    if (g == NULL || st == NULL)
        return -EINVAL;
    *st = (fx_member_stats){
        .received = atomic_load(&g->received),
        .delivered = atomic_load(&g->delivered),
        .expired = atomic_load(&g->expired),
        .dropped = atomic_load(&g->dropped),
        .ops_sent = atomic_load(&g->ops_sent),
        .frames_sent = atomic_load(&g->frames_sent),
        .refused = atomic_load(&g->refused),
        .reconnects = atomic_load(&g->reconnects),
    };
    return 0;
}

uint64_t fxc_grp_expired(fx_group *g)
{
    return atomic_load(&g->expired);
}

/* Queues a release for every record of |b| not taken yet. c->mu held. */
static void release_rest(fx_group *g, gbatch *b)
{
    if (b->gen != g->gen)
        return; /* from before a lost connection: the broker has it back */
    while (b->rec < b->gb.nrecords) {
        const fx_wire_group_run *r = &b->gb.runs[b->run];
        /* Full: the broker releases a leaving member's records anyway. */
        (void)fxc_gops_push(&g->ops, FX_GROUP_OP_RELEASE, r->first + b->in_run, r->attempt, 0,
                            NULL);
        b->rec++;
        if (++b->in_run == r->count) {
            b->run++;
            b->in_run = 0;
        }
    }
}

void fx_group_leave(fx_group *g)
{
    if (g == NULL)
        return;
    fx_client *c = g->c;
    pthread_mutex_lock(&c->mu);
    g->closed = true;
    if (g->cur != NULL)
        release_rest(g, g->cur);
    for (gbatch *b = g->head; b != NULL; b = b->next)
        release_rest(g, b);
    /* Last: after its releases, so none of them comes back to this member.
     * Full: the broker sees the FIN (the releases it got may then come back
     * here once before the member is gone: counted as attempts). A member
     * that is not joined never sends it (the loop's leave sees that). */
    (void)fxc_gops_push(&g->ops, FX_GROUP_OP_LEAVE, 0, 0, 0, NULL);
    g->held_recs = 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&c->mu);
    /* Once the client is closed its close task has stopped every member.
     * The task holds a reference: the loop's may go before it runs. */
    atomic_fetch_add(&g->refs, 1);
    if (!fxc_client_post(c, &g->leave_task))
        grp_unref(g);
    grp_unref(g);
}
