/* The training settings left to the data ("auto" in config.json): chosen
 * from the training rows at the start of a fresh run, before the batch
 * plans, and recorded as numbers, so that the run can be repeated and
 * resumed. The recipe was chosen on IMDB (reviews of hundreds of tokens);
 * texts at least as long as the crops keep exactly its values. Shorter
 * texts (one-line reviews, tweets, answers) change what the k-fold runs on
 * short sets showed to help (benchmarks/EXPERIMENTS.md, "Adaptive
 * defaults"):
 *   - crops off: a crop of a 15-token text to a random 1..64-token span
 *     mostly cuts away the words that carry its label;
 *   - more epochs: a short set gives few steps an epoch;
 *   - a shorter weight average: 0.999 averages over ~1,000 steps, more than
 *     a short set's whole run. */
#include <stdio.h>
#include <string.h>

#include "attnctl/train.h"

#define LONG_CROP_FRAC AC_ADAPT_LONG_CROP_FRAC
#define LONG_EPOCHS AC_ADAPT_LONG_EPOCHS
#define LONG_EMA AC_ADAPT_LONG_EMA
#define SHORT_CROP_FRAC AC_ADAPT_SHORT_CROP_FRAC
#define SHORT_EPOCHS AC_ADAPT_SHORT_EPOCHS
#define SHORT_EMA AC_ADAPT_SHORT_EMA

void ac_train_adapt(ac_train_config *tc, const ac_adapt_data *d, char *said, size_t n)
{
    if (!d->labelled) {
        /* Pretraining: no crops, no weight average (what the classifier's
         * recipe means by them), the fixed epochs. Not reported. */
        if (tc->crop_frac == AC_AUTO)
            tc->crop_frac = 0.0;
        if (tc->ema == AC_AUTO)
            tc->ema = 0.0f;
        if (tc->epochs == AC_AUTO)
            tc->epochs = LONG_EPOCHS;
        if (n > 0)
            said[0] = '\0';
        return;
    }
    const int is_short = d->median_tokens < tc->crop_max;
    char why[64];
    snprintf(why, sizeof why, "median text %lld tokens", (long long)d->median_tokens);
    if (n > 0)
        said[0] = '\0';
    size_t used = 0;
#define SAY(...)                                                                                  \
    do {                                                                                          \
        if (used < n)                                                                             \
            used += (size_t)snprintf(said + used, n - used, "%s", used ? ", " : "");              \
        if (used < n)                                                                             \
            used += (size_t)snprintf(said + used, n - used, __VA_ARGS__);                         \
    } while (0)
    if (tc->crop_frac == AC_AUTO) {
        tc->crop_frac = is_short ? SHORT_CROP_FRAC : LONG_CROP_FRAC;
        if (tc->crop_frac > 0)
            SAY("crops %g (%s)", tc->crop_frac, why);
        else
            SAY("crops off (%s, below --crop-max %d)", why, tc->crop_max);
    }
    if (tc->epochs == AC_AUTO) {
        tc->epochs = is_short ? SHORT_EPOCHS : LONG_EPOCHS;
        SAY("%d epochs", tc->epochs);
    }
    if (tc->ema == AC_AUTO) {
        tc->ema = is_short ? SHORT_EMA : LONG_EMA;
        SAY("weight average decay %g", (double)tc->ema);
    }
#undef SAY
}
