/* resume_subscriber: prints the events of NS/STREAM and remembers how far
 * it got in OFFSET_FILE, so the next run resumes after the last event it
 * printed: none lost, none printed twice (within the broker's replay
 * window). Stops after COUNT events (0: until Ctrl-C).
 *
 *   cc resume_subscriber.c -o resume_subscriber $(pkg-config --cflags --libs felix)
 *   FELIX_SERVER=127.0.0.1:5000 FELIX_PIN=<sha256> ./resume_subscriber default demo demo.offset
 *
 * The first run (no OFFSET_FILE) starts at the earliest event the broker
 * keeps. If the saved offset has left the replay window the broker answers
 * "cursor too old" with the earliest offset it still has, and this program
 * resumes there, saying how many events were lost. Connection variables as
 * in publisher.c. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <felix/felix.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

static void report(const char *what, int rv)
{
    char detail[512];
    fx_client_last_error(NULL, detail, sizeof(detail));
    fprintf(stderr, "resume_subscriber: %s: %s (%s)%s%s\n", what, fx_strerror(rv), fx_errname(rv),
            detail[0] ? ": " : "", detail);
}

/* Reads the last processed offset from |path| into |*off|. Returns 1 if
 * there is one, 0 if the file does not exist, -1 on a bad file. */
static int load_offset(const char *path, uint64_t *off)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return errno == ENOENT ? 0 : -1;
    int n = fscanf(f, "%" SCNu64, off);
    fclose(f);
    return n == 1 ? 1 : -1;
}

/* Writes |off| to |path| through a temporary file and rename(), so a crash
 * leaves the old or the new offset, never half of one. */
static int save_offset(const char *path, uint64_t off)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -1;
    int ok = fprintf(f, "%" PRIu64 "\n", off) > 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
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
    /* Wait for this program rather than drop events when it is slow. */
    o.sub_queue_policy = FX_POLICY_BLOCK;
    return fx_client_connect(pc, &o);
}

/* Subscribes from |start|; on "cursor too old" resubscribes from the
 * earliest offset the broker still has. */
static int subscribe_resuming(fx_subscription **ps, fx_client *c, const char *ns,
                              const char *stream, fx_start start)
{
    int rv = fx_subscribe(ps, c, ns, stream, &start);
    if (rv != FX_ECURSOR_TOO_OLD)
        return rv;
    fx_sub_error e;
    fx_subscription_error(*ps, &e);
    fx_unsubscribe(*ps);
    *ps = NULL;
    fprintf(stderr,
            "resume_subscriber: offset %" PRIu64 " is gone (%s); resuming at %" PRIu64 ", %" PRIu64
            " event(s) lost\n",
            e.requested, e.message, e.available, e.available - e.requested);
    start = (fx_start){.kind = FX_START_OFFSET, .offset = e.available};
    return fx_subscribe(ps, c, ns, stream, &start);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: resume_subscriber NS STREAM OFFSET_FILE [COUNT]\n");
        return 2;
    }
    const char *ns = argv[1], *stream = argv[2], *path = argv[3];
    long count = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    uint64_t last = 0;
    int have = load_offset(path, &last);
    if (have < 0) {
        fprintf(stderr, "resume_subscriber: %s does not hold an offset\n", path);
        return 1;
    }
    fx_start start = {.kind = FX_START_EARLIEST};
    if (have == 1)
        start = (fx_start){.kind = FX_START_OFFSET, .offset = last + 1};

    fx_client *c = NULL;
    int rv = connect_from_env(&c);
    if (rv != 0) {
        report("connect", rv);
        return 1;
    }
    fx_subscription *s = NULL;
    rv = subscribe_resuming(&s, c, ns, stream, start);
    if (rv != 0) {
        report("subscribe", rv);
        fx_unsubscribe(s);
        fx_client_close(c, 1000);
        return 1;
    }
    long got = 0;
    while (!stop && (count == 0 || got < count)) {
        fx_event ev;
        /* A bounded wait, so Ctrl-C is noticed within 200 ms. */
        rv = fx_subscription_next(s, &ev, 200);
        if (rv == FX_ETIMEDOUT)
            continue;
        if (rv != 0)
            break;
        if (ev.flags & FX_EVENT_GAP)
            fprintf(stderr, "resume_subscriber: %" PRIu64 " event(s) missed\n", ev.gap);
        printf("%" PRIu64 " %.*s\n", ev.offset, (int)ev.len, (const char *)ev.payload);
        fflush(stdout);
        if (ev.has_offset && save_offset(path, ev.offset) != 0) {
            fprintf(stderr, "resume_subscriber: cannot write %s: %s\n", path, strerror(errno));
            rv = -errno;
            break;
        }
        got++;
    }
    if (rv != 0 && rv != FX_ETIMEDOUT) {
        fx_sub_error e;
        fx_subscription_error(s, &e);
        fprintf(stderr, "resume_subscriber: subscription ended: %s (%s)\n", fx_strerror(rv),
                e.message);
    }
    fx_unsubscribe(s);
    fx_client_close(c, 1000);
    return rv == 0 || rv == FX_ETIMEDOUT ? 0 : 1;
}
