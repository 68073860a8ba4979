/* Placement, asserted: with core_shards 2 (two pinned workers) a stream's
 * publish jobs, its fanout and its subscribers' feeders all run on the loop
 * of worker handle_id % 2, and the same streams and connections land on the
 * same loops on every run. Real clients (libfelix) against an in-process
 * broker on 127.0.0.1 port 0, pinned by fingerprint.
 *
 * The rules asserted here, as implemented:
 * - Streams get dense ids in creation order (1, 2, ...); stream s runs on
 *   worker handle_id(s) % workers (fx_placement_worker_for), for its publish
 *   jobs, its fanout and its feeders alike.
 * - With io_threads 0 or 1 the broker has one server endpoint, placed by
 *   fx_placement_endpoint (server endpoint 0: io loop 0 when io_threads is 1,
 *   else worker 0), and every connection lives on its endpoint's loop. So a given set of
 *   connections, accepted in a given order (ids 1, 2, ...), lands on the
 *   same loop every run, whatever the kernel does with client ports.
 * Which thread ran the work is measured, not inferred: each loop thread
 * counts its publish jobs, fanout enqueues and feeder dequeues in its own
 * metrics shard, and the differences over one stream's publishes name the
 * loop. Pinning is not placement: if the kernel refuses the CPU affinity the
 * placement is still asserted and a note is printed. */
/* fx-test-libs: fx_broker fx_client fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/placement.h"
#include "broker/test_hooks.h"
#include "felix/error.h"
#include "integ/fixture.h"

#define TENANT "t1"
#define WORKERS 2
#define NSTREAMS 4
#define NSUBCLIENTS 2 /* each subscribes to every stream: 2 subscribers per stream */
/* One connection per client: a publish pool of 1 (the event connection is
 * the first publish connection), so none opens lazily at a moment that
 * depends on which stream hashed where. */
#define NCONNS (1 + NSUBCLIENTS)
#define MSGS 3 /* acked publishes per stream */

static const char *const stream_names[NSTREAMS] = {"orders", "fills", "quotes", "audit"};

/* What one run placed where. */
typedef struct placement {
    uint64_t handle_id[NSTREAMS];
    int publish_worker[NSTREAMS]; /* the loop whose thread ran the publish jobs */
    int fanout_worker[NSTREAMS];  /* ... whose thread enqueued to the subscribers */
    int feeder_worker[NSTREAMS];  /* ... whose thread ran the feeders (dequeues) */
    int owner_worker[NSTREAMS];   /* the worker holding the subscriptions and ring */
    fx_broker_test_conn_where conns[NCONNS];
    bool pin_refused;
} placement;

/* ---- broker and clients ------------------------------------------------------------ */

typedef struct env {
    fx_broker *b;
    char dir[64];
    char server[32];
    fx_client *pub;
    fx_client *subc[NSUBCLIENTS];
    fx_subscription *subs[NSUBCLIENTS][NSTREAMS];
} env;

static void env_start(env *e, uint32_t io_threads)
{
    fix_state_dir_new(e->dir, sizeof(e->dir), "place");
    fx_broker_opts o;
    fx_broker_opts_default(&o);
    o.quic.state_dir = e->dir;
    o.workers = WORKERS;  /* core_shards: 2 ... */
    o.pin_workers = true; /* ... pinned, as the daemon sets it */
    o.io_threads = io_threads;
    fix_broker_start(&e->b, &o, e->server, sizeof(e->server));
    /* Created in a fixed order, so the ids are 1..NSTREAMS every run. */
    for (int i = 0; i < NSTREAMS; i++)
        assert_int_equal(fx_broker_create_stream(e->b, TENANT, NS, stream_names[i], NULL, NULL), 0);
}

static fx_client *connect_client(env *e)
{
    fx_client_opts o;
    fix_client_opts(&o, e->b, e->server, TENANT, "any-token");
    o.publish_conn_pool = 1;
    o.event_conn_pool = 1;
    return fix_connect(&o);
}

/* Connects in a fixed order (each connect completes before the next), so
 * connection ids follow it: the publisher 1, the subscriber clients 2, 3. */
static void env_connect(env *e)
{
    e->pub = connect_client(e);
    for (int c = 0; c < NSUBCLIENTS; c++) {
        e->subc[c] = connect_client(e);
        for (int i = 0; i < NSTREAMS; i++) {
            fx_start st = {.kind = FX_START_LATEST};
            e->subs[c][i] = fix_subscribe(e->subc[c], stream_names[i], &st);
        }
    }
}

static void env_stop(env *e)
{
    for (int c = 0; c < NSUBCLIENTS; c++) {
        for (int i = 0; i < NSTREAMS; i++)
            fx_unsubscribe(e->subs[c][i]);
        fix_close(e->subc[c]);
    }
    fix_close(e->pub);
    fx_broker_free(e->b);
    fix_rm_dir(e->dir);
}

/* ---- measuring where work ran ---------------------------------------------------------- */

static void activity_all(env *e, fx_broker_test_worker_activity a[WORKERS])
{
    for (uint32_t w = 0; w < WORKERS; w++)
        assert_int_equal(fx_broker_test_worker_activity_get(e->b, w, &a[w]), 0);
}

/* The one worker whose counter moved by exactly |want| while every other
 * worker's stayed put; fails the test otherwise. */
static int the_worker(const uint64_t before[WORKERS], const uint64_t after[WORKERS], uint64_t want,
                      const char *what, const char *stream)
{
    int found = -1;
    for (int w = 0; w < WORKERS; w++) {
        uint64_t d = after[w] - before[w];
        if (d == 0)
            continue;
        if (d != want || found != -1)
            fail_msg("%s of %s: worker %d moved by %llu (want one worker moving by %llu)", what,
                     stream, w, (unsigned long long)d, (unsigned long long)want);
        found = w;
    }
    if (found == -1)
        fail_msg("%s of %s: no worker ran it", what, stream);
    return found;
}

/* Publishes MSGS acked messages to stream |i| and waits for every
 * subscriber to take them. */
static void publish_and_take(env *e, int i)
{
    for (int m = 0; m < MSGS; m++) {
        char payload[32];
        int n = snprintf(payload, sizeof(payload), "%s-%d", stream_names[i], m);
        int rv = fx_publish(e->pub, NS, stream_names[i], payload, (size_t)n, FX_ACK_PER_MESSAGE);
        if (rv != 0)
            fail_msg("publish %s: %s", stream_names[i], fx_errname(rv));
    }
    for (int c = 0; c < NSUBCLIENTS; c++) {
        for (int m = 0; m < MSGS; m++) {
            fx_event ev;
            int rv = fx_subscription_next(e->subs[c][i], &ev, HANG_MS);
            if (rv != 0)
                fail_msg("subscriber %d of %s: %s", c, stream_names[i], fx_errname(rv));
            assert_int_equal(ev.offset, (uint64_t)m);
        }
    }
}

/* Publishes to each stream in turn and records which worker's thread ran
 * its publish jobs, fanout and feeders. Streams are measured one at a time,
 * so a counter difference belongs to that stream alone. */
static void measure_streams(env *e, placement *p)
{
    for (int i = 0; i < NSTREAMS; i++) {
        fx_broker_test_worker_activity a0[WORKERS], a1[WORKERS];
        activity_all(e, a0);
        publish_and_take(e, i);
        activity_all(e, a1);
        uint64_t pub0[WORKERS], pub1[WORKERS], enq0[WORKERS], enq1[WORKERS];
        uint64_t deq0[WORKERS], deq1[WORKERS];
        for (int w = 0; w < WORKERS; w++) {
            pub0[w] = a0[w].publish_ok;
            pub1[w] = a1[w].publish_ok;
            enq0[w] = a0[w].enqueued;
            enq1[w] = a1[w].enqueued;
            deq0[w] = a0[w].dequeued;
            deq1[w] = a1[w].dequeued;
            p->pin_refused = p->pin_refused || a1[w].pin_error != 0;
        }
        /* One job and one envelope per subscriber per acked publish. */
        const char *s = stream_names[i];
        p->publish_worker[i] = the_worker(pub0, pub1, MSGS, "publish jobs", s);
        p->fanout_worker[i] = the_worker(enq0, enq1, MSGS * NSUBCLIENTS, "fanout", s);
        p->feeder_worker[i] = the_worker(deq0, deq1, MSGS * NSUBCLIENTS, "feeders", s);

        fx_broker_test_stream_where where;
        assert_int_equal(fx_broker_test_stream_placement(e->b, TENANT, NS, s, &where), 0);
        p->handle_id[i] = where.handle_id;
        p->owner_worker[i] = where.owner_worker;
        assert_int_equal(where.subs, NSUBCLIENTS);
        assert_int_equal(where.subs_fed, NSUBCLIENTS);
        assert_int_equal(where.appended, MSGS);
        assert_true(where.in_slot);
    }
}

/* ---- the scenario ------------------------------------------------------------------------ */

static void run_scenario(uint32_t io_threads, placement *p)
{
    memset(p, 0, sizeof(*p));
    env e = {0};
    env_start(&e, io_threads);
    env_connect(&e);
    measure_streams(&e, p);
    int n = fx_broker_test_conn_loops(e.b, p->conns, NCONNS);
    assert_int_equal(n, NCONNS);
    env_stop(&e);
    if (p->pin_refused)
        print_message("note: the kernel refused to pin the workers; placement is asserted "
                      "anyway (pinning is not placement)\n");
}

/* The per-run rules: one loop per stream, the one the placement function
 * names; every connection on the endpoint's loop. */
static void assert_rules(const placement *p, uint32_t io_threads)
{
    for (int i = 0; i < NSTREAMS; i++) {
        /* Creation order gives the ids. */
        assert_int_equal(p->handle_id[i], (uint64_t)(i + 1));
        int want = (int)fx_placement_worker_for(p->handle_id[i], WORKERS);
        assert_int_equal(want, (int)(p->handle_id[i] % WORKERS));
        assert_int_equal(p->publish_worker[i], want);
        assert_int_equal(p->fanout_worker[i], want);
        assert_int_equal(p->feeder_worker[i], want);
        assert_int_equal(p->owner_worker[i], want);
    }
    fx_loop_slot ep;
    assert_int_equal(fx_placement_endpoint(FX_ENDPOINT_SERVER, 0, io_threads, WORKERS, &ep), 0);
    for (int c = 0; c < NCONNS; c++) {
        assert_int_equal(p->conns[c].conn_id, (uint64_t)(c + 1));
        assert_int_equal(p->conns[c].loop.kind, ep.kind);
        assert_int_equal(p->conns[c].loop.index, ep.index);
    }
}

static void assert_same(const placement *a, const placement *b)
{
    for (int i = 0; i < NSTREAMS; i++) {
        assert_int_equal(a->handle_id[i], b->handle_id[i]);
        assert_int_equal(a->publish_worker[i], b->publish_worker[i]);
        assert_int_equal(a->feeder_worker[i], b->feeder_worker[i]);
    }
    for (int c = 0; c < NCONNS; c++) {
        assert_int_equal(a->conns[c].conn_id, b->conns[c].conn_id);
        assert_int_equal(a->conns[c].loop.kind, b->conns[c].loop.kind);
        assert_int_equal(a->conns[c].loop.index, b->conns[c].loop.index);
    }
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void test_core_shards_run_publish_and_feeders_on_the_stream_worker(void **state)
{
    (void)state;
    placement p;
    run_scenario(0, &p);
    assert_rules(&p, 0);
    /* io_threads 0 (shared mode): connections on worker 0, and the streams
     * are spread over both workers, not piled on the endpoint's. */
    assert_int_equal(p.conns[0].loop.kind, FX_LOOP_KIND_WORKER);
    assert_int_equal(p.conns[0].loop.index, 0);
    bool used[WORKERS] = {false};
    for (int i = 0; i < NSTREAMS; i++)
        used[p.publish_worker[i]] = true;
    for (int w = 0; w < WORKERS; w++)
        assert_true(used[w]);
}

static void test_core_shards_place_streams_and_connections_the_same_every_run(void **state)
{
    (void)state;
    placement first, second;
    run_scenario(0, &first);
    run_scenario(0, &second);
    assert_rules(&first, 0);
    assert_rules(&second, 0);
    assert_same(&first, &second);
}

static void test_io_thread_hosts_connections_while_workers_own_streams(void **state)
{
    (void)state;
    placement p;
    run_scenario(1, &p);
    assert_rules(&p, 1);
    for (int c = 0; c < NCONNS; c++) {
        assert_int_equal(p.conns[c].loop.kind, FX_LOOP_KIND_IO);
        assert_int_equal(p.conns[c].loop.index, 0);
    }
}

/* io_threads 3: server endpoints on io loops 0 and 1 as one server group
 * (the last io loop is kept for client endpoints), so connections spread over
 * both by the transport's connection-ID rule; the client picks its first
 * connection ID at random, so which member a connection lands on is not
 * asserted, only that both are used (all 16 on one member: 2^-15) and that
 * nothing lands elsewhere. Pub/sub, the subscription listing (gathered from
 * every member) and a broker-side cut work across members. */
#define GROUP_CONNS 16

static void test_io_threads_spread_connections_over_a_server_group(void **state)
{
    (void)state;
    env e = {0};
    env_start(&e, 3);
    fx_client *c[GROUP_CONNS];
    fx_subscription *sub[GROUP_CONNS];
    for (int i = 0; i < GROUP_CONNS; i++) {
        c[i] = connect_client(&e);
        fx_start st = {.kind = FX_START_LATEST};
        sub[i] = fix_subscribe(c[i], stream_names[0], &st);
    }
    for (int m = 0; m < MSGS; m++)
        assert_int_equal(fx_publish(c[0], NS, stream_names[0], "x", 1, FX_ACK_PER_MESSAGE), 0);
    for (int i = 0; i < GROUP_CONNS; i++) {
        for (int m = 0; m < MSGS; m++) {
            fx_event ev;
            assert_int_equal(fx_subscription_next(sub[i], &ev, HANG_MS), 0);
            assert_int_equal(ev.offset, (uint64_t)m);
        }
    }
    fx_broker_test_conn_where w[GROUP_CONNS];
    assert_int_equal(fx_broker_test_conn_loops(e.b, w, GROUP_CONNS), GROUP_CONNS);
    int on[2] = {0, 0};
    for (int i = 0; i < GROUP_CONNS; i++) {
        assert_int_equal(w[i].loop.kind, FX_LOOP_KIND_IO);
        assert_true(w[i].loop.index <= 1);
        on[w[i].loop.index]++;
    }
    assert_true(on[0] > 0 && on[1] > 0);
    char *json = NULL;
    assert_int_equal(fx_broker_list_subscriptions(e.b, 5 * FX_NS_PER_S, &json), 0);
    size_t listed = 0;
    for (const char *p = json; (p = strstr(p, "\"connection_id\"")) != NULL; p++)
        listed++;
    free(json);
    assert_int_equal(listed, GROUP_CONNS);
    assert_int_equal(fx_broker_test_cut_connections(e.b, true), GROUP_CONNS);
    for (int i = 0; i < GROUP_CONNS; i++) {
        fx_unsubscribe(sub[i]);
        fx_client_close(c[i], HANG_MS); /* cut by the broker: the close may report it */
    }
    fx_broker_free(e.b);
    fix_rm_dir(e.dir);
}

/* ---- every thread ---------------------------------------------------------------------- */

static pthread_t seen_threads[16];
static atomic_int seen_n;

static void note_thread(void)
{
    int i = atomic_fetch_add(&seen_n, 1);
    if (i < 16)
        seen_threads[i] = pthread_self();
}

/* fx_broker_run_on_each_loop runs its call once on each broker thread (here
 * 2 workers and 2 io loops), never on the caller's, and refuses once the
 * broker has stopped. */
static void test_run_on_each_loop_reaches_every_broker_thread_once(void **state)
{
    (void)state;
    static const fx_broker_loop_call call = {note_thread};
    env e;
    fix_state_dir_new(e.dir, sizeof(e.dir), "place");
    fx_broker_opts o;
    fx_broker_opts_default(&o);
    o.quic.state_dir = e.dir;
    o.workers = WORKERS;
    o.io_threads = 2;
    fix_broker_start(&e.b, &o, e.server, sizeof(e.server));
    atomic_store(&seen_n, 0);
    assert_int_equal(fx_broker_run_on_each_loop(e.b, &call, 5 * FX_NS_PER_S), 0);
    assert_int_equal(atomic_load(&seen_n), WORKERS + 2);
    for (int i = 0; i < WORKERS + 2; i++) {
        assert_false(pthread_equal(seen_threads[i], pthread_self()));
        for (int k = 0; k < i; k++)
            assert_false(pthread_equal(seen_threads[i], seen_threads[k]));
    }
    fx_broker_stop(e.b);
    assert_int_equal(fx_broker_run_on_each_loop(e.b, &call, FX_NS_PER_S), FX_ESHUTDOWN);
    fx_broker_free(e.b);
    fix_rm_dir(e.dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_core_shards_run_publish_and_feeders_on_the_stream_worker),
    cmocka_unit_test(test_core_shards_place_streams_and_connections_the_same_every_run),
    cmocka_unit_test(test_io_thread_hosts_connections_while_workers_own_streams),
    cmocka_unit_test(test_io_threads_spread_connections_over_a_server_group),
    cmocka_unit_test(test_run_on_each_loop_reaches_every_broker_thread_once),
};
FX_TEST_MAIN(tests)
