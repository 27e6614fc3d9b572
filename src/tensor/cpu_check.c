/* The start-up check of the CPU against the instruction sets the build was compiled for
 * (-march=native takes the building machine's): a binary moved to an older CPU says which set it
 * lacks and how to rebuild, instead of dying with SIGILL before any output. This file alone is
 * compiled for the x86-64 baseline, with the sets the build's -march enables listed by the
 * Makefile in cpu_needs.h (#define MT_CPU_NEEDS X("avx2") X("fma") ...); the check runs as a
 * constructor, before main and any code of those sets, and every link keeps it
 * (-Wl,-u,mt_cpu_check). A build without the list (another architecture, the fuzzers) checks
 * nothing. */
#include <errno.h> /* program_invocation_short_name */
#include <stdio.h>
#include <stdlib.h>

#if __has_include(<cpu_needs.h>) /* generated in the build directory */
#include <cpu_needs.h>
#endif

#ifdef MT_CPU_NEEDS
/* The first set the build needs and this CPU lacks, or NULL. */
static const char *missing_set(void) {
    __builtin_cpu_init();
#define X(name)                                                                                    \
    if (!__builtin_cpu_supports(name)) return name;
    MT_CPU_NEEDS
#undef X
    return NULL;
}
#else
static const char *missing_set(void) { return NULL; }
#endif

__attribute__((constructor(101))) void mt_cpu_check(void) {
    const char *set = missing_set();
    if (!set) return;
    fprintf(stderr,
            "%s: this build of mt uses the CPU's %s instructions (compiled with -march=native on "
            "a newer CPU), and this CPU has none: rebuild on this machine (make clean && make), "
            "or for any x86-64 CPU (make clean && make PORTABLE=1)\n",
            program_invocation_short_name, set);
    exit(1);
}
