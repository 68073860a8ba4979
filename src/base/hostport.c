/* "host:port" and "[ipv6]:port" splitting (hostport.h). Pure. */
#include "base/hostport.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "felix/error.h"

static int refuse(const char **pwhy, const char *why)
{
    if (pwhy)
        *pwhy = why;
    return FX_ECONFIG;
}

/* The whole of |s|: 1 to 5 digits, at most 65535. Returns it or -1. */
static int parse_port(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 5 || strspn(s, "0123456789") != n)
        return -1;
    int port = 0;
    for (; *s; s++)
        port = port * 10 + (*s - '0');
    return port <= 65535 ? port : -1;
}

int fx_hostport_split(const char *s, fx_hostport *out, const char **pwhy)
{
    static const char expected[] = "expected host:port or [ipv6]:port";
    if (s == NULL)
        return refuse(pwhy, expected);
    const char *hs = s, *he, *colon;
    bool bracketed = s[0] == '[';
    if (bracketed) {
        hs = s + 1;
        he = strchr(hs, ']');
        if (he == NULL || he[1] != ':')
            return refuse(pwhy, expected);
        colon = he + 1;
    } else {
        colon = strrchr(s, ':');
        he = colon;
        if (colon != NULL && memchr(s, ':', (size_t)(colon - s)) != NULL)
            return refuse(pwhy, "IPv6 addresses go in [ ] (e.g. [::1]:8080)");
    }
    if (colon == NULL || he == hs)
        return refuse(pwhy, expected);
    size_t n = (size_t)(he - hs);
    if (n >= sizeof(out->host))
        return refuse(pwhy, "host too long");
    int port = parse_port(colon + 1);
    if (port < 0)
        return refuse(pwhy, "port must be a number from 0 to 65535");
    memcpy(out->host, hs, n);
    out->host[n] = '\0';
    struct in6_addr a6;
    if (bracketed && inet_pton(AF_INET6, out->host, &a6) != 1)
        return refuse(pwhy, "not an IPv6 address inside [ ]");
    out->port = (uint16_t)port;
    out->bracketed = bracketed;
    return 0;
}

int fx_hostport_format(const fx_hostport *hp, uint16_t port, char *buf, size_t cap)
{
    return snprintf(buf, cap, hp->bracketed ? "[%s]:%u" : "%s:%u", hp->host, (unsigned)port);
}
