/* Helpers shared by the files of src/text; not part of the public API. */
#ifndef ATTNCTL_TEXT_INTERNAL_H
#define ATTNCTL_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "attnctl/text.h"

/* s ends with suffix, ASCII case ignored (file name extensions). */
static inline int ac_ends_with_nocase(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* A file named *.tsv or *.tsv.gz: tab-separated when its header does not say. */
static inline int ac_is_tsv_name(const char *path)
{
    return ac_ends_with_nocase(path, ".tsv") || ac_ends_with_nocase(path, ".tsv.gz");
}

/* Length of the longest prefix of s[0..len) that is valid UTF-8 (RFC 3629:
 * no overlongs, no surrogates, nothing above U+10FFFF). */
size_t ac_utf8_valid_prefix(const char *s, size_t len);

/* Copies s[0..len) to dst, replacing each maximal invalid subsequence with
 * U+FFFD (the Unicode "best practice", as Python and browsers do). dst must
 * hold 3 * len bytes. Returns the bytes written; *n_replaced (may be NULL)
 * gets the number of replacements. */
size_t ac_utf8_sanitize(char *dst, const char *s, size_t len, int64_t *n_replaced);

/* Token hash, 64 bits, shared by vocabulary counting and lookup (in memory
 * only, never stored). Eight bytes a step, as most tokens fit in one or two
 * steps: loading a 30,000-token vocabulary is then a small part of a cold
 * `predict`, where a byte-at-a-time hash was a quarter of it. */
static inline uint64_t ac_token_hash_mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    return h ^ (h >> 32);
}
static inline uint64_t ac_token_hash(const char *s, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = ac_token_hash_mix(h, w);
    }
    const size_t r = len - i; /* the last 0..7 bytes, read without a loop; len is mixed in, so
                                 overlapping reads still tell every string apart */
    const unsigned char *t = (const unsigned char *)s + i;
    if (r >= 4) {
        uint32_t a, b;
        memcpy(&a, t, 4);
        memcpy(&b, t + r - 4, 4);
        h = ac_token_hash_mix(h, (uint64_t)a | (uint64_t)b << 32);
    } else if (r > 0) {
        h = ac_token_hash_mix(h, (uint64_t)t[0] | (uint64_t)t[r / 2] << 8 | (uint64_t)t[r - 1] << 16);
    }
    h *= 0xc4ceb9fe1a85ec53ULL; /* spread every input bit over the low bits (slots) and the high (tags) */
    return h ^ (h >> 29);
}

/* Test hook: 1 makes the tokenizer normalise each text with one whole-text
 * utf8proc_map call (slow, allocates) instead of the ASCII fast path, so a
 * test can check that both give identical tokens. */
void ac_tokenizer_set_reference_mode(ac_tokenizer *t, int on);

/* Grows *buf (element size elem) to hold at least need elements; doubles. */
int ac_grow(void **buf, size_t *cap, size_t need, size_t elem);

#endif
