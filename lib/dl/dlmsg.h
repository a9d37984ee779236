/* SPDX-License-Identifier: Apache-2.0 */
/* dlmsg.h — download-service messages (doc/protocol/download.md §2-§3), pure codecs.
 *
 * Encoders append whole LOBS payloads to a msgpack_sbuffer, keys in NVFlare's
 * order (byte-identical to vectors 30-37 and tool_wire_examples.txt); on
 * failure sb is left as it was.  Decoders take a whole payload (cj_lobs_validate
 * rules), never allocate, and report raw values as spans (offsets into the
 * decoder's input) so a state can be echoed verbatim and item bytes consumed
 * in place.
 *
 * Data replies with big items: an item of CJ_DL_DATUM_MIN (10 MiB) or more is
 * not written inline but as a DatumRef wrapper in `data` plus a BLOB datum
 * section (`66 00 <16+L> <id> <bytes>`) after the MAIN section, as NVFlare does.
 * cj_dl_plan_data_reply writes only the framing and returns the payload as a
 * list of pieces (framing bytes in an sbuffer, item bytes by reference, by item
 * index), so a producer can hand item bytes to an evbuffer by reference or
 * from a file without assembling one contiguous copy. */
#ifndef CJ_DL_DLMSG_H
#define CJ_DL_DLMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "payload/fobs.h"   /* struct cj_range */
#include "util/err.h"

#define CJ_DL_CHANNEL "download_service__"
#define CJ_DL_TOPIC "download_service__download"              /* pull, confirm, cancel */
#define CJ_DL_TOPIC_SOURCE_FAILURE "download_service__source_failure"

#define CJ_DL_MAX_CHUNK 2097152u        /* default max_chunk (2 MiB) */
#define CJ_DL_DATUM_MIN 10485760u       /* items this large or larger go as BLOB datums */
#define CJ_DL_REF_ID_MAX 127
#define CJ_DL_FQCN_MAX 255
#define CJ_DL_NONCE_LEN 32              /* 32 lower-case hex */
#define CJ_DL_MAX_REF_IDS 256           /* per source-failure notice */
#define CJ_DL_REASON_MAX_CHARS 1024     /* source-failure reasons are cut to this many characters */
#define CJ_DL_REASON_BUF (4 * CJ_DL_REASON_MAX_CHARS + 1)

#define CJ_DL_TUPLE_DC "nvflare.fuel.utils.fobs.decomposers.core_decomposers.TupleDecomposer"
#define CJ_DL_DATUMREF_DC "nvflare.fuel.utils.fobs.decomposer.DataClassDecomposer"

/* ---- requests on download_service__download ------------------------------------ */

enum cj_dl_confirm {
    CJ_DL_CONFIRM_NONE = 0,   /* key absent or nil */
    CJ_DL_CONFIRM_SUCCESS,
    CJ_DL_CONFIRM_FAILED,
    CJ_DL_CONFIRM_OTHER,      /* present but neither "success" nor "failed": handled as a confirm, then dropped */
};

struct cj_dl_request {
    char ref_id[CJ_DL_REF_ID_MAX + 1]; /* "" when missing, empty or unusable (see ref_id_bad) */
    bool ref_id_bad;                   /* present but not a str, too long, not UTF-8 or holding NUL */
    bool confirm_capable;
    struct cj_range state;              /* the raw state map; len 0 when absent or nil */
    enum cj_dl_confirm confirm;
    bool has_nonce;
    char confirm_nonce[CJ_DL_NONCE_LEN + 1];
    bool cancel;                       /* "cancel" is literally true */
};

/* Decodes a pull, confirm or cancel.  Errors (the producer answers
 * invalid_request, or drops a fire-and-forget): body not a map (CJ_E_TYPE),
 * confirm_capable not a bool, state neither a map nor nil (CJ_E_TYPE),
 * confirm_nonce not 32 lower-case hex (CJ_E_INVALID).  A missing or bad ref_id
 * is not an error: cj_dl_classify says invalid_request. */
int cj_dl_decode_request(const uint8_t *payload, size_t len, struct cj_dl_request *r, struct cj_err *err);

enum cj_dl_action {
    CJ_DL_ACT_INVALID_REQUEST = 1,  /* ref_id missing or empty: cell rc invalid_request */
    CJ_DL_ACT_CONFIRM,              /* confirm present (checked before cancel) */
    CJ_DL_ACT_CANCEL,               /* cancel is literally true */
    CJ_DL_ACT_PULL,
};

/* Producer dispatch, steps 1-3 of doc/protocol/download.md §2, in that order. */
enum cj_dl_action cj_dl_classify(const struct cj_dl_request *r);

enum cj_dl_tombstone { CJ_DL_TOMB_NONE = 0, CJ_DL_TOMB_SUCCESS, CJ_DL_TOMB_FAILED };
enum cj_dl_pull_outcome {
    CJ_DL_SERVE = 1,           /* step 5: produce the next chunk */
    CJ_DL_REPLAY_EOF,          /* {"status": "eof"} */
    CJ_DL_REPLAY_ERROR,        /* {"status": "error"} */
    CJ_DL_NO_REF,              /* cell rc invalid_request */
};

/* Step 4: a pull for a live ref that is not settling is served; otherwise the
 * tombstone for (ref, requester) decides. */
enum cj_dl_pull_outcome cj_dl_pull_outcome(bool live, bool settling, enum cj_dl_tombstone tomb);

/* Step 5: a terminal reply carries confirm_expected + a fresh nonce only when
 * the request had confirm_capable, confirmation is enabled locally and this
 * receiver has no final status yet. */
bool cj_dl_terminal_wants_confirm(bool request_confirm_capable, bool confirm_enabled, bool receiver_final);

/* ---- replies ---------------------------------------------------------------------- */

enum cj_dl_status {
    CJ_DL_STATUS_OK = 1,
    CJ_DL_STATUS_EOF,
    CJ_DL_STATUS_ERROR,
    CJ_DL_STATUS_OTHER,        /* any other str: a consumer treats it as a data reply */
};

/* One item of a data reply. */
struct cj_dl_item_ref {
    bool is_datum;             /* DatumRef form (BLOB datum section) */
    uint8_t datum_id[16];      /* is_datum: the referenced datum id */
    bool resolved;             /* off/len are set (inline items always; datum items once resolved) */
    size_t off;                /* the item bytes in the decoder's input */
    size_t len;
};

struct cj_dl_reply {
    enum cj_dl_status status;
    struct cj_range state;      /* raw state map; len 0 when absent or nil */
    bool has_data;
    size_t n_items;            /* items in data, all of them (items[] holds the first min(cap, n)) */
    bool confirm_expected;
    bool has_nonce;
    char confirm_nonce[CJ_DL_NONCE_LEN + 1];
    bool cancel_capable;
};

/* Decodes a reply payload.  status is required (a str); state must be a map or
 * nil; data must be an array for ok/other replies (and if present), each item
 * a bin or a DatumRef wrapper (datum_id a uuid str, unwrap true); DatumRef items
 * among the first cap are resolved against the payload's datum sections (BLOB,
 * DOT 0; a missing one is CJ_E_MISSING); confirm_expected and cancel_capable
 * must be bools, confirm_nonce 32 lower-case hex, and confirm_expected true
 * needs a nonce. */
int cj_dl_decode_reply(const uint8_t *payload, size_t len, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                       size_t cap, struct cj_err *err);

/* The same on a MAIN body alone (offsets relative to body; DatumRef items left
 * unresolved): for consumers that stream big datums to disk. */
int cj_dl_decode_reply_body(const uint8_t *body, size_t len, struct cj_dl_reply *r, struct cj_dl_item_ref *items,
                            size_t cap, struct cj_err *err);

/* ---- source-failure notice -------------------------------------------------------------- */

struct cj_dl_source_failure {          /* ~37 KB */
    char source_fqcn[CJ_DL_FQCN_MAX + 1];
    size_t n_ref_ids;                  /* 1..CJ_DL_MAX_REF_IDS */
    char ref_ids[CJ_DL_MAX_REF_IDS][CJ_DL_REF_ID_MAX + 1];
    bool tuple_form;                   /* ref_ids came as a tuple wrapper (else a plain array) */
    char reason[CJ_DL_REASON_BUF];     /* cut to CJ_DL_REASON_MAX_CHARS characters */
    bool reason_cut;
};

/* Decodes a notice: source_fqcn a non-empty str; ref_ids a tuple wrapper or a
 * plain array of 1-256 non-empty strs; reason a str (cut, not refused; absent
 * or nil = ""). */
int cj_dl_decode_source_failure(const uint8_t *payload, size_t len, struct cj_dl_source_failure *sf,
                                struct cj_err *err);

/* ---- encoders ------------------------------------------------------------------------ */

/* {"ref_id", "confirm_capable": true (only when confirm_capable), "state": <raw>}
 * (state may be NULL/0: the first pull; otherwise exactly one msgpack map,
 * copied verbatim). */
int cj_dl_encode_pull(msgpack_sbuffer *sb, const char *ref_id, bool confirm_capable, const uint8_t *state,
                      size_t state_len, struct cj_err *err);

/* {"status": "eof"|"error"[, "confirm_expected": true, "confirm_nonce": nonce]}
 * (nonce NULL = the legacy form). */
int cj_dl_encode_terminal(msgpack_sbuffer *sb, enum cj_dl_status status, const char *nonce, struct cj_err *err);

/* {"ref_id", "confirm": "success"|"failed", "confirm_nonce"}. */
int cj_dl_encode_confirm(msgpack_sbuffer *sb, const char *ref_id, bool success, const char *nonce,
                         struct cj_err *err);

/* {"ref_id", "cancel": true}. */
int cj_dl_encode_cancel(msgpack_sbuffer *sb, const char *ref_id, struct cj_err *err);

/* {"source_fqcn", "ref_ids": tuple wrapper [...], "reason"} (1-256 ref ids;
 * the reason is cut to CJ_DL_REASON_MAX_CHARS characters). */
int cj_dl_encode_source_failure(msgpack_sbuffer *sb, const char *source_fqcn, const char *const *ref_ids,
                                size_t n_ref_ids, const char *reason, struct cj_err *err);

/* Data replies: {"status": "ok", "state": {"start", "count"}, "data": [...],
 * "cancel_capable": true}. */
struct cj_dl_reply_opts {
    uint64_t datum_min;        /* items >= this go as BLOB datums; 0 = CJ_DL_DATUM_MIN (bin32 caps inline at 4 GiB - 1) */
    bool cancel_capable;       /* write "cancel_capable": true */
    const uint8_t *raw_state;  /* write this state verbatim (one msgpack map) instead of {start, count} */
    size_t raw_state_len;
    void (*new_id)(void *ud, uint8_t id[16]); /* datum ids; NULL = random uuid4 */
    void *ud;
};
/* opts NULL means: datum_min default, cancel_capable true, {start, count}, random ids. */

struct cj_dl_piece {
    int64_t item;              /* -1: bytes [off, off+len) of the framing sbuffer; else the whole item `item` */
    size_t off;
    uint64_t len;
};
#define CJ_DL_MAX_PIECES(n) (4 * (size_t)(n) + 2)

/* Writes the framing of a data reply for n items of the given sizes into sb
 * (which should be empty: piece offsets are offsets in sb) and lists in pieces
 * (cap >= CJ_DL_MAX_PIECES(n)) the payload in order: concatenating them gives
 * the whole LOBS payload. */
int cj_dl_plan_data_reply(msgpack_sbuffer *sb, uint64_t start, const uint64_t *sizes, size_t n,
                          const struct cj_dl_reply_opts *opts, struct cj_dl_piece *pieces, size_t cap,
                          size_t *n_pieces, struct cj_err *err);

struct cj_dl_item {
    const uint8_t *p;
    size_t len;
};

/* The whole data reply payload appended to out (copies the item bytes). */
int cj_dl_encode_data_reply(msgpack_sbuffer *out, uint64_t start, const struct cj_dl_item *items, size_t n,
                            const struct cj_dl_reply_opts *opts, struct cj_err *err);

/* 66 00 <u64 BE 16+len> <id>: the 26-byte header of a BLOB datum section. */
void cj_dl_datum_header(uint8_t hdr[26], const uint8_t id[16], uint64_t len);

/* ---- state and grouping (§3) ------------------------------------------------------------ */

/* Packs {"start": start, "count": count}. */
int cj_dl_write_item_state(msgpack_packer *pk, uint64_t start, uint64_t count);

/* The first item of the next group from an echoed state (buf + span as a
 * decoder reported it): 0 for an absent or empty state, else start + count.
 * start and count must be non-negative ints (CJ_E_MISSING / CJ_E_TYPE /
 * CJ_E_LIMIT on overflow); other keys are ignored. */
int cj_dl_next_start(const uint8_t *buf, struct cj_range state, uint64_t *start, struct cj_err *err);

#define CJ_DL_SIZE_UNKNOWN UINT64_MAX

/* The item-producer grouping: from item `start`, how many items the next
 * reply carries (*count), with the running total strictly below max_chunk
 * except that the first item always goes.  estimates (may be NULL; entries
 * CJ_DL_SIZE_UNKNOWN) stop a group before producing an item that would not
 * fit.  Returns 1 for a data reply, 0 for EOF (start >= n_items). */
int cj_dl_group(const uint64_t *sizes, const uint64_t *estimates, size_t n_items, uint64_t start,
                uint64_t max_chunk, size_t *count);

/* ---- ids ------------------------------------------------------------------------------ */

/* 32 lower-case hex from getrandom (out: 33 bytes).  0 or -1. */
int cj_dl_new_nonce(char out[CJ_DL_NONCE_LEN + 1]);
/* True when [s, s+len) is exactly 32 lower-case hex digits. */
bool cj_dl_nonce_valid(const char *s, size_t len);

#endif
