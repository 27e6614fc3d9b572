/* preview: writes a labelled grid of random samples of an image dataset as a PNG.
 *   ./preview --data data/mnist --out grid.png [--n 64] [--scale 2] [--seed 1]
 *             [--size HxW] [--channels C] [--classes FILE]
 * Exit codes: 0 written, 1 a runtime failure (I/O, out of memory), 2 usage (a flag, a missing
 * --data, a malformed dataset, a grid too large). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mt.h"

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "preview: %s%s\n", msg, arg ? arg : "");
    fprintf(stderr, "usage: preview --data PATH --out FILE.png [--n N (64)] [--scale S (2)] "
                    "[--seed N (1)] [--size HxW] [--channels 1-4] [--classes FILE]\n");
    return 2;
}

/* 2: the input or the flags are wrong; 1: a failure while working. */

/* A positive integer from a flag's value, or -1. */
static int positive(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v < (1 << 24) ? (int)v : -1;
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = NULL;
    int n = 64, scale = 2, seed = 1;
    mt_image_opts o = mt_image_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help")) return usage("writes a labelled grid of samples", NULL), 0;
        if (!v) return usage("missing a value after ", f);
        i++;
        if (!strcmp(f, "--data")) data = v;
        else if (!strcmp(f, "--out")) out = v;
        else if (!strcmp(f, "--classes")) o.classes = v;
        else if (!strcmp(f, "--n") || !strcmp(f, "--scale") || !strcmp(f, "--seed") ||
                 !strcmp(f, "--channels")) {
            int x = positive(v);
            if (x < 0) return usage("expected a positive integer after ", f);
            *(!strcmp(f, "--n") ? &n : !strcmp(f, "--scale") ? &scale
              : !strcmp(f, "--seed")                        ? &seed
                                                            : &o.C) = x;
        } else if (!strcmp(f, "--size")) {
            if (sscanf(v, "%dx%d", &o.H, &o.W) != 2 || o.H < 1 || o.W < 1)
                return usage("--size takes HEIGHTxWIDTH, e.g. 32x32; got ", v);
        } else return usage("unknown flag ", f);
    }
    if (!data || !out) return usage("--data and --out are required", NULL);
    struct stat sb;
    if (stat(data, &sb) != 0) {
        fprintf(stderr, "preview: --data %s: %s: expected an image folder or idx files\n", data,
                strerror(errno));
        return 2;
    }

    mt_images ds;
    mt_err err;
    if (mt_images_load(data, &o, &ds, &err) != MT_OK) {
        fprintf(stderr, "preview: %s\n", err.msg);
        return mt_exit_code(err.status);
    }
    if (ds.n_skipped) fprintf(stderr, "preview: skipped %d file(s):\n%s", ds.n_skipped, ds.skipped);
    if (n > ds.n) n = ds.n;
    /* n distinct samples: the first n of a seeded shuffle */
    int *idx = malloc((size_t)ds.n * sizeof *idx);
    if (!idx) {
        fprintf(stderr, "preview: out of memory\n");
        mt_images_free(&ds);
        return 1;
    }
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)seed);
    for (int i = 0; i < ds.n; i++) idx[i] = i;
    for (int i = 0; i < n; i++) {
        int j = i + (int)mt_rng_below(&r, (uint32_t)(ds.n - i)), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    int rc = 0;
    if (mt_images_preview(&ds, idx, n, scale, out, &err) != MT_OK) {
        fprintf(stderr, "preview: %s\n", err.msg);
        rc = mt_exit_code(err.status);
    } else
        printf("preview: %d of %d images (%dx%d, %d channel(s), %d classes) -> %s\n", n, ds.n, ds.H,
               ds.W, ds.C, ds.n_classes, out);
    free(idx);
    mt_images_free(&ds);
    return rc;
}
