/* Admin HTTP endpoint: the rules a request passes before a route runs. The
 * Host header check (DNS rebinding), the bearer-token rule for mutating calls
 * (always) and for /v1 reads off loopback, the token comparison (constant time,
 * whatever the lengths), and counting and logging every refusal. Pure
 * functions plus metrics; any thread. */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <nettle/sha2.h>

#include "base/log.h"
#include "base/metrics.h"
#include "server/admin.h"

/* ---- the token ------------------------------------------------------------ */

bool fx_admin_token_equal(const char *given, const char *token)
{
    /* Comparing digests takes the same time whatever the two lengths are and
     * wherever they first differ: a guess learns nothing from the clock. */
    uint8_t dg[SHA256_DIGEST_SIZE], dt[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(given), (const uint8_t *)given);
    sha256_digest(&ctx, sizeof(dg), dg);
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(token), (const uint8_t *)token);
    sha256_digest(&ctx, sizeof(dt), dt);
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < sizeof(dg); i++)
        diff |= (uint8_t)(dg[i] ^ dt[i]);
    return diff == 0;
}

bool fx_admin_method_is_mutating(const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
}

/* True for the stream admin API's paths, whose reads list every tenant. */
static bool path_is_api(const char *path)
{
    return strncmp(path, "/v1", 3) == 0 && (path[3] == '\0' || path[3] == '/');
}

bool fx_admin_needs_token(bool remote, const char *method, const char *path)
{
    /* A mutation needs the token on loopback too: any local process, another
     * container of the pod or an SSRF that picks the method reaches a
     * loopback endpoint, and a DELETE removes a durable stream's files. */
    if (fx_admin_method_is_mutating(method))
        return true;
    return remote && path_is_api(path);
}

bool fx_admin_authorized(bool remote, const char *token, const char *method, const char *path,
                         const char *authorization)
{
    bool token_set = token && *token;
    if (!fx_admin_needs_token(remote, method, path))
        return true;
    if (!token_set || !authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    return fx_admin_token_equal(given, token);
}

/* ---- the Host header ------------------------------------------------------ */

/* Compares the |n|-byte |name| to NUL-terminated |want|, case ignored and a
 * trailing dot of |name| ("localhost.") allowed. */
static bool name_is(const char *name, size_t n, const char *want)
{
    if (n > 0 && name[n - 1] == '.')
        n--;
    return n > 0 && strlen(want) == n && strncasecmp(name, want, n) == 0;
}

/* True if the |n|-byte |name| is one of the comma-separated |list|. */
static bool name_in_list(const char *name, size_t n, const char *list)
{
    while (list && *list) {
        while (*list == ' ' || *list == ',')
            list++;
        size_t len = strcspn(list, ", ");
        char item[256];
        if (len > 0 && len < sizeof(item)) {
            memcpy(item, list, len);
            item[len] = '\0';
            if (name_is(name, n, item))
                return true;
        }
        list += len;
    }
    return false;
}

static bool port_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 5)
        return false;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return false;
    }
    return true;
}

/* Splits |host| ("name", "name:port", "[v6]" or "[v6]:port") into the name
 * part |*pname| / |*pn|. False if it is malformed. */
static bool split_host(const char *host, const char **pname, size_t *pn, bool *pv6)
{
    *pv6 = host[0] == '[';
    if (*pv6) {
        const char *close = strchr(host, ']');
        if (!close || (close[1] != '\0' && (close[1] != ':' || !port_ok(close + 2))))
            return false;
        *pname = host + 1;
        *pn = (size_t)(close - host - 1);
        return true;
    }
    const char *colon = strchr(host, ':');
    if (colon && (strchr(colon + 1, ':') || !port_ok(colon + 1)))
        return false;
    *pname = host;
    *pn = colon ? (size_t)(colon - host) : strlen(host);
    return *pn > 0;
}

bool fx_admin_host_allowed(const char *host, const char *bind_host, const char *allowed)
{
    if (!host)
        return true; /* HTTP/1.0 without Host: not a browser, so not a rebinding attack */
    const char *name;
    size_t n;
    bool v6;
    char lit[64];
    if (!split_host(host, &name, &n, &v6) || n >= sizeof(lit))
        return false;
    memcpy(lit, name, n);
    lit[n] = '\0';
    /* An address cannot be rebound: a page that reached us by address has
     * that address as its origin, not someone else's name. */
    struct in6_addr a6;
    struct in_addr a4;
    if (v6)
        return inet_pton(AF_INET6, lit, &a6) == 1;
    if (inet_pton(AF_INET, lit, &a4) == 1)
        return true;
    return name_is(name, n, "localhost") || (bind_host && name_is(name, n, bind_host)) ||
           name_in_list(name, n, allowed);
}

/* ---- refusals ------------------------------------------------------------- */

static fx_ratelimit refusal_rl[FX_ADMIN_NREFUSALS] = {
    [FX_ADMIN_REFUSED_HOST] = FX_RATELIMIT_INIT,
    [FX_ADMIN_REFUSED_TOKEN] = FX_RATELIMIT_INIT,
    [FX_ADMIN_REFUSED_CONN_LIMIT] = FX_RATELIMIT_INIT,
    [FX_ADMIN_REFUSED_HEADERS] = FX_RATELIMIT_INIT,
    [FX_ADMIN_REFUSED_BODY] = FX_RATELIMIT_INIT,
};

static const char *const refusal_names[FX_ADMIN_NREFUSALS] = {
    [FX_ADMIN_REFUSED_HOST] = "host",
    [FX_ADMIN_REFUSED_TOKEN] = "token",
    [FX_ADMIN_REFUSED_CONN_LIMIT] = "connection_limit",
    [FX_ADMIN_REFUSED_HEADERS] = "headers_too_large",
    [FX_ADMIN_REFUSED_BODY] = "body_too_large",
};

void fx_admin_count_refusal(fx_admin_refusal why, const char *peer, const char *detail)
{
    switch (why) {
    case FX_ADMIN_REFUSED_HOST:
        FX_COUNTER_INC(admin_refused_host);
        break;
    case FX_ADMIN_REFUSED_TOKEN:
        FX_COUNTER_INC(admin_refused_token);
        break;
    case FX_ADMIN_REFUSED_CONN_LIMIT:
        FX_COUNTER_INC(admin_refused_conn_limit);
        break;
    case FX_ADMIN_REFUSED_HEADERS:
        FX_COUNTER_INC(admin_refused_headers);
        break;
    case FX_ADMIN_REFUSED_BODY:
        FX_COUNTER_INC(admin_refused_body);
        break;
    case FX_ADMIN_NREFUSALS:
        return;
    }
    FX_LOG_RATELIMITED(&refusal_rl[why], fx_now_ns(), FX_LOG_WARN, "admin",
                       "refused reason=%s peer=%s: %s", refusal_names[why], peer ? peer : "-",
                       detail ? detail : "-");
}
