/* SPDX-License-Identifier: Apache-2.0 */
/* test_bootstrap.c — bootstrap file (write: mode 0600, atomic, read back equal;
 * parse: required keys, types, hostile JSON), launch tokens, the JSON object
 * reader, and credentials loading (owner-only file, both formats, env fallback,
 * defaults, redaction). */
#include "testutil.h"
#include "util/json.h"
#include "fl/bootstrap.h"
#include "fl/creds.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cj_test_bootstrap.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir);
    return 0;
}

static int count_entries(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void sample(struct cj_bootstrap *b)
{
    cj_bootstrap_defaults(b);
    snprintf(b->connect_url, sizeof b->connect_url, "tcp://127.0.0.1:8102");
    snprintf(b->cj_fqcn, sizeof b->cj_fqcn, "site-1.job-7f3a");
    b->cj_pid = 4242;
    snprintf(b->trainer_fqcn, sizeof b->trainer_fqcn, "site-1.job-7f3a.client_api_trainer_1");
    assert_int_equal(cj_bootstrap_new_token(b->launch_token), 0);
    snprintf(b->job_id, sizeof b->job_id, "job-7f3a");
    snprintf(b->site_name, sizeof b->site_name, "site-1");
    b->secure_mode = true;
    b->task_exchange.launch_once = true;
    snprintf(b->task_exchange.exchange_format, sizeof b->task_exchange.exchange_format, "pytorch");
    b->memory_gc_rounds = 3;
}

static void assert_same(const struct cj_bootstrap *a, const struct cj_bootstrap *b)
{
    assert_int_equal(a->schema_version, b->schema_version);
    assert_string_equal(a->execution_mode, b->execution_mode);
    assert_string_equal(a->connect_url, b->connect_url);
    assert_string_equal(a->cj_fqcn, b->cj_fqcn);
    assert_int_equal(a->cj_pid, b->cj_pid);
    assert_string_equal(a->trainer_fqcn, b->trainer_fqcn);
    assert_string_equal(a->launch_token, b->launch_token);
    assert_string_equal(a->job_id, b->job_id);
    assert_string_equal(a->site_name, b->site_name);
    assert_int_equal(a->secure_mode, b->secure_mode);
    const struct cj_bootstrap_task_exchange *x = &a->task_exchange, *y = &b->task_exchange;
    assert_int_equal(x->train_with_eval, y->train_with_eval);
    assert_string_equal(x->exchange_format, y->exchange_format);
    assert_string_equal(x->server_expected_format, y->server_expected_format);
    assert_string_equal(x->transfer_type, y->transfer_type);
    assert_string_equal(x->train_task_name, y->train_task_name);
    assert_string_equal(x->eval_task_name, y->eval_task_name);
    assert_string_equal(x->submit_model_task_name, y->submit_model_task_name);
    assert_int_equal(x->launch_once, y->launch_once);
    assert_int_equal(a->memory_gc_rounds, b->memory_gc_rounds);
    assert_int_equal(a->cuda_empty_cache, b->cuda_empty_cache);
}

/* ---- tokens --------------------------------------------------------------------------- */

static void test_token(void **state)
{
    (void)state;
    char a[CJ_BOOTSTRAP_TOKEN_LEN + 1], b[CJ_BOOTSTRAP_TOKEN_LEN + 1];
    assert_int_equal(cj_bootstrap_new_token(a), 0);
    assert_int_equal(cj_bootstrap_new_token(b), 0);
    assert_int_equal(strlen(a), 43);
    for (int i = 0; i < 43; i++)
        assert_non_null(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]));
    assert_string_not_equal(a, b);
    /* the last character carries 4 bits + 2 zero bits: it is one of 16 */
    assert_non_null(strchr("AEIMQUYcgkosw048", a[42]));
}

/* ---- write / read -------------------------------------------------------------------------- */

static void test_write_read(void **state)
{
    (void)state;
    struct cj_bootstrap b, r;
    struct cj_err e = {0};
    sample(&b);
    char path[512];
    snprintf(path, sizeof path, "%s/client_api_bootstrap_1.json", tmpdir);
    mode_t old = umask(0);   /* a permissive umask must not widen the mode */
    int rc = cj_bootstrap_write(path, &b, &e);
    umask(old);
    if (rc) fail_msg("%s", e.msg);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(count_entries(), 1);   /* no temporary file left */
    assert_int_equal(cj_bootstrap_read(path, &r, &e), 0);
    assert_same(&b, &r);

    /* rewrite over an existing file (a wider one, too): still 0600, still one file */
    chmod(path, 0644);
    old = umask(077);
    b.cj_pid = 0;   /* not written */
    b.secure_mode = false;
    rc = cj_bootstrap_write(path, &b, &e);
    umask(old);
    assert_int_equal(rc, 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(count_entries(), 1);
    assert_int_equal(cj_bootstrap_read(path, &r, &e), 0);
    assert_same(&b, &r);

    /* the text: a JSON object whose first keys are the envelope */
    FILE *f = fopen(path, "r");
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_true(!strncmp(text, "{\"schema_version\": 1, \"execution_mode\": \"external_process\", ", 60));
    assert_null(strstr(text, "cj_pid"));

    /* a bootstrap that fails the checks is not written and leaves nothing behind */
    b.trainer_fqcn[0] = 0;
    char path2[512];
    snprintf(path2, sizeof path2, "%s/client_api_bootstrap_2.json", tmpdir);
    assert_int_equal(cj_bootstrap_write(path2, &b, &e), -CJ_E_MISSING);
    assert_non_null(strstr(e.msg, "trainer_fqcn"));
    assert_int_equal(count_entries(), 1);
    /* a directory that does not exist: error, nothing left */
    snprintf(path2, sizeof path2, "%s/nope/x.json", tmpdir);
    sample(&b);
    assert_int_equal(cj_bootstrap_write(path2, &b, &e), -CJ_E_INVALID);
    assert_int_equal(count_entries(), 1);
    /* the token never shows in an error */
    b.job_id[0] = 0;
    assert_int_equal(cj_bootstrap_write(path, &b, &e), -CJ_E_MISSING);
    assert_null(strstr(e.msg, b.launch_token));
    unlink(path);
}

/* A job description's extra keys: one replaces the task_exchange the table
 * writes, another follows the table's keys; the reader takes the new values. */
static void test_extra_keys(void **state)
{
    (void)state;
    struct cj_bootstrap b, r;
    struct cj_err e = {0};
    sample(&b);
    static const char extra[] = "task_exchange\0{\"exchange_format\": \"raw\", \"launch_once\": false}\0"
                                "site_note\0[1, \"x\"]";
    b.extra = extra;
    b.extrac = 2;
    char *json;
    size_t len;
    if (cj_bootstrap_format(&b, &json, &len, &e)) fail_msg("%s", e.msg);
    assert_non_null(strstr(json, "\"task_exchange\": {\"exchange_format\": \"raw\", \"launch_once\": false}"));
    assert_null(strstr(json, "train_with_eval"));   /* the table's task_exchange is not written too */
    const char *mg = strstr(json, "\"memory_gc_rounds\""), *note = strstr(json, "\"site_note\": [1, \"x\"]}");
    assert_true(mg && note && mg < note);
    assert_int_equal(cj_bootstrap_parse(json, len, &r, &e), 0);
    assert_string_equal(r.task_exchange.exchange_format, "raw");
    assert_false(r.task_exchange.launch_once);
    assert_string_equal(r.task_exchange.train_task_name, "train");   /* absent: the default */
    explicit_bzero(json, len);
    free(json);
}

static void test_read_errors(void **state)
{
    (void)state;
    struct cj_bootstrap r;
    struct cj_err e = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/missing.json", tmpdir);
    assert_int_equal(cj_bootstrap_read(path, &r, &e), -CJ_E_INVALID);
    assert_int_equal(cj_bootstrap_read(tmpdir, &r, &e), -CJ_E_INVALID);   /* a directory */
    snprintf(path, sizeof path, "%s/big.json", tmpdir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < CJ_BOOTSTRAP_MAX_SIZE + 10; i++) fputc(' ', f);
    fclose(f);
    assert_int_equal(cj_bootstrap_read(path, &r, &e), -CJ_E_LIMIT);
    unlink(path);
}

/* ---- parse -------------------------------------------------------------------------------- */

#define GOOD_HEAD "{\"schema_version\": 1, \"execution_mode\": \"external_process\", "
#define GOOD_IDS                                                                              \
    "\"connect_url\": \"unix:/run/cjrelay/j/w.sock\", \"cj_fqcn\": \"s.j\", \"trainer_fqcn\": \"s.j.w\", " \
    "\"launch_token\": \"tok\", \"job_id\": \"j\", \"site_name\": \"s\""

static int parse(const char *json, struct cj_bootstrap *b, struct cj_err *e)
{
    return cj_bootstrap_parse(json, strlen(json), b, e);
}

static void test_parse(void **state)
{
    (void)state;
    struct cj_bootstrap b;
    struct cj_err e = {0};
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS "}", &b, &e), 0);
    assert_string_equal(b.connect_url, "unix:/run/cjrelay/j/w.sock");
    assert_int_equal(b.cj_pid, 0);
    assert_true(b.task_exchange.launch_once);   /* defaults kept */
    assert_string_equal(b.task_exchange.train_task_name, "train");

    /* unknown keys (any value) tolerated, duplicates keep the last, escapes decoded */
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"x\": [1, {\"a\": null}, -2.5e3, true], \"job_id\": \"j\\u00e9\\ud83d\\ude00\\n\""
                           ", \"task_exchange\": {\"launch_once\": false, \"transfer_type\": \"DIFF\", \"other\": {}}}",
                           &b, &e), 0);
    assert_string_equal(b.job_id, "j\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_false(b.task_exchange.launch_once);
    assert_string_equal(b.task_exchange.transfer_type, "DIFF");

    /* the envelope */
    assert_int_equal(parse("{\"execution_mode\": \"external_process\", " GOOD_IDS "}", &b, &e), -CJ_E_MISSING);
    assert_non_null(strstr(e.msg, "schema_version"));
    assert_int_equal(parse("{\"schema_version\": 1, " GOOD_IDS "}", &b, &e), -CJ_E_MISSING);
    assert_int_equal(parse("{\"schema_version\": 2, \"execution_mode\": \"external_process\", " GOOD_IDS "}", &b, &e),
                     -CJ_E_INVALID);
    assert_int_equal(parse("{\"schema_version\": \"1\", \"execution_mode\": \"external_process\", " GOOD_IDS "}", &b, &e),
                     -CJ_E_TYPE);
    assert_int_equal(parse("{\"schema_version\": 1.0, \"execution_mode\": \"external_process\", " GOOD_IDS "}", &b, &e),
                     -CJ_E_TYPE);
    assert_int_equal(parse("{\"schema_version\": 1, \"execution_mode\": \"in_process\", " GOOD_IDS "}", &b, &e),
                     -CJ_E_INVALID);
    /* required non-empty strings */
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"cj_fqcn\": \"\"}", &b, &e), -CJ_E_MISSING);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"launch_token\": \"\"}", &b, &e), -CJ_E_MISSING);
    assert_int_equal(parse(GOOD_HEAD "\"cj_fqcn\": \"s.j\"}", &b, &e), -CJ_E_MISSING);
    /* types */
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"secure_mode\": 1}", &b, &e), -CJ_E_TYPE);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"cj_pid\": \"12\"}", &b, &e), -CJ_E_TYPE);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"cj_pid\": -5}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"task_exchange\": []}", &b, &e), -CJ_E_TYPE);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"task_exchange\": {\"launch_once\": \"yes\"}}", &b, &e), -CJ_E_TYPE);
    /* oversize string */
    char *big = malloc(CJ_BOOTSTRAP_ID_MAX + 1024);
    snprintf(big, CJ_BOOTSTRAP_ID_MAX + 1024, GOOD_HEAD GOOD_IDS ", \"site_name\": \"%0*d\"}", CJ_BOOTSTRAP_ID_MAX + 1, 0);
    assert_int_equal(parse(big, &b, &e), -CJ_E_LIMIT);
    free(big);
    /* JSON errors */
    assert_int_equal(parse("", &b, &e), -CJ_E_TRUNCATED);
    assert_int_equal(parse("[]", &b, &e), -CJ_E_TYPE);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ",}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS "} x", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": \"\\u0000\"}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": \"\\ud800\"}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": \"\xc0\xaf\"}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": \"tab\there\"}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": 01}", &b, &e), -CJ_E_INVALID);
    assert_int_equal(parse(GOOD_HEAD GOOD_IDS ", \"a\": NaN}", &b, &e), -CJ_E_INVALID);
    /* nesting bound */
    char deep[200];
    size_t o = (size_t)snprintf(deep, sizeof deep, "{\"a\": ");
    for (int i = 0; i < CJ_JSON_MAX_DEPTH + 1; i++) deep[o++] = '[';
    for (int i = 0; i < CJ_JSON_MAX_DEPTH + 1; i++) deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = 0;
    assert_int_equal(parse(deep, &b, &e), -CJ_E_LIMIT);

    /* every strict prefix of a valid file fails */
    const char *good = GOOD_HEAD GOOD_IDS ", \"task_exchange\": {\"launch_once\": true}}";
    for (size_t cut = 0; cut < strlen(good); cut++)
        if (cj_bootstrap_parse(good, cut, &b, &e) == 0) fail_msg("prefix %zu parsed", cut);

    /* format -> parse gives the same struct */
    struct cj_bootstrap s;
    sample(&s);
    snprintf(s.connect_url, sizeof s.connect_url, "unix:/tmp/a \"quoted\" \\ path\x01");
    char *json;
    size_t len;
    assert_int_equal(cj_bootstrap_format(&s, &json, &len, &e), 0);
    assert_int_equal(cj_bootstrap_parse(json, len, &b, &e), 0);
    assert_same(&s, &b);
    free(json);
    snprintf(s.site_name, sizeof s.site_name, "bad\xff");
    assert_int_equal(cj_bootstrap_format(&s, &json, &len, &e), -CJ_E_INVALID);
}

/* ---- credentials ------------------------------------------------------------------------------ */

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void clear_env(void)
{
    unsetenv(CJ_CREDS_ENV_TOKEN);
    unsetenv(CJ_CREDS_ENV_SIGNATURE);
    unsetenv(CJ_CREDS_ENV_SSID);
}

static void test_creds(void **state)
{
    (void)state;
    struct cj_creds *c = calloc(1, sizeof *c);
    struct cj_err e = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/creds.ini", tmpdir);
    clear_env();

    /* nothing anywhere: NA / NA / "" with flags */
    assert_int_equal(cj_creds_load(NULL, c, &e), 0);
    assert_string_equal(c->token, "NA");
    assert_string_equal(c->signature, "NA");
    assert_string_equal(c->ssid, "");
    assert_int_equal(c->flags, CJ_CREDS_TOKEN_MISSING | CJ_CREDS_SIGNATURE_MISSING | CJ_CREDS_SSID_MISSING);

    /* environment */
    setenv(CJ_CREDS_ENV_TOKEN, "env-token", 1);
    setenv(CJ_CREDS_ENV_SIGNATURE, "env-sig", 1);
    setenv(CJ_CREDS_ENV_SSID, "env-ssid", 1);
    assert_int_equal(cj_creds_load("", c, &e), 0);
    assert_string_equal(c->token, "env-token");
    assert_int_equal(c->token_src, CJ_CREDS_ENV);
    assert_int_equal(c->flags, 0);

    /* a 0644 file is refused, naming the file and its mode */
    write_file(path, "token = file-token\n", 0644);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "0644"));
    assert_string_equal(c->token, "");   /* cleared */
    write_file(path, "token = file-token\n", 0640);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);

    /* 0600 key = value: file wins per key, env fills the rest */
    write_file(path, "# job credentials\n\n  token =  file-token  \r\n; comment\nssid=\"quoted ssid\"\n", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), 0);
    assert_string_equal(c->token, "file-token");
    assert_int_equal(c->token_src, CJ_CREDS_FILE);
    assert_string_equal(c->signature, "env-sig");
    assert_int_equal(c->signature_src, CJ_CREDS_ENV);
    assert_string_equal(c->ssid, "quoted ssid");
    char d[128];
    assert_string_equal(cj_creds_describe(c, d, sizeof d), "token from file, token_signature from env, ssid from file");

    /* JSON form, 0400 */
    chmod(path, 0600);
    write_file(path, " {\"token\": \"jt\", \"token_signature\": \"js\", \"other\": 5}", 0400);
    assert_int_equal(cj_creds_load(path, c, &e), 0);
    assert_string_equal(c->token, "jt");
    assert_string_equal(c->signature, "js");
    assert_string_equal(c->ssid, "env-ssid");
    chmod(path, 0600);
    write_file(path, "{\"token\": 5}", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_TYPE);
    write_file(path, "{\"token\": \"a\\nb\"}", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);

    /* INI errors name file:line */
    write_file(path, "token = a\ntokne = b\n", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);
    assert_non_null(strstr(e.msg, ":2:"));
    assert_null(strstr(e.msg, "= a"));
    write_file(path, "token = a\ntoken = b\n", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);
    write_file(path, "just text\n", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);
    write_file(path, "token = a\x01" "b\n", 0600);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);

    /* missing file */
    snprintf(path, sizeof path, "%s/nope", tmpdir);
    assert_int_equal(cj_creds_load(path, c, &e), -CJ_E_INVALID);

    /* an empty env var counts as unset */
    clear_env();
    setenv(CJ_CREDS_ENV_SSID, "", 1);
    assert_int_equal(cj_creds_load(NULL, c, &e), 0);
    assert_true(c->flags & CJ_CREDS_SSID_MISSING);
    clear_env();

    char out[64];
    assert_string_equal(cj_creds_redact("secret-value", out, sizeof out), "<redacted, 12 bytes>");
    assert_string_equal(cj_creds_redact("NA", out, sizeof out), "NA");
    assert_string_equal(cj_creds_redact("", out, sizeof out), "(empty)");
    cj_creds_clear(c);
    free(c);
    snprintf(path, sizeof path, "%s/creds.ini", tmpdir);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token),  cmocka_unit_test(test_write_read), cmocka_unit_test(test_extra_keys), cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_parse),  cmocka_unit_test(test_creds),
    };
    return cmocka_run_group_tests_name("bootstrap", tests, setup, teardown);
}
