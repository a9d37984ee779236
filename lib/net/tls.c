/* SPDX-License-Identifier: Apache-2.0 */
/* tls.c — OpenSSL client/server contexts and error text (see tls.h). */
#include "net/tls.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

void cj_tls_error_text(unsigned long code, char *buf, size_t n)
{
    const char *lib = ERR_lib_error_string(code);
    const char *reason = ERR_reason_error_string(code);
    if (reason) snprintf(buf, n, "%s%s%s", lib ? lib : "", lib ? ": " : "", reason);
    else ERR_error_string_n(code, buf, n);
}

size_t cj_tls_drain_errors(char *buf, size_t n)
{
    size_t used = 0;
    unsigned long code;
    if (n) buf[0] = '\0';
    while ((code = ERR_get_error()) != 0) {
        char one[256];
        cj_tls_error_text(code, one, sizeof one);
        if (used + 3 < n) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? "; " : "", one);
            if (w > 0) used += (size_t)w < n - used ? (size_t)w : n - used - 1;
        }
    }
    return used;
}

/* OpenSSL's reason text -> what it most likely means for a relay operator. */
const char *cj_tls_alert_hint(const char *t)
{
    static const struct { const char *needle, *hint; } hints[] = {
        {"has expired", "a certificate in the peer's chain has expired"},
        {"not yet valid", "a certificate in the peer's chain is not valid yet (clock skew?)"},
        {"unable to get local issuer", "the peer's certificate is not signed by a CA in ca_file"},
        {"self-signed certificate", "the peer's certificate chain does not lead to a CA in ca_file"},
        {"did not return a certificate", "the peer presented no client certificate"},
        {"unknown ca", "the peer does not trust our certificate: it was signed by a CA the peer does not know"},
        {"certificate expired", "the peer says a certificate has expired (check cert_file's validity dates)"},
        {"certificate required", "the peer requires a client certificate (connection_security = mtls "
                                 "with cert_file and key_file)"},
        {"bad certificate", "the peer rejected our certificate"},
        {"certificate revoked", "the peer says our certificate is revoked"},
        {"certificate verify failed", "the peer's certificate does not verify against ca_file"},
        {"wrong version number", "the peer does not speak TLS on this port (a clear tcp:// endpoint?)"},
        {"unsupported protocol", "the peer offers no TLS version >= 1.2"},
        {"handshake failure", "no common TLS version or cipher with the peer"},
        {"no shared cipher", "no common TLS cipher with the peer"},
    };
    if (!t) return NULL;
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
        if (strstr(t, hints[i].needle)) return hints[i].hint;
    return NULL;
}

static SSL_CTX *fail_ctx(SSL_CTX *ctx, struct cj_err *err, const char *what, const char *file)
{
    char q[512];
    cj_tls_drain_errors(q, sizeof q);
    cj_fail(err, CJ_E_INVALID, 0, "TLS: %s %s: %s", what, file ? file : "(not set)", q[0] ? q : "failed");
    if (ctx) SSL_CTX_free(ctx);
    return NULL;
}

/* Settings both sides share: TLS >= 1.2, small idle buffers, no renegotiation. */
static SSL_CTX *new_ctx(const SSL_METHOD *method, struct cj_err *err)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) return fail_ctx(NULL, err, "cannot create a context", "");
    if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION)) return fail_ctx(ctx, err, "cannot set TLS 1.2 minimum", "");
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* OpenSSL 3 reports a peer that closes without close_notify as an error;
     * NVFlare's Python side does exactly that, so treat it as a plain EOF. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    /* TLS 1.2 renegotiation is refused (a no_renegotiation alert; TLS 1.3 has
     * none): a link's peer identity is checked once, at the handshake, and
     * FLARE never renegotiates; a peer asking for it repeatedly would only
     * cost us CPU. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    return ctx;
}

int cj_tls_no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf; (void)size; (void)rwflag; (void)u;
    return 0;
}

static BIO *pem_bio(const struct cj_tls_pem *p)
{
    return p->len <= (size_t)INT32_MAX ? BIO_new_mem_buf(p->text, (int)p->len) : NULL;
}

int cj_tls_store_add_pem(X509_STORE *store, const struct cj_tls_pem *pem)
{
    BIO *b = pem_bio(pem);
    STACK_OF(X509_INFO) *infos = b ? PEM_X509_INFO_read_bio(b, NULL, cj_tls_no_passphrase, NULL) : NULL;
    BIO_free(b);
    int certs = 0, rc = 0;
    for (int i = 0; infos && i < sk_X509_INFO_num(infos) && !rc; i++) {
        X509_INFO *xi = sk_X509_INFO_value(infos, i);
        if (xi->x509 && X509_STORE_add_cert(store, xi->x509) != 1) rc = -1;
        if (xi->crl && X509_STORE_add_crl(store, xi->crl) != 1) rc = -1;
        certs += xi->x509 != NULL;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    return rc || !certs ? -1 : 0;
}

/* As SSL_CTX_use_certificate_chain_file does with a file: the first
 * certificate is ours, the ones after it its chain. */
static int use_chain_pem(SSL_CTX *ctx, const struct cj_tls_pem *p)
{
    BIO *b = pem_bio(p);
    X509 *leaf = b ? PEM_read_bio_X509_AUX(b, NULL, cj_tls_no_passphrase, NULL) : NULL;
    int ok = leaf && SSL_CTX_use_certificate(ctx, leaf) == 1 && SSL_CTX_clear_chain_certs(ctx) == 1;
    X509_free(leaf);
    for (X509 *x; ok && (x = PEM_read_bio_X509(b, NULL, cj_tls_no_passphrase, NULL));)
        if (SSL_CTX_add0_chain_cert(ctx, x) != 1) {
            X509_free(x);
            ok = 0;
        }
    unsigned long e = ERR_peek_last_error();   /* the end of the text, not a fault */
    if (ok && ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) ERR_clear_error();
    else if (ok && e) ok = 0;
    BIO_free(b);
    return ok ? 1 : 0;
}

static int use_key_pem(SSL_CTX *ctx, const struct cj_tls_pem *p)
{
    BIO *b = pem_bio(p);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, cj_tls_no_passphrase, NULL) : NULL;
    int ok = k && SSL_CTX_use_PrivateKey(ctx, k) == 1;
    EVP_PKEY_free(k);
    BIO_free(b);
    return ok ? 1 : 0;
}

static int load_cert_key(SSL_CTX *ctx, const struct cj_tls_client_opts *o, struct cj_err *err)
{
    const char *cert = o->cert_pem ? o->cert_pem->name : o->cert_file;
    const char *key = o->key_pem ? o->key_pem->name : o->key_file;
    int ok = o->cert_pem ? use_chain_pem(ctx, o->cert_pem)
                         : cert && *cert && SSL_CTX_use_certificate_chain_file(ctx, cert) == 1;
    if (!ok) {
        fail_ctx(NULL, err, "cannot load certificate", cert);
        return -1;
    }
    /* SSL_FILETYPE_PEM reads both "RSA PRIVATE KEY" (PKCS#1) and "PRIVATE KEY" (PKCS#8). */
    ok = o->key_pem ? use_key_pem(ctx, o->key_pem) : key && *key && SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1;
    if (!ok) {
        fail_ctx(NULL, err, "cannot load private key", key);
        return -1;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        fail_ctx(NULL, err, "private key does not match the certificate in", cert);
        return -1;
    }
    return 0;
}

static int load_ca(SSL_CTX *ctx, const struct cj_tls_client_opts *o)
{
    if (o->ca_pem) return cj_tls_store_add_pem(SSL_CTX_get_cert_store(ctx), o->ca_pem) == 0;
    return o->ca_file && *o->ca_file && SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) == 1;
}

SSL_CTX *cj_tls_client_ctx(const struct cj_tls_client_opts *o, struct cj_err *err)
{
    if (o->mode != CJ_TLS_VERIFY && o->mode != CJ_TLS_MUTUAL) {
        cj_fail(err, CJ_E_INVALID, 0, "TLS: client mode must be tls or mtls");
        return NULL;
    }
    SSL_CTX *ctx = new_ctx(TLS_client_method(), err);
    if (!ctx) return NULL;
    SSL_CTX_set_default_passwd_cb(ctx, cj_tls_no_passphrase);
    /* The chain is verified against ca_file only: no system store, no
     * hostname check (NVFlare clients do the same, doc/protocol/cellnet.md §9). */
    if (!load_ca(ctx, o)) return fail_ctx(ctx, err, "cannot load CA file", o->ca_pem ? o->ca_pem->name : o->ca_file);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (o->mode == CJ_TLS_MUTUAL && load_cert_key(ctx, o, err) < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

SSL_CTX *cj_tls_server_ctx(const char *cert_file, const char *key_file, const char *ca_file,
                           bool require_client_cert, struct cj_err *err)
{
    SSL_CTX *ctx = new_ctx(TLS_server_method(), err);
    if (!ctx) return NULL;
    struct cj_tls_client_opts files = {.cert_file = cert_file, .key_file = key_file};
    if (load_cert_key(ctx, &files, err) < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (require_client_cert) {
        if (!ca_file || !*ca_file || SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1)
            return fail_ctx(ctx, err, "cannot load CA file", ca_file);
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca_file);
        if (names) SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    return ctx;
}

static int select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                     unsigned int inlen, void *arg)
{
    (void)ssl; (void)arg;
    static const unsigned char h2[] = "\x02h2";
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2 - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

void cj_tls_server_alpn_h2(SSL_CTX *ctx) { SSL_CTX_set_alpn_select_cb(ctx, select_h2, NULL); }

void cj_tls_ctx_free(SSL_CTX *ctx)
{
    if (ctx) SSL_CTX_free(ctx);
}

int cj_tls_cert_cn(const char *cert_file, char *cn, size_t n, struct cj_err *err)
{
    if (n) cn[0] = '\0';
    FILE *f = cert_file && *cert_file ? fopen(cert_file, "r") : NULL;
    if (!f) return cj_fail(err, CJ_E_INVALID, 0, "TLS: cannot open certificate %s", cert_file ? cert_file : "(not set)");
    ERR_clear_error();
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    int len = x ? X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, (int)n) : -1;
    X509_free(x);
    ERR_clear_error();
    if (!x) return cj_fail(err, CJ_E_INVALID, 0, "TLS: %s holds no PEM certificate", cert_file);
    if (len < 0) return cj_fail(err, CJ_E_INVALID, 0, "TLS: the certificate in %s has no CN", cert_file);
    return 0;
}

void cj_tls_describe(SSL *ssl, char *buf, size_t n)
{
    char cn[256] = "";
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    X509 *peer = SSL_get1_peer_certificate(ssl);
#else
    X509 *peer = SSL_get_peer_certificate(ssl);
#endif
    bool has_peer = peer != NULL;
    if (peer) {
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
        X509_free(peer);
    }
    snprintf(buf, n, "%s %s%s%s", SSL_get_version(ssl), SSL_get_cipher_name(ssl),
             has_peer ? ", peer CN=" : ", no peer certificate", cn);
}
