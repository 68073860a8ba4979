/* The stream admin API of felix-broker on the admin endpoint (streams and
 * their consumer groups): path parsing, the mapping of the broker's results
 * to HTTP statuses, and JSON bodies.
 * Runs on libmicrohttpd's threads; the broker's control functions do the
 * asking of the loops (with a timeout). */
#include "server/admin_routes.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"

/* ---- answers ---------------------------------------------------------------- */

/* Answers |status| with {"error": |msg|}. */
static void error_json(fx_admin_resp *r, unsigned status, const char *msg)
{
    json_t *j = json_pack("{s:s}", "error", msg);
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s == NULL) {
        fx_admin_resp_text(r, 500, "out of memory\n");
        return;
    }
    fx_admin_resp_set(r, status, FX_ADMIN_JSON, s, strlen(s));
    free(s);
}

/* Answers a list call: |json| (taken) on success. */
static void list_answer(fx_admin_resp *r, int rv, char *json)
{
    if (rv == FX_ETIMEDOUT) {
        fx_admin_resp_text(r, 503, FX_ADMIN_TIMEOUT_BODY);
        return;
    }
    if (rv != 0) {
        error_json(r, 500, fx_strerror(rv));
        return;
    }
    fx_admin_resp_set(r, 200, FX_ADMIN_JSON, json, strlen(json));
    free(json);
}

static void on_list_streams(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    char *json = NULL;
    int rv = fx_broker_list_streams(user, FX_ADMIN_BROKER_TIMEOUT_NS, &json);
    list_answer(resp, rv, json);
}

static void on_list_subs(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    char *json = NULL;
    int rv = fx_broker_list_subscriptions(user, FX_ADMIN_BROKER_TIMEOUT_NS, &json);
    list_answer(resp, rv, json);
}

/* ---- one stream ---------------------------------------------------------------- */

/* Splits "tenant/namespace/stream" (|rest|) into |names| (copies in |buf|).
 * Returns false unless there are exactly three parts. Empty parts pass: the
 * broker refuses them with its reason. */
static bool split_path(const char *rest, char *buf, size_t cap, const char *names[3])
{
    size_t n = strlen(rest);
    if (n >= cap)
        return false;
    memcpy(buf, rest, n + 1);
    names[0] = buf;
    for (int i = 1; i < 3; i++) {
        char *slash = strchr(names[i - 1], '/');
        if (slash == NULL)
            return false;
        *slash = '\0';
        names[i] = slash + 1;
    }
    return strchr(names[2], '/') == NULL;
}

#define PATH_HELP "want /v1/streams/{tenant}/{namespace}/{stream}"
#define PATH_CAP (3 * 256 + 3)

/* Answers |status| with |j| (taken; NULL: out of memory). */
static void answer_json(fx_admin_resp *r, unsigned status, json_t *j)
{
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s == NULL) {
        error_json(r, 500, "out of memory");
        return;
    }
    fx_admin_resp_set(r, status, FX_ADMIN_JSON, s, strlen(s));
    free(s);
}

static void stream_json(fx_admin_resp *r, unsigned status, const char *names[3], const char *what,
                        bool value)
{
    answer_json(r, status,
                json_pack("{s:s, s:s, s:s, s:b}", "tenant", names[0], "namespace", names[1],
                          "stream", names[2], what, value));
}

/* The HTTP status of a broker stream operation's error (create, retention). */
static unsigned broker_status(int rv)
{
    switch (rv) {
    case FX_EWIRE_NAME:
    case -ENOTSUP:
    case -EINVAL:
    case -ERANGE:
        return 400;
    case FX_ENOSTREAM:
        return 404;
    case -EEXIST:
        return 409;
    case FX_EFULL:
    case FX_ESTORAGE_QUOTA:
        return 429;
    case FX_ESHUTDOWN:
    case FX_ETIMEDOUT:
        return 503;
    default:
        return 500;
    }
}

/* What a PUT or PATCH body asks: {"durable": bool, "retention_bytes": N|null,
 * "retention_seconds": N|null}, every field optional. */
typedef struct stream_body {
    int durable; /* 1, 0, -1: not given */
    fx_broker_retention ret;
    char why[192]; /* a refusal's text */
} stream_body;

/* Reads retention field |key| = |v|: a whole number in 1..|max|, or null
 * (drop the override). Returns NULL or why not. */
static const char *retention_field(stream_body *sb, const char *key, json_t *v, uint64_t max,
                                   bool *pset, uint64_t *pval)
{
    *pset = true;
    *pval = 0;
    if (json_is_null(v))
        return NULL;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || (uint64_t)json_integer_value(v) > max) {
        snprintf(sb->why, sizeof(sb->why),
                 "\"%s\" must be a whole number from 1 to %llu, or null to drop the override", key,
                 (unsigned long long)max);
        return sb->why;
    }
    *pval = (uint64_t)json_integer_value(v);
    return NULL;
}

static const char *body_field(stream_body *sb, const char *key, json_t *v)
{
    if (strcmp(key, "durable") == 0) {
        if (!json_is_boolean(v))
            return "\"durable\" must be true or false";
        sb->durable = json_is_true(v);
        return NULL;
    }
    if (strcmp(key, "retention_bytes") == 0)
        return retention_field(sb, key, v, FX_BROKER_RETENTION_MAX_BYTES, &sb->ret.set_bytes,
                               &sb->ret.bytes);
    if (strcmp(key, "retention_seconds") == 0)
        return retention_field(sb, key, v, FX_BROKER_RETENTION_MAX_SECONDS, &sb->ret.set_seconds,
                               &sb->ret.seconds);
    return "unknown field in the body: only \"durable\", \"retention_bytes\" and "
           "\"retention_seconds\" are accepted";
}

/* Parses the optional body of PUT or PATCH into |sb|. Returns NULL, or why
 * it is refused (a 400). An empty body asks nothing. */
static const char *parse_body(const fx_admin_req *req, stream_body *sb)
{
    *sb = (stream_body){.durable = -1};
    if (req->body == NULL || req->body_len == 0)
        return NULL;
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, 0, &jerr);
    const char *key, *why = NULL;
    json_t *v;
    if (!json_is_object(j))
        why = "the body must be a JSON object such as {\"durable\": true}";
    else
        json_object_foreach(j, key, v)
        {
            if ((why = body_field(sb, key, v)) != NULL)
                break;
        }
    json_decref(j);
    return why;
}

static bool wants_retention(const stream_body *sb)
{
    return sb->ret.set_bytes || sb->ret.set_seconds;
}

/* Answers a stream with its durability and retention overrides. */
static void stream_answer(fx_admin_resp *r, unsigned status, const char *names[3], int created,
                          bool durable, const uint64_t ret[2])
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:b}", "tenant", names[0], "namespace", names[1],
                          "stream", names[2], "durable", durable);
    if (j != NULL && created >= 0)
        json_object_set_new(j, "created", json_boolean(created));
    if (j != NULL && ret != NULL) {
        json_object_set_new(j, "retention_bytes",
                            ret[0] ? json_integer((json_int_t)ret[0]) : json_null());
        json_object_set_new(j, "retention_seconds",
                            ret[1] ? json_integer((json_int_t)ret[1]) : json_null());
    }
    answer_json(r, status, j);
}

/* Applies the retention fields of |sb| to the stream. Returns true when it
 * did (|ret| holds the overrides now), false after answering the error
 * (|created|: the PUT created the stream just before, which the answer
 * says, as the stream stays). */
static bool apply_retention(fx_admin_resp *resp, fx_broker *b, const char *names[3],
                            const stream_body *sb, bool created, uint64_t ret[2])
{
    fx_registry_err err = {0};
    int rv = fx_broker_set_stream_retention(b, names[0], names[1], names[2], &sb->ret, sb->durable,
                                            FX_ADMIN_BROKER_TIMEOUT_NS, &ret[0], &ret[1], &err);
    if (rv == 0)
        return true;
    char msg[sizeof(err.msg) + 96];
    snprintf(msg, sizeof(msg), "%s%s",
             created ? "the stream was created without its retention overrides: " : "",
             err.msg[0] ? err.msg : fx_strerror(rv));
    error_json(resp, broker_status(rv), msg);
    return false;
}

/* ---- consumer groups ------------------------------------------------------------ */

/* What a path under /v1/streams/{t}/{ns}/{s}/groups names. */
enum group_target {
    GT_NONE = 0, /* not a groups path: a stream's, or malformed */
    GT_LIST,     /* .../groups */
    GT_ONE,      /* .../groups/{g} */
    GT_SEEK,     /* .../groups/{g}/seek */
    GT_DEAD,     /* .../groups/{g}/dead-letters */
    GT_REDRIVE,  /* .../groups/{g}/redrive */
    GT_DISCARD,  /* .../groups/{g}/discard */
};

#define GROUP_PATH_HELP                                                                            \
    "want /v1/streams/{tenant}/{namespace}/{stream}/groups[/{group}[/seek|/dead-letters|"          \
    "/redrive|/discard]]"
/* The three names, "groups", a group name (128 bytes at most, some room
 * past it so that a long one reaches the broker's refusal) and an action. */
#define GROUP_PATH_CAP (PATH_CAP + 8 + 512 + 16)

/* A groups path split into its names (copies in |buf|). */
typedef struct group_path {
    char buf[GROUP_PATH_CAP];
    const char *names[3];
    const char *group; /* NULL for GT_LIST */
} group_path;

/* Splits |rest| at its slashes into at most |max| parts of |buf|. Returns
 * the number of parts, or max + 1 when there are more (or |rest| does not
 * fit). */
static int split_parts(const char *rest, char *buf, size_t cap, char **parts, int max)
{
    size_t n = strlen(rest);
    if (n >= cap)
        return max + 1;
    memcpy(buf, rest, n + 1);
    int k = 0;
    for (char *p = buf; k <= max; k++) {
        if (k == max)
            return max + 1;
        parts[k] = p;
        char *slash = strchr(p, '/');
        if (slash == NULL)
            return k + 1;
        *slash = '\0';
        p = slash + 1;
    }
    return max + 1;
}

/* Parses |rest| (what follows "/v1/streams/") as a groups path into |gp|.
 * Returns its target, or GT_NONE when it is not one: fewer than four parts
 * or a fourth that is not "groups" (a stream's own path), an empty group
 * name, an unknown action or parts past it. Stream names may hold dots;
 * names hold no slash (the endpoint unescapes %2F before routing). */
static enum group_target parse_group_path(const char *rest, group_path *gp)
{
    char *parts[6];
    int n = split_parts(rest, gp->buf, sizeof(gp->buf), parts, 6);
    if (n < 4 || n > 6 || strcmp(parts[3], "groups") != 0)
        return GT_NONE;
    for (int i = 0; i < 3; i++)
        gp->names[i] = parts[i];
    gp->group = n > 4 ? parts[4] : NULL;
    if (n == 4)
        return GT_LIST;
    if (gp->group[0] == '\0')
        return GT_NONE;
    if (n == 5)
        return GT_ONE;
    if (strcmp(parts[5], "seek") == 0)
        return GT_SEEK;
    if (strcmp(parts[5], "dead-letters") == 0)
        return GT_DEAD;
    if (strcmp(parts[5], "redrive") == 0)
        return GT_REDRIVE;
    if (strcmp(parts[5], "discard") == 0)
        return GT_DISCARD;
    return GT_NONE;
}

/* True when |rest| has a fourth part "groups": the groups handlers take it
 * (and refuse it with GROUP_PATH_HELP when it is malformed). */
static bool is_group_path(const char *rest)
{
    const char *p = rest;
    for (int i = 0; i < 3; i++) {
        p = strchr(p, '/');
        if (p == NULL)
            return false;
        p++;
    }
    return strncmp(p, "groups", 6) == 0 && (p[6] == '\0' || p[6] == '/');
}

/* The HTTP status of a consumer group operation's error. A refusal of the
 * stream as it is (-ENOTSUP) is 409, not a 5xx, which would read as a
 * broker fault to clients and alerting; a durable stream whose log is not
 * open now (FX_ESTORAGE_ERROR: recovering, damaged, failed) is 503. */
static unsigned group_status(int rv)
{
    switch (rv) {
    case FX_EWIRE_NAME:
    case -EINVAL:
        return 400;
    case FX_ENOSTREAM:
        return 404;
    case FX_ECURSOR_IN_FUTURE:
    case -EBUSY:
    case -ENOTSUP:
    case -EEXIST:
    case -ESRCH: /* not a dead letter of the group (redrive, discard) */
        return 409;
    case FX_ECURSOR_TOO_OLD: /* a redrive of a record no longer in the stream */
        return 410;
    case FX_EFULL:
    case -ENOSPC: /* a redrive with the group's pending records at their bound */
        return 429;
    case FX_ESHUTDOWN:
    case FX_ETIMEDOUT:
    case FX_ESTORAGE_ERROR:
        return 503;
    default:
        return 500;
    }
}

/* Answers a failed group operation: the broker's sentence when it gave one. */
static void group_error(fx_admin_resp *r, int rv, const fx_registry_err *err)
{
    if (rv == FX_ETIMEDOUT) {
        fx_admin_resp_text(r, 503, FX_ADMIN_TIMEOUT_BODY);
        return;
    }
    error_json(r, group_status(rv), err->msg[0] ? err->msg : fx_strerror(rv));
}

/* Where a PUT or seek body starts the group. */
typedef struct group_start {
    int start; /* enum fx_broker_group_start, or START_TIME */
    uint64_t offset;
    uint64_t time_ms; /* START_TIME */
    bool given;
} group_start;

/* {"time_ms": T}: the first record appended at or after T (Unix ms), found
 * in the stream's log before the create or seek, which then go to that
 * offset. */
#define START_TIME 1000

#define START_HELP                                                                                 \
    "\"start\" must be \"all\", \"new\", \"last\", {\"offset\": N} or {\"time_ms\": T} (N a "      \
    "whole number from 0, T Unix milliseconds; a time needs a durable stream)"

/* Reads the value of "start" into |gs|. Returns NULL or why not. */
static const char *start_value(json_t *v, group_start *gs)
{
    static const char *const words[] = {"all", "new", "last"};
    static const int starts[] = {FX_BROKER_GROUP_START_ALL, FX_BROKER_GROUP_START_NEW,
                                 FX_BROKER_GROUP_START_LAST};
    gs->given = true;
    if (json_is_string(v)) {
        for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
            if (strcmp(json_string_value(v), words[i]) == 0) {
                gs->start = starts[i];
                return NULL;
            }
        }
        return START_HELP;
    }
    json_t *off = json_object_get(v, "offset"), *tm = json_object_get(v, "time_ms");
    json_t *n = off != NULL ? off : tm;
    if (!json_is_object(v) || json_object_size(v) != 1 || !json_is_integer(n) ||
        json_integer_value(n) < 0)
        return START_HELP;
    gs->start = off != NULL ? FX_BROKER_GROUP_START_OFFSET : START_TIME;
    if (off != NULL)
        gs->offset = (uint64_t)json_integer_value(off);
    else
        gs->time_ms = (uint64_t)json_integer_value(tm);
    return NULL;
}

/* A start at a time becomes the offset the stream's log has for it.
 * Returns 0, or the error answered in |resp|. */
static int resolve_time(fx_broker *b, const group_path *gp, group_start *gs, fx_admin_resp *resp)
{
    if (gs->start != START_TIME)
        return 0;
    fx_registry_err err = {0};
    uint64_t off = 0;
    int rv = fx_broker_stream_offset_for_time(b, gp->names[0], gp->names[1], gp->names[2],
                                              gs->time_ms, FX_ADMIN_BROKER_TIMEOUT_NS, &off, &err);
    if (rv != 0) {
        group_error(resp, rv, &err);
        return rv;
    }
    gs->start = FX_BROKER_GROUP_START_OFFSET;
    gs->offset = off;
    return 0;
}

/* Parses the body of a group PUT or seek, {"start": ...} (optional; an
 * empty body asks nothing), into |gs|: by default the oldest record. With
 * |set| (a PUT) the group's own settings may come beside it (any other key
 * is refused, never ignored). Returns NULL, or why it is refused (a 400;
 * the text in |buf| of |bl| bytes when it is built). */
static const char *parse_start_body(const fx_admin_req *req, group_start *gs,
                                    fx_broker_group_settings *set, char *buf, size_t bl)
{
    *gs = (group_start){.start = FX_BROKER_GROUP_START_ALL};
    if (set != NULL)
        *set = (fx_broker_group_settings){0};
    if (req->body == NULL || req->body_len == 0)
        return NULL;
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    const char *key, *why = NULL;
    json_t *v;
    if (!json_is_object(j))
        why = "the body must be a JSON object such as {\"start\": \"new\"}";
    else
        json_object_foreach(j, key, v)
        {
            if (strcmp(key, "start") == 0)
                why = start_value(v, gs);
            else if (set == NULL)
                why = "unknown field in the body: only \"start\" is accepted";
            else if (fx_broker_group_setting_parse(set, key, v, buf, bl) != 0)
                why = buf;
            if (why != NULL)
                break;
        }
    json_decref(j);
    return why;
}

/* {"tenant", "namespace", "stream", "group"} of |gp|, or NULL (no memory). */
static json_t *group_json(const group_path *gp)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "tenant", gp->names[0], "namespace", gp->names[1],
                     "stream", gp->names[2], "group", gp->group);
}

/* The start of |gs| as the body spells it. */
static json_t *start_json(const group_start *gs)
{
    switch (gs->start) {
    case FX_BROKER_GROUP_START_NEW:
        return json_string("new");
    case FX_BROKER_GROUP_START_LAST:
        return json_string("last");
    case FX_BROKER_GROUP_START_OFFSET:
        return json_pack("{s:I}", "offset", (json_int_t)gs->offset);
    default:
        return json_string("all");
    }
}

/* GET of the list, one group or its dead letters: the broker's JSON as is. */
static void on_group_get(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    group_path gp;
    enum group_target t = parse_group_path(req->rest, &gp);
    if (t == GT_NONE || t == GT_SEEK || t == GT_REDRIVE || t == GT_DISCARD) {
        error_json(resp, 400,
                   t == GT_SEEK      ? "a seek is POST .../groups/{group}/seek with a body"
                   : t == GT_NONE    ? GROUP_PATH_HELP
                   : t == GT_REDRIVE ? "a redrive is POST .../groups/{group}/redrive with a body "
                                       "{\"offset\": N}"
                                     : "a discard is POST .../groups/{group}/discard with a body "
                                       "{\"offset\": N}");
        return;
    }
    fx_registry_err err = {0};
    char *json = NULL;
    const char **n = gp.names;
    int rv = t == GT_DEAD ? fx_broker_group_dead_letters(user, n[0], n[1], n[2], gp.group,
                                                         FX_ADMIN_BROKER_TIMEOUT_NS, &json, &err)
                          : fx_broker_list_groups(user, n[0], n[1], n[2], gp.group,
                                                  FX_ADMIN_BROKER_TIMEOUT_NS, &json, &err);
    if (rv != 0) {
        group_error(resp, rv, &err);
        return;
    }
    fx_admin_resp_set(resp, 200, FX_ADMIN_JSON, json, strlen(json));
    free(json);
}

/* PUT .../groups/{g}: creates the group (201) or finds it (200, its
 * position left alone). */
static void on_group_put(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    group_path gp;
    group_start gs;
    fx_broker_group_settings set;
    char buf[256];
    if (parse_group_path(req->rest, &gp) != GT_ONE) {
        error_json(resp, 400, GROUP_PATH_HELP);
        return;
    }
    const char *why = parse_start_body(req, &gs, &set, buf, sizeof(buf));
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    if (resolve_time(user, &gp, &gs, resp) != 0)
        return;
    bool created = false;
    fx_registry_err err = {0};
    int rv = fx_broker_create_group(user, gp.names[0], gp.names[1], gp.names[2], gp.group, gs.start,
                                    gs.offset, &set, FX_ADMIN_BROKER_TIMEOUT_NS, &created, &err);
    if (rv != 0) {
        group_error(resp, rv, &err);
        return;
    }
    json_t *j = group_json(&gp);
    if (j != NULL)
        json_object_set_new(j, "created", json_boolean(created));
    answer_json(resp, created ? 201 : 200, j);
}

#define OFFSET_HELP "the body must be {\"offset\": N} (N a whole number from 0)"

/* Parses the body of a redrive or discard, {"offset": N} (required, the
 * only field). Returns NULL or why it is refused (a 400). */
static const char *parse_offset_body(const fx_admin_req *req, uint64_t *poffset)
{
    if (req->body == NULL || req->body_len == 0)
        return OFFSET_HELP;
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, 0, &jerr);
    json_t *off = json_object_get(j, "offset");
    const char *why = NULL;
    if (!json_is_object(j) || json_object_size(j) != 1 || !json_is_integer(off) ||
        json_integer_value(off) < 0)
        why = OFFSET_HELP;
    else
        *poffset = (uint64_t)json_integer_value(off);
    json_decref(j);
    return why;
}

/* POST .../groups/{g}/redrive or /discard with {"offset": N}: 200, 400 (the
 * body), 404 (no stream or group), 409 (not a dead letter of the group),
 * 410 (a redrive of a record no longer in the stream), 429 (the group's
 * pending records at their bound). */
static void on_group_dead_post(const fx_admin_req *req, fx_admin_resp *resp, void *user,
                               const group_path *gp, enum group_target t)
{
    uint64_t offset = 0;
    const char *why = parse_offset_body(req, &offset);
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    fx_registry_err err = {0};
    const char *const *n = gp->names;
    int rv = t == GT_REDRIVE ? fx_broker_redrive_group(user, n[0], n[1], n[2], gp->group, offset,
                                                       FX_ADMIN_BROKER_TIMEOUT_NS, &err)
                             : fx_broker_discard_group(user, n[0], n[1], n[2], gp->group, offset,
                                                       FX_ADMIN_BROKER_TIMEOUT_NS, &err);
    if (rv != 0) {
        group_error(resp, rv, &err);
        return;
    }
    json_t *j = group_json(gp);
    if (j != NULL) {
        json_object_set_new(j, "offset", json_integer((json_int_t)offset));
        json_object_set_new(j, t == GT_REDRIVE ? "redriven" : "discarded", json_true());
    }
    answer_json(resp, 200, j);
}

/* POST .../groups/{g}/seek with {"start": ...} (required), or a redrive or
 * discard (on_group_dead_post). */
static void on_group_post(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    group_path gp;
    group_start gs;
    enum group_target t = parse_group_path(req->rest, &gp);
    if (t == GT_REDRIVE || t == GT_DISCARD) {
        on_group_dead_post(req, resp, user, &gp, t);
        return;
    }
    if (t != GT_SEEK) {
        error_json(resp, 400,
                   "want POST /v1/streams/{tenant}/{namespace}/{stream}/groups/"
                   "{group}/seek, /redrive or /discard");
        return;
    }
    const char *why = parse_start_body(req, &gs, NULL, NULL, 0);
    if (why == NULL && !gs.given)
        why = "the body must say where to go: {\"start\": \"all\"|\"new\"|\"last\"|"
              "{\"offset\": N}|{\"time_ms\": T}}";
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    uint64_t time_ms = gs.start == START_TIME ? gs.time_ms : UINT64_MAX;
    if (resolve_time(user, &gp, &gs, resp) != 0)
        return;
    fx_registry_err err = {0};
    int rv = fx_broker_seek_group(user, gp.names[0], gp.names[1], gp.names[2], gp.group, gs.start,
                                  gs.offset, FX_ADMIN_BROKER_TIMEOUT_NS, &err);
    if (rv != 0) {
        group_error(resp, rv, &err);
        return;
    }
    json_t *j = group_json(&gp);
    if (j != NULL)
        json_object_set_new(j, "start", start_json(&gs));
    if (j != NULL && time_ms != UINT64_MAX)
        json_object_set_new(j, "time_ms", json_integer((json_int_t)time_ms));
    answer_json(resp, 200, j);
}

/* DELETE .../groups/{g}: 200, 404 when there was none, 409 while members
 * are joined. */
static void on_group_delete(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    group_path gp;
    if (parse_group_path(req->rest, &gp) != GT_ONE) {
        error_json(resp, 400, GROUP_PATH_HELP);
        return;
    }
    bool existed = false;
    fx_registry_err err = {0};
    int rv = fx_broker_delete_group(user, gp.names[0], gp.names[1], gp.names[2], gp.group,
                                    FX_ADMIN_BROKER_TIMEOUT_NS, &existed, &err);
    if (rv == 0 && !existed) {
        rv = FX_ENOSTREAM;
        snprintf(err.msg, sizeof(err.msg), "consumer group not found: %s", gp.group);
    }
    if (rv != 0) {
        group_error(resp, rv, &err);
        return;
    }
    json_t *j = group_json(&gp);
    if (j != NULL)
        json_object_set_new(j, "deleted", json_true());
    answer_json(resp, 200, j);
}

/* GET of one stream's path: only its groups are served there. */
static void on_get(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    if (is_group_path(req->rest)) {
        on_group_get(req, resp, user);
        return;
    }
    error_json(resp, 404,
               "not found: GET /v1/streams lists the streams; a stream's consumer "
               "groups are under /v1/streams/{tenant}/{namespace}/{stream}/groups");
}

static void on_create(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    if (is_group_path(req->rest)) {
        on_group_put(req, resp, user);
        return;
    }
    char buf[PATH_CAP];
    const char *names[3];
    if (!split_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, PATH_HELP);
        return;
    }
    stream_body sb;
    const char *why = parse_body(req, &sb);
    if (why == NULL && wants_retention(&sb) && sb.durable != 1)
        why = "\"retention_bytes\" and \"retention_seconds\" need \"durable\": true (they are "
              "retention overrides of a durable stream)";
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    bool created = false, durable = false;
    fx_registry_err err = {0};
    int rv = fx_broker_create_stream_durable(user, names[0], names[1], names[2], sb.durable,
                                             &created, &durable, &err);
    if (rv != 0) {
        error_json(resp, broker_status(rv), err.msg[0] ? err.msg : fx_strerror(rv));
        return;
    }
    uint64_t ret[2] = {0};
    if (wants_retention(&sb) && !apply_retention(resp, user, names, &sb, created, ret))
        return;
    stream_answer(resp, created ? 201 : 200, names, created, durable,
                  wants_retention(&sb) ? ret : NULL);
}

/* PATCH: changes the retention overrides of an existing durable stream;
 * "durable", when given, must be what the stream is. */
static void on_patch(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    char buf[PATH_CAP];
    const char *names[3];
    if (!split_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, PATH_HELP);
        return;
    }
    stream_body sb;
    const char *why = parse_body(req, &sb);
    if (why == NULL && !wants_retention(&sb))
        why = "nothing to change: give \"retention_bytes\" and/or \"retention_seconds\" (a "
              "number, or null to drop the override); durability cannot be changed";
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    uint64_t ret[2] = {0};
    if (apply_retention(resp, user, names, &sb, false, ret))
        stream_answer(resp, 200, names, -1, true, ret);
}

static void on_delete(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    if (is_group_path(req->rest)) {
        on_group_delete(req, resp, user);
        return;
    }
    char buf[PATH_CAP];
    const char *names[3];
    if (!split_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, PATH_HELP);
        return;
    }
    fx_registry_err err = {0};
    int rv = fx_broker_delete_stream(user, names[0], names[1], names[2], &err);
    if (rv == 0)
        stream_json(resp, 200, names, "deleted", true);
    else
        error_json(resp, rv == FX_ENOSTREAM ? 404 : 500, err.msg[0] ? err.msg : fx_strerror(rv));
}

/* ---- caches -------------------------------------------------------------------------------- */

static void on_list_caches(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    (void)req;
    char *json = NULL;
    int rv = fx_broker_list_caches(user, FX_ADMIN_BROKER_TIMEOUT_NS, &json);
    list_answer(resp, rv, json);
}

#define CACHE_PATH_HELP "want /v1/tenants/{tenant}/namespaces/{namespace}/caches/{cache}"

/* Splits "{t}/namespaces/{ns}/caches/{c}" (|rest|, what follows
 * "/v1/tenants/") into |names| (copies in |buf|). Empty names pass: the
 * broker refuses them with its reason. */
static bool split_cache_path(const char *rest, char *buf, size_t cap, const char *names[3])
{
    size_t n = strlen(rest);
    if (n >= cap)
        return false;
    memcpy(buf, rest, n + 1);
    char *ns = strstr(buf, "/namespaces/");
    if (ns == NULL)
        return false;
    *ns = '\0';
    ns += strlen("/namespaces/");
    char *c = strstr(ns, "/caches/");
    if (c == NULL)
        return false;
    *c = '\0';
    c += strlen("/caches/");
    names[0] = buf, names[1] = ns, names[2] = c;
    return strchr(buf, '/') == NULL && strchr(ns, '/') == NULL && strchr(c, '/') == NULL;
}

static void cache_json(fx_admin_resp *r, unsigned status, const char *names[3], json_t *extra)
{
    json_t *j =
        json_pack("{s:s, s:s, s:s}", "tenant", names[0], "namespace", names[1], "cache", names[2]);
    if (j != NULL && extra != NULL && json_object_update(j, extra) != 0) {
        json_decref(j);
        j = NULL;
    }
    json_decref(extra);
    answer_json(r, status, j);
}

/* The optional body of a cache PUT: {"durable": bool}. Returns NULL, or
 * why it is refused (a 400); |*pdurable| 1, 0, or -1 (not given). */
static const char *cache_body(const fx_admin_req *req, int *pdurable)
{
    *pdurable = -1;
    if (req->body == NULL || req->body_len == 0)
        return NULL;
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, 0, &jerr);
    const char *key, *why = NULL;
    json_t *v;
    if (!json_is_object(j))
        why = "the body must be a JSON object such as {\"durable\": true}";
    else
        json_object_foreach(j, key, v)
        {
            if (strcmp(key, "durable") != 0) {
                why = "unknown field in the body: only \"durable\" is accepted";
                break;
            }
            if (!json_is_boolean(v)) {
                why = "\"durable\" must be true or false";
                break;
            }
            *pdurable = json_is_true(v);
        }
    json_decref(j);
    return why;
}

/* PUT: declares the cache (201), or finds it declared (200); the body may
 * ask for a durable cache. */
static void on_cache_put(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    char buf[3 * 256 + 32];
    const char *names[3];
    if (!split_cache_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, CACHE_PATH_HELP);
        return;
    }
    int want = -1;
    const char *why = cache_body(req, &want);
    if (why != NULL) {
        error_json(resp, 400, why);
        return;
    }
    bool created = false, durable = false;
    fx_registry_err err = {0};
    int rv = fx_broker_declare_cache_durable(user, names[0], names[1], names[2], want, &created,
                                             &durable, &err);
    if (rv != 0) {
        error_json(resp, broker_status(rv), err.msg[0] ? err.msg : fx_strerror(rv));
        return;
    }
    cache_json(resp, created ? 201 : 200, names,
               json_pack("{s:b, s:b}", "created", created, "durable", durable));
}

/* DELETE: drops the declaration and frees the entries (200 with how
 * many), 404 when the cache was neither declared nor used. */
static void on_cache_delete(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    char buf[3 * 256 + 32];
    const char *names[3];
    if (!split_cache_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, CACHE_PATH_HELP);
        return;
    }
    uint64_t entries = 0;
    fx_registry_err err = {0};
    int rv = fx_broker_drop_cache(user, names[0], names[1], names[2], FX_ADMIN_BROKER_TIMEOUT_NS,
                                  &entries, &err);
    if (rv == FX_ETIMEDOUT) {
        fx_admin_resp_text(resp, 503, FX_ADMIN_TIMEOUT_BODY);
        return;
    }
    if (rv != 0) {
        error_json(resp, rv == -ENOENT ? 404 : broker_status(rv),
                   err.msg[0] ? err.msg : fx_strerror(rv));
        return;
    }
    cache_json(resp, 200, names,
               json_pack("{s:b, s:I}", "deleted", 1, "entries", (json_int_t)entries));
}

void fx_admin_broker_routes(fx_broker *b, fx_admin_route *out)
{
    out[0] = (fx_admin_route){"GET", "/v1/streams", on_list_streams, b};
    out[1] = (fx_admin_route){"PUT", "/v1/streams/", on_create, b};
    out[2] = (fx_admin_route){"PATCH", "/v1/streams/", on_patch, b};
    out[3] = (fx_admin_route){"DELETE", "/v1/streams/", on_delete, b};
    out[4] = (fx_admin_route){"GET", "/v1/subscriptions", on_list_subs, b};
    out[5] = (fx_admin_route){"GET", "/v1/streams/", on_get, b};
    out[6] = (fx_admin_route){"POST", "/v1/streams/", on_group_post, b};
    out[7] = (fx_admin_route){"GET", "/v1/caches", on_list_caches, b};
    out[8] = (fx_admin_route){"PUT", "/v1/tenants/", on_cache_put, b};
    out[9] = (fx_admin_route){"DELETE", "/v1/tenants/", on_cache_delete, b};
}
