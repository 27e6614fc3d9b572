/* SGD, Adam and AdamW over the flat parameter buffer, and global-norm gradient clipping.
 *
 * The update is elementwise, so one OpenMP region splits the concatenated spans of trainable
 * entries into equal 16-float-aligned ranges, one per thread (a deep model has ~1600 small
 * entries: forking per entry would cost more than the update). Per-step scalars are computed in
 * double, as torch does in Python, and rounded to float once. The gradient may lie in several
 * buffers (mt_grads: a step's replicas'): the passes add them up a chunk at a time as they go. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

/* ---- kernels: n floats of one span; l2 and keep carry the span's weight decay ---------------- */

/* SGD: d = g + l2*p;  b = mu*b + d (b starts at 0, so the first step gives b = d, as torch's
   clone);  d = nesterov ? d + mu*b : b;  p -= lr*d.  b == NULL: no momentum. */
static void sgd_kernel(float *restrict p, const float *restrict g, float *restrict b, size_t n,
                       float lr, float l2, float mu, bool nesterov) {
    if (!b) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + l2 * p[i]);
        return;
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + l2 * p[i];
        b[i] = mu * b[i] + d;
        p[i] -= lr * (nesterov ? d + mu * b[i] : b[i]);
    }
}

typedef struct {
    float b1, b2, omb1, omb2; /* beta1, beta2, 1 - beta1, 1 - beta2 */
    float step_size;          /* lr / (1 - beta1^t) */
    float bc2_sqrt;           /* sqrt(1 - beta2^t) */
    float eps;
} adam_coef;

/* Adam and AdamW: g' = g + l2*p;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
   p = keep*p - step_size * m / (sqrt(v)/bc2_sqrt + eps).
   Adam's L2 decay is l2 = wd, keep = 1; AdamW's decoupled decay is l2 = 0, keep = 1 - lr*wd. */
static void adam_kernel(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, size_t n, const adam_coef *k, float l2, float keep) {
    const float b1 = k->b1, b2 = k->b2, omb1 = k->omb1, omb2 = k->omb2, ss = k->step_size,
                bc2 = k->bc2_sqrt, eps = k->eps;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + omb1 * gi;
        v[i] = b2 * v[i] + omb2 * (gi * gi);
        p[i] = p[i] * keep - ss * (m[i] / (sqrtf(v[i]) / bc2 + eps));
    }
}

/* ---- reading the gradient where it lies (mt_grads) ------------------------------------------ */

enum { CHUNK = 512 }; /* floats of the gradient read at a time: 2 KiB, kept in L1 */

/* The gradient at [off, off + n), n <= CHUNK: coef * (g[0] + g[1] + ...), added in that order and
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

/* ---- init, step, free ------------------------------------------------------------------------ */

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

mt_status mt_optim_init(mt_optim *o, const mt_optim_config *c, mt_params *P, mt_err *err) {
    memset(o, 0, sizeof *o);
    MT_ASSERT(P->data, "optim: the parameters are not allocated");
    mt_status s = mt_optim_validate(c, err);
    if (s != MT_OK) return s;
    o->cfg = *c;
    o->total = P->total;
    apply_decay_scope(P, c->decay_scope);

    /* Spans: each trainable entry covers [offset, offset + n rounded up to 16); neighbours with
       the same decay flag merge. */
    o->spans = calloc((size_t)(P->n ? P->n : 1), sizeof *o->spans);
    bool adam = c->kind != MT_OPTIM_SGD;
    if (adam || c->momentum > 0) o->m = zeros(P->total);
    if (adam) o->v = zeros(P->total);
    if (!o->spans || ((adam || c->momentum > 0) && !o->m) || (adam && !o->v)) {
        mt_optim_free(o);
        return mt_errorf(err, MT_ENOMEM, "optim: cannot allocate the state for %zu parameters",
                         P->total);
    }
    for (int i = 0; i < P->n; i++) {
        const mt_param *e = &P->p[i];
        if (e->role == MT_ROLE_BUFFER) continue;
        size_t n = (e->n + 15) / 16 * 16;
        mt_optim_span *last = o->n_spans ? &o->spans[o->n_spans - 1] : NULL;
        if (last && last->off + last->n == e->offset && last->decay == e->decay) last->n += n;
        else o->spans[o->n_spans++] = (mt_optim_span){e->offset, n, e->decay};
    }
    return MT_OK;
}

void mt_optim_update(mt_optim *o, mt_params *P, const mt_grads *G, double lr, float coef,
                     bool keep) {
    MT_ASSERT(P->total == o->total, "optim: the parameters have %zu floats, the state %zu",
              P->total, o->total);
    MT_ASSERT(G->n >= 1 && G->g[0] == P->grad, "optim: the gradient's first buffer is not P->grad");
    const mt_optim_config *c = &o->cfg;
    o->t++;
    double wd = c->weight_decay;
    adam_coef k = {
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .omb1 = (float)(1 - c->beta1),
        .omb2 = (float)(1 - c->beta2),
        .step_size = (float)(lr / (1 - pow(c->beta1, (double)o->t))),
        .bc2_sqrt = (float)sqrt(1 - pow(c->beta2, (double)o->t)),
        .eps = (float)c->eps,
    };
    float l2 = c->kind == MT_OPTIM_ADAMW ? 0.0f : (float)wd;
    float keep_p = c->kind == MT_OPTIM_ADAMW ? (float)(1 - lr * wd) : 1.0f;
    grads_after after = keep ? GRADS_KEEP : GRADS_ZERO;

    size_t W = 0; /* floats in all spans, a multiple of 16 */
    for (int j = 0; j < o->n_spans; j++) W += o->spans[j].n;
    size_t T = W >= MT_PAR_MIN ? (size_t)mt_threads() : 1; /* ranges, one a thread */
    MT_PARALLEL_FOR(T > 1, for (size_t id = 0; id < T; id++) {
        float x[CHUNK] __attribute__((aligned(64)));
        size_t lo = W * id / T / 16 * 16, hi = id + 1 == T ? W : W * (id + 1) / T / 16 * 16;
        size_t at = 0; /* start of span j in the concatenation */
        for (int j = 0; j < o->n_spans && at < hi; at += o->spans[j++].n) {
            const mt_optim_span *s = &o->spans[j];
            size_t a = lo > at ? lo : at, b = hi < at + s->n ? hi : at + s->n;
            for (size_t off = s->off + (a - at), end = s->off + (b - at); off < end; off += CHUNK) {
                size_t n = end - off < CHUNK ? end - off : CHUNK;
                float *p = P->data + off, *m = o->m ? o->m + off : NULL;
                const float *g = grads_read(G, off, n, coef, x);
                if (c->kind == MT_OPTIM_SGD)
                    sgd_kernel(p, g, m, n, (float)lr, s->decay ? l2 : 0.0f, (float)c->momentum,
                               c->nesterov);
                else
                    adam_kernel(p, g, m, o->v + off, n, &k, s->decay ? l2 : 0.0f,
                                s->decay ? keep_p : 1.0f);
                grads_done(G, off, n, g, after);
                if (P->bf16) mt_bf16_from_floats(P->bf16 + off, p, n); /* while p is in L1 */
            }
        }
    });
}

void mt_optim_step(mt_optim *o, mt_params *P, double lr) {
    mt_optim_update(o, P, &(mt_grads){&P->grad, 1}, lr, 1.0f, true);
}

void mt_optim_free(mt_optim *o) {
    free(o->m);
    free(o->v);
    free(o->spans);
    memset(o, 0, sizeof *o);
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

double mt_grads_norm(const mt_grads *G, size_t total) {
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
    return sqrt(s);
}

double mt_optim_grad_norm(const mt_params *P) {
    return mt_grads_norm(&(mt_grads){&P->grad, 1}, P->total);
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
    if (coef != 1.0f) grads_store(&(mt_grads){&P->grad, 1}, P->total, coef);
    return norm;
}

int mt_params_first_nonfinite(const mt_params *P) {
    for (int i = 0; i < P->n; i++) {
        const float *g = P->grad + P->p[i].offset;
        for (size_t j = 0; j < P->p[i].n; j++)
            if (!isfinite(g[j])) return i;
    }
    return -1;
}
