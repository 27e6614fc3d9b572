/* ./infer's use of the image task's models: the class of each image of a list (--classify), by a
 * model that classifies images (model.h's mt_classify_ops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../data/data.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../tensor/tensor.h"
#include "inference.h"

typedef struct {
    char classify[MT_FIELD_STR_MAX];
} image_options;
static const image_options DEFAULTS = {0};
static const mt_field FIELDS[] = {
    MT_FIELD(image_options, classify, STR, "classify",
             "image files or directories, comma-separated: print each one's class"),
};
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

/* One image file: its class and probability, or false and the reason in err. */
static bool classify_file(mt_ctx *c, const mt_model *m, const char *path, uint8_t *pix, float *x,
                          int *best, double *p, mt_err *err) {
    const mt_images *meta = m->type->classify->images(m);
    mt_image_opts io = {.H = meta->H, .W = meta->W, .C = meta->C, .resize = true};
    if (mt_image_read(path, &io, pix, err) != MT_OK) return false;
    mt_image_to_floats(pix, meta->H, meta->W, meta->C, meta->mean, meta->std, x);
    mt_ctx_reset(c);
    const float *z = m->type->classify->logits(c, m, x, 1)->data;
    double sum = 0;
    *best = 0;
    for (int k = 1; k < meta->n_classes; k++)
        if (z[k] > z[*best]) *best = k;
    for (int k = 0; k < meta->n_classes; k++) sum += exp((double)z[k] - z[*best]);
    *p = 1 / sum;
    return true;
}

/* The files of one item of the list: MT_EINVAL for an empty directory, or a path that is not a
   directory nor a readable regular file (a pipe would block). */
static mt_status item_files(const char *item, char ***files, int *n, mt_err *err) {
    struct stat st;
    bool dir = stat(item, &st) == 0 && S_ISDIR(st.st_mode);
    if ((!dir && mt_file_check("--classify", item, err) != MT_OK) ||
        mt_image_files(item, files, n, err) != MT_OK)
        return MT_EINVAL;
    if (*n == 0) {
        free(*files);
        return mt_errorf(err, MT_EINVAL,
                         "--classify: the directory %s holds no files: expected image files or "
                         "directories of them",
                         item);
    }
    return MT_OK;
}

/* Each image of items (comma-separated image files or directories of them; cut in place):
   "path: class (p = probability)" to io->out, or why it could not be read to io->log (and
   io->failed). MT_EINVAL for a missing path, an empty directory or no image at all, after the
   images before it. */
static mt_status classify(const mt_model *m, char *items, mt_infer_io *io, mt_err *err) {
    const mt_images *meta = m->type->classify->images(m);
    mt_ctx c;
    mt_status s = mt_model_infer_ctx(&c, m, 1, io->precision, err);
    if (s != MT_OK) return s;
    size_t pixels = (size_t)meta->H * meta->W * meta->C;
    uint8_t *pix = malloc(pixels);
    float *x = malloc(pixels * sizeof *x);
    if (!pix || !x) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    int seen = 0;
    for (char *item = strtok(items, ","); item && s == MT_OK; item = strtok(NULL, ",")) {
        char **files;
        int n;
        if ((s = item_files(item, &files, &n, err)) != MT_OK) break;
        seen += n;
        for (int i = 0; i < n; i++) {
            int best;
            double p;
            mt_err e;
            if (classify_file(&c, m, files[i], pix, x, &best, &p, &e))
                fprintf(io->out, "%s: %s (p = %.3f)\n", files[i], meta->class_names[best], p);
            else fprintf(io->log, "%s: %s\n", io->program, e.msg), io->failed = true;
            free(files[i]);
        }
        free(files);
    }
    if (s == MT_OK && !seen)
        s = mt_errorf(err, MT_EINVAL,
                      "--classify: no image given: expected image files or directories, "
                      "comma-separated");
    free(pix);
    free(x);
    mt_ctx_free(&c);
    return s;
}

static mt_status run(mt_model *m, const void *options, mt_infer_io *io, mt_err *err) {
    image_options o = *(const image_options *)options; /* a copy: classify cuts the list */
    if (!o.classify[0])
        return mt_errorf(err, MT_EINVAL,
                         "%s is a %s checkpoint, which classifies images: ./infer --checkpoint "
                         "FILE --classify IMAGE[,IMAGE|DIR...]",
                         io->checkpoint, m->type->name);
    return classify(m, o.classify, io, err);
}

const mt_infer_use mt_image_infer = {
    .name = "images",
    .does = "classify images",
    .fields = &OPTIONS,
    .options_size = sizeof(image_options),
    .defaults = &DEFAULTS,
    .run = run,
};
