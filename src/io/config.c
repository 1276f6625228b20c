/* config.json and presets: defaults, strict parsing (unknown keys, wrong
 * types, ranges, with the file and key path in every message) and a stable,
 * pretty-printed writer. One table per section drives parsing, range checks
 * and writing, so a key is described in exactly one place. */
#include "attnctl/io.h"
#include "attnctl/mlm.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

_Static_assert(AC_WIDE_ORDER_AUTO == AC_AUTO, "model.wide_order's \"auto\" is the others'");
_Static_assert(AC_WIDE_BUCKETS_AUTO == AC_AUTO, "model.wide_buckets' \"auto\" is the others'");

#define MAX_CONFIG_BYTES ((size_t)16 << 20)
#define MAX_EXACT_INT 9007199254740992.0 /* 2^53 */

/* ---------------------------------------------------------------- defaults */

void ac_config_defaults(ac_config *c)
{
    memset(c, 0, sizeof *c);
    c->model = (ac_model_config){
        .vocab_size = 30002,
        .max_len = 1024,
        .d_model = 64,
        .n_heads = 4,
        .d_ff = 256,
        .n_layers = 1,
        .n_classes = 2,
        .pooling = AC_POOL_MEAN,
        .dropout = 0.3f,
        .ln_eps = 1e-6f,
        .positions = AC_POS_LEARNED,
        .ngram_order = 1, /* the wide path carries the n-grams */
        .ngram_buckets = 262144, /* the table's rows once --ngrams is 2 or 3 */
        .wide_order = AC_WIDE_ORDER_AUTO, /* from the data: see src/train/adapt.c */
        .wide_buckets = AC_WIDE_BUCKETS_AUTO, /* from the classes: src/train/adapt.c */
        .wide_norm = 0.5f,
        .temperature = 1.0f,
    };
    ac_tokenizer_config_defaults(&c->tokenizer); /* one place for the tokenizer's defaults */
    c->n_labels = 0; /* class names come from the training data */
    c->labels = NULL;
    c->training = (ac_train_config){
        .epochs = AC_AUTO, /* from the data: see src/train/adapt.c */
        .batch_size = 32,
        .micro_batch = 8,
        .optim =
            {
                .lr = 1e-3f,
                .beta1 = 0.9f,
                .beta2 = 0.999f,
                .eps = 1e-8f,
                .weight_decay = 0.01f,
                .clip_norm = 1.0f,
                .schedule = AC_SCHED_COSINE,
                .warmup_steps = -1, /* from warmup_frac once the step count is known */
                .total_steps = 0,
                .min_lr_ratio = 0.0f,
            },
        .warmup_frac = 0.05,
        .seed = 1,
        .val_split = 0.1,
        .patience = 2,
        .eval_every = 0,
        .vocab_max = 30002,
        .min_count = AC_AUTO,
        .crop_frac = 0.5,
        .crop_min = 1,
        .crop_max = 64,
        .label_smoothing = 0.0f,
        .token_dropout = 0.0f,
        .ema = AC_AUTO,
        .members = AC_AUTO,
        .wide_nb = AC_AUTO,
        .refit = AC_AUTO,
        .nbsvm = AC_AUTO,
        .mask_frac = AC_MLM_MASK_FRAC,
    };
    snprintf(c->provenance.version, sizeof c->provenance.version, "%s", AC_VERSION);
    c->provenance.best_val_accuracy = -1.0;
}

void ac_config_free(ac_config *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_labels; i++)
        free(c->labels[i]);
    free(c->labels);
    c->labels = NULL;
    c->n_labels = 0;
}

/* ------------------------------------------------------------- key tables */

typedef enum {
    K_INT,        /* int */
    K_LONG,       /* long */
    K_I64,        /* int64_t */
    K_I32,        /* int32_t */
    K_FLOAT,      /* float */
    K_DOUBLE,     /* double */
    K_BOOL,       /* int 0/1 */
    K_POOLING,    /* ac_pooling */
    K_SCHEDULE,   /* ac_schedule_kind */
    K_TRUNCATION, /* ac_truncation */
    K_SEED,       /* uint64_t: number below 2^53 or decimal string */
    K_STRING,     /* char[cap] */
    K_SHA256,     /* char[65]: "" or 64 hex digits */
    K_ACCURACY,   /* double: null (stored < 0) or [0, 1] */
    K_REAL,       /* double: any finite number; null means NaN */
    K_SEED_TEXT,  /* uint64_t, always written as a decimal string */
    K_POSITIONS,  /* ac_positions */
    K_NGRAM_HASH, /* no storage: the one hashing this version knows (AC_NGRAM_HASH) */
    K_WIDE_HASH,  /* the same for the wide path (AC_WIDE_HASH) */
    K_OBJECTIVE,  /* ac_objective */
    K_CLASSES,    /* int: 2..hi, or 0 (a masked-LM model has no classes) */
} key_kind;

/* SINCE_0_2: a key that config.json files of attnctl 0.1 (or trainer_state.json
 * files written before the key existed) lack; such a file still loads (full),
 * with the key at its LEGACY_VALUES value (0 when not listed): the behaviour
 * that version had. */
/* AUTO: the key may also be "auto" (stored as AC_AUTO, see train_config.h):
 * the trainer chooses the value from the training rows and writes it. */
enum { LO_OPEN = 1, HI_OPEN = 2, SINCE_0_2 = 4, AUTO = 8 };

static const struct {
    const char *key;
    double value;
} LEGACY_VALUES[] = {
    {"positions", AC_POS_SINUSOIDAL}, {"ngram_order", 1}, {"ngram_buckets", 0},
    {"wide_order", 0}, {"wide_buckets", 0}, {"wide_norm", 0},
    {"temperature", 1}, {"crop_frac", 0}, {"crop_min", 5}, {"crop_max", 64},
    {"label_smoothing", 0}, {"token_dropout", 0}, {"ema", 0},
    {"objective", AC_OBJECTIVE_CLASSIFICATION}, {"mask_frac", AC_MLM_MASK_FRAC},
    {"micro_batch", 0}, /* 0: the whole batch (set to batch_size after parsing) */
    {"members", 1},
};

typedef struct {
    const char *name;
    key_kind kind;
    size_t offset; /* into ac_config (or ac_trainer_state) */
    double lo, hi;
    unsigned flags;
    size_t cap; /* K_STRING buffer size */
} key_spec;

typedef struct {
    const char *name;
    const key_spec *keys;
    int n_keys;
} section_spec;

/* The names of an enum kind's values (its one list), or NULL for other kinds. */
static const ac_names *enum_names(key_kind kind)
{
    switch (kind) {
    case K_POOLING: return &ac_pooling_names;
    case K_SCHEDULE: return &ac_schedule_names;
    case K_TRUNCATION: return &ac_truncation_names;
    case K_POSITIONS: return &ac_positions_names;
    case K_OBJECTIVE: return &ac_objective_names;
    default: return NULL;
    }
}

#define AT(path) offsetof(ac_config, path)
#define STR(path) AT(path), 0, 0, 0, sizeof(((ac_config *)0)->path)

static const key_spec MODEL_KEYS[] = {
    {"vocab_size", K_INT, AT(model.vocab_size), 3, 10000000, 0, 0},
    {"max_len", K_INT, AT(model.max_len), 1, 65536, 0, 0},
    {"d_model", K_INT, AT(model.d_model), 1, 65536, 0, 0},
    {"n_heads", K_INT, AT(model.n_heads), 1, 65536, 0, 0},
    {"d_ff", K_INT, AT(model.d_ff), 1, 65536, 0, 0},
    {"n_layers", K_INT, AT(model.n_layers), 1, AC_MAX_LAYERS, 0, 0},
    {"objective", K_OBJECTIVE, AT(model.objective), 0, 0, SINCE_0_2, 0},
    {"n_classes", K_CLASSES, AT(model.n_classes), 2, 1000, 0, 0},
    {"pooling", K_POOLING, AT(model.pooling), 0, 0, 0, 0},
    {"dropout", K_FLOAT, AT(model.dropout), 0, 1, HI_OPEN, 0},
    {"ln_eps", K_FLOAT, AT(model.ln_eps), 0, 1, LO_OPEN | HI_OPEN, 0},
    {"positions", K_POSITIONS, AT(model.positions), 0, 0, SINCE_0_2, 0},
    {"ngram_order", K_INT, AT(model.ngram_order), 0, 3, SINCE_0_2, 0},
    {"ngram_buckets", K_INT, AT(model.ngram_buckets), 0, 16777216, SINCE_0_2, 0},
    {"ngram_hash", K_NGRAM_HASH, 0, 0, 0, SINCE_0_2, 0},
    {"wide_order", K_INT, AT(model.wide_order), 0, 3, SINCE_0_2 | AUTO, 0},
    {"wide_buckets", K_INT, AT(model.wide_buckets), 0, 16777216, SINCE_0_2 | AUTO, 0},
    {"wide_hash", K_WIDE_HASH, 0, 0, 0, SINCE_0_2, 0},
    {"wide_norm", K_FLOAT, AT(model.wide_norm), 0, 1, SINCE_0_2, 0},
    {"temperature", K_FLOAT, AT(model.temperature), 0, 1000, LO_OPEN | SINCE_0_2, 0},
};

static const key_spec TOKENIZER_KEYS[] = {
    {"nfkc", K_BOOL, AT(tokenizer.nfkc), 0, 1, 0, 0},
    {"casefold", K_BOOL, AT(tokenizer.casefold), 0, 1, 0, 0},
    {"strip_html", K_BOOL, AT(tokenizer.strip_html), 0, 1, 0, 0},
    {"split_hyphens", K_BOOL, AT(tokenizer.split_hyphens), 0, 1, 0, 0},
    {"split_apostrophes", K_BOOL, AT(tokenizer.split_apostrophes), 0, 1, 0, 0},
    {"emoji_names", K_BOOL, AT(tokenizer.emoji_names), 0, 1, SINCE_0_2, 0},
    {"squeeze_elongations", K_BOOL, AT(tokenizer.squeeze_elongations), 0, 1, SINCE_0_2, 0},
    {"mark_negation", K_BOOL, AT(tokenizer.mark_negation), 0, 1, SINCE_0_2, 0},
    {"truncation", K_TRUNCATION, AT(tokenizer.truncation), 0, 0, 0, 0},
    {"head_tokens", K_INT, AT(tokenizer.head_tokens), 0, 65536, 0, 0},
};

static const key_spec TRAINING_KEYS[] = {
    {"epochs", K_INT, AT(training.epochs), 1, 1000000, AUTO, 0},
    {"batch_size", K_INT, AT(training.batch_size), 1, 65536, 0, 0},
    {"micro_batch", K_INT, AT(training.micro_batch), 1, 65536, SINCE_0_2, 0},
    {"lr", K_FLOAT, AT(training.optim.lr), 0, 10, LO_OPEN, 0},
    {"weight_decay", K_FLOAT, AT(training.optim.weight_decay), 0, 10, 0, 0},
    {"beta1", K_FLOAT, AT(training.optim.beta1), 0, 1, HI_OPEN, 0},
    {"beta2", K_FLOAT, AT(training.optim.beta2), 0, 1, HI_OPEN, 0},
    {"eps", K_FLOAT, AT(training.optim.eps), 0, 1, LO_OPEN | HI_OPEN, 0},
    {"clip_norm", K_FLOAT, AT(training.optim.clip_norm), 0, 1e6, 0, 0},
    {"schedule", K_SCHEDULE, AT(training.optim.schedule), 0, 0, 0, 0},
    {"warmup_frac", K_DOUBLE, AT(training.warmup_frac), 0, 1, 0, 0},
    {"min_lr_ratio", K_FLOAT, AT(training.optim.min_lr_ratio), 0, 1, 0, 0},
    {"seed", K_SEED, AT(training.seed), 0, 0, 0, 0},
    {"val_split", K_DOUBLE, AT(training.val_split), 0, 1, HI_OPEN, 0},
    {"patience", K_INT, AT(training.patience), 0, 1000000, 0, 0},
    {"eval_every", K_LONG, AT(training.eval_every), 0, 1e12, 0, 0},
    {"vocab_max", K_I32, AT(training.vocab_max), 3, 10000000, 0, 0},
    {"min_count", K_I64, AT(training.min_count), 1, 1e12, AUTO, 0},
    {"mask_frac", K_DOUBLE, AT(training.mask_frac), 0, 1, LO_OPEN | HI_OPEN | SINCE_0_2, 0},
    {"crop_frac", K_DOUBLE, AT(training.crop_frac), 0, 1, SINCE_0_2, 0},
    {"crop_min", K_INT, AT(training.crop_min), 1, 65536, SINCE_0_2, 0},
    {"crop_max", K_INT, AT(training.crop_max), 1, 65536, SINCE_0_2, 0},
    {"label_smoothing", K_FLOAT, AT(training.label_smoothing), 0, 1, HI_OPEN | SINCE_0_2, 0},
    {"token_dropout", K_FLOAT, AT(training.token_dropout), 0, 1, HI_OPEN | SINCE_0_2, 0},
    {"wide_nb", K_FLOAT, AT(training.wide_nb), 0, 100, SINCE_0_2 | AUTO, 0},
    {"ema", K_FLOAT, AT(training.ema), 0, 1, HI_OPEN | SINCE_0_2 | AUTO, 0},
    {"members", K_INT, AT(training.members), 1, AC_MAX_MEMBERS, SINCE_0_2 | AUTO, 0},
    {"refit", K_INT, AT(training.refit), 0, 1, SINCE_0_2 | AUTO, 0},
    {"nbsvm", K_FLOAT, AT(training.nbsvm), 0, 100, SINCE_0_2 | AUTO, 0},
    {"nbsvm_temperature", K_FLOAT, AT(training.nbsvm_temperature), 0, 1000, SINCE_0_2, 0},
};

static const key_spec PROVENANCE_KEYS[] = {
    {"attnctl_version", K_STRING, STR(provenance.version)},
    {"train_file", K_STRING, STR(provenance.train_file)},
    {"train_sha256", K_SHA256, AT(provenance.train_sha256), 0, 0, 0, 0},
    {"rows_used", K_I64, AT(provenance.rows_used), 0, MAX_EXACT_INT, 0, 0},
    {"init_model", K_STRING, AT(provenance.init_model), 0, 0, SINCE_0_2,
     sizeof(((ac_config *)0)->provenance.init_model)},
    {"val_file", K_STRING, AT(provenance.val_file), 0, 0, SINCE_0_2,
     sizeof(((ac_config *)0)->provenance.val_file)},
    {"val_sha256", K_SHA256, AT(provenance.val_sha256), 0, 0, SINCE_0_2, 0},
    {"date", K_STRING, STR(provenance.date)},
    {"best_val_accuracy", K_ACCURACY, AT(provenance.best_val_accuracy), 0, 1, 0, 0},
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* In file order; "labels" sits between tokenizer and training. */
static const section_spec SECTIONS[] = {
    {"model", MODEL_KEYS, N_OF(MODEL_KEYS)},
    {"tokenizer", TOKENIZER_KEYS, N_OF(TOKENIZER_KEYS)},
    {"labels", NULL, 0},
    {"training", TRAINING_KEYS, N_OF(TRAINING_KEYS)},
    {"provenance", PROVENANCE_KEYS, N_OF(PROVENANCE_KEYS)},
};

int ac_config_setting(const char *path, ac_setting *out)
{
    const char *dot = strchr(path, '.');
    if (!dot)
        return -1;
    for (int i = 0; i < N_OF(SECTIONS); i++) {
        const section_spec *sec = &SECTIONS[i];
        if (strlen(sec->name) != (size_t)(dot - path) || strncmp(sec->name, path, (size_t)(dot - path)))
            continue;
        for (int j = 0; j < sec->n_keys; j++) {
            const key_spec *k = &sec->keys[j];
            if (strcmp(k->name, dot + 1) != 0)
                continue;
            ac_setting_type type;
            switch (k->kind) {
            case K_INT: type = AC_SETTING_INT; break;
            case K_I32: type = AC_SETTING_I32; break;
            case K_LONG: type = AC_SETTING_LONG; break;
            case K_I64: type = AC_SETTING_I64; break;
            case K_FLOAT: type = AC_SETTING_FLOAT; break;
            case K_DOUBLE: type = AC_SETTING_DOUBLE; break;
            default:
                if (!enum_names(k->kind))
                    return -1;
                type = AC_SETTING_NAME;
                break;
            }
            *out = (ac_setting){.offset = k->offset,
                                .type = type,
                                .lo = k->lo,
                                .hi = k->hi,
                                .lo_open = (k->flags & LO_OPEN) != 0,
                                .hi_open = (k->flags & HI_OPEN) != 0,
                                .auto_ok = (k->flags & AUTO) != 0,
                                .names = enum_names(k->kind)};
            return 0;
        }
    }
    return -1;
}

/* -------------------------------------------------------------- messages */

/* "an integer in 1..65536", "a number in (0, 1)", ... */
static void describe_expected_value(const key_spec *k, char *out, size_t n);

static void describe_expected(const key_spec *k, char *out, size_t n)
{
    describe_expected_value(k, out, n);
    size_t used = strlen(out);
    if ((k->flags & AUTO) && used < n)
        snprintf(out + used, n - used, " or \"auto\"");
}

static void describe_expected_value(const key_spec *k, char *out, size_t n)
{
    switch (k->kind) {
    case K_CLASSES:
        snprintf(out, n, "an integer in %.0f..%.0f (0 for a masked-LM model)", k->lo, k->hi);
        break;
    case K_INT:
    case K_LONG:
    case K_I64:
    case K_I32:
        if (k->hi >= 1e12)
            snprintf(out, n, "an integer >= %.0f", k->lo);
        else
            snprintf(out, n, "an integer in %.0f..%.0f", k->lo, k->hi);
        break;
    case K_FLOAT:
    case K_DOUBLE:
        snprintf(out, n, "a number in %c%g, %g%c", (k->flags & LO_OPEN) ? '(' : '[', k->lo, k->hi,
                 (k->flags & HI_OPEN) ? ')' : ']');
        break;
    case K_BOOL:
        snprintf(out, n, "true or false");
        break;
    case K_POOLING:
    case K_SCHEDULE:
    case K_TRUNCATION:
    case K_POSITIONS:
    case K_OBJECTIVE: {
        char names[160];
        snprintf(out, n, "one of %s", ac_names_list(enum_names(k->kind), 1, names, sizeof names));
        break;
    }
    case K_NGRAM_HASH:
        snprintf(out, n, "\"%s\"", AC_NGRAM_HASH);
        break;
    case K_WIDE_HASH:
        snprintf(out, n, "\"%s\"", AC_WIDE_HASH);
        break;
    case K_SEED:
    case K_SEED_TEXT:
        snprintf(out, n, "an integer in 0..18446744073709551615 (as a decimal string from 2^53 up)");
        break;
    case K_REAL:
        snprintf(out, n, "a number or null");
        break;
    case K_STRING:
        snprintf(out, n, "a string of at most %zu bytes", k->cap - 1);
        break;
    case K_SHA256:
        snprintf(out, n, "\"\" or 64 hexadecimal digits");
        break;
    case K_ACCURACY:
        snprintf(out, n, "null or a number in [0, 1]");
        break;
    }
}

/* Short description of what the file holds, for "got ..." */
static void describe_value(const cJSON *v, char *out, size_t n)
{
    if (cJSON_IsNumber(v))
        snprintf(out, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(out, n, "\"%.40s%s\"", v->valuestring, strlen(v->valuestring) > 40 ? "..." : "");
    else if (cJSON_IsBool(v))
        snprintf(out, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v))
        snprintf(out, n, "null");
    else if (cJSON_IsArray(v))
        snprintf(out, n, "an array");
    else
        snprintf(out, n, "an object");
}

static int key_error(ac_err *err, const char *file, const char *section, const key_spec *k,
                     const cJSON *v)
{
    char want[128], got[80];
    describe_expected(k, want, sizeof want);
    describe_value(v, got, sizeof got);
    return ac_err_set(err, "%s: %s%s%s: must be %s (got %s)", file, section, *section ? "." : "",
                      k->name, want, got);
}

/* --------------------------------------------------------------- parsing */

/* Integral JSON number within [lo, hi] (all exactly representable). */
static int number_in(const cJSON *v, double lo, double hi, unsigned flags, int integral, double *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!isfinite(d))
        return -1;
    if (integral && d != floor(d))
        return -1;
    if ((flags & LO_OPEN) ? !(d > lo) : !(d >= lo))
        return -1;
    if ((flags & HI_OPEN) ? !(d < hi) : !(d <= hi))
        return -1;
    *out = d;
    return 0;
}

static int parse_seed(const cJSON *v, uint64_t *out)
{
    double d;
    if (cJSON_IsNumber(v)) {
        /* A number that reads as 2^53 may have been written as 2^53 + 1:
         * larger seeds must be strings, so nothing changes silently. */
        if (number_in(v, 0, MAX_EXACT_INT, HI_OPEN, 1, &d) != 0)
            return -1;
        *out = (uint64_t)d;
        return 0;
    }
    if (!cJSON_IsString(v))
        return -1;
    const char *s = v->valuestring;
    if (*s == '\0' || strlen(s) > 20)
        return -1;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (__builtin_mul_overflow(x, 10u, &x) || __builtin_add_overflow(x, (uint64_t)(*s - '0'), &x))
            return -1;
    }
    *out = x;
    return 0;
}

static int is_hex64(const char *s)
{
    size_t n = strlen(s);
    if (n != 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return 0;
    return 1;
}

/* Stores one value into the struct at base; -1 when type or range is wrong. */
static int store_value(void *base, const key_spec *k, const cJSON *v)
{
    char *field = (char *)base + k->offset;
    double d;
    if ((k->flags & AUTO) && cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) {
        if (k->kind == K_INT)
            *(int *)(void *)field = AC_AUTO;
        else if (k->kind == K_FLOAT)
            *(float *)(void *)field = AC_AUTO;
        else if (k->kind == K_DOUBLE)
            *(double *)(void *)field = AC_AUTO;
        else if (k->kind == K_I64)
            *(int64_t *)(void *)field = AC_AUTO;
        else
            return -1;
        return 0;
    }
    switch (k->kind) {
    case K_INT:
    case K_LONG:
    case K_I64:
    case K_I32:
        if (number_in(v, k->lo, k->hi, k->flags, 1, &d) != 0)
            return -1;
        if (k->kind == K_INT)
            *(int *)(void *)field = (int)d;
        else if (k->kind == K_LONG)
            *(long *)(void *)field = (long)d;
        else if (k->kind == K_I64)
            *(int64_t *)(void *)field = (int64_t)d;
        else
            *(int32_t *)(void *)field = (int32_t)d;
        return 0;
    case K_FLOAT: {
        if (number_in(v, k->lo, k->hi, k->flags, 0, &d) != 0)
            return -1;
        /* The range holds for the float that is kept, not only for the
         * number written: 0.99999999 rounds to 1.0f, 1e-50 to 0.0f. */
        float f = (float)d;
        if ((k->flags & LO_OPEN) ? !(f > k->lo) : !(f >= k->lo))
            return -1;
        if ((k->flags & HI_OPEN) ? !(f < k->hi) : !(f <= k->hi))
            return -1;
        *(float *)(void *)field = f;
        return 0;
    }
    case K_DOUBLE:
        if (number_in(v, k->lo, k->hi, k->flags, 0, &d) != 0)
            return -1;
        *(double *)(void *)field = d;
        return 0;
    case K_BOOL:
        if (!cJSON_IsBool(v))
            return -1;
        *(int *)(void *)field = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case K_POOLING:
    case K_SCHEDULE:
    case K_TRUNCATION:
    case K_POSITIONS:
    case K_OBJECTIVE: {
        int value;
        if (!cJSON_IsString(v) || ac_names_parse(enum_names(k->kind), v->valuestring, &value) != 0)
            return -1;
        *(int *)(void *)field = value; /* an enum is stored as an int */
        return 0;
    }
    case K_NGRAM_HASH:
        return cJSON_IsString(v) && strcmp(v->valuestring, AC_NGRAM_HASH) == 0 ? 0 : -1;
    case K_WIDE_HASH:
        return cJSON_IsString(v) && strcmp(v->valuestring, AC_WIDE_HASH) == 0 ? 0 : -1;
    case K_CLASSES:
        if (!(cJSON_IsNumber(v) && v->valuedouble == 0.0) &&
            number_in(v, k->lo, k->hi, k->flags, 1, &d) != 0)
            return -1;
        *(int *)(void *)field = (int)v->valuedouble;
        return 0;
    case K_SEED:
    case K_SEED_TEXT:
        return parse_seed(v, (uint64_t *)(void *)field);
    case K_REAL:
        if (cJSON_IsNull(v)) {
            *(double *)(void *)field = NAN;
            return 0;
        }
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return -1;
        *(double *)(void *)field = v->valuedouble;
        return 0;
    case K_STRING:
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= k->cap)
            return -1;
        memcpy(field, v->valuestring, strlen(v->valuestring) + 1);
        return 0;
    case K_SHA256:
        if (!cJSON_IsString(v) || (v->valuestring[0] != '\0' && !is_hex64(v->valuestring)))
            return -1;
        for (size_t i = 0; i <= strlen(v->valuestring); i++)
            field[i] = (char)((v->valuestring[i] >= 'A' && v->valuestring[i] <= 'F')
                                  ? v->valuestring[i] - 'A' + 'a'
                                  : v->valuestring[i]);
        return 0;
    case K_ACCURACY:
        if (cJSON_IsNull(v)) {
            *(double *)(void *)field = -1.0;
            return 0;
        }
        if (number_in(v, 0, 1, 0, 0, &d) != 0)
            return -1;
        *(double *)(void *)field = d;
        return 0;
    }
    return -1;
}

static void store_legacy(void *base, const key_spec *k)
{
    char *field = (char *)base + k->offset;
    double v = 0;
    for (size_t i = 0; i < sizeof LEGACY_VALUES / sizeof LEGACY_VALUES[0]; i++)
        if (strcmp(LEGACY_VALUES[i].key, k->name) == 0)
            v = LEGACY_VALUES[i].value;
    switch (k->kind) {
    case K_INT:
    case K_BOOL: *(int *)(void *)field = (int)v; break;
    case K_FLOAT: *(float *)(void *)field = (float)v; break;
    case K_DOUBLE: *(double *)(void *)field = v; break;
    case K_LONG: *(long *)(void *)field = (long)v; break;
    case K_POSITIONS:
    case K_OBJECTIVE: *(int *)(void *)field = (int)v; break; /* an enum is stored as an int */
    default: break; /* K_NGRAM_HASH, K_WIDE_HASH: nothing stored */
    }
}

static int key_index(const section_spec *s, const char *name)
{
    for (int i = 0; i < s->n_keys; i++)
        if (strcmp(s->keys[i].name, name) == 0)
            return i;
    return 0; /* not reached: callers ask for keys of the table */
}

/* Names of the keys of a section, for "unknown key" messages. */
static void list_keys(const section_spec *s, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < s->n_keys && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", s->keys[i].name);
}

/* cJSON keeps repeated keys; a repeated key is an error, not "last wins". */
static int check_duplicates(const cJSON *obj, const char *file, const char *prefix, ac_err *err)
{
    for (const cJSON *a = obj->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return ac_err_set(err, "%s: %s%s%s: duplicate key", file, prefix, *prefix ? "." : "",
                                  a->string);
    return 0;
}

static int parse_section(void *base, const section_spec *s, const cJSON *obj, const char *file,
                         int full, unsigned char *seen, ac_err *err)
{
    const char *dot = *s->name ? "." : "";
    if (!cJSON_IsObject(obj))
        return ac_err_set(err, "%s: %s: must be an object", file, *s->name ? s->name : "top level");
    if (check_duplicates(obj, file, s->name, err) != 0)
        return -1;
    for (const cJSON *v = obj->child; v; v = v->next) {
        int found = -1;
        for (int i = 0; i < s->n_keys; i++)
            if (strcmp(s->keys[i].name, v->string) == 0)
                found = i;
        if (found < 0) {
            char known[400];
            list_keys(s, known, sizeof known);
            return ac_err_set(err, "%s: %s%s%.60s: unknown key (known: %s)", file, s->name, dot,
                              v->string, known);
        }
        if (store_value(base, &s->keys[found], v) != 0)
            return key_error(err, file, s->name, &s->keys[found], v);
        seen[found] = 1;
    }
    if (full)
        for (int i = 0; i < s->n_keys; i++) {
            if (seen[i])
                continue;
            if (!(s->keys[i].flags & SINCE_0_2))
                return ac_err_set(err, "%s: %s%s%s: missing required key", file, s->name, dot,
                                  s->keys[i].name);
            store_legacy(base, &s->keys[i]);
        }
    return 0;
}

static void free_labels(char **labels, int n)
{
    if (!labels)
        return;
    for (int i = 0; i < n; i++)
        free(labels[i]);
    free(labels);
}

static int parse_labels(const cJSON *arr, const char *file, char ***out, int *n_out, ac_err *err)
{
    *out = NULL;
    *n_out = 0;
    if (!cJSON_IsArray(arr))
        return ac_err_set(err, "%s: labels: must be an array of strings", file);
    int n = cJSON_GetArraySize(arr);
    if (n == 0) /* a masked-LM model (checked with the objective, after the model section) */
        return 0;
    if (n < 2 || n > 1000)
        return ac_err_set(err, "%s: labels: must hold 2..1000 names (got %d)", file, n);
    char **labels = calloc((size_t)n, sizeof *labels);
    if (!labels)
        return ac_err_set(err, "%s: out of memory", file);
    int i = 0;
    for (const cJSON *v = arr->child; v; v = v->next, i++) {
        if (!cJSON_IsString(v)) {
            free_labels(labels, n);
            return ac_err_set(err, "%s: labels[%d]: must be a string", file, i);
        }
        if (v->valuestring[0] == '\0') {
            free_labels(labels, n);
            return ac_err_set(err, "%s: labels[%d]: must not be empty", file, i);
        }
        for (int j = 0; j < i; j++)
            if (strcmp(labels[j], v->valuestring) == 0) {
                free_labels(labels, n);
                return ac_err_set(err, "%s: labels[%d]: duplicate label \"%.60s\"", file, i,
                                  v->valuestring);
            }
        labels[i] = strdup(v->valuestring);
        if (!labels[i]) {
            free_labels(labels, n);
            return ac_err_set(err, "%s: out of memory", file);
        }
    }
    *out = labels;
    *n_out = n;
    return 0;
}

/* Line and column (1-based) of byte offset pos. */
static void line_col(const char *text, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Checks that involve several keys, after merging. */
static int check_consistency(const ac_config *c, const char *file, int full, ac_err *err)
{
    const ac_model_config *m = &c->model;
    if (m->d_model % m->n_heads != 0)
        return ac_err_set(err, "%s: model.n_heads: %d does not divide model.d_model (%d)", file,
                          m->n_heads, m->d_model);
    if (c->training.crop_min > c->training.crop_max)
        return ac_err_set(err, "%s: training.crop_min: %d exceeds training.crop_max (%d)", file,
                          c->training.crop_min, c->training.crop_max);
    if (c->tokenizer.head_tokens > m->max_len)
        return ac_err_set(err, "%s: tokenizer.head_tokens: %d exceeds model.max_len (%d)", file,
                          c->tokenizer.head_tokens, m->max_len);
    if (m->objective == AC_OBJECTIVE_MASKED_LM) {
        if (m->n_classes != 0)
            return ac_err_set(err, "%s: model.n_classes: must be 0 for a masked-LM model (got %d)",
                              file, m->n_classes);
        if (c->n_labels != 0)
            return ac_err_set(err, "%s: labels: a masked-LM model has none (got %d)", file,
                              c->n_labels);
        return 0;
    }
    if (m->n_classes < 2)
        return ac_err_set(err, "%s: model.n_classes: must be an integer in 2..1000 for a "
                               "classifier (got %d)",
                          file, m->n_classes);
    if (full && c->n_labels == 0)
        return ac_err_set(err, "%s: labels: missing required key", file);
    if (c->n_labels != 0 && c->n_labels != m->n_classes)
        return ac_err_set(err, "%s: labels: %d names but model.n_classes is %d", file, c->n_labels,
                          m->n_classes);
    return 0;
}

/* UTF-8 check, JSON parse with line:column on errors, nothing after the value. */
static cJSON *parse_text(const char *json, size_t len, const char *name, ac_err *err)
{
    /* The text must be UTF-8 (labels are printed back to the user). */
    for (size_t pos = 0; pos < len;) {
        utf8proc_int32_t cp;
        size_t left = len - pos;
        utf8proc_ssize_t step = utf8proc_iterate((const utf8proc_uint8_t *)json + pos,
                                                 left > 4 ? 4 : (utf8proc_ssize_t)left, &cp);
        if (step <= 0 || cp == 0) {
            int line, col;
            line_col(json, pos, &line, &col);
            ac_err_set(err, "%s:%d:%d: %s", name, line, col, step <= 0 ? "invalid UTF-8" : "NUL byte");
            return NULL;
        }
        pos += (size_t)step;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        int line, col;
        size_t pos = end ? (size_t)(end - json) : 0;
        line_col(json, pos > len ? len : pos, &line, &col);
        ac_err_set(err, "%s:%d:%d: not valid JSON", name, line, col);
        return NULL;
    }
    for (const char *p = end; p < json + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            int line, col;
            line_col(json, (size_t)(p - json), &line, &col);
            cJSON_Delete(root);
            ac_err_set(err, "%s:%d:%d: unexpected text after the JSON value", name, line, col);
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        ac_err_set(err, "%s: must be a JSON object", name);
        return NULL;
    }
    return root;
}

int ac_config_parse(ac_config *c, const char *json, size_t len, const char *name, int full,
                    ac_err *err)
{
    cJSON *root = parse_text(json, len, name, err);
    if (!root)
        return -1;

    /* Work on a copy: *c changes only when the whole file is good. */
    ac_config tmp = *c;
    char **new_labels = NULL;
    int n_new_labels = 0, have_labels = 0;
    int rc = -1;
    if (check_duplicates(root, name, "", err) != 0)
        goto done;
    int set_vocab_size = 0, set_vocab_max = 0, set_n_classes = 0;
    for (const cJSON *v = root->child; v; v = v->next) {
        int found = -1;
        for (int i = 0; i < N_OF(SECTIONS); i++)
            if (strcmp(SECTIONS[i].name, v->string) == 0)
                found = i;
        if (found < 0) {
            ac_err_set(err, "%s: %.60s: unknown key (known: model, tokenizer, labels, training, provenance)",
                       name, v->string);
            goto done;
        }
        const section_spec *s = &SECTIONS[found];
        if (s->keys == NULL) {
            if (parse_labels(v, name, &new_labels, &n_new_labels, err) != 0)
                goto done;
            have_labels = 1;
            continue;
        }
        unsigned char seen[32] = {0};
        if (parse_section(&tmp, s, v, name, full, seen, err) != 0)
            goto done;
        if (s->keys == MODEL_KEYS) {
            set_vocab_size = seen[key_index(s, "vocab_size")];
            set_n_classes = seen[key_index(s, "n_classes")];
        }
        if (s->keys == TRAINING_KEYS)
            set_vocab_max = seen[key_index(s, "vocab_max")];
    }
    if (full)
        for (int i = 0; i < N_OF(SECTIONS); i++)
            if (!cJSON_GetObjectItemCaseSensitive(root, SECTIONS[i].name)) {
                ac_err_set(err, "%s: %s: missing required key", name, SECTIONS[i].name);
                goto done;
            }
    /* A preset that sets the vocabulary size means it as the build limit too;
     * labels without n_classes set the class count. */
    if (set_vocab_size && !set_vocab_max)
        tmp.training.vocab_max = tmp.model.vocab_size;
    /* Runs from before micro-batches took their whole batch at once. */
    if (tmp.training.micro_batch == 0)
        tmp.training.micro_batch = tmp.training.batch_size;
    if (have_labels && n_new_labels == 0 && tmp.model.objective != AC_OBJECTIVE_MASKED_LM) {
        ac_err_set(err, "%s: labels: must hold 2..1000 names (got 0)", name);
        goto done;
    }
    if (have_labels) {
        if (!set_n_classes)
            tmp.model.n_classes = n_new_labels;
        tmp.labels = new_labels;
        tmp.n_labels = n_new_labels;
    }
    if (check_consistency(&tmp, name, full, err) != 0)
        goto done;
    if (have_labels) {
        free_labels(c->labels, c->n_labels);
        new_labels = NULL; /* now owned by c */
    }
    *c = tmp;
    rc = 0;
done:
    free_labels(new_labels, n_new_labels);
    cJSON_Delete(root);
    return rc;
}

int ac_config_load(ac_config *c, const char *path, int full, ac_err *err)
{
    char *text;
    size_t len;
    if (ac_read_file(path, MAX_CONFIG_BYTES, &text, &len, err) != 0)
        return -1;
    int rc = ac_config_parse(c, text, len, path, full, err);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- writing */

/* Shortest decimal that reads back as the same float/double ("0.001", not
 * "0.0010000000474974513"); non-finite values become null. */
static cJSON *number_raw(double v, int is_float)
{
    char buf[40];
    if (!isfinite(v))
        return cJSON_CreateNull();
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (is_float ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    return cJSON_CreateRaw(buf);
}

static cJSON *integer_raw(long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return cJSON_CreateRaw(buf);
}

static cJSON *value_json(const void *base, const key_spec *k)
{
    const char *field = (const char *)base + k->offset;
    if ((k->flags & AUTO) &&
        ((k->kind == K_INT && *(const int *)(const void *)field == AC_AUTO) ||
         (k->kind == K_FLOAT && *(const float *)(const void *)field == AC_AUTO) ||
         (k->kind == K_DOUBLE && *(const double *)(const void *)field == AC_AUTO) ||
         (k->kind == K_I64 && *(const int64_t *)(const void *)field == AC_AUTO)))
        return cJSON_CreateString("auto");
    switch (k->kind) {
    case K_INT:
    case K_BOOL:
        if (k->kind == K_BOOL)
            return cJSON_CreateBool(*(const int *)(const void *)field);
        return integer_raw(*(const int *)(const void *)field);
    case K_LONG:
        return integer_raw(*(const long *)(const void *)field);
    case K_I64:
        return integer_raw((long long)*(const int64_t *)(const void *)field);
    case K_I32:
        return integer_raw(*(const int32_t *)(const void *)field);
    case K_FLOAT:
        return number_raw(*(const float *)(const void *)field, 1);
    case K_DOUBLE:
        return number_raw(*(const double *)(const void *)field, 0);
    case K_POOLING:
    case K_SCHEDULE:
    case K_TRUNCATION:
    case K_POSITIONS:
    case K_OBJECTIVE:
        return cJSON_CreateString(ac_names_name(enum_names(k->kind), *(const int *)(const void *)field));
    case K_NGRAM_HASH:
        return cJSON_CreateString(AC_NGRAM_HASH);
    case K_WIDE_HASH:
        return cJSON_CreateString(AC_WIDE_HASH);
    case K_CLASSES:
        return integer_raw(*(const int *)(const void *)field);
    case K_SEED: {
        uint64_t s = *(const uint64_t *)(const void *)field;
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)s);
        /* JSON numbers are exact below 2^53 in most readers (2^53 + 1 reads
         * as 2^53). Compared as integers: (double)(2^53 + 1) is 2^53. */
        return s < (1ULL << 53) ? cJSON_CreateRaw(buf) : cJSON_CreateString(buf);
    }
    case K_STRING:
    case K_SHA256:
        return cJSON_CreateString(field);
    case K_ACCURACY: {
        double a = *(const double *)(const void *)field;
        return a < 0 ? cJSON_CreateNull() : number_raw(a, 0);
    }
    case K_REAL:
        return number_raw(*(const double *)(const void *)field, 0);
    case K_SEED_TEXT: {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)(const void *)field);
        return cJSON_CreateString(buf);
    }
    }
    return NULL;
}

/* cJSON_Print indents with tabs and writes "key":<tab>value; raw tabs occur
 * nowhere else (tabs inside strings are escaped), so translate them. */
static char *tabs_to_spaces(const char *s)
{
    size_t n = strlen(s), tabs = 0;
    for (size_t i = 0; i < n; i++)
        tabs += s[i] == '\t';
    char *out = malloc(n + tabs + 2);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\t') {
            out[o++] = s[i];
        } else if (i > 0 && s[i - 1] == ':') {
            out[o++] = ' ';
        } else {
            out[o++] = ' ';
            out[o++] = ' ';
        }
    }
    out[o++] = '\n';
    out[o] = '\0';
    return out;
}

/* Prints and frees root; NULL when !ok or out of memory. */
static char *print_pretty(cJSON *root, int ok)
{
    char *printed = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!printed)
        return NULL;
    char *out = tabs_to_spaces(printed);
    cJSON_free(printed);
    return out;
}

char *ac_config_to_json(const ac_config *c)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    for (int s = 0; ok && s < N_OF(SECTIONS); s++) {
        const section_spec *sec = &SECTIONS[s];
        if (!sec->keys) {
            cJSON *arr = cJSON_AddArrayToObject(root, "labels");
            ok = arr != NULL;
            for (int i = 0; ok && i < c->n_labels; i++) {
                cJSON *l = cJSON_CreateString(c->labels[i]);
                ok = l != NULL;
                if (ok)
                    cJSON_AddItemToArray(arr, l);
            }
            continue;
        }
        cJSON *obj = cJSON_AddObjectToObject(root, sec->name);
        ok = obj != NULL;
        for (int i = 0; ok && i < sec->n_keys; i++) {
            cJSON *v = value_json(c, &sec->keys[i]);
            ok = v != NULL;
            if (ok)
                cJSON_AddItemToObject(obj, sec->keys[i].name, v);
        }
    }
    return print_pretty(root, ok);
}

/* ----------------------------------------------------------- trainer state */

#define ST(field) offsetof(ac_trainer_state, field)
static const key_spec STATE_KEYS[] = {
    {"step", K_LONG, ST(step), 0, MAX_EXACT_INT, 0, 0},
    {"epoch", K_INT, ST(epoch), 0, 1000000000, 0, 0},
    {"batch_in_epoch", K_I64, ST(batch_in_epoch), 0, MAX_EXACT_INT, 0, 0},
    {"seed", K_SEED_TEXT, ST(seed), 0, 0, 0, 0},
    {"best_metric", K_REAL, ST(best_metric), 0, 0, 0, 0},
    {"best_step", K_LONG, ST(best_step), -1, MAX_EXACT_INT, 0, 0},
    {"bad_evals", K_INT, ST(bad_evals), 0, 1000000000, 0, 0},
    {"train_loss_sum", K_REAL, ST(train_loss_sum), 0, 0, 0, 0},
    {"train_loss_count", K_LONG, ST(train_loss_count), 0, MAX_EXACT_INT, 0, 0},
    {"eval_pending", K_INT, ST(eval_pending), 0, 1, SINCE_0_2, 0},
    {"member", K_INT, ST(member), 0, AC_MAX_MEMBERS, SINCE_0_2, 0},
    {"steps_before", K_LONG, ST(steps_before), 0, MAX_EXACT_INT, SINCE_0_2, 0},
};
static const section_spec STATE_SECTION = {"", STATE_KEYS, N_OF(STATE_KEYS)};

char *ac_trainer_state_to_json(const ac_trainer_state *s)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    for (int i = 0; ok && i < STATE_SECTION.n_keys; i++) {
        cJSON *v = value_json(s, &STATE_KEYS[i]);
        ok = v != NULL;
        if (ok)
            cJSON_AddItemToObject(root, STATE_KEYS[i].name, v);
    }
    return print_pretty(root, ok);
}

int ac_trainer_state_parse(ac_trainer_state *s, const char *json, size_t len, const char *name,
                           ac_err *err)
{
    cJSON *root = parse_text(json, len, name, err);
    if (!root)
        return -1;
    ac_trainer_state tmp = *s;
    unsigned char seen[32] = {0};
    int rc = check_duplicates(root, name, "", err);
    if (rc == 0)
        rc = parse_section(&tmp, &STATE_SECTION, root, name, 1, seen, err);
    cJSON_Delete(root);
    if (rc == 0)
        *s = tmp;
    return rc;
}

int ac_trainer_state_load(ac_trainer_state *s, const char *path, ac_err *err)
{
    char *text;
    size_t len;
    if (ac_read_file(path, MAX_CONFIG_BYTES, &text, &len, err) != 0)
        return -1;
    int rc = ac_trainer_state_parse(s, text, len, path, err);
    free(text);
    return rc;
}
