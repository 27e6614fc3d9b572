/* What the bench programs share: a clock (the wall, or CPU time) and sorting timings. */
#ifndef MT_BENCH_H
#define MT_BENCH_H

#include <stdlib.h>
#include <time.h>

/* Seconds on clock id: CLOCK_MONOTONIC (wall), CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID.
   */
static inline double bench_now(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort's comparison of doubles, ascending. */
static inline int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The CPU's name, as bench/env.sh finds it (MT_CPU), for the JSON lines; "?" when not set. */
static inline const char *bench_cpu(void) {
    const char *name = getenv("MT_CPU");
    return name && *name ? name : "?";
}

/* Sorts v (n >= 1) and returns its median. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
