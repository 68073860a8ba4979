/* Shared fixture of the integration tests (tests/integ): an in-process broker
 * (fx_broker, its own loop threads) on 127.0.0.1 port 0 with a generated
 * certificate in a temp state dir, libfelix clients pinned to the broker's
 * certificate fingerprint, temp-dir cleanup, and wait-until helpers. Every
 * function runs on the test's main thread unless its comment says otherwise
 * and fails the current cmocka test on error (nothing is returned to check).
 * Timeouts are hang guards only: nothing here measures speed.
 *
 * Header-only (static inline), included by one test file each. A test that
 * wants a different hang guard or namespace defines HANG_MS or NS before
 * including this header. */
#ifndef FX_TESTS_INTEG_FIXTURE_H
#define FX_TESTS_INTEG_FIXTURE_H

#include <dirent.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fx_test.h"

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "broker/broker.h"
#include "felix/felix.h"
#include "storage/syncpol.h"

/* Hang guard (milliseconds) of connects, closes, reads and waits. */
#ifndef HANG_MS
#define HANG_MS 15000
#endif

/* The namespace the tests publish in. */
#ifndef NS
#define NS "default"
#endif

/* Difference of counter |field| between metrics snapshots |a| and |b|. */
#ifndef DELTA
#define DELTA(a, b, field) ((int64_t)((b).c.field - (a).c.field))
#endif

/* ---- time ------------------------------------------------------------------------ */

static inline void sleep_ms(unsigned ms)
{
    usleep(ms * 1000u);
}

/* The fx_now_ns() instant |ms| milliseconds from now. */
static inline uint64_t fix_deadline_ns(unsigned ms)
{
    return fx_now_ns() + (uint64_t)ms * FX_NS_PER_MS;
}

/* ---- temp state dir ----------------------------------------------------------------- */

/* Creates a fresh directory /tmp/fx<tag>XXXXXX into |dir| (|cap| bytes, at
 * least 64) and quiets the library log to errors, as every fixture starts.
 * Remove it with fix_rm_dir. */
static inline void fix_state_dir_new(char *dir, size_t cap, const char *tag)
{
    fx_log_set_level(FX_LOG_ERROR);
    int n = snprintf(dir, cap, "/tmp/fx%sXXXXXX", tag);
    assert_true(n > 0 && (size_t)n < cap);
    assert_non_null(mkdtemp(dir));
}

static inline int fix_rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes |dir| and everything under it (a daemon's state directory holds
 * subdirectories); symbolic links are removed, never followed. A missing
 * directory is not an error. */
static inline void fix_rm_dir(const char *dir)
{
    nftw(dir, fix_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- broker ------------------------------------------------------------------------- */

/* Fills |bo| with the defaults, the state dir |state_dir| (borrowed: it must
 * outlive the broker) and 1 MiB UDP socket buffers. */
static inline void fix_broker_opts(fx_broker_opts *bo, const char *state_dir)
{
    fx_broker_opts_default(bo);
    bo->quic.state_dir = state_dir;
    bo->quic.udp_send_buffer = bo->quic.udp_recv_buffer = 1 << 20;
}

/* Lossless mode: Block at checkpoints 5 and 6, Backpressure at 4. */
static inline void fix_lossless(fx_broker_opts *bo)
{
    bo->subscriber_queue_policy = FX_QUEUE_BLOCK;
    bo->subscriber_lane_queue_policy = FX_QUEUE_BLOCK;
    bo->pub_ingress_wait = true;
}

/* Creates and starts a broker with |bo| into |*b| and writes its address
 * "127.0.0.1:<port>" into |server| (|cap| bytes). Free with fx_broker_free. */
static inline void fix_broker_start(fx_broker **b, const fx_broker_opts *bo, char *server,
                                    size_t cap)
{
    assert_int_equal(fx_broker_new(b, bo), 0);
    assert_int_equal(fx_broker_start(*b), 0);
    snprintf(server, cap, "127.0.0.1:%u", (unsigned)fx_broker_port(*b));
}

/* The common environment: one broker and its state dir. Set bo between
 * fix_env_init and fix_env_start. */
typedef struct fix_env {
    fx_broker *b;
    fx_broker_opts bo;
    char dir[64];
    char server[32];
} fix_env;

/* Makes the state dir (/tmp/fx<tag>XXXXXX) and fills bo with fix_broker_opts
 * and no event batching delay. */
static inline void fix_env_init(fix_env *e, const char *tag)
{
    fix_state_dir_new(e->dir, sizeof(e->dir), tag);
    fix_broker_opts(&e->bo, e->dir);
    e->bo.event_batch_max_delay_ns = 0;
}

/* Broker options |bo| for durable streams under |root|: every stream
 * durable, on_commit, 1 MiB segments, no preallocation. */
static inline void fix_durable_opts(fx_broker_opts *bo, const char *root)
{
    bo->durable.dir = root;
    bo->durable.durable_default = true;
    bo->durable.fsync_mode = FX_FSYNC_ON_COMMIT;
    bo->durable.segment_bytes = 1 << 20;
    bo->durable.preallocate = false;
}

static inline void fix_env_start(fix_env *e)
{
    fix_broker_start(&e->b, &e->bo, e->server, sizeof(e->server));
}

/* Frees the broker (if started) and removes the state dir. */
static inline void fix_env_deinit(fix_env *e)
{
    fx_broker_free(e->b);
    e->b = NULL;
    fix_rm_dir(e->dir);
}

/* ---- clients ------------------------------------------------------------------------ */

/* Fills |o| for a client of broker |b| at |server| (both borrowed), pinned
 * to its fingerprint (server name "localhost"), as |tenant| with |token|,
 * connect timeout HANG_MS. */
static inline void fix_client_opts(fx_client_opts *o, fx_broker *b, const char *server,
                                   const char *tenant, const char *token)
{
    fx_client_opts_init(o);
    o->server = server;
    o->server_name = "localhost";
    o->pin_sha256 = fx_broker_fingerprint(b);
    o->tenant = tenant;
    o->token = token;
    o->connect_timeout_ms = HANG_MS;
}

/* Fills |o| for a client of a felix-broker process at |server| whose
 * certificate has SHA-256 |pin| (both borrowed; server name "localhost"),
 * as tenant t1 (auth none takes any token), connect timeout HANG_MS, no
 * reconnection (a killed daemon ends the client), blocking subscription
 * queues (nothing dropped on the client side). */
static inline void fix_daemon_client_opts(fx_client_opts *o, const char *server, const char *pin)
{
    fx_client_opts_init(o);
    o->server = server;
    o->server_name = "localhost";
    o->pin_sha256 = pin;
    o->tenant = "t1";
    o->token = "any-token";
    o->connect_timeout_ms = HANG_MS;
    o->reconnect = false;
    o->sub_queue_policy = FX_POLICY_BLOCK;
}

/* Connects with |o|; fails the test with the library's error text. The
 * caller owns the client (fx_client_close). */
static inline fx_client *fix_connect(const fx_client_opts *o)
{
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, o);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("connect %s: %s (%s)", o->server, fx_errname(rv), msg);
    }
    return c;
}

static inline void fix_close(fx_client *c)
{
    assert_int_equal(fx_client_close(c, HANG_MS), 0);
}

/* Subscribes |c| to NS/|stream| from |st| (NULL: latest); fails the test
 * with the library's error text. The caller owns the subscription. */
static inline fx_subscription *fix_subscribe(fx_client *c, const char *stream, const fx_start *st)
{
    fx_subscription *s = NULL;
    int rv = fx_subscribe(&s, c, NS, stream, st);
    if (rv != 0) {
        char msg[256];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fail_msg("subscribe %s: %s (%s)", stream, fx_errname(rv), msg);
    }
    return s;
}

/* ---- waits ------------------------------------------------------------------------ */

/* Waits until the broker's gauges read |subs| subscriptions and (unless
 * |conns| is negative) |conns| subscriber connections; fails after HANG_MS. */
static inline void fix_wait_sub_gauges(int64_t subs, int64_t conns)
{
    uint64_t deadline = fix_deadline_ns(HANG_MS);
    fx_metrics_snapshot m;
    for (;;) {
        fx_metrics_snapshot_take(&m);
        if (m.g.sub_subscriptions == subs && (conns < 0 || m.g.sub_active_connections == conns))
            return;
        if (fx_now_ns() > deadline)
            fail_msg("gauges: %lld subscriptions, %lld connections; want %lld, %lld",
                     (long long)m.g.sub_subscriptions, (long long)m.g.sub_active_connections,
                     (long long)subs, (long long)conns);
        sleep_ms(5);
    }
}

#endif
