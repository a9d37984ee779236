/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_config.c — the config loader: a failed load leaves the config
 * untouched, messages start with the file path, and a loaded config written
 * back as INI loads to the same values (real files in a temporary directory:
 * slow but faithful).  The same input also goes through the value parsers
 * (sizes, durations, endpoints) and the launch token file parser: accepted
 * tokens are printable, blank-free, within bounds and taken from the input; a
 * refusal names the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fl/launcher.h"
#include "ops/config.h"

static char dir[64] = "/tmp/fuzz_config.XXXXXX", path[96], path2[96];

static void write_to(const char *p, const void *d, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f) { perror(p); abort(); }
    if (n && fwrite(d, 1, n, f) != n) { perror(p); abort(); }
    fclose(f);
}

static void remove_dir(void)
{
    unlink(path);
    unlink(path2);
    rmdir(dir);
}

static void tokens(const char *data, size_t n)
{
    struct cj_launch_tokens t;
    struct cj_err err = {0};
    memset(&t, 0, sizeof t);
    if (cj_launcher_parse_tokens("tokens.txt", data, n, &t, &err) != 0) {
        if (strncmp(err.msg, "launch_token_file tokens.txt", 28)) abort();
        return;
    }
    if (t.n < 1 || t.n > CJ_LAUNCHER_TOKENS_MAX) abort();
    for (size_t i = 0; i < t.n; i++) {
        size_t l = strlen(t.tok[i]);
        if (l < CJ_LAUNCHER_TOKEN_MIN || l > CJ_LAUNCHER_TOKEN_MAX) abort();
        for (size_t k = 0; k < l; k++)
            if ((unsigned char)t.tok[i][k] <= 0x20 || (unsigned char)t.tok[i][k] >= 0x7f) abort();
        if (!memmem(data, n, t.tok[i], l)) abort();
    }
}

/* INI text from a loaded config's rows: loading it again must give the same values. */
static void roundtrip(const struct cj_config *cfg)
{
    static char ini[65536];
    size_t o = 0, nk;
    const struct cj_cfg_key *k = cj_config_keys(&nk);
    const char *sec = "";
    for (size_t i = 0; i < nk; i++) {
        struct cj_config_row r;
        cj_config_row(cfg, i, &r);
        if (strcmp(sec, k[i].section)) { o += snprintf(ini + o, sizeof ini - o, "[%s]\n", k[i].section); sec = k[i].section; }
        o += snprintf(ini + o, sizeof ini - o, "%s = %s\n", k[i].name, r.value);
    }
    write_to(path2, ini, o);
    struct cj_config again; struct cj_problems pb; cj_problems_init(&pb);
    if (cj_config_load(path2, &again, &pb) != 0) { fprintf(stderr, "%s\n%s\n", ini, pb.msg[0]); abort(); }
    struct cj_config_change ch[CJ_CFG_NKEYS];
    int n = cj_config_diff(cfg, &again, ch, CJ_CFG_NKEYS);
    if (n) { fprintf(stderr, "%s\nchanged %s\n", ini, ch[0].key); abort(); }
}

static void parsers(const char *s)
{
    int64_t v; double d; char buf[300];
    struct cj_endpoint e, e2;
    if (cj_parse_size(s, &v, NULL) == 0 && v < 0) abort();
    if (cj_parse_duration(s, &d, NULL) == 0 && !(d >= 0 && d <= CJ_DURATION_MAX)) abort();
    if (cj_parse_endpoint(s, 7, &e, NULL) == 0) {
        cj_endpoint_format(&e, buf, sizeof buf);
        if (cj_parse_endpoint(buf, 7, &e2, NULL) != 0 || e.kind != e2.kind || e.port != e2.port || strcmp(e.addr, e2.addr)) abort();
    }
    cj_levenshtein(s, "heartbeat_timeout");
    cj_text_ok(s);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t n)
{
    if (!path[0]) {
        if (!mkdtemp(dir)) { perror(dir); abort(); }
        atexit(remove_dir);
        snprintf(path, sizeof path, "%s/relay.ini", dir);
        snprintf(path2, sizeof path2, "%s/relay-rt.ini", dir);
    }
    tokens((const char *)data, n);
    char *s = malloc(n + 1); memcpy(s, data, n); s[n] = 0;
    parsers(s);
    free(s);
    write_to(path, data, n);
    struct cj_config cfg; struct cj_problems pb; cj_problems_init(&pb);
    memset(&cfg, 0xA5, sizeof cfg);
    struct cj_config before = cfg;
    int rc = cj_config_load(path, &cfg, &pb);
    if (rc != 0 && memcmp(&cfg, &before, sizeof cfg)) abort();
    if (rc != 0 && pb.n == 0) abort();
    for (int i = 0; i < pb.n; i++) if (strncmp(pb.msg[i], path, strlen(path))) abort();
    if (rc == 0) {
        static char out[65536];
        cj_config_show(&cfg, CJ_SHOW_JSON, out, sizeof out);
        roundtrip(&cfg);
    }
    return 0;
}
