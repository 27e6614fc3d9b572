/* SGD, Adam and AdamW over the flat parameter buffer, and global-norm gradient clipping.
 *
 * The update is elementwise, so one OpenMP region splits the concatenated spans of trainable
 * entries into equal 16-float-aligned ranges, one per thread (a deep model has ~1600 small
 * entries: forking per entry would cost more than the update). Per-step scalars are computed in
 * double, as torch does in Python, and rounded to float once. */
#include <math.h>
#include <omp.h>
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

void mt_optim_step(mt_optim *o, mt_params *P, double lr) {
    MT_ASSERT(P->total == o->total, "optim: the parameters have %zu floats, the state %zu",
              P->total, o->total);
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
    float keep = c->kind == MT_OPTIM_ADAMW ? (float)(1 - lr * wd) : 1.0f;

    size_t W = 0; /* floats in all spans, a multiple of 16 */
    for (int j = 0; j < o->n_spans; j++) W += o->spans[j].n;
#pragma omp parallel if (W >= MT_PAR_MIN)
    {
        size_t T = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t lo = W * id / T / 16 * 16, hi = id + 1 == T ? W : W * (id + 1) / T / 16 * 16;
        size_t at = 0; /* start of span j in the concatenation */
        for (int j = 0; j < o->n_spans && at < hi; at += o->spans[j++].n) {
            const mt_optim_span *s = &o->spans[j];
            size_t a = lo > at ? lo : at, b = hi < at + s->n ? hi : at + s->n;
            if (a >= b) continue;
            size_t off = s->off + (a - at), n = b - a;
            float *p = P->data + off, *m = o->m ? o->m + off : NULL;
            const float *g = P->grad + off;
            if (c->kind == MT_OPTIM_SGD)
                sgd_kernel(p, g, m, n, (float)lr, s->decay ? l2 : 0.0f, (float)c->momentum,
                           c->nesterov);
            else
                adam_kernel(p, g, m, o->v + off, n, &k, s->decay ? l2 : 0.0f,
                            s->decay ? keep : 1.0f);
        }
    }
}

void mt_optim_free(mt_optim *o) {
    free(o->m);
    free(o->v);
    free(o->spans);
    memset(o, 0, sizeof *o);
}

/* ---- clipping -------------------------------------------------------------------------------- */

double mt_optim_grad_norm(const mt_params *P) {
    const float *g = P->grad;
    size_t N = P->total;
    int nt = N >= MT_PAR_MIN ? omp_get_max_threads() : 1, used = 1;
    double part[nt];
#pragma omp parallel num_threads(nt)
    {
        size_t T = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t lo = N * id / T, hi = N * (id + 1) / T;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
        part[id] = s;
        if (id == 0) used = (int)T;
    }
    double s = 0;
    for (int i = 0; i < used; i++) s += part[i];
    return sqrt(s);
}

double mt_optim_clip(mt_params *P, double max_norm) {
    double norm = mt_optim_grad_norm(P);
    double coef = max_norm / (norm + 1e-6);
    if (max_norm > 0 && isfinite(norm) && coef < 1) {
        float *g = P->grad, f = (float)coef;
        size_t N = P->total;
#pragma omp parallel for simd if (N >= MT_PAR_MIN)
        for (size_t i = 0; i < N; i++) g[i] *= f;
    }
    return norm;
}
