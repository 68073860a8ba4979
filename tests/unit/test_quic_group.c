/* QUIC placement and server groups: role-based loop assignment, one port
 * served from several loops with connection ownership by a stated rule, and
 * stray datagrams forwarded to the owning loop. The loops run on their own
 * threads; the test thread waits on atomic counters (hang guards only). */
/* fx-test-libs: fx_quic fx_base */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/placement.h"
#include "felix/error.h"
#include "fx_test.h"
#include "quic/quic.h"

/* The io loop of the |index|-th endpoint of a role by fx_placement_endpoint
 * (4 workers), or -1 in shared mode (the worker loops, not io loops). */
static int place(unsigned io_threads, bool server, unsigned index)
{
    fx_loop_slot slot;
    fx_endpoint_role role = server ? FX_ENDPOINT_SERVER : FX_ENDPOINT_CLIENT;
    assert_int_equal(fx_placement_endpoint(role, index, io_threads, 4, &slot), 0);
    return slot.kind == FX_LOOP_KIND_IO ? (int)slot.index : -1;
}

static void test_placement_by_role_for_0_to_3_io_threads(void **state)
{
    /* 0: shared mode, the caller's loops. */
    assert_int_equal(place(0, true, 0), -1);
    assert_int_equal(place(0, false, 0), -1);
    /* 1: both roles share loop 0. */
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(place(1, true, i), 0);
        assert_int_equal(place(1, false, i), 0);
    }
    /* 2: servers on loop 0, clients on loop 1. */
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(place(2, true, i), 0);
        assert_int_equal(place(2, false, i), 1);
    }
    /* 3: servers spread over 0 and 1, clients on 2, whatever the order. */
    assert_int_equal(place(3, false, 5), 2);
    assert_int_equal(place(3, true, 0), 0);
    assert_int_equal(place(3, true, 1), 1);
    assert_int_equal(place(3, true, 2), 0);
    assert_int_equal(place(3, false, 0), 2);
}

/* ---- a group on two loops, clients on a third ------------------------------- */

#define NCONN 20

typedef struct gh {
    fx_loop *loops[2], *cl;
    fx_quic_server_group *g;
    fx_quic_endpoint *cli;
    fx_quic_conn *conns[NCONN];
    atomic_int accepted_on[2];
    atomic_int wrong_loop;
    atomic_int client_hs, echoed, closed;
    char dir[64];
} gh;

static void on_conn_new(fx_quic_conn *c, void *user)
{
    gh *t = user;
    fx_loop *l = fx_quic_conn_loop(c);
    if (fx_loop_current() != l)
        atomic_fetch_add(&t->wrong_loop, 1);
    for (int i = 0; i < 2; i++)
        if (l == t->loops[i])
            atomic_fetch_add(&t->accepted_on[i], 1);
}

static void on_handshake_done(fx_quic_conn *c, void *user)
{
    gh *t = user;
    if (fx_quic_conn_is_server(c))
        return;
    atomic_fetch_add(&t->client_hs, 1);
    int64_t sid;
    fx_buf *b;
    assert_int_equal(fx_buf_new_copy(&b, "ping", 4), 0);
    assert_int_equal(fx_quic_conn_open_bidi(c, NULL, &sid), 0);
    assert_int_equal(fx_quic_stream_send(c, sid, b, 0, 4, true), 0);
    fx_buf_unref(b);
}

static void on_stream_data(fx_quic_conn *c, int64_t sid, const uint8_t *d, size_t len, bool fin,
                           void *user, void *su)
{
    gh *t = user;
    fx_quic_stream_consume(c, sid, len);
    if (fx_quic_conn_is_server(c)) {
        if (fx_loop_current() != fx_quic_conn_loop(c))
            atomic_fetch_add(&t->wrong_loop, 1);
        fx_buf *b;
        assert_int_equal(fx_buf_new_copy(&b, d, len), 0);
        assert_int_equal(fx_quic_stream_send(c, sid, b, 0, len, fin), 0);
        fx_buf_unref(b);
        return;
    }
    if (fin)
        atomic_fetch_add(&t->echoed, 1);
}

static void on_conn_closed(fx_quic_conn *c, const fx_quic_close_info *info, void *user)
{
    gh *t = user;
    if (!fx_quic_conn_is_server(c))
        atomic_fetch_add(&t->closed, 1);
}

static const fx_quic_callbacks CBS = {
    .on_conn_new = on_conn_new,
    .on_handshake_done = on_handshake_done,
    .on_stream_data = on_stream_data,
    .on_conn_closed = on_conn_closed,
};

static void wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 10000 && atomic_load(v) < want; i++)
        usleep(1000);
    assert_int_equal(atomic_load(v), want);
}

static gh *gh_new(bool bpf)
{
    fx_log_set_level(FX_LOG_ERROR);
    gh *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_loop_new(&t->loops[i], &(fx_loop_opts){.name = "srv", .cpu = -1}), 0);
    assert_int_equal(fx_loop_new(&t->cl, &(fx_loop_opts){.name = "cli", .cpu = -1}), 0);
    snprintf(t->dir, sizeof(t->dir), "/tmp/fxqgXXXXXX");
    assert_non_null(mkdtemp(t->dir));
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = t->dir;
    o.test_no_reuseport_bpf = !bpf;
    assert_int_equal(fx_quic_server_group_new(&t->g, t->loops, 2, "127.0.0.1", 0, &o, &CBS, t), 0);
    assert_int_equal(fx_quic_server_group_size(t->g), 2);
    assert_true(fx_quic_server_group_port(t->g) != 0);
    assert_int_equal(fx_quic_client_new(&t->cli, t->cl, &o, &CBS, t), 0);
    fx_quic_connect_opts co = {.insecure = true};
    for (int i = 0; i < NCONN; i++)
        assert_int_equal(fx_quic_connect(t->cli, "127.0.0.1", fx_quic_server_group_port(t->g), &co,
                                         t, &t->conns[i]),
                         0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_loop_start(t->loops[i]), 0);
    assert_int_equal(fx_loop_start(t->cl), 0);
    return t;
}

static void gh_stop(gh *t)
{
    fx_loop_stop(t->cl);
    for (int i = 0; i < 2; i++)
        fx_loop_stop(t->loops[i]);
}

static void gh_free(gh *t)
{
    fx_quic_endpoint_free(t->cli);
    fx_quic_server_group_free(t->g);
    fx_loop_free(t->cl);
    for (int i = 0; i < 2; i++)
        fx_loop_free(t->loops[i]);
    char p[128];
    snprintf(p, sizeof(p), "%s/tls-cert.pem", t->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/tls-key.pem", t->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/quic-reset.key", t->dir);
    unlink(p);
    rmdir(t->dir);
    free(t);
}

static void check_group(gh *t, uint64_t *fwd_out, uint64_t *fwd_in)
{
    wait_for(&t->client_hs, NCONN);
    wait_for(&t->echoed, NCONN);
    gh_stop(t);
    assert_int_equal(atomic_load(&t->wrong_loop), 0);
    int total = 0;
    *fwd_out = *fwd_in = 0;
    for (size_t i = 0; i < 2; i++) {
        fx_quic_stats st;
        fx_quic_endpoint_get_stats(fx_quic_server_group_member(t->g, i), &st);
        assert_int_equal((int)st.conns_accepted, atomic_load(&t->accepted_on[i]));
        total += (int)st.conns_accepted;
        *fwd_out += st.rx_forwarded_out;
        *fwd_in += st.rx_forwarded_in;
    }
    assert_int_equal(total, NCONN);
    /* 20 random client DCIDs all owned by one member: odds of 2^-19. */
    assert_true(atomic_load(&t->accepted_on[0]) > 0);
    assert_true(atomic_load(&t->accepted_on[1]) > 0);
    /* A forward may still sit in a stopped loop's inbox: the free runs it. */
    assert_true(*fwd_in <= *fwd_out);
}

static void test_group_spreads_connections_by_dcid_rule(void **state)
{
    gh *t = gh_new(true);
    uint64_t out, in;
    check_group(t, &out, &in);
    assert_int_equal(out, 0); /* the BPF program steered every datagram */
    gh_free(t);
}

static void test_group_without_bpf_forwards_strays_to_owner(void **state)
{
    gh *t = gh_new(false);
    uint64_t out, in;
    check_group(t, &out, &in);
    /* The kernel's hash ignores our rule: about half the datagrams reached
     * the wrong member and were forwarded (all 20 right by luck: 2^-20). */
    assert_true(out > 0);
    gh_free(t);
}

static void test_group_refuses_port_already_served(void **state)
{
    gh *t = gh_new(true);
    wait_for(&t->client_hs, NCONN);
    gh_stop(t);
    fx_loop *l2[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_loop_new(&l2[i], &(fx_loop_opts){.name = "x", .cpu = -1}), 0);
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = t->dir;
    fx_quic_server_group *g2 = NULL;
    assert_int_equal(fx_quic_server_group_new(&g2, l2, 2, "127.0.0.1",
                                              fx_quic_server_group_port(t->g), &o, &CBS, t),
                     -EADDRINUSE);
    assert_null(g2);
    for (int i = 0; i < 2; i++)
        fx_loop_free(l2[i]);
    gh_free(t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_placement_by_role_for_0_to_3_io_threads),
    cmocka_unit_test(test_group_spreads_connections_by_dcid_rule),
    cmocka_unit_test(test_group_without_bpf_forwards_strays_to_owner),
    cmocka_unit_test(test_group_refuses_port_already_served),
};
FX_TEST_MAIN(tests)
