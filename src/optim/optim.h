/* mt optim: the optimizer as a table-described kind (SGD, Adam, AdamW, Muon, Lion), the update
 * that walks the parameter table's trainable tensors, gradient clipping, state files, and
 * learning-rate schedules as pure functions of the step.
 *
 * Semantics are torch.optim's (torch 1.13, the for-loop implementation), checked step by step in
 * tests/parity/test_optim.py:
 *   SGD    d = g + wd*p;  with momentum mu: b = mu*b + d (b = d at the first step), d = nesterov ?
 *          d + mu*b : b;  p -= lr*d.  (No dampening.)
 *   Adam   g += wd*p (L2 form);  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  t = t + 1;
 *          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *   AdamW  p *= 1 - lr*wd (decoupled, Loshchilov & Hutter, arXiv 1711.05101), then Adam with no
 *          L2 term.
 * and, written out from their references in the same test (torch 1.13 has neither):
 *   Muon   the hidden matrices (muon.c: KellerJordan/Muon's muon.py): momentum, Newton-Schulz,
 *          scale, decoupled decay; AdamW for every other tensor, each group at its own rate.
 *   Lion   c = b1*m + (1-b1)*g;  p = (1 - lr*wd)*p - lr*sign(c);  m = b2*m + (1-b2)*g (lion.c).
 * Weight decay applies to the entries of the parameter table whose `decay` flag is set (by default
 * the matrices and the head: norms, biases and embeddings skip it); decay_scope widens it once, at
 * init. Buffers (MT_ROLE_BUFFER) and frozen entries (mt_params_freeze) are never updated.
 *
 * The command-line flags of train (and the same keys in config files) map onto the fields
 * (MT_OPTIM_FIELDS, config.c):
 *   --optim sgd|adam|adamw|muon|lion  kind   --beta1 --beta2 --eps       beta1, beta2, eps
 *   --weight-decay          weight_decay  --momentum --nesterov       momentum, nesterov
 *   --decay-scope matrices|embeddings|all decay_scope                 --clip   clip
 *   --qk-clip TAU  qk_clip (applied by the trainer, src/nn/qk_clip.c)
 *   --lr --min-lr --warmup-init-lr --warmup --schedule const|cosine|linear|invsqrt|wsd
 *   --decay-frac  in sched (sched.steps is the run's number of steps)
 *   --muon-lr --adam-lr --muon-wd --muon-momentum --no-nesterov --muon-scale --muon-rms  muon_*
 *   --ns-steps --ns-coef-a --ns-coef-b --ns-coef-c --ns-eps  ns_*
 *   --muon-ortho ns5|polar --normuon --normuon-beta2  muon_ortho, normuon*
 *   --cautious-wd  cautious_wd (AdamW, Muon)
 *   --lion-beta1 --lion-beta2  lion_*
 *
 * ---- an optimizer kind ------------------------------------------------------------------------
 * A kind is an mt_optim_type (below): its name, its state slots (arrays laid out as P->data, each
 * with a name for the state file), the step's scalars computed once per update, and a step over
 * ONE tensor, or a piece of one, which sees the tensor's data, gradient, state, element count,
 * shape, role and decay flag (mt_optim_tensor). mt_optim_update owns everything else: the walk
 * over the trainable entries (never a buffer), the threads, reading the gradient from the
 * replicas' buffers and clipping it, zeroing them, the bf16 copy, the step count, state files.
 *   Elementwise kinds (SGD, Adam, AdamW, Lion) leave `whole` NULL: the step gets pieces of at most
 *   1024 floats (a tensor's elements [lo, lo + n), n a multiple of 16 that may run up to 15 floats
 *   into the zero padding after the tensor's last element: zero data, gradient and state must stay
 *   zero), split evenly across the threads whatever the tensors' sizes.
 *   Kinds that need a tensor whole (Muon's Newton-Schulz on a 2-D matrix) say which tensors with
 *   `whole` (and with `needs_whole` that a table without one is refused); each such tensor then
 *   goes to one thread whole (tensors spread over the threads in runs of about equal element
 *   counts), its gradient summed and scaled in place in P->grad first, with `scratch(cfg, entry)`
 *   floats of scratch that init allocates per thread (no allocation in the step). A product in a
 *   whole step goes through mt_gemm (mt_gemm_bf16 when the tensor's `bf16` says the model runs
 *   bf16), which runs on the calling thread inside the update's parallel region. The other
 *   tensors of the same kind (Muon: embeddings, norms, biases, the head) still come in pieces,
 *   so one kind can hold both groups.
 *
 * Adding an optimizer: docs/design.md's recipe ("How to add an optimizer"); sgd.c (one optional
 * slot), adam.c (two slots, two kinds sharing a step), lion.c (one slot) and muon.c (whole
 * matrices with scratch and a group in pieces that reuses adam.c's kernel) are the models.
 * Nothing else changes: the trainer sizes the state with mt_optim_state_slots, state files and
 * resume are generic over the slots (a state file of another kind is refused by its name), the
 * update is generic over the kind. If a few large matrices dominate a per-tensor kind's cost,
 * stepping them one at a time on the whole pool (mt_gemm outside the region) is the change to
 * make in walk_whole (optim.c); the kinds do not see it. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include "../io/fields.h"
#include "../tensor/base.h"
#include "../tensor/params.h"

/* The registered kinds: mt_optim_types[kind] is its type, MT_OPTIMS its --optim name. */
typedef enum {
    MT_OPTIM_SGD,
    MT_OPTIM_ADAM,
    MT_OPTIM_ADAMW,
    MT_OPTIM_MUON,
    MT_OPTIM_LION
} mt_optim_kind;

typedef enum {
    MT_SCHED_CONST,
    MT_SCHED_COSINE,
    MT_SCHED_LINEAR,
    MT_SCHED_INVSQRT,
    MT_SCHED_WSD,
} mt_sched_kind;

/* Muon's scale of the orthogonalised update of an (R, C) matrix: the reference's
   sqrt(max(1, R / C)) (KellerJordan/Muon), or Moonlight's rms sqrt(max(R, C)) (arXiv 2502.16982,
   rms 0.2: the update's RMS matches AdamW's, so Muon can take AdamW's lr and weight decay). */
typedef enum { MT_MUON_SCALE_REFERENCE, MT_MUON_SCALE_MATCH_ADAMW } mt_muon_scale;

/* Muon's orthogonalisation: Newton-Schulz with one coefficient triple (--ns-coef-a/b/c, the
   reference's (3.4445, -4.7750, 2.0315)), or Polar Express's triple per iteration (Amsel et al.,
   arXiv 2505.16932; 5 triples, X normalised by |X|_F (1 + 0.01)). */
typedef enum { MT_MUON_ORTHO_NS5, MT_MUON_ORTHO_POLAR } mt_muon_ortho;

/* Which table entries weight decay reaches: the table's flags as built (matrices and the head),
   those plus the embeddings, or every trainable entry. */
typedef enum { MT_DECAY_MATRICES, MT_DECAY_EMBEDDINGS, MT_DECAY_ALL } mt_decay_scope;

/* The learning rate of step s (s = 0, 1, ...: the lr used by the update that step s makes):
     warmup phase, s < warmup:  warmup_init_lr + (lr - warmup_init_lr) * s / warmup
     then, with u = s - warmup, D = steps - warmup:
       const    lr
       cosine   min_lr + (lr - min_lr) * (1 + cos(pi * u / D)) / 2,  min_lr once s >= steps
       linear   lr - (lr - min_lr) * u / D,                          min_lr once s >= steps
       invsqrt  lr * sqrt(warmup / s)
       wsd      lr until D' = round(decay_frac * steps) steps are left (round half to even, as
                Python's round), then min_lr + (lr - min_lr) * (steps - s) / D' (nanochat's
                base_train.py: warmup, stable, decay), min_lr once s >= steps
   So step 0 runs at warmup_init_lr, step `warmup` at lr, and lr_at(steps) = min_lr is where the
   decays end (the last step, steps - 1, is one decrement above it). invsqrt with warmup_init_lr
   = 0 is the original Transformer's lr * min(s / warmup, sqrt(warmup / s)). */
typedef struct {
    mt_sched_kind kind;
    double lr, min_lr, warmup_init_lr;
    long warmup, steps;
    double decay_frac; /* wsd: the fraction of the steps that decays, in [0, 1] */
} mt_schedule;

typedef struct {
    mt_optim_kind kind;
    double beta1, beta2, eps; /* Adam, AdamW */
    double weight_decay;      /* L2 for SGD and Adam, decoupled for AdamW */
    double momentum;          /* SGD; 0: plain SGD */
    bool nesterov;            /* SGD, needs momentum > 0 */
    mt_decay_scope decay_scope;
    double clip; /* max global gradient norm; 0: no clipping */
    /* QK-Clip's tau (MuonClip, arXiv 2507.20534): after each update the trainer rescales the
       q and k projections of every head whose largest logit exceeded it (mt_qk_clip); 0: off */
    double qk_clip;
    mt_schedule sched;
    /* Muon (muon.c): the hidden matrices' rate, the rest's (AdamW with beta1, beta2, eps), each
       -1: the schedule's lr, else scaled by the schedule's lr_at / lr; the hidden matrices'
       weight decay (-1: weight_decay); momentum, Nesterov, Newton-Schulz steps, coefficients
       and epsilon; the scale rule and Moonlight's rms */
    double muon_lr, adam_lr, muon_wd;
    double muon_momentum;
    bool muon_nesterov;
    int ns_steps;
    double ns_a, ns_b, ns_c, ns_eps;
    mt_muon_scale muon_scale;
    double muon_rms;
    mt_muon_ortho muon_ortho;
    /* NorMuon (arXiv 2510.05491): the orthogonalised update's rows divided by the root of an EMA
       (beta normuon_beta2) of their mean square, rescaled to the update's Frobenius norm */
    bool normuon;
    double normuon_beta2;
    /* cautious weight decay (arXiv 2510.12402): AdamW's and Muon's decoupled decay only where
       the update and the weight have the same sign */
    bool cautious_wd;
    double lion_beta1, lion_beta2; /* Lion (lion.c) */
} mt_optim_config;

/* torch.optim.AdamW's defaults (lr 1e-3, betas 0.9, 0.999, eps 1e-8, weight decay 0.01), decay
   scope matrices, no clipping, constant schedule without warmup, steps 0 (unknown), wsd's
   decay_frac 0.2 (nanochat's); Muon's (muon.py: momentum 0.95, Nesterov, 5 steps of (3.4445,
   -4.7750, 2.0315), eps 1e-7, the reference's scale, rms 0.2, the rates -1, ns5, no NorMuon,
   its beta2 0.95) and Lion's (betas 0.9, 0.99), no cautious decay, as floats. */
mt_optim_config mt_optim_defaults(void);

/* Every value and combination, with a message naming the flag and what is accepted: lr, min_lr,
   warmup_init_lr, eps, weight_decay, clip >= 0; betas and momentum in [0, 1); nesterov only with
   momentum; warmup >= 0 (>= 1 for invsqrt); cosine, linear and wsd need steps >= 1, warmup <=
   steps and min_lr <= lr; min_lr only with them (its field's .read); decay_frac in [0, 1],
   wsd's decay after the warmup; an option set that its kind or schedule does not read (the
   fields' .read: SGD's, Muon's and Lion's options with their kind) refused; then the kind's own
   checks (muon.c, lion.c). */
mt_status mt_optim_validate(const mt_optim_config *c, mt_err *err);

/* The fields of the flags and config keys above (fields.h): ./train's options. Its numbers are
   doubles that hold floats (what the flags read). min_lr and warmup are derived where no option
   gives them (mt_fieldset_derive, on sched.steps): min_lr lr / 10 (in float) for cosine, linear
   and wsd, else 0; warmup steps / 10, at most 100. */
extern const mt_fields MT_OPTIM_FIELDS;

/* The names of the enums' values (mt_enum_name, mt_enum_parse). */
extern const mt_enum MT_OPTIMS;       /* "sgd", "adam", "adamw", "muon", "lion" */
extern const mt_enum MT_SCHEDULES;    /* "const", "cosine", "linear", "invsqrt", "wsd" */
extern const mt_enum MT_MUON_SCALES;  /* "reference", "match-adamw" */
extern const mt_enum MT_MUON_ORTHOS;  /* "ns5", "polar" */
extern const mt_enum MT_DECAY_SCOPES; /* "matrices", "embeddings", "all" */

/* The lr of step s >= 0 (see mt_schedule). A pure function. */
double mt_optim_lr_at(const mt_schedule *s, long step);

/* ---- the optimizer ------------------------------------------------------------------------- */

enum {
    MT_OPTIM_MAX_SLOTS = 4, /* state arrays a kind may keep */
    MT_OPTIM_SCALARS = 128, /* bytes of a kind's per-update scalars */
};

/* What a step sees: one trainable entry of the parameter table, or a piece of it. */
typedef struct {
    const mt_param *e; /* the entry: name, ndim, shape[], role, decay, offset, n */
    size_t lo, n;      /* elements [lo, lo + n) of it: a piece, or 0 and e->n when whole */
    float *p;          /* data + e->offset + lo */
    const float *g;    /* the gradient there: the buffers' sum, clipped (mt_grads) */
    float *s[MT_OPTIM_MAX_SLOTS]; /* each state slot there; NULL past the kind's slots */
    float *scratch;               /* whole tensors: the kind's scratch(cfg, e) floats, else NULL */
    bool bf16;                    /* whole tensors: the model's products are bf16 (P->bf16) */
} mt_optim_tensor;

typedef struct mt_optim_type {
    const char *name;                           /* --optim's and the state file's "optim" */
    const char *slot_names[MT_OPTIM_MAX_SLOTS]; /* the state file's "<slot>.<param>" prefixes */
    /* how many of slot_names config c keeps (SGD without momentum: 0) */
    int (*slots)(const mt_optim_config *c);
    /* writes its scalars for update t (1, 2, ...) at lr into k (MT_OPTIM_SCALARS bytes; write
       and read them with memcpy: the bytes are not declared as the kind's struct) */
    void (*scalars)(const mt_optim_config *c, long t, double lr, void *k);
    /* one update of x; a piece's result may not depend on where the pieces are cut */
    void (*step)(const mt_optim_tensor *x, const void *k);
    /* optional: entry e must be stepped whole (NULL: every tensor in pieces) */
    bool (*whole)(const mt_optim_config *c, const mt_param *e);
    /* optional: floats of scratch stepping e whole needs */
    size_t (*scratch)(const mt_optim_config *c, const mt_param *e);
    /* init refuses a table with no entry to step whole (Muon on a model without a hidden matrix) */
    bool needs_whole;
    /* optional: the kind's own checks, after mt_optim_validate's general ones */
    mt_status (*validate)(const mt_optim_config *c, mt_err *err);
} mt_optim_type;

/* The registry (config.c), indexed by mt_optim_kind, and its types (sgd.c, adam.c). */
extern const mt_optim_type *const mt_optim_types[];
extern const mt_optim_type mt_optim_sgd, mt_optim_adam, mt_optim_adamw, mt_optim_muon,
    mt_optim_lion;

/* Floats of optimizer state per parameter float for config c (c->kind registered). */
int mt_optim_state_slots(const mt_optim_config *c);

typedef struct {
    mt_optim_config cfg;
    const mt_optim_type *type;
    long t;       /* updates taken; the next mt_optim_step is update t + 1 */
    size_t total; /* floats in P->grad (P->grad_total: the frozen entries have no place) */
    /* the entries [first, last) of the table whose state this optimizer holds and steps, floats
       [lo, hi) of P->grad: the whole table, or a ZeRO-1 shard (mt_optim_init_shard) */
    int first, last;
    size_t lo, hi;
    int n_slots;
    float *slot[MT_OPTIM_MAX_SLOTS]; /* type->slot_names[i]'s array, laid out as P->grad [lo, hi) */
    /* the walk, fixed at init: the indices of the entries stepped in pieces, then of those
       stepped whole, each group in table order; at[j] (j <= n_pieces) = the floats before
       walk[j] among the pieces' entries, each padded to 16; at[n_pieces] = piece_floats */
    int *walk;
    size_t *at;
    int n_pieces, n_whole;
    size_t piece_floats, whole_floats;
    float *scratch; /* n_scratch parts of scratch_floats, one a thread */
    size_t scratch_floats;
    int n_scratch;
} mt_optim;

/* Validates c, applies c->decay_scope to P's decay flags (once) and allocates the state (zeroed,
   t = 0) of the kind c->kind. P must be allocated. Weight decay > 0 on an entry kept on the unit
   sphere is refused. */
mt_status mt_optim_init(mt_optim *o, const mt_optim_config *c, mt_params *P, mt_err *err);
/* The same with a type of one's own (a test's, an experiment's) instead of c->kind's. */
mt_status mt_optim_init_type(mt_optim *o, const mt_optim_type *type, const mt_optim_config *c,
                             mt_params *P, mt_err *err);
void mt_optim_free(mt_optim *o);
/* ZeRO-1's shard (src/train/zero.c): the state of the entries [first, last) alone, floats
   [P->p[first].grad_offset, P->p[last].grad_offset) (grad_total for last = P->n), and an update
   that steps only them (the other entries' data and gradients are left as they are). A kind that
   needs a tensor whole is checked against the whole table (mt_optim_init: the shard [0, P->n)). */
mt_status mt_optim_init_shard(mt_optim *o, const mt_optim_config *c, mt_params *P, int first,
                              int last, mt_err *err);

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
   (mt_grads_sum, mt_optim_clip, mt_optim_step), and for elementwise kinds the same bits at any
   thread count. In bf16 precision (P->bf16) the same pass rounds each updated weight into the
   products' bf16 copy. Then the entries kept on the unit sphere (nGPT's matrices,
   mt_params_set_unit) are renormalised (mt_params_normalize_units), whatever the kind. */
void mt_optim_update(mt_optim *o, mt_params *P, const mt_grads *G, double lr, float coef,
                     bool keep);
/* The same from P->grad alone, unscaled, which it leaves as it is (torch's optimizer.step()). */
void mt_optim_step(mt_optim *o, mt_params *P, double lr);

/* sqrt of the sum of squares of the summed gradient G (total floats a buffer), accumulated in
   double over a fixed partition and combined in thread order: the same bits for the same thread
   count. mt_optim_grad_norm: of P->grad. */
double mt_grads_norm(const mt_grads *G, size_t total);
/* Its square, the sum before the root (a shard's part of a norm across ranks). */
double mt_grads_sumsq(const mt_grads *G, size_t total);
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
 * A safetensors file: "<slot>.<name>" (each shaped as the parameter) for every slot the kind
 * keeps (SGD with momentum and Lion "m"; Adam, AdamW, Muon "m" and "v") and every trainable entry;
 * __metadata__ "optim" (the kind's name) and "step" (o->t). Loading into an initialised
 * optimizer restores them; a file for another optimizer, a missing or extra tensor or a shape
 * that differs from the parameter's is an error naming it. A shard's optimizer (first, last) loads
 * its entries' part of a whole file; saving needs the whole state (zero.c gathers it first). */
mt_status mt_optim_save(const mt_optim *o, const mt_params *P, const char *path, mt_err *err);
/* The same file with slot k of entry e read from slot_of(o, k, e, arg), e->n floats (a shard's
   optimizer saving the whole state: zero.c). */
mt_status mt_optim_save_from(const mt_optim *o, const mt_params *P,
                             const float *(*slot_of)(const mt_optim *o, int k, const mt_param *e,
                                                     void *arg),
                             void *arg, const char *path, mt_err *err);
mt_status mt_optim_load(mt_optim *o, const mt_params *P, const char *path, mt_err *err);

#endif
