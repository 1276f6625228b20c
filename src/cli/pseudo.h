/* attnctl train --teacher: teacher models label unlabelled texts (pseudo.c). */
#ifndef ATTNCTL_CLI_PSEUDO_H
#define ATTNCTL_CLI_PSEUDO_H

#include <signal.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/text.h"

#define PSEUDO_BATCH 32   /* texts per forward pass: the labels depend on it only by rounding */
#define PSEUDO_STOPPED 1  /* cli_pseudo_label's return when *stop was set */

typedef struct {
    int64_t n_texts; /* unlabelled texts read (empty ones skipped) */
    int64_t n_kept;  /* of them appended to the training rows */
    char sha256[65]; /* of the kept rows' indices, labels and texts */
} cli_pseudo_result;

/* Reads the texts of unlabelled_path (CSV with text_column or the usual
 * names, or plain text one a line), has every teacher (comma-separated model
 * directories with the training data's classes) give its probabilities,
 * averages them, and appends the texts whose most probable class reaches
 * threshold to train with that class. show_progress: a count redrawn in
 * place on stderr (a terminal). Returns 0, PSEUDO_STOPPED when *stop was set
 * (train unchanged), or -1 with err. */
int cli_pseudo_label(ac_rawdata *train, const char *unlabelled_path, const char *text_column,
                     const char *teachers, double threshold, volatile sig_atomic_t *stop,
                     int show_progress, cli_pseudo_result *r, ac_err *err);

#endif
