/* The step's parallelism (train.h, mt_parallel): threads in one process, ranks under MPI, and
   ranks whose optimizer state is sharded (--zero 1); the one place that tells them apart. */
#include <math.h>

#include "train.h"

/* The loss of rows [lo, lo + n) of the drawn batch on the parameters P (mt_rows_loss). */
static mt_tensor *rows_loss(mt_ctx *c, mt_params *P, int lo, int n, void *arg) {
    mt_trainer *tr = arg;
    return tr->task->type->rows_loss(c, tr->model, P, tr->task, lo, n);
}

/* ---- what the strategies share ---- */

static mt_status init_whole(mt_trainer *tr, int *first, int *last, mt_err *err) {
    (void)err;
    *first = 0, *last = tr->P->n;
    return MT_OK;
}

static size_t bucket_floats(const mt_trainer *tr) {
    size_t kb = tr->cfg.bucket_kb ? (size_t)tr->cfg.bucket_kb : MT_DIST_BUCKET_KB;
    return kb * 1024 / sizeof(float);
}

static double norm_whole(const mt_trainer *tr, const mt_grads *G) {
    return mt_grads_norm(G, tr->P->grad_total);
}

static void gather_none(mt_trainer *tr, bool grads) { (void)tr, (void)grads; }

static mt_status save_whole(mt_trainer *tr, const char *path, mt_err *err) {
    return mt_dist_rank() == 0 ? mt_optim_save(&tr->opt, tr->P, path, err) : MT_OK;
}

/* ---- threads: one process ---- */

/* Each micro-batch's rows split across the replicas, whose buffers accumulate the micro-batches'
   gradients, each backward weighted by its rows' share of the step's K B. */
static double threads_backward(mt_trainer *tr, mt_grads *G) {
    int B = tr->cfg.batch, K = tr->cfg.grad_accum;
    double loss = 0;
    for (int k = 0; k < K; k++)
        loss += mt_replicas_backward(&tr->replicas, &tr->ctx, tr->P, k * B, B, K * B, rows_loss,
                                     tr);
    *G = mt_replicas_grads(&tr->replicas);
    return loss;
}

static const mt_parallel THREADS = {
    .init = init_whole,
    .backward = threads_backward,
    .grad_norm = norm_whole,
    .gather = gather_none,
    .save_optim = save_whole,
};

/* ---- ranks: MPI, every rank holding the whole optimizer state ---- */

static mt_status ranks_init(mt_trainer *tr, int *first, int *last, mt_err *err) {
    init_whole(tr, first, last, err);
    return mt_dist_grads_init(&tr->dist, tr->P, bucket_floats(tr), NULL, err);
}

/* This rank's slices of the step's micro-batches, each backward weighted n / (K B): the sum
   across ranks is the gradient of the step's mean loss, summed during the last backward
   (mt_dist_grads). Each rank draws its own dropout masks, from a stream derived from the shared
   one, which advances by one draw a step (the checkpoint saves the shared one). */
static double ranks_backward(mt_trainer *tr, mt_grads *G) {
    mt_ctx *c = &tr->ctx;
    int B = tr->cfg.batch, K = tr->cfg.grad_accum, lo, n;
    mt_dist_slice(B, &lo, &n);
    mt_rng shared = c->rng;
    mt_rng_seed(&c->rng, mt_rng_u64(&shared) ^ (uint64_t)mt_dist_rank());
    float w = (float)n / (float)(K * B);
    double loss = 0;
    for (int k = 0; k < K; k++) {
        mt_ctx_reset(c);
        mt_tensor *l = rows_loss(c, tr->P, k * B + lo, n, tr);
        if (k == K - 1) mt_dist_grads_begin(&tr->dist, c);
        mt_backward_from(c, l, &w);
        if (k == K - 1) mt_dist_grads_end(&tr->dist, c);
        loss += (double)l->data[0] * w;
    }
    c->rng = shared;
    *G = (mt_grads){.g = &tr->P->grad, .n = 1};
    return loss;
}

static const mt_parallel RANKS = {
    .init = ranks_init,
    .backward = ranks_backward,
    .grad_norm = norm_whole,
    .gather = gather_none,
    .save_optim = save_whole,
};

/* ---- shards: MPI with ZeRO-1 ---- */

static mt_status shards_init(mt_trainer *tr, int *first, int *last, mt_err *err) {
    mt_status s = mt_zero_init(&tr->zero, tr->P, err);
    if (s != MT_OK) return s;
    *first = tr->zero.first[mt_dist_rank()], *last = tr->zero.first[mt_dist_rank() + 1];
    return mt_dist_grads_init(&tr->dist, tr->P, bucket_floats(tr), &tr->zero, err);
}

static double shards_norm(const mt_trainer *tr, const mt_grads *G) {
    (void)G; /* P->grad, summed in this rank's shard only */
    return sqrt(mt_zero_grad_sumsq(&tr->zero, tr->P));
}

static void shards_gather(mt_trainer *tr, bool grads) { mt_zero_gather(&tr->zero, tr->P, grads); }

/* every rank sends its shard to rank 0, which writes the whole state */
static mt_status shards_save(mt_trainer *tr, const char *path, mt_err *err) {
    return mt_zero_save_optim(&tr->zero, &tr->opt, tr->P, path, err);
}

static const mt_parallel SHARDS = {
    .sharded = true,
    .init = shards_init,
    .backward = ranks_backward,
    .grad_norm = shards_norm,
    .gather = shards_gather,
    .save_optim = shards_save,
};

mt_status mt_parallel_choose(const mt_train_cfg *cfg, const mt_parallel **par, mt_err *err) {
    if (cfg->zero && mt_dist_size() == 1)
        return mt_errorf(err, MT_EINVAL,
                         "--zero 1 shards the optimizer state across MPI ranks, and this run is "
                         "one process: run build-mpi/train under mpirun -np N (N >= 2), or drop "
                         "--zero");
    *par = mt_dist_size() == 1 ? &THREADS : cfg->zero ? &SHARDS : &RANKS;
    return MT_OK;
}
