/* SPDX-License-Identifier: Apache-2.0 */
/* mangen.c — writes the man pages' generated parts from the tables the code
 * uses, so the pages cannot drift from the binaries:
 *
 *   mangen page TEMPLATE    the template (hand-written roff) with each marker
 *                           line replaced by its table, on stdout
 *   mangen list WHAT        the table's names, one a line (the tests compare
 *                           them with the pages and the binaries' own output);
 *                           WHAT: keys commands shows stats exit
 *
 * Markers (a line of its own): @CONFIG_KEYS@ (ops/config.c), @COMMANDS@ and
 * @SHOW_TARGETS@ (ops/commands.c), @STATS@ (ops/statreg.c), @EXIT_CJRELAYD@,
 * @EXIT_CJRELAYCTL@ and @EXIT_JOB@ (ops/exitcodes.c), @STATUS_LIMITS@
 * (ops/status.h); @VERSION@ anywhere in a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/commands.h"
#include "ops/config.h"
#include "ops/exitcodes.h"
#include "ops/statreg.h"
#include "ops/status.h"
#include "util/version.h"

/* Text as roff: backslashes escaped, every hyphen as \- (names and flags are
 * copied from the page, and a roff hyphen may not paste as '-'), a leading dot
 * or quote guarded. */
static void roff(FILE *f, const char *s)
{
    if (*s == '.' || *s == '\'') fputs("\\&", f);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else fputc(*s, f);
    }
}

/* A range bound as a file would write it: sizes with the largest exact
 * K/M/G suffix, modes in octal, durations and counts as numbers. */
static void put_number(FILE *f, enum cj_cfg_type t, double v)
{
    if (t == CJ_T_MODE) { fprintf(f, "%04o", (unsigned)v); return; }
    if (t == CJ_T_SIZE && v >= 1024) {
        static const char suffix[] = "KMGT";
        int i = -1;
        while (i < 3 && v >= 1024 && v / 1024 == (double)(unsigned long long)(v / 1024)) { v /= 1024; i++; }
        if (i >= 0) { fprintf(f, "%.0f%c", v, suffix[i]); return; }
    }
    fprintf(f, "%g", v);
}

static void put_keys(FILE *f)
{
    size_t n;
    const struct cj_cfg_key *k = cj_config_keys(&n);
    const char *section = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(k[i].section, section)) {
            section = k[i].section;
            fprintf(f, ".SS [%s]\n", section);
        }
        fprintf(f, ".TP\n.B %s\n", k[i].name);
        roff(f, k[i].doc);
        fputs(".\n.br\n", f);
        fprintf(f, "Type: %s", cj_config_type_name(k[i].type));
        if (k[i].allowed) {
            fputs(" (", f);
            for (int a = 0; k[i].allowed[a]; a++) fprintf(f, "%s%s", a ? ", " : "", k[i].allowed[a]);
            fputs(")", f);
        }
        fputs("; default: ", f);
        if (k[i].def[0]) roff(f, k[i].def); else fputs("empty", f);
        if (k[i].min != 0 || k[i].max != 0) {
            fputs("; range ", f);
            put_number(f, k[i].type, k[i].min);
            fputs(" to ", f);
            put_number(f, k[i].type, k[i].max);
        }
        fprintf(f, "%s; %s.\n", k[i].flags & CJ_CFG_REQUIRED ? "; required" :
                                 k[i].flags & CJ_CFG_JOB_REQUIRED ? "; required for a job" : "",
                k[i].reloadable ? "reloadable" : "read at start only");
    }
}

static void put_commands(FILE *f)
{
    char usage[256];
    for (int i = 0; i < CJ_CMD_COUNT; i++) {
        fputs(".TP\n.B ", f);
        roff(f, cj_cmd_usage((enum cj_cmd)i, false, usage, sizeof usage));
        fputc('\n', f);
        roff(f, cj_cmds[i].help);
        fputs(cj_cmds[i].access == CJ_ACCESS_ADMIN ? ". Admin: root and the daemon's own user only.\n" : ".\n", f);
    }
}

static void put_shows(FILE *f)
{
    for (int i = 0; i < CJ_SHOW_COUNT; i++) {
        fprintf(f, ".TP\n.B %s\n", cj_shows[i].name);
        roff(f, cj_shows[i].help);
        fputs(cj_shows[i].scope == CJ_SCOPE_DAEMON ? "; the whole daemon unless a job is named.\n" : ".\n", f);
    }
}

static void put_stats(FILE *f)
{
    for (size_t s = 0; s < cj_stat_nsections; s++) {
        const struct cj_stat_section *sec = &cj_stat_sections[s];
        fprintf(f, ".SS %s\n", sec->name);
        roff(f, sec->help);
        fputc('\n', f);
        for (size_t i = 0; i < sec->nfields; i++) {
            fprintf(f, ".TP\n.B %s\n", sec->fields[i].name);
            fprintf(f, "(%s) ", sec->fields[i].kind == CJ_STAT_COUNTER ? "counter" : "gauge");
            roff(f, sec->fields[i].help);
            fputc('\n', f);
        }
    }
}

static void put_exit(FILE *f, const char *program)
{
    for (size_t i = 0; i < cj_exit_ncodes; i++) {
        if (strcmp(cj_exit_codes[i].program, program)) continue;
        fprintf(f, ".TP\n.B %d\n", cj_exit_codes[i].code);
        roff(f, cj_exit_codes[i].meaning);
        fputc('\n', f);
    }
}

static void put_status_limits(FILE *f)
{
    fprintf(f, "A command line is at most %d bytes, its newline included (a job description\n"
               "must fit in it); a longer one is refused with ERR 413 and the connection closed.\n", CJ_STATUS_MAX_LINE);
}

/* Writes line with every @VERSION@ replaced. */
static void put_line(FILE *f, const char *line)
{
    const char *v;
    while ((v = strstr(line, "@VERSION@"))) {
        fwrite(line, 1, (size_t)(v - line), f);
        fputs(CJRELAY_VERSION, f);
        line = v + strlen("@VERSION@");
    }
    fputs(line, f);
}

static int page(const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in) { perror(path); return 1; }
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        if (!strcmp(line, "@CONFIG_KEYS@\n")) put_keys(stdout);
        else if (!strcmp(line, "@COMMANDS@\n")) put_commands(stdout);
        else if (!strcmp(line, "@SHOW_TARGETS@\n")) put_shows(stdout);
        else if (!strcmp(line, "@STATS@\n")) put_stats(stdout);
        else if (!strcmp(line, "@EXIT_CJRELAYD@\n")) put_exit(stdout, "cjrelayd");
        else if (!strcmp(line, "@EXIT_CJRELAYCTL@\n")) put_exit(stdout, "cjrelayctl");
        else if (!strcmp(line, "@EXIT_JOB@\n")) put_exit(stdout, "job");
        else if (!strcmp(line, "@STATUS_LIMITS@\n")) put_status_limits(stdout);
        else if (line[0] == '@') { fprintf(stderr, "%s: unknown marker %s", path, line); fclose(in); return 1; }
        else put_line(stdout, line);
    }
    fclose(in);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int list(const char *what)
{
    size_t n;
    if (!strcmp(what, "keys")) {
        const struct cj_cfg_key *k = cj_config_keys(&n);
        for (size_t i = 0; i < n; i++) printf("%s\n", k[i].key);
    } else if (!strcmp(what, "commands")) {
        for (int i = 0; i < CJ_CMD_COUNT; i++) printf("%s\n", cj_cmds[i].name);
    } else if (!strcmp(what, "shows")) {
        for (int i = 0; i < CJ_SHOW_COUNT; i++) printf("%s\n", cj_shows[i].name);
    } else if (!strcmp(what, "stats")) {
        for (size_t s = 0; s < cj_stat_nsections; s++)
            for (size_t i = 0; i < cj_stat_sections[s].nfields; i++) printf("%s\n", cj_stat_sections[s].fields[i].name);
    } else if (!strcmp(what, "exit")) {
        for (size_t i = 0; i < cj_exit_ncodes; i++) printf("%s %d\n", cj_exit_codes[i].program, cj_exit_codes[i].code);
    } else {
        fprintf(stderr, "mangen: list what? keys commands shows stats exit\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "page")) return page(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "list")) return list(argv[2]);
    fprintf(stderr, "usage: mangen page TEMPLATE | mangen list keys|commands|shows|stats|exit\n");
    return 2;
}
