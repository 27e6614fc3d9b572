/* The tensor runtime: tensor headers, the context and its step arena, the tape and backward. */
#include "tensor.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "gemm.h"
#include "profile.h"

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
    c->bf16_copy.of = NULL;
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
    const unsigned char *lo = c->arena.base + mark; /* the copied input or its copy freed */
    if ((const unsigned char *)c->bf16_copy.of >= lo ||
        (const unsigned char *)c->bf16_copy.bf16 >= lo)
        c->bf16_copy.of = NULL;
}

const mt_bf16 *mt_ctx_bf16(mt_ctx *c, const float *x, size_t n) {
    if (c->bf16_copy.of == x && c->bf16_copy.n == n) return c->bf16_copy.bf16;
    mt_bf16 *xb = mt_arena_alloc(c, n * sizeof *xb);
    mt_bf16_from_floats(xb, x, n);
    c->bf16_copy.of = x, c->bf16_copy.n = n, c->bf16_copy.bf16 = xb;
    return xb;
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

mt_node *mt_node_new(mt_ctx *c, const mt_op *op, mt_tensor *out, int n_in, mt_tensor *const in[]) {
    MT_ASSERT(n_in <= MT_NODE_MAX_IN, "%s: %d inputs, at most %d", op->name, n_in, MT_NODE_MAX_IN);
    mt_node *n = mt_arena_alloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->op = op;
    n->ctx = c;
    n->out = out;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    return n;
}

static const mt_op OP_RECOMPUTE; /* mt_recompute's node: its ops are timed one by one */

/* n's forward (dir 0) or backward (dir 1), timed into c->profile when one is set; under
   c->threads, the calling thread's team size (the nthreads ICV, which mt's loops, mt_threads(),
   OpenBLAS and oneDNN read) is the budget for the op's length and then what it was. */
static void run_op(mt_ctx *c, mt_node *n, int dir) {
    void (*fn)(mt_node *) = dir ? n->op->backward : n->op->forward;
    int outer = c->threads > 0 && !omp_in_parallel() ? omp_get_max_threads() : 0;
    bool budget = c->threads < outer;
    if (budget) omp_set_num_threads(c->threads);
    if (!c->profile || n->op == &OP_RECOMPUTE) {
        fn(n);
    } else {
        double t = mt_clock();
        fn(n);
        mt_profile_add(c->profile, n->op, dir, mt_clock() - t);
    }
    if (budget) omp_set_num_threads(outer);
}

static void record(mt_ctx *c, mt_node *n) {
    n->out->requires_grad = true;
    n->prev = c->tape;
    c->tape = n;
    c->n_nodes++;
}

void mt_node_run(mt_ctx *c, mt_node *n) {
    run_op(c, n, 0);
    if (!c->grad_enabled) return;
    bool needs = false;
    for (int i = 0; i < n->n_in; i++) needs |= n->in[i] && n->in[i]->requires_grad;
    if (needs) record(c, n);
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
        d >= c->arena.base + c->arena.cap || n->out->grad == n->out->data) /* grad_in_place's: */
        return; /* released as the gradient it became */
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && n->in[i]->data == n->out->data) return;
    released *r = (released *)d;
    *r = (released){*pool, grad_bytes(n->out)};
    *pool = r;
}

/* The backward of the nodes from n down the tape, y's gradient set (y: the tensor backward
   started from, whose block is never released; NULL inside a recomputed segment). The released
   blocks are c->free_grads. */
static void backward_nodes(mt_ctx *c, mt_node *n, const mt_tensor *y) {
    released **pool = (released **)&c->free_grads;
    const unsigned char *lo = c->arena.base, *hi = lo + c->arena.cap;
    for (; n; n = n->prev) {
        /* The tape was written during the forward, long ago: the node after next and the tensors
           of the next one are asked for while this one runs (the next node came in this way) */
        mt_node *p = n->prev;
        if (p && p->prev) __builtin_prefetch(p->prev), __builtin_prefetch((char *)p->prev + 64);
        for (int i = 0; p && i < p->n_in; i++) __builtin_prefetch(p->in[i]);
        if (p) __builtin_prefetch(p->out);
        if (!n->out->grad) continue; /* nothing flows back through this node */
        unsigned char *dead = (unsigned char *)n->out->grad;
        bool owned = n->out != y && dead >= lo && dead < hi, handed = false;
        mt_tensor *a = n->in[0];
        if (owned && n->grad_through && a && a->requires_grad && !a->grad)
            a->grad = n->out->grad, handed = true; /* not zeroed, summed nor released */
        const unsigned char *ad = a ? (const unsigned char *)a->data : NULL;
        if (n->grad_in_place && c->free_activations && a->requires_grad && !a->grad && ad >= lo &&
            ad < hi)
            a->grad = a->data; /* not zeroed: the backward writes every element */
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && n->in[i]->requires_grad) grad_reuse(c, n->in[i], pool);
        run_op(c, n, 1);
        if (c->after_backward) c->after_backward(n, c->after_backward_arg);
        release_output(c, n, y, pool);
        /* a recomputed segment hands its output's gradient on inside (and clears it) */
        if (!owned || !n->out->grad) continue;
        n->out->grad = NULL;
        if (handed) continue;
        released *r = (released *)dead;
        *r = (released){*pool, grad_bytes(n->out)};
        *pool = r;
    }
}

void mt_backward_from(mt_ctx *c, mt_tensor *y, const float *dy) {
    MT_ASSERT(y->requires_grad, "backward: the output does not depend on any parameter");
    float *g = mt_grad(c, y);
    for (size_t i = 0; i < y->n; i++) g[i] += dy[i];
    c->free_grads = NULL;
    backward_nodes(c, c->tape, y);
    c->free_grads = NULL;
}

void mt_backward(mt_ctx *c, mt_tensor *loss) {
    MT_ASSERT(loss->n == 1, "backward: the loss has %zu elements, expected a scalar", loss->n);
    static const float one = 1.0f;
    mt_backward_from(c, loss, &one);
}

/* ---- recomputation ------------------------------------------------------------------------- */

/* mt_recompute's node (n->p): fn, its arg and input, the RNG it started with, and the tensors
   outside the segment that its nodes read (mt_node_reads). */
typedef struct {
    mt_segment_fn fn;
    const void *arg;
    mt_tensor *x;
    mt_rng rng;
    mt_tensor **reads;
    int n_reads;
} segment;

static bool in_range(const void *p, const unsigned char *lo, const unsigned char *hi) {
    return (const unsigned char *)p >= lo && (const unsigned char *)p < hi;
}

int mt_node_reads(const mt_node *n, mt_tensor *const **reads) {
    if (n->op != &OP_RECOMPUTE) return *reads = n->in, n->n_in;
    const segment *s = n->p;
    return *reads = s->reads, s->n_reads;
}

/* The tensors requiring grad that the nodes from n down to (not including) end read, outside the
   arena's [lo, hi): each once, in the arena; their count in *k. */
static mt_tensor **outside_reads(mt_ctx *c, const mt_node *n, const mt_node *end,
                                 const unsigned char *lo, const unsigned char *hi, int *k) {
    size_t most = 0;
    mt_tensor *const *r;
    for (const mt_node *m = n; m != end; m = m->prev) most += (size_t)mt_node_reads(m, &r);
    mt_tensor **out = mt_arena_alloc(c, most * sizeof *out);
    *k = 0;
    for (const mt_node *m = n; m != end; m = m->prev)
        for (int i = mt_node_reads(m, &r) - 1; i >= 0; i--) {
            mt_tensor *t = r[i];
            int j = 0;
            if (!t || !t->requires_grad || in_range(t, lo, hi)) continue;
            while (j < *k && out[j] != t) j++;
            if (j == *k) out[(*k)++] = t;
        }
    return out;
}

/* Never run: mt_recompute runs the segment's ops itself. */
static void recompute_forward(mt_node *n) {
    MT_ASSERT(0, "recompute: node %p runs its segment's ops, not a forward", (void *)n);
}

/* After a segment's backward (its arena from mark): the released blocks above mark forgotten,
   the gradients of the tensors outside the segment that lie above mark moved down to mark in
   address order (each to a place no higher than its own), and the rest given back. */
static void keep_outside_grads(mt_ctx *c, const segment *s, size_t mark) {
    const unsigned char *lo = c->arena.base + mark, *hi = c->arena.base + c->arena.cap;
    for (released **p = (released **)&c->free_grads; *p;)
        if (in_range(*p, lo, hi)) *p = (*p)->next;
        else p = &(*p)->next;
    mt_tensor *keep[MT_NODE_MAX_IN];
    int k = 0;
    for (int i = 0; i < s->n_reads; i++) {
        mt_tensor *t = s->reads[i];
        if (!t->grad || !in_range(t->grad, lo, hi)) continue;
        MT_ASSERT(k < MT_NODE_MAX_IN, "recompute: more than %d outside gradients", k);
        int j = k++;
        for (; j > 0 && keep[j - 1]->grad > t->grad; j--) keep[j] = keep[j - 1];
        keep[j] = t;
    }
    mt_arena_release(c, mark);
    for (int i = 0; i < k; i++) {
        float *g = mt_arena_floats(c, keep[i]->n);
        memmove(g, keep[i]->grad, keep[i]->n * sizeof *g);
        keep[i]->grad = g;
    }
}

/* fn again from x with the RNG it had, then the backward of what it recorded, from the segment's
   output gradient, which goes on inside as the first recording's did. */
static void recompute_backward(mt_node *n) {
    mt_ctx *c = n->ctx;
    segment *s = n->p;
    size_t mark = mt_arena_mark(c), count = c->n_nodes;
    mt_node *tape = c->tape;
    mt_rng rng = c->rng;
    c->tape = NULL, c->rng = s->rng, c->replaying = true;
    mt_tensor *y = s->fn(c, s->x, s->arg);
    mt_node *inner = c->tape;
    c->tape = tape, c->n_nodes = count, c->rng = rng, c->replaying = false;
    y->grad = n->out->grad;
    n->out->grad = NULL;
    backward_nodes(c, inner, NULL);
    keep_outside_grads(c, s, mark);
}

static const mt_op OP_RECOMPUTE = {.name = "recompute",
                                   .forward = recompute_forward,
                                   .backward = recompute_backward};

/* y, computed from mark on, moved down to out's data at mark (no higher than its place): the
   arena above it given back. */
static void keep_output(mt_ctx *c, mt_tensor *out, const mt_tensor *y, size_t mark) {
    *out = *y;
    out->grad = NULL;
    mt_arena_release(c, mark);
    out->data = mt_arena_floats(c, y->n);
    memmove(out->data, y->data, y->n * sizeof(float));
}

mt_tensor *mt_recompute(mt_ctx *c, mt_tensor *x, mt_segment_fn fn, const void *arg,
                        size_t arg_bytes) {
    mt_tensor *out = mt_arena_alloc(c, sizeof *out);
    if (!c->grad_enabled) { /* nothing to record: only y is kept */
        size_t mark = mt_arena_mark(c);
        keep_output(c, out, fn(c, x, arg), mark);
        return out;
    }
    segment *s = mt_arena_alloc(c, sizeof *s);
    void *a = mt_arena_alloc(c, arg_bytes);
    memcpy(a, arg, arg_bytes);
    mt_node *n = mt_node_new(c, &OP_RECOMPUTE, out, 0, NULL);
    *s = (segment){.fn = fn, .arg = a, .x = x, .rng = c->rng};
    n->p = s;
    mt_node *tape = c->tape;
    size_t mark = mt_arena_mark(c), count = c->n_nodes;
    mt_tensor *y = fn(c, x, a);
    if (c->tape == tape) return y; /* nothing recorded: nothing to recompute */
    int k;
    mt_tensor **reads = outside_reads(c, c->tape, tape, c->arena.base + mark,
                                      c->arena.base + c->arena.used, &k);
    /* y's data, then the list (above it), moved down over the segment */
    keep_output(c, out, y, mark);
    s->reads = mt_arena_alloc(c, (size_t)k * sizeof *reads);
    memmove(s->reads, reads, (size_t)k * sizeof *reads);
    s->n_reads = k;
    c->tape = tape, c->n_nodes = count;
    record(c, n);
    return out;
}
