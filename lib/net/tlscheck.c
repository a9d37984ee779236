/* tlscheck.c — a client's TLS files checked before anything connects. */
#include "net/tlscheck.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

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

/* The file opened for reading, or NULL with the problem reported. */
static FILE *open_file(struct ck *c, const char *which, const char *path)
{
    if (!path || !*path) {
        problem(c, which, "not set (needed for this connection_security)");
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) problem(c, which, "cannot read %s: %s", path, strerror(errno));
    return f;
}

static X509 *read_cert(struct ck *c, const char *which, const char *path)
{
    FILE *f = open_file(c, which, path);
    if (!f) return NULL;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    ERR_clear_error();
    if (!x) problem(c, which, "%s holds no PEM certificate", path);
    return x;
}

/* notBefore <= now <= notAfter */
static void check_dates(struct ck *c, const char *which, const char *path, X509 *x)
{
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) problem(c, which, "the certificate in %s has expired", path);
    else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0)
        problem(c, which, "the certificate in %s is not valid yet (check the clock)", path);
}

static EVP_PKEY *read_key(struct ck *c, const char *path, bool certain_only)
{
    FILE *f = open_file(c, "key_file", path);
    if (!f) return NULL;
    struct stat st;
    if (!certain_only && fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        problem(c, "key_file", "%s is readable by %s (mode %04o): the private key must be owner-only (chmod 600)",
                path, st.st_mode & 007 ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    ERR_clear_error();
    if (!k) problem(c, "key_file", "%s holds no PEM private key (or one with a passphrase)", path);
    return k;
}

/* The leaf chains to the CA (the CA file's certificates are the only trust). */
static void check_chain(struct ck *c, const struct cj_tls_files *f, X509 *leaf)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    if (!store || !ctx || X509_STORE_load_file(store, f->ca_file) != 1 || X509_STORE_CTX_init(ctx, store, leaf, NULL) != 1) {
        ERR_clear_error();
        problem(c, "ca_file", "%s cannot be used as a CA file", f->ca_file);
    } else if (X509_verify_cert(ctx) != 1) {
        int e = X509_STORE_CTX_get_error(ctx);
        if (e != X509_V_ERR_CERT_HAS_EXPIRED && e != X509_V_ERR_CERT_NOT_YET_VALID)   /* said already */
            problem(c, "cert_file", "the certificate in %s does not chain to the CA in %s: %s", f->cert_file,
                    f->ca_file, X509_verify_cert_error_string(e));
    }
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
}

int cj_tls_check_files(const struct cj_tls_files *f, cj_tlscheck_report_fn report, void *arg)
{
    struct ck c = {report, arg, 0};
    bool all = !f->certain_only;
    X509 *ca = read_cert(&c, "ca_file", f->ca_file);
    if (ca && all) check_dates(&c, "ca_file", f->ca_file, ca);
    if (f->mutual) {
        X509 *cert = read_cert(&c, "cert_file", f->cert_file);
        EVP_PKEY *key = read_key(&c, f->key_file, f->certain_only);
        if (cert && all) check_dates(&c, "cert_file", f->cert_file, cert);
        if (cert && key && X509_check_private_key(cert, key) != 1)
            problem(&c, "key_file", "the key in %s does not match the certificate in %s", f->key_file, f->cert_file);
        if (cert && ca && all) check_chain(&c, f, cert);
        ERR_clear_error();
        X509_free(cert);
        EVP_PKEY_free(key);
    }
    X509_free(ca);
    return c.n;
}
