/* SPDX-License-Identifier: Apache-2.0 */
/* tls.h — OpenSSL contexts for stcp links (doc/protocol/cellnet.md §9).
 *
 * Client (the relay's upstream):
 *   tls   verify the server chain against ca_file ONLY (not the system
 *         store), no hostname check, no SNI, TLS >= 1.2, no client cert;
 *   mtls  the same, plus cert_file/key_file as the client certificate (a key
 *         in either PEM form: "BEGIN RSA PRIVATE KEY" or "BEGIN PRIVATE KEY").
 * Server (cjrelay-sim and the tests): server cert/key, TLS >= 1.2, and with
 * require_client_cert a client certificate signed by ca_file.
 *
 * No extended key usage is required (provisioned FLARE certificates carry
 * none).  Handshake time is bounded by the link (cj_link_cfg.handshake_timeout).
 * Failures carry OpenSSL's error queue text in err->msg. */
#ifndef CJ_NET_TLS_H
#define CJ_NET_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

#include "util/err.h"

enum cj_tls_mode { CJ_TLS_OFF = 0, CJ_TLS_VERIFY = 1, CJ_TLS_MUTUAL = 2 };   /* clear, tls, mtls */

/* A TLS file's text already in memory (a file handed over as an open
 * descriptor, ops/jobs.c): PEM, len bytes; name stands for it in messages
 * ("fd:/srv/flare/site-1/startup/client.key"). */
struct cj_tls_pem {
    const char *text;
    size_t len;
    const char *name;
};

struct cj_tls_client_opts {
    int mode;                  /* CJ_TLS_VERIFY or CJ_TLS_MUTUAL */
    const char *ca_file;       /* required */
    const char *cert_file;     /* mtls only */
    const char *key_file;      /* mtls only */
    /* Each, when set, is loaded in place of the file of the same role (no path is opened). */
    const struct cj_tls_pem *ca_pem, *cert_pem, *key_pem;
};

/* A client context, or NULL with err naming the file (or the PEM's name) and OpenSSL's reason. */
SSL_CTX *cj_tls_client_ctx(const struct cj_tls_client_opts *o, struct cj_err *err);

/* A server context.  ca_file may be NULL when !require_client_cert. */
SSL_CTX *cj_tls_server_ctx(const char *cert_file, const char *key_file, const char *ca_file,
                           bool require_client_cert, struct cj_err *err);

void cj_tls_ctx_free(SSL_CTX *ctx);

/* A server context answers ALPN with h2 (the grpcs scheme: gRPC clients
 * refuse a server that does not). */
void cj_tls_server_alpn_h2(SSL_CTX *ctx);

/* Drains this thread's OpenSSL error queue into buf as "reason; reason"
 * (OpenSSL's own text, e.g. "tlsv1 alert unknown ca").  Returns the length
 * written (0: the queue was empty). */
size_t cj_tls_drain_errors(char *buf, size_t n);

/* Formats one packed OpenSSL error code (ERR_get_error,
 * ERR_peek_error) as "lib: reason". */
void cj_tls_error_text(unsigned long code, char *buf, size_t n);

/* A hint for an alert the peer sent, from OpenSSL's reason text; NULL when
 * there is nothing to add.  E.g. "unknown ca" -> "the peer does not trust our
 * certificate (signed by a CA it does not know)". */
const char *cj_tls_alert_hint(const char *reason_text);

/* Every certificate and CRL of a PEM text into store, as loading it as a CA
 * file would.  0, or -1 when it holds no certificate. */
int cj_tls_store_add_pem(X509_STORE *store, const struct cj_tls_pem *pem);

/* A passphrase callback that gives none: an encrypted key fails to load
 * instead of prompting on a terminal. */
int cj_tls_no_passphrase(char *buf, int size, int rwflag, void *u);

/* The subject CN of the first certificate in cert_file (PEM) into cn.  0, or
 * -CJ_E_INVALID with err naming the file (unreadable, not PEM, no CN). */
int cj_tls_cert_cn(const char *cert_file, char *cn, size_t n, struct cj_err *err);

/* "TLSv1.3 TLS_AES_256_GCM_SHA384, peer CN=server" for an established ssl. */
void cj_tls_describe(SSL *ssl, char *buf, size_t n);

#endif
