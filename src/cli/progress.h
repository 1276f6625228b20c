/* Training progress on stderr: a one-line bar redrawn in place when stderr is
 * a terminal, one plain line per evaluation otherwise, nothing with --quiet. */
#ifndef ATTNCTL_CLI_PROGRESS_H
#define ATTNCTL_CLI_PROGRESS_H

#include "attnctl/train.h"

typedef enum { CLI_PROGRESS_QUIET = 0, CLI_PROGRESS_LINES = 1, CLI_PROGRESS_BAR = 2 } cli_progress_mode;

typedef struct {
    cli_progress_mode mode;
    double last_draw;  /* monotonic seconds of the last bar redraw */
    int bar_shown;     /* the bar occupies the current terminal line */
    int refitting;     /* the run trains on every row on purpose (training.refit): its
                          lack of validation rows is no cause for a warning */
} cli_progress;

/* Picks the mode: quiet, else a bar when stderr is a terminal, else lines. */
void cli_progress_init(cli_progress *p, int quiet);
/* ac_train_progress_fn; user is the cli_progress. */
void cli_progress_callback(const ac_train_progress *ev, void *user);
/* Erases the bar (before printing anything else on stderr). */
void cli_progress_clear(cli_progress *p);

/* "1h04m", "3m12s", "45s"; "?" when unknown. */
void cli_format_duration(char *out, size_t n, double seconds);
/* "812", "15.2k", "1.3M". */
void cli_format_count(char *out, size_t n, double v);

#endif
