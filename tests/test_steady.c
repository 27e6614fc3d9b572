/* A steady-state training step allocates nothing: after the first step, steps 2..N of a small
   GPT training loop (loss and backward through mt_replicas, with 1 and with 2 replicas, the
   gradient's norm, clipping, the update and zero grad in mt_optim_update, with AdamW, Lion and
   Muon, whose Newton-Schulz products run in the update; AdamW also with the blocks recomputed in
   the backward, mt_recompute, QK-Clip's probe and rescaling of every head, --act relu2, the
   logit soft cap fused into the loss and value embeddings in the first and last block) make no
   call to malloc, calloc, realloc, aligned_alloc, memalign or posix_memalign from mt's code, and
   the step arena's peak does not grow. The allocator is wrapped by defining it here, over glibc's
   __libc_* entry points; a call counts as mt's when it returns into this executable's text,
   which holds all of libmt.a (OpenBLAS's threaded sgemm mallocs its job array on every call:
   counted apart and only reported with 1 replica; with 2, where each op keeps to its thread,
   none is allowed). oneDNN (bf16 precision, or MT_GEMM=onednn) builds an argument map in every
   dnnl_primitive_execute: its allocations are counted apart again and reported, not failed.
   So are those of LLVM's OpenMP runtime (libomp, a clang build's): its static loop set-up,
   __kmpc_for_static_init_4, mallocs 512 bytes a call, the replicas' own loops' too (libgomp's
   allocates nothing).
   Both precisions run when this machine has bf16. Under AddressSanitizer, which owns malloc,
   only the arena half runs. Nothing is timed. */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

/* allocations from mt's code, from oneDNN, from LLVM's OpenMP runtime, from other libraries */
static atomic_long n_mt, n_dnnl, n_llvm_omp, n_lib;
static atomic_bool counting;

#ifndef __SANITIZE_ADDRESS__
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t k, size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern char __executable_start, etext; /* this program's code, from the linker */

static void count(const void *caller) {
    if (!atomic_load_explicit(&counting, memory_order_relaxed)) return;
    uintptr_t a = (uintptr_t)caller;
    bool ours = a >= (uintptr_t)&__executable_start && a < (uintptr_t)&etext;
    /* oneDNN's: from libdnnl, or from libstdc++'s operator new (oneDNN is the only C++ under mt) */
    static _Thread_local bool inside; /* dladdr's own allocations, if any, are not looked up */
    Dl_info info;
    bool dnnl = false, llvm_omp = false;
    if (!ours && !inside) {
        inside = true;
        const char *lib = dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "";
        dnnl = strstr(lib, "libdnnl") || strstr(lib, "libstdc++");
        llvm_omp = strstr(lib, "/libomp.so");
        inside = false;
    }
    atomic_fetch_add(ours ? &n_mt : dnnl ? &n_dnnl : llvm_omp ? &n_llvm_omp : &n_lib, 1);
}
/* noinline: the return address must be the caller's, also for calls from this file */
#define CALLER __builtin_return_address(0)
#define WRAP __attribute__((noinline))
WRAP void *malloc(size_t n) { return count(CALLER), __libc_malloc(n); }
WRAP void *calloc(size_t k, size_t n) { return count(CALLER), __libc_calloc(k, n); }
WRAP void *realloc(void *p, size_t n) { return count(CALLER), __libc_realloc(p, n); }
WRAP void *aligned_alloc(size_t align, size_t n) {
    return count(CALLER), __libc_memalign(align, n);
}
WRAP void *memalign(size_t align, size_t n) { return count(CALLER), __libc_memalign(align, n); }
WRAP int posix_memalign(void **p, size_t align, size_t n) {
    count(CALLER);
    return (*p = __libc_memalign(align, n)) ? 0 : ENOMEM;
}
#define WRAPPED 1
#else
#define WRAPPED 0
#endif

/* QK-Clip in the steps (qk.n > 0): the attentions and each replica's probe (R.n x qk.heads). */
static mt_qk_clip qk;
static float *qk_max;

/* One training step on batch b of B rows, forward and backward by R; with QK-Clip its probe
   reset before and the heads above tau rescaled after the update (the trainer's order); returns
   the loss. */
static double step(mt_replicas *R, mt_ctx *c, mt_gpt *m, mt_optim *o, mt_gpt_batch *b, int B) {
    if (qk.n) mt_qk_clip_reset(qk_max, R->n * qk.heads);
    double loss = mt_replicas_backward(R, c, &m->P, 0, B, B, mt_gpt_rows_loss, b);
    mt_grads G = mt_replicas_grads(R);
    double norm = mt_grads_norm(&G, m->P.total);
    mt_optim_update(o, &m->P, &G, mt_optim_lr_at(&o->cfg.sched, o->t),
                    mt_optim_clip_coef(norm, 1.0), false);
    for (int r = 1; qk.n && r < R->n; r++)
        for (int h = 0; h < qk.heads; h++)
            if (qk_max[r * qk.heads + h] > qk_max[h]) qk_max[h] = qk_max[r * qk.heads + h];
    if (qk.n) MT_ASSERT(mt_qk_clip_apply(&qk, &m->P, qk_max, NULL) > 0, "qk-clip: no head clipped");
    return loss;
}

/* QK-Clip with a tau every head exceeds, the probe in c and the replicas' contexts. */
static void qk_setup(mt_replicas *R, mt_ctx *c, mt_gpt *m) {
    mt_err err;
    MT_ASSERT(mt_qk_clip_init(&qk, &m->P, m->cfg.stack.n_head, 1e-4f, &err) == MT_OK, "qk: %s",
              err.msg);
    qk_max = malloc((size_t)R->n * qk.heads * sizeof *qk_max);
    for (int r = 0; r < R->n; r++) {
        mt_ctx *cr = r ? &R->ctx[r - 1] : c;
        cr->qk_max = qk_max + (size_t)r * qk.heads, cr->qk_slot = qk.slot, cr->qk_at = -1;
    }
}

/* The training loop with n replicas (1: every op split across the threads; 2: the batch), its
   linear layers' products in precision prec, optimizer kind, its blocks recomputed in the
   backward or not; nGPT's or hyper-connections' (hc: HC's or mHC's) residual. */
static void steady(int n, mt_precision prec, mt_optim_kind kind, bool recompute, bool ngpt,
                   mt_hyper_kind hc) {
    enum { B = 4, T = 32, STEPS = 6 };
    mt_err err = {0};
    mt_gpt_config cfg = mt_gpt_config_default();
    cfg.stack.n_layer = 2, cfg.stack.n_embd = 64, cfg.stack.n_head = 4, cfg.n_ctx = T;
    cfg.arch = ngpt ? MT_ARCH_NGPT : MT_ARCH_GPT; /* its ops, and the renormalisation */
    cfg.stack.hc.kind = hc;
    if (recompute) cfg.stack.act = MT_ACT_RELU2, cfg.stack.logit_softcap = 30; /* issue 45's */
    if (recompute) snprintf(cfg.value_embeds, sizeof cfg.value_embeds, "0,-1");
    mt_gpt m;
    mt_optim o;
    mt_ctx c;
    mt_replicas R;
    mt_optim_config oc = mt_optim_defaults();
    oc.kind = kind;
    if (ngpt) oc.weight_decay = 0; /* refused on unit matrices */
    MT_ASSERT(!mt_gpt_build(&m, &cfg, &err) && !mt_optim_init(&o, &oc, &m.P, &err) &&
                  !mt_ctx_init(&c, 64 << 20, 1, &err) &&
                  (prec != MT_BF16 || !mt_params_enable_bf16(&m.P, &err)) &&
                  !mt_replicas_init(&R, n, &m.P, 64 << 20, 1, &err),
              "setup: %s", err.msg);
    char pn[112];
    snprintf(pn, sizeof pn, "%s %s%s%s%s%s", mt_enum_name(&MT_PRECISIONS, prec),
             mt_enum_name(&MT_OPTIMS, kind),
             recompute ? ", recomputed, qk-clip, relu2, logit softcap, value embeds" : "",
             ngpt ? ", ngpt" : "", hc ? ", " : "", hc ? mt_enum_name(&MT_HYPERS, hc) : "");
    if (recompute) qk_setup(&R, &c, &m);
    c.precision = prec, c.recompute = recompute;
    for (int i = 0; i < n - 1; i++) R.ctx[i].precision = prec, R.ctx[i].recompute = recompute;
    mt_rng r;
    mt_rng_seed(&r, 3);
    mt_params_initialize(&m.P, &r);
    mt_params_refresh_bf16(&m.P);
    int ids[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (int)mt_rng_below(&r, 256);
    for (int i = 0; i < B * T; i++) targets[i] = (int)mt_rng_below(&r, 256);
    mt_gpt_batch b = {&m, ids, targets, T};

    double first = step(&R, &c, &m, &o, &b, B), last = first;
    size_t peak1 = c.arena.peak, peak1_r = n > 1 ? R.ctx[0].arena.peak : 0;
    atomic_store(&n_mt, 0);
    atomic_store(&n_dnnl, 0);
    atomic_store(&n_llvm_omp, 0);
    atomic_store(&n_lib, 0);
    atomic_store(&counting, true);
    for (int s = 1; s < STEPS; s++) last = step(&R, &c, &m, &o, &b, B);
    atomic_store(&counting, false);
    long mt_calls = atomic_load(&n_mt), lib_calls = atomic_load(&n_lib);
    long dnnl_calls = atomic_load(&n_dnnl), llvm_omp_calls = atomic_load(&n_llvm_omp);

    CHECK(mt_calls == 0, "%s, %d replicas, steps 2..%d: mt's code called the allocator %ld times",
          pn, n, STEPS, mt_calls);
    /* inside a replica no op opens an OpenMP region: libgomp would allocate a team for each */
    CHECK(n == 1 || lib_calls == 0,
          "%s, %d replicas, steps 2..%d: the libraries called the allocator %ld times (an OpenMP "
          "region inside a replica?)",
          pn, n, STEPS, lib_calls);
    CHECK(c.arena.peak == peak1 && (n == 1 || R.ctx[0].arena.peak == peak1_r),
          "%s, %d replicas: an arena grew after step 1", pn, n);
    CHECK(last < first, "%s, %d replicas: training on one batch did not lower the loss (%g -> %g)",
          pn, n, first, last);
    if (WRAPPED)
        printf("test_steady: %s, %d replicas, steps 2..%d: %ld allocations by mt, %ld by oneDNN, "
               "%ld by LLVM's OpenMP runtime, %ld by the other libraries under it\n",
               pn, n, STEPS, mt_calls, dnnl_calls, llvm_omp_calls, lib_calls);
    mt_replicas_free(&R);
    mt_ctx_free(&c);
    mt_optim_free(&o);
    mt_gpt_free(&m);
    mt_qk_clip_free(&qk);
    free(qk_max);
    qk_max = NULL;
}

int main(void) {
    mt_set_threads(2); /* the OpenMP and OpenBLAS paths of a real run */
    for (int prec = MT_FP32; prec <= MT_BF16; prec++) {
        if (prec == MT_BF16 && mt_bf16_check(NULL) != MT_OK) {
            printf("test_steady: bf16 skipped (no oneDNN or no AVX512_BF16 here)\n");
            continue;
        }
        for (int k = 0; k < 4; k++) { /* AdamW, Lion, Muon; then AdamW recomputed, QK-Clip */
            mt_optim_kind kind = (mt_optim_kind[]){MT_OPTIM_ADAMW, MT_OPTIM_LION, MT_OPTIM_MUON,
                                                   MT_OPTIM_ADAMW}[k];
            steady(1, prec, kind, k == 3, false, MT_HYPER_NONE);
            steady(2, prec, kind, k == 3, false, MT_HYPER_NONE);
        }
        steady(1, prec, MT_OPTIM_ADAMW, false, true, MT_HYPER_NONE); /* nGPT */
        steady(2, prec, MT_OPTIM_ADAMW, false, true, MT_HYPER_NONE);
        for (int h = MT_HYPER_HC; h <= MT_HYPER_MHC; h++) /* hyper-connections' ops and streams */
            for (int n = 1; n <= 2; n++)
                steady(n, prec, MT_OPTIM_ADAMW, h == MT_HYPER_MHC, false, h);
    }
    if (!WRAPPED)
        printf("test_steady: allocator not wrapped under AddressSanitizer; arena checked only\n");
    /* the wrapper sees mt's allocations: one while counting is counted */
    long mt_calls = atomic_load(&n_mt);
    void *volatile p;
    atomic_store(&counting, true);
    p = malloc(16);
    atomic_store(&counting, false);
    free(p);
    CHECK(!WRAPPED || atomic_load(&n_mt) == mt_calls + 1, "the malloc wrapper did not count");

    return check_finish("test_steady");
}
