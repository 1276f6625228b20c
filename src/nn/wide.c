/* The wide path: a linear model on the set of the text's hashed word
 * n-grams, added to the classifier's logits (a bag of n-grams with a weight
 * per class, as in NBSVM or fastText without the bottleneck). A bag of
 * bigrams beats the encoder on IMDB; summed with it, each covers the other. */
#include "attnctl/nn.h"

#include <math.h>

/* In place, because glibc's qsort may allocate and a training step
 * allocates nothing: quicksort (median of three, insertion sort for short
 * runs), with heapsort below a depth limit so that no input is quadratic.
 * Integers: every algorithm gives the same order. */
static void sift_down(int32_t *v, int root, int n)
{
    for (;;) {
        int child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && v[child + 1] > v[child])
            child++;
        if (v[root] >= v[child])
            return;
        int32_t tmp = v[root];
        v[root] = v[child];
        v[child] = tmp;
        root = child;
    }
}

static void heap_sort(int32_t *v, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_down(v, i, n);
    for (int end = n - 1; end > 0; end--) {
        int32_t tmp = v[0];
        v[0] = v[end];
        v[end] = tmp;
        sift_down(v, 0, end);
    }
}

static void insertion_sort(int32_t *v, int n)
{
    for (int i = 1; i < n; i++) {
        const int32_t x = v[i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

static void quick_sort(int32_t *v, int n, int depth)
{
    while (n > 24) {
        if (depth-- == 0) {
            heap_sort(v, n);
            return;
        }
        const int32_t a = v[0], b = v[n / 2], c = v[n - 1];
        const int32_t pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        int i = 0, j = n - 1;
        for (;;) { /* Hoare partition: v[0..j] <= pivot <= v[j+1..n) */
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i >= j)
                break;
            int32_t tmp = v[i];
            v[i++] = v[j];
            v[j--] = tmp;
        }
        /* the shorter side first, by recursion; the longer by the loop */
        if (j + 1 < n - j - 1) {
            quick_sort(v, j + 1, depth);
            v += j + 1;
            n -= j + 1;
        } else {
            quick_sort(v + j + 1, n - j - 1, depth);
            n = j + 1;
        }
    }
    insertion_sort(v, n);
}

static void sort_int32(int32_t *v, int n)
{
    int depth = 0;
    for (int m = n; m > 1; m >>= 1)
        depth += 2;
    quick_sort(v, n, depth);
}

uint32_t wide_bucket(const int32_t *gram, int n, int n_buckets)
{
    uint64_t h = (uint64_t)n;
    for (int k = 0; k < n; k++)
        h = h * 116049371ULL + (uint64_t)gram[k] + 1u;
    /* The n-gram length and the id sums alone would leave nearby ids in
     * nearby buckets: mix the bits with the first half of MurmurHash3's
     * fmix64 (one multiply, two shifts; not the whole finaliser). Models
     * depend on these exact buckets (docs/formats.md). */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (uint32_t)(h % (uint64_t)n_buckets);
}

int wide_buckets_of_text(int32_t *out, const int32_t *ids, int length, int order, int n_buckets)
{
    int count = 0;
    for (int n = 1; n <= order; n++)
        for (int t = 0; t + n <= length; t++)
            out[count++] = (int32_t)wide_bucket(ids + t, n, n_buckets);
    sort_int32(out, count);
    int distinct = 0;
    for (int i = 0; i < count; i++)
        if (distinct == 0 || out[i] != out[distinct - 1])
            out[distinct++] = out[i];
    return distinct;
}

void wide_buckets_compute(int32_t *buckets, int32_t *counts, const int32_t *ids,
                          const int32_t *lengths, int B, int T, int order, int n_buckets)
{
    const size_t stride = (size_t)T * (size_t)order;
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        counts[b] = wide_buckets_of_text(buckets + (size_t)b * stride, ids + (size_t)b * T,
                                         lengths[b], order, n_buckets);
}

double wide_scale(int count, float norm)
{
    if (norm == 0.0f || count <= 0)
        return 1.0;
    const int n = count > AC_WIDE_NORM_FLOOR ? count : AC_WIDE_NORM_FLOOR;
    return pow((double)AC_WIDE_NORM_REF / (double)n, (double)norm);
}

void wide_forward(float *logits, const int32_t *buckets, const int32_t *counts, const float *table,
                  int B, int T, int order, int C, float norm)
{
    const size_t stride = (size_t)T * (size_t)order;
    for (int b = 0; b < B; b++) {
        const int32_t *bk = buckets + (size_t)b * stride;
        const double scale = wide_scale(counts[b], norm);
        for (int c = 0; c < C; c++) {
            double sum = 0.0; /* ascending bucket order: the same bits every time */
            for (int i = 0; i < counts[b]; i++)
                sum += (double)table[(size_t)bk[i] * C + c];
            logits[(size_t)b * C + c] += (float)(scale * sum);
        }
    }
}

void wide_backward(float *dtable, const float *dlogits, const int32_t *buckets,
                   const int32_t *counts, int B, int T, int order, int C, float norm)
{
    if (!dtable)
        return;
    const size_t stride = (size_t)T * (size_t)order;
    for (int b = 0; b < B; b++) {
        const int32_t *bk = buckets + (size_t)b * stride;
        const float scale = (float)wide_scale(counts[b], norm);
        for (int i = 0; i < counts[b]; i++)
            for (int c = 0; c < C; c++)
                dtable[(size_t)bk[i] * C + c] += scale * dlogits[(size_t)b * C + c];
    }
}

void wide_nb_init(float *table, const int32_t *ids, const int64_t *off, const int32_t *labels,
                  const int64_t *rows, int64_t n_rows, int order, int n_buckets, int C, float scale,
                  int32_t *grams, double *work)
{
    double *class_total = work, *p_norm = work + C, *q_norm = work + 2 * C, *ratio = work + 3 * C;
    const size_t n_cells = (size_t)n_buckets * (size_t)C;
    for (size_t i = 0; i < n_cells; i++)
        table[i] = 0.0f;
    for (int c = 0; c < C; c++)
        class_total[c] = 0.0;
    /* Counts first, in the table itself: a bucket's cell of class c is the
     * number of class-c rows having it (binarised: once per row). */
    for (int64_t k = 0; k < n_rows; k++) {
        const int64_t r = rows[k];
        const int c = labels[r];
        const int count = wide_buckets_of_text(grams, ids + off[r], (int)(off[r + 1] - off[r]),
                                               order, n_buckets);
        for (int i = 0; i < count; i++)
            table[(size_t)grams[i] * C + c] += 1.0f;
        class_total[c] += count;
    }
    /* The feature space is the buckets some row has, as NBSVM's vocabulary is
     * the n-grams some row has: alpha is added to each of them only. */
    int64_t seen = 0;
    double all = 0.0;
    for (int b = 0; b < n_buckets; b++) {
        const float *cell = table + (size_t)b * C;
        for (int c = 0; c < C; c++)
            if (cell[c] > 0.0f) {
                seen++;
                break;
            }
    }
    for (int c = 0; c < C; c++)
        all += class_total[c];
    const double alpha = AC_WIDE_NB_ALPHA;
    for (int c = 0; c < C; c++) {
        p_norm[c] = class_total[c] + alpha * (double)seen;
        q_norm[c] = all - class_total[c] + alpha * (double)seen;
    }
    for (int b = 0; b < n_buckets; b++) {
        float *cell = table + (size_t)b * C;
        double in_row = 0.0;
        for (int c = 0; c < C; c++)
            in_row += cell[c];
        if (in_row == 0.0)
            continue;
        for (int c = 0; c < C; c++) { /* every class's ratio reads the counts of all */
            const double p = ((double)cell[c] + alpha) / p_norm[c];
            const double q = (in_row - (double)cell[c] + alpha) / q_norm[c];
            ratio[c] = log(p / q);
        }
        for (int c = 0; c < C; c++)
            cell[c] = (float)(0.5 * (double)scale * ratio[c]);
    }
}
