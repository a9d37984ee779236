/* SPDX-License-Identifier: Apache-2.0 */
/* test_dialect.c — the FLARE generations (lib/fl/dialect.c): which row a
 * version picks and which it refuses; the pipe dialect's trainer config
 * (lib/fl/pipecfg.c) read back with Python's json module's rules (here: our
 * JSON walker), its keys as releases.md §4.2 / §5 name them; the job
 * description's flare_version. */
#include "testutil.h"

#include "fl/dialect.h"
#include "fl/pipe.h"
#include "ops/config.h"
#include "ops/jobdesc.h"
#include "util/json.h"

static const char *row(const char *v)
{
    struct cj_err e = {0};
    const struct cj_fl_dialect *d = cj_fl_dialect_of(v, &e);
    return d ? d->name : NULL;
}

static void test_versions(void **state)
{
    (void)state;
    assert_string_equal(row("2.7.2"), "pipe");
    assert_string_equal(row("2.8.0"), "pipe");
    assert_string_equal(row("2.8.1"), "pipe");
    assert_string_equal(row("2.8"), "pipe");
    assert_string_equal(row("2.9"), "cellapi");
    assert_string_equal(row("2.9.0dev0"), "cellapi");
    assert_string_equal(row("2.9.0rc1"), "cellapi");
    assert_string_equal(row("2.10.1"), "cellapi");
    assert_string_equal(row("3.0"), "cellapi");
    struct cj_err e = {0};
    assert_null(cj_fl_dialect_of("2.6.2", &e));
    assert_non_null(strstr(e.msg, "not supported"));
    assert_null(row("1.9"));
    assert_null(row(""));
    assert_null(row(NULL));
    assert_null(row("two.eight"));
    assert_null(row("2"));
    assert_null(row("2.x"));
    assert_null(row("2.8.1.2.3.4.5.6.7.8.9.10.11.12.13.14.15"));
    /* every row is complete */
    size_t n;
    const struct cj_fl_dialect *const *rows = cj_fl_dialects(&n);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(rows[i]->launch);
        assert_non_null(rows[i]->launch->leaf);
        assert_non_null(rows[i]->workers);
        assert_non_null(rows[i]->workers->create);
        assert_non_null(rows[i]->owned_keys);
    }
}

static void test_launch_styles(void **state)
{
    (void)state;
    const struct cj_fl_dialect *p = cj_fl_dialect_of("2.8.1", NULL), *c = cj_fl_dialect_of("2.9", NULL);
    char leaf[128];
    assert_int_equal(p->launch->leaf(leaf, sizeof leaf, "site-1", "J1", 7), 0);
    assert_string_equal(leaf, "site-1_J1_active");
    assert_int_equal(c->launch->leaf(leaf, sizeof leaf, "site-1", "J1", 7), 0);
    assert_string_equal(leaf, "client_api_trainer_7");
    assert_false(p->launch->bootstrap);
    assert_string_equal(p->launch->env_set, "CLIENT_API_TYPE=EX_PROCESS_API");
    assert_string_equal(p->launch->config_file, "config/client_api_config.json");
    assert_true(c->launch->bootstrap);
    assert_null(c->launch->config_file);
    assert_int_equal(p->launch->leaf(leaf, 8, "site-1", "J1", 1), -1);
}

/* Reads the text back: member values by key path ("a" or "a.b" or "a.b.c"). */
struct find {
    const char *path;
    char out[512];
    bool found;
};

static int find_cb(void *ud, const char *key, size_t key_len, const struct cj_json_val *v, struct cj_err *err)
{
    struct find *f = ud;
    const char *dot = strchr(f->path, '.');
    size_t n = dot ? (size_t)(dot - f->path) : strlen(f->path);
    if (n != key_len || memcmp(key, f->path, n)) return 0;
    if (dot) {
        struct find sub = {.path = dot + 1};
        if (cj_json_object_walk(v->raw, v->raw_len, find_cb, &sub, err)) return -1;
        if (sub.found) {
            memcpy(f->out, sub.out, sizeof f->out);
            f->found = true;
        }
        return 0;
    }
    if (v->type == CJ_JSON_STRING) snprintf(f->out, sizeof f->out, "%s", v->s);
    else snprintf(f->out, sizeof f->out, "%.*s", (int)v->raw_len, v->raw);
    f->found = true;
    return 0;
}

static const char *get(const char *text, const char *path, char *buf)
{
    struct find f = {.path = path};
    struct cj_err e = {0};
    assert_int_equal(cj_json_object_walk(text, strlen(text), find_cb, &f, &e), 0);
    if (!f.found) return NULL;
    strcpy(buf, f.out);
    return buf;
}

#define EXTRA(k, v) k "\0" v "\0"

static void test_pipe_config(void **state)
{
    (void)state;
    static const char extra[] =
        EXTRA("TASK_EXCHANGE", "{\"pipe_channel_name\": \"task\", \"launch_once\": false, \"max_resends\": null,"
                               " \"train_task_name\": \"train\"}")
        EXTRA("METRICS_EXCHANGE", "{\"pipe_channel_name\": \"metric\", \"HEARTBEAT_TIMEOUT\": 60}");
    struct cj_fl_launch_info li = {
        .site = "site-1", .job_id = "3f2a-77", .auth_token = "tok\"x", .auth_token_signature = "sig",
        .worker_url = "tcp://127.0.0.1:40123", .server_url = "grpc://fl.example:8002", .server_security = "mtls",
        .workspace_dir = "/ws", .extra = extra, .extrac = 2,
    };
    char *t = NULL, b[512];
    struct cj_err e = {0};
    assert_int_equal(cj_fl_pipe_config_text(&li, &t, &e), 0);
    assert_string_equal(get(t, "site_name", b), "site-1");
    assert_string_equal(get(t, "job_id", b), "3f2a-77");
    assert_string_equal(get(t, "auth_token", b), "tok\"x");
    assert_string_equal(get(t, "auth_token_signature", b), "sig");
    assert_string_equal(get(t, "cp_conn_props.fqcn", b), "site-1.3f2a-77");
    assert_string_equal(get(t, "cp_conn_props.url", b), "tcp://127.0.0.1:40123");
    assert_string_equal(get(t, "cp_conn_props.connection_security", b), "clear");
    assert_string_equal(get(t, "root_conn_props.fqcn", b), "server");
    assert_string_equal(get(t, "root_conn_props.url", b), "grpc://fl.example:8002");
    assert_string_equal(get(t, "root_conn_props.connection_security", b), "mtls");
    assert_string_equal(get(t, "TASK_EXCHANGE.launch_once", b), "false");
    assert_string_equal(get(t, "TASK_EXCHANGE.max_resends", b), "null");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.CLASS_NAME", b), CJ_FL_PIPE_CELL_PIPE);
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.mode", b), "ACTIVE");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.site_name", b), "site-1");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.token", b), "3f2a-77");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.root_url", b), "tcp://127.0.0.1:40123");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.secure_mode", b), "false");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.workspace_dir", b), "/ws");
    assert_string_equal(get(t, "METRICS_EXCHANGE.pipe_channel_name", b), "metric");
    assert_string_equal(get(t, "METRICS_EXCHANGE.pipe.ARG.root_url", b), "tcp://127.0.0.1:40123");
    assert_null(get(t, "relay_conn_props", b));
    free(t);

    /* no exchanges given: TASK_EXCHANGE with the task channel, no metric pipe */
    li.extra = NULL;
    li.extrac = 0;
    assert_int_equal(cj_fl_pipe_config_text(&li, &t, &e), 0);
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe_channel_name", b), "task");
    assert_string_equal(get(t, "TASK_EXCHANGE.pipe.ARG.mode", b), "ACTIVE");
    assert_null(get(t, "METRICS_EXCHANGE", b));
    free(t);

    /* refused: the relay's own keys, a pipe of the job's, a listener that is not tcp */
    static const char owned[] = EXTRA("auth_token", "\"x\"");
    li.extra = owned;
    li.extrac = 1;
    assert_int_equal(cj_fl_pipe_config_text(&li, &t, &e), -1);
    assert_non_null(strstr(e.msg, "bootstrap.auth_token: set by the relay"));
    static const char piped[] = EXTRA("TASK_EXCHANGE", "{\"pipe\": {}}");
    li.extra = piped;
    assert_int_equal(cj_fl_pipe_config_text(&li, &t, &e), -1);
    assert_non_null(strstr(e.msg, "TASK_EXCHANGE"));
    li.extra = NULL;
    li.extrac = 0;
    li.worker_url = "unix:/run/w.sock";
    assert_int_equal(cj_fl_pipe_config_text(&li, &t, &e), -1);
    assert_null(t);
}

static void test_jobdesc_version(void **state)
{
    (void)state;
    struct cj_config *site = malloc(sizeof *site), *job = malloc(sizeof *job);
    struct cj_job_desc *d = malloc(sizeof *d);
    char why[512];
    cj_config_defaults(site);
    strcpy(site->relay.site, "site-1");
    strcpy(site->upstream.project_name, "p");
    assert_string_equal(site->relay.flare_version, "2.9");
    static const char good[] = "{\"job_id\": \"J1\", \"flare_version\": \"2.8.1\", \"bootstrap\": "
                               "{\"TASK_EXCHANGE\": {\"launch_once\": true}}}";
    assert_int_equal(cj_jobdesc_parse(good, strlen(good), d, why, sizeof why), 0);
    assert_int_equal(cj_jobdesc_config(d, site, job, why, sizeof why), 0);
    assert_string_equal(job->relay.flare_version, "2.8.1");
    char line[1024];
    cj_jobdesc_describe(d, line, sizeof line);
    assert_non_null(strstr(line, "flare_version 2.8.1"));
    static const char old[] = "{\"job_id\": \"J1\", \"flare_version\": \"2.6.0\"}";
    assert_int_equal(cj_jobdesc_parse(old, strlen(old), d, why, sizeof why), 0);
    assert_int_equal(cj_jobdesc_config(d, site, job, why, sizeof why), -1);
    assert_non_null(strstr(why, "flare_version: FLARE 2.6.0 is not supported"));
    static const char notstr[] = "{\"job_id\": \"J1\", \"flare_version\": 2.8}";
    assert_int_equal(cj_jobdesc_parse(notstr, strlen(notstr), d, why, sizeof why), -1);
    assert_non_null(strstr(why, "flare_version"));
    static const char owned[] = "{\"job_id\": \"J1\", \"bootstrap\": {\"cp_conn_props\": {}}}";
    assert_int_equal(cj_jobdesc_parse(owned, strlen(owned), d, why, sizeof why), -1);
    assert_non_null(strstr(why, "bootstrap.cp_conn_props: set by the relay"));
    static const char piped[] = "{\"job_id\": \"J1\", \"bootstrap\": {\"METRICS_EXCHANGE\": {\"pipe\": 1}}}";
    assert_int_equal(cj_jobdesc_parse(piped, strlen(piped), d, why, sizeof why), -1);
    assert_non_null(strstr(why, "bootstrap.METRICS_EXCHANGE: pipe: set by the relay"));
    static const char notobj[] = "{\"job_id\": \"J1\", \"bootstrap\": {\"TASK_EXCHANGE\": []}}";
    assert_int_equal(cj_jobdesc_parse(notobj, strlen(notobj), d, why, sizeof why), -1);
    free(site);
    free(job);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_launch_styles),
        cmocka_unit_test(test_pipe_config),
        cmocka_unit_test(test_jobdesc_version),
    };
    return cmocka_run_group_tests_name("dialect", tests, NULL, NULL);
}
