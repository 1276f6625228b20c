/* Layers as forward/backward pairs on flat float arrays with explicit sizes
 * (after karpathy/llm.c). Conventions:
 *  - Activations are row-major [B, T, d] (or [N, dim] with N = B*T).
 *  - Linear weights are [out, in] as in PyTorch.
 *  - Forward keeps what backward needs in caller-provided buffers.
 *  - Backward ADDS into every gradient it writes (d-inputs and d-parameters);
 *    the caller zeroes gradients once before a backward pass. A gradient
 *    pointer may be NULL when that gradient is not wanted.
 *  - `lengths[b]` is the number of valid (non-pad) positions of batch item b,
 *    1 <= lengths[b] <= T. Pad positions never influence valid ones.
 *  - Nothing here allocates, prints or exits. Hot loops use OpenMP over rows
 *    with fixed partitions so results do not depend on the thread count. */
#ifndef ATTNCTL_NN_H
#define ATTNCTL_NN_H

#include <stddef.h>
#include <stdint.h>

/* ---- embedding + fixed sinusoidal positions ----
 * pos_table [max_len, d]: E(p,2i) = sin(p / 10000^(2i/d)), E(p,2i+1) = cos(same angle). */
void positions_table_fill(float *pos_table, int max_len, int d);
/* out[b,t,:] = wte[ids[b,t], :] + pos_table[t, :] */
void embedding_forward(float *out, const int32_t *ids, const float *wte, const float *pos_table,
                       int B, int T, int d);
/* dwte[ids[b,t], :] += dout[b,t,:] over valid positions only (pads get no gradient).
 * Serial over rows in a fixed order: deterministic. */
void embedding_backward(float *dwte, const float *dout, const int32_t *ids, const int32_t *lengths,
                        int B, int T, int d);

/* Learned positions: dpos[t, :] += sum over items b with t < lengths[b] of
 * dout[b, t, :] (items summed in order: deterministic). */
void positions_backward(float *dpos, const float *dout, const int32_t *lengths, int B, int T, int d);

/* ---- hashed n-gram embeddings (fastText's trick) ----
 * For n = 2..order, the n-gram ending at position t, ids[t-n+1..t] (ids
 * before the text count as 0, the <pad> id), has the bucket
 *   h = 0; for each id in the n-gram: h = h * 116049371 + id  (uint64, wrapping)
 *   bucket = h mod n_buckets.
 * buckets[(b*T + t) * (order-1) + (n-2)]; pad positions get bucket 0. */
#define AC_NGRAM_HASH "h=h*116049371+id (uint64, ids before the text are 0), bucket=h mod ngram_buckets"
void ngram_buckets_compute(int32_t *buckets, const int32_t *ids, const int32_t *lengths, int B,
                           int T, int order, int n_buckets);
/* out[b,t,:] += sum of the rows table[buckets of (b,t)] over valid positions. */
void ngram_forward(float *out, const int32_t *buckets, const float *table, const int32_t *lengths,
                   int B, int T, int d, int per_pos);
/* dtable[bucket, :] += dout[b,t,:] for every n-gram of every valid position,
 * serial in (b, t, n) order: deterministic. */
void ngram_backward(float *dtable, const float *dout, const int32_t *buckets,
                    const int32_t *lengths, int B, int T, int d, int per_pos);

/* ---- the wide path: a weight per class for each distinct hashed n-gram ----
 * For n = 1..order, every n-gram ids[t..t+n-1] lying inside the text has the
 * bucket
 *   h = n; for each id in the n-gram: h = h * 116049371 + id + 1  (uint64, wrapping)
 *   h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; bucket = h mod n_buckets
 * (the first half of MurmurHash3's fmix64: AC_WIDE_HASH's "fmix64" names only
 * that half; the string is an identifier models carry, so it stays as it is).
 * A text's feature set is its distinct buckets (a repeated phrase counts
 * once), and logits[c] += scale * sum over that set of table[bucket, c], with
 * scale = (AC_WIDE_NORM_REF / max(n, AC_WIDE_NORM_FLOOR))^norm for a text of n
 * distinct buckets: with norm 0 a plain sum; with norm > 0 a short text's few
 * n-grams are not outweighed by the encoder just because they are few, and
 * below about a sentence (the floor) a text is scaled no further, so one or
 * two words do not get 10-20 times their weight. */
#define AC_WIDE_HASH "h=n, h=h*116049371+id+1 per id (uint64), fmix64 (MurmurHash3), distinct h mod wide_buckets"
#define AC_WIDE_NORM_REF 500  /* about a whole IMDB review's distinct n-grams: its scale is ~1 */
#define AC_WIDE_NORM_FLOOR 30 /* about a 10-word sentence's: the largest scale, 4.08 at norm 0.5 */
uint32_t wide_bucket(const int32_t *gram, int n, int n_buckets);
/* (AC_WIDE_NORM_REF / max(count, AC_WIDE_NORM_FLOOR))^norm; 1 for norm 0 or an empty text. */
double wide_scale(int count, float norm);
/* The sorted distinct buckets of one text (out holds length * order), their count returned. */
int wide_buckets_of_text(int32_t *out, const int32_t *ids, int length, int order, int n_buckets);
/* Per item b: buckets + b*T*order gets its sorted distinct buckets, counts[b] their number. */
void wide_buckets_compute(int32_t *buckets, int32_t *counts, const int32_t *ids,
                          const int32_t *lengths, int B, int T, int order, int n_buckets);
/* logits[b, c] += wide_scale(counts[b], norm) * sum of table[bucket, c] over item b's
 * buckets (table [n_buckets, C]). */
void wide_forward(float *logits, const int32_t *buckets, const int32_t *counts, const float *table,
                  int B, int T, int order, int C, float norm);
/* dtable[bucket, c] += wide_scale(counts[b], norm) * dlogits[b, c] for each bucket of
 * item b, serial: deterministic. */
void wide_backward(float *dtable, const float *dlogits, const int32_t *buckets,
                   const int32_t *counts, int B, int T, int order, int C, float norm);

/* The wide table's starting point from naive Bayes (Wang & Manning 2012's
 * log-count ratios, binarised features, the rows' n-gram sets as above):
 * for each class c and each bucket some of the n_rows training rows (corpus
 * rows rows[k]: ids + off[r], off[r + 1] - off[r] ids, class labels[r]) have,
 *   r_c = log((p_c / |p_c|_1) / (q_c / |q_c|_1)),
 * p_c = alpha + the number of class-c rows having the bucket, q_c = alpha +
 * that of the other classes' rows, the norms summed over the buckets some row
 * has (alpha = AC_WIDE_NB_ALPHA); table[bucket, c] = scale / 2 * r_c, 0 for a
 * bucket no row has. With two classes r_0 = -r_1, so the wide path's logit
 * difference starts at scale times naive Bayes' log-odds sum (times
 * wide_scale). The whole table is overwritten. grams: scratch for the longest
 * row's length * order buckets; work: 4 * C doubles. Serial: deterministic. */
#define AC_WIDE_NB_ALPHA 1.0
void wide_nb_init(float *table, const int32_t *ids, const int64_t *off, const int32_t *labels,
                  const int64_t *rows, int64_t n_rows, int order, int n_buckets, int C, float scale,
                  int32_t *grams, double *work);

/* ---- linear: out[N, out_dim] = in[N, in_dim] @ w[out_dim, in_dim]^T + bias ---- */
void linear_forward(float *out, const float *in, const float *w, const float *bias,
                    int N, int in_dim, int out_dim);
/* din += dout @ w ; dw += dout^T @ in ; dbias += sum_rows(dout) */
void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int N, int in_dim, int out_dim);

/* ---- layernorm over the last dimension (eps e.g. 1e-6) ----
 * mean[N], rstd[N] saved for backward. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                       const float *b, int N, int d, float eps);
void layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, const float *mean, const float *rstd, int N, int d);
/* The same with sums in 16 lanes and a fixed tree (another rounding, faster):
 * for quantized models' inference; training and FP32 models use the above. */
void layernorm_forward_lanes(float *out, float *mean, float *rstd, const float *in, const float *w,
                             const float *b, int N, int d, float eps);

/* ---- residual: out = a + b ---- */
void residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout ; db += dout (either may be NULL). */
void residual_backward(float *da, float *db, const float *dout, size_t n);

/* ---- ReLU ---- */
void relu_forward(float *out, const float *in, size_t n);
/* din += dout * (out > 0), out the forward's output: out > 0 exactly where
 * in > 0 (a NaN input gives 0 either way), so the pre-activations need not
 * be kept (a quantized model's fused layer does not write them). */
void relu_backward(float *din, const float *dout, const float *out, size_t n);

/* ---- inverted dropout: out = in * mask, mask[i] in {0, 1/(1-p)} ----
 * The mask is drawn from ac_rng_uniform(key, i) (counter based), so it is the
 * same for any thread count. p == 0 gives mask of ones. */
void dropout_forward(float *out, float *mask, const float *in, float p, size_t n, uint64_t key);
/* din += dout * mask */
void dropout_backward(float *din, const float *dout, const float *mask, size_t n);

/* ---- multi-head self-attention core (projections are separate linears) ----
 * q, k, v: rows of B*T positions with row stride ld (d when separate, 3d when
 * packed side by side as one [N, 3d] projection); heads are contiguous column
 * blocks of dk = d / H. out: [B, T, d].
 * probs: [B, H, T, T] softmax(q k^T * scale) with keys t >= lengths[b] masked
 * (probability exactly 0). Rows of pad queries (t >= lengths[b]) are left
 * zero in probs and out. scale is usually 1/sqrt(dk). probs may be NULL in
 * the forward (inference): the maps are then not kept.
 * scratch: attention_scratch_floats(T, d, H, slots) floats of workspace, one
 * slot per thread; at most `slots` threads run. */
size_t attention_scratch_floats(int T, int d, int H, int slots);
void attention_forward(float *out, float *probs, float *scratch, int slots, const float *q,
                       const float *k, const float *v, int ld, const int32_t *lengths, int B,
                       int T, int d, int H, float scale);
/* The same with the scores q_t . k_s of int8 rows (q and k quantized a row
 * at a time per head, symmetric, exact integer sums) for quantized models.
 * kernel 0: plain C; 1: AVX512-VNNI (the same bits as 0); 2: AVX512-VNNI,
 * and without the maps the weighted sum of v in bf16 on AMX tiles (within
 * bf16 rounding of 1). The caller checked that the processor runs it
 * (ac_qkernel_attention). The softmax is the F32 one. */
void attention_forward_int8(float *out, float *probs, float *scratch, int slots, const float *q,
                            const float *k, const float *v, int ld, const int32_t *lengths, int B,
                            int T, int d, int H, float scale, int kernel);
/* dq, dk, dv (row stride ld) += ...; dout is [B, T, d]. */
void attention_backward(float *dq, float *dk, float *dv, float *scratch, int slots,
                        const float *dout, const float *q, const float *k, const float *v, int ld,
                        const float *probs, const int32_t *lengths, int B, int T, int d, int H,
                        float scale);

/* ---- pooling over valid positions: [B, T, d] -> [B, d] ---- */
typedef enum { AC_POOL_MAX = 0, AC_POOL_MEAN = 1, AC_POOL_CLS = 2 } ac_pooling;
/* argmax[B, d] (int32) records the winning position for max pooling (unused otherwise, may be NULL). */
void pool_forward(float *out, int32_t *argmax, const float *in, const int32_t *lengths,
                  int B, int T, int d, ac_pooling mode);
void pool_backward(float *din, const float *dout, const int32_t *argmax, const int32_t *lengths,
                   int B, int T, int d, ac_pooling mode);

/* ---- softmax cross-entropy over C classes, mean over the batch ----
 * probs[B, C] saved; losses[B] per item; returns the mean loss. labels in [0, C).
 * Label smoothing s in [0, 1): the target is (1 - s) onehot(label) + s / C
 * (s = 0: plain cross-entropy). */
float crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *labels,
                           int B, int C, float smoothing);
/* dlogits += (probs - target) / B */
void crossentropy_backward(float *dlogits, const float *probs, const int32_t *labels, int B, int C,
                           float smoothing);
/* The same for a micro-batch of B rows whose loss is part of a mean over
 * mean_rows rows: dlogits += (probs - target) / mean_rows. */
void crossentropy_backward_of_mean(float *dlogits, const float *probs, const int32_t *labels,
                                   int B, int C, float smoothing, int mean_rows);
/* Softmax only (inference): probs[B, C] from logits. */
void softmax_rows(float *probs, const float *logits, int B, int C);

/* ---- row gather: out[i, :] = in[rows[i], :] for i < M (masked positions) ---- */
void gather_rows_forward(float *out, const float *in, const int32_t *rows, int M, int d);
/* din[rows[i], :] += dout[i, :] (serial in i: rows may repeat) */
void gather_rows_backward(float *din, const float *dout, const int32_t *rows, int M, int d);

/* ---- softmax cross-entropy over a large output (the vocabulary), in place ----
 * logits [M, V] are replaced by their softmax; losses[M] = -log p[target];
 * predicted[M] (may be NULL) = argmax (the first on ties). Returns the mean
 * loss (summed in double, in row order). Rows run in parallel; each row's
 * sums have a fixed order, so the result does not depend on the thread count. */
float softmax_xent_inplace_forward(float *logits, float *losses, int32_t *predicted,
                                   const int32_t *targets, int M, int V);
/* Turns the probabilities [M, V] of the forward into the gradient of the mean
 * loss with respect to the logits, (p - onehot(target)) / M, in place. Unlike
 * the other backwards this one overwrites rather than adds: the buffer holds
 * the only copy, and a [M, V] gradient beside it would double the memory. */
void softmax_xent_inplace_backward(float *probs, const int32_t *targets, int M, int V);
/* The same when the M rows are part of a mean over mean_rows rows. */
void softmax_xent_inplace_backward_of_mean(float *probs, const int32_t *targets, int M, int V,
                                           int mean_rows);

#endif
