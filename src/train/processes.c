/* The trainer's processes (data-parallel training under mpirun): which
 * share of the work is this rank's, and the one way the ranks agree on
 * whether any failed or was asked to stop, so that all take the same path.
 * With one process (t->comm NULL) nothing is communicated. */
#include "trainer_internal.h"

void trainer_rank_share(const trainer *t, int64_t n, int64_t *begin, int64_t *end)
{
    const int64_t ranks = t->comm ? t->comm->size : 1, rank = t->comm ? t->comm->rank : 0;
    *begin = n * rank / ranks;
    *end = n * (rank + 1) / ranks;
}

int trainer_stop_requested(const trainer *t)
{
    return t->opt->stop && *t->opt->stop;
}

int trainer_share_eval_slots(trainer *t, size_t n, ac_err *err)
{
    if (!t->comm)
        return 0;
    return t->comm->sum_doubles(t->comm, t->eval_slots, n, err);
}

int processes_agree(ac_comm *comm, int failed_here, int stop_here, double *slots, size_t n,
                    const char *peer_msg, trainer_agreement *a, ac_err *err)
{
    a->failed = failed_here != 0;
    a->stopped = stop_here != 0;
    a->rank0_failed = failed_here && (!comm || comm->rank == 0);
    a->peer_failed = 0;
    a->failure_shared = 0;
    a->communicated = 0;
    if (!comm)
        return failed_here ? -1 : 0;
    double own[3];
    double *flags = slots ? slots + n : own;
    flags[0] = a->failed;
    flags[1] = a->stopped;
    flags[2] = a->rank0_failed;
    /* A communication error must not replace this process's own message. */
    ac_err local;
    if (comm->sum_doubles(comm, slots ? slots : own, slots ? n + 3 : 3, failed_here ? &local : err))
        return -1;
    a->communicated = 1;
    a->failed = flags[0] > 0;
    a->stopped = flags[1] > 0;
    a->rank0_failed = flags[2] > 0;
    if (!a->failed)
        return 0;
    /* One message is printed (the CLI keeps quiet when peer_failed): rank
     * 0's when it failed, else the failing rank's, with rank 0 pointing at it. */
    a->failure_shared = 1;
    if (failed_here) {
        a->peer_failed = comm->rank != 0 && a->rank0_failed;
        return -1; /* err holds this rank's message */
    }
    a->peer_failed = comm->rank != 0;
    return ac_err_set(err, "%s", peer_msg ? peer_msg : "another process failed (its message is above)");
}

int trainer_agree(trainer *t, int failed_here, int stop_here, double *slots, size_t n,
                  const char *peer_msg, trainer_agreement *a, ac_err *err)
{
    int rc = processes_agree(t->comm, failed_here, stop_here, slots, n, peer_msg, a, err);
    if (a->communicated)
        t->stop_agreed = a->stopped;
    if (a->failure_shared) {
        t->failure_shared = 1;
        t->peer_failed = a->peer_failed;
    }
    return rc;
}
