/* Unit twin of src/broker/group_journal.c: engine events as journal
 * records, the recovery mapping onto a new engine, and, on the one-thread
 * broker of conn_fixture.h over the in-memory file system of
 * dur_fixture.h, a group of a durable stream: its files made at create,
 * its records handed to the storage thread once per worker turn, an
 * ack_sync answer held until they are written, the bound on unwritten
 * records, recovery after a power cut (acked settled, delivered records
 * available again with their attempts), a damaged journal refusing only
 * its group, and a delete removing the files. The groups are made with
 * the worker's calls (joins on durable streams are refused until groups
 * read below the ring). */
/* fx-test-libs: fx_broker fx_storage fx_wire fx_base */
#include "unit/conn_fixture.h"

#include "unit/dur_fixture.h"

#include "broker/group_int.h"
#include "broker/group_journal.h"
#include "broker/reply.h"
#include "broker/worker.h"
#include "storage/gjournal.h"

/* ---- pure parts ------------------------------------------------------------------------- */

static void test_event_records(void **state)
{
    (void)state;
    fx_gjournal_rec r;
    fxb_gs_event e = {.type = FXB_GS_EV_DELIVER, .first = 7, .count = 3, .attempt = 2};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_DELIVER);
    assert_int_equal(r.offset, 7);
    assert_int_equal(r.count, 3);
    assert_int_equal(r.attempt, 2);
    e = (fxb_gs_event){.type = FXB_GS_EV_ACK, .first = 1, .count = 4};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_ACK);
    assert_int_equal(r.count, 4);
    e = (fxb_gs_event){
        .type = FXB_GS_EV_NAK, .first = 9, .count = 1, .attempt = 2, .not_before_us = 555};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_NAK);
    assert_int_equal(r.not_before_us, 555);
    assert_int_equal(r.attempt, 2);
    e = (fxb_gs_event){.type = FXB_GS_EV_RELEASE, .first = 9, .count = 1, .attempt = 1};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_RELEASE);
    e = (fxb_gs_event){.type = FXB_GS_EV_DEAD, .first = 9, .count = 1, .reason = FXB_GS_DEAD_TERM};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_DEAD);
    assert_int_equal(r.reason, FXB_GS_DEAD_TERM);
    e = (fxb_gs_event){.type = FXB_GS_EV_SKIP, .first = 0, .count = 5};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_SKIP);
    e = (fxb_gs_event){.type = FXB_GS_EV_SEEK, .first = 40};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_SEEK);
    assert_int_equal(r.offset, 40);
    e = (fxb_gs_event){.type = FXB_GS_EV_REDRIVE, .first = 12, .count = 1};
    assert_true(fxb_gj_event_rec(&e, &r));
    assert_int_equal(r.type, FX_GJ_REDRIVE);
    assert_int_equal(r.offset, 12);
    assert_int_equal(r.attempt, 0);
    assert_int_equal(r.count, 0);
    e = (fxb_gs_event){.type = FXB_GS_EV_ACK, .first = 1, .count = 0}; /* not a record */
    assert_false(fxb_gj_event_rec(&e, &r));
}

static uint32_t one_byte(void *user, uint64_t offset)
{
    (void)user;
    (void)offset;
    return 1;
}

/* Hands member |mid| of |gs| what it can take from [0, tail); returns the
 * first run. */
static fxb_gs_run pump_one(fxb_gs *gs, uint64_t tail, size_t *pn)
{
    fxb_gs_view v = {.low = 0, .tail = tail, .len = one_byte};
    fxb_gs_run runs[8];
    fxb_gs_dead dead[4];
    size_t nd = 0;
    *pn = fxb_gs_pump(gs, &v, 1000, runs, 8, dead, 4, &nd);
    assert_int_equal(nd, 0);
    return *pn > 0 ? runs[0] : (fxb_gs_run){0};
}

/* A state with [0, 3) acked, 3 and 5 delivered twice, 4 acked, 6 parked by
 * a nak whose (wall clock) time is past, 7 parked 2 s beyond the wall clock
 * at restore: recovery makes 3, 5, 6 available with their attempts and
 * keeps 7 parked for its 2 s left, on the loop's clock; the next delivery
 * is a redelivery at attempt + 1, and new records follow from 8. */
static void test_restore_mapping(void **state)
{
    (void)state;
    fx_gjournal_state s;
    fx_gjournal_state_init(&s);
    fx_gjournal_rec recs[] = {
        {.type = FX_GJ_DELIVER, .offset = 0, .count = 7, .attempt = 1},
        {.type = FX_GJ_ACK, .offset = 0, .count = 3},
        {.type = FX_GJ_ACK, .offset = 4, .count = 1},
        {.type = FX_GJ_DELIVER, .offset = 3, .count = 1, .attempt = 2},
        {.type = FX_GJ_DELIVER, .offset = 5, .count = 1, .attempt = 2},
        {.type = FX_GJ_NAK, .offset = 6, .attempt = 1, .not_before_us = 123456789},
        /* Parked until 2 s after the wall clock below: it waits out the rest. */
        {.type = FX_GJ_DELIVER, .offset = 7, .count = 1, .attempt = 1},
        {.type = FX_GJ_NAK, .offset = 7, .attempt = 1, .not_before_us = 5000000000 + 2000000},
    };
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++)
        assert_int_equal(fx_gjournal_state_apply(&s, &recs[i]), 0);
    fxb_gs_config c;
    fxb_gs_config_default(&c);
    fxb_gs *gs = fxb_gs_new(&c, 0);
    assert_non_null(gs);
    /* The loop's clock at 1,000 s, the wall clock at 5,000 s. */
    assert_int_equal(fxb_gj_restore(gs, &s, 1000000000, 5000000000), 0);
    fxb_gs_info in;
    fxb_gs_get_info(gs, &in);
    assert_int_equal(in.floor, 3);
    assert_int_equal(in.next, 8);
    assert_int_equal(in.available, 3); /* 6 too: its wall time is long past */
    assert_int_equal(in.parked, 1);    /* 7: 2 s of its delay left */
    assert_int_equal(fxb_gs_next_deadline(gs), 1000000000 + 2000000);
    uint32_t mid;
    assert_int_equal(fxb_gs_member_add(gs, 16, 0, &mid), 0);
    size_t n;
    fxb_gs_run r = pump_one(gs, 9, &n);
    assert_true(n >= 3);
    assert_int_equal(r.first, 3);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.attempt, 3);
    fxb_gs_free(gs);
    fx_gjournal_state_deinit(&s);
}

/* ---- on the broker ----------------------------------------------------------------------- */

static fx_wire_slice sl(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static void publish_ok(cf *f, const char *stream, const char *payload, uint64_t id)
{
    cf_publish_json(f, 0, "t1", stream, payload, id);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, 0, &m));
    assert_int_equal(m.type, FX_MSG_PUBLISH_OK);
    fx_msg_deinit(&m);
}

/* A broker with durable stream t1/default/|stream| holding |n| records. */
static cf *broker_with(const char *stream, int n, fx_stream_handle **ph)
{
    cf *f = df_new();
    cf_auth(f, 0, "t1");
    for (int i = 0; i < n; i++)
        publish_ok(f, stream, "{\"x\":1}", (uint64_t)i + 1);
    *ph = fx_registry_find(f->b->reg, sl("t1"), sl("default"), sl(stream));
    assert_non_null(*ph);
    return f;
}

/* A new broker on the same file system whose first use of |stream| is a
 * subscribe (no append: a group would settle what the ring lacks). */
static cf *reopen(const char *stream, fx_stream_handle **ph)
{
    cf *f = df_new();
    cf_auth(f, 0, "t1");
    cf_subscribe(f, 0, "t1", stream);
    cf_settle(f);
    fx_msg m;
    assert_true(cf_read_msg(f, 0, &m));
    assert_int_equal(m.type, FX_MSG_SUBSCRIBED);
    fx_msg_deinit(&m);
    *ph = fx_registry_find(f->b->reg, sl("t1"), sl("default"), sl(stream));
    assert_non_null(*ph);
    return f;
}

static struct fxb_group *group_of(cf *f, fx_stream_handle *h, const char *name)
{
    fxb_worker *w = fxb_worker_for(f->b, h);
    return fxb_group_find(fxb_group_sgroups(w, h), name);
}

static int replies_run;

static void reply_cb(fx_loop *l, fx_task *t, void *user)
{
    (void)l;
    (void)t;
    replies_run++;
    fxb_reply_unref(user);
}

/* A reply slot as a request id makes one, completed on |l|; the test keeps
 * a reference. */
static fxb_reply *reply_on(fx_loop *l)
{
    fxb_reply *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    atomic_init(&r->refs, 2);
    r->loop = l;
    fx_task_init(&r->task, reply_cb, r);
    return r;
}

/* The groups directory of t1/default/|stream| in the test's file system. */
static void groups_dir(const char *stream, char *out, size_t cap)
{
    fx_catalog *cat;
    char err[512], dir[1024];
    assert_int_equal(fx_catalog_open(&cat, fx_memio_sio(df_mem), DF_ROOT, err, sizeof(err)), 0);
    const fx_catalog_entry *ce = fx_catalog_find(cat, "t1", "default", stream);
    assert_non_null(ce);
    assert_int_equal(fx_catalog_dir_path(cat, ce, dir, sizeof(dir)), 0);
    fx_catalog_free(cat);
    snprintf(out, cap, "%s/groups", dir);
}

static bool group_file(const char *stream, const char *group, const char *suffix)
{
    char dir[1100], stem[FX_GJOURNAL_STEM_MAX], path[1300];
    groups_dir(stream, dir, sizeof(dir));
    fx_gjournal_stem(stem, group);
    snprintf(path, sizeof(path), "%s/%s%s", dir, stem, suffix);
    uint64_t len;
    return fx_memio_file_len(df_mem, path, &len) == 0;
}

/* Makes group |name| of |h| from 0 and gives it one member. */
static struct fxb_group *make_group(cf *f, fx_stream_handle *h, const char *name, uint32_t *pmid)
{
    int rv = 0;
    struct fxb_group *g = fxb_group_new(fxb_worker_for(f->b, h), h, name, 0, NULL, &rv, NULL);
    assert_non_null(g);
    assert_int_equal(fxb_gs_member_add(g->gs, 16, 0, pmid), 0);
    return g;
}

/* Under on_commit: the group's files are made at create; a delivery and an
 * ack become two records handed over at the end of the worker's turn; an
 * answer waits until the storage thread wrote (and flushed) them. */
static void test_ack_sync_waits_for_journal(void **state)
{
    (void)state;
    df_mem_new();
    df_fsync = FX_FSYNC_ON_COMMIT;
    fx_stream_handle *h;
    cf *f = broker_with("d1", 5, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    size_t n;
    fxb_gs_run r = pump_one(g->gs, 5, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r.count, 5);
    assert_int_equal(fxb_gs_ack(g->gs, 0, 3, 1000, NULL), 3);
    assert_int_equal(fxb_gj_made(g), 2);
    cf_run_but(f, "fx-storage"); /* the worker hands the batch over; storage waits */
    assert_int_equal(fxb_gj_durable(g), 0);
    fxb_reply *rep = reply_on(fxb_worker_for(f->b, h)->loop);
    fx_buf *frame;
    assert_int_equal(fx_buf_new(&frame, 8), 0);
    replies_run = 0;
    assert_true(fxb_gj_defer_answer(g, rep, frame));
    assert_false(atomic_load(&rep->done));
    cf_run(f);
    assert_int_equal(fxb_gj_durable(g), 2);
    assert_true(atomic_load(&rep->done));
    assert_int_equal(replies_run, 1);
    fxb_reply_unref(rep);
    assert_true(group_file("d1", "g1", ".name"));
    assert_true(group_file("d1", "g1", ".jrnl"));
    assert_false(fxb_gj_defer_answer(g, NULL, NULL)); /* nothing waits: answered now */
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* After a power cut the next broker finds the group at the first use of its
 * stream: the acked records settled, the delivered ones available again,
 * redelivered at attempt 2; a damaged journal refuses only its group. */
static void test_recovery_after_power_cut(void **state)
{
    (void)state;
    df_mem_new();
    df_fsync = FX_FSYNC_ON_COMMIT;
    fx_stream_handle *h;
    cf *f = broker_with("d1", 6, &h);
    uint32_t mid, mid2;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    struct fxb_group *g2 = make_group(f, h, "g2", &mid2);
    size_t n;
    (void)pump_one(g->gs, 6, &n);
    (void)pump_one(g2->gs, 6, &n);
    assert_int_equal(fxb_gs_ack(g->gs, 0, 2, 1000, NULL), 2);
    assert_int_equal(fxb_gs_ack(g->gs, 4, 1, 1000, NULL), 1);
    cf_run(f);
    assert_int_equal(fxb_gj_durable(g), 3);
    fx_memio_crash_after(df_mem, 0); /* the process dies here */
    fx_stream_handle_unref(h);
    cf_free(f);
    fx_memio_crash(df_mem, 0); /* and the power goes */
    /* g2's journal damaged before its durable point: refused, g1 goes on. */
    char dir[1100], stem[FX_GJOURNAL_STEM_MAX], path[1300];
    groups_dir("d1", dir, sizeof(dir));
    fx_gjournal_stem(stem, "g2");
    snprintf(path, sizeof(path), "%s/%s.jrnl", dir, stem);
    assert_int_equal(fx_memio_corrupt(df_mem, path, 40, 0xff), 0);
    f = reopen("d1", &h); /* the first use opens the log: its groups come back */
    g = group_of(f, h, "g1");
    assert_non_null(g);
    assert_null(fxb_gj_error(g));
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    assert_int_equal(in.floor, 2);
    assert_int_equal(in.next, 6);
    assert_int_equal(in.available, 3); /* 2, 3, 5 */
    assert_int_equal(fxb_gs_member_add(g->gs, 16, 0, &mid), 0);
    fxb_gs_run r = pump_one(g->gs, 7, &n);
    assert_int_equal(r.first, 2);
    assert_int_equal(r.attempt, 2);
    g2 = group_of(f, h, "g2");
    assert_non_null(g2);
    assert_non_null(fxb_gj_error(g2));
    assert_non_null(strstr(fxb_gj_error(g2), ".jrnl"));
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* Under periodic a batch is written at once (an answer waiting for it is
 * released) and flushed by the stream's timer one interval later, even with
 * nothing of the log to flush: a power cut keeps what that flush covered
 * and loses what came after. */
static void test_periodic_flushes_on_the_timer(void **state)
{
    (void)state;
    df_mem_new();
    df_fsync = FX_FSYNC_PERIODIC;
    fx_stream_handle *h;
    cf *f = broker_with("d1", 4, &h);
    cf_advance(f, 300 * FX_NS_PER_MS); /* the log's records are flushed */
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    size_t n;
    (void)pump_one(g->gs, 4, &n);
    assert_int_equal(fxb_gs_ack(g->gs, 0, 2, 1000, NULL), 2);
    cf_run(f);
    assert_int_equal(fxb_gj_durable(g), fxb_gj_made(g)); /* written */
    cf_advance(f, 300 * FX_NS_PER_MS);                   /* and flushed */
    cf_run(f);
    assert_int_equal(fxb_gs_ack(g->gs, 2, 1, 1000, NULL), 1);
    cf_run(f); /* written, not flushed */
    fx_memio_crash_after(df_mem, 0);
    fx_stream_handle_unref(h);
    cf_free(f);
    fx_memio_crash(df_mem, 0);
    f = reopen("d1", &h);
    g = group_of(f, h, "g1");
    assert_non_null(g);
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    assert_int_equal(in.floor, 2);
    assert_int_equal(in.next, 4);
    assert_int_equal(in.available, 2);
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* A group created (admin API, YAML) before its stream's log opened on a
 * broker whose disk has that group: the recovered state replaces it. */
static void test_create_before_open_yields_to_the_files(void **state)
{
    (void)state;
    df_mem_new();
    fx_stream_handle *h;
    cf *f = broker_with("d1", 4, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    size_t n;
    (void)pump_one(g->gs, 4, &n);
    assert_int_equal(fxb_gs_ack(g->gs, 0, 2, 1000, NULL), 2);
    cf_run(f);
    fx_stream_handle_unref(h);
    cf_free(f);
    f = df_new(); /* the catalogue names d1; its log is not open */
    h = fx_registry_find(f->b->reg, sl("t1"), sl("default"), sl("d1"));
    assert_non_null(h);
    int rv;
    assert_non_null(fxb_group_new(fxb_worker_for(f->b, h), h, "g1", 4, NULL, &rv, NULL));
    cf_settle(f);
    g = group_of(f, h, "g1");
    assert_non_null(g);
    assert_null(fxb_gj_error(g));
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    assert_int_equal(in.floor, 2);
    assert_int_equal(in.next, 4);
    assert_int_equal(in.available, 2);
    assert_true(group_file("d1", "g1", ".jrnl"));
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* At FXB_GJ_MAX_UNWRITTEN records not yet written the group may not hand
 * out (a counted wait); once storage wrote them it may again. */
static void test_unwritten_bound(void **state)
{
    (void)state;
    df_mem_new();
    fx_stream_handle *h;
    cf *f = broker_with("d1", 1, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    assert_true(fxb_gj_room(g));
    for (uint32_t i = 0; i < FXB_GJ_MAX_UNWRITTEN; i++) {
        fxb_gs_dead d = {.offset = i, .attempts = 1, .reason = FXB_GS_DEAD_TERM};
        fxb_gj_dead_intent(g, &d);
    }
    fx_metrics_snapshot a, b;
    fx_metrics_snapshot_take(&a);
    assert_false(fxb_gj_room(g));
    fx_metrics_snapshot_take(&b);
    assert_int_equal(atomic_load(&b.c.group_journal_waits) - atomic_load(&a.c.group_journal_waits),
                     1);
    cf_run(f);
    assert_int_equal(fxb_gj_durable(g), fxb_gj_made(g));
    assert_true(fxb_gj_room(g));
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* A term goes through the journal as DEAD_INTENT (before the write to the
 * dead-letter stream) and DEAD; the next broker has it settled. */
static void test_dead_letter_journaled(void **state)
{
    (void)state;
    df_mem_new();
    fx_stream_handle *h;
    cf *f = broker_with("d1", 2, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    size_t n;
    (void)pump_one(g->gs, 2, &n);
    uint64_t made = fxb_gj_made(g);
    assert_int_equal(fxb_gs_term(g->gs, mid, 0, 1, 1000), FXB_GS_OK);
    fxb_group_pump(g);
    assert_true(fxb_gj_made(g) >= made + 2); /* DEAD_INTENT, DEAD (and what the pump did) */
    cf_settle(f);
    fx_stream_handle_unref(h);
    cf_free(f);
    f = reopen("d1", &h);
    g = group_of(f, h, "g1");
    assert_non_null(g);
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    assert_int_equal(in.floor, 1);
    assert_int_equal(in.available, 1);
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* Two terms listed; one redriven (the admin call), one discarded; the next
 * broker has the list (the redriven entry marked) and the redriven record
 * owed again at attempt 1; once acked its entry goes. */
static void test_dead_list_redrive_and_discard_survive_a_reopen(void **state)
{
    (void)state;
    df_mem_new();
    fx_stream_handle *h;
    cf *f = broker_with("d1", 3, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    size_t n;
    (void)pump_one(g->gs, 3, &n);
    assert_int_equal(fxb_gs_term(g->gs, mid, 0, 1, 1000), FXB_GS_OK);
    assert_int_equal(fxb_gs_term(g->gs, mid, 1, 1, 1000), FXB_GS_OK);
    assert_int_equal(fxb_gs_ack(g->gs, 2, 1, 1000, NULL), 1);
    fxb_group_pump(g);
    assert_int_equal(g->ndead, 2);
    fx_registry_err err = {0};
    /* These loops run only when the test turns them: the journal cannot be
     * written while the call waits for it, which it says (the change
     * stands, and is written at the next turn). */
    const uint64_t SHORT = 20000000ull;
    assert_int_equal(fx_broker_redrive_group(f->b, "t1", "default", "d1", "g1", 0, SHORT, &err),
                     FX_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "did not write the change in time"));
    cf_settle(f);
    assert_int_equal(
        fx_broker_redrive_group(f->b, "t1", "default", "d1", "g1", 0, FX_LOOP_FOREVER, &err),
        -ESRCH);
    assert_string_equal(err.msg, "offset 0 is not a dead letter of g1");
    assert_int_equal(
        fx_broker_discard_group(f->b, "t1", "default", "d1", "g1", 0, FX_LOOP_FOREVER, &err),
        -ESRCH); /* redriven: not a dead letter now */
    assert_int_equal(fx_broker_discard_group(f->b, "t1", "default", "d1", "g1", 1, SHORT, &err),
                     FX_ETIMEDOUT);
    cf_settle(f);
    assert_int_equal(
        fx_broker_redrive_group(f->b, "t1", "default", "d1", "g1", 1, FX_LOOP_FOREVER, &err),
        -ESRCH); /* discarded */
    assert_int_equal(g->ndead, 1);
    assert_true(g->dead[0].redriven);
    cf_settle(f);
    fx_stream_handle_unref(h);
    cf_free(f);

    f = reopen("d1", &h);
    g = group_of(f, h, "g1");
    assert_non_null(g);
    assert_int_equal(g->ndead, 1);
    assert_int_equal(g->dead[0].offset, 0);
    assert_true(g->dead[0].redriven);
    assert_int_equal(g->dead[0].reason, FXB_GS_DEAD_TERM);
    assert_int_equal(g->dead[0].attempts, 1);
    fxb_gs_info in;
    fxb_gs_get_info(g->gs, &in);
    assert_int_equal(in.floor, 0);
    assert_int_equal(in.next, 3);
    assert_int_equal(in.available, 1);
    assert_int_equal(fxb_gs_member_add(g->gs, 16, 0, &mid), 0);
    fxb_gs_run r = pump_one(g->gs, 3, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r.first, 0);
    assert_int_equal(r.attempt, 1);
    assert_int_equal(fxb_gs_ack(g->gs, 0, 1, 1000, NULL), 1);
    fxb_group_dead_prune(g, false);
    assert_int_equal(g->ndead, 0);
    cf_settle(f);
    fx_stream_handle_unref(h);
    cf_free(f);

    /* The ack removed the entry on disk too. */
    f = reopen("d1", &h);
    g = group_of(f, h, "g1");
    assert_non_null(g);
    assert_int_equal(g->ndead, 0);
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

/* A deleted group's files go; a new broker finds no group. */
static void test_delete_removes_files(void **state)
{
    (void)state;
    df_mem_new();
    fx_stream_handle *h;
    cf *f = broker_with("d1", 1, &h);
    uint32_t mid;
    struct fxb_group *g = make_group(f, h, "g1", &mid);
    cf_run(f);
    assert_true(group_file("d1", "g1", ".jrnl"));
    fxb_gs_member_remove(g->gs, mid, 0);
    fxb_group_delete(g);
    cf_run(f);
    assert_false(group_file("d1", "g1", ".jrnl"));
    assert_false(group_file("d1", "g1", ".name"));
    fx_stream_handle_unref(h);
    cf_free(f);
    f = reopen("d1", &h);
    assert_null(group_of(f, h, "g1"));
    fx_stream_handle_unref(h);
    cf_free(f);
    df_mem_free();
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_event_records),
    cmocka_unit_test(test_restore_mapping),
    cmocka_unit_test(test_ack_sync_waits_for_journal),
    cmocka_unit_test(test_recovery_after_power_cut),
    cmocka_unit_test(test_periodic_flushes_on_the_timer),
    cmocka_unit_test(test_create_before_open_yields_to_the_files),
    cmocka_unit_test(test_unwritten_bound),
    cmocka_unit_test(test_dead_letter_journaled),
    cmocka_unit_test(test_dead_list_redrive_and_discard_survive_a_reopen),
    cmocka_unit_test(test_delete_removes_files),
};

FX_TEST_MAIN(tests)
