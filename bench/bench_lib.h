/* felix-bench's pure logic: message stamping and per-reader accounting
 * (sequence, loss, duplicates), percentiles, the end-to-end credit window,
 * the run-length guard and the validity verdict. No I/O and no libfelix
 * calls, so tests/unit/test_bench.c compiles it in directly. Functions are
 * not thread-safe unless they say so: each fx_bench_acct belongs to one
 * reader thread, except its |progress| field (atomic, read by the publisher). */
#ifndef FX_BENCH_LIB_H
#define FX_BENCH_LIB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Payload header: u64 sequence (host order), u64 CLOCK_MONOTONIC send ns. */
#define FX_BENCH_HDR 16u
/* The credit window never lets more than this many bytes or messages be in
 * flight ahead of the slowest subscriber (the peers' pacing). */
#define FX_BENCH_WINDOW_MAX_BYTES (4u << 20)
#define FX_BENCH_WINDOW_MAX_MSGS 16384u
/* Largest payload: one message always fits in the credit window. */
#define FX_BENCH_PAYLOAD_MAX FX_BENCH_WINDOW_MAX_BYTES
/* A throughput run delivers at least this multiple of what can be buffered
 * between publisher and subscribers, and lasts at least this long. */
#define FX_BENCH_GUARD_FACTOR 10u
#define FX_BENCH_GUARD_MIN_SECONDS 5.0

/* Writes |seq| and |t_ns| into the first 16 bytes of |p|. */
void fx_bench_stamp(uint8_t *p, uint64_t seq, uint64_t t_ns);

/* Which stream (0..nstreams-1) carries message |seq| when the publisher
 * sends batches of |batch| messages round-robin over |nstreams| streams. */
uint32_t fx_bench_stream_of(uint64_t seq, uint32_t batch, uint32_t nstreams);

/* How many of the messages 0..total-1 go to stream |s|. */
uint64_t fx_bench_stream_count(uint64_t total, uint32_t batch, uint32_t nstreams, uint32_t s);

/* ---- per-reader accounting ---------------------------------------------- */

/* One reader: one subscription (one stream) of one subscriber. */
typedef struct fx_bench_acct {
    uint32_t stream, nstreams, batch;
    uint64_t warmup;           /* sequences below this are not measured */
    uint64_t expected;         /* next sequence this reader should see */
    uint64_t in_order;         /* messages accepted (each seq once, any gap skipped) */
    uint64_t recv_meas;        /* measured messages accepted */
    uint64_t gaps;             /* messages skipped over (lost) */
    uint64_t dups;             /* sequences at or below one already seen */
    uint64_t bad;              /* too short, or a sequence of another stream */
    uint64_t first_meas_ns;    /* arrival of the first measured message */
    uint64_t last_meas_ns;     /* arrival of the last measured message */
    uint64_t *lat;             /* latency samples (ns), caller-owned, may be NULL */
    size_t nlat, latcap;       /* samples taken, capacity of |lat| */
    uint64_t lat_unkept;       /* measured messages past |latcap|: no sample kept */
    uint64_t drop_every;       /* test-only: discard every Nth message (0: off) */
    uint64_t seen;             /* messages handed to fx_bench_acct_on_msg */
    _Atomic uint64_t progress; /* in_order + gaps: position reached (credit window) */
} fx_bench_acct;

/* Prepares |a| for stream |stream| of |nstreams| (batches of |batch|);
 * |lat| (|latcap| entries, may be NULL) receives latency samples of measured
 * messages. */
void fx_bench_acct_init(fx_bench_acct *a, uint32_t stream, uint32_t nstreams, uint32_t batch,
                        uint64_t warmup, uint64_t *lat, size_t latcap);

/* Accounts one delivered payload that arrived at |now_ns|. Returns the
 * sequence it carried (UINT64_MAX if it was too short, or discarded by the
 * test-only drop). */
uint64_t fx_bench_acct_on_msg(fx_bench_acct *a, const uint8_t *data, size_t len, uint64_t now_ns);

/* ---- percentiles -------------------------------------------------------- */

typedef struct fx_bench_lat {
    size_t n;
    double p50_us, p90_us, p99_us, p999_us, max_us, mean_us; /* NaN when n == 0 */
    /* Measured messages whose sample was not kept (the sample buffers were
     * full): the figures above leave them out, so a report shows the count. */
    uint64_t unkept;
} fx_bench_lat;

/* Nearest-rank percentile (as peerbench): the ceil(p*n)-th smallest of the
 * ascending |sorted[0..n)|, in microseconds. NaN when n == 0. */
double fx_bench_pct_us(const uint64_t *sorted, size_t n, double p);

/* Sorts |v[0..n)| (ns) in place and summarises it into |out|; |unkept|
 * (samples not in |v| because their buffer was full) goes to out->unkept. */
void fx_bench_lat_summarize(uint64_t *v, size_t n, uint64_t unkept, fx_bench_lat *out);

/* Formats " (N samples)", or " (N samples, M not kept: buffer full)" when
 * some were not kept, into |buf|. Returns snprintf's result. */
int fx_bench_format_samples(char *buf, size_t cap, const fx_bench_lat *l);

/* Median of |v[0..n)| (sorted in place; NaNs are skipped). NaN when empty. */
double fx_bench_median(double *v, size_t n);

/* ---- credit window and run-length guard ----------------------------------- */

/* Messages the publisher may be ahead of the slowest subscriber for payload
 * |payload| bytes: 4 MiB / payload, at most 16,384, at least 1. */
uint64_t fx_bench_credit_window(size_t payload);

/* Everything that can hold messages between the publish call and the
 * subscriber's application, per the configuration in use (bytes). */
typedef struct fx_bench_buffers {
    uint64_t client_publish_budget;    /* client checkpoint 1 */
    uint64_t broker_ingress_bytes;     /* checkpoint 3: min(conn share, process budget) */
    uint64_t broker_worker_queue;      /* checkpoint 4, in jobs (batches) */
    uint64_t sub_queue_batches;        /* checkpoint 5, envelopes per subscriber */
    uint64_t lane_queue_batches;       /* checkpoint 6, per subscriber */
    uint64_t sub_unacked_bytes;        /* per subscription on its QUIC stream */
    uint64_t sub_recv_window;          /* subscriber's QUIC stream receive window (max) */
    uint64_t client_sub_queue_batches; /* client subscription queue */
    uint64_t batch_bytes_max;          /* largest event batch (event_batch_max_bytes) */
} fx_bench_buffers;

/* Bytes that can be buffered for |fanout| subscribers with payload
 * |payload|, batches of |batch|: the configured pipeline capacity, but never
 * more per subscriber than the credit window lets be outstanding. */
uint64_t fx_bench_bufferable(const fx_bench_buffers *b, size_t payload, uint32_t batch,
                             uint32_t fanout);

/* Smallest measured message count whose deliveries (|payload| x |fanout|
 * each) reach FX_BENCH_GUARD_FACTOR x |bufferable| bytes. */
uint64_t fx_bench_guard_min_total(uint64_t bufferable, size_t payload, uint32_t fanout);

/* The run-length guard: refuses a throughput run of |total| measured
 * messages lasting at least |min_seconds| when it is too short for the
 * buffering. Returns true if the run may go ahead; otherwise false with the
 * reason in |why| (|cap| bytes). */
bool fx_bench_guard_ok(uint64_t total, double min_seconds, uint64_t bufferable, size_t payload,
                       uint32_t fanout, char *why, size_t cap);

/* ---- verdict -------------------------------------------------------------- */

/* What a finished run adds up to. */
typedef struct fx_bench_totals {
    uint64_t sent_measured;   /* measured messages published */
    uint64_t expected;        /* sent_measured x subscribers that must get each */
    uint64_t delivered;       /* measured deliveries accepted */
    uint64_t lost, dups, bad; /* lost = expected - delivered, or gaps if larger */
    uint64_t gaps;            /* sequence gaps the readers saw */
    uint64_t errors;          /* publish/subscribe errors, timeouts */
    bool timed_out;
    bool guard_failed; /* the finished run was still shorter than the guard */
} fx_bench_totals;

/* Returns true if the run is valid; otherwise false and the reason in |why|. */
bool fx_bench_verdict(const fx_bench_totals *t, char *why, size_t cap);

/* Adds reader |r|'s counters to |t| (delivered, dups, bad, gaps). */
void fx_bench_totals_add(fx_bench_totals *t, const fx_bench_acct *r);

/* Sets |t->lost| to the larger of expected - delivered and the gaps, once
 * every reader was added. */
void fx_bench_totals_finish(fx_bench_totals *t);

/* ---- loss accounting (overload) -------------------------------------------- */

/* What one subscriber of an overload run missed, and every counter that
 * covers it: its client's queue drops, the broker's drops on its own
 * subscriptions (GET /v1/subscriptions: queue_dropped at checkpoint 5,
 * lane_dropped at checkpoint 6), and what was lost before any subscriber
 * queue, which every subscriber misses (the broker's ingress drops in
 * messages, and publishes the publisher's client lost with a connection).
 * Every unit is one message. */
typedef struct fx_bench_loss {
    uint64_t expected;       /* messages published, warm-up included (it reads every stream) */
    uint64_t received;       /* distinct ones it got */
    uint64_t client_dropped; /* fx_sub_stats.dropped over its subscriptions */
    uint64_t queue_dropped;  /* broker, its subscriptions, checkpoint 5 */
    uint64_t lane_dropped;   /* broker, its subscriptions, checkpoint 6 */
    uint64_t upstream;       /* ingress drops (messages) + publisher's lost publishes */
} fx_bench_loss;

/* expected - received (0 if it got more, which fx_bench_acct counts as
 * duplicates instead). */
uint64_t fx_bench_loss_missed(const fx_bench_loss *l);

/* The sum of the counters that cover |l|'s losses. */
uint64_t fx_bench_loss_counted(const fx_bench_loss *l);

/* One throughput result for the human table. NaN rates print as "-". */
typedef struct fx_bench_tput {
    bool valid;
    const char *why; /* reason when !valid */
    double msgs_per_s, mb_per_s, per_sub_msgs_per_s, pub_msgs_per_s, window_s;
    uint64_t lost, dups;
} fx_bench_tput;

/* Formats |r| as one human line into |buf|: an invalid run prints INVALID and
 * the reason, and no throughput figure. Returns snprintf's result. */
int fx_bench_format_tput(char *buf, size_t cap, const fx_bench_tput *r);

/* ---- consumer groups (--mode group) ----------------------------------------- */

/* The cells of --mode group, as peerbench's --group-cell. */
typedef enum fx_bench_gcell {
    FX_BENCH_GCELL_BACKLOG,    /* publish N, then drain: acked msg/s */
    FX_BENCH_GCELL_LIVE,       /* publish while consuming: acked msg/s, publish -> delivery */
    FX_BENCH_GCELL_REDELIVERY, /* A takes M and never acks; B gets them again: lateness */
} fx_bench_gcell;

/* Parses "backlog", "live" or "redelivery" into |out|. Returns 0 or -1. */
int fx_bench_gcell_parse(const char *s, fx_bench_gcell *out);
/* The name of |c| ("?" if out of range). */
const char *fx_bench_gcell_name(fx_bench_gcell c);

/* Per-sequence tracking of one group run: deliveries (saturating at 250)
 * and acks of each sequence in [0, cap). Any thread: every field is atomic. */
typedef struct fx_bench_gtrack {
    uint64_t cap;
    _Atomic uint8_t *deliv;
    _Atomic uint8_t *ackd;
    _Atomic uint64_t acked_distinct; /* sequences acked at least once */
} fx_bench_gtrack;

/* Allocates tracking for sequences [0, |cap|) (zeroed pages, so a large cap
 * costs what is touched). Returns 0 or -ENOMEM. */
int fx_bench_gtrack_init(fx_bench_gtrack *t, uint64_t cap);
void fx_bench_gtrack_deinit(fx_bench_gtrack *t);

/* Counts one delivery of the payload |data| (|len| bytes, stamped by
 * fx_bench_stamp). Returns its sequence and its deliveries before this one
 * in |*prev|, or UINT64_MAX when it is too short or its sequence is out of
 * range (a bad delivery). */
uint64_t fx_bench_gtrack_deliver(fx_bench_gtrack *t, const uint8_t *data, size_t len,
                                 uint8_t *prev);

/* Counts an ack of |seq| the broker took. Returns the sequences acked so far
 * when this was the first ack of |seq|, else 0 (a repeated ack or |seq| out
 * of range). */
uint64_t fx_bench_gtrack_ack(fx_bench_gtrack *t, uint64_t seq);

/* What a group run adds up to, as peerbench reports it. */
typedef struct fx_bench_gcount {
    uint64_t expected;    /* sequences that had to be delivered (and acked) */
    uint64_t distinct;    /* of those, delivered at least once */
    uint64_t dups;        /* sequences delivered more than |once| times */
    uint64_t extra;       /* deliveries past |once|, summed */
    uint64_t missing;     /* never delivered (redelivery: never delivered again) */
    uint64_t acked;       /* sequences acked */
    uint64_t delivered;   /* deliveries, all members */
    uint64_t redelivered; /* deliveries the broker marked as a redelivery (attempt > 1) */
    uint64_t skipped;     /* records the broker reported settled unread */
    uint64_t bad;         /* deliveries too short or out of range */
    uint64_t errors;      /* take/join errors */
    uint64_t ack_errors;  /* acks refused or not confirmed */
    uint64_t pub_errors;  /* publish failures */
    uint64_t ack_ops;     /* ack ops the members' clients sent (fx_member_stats.ops_sent) */
    uint64_t ack_frames;  /* GROUP_ACKS frames they travelled in */
    bool hit_deadline;    /* the run ended at --max-seconds, not at its last ack */
} fx_bench_gcount;

/* Fills expected, distinct, dups, extra and missing of |k| from |t| over
 * sequences [0, |expect|): a sequence should be delivered |once| times (1;
 * the redelivery cell 2). With |again| (redelivery cell; NULL otherwise) a
 * sequence is missing when again[seq] is 0 (never delivered to B). */
void fx_bench_gtrack_tally(const fx_bench_gtrack *t, uint64_t expect, unsigned once,
                           const uint64_t *again, fx_bench_gcount *k);

/* The group verdict: valid only with nothing missing, no duplicate, every
 * expected sequence acked, nothing skipped, no bad delivery, no error and
 * the run ended by its last ack. Returns true if valid; else false and the
 * reason in |why|. */
bool fx_bench_group_verdict(const fx_bench_gcount *k, char *why, size_t cap);

/* Nearest-rank percentile of the ascending |sorted[0..n)| (signed ns), in
 * milliseconds. NaN when n == 0. */
double fx_bench_pct_i64_ms(const int64_t *sorted, size_t n, double p);

#endif
