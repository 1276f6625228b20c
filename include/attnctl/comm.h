/* What the trainer needs from the processes it trains with (data-parallel
 * training under mpirun). The library never links MPI: the CLI hands it an
 * ac_comm whose functions call MPI (src/mpi/comm_mpi.c, a plugin loaded only
 * under mpirun), or none for a single process. Every function is collective:
 * all ranks call it, in the same order, with the same sizes. */
#ifndef ATTNCTL_COMM_H
#define ATTNCTL_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"

typedef struct ac_comm ac_comm;
struct ac_comm {
    int rank, size;
    /* In place: the element-wise sum over the ranks of n signed 128-bit
     * integers (exact: the same result for any order). */
    int (*sum_int128)(ac_comm *c, __int128 *buf, size_t n, ac_err *err);
    /* In place: the element-wise OR of n words. */
    int (*or_words)(ac_comm *c, uint64_t *buf, size_t n, ac_err *err);
    /* In place: the element-wise sum of n doubles. Exact as the trainer uses
     * it: each element has one rank that may hold a value other than 0. */
    int (*sum_doubles)(ac_comm *c, double *buf, size_t n, ac_err *err);
    /* In place: rank r's bytes [offsets[r], offsets[r + 1]) of buf are copied
     * to every other rank (offsets has size + 1 entries). */
    int (*gather_bytes)(ac_comm *c, void *buf, const size_t *offsets, ac_err *err);
    void *impl;
};

#endif
