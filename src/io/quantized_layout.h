/* What the reader (quantized.c) and the writer (quantize.c) of a quantized
 * model directory agree on: tensor names, the storage object's values, and
 * which parameter is stored how. Private to src/io. */
#ifndef ATTNCTL_IO_QUANTIZED_LAYOUT_H
#define ATTNCTL_IO_QUANTIZED_LAYOUT_H

#include <string.h>

#include "attnctl/quant_io.h"

#define STORAGE_KEY "storage"
#define STORAGE_FORMAT "quantized"
#define STORAGE_MATRICES "int8-row"
#define WIDE_PRESENT "head.wide.present"
#define WIDE_RANK "head.wide.rank"
#define WIDE_VALUES "head.wide.values"
#define WIDE_SCALES "head.wide.scales"
#define WIDE_TABLE "head.wide.weight"
#define EMBED_TABLE "embed.weight"
#define SCALE_SUFFIX ".scale"
#define MAX_CONFIG_BYTES ((size_t)16 << 20)

/* How a parameter is stored in a quantized model. */
typedef enum { KIND_F32, KIND_I8_ROWS, KIND_Q4_ROWS, KIND_WIDE } tensor_kind;

static inline tensor_kind kind_of(const ac_param_info *p)
{
    if (strcmp(p->name, WIDE_TABLE) == 0)
        return KIND_WIDE;
    if (strcmp(p->name, EMBED_TABLE) == 0 && p->ndim == 2)
        return KIND_Q4_ROWS;
    if (p->ndim == 2 && strcmp(p->name, "head.weight") != 0)
        return KIND_I8_ROWS;
    return KIND_F32;
}

static inline int ceil_div(int a, int b) { return a / b + (a % b != 0); }

#endif
