/* felix-idem-check: a checker of idempotent publish under faults (docs/semantics.md,
 * "Idempotent publish"; docs/durability.md, "Crash tests").
 *
 * It runs felix-broker (--broker) on a durable storage root with
 * durable_fsync_mode=on_commit, and for --seconds keeps --publishers
 * idempotent clients (one fx_client and thread each) publishing acked
 * messages to one durable stream, --window of them in flight per
 * publisher, while
 *   - the broker gets SIGKILL every --kill-min .. --kill-max seconds and is
 *     started again at once on the same root, and
 *   - each client's link is, at random moments, put behind the QUIC
 *     transport's loss hook: a lossy spell (--drop-permille of the datagrams
 *     dropped both ways for 0.5-2 s) or a blackout (every datagram dropped for
 *     longer than the client's idle timeout, so the connection is lost and
 *     re-made).
 * Each payload names its publisher and its index in that publisher's order.
 * At the end the broker runs without faults, every publish is answered (or
 * failed), and a plain client reads the stream from its first offset to an
 * end marker. The ledger holds when
 *   - every publish answered ok is in the stream exactly once,
 *   - no payload is in the stream twice (answered, failed or unanswered),
 *   - each publisher's payloads are in the stream in the order it published
 *     them.
 * Exit status: 0 the ledger holds; 1 violations (listed); 2 usage or set-up
 * error. One summary line is printed either way.
 *
 * Example (the long run of docs/durability.md):
 *   build/release/felix-idem-check --broker build/release/felix-broker \
 *     --dir /var/tmp/idem --seconds 600
 * ctest runs a short one (crash.idem_short). Only the broker this program
 * starts is signalled. Threads: main (the fault schedule and the broker),
 * one per publisher, and the clients' own loops (the completions). */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/test_hooks.h"
#include "felix/felix.h"

extern char **environ;

#define NS "default"
#define STREAM "idem-check"
#define MAX_PUBS 16
#define PAYLOAD_LEN 48

enum { OUT_NONE, OUT_OK, OUT_FAILED };

typedef struct cfg {
    const char *broker;
    const char *dir;
    double seconds;
    unsigned publishers;
    unsigned window;
    double kill_min, kill_max;
    unsigned drop_permille;
    unsigned port, admin;
    unsigned seed;
    double fault_every;   /* mean seconds between link faults of one publisher */
    bool naive_retry;     /* plain clients that publish again what failed */
    bool expect_violation; /* exit 0 only when the ledger finds a violation */
    bool quiet;
} cfg;

typedef struct pub pub;

/* One publish of |p|: its outcome, set once by its completion. */
typedef struct slot {
    pub *p;
    uint64_t index;
} slot;

struct pub {
    unsigned id;
    pthread_t th;
    fx_client *c;
    pthread_mutex_t mu; /* the fields below; completions run on the client's loop */
    pthread_cond_t cv;
    uint8_t *outcome; /* per index: OUT_* */
    uint64_t cap, issued, answered, ok, failed, duplicates;
    unsigned inflight;
    int first_err;
    char first_msg[200];
    uint64_t errs_by_kind[4]; /* timed out, connection lost, refused, other */
    uint64_t *retry;          /* --naive-retry: indexes to publish again */
    size_t nretry, retry_cap;
    uint64_t retried;
};

static cfg C = {
    .seconds = 60,
    .publishers = 4,
    .window = 16,
    .kill_min = 5,
    .kill_max = 20,
    .drop_permille = 200,
    .port = 15730,
    .admin = 18730,
    .seed = 0,
    .fault_every = 10,
};
static pub P[MAX_PUBS];
static atomic_bool stop_publishing;
static pid_t broker_pid;
static char broker_log[512];
static unsigned kills, spells, blackouts, restarts_failed;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double rnd(unsigned *seed)
{
    return (double)rand_r(seed) / ((double)RAND_MAX + 1.0);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (C.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "idem-check: %s\n", line);
}

/* ---- the broker ------------------------------------------------------------------------ */

/* GET /ready on the admin port answers 200. */
static bool broker_ready(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)C.admin)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        static const char req[] = "GET /ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
            char buf[64] = {0};
            ssize_t n = read(fd, buf, sizeof(buf) - 1);
            ok = n > 12 && strncmp(buf + 9, "200", 3) == 0;
        }
    }
    close(fd);
    return ok;
}

static int broker_start(void)
{
    char bind[64], metrics[64], state[600], store[600];
    snprintf(bind, sizeof(bind), "quic_bind=127.0.0.1:%u", C.port);
    snprintf(metrics, sizeof(metrics), "metrics_bind=127.0.0.1:%u", C.admin);
    snprintf(state, sizeof(state), "state_dir=%s/state", C.dir);
    snprintf(store, sizeof(store), "durable_storage_dir=%s/store", C.dir);
    char *argv[] = {(char *)C.broker,
                    "--set", bind,
                    "--set", metrics,
                    "--set", state,
                    "--set", store,
                    "--set", "durable_default=true",
                    "--set", "durable_fsync_mode=on_commit",
                    "--set", "log_level=warn",
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, broker_log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rv = posix_spawn(&broker_pid, C.broker, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rv != 0) {
        fprintf(stderr, "idem-check: cannot start %s: %s\n", C.broker, strerror(rv));
        broker_pid = 0;
        return -1;
    }
    uint64_t deadline = now_ms() + 30000;
    while (now_ms() < deadline) {
        int st;
        if (waitpid(broker_pid, &st, WNOHANG) == broker_pid) {
            fprintf(stderr, "idem-check: felix-broker exited (status %d) at start; see %s\n",
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1, broker_log);
            broker_pid = 0;
            return -1;
        }
        if (broker_ready())
            return 0;
        sleep_ms(20);
    }
    fprintf(stderr, "idem-check: felix-broker not ready after 30 s; see %s\n", broker_log);
    return -1;
}

static void broker_kill(int sig)
{
    if (broker_pid <= 0)
        return;
    kill(broker_pid, sig);
    if (sig == SIGTERM) {
        uint64_t deadline = now_ms() + 10000;
        while (now_ms() < deadline && waitpid(broker_pid, NULL, WNOHANG) != broker_pid)
            sleep_ms(20);
        kill(broker_pid, SIGKILL);
    }
    waitpid(broker_pid, NULL, 0);
    broker_pid = 0;
}

/* ---- publishers ------------------------------------------------------------------------- */

static int client_new(fx_client **out, bool idempotent)
{
    char server[64];
    snprintf(server, sizeof(server), "127.0.0.1:%u", C.port);
    fx_client_opts o;
    fx_client_opts_init(&o);
    o.server = server;
    o.server_name = "localhost";
    o.insecure = true; /* a restarted broker may present another certificate */
    o.tenant = "t1";
    o.idempotent = idempotent;
    o.reconnect = true;
    o.reconnect_initial_ms = 50;
    o.reconnect_max_ms = 500;
    o.idle_timeout_ms = 2000;
    o.keepalive_ms = 400;
    o.connect_timeout_ms = 30000;
    /* A publish waits out the broker's restarts instead of timing out:
     * what fails is then what the broker refused. */
    o.publish_ack_timeout_ms = 120000;
    return fx_client_connect(out, &o);
}

static void on_done(void *user, int rv, const fx_publish_result *res)
{
    slot *s = user;
    pub *p = s->p;
    char msg[200] = "";
    if (rv != 0)
        fx_client_last_error(NULL, msg, sizeof(msg));
    pthread_mutex_lock(&p->mu);
    p->inflight--;
    if (rv != 0 && C.naive_retry && !atomic_load(&stop_publishing)) {
        /* Published again by its thread, as a naive application would. */
        if (p->nretry == p->retry_cap) {
            size_t cap = p->retry_cap ? p->retry_cap * 2 : 64;
            uint64_t *r = realloc(p->retry, cap * sizeof(*r));
            if (r == NULL) {
                fprintf(stderr, "idem-check: out of memory\n");
                exit(2);
            }
            p->retry = r;
            p->retry_cap = cap;
        }
        p->retry[p->nretry++] = s->index;
        p->retried++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        free(s);
        return;
    }
    p->outcome[s->index] = rv == 0 ? OUT_OK : OUT_FAILED;
    p->answered++;
    if (rv == 0) {
        p->ok++;
        p->duplicates += res != NULL && res->duplicate;
    } else {
        p->failed++;
        int k = rv == FX_ETIMEDOUT ? 0 : rv == FX_ECONNLOST ? 1 : rv == FX_EREFUSED ? 2 : 3;
        p->errs_by_kind[k]++;
        if (p->first_err == 0) {
            p->first_err = rv;
            snprintf(p->first_msg, sizeof(p->first_msg), "%s", msg);
        }
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    free(s);
}

static void payload_of(unsigned id, uint64_t index, char *buf)
{
    memset(buf, '.', PAYLOAD_LEN);
    int n = snprintf(buf, PAYLOAD_LEN, "p%u:%" PRIu64 ":", id, index);
    buf[n] = '.'; /* snprintf's NUL replaced: fixed-length payloads */
}

static void *pub_main(void *arg)
{
    pub *p = arg;
    char buf[PAYLOAD_LEN];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->inflight >= C.window && !atomic_load(&stop_publishing))
            pthread_cond_wait(&p->cv, &p->mu);
        if (atomic_load(&stop_publishing) && p->nretry > 0) { /* retries given up */
            while (p->nretry > 0) {
                uint64_t j = p->retry[--p->nretry];
                p->outcome[j] = OUT_FAILED;
                p->answered++;
                p->failed++;
                p->errs_by_kind[3]++;
            }
        }
        uint64_t index;
        if (p->nretry > 0) {
            index = p->retry[--p->nretry];
        } else if (atomic_load(&stop_publishing) || p->issued == p->cap) {
            pthread_mutex_unlock(&p->mu);
            break;
        } else {
            index = p->issued++;
        }
        p->inflight++;
        pthread_mutex_unlock(&p->mu);
        slot *s = malloc(sizeof(*s));
        if (s == NULL) {
            fprintf(stderr, "idem-check: out of memory\n");
            exit(2);
        }
        s->p = p;
        s->index = index;
        payload_of(p->id, index, buf);
        int rv = fx_publish_async_ex(p->c, NS, STREAM, buf, sizeof(buf), FX_ACK_PER_MESSAGE,
                                     on_done, s);
        if (rv != 0) { /* not taken: this attempt was never sent */
            free(s);
            pthread_mutex_lock(&p->mu);
            p->outcome[index] = OUT_FAILED;
            p->answered++;
            p->failed++;
            p->errs_by_kind[3]++;
            p->inflight--;
            if (p->first_err == 0) {
                p->first_err = rv;
                fx_client_last_error(NULL, p->first_msg, sizeof(p->first_msg));
            }
            pthread_mutex_unlock(&p->mu);
            sleep_ms(10);
        }
    }
    return NULL;
}

/* Waits until every publish of |p| is answered, at most |ms|. */
static bool pub_drain(pub *p, uint64_t ms)
{
    uint64_t deadline = now_ms() + ms;
    pthread_mutex_lock(&p->mu);
    while (p->answered < p->issued && now_ms() < deadline) {
        pthread_mutex_unlock(&p->mu);
        sleep_ms(20);
        pthread_mutex_lock(&p->mu);
    }
    bool all = p->answered == p->issued;
    pthread_mutex_unlock(&p->mu);
    return all;
}

/* ---- the check -------------------------------------------------------------------------- */

typedef struct ledger {
    uint32_t *count[MAX_PUBS]; /* per publisher and index: times in the stream */
    uint64_t last[MAX_PUBS];   /* the last index seen + 1 (order) */
    uint64_t records, foreign, twice, missing, out_of_order, failed_present, unanswered_present;
    unsigned printed;
} ledger;

static void violation(ledger *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(ledger *L, const char *fmt, ...)
{
    if (L->printed++ >= 20)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "idem-check: VIOLATION: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void ledger_record(ledger *L, const fx_event *ev)
{
    L->records++;
    unsigned id;
    uint64_t index;
    char tmp[PAYLOAD_LEN + 1];
    size_t n = ev->len < PAYLOAD_LEN ? ev->len : PAYLOAD_LEN;
    memcpy(tmp, ev->payload, n);
    tmp[n] = '\0';
    if (ev->len != PAYLOAD_LEN || sscanf(tmp, "p%u:%" SCNu64 ":", &id, &index) != 2 ||
        id >= C.publishers || index >= P[id].issued) {
        L->foreign++;
        violation(L, "offset %" PRIu64 ": a record no publisher sent (%zu bytes)", ev->offset,
                  ev->len);
        return;
    }
    if (++L->count[id][index] == 2) {
        L->twice++;
        violation(L, "publisher %u's publish %" PRIu64 " is in the stream twice (offset %" PRIu64
                  ", answered %s)",
                  id, index, ev->offset,
                  P[id].outcome[index] == OUT_OK       ? "ok"
                  : P[id].outcome[index] == OUT_FAILED ? "failed"
                                                       : "never");
    }
    if (index + 1 <= L->last[id] && L->count[id][index] == 1) {
        L->out_of_order++;
        violation(L, "publisher %u's publish %" PRIu64 " at offset %" PRIu64
                  " comes after its publish %" PRIu64,
                  id, index, ev->offset, L->last[id] - 1);
    }
    if (index + 1 > L->last[id])
        L->last[id] = index + 1;
}

/* Publishes an end marker (plain client, acked) and reads the stream from
 * its first offset up to it. 0, or -1 when the stream could not be read. */
static int read_stream(ledger *L)
{
    fx_client *c;
    int rv = client_new(&c, false);
    if (rv != 0) {
        fprintf(stderr, "idem-check: reader cannot connect: %s\n", fx_strerror(rv));
        return -1;
    }
    static const char end[] = "end-of-check";
    rv = fx_publish(c, NS, STREAM, end, sizeof(end) - 1, FX_ACK_PER_MESSAGE);
    if (rv != 0) {
        char msg[200];
        fx_client_last_error(NULL, msg, sizeof(msg));
        fprintf(stderr, "idem-check: end marker not published: %s (%s)\n", fx_strerror(rv), msg);
        fx_client_close(c, 5000);
        return -1;
    }
    fx_start st = {.kind = FX_START_EARLIEST};
    fx_subscription *s = NULL;
    rv = fx_subscribe(&s, c, NS, STREAM, &st);
    if (rv != 0) {
        fprintf(stderr, "idem-check: cannot subscribe: %s\n", fx_strerror(rv));
        fx_client_close(c, 5000);
        return -1;
    }
    int result = -1;
    for (;;) {
        fx_event ev;
        rv = fx_subscription_next(s, &ev, 30000);
        if (rv != 0) {
            fprintf(stderr, "idem-check: reading the stream stopped after %" PRIu64 " records: %s\n",
                    L->records, fx_strerror(rv));
            break;
        }
        if (ev.gap != 0) {
            fprintf(stderr, "idem-check: the reader missed %" PRIu64 " records (gap)\n", ev.gap);
            break;
        }
        if (ev.len == sizeof(end) - 1 && memcmp(ev.payload, end, ev.len) == 0) {
            result = 0;
            break;
        }
        ledger_record(L, &ev);
    }
    fx_unsubscribe(s);
    fx_client_close(c, 5000);
    return result;
}

/* ---- faults ----------------------------------------------------------------------------- */

typedef struct fault {
    pub *p;
    uint64_t heal_at; /* 0: no fault on */
} fault;

static void fault_begin(fault *f, unsigned *seed)
{
    bool blackout = rnd(seed) < 0.4;
    uint32_t permille = blackout ? 1000 : C.drop_permille;
    uint64_t len = blackout ? 2500 + (uint64_t)(rnd(seed) * 1500) : 500 + (uint64_t)(rnd(seed) * 1500);
    if (fxc_client_test_link(f->p->c, true, 0, permille, NULL) == 0) {
        f->heal_at = now_ms() + len;
        if (blackout)
            blackouts++;
        else
            spells++;
    }
}

static void fault_heal(fault *f)
{
    if (f->heal_at == 0)
        return;
    /* Retried until the client's loop takes it: a link left lossy would
     * turn the rest of the run into a blackout. */
    for (int i = 0; i < 100; i++) {
        int rv = fxc_client_test_link(f->p->c, true, 0, 0, NULL);
        if (rv == 0 || rv == FX_ECLOSED)
            break;
        sleep_ms(50);
    }
    f->heal_at = 0;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: felix-idem-check --broker PATH --dir DIR [options]\n"
            "\n"
            "Idempotent publishers against a felix-broker that is killed (SIGKILL) and\n"
            "restarted, with lossy and cut client links; then checks that every publish\n"
            "answered ok is in the stream exactly once, nothing is in it twice, and each\n"
            "publisher's records are in its order. Exit 0 when that holds, 1 otherwise.\n"
            "\n"
            "  --broker PATH        the felix-broker to run\n"
            "  --dir DIR            storage root, state and the broker's log (emptied first)\n"
            "  --seconds S          how long to publish under faults (default 60)\n"
            "  --publishers N       idempotent clients, a thread each (default 4, at most 16)\n"
            "  --window W           acked publishes in flight per publisher (default 16)\n"
            "  --kill-min S, --kill-max S   SIGKILL of the broker every S (default 5 .. 20)\n"
            "  --drop-permille N    datagrams dropped in a lossy spell (default 200)\n"
            "  --port P, --admin P  the broker's QUIC and admin ports (default 15730, 18730)\n"
            "  --seed N             the fault schedule's seed (default: the time)\n"
            "  --fault-every S      mean seconds between link faults of a publisher (default 10)\n"
            "  --naive-retry        plain (not idempotent) clients that publish again what\n"
            "                       failed, as an application without idempotence would\n"
            "  --expect-violation   exit 0 only when the ledger finds a violation (with\n"
            "                       --naive-retry: proof that the check can fail)\n"
            "  --quiet              only the summary line\n"
            "\n"
            "Example:\n"
            "  felix-idem-check --broker build/release/felix-broker --dir /var/tmp/idem \\\n"
            "    --seconds 600\n");
}

static int parse(int argc, char **argv)
{
    static const struct option opts[] = {
        {"broker", 1, 0, 'b'},   {"dir", 1, 0, 'd'},       {"seconds", 1, 0, 's'},
        {"publishers", 1, 0, 'n'}, {"window", 1, 0, 'w'},  {"kill-min", 1, 0, 'k'},
        {"kill-max", 1, 0, 'K'}, {"drop-permille", 1, 0, 'D'}, {"port", 1, 0, 'p'},
        {"admin", 1, 0, 'a'},    {"seed", 1, 0, 'S'},      {"quiet", 0, 0, 'q'},
        {"fault-every", 1, 0, 'f'}, {"naive-retry", 0, 0, 'N'}, {"expect-violation", 0, 0, 'E'},
        {"help", 0, 0, 'h'},     {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'b': C.broker = optarg; break;
        case 'd': C.dir = optarg; break;
        case 's': C.seconds = atof(optarg); break;
        case 'n': C.publishers = (unsigned)atoi(optarg); break;
        case 'w': C.window = (unsigned)atoi(optarg); break;
        case 'k': C.kill_min = atof(optarg); break;
        case 'K': C.kill_max = atof(optarg); break;
        case 'D': C.drop_permille = (unsigned)atoi(optarg); break;
        case 'p': C.port = (unsigned)atoi(optarg); break;
        case 'a': C.admin = (unsigned)atoi(optarg); break;
        case 'S': C.seed = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'q': C.quiet = true; break;
        case 'f': C.fault_every = atof(optarg); break;
        case 'N': C.naive_retry = true; break;
        case 'E': C.expect_violation = true; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
    }
    const char *bad = NULL;
    if (C.broker == NULL || C.dir == NULL)
        bad = "--broker and --dir are required";
    else if (C.seconds <= 0)
        bad = "--seconds must be above 0";
    else if (C.publishers < 1 || C.publishers > MAX_PUBS)
        bad = "--publishers must be 1 .. 16";
    else if (C.window < 1 || C.window > 4096)
        bad = "--window must be 1 .. 4096";
    else if (C.kill_min <= 0 || C.kill_max < C.kill_min)
        bad = "--kill-min must be above 0 and at most --kill-max";
    else if (C.fault_every <= 0)
        bad = "--fault-every must be above 0";
    else if (C.drop_permille > 1000)
        bad = "--drop-permille must be 0 .. 1000";
    else if (C.port == 0 || C.port > 65535 || C.admin == 0 || C.admin > 65535)
        bad = "--port and --admin must be 1 .. 65535";
    else if (optind != argc)
        bad = "unexpected argument";
    if (bad != NULL) {
        fprintf(stderr, "felix-idem-check: %s\n", bad);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rv = parse(argc, argv);
    if (rv != 0)
        return rv > 0 ? 0 : 2;
    if (C.seed == 0)
        C.seed = (unsigned)time(NULL);
    unsigned seed = C.seed;
    signal(SIGPIPE, SIG_IGN);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/store' '%s/state' && mkdir -p '%s/store' '%s/state'",
             C.dir, C.dir, C.dir, C.dir);
    if (mkdir(C.dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "idem-check: cannot create %s: %s\n", C.dir, strerror(errno));
        return 2;
    }
    if (system(cmd) != 0) {
        fprintf(stderr, "idem-check: cannot prepare %s\n", C.dir);
        return 2;
    }
    chmod(C.dir, 0700);
    snprintf(broker_log, sizeof(broker_log), "%s/broker.log", C.dir);
    unlink(broker_log);
    if (broker_start() != 0)
        return 2;

    /* Room for every publish the run can issue: a generous rate bound. */
    uint64_t cap = (uint64_t)(C.seconds * 200000.0) + 100000;
    for (unsigned i = 0; i < C.publishers; i++) {
        pub *p = &P[i];
        p->id = i;
        p->cap = cap;
        p->outcome = calloc(cap, 1);
        if (p->outcome == NULL) {
            fprintf(stderr, "idem-check: out of memory\n");
            return 2;
        }
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        rv = client_new(&p->c, !C.naive_retry);
        if (rv != 0) {
            char msg[200];
            fx_client_last_error(NULL, msg, sizeof(msg));
            fprintf(stderr, "idem-check: publisher %u cannot connect: %s (%s)\n", i,
                    fx_strerror(rv), msg);
            broker_kill(SIGKILL);
            return 2;
        }
    }
    say("seed %u, %u %s publishers x %u in flight, %.0f s, kill every %.1f-%.1f s", C.seed,
        C.publishers, C.naive_retry ? "plain, naively retrying," : "idempotent", C.window,
        C.seconds, C.kill_min, C.kill_max);
    for (unsigned i = 0; i < C.publishers; i++)
        pthread_create(&P[i].th, NULL, pub_main, &P[i]);

    fault faults[MAX_PUBS] = {{0}};
    for (unsigned i = 0; i < C.publishers; i++)
        faults[i].p = &P[i];
    uint64_t t0 = now_ms(), end = t0 + (uint64_t)(C.seconds * 1000.0);
    uint64_t next_kill = t0 + (uint64_t)((C.kill_min + rnd(&seed) * (C.kill_max - C.kill_min)) * 1000);
    int status = 0;
    while (now_ms() < end) {
        sleep_ms(50);
        uint64_t now = now_ms();
        for (unsigned i = 0; i < C.publishers; i++) {
            if (faults[i].heal_at != 0 && now >= faults[i].heal_at)
                fault_heal(&faults[i]);
            else if (faults[i].heal_at == 0 && rnd(&seed) < 0.05 / C.fault_every) /* 50 ms turns */
                fault_begin(&faults[i], &seed);
        }
        if (now >= next_kill) {
            broker_kill(SIGKILL);
            kills++;
            uint64_t acked = 0;
            for (unsigned i = 0; i < C.publishers; i++) {
                pthread_mutex_lock(&P[i].mu);
                acked += P[i].ok;
                pthread_mutex_unlock(&P[i].mu);
            }
            say("kill %u at %.1f s (%" PRIu64 " answered ok so far)", kills,
                (double)(now - t0) / 1000.0, acked);
            if (broker_start() != 0) {
                restarts_failed++;
                status = 2;
                break;
            }
            next_kill = now_ms() +
                        (uint64_t)((C.kill_min + rnd(&seed) * (C.kill_max - C.kill_min)) * 1000);
        }
    }
    for (unsigned i = 0; i < C.publishers; i++)
        fault_heal(&faults[i]);
    atomic_store(&stop_publishing, true);
    for (unsigned i = 0; i < C.publishers; i++) {
        pthread_mutex_lock(&P[i].mu);
        pthread_cond_broadcast(&P[i].cv);
        pthread_mutex_unlock(&P[i].mu);
        pthread_join(P[i].th, NULL);
    }
    uint64_t unanswered = 0;
    for (unsigned i = 0; i < C.publishers; i++) {
        if (!pub_drain(&P[i], 150000))
            say("publisher %u: %" PRIu64 " publishes never answered", i,
                P[i].issued - P[i].answered);
        pthread_mutex_lock(&P[i].mu);
        unanswered += P[i].issued - P[i].answered;
        pthread_mutex_unlock(&P[i].mu);
    }

    ledger L = {0};
    for (unsigned i = 0; i < C.publishers; i++) {
        L.count[i] = calloc(P[i].issued ? P[i].issued : 1, sizeof(uint32_t));
        if (L.count[i] == NULL) {
            fprintf(stderr, "idem-check: out of memory\n");
            return 2;
        }
    }
    bool read_ok = status == 0 && read_stream(&L) == 0;
    uint64_t issued = 0, ok = 0, failed = 0, dups = 0, retried = 0, errs[4] = {0};
    for (unsigned i = 0; i < C.publishers; i++) {
        pub *p = &P[i];
        pthread_mutex_lock(&p->mu);
        issued += p->issued;
        ok += p->ok;
        failed += p->failed;
        dups += p->duplicates;
        retried += p->retried;
        for (int k = 0; k < 4; k++)
            errs[k] += p->errs_by_kind[k];
        for (uint64_t j = 0; read_ok && j < p->issued; j++) {
            if (p->outcome[j] == OUT_OK && L.count[i][j] == 0) {
                L.missing++;
                violation(&L, "publisher %u's publish %" PRIu64 " was answered ok but is not in "
                          "the stream", i, j);
            } else if (p->outcome[j] == OUT_FAILED && L.count[i][j] > 0) {
                L.failed_present++;
            } else if (p->outcome[j] == OUT_NONE && L.count[i][j] > 0) {
                L.unanswered_present++;
            }
        }
        if (p->first_err != 0)
            say("publisher %u: first failure %s (%s)", i, fx_strerror(p->first_err), p->first_msg);
        pthread_mutex_unlock(&p->mu);
    }
    broker_kill(SIGTERM);
    for (unsigned i = 0; i < C.publishers; i++)
        fx_client_close(P[i].c, 5000);

    bool holds = read_ok && L.twice == 0 && L.missing == 0 && L.out_of_order == 0 && L.foreign == 0;
    printf("idem-check: %s: seed %u, %.0f s, %u publishers x %u; %u kills, %u lossy spells, %u "
           "blackouts; %" PRIu64 " published, %" PRIu64 " answered ok (%" PRIu64
           " as duplicates; %" PRIu64 " naive retries), %" PRIu64 " failed (timed out %" PRIu64 ", connection lost %" PRIu64
           ", refused %" PRIu64 ", other %" PRIu64 "; %" PRIu64 " of them in the stream), %" PRIu64
           " unanswered; stream: %" PRIu64 " records, written twice %" PRIu64
           ", answered ok but missing %" PRIu64 ", out of order %" PRIu64 ", foreign %" PRIu64 "\n",
           holds ? "HOLDS" : read_ok ? "VIOLATED" : "NOT CHECKED", C.seed, C.seconds,
           C.publishers, C.window, kills, spells, blackouts, issued, ok, dups, retried, failed, errs[0],
           errs[1], errs[2], errs[3], L.failed_present, unanswered, L.records, L.twice, L.missing,
           L.out_of_order, L.foreign);
    if (!read_ok)
        fprintf(stderr, "idem-check: the stream was not read to its end; see %s\n", broker_log);
    for (unsigned i = 0; i < C.publishers; i++) {
        free(P[i].outcome);
        free(P[i].retry);
        free(L.count[i]);
        pthread_mutex_destroy(&P[i].mu);
        pthread_cond_destroy(&P[i].cv);
    }
    if (status != 0 || !read_ok)
        return 2;
    if (C.expect_violation)
        return holds ? 1 : 0;
    return holds ? 0 : 1;
}
