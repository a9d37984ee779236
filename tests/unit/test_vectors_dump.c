/* SPDX-License-Identifier: Apache-2.0 */
/* test_vectors_dump.c — every payload vector decodes exactly as FLARE wrote it.
 *
 * Each tests/vectors/NN_*.txt was printed by a Python script from NVFlare's own
 * decoding of NN_*.bin.  We dump the .bin with util/mpdump and require our text
 * to equal the .txt from the "section 0:" line to the end, line for line (no
 * normalisation: section sizes, datum ids, every key, value and float repr,
 * and the shortened bytes values all match exactly). */
#include "testutil.h"
#include "util/mp.h"
#include "util/mpdump.h"

static const char *const vectors[] = {
    "00_min_dict_one_array_via_downloader", "01_builtin_wrappers",
    "02_server_task_shareable_via_downloader", "03_task_shareable_native",
    "04_cj_task_ready_lazy_reemit", "07_relay_spliced_task_ready",
    "08_large_bytes_blob_datum", "09_trainer_result_ready_flmodel",
    "10_cj_submit_update_lazy_reemit", "12_relay_task_ready_full_splice",
    "13_relay_submit_update_splice", "14_get_task_request",
    "15_aux_task_check_request", "16_get_task_reply_try_again",
    "20_capi_hello", "21_capi_hello_accepted", "22_capi_hello_rejected",
    "23_capi_session_ready", "24_capi_task_accepted", "25_capi_result_accepted",
    "26_capi_heartbeat", "27_capi_shutdown", "28_capi_log",
    "30_dl_pull_first", "31_dl_reply_data", "32_dl_pull_next",
    "33_dl_reply_eof_confirm", "34_dl_confirm", "35_dl_cancel",
    "36_dl_source_failure", "37_dl_reply_eof_legacy",
};

/* Returns the start of the next line (after '\n') or the end; *len = line length. */
static const char *next_line(const char *s, const char *end, size_t *len)
{
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    *len = (size_t)((nl ? nl : end) - s);
    return nl ? nl + 1 : end;
}

/* Compares two texts line by line; fails naming the first differing line. */
static void compare_lines(const char *name, const char *want, size_t wlen, const char *got, size_t glen)
{
    const char *w = want, *we = want + wlen, *g = got, *ge = got + glen;
    for (int line = 1; w < we || g < ge; line++) {
        size_t wl = 0, gl = 0;
        const char *wn = w < we ? next_line(w, we, &wl) : we;
        const char *gn = g < ge ? next_line(g, ge, &gl) : ge;
        if (w >= we || g >= ge || wl != gl || memcmp(w, g, wl) != 0)
            fail_msg("%s: line %d (from 'section 0:') differs\n  want: %.*s\n  got:  %.*s", name, line,
                     w < we ? (int)wl : 5, w < we ? w : "<EOF>", g < ge ? (int)gl : 5, g < ge ? g : "<EOF>");
        w = wn;
        g = gn;
    }
}

static void check_vector(const char *name)
{
    char fn[128];
    size_t blen, tlen, dlen;
    snprintf(fn, sizeof fn, "%s.bin", name);
    uint8_t *bin = tu_read_vector(fn, &blen);
    snprintf(fn, sizeof fn, "%s.txt", name);
    uint8_t *txt = tu_read_vector(fn, &tlen);

    const char *t = (const char *)txt, *te = t + tlen, *start = NULL;
    for (const char *s = t; s < te; ) {   /* the dump proper starts at "section 0:" */
        size_t l;
        const char *n = next_line(s, te, &l);
        if (l >= 10 && memcmp(s, "section 0:", 10) == 0) { start = s; break; }
        s = n;
    }
    if (!start) fail_msg("%s.txt has no 'section 0:' line", name);

    struct cj_err e = {0};
    char *dump = mpdump_lobs_str(bin, blen, &dlen, &e);
    if (!dump) fail_msg("%s: dump failed: %s", name, e.msg);
    compare_lines(name, start, (size_t)(te - start), dump, dlen);
    free(dump);
    free(txt);
    free(bin);
}

static void test_every_vector_dump(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) check_vector(vectors[i]);
}

static void check_float(double x, const char *want)
{
    char buf[64];
    mpdump_float_repr(x, buf, sizeof buf);
    if (strcmp(buf, want) != 0) fail_msg("repr(%.17g): want %s got %s", x, want, buf);
}

/* Python 3 repr(float) for the cases that have traps. */
static void test_float_repr(void **state)
{
    (void)state;
    check_float(1.0, "1.0");
    check_float(1.5, "1.5");
    check_float(0.9, "0.9");
    check_float(0.25, "0.25");
    check_float(-2.0, "-2.0");
    check_float(0.0, "0.0");
    check_float(-0.0, "-0.0");
    check_float(0.1, "0.1");
    check_float(0.1 + 0.2, "0.30000000000000004");
    check_float(1.0 / 3, "0.3333333333333333");
    check_float(0.0001, "0.0001");
    check_float(0.00001, "1e-05");
    check_float(0.000123, "0.000123");
    check_float(1.5e-7, "1.5e-07");
    check_float(1e15, "1000000000000000.0");
    check_float(1e16, "1e+16");
    check_float(1.2345e16, "1.2345e+16");
    check_float(123456789012345.6, "123456789012345.6");
    check_float(1e300 * 10, "1e+301");
    check_float(5e-324, "5e-324");
    check_float(1.7976931348623157e308, "1.7976931348623157e+308");
    check_float((double)0.1f, "0.10000000149011612");
    check_float(1.0 / 0.0, "inf");
    check_float(-1.0 / 0.0, "-inf");
    check_float(0.0 / 0.0, "nan");
    check_float(30.0, "30.0");
    check_float(100.0, "100.0");
}

static char *dump_hex(const char *hex)
{
    size_t n;
    uint8_t *b = tu_hex(hex, &n);
    struct cj_err e = {0};
    char *s = mpdump_lobs_str(b, n, NULL, &e);
    free(b);
    return s;
}

static void expect_dump(const char *hex, const char *want)
{
    char *s = dump_hex(hex);
    if (!s) fail_msg("dump of %s failed", hex);
    if (strcmp(s, want) != 0) fail_msg("dump of %s:\nwant:\n%s\ngot:\n%s", hex, want, s);
    free(s);
}

/* Repr corner cases: quote choice, escapes, shortening, ints, ext, non-str keys. */
static void test_scalars(void **state)
{
    (void)state;
    const char *h = "section 0: marker=100 dot=0 size_field=";
    char want[512];
    /* ["it's", b"a\"'\n", -1, 18446744073709551615, None, ExtType] */
    snprintf(want, sizeof want,
             "%s28 datum_id=None body_len=28\n    [\n      \"it's\"\n      b'a\"\\'\\n'\n      -1\n"
             "      18446744073709551615\n      None\n      ExtType(code=5, data=b'\\x01')\n      -128\n    ]\n", h);
    expect_dump("64 00 000000000000001c 97 a4 69 74 27 73 c4 04 61 22 27 0a ff cf ffffffffffffffff c0 d4 05 01 d0 80",
                want);
    /* {1: 'é\x7f', None: {}} */
    snprintf(want, sizeof want,
             "%s8 datum_id=None body_len=8\n    {\n      1: '\xc3\xa9\\x7f'\n      None:\n        {\n        }\n    }\n", h);
    expect_dump("64 00 0000000000000008 82 01 a3 c3 a9 7f c0 80", want);
    /* a 90-char str is shortened to 80 repr chars + ...<90> */
    char hex[1024] = "64 00 000000000000005c d9 5a";
    for (int i = 0; i < 90; i++) strcat(hex, " 61");
    char a79[80];
    memset(a79, 'a', 79);
    a79[79] = 0;
    snprintf(want, sizeof want, "%s92 datum_id=None body_len=92\n    '%s...<90>\n", h, a79);
    expect_dump(hex, want);
    /* shortening counts characters, not UTF-8 bytes: 90 x 'é' keeps 79 of them */
    strcpy(hex, "64 00 00000000000000b6 d9 b4");
    for (int i = 0; i < 90; i++) strcat(hex, " c3 a9");
    char e79[160] = "";
    for (int i = 0; i < 79; i++) strcat(e79, "\xc3\xa9");
    snprintf(want, sizeof want, "%s182 datum_id=None body_len=182\n    '%s...<90>\n", h, e79);
    expect_dump(hex, want);
    /* a TEXT datum cannot forge lines: control bytes and bad UTF-8 are escaped */
    snprintf(want, sizeof want,
             "%s1 datum_id=None body_len=1\n    None\n"
             "section 1: marker=101 dot=3 size_field=22 datum_id=00000000-0000-0000-0000-000000000000 body_len=6\n"
             "    text: a\\x0a\\x00\xc3\xa9\\xff\n", h);
    expect_dump("64 00 0000000000000001 c0 65 03 0000000000000016 00000000000000000000000000000000 61 0a 00 c3 a9 ff",
                want);
    /* TEXT + BLOB datums, the datum id as a UUID */
    snprintf(want, sizeof want,
             "%s1 datum_id=None body_len=1\n    None\n"
             "section 1: marker=101 dot=3 size_field=18 datum_id=00112233-4455-6677-8899-aabbccddeeff body_len=2\n"
             "    text: hi\n"
             "section 2: marker=102 dot=0 size_field=17 datum_id=00000000-0000-0000-0000-000000000000 body_len=1\n"
             "    blob: ab\n", h);
    expect_dump("64 00 0000000000000001 c0 65 03 0000000000000012 00112233445566778899aabbccddeeff 68 69"
                " 66 00 0000000000000011 00000000000000000000000000000000 ab", want);
}

/* Malformed containers and bodies fail with an error, never crash or loop. */
static void test_hostile(void **state)
{
    (void)state;
    const char *bad[] = {
        "",                                        /* empty */
        "64 00 00000000000000",                    /* header truncated */
        "65 00 0000000000000001 c0",               /* first section not MAIN */
        "64 00 0000000000000000",                  /* size 0 */
        "64 00 0000000000000005 c0",               /* size past the end */
        "64 00 0000000000000002 c0 c0",            /* trailing byte in the body */
        "64 00 0000000000000001 dd",               /* truncated array header */
        "64 00 0000000000000005 dd ffffffff",      /* array claims 4G elements */
        "64 00 0000000000000001 c1",               /* invalid type byte */
        "64 00 0000000000000001 c0 65 03 0000000000000010 00000000000000000000000000000000", /* empty datum */
        "64 00 0000000000000001 c0 64 00 0000000000000001 c0",   /* second MAIN */
        "64 00 0000000000000001 c0 70 00 0000000000000011 00000000000000000000000000000000 00", /* marker */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = dump_hex(bad[i]);
        if (s) fail_msg("hostile %zu (%s) dumped:\n%s", i, bad[i], s);
    }
    /* nesting deeper than the cap: 200 nested one-element arrays */
    size_t n = 10 + 201;
    uint8_t *b = calloc(1, n);
    b[0] = 0x64;
    b[9] = 201;
    memset(b + 10, 0x91, 200);
    b[210] = 0xc0;
    struct cj_err e = {0};
    char *s = mpdump_lobs_str(b, n, NULL, &e);
    assert_null(s);
    assert_int_equal(e.code, CJ_E_LIMIT);
    /* 100 levels are fine */
    b[9] = 101;
    b[110] = 0xc0;
    s = mpdump_lobs_str(b, 111, NULL, &e);
    assert_non_null(s);
    free(s);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_vector_dump),
        cmocka_unit_test(test_float_repr),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests_name("vectors_dump", tests, NULL, NULL);
}
