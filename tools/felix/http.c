/* HTTP requests to the broker's admin endpoint through libcurl, with a
 * bounded response body and one-line transport errors. Main thread. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Largest response body kept; /metrics of a busy broker is far smaller. */
#define BODY_MAX (16u << 20)

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    fx_cli_buf *b = user;
    size_t n = size * nmemb;
    if (b->len + n > BODY_MAX || fx_cli_buf_add(b, data, n) != 0)
        return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
    return n;
}

static int http_global_init(void)
{
    static bool done;
    if (done)
        return 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -EIO;
    done = true;
    return 0;
}

static CURLcode http_setup(CURL *h, const char *method, const char *url, const char *body,
                           int timeout_ms, fx_cli_http *resp, char *cerr, struct curl_slist *hdrs)
{
    CURLcode cc = CURLE_OK;
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_URL, url);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    if (cc == CURLE_OK)
        cc = curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp->body);
    if (cc == CURLE_OK && hdrs != NULL)
        cc = curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (cc == CURLE_OK && strcmp(method, "GET") != 0)
        cc = curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (cc == CURLE_OK && (strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0)) {
        /* Without a body an empty one with Content-Length: 0, so the server
         * does not wait for one. */
        cc = curl_easy_setopt(h, CURLOPT_POSTFIELDS, body != NULL ? body : "");
        if (cc == CURLE_OK)
            cc = curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
    }
    return cc;
}

int fx_cli_http_request(const char *method, const char *url, const char *token, int timeout_ms,
                        fx_cli_http *resp, char *err, size_t errlen)
{
    return fx_cli_http_request_body(method, url, token, NULL, timeout_ms, resp, err, errlen);
}

int fx_cli_http_request_body(const char *method, const char *url, const char *token,
                             const char *body, int timeout_ms, fx_cli_http *resp, char *err,
                             size_t errlen)
{
    *resp = (fx_cli_http){0};
    if (http_global_init() != 0) {
        snprintf(err, errlen, "cannot initialise libcurl");
        return -EIO;
    }
    CURL *h = curl_easy_init();
    if (h == NULL) {
        snprintf(err, errlen, "cannot initialise libcurl");
        return -EIO;
    }
    char cerr[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    char auth[4096];
    int rv = 0;
    if (token != NULL && *token != '\0') {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        if ((hdrs = curl_slist_append(NULL, auth)) == NULL)
            rv = -ENOMEM;
    }
    if (rv == 0 && body != NULL) {
        struct curl_slist *l = curl_slist_append(hdrs, "Content-Type: application/json");
        if (l == NULL)
            rv = -ENOMEM;
        else
            hdrs = l;
    }
    CURLcode cc =
        rv == 0 ? http_setup(h, method, url, body, timeout_ms, resp, cerr, hdrs) : CURLE_OK;
    if (rv == 0 && cc == CURLE_OK)
        cc = curl_easy_perform(h);
    if (rv == 0 && cc == CURLE_OK)
        cc = curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    if (rv == 0 && cc != CURLE_OK) {
        snprintf(err, errlen, "%s %s: %s", method, url,
                 cc == CURLE_WRITE_ERROR ? "response body over 16 MiB"
                                         : (cerr[0] ? cerr : curl_easy_strerror(cc)));
        rv = -EIO;
    } else if (rv != 0) {
        snprintf(err, errlen, "out of memory");
    }
    if (rv == 0 && resp->body.oom) {
        snprintf(err, errlen, "out of memory");
        rv = -ENOMEM;
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    if (rv != 0)
        fx_cli_buf_free(&resp->body);
    else if (resp->body.p == NULL)
        fx_cli_buf_add(&resp->body, "", 0);
    return rv;
}
