/* Quantized models (attnctl quantize): the arithmetic of the stored types
 * and the in-memory form a quantized model keeps at inference.
 *
 * Matrices are stored as int8 with one F32 scale a row (symmetric: value =
 * q * scale, scale = max |row| / 127). The wide path's table keeps only its
 * rows that matter most for the decision, sparsely (ascending bucket ids),
 * and of each kept row only what the softmax sees: the class probabilities
 * depend on differences between logits, so a constant added to every class
 * of a row changes nothing. Two classes keep one number a row, w0 - w1 (the
 * logits get +x/2 and -x/2: the same difference as the FP32 pair); more
 * classes keep the row minus its mean. Those values are int8 with one F32
 * scale for each group of `group` consecutive kept rows. */
#ifndef ATTNCTL_QUANT_H
#define ATTNCTL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"

/* Rows of the wide table a quantized model keeps when not told otherwise:
 * the default IMDB model's file then stays under 3 MB. */
#define AC_QUANT_DEFAULT_WIDE_ROWS 150000
/* Kept wide rows sharing one scale (measured on the IMDB default model). */
#define AC_QUANT_DEFAULT_WIDE_GROUP 16

/* ---- int8 rows ---- */

/* q[r, :] = round(w[r, :] / scale[r]) with scale[r] = max |w[r, :]| / 127
 * (0 for an all-zero row). Non-finite values make the row's scale NaN. */
void ac_quant_rows_i8(int8_t *q, float *scale, const float *w, size_t rows, size_t cols);
/* w[r, :] = q[r, :] * scale[r] */
void ac_dequant_rows_i8(float *w, const int8_t *q, const float *scale, size_t rows, size_t cols);

/* ---- the wide table ---- */

/* How much row r of a [n_rows, C] table weighs in decisions: |w0 - w1| for
 * two classes, else the Euclidean norm of the row minus its mean. */
double ac_wide_row_weight(const float *row, int C);
/* The (at most) `keep` rows of table [n_rows, C] that weigh most (rows that
 * weigh 0 never), ties to the lower id, into ids in ascending order; returns
 * how many. Allocates scratch (-1 with err when out of memory). */
int ac_wide_select_rows(int32_t *ids, const float *table, int n_rows, int C, int keep, ac_err *err);
/* Values a kept row stores: 1 for two classes, else C. */
static inline int ac_wide_stored_width(int C) { return C == 2 ? 1 : C; }
/* The stored values of the kept rows (see the top of this file) quantized:
 * q [n, width], scales [ceil(n / group)]. */
void ac_wide_quantize(int8_t *q, float *scales, const float *table, const int32_t *ids, int n,
                      int C, int group);

/* The wide path of a quantized model, as the model uses it at inference. */
typedef struct {
    int n;                /* kept rows */
    int n_classes;        /* C */
    int width;            /* ac_wide_stored_width(C) */
    int group;            /* kept rows a scale covers */
    const int32_t *ids;   /* [n] ascending bucket ids */
    const int8_t *q;      /* [n, width] */
    const float *scales;  /* [ceil(n / group)] */
} ac_wide_sparse;

/* Index of bucket id among the kept rows at or after `from`, or -1. */
int ac_wide_sparse_find(const ac_wide_sparse *w, int32_t id, int from);
/* As wide_forward (attnctl/nn.h) for the kept rows: logits[b, :] += scale *
 * (the stored values summed over item b's kept buckets, in ascending bucket
 * order). Buckets that were not kept add nothing; counts still count them. */
void ac_wide_sparse_forward(float *logits, const ac_wide_sparse *w, const int32_t *buckets,
                            const int32_t *counts, int B, int T, int order, float norm);
/* The dense [n_rows, C] table the kept rows stand for (zeros elsewhere):
 * the row (x/2, -x/2) for two classes, else the stored centred row. */
void ac_wide_sparse_to_dense(float *table, const ac_wide_sparse *w);

/* ---- what a quantized model holds beyond its F32 parameters ---- */
typedef struct {
    ac_wide_sparse wide;   /* wide.ids NULL: the model has no wide path */
    /* Token embeddings still in int8 (NULL once all are in embed.weight):
     * a forward writes the rows of the ids it reads into embed.weight first,
     * so a prediction touches only the rows its text uses. */
    const int8_t *embed_q;
    const float *embed_scale;
    int embed_rows, embed_cols;
    void *mapping;         /* the model file these point into (unmapped by ac_quant_free) */
    size_t mapping_len;
    void *owned;           /* or a malloc'd copy of it (freed by ac_quant_free) */
} ac_quant;

void ac_quant_free(ac_quant *q); /* frees the struct too; NULL is fine */

#endif
