/* Quantized model directories (attnctl quantize): how config.json says a
 * model is stored, and the reading and writing of the quantized tensors
 * (docs/formats.md, "Quantized models", says it exactly).
 *
 * A quantized directory holds config.json, vocab.txt and model.safetensors
 * as any model does. config.json has one more top-level object,
 *   "storage": {"format": "quantized", "version": 2, "matrices": "int8-row",
 *               "wide_rows": K, "wide_group": G, "wide_bits": b}
 * which an attnctl without quantized models rejects as an unknown key
 * before it reads a tensor. model.safetensors then holds:
 *   - embed.weight as 4-bit values, U8 [rows, ceil(cols / 2)], with
 *     "embed.weight.scale" U8 [rows] scale codes (attnctl/quant.h);
 *   - every other 2-D parameter but head.weight and head.wide.weight as I8
 *     [rows, cols] with "<name>.scale" F32 [rows] (value = q * scale);
 *   - head.wide.weight as "head.wide.present" U8 [ceil(buckets / 8)] (a
 *     bit a bucket: kept), "head.wide.rank" I32 [ceil(buckets / 512) + 1]
 *     (kept buckets below each block of 512), "head.wide.values" U8 (the
 *     kept rows' values, b bits each) and "head.wide.scales" U8
 *     [ceil(K / G)] scale codes;
 *   - every other parameter (head.weight, biases, LayerNorm) as F32.
 * The 4-byte tensors come first, then the bytes, so that each lies
 * aligned. Version 1 (ids as U16 + block starts, int8 values) is refused
 * with a message to quantize again. */
#ifndef ATTNCTL_QUANT_IO_H
#define ATTNCTL_QUANT_IO_H

#include "attnctl/io.h"
#include "attnctl/quant.h"

#define AC_STORAGE_VERSION 2

typedef struct {
    int quantized;  /* 0: the plain F32 layout (no "storage" object) */
    int wide_rows;  /* K: rows of head.wide.weight kept (0 without a wide path) */
    int wide_group; /* G: kept rows a scale covers */
    int wide_bits;  /* b: bits of a stored wide value */
} ac_storage;

/* Splits config.json text: without a top-level "storage" key, *s is zeroed
 * and *rest NULL (parse the text as it is); with one, *s holds it (checked:
 * every key known and present, version AC_STORAGE_VERSION) and *rest
 * (malloc'd) the configuration without it. Errors name the file. */
int ac_storage_split(ac_storage *s, char **rest, const char *json, size_t len, const char *name,
                     ac_err *err);

/* Reads a quantized model.safetensors into m (created from the config):
 * F32 parameters copied, int8 matrices dequantized into m->params, the wide
 * table kept sparse in m->quant. lazy: the token embeddings stay 4-bit and a
 * forward dequantizes the rows it reads (inference); else every parameter
 * is written (ac_model_quant_materialize). Every tensor is checked (presence,
 * dtype, shape, alignment, the bitmap and its rank directory agreeing, finite scales, no
 * other tensor); errors name the file and the tensor. */
int ac_quant_load_tensors(ac_model *m, const ac_storage *s, const char *path, int lazy,
                          ac_err *err);

/* Writes a quantized copy of the F32 model directory src into dst (created;
 * it must not hold a model): config.json with the storage object, vocab.txt
 * as it is, model.safetensors as above with the wide_rows heaviest rows of
 * the wide table (ac_wide_select_rows: the vocabulary's words first; uses,
 * NULL or [model.wide_buckets], weighs rows by how many texts of a sample
 * hold them), wide_group rows a scale and wide_bits bits a value. A model
 * with a parameter that is not finite is refused. All
 * files are written and synced before any is renamed into place (the model
 * last). *kept: the wide rows kept. */
int ac_quantize_model_dir(const char *src, const char *dst, int wide_rows, int wide_group,
                          int wide_bits, const uint32_t *uses, int *kept, ac_err *err);
/* 0 when dst holds none of a model's files (ac_quantize_model_dir's first
 * check, for a caller with work to do before it). */
int ac_quantize_out_free(const char *dst, ac_err *err);

#endif
