/* Consumer-group requests (group_req.c): a member's join exchange (the join
 * stream -> the stream's worker -> back: the event stream's hello and
 * group_joined), its GROUP_ACKS frames, and its leave when the join stream
 * ends. Connection loop. Creates a member (a struct fxb_sub whose group part,
 * group.h, the worker fills) and owns fxb_bidi.member and
 * fxb_sub_group.join. */
#ifndef FX_BROKER_GROUP_REQ_H
#define FX_BROKER_GROUP_REQ_H

#include "broker/broker_internal.h"

/* Handles a decoded group_join on |s| (authenticated, tenant checked). Conn
 * loop. */
void fxb_group_join(fxb_bidi *s, const fx_msg *m);
/* Handles a Felix-C frame (flags 0x8000) on |s|: a member's GROUP_ACKS.
 * Returns 0 when it was handled (with fxb_bidi.member_full set when the
 * member's inbox reached its bound: reading waits for the worker), -1 when
 * the stream stops reading. Conn loop. */
int fxb_group_frame(fxb_bidi *s, const fx_frame *f);
/* |s| is closing (|graceful| false: the member's event stream is reset) or
 * its peer finished sending (true: the event stream is finished after what
 * is queued): a member whose join stream it is leaves its group, and what
 * it holds becomes available again. Conn loop. */
void fxb_group_join_gone(fxb_bidi *s, bool graceful);

#endif
