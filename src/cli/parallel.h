/* Data-parallel training under mpirun: MPI from the plugin attnctl-mpi.so,
 * loaded only when mpirun started us (OMPI_COMM_WORLD_SIZE is set), so that
 * no other command, and no single-process run, pays for MPI's start-up. */
#ifndef ATTNCTL_CLI_PARALLEL_H
#define ATTNCTL_CLI_PARALLEL_H

#include "attnctl/comm.h"

typedef struct {
    ac_comm *comm; /* NULL: one process */
    void *plugin;
    int local_ranks; /* ranks on this machine (for the default thread count) */
} cli_parallel;

/* Launched by mpirun: loads the plugin and starts MPI. 0 (p->comm NULL when
 * not under mpirun), or an exit status after printing why. */
int cli_parallel_start(cli_parallel *p);
/* Ends MPI; failed: the job is ended (the other ranks may be waiting).
 * ending: this process was told to end by its launcher (SIGTERM); then all
 * meet and, if any was told, leave without MPI_Finalize (src/mpi/comm_mpi.c). */
void cli_parallel_finish(cli_parallel *p, int failed, int ending);

#endif
