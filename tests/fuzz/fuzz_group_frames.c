/* libFuzzer target: Felix-C consumer-group frame bodies (flag 0x8000,
 * src/wire/group.h). The whole input is the body, kind byte first; every
 * decoder sees it, and whatever decodes must re-encode to the same bytes
 * (GROUP_BATCH through the piecewise builder). Seeds: the vectors'
 * bodies in tests/fuzz/corpus/fuzz_group_frames. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fx_fuzz_group(data, size);
    return 0;
}
