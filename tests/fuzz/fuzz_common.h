/* Helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * - fuzz_file: an in-memory file (memfd) that the library opens by path
 *   through /proc/self/fd, so a crashing run leaves no file behind and every
 *   iteration reuses one descriptor.
 * - FUZZ_CHECK: an invariant that aborts, so libFuzzer saves the input.
 * - fuzz_tiny_vocab: a small vocabulary built by the library itself. */
#ifndef ATTNCTL_FUZZ_COMMON_H
#define ATTNCTL_FUZZ_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attnctl/text.h"

#define FUZZ_CHECK(cond)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* Setup failures are not findings: say so and stop the run. */
#define FUZZ_SETUP(cond, what)                                                              \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz setup failed: %s (%s)\n", what, strerror(errno));         \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

typedef struct {
    int fd;
    char path[64]; /* /proc/self/fd/N: opening it opens the memfd afresh, at offset 0 */
} fuzz_file;

static inline void fuzz_file_open(fuzz_file *f, const char *name)
{
    f->fd = memfd_create(name, MFD_CLOEXEC);
    FUZZ_SETUP(f->fd >= 0, "memfd_create");
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* Replaces the file's content with data[0..len). */
static inline void fuzz_file_set(fuzz_file *f, const void *data, size_t len)
{
    FUZZ_SETUP(ftruncate(f->fd, 0) == 0, "ftruncate");
    const unsigned char *p = data;
    off_t at = 0;
    while (len > 0) {
        ssize_t n = pwrite(f->fd, p, len, at);
        if (n < 0 && errno == EINTR)
            continue;
        FUZZ_SETUP(n > 0, "pwrite");
        p += n;
        at += n;
        len -= (size_t)n;
    }
}

/* Valid UTF-8 throughout (the library's own checker, so the targets agree with it). */
size_t ac_utf8_valid_prefix(const char *s, size_t len);
static inline int fuzz_utf8_valid(const char *s, size_t len)
{
    return ac_utf8_valid_prefix(s, len) == len;
}

/* A vocabulary of the words below (plus specials), built with the default
 * tokenizer by ac_vocab_build: tiny, so most fuzzed words are <unk> and some are not. */
static inline void fuzz_tiny_vocab(ac_vocab *v, int with_cls)
{
    static const char *const texts[] = {
        "a good film , great acting and a moving story !",
        "terrible plot ; awful acting . i want my money back",
        "don't well-made <br /> it's 10/10 \xC3\xA9t\xC3\xA9 caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x94",
        "\xE6\x98\xA0\xE7\x94\xBB \xD1\x84\xD0\xB8\xD0\xBB\xD1\x8C\xD0\xBC the the the of of",
    };
    enum { N_TEXTS = sizeof texts / sizeof texts[0] };
    size_t total = 0;
    for (int i = 0; i < N_TEXTS; i++)
        total += strlen(texts[i]) + 1;
    char *buf = malloc(total);
    int64_t *off = malloc((N_TEXTS + 1) * sizeof *off);
    FUZZ_SETUP(buf && off, "out of memory");
    off[0] = 0;
    for (int i = 0; i < N_TEXTS; i++) {
        size_t n = strlen(texts[i]) + 1;
        memcpy(buf + off[i], texts[i], n);
        off[i + 1] = off[i] + (int64_t)n;
    }
    ac_rawdata raw = {.n_rows = N_TEXTS, .text_buf = buf, .text_off = off};
    ac_tokenizer_config tcfg;
    ac_tokenizer_config_defaults(&tcfg);
    ac_err err = {{0}};
    int rc = ac_vocab_build(v, &raw, NULL, N_TEXTS, &tcfg, 64, 1, with_cls, &err);
    free(buf);
    free(off);
    if (rc != 0) {
        fprintf(stderr, "fuzz setup failed: vocabulary: %s\n", err.msg);
        exit(2);
    }
}

#endif
