/*
 * host_memory.h: what the host can still give this process, so that the fuzzer skips a case
 * that would not fit (fuzz.c) instead of being killed by the kernel part way through a run,
 * its summary and reports unwritten.
 */
#ifndef INKLING_HOST_MEMORY_H
#define INKLING_HOST_MEMORY_H

#include <stdbool.h>

/* *bytes = Linux's MemAvailable (/proc/meminfo): the memory a process can allocate without
 * swapping. false (and *bytes untouched) where the host does not say. */
bool host_memory_available(double *bytes);

#endif
