#include "infer.h"

#include "attnctl/blas.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Batches of fewer token positions (B x T) run on one thread. */
#define SERIAL_BELOW_TOKENS 4096
/* What one more forward costs beyond its tokens, in token positions: a
 * batch is cut into groups of similar length only where that saves more
 * padding than this. */
#define GROUP_COST_TOKENS 128

int cli_infer_open(cli_infer *s, const char *model_dir, int batch_size, ac_err *err)
{
    memset(s, 0, sizeof *s);
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
    s->threads = omp_get_max_threads();
    s->max_len = s->md.model.cfg.max_len;
    s->n_classes = s->md.model.cfg.n_classes;
    if (ac_tokenizer_create(&s->tok, &s->md.config.tokenizer, err) != 0) {
        cli_infer_close(s);
        return -1;
    }
    size_t n_ids = (size_t)batch_size * (size_t)s->max_len;
    s->ids = calloc(n_ids, sizeof *s->ids);
    s->lengths = calloc((size_t)batch_size, sizeof *s->lengths);
    s->labels = calloc((size_t)batch_size, sizeof *s->labels);
    s->rows = calloc((size_t)batch_size, sizeof *s->rows);
    s->group_ids = calloc(n_ids, sizeof *s->group_ids);
    s->group_lengths = calloc((size_t)batch_size, sizeof *s->group_lengths);
    s->group_labels = calloc((size_t)batch_size, sizeof *s->group_labels);
    s->order = calloc((size_t)batch_size, sizeof *s->order);
    s->probs = calloc((size_t)batch_size * (size_t)s->n_classes, sizeof *s->probs);
    s->losses = calloc((size_t)batch_size, sizeof *s->losses);
    if (!s->ids || !s->lengths || !s->labels || !s->rows || !s->group_ids || !s->group_lengths ||
        !s->group_labels || !s->order || !s->probs || !s->losses) {
        cli_infer_close(s);
        return ac_err_set(err, "out of memory for batches of %d x %d tokens", batch_size,
                          s->max_len);
    }
    return 0;
}

/* The first allocation fits the first batch exactly (fast cold start for one
 * line); any later growth jumps straight to batch_size x max_len so that it
 * happens at most once more. */
static int ensure_activations(cli_infer *s, int B, int T, ac_err *err)
{
    const ac_activations *a = &s->md.model.act;
    if (a->mem && B <= a->max_B && T <= a->max_T)
        return 0;
    int want_B = B, want_T = T;
    if (a->mem) {
        want_B = s->batch_size;
        want_T = s->max_len;
    }
    return ac_model_alloc_activations(&s->md.model, want_B, want_T, err);
}

/* One forward over B rows of stride T (s->group_* or the batch itself). */
static int forward_rows(cli_infer *s, const int32_t *ids, const int32_t *lengths,
                        const int32_t *labels, int B, int T, ac_err *err)
{
    if (ensure_activations(s, B, T, err) != 0)
        return -1;
    /* A small batch (a one-line `predict`) runs on one thread: starting
     * OpenMP's threads and its fork/join cost more than they save there
     * (measured: 1 review 11.5 ms against 21-25 ms with 2 threads; 4 IMDB
     * reviews 27 against 30 ms; 32 reviews 105 against 98 ms). Any thread
     * count gives the same bits. The caller's count is restored: training
     * after a teacher's labelling (train --teacher) must not run on one. */
    int threads = (size_t)B * (size_t)T < SERIAL_BELOW_TOKENS ? 1 : s->threads;
    int before = omp_get_max_threads();
    if (threads != before)
        omp_set_num_threads(threads);
    ac_model_forward(&s->md.model, ids, lengths, labels, B, T, 0, 0);
    if (threads != before)
        omp_set_num_threads(before);
    return 0;
}

/* s->order[0..B): the rows by length, longest first (ties in batch order). */
static void order_by_length(cli_infer *s, int B)
{
    for (int i = 0; i < B; i++) {
        int j = i;
        while (j > 0 && s->lengths[s->order[j - 1]] < s->lengths[i]) {
            s->order[j] = s->order[j - 1];
            j--;
        }
        s->order[j] = i;
    }
}

int cli_infer_forward(cli_infer *s, int B, int T, const int32_t *labels, ac_err *err)
{
    if (B < 1 || B > s->batch_size || T < 1 || T > s->max_len)
        return ac_err_set(err, "internal: batch %d x %d outside %d x %d", B, T, s->batch_size,
                          s->max_len);
    const int C = s->n_classes;
    order_by_length(s, B);
    /* Groups of consecutive rows in that order, each padded to its first
     * (longest) row, chosen to cost the fewest token positions (dynamic
     * programming over where the groups end; B is a batch, tens of rows). */
    long best[B + 1];
    int start[B + 1];
    best[0] = 0;
    for (int j = 1; j <= B; j++) {
        best[j] = -1;
        for (int i = 0; i < j; i++) {
            long cost = best[i] + (long)(j - i) * s->lengths[s->order[i]] + GROUP_COST_TOKENS;
            if (best[j] < 0 || cost < best[j]) {
                best[j] = cost;
                start[j] = i;
            }
        }
    }
    int ends[B], n_groups = 0;
    for (int j = B; j > 0; j = start[j])
        ends[n_groups++] = j;
    const ac_activations *a = &s->md.model.act;
    for (int g = n_groups - 1; g >= 0; g--) {
        const int end = ends[g], begin = g + 1 < n_groups ? ends[g + 1] : 0;
        const int n = end - begin, Tg = s->lengths[s->order[begin]];
        for (int k = 0; k < n; k++) {
            const int row = s->order[begin + k];
            memcpy(s->group_ids + (size_t)k * Tg, s->ids + (size_t)row * T,
                   (size_t)Tg * sizeof *s->group_ids);
            s->group_lengths[k] = s->lengths[row];
            s->group_labels[k] = labels ? labels[row] : 0;
        }
        if (forward_rows(s, s->group_ids, s->group_lengths, labels ? s->group_labels : NULL, n,
                         Tg, err) != 0)
            return -1;
        for (int k = 0; k < n; k++) {
            const int row = s->order[begin + k];
            memcpy(s->probs + (size_t)row * C, a->probs_out + (size_t)k * C,
                   (size_t)C * sizeof *s->probs);
            s->losses[row] = labels ? a->losses[k] : 0.0f;
        }
    }
    return 0;
}

void cli_infer_close(cli_infer *s)
{
    if (s->loaded)
        ac_model_dir_free(&s->md);
    ac_tokenizer_free(s->tok);
    free(s->ids);
    free(s->lengths);
    free(s->labels);
    free(s->rows);
    free(s->group_ids);
    free(s->group_lengths);
    free(s->group_labels);
    free(s->order);
    free(s->probs);
    free(s->losses);
    memset(s, 0, sizeof *s);
}

int cli_infer_read_csv(cli_infer *s, const char *path, int need_label, ac_rawdata *raw,
                       ac_corpus *corpus, ac_batch_plan *plan, ac_err *err)
{
    memset(raw, 0, sizeof *raw);
    memset(corpus, 0, sizeof *corpus);
    memset(plan, 0, sizeof *plan);
    ac_read_options ro = {.need_label = need_label};
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
