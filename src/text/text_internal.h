/* Helpers shared by the files of src/text; not part of the public API. */
#ifndef ATTNCTL_TEXT_INTERNAL_H
#define ATTNCTL_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attnctl/text.h"

/* Length of the longest prefix of s[0..len) that is valid UTF-8 (RFC 3629:
 * no overlongs, no surrogates, nothing above U+10FFFF). */
size_t ac_utf8_valid_prefix(const char *s, size_t len);

/* Copies s[0..len) to dst, replacing each maximal invalid subsequence with
 * U+FFFD (the Unicode "best practice", as Python and browsers do). dst must
 * hold 3 * len bytes. Returns the bytes written; *n_replaced (may be NULL)
 * gets the number of replacements. */
size_t ac_utf8_sanitize(char *dst, const char *s, size_t len, int64_t *n_replaced);

/* Token hash (FNV-1a, 64 bits): shared by vocabulary counting and lookup. */
#define AC_TOKEN_HASH_START 0xcbf29ce484222325ULL
static inline uint64_t ac_token_hash_step(uint64_t h, unsigned char c)
{
    return (h ^ c) * 0x100000001b3ULL;
}
static inline uint64_t ac_token_hash(const char *s, size_t len)
{
    uint64_t h = AC_TOKEN_HASH_START;
    for (size_t i = 0; i < len; i++)
        h = ac_token_hash_step(h, (unsigned char)s[i]);
    return h;
}

/* Test hook: 1 makes the tokenizer normalise each text with one whole-text
 * utf8proc_map call (slow, allocates) instead of the ASCII fast path, so a
 * test can check that both give identical tokens. */
void ac_tokenizer_set_reference_mode(ac_tokenizer *t, int on);

/* Grows *buf (element size elem) to hold at least need elements; doubles. */
int ac_grow(void **buf, size_t *cap, size_t need, size_t elem);

#endif
