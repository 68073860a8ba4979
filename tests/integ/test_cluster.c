/* Three felix-broker processes in one cluster on a real etcd
 * (scripts/etcd.sh, free loopback ports; docs/cluster.md): every stream is
 * served by exactly one node and the others name it (publish errors,
 * not_leader that libfelix follows); kill -9 of an owner moves its stream to
 * a live node at a higher epoch within the lease TTL; an owner stopped
 * (SIGSTOP) past its TTL acknowledges nothing once it runs again, and a new
 * owner has claimed meanwhile; etcd stopped past the deadline suspends the
 * brokers (/ready 503, publishes refused) and they serve again once it is
 * back; a node whose watch resumes past an etcd compaction lists the keys
 * again and names the owners it missed. Lease TTL 2 s with a 500 ms margin
 * (10 s in the compaction case). A case whose etcd cannot start fails with
 * the reason. */
/* fx-test-libs: fx_client fx_cluster fx_quic fx_wire fx_base */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "integ/proc_broker.h"

#include "cluster/place.h"
#include "felix/felix.h"

#define NS "default"
#define NB 3
/* The lease TTL (FX_CLUSTER_TTL_S, default 2) and the kill cycles of the
 * failover case (FX_CLUSTER_CYCLES, default 2): the measurement of
 * docs/cluster.md runs 20 cycles at TTL 5 and at TTL 2. */
static int TTL_S = 2;
/* cluster_forward of the brokers the next setup starts, and its etcd's
 * members (1, or 3: scripts/etcd.sh start3). */
static bool FORWARD = true;
static int MEMBERS = 1;
/* cluster_rebalance_on_join of the brokers the next setup starts (off but
 * in the join case: a rebalance would move the other cases' streams); they
 * all get an admin token (POST /v1/cluster/rebalance needs it). */
static bool REBALANCE_ON_JOIN = false;
#define ADMIN_TOKEN "cluster-test-admin-token"
/* The lossless profile (subscriber queues block, publishers wait) for the
 * brokers the next setup starts. */
static bool LOSSLESS = false;

typedef struct node {
    pid_t pid;
    uint16_t quic, admin, internal; /* internal: cluster_internal_bind's port */
    char id[8];
    char server[64];
    char out[160], err[160];
} node;

typedef struct cluster {
    char dir[64];
    char script[512];
    char url[256];
    char broker[512];
    char cert[160], key[160];
    char pin[80];
    node n[NB];
} cluster;

static cluster *C;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static uint16_t free_port(int type)
{
    int fd = socket(AF_INET, type, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void etcd_cmd(const char *verb)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s %s %s/etcd >%s/etcd.url 2>%s/etcd.err", C->script, verb,
             C->dir, C->dir, C->dir);
    if (system(cmd) != 0) {
        char path[160], why[512] = "";
        snprintf(path, sizeof(path), "%s/etcd.err", C->dir);
        proc_slurp(path, why, sizeof(why));
        /* Not a skip: scripts/deps.sh installs etcd. */
        fail_msg("etcd.sh %s failed: %s", verb, why[0] ? why : "(no reason given)");
    }
}

static void node_start(int i)
{
    node *n = &C->n[i];
    char quic[64], admin[64], adv[64], eps[320], id[40], state[120], cert[200], key[200];
    snprintf(quic, sizeof(quic), "quic_bind=127.0.0.1:%u", n->quic);
    snprintf(admin, sizeof(admin), "metrics_bind=127.0.0.1:%u", n->admin);
    snprintf(adv, sizeof(adv), "cluster_advertise=127.0.0.1:%u", n->quic);
    snprintf(eps, sizeof(eps), "cluster_etcd_endpoints=%s", C->url);
    snprintf(id, sizeof(id), "cluster_node_id=%s", n->id);
    snprintf(state, sizeof(state), "state_dir=%s/s%d", C->dir, i);
    snprintf(cert, sizeof(cert), "tls_cert_file=%s", C->cert);
    snprintf(key, sizeof(key), "tls_key_file=%s", C->key);
    char ttl[48], margin[64], fwd[32], join[48], internal[64];
    snprintf(internal, sizeof(internal), "cluster_internal_bind=127.0.0.1:%u", n->internal);
    snprintf(fwd, sizeof(fwd), "cluster_forward=%s", FORWARD ? "true" : "false");
    snprintf(ttl, sizeof(ttl), "cluster_lease_ttl_s=%d", TTL_S);
    snprintf(margin, sizeof(margin), "cluster_deadline_margin_ms=%d", TTL_S > 2 ? 1000 : 500);
    snprintf(join, sizeof(join), "cluster_rebalance_on_join=%s",
             REBALANCE_ON_JOIN ? "true" : "false");
    char *argv[] = {C->broker, "--set", quic, "--set", admin, "--set", "probe_bind=", "--set",
                    state, "--set", eps, "--set", id, "--set", adv, "--set",
                    ttl, "--set", margin, "--set", fwd, "--set", "log_capacity=65536",
                    "--set", internal, "--set", join, "--set", "admin_token=" ADMIN_TOKEN,
                    i > 0 || C->cert[0] ? "--set" : NULL, cert, "--set", key, NULL, NULL,
                    NULL, NULL, NULL, NULL, NULL};
    if (LOSSLESS) {
        size_t a = 0;
        while (argv[a] != NULL)
            a++;
        char *ll[] = {"--set", "subscriber_queue_policy=block", "--set",
                      "subscriber_lane_queue_policy=block", "--set", "pub_ingress_wait=true"};
        for (size_t k = 0; k < 6; k++)
            argv[a + k] = ll[k];
    }
    static char *env[] = {"FELIX_LOG_LEVEL=info", NULL};
    unlink(n->out);
    n->pid = proc_spawn(argv, n->out, n->err, env, false);
    char text[16384], pin[80];
    proc_broker_address(n->out, text, sizeof(text), n->pid, n->server, pin);
    if (C->pin[0] == '\0')
        snprintf(C->pin, sizeof(C->pin), "%s", pin);
    assert_string_equal(pin, C->pin); /* one certificate for the whole cluster */
}

/* ---- admin: GET /v1/cluster ------------------------------------------------------------- */

typedef struct body {
    char *p;
    size_t n;
} body;

static size_t on_body(char *p, size_t sz, size_t nm, void *user)
{
    body *b = user;
    char *q = realloc(b->p, b->n + sz * nm + 1);
    assert_non_null(q);
    memcpy(q + b->n, p, sz * nm);
    b->n += sz * nm;
    q[b->n] = '\0';
    b->p = q;
    return sz * nm;
}

/* GET http://127.0.0.1:|port||path|: the status, the body in |*out| (malloc'd). */
static long http_get(uint16_t port, const char *path, char **out)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    body b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    *out = b.p;
    return status;
}

static json_t *cluster_view(int i)
{
    char *text = NULL;
    assert_int_equal(http_get(C->n[i].admin, "/v1/cluster", &text), 200);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (j == NULL)
        fail_msg("GET /v1/cluster of %s: not JSON: %s", C->n[i].id, text);
    free(text);
    return j;
}

/* The owner and epoch of |stream| in node |i|'s view (-1: not placed). */
static int owner_in_view(int i, const char *stream, uint64_t *pepoch)
{
    json_t *j = cluster_view(i);
    int who = -1;
    size_t k;
    json_t *s;
    json_array_foreach(json_object_get(j, "streams"), k, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "stream")), stream) != 0)
            continue;
        const char *nid = json_string_value(json_object_get(s, "node"));
        for (int n = 0; n < NB; n++)
            if (strcmp(nid, C->n[n].id) == 0)
                who = n;
        if (pepoch != NULL)
            *pepoch = (uint64_t)json_integer_value(json_object_get(s, "epoch"));
    }
    json_decref(j);
    return who;
}

static int64_t counter(int i, const char *name)
{
    json_t *j = cluster_view(i);
    int64_t v = json_integer_value(json_object_get(json_object_get(j, "counters"), name));
    json_decref(j);
    return v;
}

/* The value of metric |name| (no labels) on node |i|'s /metrics, or -1. */
static int64_t metric(int i, const char *name)
{
    char *text = NULL;
    int64_t v = -1;
    if (http_get(C->n[i].admin, "/metrics", &text) == 200 && text != NULL) {
        size_t len = strlen(name);
        for (const char *p = text; (p = strstr(p, name)) != NULL; p += len) {
            if ((p == text || p[-1] == '\n') && p[len] == ' ') {
                v = strtoll(p + len + 1, NULL, 10);
                break;
            }
        }
    }
    free(text);
    return v;
}

/* ---- clients ------------------------------------------------------------------------- */

static fx_client *connect_to(int i, bool reconnect)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = C->n[i].server;
    o.server_name = "localhost";
    o.pin_sha256 = C->pin;
    o.tenant = "t1";
    o.token = "any-token";
    /* A reconnecting client finds a killed owner by the ICMP port
     * unreachable its keep-alive (500 ms) draws, and one that dies silently
     * by its idle timeout: 1500 ms, as docs/cluster.md advises for cluster
     * clients, or FX_CLUSTER_IDLE_MS (30000 shows the ICMP path alone). */
    o.connect_timeout_ms = reconnect ? 1000 : PROC_HANG_MS;
    if (reconnect) {
        const char *idle = getenv("FX_CLUSTER_IDLE_MS");
        o.idle_timeout_ms = idle != NULL && atoi(idle) > 0 ? atoi(idle) : 1500;
        o.keepalive_ms = 500;
    }
    o.reconnect = reconnect;
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    if (rv != 0)
        fail_msg("connect to %s: %s", C->n[i].server, fx_strerror(rv));
    return c;
}

/* Publishes |payload| acked to |stream| through node |i|: 0, or the
 * error with its text in |msg|. */
static int publish_at(fx_client *c, const char *stream, const char *payload, char *msg, size_t cap)
{
    int rv = fx_publish(c, NS, stream, payload, strlen(payload), FX_ACK_PER_MESSAGE);
    if (rv != 0)
        fx_client_last_error(c, msg, cap);
    return rv;
}

/* The node named in "... is served by nX". */
static int named_owner(const char *msg)
{
    const char *p = strstr(msg, "is served by ");
    if (p == NULL)
        return -1;
    p += strlen("is served by ");
    for (int n = 0; n < NB; n++)
        if (strncmp(p, C->n[n].id, strlen(C->n[n].id)) == 0)
            return n;
    return -1;
}

/* ---- setup ------------------------------------------------------------------------------ */

static int cluster_setup(void **state)
{
    (void)state;
    const char *ttl = getenv("FX_CLUSTER_TTL_S");
    TTL_S = ttl != NULL && atoi(ttl) >= 2 ? atoi(ttl) : 2;
    C = calloc(1, sizeof(*C));
    assert_non_null(C);
    const char *src = getenv("FX_SOURCE_DIR");
    if (src == NULL)
        fx_test_skip("FX_SOURCE_DIR is not set (run through ctest)");
    snprintf(C->script, sizeof(C->script), "%s/scripts/etcd.sh", src);
    snprintf(C->dir, sizeof(C->dir), "/tmp/fxclusterXXXXXX");
    assert_non_null(mkdtemp(C->dir));
    proc_binary("felix-broker", C->broker, sizeof(C->broker));
    etcd_cmd(MEMBERS == 3 ? "start3" : "start");
    char path[160];
    snprintf(path, sizeof(path), "%s/etcd/endpoint", C->dir);
    proc_slurp(path, C->url, sizeof(C->url));
    C->url[strcspn(C->url, "\n")] = '\0';
    char dir[sizeof(C->dir)];
    memcpy(dir, C->dir, sizeof(dir));
    for (int i = 0; i < NB; i++) {
        node *n = &C->n[i];
        snprintf(n->id, sizeof(n->id), "n%c", (char)('1' + i));
        n->quic = free_port(SOCK_DGRAM);
        n->admin = free_port(SOCK_STREAM);
        n->internal = free_port(SOCK_DGRAM);
        snprintf(n->out, sizeof(n->out), "%s/b%d.out", dir, i);
        snprintf(n->err, sizeof(n->err), "%s/b%d.err", dir, i);
        node_start(i);
        if (i == 0) {
            /* The others serve the first one's certificate: one pin. */
            snprintf(C->cert, sizeof(C->cert), "%s/s0/tls-cert.pem", dir);
            snprintf(C->key, sizeof(C->key), "%s/s0/tls-key.pem", dir);
        }
    }
    /* Every node sees all three before a case starts. */
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    for (int i = 0; i < NB; i++) {
        for (;;) {
            json_t *j = cluster_view(i);
            size_t nn = json_array_size(json_object_get(j, "nodes"));
            bool serving = json_is_true(json_object_get(j, "serving"));
            json_decref(j);
            if (nn == NB && serving)
                break;
            if (proc_now_ms() > until)
                fail_msg("node %s does not see the cluster", C->n[i].id);
            usleep(50 * 1000);
        }
    }
    return 0;
}

static int cluster_teardown(void **state)
{
    /* A clean stop (SIGTERM: drain, release, revoke the lease) must exit 0:
     * the sanitizers' leak check runs then. */
    int bad = -1, status = 0;
    for (int i = 0; i < NB; i++)
        if (C->n[i].pid > 0) {
            kill(C->n[i].pid, SIGCONT);
            kill(C->n[i].pid, SIGTERM);
            int st = 0;
            waitpid(C->n[i].pid, &st, 0);
            proc_track(C->n[i].pid, false);
            if (bad < 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                bad = i;
                status = st;
            }
        }
    if (bad >= 0) {
        char err[4096] = "";
        FILE *f = fopen(C->n[bad].err, "r");
        if (f != NULL) {
            if (fseek(f, -(long)(sizeof(err) - 1), SEEK_END) != 0)
                rewind(f);
            err[fread(err, 1, sizeof(err) - 1, f)] = '\0';
            fclose(f);
        }
        fprintf(stderr, "node %s did not stop cleanly (status %d); its stderr ends:\n%s\n",
                C->n[bad].id, status, err);
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "bash %s stop %s/etcd >/dev/null 2>&1", C->script, C->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "etcd.sh stop failed\n");
    if (getenv("FX_CLUSTER_KEEP") == NULL) /* keeps the brokers' logs for a look */
        nftw(C->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(C);
    C = NULL;
    int rv = proc_teardown(state);
    return bad >= 0 ? -1 : rv;
}

/* Places |stream| by publishing through node |via| (then through the node
 * named): the owner's index. */
static int place(fx_client *const cl[NB], int via, const char *stream)
{
    char msg[512];
    for (int hop = 0, tries = 0; hop < 3; hop++) {
        int rv = publish_at(cl[via], stream, "hello", msg, sizeof(msg));
        if (rv != 0 && named_owner(msg) < 0 && ++tries < 5) {
            /* A forward that met a connection the owner's pause had cut,
             * or a claim under way: a publisher tries again. */
            usleep(200 * 1000);
            hop--;
            continue;
        }
        if (rv == 0) {
            /* Appended by the owner (here, or forwarded to it): the view of
             * the node it went through names it once its watch saw the claim. */
            uint64_t until = proc_now_ms() + PROC_HANG_MS;
            int o;
            while ((o = owner_in_view(via, stream, NULL)) < 0 && proc_now_ms() < until)
                usleep(10 * 1000);
            if (o < 0)
                fail_msg("%s acked through %s but no node owns it", stream, C->n[via].id);
            return o;
        }
        int to = named_owner(msg);
        if (to < 0)
            fail_msg("publish %s through %s: %s (%s)", stream, C->n[via].id, fx_strerror(rv), msg);
        via = to;
    }
    fail_msg("publish %s: more than 3 hops", stream);
    return -1;
}

/* ---- cases ------------------------------------------------------------------------------ */

/* felix_cluster_forwards_total of node |i| (GET /metrics). */
static int64_t forwards_of(int i)
{
    char *text = NULL;
    assert_int_equal(http_get(C->n[i].admin, "/metrics", &text), 200);
    const char *p = strstr(text, "\nfelix_cluster_forwards_total ");
    int64_t v = p != NULL ? strtoll(p + strlen("\nfelix_cluster_forwards_total "), NULL, 10) : -1;
    free(text);
    return v;
}

static void test_every_stream_has_one_owner_and_publishes_through_any_node_reach_it(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int owner[30], per[NB] = {0};
    char name[32];
    for (int s = 0; s < 30; s++) {
        snprintf(name, sizeof(name), "p%d", s);
        owner[s] = place(cl, s % NB, name);
        per[owner[s]]++;
        /* Through the other two: forwarded to the owner, acked by it. */
        for (int i = 0; i < NB; i++) {
            if (i == owner[s])
                continue;
            char msg[512], p[16];
            snprintf(p, sizeof(p), "x%d", i);
            if (publish_at(cl[i], name, p, msg, sizeof(msg)) != 0)
                fail_msg("publish %s through %s (forwarded): %s", name, C->n[i].id, msg);
        }
        /* The owner holds all three, in the order they were acked. */
        fx_start from = {.kind = FX_START_EARLIEST};
        fx_subscription *sub = NULL;
        assert_int_equal(fx_subscribe(&sub, cl[owner[s]], NS, name, &from), 0);
        fx_event ev;
        assert_int_equal(fx_subscription_next(sub, &ev, PROC_HANG_MS), 0);
        assert_memory_equal(ev.payload, "hello", 5);
        for (int i = 0; i < NB; i++) {
            if (i == owner[s])
                continue;
            char p[16];
            snprintf(p, sizeof(p), "x%d", i);
            assert_int_equal(fx_subscription_next(sub, &ev, PROC_HANG_MS), 0);
            assert_int_equal(ev.len, strlen(p));
            assert_memory_equal(ev.payload, p, ev.len);
        }
        fx_unsubscribe(sub);
    }
    /* 20 of the 30 first publishes and all 60 others went through a non-owner. */
    int64_t fwd = 0;
    for (int i = 0; i < NB; i++)
        fwd += forwards_of(i);
    assert_true(fwd >= 60);
    /* They went to the owners' internal listeners (cluster_internal_bind),
     * which every node's view names. */
    int64_t internal = 0;
    for (int i = 0; i < NB; i++)
        internal += metric(i, "felix_cluster_internal_connections_total");
    assert_true(internal >= 1);
    for (int i = 0; i < NB; i++) {
        json_t *j = cluster_view(i), *nodes = json_object_get(j, "nodes");
        assert_int_equal(json_array_size(nodes), NB);
        for (size_t k = 0; k < NB; k++) {
            const char *in = json_string_value(json_object_get(json_array_get(nodes, k), "internal"));
            assert_non_null(in);
            assert_non_null(strstr(in, "127.0.0.1:"));
        }
        json_decref(j);
    }
    /* Every view agrees, at epoch 1. */
    for (int s = 0; s < 30; s++) {
        snprintf(name, sizeof(name), "p%d", s);
        for (int i = 0; i < NB; i++) {
            uint64_t epoch = 0;
            assert_int_equal(owner_in_view(i, name, &epoch), owner[s]);
            assert_int_equal(epoch, 1);
        }
    }
    /* Bounded loads: nobody holds more than ceil(1.25 x 30 / 3) = 13. */
    for (int i = 0; i < NB; i++)
        assert_true(per[i] <= 13);
    /* One claim per placement, cluster-wide. */
    int64_t won = 0;
    for (int i = 0; i < NB; i++)
        won += counter(i, "claims_won");
    assert_int_equal(won, 30);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

static void test_a_subscriber_through_a_non_owner_is_redirected_and_receives(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "r1");
    int other = (o + 1) % NB;
    fx_subscription *s = NULL;
    assert_int_equal(fx_subscribe(&s, cl[other], NS, "r1", NULL), 0);
    fx_client_stats st;
    assert_int_equal(fx_client_get_stats(cl[other], &st), 0);
    assert_int_equal(st.redirects, 1);
    char msg[256];
    assert_int_equal(publish_at(cl[o], "r1", "through-the-owner", msg, sizeof(msg)), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
    assert_int_equal(ev.len, strlen("through-the-owner"));
    /* In-memory offsets carry the epoch in their high bits. */
    assert_true(ev.has_offset);
    assert_int_equal(ev.offset >> 40, 1);
    fx_unsubscribe(s);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

static void test_kill_9_of_an_owner_moves_its_stream_within_the_ttl_at_a_higher_epoch(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "k1");
    uint64_t epoch = 0;
    assert_int_equal(owner_in_view((o + 1) % NB, "k1", &epoch), o);
    assert_int_equal(epoch, 1);
    (void)fx_client_close(cl[o], 0);
    cl[o] = NULL;
    uint64_t t0 = proc_now_ms();
    kill(C->n[o].pid, SIGKILL);
    waitpid(C->n[o].pid, NULL, 0);
    proc_track(C->n[o].pid, false);
    C->n[o].pid = 0;
    /* Publish through a live node until a live node owns the stream. */
    int live = (o + 1) % NB, owner = -1;
    char msg[512];
    while (owner < 0) {
        int rv = publish_at(cl[live], "k1", "after", msg, sizeof(msg));
        int named = rv == 0 ? live : named_owner(msg);
        if (rv == 0)
            owner = live;
        else if (named >= 0 && named != o)
            live = named;
        if (proc_now_ms() - t0 > (TTL_S + 3) * 1000ull)
            fail_msg("stream k1 not re-placed %llu ms after its owner died: %s",
                     (unsigned long long)(proc_now_ms() - t0), msg);
        if (owner < 0)
            usleep(20 * 1000);
    }
    uint64_t moved_ms = proc_now_ms() - t0;
    print_message("k1 served again by %s %llu ms after the kill of %s\n", C->n[owner].id,
                  (unsigned long long)moved_ms, C->n[o].id);
    assert_true(moved_ms <= (TTL_S + 1) * 1000ull);
    assert_int_equal(owner_in_view(owner, "k1", &epoch), owner);
    assert_int_equal(epoch, 2);
    /* A new subscriber there reads the new epoch's offsets. */
    fx_subscription *s = NULL;
    fx_start from = {.kind = FX_START_EARLIEST};
    assert_int_equal(fx_subscribe(&s, cl[owner], NS, "k1", &from), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
    assert_int_equal(ev.offset, 2ull << 40);
    fx_unsubscribe(s);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

static void wait_serving(int i);

/* Publishers of acked messages to one node, each noting when its last ack
 * came back. */
typedef struct hammer {
    fx_client *c;
    const char *stream;
    atomic_bool stop;
    /* acked_after: publishes sent after |after_ms| and acked; acked_in_flight:
     * sent before it (in flight across the stop) and acked after it. */
    atomic_uint_fast64_t acked, acked_after, acked_in_flight;
    _Atomic uint64_t after_ms;
    int id;
    /* The payloads sent after |after_ms| and acked (checked at the new owner). */
    char (*after_payloads)[24];
    size_t n_after, cap_after;
    pthread_t thr;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    char msg[512], payload[24];
    for (uint64_t seq = 0; !atomic_load(&h->stop); seq++) {
        uint64_t after = atomic_load(&h->after_ms);
        bool issued_after = after != 0 && proc_now_ms() >= after;
        snprintf(payload, sizeof(payload), "h%d-%llu", h->id, (unsigned long long)seq);
        if (publish_at(h->c, h->stream, payload, msg, sizeof(msg)) == 0) {
            atomic_fetch_add(&h->acked, 1);
            after = atomic_load(&h->after_ms);
            if (issued_after) {
                atomic_fetch_add(&h->acked_after, 1);
                if (h->n_after < h->cap_after)
                    memcpy(h->after_payloads[h->n_after++], payload, sizeof(payload));
            }
            else if (after != 0 && proc_now_ms() >= after)
                atomic_fetch_add(&h->acked_in_flight, 1);
        } else {
            usleep(2 * 1000);
        }
    }
    return NULL;
}

static void test_an_owner_stopped_past_its_ttl_acks_nothing_after_a_new_claim(void **state)
{
    (void)state;
    const char *env = getenv("FX_CLUSTER_CYCLES");
    int cycles = env != NULL && atoi(env) > 0 ? atoi(env) : 1;
    uint64_t stale_acks = 0;
    int64_t late_total = 0;
    for (int cy = 0; cy < cycles; cy++) {
        fx_client *cl[NB];
        for (int i = 0; i < NB; i++)
            cl[i] = connect_to(i, false);
        char stream[32];
        snprintf(stream, sizeof(stream), "z%d", cy);
        int o = place(cl, cy % NB, stream);
        int other = (o + 1) % NB;
        int64_t late0 = counter(o, "late_appends");
        /* Four publishers keep acked publishes in flight to the owner. */
        hammer h[4];
        for (int k = 0; k < 4; k++) {
            h[k] = (hammer){.c = connect_to(o, false), .stream = stream, .id = k,
                            .cap_after = 4096};
            h[k].after_payloads = calloc(h[k].cap_after, sizeof(*h[k].after_payloads));
            assert_non_null(h[k].after_payloads);
            assert_int_equal(pthread_create(&h[k].thr, NULL, hammer_main, &h[k]), 0);
        }
        usleep(300 * 1000);
        kill(C->n[o].pid, SIGSTOP);
        /* Past its TTL the stream is claimed anew through a live node. */
        usleep(((uint64_t)TTL_S * 1000 + 1500) * 1000);
        int owner = place(cl, other, stream);
        assert_int_not_equal(owner, o);
        uint64_t epoch = 0;
        assert_int_equal(owner_in_view(owner, stream, &epoch), owner);
        assert_int_equal(epoch, 2);
        /* The old owner runs again. A publish sent to it from now on may be
         * acked only by the new owner (forwarded there once the old one
         * learned it owns the stream no more): an ack of its own would come
         * from a stale owner, past its deadline, and its message would be
         * missing at the new owner. (Publishes in flight across the stop may
         * be acked now: their appends were made before it, within the
         * deadline, and only the ack's datagram waited.) */
        uint64_t t_cont = proc_now_ms();
        for (int k = 0; k < 4; k++)
            atomic_store(&h[k].after_ms, t_cont);
        kill(C->n[o].pid, SIGCONT);
        usleep(500 * 1000);
        uint64_t after = 0, acked = 0, in_flight = 0;
        for (int k = 0; k < 4; k++) {
            atomic_store(&h[k].stop, true);
            pthread_join(h[k].thr, NULL);
            after += atomic_load(&h[k].acked_after);
            in_flight += atomic_load(&h[k].acked_in_flight);
            acked += atomic_load(&h[k].acked);
            (void)fx_client_close(h[k].c, PROC_HANG_MS);
        }
        int64_t late = counter(o, "late_appends") - late0;
        /* Every publish sent after SIGCONT and acked is at the new owner. */
        fx_start from = {.kind = FX_START_EARLIEST};
        fx_subscription *sub = NULL;
        fx_client *reader = proc_broker_connect(C->n[owner].server, C->pin, FX_POLICY_BLOCK);
        assert_int_equal(fx_subscribe(&sub, reader, NS, stream, &from), 0);
        size_t total = 0, found = 0;
        for (int k = 0; k < 4; k++)
            total += h[k].n_after;
        char (*seen)[24] = calloc(65536, sizeof(*seen));
        assert_non_null(seen);
        size_t nseen = 0;
        fx_event ev;
        while (nseen < 65536 && fx_subscription_next(sub, &ev, 500) == 0) {
            size_t len = ev.len < 23 ? ev.len : 23;
            memcpy(seen[nseen], ev.payload, len);
            seen[nseen++][len] = '\0';
        }
        fx_unsubscribe(sub);
        (void)fx_client_close(reader, PROC_HANG_MS);
        for (int k = 0; k < 4; k++)
            for (size_t a = 0; a < h[k].n_after; a++) {
                bool hit = false;
                for (size_t b = 0; b < nseen && !hit; b++)
                    hit = strcmp(seen[b], h[k].after_payloads[a]) == 0;
                found += hit;
            }
        free(seen);
        for (int k = 0; k < 4; k++)
            free(h[k].after_payloads);
        print_message("cycle %d: %zu publishes acked after SIGCONT, %zu of them at the new owner\n",
                      cy, total, found);
        assert_true((int64_t)(total - found) <= late);
        print_message("cycle %d: %s stopped with 4 publishers (%llu acked); publishes sent after "
                      "SIGCONT and acked %llu, in flight across the stop and acked after it "
                      "%llu, late appends counted %lld\n",
                      cy, C->n[o].id, (unsigned long long)acked, (unsigned long long)after,
                      (unsigned long long)in_flight, (long long)late);
        stale_acks += total - found;
        late_total += late;
        /* It found its lease gone and released the stream. */
        assert_true(counter(o, "leases_lost") + counter(o, "suspensions") >= 1);
        assert_true(counter(o, "releases") >= 1);
        assert_int_equal(owner_in_view(o, stream, NULL), owner);
        for (int i = 0; i < NB; i++)
            (void)fx_client_close(cl[i], PROC_HANG_MS);
        wait_serving(o);
    }
    print_message("%d SIGSTOP cycles: %llu acks by a stale owner, %lld late appends counted\n",
                  cycles, (unsigned long long)stale_acks, (long long)late_total);
}

static void test_etcd_stopped_past_the_deadline_suspends_the_brokers_until_it_returns(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "e1");
    char *text = NULL;
    assert_int_equal(http_get(C->n[o].admin, "/ready", &text), 200);
    free(text);
    etcd_cmd("halt");
    usleep((TTL_S * 1000 + 500) * 1000);
    /* Past the deadline: /ready 503 saying why, publishes refused. */
    assert_int_equal(http_get(C->n[o].admin, "/ready", &text), 503);
    assert_non_null(strstr(text, "suspended"));
    free(text);
    char msg[512];
    assert_int_not_equal(publish_at(cl[o], "e1", "while-suspended", msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "stream owner unavailable"));
    etcd_cmd("start");
    /* Back: every node serves again (same lease, or a new registration),
     * and the stream is served by one node. */
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    for (int i = 0; i < NB; i++) {
        for (;;) {
            long st = http_get(C->n[i].admin, "/ready", &text);
            free(text);
            if (st == 200)
                break;
            if (proc_now_ms() > until)
                fail_msg("node %s did not serve again after etcd returned", C->n[i].id);
            usleep(100 * 1000);
        }
    }
    int owner = place(cl, o, "e1");
    assert_true(owner >= 0);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

/* ---- failover under load ------------------------------------------------------------ */

/* A publisher of acked messages to one stream, through whichever live node
 * owns it (following "is served by"), until told to stop. */
typedef struct pubber {
    const char *stream;
    fx_client *cl[NB];
    atomic_int dead; /* the node killed (-1: none) */
    atomic_bool stop;
    atomic_uint_fast64_t acked, refused;
    pthread_t thr;
} pubber;

static void *pub_main(void *arg)
{
    pubber *p = arg;
    int via = 0;
    char msg[512], payload[32];
    for (uint64_t seq = 0; !atomic_load(&p->stop); seq++) {
        if (via == atomic_load(&p->dead) || p->cl[via] == NULL)
            via = (via + 1) % NB;
        snprintf(payload, sizeof(payload), "m%llu", (unsigned long long)seq);
        int rv = publish_at(p->cl[via], p->stream, payload, msg, sizeof(msg));
        if (rv == 0) {
            atomic_fetch_add(&p->acked, 1);
        } else {
            atomic_fetch_add(&p->refused, 1);
            int to = named_owner(msg);
            via = to >= 0 && to != atomic_load(&p->dead) ? to : (via + 1) % NB;
            usleep(5 * 1000);
        }
        usleep(2 * 1000);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void wait_serving(int i)
{
    uint64_t until = proc_now_ms() + PROC_HANG_MS + (uint64_t)TTL_S * 1000;
    for (;;) {
        char *text = NULL;
        long st = http_get(C->n[i].admin, "/ready", &text);
        free(text);
        if (st == 200)
            return;
        if (proc_now_ms() > until)
            fail_msg("node %s does not serve after its restart", C->n[i].id);
        usleep(50 * 1000);
    }
}

static void test_kill_9_resumes_the_subscriber_at_the_new_owner_after_a_gap(void **state)
{
    (void)state;
    const char *env = getenv("FX_CLUSTER_CYCLES");
    int cycles = env != NULL && atoi(env) > 0 ? atoi(env) : 2;
    uint64_t took[64];
    if (cycles > 64)
        cycles = 64;
    for (int cy = 0; cy < cycles; cy++) {
        char stream[32];
        snprintf(stream, sizeof(stream), "f%d", cy);
        /* On the heap: a failing case leaves its thread running. */
        pubber *pp = calloc(1, sizeof(*pp));
        assert_non_null(pp);
        pubber *const p_ = pp;
        p_->stream = stream;
        atomic_init(&p_->dead, -1);
        for (int i = 0; i < NB; i++)
            p_->cl[i] = connect_to(i, false);
        int o = place(p_->cl, cy % NB, stream);
        int seed = (o + 1) % NB;
        fx_client *sc = connect_to(seed, true);
        fx_subscription *s = NULL;
        assert_int_equal(fx_subscribe(&s, sc, NS, stream, NULL), 0);
        assert_int_equal(pthread_create(&p_->thr, NULL, pub_main, p_), 0);
        /* Live traffic through the owner first. */
        fx_event ev;
        uint64_t last = 0, events = 0;
        while (events < 50) {
            assert_int_equal(fx_subscription_next(s, &ev, PROC_HANG_MS), 0);
            assert_true(ev.has_offset && ev.offset > last && ev.offset >> 40 == 1);
            last = ev.offset;
            events++;
        }
        fx_sub_stats before;
        assert_int_equal(fx_subscription_stats(s, &before), 0);
        atomic_store(&p_->dead, o);
        uint64_t t0 = proc_now_ms();
        kill(C->n[o].pid, SIGKILL);
        waitpid(C->n[o].pid, NULL, 0);
        proc_track(C->n[o].pid, false);
        /* The subscriber goes on at the new owner: offsets only grow, the
         * new epoch's come after a reported jump. */
        uint64_t until = t0 + (uint64_t)(TTL_S + 5) * 1000;
        for (;;) {
            int rv = fx_subscription_next(s, &ev, 100);
            if (rv == FX_ETIMEDOUT) {
                if (proc_now_ms() > until)
                    fail_msg("cycle %d: no delivery at a new owner %llu ms after the kill", cy,
                             (unsigned long long)(proc_now_ms() - t0));
                continue;
            }
            if (rv != 0) {
                fx_sub_error e;
                fx_subscription_error(s, &e);
                fail_msg("cycle %d: the subscription ended after the kill: %s (%s)", cy,
                         fx_strerror(rv), e.message);
            }
            assert_true(ev.has_offset && ev.offset > last);
            last = ev.offset;
            if (ev.offset >> 40 >= 2)
                break;
        }
        took[cy] = proc_now_ms() - t0;
        fx_sub_stats after;
        assert_int_equal(fx_subscription_stats(s, &after), 0);
        assert_true(after.gaps > before.gaps); /* the owner change is reported */
        atomic_store(&p_->stop, true);
        pthread_join(p_->thr, NULL);
        fx_client_stats cs; /* icmp: the dead owner's connection ended by an ICMP error */
        assert_int_equal(fx_client_get_stats(sc, &cs), 0);
        print_message("cycle %d: %s killed, first delivery at the new owner after %llu ms "
                      "(acked %llu, refused %llu, subscriber's icmp_errors %llu)\n",
                      cy, C->n[o].id, (unsigned long long)took[cy],
                      (unsigned long long)atomic_load(&p_->acked),
                      (unsigned long long)atomic_load(&p_->refused),
                      (unsigned long long)cs.icmp_errors);
        /* The dead owner, named until its lease expires, is tried again at
         * a paced rate (at most every 500 ms after a short ramp), not as
         * fast as it refuses. */
        assert_true(cs.icmp_errors <= took[cy] / 250 + 10);
        fx_unsubscribe(s);
        (void)fx_client_close(sc, PROC_HANG_MS);
        for (int i = 0; i < NB; i++)
            (void)fx_client_close(p_->cl[i], i == o ? 0 : PROC_HANG_MS);
        free(pp);
        node_start(o); /* the same node again: a new incarnation */
        wait_serving(o);
    }
    qsort(took, (size_t)cycles, sizeof(took[0]), cmp_u64);
    uint64_t p50 = took[cycles / 2], p95 = took[(cycles * 95 + 99) / 100 - 1];
    print_message("failover over %d kill -9 cycles at TTL %d s: p50 %llu ms, p95 %llu ms\n", cycles,
                  TTL_S, (unsigned long long)p50, (unsigned long long)p95);
    /* The goals (docs/cluster.md): p50 <= TTL + 1 s needs enough cycles to
     * be a median (with 2, "p50" is the slower of the two); p95 <= TTL + 2 s
     * bounds every cycle. */
    if (cycles >= 10)
        assert_true(p50 <= (uint64_t)(TTL_S + 1) * 1000);
    assert_true(p95 <= (uint64_t)(TTL_S + 2) * 1000);
}

/* ---- placement under concurrent claims ------------------------------------------------ */

typedef struct placer {
    int via; /* the node this placer publishes through first */
    int n;   /* streams */
    int fails;
    pthread_t thr;
} placer;

static void *placer_main(void *arg)
{
    placer *pl = arg;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    char name[32], msg[512];
    for (int s = 0; s < pl->n; s++) {
        snprintf(name, sizeof(name), "c%d", s);
        int via = pl->via, hop = 0;
        for (; hop < 3; hop++) {
            int rv = publish_at(cl[via], name, "x", msg, sizeof(msg));
            if (rv == 0)
                break;
            int to = named_owner(msg);
            if (to < 0) /* a concurrent claim: try again */
                to = via;
            via = to;
        }
        if (hop == 3)
            pl->fails++;
    }
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
    return NULL;
}

static void test_streams_placed_by_three_nodes_at_once_stay_within_the_bounded_load(void **state)
{
    (void)state;
    const char *env = getenv("FX_CLUSTER_STREAMS");
    int n = env != NULL && atoi(env) > 0 ? atoi(env) : 300;
    placer pl[NB];
    uint64_t t0 = proc_now_ms();
    for (int i = 0; i < NB; i++) {
        pl[i] = (placer){.via = i, .n = n};
        assert_int_equal(pthread_create(&pl[i].thr, NULL, placer_main, &pl[i]), 0);
    }
    for (int i = 0; i < NB; i++) {
        pthread_join(pl[i].thr, NULL);
        assert_int_equal(pl[i].fails, 0);
    }
    uint64_t took = proc_now_ms() - t0;
    /* Every node's view: N streams placed, each node within the cap. */
    int64_t cap = (125 * (int64_t)n + 300 - 1) / 300; /* ceil(1.25 x N / 3) */
    int64_t per[NB] = {0}, won = 0, lost = 0, txns = 0;
    for (int i = 0; i < NB; i++) {
        json_t *j = cluster_view(i);
        assert_int_equal(json_integer_value(json_object_get(j, "streams_placed")), n);
        per[i] = json_integer_value(json_object_get(j, "streams_here"));
        json_t *cn = json_object_get(j, "counters");
        won += json_integer_value(json_object_get(cn, "claims_won"));
        lost += json_integer_value(json_object_get(cn, "claims_lost"));
        txns += json_integer_value(json_object_get(json_object_get(j, "etcd_requests"), "txn"));
        json_decref(j);
    }
    print_message("%d streams placed by 3 nodes at once in %llu ms: %lld / %lld / %lld per node "
                  "(cap %lld); claims won %lld, lost %lld; claim and registration txns %lld\n",
                  n, (unsigned long long)took, (long long)per[0], (long long)per[1],
                  (long long)per[2], (long long)cap, (long long)won, (long long)lost,
                  (long long)txns);
    assert_int_equal(per[0] + per[1] + per[2], n);
    for (int i = 0; i < NB; i++)
        assert_true(per[i] <= cap);
    assert_int_equal(won, n); /* one winning transaction per placement */
}

static int cluster_setup_no_forward(void **state)
{
    FORWARD = false;
    int rv = cluster_setup(state);
    FORWARD = true;
    return rv;
}

static void test_without_forwarding_a_publish_to_a_non_owner_is_refused_naming_it(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    for (int s = 0; s < 6; s++) {
        char name[32];
        snprintf(name, sizeof(name), "q%d", s);
        int o = place(cl, s % NB, name);
        for (int i = 0; i < NB; i++) {
            if (i == o)
                continue;
            char msg[512];
            assert_int_not_equal(publish_at(cl[i], name, "x", msg, sizeof(msg)), 0);
            assert_int_equal(named_owner(msg), o);
        }
    }
    for (int i = 0; i < NB; i++) {
        assert_int_equal(forwards_of(i), 0);
        (void)fx_client_close(cl[i], PROC_HANG_MS);
    }
}

static int cluster_setup_etcd3(void **state)
{
    MEMBERS = 3;
    int rv = cluster_setup(state);
    MEMBERS = 1;
    return rv;
}

/* The PID of etcd member |m| (1..3). */
static pid_t member_pid(int m)
{
    char path[160], text[32];
    snprintf(path, sizeof(path), "%s/etcd/m%d/pid", C->dir, m);
    proc_slurp(path, text, sizeof(text));
    pid_t pid = (pid_t)atoi(text);
    assert_true(pid > 0);
    return pid;
}

static void test_two_of_three_etcd_members_stopped_suspend_the_brokers(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "q3");
    pid_t m2 = member_pid(2), m3 = member_pid(3);
    kill(m2, SIGSTOP);
    kill(m3, SIGSTOP);
    /* No quorum, no leader: the brokers serve until their deadline... */
    char msg[512], *text = NULL;
    assert_int_equal(publish_at(cl[o], "q3", "before-the-deadline", msg, sizeof(msg)), 0);
    usleep(((uint64_t)TTL_S * 1000 + 500) * 1000);
    /* ...then suspend, and say so. */
    for (int i = 0; i < NB; i++) {
        assert_int_equal(http_get(C->n[i].admin, "/ready", &text), 503);
        assert_non_null(strstr(text, "suspended"));
        free(text);
    }
    assert_int_not_equal(publish_at(cl[o], "q3", "past-the-deadline", msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "stream owner unavailable"));
    kill(m2, SIGCONT);
    kill(m3, SIGCONT);
    /* A leader again: every node serves again and the stream is served. */
    for (int i = 0; i < NB; i++)
        wait_serving(i);
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    while (publish_at(cl[o], "q3", "after", msg, sizeof(msg)) != 0) {
        if (proc_now_ms() > until)
            fail_msg("q3 not served after the members came back: %s", msg);
        usleep(100 * 1000);
    }
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

/* ---- watch compaction ------------------------------------------------------------------- */

/* POSTs |json| to etcd's JSON gateway at |path|: the status, the answer in
 * |*out| (malloc'd). */
static long etcd_post(const char *path, const char *json, char **out)
{
    char url[320];
    snprintf(url, sizeof(url), "%s%s", C->url, path);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    body b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    *out = b.p;
    return status;
}

/* Compacts etcd's history up to its current revision (returned): a watch
 * that asks for an older revision is then told compact_revision. */
static int64_t etcd_compact_now(void)
{
    char *text = NULL;
    /* The revision: the header of a range of the key "/" (base64 "Lw=="). */
    long st = etcd_post("/v3/kv/range", "{\"key\":\"Lw==\"}", &text);
    if (st != 200)
        fail_msg("etcd range: HTTP %ld: %s", st, text ? text : "");
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    const char *r = json_string_value(json_object_get(json_object_get(j, "header"), "revision"));
    assert_non_null(r);
    int64_t rev = strtoll(r, NULL, 10);
    json_decref(j);
    free(text);
    char req[96];
    snprintf(req, sizeof(req), "{\"revision\":\"%lld\",\"physical\":true}", (long long)rev);
    st = etcd_post("/v3/kv/compaction", req, &text);
    if (st != 200)
        fail_msg("etcd compaction at %lld: HTTP %ld: %s", (long long)rev, st, text ? text : "");
    free(text);
    return rev;
}

/* Kills the single etcd member with SIGKILL, keeping its data (a crash:
 * quicker than etcd.sh halt's graceful stop, which the brokers' deadlines
 * would feel), and waits until it is gone. */
static void etcd_kill_9(void)
{
    char path[160], text[32] = "";
    snprintf(path, sizeof(path), "%s/etcd/pid", C->dir);
    proc_slurp(path, text, sizeof(text));
    pid_t pid = (pid_t)atoi(text);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    while (kill(pid, 0) == 0) { /* not our child: etcd.sh started it */
        if (proc_now_ms() > until)
            fail_msg("etcd (pid %d) still runs after SIGKILL", (int)pid);
        usleep(10 * 1000);
    }
}

/* felix_cluster_watch_restarts_total{reason="compacted"} of node |i|. */
static int64_t compactions_of(int i)
{
    static const char name[] = "\nfelix_cluster_watch_restarts_total{reason=\"compacted\"} ";
    char *text = NULL;
    assert_int_equal(http_get(C->n[i].admin, "/metrics", &text), 200);
    const char *p = strstr(text, name);
    if (p == NULL)
        fail_msg("no felix_cluster_watch_restarts_total{reason=\"compacted\"} in the metrics of %s",
                 C->n[i].id);
    int64_t v = strtoll(p + strlen(name), NULL, 10);
    free(text);
    return v;
}

/* Writes into |out| the first name |prefix|<k>, k >= |*pk|, that rendezvous
 * hashing ranks last at node |last| (equal weights): the bounded load may
 * pass over the first node, never to the last with two streams placed. */
static void stream_ranked_last_at(int last, const char *prefix, int *pk, char *out, size_t cap)
{
    fx_place_node pn[NB];
    for (int i = 0; i < NB; i++)
        pn[i] = (fx_place_node){.id = C->n[i].id, .weight = 1, .up = true};
    for (;; (*pk)++) {
        snprintf(out, cap, "%s%d", prefix, *pk);
        char key[256];
        int kl = fx_place_stream_key(key, sizeof(key), "t1", NS, out);
        assert_true(kl > 0);
        size_t order[NB];
        assert_int_equal(fx_place_order(pn, NB, key, (size_t)kl, order), NB);
        if ((int)order[NB - 1] == last) {
            (*pk)++;
            return;
        }
    }
}

/* Node B is stopped (SIGSTOP, shorter than its lease: TTL 10 s, and etcd's
 * restart renews every lease) while etcd restarts (kill -9, then started on
 * its data), so B's watch connection
 * is gone; two streams are placed on the other nodes and etcd compacts its
 * history to the current revision, past the revision B's watch resumes
 * from. When B runs again its watch restarts, is told the history is
 * compacted, and B lists the cluster's keys again: it counts the
 * compaction and names the new owners (a subscribe through it is
 * redirected to them). Without the re-listing B would never see the two
 * claims. */
static void test_a_watch_resumed_past_a_compaction_lists_again_and_names_new_owners(void **state)
{
    (void)state;
    const int a = 0, b = 1, c = 2;
    fx_client *cl[NB];
    cl[a] = connect_to(a, false);
    cl[c] = connect_to(c, false);
    cl[b] = cl[a]; /* not used: no stream below goes to B */
    char s1[32], s2[32];
    int k = 0;
    stream_ranked_last_at(b, "wc", &k, s1, sizeof(s1));
    stream_ranked_last_at(b, "wc", &k, s2, sizeof(s2));
    int64_t compacted0 = compactions_of(b), restarts0 = counter(b, "watch_restarts");
    assert_int_equal(kill(C->n[b].pid, SIGSTOP), 0);
    uint64_t t0 = proc_now_ms();
    etcd_kill_9();
    etcd_cmd("start"); /* the same member, its data and ports */
    uint64_t back = proc_now_ms();
    wait_serving(a);
    wait_serving(c);
    /* Two claims (two revisions) B's watch has not seen, then the history
     * up to now compacted: B's next revision is below the compaction. */
    int o1 = place(cl, a, s1), o2 = place(cl, a, s2);
    assert_true(o1 != b && o2 != b);
    int64_t rev = etcd_compact_now();
    uint64_t now = proc_now_ms();
    printf("B stopped %llu ms (etcd back after %llu ms); compacted at revision %lld\n",
           (unsigned long long)(now - t0), (unsigned long long)(back - t0), (long long)rev);
    /* B's lease, renewed by etcd's restart, must outlive its pause. */
    if (now - back >= (uint64_t)TTL_S * 1000)
        fail_msg("B stayed stopped %llu ms after etcd came back, past its %d s lease",
                 (unsigned long long)(now - back), TTL_S);
    assert_int_equal(kill(C->n[b].pid, SIGCONT), 0);
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    while (compactions_of(b) == compacted0) {
        if (proc_now_ms() > until)
            fail_msg("B's watch never reported the compaction (watch_restarts %lld -> %lld)",
                     (long long)restarts0, (long long)counter(b, "watch_restarts"));
        usleep(50 * 1000);
    }
    assert_true(counter(b, "watch_restarts") > restarts0);
    while (owner_in_view(b, s1, NULL) != o1 || owner_in_view(b, s2, NULL) != o2) {
        if (proc_now_ms() > until)
            fail_msg("B does not name the owners of %s (%s) and %s (%s)", s1, C->n[o1].id, s2,
                     C->n[o2].id);
        usleep(50 * 1000);
    }
    /* A subscribe through B goes to the owner it names. */
    wait_serving(b);
    fx_client *cb = connect_to(b, false);
    fx_subscription *sub = NULL;
    assert_int_equal(fx_subscribe(&sub, cb, NS, s1, NULL), 0);
    fx_client_stats st;
    assert_int_equal(fx_client_get_stats(cb, &st), 0);
    assert_int_equal(st.redirects, 1);
    char msg[512];
    assert_int_equal(publish_at(cl[o1], s1, "after-compaction", msg, sizeof(msg)), 0);
    fx_event ev;
    assert_int_equal(fx_subscription_next(sub, &ev, PROC_HANG_MS), 0);
    assert_int_equal(ev.len, strlen("after-compaction"));
    fx_unsubscribe(sub);
    (void)fx_client_close(cb, PROC_HANG_MS);
    (void)fx_client_close(cl[a], PROC_HANG_MS);
    (void)fx_client_close(cl[c], PROC_HANG_MS);
}

/* cluster_setup with a lease TTL of at least 30 s (FX_CLUSTER_TTL_S when
 * larger): etcd's restart takes 3-4 s here, which a short TTL's deadline
 * (TTL - 1 s) would turn into suspensions, and B's pause spans the restart
 * and two placements, which took over 10 s once on a loaded machine. */
static int cluster_setup_ttl30(void **state)
{
    const char *env = getenv("FX_CLUSTER_TTL_S");
    if (env != NULL && atoi(env) >= 30)
        return cluster_setup(state);
    char was[16] = "";
    bool had = env != NULL;
    if (had)
        snprintf(was, sizeof(was), "%s", env);
    setenv("FX_CLUSTER_TTL_S", "30", 1);
    int rv = cluster_setup(state);
    if (had)
        setenv("FX_CLUSTER_TTL_S", was, 1);
    else
        unsetenv("FX_CLUSTER_TTL_S");
    return rv;
}

/* ---- graceful moves ---------------------------------------------------------------- */

/* POST http://127.0.0.1:|port||path| with the admin token: the status, the
 * body in |*out| (malloc'd). */
static long http_post(uint16_t port, const char *path, char **out)
{
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    body b = {0};
    struct curl_slist *hdr = curl_slist_append(NULL, "Authorization: Bearer " ADMIN_TOKEN);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    *out = b.p;
    return status;
}

static void node_stop(int i)
{
    kill(C->n[i].pid, SIGTERM);
    int st = 0;
    waitpid(C->n[i].pid, &st, 0);
    proc_track(C->n[i].pid, false);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    C->n[i].pid = 0;
}

/* Waits until node |i| sees |n| nodes. */
static void wait_nodes(int i, size_t n)
{
    uint64_t until = proc_now_ms() + PROC_HANG_MS + (uint64_t)TTL_S * 1000;
    for (;;) {
        json_t *j = cluster_view(i);
        size_t nn = json_array_size(json_object_get(j, "nodes"));
        json_decref(j);
        if (nn == n)
            return;
        if (proc_now_ms() > until)
            fail_msg("node %s sees %zu nodes, not %zu", C->n[i].id, nn, n);
        usleep(50 * 1000);
    }
}

#define MV_MAX 12
#define MV_SEQ 100000

/* One stream under a move: an acked publisher that retries only refusals
 * that say the publish was not appended, and what it saw. */
typedef struct mover {
    char stream[16];
    fx_client *pub;
    atomic_bool stop;
    atomic_uint_fast64_t next; /* the sequence number of the next publish */
    _Atomic uint8_t acked[MV_SEQ]; /* 1: acked, 2: outcome unknown */
    _Atomic uint8_t tries[MV_SEQ]; /* refusals retried */
    char refusal[8][200];          /* the last refusals, by seq % 8 */
    atomic_uint_fast64_t retried, unknown;
    char last_err[256];
    pthread_t thr;
    fx_subscription *sub;
    pthread_t rthr;   /* reader_main */
    char failed[256]; /* the reader's finding ("": none) */
} mover;

/* A refusal that says the publish was not appended: moving, a claim or a
 * placement under way, not served here. */
static bool not_appended(const char *msg)
{
    return strstr(msg, "not appended") != NULL || strstr(msg, "is moving to") != NULL ||
           strstr(msg, "is served by") != NULL || strstr(msg, "owner unavailable") != NULL;
}

static void *mover_main(void *arg)
{
    mover *m = arg;
    char payload[48], msg[512];
    for (uint64_t seq = 0; !atomic_load(&m->stop) && seq < MV_SEQ; seq++) {
        snprintf(payload, sizeof(payload), "%s-%llu", m->stream, (unsigned long long)seq);
        for (int tries = 0;; tries++) {
            int rv = publish_at(m->pub, m->stream, payload, msg, sizeof(msg));
            if (rv == 0) {
                m->acked[seq] = 1;
                break;
            }
            if (not_appended(msg) && tries < 200) {
                atomic_fetch_add(&m->retried, 1);
                m->tries[seq]++;
                snprintf(m->refusal[seq % 8], sizeof(m->refusal[0]), "%.190s", msg);
                usleep(10 * 1000);
                continue;
            }
            m->acked[seq] = 2;
            atomic_fetch_add(&m->unknown, 1);
            snprintf(m->last_err, sizeof(m->last_err), "%s (%.200s)", fx_strerror(rv), msg);
            break;
        }
        atomic_store(&m->next, seq + 1);
        usleep(3 * 1000);
    }
    return NULL;
}

/* Reads |m|'s subscription while it publishes (its queue would shed
 * otherwise) and after, until every acked payload arrived or |m|->failed:
 * each exactly once, in order, with no gap reported. A thread: failures go
 * to |m|->failed for the main thread to report. */
static void *reader_main(void *arg)
{
    mover *m = arg;
    fx_subscription *s = m->sub;
    uint64_t last_seq = 0, last_off = 0, until = 0;
    bool any = false;
    fx_event ev;
    for (;;) {
        if (atomic_load(&m->stop)) {
            /* Publishing ended: read until the last acked one came. */
            uint64_t end = atomic_load(&m->next), last_acked = 0;
            bool want = false;
            for (uint64_t q = 0; q < end; q++)
                if (m->acked[q] == 1) {
                    last_acked = q;
                    want = true;
                }
            if (!want || (any && last_seq >= last_acked))
                break;
            if (until == 0)
                until = proc_now_ms() + PROC_HANG_MS;
            if (proc_now_ms() > until) {
                snprintf(m->failed, sizeof(m->failed),
                         "acked seq %llu never arrived (the last was %llu at offset %llx)",
                         (unsigned long long)last_acked, (unsigned long long)last_seq,
                         (unsigned long long)last_off);
                break;
            }
        }
        int rv = fx_subscription_next(s, &ev, 100);
        if (rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0) {
            fx_sub_error e;
            fx_subscription_error(s, &e);
            snprintf(m->failed, sizeof(m->failed), "the subscription ended: %s (%.150s)",
                     fx_strerror(rv), e.message);
            break;
        }
        char p[64];
        snprintf(p, sizeof(p), "%.*s", (int)(ev.len < 63 ? ev.len : 63), (const char *)ev.payload);
        if (strcmp(p, "hello") == 0)
            continue;
        const char *dash = strrchr(p, '-');
        uint64_t seq = dash != NULL ? strtoull(dash + 1, NULL, 10) : MV_SEQ;
        if (seq >= MV_SEQ || (any && seq <= last_seq)) {
            snprintf(m->failed, sizeof(m->failed),
                     "'%s' (offset %llx) after seq %llu (duplicate or reorder)", p,
                     (unsigned long long)ev.offset, (unsigned long long)last_seq);
            break;
        }
        /* Every acked payload between the last one and this one came
         * (the publisher marks it acked before it publishes the next). */
        for (uint64_t q = any ? last_seq + 1 : 0; q < seq && !m->failed[0]; q++)
            if (m->acked[q] == 1)
                snprintf(m->failed, sizeof(m->failed),
                         "acked seq %llu never arrived (next was %llu at offset %llx after %llx)",
                         (unsigned long long)q, (unsigned long long)seq,
                         (unsigned long long)ev.offset, (unsigned long long)last_off);
        if (!m->failed[0] && (ev.flags & FX_EVENT_GAP))
            snprintf(m->failed, sizeof(m->failed),
                     "a gap of %llu reported before seq %llu (offset %llx after %llx)",
                     (unsigned long long)ev.gap, (unsigned long long)seq,
                     (unsigned long long)ev.offset, (unsigned long long)last_off);
        if (m->failed[0])
            break;
        last_seq = seq;
        last_off = ev.offset;
        any = true;
    }
    return NULL;
}

/* Node |i|'s moves started, done and failed, from one view (0 when down). */
static void moves_of(int i, int64_t *started, int64_t *done, int64_t *failed)
{
    *started = *done = *failed = 0;
    if (C->n[i].pid <= 0)
        return;
    json_t *j = cluster_view(i);
    json_t *k = json_object_get(j, "counters");
    *started = json_integer_value(json_object_get(k, "moves_started"));
    *done = json_integer_value(json_object_get(k, "moves_done"));
    *failed = json_integer_value(json_object_get(k, "moves_failed"));
    json_decref(j);
}

/* Publishes and subscribes to |n| streams owned as they are, runs |act|
 * (the trigger of the moves) while they publish, waits for the moves to
 * end, and checks every stream. Returns the streams whose owner changed. */
static int run_moves(int n, int via, void (*act)(void), int64_t *pdone)
{
    mover *mv[MV_MAX];
    fx_subscription *subs[MV_MAX];
    fx_client *sc = connect_to(via, false);
    int owner0[MV_MAX];
    for (int k = 0; k < n; k++) {
        mv[k] = calloc(1, sizeof(*mv[k]));
        assert_non_null(mv[k]);
        snprintf(mv[k]->stream, sizeof(mv[k]->stream), "mv%d", k);
        owner0[k] = owner_in_view(via, mv[k]->stream, NULL);
        fx_start from = {.kind = FX_START_EARLIEST};
        assert_int_equal(fx_subscribe(&subs[k], sc, NS, mv[k]->stream, &from), 0);
        mv[k]->sub = subs[k];
        assert_int_equal(pthread_create(&mv[k]->rthr, NULL, reader_main, mv[k]), 0);
        /* Through a running node that does not own it (forwarded). */
        int pn = -1;
        for (int d = 1; d < NB && pn < 0; d++)
            if (C->n[(owner0[k] + d) % NB].pid > 0)
                pn = (owner0[k] + d) % NB;
        assert_true(pn >= 0);
        mv[k]->pub = connect_to(pn, false);
        assert_int_equal(pthread_create(&mv[k]->thr, NULL, mover_main, mv[k]), 0);
    }
    usleep(300 * 1000);
    int64_t started0 = 0, ended0 = 0, done0 = 0;
    for (int i = 0; i < NB; i++) {
        int64_t st, dn, fl;
        moves_of(i, &st, &dn, &fl);
        started0 += st;
        ended0 += dn + fl;
        done0 += dn;
    }
    act();
    /* The moves run (rate-limited and jittered) and end. */
    uint64_t until = proc_now_ms() + PROC_HANG_MS + 6000;
    int64_t started, ended, done;
    for (;;) {
        started = ended = done = 0;
        for (int i = 0; i < NB; i++) {
            int64_t st, dn, fl;
            moves_of(i, &st, &dn, &fl);
            started += st;
            done += dn;
            ended += dn + fl;
        }
        if (started > started0 && ended - ended0 == started - started0)
            break;
        if (proc_now_ms() > until)
            fail_msg("moves started %lld, ended %lld", (long long)(started - started0),
                     (long long)(ended - ended0));
        usleep(100 * 1000);
    }
    usleep(500 * 1000); /* publishes at the new owners too */
    int changed = 0;
    for (int k = 0; k < n; k++) {
        atomic_store(&mv[k]->stop, true);
        pthread_join(mv[k]->thr, NULL);
    }
    for (int k = 0; k < n; k++) {
        pthread_join(mv[k]->rthr, NULL);
        if (mv[k]->failed[0]) {
            for (uint64_t q = 0; q < atomic_load(&mv[k]->next); q++)
                if (mv[k]->tries[q])
                    print_message("%s seq %llu: %u refusals, the last: %s\n", mv[k]->stream,
                                  (unsigned long long)q, (unsigned)mv[k]->tries[q],
                                  mv[k]->refusal[q % 8]);
            fail_msg("%s: %s", mv[k]->stream, mv[k]->failed);
        }
        fx_sub_stats sst;
        assert_int_equal(fx_subscription_stats(subs[k], &sst), 0);
        assert_int_equal(sst.gaps, 0);
        assert_int_equal(sst.dropped, 0);
        uint64_t oc = sst.owner_changes;
        int o = owner_in_view(via, mv[k]->stream, NULL);
        print_message("%s: %s -> %s, %llu published (%llu refusals retried, %llu unknown%s%s), "
                      "%llu owner changes\n",
                      mv[k]->stream, C->n[owner0[k]].id, o >= 0 ? C->n[o].id : "-",
                      (unsigned long long)atomic_load(&mv[k]->next),
                      (unsigned long long)atomic_load(&mv[k]->retried),
                      (unsigned long long)atomic_load(&mv[k]->unknown),
                      mv[k]->last_err[0] ? ": " : "", mv[k]->last_err, (unsigned long long)oc);
        assert_int_equal(atomic_load(&mv[k]->unknown), 0);
        changed += o != owner0[k];
        if (o != owner0[k])
            assert_true(oc >= 1);
        fx_unsubscribe(subs[k]);
        (void)fx_client_close(mv[k]->pub, PROC_HANG_MS);
        free(mv[k]);
    }
    (void)fx_client_close(sc, PROC_HANG_MS);
    *pdone = done - done0;
    return changed;
}

static void rebalance_n1(void)
{
    char *text = NULL;
    long st = http_post(C->n[0].admin, "/v1/cluster/rebalance", &text);
    if (st != 200)
        fail_msg("POST /v1/cluster/rebalance: %ld %s", st, text ? text : "");
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    print_message("rebalance: %s\n", text);
    assert_true(json_integer_value(json_object_get(j, "planned")) > 0);
    assert_int_equal(json_array_size(json_object_get(j, "moves")),
                     (size_t)json_integer_value(json_object_get(j, "planned")));
    json_decref(j);
    free(text);
}

static int cluster_setup_join(void **state)
{
    REBALANCE_ON_JOIN = true;
    int rv = cluster_setup(state);
    REBALANCE_ON_JOIN = false;
    return rv;
}

static void test_a_rebalance_while_publishing_moves_streams_with_gap_0_no_duplicate_no_reorder(void **state)
{
    (void)state;
    enum { N = 6 };
    /* n1 alone places the streams; n2 and n3 come back without a
     * rebalance (cluster_rebalance_on_join false): n1 owns them all. */
    node_stop(1);
    node_stop(2);
    wait_nodes(0, 1);
    fx_client *c0 = connect_to(0, false);
    fx_client *cl[NB] = {c0, c0, c0};
    for (int k = 0; k < N; k++) {
        char name[16];
        snprintf(name, sizeof(name), "mv%d", k);
        assert_int_equal(place(cl, 0, name), 0);
    }
    (void)fx_client_close(c0, PROC_HANG_MS);
    for (int i = 1; i < NB; i++) {
        node_start(i);
        wait_serving(i);
    }
    wait_nodes(0, NB);
    /* A dry run plans without moving. */
    char *text = NULL;
    assert_int_equal(http_post(C->n[0].admin, "/v1/cluster/rebalance?dry_run=1", &text), 200);
    assert_non_null(strstr(text, "\"dry_run\":true"));
    free(text);
    assert_int_equal(counter(0, "moves_started"), 0);
    int64_t done = 0;
    int changed = run_moves(N, 0, rebalance_n1, &done);
    print_message("%d of %d streams moved (%lld moves done)\n", changed, N, (long long)done);
    assert_true(done > 0);
    assert_true(changed > 0);
    assert_true(counter(1, "handoff_claims") + counter(2, "handoff_claims") >= done);
}

static void start_n3(void)
{
    node_start(2);
    wait_serving(2);
    /* The others rebalance 1 to 3 s after they saw it join. */
    usleep(3300 * 1000);
}

static void test_a_node_joining_takes_streams_by_graceful_moves_with_gap_0(void **state)
{
    (void)state;
    enum { N = 9 };
    /* The rebalances the nodes' own start ran (1 to 3 s after each saw the
     * others join) are over before the case begins. */
    usleep(3500 * 1000);
    node_stop(2);
    wait_nodes(0, 2);
    wait_nodes(1, 2);
    fx_client *cl[NB];
    cl[0] = connect_to(0, false);
    cl[1] = connect_to(1, false);
    cl[2] = cl[0];
    for (int k = 0; k < N; k++) {
        char name[16];
        snprintf(name, sizeof(name), "mv%d", k);
        (void)place(cl, k % 2, name);
    }
    (void)fx_client_close(cl[0], PROC_HANG_MS);
    (void)fx_client_close(cl[1], PROC_HANG_MS);
    int64_t done = 0;
    int changed = run_moves(N, 0, start_n3, &done);
    int on_n3 = 0;
    for (int k = 0; k < N; k++) {
        char name[16];
        snprintf(name, sizeof(name), "mv%d", k);
        on_n3 += owner_in_view(2, name, NULL) == 2;
    }
    print_message("%d of %d streams moved, %d now on n3 (%lld moves done)\n", changed, N, on_n3,
                  (long long)done);
    assert_true(on_n3 > 0);
    assert_true(done >= on_n3);
}

/* ---- the mirror (docs/cluster.md "Mirror") ------------------------------------------------ */

/* A client of node |i| that does not offer FEATURE_REDIRECT, its
 * subscription queue |policy| with |cap| batches (0: the default). */
static fx_client *connect_legacy(int i, fx_policy policy, uint32_t cap)
{
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = C->n[i].server;
    o.server_name = "localhost";
    o.pin_sha256 = C->pin;
    o.tenant = "t1";
    o.token = "any-token";
    o.connect_timeout_ms = PROC_HANG_MS;
    o.no_redirect = true;
    o.sub_queue_policy = policy;
    if (cap > 0)
        o.sub_queue_capacity = cap;
    fx_client *c = NULL;
    int rv = fx_client_connect(&c, &o);
    if (rv != 0)
        fail_msg("connect to %s: %s", C->n[i].server, fx_strerror(rv));
    return c;
}

/* The sample |name| (a metric without labels) of node |i|'s /metrics. */
static int64_t metric_of(int i, const char *name)
{
    char *text = NULL, key[160];
    assert_int_equal(http_get(C->n[i].admin, "/metrics", &text), 200);
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(text, key);
    int64_t v = p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
    free(text);
    return v;
}

/* Reads the next event of |s| and checks it carries |payload|. */
static uint64_t expect_next(fx_subscription *s, const char *payload)
{
    fx_event ev;
    int rv = fx_subscription_next(s, &ev, PROC_HANG_MS);
    if (rv != 0)
        fail_msg("waiting for '%s': %s", payload, fx_strerror(rv));
    if (ev.len != strlen(payload) || memcmp(ev.payload, payload, ev.len) != 0)
        fail_msg("read '%.*s', want '%s'", (int)ev.len, (const char *)ev.payload, payload);
    assert_true(ev.has_offset);
    assert_int_equal(ev.flags & FX_EVENT_GAP, 0);
    return ev.offset;
}

static void test_a_subscriber_without_the_redirect_feature_is_served_from_a_mirror_at_a_non_owner(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "mr1");
    int other = (o + 1) % NB;
    fx_client *legacy = connect_legacy(other, FX_POLICY_BLOCK, 0);
    fx_subscription *s = NULL, *d = NULL;
    /* Served where it asked: no redirect to follow. */
    assert_int_equal(fx_subscribe(&s, legacy, NS, "mr1", NULL), 0);
    fx_client_stats cst;
    assert_int_equal(fx_client_get_stats(legacy, &cst), 0);
    assert_int_equal(cst.redirects, 0);
    assert_int_equal(fx_subscribe(&d, cl[o], NS, "mr1", NULL), 0); /* direct, for the offsets */
    char msg[256], p[32];
    uint64_t first = 0;
    for (int k = 0; k < 50; k++) {
        snprintf(p, sizeof(p), "m%d", k);
        if (publish_at(cl[o], "mr1", p, msg, sizeof(msg)) != 0)
            fail_msg("publish %s at the owner: %s", p, msg);
    }
    for (int k = 0; k < 50; k++) {
        snprintf(p, sizeof(p), "m%d", k);
        uint64_t off = expect_next(s, p);
        /* The owner's offsets: its epoch in the high bits, as direct. */
        assert_int_equal(off, expect_next(d, p));
        assert_int_equal(off >> 40, 1);
        if (k == 0)
            first = off;
        assert_int_equal(off, first + (uint64_t)k);
    }
    /* A publish to the mirror's node is still forwarded to the owner. */
    assert_int_equal(publish_at(cl[other], "mr1", "fwd", msg, sizeof(msg)), 0);
    assert_int_equal(expect_next(s, "fwd"), expect_next(d, "fwd"));
    /* GET /v1/cluster and the gauge name the mirror. */
    json_t *v = cluster_view(other);
    json_t *ms = json_object_get(v, "mirrors");
    assert_int_equal(json_array_size(ms), 1);
    json_t *m0 = json_array_get(ms, 0);
    assert_string_equal(json_string_value(json_object_get(m0, "stream")), "t1/default/mr1");
    char internal[32]; /* the owner's internal listener: what the mirror dials */
    snprintf(internal, sizeof(internal), "127.0.0.1:%u", C->n[o].internal);
    assert_string_equal(json_string_value(json_object_get(m0, "owner")), internal);
    assert_true(json_is_true(json_object_get(m0, "subscribed")));
    json_decref(v);
    assert_int_equal(metric_of(other, "felix_cluster_mirrors"), 1);
    assert_true(metric_of(other, "felix_cluster_mirror_messages_total") >= 51);
    /* Two local subscribers of the one mirror, different policies: a slow
     * drop_new one (one batch of queue, never read) does not slow the
     * block one, which gets every message. */
    fx_client *slow = connect_legacy(other, FX_POLICY_DROP_NEW, 1);
    fx_subscription *ss = NULL;
    assert_int_equal(fx_subscribe(&ss, slow, NS, "mr1", NULL), 0);
    for (int k = 0; k < 500; k++) {
        snprintf(p, sizeof(p), "n%d", k);
        if (publish_at(cl[o], "mr1", p, msg, sizeof(msg)) != 0)
            fail_msg("publish %s at the owner: %s", p, msg);
    }
    uint64_t base = 0;
    for (int k = 0; k < 500; k++) {
        snprintf(p, sizeof(p), "n%d", k);
        uint64_t off = expect_next(s, p);
        if (k == 0)
            base = off;
        assert_int_equal(off, base + (uint64_t)k);
    }
    fx_sub_stats sst;
    assert_int_equal(fx_subscription_stats(ss, &sst), 0);
    assert_true(sst.received >= 1);
    /* Still one upstream subscription for both. */
    v = cluster_view(other);
    assert_int_equal(json_array_size(json_object_get(v, "mirrors")), 1);
    json_decref(v);
    fx_unsubscribe(ss);
    fx_unsubscribe(s);
    fx_unsubscribe(d);
    (void)fx_client_close(slow, PROC_HANG_MS);
    (void)fx_client_close(legacy, PROC_HANG_MS);
    /* 10 s after its last local subscriber left, the mirror stops and its
     * stream goes. */
    uint64_t left = proc_now_ms();
    while (metric_of(other, "felix_cluster_mirrors") != 0) {
        if (proc_now_ms() - left > 20000)
            fail_msg("the mirror still runs 20 s after its last local subscriber left");
        usleep(200 * 1000);
    }
    assert_true(proc_now_ms() - left >= 9000);
    v = cluster_view(other);
    assert_int_equal(json_array_size(json_object_get(v, "mirrors")), 0);
    json_decref(v);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

static int cluster_setup_lossless(void **state)
{
    LOSSLESS = true;
    int rv = cluster_setup(state);
    LOSSLESS = false;
    return rv;
}

typedef struct flood {
    fx_client *c;
    const char *stream;
    int n;
    int rv;
} flood;

static void *flood_main(void *arg)
{
    flood *f = arg;
    char p[1024];
    memset(p, 'x', sizeof(p));
    for (int k = 0; k < f->n && f->rv == 0; k++) {
        int n = snprintf(p, sizeof(p), "%d", k);
        p[n] = ' ';
        f->rv = fx_publish(f->c, NS, f->stream, p, sizeof(p), FX_ACK_NONE);
    }
    if (f->rv == 0)
        f->rv = fx_flush(f->c, PROC_HANG_MS);
    return NULL;
}

/* Reads event |k| (1 KiB, numbered from 0) of |s|: in order, no gap. */
static void read_flood(fx_subscription *s, int k, const char *who)
{
    fx_event ev;
    int rv = fx_subscription_next(s, &ev, PROC_HANG_MS);
    if (rv != 0)
        fail_msg("%s: message %d: %s", who, k, fx_strerror(rv));
    if ((ev.flags & FX_EVENT_GAP) != 0 || strtol((const char *)ev.payload, NULL, 10) != k)
        fail_msg("%s: message %d: read %.8s (gap %llu)", who, k, (const char *)ev.payload,
                 (unsigned long long)ev.gap);
}

static void test_a_mirrored_subscriber_loses_nothing_in_the_lossless_profile(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "ml1");
    int other = (o + 1) % NB;
    fx_client *legacy = connect_legacy(other, FX_POLICY_BLOCK, 0);
    /* The direct subscriber: a client of the owner that does offer the
     * feature, its queue blocking too. */
    fx_client_opts dop;
    fx_client_opts_init(&dop);
    dop.server = C->n[o].server;
    dop.server_name = "localhost";
    dop.pin_sha256 = C->pin;
    dop.tenant = "t1";
    dop.token = "any-token";
    dop.connect_timeout_ms = PROC_HANG_MS;
    dop.sub_queue_policy = FX_POLICY_BLOCK;
    fx_client *direct = NULL;
    assert_int_equal(fx_client_connect(&direct, &dop), 0);
    fx_subscription *s = NULL, *d = NULL;
    assert_int_equal(fx_subscribe(&s, legacy, NS, "ml1", NULL), 0);
    assert_int_equal(fx_subscribe(&d, direct, NS, "ml1", NULL), 0);
    /* Flat out, 1 KiB each: direct delivery loses nothing in this profile,
     * and neither may the mirror (it stops reading upstream instead). */
    enum { N = 20000 };
    flood f = {.c = cl[o], .stream = "ml1", .n = N};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flood_main, &f), 0);
    for (int k = 0; k < N; k++) { /* both: a blocked one holds the owner's fanout */
        read_flood(s, k, "mirrored");
        read_flood(d, k, "direct");
    }
    pthread_join(t, NULL);
    assert_int_equal(f.rv, 0);
    fx_sub_stats st;
    assert_int_equal(fx_subscription_stats(s, &st), 0);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(metric_of(other, "felix_cluster_mirror_dropped_total"), 0);
    assert_int_equal(metric_of(other, "felix_cluster_mirror_gaps_total"), 0);
    fx_unsubscribe(s);
    fx_unsubscribe(d);
    (void)fx_client_close(direct, PROC_HANG_MS);
    (void)fx_client_close(legacy, PROC_HANG_MS);
    for (int i = 0; i < NB; i++)
        (void)fx_client_close(cl[i], PROC_HANG_MS);
}

static void test_a_mirror_follows_a_new_owner_and_ends_where_its_node_becomes_it(void **state)
{
    (void)state;
    fx_client *cl[NB];
    for (int i = 0; i < NB; i++)
        cl[i] = connect_to(i, false);
    int o = place(cl, 0, "mo1");
    /* A mirror at each of the other two nodes. */
    fx_client *lg[NB] = {0};
    fx_subscription *ls[NB] = {0};
    char msg[512], p[32];
    for (int i = 0; i < NB; i++) {
        if (i == o)
            continue;
        lg[i] = connect_legacy(i, FX_POLICY_BLOCK, 0);
        assert_int_equal(fx_subscribe(&ls[i], lg[i], NS, "mo1", NULL), 0);
    }
    for (int k = 0; k < 5; k++) {
        snprintf(p, sizeof(p), "a%d", k);
        assert_int_equal(publish_at(cl[o], "mo1", p, msg, sizeof(msg)), 0);
    }
    for (int i = 0; i < NB; i++)
        for (int k = 0; k < 5 && ls[i] != NULL; k++) {
            snprintf(p, sizeof(p), "a%d", k);
            assert_int_equal(expect_next(ls[i], p) >> 40, 1);
        }
    (void)fx_client_close(cl[o], 0);
    cl[o] = NULL;
    kill(C->n[o].pid, SIGKILL);
    waitpid(C->n[o].pid, NULL, 0);
    proc_track(C->n[o].pid, false);
    C->n[o].pid = 0;
    /* Publish through a live node until a live node owns the stream. */
    int live = (o + 1) % NB, owner = -1;
    uint64_t t0 = proc_now_ms();
    while (owner < 0) {
        if (publish_at(cl[live], "mo1", "b0", msg, sizeof(msg)) == 0)
            owner = owner_in_view(live, "mo1", NULL);
        else if (named_owner(msg) >= 0 && named_owner(msg) != o)
            live = named_owner(msg);
        if (proc_now_ms() - t0 > (TTL_S + 10) * 1000ull)
            fail_msg("stream mo1 not re-placed after its owner died: %s", msg);
        if (owner < 0)
            usleep(50 * 1000);
    }
    uint64_t epoch = 0;
    uint64_t until = proc_now_ms() + PROC_HANG_MS;
    while ((owner = owner_in_view(owner >= 0 ? owner : live, "mo1", &epoch)) < 0 &&
           proc_now_ms() < until)
        usleep(10 * 1000);
    assert_true(owner >= 0 && owner != o);
    assert_int_equal(epoch, 2);
    int other = NB - o - owner; /* the third node: its mirror follows the new owner */
    /* The new owner's mirror went first: its subscriber's event stream ends. */
    fx_event ev;
    int rv;
    while ((rv = fx_subscription_next(ls[owner], &ev, PROC_HANG_MS)) == 0)
        assert_int_equal(ev.offset >> 40, 1); /* whatever it still had of the old owner */
    assert_int_equal(rv, FX_EEOF);
    fx_unsubscribe(ls[owner]);
    /* Subscribing there again is served by the owner's stream. */
    fx_start from = {.kind = FX_START_EARLIEST};
    assert_int_equal(fx_subscribe(&ls[owner], lg[owner], NS, "mo1", &from), 0);
    assert_int_equal(expect_next(ls[owner], "b0") >> 40, 2);
    /* The other mirror subscribed to the new owner again (counted): it
     * gets the new epoch's messages after the reported jump. */
    assert_int_equal(publish_at(cl[owner], "mo1", "b1", msg, sizeof(msg)), 0);
    bool seen_b1 = false;
    for (int k = 0; k < 3 && !seen_b1; k++) {
        assert_int_equal(fx_subscription_next(ls[other], &ev, PROC_HANG_MS), 0);
        assert_int_equal(ev.offset >> 40, 2);
        if (ev.len == 2 && memcmp(ev.payload, "b1", 2) == 0)
            seen_b1 = true;
        else if (k == 0)
            assert_true((ev.flags & FX_EVENT_GAP) != 0); /* the epoch's jump */
    }
    assert_true(seen_b1);
    assert_true(metric_of(other, "felix_cluster_mirror_upstream_restarts_total") >= 1);
    assert_true(metric_of(other, "felix_cluster_mirror_gaps_total") >= 1);
    /* Its thread may still be leaving a connect to the dead owner. */
    until = proc_now_ms() + PROC_HANG_MS;
    while (metric_of(owner, "felix_cluster_mirrors") != 0 && proc_now_ms() < until)
        usleep(50 * 1000);
    assert_int_equal(metric_of(owner, "felix_cluster_mirrors"), 0);
    for (int i = 0; i < NB; i++) {
        fx_unsubscribe(ls[i]);
        if (lg[i] != NULL)
            (void)fx_client_close(lg[i], PROC_HANG_MS);
        if (cl[i] != NULL)
            (void)fx_client_close(cl[i], PROC_HANG_MS);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(
        test_every_stream_has_one_owner_and_publishes_through_any_node_reach_it, cluster_setup,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_without_forwarding_a_publish_to_a_non_owner_is_refused_naming_it,
        cluster_setup_no_forward, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_two_of_three_etcd_members_stopped_suspend_the_brokers, cluster_setup_etcd3,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(test_a_subscriber_through_a_non_owner_is_redirected_and_receives,
                                    cluster_setup, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_kill_9_of_an_owner_moves_its_stream_within_the_ttl_at_a_higher_epoch, cluster_setup,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(test_an_owner_stopped_past_its_ttl_acks_nothing_after_a_new_claim,
                                    cluster_setup, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_etcd_stopped_past_the_deadline_suspends_the_brokers_until_it_returns, cluster_setup,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(test_kill_9_resumes_the_subscriber_at_the_new_owner_after_a_gap,
                                    cluster_setup, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_streams_placed_by_three_nodes_at_once_stay_within_the_bounded_load, cluster_setup,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_watch_resumed_past_a_compaction_lists_again_and_names_new_owners,
        cluster_setup_ttl30, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_subscriber_without_the_redirect_feature_is_served_from_a_mirror_at_a_non_owner,
        cluster_setup, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_mirrored_subscriber_loses_nothing_in_the_lossless_profile, cluster_setup_lossless,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_mirror_follows_a_new_owner_and_ends_where_its_node_becomes_it, cluster_setup,
        cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_rebalance_while_publishing_moves_streams_with_gap_0_no_duplicate_no_reorder,
        cluster_setup, cluster_teardown),
    cmocka_unit_test_setup_teardown(
        test_a_node_joining_takes_streams_by_graceful_moves_with_gap_0, cluster_setup_join,
        cluster_teardown),
};
FX_TEST_MAIN(tests)
