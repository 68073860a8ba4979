/* Development certificates: generating a self-signed ECDSA P-256 pair on
 * disk and computing the SHA-256 fingerprint that clients pin. Blocking file
 * I/O: called at endpoint creation (main thread or before the loop runs) and
 * from tests, never on a running data path. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "base/fsutil.h"
#include "felix/error.h"
#include "quic/internal.h"

/* ---- files ------------------------------------------------------------- */

/* Writes |d| to |path| with exactly |mode|, atomically (fx_file_write_atomic:
 * a crash never leaves a half-written key behind, and a file or link
 * planted under the temporary's name is never written through). */
int fx_quic_write_file_atomic(const char *path, const gnutls_datum_t *d, mode_t mode)
{
    return fx_file_write_atomic(path, d->data, d->size, mode, FX_FILE_EXACT_MODE);
}

int fx_quic_read_file(const char *path, gnutls_datum_t *out)
{
    int rv = gnutls_load_file(path, out);
    if (rv == 0)
        return 0;
    /* gnutls_load_file() hides errno; report the usual suspects. */
    return access(path, R_OK) < 0 ? -errno : FX_ETLS;
}

/* ---- generation -------------------------------------------------------- */

static int set_names(gnutls_x509_crt_t crt, const fx_quic_cert_spec *spec)
{
    const char *dns = spec->dns_name ? spec->dns_name : "localhost";
    int rv = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, dns,
                                           (unsigned)strlen(dns));
    if (rv == 0)
        rv = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, dns,
                                                  (unsigned)strlen(dns), GNUTLS_FSAN_APPEND);
    if (rv < 0 || spec->ip_address == NULL)
        return rv;
    /* The SAN takes the address as binary bytes; a string would be
     * accepted and silently produce an invalid entry. */
    uint8_t ip[16];
    unsigned iplen;
    if (inet_pton(AF_INET, spec->ip_address, ip) == 1)
        iplen = 4;
    else if (inet_pton(AF_INET6, spec->ip_address, ip) == 1)
        iplen = 16;
    else
        return GNUTLS_E_INVALID_REQUEST;
    return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, iplen,
                                                GNUTLS_FSAN_APPEND);
}

static int fill_crt(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const fx_quic_cert_spec *spec)
{
    uint8_t serial[16];
    int rv = gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial));
    serial[0] = (uint8_t)((serial[0] & 0x7f) | 0x01); /* positive, full length */
    if (rv == 0)
        rv = gnutls_x509_crt_set_version(crt, 3);
    if (rv == 0)
        rv = gnutls_x509_crt_set_serial(crt, serial, sizeof(serial));
    if (rv == 0)
        rv = gnutls_x509_crt_set_activation_time(crt, (time_t)spec->not_before);
    if (rv == 0)
        rv = gnutls_x509_crt_set_expiration_time(crt, (time_t)spec->not_after);
    if (rv == 0)
        rv = gnutls_x509_crt_set_key(crt, key);
    if (rv == 0)
        rv = set_names(crt, spec);
    if (rv == 0)
        rv = gnutls_x509_crt_set_basic_constraints(crt, 0, -1);
    if (rv == 0)
        rv = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE);
    if (rv == 0)
        rv = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0);
    if (rv == 0)
        rv = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0);
    return rv;
}

static int export_both(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const char *cert_path,
                       const char *key_path)
{
    gnutls_datum_t cpem = {0}, kpem = {0};
    int rv = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &cpem);
    if (rv == 0)
        rv = gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &kpem);
    if (rv < 0) {
        rv = FX_ETLS;
        goto out;
    }
    /* Key first: a certificate without its key is never left behind. */
    rv = fx_quic_write_file_atomic(key_path, &kpem, 0600);
    if (rv == 0)
        rv = fx_quic_write_file_atomic(cert_path, &cpem, 0644);
out:
    gnutls_free(cpem.data);
    if (kpem.data != NULL) {
        memset(kpem.data, 0, kpem.size);
        gnutls_free(kpem.data);
    }
    return rv;
}

int fx_quic_cert_generate(const char *cert_path, const char *key_path,
                          const fx_quic_cert_spec *spec)
{
    time_t now = time(NULL);
    fx_quic_cert_spec def = {
        .not_before = (int64_t)now - 3600,
        .not_after = (int64_t)now + 10 * 365 * 86400,
        .dns_name = "localhost",
        .ip_address = "127.0.0.1",
    };
    if (spec == NULL)
        spec = &def;
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    int rv = gnutls_x509_privkey_init(&key);
    if (rv == 0)
        rv = gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                          GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0);
    if (rv == 0)
        rv = gnutls_x509_crt_init(&crt);
    if (rv == 0)
        rv = fill_crt(crt, key, spec);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "certificate generation failed: %s", gnutls_strerror(rv));
        rv = FX_ETLS;
    } else {
        rv = export_both(crt, key, cert_path, key_path);
    }
    if (crt != NULL)
        gnutls_x509_crt_deinit(crt);
    if (key != NULL)
        gnutls_x509_privkey_deinit(key);
    return rv;
}

/* ---- fingerprints ------------------------------------------------------ */

void fx_quic_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int fx_quic_der_fingerprint(const uint8_t *der, size_t len, char hex[65])
{
    uint8_t md[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, der, len, md) < 0)
        return FX_ETLS;
    fx_quic_hex(md, sizeof(md), hex);
    return 0;
}

int fx_quic_cert_fingerprint(const char *cert_path, char hex[65])
{
    gnutls_datum_t pem = {0}, der = {0};
    gnutls_x509_crt_t crt = NULL;
    int rv = fx_quic_read_file(cert_path, &pem);
    if (rv < 0)
        return rv;
    /* Fingerprint the re-exported DER, never an in-memory object: that is
     * the exact byte string a peer receives. */
    if (gnutls_x509_crt_init(&crt) < 0 ||
        gnutls_x509_crt_import(crt, &pem, GNUTLS_X509_FMT_PEM) < 0 ||
        gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_DER, &der) < 0)
        rv = FX_ETLS;
    else
        rv = fx_quic_der_fingerprint(der.data, der.size, hex);
    gnutls_free(der.data);
    gnutls_free(pem.data);
    if (crt != NULL)
        gnutls_x509_crt_deinit(crt);
    return rv;
}

int fx_quic_pin_parse(const char *text, uint8_t out[32])
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == ':')
            continue;
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        else
            return FX_ECONFIG;
        if (hi < 0) {
            hi = v;
            continue;
        }
        if (n == 32)
            return FX_ECONFIG;
        out[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    return n == 32 && hi < 0 ? 0 : FX_ECONFIG;
}

/* ---- stateless reset secret ------------------------------------------------ */

int fx_quic_load_reset_secret(fx_quic_endpoint *ep)
{
    char path[4096];
    const char *dir = ep->o.state_dir != NULL ? ep->o.state_dir : ".";
    if (snprintf(path, sizeof(path), "%s/quic-reset.key", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    gnutls_datum_t d = {0};
    if (gnutls_load_file(path, &d) == 0) {
        int rv = d.size == sizeof(ep->reset_secret) ? 0 : FX_ECONFIG;
        if (rv == 0)
            memcpy(ep->reset_secret, d.data, d.size);
        else
            fx_quic_log(FX_QLOG_ERROR, "%s: expected %zu bytes", path, sizeof(ep->reset_secret));
        gnutls_memset(d.data, 0, d.size);
        gnutls_free(d.data);
        return rv;
    }
    /* First start: the random secret made at creation becomes the one. */
    d.data = ep->reset_secret;
    d.size = sizeof(ep->reset_secret);
    return fx_quic_write_file_atomic(path, &d, 0600);
}
