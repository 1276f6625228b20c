/* The text pipeline: CSV (libcsv, streaming, gzip by content through zlib)
 * -> (text, label) rows -> tokens (utf8proc) -> ids (vocabulary) -> an
 * encoded corpus in one int32 array with offsets -> batches. */
#ifndef ATTNCTL_TEXT_H
#define ATTNCTL_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attnctl/error.h"
#include "attnctl/names.h"

/* ------------------------------------------------------------------ reading */

typedef struct {
    const char *text_column;  /* NULL: first of review, text, sentence (case-insensitive) */
    const char *label_column; /* NULL: first of sentiment, label, polarity */
    int need_label;           /* 1: a label column must exist (train, eval) */
    /* 1: plain text, one text a line (LF or CRLF), no header and no labels:
     * blank lines are skipped and counted like empty texts, a NUL byte is an
     * error naming the line (binary data, not text). text_column,
     * label_column and need_label must then be unset. */
    int lines;
    /* Known classes (e.g. from a model). NULL: discover from the file, ordered
     * numerically when every label is an integer, else by byte order. When
     * given, a row whose label is not among them is an error naming the line. */
    char *const *classes;
    int n_classes;
} ac_read_options;

typedef struct {
    int64_t n_rows;
    char *text_buf;      /* all texts, each NUL-terminated */
    int64_t *text_off;   /* [n_rows + 1]: text i is text_buf + text_off[i] */
    int32_t *labels;     /* [n_rows] class ids, or NULL without a label column */
    int64_t *line;       /* [n_rows] physical line where the row starts (1-based; header is line 1) */
    int n_classes;
    char **classes;      /* class names in class order */
    int64_t n_empty_skipped; /* rows whose text is empty or only white space: skipped, counted */
    int64_t n_invalid_utf8;  /* rows that held invalid UTF-8 (decoded as U+FFFD, kept) */
} ac_rawdata;

/* Reads a whole CSV (plain or gzip, detected by content) streaming through
 * libcsv, or a plain-text file with opt->lines. Errors are "FILE:LINE: what
 * is wrong". */
int ac_rawdata_read(ac_rawdata *out, const char *path, const ac_read_options *opt, ac_err *err);

/* How unlabelled text files are read (attnctl pretrain). */
typedef enum {
    AC_TEXT_FORMAT_AUTO = 0,  /* by name: *.csv and *.csv.gz are CSV, anything else lines */
    AC_TEXT_FORMAT_CSV = 1,   /* CSV with a header and a text column */
    AC_TEXT_FORMAT_LINES = 2, /* plain text, one document a line */
} ac_text_format;
const char *ac_text_format_name(ac_text_format f);
int ac_text_format_parse(const char *s, ac_text_format *out); /* 0 ok, -1 unknown */
extern const ac_names ac_text_format_names; /* the names, in the order listed */
/* The format a file is read in: `format` itself unless it is AUTO. */
ac_text_format ac_text_format_of(const char *path, ac_text_format format);

/* The texts of several files (each read as ac_text_format_of says; CSV
 * files by text_column or the usual names), concatenated in order, without
 * labels: out->line[i] is the row's line in its own file. The counts of
 * skipped and repaired rows add up over the files. */
int ac_rawdata_read_texts(ac_rawdata *out, const char *const *paths, int n_paths,
                          ac_text_format format, const char *text_column, ac_err *err);
/* Appends src's rows rows[0..n) (its first n when rows is NULL) to dst, with
 * class ids labels[0..n) in dst's classes when given (dst labelled), else
 * unlabelled (dst unlabelled); their line numbers are their lines in src's
 * file. The counts of skipped and repaired rows are the caller's to add. */
int ac_rawdata_append(ac_rawdata *dst, const ac_rawdata *src, const int64_t *rows,
                      const int32_t *labels, int64_t n, ac_err *err);
static inline const char *ac_rawdata_text(const ac_rawdata *d, int64_t i)
{
    return d->text_buf + d->text_off[i];
}
static inline size_t ac_rawdata_text_len(const ac_rawdata *d, int64_t i)
{
    return (size_t)(d->text_off[i + 1] - d->text_off[i] - 1);
}
void ac_rawdata_free(ac_rawdata *d);

/* A column name or label as a message quotes it: at most AC_SHOWN_MAX bytes
 * (cut at a character boundary, then "..."), control bytes and, when not
 * valid UTF-8, non-ASCII bytes as '?'. dst holds AC_SHOWN_MAX * 2 bytes. */
#define AC_SHOWN_MAX 40
void ac_text_shown(char *dst, size_t cap, const char *s, size_t len);

/* ---------------------------------------------------------------- tokenizer */

typedef enum { AC_TRUNC_HEAD = 0, AC_TRUNC_TAIL = 1, AC_TRUNC_HEAD_TAIL = 2 } ac_truncation;
const char *ac_truncation_name(ac_truncation t);
int ac_truncation_parse(const char *s, ac_truncation *out);
extern const ac_names ac_truncation_names; /* the names, in the order listed */

/* Every setting the tokenizer uses; stored in config.json so an old model
 * keeps tokenizing as it was trained. */
typedef struct {
    int nfkc;           /* 1: Unicode NFKC normalisation */
    int casefold;       /* 1: Unicode case folding */
    int strip_html;     /* 1: drop tags like <br />, decode entities */
    int split_hyphens;  /* 0: "well-made" is one token; 1: "well", "-", "made" */
    int split_apostrophes; /* 0: "don't" is one token; 1: "don", "'", "t" */
    int emoji_names;    /* 1: an emoji reads as its English name ("thumbs up"); see tokenize.c */
    int squeeze_elongations; /* 1: an unknown word stretched for emphasis ("goooood") reads
                                as the known word it stretches ("good"); see ac_token_id */
    int mark_negation;  /* 1: after a negator ("not", "never", "didn't", ...) each word up to
                           the next punctuation mark reads as "not_" + the word
                           ("not good." -> "not", "not_good", "."); see tokenize.c */
    ac_truncation truncation;
    int head_tokens;    /* for head+tail: tokens kept from the head (rest from the tail); 0 = max_len/4 */
} ac_tokenizer_config;

void ac_tokenizer_config_defaults(ac_tokenizer_config *c);

typedef struct {
    const char *str; /* not NUL-terminated */
    uint32_t len;
} ac_token;

typedef struct ac_tokenizer ac_tokenizer; /* owns scratch buffers; one per thread */

int ac_tokenizer_create(ac_tokenizer **out, const ac_tokenizer_config *cfg, ac_err *err);
void ac_tokenizer_free(ac_tokenizer *t);
/* Splits text[0..len) into tokens. *tokens stays valid until the next call on
 * this tokenizer. Returns the number of tokens (>= 0), or -1 on allocation
 * failure. Invalid UTF-8 bytes become U+FFFD. */
int64_t ac_tokenize(ac_tokenizer *t, const char *text, size_t len, const ac_token **tokens);

/* --------------------------------------------------------------- vocabulary */

#define AC_PAD_ID 0
#define AC_UNK_ID 1
#define AC_CLS_ID 2 /* present only when with_cls */

/* Special tokens a vocabulary is built with (ac_vocab_build's `specials`). */
#define AC_VOCAB_WITH_CLS 1  /* <cls> at id 2: prepended to every text (cls pooling) */
#define AC_VOCAB_WITH_MASK 2 /* <mask> right after the other specials (masked-LM pretraining) */

/* vocab.txt starts <pad>, <unk>, then <cls> when present, then <mask> when
 * present (id 2 without <cls>, 3 with it), then the words. A vocabulary of
 * attnctl 0.1 (no <mask>) keeps its ids; the tokenizer never yields "<mask>"
 * or "<cls>" (it splits '<' and '>' off), so no text maps to them. */
/* A slot of the token table: the id in the low 26 bits, 6 bits of the
 * token's hash above them (most mismatches are settled without reading
 * the token); all ones when empty. Four bytes a slot: the table of a
 * 30,000-token vocabulary is 256 KB, half of what a cold start pays for. */
typedef uint32_t ac_vocab_slot;
/* Tokens a vocabulary holds at most: ids fit a slot's 26 bits (and stay
 * clear of the empty slot's all ones). */
#define AC_VOCAB_MAX_TOKENS ((1 << 26) - 1)

typedef struct {
    int32_t size;
    char **tokens;     /* [size], NUL-terminated, pointing into storage */
    char *storage;     /* the token strings, one allocation (vocab.txt's bytes when loaded) */
    int with_cls;
    int32_t mask_id;   /* id of <mask>, or -1 when the vocabulary has none */
    /* open-addressing hash table token -> id (see ac_vocab_slot) */
    ac_vocab_slot *slots;
    uint32_t n_slots;
} ac_vocab;

/* Builds from the texts of `data` restricted to rows idx[0..n) (all rows if idx is NULL):
 * specials first (<pad>, <unk>, then <cls> with AC_VOCAB_WITH_CLS, then
 * <mask> with AC_VOCAB_WITH_MASK; `specials` is a combination of those flags,
 * so 0/1 keep meaning "without/with <cls>"), then the most frequent tokens
 * with count >= min_count, ties by byte order, at most max_size entries in
 * total (specials included). */
int ac_vocab_build(ac_vocab *v, const ac_rawdata *data, const int64_t *idx, int64_t n,
                   const ac_tokenizer_config *tcfg, int32_t max_size, int64_t min_count,
                   int specials, ac_err *err);
/* Number of special tokens at the start (ids below it are never words). */
static inline int32_t ac_vocab_n_specials(const ac_vocab *v)
{
    return 2 + (v->with_cls ? 1 : 0) + (v->mask_id >= 0 ? 1 : 0);
}
/* vocab.txt: one token a line, id = line number - 1. */
int ac_vocab_load(ac_vocab *v, const char *path, ac_err *err);
int ac_vocab_write(const ac_vocab *v, FILE *f, ac_err *err);
int32_t ac_vocab_lookup(const ac_vocab *v, const char *s, size_t len); /* AC_UNK_ID if absent */
/* The id a token encodes to: its vocabulary id; with squeeze_elongations, a
 * word the vocabulary lacks that has runs of three or more identical letters
 * reads as the word with those runs cut to two letters if the vocabulary has
 * it, else cut to one ("goooood" -> "good", "sooo" -> "so"); else <unk>. */
int32_t ac_token_id(const ac_vocab *v, const ac_tokenizer_config *tcfg, const char *s, size_t len);
void ac_vocab_free(ac_vocab *v);

/* ------------------------------------------------------------------- corpus */

typedef struct {
    int64_t n;
    int32_t *ids;       /* all sequences, concatenated */
    int64_t *off;       /* [n + 1] */
    int32_t *labels;    /* [n] or NULL */
    int32_t *full_len;  /* [n] tokens before truncation (including <cls>) */
    int64_t n_tokens;   /* sum of kept lengths */
    int64_t n_unk;      /* kept tokens that mapped to <unk> */
    int64_t n_truncated;
} ac_corpus;

/* Tokenizes and encodes every row (optionally multithreaded, deterministic),
 * truncating to max_len as the tokenizer config says; prepends <cls> when the
 * vocabulary has it. A text with no tokens encodes as a single <unk>. */
int ac_corpus_encode(ac_corpus *c, const ac_rawdata *data, const ac_tokenizer_config *tcfg,
                     const ac_vocab *v, int max_len, ac_err *err);
/* Encode one text into ids[0..max_len); returns the kept length (>= 1) and
 * the length before truncation in *full_len. tokenizer is caller-owned scratch. */
int ac_encode_text(ac_tokenizer *t, const ac_tokenizer_config *tcfg, const ac_vocab *v,
                   const char *text, size_t len, int max_len, int32_t *ids, int *full_len);
void ac_corpus_free(ac_corpus *c);

/* --------------------------------------------------------- split & batching */

/* Stratified, seeded split of rows [0, n) by labels: about frac of each class to val. */
int ac_split_stratified(const int32_t *labels, int64_t n, double frac, uint64_t seed,
                        int64_t **train_idx, int64_t *n_train, int64_t **val_idx, int64_t *n_val,
                        ac_err *err);

typedef struct {
    int64_t n_batches;
    int64_t *order;       /* rows in batch order */
    int64_t *batch_start; /* [n_batches + 1] into order */
    /* With crops: the span of row order[i] that is used, [crop_start[i],
     * crop_start[i] + crop_len[i]) of its ids; NULL without crops. */
    int32_t *crop_start, *crop_len;
    int keep_first;       /* crops keep id 0 (<cls>) in front of the span */
    int64_t real_tokens, padded_tokens; /* for the padding fraction */
} ac_batch_plan;

/* Random contiguous spans of rows, so that short texts are inside the
 * training distribution (and a fixed set of spans measures them). Each row is
 * cropped with probability frac to a span whose length is drawn from
 * [min_len, max_len], uniform or log-uniform (a row no longer than the span
 * stays whole); the draw is a pure function of (key, row). keep_first keeps a
 * leading <cls>. */
typedef struct {
    double frac;
    int min_len, max_len;
    int log_uniform; /* lengths log-uniform: short spans as common as long ones */
    int keep_first;
    uint64_t key;
} ac_crop_spec;

/* Training plan: rows idx[0..n) shuffled with key, grouped into pools of
 * 50 batches sorted by length, cut into batches of batch_size, batch order
 * shuffled. shuffle == 0: file order, no sorting (evaluation). */
int ac_batch_plan_make(ac_batch_plan *p, const ac_corpus *c, const int64_t *idx, int64_t n,
                       int batch_size, int shuffle, uint64_t key, ac_err *err);
/* The same with crops (crop may be NULL: none); lengths for the pools are the
 * cropped lengths. */
int ac_batch_plan_make_cropped(ac_batch_plan *p, const ac_corpus *c, const int64_t *idx, int64_t n,
                               int batch_size, int shuffle, uint64_t key,
                               const ac_crop_spec *crop, ac_err *err);
void ac_batch_plan_free(ac_batch_plan *p);

typedef struct {
    int B, T;
    int32_t *ids;     /* [B * T], pads = AC_PAD_ID */
    int32_t *lengths; /* [B] */
    int32_t *labels;  /* [B] (0 when the corpus has none) */
    int64_t *rows;    /* [B] corpus rows */
} ac_batch;

/* Fills batch b of the plan into caller-allocated buffers (sized for
 * batch_size x max_len); T = longest sequence in the batch. */
void ac_batch_fill(ac_batch *out, const ac_corpus *c, const ac_batch_plan *p, int64_t b);
/* Rows first_row..first_row+n-1 of batch b (a micro-batch); T = its longest. */
void ac_batch_fill_rows(ac_batch *out, const ac_corpus *c, const ac_batch_plan *p, int64_t b,
                        int first_row, int n);
/* Tokens (real, not padding) of batch b. */
int64_t ac_batch_plan_tokens(const ac_batch_plan *p, const ac_corpus *c, int64_t b);
/* Rows of batch b. */
static inline int ac_batch_plan_rows(const ac_batch_plan *p, int64_t b)
{
    return (int)(p->batch_start[b + 1] - p->batch_start[b]);
}

#endif
