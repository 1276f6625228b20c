/* Model files: safetensors tensors, config.json (cJSON), vocab.txt, trainer
 * state, and the model directory with atomic saves and validated loads. */
#ifndef ATTNCTL_IO_H
#define ATTNCTL_IO_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/text.h"
#include "attnctl/train_config.h"

#define AC_VERSION "0.1.0"

/* --------------------------------------------------------------- safetensors */

#define AC_ST_MAX_DIMS 8
#define AC_ST_MAX_HEADER 100000000ULL

typedef struct {
    char *name;
    char dtype[8];        /* models take F32 (and I8, U16, I32 quantized: attnctl/quant_io.h) */
    int ndim;
    int64_t shape[AC_ST_MAX_DIMS];
    size_t begin, end;    /* byte offsets into data */
} ac_st_tensor;

typedef struct {
    int n;
    ac_st_tensor *tensors;
    unsigned char *data;  /* the data section (owned) */
    size_t data_len;
    char **meta_keys, **meta_values; /* __metadata__ (string -> string) */
    int n_meta;
    void *mapping;        /* ac_st_map: the whole file, mapped; data points into it */
    size_t mapping_len;
} ac_safetensors;

/* Validates everything the reference library validates (size >= 8, header
 * length <= 100 MB and inside the file, UTF-8 JSON object, known dtype,
 * shape x dtype = byte size, offsets contiguous from 0 without overlap, no
 * trailing bytes, no duplicate names, no overflow) and a little more (no
 * unknown keys in a tensor entry, at most 8 dims, integers <= 2^53). Every
 * standard dtype (BOOL, U8..U64, I8..I64, F4, F6_*, F8_*, F16, BF16, F32,
 * F64, C64) parses; only F32 tensors are readable through ac_st_f32 (the
 * model loader rejects other dtypes, naming the tensor). The data section is
 * copied into a malloc buffer, so F32 tensors at offsets that are multiples
 * of 4 are aligned. Errors name the file and the tensor/field. */
int ac_st_load(ac_safetensors *st, const char *path, ac_err *err);
int ac_st_parse(ac_safetensors *st, const unsigned char *buf, size_t len, const char *name, ac_err *err);
/* The same checks, but the file is mapped (private, copy-on-write) instead
 * of read: only the pages used are ever read, so a model whose big tables a
 * prediction barely touches loads in milliseconds. data points into the
 * mapping (F32 aligned when the header length is a multiple of 4, as writers
 * pad it to 8). Falls back to ac_st_load on a big-endian host. */
int ac_st_map(ac_safetensors *st, const char *path, ac_err *err);
const ac_st_tensor *ac_st_find(const ac_safetensors *st, const char *name);
const float *ac_st_f32(const ac_safetensors *st, const ac_st_tensor *t); /* NULL if misaligned/not F32 */
void ac_st_free(ac_safetensors *st);

/* Writing: tensors given as (name, shape, data) triples, in the header in
 * the given order with contiguous offsets; header padded with spaces to a
 * multiple of 8 bytes; data little-endian. meta_kv holds n_meta (key, value)
 * pairs as 2*n_meta strings, stored as "__metadata__". Written atomically
 * (temporary file in the same directory, fsync, rename, fsync directory). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[AC_ST_MAX_DIMS];
    const float *data;
    /* Other dtypes (quantized models): dtype "I8", "U8", "U16" or "I32" and the
     * values in host order at bytes (data unused). NULL: F32 from data. */
    const char *dtype;
    const void *bytes;
} ac_st_entry;
int ac_st_save(const char *path, const ac_st_entry *entries, int n, const char *const *meta_kv,
               int n_meta, ac_err *err);

/* ------------------------------------------------------------ configuration */

typedef struct {
    char version[32];
    char train_file[1024];
    char train_sha256[65];
    int64_t rows_used;
    char date[32];               /* ISO 8601 UTC */
    double best_val_accuracy;    /* < 0 when unknown; a masked-LM model: masked-token accuracy */
    char init_model[1024];       /* fine-tuned from this pretrained model directory ("" none) */
    char val_file[1024];         /* the validation rows' file (--val-file; "" a split of train_file) */
    char val_sha256[65];         /* its SHA-256 ("" without one, or for a pipe) */
} ac_provenance;

typedef struct {
    ac_model_config model;
    ac_tokenizer_config tokenizer;
    int n_labels;
    char **labels;
    ac_train_config training;
    ac_provenance provenance;
} ac_config;

/* The one place for default settings. Labels start empty (the trainer takes
 * them from the data). Does not free: call ac_config_free first on a used config. */
void ac_config_defaults(ac_config *c);
/* Reads a config.json or a preset (presets may omit labels, provenance and
 * any field: what is absent keeps its current value in *c unless `full` is
 * set, when every section and key must be present, labels included). Unknown
 * or repeated keys, wrong types and out-of-range values are errors naming the
 * file and the key path ("x.json: model.n_heads: must be an integer in
 * 1..65536 (got 0)"); JSON syntax errors give "x.json:LINE:COL: not valid JSON".
 * On error *c is unchanged. A preset setting model.vocab_size without
 * training.vocab_max sets both; labels without model.n_classes set the count.
 * Seeds from 2^53 up are written as decimal strings (numbers lose precision). */
int ac_config_load(ac_config *c, const char *path, int full, ac_err *err);
int ac_config_parse(ac_config *c, const char *json, size_t len, const char *name, int full,
                    ac_err *err);
/* A key of config.json as a command-line option sets it: where it is in
 * ac_config, its type and its values (a range, or an enum's names), the
 * ones both accept. */
typedef enum {
    AC_SETTING_INT, AC_SETTING_I32, AC_SETTING_LONG, AC_SETTING_I64, AC_SETTING_FLOAT,
    AC_SETTING_DOUBLE,
    AC_SETTING_NAME /* an enum stored as an int, one of `names` */
} ac_setting_type;
typedef struct {
    size_t offset; /* into ac_config */
    ac_setting_type type;
    double lo, hi;        /* a number's range */
    int lo_open, hi_open; /* the end itself is outside the range */
    int auto_ok;          /* "auto" is a value too (stored as AC_AUTO) */
    const ac_names *names; /* AC_SETTING_NAME: its values */
} ac_setting;
/* The setting of the key "section.key" (e.g. "training.epochs"): 0, or -1
 * when config.json has no such numeric or enum key. */
int ac_config_setting(const char *path, ac_setting *out);
/* Pretty-printed, stable key order. Caller frees the string. */
char *ac_config_to_json(const ac_config *c);
void ac_config_free(ac_config *c); /* frees labels */

/* -------------------------------------------------------------- model folder */

typedef struct {
    ac_config config;
    ac_vocab vocab;
    ac_model model;       /* parameters loaded; activations not allocated */
} ac_model_dir;

/* Loads config.json (full), vocab.txt and model.safetensors and checks them
 * against each other: vocab line count == model.vocab_size, labels count ==
 * n_classes, <cls> present for cls pooling, every parameter tensor present
 * as F32 with the shape config.json implies, no other tensor. Errors name
 * the file and the tensor. md is zeroed on failure. */
int ac_model_dir_load(ac_model_dir *md, const char *dir, ac_err *err);
/* The same for inference only (eval, predict): a quantized model (config.json
 * with a "storage" object, attnctl/quant_io.h) keeps its token embeddings in
 * int8 and a forward writes the rows it reads, so a prediction touches only
 * its text's rows. ac_model_dir_load gives a quantized model with every F32
 * parameter written (explanations and fine-tuning read them directly). */
int ac_model_dir_load_inference(ac_model_dir *md, const char *dir, ac_err *err);
void ac_model_dir_free(ac_model_dir *md);

/* Saves config.json, vocab.txt and model.safetensors atomically; creates dir
 * (mkdir -p). All temporary files are written and fsynced first, then all
 * renamed (model.safetensors last), then the directory is fsynced: a failure
 * while writing (full disk, ...) leaves every previous file intact. When
 * m1/m2/state are non-NULL (all three or none) also writes
 * optimizer.safetensors and trainer_state.json for --resume; without them,
 * resume files of an earlier save are removed (they would not match the new
 * weights). Refuses a cfg whose model section differs from m->cfg, a vocab
 * whose size is not model.vocab_size, or labels count != n_classes.
 * model.safetensors carries __metadata__ {"format": "pt", "producer": "attnctl VERSION"}. */
int ac_model_dir_save(const char *dir, const ac_config *cfg, const ac_vocab *v, const ac_model *m,
                      const float *m1, const float *m2, const ac_trainer_state *state,
                      ac_err *err);
/* The same, for a save under a deadline (a stop that mpirun follows with
 * SIGKILL within a second): every file written, all renamed, and only then
 * synced. A process killed after the renames loses nothing (the bytes are in
 * the page cache; killed between them, ac_checkpoint_recover finishes the
 * save), and ext4 (auto_da_alloc) writes a renamed-over file's data before
 * the rename reaches its journal. Measured on the default preset's 226 MB
 * checkpoint: 0.26 s with the syncs first, of which 0.15 s syncing. */
int ac_model_dir_save_sync_last(const char *dir, const ac_config *cfg, const ac_vocab *v,
                                const ac_model *m, const float *m1, const float *m2,
                                const ac_trainer_state *state, ac_err *err);
/* Loads optimizer.safetensors (moments, names "m1.<param>" / "m2.<param>") and trainer_state.json. */
/* A checkpoint directory whose save was cut short between its renames (a
 * SIGKILL, e.g. mpirun's one second after Ctrl-C) holds trainer_state.json,
 * optimizer.safetensors and model.safetensors of different steps. Each
 * records its step; the files not yet renamed are still there, complete, as
 * the dead writer's temp files, and this renames them into place (*completed
 * of them). 0 when the checkpoint is consistent (then or now), -1 with err
 * when it cannot be made so. Call it before ac_remove_stale_temps. */
int ac_checkpoint_recover(const char *dir, int *completed, ac_err *err);
int ac_model_dir_load_resume(const char *dir, const ac_model *m, float *m1, float *m2,
                             ac_trainer_state *state, ac_err *err);

/* Loads config.json alone, requiring every key (full = 1). */
int ac_model_dir_load_config(ac_config *c, const char *dir, ac_err *err);
/* Loads trainer_state.json alone (every field required, unknown keys rejected). */
int ac_trainer_state_load(ac_trainer_state *s, const char *path, ac_err *err);
int ac_trainer_state_parse(ac_trainer_state *s, const char *json, size_t len, const char *name,
                           ac_err *err);
/* trainer_state.json text (seed as a decimal string: exact for all 64 bits). Caller frees. */
char *ac_trainer_state_to_json(const ac_trainer_state *s);

/* ------------------------------------------------------------------- files */

/* Atomically replace path with the given bytes. */
int ac_write_file_atomic(const char *path, const void *data, size_t len, ac_err *err);
/* SHA-256 of a file, hex (nettle); "" for a path that is not a regular file
 * (a pipe, /dev/stdin: its bytes can be read only once). */
int ac_sha256_file(const char *path, char hex[65], ac_err *err);
/* Reads a whole file (at most max_len bytes, else an error) into a
 * NUL-terminated malloc buffer. */
int ac_read_file(const char *path, size_t max_len, char **data, size_t *len, ac_err *err);
/* mkdir -p (mode 0777 & ~umask). */
int ac_mkdir_p(const char *dir, ac_err *err);
/* Removes dir and everything under it, links not followed (nothing when
 * it is missing). Best effort. */
void ac_remove_tree(const char *dir);
/* fsync a directory so that renames inside it are durable. */
int ac_fsync_dir(const char *dir, ac_err *err);

/* Streaming atomic replacement: bytes go to a temporary file next to path
 * (same directory, so rename is atomic); nothing at path changes until
 * publish. Writes loop over partial writes and EINTR; errors carry errno text
 * ("No space left on device"). Use: begin, write..., then commit (finish +
 * publish + fsync of the directory), or abort on any failure. To replace
 * several files together: finish all, then publish all, then ac_fsync_dir. */
typedef struct {
    char *path;     /* final path */
    char *tmp_path; /* temporary file; NULL once published or removed */
    int fd;         /* -1 once closed */
} ac_atomic_file;
int ac_atomic_begin(ac_atomic_file *f, const char *path, ac_err *err);
int ac_atomic_write(ac_atomic_file *f, const void *data, size_t len, ac_err *err);
int ac_atomic_finish(ac_atomic_file *f, ac_err *err);  /* fsync + close; the temp file stays */
int ac_atomic_publish(ac_atomic_file *f, ac_err *err); /* rename the temp file over path */
int ac_atomic_commit(ac_atomic_file *f, ac_err *err);  /* finish + publish + fsync dir; frees */
void ac_atomic_abort(ac_atomic_file *f);               /* closes, removes the temp file if not yet published, frees */
/* Removes the temp files of atomic writes in dir whose writer is gone
 * (NAME.tmp.PID.N with no process PID): what a writer killed mid-save left
 * (e.g. SIGKILL from mpirun). Best effort; the number removed. */
int ac_remove_stale_temps(const char *dir);
/* Whether the file name entry is such a temp file of target (a file name). */
int ac_is_stale_temp_of(const char *entry, const char *target);
void ac_atomic_release(ac_atomic_file *f);             /* frees after a successful publish */
/* Writes a safetensors file into an open atomic file (see ac_st_save). */
int ac_st_write(ac_atomic_file *f, const ac_st_entry *entries, int n, const char *const *meta_kv,
                int n_meta, ac_err *err);

#endif
