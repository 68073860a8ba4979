/* libFuzzer target: publish ack bodies (0x0010). The whole input is the body;
 * acks that decode (with messages within the encoder's 512-byte cut) must
 * re-encode to the same bytes. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fx_fuzz_publish_ack(data, size);
    return 0;
}
