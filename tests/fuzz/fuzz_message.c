/* libFuzzer target for the JSON message codec (src/wire/message.c). Decodes
 * arbitrary bytes; whenever that succeeds, the message must encode, the
 * encoding must decode to equal fields, and re-encoding must reproduce the same
 * bytes (the encoder is canonical). Any broken promise aborts. Failed decodes
 * must report a wire error code that matches the detail they filled in.
 * Links fx_wire, fx_base, jansson and nettle only. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_failure(int rv, const fx_wire_err *err, const fx_msg *m)
{
    if (rv != err->code || m->type != FX_MSG_NONE || m->arena)
        abort();
    if (rv != -ENOMEM && (rv > FX_EWIRE_MAGIC || rv < FX_EWIRE_KIND))
        abort(); /* not a wire codec error */
}

/* Encodes |a| as a frame, checks the header, and returns the JSON body in a
 * new buffer (NULL only on out-of-memory). */
static uint8_t *encode_checked(const fx_msg *a, size_t *plen)
{
    uint8_t *frame = NULL;
    size_t flen = 0;
    int rv = fx_msg_encode_frame(a, &frame, &flen);
    if (rv == -ENOMEM)
        return NULL;
    if (rv != 0 || flen < FX_WIRE_HEADER_LEN)
        abort(); /* the encoder refused a message the decoder accepted */
    if (fx_be32(frame) != FX_WIRE_MAGIC || fx_be16(frame + 4) != FX_WIRE_VERSION ||
        fx_be16(frame + 6) != 0 || fx_be32(frame + 8) != flen - FX_WIRE_HEADER_LEN)
        abort();
    if (fx_msg_encoded_len(a) != (ssize_t)(flen - FX_WIRE_HEADER_LEN))
        abort();
    *plen = flen - FX_WIRE_HEADER_LEN;
    memmove(frame, frame + FX_WIRE_HEADER_LEN, *plen);
    return frame;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fx_msg a, b;
    fx_wire_err err = {0};
    int rv = fx_msg_decode(&a, data, size, &err);
    if (rv != 0) {
        check_failure(rv, &err, &a);
        return 0;
    }
    size_t len = 0;
    uint8_t *json = encode_checked(&a, &len);
    if (!json) {
        fx_msg_deinit(&a);
        return 0;
    }
    rv = fx_msg_decode(&b, json, len, &err);
    if (rv == 0 && !fx_msg_equal(&a, &b))
        abort();
    if (rv != 0 && rv != -ENOMEM)
        abort(); /* our own output must decode */
    uint8_t *again = NULL;
    size_t alen = 0;
    if (rv == 0 && fx_msg_encode(&b, &again, &alen) == 0 &&
        (alen != len || memcmp(again, json, len) != 0))
        abort();
    free(again);
    free(json);
    fx_msg_deinit(&b);
    fx_msg_deinit(&a);
    return 0;
}
