/* SPDX-License-Identifier: Apache-2.0 */
/* test_config.c — the key table, conf/cjrelay.ini, loading with FILE:LINE
 * problems, cross-key rules, reload diff/apply, show config. */
#include "testutil.h"

#include <sys/statfs.h>
#include <unistd.h>

#include "ops/config.h"
#include "util/log.h"

#define EXAMPLE "conf/cjrelay.ini"

static char tmpdir[64];
static char ini_path[128];
static struct cj_problems pb;

/* A valid minimal file, a site daemon's (no job_id: a job's project_name is not required
 * yet); cases append to it (its lines are 1..3). */
#define BASE "[relay]\nsite = site-1\nmax_jobs = 4\n"

static const char *write_file(const char *name, const char *text)
{
    snprintf(ini_path, sizeof ini_path, "%s/%s", tmpdir, name);
    FILE *f = fopen(ini_path, "wb");
    assert_non_null(f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return ini_path;
}

static int load_text(const char *text, struct cj_config *cfg)
{
    write_file("t.ini", text);
    cj_problems_init(&pb);
    return cj_config_load(ini_path, cfg, &pb);
}

static void dump_problems(void)
{
    for (int i = 0; i < pb.n; i++) print_message("  problem %d: %s\n", i, pb.msg[i]);
}

/* Problem i is "<ini_path>:<line>: ...text...". */
static void expect_problem(int i, int line, const char *text)
{
    char prefix[200];
    snprintf(prefix, sizeof prefix, "%s:%d: ", ini_path, line);
    if (i >= pb.n || strncmp(pb.msg[i], prefix, strlen(prefix)) || !strstr(pb.msg[i], text)) {
        dump_problems();
        fail_msg("problem %d: want '%s...%s'", i, prefix, text);
    }
}

/* The file yields exactly one problem, on line, containing text. */
static void expect_one(const char *ini, int line, const char *text)
{
    struct cj_config cfg;
    if (load_text(ini, &cfg) != -1 || pb.n != 1) {
        dump_problems();
        fail_msg("want exactly one problem '%s' for:\n%s", text, ini);
    }
    expect_problem(0, line, text);
}

static void load_ok(const char *ini, struct cj_config *cfg)
{
    if (load_text(ini, cfg) != 0) {
        dump_problems();
        fail_msg("file should load:\n%s", ini);
    }
}

/* ---- the table and the example file --------------------------------------------------- */

static void test_table_sane(void **state)
{
    (void)state;
    size_t n;
    const struct cj_cfg_key *k = cj_config_keys(&n);
    assert_int_equal(n, CJ_CFG_NKEYS);
    struct cj_config cfg;
    cj_config_defaults(&cfg);
    for (size_t i = 0; i < n; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s.%s", k[i].section, k[i].name);
        assert_string_equal(full, k[i].key);
        assert_ptr_equal(cj_config_find(k[i].section, k[i].name), &k[i]);
        assert_true(k[i].doc && strlen(k[i].doc) > 10);
        assert_true(k[i].off + k[i].size <= offsetof(struct cj_config, origin));
        for (size_t j = 0; j < i; j++) assert_string_not_equal(k[i].key, k[j].key);
        struct cj_config_row r;
        assert_int_equal(cj_config_row(&cfg, i, &r), 0);
        assert_string_not_equal(r.def, "?");          /* every default parses */
        assert_string_equal(r.value, r.def);          /* and is what defaults() sets */
        if (k[i].type == CJ_T_ENUM) assert_non_null(k[i].allowed);
    }
    struct cj_config_row r;
    assert_int_equal(cj_config_row(&cfg, n, &r), -1);
    /* The enums in config.h follow the table's allowed lists. */
    assert_string_equal(cj_config_find("relay", "mode")->allowed[CJ_MODE_SPOOL], "spool");
    assert_string_equal(cj_config_find("relay", "on_end_run")->allowed[CJ_END_WAIT], "wait");
    assert_string_equal(cj_config_find("upstream", "connection_security")->allowed[CJ_SEC_MTLS], "mtls");
    assert_string_equal(cj_config_find("log", "level")->allowed[CJ_LOG_DEBUG], "debug");
    /* Defaults alone miss only the required site name (without job_id the
     * daemon waits for job start). */
    cj_problems_init(&pb);
    assert_int_equal(cj_config_validate(&cfg, &pb), 1);
    assert_non_null(strstr(pb.msg[0], "[relay] site is required"));
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    char *buf = malloc(CJ_CONFIG_FILE_MAX);
    assert_non_null(buf);
    size_t n = fread(buf, 1, CJ_CONFIG_FILE_MAX - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Checks one "name = value" line of the example against the table: the key
 * exists in the current section, and the comment block above has its doc and
 * says whether it is reloadable. */
static void check_example_key(const char *section, const char *line, const char *comments, int *seen)
{
    char name[64];
    size_t n = strcspn(line, " =");
    snprintf(name, sizeof name, "%.*s", (int)n, line);
    const struct cj_cfg_key *k = cj_config_find(section, name);
    if (!k) fail_msg("%s: [%s] %s is not in the key table", EXAMPLE, section, name);
    size_t nkeys;
    seen[k - cj_config_keys(&nkeys)]++;
    if (!strstr(comments, k->doc)) fail_msg("%s: comment above %s lacks the doc '%s'", EXAMPLE, k->key, k->doc);
    bool says_reload = strstr(comments, "reloadable") != NULL;
    bool says_restart = strstr(comments, "restart") != NULL;
    if (says_reload != k->reloadable || says_restart == k->reloadable)
        fail_msg("%s: comment above %s disagrees on reloadable", EXAMPLE, k->key);
}

static void test_example_matches_table(void **state)
{
    (void)state;
    char *text = read_text(EXAMPLE);
    char section[64] = "", comments[4096] = "";
    size_t nkeys;
    const struct cj_cfg_key *k = cj_config_keys(&nkeys);
    int seen[CJ_CFG_NKEYS] = {0};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == ';') {
            strncat(comments, line, sizeof comments - strlen(comments) - 2);
            strcat(comments, "\n");
            continue;
        }
        if (line[0] == '[') sscanf(line, "[%63[^]]", section);
        else check_example_key(section, line, comments, seen);
        comments[0] = '\0';
    }
    for (size_t i = 0; i < nkeys; i++)
        if (seen[i] != 1) fail_msg("%s: %s appears %d times", EXAMPLE, k[i].key, seen[i]);
    free(text);
}

static void test_example_loads(void **state)
{
    (void)state;
    struct cj_config cfg;
    cj_problems_init(&pb);
    if (cj_config_load(EXAMPLE, &cfg, &pb) != 0) {
        dump_problems();
        fail_msg("%s does not load", EXAMPLE);
    }
    /* Values are the defaults, except the required names (the interface's example). */
    for (size_t i = 0; i < CJ_CFG_NKEYS; i++) {
        struct cj_config_row r;
        cj_config_row(&cfg, i, &r);
        if (!strcmp(r.key, "relay.site")) assert_string_equal(r.value, "site-1");
        else if (!strcmp(r.key, "relay.job_id")) assert_string_equal(r.value, "J1");
        else if (!strcmp(r.key, "upstream.project_name")) assert_string_equal(r.value, "example_project");
        else if (strcmp(r.value, r.def)) fail_msg("%s: %s = %s, default %s", EXAMPLE, r.key, r.value, r.def);
        assert_true(cfg.origin.key_line[i] > 0);
    }
    assert_int_equal(cfg.workers.listen.n, 1);
    assert_string_equal(cfg.workers.listen.ep[0].addr, "/run/cjrelay/workers.sock");
    assert_true(cfg.upstream.get_task_interval == 0.5);
    assert_true(cfg.limits.max_message_size == 2147483648LL);
    assert_int_equal(cfg.status.socket_mode, 0660);
    assert_int_equal(cfg.log.level, CJ_LOG_INFO);
}

/* ---- loading: values, types, syntax ----------------------------------------------------- */

static void test_load_values(void **state)
{
    (void)state;
    struct cj_config cfg;
    load_ok(BASE "mode = SPOOL\nspool_max_bytes = 10G\non_end_run = wait\n"
            "[upstream]\nurl = stcp://fl.example.org:8003\nconnection_security = mtls\n"
            "ca_file = /etc/ca.pem\ncert_file = c.crt\nkey_file = keys/c.key\n"
            "get_task_interval = 0.25 ; inline comment\n"
            "[workers]\nlisten = tcp://127.0.0.1:9000, unix:w.sock, tcp://[::1]:9001\n"
            "count = 4\nsocket_mode = 600\ncommand = python3 -m trainer --x=1;y\n"
            "[log]\nlevel = debug\nsyslog = yes\n",
            &cfg);
    assert_int_equal(cfg.relay.mode, CJ_MODE_SPOOL);
    assert_true(cfg.relay.spool_max_bytes == 10LL << 30);
    assert_int_equal(cfg.relay.on_end_run, CJ_END_WAIT);
    assert_int_equal(cfg.upstream.url.kind, CJ_EP_STCP);
    assert_int_equal(cfg.upstream.url.port, 8003);
    assert_int_equal(cfg.upstream.connection_security, CJ_SEC_MTLS);
    assert_string_equal(cfg.upstream.ca_file, "/etc/ca.pem");
    char want[512];
    char real[256];
    assert_non_null(realpath(tmpdir, real));
    snprintf(want, sizeof want, "%s/c.crt", real);            /* relative: the file's directory */
    assert_string_equal(cfg.upstream.cert_file, want);
    snprintf(want, sizeof want, "%s/keys/c.key", real);
    assert_string_equal(cfg.upstream.key_file, want);
    assert_true(cfg.upstream.get_task_interval == 0.25);
    assert_int_equal(cfg.workers.listen.n, 3);
    assert_int_equal(cfg.workers.listen.ep[0].port, 9000);
    snprintf(want, sizeof want, "%s/w.sock", real);
    assert_string_equal(cfg.workers.listen.ep[1].addr, want);
    assert_string_equal(cfg.workers.listen.ep[2].addr, "::1");
    assert_int_equal(cfg.workers.count, 4);
    assert_int_equal(cfg.workers.socket_mode, 0600);
    assert_string_equal(cfg.workers.command, "python3 -m trainer --x=1;y");
    assert_int_equal(cfg.log.level, CJ_LOG_DEBUG);
    assert_true(cfg.log.syslog);
    assert_string_equal(cfg.origin.file, ini_path);
    assert_int_equal(cfg.origin.key_line[cj_config_find("log", "syslog") - cj_config_keys(NULL)], 21);
}

static void test_load_syntax_forms(void **state)
{
    (void)state;
    struct cj_config cfg;
    /* BOM, CRLF, blanks, '#' comments, "name: value", indented keys (not continuations),
     * a long line whose comment is what makes it long. */
    char longline[600];
    snprintf(longline, sizeof longline, "heartbeat_timeout = 31 ; %0450d\n", 0);
    char ini[2048];
    snprintf(ini, sizeof ini,
             "\xEF\xBB\xBF# comment\r\n[relay]\r\nsite = s1\r\n  job_id: J2\r\n\r\n"
             "[ workers ]   ; spaces inside brackets\n   heartbeat_interval = 7\n%s"
             "; %0500d\n[upstream]\nproject_name = p\n",
             longline, 0);
    load_ok(ini, &cfg);
    assert_string_equal(cfg.relay.site, "s1");
    assert_string_equal(cfg.relay.job_id, "J2");
    assert_true(cfg.workers.heartbeat_interval == 7);
    assert_true(cfg.workers.heartbeat_timeout == 31);
    size_t i = (size_t)(cj_config_find("workers", "heartbeat_timeout") - cj_config_keys(NULL));
    assert_int_equal(cfg.origin.key_line[i], 8);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_one(BASE "just some words\n", 4, "expected 'key = value' or '[section]'");
    expect_one(BASE "[workers\nheartbeat_interval = 3\n", 4, "missing ']'");
    expect_one(BASE "[workers] junk\n", 4, "unexpected text after ']'");
    expect_one("site = x\n" BASE, 1, "key 'site' before any [section] header");
    char *ini = malloc(CJ_CONFIG_LINE_MAX + 256);
    assert_non_null(ini);
    snprintf(ini, CJ_CONFIG_LINE_MAX + 256, BASE "[workers]\ncommand = /bin/x %0*d\n", CJ_CONFIG_LINE_MAX, 0);
    expect_one(ini, 5, "line too long (at most 16384 characters before a comment)");
    free(ini);
    struct cj_config cfg;
    write_file("nul.ini", "[relay]\nsite = a\n");
    FILE *f = fopen(ini_path, "ab");
    fwrite("job_id = J\0X\n", 1, 13, f);
    fclose(f);
    cj_problems_init(&pb);
    assert_int_equal(cj_config_load(ini_path, &cfg, &pb), -1);
    expect_problem(0, 3, "NUL byte");
    expect_one(BASE "[upstream]\nproject_name = caf\xc3\n", 5, "invalid UTF-8");
    expect_one(BASE "[upstream]\nproject\x01name = x\n", 5, "key name contains control characters");
    expect_one(BASE "[up\x1bstream]\n", 4, "section name contains control characters");
}

/* Lines longer than inih's 200-byte buffer: a worker command of 4 KiB and more, its
 * inline comment left out; past the field's bound the key is named with its line. */
static void test_long_lines(void **state)
{
    (void)state;
    size_t cap = CJ_CFG_COMMAND_MAX + 256;
    char *ini = malloc(cap), *want = malloc(cap);
    assert_non_null(ini);
    assert_non_null(want);
    int n = snprintf(want, cap, "/opt/venvs/fl/bin/python3 -u custom/train.py --epochs 3");
    while (n < 6000) n += snprintf(want + n, cap - (size_t)n, " --opt-%d=/data/site-1/a/rather/long/path", n);
    snprintf(ini, cap, BASE "[workers]\ncommand =   %s   ; the trainer\ncount = 2\n[upstream]\nproject_name = p\n", want);
    struct cj_config cfg;
    load_ok(ini, &cfg);
    assert_string_equal(cfg.workers.command, want);
    assert_int_equal(cfg.workers.count, 2);
    assert_string_equal(cfg.upstream.project_name, "p");
    size_t i = (size_t)(cj_config_find("workers", "command") - cj_config_keys(NULL));
    assert_int_equal(cfg.origin.key_line[i], 5);
    /* a long value that is not a command: the field's own bound, with file:line */
    snprintf(ini, cap, BASE "[upstream]\nproject_name = %0500d\n", 0);
    expect_one(ini, 5, "project_name = ");
    /* past the command's bound */
    memset(want, 'a', CJ_CFG_COMMAND_MAX);
    want[CJ_CFG_COMMAND_MAX] = 0;
    snprintf(ini, cap, BASE "[workers]\ncommand = %s\n", want);
    expect_one(ini, 5, "command = ");
    free(ini);
    free(want);
}

static void test_unknown_names(void **state)
{
    (void)state;
    expect_one(BASE "[uptream]\nurl = tcp://127.0.0.1:1\n", 4, "unknown section [uptream] (did you mean [upstream]?)");
    expect_one(BASE "[bogus]\nx = 1\n", 4, "unknown section [bogus]");
    expect_one(BASE "[workers]\nheartbeat_timout = 30\n", 5,
               "unknown key 'heartbeat_timout' in [workers] (did you mean 'heartbeat_timeout'?)");
    expect_one(BASE "[relay]\nheartbeat_timeout = 30\n", 5,
               "unknown key 'heartbeat_timeout' in [relay] (it belongs in [workers])");
    expect_one(BASE "[upstream]\nshutdown_grase = 3\n", 5, "did you mean 'shutdown_grace' in [workers]?");
    expect_one(BASE "[upstream]\nheartbeat_timout = 30\n", 5, "did you mean 'job_heartbeat_timeout'?");
    expect_one(BASE "[log]\ncolour = yes\n", 5, "unknown key 'colour' in [log]");
    expect_one(BASE "Site = x\n", 4, "did you mean 'site'?");
}

static void test_duplicates(void **state)
{
    (void)state;
    expect_one(BASE "site = other\n", 4, "duplicate key 'site' in [relay] (first set at line 2)");
    expect_one(BASE "[log]\nlevel = info\n[relay]\n[log]\nlevel = debug\n", 8,
               "duplicate key 'level' in [log] (first set at line 5)");
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_one(BASE "[upstream]\nget_task_timeout = soon\n", 5, "get_task_timeout = 'soon': expected seconds");
    expect_one(BASE "[upstream]\nget_task_timeout = -1\n", 5, "must not be negative");
    expect_one(BASE "[limits]\nlink_buffer = 64MB\n", 5, "link_buffer = '64MB': expected bytes");
    expect_one(BASE "[limits]\nlink_buffer = 99999999999999999999G\n", 5, "too large");
    expect_one(BASE "[log]\nsyslog = maybe\n", 5, "expected true/false");
    expect_one(BASE "[log]\nlevel = loud\n", 5, "expected error | warning | info | debug");
    expect_one(BASE "mode = fast\n", 4, "expected pass_through | spool");
    expect_one(BASE "[status]\nsocket_mode = 0999\n", 5, "expected an octal mode");
    expect_one(BASE "[workers]\ncount = many\n", 5, "expected an integer");
    expect_one(BASE "[upstream]\nurl = ftp://x:1\n", 5, "expected unix:PATH or tcp, stcp, http, https, grpc or grpcs://HOST:PORT");
    expect_one(BASE "[upstream]\nurl = unix:/x\n", 5, "unix: is not allowed");
    expect_one(BASE "[workers]\nlisten = stcp://127.0.0.1:1\n", 5, "stcp:// is not allowed");
    expect_one(BASE "[workers]\nlisten = unix:/a, , unix:/b\n", 5, "empty entry");
    expect_one(BASE "[workers]\nlisten = unix:/a, unix:/a\n", 5, "listed twice");
    expect_one(BASE "[workers]\nlisten = unix:/a,unix:/b,unix:/c,unix:/d,unix:/e\n", 5, "at most 4");
    expect_one(BASE "[workers]\nlisten =\n", 5, "empty entry");
    char ini[512];
    snprintf(ini, sizeof ini, BASE "[status]\nsocket = /%0120d\n", 0);
    expect_one(ini, 5, "longer than 107 bytes");
    expect_one("[relay]\nsite = a.b\n", 2, "not a valid FQCN part");
    expect_one("[relay]\nsite = s\njob_id = J 1\n", 3, "not a valid FQCN part");
    snprintf(ini, sizeof ini, "[relay]\nsite = %070d\njob_id = J\n[upstream]\nproject_name = p\n", 0);
    expect_one(ini, 2, "too long (at most 63 bytes)");
}

/* [metrics] listen: HOST:PORT with a numeric host, port 0 allowed, empty = off;
 * rendered back as it parses. */
static void test_metrics_listen(void **state)
{
    (void)state;
    struct cj_config cfg;
    char text[64];
    cj_config_defaults(&cfg);
    assert_int_equal(cfg.metrics.listen.kind, 0);
    load_ok(BASE "[metrics]\nlisten = 127.0.0.1:0\n", &cfg);
    assert_int_equal(cfg.metrics.listen.kind, CJ_EP_TCP);
    assert_int_equal(cfg.metrics.listen.port, 0);
    assert_int_equal(cj_config_value_text(&cfg, "metrics.listen", text, sizeof text), 0);
    assert_string_equal(text, "127.0.0.1:0");
    load_ok(BASE "[metrics]\nlisten = [::1]:9470\n", &cfg);
    assert_string_equal(cfg.metrics.listen.addr, "::1");
    cj_config_value_text(&cfg, "metrics.listen", text, sizeof text);
    assert_string_equal(text, "[::1]:9470");
    load_ok(BASE "[metrics]\nlisten = 0.0.0.0:9470\n", &cfg);
    assert_int_equal(cfg.metrics.listen.port, 9470);
    load_ok(BASE "[metrics]\nlisten =\n", &cfg);
    assert_int_equal(cfg.metrics.listen.kind, 0);
    expect_one(BASE "[metrics]\nlisten = tcp://127.0.0.1:1\n", 5, "without a scheme");
    expect_one(BASE "[metrics]\nlisten = prometheus.example.org:9470\n", 5, "an IP address or localhost");
    expect_one(BASE "[metrics]\nlisten = 127.0.0.1\n", 5, "missing :PORT");
    expect_one(BASE "[metrics]\nlisten = 127.0.0.1:70000\n", 5, "expected :PORT");
    expect_one(BASE "[metrics]\nlisten = ::1:9470\n", 5, "needs brackets");
}

static void test_out_of_range(void **state)
{
    (void)state;
    expect_one(BASE "[upstream]\nget_task_interval = 100\n", 5,
               "get_task_interval = '100': out of range (allowed 0.01 .. 60)");
    expect_one(BASE "[limits]\nstream_chunk = 1K\n", 5, "out of range (allowed 4K .. 64M)");
    expect_one(BASE "[limits]\nmax_message_size = 100G\n", 5, "out of range (allowed 1M .. 64G)");
    expect_one(BASE "[workers]\ncount = 0\n", 5, "out of range (allowed 1 .. 64)");
    expect_one(BASE "[workers]\nsocket_mode = 1777\n", 5, "out of range (allowed 0000 .. 0777)");
    expect_one(BASE "[workers]\nshutdown_grace = 3601\n", 5, "out of range (allowed 0 .. 3600)");
}

/* ---- cross-key rules -------------------------------------------------------------------- */

static void test_contradictions(void **state)
{
    (void)state;
    expect_one(BASE "[workers]\nheartbeat_interval = 5\nheartbeat_timeout = 5\n", 6,
               "heartbeat_timeout (5) must be larger than heartbeat_interval (5)");
    /* Only the interval is in the file: the problem is on its line. */
    expect_one(BASE "[workers]\nheartbeat_interval = 60\n", 5,
               "heartbeat_timeout (30) must be larger than heartbeat_interval (60)");
    expect_one(BASE "[upstream]\nreconnect_min = 10\nreconnect_max = 5\n", 5,
               "reconnect_min (10) must not be larger than reconnect_max (5)");
    expect_one(BASE "[workers]\nlisten = unix:/a, tcp://10.1.2.3:9000\n", 5,
               "'tcp://10.1.2.3:9000' is not a loopback address");
    expect_one(BASE "[workers]\nlisten = tcp://0.0.0.0:9000\n", 5, "not a loopback address");
    expect_one(BASE "[upstream]\nurl = stcp://h:1\nconnection_security = tls\n", 6, "connection_security = tls needs ca_file");
    expect_one(BASE "[upstream]\nurl = stcp://h:1\nconnection_security = mtls\nca_file = ca\ncert_file = c\n", 6,
               "connection_security = mtls needs key_file");
    expect_one(BASE "[upstream]\nurl = stcp://h:1\nconnection_security = mtls\nca_file = ca\nkey_file = k\n", 6,
               "connection_security = mtls needs cert_file");
    expect_one(BASE "[upstream]\nurl = tcp://h:1\nconnection_security = tls\nca_file = ca\n", 6,
               "connection_security = tls needs an stcp://, https:// or grpcs:// url, not tcp://");
    expect_one(BASE "[upstream]\nurl = grpc://h:1\nconnection_security = mtls\nca_file = ca\ncert_file = c\nkey_file = k\n", 6,
               "connection_security = mtls needs an stcp://, https:// or grpcs:// url, not grpc://");
    expect_one(BASE "[upstream]\nurl = https://h:1\n", 5, "an https:// url needs connection_security = tls or mtls");
    expect_one(BASE "[upstream]\nurl = grpcs://h:1\n", 5, "a grpcs:// url needs connection_security = tls or mtls");
    expect_one(BASE "[upstream]\nurl = stcp://h:1\n", 5, "an stcp:// url needs connection_security = tls or mtls");
    expect_one(BASE "mode = spool\nspool_dir =\n", 4, "mode = spool needs spool_dir");
    expect_one(BASE "[limits]\nstream_chunk = 64M\nstream_window = 1M\n", 5,
               "stream_chunk (64M) must not be larger than stream_window (1M)");
    expect_one("[relay]\nsite = same\njob_id = same\n[upstream]\nproject_name = p\n", 3,
               "site and job_id must differ (both 'same')");
    /* A job's project_name has no default: required once there is a job. */
    expect_one("[relay]\nsite = s\njob_id = J1\n", 3, "[upstream] project_name is required");
    expect_one("[relay]\nsite = s\njob_id = J1\n[upstream]\nproject_name =\n", 5, "project_name must not be empty");
    expect_one("[relay]\nmax_jobs = 2\n[log]\n", 1, "[relay] site is required");
    /* An idle timeout must outlast one stream chunk at the slowest rate; the line is the timeout's,
     * or min_rate's when only min_rate is in the file. */
    expect_one(BASE "[upstream]\ndownload_idle_timeout = 2\n", 5,
               "upstream.download_idle_timeout (2 s) is shorter than one limits.stream_chunk (1M) takes at "
               "upstream.min_rate (128K/s): 8.0 s; raise upstream.download_idle_timeout or lower upstream.min_rate");
    expect_one(BASE "[upstream]\nmin_rate = 4K\n", 5,
               "upstream.submit_timeout (60 s) is shorter than one limits.stream_chunk (1M) takes at "
               "upstream.min_rate (4K/s): 256.0 s");
    {   /* min_rate = 0: no such check */
        struct cj_config any;
        load_ok(BASE "[upstream]\nmin_rate = 0\ndownload_idle_timeout = 1\nsubmit_timeout = 1\n[limits]\n"
                "stream_chunk = 64M\nstream_window = 64M\n", &any);
    }
    expect_one(BASE "[upstream]\njob_heartbeat_interval = 10\njob_heartbeat_timeout = 5\n", 6,
               "job_heartbeat_timeout (5) must be 0 or at least job_heartbeat_interval (10)");
    /* No job_id (or an empty one): a site daemon that waits for job start. */
    struct cj_config cfg;
    assert_int_equal(load_text("[relay]\nsite = s\njob_id =\n", &cfg), 0);
    assert_string_equal(cfg.relay.job_id, "");
    assert_int_equal(load_text("[relay]\nsite = s\n", &cfg), 0);
    /* No [relay] at all: the problem points at the end of the file. */
    assert_int_equal(load_text("[log]\nlevel = info\n\n", &cfg), -1);
    assert_int_equal(pb.n, 1);
    expect_problem(0, 3, "[relay] site is required");
}

/* mode = spool refuses a spool_dir on tmpfs (here /dev/shm, a directory that
 * does not exist yet) unless spool_allow_tmpfs = true. */
static void test_spool_tmpfs(void **state)
{
    (void)state;
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || (uint32_t)sf.f_type != 0x01021994u) skip();
    expect_one(BASE "mode = spool\nspool_dir = /dev/shm/cjrelay-test-config/spool\n", 5,
               "would be on tmpfs (/dev/shm is)");
    expect_problem(0, 5, "set spool_allow_tmpfs = true");
    struct cj_config cfg;
    load_ok(BASE "mode = spool\nspool_dir = /dev/shm/cjrelay-test-config/spool\nspool_allow_tmpfs = true\n", &cfg);
    assert_int_equal(cfg.relay.mode, CJ_MODE_SPOOL);
    assert_true(cfg.relay.spool_allow_tmpfs);
    if (statfs("/tmp", &sf) == 0 && (uint32_t)sf.f_type != 0x01021994u)
        load_ok(BASE "mode = spool\nspool_dir = /tmp/cjrelay-test-config/spool\n", &cfg);
    load_ok(BASE "spool_dir = /dev/shm/cjrelay-test-config/spool\n", &cfg);   /* pass_through: not used */
}

static void test_bad_value_does_not_cascade(void **state)
{
    (void)state;
    /* A rejected value is not also reported through a cross-key rule. */
    expect_one(BASE "[workers]\nheartbeat_interval = 99999\nheartbeat_timeout = 40\n", 5, "out of range");
    expect_one(BASE "[upstream]\nconnection_security = tlss\nurl = stcp://h:1\n", 5, "expected clear | tls | mtls");
}

static void test_every_problem_reported(void **state)
{
    (void)state;
    struct cj_config cfg;
    assert_int_equal(load_text(BASE "[workers]\nheartbeat_timout = 3\ncount = -2\n[uptream]\n", &cfg), -1);
    assert_int_equal(pb.n, 3);
    expect_problem(0, 5, "did you mean 'heartbeat_timeout'?");
    expect_problem(1, 6, "count = '-2': out of range");
    expect_problem(2, 7, "unknown section [uptream]");
    /* Many more than the list holds: bounded, and counted. */
    char ini[8192] = BASE "[log]\n";
    for (int i = 0; i < 40; i++) strcat(ini, "bogus_key_x = 1\n");
    assert_int_equal(load_text(ini, &cfg), -1);
    assert_int_equal(pb.n, CJ_PROBLEMS_MAX);
    assert_int_equal(pb.dropped, 40 - CJ_PROBLEMS_MAX);
    assert_int_equal(cj_problems_total(&pb), 40);
    expect_problem(CJ_PROBLEMS_MAX - 1, 4 + CJ_PROBLEMS_MAX, "bogus_key_x");
}

static void test_missing_file(void **state)
{
    (void)state;
    struct cj_config cfg;
    char path[200];
    snprintf(path, sizeof path, "%s/does-not-exist.ini", tmpdir);
    cj_problems_init(&pb);
    assert_int_equal(cj_config_load(path, &cfg, &pb), -1);
    assert_int_equal(pb.n, 1);
    assert_true(!strncmp(pb.msg[0], path, strlen(path)));
    assert_non_null(strstr(pb.msg[0], ": cannot open: No such file or directory"));
}

/* ---- reload --------------------------------------------------------------------------- */

static void test_failed_load_keeps_running(void **state)
{
    (void)state;
    struct cj_config running, before;
    load_ok(BASE "[workers]\nheartbeat_interval = 2\n", &running);
    before = running;
    assert_int_equal(load_text(BASE "[workers]\nheartbeat_interval = 3\nheartbeat_timeout = x\n", &running), -1);
    assert_memory_equal(&running, &before, sizeof running);
}

static void test_reload_diff_apply(void **state)
{
    (void)state;
    struct cj_config running, neu;
    load_ok(BASE "[upstream]\nurl = tcp://127.0.0.1:8002\n[workers]\nheartbeat_interval = 2\n", &running);
    load_ok(BASE "[upstream]\nurl = tcp://127.0.0.1:9999\nget_task_interval = 2\n"
            "[workers]\nheartbeat_interval = 3\ncount = 2\n[log]\nlevel = debug\n", &neu);
    struct cj_config_change ch[CJ_CFG_NKEYS];
    int n = cj_config_diff(&running, &neu, ch, CJ_CFG_NKEYS);
    assert_int_equal(n, 5);
    const char *want[] = {"upstream.url", "upstream.get_task_interval", "workers.count",
                          "workers.heartbeat_interval", "log.level"};
    const bool reload[] = {false, true, false, true, true};
    for (int i = 0; i < n; i++) {
        assert_string_equal(ch[i].key, want[i]);
        assert_int_equal(ch[i].reloadable, reload[i]);
    }
    assert_int_equal(cj_config_diff(&running, &neu, ch, 2), 5);   /* counts past max */
    assert_int_equal(cj_config_apply_reload(&running, &neu), 3);
    assert_int_equal(running.upstream.url.port, 8002);              /* restart-only: kept */
    assert_int_equal(running.workers.count, 1);
    assert_true(running.upstream.get_task_interval == 2);           /* reloadable: applied */
    assert_true(running.workers.heartbeat_interval == 3);
    assert_int_equal(running.log.level, CJ_LOG_DEBUG);
    n = cj_config_diff(&running, &neu, ch, CJ_CFG_NKEYS);
    assert_int_equal(n, 2);                                         /* what needs a restart */
    assert_false(ch[0].reloadable);
    assert_false(ch[1].reloadable);
    assert_int_equal(cj_config_apply_reload(&running, &neu), 0);
}

/* ---- show config -------------------------------------------------------------------------- */

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_show_text(void **state)
{
    (void)state;
    struct cj_config cfg;
    load_ok(BASE "[workers]\nheartbeat_timeout = 45\n", &cfg);
    static char out[32768];
    size_t n = cj_config_show(&cfg, CJ_SHOW_TEXT, out, sizeof out);
    assert_int_equal(n, strlen(out));
    assert_int_equal(count(out, "\n"), CJ_CFG_NKEYS + 1);
    assert_true(!strncmp(out, "key ", 4));
    assert_non_null(strstr(out, " value "));
    assert_non_null(strstr(out, " default "));
    assert_non_null(strstr(out, " reloadable\n"));
    const char *row = strstr(out, "\nworkers.heartbeat_timeout ");
    assert_non_null(row);
    char k[64], v[64], d[64], r[8];
    assert_int_equal(sscanf(row + 1, "%63s %63s %63s %7s", k, v, d, r), 4);
    assert_string_equal(v, "45");
    assert_string_equal(d, "30");
    assert_string_equal(r, "yes");
    row = strstr(out, "\nupstream.ca_file ");
    assert_int_equal(sscanf(row + 1, "%63s %63s %63s %7s", k, v, d, r), 4);
    assert_string_equal(v, "\"\"");
    assert_string_equal(r, "no");
    /* Truncation: snprintf-like. */
    char small[50];
    assert_int_equal(cj_config_show(&cfg, CJ_SHOW_TEXT, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_true(!strncmp(small, out, sizeof small - 1));
}

static void test_show_json(void **state)
{
    (void)state;
    struct cj_config cfg;
    load_ok(BASE "[workers]\ncommand = run \"quoted\" \\ back\n", &cfg);
    static char out[32768];
    size_t n = cj_config_show(&cfg, CJ_SHOW_JSON, out, sizeof out);
    assert_int_equal(n, strlen(out));
    assert_true(!strncmp(out, "{\"config\":[{", 12));
    assert_string_equal(out + n - 4, "}]}\n");
    assert_int_equal(count(out, "\n"), 1);                        /* one line */
    assert_int_equal(count(out, "{\"key\":"), CJ_CFG_NKEYS);
    assert_int_equal(count(out, "{"), CJ_CFG_NKEYS + 1);
    assert_int_equal(count(out, "}"), CJ_CFG_NKEYS + 1);
    assert_non_null(strstr(out, "{\"key\":\"upstream.url\",\"value\":\"tcp://127.0.0.1:8002\","
                                "\"default\":\"tcp://127.0.0.1:8002\",\"reloadable\":false}"));
    assert_non_null(strstr(out, "{\"key\":\"log.level\",\"value\":\"info\",\"default\":\"info\",\"reloadable\":true}"));
    assert_non_null(strstr(out, "\"value\":\"run \\\"quoted\\\" \\\\ back\""));
    assert_non_null(strstr(out, "{\"key\":\"limits.max_message_size\",\"value\":\"2G\""));
    /* Quotes balance (escaped ones aside): a cheap well-formedness check. */
    int quotes = 0;
    for (size_t i = 0; i < n; i++) quotes += out[i] == '"' && out[i - 1] != '\\';
    assert_int_equal(quotes % 2, 0);
    char vbuf[64];
    assert_int_equal(cj_config_value_text(&cfg, "limits.stream_window", vbuf, sizeof vbuf), 0);
    assert_string_equal(vbuf, "64M");
    assert_int_equal(cj_config_value_text(&cfg, "limits.nope", vbuf, sizeof vbuf), -1);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cjrelay-test-config.XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_sane),
        cmocka_unit_test(test_example_matches_table),
        cmocka_unit_test(test_example_loads),
        cmocka_unit_test(test_load_values),
        cmocka_unit_test(test_load_syntax_forms),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_long_lines),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_metrics_listen),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_contradictions),
        cmocka_unit_test(test_spool_tmpfs),
        cmocka_unit_test(test_bad_value_does_not_cascade),
        cmocka_unit_test(test_every_problem_reported),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_failed_load_keeps_running),
        cmocka_unit_test(test_reload_diff_apply),
        cmocka_unit_test(test_show_text),
        cmocka_unit_test(test_show_json),
    };
    int rc = cmocka_run_group_tests_name("config", tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
