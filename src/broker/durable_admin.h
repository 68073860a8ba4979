/* The admin side of durable streams: per-stream retention overrides
 * (fx_broker_set_stream_retention in broker.h), the durable fields of
 * GET /v1/streams and the per-stream gauges of /metrics. Private to
 * src/broker; thread noted per function. */
#ifndef FX_BROKER_DURABLE_ADMIN_H
#define FX_BROKER_DURABLE_ADMIN_H

#include <jansson.h>

#include "broker/broker_internal.h"

/* What GET /v1/streams shows of the durable streams, copied once per
 * request: the catalogue lock is held for one pass over the open logs and
 * the catalogue, never while the answer is built, and each stream's fields
 * are then found by handle id or name (no scan per stream). */
typedef struct fxb_durable_view fxb_durable_view;

/* Takes the view of |b|'s durable stage into |*pv| (NULL when the broker has
 * no durable storage). Returns 0 or -ENOMEM. Any thread but a storage
 * thread. */
int fxb_durable_view_take(fx_broker *b, fxb_durable_view **pv);

/* Frees |v| (NULL: nothing). */
void fxb_durable_view_free(fxb_durable_view *v);

/* Adds to GET /v1/streams entry |e| of stream |h|, from view |v| (may be
 * NULL): "durable", "durable_state" ("recovering", "open", "damaged",
 * "failed", "closed"; null when not durable), "durable_error" (damaged,
 * failed: the reason, with file and position; else null) and, for an open
 * log, "log_first_offset", "log_next_offset", "bytes_on_disk", "segments"
 * (null otherwise). */
void fxb_durable_describe(const fxb_durable_view *v, const fx_stream_handle *h, json_t *e);

/* Adds to GET /v1/streams entry |e| of stream |h| "retention_bytes" and
 * "retention_seconds": the stream's overrides from the catalogue in view
 * |v| (may be NULL), null when it has none (the broker's
 * durable_retention_* apply) or is not durable. */
void fxb_durable_describe_retention(const fxb_durable_view *v, const fx_stream_handle *h,
                                    json_t *e);

struct fxb_durable;

/* Registers the per-stream gauges of |d|'s open logs (felix_storage_stream_*,
 * labelled tenant/namespace/stream: durable streams only) with the metrics
 * registry; _stop removes them (after it returns no scrape reads |d|). Main
 * thread: at the stage's init and before it is freed. */
void fxb_durable_metrics_start(struct fxb_durable *d);
void fxb_durable_metrics_stop(struct fxb_durable *d);

#endif
