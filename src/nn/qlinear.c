/* int8 linear layers for quantized models (see attnctl/quant.h): inputs
 * quantized a row at a time, exact 32-bit integer dot products (AVX512-VNNI
 * or plain C, the same sums), and one shared epilogue back to floats. */
#include "attnctl/quant.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux arch_prctl: ask for an extended state */
#define XFEATURE_XTILEDATA 18
#endif

#include "simd.h"

/* Rows of the input quantized together (on the stack: at most 16 x
 * AC_QLINEAR_MAX_IN bytes) and outputs computed at once (4 vectors of 16). */
#define QROWS 16
#define QCOLS 64

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24, 22), AVX512-BF16 (leaf
 * 7.1: EAX bit 5), and Linux's permission to use the tile data (asked for
 * each time: idempotent, and no state kept here). */
static int amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 22) & 1))
        return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1))
        return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#endif

int ac_qkernel_available(ac_qkernel k)
{
    if (k == AC_QKERNEL_C)
        return 1;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (k == AC_QKERNEL_VNNI || k == AC_QKERNEL_AMX) {
        __builtin_cpu_init();
        const int vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
        return k == AC_QKERNEL_VNNI ? vnni : vnni && amx_usable();
    }
#endif
    return 0;
}

ac_qkernel ac_qkernel_best(void)
{
    return ac_qkernel_available(AC_QKERNEL_AMX)    ? AC_QKERNEL_AMX
           : ac_qkernel_available(AC_QKERNEL_VNNI) ? AC_QKERNEL_VNNI
                                                   : AC_QKERNEL_C;
}

/* AUTO as the kernel it stands for; any other as given (the caller checked
 * it is available: probing here would cost every layer a CPUID and a
 * system call). */
static ac_qkernel resolve(ac_qkernel k) { return k == AC_QKERNEL_AUTO ? ac_qkernel_best() : k; }

int ac_qkernel_is_vnni(ac_qkernel k)
{
    const ac_qkernel r = resolve(k);
    return r == AC_QKERNEL_VNNI || r == AC_QKERNEL_AMX;
}

int ac_qkernel_attention(ac_qkernel k)
{
    const ac_qkernel r = resolve(k);
    return r == AC_QKERNEL_AMX ? 2 : r == AC_QKERNEL_VNNI ? 1 : 0;
}

const char *ac_qkernel_name(ac_qkernel k)
{
    const ac_qkernel r = resolve(k);
    return r == AC_QKERNEL_AMX ? "avx512-vnni+amx-bf16" : r == AC_QKERNEL_VNNI ? "avx512-vnni" : "c";
}

int ac_qlinear_init(ac_qlinear *l, const int8_t *q, const float *scale, int out_dim, int in_dim)
{
    memset(l, 0, sizeof *l);
    if (in_dim < 1 || out_dim < 1 || in_dim > AC_QLINEAR_MAX_IN)
        return -1;
    l->out_dim = out_dim;
    l->in_dim = in_dim;
    l->out_pad = (out_dim + 15) / 16 * 16;
    l->in_pad = (in_dim + 3) / 4 * 4;
    l->packed = aligned_alloc(64, (size_t)l->out_pad * (size_t)l->in_pad);
    l->scale = malloc((size_t)out_dim * sizeof *l->scale);
    l->wsum = malloc((size_t)out_dim * sizeof *l->wsum);
    if (!l->packed || !l->scale || !l->wsum) {
        ac_qlinear_free(l);
        return -1;
    }
    memcpy(l->scale, scale, (size_t)out_dim * sizeof *l->scale);
    const int k4n = l->in_pad / 4;
    for (int o = 0; o < l->out_pad; o++) {
        int32_t sum = 0;
        for (int k = 0; k < l->in_pad; k++) {
            int8_t w = o < out_dim && k < in_dim ? q[(size_t)o * in_dim + k] : 0;
            l->packed[(((size_t)(o / 16) * k4n + k / 4) * 16 + o % 16) * 4 + k % 4] = w;
            sum += w;
        }
        if (o < out_dim)
            l->wsum[o] = sum;
    }
    return 0;
}

void ac_qlinear_free(ac_qlinear *l)
{
    free(l->packed);
    free(l->scale);
    free(l->wsum);
    memset(l, 0, sizeof *l);
}

typedef uint8_t vb16 __attribute__((vector_size(16)));

/* Row x as unsigned bytes q + 128 (q = round(x / s), s = max |x| / 127),
 * zero-padded (128) to in_pad; its scale in *s (0 for a zero row, NaN when
 * the row is not finite). Plain loops without library calls, so that the
 * compiler vectorises them; rounding to nearest even by adding and taking
 * away 1.5 x 2^23 (|x / s| <= 127). */
static void quantize_row(uint8_t *xq, float *s, const float *x, int in_dim, int in_pad)
{
    /* max |x| 16 lanes at a time; a lane that is not finite marks the row */
    vf16 vmax = vf_splat(0.0f);
    vi16 bad = {0};
    int at = 0;
    for (; at + VF_LANES <= in_dim; at += VF_LANES) {
        vf16 a = vf_load(x + at);
        a = vf_select(a < 0.0f, -a, a);
        bad |= ~(a <= FLT_MAX);
        vmax = vf_max(vmax, a);
    }
    float max = vf_hmax_nonan(vmax);
    int finite = !vi_any(bad);
    for (; at < in_dim; at++) {
        const float a = fabsf(x[at]);
        max = a > max ? a : max;
        finite &= a <= FLT_MAX; /* false for NaN and infinities */
    }
    for (int k = in_dim; k < in_pad; k++)
        xq[k] = 128;
    if (!finite) {
        *s = NAN;
        memset(xq, 128, (size_t)in_dim);
        return;
    }
    *s = max / 127.0f;
    const float inv = ac_quant_inverse(max), magic = 12582912.0f;
    int k = 0;
    for (; k + VF_LANES <= in_dim; k += VF_LANES) {
        vf16 v = (vf_load(x + k) * inv + magic) - magic;
        v = vf_min(vf_max(v, vf_splat(-127.0f)), vf_splat(127.0f));
        vb16 qb = __builtin_convertvector(__builtin_convertvector(v, vi16) + 128, vb16);
        memcpy(xq + k, &qb, sizeof qb);
    }
    for (; k < in_dim; k++) {
        float v = (x[k] * inv + magic) - magic;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        xq[k] = (uint8_t)((int)v + 128);
    }
}

/* acc[r][c] = sum_k xq[r][k] * w[o0 + c][k] for R rows and ncols (<= QCOLS,
 * a multiple of 16) outputs from o0 (a multiple of 16). */
static void tile_c(int32_t acc[QROWS][QCOLS], const uint8_t *xq, int in_pad, const int8_t *packed,
                   int o0, int ncols, int R)
{
    const int k4n = in_pad / 4;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < ncols; c++) {
            const int o = o0 + c;
            const int8_t *wb = packed + ((size_t)(o / 16) * k4n) * 64 + (o % 16) * 4;
            const uint8_t *x = xq + (size_t)r * in_pad;
            int32_t sum = 0;
            for (int k4 = 0; k4 < k4n; k4++)
                for (int j = 0; j < 4; j++)
                    sum += (int32_t)x[4 * k4 + j] * (int32_t)wb[(size_t)k4 * 64 + j];
            acc[r][c] = sum;
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* RR rows x NB vectors of 16 outputs, over all of K. */
static inline __attribute__((always_inline)) VNNI_TARGET void
vnni_block(int RR, int NB, int32_t acc[QROWS][QCOLS], int r0, const uint8_t *xq, int in_pad,
           const int8_t *wblocks, int k4n)
{
    __m512i a[4][4];
    for (int r = 0; r < RR; r++)
        for (int b = 0; b < NB; b++)
            a[r][b] = _mm512_setzero_si512();
    for (int k4 = 0; k4 < k4n; k4++) {
        __m512i w[4];
        for (int b = 0; b < NB; b++)
            w[b] = _mm512_load_si512((const void *)(wblocks + ((size_t)b * k4n + k4) * 64));
        for (int r = 0; r < RR; r++) {
            int32_t four;
            memcpy(&four, xq + (size_t)(r0 + r) * in_pad + 4 * k4, 4);
            __m512i x = _mm512_set1_epi32(four);
            for (int b = 0; b < NB; b++)
                a[r][b] = _mm512_dpbusd_epi32(a[r][b], x, w[b]);
        }
    }
    for (int r = 0; r < RR; r++)
        for (int b = 0; b < NB; b++)
            _mm512_storeu_si512((void *)&acc[r0 + r][b * 16], a[r][b]);
}

static VNNI_TARGET void tile_vnni(int32_t acc[QROWS][QCOLS], const uint8_t *xq, int in_pad,
                                  const int8_t *packed, int o0, int ncols, int R)
{
    const int k4n = in_pad / 4, nb = ncols / 16;
    const int8_t *wblocks = packed + (size_t)(o0 / 16) * k4n * 64;
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        switch (nb) {
        case 1: vnni_block(4, 1, acc, r, xq, in_pad, wblocks, k4n); break;
        case 2: vnni_block(4, 2, acc, r, xq, in_pad, wblocks, k4n); break;
        case 3: vnni_block(4, 3, acc, r, xq, in_pad, wblocks, k4n); break;
        default: vnni_block(4, 4, acc, r, xq, in_pad, wblocks, k4n); break;
        }
    }
    for (; r < R; r++) {
        switch (nb) {
        case 1: vnni_block(1, 1, acc, r, xq, in_pad, wblocks, k4n); break;
        case 2: vnni_block(1, 2, acc, r, xq, in_pad, wblocks, k4n); break;
        case 3: vnni_block(1, 3, acc, r, xq, in_pad, wblocks, k4n); break;
        default: vnni_block(1, 4, acc, r, xq, in_pad, wblocks, k4n); break;
        }
    }
}
#else
static void tile_vnni(int32_t acc[QROWS][QCOLS], const uint8_t *xq, int in_pad,
                      const int8_t *packed, int o0, int ncols, int R)
{
    tile_c(acc, xq, in_pad, packed, o0, ncols, R);
}
#endif

/* The layer, and with relu its ReLU as relu_forward computes it (in > 0 ?
 * in : 0, so NaN gives 0) on the way out: the pre-activations are never
 * written. */
static void qlinear_forward(float *out, const float *in, const ac_qlinear *l, const float *bias,
                            int N, int relu, ac_qkernel kernel)
{
    const int vnni = ac_qkernel_is_vnni(kernel);
    const int n_chunks = (N + QROWS - 1) / QROWS;
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (int chunk = 0; chunk < n_chunks; chunk++) {
        const int r0 = chunk * QROWS, R = N - r0 < QROWS ? N - r0 : QROWS;
        _Alignas(64) uint8_t xq[QROWS * AC_QLINEAR_MAX_IN];
        float sx[QROWS];
        int32_t acc[QROWS][QCOLS];
        for (int r = 0; r < R; r++)
            quantize_row(xq + (size_t)r * l->in_pad, &sx[r], in + (size_t)(r0 + r) * l->in_dim,
                         l->in_dim, l->in_pad);
        for (int o0 = 0; o0 < l->out_pad; o0 += QCOLS) {
            const int ncols = l->out_pad - o0 < QCOLS ? l->out_pad - o0 : QCOLS;
            if (vnni)
                tile_vnni(acc, xq, l->in_pad, l->packed, o0, ncols, R);
            else
                tile_c(acc, xq, l->in_pad, l->packed, o0, ncols, R);
            /* back to floats: the same code whichever kernel summed */
            const int cols = l->out_dim - o0 < ncols ? l->out_dim - o0 : ncols;
            for (int r = 0; r < R; r++) {
                float *o = out + (size_t)(r0 + r) * l->out_dim + o0;
                const vf16 vsx = vf_splat(sx[r]);
                int c = 0;
                for (; c + VF_LANES <= cols; c += VF_LANES) { /* the loop below, 16 at a time */
                    vi16 a, ws;
                    memcpy(&a, &acc[r][c], sizeof a);
                    memcpy(&ws, l->wsum + o0 + c, sizeof ws);
                    vf16 v = __builtin_convertvector(a - 128 * ws, vf16) *
                             (vsx * vf_load(l->scale + o0 + c));
                    if (bias)
                        v += vf_load(bias + o0 + c);
                    if (relu) {
                        const vf16 zero = {0};
                        v = vf_select(v > zero, v, zero);
                    }
                    vf_store(o + c, v);
                }
                for (; c < cols; c++) {
                    const int32_t dot = acc[r][c] - 128 * l->wsum[o0 + c];
                    float v = (float)dot * (sx[r] * l->scale[o0 + c]);
                    if (bias)
                        v += bias[o0 + c];
                    o[c] = !relu || v > 0.0f ? v : 0.0f;
                }
            }
        }
    }
}

void ac_qlinear_forward(float *out, const float *in, const ac_qlinear *l, const float *bias, int N,
                        ac_qkernel kernel)
{
    qlinear_forward(out, in, l, bias, N, 0, kernel);
}

void ac_qlinear_relu_forward(float *out, const float *in, const ac_qlinear *l, const float *bias,
                             int N, ac_qkernel kernel)
{
    qlinear_forward(out, in, l, bias, N, 1, kernel);
}
