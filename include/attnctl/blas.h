/* OpenBLAS for attnctl itself, loaded with dlopen once its environment is set.
 *
 * Debian's OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS when it
 * loads. Linked normally it loads before main, so attnctl had to set them
 * and re-execute itself: about 10 ms and a second dynamic linking of
 * OpenBLAS, more than half of a cold `predict`. attnctl is therefore not
 * linked with OpenBLAS: src/nn/openblas_loader.c defines cblas_sgemm (which
 * src/nn/linear.c calls) and forwards it to OpenBLAS's own, looked up by
 * ac_blas_load. That file is linked into attnctl only, not into the library
 * archive: the test programs link the library with -lopenblas directly. */
#ifndef ATTNCTL_BLAS_H
#define ATTNCTL_BLAS_H

#include "attnctl/error.h"

/* Loads OpenBLAS (once; its environment variables set before): 0, or -1
 * with err set. Before any thread starts: it writes the process-wide
 * forwarding state. */
int ac_blas_load(ac_err *err);

/* The kernel family OpenBLAS chose ("SkylakeX"), or "unknown". */
const char *ac_blas_corename(void);

#endif
