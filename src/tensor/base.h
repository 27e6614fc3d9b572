/* mt's base, which every other part uses and which uses no other part of mt: errors and
 * status codes, the names of enums, MT_ASSERT, the thread pool and MT_PARALLEL_FOR, the RNG,
 * long-lived aligned buffers and the clock. */
#ifndef MT_BASE_H
#define MT_BASE_H

#include <omp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Files are read and written as little-endian bytes (safetensors, llama2.c, GGUF, token files)
   straight from memory: a big-endian host is refused here. So is a 32-bit one: sizes of tensors,
   arenas and files are size_t, token shards are mapped whole, and the vector code assumes SSE or
   NEON arithmetic (i386's x87 evaluates floats in long double). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "mt reads and writes tensors in the host's byte order, which must be little-endian");
_Static_assert(sizeof(void *) == 8 && sizeof(off_t) == 8,
               "mt builds for 64-bit targets only (x86-64, aarch64), not i386 or armhf");

/* The most dims of a tensor, a parameter, or an array read from a file (safetensors, IDX). */
#define MT_MAX_DIMS 4

/* ---- errors ---------------------------------------------------------------------------------
 * A bug (broken invariant) is MT_ASSERT: file:line, message, abort.
 * Bad input (flag, config, file) is an mt_status plus a message in a caller-owned mt_err. */
typedef enum {
    MT_OK = 0,
    MT_EINVAL,    /* a value from the user (flag, config key, option) is wrong */
    MT_EIO,       /* a file could not be opened, read, written or renamed */
    MT_EFORMAT,   /* a file's contents are malformed (checkpoint, token file, dataset) */
    MT_ENOMEM,    /* an allocation failed or would not fit */
    MT_EDIVERGED, /* training stopped: a step's loss or gradient is not finite */
} mt_status;

typedef struct {
    mt_status status;
    char msg[1024];
} mt_err;

/* Fills err (which may be NULL) with the formatted message and returns status. */
mt_status mt_errorf(mt_err *err, mt_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- names of enums ------------------------------------------------------------------------
 * An enum whose values are 0..n-1 has one table of {name, help, title}: the flags, config keys,
 * --help and JSON all read it, so a value's name is written once. what names the enum in
 * messages. title: a method's name in plots and tables ("Pre-LN", scripts/plot-runs through
 * build/methods.json), NULL: none. */
typedef struct {
    const char *name, *help, *title;
} mt_enum_item;
typedef struct {
    const char *what; /* "norm" */
    int n;
    const mt_enum_item *items;
} mt_enum;
#define MT_ENUM(what_, items_)                                                                     \
    { .what = what_, .n = (int)(sizeof items_ / sizeof items_[0]), .items = items_ }

const char *mt_enum_name(const mt_enum *e, int v); /* "?" out of range */
/* *v = the value named name; else MT_EINVAL "unknown <what> 'x' (accepted: a (help), b, ...)". */
mt_status mt_enum_parse(const mt_enum *e, const char *name, int *v, mt_err *err);
/* "a|b|c" into buf (truncated to len). */
const char *mt_enum_choices(const mt_enum *e, char *buf, size_t len);

_Noreturn void mt_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define MT_ASSERT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) mt_fatal(__FILE__, __LINE__, __VA_ARGS__);                                    \
    } while (0)

/* ---- threads --------------------------------------------------------------------------------
 * One OpenMP pool shared by mt's loops and OpenBLAS (its OpenMP build). n <= 0: all cores. */
void mt_set_threads(int n);
int mt_threads(void);

/* Loops shorter than this many elements run on one thread: fork/join costs more than it saves. */
#define MT_PAR_MIN 16384

/* MT_PARALLEL_FOR(cond, loop): the for statement `loop` split across the pool when cond holds and
   no parallel region is active, else run inline (inside a replica every op keeps to its thread).
   `#pragma omp parallel for if (cond)` would open a region of one thread instead, and libgomp's
   set-up of it costs ~0.4 us at top level and ~1.3 us nested (a team allocated and freed each
   time): a deep100 step opened ~2700 of them a replica. A pragma inside `loop` is written
   _Pragma("..."); `loop` is expanded by these macros themselves, never handed on to another
   macro: GCC 11 runs a _Pragma of an argument passed on at the outer macro's place (before the
   `do`). MT_PARALLEL_FOR_SIMD: "omp parallel for simd", inline "omp simd". Inline,
   omp_get_thread_num() is the enclosing team's (a replica's): per-thread scratch must not be
   indexed by it there (attention.c's thread_slot); for the same reason a bare `omp parallel`
   block that splits work by thread number cannot run inline this way: make its parts the loop's
   iterations instead, as many as mt_threads() (mt_gemm, optim.c). With one thread in the pool
   (--threads 1) the loop also runs inline: a team of one would cost the region's set-up for
   nothing (a step of configs/nanogpt-char.ini opened 53 of them). */
#define MT_PARALLEL_FOR(cond, ...)                                                                 \
    do {                                                                                           \
        if (MT_PARALLEL_OK_(cond)) {                                                               \
            _Pragma("omp parallel for") __VA_ARGS__                                                \
        } else {                                                                                   \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)
#define MT_PARALLEL_FOR_SIMD(cond, ...)                                                            \
    do {                                                                                           \
        if (MT_PARALLEL_OK_(cond)) {                                                               \
            _Pragma("omp parallel for simd") __VA_ARGS__                                           \
        } else {                                                                                   \
            _Pragma("omp simd") __VA_ARGS__                                                        \
        }                                                                                          \
    } while (0)
#define MT_PARALLEL_OK_(cond) ((cond) && !omp_in_parallel() && omp_get_max_threads() > 1)

/* ---- RNG: xoshiro256**, explicit state (saved in checkpoints for exact resume) ------------- */
typedef struct {
    uint64_t s[4];
} mt_rng;

void mt_rng_seed(mt_rng *r, uint64_t seed);
uint64_t mt_rng_u64(mt_rng *r);
float mt_rng_uniform(mt_rng *r);              /* [0, 1) with 24 random bits */
float mt_rng_normal(mt_rng *r);               /* N(0, 1), Box-Muller, no cached spare */
uint32_t mt_rng_below(mt_rng *r, uint32_t n); /* uniform integer in [0, n) */

/* ---- memory and time ------------------------------------------------------------------------ */
/* A large, long-lived buffer (arenas, parameters, gradients, optimizer state): 64-byte aligned,
   its size rounded up to 64 bytes, transparent huge pages (2 MiB) asked for its whole 2 MiB pages
   (fewer TLB misses when kernels stream through it; advice only). NULL when out of memory;
   give it back with free. */
void *mt_alloc_big(size_t bytes);
double mt_clock(void); /* seconds, CLOCK_MONOTONIC */

/* ---- a hash index of names ------------------------------------------------------------------
 * Finds an item of an array by its name in O(1) (the parameter table, a safetensors header), so
 * that matching n names against n is linear, not quadratic. The names stay in the caller's
 * items: item i's name is the string at (char *)items + i * stride. The index keeps item numbers
 * only, so the caller may move its array (realloc) between calls. */
typedef struct {
    uint64_t *slot; /* cap slots: the name's hash in the high 32 bits, the item number + 1 in
                       the low 32 (0: empty); open addressing */
    size_t cap;     /* a power of two, at least twice the items; 0 before the first add */
    int n;
} mt_name_index;

/* The item whose name is name, -1 when none. */
int mt_name_index_find(const mt_name_index *x, const void *items, size_t stride, const char *name);
/* Adds item i unless an item of its name is there already: returns that item, else i (added), or
   -1 when out of memory. */
int mt_name_index_add(mt_name_index *x, const void *items, size_t stride, int i);
void mt_name_index_free(mt_name_index *x);

#endif
