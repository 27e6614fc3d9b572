/* mt diag: what a depth study measures while a model trains (./train --diag-*), as CSV files in
 * the run's directory, for a model type with a probe: its task draws fixed rows, its model gives
 * their hidden state (model.h). Every diagnostic is off by
 * default and costs nothing when off.
 *
 * diag_grad.csv   step,layer,attn_norm,attn,ffn_norm,ffn,total
 *   The L2 norm of the gradient (before clipping) of each block's sublayers: its two norms'
 *   parameters and the attention (q, k, v, out projections) and FFN (fc1, fc2) parameters, the
 *   latter with their sublayer's own norms (Sub-LN's inner norms, Peri-LN's output norms; a
 *   decoder block's cross-attention with its attention); total = the block's norm. An
 *   encoder-decoder's blocks are numbered encoder first: layer enc_layers is the decoder's first.
 *   Row layer -1: everything outside the blocks (embeddings, final
 *   norm, head) in total, the sublayer columns empty. The squares of the totals of one step sum
 *   to the squared global gradient norm. Step s is the gradient at the weights after s updates
 *   (step 0: at init), written every grad_every steps.
 * diag_update.csv step,update
 *   DeepNet's model update on a fixed held-out batch x (diag batch rows of the validation
 *   split, the type's probe): sqrt(mean over tokens of ||F(x, theta_s) - F(x, theta_0)||^2 / C),
 *   F the final hidden state, i.e. what the head sees (after the final norm for Pre-LN; Post-LN
 *   and DeepNorm end with a norm in the last block); an encoder-decoder's is the decoder's at the
 *   target positions of B validation words, teacher forced. Steps 0..update_steps; F(x, theta_0)
 *   is kept from the
 *   start.
 * diag_resid.csv  step,layer,norm
 *   The residual stream entering block layer (layer n_layer: leaving the last block) on the same
 *   batch: the mean over tokens of ||x_t||_2 (Xiong et al. 2020). Every resid_every steps from 0.
 *   An encoder-decoder: its encoder's blocks, then its decoder's (the encoder's output has no row).
 * diag_attn.csv   step,layer,self,cross
 *   The largest attention logit q.k / sqrt(HS) (after the QK-norm and RoPE) of block layer's
 *   self-attention and (a decoder's) cross-attention on the same batch, over its rows, heads and
 *   the keys each query sees (Wortsman et al. 2023: its growth precedes the instability). Every
 *   attn_every steps from 0; cross empty for a block without one. Layers numbered as above.
 * diag_sink.csv   step,layer,sink_rate,entropy
 *   Of block layer's self-attention on the same batch, its weights P_ts (those the values are
 *   mixed with: softpick's, or a learned sink's softmax with the sink's column dropped): the share
 *   of (row, head, query t) with P_t0 > 0.3 (the first token's weight; Gu et al.'s epsilon,
 *   arXiv 2410.10781), and the mean over them of -sum_s P_ts log P_ts (0 log 0 = 0). Every
 *   sink_every steps from 0. Layers numbered as above.
 * diag_act.csv    step,layer,max_abs,kurtosis
 *   The residual stream x entering block layer on the same batch (diag_resid's): max |x| over
 *   tokens and channels (massive activations, Sun et al. arXiv 2402.17762) and Pearson's kurtosis
 *   E[(x - mu)^4] / sigma^4 over all of them (3 for a Gaussian). Every act_every steps from 0.
 * diag_hc.csv     step,layer,attn_gain,attn_grad_gain,ffn_gain,ffn_grad_gain,composite_gain,
 *                 composite_grad_gain
 *   Hyper-connections' residual mixing on the same batch (--residual hc or mhc): mHC's Amax gains
 *   (Xie et al., arXiv 2512.24880, section 3.1), the largest absolute row sum (the forward
 *   signal's gain) and column sum (the backward gradient's) of block layer's attention and FFN
 *   mixing H_res (N, N), and of the composite mapping from the block's input to the last block's
 *   output, H_res(2L-1) ... H_res(2 layer); each the max over the batch's tokens (HC's dynamic
 *   mixing is one a token; mHC's doubly stochastic one gives 1). Every hc_every steps from 0.
 * diag_logz.csv   step,mean,max
 *   log Z = logsumexp_j(logit_j) of the output logits at every position of the same batch (what
 *   PaLM's z-loss keeps near 0): its mean and its max over the positions, every logz_every steps
 *   from 0 (a model type with logits: the GPT).
 * diag_ratio.csv  step,layer,<the blocks' matrices>,total
 *   Each trained matrix's update-to-weight ratio ||W_s - W_{s-1}||_F / ||W_{s-1}||_F, the
 *   quantity muP and Muon reason about: a column per matrix of a block by its name in the block
 *   (attn.q_proj, ffn.fc1, ...; the union over the blocks, empty where a block has none), total:
 *   all the block's matrices as one; row layer -1: the matrices outside the blocks (embeddings,
 *   head) as one. Every ratio_every steps from ratio_every; any model type.
 * diag_qkclip.csv step,layer,self_clipped,self_logit,cross_clipped,cross_logit
 *   With --qk-clip: the heads QK-Clip scaled in block layer's self- (and a decoder's cross-)
 *   attention, summed over the updates since the last row, and the attention's largest logit of
 *   those steps before clipping (over its heads, the step's batch); every qk_every steps from
 *   qk_every (cross empty without a cross-attention). Any model type.
 * diag_skip.csv   step,block,loss,delta
 *   The block-effectiveness probe of the Curse of Depth paper (arXiv 2502.05795): the plain
 *   cross-entropy of the same batch with the whole model (block -1, delta 0), then with each block
 *   skipped in turn (its output is its input), delta = loss - the whole model's; every
 *   skip_every steps from 0 and after the last step. n_layer + 1 forwards of the batch, no
 *   gradients. An encoder-decoder's blocks are numbered as in diag_grad.csv.
 */
#ifndef MT_DIAG_H
#define MT_DIAG_H

#include <stdio.h>

#include "../tensor/base.h"
#include "../tensor/params.h"
#include "../tensor/tensor.h"
#include "../train/options.h"
#include "../train/train.h"

/* The fixed batch: the task's probe_rows of seed (the run's) ^ MT_DIAG_SEED. */
#define MT_DIAG_SEED 0x4449414742415443ULL

/* diag_ratio.c's state: the copy of the counted matrices after the step before a due one. */
typedef struct {
    FILE *f;
    int L, n_cols; /* blocks; the columns of the blocks' matrices (the total after them) */
    long step;     /* of the copy; -1: none */
    int *block;    /* (P->n) each entry's block, -1 outside */
    int *col;      /* (P->n) its column; -2: counted outside the blocks; -1: not counted */
    size_t *off;   /* (P->n) its floats' offset in prev */
    double *pair;  /* (2 P->n) ||W - W_prev||^2 and ||W_prev||^2 of each entry */
    double *sq;    /* (L + 1, n_cols + 1, 2) the sums by block (the outside last) and column */
    float *prev;
} mt_diag_ratio;

/* The CSVs of diag_attn.c's instrumented forward. */
enum { MT_DIAG_ATTN, MT_DIAG_SINK, MT_DIAG_ACT, MT_DIAG_HC, MT_DIAG_HOOKS };

/* diag_qkclip.c's state: per block its self- and cross-attention's cells. */
typedef struct {
    FILE *f;
    int L;
    int *slot;     /* (qk.n) each attention's cell, 2 block + cross */
    bool *cross;   /* (qk.n) a cross-attention */
    long *clipped; /* (2 L) heads clipped since the last row */
    float *logit;  /* (2 L) the largest logit since the last row */
} mt_diag_qk;

typedef struct {
    mt_diag_cfg cfg;
    FILE *grad, *update, *resid;
    int B, L;
    float *f0;                 /* F(x, theta_0) of the fixed batch */
    int *group;                /* per parameter: 4 layer + sublayer, or -1 outside the blocks */
    double *sq;                /* 4 L + 1 sums of squares */
    double *resid_norm;        /* L + 1 */
    FILE *hook[MT_DIAG_HOOKS]; /* diag_attn.c's files */
    float *attn_max;           /* 2 L: each attention's largest logit, in forward order */
    double *attn_sink; /* (2 L, 2): each attention's sink rate and entropy, in forward order */
    double *act_stats; /* (L, 2): each block input's max |x| and kurtosis */
    const mt_tensor **hc_coefs; /* 2 L: each hyper-connection's coefficients, in forward order */
    double *hc_gains;           /* (2 L, 4): mt_hc_gains' */
    FILE *logz, *skip;
    mt_diag_ratio ratio;
    mt_diag_qk qk;
} mt_diag;

/* Nothing when every diagnostic is off; else (a type with a probe) opens the CSVs that cfg asks
   for in tr->cfg.out and writes the step-0 rows of the update and residual files. The trainer
   must be at step 0 when update_steps > 0 (theta_0 is the init). grad_every sets
   tr->keep_grad (the steps leave their gradients in P->grad). */
mt_status mt_diag_open(mt_diag *d, const mt_diag_cfg *cfg, mt_trainer *tr, mt_err *err);
/* After mt_trainer_step returned with st->finite: the rows due at tr->step. */
mt_status mt_diag_after_step(mt_diag *d, mt_trainer *tr, const mt_step_stats *st, mt_err *err);
void mt_diag_close(mt_diag *d);
/* The model has a probe of its hidden state and the task rows to probe it on. */
static inline bool mt_diag_probes_hidden(const mt_trainer *tr) {
    return tr->model->type->probes && tr->model->type->probes->hidden && tr->task->type->probe_rows;
}
/* ---- report.html (./train --report, report.c) ----------------------------------------------
 * scripts/report.html (built in) filled as scripts/plot-runs --html fills it for one run: Chart.js
 * inlined, the run's options and its CSVs' whole lines (docs/plotting.md). */
#define MT_CHARTJS "/usr/share/javascript/chart.js/chart.min.js" /* Debian's libjs-chart.js */
typedef struct {
    char *chartjs; /* the library's text, read once: MT_CHARTJS or the environment's */
    int n_layer;   /* the model config's, -1 without one */
    double last;   /* mt_clock() of the last write */
    int writes;
    double seconds;         /* spent writing */
    double flops_per_token; /* the model's, for the MFU panel */
    double peak_gflops;     /* the GEMM peak measured at open */
    char peak[160];         /* how */
} mt_html_report;
/* MT_EINVAL naming the package when there is no chart library to inline. */
mt_status mt_html_report_open(mt_html_report *r, const mt_trainer *tr, mt_err *err);
/* tr->cfg.out/report.html written atomically at tr->step: while the run goes on (!done, no
   stopped) the page reloads itself; stopped (the error that ended the run) is noted on it. */
mt_status mt_html_report_write(mt_html_report *r, const mt_trainer *tr, bool done,
                               const char *stopped, mt_err *err);
void mt_html_report_close(mt_html_report *r);

/* diag_attn.c: diag_attn.csv, diag_sink.csv, diag_act.csv and diag_hc.csv opened (attn_every,
   sink_every, act_every, hc_every > 0) with their step rows; the rows due at a step (one
   forward); closed. */
mt_status mt_diag_attn_open(mt_diag *d, mt_trainer *tr, mt_err *err);
void mt_diag_attn_close(mt_diag *d);
/* groups.c: the parameters by block and sublayer (its comment says how). */
int mt_diag_param_groups(const mt_params *P, int *group, int *block);
/* diag_ratio.c: diag_ratio.csv opened (ratio_every > 0), its rows due after a step; closed. */
mt_status mt_diag_ratio_open(mt_diag *d, mt_trainer *tr, mt_err *err);
mt_status mt_diag_ratio_after_step(mt_diag *d, mt_trainer *tr, mt_err *err);
void mt_diag_ratio_close(mt_diag *d);
/* diag_qkclip.c: diag_qkclip.csv opened (qk_every > 0, with --qk-clip), its rows after a step;
   closed. */
mt_status mt_diag_qk_open(mt_diag *d, mt_trainer *tr, mt_err *err);
mt_status mt_diag_qk_after_step(mt_diag *d, mt_trainer *tr, mt_err *err);
void mt_diag_qk_close(mt_diag *d);
mt_status mt_diag_attn_rows(mt_diag *d, mt_trainer *tr, long step, mt_err *err);

#endif
