/* SPDX-License-Identifier: Apache-2.0 */
/* test_parse.c — the strict value parsers: durations, sizes, integers, booleans,
 * modes, text, edit distance, endpoints. */
#include "testutil.h"
#include "util/parse.h"

static void dur_ok(const char *s, double want)
{
    double v = -1;
    const char *why = NULL;
    if (cj_parse_duration(s, &v, &why) != 0) fail_msg("duration '%s' refused: %s", s, why);
    if (v != want) fail_msg("duration '%s' = %.17g, want %.17g", s, v, want);
}

static void dur_bad(const char *s, const char *why_part)
{
    double v = 42;
    const char *why = NULL;
    if (cj_parse_duration(s, &v, &why) == 0) fail_msg("duration '%s' accepted as %g", s, v);
    assert_true(v == 42);                       /* untouched on failure */
    assert_non_null(why);
    if (!strstr(why, why_part)) fail_msg("duration '%s': '%s' lacks '%s'", s, why, why_part);
}

static void test_duration(void **state)
{
    (void)state;
    dur_ok("10", 10);
    dur_ok("0", 0);
    dur_ok("0.5", 0.5);
    dur_ok("0.1", 0.1);
    dur_ok(".25", 0.25);
    dur_ok("3.", 3);
    dur_ok("0010", 10);
    dur_ok("0.123456789", 0.123456789);
    dur_ok("1000000000", 1e9);
    dur_ok("000000000000001.5", 1.5);
    dur_bad("-1", "negative");
    dur_bad("-0.5", "negative");
    dur_bad("1000000000.5", "too large");
    dur_bad("99999999999", "too large");
    dur_bad("123456789012345678901234567890", "too large");
    const char *junk[] = {"", ".", "1e3", "inf", "nan", "NaN", "0x10", " 1", "1 ", "+1",
                          "1.2.3", "1s", "10ms", "1,5", "abc", "1-"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) dur_bad(junk[i], "expected seconds");
}

static void size_ok(const char *s, int64_t want)
{
    int64_t v = -1;
    const char *why = NULL;
    if (cj_parse_size(s, &v, &why) != 0) fail_msg("size '%s' refused: %s", s, why);
    if (v != want) fail_msg("size '%s' = %lld, want %lld", s, (long long)v, (long long)want);
}

static void size_bad(const char *s, const char *why_part)
{
    int64_t v = 42;
    const char *why = NULL;
    if (cj_parse_size(s, &v, &why) == 0) fail_msg("size '%s' accepted as %lld", s, (long long)v);
    assert_true(v == 42);
    if (!strstr(why, why_part)) fail_msg("size '%s': '%s' lacks '%s'", s, why, why_part);
}

static void test_size(void **state)
{
    (void)state;
    size_ok("0", 0);
    size_ok("4096", 4096);
    size_ok("1K", 1024);
    size_ok("1k", 1024);
    size_ok("64M", 64LL << 20);
    size_ok("2G", 2147483648LL);
    size_ok("2g", 2147483648LL);
    size_ok("9223372036854775807", INT64_MAX);
    size_ok("8589934591G", INT64_MAX - ((1LL << 30) - 1));
    size_bad("9223372036854775808", "too large");
    size_bad("99999999999999999999999", "too large");
    size_bad("8589934592G", "too large");
    size_bad("9007199254740992K", "too large");
    size_bad("-1", "negative");
    const char *junk[] = {"", "K", "1KB", "1KiB", "1.5M", " 1", "1 ", "+1", "1T", "0x10", "1MM", "M1"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) size_bad(junk[i], "expected bytes");
}

static void test_int(void **state)
{
    (void)state;
    long long v;
    assert_int_equal(cj_parse_int("1", &v, NULL), 0);
    assert_true(v == 1);
    assert_int_equal(cj_parse_int("-3", &v, NULL), 0);
    assert_true(v == -3);
    assert_int_equal(cj_parse_int("9223372036854775807", &v, NULL), 0);
    assert_true(v == INT64_MAX);
    const char *bad[] = {"", "-", "1x", " 1", "+1", "1.0", "9223372036854775808", "0x1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = 7;
        if (cj_parse_int(bad[i], &v, NULL) == 0) fail_msg("int '%s' accepted", bad[i]);
        assert_true(v == 7);
    }
}

static void test_bool(void **state)
{
    (void)state;
    const char *yes[] = {"true", "yes", "on", "1", "TRUE", "Yes", "On"};
    const char *no[] = {"false", "no", "off", "0", "FALSE", "No", "OFF"};
    const char *bad[] = {"", "2", "tru", "y", "n", "enabled", " true", "true "};
    bool b;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        b = false;
        assert_int_equal(cj_parse_bool(yes[i], &b, NULL), 0);
        assert_true(b);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        b = true;
        assert_int_equal(cj_parse_bool(no[i], &b, NULL), 0);
        assert_false(b);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why = NULL;
        assert_int_equal(cj_parse_bool(bad[i], &b, &why), -1);
        assert_non_null(strstr(why, "true/false"));
    }
}

static void test_mode(void **state)
{
    (void)state;
    unsigned m;
    assert_int_equal(cj_parse_mode("0660", &m, NULL), 0);
    assert_int_equal(m, 0660);
    assert_int_equal(cj_parse_mode("600", &m, NULL), 0);
    assert_int_equal(m, 0600);
    assert_int_equal(cj_parse_mode("07777", &m, NULL), 0);
    assert_int_equal(m, 07777);
    assert_int_equal(cj_parse_mode("0", &m, NULL), 0);
    assert_int_equal(m, 0);
    const char *why = NULL;
    assert_int_equal(cj_parse_mode("10000", &m, &why), -1);
    assert_non_null(strstr(why, "too large"));
    const char *bad[] = {"", "8", "0o660", "0x1b6", "066600", "-1", " 660", "66a"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = 5;
        if (cj_parse_mode(bad[i], &m, NULL) == 0) fail_msg("mode '%s' accepted", bad[i]);
        assert_int_equal(m, 5);
    }
}

static void test_text(void **state)
{
    (void)state;
    assert_true(cj_text_ok(""));
    assert_true(cj_text_ok("plain /path with spaces;=:"));
    assert_true(cj_text_ok("caf\xc3\xa9"));                 /* é */
    assert_true(cj_text_ok("\xe2\x82\xac"));                /* € */
    assert_true(cj_text_ok("\xf0\x9f\x98\x80"));            /* U+1F600 */
    assert_false(cj_text_ok("a\x01z"));
    assert_false(cj_text_ok("tab\there"));
    assert_false(cj_text_ok("del\x7f"));
    assert_false(cj_text_ok("\xc3"));                       /* truncated */
    assert_false(cj_text_ok("\xc0\x80"));                   /* overlong NUL */
    assert_false(cj_text_ok("\xe0\x80\xaf"));               /* overlong */
    assert_false(cj_text_ok("\xed\xa0\x80"));               /* surrogate */
    assert_false(cj_text_ok("\xf4\x90\x80\x80"));           /* above U+10FFFF */
    assert_false(cj_text_ok("\xff"));
    assert_false(cj_text_ok("\x80"));
}

static void test_levenshtein(void **state)
{
    (void)state;
    assert_int_equal(cj_levenshtein("kitten", "sitting"), 3);
    assert_int_equal(cj_levenshtein("", "abc"), 3);
    assert_int_equal(cj_levenshtein("abc", ""), 3);
    assert_int_equal(cj_levenshtein("same", "same"), 0);
    assert_int_equal(cj_levenshtein("heartbeat_timout", "heartbeat_timeout"), 1);
    assert_int_equal(cj_levenshtein("uptream", "upstream"), 1);
    assert_int_equal(cj_levenshtein("flaw", "lawn"), 2);
    char a[200], b[200];
    memset(a, 'a', 199); a[199] = '\0';
    memset(b, 'a', 99); b[99] = '\0';
    assert_true(cj_levenshtein(a, b) >= 100);             /* bounded work, still far apart */
    assert_true(cj_levenshtein(a, "x") >= 198);
}

static void ep_ok(const char *s, unsigned allowed, int kind, const char *addr, unsigned port,
                  const char *canon)
{
    struct cj_endpoint e;
    const char *why = NULL;
    char buf[300];
    if (cj_parse_endpoint(s, allowed, &e, &why) != 0) fail_msg("endpoint '%s' refused: %s", s, why);
    assert_int_equal(e.kind, kind);
    assert_string_equal(e.addr, addr);
    assert_int_equal(e.port, port);
    cj_endpoint_format(&e, buf, sizeof buf);
    assert_string_equal(buf, canon ? canon : s);
}

static void ep_bad(const char *s, unsigned allowed, const char *why_part)
{
    struct cj_endpoint e = {.kind = 99};
    const char *why = NULL;
    if (cj_parse_endpoint(s, allowed, &e, &why) == 0) fail_msg("endpoint '%s' accepted", s);
    assert_int_equal(e.kind, 99);
    if (!strstr(why, why_part)) fail_msg("endpoint '%s': '%s' lacks '%s'", s, why, why_part);
}

static void test_endpoint(void **state)
{
    (void)state;
    const unsigned all = CJ_EP_UNIX | CJ_EP_TCP | CJ_EP_STCP;
    ep_ok("unix:/run/x.sock", all, CJ_EP_UNIX, "/run/x.sock", 0, NULL);
    ep_ok("unix:rel.sock", all, CJ_EP_UNIX, "rel.sock", 0, NULL);
    ep_ok("uds://run/x.sock", all, CJ_EP_UNIX, "/run/x.sock", 0, NULL);    /* FLARE's URL form: a netloc */
    ep_ok("uds:///run/x.sock", all, CJ_EP_UNIX, "/run/x.sock", 0, "uds://run/x.sock");
    ep_ok("uds:////x:0", all, CJ_EP_UNIX, "/x:0", 0, "uds://x:0");
    ep_bad("uds://", all, "empty socket path");
    ep_bad("uds:///", all, "empty socket path");
    ep_bad("uds:///run/x.sock?a=1", all, "cannot hold '?' or '#'");
    ep_bad("uds://x#y", all, "cannot hold '?' or '#'");
    ep_bad("uds:///x", CJ_EP_TCP | CJ_EP_STCP, "uds:// is not allowed");
    ep_ok("tcp://127.0.0.1:8002", all, CJ_EP_TCP, "127.0.0.1", 8002, NULL);
    ep_ok("stcp://fl.example.org:443", all, CJ_EP_STCP, "fl.example.org", 443, NULL);
    ep_ok("tcp://[::1]:80", all, CJ_EP_TCP, "::1", 80, NULL);
    ep_ok("tcp://localhost:65535", all, CJ_EP_TCP, "localhost", 65535, NULL);
    ep_ok("tcp://h:0080", all, CJ_EP_TCP, "h", 80, "tcp://h:80");
    ep_bad("tcp://::1:80", all, "brackets");
    ep_bad("tcp://[::1:80", all, "missing ']'");
    ep_bad("tcp://[nope]:80", all, "invalid IPv6");
    ep_bad("tcp://[::1]80", all, "missing :PORT");
    ep_bad("tcp://h", all, "missing :PORT");
    ep_bad("tcp://h:", all, "PORT");
    ep_bad("tcp://h:0", all, "PORT");
    ep_ok("tcp://127.0.0.1:0", CJ_EP_TCP | CJ_EP_PORT0, CJ_EP_TCP, "127.0.0.1", 0, NULL);   /* a listener: any free port */
    ep_bad("tcp://h:65536", CJ_EP_TCP | CJ_EP_PORT0, "0..65535");
    ep_bad("tcp://h:65536", all, "PORT");
    ep_bad("tcp://h:123456", all, "PORT");
    ep_bad("tcp://h:80/path", all, "PORT");
    ep_bad("tcp://:80", all, "missing host");
    ep_bad("tcp://bad host:80", all, "invalid host");
    ep_bad("http://h:80", all, "http:// is not allowed here");
    ep_bad("ftp://h:80", all, "expected unix:PATH, tcp://HOST:PORT or stcp://HOST:PORT");
    ep_bad("ftp://h:80", CJ_EP_NET, "expected unix:PATH or tcp, stcp, http, https, grpc or grpcs://HOST:PORT");
    static const char *const schemes[] = {"tcp", "stcp", "http", "https", "grpc", "grpcs"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) { /* every network scheme round-trips */
        char url[64], back[64];
        struct cj_endpoint e;
        const char *why = NULL;
        snprintf(url, sizeof url, "%s://[::1]:8002", schemes[i]);
        assert_int_equal(cj_parse_endpoint(url, CJ_EP_NET, &e, &why), 0);
        assert_string_equal(cj_ep_scheme(e.kind), schemes[i]);
        assert_int_equal(cj_ep_tls(e.kind), i % 2 == 1);
        cj_endpoint_format(&e, back, sizeof back);
        assert_string_equal(back, url);
    }
    ep_bad("", all, "expected unix:PATH");
    ep_bad("unix:", all, "empty socket path");
    ep_bad("stcp://h:1", CJ_EP_UNIX | CJ_EP_TCP, "stcp:// is not allowed");
    ep_bad("unix:/x", CJ_EP_TCP | CJ_EP_STCP, "unix: is not allowed");
    ep_bad("tcp://h:1", CJ_EP_UNIX, "tcp:// is not allowed");
    char longp[200] = "unix:/";
    memset(longp + 6, 'p', 120);
    longp[126] = '\0';
    ep_bad(longp, all, "longer than 107");
    char longu[200] = "uds:///";
    memset(longu + 7, 'p', 107);                     /* 107 bytes once the leading '/' is added: too long */
    longu[114] = '\0';
    ep_bad(longu, all, "longer than 107");
    longu[113] = '\0';                              /* 106 + '/': the longest path */
    char canon[200];
    snprintf(canon, sizeof canon, "uds://%s", longu + 7);
    ep_ok(longu, all, CJ_EP_UNIX, longu + 6, 0, canon);
    char longh[300] = "tcp://";
    memset(longh + 6, 'h', 260);
    strcpy(longh + 266, ":80");
    ep_bad(longh, all, "too long");
}

static void test_loopback(void **state)
{
    (void)state;
    const char *yes[] = {"tcp://127.0.0.1:1", "tcp://127.5.6.7:1", "tcp://localhost:1",
                         "tcp://LOCALHOST:1", "tcp://[::1]:1", "tcp://[::ffff:127.0.0.1]:1", "unix:/x"};
    const char *no[] = {"tcp://10.0.0.1:1", "tcp://0.0.0.0:1", "tcp://128.0.0.1:1", "tcp://[::]:1",
                        "tcp://[::2]:1", "tcp://example.com:1", "tcp://localhost.evil.com:1",
                        "tcp://[::ffff:10.0.0.1]:1"};
    struct cj_endpoint e;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        assert_int_equal(cj_parse_endpoint(yes[i], CJ_EP_UNIX | CJ_EP_TCP, &e, NULL), 0);
        if (!cj_endpoint_is_loopback(&e)) fail_msg("%s should be loopback", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        assert_int_equal(cj_parse_endpoint(no[i], CJ_EP_TCP, &e, NULL), 0);
        if (cj_endpoint_is_loopback(&e)) fail_msg("%s should not be loopback", no[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration), cmocka_unit_test(test_size),
        cmocka_unit_test(test_int),      cmocka_unit_test(test_bool),
        cmocka_unit_test(test_mode),     cmocka_unit_test(test_text),
        cmocka_unit_test(test_levenshtein), cmocka_unit_test(test_endpoint),
        cmocka_unit_test(test_loopback),
    };
    return cmocka_run_group_tests_name("parse", tests, NULL, NULL);
}
