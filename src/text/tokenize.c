/* The tokenizer: HTML clean-up, UTF-8 repair, NFKC + case folding (utf8proc)
 * and the word/punctuation split described in attnctl/text.h.
 *
 * Normalisation runs per stretch of text between ASCII white space. Such a
 * stretch that is pure ASCII is only lower-cased: NFKC leaves ASCII alone and
 * case folding of ASCII is lower-casing, and ASCII white space neither
 * composes with nor reorders against its neighbours, so the result is the
 * same as one utf8proc call on the whole text (a test checks this against
 * the reference mode). Only stretches holding other bytes go through
 * utf8proc, into buffers owned by the tokenizer.
 *
 * With emoji_names, an emoji (after normalisation) is replaced by its English
 * CLDR name between spaces, "👍" by " thumbs up ", as BERTweet's normaliser
 * does: a vocabulary learnt from reviews rarely holds the emoji themselves,
 * but knows the words of their names, so "Broke on day one 👎" keeps the
 * verdict its emoji gives instead of an <unk>. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "attnctl/text.h"
#include "emoji_names.h"
#include "text_internal.h"

/* A tag is '<' + letter, '/' or '!' ... '>' within this many bytes. */
#define MAX_TAG_BYTES 256

struct ac_tokenizer {
    ac_tokenizer_config cfg;
    utf8proc_option_t norm_options;
    int reference_mode;
    char *html;               /* text after HTML clean-up */
    size_t html_cap;
    char *valid;              /* one stretch with invalid UTF-8 replaced */
    size_t valid_cap;
    utf8proc_int32_t *cps;    /* code points of one stretch */
    size_t cps_cap;
    char *norm;               /* normalised text; tokens point here */
    size_t norm_cap;
    ac_token *tokens;
    size_t tokens_cap;
    char *negated;            /* "not_" + word for the words mark_negation rewrites */
    size_t negated_cap;
};

int ac_grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*buf, n * elem);
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* ------------------------------------------------------------------ UTF-8 */

/* Checks the sequence at s[0..n): returns 1 when valid (*used = its length),
 * 0 when not (*used = length of the maximal invalid subpart, >= 1). */
static int utf8_next(const unsigned char *s, size_t n, size_t *used)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *used = 1;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0) {
        need = 2;
        lo = 0xA0;
    } else if (c == 0xED) {
        need = 2;
        hi = 0x9F;
    } else if (c >= 0xE1 && c <= 0xEF)
        need = 2;
    else if (c == 0xF0) {
        need = 3;
        lo = 0x90;
    } else if (c == 0xF4) {
        need = 3;
        hi = 0x8F;
    } else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else {
        *used = 1;
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *used = i;
            return 0;
        }
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
            *used = i;
            return 0;
        }
    }
    *used = need + 1;
    return 1;
}

static inline int ascii_word8(const unsigned char *s)
{
    uint64_t w;
    memcpy(&w, s, 8);
    return (w & 0x8080808080808080ULL) == 0;
}

size_t ac_utf8_valid_prefix(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len && ascii_word8(u + i)) {
            i += 8;
            continue;
        }
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t used;
        if (!utf8_next(u + i, len - i, &used))
            return i;
        i += used;
    }
    return len;
}

size_t ac_utf8_sanitize(char *dst, const char *s, size_t len, int64_t *n_replaced)
{
    size_t out = 0, i = 0;
    int64_t replaced = 0;
    while (i < len) {
        size_t ok = ac_utf8_valid_prefix(s + i, len - i);
        memcpy(dst + out, s + i, ok);
        out += ok;
        i += ok;
        if (i >= len)
            break;
        size_t used;
        utf8_next((const unsigned char *)s + i, len - i, &used);
        memcpy(dst + out, "\xEF\xBF\xBD", 3);
        out += 3;
        i += used;
        replaced++;
    }
    if (n_replaced)
        *n_replaced = replaced;
    return out;
}

/* Encodes a valid code point; returns the byte count. */
static size_t utf8_put(char *dst, uint32_t cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one code point from valid UTF-8. */
static inline uint32_t utf8_get(const unsigned char *s, size_t *len)
{
    unsigned char c = s[0];
    if (c < 0xE0) {
        *len = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* The name of emoji cp (from the frozen table), or NULL when cp is none. */
static const char *emoji_name(uint32_t cp)
{
    if (cp < EMOJI_NAMES[0].cp)
        return NULL;
    int lo = 0, hi = EMOJI_NAME_COUNT - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (EMOJI_NAMES[mid].cp == cp)
            return EMOJI_NAMES[mid].name;
        if (EMOJI_NAMES[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

/* Appends normalised cp to t->norm at *o: the typographic apostrophe as
 * '\'', an emoji as its name between spaces (with emoji_names). The caller
 * has made room for cp's UTF-8 bytes here plus `rest` bytes after; a name
 * grows the buffer itself, so each code point is looked up once. */
static int append_normalized(ac_tokenizer *t, size_t *o, uint32_t cp, size_t rest)
{
    if (cp == 0x2019) /* right single quotation mark: the typographic apostrophe */
        cp = '\'';
    const char *name = t->cfg.emoji_names ? emoji_name(cp) : NULL;
    if (!name) {
        *o += utf8_put(t->norm + *o, cp);
        return 0;
    }
    size_t len = strlen(name);
    if (ac_grow((void **)&t->norm, &t->norm_cap, *o + len + 2 + rest + 1, 1))
        return -1;
    char *dst = t->norm + *o;
    dst[0] = ' ';
    memcpy(dst + 1, name, len);
    dst[len + 1] = ' ';
    *o += len + 2;
    return 0;
}

/* ------------------------------------------------------------------- HTML */

static int is_ascii_alpha(unsigned char c)
{
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

static int is_ascii_alnum(unsigned char c)
{
    return is_ascii_alpha(c) || (c >= '0' && c <= '9');
}

/* Inline formatting tags vanish without a trace ("<i>Alien</i>'s" stays one
 * word); every other tag (br, p, div, comments...) separates like a space. */
static int is_inline_tag(const char *tag, size_t len)
{
    static const char *const inline_tags[] = {"a",   "abbr",  "b",     "big",    "cite", "code",
                                              "em",  "font",  "i",     "q",      "s",    "small",
                                              "span", "strike", "strong", "sub", "sup",  "tt",
                                              "u"};
    size_t i = 0;
    if (i < len && tag[i] == '/')
        i++;
    size_t start = i;
    while (i < len && is_ascii_alnum((unsigned char)tag[i]))
        i++;
    size_t name_len = i - start;
    if (name_len == 0 || name_len > 6)
        return 0;
    char name[8];
    for (size_t k = 0; k < name_len; k++)
        name[k] = (char)(tag[start + k] | 0x20);
    name[name_len] = 0;
    for (size_t k = 0; k < sizeof inline_tags / sizeof inline_tags[0]; k++)
        if (strcmp(name, inline_tags[k]) == 0)
            return 1;
    return 0;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parses an entity at s[0] == '&'. Returns the bytes it spans (0: not an
 * entity, keep the '&') and its code point in *cp. */
static size_t parse_entity(const char *s, size_t n, uint32_t *cp)
{
    static const struct {
        const char *name;
        uint32_t cp;
    } named[] = {{"amp", '&'},       {"lt", '<'},        {"gt", '>'},        {"quot", '"'},
                 {"apos", '\''},     {"nbsp", 0xA0},     {"hellip", 0x2026}, {"mdash", 0x2014},
                 {"ndash", 0x2013},  {"lsquo", 0x2018},  {"rsquo", 0x2019},  {"ldquo", 0x201C},
                 {"rdquo", 0x201D}};
    if (n < 3)
        return 0;
    if (s[1] == '#') {
        size_t i = 2;
        int hex = 0;
        if (i < n && (s[i] == 'x' || s[i] == 'X')) {
            hex = 1;
            i++;
        }
        size_t digits_start = i;
        uint32_t v = 0;
        size_t max_digits = hex ? 6 : 7;
        while (i < n && i - digits_start < max_digits + 1) {
            int d = hex ? hex_value((unsigned char)s[i]) : (s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : -1);
            if (d < 0)
                break;
            v = v * (hex ? 16 : 10) + (uint32_t)d;
            i++;
        }
        size_t digits = i - digits_start;
        if (digits == 0 || digits > max_digits || i >= n || s[i] != ';')
            return 0;
        if (v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            v = 0xFFFD;
        *cp = v;
        return i + 1;
    }
    size_t i = 1;
    while (i < n && i < 8 && is_ascii_alpha((unsigned char)s[i]))
        i++;
    if (i >= n || s[i] != ';' || i == 1)
        return 0;
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
        if (strlen(named[k].name) == i - 1 && memcmp(named[k].name, s + 1, i - 1) == 0) {
            *cp = named[k].cp;
            return i + 1;
        }
    }
    return 0;
}

/* Tags out, entities decoded. The output is never longer than the input. */
static size_t strip_html(char *dst, const char *s, size_t n)
{
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c != '<' && c != '&') {
            dst[o++] = (char)c;
            i++;
            continue;
        }
        if (c == '<' && i + 1 < n &&
            (is_ascii_alpha((unsigned char)s[i + 1]) || s[i + 1] == '/' || s[i + 1] == '!')) {
            size_t limit = i + MAX_TAG_BYTES < n ? i + MAX_TAG_BYTES : n;
            size_t j = i + 1;
            while (j < limit && s[j] != '>' && s[j] != '<')
                j++;
            if (j < limit && s[j] == '>') {
                if (!is_inline_tag(s + i + 1, j - i - 1))
                    dst[o++] = ' ';
                i = j + 1;
                continue;
            }
        } else if (c == '&') {
            uint32_t cp;
            size_t used = parse_entity(s + i, n - i, &cp);
            if (used) {
                o += utf8_put(dst + o, cp);
                i += used;
                continue;
            }
        }
        dst[o++] = (char)c;
        i++;
    }
    return o;
}

/* ---------------------------------------------------------- normalisation */

static int is_ascii_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Appends the normalisation of one stretch holding non-ASCII bytes. */
static int normalize_slow(ac_tokenizer *t, const char *s, size_t n, size_t *o)
{
    if (ac_grow((void **)&t->valid, &t->valid_cap, 3 * n + 1, 1))
        return -1;
    size_t vlen = ac_utf8_sanitize(t->valid, s, n, NULL);
    utf8proc_ssize_t ncp;
    for (;;) {
        ncp = utf8proc_decompose((const utf8proc_uint8_t *)t->valid, (utf8proc_ssize_t)vlen,
                                 t->cps, (utf8proc_ssize_t)t->cps_cap, t->norm_options);
        if (ncp < 0)
            return -1; /* cannot happen on sanitised input with these options */
        if ((size_t)ncp <= t->cps_cap)
            break;
        if (ac_grow((void **)&t->cps, &t->cps_cap, (size_t)ncp, sizeof *t->cps))
            return -1;
    }
    ncp = utf8proc_normalize_utf32(t->cps, ncp, t->norm_options);
    if (ncp < 0)
        return -1;
    if (ac_grow((void **)&t->norm, &t->norm_cap, *o + 4 * (size_t)ncp + 1, 1))
        return -1;
    for (utf8proc_ssize_t k = 0; k < ncp; k++)
        if (append_normalized(t, o, (uint32_t)t->cps[k], 4 * (size_t)(ncp - k - 1)))
            return -1;
    return 0;
}

static int normalize_fast(ac_tokenizer *t, const char *s, size_t n, size_t *out_len)
{
    if (ac_grow((void **)&t->norm, &t->norm_cap, n + 1, 1))
        return -1;
    const int fold = t->cfg.casefold;
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (is_ascii_space(c)) {
            t->norm[o++] = ' ';
            i++;
            continue;
        }
        size_t j = i;
        unsigned char high = 0;
        while (j < n && !is_ascii_space((unsigned char)s[j])) {
            high |= (unsigned char)s[j];
            j++;
        }
        if (!(high & 0x80)) {
            char *dst = t->norm + o;
            if (fold) {
                for (size_t k = i; k < j; k++) {
                    unsigned char b = (unsigned char)s[k];
                    dst[k - i] = (char)(b >= 'A' && b <= 'Z' ? b | 0x20 : b);
                }
            } else {
                memcpy(dst, s + i, j - i);
            }
            o += j - i;
        } else {
            if (normalize_slow(t, s + i, j - i, &o))
                return -1;
            /* keep room for the rest at one byte per byte (ASCII copies 1:1) */
            if (ac_grow((void **)&t->norm, &t->norm_cap, o + (n - j) + 1, 1))
                return -1;
        }
        i = j;
    }
    *out_len = o;
    return 0;
}

/* Reference path: one utf8proc_map over the whole text. */
static int normalize_reference(ac_tokenizer *t, const char *s, size_t n, size_t *out_len)
{
    if (ac_grow((void **)&t->valid, &t->valid_cap, 3 * n + 1, 1))
        return -1;
    size_t vlen = ac_utf8_sanitize(t->valid, s, n, NULL);
    utf8proc_uint8_t *mapped = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)t->valid, (utf8proc_ssize_t)vlen,
                                      &mapped, t->norm_options);
    if (m < 0)
        return -1;
    if (ac_grow((void **)&t->norm, &t->norm_cap, (size_t)m + 1, 1)) {
        free(mapped);
        return -1;
    }
    /* mapped is valid UTF-8: decode it and write it back as the fast path
     * does (a code point's own bytes are room enough, except for a name) */
    size_t o = 0, len;
    for (utf8proc_ssize_t i = 0; i < m; i += (utf8proc_ssize_t)len) {
        if (mapped[i] < 0x80) {
            t->norm[o++] = (char)mapped[i];
            len = 1;
            continue;
        }
        uint32_t cp = utf8_get(mapped + i, &len);
        if (append_normalized(t, &o, cp, (size_t)m - (size_t)i - len)) {
            free(mapped);
            return -1;
        }
    }
    free(mapped);
    *out_len = o;
    return 0;
}

/* --------------------------------------------------------------- splitting */

enum { CH_SPACE, CH_ALNUM, CH_MARK, CH_OTHER };

/* ASCII classes: letters and digits form words, controls and white space
 * separate, everything else is punctuation. */
static const unsigned char ascii_class[128] = {
#define S CH_SPACE
#define A CH_ALNUM
#define O CH_OTHER
    S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, /* 0x00 */
    S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, /* 0x10 */
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* ' ' ! " # ... / */
    A, A, A, A, A, A, A, A, A, A, O, O, O, O, O, O, /* 0-9 : ; < = > ? */
    O, A, A, A, A, A, A, A, A, A, A, A, A, A, A, A, /* @ A-O */
    A, A, A, A, A, A, A, A, A, A, A, O, O, O, O, O, /* P-Z [ \ ] ^ _ */
    O, A, A, A, A, A, A, A, A, A, A, A, A, A, A, A, /* ` a-o */
    A, A, A, A, A, A, A, A, A, A, A, O, O, O, O, S, /* p-z { | } ~ DEL */
#undef S
#undef A
#undef O
};

static inline int char_class(const unsigned char *s, size_t *len)
{
    if (s[0] < 0x80) {
        *len = 1;
        return ascii_class[s[0]];
    }
    uint32_t cp = utf8_get(s, len);
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return CH_ALNUM;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        return CH_MARK;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
        return CH_SPACE;
    default:
        return CH_OTHER;
    }
}

static int64_t split_tokens(ac_tokenizer *t, size_t n)
{
    /* at most one token per byte: reserve once, no checks in the loop */
    if (ac_grow((void **)&t->tokens, &t->tokens_cap, n + 1, sizeof *t->tokens))
        return -1;
    const unsigned char *s = (const unsigned char *)t->norm;
    const int keep_apostrophes = !t->cfg.split_apostrophes;
    const int keep_hyphens = !t->cfg.split_hyphens;
    int64_t count = 0;
    size_t i = 0;
    while (i < n) {
        size_t len;
        int cls = char_class(s + i, &len);
        if (cls == CH_SPACE) {
            i += len;
            continue;
        }
        size_t start = i;
        i += len;
        if (cls == CH_ALNUM || cls == CH_MARK) {
            while (i < n) {
                int next = char_class(s + i, &len);
                if (next == CH_ALNUM || next == CH_MARK) {
                    i += len;
                    continue;
                }
                /* an apostrophe or hyphen stays inside a word when a letter or digit follows */
                if (((s[i] == '\'' && keep_apostrophes) || (s[i] == '-' && keep_hyphens)) &&
                    i + 1 < n) {
                    size_t after_len;
                    if (char_class(s + i + 1, &after_len) == CH_ALNUM) {
                        i += 1 + after_len;
                        continue;
                    }
                }
                break;
            }
        }
        t->tokens[count].str = t->norm + start;
        t->tokens[count].len = (uint32_t)(i - start);
        count++;
    }
    return count;
}

/* ---------------------------------------------------------------- negation */

/* Negation marking (Das & Chen 2001; Pang, Lee & Vaithyanathan 2002). A bag
 * of n-grams reads "not good" partly through "good", and a negated phrase the
 * training text never held ("would not really recommend") through its
 * positive words. With mark_negation every word after a negator, up to the
 * next punctuation mark, becomes "not_" + the word: a token ordinary text
 * never yields (the splitter cuts '_' off), so "not_recommend" or "not_worth"
 * learn what the negated word means wherever it occurs. English negators
 * only; with split_apostrophes, "don", "'", "t" counts as "don't". */

#define NEGATION_PREFIX "not_"
enum { NEGATION_PREFIX_LEN = sizeof NEGATION_PREFIX - 1 };

static int ascii_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* The token is `word` (ASCII, any case). */
static int token_is(const ac_token *tk, const char *word)
{
    size_t n = strlen(word);
    if (tk->len != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (ascii_lower((unsigned char)tk->str[i]) != (unsigned char)word[i])
            return 0;
    return 1;
}

static int is_negator(const ac_token *toks, int64_t i)
{
    static const char *const NEGATORS[] = {"not",  "no",  "never",   "nothing", "nobody", "none",
                                           "neither", "nor", "without", "cannot", "nowhere"};
    const ac_token *tk = &toks[i];
    for (size_t k = 0; k < sizeof NEGATORS / sizeof NEGATORS[0]; k++)
        if (token_is(tk, NEGATORS[k]))
            return 1;
    const unsigned char *s = (const unsigned char *)tk->str;
    if (tk->len >= 3 && ascii_lower(s[tk->len - 3]) == 'n' && s[tk->len - 2] == '\'' &&
        ascii_lower(s[tk->len - 1]) == 't')
        return 1; /* didn't, can't, won't */
    if (i >= 2 && token_is(tk, "t") && token_is(&toks[i - 1], "'")) {
        const ac_token *before = &toks[i - 2];
        return before->len > 0 && ascii_lower((unsigned char)before->str[before->len - 1]) == 'n';
    }
    return 0;
}

/* The punctuation that ends a negation's reach: a clause or sentence ends,
 * or a bracket or quotation starts or ends. */
static int ends_negation(const ac_token *tk)
{
    if (tk->len == 1)
        return tk->str[0] != '\0' && strchr(".,!?;:()[]\"", tk->str[0]) != NULL;
    return token_is(tk, "\xe2\x80\x9c") || token_is(tk, "\xe2\x80\x9d"); /* curly quotes */
}

static int is_word(const ac_token *tk)
{
    size_t len;
    int cls = char_class((const unsigned char *)tk->str, &len);
    return cls == CH_ALNUM || cls == CH_MARK;
}

/* Rewrites the words in a negator's reach to point at "not_" + word in
 * t->negated, reserved once for the worst case (every token rewritten: the
 * normalised text plus a prefix per token). 0, or -1 on allocation failure. */
static int mark_negation(ac_tokenizer *t, int64_t count, size_t norm_len)
{
    if (ac_grow((void **)&t->negated, &t->negated_cap,
                norm_len + (size_t)count * NEGATION_PREFIX_LEN + 1, 1))
        return -1;
    ac_token *toks = t->tokens;
    size_t o = 0;
    int in_reach = 0;
    for (int64_t i = 0; i < count; i++) {
        if (is_word(&toks[i])) {
            /* the test reads the token before it is rewritten; the tokens
             * before it keep their last letter, all is_negator looks at */
            int negator = is_negator(toks, i);
            if (in_reach) {
                memcpy(t->negated + o, NEGATION_PREFIX, NEGATION_PREFIX_LEN);
                memcpy(t->negated + o + NEGATION_PREFIX_LEN, toks[i].str, toks[i].len);
                toks[i].str = t->negated + o;
                toks[i].len += NEGATION_PREFIX_LEN;
                o += toks[i].len;
            }
            in_reach |= negator;
        } else if (ends_negation(&toks[i])) {
            in_reach = 0;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- public */

void ac_tokenizer_config_defaults(ac_tokenizer_config *c)
{
    c->nfkc = 1;
    c->casefold = 1;
    c->strip_html = 1;
    c->split_hyphens = 0;
    c->split_apostrophes = 0;
    c->emoji_names = 1;
    c->squeeze_elongations = 1;
    c->mark_negation = 1;
    c->truncation = AC_TRUNC_HEAD_TAIL;
    c->head_tokens = 0;
}

int ac_tokenizer_create(ac_tokenizer **out, const ac_tokenizer_config *cfg, ac_err *err)
{
    *out = NULL;
    if (cfg->truncation < AC_TRUNC_HEAD || cfg->truncation > AC_TRUNC_HEAD_TAIL)
        return ac_err_set(err, "tokenizer: unknown truncation mode %d", (int)cfg->truncation);
    if (cfg->head_tokens < 0)
        return ac_err_set(err, "tokenizer: head_tokens must be >= 0 (got %d)", cfg->head_tokens);
    ac_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return ac_err_set(err, "tokenizer: out of memory");
    t->cfg = *cfg;
    /* NFC always (how an accent was encoded must not matter); IGNORE drops
     * default-ignorable code points (soft hyphen, zero-width joiner,
     * variation selectors) as NFKC_Casefold does. */
    t->norm_options = (utf8proc_option_t)(UTF8PROC_COMPOSE | UTF8PROC_IGNORE |
                                          (cfg->nfkc ? UTF8PROC_COMPAT : 0) |
                                          (cfg->casefold ? UTF8PROC_CASEFOLD : 0));
    *out = t;
    return 0;
}

void ac_tokenizer_set_reference_mode(ac_tokenizer *t, int on)
{
    t->reference_mode = on;
}

void ac_tokenizer_free(ac_tokenizer *t)
{
    if (!t)
        return;
    free(t->html);
    free(t->valid);
    free(t->cps);
    free(t->norm);
    free(t->tokens);
    free(t->negated);
    free(t);
}

int64_t ac_tokenize(ac_tokenizer *t, const char *text, size_t len, const ac_token **tokens)
{
    *tokens = NULL;
    const char *src = text;
    size_t n = len;
    if (t->cfg.strip_html) {
        if (ac_grow((void **)&t->html, &t->html_cap, len + 1, 1))
            return -1;
        n = strip_html(t->html, text, len);
        src = t->html;
    }
    size_t norm_len = 0; /* set by both paths; gcc -O1 cannot see it through the early returns */
    int rc = t->reference_mode ? normalize_reference(t, src, n, &norm_len)
                               : normalize_fast(t, src, n, &norm_len);
    if (rc)
        return -1;
    int64_t count = split_tokens(t, norm_len);
    if (count < 0 || (t->cfg.mark_negation && mark_negation(t, count, norm_len)))
        return -1;
    *tokens = t->tokens;
    return count;
}
