/* The pipeline view (GET /v1/pipeline, GET /ui): a once-a-second snapshot of
 * checkpoints 3-6 built from the metrics registry (counters and gauges summed
 * over the loops), the broker's bounds and policies, and the stream and
 * subscription lists the loops answer for the admin API. Admin endpoint
 * threads; one mutex guards the cached document. */
#include "server/pipeline.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/loop.h"
#include "base/metrics.h"
#include "base/queue.h"
#include "broker/group.h"
#include "felix/error.h"
#include "server/admin_routes.h"

#define REBUILD_NS 1000000000ull

struct fx_pipeline {
    fx_broker *b;
    pthread_mutex_t mu;
    uint64_t built_ns; /* 0: never */
    char *json;        /* the cached document */
};

int fx_pipeline_new(fx_pipeline **pp, fx_broker *b)
{
    fx_pipeline *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->b = b;
    pthread_mutex_init(&p->mu, NULL);
    *pp = p;
    return 0;
}

void fx_pipeline_free(fx_pipeline *p)
{
    if (p == NULL)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p->json);
    free(p);
}

/* ---- pieces of the document ---------------------------------------------------------- */

static uint64_t u64_of(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v != NULL && json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

static json_t *jint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

/* What the subscriptions hold now, summed: lane lists and unacked bytes. */
typedef struct sub_totals {
    uint64_t n, lane_depth, unacked;
} sub_totals;

static sub_totals totals_of(const json_t *subs)
{
    sub_totals t = {0};
    size_t i;
    json_t *e;
    json_array_foreach(subs, i, e)
    {
        t.n++;
        t.lane_depth += u64_of(e, "lane_depth");
        t.unacked += u64_of(e, "unacked_bytes");
    }
    return t;
}

static const char *cp4_policy(const fx_broker_opts *o)
{
    if (o->ack_on_commit)
        return o->pub_ingress_wait ? "unacked: backpressure; acked: wait (timeout)"
                                   : "unacked: drop; acked: wait (timeout)";
    return o->pub_ingress_wait ? "unacked: backpressure; acked: fail"
                               : "unacked: drop; acked: fail";
}

static json_t *cp3(const fx_broker *b, const fx_metrics_snapshot *m)
{
    const fx_broker_opts *o = fx_broker_get_opts(b);
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s, s:o}", "id", "3", "name",
                     "broker publish budget", "unit", "bytes", "bound", jint(o->pub_inflight_bytes),
                     "per_connection_bound", jint(o->pub_conn_inflight_bytes), "held",
                     jint(fx_broker_budget_in_use(b)), "reserved_by_frame_headers",
                     jint((uint64_t)m->g.ingress_reserved_bytes), "policy",
                     "wait: a frame header waits for its bytes and the stream stops reading",
                     "waits", jint(m->c.ingress_reserve_waited)); /* it waits, never sheds */
}

static json_t *cp4(const fx_broker *b, const fx_metrics_snapshot *m)
{
    const fx_broker_opts *o = fx_broker_get_opts(b);
    uint32_t n = fx_broker_worker_count(b);
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o}", "id", "4",
                     "name", "broker worker queues", "unit", "jobs", "bound",
                     jint((uint64_t)o->pub_queue_depth * n), "per_queue_bound",
                     jint(o->pub_queue_depth), "queues", jint(n), "held",
                     jint((uint64_t)m->g.ingress_queue_depth), "policy", cp4_policy(o), "drops",
                     jint(m->c.ingress_dropped), "refused", jint(m->c.ingress_rejected), "waits",
                     jint(m->c.ingress_waited), "full", jint(m->c.ingress_queue_full));
}

static json_t *cp5(const fx_broker_opts *o, const fx_metrics_snapshot *m, const sub_totals *t)
{
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s, s:o, s:o}", "id", "5", "name",
                     "subscriber queues", "unit", "envelopes", "bound",
                     jint((uint64_t)o->subscriber_queue_capacity * t->n), "per_queue_bound",
                     jint(o->subscriber_queue_capacity), "queues", jint(t->n), "held",
                     jint((uint64_t)m->g.sub_queue_len), "policy",
                     fx_queue_policy_name(o->subscriber_queue_policy), "drops",
                     jint(m->c.sub_queue_dropped), "evicted_oldest", jint(m->c.sub_queue_drop_old));
}

static json_t *cp6(const fx_broker_opts *o, const fx_metrics_snapshot *m, const sub_totals *t)
{
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:o, s:o}", "id", "6", "name", "writer lanes",
                     "unit", "frame lists", "per_lane_bound", jint(o->subscriber_lane_queue_depth),
                     "held", jint(t->lane_depth), "policy",
                     fx_queue_policy_name(o->subscriber_lane_queue_policy), "drops",
                     jint(m->c.subscriber_lane_dropped), "dropped_messages",
                     jint(m->c.subscriber_lane_dropped_events));
}

static json_t *quic_part(const fx_broker_opts *o, const fx_metrics_snapshot *m, const sub_totals *t)
{
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "id", "quic", "name",
                     "QUIC send side", "unit", "bytes", "held", jint(t->unacked),
                     "per_subscription_bound", jint(o->subscriber_unacked_bytes),
                     "per_connection_bound", jint(o->quic.unacked_cap), "stream_window",
                     jint(o->quic.stream_window), "connection_window", jint(o->quic.conn_window),
                     "connections", jint((uint64_t)m->g.quic_conn_open), "datagrams_out",
                     jint(m->c.quic_datagrams_out));
}

static json_t *client_side(void)
{
    return json_pack("{s:[s,s], s:s}", "checkpoints", "1", "2", "note",
                     "checkpoints 1 (publish byte budget) and 2 (publish worker queue) live in "
                     "each client: libfelix reports them with fx_client_get_stats, the CLI with "
                     "felix pub --client-stats");
}

/* Checkpoint 4g, the ring hold: whether it applies (the lossless profile),
 * its timeout and its counters. */
static json_t *ring_hold(const fx_broker_opts *o, const fx_metrics_snapshot *m)
{
    return json_pack("{s:b, s:o, s:o, s:o, s:o, s:o}", "applies",
                     o->subscriber_queue_policy == FX_QUEUE_BLOCK, "timeout_ms",
                     jint(o->group_hold_timeout_ns / FX_NS_PER_MS), "held",
                     jint((uint64_t)m->g.group_hold_held), "waits", jint(m->c.group_hold_waits),
                     "timeouts", jint(m->c.group_hold_timeouts), "dead_letter_yields",
                     jint(m->c.group_hold_dead_letter_yields));
}

/* The consumer group checkpoints 4g, 5a, 5g, 5m and 5p. Their state is per
 * group (the engine's own counters, in GET /v1/streams/T/NS/S/groups), so
 * the view shows the broker-wide felix_group_* counters and says where the
 * rest is. */
static json_t *consumer_groups(const fx_broker_opts *o, const fx_metrics_snapshot *m)
{
    /* 0 leaves the engine's default, 1,000 (broker.h). */
    uint64_t per_group = o->group_max_in_flight != 0 ? o->group_max_in_flight : 1000;
    return json_pack(
        "{s:[s,s,s,s,s], s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:o, s:o}, s:o, s:o, "
        "s:{s:o, s:o, s:o}, s:o, s:s}",
        "checkpoints", "4g", "5a", "5g", "5m", "5p", "groups", jint((uint64_t)m->g.group_groups),
        "members", jint((uint64_t)m->g.group_members), "per_group_in_flight_bound", jint(per_group),
        "delivered", jint(m->c.group_delivered), "redelivered", jint(m->c.group_redelivered),
        "acked", jint(m->c.group_acked), "stale", jint(m->c.group_stale_ops), "dead_lettered",
        "max_deliver", jint(m->c.group_dead_max_deliver), "term", jint(m->c.group_dead_term),
        "skipped", jint(m->c.group_skipped), "failures",
        jint(m->c.group_dead_retried + m->c.group_send_failed + m->c.group_ops_failed), "ack_inbox",
        "bound_bytes_per_member", jint(FXB_GROUP_OPS_INBOX_BYTES), "queued_bytes",
        jint((uint64_t)m->g.group_ops_queued_bytes), "paused", jint(m->c.group_ops_paused),
        "ring_hold", ring_hold(o, m), "note",
        "4g (in the lossless profile a stream in memory's ring keeps what a group has not "
        "settled: the append waits, at most group_hold_timeout_ms), 5a (a member's ack inbox: "
        "its stream is not read while full), 5g (a group's records in flight), 5m (a member's "
        "window) and 5p (delayed naks) shed nothing; 5g, 5m and 5p are per group: each group's "
        "state is under GET /v1/streams/{tenant}/{namespace}/{stream}/groups (felix groups ls)");
}

/* ---- streams and subscribers ----------------------------------------------------------- */

static void stream_name(const json_t *e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/%s", json_string_value(json_object_get(e, "tenant")),
             json_string_value(json_object_get(e, "namespace")),
             json_string_value(json_object_get(e, "stream")));
}

/* Busiest first: most subscribers, then most bytes held. */
static int cmp_stream(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    uint64_t sx = u64_of(x, "subscribers"), sy = u64_of(y, "subscribers");
    if (sx != sy)
        return sx > sy ? -1 : 1;
    uint64_t bx = u64_of(x, "bytes"), by = u64_of(y, "bytes");
    return bx == by ? 0 : bx > by ? -1 : 1;
}

/* Adds queued envelopes and drops of |name|'s subscribers to |e|. */
static void stream_subs(json_t *e, const char *name, const json_t *subs)
{
    uint64_t queued = 0, drops = 0;
    size_t i;
    json_t *s;
    char n[800];
    json_array_foreach(subs, i, s)
    {
        stream_name(s, n, sizeof(n));
        if (strcmp(n, name) != 0)
            continue;
        queued += u64_of(s, "queue_depth");
        drops += u64_of(s, "drops");
    }
    json_object_set_new(e, "queued", jint(queued));
    json_object_set_new(e, "drops", jint(drops));
}

static json_t *top_streams(json_t *streams, const json_t *subs)
{
    size_t n = json_array_size(streams);
    json_t **v = calloc(n ? n : 1, sizeof(*v));
    json_t *out = json_array();
    if (v == NULL || out == NULL) {
        free(v);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(streams, i);
    qsort(v, n, sizeof(*v), cmp_stream);
    char name[800];
    for (size_t i = 0; i < n && i < FX_PIPELINE_TOP; i++) {
        stream_name(v[i], name, sizeof(name));
        json_t *e =
            json_pack("{s:s, s:O, s:O, s:O, s:O}", "name", name, "subscribers",
                      json_object_get(v[i], "subscribers"), "messages",
                      json_object_get(v[i], "messages"), "bytes", json_object_get(v[i], "bytes"),
                      "next_offset", json_object_get(v[i], "next_offset"));
        if (e != NULL)
            stream_subs(e, name, subs);
        json_array_append_new(out, e);
    }
    free(v);
    return out;
}

/* The list arrives slowest first (most drops, then deepest queue). */
static json_t *slowest(const json_t *subs)
{
    static const char *const keep[] = {"id",
                                       "tenant",
                                       "namespace",
                                       "stream",
                                       "connection_id",
                                       "queue_depth",
                                       "queue_capacity",
                                       "lane",
                                       "lane_depth",
                                       "lane_capacity",
                                       "drops",
                                       "unacked_bytes",
                                       "delivered",
                                       "last_delivery_age_ms"};
    json_t *out = json_array();
    for (size_t i = 0; out != NULL && i < json_array_size(subs) && i < FX_PIPELINE_TOP; i++) {
        json_t *s = json_array_get(subs, i), *e = json_object();
        for (size_t k = 0; e != NULL && k < sizeof(keep) / sizeof(keep[0]); k++) {
            json_t *v = json_object_get(s, keep[k]);
            if (v != NULL)
                json_object_set(e, keep[k], v);
        }
        json_array_append_new(out, e);
    }
    return out;
}

/* ---- the document ---------------------------------------------------------------------- */

static int lists(fx_broker *b, json_t **pstreams, json_t **psubs)
{
    char *sj = NULL, *bj = NULL;
    int rv = fx_broker_list_streams(b, FX_ADMIN_BROKER_TIMEOUT_NS, &sj);
    if (rv == 0)
        rv = fx_broker_list_subscriptions(b, FX_ADMIN_BROKER_TIMEOUT_NS, &bj);
    json_t *s = rv == 0 ? json_loads(sj, 0, NULL) : NULL;
    json_t *u = rv == 0 ? json_loads(bj, 0, NULL) : NULL;
    free(sj);
    free(bj);
    if (rv == 0 && (s == NULL || u == NULL))
        rv = -ENOMEM;
    if (rv != 0) {
        json_decref(s);
        json_decref(u);
        return rv;
    }
    *pstreams = s;
    *psubs = u;
    return 0;
}

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int build(fx_pipeline *p, char **pjson)
{
    json_t *sl = NULL, *ul = NULL;
    int rv = lists(p->b, &sl, &ul);
    if (rv != 0)
        return rv;
    fx_metrics_snapshot m;
    fx_metrics_snapshot_take(&m);
    const fx_broker_opts *o = fx_broker_get_opts(p->b);
    json_t *subs = json_object_get(ul, "subscriptions");
    json_t *streams = json_object_get(sl, "streams");
    sub_totals t = totals_of(subs);
    json_t *doc =
        json_pack("{s:o, s:i, s:o, s:[o,o,o,o,o], s:o, s:o, s:o}", "taken_at_unix_ms",
                  jint(unix_ms()), "refresh_ms", 1000, "client_side", client_side(), "checkpoints",
                  cp3(p->b, &m), cp4(p->b, &m), cp5(o, &m, &t), cp6(o, &m, &t),
                  quic_part(o, &m, &t), "consumer_groups", consumer_groups(o, &m), "streams",
                  top_streams(streams, subs), "slowest_subscribers", slowest(subs));
    json_decref(sl);
    json_decref(ul);
    *pjson = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return *pjson != NULL ? 0 : -ENOMEM;
}

int fx_pipeline_json(fx_pipeline *p, uint64_t now_ns, char **pjson)
{
    pthread_mutex_lock(&p->mu);
    int rv = 0;
    if (p->json == NULL || now_ns - p->built_ns >= REBUILD_NS) {
        char *fresh = NULL;
        rv = build(p, &fresh);
        if (rv == 0) {
            free(p->json);
            p->json = fresh;
            p->built_ns = now_ns;
        }
    }
    *pjson = rv == 0 ? strdup(p->json) : NULL;
    if (rv == 0 && *pjson == NULL)
        rv = -ENOMEM;
    pthread_mutex_unlock(&p->mu);
    return rv;
}

/* ---- routes ---------------------------------------------------------------------------- */

static void on_pipeline(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    char *json = NULL;
    int rv = fx_pipeline_json(user, fx_now_ns(), &json);
    if (rv == FX_ETIMEDOUT)
        fx_admin_resp_text(resp, 503, FX_ADMIN_TIMEOUT_BODY);
    else if (rv != 0)
        fx_admin_resp_text(resp, 500, "out of memory\n");
    else
        fx_admin_resp_set(resp, 200, FX_ADMIN_JSON, json, strlen(json));
    free(json);
}

static void on_ui(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    (void)user;
    fx_admin_resp_set(resp, 200, "text/html; charset=utf-8", fx_pipeline_ui_html,
                      fx_pipeline_ui_html_len);
}

void fx_pipeline_routes(fx_pipeline *p, fx_admin_route *out)
{
    out[0] = (fx_admin_route){"GET", "/v1/pipeline", on_pipeline, p};
    out[1] = (fx_admin_route){"GET", "/ui", on_ui, p};
}
