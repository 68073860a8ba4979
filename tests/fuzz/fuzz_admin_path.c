/* libFuzzer target for the stream admin API's path parsing
 * (src/server/admin_routes.c, compiled into this file to reach its static
 * split_path): the input is a request path. Each of the broker's routes
 * that is a prefix ("/v1/streams/") hands the rest to the parser, as the
 * endpoint's dispatcher does; the input alone is parsed as a rest too. An
 * accepted rest is exactly three '/'-free names that join back to it, and
 * never overflows the parser's buffer. Any broken promise aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/server/admin_routes.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void parse_rest(const char *rest)
{
    char buf[PATH_CAP];
    const char *names[3] = {NULL, NULL, NULL};
    if (!split_path(rest, buf, sizeof(buf), names))
        return;
    CHECK(strlen(rest) < sizeof(buf));
    char joined[PATH_CAP + 4];
    for (int i = 0; i < 3; i++) {
        CHECK(names[i] >= buf && names[i] < buf + sizeof(buf));
        CHECK(strchr(names[i], '/') == NULL);
    }
    snprintf(joined, sizeof(joined), "%s/%s/%s", names[0], names[1], names[2]);
    CHECK(strcmp(joined, rest) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *path = malloc(size + 1);
    CHECK(path != NULL);
    memcpy(path, data, size);
    path[size] = '\0';
    fx_admin_route routes[FX_ADMIN_BROKER_NROUTES];
    fx_admin_broker_routes(NULL, routes);
    for (size_t i = 0; i < FX_ADMIN_BROKER_NROUTES; i++) {
        size_t n = strlen(routes[i].path);
        if (n > 0 && routes[i].path[n - 1] == '/' && strncmp(path, routes[i].path, n) == 0)
            parse_rest(path + n);
    }
    parse_rest(path);
    free(path);
    return 0;
}
