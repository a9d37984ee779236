/* SPDX-License-Identifier: Apache-2.0 */
/* test_jobdesc.c — the job description (lib/ops/jobdesc.c): a full description
 * read field by field and turned into the job's configuration, the minimal one
 * taking the site's defaults, every kind of mistake refused with its field
 * named, every cut of a valid description refused cleanly, and the token in
 * no output of any function; TLS files named as open files (tls_fds). */
#include "testutil.h"

#include "fl/launcher.h"
#include "ops/jobdesc.h"

#define TOKEN "tok-Zq9XWv3-secret-7781"
#define SIGNATURE "c2lnbmF0dXJlLXNlY3JldA=="

#define FULL \
    "{\"job_id\": \"3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f\", \"site\": \"site-1\"," \
    " \"server_url\": \"grpcs://fl.example.org:8002\", \"connection_security\": \"mtls\"," \
    " \"ca_file\": \"/kit/rootCA.pem\", \"cert_file\": \"/kit/client.crt\", \"key_file\": \"/kit/client.key\"," \
    " \"project_name\": \"proj-x\", \"parent_url\": \"tcp://localhost:8004\"," \
    " \"credentials\": {\"token\": \"" TOKEN "\", \"token_signature\": \"" SIGNATURE "\", \"ssid\": \"ssid-1\"}," \
    " \"mode\": \"spool\", \"workspace\": \"/ws\"," \
    " \"worker\": {\"argv\": [\"python3\", \"-u\", \"custom/train.py\", \"--name\", \"it's a \\\"t\\u00e9st\\\"\", \"\"]," \
    "  \"cwd\": \"/ws/app\", \"env\": {\"A\": \"1\", \"B_2\": \"x y\\n\"}, \"user\": \"flare\", \"group\": \"1000\"," \
    "  \"count\": 3, \"listen\": \"unix:/run/cjrelay/j1.sock\"}," \
    " \"bootstrap\": {\"task_exchange\": {\"train_with_eval\": true, \"exchange_format\": \"pytorch\"}," \
    "  \"memory_gc_rounds\": 2, \"cuda_empty_cache\": true, \"extra\": [1, {\"a\": null}]}}"

static struct cj_config site;
static struct cj_job_desc *desc;
static struct cj_config *job;
static char why[512];

static int setup(void **state)
{
    (void)state;
    cj_config_defaults(&site);
    strcpy(site.relay.site, "site-1");
    strcpy(site.upstream.project_name, "example_project");
    site.relay.spool_allow_tmpfs = true;
    desc = malloc(sizeof *desc);
    job = malloc(sizeof *job);
    return desc && job ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(desc);
    free(job);
    return 0;
}

static int parse(const char *json)
{
    why[0] = '\0';
    return cj_jobdesc_parse(json, strlen(json), desc, why, sizeof why);
}

/* Parses json and derives the job's configuration. */
static int parse_config(const char *json)
{
    if (parse(json)) return -1;
    return cj_jobdesc_config(desc, &site, job, why, sizeof why);
}

static void expect_why(const char *json, int rc, const char *field, const char *text)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s: ", field);
    if (rc != -1 || strncmp(why, prefix, strlen(prefix)) || !strstr(why, text))
        fail_msg("want '%s...%s' for\n  %s\ngot rc %d '%s'", prefix, text, json, rc, why);
    if (strstr(why, TOKEN) || strstr(why, SIGNATURE)) fail_msg("a credential in '%s'", why);
}

/* json is refused by the parser (or, when config, by the configuration) with
 * "<field>: ...text...". */
static void refused(const char *json, const char *field, const char *text)
{
    expect_why(json, parse(json), field, text);
    for (size_t i = 0; i < sizeof *desc; i++)
        if (((unsigned char *)desc)[i]) fail_msg("description not cleared after '%s'", why);
}

static void refused_config(const char *json, const char *field, const char *text)
{
    expect_why(json, parse_config(json), field, text);
}

static void test_full(void **state)
{
    (void)state;
    assert_int_equal(parse(FULL), 0);
    const struct cj_job_desc *d = desc;
    assert_string_equal(d->job_id, "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f");
    assert_string_equal(d->site, "site-1");
    assert_string_equal(d->server_url, "grpcs://fl.example.org:8002");
    assert_int_equal(d->connection_security, CJ_SEC_MTLS);
    assert_string_equal(d->ca_file, "/kit/rootCA.pem");
    assert_string_equal(d->cert_file, "/kit/client.crt");
    assert_string_equal(d->key_file, "/kit/client.key");
    assert_string_equal(d->project_name, "proj-x");
    assert_string_equal(d->parent_url, "tcp://localhost:8004");
    assert_string_equal(d->credentials.token, TOKEN);
    assert_string_equal(d->credentials.token_signature, SIGNATURE);
    assert_string_equal(d->credentials.ssid, "ssid-1");
    assert_int_equal(d->mode, CJ_MODE_SPOOL);
    assert_string_equal(d->workspace, "/ws");
    assert_int_equal(d->worker.argc, 6);
    const char *argv[] = {"python3", "-u", "custom/train.py", "--name", "it's a \"t\xc3\xa9st\"", ""};
    for (int i = 0; i < 6; i++) assert_string_equal(cj_jobdesc_arg(d, i), argv[i]);
    assert_null(cj_jobdesc_arg(d, 6));
    assert_null(cj_jobdesc_arg(d, -1));
    assert_string_equal(d->worker.cwd, "/ws/app");
    assert_int_equal(d->worker.envc, 2);
    assert_string_equal(cj_jobdesc_env(d, 0), "A=1");
    assert_string_equal(cj_jobdesc_env(d, 1), "B_2=x y\n");
    assert_null(cj_jobdesc_env(d, 2));
    assert_string_equal(d->worker.user, "flare");
    assert_string_equal(d->worker.group, "1000");
    assert_int_equal(d->worker.count, 3);
    assert_string_equal(d->worker.listen, "unix:/run/cjrelay/j1.sock");
    assert_int_equal(d->bootc, 4);
    const char *raw;
    assert_string_equal(cj_jobdesc_boot(d, 0, &raw), "task_exchange");
    assert_string_equal(raw, "{\"train_with_eval\": true, \"exchange_format\": \"pytorch\"}");
    assert_string_equal(cj_jobdesc_boot(d, 1, &raw), "memory_gc_rounds");
    assert_string_equal(raw, "2");
    assert_string_equal(cj_jobdesc_boot(d, 2, &raw), "cuda_empty_cache");
    assert_string_equal(raw, "true");
    assert_string_equal(cj_jobdesc_boot(d, 3, &raw), "extra");
    assert_string_equal(raw, "[1, {\"a\": null}]");
    assert_null(cj_jobdesc_boot(d, 4, &raw));
    unsigned all = CJ_JD_JOB_ID | CJ_JD_SITE | CJ_JD_SERVER_URL | CJ_JD_SECURITY | CJ_JD_CA_FILE | CJ_JD_CERT_FILE |
                   CJ_JD_KEY_FILE | CJ_JD_PROJECT | CJ_JD_PARENT_URL | CJ_JD_CREDENTIALS | CJ_JD_MODE |
                   CJ_JD_WORKSPACE | CJ_JD_WORKER | CJ_JD_BOOTSTRAP | CJ_JD_ARGV | CJ_JD_CWD | CJ_JD_ENV |
                   CJ_JD_USER | CJ_JD_GROUP | CJ_JD_COUNT | CJ_JD_LISTEN;
    assert_int_equal(d->has, all);
}

static void test_full_config(void **state)
{
    (void)state;
    assert_int_equal(parse_config(FULL), 0);
    assert_string_equal(job->relay.site, "site-1");
    assert_string_equal(job->relay.job_id, "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f");
    assert_int_equal(job->relay.mode, CJ_MODE_SPOOL);
    assert_int_equal(job->upstream.url.kind, CJ_EP_GRPCS);
    assert_string_equal(job->upstream.url.addr, "fl.example.org");
    assert_int_equal(job->upstream.url.port, 8002);
    assert_int_equal(job->upstream.connection_security, CJ_SEC_MTLS);
    assert_string_equal(job->upstream.ca_file, "/kit/rootCA.pem");
    assert_string_equal(job->upstream.cert_file, "/kit/client.crt");
    assert_string_equal(job->upstream.key_file, "/kit/client.key");
    assert_string_equal(job->upstream.project_name, "proj-x");
    assert_int_equal(job->workers.count, 3);
    assert_int_equal(job->workers.listen.n, 1);
    assert_int_equal(job->workers.listen.ep[0].kind, CJ_EP_UNIX);
    assert_string_equal(job->workers.listen.ep[0].addr, "/run/cjrelay/j1.sock");
    /* the command line splits back into argv */
    char **argv;
    int argc;
    struct cj_err e = {0};
    assert_int_equal(cj_launcher_split(job->workers.command, &argv, &argc, &e), 0);
    assert_int_equal(argc, desc->worker.argc);
    for (int i = 0; i < argc; i++) assert_string_equal(argv[i], cj_jobdesc_arg(desc, i));
    cj_launcher_argv_free(argv);
    /* the keys the description set are marked; the site's others are not */
    const struct cj_cfg_key *keys = cj_config_keys(NULL);
    assert_int_equal(job->origin.key_line[cj_config_find("upstream", "url") - keys], 1);
    assert_int_equal(job->origin.key_line[cj_config_find("workers", "command") - keys], 1);
    assert_int_equal(job->origin.key_line[cj_config_find("limits", "link_buffer") - keys], 0);
    /* what is not in the description is the site's */
    assert_int_equal(job->limits.link_buffer, site.limits.link_buffer);
    assert_string_equal(job->status.socket, site.status.socket);
}

static void test_minimal(void **state)
{
    (void)state;
    assert_int_equal(parse_config("{\"job_id\":\"J7\"}"), 0);
    assert_int_equal(desc->has, CJ_JD_JOB_ID);
    assert_string_equal(job->relay.job_id, "J7");
    struct cj_config want = site;
    strcpy(want.relay.job_id, "J7");
    assert_memory_equal(&want, job, offsetof(struct cj_config, origin));
    assert_int_equal(parse_config(" \t\r\n{ \"job_id\" : \"J8\" } \n"), 0);
    /* a site setting kept: the site's command with no argv */
    strcpy(site.workers.command, "cjrelay-worker --x");
    assert_int_equal(parse_config("{\"job_id\":\"J9\",\"worker\":{\"count\":2}}"), 0);
    assert_string_equal(job->workers.command, "cjrelay-worker --x");
    assert_int_equal(job->workers.count, 2);
    site.workers.command[0] = '\0';
}

/* ---- mistakes ------------------------------------------------------------------------------- */

static void test_wrong_types(void **state)
{
    (void)state;
    static const struct { const char *key, *value, *field, *text; } cases[] = {
        {"job_id", "7", "job_id", "not a string"},
        {"site", "[]", "site", "not a string"},
        {"server_url", "{}", "server_url", "not a string"},
        {"connection_security", "true", "connection_security", "not a string"},
        {"ca_file", "null", "ca_file", "not a string"},
        {"cert_file", "1.5", "cert_file", "not a string"},
        {"key_file", "false", "key_file", "not a string"},
        {"project_name", "[\"p\"]", "project_name", "not a string"},
        {"parent_url", "8004", "parent_url", "not a string"},
        {"credentials", "\"t\"", "credentials", "not an object"},
        {"mode", "0", "mode", "not a string"},
        {"workspace", "{}", "workspace", "not a string"},
        {"worker", "[]", "worker", "not an object"},
        {"bootstrap", "\"x\"", "bootstrap", "not an object"},
        {"worker", "{\"argv\": \"python3 x.py\"}", "worker.argv", "not an array"},
        {"worker", "{\"argv\": [\"python3\", \"a\", 3]}", "worker.argv[2]", "not a string"},
        {"worker", "{\"argv\": [[\"python3\"]]}", "worker.argv[0]", "not a string"},
        {"worker", "{\"cwd\": 1}", "worker.cwd", "not a string"},
        {"worker", "{\"env\": [\"A=1\"]}", "worker.env", "not an object"},
        {"worker", "{\"env\": {\"A\": 1}}", "worker.env.A", "not a string"},
        {"worker", "{\"env\": {\"A\": null}}", "worker.env.A", "not a string"},
        {"worker", "{\"user\": 1000}", "worker.user", "not a string"},
        {"worker", "{\"group\": [1000]}", "worker.group", "not a string"},
        {"worker", "{\"count\": \"2\"}", "worker.count", "not an integer"},
        {"worker", "{\"count\": 1.5}", "worker.count", "not an integer"},
        {"worker", "{\"count\": true}", "worker.count", "not an integer"},
        {"worker", "{\"listen\": [\"unix:/a\"]}", "worker.listen", "not a string"},
        {"credentials", "{\"token\": 5, \"token_signature\": \"s\", \"ssid\": \"i\"}", "credentials.token", "not a string"},
        {"credentials", "{\"token\": \"" TOKEN "\", \"token_signature\": {}, \"ssid\": \"i\"}",
         "credentials.token_signature", "not a string"},
        {"credentials", "{\"token\": \"" TOKEN "\", \"token_signature\": \"s\", \"ssid\": null}",
         "credentials.ssid", "not a string"},
        {"bootstrap", "{\"task_exchange\": \"numpy\"}", "bootstrap.task_exchange", "not an object"},
        {"bootstrap", "{\"memory_gc_rounds\": \"2\"}", "bootstrap.memory_gc_rounds", "not an integer"},
        {"bootstrap", "{\"memory_gc_rounds\": 2.5}", "bootstrap.memory_gc_rounds", "not an integer"},
        {"bootstrap", "{\"cuda_empty_cache\": 1}", "bootstrap.cuda_empty_cache", "not true or false"},
        {"bootstrap", "{\"cuda_empty_cache\": tru}", "bootstrap.cuda_empty_cache", "unexpected character"},
        {"bootstrap", "{\"memory_gc_rounds\": -2.5}", "bootstrap.memory_gc_rounds", "not an integer"},
        {"bootstrap", "{\"memory_gc_rounds\": - 2}", "bootstrap.memory_gc_rounds", "not an integer"},
    };
    char json[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!strcmp(cases[i].key, "job_id")) snprintf(json, sizeof json, "{\"job_id\": %s}", cases[i].value);
        else snprintf(json, sizeof json, "{\"job_id\": \"J1\", \"%s\": %s}", cases[i].key, cases[i].value);
        refused(json, cases[i].field, cases[i].text);
    }
}

static void test_unknown_and_duplicate(void **state)
{
    (void)state;
    refused("{\"job_id\": \"J1\", \"colour\": \"red\"}", "colour", "unknown");
    refused("{\"colour\": \"red\", \"job_id\": \"J1\"}", "colour", "unknown");
    refused("{\"job_id\": \"J1\", \"worker\": {\"colour\": 1}}", "worker.colour", "unknown");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"colour\": \"x\"}}", "credentials.colour", "unknown");
    refused("{\"job_id\": \"J1\", \"Job_id\": \"J2\"}", "Job_id", "unknown");
    refused("{\"job_id\": \"J1\", \"\": 1}", "description", "an empty key");
    refused("{\"job_id\": \"J1\", \"a\\nb\": 1}", "description", "control characters");
    refused("{\"job_id\": \"J1\", \"worker\": {\"a\\tb\": 1}}", "worker", "control characters");
    refused("{\"job_id\": \"J1\", \"job_id\": \"J1\"}", "job_id", "duplicate key");
    refused("{\"job_id\": \"J1\", \"mode\": \"spool\", \"mode\": \"spool\"}", "mode", "duplicate key");
    refused("{\"job_id\": \"J1\", \"worker\": {}, \"worker\": {}}", "worker", "duplicate key");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": 1, \"count\": 2}}", "worker.count", "duplicate key");
    refused("{\"job_id\": \"J1\", \"worker\": {\"env\": {\"A\": \"1\", \"A\": \"2\"}}}", "worker.env.A", "duplicate key");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"x\": 1, \"x\": 2}}", "bootstrap.x", "duplicate key");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"" TOKEN "\", \"token\": \"" TOKEN "\"}}",
            "credentials.token", "duplicate key");
}

static void test_missing(void **state)
{
    (void)state;
    refused("{}", "job_id", "missing");
    refused("{\"site\": \"site-1\"}", "job_id", "missing");
    refused("{\"job_id\": \"J1\", \"credentials\": {}}", "credentials.token", "missing");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"" TOKEN "\", \"ssid\": \"\"}}",
            "credentials.token_signature", "missing");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"" TOKEN "\", \"token_signature\": \"s\"}}",
            "credentials.ssid", "missing");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"\", \"token_signature\": \"s\", \"ssid\": \"\"}}",
            "credentials.token", "empty");
    refused("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"a\\u0001\", \"token_signature\": \"s\", \"ssid\": \"\"}}",
            "credentials.token", "control characters");
    assert_int_equal(parse("{\"job_id\": \"J1\", \"credentials\": {\"token\": \"t\", \"token_signature\": \"s\", \"ssid\": \"\"}}"), 0);
}

static void test_values(void **state)
{
    (void)state;
    refused("{\"job_id\": \"\"}", "job_id", "not a valid job id (empty)");
    refused("{\"job_id\": \"a.b\"}", "job_id", "not a valid job id (not a valid FQCN part");
    refused("{\"job_id\": \"a b\"}", "job_id", "not a valid job id");
    refused("{\"job_id\": \"J\\u00e9\"}", "job_id", "not a valid job id");
    refused("{\"job_id\": \"J1\\n\"}", "job_id", "not a valid job id");
    refused("{\"job_id\": \"0123456789012345678901234567890123456789012345678901234567890123\"}", "job_id",
            "too long (at most 63 bytes)");
    refused("{\"job_id\": \"J1\", \"site\": \"site.1\"}", "site", "not a valid site name");
    refused("{\"job_id\": \"J1\", \"server_url\": \"ftp://h:1\"}", "server_url",
            "scheme 'ftp' not one of tcp, stcp, http, https, grpc, grpcs");
    refused("{\"job_id\": \"J1\", \"server_url\": \"unix:/x\"}", "server_url", "");
    refused("{\"job_id\": \"J1\", \"server_url\": \"grpcs://h\"}", "server_url", "");
    refused("{\"job_id\": \"J1\", \"server_url\": \"tcp://h:99999\"}", "server_url", "");
    refused("{\"job_id\": \"J1\", \"server_url\": \"h:8002\"}", "server_url", "expected");
    refused("{\"job_id\": \"J1\", \"server_url\": \"\"}", "server_url", "empty");
    refused("{\"job_id\": \"J1\", \"connection_security\": \"ssl\"}", "connection_security", "expected clear | tls | mtls");
    refused("{\"job_id\": \"J1\", \"mode\": \"copy\"}", "mode", "expected pass_through | spool");
    refused("{\"job_id\": \"J1\", \"mode\": \"\"}", "mode", "empty");
    refused("{\"job_id\": \"J1\", \"ca_file\": \"kit/rootCA.pem\"}", "ca_file", "not an absolute path");
    refused("{\"job_id\": \"J1\", \"workspace\": \"ws\"}", "workspace", "not an absolute path");
    refused("{\"job_id\": \"J1\", \"worker\": {\"cwd\": \"\"}}", "worker.cwd", "empty");
    refused("{\"job_id\": \"J1\", \"project_name\": \"\"}", "project_name", "empty");
    refused("{\"job_id\": \"J1\", \"parent_url\": \"grpc://localhost:8004\"}", "parent_url", "");
    refused("{\"job_id\": \"J1\", \"parent_url\": \"tcp://10.1.2.3:8004\"}", "parent_url", "not a loopback address");
    refused("{\"job_id\": \"J1\", \"worker\": {\"argv\": []}}", "worker.argv", "empty");
    refused("{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"\"]}}", "worker.argv[0]", "empty");
    refused("{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"a\", \"b\\u0007\"]}}", "worker.argv[1]", "control characters");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": 0}}", "worker.count", "out of range (allowed 1 .. 64)");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": 65}}", "worker.count", "out of range");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": -1}}", "worker.count", "negative number");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": 99999999999999999999999}}", "worker.count", "too large");
    refused("{\"job_id\": \"J1\", \"worker\": {\"count\": 01}}", "worker.count", "leading zero");
    refused("{\"job_id\": \"J1\", \"worker\": {\"listen\": \"tcp://10.0.0.1:9000\"}}", "worker.listen", "not a loopback address");
    refused("{\"job_id\": \"J1\", \"worker\": {\"listen\": \"tcp://0.0.0.0:9000\"}}", "worker.listen", "not a loopback address");
    refused("{\"job_id\": \"J1\", \"worker\": {\"listen\": \"grpc://127.0.0.1:9000\"}}", "worker.listen", "");
    refused("{\"job_id\": \"J1\", \"worker\": {\"listen\": \"unix:w.sock\"}}", "worker.listen", "absolute");
    refused("{\"job_id\": \"J1\", \"worker\": {\"launch_timeout\": \"300\"}}", "worker.launch_timeout", "not a number");
    refused("{\"job_id\": \"J1\", \"worker\": {\"launch_timeout\": -1}}", "worker.launch_timeout", "");
    refused("{\"job_id\": \"J1\", \"worker\": {\"launch_timeout\": 86401}}", "worker.launch_timeout", "out of range");
    refused("{\"job_id\": \"J1\", \"worker\": {\"launch_timeout\": 1, \"launch_timeout\": 2}}",
            "worker.launch_timeout", "duplicate key");
    refused("{\"job_id\": \"J1\", \"worker\": {\"env\": {\"1A\": \"x\"}}}", "worker.env.1A", "not a valid variable name");
    refused("{\"job_id\": \"J1\", \"worker\": {\"env\": {\"A-B\": \"x\"}}}", "worker.env.A-B", "not a valid variable name");
    refused("{\"job_id\": \"J1\", \"worker\": {\"env\": {\"NVFLARE_CLIENT_API_BOOTSTRAP\": \"/x\"}}}",
            "worker.env.NVFLARE_CLIENT_API_BOOTSTRAP", "set by the relay");
    refused("{\"job_id\": \"J1\", \"worker\": {\"user\": \"-x\"}}", "worker.user", "not a name or a numeric id");
    refused("{\"job_id\": \"J1\", \"worker\": {\"group\": \"a b\"}}", "worker.group", "not a name or a numeric id");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"launch_token\": \"x\"}}", "bootstrap.launch_token", "set by the relay");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"a b\": 1}}", "bootstrap.a b", "not a valid key");
    assert_int_equal(parse("{\"job_id\": \"J1\", \"bootstrap\": {\"memory_gc_rounds\": -1, \"cuda_empty_cache\": false}}"), 0);
    assert_string_equal(cj_jobdesc_boot(desc, 0, NULL), "memory_gc_rounds");
    assert_int_equal(parse("{\"job_id\": \"J1\", \"worker\": {\"user\": \"svc$\", \"group\": \"0\","
                           " \"listen\": \"unix:/a.sock, tcp://127.0.0.1:9000\"}}"), 0);
}

static void test_cross_key(void **state)
{
    (void)state;
    /* no project_name in the description nor the site's file: refused, not defaulted */
    char kept[sizeof site.upstream.project_name];
    strcpy(kept, site.upstream.project_name);
    site.upstream.project_name[0] = '\0';
    refused_config("{\"job_id\": \"J1\"}", "project_name", "[upstream] project_name is required");
    assert_int_equal(parse_config("{\"job_id\": \"J1\", \"project_name\": \"p\"}"), 0);
    strcpy(site.upstream.project_name, kept);
    refused_config("{\"job_id\": \"J1\", \"server_url\": \"grpcs://h:1\", \"connection_security\": \"clear\","
                   " \"ca_file\": \"/ca\"}", "connection_security", "a grpcs:// url needs connection_security = tls");
    refused_config("{\"job_id\": \"J1\", \"server_url\": \"grpcs://h:1\"}", "server_url",
                   "a grpcs:// url needs connection_security = tls or mtls, not clear");
    refused_config("{\"job_id\": \"J1\", \"connection_security\": \"tls\", \"ca_file\": \"/ca\"}",
                   "connection_security", "needs an stcp://, https:// or grpcs:// url, not tcp://");
    refused_config("{\"job_id\": \"J1\", \"server_url\": \"stcp://h:1\", \"connection_security\": \"tls\"}",
                   "connection_security", "connection_security = tls needs ca_file");
    refused_config("{\"job_id\": \"J1\", \"server_url\": \"https://h:1\", \"connection_security\": \"mtls\","
                   " \"ca_file\": \"/ca\", \"key_file\": \"/k\"}", "connection_security", "mtls needs cert_file");
    refused_config("{\"job_id\": \"site-1\"}", "job_id", "site and job_id must differ");
    refused_config("{\"job_id\": \"J1\", \"site\": \"site-2\"}", "site", "'site-2' is not this daemon's site 'site-1'");
    assert_int_equal(parse_config("{\"job_id\": \"J1\", \"server_url\": \"stcp://h:1\", \"connection_security\": \"tls\","
                                  " \"ca_file\": \"/ca\"}"), 0);
    /* the site's TLS files serve a job that only changes the scheme */
    strcpy(site.upstream.ca_file, "/site/ca");
    assert_int_equal(parse_config("{\"job_id\": \"J1\", \"server_url\": \"https://h:1\", \"connection_security\": \"tls\"}"), 0);
    assert_string_equal(job->upstream.ca_file, "/site/ca");
    site.upstream.ca_file[0] = '\0';
    /* worker.launch_timeout (FLARE's executor's, a float) over [workers] launch_timeout */
    assert_int_equal(parse_config("{\"job_id\": \"J1\", \"worker\": {\"launch_timeout\": 2.5}}"), 0);
    assert_true(job->workers.launch_timeout == 2.5);
    assert_int_equal(job->origin.key_line[cj_config_find("workers", "launch_timeout") - cj_config_keys(NULL)], 1);
    assert_int_equal(parse_config("{\"job_id\": \"J1\"}"), 0);
    assert_true(job->workers.launch_timeout == 300);
    /* a failed configuration leaves *job as it was */
    memset(job, 0x5a, sizeof *job);
    refused_config("{\"job_id\": \"J1\", \"server_url\": \"grpcs://h:1\"}", "server_url", "");
    for (size_t i = 0; i < sizeof *job; i++) assert_int_equal(((unsigned char *)job)[i], 0x5a);
}

/* tls_fds: the TLS files as open files passed with the line; the job's
 * configuration shows each by the label its caller set, or fd:<index>. */
static void test_tls_fds(void **state)
{
    (void)state;
    const char *mtls = "{\"job_id\": \"J1\", \"server_url\": \"stcp://h:1\", \"connection_security\": \"mtls\","
                       " \"tls_fds\": {\"ca_file\": 0, \"cert_file\": 1, \"key_file\": 1}}";
    assert_int_equal(parse(mtls), 0);
    assert_int_equal(desc->tls_fdmask, 7u);
    assert_int_equal(desc->tls_fd[0], 0);
    assert_int_equal(desc->tls_fd[1], 1);
    assert_int_equal(desc->tls_fd[2], 1);   /* one file may serve two keys (a PEM with both) */
    assert_int_equal(desc->has & (CJ_JD_CA_FILE | CJ_JD_CERT_FILE | CJ_JD_KEY_FILE), 0);
    strcpy(desc->tls_label[2], "fd:/kit/client.key");
    assert_int_equal(cj_jobdesc_config(desc, &site, job, why, sizeof why), 0);
    assert_string_equal(job->upstream.ca_file, "fd:0");   /* no label: the index */
    assert_string_equal(job->upstream.cert_file, "fd:1");
    assert_string_equal(job->upstream.key_file, "fd:/kit/client.key");
    const struct cj_cfg_key *keys = cj_config_keys(NULL);
    assert_int_equal(job->origin.key_line[cj_config_find("upstream", "key_file") - keys], 1);
    char line[512];
    cj_jobdesc_describe(desc, line, sizeof line);
    assert_non_null(strstr(line, " tls_fds ca_file,cert_file,key_file"));
    /* only the CA by descriptor; the rest is the site's */
    strcpy(site.upstream.cert_file, "/site/client.crt");
    strcpy(site.upstream.key_file, "/site/client.key");
    assert_int_equal(parse_config("{\"job_id\": \"J1\", \"server_url\": \"stcp://h:1\", \"connection_security\": \"mtls\","
                                  " \"tls_fds\": {\"ca_file\": 0}}"), 0);
    assert_string_equal(job->upstream.ca_file, "fd:0");
    assert_string_equal(job->upstream.key_file, "/site/client.key");
    site.upstream.cert_file[0] = site.upstream.key_file[0] = '\0';
    /* mistakes */
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"key_file\": 3}}", "tls_fds.key_file", "not a descriptor index (0 .. 2)");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"key_file\": -1}}", "tls_fds.key_file", "");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"key_file\": \"0\"}}", "tls_fds.key_file", "not an integer");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"key_file\": 0, \"key_file\": 1}}", "tls_fds.key_file", "duplicate key");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"crl_file\": 0}}", "tls_fds.crl_file", "unknown (ca_file, cert_file, key_file)");
    refused("{\"job_id\": \"J1\", \"tls_fds\": [0, 1]}", "tls_fds", "not an object");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {\"key_file\": 2}, \"key_file\": \"/kit/client.key\"}", "tls_fds.key_file",
            "key_file is given as a path too");
    refused("{\"job_id\": \"J1\", \"key_file\": \"/kit/client.key\", \"tls_fds\": {\"key_file\": 2}}", "tls_fds.key_file",
            "key_file is given as a path too");
    refused("{\"job_id\": \"J1\", \"tls_fds\": {}, \"tls_fds\": {}}", "tls_fds", "duplicate key");
}

static void test_bounds(void **state)
{
    (void)state;
    size_t cap = CJ_JOBDESC_MAX + 256;
    char *json = malloc(cap), *s;
    assert_non_null(json);
    /* oversized strings */
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"ca_file\": \"/");
    memset(s, 'a', 1100), s += 1100;
    strcpy(s, "\"}");
    refused(json, "ca_file", "longer than");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"credentials\": {\"token\": \"");
    memset(s, 'T', 5000), s += 5000;
    strcpy(s, "\", \"token_signature\": \"s\", \"ssid\": \"\"}}");
    refused(json, "credentials.token", "longer than 4095 bytes");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"");
    memset(s, 'k', 100), s += 100;
    strcpy(s, "\": 1}");
    refused(json, "description", "longer than 63 bytes");
    /* too many words, variables, bootstrap keys */
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"x\"");
    for (int i = 0; i < CJ_JOBDESC_ARGS_MAX; i++) s += sprintf(s, ", \"a\"");
    strcpy(s, "]}}");
    refused(json, "worker.argv", "more than 64 words");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"x\"");
    for (int i = 0; i < 60; i++) s += sprintf(s, ", \"%0140d\"", i);
    strcpy(s, "]}}");
    refused(json, "worker.argv", "longer than 8191 bytes");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"x\"");
    for (int i = 0; i < 60; i++) s += sprintf(s, ", \"'%0128d'\"", i);   /* fits, but not once quoted */
    strcpy(s, "]}}");
    refused(json, "worker.argv", "longer than 8191 bytes as a command line");
    /* a long command (a venv's interpreter, a script, many arguments): near 6 KiB is taken whole */
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"/opt/venv/bin/python3\"");
    for (int i = 0; i < 40; i++) s += sprintf(s, ", \"--opt%02d=%0140d\"", i, i);
    strcpy(s, "]}}");
    assert_int_equal(parse_config(json), 0);
    assert_true(strlen(job->workers.command) > 4096);
    char **argv;
    int argc;
    struct cj_err e = {0};
    assert_int_equal(cj_launcher_split(job->workers.command, &argv, &argc, &e), 0);
    assert_int_equal(argc, 41);
    for (int i = 0; i < argc; i++) assert_string_equal(argv[i], cj_jobdesc_arg(desc, i));
    cj_launcher_argv_free(argv);
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"env\": {");
    for (int i = 0; i <= CJ_JOBDESC_ENV_MAX; i++) s += sprintf(s, "%s\"V%d\": \"x\"", i ? ", " : "", i);
    strcpy(s, "}}}");
    refused(json, "worker.env.V256", "more than 256 variables");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": {\"env\": {");
    for (int i = 0; i < 9; i++) s += sprintf(s, "%s\"V%d\": \"%04000d\"", i ? ", " : "", i, i);
    strcpy(s, "}}}");
    refused(json, "worker.env.V8", "longer than 32768 bytes in all");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"bootstrap\": {");
    for (int i = 0; i <= CJ_JOBDESC_BOOT_MAX; i++) s += sprintf(s, "%s\"k%d\": %d", i ? ", " : "", i, i);
    strcpy(s, "}}");
    refused(json, "bootstrap.k32", "more than 32 keys");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"bootstrap\": {");
    for (int i = 0; i < 5; i++) s += sprintf(s, "%s\"k%d\": \"%04000d\"", i ? ", " : "", i, i);
    strcpy(s, "}}");
    refused(json, "bootstrap.k4", "longer than 16384 bytes in all");
    /* deep nesting */
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"bootstrap\": {\"x\": ");
    for (int i = 0; i < 9; i++) *s++ = '[';
    for (int i = 0; i < 9; i++) *s++ = ']';
    strcpy(s, "}}");
    refused(json, "bootstrap.x", "nested deeper than 8");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"bootstrap\": {\"x\": ");
    for (int i = 0; i < 20000; i++) *s++ = '[';
    strcpy(s, "}}");
    refused(json, "bootstrap.x", "nested deeper than 8");
    s = json + sprintf(json, "{\"job_id\": \"J1\", \"worker\": ");
    for (int i = 0; i < 20000; i++) *s++ = '{';
    strcpy(s, "}");
    refused(json, "worker", "");
    /* the whole text */
    memset(json, ' ', CJ_JOBDESC_MAX + 1);
    memcpy(json, "{\"job_id\": \"J1\"}", 16);
    assert_int_equal(cj_jobdesc_parse(json, CJ_JOBDESC_MAX, desc, why, sizeof why), 0);
    assert_int_equal(cj_jobdesc_parse(json, CJ_JOBDESC_MAX + 1, desc, why, sizeof why), -1);
    assert_string_equal(why, "description: longer than 65536 bytes");
    free(json);
}

static void test_syntax(void **state)
{
    (void)state;
    refused("", "description", "empty");
    refused("  \n", "description", "empty");
    refused("[]", "description", "not a JSON object");
    refused("\"job_id\"", "description", "not a JSON object");
    refused("{\"job_id\": \"J1\"} x", "description", "trailing bytes at offset 17");
    refused("{\"job_id\": \"J1\"}{}", "description", "trailing bytes");
    refused("{\"job_id\": \"J1\",}", "description", "expected a string");
    refused("{\"job_id\" \"J1\"}", "description", "expected ':'");
    refused("{\"job_id\": \"J1\" \"mode\": \"spool\"}", "description", "expected ',' or '}' at offset 16");
    refused("{'job_id': 'J1'}", "description", "expected a string");
    refused("{\"job_id\": \"J\xff\"}", "job_id", "invalid UTF-8 in string");
    refused("{\"job_id\": \"J\xc3\"}", "job_id", "invalid UTF-8");
    refused("{\"job_id\": \"J\xed\xa0\x80\"}", "job_id", "invalid UTF-8");   /* a surrogate as UTF-8 */
    refused("{\"j\xc0\xaf\": 1}", "description", "invalid UTF-8");
    refused("{\"job_id\": \"J\\ud800\"}", "job_id", "lone high surrogate");
    refused("{\"job_id\": \"J\\u0000\"}", "job_id", "NUL");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"x\": [1, 2}}", "bootstrap.x", "expected ',' or a closing bracket");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"x\": tru}}", "bootstrap.x", "unexpected character");
    refused("{\"job_id\": \"J1\", \"bootstrap\": {\"x\": 1.}}", "bootstrap.x", "digit expected");
    refused("{\"job_id\": \"J1\", \"worker\": {\"argv\": [\"a\" \"b\"]}}", "worker.argv", "expected ',' or ']'");
}

/* Every cut of a valid description fails cleanly (the buffer is exactly the
 * cut, so an over-read is caught under ASan). */
static void test_truncated(void **state)
{
    (void)state;
    size_t n = strlen(FULL);
    for (size_t k = 0; k < n; k++) {
        char *cut = malloc(k ? k : 1);
        memcpy(cut, FULL, k);
        why[0] = '\0';
        if (cj_jobdesc_parse(cut, k, desc, why, sizeof why) != -1) fail_msg("cut at %zu accepted", k);
        if (!why[0] || strchr(why, '\n') || strstr(why, TOKEN)) fail_msg("cut at %zu: '%s'", k, why);
        free(cut);
    }
    assert_int_equal(cj_jobdesc_parse(FULL, n, desc, why, sizeof why), 0);
}

/* The token's bytes appear in no output: errors, the log line, the job's
 * configuration, and nothing is left after cj_jobdesc_clear. */
static void test_no_credentials_out(void **state)
{
    (void)state;
    char line[2048];
    assert_int_equal(parse_config(FULL), 0);
    size_t n = cj_jobdesc_describe(desc, line, sizeof line);
    assert_int_equal(n, strlen(line));
    assert_string_equal(line, "job 3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f site site-1 server grpcs://fl.example.org:8002"
                              " security mtls project proj-x parent tcp://localhost:8004 mode spool workspace /ws"
                              " worker python3 (+5 args) count 3 listen unix:/run/cjrelay/j1.sock cwd /ws/app"
                              " user flare group 1000 env 2 bootstrap task_exchange,memory_gc_rounds,cuda_empty_cache,extra"
                              " credentials given");
    assert_null(memmem(line, n, TOKEN, 8));
    assert_null(memmem(job, sizeof *job, TOKEN, strlen(TOKEN)));
    assert_null(memmem(job, sizeof *job, SIGNATURE, strlen(SIGNATURE)));
    /* the snprintf contract */
    char small[10];
    assert_int_equal(cj_jobdesc_describe(desc, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    /* errors after the credentials were read */
    static const char *const tails[] = {
        ", \"colour\": 1}", ", \"mode\": 3}", ", \"credentials\": {}}", "} x", ", \"worker\": {\"count\": 0}}",
        ", \"server_url\": \"grpcs://h:1\"}",
    };
    char json[1024];
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        snprintf(json, sizeof json, "{\"job_id\": \"J1\", \"credentials\": {\"token\": \"" TOKEN
                 "\", \"token_signature\": \"" SIGNATURE "\", \"ssid\": \"s\"}%s", tails[i]);
        int parsed = parse(json);
        if (parsed == 0) assert_int_equal(cj_jobdesc_config(desc, &site, job, why, sizeof why), -1);
        if (strstr(why, TOKEN) || strstr(why, SIGNATURE)) fail_msg("a credential in '%s'", why);
        if (parsed == 0) assert_null(memmem(job, sizeof *job, TOKEN, strlen(TOKEN)));
        else assert_null(memmem(desc, sizeof *desc, TOKEN, strlen(TOKEN)));   /* cleared */
    }
    assert_int_equal(parse(FULL), 0);
    assert_non_null(memmem(desc, sizeof *desc, TOKEN, strlen(TOKEN)));
    cj_jobdesc_clear(desc);
    assert_null(memmem(desc, sizeof *desc, TOKEN, strlen(TOKEN)));
    assert_null(memmem(desc, sizeof *desc, SIGNATURE, strlen(SIGNATURE)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_unknown_and_duplicate),
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_cross_key),
        cmocka_unit_test(test_tls_fds),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_no_credentials_out),
    };
    return cmocka_run_group_tests_name("jobdesc", tests, setup, teardown);
}
