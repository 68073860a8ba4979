/* A consumer group's own settings (fx_broker_group_settings, broker.h):
 * parsing and bounds, applying them over the broker's defaults to an engine
 * configuration, comparing a re-create with a group, and their JSON text
 * (the admin object, and the <stem>.settings file of a durable stream's
 * group, group_journal.c). Pure; any thread. */
#ifndef FX_BROKER_GROUP_SETTINGS_H
#define FX_BROKER_GROUP_SETTINGS_H

#include <jansson.h>
#include <stddef.h>

#include "broker/broker.h"
#include "broker/group_state.h"

/* Longest settings file (its JSON text). */
#define FXB_GSET_TEXT_MAX 1024

/* Applies the keys of |s| (may be NULL: nothing) over |c| (the broker's
 * defaults): a given ack_wait_ms above the default max_ack_wait_ms raises
 * it (unless that is given too), a given max_ack_pending also sets
 * max_parked (unless given) and member_window_max (half of it), as the
 * broker-wide group_max_in_flight does. Then checks the result
 * (fxb_gs_config_check). 0 or -EINVAL with a static reason in |*why|. */
int fxb_gset_apply(const fx_broker_group_settings *s, fxb_gs_config *c, const char **why);

/* The first key of |s| whose value differs from the group's configuration
 * |c|, written as "key (the group has X, asked Y)" into |out|; returns
 * false when every key given matches. */
bool fxb_gset_differs(const fx_broker_group_settings *s, const fxb_gs_config *c, char *out,
                      size_t cap);

/* The keys of |s| as a JSON object (NULL on no memory). */
json_t *fxb_gset_json(const fx_broker_group_settings *s);

/* |s| as JSON text (malloc'd, |*plen| its length), NULL on no memory. */
char *fxb_gset_encode(const fx_broker_group_settings *s, size_t *plen);
/* Reads JSON text |buf| (|len| bytes) into |s| with the bounds of
 * fx_broker_group_setting_parse. 0, or -EINVAL with the reason in |why|. */
int fxb_gset_decode(const char *buf, size_t len, fx_broker_group_settings *s, char *why, size_t wl);

#endif
