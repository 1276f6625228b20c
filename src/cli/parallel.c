/* Loading the MPI plugin (see parallel.h). */
#include "parallel.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define PLUGIN_NAME "attnctl-mpi.so"

typedef int (*open_fn)(ac_comm **out, ac_err *err);
typedef void (*close_fn)(ac_comm *c, int failed, int ending);

/* ATTNCTL_MPI_PLUGIN, else beside the executable, else in ../lib/attnctl. */
static void *load_plugin(char *tried, size_t cap)
{
    const char *given = getenv("ATTNCTL_MPI_PLUGIN");
    if (given && *given) {
        snprintf(tried, cap, "%s", given);
        return dlopen(given, RTLD_NOW | RTLD_GLOBAL);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    char path[PATH_MAX + 64];
    /* RTLD_GLOBAL: Open MPI's own components resolve symbols of libmpi. */
    snprintf(path, sizeof path, "%s/%s", exe, PLUGIN_NAME);
    snprintf(tried, cap, "%s", path);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h)
        return h;
    snprintf(path, sizeof path, "%s/../lib/attnctl/%s", exe, PLUGIN_NAME);
    if (access(path, F_OK) == 0) {
        snprintf(tried, cap, "%s", path);
        return dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    }
    return NULL;
}

int cli_parallel_start(cli_parallel *p)
{
    memset(p, 0, sizeof *p);
    p->local_ranks = 1;
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (!world)
        return 0;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local && atoi(local) > 1)
        p->local_ranks = atoi(local);
    char tried[PATH_MAX + 64] = PLUGIN_NAME;
    p->plugin = load_plugin(tried, sizeof tried);
    if (!p->plugin) {
        const char *why = dlerror();
        return cli_error("started by mpirun, but the MPI plugin %s cannot be loaded (%s); "
                         "build attnctl where Open MPI is installed (libopenmpi-dev)",
                         tried, why ? why : "not found");
    }
    open_fn open_comm = (open_fn)(uintptr_t)dlsym(p->plugin, "attnctl_mpi_open");
    if (!open_comm || !dlsym(p->plugin, "attnctl_mpi_close"))
        return cli_error("%s is not attnctl's MPI plugin", tried);
    ac_err err;
    if (open_comm(&p->comm, &err))
        return cli_error("%s", err.msg);
    return 0;
}

void cli_parallel_finish(cli_parallel *p, int failed, int ending)
{
    if (!p->plugin)
        return;
    close_fn close_comm = (close_fn)(uintptr_t)dlsym(p->plugin, "attnctl_mpi_close");
    close_comm(p->comm, failed, ending);
    p->comm = NULL;
    /* The plugin stays loaded: MPI may still run exit handlers from it. */
}
