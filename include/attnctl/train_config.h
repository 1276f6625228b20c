/* The training settings (config.json's "training" section) and the state
 * of a run that a checkpoint records (trainer_state.json): plain types, the
 * schema src/train works by. src/io reads and writes them with the model's
 * files (ac_config, ac_model_dir_save); only the trainer gives them meaning. */
#ifndef ATTNCTL_TRAIN_CONFIG_H
#define ATTNCTL_TRAIN_CONFIG_H

#include <stdint.h>

#include "attnctl/optim.h"

/* A training setting left to the data: "auto" in config.json, this value in
 * memory. The trainer resolves it from the training rows before the batch
 * plans (src/train/adapt.c) and records the number it chose, so a finished
 * or checkpointed run never holds it. Only the keys that allow it
 * (training.epochs, ema) take it. */
#define AC_AUTO (-1)

/* At most this many members in a weight average (training.members). */
#define AC_MAX_MEMBERS 64

typedef struct {
    int epochs;
    int batch_size;
    /* Rows of a micro-batch: a step's batch is cut into micro-batches of
     * this many rows by row index, each with its own forward/backward, and
     * their gradients are summed exactly (the same bits for any number of
     * processes, see attnctl/gradsum.h). >= batch_size: one a step. */
    int micro_batch;
    ac_optim_config optim;
    double warmup_frac;   /* warmup steps = warmup_frac * total steps (used when optim.warmup_steps < 0) */
    uint64_t seed;
    double val_split;     /* share of the training file kept for validation */
    int patience;         /* evaluations without improvement before stopping; 0 = never */
    long eval_every;      /* steps between evaluations; 0 = once per epoch */
    int32_t vocab_max;    /* vocabulary size limit, specials included */
    int64_t min_count;
    /* Length robustness: each epoch a share crop_frac of the training rows is
     * cut to a random contiguous span of crop_min..crop_max tokens. */
    double crop_frac;
    int crop_min, crop_max;
    float label_smoothing; /* 0: plain cross-entropy */
    float token_dropout;   /* share of training tokens replaced by <unk> */
    double mask_frac;      /* pretraining (masked LM): share of the tokens predicted */
    float ema;             /* decay of the averaged weights used for evaluation and saving; 0 = off */
    /* Members of a weight average ("model soup"): the classifier is trained
     * this many times from the same initial weights, each member with its own
     * shuffle, crops and dropout, and the model is the mean of the members'
     * kept weights. 1: one run, as before the setting existed. */
    int members;
    /* > 0: the wide table starts at wide_nb / 2 times each class's naive
     * Bayes log-count ratio from the training rows (wide_nb_init) instead of
     * zeros; 0: zeros. */
    float wide_nb;
    /* 1: when the run ends, train once more from the start on every row
     * of the training file (validation rows included) for as many epochs
     * as the best evaluation had, and keep that model (src/train/refit.c);
     * only when the validation rows were split from the training file.
     * 0: the model is the one chosen on the validation rows. */
    int refit;
    /* > 0: NBSVM (src/train/nbsvm.c) is fitted on the training rows and
     * its scores, times nbsvm, are added to the classifier's logits in every
     * evaluation and in the saved model (folded into the wide path's table
     * and the head's bias); 0: none. Classifiers with a wide path only. */
    float nbsvm;
    /* The network's temperature NBSVM's scores are weighed against: the sum
     * is the network's logits / nbsvm_temperature + nbsvm x the scores (at
     * the model's own temperature after). Recorded, not chosen: a run with
     * validation rows fits it at each evaluation and writes the saved
     * model's; one without uses the recorded value (1 when 0). */
    float nbsvm_temperature;
} ac_train_config;

typedef struct {
    long step;            /* optimizer steps done */
    int epoch;            /* current epoch (0-based) */
    int64_t batch_in_epoch; /* batches of this epoch already done */
    uint64_t seed;        /* all randomness derives from (seed, epoch, step) */
    double best_metric;   /* best validation accuracy so far (-1 none) */
    long best_step;
    int bad_evals;        /* evaluations since the best (early stopping) */
    double train_loss_sum; /* running sums since the last evaluation */
    long train_loss_count;
    int eval_pending;     /* 1: the evaluation due at this step was cut short by a
                           * stop; a resumed run does it first */
    /* training.members > 1: the member being trained (0-based; step, epoch
     * and the best figures above are its own), or training.members once the
     * members' average is made; and the steps of the members before it. */
    int member;
    long steps_before;
} ac_trainer_state;

#endif
