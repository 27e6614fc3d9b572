/* mt core: errors, tensors, the step arena, the RNG, the parameter table, the autograd tape and
 * the primitive ops.
 *
 * Dimension letters used across mt: B batch, T time (sequence), C channels (n_embd),
 * NH heads, HS head size, V vocabulary, L length of a 1-D signal, F FFN width, N rows (B*T).
 * A tensor is dense, contiguous, row-major float32 with up to 4 dims, shapes outermost first.
 * Tensors never own memory: activations live in the step arena, parameters in mt_params. */
#ifndef MT_TENSOR_H
#define MT_TENSOR_H

#include <omp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MT_MAX_DIMS 4

/* ---- errors ---------------------------------------------------------------------------------
 * A bug (broken invariant) is MT_ASSERT: file:line, message, abort.
 * Bad input (flag, config, file) is an mt_status plus a message in a caller-owned mt_err. */
typedef enum {
    MT_OK = 0,
    MT_EINVAL,  /* a value from the user (flag, config key, option) is wrong */
    MT_EIO,     /* a file could not be opened, read, written or renamed */
    MT_EFORMAT, /* a file's contents are malformed (checkpoint, token file, dataset) */
    MT_ENOMEM,  /* an allocation failed or would not fit */
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
 * An enum whose values are 0..n-1 has one table of {name, help}: the flags, config keys, --help
 * and JSON all read it, so a value's name is written once. what names the enum in messages. */
typedef struct {
    const char *name, *help;
} mt_enum_item;
typedef struct {
    const char *what; /* "norm" */
    int n;
    const mt_enum_item *items;
} mt_enum;
#define MT_ENUM(what, items) {what, (int)(sizeof items / sizeof items[0]), items}

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
   _Pragma("..."). MT_PARALLEL_FOR_SIMD: "omp parallel for simd", inline "omp simd". Inline,
   omp_get_thread_num() is the enclosing team's (a replica's): per-thread scratch must not be
   indexed by it there (attention.c's thread_slot); for the same reason a bare `omp parallel`
   block that splits work by thread number cannot run inline this way: make its parts the loop's
   iterations instead, as many as mt_threads() (mt_gemm, optim.c). With one thread in the pool
   (--threads 1) the loop also runs inline: a team of one would cost the region's set-up for
   nothing (a step of configs/nanogpt-char.ini opened 53 of them). */
#define MT_PARALLEL_FOR(cond, ...) MT_PARALLEL_(cond, "omp parallel for", , __VA_ARGS__)
#define MT_PARALLEL_FOR_SIMD(cond, ...)                                                            \
    MT_PARALLEL_(cond, "omp parallel for simd", _Pragma("omp simd"), __VA_ARGS__)
#define MT_PARALLEL_(cond, directive, inline_pragma, ...)                                          \
    do {                                                                                           \
        if ((cond) && !omp_in_parallel() && omp_get_max_threads() > 1) {                           \
            _Pragma(directive) __VA_ARGS__                                                         \
        } else {                                                                                   \
            inline_pragma __VA_ARGS__                                                              \
        }                                                                                          \
    } while (0)

/* ---- RNG: xoshiro256**, explicit state (saved in checkpoints for exact resume) ------------- */
typedef struct {
    uint64_t s[4];
} mt_rng;

void mt_rng_seed(mt_rng *r, uint64_t seed);
uint64_t mt_rng_u64(mt_rng *r);
float mt_rng_uniform(mt_rng *r); /* [0, 1) with 24 random bits */
float mt_rng_normal(mt_rng *r);  /* N(0, 1), Box-Muller, no cached spare */
uint32_t mt_rng_below(mt_rng *r, uint32_t n); /* uniform integer in [0, n) */

/* ---- arena: one block, bump allocation, reset every step ----------------------------------- */
typedef struct {
    unsigned char *base;
    size_t cap, used, peak;
} mt_arena;

/* ---- tensors ---------------------------------------------------------------------------------- */
typedef struct mt_tensor {
    float *data;        /* n floats, never owned */
    float *grad;        /* n floats, or NULL: allocated (zeroed) by backward when first needed */
    size_t n;           /* number of elements */
    int ndim;
    int shape[MT_MAX_DIMS];
    bool requires_grad; /* parameters, and every op output that depends on one */
    const uint16_t *bf16; /* parameters under bf16 precision: data rounded to bf16 (mt_params's
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
};

struct mt_ctx {
    mt_arena arena;
    mt_node *tape;     /* last recorded node */
    size_t n_nodes;    /* recorded since the last reset */
    bool grad_enabled; /* false: no-grad mode, nothing is recorded (inference) */
    bool training;     /* dropout active, BatchNorm uses batch statistics */
    mt_rng rng;        /* dropout masks */
    /* Optional: called after each node's backward has run (data parallelism starts sending the
       gradients of parameters the node was the last reader of). */
    void (*after_backward)(mt_node *n, void *arg);
    void *after_backward_arg;
    mt_profile *profile; /* NULL: off; else every node's forward and backward time adds to it */
    int precision;       /* mt_precision of the linear layers' products (MT_FP32 by default) */
    /* The thread budget of this context's ops and their products: at most this many of the
       pool's threads (0: all of them). Set by whoever owns the context (decoding's tiny ops run
       on one); nothing process-wide changes. */
    int threads;
    /* Backward hands the arena block of an op's output, once its node's backward has run (its
       last reader), to the gradients that follow, as it does with dead gradients: less memory
       for a training step, whose caller reads only the loss. Off by default; when on, every
       output but the one backward starts from is lost after backward. */
    bool free_activations;
    /* bf16 precision: the last activation a linear layer rounded to bf16 (its data and element
       count) and the arena copy, kept for its backward: q, k and v of one input share it.
       Cleared by mt_ctx_reset and by an mt_arena_release below it. */
    struct {
        const float *of;
        size_t n;
        uint16_t *bf16;
    } bf16_input;
};

/* A large, long-lived buffer (arenas, parameters, gradients, optimizer state): 64-byte aligned,
   its size rounded up to 64 bytes, transparent huge pages (2 MiB) asked for its whole 2 MiB pages
   (fewer TLB misses when kernels stream through it; advice only). NULL when out of memory;
   give it back with free. */
void *mt_alloc_big(size_t bytes);
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

mt_tensor *mt_tensor_new(mt_ctx *c, int ndim, const int shape[]); /* uninitialised */
mt_tensor *mt_tensor_zeros(mt_ctx *c, int ndim, const int shape[]);
mt_tensor *mt_tensor_like(mt_ctx *c, const mt_tensor *x);
/* A leaf in the arena holding a copy of src (n floats). */
mt_tensor *mt_tensor_from(mt_ctx *c, const float *src, int ndim, const int shape[]);

/* ---- the tape ------------------------------------------------------------------------------------
 * An op's builder checks shapes, allocates its output, fills a node and calls mt_node_run, which
 * runs the forward and records the node when grad is enabled and an input requires grad. */
mt_node *mt_node_new(mt_ctx *c, const mt_op *op, mt_tensor *out, int n_in,
                     mt_tensor *const in[]);
void mt_node_run(mt_ctx *c, mt_node *n);
/* The grad of x, allocating it zeroed in the arena when absent (x must require grad). */
float *mt_grad(mt_ctx *c, mt_tensor *x);

/* Reverse-mode pass from a scalar loss (d loss = 1). Parameter grads accumulate into
 * mt_params.grad; zero them between steps with mt_params_zero_grad. */
void mt_backward(mt_ctx *c, mt_tensor *loss);
/* The same from any output y with a given upstream gradient dy (y->n floats). */
void mt_backward_from(mt_ctx *c, mt_tensor *y, const float *dy);

/* ---- parameters: one flat buffer described by one table ---------------------------------------
 * The table gives checkpoint names, shapes, the weight-decay mask and the initialiser. */
typedef enum {
    MT_INIT_ZEROS,
    MT_INIT_ONES,
    MT_INIT_CONST,  /* value */
    MT_INIT_NORMAL, /* N(0, value^2) */
} mt_init_kind;

typedef enum {
    MT_ROLE_MATRIX,    /* linear weights: decayed by default */
    MT_ROLE_BIAS,      /* linear biases */
    MT_ROLE_NORM,      /* normalization weights, biases and scalars */
    MT_ROLE_EMBEDDING, /* token and position embeddings */
    MT_ROLE_BUFFER,    /* not trained: BatchNorm running statistics */
} mt_param_role;

typedef struct {
    char name[96];
    size_t offset, n; /* in floats, into mt_params.data / .grad */
    int ndim;
    int shape[MT_MAX_DIMS];
    mt_param_role role;
    bool decay; /* weight decay applies; default: role == MT_ROLE_MATRIX */
    mt_init_kind init;
    float init_value;
} mt_param;

typedef struct {
    mt_param *p;
    int n, cap;
    size_t total; /* floats in data (and grad) */
    float *data;  /* all parameters and buffers, each entry 16-float aligned */
    float *grad;  /* same layout; zero for buffers */
    uint16_t *bf16; /* NULL, or (mt_params_enable_bf16) data rounded to bf16, same layout */
    mt_tensor *t; /* t[i] views entry i; valid after mt_params_alloc */
} mt_params;

void mt_params_init_table(mt_params *P);
/* Adds an entry and returns its index. Only before mt_params_alloc. */
int mt_params_add(mt_params *P, const char *name, int ndim, const int shape[], mt_param_role role,
                  mt_init_kind init, float init_value);
mt_status mt_params_alloc(mt_params *P, mt_err *err);
/* Fills every entry from its initialiser, in table order, from r. */
void mt_params_initialize(mt_params *P, mt_rng *r);
int mt_params_find(const mt_params *P, const char *name); /* -1 when absent */
/* bf16 precision: allocates P->bf16, points every tensor's bf16 at its part and fills it; before
   mt_params_view (views share it). The optimizer's update rounds the weights it changes into it;
   mt_params_refresh_bf16 rounds all of data into it again, after any other change (a load). */
mt_status mt_params_enable_bf16(mt_params *P, mt_err *err);
void mt_params_refresh_bf16(mt_params *P);
size_t mt_params_count_trainable(const mt_params *P);
void mt_params_zero_grad(mt_params *P);
void mt_params_free(mt_params *P);
/* V: P's table and data with gradients of its own (zeroed) and tensors t viewing them, for a
   replica of the model that runs on another thread (mt_replicas). Free it with
   mt_params_view_free only (P keeps the table and the data). */
mt_status mt_params_view(const mt_params *P, mt_params *V, mt_err *err);
void mt_params_view_free(mt_params *V);

/* ---- primitive ops --------------------------------------------------------------------------- */

/* C = op(A) op(B), batched over leading dims.
 * a: (..., M, K), or (..., K, M) when ta; b: (..., K, N), or (..., N, K) when tb.
 * b may be 2-D and is then shared by every batch (x @ W^T for a Linear). Out: (..., M, N). */
mt_tensor *mt_matmul(mt_ctx *c, mt_tensor *a, mt_tensor *b, bool ta, bool tb);
/* ---- the GEMM layer (gemm.c): every product of the linear layers, attention and mt_matmul ------
 * Row-major with dense leading dimensions: C (M, N) = op(A) op(B) + beta C, A stored (M, K) or
 * (K, M) when ta, B (K, N) or (N, K) when tb; with bias (N floats) every row of C is set to bias
 * first and beta is ignored. Called outside a parallel region it runs on the pool's threads,
 * inside one (a replica) on the calling thread. */
void mt_gemm(bool ta, bool tb, int M, int N, int K, const float *A, const float *B, float beta,
             float *C, const float *bias);
/* C = alpha op(A) op(B) + beta C on blocks of larger buffers, lda, ldb, ldc their row strides (the
   attention's heads, side by side in (B, T, C) buffers); fp32, OpenBLAS, no bias. A product of
   one row (M = 1, !ta) in either, as a token of generation has, runs mt's matrix-vector kernel
   (gemm.c), split over C's entries across the pool when large: the same bits on any thread count. */
void mt_gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);
/* bfloat16: the high half of a float32's bits. */
typedef uint16_t mt_bf16;
/* The same product on bf16 inputs, accumulated and written in fp32 (oneDNN only: mt_bf16_check
   must have passed). */
void mt_gemm_bf16(bool ta, bool tb, int M, int N, int K, const mt_bf16 *A, const mt_bf16 *B,
                  float beta, float *C, const float *bias);
/* x rounded to nearest even: add 0x7fff plus the lowest kept bit, keep the high half; a NaN
   stays a (quiet) NaN instead of rounding into the exponent. Inline so that loops over it
   vectorise. */
static inline mt_bf16 mt_bf16_from_float(float x) {
    union {
        float f;
        uint32_t u;
    } v = {.f = x};
    uint32_t r = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16;
    return (mt_bf16)((v.u & 0x7fffffffu) > 0x7f800000u ? (v.u >> 16) | 0x40u : r);
}
/* dst = src rounded (mt_bf16_from_float), n values, on the pool when n is large. */
void mt_bf16_from_floats(mt_bf16 *dst, const float *src, size_t n);
static inline float mt_bf16_to_float(mt_bf16 h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
typedef enum { MT_FP32, MT_BF16 } mt_precision;
extern const mt_enum MT_PRECISIONS;
/* MT_OK when bf16 products can run here: mt built with oneDNN, a CPU with AVX512_BF16; else
   MT_EINVAL with what is missing. */
mt_status mt_bf16_check(mt_err *err);
/* fp32's backend: AUTO picks per product; the environment's MT_GEMM=openblas|onednn|auto
   forces one, as does mt_gemm_set_backend (MT_EINVAL for onednn in a build without it).
   mt_gemm_backend_from_env reads MT_GEMM (MT_EINVAL naming it when bad): the programs call it at
   start; otherwise the first product reads it and a bad value is fatal. */
typedef enum { MT_GEMM_AUTO, MT_GEMM_OPENBLAS, MT_GEMM_ONEDNN } mt_gemm_backend;
extern const mt_enum MT_GEMM_BACKENDS;
mt_status mt_gemm_set_backend(mt_gemm_backend b, mt_err *err);
mt_status mt_gemm_backend_from_env(mt_err *err);
mt_gemm_backend mt_gemm_backend_forced(void);
bool mt_gemm_has_onednn(void);
/* The name of oneDNN's implementation of a product without bias or beta (benchmarks). */
const char *mt_gemm_impl(bool ta, bool tb, int M, int N, int K, bool bf16);
/* a + b: same shape, or b of shape (C,) added to every row of a (..., C). */
mt_tensor *mt_add(mt_ctx *c, mt_tensor *a, mt_tensor *b);
/* The ops below are declared here as the contract other modules build on. */
mt_tensor *mt_mul(mt_ctx *c, mt_tensor *a, mt_tensor *b); /* elementwise, same shape */
mt_tensor *mt_scale(mt_ctx *c, mt_tensor *x, float s);
mt_tensor *mt_sum(mt_ctx *c, mt_tensor *x);  /* all elements -> (1,) */
mt_tensor *mt_mean(mt_ctx *c, mt_tensor *x); /* all elements -> (1,) */
/* Same data, new shape with the same element count; shares x's data (no copy). */
mt_tensor *mt_reshape(mt_ctx *c, mt_tensor *x, int ndim, const int shape[]);
/* out.shape[i] = x.shape[perm[i]]; a copy. */
mt_tensor *mt_permute(mt_ctx *c, mt_tensor *x, const int perm[]);
mt_tensor *mt_transpose(mt_ctx *c, mt_tensor *x, int d0, int d1);
/* GELU: tanh form. SWIGLU is gated, silu(a) b of two inputs (mt_swiglu): the FFN's activation
   only (nn.h), not a unary op. */
typedef enum { MT_ACT_GELU, MT_ACT_GELU_ERF, MT_ACT_RELU, MT_ACT_SILU, MT_ACT_SWIGLU } mt_act;
mt_tensor *mt_gelu(mt_ctx *c, mt_tensor *x);     /* tanh approximation, as GPT-2 */
mt_tensor *mt_gelu_erf(mt_ctx *c, mt_tensor *x); /* exact: x * Phi(x) */
/* SwiGLU's gate (Shazeer 2020, arXiv 2002.05202): silu(a) * b elementwise, a and b the same
   shape; one kernel each way. */
mt_tensor *mt_swiglu(mt_ctx *c, mt_tensor *a, mt_tensor *b);
mt_tensor *mt_relu(mt_ctx *c, mt_tensor *x);
mt_tensor *mt_silu(mt_ctx *c, mt_tensor *x);
mt_tensor *mt_softmax(mt_ctx *c, mt_tensor *x); /* over the last dim */
/* Fused log-softmax + negative log-likelihood: logits (..., V), targets (rows of logits) in
   [0, V) or ignore_index; the mean over the targets that are not ignored -> (1,). With
   label_smoothing eps in [0, 1] each target is the distribution (1 - eps) onehot + eps / V, as
   torch's F.cross_entropy(..., label_smoothing=eps); eps = 0: the plain cross-entropy. */
mt_tensor *mt_cross_entropy(mt_ctx *c, mt_tensor *logits, const int *targets, int ignore_index,
                            float label_smoothing);
/* weight (V, C), ids (n) in [0, V) -> (n, C); backward scatters into the weight's rows. */
mt_tensor *mt_embedding(mt_ctx *c, mt_tensor *weight, const int *ids, int n);
/* Inverted dropout with probability p from c->rng; the identity when !c->training or p == 0. */
mt_tensor *mt_dropout(mt_ctx *c, mt_tensor *x, float p);
/* Along the last dim. */
mt_tensor *mt_concat(mt_ctx *c, int n, mt_tensor *const xs[]);
mt_tensor *mt_slice(mt_ctx *c, mt_tensor *x, int start, int len);
void mt_split(mt_ctx *c, mt_tensor *x, int n, const int sizes[], mt_tensor *out[]);

/* ---- op profile: where a step's time goes, per op (./train --profile, bench/gpt --profile) ----
 * With c->profile set, mt_node_run times each forward and mt_backward_from each backward
 * (CLOCK_MONOTONIC, two clock reads per node). The caller counts the steps and adds their whole
 * time to step_s, so the table also shows the time outside the ops (optimizer, zero grad). */
enum { MT_PROFILE_OPS = 48 };
struct mt_profile {
    struct {
        const mt_op *op;
        double s[2];    /* seconds in [0] forward, [1] backward */
        long calls[2];
    } row[MT_PROFILE_OPS];
    int n;
    long steps;
    double step_s;
};
double mt_clock(void); /* seconds, CLOCK_MONOTONIC */
/* The table, slowest op first: calls, forward and backward ms per step, share of the steps. */
void mt_profile_print(const mt_profile *p, FILE *f);

#endif
