/* A felix-broker run as a child process (proc.h) and reached through
 * libfelix: the address and certificate pin it prints at start, and a client
 * connected to it. Shared by the kill -9 tests of durable streams and caches.
 * Single-threaded test code. */
#ifndef FX_TEST_INTEG_PROC_BROKER_H
#define FX_TEST_INTEG_PROC_BROKER_H

#include "felix/felix.h"
#include "integ/proc.h"

/* Waits until the broker |pid| wrote its "export FELIX_SERVER=... FELIX_PIN=..."
 * line to the file |out| (its text left in |text|) and reads the address into
 * |server| (64 bytes) and the pin into |pin| (80 bytes). */
static inline void proc_broker_address(const char *out, char *text, size_t cap, pid_t pid,
                                       char server[64], char pin[80])
{
    proc_wait_text(out, "export FELIX_SERVER=", text, cap, pid);
    const char *line = strstr(text, "export FELIX_SERVER=");
    assert_int_equal(sscanf(line, "export FELIX_SERVER=%63s FELIX_PIN=%79s", server, pin), 2);
}

/* A client of tenant t1 connected to |server| with |pin|, without
 * reconnects, its subscriptions' queues under |policy|. */
static inline fx_client *proc_broker_connect(const char *server, const char *pin, fx_policy policy)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = server;
    o.server_name = "localhost";
    o.pin_sha256 = pin;
    o.tenant = "t1";
    o.token = "any-token";
    o.connect_timeout_ms = PROC_HANG_MS;
    o.reconnect = false;
    o.sub_queue_policy = policy;
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    if (rv != 0)
        fail_msg("connect to %s: %s", server, fx_strerror(rv));
    return c;
}

#endif
