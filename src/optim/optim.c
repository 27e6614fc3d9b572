/* The update: the walk over the parameter table's trainable entries, the threads, the gradient
 * read where it lies, and global-norm gradient clipping. The kinds' steps are in sgd.c, adam.c.
 *
 * Entries stepped in pieces are elementwise, so one OpenMP region splits their concatenation
 * (each entry padded to 16 floats) into equal 16-float-aligned ranges, one per thread, cut into
 * pieces of at most CHUNK floats within an entry (a deep model has ~1600 small entries: forking
 * per entry would cost more than the update). Entries stepped whole are spread over the same
 * threads in runs of about equal element counts. The gradient may lie in several buffers
 * (mt_grads: a step's replicas'): the passes add them up a chunk at a time as they go. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "optim.h"

/* ---- reading the gradient where it lies (mt_grads) ------------------------------------------ */

/* Floats of the gradient read at a time: 2 KiB, kept in L1 (the norm's passes). The update reads
   PIECE: with two replicas' buffers, a piece's gradient, data, moments and buffers are 24 KiB of
   the 32 KiB L1, and the step's call, once a piece, costs half of what it does at CHUNK. */
enum { CHUNK = 512, PIECE = 1024 };

/* The gradient at [off, off + n), n <= PIECE: coef * (g[0] + g[1] + ...), added in that order and
   scaled once, in x; or g[0] + off itself when it alone holds it unscaled. */
static const float *grads_read(const mt_grads *G, size_t off, size_t n, float coef,
                               float *restrict x) {
    if (G->n == 1 && coef == 1.0f) return G->g[0] + off;
    memcpy(x, G->g[0] + off, n * sizeof *x);
    for (int r = 1; r < G->n; r++) {
        const float *restrict g = G->g[r] + off;
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] += g[i];
    }
    if (coef != 1.0f)
#pragma omp simd
        for (size_t i = 0; i < n; i++) x[i] *= coef;
    return x;
}

/* What a pass leaves in the buffers: the gradient it used in g[0] (KEEP), or zeros (ZERO); both
   zero the other buffers, whose part is then in g[0] or consumed. */
typedef enum { GRADS_KEEP, GRADS_ZERO } grads_after;

/* After a pass over [off, off + n) that read x = grads_read(...). */
static void grads_done(const mt_grads *G, size_t off, size_t n, const float *x, grads_after a) {
    if (a == GRADS_ZERO) memset(G->g[0] + off, 0, n * sizeof(float));
    else if (x != G->g[0] + off) memcpy(G->g[0] + off, x, n * sizeof(float));
    for (int r = 1; r < G->n; r++) memset(G->g[r] + off, 0, n * sizeof(float));
}

/* ---- init, free ---------------------------------------------------------------------------- */

static void apply_decay_scope(mt_params *P, mt_decay_scope scope) {
    for (int i = 0; i < P->n; i++) {
        mt_param *e = &P->p[i];
        if (e->role == MT_ROLE_BUFFER) e->decay = false;
        else if (scope == MT_DECAY_ALL) e->decay = true;
        else if (scope == MT_DECAY_EMBEDDINGS && e->role == MT_ROLE_EMBEDDING) e->decay = true;
    }
}

static float *zeros(size_t n) {
    float *x = mt_alloc_big(n * sizeof(float));
    if (x) memset(x, 0, n * sizeof(float));
    return x;
}

static size_t padded(size_t n) { return (n + 15) / 16 * 16; }

/* Weight decay on an entry kept on the unit sphere is undone by the renormalisation after the
   step (it only lengthens the step a little): refused, naming the entry. */
static mt_status unit_decay_check(const mt_optim_config *c, const mt_params *P, mt_err *err) {
    double wd = c->weight_decay > 0                          ? c->weight_decay
                : c->kind == MT_OPTIM_MUON && c->muon_wd > 0 ? c->muon_wd
                                                             : 0;
    for (int i = 0; wd > 0 && i < P->n; i++)
        if (P->p[i].unit && P->p[i].decay)
            return mt_errorf(err, MT_EINVAL,
                             "weight decay %g reaches %s, which is kept on the unit sphere "
                             "(renormalised after every step, which undoes the decay; nGPT trains "
                             "without it): give --weight-decay 0%s",
                             wd, P->p[i].name, c->kind == MT_OPTIM_MUON ? " --muon-wd 0" : "");
    return MT_OK;
}

/* The per-entry lr, weight-decay and eps scales of --param mup and completep (mt_param) are
   AdamW's rules (Adam's, with L2 decay): the other kinds' steps read none, refused. */
static mt_status scales_check(const mt_optim_config *c, const mt_params *P, mt_err *err) {
    if (c->kind == MT_OPTIM_ADAM || c->kind == MT_OPTIM_ADAMW) return MT_OK;
    for (int i = 0; i < P->n; i++) {
        const mt_param *e = &P->p[i];
        if (e->lr_scale != 1 || e->wd_scale != 1 || e->eps_scale != 1)
            return mt_errorf(err, MT_EINVAL,
                             "--optim %s with --param mup or completep: refused: their per-tensor "
                             "lr, weight-decay and eps scales (%s: lr x %g, wd x %g, eps x %g) "
                             "are AdamW's rules, and mt builds no %s variant of them; use --optim "
                             "adamw (or adam), or --param sp",
                             mt_enum_name(&MT_OPTIMS, c->kind), e->name, e->lr_scale, e->wd_scale,
                             e->eps_scale, mt_enum_name(&MT_OPTIMS, c->kind));
    }
    return MT_OK;
}

int mt_optim_state_slots(const mt_optim_config *c) {
    MT_ASSERT((unsigned)c->kind < (unsigned)MT_OPTIMS.n, "optim: unknown kind %d", (int)c->kind);
    return mt_optim_types[c->kind]->slots(c);
}

/* The walk: the trainable entries stepped in pieces, then those stepped whole, each group in
   table order with its running float count; the scratch a whole step needs, per thread. */
static bool plan_walk(mt_optim *o, const mt_params *P) {
    const mt_optim_type *ty = o->type;
    o->walk = calloc((size_t)P->n + 1, sizeof *o->walk);
    o->at = calloc((size_t)P->n + 2, sizeof *o->at);
    if (!o->walk || !o->at) return false;
    for (int whole = 0; whole < 2; whole++)
        for (int i = o->first; i < o->last; i++) {
            const mt_param *e = &P->p[i];
            if (!mt_param_trained(e) || (ty->whole && ty->whole(&o->cfg, e)) != whole) continue;
            int j = o->n_pieces + o->n_whole;
            o->walk[j] = i;
            if (whole) {
                o->whole_floats += e->n, o->n_whole++;
                if (ty->scratch && ty->scratch(&o->cfg, e) > o->scratch_floats)
                    o->scratch_floats = ty->scratch(&o->cfg, e);
            } else {
                o->at[j] = o->piece_floats, o->piece_floats += padded(e->n), o->n_pieces++;
            }
        }
    o->at[o->n_pieces] = o->piece_floats; /* the end of the last piece's entry */
    if (!o->scratch_floats) return true;
    o->n_scratch = mt_threads();
    o->scratch = mt_alloc_big((size_t)o->n_scratch * o->scratch_floats * sizeof(float));
    return o->scratch != NULL;
}

/* Whether type steps any trainable entry of P whole. */
static bool any_whole(const mt_optim_type *type, const mt_optim_config *c, const mt_params *P) {
    for (int i = 0; type->whole && i < P->n; i++)
        if (mt_param_trained(&P->p[i]) && type->whole(c, &P->p[i])) return true;
    return false;
}

/* The state of entries [first, last) of P for type. */
static mt_status init_range(mt_optim *o, const mt_optim_type *type, const mt_optim_config *c,
                            mt_params *P, int first, int last, mt_err *err) {
    memset(o, 0, sizeof *o);
    MT_ASSERT(P->data, "optim: the parameters are not allocated");
    mt_status s = mt_optim_validate(c, err);
    if (s == MT_OK && type->validate && type != mt_optim_types[c->kind]) s = type->validate(c, err);
    if (s != MT_OK) return s;
    o->cfg = *c;
    o->type = type;
    o->total = P->grad_total;
    o->first = first, o->last = last;
    o->lo = first < P->n ? P->p[first].grad_offset : P->grad_total;
    o->hi = last < P->n ? P->p[last].grad_offset : P->grad_total;
    o->n_slots = type->slots(c);
    MT_ASSERT(o->n_slots >= 0 && o->n_slots <= MT_OPTIM_MAX_SLOTS, "optim %s: %d slots", type->name,
              o->n_slots);
    apply_decay_scope(P, c->decay_scope);
    if ((s = unit_decay_check(c, P, err)) != MT_OK) return s;
    if ((s = scales_check(c, P, err)) != MT_OK) return s;
    bool ok = plan_walk(o, P);
    if (ok && type->needs_whole && !any_whole(type, c, P)) {
        mt_optim_free(o);
        return mt_errorf(err, MT_EINVAL,
                         "--optim %s steps the hidden 2-D matrices whole, and this model has "
                         "none; use --optim adamw",
                         type->name);
    }
    for (int k = 0; k < o->n_slots && ok; k++) ok = (o->slot[k] = zeros(o->hi - o->lo)) != NULL;
    if (!ok) {
        mt_optim_free(o);
        return mt_errorf(err, MT_ENOMEM, "optim: cannot allocate the state for %zu parameters",
                         o->hi - o->lo);
    }
    return MT_OK;
}

mt_status mt_optim_init_type(mt_optim *o, const mt_optim_type *type, const mt_optim_config *c,
                             mt_params *P, mt_err *err) {
    return init_range(o, type, c, P, 0, P->n, err);
}

mt_status mt_optim_init_shard(mt_optim *o, const mt_optim_config *c, mt_params *P, int first,
                              int last, mt_err *err) {
    MT_ASSERT(0 <= first && first <= last && last <= P->n, "optim: shard [%d, %d) of %d entries",
              first, last, P->n);
    if ((unsigned)c->kind >= (unsigned)MT_OPTIMS.n) { /* its message, before indexing */
        memset(o, 0, sizeof *o);
        return mt_optim_validate(c, err);
    }
    return init_range(o, mt_optim_types[c->kind], c, P, first, last, err);
}

mt_status mt_optim_init(mt_optim *o, const mt_optim_config *c, mt_params *P, mt_err *err) {
    return mt_optim_init_shard(o, c, P, 0, P->n, err);
}

void mt_optim_free(mt_optim *o) {
    for (int k = 0; k < MT_OPTIM_MAX_SLOTS; k++) free(o->slot[k]);
    free(o->walk);
    free(o->at);
    free(o->scratch);
    memset(o, 0, sizeof *o);
}

/* ---- the update ------------------------------------------------------------------------------ */

/* What every piece of one update shares. */
typedef struct {
    const mt_optim *o;
    mt_params *P;
    const mt_grads *G;
    float coef;
    grads_after after;
    const void *k; /* the kind's scalars */
} update_ctx;

/* Entry e's first element, its gradient g: the step's view, lo and n to be set. */
static mt_optim_tensor tensor_of(const update_ctx *u, const mt_param *e, const float *g) {
    mt_optim_tensor x = {.e = e, .p = u->P->data + e->offset, .g = g};
    for (int k = 0; k < u->o->n_slots; k++) x.s[k] = u->o->slot[k] + (e->grad_offset - u->o->lo);
    return x;
}

/* x moved on by d elements. */
static void tensor_advance(mt_optim_tensor *x, size_t d, int n_slots) {
    x->lo += d, x->p += d;
    for (int k = 0; k < n_slots; k++) x->s[k] += d;
}

/* Floats [a, b) of the pieces' concatenation, a and b multiples of 16, PIECE floats at a time:
   each piece's gradient read into L1, stepped, the buffers done, its bf16 copy rounded. */
static void walk_pieces(const update_ctx *u, size_t a, size_t b) {
    const mt_optim *o = u->o;
    float x[PIECE] __attribute__((aligned(64)));
    int lo = 0, hi = o->n_pieces; /* the last entry j with at[j] <= a */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (o->at[mid] <= a) lo = mid;
        else hi = mid;
    }
    for (int j = lo; j < o->n_pieces && o->at[j] < b; j++) {
        const mt_param *e = &u->P->p[o->walk[j]];
        size_t from = a > o->at[j] ? a - o->at[j] : 0, to = o->at[j + 1] - o->at[j];
        if (b < o->at[j + 1]) to = b - o->at[j];
        mt_optim_tensor t = tensor_of(u, e, NULL);
        tensor_advance(&t, from, o->n_slots);
        for (; t.lo < to; tensor_advance(&t, t.n, o->n_slots)) {
            size_t off = e->grad_offset + t.lo;
            t.n = to - t.lo < PIECE ? to - t.lo : PIECE;
            t.g = grads_read(u->G, off, t.n, u->coef, x);
            o->type->step(&t, u->k);
            grads_done(u->G, off, t.n, t.g, u->after);
            if (u->P->bf16) /* while in L1 */
                mt_bf16_from_floats(u->P->bf16 + e->offset + t.lo, t.p, t.n);
        }
    }
}

/* Entry e whole: its gradient summed and clipped into g[0] in place (the other buffers zeroed),
   stepped, then zeroed unless kept; its bf16 copy rounded. */
static void step_whole(const update_ctx *u, const mt_param *e, float *scratch) {
    float x[PIECE] __attribute__((aligned(64)));
    size_t N = padded(e->n), at = e->grad_offset;
    for (size_t off = at; off < at + N; off += PIECE) {
        size_t n = at + N - off < PIECE ? at + N - off : PIECE;
        grads_done(u->G, off, n, grads_read(u->G, off, n, u->coef, x), GRADS_KEEP);
    }
    mt_optim_tensor t = tensor_of(u, e, u->G->g[0] + at);
    t.n = e->n, t.scratch = scratch, t.bf16 = u->P->bf16 != NULL;
    u->o->type->step(&t, u->k);
    if (u->after == GRADS_ZERO) memset(u->G->g[0] + at, 0, N * sizeof(float));
    if (u->P->bf16) mt_bf16_from_floats(u->P->bf16 + e->offset, t.p, e->n);
}

/* Part id of T of the entries stepped whole: those whose first element falls in the part's
   share of whole_floats (their elements counted in walk order). */
static void walk_whole(const update_ctx *u, size_t id, size_t T) {
    const mt_optim *o = u->o;
    size_t a = o->whole_floats * id / T, b = o->whole_floats * (id + 1) / T, at = 0;
    float *scratch = o->scratch ? o->scratch + id * o->scratch_floats : NULL;
    for (int j = o->n_pieces; j < o->n_pieces + o->n_whole && at < b; j++) {
        const mt_param *e = &u->P->p[o->walk[j]];
        if (at >= a) step_whole(u, e, scratch);
        at += e->n;
    }
}

void mt_optim_update(mt_optim *o, mt_params *P, const mt_grads *G, double lr, float coef,
                     bool keep) {
    MT_ASSERT(P->grad_total == o->total, "optim: the gradients have %zu floats, the state %zu",
              P->grad_total, o->total);
    MT_ASSERT(G->n >= 1 && G->g[0] == P->grad, "optim: the gradient's first buffer is not P->grad");
    o->t++;
    union {
        double d;
        unsigned char b[MT_OPTIM_SCALARS];
    } k;
    o->type->scalars(&o->cfg, o->t, lr, k.b);
    update_ctx u = {o, P, G, coef, keep ? GRADS_KEEP : GRADS_ZERO, k.b};
    size_t W = o->piece_floats;                                              /* a multiple of 16 */
    size_t T = W + o->whole_floats >= MT_PAR_MIN ? (size_t)mt_threads() : 1; /* one a thread */
    size_t TW = o->n_scratch && (size_t)o->n_scratch < T ? (size_t)o->n_scratch : T;
    MT_PARALLEL_FOR(T > 1, for (size_t id = 0; id < T; id++) {
        size_t lo = W * id / T / 16 * 16, hi = id + 1 == T ? W : W * (id + 1) / T / 16 * 16;
        walk_pieces(&u, lo, hi);
        if (id < TW) walk_whole(&u, id, TW);
    });
    mt_params_normalize_units(P); /* nGPT's matrices back onto the unit sphere */
}

void mt_optim_step(mt_optim *o, mt_params *P, double lr) {
    mt_optim_update(o, P, &(mt_grads){.g = &P->grad, .n = 1}, lr, 1.0f, true);
}

/* ---- the gradient's passes: norm, sum, clipping --------------------------------------------- */

/* The partial sums of squares of x[0..n): acc[j] += x[i]^2 for i = j mod 16 over x's whole
   16-float groups, the rest into acc[0] (the order of GCC's `omp simd reduction`, which the norm
   used before its passes read several buffers, written out: it does not depend on the compiler's
   choice of vectors). A range read in pieces of whole groups adds up as one. */
static void sumsq(const float *x, size_t n, double acc[16]) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) acc[0] += (double)x[i] * x[i];
}

double mt_grads_sumsq(const mt_grads *G, size_t total) {
    size_t T = total >= MT_PAR_MIN ? (size_t)mt_threads() : 1; /* parts, one a thread */
    double part[T];
    MT_PARALLEL_FOR(T > 1, for (size_t id = 0; id < T; id++) {
        float x[CHUNK] __attribute__((aligned(64)));
        size_t lo = total * id / T, hi = total * (id + 1) / T;
        double acc[16] = {0};
        for (size_t off = lo; off < hi; off += CHUNK) {
            size_t n = hi - off < CHUNK ? hi - off : CHUNK;
            sumsq(grads_read(G, off, n, 1.0f, x), n, acc);
        }
        double s = 0;
        for (int j = 0; j < 16; j++) s += acc[j];
        part[id] = s;
    });
    double s = 0;
    for (size_t i = 0; i < T; i++) s += part[i];
    return s;
}

double mt_grads_norm(const mt_grads *G, size_t total) { return sqrt(mt_grads_sumsq(G, total)); }

double mt_optim_grad_norm(const mt_params *P) {
    return mt_grads_norm(&(mt_grads){.g = &P->grad, .n = 1}, P->grad_total);
}

/* g[0] = coef * the sum, the other buffers zeroed: one pass over [0, total). */
static void grads_store(const mt_grads *G, size_t total, float coef) {
    size_t T = total >= MT_PAR_MIN ? (size_t)mt_threads() : 1; /* ranges, one a thread */
    MT_PARALLEL_FOR(T > 1, for (size_t id = 0; id < T; id++) {
        float x[CHUNK] __attribute__((aligned(64)));
        size_t lo = total * id / T / 16 * 16;
        size_t hi = id + 1 == T ? total : total * (id + 1) / T / 16 * 16;
        for (size_t off = lo; off < hi; off += CHUNK) {
            size_t n = hi - off < CHUNK ? hi - off : CHUNK;
            grads_done(G, off, n, grads_read(G, off, n, coef, x), GRADS_KEEP);
        }
    });
}

void mt_grads_sum(const mt_grads *G, size_t total) {
    if (G->n > 1) grads_store(G, total, 1.0f);
}

float mt_optim_clip_coef(double norm, double max_norm) {
    double coef = max_norm / (norm + 1e-6);
    return max_norm > 0 && isfinite(norm) && coef < 1 ? (float)coef : 1.0f;
}

double mt_optim_clip(mt_params *P, double max_norm) {
    double norm = mt_optim_grad_norm(P);
    float coef = mt_optim_clip_coef(norm, max_norm);
    if (coef != 1.0f) grads_store(&(mt_grads){.g = &P->grad, .n = 1}, P->grad_total, coef);
    return norm;
}

int mt_params_first_nonfinite(const mt_params *P) {
    for (int i = 0; i < P->n; i++) {
        if (P->p[i].frozen) continue;
        const float *g = P->grad + P->p[i].grad_offset;
        for (size_t j = 0; j < P->p[i].n; j++)
            if (!isfinite(g[j])) return i;
    }
    return -1;
}
