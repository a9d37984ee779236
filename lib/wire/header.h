/* SPDX-License-Identifier: Apache-2.0 */
/* header.h — the cellnet header block of an SFM DATA frame (doc/protocol/cellnet.md §1, doc/protocol/sfm.md §2).
 *
 * The block is one msgpack map with str keys, at most 65 535 bytes.  The raw
 * block is the truth: a relay forwards it by copying each entry's bytes and
 * rewriting only cn__from, cn__to, cn__route and cn__send_time, so unknown keys
 * (x-app, client_name, __token__, project_name, cn__pass_through, ...) survive
 * byte for byte.  struct cj_hdr is a decoded *view* of the keys the relay uses.
 *
 * Ownership: cj_hdr_decode does not copy the block.  h->blk points into the
 * caller's buffer, and so do the cj_span fields and the route iterator; keep
 * the buffer alive (and unchanged) while using them.  Short strings (FQCNs,
 * channel, topic, ids, codes) are copied into NUL-terminated arrays bounded by
 * CJ_HDR_STR_MAX; they may not contain a NUL byte.
 *
 * Nothing here allocates while reading; writers append to a msgpack_sbuffer. */
#ifndef CJ_WIRE_HEADER_H
#define CJ_WIRE_HEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "util/err.h"
#include "util/mp.h"
#include "wire/fqcn.h"

#define CJ_HDR_MAX_LEN 65535          /* header_len is a u16 (doc/protocol/sfm.md §2) */
#define CJ_HDR_STR_MAX CJ_FQCN_MAX    /* bound of every copied header string */

enum cj_msg_type { CJ_MSG_NONE = 0, CJ_MSG_REQ, CJ_MSG_REPLY, CJ_MSG_RETURN };

/* Header keys the decoder understands.  Bit (1 << key) of cj_hdr.have says the
 * key is present.  Every other key is "unknown" and only kept raw. */
enum cj_hkey {
    CJ_HK_MSG_TYPE, CJ_HK_ORIGIN, CJ_HK_DESTINATION, CJ_HK_FROM, CJ_HK_TO, CJ_HK_ROUTE,
    CJ_HK_SEND_TIME, CJ_HK_CHANNEL, CJ_HK_TOPIC, CJ_HK_REQ_ID, CJ_HK_REPLY_EXPECTED,
    CJ_HK_OPTIONAL, CJ_HK_SECURE, CJ_HK_RETURN_CODE, CJ_HK_ERROR, CJ_HK_PAYLOAD_ENCODING,
    CJ_HK_PAYLOAD_LEN, CJ_HK_ORIGINAL_HEADERS, CJ_HK_RETURN_REASON, CJ_HK_PASS_THROUGH,
    CJ_HK_SM_ID, CJ_HK_SM_DT, CJ_HK_SM_SQ, CJ_HK_SM_OS, CJ_HK_SM_SZ, CJ_HK_SM_CS, CJ_HK_SM_WS,
    CJ_HK_SM_AI, CJ_HK_SM_RS, CJ_HK_SM_OP, CJ_HK_SM_CH, CJ_HK_SM_TP, CJ_HK_SM_PE, CJ_HK_SM_RI,
    CJ_HK_SM_EM, CJ_HK_SM_ET, CJ_HK_SM_FD,
    CJ_HK__COUNT,
    CJ_HK_UNKNOWN = -1,
};

#define CJ_HK_BIT(k) ((uint64_t)1 << (k))

/* sm__dt values (doc/protocol/streaming.md §2). */
enum { CJ_SM_CHUNK = 1, CJ_SM_FINAL = 2, CJ_SM_ACK = 3, CJ_SM_ERROR = 6 };

/* A byte range inside the block (for long texts and raw values). */
struct cj_span {
    const uint8_t *p;
    uint32_t len;
};

struct cj_hdr {
    const uint8_t *blk;      /* the raw block (not owned) */
    size_t len;
    uint32_t n_entries;      /* map pairs */
    uint64_t have;           /* CJ_HK_BIT(k) for every known key present */

    /* cellnet keys */
    enum cj_msg_type msg_type;                 /* required */
    char origin[CJ_HDR_STR_MAX + 1];           /* required, non-empty */
    char destination[CJ_HDR_STR_MAX + 1];      /* required, non-empty */
    char from[CJ_HDR_STR_MAX + 1];
    char to[CJ_HDR_STR_MAX + 1];
    char channel[CJ_HDR_STR_MAX + 1];
    char topic[CJ_HDR_STR_MAX + 1];
    char req_id[CJ_HDR_STR_MAX + 1];           /* str form, or the array's first element ("" if empty) */
    bool req_id_is_array;                      /* cn__req_id was an array of str (RETURN / some replies) */
    uint32_t req_id_count;                     /* elements when an array; 1 for the str form */
    struct cj_span req_id_raw;                 /* the raw value bytes of cn__req_id */
    bool reply_expected, optional, secure, pass_through;
    char return_code[CJ_HDR_STR_MAX + 1];
    char return_reason[CJ_HDR_STR_MAX + 1];
    char payload_encoding[CJ_HDR_STR_MAX + 1];
    struct cj_span error;                      /* cn__error text (unbounded, not copied) */
    struct cj_span original_headers;           /* raw map bytes of cn__original_headers */
    int64_t payload_len;                       /* >= 0 */
    double send_time;                          /* float or int on the wire */
    uint32_t route_n;                          /* cn__route entries (0 when absent) */
    struct cj_span route;                      /* raw bytes of the cn__route array (header included) */

    /* streaming keys (doc/protocol/streaming.md §2) */
    uint64_t sm_id;          /* sm__id as sent; when sm_id_neg it is the two's complement of a negative int */
    bool sm_id_neg;
    int64_t sm_dt, sm_cs, sm_ws, sm_ai;
    int64_t sm_sq, sm_os, sm_sz;               /* >= 0 */
    bool sm_rs, sm_op;
    char sm_ch[CJ_HDR_STR_MAX + 1];
    char sm_tp[CJ_HDR_STR_MAX + 1];
    char sm_pe[CJ_HDR_STR_MAX + 1];
    char sm_ri[CJ_HDR_STR_MAX + 1];
    char sm_et[CJ_HDR_STR_MAX + 1];
    char sm_fd[CJ_HDR_STR_MAX + 1];
    struct cj_span sm_em;                      /* error text (unbounded, not copied) */
};

static inline bool cj_hdr_has(const struct cj_hdr *h, enum cj_hkey k)
{
    return (h->have & CJ_HK_BIT(k)) != 0;
}

/* ---- reading --------------------------------------------------------------- */

/* Decodes blk[0..len) into h.  Strict: one map, str keys, nothing after it;
 * known keys have their types (sm__id etc. ints, never float/bool; FQCNs str
 * <= CJ_HDR_STR_MAX without NUL; route entries [str, number]); no known key
 * twice; cn__msg_type (req/reply/return), cn__origin and cn__destination
 * present.  Returns 0 or -cj_errc with err naming the key and the offset
 * (relative to blk).  Allocates nothing. */
int cj_hdr_decode(struct cj_hdr *h, const uint8_t *blk, size_t len, struct cj_err *err);

/* Key name of a known key; the key of a name (CJ_HK_UNKNOWN if not known). */
const char *cj_hkey_name(enum cj_hkey k);
enum cj_hkey cj_hkey_lookup(const uint8_t *name, uint32_t len);

const char *cj_msg_type_name(enum cj_msg_type t);

/* Walks the map's entries in order (over a decoded h). */
struct cj_hdr_entry {
    const uint8_t *key;      /* key text */
    uint32_t key_len;
    enum cj_hkey hk;         /* CJ_HK_UNKNOWN for keys the decoder does not know */
    struct cj_span raw;      /* key + value bytes */
    struct cj_span val;      /* value bytes */
};
struct cj_hdr_iter {
    struct mp_cur c;
    uint32_t left;
};
void cj_hdr_iter_init(struct cj_hdr_iter *it, const struct cj_hdr *h);
/* 1 = *e filled, 0 = end, <0 = error (only on a block that did not decode). */
int cj_hdr_iter_next(struct cj_hdr_iter *it, struct cj_hdr_entry *e, struct cj_err *err);

/* Walks cn__route entries in order. */
struct cj_route_iter {
    struct mp_cur c;
    uint32_t left;
};
void cj_route_iter_init(struct cj_route_iter *it, const struct cj_hdr *h);
/* 1 = fqcn/len/time filled (fqcn points into the block, not NUL-ended), 0 = end. */
int cj_route_iter_next(struct cj_route_iter *it, const uint8_t **fqcn, uint32_t *len, double *time);

/* True when fqcn is the first element of some cn__route entry. */
bool cj_hdr_route_has(const struct cj_hdr *h, const char *fqcn);

/* Loop protection (doc/protocol/cellnet.md §6): true when sending h to next hop H must be
 * refused, i.e. H != cn__destination and H is already on the route. */
bool cj_hdr_loop_refused(const struct cj_hdr *h, const char *next_hop);

/* Compares the decoded fields of a and b (not blk pointers; spans by content).
 * Used by the round-trip tests. */
bool cj_hdr_same_fields(const struct cj_hdr *a, const struct cj_hdr *b);

/* ---- forwarding ------------------------------------------------------------ */

/* The forwarder's rewrite (doc/protocol/cellnet.md §6 step 2-4).  Appends to out a copy of
 * blk with, in place: cn__from = me, cn__to = next_hop, cn__send_time =
 * send_time (cb float64), and [me, route_time] (92 <str> cb <double>) appended
 * to cn__route (array header grown minimally).  Every other entry's bytes are
 * copied as they are, in order.  Missing cn__from / cn__to / cn__route /
 * cn__send_time are appended at the end, in that order.  The block must be a
 * map with str keys and nothing after it; none of the four keys may appear
 * twice.  A result over CJ_HDR_MAX_LEN fails with CJ_E_LIMIT (the message is
 * unroutable).  On error out is left as it was. */
int cj_hdr_forward(const uint8_t *blk, size_t len, const char *me, const char *next_hop, double route_time,
                   double send_time, msgpack_sbuffer *out, struct cj_err *err);

/* ---- building headers the relay originates ----------------------------------- */

/* A header map under construction.  Entries go to an internal buffer in the
 * order added; cj_hb_finish writes the (minimal) map header and the entries.
 * Errors are sticky: after the first failure every call returns it again, so a
 * caller may add many entries and check once at cj_hb_finish.  A known key
 * added twice is an error; cj_hb_cellnet writes only the cellnet keys not yet
 * added, so a key added earlier keeps its position and value (like Python's
 * dict.update on an existing key, minus the value change). */
struct cj_hb {
    msgpack_sbuffer body;
    msgpack_packer pk;
    uint32_t n;
    uint64_t have;
    int rc;
    struct cj_err err;
};

void cj_hb_init(struct cj_hb *b);
void cj_hb_destroy(struct cj_hb *b);
int cj_hb_str(struct cj_hb *b, const char *key, const char *val);
int cj_hb_strn(struct cj_hb *b, const char *key, const void *val, size_t len);
int cj_hb_int(struct cj_hb *b, const char *key, int64_t val);
int cj_hb_uint(struct cj_hb *b, const char *key, uint64_t val);
int cj_hb_bool(struct cj_hb *b, const char *key, bool val);
int cj_hb_float(struct cj_hb *b, const char *key, double val);
/* key + a value given as its raw msgpack bytes (copied verbatim, not checked). */
int cj_hb_raw(struct cj_hb *b, const char *key, const void *val, size_t len);
/* cn__route = [[fqcn, t]] */
int cj_hb_route1(struct cj_hb *b, const char *fqcn, double t);
/* Copies h's entries raw, in order, except known keys whose bit is in skip. */
int cj_hb_copy_entries(struct cj_hb *b, const struct cj_hdr *h, uint64_t skip);

/* The cellnet keys of a message the relay originates (doc/protocol/cellnet.md §2). */
struct cj_hdr_msg {
    enum cj_msg_type type;        /* CJ_MSG_REQ or CJ_MSG_REPLY */
    const char *me;               /* cn__origin = cn__from = cn__route[0][0] */
    const char *to;               /* next hop */
    const char *destination;
    const char *channel, *topic;
    const char *req_id;           /* NULL: no cn__req_id (stream chunks and ACKs) */
    const char *return_code;      /* replies: written (NULL = "ok"); requests: ignored */
    bool reply_expected;          /* requests only */
    bool optional, secure;
    const char *payload_encoding; /* NULL = "none" */
    int64_t payload_len;          /* < 0: not written (e.g. a chunk that added it earlier) */
    double route_time;            /* time in the cn__route entry */
    double send_time;             /* cn__send_time */
};

/* Appends the cellnet keys not yet added, in the captured orders:
 *   reply (cap05, cap74): return_code secure optional channel topic from to origin
 *                         destination req_id msg_type route payload_encoding payload_len send_time
 *   request with req_id (cap02, cap73): topic channel destination req_id reply_expected secure
 *                         optional from to origin msg_type route payload_encoding payload_len send_time
 *   request without req_id (stream chunk cap06, ACK cap07): reply_expected optional secure topic
 *                         channel destination from to origin msg_type route payload_encoding
 *                         payload_len send_time
 * Application and sm__* keys go first (add them before calling this). */
int cj_hb_cellnet(struct cj_hb *b, const struct cj_hdr_msg *m);

/* Appends the finished map to out; fails with CJ_E_LIMIT over CJ_HDR_MAX_LEN
 * (out then unchanged).  Returns the sticky error if any entry failed. */
int cj_hb_finish(struct cj_hb *b, msgpack_sbuffer *out, struct cj_err *err);

/* The RETURN header (doc/protocol/cellnet.md §2) for the undeliverable request orig
 * (decoded from the block as held when forwarding failed): cn__return_code
 * "comm_error", cn__error "cannot forward", cn__original_headers = orig->blk
 * copied verbatim, cn__from me, cn__to to (the neighbour it came from),
 * cn__origin me, cn__destination orig->origin, cn__req_id [orig's raw
 * cn__req_id str] ([""] if it had none; an array of str is copied as it is),
 * cn__msg_type "return", cn__route
 * [[me, now]], cn__return_reason "cant_forward", cn__payload_encoding "none",
 * cn__payload_len 0, cn__send_time now.  No channel/topic/reply_expected/
 * secure/optional.  Key order follows NVFlare's _forward_message.  Appends to
 * out; CJ_E_LIMIT when the result exceeds CJ_HDR_MAX_LEN. */
int cj_hdr_build_return(const struct cj_hdr *orig, const char *me, const char *to, double now,
                        msgpack_sbuffer *out, struct cj_err *err);

/* Re-encodes h from its decoded fields in the block's key order (unknown
 * entries copied raw; route entries re-encoded as [str, float64]).  Decoding
 * the result gives the same fields (cj_hdr_same_fields).  Appends to out. */
int cj_hdr_encode(const struct cj_hdr *h, msgpack_sbuffer *out, struct cj_err *err);

#endif
