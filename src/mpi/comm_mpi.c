/* attnctl-mpi.so: the ac_comm of attnctl/comm.h on Open MPI. A plugin, not
 * part of the attnctl binary: linking libmpi into attnctl cost every command
 * (a cold `predict` too) about 3.5 ms of start-up, so attnctl loads this
 * only when it runs under mpirun (src/cli/parallel.c). It uses nothing of
 * attnctl but the header, so it links against libc and libmpi alone. */
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/comm.h"

/* Elements of one MPI call (counts are int). */
#define MAX_CHUNK ((size_t)1 << 26)

typedef struct {
    ac_comm comm;
    MPI_Datatype int128_type;
    MPI_Op int128_sum;
    int *counts, *displs; /* [size] for gather_bytes */
} mpi_comm;

static int fail(ac_err *err, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(code, text, &len);
    if (err)
        snprintf(err->msg, sizeof err->msg, "MPI: %s failed: %s", what, text);
    return -1;
}

/* The sum of 128-bit integers, for MPI_Allreduce (memcpy: MPI buffers need
 * not be 16-byte aligned). */
static void int128_add(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const char *a = in;
    char *b = inout;
    for (int i = 0; i < *len; i++) {
        __int128 x, y;
        memcpy(&x, a + 16 * (size_t)i, 16);
        memcpy(&y, b + 16 * (size_t)i, 16);
        /* Wrapping addition (unsigned): the caller keeps sums in range. */
        y = (__int128)((unsigned __int128)x + (unsigned __int128)y);
        memcpy(b + 16 * (size_t)i, &y, 16);
    }
}

/* In-place MPI_Allreduce of n elements in chunks whose count fits an int. */
static int allreduce_chunked(void *buf, size_t n, size_t elem_bytes, MPI_Datatype type, MPI_Op op,
                             const char *what, ac_err *err)
{
    for (size_t at = 0; at < n; at += MAX_CHUNK) {
        size_t k = n - at < MAX_CHUNK ? n - at : MAX_CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * elem_bytes, (int)k, type, op,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(err, rc, what);
    }
    return 0;
}

static int sum_int128(ac_comm *c, __int128 *buf, size_t n, ac_err *err)
{
    mpi_comm *m = (mpi_comm *)c;
    return allreduce_chunked(buf, n, sizeof *buf, m->int128_type, m->int128_sum,
                             "summing the gradients", err);
}

static int or_words(ac_comm *c, uint64_t *buf, size_t n, ac_err *err)
{
    (void)c;
    return allreduce_chunked(buf, n, sizeof *buf, MPI_UINT64_T, MPI_BOR,
                             "merging the touched rows", err);
}

static int sum_doubles(ac_comm *c, double *buf, size_t n, ac_err *err)
{
    (void)c;
    return allreduce_chunked(buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM,
                             "sharing the step's figures", err);
}

static int gather_bytes(ac_comm *c, void *buf, const size_t *offsets, ac_err *err)
{
    mpi_comm *m = (mpi_comm *)c;
    for (int r = 0; r < c->size; r++) {
        if (offsets[r + 1] - offsets[r] > INT_MAX || offsets[r] > INT_MAX) {
            if (err)
                snprintf(err->msg, sizeof err->msg,
                         "MPI: a share of the validation logits is over 2 GiB");
            return -1;
        }
        m->counts[r] = (int)(offsets[r + 1] - offsets[r]);
        m->displs[r] = (int)offsets[r];
    }
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->counts, m->displs,
                            MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : fail(err, rc, "sharing the validation logits");
}

/* Starts MPI (it must be the first MPI call of the process). 0 with *out
 * set, or -1 with err filled. */
int attnctl_mpi_open(ac_comm **out, ac_err *err)
{
    *out = NULL;
    int rc = MPI_Init(NULL, NULL);
    if (rc != MPI_SUCCESS)
        return fail(err, rc, "MPI_Init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_comm *m = calloc(1, sizeof *m);
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (m) {
        m->counts = calloc((size_t)size, sizeof *m->counts);
        m->displs = calloc((size_t)size, sizeof *m->displs);
    }
    if (!m || !m->counts || !m->displs) {
        if (m) {
            free(m->counts);
            free(m->displs);
        }
        free(m);
        if (err)
            snprintf(err->msg, sizeof err->msg, "MPI: out of memory");
        return -1;
    }
    if ((rc = MPI_Type_contiguous(16, MPI_BYTE, &m->int128_type)) != MPI_SUCCESS ||
        (rc = MPI_Type_commit(&m->int128_type)) != MPI_SUCCESS ||
        (rc = MPI_Op_create(int128_add, 1, &m->int128_sum)) != MPI_SUCCESS) {
        free(m->counts);
        free(m->displs);
        free(m);
        return fail(err, rc, "setting up the 128-bit sum");
    }
    m->comm = (ac_comm){.rank = rank,
                        .size = size,
                        .sum_int128 = sum_int128,
                        .or_words = or_words,
                        .sum_doubles = sum_doubles,
                        .gather_bytes = gather_bytes,
                        .impl = m};
    *out = &m->comm;
    return 0;
}

/* Ends MPI. failed: this rank stops with an error the others may not share
 * (they could wait for it forever), so the whole job is ended. ending: this
 * rank was told to end by its launcher (SIGTERM): Open MPI's mpirun, asked to
 * stop the job (Ctrl-C), sends SIGTERM to every process and SIGKILL one
 * second later, or as soon as one of them exits. The processes therefore
 * meet first (rank 0 has saved its checkpoint by then, so no exit kills it
 * mid-save) and agree whether any was told to end; if so they leave without
 * MPI_Finalize, whose exchange with the launcher would wait for a launcher
 * that is busy killing the job (measured: 2 s, past the SIGKILL). */
void attnctl_mpi_close(ac_comm *c, int failed, int ending)
{
    if (failed) {
        MPI_Abort(MPI_COMM_WORLD, 1);
        return;
    }
    int any_ending = ending != 0;
    if (MPI_Allreduce(MPI_IN_PLACE, &any_ending, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        any_ending = 1;
    if (c) {
        mpi_comm *m = (mpi_comm *)c;
        MPI_Op_free(&m->int128_sum);
        MPI_Type_free(&m->int128_type);
        free(m->counts);
        free(m->displs);
        free(m);
    }
    if (!any_ending)
        MPI_Finalize();
}
