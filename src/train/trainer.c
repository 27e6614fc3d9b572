/* The training loop's pieces: setup, one step, evaluation, checkpoints, resume; and scoring.
   A GPT on tokens or a ViT on images: the model-specific parts are the setup, the batch and its
   loss, the evaluation and the checkpoint; the rest is shared. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train.h"

/* independent RNG streams from one seed */
#define SEED_SAMPLER 0x53414d504c455221ULL
#define SEED_DROPOUT 0x44524f504f555421ULL
#define SEED_EVAL 0x4556414c5549414eULL
#define SEED_SPLIT 0x53504c4954494d47ULL

/* The most rows of a batch of B one rank computes. */
static int local_rows(int B) { return (B + mt_dist_size() - 1) / mt_dist_size(); }

/* mkdir -p */
static mt_status make_dirs(const char *path, mt_err *err) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return mt_errorf(err, MT_EINVAL, "--out: the path is too long");
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mt_errorf(err, MT_EIO, "%s: cannot create the directory: %s", buf,
                             strerror(errno));
        if (!(*p = c)) break;
    }
    return MT_OK;
}

/* A run in out that is not the one asked for (other options) is refused without --resume: its
   checkpoint would be overwritten. The same options start the run over. */
static mt_status check_fresh_out(const char *out, const char *model_path, const char *options,
                                 mt_err *err) {
    struct stat sb;
    if (stat(model_path, &sb) != 0) return MT_OK;
    mt_safetensors st;
    mt_err e;
    if (mt_st_load(model_path, &st, &e) != MT_OK)
        return mt_errorf(err, MT_EINVAL,
                         "--out %s holds a model.safetensors that cannot be read (%s): remove it "
                         "or choose another --out",
                         out, e.msg);
    const char *saved = mt_st_meta(&st, "options");
    mt_status s = MT_OK;
    if (!saved || strcmp(saved, options ? options : "") != 0) {
        /* the first line that differs names the option */
        char a[160] = "", b[160] = "";
        const char *p = saved ? saved : "", *q = options ? options : "";
        while (*p || *q) {
            size_t la = strcspn(p, "\n"), lb = strcspn(q, "\n");
            if (la != lb || strncmp(p, q, la) != 0) {
                snprintf(a, sizeof a, "%.*s", (int)la, p);
                snprintf(b, sizeof b, "%.*s", (int)lb, q);
                break;
            }
            p += la + (p[la] == '\n');
            q += lb + (q[lb] == '\n');
        }
        s = mt_errorf(err, MT_EINVAL,
                      "--out %s already holds another run (there '%s', now '%s'): --resume "
                      "continues it, or choose another --out",
                      out, a, b);
    }
    mt_st_free(&st);
    return s;
}

/* The step arena for a slice of rows of the batch: --arena-mb, or the model's estimate. */
static size_t step_arena(const mt_trainer *tr, int rows) {
    if (tr->cfg.arena_bytes) return tr->cfg.arena_bytes;
    return tr->cfg.model == MT_MODEL_VIT ? mt_vit_arena_bytes(&tr->vit.cfg, rows, true)
                                         : mt_gpt_arena_bytes(&tr->model.cfg, rows, true);
}

static bool has_buffers(const mt_params *P) {
    for (int i = 0; i < P->n; i++)
        if (P->p[i].role == MT_ROLE_BUFFER) return true;
    return false;
}

/* The replicas a step runs (mt_train_cfg.replicas, checked by check_replicas once the model
   exists): at most one per row of this rank's slice of the batch. */
static int replica_count(const mt_train_cfg *cfg, const mt_params *P) {
    int n = cfg->replicas;
    if (n == 0) n = mt_dist_size() > 1 || has_buffers(P) ? 1 : mt_threads();
    return n < local_rows(cfg->batch) ? n : local_rows(cfg->batch);
}

static mt_status check_replicas(const mt_train_cfg *cfg, const mt_params *P, mt_err *err) {
    if (cfg->replicas < 0 || cfg->replicas > mt_threads())
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: expected 0 (one per thread) to %d (the threads)",
                         cfg->replicas, mt_threads());
    if (cfg->replicas > 1 && has_buffers(P))
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: the model keeps running statistics (BatchNorm), which "
                         "replicas would all write: expected 0 or 1", cfg->replicas);
    if (cfg->replicas > 1 && mt_dist_size() > 1)
        return mt_errorf(err, MT_EINVAL,
                         "--replicas %d: MPI runs %d ranks: expected 0 or 1 (one thread of "
                         "replicas per rank is not supported)", cfg->replicas, mt_dist_size());
    return MT_OK;
}

/* The parameter table P (not yet allocated), its gradients, the optimizer state and act bytes
   of a step's activations (batch names the batch) against the available memory. */
static mt_status check_memory(const mt_trainer *tr, const mt_params *P, const mt_optim_config *oc,
                              double act, const char *batch, mt_err *err) {
    double gib = 1024.0 * 1024 * 1024, params = (double)P->total * sizeof(float);
    int slots = oc->kind == MT_OPTIM_SGD ? (oc->momentum > 0) : 2; /* Adam: m and v */
    slots += replica_count(&tr->cfg, P) - 1; /* the other replicas' gradients */
    if (tr->cfg.arena_bytes) act = (double)tr->cfg.arena_bytes;
    char what[256];
    snprintf(what, sizeof what,
             "parameters and gradients %.2f GiB, optimizer state and replicas' gradients %.2f "
             "GiB, activations of a batch of %s %.2f GiB",
             2 * params / gib, slots * params / gib, batch, act / gib);
    return mt_mem_check((2 + slots) * params + act, what, err);
}

/* The GPT and its data. */
static mt_status gpt_setup(mt_trainer *tr, const mt_gpt_config *mc, const mt_optim_config *oc,
                           mt_err *err) {
    const mt_train_cfg *cfg = &tr->cfg;
    mt_status s = mt_data_load(cfg->data, cfg->tokenizer, &tr->tok, &tr->all, err);
    if (s != MT_OK) return s;
    mt_gpt_config model_cfg = *mc;
    model_cfg.n_vocab = tr->tok.n_vocab;
    if ((s = mt_gpt_config_validate(&model_cfg, err)) != MT_OK ||
        (s = mt_tokens_split(&tr->all, cfg->val_fraction, model_cfg.n_ctx, &tr->train, &tr->val,
                             err)) != MT_OK ||
        (s = mt_gpt_build_table(&tr->model, &model_cfg, err)) != MT_OK)
        return s;
    char batch[64];
    snprintf(batch, sizeof batch, "%d x %d tokens", cfg->batch, model_cfg.n_ctx);
    if ((s = check_memory(tr, &tr->model.P, oc,
                          mt_gpt_activation_bytes(&tr->model.cfg, cfg->batch, true), batch,
                          err)) != MT_OK ||
        (s = mt_params_alloc(&tr->model.P, err)) != MT_OK)
        return s;
    tr->P = &tr->model.P;
    mt_rng r;
    mt_rng_seed(&r, cfg->seed);
    mt_gpt_init_weights(&tr->model, &r);
    size_t n = (size_t)cfg->batch * (size_t)model_cfg.n_ctx; /* the global batch */
    tr->x = malloc(n * sizeof *tr->x);
    tr->y = malloc(n * sizeof *tr->y);
    if (!tr->x || !tr->y)
        return mt_errorf(err, MT_ENOMEM, "out of memory for a batch of %zu tokens", n);
    return MT_OK;
}

/* The ViT and its images: the split (seeded), the normalisation from the training part, the
   image size, channels and classes from the data. */
static mt_status vit_setup(mt_trainer *tr, const mt_optim_config *oc, mt_err *err) {
    const mt_train_cfg *cfg = &tr->cfg;
    mt_images *d = &tr->imgs;
    mt_status s = mt_images_load(cfg->data, &cfg->images, d, err);
    if (s != MT_OK) return s;
    if (!(tr->order = malloc((size_t)d->n * sizeof *tr->order)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for %d image indices", d->n);
    if ((s = mt_images_split(d, (float)cfg->val_fraction, cfg->seed ^ SEED_SPLIT, tr->order,
                             &tr->n_train_img, err)) != MT_OK)
        return s;
    tr->n_val_img = d->n - tr->n_train_img;
    mt_images_normalize_from(d, tr->order, tr->n_train_img);
    mt_vit_config vc = *cfg->vit;
    vc.image_h = d->H, vc.image_w = d->W, vc.channels = d->C, vc.n_classes = d->n_classes;
    if ((s = mt_vit_build_table(&tr->vit, &vc, err)) != MT_OK) return s;
    char batch[64];
    snprintf(batch, sizeof batch, "%d images of %d x %d", cfg->batch, d->H, d->W);
    if ((s = check_memory(tr, &tr->vit.P, oc,
                          mt_vit_activation_bytes(&tr->vit.cfg, cfg->batch, true), batch, err)) !=
            MT_OK ||
        (s = mt_params_alloc(&tr->vit.P, err)) != MT_OK)
        return s;
    tr->P = &tr->vit.P;
    mt_rng r;
    mt_rng_seed(&r, cfg->seed);
    mt_vit_init_weights(&tr->vit, &r);
    size_t B = (size_t)cfg->batch;
    tr->x = malloc(B * sizeof *tr->x);
    tr->y = malloc(B * sizeof *tr->y);
    tr->images =
        malloc((size_t)local_rows(cfg->batch) * d->C * d->H * d->W * sizeof *tr->images);
    if (!tr->x || !tr->y || !tr->images)
        return mt_errorf(err, MT_ENOMEM, "out of memory for a batch of %zu images", B);
    return MT_OK;
}

mt_status mt_trainer_init(mt_trainer *tr, const mt_train_cfg *cfg, const mt_gpt_config *mc,
                          const mt_optim_config *oc, mt_err *err) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    if (cfg->steps < 0)
        return mt_errorf(err, MT_EINVAL, "--steps %d: expected 0 or more", cfg->steps);
    if (cfg->batch < 1)
        return mt_errorf(err, MT_EINVAL, "--batch %d: expected 1 or more", cfg->batch);
    if (cfg->batch < mt_dist_size())
        return mt_errorf(err, MT_EINVAL,
                         "--batch %d: smaller than the %d MPI ranks (each computes a slice of "
                         "the batch): expected %d or more", cfg->batch, mt_dist_size(),
                         mt_dist_size());
    if (cfg->eval_batches < 1)
        return mt_errorf(err, MT_EINVAL, "--eval-batches %d: expected 1 or more",
                         cfg->eval_batches);
    if (snprintf(tr->model_path, sizeof tr->model_path, "%s/model.safetensors", cfg->out) >=
            (int)sizeof tr->model_path ||
        snprintf(tr->optim_path, sizeof tr->optim_path, "%s/optim.safetensors", cfg->out) >=
            (int)sizeof tr->optim_path ||
        snprintf(tr->optim_prev_path, sizeof tr->optim_prev_path, "%s/optim.prev.safetensors",
                 cfg->out) >= (int)sizeof tr->optim_prev_path)
        return mt_errorf(err, MT_EINVAL, "--out: the path is too long");
    mt_status s;
    struct stat sb;
    if (cfg->model == MT_MODEL_VIT && stat(cfg->data, &sb) != 0) /* a file or a directory */
        return mt_errorf(err, MT_EINVAL, "--data %s: %s: expected an image folder or idx files",
                         cfg->data, strerror(errno));
    if ((cfg->model != MT_MODEL_VIT && (s = mt_file_check("--data", cfg->data, err)) != MT_OK) ||
        (s = mt_dir_check_writable("--out", cfg->out, err)) != MT_OK ||
        (!cfg->resume &&
         (s = check_fresh_out(cfg->out, tr->model_path, cfg->options, err)) != MT_OK))
        return s;
    s = cfg->model == MT_MODEL_VIT ? vit_setup(tr, oc, err) : gpt_setup(tr, mc, oc, err);
    if (s == MT_OK) s = check_replicas(cfg, tr->P, err);
    if (s != MT_OK) goto fail;
    mt_optim_config opt_cfg = *oc;
    /* --steps 0 takes no update: any schedule length that validates will do */
    opt_cfg.sched.steps = cfg->steps > 0 ? cfg->steps : oc->sched.warmup > 0 ? oc->sched.warmup : 1;
    if ((s = mt_optim_init(&tr->opt, &opt_cfg, tr->P, err)) != MT_OK) goto fail;
    /* replica 0's arena (tr->ctx) also serves evaluations of whole batches */
    int n_rep = replica_count(cfg, tr->P), rows = local_rows(cfg->batch);
    size_t arena = step_arena(tr, rows), rep_arena = step_arena(tr, (rows + n_rep - 1) / n_rep);
    if ((s = mt_ctx_init(&tr->ctx, arena, cfg->seed ^ SEED_DROPOUT, err)) != MT_OK ||
        (s = mt_replicas_init(&tr->replicas, n_rep, tr->P, rep_arena, cfg->seed ^ SEED_DROPOUT,
                              err)) != MT_OK)
        goto fail;
    mt_sampler_init(&tr->sampler, cfg->seed ^ SEED_SAMPLER);
    if ((s = mt_dist_grads_init(&tr->dist, tr->P, cfg->bucket_floats ? cfg->bucket_floats : 1 << 18,
                                err)) != MT_OK)
        goto fail;
    if ((s = make_dirs(cfg->out, err)) != MT_OK) goto fail;
    return MT_OK;
fail:
    mt_trainer_free(tr);
    return s;
}

/* The first key whose value differs between two JSON objects, into msg. */
static bool json_same(const char *a, const char *b, char *msg, size_t len) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    bool same = x && y;
    const cJSON *kx;
    cJSON_ArrayForEach(kx, x) {
        const cJSON *ky = cJSON_GetObjectItemCaseSensitive(y, kx->string);
        if (!ky || !cJSON_Compare(kx, ky, true)) {
            char *vx = cJSON_PrintUnformatted(kx), *vy = ky ? cJSON_PrintUnformatted(ky) : NULL;
            snprintf(msg, len, "%s is %s in the checkpoint, %s now", kx->string, vx,
                     vy ? vy : "absent");
            free(vx);
            free(vy);
            same = false;
            break;
        }
    }
    if (same && cJSON_GetArraySize(x) != cJSON_GetArraySize(y)) {
        snprintf(msg, len, "the checkpoint has fewer keys");
        same = false;
    }
    cJSON_Delete(x);
    cJSON_Delete(y);
    return same;
}

/* A resumed run keeps its model and data: the model configs a (checkpoint) and b (now) as JSON,
   then the data descriptions da and db (the tokenizer, or the image metadata). */
static mt_status check_same(const mt_trainer *tr, const char *a, const char *b, const char *da,
                            const char *db, const char *data_hint, mt_err *err) {
    char diff[512];
    if (!json_same(a, b, diff, sizeof diff))
        return mt_errorf(err, MT_EINVAL,
                         "%s: a resumed run keeps its model, but the model options differ: %s",
                         tr->model_path, diff);
    if (strcmp(da, db) != 0)
        return mt_errorf(err, MT_EINVAL, "%s: the checkpoint's %s differs from the one of %s",
                         tr->model_path, data_hint, tr->cfg.data);
    return MT_OK;
}

static mt_status gpt_resume(mt_trainer *tr, mt_ckpt_state *state, mt_err *err) {
    mt_gpt saved;
    mt_tokenizer tok;
    mt_status s = mt_ckpt_load(tr->model_path, &saved, &tok, state, NULL, err);
    if (s != MT_OK) return s;
    char *a = mt_gpt_config_to_json(&saved.cfg), *b = mt_gpt_config_to_json(&tr->model.cfg);
    char *ta = mt_tok_to_json(&tok), *tb = mt_tok_to_json(&tr->tok);
    s = check_same(tr, a, b, ta, tb,
                   "tokenizer (a resumed run needs the same data and --tokenizer)", err);
    if (s == MT_OK) memcpy(tr->model.P.data, saved.P.data, saved.P.total * sizeof(float));
    free(a);
    free(b);
    free(ta);
    free(tb);
    mt_gpt_free(&saved);
    mt_tok_free(&tok);
    return s;
}

static mt_status vit_resume(mt_trainer *tr, mt_ckpt_state *state, mt_err *err) {
    mt_vit saved;
    mt_images meta;
    mt_status s = mt_vit_ckpt_load(tr->model_path, &saved, &meta, state, NULL, err);
    if (s != MT_OK) return s;
    char *a = mt_vit_config_to_json(&saved.cfg), *b = mt_vit_config_to_json(&tr->vit.cfg);
    char *ma = mt_images_meta_to_json(&meta), *mb = mt_images_meta_to_json(&tr->imgs);
    s = check_same(tr, a, b, ma, mb,
                   "image size, normalisation or classes (a resumed run needs the same data, "
                   "split and image options)", err);
    if (s == MT_OK) memcpy(tr->vit.P.data, saved.P.data, saved.P.total * sizeof(float));
    free(a);
    free(b);
    free(ma);
    free(mb);
    mt_vit_free(&saved);
    mt_images_free(&meta);
    return s;
}

mt_status mt_trainer_resume(mt_trainer *tr, mt_err *err) {
    mt_ckpt_state state;
    mt_status s = tr->cfg.model == MT_MODEL_VIT ? vit_resume(tr, &state, err)
                                                : gpt_resume(tr, &state, err);
    if (s == MT_OK) {
        /* the optimizer state of the model's step: optim, or optim.prev when a kill came
           between the two writes of a save (mt_trainer_save) */
        mt_err e;
        s = mt_optim_load(&tr->opt, tr->P, tr->optim_path, err);
        if ((s != MT_OK || tr->opt.t != state.step) &&
            mt_optim_load(&tr->opt, tr->P, tr->optim_prev_path, &e) == MT_OK &&
            tr->opt.t == state.step) {
            /* back in place, or the next save would keep the newer, orphaned state as prev */
            s = rename(tr->optim_prev_path, tr->optim_path) == 0
                    ? MT_OK
                    : mt_errorf(err, MT_EIO, "%s: cannot rename to %s: %s", tr->optim_prev_path,
                                tr->optim_path, strerror(errno));
        } else if (s == MT_OK && tr->opt.t != state.step)
            s = mt_errorf(err, MT_EFORMAT,
                          "%s holds the optimizer of step %ld, %s the model of step %ld: start "
                          "again without --resume",
                          tr->optim_path, tr->opt.t, tr->model_path, state.step);
    }
    if (s == MT_OK) {
        tr->step = state.step;
        tr->sampler.rng = state.sampler;
        tr->ctx.rng = state.dropout;
    }
    return s;
}

int mt_params_first_nonfinite(const mt_params *P) {
    for (int i = 0; i < P->n; i++) {
        const float *g = P->grad + P->p[i].offset;
        for (size_t j = 0; j < P->p[i].n; j++)
            if (!isfinite(g[j])) return i;
    }
    return -1;
}

/* Draws the next training batch (the sampler's draw of the whole batch, the same on every rank)
   and, for the ViT, reads this rank's rows [lo, lo + n) of it into tr->images. */
static void draw_batch(mt_trainer *tr, int lo, int n) {
    int B = tr->cfg.batch;
    tr->batch_lo = lo;
    if (tr->cfg.model == MT_MODEL_VIT) { /* B training images, drawn with replacement */
        for (int b = 0; b < B; b++)
            tr->x[b] = tr->order[mt_rng_below(&tr->sampler.rng, (uint32_t)tr->n_train_img)];
        mt_images_batch(&tr->imgs, tr->x + lo, n, tr->images, tr->y + lo);
    } else
        mt_sampler_next(&tr->sampler, &tr->train, B, tr->model.cfg.n_ctx, tr->x, tr->y);
}

/* The loss of rows [lo, lo + n) of the drawn batch on the parameters P (mt_rows_loss). */
static mt_tensor *rows_loss(mt_ctx *c, mt_params *P, int lo, int n, void *arg) {
    mt_trainer *tr = arg;
    if (tr->cfg.model == MT_MODEL_VIT) {
        mt_vit m = tr->vit;
        m.P = *P;
        size_t pixels = (size_t)tr->imgs.C * tr->imgs.H * tr->imgs.W;
        return mt_vit_loss(c, &m, tr->images + (size_t)(lo - tr->batch_lo) * pixels, tr->y + lo,
                           n);
    }
    mt_gpt_batch b = {&tr->model, tr->x, tr->y, tr->model.cfg.n_ctx};
    return mt_gpt_rows_loss(c, P, lo, n, &b);
}

void mt_trainer_step(mt_trainer *tr, mt_step_stats *st) {
    mt_ctx *c = &tr->ctx;
    c->training = true;
    c->grad_enabled = true;
    /* the gradients start at zero: the last update consumed them, unless they were kept */
    if (tr->grad_held) mt_params_zero_grad(tr->P), tr->grad_held = false;
    int lo, n;
    mt_dist_slice(tr->cfg.batch, &lo, &n);
    draw_batch(tr, lo, n);
    mt_grads G = {&tr->P->grad, 1};
    if (mt_dist_size() > 1) {
        /* Each rank draws its own dropout masks, from a stream derived from the shared one,
           which advances by one draw (the checkpoint saves the shared one). */
        mt_rng shared = c->rng;
        mt_rng_seed(&c->rng, mt_rng_u64(&shared) ^ (uint64_t)mt_dist_rank());
        mt_ctx_reset(c);
        mt_tensor *loss = rows_loss(c, tr->P, lo, n, tr);
        /* this rank's mean over n rows weighs n / B in the batch's mean; the sum across ranks
           (in mt_dist_grads_end) gives the gradient of the batch's mean */
        float w = (float)n / (float)tr->cfg.batch;
        mt_dist_grads_begin(&tr->dist, c);
        mt_backward_from(c, loss, &w);
        mt_dist_grads_end(&tr->dist, c);
        c->rng = shared;
        st->loss = (double)loss->data[0] * w;
    } else {
        st->loss = mt_replicas_backward(&tr->replicas, c, tr->P, lo, n, tr->cfg.batch, rows_loss,
                                        tr);
        G = mt_replicas_grads(&tr->replicas);
    }
    mt_dist_sum(&st->loss, 1); /* every rank sees the same loss and gradients: they stop together */
    st->lr = mt_optim_lr_at(&tr->opt.cfg.sched, tr->step);
    st->grad_norm = mt_grads_norm(&G, tr->P->total);
    st->finite = isfinite(st->loss) && isfinite(st->grad_norm);
    /* clip, update and zero the gradients in one pass; or leave them summed in P->grad for
       whoever looks (keep_grad, or a step that updates nothing) */
    tr->grad_held = tr->keep_grad || !st->finite;
    if (!st->finite) {
        mt_grads_sum(&G, tr->P->total);
        return;
    }
    mt_optim_update(&tr->opt, tr->P, &G, st->lr,
                    mt_optim_clip_coef(st->grad_norm, tr->opt.cfg.clip), tr->keep_grad);
    tr->step++;
}

/* Mean loss over every validation image, in batches; sets val_accuracy (argmax = label). */
static double vit_eval(mt_trainer *tr) {
    mt_ctx *c = &tr->ctx;
    int K = tr->vit.cfg.n_classes;
    double sum = 0;
    long correct = 0;
    for (int i = 0; i < tr->n_val_img; i += tr->cfg.batch) {
        int lo, nb = tr->n_val_img - i < tr->cfg.batch ? tr->n_val_img - i : tr->cfg.batch;
        mt_dist_slice(nb, &lo, &nb);
        if (nb == 0) continue; /* a last batch smaller than the ranks */
        mt_ctx_reset(c);
        mt_images_batch(&tr->imgs, tr->order + tr->n_train_img + i + lo, nb, tr->images, tr->y);
        mt_tensor *logits = mt_vit_forward(c, &tr->vit, tr->images, nb);
        sum += (double)mt_cross_entropy(c, logits, tr->y, -1)->data[0] * nb;
        for (int b = 0; b < nb; b++) {
            const float *z = logits->data + (size_t)b * K;
            int best = 0;
            for (int k = 1; k < K; k++)
                if (z[k] > z[best]) best = k;
            correct += best == tr->y[b];
        }
    }
    double sums[2] = {sum, (double)correct};
    mt_dist_sum(sums, 2);
    tr->val_accuracy = sums[1] / tr->n_val_img;
    return sums[0] / tr->n_val_img;
}

static double gpt_eval(mt_trainer *tr) {
    if (tr->val.n == 0) return NAN;
    mt_ctx *c = &tr->ctx;
    int B = tr->cfg.batch, T = tr->model.cfg.n_ctx;
    mt_sampler s;
    mt_sampler_init(&s, tr->cfg.seed ^ SEED_EVAL); /* the same windows at every evaluation */
    int lo, n;
    mt_dist_slice(B, &lo, &n);
    double sum = 0; /* of this rank's rows' means, weighted as in mt_trainer_step */
    for (int i = 0; i < tr->cfg.eval_batches; i++) {
        mt_ctx_reset(c);
        mt_sampler_next(&s, &tr->val, B, T, tr->x, tr->y);
        sum += (double)mt_gpt_loss(c, &tr->model, tr->x + (size_t)lo * T, tr->y + (size_t)lo * T,
                                   n, T)->data[0] * n / B;
    }
    mt_dist_sum(&sum, 1);
    return sum / tr->cfg.eval_batches;
}

double mt_trainer_eval(mt_trainer *tr) {
    mt_ctx *c = &tr->ctx;
    c->training = false;
    c->grad_enabled = false;
    double loss = tr->cfg.model == MT_MODEL_VIT ? vit_eval(tr) : gpt_eval(tr);
    c->training = true;
    c->grad_enabled = true;
    return loss;
}

mt_status mt_trainer_save(mt_trainer *tr, mt_err *err) {
    if (rename(tr->optim_path, tr->optim_prev_path) != 0 && errno != ENOENT)
        return mt_errorf(err, MT_EIO, "%s: cannot rename to %s: %s", tr->optim_path,
                         tr->optim_prev_path, strerror(errno));
    mt_status s = mt_optim_save(&tr->opt, tr->P, tr->optim_path, err);
    if (s != MT_OK) return s;
    mt_ckpt_state state = {tr->step, tr->sampler.rng, tr->ctx.rng};
    if (tr->cfg.model == MT_MODEL_VIT)
        return mt_vit_ckpt_save(tr->model_path, &tr->vit, &tr->imgs, &state, tr->cfg.options, err);
    return mt_ckpt_save(tr->model_path, &tr->model, &tr->tok, &state, tr->cfg.options, err);
}

void mt_trainer_free(mt_trainer *tr) {
    mt_gpt_free(&tr->model);
    mt_vit_free(&tr->vit);
    mt_optim_free(&tr->opt);
    mt_tok_free(&tr->tok);
    mt_tokens_free(&tr->all);
    mt_images_free(&tr->imgs);
    mt_ctx_free(&tr->ctx);
    mt_replicas_free(&tr->replicas);
    mt_dist_grads_free(&tr->dist);
    free(tr->x);
    free(tr->y);
    free(tr->order);
    free(tr->images);
    memset(tr, 0, sizeof *tr);
}

void mt_gpt_score(mt_ctx *c, mt_gpt *m, const uint16_t *tok, size_t n, double *nll, long *count) {
    int W = m->cfg.n_ctx + 1;
    c->training = false;
    c->grad_enabled = false;
    *nll = 0;
    *count = 0;
    for (size_t start = 0; start + 1 < n; start += (size_t)W) {
        int len = n - start < (size_t)W ? (int)(n - start) : W, T = len - 1;
        mt_ctx_reset(c);
        int *ids = mt_arena_alloc(c, 2 * (size_t)T * sizeof *ids), *targets = ids + T;
        for (int t = 0; t < T; t++) {
            ids[t] = tok[start + (size_t)t];
            targets[t] = tok[start + (size_t)t + 1];
        }
        /* the mean over T targets, back to a sum */
        *nll += (double)mt_gpt_loss(c, m, ids, targets, 1, T)->data[0] * T;
        *count += T;
    }
}
