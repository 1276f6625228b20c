/* Encoding texts into id sequences (truncation, <cls>, <unk>), the
 * stratified validation split, and batch plans.
 *
 * Everything here is deterministic: encoding is per row, so splitting the
 * rows between threads cannot change the result, and every shuffle draws
 * from the counter-based generator of attnctl/rng.h. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <utf8proc.h>

#include "attnctl/rng.h"
#include "attnctl/text.h"
#include "text_internal.h"

/* Rows are handed to threads in chunks this big (dynamic schedule); each
 * chunk is encoded into its own buffer, concatenated in row order after. */
#define ENCODE_CHUNK_ROWS 256

/* A training pool holds this many batches, sorted by length before cutting. */
#define POOL_BATCHES 50

/* ------------------------------------------------------------------ encoding */

/* Length of the encoding of n_tokens tokens (before truncation): an empty
 * text is one <unk>, and <cls> comes first when the vocabulary has it. */
static int64_t untruncated_length(int64_t n_tokens, int with_cls)
{
    return (n_tokens > 0 ? n_tokens : 1) + (with_cls ? 1 : 0);
}

/* Longest token squeezing looks at: words stretched for emphasis are far
 * shorter, and a huge token must not cost a copy. */
#define SQUEEZE_MAX_BYTES 256

static int is_letter(utf8proc_int32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        return 1;
    default:
        return 0;
    }
}

/* Copies s[0..len) to out with every run of three or more identical letters
 * cut to `keep` of them (digits stay: "1000" is no elongation). Returns the
 * new length, len when there was nothing to cut. */
static size_t squeeze_runs(char *out, const char *s, size_t len, int keep)
{
    size_t o = 0, i = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (n <= 0) { /* tokens are valid UTF-8; copy a stray byte as it is */
            out[o++] = s[i++];
            continue;
        }
        size_t w = (size_t)n, run = 1;
        while (i + (run + 1) * w <= len && memcmp(s + i, s + i + run * w, w) == 0)
            run++;
        size_t copies = run >= 3 && is_letter(cp) ? (size_t)keep : run;
        for (size_t k = 0; k < copies; k++, o += w)
            memcpy(out + o, s + i, w);
        i += run * w;
    }
    return o;
}

int32_t ac_token_id(const ac_vocab *v, const ac_tokenizer_config *tcfg, const char *s, size_t len)
{
    int32_t id = ac_vocab_lookup(v, s, len);
    if (id != AC_UNK_ID || !tcfg->squeeze_elongations || len < 3 || len > SQUEEZE_MAX_BYTES)
        return id;
    char squeezed[SQUEEZE_MAX_BYTES];
    /* Two first ("goooood" is "good"), then one ("sooo" is "so"). */
    for (int keep = 2; keep >= 1; keep--) {
        size_t n = squeeze_runs(squeezed, s, len, keep);
        if (n == len)
            return AC_UNK_ID; /* no run of three letters */
        id = ac_vocab_lookup(v, squeezed, n);
        if (id != AC_UNK_ID)
            return id;
    }
    return AC_UNK_ID;
}

/* Writes the kept ids of toks[0..n_tokens) to ids (room for max_len) and
 * returns the kept length; *n_unk gets the kept tokens that are unknown. */
static int encode_tokens(const ac_token *toks, int64_t n_tokens, const ac_tokenizer_config *tcfg,
                         const ac_vocab *v, int max_len, int32_t *ids, int64_t *n_unk)
{
    int o = 0;
    if (v->with_cls)
        ids[o++] = AC_CLS_ID;
    *n_unk = 0;
    if (n_tokens == 0) {
        ids[o++] = AC_UNK_ID;
        return o;
    }
    int64_t budget = max_len - o; /* room for word tokens */
    int64_t head = n_tokens, tail = 0;
    if (n_tokens > budget) {
        switch (tcfg->truncation) {
        case AC_TRUNC_TAIL:
            head = 0;
            break;
        case AC_TRUNC_HEAD_TAIL:
            head = tcfg->head_tokens > 0 ? tcfg->head_tokens : max_len / 4;
            if (head > budget)
                head = budget;
            break;
        case AC_TRUNC_HEAD:
        default:
            head = budget;
            break;
        }
        tail = budget - head;
    }
    int64_t unk = 0;
    for (int64_t i = 0; i < head; i++) {
        int32_t id = ac_token_id(v, tcfg, toks[i].str, toks[i].len);
        unk += id == AC_UNK_ID;
        ids[o++] = id;
    }
    for (int64_t i = n_tokens - tail; i < n_tokens; i++) {
        int32_t id = ac_token_id(v, tcfg, toks[i].str, toks[i].len);
        unk += id == AC_UNK_ID;
        ids[o++] = id;
    }
    *n_unk = unk;
    return o;
}

static int clamp_int(int64_t x)
{
    return x > INT_MAX ? INT_MAX : (int)x;
}

int ac_encode_text(ac_tokenizer *t, const ac_tokenizer_config *tcfg, const ac_vocab *v,
                   const char *text, size_t len, int max_len, int32_t *ids, int *full_len)
{
    *full_len = 0;
    if (max_len < 1 + (v->with_cls ? 1 : 0))
        return -1;
    const ac_token *toks;
    int64_t n_tokens = ac_tokenize(t, text, len, &toks);
    if (n_tokens < 0)
        return -1;
    int64_t n_unk;
    *full_len = clamp_int(untruncated_length(n_tokens, v->with_cls));
    return encode_tokens(toks, n_tokens, tcfg, v, max_len, ids, &n_unk);
}

void ac_corpus_free(ac_corpus *c)
{
    if (!c)
        return;
    free(c->ids);
    free(c->off);
    free(c->labels);
    free(c->full_len);
    memset(c, 0, sizeof *c);
}

typedef struct {
    int32_t *ids;
    int64_t n_ids;
    int64_t n_unk, n_truncated;
} encoded_chunk;

/* Encodes rows [begin, end) into ch; row lengths go to lengths[row]. */
static int encode_chunk(encoded_chunk *ch, ac_tokenizer *tok, int32_t **scratch, size_t *scratch_cap,
                        const ac_rawdata *data, int64_t begin, int64_t end,
                        const ac_tokenizer_config *tcfg, const ac_vocab *v, int max_len,
                        int64_t *lengths, int32_t *full_len)
{
    int64_t used = 0;
    for (int64_t row = begin; row < end; row++) {
        const ac_token *toks;
        int64_t n_tokens =
            ac_tokenize(tok, ac_rawdata_text(data, row), ac_rawdata_text_len(data, row), &toks);
        if (n_tokens < 0)
            return -1;
        int64_t full = untruncated_length(n_tokens, v->with_cls);
        int64_t kept = full < max_len ? full : max_len;
        if (ac_grow((void **)scratch, scratch_cap, (size_t)(used + kept), sizeof **scratch))
            return -1;
        int64_t n_unk;
        int got = encode_tokens(toks, n_tokens, tcfg, v, max_len, *scratch + used, &n_unk);
        used += got;
        lengths[row] = got;
        full_len[row] = clamp_int(full);
        ch->n_unk += n_unk;
        ch->n_truncated += full > max_len;
    }
    ch->ids = malloc((size_t)(used ? used : 1) * sizeof *ch->ids);
    if (!ch->ids)
        return -1;
    memcpy(ch->ids, *scratch, (size_t)used * sizeof *ch->ids);
    ch->n_ids = used;
    return 0;
}

int ac_corpus_encode(ac_corpus *c, const ac_rawdata *data, const ac_tokenizer_config *tcfg,
                     const ac_vocab *v, int max_len, ac_err *err)
{
    memset(c, 0, sizeof *c);
    int min_len = 1 + (v->with_cls ? 1 : 0);
    if (max_len < min_len)
        return ac_err_set(err, "max_len %d is too small: it must be at least %d", max_len, min_len);
    ac_tokenizer *probe = NULL;
    if (ac_tokenizer_create(&probe, tcfg, err)) /* reports a bad config by name */
        return -1;
    ac_tokenizer_free(probe);

    int64_t n = data->n_rows;
    c->n = n;
    c->off = malloc((size_t)(n + 1) * sizeof *c->off);
    c->full_len = malloc((size_t)(n ? n : 1) * sizeof *c->full_len);
    if (data->labels) {
        c->labels = malloc((size_t)(n ? n : 1) * sizeof *c->labels);
        if (c->labels)
            memcpy(c->labels, data->labels, (size_t)n * sizeof *c->labels);
    }
    int64_t n_chunks = (n + ENCODE_CHUNK_ROWS - 1) / ENCODE_CHUNK_ROWS;
    encoded_chunk *chunks = calloc((size_t)(n_chunks ? n_chunks : 1), sizeof *chunks);
    if (!c->off || !c->full_len || (data->labels && !c->labels) || !chunks) {
        free(chunks);
        ac_corpus_free(c);
        return ac_err_set(err, "out of memory encoding %lld rows", (long long)n);
    }

    /* Row lengths go to off[row + 1] first, summed into offsets after. */
    int64_t *lengths = c->off + 1;
    int failed = 0;
#pragma omp parallel
    {
        ac_tokenizer *tok = NULL;
        int32_t *scratch = NULL;
        size_t scratch_cap = 0;
        if (ac_tokenizer_create(&tok, tcfg, NULL)) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = 0; k < n_chunks; k++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop)
                continue;
            int64_t begin = k * ENCODE_CHUNK_ROWS;
            int64_t end = begin + ENCODE_CHUNK_ROWS < n ? begin + ENCODE_CHUNK_ROWS : n;
            if (encode_chunk(&chunks[k], tok, &scratch, &scratch_cap, data, begin, end, tcfg, v,
                             max_len, lengths, c->full_len)) {
#pragma omp atomic write
                failed = 1;
            }
        }
        free(scratch);
        ac_tokenizer_free(tok);
    }

    int64_t total = 0;
    for (int64_t k = 0; k < n_chunks; k++)
        total += chunks[k].n_ids;
    if (!failed)
        c->ids = malloc((size_t)(total ? total : 1) * sizeof *c->ids);
    if (failed || !c->ids) {
        for (int64_t k = 0; k < n_chunks; k++)
            free(chunks[k].ids);
        free(chunks);
        ac_corpus_free(c);
        return ac_err_set(err, "out of memory encoding %lld rows", (long long)n);
    }
    int64_t pos = 0;
    for (int64_t k = 0; k < n_chunks; k++) {
        memcpy(c->ids + pos, chunks[k].ids, (size_t)chunks[k].n_ids * sizeof *c->ids);
        pos += chunks[k].n_ids;
        c->n_unk += chunks[k].n_unk;
        c->n_truncated += chunks[k].n_truncated;
        free(chunks[k].ids);
    }
    free(chunks);
    c->off[0] = 0;
    for (int64_t i = 0; i < n; i++)
        c->off[i + 1] += c->off[i];
    c->n_tokens = total;
    return 0;
}

/* ------------------------------------------------------------------- shuffles */

/* Fisher-Yates as ac_shuffle_i32, for 64-bit row numbers. */
static void shuffle_i64(int64_t *a, int64_t n, uint64_t key)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ac_rng_below(key, (uint64_t)i, (uint64_t)i + 1);
        int64_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
}

/* ---------------------------------------------------------------------- split */

int ac_split_stratified(const int32_t *labels, int64_t n, double frac, uint64_t seed,
                        int64_t **train_idx, int64_t *n_train, int64_t **val_idx, int64_t *n_val,
                        ac_err *err)
{
    *train_idx = *val_idx = NULL;
    *n_train = *n_val = 0;
    if (!(frac > 0.0 && frac < 1.0))
        return ac_err_set(err, "the validation fraction must be between 0 and 1 (exclusive), got %g",
                          frac);
    if (!labels)
        return ac_err_set(err, "a stratified split needs labels");
    if (n < 2)
        return ac_err_set(err, "%lld rows cannot be split into training and validation rows",
                          (long long)n);
    int32_t n_classes = 0;
    for (int64_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] == INT32_MAX)
            return ac_err_set(err, "row %lld: bad class id %d", (long long)i, (int)labels[i]);
        if (labels[i] >= n_classes)
            n_classes = labels[i] + 1;
    }
    /* rows of each class, contiguous and ascending: a counting sort */
    int64_t *class_start = calloc((size_t)n_classes + 1, sizeof *class_start);
    int64_t *by_class = malloc((size_t)n * sizeof *by_class);
    unsigned char *to_val = calloc((size_t)n, 1);
    if (!class_start || !by_class || !to_val) {
        free(class_start);
        free(by_class);
        free(to_val);
        return ac_err_set(err, "out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        class_start[labels[i] + 1]++;
    for (int32_t k = 0; k < n_classes; k++)
        class_start[k + 1] += class_start[k];
    {
        int64_t *fill = malloc((size_t)n_classes * sizeof *fill);
        if (!fill) {
            free(class_start);
            free(by_class);
            free(to_val);
            return ac_err_set(err, "out of memory");
        }
        memcpy(fill, class_start, (size_t)n_classes * sizeof *fill);
        for (int64_t i = 0; i < n; i++)
            by_class[fill[labels[i]]++] = i;
        free(fill);
    }
    int64_t val_count = 0;
    for (int32_t k = 0; k < n_classes; k++) {
        int64_t *rows = by_class + class_start[k];
        int64_t count = class_start[k + 1] - class_start[k];
        /* a class of one row stays in training; otherwise both sides get at least one */
        int64_t take = count < 2 ? 0 : (int64_t)llround(frac * (double)count);
        if (count >= 2 && take < 1)
            take = 1;
        if (count >= 2 && take > count - 1)
            take = count - 1;
        shuffle_i64(rows, count, ac_rng_key(seed, (uint64_t)k));
        for (int64_t j = 0; j < take; j++)
            to_val[rows[j]] = 1;
        val_count += take;
    }
    free(class_start);
    free(by_class);
    if (val_count == 0 || val_count == n) {
        free(to_val);
        return ac_err_set(err, "a validation fraction of %g leaves %s empty (%lld rows)", frac,
                          val_count == 0 ? "the validation set" : "the training set", (long long)n);
    }
    int64_t *tr = malloc((size_t)(n - val_count) * sizeof *tr);
    int64_t *va = malloc((size_t)val_count * sizeof *va);
    if (!tr || !va) {
        free(tr);
        free(va);
        free(to_val);
        return ac_err_set(err, "out of memory");
    }
    int64_t nt = 0, nv = 0;
    for (int64_t i = 0; i < n; i++) {
        if (to_val[i])
            va[nv++] = i;
        else
            tr[nt++] = i;
    }
    free(to_val);
    *train_idx = tr;
    *n_train = nt;
    *val_idx = va;
    *n_val = nv;
    return 0;
}

/* ------------------------------------------------------------------- batching */

static inline int64_t row_length(const ac_corpus *c, int64_t row)
{
    return c->off[row + 1] - c->off[row];
}

/* The span of a row that a crop keeps: [*start, *start + *len) of its ids. */
static void crop_of(const ac_corpus *c, int64_t row, const ac_crop_spec *crop, int32_t *start,
                    int32_t *len)
{
    int64_t full = row_length(c, row);
    *start = 0;
    *len = (int32_t)full;
    if (!crop || crop->frac <= 0)
        return;
    uint64_t key = ac_rng_key(crop->key, (uint64_t)row);
    if (ac_rng_uniform(key, 0) >= crop->frac)
        return;
    int first = crop->keep_first && full > 0 ? 1 : 0;
    int64_t body = full - first;
    int64_t span;
    if (crop->log_uniform) {
        /* as many spans of 1-2 words as of 32-64 */
        double u = ac_rng_uniform(key, 1);
        span = crop->min_len - 1 +
               (int64_t)floor(exp(u * log((double)(crop->max_len - crop->min_len + 2))));
        if (span > crop->max_len)
            span = crop->max_len;
    } else {
        span = crop->min_len +
               (int64_t)ac_rng_below(key, 1, (uint64_t)(crop->max_len - crop->min_len + 1));
    }
    if (span >= body)
        return;
    int64_t at = first + (int64_t)ac_rng_below(key, 2, (uint64_t)(body - span + 1));
    /* With keep_first the span is stored from the row's own start, which the
     * fill replaces by the kept first id: start = at - first. */
    *start = (int32_t)(at - first);
    *len = (int32_t)(span + first);
}

static inline int64_t plan_length(const ac_batch_plan *p, const ac_corpus *c, int64_t i)
{
    return p->crop_len ? p->crop_len[i] : row_length(c, p->order[i]);
}

typedef struct {
    int64_t length;
    int64_t pos; /* position in the shuffled order: keeps the sort stable */
    int64_t row;
} pool_item;

static int compare_pool_items(const void *pa, const void *pb)
{
    const pool_item *a = pa, *b = pb;
    if (a->length != b->length)
        return a->length < b->length ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

void ac_batch_plan_free(ac_batch_plan *p)
{
    if (!p)
        return;
    free(p->order);
    free(p->batch_start);
    free(p->crop_start);
    free(p->crop_len);
    memset(p, 0, sizeof *p);
}

int ac_batch_plan_make(ac_batch_plan *p, const ac_corpus *c, const int64_t *idx, int64_t n,
                       int batch_size, int shuffle, uint64_t key, ac_err *err)
{
    return ac_batch_plan_make_cropped(p, c, idx, n, batch_size, shuffle, key, NULL, err);
}

int ac_batch_plan_make_cropped(ac_batch_plan *p, const ac_corpus *c, const int64_t *idx, int64_t n,
                               int batch_size, int shuffle, uint64_t key,
                               const ac_crop_spec *crop, ac_err *err)
{
    memset(p, 0, sizeof *p);
    if (batch_size < 1)
        return ac_err_set(err, "batch size must be at least 1, got %d", batch_size);
    if (crop && crop->frac > 0 &&
        (crop->min_len < 1 || crop->max_len < crop->min_len || crop->frac > 1))
        return ac_err_set(err, "crop lengths %d..%d (share %g) are not a valid range",
                          crop->min_len, crop->max_len, crop->frac);
    if (crop && crop->frac <= 0)
        crop = NULL;
    if (n < 0 || (!idx && n > c->n))
        return ac_err_set(err, "%lld rows asked for, the corpus has %lld", (long long)n,
                          (long long)c->n);
    for (int64_t i = 0; idx && i < n; i++)
        if (idx[i] < 0 || idx[i] >= c->n)
            return ac_err_set(err, "row %lld out of range (the corpus has %lld rows)",
                              (long long)idx[i], (long long)c->n);
    int64_t n_batches = (n + batch_size - 1) / batch_size;
    int64_t *rows = malloc((size_t)(n ? n : 1) * sizeof *rows);
    p->order = malloc((size_t)(n ? n : 1) * sizeof *p->order);
    p->batch_start = malloc((size_t)(n_batches + 1) * sizeof *p->batch_start);
    if (!rows || !p->order || !p->batch_start) {
        free(rows);
        ac_batch_plan_free(p);
        return ac_err_set(err, "out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        rows[i] = idx ? idx[i] : i;

    if (!shuffle) {
        memcpy(p->order, rows, (size_t)n * sizeof *rows);
        for (int64_t b = 0; b <= n_batches; b++)
            p->batch_start[b] = b * batch_size < n ? b * batch_size : n;
    } else {
        shuffle_i64(rows, n, ac_rng_key(key, 0));
        /* pools of similar-length rows keep padding low; shuffling within
         * a pool would undo that, so randomness comes from the row shuffle
         * above and the batch order below */
        int64_t pool_rows = (int64_t)POOL_BATCHES * batch_size;
        pool_item *pool = malloc((size_t)(n < pool_rows ? (n ? n : 1) : pool_rows) * sizeof *pool);
        int64_t *batch_order = malloc((size_t)(n_batches ? n_batches : 1) * sizeof *batch_order);
        if (!pool || !batch_order) {
            free(pool);
            free(batch_order);
            free(rows);
            ac_batch_plan_free(p);
            return ac_err_set(err, "out of memory");
        }
        for (int64_t start = 0; start < n; start += pool_rows) {
            int64_t m = n - start < pool_rows ? n - start : pool_rows;
            for (int64_t i = 0; i < m; i++) {
                int32_t cs, cl;
                crop_of(c, rows[start + i], crop, &cs, &cl);
                pool[i] = (pool_item){cl, start + i, rows[start + i]};
            }
            qsort(pool, (size_t)m, sizeof *pool, compare_pool_items);
            for (int64_t i = 0; i < m; i++)
                rows[start + i] = pool[i].row;
        }
        free(pool);
        for (int64_t b = 0; b < n_batches; b++)
            batch_order[b] = b;
        shuffle_i64(batch_order, n_batches, ac_rng_key(key, 1));
        int64_t o = 0;
        for (int64_t b = 0; b < n_batches; b++) {
            int64_t src = batch_order[b] * batch_size;
            int64_t m = n - src < batch_size ? n - src : batch_size;
            p->batch_start[b] = o;
            memcpy(p->order + o, rows + src, (size_t)m * sizeof *rows);
            o += m;
        }
        p->batch_start[n_batches] = o;
        free(batch_order);
    }
    free(rows);
    p->n_batches = n_batches;
    if (crop) {
        p->crop_start = malloc((size_t)(n ? n : 1) * sizeof *p->crop_start);
        p->crop_len = malloc((size_t)(n ? n : 1) * sizeof *p->crop_len);
        if (!p->crop_start || !p->crop_len) {
            ac_batch_plan_free(p);
            return ac_err_set(err, "out of memory");
        }
        for (int64_t i = 0; i < n; i++)
            crop_of(c, p->order[i], crop, &p->crop_start[i], &p->crop_len[i]);
        p->keep_first = crop->keep_first;
    }
    for (int64_t b = 0; b < n_batches; b++) {
        int64_t longest = 0;
        for (int64_t i = p->batch_start[b]; i < p->batch_start[b + 1]; i++) {
            int64_t len = plan_length(p, c, i);
            p->real_tokens += len;
            if (len > longest)
                longest = len;
        }
        p->padded_tokens += longest * (p->batch_start[b + 1] - p->batch_start[b]);
    }
    return 0;
}

int64_t ac_batch_plan_tokens(const ac_batch_plan *p, const ac_corpus *c, int64_t b)
{
    int64_t tokens = 0;
    for (int64_t i = p->batch_start[b]; i < p->batch_start[b + 1]; i++)
        tokens += plan_length(p, c, i);
    return tokens;
}

void ac_batch_fill(ac_batch *out, const ac_corpus *c, const ac_batch_plan *p, int64_t b)
{
    ac_batch_fill_rows(out, c, p, b, 0, ac_batch_plan_rows(p, b));
}

void ac_batch_fill_rows(ac_batch *out, const ac_corpus *c, const ac_batch_plan *p, int64_t b,
                        int first_row, int n)
{
    int64_t begin = p->batch_start[b] + first_row;
    int B = n, T = 0;
    for (int i = 0; i < B; i++) {
        int64_t len = plan_length(p, c, begin + i);
        if (len > T)
            T = (int)len;
    }
    out->B = B;
    out->T = T;
    for (int i = 0; i < B; i++) {
        int64_t row = p->order[begin + i];
        int len = (int)plan_length(p, c, begin + i);
        int32_t *dst = out->ids + (size_t)i * (size_t)T;
        const int32_t *src = c->ids + c->off[row];
        if (p->crop_start && p->crop_start[begin + i] > 0) {
            int first = p->keep_first ? 1 : 0;
            if (first)
                dst[0] = src[0];
            memcpy(dst + first, src + first + p->crop_start[begin + i],
                   (size_t)(len - first) * sizeof *dst);
        } else {
            memcpy(dst, src, (size_t)len * sizeof *dst);
        }
        for (int j = len; j < T; j++)
            dst[j] = AC_PAD_ID;
        out->lengths[i] = len;
        out->labels[i] = c->labels ? c->labels[row] : 0;
        out->rows[i] = row;
    }
}
