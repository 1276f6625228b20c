#include "progress.h"

#include "attnctl/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define BAR_REDRAW_S 0.1 /* at most ten redraws a second */
#define BAR_CELLS 16

static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void cli_format_duration(char *out, size_t n, double s)
{
    if (!isfinite(s) || s < 0) {
        snprintf(out, n, "?");
        return;
    }
    long t = lround(s);
    if (t >= 3600)
        snprintf(out, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(out, n, "%lds", t);
}

void cli_format_count(char *out, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(out, n, "?");
    else if (v >= 1e6)
        snprintf(out, n, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(out, n, "%.1fk", v / 1e3);
    else
        snprintf(out, n, "%.0f", v);
}

void cli_progress_init(cli_progress *p, int quiet)
{
    memset(p, 0, sizeof *p);
    p->mode = quiet ? CLI_PROGRESS_QUIET
                    : isatty(STDERR_FILENO) ? CLI_PROGRESS_BAR : CLI_PROGRESS_LINES;
    p->last_draw = -1.0;
}

void cli_progress_clear(cli_progress *p)
{
    if (p->bar_shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->bar_shown = 0;
    }
}

static void print_begin(const ac_train_progress *ev, int refitting)
{
    char params[32], tokens[32];
    cli_format_count(params, sizeof params, (double)ev->n_params);
    cli_format_count(tokens, sizeof tokens, (double)ev->n_train_tokens);
    if (ev->resumed)
        fprintf(stderr, "attnctl: resuming at step %ld of %ld\n", ev->step, ev->total_steps);
    int pretraining = ev->objective == AC_OBJECTIVE_MASKED_LM;
    if (!ev->resumed && ev->adapted && ev->adapted[0])
        fprintf(stderr, "attnctl: adapted to the data: %s\n", ev->adapted);
    fprintf(stderr,
            "attnctl: %s%lld training %s, %lld %s, vocabulary %d, %s parameters, about %.0f MiB\n",
            pretraining ? "masked-LM pretraining: " : "", (long long)ev->n_train,
            pretraining ? "texts" : "rows", (long long)ev->n_val,
            pretraining ? "held out" : "validation rows", ev->vocab_size, params,
            (double)ev->memory_bytes / (1024.0 * 1024.0));
    double unk = ev->n_train_tokens > 0 ? 100.0 * (double)ev->n_unk_tokens / (double)ev->n_train_tokens : 0.0;
    double trunc = ev->n_train + ev->n_val > 0
                       ? 100.0 * (double)ev->n_truncated / (double)(ev->n_train + ev->n_val)
                       : 0.0;
    char members[64] = "";
    if (ev->members > 1)
        snprintf(members, sizeof members, "%d members x ", ev->members);
    fprintf(stderr,
            "attnctl: %s tokens (%.1f%% unknown, %.1f%% of texts truncated, %.1f%% of batch "
            "positions padding); %ld steps (%s%ld per epoch x %d %s)\n",
            tokens, unk, trunc, 100.0 * ev->padding_fraction, ev->total_steps, members,
            ev->batches_per_epoch, ev->epochs, ev->epochs == 1 ? "epoch" : "epochs");
    if (ev->members > 1)
        fprintf(stderr, "attnctl: the model will be the mean of the %d members' weights (each "
                        "from the same start, with its own shuffle, crops and dropout)\n",
                ev->members);
    if (ev->stop_step < ev->total_steps)
        fprintf(stderr, "attnctl: stopping at step %ld (--max-steps)\n", ev->stop_step);
    if (ev->n_val == 0 && !refitting)
        fprintf(stderr, "attnctl: warning: no validation rows: the latest model is kept and early "
                        "stopping is off\n");
}

static void draw_bar(cli_progress *p, const ac_train_progress *ev)
{
    char line[512], rate_ex[32], rate_tok[32], eta[32];
    long stop = ev->stop_step > 0 ? ev->stop_step : 1;
    double frac = (double)ev->step / (double)stop;
    if (frac > 1)
        frac = 1;
    int filled = (int)(frac * BAR_CELLS);
    char cells[BAR_CELLS + 1];
    for (int i = 0; i < BAR_CELLS; i++)
        cells[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    cells[BAR_CELLS] = '\0';
    cli_format_count(rate_ex, sizeof rate_ex, ev->examples_per_s);
    cli_format_count(rate_tok, sizeof rate_tok, ev->tokens_per_s);
    cli_format_duration(eta, sizeof eta, ev->eta_s);
    double loss = isfinite(ev->loss_avg) ? ev->loss_avg : ev->loss;
    char member[32] = "";
    if (ev->members > 1)
        snprintf(member, sizeof member, "member %d/%d ", ev->member + 1, ev->members);
    int len = snprintf(line, sizeof line,
                       "%sepoch %d/%d [%s] %ld/%ld %3.0f%% | loss %.4f | ETA %s | %s ex/s %s tok/s",
                       member, ev->epoch + 1, ev->epochs, cells, ev->step, stop, 100.0 * frac,
                       loss, eta, rate_ex, rate_tok);
    /* Never wrap: a wrapped line cannot be redrawn with \r. The rates come
     * last, so a narrow terminal loses them first. */
    int width = terminal_width() - 1;
    if (len > width)
        line[width] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    p->bar_shown = 1;
}

static void print_eval(const ac_train_progress *ev)
{
    char tok[32], elapsed[32], val[160];
    cli_format_count(tok, sizeof tok, ev->tokens_per_s);
    cli_format_duration(elapsed, sizeof elapsed, ev->elapsed_s);
    if (ev->soup && ev->kept_member > 0) {
        fprintf(stderr, "the mean of the %d members read val accuracy %.4f, below every member's "
                        "(the lowest %.4f): the model is member %d instead: val loss %.4f, val "
                        "accuracy %.4f, short spans %.4f (saved), %s\n",
                ev->members, ev->mean_val_accuracy, ev->worst_member_accuracy, ev->kept_member,
                ev->val_loss, ev->val_accuracy, ev->val_span_accuracy, elapsed);
        return;
    }
    if (ev->soup) {
        if (isfinite(ev->val_accuracy))
            fprintf(stderr, "the mean of the %d members: val loss %.4f, val accuracy %.4f, short "
                            "spans %.4f (saved), %s\n",
                    ev->members, ev->val_loss, ev->val_accuracy, ev->val_span_accuracy, elapsed);
        else
            fprintf(stderr, "the mean of the %d members: no validation rows (saved), %s\n",
                    ev->members, elapsed);
        return;
    }
    if (isfinite(ev->val_accuracy) && ev->objective == AC_OBJECTIVE_MASKED_LM)
        snprintf(val, sizeof val, "held-out masked-token loss %.4f, accuracy %.4f%s",
                 ev->val_loss, ev->val_accuracy, ev->improved ? " (best, saved)" : "");
    else if (isfinite(ev->val_accuracy))
        snprintf(val, sizeof val, "val loss %.4f, val accuracy %.4f%s, short spans %.4f",
                 ev->val_loss, ev->val_accuracy, ev->improved ? " (best, saved)" : "",
                 ev->val_span_accuracy);
    else
        snprintf(val, sizeof val, "no validation rows (saved)");
    char member[32] = "";
    if (ev->members > 1)
        snprintf(member, sizeof member, "member %d/%d, ", ev->member + 1, ev->members);
    fprintf(stderr, "%sstep %ld/%ld (epoch %.2f): train loss %.4f, %s, lr %.3g, %s tok/s, %s\n",
            member, ev->step, ev->total_steps, ev->epoch_progress, ev->loss, val, ev->lr, tok,
            elapsed);
}

void cli_progress_callback(const ac_train_progress *ev, void *user)
{
    cli_progress *p = user;
    if (p->mode == CLI_PROGRESS_QUIET)
        return;
    switch (ev->kind) {
    case AC_TRAIN_EVENT_BEGIN:
        cli_progress_clear(p);
        print_begin(ev, p->refitting);
        break;
    case AC_TRAIN_EVENT_STEP:
        if (p->mode == CLI_PROGRESS_BAR) {
            double now = ac_now_s();
            if (p->last_draw < 0 || now - p->last_draw >= BAR_REDRAW_S || ev->step >= ev->stop_step) {
                draw_bar(p, ev);
                p->last_draw = now;
            }
        }
        break;
    case AC_TRAIN_EVENT_EVAL:
        cli_progress_clear(p);
        print_eval(ev);
        break;
    }
}
