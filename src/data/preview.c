/* mt images: a labelled grid of samples as a PNG, to look at a dataset before training on it.
 * Layout (data.h): cells of the image scaled up `scale` times with a 2-pixel border, over a
 * 12-pixel strip with the class name drawn by stb_easy_font (a header-only vector font). */
#include "../io/io.h"
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>
/* header-only with static functions, some of which go unused here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

enum { BORDER = 2, STRIP = 12, BG = 40 };

/* Fills the quads stb_easy_font emits for text at (x, y) into rgb (h, w, 3), clipped. */
static void draw_text(uint8_t *rgb, int w, int h, int x, int y, char *text) {
    char vbuf[64 * 320]; /* about 270 bytes a character (stb_easy_font.h); text < 64 chars */
    int quads = stb_easy_font_print((float)x, (float)y, text, NULL, vbuf, (int)sizeof vbuf);
    for (int q = 0; q < quads; q++) {
        const float *v = (const float *)(vbuf + q * 4 * 16); /* 4 vertices of x, y, z, rgba */
        int x0 = (int)v[0], y0 = (int)v[1], x1 = (int)v[2 * 4], y1 = (int)v[2 * 4 + 1];
        for (int yy = y0 < 0 ? 0 : y0; yy < y1 && yy < h; yy++)
            for (int xx = x0 < 0 ? 0 : x0; xx < x1 && xx < w; xx++)
                memset(rgb + ((size_t)yy * w + xx) * 3, 255, 3);
    }
}

/* stb_image_write's callback: n bytes to the FILE ctx (its error flag says if one failed) */
static void write_to(void *ctx, void *data, int n) { fwrite(data, 1, (size_t)n, ctx); }

mt_status mt_images_preview(const mt_images *ds, const int *idx, int n, int scale,
                            const char *png_path, mt_err *err) {
    if (n < 1 || scale < 1)
        return mt_errorf(err, MT_EINVAL,
                         "a preview of %d images at scale %d: both must be at least 1", n, scale);
    int cols = (int)ceil(sqrt((double)n)), rows = (n + cols - 1) / cols;
    /* in double first: scale * W and cols * cw overflow an int long before memory runs out */
    double gw = cols * ((double)scale * ds->W + 2 * BORDER),
           gh = rows * ((double)scale * ds->H + 2 * BORDER + STRIP);
    if (gw > MT_PREVIEW_MAX_SIDE || gh > MT_PREVIEW_MAX_SIDE)
        return mt_errorf(err, MT_EINVAL,
                         "%d images of %dx%d pixels (width x height) at scale %d "
                         "make a %.0fx%.0f preview; it has at most %d pixels a side: fewer images "
                         "or a smaller scale",
                         n, ds->W, ds->H, scale, gw, gh, MT_PREVIEW_MAX_SIDE);
    int cw = scale * ds->W + 2 * BORDER, ch = scale * ds->H + 2 * BORDER + STRIP;
    int w = cols * cw, h = rows * ch, C = ds->C;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    if (!rgb) return mt_errorf(err, MT_ENOMEM, "preview: cannot allocate a %dx%d image", w, h);
    memset(rgb, BG, (size_t)w * h * 3);
    for (int i = 0; i < n; i++) {
        int x0 = (i % cols) * cw + BORDER, y0 = (i / cols) * ch + BORDER;
        const uint8_t *p = ds->pix + (size_t)idx[i] * ds->H * ds->W * C;
        for (int y = 0; y < scale * ds->H; y++)
            for (int x = 0; x < scale * ds->W; x++) {
                const uint8_t *s = p + ((size_t)(y / scale) * ds->W + x / scale) * C;
                uint8_t *d = rgb + ((size_t)(y0 + y) * w + x0 + x) * 3;
                for (int c = 0; c < 3; c++) d[c] = C >= 3 ? s[c] : s[0]; /* gray: replicated */
            }
        /* the class name, cut to the cell's width */
        char name[64];
        snprintf(name, sizeof name, "%s", ds->class_names[ds->label[idx[i]]]);
        for (char *q = name; *q; q++)
            if (*q < 32 || *q > 126) *q = '?'; /* the font has printable ASCII only */
        for (size_t len = strlen(name); len > 1 && stb_easy_font_width(name) > cw - 2;)
            name[--len] = 0;
        draw_text(rgb, w, h, x0, y0 + scale * ds->H + 2, name);
    }
    mt_atomic_file a;
    mt_status s = mt_atomic_open(&a, png_path, err);
    if (s == MT_OK) {
        int ok = stbi_write_png_to_func(write_to, a.f, w, h, 3, rgb, w * 3);
        s = mt_atomic_close(&a, ok && !ferror(a.f), err);
    }
    free(rgb);
    return s;
}
