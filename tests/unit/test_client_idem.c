/* Tests of the idempotent producer's bookkeeping in the client
 * (src/client/idem.c) on frames built in memory, without QUIC or a loop:
 * freezing writes the producer id and the stream's next sequence into the
 * frame's bytes (one sequence per frame, per stream), a merged frame of
 * idempotent publishes is frozen as one batch, answers take frames off the
 * kept list in any order while the resend cursor stays on the oldest
 * unsent one, a rewind re-sends every kept frame, the same bytes, in send
 * order, and a new producer restarts the sequences. */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>

#include "client/client.h"

typedef struct fix {
    fx_client c;
    fx_budget budget;
    fxc_idem id;
} fix;

static fix *fix_new(void)
{
    fix *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fx_budget_init(&f->budget, 64u << 20, NULL), 0);
    assert_int_equal(pthread_mutex_init(&f->c.mu, NULL), 0);
    assert_int_equal(fxc_client_cond_init(&f->c.cv), 0);
    atomic_init(&f->c.outstanding, 0);
    atomic_init(&f->c.flushers, 0);
    return f;
}

static void fix_free(fix *f)
{
    fxc_idem_clear(&f->id);
    fx_budget_deinit(&f->budget);
    pthread_cond_destroy(&f->c.cv);
    pthread_mutex_destroy(&f->c.mu);
    free(f);
}

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* An idempotent frame as publish.c encodes it: 0x0109, producer id and
 * sequence 0, one payload |p| to t/ns/|stream|. */
static pjob *ijob(fix *f, uint64_t rid, const char *stream, const char *p)
{
    fx_wire_publish_batch head = {.request_id = rid,
                                  .ack = FX_WIRE_ACK_PER_BATCH,
                                  .idempotent = true,
                                  .tenant = str("t"),
                                  .ns = str("ns"),
                                  .stream = str(stream)};
    ssize_t size = fx_wire_batch_frame_size(&head, 1, strlen(p));
    assert_true(size > 0);
    pjob *j = fxc_pub_job_alloc(&f->c, (size_t)size);
    assert_non_null(j);
    fx_wire_batch_builder bb;
    assert_int_equal(fx_wire_batch_begin(&bb, j->frame, j->len, &head), 0);
    assert_int_equal(fx_wire_batch_append(&bb, p, strlen(p)), 0);
    assert_int_equal(fx_wire_batch_finish(&bb, &j->marks), size);
    j->count = 1;
    j->wack = FX_WIRE_ACK_PER_BATCH;
    j->merge = true;
    j->idem = true;
    return j;
}

/* Decodes |j|'s frame: request id, producer id, sequence, stream and the
 * payloads joined by ','. */
typedef struct decoded {
    uint64_t rid, pid, seq;
    char stream[32];
    char payloads[64];
} decoded;

static decoded decode(const pjob *j)
{
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(j->frame, 1u << 20, &h, NULL), 0);
    assert_int_equal(h.flags, 0x0109);
    const uint8_t *body = j->frame + FX_WIRE_HEADER_LEN;
    decoded d = {0};
    assert_int_equal(
        fx_wire_publish_idem_prefix_decode(body, h.length, &d.rid, &d.pid, &d.seq, NULL), 0);
    fx_wire_publish_batch b;
    assert_int_equal(fx_wire_publish_batch_decode(h.flags, body, h.length, &b, NULL), 0);
    assert_int_equal(b.producer_id, d.pid);
    assert_int_equal(b.sequence, d.seq);
    snprintf(d.stream, sizeof(d.stream), "%.*s", (int)b.stream.len, (const char *)b.stream.ptr);
    size_t n = 0;
    for (uint32_t i = 0; i < b.count; i++)
        n += (size_t)snprintf(d.payloads + n, sizeof(d.payloads) - n, "%s%.*s", i ? "," : "",
                              (int)b.payloads[i].len, (const char *)b.payloads[i].ptr);
    fx_wire_publish_batch_deinit(&b);
    return d;
}

static void test_freeze_writes_producer_and_per_stream_sequence(void **state)
{
    (void)state;
    fix *f = fix_new();
    f->id.pid = 0x1122334455667788u;
    pjob *a0 = ijob(f, 10, "a", "x"), *a1 = ijob(f, 11, "a", "y"), *b0 = ijob(f, 12, "b", "z");
    assert_int_equal(fxc_idem_freeze(&f->id, a0), 0);
    assert_int_equal(fxc_idem_freeze(&f->id, b0), 0);
    assert_int_equal(fxc_idem_freeze(&f->id, a1), 0);
    decoded d = decode(a0);
    assert_int_equal(d.rid, 10);
    assert_int_equal(d.pid, 0x1122334455667788u);
    assert_int_equal(d.seq, 0);
    assert_string_equal(d.stream, "a");
    assert_int_equal(decode(a1).seq, 1);
    assert_int_equal(decode(b0).seq, 0); /* another stream: its own count */
    assert_int_equal(a1->rid, 11);
    assert_int_equal(a1->pid, 0x1122334455667788u);
    /* A new producer: sequences start over; frozen frames keep their bytes. */
    fxc_idem_reset(&f->id);
    f->id.pid = 7;
    pjob *a2 = ijob(f, 13, "a", "w");
    assert_int_equal(fxc_idem_freeze(&f->id, a2), 0);
    assert_int_equal(decode(a2).seq, 0);
    assert_int_equal(decode(a2).pid, 7);
    assert_int_equal(decode(a1).pid, 0x1122334455667788u);
    assert_int_equal(decode(a1).seq, 1);
    pjob *k = fxc_idem_clear(&f->id);
    assert_ptr_equal(k, a0);
    for (pjob *nx; k != NULL; k = nx) {
        nx = k->knext;
        fxc_pub_job_free(k);
    }
    fix_free(f);
}

static void test_kept_frames_resend_in_send_order_until_answered(void **state)
{
    (void)state;
    fix *f = fix_new();
    f->id.pid = 5;
    pjob *j[4];
    for (int i = 0; i < 4; i++) {
        j[i] = ijob(f, 100 + (uint64_t)i, "s", "p");
        assert_int_equal(fxc_idem_freeze(&f->id, j[i]), 0);
    }
    /* Nothing sent yet: the cursor is on the first frame. */
    assert_ptr_equal(f->id.resend, j[0]);
    /* All four went out (the sender moves the cursor). */
    f->id.resend = NULL;
    /* Answers: the second, then the first. */
    assert_ptr_equal(fxc_idem_take(&f->id, 101), j[1]);
    assert_ptr_equal(fxc_idem_take(&f->id, 100), j[0]);
    assert_null(fxc_idem_take(&f->id, 100)); /* a late second answer: nothing kept */
    /* The connection is lost: the two unanswered go again, oldest first,
     * the same bytes under the same sequences. */
    decoded before = decode(j[3]);
    fxc_idem_rewind(&f->id);
    assert_ptr_equal(f->id.resend, j[2]);
    assert_ptr_equal(j[2]->knext, j[3]);
    assert_null(j[3]->knext);
    decoded after = decode(j[3]);
    assert_memory_equal(&before, &after, sizeof(before));
    assert_int_equal(after.seq, 3);
    /* The one under the cursor is answered while being re-sent: the
     * cursor moves to the next; a new frame is queued behind it. */
    assert_ptr_equal(fxc_idem_take(&f->id, 102), j[2]);
    assert_ptr_equal(f->id.resend, j[3]);
    pjob *j4 = ijob(f, 104, "s", "q");
    assert_int_equal(fxc_idem_freeze(&f->id, j4), 0);
    assert_ptr_equal(f->id.resend, j[3]); /* the older one first */
    assert_int_equal(decode(j4).seq, 4);
    assert_ptr_equal(fxc_idem_take(&f->id, 103), j[3]);
    assert_ptr_equal(f->id.resend, j4);
    assert_ptr_equal(fxc_idem_take(&f->id, 104), j4);
    assert_null(f->id.resend);
    assert_null(f->id.khead);
    assert_null(f->id.ktail);
    for (int i = 0; i < 4; i++)
        fxc_pub_job_free(j[i]);
    fxc_pub_job_free(j4);
    fix_free(f);
}

static void test_merged_idempotent_publishes_freeze_as_one_batch(void **state)
{
    (void)state;
    fix *f = fix_new();
    fxc_group g;
    fxc_coalesce_init(&g, 1u << 20);
    pjob *parts[3];
    const char *ps[3] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        parts[i] = ijob(f, 20 + (uint64_t)i, "s", ps[i]);
        assert_int_equal(fx_budget_try_acquire(&f->budget, parts[i]->len, &parts[i]->permit), 0);
        atomic_fetch_add(&f->c.outstanding, 1);
        assert_true(fxc_coalesce_fits(&g, parts[i]));
        fxc_coalesce_add(&g, parts[i]);
    }
    pjob *m = NULL;
    fxc_coalesce_take(&g, &m);
    assert_non_null(m);
    assert_int_equal(m->calls, 3);
    assert_true(m->idem);
    f->id.pid = 9;
    assert_int_equal(fxc_idem_freeze(&f->id, m), 0);
    decoded d = decode(m);
    assert_int_equal(d.rid, 20); /* the head's request id answers for all */
    assert_int_equal(d.pid, 9);
    assert_int_equal(d.seq, 0);
    assert_string_equal(d.payloads, "one,two,three");
    assert_ptr_equal(fxc_idem_take(&f->id, 20), m);
    fxc_pub_job_put(m);
    assert_int_equal(fx_budget_in_use(&f->budget), 0);
    assert_int_equal(atomic_load(&f->c.outstanding), 0);
    fix_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_freeze_writes_producer_and_per_stream_sequence),
    cmocka_unit_test(test_kept_frames_resend_in_send_order_until_answered),
    cmocka_unit_test(test_merged_idempotent_publishes_freeze_as_one_batch),
};
FX_TEST_MAIN(tests)
