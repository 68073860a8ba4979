/* Unit tests for the reply queue (reply.c) on its own, without QUIC: ack
 * slots queued in request order on a bidi stream, their answers encoded once
 * completed (binary 0x0010 acks and JSON publish_ok / publish_error, with
 * the exact error text), and the high mark that stops the stream reading. */
/* fx-test-libs: fx_broker fx_quic fx_wire fx_base */
#include "sub_fixture.h"

#include "broker/reply.h"
#include "wire/binary.h"
#include "wire/frame.h"
#include "wire/message.h"

static fxb_bidi *bidi_new(fix *f)
{
    fxb_bidi *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->kind = FXB_KIND_BIDI;
    s->refs = 1;
    s->conn = &f->c;
    fxb_reply_bidi_init(s, NULL);
    return s;
}

/* Drops the queued replies, as closing the stream does. */
static void bidi_free(fxb_bidi *s)
{
    while (s->replies.head != NULL) {
        fxb_reply *r = s->replies.head;
        s->replies.head = r->next;
        r->owner = NULL;
        fxb_reply_unref(r);
    }
    free(s);
}

/* The body of |r|'s encoded frame, checking the header's flags. */
static fx_wire_slice body_of(const fxb_reply *r, uint16_t flags)
{
    assert_non_null(r->frame);
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(fx_buf_data(r->frame), 1u << 20, &h, NULL), 0);
    assert_int_equal(h.flags, flags);
    assert_int_equal(FX_WIRE_HEADER_LEN + h.length, fx_buf_len(r->frame));
    return (fx_wire_slice){fx_buf_data(r->frame) + FX_WIRE_HEADER_LEN, h.length};
}

static void test_slots_queue_in_request_order_and_complete_later(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = bidi_new(f);
    fxb_reply *r1 = fxb_reply_new(s, true, 11);
    fxb_reply *r2 = fxb_reply_new(s, false, 12);
    assert_ptr_equal(s->replies.head, r1);
    assert_ptr_equal(r1->next, r2);
    assert_ptr_equal(s->replies.tail, r2);
    assert_int_equal(s->replies.n, 2);
    assert_ptr_equal(r1->owner, s);
    assert_false(atomic_load(&r1->done));
    fxb_reply_complete(r2, NULL); /* out of order: it still waits behind r1 */
    assert_true(atomic_load(&r2->done));
    assert_false(atomic_load(&r1->done));
    assert_ptr_equal(s->replies.head, r1);
    bidi_free(s);
    fix_free(f);
}

static void test_binary_acks_carry_request_id_and_error_text(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = bidi_new(f);
    fxb_reply *ok = fxb_reply_new(s, true, 7);
    fxb_reply *bad = fxb_reply_new(s, true, 8);
    fxb_reply_complete(ok, NULL);
    fxb_reply_complete(bad, "publish queue full");
    fx_wire_publish_ack a;
    fx_wire_slice b = body_of(ok, FX_FLAG_PUBLISH_ACK);
    assert_int_equal(fx_wire_publish_ack_decode(b.ptr, b.len, &a, NULL), 0);
    assert_true(a.ok);
    assert_int_equal(a.request_id, 7);
    b = body_of(bad, FX_FLAG_PUBLISH_ACK);
    assert_int_equal(fx_wire_publish_ack_decode(b.ptr, b.len, &a, NULL), 0);
    assert_false(a.ok);
    assert_int_equal(a.request_id, 8);
    assert_int_equal(a.message.len, strlen("publish queue full"));
    assert_memory_equal(a.message.ptr, "publish queue full", a.message.len);
    bidi_free(s);
    fix_free(f);
}

static void test_json_acks_are_publish_ok_and_publish_error(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = bidi_new(f);
    fxb_reply *ok = fxb_reply_new(s, false, 21);
    fxb_reply *bad = fxb_reply_new(s, false, 22);
    fxb_reply_complete(ok, NULL);
    fxb_reply_complete(bad, "publish enqueue timed out");
    fx_msg m;
    fx_wire_slice b = body_of(ok, 0);
    assert_int_equal(fx_msg_decode(&m, b.ptr, b.len, NULL), 0);
    assert_int_equal(m.type, FX_MSG_PUBLISH_OK);
    assert_int_equal(m.request_id, 21);
    fx_msg_deinit(&m);
    b = body_of(bad, 0);
    assert_int_equal(fx_msg_decode(&m, b.ptr, b.len, NULL), 0);
    assert_int_equal(m.type, FX_MSG_PUBLISH_ERROR);
    assert_int_equal(m.request_id, 22);
    assert_string_equal(m.message, "publish enqueue timed out");
    fx_msg_deinit(&m);
    bidi_free(s);
    fix_free(f);
}

/* FXB_REPLIES_HIGH queued replies stop the stream reading (replies.full);
 * one fewer does not. */
static void test_the_high_mark_stops_reading(void **state)
{
    fix *f = fix_new(NULL);
    fxb_bidi *s = bidi_new(f);
    for (unsigned i = 1; i < FXB_REPLIES_HIGH; i++)
        assert_non_null(fxb_reply_new(s, true, i));
    assert_false(s->replies.full);
    assert_non_null(fxb_reply_new(s, true, FXB_REPLIES_HIGH));
    assert_true(s->replies.full);
    assert_int_equal(s->replies.n, FXB_REPLIES_HIGH);
    bidi_free(s);
    fix_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_slots_queue_in_request_order_and_complete_later),
    cmocka_unit_test(test_binary_acks_carry_request_id_and_error_text),
    cmocka_unit_test(test_json_acks_are_publish_ok_and_publish_error),
    cmocka_unit_test(test_the_high_mark_stops_reading),
};
FX_TEST_MAIN(tests)
