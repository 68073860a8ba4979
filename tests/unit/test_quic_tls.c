/* Unit tests for tls.c: server credentials (a pair generated once into
 * state_dir and reused, configured files, refusals of half a pair, a key of
 * another certificate, unreadable or non-PEM files), their reference
 * counts, installing and reloading them on an endpoint, and client pins
 * checked in the handshake against the credentials in use (loopback, one
 * loop, no threads). Each case works in its own mkdtemp directory. */
/* fx-test-libs: fx_quic fx_base */
#define _XOPEN_SOURCE 700
#include "base/log.h"
#include "base/loop.h"
#include "felix/error.h"
#include "quic/internal.h"
#include "quic/quic.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fx_test.h"

static char base[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    fx_log_set_level(FX_LOG_ERROR);
    snprintf(base, sizeof(base), "/tmp/fx-tls-XXXXXX");
    return mkdtemp(base) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    return nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *at(const char *name)
{
    static char bufs[4][160];
    static int k;
    char *p = bufs[k++ % 4];
    snprintf(p, 160, "%s/%s", base, name);
    return p;
}

static fx_quic_opts opts(const char *cert, const char *key)
{
    fx_quic_opts o;
    fx_quic_opts_default(&o);
    o.state_dir = base;
    o.cert_file = cert;
    o.key_file = key;
    return o;
}

static void test_generated_pair_is_made_once_and_reused(void **state)
{
    fx_quic_opts o = opts(NULL, NULL);
    fx_quic_creds *a = NULL, *b = NULL;
    assert_int_equal(fx_quic_creds_load(&a, &o), 0);
    struct stat st;
    assert_int_equal(stat(at("tls-key.pem"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char hex[65];
    assert_int_equal(fx_quic_cert_fingerprint(at("tls-cert.pem"), hex), 0);
    assert_string_equal(fx_quic_creds_fingerprint(a), hex);
    assert_int_equal(fx_quic_creds_load(&b, &o), 0);
    assert_string_equal(fx_quic_creds_fingerprint(b), hex);
    fx_quic_creds_unref(a);
    fx_quic_creds_unref(b);
}

static void test_configured_files_are_loaded(void **state)
{
    assert_int_equal(fx_quic_cert_generate(at("c.pem"), at("k.pem"), NULL), 0);
    fx_quic_opts o = opts(at("c.pem"), at("k.pem"));
    fx_quic_creds *cr = NULL;
    assert_int_equal(fx_quic_creds_load(&cr, &o), 0);
    char hex[65];
    assert_int_equal(fx_quic_cert_fingerprint(at("c.pem"), hex), 0);
    assert_string_equal(fx_quic_creds_fingerprint(cr), hex);
    /* Nothing was generated into state_dir. */
    assert_int_equal(access(at("tls-cert.pem"), F_OK), -1);
    fx_quic_creds_unref(cr);
}

static void test_half_pairs_mismatched_keys_and_bad_files_are_refused(void **state)
{
    assert_int_equal(fx_quic_cert_generate(at("c.pem"), at("k.pem"), NULL), 0);
    assert_int_equal(fx_quic_cert_generate(at("c2.pem"), at("k2.pem"), NULL), 0);
    fx_quic_creds *cr = NULL;
    fx_quic_opts o = opts(at("c.pem"), NULL);
    assert_int_equal(fx_quic_creds_load(&cr, &o), FX_ECONFIG);
    o = opts(NULL, at("k.pem"));
    assert_int_equal(fx_quic_creds_load(&cr, &o), FX_ECONFIG);
    o = opts(at("c.pem"), at("k2.pem"));
    assert_int_equal(fx_quic_creds_load(&cr, &o), FX_ETLS);
    o = opts(at("missing.pem"), at("k.pem"));
    assert_int_equal(fx_quic_creds_load(&cr, &o), -ENOENT);
    FILE *f = fopen(at("junk.pem"), "w");
    fputs("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", f);
    fclose(f);
    o = opts(at("junk.pem"), at("k.pem"));
    assert_int_equal(fx_quic_creds_load(&cr, &o), FX_ETLS);
    assert_null(cr);
    fx_quic_creds_unref(NULL);
}

static void test_references_keep_credentials_alive(void **state)
{
    fx_quic_opts o = opts(NULL, NULL);
    fx_quic_creds *cr = NULL;
    assert_int_equal(fx_quic_creds_load(&cr, &o), 0);
    assert_ptr_equal(fx_quic_creds_ref(cr), cr);
    assert_ptr_equal(fx_quic_creds_ref(cr), cr);
    assert_int_equal(atomic_load(&cr->refs), 3);
    fx_quic_creds_unref(cr);
    fx_quic_creds_unref(cr);
    /* Still usable with one reference left (ASan would see a use after free). */
    assert_int_equal(strlen(fx_quic_creds_fingerprint(cr)), 64);
    fx_quic_creds_unref(cr);
}

/* ---- on an endpoint ------------------------------------------------------------ */

typedef struct hs {
    fx_loop *loop;
    fx_timer poll;
    int handshakes, closed, reason;
    uint64_t deadline;
} hs;

static hs *the;

static void on_done(fx_quic_conn *c, void *user)
{
    if (!fx_quic_conn_is_server(c))
        the->handshakes++;
}

static void on_closed(fx_quic_conn *c, const fx_quic_close_info *info, void *user)
{
    if (!fx_quic_conn_is_server(c)) {
        the->closed++;
        the->reason = info->reason;
    }
}

static const fx_quic_callbacks CBS = {.on_handshake_done = on_done, .on_conn_closed = on_closed};

static void on_poll(fx_loop *l, fx_timer *tm, void *user)
{
    hs *t = user;
    if (t->handshakes > 0 || t->closed > 0 || fx_loop_now(l) > t->deadline) {
        fx_loop_stop(l);
        return;
    }
    fx_loop_timer_arm(l, tm, fx_loop_now(l) + FX_NS_PER_MS);
}

/* Connects a client pinned to |pin| to |srv|; returns the client's
 * outcome: 0 after a handshake, else its close reason. */
static int connect_pinned(hs *t, fx_quic_endpoint *srv, const char *pin)
{
    fx_quic_opts co;
    fx_quic_opts_default(&co);
    fx_quic_endpoint *cli = NULL;
    assert_int_equal(fx_quic_client_new(&cli, t->loop, &co, &CBS, t), 0);
    fx_quic_connect_opts cc = {.pin_sha256 = pin, .server_name = "localhost"};
    fx_quic_conn *c = NULL;
    t->handshakes = t->closed = t->reason = 0;
    assert_int_equal(fx_quic_connect(cli, "127.0.0.1", fx_quic_endpoint_port(srv), &cc, t, &c), 0);
    t->deadline = fx_now_ns() + 5000 * FX_NS_PER_MS;
    fx_loop_timer_arm(t->loop, &t->poll, 0);
    assert_int_equal(fx_loop_run(t->loop), 0);
    fx_loop_timer_cancel(t->loop, &t->poll);
    int out = t->handshakes > 0 ? 0 : t->closed > 0 ? t->reason : -ETIMEDOUT;
    fx_quic_endpoint_free(cli);
    return out;
}

static void test_endpoint_presents_installed_and_reloaded_credentials(void **state)
{
    hs t = {0};
    the = &t;
    assert_int_equal(fx_loop_new(&t.loop, &(fx_loop_opts){.name = "tls-test", .cpu = -1}), 0);
    fx_timer_init(&t.poll, on_poll, &t);
    /* The endpoint keeps the option strings: they must outlive it. */
    static char cert[160], key[160];
    snprintf(cert, sizeof(cert), "%s", at("c.pem"));
    snprintf(key, sizeof(key), "%s", at("k.pem"));
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    fx_quic_opts so = opts(cert, key);
    fx_quic_endpoint *srv = NULL;
    assert_int_equal(fx_quic_server_new(&srv, t.loop, "127.0.0.1", 0, &so, &CBS, &t), 0);
    char first[65];
    assert_int_equal(fx_quic_cert_fingerprint(at("c.pem"), first), 0);
    assert_string_equal(fx_quic_endpoint_fingerprint(srv), first);
    assert_int_equal(connect_pinned(&t, srv, first), 0);
    /* New files, reloaded: new handshakes present them. */
    assert_int_equal(fx_quic_cert_generate(at("c.pem"), at("k.pem"), NULL), 0);
    assert_int_equal(fx_quic_endpoint_reload_credentials(srv), 0);
    char second[65];
    assert_int_equal(fx_quic_cert_fingerprint(at("c.pem"), second), 0);
    assert_string_not_equal(second, first);
    assert_string_equal(fx_quic_endpoint_fingerprint(srv), second);
    assert_int_equal(connect_pinned(&t, srv, first), FX_ETLS_PIN);
    assert_int_equal(connect_pinned(&t, srv, second), 0);
    /* A reload that fails keeps what is in use. */
    FILE *f = fopen(at("k.pem"), "w");
    fputs("garbage\n", f);
    fclose(f);
    assert_int_equal(fx_quic_endpoint_reload_credentials(srv), FX_ETLS);
    assert_string_equal(fx_quic_endpoint_fingerprint(srv), second);
    assert_int_equal(connect_pinned(&t, srv, second), 0);
    /* Credentials are a server's only. */
    fx_quic_opts co;
    fx_quic_opts_default(&co);
    fx_quic_endpoint *cli = NULL;
    assert_int_equal(fx_quic_client_new(&cli, t.loop, &co, &CBS, &t), 0);
    fx_quic_creds *cr = NULL;
    fx_quic_opts gen = opts(NULL, NULL);
    assert_int_equal(fx_quic_creds_load(&cr, &gen), 0);
    assert_int_equal(fx_quic_endpoint_set_credentials(cli, cr), FX_ECONFIG);
    assert_int_equal(fx_quic_endpoint_reload_credentials(cli), FX_ECONFIG);
    assert_int_equal(fx_quic_endpoint_set_credentials(srv, cr), 0);
    assert_string_equal(fx_quic_endpoint_fingerprint(srv), fx_quic_creds_fingerprint(cr));
    fx_quic_creds_unref(cr);
    fx_quic_endpoint_free(cli);
    fx_quic_endpoint_free(srv);
    fx_loop_free(t.loop);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_generated_pair_is_made_once_and_reused),
    T(test_configured_files_are_loaded),
    T(test_half_pairs_mismatched_keys_and_bad_files_are_refused),
    T(test_references_keep_credentials_alive),
    T(test_endpoint_presents_installed_and_reloaded_credentials),
};

FX_TEST_MAIN(tests)
