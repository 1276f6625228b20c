/* The training loop: vocabulary, corpora, model, AdamW steps, evaluation,
 * best-model and resumable checkpoints, metrics log and learning curves.
 * Never prints: progress goes through a callback, errors through ac_err.
 *
 * One loop for every objective (DESIGN.md): the classifier (labelled rows)
 * and masked-LM pretraining of the encoder on unlabelled text (attnctl
 * pretrain). What differs is the model's head, the step's loss and what an
 * evaluation measures: for pretraining the held-out share's masked-token
 * loss and accuracy, under a masking that is the same at every evaluation.
 *
 * Output directory layout (DIR = out_dir):
 *   DIR/config.json, vocab.txt, model.safetensors  best model so far (by
 *       validation accuracy; without validation rows: the latest evaluated)
 *   DIR/metrics.jsonl   one JSON object per evaluation
 *   DIR/training.svg    loss and validation accuracy against step
 *   DIR/calibration.svg reliability diagram of the best model on the
 *       validation rows, at the temperature fitted on them (config.json
 *       model.temperature)
 *   DIR/checkpoint/     latest resumable state: config.json, vocab.txt,
 *       model.safetensors, optimizer.safetensors, trainer_state.json and
 *       run.json (the data files and columns, for `--resume DIR`)
 *
 * Determinism: all randomness is counter based on the seed (split, weight
 * init, per-epoch shuffle, per-step dropout), so a run is bitwise
 * reproducible for any thread count, and N steps + resume + M steps equals
 * N + M steps in one go. */
#ifndef ATTNCTL_TRAIN_H
#define ATTNCTL_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "attnctl/comm.h"
#include "attnctl/error.h"
#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/text.h"
#include "attnctl/train_config.h"

#define AC_CHECKPOINT_SUBDIR "checkpoint"
#define AC_METRICS_FILE "metrics.jsonl"
#define AC_CURVES_FILE "training.svg"
#define AC_CALIBRATION_FILE "calibration.svg" /* reliability diagram of the best model */
#define AC_RUN_FILE "run.json" /* inside the checkpoint directory */

typedef enum {
    AC_TRAIN_EVENT_BEGIN = 0, /* once, after setup: sizes below are filled */
    AC_TRAIN_EVENT_STEP = 1,  /* after every optimizer step */
    AC_TRAIN_EVENT_EVAL = 2,  /* after every evaluation (and its saves) */
} ac_train_event_kind;

typedef struct {
    ac_train_event_kind kind;
    ac_objective objective; /* masked LM: val_loss/val_accuracy are masked-token figures */
    int epoch;             /* 0-based epoch of the last step (of the current member) */
    int epochs;
    long step;             /* optimizer steps done so far (including earlier sessions and
                              earlier members) */
    long total_steps;      /* members x epochs x batches per epoch */
    int member, members;   /* the member being trained (0-based) and training.members */
    int soup;              /* EVAL: the evaluation of the members' average (the model) */
    int kept_member;       /* soup: 0, or k when the average read below every member on
                              validation and member k (from 1) is the model instead */
    double mean_val_accuracy, worst_member_accuracy; /* kept_member > 0: the average's
                              validation accuracy and the lowest member's */
    long stop_step;        /* where this session will end at the latest: min(total, max_steps) */
    double epoch_progress; /* the member's step / batches per epoch, e.g. 1.5 */
    double examples_per_s, tokens_per_s; /* this session, training steps only */
    double loss;           /* STEP: this batch; EVAL: mean training loss since the previous evaluation */
    double loss_avg;       /* STEP: mean training loss since the previous evaluation */
    double lr;             /* learning rate of the last step */
    double eta_s;          /* seconds until stop_step at this session's pace */
    double elapsed_s;      /* wall time of training, earlier sessions included (to their last evaluation) */
    /* EVAL */
    double val_loss, val_accuracy; /* NAN without validation rows */
    double val_span_accuracy; /* the validation rows cut to fixed random 5-40-token spans */
    double temperature, val_ece; /* fitted on the validation rows; ECE at that temperature */
    int improved;          /* this evaluation is the new best and was saved as the model */
    double best_val_accuracy; /* -1 when none yet */
    long best_step;
    int bad_evals;         /* evaluations since the best (early stopping at patience) */
    /* BEGIN */
    int64_t n_train, n_val;       /* rows */
    int vocab_size;
    size_t n_params;
    size_t memory_bytes;          /* parameters, gradients, moments and activations */
    long batches_per_epoch;
    int resumed;                  /* 1 when continuing a checkpoint (step = where it resumed) */
    int64_t n_train_tokens, n_unk_tokens, n_truncated; /* of the training corpus */
    double padding_fraction;      /* share of the first epoch's batch positions that are padding */
    const char *adapted;          /* fresh run: the settings chosen from the data
                                     (ac_train_adapt's text), "" when none */
} ac_train_progress;

typedef void (*ac_train_progress_fn)(const ac_train_progress *p, void *user);

typedef struct {
    /* Settings (model, tokenizer, training). Fresh run only: labels,
     * model.vocab_size and model.n_classes are filled in by the trainer (the
     * values given there are ignored). NULL when resuming: the checkpoint's
     * config is used. */
    const ac_config *config;
    const ac_rawdata *train;   /* labelled rows */
    const ac_rawdata *val;     /* NULL: stratified split of train (training.val_split, seed) */
    const char *out_dir;
    int resume;                /* continue from out_dir/checkpoint */
    long max_steps;            /* stop after this many steps in total (0 = no limit);
                                  not stored: resuming with a larger value continues */
    /* Where the data came from: recorded in config.json (provenance) and in
     * checkpoint/run.json for resuming. May be NULL (no SHA-256 is then
     * recorded or checked). On resume the training file's SHA-256 must match
     * the checkpoint's. */
    const char *train_path, *val_path, *text_column, *label_column;
    volatile sig_atomic_t *stop; /* non-zero: finish the step, save, return INTERRUPTED; may be NULL */
    ac_train_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* Called after every optimizer step (step = steps done), before that
     * step's evaluation; may be NULL. For instrumentation and fault-injection
     * tests: it may read or change the weights. */
    void (*after_step)(ac_model *m, long step, void *user);
    void *after_step_user;
    /* What is trained (fresh runs; a resumed run keeps its checkpoint's):
     * AC_OBJECTIVE_CLASSIFICATION (the default) on labelled rows, or
     * AC_OBJECTIVE_MASKED_LM: pretraining on the texts of `train` (labels
     * ignored; no val: val_split holds out a random share). The vocabulary
     * is then built from every row and gets <mask> (and <cls> when
     * config->model.pooling is cls, for a classifier that will pool from it). */
    ac_objective objective;
    /* Masked LM: the text files train was read from, and how (recorded in
     * checkpoint/run.json with their SHA-256, checked on resume). */
    const char *const *text_paths;
    int n_text_paths;
    ac_text_format text_format;
    /* Fresh classification run: start from this model directory (a
     * pretrained encoder): its tokenizer settings, vocabulary and encoder
     * weights (embeddings, positions, n-gram table, layers) are taken, the
     * classifier head is new. The model section of config must agree with
     * it (ac_train_init_config makes it so). */
    const char *init_dir;
    /* Self-training (classification): the last n_pseudo rows of train were
     * labelled by teacher models (attnctl train --teacher): they are training
     * rows only, never validation rows. What made them is recorded in
     * checkpoint/run.json for --resume, which labels them again and checks
     * that pseudo_sha256 (of the chosen rows, their labels and texts) is the same. */
    int64_t n_pseudo;
    const char *unlabelled_path, *teachers, *pseudo_sha256;
    double pseudo_threshold;
    /* Data-parallel training (attnctl/comm.h): every rank calls ac_train
     * with the same options; each computes its share of every step's
     * micro-batches and of each evaluation, the gradients are summed
     * exactly, and only rank 0 writes files. NULL: one process. The result
     * is the same bits for any number of ranks. */
    ac_comm *comm;
    /* A run that ends finished or stopped early after training steps in
     * this session: remove the checkpoint's weights, AdamW moments and
     * average, which nothing can continue from (4-5 times the model's size).
     * checkpoint/ keeps run.json, trainer_state.json, config.json and
     * vocab.txt. 0: keep everything (the tests' bitwise comparisons). */
    int drop_finished_state;
    /* The caller removes out_dir if the run fails (an autotune trial): its
     * errors do not point to a checkpoint there. */
    int out_dir_discarded_on_failure;
} ac_train_options;

/* Makes cfg start from the model in init_dir: its tokenizer settings and
 * every model field that shapes the encoder (vocab_size, max_len, d_model,
 * n_heads, d_ff, n_layers, ln_eps, positions, ngram_order, ngram_buckets)
 * are copied into cfg, and training.vocab_max follows vocab_size; the
 * objective becomes classification. Fails when init_dir does not hold a
 * loadable model config, or cfg asks for cls pooling and its vocabulary has
 * no <cls>. */
int ac_train_init_config(ac_config *cfg, const char *init_dir, ac_err *err);

/* What the settings left to the data (AC_AUTO in training.epochs, ema,
 * members, wide_nb, min_count, refit, nbsvm, model.wide_order and wide_buckets) are
 * chosen from: the training rows after the validation split, tokenised and
 * truncated to model.max_len, before the vocabulary is built, and their
 * number of classes. */
typedef struct {
    int64_t median_tokens; /* tokens of the median row */
    int labelled;          /* 0: pretraining, which takes the fixed values */
    int n_classes;         /* the training rows' classes */
    int can_refit;         /* the validation rows were split from the training rows:
                              training.refit may be 1 */
    int has_validation;    /* there are validation rows: training.nbsvm may stay
                              AC_AUTO, its weight chosen on them as the run goes */
} ac_adapt_data;

/* Resolves every AC_AUTO field of tc and mc from d (the rules are in
 * src/train/adapt.c and attnctl.1) and writes what it chose, one phrase per
 * setting separated by ", ", into said (empty when nothing was left to the
 * data). On texts as long as the crops (median >= crop_max tokens) the
 * values are those of the IMDB recipe: 4 epochs, decay 0.999, 3 members,
 * the wide path of n-grams up to 3 from zeros, words seen twice. */
void ac_train_adapt(ac_train_config *tc, ac_model_config *mc, const ac_adapt_data *d, char *said,
                    size_t n);
/* Resolves every AC_AUTO field to the long-text values, for a tool that
 * makes a model without training data (bench). */
void ac_train_adapt_to_long_texts(ac_train_config *tc, ac_model_config *mc);
/* The values it chooses: texts as long as the crops (the IMDB recipe), and
 * shorter ones. */
#define AC_ADAPT_LONG_EPOCHS 4
#define AC_ADAPT_LONG_EMA 0.999f
#define AC_ADAPT_SHORT_EPOCHS 8
#define AC_ADAPT_LONG_MEMBERS 3
#define AC_ADAPT_SHORT_MEMBERS 1
#define AC_ADAPT_LONG_WIDE_NB 0.0f
#define AC_ADAPT_SHORT_WIDE_NB 0.25f
#define AC_ADAPT_LONG_WIDE_ORDER 3
#define AC_ADAPT_SHORT_WIDE_ORDER 2
#define AC_ADAPT_LONG_MIN_COUNT 2
#define AC_ADAPT_SHORT_MIN_COUNT 1
#define AC_ADAPT_SHORT_EMA 0.99f
#define AC_ADAPT_LONG_REFIT 0
#define AC_ADAPT_SHORT_REFIT 1
#define AC_ADAPT_LONG_NBSVM 0.0f
#define AC_ADAPT_SHORT_NBSVM 4.0f /* without validation rows to choose on */
/* The wide table: AC_ADAPT_WIDE_BUCKETS rows, or, when the classes would
 * make it hold more than AC_ADAPT_WIDE_WEIGHTS weights, the largest power of
 * two of rows that does not (whatever the texts' length). */
#define AC_ADAPT_WIDE_BUCKETS 4194304
#define AC_ADAPT_WIDE_WEIGHTS 33554432

typedef enum {
    AC_TRAIN_FINISHED = 0,      /* all epochs done */
    AC_TRAIN_EARLY_STOPPED = 1, /* patience evaluations without improvement */
    AC_TRAIN_MAX_STEPS = 2,     /* max_steps reached */
    AC_TRAIN_INTERRUPTED = 3,   /* *stop was set; checkpoint saved, resumable */
} ac_train_status;

/* Where a run whose state is st stands against its settings:
 * AC_TRAIN_FINISHED (every epoch done), AC_TRAIN_EARLY_STOPPED (patience
 * evaluations without a better validation accuracy; they count only with
 * validation rows), or -1 when it can go on. */
int ac_train_state_ended(const ac_train_config *tc, const ac_trainer_state *st);

typedef struct {
    ac_train_status status;
    long step;                 /* optimizer steps done in total (every member's) */
    long total_steps;          /* members x epochs x batches per epoch */
    int members;               /* training.members: > 1, the model is their average */
    int kept_member;           /* > 0: the average read below every member on validation,
                                  and this member (from 1) is the model instead */
    int epoch;                 /* 0-based epoch the run is in (== epochs when finished) */
    int n_evals;               /* evaluations in this session */
    double best_val_accuracy;  /* -1 when no evaluation had validation rows */
    long best_step;            /* -1 when none */
    double last_val_loss, last_val_accuracy; /* NAN when none */
    int model_saved;           /* out_dir holds a model (config.json etc.) */
    int peer_failed;           /* the error was another rank's (which reports it) */
    int failure_shared;        /* every rank knows of the error and ends with it */
} ac_train_result;

/* Trains as the options say. Returns 0 with *result filled (also for an
 * interruption: check result->status), or -1 with err filled; a loss or
 * gradient that becomes NaN/Inf is an error naming the step, and the last
 * checkpoint on disk (from the previous evaluation) stays as it was.
 * result may be filled partially on error (step). */
int ac_train(const ac_train_options *opt, ac_train_result *result, ac_err *err);

/* training.refit (src/train/refit.c): once a run has chosen its epochs on
 * validation rows split from the training rows, a second run trains from
 * the start on every row for that many epochs in out_dir/refit, and its
 * config.json, vocab.txt and model.safetensors replace the first run's
 * (metrics.jsonl and the curves stay the first run's). */
#define AC_REFIT_SUBDIR "refit"
typedef struct {
    int epochs;          /* of the second run: the epoch of the best evaluation */
    double val_accuracy; /* the first run's best validation accuracy */
} ac_refit_plan;
/* Whether the run that wrote out_dir and ended as selection says asks for
 * a refit (training.refit 1, validation rows split from the training file,
 * the run finished or stopped early): 1 with *plan filled, 0 when not, -1
 * on an error (config.json unreadable). Under processes every rank calls it
 * with the run's comm (NULL when the run is long over). */
int ac_train_refit_plan(const char *out_dir, const ac_train_result *selection, ac_comm *comm,
                        ac_refit_plan *plan, ac_err *err);
/* The second run, with the first run's options (selection: its data,
 * out_dir, callbacks and stop flag). *res is the second run's; when it is
 * interrupted (res->status AC_TRAIN_INTERRUPTED) or fails, out_dir keeps the
 * first run's model and out_dir/refit is removed. */
int ac_train_refit(const ac_train_options *selection, const ac_refit_plan *plan,
                   ac_train_result *res, ac_err *err);

/* What `--resume DIR` needs before reading data: the files and columns the
 * run was started with (checkpoint/run.json). Empty strings mean "none" /
 * "default column". */
typedef struct {
    char train_file[4096];
    char val_file[4096];
    char text_column[256];
    char label_column[256];
    ac_objective objective;  /* run.json files without the key: classification */
    /* masked LM: the text files in order, their SHA-256 and their format */
    int n_text_files;
    char **text_files;
    char **text_sha256;
    ac_text_format text_format;
    /* self-training: empty teachers when the run had none */
    char unlabelled_file[4096];
    char teachers[8192];      /* comma-separated model directories */
    double pseudo_threshold;
    int64_t n_pseudo;
    char pseudo_sha256[65];
} ac_train_sources;

/* ---- NBSVM on the wide path's features (training.nbsvm; src/train/nbsvm.c) ----
 * Fitted on training rows: for each class c (two classes: one problem,
 * class 1 against class 0), a linear SVM (squared hinge, C 1, bias) on a
 * text's distinct wide-path buckets, each worth its naive Bayes log-count
 * ratio r_c (alpha AC_WIDE_NB_ALPHA, as wide_nb_init) times wide_scale of
 * the text relative to a ten-word sentence's; its weights interpolated
 * towards their mean magnitude (beta 0.25, Wang & Manning 2012). The result
 * is in the wide path's form: a text of n distinct buckets gets
 *   logits[c] += wide_scale(n, norm) * sum of weight[bucket, c] + bias[c].
 * Two classes: the score S is split as +S/2 on class 1 and -S/2 on class 0. */
typedef struct {
    const int32_t *ids;     /* a corpus: row r is ids + off[r], off[r + 1] - off[r] ids */
    const int64_t *off;
    const int32_t *labels;  /* [rows] class of each corpus row */
    const int64_t *rows;    /* the training rows (corpus rows) */
    int64_t n_rows;
    int order, n_buckets, n_classes; /* the wide path's */
    float norm;                      /* model.wide_norm */
} ac_nbsvm_data;

typedef struct {
    int n_classes;
    int64_t n_rows;  /* buckets some training row has, ascending */
    int32_t *bucket; /* [n_rows] */
    float *weight;   /* [n_rows, n_classes] */
    float *bias;     /* [n_classes] */
} ac_nbsvm;

/* Fits s on d. Each class's problem is shuffled from seed and its class
 * alone and runs on one thread: the same bits for any thread count. */
int ac_nbsvm_fit(ac_nbsvm *s, const ac_nbsvm_data *d, uint64_t seed, ac_err *err);
void ac_nbsvm_free(ac_nbsvm *s);
/* logits [C] += the scores of a text whose sorted distinct buckets are
 * buckets[0..count) (wide_buckets_of_text); sums: scratch of C doubles. */
void ac_nbsvm_add_scores(const ac_nbsvm *s, float *logits, const int32_t *buckets, int count,
                         float norm, double *sums);
/* The same scores times scale made part of a model: wide_table
 * [n_buckets, C] and head_bias [C] get s's weights and biases times scale
 * added. */
void ac_nbsvm_fold(const ac_nbsvm *s, float scale, float *wide_table, float *head_bias);

int ac_train_sources_load(const char *out_dir, ac_train_sources *s, ac_err *err);
void ac_train_sources_free(ac_train_sources *s);

#endif
