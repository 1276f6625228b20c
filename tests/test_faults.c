/* Faults, end to end through the binary: a signal at any moment of training,
 * a full disk while saving, an impossible memory request, and hostile
 * predict input (a 54 MB line, binary garbage). Small data from data/. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#define TRAIN_CSV "data/sample_train.csv"
#define TIMEOUT_S 60.0

/* $BUILD/test_faults/NAME, emptied. */
static void work_dir(char *buf, size_t n, const char *name)
{
    const char *build = getenv("BUILD");
    snprintf(buf, n, "%s/test_faults/%s", build && *build ? build : "build", name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    ck_assert_int_eq(system(cmd), 0);
}

typedef struct {
    int status;       /* exit status, or 128 + signal */
    int signaled;     /* killed by a signal */
    long max_rss_kb;
    char err[8192];   /* the start of stderr */
    long out_lines;   /* lines written to stdout */
} run_result;

typedef struct {
    const char *stdin_path; /* NULL: /dev/null */
    rlim_t fsize_limit;     /* 0: none */
    rlim_t as_limit;        /* 0: none */
    int signal;             /* sent after delay_s (0: none) */
    double delay_s;
    int signal_after_line;  /* > 0: send when stderr has this many lines instead */
    const char *signal_after_text; /* non-NULL: send when stderr holds this text instead */
    int twice;              /* send it again 1 ms later (GNU timeout: the process, then its group) */
} run_options;

/* Runs attnctl with args (NULL-terminated, without the program name). */
static run_result run_opts(const char *const *args, const run_options *o)
{
    char out_path[] = "/tmp/attnctl-faults-out-XXXXXX", err_path[] = "/tmp/attnctl-faults-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    ck_assert(out_fd >= 0 && err_fd >= 0);
    const char *argv[64];
    int n = 0;
    argv[n++] = attnctl_path();
    for (; args[n - 1] && n < 63; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int in = open(o->stdin_path ? o->stdin_path : "/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        if (o->fsize_limit) {
            struct rlimit l = {o->fsize_limit, o->fsize_limit};
            setrlimit(RLIMIT_FSIZE, &l);
        }
        if (o->as_limit) {
            struct rlimit l = {o->as_limit, o->as_limit};
            setrlimit(RLIMIT_AS, &l);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    double start = now_s();
    int sent = 0, status = 0;
    struct rusage ru;
    for (;;) {
        pid_t r = wait4(pid, &status, WNOHANG, &ru);
        if (r == pid)
            break;
        double t = now_s() - start;
        if (o->signal && !sent) {
            int due = o->signal_after_line > 0 || o->signal_after_text ? 0 : t >= o->delay_s;
            if (o->signal_after_line > 0 || o->signal_after_text) {
                char buf[8192];
                ssize_t k = pread(err_fd, buf, sizeof buf - 1, 0);
                buf[k > 0 ? k : 0] = '\0';
                int lines = 0;
                for (ssize_t i = 0; i < k; i++)
                    lines += buf[i] == '\n';
                due = o->signal_after_text ? strstr(buf, o->signal_after_text) != NULL
                                           : lines >= o->signal_after_line;
            }
            if (due) {
                kill(pid, o->signal);
                if (o->twice) {
                    usleep(1000);
                    kill(pid, o->signal);
                }
                sent = 1;
            }
        }
        if (t > TIMEOUT_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            ck_abort_msg("%s %s did not finish within %.0f s", argv[0], args[0], TIMEOUT_S);
        }
        usleep(1000);
    }
    run_result res;
    memset(&res, 0, sizeof res);
    res.signaled = WIFSIGNALED(status);
    res.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    res.max_rss_kb = ru.ru_maxrss;
    ssize_t k = pread(err_fd, res.err, sizeof res.err - 1, 0);
    res.err[k > 0 ? k : 0] = '\0';
    char buf[65536];
    off_t off = 0;
    while ((k = pread(out_fd, buf, sizeof buf, off)) > 0) {
        for (ssize_t i = 0; i < k; i++)
            res.out_lines += buf[i] == '\n';
        off += k;
    }
    close(out_fd);
    close(err_fd);
    unlink(out_path);
    unlink(err_path);
    return res;
}

static run_result run(const char *const *args)
{
    run_options o = {0};
    return run_opts(args, &o);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = read_all(a, &la), *y = read_all(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/* Temporary files left next to the saved ones (".tmp." in the name). */
static int count_tmp_files(const char *dir)
{
    int n = 0;
    const char *sub[] = {"", "/checkpoint"};
    for (int s = 0; s < 2; s++) {
        char path[1100];
        snprintf(path, sizeof path, "%s%s", dir, sub[s]);
        DIR *d = opendir(path);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)))
            n += strstr(e->d_name, ".tmp") != NULL;
        closedir(d);
    }
    return n;
}

/* --epochs and --ema given: nothing left to the data, so no "adapted" line
 * comes before the lines the signals are timed by. */
/* Every setting "auto" would choose from the (short) data is given, so the
 * runs and their stderr lines are what these tests were written with. */
/* checkpoint/ema-*.safetensors files: their number, and the size of the last one seen. */
static int scan_ema_files(const char *dir, off_t *size)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "ema-", 4) == 0 && !strstr(e->d_name, ".tmp")) {
            char file[1400];
            struct stat st;
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            if (size && stat(file, &st) == 0)
                *size = st.st_size;
            n++;
        }
    closedir(d);
    return n;
}
static int count_ema_files(const char *dir) { return scan_ema_files(dir, NULL); }
static off_t ema_file_size(const char *dir)
{
    off_t size = 0;
    scan_ema_files(dir, &size);
    return size;
}

#define TRAIN_ARGS(dir)                                                                            \
    "train", TRAIN_CSV, "--out", dir, "--epochs", "6", "--ema", "0.999", "--patience", "100",      \
        "--seed", "11", "--d-model", "16", "--heads", "2", "--ff", "32", "--max-len", "48",        \
        "--batch-size", "16", "--members", "3", "--wide-nb", "0", "--min-count", "2", "--wide", "3",  \
        "--refit", "0", "--nbsvm", "0"
/* The same for pretraining (an evaluation line about every epoch). */
#define PRETRAIN_ARGS(dir)                                                                         \
    "pretrain", TRAIN_CSV, "--out", dir, "--epochs", "6", "--eval-every", "30", "--seed", "11",    \
        "--d-model", "16", "--heads", "2", "--ff", "32", "--max-len", "48", "--batch-size", "16"

/* ------------------------------------------------------------------ tests */

/* SIGINT or SIGTERM early, mid-run and late: exit 130/143 with a message
 * naming --resume, and the resumed run ends with the same bytes as a run
 * that was never interrupted. _i = 0: train, 1: pretrain. */
/* "At once" is 20 ms after the fork. AddressSanitizer's start-up runs before
 * main (about 50 ms here, twice with the OpenBLAS re-exec), where no program
 * can block or catch a signal, so under ASan "at once" means just after it. */
#if defined(__SANITIZE_ADDRESS__)
#define AT_ONCE_S 0.3
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AT_ONCE_S 0.3
#endif
#endif
#ifndef AT_ONCE_S
#define AT_ONCE_S 0.02
#endif

START_TEST(test_signal_then_resume_is_identical)
{
    const char *command = _i ? "pretrain" : "train";
    char ref[1024], ref_name[32];
    snprintf(ref_name, sizeof ref_name, "reference-%s", command);
    work_dir(ref, sizeof ref, ref_name);
    const char *ref_train[] = {TRAIN_ARGS(ref), "--quiet", NULL};
    const char *ref_pretrain[] = {PRETRAIN_ARGS(ref), "--quiet", NULL};
    run_result r = run(_i ? ref_pretrain : ref_train);
    ck_assert_msg(r.status == 0, "reference run: %s", r.err);
    char ref_model[1100];
    snprintf(ref_model, sizeof ref_model, "%s/model.safetensors", ref);

    const struct { int sig; double delay; int after_line; const char *threads; int twice; } cases[] = {
        {SIGTERM, 0.0, 3, "2", 0},  /* after the first epoch line */
        {SIGINT, 0.0, 5, "1", 0},   /* a few epochs in */
        {SIGINT, AT_ONCE_S, 0, "2", 0}, /* at once: while reading the data or at the first step */
        {SIGTERM, 0.15, 0, "2", 0},
        /* as GNU timeout sends it: the second one used to kill the stop halfway */
        {SIGTERM, 0.0, 4, "2", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1024], name[32];
        snprintf(name, sizeof name, "signal-%s-%zu", command, i);
        work_dir(dir, sizeof dir, name);
        rmdir(dir); /* train creates it */
        const char *train_args[] = {TRAIN_ARGS(dir), "--threads", cases[i].threads, NULL};
        const char *pretrain_args[] = {PRETRAIN_ARGS(dir), "--threads", cases[i].threads, NULL};
        run_options o = {.signal = cases[i].sig, .delay_s = cases[i].delay,
                         .signal_after_line = cases[i].after_line, .twice = cases[i].twice};
        r = run_opts(_i ? pretrain_args : train_args, &o);
        ck_assert_msg(!r.signaled, "case %zu: killed by signal %d", i, r.status - 128);
        if (r.status == 0)
            continue; /* finished before the signal: nothing to check */
        int want = cases[i].sig == SIGTERM ? 143 : 130;
        ck_assert_msg(r.status == want, "case %zu: exit %d, want %d: %s", i, r.status, want, r.err);
        ck_assert_int_eq(count_tmp_files(dir), 0);
        if (strstr(r.err, "nothing was saved"))
            continue; /* stopped before training began: a fresh run is the way on */
        ck_assert_msg(strstr(r.err, "--resume"), "case %zu: %s", i, r.err);
        const char *resume[] = {command, "--resume", dir, "--quiet", NULL};
        run_result rr = run(resume);
        ck_assert_msg(rr.status == 0, "case %zu: resume: %s", i, rr.err);
        char model[1100];
        snprintf(model, sizeof model, "%s/model.safetensors", dir);
        ck_assert_msg(same_file(model, ref_model), "case %zu: resumed weights differ", i);
    }
}
END_TEST

/* Out of room while saving (a file-size limit, as on a full disk): one clear
 * line, exit 1, no temporary files, the previous model still loads, and the
 * run resumes once there is room again. Regression: SIGXFSZ used to kill the
 * process halfway and leave *.tmp files. */
START_TEST(test_full_disk_keeps_previous_model)
{
    char dir[1024];
    work_dir(dir, sizeof dir, "full-disk");
    rmdir(dir);
    /* One member: a model is saved at the first evaluation. */
    const char *args[] = {TRAIN_ARGS(dir), "--members", "1", NULL};
    run_options stop = {.signal = SIGTERM, .signal_after_line = 3};
    run_result r = run_opts(args, &stop);
    ck_assert_msg(r.status == 143, "exit %d: %s", r.status, r.err);
    char model[1100], before[1100];
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(before, sizeof before, "%s/../full-disk-model-before", dir);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", model, before);
    ck_assert_int_eq(system(cmd), 0);

    const char *resume[] = {"train", "--resume", dir, NULL};
    run_options small = {.fsize_limit = 4096}; /* bytes: smaller than the model file */
    r = run_opts(resume, &small);
    ck_assert_msg(!r.signaled, "killed by signal %d", r.status - 128);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "File too large"), "%s", r.err);
    ck_assert_int_eq(count_tmp_files(dir), 0);
    ck_assert(same_file(model, before));

    char lines[] = "/tmp/attnctl-faults-in-XXXXXX";
    int fd = mkstemp(lines);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "a fine film\nawful\n", 18), 18);
    close(fd);
    const char *predict[] = {"predict", "--model", dir, NULL};
    run_options in = {.stdin_path = lines};
    r = run_opts(predict, &in);
    ck_assert_msg(r.status == 0 && r.out_lines == 2, "predict on the kept model: %s", r.err);
    unlink(lines);

    /* room for the averaged weights but not for the optimizer's state: the
     * checkpoint stays the last one, and no average of a step without a
     * checkpoint is left (regression: an orphan ema-STEP file per failure) */
    ck_assert_int_eq(count_ema_files(dir), 1);
    off_t ema_size = ema_file_size(dir);
    ck_assert_int_gt(ema_size, 4096);
    run_options room_for_ema = {.fsize_limit = (rlim_t)ema_size + 4096};
    r = run_opts(resume, &room_for_ema);
    ck_assert_msg(r.status == 1 && strstr(r.err, "File too large"), "exit %d: %s", r.status, r.err);
    ck_assert_int_eq(count_tmp_files(dir), 0);
    ck_assert_int_eq(count_ema_files(dir), 1);

    r = run(resume);
    ck_assert_msg(r.status == 0, "resume with room: %s", r.err);
    unlink(before);
}
END_TEST

/* A stop while training again on every row (training.refit): exit 143, the
 * model chosen on the validation rows stays, no refit directory is left,
 * and --resume does the refit: the same bytes as a run never stopped.
 * Regression: resuming said "nothing to resume" and the refit was lost. */
#define REFIT_ARGS(dir)                                                                            \
    "train", TRAIN_CSV, "--out", dir, "--epochs", "3", "--seed", "11", "--d-model", "16",          \
        "--heads", "2", "--ff", "32", "--max-len", "48", "--batch-size", "16", "--members", "1",   \
        "--min-count", "2", "--refit", "1"
START_TEST(test_stopped_refit_resumes)
{
    char ref[1024], dir[1024];
    work_dir(ref, sizeof ref, "refit-reference");
    work_dir(dir, sizeof dir, "refit-stopped");
    rmdir(ref);
    rmdir(dir);
    const char *ref_args[] = {REFIT_ARGS(ref), NULL};
    run_result r = run(ref_args);
    ck_assert_msg(r.status == 0, "reference run: %s", r.err);

    const char *args[] = {REFIT_ARGS(dir), NULL};
    run_options stop = {.signal = SIGTERM, .signal_after_text = "training again from the start"};
    r = run_opts(args, &stop);
    ck_assert_msg(r.status == 143, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "keeps the model chosen on the validation rows"), "%s", r.err);
    char path[1100], ref_path[1100];
    snprintf(path, sizeof path, "%s/refit", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(ref_path, sizeof ref_path, "%s/model.safetensors", ref);
    ck_assert_msg(!same_file(path, ref_path), "the stopped refit's model is already the refit");

    const char *resume[] = {"train", "--resume", dir, NULL};
    r = run(resume);
    ck_assert_msg(r.status == 0, "resume: %s", r.err);
    ck_assert_msg(same_file(path, ref_path), "the resumed refit differs from an unstopped one");
    /* once done, there is nothing left to resume */
    r = run(resume);
    ck_assert_msg(r.status == 0 && strstr(r.err, "nothing to resume"), "%s", r.err);
}
END_TEST

/* An output path that cannot be a directory: a clear error, exit 1. */
START_TEST(test_unwritable_output)
{
    const char *args[] = {"train", TRAIN_CSV, "--out", "/dev/null/model", "--epochs", "1", NULL};
    run_result r = run(args);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "/dev/null"));
}
END_TEST

/* A batch that cannot fit: refused before training, with the estimate; and
 * under an address-space limit the allocation failure is a message too. */
START_TEST(test_out_of_memory_is_refused_up_front)
{
    char dir[1024];
    work_dir(dir, sizeof dir, "oom");
    rmdir(dir);
    const char *huge[] = {"train", TRAIN_CSV, "--out", dir, "--batch-size", "4096",
                          "--max-len", "4096", NULL};
    double t0 = now_s();
    run_result r = run(huge);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "MiB"), "%s", r.err);
    ck_assert(now_s() - t0 < 10.0);
    ck_assert_int_eq(access(dir, F_OK), -1); /* nothing written */

#ifdef __SANITIZE_ADDRESS__
    printf("SKIP address-space limit: AddressSanitizer reserves terabytes of address space\n");
#else
    const char *big[] = {"train", TRAIN_CSV, "--out", dir, "--batch-size", "512",
                         "--max-len", "1024", "--epochs", "1", NULL};
    run_options limited = {.as_limit = (rlim_t)1536 << 20};
    r = run_opts(big, &limited);
    ck_assert_msg(!r.signaled, "killed by signal %d: %s", r.status - 128, r.err);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "memory"), "%s", r.err);
    ck_assert_int_eq(access(dir, F_OK), -1);
#endif
}
END_TEST

/* predict on a 54 MB line between two short ones, and on binary garbage:
 * one output line per input line, bounded memory, no crash. */
START_TEST(test_predict_hostile_input)
{
    char dir[1024];
    work_dir(dir, sizeof dir, "predict-model");
    rmdir(dir);
    const char *train[] = {"train", TRAIN_CSV, "--out", dir, "--epochs", "1", "--d-model", "16",
                           "--heads", "2", "--ff", "32", "--max-len", "48", "--quiet", NULL};
    run_result r = run(train);
    ck_assert_msg(r.status == 0, "%s", r.err);

    char big[] = "/tmp/attnctl-faults-big-XXXXXX";
    int fd = mkstemp(big);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("a fine film\n", f);
    for (int i = 0; i < 9000000; i++)
        fputs("great ", f);
    fputs("\nawful\n", f);
    fclose(f);
    const char *predict[] = {"predict", "--model", dir, NULL};
    run_options in = {.stdin_path = big};
    r = run_opts(predict, &in);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_int_eq(r.out_lines, 3);
    printf("predict, 54 MB line: max RSS %ld MB\n", r.max_rss_kb / 1024);
    ck_assert_msg(r.max_rss_kb < 200 * 1024, "max RSS %ld kB", r.max_rss_kb);
    unlink(big);

    char junk[] = "/tmp/attnctl-faults-junk-XXXXXX";
    fd = mkstemp(junk);
    ck_assert_int_ge(fd, 0);
    unsigned long long x = 88172645463325252ULL; /* xorshift: reproducible bytes */
    long newlines = 0;
    unsigned char buf[4096];
    for (int block = 0; block < 64; block++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (unsigned char)x;
            newlines += buf[i] == '\n';
        }
        ck_assert_int_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    }
    close(fd);
    in.stdin_path = junk;
    r = run_opts(predict, &in);
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* the last line has no newline: one more answer than newlines */
    ck_assert_int_eq(r.out_lines, newlines + 1);
    unlink(junk);
}
END_TEST


/* Self-training (train --teacher --unlabelled): the texts the teacher is sure
 * of join the training rows, never the validation rows; a run cut short
 * resumes to the same bytes, labelling again; a resumed run whose teacher
 * now chooses other texts, a teacher with other classes and the options'
 * misuse are clear errors. */
#define SMALL_MODEL                                                                                \
    "--seed", "11", "--d-model", "16", "--heads", "2", "--ff", "32", "--max-len", "48",           \
        "--batch-size", "16", "--ema", "0"
#define UNLABELLED_CSV "data/sample_test.csv"

static long number_before(const char *text, const char *words)
{
    const char *at = strstr(text, words);
    ck_assert_msg(at, "no '%s' in: %s", words, text);
    while (at > text && at[-1] == ' ')
        at--;
    while (at > text && at[-1] >= '0' && at[-1] <= '9')
        at--;
    return strtol(at, NULL, 10);
}

START_TEST(test_self_training)
{
    char teacher[1024], student[1024], cut[1024], other[1024], other_csv[1200];
    work_dir(teacher, sizeof teacher, "st-teacher");
    work_dir(student, sizeof student, "st-student");
    work_dir(cut, sizeof cut, "st-cut");
    work_dir(other, sizeof other, "st-other");
    rmdir(teacher);
    rmdir(student);
    rmdir(cut);
    const char *train_teacher[] = {"train", TRAIN_CSV, "--out", teacher, "--epochs", "3",
                                   SMALL_MODEL, "--quiet", NULL};
    run_result r = run(train_teacher);
    ck_assert_msg(r.status == 0, "teacher: %s", r.err);

    const char *self[] = {"train", TRAIN_CSV, "--out", student, "--epochs", "3", SMALL_MODEL,
                          "--teacher", teacher, "--unlabelled", UNLABELLED_CSV,
                          "--pseudo-threshold", "0.55", NULL};
    r = run(self);
    ck_assert_msg(r.status == 0, "student: %s", r.err);
    long kept = number_before(r.err, "of 200 texts at p >= 0.55 join the 600 training rows");
    ck_assert_msg(kept > 0 && kept <= 200, "%s", r.err);
    /* the labelled file's split as without them (540 + 60); all pseudo rows train */
    ck_assert_int_eq(number_before(r.err, "training rows, 60 validation rows"), 540 + kept);
    char run_json[1200];
    snprintf(run_json, sizeof run_json, "%s/checkpoint/run.json", student);
    size_t len;
    char *json = read_all(run_json, &len);
    ck_assert_ptr_nonnull(json);
    char want[64];
    snprintf(want, sizeof want, "\"rows\":\t%ld", kept);
    ck_assert_msg(strstr(json, "\"self_training\"") && strstr(json, want), "%s", json);
    free(json);

    /* stopped by SIGTERM after the first evaluation, resumed: the same model */
    const char *first[] = {"train", TRAIN_CSV, "--out", cut, "--epochs", "3", SMALL_MODEL,
                           "--teacher", teacher, "--unlabelled", UNLABELLED_CSV,
                           "--pseudo-threshold", "0.55", NULL};
    run_options stop = {.signal = SIGTERM, .signal_after_line = 5};
    r = run_opts(first, &stop);
    ck_assert_msg(r.status == 143 && strstr(r.err, "--resume"), "first part: exit %d: %s",
                  r.status, r.err);
    const char *resume[] = {"train", "--resume", cut, "--quiet", NULL};
    r = run(resume);
    ck_assert_msg(r.status == 0, "resume: %s", r.err);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/model.safetensors", student);
    snprintf(b, sizeof b, "%s/model.safetensors", cut);
    ck_assert_msg(same_file(a, b), "the resumed self-training run differs");

    /* other unlabelled texts: resuming with them is refused */
    const char *with_other_texts[] = {"train", "--resume", cut, "--unlabelled",
                                      "data/short_reviews.csv", NULL};
    r = run(with_other_texts);
    ck_assert_msg(r.status == 1 && strstr(r.err, "now choose other texts"), "exit %d: %s",
                  r.status, r.err);

    /* SIGINT while the teacher labels many texts: out at once, nothing written */
    char many[1200];
    snprintf(many, sizeof many, "%s/many.txt", other);
    FILE *f = fopen(many, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 400000; i++)
        fprintf(f, "a fine film number %d, not bad at all\n", i);
    fclose(f);
    char interrupted[1100];
    snprintf(interrupted, sizeof interrupted, "%s/interrupted", other);
    const char *labelling[] = {"train", TRAIN_CSV, "--out", interrupted, SMALL_MODEL,
                               "--teacher", teacher, "--unlabelled", many, NULL};
    run_options during = {.signal = SIGINT, .signal_after_line = 1};
    double t0 = now_s();
    r = run_opts(labelling, &during);
    ck_assert_msg(r.status == 130 && strstr(r.err, "nothing was saved"), "exit %d: %s", r.status,
                  r.err);
    ck_assert_msg(!strstr(r.err, "join the"), "the labelling finished first: %s", r.err);
    ck_assert_msg(now_s() - t0 < 30.0, "%.1f s", now_s() - t0);
    ck_assert_int_eq(access(interrupted, F_OK), -1);

    /* a teacher with other classes */
    snprintf(other_csv, sizeof other_csv, "%s/labels.csv", other);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "sed 's/,positive$/,good/; s/,negative$/,bad/' %s > '%s'",
             TRAIN_CSV, other_csv);
    ck_assert_int_eq(system(cmd), 0);
    char other_model[1100], out[1100];
    snprintf(other_model, sizeof other_model, "%s/model", other);
    snprintf(out, sizeof out, "%s/student", other);
    const char *train_other[] = {"train", other_csv, "--out", other_model, "--epochs", "1",
                                 SMALL_MODEL, "--quiet", NULL};
    r = run(train_other);
    ck_assert_msg(r.status == 0, "%s", r.err);
    const char *mismatch[] = {"train", TRAIN_CSV, "--out", out, "--teacher", other_model,
                              "--unlabelled", UNLABELLED_CSV, NULL};
    r = run(mismatch);
    ck_assert_msg(r.status == 1 && strstr(r.err, "class 'bad'"), "exit %d: %s", r.status, r.err);
    ck_assert_int_eq(access(out, F_OK), -1);

    /* misuse */
    const char *no_texts[] = {"train", TRAIN_CSV, "--out", out, "--teacher", teacher, NULL};
    r = run(no_texts);
    ck_assert_msg(r.status == 2 && strstr(r.err, "go together"), "exit %d: %s", r.status, r.err);
    const char *bad_p[] = {"train", TRAIN_CSV, "--out", out, "--teacher", teacher,
                           "--unlabelled", UNLABELLED_CSV, "--pseudo-threshold", "1.5", NULL};
    r = run(bad_p);
    ck_assert_msg(r.status == 2 && strstr(r.err, "--pseudo-threshold"), "exit %d: %s", r.status,
                  r.err);
    const char *bad_norm[] = {"train", TRAIN_CSV, "--out", out, "--wide-norm", "2", NULL};
    r = run(bad_norm);
    ck_assert_msg(r.status == 2 && strstr(r.err, "--wide-norm"), "exit %d: %s", r.status, r.err);
    const char *missing[] = {"train", TRAIN_CSV, "--out", out, "--teacher", teacher,
                             "--unlabelled", "no/such/texts.csv", NULL};
    r = run(missing);
    ck_assert_msg(r.status == 1 && strstr(r.err, "no/such/texts.csv"), "exit %d: %s", r.status,
                  r.err);
    const char *no_teacher[] = {"train", TRAIN_CSV, "--out", out, "--teacher", "no/such/model",
                                "--unlabelled", UNLABELLED_CSV, NULL};
    r = run(no_teacher);
    ck_assert_msg(r.status == 1 && strstr(r.err, "no/such/model"), "exit %d: %s", r.status,
                  r.err);
    ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_signal_then_resume_is_identical, 0, 2); /* train, pretrain */
    tcase_add_test(tc, test_full_disk_keeps_previous_model);
    tcase_add_test(tc, test_stopped_refit_resumes);
    tcase_add_test(tc, test_unwritable_output);
    tcase_add_test(tc, test_out_of_memory_is_refused_up_front);
    tcase_add_test(tc, test_predict_hostile_input);
    tcase_add_test(tc, test_self_training);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
