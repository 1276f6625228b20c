/* The exact, order-free sum of micro-batch gradients (data-parallel
 * training: the same bits for any number of processes).
 *
 * Floating-point addition is not associative, so a sum of micro-batch
 * gradients would depend on how the micro-batches are split among processes
 * and in which order the partial sums meet. Here every gradient element is
 * converted to a signed fixed-point integer (LSB 2^-AC_FIXED_FRAC_BITS) and
 * added as an integer: integer sums are exact, so the total is the same for
 * any split and any order. One rounding brings it back to float.
 *
 * Only what a micro-batch can have touched is converted: the dense
 * parameters outside the token table, the rows of the token table its ids
 * used (the whole table for a masked-LM model, whose output layer is that
 * table) and the n-gram rows it touched. */
#ifndef ATTNCTL_GRADSUM_H
#define ATTNCTL_GRADSUM_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"

typedef __int128 ac_fixed;

/* Value of the least significant bit: 2^-100. Values below half of it
 * become 0; elements at or beyond the limit (ac_gradsum_init) are an error. */
#define AC_FIXED_FRAC_BITS 100

/* Float -> fixed point, rounding to nearest (halves away from zero). 0, or
 * -1 when x is not finite or |x| >= 2^limit_log2. */
int ac_fixed_from_float(float x, int limit_log2, ac_fixed *out);
/* Fixed point -> float: one rounding to nearest (then an exact scaling,
 * unless the result is subnormal). */
float ac_fixed_to_float(ac_fixed v);

/* Rows of one table whose gradient is summed row by row. */
typedef struct {
    int n_table_rows;
    int32_t *slot;     /* [n_table_rows] index into acc, -1: not touched here */
    int32_t *rows;     /* [cap] rows in first-touch order */
    int n_rows, cap;
    ac_fixed *acc;     /* [cap, d] */
    uint64_t *touched; /* [words] bit per table row: touched here (or, after a merge, anywhere) */
    size_t words;
    int32_t *merged;   /* [n_table_rows] the touched rows in ascending order (ac_gradsum_pack) */
    int n_merged;
} ac_gradsum_rows;

typedef struct {
    int d;
    int limit_log2;       /* |element| < 2^limit_log2, so that n_parts of them cannot overflow */
    size_t dense_begin, n_dense; /* the dense part summed whole, in floats of the flat buffer */
    ac_fixed *dense;      /* [n_dense] */
    int token_rows;       /* 1: the token table by rows (classifier); 0: within the dense part */
    ac_gradsum_rows tokens, ngrams;
    ac_gradsum_rows wide; /* the wide path's rows (C wide), when the model has one */
    uint32_t *token_stamp; /* [vocab] the add call that last listed the row */
    int wide_width;        /* the wide table's row width: the class count */
    uint32_t stamp_now;
    ac_fixed *packed;     /* [cap_packed] the sum's wire format (ac_gradsum_pack) */
    size_t n_packed, cap_packed;
    int n_parts;          /* micro-batches added since the last clear */
} ac_gradsum;

/* Buffers for model m and steps of at most max_positions token positions
 * (rows x max_len of a whole step) in at most max_parts micro-batches. */
int ac_gradsum_init(ac_gradsum *s, const ac_model *m, long max_positions, int max_parts,
                    ac_err *err);
void ac_gradsum_free(ac_gradsum *s);
/* Bytes ac_gradsum_init allocates (for the memory check before training). */
size_t ac_gradsum_bytes(const ac_model *m, long max_positions);

/* Empties the sum (the start of a step). */
void ac_gradsum_clear(ac_gradsum *s);

/* Adds the model's gradient of the last backward (m->grads, as the last
 * forward's ids and the n-gram row list say) and zeroes what it read, so
 * that the next backward starts from zero. -1 (err set, naming the
 * tensor) when an element is not finite or too large. */
int ac_gradsum_add(ac_gradsum *s, ac_model *m, ac_err *err);

/* The wire format of the sum: the dense part, then the token rows, then the
 * n-gram rows, each table's rows in ascending order of the rows whose bit
 * is set in touched (the rows of this process, or of all of them after the
 * bit sets were OR-ed together). Fills packed, returns n_packed. */
size_t ac_gradsum_pack(ac_gradsum *s);

/* Writes the packed sum (after adding every process's packed sum element by
 * element) into m->grads as floats; the n-gram row list becomes the merged
 * rows in ascending order. Rows outside the sum must be zero in m->grads
 * (ac_gradsum_add leaves them so). */
void ac_gradsum_unpack(const ac_gradsum *s, ac_model *m);

#endif
