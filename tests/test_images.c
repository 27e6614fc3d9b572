/* Image datasets: idx parsing (good, corrupted and truncated files written here), image folders
   (tiny PNG/BMP files written with stb_image_write, one unreadable, one of another size), the
   resize, the split, normalisation statistics, batches and the preview's size. */
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include "check.h"

static char tmp[64];

/* Under make asan: an allocation too big to be had returns NULL, as malloc does, instead of
   stopping the test (the loaders must say out of memory). */
__attribute__((used)) const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}

static char *tpath(const char *name) { /* a path in the temp dir (rotating static buffers) */
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n, bool gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        MT_ASSERT(f && gzwrite(f, data, (unsigned)n) == (int)n && gzclose(f) == Z_OK, "gz %s",
                  path);
    } else {
        FILE *f = fopen(path, "wb");
        MT_ASSERT(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "write %s", path);
    }
}

/* An idx file: magic 0 0 type nd, big-endian dims, then n_data bytes of data[i] = i * 7 + 3. */
static void write_idx(const char *path, int type, int nd, const int *dims, size_t n_data, bool gz) {
    size_t n = 4 + 4 * (size_t)nd + n_data;
    unsigned char *b = malloc(n), *p = b;
    *p++ = 0, *p++ = 0, *p++ = (unsigned char)type, *p++ = (unsigned char)nd;
    for (int i = 0; i < nd; i++)
        for (int s = 24; s >= 0; s -= 8) *p++ = (unsigned char)(dims[i] >> s);
    for (size_t i = 0; i < n_data; i++) p[i] = (unsigned char)(i * 7 + 3);
    write_bytes(path, b, n, gz);
    free(b);
}

static void write_labels(const char *path, int n, int n_classes) {
    unsigned char *b = malloc(8 + (size_t)n);
    memcpy(b,
           (unsigned char[]){0, 0, 8, 1, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n},
           8);
    for (int i = 0; i < n; i++) b[8 + i] = (unsigned char)(i % n_classes);
    write_bytes(path, b, 8 + (size_t)n, true);
    free(b);
}

/* mt_idx_read must fail on path with MT_EFORMAT and a message containing want. */
static void expect_idx_error(const char *path, const char *want) {
    int nd, dims[MT_MAX_DIMS];
    uint8_t *d = (uint8_t *)1;
    mt_err e = {0};
    mt_status st = mt_idx_read(path, &nd, dims, &d, &e);
    CHECK(st == MT_EFORMAT && strstr(e.msg, want) && d == NULL,
          "%s: status %d, message '%s', want one containing '%s'", path, st, e.msg, want);
}

static void test_idx(void) {
    int dims[3] = {5, 3, 4}, nd, got[MT_MAX_DIMS];
    uint8_t *d;
    mt_err e;
    for (int gz = 0; gz < 2; gz++) { /* gzip and plain */
        const char *p = tpath(gz ? "good.gz" : "good");
        write_idx(p, 8, 3, dims, 60, gz);
        CHECK(mt_idx_read(p, &nd, got, &d, &e) == MT_OK, "good idx: %s", e.msg);
        CHECK(nd == 3 && got[0] == 5 && got[1] == 3 && got[2] == 4, "dims %d: %d %d %d", nd, got[0],
              got[1], got[2]);
        bool same = true;
        for (int i = 0; i < 60; i++) same &= d[i] == (uint8_t)(i * 7 + 3);
        CHECK(same, "idx data differs");
        free(d);
    }
    write_idx(tpath("magic.gz"), 8, 3, dims, 60, true);
    { /* first byte nonzero: rewrite with a bad magic */
        unsigned char b[4 + 12 + 60] = {1, 0, 8, 3};
        write_bytes(tpath("magic.gz"), b, sizeof b, true);
    }
    expect_idx_error(tpath("magic.gz"), "not an idx file");
    write_idx(tpath("float.gz"), 0x0D, 3, dims, 240, true);
    expect_idx_error(tpath("float.gz"), "unsigned bytes (0x08) only");
    write_idx(tpath("nd0.gz"), 8, 0, dims, 0, true);
    expect_idx_error(tpath("nd0.gz"), "with 0 dims");
    int zero[3] = {5, 0, 4};
    write_idx(tpath("dim0.gz"), 8, 3, zero, 0, true);
    expect_idx_error(tpath("dim0.gz"), "dim 2 is 0");
    write_idx(tpath("short.gz"), 8, 3, dims, 59, true);
    expect_idx_error(tpath("short.gz"), "truncated: the dims (5, 3, 4) need 60 bytes of data, the "
                                        "file has 59");
    write_idx(tpath("long.gz"), 8, 3, dims, 61, true);
    expect_idx_error(tpath("long.gz"), "has more (trailing bytes)");
    write_bytes(tpath("tiny.gz"), (unsigned char[]){0, 0}, 2, true);
    expect_idx_error(tpath("tiny.gz"), "too short");
    write_idx(tpath("hdr.gz"), 8, 3, dims, 0, false);
    truncate(tpath("hdr.gz"), 10);
    expect_idx_error(tpath("hdr.gz"), "truncated in the header");
    { /* a gzip stream cut in the middle */
        int big[3] = {50, 30, 40};
        write_idx(tpath("cut.gz"), 8, 3, big, 60000, true);
        struct stat st;
        stat(tpath("cut.gz"), &st);
        truncate(tpath("cut.gz"), st.st_size / 2);
        int n2, g2[MT_MAX_DIMS];
        mt_err e2 = {0};
        CHECK(mt_idx_read(tpath("cut.gz"), &n2, g2, &d, &e2) == MT_EFORMAT &&
                  strstr(e2.msg, "cut.gz"),
              "cut gzip stream: '%s'", e2.msg);
    }
    mt_err e3 = {0};
    CHECK(mt_idx_read(tpath("absent.gz"), &nd, got, &d, &e3) == MT_EIO &&
              strstr(e3.msg, "No such file"),
          "absent file: '%s'", e3.msg);
}

/* An idx directory: a train pair and a t10k pair, as MNIST ships them. */
static void test_idx_dataset(void) {
    mkdir(tpath("mn"), 0700);
    int tr[3] = {6, 3, 4}, te[3] = {4, 3, 4};
    write_idx(tpath("mn/train-images-idx3-ubyte.gz"), 8, 3, tr, 72, true);
    write_labels(tpath("mn/train-labels-idx1-ubyte.gz"), 6, 3);
    write_idx(tpath("mn/t10k-images-idx3-ubyte.gz"), 8, 3, te, 48, true);
    write_labels(tpath("mn/t10k-labels-idx1-ubyte.gz"), 4, 3);
    mt_images ds;
    mt_err e;
    mt_image_opts o = mt_image_opts_default();
    CHECK(mt_images_load(tpath("mn"), &o, &ds, &e) == MT_OK, "idx dir: %s", e.msg);
    CHECK(ds.n == 10 && ds.n_train == 6 && ds.H == 3 && ds.W == 4 && ds.C == 1 && ds.n_classes == 3,
          "idx dir: n %d n_train %d %dx%dx%d classes %d", ds.n, ds.n_train, ds.H, ds.W, ds.C,
          ds.n_classes);
    CHECK(ds.pix[6 * 12 + 5] == (uint8_t)(5 * 7 + 3) && ds.label[7] == 1 &&
              strcmp(ds.class_names[2], "2") == 0,
          "idx dir: contents");
    int idx[10], n_train;
    CHECK(mt_images_split(&ds, 0.5f, 1, idx, &n_train, &e) == MT_OK && n_train == 6 && idx[6] == 6,
          "held-out part is the validation split");
    mt_images_free(&ds);

    /* one images file with its labels, resized and as RGB, class names from a file */
    FILE *f = fopen(tpath("names.txt"), "w");
    fputs("zero\none\ntwo\n", f);
    fclose(f);
    o.H = 6, o.W = 8, o.C = 3, o.classes = tpath("names.txt");
    CHECK(mt_images_load(tpath("mn/t10k-images-idx3-ubyte.gz"), &o, &ds, &e) == MT_OK,
          "idx file: %s", e.msg);
    CHECK(ds.n == 4 && ds.n_train == 4 && ds.H == 6 && ds.W == 8 && ds.C == 3 &&
              strcmp(ds.class_names[1], "one") == 0,
          "idx file resized to RGB");
    CHECK(ds.pix[0] == ds.pix[1] && ds.pix[1] == ds.pix[2], "gray replicated");
    mt_images_free(&ds);

    /* labels that do not match the images */
    write_labels(tpath("mn/t10k-labels-idx1-ubyte.gz"), 3, 3);
    o = mt_image_opts_default();
    mt_err e2 = {0};
    CHECK(mt_images_load(tpath("mn"), &o, &ds, &e2) == MT_EFORMAT &&
              strstr(e2.msg, "3 labels (1 dims) for the 4 images"),
          "label count: '%s'", e2.msg);
    CHECK(ds.pix == NULL && ds.n == 0, "failed load leaves nothing allocated");
}

/* A w x h image of channel count C, every byte v. */
static void write_png(const char *path, int w, int h, int C, int v, bool bmp) {
    unsigned char *b = malloc((size_t)w * h * C);
    memset(b, v, (size_t)w * h * C);
    int ok = bmp ? stbi_write_bmp(path, w, h, C, b) : stbi_write_png(path, w, h, C, b, w * C);
    MT_ASSERT(ok, "stbi_write %s", path);
    free(b);
}

static void test_folder(void) {
    mkdir(tpath("img"), 0700);
    mkdir(tpath("img/dog"), 0700);
    mkdir(tpath("img/cat"), 0700);
    write_png(tpath("img/cat/a.png"), 4, 4, 3, 10, false);
    write_png(tpath("img/cat/b.bmp"), 4, 4, 3, 20, true);
    write_png(tpath("img/cat/c.png"), 4, 4, 1, 30, false);   /* gray: converted to RGB */
    write_png(tpath("img/dog/big.png"), 8, 6, 3, 40, false); /* another size */
    write_png(tpath("img/dog/d.png"), 4, 4, 4, 50, false);   /* RGBA: alpha dropped */
    write_bytes(tpath("img/dog/bad.png"), "not a png at all", 16, false);
    write_bytes(tpath("img/dog/.hidden"), "x", 1, false);
    write_bytes(tpath("img/notes.txt"), "a file beside the classes", 25, false);

    mt_images ds;
    mt_err e;
    mt_image_opts o = mt_image_opts_default();
    CHECK(mt_images_load(tpath("img"), &o, &ds, &e) == MT_OK, "folder: %s", e.msg);
    CHECK(ds.n == 5 && ds.n_train == 5 && ds.n_classes == 2 && ds.H == 4 && ds.W == 4 && ds.C == 3,
          "folder: n %d (train %d) classes %d %dx%dx%d", ds.n, ds.n_train, ds.n_classes, ds.H, ds.W,
          ds.C);
    CHECK(strcmp(ds.class_names[0], "cat") == 0 && strcmp(ds.class_names[1], "dog") == 0,
          "classes sorted");
    CHECK(ds.n_skipped == 1 && ds.skipped && strstr(ds.skipped, "img/dog/bad.png: unreadable"),
          "skipped: %d '%s'", ds.n_skipped, ds.skipped ? ds.skipped : "");
    /* order: cat/a, cat/b, cat/c, dog/big (resized), dog/d */
    int want[5] = {10, 20, 30, 40, 50}, lab[5] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; i++) {
        bool same = true;
        for (int q = 0; q < 48; q++) same &= ds.pix[i * 48 + q] == want[i];
        CHECK(same && ds.label[i] == lab[i], "image %d: pixels or label wrong", i);
    }

    /* normalisation statistics against a naive pass, and batches through them */
    int idx[3] = {0, 3, 4};
    mt_images_normalize_from(&ds, idx, 3);
    double m = (10 + 40 + 50) / 3.0 / 255, v = (10 * 10 + 40 * 40 + 50 * 50) / 3.0 / 65025 - m * m;
    for (int c = 0; c < 3; c++)
        CHECK(fabs(ds.mean[c] - m) < 1e-6 && fabs(ds.std[c] - sqrt(v)) < 1e-6,
              "channel %d: mean %g std %g, want %g %g", c, ds.mean[c], ds.std[c], m, sqrt(v));
    float x[3 * 48];
    int y[3];
    mt_images_batch(&ds, idx, 3, x, y);
    double s = 0, s2 = 0;
    for (int i = 0; i < 3 * 48; i++) s += x[i], s2 += (double)x[i] * x[i];
    CHECK(fabs(s / 144) < 1e-5 && fabs(s2 / 144 - 1) < 1e-5, "normalised: mean %g var %g", s / 144,
          s2 / 144);
    CHECK(y[1] == 1 && fabs(x[48 + 5] - (40 / 255.0 - m) / sqrt(v)) < 1e-5, "batch layout");

    /* the metadata a checkpoint carries */
    char *json = mt_images_meta_to_json(&ds);
    mt_images meta;
    CHECK(mt_images_meta_from_json(json, &meta, &e) == MT_OK, "meta: %s", e.msg);
    CHECK(meta.H == 4 && meta.W == 4 && meta.C == 3 && meta.n_classes == 2 && meta.n == 0 &&
              fabsf(meta.mean[2] - ds.mean[2]) < 1e-6f && fabsf(meta.std[1] - ds.std[1]) < 1e-6f &&
              strcmp(meta.class_names[1], "dog") == 0,
          "meta round trip: %s", json);
    mt_images_free(&meta);
    free(json);
    CHECK(mt_images_meta_from_json("{\"height\":4,\"width\":4,\"channels\":2,\"mean\":[0],"
                                   "\"std\":[1],\"classes\":[\"a\"]}",
                                   &meta, &e) == MT_EFORMAT &&
              strstr(e.msg, "1 means"),
          "meta mismatch: %s", e.msg);

    /* the preview's size: 5 images -> 3 columns, 2 rows; cells 2*4+4 wide, 2*4+16 high */
    int all[5] = {0, 1, 2, 3, 4}, w, h, comp;
    CHECK(mt_images_preview(&ds, all, 5, 2, tpath("grid.png"), &e) == MT_OK, "preview: %s", e.msg);
    CHECK(stbi_info(tpath("grid.png"), &w, &h, &comp) && w == 36 && h == 48 && comp == 3,
          "preview is %dx%d (%d channels), want 36x48x3", w, h, comp);
    /* too large: 3 x 2 cells of 2000 * 4 + 4 by 2000 * 4 + 16 pixels; at scale 357913941 the
       3 cells' width, 3 (4 s + 4) = 2^32 + 8, wrapped around an int to 8 pixels (./preview
       wrote past its buffer when the height wrapped too) */
    remove(tpath("grid.png"));
    CHECK(mt_images_preview(&ds, all, 5, 2000, tpath("grid.png"), &e) == MT_EINVAL &&
              strstr(e.msg, "make a 24012x16032 preview") && access(tpath("grid.png"), F_OK) != 0,
          "preview too large: '%s'", e.msg);
    CHECK(mt_images_preview(&ds, all, 5, 357913941, tpath("grid.png"), &e) == MT_EINVAL &&
              strstr(e.msg, "at most 16384 pixels a side"),
          "preview wrapping around: '%s'", e.msg);
    mt_images_free(&ds);

    /* reject instead of skip: the error names the file */
    o.skip_bad = false;
    CHECK(mt_images_load(tpath("img"), &o, &ds, &e) == MT_EFORMAT && strstr(e.msg, "dog/bad.png") &&
              strstr(e.msg, "skip-bad"),
          "reject: '%s'", e.msg);
    /* no resizing: the 8x6 image is mismatched and skipped; gray output */
    o.skip_bad = true, o.resize = false, o.C = 1;
    CHECK(mt_images_load(tpath("img"), &o, &ds, &e) == MT_OK && ds.n == 4 && ds.C == 1 &&
              ds.n_skipped == 2 && strstr(ds.skipped, "big.png: 8x6 pixels"),
          "mismatched: n %d skipped '%s'", ds.n, ds.skipped ? ds.skipped : "");
    mt_images_free(&ds);
    CHECK(mt_images_load(tpath("img/cat"), &o, &ds, &e) == MT_EFORMAT &&
              strstr(e.msg, "no class subdirectories"),
          "no classes: '%s'", e.msg);
    o.H = 5;
    CHECK(mt_images_load(tpath("img"), &o, &ds, &e) == MT_EINVAL &&
              strstr(e.msg, "height and width"),
          "bad options: '%s'", e.msg);
    CHECK(mt_images_load(tpath("nowhere"), NULL, &ds, &e) == MT_EIO &&
              strstr(e.msg, "No such file"),
          "absent: '%s'", e.msg);

    /* an image of 0 x 0 pixels (stb_image reads the PGM header) first: skipped, named, and the
       size comes from the next one */
    mkdir(tpath("zero"), 0700);
    mkdir(tpath("zero/a"), 0700);
    write_bytes(tpath("zero/a/a0.pgm"), "P5\n0 0\n255\n", 11, false);
    write_png(tpath("zero/a/b.png"), 4, 4, 1, 10, false);
    o = mt_image_opts_default();
    CHECK(mt_images_load(tpath("zero"), &o, &ds, &e) == MT_OK && ds.n == 1 && ds.H == 4 &&
              ds.n_skipped == 1 && strstr(ds.skipped, "a0.pgm: 0x0 pixels"),
          "0x0 image: %s", ds.skipped ? ds.skipped : e.msg);
    mt_images_free(&ds);
    o.skip_bad = false;
    CHECK(mt_images_load(tpath("zero"), &o, &ds, &e) == MT_EFORMAT && strstr(e.msg, "a0.pgm: 0x0"),
          "0x0 image rejected: '%s'", e.msg);
    /* no readable image, channels given: the size is still unknown */
    write_bytes(tpath("zero/a/b.png"), "not a png", 9, false);
    o = mt_image_opts_default();
    o.C = 3;
    CHECK(mt_images_load(tpath("zero"), &o, &ds, &e) == MT_EFORMAT &&
              strstr(e.msg, "none of the 2 files"),
          "nothing readable, channels given: '%s'", e.msg);
}

/* Sizes: asked for, the data's own, and more images than memory holds (statuses, not aborts). */
static void test_sizes(void) {
    mkdir(tpath("sz"), 0700);
    int wide[3] = {1, 70000, 1}, many[3] = {10000, 1, 1};
    write_idx(tpath("sz/wide-images-idx3-ubyte.gz"), 8, 3, wide, 70000, true);
    write_labels(tpath("sz/wide-labels-idx1-ubyte.gz"), 1, 1);
    write_idx(tpath("sz/many-images-idx3-ubyte.gz"), 8, 3, many, 10000, true);
    write_labels(tpath("sz/many-labels-idx1-ubyte.gz"), 10000, 2);
    mt_images ds;
    mt_err e = {0};
    mt_image_opts o = mt_image_opts_default();
    o.H = o.W = 100000;
    CHECK(mt_images_load(tpath("sz/many-images-idx3-ubyte.gz"), &o, &ds, &e) == MT_EINVAL &&
              strstr(e.msg, "each from 1 to 65536"),
          "size asked for: '%s'", e.msg);
    o = mt_image_opts_default();
    CHECK(mt_images_load(tpath("sz/wide-images-idx3-ubyte.gz"), &o, &ds, &e) == MT_EFORMAT &&
              strstr(e.msg, "70000x1 pixels (rows x columns); mt reads at most 65536"),
          "idx images too large: '%s'", e.msg);
    /* 10000 images of 65536 x 65536 x 4 bytes: 160 TiB, more than an address space */
    o.H = o.W = 65536, o.C = 4;
    CHECK(mt_images_load(tpath("sz/many-images-idx3-ubyte.gz"), &o, &ds, &e) == MT_ENOMEM &&
              strstr(e.msg, "out of memory for 10000 images of 65536x65536x4"),
          "too many images for memory: '%s'", e.msg);
    CHECK(ds.pix == NULL && ds.n == 0, "a failed load leaves nothing allocated");
    mt_images meta;
    CHECK(mt_images_meta_from_json("{\"height\":70000,\"width\":4,\"channels\":1,\"mean\":[0],"
                                   "\"std\":[1],\"classes\":[\"a\"]}",
                                   &meta, &e) == MT_EFORMAT &&
              strstr(e.msg, "70000x4 images"),
          "meta too large: %s", e.msg);
}

static void test_resize(void) {
    /* 4x4 of 2x2 blocks -> 2x2: each output is its block's average */
    uint8_t src[16], dst[4];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            src[y * 4 + x] = (uint8_t)((y / 2) * 100 + (x / 2) * 50 + (x % 2) * 2);
    CHECK(mt_image_resize(src, 4, 4, dst, 2, 2, 1, NULL) == MT_OK, "resize");
    CHECK(dst[0] == 1 && dst[1] == 51 && dst[2] == 101 && dst[3] == 151, "shrink: %d %d %d %d",
          dst[0], dst[1], dst[2], dst[3]);
    /* 1x2 -> 1x4: bilinear at half-pixel centres: a, .75a+.25b, .25a+.75b, b */
    uint8_t r2[2] = {0, 200}, r4[4];
    CHECK(mt_image_resize(r2, 1, 2, r4, 1, 4, 1, NULL) == MT_OK, "resize");
    CHECK(r4[0] == 0 && r4[1] == 50 && r4[2] == 150 && r4[3] == 200, "grow: %d %d %d %d", r4[0],
          r4[1], r4[2], r4[3]);
    /* 3 channels stay apart; a constant stays constant through an odd ratio */
    uint8_t c3[7 * 5 * 3], o3[3 * 2 * 3];
    for (int i = 0; i < 7 * 5; i++) c3[i * 3] = 9, c3[i * 3 + 1] = 99, c3[i * 3 + 2] = 199;
    CHECK(mt_image_resize(c3, 5, 7, o3, 2, 3, 3, NULL) == MT_OK, "resize");
    bool ok = true;
    for (int i = 0; i < 6; i++) ok &= o3[i * 3] == 9 && o3[i * 3 + 1] == 99 && o3[i * 3 + 2] == 199;
    CHECK(ok, "constant channels not preserved");
}

static void test_split(void) {
    mt_images ds = {.n = 100, .n_train = 100};
    int a[100], b[100], na, nb;
    mt_err e;
    CHECK(mt_images_split(&ds, 0.2f, 7, a, &na, &e) == MT_OK && na == 80, "split sizes");
    CHECK(mt_images_split(&ds, 0.2f, 7, b, &nb, &e) == MT_OK && !memcmp(a, b, sizeof a), "seeded");
    int seen[100] = {0};
    bool sorted = true;
    for (int i = 0; i < 100; i++) seen[a[i]]++;
    for (int i = 1; i < 100; i++) sorted &= i == 80 || a[i - 1] < a[i];
    bool perm = true;
    for (int i = 0; i < 100; i++) perm &= seen[i] == 1;
    CHECK(perm && sorted, "a partition, each part ascending");
    CHECK(mt_images_split(&ds, 0.2f, 8, b, &nb, &e) == MT_OK && memcmp(a, b, sizeof a),
          "another seed, another split");
    CHECK(mt_images_split(&ds, 1.0f, 7, a, &na, &e) == MT_EINVAL && strstr(e.msg, "(0, 1)"),
          "bad fraction: '%s'", e.msg);
}

/* The shipped MNIST test set, when run from the repository. */
static void test_shipped_mnist(void) {
    if (access("data/mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0) return;
    mt_images ds;
    mt_err e;
    CHECK(mt_images_load("data/mnist", NULL, &ds, &e) == MT_OK, "data/mnist: %s", e.msg);
    CHECK(ds.n == 10000 && ds.H == 28 && ds.W == 28 && ds.C == 1 && ds.n_classes == 10,
          "data/mnist: %d images %dx%dx%d, %d classes", ds.n, ds.H, ds.W, ds.C, ds.n_classes);
    int idx[10000], n_train;
    CHECK(mt_images_split(&ds, 0.1f, 1, idx, &n_train, &e) == MT_OK && n_train == 9000, "split");
    mt_images_normalize_from(&ds, idx, n_train);
    /* the well-known MNIST statistics (0.1307, 0.3081 on the training set) */
    CHECK(fabs(ds.mean[0] - 0.1307) < 0.01 && fabs(ds.std[0] - 0.3081) < 0.01, "mean %g std %g",
          ds.mean[0], ds.std[0]);
    mt_images_free(&ds);
}

static int rm_entry(const char *p, const struct stat *s, int flag, struct FTW *f) {
    (void)s, (void)flag, (void)f;
    return remove(p);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/mt-test-images-XXXXXX");
    MT_ASSERT(mkdtemp(tmp), "mkdtemp");
    test_idx();
    test_idx_dataset();
    test_folder();
    test_sizes();
    test_resize();
    test_split();
    test_shipped_mnist();
    nftw(tmp, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return check_finish("test_images");
}
