/* fx_dlog_offset_for_time (dlog.h): where a durable log's records reach a
 * time, for a consumer group that starts (or seeks) at a time. Storage
 * thread, like every call on an open fx_dlog. */
#include "storage/dlog_int.h"

#include "felix/error.h"

/* The time of the record at |off|, read alone. 0 or fx_dlog_read's error. */
static int ts_at(fx_dlog *log, uint64_t off, fx_dlog_page *pg, uint64_t *pts)
{
    int rv = fx_dlog_read(log, off, 1, 1, pg);
    if (rv != 0)
        return rv;
    if (pg->n == 0 || pg->recs[0].offset != off)
        return FX_ESTORAGE_CORRUPT;
    *pts = pg->recs[0].ts_us;
    return 0;
}

int fx_dlog_offset_for_time(fx_dlog *log, uint64_t ts_us, uint64_t *poff)
{
    /* The oldest segment whose newest record is at or after |ts_us|. */
    size_t i = 0;
    while (i < log->nsegs && (log->segs[i].next == log->segs[i].base ||
                              log->segs[i].last_ts < ts_us))
        i++;
    if (i == log->nsegs) {
        *poff = fx_dlog_next_offset(log);
        return 0;
    }
    /* Its last record qualifies: find the first that does. */
    uint64_t lo = log->segs[i].base, hi = log->segs[i].next - 1;
    fx_dlog_page pg;
    fx_dlog_page_init(&pg);
    int rv = 0;
    while (lo < hi && rv == 0) {
        uint64_t mid = lo + (hi - lo) / 2, t = 0;
        rv = ts_at(log, mid, &pg, &t);
        if (rv == 0 && t >= ts_us)
            hi = mid;
        else if (rv == 0)
            lo = mid + 1;
    }
    fx_dlog_page_deinit(&pg);
    if (rv == 0)
        *poff = lo;
    return rv;
}
