/* Creates the consumer groups the configuration lists (`groups:`) on the
 * started broker through its admin calls, the same path as a PUT on the
 * admin endpoint. A group the broker refuses stops the start: a configured
 * group is never left out silently. Main thread, at start. */
#include "server/pregroups.h"

#include <stdbool.h>
#include <stdio.h>

#include "base/log.h"
#include "felix/error.h"

_Static_assert((int)FX_CONFIG_GROUP_START_ALL == (int)FX_BROKER_GROUP_START_ALL &&
                   (int)FX_CONFIG_GROUP_START_NEW == (int)FX_BROKER_GROUP_START_NEW &&
                   (int)FX_CONFIG_GROUP_START_LAST == (int)FX_BROKER_GROUP_START_LAST &&
                   (int)FX_CONFIG_GROUP_START_OFFSET == (int)FX_BROKER_GROUP_START_OFFSET,
               "config group starts are the broker's");

/* "groups entry t/ns/s/g: <the broker's sentence, or the code's name>" */
static int fail(const fx_config_group *g, int rv, const fx_registry_err *err, char *why, size_t n)
{
    snprintf(why, n, "groups entry %s/%s/%s/%s: %s", g->s.tenant, g->s.ns, g->s.stream, g->group,
             err->msg[0] ? err->msg : fx_strerror(rv));
    return rv;
}

static int create_one(fx_broker *b, const fx_config_group *g, uint64_t timeout_ns, char *why,
                      size_t n)
{
    fx_registry_err err = {0};
    bool created = false;
    /* Finds a stream of streams: or of the durable catalogue, else makes it
     * in memory; a group on a durable one reads its log below the ring. */
    int rv = fx_broker_create_stream(b, g->s.tenant, g->s.ns, g->s.stream, &created, &err);
    if (rv != 0)
        return fail(g, rv, &err, why, n);
    if (created)
        FX_LOG_INFO("server", "stream %s/%s/%s created for groups entry %s", g->s.tenant, g->s.ns,
                    g->s.stream, g->group);
    rv = fx_broker_create_group(b, g->s.tenant, g->s.ns, g->s.stream, g->group, (int)g->start,
                                g->offset, NULL, timeout_ns, &created, &err);
    if (rv != 0)
        return fail(g, rv, &err, why, n);
    FX_LOG_INFO("server", "group %s/%s/%s/%s %s from the configuration", g->s.tenant, g->s.ns,
                g->s.stream, g->group, created ? "created" : "exists");
    return 0;
}

int fx_pregroups_create(fx_broker *b, const fx_config *c, uint64_t timeout_ns, char *why, size_t n)
{
    for (size_t i = 0; i < c->ngroups; i++) {
        int rv = create_one(b, &c->groups[i], timeout_ns, why, n);
        if (rv != 0)
            return rv;
    }
    return 0;
}
