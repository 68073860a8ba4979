/* fx_cluster in this process (two nodes, no broker) on a real etcd
 * (scripts/etcd.sh): many threads asking for routes at once while the
 * cluster threads claim (each stream ends owned by exactly one node, which
 * both name; one winning claim per stream), and a lease revoked behind a
 * node's back (it releases what it owned and registers again), and a move
 * to a node at its bounded-load cap (placement, not the destination, takes
 * it). Also run under ThreadSanitizer: the routes are read by other threads
 * than the cluster thread that writes the tables. */
/* fx-test-libs: fx_cluster fx_client fx_quic fx_wire fx_base */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/loop.h"
#include "cluster/cluster.h"
#include "fx_test.h"

#define NSTREAMS 120
#define NTHREADS 4

typedef struct env {
    char dir[64], script[512], url[128];
    fx_cluster *c[2];
    atomic_int released[2];
} env;

static env E;

static void sh(const char *verb)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s %s %s/etcd >%s/url 2>%s/err", E.script, verb, E.dir,
             E.dir, E.dir);
    if (system(cmd) != 0)
        fail_msg("etcd.sh %s failed (see %s/err; scripts/deps.sh installs etcd)", verb, E.dir);
}

static void on_release(const char *t, const char *ns, const char *s, void *user)
{
    (void)t, (void)ns, (void)s;
    atomic_fetch_add(&E.released[(intptr_t)user], 1);
}

/* The broker's freeze, at once: nothing to drain, the tail is 0. */
static void freeze_now(const char *t, const char *ns, const char *s, fx_cluster_frozen_cb done,
                       void *arg, void *user)
{
    (void)t, (void)ns, (void)s, (void)user;
    done(arg, 0, 0);
}

static fx_cluster *node(int i)
{
    const char *eps[1] = {E.url};
    char id[16], adv[32], why[256];
    snprintf(id, sizeof(id), "n%d", i + 1);
    snprintf(adv, sizeof(adv), "127.0.0.1:%d", 15001 + i); /* only named, never dialled */
    fx_cluster_opts o = {.endpoints = eps, .n_endpoints = 1, .name = "tsan", .node_id = id,
                         .advertise = adv, .lease_ttl_s = 2, .margin_ms = 500,
                         .on_release = on_release, .freeze = freeze_now, .move_rate = 1000,
                         .user = (void *)(intptr_t)i};
    fx_cluster *c = NULL;
    if (fx_cluster_new(&c, &o, why, sizeof(why)) != 0)
        fail_msg("fx_cluster_new: %s", why);
    assert_int_equal(fx_cluster_start(c), 0);
    return c;
}

static int64_t counter(fx_cluster *c, const char *name)
{
    char *j = fx_cluster_status_json(c);
    assert_non_null(j);
    json_t *v = json_loads(j, 0, NULL);
    free(j);
    int64_t n = json_integer_value(json_object_get(json_object_get(v, "counters"), name));
    json_decref(v);
    return n;
}

static size_t nodes_seen(fx_cluster *c)
{
    char *j = fx_cluster_status_json(c);
    assert_non_null(j);
    json_t *v = json_loads(j, 0, NULL);
    free(j);
    size_t n = json_array_size(json_object_get(v, "nodes"));
    json_decref(v);
    return n;
}

static int up(void **state)
{
    (void)state;
    memset(&E, 0, sizeof(E));
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL)
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    snprintf(E.script, sizeof(E.script), "%s/scripts/etcd.sh", src);
    snprintf(E.dir, sizeof(E.dir), "/tmp/fxcnodeXXXXXX");
    assert_non_null(mkdtemp(E.dir));
    sh("start");
    char path[128];
    snprintf(path, sizeof(path), "%s/etcd/endpoint", E.dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(E.url, sizeof(E.url), f));
    fclose(f);
    E.url[strcspn(E.url, "\n")] = '\0';
    for (int i = 0; i < 2; i++)
        E.c[i] = node(i);
    uint64_t until = fx_now_ns() + 10000000000ull;
    while (!(fx_cluster_serving(E.c[0]) && fx_cluster_serving(E.c[1]) && nodes_seen(E.c[0]) == 2 &&
             nodes_seen(E.c[1]) == 2)) {
        if (fx_now_ns() > until)
            fail_msg("the two nodes did not register and see each other");
        usleep(20 * 1000);
    }
    return 0;
}

static int down(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        fx_cluster_free(E.c[i]);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s stop %s/etcd >/dev/null 2>&1; rm -rf %s", E.script, E.dir,
             E.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "etcd.sh stop failed\n");
    return 0;
}

typedef struct asker {
    int seed;
    int errors;
    pthread_t thr;
} asker;

/* Asks both nodes for every stream, in an order of its own. */
static void *ask_main(void *arg)
{
    asker *a = arg;
    for (int k = 0; k < NSTREAMS; k++) {
        int s = (k * 7 + a->seed * 31) % NSTREAMS;
        char name[16];
        snprintf(name, sizeof(name), "s%d", s);
        for (int i = 0; i < 2; i++) {
            fx_cluster_route r;
            int n = (i + a->seed) % 2;
            fx_cluster_route_stream(E.c[n], "t1", "ns", name, false, &r);
            if (r.kind == FX_CLUSTER_UNAVAILABLE)
                a->errors++;
        }
    }
    return NULL;
}

static void test_routes_asked_from_many_threads_name_one_owner_per_stream(void **state)
{
    (void)state;
    asker a[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        a[t] = (asker){.seed = t};
        assert_int_equal(pthread_create(&a[t].thr, NULL, ask_main, &a[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(a[t].thr, NULL);
        assert_int_equal(a[t].errors, 0);
    }
    /* Each stream: LOCAL at exactly one node, which the other names once
     * its watch saw the claim. */
    int here[2] = {0, 0};
    for (int s = 0; s < NSTREAMS; s++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", s);
        fx_cluster_route r[2];
        uint64_t until = fx_now_ns() + 5000000000ull;
        for (;;) {
            for (int i = 0; i < 2; i++)
                fx_cluster_route_stream(E.c[i], "t1", "ns", name, false, &r[i]);
            bool one = (r[0].kind == FX_CLUSTER_LOCAL) != (r[1].kind == FX_CLUSTER_LOCAL);
            if (one && strcmp(r[0].node_id, r[1].node_id) == 0 && r[0].epoch == 1 &&
                r[1].epoch == 1)
                break;
            if (fx_now_ns() > until)
                fail_msg("%s: n1 says %d %s@%llu, n2 says %d %s@%llu", name, r[0].kind,
                         r[0].node_id, (unsigned long long)r[0].epoch, r[1].kind, r[1].node_id,
                         (unsigned long long)r[1].epoch);
            usleep(10 * 1000);
        }
        here[r[0].kind == FX_CLUSTER_LOCAL ? 0 : 1]++;
        assert_int_equal(fx_cluster_first_offset(E.c[r[0].kind == FX_CLUSTER_LOCAL ? 0 : 1], "t1",
                                                 "ns", name),
                         1ull << FX_CLUSTER_EPOCH_SHIFT);
    }
    /* One winning claim per stream; the bounded load holds (ceil(1.25 x 120 / 2) = 75). */
    assert_int_equal(counter(E.c[0], "claims_won") + counter(E.c[1], "claims_won"), NSTREAMS);
    assert_true(here[0] <= 75 && here[1] <= 75);
}

static void test_a_lease_revoked_behind_a_nodes_back_releases_its_streams(void **state)
{
    (void)state;
    fx_cluster_route r;
    int owned = 0;
    for (int s = 0; s < 20; s++) {
        char name[16];
        snprintf(name, sizeof(name), "r%d", s);
        fx_cluster_route_stream(E.c[0], "t1", "ns", name, false, &r);
        owned += r.kind == FX_CLUSTER_LOCAL;
    }
    assert_true(owned > 0);
    /* Revoke n1's lease with etcdctl: its keys go, its keep-alive finds the
     * lease lost, it releases what it owned and registers anew. */
    char *j = fx_cluster_status_json(E.c[0]);
    json_t *v = json_loads(j, 0, NULL);
    free(j);
    char lease[32];
    snprintf(lease, sizeof(lease), "%s", json_string_value(json_object_get(v, "lease")));
    int64_t inc0 = json_integer_value(json_object_get(v, "incarnation"));
    json_decref(v);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 etcdctl --endpoints=%s lease revoke %s >/dev/null",
             E.url, lease);
    assert_int_equal(system(cmd), 0);
    uint64_t until = fx_now_ns() + 10000000000ull;
    while (atomic_load(&E.released[0]) < owned || counter(E.c[0], "leases_lost") < 1 ||
           !fx_cluster_serving(E.c[0])) {
        if (fx_now_ns() > until)
            fail_msg("n1 did not release its %d streams and register again (released %d)", owned,
                     atomic_load(&E.released[0]));
        usleep(20 * 1000);
    }
    j = fx_cluster_status_json(E.c[0]);
    v = json_loads(j, 0, NULL);
    free(j);
    assert_true(json_integer_value(json_object_get(v, "incarnation")) > inc0);
    json_decref(v);
}

/* Two nodes claim one stream at the same moment: durable, so each claims
 * it whoever the candidate is (the pin decides), which makes a real race. */
typedef struct racer {
    int node;
    const char *name;
    pthread_barrier_t *start;
    fx_cluster_route r;
    pthread_t thr;
} racer;

static void *race_main(void *arg)
{
    racer *x = arg;
    pthread_barrier_wait(x->start);
    fx_cluster_route_stream(E.c[x->node], "t1", "ns", x->name, true, &x->r);
    return NULL;
}

static void test_two_nodes_racing_to_claim_one_stream_exactly_one_wins_every_time(void **state)
{
    (void)state;
    int wins[2] = {0, 0};
    for (int s = 0; s < 40; s++) {
        char name[16];
        snprintf(name, sizeof(name), "race%d", s);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        racer x[2];
        for (int i = 0; i < 2; i++) {
            x[i] = (racer){.node = i, .name = name, .start = &start};
            assert_int_equal(pthread_create(&x[i].thr, NULL, race_main, &x[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(x[i].thr, NULL);
        pthread_barrier_destroy(&start);
        int local = (x[0].r.kind == FX_CLUSTER_LOCAL) + (x[1].r.kind == FX_CLUSTER_LOCAL);
        if (local != 1)
            fail_msg("%s: %d winners (n1: %d %s, n2: %d %s)", name, local, x[0].r.kind,
                     x[0].r.why, x[1].r.kind, x[1].r.why);
        int w = x[0].r.kind == FX_CLUSTER_LOCAL ? 0 : 1;
        wins[w]++;
        /* The loser names the winner, or says the stream is pinned to it. */
        const fx_cluster_route *l = &x[1 - w].r;
        char winner[8];
        snprintf(winner, sizeof(winner), "n%d", w + 1);
        assert_true((l->kind == FX_CLUSTER_REMOTE && strcmp(l->node_id, winner) == 0) ||
                    (l->kind == FX_CLUSTER_UNAVAILABLE && strstr(l->why, winner) != NULL));
    }
    print_message("40 races: n1 won %d, n2 won %d\n", wins[0], wins[1]);
    assert_int_equal(counter(E.c[0], "claims_won") + counter(E.c[1], "claims_won"), 40);
}

/* A move to a node at its bounded-load cap: the destination does not claim
 * it from the handoff record (as placement would not pick it); placement
 * does, and the owner it picks still takes the record's end. */
static void test_a_handoff_to_a_node_at_its_cap_goes_by_placement(void **state)
{
    (void)state;
    fx_cluster_route r;
    /* n2 owns 6 durable streams (a durable claim stays where it is asked),
     * past the cap of 6 placed, ceil(1.25 x 7 / 2) = 5. */
    for (int k = 0; k < 6; k++) {
        char name[16];
        snprintf(name, sizeof(name), "d%d", k);
        fx_cluster_route_stream(E.c[1], "t1", "ns", name, true, &r);
        if (r.kind != FX_CLUSTER_LOCAL)
            fail_msg("%s: n2 did not claim it: %s", name, r.why);
    }
    fx_cluster_route_stream(E.c[0], "t1", "ns", "mv", false, &r);
    assert_int_equal(r.kind, FX_CLUSTER_LOCAL);
    /* n1 sees n2's six before the move (placement reads the counts). */
    uint64_t until = fx_now_ns() + 5000000000ull;
    for (;;) {
        char *j = fx_cluster_status_json(E.c[0]);
        assert_non_null(j);
        json_t *v = json_loads(j, 0, NULL);
        free(j);
        json_int_t placed = json_integer_value(json_object_get(v, "streams_placed"));
        json_decref(v);
        if (placed == 7)
            break;
        if (fx_now_ns() > until)
            fail_msg("n1 sees %lld streams placed, not 7", (long long)placed);
        usleep(20 * 1000);
    }
    char why[256];
    assert_int_equal(fx_cluster_move(E.c[0], "t1", "ns", "mv", "n2", why, sizeof(why)), 0);
    while (counter(E.c[0], "moves_done") + counter(E.c[0], "moves_failed") == 0) {
        if (fx_now_ns() > until)
            fail_msg("the move did not end");
        usleep(20 * 1000);
    }
    assert_int_equal(counter(E.c[0], "moves_done"), 1);
    usleep(500 * 1000); /* n2's watch shows the handoff: it claims nothing */
    assert_int_equal(counter(E.c[1], "claims_won"), 6);
    fx_cluster_route_stream(E.c[1], "t1", "ns", "mv", false, &r);
    assert_int_equal(r.kind, FX_CLUSTER_REMOTE);
    assert_string_equal(r.node_id, "n1");
    fx_cluster_route_stream(E.c[0], "t1", "ns", "mv", false, &r);
    assert_int_equal(r.kind, FX_CLUSTER_LOCAL);
    /* The claim read the record (counted just after the route's wake-up). */
    until = fx_now_ns() + 2000000000ull;
    while (counter(E.c[0], "handoff_claims") == 0 && fx_now_ns() < until)
        usleep(10 * 1000);
    assert_int_equal(counter(E.c[0], "handoff_claims"), 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_routes_asked_from_many_threads_name_one_owner_per_stream,
                                    up, down),
    cmocka_unit_test_setup_teardown(test_a_lease_revoked_behind_a_nodes_back_releases_its_streams,
                                    up, down),
    cmocka_unit_test_setup_teardown(
        test_two_nodes_racing_to_claim_one_stream_exactly_one_wins_every_time, up, down),
    cmocka_unit_test_setup_teardown(test_a_handoff_to_a_node_at_its_cap_goes_by_placement, up,
                                    down),
};
FX_TEST_MAIN(tests)
