/* Quantized model directories (attnctl quantize): how config.json says a
 * model is stored, and the reading and writing of the quantized tensors.
 *
 * A quantized directory holds config.json, vocab.txt and model.safetensors
 * as any model does. config.json has one more top-level object,
 *   "storage": {"format": "quantized", "version": 1, "matrices": "int8-row",
 *               "wide_rows": K, "wide_group": G}
 * which an attnctl without quantized models rejects as an unknown key
 * before it reads a tensor. model.safetensors then holds:
 *   - every 2-D parameter but head.weight and head.wide.weight as I8 [rows,
 *     cols] with "<name>.scale" F32 [rows] (value = q * scale);
 *   - head.wide.weight as the kept bucket ids, ascending: "head.wide.ids"
 *     U16 [K] their low 16 bits and "head.wide.starts" I32 [ceil(buckets /
 *     2^16) + 1] where each block of 2^16 buckets starts among them; the
 *     values "head.wide.values" I8 [K, W] (W = 1 for two classes, else C;
 *     see attnctl/quant.h) and "head.wide.scales" F32 [ceil(K / G)];
 *   - every other parameter (head.weight, biases, LayerNorm) as F32.
 * The 4-byte tensors come first, then the 2-byte ones, then the bytes, so
 * that each lies aligned. */
#ifndef ATTNCTL_QUANT_IO_H
#define ATTNCTL_QUANT_IO_H

#include "attnctl/io.h"
#include "attnctl/quant.h"

#define AC_STORAGE_VERSION 1

typedef struct {
    int quantized;  /* 0: the plain F32 layout (no "storage" object) */
    int wide_rows;  /* K: rows of head.wide.weight kept (0 without a wide path) */
    int wide_group; /* G: kept rows a scale covers */
} ac_storage;

/* Splits config.json text: without a top-level "storage" key, *s is zeroed
 * and *rest NULL (parse the text as it is); with one, *s holds it (checked:
 * every key known and present, version AC_STORAGE_VERSION) and *rest
 * (malloc'd) the configuration without it. Errors name the file. */
int ac_storage_split(ac_storage *s, char **rest, const char *json, size_t len, const char *name,
                     ac_err *err);

/* Reads a quantized model.safetensors into m (created from the config):
 * F32 parameters copied, int8 matrices dequantized into m->params, the wide
 * table kept sparse in m->quant. lazy: the token embeddings stay int8 and a
 * forward dequantizes the rows it reads (inference); else every parameter
 * is written (ac_model_quant_materialize). Every tensor is checked (presence,
 * dtype, shape, alignment, ascending ids inside the table, finite scales, no
 * other tensor); errors name the file and the tensor. */
int ac_quant_load_tensors(ac_model *m, const ac_storage *s, const char *path, int lazy,
                          ac_err *err);

/* Writes a quantized copy of the F32 model directory src into dst (created;
 * it must not hold a model): config.json with the storage object, vocab.txt
 * as it is, model.safetensors as above with the wide_rows heaviest rows of
 * the wide table (ac_wide_select_rows: the vocabulary's words first; uses,
 * NULL or [model.wide_buckets], weighs rows by how many texts of a sample
 * hold them) and wide_group rows a scale. All
 * files are written and synced before any is renamed into place (the model
 * last). *kept: the wide rows kept. */
int ac_quantize_model_dir(const char *src, const char *dst, int wide_rows, int wide_group,
                          const uint32_t *uses, int *kept, ac_err *err);

#endif
