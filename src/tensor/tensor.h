/* Tensors and the tape: the step arena, tensors, the context, nodes, backward, and the primitive
 * ops (ops_*.c). tensor.c holds the arena, the context and the tape.
 *
 * Dimension letters used across mt: B batch, T time (sequence), C channels (n_embd),
 * NH heads, HS head size, V vocabulary, L length of a 1-D signal, F FFN width, N rows (B*T).
 * A tensor is dense, contiguous, row-major float32 with up to MT_MAX_DIMS dims, shapes outermost
 * first. Tensors never own memory: activations live in the step arena, parameters in mt_params
 * (params.h). */
#ifndef MT_TENSOR_H
#define MT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "gemm.h"

/* ---- arena: one block, bump allocation, reset every step ----------------------------------- */
typedef struct {
    unsigned char *base;
    size_t cap, used, peak;
} mt_arena;

/* ---- tensors --------------------------------------------------------------------------------- */
typedef struct mt_tensor {
    float *data; /* n floats, never owned */
    float *grad; /* n floats, or NULL: allocated (zeroed) by backward when first needed */
    size_t n;    /* number of elements */
    int ndim;
    int shape[MT_MAX_DIMS];
    bool requires_grad;  /* parameters, and every op output that depends on one */
    const mt_bf16 *bf16; /* parameters under bf16 precision: data rounded to bf16 (mt_params's
                            copy, refreshed after every update); else NULL */
} mt_tensor;

/* A tensor header over memory someone else owns (parameters, test inputs). */
mt_tensor mt_tensor_view(float *data, float *grad, int ndim, const int shape[]);
size_t mt_shape_numel(int ndim, const int shape[]);
bool mt_same_shape(const mt_tensor *a, const mt_tensor *b);
int mt_rows(const mt_tensor *x); /* product of all dims but the last */
int mt_cols(const mt_tensor *x); /* the last dim */
/* "(2, 3, 4)" into buf, for messages */
const char *mt_shape_str(const mt_tensor *x, char *buf, size_t len);

/* ---- context: arena + tape + modes ----------------------------------------------------------- */
typedef struct mt_node mt_node;
typedef struct mt_ctx mt_ctx;
typedef struct mt_profile mt_profile;

typedef struct mt_op {
    const char *name;
    void (*forward)(mt_node *n);  /* computes n->out from n->in; may fill n->saved */
    void (*backward)(mt_node *n); /* accumulates into in[i]->grad (NULL: skip) from out->grad */
    bool backward_skips_out;      /* the backward never reads out->data (see grad_in_place) */
} mt_op;

#define MT_NODE_MAX_IN 8
#define MT_NODE_MAX_SAVED 4

struct mt_node {
    const mt_op *op;
    mt_node *prev; /* previous node on the tape */
    mt_ctx *ctx;
    mt_tensor *out;
    mt_tensor *in[MT_NODE_MAX_IN];
    int n_in;
    float *saved[MT_NODE_MAX_SAVED]; /* op-specific buffers from the arena (statistics, masks) */
    const int *ids;                  /* integer input (token ids, targets), copied to the arena */
    float f[4];                      /* scalar arguments */
    int i[8];                        /* integer arguments (dims, flags) */
    void *p;                         /* op-specific pointer (e.g. a persistent buffer) */
    /* set by the builder when in[0] has out's shape and its gradient is out's plus its own (add):
       an arena in[0] with no gradient yet then takes out's gradient buffer (mt_backward_from),
       and the backward skips in[0] when in[0]->grad is out->grad */
    bool grad_through;
    /* set by the builder when in[0]'s data is read by this node's backward alone (in[0]'s node
       comes just before it and its op's backward_skips_out): with c->free_activations an arena
       in[0] with no gradient yet takes its own data block as its gradient, which the backward
       writes over the data (the cross-entropy's logits: their gradient costs no memory) */
    bool grad_in_place;
};

/* The weight on key 0 above which a query counts as sunk (mt_ctx.attn_sink): Gu et al.'s epsilon
   (arXiv 2410.10781) */
#define MT_ATTN_SINK_EPS 0.3

struct mt_ctx {
    mt_arena arena;
    mt_node *tape;     /* last recorded node */
    size_t n_nodes;    /* recorded since the last reset */
    bool grad_enabled; /* false: no-grad mode, nothing is recorded (inference) */
    bool training;     /* dropout active, BatchNorm uses batch statistics */
    mt_rng rng;        /* dropout masks */
    /* Optional: called with its arg after each node's backward has run (src/train's data
       parallelism starts sending the gradients of the parameters the node read last). */
    void (*after_backward)(mt_node *n, void *arg);
    void *after_backward_arg;
    mt_profile *profile; /* NULL: off; else each node's forward and backward time (profile.h) */
    /* NULL: off; else each attention op writes the largest logit it computed (q.k / sqrt(HS)
       over the keys each query sees) to attn_max[attn_calls++]: the diagnostics' probe
       (src/diag), which sizes attn_max for the attentions of its forward */
    float *attn_max;
    int attn_calls;
    /* NULL: off; else each attention op writes the share of (row, head, query) whose weight on
       key 0 exceeds MT_ATTN_SINK_EPS and the mean entropy of the weights (those the values are
       mixed with) to attn_sink[2 attn_sink_calls], [+1], attn_sink_calls++ (src/diag) */
    double *attn_sink;
    int attn_sink_calls;
    /* NULL: off; else the stack writes max |x| and the Pearson kurtosis of the residual stream
       entering each block (over tokens and channels) to act[2 act_calls], [+1], act_calls++ */
    double *act;
    int act_calls;
    /* NULL: off; else each hyper-connection sublayer stores its coefficients a ((N, N+1) shared
       or (rows, N, N+1); nn.h's mt_hc_depth) at hc_coefs[hc_calls++], for the diagnostics'
       signal gains of the residual mixing (src/diag); they stay valid until the arena's reset */
    const mt_tensor **hc_coefs;
    int hc_calls;
    /* NULL: off; else QK-Clip's probe (src/nn/qk_clip.c): in a forward that records (grad
       enabled) and is not a replay, each attention op max-accumulates head h's largest logit
       q.k / sqrt(HS) (over batch, queries and keys; a sink's logit left out) into
       qk_max[qk_at + h], qk_at >= 0 set by the attention sublayer around the op from
       qk_slot[its q_proj weight's entry] (-1: an attention not probed) */
    float *qk_max;
    const int *qk_slot;
    int qk_at;
    int precision; /* mt_precision of the products of the ops that offer bf16 (MT_FP32) */
    /* The thread budget of this context's ops and their products: at most this many of the
       pool's threads (0: all of them). Set by whoever owns the context (decoding's tiny ops run
       on one); nothing process-wide changes. */
    int threads;
    /* Backward hands the arena block of an op's output, once its node's backward has run (its
       last reader), to the gradients that follow, as it does with dead gradients: less memory
       for a training step, whose caller reads only the loss. Off by default; when on, every
       output but the one backward starts from is lost after backward. */
    bool free_activations;
    /* Models run each block through mt_recompute when they record (--recompute block). */
    bool recompute;
    /* Set while mt_recompute's backward runs a segment's forward again: an op with a side effect
       beyond its output (BatchNorm's running statistics) leaves it out. */
    bool replaying;
    void *free_grads; /* during a backward pass: the released gradient blocks (tensor.c) */
    /* mt_ctx_bf16's last copy: its source (data and element count) and the copy in the arena.
       Cleared by mt_ctx_reset and by an mt_arena_release below either. */
    struct {
        const float *of;
        size_t n;
        mt_bf16 *bf16;
    } bf16_copy;
};

/* arena_bytes is reserved up front; pages are only touched as the arena fills. */
mt_status mt_ctx_init(mt_ctx *c, size_t arena_bytes, uint64_t seed, mt_err *err);
void mt_ctx_free(mt_ctx *c);
/* Start of a step: empties the arena and the tape (the peak is kept). */
void mt_ctx_reset(mt_ctx *c);

/* Arena memory, 64-byte aligned. Running out is fatal with the sizes in the message. */
void *mt_arena_alloc(mt_ctx *c, size_t bytes);
float *mt_arena_floats(mt_ctx *c, size_t n);
float *mt_arena_zeros(mt_ctx *c, size_t n);
/* Scratch inside one kernel: m = mt_arena_mark(c), allocate, use, mt_arena_release(c, m) gives
   back everything allocated since m (the peak keeps it). Only when nothing allocated after the
   mark must survive: an op's forward or backward uses it for its temporaries, after its outputs,
   saved buffers and input grads are allocated (released gradients that backward hands on lie
   below the mark and are untouched). */
size_t mt_arena_mark(mt_ctx *c);
void mt_arena_release(mt_ctx *c, size_t mark);
/* x (n floats) rounded to bf16 in the arena, for an op's bf16 product and its backward. The last
   copy is remembered: asked again for the same x and n it is returned as it was (the q, k and v
   projections of one input share one copy), so x must not change in between. */
const mt_bf16 *mt_ctx_bf16(mt_ctx *c, const float *x, size_t n);

mt_tensor *mt_tensor_new(mt_ctx *c, int ndim, const int shape[]); /* uninitialised */
mt_tensor *mt_tensor_zeros(mt_ctx *c, int ndim, const int shape[]);
mt_tensor *mt_tensor_like(mt_ctx *c, const mt_tensor *x);
/* A leaf in the arena holding a copy of src (n floats). */
mt_tensor *mt_tensor_from(mt_ctx *c, const float *src, int ndim, const int shape[]);

/* ---- the tape -----------------------------------------------------------------------------------
 * An op's builder checks shapes, allocates its output, fills a node and calls mt_node_run, which
 * runs the forward and records the node when grad is enabled and an input requires grad. */
mt_node *mt_node_new(mt_ctx *c, const mt_op *op, mt_tensor *out, int n_in, mt_tensor *const in[]);
void mt_node_run(mt_ctx *c, mt_node *n);
/* The grad of x, allocating it zeroed in the arena when absent (x must require grad). */
float *mt_grad(mt_ctx *c, mt_tensor *x);

/* The tensors n reads: its inputs (n->in), or for mt_recompute's node every tensor outside the
   segment that the segment's nodes read and that requires grad (the parameters among them).
   Returns their count. */
int mt_node_reads(const mt_node *n, mt_tensor *const **reads);

/* Recomputation (activation checkpointing): y = fn(c, x, arg), keeping only x and y. When c
   records, the nodes and activations fn left in the arena are given back once y is computed
   (y moved down in their place) and one node stands for them; its backward runs fn again on x,
   with c->rng as it was (the same dropout masks) and c->replaying set, runs the backward of
   what that recorded, and gives its memory back, keeping the gradients of the tensors outside
   the segment. The gradients are the bits of fn recorded plainly: the same ops in the same
   order, the same gradient buffers handed on. fn must read nothing that changes between the
   forward and the backward pass but x and what it reads through arg; arg (arg_bytes) is copied
   into the arena. Without grad, what fn leaves but y is given back at once. */
typedef mt_tensor *(*mt_segment_fn)(mt_ctx *c, mt_tensor *x, const void *arg);
mt_tensor *mt_recompute(mt_ctx *c, mt_tensor *x, mt_segment_fn fn, const void *arg,
                        size_t arg_bytes);

/* Reverse-mode pass from a scalar loss (d loss = 1). Parameter grads accumulate into
 * mt_params.grad; zero them between steps with mt_params_zero_grad. */
void mt_backward(mt_ctx *c, mt_tensor *loss);
/* The same from any output y with a given upstream gradient dy (y->n floats). */
void mt_backward_from(mt_ctx *c, mt_tensor *y, const float *dy);

/* ---- primitive ops --------------------------------------------------------------------------- */

/* C = op(A) op(B), batched over leading dims.
 * a: (..., M, K), or (..., K, M) when ta; b: (..., K, N), or (..., N, K) when tb.
 * b may be 2-D and is then shared by every batch (x @ W^T for a Linear). Out: (..., M, N). */
mt_tensor *mt_matmul(mt_ctx *c, mt_tensor *a, mt_tensor *b, bool ta, bool tb);
/* a + b: same shape, or b of shape (C,) added to every row of a (..., C). */
mt_tensor *mt_add(mt_ctx *c, mt_tensor *a, mt_tensor *b);
/* The ops below are declared here as the contract other modules build on. */
mt_tensor *mt_mul(mt_ctx *c, mt_tensor *a, mt_tensor *b); /* elementwise, same shape */
mt_tensor *mt_scale(mt_ctx *c, mt_tensor *x, float s);
mt_tensor *mt_scale_by(mt_ctx *c, mt_tensor *x, mt_tensor *s); /* s (1) a learned scalar */
mt_tensor *mt_sum(mt_ctx *c, mt_tensor *x);                    /* all elements -> (1,) */
mt_tensor *mt_mean(mt_ctx *c, mt_tensor *x);                   /* all elements -> (1,) */
/* Same data, new shape with the same element count; shares x's data (no copy). */
mt_tensor *mt_reshape(mt_ctx *c, mt_tensor *x, int ndim, const int shape[]);
/* out.shape[i] = x.shape[perm[i]]; a copy. */
mt_tensor *mt_permute(mt_ctx *c, mt_tensor *x, const int perm[]);
mt_tensor *mt_transpose(mt_ctx *c, mt_tensor *x, int d0, int d1);
/* GELU: tanh form. SWIGLU is gated, silu(a) b of two inputs (mt_swiglu): the FFN's activation
   only (nn.h), not a unary op. RELU2: relu(x)^2 (Primer). */
typedef enum {
    MT_ACT_GELU,
    MT_ACT_GELU_ERF,
    MT_ACT_RELU,
    MT_ACT_SILU,
    MT_ACT_SWIGLU,
    MT_ACT_RELU2,
} mt_act;
mt_tensor *mt_gelu(mt_ctx *c, mt_tensor *x);     /* tanh approximation, as GPT-2 */
mt_tensor *mt_gelu_erf(mt_ctx *c, mt_tensor *x); /* exact: x * Phi(x) */
/* SwiGLU's gate (Shazeer 2020, arXiv 2002.05202): silu(a) * b elementwise, a and b the same
   shape; one kernel each way. */
mt_tensor *mt_swiglu(mt_ctx *c, mt_tensor *a, mt_tensor *b);
mt_tensor *mt_relu(mt_ctx *c, mt_tensor *x);
mt_tensor *mt_relu2(mt_ctx *c, mt_tensor *x); /* relu(x)^2 (So et al. 2021, arXiv 2109.08668) */
mt_tensor *mt_silu(mt_ctx *c, mt_tensor *x);
mt_tensor *mt_softmax(mt_ctx *c, mt_tensor *x); /* over the last dim */
/* y = cap tanh(x / cap), cap > 0: the soft cap of logits (Gemma 2, arXiv 2408.00118) outside
   the loss (mt_cross_entropy fuses it) */
mt_tensor *mt_softcap(mt_ctx *c, mt_tensor *x, float cap);
/* The loss's terms beyond the plain cross-entropy; {0} (MT_CE_PLAIN): none. */
typedef struct {
    float label_smoothing; /* eps in [0, 1]: each target (1 - eps) onehot + eps / V */
    float z_loss;  /* z >= 0: + z log(Z_r)^2 per row (PaLM's auxiliary loss; log Z_r = lse_r) */
    float softcap; /* cap > 0: the loss of the logits cap tanh(x / cap) (Gemma 2); 0: of x */
} mt_ce_opts;
#define MT_CE_PLAIN ((mt_ce_opts){.label_smoothing = 0})
/* Fused log-softmax + negative log-likelihood: logits (..., V), targets (rows of logits) in
   [0, V) or ignore_index; the mean over the targets that are not ignored -> (1,). With
   label smoothing eps each target is the distribution (1 - eps) onehot + eps / V, as torch's
   F.cross_entropy(..., label_smoothing=eps); with z-loss z each row not ignored also adds
   z lse_r^2; with a soft cap every logit x is cap tanh(x / cap) first (fused: no capped copy).
   MT_CE_PLAIN: the plain cross-entropy. */
mt_tensor *mt_cross_entropy(mt_ctx *c, mt_tensor *logits, const int *targets, int ignore_index,
                            mt_ce_opts opts);
/* weight (V, C), ids (n) in [0, V) -> (n, C); backward scatters into the weight's rows. */
mt_tensor *mt_embedding(mt_ctx *c, mt_tensor *weight, const int *ids, int n);
/* Inverted dropout with probability p from c->rng; the identity when !c->training or p == 0. */
mt_tensor *mt_dropout(mt_ctx *c, mt_tensor *x, float p);
/* Along the last dim. */
mt_tensor *mt_concat(mt_ctx *c, int n, mt_tensor *const xs[]);
mt_tensor *mt_slice(mt_ctx *c, mt_tensor *x, int start, int len);
void mt_split(mt_ctx *c, mt_tensor *x, int n, const int sizes[], mt_tensor *out[]);

#endif
