/* Quantized models (attnctl quantize): the arithmetic of the stored types
 * and the in-memory form a quantized model keeps at inference.
 *
 * Encoder matrices are stored as int8 with one F32 scale a row (symmetric:
 * value = q * scale, scale = max |row| / 127). The token embeddings are
 * 4-bit (-7..7, two a byte) with one scale code a row (below). The wide path's
 * table keeps its rows that matter most for the decision, as a presence
 * bitmap over all buckets, and of each kept row only what the softmax sees:
 * the class probabilities depend on differences between logits, so a
 * constant added to every class of a row changes nothing. Two classes keep
 * one number a row, w0 - w1 (the logits get +x/2 and -x/2: the same
 * difference as the FP32 pair); more classes keep the row minus its mean.
 * Those values are b-bit integers (AC_QUANT_DEFAULT_WIDE_BITS) with one
 * scale code for each group of `group` consecutive kept rows.
 *
 * A scale code is one byte: 0 is the scale 0, e in 1..255 the scale
 * 2^((e - 192) / 8), the smallest code at or above max |values| / (2^(b-1)
 * - 1) (so that no value rounds past the largest b-bit magnitude). */
#ifndef ATTNCTL_QUANT_H
#define ATTNCTL_QUANT_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"

/* Rows of the wide table a quantized model keeps when not told otherwise:
 * the default IMDB model's directory then stays under 3 MB. */
#define AC_QUANT_DEFAULT_WIDE_ROWS 1500000
/* Kept wide rows sharing one scale (measured on the IMDB default model). */
#define AC_QUANT_DEFAULT_WIDE_GROUP 16
/* Bits of a stored wide value (measured on the IMDB default model). */
#define AC_QUANT_DEFAULT_WIDE_BITS 5
/* Bits of a stored token embedding value. */
#define AC_EMBED_BITS 4

/* ---- int8 rows ---- */

/* q[r, :] = round(w[r, :] / scale[r]) with scale[r] = max |w[r, :]| / 127
 * (0 for an all-zero row). Non-finite values make the row's scale NaN. */
void ac_quant_rows_i8(int8_t *q, float *scale, const float *w, size_t rows, size_t cols);
/* 127 / max, the factor that maps a row of activations whose largest
 * magnitude is max (finite, >= 0) onto -127..127; 0 for max 0 and for a max
 * so small (below 127 / FLT_MAX) that the quotient overflows: that row is
 * quantized as zeros, where 0 x infinity would give NaN. */
static inline float ac_quant_inverse(float max)
{
    const float inv = max > 0.0f ? 127.0f / max : 0.0f;
    return inv <= FLT_MAX ? inv : 0.0f; /* false for infinity */
}
/* w[r, :] = q[r, :] * scale[r] */
void ac_dequant_rows_i8(float *w, const int8_t *q, const float *scale, size_t rows, size_t cols);

/* ---- b-bit values (2 <= b <= 8) and scale codes ---- */

/* Largest magnitude a b-bit value holds: 2^(b-1) - 1. */
static inline int ac_qb_max(int bits) { return (1 << (bits - 1)) - 1; }
/* The scale code e stands for (see the top of this file). */
float ac_scale_of_code(uint8_t e);
/* The smallest code whose scale is >= max_abs / ac_qb_max(bits) (0 for 0;
 * 255 when none is). max_abs must be finite and >= 0. */
uint8_t ac_scale_code(float max_abs, int bits);
/* Value i of a packed b-bit array: bits i*b .. i*b+b-1 of the array, bit k
 * being bit k % 8 of byte k / 8 (little-endian), two's complement. */
static inline int ac_qb_get(const uint8_t *packed, size_t i, int bits)
{
    const size_t at = i * (size_t)bits;
    const unsigned shift = (unsigned)(at & 7);
    unsigned x = packed[at >> 3] >> shift;
    if (shift + (unsigned)bits > 8)
        x |= (unsigned)packed[(at >> 3) + 1] << (8 - shift);
    const unsigned sign = 1u << (bits - 1);
    return (int)((x & ((sign << 1) - 1)) ^ sign) - (int)sign;
}
/* Bytes of n packed b-bit values. */
static inline size_t ac_qb_bytes(size_t n, int bits) { return (n * (size_t)bits + 7) / 8; }
/* packed[r] (ac_qb_bytes(cols, bits) bytes a row) = w[r, :] in b bits with
 * the row's scale code code[r]. w must be finite. */
void ac_quant_rows_qb(uint8_t *packed, uint8_t *code, const float *w, size_t rows, size_t cols,
                      int bits);
/* w[r, :] = the b-bit values of packed row r * ac_scale_of_code(code[r]) */
void ac_dequant_rows_qb(float *w, const uint8_t *packed, const uint8_t *code, size_t rows,
                        size_t cols, int bits);

/* ---- the wide table ---- */

/* How much row r of a [n_rows, C] table weighs in decisions: |w0 - w1| for
 * two classes, else the Euclidean norm of the row minus its mean. */
double ac_wide_row_weight(const float *row, int C);
/* The (at most) `keep` rows of table [n_rows, C] that weigh most (rows that
 * weigh 0 never), ties to the lower id, into ids in ascending order; returns
 * how many. Rows flagged in first (may be NULL) come before all others: a
 * quantized model keeps the rows of its vocabulary's words, the features
 * nearly every text has, whatever they weigh. With uses (may be NULL: 0
 * each), in how many texts of a sample each row occurs, a row weighs
 * ac_wide_row_weight x (1 + uses): what it adds to decisions over the
 * sample. Allocates scratch (-1 with err when out of memory). */
int ac_wide_select_rows(int32_t *ids, const float *table, int n_rows, int C, int keep,
                        const uint8_t *first, const uint32_t *uses, ac_err *err);
/* Values a kept row stores: 1 for two classes, else C. */
static inline int ac_wide_stored_width(int C) { return C == 2 ? 1 : C; }
/* Buckets one entry of the rank directory covers. */
#define AC_WIDE_RANK_BLOCK 512
/* The stored values of the kept rows ids [n] (see the top of this file) in
 * b bits: packed [ac_qb_bytes(n * width, bits)], codes [ceil(n / group)].
 * The table must be finite. */
void ac_wide_quantize(uint8_t *packed, uint8_t *codes, const float *table, const int32_t *ids,
                      int n, int C, int group, int bits);
/* The presence bitmap (bit b % 8 of byte b / 8: bucket b kept) and the rank
 * directory (rank[k]: kept rows among buckets below k * AC_WIDE_RANK_BLOCK,
 * k = 0 .. ceil(n_buckets / AC_WIDE_RANK_BLOCK)) of the ascending ids [n]. */
void ac_wide_presence(uint8_t *present, int32_t *rank, int n_buckets, const int32_t *ids, int n);

/* The wide path of a quantized model, as the model uses it at inference. */
typedef struct {
    int n;                  /* kept rows */
    int n_buckets;          /* rows of the full table */
    int n_classes;          /* C */
    int width;              /* ac_wide_stored_width(C) */
    int group;              /* kept rows a scale covers */
    int bits;               /* of a stored value */
    const uint8_t *present; /* [ceil(n_buckets / 8)] */
    const int32_t *rank;    /* [ceil(n_buckets / AC_WIDE_RANK_BLOCK) + 1] */
    const uint8_t *values;  /* [ac_qb_bytes(n * width, bits)], kept rows in bucket order */
    const uint8_t *codes;   /* [ceil(n / group)] scale codes */
} ac_wide_sparse;

/* Index of bucket id among the kept rows, or -1. */
int ac_wide_sparse_find(const ac_wide_sparse *w, int32_t id);
/* As wide_forward (attnctl/nn.h) for the kept rows: logits[b, :] += scale *
 * (the stored values summed over item b's kept buckets, in ascending bucket
 * order). Buckets that were not kept add nothing; counts still count them. */
void ac_wide_sparse_forward(float *logits, const ac_wide_sparse *w, const int32_t *buckets,
                            const int32_t *counts, int B, int T, int order, float norm);
/* The dense [n_buckets, C] table the kept rows stand for (zeros elsewhere):
 * the row (x/2, -x/2) for two classes, else the stored centred row. */
void ac_wide_sparse_to_dense(float *table, const ac_wide_sparse *w);

/* ---- int8 linear layers (the encoder of a quantized model) ----
 * out[n, o] = sx[n] * sw[o] * sum_k qx[n, k] * qw[o, k] + bias[o], where
 * qw, sw are the stored int8 rows of the weight and qx, sx the input row
 * quantized the same way when the layer runs (symmetric, max |x| / 127).
 * The sums are exact 32-bit integers, so every kernel gives the same bits
 * at any thread count: AVX512-VNNI (vpdpbusd, unsigned inputs shifted by
 * 128 and the shift taken back with the weight rows' sums) where the
 * processor has it, else plain C. */
typedef enum {
    AC_QKERNEL_AUTO = 0, /* the fastest the processor runs */
    AC_QKERNEL_C = 1,    /* plain C, on any processor */
    AC_QKERNEL_VNNI = 2, /* AVX512-VNNI */
    /* AVX512-VNNI, and attention's weighted sum of the values in bf16 on
     * AMX tiles (FP32 sums): the same outputs at any thread count, within
     * bf16 rounding of the other two (AUTO picks it when available) */
    AC_QKERNEL_AMX = 3,
} ac_qkernel;
/* Whether the processor (and for AMX the operating system) runs the kernel
 * (AC_QKERNEL_C: always). Probes the processor (CPUID, a system call): not
 * for a hot path. */
int ac_qkernel_available(ac_qkernel k);
/* The kernel AUTO stands for: the fastest available. Probes as above; a
 * model asks once, when it loads, and keeps the answer. */
ac_qkernel ac_qkernel_best(void);
const char *ac_qkernel_name(ac_qkernel k); /* of the one AUTO picks, for AUTO */
int ac_qkernel_is_vnni(ac_qkernel k);      /* k (AUTO: the one it picks) runs on AVX512-VNNI */
/* attention_forward_int8's kernel argument for k (AUTO: the one it picks). */
int ac_qkernel_attention(ac_qkernel k);

/* Inputs of at most this many features run in int8 (else the F32 layer). */
#define AC_QLINEAR_MAX_IN 4096

typedef struct {
    int out_dim, in_dim;
    int out_pad, in_pad;  /* rounded up to 16 and 4 */
    int8_t *packed;       /* [out_pad / 16][in_pad / 4][16][4]: 16 outputs x 4 inputs a 64-byte block */
    float *scale;         /* [out_dim] */
    int32_t *wsum;        /* [out_dim] sum of the row's int8 values */
} ac_qlinear;

/* From int8 rows q [out_dim, in_dim] and their scales (copied). -1 when
 * out of memory or in_dim > AC_QLINEAR_MAX_IN. */
int ac_qlinear_init(ac_qlinear *l, const int8_t *q, const float *scale, int out_dim, int in_dim);
void ac_qlinear_free(ac_qlinear *l);
/* out [N, out_dim] = the layer on in [N, in_dim] (+ bias when not NULL).
 * kernel: AUTO (probed on each call), or one that ac_qkernel_available
 * accepted; so are the kernel arguments of ac_qkernel_name, _is_vnni and
 * _attention. */
void ac_qlinear_forward(float *out, const float *in, const ac_qlinear *l, const float *bias, int N,
                        ac_qkernel kernel);
/* The same followed by a ReLU (relu_forward's: NaN gives 0), fused: for
 * a feed-forward layer's first half, whose pre-activations inference never
 * reads. */
void ac_qlinear_relu_forward(float *out, const float *in, const ac_qlinear *l, const float *bias,
                             int N, ac_qkernel kernel);

/* ---- what a quantized model holds beyond its F32 parameters ---- */
enum { AC_QL_QKV, AC_QL_OUT, AC_QL_FC1, AC_QL_FC2, AC_QL_PER_LAYER };
typedef struct {
    ac_wide_sparse wide;   /* wide.present NULL: the model has no wide path */
    /* Token embeddings still in 4 bits (NULL once all are in embed.weight):
     * a forward writes the rows of the ids it reads into embed.weight first,
     * so a prediction touches only the rows its text uses. */
    const uint8_t *embed_q;
    const uint8_t *embed_code;
    int embed_rows, embed_cols;
    uint8_t *embed_done;   /* [embed_rows] 1 once the row is in embed.weight */
    void *mapping;         /* the model file these point into (unmapped by ac_quant_free) */
    size_t mapping_len;
    void *owned;           /* or a malloc'd copy of it (freed by ac_quant_free) */
    /* The encoder's linear layers in int8, [layer][AC_QL_*] (q, k and v as
     * one [3d, d] layer); n_layers 0: the F32 layers run. */
    ac_qlinear (*linear)[AC_QL_PER_LAYER];
    int n_layers;
    ac_qkernel kernel;     /* ac_qkernel_best() when loaded */
} ac_quant;

void ac_quant_free(ac_quant *q); /* frees the struct too; NULL is fine */

#endif
