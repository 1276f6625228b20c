/* Inference plumbing shared by `attnctl eval`, `predict`, `quantize`, `bench
 * --model` and self-training's teacher: a loaded model directory, a
 * tokenizer and a window of batches for the library's pool (attnctl/infer.h:
 * one batch a thread, its rows grouped by length), so a text gets the same
 * probabilities whichever command or batch it goes through. */
#ifndef ATTNCTL_CLI_INFER_H
#define ATTNCTL_CLI_INFER_H

#include <stdint.h>

#include "attnctl/infer.h"
#include "attnctl/io.h"
#include "attnctl/text.h"
#include "attnctl/util.h"

/* One batch of a window: its rows (as ac_batch) and its results. */
typedef struct {
    ac_batch batch;  /* ids [batch_size * max_len], lengths, labels, rows [batch_size] */
    float *probs;    /* [batch_size * n_classes] row i's at i * n_classes */
    float *losses;   /* [batch_size] with labels */
} cli_infer_batch;

typedef struct {
    const char *model_dir; /* as given to cli_infer_open; names it in errors */
    ac_model_dir md;
    ac_tokenizer *tok;
    int batch_size;   /* largest batch */
    int max_len;      /* the model's T */
    int n_classes;
    int loaded;
    /* Many batches at once, each on one thread (attnctl/infer.h, the pool):
     * a window of batches filled by the caller, run, then read in order. */
    ac_infer_pool pool;
    int window;             /* batches a window holds */
    cli_infer_batch *batches; /* [window] */
    int32_t *window_ids;    /* [window * batch_size * max_len]: every batch's ids, one allocation */
    ac_infer_job *jobs;     /* [window] */
} cli_infer;

/* Loads the model directory and allocates the window's batch buffers (not
 * the activations). */
int cli_infer_open(cli_infer *s, const char *model_dir, int batch_size, ac_err *err);
/* Runs batches [0, n) of the window (their rows filled by the caller), on
 * as many threads as there are batches, up to the thread count; with_labels:
 * the rows' labels are in batch.labels and the losses are computed. Each
 * batch's results are the same bits at any thread count. */
int cli_infer_run_window(cli_infer *s, int n, int with_labels, ac_err *err);
/* Every batch of the plan over corpus, a window at a time; then, in plan
 * order, on_batch(user, batch) for each. A non-zero value from on_batch
 * stops the run and is returned (errors it reports itself); -1 with err on
 * a failed forward. */
typedef int (*cli_infer_batch_fn)(void *user, const cli_infer *s, const cli_infer_batch *b);
int cli_infer_run_plan(cli_infer *s, const ac_corpus *corpus, const ac_batch_plan *plan,
                       int with_labels, cli_infer_batch_fn on_batch, void *user, ac_err *err);
void cli_infer_close(cli_infer *s);
/* Reads a CSV[.gz] (need_label: its labels, in the model's classes; the
 * columns named, or NULL for the default names) and encodes it for the
 * model: *raw, *corpus and a plan of batches of s->batch_size rows in file
 * order (all zeroed first; the caller frees them, also after an error,
 * which names the file). */
int cli_infer_read_csv(cli_infer *s, const char *path, const char *text_column,
                       const char *label_column, int need_label, ac_rawdata *raw,
                       ac_corpus *corpus, ac_batch_plan *plan, ac_err *err);

/* The first max_words whitespace-separated words of text[0..len), joined by
 * single spaces, at most max_bytes bytes (cut at a UTF-8 boundary), with
 * "..." appended when anything was left out. Control characters become
 * spaces. Writes into out (size >= max_bytes + 4). */
void cli_text_excerpt(char *out, size_t max_bytes, const char *text, size_t len, int max_words);

#endif
