/* The training settings left to the data ("auto" in config.json): chosen
 * from the training rows at the start of a fresh run, before the batch
 * plans, and recorded as numbers, so that the run can be repeated and
 * resumed. The recipe was chosen on IMDB (reviews of hundreds of tokens);
 * texts at least as long as the crops keep exactly its values. On shorter
 * texts (one-line reviews, tweets, answers) the k-fold runs on short sets
 * (benchmarks/EXPERIMENTS.md, "Adaptive defaults") showed two changes to
 * help:
 *   - more epochs: a short set gives few steps an epoch, and its texts
 *     few tokens a step;
 *   - a shorter weight average: 0.999 averages over ~1,000 steps, about a
 *     short set's whole run.
 * Crops stay: turning them off on short texts was level on those sets. */
#include <stdio.h>
#include <string.h>

#include "attnctl/train.h"

void ac_train_adapt(ac_train_config *tc, const ac_adapt_data *d, char *said, size_t n)
{
    if (n > 0)
        said[0] = '\0';
    if (!d->labelled) {
        /* Pretraining: no weight average (the classifier's recipe), the
         * fixed epochs. Not reported. */
        if (tc->ema == AC_AUTO)
            tc->ema = 0.0f;
        if (tc->epochs == AC_AUTO)
            tc->epochs = AC_ADAPT_LONG_EPOCHS;
        return;
    }
    const int is_short = d->median_tokens < tc->crop_max;
    size_t used = 0;
#define SAY(...)                                                                                  \
    do {                                                                                          \
        if (used < n)                                                                             \
            used += (size_t)snprintf(said + used, n - used, "%s", used ? ", " : "");              \
        if (used < n)                                                                             \
            used += (size_t)snprintf(said + used, n - used, __VA_ARGS__);                         \
    } while (0)
    if (tc->epochs == AC_AUTO) {
        tc->epochs = is_short ? AC_ADAPT_SHORT_EPOCHS : AC_ADAPT_LONG_EPOCHS;
        SAY("%d epochs", tc->epochs);
    }
    if (tc->ema == AC_AUTO) {
        tc->ema = is_short ? AC_ADAPT_SHORT_EMA : AC_ADAPT_LONG_EMA;
        SAY("weight average decay %g", (double)tc->ema);
    }
    if (used > 0 && used < n)
        snprintf(said + used, n - used, " (median text %lld tokens, %s --crop-max %d)",
                 (long long)d->median_tokens, is_short ? "below" : "at least", tc->crop_max);
#undef SAY
}
