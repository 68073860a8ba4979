/* The broker's side of the cluster mirrors (src/cluster/mirror.h,
 * docs/cluster.md "Mirror"): a subscribe without FEATURE_REDIRECT for a
 * stream another node owns is served from a local mirror stream (a registry
 * stream marked as a mirror), and the mirror's ops (append as a job on the
 * stream's worker, in_use, route, stopped) act on the broker. Connection
 * loop for fxb_mirror_subscribe and fxb_mirror_owned; the ops run on the
 * mirror threads. */
#ifndef FX_BROKER_MIRROR_LOCAL_H
#define FX_BROKER_MIRROR_LOCAL_H

#include "broker/broker_internal.h"
#include "cluster/cluster.h"
#include "cluster/mirror.h"

/* Serves subscribe |m| on |s| (routed to the other node |r|) from the
 * local mirror of its stream when the broker has mirrors and the client did
 * not offer FEATURE_REDIRECT: makes the mirror stream (or finds it), starts
 * the mirror if there is none, and stores the stream in |*ph| (borrowed:
 * the stream's cache holds it). Returns false when it cannot (no mirrors,
 * the bound, no memory: logged and counted), then the caller answers as
 * before. Conn loop. */
bool fxb_mirror_subscribe(fxb_bidi *s, const fx_msg *m, const fx_cluster_route *r,
                          fx_stream_handle **ph);

/* A subscription |sub| of a mirror stream whose mirror has not subscribed
 * upstream yet: its registration (reg_task) is posted once it has, so it
 * misses nothing published meanwhile. Returns true when deferred, false
 * when the caller posts it now. Conn loop. */
bool fxb_mirror_defer_register(fxb_sub *sub);

/* This node owns the stream of |h| now: if |h| is a mirror stream, its
 * mirror is stopped and the stream released (its local subscribers' event
 * streams end; they subscribe again and are served here by the owner's
 * stream), before the caller makes the owner's. Any thread. */
void fxb_mirror_owned(fx_broker *b, fx_stream_handle *h);


#endif
