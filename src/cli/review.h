/* One review encoded as the model reads it, with the token string behind
 * every id (the original word for <unk>, "[CLS]" for <cls>), for the commands
 * that show tokens: inspect and eval --errors. */
#ifndef ATTNCTL_CLI_REVIEW_H
#define ATTNCTL_CLI_REVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/text.h"

typedef struct {
    int n;                  /* ids the model reads ([CLS] included) */
    int full_len;           /* tokens before truncation ([CLS] included) */
    int32_t *ids;           /* [max_len] */
    char **tokens;          /* [n] valid UTF-8 (display: no control or bidi characters) */
    unsigned char *unknown; /* [n] 1 when ids[i] is <unk> */
} cli_review;

/* Encodes text[0..len) with the model's tokenizer settings, vocabulary and
 * max_len (what ac_corpus_encode does with a row) and finds each id's token.
 * tok is caller-owned scratch. display != 0 replaces control and bidi
 * characters by U+FFFD. Returns 0, or -1 with err (an empty text, out of
 * memory); r is then partly filled and cli_review_free cleans it. */
int cli_review_encode(cli_review *r, ac_tokenizer *tok, const ac_tokenizer_config *tc,
                      const ac_vocab *vocab, int max_len, const char *text, size_t len,
                      int display, ac_err *err);
void cli_review_free(cli_review *r);

#endif
