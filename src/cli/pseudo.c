/* Self-training's first half (attnctl train --teacher): trained models label
 * unlabelled texts, and the texts they are sure of join the training rows
 * with those labels. Several teachers' probabilities are averaged. */
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/text.h"
#include "cli.h"
#include "infer.h"
#include "progress.h"
#include "pseudo.h"

/* Labels a teacher's class k maps to in the training data: the same names. */
static int map_classes(const cli_infer *s, const char *dir, const ac_rawdata *train,
                       int32_t *map, ac_err *err)
{
    const ac_config *c = &s->md.config;
    if (c->n_labels != train->n_classes)
        return ac_err_set(err, "teacher %s has %d classes, the training data %d", dir,
                          c->n_labels, train->n_classes);
    for (int k = 0; k < c->n_labels; k++) {
        map[k] = -1;
        for (int j = 0; j < train->n_classes; j++)
            if (strcmp(c->labels[k], train->classes[j]) == 0)
                map[k] = j;
        if (map[k] < 0)
            return ac_err_set(err, "teacher %s has the class '%s', which the training data has not",
                              dir, c->labels[k]);
    }
    return 0;
}

/* What add_teacher's batches add to, and its progress line. */
typedef struct {
    const int32_t *map; /* the teacher's class k is the training data's map[k] */
    int train_classes;
    double *sum;
    int64_t done_texts, all_texts;
    double last_draw; /* < 0: nothing drawn yet */
    volatile sig_atomic_t *stop;
    int show;
} teacher_tally;

static void draw_progress(teacher_tally *t)
{
    if (!t->show || ac_now_s() - t->last_draw < 0.5)
        return;
    char done_s[32], all_s[32];
    cli_format_count(done_s, sizeof done_s, (double)t->done_texts);
    cli_format_count(all_s, sizeof all_s, (double)t->all_texts);
    fprintf(stderr, "\r\033[Kattnctl: labelling: %s of %s texts", done_s, all_s);
    fflush(stderr);
    t->last_draw = ac_now_s();
}

static int add_batch(void *user, const cli_infer *s, const cli_infer_batch *b)
{
    teacher_tally *t = user;
    for (int i = 0; i < b->batch.B; i++) {
        const float *p = b->probs + (size_t)i * s->n_classes;
        double *row = t->sum + (size_t)b->batch.rows[i] * (size_t)t->train_classes;
        for (int k = 0; k < s->n_classes; k++)
            row[t->map[k]] += p[k];
    }
    t->done_texts += b->batch.B;
    draw_progress(t);
    return t->stop && *t->stop ? PSEUDO_STOPPED : 0;
}

/* Adds one teacher's probabilities of every text to sum[text][training class]. */
static int add_teacher(const char *dir, const ac_rawdata *texts, const ac_rawdata *train,
                       double *sum, volatile sig_atomic_t *stop, int show, ac_err *err)
{
    cli_infer s;
    ac_corpus corpus;
    ac_batch_plan plan;
    memset(&corpus, 0, sizeof corpus);
    memset(&plan, 0, sizeof plan);
    if (cli_infer_open(&s, dir, PSEUDO_BATCH, err) != 0)
        return ac_err_prefix(err, "teacher");
    int rc = -1;
    teacher_tally tally = {.train_classes = train->n_classes, .sum = sum, .last_draw = -1.0,
                           .stop = stop, .show = show};
    int32_t *map = malloc((size_t)s.n_classes * sizeof *map);
    if (!map) {
        ac_err_set(err, "out of memory");
        goto done;
    }
    if (map_classes(&s, dir, train, map, err) != 0)
        goto done;
    const ac_tokenizer_config *tokenizer = &s.md.config.tokenizer;
    if (ac_corpus_encode(&corpus, texts, tokenizer, &s.md.vocab, s.max_len, err) != 0 ||
        ac_batch_plan_make(&plan, &corpus, NULL, corpus.n, PSEUDO_BATCH, 0, 0, err) != 0) {
        ac_err_prefix(err, "teacher %s", dir);
        goto done;
    }
    tally.map = map;
    tally.all_texts = corpus.n;
    if (stop && *stop) {
        rc = PSEUDO_STOPPED;
        goto done;
    }
    draw_progress(&tally);
    /* a window of batches at a time, as predict runs them; a stop is seen
     * after the window it falls in */
    rc = cli_infer_run_plan(&s, &corpus, &plan, 0, add_batch, &tally, err);
done:
    if (show && tally.last_draw >= 0.0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    free(map);
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    cli_infer_close(&s);
    return rc;
}

/* The chosen rows, their labels and texts: what --resume checks it chose again. */
static void selection_sha256(const ac_rawdata *texts, const int64_t *rows, const int32_t *labels,
                             int64_t n, char hex[65])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    for (int64_t i = 0; i < n; i++) {
        uint8_t head[12];
        for (int k = 0; k < 8; k++)
            head[k] = (uint8_t)((uint64_t)rows[i] >> (8 * k));
        for (int k = 0; k < 4; k++)
            head[8 + k] = (uint8_t)((uint32_t)labels[i] >> (8 * k));
        sha256_update(&ctx, sizeof head, head);
        sha256_update(&ctx, ac_rawdata_text_len(texts, rows[i]) + 1,
                      (const uint8_t *)ac_rawdata_text(texts, rows[i]));
    }
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, digest);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

int cli_pseudo_label(ac_rawdata *train, const char *unlabelled_path, const char *text_column,
                     const char *teachers, double threshold, volatile sig_atomic_t *stop,
                     int show_progress, cli_pseudo_result *r, ac_err *err)
{
    memset(r, 0, sizeof *r);
    ac_rawdata texts;
    if (ac_rawdata_read_texts(&texts, &unlabelled_path, 1, AC_TEXT_FORMAT_AUTO, text_column, err))
        return -1;
    r->n_texts = texts.n_rows;
    const int C = train->n_classes;
    const size_t slots = (size_t)(texts.n_rows > 0 ? texts.n_rows : 1);
    double *sum = calloc(slots * (size_t)C, sizeof *sum);
    int64_t *rows = malloc(slots * sizeof *rows);
    int32_t *labels = malloc(slots * sizeof *labels);
    char *list = strdup(teachers);
    int rc = -1;
    if (!sum || !rows || !labels || !list) {
        ac_err_set(err, "out of memory for the labels of %lld texts", (long long)texts.n_rows);
        goto done;
    }
    int n_teachers = 0;
    for (char *save = NULL, *dir = strtok_r(list, ",", &save); dir;
         dir = strtok_r(NULL, ",", &save)) {
        int teacher_rc = add_teacher(dir, &texts, train, sum, stop, show_progress, err);
        if (teacher_rc != 0) {
            rc = teacher_rc;
            goto done;
        }
        n_teachers++;
    }
    if (n_teachers == 0) {
        ac_err_set(err, "no teacher model given");
        goto done;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < texts.n_rows; i++) {
        const double *p = sum + (size_t)i * (size_t)C;
        int best = 0;
        for (int k = 1; k < C; k++)
            if (p[k] > p[best])
                best = k;
        if (p[best] / n_teachers >= threshold) {
            rows[n] = i;
            labels[n++] = best;
        }
    }
    r->n_kept = n;
    selection_sha256(&texts, rows, labels, n, r->sha256);
    rc = ac_rawdata_append(train, &texts, rows, labels, n, err);
done:
    free(list);
    free(labels);
    free(rows);
    free(sum);
    ac_rawdata_free(&texts);
    return rc;
}
