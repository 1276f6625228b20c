/* Inference plumbing shared by `attnctl eval` and `attnctl predict`: a loaded
 * model directory, a tokenizer, batch buffers, and activations that grow
 * lazily (a one-line `predict` allocates for that line only; the first
 * larger batch allocates for batch_size x max_len once). Eval and predict run
 * the same forward on the same ids, so a text gets the same probabilities
 * whichever command or batch it goes through. */
#ifndef ATTNCTL_CLI_INFER_H
#define ATTNCTL_CLI_INFER_H

#include <stdint.h>

#include "attnctl/io.h"
#include "attnctl/text.h"
#include "attnctl/util.h"

typedef struct {
    ac_model_dir md;
    ac_tokenizer *tok;
    int batch_size;   /* largest batch */
    int max_len;      /* the model's T */
    int n_classes;
    int32_t *ids;     /* [batch_size * max_len]: the batch, row stride T of the current batch */
    int32_t *lengths; /* [batch_size] */
    int32_t *labels;  /* [batch_size] */
    int64_t *rows;    /* [batch_size] */
    int threads;      /* OpenMP threads for big batches (small ones run on one) */
    int loaded;
    /* A batch runs as groups of rows of similar length (see cli_infer_forward):
     * the group's rows, and every row's results in batch order. */
    int32_t *group_ids, *group_lengths, *group_labels, *order; /* [batch_size * max_len], [batch_size] x3 */
    float *probs, *losses; /* [batch_size * n_classes], [batch_size] */
} cli_infer;

/* Loads the model directory and allocates the batch buffers (not the activations). */
int cli_infer_open(cli_infer *s, const char *model_dir, int batch_size, ac_err *err);
/* Forward over s->ids / s->lengths (B rows of stride T). The rows run as
 * groups of similar length, each padded only to its longest row, so a
 * batch mixing short and long reviews does not pay for the padding of
 * every short one to the longest; a row's result does not depend on the
 * rows it runs with. Probabilities: cli_infer_probs; with labels, the
 * per-example losses: cli_infer_losses. */
int cli_infer_forward(cli_infer *s, int B, int T, const int32_t *labels, ac_err *err);
static inline const float *cli_infer_probs(const cli_infer *s, int b)
{
    return s->probs + (size_t)b * (size_t)s->n_classes;
}
static inline const float *cli_infer_losses(const cli_infer *s) { return s->losses; }
void cli_infer_close(cli_infer *s);
/* Reads a CSV[.gz] (need_label: its labels, in the model's classes) and
 * encodes it for the model: *raw, *corpus and a plan of batches of
 * s->batch_size rows in file order (all zeroed first; the caller frees
 * them, also after an error, which names the file). */
int cli_infer_read_csv(cli_infer *s, const char *path, int need_label, ac_rawdata *raw,
                       ac_corpus *corpus, ac_batch_plan *plan, ac_err *err);

/* The first max_words whitespace-separated words of text[0..len), joined by
 * single spaces, at most max_bytes bytes (cut at a UTF-8 boundary), with
 * "..." appended when anything was left out. Control characters become
 * spaces. Writes into out (size >= max_bytes + 4). */
void cli_text_excerpt(char *out, size_t max_bytes, const char *text, size_t len, int max_words);

#endif
