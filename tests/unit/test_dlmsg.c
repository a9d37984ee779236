/* SPDX-License-Identifier: Apache-2.0 */
/* test_dlmsg.c — download-service messages: byte parity with vectors 30-37 and
 * tool_wire_examples.txt (10 MiB BLOB datum vs 10 MiB - 1 inline included),
 * decode of each back to its fields, the producer flow 30 -> 31 -> 32 -> 33,
 * dispatch order, chunk grouping (tool_grouping.txt), pieces, hostile inputs. */
#include "testutil.h"
#include "mpbody.h"
#include "dl/dlmsg.h"
#include "payload/lobs.h"
#include "util/uuid.h"

#define REF "11111111-2222-4333-8444-0000000000c9"
#define NONCE "3b8ce1e44ae34bf392fa0b28539835f7"
#define M (1024u * 1024u)

static const char *const vectors[] = {
    "30_dl_pull_first.bin", "31_dl_reply_data.bin", "32_dl_pull_next.bin", "33_dl_reply_eof_confirm.bin",
    "34_dl_confirm.bin", "35_dl_cancel.bin", "36_dl_source_failure.bin", "37_dl_reply_eof_legacy.bin",
};
enum { REQ, REPLY, SF };
static const int vkind[] = {REQ, REPLY, REQ, REPLY, REQ, REQ, SF, REPLY};

/* The MAIN body of sb equals the hex (tool_wire_examples.txt). */
static void assert_body_hex(const msgpack_sbuffer *sb, const char *hex)
{
    size_t n;
    uint8_t *want = tu_hex(hex, &n);
    assert_int_equal(sb->size, CJ_LOBS_HDR_LEN + n);
    assert_int_equal((uint8_t)sb->data[0], 0x64);
    assert_memory_equal(sb->data + CJ_LOBS_HDR_LEN, want, n);
    free(want);
}

static int decode_any(int kind, const uint8_t *p, size_t len, struct cj_err *e)
{
    struct cj_dl_request r;
    struct cj_dl_reply rep;
    struct cj_dl_item_ref items[4];
    static struct cj_dl_source_failure sf;
    if (kind == REQ) return cj_dl_decode_request(p, len, &r, e);
    if (kind == REPLY) return cj_dl_decode_reply(p, len, &rep, items, 4, e);
    return cj_dl_decode_source_failure(p, len, &sf, e);
}

/* ---- encoders ------------------------------------------------------------------------------ */

static void test_encode_vectors(void **state)
{
    (void)state;
    struct cj_err e = {0};
    msgpack_sbuffer sb;
    size_t l0, l1;
    uint8_t *t0 = tu_read_vector("40_item_T0.npz", &l0), *t1 = tu_read_vector("41_item_T1.npz", &l1);
    static const uint8_t state02[] = {0x82, 0xa5, 's', 't', 'a', 'r', 't', 0x00, 0xa5, 'c', 'o', 'u', 'n', 't', 0x02};

#define ONE(vec, call)                \
    do {                              \
        msgpack_sbuffer_init(&sb);    \
        if (call) fail_msg("%s: %s", vec, e.msg); \
        assert_sb_is(&sb, vec);       \
        msgpack_sbuffer_destroy(&sb); \
    } while (0)
    ONE("30_dl_pull_first.bin", cj_dl_encode_pull(&sb, REF, true, NULL, 0, &e));
    struct cj_dl_item items[2] = {{t0, l0}, {t1, l1}};
    ONE("31_dl_reply_data.bin", cj_dl_encode_data_reply(&sb, 0, items, 2, NULL, &e));
    ONE("32_dl_pull_next.bin", cj_dl_encode_pull(&sb, REF, true, state02, sizeof state02, &e));
    ONE("33_dl_reply_eof_confirm.bin", cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, NONCE, &e));
    ONE("34_dl_confirm.bin", cj_dl_encode_confirm(&sb, REF, true, NONCE, &e));
    ONE("35_dl_cancel.bin", cj_dl_encode_cancel(&sb, REF, &e));
    const char *ids[] = {"11111111-2222-4333-8444-000000000385"};
    ONE("36_dl_source_failure.bin",
        cj_dl_encode_source_failure(&sb, "site-1.job-7f3a.client_api_trainer_1", ids, 1, "worker process exited", &e));
    ONE("37_dl_reply_eof_legacy.bin", cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, NULL, &e));
#undef ONE
    free(t0);
    free(t1);
}

static void test_wire_examples(void **state)
{
    (void)state;
    struct cj_err e = {0};
    msgpack_sbuffer sb;
    static const uint8_t st[] = {0x82, 0xa5, 's', 't', 'a', 'r', 't', 0x00, 0xa5, 'c', 'o', 'u', 'n', 't', 0x02};
#define HEX(call, hex)                \
    do {                              \
        msgpack_sbuffer_init(&sb);    \
        assert_int_equal(call, 0);    \
        assert_body_hex(&sb, hex);    \
        msgpack_sbuffer_destroy(&sb); \
    } while (0)
    HEX(cj_dl_encode_pull(&sb, "R1", true, NULL, 0, &e), "82a67265665f6964a25231af636f6e6669726d5f63617061626c65c3");
    HEX(cj_dl_encode_pull(&sb, "R1", true, st, sizeof st, &e),
        "83a67265665f6964a25231af636f6e6669726d5f63617061626c65c3a5737461746582a5737461727400a5636f756e7402");
    struct cj_dl_item items[2] = {{(const uint8_t *)"abc", 3}, {(const uint8_t *)"de", 2}};
    HEX(cj_dl_encode_data_reply(&sb, 0, items, 2, NULL, &e),
        "84a6737461747573a26f6ba5737461746582a5737461727400a5636f756e7402a46461746192c403616263c4026465ae63616e63656c5f63617061626c65c3");
    HEX(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, NULL, &e), "81a6737461747573a3656f66");
    HEX(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, "0123456789abcdef0123456789abcdef", &e),
        "83a6737461747573a3656f66b0636f6e6669726d5f6578706563746564c3ad636f6e6669726d5f6e6f6e6365d9203031323334353637383961626364656630313233343536373839616263646566");
    HEX(cj_dl_encode_confirm(&sb, "R1", true, "0123456789abcdef0123456789abcdef", &e),
        "83a67265665f6964a25231a7636f6e6669726da773756363657373ad636f6e6669726d5f6e6f6e6365d9203031323334353637383961626364656630313233343536373839616263646566");
    HEX(cj_dl_encode_cancel(&sb, "R1", &e), "82a67265665f6964a25231a663616e63656cc3");
    const char *ids[] = {"ref-1"};
    HEX(cj_dl_encode_source_failure(&sb, "site-2.job-1.trainer", ids, 1, "trainer OOM", &e),
        "83ab736f757263655f6671636eb4736974652d322e6a6f622d312e747261696e6572a77265665f69647383ad5f5f666f62735f747970655f5fa57475706c65ad5f5f666f62735f646174615f5f91a57265662d31ab5f5f666f62735f64635f5fd9446e76666c6172652e6675656c2e7574696c732e666f62732e6465636f6d706f736572732e636f72655f6465636f6d706f736572732e5475706c654465636f6d706f736572a6726561736f6eab747261696e6572204f4f4d");
#undef HEX
}

static void fixed_id(void *ud, uint8_t id[16])
{
    (void)ud;
    static const uint8_t v[16] = {0x56, 0xac, 0x85, 0x01, 0xff, 0xc4, 0x42, 0xc2,
                                  0x89, 0xc8, 0xb7, 0x12, 0x18, 0x7d, 0xce, 0xf4};
    memcpy(id, v, 16);
}

/* A 10 MiB item as a DatumRef + BLOB datum; 10 MiB - 1 inline as bin32. */
static void test_big_items(void **state)
{
    (void)state;
    struct cj_err e = {0};
    uint8_t *big = calloc(1, CJ_DL_DATUM_MIN);
    for (size_t i = 0; i < CJ_DL_DATUM_MIN; i += 4096) big[i] = (uint8_t)(i >> 12);
    struct cj_dl_reply_opts o = {.cancel_capable = true, .new_id = fixed_id};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    struct cj_dl_item it = {big, CJ_DL_DATUM_MIN};
    assert_int_equal(cj_dl_encode_data_reply(&sb, 5, &it, 1, &o, &e), 0);
    assert_int_equal(sb.size, 10486049);
    size_t n;
    uint8_t *prefix = tu_hex("84a6737461747573a26f6ba5737461746582a5737461727405a5636f756e7401a4646174619183ad5f5f666f62735f747970655f5fd9266e76666c6172652e6675656c2e7574696c732e666f62732e646174756d2e446174756d526566ad5f5f666f62735f646174615f5f81a46461746182a8646174756d5f6964d92435366163383530312d666663342d343263322d383963382d623731323138376463656634a6756e77726170c3ab5f5f666f62735f64635f5fd9366e76666c6172652e6675656c2e7574696c", &n);
    assert_memory_equal(sb.data + CJ_LOBS_HDR_LEN, prefix, n);
    free(prefix);
    struct cj_lobs_section m, d;
    size_t nd;
    assert_int_equal(cj_lobs_validate(sb.data, sb.size, &m, &d, 1, &nd, &e), 0);
    assert_int_equal(m.value_len, 253);
    assert_int_equal(nd, 1);
    assert_int_equal(d.marker, CJ_LOBS_BLOB);
    assert_int_equal(d.dot, 0);
    assert_int_equal(d.value_len, CJ_DL_DATUM_MIN);
    /* decodes back: the item is the datum's bytes, in place */
    struct cj_dl_reply r;
    struct cj_dl_item_ref ir[2];
    assert_int_equal(cj_dl_decode_reply((uint8_t *)sb.data, sb.size, &r, ir, 2, &e), 0);
    assert_int_equal(r.n_items, 1);
    assert_true(ir[0].is_datum && ir[0].resolved);
    assert_int_equal(ir[0].len, CJ_DL_DATUM_MIN);
    assert_int_equal(ir[0].off, sb.size - CJ_DL_DATUM_MIN);
    assert_memory_equal(sb.data + ir[0].off, big, CJ_DL_DATUM_MIN);
    uint64_t next;
    assert_int_equal(cj_dl_next_start((uint8_t *)sb.data, r.state, &next, &e), 0);
    assert_int_equal(next, 6);
    /* body-only decode leaves it unresolved */
    assert_int_equal(cj_dl_decode_reply_body(m.value, m.value_len, &r, ir, 2, &e), 0);
    assert_true(ir[0].is_datum && !ir[0].resolved);
    msgpack_sbuffer_destroy(&sb);

    /* 10 MiB - 1: inline, c6 00 9f ff ff */
    msgpack_sbuffer_init(&sb);
    it.len = CJ_DL_DATUM_MIN - 1;
    assert_int_equal(cj_dl_encode_data_reply(&sb, 5, &it, 1, &o, &e), 0);
    assert_int_equal(sb.size, 10485828);
    assert_int_equal(cj_lobs_validate(sb.data, sb.size, &m, NULL, 0, &nd, &e), 0);
    assert_int_equal(m.value_len, 10485818);
    assert_int_equal(nd, 0);
    prefix = tu_hex("84a6737461747573a26f6ba5737461746582a5737461727405a5636f756e7401a46461746191c6009fffff", &n);
    assert_memory_equal(sb.data + CJ_LOBS_HDR_LEN, prefix, n);
    free(prefix);
    assert_int_equal(cj_dl_decode_reply((uint8_t *)sb.data, sb.size, &r, ir, 2, &e), 0);
    assert_false(ir[0].is_datum);
    assert_int_equal(ir[0].len, CJ_DL_DATUM_MIN - 1);
    assert_memory_equal(sb.data + ir[0].off, big, CJ_DL_DATUM_MIN - 1);
    msgpack_sbuffer_destroy(&sb);
    free(big);
}

/* The plan lists the payload by reference: framing from sb, item bytes by index. */
static void test_plan_pieces(void **state)
{
    (void)state;
    struct cj_err e = {0};
    uint8_t a[50], b[3], c[200];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    memset(c, 'c', sizeof c);
    struct cj_dl_item items[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    uint64_t sizes[3] = {sizeof a, sizeof b, sizeof c};
    struct cj_dl_reply_opts o = {.datum_min = 40, .cancel_capable = true, .new_id = NULL};
    msgpack_sbuffer fr, whole;
    msgpack_sbuffer_init(&fr);
    msgpack_sbuffer_init(&whole);
    struct cj_dl_piece pieces[CJ_DL_MAX_PIECES(3)];
    size_t np;
    assert_int_equal(cj_dl_plan_data_reply(&fr, 7, sizes, 3, &o, pieces, CJ_DL_MAX_PIECES(3), &np, &e), 0);
    int item_pieces = 0;
    for (size_t i = 0; i < np; i++) {
        if (pieces[i].item >= 0) {
            item_pieces++;
            assert_int_equal(pieces[i].len, sizes[pieces[i].item]);
            msgpack_sbuffer_write(&whole, (const char *)items[pieces[i].item].p, pieces[i].len);
        } else {
            assert_true(pieces[i].off + pieces[i].len <= fr.size);
            msgpack_sbuffer_write(&whole, fr.data + pieces[i].off, pieces[i].len);
        }
    }
    assert_int_equal(item_pieces, 3);
    /* the framing holds none of the item bytes (a and c, >= 40 bytes, are datums) */
    assert_int_equal(fr.size, whole.size - sizeof a - sizeof b - sizeof c);
    struct cj_dl_reply r;
    struct cj_dl_item_ref ir[3];
    assert_int_equal(cj_dl_decode_reply((uint8_t *)whole.data, whole.size, &r, ir, 3, &e), 0);
    assert_int_equal(r.n_items, 3);
    assert_true(ir[0].is_datum && !ir[1].is_datum && ir[2].is_datum);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ir[i].len, items[i].len);
        assert_memory_equal(whole.data + ir[i].off, items[i].p, items[i].len);
    }
    assert_true(r.cancel_capable && r.status == CJ_DL_STATUS_OK);
    uint64_t next;
    assert_int_equal(cj_dl_next_start((uint8_t *)whole.data, r.state, &next, &e), 0);
    assert_int_equal(next, 10);
    /* random uuid4 datum ids are distinct (the container validated) */
    assert_int_equal(cj_dl_plan_data_reply(&fr, 0, sizes, 3, &o, pieces, 2, &np, &e), -CJ_E_LIMIT);
    msgpack_sbuffer_destroy(&fr);
    msgpack_sbuffer_destroy(&whole);

    /* raw state and no cancel_capable */
    static const uint8_t rs[] = {0x81, 0xae, 'r', 'e', 'c', 'e', 'i', 'v', 'e', 'd', '_', 'b', 'y', 't', 'e', 's', 0x05};
    struct cj_dl_reply_opts o2 = {.raw_state = rs, .raw_state_len = sizeof rs};
    msgpack_sbuffer_init(&whole);
    assert_int_equal(cj_dl_encode_data_reply(&whole, 0, items + 1, 1, &o2, &e), 0);
    assert_int_equal(cj_dl_decode_reply((uint8_t *)whole.data, whole.size, &r, ir, 3, &e), 0);
    assert_false(r.cancel_capable);
    assert_int_equal(r.state.len, sizeof rs);
    assert_memory_equal(whole.data + r.state.off, rs, sizeof rs);
    msgpack_sbuffer_destroy(&whole);
}

/* ---- decoders -------------------------------------------------------------------------------- */

static void test_decode_vectors(void **state)
{
    (void)state;
    struct cj_err e = {0};
    size_t len;
    uint8_t *p;
    struct cj_dl_request r;
    struct cj_dl_reply rep;
    struct cj_dl_item_ref it[4];

    p = tu_read_vector(vectors[0], &len);
    assert_int_equal(cj_dl_decode_request(p, len, &r, &e), 0);
    assert_string_equal(r.ref_id, REF);
    assert_true(r.confirm_capable);
    assert_int_equal(r.state.len, 0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_PULL);
    free(p);

    size_t l0, l1;
    uint8_t *t0 = tu_read_vector("40_item_T0.npz", &l0), *t1 = tu_read_vector("41_item_T1.npz", &l1);
    p = tu_read_vector(vectors[1], &len);
    assert_int_equal(cj_dl_decode_reply(p, len, &rep, it, 4, &e), 0);
    assert_int_equal(rep.status, CJ_DL_STATUS_OK);
    assert_true(rep.cancel_capable);
    assert_false(rep.confirm_expected);
    assert_int_equal(rep.n_items, 2);
    assert_int_equal(it[0].len, 539);
    assert_int_equal(it[1].len, 523);
    assert_memory_equal(p + it[0].off, t0, l0);
    assert_memory_equal(p + it[1].off, t1, l1);
    uint64_t next;
    assert_int_equal(cj_dl_next_start(p, rep.state, &next, &e), 0);
    assert_int_equal(next, 2);
    /* count-then-fill: cap 1 still reports 2 */
    assert_int_equal(cj_dl_decode_reply(p, len, &rep, it, 1, &e), 0);
    assert_int_equal(rep.n_items, 2);
    free(p);
    free(t0);
    free(t1);

    p = tu_read_vector(vectors[2], &len);
    assert_int_equal(cj_dl_decode_request(p, len, &r, &e), 0);
    assert_int_equal(r.state.len, 15);
    assert_int_equal(p[r.state.off], 0x82);
    assert_int_equal(cj_dl_next_start(p, r.state, &next, &e), 0);
    assert_int_equal(next, 2);
    free(p);

    p = tu_read_vector(vectors[3], &len);
    assert_int_equal(cj_dl_decode_reply(p, len, &rep, it, 4, &e), 0);
    assert_int_equal(rep.status, CJ_DL_STATUS_EOF);
    assert_true(rep.confirm_expected && rep.has_nonce);
    assert_string_equal(rep.confirm_nonce, NONCE);
    assert_false(rep.has_data);
    free(p);

    p = tu_read_vector(vectors[4], &len);
    assert_int_equal(cj_dl_decode_request(p, len, &r, &e), 0);
    assert_int_equal(r.confirm, CJ_DL_CONFIRM_SUCCESS);
    assert_true(r.has_nonce);
    assert_string_equal(r.confirm_nonce, NONCE);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CONFIRM);
    free(p);

    p = tu_read_vector(vectors[5], &len);
    assert_int_equal(cj_dl_decode_request(p, len, &r, &e), 0);
    assert_true(r.cancel);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CANCEL);
    free(p);

    struct cj_dl_source_failure *sf = malloc(sizeof *sf);
    p = tu_read_vector(vectors[6], &len);
    assert_int_equal(cj_dl_decode_source_failure(p, len, sf, &e), 0);
    assert_string_equal(sf->source_fqcn, "site-1.job-7f3a.client_api_trainer_1");
    assert_int_equal(sf->n_ref_ids, 1);
    assert_string_equal(sf->ref_ids[0], "11111111-2222-4333-8444-000000000385");
    assert_true(sf->tuple_form);
    assert_string_equal(sf->reason, "worker process exited");
    free(p);
    free(sf);

    p = tu_read_vector(vectors[7], &len);
    assert_int_equal(cj_dl_decode_reply(p, len, &rep, it, 4, &e), 0);
    assert_int_equal(rep.status, CJ_DL_STATUS_EOF);
    assert_false(rep.confirm_expected || rep.has_nonce);
    free(p);
}

/* A producer answering pull 30 with items 40 and 41 gives 31, then pull 32 gets EOF (33). */
static void test_producer_flow(void **state)
{
    (void)state;
    struct cj_err e = {0};
    size_t len, l0, l1;
    uint8_t *t0 = tu_read_vector("40_item_T0.npz", &l0), *t1 = tu_read_vector("41_item_T1.npz", &l1);
    struct cj_dl_item items[2] = {{t0, l0}, {t1, l1}};
    uint64_t sizes[2] = {l0, l1};
    struct cj_dl_request r;
    msgpack_sbuffer sb;

    uint8_t *p = tu_read_vector("30_dl_pull_first.bin", &len);
    assert_int_equal(cj_dl_decode_request(p, len, &r, &e), 0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_PULL);
    assert_int_equal(cj_dl_pull_outcome(true, false, CJ_DL_TOMB_NONE), CJ_DL_SERVE);
    uint64_t start;
    assert_int_equal(cj_dl_next_start(p, r.state, &start, &e), 0);
    size_t count;
    assert_int_equal(cj_dl_group(sizes, NULL, 2, start, CJ_DL_MAX_CHUNK, &count), 1);
    assert_int_equal(count, 2);
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_data_reply(&sb, start, items + start, count, NULL, &e), 0);
    assert_sb_is(&sb, "31_dl_reply_data.bin");
    /* the consumer echoes the reply's state verbatim: that is pull 32 */
    struct cj_dl_reply rep;
    struct cj_dl_item_ref ir[2];
    assert_int_equal(cj_dl_decode_reply((uint8_t *)sb.data, sb.size, &rep, ir, 2, &e), 0);
    msgpack_sbuffer pull;
    msgpack_sbuffer_init(&pull);
    assert_int_equal(cj_dl_encode_pull(&pull, r.ref_id, true, (uint8_t *)sb.data + rep.state.off, rep.state.len, &e), 0);
    assert_sb_is(&pull, "32_dl_pull_next.bin");
    msgpack_sbuffer_destroy(&sb);
    free(p);

    assert_int_equal(cj_dl_decode_request((uint8_t *)pull.data, pull.size, &r, &e), 0);
    assert_int_equal(cj_dl_next_start((uint8_t *)pull.data, r.state, &start, &e), 0);
    assert_int_equal(cj_dl_group(sizes, NULL, 2, start, CJ_DL_MAX_CHUNK, &count), 0);   /* EOF */
    assert_true(cj_dl_terminal_wants_confirm(r.confirm_capable, true, false));
    msgpack_sbuffer_init(&sb);
    assert_int_equal(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, NONCE, &e), 0);
    assert_sb_is(&sb, "33_dl_reply_eof_confirm.bin");
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&pull);
    free(t0);
    free(t1);
}

static void test_dispatch(void **state)
{
    (void)state;
    struct cj_dl_request r = {0};
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);
    r.confirm = CJ_DL_CONFIRM_SUCCESS;
    r.cancel = true;
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);   /* ref_id first */
    strcpy(r.ref_id, "R1");
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CONFIRM);           /* confirm before cancel */
    r.confirm = CJ_DL_CONFIRM_OTHER;
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CONFIRM);
    r.confirm = CJ_DL_CONFIRM_NONE;
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CANCEL);
    r.cancel = false;
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_PULL);

    assert_int_equal(cj_dl_pull_outcome(true, false, CJ_DL_TOMB_SUCCESS), CJ_DL_SERVE);
    assert_int_equal(cj_dl_pull_outcome(true, true, CJ_DL_TOMB_SUCCESS), CJ_DL_REPLAY_EOF);
    assert_int_equal(cj_dl_pull_outcome(false, false, CJ_DL_TOMB_FAILED), CJ_DL_REPLAY_ERROR);
    assert_int_equal(cj_dl_pull_outcome(false, false, CJ_DL_TOMB_NONE), CJ_DL_NO_REF);
    assert_int_equal(cj_dl_pull_outcome(true, true, CJ_DL_TOMB_NONE), CJ_DL_NO_REF);
    assert_false(cj_dl_terminal_wants_confirm(false, true, false));
    assert_false(cj_dl_terminal_wants_confirm(true, false, false));
    assert_false(cj_dl_terminal_wants_confirm(true, true, true));
}

/* ---- grouping -------------------------------------------------------------------------------- */

static void test_grouping(void **state)
{
    (void)state;
    const uint64_t sizes[7] = {1 * M, M / 2, M / 2, 3 * M, 100, 2 * M - 1, 1};
    const size_t want_start[6] = {0, 2, 3, 4, 5, 6}, want_count[6] = {2, 1, 1, 1, 1, 1};
    for (int pass = 0; pass < 2; pass++) {
        const uint64_t *est = pass ? sizes : NULL;
        uint64_t start = 0;
        size_t count;
        for (int k = 0; k < 6; k++) {
            assert_int_equal(cj_dl_group(sizes, est, 7, start, CJ_DL_MAX_CHUNK, &count), 1);
            assert_int_equal(start, want_start[k]);
            assert_int_equal(count, want_count[k]);
            start += count;
        }
        assert_int_equal(cj_dl_group(sizes, est, 7, start, CJ_DL_MAX_CHUNK, &count), 0);
    }
    size_t count;
    const uint64_t exact[2] = {M, M}, below[2] = {M, M - 1};
    assert_int_equal(cj_dl_group(exact, NULL, 2, 0, CJ_DL_MAX_CHUNK, &count), 1);
    assert_int_equal(count, 1);
    assert_int_equal(cj_dl_group(below, NULL, 2, 0, CJ_DL_MAX_CHUNK, &count), 1);
    assert_int_equal(count, 2);
    /* an estimate stops the group before producing the item */
    const uint64_t est[2] = {CJ_DL_SIZE_UNKNOWN, M};
    assert_int_equal(cj_dl_group(below, est, 2, 0, CJ_DL_MAX_CHUNK, &count), 1);
    assert_int_equal(count, 1);
    /* huge sizes do not overflow */
    const uint64_t huge[3] = {UINT64_MAX, UINT64_MAX, 1};
    assert_int_equal(cj_dl_group(huge, NULL, 3, 0, CJ_DL_MAX_CHUNK, &count), 1);
    assert_int_equal(count, 1);
    assert_int_equal(cj_dl_group(huge, NULL, 3, 5, CJ_DL_MAX_CHUNK, &count), 0);
}

/* ---- hostile inputs --------------------------------------------------------------------------- */

static void test_truncation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        size_t len;
        uint8_t *p = tu_read_vector(vectors[i], &len);
        struct cj_err e = {0};
        assert_int_equal(decode_any(vkind[i], p, len, &e), 0);
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *q = malloc(cut ? cut : 1);
            memcpy(q, p, cut);
            if (decode_any(vkind[i], q, cut, &e) == 0) fail_msg("%s: prefix %zu decoded", vectors[i], cut);
            free(q);
        }
        for (size_t cut = 0; cut < len - CJ_LOBS_HDR_LEN; cut++) {
            size_t wl;
            uint8_t *w = wrap(p + CJ_LOBS_HDR_LEN, cut, &wl);
            if (decode_any(vkind[i], w, wl, &e) == 0) fail_msg("%s: body prefix %zu decoded", vectors[i], cut);
            free(w);
        }
        free(p);
    }
}


/* Wraps the body, optionally appends one datum section, decodes as kind. */
static int run(struct body *b, int kind, uint8_t marker, const uint8_t *id)
{
    size_t len;
    uint8_t *p = wrap(b->sb.data, b->sb.size, &len);
    msgpack_sbuffer_destroy(&b->sb);
    if (marker) {
        msgpack_sbuffer sb = {len, (char *)p, len};
        assert_int_equal(cj_lobs_write_datum(&sb, marker, 0, id, "xyz", 3, NULL), 0);
        p = (uint8_t *)sb.data;
        len = sb.size;
    }
    struct cj_err e = {0};
    int rc = decode_any(kind, p, len, &e);
    free(p);
    return rc;
}

static void datumref(struct body *b, const char *uuid, bool unwrap)
{
    msgpack_pack_map(&b->pk, 3);
    kstr(b, "__fobs_type__", CJ_FOBS_DATUMREF);
    str(b, "__fobs_data__");
    msgpack_pack_map(&b->pk, 1);
    str(b, "data");
    msgpack_pack_map(&b->pk, 2);
    kstr(b, "datum_id", uuid);
    str(b, "unwrap");
    if (unwrap) msgpack_pack_true(&b->pk); else msgpack_pack_false(&b->pk);
    kstr(b, "__fobs_dc__", CJ_DL_DATUMREF_DC);
}

static void test_hostile_replies(void **state)
{
    (void)state;
    struct body b;
    static const uint8_t id[16] = {0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x43, 0x33, 0x84, 0x44, 0, 0, 0, 0, 0x03, 0x21};
#define UUID "11111111-2222-4333-8444-000000000321"
    /* good: a DatumRef resolved against a BLOB */
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); datumref(&b, UUID, true);
    assert_int_equal(run(&b, REPLY, CJ_LOBS_BLOB, id), 0);
    /* DatumRef pointing to a missing datum */
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); datumref(&b, UUID, true);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_MISSING);
    /* ... to a TEXT datum */
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); datumref(&b, UUID, true);
    assert_int_equal(run(&b, REPLY, CJ_LOBS_TEXT, id), -CJ_E_TYPE);
    /* unwrap false; bad uuid */
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); datumref(&b, UUID, false);
    assert_int_equal(run(&b, REPLY, CJ_LOBS_BLOB, id), -CJ_E_INVALID);
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); datumref(&b, "nope", true);
    assert_int_equal(run(&b, REPLY, CJ_LOBS_BLOB, id), -CJ_E_INVALID);
    /* a plain map item / an int item */
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1);
    msgpack_pack_map(&b.pk, 1); kstr(&b, "a", "b");
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    body_init(&b, 2); kstr(&b, "status", "ok"); str(&b, "data"); msgpack_pack_array(&b.pk, 1); msgpack_pack_int(&b.pk, 3);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    /* data not an array; data missing from a data reply */
    body_init(&b, 2); kstr(&b, "status", "ok"); kstr(&b, "data", "abc");
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    body_init(&b, 1); kstr(&b, "status", "ok");
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_MISSING);
    body_init(&b, 1); kstr(&b, "status", "weird");   /* any other status is a data reply */
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_MISSING);
    /* state not a map */
    body_init(&b, 3); kstr(&b, "status", "ok"); kstr(&b, "state", "x"); str(&b, "data"); msgpack_pack_array(&b.pk, 0);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    /* status missing / not a str */
    body_init(&b, 0);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_MISSING);
    body_init(&b, 1); str(&b, "status"); msgpack_pack_int(&b.pk, 1);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    /* nonces: upper case, short, non-hex; confirm_expected without nonce */
    const char *bad_nonces[] = {"3B8CE1E44AE34BF392FA0B28539835F7", "3b8ce1e44ae34bf392fa0b28539835f", "3b8ce1e44ae34bf392fa0b28539835fg",
                                "3b8ce1e4-ae34-bf39-2fa0-b28539835f7"};
    for (size_t i = 0; i < 4; i++) {
        body_init(&b, 3); kstr(&b, "status", "eof"); str(&b, "confirm_expected"); msgpack_pack_true(&b.pk);
        kstr(&b, "confirm_nonce", bad_nonces[i]);
        assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_INVALID);
        body_init(&b, 3); kstr(&b, "ref_id", "R"); kstr(&b, "confirm", "success"); kstr(&b, "confirm_nonce", bad_nonces[i]);
        assert_int_equal(run(&b, REQ, 0, NULL), -CJ_E_INVALID);
    }
    body_init(&b, 2); kstr(&b, "status", "eof"); str(&b, "confirm_expected"); msgpack_pack_true(&b.pk);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_MISSING);
    body_init(&b, 2); kstr(&b, "status", "eof"); kstr(&b, "cancel_capable", "yes");
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
    /* body not a map */
    msgpack_sbuffer_init(&b.sb);
    msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);
    msgpack_pack_array(&b.pk, 0);
    assert_int_equal(run(&b, REPLY, 0, NULL), -CJ_E_TYPE);
#undef UUID
}

static void test_hostile_requests(void **state)
{
    (void)state;
    struct body b;
    struct cj_dl_request r;
    struct cj_err e = {0};
    size_t len;
    uint8_t *p;
#define DEC(expect_rc)                                            \
    do {                                                          \
        p = wrap(b.sb.data, b.sb.size, &len);                     \
        msgpack_sbuffer_destroy(&b.sb);                           \
        assert_int_equal(cj_dl_decode_request(p, len, &r, &e), expect_rc); \
        free(p);                                                  \
    } while (0)
    /* missing, empty, non-str, oversize ref_id: decoded, classified invalid_request */
    body_init(&b, 1); str(&b, "confirm_capable"); msgpack_pack_true(&b.pk);
    DEC(0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);
    body_init(&b, 1); kstr(&b, "ref_id", "");
    DEC(0);
    assert_false(r.ref_id_bad);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);
    body_init(&b, 1); str(&b, "ref_id"); msgpack_pack_int(&b.pk, 5);
    DEC(0);
    assert_true(r.ref_id_bad);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);
    char big[CJ_DL_REF_ID_MAX + 2];
    memset(big, 'r', sizeof big - 1);
    big[sizeof big - 1] = 0;
    body_init(&b, 1); kstr(&b, "ref_id", big);
    DEC(0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_INVALID_REQUEST);
    /* cancel must be literally true; confirm nil is no confirm; confirm of another value is a confirm */
    body_init(&b, 2); kstr(&b, "ref_id", "R"); kstr(&b, "cancel", "true");
    DEC(0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_PULL);
    body_init(&b, 3); kstr(&b, "ref_id", "R"); str(&b, "confirm"); msgpack_pack_nil(&b.pk); str(&b, "cancel"); msgpack_pack_true(&b.pk);
    DEC(0);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CANCEL);
    body_init(&b, 3); kstr(&b, "ref_id", "R"); str(&b, "confirm"); msgpack_pack_int(&b.pk, 1); str(&b, "cancel"); msgpack_pack_true(&b.pk);
    DEC(0);
    assert_int_equal(r.confirm, CJ_DL_CONFIRM_OTHER);
    assert_int_equal(cj_dl_classify(&r), CJ_DL_ACT_CONFIRM);
    /* state: nil is absent, a str is an error; confirm_capable must be a bool */
    body_init(&b, 2); kstr(&b, "ref_id", "R"); str(&b, "state"); msgpack_pack_nil(&b.pk);
    DEC(0);
    assert_int_equal(r.state.len, 0);
    body_init(&b, 2); kstr(&b, "ref_id", "R"); kstr(&b, "state", "s");
    DEC(-CJ_E_TYPE);
    body_init(&b, 2); kstr(&b, "ref_id", "R"); str(&b, "state"); msgpack_pack_array(&b.pk, 0);
    DEC(-CJ_E_TYPE);
    body_init(&b, 2); kstr(&b, "ref_id", "R"); str(&b, "confirm_capable"); msgpack_pack_int(&b.pk, 1);
    DEC(-CJ_E_TYPE);
    /* not a map */
    msgpack_sbuffer_init(&b.sb);
    msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);
    str(&b, "R");
    DEC(-CJ_E_TYPE);
#undef DEC

    /* next_start on hostile states */
    uint64_t s;
    struct cj_range sp;
#define STATE(expect_rc)                                    \
    do {                                                    \
        sp = (struct cj_range){0, b.sb.size};                \
        assert_int_equal(cj_dl_next_start((uint8_t *)b.sb.data, sp, &s, &e), expect_rc); \
        msgpack_sbuffer_destroy(&b.sb);                     \
    } while (0)
    body_init(&b, 0);
    STATE(0);
    assert_int_equal(s, 0);
    body_init(&b, 1); str(&b, "start"); msgpack_pack_int(&b.pk, 3);
    STATE(-CJ_E_MISSING);
    body_init(&b, 2); str(&b, "start"); msgpack_pack_int(&b.pk, -1); str(&b, "count"); msgpack_pack_int(&b.pk, 1);
    STATE(-CJ_E_INVALID);
    body_init(&b, 2); str(&b, "start"); msgpack_pack_uint64(&b.pk, UINT64_MAX); str(&b, "count"); msgpack_pack_int(&b.pk, 1);
    STATE(-CJ_E_LIMIT);
    body_init(&b, 2); kstr(&b, "start", "0"); str(&b, "count"); msgpack_pack_int(&b.pk, 1);
    STATE(-CJ_E_TYPE);
    body_init(&b, 3); str(&b, "start"); msgpack_pack_int(&b.pk, 4); str(&b, "count"); msgpack_pack_int(&b.pk, 3); kstr(&b, "x", "y");
    STATE(0);
    assert_int_equal(s, 7);
#undef STATE
}

static void test_source_failure(void **state)
{
    (void)state;
    struct body b;
    struct cj_dl_source_failure *sf = malloc(sizeof *sf);
    struct cj_err e = {0};
    size_t len;
    uint8_t *p;
#define DEC(expect_rc)                                                        \
    do {                                                                      \
        p = wrap(b.sb.data, b.sb.size, &len);                                 \
        msgpack_sbuffer_destroy(&b.sb);                                       \
        assert_int_equal(cj_dl_decode_source_failure(p, len, sf, &e), expect_rc); \
        free(p);                                                              \
    } while (0)
    /* plain array, long multi-byte reason cut at 1024 characters */
    char *reason = malloc(3 * 2000 + 1);
    for (int i = 0; i < 2000; i++) memcpy(reason + 3 * i, "\xe2\x82\xac", 3);   /* € */
    reason[6000] = 0;
    body_init(&b, 3); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 2);
    str(&b, "a"); str(&b, "b"); kstr(&b, "reason", reason);
    DEC(0);
    assert_false(sf->tuple_form);
    assert_int_equal(sf->n_ref_ids, 2);
    assert_string_equal(sf->ref_ids[1], "b");
    assert_true(sf->reason_cut);
    assert_int_equal(strlen(sf->reason), 3 * 1024);
    /* the encoder cuts too, and what it writes reads back */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    const char *ids[] = {"a"};
    assert_int_equal(cj_dl_encode_source_failure(&sb, "s.j.w", ids, 1, reason, &e), 0);
    assert_int_equal(cj_dl_decode_source_failure((uint8_t *)sb.data, sb.size, sf, &e), 0);
    assert_int_equal(strlen(sf->reason), 3 * 1024);
    assert_false(sf->reason_cut);
    msgpack_sbuffer_destroy(&sb);
    free(reason);
    /* 0 and 257 ref ids */
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 0);
    DEC(-CJ_E_INVALID);
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 257);
    for (int i = 0; i < 257; i++) str(&b, "r");
    DEC(-CJ_E_LIMIT);
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 256);
    for (int i = 0; i < 256; i++) str(&b, "r");
    DEC(0);
    assert_int_equal(sf->n_ref_ids, 256);
    /* element types, wrapper of another type, missing keys */
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 1); msgpack_pack_int(&b.pk, 1);
    DEC(-CJ_E_TYPE);
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 1); str(&b, "");
    DEC(-CJ_E_INVALID);
    body_init(&b, 2); kstr(&b, "source_fqcn", "s.j.w"); str(&b, "ref_ids"); msgpack_pack_map(&b.pk, 2);
    kstr(&b, "__fobs_type__", "set"); str(&b, "__fobs_data__"); msgpack_pack_array(&b.pk, 1); str(&b, "r");
    DEC(-CJ_E_TYPE);
    body_init(&b, 1); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 1); str(&b, "r");
    DEC(-CJ_E_MISSING);
    body_init(&b, 1); kstr(&b, "source_fqcn", "s.j.w");
    DEC(-CJ_E_MISSING);
    body_init(&b, 2); kstr(&b, "source_fqcn", ""); str(&b, "ref_ids"); msgpack_pack_array(&b.pk, 1); str(&b, "r");
    DEC(-CJ_E_INVALID);
#undef DEC
    free(sf);
}

static void test_encoder_refusals(void **state)
{
    (void)state;
    struct cj_err e = {0};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "pre", 3);
    assert_int_equal(cj_dl_encode_pull(&sb, "", true, NULL, 0, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_pull(&sb, NULL, true, NULL, 0, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_pull(&sb, "R", true, (const uint8_t *)"\x91\x00", 2, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_pull(&sb, "R", true, (const uint8_t *)"\x80\x80", 2, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_OK, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_terminal(&sb, CJ_DL_STATUS_EOF, "ABC", &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_confirm(&sb, "R", true, NULL, &e), -CJ_E_INVALID);
    assert_int_equal(cj_dl_encode_source_failure(&sb, "s", NULL, 0, "r", &e), -CJ_E_LIMIT);
    assert_int_equal(sb.size, 3);
    /* the legacy pull (confirmation off) omits confirm_capable */
    assert_int_equal(cj_dl_encode_pull(&sb, "R1", false, NULL, 0, &e), 0);
    struct cj_dl_request r;
    assert_int_equal(cj_dl_decode_request((uint8_t *)sb.data + 3, sb.size - 3, &r, &e), 0);
    assert_false(r.confirm_capable);
    assert_int_equal(sb.size, 3 + 10 + 11);
    msgpack_sbuffer_destroy(&sb);

    char n1[33], n2[33];
    assert_int_equal(cj_dl_new_nonce(n1), 0);
    assert_int_equal(cj_dl_new_nonce(n2), 0);
    assert_true(cj_dl_nonce_valid(n1, strlen(n1)));
    assert_string_not_equal(n1, n2);
    uint8_t id[16];
    assert_int_equal(cj_uuid4(id), 0);
    assert_int_equal(id[6] >> 4, 4);
    assert_int_equal(id[8] >> 6, 2);
    uint8_t h[26];
    cj_dl_datum_header(h, id, 5);
    assert_int_equal(h[0], 0x66);
    assert_int_equal(h[9], 21);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_vectors),   cmocka_unit_test(test_wire_examples),
        cmocka_unit_test(test_big_items),        cmocka_unit_test(test_plan_pieces),
        cmocka_unit_test(test_decode_vectors),   cmocka_unit_test(test_producer_flow),
        cmocka_unit_test(test_dispatch),         cmocka_unit_test(test_grouping),
        cmocka_unit_test(test_truncation),       cmocka_unit_test(test_hostile_replies),
        cmocka_unit_test(test_hostile_requests), cmocka_unit_test(test_source_failure),
        cmocka_unit_test(test_encoder_refusals),
    };
    return cmocka_run_group_tests_name("dlmsg", tests, NULL, NULL);
}
