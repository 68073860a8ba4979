/* Unit tests for cert.c: self-signed certificate generation (file modes, the
 * names and address in the certificate, validity, refusals), the SHA-256
 * fingerprint clients pin, pin parsing, hex, file reading errors and the
 * stateless-reset secret kept in the state directory. Each case works in
 * its own mkdtemp directory. */
/* fx-test-libs: fx_quic fx_base */
#define _XOPEN_SOURCE 700
#include "felix/error.h"
#include "quic/internal.h"
#include "quic/quic.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "fx_test.h"

static char base[64];
static char cert[128], key[128];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    snprintf(base, sizeof(base), "/tmp/fx-cert-XXXXXX");
    if (mkdtemp(base) == NULL)
        return -1;
    snprintf(cert, sizeof(cert), "%s/c.pem", base);
    snprintf(key, sizeof(key), "%s/k.pem", base);
    return 0;
}

static int teardown(void **state)
{
    return nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static gnutls_x509_crt_t load_crt(const char *path)
{
    gnutls_datum_t pem = {0};
    assert_int_equal(fx_quic_read_file(path, &pem), 0);
    gnutls_x509_crt_t crt;
    assert_int_equal(gnutls_x509_crt_init(&crt), 0);
    assert_int_equal(gnutls_x509_crt_import(crt, &pem, GNUTLS_X509_FMT_PEM), 0);
    gnutls_free(pem.data);
    return crt;
}

static void test_default_certificate_names_localhost_and_loopback(void **state)
{
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    struct stat st;
    assert_int_equal(stat(key, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(cert, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    gnutls_x509_crt_t crt = load_crt(cert);
    assert_true(gnutls_x509_crt_check_hostname(crt, "localhost"));
    assert_true(gnutls_x509_crt_check_ip(crt, (const unsigned char *)"\x7f\x00\x00\x01", 4, 0));
    assert_false(gnutls_x509_crt_check_hostname(crt, "example.com"));
    time_t now = time(NULL);
    assert_true(gnutls_x509_crt_get_activation_time(crt) <= now);
    assert_true(gnutls_x509_crt_get_expiration_time(crt) > now + 9 * 365 * 86400);
    assert_int_equal(gnutls_x509_crt_get_pk_algorithm(crt, NULL), GNUTLS_PK_ECDSA);
    gnutls_x509_crt_deinit(crt);
}

static void test_spec_sets_names_address_and_validity(void **state)
{
    fx_quic_cert_spec spec = {.not_before = 1000000000,
                              .not_after = 1100000000,
                              .dns_name = "broker.test",
                              .ip_address = "::1"};
    assert_int_equal(fx_quic_cert_generate(cert, key, &spec), 0);
    gnutls_x509_crt_t crt = load_crt(cert);
    assert_true(gnutls_x509_crt_check_hostname(crt, "broker.test"));
    assert_false(gnutls_x509_crt_check_hostname(crt, "localhost"));
    unsigned char v6[16] = {0};
    v6[15] = 1;
    assert_true(gnutls_x509_crt_check_ip(crt, v6, 16, 0));
    assert_int_equal(gnutls_x509_crt_get_activation_time(crt), 1000000000);
    assert_int_equal(gnutls_x509_crt_get_expiration_time(crt), 1100000000);
    gnutls_x509_crt_deinit(crt);
    /* A spec without an address has none. */
    spec.ip_address = NULL;
    assert_int_equal(fx_quic_cert_generate(cert, key, &spec), 0);
    crt = load_crt(cert);
    assert_false(gnutls_x509_crt_check_ip(crt, v6, 16, 0));
    gnutls_x509_crt_deinit(crt);
}

static void test_bad_address_or_directory_is_refused(void **state)
{
    fx_quic_cert_spec spec = {.not_before = 0, .not_after = 2000000000, .ip_address = "not-ip"};
    assert_int_equal(fx_quic_cert_generate(cert, key, &spec), FX_ETLS);
    struct stat st;
    assert_int_equal(stat(key, &st), -1); /* nothing written */
    char nokey[160], nocert[160];
    snprintf(nokey, sizeof(nokey), "%s/missing/k.pem", base);
    snprintf(nocert, sizeof(nocert), "%s/missing/c.pem", base);
    assert_int_equal(fx_quic_cert_generate(nocert, nokey, NULL), -ENOENT);
}

static void test_fingerprint_is_the_sha256_of_the_der(void **state)
{
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    char hex[65];
    assert_int_equal(fx_quic_cert_fingerprint(cert, hex), 0);
    assert_int_equal(strlen(hex), 64);
    gnutls_x509_crt_t crt = load_crt(cert);
    gnutls_datum_t der = {0};
    assert_int_equal(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_DER, &der), 0);
    uint8_t md[32];
    assert_int_equal(gnutls_hash_fast(GNUTLS_DIG_SHA256, der.data, der.size, md), 0);
    char want[65];
    fx_quic_hex(md, 32, want);
    assert_string_equal(hex, want);
    char again[65];
    assert_int_equal(fx_quic_der_fingerprint(der.data, der.size, again), 0);
    assert_string_equal(again, want);
    /* The pin of that fingerprint parses back to the digest. */
    uint8_t pin[32];
    assert_int_equal(fx_quic_pin_parse(hex, pin), 0);
    assert_memory_equal(pin, md, 32);
    gnutls_free(der.data);
    gnutls_x509_crt_deinit(crt);
    /* A new certificate has another fingerprint. */
    assert_int_equal(fx_quic_cert_generate(cert, key, NULL), 0);
    assert_int_equal(fx_quic_cert_fingerprint(cert, again), 0);
    assert_string_not_equal(again, hex);
}

static void test_fingerprint_and_read_errors(void **state)
{
    char hex[65], missing[160];
    snprintf(missing, sizeof(missing), "%s/none.pem", base);
    assert_int_equal(fx_quic_cert_fingerprint(missing, hex), -ENOENT);
    gnutls_datum_t d = {0};
    assert_int_equal(fx_quic_read_file(missing, &d), -ENOENT);
    FILE *f = fopen(cert, "w");
    fputs("not a certificate\n", f);
    fclose(f);
    assert_int_equal(fx_quic_cert_fingerprint(cert, hex), FX_ETLS);
}

static void test_pin_parse_wants_64_hex_digits(void **state)
{
    uint8_t out[32];
    char pin[200];
    for (int i = 0; i < 32; i++)
        sprintf(pin + 2 * i, "%02x", i);
    assert_int_equal(fx_quic_pin_parse(pin, out), 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(out[i], i);
    /* Colons between bytes and upper case are accepted. */
    char colons[200] = "";
    for (int i = 0; i < 32; i++)
        sprintf(colons + strlen(colons), "%s%02X", i ? ":" : "", 255 - i);
    assert_int_equal(fx_quic_pin_parse(colons, out), 0);
    assert_int_equal(out[0], 255);
    assert_int_equal(out[31], 224);
    char shorter[200];
    snprintf(shorter, sizeof(shorter), "%.63s", pin);
    assert_int_equal(fx_quic_pin_parse(shorter, out), FX_ECONFIG); /* odd */
    snprintf(shorter, sizeof(shorter), "%.62s", pin);
    assert_int_equal(fx_quic_pin_parse(shorter, out), FX_ECONFIG); /* 31 bytes */
    char longer[260];
    snprintf(longer, sizeof(longer), "%s00", pin);
    assert_int_equal(fx_quic_pin_parse(longer, out), FX_ECONFIG);
    pin[10] = 'g';
    assert_int_equal(fx_quic_pin_parse(pin, out), FX_ECONFIG);
    assert_int_equal(fx_quic_pin_parse("", out), FX_ECONFIG);
    char hex[7];
    fx_quic_hex((const uint8_t *)"\x00\xab\xff", 3, hex);
    assert_string_equal(hex, "00abff");
}

static void test_reset_secret_is_created_once_and_kept(void **state)
{
    static fx_quic_endpoint ep;
    memset(&ep, 0, sizeof(ep));
    ep.o.state_dir = base;
    memset(ep.reset_secret, 0x5a, sizeof(ep.reset_secret));
    assert_int_equal(fx_quic_load_reset_secret(&ep), 0);
    char path[160];
    snprintf(path, sizeof(path), "%s/quic-reset.key", base);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);
    /* A second start reads it back over its own random one. */
    memset(ep.reset_secret, 0, sizeof(ep.reset_secret));
    assert_int_equal(fx_quic_load_reset_secret(&ep), 0);
    for (size_t i = 0; i < sizeof(ep.reset_secret); i++)
        assert_int_equal(ep.reset_secret[i], 0x5a);
    /* A file of the wrong size is refused. */
    FILE *f = fopen(path, "w");
    fputs("short", f);
    fclose(f);
    assert_int_equal(fx_quic_load_reset_secret(&ep), FX_ECONFIG);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
static const struct CMUnitTest tests[] = {
    T(test_default_certificate_names_localhost_and_loopback),
    T(test_spec_sets_names_address_and_validity),
    T(test_bad_address_or_directory_is_refused),
    T(test_fingerprint_is_the_sha256_of_the_der),
    T(test_fingerprint_and_read_errors),
    T(test_pin_parse_wants_64_hex_digits),
    T(test_reset_secret_is_created_once_and_kept),
};

FX_TEST_MAIN(tests)
