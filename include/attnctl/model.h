/* The encoder classifier: embedding + sinusoidal positions -> LayerNorm ->
 * N post-LN encoder layers -> pooling over valid positions -> Linear(d, C).
 * Parameters live in one flat buffer described by a table; gradients and the
 * AdamW moments use the same layout. */
#ifndef ATTNCTL_MODEL_H
#define ATTNCTL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/names.h"
#include "attnctl/nn.h"
#include "attnctl/quant.h"

#define AC_MAX_LAYERS 64
#define AC_PARAM_NAME_LEN 48

/* The position signal added to the token embeddings. */
typedef enum {
    AC_POS_SINUSOIDAL = 0, /* the course's fixed table (base 10000) */
    AC_POS_LEARNED = 1,    /* a trained [max_len, d] table, initialised small like the tokens */
    AC_POS_NONE = 2,       /* no positions: order comes only from the n-grams */
} ac_positions;
const char *ac_positions_name(ac_positions p);
int ac_positions_parse(const char *s, ac_positions *out); /* 0 ok, -1 unknown */
extern const ac_names ac_positions_names; /* the names, in the order listed */

/* What the encoder is trained for: the head on top of it (DESIGN.md:
 * "objectives other than classification are a different head on the same
 * encoder"). */
typedef enum {
    AC_OBJECTIVE_CLASSIFICATION = 0, /* pooling -> Linear(d, C) -> cross-entropy (head.*) */
    AC_OBJECTIVE_MASKED_LM = 1,      /* at masked positions: logits = h embed.weight^T +
                                        mlm.bias (tied output layer), cross-entropy over the
                                        vocabulary; see src/nn/mlm.c */
} ac_objective;
const char *ac_objective_name(ac_objective o); /* "classification", "masked_lm" */
int ac_objective_parse(const char *s, ac_objective *out); /* 0 ok, -1 unknown */
extern const ac_names ac_objective_names; /* the names, in the order listed */

typedef struct {
    int vocab_size;  /* V, including specials */
    int max_len;     /* T: longest sequence the model takes */
    int d_model;     /* d */
    int n_heads;     /* H, divides d */
    int d_ff;        /* ff */
    int n_layers;    /* N */
    int n_classes;   /* C >= 2 (classification); 0 for a masked-LM model */
    ac_pooling pooling;
    float dropout;   /* 0 <= p < 1 */
    float ln_eps;    /* 1e-6 */
    ac_positions positions;
    int ngram_order;   /* 1 (or 0): tokens only; 2: + hashed bigrams; 3: + trigrams */
    int ngram_buckets; /* rows of the hashed n-gram table (used when ngram_order >= 2) */
    /* The wide path (classifiers): a weight per class for each distinct hashed
     * n-gram of n = 1..wide_order, summed into the logits (head.wide.weight,
     * [wide_buckets, C]); 0: none. */
    int wide_order;   /* or AC_WIDE_ORDER_AUTO before a training run chooses it */
    int wide_buckets; /* or AC_WIDE_BUCKETS_AUTO, the same */
    /* The wide path's sum is scaled by (AC_WIDE_NORM_REF / n)^wide_norm for a
     * text of n distinct n-grams (see wide_forward); 0: the plain sum. */
    float wide_norm;
    /* Outside training the class probabilities are softmax(logits / temperature)
     * (fitted on validation data after training); 0 is taken as 1. */
    float temperature;
    ac_objective objective; /* the head: classification (0) or masked LM */
} ac_model_config;

/* model.wide_order left to the training data ("auto" in a preset; the
 * same value as AC_AUTO of attnctl/train_config.h): valid in a
 * configuration, never in a model (ac_model_create). */
#define AC_WIDE_ORDER_AUTO (-1)
/* model.wide_buckets left to the training data, in the same way. */
#define AC_WIDE_BUCKETS_AUTO (-1)

/* n-gram table in use */
static inline int ac_model_has_ngrams(const ac_model_config *c)
{
    return c->ngram_order >= 2 && c->ngram_buckets > 0;
}

/* wide path in use (classifiers only) */
static inline int ac_model_has_wide(const ac_model_config *c)
{
    return c->objective == AC_OBJECTIVE_CLASSIFICATION && c->wide_order >= 1 &&
           c->wide_buckets > 0;
}

/* Checks ranges; fills err naming the field. */
int ac_model_config_validate(const ac_model_config *cfg, ac_err *err);
const char *ac_pooling_name(ac_pooling p);
int ac_pooling_parse(const char *s, ac_pooling *out); /* 0 ok, -1 unknown */
extern const ac_names ac_pooling_names; /* the names, in the order listed */

typedef struct {
    char name[AC_PARAM_NAME_LEN]; /* e.g. "layers.0.attn.q.weight" */
    int ndim;                     /* 1 or 2 */
    int shape[2];
    size_t offset;                /* in floats, into the flat buffer */
    size_t numel;
    int weight_decay;             /* 1 for matrices (Linear, embedding), 0 for biases and LayerNorm */
    int sparse;                   /* 1: row-sparse gradient (see ac_sparse_rows) */
} ac_param_info;

/* A table whose gradient is row-sparse (the n-gram embedding, the wide
 * path): only the rows a batch touched are non-zero, listed in rows
 * (first-touch order) and flagged in mark. Zeroing, clipping, AdamW (lazily,
 * as PyTorch's SparseAdam) and the weight average visit only those rows, so a
 * step costs what the batch touched, not the table's size. */
enum { AC_SPARSE_NGRAM, AC_SPARSE_WIDE, AC_SPARSE_TABLES };
typedef struct {
    int tensor;        /* index in the model's table; -1: no such table */
    size_t offset;     /* the table's first element in params and grads */
    int n_table_rows;
    int width;         /* floats per row */
    uint8_t *mark;     /* [n_table_rows] */
    int32_t *rows;     /* [n_table_rows] */
    int n_rows;
} ac_sparse_rows;

/* Pointers into the flat buffer for one encoder layer. */
/* q_w, k_w and v_w are consecutive in the flat buffer, so q_w is also the
 * [3d, d] weight of the fused q/k/v projection. */
typedef struct {
    float *q_w, *k_w, *v_w, *out_w, *out_b;
    float *ln1_w, *ln1_b;
    float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *ln2_w, *ln2_b;
} ac_layer_params;

typedef struct {
    float *embed_w, *pos_w, *embed_norm_w, *embed_norm_b; /* pos_w: learned positions only */
    float *ngram_w; /* [ngram_buckets, d] when the model has n-grams */
    ac_layer_params layers[AC_MAX_LAYERS];
    float *head_w, *head_b; /* classification only (else NULL) */
    float *wide_w;          /* [wide_buckets, C] with a wide path (else NULL) */
    float *mlm_bias;        /* [vocab_size], masked LM only (else NULL) */
} ac_param_ptrs;

/* Activation buffers for the largest (B, T) asked at setup. */
typedef struct {
    int max_B, max_T;
    float *mem;      /* one allocation holding everything below */
    size_t n_floats;
    /* per-layer saved tensors are indexed [layer] */
    float *embed_sum;                 /* [B,T,d] embedding + positions + n-grams */
    int32_t *ngram_ids;               /* [B,T,order-1] n-gram buckets */
    int32_t *dropped_ids;             /* [B,T] ids after token dropout */
    float *embed_ln, *embed_mean, *embed_rstd; /* [B,T,d], [B,T], [B,T] */
    float *embed_out;                 /* [B,T,d] after dropout: input of layer 0 */
    float *embed_mask;                /* dropout mask [B,T,d] */
    float *qkv[AC_MAX_LAYERS];        /* [B,T,3d]: q, k, v side by side (one projection) */
    float *probs[AC_MAX_LAYERS];      /* [B,H,T,T] attention probabilities */
    float *attn[AC_MAX_LAYERS];       /* [B,T,d] concatenated heads */
    float *attn_proj[AC_MAX_LAYERS];  /* [B,T,d] after out projection */
    float *attn_mask[AC_MAX_LAYERS];  /* dropout mask */
    float *res1[AC_MAX_LAYERS];       /* x + dropout(attn_proj) */
    float *ln1[AC_MAX_LAYERS], *ln1_mean[AC_MAX_LAYERS], *ln1_rstd[AC_MAX_LAYERS];
    float *fc1[AC_MAX_LAYERS];        /* [B,T,ff] pre-ReLU */
    float *relu[AC_MAX_LAYERS];       /* [B,T,ff] */
    float *fc2[AC_MAX_LAYERS];        /* [B,T,d] */
    float *ffn_mask[AC_MAX_LAYERS];
    float *res2[AC_MAX_LAYERS];
    float *ln2[AC_MAX_LAYERS], *ln2_mean[AC_MAX_LAYERS], *ln2_rstd[AC_MAX_LAYERS];
    float *pooled;                    /* [B,d] */
    int32_t *pool_argmax;             /* [B,d] */
    float *pooled_drop, *pooled_mask; /* [B,d] */
    float *logits, *probs_out, *losses; /* [B,C], [B,C], [B] */
    int32_t *wide_ids, *wide_counts;  /* [B, T*wide_order] distinct buckets per item, [B] */
    float *scaled_logits;             /* [B,C] logits / temperature (inference) */
    /* backward scratch */
    float *grad_a, *grad_b, *grad_c, *grad_ff; /* [B,T,d] x3, [B,T,ff] */
    float *grad_fc1;                  /* [B,T,ff] gradient before the ReLU */
    float *grad_qkv;                  /* [B,T,3d] attention input gradients */
    float *attn_scratch;              /* attention_scratch_floats(T, d, H, attn_slots) */
    int attn_slots;                   /* threads the attention workspace serves */
    float *grad_pooled, *grad_logits; /* [B,d], [B,C] */
} ac_activations;

/* Parts of the model whose wall time is accumulated while profile.enabled,
 * so `attnctl bench` can show where a step's time goes. */
enum {
    AC_PART_EMBED,     /* embedding + positions, its LayerNorm and dropout */
    AC_PART_QKV,       /* the q, k, v projections */
    AC_PART_ATTENTION, /* scores, masked softmax, weighted sum of values */
    AC_PART_ATTN_OUT,  /* output projection */
    AC_PART_ADD_NORM,  /* dropout, residual additions and the two LayerNorms */
    AC_PART_FFN,       /* fc1, ReLU, fc2 */
    AC_PART_HEAD,      /* pooling, classifier, loss */
    AC_N_PARTS
};
typedef struct {
    int enabled;
    double forward[AC_N_PARTS], backward[AC_N_PARTS]; /* seconds */
} ac_model_profile;
const char *ac_model_part_name(int part);

typedef struct {
    ac_model_config cfg;
    int n_tensors;
    ac_param_info *table;
    size_t n_params;
    float *params;   /* [n_params]; malloc'd, or inside params_mapping */
    void *params_mapping; /* a mapped model file params points into (unmapped by free), or NULL */
    size_t params_mapping_len;
    float *grads;    /* [n_params] */
    ac_param_ptrs p; /* views into params */
    ac_param_ptrs g; /* views into grads */
    float *pos_table; /* [max_len, d] fixed (sinusoidal, or zeros without positions) */
    /* The n-gram table and the wide path's table have row-sparse gradients
     * (see ac_sparse_rows); sparse[k].tensor < 0 where the model has no such table. */
    ac_sparse_rows sparse[AC_SPARSE_TABLES];
    size_t dense_params;   /* parameters before the sparse tables (all of them without one) */
    float label_smoothing; /* training loss only; 0 = plain cross-entropy */
    float token_dropout;   /* training only: share of tokens replaced by <unk> */
    /* Backward: the loss is a mean over this many rows (a micro-batch's part
     * of its step's batch); 0: over the last forward's rows. */
    int mean_rows;
    ac_activations act;
    ac_model_profile profile;
    int keep_attention; /* inference forwards keep the attention maps in act.probs */
    /* A quantized model's extras (attnctl/quant.h), owned; NULL otherwise:
     * forwards use its sparse wide table in place of p.wide_w, and write the
     * token rows they read from its int8 embeddings into p.embed_w. */
    ac_quant *quant;
    /* state of the last forward, used by backward */
    int last_B, last_T, last_train, last_maps_kept;
    const int32_t *last_ids, *last_lengths, *last_labels;
} ac_model;

/* Allocates parameters, gradients and the table (not activations). Weights are zero. */
int ac_model_create(ac_model *m, const ac_model_config *cfg, ac_err *err);
/* Seeded init: Linear and embedding weights ~ normal(0, 0.02), biases 0,
 * LayerNorm gains 1 and biases 0; the n-gram table 0 (it starts as a no-op). */
void ac_model_init_weights(ac_model *m, uint64_t seed);
/* Bytes the activations for (B, T) need (for an early, clear out-of-memory error). */
size_t ac_model_activation_bytes(const ac_model_config *cfg, int B, int T);
/* Allocates activations for batches up to B x T (T <= max_len). Idempotent for smaller sizes. */
int ac_model_alloc_activations(ac_model *m, int B, int T, ac_err *err);
void ac_model_free(ac_model *m);

/* Makes params (n_params floats, in table order) the model's parameters in
 * place of its own buffer, e.g. the data of a mapped model file; mapping
 * (may be NULL) is unmapped by ac_model_free. */
void ac_model_adopt_params(ac_model *m, float *params, void *mapping, size_t mapping_len);

/* A quantized model (m->quant): the token embeddings of ids [n] written
 * into p.embed_w from their int8 rows (forwards do it themselves). */
void ac_model_quant_embed_rows(ac_model *m, const int32_t *ids, size_t n);
/* Every int8 embedding row written into p.embed_w and the kept wide rows
 * into p.wide_w (as ac_wide_sparse_to_dense), so that code reading the F32
 * parameters directly (explanations, fine-tuning) sees the quantized
 * model's values. Forwards keep using the sparse wide table. */
void ac_model_quant_materialize(ac_model *m);
/* Whether a forward of m at inference calls OpenBLAS (attnctl/blas.h): an
 * F32 model does; a quantized classifier whose encoder layers all run in
 * int8 does not (its classifier is a plain loop), so a one-review predict
 * skips loading it. */
int ac_model_inference_needs_blas(const ac_model *m);

/* A view of m for inference on another thread: m's weights, tables and
 * quantized parts shared read-only, its own activations (none yet: allocate
 * them with ac_model_alloc_activations). Forwards of m and of its views may
 * run at the same time; the view has no gradients (no backward) and must be
 * freed with ac_model_view_free, before m. */
void ac_model_view(ac_model *view, const ac_model *m);
void ac_model_view_free(ac_model *view); /* its activations only; NULL is fine */

/* Index of a tensor by name, or -1. */
int ac_model_find_tensor(const ac_model *m, const char *name);

/* Fine-tuning from a pretrained encoder: copies every tensor of dst but its
 * head (head.*, mlm.bias) from the tensor of src with the same name, which
 * must exist with the same shape (src/nn/transfer.c). dst's head keeps its
 * values. */
int ac_model_copy_encoder(ac_model *dst, const ac_model *src, ac_err *err);

/* Forward of a classification model over a batch (a masked-LM model gives
 * NaN: see src/nn/mlm.c). ids [B*T] (pads may hold any valid id, e.g. 0),
 * lengths [B] (1..T), labels [B] or NULL. train != 0 enables dropout with
 * masks keyed by dropout_key. Logits land in m->act.logits, class
 * probabilities in m->act.probs_out, attention maps in m->act.probs[l]
 * (only when train != 0 or m->keep_attention is set: evaluation does not
 * pay for storing them).
 * Returns the mean loss when labels are given, else 0. The pointers must stay
 * valid until backward. Allocates nothing. Returns NaN without computing
 * anything (and backward then does nothing) when B or T exceed the allocated
 * activations or an id, length or label is out of range. */
float ac_model_forward(ac_model *m, const int32_t *ids, const int32_t *lengths,
                       const int32_t *labels, int B, int T, int train, uint64_t dropout_key);
void ac_model_zero_grad(ac_model *m);
/* Backward of the last ac_model_forward, which must have had labels and kept
 * the attention maps (train != 0 or keep_attention); otherwise it does nothing.
 * Adds into m->grads. */
void ac_model_backward(ac_model *m);

/* ---- the encoder alone (shared by every objective's head) ----
 * ac_model_encoder_forward runs what ac_model_forward runs before pooling
 * (token dropout, embeddings, the encoder layers) for any objective, with
 * the same rules (train, dropout_key, keep_attention; NaN-free: returns -1
 * and computes nothing when B or T exceed the allocated activations or an id
 * or length is out of range, else 0). The final hidden states [B, T, d] are
 * at ac_model_encoder_output(m). ac_model_encoder_backward then takes
 * dL/d(output) [B, T, d] (it may be m->act.grad_a itself: no copy) and adds
 * every encoder parameter's gradient into m->grads; it does nothing without
 * such a forward with the attention maps kept. Both allocate nothing. */
int ac_model_encoder_forward(ac_model *m, const int32_t *ids, const int32_t *lengths, int B, int T,
                             int train, uint64_t dropout_key);
const float *ac_model_encoder_output(const ac_model *m);
void ac_model_encoder_backward(ac_model *m, const float *d_output);

/* ---- the model split at its input, for explanations (attributions) ----
 * The input of the embedding LayerNorm, per position the sum
 *   embed_sum[b,t,:] = embed.weight[id] + position row t (learned or fixed;
 *                      zeros without positions) + the hashed n-gram rows,
 * is what ac_model_forward computes first (act.embed_sum). These three
 * functions expose that seam: the same forward and backward, started from or
 * stopped at embed_sum, so gradients to the input come from the model's own
 * hand-written backward. ac_model_forward/ac_model_backward are unchanged.
 * Classifiers only: a masked-LM model gives NaN / -1. */

/* embed_sum of a batch of ids (no token dropout) into out [B, T, d] (out may
 * be m->act.embed_sum). Uses act.ngram_ids as scratch, so a previous forward
 * can no longer be back-propagated. Returns 0, or -1 (nothing written) when
 * B or T exceed the allocated activations or an id or length is out of range.
 * Allocates nothing. */
int ac_model_embed(ac_model *m, float *out, const int32_t *ids, const int32_t *lengths, int B,
                   int T);
/* Inference forward (no dropout) from a given embed_sum [B, T, d] (copied into
 * act.embed_sum unless it is that buffer), lengths [B] (1..T), labels [B] or
 * NULL: raw logits in act.logits, probabilities (with the temperature) in
 * act.probs_out, per-item losses with labels. The attention maps are always
 * kept, so ac_model_backward_embedded can follow. Returns the mean loss with
 * labels, else 0; NaN (and nothing to differentiate) when B or T exceed the
 * allocated activations or a length or label is out of range. Allocates
 * nothing. */
float ac_model_forward_embedded(ac_model *m, const float *embed_sum, const int32_t *lengths,
                                const int32_t *labels, int B, int T);
/* Backward of the last forward (ac_model_forward with its attention maps
 * kept, or ac_model_forward_embedded) from dlogits [B, C] = d(scalar)/d(raw
 * logits), e.g. one-hot rows for "the logit of class c", down to the input:
 * ADDS d(scalar)/d(embed_sum) into d_embed_sum [B, T, d] (pad positions get
 * 0). Parameter gradients are not computed and m->grads is left untouched.
 * May be called several times after one forward (one per class). Returns 0,
 * or -1 when there is no forward to differentiate. Allocates nothing. */
int ac_model_backward_embedded(ac_model *m, const float *dlogits, float *d_embed_sum);

#endif
