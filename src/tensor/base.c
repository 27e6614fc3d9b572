/* mt's base: errors, the names of enums, the thread pool, the RNG, big buffers, the clock. */
#include "base.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* ---- errors -------------------------------------------------------------------------------- */

mt_status mt_errorf(mt_err *err, mt_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

const char *mt_enum_name(const mt_enum *e, int v) {
    return v >= 0 && v < e->n ? e->items[v].name : "?";
}

mt_status mt_enum_parse(const mt_enum *e, const char *name, int *v, mt_err *err) {
    for (int i = 0; i < e->n; i++)
        if (name && strcmp(name, e->items[i].name) == 0) return *v = i, MT_OK;
    char list[512] = "";
    for (int i = 0; i < e->n; i++) {
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", e->items[i].name);
    }
    return mt_errorf(err, MT_EINVAL, "unknown %s '%s' (accepted: %s)", e->what,
                     name ? name : "(none)", list);
}

const char *mt_enum_choices(const mt_enum *e, char *buf, size_t len) {
    buf[0] = 0;
    for (int i = 0; i < e->n; i++) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s", i ? "|" : "", e->items[i].name);
    }
    return buf;
}

void mt_fatal(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mt: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* ---- threads ------------------------------------------------------------------------------- */

void mt_set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n); /* OpenBLAS's OpenMP build reads the same setting */
}

int mt_threads(void) { return omp_get_max_threads(); }

/* ---- RNG: xoshiro256** (Blackman and Vigna), seeded through splitmix64 --------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void mt_rng_seed(mt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mt_rng_u64(mt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float mt_rng_uniform(mt_rng *r) { return (float)(mt_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float mt_rng_normal(mt_rng *r) {
    /* Box-Muller on (0, 1] x [0, 1), computed in double so the tails are right */
    double u1 = ((double)(mt_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(mt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint32_t mt_rng_below(mt_rng *r, uint32_t n) {
    return (uint32_t)(((mt_rng_u64(r) >> 32) * (uint64_t)n) >> 32);
}

/* ---- memory and time ---------------------------------------------------------------------- */

void *mt_alloc_big(size_t bytes) {
    bytes = (bytes ? bytes + 63 : 64) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    uintptr_t lo = ((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)((2u << 20) - 1);
    if (p && hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    return p;
}

double mt_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
