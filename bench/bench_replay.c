/* felix-bench --mode replay: catch-up replay from disk against live
 * delivery, in one run. A throughput run (one subscriber, one stream of
 * its own) publishes and measures live delivery; once it is done every
 * message is in the durable log (a durable stream's subscribers see a
 * record only after its append), and a new client subscribes to the same
 * stream from earliest and takes the whole history, most of it read from
 * disk (the ring holds the newest messages only), through the page cache
 * the publishing just warmed. Main thread only. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_run.h"
#include "felix/felix.h"

#define REPLAY_SILENT_NS 10000000000ull /* no delivery this long: the rest is lost */

static int replay_err(fx_bench_result *r, int rv, const char *what)
{
    char detail[200];
    fx_client_last_error(NULL, detail, sizeof(detail));
    snprintf(r->errmsg, sizeof(r->errmsg), "replay: %s: %s%s%s", what, fx_strerror(rv),
             detail[0] ? ": " : "", detail);
    return r->error = rv;
}

static int replay_connect(const fx_bench_cfg *c, fx_client **pc, fx_bench_result *r)
{
    fx_client_opts o;
    fx_bench_client_opts(c, &o, false); /* lossless: the replay paces itself */
    int rv = fx_client_connect(pc, &o);
    return rv == 0 ? 0 : replay_err(r, rv, "cannot connect");
}

/* What the replay reader counts. */
typedef struct rcount {
    fx_bench_acct acct; /* by the sequence in the payload */
    uint64_t next_off, offset_gaps;
    bool have_off;
    uint64_t t_first, t_last;
} rcount;

static void count_event(rcount *k, const fx_event *ev)
{
    uint64_t now = fx_bench_now_ns();
    if (k->t_first == 0)
        k->t_first = now;
    k->t_last = now;
    fx_bench_acct_on_msg(&k->acct, ev->payload, ev->len, now);
    if ((ev->flags & FX_EVENT_GAP) || !ev->has_offset || (k->have_off && ev->offset != k->next_off))
        k->offset_gaps++;
    k->next_off = ev->offset + 1;
    k->have_off = ev->has_offset;
}

/* Subscribes to |stream| from earliest and takes |total| messages (or
 * stops after REPLAY_SILENT_NS without one). */
static int take_history(const fx_bench_cfg *c, fx_client *cl, const char *stream, uint64_t total,
                        rcount *k, uint64_t *t0, fx_bench_result *r)
{
    fx_subscription *s = NULL;
    fx_start from = {.kind = FX_START_EARLIEST};
    *t0 = fx_bench_now_ns();
    int rv = fx_subscribe(&s, cl, c->ns, stream, &from);
    if (rv != 0) {
        fx_unsubscribe(s); /* set on the cursor errors */
        return replay_err(r, rv,
                          rv == FX_ECURSOR_TOO_OLD
                              ? "subscribe from earliest (the history is gone: is the stream "
                                "durable? start the broker with durable_default)"
                              : "subscribe from earliest");
    }
    uint64_t last = fx_bench_now_ns(),
             deadline = *t0 + (uint64_t)(c->max_seconds * 1e9) + REPLAY_SILENT_NS;
    while (atomic_load(&k->acct.progress) < total) {
        fx_event ev;
        rv = fx_subscription_next(s, &ev, 100);
        uint64_t now = fx_bench_now_ns();
        if (rv == 0) {
            count_event(k, &ev);
            last = now;
        } else if (rv != FX_ETIMEDOUT) {
            replay_err(r, rv, "subscription ended");
            r->error = 0; /* a broken replay is a finding, not a setup error */
            r->t.errors++;
            break;
        } else if (now - last > REPLAY_SILENT_NS || now > deadline) {
            r->t.timed_out = true;
            break;
        }
    }
    fx_unsubscribe(s);
    return 0;
}

/* Sets |valid| and the reason from what the replay counted. */
static void replay_verdict(fx_bench_result *r, const rcount *k, uint64_t total)
{
    uint64_t missing = total > k->acct.in_order ? total - k->acct.in_order : 0;
    const char *why = NULL;
    char buf[sizeof(r->why)];
    if (k->acct.gaps || k->acct.dups || k->acct.bad || missing || k->offset_gaps) {
        snprintf(buf, sizeof(buf),
                 "replay: %llu of %llu delivered, %llu skipped, %llu duplicates, %llu foreign, "
                 "%llu offset jumps",
                 (unsigned long long)k->acct.in_order, (unsigned long long)total,
                 (unsigned long long)k->acct.gaps, (unsigned long long)k->acct.dups,
                 (unsigned long long)k->acct.bad, (unsigned long long)k->offset_gaps);
        why = buf;
    } else if (r->t.errors || r->t.timed_out) {
        why = r->errmsg[0] ? r->errmsg : "replay: timed out";
    } else if (r->replay_disk_records == 0) {
        why = "replay: the broker read nothing from disk (is the stream durable, and longer "
              "than the ring?)";
    }
    r->valid = why == NULL;
    if (why != NULL)
        snprintf(r->why, sizeof(r->why), "%.191s", why);
}

static void replay_rates(fx_bench_result *r, const rcount *k, uint64_t t0)
{
    r->replay_s = r->replay_msgs_per_s = r->replay_first_ms = r->replay_vs_live = NAN;
    if (k->t_last <= t0)
        return;
    r->replay_s = (double)(k->t_last - t0) / 1e9;
    r->replay_first_ms = (double)(k->t_first - t0) / 1e6;
    r->replay_msgs_per_s = (double)r->replay_msgs / r->replay_s;
    if (r->valid && isfinite(r->msgs_per_s) && r->msgs_per_s > 0)
        r->replay_vs_live = r->replay_msgs_per_s / r->msgs_per_s;
}

int fx_bench_replay_run(const fx_bench_cfg *c, fx_bench_result *r)
{
    /* A stream of this run's own, so "earliest" is this run's first message. */
    char prefix[24];
    snprintf(prefix, sizeof(prefix), "replay%lx-%llx-", (long)getpid(),
             (unsigned long long)(fx_bench_now_ns() % 0xffffffffull));
    fx_bench_cfg live = *c;
    live.mode = FX_BENCH_THROUGHPUT;
    live.fanout = 1;
    live.streams = 1;
    live.stream_prefix = prefix;
    int rv = fx_bench_live_run(&live, r);
    if (rv != 0)
        return rv;
    r->replay_s = r->replay_msgs_per_s = r->replay_first_ms = r->replay_vs_live = NAN;
    if (!r->valid) {
        char why[sizeof(r->why)];
        snprintf(why, sizeof(why), "live phase: %.179s", r->why);
        memcpy(r->why, why, sizeof(why));
        return 0;
    }
    uint64_t total = c->warmup + r->t.sent_measured, disk0 = 0, disk1 = 0, t0 = 0;
    char stream[32];
    snprintf(stream, sizeof(stream), "%s0", prefix);
    bool have_disk = fx_bench_replay_records(c->admin, c->in_process, &disk0) == 0;
    fx_client *cl = NULL;
    rcount k = {0};
    fx_bench_acct_init(&k.acct, 0, 1, c->batch, 0, NULL, 0);
    if ((rv = replay_connect(c, &cl, r)) == 0)
        rv = take_history(c, cl, stream, total, &k, &t0, r);
    fx_client_close(cl, 2000);
    if (rv != 0)
        return rv;
    have_disk = have_disk && fx_bench_replay_records(c->admin, c->in_process, &disk1) == 0;
    r->replay_disk_records = have_disk ? disk1 - disk0 : UINT64_MAX;
    r->replay_msgs = k.acct.in_order;
    r->replay_gaps = k.acct.gaps;
    r->replay_dups = k.acct.dups;
    r->replay_offset_gaps = k.offset_gaps;
    replay_verdict(r, &k, total);
    replay_rates(r, &k, t0);
    return 0;
}
