/* The pipeline view of the admin endpoint: GET /v1/pipeline, one JSON
 * document with the broker's checkpoints 3-6 as the design's table lists them
 * (bound, what is held now, policy, drops, waits), the QUIC send side, the
 * top streams and the slowest subscribers; and GET /ui, a page that draws it.
 * The document is rebuilt at most once a second (a request within a second of
 * the last rebuild gets the same snapshot), so polling it costs the loops
 * nothing more than one walk per second. Handlers run on the admin
 * endpoint's threads. */
#ifndef FX_SERVER_PIPELINE_H
#define FX_SERVER_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"
#include "server/admin.h"

typedef struct fx_pipeline fx_pipeline;

/* Routes written by fx_pipeline_routes(). */
#define FX_PIPELINE_NROUTES 2u
/* Streams and subscribers listed in the document at most. */
#define FX_PIPELINE_TOP 10u

/* Creates the view of |b| (borrowed: free the admin endpoint, then this,
 * then the broker). Returns 0 or -ENOMEM. */
int fx_pipeline_new(fx_pipeline **pp, fx_broker *b);
void fx_pipeline_free(fx_pipeline *p);

/* Writes the JSON document into |*pjson| (malloc'd, the caller frees),
 * rebuilding the snapshot when it is older than a second at |now_ns|.
 * Returns 0, FX_ETIMEDOUT (a loop did not answer), -ENOMEM. Any thread. */
int fx_pipeline_json(fx_pipeline *p, uint64_t now_ns, char **pjson);

/* Writes GET /v1/pipeline and GET /ui into |out| (FX_PIPELINE_NROUTES
 * entries) for fx_admin_opts.routes. */
void fx_pipeline_routes(fx_pipeline *p, fx_admin_route *out);

/* The page served at /ui (HTML with its CSS and JavaScript inline). */
extern const char fx_pipeline_ui_html[];
extern const size_t fx_pipeline_ui_html_len;

#endif
