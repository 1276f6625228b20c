/* The text pipeline after reading: tokenizer, vocabulary, encoding, split and
 * batching. Raw data is built by hand here (the CSV reader has its own tests). */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/text/emoji_names.h"
#include "../src/text/text_internal.h"
#include "attnctl/rng.h"
#include "attnctl/strbuf.h"
#include "attnctl/text.h"

/* ------------------------------------------------------------------ helpers */

/* Raw data from C strings (labels may be NULL). */
static void raw_make(ac_rawdata *d, const char *const *texts, const int32_t *labels, int64_t n)
{
    memset(d, 0, sizeof *d);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += strlen(texts[i]) + 1;
    d->n_rows = n;
    d->text_buf = malloc(total ? total : 1);
    d->text_off = malloc((size_t)(n + 1) * sizeof *d->text_off);
    d->line = malloc((size_t)(n ? n : 1) * sizeof *d->line);
    ck_assert(d->text_buf && d->text_off && d->line);
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        d->text_off[i] = (int64_t)o;
        size_t len = strlen(texts[i]);
        memcpy(d->text_buf + o, texts[i], len + 1);
        o += len + 1;
        d->line[i] = i + 2;
    }
    d->text_off[n] = (int64_t)o;
    if (labels) {
        d->labels = malloc((size_t)(n ? n : 1) * sizeof *d->labels);
        ck_assert_ptr_nonnull(d->labels);
        memcpy(d->labels, labels, (size_t)n * sizeof *d->labels);
        d->n_classes = 2;
    }
}

static void raw_free(ac_rawdata *d)
{
    free(d->text_buf);
    free(d->text_off);
    free(d->labels);
    free(d->line);
    memset(d, 0, sizeof *d);
}

/* Tokens of text joined by single spaces (tokens never hold ASCII white space). */
static char *tokens_joined(ac_tokenizer *t, const char *text, size_t len)
{
    const ac_token *toks;
    int64_t n = ac_tokenize(t, text, len, &toks);
    ck_assert_int_ge(n, 0);
    size_t total = 1;
    for (int64_t i = 0; i < n; i++)
        total += toks[i].len + 1;
    char *out = malloc(total), *p = out;
    ck_assert_ptr_nonnull(out);
    for (int64_t i = 0; i < n; i++) {
        ck_assert_uint_gt(toks[i].len, 0);
        if (i)
            *p++ = ' ';
        memcpy(p, toks[i].str, toks[i].len);
        p += toks[i].len;
    }
    *p = '\0';
    return out;
}

static void expect_tokens_cfg(const ac_tokenizer_config *cfg, const char *text, const char *want)
{
    ac_tokenizer *t;
    ac_err err = {{0}};
    ck_assert_msg(ac_tokenizer_create(&t, cfg, &err) == 0, "%s", err.msg);
    for (int ref = 0; ref <= 1; ref++) {
        ac_tokenizer_set_reference_mode(t, ref);
        char *got = tokens_joined(t, text, strlen(text));
        ck_assert_msg(strcmp(got, want) == 0, "%s mode: \"%s\" -> \"%s\", want \"%s\"",
                      ref ? "reference" : "fast", text, got, want);
        free(got);
    }
    ac_tokenizer_free(t);
}

/* The split alone: the defaults without negation marking (test_tok_negation). */
static void expect_tokens(const char *text, const char *want)
{
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    cfg.mark_negation = 0;
    expect_tokens_cfg(&cfg, text, want);
}

/* Writes content to a fresh temporary file; the caller unlinks path. */
static void write_temp(char *path, size_t cap, const char *content, size_t len)
{
    snprintf(path, cap, "/tmp/attnctl-test-text-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, content, len), (ssize_t)len);
    ck_assert_int_eq(close(fd), 0);
}

/* Loads a vocabulary given as file content. */
static void vocab_from_text(ac_vocab *v, const char *content)
{
    char path[64];
    write_temp(path, sizeof path, content, strlen(content));
    ac_err err = {{0}};
    int rc = ac_vocab_load(v, path, &err);
    unlink(path);
    ck_assert_msg(rc == 0, "%s", err.msg);
}

/* ---------------------------------------------------------------- tokenizer */

/* An enum's one list of names (attnctl/names.h): each name read back to its
 * value, an older spelling read but never written or listed, the list spelt
 * for errors and for JSON, and a list cut to its buffer still a string. */
START_TEST(test_enum_names)
{
    const ac_names *t = &ac_truncation_names;
    for (int v = AC_TRUNC_HEAD; v <= AC_TRUNC_HEAD_TAIL; v++) {
        int back = -1;
        ck_assert_int_eq(ac_names_parse(t, ac_names_name(t, v), &back), 0);
        ck_assert_int_eq(back, v);
        ck_assert(ac_names_has(t, v));
    }
    ac_truncation tr;
    ck_assert_int_eq(ac_truncation_parse("head_tail", &tr), 0);
    ck_assert_int_eq(tr, AC_TRUNC_HEAD_TAIL);
    ck_assert_str_eq(ac_truncation_name(AC_TRUNC_HEAD_TAIL), "head+tail");
    ck_assert_int_eq(ac_truncation_parse("HEAD", &tr), -1);
    ck_assert_int_eq(ac_truncation_parse(NULL, &tr), -1);
    ck_assert_str_eq(ac_truncation_name((ac_truncation)7), "unknown");
    ck_assert(!ac_names_has(t, 7));
    char list[64];
    ck_assert_str_eq(ac_names_list(t, 0, list, sizeof list), "head, tail or head+tail");
    ck_assert_str_eq(ac_names_list(t, 1, list, sizeof list), "\"head\", \"tail\", \"head+tail\"");
    ck_assert_str_eq(ac_names_list(&ac_text_format_names, 0, list, sizeof list),
                     "auto, csv or lines");
    char small[8];
    ck_assert_str_eq(ac_names_list(t, 0, small, sizeof small), "head, t");
}
END_TEST

START_TEST(test_tok_defaults)
{
    ac_tokenizer_config c;
    memset(&c, 0x55, sizeof c);
    ac_tokenizer_config_defaults(&c);
    ck_assert_int_eq(c.nfkc, 1);
    ck_assert_int_eq(c.casefold, 1);
    ck_assert_int_eq(c.strip_html, 1);
    ck_assert_int_eq(c.split_hyphens, 0);
    ck_assert_int_eq(c.split_apostrophes, 0);
    ck_assert_int_eq(c.emoji_names, 1);
    ck_assert_int_eq(c.squeeze_elongations, 1);
    ck_assert_int_eq(c.mark_negation, 1);
    ck_assert_int_eq(c.truncation, AC_TRUNC_HEAD_TAIL);
    ck_assert_int_eq(c.head_tokens, 0);
}
END_TEST

START_TEST(test_tok_words_and_punctuation)
{
    expect_tokens("This movie is GREAT!!! Really?", "this movie is great ! ! ! really ?");
    expect_tokens("10/10, 3.5 stars ($5)", "10 / 10 , 3 . 5 stars ( $ 5 )");
    expect_tokens("Worst...movie...ever?!", "worst . . . movie . . . ever ? !");
    expect_tokens("", "");
    expect_tokens(" \t\r\n ", "");
    expect_tokens("a\tb\nc\r\nd\x0b" "e\x0c" "f", "a b c d e f");
    expect_tokens("snake_case @user #tag", "snake _ case @ user # tag");
    expect_tokens("ABCDEFGHIJKLMNOPQRSTUVWXYZ@[`{", "abcdefghijklmnopqrstuvwxyz @ [ ` {");
}
END_TEST

START_TEST(test_tok_html_tags)
{
    expect_tokens("Great film.<br /><br />Loved it", "great film . loved it");
    expect_tokens("one<br/>two<BR>three<p>four</p>five", "one two three four five");
    /* inline formatting vanishes without separating */
    expect_tokens("<i>Alien</i>'s best <b>ever</b>", "alien's best ever");
    expect_tokens("<div class=\"x\">hi</div><!-- note -->there", "hi there");
    /* not tags: '<' not followed by a letter, '/' or '!', or never closed */
    expect_tokens("I <3 it", "i < 3 it");
    expect_tokens("a < b > c", "a < b > c");
    expect_tokens("x <y", "x < y");
    /* off: the tag is text */
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    c.strip_html = 0;
    expect_tokens_cfg(&c, "a<br />b &amp;", "a < br / > b & amp ;");
}
END_TEST

START_TEST(test_tok_html_entities)
{
    expect_tokens("Tom &amp; Jerry", "tom & jerry");
    expect_tokens("don&#39;t", "don't");
    expect_tokens("Dvo&#345;\xC3\xA1k", "dvo\xC5\x99\xC3\xA1k");
    expect_tokens("Dvo&#x159;\xC3\xA1k Dvo&#X159;\xC3\xA1k", "dvo\xC5\x99\xC3\xA1k dvo\xC5\x99\xC3\xA1k");
    expect_tokens("&quot;Hi&quot; &lt;3 &gt;", "\" hi \" < 3 >");
    expect_tokens("a&nbsp;b", "a b");
    expect_tokens("wait&hellip;", "wait . . .");
    expect_tokens("it&rsquo;s", "it's");
    /* a decoded '<' does not start a tag */
    expect_tokens("&lt;br&gt;", "< br >");
    /* unknown, unterminated or out-of-range entities */
    expect_tokens("&foo; &amp", "& foo ; & amp");
    expect_tokens("&#0; &#xD800; &#x110000;", "\xEF\xBF\xBD \xEF\xBF\xBD \xEF\xBF\xBD");
    expect_tokens("&#; &#x; &#12345678;", "& # ; & # x ; & # 12345678 ;");
}
END_TEST

START_TEST(test_tok_nfkc)
{
    expect_tokens("\xEF\xAC\x81ne \xEF\xAC\x80" "ect", "fine ffect"); /* ﬁ, ﬀ ligatures */
    expect_tokens("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3\xEF\xBC\x91\xEF\xBC\x92", "abc12"); /* fullwidth */
    expect_tokens("\xE2\x91\xA0 x\xC2\xB2", "1 x2");                                /* ①, x² */
    expect_tokens("caf" "e\xCC\x81 caf\xC3\xA9", "caf\xC3\xA9 caf\xC3\xA9");      /* NFC composes */
    expect_tokens("a\xC2\xA0" "b\xE3\x80\x80" "c", "a b c");                        /* NBSP, ideographic space */
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    c.nfkc = 0;
    c.casefold = 0;
    expect_tokens_cfg(&c, "\xEF\xAC\x81ne Caf" "e\xCC\x81", "\xEF\xAC\x81ne Caf\xC3\xA9");
}
END_TEST

START_TEST(test_tok_casefold)
{
    expect_tokens("STRASSE Stra\xC3\x9F" "e", "strasse strasse");
    expect_tokens("\xCE\xA3\xCE\x8A\xCE\xA3\xCE\xA5\xCE\xA6\xCE\x9F\xCE\xA3",
                  "\xCF\x83\xCE\xAF\xCF\x83\xCF\x85\xCF\x86\xCE\xBF\xCF\x83"); /* ΣΊΣΥΦΟΣ -> σίσυφοσ */
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    c.casefold = 0;
    expect_tokens_cfg(&c, "STRASSE Stra\xC3\x9F" "e", "STRASSE Stra\xC3\x9F" "e");
}
END_TEST

START_TEST(test_tok_apostrophes_hyphens)
{
    expect_tokens("don't well-made l'amour x-ray's", "don't well-made l'amour x-ray's");
    expect_tokens("rock 'n' roll", "rock ' n ' roll");
    expect_tokens("'quoted' end- -start it's--great", "' quoted ' end - - start it's - - great");
    expect_tokens("don\xE2\x80\x99t", "don't"); /* U+2019 is the typographic apostrophe */
    expect_tokens("the '90s", "the ' 90s");
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    c.mark_negation = 0;
    c.split_apostrophes = 1;
    expect_tokens_cfg(&c, "don't well-made don\xE2\x80\x99t", "don ' t well-made don ' t");
    c.split_apostrophes = 0;
    c.split_hyphens = 1;
    expect_tokens_cfg(&c, "don't well-made", "don't well - made");
}
END_TEST

START_TEST(test_tok_invalid_utf8)
{
    const char *fffd = "\xEF\xBF\xBD";
    char want[128];
    /* a cut sequence is one replacement */
    snprintf(want, sizeof want, "caf %s", fffd);
    expect_tokens("caf\xC3", want);
    snprintf(want, sizeof want, "a %s b", fffd);
    expect_tokens("a\xE2\x82" "b", want);
    /* each maximal invalid subpart is one replacement */
    snprintf(want, sizeof want, "%s %s", fffd, fffd);
    expect_tokens("\xFF\xFE", want);
    snprintf(want, sizeof want, "x %s %s y", fffd, fffd);
    expect_tokens("x\xC0\xAFy", want); /* overlong '/' */
    snprintf(want, sizeof want, "%s %s %s", fffd, fffd, fffd);
    expect_tokens("\xED\xA0\x80", want); /* surrogate */
    snprintf(want, sizeof want, "%s %s %s %s", fffd, fffd, fffd, fffd);
    expect_tokens("\xF4\x90\x80\x80", want); /* above U+10FFFF */

    char out[64];
    int64_t replaced = -1;
    size_t n = ac_utf8_sanitize(out, "a\xC0\xAF" "b\xE2\x82", 6, &replaced);
    ck_assert_int_eq(replaced, 3);
    ck_assert_uint_eq(n, 11);
    ck_assert(memcmp(out, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD", 11) == 0);
    ck_assert_uint_eq(ac_utf8_valid_prefix("ab\xC3\xA9" "c\xFF", 6), 5);
    ck_assert_uint_eq(ac_utf8_valid_prefix("\xF0\x9F\x98\x80", 4), 4);
    ck_assert_uint_eq(ac_utf8_valid_prefix("\xF0\x9F\x98", 3), 0);
}
END_TEST

START_TEST(test_tok_unicode_classes)
{
    /* letters of any script form words; symbols and emoji stand alone */
    expect_tokens("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
                  "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4");
    ac_tokenizer_config plain;
    ac_tokenizer_config_defaults(&plain);
    plain.emoji_names = 0;
    expect_tokens_cfg(&plain, "great\xF0\x9F\x98\x80\xF0\x9F\x98\x80",
                      "great \xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
    /* default-ignorable code points vanish: soft hyphen, zero-width space/joiner */
    expect_tokens("soft\xC2\xADhyphen zero\xE2\x80\x8Bwidth", "softhyphen zerowidth");
    /* Unicode line and paragraph separators separate */
    expect_tokens("a\xE2\x80\xA8" "b\xE2\x80\xA9" "c", "a b c");
}
END_TEST

START_TEST(test_tok_emoji_names)
{
    /* an emoji reads as its CLDR name; a skin tone and the emoji variation
     * selector (U+FE0F) vanish */
    expect_tokens("great\xF0\x9F\x98\x80\xF0\x9F\x98\x80", "great grinning face grinning face");
    expect_tokens("Broke on day one \xF0\x9F\x91\x8E\xF0\x9F\x8F\xBD!",
                  "broke on day one thumbs down !");
    expect_tokens("\xE2\x9D\xA4\xEF\xB8\x8F\xE2\x98\x95", "red heart hot beverage");
    /* the table's first and last entries, accents dropped from a name, a
     * name's apostrophe kept */
    expect_tokens("\xE2\x86\x94", "left right arrow");
    expect_tokens("\xF0\x9F\xAB\xB6", "heart hands");
    expect_tokens("\xF0\x9F\xAA\x85", "pinata");
    expect_tokens("\xE2\x9B\x91", "rescue worker's helmet");
    /* not emoji: currency, (c), digits, NFKC's compatibility symbols */
    expect_tokens("\xE2\x82\xAC" "5 \xC2\xA9 #1 \xE2\x84\xA2", "\xE2\x82\xAC 5 \xC2\xA9 # 1 tm");
    /* off (models trained before emoji names): each emoji is a token of its own */
    ac_tokenizer_config plain;
    ac_tokenizer_config_defaults(&plain);
    plain.emoji_names = 0;
    expect_tokens_cfg(&plain, "one \xF0\x9F\x91\x8E\xF0\x9F\x8F\xBD",
                      "one \xF0\x9F\x91\x8E \xF0\x9F\x8F\xBD");
}
END_TEST

/* Every entry of the table is found (the lookup is a binary search: the
 * table must be sorted) and reads as its name, word for word. */
START_TEST(test_tok_emoji_table_complete)
{
    ck_assert_int_gt(EMOJI_NAME_COUNT, 1000);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    cfg.mark_negation = 0; /* "hourglass not done" would read "not_done" */
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, NULL), 0);
    for (int i = 0; i < EMOJI_NAME_COUNT; i++) {
        if (i > 0)
            ck_assert_uint_gt(EMOJI_NAMES[i].cp, EMOJI_NAMES[i - 1].cp);
        uint32_t cp = EMOJI_NAMES[i].cp;
        char utf8[5] = {(char)(0xF0 | (cp >> 18)), (char)(0x80 | ((cp >> 12) & 0x3F)),
                        (char)(0x80 | ((cp >> 6) & 0x3F)), (char)(0x80 | (cp & 0x3F)), 0};
        if (cp < 0x10000) { /* three bytes */
            utf8[0] = (char)(0xE0 | (cp >> 12));
            utf8[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            utf8[2] = (char)(0x80 | (cp & 0x3F));
            utf8[3] = 0;
        }
        for (int ref = 0; ref <= 1; ref++) {
            ac_tokenizer_set_reference_mode(t, ref);
            char *got = tokens_joined(t, utf8, strlen(utf8));
            ck_assert_msg(strcmp(got, EMOJI_NAMES[i].name) == 0, "U+%04X: \"%s\", want \"%s\"",
                          (unsigned)cp, got, EMOJI_NAMES[i].name);
            free(got);
        }
    }
    ac_tokenizer_free(t);
}
END_TEST

START_TEST(test_tok_bad_config)
{
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    c.truncation = (ac_truncation)7;
    ac_tokenizer *t = (ac_tokenizer *)1;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_tokenizer_create(&t, &c, &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncation"));
    ac_tokenizer_config_defaults(&c);
    c.head_tokens = -1;
    ck_assert_int_eq(ac_tokenizer_create(&t, &c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "head_tokens"));
}
END_TEST

/* Pieces that random texts are made of: everything the normaliser treats
 * specially, plus HTML, white space and broken UTF-8. */
static const char *const PIECES[] = {
    "hello", "WORLD", "Movie", "QUIZ", "Zebra", "az@AZ[`{", " ", " ", " ", "\t", "\n", "\r\n", "don't", "well-made", "'", "-", "!",
    "?", ".", "caf\xC3\xA9", "cafe\xCC\x81", "\xCC\x81", "\xCC\xA3", "\xEF\xAC\x81", "\xEF\xBC\xA1\xEF\xBC\xA2",
    "Stra\xC3\x9F\x65", "STRASSE", "\xC4\xB0stanbul", "\xCE\xA3\xCE\x8A\xCE\xA3", "\xCF\x82",
    "\xED\x95\x9C\xEA\xB5\xAD", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xE6\x97\xA5\xE6\x9C\xAC",
    "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\xE2\x9D\xA4\xEF\xB8\x8F", "\xE2\x9B\x91",
    "\xF0\x9F\xAA\x85", "\xE2\x80\xBC", "\xE2\x84\xA2", "\xE2\x80\x8D", "\xC2\xAD", "\xC2\xA0",
    "\xE3\x80\x80", "\xE2\x80\x99", "\xE2\x80\xA8", "\xC2\x85", "\xEF\xBB\xBF", "<br />", "<i>", "</i>",
    "<p>", "<!-- x -->", "<", ">", "&amp;", "&#39;", "&#345;", "&#x159;", "&nbsp;", "&foo;", "&#0;", "&",
    "&#x110000;", "\xFF", "\xC3", "\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF", "\xE2\x91\xA0",
    "\xC2\xB2", "\xC2\xBD", "\xC7\x85", "\xE1\xBA\x9E", "\xE2\x84\xA6", "\xE2\x84\xAB", "A\xCC\x8A",
    "a\xCC\x88\xCC\xA3", "\xE0\xB5\x8C", "\x01", "\x7f", "x", "42", "_", "\"", "(", ")",
};

/* A random text: mostly pieces, sometimes random bytes. */
static size_t random_text(char *buf, size_t cap, uint64_t key)
{
    size_t n = 0;
    uint64_t draw = 0;
    int n_parts = 1 + (int)ac_rng_below(key, draw++, 24);
    for (int p = 0; p < n_parts; p++) {
        if (ac_rng_below(key, draw++, 5) == 0) {
            int nb = 1 + (int)ac_rng_below(key, draw++, 6);
            for (int b = 0; b < nb && n + 1 < cap; b++) {
                char c = (char)(1 + ac_rng_below(key, draw++, 255)); /* no NUL: texts are C strings */
                buf[n++] = c;
            }
        } else {
            const char *s = PIECES[ac_rng_below(key, draw++, sizeof PIECES / sizeof PIECES[0])];
            size_t len = strlen(s);
            if (n + len + 1 >= cap)
                break;
            memcpy(buf + n, s, len);
            n += len;
        }
    }
    buf[n] = '\0';
    return n;
}

START_TEST(test_tok_reference_mode_matches)
{
    /* The fast path normalises per white-space stretch and skips utf8proc for
     * ASCII; the reference normalises the whole text in one utf8proc call.
     * They must agree token for token, under every setting. */
    for (int setting = 0; setting < 16; setting++) {
        ac_tokenizer_config cfg;
        ac_tokenizer_config_defaults(&cfg);
        cfg.emoji_names = !(setting & 8);
        cfg.nfkc = !(setting & 1);
        cfg.casefold = !(setting & 2);
        cfg.split_apostrophes = (setting & 4) != 0;
        cfg.split_hyphens = (setting & 4) != 0;
        cfg.strip_html = (setting & 7) != 7;
        ac_tokenizer *fast, *ref;
        ck_assert_int_eq(ac_tokenizer_create(&fast, &cfg, NULL), 0);
        ck_assert_int_eq(ac_tokenizer_create(&ref, &cfg, NULL), 0);
        ac_tokenizer_set_reference_mode(ref, 1);
        for (int i = 0; i < 300; i++) {
            char text[512];
            size_t len = random_text(text, sizeof text, ac_rng_key(1234 + (uint64_t)setting, (uint64_t)i));
            char *a = tokens_joined(fast, text, len);
            char *b = tokens_joined(ref, text, len);
            ck_assert_msg(strcmp(a, b) == 0, "setting %d text %d: fast \"%s\" vs reference \"%s\"",
                          setting, i, a, b);
            /* every token is valid UTF-8 without ASCII white space */
            ck_assert_uint_eq(ac_utf8_valid_prefix(a, strlen(a)), strlen(a));
            ck_assert_ptr_null(strpbrk(a, "\t\n\r\v\f"));
            free(a);
            free(b);
        }
        ac_tokenizer_free(fast);
        ac_tokenizer_free(ref);
    }
}
END_TEST

/* After a negator, each word up to the next punctuation mark reads as
 * "not_" + the word. */
START_TEST(test_tok_negation)
{
    ac_tokenizer_config c;
    ac_tokenizer_config_defaults(&c);
    expect_tokens_cfg(&c, "Not good.", "not not_good .");
    expect_tokens_cfg(&c, "I would not recommend it, but the cast is great",
                      "i would not not_recommend not_it , but the cast is great");
    expect_tokens_cfg(&c, "Didn't like it; loved the end", "didn't not_like not_it ; loved the end");
    expect_tokens_cfg(&c, "Didn\xE2\x80\x99t care", "didn't not_care");
    expect_tokens_cfg(&c, "NOTHING works! Never again? no, no way",
                      "nothing not_works ! never not_again ? no , no not_way");
    expect_tokens_cfg(&c, "not not bad", "not not_not not_bad"); /* the reach goes on */
    expect_tokens_cfg(&c, "can't (ever) stop: never \"fun\" \xE2\x80\x9Cnot\xE2\x80\x9D done",
                      "can't ( ever ) stop : never \" fun \" \xE2\x80\x9C not \xE2\x80\x9D done");
    expect_tokens_cfg(&c, "cannot work without sound nor light", /* every negator counts */
                      "cannot not_work not_without not_sound not_nor not_light");
    /* only whole words: knot, nothingness, note, cant, nt */
    expect_tokens_cfg(&c, "knot nothingness note cant nt good", "knot nothingness note cant nt good");
    expect_tokens_cfg(&c, "not 10/10 - sadly", "not not_10 / not_10 - not_sadly");
    expect_tokens_cfg(&c, "not \xF0\x9F\x91\x8D", "not not_thumbs not_up"); /* emoji names */
    expect_tokens_cfg(&c, "not <br /> good", "not not_good"); /* a tag is white space */
    c.split_apostrophes = 1;
    expect_tokens_cfg(&c, "don't like, won't", "don ' t not_like , won ' t");
    c.split_apostrophes = 0;
    c.casefold = 0;
    expect_tokens_cfg(&c, "NOT Good. No", "NOT not_Good . No");
    c.casefold = 1;
    c.mark_negation = 0;
    expect_tokens_cfg(&c, "not good", "not good");

    /* The rewritten words live in a buffer of the tokenizer's own: a long
     * text grows it, the next text reuses it. */
    c.mark_negation = 1;
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &c, NULL), 0);
    size_t n = 0, cap = 120000;
    char *big = malloc(cap);
    ck_assert_ptr_nonnull(big);
    while (n + 12 < cap) {
        memcpy(big + n, "never good. ", 12);
        n += 12;
    }
    const ac_token *toks;
    ck_assert_int_eq(ac_tokenize(t, big, n, &toks), (int64_t)(n / 12) * 3);
    for (int64_t i = 1; i < (int64_t)(n / 12) * 3; i += 3)
        ck_assert(toks[i].len == 8 && memcmp(toks[i].str, "not_good", 8) == 0);
    ck_assert_int_eq(ac_tokenize(t, "no way", 6, &toks), 2);
    ck_assert(toks[1].len == 7 && memcmp(toks[1].str, "not_way", 7) == 0);
    free(big);
    ac_tokenizer_free(t);
}
END_TEST

START_TEST(test_tok_long_text_reuse)
{
    /* one tokenizer over texts of growing and shrinking size (buffers reused) */
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, NULL), 0);
    size_t cap = 200000;
    char *big = malloc(cap);
    ck_assert_ptr_nonnull(big);
    size_t n = 0;
    while (n + 16 < cap) {
        memcpy(big + n, "Caf\xC3\xA9 ok! ", 11);
        n += 11;
    }
    const ac_token *toks;
    ck_assert_int_eq(ac_tokenize(t, big, n, &toks), (int64_t)(n / 11) * 3);
    ck_assert_int_eq(toks[0].len, 5);
    ck_assert(memcmp(toks[0].str, "caf\xC3\xA9", 5) == 0);
    ck_assert_int_eq(ac_tokenize(t, "x y", 3, &toks), 2);
    ck_assert(toks[1].len == 1 && toks[1].str[0] == 'y');
    free(big);
    ac_tokenizer_free(t);
}
END_TEST

/* --------------------------------------------------------------- vocabulary */

static void vocab_expect(const ac_vocab *v, const char *const *want, int n)
{
    ck_assert_int_eq(v->size, n);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(v->tokens[i], want[i]);
        ck_assert_int_eq(ac_vocab_lookup(v, want[i], strlen(want[i])), i);
    }
}

/* A word stretched for emphasis reads as the word it stretches when the
 * vocabulary lacks it: runs of three or more letters cut to two, else to one. */
START_TEST(test_token_id_elongations)
{
    const char *texts[] = {"good so cool really love si buen\xC3\xADsimo 10 sooo god"};
    ac_rawdata d;
    raw_make(&d, texts, NULL, 1);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ck_assert_int_eq(cfg.squeeze_elongations, 1);
    ac_vocab v;
    ac_err err = {{0}};
    ck_assert_msg(ac_vocab_build(&v, &d, NULL, 1, &cfg, 100, 1, 0, &err) == 0, "%s", err.msg);
    struct {
        const char *token, *reads_as; /* reads_as NULL: <unk> */
    } cases[] = {
        {"goooood", "good"},           /* cut to two */
        {"gooood", "good"},
        {"coooooool", "cool"},
        {"reallllly", "really"},       /* "ll" is kept, the run of four is cut to two */
        {"sooo", "sooo"},              /* a stretched form the vocabulary has is itself */
        {"soooooo", "so"},             /* ... but others are not cut to it */
        {"loooooveeee", "love"},       /* cut to one: "loovee" is not a word */
        {"siiiii", "si"},
        {"buen\xC3\xADsiiiimo", "buen\xC3\xADsimo"}, /* letters beyond ASCII */
        {"good", "good"},
        {"goood", "good"},
        {"goo", NULL},                 /* no run of three: nothing to cut */
        {"1000", NULL},                /* digits are not stretched letters: never "10" */
        {"hmmmm", NULL},               /* neither "hmm" nor "hm" is known */
        {"gggoooooddd", "god"},        /* every run is cut: "ggooddd" -> "god" */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t want = cases[i].reads_as
                           ? ac_vocab_lookup(&v, cases[i].reads_as, strlen(cases[i].reads_as))
                           : AC_UNK_ID;
        if (cases[i].reads_as)
            ck_assert_msg(want != AC_UNK_ID, "%s", cases[i].reads_as);
        ck_assert_msg(ac_token_id(&v, &cfg, cases[i].token, strlen(cases[i].token)) == want,
                      "%s", cases[i].token);
    }
    /* Off (models trained before the setting): a stretched word is <unk>. */
    cfg.squeeze_elongations = 0;
    ck_assert_int_eq(ac_token_id(&v, &cfg, "goooood", 7), AC_UNK_ID);
    ck_assert_int_eq(ac_token_id(&v, &cfg, "good", 4), ac_vocab_lookup(&v, "good", 4));
    cfg.squeeze_elongations = 1;
    /* Tokens up to 256 bytes are looked at, longer ones not (no copy of a
     * huge token): "g", 254 "o", "d" is "good"; one "o" more is <unk>. */
    char big[257];
    big[0] = 'g';
    memset(big + 1, 'o', 255);
    big[255] = 'd';
    ck_assert_int_eq(ac_token_id(&v, &cfg, big, 256), ac_vocab_lookup(&v, "good", 4));
    big[255] = 'o';
    big[256] = 'd';
    ck_assert_int_eq(ac_token_id(&v, &cfg, big, 257), AC_UNK_ID);
    /* Encoding goes through it: "SOOOOO Goooood!!" is the ids of "so good!!". */
    ac_tokenizer *t = NULL;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, &err), 0);
    int32_t a[8], b[8];
    int full_a, full_b;
    ck_assert_int_eq(ac_encode_text(t, &cfg, &v, "SOOOOO Goooood!!", 16, 8, a, &full_a), 4);
    ck_assert_int_eq(ac_encode_text(t, &cfg, &v, "so good!!", 9, 8, b, &full_b), 4);
    ck_assert_int_eq(a[0], b[0]);
    ck_assert_int_eq(a[1], b[1]);
    ck_assert_int_eq(a[2], b[2]);
    ac_tokenizer_free(t);
    ac_vocab_free(&v);
    raw_free(&d);
}
END_TEST

START_TEST(test_vocab_order_and_ties)
{
    /* counts: a 4, b 2, c 2, ab 2, é 2, z 1, d 1 */
    const char *texts[] = {"b a c a", "A ab c \xC3\xA9", "a b ab \xC3\xA9 z d"};
    ac_rawdata d;
    raw_make(&d, texts, NULL, 3);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_vocab v;
    ac_err err = {{0}};
    ck_assert_msg(ac_vocab_build(&v, &d, NULL, 3, &cfg, 100, 1, 0, &err) == 0, "%s", err.msg);
    /* ties by bytes: "a" < "ab" (prefix first) < "b" < "c" < "é" (0xC3 > 'z') */
    const char *want[] = {"<pad>", "<unk>", "a", "ab", "b", "c", "\xC3\xA9", "d", "z"};
    vocab_expect(&v, want, 9);
    ck_assert_int_eq(v.with_cls, 0);
    ck_assert_int_eq(ac_vocab_lookup(&v, "missing", 7), AC_UNK_ID);
    ck_assert_int_eq(ac_vocab_lookup(&v, "", 0), AC_UNK_ID);
    ck_assert_int_eq(ac_vocab_lookup(&v, "a\0", 2), AC_UNK_ID);
    ck_assert_int_eq(ac_vocab_lookup(&v, "abc", 2), 3); /* only len bytes count */
    ac_vocab_free(&v);

    /* min_count, max_size, <cls> */
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, 100, 2, 1, &err), 0);
    const char *want_min[] = {"<pad>", "<unk>", "<cls>", "a", "ab", "b", "c", "\xC3\xA9"};
    vocab_expect(&v, want_min, 8);
    ck_assert_int_eq(v.with_cls, 1);
    ac_vocab_free(&v);
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, 5, 1, 1, &err), 0);
    const char *want_max[] = {"<pad>", "<unk>", "<cls>", "a", "ab"};
    vocab_expect(&v, want_max, 5);
    ac_vocab_free(&v);
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, 2, 1, 0, &err), 0);
    vocab_expect(&v, want, 2);
    ac_vocab_free(&v);
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, 2, 1, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too small"));
    ck_assert_ptr_null(v.tokens);
    /* ids fit a slot's 26 bits */
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, AC_VOCAB_MAX_TOKENS, 1, 1, &err), 0);
    ac_vocab_free(&v);
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, AC_VOCAB_MAX_TOKENS + 1, 1, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too large"));
    ck_assert_ptr_null(v.tokens);
    raw_free(&d);
}
END_TEST

START_TEST(test_vocab_training_rows_only)
{
    const char *texts[] = {"train train val", "val val val", "other Train"};
    ac_rawdata d;
    raw_make(&d, texts, NULL, 3);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_vocab v;
    ac_err err = {{0}};
    int64_t idx[] = {2, 0};
    ck_assert_int_eq(ac_vocab_build(&v, &d, idx, 2, &cfg, 100, 1, 0, &err), 0);
    const char *want[] = {"<pad>", "<unk>", "train", "other", "val"};
    vocab_expect(&v, want, 5);
    ac_vocab_free(&v);
    /* an empty selection gives the specials only */
    ck_assert_int_eq(ac_vocab_build(&v, &d, idx, 0, &cfg, 100, 1, 0, &err), 0);
    vocab_expect(&v, want, 2);
    ac_vocab_free(&v);
    int64_t bad[] = {0, 3};
    ck_assert_int_eq(ac_vocab_build(&v, &d, bad, 2, &cfg, 100, 1, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
    /* the tokenizer settings are used: no case folding splits "Train" from "train" */
    cfg.casefold = 0;
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 3, &cfg, 100, 1, 0, &err), 0);
    const char *want_cased[] = {"<pad>", "<unk>", "val", "train", "Train", "other"};
    vocab_expect(&v, want_cased, 6);
    ac_vocab_free(&v);
    ac_vocab_free(&v); /* freeing twice is harmless */
    raw_free(&d);
}
END_TEST

/* v written as vocab.txt and loaded back into *back: same tokens, same ids. */
static void vocab_round_trip(const ac_vocab *v, ac_vocab *back)
{
    ac_err err = {{0}};
    char path[64];
    write_temp(path, sizeof path, "", 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(ac_vocab_write(v, f, &err), 0);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(ac_vocab_load(back, path, &err) == 0, "%s", err.msg);
    unlink(path);
    ck_assert_int_eq(back->size, v->size);
    for (int32_t i = 0; i < v->size; i++) {
        ck_assert_str_eq(back->tokens[i], v->tokens[i]);
        ck_assert_int_eq(ac_vocab_lookup(back, v->tokens[i], strlen(v->tokens[i])), i);
    }
}

START_TEST(test_vocab_write_load_roundtrip)
{
    const char *texts[] = {"Zebra caf\xC3\xA9 \xE6\x97\xA5 don't!", "zebra zebra !"};
    ac_rawdata d;
    raw_make(&d, texts, NULL, 2);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    for (int with_cls = 0; with_cls <= 1; with_cls++) {
        ac_vocab v, back;
        ac_err err = {{0}};
        ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 2, &cfg, 1000, 1, with_cls, &err), 0);
        vocab_round_trip(&v, &back);
        ck_assert_int_eq(back.with_cls, with_cls);
        ac_vocab_free(&v);
        ac_vocab_free(&back);
    }
    raw_free(&d);
}
END_TEST

/* <mask> (masked-LM pretraining) comes right after the other specials, with
 * or without <cls>; it survives vocab.txt; texts never map to it; a
 * vocabulary without it (attnctl 0.1, or a classifier) says mask_id -1. */
START_TEST(test_vocab_mask_token)
{
    const char *texts[] = {"a b <mask> a", "<cls> b a"};
    ac_rawdata d;
    raw_make(&d, texts, NULL, 2);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    for (int with_cls = 0; with_cls <= 1; with_cls++) {
        ac_vocab v, back;
        ac_err err = {{0}};
        int specials = AC_VOCAB_WITH_MASK | (with_cls ? AC_VOCAB_WITH_CLS : 0);
        ck_assert_msg(ac_vocab_build(&v, &d, NULL, 2, &cfg, 100, 1, specials, &err) == 0, "%s",
                      err.msg);
        ck_assert_int_eq(v.with_cls, with_cls);
        ck_assert_int_eq(v.mask_id, 2 + with_cls);
        ck_assert_int_eq(ac_vocab_n_specials(&v), 3 + with_cls);
        ck_assert_str_eq(v.tokens[v.mask_id], "<mask>");
        if (with_cls)
            ck_assert_str_eq(v.tokens[AC_CLS_ID], "<cls>");
        /* the words follow; "<", ">" and "mask" are tokens of the text, never <mask> */
        ck_assert_str_eq(v.tokens[3 + with_cls], "a");
        ac_tokenizer *tok;
        ck_assert_int_eq(ac_tokenizer_create(&tok, &cfg, &err), 0);
        int32_t ids[8];
        int full = 0;
        int n = ac_encode_text(tok, &cfg, &v, "<mask>", 6, 8, ids, &full);
        ac_tokenizer_free(tok);
        for (int i = 0; i < n; i++)
            ck_assert_int_ne(ids[i], v.mask_id);
        /* room for the specials only */
        ac_vocab small;
        ck_assert_int_eq(ac_vocab_build(&small, &d, NULL, 2, &cfg, 2 + with_cls, 1, specials,
                                        &err),
                         -1);
        ck_assert_ptr_nonnull(strstr(err.msg, "too small"));

        vocab_round_trip(&v, &back);
        ck_assert_int_eq(back.mask_id, v.mask_id);
        ck_assert_int_eq(back.with_cls, with_cls);
        ck_assert_int_eq(ac_vocab_lookup(&back, "<mask>", 6), v.mask_id);
        ac_vocab_free(&v);
        ac_vocab_free(&back);
        /* without the flag there is none */
        ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, 2, &cfg, 100, 1, with_cls, &err), 0);
        ck_assert_int_eq(v.mask_id, -1);
        ck_assert_int_eq(ac_vocab_n_specials(&v), 2 + with_cls);
        ac_vocab_free(&v);
    }
    ac_vocab v;
    vocab_from_text(&v, "<pad>\n<unk>\nfoo\n");
    ck_assert_int_eq(v.mask_id, -1);
    ac_vocab_free(&v);
    raw_free(&d);
}
END_TEST

START_TEST(test_vocab_load_lenient)
{
    /* CRLF line ends and a missing final newline are fine */
    ac_vocab v;
    vocab_from_text(&v, "<pad>\r\n<unk>\r\n<cls>\r\nfoo\r\nbar");
    const char *want[] = {"<pad>", "<unk>", "<cls>", "foo", "bar"};
    vocab_expect(&v, want, 5);
    ck_assert_int_eq(v.with_cls, 1);
    ac_vocab_free(&v);
    vocab_from_text(&v, "<pad>\n<unk>\n");
    vocab_expect(&v, want, 2);
    ck_assert_int_eq(v.with_cls, 0);
    ac_vocab_free(&v);
}
END_TEST

/* A vocabulary of plain lines (no control byte, valid UTF-8) is read by a
 * fast path, any other (here CRLF) byte by byte: both give the same tokens,
 * every token of 1..23 bytes (ASCII and UTF-8) finds its id, near misses
 * find none, and a duplicate is reported with its lines, however far apart
 * the two are and also among the last lines. */
/* A file's lines are found 64 bytes at a time: a line end on every byte of
 * the first blocks, and files that end there with and without a newline,
 * give the same tokens. */
START_TEST(test_vocab_load_block_edges)
{
    for (int n = 1; n <= 140; n++) {
        for (int final_newline = 0; final_newline <= 1; final_newline++) {
            char long_token[160], text[200];
            memset(long_token, 'x', (size_t)n);
            long_token[n] = '\0';
            const int len = snprintf(text, sizeof text, "<pad>\n<unk>\n%s\ny%s", long_token,
                                     final_newline ? "\n" : "");
            ck_assert_int_lt(len, (int)sizeof text);
            ac_vocab v;
            vocab_from_text(&v, text);
            ck_assert_int_eq(v.size, 4);
            ck_assert_str_eq(v.tokens[2], long_token);
            ck_assert_str_eq(v.tokens[3], "y");
            ck_assert_int_eq(ac_vocab_lookup(&v, long_token, (size_t)n), 2);
            ck_assert_int_eq(ac_vocab_lookup(&v, "y", 1), 3);
            ck_assert_int_eq(ac_vocab_lookup(&v, "<unk>", 5), 1);
            ac_vocab_free(&v);
        }
    }
}
END_TEST

START_TEST(test_vocab_load_both_paths)
{
    enum { N = 202 };
    static char tokens[N][32];
    ac_strbuf lf, crlf;
    ac_strbuf_init(&lf);
    ac_strbuf_init(&crlf);
    for (int i = 0; i < N; i++) {
        if (i < 2)
            snprintf(tokens[i], sizeof tokens[i], "%s", i == 0 ? "<pad>" : "<unk>");
        else { /* lengths 1..23 (every tail of the hash), told apart by their first two
                  bytes; some end in UTF-8 */
            const int len = 1 + i % 23;
            memset(tokens[i], 'm', (size_t)len);
            tokens[i][0] = (char)('a' + (i / 23) % 26);
            if (len > 1)
                tokens[i][1] = (char)('a' + i % 23);
            if (len >= 4 && i % 5 == 0)
                memcpy(tokens[i] + len - 2, "\xC3\xA9", 2);
            tokens[i][len] = '\0';
        }
    }
    for (int i = 0; i < N; i++) {
        ac_strbuf_printf(&lf, "%s\n", tokens[i]);
        ac_strbuf_printf(&crlf, "%s\r\n", tokens[i]);
    }
    ac_vocab a, b;
    vocab_from_text(&a, lf.data);
    vocab_from_text(&b, crlf.data);
    for (int i = 0; i < N; i++) {
        const size_t len = strlen(tokens[i]);
        ck_assert_str_eq(a.tokens[i], tokens[i]);
        ck_assert_str_eq(b.tokens[i], tokens[i]);
        ck_assert_int_eq(ac_vocab_lookup(&a, tokens[i], len), i);
        ck_assert_int_eq(ac_vocab_lookup(&b, tokens[i], len), i);
        char miss[40];
        memcpy(miss, tokens[i], len);
        miss[len] = 'q';
        ck_assert_int_eq(ac_vocab_lookup(&a, miss, len + 1), AC_UNK_ID); /* one byte longer */
        if (len > 2) /* (a prefix of one byte is a token of its own) */
            ck_assert_int_eq(ac_vocab_lookup(&a, miss, len - 1), AC_UNK_ID); /* shorter */
        miss[0] = '~';
        ck_assert_int_eq(ac_vocab_lookup(&a, miss, len), AC_UNK_ID); /* one byte differs */
    }
    ac_vocab_free(&a);
    ac_vocab_free(&b);
    /* duplicates: line 5 again on line 150, and the last line a copy of the one before */
    const struct { int first, again; } dups[] = {{5, 150}, {N - 1, N}};
    for (size_t d = 0; d < 2; d++) {
        for (int crlf_ends = 0; crlf_ends <= 1; crlf_ends++) {
            ac_strbuf text;
            ac_strbuf_init(&text);
            for (int i = 0; i < N; i++)
                ac_strbuf_printf(&text, "%s%s",
                                 i + 1 == dups[d].again ? tokens[dups[d].first - 1] : tokens[i],
                                 crlf_ends ? "\r\n" : "\n");
            char path[64], want[128];
            write_temp(path, sizeof path, text.data, text.len);
            ac_vocab v;
            ac_err err = {{0}};
            int rc = ac_vocab_load(&v, path, &err);
            unlink(path);
            ck_assert_int_eq(rc, -1);
            snprintf(want, sizeof want, "%s:%d: duplicate token \"%s\" (first on line %d)", path,
                     dups[d].again, tokens[dups[d].first - 1], dups[d].first);
            ck_assert_str_eq(err.msg, want);
            ac_strbuf_free(&text);
        }
    }
    ac_strbuf_free(&lf);
    ac_strbuf_free(&crlf);
}
END_TEST

static const struct {
    const char *content;
    const char *message; /* after "PATH" */
} BAD_VOCABS[] = {
    {"", ": empty file"},
    {"<pad>\n", ":2: missing \"<unk>\""},
    {"<unk>\n<pad>\n", ":1: expected \"<pad>\""},
    {"<pad>\n<cls>\n<unk>\n", ":2: expected \"<unk>\""},
    {"<pad>\n<unk>\nfoo\n\nbar\n", ":4: empty line"},
    {"<pad>\n<unk>\nfoo\n\n", ":4: empty line"},
    {"<pad>\n<unk>\nfoo\r\n\r\n", ":4: empty line"},
    {"<pad>\n<unk>\nfoo\nbar\nfoo\n", ":5: duplicate token \"foo\" (first on line 3)"},
    {"<pad>\n<unk>\n<unk>\n", ":3: duplicate token \"<unk>\" (first on line 2)"},
    {"<pad>\n<unk>\nfoo\ncaf\xC3\n", ":4: token is not valid UTF-8"},
    {"<pad>\n<unk>\n\xED\xA0\x80\n", ":3: token is not valid UTF-8"},
    {"<pad>\n<unk>\nfoo\n<cls>\n", ":4: \"<cls>\" may only be line 3"},
    {"<pad>\n<unk>\nfoo\n<mask>\n", ":4: \"<mask>\" may only follow <unk> (line 3) or <cls>"},
    {"<pad>\n<unk>\n<cls>\nfoo\n<mask>\n", ":5: \"<mask>\" may only follow"},
    {"<pad>\n<unk>\n<mask>\n<cls>\n", ":4: \"<cls>\" may only be line 3"},
    {"<pad>\n<unk>\n<mask>\n<mask>\n", ":4: \"<mask>\" may only follow"},
};

START_TEST(test_vocab_load_errors)
{
    const char *content = BAD_VOCABS[_i].content;
    char path[64], want[128];
    write_temp(path, sizeof path, content, strlen(content));
    ac_vocab v;
    ac_err err = {{0}};
    int rc = ac_vocab_load(&v, path, &err);
    unlink(path);
    ck_assert_int_eq(rc, -1);
    snprintf(want, sizeof want, "%s%s", path, BAD_VOCABS[_i].message);
    ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0, "got \"%s\", want \"%s...\"", err.msg, want);
    ck_assert_ptr_null(v.tokens);
    ck_assert_ptr_null(v.slots);
    ck_assert_int_eq(v.size, 0);
}
END_TEST

/* Regression (found by tests/fuzz/fuzz_vocab): "th\r\r\n" loaded as the
 * token "th\r", which ac_vocab_write wrote as "th\r\n" and a reload read as
 * "th" (a different token, or a duplicate). The tokenizer never yields white
 * space or control characters, so such a line is an error naming it. */
START_TEST(test_vocab_load_control_chars)
{
    const struct {
        const char *content, *message; /* message after "PATH" */
    } cases[] = {
        {"<pad>\n<unk>\nth\r\r\n", ":3: token contains white space or a control character (byte 0x0d)"},
        {"<pad>\r\n<unk>\r\nok\r\nth\r\r\n", ":4: token contains white space or a control character (byte 0x0d)"},
        {"<pad>\n<unk>\na\rb\n", ":3: token contains white space or a control character (byte 0x0d)"},
        {"<pad>\n<unk>\nx\ngood film\n", ":4: token contains white space or a control character (byte 0x20)"},
        {"<pad>\n<unk>\n\tx\n", ":3: token contains white space or a control character (byte 0x09)"},
        {"<pad>\n<unk>\nx\x7f\n", ":3: token contains white space or a control character (byte 0x7f)"},
        {"<pad> \n<unk>\n", ":1: token contains white space or a control character (byte 0x20)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[64], want[160];
        write_temp(path, sizeof path, cases[i].content, strlen(cases[i].content));
        ac_vocab v;
        ac_err err = {{0}};
        int rc = ac_vocab_load(&v, path, &err);
        unlink(path);
        ck_assert_msg(rc == -1, "accepted: %s", cases[i].content);
        snprintf(want, sizeof want, "%s%s", path, cases[i].message);
        ck_assert_msg(strcmp(err.msg, want) == 0, "got \"%s\", want \"%s\"", err.msg, want);
        ck_assert_ptr_null(v.tokens);
        ck_assert_int_eq(v.size, 0);
    }
    /* what loads writes back to a file that loads the same (CRLF input included) */
    ac_vocab v, back;
    vocab_from_text(&v, "<pad>\r\n<unk>\r\nth\r\ncaf\xC3\xA9\r\n\xE2\x80\x94");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ac_err err = {{0}};
    ck_assert_int_eq(ac_vocab_write(&v, f, &err), 0);
    fclose(f);
    vocab_from_text(&back, text);
    ck_assert_int_eq(back.size, v.size);
    for (int32_t i = 0; i < v.size; i++)
        ck_assert_str_eq(back.tokens[i], v.tokens[i]);
    free(text);
    ac_vocab_free(&v);
    ac_vocab_free(&back);
}
END_TEST

START_TEST(test_vocab_load_nul_and_missing)
{
    char path[64];
    write_temp(path, sizeof path, "<pad>\n<unk>\na\0b\n", 16);
    ac_vocab v;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_vocab_load(&v, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, ":3: token contains a NUL byte"));
    unlink(path);
    ck_assert_int_eq(ac_vocab_load(&v, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot open"));
    ck_assert_ptr_nonnull(strstr(err.msg, path));
}
END_TEST

START_TEST(test_vocab_large_lookup)
{
    /* many tokens: the table grows while counting, lookups find every one */
    enum { N_WORDS = 5000 };
    char **texts = malloc(N_WORDS * sizeof *texts);
    ck_assert_ptr_nonnull(texts);
    for (int i = 0; i < N_WORDS; i++) {
        texts[i] = malloc(64);
        /* word i appears i % 7 + 1 times */
        int o = 0;
        for (int k = 0; k <= i % 7; k++)
            o += snprintf(texts[i] + o, (size_t)(64 - o), "w%d ", i);
    }
    ac_rawdata d;
    raw_make(&d, (const char *const *)texts, NULL, N_WORDS);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_vocab v;
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, N_WORDS, &cfg, 100000, 1, 0, NULL), 0);
    ck_assert_int_eq(v.size, N_WORDS + 2);
    ck_assert_uint_ge(v.n_slots, 2 * (uint32_t)v.size);
    for (int i = 0; i < N_WORDS; i++) {
        char w[16];
        int len = snprintf(w, sizeof w, "w%d", i);
        int32_t id = ac_vocab_lookup(&v, w, (size_t)len);
        ck_assert_int_ge(id, 2);
        ck_assert_str_eq(v.tokens[id], w);
    }
    /* counts descending, ties by bytes */
    for (int32_t id = 3; id < v.size; id++) {
        int a = atoi(v.tokens[id - 1] + 1) % 7, b = atoi(v.tokens[id] + 1) % 7;
        ck_assert_int_ge(a, b);
        if (a == b)
            ck_assert_int_lt(strcmp(v.tokens[id - 1], v.tokens[id]), 0);
    }
    ac_vocab_free(&v);
    raw_free(&d);
    for (int i = 0; i < N_WORDS; i++)
        free(texts[i]);
    free(texts);
}
END_TEST

/* A deterministic pseudo-corpus of n texts with a Zipf-like word mix. */
static void random_corpus(ac_rawdata *d, int n, uint64_t key)
{
    char **texts = calloc((size_t)n, sizeof *texts);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    ck_assert(texts && labels);
    uint64_t draw = 0;
    for (int i = 0; i < n; i++) {
        int words = (int)ac_rng_below(key, draw++, 120);
        texts[i] = malloc((size_t)words * 16 + 1);
        size_t o = 0;
        for (int w = 0; w < words; w++) {
            uint64_t r = ac_rng_below(key, draw++, 1000);
            uint64_t word = r * r / 997; /* small ids far more frequent */
            if (ac_rng_below(key, draw++, 40) == 0)
                o += (size_t)sprintf(texts[i] + o, "%s ", ac_rng_below(key, draw++, 2) ? "!" : "caf\xC3\xA9");
            else
                o += (size_t)sprintf(texts[i] + o, "w%llu ", (unsigned long long)word);
        }
        texts[i][o] = '\0';
        labels[i] = (int32_t)ac_rng_below(key, draw++, 3);
    }
    raw_make(d, (const char *const *)texts, labels, n);
    d->n_classes = 3;
    for (int i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(labels);
}

START_TEST(test_vocab_thread_count_invariant)
{
    ac_rawdata d;
    random_corpus(&d, 3000, 77);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_vocab v[3];
    int threads[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        ck_assert_int_eq(ac_vocab_build(&v[k], &d, NULL, d.n_rows, &cfg, 600, 2, 1, NULL), 0);
    }
    omp_set_num_threads(1);
    ck_assert_int_eq(v[0].size, 600);
    for (int k = 1; k < 3; k++) {
        ck_assert_int_eq(v[k].size, v[0].size);
        for (int32_t i = 0; i < v[0].size; i++)
            ck_assert_str_eq(v[k].tokens[i], v[0].tokens[i]);
    }
    for (int k = 0; k < 3; k++)
        ac_vocab_free(&v[k]);
    raw_free(&d);
}
END_TEST

/* ------------------------------------------------------------------ encoding */

/* Vocabulary t0..t9 = ids base..base+9. */
static void ten_word_vocab(ac_vocab *v, int with_cls)
{
    char content[256];
    int o = snprintf(content, sizeof content, "<pad>\n<unk>\n%s", with_cls ? "<cls>\n" : "");
    for (int i = 0; i < 10; i++)
        o += snprintf(content + o, sizeof content - (size_t)o, "t%d\n", i);
    vocab_from_text(v, content);
}

/* Encodes text with the given settings and compares with want[0..n_want). */
static void expect_ids(const ac_vocab *v, ac_truncation mode, int head_tokens, int max_len,
                       const char *text, const int32_t *want, int n_want, int want_full)
{
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    cfg.truncation = mode;
    cfg.head_tokens = head_tokens;
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, NULL), 0);
    int32_t ids[64];
    for (int i = 0; i < 64; i++)
        ids[i] = -7;
    int full = -1;
    int n = ac_encode_text(t, &cfg, v, text, strlen(text), max_len, ids, &full);
    ck_assert_int_eq(n, n_want);
    ck_assert_int_eq(full, want_full);
    for (int i = 0; i < n_want; i++)
        ck_assert_msg(ids[i] == want[i], "mode %d, id %d: got %d, want %d", (int)mode, i, ids[i], want[i]);
    ck_assert_int_eq(ids[n_want], -7); /* nothing written past the kept length */
    ac_tokenizer_free(t);

    /* the corpus encodes the same row the same way */
    ac_rawdata d;
    raw_make(&d, &text, NULL, 1);
    ac_corpus c;
    ac_err err = {{0}};
    ck_assert_msg(ac_corpus_encode(&c, &d, &cfg, v, max_len, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.off[0], 0);
    ck_assert_int_eq(c.off[1], n_want);
    ck_assert_int_eq(c.n_tokens, n_want);
    ck_assert_int_eq(c.full_len[0], want_full);
    ck_assert_int_eq(c.n_truncated, want_full > max_len);
    ck_assert(memcmp(c.ids, want, (size_t)n_want * sizeof *want) == 0);
    ck_assert_ptr_null(c.labels);
    ac_corpus_free(&c);
    raw_free(&d);
}

static const char *TWELVE = "t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 zz t0";

START_TEST(test_encode_no_truncation)
{
    ac_vocab v;
    ten_word_vocab(&v, 0);
    const int32_t want[] = {2, 3, 1, 11, 2};
    for (int mode = 0; mode < 3; mode++)
        expect_ids(&v, (ac_truncation)mode, 0, 5, "T0 t1 what t9 t0", want, 5, 5);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_encode_truncation_modes)
{
    ac_vocab v;
    ten_word_vocab(&v, 0);
    /* ids of TWELVE: 2 3 4 5 6 7 8 9 10 11 1 2 */
    const int32_t head[] = {2, 3, 4, 5, 6, 7, 8, 9};
    expect_ids(&v, AC_TRUNC_HEAD, 0, 8, TWELVE, head, 8, 12);
    const int32_t tail[] = {6, 7, 8, 9, 10, 11, 1, 2};
    expect_ids(&v, AC_TRUNC_TAIL, 0, 8, TWELVE, tail, 8, 12);
    /* head_tokens 0: max_len / 4 = 2 from the head, 6 from the tail */
    const int32_t ht[] = {2, 3, 8, 9, 10, 11, 1, 2};
    expect_ids(&v, AC_TRUNC_HEAD_TAIL, 0, 8, TWELVE, ht, 8, 12);
    const int32_t ht3[] = {2, 3, 4, 9, 10, 11, 1, 2};
    expect_ids(&v, AC_TRUNC_HEAD_TAIL, 3, 8, TWELVE, ht3, 8, 12);
    /* more head tokens than room: all from the head */
    expect_ids(&v, AC_TRUNC_HEAD_TAIL, 50, 8, TWELVE, head, 8, 12);
    /* max_len 3: 3 / 4 = 0 from the head */
    const int32_t ht_small[] = {11, 1, 2};
    expect_ids(&v, AC_TRUNC_HEAD_TAIL, 0, 3, TWELVE, ht_small, 3, 12);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_encode_cls)
{
    ac_vocab v;
    ten_word_vocab(&v, 1); /* t0 = 3 ... t9 = 12 */
    const int32_t whole[] = {2, 3, 4, 1};
    expect_ids(&v, AC_TRUNC_HEAD, 0, 10, "t0 t1 nope", whole, 4, 4);
    /* <cls> counts against max_len: 7 room, head 8 / 4 = 2, tail 5 */
    const int32_t ht[] = {2, 3, 4, 10, 11, 12, 1, 3};
    expect_ids(&v, AC_TRUNC_HEAD_TAIL, 0, 8, TWELVE, ht, 8, 13);
    const int32_t head[] = {2, 3};
    expect_ids(&v, AC_TRUNC_HEAD, 0, 2, TWELVE, head, 2, 13);
    const int32_t tail[] = {2, 3};
    expect_ids(&v, AC_TRUNC_TAIL, 0, 2, TWELVE, tail, 2, 13);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_encode_empty_is_unk)
{
    ac_vocab v;
    ten_word_vocab(&v, 0);
    const int32_t unk[] = {AC_UNK_ID};
    expect_ids(&v, AC_TRUNC_HEAD, 0, 4, "", unk, 1, 1);
    expect_ids(&v, AC_TRUNC_HEAD, 0, 1, "<br /> \n ", unk, 1, 1);
    ac_vocab_free(&v);
    ten_word_vocab(&v, 1);
    const int32_t cls_unk[] = {AC_CLS_ID, AC_UNK_ID};
    expect_ids(&v, AC_TRUNC_TAIL, 0, 2, "<i></i>", cls_unk, 2, 2);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_encode_too_short)
{
    ac_vocab v;
    ten_word_vocab(&v, 1);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, NULL), 0);
    int32_t ids[4];
    int full;
    ck_assert_int_eq(ac_encode_text(t, &cfg, &v, "t1", 2, 1, ids, &full), -1);
    ac_tokenizer_free(t);
    const char *text = "t1";
    ac_rawdata d;
    raw_make(&d, &text, NULL, 1);
    ac_corpus c;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_corpus_encode(&c, &d, &cfg, &v, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "max_len 1"));
    ck_assert_ptr_null(c.ids);
    cfg.head_tokens = -3;
    ck_assert_int_eq(ac_corpus_encode(&c, &d, &cfg, &v, 10, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "head_tokens"));
    raw_free(&d);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_corpus_counts)
{
    ac_vocab v;
    ten_word_vocab(&v, 0);
    const char *texts[] = {"t0 x t1", "", TWELVE, "y z", "t5"};
    const int32_t labels[] = {1, 0, 1, 0, 1};
    ac_rawdata d;
    raw_make(&d, texts, labels, 5);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    cfg.truncation = AC_TRUNC_HEAD;
    ac_corpus c;
    ck_assert_int_eq(ac_corpus_encode(&c, &d, &cfg, &v, 6, NULL), 0);
    const int64_t off[] = {0, 3, 4, 10, 12, 13};
    const int32_t ids[] = {2, 1, 3, 1, 2, 3, 4, 5, 6, 7, 1, 1, 7};
    const int32_t full[] = {3, 1, 12, 2, 1};
    ck_assert_int_eq(c.n, 5);
    for (int i = 0; i <= 5; i++)
        ck_assert_int_eq(c.off[i], off[i]);
    for (int i = 0; i < 13; i++)
        ck_assert_int_eq(c.ids[i], ids[i]);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(c.full_len[i], full[i]);
        ck_assert_int_eq(c.labels[i], labels[i]);
    }
    ck_assert_int_eq(c.n_tokens, 13);
    ck_assert_int_eq(c.n_unk, 3); /* x, y, z: the empty text's placeholder is not a token */
    ck_assert_int_eq(c.n_truncated, 1);
    ck_assert_ptr_ne(c.labels, d.labels); /* a copy: the corpus outlives the raw data */
    ac_corpus_free(&c);
    ac_corpus_free(&c);
    raw_free(&d);
    ac_vocab_free(&v);
}
END_TEST

START_TEST(test_corpus_thread_count_invariant)
{
    ac_rawdata d;
    random_corpus(&d, 2500, 99);
    ac_tokenizer_config cfg;
    ac_tokenizer_config_defaults(&cfg);
    ac_vocab v;
    ck_assert_int_eq(ac_vocab_build(&v, &d, NULL, d.n_rows, &cfg, 300, 1, 1, NULL), 0);
    ac_corpus c[3];
    int threads[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        ck_assert_int_eq(ac_corpus_encode(&c[k], &d, &cfg, &v, 64, NULL), 0);
    }
    omp_set_num_threads(1);
    ck_assert_int_gt(c[0].n_unk, 0);
    ck_assert_int_gt(c[0].n_truncated, 0);
    for (int k = 1; k < 3; k++) {
        ck_assert_int_eq(c[k].n, c[0].n);
        ck_assert_int_eq(c[k].n_tokens, c[0].n_tokens);
        ck_assert_int_eq(c[k].n_unk, c[0].n_unk);
        ck_assert_int_eq(c[k].n_truncated, c[0].n_truncated);
        ck_assert(memcmp(c[k].off, c[0].off, (size_t)(c[0].n + 1) * sizeof *c[0].off) == 0);
        ck_assert(memcmp(c[k].ids, c[0].ids, (size_t)c[0].n_tokens * sizeof *c[0].ids) == 0);
        ck_assert(memcmp(c[k].full_len, c[0].full_len, (size_t)c[0].n * sizeof *c[0].full_len) == 0);
        ck_assert(memcmp(c[k].labels, c[0].labels, (size_t)c[0].n * sizeof *c[0].labels) == 0);
    }
    /* and each row as ac_encode_text encodes it */
    ac_tokenizer *t;
    ck_assert_int_eq(ac_tokenizer_create(&t, &cfg, NULL), 0);
    int64_t unk = 0;
    for (int64_t i = 0; i < d.n_rows; i++) {
        int32_t ids[64];
        int full;
        int n = ac_encode_text(t, &cfg, &v, ac_rawdata_text(&d, i), ac_rawdata_text_len(&d, i), 64, ids,
                               &full);
        ck_assert_int_eq(n, c[0].off[i + 1] - c[0].off[i]);
        ck_assert_int_eq(full, c[0].full_len[i]);
        ck_assert(memcmp(ids, c[0].ids + c[0].off[i], (size_t)n * sizeof *ids) == 0);
        ck_assert_int_eq(ids[0], AC_CLS_ID);
        const ac_token *toks;
        int64_t n_toks = ac_tokenize(t, ac_rawdata_text(&d, i), ac_rawdata_text_len(&d, i), &toks);
        for (int j = 1; j < n && n_toks > 0; j++)
            unk += ids[j] == AC_UNK_ID;
    }
    ck_assert_int_eq(unk, c[0].n_unk);
    ac_tokenizer_free(t);
    for (int k = 0; k < 3; k++)
        ac_corpus_free(&c[k]);
    ac_vocab_free(&v);
    raw_free(&d);
}
END_TEST

/* -------------------------------------------------------------------- split */

static void check_split(const int64_t *tr, int64_t nt, const int64_t *va, int64_t nv, int64_t n)
{
    ck_assert_int_eq(nt + nv, n);
    unsigned char *seen = calloc((size_t)n, 1);
    ck_assert_ptr_nonnull(seen);
    for (int64_t i = 0; i < nt; i++) {
        ck_assert(tr[i] >= 0 && tr[i] < n && !seen[tr[i]]);
        seen[tr[i]] = 1;
        if (i)
            ck_assert_int_lt(tr[i - 1], tr[i]);
    }
    for (int64_t i = 0; i < nv; i++) {
        ck_assert(va[i] >= 0 && va[i] < n && !seen[va[i]]);
        seen[va[i]] = 1;
        if (i)
            ck_assert_int_lt(va[i - 1], va[i]);
    }
    free(seen);
}

START_TEST(test_split_stratified)
{
    enum { N = 1000 };
    int32_t labels[N];
    for (int i = 0; i < N; i++)
        labels[i] = i % 10 < 7 ? 0 : (i % 10 < 9 ? 1 : 2); /* 700 / 200 / 100 */
    int64_t *tr, *va, nt, nv;
    ac_err err = {{0}};
    ck_assert_msg(ac_split_stratified(labels, N, 0.15, 42, &tr, &nt, &va, &nv, &err) == 0, "%s", err.msg);
    check_split(tr, nt, va, nv, N);
    int per_class[3] = {0, 0, 0};
    for (int64_t i = 0; i < nv; i++)
        per_class[labels[va[i]]]++;
    ck_assert_int_eq(per_class[0], 105);
    ck_assert_int_eq(per_class[1], 30);
    ck_assert_int_eq(per_class[2], 15);
    ck_assert_int_eq(nv, 150);

    /* the same seed: the same split; another seed: another */
    int64_t *tr2, *va2, nt2, nv2;
    ck_assert_int_eq(ac_split_stratified(labels, N, 0.15, 42, &tr2, &nt2, &va2, &nv2, &err), 0);
    ck_assert_int_eq(nv2, nv);
    ck_assert(memcmp(va2, va, (size_t)nv * sizeof *va) == 0);
    ck_assert(memcmp(tr2, tr, (size_t)nt * sizeof *tr) == 0);
    free(tr2);
    free(va2);
    ck_assert_int_eq(ac_split_stratified(labels, N, 0.15, 43, &tr2, &nt2, &va2, &nv2, &err), 0);
    ck_assert_int_eq(nv2, nv);
    ck_assert(memcmp(va2, va, (size_t)nv * sizeof *va) != 0);
    check_split(tr2, nt2, va2, nv2, N);
    free(tr2);
    free(va2);
    /* not just the first rows of each class */
    ck_assert_int_gt(va[nv - 1], 500);
    free(tr);
    free(va);
}
END_TEST

START_TEST(test_split_small_classes)
{
    /* class 0: 10 rows, class 1: 2 rows, class 2: 1 row */
    int32_t labels[13] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 2};
    int64_t *tr, *va, nt, nv;
    ck_assert_int_eq(ac_split_stratified(labels, 13, 0.1, 7, &tr, &nt, &va, &nv, NULL), 0);
    check_split(tr, nt, va, nv, 13);
    int per_class[3] = {0, 0, 0};
    for (int64_t i = 0; i < nv; i++)
        per_class[labels[va[i]]]++;
    ck_assert_int_eq(per_class[0], 1);
    ck_assert_int_eq(per_class[1], 1); /* at least one of a class with two rows */
    ck_assert_int_eq(per_class[2], 0); /* a single row stays in training */
    free(tr);
    free(va);
    /* a large fraction still leaves each class one training row */
    ck_assert_int_eq(ac_split_stratified(labels, 13, 0.95, 7, &tr, &nt, &va, &nv, NULL), 0);
    ck_assert_int_eq(nv, 9 + 1);
    free(tr);
    free(va);
}
END_TEST

START_TEST(test_split_errors)
{
    int32_t labels[4] = {0, 1, 0, 1};
    int64_t *tr = (int64_t *)1, *va = (int64_t *)1, nt, nv;
    ac_err err = {{0}};
    const double bad[] = {0.0, 1.0, -0.2, 1.5, NAN};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(ac_split_stratified(labels, 4, bad[i], 1, &tr, &nt, &va, &nv, &err), -1);
        ck_assert_ptr_nonnull(strstr(err.msg, "between 0 and 1"));
        ck_assert_ptr_null(tr);
        ck_assert_ptr_null(va);
    }
    /* every class a single row: nothing can go to validation */
    int32_t singles[3] = {0, 1, 2};
    ck_assert_int_eq(ac_split_stratified(singles, 3, 0.5, 1, &tr, &nt, &va, &nv, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "validation set"));
    ck_assert_int_eq(ac_split_stratified(labels, 1, 0.5, 1, &tr, &nt, &va, &nv, &err), -1);
    ck_assert_int_eq(ac_split_stratified(NULL, 4, 0.5, 1, &tr, &nt, &va, &nv, &err), -1);
    int32_t negative[2] = {0, -1};
    ck_assert_int_eq(ac_split_stratified(negative, 2, 0.5, 1, &tr, &nt, &va, &nv, &err), -1);
}
END_TEST

/* ----------------------------------------------------------------- batching */

/* A corpus with the given row lengths; token j of row i is i * 1000 + j + 1 (never a pad). */
static void corpus_of_lengths(ac_corpus *c, const int *lengths, int64_t n, int with_labels)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->off = malloc((size_t)(n + 1) * sizeof *c->off);
    c->full_len = malloc((size_t)n * sizeof *c->full_len);
    c->off[0] = 0;
    for (int64_t i = 0; i < n; i++)
        c->off[i + 1] = c->off[i] + lengths[i];
    c->ids = malloc((size_t)c->off[n] * sizeof *c->ids);
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < lengths[i]; j++)
            c->ids[c->off[i] + j] = (int32_t)(i * 1000 + j + 1);
        c->full_len[i] = lengths[i];
    }
    if (with_labels) {
        c->labels = malloc((size_t)n * sizeof *c->labels);
        for (int64_t i = 0; i < n; i++)
            c->labels[i] = (int32_t)(i % 3);
    }
    c->n_tokens = c->off[n];
}

static void random_lengths(int *lengths, int n, uint64_t key)
{
    for (int i = 0; i < n; i++)
        lengths[i] = 1 + (int)ac_rng_below(key, (uint64_t)i, 300);
}

/* Every row of idx[0..n) exactly once, batches of batch_size (the last may be short). */
static void check_plan_cover(const ac_batch_plan *p, const ac_corpus *c, const int64_t *idx, int64_t n,
                             int batch_size)
{
    ck_assert_int_eq(p->n_batches, (n + batch_size - 1) / batch_size);
    ck_assert_int_eq(p->batch_start[0], 0);
    ck_assert_int_eq(p->batch_start[p->n_batches], n);
    int short_batches = 0;
    for (int64_t b = 0; b < p->n_batches; b++) {
        int64_t size = p->batch_start[b + 1] - p->batch_start[b];
        ck_assert(size >= 1 && size <= batch_size);
        short_batches += size < batch_size;
    }
    ck_assert_int_le(short_batches, 1);
    int *count = calloc((size_t)c->n, sizeof *count);
    for (int64_t i = 0; i < n; i++)
        count[p->order[i]]++;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = idx ? idx[i] : i;
        ck_assert_int_eq(count[row], 1);
        count[row] = 0;
    }
    for (int64_t r = 0; r < c->n; r++)
        ck_assert_int_eq(count[r], 0);
    free(count);
}

static int64_t plan_len(const ac_corpus *c, const ac_batch_plan *p, int64_t i)
{
    return c->off[p->order[i] + 1] - c->off[p->order[i]];
}

START_TEST(test_batch_plan_training)
{
    enum { N = 3000, B = 16 };
    int lengths[N];
    random_lengths(lengths, N, 5);
    ac_corpus c;
    corpus_of_lengths(&c, lengths, N, 1);
    /* train on every row but multiples of 7 */
    int64_t idx[N], n = 0;
    for (int64_t i = 0; i < N; i++)
        if (i % 7)
            idx[n++] = i;
    ac_batch_plan p, q, r, eval;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, idx, n, B, 1, 1111, &err), 0);
    check_plan_cover(&p, &c, idx, n, B);
    /* each batch is a slice of a length-sorted pool */
    for (int64_t b = 0; b < p.n_batches; b++)
        for (int64_t i = p.batch_start[b] + 1; i < p.batch_start[b + 1]; i++)
            ck_assert_int_le(plan_len(&c, &p, i - 1), plan_len(&c, &p, i));
    int64_t real = 0, padded = 0;
    for (int64_t b = 0; b < p.n_batches; b++) {
        int64_t longest = 0;
        for (int64_t i = p.batch_start[b]; i < p.batch_start[b + 1]; i++) {
            real += plan_len(&c, &p, i);
            if (plan_len(&c, &p, i) > longest)
                longest = plan_len(&c, &p, i);
        }
        padded += longest * (p.batch_start[b + 1] - p.batch_start[b]);
    }
    ck_assert_int_eq(p.real_tokens, real);
    ck_assert_int_eq(p.padded_tokens, padded);
    /* sorting cuts padding well below the unsorted plan's */
    ck_assert_int_eq(ac_batch_plan_make(&eval, &c, idx, n, B, 0, 0, &err), 0);
    ck_assert_int_eq(eval.real_tokens, real);
    double pad_sorted = 1.0 - (double)p.real_tokens / (double)p.padded_tokens;
    double pad_file = 1.0 - (double)eval.real_tokens / (double)eval.padded_tokens;
    ck_assert_msg(pad_sorted < 0.1 && pad_file > 0.3, "padding %.3f sorted, %.3f in file order",
                  pad_sorted, pad_file);
    /* batches are not in length order: batch order is shuffled */
    int64_t descents = 0;
    for (int64_t b = 1; b < p.n_batches; b++)
        descents += plan_len(&c, &p, p.batch_start[b]) < plan_len(&c, &p, p.batch_start[b - 1]);
    ck_assert_int_gt(descents, p.n_batches / 4);

    /* the same key: the same plan; another key: another */
    ck_assert_int_eq(ac_batch_plan_make(&q, &c, idx, n, B, 1, 1111, &err), 0);
    ck_assert(memcmp(q.order, p.order, (size_t)n * sizeof *p.order) == 0);
    ck_assert(memcmp(q.batch_start, p.batch_start, (size_t)(p.n_batches + 1) * sizeof *p.batch_start) == 0);
    ck_assert_int_eq(ac_batch_plan_make(&r, &c, idx, n, B, 1, 2222, &err), 0);
    check_plan_cover(&r, &c, idx, n, B);
    ck_assert(memcmp(r.order, p.order, (size_t)n * sizeof *p.order) != 0);
    ac_batch_plan_free(&p);
    ac_batch_plan_free(&q);
    ac_batch_plan_free(&r);
    ac_batch_plan_free(&eval);
    ac_batch_plan_free(&eval);
    ac_corpus_free(&c);
}
END_TEST

START_TEST(test_batch_plan_single_pool_sorted)
{
    /* fewer rows than one pool: batches are consecutive slices of one sorted list */
    enum { N = 200, B = 8 };
    int lengths[N];
    random_lengths(lengths, N, 6);
    ac_corpus c;
    corpus_of_lengths(&c, lengths, N, 0);
    ac_batch_plan p;
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, N, B, 1, 3, NULL), 0);
    check_plan_cover(&p, &c, NULL, N, B);
    for (int64_t b = 0; b < p.n_batches; b++) {
        int64_t lo = plan_len(&c, &p, p.batch_start[b]), hi = plan_len(&c, &p, p.batch_start[b + 1] - 1);
        for (int64_t i = 0; i < N; i++) {
            if (i >= p.batch_start[b] && i < p.batch_start[b + 1])
                continue;
            int64_t len = plan_len(&c, &p, i);
            ck_assert_msg(len <= lo || len >= hi, "row of length %lld inside batch %lld's range %lld..%lld",
                          (long long)len, (long long)b, (long long)lo, (long long)hi);
        }
    }
    ac_batch_plan_free(&p);
    ac_corpus_free(&c);
}
END_TEST

/* Crops: every filled row is a contiguous span of its row (after the kept
 * first id with keep_first), of a length in the range or the whole row;
 * about frac of the long rows are cut; the same key gives the same spans. */
static void check_crops(int keep_first, double frac, uint64_t key, int64_t *n_cut, int64_t *sum)
{
    enum { N = 400, B = 16, MIN = 3, MAX = 6 };
    int lengths[N];
    random_lengths(lengths, N, 17);
    ac_corpus c;
    corpus_of_lengths(&c, lengths, N, 1);
    ac_crop_spec crop = {.frac = frac, .min_len = MIN, .max_len = MAX, .keep_first = keep_first,
                         .key = key};
    ac_batch_plan p;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_batch_plan_make_cropped(&p, &c, NULL, N, B, 1, 5, &crop, &err), 0);
    int32_t *ids = malloc((size_t)B * 300 * sizeof *ids);
    int32_t lens[B], labels[B];
    int64_t rows[B];
    ac_batch bt = {.ids = ids, .lengths = lens, .labels = labels, .rows = rows};
    *n_cut = 0;
    *sum = 0;
    for (int64_t b = 0; b < p.n_batches; b++) {
        ac_batch_fill(&bt, &c, &p, b);
        for (int i = 0; i < bt.B; i++) {
            int64_t row = rows[i];
            int full = lengths[row], len = lens[i];
            const int32_t *r = ids + (size_t)i * bt.T;
            ck_assert_int_ge(len, 1);
            ck_assert_int_le(len, full);
            ck_assert_int_eq(labels[i], (int32_t)(row % 3));
            if (len < full) {
                (*n_cut)++;
                ck_assert_int_ge(len - keep_first, MIN);
                ck_assert_int_le(len - keep_first, MAX);
            }
            int start = keep_first && len < full ? 1 : 0;
            if (start)
                ck_assert_int_eq(r[0], (int32_t)(row * 1000 + 1));
            for (int k = start; k < len; k++) {
                int pos = r[k] - (int32_t)(row * 1000) - 1;
                ck_assert_msg(pos >= 0 && pos < full, "id from another row");
                if (k > start)
                    ck_assert_int_eq(r[k], r[k - 1] + 1);
                if (start)
                    ck_assert_int_ge(pos, 1);
            }
            for (int k = len; k < bt.T; k++)
                ck_assert_int_eq(r[k], AC_PAD_ID);
            *sum += r[len - 1];
        }
    }
    ac_batch_plan_free(&p);
    free(ids);
    ac_corpus_free(&c);
}

START_TEST(test_batch_plan_crops)
{
    int64_t cut, sum, cut2, sum2;
    check_crops(0, 1.0, 77, &cut, &sum);
    ck_assert_int_gt(cut, 300); /* rows longer than 6 tokens are all cut */
    check_crops(0, 1.0, 77, &cut2, &sum2);
    ck_assert(cut == cut2 && sum == sum2); /* same key, same spans */
    check_crops(0, 1.0, 78, &cut2, &sum2);
    ck_assert(sum != sum2);
    check_crops(1, 1.0, 77, &cut, &sum);
    ck_assert_int_gt(cut, 300);
    int64_t all_cut;
    check_crops(0, 1.0, 79, &all_cut, &sum);
    check_crops(0, 0.5, 79, &cut, &sum);
    ck_assert_msg(cut > all_cut * 4 / 10 && cut < all_cut * 6 / 10, "%lld of %lld cut",
                  (long long)cut, (long long)all_cut);
    check_crops(0, 0.0, 79, &cut, &sum);
    ck_assert_int_eq(cut, 0);
    /* a bad range is an error */
    ac_corpus c;
    int lengths[] = {5, 7};
    corpus_of_lengths(&c, lengths, 2, 0);
    ac_crop_spec bad = {.frac = 1.0, .min_len = 5, .max_len = 4};
    ac_batch_plan p;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_batch_plan_make_cropped(&p, &c, NULL, 2, 2, 1, 1, &bad, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "crop lengths 5..4"));
    ac_corpus_free(&c);
}
END_TEST

START_TEST(test_batch_plan_eval_and_fill)
{
    const int lengths[] = {3, 1, 5, 2, 4, 2, 1};
    ac_corpus c;
    corpus_of_lengths(&c, lengths, 7, 1);
    const int64_t idx[] = {0, 2, 3, 5, 6};
    ac_batch_plan p;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, idx, 5, 2, 0, 99, &err), 0);
    ck_assert_int_eq(p.n_batches, 3);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(p.order[i], idx[i]);
    const int64_t starts[] = {0, 2, 4, 5};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(p.batch_start[i], starts[i]);
    ck_assert_int_eq(p.real_tokens, 3 + 5 + 2 + 2 + 1);
    ck_assert_int_eq(p.padded_tokens, 2 * 5 + 2 * 2 + 1 * 1);

    int32_t ids[2 * 5], lens[2], labels[2];
    int64_t rows[2];
    ac_batch batch = {.ids = ids, .lengths = lens, .labels = labels, .rows = rows};
    for (int i = 0; i < 10; i++)
        ids[i] = -1;
    ac_batch_fill(&batch, &c, &p, 0);
    ck_assert_int_eq(batch.B, 2);
    ck_assert_int_eq(batch.T, 5);
    const int32_t want0[] = {1, 2, 3, 0, 0, 2001, 2002, 2003, 2004, 2005};
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(ids[i], want0[i]);
    ck_assert(lens[0] == 3 && lens[1] == 5);
    ck_assert(labels[0] == 0 && labels[1] == 2);
    ck_assert(rows[0] == 0 && rows[1] == 2);
    ac_batch_fill(&batch, &c, &p, 1);
    ck_assert(batch.B == 2 && batch.T == 2);
    const int32_t want1[] = {3001, 3002, 5001, 5002};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ids[i], want1[i]);
    ck_assert(labels[0] == 0 && labels[1] == 2);
    ac_batch_fill(&batch, &c, &p, 2);
    ck_assert(batch.B == 1 && batch.T == 1 && ids[0] == 6001 && lens[0] == 1 && rows[0] == 6);
    ac_batch_plan_free(&p);

    /* without labels: 0; without idx: every row in file order */
    free(c.labels);
    c.labels = NULL;
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, 7, 4, 0, 0, &err), 0);
    ck_assert_int_eq(p.n_batches, 2);
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(p.order[i], i);
    ac_batch_plan_free(&p);
    ac_corpus_free(&c);
}
END_TEST

START_TEST(test_batch_fill_pads_with_zero)
{
    const int lengths[] = {1, 6, 3, 2};
    ac_corpus c;
    corpus_of_lengths(&c, lengths, 4, 0);
    ac_batch_plan p;
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, 4, 4, 1, 8, NULL), 0);
    ck_assert_int_eq(p.n_batches, 1);
    int32_t ids[4 * 6], lens[4], labels[4];
    int64_t rows[4];
    memset(ids, 0x7f, sizeof ids);
    ac_batch batch = {.ids = ids, .lengths = lens, .labels = labels, .rows = rows};
    ac_batch_fill(&batch, &c, &p, 0);
    ck_assert(batch.B == 4 && batch.T == 6);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(labels[i], 0);
        ck_assert_int_eq(lens[i], lengths[rows[i]]);
        if (i)
            ck_assert_int_le(lens[i - 1], lens[i]); /* one pool: sorted by length */
        for (int j = 0; j < 6; j++)
            ck_assert_int_eq(ids[i * 6 + j], j < lens[i] ? (int32_t)(rows[i] * 1000 + j + 1) : AC_PAD_ID);
    }
    ac_batch_plan_free(&p);
    ac_corpus_free(&c);
}
END_TEST

START_TEST(test_batch_plan_errors)
{
    const int lengths[] = {1, 2};
    ac_corpus c;
    corpus_of_lengths(&c, lengths, 2, 0);
    ac_batch_plan p;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, 2, 0, 1, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "batch size"));
    int64_t bad[] = {0, 2};
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, bad, 2, 4, 1, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, 3, 4, 0, 1, &err), -1);
    /* no rows: no batches */
    ck_assert_int_eq(ac_batch_plan_make(&p, &c, NULL, 0, 4, 1, 1, &err), 0);
    ck_assert_int_eq(p.n_batches, 0);
    ck_assert_int_eq(p.padded_tokens, 0);
    ac_batch_plan_free(&p);
    ac_corpus_free(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("text");
    TCase *tok = tcase_create("tokenizer");
    tcase_add_test(tok, test_enum_names);
    tcase_add_test(tok, test_tok_defaults);
    tcase_add_test(tok, test_tok_words_and_punctuation);
    tcase_add_test(tok, test_tok_html_tags);
    tcase_add_test(tok, test_tok_html_entities);
    tcase_add_test(tok, test_tok_nfkc);
    tcase_add_test(tok, test_tok_casefold);
    tcase_add_test(tok, test_tok_apostrophes_hyphens);
    tcase_add_test(tok, test_tok_invalid_utf8);
    tcase_add_test(tok, test_tok_unicode_classes);
    tcase_add_test(tok, test_tok_emoji_names);
    tcase_add_test(tok, test_tok_emoji_table_complete);
    tcase_add_test(tok, test_tok_bad_config);
    tcase_add_test(tok, test_tok_reference_mode_matches);
    tcase_add_test(tok, test_tok_long_text_reuse);
    tcase_add_test(tok, test_tok_negation);
    suite_add_tcase(s, tok);

    TCase *voc = tcase_create("vocab");
    tcase_add_test(voc, test_vocab_order_and_ties);
    tcase_add_test(voc, test_token_id_elongations);
    tcase_add_test(voc, test_vocab_training_rows_only);
    tcase_add_test(voc, test_vocab_write_load_roundtrip);
    tcase_add_test(voc, test_vocab_load_lenient);
    tcase_add_test(voc, test_vocab_load_both_paths);
    tcase_add_test(voc, test_vocab_load_block_edges);
    tcase_add_test(voc, test_vocab_mask_token);
    tcase_add_loop_test(voc, test_vocab_load_errors, 0, (int)(sizeof BAD_VOCABS / sizeof BAD_VOCABS[0]));
    tcase_add_test(voc, test_vocab_load_nul_and_missing);
    tcase_add_test(voc, test_vocab_load_control_chars);
    tcase_add_test(voc, test_vocab_large_lookup);
    tcase_add_test(voc, test_vocab_thread_count_invariant);
    suite_add_tcase(s, voc);

    TCase *enc = tcase_create("encode");
    tcase_add_test(enc, test_encode_no_truncation);
    tcase_add_test(enc, test_encode_truncation_modes);
    tcase_add_test(enc, test_encode_cls);
    tcase_add_test(enc, test_encode_empty_is_unk);
    tcase_add_test(enc, test_encode_too_short);
    tcase_add_test(enc, test_corpus_counts);
    tcase_add_test(enc, test_corpus_thread_count_invariant);
    suite_add_tcase(s, enc);

    TCase *bat = tcase_create("split_batch");
    tcase_add_test(bat, test_split_stratified);
    tcase_add_test(bat, test_split_small_classes);
    tcase_add_test(bat, test_split_errors);
    tcase_add_test(bat, test_batch_plan_training);
    tcase_add_test(bat, test_batch_plan_single_pool_sorted);
    tcase_add_test(bat, test_batch_plan_eval_and_fill);
    tcase_add_test(bat, test_batch_plan_crops);
    tcase_add_test(bat, test_batch_fill_pads_with_zero);
    tcase_add_test(bat, test_batch_plan_errors);
    suite_add_tcase(s, bat);

    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
