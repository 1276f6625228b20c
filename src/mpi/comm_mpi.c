/* attnctl-mpi.so: the ac_comm of attnctl/comm.h on Open MPI. A plugin, not
 * part of the attnctl binary: linking libmpi into attnctl cost every command
 * (a cold `predict` too) about 3.5 ms of start-up, so attnctl loads this
 * only when it runs under mpirun (src/cli/parallel.c). It uses nothing of
 * attnctl but the header, so it links against libc and libmpi alone. */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnctl/comm.h"

/* Elements of one MPI call (counts are int). */
#define MAX_CHUNK ((size_t)1 << 26)
/* How long a collective may wait for the other processes before the job is
 * given up (seconds; ATTNCTL_MPI_TIMEOUT, 0: for ever). A dead process ends
 * the job through mpirun, but a stopped or hung one would make the others
 * wait for ever. The longest wait of a healthy job is rank 0 writing a
 * checkpoint while the others wait in the next step: seconds. */
#define DEFAULT_TIMEOUT_S 600.0
/* A wait polls without pause this long, then sleeps between polls so that a
 * long wait does not keep a core busy. */
#define SPIN_S 0.01
#define POLL_PAUSE_NS 200000L

typedef struct {
    ac_comm comm;
    MPI_Datatype int128_type;
    MPI_Op int128_sum;
    int *counts, *displs; /* [size] for gather_bytes */
    double timeout_s;     /* 0: wait for ever */
    int gave_up;          /* a collective timed out: every later one fails at once */
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

static int gave_up(const mpi_comm *m, const char *what, ac_err *err)
{
    if (err)
        snprintf(err->msg, sizeof err->msg,
                 "MPI: no word from the other processes for %g s while %s (is one stopped or "
                 "hung? ATTNCTL_MPI_TIMEOUT sets the wait)",
                 m->timeout_s, what);
    return -1;
}

/* Completes a started collective, or gives up after m->timeout_s. */
static int wait_for(mpi_comm *m, MPI_Request *req, const char *what, ac_err *err)
{
    if (m->timeout_s <= 0) {
        int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
        return rc == MPI_SUCCESS ? 0 : fail(err, rc, what);
    }
    const double t0 = MPI_Wtime();
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return fail(err, rc, what);
        if (done)
            return 0;
        const double waited = MPI_Wtime() - t0;
        if (waited > m->timeout_s) {
            m->gave_up = 1;
            return gave_up(m, what, err);
        }
        if (waited > SPIN_S)
            nanosleep(&(struct timespec){.tv_nsec = POLL_PAUSE_NS}, NULL);
    }
}

/* In-place all-reduce of n elements in chunks whose count fits an int. */
static int allreduce_chunked(mpi_comm *m, void *buf, size_t n, size_t elem_bytes,
                             MPI_Datatype type, MPI_Op op, const char *what, ac_err *err)
{
    if (m->gave_up)
        return gave_up(m, what, err);
    for (size_t at = 0; at < n; at += MAX_CHUNK) {
        size_t k = n - at < MAX_CHUNK ? n - at : MAX_CHUNK;
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * elem_bytes, (int)k, type, op,
                                MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS)
            return fail(err, rc, what);
        if (wait_for(m, &req, what, err))
            return -1;
    }
    return 0;
}

static int sum_int128(ac_comm *c, __int128 *buf, size_t n, ac_err *err)
{
    mpi_comm *m = (mpi_comm *)c;
    return allreduce_chunked(m, buf, n, sizeof *buf, m->int128_type, m->int128_sum,
                             "summing the gradients", err);
}

static int or_words(ac_comm *c, uint64_t *buf, size_t n, ac_err *err)
{
    return allreduce_chunked((mpi_comm *)c, buf, n, sizeof *buf, MPI_UINT64_T, MPI_BOR,
                             "merging the touched rows", err);
}

static int sum_doubles(ac_comm *c, double *buf, size_t n, ac_err *err)
{
    return allreduce_chunked((mpi_comm *)c, buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM,
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
    const char *what = "sharing the validation logits";
    if (m->gave_up)
        return gave_up(m, what, err);
    MPI_Request req;
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->counts, m->displs,
                             MPI_BYTE, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
        return fail(err, rc, what);
    return wait_for(m, &req, what, err);
}

/* ATTNCTL_MPI_TIMEOUT: seconds (0: for ever), or DEFAULT_TIMEOUT_S when unset. */
static int read_timeout(double *out, ac_err *err)
{
    const char *text = getenv("ATTNCTL_MPI_TIMEOUT");
    *out = DEFAULT_TIMEOUT_S;
    if (!text || !*text)
        return 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < 0 || v > 1e7) {
        if (err)
            snprintf(err->msg, sizeof err->msg,
                     "ATTNCTL_MPI_TIMEOUT: '%.40s' is not a number of seconds in 0..10000000 (0: "
                     "wait for ever)",
                     text);
        return -1;
    }
    *out = v;
    return 0;
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
    double timeout_s;
    if (read_timeout(&timeout_s, err))
        return -1;
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
    m->timeout_s = timeout_s;
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
    mpi_comm *m = (mpi_comm *)c;
    if (!m || allreduce_chunked(m, &any_ending, 1, sizeof any_ending, MPI_INT, MPI_MAX, "ending",
                                NULL)) {
        if (m && m->gave_up) {
            MPI_Abort(MPI_COMM_WORLD, 1); /* a process that never came: end the job */
            return;
        }
        any_ending = 1; /* an MPI error: leave without MPI_Finalize */
    }
    if (m) {
        MPI_Op_free(&m->int128_sum);
        MPI_Type_free(&m->int128_type);
        free(m->counts);
        free(m->displs);
        free(m);
    }
    if (!any_ending)
        MPI_Finalize();
}
