/* felix-bench's operating-system helpers (see bench_sys.h): clock, futex,
 * /proc readings, the RSS sampler thread and the admin endpoint reads. */
#include "bench_sys.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/metrics.h"

uint64_t fx_bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fx_bench_futex_wait(_Atomic int *a, int val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    /* EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again". */
    (void)syscall(SYS_futex, (int *)a, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

void fx_bench_futex_wake(_Atomic int *a)
{
    (void)syscall(SYS_futex, (int *)a, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* ---- /proc ---------------------------------------------------------------------- */

static int read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

int fx_bench_proc_cpu(int pid, double *user, double *sys)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), pid > 0 ? "/proc/%d/stat" : "/proc/self/stat", pid);
    int rv = read_file(path, buf, sizeof(buf));
    if (rv != 0)
        return rv;
    /* The command name may hold spaces; fields after it start at state. */
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -EINVAL;
    double hz = (double)sysconf(_SC_CLK_TCK);
    *user = (double)ut / hz;
    *sys = (double)st / hz;
    return 0;
}

static uint64_t status_field(const char *buf, const char *name)
{
    const char *p = strstr(buf, name);
    if (p == NULL)
        return 0;
    return strtoull(p + strlen(name), NULL, 10);
}

int fx_bench_proc_rss(int pid, uint64_t *rss_kb, uint64_t *hwm_kb)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    int rv = read_file(path, buf, sizeof(buf));
    if (rv != 0)
        return rv;
    *rss_kb = status_field(buf, "VmRSS:");
    *hwm_kb = status_field(buf, "VmHWM:");
    return 0;
}

uint64_t fx_bench_proc_vcsw(int pid)
{
    char dir[64], path[384], buf[4096];
    if (pid > 0)
        snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
    else
        snprintf(dir, sizeof(dir), "/proc/self/task");
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
        if (read_file(path, buf, sizeof(buf)) == 0)
            sum += status_field(buf, "\nvoluntary_ctxt_switches:");
    }
    closedir(d);
    return sum;
}

int fx_bench_host_cpu(double *busy, double *total)
{
    char buf[1024];
    int rv = read_file("/proc/stat", buf, sizeof(buf));
    if (rv != 0)
        return rv;
    unsigned long long v[8] = {0};
    if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) != 8)
        return -EINVAL;
    double hz = (double)sysconf(_SC_CLK_TCK);
    unsigned long long tot = 0;
    for (int i = 0; i < 8; i++)
        tot += v[i];
    *busy = (double)(tot - v[3] - v[4]) / hz;
    *total = (double)tot / hz;
    return 0;
}

/* ---- RSS sampler ---------------------------------------------------------------- */

static void sample_once(fx_bench_rss_sampler *s)
{
    uint64_t rss, hwm;
    if (fx_bench_proc_rss(s->pid, &rss, &hwm) != 0)
        return;
    if (rss > atomic_load(&s->peak_kb))
        atomic_store(&s->peak_kb, rss);
    if (rss < atomic_load(&s->min_kb))
        atomic_store(&s->min_kb, rss);
    if (atomic_load(&s->samples) == 0)
        atomic_store(&s->first_kb, rss);
    atomic_store(&s->last_kb, rss);
    atomic_fetch_add(&s->samples, 1);
}

static bool sampler_full(fx_bench_rss_sampler *s)
{
    return s->limit && atomic_load(&s->samples) >= s->limit;
}

/* Sleeps until |t| (monotonic ns), in slices short enough to see a stop.
 * Returns false when stopped first. */
static bool sleep_until(fx_bench_rss_sampler *s, uint64_t t)
{
    for (uint64_t now; !atomic_load(&s->stop) && (now = fx_bench_now_ns()) < t;) {
        uint64_t ns = t - now < 100000000u ? t - now : 100000000u;
        usleep((useconds_t)(ns / 1000u));
    }
    return !atomic_load(&s->stop);
}

static void *sampler_main(void *arg)
{
    fx_bench_rss_sampler *s = arg;
    uint64_t period = (uint64_t)s->period_ms * 1000000u;
    uint64_t next = fx_bench_now_ns() + (uint64_t)s->delay_ms * 1000000u;
    if (!sleep_until(s, next))
        return NULL;
    while (!sampler_full(s)) {
        sample_once(s);
        next += period;
        if (!sleep_until(s, next))
            break;
    }
    if (!sampler_full(s))
        sample_once(s);
    return NULL;
}

int fx_bench_rss_watch_start(fx_bench_rss_sampler *s, int pid, int delay_ms, int period_ms,
                             uint64_t limit)
{
    s->pid = pid;
    s->period_ms = period_ms;
    s->delay_ms = delay_ms;
    s->limit = limit;
    atomic_init(&s->stop, false);
    atomic_init(&s->peak_kb, 0);
    atomic_init(&s->min_kb, UINT64_MAX);
    atomic_init(&s->first_kb, 0);
    atomic_init(&s->last_kb, 0);
    atomic_init(&s->samples, 0);
    int rv = pthread_create(&s->th, NULL, sampler_main, s);
    s->running = rv == 0;
    return -rv;
}

int fx_bench_rss_start(fx_bench_rss_sampler *s, int pid, int period_ms)
{
    return fx_bench_rss_watch_start(s, pid, 0, period_ms, 0);
}

uint64_t fx_bench_rss_stop(fx_bench_rss_sampler *s)
{
    if (!s->running)
        return 0;
    atomic_store(&s->stop, true);
    pthread_join(s->th, NULL);
    s->running = false;
    return atomic_load(&s->peak_kb);
}

/* ---- /metrics ------------------------------------------------------------------- */

static int http_connect(const char *addr)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host))
        return -EINVAL;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -EINVAL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* Reads the whole answer (bounded by |cap|) into |buf|. */
static int http_read(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return 0;
}

/* Value of the unlabelled series |name| in a Prometheus text body. */
static uint64_t prom_value(const char *body, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = body; (p = strstr(p, name)) != NULL; p += len) {
        if ((p == body || p[-1] == '\n') && p[len] == ' ')
            return (uint64_t)strtod(p + len + 1, NULL);
    }
    return 0;
}

/* GETs |path| from |addr| into a new buffer (*|body|, the whole answer,
 * headers included, freed by the caller on success). Returns 0, -errno,
 * -ENOMEM or -EPROTO. */
static int http_get(const char *addr, const char *path, char **body)
{
    int fd = http_connect(addr);
    if (fd < 0)
        return fd;
    char req[256];
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    if (rl < 0 || (size_t)rl >= sizeof(req)) {
        close(fd);
        return -EINVAL;
    }
    int rv = write(fd, req, (size_t)rl) == (ssize_t)rl ? 0 : -EIO;
    size_t cap = 4u << 20;
    char *buf = rv == 0 ? malloc(cap) : NULL;
    if (rv == 0 && buf == NULL)
        rv = -ENOMEM;
    if (rv == 0)
        rv = http_read(fd, buf, cap);
    close(fd);
    if (rv == 0 && strncmp(buf, "HTTP/1.", 7) != 0)
        rv = -EPROTO;
    if (rv == 0 && strncmp(buf + 8, " 200", 4) != 0)
        rv = -EPROTO;
    if (rv != 0) {
        free(buf);
        return rv;
    }
    *body = buf;
    return 0;
}

/* GETs /metrics from |addr| (see http_get). */
static int scrape_body(const char *addr, char **body)
{
    return http_get(addr, "/metrics", body);
}

int fx_bench_scrape_drops(const char *addr, fx_bench_drops *d)
{
    char *buf;
    int rv = scrape_body(addr, &buf);
    if (rv != 0)
        return rv;
    d->subscribe_dropped = prom_value(buf, "felix_subscribe_dropped_total");
    d->lane_dropped = prom_value(buf, "felix_subscriber_lane_dropped_total");
    d->lane_dropped_events = prom_value(buf, "felix_subscriber_lane_dropped_events_total");
    d->ingress_dropped = prom_value(buf, "felix_broker_ingress_dropped_total");
    d->ingress_dropped_messages = prom_value(buf, "felix_broker_ingress_dropped_messages_total");
    d->subscriber_disconnect = prom_value(buf, "felix_subscriber_disconnect_total");
    d->datagrams_sent = prom_value(buf, "felix_quic_datagrams_sent_total");
    d->bytes_sent = prom_value(buf, "felix_quic_bytes_sent_total");
    free(buf);
    return 0;
}

int fx_bench_scrape_value(const char *addr, const char *name, uint64_t *v)
{
    char *buf;
    int rv = scrape_body(addr, &buf);
    if (rv != 0)
        return rv;
    *v = prom_value(buf, name);
    free(buf);
    return 0;
}

int fx_bench_local_drops(fx_bench_drops *d)
{
    fx_metrics_snapshot *snap = malloc(sizeof(*snap));
    if (snap == NULL)
        return -ENOMEM;
    fx_metrics_snapshot_take(snap);
    d->subscribe_dropped = snap->c.subscribe_dropped;
    d->lane_dropped = snap->c.subscriber_lane_dropped;
    d->lane_dropped_events = snap->c.subscriber_lane_dropped_events;
    d->ingress_dropped = snap->c.ingress_dropped;
    d->ingress_dropped_messages = snap->c.ingress_dropped_messages;
    d->subscriber_disconnect = snap->c.subscriber_disconnect;
    free(snap);
    return 0;
}

int fx_bench_replay_records(const char *admin, bool in_process, uint64_t *v)
{
    if (admin != NULL)
        return fx_bench_scrape_value(admin, "felix_storage_read_records_total", v);
    if (!in_process)
        return -ENOTSUP;
    fx_metrics_snapshot *snap = malloc(sizeof(*snap));
    if (snap == NULL)
        return -ENOMEM;
    fx_metrics_snapshot_take(snap);
    *v = snap->c.storage_replay_records;
    free(snap);
    return 0;
}
/* ---- /v1/subscriptions ----------------------------------------------------------- */

int fx_bench_sub_counters_parse(const char *json, fx_bench_sub_counter *subs, size_t n)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    json_t *arr = json_object_get(root, "subscriptions");
    if (!json_is_array(arr)) {
        json_decref(root);
        return -EPROTO;
    }
    for (size_t i = 0; i < n; i++)
        subs[i].found = false;
    size_t k;
    json_t *e;
    json_array_foreach(arr, k, e)
    {
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        for (size_t i = 0; i < n; i++) {
            if (subs[i].found || (json_int_t)subs[i].id != id)
                continue;
            subs[i].found = true;
            subs[i].queue_dropped =
                (uint64_t)json_integer_value(json_object_get(e, "queue_dropped"));
            subs[i].lane_dropped = (uint64_t)json_integer_value(json_object_get(e, "lane_dropped"));
            subs[i].held = (uint64_t)json_integer_value(json_object_get(e, "queue_depth")) +
                           (uint64_t)json_integer_value(json_object_get(e, "lane_depth")) +
                           (uint64_t)json_integer_value(json_object_get(e, "unacked_bytes"));
        }
    }
    json_decref(root);
    for (size_t i = 0; i < n; i++)
        if (!subs[i].found)
            return -ENOENT;
    return 0;
}

int fx_bench_sub_counters(const char *addr, fx_bench_sub_counter *subs, size_t n)
{
    char *buf;
    int rv = http_get(addr, "/v1/subscriptions", &buf);
    if (rv != 0)
        return rv;
    const char *body = strstr(buf, "\r\n\r\n");
    rv = body != NULL ? fx_bench_sub_counters_parse(body + 4, subs, n) : -EPROTO;
    free(buf);
    return rv;
}

int fx_bench_stream_counts_parse(const char *json, const char *ns, const char *stream,
                                 fx_bench_stream_info *out)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    json_t *arr = json_object_get(root, "streams");
    int rv = json_is_array(arr) ? -ENOENT : -EPROTO;
    size_t k;
    json_t *e;
    json_array_foreach(arr, k, e)
    {
        const char *n = json_string_value(json_object_get(e, "namespace"));
        const char *s = json_string_value(json_object_get(e, "stream"));
        if (n == NULL || s == NULL || strcmp(n, ns) != 0 || strcmp(s, stream) != 0)
            continue;
        out->messages = (uint64_t)json_integer_value(json_object_get(e, "messages"));
        out->first_offset = (uint64_t)json_integer_value(json_object_get(e, "first_offset"));
        out->next_offset = (uint64_t)json_integer_value(json_object_get(e, "next_offset"));
        out->durable = json_is_true(json_object_get(e, "durable"));
        rv = 0;
        break;
    }
    json_decref(root);
    return rv;
}

int fx_bench_stream_counts(const char *addr, const char *ns, const char *stream,
                           fx_bench_stream_info *out)
{
    char *buf;
    int rv = http_get(addr, "/v1/streams", &buf);
    if (rv != 0)
        return rv;
    const char *body = strstr(buf, "\r\n\r\n");
    rv = body != NULL ? fx_bench_stream_counts_parse(body + 4, ns, stream, out) : -EPROTO;
    free(buf);
    return rv;
}

/* ---- a group's redelivery lateness ---------------------------------------------------- */

/* The upper bound (ms) of the first bucket whose cumulative count reaches
 * |q| of |n|. */
static double bucket_quantile(json_t *buckets, uint64_t n, double q)
{
    double best = INFINITY;
    uint64_t need = (uint64_t)ceil(q * (double)n);
    const char *key;
    json_t *v;
    json_object_foreach(buckets, key, v)
    {
        double bound = strcmp(key, "+Inf") == 0 ? INFINITY : strtod(key, NULL) * 1e3;
        if ((uint64_t)json_integer_value(v) >= need && bound < best)
            best = bound;
    }
    return best;
}

int fx_bench_group_lateness_parse(const char *json, double *p50_ms, double *p99_ms, uint64_t *count)
{
    json_t *root = json_loads(json, 0, NULL);
    json_t *late = json_object_get(root, "redelivery_lateness");
    json_t *buckets = json_object_get(late, "buckets");
    json_t *n = json_object_get(late, "count");
    int rv = json_is_object(buckets) && json_is_integer(n) ? 0 : -EPROTO;
    if (rv == 0) {
        *count = (uint64_t)json_integer_value(n);
        *p50_ms = bucket_quantile(buckets, *count, 0.50);
        *p99_ms = bucket_quantile(buckets, *count, 0.99);
    }
    json_decref(root);
    return rv;
}

/* The tenant of stream (|ns|, |stream|) in GET /v1/streams, into |out|. */
static int stream_tenant(const char *addr, const char *ns, const char *stream, char *out,
                         size_t cap)
{
    char *buf;
    int rv = http_get(addr, "/v1/streams", &buf);
    if (rv != 0)
        return rv;
    const char *body = strstr(buf, "\r\n\r\n");
    json_t *root = body != NULL ? json_loads(body + 4, 0, NULL) : NULL;
    free(buf);
    rv = -ENOENT;
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(root, "streams"), k, e)
    {
        const char *t = json_string_value(json_object_get(e, "tenant"));
        const char *n = json_string_value(json_object_get(e, "namespace"));
        const char *s = json_string_value(json_object_get(e, "stream"));
        if (t != NULL && n != NULL && s != NULL && strcmp(n, ns) == 0 && strcmp(s, stream) == 0) {
            rv = snprintf(out, cap, "%s", t) < (int)cap ? 0 : -ENAMETOOLONG;
            break;
        }
    }
    json_decref(root);
    return rv;
}

int fx_bench_group_lateness(const char *addr, const char *ns, const char *stream, const char *group,
                            double *p50_ms, double *p99_ms, uint64_t *count)
{
    char tenant[128], path[512], *buf;
    int rv = stream_tenant(addr, ns, stream, tenant, sizeof(tenant));
    if (rv != 0)
        return rv;
    int pl =
        snprintf(path, sizeof(path), "/v1/streams/%s/%s/%s/groups/%s", tenant, ns, stream, group);
    if (pl < 0 || (size_t)pl >= sizeof(path))
        return -ENAMETOOLONG;
    if ((rv = http_get(addr, path, &buf)) != 0)
        return rv;
    const char *body = strstr(buf, "\r\n\r\n");
    rv = body != NULL ? fx_bench_group_lateness_parse(body + 4, p50_ms, p99_ms, count) : -EPROTO;
    free(buf);
    return rv;
}
