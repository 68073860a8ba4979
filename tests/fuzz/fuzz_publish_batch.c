/* libFuzzer target: publish batch bodies. Input: [selector][body]; selector
 * bit 0 picks 0x0009 (acked) over 0x0001. Whatever decodes must re-encode to
 * the same bytes. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint16_t flags =
        (data[0] & 1) ? (FX_FLAG_PUBLISH_BATCH | FX_FLAG_PUBLISH_ACKED) : FX_FLAG_PUBLISH_BATCH;
    fx_fuzz_publish_batch(flags, data + 1, size - 1);
    return 0;
}
