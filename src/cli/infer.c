#include "infer.h"

#include "attnctl/blas.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Rows a window of batches holds at most (more only for a window of one
 * batch a thread): memory stays bounded for huge --batch-size. */
#define WINDOW_ROWS 4096

int cli_infer_open(cli_infer *s, const char *model_dir, int batch_size, ac_err *err)
{
    memset(s, 0, sizeof *s);
    s->model_dir = model_dir;
    if (ac_model_dir_load_inference(&s->md, model_dir, err) != 0)
        return -1;
    s->loaded = 1;
    if (s->md.model.cfg.objective != AC_OBJECTIVE_CLASSIFICATION) {
        ac_err_set(err, "%s is a pretrained encoder (%s) without a classifier; fine-tune it "
                        "first: attnctl train --init %s TRAIN.csv --out DIR",
                   model_dir, ac_objective_name(s->md.model.cfg.objective), model_dir);
        cli_infer_close(s);
        return -1;
    }
    /* predict loads OpenBLAS only for a model that calls it (main loads it for the rest) */
    if (ac_model_inference_needs_blas(&s->md.model) && ac_blas_load(err) != 0) {
        cli_infer_close(s);
        return -1;
    }
    s->batch_size = batch_size;
    s->max_len = s->md.model.cfg.max_len;
    s->n_classes = s->md.model.cfg.n_classes;
    if (ac_tokenizer_create(&s->tok, &s->md.config.tokenizer, err) != 0) {
        cli_infer_close(s);
        return -1;
    }
    size_t n_ids = (size_t)batch_size * (size_t)s->max_len;
    /* A window of 8 batches a thread (the last of a window leaves a thread
     * idle while the others finish), fewer for batches over 512 rows. */
    const int threads = omp_get_max_threads();
    int window = 8 * threads, cap = WINDOW_ROWS / batch_size;
    if (window > cap)
        window = cap > threads ? cap : threads;
    s->window = window;
    s->batches = calloc((size_t)window, sizeof *s->batches);
    s->jobs = calloc((size_t)window, sizeof *s->jobs);
    /* One allocation, which the system maps untouched: a cold one-line
     * predict pays for the pages its rows use, not a mapping a batch. */
    s->window_ids = n_ids <= SIZE_MAX / sizeof *s->window_ids / (size_t)window
                        ? calloc((size_t)window * n_ids, sizeof *s->window_ids)
                        : NULL;
    if (!s->batches || !s->jobs || !s->window_ids) {
        cli_infer_close(s);
        return ac_err_set(err, "out of memory for a window of %d batches", window);
    }
    for (int k = 0; k < window; k++) {
        cli_infer_batch *b = &s->batches[k];
        b->batch.ids = s->window_ids + (size_t)k * n_ids;
        b->batch.lengths = calloc((size_t)batch_size, sizeof *b->batch.lengths);
        b->batch.labels = calloc((size_t)batch_size, sizeof *b->batch.labels);
        b->batch.rows = calloc((size_t)batch_size, sizeof *b->batch.rows);
        b->probs = calloc((size_t)batch_size * (size_t)s->n_classes, sizeof *b->probs);
        b->losses = calloc((size_t)batch_size, sizeof *b->losses);
        if (!b->batch.lengths || !b->batch.labels || !b->batch.rows ||
            !b->probs || !b->losses) {
            cli_infer_close(s);
            return ac_err_set(err, "out of memory for a window of %d batches of %d x %d tokens",
                              window, batch_size, s->max_len);
        }
    }
    if (ac_infer_pool_init(&s->pool, &s->md.model, threads, window, batch_size, s->max_len,
                           err) != 0) {
        cli_infer_close(s);
        return -1;
    }
    return 0;
}

int cli_infer_run_window(cli_infer *s, int n, int with_labels, ac_err *err)
{
    if (n < 0 || n > s->window)
        return ac_err_set(err, "internal: %d batches for a window of %d", n, s->window);
    for (int k = 0; k < n; k++) {
        const cli_infer_batch *b = &s->batches[k];
        s->jobs[k] = (ac_infer_job){.ids = b->batch.ids, .lengths = b->batch.lengths,
                                    .labels = with_labels ? b->batch.labels : NULL,
                                    .B = b->batch.B, .T = b->batch.T, .probs = b->probs,
                                    .losses = with_labels ? b->losses : NULL};
    }
    if (ac_infer_pool_run(&s->pool, s->jobs, n, err) != 0)
        return ac_err_prefix(err, "%s", s->model_dir);
    return 0;
}

int cli_infer_run_plan(cli_infer *s, const ac_corpus *corpus, const ac_batch_plan *plan,
                       int with_labels, cli_infer_batch_fn on_batch, void *user, ac_err *err)
{
    for (int64_t first = 0; first < plan->n_batches; first += s->window) {
        const int n = plan->n_batches - first < s->window ? (int)(plan->n_batches - first)
                                                          : s->window;
        for (int k = 0; k < n; k++)
            ac_batch_fill(&s->batches[k].batch, corpus, plan, first + k);
        if (cli_infer_run_window(s, n, with_labels, err) != 0)
            return -1;
        for (int k = 0; k < n; k++) {
            int rc = on_batch(user, s, &s->batches[k]);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

void cli_infer_close(cli_infer *s)
{
    ac_infer_pool_free(&s->pool); /* its views before the model */
    if (s->loaded)
        ac_model_dir_free(&s->md);
    ac_tokenizer_free(s->tok);
    for (int k = 0; s->batches && k < s->window; k++) {
        cli_infer_batch *b = &s->batches[k];
        free(b->batch.lengths);
        free(b->batch.labels);
        free(b->batch.rows);
        free(b->probs);
        free(b->losses);
    }
    free(s->batches);
    free(s->window_ids);
    free(s->jobs);
    memset(s, 0, sizeof *s);
}

int cli_infer_read_csv(cli_infer *s, const char *path, const char *text_column,
                       const char *label_column, int need_label, ac_rawdata *raw,
                       ac_corpus *corpus, ac_batch_plan *plan, ac_err *err)
{
    memset(raw, 0, sizeof *raw);
    memset(corpus, 0, sizeof *corpus);
    memset(plan, 0, sizeof *plan);
    ac_read_options ro = {.text_column = text_column,
                          .label_column = need_label ? label_column : NULL,
                          .need_label = need_label};
    if (need_label) {
        ro.classes = s->md.config.labels;
        ro.n_classes = s->md.config.n_labels;
    }
    if (ac_rawdata_read(raw, path, &ro, err) != 0)
        return -1;
    if (ac_corpus_encode(corpus, raw, &s->md.config.tokenizer, &s->md.vocab, s->max_len, err) != 0 ||
        ac_batch_plan_make(plan, corpus, NULL, corpus->n, s->batch_size, 0, 0, err) != 0)
        return ac_err_prefix(err, "%s", path);
    return 0;
}

static int is_space_byte(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

void cli_text_excerpt(char *out, size_t max_bytes, const char *text, size_t len, int max_words)
{
    size_t o = 0, i = 0;
    int words = 0, cut = 0;
    while (i < len) {
        while (i < len && is_space_byte((unsigned char)text[i]))
            i++;
        if (i == len)
            break;
        if (words == max_words) {
            cut = 1;
            break;
        }
        if (words > 0) {
            if (o + 1 > max_bytes) {
                cut = 1;
                break;
            }
            out[o++] = ' ';
        }
        words++;
        while (i < len && !is_space_byte((unsigned char)text[i])) {
            unsigned char c = (unsigned char)text[i];
            if (o + 1 > max_bytes) {
                cut = 1;
                break;
            }
            out[o++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
            i++;
        }
        if (cut)
            break;
    }
    if (cut) {
        /* Do not leave half a UTF-8 sequence: drop trailing continuation
         * bytes and the lead byte they belong to. */
        size_t end = o;
        while (end > 0 && ((unsigned char)out[end - 1] & 0xC0) == 0x80)
            end--;
        if (end > 0 && (unsigned char)out[end - 1] >= 0xC0) {
            unsigned char lead = (unsigned char)out[end - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
            if (o - (end - 1) < need)
                o = end - 1;
        }
        while (o > 0 && out[o - 1] == ' ')
            o--;
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}
