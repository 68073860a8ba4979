/* The stream admin API of felix-broker on the admin endpoint: path parsing,
 * the mapping of the broker's results to HTTP statuses, and JSON bodies.
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

static void created_json(fx_admin_resp *r, unsigned status, const char *names[3], bool created,
                         bool durable)
{
    answer_json(r, status,
                json_pack("{s:s, s:s, s:s, s:b, s:b}", "tenant", names[0], "namespace", names[1],
                          "stream", names[2], "created", created, "durable", durable));
}

static unsigned create_status(int rv)
{
    switch (rv) {
    case FX_EWIRE_NAME:
        return 400;
    case FX_EFULL:
        return 429;
    case FX_ESHUTDOWN:
        return 503;
    case -EEXIST:
        return 409;
    case -ENOTSUP:
    case -EINVAL:
        return 400;
    default:
        return 500;
    }
}

/* The optional body of PUT: {"durable": true|false}. Returns 1, 0, -1 (no
 * body: either), or -2 with |why| set. */
static int create_durable(const fx_admin_req *req, const char **why)
{
    if (req->body == NULL || req->body_len == 0)
        return -1;
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, 0, &jerr);
    const char *key;
    json_t *v;
    int want = -1;
    *why = "the body must be a JSON object such as {\"durable\": true}";
    if (!json_is_object(j))
        goto out;
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "durable") != 0) {
            *why = "unknown field in the body: only \"durable\" is accepted";
            goto out;
        }
        if (!json_is_boolean(v)) {
            *why = "\"durable\" must be true or false";
            goto out;
        }
        want = json_is_true(v);
    }
    json_decref(j);
    return want;
out:
    json_decref(j);
    return -2;
}

static void on_create(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
    char buf[PATH_CAP];
    const char *names[3];
    if (!split_path(req->rest, buf, sizeof(buf), names)) {
        error_json(resp, 400, PATH_HELP);
        return;
    }
    const char *why = NULL;
    int want = create_durable(req, &why);
    if (want == -2) {
        error_json(resp, 400, why);
        return;
    }
    bool created = false, durable = false;
    fx_registry_err err = {0};
    int rv = fx_broker_create_stream_durable(user, names[0], names[1], names[2], want, &created,
                                             &durable, &err);
    if (rv == 0)
        created_json(resp, created ? 201 : 200, names, created, durable);
    else
        error_json(resp, create_status(rv), err.msg[0] ? err.msg : fx_strerror(rv));
}

static void on_delete(const fx_admin_req *req, fx_admin_resp *resp, void *user)
{
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

void fx_admin_broker_routes(fx_broker *b, fx_admin_route *out)
{
    out[0] = (fx_admin_route){"GET", "/v1/streams", on_list_streams, b};
    out[1] = (fx_admin_route){"PUT", "/v1/streams/", on_create, b};
    out[2] = (fx_admin_route){"DELETE", "/v1/streams/", on_delete, b};
    out[3] = (fx_admin_route){"GET", "/v1/subscriptions", on_list_subs, b};
}
