/* felix-bench's operating-system helpers: the monotonic clock, futex waits,
 * /proc readings of a process (CPU, RSS, context switches), an RSS sampler
 * thread, and reads of the broker's admin endpoint (/metrics, /v1/subscriptions). Each
 * function runs on its caller's thread; the sampler runs on its own. */
#ifndef FX_BENCH_SYS_H
#define FX_BENCH_SYS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fx_bench_now_ns(void);

/* Sleeps on |a| while it equals |val|, at most |ns| nanoseconds. */
void fx_bench_futex_wait(_Atomic int *a, int val, uint64_t ns);
/* Wakes every waiter on |a|. */
void fx_bench_futex_wake(_Atomic int *a);

/* User and system CPU seconds of process |pid| (0: this process). Returns 0
 * or -errno / -EINVAL (unparsable). */
int fx_bench_proc_cpu(int pid, double *user, double *sys);

/* Reads "VmRSS" and "VmHWM" (kB) of process |pid|. Returns 0 or -errno. */
int fx_bench_proc_rss(int pid, uint64_t *rss_kb, uint64_t *hwm_kb);

/* Sum of voluntary context switches over every thread of |pid| (0: this
 * process): each is a thread going to sleep, i.e. a later wakeup. Returns
 * the count, or 0 if it cannot be read. */
uint64_t fx_bench_proc_vcsw(int pid);

/* Busy and total CPU seconds of the whole host (/proc/stat). Returns 0 or -errno. */
int fx_bench_host_cpu(double *busy, double *total);

/* Samples a process's VmRSS every |period_ms| on its own thread. */
typedef struct fx_bench_rss_sampler {
    int pid;
    int period_ms;
    int delay_ms;   /* first sample this long after the start (watch) */
    uint64_t limit; /* stop after this many samples (0: until stopped) */
    pthread_t th;
    _Atomic bool stop;
    _Atomic uint64_t peak_kb;           /* largest VmRSS seen */
    _Atomic uint64_t min_kb;            /* smallest VmRSS seen (UINT64_MAX: none) */
    _Atomic uint64_t first_kb, last_kb; /* first and latest sample */
    _Atomic uint64_t samples;
    bool running;
} fx_bench_rss_sampler;

/* Starts sampling |pid| now, every |period_ms|, until stopped. Returns 0
 * or -errno (thread creation). */
int fx_bench_rss_start(fx_bench_rss_sampler *s, int pid, int period_ms);
/* Starts a watch of |pid|: |limit| samples, one every |period_ms| on a
 * fixed schedule, the first |delay_ms| after the call (a stop before then
 * takes none). Read min_kb/peak_kb/samples after fx_bench_rss_stop.
 * Returns 0 or -errno (thread creation). */
int fx_bench_rss_watch_start(fx_bench_rss_sampler *s, int pid, int delay_ms, int period_ms,
                             uint64_t limit);
/* Stops and joins the sampler; returns the peak VmRSS in kB (0 if none). */
uint64_t fx_bench_rss_stop(fx_bench_rss_sampler *s);

/* Drop counters of the broker, read from its admin endpoint or, for an
 * in-process broker, from the process's metrics registry. */
typedef struct fx_bench_drops {
    uint64_t subscribe_dropped;        /* felix_subscribe_dropped_total (checkpoint 5) */
    uint64_t lane_dropped;             /* felix_subscriber_lane_dropped_total (checkpoint 6) */
    uint64_t lane_dropped_events;      /* felix_subscriber_lane_dropped_events_total */
    uint64_t ingress_dropped;          /* felix_broker_ingress_dropped_total (checkpoint 4) */
    uint64_t ingress_dropped_messages; /* felix_broker_ingress_dropped_messages_total */
    uint64_t subscriber_disconnect;    /* felix_subscriber_disconnect_total */
    /* and the broker's datagram counters, for the datagram size in use */
    uint64_t datagrams_sent; /* felix_quic_datagrams_sent_total */
    uint64_t bytes_sent;     /* felix_quic_bytes_sent_total */
} fx_bench_drops;

/* GETs http://|addr|/metrics ("host:port", numeric IPv4) with a 2 s bound
 * and fills |d|. Returns 0, -errno, or -EPROTO (not an HTTP 200 answer). */
int fx_bench_scrape_drops(const char *addr, fx_bench_drops *d);

/* GETs http://|addr|/metrics like fx_bench_scrape_drops and stores the
 * value of the unlabelled series |name| in |v| (0 when absent). Returns 0,
 * -errno, or -EPROTO. */
int fx_bench_scrape_value(const char *addr, const char *name, uint64_t *v);

/* Records the broker has read from disk for replays
 * (felix_storage_read_records_total): scraped from |admin| when not NULL,
 * else from this process's registry when |in_process|. Returns 0, -ENOTSUP
 * (neither), or the scrape's error. */
int fx_bench_replay_records(const char *admin, bool in_process, uint64_t *v);
/* The broker's own redelivery lateness (timer firing - lease deadline) of
 * group |group| on (|ns|, |stream|), from the group's histogram in
 * GET /v1/streams/T/NS/S/groups/G (the tenant found in GET /v1/streams):
 * p50 and p99 as the upper bound of the bucket that holds them, in ms
 * (INFINITY past the last finite bound), and the count of redeliveries.
 * Returns 0, -ENOENT (no such stream or group), -errno or -EPROTO. */
int fx_bench_group_lateness(const char *addr, const char *ns, const char *stream, const char *group,
                            double *p50_ms, double *p99_ms, uint64_t *count);
/* The parse of the group's JSON, for tests. */
int fx_bench_group_lateness_parse(const char *json, double *p50_ms, double *p99_ms,
                                  uint64_t *count);

/* One subscription as the broker's GET /v1/subscriptions lists it. */
typedef struct fx_bench_sub_counter {
    uint64_t id;            /* in: the subscription id the broker assigned */
    bool found;             /* out: listed */
    uint64_t queue_dropped; /* messages shed at its subscriber queue (checkpoint 5) */
    uint64_t lane_dropped;  /* messages shed at its writer lane (checkpoint 6) */
    uint64_t held;          /* queue_depth + lane_depth + unacked_bytes: 0 once settled */
} fx_bench_sub_counter;

/* Fills each of |subs[0..n)| by id from |json|, an answer of GET
 * /v1/subscriptions ({"subscriptions": [...]}). Returns 0, -ENOENT (one of
 * them is not listed) or -EPROTO (not that JSON). */
int fx_bench_sub_counters_parse(const char *json, fx_bench_sub_counter *subs, size_t n);

/* GETs http://|addr|/v1/subscriptions (2 s bound) and parses it as
 * fx_bench_sub_counters_parse. Returns its result, -errno, or -EPROTO (not
 * an HTTP 200 answer). */
int fx_bench_sub_counters(const char *addr, fx_bench_sub_counter *subs, size_t n);

/* Fills |d| from this process's metrics registry (in-process broker).
 * Returns 0 or -ENOMEM. */
int fx_bench_local_drops(fx_bench_drops *d);

/* What the broker holds of one stream (GET /v1/streams): messages in its
 * ring, the oldest offset still held and the next offset to be appended. */
typedef struct fx_bench_stream_info {
    uint64_t messages, first_offset, next_offset; /* of the ring */
    bool durable; /* a durable stream: its log holds [0, next_offset) past the ring */
} fx_bench_stream_info;

/* Fills |out| for stream |ns|/|stream| (any tenant) from |json|, an answer
 * of GET /v1/streams ({"streams": [...]}). Returns 0, -ENOENT (not listed)
 * or -EPROTO (not that JSON). */
int fx_bench_stream_counts_parse(const char *json, const char *ns, const char *stream,
                                 fx_bench_stream_info *out);

/* GETs http://|addr|/v1/streams (2 s bound) and parses it as
 * fx_bench_stream_counts_parse. Returns its result, -errno or -EPROTO. */
int fx_bench_stream_counts(const char *addr, const char *ns, const char *stream,
                           fx_bench_stream_info *out);

#endif
