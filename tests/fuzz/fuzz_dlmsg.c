/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dlmsg.c — download-service decoders and the chunk grouping on
 * arbitrary input.
 *
 * Input: a payload, decoded as a request, a reply and a source-failure notice;
 * also read as item sizes for the grouping.  Invariants checked:
 *  - request: a pull / confirm / cancel re-encodes and decodes to the same
 *    ref_id, flags, state bytes, confirm value and nonce; the class is the same;
 *  - reply: a data reply re-encodes (items inline or as BLOB datums, the datum
 *    threshold drawn from the input) and decodes to the same status, state
 *    bytes, item bytes and flags; the planned pieces concatenate to the same
 *    payload; a terminal reply re-encodes to the same status and nonce;
 *  - source failure: re-encodes and decodes to the same fqcn, ref ids, reason;
 *  - grouping: from start 0 the replies cover every item exactly once, each
 *    count >= 1, a reply of several items totals strictly below max_chunk, and
 *    without estimates no reply could have taken the next item. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dl/dlmsg.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)
#define CAP 64

static void request(const uint8_t *data, size_t size)
{
    struct cj_dl_request a, b;
    struct cj_err err;
    if (cj_dl_decode_request(data, size, &a, &err)) return;
    enum cj_dl_action act = cj_dl_classify(&a);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = -1;
    if (act == CJ_DL_ACT_PULL)
        rc = cj_dl_encode_pull(&sb, a.ref_id, a.confirm_capable, a.state.len ? data + a.state.off : NULL, a.state.len, &err);
    else if (act == CJ_DL_ACT_CONFIRM && a.has_nonce &&
             (a.confirm == CJ_DL_CONFIRM_SUCCESS || a.confirm == CJ_DL_CONFIRM_FAILED))
        rc = cj_dl_encode_confirm(&sb, a.ref_id, a.confirm == CJ_DL_CONFIRM_SUCCESS, a.confirm_nonce, &err);
    else if (act == CJ_DL_ACT_CANCEL)
        rc = cj_dl_encode_cancel(&sb, a.ref_id, &err);
    else
        goto out;
    CHECK(rc == 0);
    CHECK(cj_dl_decode_request((uint8_t *)sb.data, sb.size, &b, &err) == 0);
    CHECK(cj_dl_classify(&b) == act);
    CHECK(!strcmp(a.ref_id, b.ref_id));
    if (act == CJ_DL_ACT_PULL) {
        CHECK(a.confirm_capable == b.confirm_capable);
        CHECK(a.state.len == b.state.len && !memcmp(data + a.state.off, sb.data + b.state.off, a.state.len));
        uint64_t s1, s2;
        int r1 = cj_dl_next_start(data, a.state, &s1, &err), r2 = cj_dl_next_start((uint8_t *)sb.data, b.state, &s2, &err);
        CHECK(r1 == r2 && (r1 || s1 == s2));
    } else if (act == CJ_DL_ACT_CONFIRM) {
        CHECK(a.confirm == b.confirm && !strcmp(a.confirm_nonce, b.confirm_nonce));
    }
out:
    msgpack_sbuffer_destroy(&sb);
}

static void reply(const uint8_t *data, size_t size)
{
    static struct cj_dl_item_ref it1[CAP], it2[CAP];
    struct cj_dl_reply a, b;
    struct cj_err err;
    if (cj_dl_decode_reply(data, size, &a, it1, CAP, &err)) return;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (a.status == CJ_DL_STATUS_EOF || a.status == CJ_DL_STATUS_ERROR) {
        CHECK(cj_dl_encode_terminal(&sb, a.status, a.confirm_expected ? a.confirm_nonce : NULL, &err) == 0);
        CHECK(cj_dl_decode_reply((uint8_t *)sb.data, sb.size, &b, it2, CAP, &err) == 0);
        CHECK(a.status == b.status && a.confirm_expected == b.confirm_expected);
        if (a.confirm_expected) CHECK(!strcmp(a.confirm_nonce, b.confirm_nonce));
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    if (a.n_items > CAP) goto out;
    struct cj_dl_item items[CAP];
    uint64_t sizes[CAP];
    for (size_t i = 0; i < a.n_items; i++) {
        CHECK(it1[i].resolved && it1[i].off + it1[i].len <= size);
        items[i] = (struct cj_dl_item){data + it1[i].off, it1[i].len};
        sizes[i] = it1[i].len;
    }
    /* datum threshold from the input, so both item forms get exercised */
    struct cj_dl_reply_opts o = {.datum_min = 1 + (size ? data[size - 1] : 0), .cancel_capable = a.cancel_capable,
                                 .raw_state = a.state.len ? data + a.state.off : NULL, .raw_state_len = a.state.len};
    CHECK(cj_dl_encode_data_reply(&sb, 3, items, a.n_items, &o, &err) == 0);
    CHECK(cj_dl_decode_reply((uint8_t *)sb.data, sb.size, &b, it2, CAP, &err) == 0);
    CHECK(b.status == CJ_DL_STATUS_OK && b.n_items == a.n_items && b.cancel_capable == a.cancel_capable);
    if (a.state.len) CHECK(a.state.len == b.state.len && !memcmp(data + a.state.off, sb.data + b.state.off, a.state.len));
    for (size_t i = 0; i < a.n_items; i++) {
        CHECK(it2[i].resolved && it2[i].len == it1[i].len);
        CHECK(it2[i].is_datum == (it1[i].len >= o.datum_min));
        CHECK(!memcmp(sb.data + it2[i].off, items[i].p, items[i].len));
    }
    /* the plan, concatenated, is a valid reply with the same items */
    {
        msgpack_sbuffer fr, whole;
        msgpack_sbuffer_init(&fr);
        msgpack_sbuffer_init(&whole);
        struct cj_dl_piece pieces[CJ_DL_MAX_PIECES(CAP)];
        size_t np;
        CHECK(cj_dl_plan_data_reply(&fr, 3, sizes, a.n_items, &o, pieces, CJ_DL_MAX_PIECES(CAP), &np, &err) == 0);
        for (size_t i = 0; i < np; i++) {
            const char *src = pieces[i].item < 0 ? fr.data + pieces[i].off : (const char *)items[pieces[i].item].p;
            CHECK(pieces[i].item < 0 ? pieces[i].off + pieces[i].len <= fr.size : pieces[i].len == sizes[pieces[i].item]);
            msgpack_sbuffer_write(&whole, src, pieces[i].len);
        }
        CHECK(whole.size == sb.size);
        CHECK(cj_dl_decode_reply((uint8_t *)whole.data, whole.size, &b, it2, CAP, &err) == 0);
        CHECK(b.n_items == a.n_items);
        for (size_t i = 0; i < a.n_items; i++) CHECK(!memcmp(whole.data + it2[i].off, items[i].p, items[i].len));
        msgpack_sbuffer_destroy(&fr);
        msgpack_sbuffer_destroy(&whole);
    }
out:
    msgpack_sbuffer_destroy(&sb);
}

static void source_failure(const uint8_t *data, size_t size)
{
    static struct cj_dl_source_failure a, b;
    struct cj_err err;
    if (cj_dl_decode_source_failure(data, size, &a, &err)) return;
    const char *ids[CJ_DL_MAX_REF_IDS];
    for (size_t i = 0; i < a.n_ref_ids; i++) ids[i] = a.ref_ids[i];
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    CHECK(cj_dl_encode_source_failure(&sb, a.source_fqcn, ids, a.n_ref_ids, a.reason, &err) == 0);
    CHECK(cj_dl_decode_source_failure((uint8_t *)sb.data, sb.size, &b, &err) == 0);
    CHECK(!strcmp(a.source_fqcn, b.source_fqcn) && a.n_ref_ids == b.n_ref_ids && b.tuple_form);
    for (size_t i = 0; i < a.n_ref_ids; i++) CHECK(!strcmp(a.ref_ids[i], b.ref_ids[i]));
    CHECK(!strcmp(a.reason, b.reason) && !b.reason_cut);
    msgpack_sbuffer_destroy(&sb);
}

/* Sizes from the input: max_chunk from the first two bytes, then 3 bytes per
 * item (a size scaled around max_chunk) and, every other run, an estimate. */
static void grouping(const uint8_t *data, size_t size)
{
    if (size < 3) return;
    uint64_t max = 1 + ((uint64_t)data[0] << 8 | data[1]);
    bool use_est = data[2] & 1;
    uint64_t sizes[256], est[256];
    size_t n = 0;
    for (size_t i = 3; i + 2 < size && n < 256; i += 3, n++) {
        uint64_t v = (uint64_t)data[i] << 8 | data[i + 1];
        sizes[n] = data[i + 2] & 0x80 ? v * 7 : v >> (data[i + 2] & 7);
        uint8_t k = data[i + 2] & 0x30;
        est[n] = k == 0 ? CJ_DL_SIZE_UNKNOWN : k == 0x10 ? sizes[n] : k == 0x20 ? sizes[n] / 2 : sizes[n] * 2;
        if (data[i + 2] & 0x40) sizes[n] = UINT64_MAX - v;   /* huge sizes must not overflow */
    }
    uint64_t start = 0;
    size_t count, replies = 0;
    while (cj_dl_group(sizes, use_est ? est : NULL, n, start, max, &count) == 1) {
        CHECK(count >= 1 && start + count <= n);
        CHECK(++replies <= n);
        if (count > 1) {
            uint64_t total = 0;
            for (size_t i = start; i < start + count; i++) {
                CHECK(total < max && sizes[i] < max - total);
                total += sizes[i];
            }
            CHECK(total < max);
        }
        if (!use_est && start + count < n) {   /* maximal: the next item would not have fit */
            uint64_t total = 0;
            bool over = false;
            for (size_t i = start; i <= start + count; i++) {
                if (sizes[i] > UINT64_MAX - total) { over = true; break; }
                total += sizes[i];
            }
            CHECK(over || total >= max);
        }
        start += count;
    }
    CHECK(start == n);
    CHECK(cj_dl_group(sizes, NULL, n, n + 5, max, &count) == 0 && count == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    request(data, size);
    reply(data, size);
    source_failure(data, size);
    grouping(data, size);
    return 0;
}
