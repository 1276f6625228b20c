/* libFuzzer target: the tokenizer (ac_tokenize).
 *
 * Input: one control byte (bit 0 nfkc, 1 casefold, 2 strip_html,
 * 3 split_hyphens, 4 split_apostrophes, 5 emoji_names, 6 mark_negation),
 * then the text. Checks every token (non-empty, valid UTF-8, no white space /
 * NUL / line break inside, pointing into the tokenizer's buffers in order),
 * that the fast path and the whole-text reference normalisation give the
 * same tokens, and that negation marking only prefixes words with "not_". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/text.h"
#include "fuzz_common.h"

void ac_tokenizer_set_reference_mode(ac_tokenizer *t, int on); /* src/text/text_internal.h */

static void check_tokens(const ac_token *toks, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const ac_token *t = &toks[i];
        FUZZ_CHECK(t->len > 0);
        FUZZ_CHECK(fuzz_utf8_valid(t->str, t->len));
        for (uint32_t k = 0; k < t->len; k++) {
            unsigned char c = (unsigned char)t->str[k];
            /* vocab.txt holds one token a line: these must never be inside one */
            FUZZ_CHECK(c != '\0' && c != '\n' && c != '\r' && c != ' ' && c != '\t');
        }
    }
    /* The split's tokens point into one buffer in order, the words negation
     * marking rewrote ("not_" + word) into another, in order too. */
    for (int marked = 0; marked <= 1; marked++) {
        const char *end = NULL;
        for (int64_t i = 0; i < n; i++) {
            if ((toks[i].len > 4 && memcmp(toks[i].str, "not_", 4) == 0) != marked)
                continue;
            FUZZ_CHECK(end == NULL || end <= toks[i].str);
            end = toks[i].str + toks[i].len;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const unsigned ctl = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    cfg.nfkc = ctl & 1;
    cfg.casefold = (ctl >> 1) & 1;
    cfg.strip_html = (ctl >> 2) & 1;
    cfg.split_hyphens = (ctl >> 3) & 1;
    cfg.split_apostrophes = (ctl >> 4) & 1;
    cfg.emoji_names = (ctl >> 5) & 1;
    cfg.mark_negation = (ctl >> 6) & 1;
    ac_tokenizer_config unmarked_cfg = cfg;
    unmarked_cfg.mark_negation = 0;

    ac_err err = {{0}};
    ac_tokenizer *fast = NULL, *reference = NULL;
    FUZZ_CHECK(ac_tokenizer_create(&fast, &cfg, &err) == 0);
    FUZZ_CHECK(ac_tokenizer_create(&reference, &cfg, &err) == 0);
    ac_tokenizer_set_reference_mode(reference, 1);

    const ac_token *a, *b;
    int64_t na = ac_tokenize(fast, text, len, &a);
    int64_t nb = ac_tokenize(reference, text, len, &b);
    FUZZ_CHECK(na >= 0 && nb >= 0);
    FUZZ_CHECK(na <= (int64_t)(4 * len + 1));
    check_tokens(a, na);
    check_tokens(b, nb);
    FUZZ_CHECK(na == nb);
    for (int64_t i = 0; i < na; i++)
        FUZZ_CHECK(a[i].len == b[i].len && memcmp(a[i].str, b[i].str, a[i].len) == 0);

    /* Marking changes no token but by a "not_" prefix ('_' never occurs in
     * a word of the split). */
    ac_tokenizer *unmarked = NULL;
    FUZZ_CHECK(ac_tokenizer_create(&unmarked, &unmarked_cfg, &err) == 0);
    const ac_token *u;
    FUZZ_CHECK(ac_tokenize(unmarked, text, len, &u) == na);
    for (int64_t i = 0; i < na; i++) {
        size_t skip = a[i].len == u[i].len + 4 && memcmp(a[i].str, "not_", 4) == 0 ? 4 : 0;
        FUZZ_CHECK(cfg.mark_negation || skip == 0);
        FUZZ_CHECK(a[i].len == u[i].len + skip && memcmp(a[i].str + skip, u[i].str, u[i].len) == 0);
    }

    /* The same tokenizer again on the same text: no state leaks between calls. */
    int64_t again = ac_tokenize(fast, text, len, &b);
    FUZZ_CHECK(again == na);

    ac_tokenizer_free(fast);
    ac_tokenizer_free(reference);
    ac_tokenizer_free(unmarked);
    return 0;
}
