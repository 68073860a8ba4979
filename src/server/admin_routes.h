/* The broker's routes on the admin HTTP endpoint: the stream admin API
 * (GET /v1/streams, PUT, PATCH and DELETE
 * /v1/streams/{tenant}/{namespace}/{stream},
 * GET /v1/subscriptions), the declared caches (GET /v1/caches, PUT and
 * DELETE /v1/tenants/{tenant}/namespaces/{namespace}/caches/{cache}) and
 * the consumer groups of a stream (GET, PUT and
 * DELETE .../{stream}/groups[/{group}], POST .../groups/{group}/seek,
 * GET .../groups/{group}/dead-letters), JSON in and out. Each handler calls
 * the broker's control functions (broker.h), which ask the loops with a
 * timeout; no handler reads loop-owned state. Handlers run on the
 * endpoint's threads. */
#ifndef FX_SERVER_ADMIN_ROUTES_H
#define FX_SERVER_ADMIN_ROUTES_H

#include "broker/broker.h"
#include "server/admin.h"

/* Routes written by fx_admin_broker_routes(). */
#define FX_ADMIN_BROKER_NROUTES 10u
/* How long a handler waits for the loops before answering 503. */
#define FX_ADMIN_BROKER_TIMEOUT_NS (2ull * 1000000000ull)

/* Writes the broker's FX_ADMIN_BROKER_NROUTES routes into |out|, for
 * fx_admin_opts.routes. |b| must outlive the admin endpoint: free the
 * endpoint (fx_admin_free) before the broker. Answers: 200 with JSON for the
 * lists; PUT 201 (created) or 200 (existed), 400 with {"error": reason} for
 * an invalid name, path or body, 409 for a durability flip, 429 at
 * max_streams_per_tenant, 503 while draining; PUT (with "durable": true) and
 * PATCH also set the retention overrides "retention_bytes" and
 * "retention_seconds" of a durable stream (PATCH: 200, 404, 400 for a stream
 * in memory or a bad bound, 409 for a stated durability that is not the
 * stream's); DELETE 200 or 404; 503 FX_ADMIN_TIMEOUT_BODY when a loop did not answer in
 * time. Consumer groups (body {"start": "all"|"new"|"last"|{"offset": N}},
 * optional for PUT, required for seek): GET 200 with the broker's JSON, 404
 * when the stream or group does not exist; PUT 201 (created) or 200
 * (existed with every setting the body gives; the group's own settings,
 * fx_broker_group_settings, may come beside "start": 400 for an unknown key
 * or a bad bound, 409 naming the key when it exists with another value);
 * seek 200; DELETE 200, 404 (none), 409 while members are
 * joined; 400 for a bad path, name or body, 409 for an offset past the tail,
 * 429 at max_groups_per_stream. Caches: GET /v1/caches 200 with
 * {"caches":[...]}; PUT 201 (declared) or 200 (was), 400 for a bad path or
 * name, 429 at FXB_CACHE_MAX_DECLARED; DELETE 200 {..., "deleted": true,
 * "entries": n}, 404 when neither declared nor used. Any
 * thread. */
void fx_admin_broker_routes(fx_broker *b, fx_admin_route *out);

#endif
