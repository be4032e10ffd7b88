/*
 * host_memory.c: MemAvailable from /proc/meminfo (host_memory.h).
 */
#include "host_memory.h"

#include <stdio.h>

bool host_memory_available(double *bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *bytes = (double)kib * 1024.0;
            found = true;
        }
    }
    fclose(f);
    return found;
}
