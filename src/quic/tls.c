/* TLS 1.3 for QUIC through GnuTLS and ngtcp2_crypto_gnutls: server
 * credentials (files, or a generated certificate kept in state_dir), client
 * verification by CA, pin or "insecure" decided in one verify function that
 * records the reason, ALPN. Server credentials are refcounted so that a
 * reload swaps them for new handshakes while live sessions keep theirs.
 * Credential loading is blocking file I/O done at endpoint/connection
 * creation or by fx_quic_creds_load (any thread); sessions run on the
 * endpoint's loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "felix/error.h"
#include "quic/internal.h"

/* TLS 1.3 only, AES-GCM only (ChaCha20 has no fast path in this nettle),
 * and no middlebox compatibility mode, which QUIC forbids. */
static const char PRIORITY[] = "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                               "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"
                               "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1";

/* ---- server credentials ---------------------------------------------------- */

static int path_join(char *out, size_t cap, const char *dir, const char *name)
{
    if (snprintf(out, cap, "%s/%s", dir, name) >= (int)cap)
        return -ENAMETOOLONG;
    return 0;
}

/* Picks the certificate and key files, generating the pair into state_dir
 * the first time when none were configured. */
static int server_files(const fx_quic_opts *o, char *cert, char *key, size_t cap)
{
    if (o->cert_file != NULL || o->key_file != NULL) {
        if (o->cert_file == NULL || o->key_file == NULL) {
            fx_quic_log(FX_QLOG_ERROR, "tls_cert_file and tls_key_file must be set together");
            return FX_ECONFIG;
        }
        snprintf(cert, cap, "%s", o->cert_file);
        snprintf(key, cap, "%s", o->key_file);
        return 0;
    }
    const char *dir = o->state_dir != NULL ? o->state_dir : ".";
    int rv = path_join(cert, cap, dir, "tls-cert.pem");
    if (rv == 0)
        rv = path_join(key, cap, dir, "tls-key.pem");
    if (rv < 0)
        return rv;
    if (access(cert, R_OK) == 0 && access(key, R_OK) == 0)
        return 0;
    rv = fx_quic_cert_generate(cert, key, NULL);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "cannot generate a certificate in %s: %s", dir, fx_strerror(rv));
        return rv;
    }
    fx_quic_log(FX_QLOG_INFO,
                "generated a self-signed certificate %s (DNS:localhost, "
                "IP:127.0.0.1)",
                cert);
    return 0;
}

/* Parses the PEM certificate chain and key in memory and installs them in
 * |cr| (GnuTLS copies them and checks that the key matches). Parsing here
 * rather than with gnutls_certificate_set_x509_key_file also avoids that
 * function's leak on a malformed certificate. Returns 0 or a GnuTLS error. */
static int install_pair(fx_quic_creds *cr, const gnutls_datum_t *cd, const gnutls_datum_t *kd)
{
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    gnutls_x509_privkey_t pk = NULL;
    int rv = gnutls_x509_crt_list_import2(&crts, &n, cd, GNUTLS_X509_FMT_PEM, 0);
    if (rv < 0)
        return rv;
    rv = gnutls_x509_privkey_init(&pk);
    if (rv == 0)
        rv = gnutls_x509_privkey_import(pk, kd, GNUTLS_X509_FMT_PEM);
    if (rv == 0)
        rv = gnutls_certificate_set_x509_key(cr->cred, crts, n, pk);
    gnutls_x509_privkey_deinit(pk);
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    return rv;
}

/* Loads the pair into |cr| and takes the fingerprint from the certificate
 * GnuTLS loaded (not from a second read of the file, which may have been
 * replaced in between). */
static int load_pair(fx_quic_creds *cr, const char *cert, const char *key)
{
    gnutls_datum_t cd = {0}, kd = {0};
    int rv = fx_quic_read_file(cert, &cd);
    if (rv == 0)
        rv = fx_quic_read_file(key, &kd);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "cannot read %s / %s: %s", cert, key, fx_strerror(rv));
        goto out;
    }
    rv = install_pair(cr, &cd, &kd);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "cannot load %s / %s: %s", cert, key, gnutls_strerror(rv));
        rv = rv == GNUTLS_E_MEMORY_ERROR ? -ENOMEM : FX_ETLS;
        goto out;
    }
    gnutls_datum_t der = {0};
    rv = gnutls_certificate_get_crt_raw(cr->cred, 0, 0, &der);
    if (rv < 0) {
        fx_quic_log(FX_QLOG_ERROR, "no certificate in %s: %s", cert, gnutls_strerror(rv));
        rv = FX_ETLS;
        goto out;
    }
    rv = fx_quic_der_fingerprint(der.data, der.size, cr->fingerprint);
out:
    gnutls_free(cd.data);
    gnutls_free(kd.data);
    return rv;
}

int fx_quic_creds_load(fx_quic_creds **pcr, const fx_quic_opts *o)
{
    char cert[4096], key[4096];
    int rv = server_files(o, cert, key, sizeof(cert));
    if (rv < 0)
        return rv;
    fx_quic_creds *cr = calloc(1, sizeof(*cr));
    if (cr == NULL)
        return -ENOMEM;
    atomic_init(&cr->refs, 1);
    if (gnutls_certificate_allocate_credentials(&cr->cred) < 0) {
        free(cr);
        return -ENOMEM;
    }
    rv = load_pair(cr, cert, key);
    if (rv < 0) {
        fx_quic_creds_unref(cr);
        return rv;
    }
    fx_quic_log(FX_QLOG_INFO, "tls certificate %s sha256=%s", cert, cr->fingerprint);
    *pcr = cr;
    return 0;
}

fx_quic_creds *fx_quic_creds_ref(fx_quic_creds *cr)
{
    atomic_fetch_add_explicit(&cr->refs, 1, memory_order_relaxed);
    return cr;
}

void fx_quic_creds_unref(fx_quic_creds *cr)
{
    if (cr == NULL || atomic_fetch_sub_explicit(&cr->refs, 1, memory_order_acq_rel) != 1)
        return;
    gnutls_certificate_free_credentials(cr->cred);
    free(cr);
}

const char *fx_quic_creds_fingerprint(const fx_quic_creds *cr)
{
    return cr->fingerprint;
}

int fx_quic_tls_server_init(fx_quic_endpoint *ep)
{
    fx_quic_creds *cr;
    int rv = fx_quic_creds_load(&cr, &ep->o);
    if (rv < 0)
        return rv;
    rv = fx_quic_endpoint_set_credentials(ep, cr);
    fx_quic_creds_unref(cr);
    return rv;
}

/* ---- client verification ------------------------------------------------- */

static fx_quic_conn *session_conn(gnutls_session_t s)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
    return ref->user_data;
}

static int status_reason(unsigned status)
{
    if (status & (GNUTLS_CERT_SIGNER_NOT_FOUND | GNUTLS_CERT_SIGNER_NOT_CA |
                  GNUTLS_CERT_SIGNATURE_FAILURE | GNUTLS_CERT_INSECURE_ALGORITHM))
        return FX_ETLS_UNKNOWN_CA;
    if (status & (GNUTLS_CERT_EXPIRED | GNUTLS_CERT_NOT_ACTIVATED))
        return FX_ETLS_EXPIRED;
    if (status & GNUTLS_CERT_UNEXPECTED_OWNER)
        return FX_ETLS_NAME;
    return FX_ETLS;
}

static int verify_pin(fx_quic_conn *c, gnutls_session_t s)
{
    unsigned n = 0;
    const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
    if (certs == NULL || n == 0)
        return FX_ETLS;
    uint8_t md[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, certs[0].data, certs[0].size, md) < 0)
        return FX_ETLS;
    if (gnutls_memcmp(md, c->pin, sizeof(md)) != 0) {
        char hex[65];
        fx_quic_hex(md, sizeof(md), hex);
        fx_quic_log(FX_QLOG_WARN, "server certificate sha256=%s does not match the pin", hex);
        return FX_ETLS_PIN;
    }
    return 0;
}

static int verify_chain(fx_quic_conn *c, gnutls_session_t s)
{
    unsigned status = 0;
    int rv = gnutls_certificate_verify_peers3(s, c->server_name, &status);
    if (rv < 0)
        return FX_ETLS;
    if (status == 0)
        return 0;
    gnutls_datum_t text = {0};
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) == 0) {
        fx_quic_log(FX_QLOG_WARN, "server certificate refused: %s", (const char *)text.data);
        gnutls_free(text.data);
    }
    return status_reason(status);
}

/* Runs inside the handshake (inside ngtcp2_conn_read_pkt), so the reason is
 * kept on the connection and reported when the handshake fails. */
static int verify_cb(gnutls_session_t s)
{
    fx_quic_conn *c = session_conn(s);
    int rv = 0;
    if (c->insecure)
        rv = 0;
    else if (c->has_pin)
        rv = verify_pin(c, s);
    else
        rv = verify_chain(c, s);
    c->tls_reason = rv;
    return rv == 0 ? 0 : GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR;
}

int fx_quic_tls_client_creds(fx_quic_conn *c, const fx_quic_connect_opts *co)
{
    if (gnutls_certificate_allocate_credentials(&c->ccred) < 0)
        return -ENOMEM;
    if (co->pin_sha256 != NULL) {
        if (fx_quic_pin_parse(co->pin_sha256, c->pin) < 0)
            return FX_ECONFIG;
        c->has_pin = true;
    } else if (co->insecure) {
        c->insecure = true;
    } else if (co->ca_file != NULL) {
        int n = gnutls_certificate_set_x509_trust_file(c->ccred, co->ca_file, GNUTLS_X509_FMT_PEM);
        if (n <= 0) {
            fx_quic_log(FX_QLOG_ERROR, "no CA certificate loaded from %s", co->ca_file);
            return FX_ETLS;
        }
        c->use_ca = true;
    } else {
        if (gnutls_certificate_set_x509_system_trust(c->ccred) < 0)
            return FX_ETLS;
        c->use_ca = true;
    }
    gnutls_certificate_set_verify_function(c->ccred, verify_cb);
    return 0;
}

/* ---- sessions ------------------------------------------------------------- */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    fx_quic_conn *c = ref->user_data;
    return c->q;
}

static bool is_ip_literal(const char *name)
{
    struct in6_addr a;
    return inet_pton(AF_INET, name, &a) == 1 || inet_pton(AF_INET6, name, &a) == 1;
}

static int set_alpn(fx_quic_conn *c)
{
    const char *alpn = c->ep->o.alpn;
    if (alpn == NULL || alpn[0] == '\0')
        return 0;
    gnutls_datum_t p = {.data = (unsigned char *)alpn, .size = (unsigned)strlen(alpn)};
    /* On the server MANDATORY refuses a client offering other protocols
     * (alert no_application_protocol) yet accepts one offering none, which
     * is what the Rust original's clients do. */
    unsigned flags = c->server ? GNUTLS_ALPN_MANDATORY : 0;
    return gnutls_alpn_set_protocols(c->tls, &p, 1, flags);
}

static int client_session(fx_quic_conn *c)
{
    int rv = ngtcp2_crypto_gnutls_configure_client_session(c->tls);
    if (rv == 0)
        rv = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->ccred);
    if (rv == 0 && !is_ip_literal(c->server_name))
        rv =
            gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, c->server_name, strlen(c->server_name));
    return rv;
}

int fx_quic_tls_session(fx_quic_conn *c)
{
    unsigned flags = GNUTLS_NO_END_OF_EARLY_DATA;
    flags |= c->server ? GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET : GNUTLS_CLIENT;
    if (gnutls_init(&c->tls, flags) < 0)
        return -ENOMEM;
    int rv = gnutls_priority_set_direct(c->tls, PRIORITY, NULL);
    if (rv == 0) {
        if (c->server) {
            /* The session points at these credentials for its lifetime:
             * hold them until the connection is freed (a reload may swap
             * the endpoint's in between). */
            c->screds = fx_quic_creds_ref(c->ep->creds);
            rv = ngtcp2_crypto_gnutls_configure_server_session(c->tls);
            if (rv == 0)
                rv = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->screds->cred);
        } else {
            rv = client_session(c);
        }
    }
    if (rv == 0)
        rv = set_alpn(c);
    if (rv != 0) {
        fx_quic_log(FX_QLOG_ERROR, "tls session setup failed: %s", gnutls_strerror(rv));
        return FX_ETLS;
    }
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);
    ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
    return 0;
}

void fx_quic_tls_note_alpn(fx_quic_conn *c)
{
    gnutls_datum_t p;
    c->alpn[0] = '\0';
    if (gnutls_alpn_get_selected_protocol(c->tls, &p) == 0 && p.size < sizeof(c->alpn)) {
        memcpy(c->alpn, p.data, p.size);
        c->alpn[p.size] = '\0';
    }
}
