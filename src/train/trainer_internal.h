/* Internal to src/train: the trainer's state, shared by the loop
 * (trainer.c), its parts (setup.c, step.c, evaluate.c, checkpoint.c,
 * members.c, metrics_log.c, sources.c, processes.c, progress.c) and the
 * objectives (classifier.c, pretrain.c). See docs/architecture.md. */
#ifndef ATTNCTL_TRAINER_INTERNAL_H
#define ATTNCTL_TRAINER_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "attnctl/gradsum.h"
#include "attnctl/infer.h"
#include "attnctl/io.h"
#include "attnctl/metrics.h"
#include "attnctl/mlm.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/text.h"
#include "attnctl/train.h"
#include "attnctl/util.h"
#include "curves.h"
#include "ema.h"

/* Sub-streams of the seed, one per use of randomness, so that e.g. the
 * shuffle of epoch 3 never shares draws with the dropout of step 3. */
enum {
    STREAM_SPLIT = 1,
    STREAM_INIT = 2,
    STREAM_SHUFFLE = 3,
    STREAM_DROPOUT = 4,
    STREAM_CROP = 5,  /* which training rows are cropped, per epoch */
    STREAM_SPANS = 6, /* the fixed short spans of the validation rows */
    STREAM_MASK = 7,  /* masked LM: the masking of each training step */
    STREAM_EVAL_MASK = 8, /* masked LM: the fixed masking of the held-out batches */
    STREAM_MEMBER = 9,    /* the shuffle, crops and dropout of members after the first */
    STREAM_NBSVM = 10,    /* the order NBSVM's solver visits the training rows in */
};

typedef struct trainer_objective trainer_objective;

typedef struct {
    const ac_train_options *opt;
    const trainer_objective *obj; /* what is trained (from opt->objective) */
    ac_config cfg;
    int have_cfg;
    ac_vocab vocab;
    int have_vocab;
    ac_model model;
    int have_model;
    ac_corpus train_corpus, val_corpus;
    int have_train_corpus, have_val_corpus;
    const ac_corpus *val_src; /* the corpus holding the validation rows */
    int64_t *train_idx, *val_idx;
    int64_t n_train, n_val;
    ac_batch_plan plan; /* training batches of epoch plan_epoch */
    int plan_epoch;     /* -1: none */
    uint64_t run_seed;  /* the seed of the shuffle, crops and dropout of the run in
                           progress: training.seed, or its member's (set where a run
                           or member starts: trainer_setup, trainer_next_member) */
    ac_batch_plan val_plan;
    int have_val_plan;
    void *objective_state; /* the objective's own buffers (its file's struct): made
                              by its setup or setup_validation, freed by its free */
    ac_batch batch; /* buffers for batch_size x max_len */
    ac_ema ema;     /* averaged weights (training.ema > 0) */
    int have_ema;
    float *m1, *m2;
    ac_optim_config optim;
    ac_trainer_state state;
    long batches_per_epoch, total_steps, stop_step;
    long run_steps;   /* total_steps for every member (an upper bound with early stopping) */
    int soup_made;    /* this session averaged the members */
    long ckpt_step; /* step of the checkpoint on disk from this run, -1 none */
    ac_metric_point *points;
    int n_points, cap_points;
    char *ckpt_dir, *metrics_path, *svg_path, *calibration_path;
    char adapted[320]; /* fresh run: the settings chosen from the data (ac_train_adapt) */
    double elapsed_base; /* elapsed_s of earlier sessions (last kept evaluation) */
    size_t memory_bytes;
    int model_saved;
    /* masked LM */
    ac_mlm mlm;             /* the head's buffers (masked ids, positions, logits) */
    int have_mlm;
    ac_mlm_masking masking; /* from the vocabulary and training.mask_frac */
    /* micro-batches and data parallelism */
    int micro_batch;          /* rows of a micro-batch (<= batch_size) */
    int max_micro;            /* micro-batches of a full step */
    ac_gradsum gradsum;       /* the exact sum of a step's micro-batch gradients */
    int have_gradsum;
    int *micro_weights;       /* [max_micro] each micro-batch's share of the step's mean
                                 (t->obj->micro_weight: rows, or masked positions) */
    double *step_slots;       /* [max_micro + 3] micro-batch losses; ranks failed, asked to
                                 stop; rank 0 failed */
    double *eval_slots;       /* [3 x validation batches] per-batch figures of an evaluation */
    size_t *gather_offsets;   /* [ranks + 1] byte offsets of each rank's share */
    ac_comm *comm;            /* NULL: one process */
    int writer;               /* this process writes the files (rank 0) */
    int stop_agreed;          /* data parallel: a rank asked to stop (agreed at the last step) */
    int peer_failed;          /* the error is another rank's, which reports it */
    int failure_shared;       /* every rank knows of the error */
    /* fine-tuning: the pretrained model, until its weights are copied */
    ac_model_dir init;
    int have_init;
} trainer;

/* Figures of this session (since the process started), for progress and
 * the metrics log. */
typedef struct {
    double t0;                 /* session start */
    double train_time;         /* seconds inside training steps */
    long steps;                /* steps in this session */
    double examples, tokens;   /* in this session */
    double tokens_since_eval, time_since_eval;
    double last_loss, last_lr;
} session_stats;

/* ---- progress.c: the events reported to the caller ---- */
/* The progress event of the given kind as things stand. */
void trainer_fill_progress(const trainer *t, const session_stats *s, ac_train_event_kind kind,
                           ac_train_progress *p);
/* Passes an event to the caller's progress callback, if any. */
void trainer_report(const trainer *t, const ac_train_progress *p);

/* ---- processes.c: the ranks of a data-parallel run ---- */
/* This rank's share [*begin, *end) of n items (contiguous blocks in order). */
void trainer_rank_share(const trainer *t, int64_t n, int64_t *begin, int64_t *end);
/* Whether this process was asked to stop (a signal). */
int trainer_stop_requested(const trainer *t);
/* Every rank gets the per-batch figures of an evaluation (eval_slots, each
 * batch's filled by one rank, zeros elsewhere). */
int trainer_share_eval_slots(trainer *t, size_t n, ac_err *err);
/* What the processes agreed on. */
typedef struct {
    int failed;       /* some process failed */
    int stopped;      /* some process was asked to stop (also t->stop_agreed) */
    int rank0_failed; /* rank 0 failed */
    int peer_failed;    /* the failure is another rank's, which reports it */
    int failure_shared; /* every rank knows of the failure */
    int communicated;   /* the ranks exchanged their flags (0: one process, or the exchange failed) */
} trainer_agreement;
/* The one place processes agree (collective: every rank calls it at the
 * same point): whether any failed (failed_here: this one did, its message in
 * err) or was asked to stop (stop_here), summing slots[0..n) on the way
 * (each slot filled by one rank; room for 3 more after n; slots NULL: none).
 * A failure anywhere is every rank's: marked shared, and one message is
 * printed, rank 0's when it failed, else the failing rank's with rank 0's
 * peer_msg ("another process failed ..."). Returns -1 when any process
 * failed or the communication did, else 0. One process: -1 when failed_here. */
int trainer_agree(trainer *t, int failed_here, int stop_here, double *slots, size_t n,
                  const char *peer_msg, trainer_agreement *a, ac_err *err);
/* The same on a communicator alone, for a driver around whole runs (the
 * refit) that has no trainer; trainer_agree records its outcome in t. */
int processes_agree(ac_comm *comm, int failed_here, int stop_here, double *slots, size_t n,
                    const char *peer_msg, trainer_agreement *a, ac_err *err);

/* ---- the objective: what is trained ----
 * The loop and its parts call these without knowing which objective runs:
 * the classifier (classifier.c, attnctl train) or the masked LM
 * (pretrain.c, attnctl pretrain). A new objective is a new file filling one
 * of these, and a case in trainer_objective_of. NULL hooks do nothing. */
struct trainer_objective {
    ac_objective id;
    const char *run_name; /* in messages: "a pretraining run" */
    const char *command;  /* the attnctl command that resumes such a run */
    /* The rows carry labels: the classes come from the data, the
     * validation split is stratified by label, the vocabulary comes from
     * the training rows only. Else every row is text: a random split, the
     * vocabulary from every row. */
    int labelled;
    int vocab_specials;             /* AC_VOCAB_WITH_* the objective needs */
    const ac_curves_labels *curves; /* training.svg's titles; NULL: the classifier's */
    /* Checks the options and data before anything is made (resumed runs too). */
    int (*check_options)(const ac_train_options *o, ac_err *err);
    /* Fresh run: the settings the objective decides (labels, members). */
    int (*prepare_config)(trainer *t, ac_err *err);
    /* Fresh run: config.json's provenance of the data. */
    int (*provenance)(trainer *t, ac_err *err);
    /* Resume: the data given is the data the run was started with. */
    int (*check_resume_data)(trainer *t, ac_err *err);
    /* run.json: what the objective records of its data for --resume. */
    int (*sources_to_json)(const trainer *t, cJSON *root, ac_err *err);
    /* Bytes of the objective's own buffers for a step (the memory estimate). */
    size_t (*memory_bytes)(const trainer *t);
    /* Its buffers for a step, after the model's. */
    int (*setup)(trainer *t, ac_err *err);
    /* Its buffers for evaluations (only with validation rows, after
     * t->val_plan): an evaluation pass has at most as many batches as
     * t->val_plan (t->eval_slots holds 3 figures per batch). */
    int (*setup_validation)(trainer *t, ac_err *err);
    /* Frees what setup and setup_validation made (t->objective_state). */
    void (*free)(trainer *t);
    /* A micro-batch's weight in the step's mean loss (rows first_row..
     * first_row + n_rows - 1 of batch `batch` of the epoch's plan), or -1. */
    int (*micro_weight)(trainer *t, int64_t batch, int first_row, int n_rows, ac_err *err);
    /* Training forward of b (rows first_row.. of the step's batch) into *loss. */
    int (*forward)(trainer *t, const ac_batch *b, uint64_t dropout_key, int64_t first_row,
                   float *loss, ac_err *err);
    /* Gradients of that forward added into the model's, its loss a part of a
     * mean over mean_rows (0: the batch's own). */
    void (*backward)(trainer *t, int mean_rows);
    /* The figures of an evaluation into p (left NAN without validation
     * rows): 0, TRAINER_EVAL_ABANDONED or -1. */
    int (*evaluate)(trainer *t, ac_metric_point *p, ac_err *err);
    /* After the best model was saved (the classifier's reliability diagram). */
    int (*after_best)(trainer *t, const ac_metric_point *p, ac_err *err);
    /* Writes the model as the run's result (the writer only); NULL:
     * trainer_write_model. The classifier adds NBSVM's scores to what it
     * writes, never to the weights training goes on with. */
    int (*save_model)(trainer *t, ac_err *err);
};

extern const trainer_objective trainer_classifier; /* classifier.c */
extern const trainer_objective trainer_masked_lm;  /* pretrain.c */

/* ---- classifier.c: helpers of labelled data ---- */
/* Whether d has labels, else an error naming what. */
int trainer_check_labelled(const ac_rawdata *d, const char *what, ac_err *err);
/* Whether d's classes are labels[0..n) in order. */
int trainer_classes_match(const ac_rawdata *d, char *const *labels, int n);
/* calibration.svg: the reliability diagram of the validation rows (writer only). */
int trainer_write_calibration_svg(const trainer *t, double temperature, ac_err *err);

/* ---- setup.c: the start of a run and its end ---- */
/* The objective of the given kind. */
const trainer_objective *trainer_objective_of(ac_objective id);
/* Checks the options and makes everything a run needs, fresh or resumed. */
int trainer_setup(trainer *t, ac_err *err);
/* Frees what trainer_setup made (also after it failed part-way). */
void trainer_free(trainer *t);
/* t->plan: the shuffled, partly cropped training batches of an epoch. */
int trainer_make_epoch_plan(trainer *t, int epoch, ac_err *err);

/* ---- step.c: one optimizer step ---- */
/* What trainer_step returns when a stop came before the step's update. */
#define TRAINER_STEP_DROPPED 1
/* One optimizer step on the next batch: 0, TRAINER_STEP_DROPPED or -1. */
int trainer_step(trainer *t, session_stats *s, ac_err *err);

/* ---- evaluate.c: evaluations during training ---- */
/* What an evaluation pass returns when it was abandoned. */
#define TRAINER_EVAL_ABANDONED 1
/* Evaluates, then writes the metrics, the best model and the checkpoint:
 * 0, TRAINER_EVAL_ABANDONED (asked to stop; a due evaluation is then owed,
 * state.eval_pending) or -1. at_stop: the evaluation is only there because
 * this session stops (--max-steps), and leaves the best model, its figure
 * and early stopping as an unbroken run has them. */
int trainer_evaluate_and_save(trainer *t, session_stats *s, int at_stop, ac_train_result *res,
                              ac_err *err);
/* The members' average (in the model): evaluated, its temperature fitted,
 * saved as the model with its reliability diagram, logged, and the run
 * marked as over (state.member = members) in the checkpoint. */
int trainer_evaluate_soup(trainer *t, session_stats *s, ac_train_result *res, ac_err *err);

/* ---- checkpoint.c: the best model and the resumable checkpoint ---- */
/* Saves the model (the best so far) into the output directory. */
int trainer_save_best(trainer *t, ac_err *err);
/* Writes config.json, vocab.txt and model.safetensors of the model as it is. */
int trainer_write_model(trainer *t, ac_err *err);
/* Saves checkpoint/; stopping: the run stops after it, under a deadline. */
int trainer_save_checkpoint_as(trainer *t, int stopping, ac_err *err);
/* trainer_save_checkpoint_as, not stopping. */
int trainer_save_checkpoint(trainer *t, ac_err *err);
/* Removes a finished run's checkpoint weights, moments and average (writer
 * only; see ac_train_options.drop_finished_state). */
void trainer_drop_finished_state(const trainer *t);
/* The error for a NaN or infinite figure at step, saying which checkpoint is intact. */
int trainer_non_finite_error(const trainer *t, long step, const char *what, double v, ac_err *err);
/* Resume: reads the averaged weights saved with the checkpoint's step. */
int trainer_load_ema(trainer *t, ac_err *err);
/* Before a resume: finishes a checkpoint save that was cut short (every rank calls it). */
int trainer_recover_checkpoint(trainer *t, ac_err *err);

/* ---- metrics_log.c: metrics.jsonl and training.svg ---- */
/* Rewrites metrics.jsonl and training.svg from t->points (the writer only). */
int trainer_write_metrics_and_curves(const trainer *t, ac_err *err);
/* Appends an evaluation's figures to t->points. */
int trainer_push_point(trainer *t, const ac_metric_point *p, ac_err *err);
/* Resume: reads the log of earlier sessions up to max_step into t->points. */
int trainer_load_metrics_until(trainer *t, long max_step, ac_err *err);

/* ---- sources.c: checkpoint/run.json ---- */
/* Writes run.json: the data files and settings a --resume reads (the writer only). */
int trainer_write_sources(const trainer *t, ac_err *err);

/* ---- members.c: a weight average of members (training.members > 1) ---- */
/* The seed of the current member's shuffle, crops and dropout: the run's
 * own for the first member (so a run of one member is the run it always
 * was), one drawn from it for each later one. The split, the initial
 * weights and the validation spans come from the run's seed for all. */
uint64_t trainer_member_seed(const trainer *t);
/* Steps of the run so far: the earlier members' and the current one's
 * (state.step counts the current member's only). */
long trainer_global_step(const trainer *t);
/* Whether this run averages members. */
int trainer_has_members(const trainer *t);
/* A fresh run of several members: keeps the initial weights every member
 * starts from (checkpoint/member-start.safetensors). */
int trainer_save_member_start(trainer *t, ac_err *err);
/* The current member's best weights (its averaged ones when training.ema
 * is on: what the model holds at an evaluation) into
 * checkpoint/member-N.safetensors. */
int trainer_save_member(trainer *t, ac_err *err);
/* The current member ended: the next one starts from the initial weights
 * with fresh moments, average, counters and batch plans. */
int trainer_next_member(trainer *t, ac_err *err);
/* The last member ended: the model becomes the mean of every member's
 * weights (summed in double, in member order: the same bits every time),
 * ready to be evaluated and saved (trainer_evaluate_soup). */
int trainer_average_members(trainer *t, ac_err *err);
/* Member `member`'s kept weights (0-based) into the model. */
int trainer_load_member(trainer *t, int member, ac_err *err);
/* Removes checkpoint/member-*.safetensors (a finished run's, with the rest
 * of its state). */
void trainer_remove_member_files(const trainer *t);

/* ---- init_from.c: a classifier started from a pretrained encoder ---- */
/* Loads opt->init_dir, checks that the configuration agrees with it and
 * takes its vocabulary. */
int trainer_take_init(trainer *t, ac_err *err);
/* Copies the encoder into the new model and lets go of the loaded one. */
int trainer_copy_init_weights(trainer *t, ac_err *err);

#endif
