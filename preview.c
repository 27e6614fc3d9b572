/* preview: writes a labelled grid of random samples of an image dataset as a PNG.
 *   ./preview --data data/mnist --out grid.png [--n 64] [--scale 2] [--seed 1]
 *             [--size HxW] [--channels C] [--classes FILE]
 * The flags are a field table (fields.h).
 * Exit codes: 0 written, 1 a runtime failure (I/O, out of memory), 2 usage (a flag, a missing
 * --data, a malformed dataset, a grid too large). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mt.h"

typedef struct {
    char data[MT_FIELD_STR_MAX], out[MT_FIELD_STR_MAX], size[64], classes[MT_FIELD_STR_MAX];
    int n, scale, seed, channels;
    bool help;
} preview_options;

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(preview_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(data, STR, "data", "an image folder (a subdirectory per class) or MNIST-format idx files"),
    F(out, STR, "out", "the PNG file to write"),
    F(n, INT, "n", "images in the grid (at most the dataset's)", .range = "1..16777215"),
    F(scale, INT, "scale", "pixels per image pixel", .range = "1..16777215"),
    F(seed, INT, "seed", "seed of the random choice of images", .range = "1..16777215"),
    F(size, STR, "size", "images resized to HEIGHTxWIDTH (e.g. 32x32); empty: the data's"),
    F(channels, INT, "channels", "1 gray, 3 RGB (2, 4 with alpha); 0: the data's", .range = "0..4"),
    F(classes, STR, "classes",
      "class names, one per line (idx data; default: classes.txt "
      "beside it)"),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

/* 2: the input or the flags are wrong; 1: a failure while working. */
static int fail(int code, const char *msg, const char *arg) {
    fprintf(stderr, "preview: %s%s\n", msg, arg ? arg : "");
    return code;
}

/* The grid of n distinct images of ds (the first n of a seeded shuffle) into out. */
static int write_grid(const mt_images *ds, int n, int scale, int seed, const char *out) {
    mt_err err;
    if (n > ds->n) n = ds->n;
    int *idx = malloc((size_t)ds->n * sizeof *idx);
    if (!idx) return fail(1, "out of memory", NULL);
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)seed);
    for (int i = 0; i < ds->n; i++) idx[i] = i;
    for (int i = 0; i < n; i++) {
        int j = i + (int)mt_rng_below(&r, (uint32_t)(ds->n - i)), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    int rc = 0;
    if (mt_images_preview(ds, idx, n, scale, out, &err) != MT_OK)
        rc = fail(mt_exit_code(err.status), err.msg, NULL);
    else
        printf("preview: %d of %d images (%dx%d, %d channel(s), %d classes) -> %s\n", n, ds->n,
               ds->H, ds->W, ds->C, ds->n_classes, out);
    free(idx);
    return rc;
}

static void print_help(const preview_options *defaults) {
    mt_fieldset at_defaults = {&OPTIONS, (void *)defaults};
    char *help = mt_fieldset_help(&at_defaults, 1, NULL, 0);
    printf("usage: ./preview --data PATH --out FILE.png [--n N] [--scale S] [--seed N] "
           "[--size HxW] [--channels C] [--classes FILE]\nwrites a labelled grid of random "
           "samples of an image dataset as a PNG\n\n%s",
           help);
    free(help);
}

int main(int argc, char **argv) {
    const preview_options defaults = {.n = 64, .scale = 2, .seed = 1};
    preview_options po = defaults;
    mt_fieldset set = {&OPTIONS, &po};
    mt_err err;
    if (mt_fieldset_parse_args(&set, 1, argc, argv, NULL, &err) != MT_OK)
        return fail(2, err.msg, NULL);
    if (po.help) return print_help(&defaults), 0;
    mt_image_opts o = mt_image_opts_default();
    o.C = po.channels;
    if (po.classes[0]) o.classes = po.classes;
    if (po.size[0] && (sscanf(po.size, "%dx%d", &o.H, &o.W) != 2 || o.H < 1 || o.W < 1))
        return fail(2, "--size takes HEIGHTxWIDTH, e.g. 32x32; got ", po.size);
    if (!po.data[0] || !po.out[0])
        return fail(2, "--data and --out are required (--help lists the flags)", NULL);
    if (mt_output_file_check("--out", po.out, &err) != MT_OK) return fail(2, err.msg, NULL);
    struct stat sb;
    if (stat(po.data, &sb) != 0) {
        fprintf(stderr, "preview: --data %s: %s: expected an image folder or idx files\n", po.data,
                strerror(errno));
        return 2;
    }
    mt_images ds;
    if (mt_images_load(po.data, &o, &ds, &err) != MT_OK)
        return fail(mt_exit_code(err.status), err.msg, NULL);
    if (ds.n_skipped) fprintf(stderr, "preview: skipped %d file(s):\n%s", ds.n_skipped, ds.skipped);
    int rc = write_grid(&ds, po.n, po.scale, po.seed, po.out);
    mt_images_free(&ds);
    return rc;
}
