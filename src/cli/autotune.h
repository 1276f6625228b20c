/* attnctl train --autotune BUDGET (autotune.c): the checks before any data
 * is read, and the search with its trials on stderr. */
#ifndef ATTNCTL_CLI_AUTOTUNE_H
#define ATTNCTL_CLI_AUTOTUNE_H

#include <signal.h>

#include "attnctl/train.h"
#include "train_options.h"

/* The options that cannot go with --autotune, its budget, the validation
 * rows it needs: 0, or a usage exit status (the error printed). n_ranks:
 * processes of the run (the search runs in one). */
int cli_autotune_check(const train_args *a, const ac_config *cfg, int n_ranks);

/* Runs the search with the run's options (to: as for ac_train) and prints
 * its trials and result. Returns a CLI exit status: 0 with *best_run the
 * best trial's training (for the refit that may follow), CLI_EXIT_SIGINT or
 * CLI_EXIT_SIGTERM after a stop (the best trial so far saved, when there
 * was one), or an error status (printed). */
int cli_autotune_run(const train_args *a, const ac_train_options *to,
                     volatile sig_atomic_t *stop_signal, int quiet, ac_train_result *best_run);

#endif
