/* mt images: image-folder and MNIST-format (idx) datasets, resizing, the train/validation split,
 * per-channel normalisation and batches.
 * Shapes: pixels (n, H, W, C) bytes as decoded; batches x (B, C, H, W) floats. */
#include "../io/io.h"
#include "data.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* Debian's libstb links the implementation (libstb.so); the header alone declares it. */
#include <stb/stb_image.h>

mt_image_opts mt_image_opts_default(void) {
    return (mt_image_opts){.H = 0, .W = 0, .C = 0, .resize = true, .skip_bad = true};
}

/* ---- small helpers --------------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t bytes) {
    p = realloc(p, bytes ? bytes : 1);
    MT_ASSERT(p, "images: out of memory (%zu bytes)", bytes);
    return p;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    MT_ASSERT(d, "images: out of memory");
    return d;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xrealloc(NULL, n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_strs(char **s, int n) {
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

/* The names in dir that are directories (want_dirs) or regular files, dot files left out,
   sorted so that labels and sample order do not depend on the file system. */
static mt_status list_dir(const char *dir, bool want_dirs, char ***names, int *n, mt_err *err) {
    DIR *d = opendir(dir);
    if (!d)
        return mt_errorf(err, MT_EIO, "%s: cannot open the directory: %s", dir, strerror(errno));
    char **s = NULL;
    int cnt = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *p = path_join(dir, e->d_name);
        bool keep = want_dirs ? is_dir(p) : is_file(p);
        free(p);
        if (!keep) continue;
        s = xrealloc(s, (size_t)(cnt + 1) * sizeof *s);
        s[cnt++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (cnt > 1) qsort(s, (size_t)cnt, sizeof *s, cmp_str);
    *names = s;
    *n = cnt;
    return MT_OK;
}

mt_status mt_image_files(const char *path, char ***files, int *n, mt_err *err) {
    *files = NULL, *n = 0;
    if (is_file(path)) {
        *files = xrealloc(NULL, sizeof **files);
        (*files)[(*n)++] = xstrdup(path);
        return MT_OK;
    }
    if (!is_dir(path)) return mt_errorf(err, MT_EIO, "%s: no such file or directory", path);
    char **names;
    int k;
    mt_status st = list_dir(path, false, &names, &k, err);
    if (st != MT_OK) return st;
    for (int i = 0; i < k; i++) {
        char *p = path_join(path, names[i]);
        free(names[i]);
        names[i] = p;
    }
    *files = names, *n = k;
    return MT_OK;
}

/* ---- idx files ----------------------------------------------------------------------------------
 * Format (LeCun's MNIST page): bytes 0 0, a type code (0x08 unsigned byte), the number of dims,
 * each dim as a big-endian uint32, then the data in row-major order. */

/* Reads exactly len bytes, or fewer only at the end of the stream; -1 on a gzip error. */
static long gz_read_all(gzFile f, void *buf, size_t len) {
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? 1u << 30 : (unsigned)(len - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (long)got;
}

mt_status mt_idx_read(const char *path, int *ndim, int dims[MT_MAX_DIMS], uint8_t **data,
                      mt_err *err) {
    *data = NULL;
    gzFile f = gzopen(path, "rb");
    if (!f) return mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    mt_status st = MT_OK;
    int errnum;
    unsigned char h[4], d4[4];
    long r = gz_read_all(f, h, 4);
    if (r != 4) {
        st = mt_errorf(err, MT_EFORMAT, "%s: %s", path,
                       r < 0 ? gzerror(f, &errnum) : "too short for an idx header (4 bytes)");
        goto done;
    }
    if (h[0] != 0 || h[1] != 0) {
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: not an idx file: the magic starts %02x %02x, idx files start 00 00 "
                       "(gzip-compressed or plain MNIST-format files are accepted)",
                       path, h[0], h[1]);
        goto done;
    }
    if (h[2] != 0x08) {
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: idx data type 0x%02x; mt reads unsigned bytes (0x08) only", path, h[2]);
        goto done;
    }
    if (h[3] < 1 || h[3] > MT_MAX_DIMS) {
        st = mt_errorf(err, MT_EFORMAT, "%s: idx file with %d dims; mt reads 1 to %d", path, h[3],
                       MT_MAX_DIMS);
        goto done;
    }
    *ndim = h[3];
    uint64_t total = 1;
    for (int i = 0; i < *ndim; i++) {
        if (gz_read_all(f, d4, 4) != 4) {
            st = mt_errorf(err, MT_EFORMAT, "%s: truncated in the header (dim %d of %d)", path,
                           i + 1, *ndim);
            goto done;
        }
        uint32_t v = (uint32_t)d4[0] << 24 | (uint32_t)d4[1] << 16 | (uint32_t)d4[2] << 8 | d4[3];
        if (v == 0 || v > INT32_MAX) {
            st = mt_errorf(err, MT_EFORMAT, "%s: dim %d is %u; dims must be in [1, 2^31)", path,
                           i + 1, v);
            goto done;
        }
        dims[i] = (int)v;
        total *= v;
        if (total > ((uint64_t)1 << 34)) {
            st = mt_errorf(err, MT_EFORMAT, "%s: the dims describe more than 16 GiB of data", path);
            goto done;
        }
    }
    *data = malloc((size_t)total + 1);
    if (!*data) {
        st = mt_errorf(err, MT_ENOMEM, "%s: cannot allocate %llu bytes", path,
                       (unsigned long long)total);
        goto done;
    }
    /* one byte more than the dims allow, to detect trailing data */
    r = gz_read_all(f, *data, (size_t)total + 1);
    if (r < 0) st = mt_errorf(err, MT_EFORMAT, "%s: %s", path, gzerror(f, &errnum));
    else if ((uint64_t)r != total) {
        char shape[64] = "";
        for (int i = 0; i < *ndim; i++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", i ? ", " : "",
                     dims[i]);
        if ((uint64_t)r < total)
            st = mt_errorf(err, MT_EFORMAT,
                           "%s: truncated: the dims (%s) need %llu bytes of data, "
                           "the file has %ld",
                           path, shape, (unsigned long long)total, r);
        else
            st = mt_errorf(err, MT_EFORMAT,
                           "%s: the dims (%s) need %llu bytes of data, the file "
                           "has more (trailing bytes)",
                           path, shape, (unsigned long long)total);
    }
done:
    gzclose(f);
    if (st != MT_OK) {
        free(*data);
        *data = NULL;
    }
    return st;
}

/* ---- resize -------------------------------------------------------------------------------------
 * Separable: rows then columns, s = n_in / n_out input pixels per output pixel.
 * Growing (s <= 1), bilinear: output i sits at u = (i + 0.5) s - 0.5 in input coordinates and
 *   input j gets weight max(0, 1 - |j - u|), renormalised over the inputs inside the image.
 * Shrinking (s > 1), area: output i covers [i s, (i + 1) s) and input j gets the length of
 *   [j, j + 1) inside it, divided by s (an exact average, as OpenCV's INTER_AREA). */

/* For each output i: first input lo[i] and k weights w[i * k ...] (zero-padded). Returns k, or 0
   when out of memory (then *lo and *w are NULL). n_out k <= n_in + 2 n_out: no int overflows. */
static int resize_taps(int n_in, int n_out, int **lo, float **w) {
    double s = (double)n_in / n_out;
    int k = s > 1 ? (int)ceil(s) + 1 : 2;
    *lo = malloc((size_t)n_out * sizeof **lo);
    *w = malloc((size_t)n_out * k * sizeof **w);
    if (!*lo || !*w) {
        free(*lo), free(*w);
        *lo = NULL, *w = NULL;
        return 0;
    }
    for (int i = 0; i < n_out; i++) {
        double a = i * s, b = a + s, u = (i + 0.5) * s - 0.5, sum = 0;
        int j0 = s > 1 ? (int)floor(a) : (int)floor(u);
        if (j0 < 0) j0 = 0;
        (*lo)[i] = j0;
        for (int t = 0; t < k; t++) {
            int j = j0 + t;
            double v = j >= n_in ? 0
                       : s > 1   ? fmin(b, j + 1.0) - fmax(a, (double)j)
                                 : 1 - fabs(j - u);
            (*w)[i * k + t] = (float)(v > 0 ? v : 0);
            sum += (*w)[i * k + t];
        }
        for (int t = 0; t < k; t++) (*w)[i * k + t] = (float)((*w)[i * k + t] / sum);
    }
    return k;
}

mt_status mt_image_resize(const uint8_t *src, int sh, int sw, uint8_t *dst, int dh, int dw, int C,
                          mt_err *err) {
    MT_ASSERT(sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1 && C >= 1 && C <= MT_IMG_MAX_C,
              "resize: %dx%d -> %dx%d with %d channels", sh, sw, dh, dw, C);
    int *lx, *ly;
    float *wx, *wy;
    int kx = resize_taps(sw, dw, &lx, &wx), ky = resize_taps(sh, dh, &ly, &wy);
    float *tmp = malloc((size_t)sh * dw * C * sizeof *tmp); /* (sh, dw, C) */
    if (!kx || !ky || !tmp) {
        free(tmp), free(lx), free(ly), free(wx), free(wy);
        return mt_errorf(err, MT_ENOMEM,
                         "out of memory resizing %dx%d pixels to %dx%d (width x "
                         "height)",
                         sw, sh, dw, dh);
    }
    for (int y = 0; y < sh; y++)
        for (int x = 0; x < dw; x++)
            for (int c = 0; c < C; c++) {
                float a = 0;
                for (int t = 0; t < kx && lx[x] + t < sw; t++)
                    a += wx[x * kx + t] * src[((size_t)y * sw + lx[x] + t) * C + c];
                tmp[((size_t)y * dw + x) * C + c] = a;
            }
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++)
            for (int c = 0; c < C; c++) {
                float a = 0;
                for (int t = 0; t < ky && ly[y] + t < sh; t++)
                    a += wy[y * ky + t] * tmp[((size_t)(ly[y] + t) * dw + x) * C + c];
                a = roundf(a);
                dst[((size_t)y * dw + x) * C + c] = (uint8_t)(a < 0 ? 0 : a > 255 ? 255 : a);
            }
    free(tmp);
    free(lx);
    free(ly);
    free(wx);
    free(wy);
    return MT_OK;
}

/* ---- image files ----------------------------------------------------------------------------- */

/* Decodes path at o->C channels (stb converts gray <-> RGB and drops or adds alpha) and brings it
   to o->H x o->W. A failure is MT_EFORMAT with the reason after the path. */
mt_status mt_image_read(const char *path, const mt_image_opts *o, uint8_t *out, mt_err *err) {
    MT_ASSERT(o->H > 0 && o->W > 0 && o->C >= 1 && o->C <= MT_IMG_MAX_C,
              "mt_image_read: size %dx%dx%d not fixed", o->H, o->W, o->C);
    int w, h, comp;
    uint8_t *img = stbi_load(path, &w, &h, &comp, o->C);
    if (!img)
        return mt_errorf(err, MT_EFORMAT, "%s: unreadable (stb_image: %s)", path,
                         stbi_failure_reason());
    mt_status st = MT_OK;
    if (w < 1 || h < 1) /* stb_image decodes a PNM header of 0 x 0 */
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: %dx%d pixels (width x height): an image has at least "
                       "one",
                       path, w, h);
    else if (w == o->W && h == o->H) memcpy(out, img, (size_t)h * w * o->C);
    else if (o->resize) {
        mt_err e;
        if ((st = mt_image_resize(img, h, w, out, o->H, o->W, o->C, &e)) != MT_OK)
            mt_errorf(err, st, "%s: %s", path, e.msg);
    } else
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: %dx%d pixels (width x height), the dataset's are %dx%d "
                       "and resizing is off",
                       path, w, h, o->W, o->H);
    stbi_image_free(img);
    return st;
}

/* ---- building a dataset ---------------------------------------------------------------------- */

/* Room for n images of ds's size; what cannot be had is MT_ENOMEM naming the size. */
static mt_status ds_reserve(mt_images *ds, int n, mt_err *err) {
    size_t one = (size_t)ds->H * ds->W * ds->C, bytes = (size_t)n * one;
    bool fits = one == 0 || (size_t)n <= SIZE_MAX / one;
    void *pix = fits ? realloc(ds->pix, bytes ? bytes : 1) : NULL;
    if (pix) ds->pix = pix;
    int *label = pix ? realloc(ds->label, (n ? (size_t)n : 1) * sizeof *ds->label) : NULL;
    if (label) ds->label = label;
    if (!pix || !label)
        return mt_errorf(err, MT_ENOMEM,
                         "out of memory for %d images of %dx%dx%d (width x "
                         "height x channels, %.2f GiB): ask for a smaller image size",
                         n, ds->W, ds->H, ds->C, (double)n * (double)one / (1 << 30));
    return MT_OK;
}

static void note_skipped(mt_images *ds, const char *msg) {
    size_t old = ds->skipped ? strlen(ds->skipped) : 0, add = strlen(msg);
    ds->skipped = xrealloc(ds->skipped, old + add + 2);
    memcpy(ds->skipped + old, msg, add);
    memcpy(ds->skipped + old + add, "\n", 2);
    ds->n_skipped++;
}

/* Size and channels of the first readable file among files[0..n), for options left at 0. */
static void first_image_shape(char **files, int n, mt_image_opts *o) {
    for (int i = 0; i < n; i++) {
        int w, h, comp;
        if (!stbi_info(files[i], &w, &h, &comp) || w < 1 || h < 1) continue;
        if (!o->C) o->C = comp == 4 ? 3 : comp == 2 ? 1 : comp;
        if (!o->H) o->H = h;
        if (!o->W) o->W = w;
        return;
    }
}

static mt_status load_folder(const char *root, mt_image_opts o, mt_images *ds, mt_err *err) {
    char **classes = NULL, **files = NULL;
    int n_classes = 0, n_files = 0, *file_label = NULL;
    mt_status st = list_dir(root, true, &classes, &n_classes, err);
    if (st != MT_OK) return st;
    if (n_classes == 0) {
        free(classes);
        return mt_errorf(err, MT_EFORMAT,
                         "%s: no class subdirectories; an image folder holds one "
                         "subdirectory of images per class (or MNIST-format idx files)",
                         root);
    }
    for (int k = 0; k < n_classes && st == MT_OK; k++) {
        char *dir = path_join(root, classes[k]), **names = NULL;
        int n = 0;
        st = list_dir(dir, false, &names, &n, err);
        for (int i = 0; st == MT_OK && i < n; i++) {
            files = xrealloc(files, (size_t)(n_files + 1) * sizeof *files);
            file_label = xrealloc(file_label, (size_t)(n_files + 1) * sizeof *file_label);
            files[n_files] = path_join(dir, names[i]);
            file_label[n_files++] = k;
        }
        if (st == MT_OK) free_strs(names, n);
        free(dir);
    }
    if (st == MT_OK) {
        first_image_shape(files, n_files, &o);
        if (!o.H || !o.C) /* the size (or, with channels given, only the size) is still unknown */
            st = mt_errorf(err, MT_EFORMAT,
                           "%s: none of the %d files in its %d class "
                           "subdirectories is an image stb_image can read",
                           root, n_files, n_classes);
        else if (o.H > MT_IMG_MAX_SIDE || o.W > MT_IMG_MAX_SIDE)
            st = mt_errorf(err, MT_EFORMAT,
                           "%s: its first image is %dx%d pixels (width x height), "
                           "more than %d a side: ask for a smaller image size to resize to",
                           root, o.W, o.H, MT_IMG_MAX_SIDE);
    }
    if (st == MT_OK) {
        ds->H = o.H, ds->W = o.W, ds->C = o.C;
        st = ds_reserve(ds, n_files, err);
        size_t sz = (size_t)o.H * o.W * o.C;
        mt_err e;
        for (int i = 0; i < n_files && st == MT_OK; i++) {
            if (mt_image_read(files[i], &o, ds->pix + ds->n * sz, &e) == MT_OK)
                ds->label[ds->n++] = file_label[i];
            else if (o.skip_bad) note_skipped(ds, e.msg);
            else
                st = mt_errorf(err, e.status, "%s (the skip-bad option leaves such files out)",
                               e.msg);
        }
        ds->n_train = ds->n; /* no held-out part */
        ds->n_classes = n_classes;
        ds->class_names = classes;
        classes = NULL;
    }
    if (classes) free_strs(classes, n_classes);
    free_strs(files, n_files);
    free(file_label);
    return st;
}

/* Appends the images and labels of one idx pair; the first pair fixes H and W. */
static mt_status load_idx_pair(const char *images, const char *labels, const mt_image_opts *o,
                               mt_images *ds, mt_err *err) {
    int nd_i, nd_l, di[MT_MAX_DIMS], dl[MT_MAX_DIMS];
    uint8_t *img, *lab = NULL;
    mt_status st = mt_idx_read(images, &nd_i, di, &img, err);
    if (st != MT_OK) return st;
    if (nd_i != 3)
        st = mt_errorf(err, MT_EFORMAT, "%s: %d dims; images are (n, rows, columns)", images, nd_i);
    if (st == MT_OK && (di[1] > MT_IMG_MAX_SIDE || di[2] > MT_IMG_MAX_SIDE))
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: images of %dx%d pixels (rows x columns); mt reads at "
                       "most %d a side",
                       images, di[1], di[2], MT_IMG_MAX_SIDE);
    if (st == MT_OK) st = mt_idx_read(labels, &nd_l, dl, &lab, err);
    if (st == MT_OK && (nd_l != 1 || dl[0] != di[0]))
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: %d labels (%d dims) for the %d images of %s; there must "
                       "be one label per image",
                       labels, dl[0], nd_l, di[0], images);
    if (st == MT_OK && ds->n == 0) {
        ds->H = o->H ? o->H : di[1];
        ds->W = o->W ? o->W : di[2];
        ds->C = o->C ? o->C : 1;
    }
    if (st == MT_OK && !o->resize && (di[1] != ds->H || di[2] != ds->W))
        st = mt_errorf(err, MT_EFORMAT,
                       "%s: %dx%d images, the dataset's are %dx%d and resizing is "
                       "off",
                       images, di[2], di[1], ds->W, ds->H);
    uint8_t *tmp = NULL;
    if (st == MT_OK && di[0] > INT32_MAX - ds->n)
        st = mt_errorf(err, MT_EFORMAT, "%s: %d images, with the %d before them more than %d",
                       images, di[0], ds->n, INT32_MAX);
    if (st == MT_OK) st = ds_reserve(ds, ds->n + di[0], err);
    if (st == MT_OK && !(tmp = malloc((size_t)di[1] * di[2] * ds->C)))
        st = mt_errorf(err, MT_ENOMEM, "%s: out of memory for an image of %dx%d pixels", images,
                       di[2], di[1]);
    if (st == MT_OK) {
        int n = di[0], h = di[1], w = di[2], C = ds->C;
        size_t sz = (size_t)ds->H * ds->W * C;
        for (int i = 0; i < n && st == MT_OK; i++) {
            const uint8_t *g = img + (size_t)i * h * w;
            uint8_t *dst = ds->pix + (ds->n + i) * sz;
            /* gray to C channels (alpha, the last of 2 or 4, opaque), then the size */
            uint8_t *src = (h == ds->H && w == ds->W) ? dst : tmp;
            for (size_t p = 0; p < (size_t)h * w; p++)
                for (int c = 0; c < C; c++) src[p * C + c] = C % 2 == 0 && c == C - 1 ? 255 : g[p];
            if (src != dst && (st = mt_image_resize(src, h, w, dst, ds->H, ds->W, C, err)) != MT_OK)
                break;
            ds->label[ds->n + i] = lab[i];
            if (lab[i] + 1 > ds->n_classes) ds->n_classes = lab[i] + 1;
        }
        if (st == MT_OK) ds->n += n;
    }
    free(tmp);
    free(img);
    free(lab);
    return st;
}

/* Class names from a file, one per line; it must name every label. */
static mt_status read_class_names(const char *path, mt_images *ds, mt_err *err) {
    FILE *f;
    mt_status s = mt_file_open("the class names file", path, "r", &f, err);
    if (s != MT_OK) return s;
    char line[256];
    char **names = NULL;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = xstrdup(line);
    }
    fclose(f);
    if (n < ds->n_classes) {
        free_strs(names, n);
        return mt_errorf(err, MT_EFORMAT,
                         "%s: %d class names for labels 0 to %d; write one name per "
                         "line, in label order",
                         path, n, ds->n_classes - 1);
    }
    ds->class_names = names;
    ds->n_classes = n;
    return MT_OK;
}

/* "<dir>/<split>-<kind>-idx<d>-ubyte[.gz]" when it exists, else NULL (malloc'd). */
static char *idx_path(const char *dir, const char *split, const char *kind) {
    for (int gz = 1; gz >= 0; gz--) {
        char name[64];
        snprintf(name, sizeof name, "%s-%s-idx%d-ubyte%s", split, kind,
                 strcmp(kind, "images") ? 1 : 3, gz ? ".gz" : "");
        char *p = path_join(dir, name);
        if (is_file(p)) return p;
        free(p);
    }
    return NULL;
}

static mt_status load_idx(const char *path, const mt_image_opts *o, mt_images *ds, mt_err *err) {
    mt_status st = MT_OK;
    char *dir;
    if (is_dir(path)) {
        dir = xstrdup(path);
        const char *splits[2] = {"train", "t10k"};
        for (int s = 0; s < 2 && st == MT_OK; s++) {
            char *im = idx_path(dir, splits[s], "images"), *lb = idx_path(dir, splits[s], "labels");
            if (im && !lb)
                st = mt_errorf(err, MT_EFORMAT, "%s: no %s-labels-idx1-ubyte[.gz] beside it", im,
                               splits[s]);
            else if (im) st = load_idx_pair(im, lb, o, ds, err);
            if (s == 0) ds->n_train = ds->n;
            free(im);
            free(lb);
        }
        if (ds->n_train == 0) ds->n_train = ds->n; /* t10k alone: no held-out part */
    } else {
        /* one file: X-images-idx3-ubyte[.gz] with X-labels-idx1-ubyte[.gz] */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const char *at = strstr(base, "-images-idx3-ubyte");
        if (!at)
            return mt_errorf(err, MT_EINVAL,
                             "%s: not an image folder or an idx images file "
                             "(<split>-images-idx3-ubyte[.gz])",
                             path);
        dir = base == path ? xstrdup(".") : strndup(path, (size_t)(base - path - 1));
        size_t n = strlen(path) + 8;
        char *lb = xrealloc(NULL, n);
        snprintf(lb, n, "%.*slabels-idx1-ubyte%s", (int)(at + 1 - path), path,
                 at + strlen("-images-idx3-ubyte"));
        st = load_idx_pair(path, lb, o, ds, err);
        ds->n_train = ds->n;
        free(lb);
    }
    char *names = path_join(dir, "classes.txt");
    if (st == MT_OK && (o->classes || is_file(names)))
        st = read_class_names(o->classes ? o->classes : names, ds, err);
    free(names);
    free(dir);
    return st;
}

static bool has_idx(const char *dir) {
    char *a = idx_path(dir, "train", "images"), *b = idx_path(dir, "t10k", "images");
    bool r = a || b;
    free(a);
    free(b);
    return r;
}

mt_status mt_images_load(const char *path, const mt_image_opts *opts, mt_images *ds, mt_err *err) {
    memset(ds, 0, sizeof *ds);
    mt_image_opts o = opts ? *opts : mt_image_opts_default();
    if (o.C < 0 || o.C > MT_IMG_MAX_C || o.H < 0 || o.W < 0 || (!o.H) != (!o.W) ||
        o.H > MT_IMG_MAX_SIDE || o.W > MT_IMG_MAX_SIDE)
        return mt_errorf(err, MT_EINVAL,
                         "image options: size %dx%d (height x width) with %d "
                         "channels; give both height and width (or neither), each from 1 to %d, "
                         "and 1 to %d channels (0: as the images)",
                         o.H, o.W, o.C, MT_IMG_MAX_SIDE, MT_IMG_MAX_C);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mt_errorf(err, MT_EIO,
                         "%s: %s; give an image folder (one subdirectory per class), "
                         "a directory of MNIST-format idx files or an idx images file",
                         path, strerror(errno));
    mt_status st;
    if (!S_ISDIR(sb.st_mode) || has_idx(path)) st = load_idx(path, &o, ds, err);
    else st = load_folder(path, o, ds, err);
    if (st == MT_OK && ds->n == 0)
        st = mt_errorf(err, MT_EFORMAT, "%s: no readable images (%d files skipped)", path,
                       ds->n_skipped);
    if (st == MT_OK && !ds->class_names) {
        ds->class_names = xrealloc(NULL, (size_t)ds->n_classes * sizeof *ds->class_names);
        for (int k = 0; k < ds->n_classes; k++) {
            char s[16];
            snprintf(s, sizeof s, "%d", k);
            ds->class_names[k] = xstrdup(s);
        }
    }
    for (int c = 0; c < MT_IMG_MAX_C; c++) ds->mean[c] = 0, ds->std[c] = 1;
    if (st != MT_OK) mt_images_free(ds);
    return st;
}

void mt_images_free(mt_images *ds) {
    free(ds->pix);
    free(ds->label);
    if (ds->class_names) free_strs(ds->class_names, ds->n_classes);
    free(ds->skipped);
    memset(ds, 0, sizeof *ds);
}

/* ---- split, normalisation, batches ----------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

mt_status mt_images_split(const mt_images *ds, float val_frac, uint64_t seed, int *idx,
                          int *n_train, mt_err *err) {
    for (int i = 0; i < ds->n; i++) idx[i] = i;
    if (ds->n_train < ds->n) {
        *n_train = ds->n_train;
        if (ds->n_train < 1)
            return mt_errorf(err, MT_EINVAL,
                             "the data has a test part of %d images but no "
                             "training part (the train-* idx files)",
                             ds->n);
        return MT_OK;
    }
    int n_val = (int)lround((double)val_frac * ds->n);
    if (!(val_frac > 0 && val_frac < 1) || n_val < 1 || n_val > ds->n - 1)
        return mt_errorf(err, MT_EINVAL,
                         "validation fraction %g of %d images leaves %d for "
                         "validation; give a fraction in (0, 1) that leaves at least one image on "
                         "each side",
                         val_frac, ds->n, n_val);
    mt_rng r;
    mt_rng_seed(&r, seed);
    for (int i = ds->n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)mt_rng_below(&r, (uint32_t)i + 1), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    *n_train = ds->n - n_val;
    qsort(idx, (size_t)*n_train, sizeof *idx, cmp_int);
    qsort(idx + *n_train, (size_t)n_val, sizeof *idx, cmp_int);
    return MT_OK;
}

void mt_images_normalize_from(mt_images *ds, const int *idx, int n) {
    int C = ds->C;
    size_t hw = (size_t)ds->H * ds->W;
    double s[MT_IMG_MAX_C] = {0}, s2[MT_IMG_MAX_C] = {0};
    for (int i = 0; i < n; i++) {
        const uint8_t *p = ds->pix + (size_t)idx[i] * hw * C;
        /* integer sums per image are exact, so the order of images is the only rounding */
        uint64_t a[MT_IMG_MAX_C] = {0}, a2[MT_IMG_MAX_C] = {0};
        for (size_t q = 0; q < hw; q++)
            for (int c = 0; c < C; c++)
                a[c] += p[q * C + c], a2[c] += (uint32_t)p[q * C + c] * p[q * C + c];
        for (int c = 0; c < C; c++) s[c] += (double)a[c], s2[c] += (double)a2[c];
    }
    double cnt = (double)n * hw;
    for (int c = 0; c < C; c++) {
        double m = s[c] / cnt / 255, v = s2[c] / cnt / (255.0 * 255) - m * m;
        ds->mean[c] = (float)m;
        ds->std[c] = v > 1e-12 ? (float)sqrt(v) : 1.0f;
    }
}

void mt_image_to_floats(const uint8_t *pix, int H, int W, int C, const float *mean,
                        const float *std, float *x) {
    size_t hw = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        float a = 1.0f / (255 * std[c]), b = -mean[c] / std[c];
        for (size_t q = 0; q < hw; q++) x[c * hw + q] = pix[q * C + c] * a + b;
    }
}

void mt_images_batch(const mt_images *ds, const int *idx, int B, float *x, int *y) {
    size_t sz = (size_t)ds->H * ds->W * ds->C;
    MT_PARALLEL_FOR((size_t)B * sz >= MT_PAR_MIN, for (int b = 0; b < B; b++) {
        mt_image_to_floats(ds->pix + (size_t)idx[b] * sz, ds->H, ds->W, ds->C, ds->mean, ds->std,
                           x + b * sz);
        if (y) y[b] = ds->label[idx[b]];
    });
}

/* ---- metadata for checkpoints ---------------------------------------------------------------- */

char *mt_images_meta_to_json(const mt_images *ds) {
    cJSON *o = cJSON_CreateObject();
    MT_ASSERT(o, "images: out of memory for JSON");
    cJSON_AddNumberToObject(o, "height", ds->H);
    cJSON_AddNumberToObject(o, "width", ds->W);
    cJSON_AddNumberToObject(o, "channels", ds->C);
    cJSON *m = cJSON_AddArrayToObject(o, "mean"), *s = cJSON_AddArrayToObject(o, "std");
    for (int c = 0; c < ds->C; c++) {
        cJSON_AddItemToArray(m, cJSON_CreateNumber(ds->mean[c]));
        cJSON_AddItemToArray(s, cJSON_CreateNumber(ds->std[c]));
    }
    cJSON *k = cJSON_AddArrayToObject(o, "classes");
    for (int i = 0; i < ds->n_classes; i++)
        cJSON_AddItemToArray(k, cJSON_CreateString(ds->class_names[i]));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(json, "images: out of memory for JSON");
    return json;
}

mt_status mt_images_meta_from_json(const char *json, mt_images *ds, mt_err *err) {
    memset(ds, 0, sizeof *ds);
    cJSON *o = cJSON_Parse(json);
    mt_status st = MT_OK;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "height"),
                *w = cJSON_GetObjectItemCaseSensitive(o, "width"),
                *c = cJSON_GetObjectItemCaseSensitive(o, "channels"),
                *m = cJSON_GetObjectItemCaseSensitive(o, "mean"),
                *s = cJSON_GetObjectItemCaseSensitive(o, "std"),
                *k = cJSON_GetObjectItemCaseSensitive(o, "classes");
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(h) || !cJSON_IsNumber(w) || !cJSON_IsNumber(c) ||
        !cJSON_IsArray(m) || !cJSON_IsArray(s) || !cJSON_IsArray(k)) {
        st = mt_errorf(err, MT_EFORMAT,
                       "image metadata: expected an object with numbers height, "
                       "width, channels and arrays mean, std, classes: %.120s",
                       json);
        goto out;
    }
    ds->H = h->valueint, ds->W = w->valueint, ds->C = c->valueint;
    ds->n_classes = cJSON_GetArraySize(k);
    if (ds->H < 1 || ds->W < 1 || ds->H > MT_IMG_MAX_SIDE || ds->W > MT_IMG_MAX_SIDE || ds->C < 1 ||
        ds->C > MT_IMG_MAX_C || cJSON_GetArraySize(m) != ds->C || cJSON_GetArraySize(s) != ds->C ||
        ds->n_classes < 1) {
        st = mt_errorf(err, MT_EFORMAT,
                       "image metadata: %dx%d images with %d channels, %d means, "
                       "%d stds and %d classes do not fit together",
                       ds->H, ds->W, ds->C, cJSON_GetArraySize(m), cJSON_GetArraySize(s),
                       ds->n_classes);
        goto out;
    }
    for (int i = 0; i < ds->C; i++) {
        const cJSON *a = cJSON_GetArrayItem(m, i), *b = cJSON_GetArrayItem(s, i);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !(b->valuedouble > 0)) {
            st = mt_errorf(err, MT_EFORMAT,
                           "image metadata: mean and std of channel %d must be "
                           "numbers, the std positive",
                           i);
            goto out;
        }
        ds->mean[i] = (float)a->valuedouble, ds->std[i] = (float)b->valuedouble;
    }
    ds->class_names = xrealloc(NULL, (size_t)ds->n_classes * sizeof *ds->class_names);
    for (int i = 0; i < ds->n_classes; i++) {
        const cJSON *a = cJSON_GetArrayItem(k, i);
        ds->class_names[i] = xstrdup(cJSON_IsString(a) ? a->valuestring : "?");
    }
out:
    cJSON_Delete(o);
    if (st != MT_OK) mt_images_free(ds);
    return st;
}
