/* SPDX-License-Identifier: Apache-2.0 */
/* capi.h — Client API message bodies, relay <-> worker (doc/protocol/fl-protocols.md §7).
 *
 * Pure codecs, no sockets.  Every body is a plain FOBS map carried as a LOBS
 * payload; encoders append a whole payload (MAIN section only) to a
 * msgpack_sbuffer, with keys in the order NVFlare sends them (byte-identical to
 * vectors 20-28).  Decoders take a whole payload (cj_lobs_validate rules),
 * never allocate, and fill one struct cj_capi_msg.
 *
 * Requests are told apart by the cell topic, replies by their reply_topic
 * (except the shutdown reply, which has none), so a request is decoded with
 * the kind its topic names and a reply with the kind of the request it answers.
 *
 * Decoding rules:
 *  - the body must be a map (else CJ_E_TYPE: NVFlare answers cell rc
 *    invalid_request); extra keys are tolerated and skipped, non-str keys too;
 *    a duplicate key keeps its last value, as Python's dict does;
 *  - copied strings must be valid UTF-8 without NUL and fit their buffer
 *    (CJ_E_LIMIT otherwise); reasons are cut to CJ_CAPI_REASON_MAX_CHARS
 *    characters (reason_cut tells) rather than refused;
 *  - each kind's required keys must be present with the right type
 *    (CJ_E_MISSING / CJ_E_TYPE), except HELLO: its decoder accepts anything
 *    map-shaped and records what it found, because the relay must answer a bad
 *    HELLO with hello_rejected and NVFlare's reason (cj_capi_check_hello), not
 *    with an error.
 *
 * Encoders refuse what the decoders would refuse (NULL or over-long or
 * non-UTF-8 strings: CJ_E_INVALID / CJ_E_LIMIT), so anything written here reads
 * back; reasons longer than CJ_CAPI_REASON_MAX_CHARS characters are cut.  On
 * failure an encoder leaves sb as it was. */
#ifndef CJ_FL_CAPI_H
#define CJ_FL_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"

#define CJ_CAPI_CHANNEL "client_api"
#define CJ_CAPI_PROTOCOL_VERSION 1

/* Request topics (cell topic on channel client_api). */
#define CJ_CAPI_T_HELLO "client_api.hello"
#define CJ_CAPI_T_SESSION_READY "client_api.session_ready"
#define CJ_CAPI_T_TASK_READY "client_api.task_ready"
#define CJ_CAPI_T_RESULT_READY "client_api.result_ready"
#define CJ_CAPI_T_SETTLED "client_api.result_source_settled"
#define CJ_CAPI_T_HEARTBEAT "client_api.heartbeat"
#define CJ_CAPI_T_LOG "client_api.log"
#define CJ_CAPI_T_ABORT "client_api.abort"
#define CJ_CAPI_T_SHUTDOWN "client_api.shutdown"

/* The enum wrapper of client_api.log's data_type. */
#define CJ_CAPI_ANALYTICS_TYPE "nvflare.apis.analytix.AnalyticsDataType"
#define CJ_CAPI_ENUM_DC "nvflare.fuel.utils.fobs.decomposer.EnumTypeDecomposer"

/* Limits (bytes, NUL excluded, unless said otherwise). */
#define CJ_CAPI_ID_MAX 255            /* session_id, task_id, task_name, job_id, site_name, fqcn */
#define CJ_CAPI_TOKEN_MAX 2047        /* proof, auth_token, auth_token_signature */
#define CJ_CAPI_REASON_MAX_CHARS 1024 /* reasons are cut to this many characters */
#define CJ_CAPI_REASON_BUF (4 * CJ_CAPI_REASON_MAX_CHARS + 1)
#define CJ_CAPI_RANK_MAX 31           /* str(rank) */
#define CJ_CAPI_LOG_KEY_MAX 255       /* log key and extra key names */
#define CJ_CAPI_LOG_STR_MAX 1023      /* a str log value */
#define CJ_CAPI_DATA_TYPE_MAX 63      /* AnalyticsDataType member name */
#define CJ_CAPI_LOG_MAX_EXTRAS 8      /* extra scalar keys kept from one log message */
#define CJ_CAPI_SESSION_ID_LEN 32     /* 32 lower-case hex */

enum cj_capi_kind {
    CJ_CAPI_NONE = 0,
    /* requests */
    CJ_CAPI_HELLO,
    CJ_CAPI_SESSION_READY,
    CJ_CAPI_TASK_READY,
    CJ_CAPI_RESULT_READY,
    CJ_CAPI_SETTLED,           /* result_source_settled */
    CJ_CAPI_HEARTBEAT,
    CJ_CAPI_LOG,               /* fire-and-forget */
    CJ_CAPI_ABORT,             /* fire-and-forget */
    CJ_CAPI_SHUTDOWN,
    /* replies */
    CJ_CAPI_HELLO_ACCEPTED,
    CJ_CAPI_HELLO_REJECTED,
    CJ_CAPI_SESSION_READY_REPLY,
    CJ_CAPI_ERROR,             /* client_api.error */
    CJ_CAPI_TASK_ACCEPTED,
    CJ_CAPI_TASK_FAILED,
    CJ_CAPI_RESULT_ACCEPTED,
    CJ_CAPI_RESULT_REJECTED,
    CJ_CAPI_SETTLED_REPLY,
    CJ_CAPI_HEARTBEAT_REPLY,
    CJ_CAPI_SHUTDOWN_REPLY,    /* {result_source_live}, no reply_topic */
    CJ_CAPI_KIND_COUNT
};

/* A typed scalar (log value and extras; HELLO's protocol_version). */
enum cj_capi_vtype { CJ_CAPI_V_NONE = 0, CJ_CAPI_V_INT, CJ_CAPI_V_UINT, CJ_CAPI_V_FLOAT, CJ_CAPI_V_STR, CJ_CAPI_V_BOOL };

struct cj_capi_value {
    enum cj_capi_vtype type;
    int64_t i;                           /* V_INT */
    uint64_t u;                          /* V_UINT: only values above INT64_MAX */
    double f;                            /* V_FLOAT (float32 widened) */
    bool b;                              /* V_BOOL */
    char s[CJ_CAPI_LOG_STR_MAX + 1];     /* V_STR */
};

/* The text of v as Python's repr() (repr) or str() prints it; the two differ
 * only for a str, quoted and escaped by repr(). */
void cj_capi_value_text(const struct cj_capi_value *v, bool repr, char *out, size_t n);

struct cj_capi_extra {
    char name[CJ_CAPI_LOG_KEY_MAX + 1];
    struct cj_capi_value v;
};

/* Which keys a decoded message had (valid ones; HELLO: present with a usable type). */
#define CJ_CAPI_F_SESSION_ID (1u << 0)
#define CJ_CAPI_F_TASK_ID (1u << 1)
#define CJ_CAPI_F_TASK_NAME (1u << 2)
#define CJ_CAPI_F_JOB_ID (1u << 3)
#define CJ_CAPI_F_SITE_NAME (1u << 4)
#define CJ_CAPI_F_TRAINER_FQCN (1u << 5)
#define CJ_CAPI_F_REASON (1u << 6)
#define CJ_CAPI_F_PROOF (1u << 7)
#define CJ_CAPI_F_PROTOCOL_VERSION (1u << 8)
#define CJ_CAPI_F_RANK (1u << 9)
#define CJ_CAPI_F_HB_INTERVAL (1u << 10)
#define CJ_CAPI_F_HB_TIMEOUT (1u << 11)
#define CJ_CAPI_F_SECURE_MODE (1u << 12)
#define CJ_CAPI_F_AUTH_TOKEN (1u << 13)
#define CJ_CAPI_F_AUTH_SIGNATURE (1u << 14)
#define CJ_CAPI_F_SOURCE_LIVE (1u << 15)
#define CJ_CAPI_F_BODY (1u << 16)      /* task_ready model / result_ready result */
#define CJ_CAPI_F_KEY (1u << 17)
#define CJ_CAPI_F_VALUE (1u << 18)
#define CJ_CAPI_F_DATA_TYPE (1u << 19)

/* One Client API body, any kind.  ~25 KB: keep it off small stacks. */
struct cj_capi_msg {
    enum cj_capi_kind kind;
    uint32_t has;                                  /* CJ_CAPI_F_* */
    uint32_t bad;                                  /* HELLO: keys present with an unusable value */
    char session_id[CJ_CAPI_ID_MAX + 1];
    char task_id[CJ_CAPI_ID_MAX + 1];
    char task_name[CJ_CAPI_ID_MAX + 1];            /* task_ready */
    char job_id[CJ_CAPI_ID_MAX + 1];               /* hello, hello_accepted */
    char site_name[CJ_CAPI_ID_MAX + 1];
    char trainer_fqcn[CJ_CAPI_ID_MAX + 1];         /* hello */
    char reason[CJ_CAPI_REASON_BUF];
    bool reason_cut;                               /* reason was longer and got cut */
    /* hello */
    char proof[CJ_CAPI_TOKEN_MAX + 1];
    struct cj_capi_value protocol_version;         /* as sent (Python compares with ==) */
    char rank[CJ_CAPI_RANK_MAX + 1];               /* str(rank): str as is, int in decimal */
    bool rank_is_str;                              /* rank was sent as a str (for the reason's repr) */
    /* hello_accepted */
    double heartbeat_interval, heartbeat_timeout;  /* ints widened */
    bool secure_mode;
    char auth_token[CJ_CAPI_TOKEN_MAX + 1];
    char auth_token_signature[CJ_CAPI_TOKEN_MAX + 1];
    /* heartbeat request, shutdown reply */
    bool result_source_live;
    /* task_ready model / result_ready result: the raw msgpack map, pointing into
     * the decoder's input (for the encoder: copied verbatim). */
    const uint8_t *body;
    size_t body_len;
    size_t body_off;                               /* decoded: offset in the payload */
    /* log */
    char key[CJ_CAPI_LOG_KEY_MAX + 1];
    struct cj_capi_value value;
    char data_type[CJ_CAPI_DATA_TYPE_MAX + 1];     /* enum member name, e.g. "SCALAR" */
    size_t n_extras;
    struct cj_capi_extra extras[CJ_CAPI_LOG_MAX_EXTRAS]; /* other scalar keys, in order */
    uint32_t n_dropped;                            /* extra keys not kept (non-scalar, over the bound) */
};

/* ---- names ------------------------------------------------------------------- */

/* Request kind of a cell topic ("client_api.hello" -> CJ_CAPI_HELLO), CJ_CAPI_NONE if unknown. */
enum cj_capi_kind cj_capi_kind_from_topic(const char *topic);
/* Request kinds: the cell topic.  Reply kinds: the reply_topic value (NULL for
 * CJ_CAPI_SHUTDOWN_REPLY).  NULL for anything else. */
const char *cj_capi_topic(enum cj_capi_kind kind);
/* Short name for logs ("hello_accepted"), never NULL. */
const char *cj_capi_kind_name(enum cj_capi_kind kind);

/* ---- decoding ------------------------------------------------------------------ */

/* A request body; kind from cj_capi_kind_from_topic.  m->kind = kind. */
int cj_capi_decode_request(enum cj_capi_kind kind, const uint8_t *payload, size_t len, struct cj_capi_msg *m,
                           struct cj_err *err);

/* The reply to a request of kind `request`: reads reply_topic and accepts only
 * the replies that request can get (hello: hello_accepted / hello_rejected;
 * session_ready, result_source_settled, heartbeat: their reply or
 * client_api.error; task_ready: task_accepted / task_failed / error;
 * result_ready: result_accepted / result_rejected / error; shutdown: the
 * {result_source_live} body).  m->kind = the reply's kind.  An unexpected
 * reply_topic is CJ_E_INVALID. */
int cj_capi_decode_reply(enum cj_capi_kind request, const uint8_t *payload, size_t len, struct cj_capi_msg *m,
                         struct cj_err *err);

/* ---- checks ---------------------------------------------------------------------- */

/* What the relay expects of a HELLO (doc/protocol/fl-protocols.md §7 order 1-6). */
struct cj_capi_hello_expect {
    bool active;               /* there is an active launch / expected-worker record */
    const char *origin;        /* the request's cn__origin ("" if absent) */
    const char *trainer_fqcn;  /* the prescribed FQCN */
    const char *launch_token;  /* compared in constant time; empty never matches */
    const char *job_id;
    const char *site_name;
};

/* Runs checks 1-6 on a decoded HELLO.  Returns 0 to accept (step 7, the session
 * id, is the caller's: a duplicate HELLO gets the same id), else the number of
 * the failed step with NVFlare's reason in reason ("no active trainer launch",
 * "unexpected trainer identity (origin='…', claimed='…')", "launch token
 * mismatch", "unsupported protocol version 2 (expect 1)", "job id mismatch:
 * '…'", "site name mismatch: '…'", "only rank 0 may connect (got rank 1)").
 * The reason never contains the token. */
int cj_capi_check_hello(const struct cj_capi_msg *hello, const struct cj_capi_hello_expect *x, char *reason,
                        size_t reasonsz);

/* The stock trainer's checks of hello_accepted: session_id non-empty;
 * heartbeat_interval finite > 0; heartbeat_timeout finite >= 0; interval <
 * timeout when timeout > 0; secure_mode present and == secure_mode; in secure
 * mode auth_token and auth_token_signature non-empty and not "NA".  0 or -1
 * with why filled. */
int cj_capi_check_hello_accepted(const struct cj_capi_msg *m, bool secure_mode, char *why, size_t whysz);

/* Constant-time equality of a presented token with the expected one (time
 * depends only on the expected length).  An empty expected token never matches. */
bool cj_capi_token_equal(const char *presented, size_t presented_len, const char *expected);

/* A fresh session id: 32 lower-case hex from getrandom (out: 33 bytes).  0 or -1. */
int cj_capi_new_session_id(char out[CJ_CAPI_SESSION_ID_LEN + 1]);

/* ---- encoding -------------------------------------------------------------------- */

/* Writes m as its kind's body (keys in NVFlare's order; optional keys when
 * their CJ_CAPI_F_* bit is set; HELLO: only the keys whose bits are set).
 * TASK_READY / RESULT_READY write the envelope with m->body copied verbatim; the
 * caller appends the datum sections the body refers to. */
int cj_capi_encode(msgpack_sbuffer *sb, const struct cj_capi_msg *m, struct cj_err *err);

/* The same for the usual cases (strings required unless said "may be NULL"). */
int cj_capi_encode_hello(msgpack_sbuffer *sb, const char *trainer_fqcn, const char *proof, const char *job_id,
                         const char *site_name, struct cj_err *err);
int cj_capi_encode_hello_accepted(msgpack_sbuffer *sb, const char *session_id, const char *job_id,
                                  const char *site_name, double heartbeat_interval, double heartbeat_timeout,
                                  bool secure_mode, const char *auth_token /* may be NULL */,
                                  const char *auth_token_signature /* may be NULL */, struct cj_err *err);
int cj_capi_encode_hello_rejected(msgpack_sbuffer *sb, const char *reason, struct cj_err *err);
int cj_capi_encode_session_ready(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err);
int cj_capi_encode_session_ready_reply(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err);
int cj_capi_encode_error(msgpack_sbuffer *sb, const char *reason, struct cj_err *err);
int cj_capi_encode_task_ready(msgpack_sbuffer *sb, const char *session_id, const char *task_id,
                              const char *task_name, const uint8_t *model, size_t model_len, struct cj_err *err);
int cj_capi_encode_task_accepted(msgpack_sbuffer *sb, const char *task_id, struct cj_err *err);
int cj_capi_encode_task_failed(msgpack_sbuffer *sb, const char *task_id /* may be NULL */, const char *reason,
                               struct cj_err *err);
int cj_capi_encode_result_ready(msgpack_sbuffer *sb, const char *session_id, const char *task_id,
                                const uint8_t *result, size_t result_len, struct cj_err *err);
int cj_capi_encode_result_accepted(msgpack_sbuffer *sb, struct cj_err *err);
int cj_capi_encode_result_rejected(msgpack_sbuffer *sb, const char *reason, struct cj_err *err);
int cj_capi_encode_settled(msgpack_sbuffer *sb, const char *session_id, const char *task_id, struct cj_err *err);
int cj_capi_encode_settled_reply(msgpack_sbuffer *sb, const char *task_id, struct cj_err *err);
int cj_capi_encode_heartbeat(msgpack_sbuffer *sb, const char *session_id, bool result_source_live,
                             struct cj_err *err);
int cj_capi_encode_heartbeat_reply(msgpack_sbuffer *sb, const char *session_id, struct cj_err *err);
int cj_capi_encode_log(msgpack_sbuffer *sb, const char *session_id, const char *key,
                       const struct cj_capi_value *value, const char *data_type,
                       const struct cj_capi_extra *extras, size_t n_extras, struct cj_err *err);
int cj_capi_encode_abort(msgpack_sbuffer *sb, const char *session_id, const char *reason, struct cj_err *err);
int cj_capi_encode_shutdown(msgpack_sbuffer *sb, const char *session_id, const char *reason, struct cj_err *err);
int cj_capi_encode_shutdown_reply(msgpack_sbuffer *sb, bool result_source_live, struct cj_err *err);

#endif
