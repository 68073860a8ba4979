/* fx_hostport: the one parser of "host:port" and "[ipv6]:port" strings
 * (bind addresses in the configuration and the admin endpoint, the client's
 * server option). It splits and checks the syntax only: no name is
 * resolved. Pure functions, any thread. */
#ifndef FX_HOSTPORT_H
#define FX_HOSTPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FX_HOSTPORT_HOST_MAX 256 /* host bytes, NUL included */

typedef struct fx_hostport {
    char host[FX_HOSTPORT_HOST_MAX]; /* without the brackets */
    uint16_t port;
    bool bracketed; /* written "[v6]:port": |host| is an IPv6 literal */
} fx_hostport;

/* Splits |s| into |*out|: "host:port" (a host with no ':') or
 * "[ipv6]:port" (the address inside checked). The port is 1 to 5 decimal
 * digits, 0 to 65535. Returns 0, or FX_ECONFIG with |*pwhy| (may be NULL)
 * set to a static sentence: "expected host:port or [ipv6]:port", "IPv6
 * addresses go in [ ] (e.g. [::1]:8080)", "not an IPv6 address inside [ ]",
 * "host too long" or "port must be a number from 0 to 65535". |s| NULL is
 * refused as the first. */
int fx_hostport_split(const char *s, fx_hostport *out, const char **pwhy);

/* Writes |hp| back as "host:port" or "[v6]:port" with |port| into |buf|.
 * Returns snprintf's result. */
int fx_hostport_format(const fx_hostport *hp, uint16_t port, char *buf, size_t cap);

#endif
