/* ./infer --classify: the class of each image of a list, by a model that classifies images. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../data/data.h"
#include "../models/model.h"
#include "../tensor/tensor.h"
#include "app.h"

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

/* The files of one item of the list: MT_EINVAL for an empty directory or a missing path. */
static mt_status item_files(const char *item, char ***files, int *n, mt_err *err) {
    if (mt_image_files(item, files, n, err) != MT_OK) return MT_EINVAL;
    if (*n == 0) {
        free(*files);
        return mt_errorf(err, MT_EINVAL,
                         "--classify: the directory %s holds no files: expected image files or "
                         "directories of them",
                         item);
    }
    return MT_OK;
}

mt_status mt_classify(const mt_model *m, mt_precision precision, char *items, mt_on_image on,
                      void *arg, mt_err *err) {
    const mt_images *meta = m->type->classify->images(m);
    mt_ctx c;
    mt_status s = mt_infer_ctx_open(&c, m, 1, precision, err);
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
            bool ok = classify_file(&c, m, files[i], pix, x, &best, &p, &e);
            on(files[i], ok ? meta->class_names[best] : NULL, ok ? p : 0, ok ? NULL : e.msg, arg);
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
