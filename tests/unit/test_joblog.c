/* SPDX-License-Identifier: Apache-2.0 */
/* test_joblog.c — a job's FLARE log files (lib/ops/joblog.c): the four files and
 * their line formats, the daemon's lines that name the job (through the log
 * tap), a disk that does not take the lines (a FIFO nobody reads: the caller
 * never waits, records past the bound are dropped and the count written once the
 * disk is back), rotation as FLARE's RotatingFileHandler, an unwritable folder. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ops/joblog.h"
#include "util/log.h"

static char tmp[64];

static int setup(void **state)
{
    snprintf(tmp, sizeof tmp, "/tmp/cj-joblog-XXXXXX");
    assert_non_null(mkdtemp(tmp));
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t n = fread(buf, 1, (size_t)len, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Waits (5 s at most) until path holds text. */
static char *wait_for_text(const char *path, const char *text)
{
    for (int i = 0; i < 500; i++) {
        char *s = slurp(path);
        if (s && strstr(s, text)) return s;
        free(s);
        usleep(10000);
    }
    fail_msg("%s never held '%s'", path, text);
    return NULL;
}

static void assert_lines_match(const char *text, const char *re)
{
    regex_t rx;
    assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), 0);
    char *copy = strdup(text), *save = NULL;
    int n = 0;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++)
        if (regexec(&rx, l, 0, NULL, 0)) fail_msg("line '%s' does not match %s", l, re);
    assert_true(n > 0);
    regfree(&rx);
    free(copy);
}

#define TS "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3} - "

static void test_files_and_formats(void **state)
{
    char ws[128], dir[160], path[192];
    snprintf(ws, sizeof ws, "%s/ws", tmp);
    assert_int_equal(mkdir(ws, 0755), 0);   /* the workspace; <workspace>/J1 is made by the writer */
    snprintf(dir, sizeof dir, "%s/J1", ws);
    struct cj_joblog *jl = cj_joblog_open(dir, "J1");
    assert_non_null(jl);
    cj_joblog_worker_line(jl, 1, "epoch 1: loss=0.5 \"q\" \\ tab\there caf\xc3\xa9 \xff");
    cj_joblog_worker_line(jl, 2, "");   /* skipped */
    cj_log_info("job J1 started: server tcp://x");          /* names the job: in */
    cj_log_info("job J10 started: another job");            /* J10 is not J1 */
    cj_log_warning("worker site-1.J1.trainer_1 (pid 7) exited after 1.0 s: exit code 1");
    cj_log_info("worker trainer_1: J1 echo");               /* an output echo: not twice */
    cj_log_error("job J1: fatal: it broke");
    cj_log_debug("job J1: a debug line");                   /* below INFO: out */
    cj_joblog_close(jl);

    snprintf(path, sizeof path, "%s/log.txt", dir);
    char *txt = wait_for_text(path, "it broke");
    assert_lines_match(txt, TS "(ExternalProcessBackend|cjrelayd) - (INFO|WARNING|ERROR) - ");
    assert_non_null(strstr(txt, " - ExternalProcessBackend - INFO - epoch 1: loss=0.5 \"q\" \\ tab\there caf\xc3\xa9 \xff\n"));
    assert_non_null(strstr(txt, " - cjrelayd - INFO - job J1 started: server tcp://x\n"));
    assert_non_null(strstr(txt, " - cjrelayd - WARNING - worker site-1.J1.trainer_1 (pid 7) exited"));
    assert_non_null(strstr(txt, " - cjrelayd - ERROR - job J1: fatal: it broke\n"));
    assert_null(strstr(txt, "J10"));
    assert_null(strstr(txt, "echo"));
    assert_null(strstr(txt, "debug"));
    free(txt);

    snprintf(path, sizeof path, "%s/error_log.txt", dir);
    char *err = slurp(path);
    assert_non_null(err);
    assert_lines_match(err, TS "cjrelayd - ERROR - job J1: fatal: it broke$");
    free(err);

    snprintf(path, sizeof path, "%s/log_fl.txt", dir);   /* FLARE's FLFilter: its loggers, and above INFO */
    char *fl = slurp(path);
    assert_non_null(fl);
    assert_non_null(strstr(fl, "ExternalProcessBackend - INFO - epoch 1"));
    assert_non_null(strstr(fl, "cjrelayd - WARNING - "));
    assert_null(strstr(fl, "cjrelayd - INFO - "));
    free(fl);

    snprintf(path, sizeof path, "%s/log.json", dir);
    char *js = slurp(path);
    assert_non_null(js);
    assert_lines_match(js, "^\\{\"asctime\": \"[0-9-]{10} [0-9:]{8},[0-9]{3}\", \"name\": \"[A-Za-z]+\", \"fullName\": "
                           "\"[A-Za-z_.]+\", \"levelname\": \"[A-Z]+\", \"fl_ctx\": \"\", \"message\": \".*\"\\}$");
    /* as json.dumps(ensure_ascii=True) writes it; an invalid byte as U+FFFD */
    assert_non_null(strstr(js, "\"name\": \"ExternalProcessBackend\", \"fullName\": \"" CJ_JOBLOG_TRAINER_LOGGER
                               "\", \"levelname\": \"INFO\", \"fl_ctx\": \"\", \"message\": \"epoch 1: loss=0.5 "
                               "\\\"q\\\" \\\\ tab\\there caf\\u00e9 \\ufffd\"}\n"));
    free(js);
}

/* A disk that takes nothing: log.txt is a FIFO nobody reads, so the writer thread blocks
 * opening it.  The caller goes on at memory speed, the records past the bound are dropped
 * and counted; once a reader comes, the rest is written, with the count. */
/* Reads fd to its end (EOF, or EAGAIN on a non-blocking fd), adding to *got and
 * keeping the last bytes read over every call in tail (a C string, at most tsz - 1). */
static void read_keeping_tail(int fd, char *tail, size_t tsz, size_t *tl, size_t *got)
{
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        *got += (size_t)n;
        size_t keep = (size_t)n < tsz - 1 ? (size_t)n : tsz - 1;
        size_t old = *tl + keep > tsz - 1 ? tsz - 1 - keep : *tl;   /* of the tail so far */
        memmove(tail, tail + *tl - old, old);
        memcpy(tail + old, buf + n - keep, keep);
        *tl = old + keep;
        tail[*tl] = 0;
    }
}

static void test_stuck_disk(void **state)
{
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/stuck", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/log.txt", dir);
    assert_int_equal(mkfifo(path, 0644), 0);
    struct cj_joblog_counts c0, c1;
    cj_joblog_counts(&c0);
    struct cj_joblog *jl = cj_joblog_open(dir, "J2");
    char line[200];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = 0;
    /* the writer is stuck for good: that this loop ends at all shows the caller never waits */
    for (int i = 0; i < 10000; i++) cj_joblog_worker_line(jl, 1, line);   /* ~5 MiB of records */
    cj_joblog_counts(&c1);
    assert_true(c1.dropped - c0.dropped > 5000);               /* most were dropped: 1 MiB waits */
    assert_true(c1.records - c0.records > 1000);               /* ...after the first MiB was taken */
    int fd = open(path, O_RDONLY | O_NONBLOCK);                /* the disk is back */
    assert_true(fd >= 0);
    fcntl(fd, F_SETFL, 0);
    size_t got = 0;
    char buf[65536], tail[512] = "";
    ssize_t n;
    while (got < 200000 && (n = read(fd, buf, sizeof buf)) > 0) got += (size_t)n;   /* the waiting MiB, taken */
    /* the writer thread frees room as it writes: on a loaded machine the line may still be
     * dropped at first, so it is offered until it is taken (the file is read meanwhile) */
    size_t tl = 0;                                  /* the last bytes read, over every read */
    for (int i = 0; i < 500; i++) {
        struct cj_joblog_counts b, a2;
        cj_joblog_counts(&b);
        cj_joblog_worker_line(jl, 1, "after the disk came back");
        cj_joblog_counts(&a2);
        if (a2.dropped == b.dropped) break;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        read_keeping_tail(fd, tail, sizeof tail, &tl, &got);
        fcntl(fd, F_SETFL, 0);
        usleep(10000);
    }
    cj_joblog_close(jl);
    read_keeping_tail(fd, tail, sizeof tail, &tl, &got);   /* EOF when the writer closes the file */
    close(fd);
    assert_true(got > 250000 && got < CJ_JOBLOG_PENDING_MAX);   /* log.txt's share of the MiB (~30 %) */
    assert_non_null(strstr(tail, "cjrelayd - WARNING - "));
    assert_non_null(strstr(tail, "log records of this job dropped: the disk did not keep up\n"));
    assert_non_null(strstr(tail, "ExternalProcessBackend - INFO - after the disk came back\n"));
    snprintf(path, sizeof path, "%s/log.json", dir);
    char *js = wait_for_text(path, "log records of this job dropped: the disk did not keep up");
    free(js);
}

/* Rotation as RotatingFileHandler: past CJ_JOBLOG_FILE_MAX the file becomes .1, .1 becomes .2. */
static void test_rotation(void **state)
{
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/rot", tmp);
    struct cj_joblog *jl = cj_joblog_open(dir, "J3");
    static char line[4000];
    memset(line, 'r', sizeof line - 1);
    struct cj_joblog_counts c0, c;
    cj_joblog_counts(&c0);
    /* until 2.5 files' worth is taken (a record dropped by a busy disk does not count) */
    for (int i = 0;; i++) {
        cj_joblog_counts(&c);
        if ((c.records - c0.records) * (sizeof line + 60) >= 2 * CJ_JOBLOG_FILE_MAX + CJ_JOBLOG_FILE_MAX / 2) break;
        cj_joblog_worker_line(jl, 1, line);
        if (i % 20 == 19) usleep(4000);   /* about the disk's pace: 20 lines queue ~250 KB */
    }
    cj_joblog_worker_line(jl, 1, "the last line");
    cj_joblog_close(jl);
    snprintf(path, sizeof path, "%s/log.txt", dir);
    free(wait_for_text(path, "the last line"));
    struct stat st;
    for (int i = 0; i <= 2; i++) {
        snprintf(path, sizeof path, i ? "%s/log.txt.%d" : "%s/log.txt", dir, i);
        assert_int_equal(stat(path, &st), 0);
        assert_true((uint64_t)st.st_size <= CJ_JOBLOG_FILE_MAX);
        if (i) assert_true((uint64_t)st.st_size > CJ_JOBLOG_FILE_MAX - sizeof line - 100);
    }
    snprintf(path, sizeof path, "%s/log.txt.3", dir);
    assert_int_not_equal(stat(path, &st), 0);
}

/* A folder that cannot be made (its parent is a file): nothing is made, the caller goes on
 * (the one warning in the daemon's log is checked by tests/e2e/test_joblogs.sh). */
static void test_unwritable(void **state)
{
    char file[128], dir[160];
    snprintf(file, sizeof file, "%s/afile", tmp);
    close(open(file, O_CREAT | O_WRONLY, 0644));
    snprintf(dir, sizeof dir, "%s/J4", file);
    struct cj_joblog *jl = cj_joblog_open(dir, "J4");
    assert_non_null(jl);
    for (int i = 0; i < 100; i++) cj_joblog_worker_line(jl, 1, "a line");
    usleep(100000);
    cj_joblog_close(jl);
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_and_formats),
        cmocka_unit_test(test_stuck_disk),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_unwritable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
