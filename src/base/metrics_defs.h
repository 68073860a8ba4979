/* The list of every metric Felix-C exports, one X-macro list per subsystem.
 * metrics.h expands these lists into the value structs and the descriptor
 * table, so adding a metric is one line here. Exported names are the ones users
 * of the Rust original know (felix-facts.md §8); C field names are global
 * across all lists (the structs are flat), so prefix them by subsystem.
 *
 * Entry shapes:
 *   C(field, "name", "label", "help")        counter, name ends in _total
 *   G(field, "name", "label", "help")        gauge (int64, may go down)
 *   H(field, "name", "label", "help", lo)    histogram; finite bucket bounds
 *                                            are 2^lo .. 2^(lo+FX_HIST_NBUCKETS-1),
 *                                            or a fixed list when |lo| is an
 *                                            FX_HIST_FIXED_* below
 * "label" is "" or one fixed "key=value" pair. Several entries may share a
 * name (then they must be adjacent, of one type, with one help text, and
 * differ by label value): that is how one labelled metric such as
 * felix_publish_requests_total{result} is declared. */
#ifndef FX_METRICS_DEFS_H
#define FX_METRICS_DEFS_H

/* H() |lo| values from FX_HIST_FIXED_BASE name a fixed list of bucket bounds
 * (fx_hist_fixed_of in metrics.h) instead of powers of two. */
#define FX_HIST_FIXED_BASE 64
/* Observed in microseconds, exported in seconds: 100 us, 250 us, 500 us, 1,
 * 2.5, 5, 10, 25, 50, 100, 250 ms (a consumer group engine's lateness
 * buckets, group_state.h). */
#define FX_HIST_FIXED_LATENESS (FX_HIST_FIXED_BASE + 0)

/* ---- broker ingress (checkpoints 3 and 4) ------------------------------ */
#define FX_METRICS_BROKER(C, G, H)                                                                 \
    C(ingress_dropped, "felix_broker_ingress_dropped_total", "",                                   \
      "Unacked publishes shed at a full broker worker queue, or at an exhausted byte budget "      \
      "when a frame of small messages needs bytes beyond its header's reservation (the header "    \
      "itself waits)")                                                                             \
    C(ingress_dropped_messages, "felix_broker_ingress_dropped_messages_total", "",                 \
      "Messages in the unacked publishes shed at a full broker worker queue (a publish batch "     \
      "frame, or a frame of publishes the client merged, counts each of its messages)")            \
    C(ingress_rejected, "felix_broker_ingress_rejected_total", "",                                 \
      "Publishes refused with an error reply because they could not be admitted")                  \
    C(ingress_queue_full, "felix_broker_ingress_queue_full_total", "",                             \
      "Times a publish found its broker worker queue full")                                        \
    C(ingress_bytes_full, "felix_broker_ingress_bytes_full_total", "",                             \
      "Times a publish job found the process-wide byte budget exhausted taking bytes beyond its "  \
      "frame's reservation (frame headers wait instead, counted in "                               \
      "felix_broker_ingress_reserve_waited_total)")                                                \
    C(ingress_conn_bytes_full, "felix_broker_ingress_conn_bytes_full_total", "",                   \
      "Times a publish job found its connection's byte share exhausted taking bytes beyond its "   \
      "frame's reservation (frame headers wait instead, counted in "                               \
      "felix_broker_ingress_reserve_waited_total)")                                                \
    C(ingress_waited, "felix_broker_ingress_waited_total", "",                                     \
      "Publishes that parked for room in their broker worker queue before admission")              \
    C(ingress_backpressure_cancelled, "felix_broker_ingress_backpressure_cancelled_total", "",     \
      "Publishes whose wait for admission ended by timeout or stream close, and whole requests "   \
      "buffered behind a parked one when its stream closed")                                       \
    G(ingress_queue_depth, "felix_broker_ingress_queue_depth", "",                                 \
      "Publish jobs queued at broker workers, all workers")                                        \
    C(broker_stream_errors, "felix_broker_stream_errors_total", "",                                \
      "Client streams reset for malformed input (bad frame, JSON or batch, oversize partials)")    \
    C(broker_auth_failed, "felix_broker_auth_refused_total", "reason=auth_failed",                 \
      "Client requests refused by authentication: auth_failed (token refused, stream ended), "     \
      "forbidden (publish or subscribe without the permission)")                                   \
    C(broker_auth_forbidden, "felix_broker_auth_refused_total", "reason=forbidden",                \
      "Client requests refused by authentication: auth_failed (token refused, stream ended), "     \
      "forbidden (publish or subscribe without the permission)")                                   \
    C(broker_conn_refused, "felix_broker_connections_refused_total", "",                           \
      "Connections closed at once, reason too many connections (max_connections reached)")         \
    C(broker_frame_timeouts, "felix_broker_frame_timeouts_total", "",                              \
      "Client streams reset because a frame's body did not arrive within frame_read_timeout_ms")   \
    C(broker_timer_arm_failures, "felix_broker_timer_arm_failures_total", "",                      \
      "Timers the broker could not arm (out of memory): the commit ack or the publish waiting at " \
      "admission that needed one was failed at once, a durable flush was run at once")             \
    C(broker_allocator_idle_periods, "felix_broker_allocator_idle_periods_total", "",              \
      "Idle periods (no datagram sent or received for allocator_idle_trim_ms) the broker "         \
      "looked at to return freed heap to the kernel")                                              \
    C(broker_allocator_trims, "felix_broker_allocator_trims_total", "",                            \
      "Times an idle broker returned freed heap to the kernel (malloc_trim): at the start of an "  \
      "idle period if RSS grew 1 MiB or the free heap 256 KiB since the last trim, later if the "  \
      "free heap grew 256 KiB or RSS 1 MiB")                                                       \
    C(broker_allocator_trimmed_bytes, "felix_broker_allocator_trimmed_bytes_total", "",            \
      "Resident bytes the idle trims gave back to the kernel (RSS before minus after)")            \
    C(ingress_reserve_waited, "felix_broker_ingress_reserve_waited_total", "",                     \
      "Frame headers whose byte reservation had to wait (the stream stopped reading meanwhile)")   \
    G(ingress_reserved_bytes, "felix_broker_ingress_reserved_bytes", "",                           \
      "Bytes reserved by frame headers for frames not yet complete and admitted, all "             \
      "connections")                                                                               \
    G(preauth_held_bytes, "felix_broker_preauth_held_bytes", "",                                   \
      "Frame bytes held for client streams that have not authenticated, all connections "          \
      "(at most preauth_max_bytes)")                                                               \
    C(preauth_conn_auth_timeout, "felix_broker_preauth_connections_closed_total",                  \
      "reason=auth_timeout",                                                                       \
      "Connections closed before authenticating: auth_timeout (no stream authenticated within "    \
      "auth_timeout_ms), per_ip (max_connections_per_ip reached), auth_failures "                  \
      "(auth_failures_per_conn failed verifications)")                                             \
    C(preauth_conn_per_ip, "felix_broker_preauth_connections_closed_total", "reason=per_ip",       \
      "Connections closed before authenticating: auth_timeout (no stream authenticated within "    \
      "auth_timeout_ms), per_ip (max_connections_per_ip reached), auth_failures "                  \
      "(auth_failures_per_conn failed verifications)")                                             \
    C(preauth_conn_auth_failures, "felix_broker_preauth_connections_closed_total",                 \
      "reason=auth_failures",                                                                      \
      "Connections closed before authenticating: auth_timeout (no stream authenticated within "    \
      "auth_timeout_ms), per_ip (max_connections_per_ip reached), auth_failures "                  \
      "(auth_failures_per_conn failed verifications)")                                             \
    C(preauth_unauth_streams, "felix_broker_preauth_streams_refused_total",                        \
      "reason=unauth_streams",                                                                     \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_frame_too_large, "felix_broker_preauth_streams_refused_total",                       \
      "reason=frame_too_large",                                                                    \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_bytes, "felix_broker_preauth_streams_refused_total", "reason=preauth_bytes",         \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_protocol_error, "felix_broker_preauth_streams_refused_total",                        \
      "reason=protocol_error",                                                                     \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_stream_auth_timeout, "felix_broker_preauth_streams_refused_total",                   \
      "reason=auth_timeout",                                                                       \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_auth_rate, "felix_broker_preauth_streams_refused_total", "reason=auth_rate",         \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(preauth_max_bytes, "felix_broker_preauth_streams_refused_total", "reason=preauth_max_bytes", \
      "Client streams refused before authenticating: unauth_streams "                              \
      "(max_unauth_streams_per_conn), frame_too_large (a frame over 64 KiB), preauth_bytes (the"   \
      " connection's pre-auth frame bytes), protocol_error, auth_timeout (auth_timeout_ms), "      \
      "auth_rate (auth_rate_per_ip), preauth_max_bytes (pre-auth frame bytes of all "              \
      "connections)")                                                                              \
    C(broker_auth_expired, "felix_broker_auth_lapsed_total", "reason=expired",                     \
      "Authenticated streams and subscriptions ended because their credentials lapsed: expired "   \
      "(exp plus leeway passed), key_removed (a key set reload removed the signing key)")          \
    C(broker_auth_key_removed, "felix_broker_auth_lapsed_total", "reason=key_removed",             \
      "Authenticated streams and subscriptions ended because their credentials lapsed: expired "   \
      "(exp plus leeway passed), key_removed (a key set reload removed the signing key)")          \
    C(broker_json_too_complex, "felix_broker_json_too_complex_total", "",                          \
      "JSON frames refused before parsing for holding more elements than any Felix message does")  \
    C(broker_conn_replies_full, "felix_broker_conn_replies_full_total", "",                        \
      "Times a connection's queued replies reached their bound (its streams stopped reading "      \
      "until the client read them)")

/* ---- subscribe: per-subscriber queues, lanes, subscriber connections --- */
#define FX_METRICS_SUB(C, G, H)                                                                    \
    C(subscribe_req_ok, "felix_subscribe_requests_total", "result=ok",                             \
      "Subscribe requests by result")                                                              \
    C(subscribe_req_error, "felix_subscribe_requests_total", "result=error",                       \
      "Subscribe requests by result")                                                              \
    C(subscribe_dropped, "felix_subscribe_dropped_total", "",                                      \
      "Messages shed at a full subscriber queue (same events as "                                  \
      "felix_sub_queue_dropped_total)")                                                            \
    C(sub_queue_dropped, "felix_sub_queue_dropped_total", "",                                      \
      "Messages shed at a full subscriber queue (DropNew and DropOld)")                            \
    C(sub_queue_drop_old, "felix_sub_queue_drop_old_total", "",                                    \
      "Messages evicted from a full subscriber queue to make room (DropOld)")                      \
    C(sub_queue_enqueued, "felix_sub_queue_enqueued_total", "",                                    \
      "Envelopes enqueued to subscriber queues")                                                   \
    C(sub_queue_dequeued, "felix_sub_queue_dequeued_total", "",                                    \
      "Envelopes taken from subscriber queues")                                                    \
    G(sub_queue_len, "felix_sub_queue_len", "", "Envelopes held in subscriber queues, all queues") \
    C(sub_shared_batch_handles, "felix_sub_shared_batch_handles_total", "",                        \
      "Shared envelope references handed to subscriber queues")                                    \
    C(sub_shared_frame_encodes, "felix_sub_shared_frame_encodes_total", "",                        \
      "Shared event frames encoded (at most one per envelope, whatever the fanout)")               \
    C(sub_frame_encodes, "felix_sub_frame_encodes_total", "",                                      \
      "Per-subscriber event frames encoded (replay starting inside a batch, or a split batch)")    \
    C(subscriber_lane_dropped, "felix_subscriber_lane_dropped_total", "",                          \
      "Frame lists (a subscription's next write) shed at a full writer lane; their messages are "  \
      "in felix_subscriber_lane_dropped_events_total")                                             \
    C(subscriber_disconnect, "felix_subscriber_disconnect_total", "",                              \
      "Subscriber streams closed after a delivery write error")                                    \
    G(sub_active_connections, "felix_sub_active_connections", "",                                  \
      "Connections with at least one subscription")                                                \
    C(subscriber_lane_dropped_events, "felix_subscriber_lane_dropped_events_total", "",            \
      "Messages inside the frame lists shed at a full writer lane")                                \
    G(sub_subscriptions, "felix_sub_subscriptions", "", "Subscriptions currently registered")

/* ---- durable storage (docs/durability.md) ----------------------------- */
#define FX_METRICS_STORAGE(C, G, H)                                                                \
    C(storage_append_records, "felix_storage_append_records_total", "",                            \
      "Records appended to durable logs")                                                          \
    C(storage_append_bytes, "felix_storage_append_bytes_total", "",                                \
      "Bytes appended to durable logs (record headers included)")                                  \
    C(storage_append_writes, "felix_storage_append_writes_total", "",                              \
      "Writes that appended records to durable logs (jobs queued together share one)")             \
    C(storage_syncs, "felix_storage_sync_total", "",                                               \
      "Completed flushes (fdatasync) of durable logs")                                             \
    C(storage_sync_failures, "felix_storage_sync_failures_total", "",                              \
      "Flushes that failed (the log stops taking appends until the broker restarts)")              \
    H(storage_sync_ns, "felix_storage_sync_duration_ns", "",                                       \
      "Nanoseconds one flush of a durable log took", 10)                                           \
    H(storage_sync_appends, "felix_storage_sync_batch_appends", "",                                \
      "Appends one flush served (group commit fan-in)", 0)                                         \
    C(storage_sync_offloaded, "felix_storage_sync_offloaded_total", "",                            \
      "Flushes whose fdatasync ran on a sync thread while the storage thread went on appending "   \
      "(durable_flush_pipeline)")                                                                  \
    C(storage_append_flush_waits, "felix_storage_append_flush_waits_total", "",                    \
      "Appends that waited for their log's flush in flight to complete (they needed a new "        \
      "segment, or periodic's durable_max_unsynced_bytes was reached)")                            \
    C(storage_flush_blocking_waits, "felix_storage_flush_blocking_waits_total", "",                \
      "Times a storage thread blocked until a flush in flight completed (the drain's flush, "      \
      "stop)")                                                                                     \
    G(storage_segments, "felix_storage_segment_count", "",                                         \
      "Segment files of the open durable logs")                                                    \
    G(storage_bytes_on_disk, "felix_storage_bytes_on_disk", "",                                    \
      "Bytes of the open durable logs' segment and index files")                                   \
    C(storage_errors, "felix_storage_errors_total", "",                                            \
      "Publishes failed by durable storage (\"storage full\" or \"storage error\")")               \
    C(storage_quota_bytes, "felix_storage_quota_refused_total", "reason=tenant_bytes",             \
      "Durable publishes, stream creations and durable cache writes refused with \"storage "      \
      "quota exceeded\": tenant_bytes (tenant_durable_bytes_max), durable_bytes "                  \
      "(durable_bytes_max), tenant_streams (tenant_durable_streams_max)")                          \
    C(storage_quota_broker_bytes, "felix_storage_quota_refused_total", "reason=durable_bytes",     \
      "Durable publishes, stream creations and durable cache writes refused with \"storage "      \
      "quota exceeded\": tenant_bytes (tenant_durable_bytes_max), durable_bytes "                  \
      "(durable_bytes_max), tenant_streams (tenant_durable_streams_max)")                          \
    C(storage_quota_streams, "felix_storage_quota_refused_total", "reason=tenant_streams",         \
      "Durable publishes, stream creations and durable cache writes refused with \"storage "      \
      "quota exceeded\": tenant_bytes (tenant_durable_bytes_max), durable_bytes "                  \
      "(durable_bytes_max), tenant_streams (tenant_durable_streams_max)")                          \
    G(storage_charged_bytes, "felix_storage_quota_charged_bytes", "",                              \
      "Bytes on disk the open durable logs charge to the quotas (preallocation counted)")          \
    C(storage_bound_waits, "felix_storage_unsynced_waits_total", "",                               \
      "Publish jobs that waited because their stream had durable_max_unsynced_bytes in storage")   \
    C(storage_retention_segments, "felix_storage_retention_segments_deleted_total", "",            \
      "Sealed segments deleted by retention")                                                      \
    C(storage_retention_bytes, "felix_storage_retention_bytes_reclaimed_total", "",                \
      "Bytes of segments deleted by retention")                                                    \
    C(storage_retention_clock_held, "felix_storage_retention_clock_held_total", "",                \
      "Time retention sweeps that did not follow a wall clock stepped ahead of the monotonic "     \
      "clock")                                                                                     \
    C(storage_recovery_truncations, "felix_storage_recovery_truncations_total", "",                \
      "Torn tails (a partial last record after a crash) cut when durable logs were opened")        \
    C(storage_recovery_truncated_bytes, "felix_storage_recovery_truncated_bytes_total", "",        \
      "Bytes of torn tails cut when durable logs were opened")                                     \
    C(storage_recovery_repairs, "felix_storage_recovery_repairs_total", "",                        \
      "Durable logs cut at a damaged record by --repair-durable")                                  \
    G(storage_quarantined_streams, "felix_storage_quarantined_streams", "",                        \
      "Durable streams whose log is damaged: their publishes and subscribes fail \"storage "       \
      "damaged\" until it is repaired")                                                            \
    G(storage_recovering_streams, "felix_storage_recovering_streams", "",                          \
      "Catalogued durable streams whose log has not been recovered yet since the start")           \
    C(storage_recovery_waits, "felix_storage_recovery_waits_total", "",                            \
      "Publishes and subscriptions that found their durable stream still recovering (its log "     \
      "was opened for them first)")                                                                \
    C(storage_open_failures, "felix_storage_open_failures_total", "",                              \
      "Durable log opens that failed other than by damage (ENOSPC, EMFILE, EIO...); tried again "  \
      "at most once a second")                                                                     \
    C(storage_delete_failures, "felix_storage_delete_failures_total", "",                          \
      "Deletions of a durable stream's files that failed (retried in the background)")             \
    G(storage_deletions_pending, "felix_storage_deletions_pending", "",                            \
      "Deleted durable streams whose files are not all removed yet (retried every 30 s)")          \
    C(storage_replays, "felix_storage_replays_total", "",                                          \
      "Subscriptions that started below the ring and read history from disk")                      \
    C(storage_replay_records, "felix_storage_read_records_total", "",                              \
      "Records read from durable logs for replays")                                                \
    C(storage_replay_bytes, "felix_storage_read_bytes_total", "",                                  \
      "Payload bytes read from durable logs for replays")                                          \
    C(storage_replay_failures, "felix_storage_replay_failures_total", "",                          \
      "Replays that failed (retention removed the range, damage, I/O error): the event stream "    \
      "ends")                                                                                      \
    C(storage_replay_index_seeks, "felix_storage_replay_index_seeks_total", "",                    \
      "Replays and group pages that started reading at a sparse index entry rather than at "       \
      "their segment's first record")

/* ---- publish outcomes -------------------------------------------------- */
#define FX_IDEM_HELP                                                                               \
    "Idempotent batches not appended, by reason: duplicate (answered from the window), "           \
    "sequence_gap, sequence_expired, sequence_reused, unknown_producer"
#define FX_METRICS_PUBLISH(C, G, H)                                                                \
    C(publish_accepted, "felix_publish_requests_total", "result=accepted",                         \
      "Publish requests by result: accepted (admitted), ok (appended), dropped (shed), error "     \
      "(refused)")                                                                                 \
    C(publish_ok, "felix_publish_requests_total", "result=ok",                                     \
      "Publish requests by result: accepted (admitted), ok (appended), dropped (shed), error "     \
      "(refused)")                                                                                 \
    C(publish_dropped, "felix_publish_requests_total", "result=dropped",                           \
      "Publish requests by result: accepted (admitted), ok (appended), dropped (shed), error "     \
      "(refused)")                                                                                 \
    C(publish_error, "felix_publish_requests_total", "result=error",                               \
      "Publish requests by result: accepted (admitted), ok (appended), dropped (shed), error "     \
      "(refused)")                                                                                 \
    C(publish_commit_timeouts, "felix_publish_commit_timeouts_total", "",                          \
      "Commit acks answered \"publish commit timeout\" after ack_wait_timeout_ms (the publish "    \
      "may still be appended)")                                                                    \
    C(publish_bytes, "felix_publish_bytes_total", "", "Payload bytes of admitted publishes")       \
    H(publish_latency_ns, "felix_publish_latency_ns", "",                                          \
      "Nanoseconds from a publish frame's arrival at the broker to its append", 10) \
    C(idem_producers_init, "felix_idempotent_producers_initialized_total", "",                    \
      "producer_init requests answered with a new producer id")                                    \
    C(idem_duplicate, "felix_idempotent_batches_total", "result=duplicate", FX_IDEM_HELP)          \
    C(idem_gap, "felix_idempotent_batches_total", "result=sequence_gap", FX_IDEM_HELP)             \
    C(idem_expired, "felix_idempotent_batches_total", "result=sequence_expired", FX_IDEM_HELP)     \
    C(idem_reused, "felix_idempotent_batches_total", "result=sequence_reused", FX_IDEM_HELP)       \
    C(idem_unknown, "felix_idempotent_batches_total", "result=unknown_producer", FX_IDEM_HELP)     \
    C(idem_forgotten, "felix_idempotent_producers_forgotten_total", "",                           \
      "Producers an in-memory stream's table forgot (4,096 per stream: the one whose newest "      \
      "batch is oldest)")                                                                          \
    G(idem_producers, "felix_idempotent_producers", "",                                            \
      "Producers the in-memory streams' tables hold (all streams)")

/* ---- QUIC transport ---------------------------------------------------- */
#define FX_METRICS_QUIC(C, G, H)                                                                   \
    C(quic_conn_accepted, "felix_quic_connections_accepted_total", "",                             \
      "QUIC connections whose handshake completed")                                                \
    C(quic_conn_closed, "felix_quic_connections_closed_total", "",                                 \
      "QUIC connections closed for any reason")                                                    \
    C(quic_handshake_failed, "felix_quic_handshake_failed_total", "",                              \
      "QUIC connections that failed before the handshake completed")                               \
    G(quic_conn_open, "felix_quic_connections_open", "", "QUIC connections currently open")        \
    C(quic_datagrams_in, "felix_quic_datagrams_received_total", "", "UDP datagrams received")      \
    C(quic_datagrams_out, "felix_quic_datagrams_sent_total", "", "UDP datagrams sent")             \
    C(quic_bytes_in, "felix_quic_bytes_received_total", "", "UDP payload bytes received")          \
    C(quic_bytes_out, "felix_quic_bytes_sent_total", "", "UDP payload bytes sent")

/* ---- admin HTTP endpoint ----------------------------------------------- */
#define FX_ADMIN_REFUSED_HELP                                                                      \
    "Admin HTTP requests and connections refused: host (Host header not this endpoint's), "        \
    "token (bearer token missing or wrong, or none configured for a mutating call), "              \
    "connection_limit (all or this address's connections in use), headers_too_large (request "     \
    "line and headers over the per-connection memory), body_too_large (request body over the "     \
    "limit)"
#define FX_METRICS_ADMIN(C, G, H)                                                                  \
    C(admin_refused_host, "felix_admin_refused_total", "reason=host", FX_ADMIN_REFUSED_HELP)       \
    C(admin_refused_token, "felix_admin_refused_total", "reason=token", FX_ADMIN_REFUSED_HELP)     \
    C(admin_refused_conn_limit, "felix_admin_refused_total", "reason=connection_limit",            \
      FX_ADMIN_REFUSED_HELP)                                                                       \
    C(admin_refused_headers, "felix_admin_refused_total", "reason=headers_too_large",              \
      FX_ADMIN_REFUSED_HELP)                                                                       \
    C(admin_refused_body, "felix_admin_refused_total", "reason=body_too_large",                    \
      FX_ADMIN_REFUSED_HELP)

/* ---- retention, stream lifetime and isolation limits -------------------- */
#define FX_METRICS_LIMITS(C, G, H)                                                                 \
    G(stream_retained_bytes, "felix_stream_retained_bytes", "",                                    \
      "Bytes the stream rings retain for replay, all streams: payload plus the per-message "       \
      "overhead")                                                                                  \
    C(stream_evicted_tenant_quota, "felix_stream_evicted_messages_total", "reason=tenant_quota",   \
      "Retained messages evicted early because an account was over its limit: tenant_quota "       \
      "(tenant_retained_bytes), retained_limit (retained_bytes_limit)")                            \
    C(stream_evicted_retained_limit, "felix_stream_evicted_messages_total",                        \
      "reason=retained_limit",                                                                     \
      "Retained messages evicted early because an account was over its limit: tenant_quota "       \
      "(tenant_retained_bytes), retained_limit (retained_bytes_limit)")                            \
    C(registry_streams_expired, "felix_registry_streams_expired_total", "",                        \
      "Auto-created streams removed after stream_idle_expiry_s without publisher, subscriber or "  \
      "publish")                                                                                   \
    C(registry_tenants_refused, "felix_registry_tenants_refused_total", "",                        \
      "Stream creations refused because they would add a tenant beyond max_tenants")               \
    C(registry_subscribe_not_created, "felix_registry_subscribe_not_created_total", "",            \
      "Subscribes to a missing stream refused under durable_default (a subscribe never creates "   \
      "a durable stream)")                                                                         \
    C(registry_tombstone_refused, "felix_registry_tombstone_refused_total", "",                    \
      "Auto-creations refused because an admin DELETE removed the stream less than "               \
      "stream_delete_tombstone_ms ago")                                                            \
    C(sub_block_timeouts, "felix_subscriber_block_timeouts_total", "",                             \
      "Connections closed because one of their subscriptions held a block queue full for longer "  \
      "than subscriber_block_timeout_ms")                                                          \
    C(drain_stalled_closed, "felix_drain_stalled_connections_closed_total", "",                    \
      "Connections closed during a drain, from half its deadline on, because they had work "       \
      "left and made no progress")

/* ---- consumer groups (src/broker/group.c) ------------------------------ */
#define FX_METRICS_GROUP(C, G, H)                                                                  \
    G(group_groups, "felix_group_groups", "", "Consumer groups the broker holds")                  \
    G(group_members, "felix_group_members", "", "Members joined to consumer groups")               \
    C(group_delivered, "felix_group_delivered_total", "",                                          \
      "Records handed to group members, first deliveries and redeliveries")                        \
    C(group_redelivered, "felix_group_redelivered_total", "",                                      \
      "Records handed to group members again (attempt above 1)")                                   \
    C(group_acked, "felix_group_acked_total", "", "Records settled by a member's ack")             \
    C(group_stale_ops, "felix_group_stale_total", "",                                              \
      "nak, in_progress, term and release refused because they named an attempt that is not "      \
      "the record's current delivery, or a member that does not hold it")                          \
    C(group_dead_max_deliver, "felix_group_dead_lettered_total", "reason=max_deliver",             \
      "Records given up on: delivered max_deliver times, or terminated by a member")               \
    C(group_dead_term, "felix_group_dead_lettered_total", "reason=term",                           \
      "Records given up on: delivered max_deliver times, or terminated by a member")               \
    C(group_dead_retried, "felix_group_dead_letter_retries_total", "",                             \
      "Dead letters the dead-letter stream could not take at once (its worker queue full, no "     \
      "memory): kept unsettled and tried again")                                                   \
    C(group_send_failed, "felix_group_send_failed_total", "",                                      \
      "Runs of records that could not be framed for a member (out of memory): given back, "        \
      "not counted as attempts")                                                                   \
    C(group_ops_failed, "felix_group_ops_failed_total", "",                                        \
      "GROUP_ACKS frames the group's worker could not apply (out of memory)")                      \
    C(group_ops_paused, "felix_group_ops_paused_total", "",                                        \
      "Times a member's join stream stopped reading because its GROUP_ACKS inbox held 256 KiB "    \
      "its group's worker had not applied yet (checkpoint 5a): QUIC flow control holds the "       \
      "client until the worker catches up; nothing is dropped")                                    \
    G(group_ops_queued_bytes, "felix_group_ops_queued_bytes", "",                                  \
      "Bytes of GROUP_ACKS frames queued for the groups' workers and not yet applied, all "        \
      "members (each member's inbox holds at most 256 KiB plus one frame)")                        \
    C(group_journal_records, "felix_group_journal_records_total", "",                              \
      "Records written to the journals of groups on durable streams")                              \
    C(group_journal_syncs, "felix_group_journal_syncs_total", "",                                  \
      "fdatasyncs of group journals (on_commit: per batch; periodic: with the log's flush)")       \
    C(group_journal_compactions, "felix_group_journal_compactions_total", "",                      \
      "Group journals compacted into a snapshot")                                                  \
    C(group_journal_waits, "felix_group_journal_waits_total", "",                                  \
      "Pump turns of a group on a durable stream that handed nothing out because its journal "     \
      "was 8,192 records behind, or failed")                                                       \
    C(group_ack_sync_deferred, "felix_group_ack_sync_deferred_total", "",                          \
      "GROUP_ACKED answers held until the group's journal records made before them were written")  \
    C(group_ack_sync_dropped, "felix_group_ack_sync_dropped_total", "",                            \
      "GROUP_ACKED answers never sent because the group's journal failed or the group went")       \
    C(group_journal_dropped, "felix_group_journal_records_dropped_total", "",                      \
      "Group journal records not written because the journal had failed or closed")                \
    C(group_journal_errors, "felix_group_journal_errors_total", "",                                \
      "Group journal failures (open, write, flush, compaction, out of memory), each logged")       \
    C(group_journal_recovered, "felix_group_journal_recovered_total", "",                          \
      "Groups of durable streams recovered from their journal at a log's open")                    \
    C(group_journal_refused, "felix_group_journal_refused_total", "",                              \
      "Groups whose files failed to open at recovery: refused, with the file and the reason")      \
    C(group_journal_clamped, "felix_group_journal_clamped_total", "",                              \
      "Recovered group states clamped to a log tail that lost records the group had seen")         \
    C(group_journal_torn_cut, "felix_group_journal_torn_tails_total", "",                          \
      "Torn journal tails cut at recovery (records no flush covered)")                             \
    C(group_log_pages, "felix_group_log_pages_total", "",                                          \
      "Pages of records below the ring read from a durable stream's log for a consumer group "     \
      "(one page per group at a time, on the worker's replay thread)")                             \
    C(group_log_read_errors, "felix_group_log_read_errors_total", "",                              \
      "Reads of a consumer group's page from a durable stream's log that failed (I/O error, "      \
      "corrupt record, no memory): logged, nothing skipped, tried again after 100 ms")             \
    C(group_skipped, "felix_group_skipped_total", "",                                              \
      "Records consumer groups settled unread: evicted from a ring before the group settled them " \
      "(the shedding profile, a ring hold that timed out or yielded, tenant_retained_bytes or "    \
      "retained_bytes_limit) or trimmed by a durable stream's retention")                          \
    C(group_hold_waits, "felix_group_hold_waits_total", "",                                        \
      "Appends to a stream in memory that waited because they would have evicted records a "       \
      "consumer group had not settled (checkpoint 4g, in the lossless profile: "                   \
      "subscriber_queue_policy block); the worker takes no input meanwhile")                       \
    C(group_hold_timeouts, "felix_group_hold_timeouts_total", "",                                  \
      "Held appends that went ahead after group_hold_timeout_ms: the group settles the records "   \
      "they evicted as skipped (felix_group_skipped_total), and holds again once caught up")       \
    C(group_hold_dead_letter_yields, "felix_group_hold_dead_letter_yields_total", "",              \
      "Appends that did not wait although they evicted records a group had given up on whose "     \
      "dead letters were not queued yet (the dead-letter stream's worker queue was full, and "     \
      "waiting could deadlock the worker that queue needs): those records are settled as skipped " \
      "instead of dead-lettered")                                                                  \
    G(group_hold_held, "felix_group_hold_held", "",                                                \
      "Workers whose next append waits for a consumer group now (checkpoint 4g; at most one per "  \
      "worker)")                                                                                   \
    H(group_redelivery_lateness, "felix_group_redelivery_lateness_seconds", "",                    \
      "How late consumer groups found their lapsed leases and ended parked waits (now minus the "  \
      "deadline), per record: the lease timer's slack",                                            \
      FX_HIST_FIXED_LATENESS)                                                                      \
    C(group_json_requests, "felix_group_json_requests_total", "",                                  \
      "JSON group requests (group_poll ... group_delete) run on their group's worker")             \
    C(group_json_refused_invalid, "felix_group_json_refused_total", "reason=invalid_request",      \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_not_found, "felix_group_json_refused_total", "reason=not_found",          \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_forbidden, "felix_group_json_refused_total", "reason=forbidden",          \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_stale, "felix_group_json_refused_total", "reason=stale_claim",            \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_overloaded, "felix_group_json_refused_total", "reason=overloaded",        \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_internal, "felix_group_json_refused_total", "reason=internal",            \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_refused_unsupported, "felix_group_json_refused_total", "reason=unsupported",      \
      "JSON group requests refused, by reason (docs/protocol.md, JSON consumer groups): "          \
      "invalid_request, not_found, forbidden (no group.consume / group.manage), stale_claim, "     \
      "overloaded (waiting polls, consumer names, max_groups_per_stream, draining), internal "     \
      "(no memory, a log not open), unsupported (a poll's reclaim)")                             \
    C(group_json_polls_empty, "felix_group_json_polls_empty_total", "",                            \
      "JSON group_poll answers with no record (nothing came within wait_ms, the "                  \
      "consumer at its window, the group deleted)")                                                \
    G(group_json_polls_waiting, "felix_group_json_polls_waiting", "",                              \
      "JSON group_poll requests waiting for records now, all groups")

/* ---- caches (cache_srv.c, docs/cache.md) ------------------------------ */
#define FX_METRICS_CACHE(C, G, H)                                                                  \
    C(cache_requests_get, "felix_cache_requests_total", "op=get",                                  \
      "Cache requests run on their cache's worker, by op: get, put, delete, put_if, delete_if")    \
    C(cache_requests_put, "felix_cache_requests_total", "op=put",                                  \
      "Cache requests run on their cache's worker, by op: get, put, delete, put_if, delete_if")    \
    C(cache_requests_delete, "felix_cache_requests_total", "op=delete",                            \
      "Cache requests run on their cache's worker, by op: get, put, delete, put_if, delete_if")    \
    C(cache_requests_put_if, "felix_cache_requests_total", "op=put_if",                            \
      "Cache requests run on their cache's worker, by op: get, put, delete, put_if, delete_if")    \
    C(cache_requests_delete_if, "felix_cache_requests_total", "op=delete_if",                      \
      "Cache requests run on their cache's worker, by op: get, put, delete, put_if, delete_if")    \
    C(cache_hits, "felix_cache_hits_total", "", "cache_get answers with a value")                  \
    C(cache_misses, "felix_cache_misses_total", "",                                                \
      "cache_get answers with null (no entry, or an expired one)")                                 \
    C(cache_expired_read, "felix_cache_expirations_total", "how=read",                             \
      "Cache entries freed because their TTL passed, by how: read (a get, put or delete "          \
      "met it), swept (the worker's sweep timer, without a read)")                                 \
    C(cache_expired_swept, "felix_cache_expirations_total", "how=swept",                           \
      "Cache entries freed because their TTL passed, by how: read (a get, put or delete "          \
      "met it), swept (the worker's sweep timer, without a read)")                                 \
    C(cache_deletes, "felix_cache_deletes_total", "",                                              \
      "Cache entries removed by cache_delete, an applied cache_delete_if or a put with ttl_ms 0")  \
    C(cache_condition_refused, "felix_cache_condition_refused_total", "",                          \
      "cache_put_if / cache_delete_if not applied because their condition did not hold")           \
    C(cache_dropped, "felix_cache_dropped_total", "",                                              \
      "Cache entries freed with their cache (the admin API's DELETE of a declared cache)")         \
    C(cache_durable_records, "felix_cache_durable_records_total", "",                              \
      "Records appended to durable caches' logs (a put or delete of a durable cache)")             \
    C(cache_durable_rebuilt, "felix_cache_durable_rebuilt_records_total", "",                      \
      "Records of durable caches' logs read back into the stores at start")                        \
    C(cache_durable_errors, "felix_cache_durable_errors_total", "",                                \
      "Durable cache log failures: an open, append or flush that failed (an on_commit write is "   \
      "then answered with an error), a directory not made or not removed, a record read back "     \
      "that is not a cache record")                                                                \
    C(cache_durable_compactions, "felix_cache_durable_compactions_total", "",                      \
      "Compactions of durable caches' logs finished (live records of the oldest sealed segments "  \
      "copied to the tail, those segments deleted)")                                               \
    C(cache_durable_compaction_copied, "felix_cache_durable_compaction_copied_bytes_total", "",    \
      "Record bytes (28-byte headers included) compaction copied to the tail of durable caches' "  \
      "logs")                                                                                      \
    C(cache_durable_compaction_reclaimed,                                                          \
      "felix_cache_durable_compaction_reclaimed_bytes_total", "",                                  \
      "Bytes of segment and index files compaction deleted from durable caches' logs")             \
    C(cache_evictions, "felix_cache_evictions_total", "",                                          \
      "Cache entries evicted (CLOCK) to fit a put under the worker's share of "                    \
      "cache_max_bytes")                                                                           \
    C(cache_refused_forbidden, "felix_cache_refused_total", "reason=forbidden",                    \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_not_found, "felix_cache_refused_total", "reason=not_found",                    \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_key_too_long, "felix_cache_refused_total", "reason=key_too_long",              \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_value_too_large, "felix_cache_refused_total", "reason=value_too_large",        \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_larger_than_store, "felix_cache_refused_total", "reason=larger_than_store",    \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_tenant_over_cap, "felix_cache_refused_total", "reason=tenant_over_cap",        \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_shutting_down, "felix_cache_refused_total", "reason=shutting_down",            \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_internal, "felix_cache_refused_total", "reason=internal",                      \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_refused_too_many_caches, "felix_cache_refused_total", "reason=too_many_caches",        \
      "Cache requests refused, by reason (docs/cache.md): forbidden (no cache.read / "             \
      "cache.write), not_found (cache scope not found), key_too_long, value_too_large, "           \
      "larger_than_store (an entry over the worker's share of cache_max_bytes), "                  \
      "tenant_over_cap (cache_tenant_max_bytes), shutting_down, internal (no memory), "            \
      "too_many_caches (4,096 caches on one worker)")                                              \
    C(cache_binary_requests, "felix_cache_binary_requests_total", "",                              \
      "Binary cache requests (CACHE_REQUEST frames, docs/protocol.md) decoded on a stream and "    \
      "handed to the cache checks")                                                                \
    C(cache_binary_refused, "felix_cache_binary_refused_total", "",                                \
      "Binary cache frames refused before the cache checks: not negotiated "                       \
      "(FX_FEATURE_HI_CACHE_BINARY) or malformed (the stream is reset)")                           \
    H(cache_latency_get_ns, "felix_cache_op_latency_ns", "op=get",                                 \
      "Nanoseconds from a cache request's arrival at its cache's worker to its answer's reply "    \
      "slot completed, by op: get, put (put and put_if), delete (delete and delete_if)",           \
      10)                                                                                          \
    H(cache_latency_put_ns, "felix_cache_op_latency_ns", "op=put",                                 \
      "Nanoseconds from a cache request's arrival at its cache's worker to its answer's reply "    \
      "slot completed, by op: get, put (put and put_if), delete (delete and delete_if)",           \
      10)                                                                                          \
    H(cache_latency_delete_ns, "felix_cache_op_latency_ns", "op=delete",                           \
      "Nanoseconds from a cache request's arrival at its cache's worker to its answer's reply "    \
      "slot completed, by op: get, put (put and put_if), delete (delete and delete_if)",           \
      10)                                                                                          \
    G(cache_entries, "felix_cache_entries", "",                                                    \
      "Cache entries held now (live, or expired and not yet freed), all workers")                  \
    G(cache_bytes, "felix_cache_bytes", "",                                                        \
      "Accounted bytes of the cache entries held now (key + value + 104 each), all "               \
      "workers")

/* Every list, in exposition order. A new subsystem list is added here. */
/* ---- per-stream series -------------------------------------------------
 * Gauges labelled tenant, namespace, stream, whose label values are known only
 * at run time: rendered at each scrape from the sources registered with
 * fx_metrics_stream_source_add() (the durable storage stage: one series per
 * durable stream with an open log, none for streams in memory, so their
 * number is bounded by the durable streams). Entry shape:
 *   S(id, "name", "help")                    id is the value's index (fx_mstream_id) */
#define FX_METRICS_STREAMS(S)                                                                      \
    S(FX_MSTREAM_BYTES_ON_DISK, "felix_storage_stream_bytes_on_disk",                              \
      "Bytes of a durable stream's segment and index files (logical sizes, preallocation not "     \
      "counted)")                                                                                  \
    S(FX_MSTREAM_SEGMENTS, "felix_storage_stream_segments",                                        \
      "Segment files of a durable stream's log")                                                   \
    S(FX_MSTREAM_FIRST_OFFSET, "felix_storage_stream_first_offset",                                \
      "Oldest offset still in a durable stream's log (rises as retention deletes segments)")       \
    S(FX_MSTREAM_NEXT_OFFSET, "felix_storage_stream_next_offset",                                  \
      "Offset the next record appended to a durable stream's log gets")                            \
    S(FX_MSTREAM_PRODUCERS, "felix_storage_stream_producers",                                      \
      "Idempotent producers a durable stream's log knows (its producer table)")

/* ---- per-group series -------------------------------------------------
 * Series labelled tenant, namespace, stream, group, rendered at each scrape
 * from the sources registered with fx_metrics_group_source_add() (each
 * worker's consumer groups, src/broker/group_metrics.c: at most
 * max_groups_per_stream per stream), only when /metrics shows the
 * per-stream series. Entry shape:
 *   S(id, "name", type, "help")     id is the value's index (fx_mgroup_id),
 *                                   type FX_METRIC_GAUGE or FX_METRIC_COUNTER */
#define FX_METRICS_GROUPS(S)                                                                       \
    S(FX_MGROUP_PENDING, "felix_consumer_group_pending", FX_METRIC_GAUGE,                          \
      "Records a consumer group has handed out and not settled, or holds to hand out again "       \
      "(acquired + available; parked ones apart), counted against max_ack_pending")                \
    S(FX_MGROUP_PARKED, "felix_consumer_group_parked", FX_METRIC_GAUGE,                            \
      "Records of a consumer group waiting out a delayed nak or a backoff (max_parked)")           \
    S(FX_MGROUP_MEMBERS, "felix_consumer_group_members", FX_METRIC_GAUGE,                          \
      "Members joined to a consumer group")                                                        \
    S(FX_MGROUP_CAPPED, "felix_consumer_group_capped", FX_METRIC_GAUGE,                            \
      "1 while a consumer group is at max_ack_pending (checkpoint 5g: no first delivery), else 0") \
    S(FX_MGROUP_LAG, "felix_consumer_group_lag", FX_METRIC_GAUGE,                                  \
      "Records of a consumer group's stream not settled yet by the group (tail - floor)")          \
    S(FX_MGROUP_DELIVERED, "felix_consumer_group_delivered_total", FX_METRIC_COUNTER,              \
      "Records a consumer group handed to its members, first deliveries and redeliveries")         \
    S(FX_MGROUP_REDELIVERED, "felix_consumer_group_redelivered_total", FX_METRIC_COUNTER,          \
      "Records a consumer group handed out again (attempt above 1)")                               \
    S(FX_MGROUP_ACKED, "felix_consumer_group_acked_total", FX_METRIC_COUNTER,                      \
      "Records of a consumer group settled by a member's ack")                                     \
    S(FX_MGROUP_DEAD_LETTERED, "felix_consumer_group_dead_lettered_total", FX_METRIC_COUNTER,      \
      "Records a consumer group gave up on (max_deliver or a member's term)")                      \
    S(FX_MGROUP_SKIPPED, "felix_consumer_group_skipped_total", FX_METRIC_COUNTER,                  \
      "Records a consumer group settled unread (evicted from the ring, or gone with retention)")   \
    S(FX_MGROUP_STALE, "felix_consumer_group_stale_total", FX_METRIC_COUNTER,                      \
      "Naks, extensions, terms and releases a consumer group refused as stale")

/* ---- per-tenant cache series -------------------------------------------
 * Series labelled tenant, rendered at each scrape from the sources
 * registered with fx_metrics_tenant_source_add() (the broker's cache
 * tenant accounts, src/broker/cache_srv.c: one per tenant that used a
 * cache, which nothing bounds when tokens are not checked), only when
 * /metrics shows the per-stream series. Entry shape:
 *   S(id, "name", type, "help")     id is the value's index (fx_mtenant_id),
 *                                   type FX_METRIC_GAUGE or FX_METRIC_COUNTER */
#define FX_METRICS_TENANTS(S)                                                                      \
    S(FX_MTENANT_CACHE_ENTRIES, "felix_cache_tenant_entries", FX_METRIC_GAUGE,                     \
      "Cache entries a tenant holds now (live, or expired and not yet freed), all workers")        \
    S(FX_MTENANT_CACHE_BYTES, "felix_cache_tenant_bytes", FX_METRIC_GAUGE,                         \
      "Accounted bytes of a tenant's cache entries now (key + value + 104 each), all workers; "    \
      "what cache_tenant_max_bytes bounds")                                                        \
    S(FX_MTENANT_CACHE_HITS, "felix_cache_tenant_hits_total", FX_METRIC_COUNTER,                   \
      "A tenant's cache_get answers with a value")                                                 \
    S(FX_MTENANT_CACHE_MISSES, "felix_cache_tenant_misses_total", FX_METRIC_COUNTER,               \
      "A tenant's cache_get answers with null (no entry, or an expired one)")

/* ---- cluster membership and ownership (src/cluster/cluster.c, docs/cluster.md) ---- */
#define FX_METRICS_CLUSTER(C, G, H)                                                                \
    C(cluster_renewals_ok, "felix_cluster_lease_renewals_total", "result=ok",                      \
      "Lease keep-alives sent to etcd, by result: ok, failed (no answer or an error: the broker "  \
      "serves until its deadline), lost (the lease is gone: every owned stream is released)")      \
    C(cluster_renewals_failed, "felix_cluster_lease_renewals_total", "result=failed",              \
      "Lease keep-alives sent to etcd, by result: ok, failed (no answer or an error: the broker "  \
      "serves until its deadline), lost (the lease is gone: every owned stream is released)")      \
    C(cluster_renewals_lost, "felix_cluster_lease_renewals_total", "result=lost",                  \
      "Lease keep-alives sent to etcd, by result: ok, failed (no answer or an error: the broker "  \
      "serves until its deadline), lost (the lease is gone: every owned stream is released)")      \
    G(cluster_suspended, "felix_cluster_suspended", "",                                            \
      "1 while the broker is past its lease deadline or not registered: it admits and appends "    \
      "nothing and /ready answers 503")                                                            \
    G(cluster_owned_streams, "felix_cluster_owned_streams", "",                                    \
      "Streams this broker owns now")                                                              \
    C(cluster_claims_won, "felix_cluster_claims_total", "result=won",                              \
      "Ownership claims (one etcd transaction each), by result: won, lost (another node owns the " \
      "stream), refused (a durable stream pinned to another node), error (etcd did not answer)")   \
    C(cluster_claims_lost, "felix_cluster_claims_total", "result=lost",                            \
      "Ownership claims (one etcd transaction each), by result: won, lost (another node owns the " \
      "stream), refused (a durable stream pinned to another node), error (etcd did not answer)")   \
    C(cluster_claims_refused, "felix_cluster_claims_total", "result=refused",                      \
      "Ownership claims (one etcd transaction each), by result: won, lost (another node owns the " \
      "stream), refused (a durable stream pinned to another node), error (etcd did not answer)")   \
    C(cluster_claims_error, "felix_cluster_claims_total", "result=error",                          \
      "Ownership claims (one etcd transaction each), by result: won, lost (another node owns the " \
      "stream), refused (a durable stream pinned to another node), error (etcd did not answer)")   \
    C(cluster_releases, "felix_cluster_releases_total", "",                                        \
      "Streams this broker stopped owning without handing them off (its lease was lost or the "    \
      "owner key vanished): their subscribers were ended")                                         \
    C(cluster_routes_remote, "felix_cluster_remote_routes_total", "",                              \
      "Publishes and subscribes for a stream another node owns or is the candidate of")            \
    C(cluster_redirects, "felix_cluster_redirects_total", "",                                      \
      "Subscribes answered not_leader (the client offered FEATURE_REDIRECT)")                      \
    C(cluster_refused, "felix_cluster_refused_total", "",                                          \
      "Publishes and subscribes this node did not serve because another node owns the stream "     \
      "(forwarded, redirected or refused: see the other cluster counters) or no owner could be "   \
      "named")                                                                                     \
    C(cluster_forwards, "felix_cluster_forwards_total", "",                                        \
      "Publish requests forwarded to the node that owns their stream (cluster_forward)")           \
    C(cluster_internal_connections, "felix_cluster_internal_connections_total", "",                \
      "Connections accepted on the internal listener (cluster_internal_bind), which the other "    \
      "nodes' forwarders dial")                                                                    \
    C(cluster_forwarded_messages, "felix_cluster_forwarded_messages_total", "",                    \
      "Messages in the forwarded publish requests, handed to the owner")                           \
    C(cluster_forward_failed, "felix_cluster_forward_failed_total", "",                            \
      "Forwarded publish requests that failed (the owner unreachable or refusing): acked ones "    \
      "were answered with the error")                                                              \
    C(cluster_forward_refused, "felix_cluster_forward_refused_total", "",                          \
      "Publish requests refused because the forwarding queue held its byte bound (64 MiB)")        \
    G(cluster_mirrors, "felix_cluster_mirrors", "",                                                \
      "Mirrors running: streams other nodes own served here to subscribers without "               \
      "FEATURE_REDIRECT, each fed by one upstream subscription")                                   \
    C(cluster_mirror_messages, "felix_cluster_mirror_messages_total", "",                          \
      "Messages the mirrors took from their owners and appended to their local streams")           \
    C(cluster_mirror_gaps, "felix_cluster_mirror_gaps_total", "",                                  \
      "Jumps in the owner's offsets a mirror appended (shed upstream or by the mirror's bound, "   \
      "or an owner change): its local subscribers see each as a gap")                              \
    C(cluster_mirror_dropped, "felix_cluster_mirror_dropped_total", "",                            \
      "Messages a mirror shed in the shedding profile: its bound toward the worker (4 MiB) was "   \
      "full, or its upstream subscription's client queue was")                                     \
    C(cluster_mirror_restarts, "felix_cluster_mirror_upstream_restarts_total", "",                 \
      "Upstream subscriptions of mirrors made again after they ended or failed (the owner lost, "  \
      "the stream released, the connection gone)")                                                 \
    C(cluster_mirror_refused, "felix_cluster_mirror_refused_total", "",                            \
      "Subscribes without FEATURE_REDIRECT not served from a mirror (the mirror bound, no "        \
      "memory, a local stream that could not be made): answered with the error naming the owner")  \
    C(cluster_suspended_refused, "felix_cluster_suspended_refused_total", "",                      \
      "Publishes refused at admission or before the append because the broker was suspended "      \
      "(past its lease deadline)")                                                                 \
    C(cluster_late_appends, "felix_cluster_late_appends_total", "",                                \
      "Appends found past the lease deadline right after they were made (the residual of the "     \
      "deadline rule: the check before the append passed)")                                        \
    C(cluster_watch_restarts, "felix_cluster_watch_restarts_total", "reason=stream",               \
      "Restarts of the watch of the cluster's keys, by reason: stream (it ended or failed), "      \
      "compacted (etcd compacted past it: the keys were listed again)")                            \
    C(cluster_watch_compacted, "felix_cluster_watch_restarts_total", "reason=compacted",           \
      "Restarts of the watch of the cluster's keys, by reason: stream (it ended or failed), "      \
      "compacted (etcd compacted past it: the keys were listed again)")                            \
    C(cluster_moves_started, "felix_cluster_moves_total", "result=started",                        \
      "Graceful moves of in-memory streams this node owned (docs/cluster.md \"Moves\"), by "       \
      "result: started, done (the handoff is in etcd), failed (the stream stayed, or was "         \
      "released when its ownership was lost)")                                                     \
    C(cluster_moves_done, "felix_cluster_moves_total", "result=done",                              \
      "Graceful moves of in-memory streams this node owned (docs/cluster.md \"Moves\"), by "       \
      "result: started, done (the handoff is in etcd), failed (the stream stayed, or was "         \
      "released when its ownership was lost)")                                                     \
    C(cluster_moves_failed, "felix_cluster_moves_total", "result=failed",                          \
      "Graceful moves of in-memory streams this node owned (docs/cluster.md \"Moves\"), by "       \
      "result: started, done (the handoff is in etcd), failed (the stream stayed, or was "         \
      "released when its ownership was lost)")                                                     \
    C(cluster_handoff_claims, "felix_cluster_handoff_claims_total", "",                            \
      "Claims of this node that took a stream over from a graceful handoff (its subscribers "      \
      "learn the previous epoch's exact end)")                                                     \
    C(cluster_moving_refused, "felix_cluster_moving_refused_total", "",                            \
      "Publishes refused (not appended, retryable) because their stream was moving to another "    \
      "node")

#define FX_METRICS_ALL(C, G, H)                                                                    \
    FX_METRICS_BROKER(C, G, H)                                                                     \
    FX_METRICS_SUB(C, G, H)                                                                        \
    FX_METRICS_PUBLISH(C, G, H)                                                                    \
    FX_METRICS_STORAGE(C, G, H)                                                                    \
    FX_METRICS_QUIC(C, G, H)                                                                       \
    FX_METRICS_ADMIN(C, G, H)                                                                      \
    FX_METRICS_LIMITS(C, G, H)                                                                     \
    FX_METRICS_GROUP(C, G, H)                                                                      \
    FX_METRICS_CACHE(C, G, H)                                                                      \
    FX_METRICS_CLUSTER(C, G, H)

#endif
