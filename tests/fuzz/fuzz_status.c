/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_status.c — the status socket's line protocol (cj_status_dispatch, the
 * real command table) with dummy ops, fed lines carved from the input.
 *
 * Input: first byte = flags (bit 0: the client is admin; bit 1: the command
 * callback fails with an unterminated message that holds a newline; bit 2: no
 * command callback; bit 3: no show callback), the rest is split on
 * '\n' into lines, as evbuffer_readln would hand them to the server.
 *
 * The dummy show renders every target of ops/commands.c's table with the
 * field and table writer, including a cell and a field holding bytes from the
 * input, so text and JSON rendering see hostile strings too.
 *
 * Invariants checked, for every line:
 *   - the answer is not empty, ends with exactly one empty line ("\n\n") and
 *     has no other empty line before it; an answer starting "ERR " is one line
 *     "ERR <3 digits> <text>";
 *   - the command callback is reached only with a command of the table other
 *     than help and show, for a client its access level admits, and with as
 *     many arguments as the table allows, each a word but a `rest` one;
 *   - show is called only with a target of the table;
 *   - a JSON answer ("show X json" accepted) is one line starting '{' and
 *     ending '}' with no raw control byte in it;
 *   - cj_status_parse: every word is non-empty and blank-free, at most max;
 *   - everything is freed (LeakSanitizer). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "ops/out.h"
#include "ops/status.h"

static bool g_admin, g_fail;
static int g_commands, g_shows;
static const char *g_line_copy;   /* the raw line, for the hostile cell */

static void die(const char *what, const char *line, const char *ans)
{
    fprintf(stderr, "fuzz_status: %s\nline: [%s]\nanswer: [%s]\n", what, line ? line : "", ans ? ans : "");
    abort();
}

static bool is_word(const char *w)
{
    if (!w || !*w) return false;
    for (const unsigned char *p = (const unsigned char *)w; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p < 0x20 || *p == 0x7f) return false;
    return true;
}

static int dummy_show(void *ctx, enum cj_show what_id, const char *job, struct cj_out *o, char *msg, size_t msgsz)
{
    (void)ctx;
    g_shows++;
    if ((int)what_id < 0 || what_id >= CJ_SHOW_COUNT) die("show called with a target out of the table", NULL, NULL);
    const char *what = cj_shows[what_id].name;
    if (job && !is_word(job)) die("show called with a job that is not a word", job, NULL);
    if (job && job[0] == 'x') {   /* an unknown job: an ERR answer, the rendering dropped */
        snprintf(msg, msgsz, "no job '%s'", job);
        return 404;
    }
    cj_out_str(o, "what", what);
    cj_out_str(o, "line", g_line_copy);
    cj_out_u64(o, "n", UINT64_MAX);
    cj_out_i64(o, "i", INT64_MIN);
    cj_out_dbl(o, "d", 1.0 / 3.0);
    cj_out_bool(o, "b", true);
    static const struct cj_col cols[] = {{"name", 8}, {"value", 0}, {"count", 4}};
    cj_out_table_begin(o, what, cols, 3);
    for (int r = 0; r < 2; r++) {
        cj_out_row_begin(o);
        cj_out_cell_str(o, r ? g_line_copy : "\"quoted\\ \x01 é");
        cj_out_cell_dbl(o, r ? -0.5 : 1e300);
        cj_out_cell_u64(o, (uint64_t)r);
        cj_out_row_end(o);
    }
    cj_out_table_end(o);
    return 0;
}

static int dummy_command(void *ctx, enum cj_cmd cmd, char **args, int nargs, struct cj_status_call *call, char *err,
                         size_t errsz)
{
    (void)ctx;
    g_commands++;
    if ((int)cmd < 0 || cmd >= CJ_CMD_COUNT || cmd == CJ_CMD_HELP || cmd == CJ_CMD_SHOW)
        die("command callback with a command it does not handle", NULL, NULL);
    const char *name = cj_cmds[cmd].name;
    if (cj_cmds[cmd].access == CJ_ACCESS_ADMIN && !g_admin) die("admin command reached for a read-only client", name, NULL);
    if (nargs < cj_cmds[cmd].min_args || nargs > cj_cmds[cmd].max_args)
        die("command callback with an argument count its table entry does not allow", name, NULL);
    for (int i = 0; i < nargs; i++) {
        bool rest = cj_cmds[cmd].rest && i == nargs - 1;   /* the rest of the line: blanks inside allowed */
        if (!args[i][0] || (!rest && !is_word(args[i]))) die("command callback with a bad argument", name, args[i]);
    }
    if (call) die("a call handle where no client can wait", name, NULL);
    if (g_fail) {
        /* longer than err, with a newline: must still be one line */
        memset(err, 'x', errsz);
        err[0] = 'b'; err[5] = '\n'; err[6] = '\r';
        err[errsz - 1] = 'y';   /* not terminated: the server must cope */
        return 500;
    }
    return 0;
}

static void check_answer(const char *line, const char *ans, size_t n, bool json_ok)
{
    if (n < 2 || ans[n - 1] != '\n' || ans[n - 2] != '\n') die("answer does not end with an empty line", line, ans);
    if (memchr(ans, '\0', n)) die("NUL in answer", line, ans);
    const char *dbl = strstr(ans, "\n\n");
    if ((size_t)(dbl - ans) != n - 2) die("empty line inside the answer", line, ans);
    if (n == 2) die("answer is only the empty line", line, ans);
    if (!strncmp(ans, "ERR ", 4)) {
        if (n < 9 || ans[4] < '1' || ans[4] > '9' || ans[5] < '0' || ans[5] > '9' || ans[6] < '0' || ans[6] > '9' ||
            ans[7] != ' ')
            die("malformed ERR line", line, ans);
        if (memchr(ans, '\n', n) != ans + n - 2) die("ERR answer longer than one line", line, ans);
    }
    if (json_ok && ans[0] == '{') {
        const char *nl = memchr(ans, '\n', n);
        if (nl != ans + n - 2 || nl[-1] != '}') die("JSON answer is not one object on one line", line, ans);
        for (const char *p = ans; p < nl; p++)
            if ((unsigned char)*p < 0x20) die("raw control byte in JSON", line, ans);
    }
}

static void check_parse(const char *line, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy) return;
    memcpy(copy, line, len);
    copy[len] = '\0';
    char *argv[3];
    int argc = cj_status_parse(copy, argv, 3);
    if (argc < -1 || argc > 3) die("parse count out of range", line, NULL);
    for (int i = 0; i < argc; i++) {
        if (!argv[i][0] || strpbrk(argv[i], " \t\r")) die("parse gave an empty or blank word", line, NULL);
        if (argv[i] < copy || argv[i] >= copy + len) die("parse word outside the line", line, NULL);
    }
    free(copy);
}

static void one_line(const struct cj_status_ops *ops, const uint8_t *p, size_t len)
{
    char *line = malloc(len + 1), *raw = malloc(len + 1);
    struct evbuffer *out = evbuffer_new();
    if (!line || !raw || !out) abort();
    memcpy(line, p, len);
    line[len] = '\0';
    memcpy(raw, p, len);
    raw[len] = '\0';
    g_line_copy = raw;
    check_parse(raw, len);
    int before = g_commands;
    cj_status_dispatch(ops, g_admin, NULL, line, len, out);
    size_t n = evbuffer_get_length(out);
    char *ans = malloc(n + 1);
    if (!ans) abort();
    evbuffer_remove(out, ans, n);
    ans[n] = '\0';
    check_answer(raw, ans, n, true);
    if (g_commands > before && !g_fail && strncmp(ans, "OK", 2)) die("command succeeded but answer is not OK", raw, ans);
    if (g_commands > before && g_fail && strncmp(ans, "ERR 500 ", 8)) die("failed command not answered ERR 500", raw, ans);
    free(ans);
    evbuffer_free(out);
    free(line);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    g_admin = data[0] & 1;
    g_fail = data[0] & 2;
    struct cj_status_ops ops = {.ctx = NULL, .show = dummy_show, .command = dummy_command};
    if (data[0] & 4) ops.command = NULL;   /* no callback: the server answers ERR 500 itself */
    if (data[0] & 8) ops.show = NULL;      /* no show: ERR 500 */
    data++, size--;
    size_t lines = 0;
    while (size && lines < 64) {
        const uint8_t *nl = memchr(data, '\n', size);
        size_t len = nl ? (size_t)(nl - data) : size;
        if (len < CJ_STATUS_MAX_LINE) one_line(&ops, data, len);   /* longer lines never reach dispatch */
        size -= nl ? len + 1 : len;
        data += nl ? len + 1 : len;
        lines++;
    }
    return 0;
}
