/* The OpenBLAS forwarder linked into attnctl (see include/attnctl/blas.h):
 * cblas_sgemm defined here calls OpenBLAS's own, looked up once. */
#include <cblas.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "attnctl/blas.h"

/* Debian's soname (libopenblas0-pthread, or -openmp / -serial). */
#define OPENBLAS_SONAME "libopenblas.so.0"

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, float, const float *, blasint, const float *, blasint,
                         float, float *, blasint);
typedef char *(*corename_fn)(void);
typedef void (*set_threads_fn)(int);

/* Process-wide state, unavoidable: cblas_sgemm has a fixed signature with no
 * room for a context, so the function it forwards to lives here. Written once
 * by ac_blas_load in main before any thread starts, only read afterwards. */
static struct {
    sgemm_fn sgemm;
    corename_fn corename;
} blas;

int ac_blas_load(ac_err *err)
{
    if (blas.sgemm)
        return 0;
    void *lib = dlopen(OPENBLAS_SONAME, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return ac_err_set(err, "cannot load OpenBLAS (%s): %s; install libopenblas0",
                          OPENBLAS_SONAME, why ? why : "not found");
    }
    sgemm_fn sgemm = (sgemm_fn)(uintptr_t)dlsym(lib, "cblas_sgemm");
    if (!sgemm)
        return ac_err_set(err, "%s has no cblas_sgemm", OPENBLAS_SONAME);
    blas.corename = (corename_fn)(uintptr_t)dlsym(lib, "openblas_get_corename");
    set_threads_fn set_threads = (set_threads_fn)(uintptr_t)dlsym(lib, "openblas_set_num_threads");
    /* attnctl's own OpenMP loops call sgemm on row blocks: one thread each. */
    if (set_threads)
        set_threads(1);
    blas.sgemm = sgemm;
    return 0;
}

const char *ac_blas_corename(void)
{
    const char *name = blas.corename ? blas.corename() : NULL;
    return name ? name : "unknown";
}

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER Order, OPENBLAS_CONST enum CBLAS_TRANSPOSE TransA,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE TransB, OPENBLAS_CONST blasint M,
                 OPENBLAS_CONST blasint N, OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha,
                 OPENBLAS_CONST float *A, OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *B,
                 OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float *C,
                 OPENBLAS_CONST blasint ldc)
{
    /* main loads OpenBLAS before any command runs (predict: cli_infer_open,
     * for a model that needs it); reaching here without it is a bug, and a
     * null call would crash anyway. */
    if (!blas.sgemm)
        __builtin_trap();
    blas.sgemm(Order, TransA, TransB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
