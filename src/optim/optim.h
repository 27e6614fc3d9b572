/* mt optim: SGD, Adam, AdamW over the flat parameter buffer, gradient clipping, and learning-rate
 * schedules as pure functions of the step.
 *
 * Semantics are torch.optim's (torch 1.13, the for-loop implementation), checked step by step in
 * tests/parity/test_optim.py:
 *   SGD    d = g + wd*p;  with momentum mu: b = mu*b + d (b = d at the first step), d = nesterov ?
 *          d + mu*b : b;  p -= lr*d.  (No dampening.)
 *   Adam   g += wd*p (L2 form);  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  t = t + 1;
 *          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *   AdamW  p *= 1 - lr*wd (decoupled, Loshchilov & Hutter, arXiv 1711.05101), then Adam with no
 *          L2 term.
 * Weight decay applies to the entries of the parameter table whose `decay` flag is set (by default
 * the matrices: norms, biases and embeddings skip it); decay_scope widens it once, at init.
 * Buffers (MT_ROLE_BUFFER) are never updated.
 *
 * The command-line flags of train (and the same keys in config files) map onto the fields:
 *   --optim sgd|adam|adamw  kind          --beta1 --beta2 --eps       beta1, beta2, eps
 *   --weight-decay          weight_decay  --momentum --nesterov       momentum, nesterov
 *   --decay-scope matrices|embeddings|all decay_scope                 --clip   clip
 *   --lr --min-lr --warmup-init-lr --warmup --schedule const|cosine|linear|invsqrt  in sched
 *   (sched.steps is the run's number of steps). */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include "../io/fields.h"
#include "../tensor/tensor.h"

typedef enum { MT_OPTIM_SGD, MT_OPTIM_ADAM, MT_OPTIM_ADAMW } mt_optim_kind;

typedef enum { MT_SCHED_CONST, MT_SCHED_COSINE, MT_SCHED_LINEAR, MT_SCHED_INVSQRT } mt_sched_kind;

/* Which table entries weight decay reaches: the table's flags as built (matrices), those plus the
   embeddings, or every trainable entry. */
typedef enum { MT_DECAY_MATRICES, MT_DECAY_EMBEDDINGS, MT_DECAY_ALL } mt_decay_scope;

/* The learning rate of step s (s = 0, 1, ...: the lr used by the update that step s makes):
     warmup phase, s < warmup:  warmup_init_lr + (lr - warmup_init_lr) * s / warmup
     then, with u = s - warmup, D = steps - warmup:
       const    lr
       cosine   min_lr + (lr - min_lr) * (1 + cos(pi * u / D)) / 2,  min_lr once s >= steps
       linear   lr - (lr - min_lr) * u / D,                          min_lr once s >= steps
       invsqrt  lr * sqrt(warmup / s)
   So step 0 runs at warmup_init_lr, step `warmup` at lr, and lr_at(steps) = min_lr is where the
   decays end (the last step, steps - 1, is one decrement above it). invsqrt with warmup_init_lr
   = 0 is the original Transformer's lr * min(s / warmup, sqrt(warmup / s)). */
typedef struct {
    mt_sched_kind kind;
    double lr, min_lr, warmup_init_lr;
    long warmup, steps;
} mt_schedule;

typedef struct {
    mt_optim_kind kind;
    double beta1, beta2, eps;  /* Adam, AdamW */
    double weight_decay;       /* L2 for SGD and Adam, decoupled for AdamW */
    double momentum;           /* SGD; 0: plain SGD */
    bool nesterov;             /* SGD, needs momentum > 0 */
    mt_decay_scope decay_scope;
    double clip;               /* max global gradient norm; 0: no clipping */
    mt_schedule sched;
} mt_optim_config;

/* torch.optim.AdamW's defaults (lr 1e-3, betas 0.9, 0.999, eps 1e-8, weight decay 0.01), decay
   scope matrices, no clipping, constant schedule without warmup, steps 0 (unknown). */
mt_optim_config mt_optim_defaults(void);

/* Every value and combination, with a message naming the flag and what is accepted: lr, min_lr,
   warmup_init_lr, eps, weight_decay, clip >= 0; betas and momentum in [0, 1); nesterov only with
   momentum; momentum and nesterov only with sgd; warmup >= 0 (>= 1 for invsqrt); cosine and
   linear need steps >= 1, warmup <= steps and min_lr <= lr; min_lr only with cosine and linear. */
mt_status mt_optim_validate(const mt_optim_config *c, mt_err *err);

/* The fields of the flags and config keys above (fields.h): ./train's options. Its numbers are
   doubles that hold floats (what the flags read). */
extern const mt_fields MT_OPTIM_FIELDS;
/* The values the fields leave to the run: min_lr -1 is lr / 10 (computed in float) for cosine and
   linear, else 0; a warmup < 0 is steps / 10, at most 100. Other values stay. */
void mt_optim_resolve(mt_optim_config *c, long steps);

/* The names of the enums' values (mt_enum_name, mt_enum_parse). */
extern const mt_enum MT_OPTIMS;       /* "sgd", "adam", "adamw" */
extern const mt_enum MT_SCHEDULES;    /* "const", "cosine", "linear", "invsqrt" */
extern const mt_enum MT_DECAY_SCOPES; /* "matrices", "embeddings", "all" */

/* The lr of step s >= 0 (see mt_schedule). A pure function. */
double mt_optim_lr_at(const mt_schedule *s, long step);

/* ---- the optimizer ------------------------------------------------------------------------- */

/* A run of consecutive trainable entries with one decay flag: [off, off + n) of the flat buffers,
   padding between entries included (its grad and data stay 0, so updating it changes nothing). */
typedef struct {
    size_t off, n;
    bool decay;
} mt_optim_span;

typedef struct {
    mt_optim_config cfg;
    long t;           /* updates taken; the next mt_optim_step is update t + 1 */
    size_t total;     /* floats in P->data */
    float *m, *v;     /* same layout as P->data: Adam moments, or m the SGD momentum buffer;
                         NULL where the optimizer keeps none */
    mt_optim_span *spans;
    int n_spans;
} mt_optim;

/* Validates c, applies c->decay_scope to P's decay flags (once) and allocates the state (zeroed,
   t = 0). P must be allocated. */
mt_status mt_optim_init(mt_optim *o, const mt_optim_config *c, mt_params *P, mt_err *err);
void mt_optim_free(mt_optim *o);

/* ---- a step's gradient ----------------------------------------------------------------------
 * The gradient of a batch split across replicas (mt_replicas) lies in several buffers laid out as
 * P->grad, one per replica: it is their sum, added in buffer order (g[0] + g[1] + ..., the same
 * bits on every run). The passes below read it where it lies, so the sum takes no pass of its
 * own, and the update zeroes the buffers on its way (no zero_grad pass): a training step reads
 * the gradient twice, for its norm and for the update. The same for one buffer (n = 1). */
typedef struct {
    float *const *g; /* (n) g[0] is P->grad */
    int n;
} mt_grads;

/* One update of every trainable entry of P from the gradient coef * G (coef: clipping's,
   mt_optim_clip_coef, or 1) with learning rate lr (usually mt_optim_lr_at(&cfg.sched, o->t)),
   which it consumes: every buffer of G is left zeroed, except that keep leaves the gradient used
   (summed, scaled) in g[0] = P->grad for inspection. One OpenMP region, one pass over P, the
   state and G; no allocation; deterministic; the same bits as summing, clipping, then updating
   (mt_grads_sum, mt_optim_clip, mt_optim_step). In bf16 precision (P->bf16) the same pass
   rounds each updated weight into the products' bf16 copy. */
void mt_optim_update(mt_optim *o, mt_params *P, const mt_grads *G, double lr, float coef,
                     bool keep);
/* The same from P->grad alone, unscaled, which it leaves as it is (torch's optimizer.step()). */
void mt_optim_step(mt_optim *o, mt_params *P, double lr);

/* sqrt of the sum of squares of the summed gradient G (total floats a buffer), accumulated in
   double over a fixed partition and combined in thread order: the same bits for the same thread
   count. mt_optim_grad_norm: of P->grad. */
double mt_grads_norm(const mt_grads *G, size_t total);
double mt_optim_grad_norm(const mt_params *P);
/* g[0] = P->grad becomes the summed gradient; the other buffers are zeroed. */
void mt_grads_sum(const mt_grads *G, size_t total);
/* Clipping's factor for a gradient of norm `norm`: max_norm / (norm + 1e-6) when max_norm > 0,
   the norm is finite and that is < 1; otherwise 1 (nothing to scale). */
float mt_optim_clip_coef(double norm, double max_norm);
/* The first parameter whose gradient (P->grad) holds a NaN or an infinity, or -1. */
int mt_params_first_nonfinite(const mt_params *P);
/* As torch.nn.utils.clip_grad_norm_ on P->grad: every gradient scaled by
   mt_optim_clip_coef(its norm, max_norm). Returns the norm before clipping. A non-finite norm
   leaves the gradients alone (the caller stops the run). */
double mt_optim_clip(mt_params *P, double max_norm);

/* ---- state for exact resume ---------------------------------------------------------------
 * A safetensors file: "m.<name>" and "v.<name>" (each shaped as the parameter) for every
 * trainable entry, when the optimizer keeps them; __metadata__ "optim" (the kind) and "step"
 * (o->t). Loading into an initialised optimizer restores them; a file for another optimizer, a
 * missing or extra tensor or a shape that differs from the parameter's is an error naming it. */
mt_status mt_optim_save(const mt_optim *o, const mt_params *P, const char *path, mt_err *err);
mt_status mt_optim_load(mt_optim *o, const mt_params *P, const char *path, mt_err *err);

#endif
