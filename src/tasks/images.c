/* The image task: classification of an image dataset (data.h: a folder of class folders or idx
   files), for a model taking images (which classifies them). B images drawn with replacement
   from the training split make a batch; the validation split (the data's test part, or a random
   part) whole, in batches of B. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task.h"

#define SEED_SPLIT 0x53504c4954494d47ULL /* the random validation part */

typedef struct {
    mt_task base;
    mt_images imgs;
    int *order; /* (n) image indices: the training split, then validation */
    int n_train, n_val;
    int B;
    int *idx;    /* (B) the drawn batch's images */
    int eval_at; /* the first validation image of the evaluation batch drawn */
} image_task;

static mt_status load(mt_task **tp, const mt_data_cfg *d, const mt_model_type *model, void *cfg,
                      mt_err *err) {
    const mt_input *in = model->input;
    image_task *t = calloc(1, sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory");
    *tp = &t->base;
    t->base.type = &mt_image_task;
    t->B = d->batch;
    mt_images *ds = &t->imgs;
    mt_image_opts opts = {.H = d->image_size,
                          .W = d->image_size,
                          .C = d->channels,
                          .resize = d->resize,
                          .skip_bad = d->bad_images == MT_BAD_IMAGES_SKIP,
                          .classes = d->classes[0] ? d->classes : NULL};
    mt_status s = mt_images_load(d->path, &opts, ds, err);
    if (s != MT_OK) return s;
    if (!(t->order = malloc((size_t)ds->n * sizeof *t->order)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for %d image indices", ds->n);
    if ((s = mt_images_split(ds, (float)d->val_fraction, d->seed ^ SEED_SPLIT, t->order,
                             &t->n_train, err)) != MT_OK)
        return s;
    t->n_val = ds->n - t->n_train;
    mt_images_normalize_from(ds, t->order, t->n_train);
    mt_input_set(cfg, in->image_h, ds->H), mt_input_set(cfg, in->image_w, ds->W);
    mt_input_set(cfg, in->channels, ds->C), mt_input_set(cfg, in->n_classes, ds->n_classes);
    size_t B = (size_t)d->batch;
    t->idx = malloc(B * sizeof *t->idx);
    if (!t->idx) return mt_errorf(err, MT_ENOMEM, "out of memory for a batch of %zu images", B);
    if ((s = model->config_validate(cfg, err)) != MT_OK) return s;
    /* BatchNorm's statistics need two values per channel: rows x tokens in a process's slice */
    int tokens = in->row_tokens(cfg);
    if (mt_config_stack(cfg)->norm.kind == MT_NORM_BN && (long)d->min_rows * tokens < 2)
        return mt_errorf(err, MT_EINVAL,
                         "--norm bn needs at least 2 values per channel in a step, and %d row(s) "
                         "of %d token(s) give %d: use --batch 2 or more (per MPI rank), %s",
                         d->min_rows, tokens, d->min_rows * tokens, in->more_tokens);
    return MT_OK;
}

static void task_free(mt_task *tp) {
    image_task *t = (image_task *)tp;
    if (!t) return;
    mt_images_free(&t->imgs);
    free(t->order);
    free(t->idx);
    free(t);
}

static void describe(const mt_task *tp, char *buf, size_t len) {
    const image_task *t = (const image_task *)tp;
    const mt_images *d = &t->imgs;
    snprintf(buf, len, "%d images %dx%dx%d, %d classes, train %d, val %d%s", d->n, d->H, d->W, d->C,
             d->n_classes, t->n_train, t->n_val, d->n_train < d->n ? " (its test part)" : "");
}

static char *warning(const mt_task *tp) {
    const mt_images *d = &((const image_task *)tp)->imgs;
    if (!d->n_skipped) return NULL;
    const char *head = "skipped %d unreadable or mismatched image(s) (--bad-images reject stops "
                       "instead):\n%s";
    size_t len = strlen(head) + 16 + strlen(d->skipped);
    char *w = malloc(len);
    if (w) snprintf(w, len, head, d->n_skipped, d->skipped);
    return w;
}

static char *meta(const mt_task *tp) {
    return mt_images_meta_to_json(&((const image_task *)tp)->imgs);
}

/* B training images drawn with replacement. */
static void draw_batch(mt_task *tp, mt_rng *r) {
    image_task *t = (image_task *)tp;
    for (int b = 0; b < t->B; b++) t->idx[b] = t->order[mt_rng_below(r, (uint32_t)t->n_train)];
}

/* Rows [lo, lo + n): their images and labels read into c's arena. */
static mt_tensor *rows_loss(mt_ctx *c, const mt_model *m, mt_params *P, mt_task *tp, int lo,
                            int n) {
    image_task *t = (image_task *)tp;
    const mt_images *d = &t->imgs;
    float *x = mt_arena_floats(c, (size_t)n * d->C * d->H * d->W);
    int *label = mt_arena_alloc(c, (size_t)n * sizeof *label);
    mt_images_batch(d, t->idx + lo, n, x, label);
    mt_batch b = {.kind = MT_INPUT_IMAGES, .B = n, .images = {.images = x, .labels = label}};
    return m->type->loss(c, m, P, &b, mt_stack_ce(mt_config_stack(m->cfg)));
}

/* every validation image, in batches of B */
static int eval_count(const mt_task *tp) {
    const image_task *t = (const image_task *)tp;
    return (t->n_val + t->B - 1) / t->B;
}

static int eval_draw(mt_task *tp, int i) {
    image_task *t = (image_task *)tp;
    t->eval_at = i * t->B;
    return t->n_val - t->eval_at < t->B ? t->n_val - t->eval_at : t->B;
}

static void eval_rows(mt_ctx *c, const mt_model *m, mt_task *tp, int lo, int n, mt_eval_sums *s) {
    image_task *t = (image_task *)tp;
    const mt_images *d = &t->imgs;
    int K = d->n_classes;
    /* the images and labels in c's arena: slices run concurrently (eval_concurrent) */
    float *x = mt_arena_floats(c, (size_t)n * d->C * d->H * d->W);
    int *label = mt_arena_alloc(c, (size_t)n * sizeof *label);
    mt_images_batch(d, t->order + t->n_train + t->eval_at + lo, n, x, label);
    mt_tensor *logits = m->type->classify->logits(c, m, x, n);
    s->loss += (double)mt_cross_entropy(c, logits, label, -1, MT_CE_PLAIN)->data[0] * n; /* plain */
    for (int b = 0; b < n; b++) { /* right when the argmax is the label */
        const float *z = logits->data + (size_t)b * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[best]) best = k;
        s->right += best == label[b];
    }
}

const mt_task_type mt_image_task = {
    .name = "images",
    .input = MT_INPUT_IMAGES,
    .data = "an image folder or idx files",
    .data_file = false,
    .units = "images",
    .unit_bytes = sizeof(int),
    .unit = "img",
    .load = load,
    .free = task_free,
    .describe = describe,
    .warning = warning,
    .meta = meta,
    .draw_batch = draw_batch,
    .rows_loss = rows_loss,
    .eval_count = eval_count,
    .eval_draw = eval_draw,
    .eval_rows = eval_rows,
    .eval_concurrent = true,
    .accuracy = true,
    .infer = &mt_image_infer,
};
