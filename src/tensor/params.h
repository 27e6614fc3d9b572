/* The parameter table (params.c): all parameters of a model in one flat buffer, their gradients
 * in a second of the same layout, described by one table of entries (name, offset, shape, role,
 * weight-decay flag, initialiser). Checkpoints, the optimizer, the initialiser and the
 * diagnostics all read the table; mt_tensor views of the entries feed the ops. */
#ifndef MT_PARAMS_H
#define MT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "base.h"
#include "gemm.h"
#include "tensor.h"

typedef enum {
    MT_INIT_ZEROS,
    MT_INIT_ONES,
    MT_INIT_CONST,   /* value */
    MT_INIT_NORMAL,  /* N(0, value^2) */
    MT_INIT_UNIFORM, /* U(-value, value) */
    MT_INIT_HC,      /* (N, N+1): column 0 one-hot at row value, columns 1..N the identity
                        (hyper-connections' static_alpha) */
    MT_INIT_EYE,     /* (N, N) the identity (mHC's b_res) */
    MT_INIT_ONE_HOT, /* 1 at index value, else 0 (mHC's b_pre) */
} mt_init_kind;

typedef enum {
    MT_ROLE_MATRIX,    /* linear weights: decayed by default */
    MT_ROLE_BIAS,      /* linear biases */
    MT_ROLE_NORM,      /* normalization weights, biases and scalars */
    MT_ROLE_EMBEDDING, /* token and position embeddings */
    MT_ROLE_BUFFER,    /* not trained: BatchNorm running statistics */
    MT_ROLE_HEAD,      /* a matrix at the model's edge, decayed as a matrix: the output head, the
                          ViT's patch projection (Muon leaves it to AdamW: not a hidden matrix) */
} mt_param_role;

/* A 2-D entry kept on the unit sphere (nGPT): each row, or each column, of L2 norm 1, restored by
   mt_params_normalize_units after the initialiser and after every optimizer update. */
typedef enum { MT_UNIT_NONE, MT_UNIT_ROWS, MT_UNIT_COLS } mt_unit_axis;

typedef struct {
    char name[96];
    size_t offset, n; /* in floats, into mt_params.data / .grad */
    int ndim;
    int shape[MT_MAX_DIMS];
    mt_param_role role;
    bool decay; /* weight decay applies; default: role MT_ROLE_MATRIX or MT_ROLE_HEAD */
    /* the parameterisation's (--param, mt_stack_param_scales) multipliers of the optimizer's lr,
       weight decay and AdamW eps on this entry; 1 (--param sp) by default */
    float lr_scale, wd_scale, eps_scale;
    mt_init_kind init;
    float init_value;
    mt_unit_axis unit; /* MT_UNIT_NONE unless mt_params_set_unit */
    bool frozen;       /* mt_params_freeze: not trained, no gradient and no optimizer state */
    /* LoRA (mt_params_add_lora): the index of this matrix's adapter A, B the next entry (0:
       none; entry 0 is never one), its alpha / r and its input's dropout */
    int lora;
    float lora_scale, lora_dropout;
    size_t grad_offset; /* in floats, into mt_params.grad: offset less the frozen entries' floats
                           before it (all of them when it is frozen itself: it has none) */
} mt_param;

/* Whether the optimizer trains e: neither a buffer nor frozen. */
static inline bool mt_param_trained(const mt_param *e) {
    return e->role != MT_ROLE_BUFFER && !e->frozen;
}

typedef struct {
    mt_param *p;
    int n, cap;
    size_t total;      /* floats in data */
    size_t grad_total; /* floats in grad: total less the frozen entries' (padded) floats */
    int n_unit;        /* entries kept on the unit sphere (mt_params_set_unit) */
    float *data;       /* all parameters and buffers, each entry 16-float aligned */
    float *grad;   /* entries at their grad_offset, the frozen ones left out; zero for buffers */
    mt_bf16 *bf16; /* NULL, or (mt_params_enable_bf16) data rounded to bf16, same layout */
    mt_tensor *t;  /* t[i] views entry i; valid after mt_params_alloc */
    /* the entries by name, for mt_params_find */
    mt_name_index index;
} mt_params;

void mt_params_init_table(mt_params *P);
/* Adds an entry and returns its index. Only before mt_params_alloc. */
int mt_params_add(mt_params *P, const char *name, int ndim, const int shape[], mt_param_role role,
                  mt_init_kind init, float init_value);
mt_status mt_params_alloc(mt_params *P, mt_err *err);
/* Fills every entry from its initialiser, in table order, from r; then
   mt_params_normalize_units. */
void mt_params_initialize(mt_params *P, mt_rng *r);
/* Entry i (2-D, (R, K)) kept on the unit sphere along axis: rows (each of its R rows of K) or
   columns (each of its K columns of R). Only before mt_params_alloc. */
void mt_params_set_unit(mt_params *P, int i, mt_unit_axis axis);
/* Entry i frozen (--freeze, the base of a LoRA run): its tensor gets no gradient, so an op does
   no backward work for it alone (a linear layer skips dW's product), and it has no place in the
   gradient buffer nor in the optimizer's state. Only before mt_params_alloc. */
void mt_params_freeze(mt_params *P, int i);
/* LoRA (Hu et al. 2021) on the matrix W (O, K) of entry w: W x + (alpha / r) B A dropout(x) with
   the entries <name>.lora_A.weight A (r, K), U(-1/sqrt(K), 1/sqrt(K)) (peft's kaiming_uniform_
   with a = sqrt(5)), and <name>.lora_B.weight B (O, r), zeros, added to the table's end (W's name
   without its ".weight"). mt_param_linear runs them. Only before mt_params_alloc. */
void mt_params_add_lora(mt_params *P, int w, int r, float alpha, float dropout);
/* Folds every adapter into its matrix, W += (alpha / r) B A, and drops the adapters from the
   table (the entries after the base: its names and layout are the base's again, the data's tail
   unused); false when P has none. */
bool mt_params_merge_lora(mt_params *P);
/* Every row or column of the unit entries divided by its L2 norm (summed in double, in order;
   one of norm 0 is left as it is), their bf16 copies rounded again: the same bits at any thread
   count. No allocation. */
void mt_params_normalize_units(mt_params *P);
int mt_params_find(const mt_params *P, const char *name); /* -1 when absent; O(1) */
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

#endif
