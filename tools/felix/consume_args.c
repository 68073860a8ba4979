/* The pure part of `felix consume`: its options parsed into
 * fx_cli_consume_args and checked across each other. Compiled into felix
 * and into tests/unit/test_cli.c. Any thread. */
#include "consume_args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Longest --term reason libfelix accepts (FX_GROUP_REASON_MAX). */
#define TERM_REASON_MAX 256

enum {
    CO_GROUP = FX_CLI_OPT_FIRST_CMD,
    CO_CREATE,
    CO_MEMBER,
    CO_WINDOW,
    CO_ACK_WAIT,
    CO_NAK,
    CO_TERM,
    CO_ACK_SYNC,
    CO_COUNT,
    CO_JSON,
    CO_TIMEOUT,
};

const fx_cli_opt FX_CLI_CONSUME_OPTS[] = {
    FX_CLI_COMMON_OPTS,
    {"group", true, CO_GROUP},
    {"create", true, CO_CREATE},
    {"member", true, CO_MEMBER},
    {"window", true, CO_WINDOW},
    {"ack-wait-ms", true, CO_ACK_WAIT},
    {"nak", FX_CLI_NUM_ARG, CO_NAK},
    {"term", true, CO_TERM},
    {"ack-sync", false, CO_ACK_SYNC},
    {"count", true, CO_COUNT},
    {"json", false, CO_JSON},
    {"timeout-ms", true, CO_TIMEOUT},
    {0},
};

void fx_cli_consume_args_init(fx_cli_consume_args *a)
{
    *a = (fx_cli_consume_args){.settle = FX_CLI_SETTLE_ACK, .nak_delay_ms = -1};
}

int fx_cli_parse_group_create(const char *s, fx_start *out)
{
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "all") == 0) {
        *out = (fx_start){.kind = FX_START_EARLIEST};
        return 0;
    }
    if (strcmp(s, "new") == 0) {
        *out = (fx_start){.kind = FX_START_LATEST};
        return 0;
    }
    if (strcmp(s, "last") == 0)
        return -ENOTSUP;
    uint64_t off;
    if (fx_cli_parse_u64(s, UINT64_MAX, &off) != 0)
        return -EINVAL;
    *out = (fx_start){.kind = FX_START_OFFSET, .offset = off};
    return 0;
}

/* A group or member name: non-empty, at most FX_CLI_NAME_MAX bytes, no
 * control bytes (they would end up in the broker's logs and our output). */
static int name_check(const char *opt, const char *val, char *err, size_t errlen)
{
    size_t n = strlen(val);
    bool ctl = false;
    for (size_t i = 0; i < n; i++)
        ctl |= (unsigned char)val[i] < 0x20 || val[i] == 0x7f;
    if (n > 0 && n <= FX_CLI_NAME_MAX && !ctl)
        return 0;
    snprintf(err, errlen, "--%s: expected a name of 1 to %d bytes without control characters", opt,
             FX_CLI_NAME_MAX);
    return -EINVAL;
}

static int create_option(fx_cli_consume_args *a, const char *val, char *err, size_t errlen)
{
    int rv = fx_cli_parse_group_create(val, &a->create);
    if (rv == 0) {
        a->create_text = val;
        return 0;
    }
    if (rv == -ENOTSUP)
        snprintf(err, errlen,
                 "--create last: libfelix cannot create a group at the last record "
                 "yet; use all, new or an offset");
    else
        snprintf(err, errlen, "--create: expected all, new or an offset, got '%s'", val);
    return -EINVAL;
}

/* A positive integer of at most |max| into |*out|, or the usage error. */
static int positive(const char *opt, const char *val, uint64_t max, uint64_t *out, char *err,
                    size_t errlen)
{
    if (fx_cli_parse_u64(val, max, out) == 0 && *out > 0)
        return 0;
    snprintf(err, errlen, "--%s: expected a positive integer of at most %llu, got '%s'", opt,
             (unsigned long long)max, val);
    return -EINVAL;
}

static int settle_option(fx_cli_consume_args *a, int id, const char *val, char *err, size_t errlen)
{
    a->settle_flags++;
    if (id == CO_TERM) {
        if (strlen(val) > TERM_REASON_MAX) {
            snprintf(err, errlen, "--term: the reason is longer than %d bytes", TERM_REASON_MAX);
            return -EINVAL;
        }
        a->settle = FX_CLI_SETTLE_TERM;
        a->term_reason = val[0] != '\0' ? val : NULL;
        return 0;
    }
    uint64_t ms = 0;
    if (val != NULL && fx_cli_parse_u64(val, INT_MAX, &ms) != 0) {
        snprintf(err, errlen, "--nak: expected a delay in ms (0 to %d), got '%s'", INT_MAX, val);
        return -EINVAL;
    }
    a->settle = FX_CLI_SETTLE_NAK;
    a->nak_delay_ms = val != NULL ? (int)ms : -1;
    return 0;
}

int fx_cli_consume_option(void *user, int id, const char *val, char *err, size_t errlen)
{
    fx_cli_consume_args *a = user;
    uint64_t v;
    int rv;
    switch (id) {
    case CO_GROUP:
        a->group = val;
        return name_check("group", val, err, errlen);
    case CO_MEMBER:
        a->member = val;
        return name_check("member", val, err, errlen);
    case CO_CREATE:
        return create_option(a, val, err, errlen);
    case CO_WINDOW:
        if ((rv = positive("window", val, UINT32_MAX, &v, err, errlen)) == 0)
            a->window = (uint32_t)v;
        return rv;
    case CO_ACK_WAIT:
        if ((rv = positive("ack-wait-ms", val, INT_MAX, &v, err, errlen)) == 0)
            a->ack_wait_ms = (int)v;
        return rv;
    case CO_NAK:
    case CO_TERM:
        return settle_option(a, id, val, err, errlen);
    case CO_ACK_SYNC:
        a->ack_sync = true;
        return 0;
    case CO_COUNT:
        return positive("count", val, UINT64_MAX, &a->count, err, errlen);
    case CO_JSON:
        a->json = true;
        return 0;
    case CO_TIMEOUT:
        return positive("timeout-ms", val, UINT32_MAX, &a->timeout_ms, err, errlen);
    default:
        return 0;
    }
}

int fx_cli_consume_check(const fx_cli_consume_args *a, char *err, size_t errlen)
{
    if (a->group == NULL) {
        snprintf(err, errlen, "missing --group G");
        return -EINVAL;
    }
    if (a->settle_flags > 1) {
        snprintf(err, errlen, "give one of --nak and --term, once");
        return -EINVAL;
    }
    return 0;
}
