/* Masked-LM pretraining at the library level: the BERT masking (shares,
 * what is never masked, determinism, the bounds the buffers rely on) and a
 * pretraining model that learns to fill in a masked word from its context.
 * The head's layers and the whole model's gradients are checked in
 * test_layers.c and test_model.c; the PyTorch cross-check is in
 * test_fixture.c; pretraining runs end to end in test_pretrain.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/mlm.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/rng.h"

/* ids: <pad> 0, <unk> 1, <cls> 2, <mask> 3, words 4..V-1 */
enum { PAD = 0, CLS = 2, MASK = 3, FIRST_WORD = 4 };

typedef struct {
    int B, T;
    int32_t *ids, *lengths, *masked, *positions, *targets, *scratch;
} masking_case;

static void case_make(masking_case *c, int B, int T, int V, uint64_t seed, int with_cls)
{
    c->B = B;
    c->T = T;
    c->ids = calloc((size_t)B * T, sizeof *c->ids);
    c->lengths = calloc((size_t)B, sizeof *c->lengths);
    c->masked = calloc((size_t)B * T, sizeof *c->masked);
    c->positions = calloc((size_t)ac_mlm_max_masked(B, T, 0.99), sizeof *c->positions);
    c->targets = calloc((size_t)ac_mlm_max_masked(B, T, 0.99), sizeof *c->targets);
    c->scratch = calloc((size_t)T, sizeof *c->scratch);
    ck_assert(c->ids && c->lengths && c->masked && c->positions && c->targets && c->scratch);
    for (int b = 0; b < B; b++) {
        c->lengths[b] = 1 + (int32_t)ac_rng_below(seed, (uint64_t)b, (uint64_t)T);
        for (int t = 0; t < T; t++) {
            int32_t word = FIRST_WORD + (int32_t)ac_rng_below(seed + 1, (uint64_t)(b * T + t),
                                                              (uint64_t)(V - FIRST_WORD));
            c->ids[b * T + t] = t >= c->lengths[b] ? PAD : (t == 0 && with_cls && b % 2 == 0) ? CLS
                                                                                               : word;
        }
    }
}

static void case_free(masking_case *c)
{
    free(c->ids);
    free(c->lengths);
    free(c->masked);
    free(c->positions);
    free(c->targets);
    free(c->scratch);
}

static int mask_case(masking_case *c, const ac_mlm_masking *spec, uint64_t key)
{
    return ac_mlm_mask_batch(spec, c->ids, c->lengths, c->B, c->T, key, c->masked, c->positions,
                             c->targets, c->scratch);
}

/* 15 % of the eligible positions, 80/10/10 among them, never a pad or a
 * leading <cls>, positions ascending, targets the originals, everything else
 * untouched, per-row counts within one of the share, random words from the
 * word range and spread over it. */
START_TEST(test_masking_statistics)
{
    enum { B = 400, T = 128, V = 1000, KEYS = 5 };
    ac_mlm_masking spec = {.mask_frac = AC_MLM_MASK_FRAC, .mask_id = MASK,
                           .first_word_id = FIRST_WORD, .vocab_size = V, .skip_first_id = CLS};
    masking_case c;
    case_make(&c, B, T, V, 42, 1);
    int64_t eligible = 0, chosen = 0, to_mask = 0, kept = 0, to_word = 0;
    double word_position = 0.0;
    for (uint64_t key = 1; key <= KEYS; key++) {
        int M = mask_case(&c, &spec, key);
        ck_assert_int_ge(M, 1);
        ck_assert_int_le(M, ac_mlm_max_masked(B, T, spec.mask_frac));
        int at = 0;
        for (int b = 0; b < B; b++) {
            int first = c.ids[b * T] == CLS;
            int n = c.lengths[b] - first, in_row = 0;
            eligible += n;
            for (int t = 0; t < T; t++) {
                int pos = b * T + t;
                int is_chosen = at < M && c.positions[at] == pos;
                if (!is_chosen) {
                    ck_assert_int_eq(c.masked[pos], c.ids[pos]);
                    continue;
                }
                ck_assert_msg(t < c.lengths[b], "a pad was masked (item %d, position %d)", b, t);
                ck_assert_msg(!(t == 0 && first), "the leading <cls> was masked (item %d)", b);
                ck_assert_int_eq(c.targets[at], c.ids[pos]);
                if (at > 0)
                    ck_assert_int_gt(c.positions[at], c.positions[at - 1]);
                int32_t in = c.masked[pos];
                if (in == MASK) {
                    to_mask++;
                } else if (in == c.ids[pos]) {
                    kept++;
                } else {
                    ck_assert_int_ge(in, FIRST_WORD);
                    ck_assert_int_lt(in, V);
                    to_word++;
                    word_position += (double)(in - FIRST_WORD) / (V - FIRST_WORD);
                }
                in_row++;
                at++;
            }
            ck_assert_msg(in_row >= (int)floor(spec.mask_frac * n) &&
                              in_row <= (int)ceil(spec.mask_frac * n),
                          "item %d: %d of %d eligible positions masked", b, in_row, n);
        }
        ck_assert_int_eq(at, M);
        chosen += M;
    }
    double share = (double)chosen / (double)eligible;
    double share_mask = (double)to_mask / chosen, share_kept = (double)kept / chosen;
    double share_word = (double)to_word / chosen;
    printf("masking: %lld of %lld eligible positions (%.4f); of those <mask> %.4f, a random word "
           "%.4f, kept %.4f; random words at %.3f of their range on average\n",
           (long long)chosen, (long long)eligible, share, share_mask, share_word, share_kept,
           word_position / (double)to_word);
    ck_assert_msg(fabs(share - 0.15) < 0.003, "masked share %.4f", share);
    ck_assert_msg(fabs(share_mask - 0.8) < 0.015, "<mask> share %.4f", share_mask);
    ck_assert_msg(fabs(share_word - 0.1) < 0.01, "random-word share %.4f", share_word);
    ck_assert_msg(fabs(share_kept - 0.1) < 0.01, "kept share %.4f", share_kept);
    ck_assert_msg(fabs(word_position / (double)to_word - 0.5) < 0.03, "random words are not uniform");
    case_free(&c);
}
END_TEST

/* The same key gives the same masking bit for bit; another key another one;
 * the mask share is a parameter. */
START_TEST(test_masking_determinism)
{
    enum { B = 32, T = 40, V = 300 };
    ac_mlm_masking spec = {.mask_frac = AC_MLM_MASK_FRAC, .mask_id = MASK,
                           .first_word_id = FIRST_WORD, .vocab_size = V, .skip_first_id = CLS};
    masking_case a, b;
    case_make(&a, B, T, V, 7, 1);
    case_make(&b, B, T, V, 7, 1);
    int Ma = mask_case(&a, &spec, 99), Mb = mask_case(&b, &spec, 99);
    ck_assert_int_eq(Ma, Mb);
    ck_assert(memcmp(a.masked, b.masked, sizeof(int32_t) * B * T) == 0);
    ck_assert(memcmp(a.positions, b.positions, sizeof(int32_t) * (size_t)Ma) == 0);
    ck_assert(memcmp(a.targets, b.targets, sizeof(int32_t) * (size_t)Ma) == 0);
    mask_case(&b, &spec, 100);
    ck_assert(memcmp(a.masked, b.masked, sizeof(int32_t) * B * T) != 0);
    spec.mask_frac = 0.5;
    int more = mask_case(&b, &spec, 99);
    ck_assert_msg(more > 2 * Ma, "mask share 0.5: %d positions, 0.15: %d", more, Ma);
    case_free(&a);
    case_free(&b);
}
END_TEST

/* Edge cases: a batch that drew no position gets one (every batch has a
 * loss); a batch with nothing eligible is refused; a word range that is
 * empty keeps the token instead of drawing one. */
START_TEST(test_masking_edges)
{
    enum { B = 3, T = 4 };
    ac_mlm_masking spec = {.mask_frac = 1e-9, .mask_id = MASK, .first_word_id = FIRST_WORD,
                           .vocab_size = 50, .skip_first_id = CLS};
    int32_t ids[B * T] = {9, 0, 0, 0, CLS, 0, 0, 0, CLS, 11, 12, 0};
    int32_t lengths[B] = {1, 1, 3};
    int32_t masked[B * T], positions[B * T], targets[B * T], scratch[T];
    for (uint64_t key = 0; key < 20; key++) {
        int M = ac_mlm_mask_batch(&spec, ids, lengths, B, T, key, masked, positions, targets,
                                  scratch);
        ck_assert_int_eq(M, 1);
        ck_assert(positions[0] == 0 || positions[0] == 9 || positions[0] == 10);
        ck_assert_int_eq(targets[0], ids[positions[0]]);
    }
    /* only a leading <cls> and pads: nothing to predict */
    int32_t only_cls[2 * T] = {CLS, 0, 0, 0, CLS, 0, 0, 0}, ones[2] = {1, 1};
    ck_assert_int_eq(ac_mlm_mask_batch(&spec, only_cls, ones, 2, T, 1, masked, positions, targets,
                                       scratch),
                     -1);
    /* no words to draw from: never a replacement outside <mask> and the token itself */
    spec.mask_frac = 0.99;
    spec.vocab_size = FIRST_WORD;
    for (uint64_t key = 0; key < 20; key++) {
        int M = ac_mlm_mask_batch(&spec, ids, lengths, B, T, key, masked, positions, targets,
                                  scratch);
        for (int i = 0; i < M; i++)
            ck_assert(masked[positions[i]] == MASK || masked[positions[i]] == targets[i]);
    }
    ck_assert_int_eq(ac_mlm_max_masked(4, 100, 0.15), 4 * 15);
    ck_assert_int_eq(ac_mlm_max_masked(4, 101, 0.15), 4 * 16);
    ck_assert_int_eq(ac_mlm_max_masked(2, 3, 0.15), 2);
}
END_TEST

/* A masked LM learns what the context says: sequences walk a cycle of 12
 * words from a random start, so a masked word is its neighbour's successor.
 * From chance (1/12) to nearly always right on fresh batches. */
START_TEST(test_masked_lm_learns_from_context)
{
    enum { V = 4 + 12, B = 16, T = 12, STEPS = 400 };
    ac_model_config cfg = {.vocab_size = V, .max_len = T, .d_model = 32, .n_heads = 4,
                           .d_ff = 64, .n_layers = 1, .n_classes = 0, .pooling = AC_POOL_MEAN,
                           .dropout = 0.0f, .ln_eps = 1e-6f, .positions = AC_POS_LEARNED,
                           .objective = AC_OBJECTIVE_MASKED_LM};
    ac_model m;
    ac_mlm h;
    ac_err err;
    ck_assert_msg(ac_model_create(&m, &cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_alloc_activations(&m, B, T, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_mlm_alloc(&h, &cfg, B, T, 0.3, &err) == 0, "%s", err.msg);
    ac_model_init_weights(&m, 3);
    ac_optim_config oc;
    ac_optim_config_defaults(&oc);
    oc.lr = 1e-2f;
    oc.schedule = AC_SCHED_CONSTANT;
    float *m1 = calloc(m.n_params, sizeof(float)), *m2 = calloc(m.n_params, sizeof(float));
    ck_assert(m1 && m2);
    ac_mlm_masking spec = {.mask_frac = 0.3, .mask_id = MASK, .first_word_id = FIRST_WORD,
                           .vocab_size = V, .skip_first_id = -1};
    int32_t ids[B * T], lengths[B];
    double accuracy[2] = {0, 0};
    for (int step = 0; step <= STEPS; step++) {
        for (int b = 0; b < B; b++) {
            lengths[b] = 6 + (int32_t)ac_rng_below(5, (uint64_t)(step * B + b), T - 5);
            int start = (int)ac_rng_below(6, (uint64_t)(step * B + b), 12);
            for (int t = 0; t < T; t++)
                ids[b * T + t] = t < lengths[b] ? FIRST_WORD + (start + t) % 12 : PAD;
        }
        int M = ac_mlm_mask_batch(&spec, ids, lengths, B, T, ac_rng_key(8, (uint64_t)step),
                                  h.masked_ids, h.positions, h.targets, h.scratch);
        int train = step < STEPS;
        float loss = ac_mlm_forward(&m, &h, h.masked_ids, lengths, B, T, h.positions, h.targets, M,
                                    train, (uint64_t)step);
        ck_assert(isfinite(loss));
        if (step == 0 || !train)
            accuracy[train ? 0 : 1] = (double)h.n_correct / M;
        if (!train)
            break;
        ac_model_zero_grad(&m);
        ac_mlm_backward(&m, &h);
        ac_model_clip_grad_norm(&m, oc.clip_norm);
        ac_adamw_step(&m, m.params, m.grads, m1, m2, &oc, oc.lr, step + 1);
    }
    printf("masked LM on a 12-word cycle: masked-token accuracy %.3f before, %.3f after %d steps\n",
           accuracy[0], accuracy[1], STEPS);
    ck_assert_msg(accuracy[0] < 0.3, "accuracy %.3f before training", accuracy[0]);
    ck_assert_msg(accuracy[1] > 0.9, "accuracy %.3f after training", accuracy[1]);
    free(m1);
    free(m2);
    ac_mlm_free(&h);
    ac_model_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mlm");
    TCase *tc = tcase_create("masking");
    tcase_add_test(tc, test_masking_statistics);
    tcase_add_test(tc, test_masking_determinism);
    tcase_add_test(tc, test_masking_edges);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("learning");
    tcase_set_timeout(tl, 120);
    tcase_add_test(tl, test_masked_lm_learns_from_context);
    suite_add_tcase(s, tl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
