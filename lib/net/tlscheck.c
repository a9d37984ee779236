/* SPDX-License-Identifier: Apache-2.0 */
/* tlscheck.c — a client's TLS files (or their texts handed over in memory)
 * checked before anything connects. */
#include "net/tlscheck.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "net/tls.h"

struct ck {
    cj_tlscheck_report_fn report;
    void *arg;
    int n;
};

static void problem(struct ck *c, const char *which, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(struct ck *c, const char *which, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->report(c->arg, which, msg);
    c->n++;
}

/* The text of one setting: its file opened for reading, or the PEM text it
 * was handed as; NULL with the problem reported.  *name: what names it. */
static BIO *open_pem(struct ck *c, const char *which, const char *path, const struct cj_tls_pem *pem, const char **name)
{
    *name = pem ? pem->name : path;
    if (pem) {
        BIO *b = pem->len <= (size_t)INT32_MAX ? BIO_new_mem_buf(pem->text, (int)pem->len) : NULL;
        if (!b) problem(c, which, "%s: out of memory", pem->name);
        return b;
    }
    if (!path || !*path) {
        problem(c, which, "not set (needed for this connection_security)");
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) problem(c, which, "cannot read %s: %s", path, strerror(errno));
    BIO *b = f ? BIO_new_fp(f, BIO_CLOSE) : NULL;
    if (f && !b) fclose(f);
    return b;
}

static X509 *read_cert(struct ck *c, const char *which, const char *path, const struct cj_tls_pem *pem)
{
    const char *name;
    BIO *b = open_pem(c, which, path, pem, &name);
    if (!b) return NULL;
    X509 *x = PEM_read_bio_X509(b, NULL, cj_tls_no_passphrase, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (!x) problem(c, which, "%s holds no PEM certificate", name);
    return x;
}

/* notBefore <= now <= notAfter */
static void check_dates(struct ck *c, const char *which, const char *path, X509 *x)
{
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) problem(c, which, "the certificate in %s has expired", path);
    else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0)
        problem(c, which, "the certificate in %s is not valid yet (check the clock)", path);
}

/* The key's mode is checked on a file only: a key handed over as a
 * descriptor was opened by its sender, with the sender's rights. */
static EVP_PKEY *read_key(struct ck *c, const struct cj_tls_files *f)
{
    const char *name;
    BIO *b = open_pem(c, "key_file", f->key_file, f->key_pem, &name);
    if (!b) return NULL;
    FILE *fp = NULL;
    struct stat st;
    if (!f->certain_only && !f->key_pem && BIO_get_fp(b, &fp) == 1 && fstat(fileno(fp), &st) == 0 && (st.st_mode & 077))
        problem(c, "key_file", "%s is readable by %s (mode %04o): the private key must be owner-only (chmod 600)",
                name, st.st_mode & 007 ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, cj_tls_no_passphrase, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (!k) problem(c, "key_file", "%s holds no PEM private key (or one with a passphrase)", name);
    return k;
}

/* The leaf chains to the CA (the CA file's certificates are the only trust). */
static void check_chain(struct ck *c, const struct cj_tls_files *f, X509 *leaf)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    const char *ca = f->ca_pem ? f->ca_pem->name : f->ca_file, *cert = f->cert_pem ? f->cert_pem->name : f->cert_file;
    int loaded = store && (f->ca_pem ? cj_tls_store_add_pem(store, f->ca_pem) == 0 : X509_STORE_load_file(store, f->ca_file) == 1);
    if (!ctx || !loaded || X509_STORE_CTX_init(ctx, store, leaf, NULL) != 1) {
        ERR_clear_error();
        problem(c, "ca_file", "%s cannot be used as a CA file", ca);
    } else if (X509_verify_cert(ctx) != 1) {
        int e = X509_STORE_CTX_get_error(ctx);
        if (e != X509_V_ERR_CERT_HAS_EXPIRED && e != X509_V_ERR_CERT_NOT_YET_VALID)   /* said already */
            problem(c, "cert_file", "the certificate in %s does not chain to the CA in %s: %s", cert, ca,
                    X509_verify_cert_error_string(e));
    }
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
}

int cj_tls_check_files(const struct cj_tls_files *f, cj_tlscheck_report_fn report, void *arg)
{
    struct ck c = {report, arg, 0};
    bool all = !f->certain_only;
    const char *ca_name = f->ca_pem ? f->ca_pem->name : f->ca_file;
    const char *cert_name = f->cert_pem ? f->cert_pem->name : f->cert_file;
    const char *key_name = f->key_pem ? f->key_pem->name : f->key_file;
    X509 *ca = read_cert(&c, "ca_file", f->ca_file, f->ca_pem);
    if (ca && all) check_dates(&c, "ca_file", ca_name, ca);
    if (f->mutual) {
        X509 *cert = read_cert(&c, "cert_file", f->cert_file, f->cert_pem);
        EVP_PKEY *key = read_key(&c, f);
        if (cert && all) check_dates(&c, "cert_file", cert_name, cert);
        if (cert && key && X509_check_private_key(cert, key) != 1)
            problem(&c, "key_file", "the key in %s does not match the certificate in %s", key_name, cert_name);
        if (cert && ca && all) check_chain(&c, f, cert);
        ERR_clear_error();
        X509_free(cert);
        EVP_PKEY_free(key);
    }
    X509_free(ca);
    return c.n;
}
