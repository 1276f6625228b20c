/* libFuzzer target: vocab.txt loading (ac_vocab_load), as `attnctl predict
 * --model` does it. The input is the file. A vocabulary that loads must keep
 * the contract (specials first, every token non-empty valid UTF-8 without
 * NUL or LF, lookup(token i) == i) and survive a write + reload
 * unchanged. A failure must leave the vocabulary zeroed with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/text.h"
#include "fuzz_common.h"

static void check_vocab(const ac_vocab *v)
{
    FUZZ_CHECK(v->size >= 2);
    FUZZ_CHECK(strcmp(v->tokens[AC_PAD_ID], "<pad>") == 0);
    FUZZ_CHECK(strcmp(v->tokens[AC_UNK_ID], "<unk>") == 0);
    FUZZ_CHECK(v->with_cls == (v->size > 2 && strcmp(v->tokens[AC_CLS_ID], "<cls>") == 0));
    FUZZ_CHECK(v->n_slots >= 2 * (uint32_t)v->size);
    for (int32_t i = 0; i < v->size; i++) {
        const char *t = v->tokens[i];
        size_t n = strlen(t);
        FUZZ_CHECK(n > 0 && fuzz_utf8_valid(t, n));
        FUZZ_CHECK(!strchr(t, '\n')); /* (a CR inside a token is kept: it can never match) */
        FUZZ_CHECK(ac_vocab_lookup(v, t, n) == i);
        /* a proper prefix is another token or unknown, never this one */
        if (n > 1 && i != AC_UNK_ID)
            FUZZ_CHECK(ac_vocab_lookup(v, t, n - 1) != i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file file, rewritten;
    if (!file.path[0]) {
        fuzz_file_open(&file, "fuzz_vocab");
        fuzz_file_open(&rewritten, "fuzz_vocab_rewritten");
    }
    fuzz_file_set(&file, data, size);

    ac_vocab v;
    ac_err err = {{0}};
    if (ac_vocab_load(&v, file.path, &err) != 0) {
        FUZZ_CHECK(err.msg[0] != '\0');
        FUZZ_CHECK(v.size == 0 && v.tokens == NULL && v.slots == NULL);
        return 0;
    }
    check_vocab(&v);

    /* write it out and read it back: the same tokens in the same order */
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    FUZZ_SETUP(f != NULL, "open_memstream");
    FUZZ_CHECK(ac_vocab_write(&v, f, &err) == 0);
    fclose(f);
    fuzz_file_set(&rewritten, text, text_len);
    free(text);
    ac_vocab back;
    FUZZ_CHECK(ac_vocab_load(&back, rewritten.path, &err) == 0);
    FUZZ_CHECK(back.size == v.size && back.with_cls == v.with_cls);
    for (int32_t i = 0; i < v.size; i++)
        FUZZ_CHECK(strcmp(back.tokens[i], v.tokens[i]) == 0);
    ac_vocab_free(&back);
    ac_vocab_free(&v);
    return 0;
}
