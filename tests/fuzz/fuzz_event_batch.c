/* libFuzzer target: event batch bodies. Input: [selector][body]; selector bits
 * 0-1 pick 0x0002, 0x0022, 0x0004 or 0x0024. Whatever decodes must re-encode
 * to the same bytes, flat and vectored. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint16_t flags[4] = {0x0002, 0x0022, 0x0004, 0x0024};
    if (size < 1)
        return 0;
    fx_fuzz_event_batch(flags[data[0] & 3], data + 1, size - 1);
    return 0;
}
