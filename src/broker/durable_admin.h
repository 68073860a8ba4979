/* The admin side of durable streams: per-stream retention overrides
 * (fx_broker_set_stream_retention in broker.h) and their fields in
 * GET /v1/streams. Private to src/broker; thread noted per function. */
#ifndef FX_BROKER_DURABLE_ADMIN_H
#define FX_BROKER_DURABLE_ADMIN_H

#include <jansson.h>

#include "broker/broker_internal.h"

/* Adds to GET /v1/streams entry |e| of stream |h| "retention_bytes" and
 * "retention_seconds": the stream's overrides from the catalogue, null when
 * it has none (the broker's durable_retention_* apply) or is not durable.
 * Any thread but a storage thread. */
void fxb_durable_describe_retention(fx_broker *b, const fx_stream_handle *h, json_t *e);

struct fxb_durable;

/* Registers the per-stream gauges of |d|'s open logs (felix_storage_stream_*,
 * labelled tenant/namespace/stream: durable streams only) with the metrics
 * registry; _stop removes them (after it returns no scrape reads |d|). Main
 * thread: at the stage's init and before it is freed. */
void fxb_durable_metrics_start(struct fxb_durable *d);
void fxb_durable_metrics_stop(struct fxb_durable *d);

#endif
