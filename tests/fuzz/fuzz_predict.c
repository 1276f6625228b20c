/* libFuzzer target: a predict line. `attnctl predict` (src/cli/predict.c)
 * reads lines, drops one trailing CR, skips blank lines, encodes each with
 * ac_encode_text (tokenize + vocabulary + truncation + <cls>), pads a batch
 * and runs ac_model_forward. This target does the same with the library
 * calls, on tiny random-init models built in memory at start-up.
 *
 * Input: two control bytes, then lines (at most BATCH per forward pass).
 *   byte 0, bits 0-1  model: mean / max / cls pooling / mean with a <cls> vocabulary
 *           bits 2-7  tokenizer: nfkc, casefold, strip_html, split_hyphens, split_apostrophes,
 *                     emoji_names
 *   byte 1, bits 0-6  truncation (value % 3: head, tail, head+tail),
 *                     head_tokens = ((value >> 2) & 31) % (MAX_LEN + 1)
 *           bit 7     squeeze_elongations
 *   (mark_negation stays at its default, on)
 * Checks: ids inside the vocabulary, lengths in 1..MAX_LEN, the untruncated
 * length >= the kept one, <cls> first (and only there) when the vocabulary has it,
 * and probabilities that are finite and sum to 1; squeezing elongations
 * changes no id but <unk>s. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/model.h"
#include "attnctl/text.h"
#include "fuzz_common.h"

enum { MAX_LEN = 16, BATCH = 8, N_MODELS = 4, N_CLASSES = 3 };

typedef struct {
    ac_vocab vocab;
    ac_model model;
} tiny_model;

static void tiny_model_make(tiny_model *t, ac_pooling pooling, int with_cls, uint64_t seed)
{
    fuzz_tiny_vocab(&t->vocab, with_cls);
    ac_model_config cfg = {.vocab_size = t->vocab.size, .max_len = MAX_LEN, .d_model = 8,
                           .n_heads = 2, .d_ff = 16, .n_layers = 2, .n_classes = N_CLASSES,
                           .pooling = pooling, .dropout = 0.1f, .ln_eps = 1e-6f};
    ac_err err = {{0}};
    if (ac_model_create(&t->model, &cfg, &err) != 0 ||
        ac_model_alloc_activations(&t->model, BATCH, MAX_LEN, &err) != 0) {
        fprintf(stderr, "fuzz setup failed: %s\n", err.msg);
        exit(2);
    }
    ac_model_init_weights(&t->model, seed);
}

/* predict answers a blank line with <empty> and does not encode it */
static int is_blank_line(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f'))
            return 0;
    return 1;
}

static void run_batch(tiny_model *t, int32_t (*slot_ids)[MAX_LEN], const int *slot_len, int n)
{
    static int32_t ids[BATCH * MAX_LEN];
    int32_t lengths[BATCH];
    int T = 1;
    for (int k = 0; k < n; k++)
        if (slot_len[k] > T)
            T = slot_len[k];
    for (int k = 0; k < n; k++) {
        memcpy(ids + k * T, slot_ids[k], (size_t)slot_len[k] * sizeof *ids);
        for (int i = slot_len[k]; i < T; i++)
            ids[k * T + i] = AC_PAD_ID;
        lengths[k] = slot_len[k];
    }
    float loss = ac_model_forward(&t->model, ids, lengths, NULL, n, T, 0, 0);
    FUZZ_CHECK(loss == 0.0f); /* NaN: the model refused the batch */
    for (int b = 0; b < n; b++) {
        float sum = 0;
        for (int c = 0; c < N_CLASSES; c++) {
            float p = t->model.act.probs_out[b * N_CLASSES + c];
            FUZZ_CHECK(isfinite(p) && p >= 0.0f && p <= 1.0f);
            sum += p;
        }
        FUZZ_CHECK(fabsf(sum - 1.0f) < 1e-4f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tiny_model models[N_MODELS];
    static int ready;
    if (!ready) {
        tiny_model_make(&models[0], AC_POOL_MEAN, 0, 1);
        tiny_model_make(&models[1], AC_POOL_MAX, 0, 2);
        tiny_model_make(&models[2], AC_POOL_CLS, 1, 3);
        tiny_model_make(&models[3], AC_POOL_MEAN, 1, 4);
        ready = 1;
    }
    if (size < 2)
        return 0;
    tiny_model *tm = &models[data[0] & 3];
    ac_tokenizer_config tcfg;
    ac_tokenizer_config_defaults(&tcfg);
    tcfg.nfkc = (data[0] >> 2) & 1;
    tcfg.casefold = (data[0] >> 3) & 1;
    tcfg.strip_html = (data[0] >> 4) & 1;
    tcfg.split_hyphens = (data[0] >> 5) & 1;
    tcfg.split_apostrophes = (data[0] >> 6) & 1;
    tcfg.emoji_names = (data[0] >> 7) & 1;
    tcfg.truncation = (ac_truncation)(data[1] % 3);
    tcfg.head_tokens = ((data[1] >> 2) & 31) % (MAX_LEN + 1);
    tcfg.squeeze_elongations = (data[1] >> 7) & 1;
    ac_tokenizer_config flipped = tcfg;
    flipped.squeeze_elongations = !tcfg.squeeze_elongations;
    const char *p = (const char *)data + 2, *end = (const char *)data + size;

    ac_err err = {{0}};
    ac_tokenizer *tok = NULL;
    FUZZ_CHECK(ac_tokenizer_create(&tok, &tcfg, &err) == 0);
    int32_t slot_ids[BATCH][MAX_LEN];
    int slot_len[BATCH], n = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *line = p;
        p += len + (nl != NULL);
        if (len > 0 && line[len - 1] == '\r')
            len--;
        if (is_blank_line(line, len))
            continue;
        int full_len = -1;
        int got = ac_encode_text(tok, &tcfg, &tm->vocab, line, len, MAX_LEN, slot_ids[n],
                                 &full_len);
        FUZZ_CHECK(got >= 1 && got <= MAX_LEN);
        FUZZ_CHECK(full_len >= got);
        if (tm->vocab.with_cls)
            FUZZ_CHECK(slot_ids[n][0] == AC_CLS_ID);
        for (int i = 0; i < got; i++) {
            FUZZ_CHECK(slot_ids[n][i] >= 0 && slot_ids[n][i] < tm->vocab.size);
            FUZZ_CHECK(slot_ids[n][i] != AC_PAD_ID);
            if (i > 0 && tm->vocab.with_cls) /* <cls> is never a word */
                FUZZ_CHECK(slot_ids[n][i] != AC_CLS_ID);
        }
        int32_t other[MAX_LEN];
        int other_full = -1;
        FUZZ_CHECK(ac_encode_text(tok, &flipped, &tm->vocab, line, len, MAX_LEN, other,
                                  &other_full) == got);
        FUZZ_CHECK(other_full == full_len);
        const int32_t *plain = tcfg.squeeze_elongations ? other : slot_ids[n];
        const int32_t *squeezed = tcfg.squeeze_elongations ? slot_ids[n] : other;
        for (int i = 0; i < got; i++)
            FUZZ_CHECK(plain[i] == AC_UNK_ID || plain[i] == squeezed[i]);
        slot_len[n++] = got;
        if (n == BATCH) {
            run_batch(tm, slot_ids, slot_len, n);
            n = 0;
        }
    }
    if (n > 0)
        run_batch(tm, slot_ids, slot_len, n);
    ac_tokenizer_free(tok);
    return 0;
}
