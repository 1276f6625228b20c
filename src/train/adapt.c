/* The training settings left to the data ("auto" in config.json): chosen
 * from the training rows at the start of a fresh run, before the
 * vocabulary is built, and recorded as numbers, so that the run can be
 * repeated and resumed. The recipe was chosen on IMDB (reviews of hundreds
 * of tokens); texts at least as long as the crops keep exactly its values.
 * On shorter texts (one-line reviews, tweets, answers) the k-fold runs on
 * short sets (benchmarks/EXPERIMENTS.md, "Adaptive defaults" and "Other
 * people's data") showed these to help:
 *   - more epochs: a short set gives few steps an epoch, and its texts
 *     few tokens a step;
 *   - a shorter weight average: 0.999 averages over ~1,000 steps, about a
 *     short set's whole run;
 *   - the wide path starts at naive Bayes' log-count ratios (wide_nb): a
 *     row seen in a handful of steps barely leaves zero under AdamW, and
 *     NB's ratios are the strong linear model on few short rows (NBSVM).
 *     On IMDB's 22,500 long reviews the same start overfits (validation
 *     -1.2 points), so long texts keep zeros;
 *   - one member: with the NB start, three members read as one on the
 *     short sets (the start removes the variance the average was there
 *     for), at a third of the time;
 *   - word n-grams up to 2, not 3, on the wide path: a few thousand short
 *     rows rarely repeat a trigram, whose rows are then noise;
 *   - every word in the vocabulary (min count 1): a word seen once in a
 *     few thousand rows is still a feature worth its NB ratio;
 *   - NBSVM's scores added to the logits (nbsvm.c): a linear SVM on the
 *     wide path's n-grams, which the joint model's wide path never becomes
 *     (it stays near its naive Bayes start); the sum beats either alone on
 *     short sets. On IMDB's long reviews it is not needed and not tried;
 *   - a refit (refit.c): once validation has chosen the epoch count, the
 *     model is trained again on every row, validation rows included. A
 *     tenth more rows is worth +0.4 to +0.8 points on a few thousand rows;
 *     on IMDB it would double a long training for little.
 * Crops stay: turning them off on short texts was level on those sets.
 *
 * One setting follows the number of classes instead: the wide table holds
 * a weight per class in each of its 4,194,304 rows, 16 MiB a class, kept
 * four or five times over in training (gradients, AdamW's moments, the
 * weight average). Past 8 classes it has fewer rows, so that it never
 * holds more than 2^25 weights: 26 classes would otherwise make a 440 MB
 * model and take 2.7 GB to train. Short sets have far fewer distinct
 * n-grams than rows even then (benchmarks/EXPERIMENTS.md, "Many classes"). */
#include <stdio.h>
#include <string.h>

#include "attnctl/train.h"

/* A setting's two values: the IMDB recipe's, and short texts'. */
#define PICK(is_short, name) ((is_short) ? AC_ADAPT_SHORT_##name : AC_ADAPT_LONG_##name)

/* The largest power of two of rows, at most AC_ADAPT_WIDE_BUCKETS, with
 * rows x classes <= AC_ADAPT_WIDE_WEIGHTS. */
static int wide_buckets_for(int n_classes)
{
    int rows = AC_ADAPT_WIDE_BUCKETS;
    while (rows > 1 && (long long)rows * (n_classes > 1 ? n_classes : 1) > AC_ADAPT_WIDE_WEIGHTS)
        rows /= 2;
    return rows;
}

void ac_train_adapt_to_long_texts(ac_train_config *tc, ac_model_config *mc)
{
    ac_adapt_data d = {.median_tokens = tc->crop_max,
                       .labelled = 1,
                       .n_classes = mc->n_classes,
                       .can_refit = 1};
    char said[8];
    ac_train_adapt(tc, mc, &d, said, sizeof said);
}

void ac_train_adapt(ac_train_config *tc, ac_model_config *mc, const ac_adapt_data *d, char *said,
                    size_t n)
{
    if (n > 0)
        said[0] = '\0';
    if (!d->labelled) {
        /* Pretraining: no weight average, members or wide path (the
         * classifier's recipe), the fixed epochs and vocabulary. Not
         * reported. */
        if (tc->ema == AC_AUTO)
            tc->ema = 0.0f;
        if (tc->members == AC_AUTO)
            tc->members = 1;
        if (tc->wide_nb == AC_AUTO)
            tc->wide_nb = 0.0f;
        if (tc->epochs == AC_AUTO)
            tc->epochs = AC_ADAPT_LONG_EPOCHS;
        if (tc->min_count == AC_AUTO)
            tc->min_count = AC_ADAPT_LONG_MIN_COUNT;
        if (tc->refit == AC_AUTO)
            tc->refit = 0;
        if (tc->nbsvm == AC_AUTO)
            tc->nbsvm = 0.0f;
        if (mc->wide_order == AC_WIDE_ORDER_AUTO)
            mc->wide_order = 0;
        if (mc->wide_buckets == AC_WIDE_BUCKETS_AUTO)
            mc->wide_buckets = AC_ADAPT_WIDE_BUCKETS; /* unused: no classifier's head */
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
        tc->epochs = PICK(is_short, EPOCHS);
        SAY("%d epochs", tc->epochs);
    }
    if (tc->ema == AC_AUTO) {
        tc->ema = PICK(is_short, EMA);
        SAY("weight average decay %g", (double)tc->ema);
    }
    if (tc->members == AC_AUTO) {
        tc->members = PICK(is_short, MEMBERS);
        SAY("%d member%s", tc->members, tc->members == 1 ? "" : "s");
    }
    if (tc->min_count == AC_AUTO) {
        tc->min_count = PICK(is_short, MIN_COUNT);
        SAY("vocabulary min count %lld", (long long)tc->min_count);
    }
    const int buckets_auto = mc->wide_buckets == AC_WIDE_BUCKETS_AUTO;
    if (buckets_auto)
        mc->wide_buckets = wide_buckets_for(d->n_classes);
    if (mc->wide_order == AC_WIDE_ORDER_AUTO && mc->wide_buckets > 0) {
        mc->wide_order = PICK(is_short, WIDE_ORDER);
        SAY("wide path of word n-grams up to %d", mc->wide_order);
    }
    const int has_wide = mc->wide_order >= 1 && mc->wide_buckets > 0;
    if (buckets_auto && has_wide && mc->wide_buckets < AC_ADAPT_WIDE_BUCKETS)
        SAY("wide table of %d rows for %d classes", mc->wide_buckets, d->n_classes);
    if (tc->wide_nb == AC_AUTO && !has_wide)
        tc->wide_nb = 0.0f; /* nothing to start: not worth a word */
    if (tc->wide_nb == AC_AUTO) {
        tc->wide_nb = PICK(is_short, WIDE_NB);
        if (tc->wide_nb > 0)
            SAY("wide path from naive Bayes x%g", (double)tc->wide_nb);
        else
            SAY("wide path from zeros");
    }
    if (mc->wide_order == AC_WIDE_ORDER_AUTO)
        mc->wide_order = 0; /* no buckets: no wide path */
    if (tc->nbsvm == AC_AUTO) {
        if (has_wide && is_short && d->has_validation) {
            SAY("NBSVM's scores added at a weight the validation rows choose");
        } else {
            tc->nbsvm = has_wide ? PICK(is_short, NBSVM) : 0.0f;
            if (tc->nbsvm > 0)
                SAY("NBSVM's scores x%g added", (double)tc->nbsvm);
        }
    }
    if (tc->refit == AC_AUTO) {
        tc->refit = d->can_refit ? PICK(is_short, REFIT) : 0;
        if (tc->refit)
            SAY("then all rows for the best epoch count");
    }
    if (used > 0 && used < n)
        snprintf(said + used, n - used, " (median text %lld tokens, %s --crop-max %d)",
                 (long long)d->median_tokens, is_short ? "below" : "at least", tc->crop_max);
#undef SAY
}
