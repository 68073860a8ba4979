/* acked_publisher: publishes COUNT messages to NS/STREAM, each answered by
 * the broker (FX_ACK_PER_MESSAGE: fx_publish returns the broker's verdict),
 * then the same again as one batch frame with one ack for the whole batch.
 * A refusal (stream not found, forbidden, overloaded) is reported with the
 * broker's message.
 *
 *   cc acked_publisher.c -o acked_publisher $(pkg-config --cflags --libs felix)
 *   FELIX_SERVER=127.0.0.1:5000 FELIX_PIN=<sha256> ./acked_publisher default demo 5
 *
 * Connection variables as in publisher.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <felix/felix.h>

#define MAX_BATCH 64

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

static void report(const char *what, int rv)
{
    char detail[512];
    fx_client_last_error(NULL, detail, sizeof(detail));
    fprintf(stderr, "acked_publisher: %s: %s (%s)%s%s\n", what, fx_strerror(rv), fx_errname(rv),
            detail[0] ? ": " : "", detail);
}

static int connect_from_env(fx_client **pc)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    int rv = fx_client_opts_from_env(&o);
    if (rv != 0)
        return rv;
    o.server = env_or("FELIX_SERVER", o.server);
    o.server_name = env_or("FELIX_SERVER_NAME", o.server_name);
    o.pin_sha256 = env_or("FELIX_PIN", NULL);
    o.ca_file = env_or("FELIX_CA", NULL);
    o.insecure = strcmp(env_or("FELIX_INSECURE", "0"), "1") == 0;
    o.tenant = env_or("FELIX_TENANT", o.tenant);
    o.token = env_or("FELIX_TOKEN", "");
    return fx_client_connect(pc, &o);
}

int main(int argc, char **argv)
{
    const char *ns = argc > 1 ? argv[1] : "default";
    const char *stream = argc > 2 ? argv[2] : "demo";
    long count = argc > 3 ? strtol(argv[3], NULL, 10) : 5;
    if (count < 1 || count > MAX_BATCH) {
        fprintf(stderr, "acked_publisher: COUNT must be 1..%d\n", MAX_BATCH);
        return 2;
    }
    fx_client *c = NULL;
    int rv = connect_from_env(&c);
    if (rv != 0) {
        report("connect", rv);
        return 1;
    }
    /* One round trip each: the broker has stored the message when this returns 0. */
    for (long i = 0; i < count && rv == 0; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof(msg), "acked %ld", i);
        rv = fx_publish(c, ns, stream, msg, (size_t)n, FX_ACK_PER_MESSAGE);
        if (rv != 0)
            report("publish", rv);
    }
    if (rv == 0)
        printf("%ld message(s) acked one by one\n", count);

    /* One frame, one ack: the payloads are copied, order is kept. */
    char bufs[MAX_BATCH][32];
    fx_iov iov[MAX_BATCH];
    for (long i = 0; i < count && rv == 0; i++) {
        int n = snprintf(bufs[i], sizeof(bufs[i]), "batched %ld", i);
        iov[i] = (fx_iov){.data = bufs[i], .len = (size_t)n};
    }
    if (rv == 0) {
        rv = fx_publish_batch(c, ns, stream, iov, (size_t)count, FX_ACK_PER_BATCH);
        if (rv != 0)
            report("publish batch", rv);
        else
            printf("batch of %ld message(s) acked\n", count);
    }
    int crv = fx_client_close(c, 5000);
    if (crv != 0)
        report("close", crv);
    return rv == 0 && crv == 0 ? 0 : 1;
}
