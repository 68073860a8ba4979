/* A consumer group's own settings: bounds, application over the broker's
 * defaults, comparison and JSON text (group_settings.h). Pure; any thread. */
#include "broker/group_settings.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS_MAX 43200000ll   /* 12 h, as the broker-wide keys */
#define COUNT_MAX 1000000ll /* as group_max_attempts, group_max_in_flight */
#define BYTES_MAX (1ll << 40)

typedef struct key_desc {
    const char *name;
    uint32_t bit;
    long long min, max;
} key_desc;

static const key_desc KEYS[] = {
    {"ack_wait_ms", FX_BROKER_GSET_ACK_WAIT, 1, MS_MAX},
    {"max_ack_wait_ms", FX_BROKER_GSET_MAX_ACK_WAIT, 1, MS_MAX},
    {"max_deliver", FX_BROKER_GSET_MAX_DELIVER, -1, COUNT_MAX},
    {"max_ack_pending", FX_BROKER_GSET_MAX_ACK_PENDING, 1, COUNT_MAX},
    {"max_ack_pending_bytes", FX_BROKER_GSET_MAX_ACK_PENDING_BYTES, 1, BYTES_MAX},
    {"max_parked", FX_BROKER_GSET_MAX_PARKED, 0, COUNT_MAX},
    {"backoff_ms", FX_BROKER_GSET_BACKOFF, 0, MS_MAX},
};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))

static const key_desc *key_of(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0)
            return &KEYS[i];
    return NULL;
}

int fx_broker_group_setting_parse(fx_broker_group_settings *s, const char *key,
                                  const struct json_t *v, char *why, size_t wl)
{
    const key_desc *k = key_of(key);
    if (k == NULL) {
        snprintf(why, wl,
                 "unknown field \"%s\": a group's settings are ack_wait_ms, max_ack_wait_ms, "
                 "max_deliver, max_ack_pending, max_ack_pending_bytes, max_parked and "
                 "backoff_ms",
                 key);
        return -EINVAL;
    }
    if (k->bit == FX_BROKER_GSET_BACKOFF) {
        if (!json_is_array(v) || json_array_size(v) > FX_BROKER_GSET_MAX_BACKOFF) {
            snprintf(why, wl, "\"backoff_ms\" must be an array of at most %d delays in ms",
                     FX_BROKER_GSET_MAX_BACKOFF);
            return -EINVAL;
        }
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_integer(e) || json_integer_value(e) < k->min ||
                json_integer_value(e) > k->max) {
                snprintf(why, wl, "\"backoff_ms\" delays must be whole numbers from 0 to %lld",
                         k->max);
                return -EINVAL;
            }
            s->backoff_ms[i] = (uint32_t)json_integer_value(e);
        }
        s->n_backoff = (uint32_t)json_array_size(v);
        s->has |= k->bit;
        return 0;
    }
    long long x = json_is_integer(v) ? (long long)json_integer_value(v) : 0;
    if (!json_is_integer(v) || x < k->min || x > k->max ||
        (k->bit == FX_BROKER_GSET_MAX_DELIVER && x == 0)) {
        if (k->bit == FX_BROKER_GSET_MAX_DELIVER)
            snprintf(why, wl, "\"max_deliver\" must be -1 (unlimited) or from 1 to %lld", k->max);
        else
            snprintf(why, wl, "\"%s\" must be a whole number from %lld to %lld", key, k->min,
                     k->max);
        return -EINVAL;
    }
    switch (k->bit) {
    case FX_BROKER_GSET_ACK_WAIT:
        s->ack_wait_ms = (uint32_t)x;
        break;
    case FX_BROKER_GSET_MAX_ACK_WAIT:
        s->max_ack_wait_ms = (uint32_t)x;
        break;
    case FX_BROKER_GSET_MAX_DELIVER:
        s->max_deliver = (int32_t)x;
        break;
    case FX_BROKER_GSET_MAX_ACK_PENDING:
        s->max_ack_pending = (uint32_t)x;
        break;
    case FX_BROKER_GSET_MAX_ACK_PENDING_BYTES:
        s->max_ack_pending_bytes = (uint64_t)x;
        break;
    default:
        s->max_parked = (uint32_t)x;
        break;
    }
    s->has |= k->bit;
    return 0;
}

int fxb_gset_apply(const fx_broker_group_settings *s, fxb_gs_config *c, const char **why)
{
    uint32_t has = s != NULL ? s->has : 0;
    if (has & FX_BROKER_GSET_ACK_WAIT) {
        c->ack_wait_ms = s->ack_wait_ms;
        if (!(has & FX_BROKER_GSET_MAX_ACK_WAIT) && c->max_ack_wait_ms < c->ack_wait_ms)
            c->max_ack_wait_ms = c->ack_wait_ms;
    }
    if (has & FX_BROKER_GSET_MAX_ACK_WAIT)
        c->max_ack_wait_ms = s->max_ack_wait_ms;
    if (has & FX_BROKER_GSET_MAX_DELIVER)
        c->max_deliver = s->max_deliver;
    if (has & FX_BROKER_GSET_MAX_ACK_PENDING) {
        c->max_ack_pending = s->max_ack_pending;
        c->max_parked = s->max_ack_pending;
        c->member_window_max = s->max_ack_pending / 2 > 0 ? s->max_ack_pending / 2 : 1;
    }
    if (has & FX_BROKER_GSET_MAX_ACK_PENDING_BYTES)
        c->max_ack_pending_bytes = s->max_ack_pending_bytes;
    if (has & FX_BROKER_GSET_MAX_PARKED)
        c->max_parked = s->max_parked;
    if (has & FX_BROKER_GSET_BACKOFF) {
        c->n_backoff = s->n_backoff;
        memcpy(c->backoff_ms, s->backoff_ms, s->n_backoff * sizeof(c->backoff_ms[0]));
    }
    if (c->max_ack_wait_ms < c->ack_wait_ms) {
        *why = "max_ack_wait_ms is below ack_wait_ms (given, or the broker's "
               "group_visibility_timeout_ms)";
        return -EINVAL;
    }
    return fxb_gs_config_check(c, why);
}

bool fxb_gset_differs(const fx_broker_group_settings *s, const fxb_gs_config *c, char *out,
                      size_t cap)
{
    uint32_t has = s != NULL ? s->has : 0;
#define DIFF_U(bit, key, mine, asked)                                                              \
    if ((has & (bit)) && (uint64_t)(mine) != (uint64_t)(asked)) {                                  \
        snprintf(out, cap, "%s (the group has %" PRIu64 ", asked %" PRIu64 ")", key,               \
                 (uint64_t)(mine), (uint64_t)(asked));                                             \
        return true;                                                                               \
    }
    DIFF_U(FX_BROKER_GSET_ACK_WAIT, "ack_wait_ms", c->ack_wait_ms, s->ack_wait_ms)
    DIFF_U(FX_BROKER_GSET_MAX_ACK_WAIT, "max_ack_wait_ms", c->max_ack_wait_ms, s->max_ack_wait_ms)
    if ((has & FX_BROKER_GSET_MAX_DELIVER) && c->max_deliver != s->max_deliver) {
        snprintf(out, cap, "max_deliver (the group has %" PRId32 ", asked %" PRId32 ")",
                 c->max_deliver, s->max_deliver);
        return true;
    }
    DIFF_U(FX_BROKER_GSET_MAX_ACK_PENDING, "max_ack_pending", c->max_ack_pending,
           s->max_ack_pending)
    DIFF_U(FX_BROKER_GSET_MAX_ACK_PENDING_BYTES, "max_ack_pending_bytes", c->max_ack_pending_bytes,
           s->max_ack_pending_bytes)
    DIFF_U(FX_BROKER_GSET_MAX_PARKED, "max_parked", c->max_parked, s->max_parked)
#undef DIFF_U
    if ((has & FX_BROKER_GSET_BACKOFF) &&
        (c->n_backoff != s->n_backoff ||
         memcmp(c->backoff_ms, s->backoff_ms, s->n_backoff * sizeof(s->backoff_ms[0])) != 0)) {
        snprintf(out, cap, "backoff_ms (the group has another list of delays)");
        return true;
    }
    return false;
}

json_t *fxb_gset_json(const fx_broker_group_settings *s)
{
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    uint32_t has = s->has;
    if (has & FX_BROKER_GSET_ACK_WAIT)
        json_object_set_new(o, "ack_wait_ms", json_integer(s->ack_wait_ms));
    if (has & FX_BROKER_GSET_MAX_ACK_WAIT)
        json_object_set_new(o, "max_ack_wait_ms", json_integer(s->max_ack_wait_ms));
    if (has & FX_BROKER_GSET_MAX_DELIVER)
        json_object_set_new(o, "max_deliver", json_integer(s->max_deliver));
    if (has & FX_BROKER_GSET_MAX_ACK_PENDING)
        json_object_set_new(o, "max_ack_pending", json_integer(s->max_ack_pending));
    if (has & FX_BROKER_GSET_MAX_ACK_PENDING_BYTES)
        json_object_set_new(o, "max_ack_pending_bytes",
                            json_integer((json_int_t)s->max_ack_pending_bytes));
    if (has & FX_BROKER_GSET_MAX_PARKED)
        json_object_set_new(o, "max_parked", json_integer(s->max_parked));
    if (has & FX_BROKER_GSET_BACKOFF) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < s->n_backoff; i++)
            json_array_append_new(a, json_integer(s->backoff_ms[i]));
        json_object_set_new(o, "backoff_ms", a);
    }
    return o;
}

char *fxb_gset_encode(const fx_broker_group_settings *s, size_t *plen)
{
    json_t *o = fxb_gset_json(s);
    char *t = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (t != NULL)
        *plen = strlen(t);
    return t;
}

int fxb_gset_decode(const char *buf, size_t len, fx_broker_group_settings *s, char *why, size_t wl)
{
    *s = (fx_broker_group_settings){0};
    json_error_t jerr;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        snprintf(why, wl, "not a JSON object: %s", o == NULL ? jerr.text : "another value");
        json_decref(o);
        return -EINVAL;
    }
    const char *key;
    json_t *v;
    int rv = 0;
    json_object_foreach(o, key, v)
    {
        if ((rv = fx_broker_group_setting_parse(s, key, v, why, wl)) != 0)
            break;
    }
    json_decref(o);
    return rv;
}
