/* Unit tests of the durable caches' record (src/broker/cache_dur.c): the
 * original's cache record payload, byte for byte (little-endian), and the
 * records the decoder refuses. */
/* fx-test-libs: fx_broker fx_storage fx_quic fx_wire fx_base */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "broker/cache_dur.h"
#include "fx_test.h"

static void test_the_record_is_the_originals_payload_little_endian(void **state)
{
    (void)state;
    uint8_t out[64];
    size_t n =
        fxb_dcache_rec_encode(out, FXB_DCACHE_OP_PUT, 0x0102030405060708ull, "ky", 2, "val", 3);
    static const uint8_t want[] = {1, 0, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                   2, 0, 0,    0,    'k',  'y',  'v',  'a',  'l'};
    assert_int_equal(n, sizeof(want));
    assert_memory_equal(out, want, sizeof(want));
    fxb_dcache_rec r;
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), 0);
    assert_int_equal(r.op, FXB_DCACHE_OP_PUT);
    assert_int_equal(r.expires_ms, 0x0102030405060708ull);
    assert_int_equal(r.klen, 2);
    assert_int_equal(r.vlen, 3);
    assert_memory_equal(r.value, "val", 3);
    out[0] = 2; /* another version (the original's compaction writes v2: not read yet) */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    out[0] = 1;
    out[1] = 2; /* no such op */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    out[1] = 1;
    out[10] = 9; /* key_len past the end */
    assert_int_equal(fxb_dcache_rec_decode(out, n, &r), -EINVAL);
    assert_int_equal(fxb_dcache_rec_decode(out, 13, &r), -EINVAL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_record_is_the_originals_payload_little_endian),
};
FX_TEST_MAIN(tests)
