/* The vocabulary: building it from training texts, vocab.txt in and out,
 * and token -> id lookup through an open-addressing hash table.
 *
 * Building counts tokens in per-thread hash tables that are merged by
 * addition, then sorts by (count desc, bytes asc): a total order, so the
 * result does not depend on the thread count or on which thread saw what. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#ifdef __AVX512BW__
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attnctl/memory.h"
#include "attnctl/text.h"
#include "text_internal.h"

static const char *const SPECIALS[] = {"<pad>", "<unk>", "<cls>", "<mask>"};
enum { SPECIAL_CLS = 2, SPECIAL_MASK = 3 };

/* Rows are handed to threads in chunks this big (dynamic schedule). */
#define COUNT_CHUNK_ROWS 256

/* The slot from the hash's low bits (the high half folded in), the tag from its high half. */
static inline uint32_t slot_of(uint64_t h, uint32_t mask)
{
    return (uint32_t)(h ^ (h >> 32)) & mask;
}
/* ac_vocab_slot: the id in the low 26 bits, the hash's top 6 bits above. */
#define SLOT_EMPTY 0xffffffffu
#define SLOT_ID_BITS 0x3ffffffu
static inline uint32_t tag_of(uint64_t h) { return (uint32_t)(h >> 58) << 26; }
static inline int32_t slot_id(ac_vocab_slot s) { return (int32_t)(s & SLOT_ID_BITS); }
static inline uint32_t slot_tag(ac_vocab_slot s) { return s & ~SLOT_ID_BITS; }

/* ------------------------------------------------------------ token counts */

typedef struct {
    uint64_t hash;
    uint64_t off; /* into the table's arena */
    uint32_t len;
    int64_t count; /* 0: empty slot */
} count_slot;

typedef struct {
    count_slot *slots;
    uint32_t mask;
    size_t used;
    char *arena;
    size_t arena_len, arena_cap;
} count_table;

static int count_table_init(count_table *t, uint32_t n_slots)
{
    memset(t, 0, sizeof *t);
    t->slots = calloc(n_slots, sizeof *t->slots);
    if (!t->slots)
        return -1;
    t->mask = n_slots - 1;
    return 0;
}

static void count_table_free(count_table *t)
{
    free(t->slots);
    free(t->arena);
    memset(t, 0, sizeof *t);
}

static int count_table_grow(count_table *t)
{
    uint64_t n_slots = (uint64_t)t->mask + 1;
    if (n_slots >= (1ULL << 31))
        return -1;
    uint32_t new_mask = (uint32_t)(2 * n_slots - 1);
    count_slot *slots = calloc((size_t)new_mask + 1, sizeof *slots);
    if (!slots)
        return -1;
    for (uint64_t i = 0; i < n_slots; i++) {
        const count_slot *s = &t->slots[i];
        if (!s->count)
            continue;
        uint32_t k = slot_of(s->hash, new_mask);
        while (slots[k].count)
            k = (k + 1) & new_mask;
        slots[k] = *s;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = new_mask;
    return 0;
}

/* Adds `add` to the count of token s[0..len) (hash h). */
static int count_table_add(count_table *t, const char *s, uint32_t len, uint64_t h, int64_t add)
{
    uint32_t k = slot_of(h, t->mask);
    for (;;) {
        count_slot *slot = &t->slots[k];
        if (!slot->count)
            break;
        if (slot->hash == h && slot->len == len && memcmp(t->arena + slot->off, s, len) == 0) {
            slot->count += add;
            return 0;
        }
        k = (k + 1) & t->mask;
    }
    if (ac_grow((void **)&t->arena, &t->arena_cap, t->arena_len + len, 1))
        return -1;
    memcpy(t->arena + t->arena_len, s, len);
    t->slots[k] = (count_slot){.hash = h, .off = t->arena_len, .len = len, .count = add};
    t->arena_len += len;
    t->used++;
    /* keep the load at most one half so probe runs stay short */
    if (2 * t->used > (size_t)t->mask + 1)
        return count_table_grow(t);
    return 0;
}

/* ------------------------------------------------------------- lookup table */

static void vocab_zero(ac_vocab *v)
{
    memset(v, 0, sizeof *v);
    v->mask_id = -1;
}

void ac_vocab_free(ac_vocab *v)
{
    if (!v)
        return;
    free(v->storage);
    free(v->tokens);
    free(v->slots);
    vocab_zero(v);
}

/* Slots for n tokens: a power of two, at least twice n (0 past 2^31). */
static uint64_t slots_for(uint64_t n)
{
    uint64_t n_slots = 16;
    while (n_slots < 2 * n)
        n_slots *= 2;
    return n_slots <= (1ULL << 31) ? n_slots : 0;
}

/* Puts token id (hash h) in the table; the first duplicate met is noted in
 * *dup (its first occurrence in *first), the caller reports it. */
static void insert_token(ac_vocab *v, int32_t id, uint64_t h, int32_t *dup, int32_t *first)
{
    const uint32_t mask = v->n_slots - 1;
    uint32_t k = slot_of(h, mask);
    while (v->slots[k] != SLOT_EMPTY &&
           (slot_tag(v->slots[k]) != tag_of(h) ||
            strcmp(v->tokens[slot_id(v->slots[k])], v->tokens[id]) != 0))
        k = (k + 1) & mask;
    if (v->slots[k] == SLOT_EMPTY)
        v->slots[k] = (uint32_t)id | tag_of(h);
    else if (*dup < 0) {
        *dup = id;
        *first = slot_id(v->slots[k]);
    }
}

/* Builds v->slots from v->tokens[0..size). On a duplicate token returns -1
 * with its id in *dup and the id of its first occurrence in *first. */
static int vocab_index(ac_vocab *v, int32_t *dup, int32_t *first)
{
    *dup = *first = -1;
    const uint64_t n_slots = slots_for((uint64_t)v->size);
    v->slots = n_slots ? malloc(n_slots * sizeof *v->slots) : NULL;
    if (!v->slots)
        return -1;
    memset(v->slots, 0xff, n_slots * sizeof *v->slots); /* all ones: SLOT_EMPTY */
    v->n_slots = (uint32_t)n_slots;
    for (int32_t id = 0; id < v->size && *dup < 0; id++)
        insert_token(v, id, ac_token_hash(v->tokens[id], strlen(v->tokens[id])), dup, first);
    return *dup < 0 ? 0 : -1;
}

int32_t ac_vocab_lookup(const ac_vocab *v, const char *s, size_t len)
{
    if (!v->n_slots)
        return AC_UNK_ID;
    uint32_t mask = v->n_slots - 1;
    const uint64_t h = ac_token_hash(s, len);
    uint32_t k = slot_of(h, mask);
    for (;; k = (k + 1) & mask) {
        const uint32_t slot = v->slots[k];
        if (slot == SLOT_EMPTY)
            return AC_UNK_ID;
        if (slot_tag(slot) != tag_of(h))
            continue;
        const int32_t id = slot_id(slot);
        /* byte by byte, stopping at the token's NUL: never reads past it */
        const char *tok = v->tokens[id];
        size_t i = 0;
        while (i < len && tok[i] && tok[i] == s[i])
            i++;
        if (i == len && tok[len] == '\0')
            return id;
    }
}

/* ------------------------------------------------------------------ building */

typedef struct {
    int64_t count;
    const char *str;
    uint32_t len;
} ranked_token;

/* Count descending, then bytes ascending (memcmp, then the shorter first). */
static int compare_ranked(const void *pa, const void *pb)
{
    const ranked_token *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    int c = memcmp(a->str, b->str, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int is_special(const char *s, uint32_t len)
{
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++)
        if (strlen(SPECIALS[i]) == len && memcmp(SPECIALS[i], s, len) == 0)
            return 1;
    return 0;
}

/* Counts the tokens of the selected rows into tables[0] (threads merge into it). */
static int count_tokens(count_table *total, const ac_rawdata *data, const int64_t *idx, int64_t n,
                        const ac_tokenizer_config *tcfg)
{
    int n_threads = 1;
#ifdef _OPENMP
    n_threads = omp_get_max_threads();
#endif
    count_table *tables = calloc((size_t)n_threads, sizeof *tables);
    if (!tables)
        return -1;
    int64_t n_chunks = (n + COUNT_CHUNK_ROWS - 1) / COUNT_CHUNK_ROWS;
    int failed = 0;
#pragma omp parallel num_threads(n_threads)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        count_table *table = &tables[tid];
        ac_tokenizer *tok = NULL;
        int ok = count_table_init(table, 1u << 14) == 0 && ac_tokenizer_create(&tok, tcfg, NULL) == 0;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t chunk = 0; chunk < n_chunks; chunk++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop)
                continue;
            int64_t end = (chunk + 1) * COUNT_CHUNK_ROWS < n ? (chunk + 1) * COUNT_CHUNK_ROWS : n;
            for (int64_t i = chunk * COUNT_CHUNK_ROWS; i < end; i++) {
                int64_t row = idx ? idx[i] : i;
                const ac_token *toks;
                int64_t nt = ac_tokenize(tok, ac_rawdata_text(data, row),
                                         ac_rawdata_text_len(data, row), &toks);
                int bad = nt < 0;
                for (int64_t k = 0; k < nt && !bad; k++)
                    bad = count_table_add(table, toks[k].str, toks[k].len,
                                          ac_token_hash(toks[k].str, toks[k].len), 1) != 0;
                if (bad) {
#pragma omp atomic write
                    failed = 1;
                    break;
                }
            }
        }
        ac_tokenizer_free(tok);
    }
    /* merge by addition: the sums do not depend on who counted what */
    for (int t = 1; t < n_threads && !failed; t++) {
        const count_table *src = &tables[t];
        for (uint64_t k = 0; k <= src->mask && src->slots; k++) {
            const count_slot *s = &src->slots[k];
            if (s->count && count_table_add(&tables[0], src->arena + s->off, s->len, s->hash, s->count)) {
                failed = 1;
                break;
            }
        }
    }
    for (int t = 1; t < n_threads; t++)
        count_table_free(&tables[t]);
    if (failed) {
        count_table_free(&tables[0]);
        free(tables);
        return -1;
    }
    *total = tables[0];
    free(tables);
    return 0;
}

int ac_vocab_build(ac_vocab *v, const ac_rawdata *data, const int64_t *idx, int64_t n,
                   const ac_tokenizer_config *tcfg, int32_t max_size, int64_t min_count,
                   int specials, ac_err *err)
{
    vocab_zero(v);
    const int with_cls = (specials & AC_VOCAB_WITH_CLS) != 0;
    const int with_mask = (specials & AC_VOCAB_WITH_MASK) != 0;
    int32_t n_specials = 2 + with_cls + with_mask;
    if (max_size < n_specials)
        return ac_err_set(err, "vocabulary size %d is too small: the %d special tokens need %d",
                          (int)max_size, (int)n_specials, (int)n_specials);
    if (max_size > AC_VOCAB_MAX_TOKENS)
        return ac_err_set(err, "vocabulary size %d is too large (at most %d)", (int)max_size,
                          AC_VOCAB_MAX_TOKENS);
    if (n < 0 || (!idx && n > data->n_rows))
        return ac_err_set(err, "vocabulary: %lld rows asked for, the data has %lld", (long long)n,
                          (long long)data->n_rows);
    for (int64_t i = 0; idx && i < n; i++)
        if (idx[i] < 0 || idx[i] >= data->n_rows)
            return ac_err_set(err, "vocabulary: row %lld out of range (the data has %lld rows)",
                              (long long)idx[i], (long long)data->n_rows);
    ac_tokenizer *probe = NULL;
    if (ac_tokenizer_create(&probe, tcfg, err)) /* reports a bad config by name */
        return -1;
    ac_tokenizer_free(probe);

    count_table counts;
    if (count_tokens(&counts, data, idx, n, tcfg))
        return ac_err_set(err, "out of memory while counting tokens");

    ranked_token *ranked = malloc((counts.used ? counts.used : 1) * sizeof *ranked);
    if (!ranked) {
        count_table_free(&counts);
        return ac_err_set(err, "out of memory while counting tokens");
    }
    size_t n_ranked = 0;
    for (uint64_t k = 0; k <= counts.mask; k++) {
        const count_slot *s = &counts.slots[k];
        const char *str = counts.arena + s->off;
        if (s->count && s->count >= min_count && !is_special(str, s->len))
            ranked[n_ranked++] = (ranked_token){s->count, str, s->len};
    }
    qsort(ranked, n_ranked, sizeof *ranked, compare_ranked);
    size_t keep = (size_t)(max_size - n_specials);
    if (keep > n_ranked)
        keep = n_ranked;

    v->size = n_specials + (int32_t)keep;
    v->with_cls = with_cls;
    v->mask_id = with_mask ? 2 + with_cls : -1;
    const char *special_names[4];
    size_t bytes = 0;
    for (int32_t i = 0; i < n_specials; i++) {
        special_names[i] = SPECIALS[i < 2 ? i : i == 2 && with_cls ? SPECIAL_CLS : SPECIAL_MASK];
        bytes += strlen(special_names[i]) + 1;
    }
    for (size_t i = 0; i < keep; i++)
        bytes += (size_t)ranked[i].len + 1;
    v->tokens = calloc((size_t)v->size, sizeof *v->tokens);
    v->storage = malloc(bytes);
    int ok = v->tokens && v->storage;
    char *at = v->storage;
    for (int32_t i = 0; ok && i < n_specials; i++) {
        size_t len = strlen(special_names[i]);
        memcpy(at, special_names[i], len + 1);
        v->tokens[i] = at;
        at += len + 1;
    }
    for (size_t i = 0; ok && i < keep; i++) {
        const ranked_token *r = &ranked[i];
        /* vocab.txt is one token a line; the tokenizer never yields a newline or NUL */
        assert(!memchr(r->str, '\n', r->len) && !memchr(r->str, '\0', r->len) && r->len > 0);
        memcpy(at, r->str, r->len);
        at[r->len] = '\0';
        v->tokens[n_specials + (int32_t)i] = at;
        at += r->len + 1;
    }
    free(ranked);
    count_table_free(&counts);
    int32_t dup, first;
    if (!ok || vocab_index(v, &dup, &first)) {
        ac_vocab_free(v);
        return ac_err_set(err, "out of memory while building the vocabulary");
    }
    return 0;
}

/* ------------------------------------------------------------------ vocab.txt */

/* Shows a token in an error message: at most 40 bytes. */
#define SHOW_TOKEN 40

/* Reads all of fd into *buf, which gets one spare byte past *len. 0, or -1
 * with errno set. */
static int read_all(int fd, char **buf, size_t *len)
{
    struct stat sb;
    size_t cap = 1 << 16, used = 0;
    /* A regular file's size + 1: the read that returns 0 needs no growth. */
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= 0 &&
        (uint64_t)sb.st_size < (uint64_t)SIZE_MAX / 2)
        cap = (size_t)sb.st_size + 1;
    char *data = malloc(cap + 1);
    if (!data)
        return -1;
    ac_prefault_write(data, cap + 1);
    for (;;) {
        if (used == cap) {
            if (cap > SIZE_MAX / 4) {
                free(data);
                errno = EFBIG;
                return -1;
            }
            char *bigger = realloc(data, 2 * cap + 1);
            if (!bigger) {
                free(data);
                errno = ENOMEM;
                return -1;
            }
            data = bigger;
            cap *= 2;
        }
        ssize_t got = read(fd, data + used, cap - used);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(data);
            errno = e;
            return -1;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    *buf = data;
    *len = used;
    return 0;
}

/* One line of vocab.txt as the scan of ac_vocab_load saw it. */
typedef struct {
    const char *text; /* NUL-terminated at len */
    size_t len;
    size_t first_bad;  /* first white space or control byte, or len */
    int has_nul;
    int non_ascii;
} vocab_line;

/* The checks of one line (number lineno): 0, or -1 with the error set.
 * Updates v->with_cls and v->mask_id. */
static int check_vocab_line(ac_vocab *v, const vocab_line *l, int64_t lineno, const char *path,
                            ac_err *err)
{
    const char *line = l->text;
    if (l->len == 0)
        return ac_err_set(err, "%s:%lld: empty line (vocab.txt holds one token a line)", path,
                          (long long)lineno);
    if (l->has_nul)
        return ac_err_set(err, "%s:%lld: token contains a NUL byte", path, (long long)lineno);
    /* The tokenizer never yields white space or control characters, and a
     * CR left at the end ("tok\r\r\n") would not survive a write + load. */
    if (l->first_bad < l->len)
        return ac_err_set(err, "%s:%lld: token contains white space or a control character (byte 0x%02x)",
                          path, (long long)lineno, (unsigned char)line[l->first_bad]);
    if (l->non_ascii && ac_utf8_valid_prefix(line, l->len) != l->len)
        return ac_err_set(err, "%s:%lld: token is not valid UTF-8", path, (long long)lineno);
    if (lineno <= 2 && strcmp(line, SPECIALS[lineno - 1]) != 0)
        return ac_err_set(err, "%s:%lld: expected \"%s\" (a vocabulary starts with <pad>, <unk>), found \"%.*s\"",
                          path, (long long)lineno, SPECIALS[lineno - 1], SHOW_TOKEN, line);
    if (line[0] == '<') {
        if (lineno == 3 && strcmp(line, SPECIALS[SPECIAL_CLS]) == 0)
            v->with_cls = 1;
        else if (strcmp(line, SPECIALS[SPECIAL_CLS]) == 0)
            return ac_err_set(err, "%s:%lld: \"<cls>\" may only be line 3", path, (long long)lineno);
        /* <mask> follows the other specials: line 3, or 4 after <cls>. */
        if (strcmp(line, SPECIALS[SPECIAL_MASK]) == 0) {
            if (lineno != 3 + v->with_cls)
                return ac_err_set(err, "%s:%lld: \"<mask>\" may only follow <unk> (line 3) or <cls> "
                                       "(line 4)",
                                  path, (long long)lineno);
            v->mask_id = (int32_t)(lineno - 1);
        }
    }
    if (lineno > AC_VOCAB_MAX_TOKENS)
        return ac_err_set(err, "%s:%lld: too many tokens (at most %d)", path, (long long)lineno,
                          AC_VOCAB_MAX_TOKENS);
    return 0;
}

/* Lines between a token's hash and its insertion in ac_vocab_load. */
#define LOAD_AHEAD 16

/* The file's lines (a last one without its newline counts) in *n_lines,
 * and 1 when no byte is a control byte, a space or DEL (but '\n') and the
 * file is valid UTF-8, as in most vocabularies: then the per-byte checks of
 * a line have nothing to find ('\n' is never part of a UTF-8 sequence, so a
 * valid file has valid lines). One pass the compiler vectorises. */
static int scan_lines(const char *data, size_t len, size_t *n_lines)
{
    unsigned char control = 0, high = 0;
    size_t newlines = 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)data[i];
        control |= (unsigned char)((c < 0x21 && c != '\n') | (c == 0x7f));
        high |= c;
        newlines += c == '\n';
    }
    *n_lines = newlines + (len > 0 && data[len - 1] != '\n');
    return !control && (!(high & 0x80) || ac_utf8_valid_prefix(data, len) == len);
}

/* Bit j set when p[j] is '\n', for j < n <= 64: a plain file's lines are
 * found 64 bytes at a time instead of with a memchr call per short line. */
static inline uint64_t newline_bits(const char *p, size_t n)
{
#ifdef __AVX512BW__
    const __mmask64 in = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    return _mm512_mask_cmpeq_epi8_mask(in, _mm512_maskz_loadu_epi8(in, p), _mm512_set1_epi8('\n'));
#else
    uint64_t bits = 0;
    for (size_t j = 0; j < n; j++)
        bits |= (uint64_t)(p[j] == '\n') << j;
    return bits;
#endif
}

/* The state of ac_vocab_load between lines. */
typedef struct {
    ac_vocab *v;
    const char *path;
    uint32_t mask;
    int64_t lineno;
    int32_t dup, first;
    uint64_t pending[LOAD_AHEAD]; /* the hashes of the lines not yet in the table */
} vocab_loader;

/* Checks line l (its hash h), makes it the next token and inserts the token
 * LOAD_AHEAD lines back, whose slot has been fetched meanwhile (the table is
 * larger than a core's fastest caches). 0, or -1 with the error set. */
static inline int take_line(vocab_loader *ld, const vocab_line *l, uint64_t h, ac_err *err)
{
    ac_vocab *v = ld->v;
    char *line = (char *)l->text;
    line[l->len] = '\0'; /* the '\n', the '\r' or the spare byte */
    ld->lineno++;
    if (check_vocab_line(v, l, ld->lineno, ld->path, err) != 0)
        return -1;
    int32_t id = v->size++;
    v->tokens[id] = line;
    __builtin_prefetch(&v->slots[slot_of(h, ld->mask)], 1);
    if (id >= LOAD_AHEAD)
        insert_token(v, id - LOAD_AHEAD, ld->pending[id % LOAD_AHEAD], &ld->dup, &ld->first);
    ld->pending[id % LOAD_AHEAD] = h;
    return 0;
}

/* The lines of a file scan_lines calls plain: only the checks of check_vocab_line remain. */
static int take_plain_lines(vocab_loader *ld, char *data, size_t len, ac_err *err)
{
    char *line = data;
    for (size_t base = 0; base < len; base += 64) {
        for (uint64_t bits = newline_bits(data + base, len - base < 64 ? len - base : 64); bits;
             bits &= bits - 1) {
            char *nl = data + base + __builtin_ctzll(bits);
            vocab_line l = {.text = line, .len = (size_t)(nl - line)};
            l.first_bad = l.len;
            if (take_line(ld, &l, ac_token_hash(line, l.len), err) != 0)
                return -1;
            line = nl + 1;
        }
    }
    if (line == data + len)
        return 0;
    vocab_line l = {.text = line, .len = (size_t)(data + len - line)}; /* no newline at the end */
    l.first_bad = l.len;
    return take_line(ld, &l, ac_token_hash(line, l.len), err);
}

/* Any other file: one pass over each line finds its end and what the checks need. */
static int take_checked_lines(vocab_loader *ld, char *data, size_t len, ac_err *err)
{
    char *const end = data + len;
    for (char *p = data; p < end;) {
        vocab_line l = {.text = p};
        char *line = p;
        size_t first_bad = SIZE_MAX;
        unsigned char all_bits = 0;
        for (; p < end && *p != '\n'; p++) {
            unsigned char c = (unsigned char)*p;
            all_bits |= c;
            if ((c <= ' ' || c == 0x7f) && first_bad == SIZE_MAX)
                first_bad = (size_t)(p - l.text);
            l.has_nul |= c == 0;
        }
        l.len = (size_t)(p - line);
        if (p < end)
            p++; /* past the '\n' */
        if (l.len && line[l.len - 1] == '\r') /* CRLF */
            l.len--;
        l.first_bad = first_bad < l.len ? first_bad : l.len;
        l.non_ascii = (all_bits & 0x80) != 0;
        if (take_line(ld, &l, ac_token_hash(line, l.len), err) != 0)
            return -1;
    }
    return 0;
}

/* One read of the whole file, which becomes the tokens' storage (each line
 * end overwritten with a NUL); the hash table is filled in the same pass. A
 * cold `attnctl predict` loads 30,000 tokens: a malloc per token and a
 * second pass cost it 5 ms. */
int ac_vocab_load(ac_vocab *v, const char *path, ac_err *err)
{
    vocab_zero(v);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ac_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    char *data = NULL;
    size_t len = 0;
    int read_rc = read_all(fd, &data, &len);
    int read_errno = errno;
    close(fd);
    if (read_rc != 0)
        return ac_err_set(err, "%s: read error: %s", path, strerror(read_errno));
    v->storage = data;
    data[len] = '\0';
    size_t n_lines;
    const int plain = scan_lines(data, len, &n_lines);
    if (n_lines == 0) {
        ac_err_set(err, "%s: empty file (a vocabulary starts with <pad>, <unk>)", path);
        goto fail;
    }
    /* Past AC_VOCAB_MAX_TOKENS lines check_vocab_line stops at the next. */
    size_t max_tokens = n_lines < (size_t)AC_VOCAB_MAX_TOKENS ? n_lines : (size_t)AC_VOCAB_MAX_TOKENS;
    const uint64_t n_slots = slots_for((uint64_t)max_tokens);
    v->tokens = malloc(max_tokens * sizeof *v->tokens);
    v->slots = n_slots ? malloc(n_slots * sizeof *v->slots) : NULL;
    if (!v->tokens || !v->slots) {
        ac_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    ac_prefault_write(v->tokens, max_tokens * sizeof *v->tokens);
    ac_prefault_write(v->slots, n_slots * sizeof *v->slots);
    memset(v->slots, 0xff, n_slots * sizeof *v->slots); /* all ones: SLOT_EMPTY */
    v->n_slots = (uint32_t)n_slots;
    vocab_loader ld = {.v = v, .path = path, .mask = v->n_slots - 1, .dup = -1, .first = -1};
    if ((plain ? take_plain_lines : take_checked_lines)(&ld, data, len, err) != 0)
        goto fail;
    for (int32_t id = v->size - LOAD_AHEAD > 0 ? v->size - LOAD_AHEAD : 0; id < v->size; id++)
        insert_token(v, id, ld.pending[id % LOAD_AHEAD], &ld.dup, &ld.first);
    if (ld.lineno == 1) {
        ac_err_set(err, "%s:2: missing \"<unk>\" (a vocabulary starts with <pad>, <unk>)", path);
        goto fail;
    }
    if (ld.dup >= 0) {
        ac_err_set(err, "%s:%lld: duplicate token \"%.*s\" (first on line %lld)", path,
                   (long long)ld.dup + 1, SHOW_TOKEN, v->tokens[ld.dup], (long long)ld.first + 1);
        goto fail;
    }
    return 0;
fail:
    ac_vocab_free(v);
    return -1;
}

int ac_vocab_write(const ac_vocab *v, FILE *f, ac_err *err)
{
    for (int32_t i = 0; i < v->size; i++) {
        if (fputs(v->tokens[i], f) == EOF || fputc('\n', f) == EOF)
            return ac_err_set(err, "writing the vocabulary: %s", strerror(errno));
    }
    if (fflush(f) == EOF || ferror(f))
        return ac_err_set(err, "writing the vocabulary: %s", strerror(errno));
    return 0;
}
