/* Encoding one review for display: see review.h. */
#include "review.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

/* A copy of s[0..len) that is valid UTF-8: invalid bytes become U+FFFD, and
 * with no_controls also control and bidirectional-override characters (so a
 * token can neither break XML nor send escape sequences to a terminal). */
static char *clean_utf8(const char *s, size_t len, int no_controls)
{
    char *out = malloc(len * 3 + 4); /* each byte grows to at most 3 */
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        int bad = n <= 0;
        if (!bad && no_controls)
            bad = utf8proc_category(cp) == UTF8PROC_CATEGORY_CC || (cp >= 0x202A && cp <= 0x202E) ||
                  (cp >= 0x2066 && cp <= 0x2069);
        if (bad) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += n <= 0 ? 1 : (size_t)n;
        } else {
            memcpy(out + o, s + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        }
    }
    out[o] = '\0';
    return out;
}

/* Finds which tokens the encoded ids came from: the ids after [CLS] are the
 * first `head` tokens followed by the last `words - head` tokens (head = words
 * for head truncation, 0 for tail). Tries the configured split first, then
 * every other one, so the display stays right even if the encoder counts the
 * head share differently. Returns head, or -1 when no split reproduces the ids. */
static int align_tokens(const ac_vocab *vocab, const ac_tokenizer_config *tc, const ac_token *toks,
                        int64_t n_toks, const int32_t *ids, int words, int preferred_head)
{
    if (words > n_toks)
        return -1;
    for (int attempt = -1; attempt <= words; attempt++) {
        int head = attempt < 0 ? preferred_head : attempt;
        if (head < 0 || head > words || (attempt >= 0 && head == preferred_head))
            continue;
        int ok = 1;
        for (int i = 0; i < words && ok; i++) {
            int64_t t = i < head ? i : n_toks - words + i;
            ok = ac_token_id(vocab, tc, toks[t].str, toks[t].len) == ids[i];
        }
        if (ok)
            return head;
    }
    return -1;
}

static int preferred_head(const ac_tokenizer_config *tc, int words, int max_len)
{
    switch (tc->truncation) {
    case AC_TRUNC_TAIL:
        return 0;
    case AC_TRUNC_HEAD_TAIL: {
        int head = tc->head_tokens > 0 ? tc->head_tokens : max_len / 4;
        return head < words ? head : words;
    }
    case AC_TRUNC_HEAD:
    default:
        return words;
    }
}

void cli_review_free(cli_review *r)
{
    if (r->tokens)
        for (int i = 0; i < r->n; i++)
            free(r->tokens[i]);
    free(r->tokens);
    free(r->ids);
    free(r->unknown);
    memset(r, 0, sizeof *r);
}

int cli_review_encode(cli_review *r, ac_tokenizer *tok, const ac_tokenizer_config *tc,
                      const ac_vocab *vocab, int max_len, const char *text, size_t len,
                      int display, ac_err *err)
{
    memset(r, 0, sizeof *r);
    r->ids = calloc((size_t)max_len, sizeof *r->ids);
    if (!r->ids)
        return ac_err_set(err, "out of memory");
    int full_len = 0;
    int n = ac_encode_text(tok, tc, vocab, text, len, max_len, r->ids, &full_len);
    const ac_token *toks = NULL;
    int64_t n_toks = n > 0 ? ac_tokenize(tok, text, len, &toks) : -1;
    if (n <= 0 || n_toks < 0)
        return ac_err_set(err, "cannot encode the text (out of memory?)");
    if (n_toks == 0)
        return ac_err_set(err, "the text is empty (no tokens after tokenization)");
    r->tokens = calloc((size_t)n, sizeof *r->tokens);
    r->unknown = calloc((size_t)n, 1);
    if (!r->tokens || !r->unknown)
        return ac_err_set(err, "out of memory");
    r->n = n;
    r->full_len = full_len;
    int cls = vocab->with_cls && r->ids[0] == AC_CLS_ID;
    int words = n - cls;
    int head = align_tokens(vocab, tc, toks, n_toks, r->ids + cls, words,
                            preferred_head(tc, words, max_len));
    for (int i = 0; i < n; i++) {
        int32_t id = r->ids[i];
        const char *s;
        size_t slen;
        if (cls && i == 0) {
            s = "[CLS]";
            slen = 5;
        } else if (head >= 0) {
            int w = i - cls;
            int64_t t = w < head ? w : n_toks - words + w;
            s = toks[t].str;
            slen = toks[t].len;
        } else { /* cannot map back: show the vocabulary entry */
            s = id >= 0 && id < vocab->size ? vocab->tokens[id] : "<?>";
            slen = strlen(s);
        }
        r->unknown[i] = id == AC_UNK_ID;
        r->tokens[i] = clean_utf8(s, slen, display);
        if (!r->tokens[i])
            return ac_err_set(err, "out of memory");
    }
    return 0;
}
