/* Consumer-group frames of Felix-C (docs/protocol.md, "Consumer groups"):
 * the binary hot path a member uses after `group_join`.
 *
 * Every group frame has frame flags FX_FLAG_FELIXC (0x8000), a bit the
 * original never sets; the body starts with a u8 kind:
 *
 *   kind 1  GROUP_BATCH  broker -> member, on the member's event stream
 *       u8 1 | u32 nruns | nruns x run
 *       run: u64 first | u32 attempt | u32 count | u64 skipped_before |
 *            count x (u32 len | payload)
 *   kind 2  GROUP_ACKS   member -> broker, on the member's join stream
 *       u8 2 | u64 request_id (0: no answer) | u32 nops | nops x op
 *       op:  u8 kind | u64 first | u32 count | u32 attempt | u32 arg |
 *            u16 reason_len | reason (UTF-8)
 *       op kind 1 ack (attempt, arg ignored), 2 nak (arg: delay ms,
 *       0xFFFFFFFF the group's backoff), 3 in_progress (arg: extend ms,
 *       0 the member's ack wait), 4 term (reason), 5 release; count >= 1 for
 *       ack, exactly 1 for the others
 *   kind 3  GROUP_ACKED  broker -> member, on the join stream, answering a
 *                        GROUP_ACKS with request_id != 0 once its acks are
 *                        durable (journal written; flushed under on_commit)
 *       u8 3 | u64 request_id | u64 floor | u32 nrefused |
 *       nrefused x (u64 offset | u8 why)     why: 1 stale, 2 invalid
 *
 * All integers big-endian. A member gets the bit in auth_ok's server_flags
 * only when it offered it in auth's client_flags. Decoders check every length
 * against the bytes left before using it and point into the input (no
 * copies). Pure functions; any thread. */
#ifndef FX_WIRE_GROUP_H
#define FX_WIRE_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/wire.h"

/* FX_FLAG_FELIXC (0x8000) is defined in wire/wire.h beside the other frame
 * flags: the frame layer accepts it alone, as body kind FX_BODY_FELIXC. */

#define FX_GROUP_FRAME_BATCH 1u
#define FX_GROUP_FRAME_ACKS 2u
#define FX_GROUP_FRAME_ACKED 3u

/* Most runs / ops / refusals one frame may carry; more is FX_EWIRE_COUNT
 * (decoders) or is refused by the encoders. */
#define FX_GROUP_MAX_RUNS 1024u
#define FX_GROUP_MAX_OPS 4096u
#define FX_GROUP_MAX_RECORDS 65536u /* records in one GROUP_BATCH, all runs */
#define FX_GROUP_MAX_REFUSED 65536u /* refusals in one GROUP_ACKED */
#define FX_GROUP_REASON_MAX 256u    /* term reason bytes */

typedef enum fx_group_op_kind {
    FX_GROUP_OP_ACK = 1,
    FX_GROUP_OP_NAK = 2,
    FX_GROUP_OP_IN_PROGRESS = 3,
    FX_GROUP_OP_TERM = 4,
    FX_GROUP_OP_RELEASE = 5,
} fx_group_op_kind;

#define FX_GROUP_NAK_BACKOFF 0xFFFFFFFFu

typedef enum fx_group_why {
    FX_GROUP_WHY_STALE = 1,
    FX_GROUP_WHY_INVALID = 2,
} fx_group_why;

/* The kind byte of a group frame body (FX_GROUP_FRAME_*), or FX_EWIRE_TRUNCATED
 * for an empty body, FX_EWIRE_KIND for an unknown kind. */
int fx_wire_group_kind(const uint8_t *body, size_t len, fx_wire_err *err);

/* ---- GROUP_BATCH ----------------------------------------------------------- */

typedef struct fx_wire_group_run {
    uint64_t first;
    uint32_t attempt;
    uint32_t count;
    uint64_t skipped_before;
} fx_wire_group_run;

/* A decoded GROUP_BATCH: |runs| and |payloads| are heap arrays (free with
 * fx_wire_group_batch_deinit); payload slices point into the body; the
 * records of run i are payloads[sum of earlier counts ...]. */
typedef struct fx_wire_group_batch {
    uint32_t nruns;
    fx_wire_group_run *runs;
    uint32_t nrecords;
    fx_wire_slice *payloads;
} fx_wire_group_batch;

/* Decodes a GROUP_BATCH body (kind byte included). 0 or FX_EWIRE_TRUNCATED,
 * FX_EWIRE_COUNT (0 runs, a run of 0 records, over the limits, counts the
 * bytes cannot hold, or a run whose end first + count
 * overflows a u64),
 * FX_EWIRE_TRAILING, FX_EWIRE_KIND (wrong kind), FX_EWIRE_FIELD_TYPE
 * (attempt 0), -ENOMEM. Nothing is allocated before the whole body has been
 * checked. On error |b| holds nothing to release; |err| may be NULL. */
int fx_wire_group_batch_decode(const uint8_t *body, size_t len, fx_wire_group_batch *b,
                               fx_wire_err *err);
void fx_wire_group_batch_deinit(fx_wire_group_batch *b);

/* Encoding a GROUP_BATCH piecewise (the broker writes runs straight from its
 * ring): the frame header and body are written into |out| of |cap| bytes.
 * begin writes the header placeholder, the kind and a run count of 0;
 * run opens a run; record appends one record to the open run; finish
 * patches the counts and the frame length and returns the frame's size.
 * Each returns FX_ETOOBIG when |cap| (or the u32 body length) cannot hold
 * what is asked, FX_EWIRE_COUNT past FX_GROUP_MAX_RUNS runs or
 * FX_GROUP_MAX_RECORDS records (or a run whose end first + count would overflow a u64),
 * -EINVAL on misuse (attempt 0, a record with no open run, a new run or
 * finish while a run is empty, finish with no run); on any error neither
 * |gb| nor |out| changes. The caller owns |out|; |gb| borrows it. */
typedef struct fx_wire_group_builder {
    uint8_t *out;
    size_t cap, len;
    uint32_t nruns;
    size_t run_at; /* offset of the open run's header, 0: none */
    uint32_t run_count;
    uint32_t records;
} fx_wire_group_builder;

/* Bytes a GROUP_BATCH frame (header included) with these runs, records and
 * payload bytes takes; SIZE_MAX if that does not fit a size_t. */
size_t fx_wire_group_batch_frame_size(uint32_t nruns, uint32_t nrecords, uint64_t payload_bytes);
int fx_wire_group_batch_begin(fx_wire_group_builder *gb, uint8_t *out, size_t cap);
int fx_wire_group_batch_run(fx_wire_group_builder *gb, uint64_t first, uint32_t attempt,
                            uint64_t skipped_before);
int fx_wire_group_batch_record(fx_wire_group_builder *gb, const void *p, uint32_t len);
ssize_t fx_wire_group_batch_finish(fx_wire_group_builder *gb);

/* ---- GROUP_ACKS ------------------------------------------------------------ */

typedef struct fx_wire_group_op {
    fx_group_op_kind kind;
    uint64_t first;
    uint32_t count;
    uint32_t attempt;
    uint32_t arg;
    fx_wire_slice reason; /* term only; may be empty */
} fx_wire_group_op;

/* Decoded: |ops| is a heap array (fx_wire_group_acks_deinit); reasons point
 * into the body. To encode: fill |request_id|, |ops| and |nops|. */
typedef struct fx_wire_group_acks {
    uint64_t request_id;
    uint32_t nops;
    fx_wire_group_op *ops;
} fx_wire_group_acks;

/* Decodes a GROUP_ACKS body (kind byte included). 0 or FX_EWIRE_TRUNCATED,
 * FX_EWIRE_COUNT (0 ops, over the limit or more than the bytes hold, count 0,
 * count != 1 for a non-ack, first + count overflowing a u64, a reason over
 * FX_GROUP_REASON_MAX), FX_EWIRE_KIND (wrong frame kind), FX_EWIRE_FIELD_TYPE
 * (unknown op kind, a reason on an op other than term), FX_EWIRE_UTF8
 * (reason), FX_EWIRE_TRAILING, -ENOMEM. On error |a| holds nothing to
 * release; |err| may be NULL. */
int fx_wire_group_acks_decode(const uint8_t *body, size_t len, fx_wire_group_acks *a,
                              fx_wire_err *err);
void fx_wire_group_acks_deinit(fx_wire_group_acks *a);
/* Frame size (header included) and whole-frame encoder; the encoder refuses
 * what the decoder would (-EINVAL) and returns FX_ETOOBIG when |cap| is
 * short (|out| untouched then); else the bytes written. */
size_t fx_wire_group_acks_frame_size(const fx_wire_group_acks *a);
ssize_t fx_wire_group_acks_encode(const fx_wire_group_acks *a, uint8_t *out, size_t cap);

/* ---- GROUP_ACKED ----------------------------------------------------------- */

typedef struct fx_wire_group_refusal {
    uint64_t offset;
    fx_group_why why;
} fx_wire_group_refusal;

typedef struct fx_wire_group_acked {
    uint64_t request_id;
    uint64_t floor;
    uint32_t nrefused;
    fx_wire_group_refusal *refused; /* heap when decoded (fx_wire_group_acked_deinit) */
} fx_wire_group_acked;

/* Decodes a GROUP_ACKED body (kind byte included); |refused| is NULL when
 * |nrefused| is 0. 0 or FX_EWIRE_TRUNCATED, FX_EWIRE_KIND (wrong frame kind),
 * FX_EWIRE_COUNT (over FX_GROUP_MAX_REFUSED or more than the bytes hold),
 * FX_EWIRE_FIELD_TYPE (unknown why), FX_EWIRE_TRAILING, -ENOMEM. On error
 * |a| holds nothing to release; |err| may be NULL. The encoder refuses
 * what the decoder would (-EINVAL), returns FX_ETOOBIG when |cap| is short
 * (|out| untouched), else the bytes written. */
int fx_wire_group_acked_decode(const uint8_t *body, size_t len, fx_wire_group_acked *a,
                               fx_wire_err *err);
void fx_wire_group_acked_deinit(fx_wire_group_acked *a);
size_t fx_wire_group_acked_frame_size(const fx_wire_group_acked *a);
ssize_t fx_wire_group_acked_encode(const fx_wire_group_acked *a, uint8_t *out, size_t cap);

#endif
