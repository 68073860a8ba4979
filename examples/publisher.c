/* publisher: publishes COUNT messages to NS/STREAM without acks, then closes
 * the client, which sends everything still queued before it returns.
 *
 *   cc publisher.c -o publisher $(pkg-config --cflags --libs felix)
 *   FELIX_SERVER=127.0.0.1:5000 FELIX_PIN=<sha256> ./publisher default demo 10
 *
 * The connection comes from the environment, as for the felix CLI:
 * FELIX_SERVER, FELIX_SERVER_NAME, FELIX_PIN or FELIX_CA (or FELIX_INSECURE=1
 * for a development broker), FELIX_TENANT, FELIX_TOKEN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <felix/felix.h>

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

/* Prints what failed with libfelix's text for it (the broker's message, the
 * TLS reason, ...). */
static void report(const char *what, int rv)
{
    char detail[512];
    fx_client_last_error(NULL, detail, sizeof(detail));
    fprintf(stderr, "publisher: %s: %s (%s)%s%s\n", what, fx_strerror(rv), fx_errname(rv),
            detail[0] ? ": " : "", detail);
}

int main(int argc, char **argv)
{
    const char *ns = argc > 1 ? argv[1] : "default";
    const char *stream = argc > 2 ? argv[2] : "demo";
    long count = argc > 3 ? strtol(argv[3], NULL, 10) : 10;

    fx_client_opts o;
    fx_client_opts_init(&o);
    int rv = fx_client_opts_from_env(&o); /* FELIX_PUB_CONN_POOL and the other tuning variables */
    if (rv != 0) {
        report("environment", rv);
        return 1;
    }
    o.server = env_or("FELIX_SERVER", o.server);
    o.server_name = env_or("FELIX_SERVER_NAME", o.server_name);
    o.pin_sha256 = env_or("FELIX_PIN", NULL);
    o.ca_file = env_or("FELIX_CA", NULL);
    o.insecure = strcmp(env_or("FELIX_INSECURE", "0"), "1") == 0;
    o.tenant = env_or("FELIX_TENANT", o.tenant);
    o.token = env_or("FELIX_TOKEN", "");

    fx_client *c = NULL;
    rv = fx_client_connect(&c, &o);
    if (rv != 0) {
        report("connect", rv);
        return 1;
    }
    long sent = 0;
    for (long i = 0; i < count; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof(msg), "message %ld", i);
        /* Returns once the client admitted it (byte budget and queue); the
         * client's loop sends it. */
        rv = fx_publish(c, ns, stream, msg, (size_t)n, FX_ACK_NONE);
        if (rv != 0) {
            report("publish", rv);
            break;
        }
        sent++;
    }
    /* Sends what is queued, waits for the broker to take it, then frees c. */
    int crv = fx_client_close(c, 5000);
    if (crv != 0)
        report("close", crv);
    printf("published %ld message(s) to %s/%s\n", sent, ns, stream);
    return rv == 0 && crv == 0 ? 0 : 1;
}
