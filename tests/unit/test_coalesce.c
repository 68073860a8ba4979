/* Tests of the client's natural batching (src/client/coalesce.c) on jobs
 * built in memory, without QUIC or a loop: which jobs may share a frame,
 * the bounds, the merged frame (decoded with src/wire) and what the merged
 * job takes over from its parts (budget bytes, requests, the outstanding
 * count fx_flush waits on). */
/* fx-test-libs: fx_client fx_quic fx_wire fx_base */
#include "fx_test.h"

#include <errno.h>

#include "client/client.h"

/* ---- fixture ------------------------------------------------------------------------ */

/* A client as far as jobs need one: budget, outstanding count, mutex and
 * condition variable (request completion). */
typedef struct fix {
    fx_client c;
    fx_budget budget;
    fxc_group g;
} fix;

static fix *fix_new(size_t max_body)
{
    fix *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(fx_budget_init(&f->budget, 64u << 20, NULL), 0);
    assert_int_equal(pthread_mutex_init(&f->c.mu, NULL), 0);
    assert_int_equal(fxc_client_cond_init(&f->c.cv), 0);
    atomic_init(&f->c.outstanding, 0);
    atomic_init(&f->c.flushers, 0);
    fxc_coalesce_init(&f->g, max_body);
    return f;
}

/* Every job was released: no budget byte and no publish left behind. */
static void fix_free(fix *f)
{
    assert_int_equal(fx_budget_in_use(&f->budget), 0);
    assert_int_equal(atomic_load(&f->c.outstanding), 0);
    fx_budget_deinit(&f->budget);
    pthread_cond_destroy(&f->c.cv);
    pthread_mutex_destroy(&f->c.mu);
    free(f);
}

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

/* Admits a job the way publish.c does: its frame built by src/wire's
 * builder (tenant "t", namespace "ns", |stream|), its bytes taken from the
 * budget and the publish counted as outstanding. */
static pjob *job(fix *f, fx_wire_ack ack, uint64_t id, const char *stream, const fx_wire_slice *pl,
                 size_t n)
{
    fx_wire_publish_batch head = {
        .request_id = id, .ack = ack, .tenant = str("t"), .ns = str("ns"), .stream = str(stream)};
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += pl[i].len;
    ssize_t size = fx_wire_batch_frame_size(&head, n, bytes);
    assert_true(size > 0);
    pjob *j = fxc_pub_job_alloc(&f->c, (size_t)size);
    assert_non_null(j);
    fx_wire_batch_builder bb;
    assert_int_equal(fx_wire_batch_begin(&bb, j->frame, j->len, &head), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(fx_wire_batch_append(&bb, pl[i].ptr, pl[i].len), 0);
    assert_int_equal(fx_wire_batch_finish(&bb, &j->marks), size);
    j->count = (uint32_t)n;
    j->wack = (uint8_t)ack;
    j->merge = true;
    assert_int_equal(fx_budget_try_acquire(&f->budget, j->len, &j->permit), 0);
    atomic_fetch_add(&f->c.outstanding, 1);
    return j;
}

/* One unacked message "m" to |stream|. */
static pjob *job1(fix *f, const char *stream)
{
    fx_wire_slice m = str("m");
    return job(f, FX_WIRE_ACK_NONE, 0, stream, &m, 1);
}

/* A frame that cannot be merged (what a JSON publish is). */
static pjob *json_job(fix *f)
{
    pjob *j = fxc_pub_job_alloc(&f->c, 40);
    assert_non_null(j);
    memset(j->frame, '{', j->len);
    j->count = 1;
    assert_int_equal(fx_budget_try_acquire(&f->budget, j->len, &j->permit), 0);
    atomic_fetch_add(&f->c.outstanding, 1);
    return j;
}

/* Records the order async completions ran in. */
typedef struct done_log {
    int order[8];
    int rv[8];
    int n;
} done_log;

/* An unacked async request: its callback writes its index into |log|. */
typedef struct areq {
    done_log *log;
    int index;
} areq;

static void areq_done(void *user, int rv)
{
    areq *a = user;
    a->log->order[a->log->n] = a->index;
    a->log->rv[a->log->n] = rv;
    a->log->n++;
}

static preq *async_req(areq *a)
{
    preq *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->cb = areq_done;
    r->user = a;
    atomic_init(&r->refs, 1);
    return r;
}

static void put_all(fxc_group *g)
{
    pjob *j;
    while (g->head != NULL) {
        fxc_coalesce_take(g, &j);
        fxc_pub_job_put(j);
    }
    if (g->next != NULL) {
        fxc_pub_job_put(g->next);
        g->next = NULL;
    }
}

/* Decodes |j|'s frame into |b| (which the caller deinits). */
static void decode(const pjob *j, fx_wire_publish_batch *b)
{
    fx_frame_header h;
    assert_int_equal(fx_frame_header_decode(j->frame, UINT32_MAX, &h, NULL), 0);
    assert_int_equal(h.length, j->len - FX_WIRE_HEADER_LEN);
    assert_int_equal(
        fx_wire_publish_batch_decode(h.flags, j->frame + FX_WIRE_HEADER_LEN, h.length, b, NULL), 0);
}

/* ---- cases ------------------------------------------------------------------------ */

/* A group of one is taken as that job, unmerged and unchanged. */
static void test_group_of_one_is_taken_as_is(void **state)
{
    fix *f = fix_new(1u << 20);
    assert_false(fxc_coalesce_full(&f->g));
    pjob *a = job1(f, "s");
    assert_true(fxc_coalesce_fits(&f->g, a)); /* an empty group takes anything */
    fxc_coalesce_add(&f->g, a);
    assert_int_equal(f->g.jobs, 1);
    assert_int_equal(f->g.msgs, 1);
    pjob *t = NULL;
    fxc_coalesce_take(&f->g, &t);
    assert_ptr_equal(t, a);
    assert_true(t->merge);
    assert_null(f->g.head);
    assert_int_equal(f->g.jobs + f->g.msgs + f->g.bytes, 0);
    fxc_pub_job_put(t);
    fix_free(f);
}

/* The merged frame decodes to the parts' messages in order, under the
 * first part's request id and ack mode, and counts messages and calls. */
static void test_merged_frame_decodes_to_the_parts(void **state)
{
    fix *f = fix_new(1u << 20);
    fx_wire_slice pl[] = {str("a0"), str(""), str("b1 longer"), str("c0"), str("c1"), str("c2")};
    static const size_t per[] = {1, 2, 3};
    size_t at = 0;
    for (int k = 0; k < 3; k++) {
        pjob *j = job(f, FX_WIRE_ACK_PER_BATCH, 100 + k, "orders", pl + at, per[k]);
        at += per[k];
        assert_true(fxc_coalesce_fits(&f->g, j));
        fxc_coalesce_add(&f->g, j);
    }
    assert_int_equal(f->g.jobs, 3);
    assert_int_equal(f->g.msgs, 6);
    pjob *m = NULL;
    fxc_coalesce_take(&f->g, &m);
    assert_null(f->g.head);
    assert_int_equal(m->count, 6);
    assert_int_equal(m->calls, 3);
    assert_false(m->merge);
    assert_int_equal(m->wack, FX_WIRE_ACK_PER_BATCH);
    fx_wire_publish_batch b;
    decode(m, &b);
    assert_int_equal(b.ack, FX_WIRE_ACK_PER_BATCH);
    assert_int_equal(b.request_id, 100);
    assert_int_equal(b.stream.len, 6);
    assert_memory_equal(b.stream.ptr, "orders", 6);
    assert_int_equal(b.count, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(b.payloads[i].len, pl[i].len);
        assert_memory_equal(b.payloads[i].ptr, pl[i].ptr, pl[i].len);
    }
    fx_wire_publish_batch_deinit(&b);
    /* Its marks still describe it: names as the parts', all of its entries. */
    fx_wire_slice names = fx_wire_batch_names(m->frame, m->marks);
    assert_int_equal(names.len, 6 + 1 + 2 + 6);
    assert_int_equal(fx_wire_batch_entries_len(m->len, m->marks), 6 * 4 + 2 + 9 + 6);
    fxc_pub_job_put(m);
    fix_free(f);
}

/* Only the same stream with the same ack mode, both binary, may share a
 * frame, and nothing joins once a job is waiting as |next|. */
static void test_fits_only_same_stream_and_ack_mode(void **state)
{
    fix *f = fix_new(1u << 20);
    fxc_coalesce_add(&f->g, job1(f, "s"));
    pjob *other = job1(f, "s2");
    assert_false(fxc_coalesce_fits(&f->g, other));
    pjob *same_len = job1(f, "x"); /* names of the same length, other bytes */
    assert_false(fxc_coalesce_fits(&f->g, same_len));
    fx_wire_slice m = str("m");
    pjob *acked = job(f, FX_WIRE_ACK_PER_MESSAGE, 9, "s", &m, 1);
    assert_false(fxc_coalesce_fits(&f->g, acked));
    pjob *json = json_job(f);
    assert_false(fxc_coalesce_fits(&f->g, json));
    pjob *ok = job1(f, "s");
    assert_true(fxc_coalesce_fits(&f->g, ok));
    f->g.next = other; /* what the worker does with a job that did not fit */
    assert_false(fxc_coalesce_fits(&f->g, ok));
    assert_true(fxc_coalesce_full(&f->g));
    put_all(&f->g);
    fxc_pub_job_put(same_len);
    fxc_pub_job_put(acked);
    fxc_pub_job_put(json);
    fxc_pub_job_put(ok);
    fix_free(f);
}

/* A job that cannot be merged makes a group of its own: full at once, and
 * no other job fits behind it. */
static void test_unmergeable_job_is_a_group_of_its_own(void **state)
{
    fix *f = fix_new(1u << 20);
    pjob *json = json_job(f);
    fxc_coalesce_add(&f->g, json);
    assert_true(fxc_coalesce_full(&f->g));
    pjob *a = job1(f, "s");
    assert_false(fxc_coalesce_fits(&f->g, a));
    pjob *t = NULL;
    fxc_coalesce_take(&f->g, &t);
    assert_ptr_equal(t, json);
    fxc_pub_job_put(t);
    fxc_pub_job_put(a);
    fix_free(f);
}

/* The entries of a merged frame stay within FX_PUBLISH_COALESCE_BYTES: the
 * job that would pass it does not fit, and the group is full once there. */
static void test_coalesce_bytes_bound(void **state)
{
    fix *f = fix_new(1u << 20);
    static uint8_t big[20000];
    fx_wire_slice pl = {big, sizeof(big)};
    for (int i = 0; i < 3; i++) {
        pjob *j = job(f, FX_WIRE_ACK_NONE, 0, "s", &pl, 1);
        assert_true(fxc_coalesce_fits(&f->g, j));
        fxc_coalesce_add(&f->g, j);
        assert_false(fxc_coalesce_full(&f->g));
    }
    assert_int_equal(f->g.bytes, 3 * (4 + sizeof(big)));
    pjob *over = job(f, FX_WIRE_ACK_NONE, 0, "s", &pl, 1);
    assert_false(fxc_coalesce_fits(&f->g, over)); /* 80,016 > 65,536 */
    fx_wire_slice rest = {big, FX_PUBLISH_COALESCE_BYTES - f->g.bytes - 4};
    pjob *exact = job(f, FX_WIRE_ACK_NONE, 0, "s", &rest, 1);
    assert_true(fxc_coalesce_fits(&f->g, exact));
    fxc_coalesce_add(&f->g, exact);
    assert_int_equal(f->g.bytes, FX_PUBLISH_COALESCE_BYTES);
    assert_true(fxc_coalesce_full(&f->g));
    pjob *m = NULL;
    fxc_coalesce_take(&f->g, &m);
    assert_int_equal(fx_wire_batch_entries_len(m->len, m->marks), FX_PUBLISH_COALESCE_BYTES);
    fxc_pub_job_put(m);
    fxc_pub_job_put(over);
    fix_free(f);
}

/* A merged frame's body stays within max_frame_bytes (the group's
 * |max_body|): its head counts, so fewer entry bytes fit than the bound. */
static void test_max_frame_bytes_bound(void **state)
{
    size_t max_body = 200;
    fix *f = fix_new(max_body);
    static uint8_t p50[50];
    fx_wire_slice pl = {p50, sizeof(p50)};
    int n = 0;
    pjob *j = job(f, FX_WIRE_ACK_NONE, 0, "s", &pl, 1);
    while (fxc_coalesce_fits(&f->g, j)) {
        fxc_coalesce_add(&f->g, j);
        n++;
        j = job(f, FX_WIRE_ACK_NONE, 0, "s", &pl, 1);
    }
    /* Body: 6 + 1 + 2 + 1 names, 4 count, then 54 per message: three fit
     * (176), a fourth (230) would not. */
    assert_int_equal(n, 3);
    assert_false(fxc_coalesce_full(&f->g));
    pjob *m = NULL;
    fxc_coalesce_take(&f->g, &m);
    assert_true(m->len - FX_WIRE_HEADER_LEN <= max_body);
    assert_int_equal(m->len - FX_WIRE_HEADER_LEN, 176);
    fxc_pub_job_put(m);
    fxc_pub_job_put(j);
    fix_free(f);
}

/* The merged job takes its parts' budget bytes (released together when it
 * is) and their requests, chained in order, which complete when it does;
 * the outstanding count goes from one per part to one. */
static void test_take_hands_permits_and_requests_to_the_merged_job(void **state)
{
    fix *f = fix_new(1u << 20);
    done_log log = {0};
    areq a[3] = {{&log, 0}, {&log, 1}, {&log, 2}};
    size_t bytes = 0;
    for (int k = 0; k < 3; k++) {
        pjob *j = job1(f, "s");
        if (k != 1) /* a synchronous unacked publish has no request */
            j->req = async_req(&a[k]);
        bytes += j->permit.n;
        fxc_coalesce_add(&f->g, j);
    }
    assert_int_equal(atomic_load(&f->c.outstanding), 3);
    assert_int_equal(fx_budget_in_use(&f->budget), bytes);
    pjob *m = NULL;
    fxc_coalesce_take(&f->g, &m);
    assert_int_equal(m->permit.n, bytes);
    assert_ptr_equal(m->permit.budget, &f->budget);
    assert_int_equal(fx_budget_in_use(&f->budget), bytes); /* the parts gave nothing back */
    assert_int_equal(atomic_load(&f->c.outstanding), 1);
    assert_non_null(m->req);
    assert_ptr_equal(m->req->user, &a[0]);
    assert_ptr_equal(m->req->grp->user, &a[2]);
    assert_null(m->req->grp->grp);
    assert_int_equal(log.n, 0); /* nothing completes before the merged frame does */
    fxc_pub_job_put(m);
    assert_int_equal(log.n, 2);
    assert_int_equal(log.order[0], 0);
    assert_int_equal(log.order[1], 2);
    assert_int_equal(log.rv[0], 0);
    assert_int_equal(log.rv[1], 0);
    fix_free(f); /* budget and outstanding back to zero */
}

/* Collects what fxc_coalesce_drain hands back, and releases it. */
typedef struct drained {
    pjob *seen[4];
    int n;
} drained;

static void drain_cb(pjob *j, void *user)
{
    drained *d = user;
    assert_null(j->gnext);
    d->seen[d->n++] = j;
    fxc_pub_job_put(j);
}

/* Draining hands back every grouped job in order, then |next|, and
 * leaves the group empty. */
static void test_drain_hands_back_group_then_next(void **state)
{
    fix *f = fix_new(1u << 20);
    pjob *js[3];
    for (int k = 0; k < 2; k++) {
        js[k] = job1(f, "s");
        fxc_coalesce_add(&f->g, js[k]);
    }
    js[2] = job1(f, "other");
    f->g.next = js[2];
    drained d = {0};
    fxc_coalesce_drain(&f->g, drain_cb, &d);
    assert_int_equal(d.n, 3);
    for (int k = 0; k < 3; k++)
        assert_ptr_equal(d.seen[k], js[k]);
    assert_null(f->g.head);
    assert_null(f->g.tail);
    assert_null(f->g.next);
    assert_int_equal(f->g.jobs + f->g.msgs + f->g.bytes, 0);
    fix_free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_group_of_one_is_taken_as_is),
    cmocka_unit_test(test_merged_frame_decodes_to_the_parts),
    cmocka_unit_test(test_fits_only_same_stream_and_ack_mode),
    cmocka_unit_test(test_unmergeable_job_is_a_group_of_its_own),
    cmocka_unit_test(test_coalesce_bytes_bound),
    cmocka_unit_test(test_max_frame_bytes_bound),
    cmocka_unit_test(test_take_hands_permits_and_requests_to_the_merged_job),
    cmocka_unit_test(test_drain_hands_back_group_then_next),
};

FX_TEST_MAIN(tests)
