/* The per-group series of /metrics (group_metrics.c): each consumer group
 * of a worker publishes its numbers (fx_mgroup_id, base/metrics.h) into a
 * small record the scrape reads, so a scrape never touches the worker's
 * state. The worker writes the record's values with relaxed atomics after
 * every pump of the group (and at its create and delete); the records of
 * one worker hang on a list under that worker's mutex, taken by the worker
 * only to add or remove one and by a scrape while it reads them. The
 * worker's set is one fx_mgroup_source, made with its first group and gone
 * at fxb_group_worker_deinit. Worker loop unless said. */
#ifndef FX_BROKER_GROUP_METRICS_H
#define FX_BROKER_GROUP_METRICS_H

#include "broker/group_int.h"

struct fxb_gmetric;
struct fxb_gmset;

/* Gives group |g| its record (g->gm; on no memory it stays NULL: the group
 * is not shown, logged). */
void fxb_gmetric_add(struct fxb_group *g);
/* Publishes |g|'s numbers now (its stream's tail |tail| for the lag; its
 * earlier lag is kept when |tail| is UINT64_MAX). */
void fxb_gmetric_publish(struct fxb_group *g, uint64_t tail);
/* Removes |g|'s record (deleted, or its stream ended). */
void fxb_gmetric_remove(struct fxb_group *g);
/* Unregisters the worker's source and frees its records (teardown: the
 * loop stopped). */
void fxb_gmetric_worker_deinit(fxb_worker *w);

#endif
