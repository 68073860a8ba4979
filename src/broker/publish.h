/* Publish requests (publish.c): binary and JSON publish frames of a bidi
 * stream, checked, resolved and handed to admission. Connection loop. Keeps
 * the validated names section in fxb_bidi.resolved (names, names_ok; the
 * part is resolve.h's). */
#ifndef FX_BROKER_PUBLISH_H
#define FX_BROKER_PUBLISH_H

#include "broker/broker_internal.h"

/* Handles one complete publish frame on |s| (binary 0x0001 / 0x0009 or a
 * decoded JSON publish / publish_batch in |m|). Returns 0 to continue, 1 when
 * the stream is parked at ingress (stop reading), or -1 when |s| was failed. */
int fxb_publish_binary(fxb_bidi *s, const fx_frame *f);
int fxb_publish_json(fxb_bidi *s, const fx_msg *m);
/* An idempotent producer's batch (JSON publish_idempotent in |m|): always
 * acked, answered by the stream's worker after its check (idem.h). Same
 * results. */
int fxb_publish_idempotent_json(fxb_bidi *s, const fx_msg *m);
/* producer_init: answered producer_init_ok with a new producer id (64
 * random bits but the top one, idem.h) on the stream. */
void fxb_producer_init(fxb_bidi *s, const fx_msg *m);

#endif
