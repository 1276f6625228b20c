/* The machine: its CPU flags and its FP32 peak, against which bench and
 * bench --model report the share their matmuls reach. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int cli_cpu_has_flag(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    int found = 0;
    size_t n = strlen(flag);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
            if ((p == line || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0')) {
                found = 1;
                break;
            }
        break; /* the first CPU's flags are enough */
    }
    fclose(f);
    return found;
}

void cli_machine_peak(machine_peak *mp)
{
    memset(mp, 0, sizeof *mp);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    mp->cores = cores > 0 ? (int)cores : 1;
    const char *clock_source = NULL;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
    if (f) {
        double khz = 0;
        if (fscanf(f, "%lf", &khz) == 1 && khz > 0) {
            mp->ghz = khz / 1e6;
            clock_source = "cpufreq cpuinfo_max_freq";
        }
        fclose(f);
    }
    if (mp->ghz <= 0 && (f = fopen("/proc/cpuinfo", "r"))) {
        char line[512];
        double mhz, best = 0;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "cpu MHz", 7) == 0) {
                char *colon = strchr(line, ':');
                if (colon && sscanf(colon + 1, "%lf", &mhz) == 1 && mhz > best)
                    best = mhz;
            }
        fclose(f);
        if (best > 0) {
            mp->ghz = best / 1000.0;
            clock_source = "highest 'cpu MHz' in /proc/cpuinfo";
        }
    }
    if (cli_cpu_has_flag("avx512f")) {
        mp->lanes = 16;
        mp->isa = "AVX-512";
    } else if (cli_cpu_has_flag("fma")) {
        mp->lanes = 8;
        mp->isa = "AVX2 FMA";
    } else {
        mp->lanes = 4;
        mp->isa = "SSE";
    }
    /* Two FMA units per core is an assumption (true of recent x86 server cores). */
    mp->gflops = mp->cores * 2.0 * mp->lanes * 2.0 * mp->ghz;
    if (clock_source)
        snprintf(mp->how, sizeof mp->how,
                 "%d cores x 2 FMA units x %d FP32 lanes (%s) x 2 flops x %.3f GHz (%s)",
                 mp->cores, mp->lanes, mp->isa, mp->ghz, clock_source);
    else
        snprintf(mp->how, sizeof mp->how, "unknown: no CPU clock in cpufreq or /proc/cpuinfo");
}
