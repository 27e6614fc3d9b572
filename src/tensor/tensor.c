/* mt core runtime: errors, threads, RNG, arena, tensors, tape, parameter table. */
#include "tensor.h"

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

/* ---- tensors ------------------------------------------------------------------------------- */

size_t mt_shape_numel(int ndim, const int shape[]) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

mt_tensor mt_tensor_view(float *data, float *grad, int ndim, const int shape[]) {
    MT_ASSERT(ndim >= 1 && ndim <= MT_MAX_DIMS, "tensor: %d dims, 1 to %d supported", ndim,
              MT_MAX_DIMS);
    mt_tensor t = {.data = data, .grad = grad, .ndim = ndim, .requires_grad = grad != NULL};
    for (int i = 0; i < ndim; i++) {
        MT_ASSERT(shape[i] >= 1, "tensor: dim %d has size %d", i, shape[i]);
        t.shape[i] = shape[i];
    }
    t.n = mt_shape_numel(ndim, shape);
    return t;
}

bool mt_same_shape(const mt_tensor *a, const mt_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int mt_cols(const mt_tensor *x) { return x->shape[x->ndim - 1]; }
int mt_rows(const mt_tensor *x) { return (int)(x->n / (size_t)mt_cols(x)); }

const char *mt_shape_str(const mt_tensor *x, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < x->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %d" : "%d", x->shape[i]);
    if (k < len) snprintf(buf + k, len - k, ")");
    return buf;
}

/* ---- context and arena --------------------------------------------------------------------- */

void *mt_alloc_big(size_t bytes) {
    bytes = (bytes ? bytes + 63 : 64) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    uintptr_t lo = ((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)((2u << 20) - 1);
    if (p && hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    return p;
}

mt_status mt_ctx_init(mt_ctx *c, size_t arena_bytes, uint64_t seed, mt_err *err) {
    memset(c, 0, sizeof *c);
    /* A large block from malloc is an mmap: untouched pages cost no memory. */
    c->arena.base = mt_alloc_big(arena_bytes);
    if (!c->arena.base)
        return mt_errorf(err, MT_ENOMEM, "cannot reserve a %.1f MiB step arena",
                         arena_bytes / 1048576.0);
    c->arena.cap = (arena_bytes + 63) / 64 * 64;
    c->grad_enabled = true;
    c->training = true;
    mt_rng_seed(&c->rng, seed);
    return MT_OK;
}

void mt_ctx_free(mt_ctx *c) {
    free(c->arena.base);
    memset(c, 0, sizeof *c);
}

void mt_ctx_reset(mt_ctx *c) {
    c->arena.used = 0;
    c->bf16_input.of = NULL;
    c->tape = NULL;
    c->n_nodes = 0;
}

void *mt_arena_alloc(mt_ctx *c, size_t bytes) {
    mt_arena *a = &c->arena;
    size_t need = (bytes + 63) / 64 * 64;
    if (need > a->cap - a->used)
        mt_fatal(__FILE__, __LINE__,
                 "step arena exhausted: %zu bytes requested with %zu of %zu used (%.1f MiB "
                 "capacity); give the run a larger arena (train --arena-mb)",
                 bytes, a->used, a->cap, a->cap / 1048576.0);
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

float *mt_arena_floats(mt_ctx *c, size_t n) { return mt_arena_alloc(c, n * sizeof(float)); }

size_t mt_arena_mark(mt_ctx *c) { return c->arena.used; }

void mt_arena_release(mt_ctx *c, size_t mark) {
    MT_ASSERT(mark <= c->arena.used, "arena release to %zu above the %zu bytes in use", mark,
              c->arena.used);
    c->arena.used = mark;
    const unsigned char *lo = c->arena.base + mark; /* the cached input or its copy freed */
    if ((const unsigned char *)c->bf16_input.of >= lo ||
        (const unsigned char *)c->bf16_input.bf16 >= lo)
        c->bf16_input.of = NULL;
}

float *mt_arena_zeros(mt_ctx *c, size_t n) {
    float *p = mt_arena_floats(c, n);
    memset(p, 0, n * sizeof(float));
    return p;
}

mt_tensor *mt_tensor_new(mt_ctx *c, int ndim, const int shape[]) {
    mt_tensor *t = mt_arena_alloc(c, sizeof *t);
    *t = mt_tensor_view(NULL, NULL, ndim, shape);
    t->data = mt_arena_floats(c, t->n);
    return t;
}

mt_tensor *mt_tensor_zeros(mt_ctx *c, int ndim, const int shape[]) {
    mt_tensor *t = mt_tensor_new(c, ndim, shape);
    memset(t->data, 0, t->n * sizeof(float));
    return t;
}

mt_tensor *mt_tensor_like(mt_ctx *c, const mt_tensor *x) {
    return mt_tensor_new(c, x->ndim, x->shape);
}

mt_tensor *mt_tensor_from(mt_ctx *c, const float *src, int ndim, const int shape[]) {
    mt_tensor *t = mt_tensor_new(c, ndim, shape);
    memcpy(t->data, src, t->n * sizeof(float));
    return t;
}

/* ---- tape ---------------------------------------------------------------------------------- */

mt_node *mt_node_new(mt_ctx *c, const mt_op *op, mt_tensor *out, int n_in,
                     mt_tensor *const in[]) {
    MT_ASSERT(n_in <= MT_NODE_MAX_IN, "%s: %d inputs, at most %d", op->name, n_in,
              MT_NODE_MAX_IN);
    mt_node *n = mt_arena_alloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->op = op;
    n->ctx = c;
    n->out = out;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    return n;
}

/* The profile's row of op, added on first use. */
static int profile_row(mt_profile *p, const mt_op *op) {
    int i = 0;
    while (i < p->n && p->row[i].op != op) i++;
    MT_ASSERT(i < MT_PROFILE_OPS, "profile: more than %d kinds of op", MT_PROFILE_OPS);
    if (i == p->n) p->row[p->n++].op = op;
    return i;
}

double mt_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int profile_cmp(const void *a, const void *b) {
    const double *x = a, *y = b; /* {total, index} pairs, largest total first */
    return (x[0] < y[0]) - (x[0] > y[0]);
}

void mt_profile_print(const mt_profile *p, FILE *f) {
    double steps = p->steps > 0 ? (double)p->steps : 1.0, ops = 0.0, order[MT_PROFILE_OPS][2];
    for (int i = 0; i < p->n; i++) {
        order[i][0] = p->row[i].s[0] + p->row[i].s[1];
        order[i][1] = i;
        ops += order[i][0];
    }
    qsort(order, (size_t)p->n, sizeof order[0], profile_cmp);
    double total = p->step_s > ops ? p->step_s : ops;
    fprintf(f, "op profile: %ld steps, %.2f ms per step\n", p->steps, 1e3 * total / steps);
    fprintf(f, "%-16s %9s %12s %12s %7s\n", "op", "calls", "forward ms", "backward ms", "share");
    for (int k = 0; k < p->n; k++) {
        int i = (int)order[k][1];
        fprintf(f, "%-16s %9.0f %12.3f %12.3f %6.1f%%\n", p->row[i].op->name,
                (double)p->row[i].calls[0] / steps, 1e3 * p->row[i].s[0] / steps,
                1e3 * p->row[i].s[1] / steps, 100.0 * order[k][0] / total);
    }
    if (p->step_s > 0)
        fprintf(f, "%-16s %9s %12.3f %12s %6.1f%%\n", "(outside ops)", "-",
                1e3 * (p->step_s - ops) / steps, "-", 100.0 * (p->step_s - ops) / total);
}

/* n's forward (dir 0) or backward (dir 1), timed into c->profile when one is set; under
   c->threads, the calling thread's team size (the nthreads ICV, which mt's loops, mt_threads(),
   OpenBLAS and oneDNN read) is the budget for the op's length and then what it was. */
static void run_op(mt_ctx *c, mt_node *n, int dir) {
    void (*fn)(mt_node *) = dir ? n->op->backward : n->op->forward;
    int outer = c->threads > 0 && !omp_in_parallel() ? omp_get_max_threads() : 0;
    bool budget = c->threads < outer;
    if (budget) omp_set_num_threads(c->threads);
    if (!c->profile) {
        fn(n);
    } else {
        double t = mt_clock();
        fn(n);
        int i = profile_row(c->profile, n->op);
        c->profile->row[i].s[dir] += mt_clock() - t;
        c->profile->row[i].calls[dir]++;
    }
    if (budget) omp_set_num_threads(outer);
}

void mt_node_run(mt_ctx *c, mt_node *n) {
    run_op(c, n, 0);
    if (!c->grad_enabled) return;
    bool needs = false;
    for (int i = 0; i < n->n_in; i++) needs |= n->in[i] && n->in[i]->requires_grad;
    if (!needs) return;
    n->out->requires_grad = true;
    n->prev = c->tape;
    c->tape = n;
    c->n_nodes++;
}

float *mt_grad(mt_ctx *c, mt_tensor *x) {
    MT_ASSERT(x->requires_grad, "grad requested for a tensor that does not require grad");
    if (!x->grad) x->grad = mt_arena_zeros(c, x->n);
    return x->grad;
}

/* Activation gradients die early: every consumer of a tensor comes later on the tape, so once
   its own node's backward has run, nothing reads its gradient again. Its arena block is then
   released (the list lives in the blocks themselves) and handed, zeroed, to the next gradient of
   the same size. A training step's gradients then take the memory of a few layers instead of
   all of them. Parameter gradients (not in the arena) and y's own are never released. An op
   whose first input's gradient is its output's (grad_through: add) hands the block on to that
   input when it has none yet: the residual stream's gradient then costs no zeroing and no sum. */
typedef struct released {
    struct released *next;
    size_t bytes;
} released;

static size_t grad_bytes(const mt_tensor *x) { return (x->n * sizeof(float) + 63) / 64 * 64; }

static float *grad_reuse(mt_ctx *c, mt_tensor *x, released **pool) {
    if (x->grad) return x->grad;
    for (released **p = pool; *p; p = &(*p)->next)
        if ((*p)->bytes == grad_bytes(x)) {
            float *g = (float *)*p;
            *p = (*p)->next;
            memset(g, 0, x->n * sizeof(float));
            return x->grad = g;
        }
    return mt_grad(c, x);
}

/* With c->free_activations, n's output block (after n's backward: every reader of it came later
   on the tape and has run) joins the pool, unless it is y, outside the arena (a parameter) or an
   input's memory under another shape (reshape). */
static void release_output(mt_ctx *c, mt_node *n, const mt_tensor *y, released **pool) {
    unsigned char *d = (unsigned char *)n->out->data;
    if (!c->free_activations || n->out == y || d < c->arena.base ||
        d >= c->arena.base + c->arena.cap)
        return;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && n->in[i]->data == n->out->data) return;
    released *r = (released *)d;
    *r = (released){*pool, grad_bytes(n->out)};
    *pool = r;
}

void mt_backward_from(mt_ctx *c, mt_tensor *y, const float *dy) {
    MT_ASSERT(y->requires_grad, "backward: the output does not depend on any parameter");
    float *g = mt_grad(c, y);
    for (size_t i = 0; i < y->n; i++) g[i] += dy[i];
    released *pool = NULL;
    const unsigned char *lo = c->arena.base, *hi = lo + c->arena.cap;
    for (mt_node *n = c->tape; n; n = n->prev) {
        /* The tape was written during the forward, long ago: the node after next and the tensors
           of the next one are asked for while this one runs (the next node came in this way) */
        mt_node *p = n->prev;
        if (p && p->prev)
            __builtin_prefetch(p->prev), __builtin_prefetch((char *)p->prev + 64);
        for (int i = 0; p && i < p->n_in; i++) __builtin_prefetch(p->in[i]);
        if (p) __builtin_prefetch(p->out);
        if (!n->out->grad) continue; /* nothing flows back through this node */
        unsigned char *dead = (unsigned char *)n->out->grad;
        bool owned = n->out != y && dead >= lo && dead < hi, handed = false;
        mt_tensor *a = n->in[0];
        if (owned && n->grad_through && a && a->requires_grad && !a->grad)
            a->grad = n->out->grad, handed = true; /* not zeroed, summed nor released */
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && n->in[i]->requires_grad) grad_reuse(c, n->in[i], &pool);
        run_op(c, n, 1);
        if (c->after_backward) c->after_backward(n, c->after_backward_arg);
        release_output(c, n, y, &pool);
        if (!owned) continue;
        n->out->grad = NULL;
        if (handed) continue;
        released *r = (released *)dead;
        *r = (released){pool, grad_bytes(n->out)};
        pool = r;
    }
}

void mt_backward(mt_ctx *c, mt_tensor *loss) {
    MT_ASSERT(loss->n == 1, "backward: the loss has %zu elements, expected a scalar", loss->n);
    const float one = 1.0f;
    mt_backward_from(c, loss, &one);
}

/* ---- parameters ---------------------------------------------------------------------------- */

void mt_params_init_table(mt_params *P) { memset(P, 0, sizeof *P); }

int mt_params_add(mt_params *P, const char *name, int ndim, const int shape[], mt_param_role role,
                  mt_init_kind init, float init_value) {
    MT_ASSERT(!P->data, "params: '%s' added after mt_params_alloc", name);
    MT_ASSERT(mt_params_find(P, name) < 0, "params: '%s' added twice", name);
    MT_ASSERT(strlen(name) < sizeof P->p[0].name, "params: name '%s' is too long", name);
    if (P->n == P->cap) {
        P->cap = P->cap ? 2 * P->cap : 64;
        P->p = realloc(P->p, (size_t)P->cap * sizeof *P->p);
        MT_ASSERT(P->p, "params: out of memory for the table");
    }
    mt_param *e = &P->p[P->n];
    memset(e, 0, sizeof *e);
    strcpy(e->name, name);
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->n = mt_shape_numel(ndim, shape);
    e->offset = P->total;
    e->role = role;
    e->decay = role == MT_ROLE_MATRIX;
    e->init = init;
    e->init_value = init_value;
    P->total += (e->n + 15) / 16 * 16; /* keep every entry 64-byte aligned */
    return P->n++;
}

/* Zeroes P->grad and points P->t at each entry's data and gradient (none for buffers). */
static void params_bind(mt_params *P) {
    memset(P->grad, 0, (P->total ? P->total : 16) * sizeof(float));
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        bool trained = e->role != MT_ROLE_BUFFER;
        P->t[i] = mt_tensor_view(P->data + e->offset, trained ? P->grad + e->offset : NULL,
                                 e->ndim, e->shape);
        P->t[i].bf16 = P->bf16 ? P->bf16 + e->offset : NULL;
    }
}

mt_status mt_params_enable_bf16(mt_params *P, mt_err *err) {
    if (P->bf16) return MT_OK;
    size_t bytes = (P->total ? P->total : 16) * sizeof *P->bf16;
    if (!(P->bf16 = mt_alloc_big(bytes)))
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for the bf16 weights",
                         bytes / 1048576.0);
    for (int i = 0; i < P->n; i++) P->t[i].bf16 = P->bf16 + P->p[i].offset;
    mt_params_refresh_bf16(P);
    return MT_OK;
}

void mt_params_refresh_bf16(mt_params *P) {
    if (P->bf16) mt_bf16_from_floats(P->bf16, P->data, P->total);
}

mt_status mt_params_alloc(mt_params *P, mt_err *err) {
    size_t bytes = (P->total ? P->total : 16) * sizeof(float);
    P->data = mt_alloc_big(bytes);
    P->grad = mt_alloc_big(bytes);
    P->t = calloc((size_t)(P->n ? P->n : 1), sizeof *P->t);
    if (!P->data || !P->grad || !P->t)
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for %zu parameters",
                         2.0 * bytes / 1048576.0, P->total);
    memset(P->data, 0, bytes);
    params_bind(P);
    return MT_OK;
}

mt_status mt_params_view(const mt_params *P, mt_params *V, mt_err *err) {
    *V = *P;
    size_t bytes = (P->total ? P->total : 16) * sizeof(float);
    V->grad = mt_alloc_big(bytes);
    V->t = calloc((size_t)(P->n ? P->n : 1), sizeof *V->t);
    if (!V->grad || !V->t) {
        mt_params_view_free(V);
        return mt_errorf(err, MT_ENOMEM, "cannot allocate %.1f MiB for a copy of the gradients",
                         bytes / 1048576.0);
    }
    params_bind(V);
    return MT_OK;
}

void mt_params_view_free(mt_params *V) {
    free(V->grad);
    free(V->t);
    memset(V, 0, sizeof *V);
}

void mt_params_initialize(mt_params *P, mt_rng *r) {
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        float *w = P->data + e->offset;
        for (size_t j = 0; j < e->n; j++) {
            switch (e->init) {
            case MT_INIT_ZEROS: w[j] = 0.0f; break;
            case MT_INIT_ONES: w[j] = 1.0f; break;
            case MT_INIT_CONST: w[j] = e->init_value; break;
            case MT_INIT_NORMAL: w[j] = e->init_value * mt_rng_normal(r); break;
            }
        }
    }
}

int mt_params_find(const mt_params *P, const char *name) {
    for (int i = 0; i < P->n; i++)
        if (strcmp(P->p[i].name, name) == 0) return i;
    return -1;
}

size_t mt_params_count_trainable(const mt_params *P) {
    size_t n = 0;
    for (int i = 0; i < P->n; i++)
        if (P->p[i].role != MT_ROLE_BUFFER) n += P->p[i].n;
    return n;
}

void mt_params_zero_grad(mt_params *P) {
    if (P->grad) memset(P->grad, 0, P->total * sizeof(float));
}

void mt_params_free(mt_params *P) {
    free(P->p);
    free(P->bf16);
    free(P->data);
    free(P->grad);
    free(P->t);
    memset(P, 0, sizeof *P);
}
