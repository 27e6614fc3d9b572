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

/* ---- a hash index of names ----------------------------------------------------------------- */

static const char *item_name(const void *items, size_t stride, int i) {
    return (const char *)items + (size_t)i * stride;
}

static uint32_t name_hash(const char *s) { /* FNV-1a, 32 bits */
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot holding name (of hash h), or the empty slot where it would go; items NULL: the first
   empty slot (a rehash, whose names are all different). */
static size_t name_slot(const mt_name_index *x, const void *items, size_t stride, const char *name,
                        uint32_t h) {
    size_t k = h & (x->cap - 1);
    for (; x->slot[k]; k = (k + 1) & (x->cap - 1))
        if (items && x->slot[k] >> 32 == h &&
            strcmp(item_name(items, stride, (int)(uint32_t)x->slot[k] - 1), name) == 0)
            break;
    return k;
}

int mt_name_index_find(const mt_name_index *x, const void *items, size_t stride, const char *name) {
    if (!x->cap) return -1;
    return (int)(uint32_t)x->slot[name_slot(x, items, stride, name, name_hash(name))] - 1;
}

int mt_name_index_add(mt_name_index *x, const void *items, size_t stride, int i) {
    if (2 * ((size_t)x->n + 1) > x->cap) { /* grow to keep it at most half full, then rehash */
        mt_name_index bigger = {.cap = x->cap ? 2 * x->cap : 64, .n = x->n};
        if (!(bigger.slot = calloc(bigger.cap, sizeof *bigger.slot))) return -1;
        for (size_t k = 0; k < x->cap; k++)
            if (x->slot[k])
                bigger.slot[name_slot(&bigger, NULL, 0, NULL, (uint32_t)(x->slot[k] >> 32))] =
                    x->slot[k];
        free(x->slot);
        *x = bigger;
    }
    const char *name = item_name(items, stride, i);
    uint32_t h = name_hash(name);
    uint64_t *slot = &x->slot[name_slot(x, items, stride, name, h)];
    if (*slot) return (int)(uint32_t)*slot - 1;
    *slot = (uint64_t)h << 32 | (uint32_t)(i + 1);
    x->n++;
    return i;
}

void mt_name_index_free(mt_name_index *x) {
    free(x->slot);
    *x = (mt_name_index){0};
}
