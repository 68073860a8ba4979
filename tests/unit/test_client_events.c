/* libfelix's event streams over the fake transport of the fuzz targets
 * (tests/fuzz/fake_quic.c): inputs the fuzz_client_events harness found,
 * replayed through it. The harness checks after every delivery that an
 * event stream without Block has credited every byte it was given, and
 * aborts (the test fails) when one did not. */
/* fx-test-libs: fx_client fx_wire fx_base */
#include "fx_test.h"

#include "fuzz/fake_quic.c"
#include "fuzz/fuzz_client_events.c"

/* Bytes that are no frame reach an event stream before its subscription
 * is known (they arrive ahead of `subscribed`): the stream is given up, and
 * its bytes must still be credited, or the connection's window shrinks for
 * good. Options: drop_old, queue of one, 1 MiB window, early chunk. */
static void test_garbage_before_hello_is_credited(void **state)
{
    (void)state;
    static const uint8_t input[] = {0x32, 0x6c, 0x6f, 0x0d, 0x00, 0x80, 0x3b, 0x46,
                                    0x74, 0x00, 0x1b, 0x61, 0x72, 0x69, 0x70, 0x6d};
    LLVMFuzzerInitialize(NULL, NULL);
    assert_int_equal(LLVMFuzzerTestOneInput(input, sizeof(input)), 0);
}

/* A malformed frame after the hello, in the same chunk as more bytes: the
 * subscription ends with FX_EPROTO and the bad frame and the rest of the
 * chunk are credited. */
static void test_garbage_after_hello_is_credited(void **state)
{
    (void)state;
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, 1);
    uint8_t *hello;
    size_t n;
    assert_int_equal(fx_msg_encode_frame(&m, &hello, &n), 0);
    static const char junk[] = "this is not a frame at all";
    uint8_t input[512];
    size_t len = 0;
    input[len++] = 0x00; /* drop_new, next(), one subscription, latest */
    input[len++] = 0x0f; /* queue of 256, 1 MiB window */
    input[len++] = 0x00; /* bytes on event stream 0 */
    size_t chunk_len = n + sizeof(junk) - 1;
    input[len++] = (uint8_t)(0x80 | (chunk_len >> 8));
    input[len++] = (uint8_t)chunk_len;
    memcpy(input + len, hello, n);
    len += n;
    memcpy(input + len, junk, sizeof(junk) - 1);
    len += sizeof(junk) - 1;
    free(hello);
    LLVMFuzzerInitialize(NULL, NULL);
    assert_int_equal(LLVMFuzzerTestOneInput(input, len), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_garbage_before_hello_is_credited),
    cmocka_unit_test(test_garbage_after_hello_is_credited),
};

FX_TEST_MAIN(tests)
