/* libFuzzer target for the admin endpoint's small parsers in
 * src/server/admin.c: the bind address (fx_admin_parse_bind, "host:port" or
 * "[v6]:port"), the Authorization header rule (fx_admin_authorized) and the
 * method rule. Name lookups are replaced by a stub answering "no such name"
 * (the binary links with --wrap=getaddrinfo), so the fuzzer never touches
 * DNS. The first input byte picks the parser, the rest is its text. A parsed
 * address has the right family, length and port; a refusal has a message
 * naming the address. Any broken promise aborts. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "felix/error.h"
#include "server/admin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);
void __wrap_freeaddrinfo(struct addrinfo *res);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res)
{
    (void)node, (void)service, (void)hints;
    *res = NULL;
    return EAI_NONAME;
}

void __wrap_freeaddrinfo(struct addrinfo *res)
{
    CHECK(res == NULL); /* the stub never hands one out */
}

/* The decimal port after the last ':' of |s|, as the parser must have read it. */
static unsigned port_of(const char *s)
{
    return (unsigned)strtoul(strrchr(s, ':') + 1, NULL, 10);
}

static void fuzz_bind(const char *s)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    char err[512] = "";
    int rv = fx_admin_parse_bind(s, &ss, &len, err, sizeof(err));
    if (rv != 0) {
        CHECK(rv == FX_ECONFIG);
        CHECK(strstr(err, "admin bind address") != NULL);
        return;
    }
    CHECK(strrchr(s, ':') != NULL && port_of(s) <= 65535);
    if (ss.ss_family == AF_INET) {
        CHECK(len == sizeof(struct sockaddr_in));
        CHECK(ntohs(((struct sockaddr_in *)&ss)->sin_port) == port_of(s));
        CHECK(s[0] != '[');
    } else {
        CHECK(ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
        CHECK(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port_of(s));
        CHECK(s[0] == '[');
    }
}

static void fuzz_authorization(const char *header)
{
    static const char token[] = "s3cret-admin-token";
    /* A mutating call off loopback always needs the token. */
    bool ok = fx_admin_authorized(true, token, "PUT", "/v1/streams/t/n/s", header);
    /* Only the exact token passes, and only after a Bearer scheme. */
    if (ok) {
        size_t n = strlen(header), t = sizeof(token) - 1;
        CHECK(n >= t && strcmp(header + n - t, token) == 0);
        CHECK(strncasecmp(header, "bearer", 6) == 0);
    }
    CHECK(!fx_admin_authorized(true, "", "PUT", "/v1/streams/t/n/s", header));  /* no token */
    CHECK(!fx_admin_authorized(false, "", "PUT", "/v1/streams/t/n/s", header)); /* loopback too */
    bool mut = fx_admin_method_is_mutating(header);
    CHECK(mut == !(strcmp(header, "GET") == 0 || strcmp(header, "HEAD") == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    char *s = malloc(size);
    CHECK(s != NULL);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    if (data[0] & 1)
        fuzz_authorization(s);
    else
        fuzz_bind(s);
    free(s);
    return 0;
}
