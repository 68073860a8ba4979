/* fsync policies and group commit as a pure state machine (syncpol.h). */
#include "storage/syncpol.h"

#include <strings.h>

#include "felix/error.h"

int fx_fsync_mode_parse(const char *s, fx_fsync_mode *pmode)
{
    if (strcasecmp(s, "none") == 0 || strcasecmp(s, "off") == 0)
        *pmode = FX_FSYNC_NONE;
    else if (strcasecmp(s, "periodic") == 0)
        *pmode = FX_FSYNC_PERIODIC;
    else if (strcasecmp(s, "on_commit") == 0 || strcasecmp(s, "on-commit") == 0 ||
             strcasecmp(s, "commit") == 0)
        *pmode = FX_FSYNC_ON_COMMIT;
    else
        return FX_ECONFIG;
    return 0;
}

const char *fx_fsync_mode_name(fx_fsync_mode mode)
{
    switch (mode) {
    case FX_FSYNC_NONE:
        return "none";
    case FX_FSYNC_PERIODIC:
        return "periodic";
    case FX_FSYNC_ON_COMMIT:
        return "on_commit";
    }
    return "?";
}

int fx_syncpol_config_check(const fx_syncpol_config *cfg)
{
    if (cfg->mode == FX_FSYNC_PERIODIC && cfg->interval_ns == 0)
        return FX_ECONFIG;
    return cfg->mode <= FX_FSYNC_ON_COMMIT ? 0 : FX_ECONFIG;
}

void fx_syncpol_init(fx_syncpol *p, const fx_syncpol_config *cfg, uint64_t now_ns, uint64_t next)
{
    *p = (fx_syncpol){.cfg = *cfg, .written = next, .durable = next, .last_start_ns = now_ns};
}

void fx_syncpol_appended(fx_syncpol *p, uint64_t end, uint64_t bytes, uint64_t now_ns)
{
    if (end > p->written)
        p->written = end;
    if (p->waiting++ == 0)
        p->oldest_ns = now_ns;
    p->unsynced_bytes += bytes;
}

/* Something is written that no started flush covers. */
static bool uncovered(const fx_syncpol *p)
{
    return p->waiting > 0 && p->written > (p->in_flight ? p->flight_target : p->durable);
}

uint64_t fx_syncpol_deadline(const fx_syncpol *p)
{
    if (p->in_flight || !uncovered(p))
        return UINT64_MAX;
    switch (p->cfg.mode) {
    case FX_FSYNC_ON_COMMIT:
        return p->oldest_ns;
    case FX_FSYNC_PERIODIC: {
        bool bytes_due =
            p->cfg.max_unsynced_bytes > 0 && p->unsynced_bytes >= p->cfg.max_unsynced_bytes;
        if (bytes_due)
            return p->oldest_ns;
        uint64_t t = p->last_start_ns + p->cfg.interval_ns;
        return t < p->last_start_ns ? UINT64_MAX : t;
    }
    case FX_FSYNC_NONE:
        break;
    }
    return UINT64_MAX;
}

bool fx_syncpol_is_due(const fx_syncpol *p, uint64_t now_ns)
{
    uint64_t d = fx_syncpol_deadline(p);
    return d != UINT64_MAX && now_ns >= d;
}

uint64_t fx_syncpol_begin(fx_syncpol *p, uint64_t now_ns)
{
    p->in_flight = true;
    p->flight_target = p->written;
    p->flight_bytes = p->unsynced_bytes;
    p->flight_appends = p->waiting;
    p->flight_oldest_ns = p->oldest_ns;
    p->waiting = 0;
    p->last_start_ns = now_ns;
    return p->flight_target;
}

void fx_syncpol_end(fx_syncpol *p, int rv, uint64_t durable)
{
    p->in_flight = false;
    uint64_t bytes = p->flight_bytes;
    p->flight_bytes = 0;
    if (rv != 0) {
        /* Nothing it covered is known durable; they wait again. */
        p->st.sync_failures++;
        if (p->flight_appends > 0 && (p->waiting == 0 || p->flight_oldest_ns < p->oldest_ns))
            p->oldest_ns = p->flight_oldest_ns;
        p->waiting += p->flight_appends;
        return;
    }
    if (durable > p->durable)
        p->durable = durable;
    p->unsynced_bytes -= bytes;
    p->st.syncs++;
    p->st.synced_appends += p->flight_appends;
    if (p->flight_appends > p->st.max_fan_in)
        p->st.max_fan_in = p->flight_appends;
}

uint64_t fx_syncpol_ack_upto(const fx_syncpol *p)
{
    return p->cfg.mode == FX_FSYNC_ON_COMMIT ? p->durable : p->written;
}

uint64_t fx_retention_now_us(const fx_retention_clock *anchor, uint64_t wall_us, uint64_t mono_ns,
                             uint64_t tolerance_us, bool *pheld)
{
    uint64_t elapsed_us = mono_ns > anchor->mono_ns ? (mono_ns - anchor->mono_ns) / 1000u : 0;
    uint64_t limit = anchor->wall_us + elapsed_us + tolerance_us;
    bool held = wall_us > limit;
    if (pheld != NULL)
        *pheld = held;
    return held ? limit : wall_us;
}
