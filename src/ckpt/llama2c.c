/* An importer (ckpt.h): llama2.c's model.bin in export.py's three versions as named float tensors
   under model.py's names, and its shape. Layouts: docs/export.md.
   C dim, F hidden_dim, L n_layers, V vocab, T seq_len, HS C / n_heads, KV n_kv_heads HS. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"

#define MAGIC 0x616b3432u /* "ak42" as a uint32: the bytes "24ka" */
#define HEADER_BYTES 256  /* versions 1 and 2 */
#define DIM_MAX (1 << 20) /* a bound on each size, so that every product fits 64 bits */

/* The kinds of tensor, each of every layer or one. */
enum { EMB, ATT_NORM, WQ, WK, WV, WO, FFN_NORM, W1, W2, W3, NORM, OUT, FREQS, END = -1 };
static const char *const NAMES[] = {
    [EMB] = "tok_embeddings.weight",
    [ATT_NORM] = "layers.%d.attention_norm.weight",
    [WQ] = "layers.%d.attention.wq.weight",
    [WK] = "layers.%d.attention.wk.weight",
    [WV] = "layers.%d.attention.wv.weight",
    [WO] = "layers.%d.attention.wo.weight",
    [FFN_NORM] = "layers.%d.ffn_norm.weight",
    [W1] = "layers.%d.feed_forward.w1.weight",
    [W2] = "layers.%d.feed_forward.w2.weight",
    [W3] = "layers.%d.feed_forward.w3.weight",
    [NORM] = "norm.weight",
    [OUT] = "output.weight",
};

/* The kinds in the order of each version's file (export.py's legacy_export, version1_export,
   version2_export); FREQS: version 0's two RoPE tables (T, HS / 2), which run.c skips too;
   version 2 holds the norms as float32, then the rest as Q8_0. OUT only when untied. */
static const int ORDER[3][14] = {
    {EMB, ATT_NORM, WQ, WK, WV, WO, FFN_NORM, W1, W2, W3, NORM, FREQS, OUT, END},
    {ATT_NORM, FFN_NORM, NORM, EMB, WQ, WK, WV, WO, W1, W2, W3, OUT, END},
    {ATT_NORM, FFN_NORM, NORM, EMB, WQ, WK, WV, WO, W1, W2, W3, OUT, END},
};

typedef struct {
    mt_import_arch a;
    int version, group; /* Q8_0's group size (version 2) */
    size_t header;      /* bytes before the tensors */
} layout;

static bool per_layer(int k) { return k != EMB && k != NORM && k != OUT && k != FREQS; }
static bool present(const layout *l, int k) { return k != OUT || !l->a.tied; }

/* The shape (rows, cols; rows 1 for a vector) of one tensor of kind k; true for a matrix (which
   stays one with a single row: a vocabulary of 1). */
static bool shape_of(const mt_import_arch *a, int k, int64_t *rows, int64_t *cols) {
    int64_t C = a->n_embd, F = a->n_ff, HS = C / a->n_head, KV = a->n_kv_head * HS;
    *rows = 1, *cols = C;
    switch (k) {
    case NORM:
    case ATT_NORM:
    case FFN_NORM: return false;
    case FREQS: *cols = a->n_ctx * HS; return false; /* cos and sin, (T, HS / 2) each */
    case EMB:
    case OUT: *rows = a->n_vocab; break;
    case WQ:
    case WO: *rows = C; break;
    case WK:
    case WV: *rows = KV; break;
    case W1:
    case W3: *rows = F; break;
    case W2: *rows = C, *cols = F; break;
    }
    return true;
}

/* Version 2 holds the matrices as Q8_0: int8 values, then a float scale a group. */
static bool quantized(const layout *l, int k) {
    return l->version == 2 && k != ATT_NORM && k != FFN_NORM && k != NORM;
}

/* Floats of one tensor of kind k, of all of them (over the layers), and the bytes these take. */
static int64_t tensor_floats(const layout *l, int k) {
    int64_t r, c;
    shape_of(&l->a, k, &r, &c);
    return r * c;
}
static int64_t kind_floats(const layout *l, int k) {
    return tensor_floats(l, k) * (per_layer(k) ? l->a.n_layer : 1);
}
static int64_t kind_bytes(const layout *l, int k) {
    int64_t n = kind_floats(l, k);
    return quantized(l, k) ? n + 4 * (n / l->group) : 4 * n;
}

static void rd_i32(const unsigned char *p, int32_t *v) { memcpy(v, p, 4); } /* little-endian */

static mt_status truncated(const char *path, size_t n, size_t header, mt_err *err) {
    return mt_errorf(err, MT_EFORMAT,
                     "%s: truncated: %zu bytes, less than a llama2.c model.bin header (%zu)", path,
                     n, header);
}

/* The header of the file's first bytes (n of them, of a file of size bytes) into l, checked. */
static mt_status parse_header(const char *path, const unsigned char *b, size_t n, int64_t size,
                              layout *l, mt_err *err) {
    int32_t magic, h[7];
    *l = (layout){.a = {.format = MT_IMPORT_LLAMA2C, .norm_eps = 1e-5f, .rope_theta = 10000.0f}};
    rd_i32(b, &magic);
    if (magic == (int32_t)MAGIC) {
        if (n < 8) return truncated(path, n, HEADER_BYTES, err);
        rd_i32(b + 4, &l->version);
        if (l->version != 1 && l->version != 2)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: a llama2.c model.bin (magic ak42) of version %d: versions 1 "
                             "(float32) and 2 (int8 Q8_0) are read, and 0 (no magic)",
                             path, l->version);
        if (n < HEADER_BYTES) return truncated(path, n, HEADER_BYTES, err);
        memcpy(h, b + 8, sizeof h);
        l->a.tied = b[36] != 0;
        if (l->version == 2) rd_i32(b + 37, &l->group);
        l->header = HEADER_BYTES;
    } else {
        if (n < sizeof h) return truncated(path, n, sizeof h, err);
        memcpy(h, b, sizeof h);
        l->a.tied = h[5] > 0; /* a negative vocab_size: an unshared classifier */
        if (h[5] < 0 && h[5] >= -DIM_MAX) h[5] = -h[5];
        l->header = sizeof h;
    }
    mt_import_arch *a = &l->a;
    a->n_embd = h[0], a->n_ff = h[1], a->n_layer = h[2], a->n_head = h[3], a->n_kv_head = h[4],
    a->n_vocab = h[5], a->n_ctx = h[6];
    bool ok = true;
    for (int i = 0; i < 7; i++) ok = ok && h[i] > 0 && h[i] <= DIM_MAX;
    if (!ok || a->n_embd % a->n_head || a->n_head % a->n_kv_head || (a->n_embd / a->n_head) % 2)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a llama2.c model.bin (version %d) with dim %d, hidden_dim %d, "
                         "n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d: "
                         "expected sizes in 1..%d, n_heads dividing dim into an even head size, "
                         "n_kv_heads dividing n_heads",
                         path, l->version, h[0], h[1], h[2], h[3], h[4], h[5], h[6], DIM_MAX);
    int64_t need = (int64_t)l->header;
    for (const int *k = ORDER[l->version]; *k != END; k++) {
        if (quantized(l, *k) && present(l, *k) &&
            (l->group <= 0 || tensor_floats(l, *k) % l->group))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: a llama2.c model.bin (version 2) with group size %d: expected "
                             "one that divides every matrix (%s has %lld numbers)",
                             path, l->group, NAMES[*k], (long long)tensor_floats(l, *k));
        if (present(l, *k)) need += kind_bytes(l, *k);
    }
    if (need == size) return MT_OK;
    return mt_errorf(err, MT_EFORMAT,
                     "%s: a llama2.c model.bin (version %d) of dim %d, hidden_dim %d, n_layers "
                     "%d, n_heads %d, n_kv_heads %d, vocab_size %d (%s classifier), seq_len %d "
                     "takes %lld bytes; the file has %lld (%s)",
                     path, l->version, h[0], h[1], h[2], h[3], h[4], h[5],
                     a->tied ? "shared" : "separate", h[6], (long long)need, (long long)size,
                     size < need ? "truncated?" : "more than its header says");
}

bool mt_llama2c_is(const char *path) {
    size_t n = strlen(path);
    uint32_t magic = 0;
    FILE *f = fopen(path, "rb");
    bool ak42 = f && fread(&magic, 4, 1, f) == 1 && magic == MAGIC;
    if (f) fclose(f);
    return ak42 || (n > 4 && strcmp(path + n - 4, ".bin") == 0);
}

/* The file at path opened and its size; the first up to HEADER_BYTES bytes into b (*n). */
static mt_status open_file(const char *path, FILE **f, int64_t *size, unsigned char *b, size_t *n,
                           mt_err *err) {
    struct stat sb;
    if (!(*f = fopen(path, "rb")))
        return mt_errorf(err, MT_EINVAL, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(*f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(*f);
        return mt_errorf(err, MT_EINVAL, "%s: not a regular file", path);
    }
    *size = (int64_t)sb.st_size;
    *n = fread(b, 1, HEADER_BYTES, *f);
    return MT_OK;
}

static mt_status read_layout(const char *path, FILE **f, layout *l, mt_err *err) {
    unsigned char b[HEADER_BYTES] = {0};
    int64_t size = 0;
    size_t n = 0;
    mt_status s = open_file(path, f, &size, b, &n, err);
    if (s == MT_OK && (s = parse_header(path, b, n, size, l, err)) != MT_OK) fclose(*f);
    return s;
}

mt_status mt_llama2c_arch(const char *path, mt_import_arch *arch, mt_err *err) {
    FILE *f;
    layout l;
    mt_status s = read_layout(path, &f, &l, err);
    if (s != MT_OK) return s;
    fclose(f);
    *arch = l.a;
    return MT_OK;
}

/* n floats of the file into x: float32, or (q8) n int8 values then n / group scales. */
static bool read_floats(FILE *f, float *x, int64_t n, bool q8, int group) {
    if (!q8) return fread(x, 4, (size_t)n, f) == (size_t)n;
    int8_t *q = malloc((size_t)n);
    float *scale = malloc((size_t)(n / group) * 4);
    bool ok = q && scale && fread(q, 1, (size_t)n, f) == (size_t)n &&
              fread(scale, 4, (size_t)(n / group), f) == (size_t)(n / group);
    for (int64_t i = 0; ok && i < n; i++) x[i] = (float)q[i] * scale[i / group];
    free(q);
    free(scale);
    return ok;
}

/* Each tensor of kind k (every layer's, one after the other) read into x and made an entry of
   st. */
static mt_status read_kind(FILE *f, const layout *l, int k, float *x, mt_safetensors *st,
                           const char *path, mt_err *err) {
    int64_t r, c;
    bool matrix = shape_of(&l->a, k, &r, &c);
    for (int layer = 0; layer < (per_layer(k) ? l->a.n_layer : 1); layer++, x += r * c) {
        if (!read_floats(f, x, r * c, quantized(l, k), l->group))
            return mt_errorf(err, MT_EIO, "%s: cannot read %s: %s", path, NAMES[k],
                             ferror(f) ? strerror(errno) : "the file shrank");
        char name[128];
        snprintf(name, sizeof name, NAMES[k], layer);
        int shape[2] = {(int)(matrix ? r : c), (int)c};
        if (mt_st_add(st, name, matrix ? 2 : 1, shape, x) < 0)
            return mt_errorf(err, MT_ENOMEM, "%s: out of memory indexing the tensors", path);
    }
    return MT_OK;
}

mt_status mt_llama2c_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err) {
    memset(st, 0, sizeof *st);
    FILE *f;
    layout l;
    mt_status s = read_layout(path, &f, &l, err);
    if (s != MT_OK) return s;
    int64_t floats = 0;
    for (const int *k = ORDER[l.version]; *k != END; k++)
        if (*k != FREQS && present(&l, *k)) floats += kind_floats(&l, *k);
    st->blob = malloc((size_t)floats * sizeof(float));
    st->t = calloc((size_t)(9 * l.a.n_layer + 3), sizeof *st->t);
    if (!st->blob || !st->t)
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %lld numbers", path,
                      (long long)floats);
    float *x = st->blob;
    if (s == MT_OK && fseeko(f, (off_t)l.header, SEEK_SET) != 0)
        s = mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
    for (const int *k = ORDER[l.version]; s == MT_OK && *k != END; k++) {
        if (!present(&l, *k)) continue;
        if (*k == FREQS) { /* read past */
            if (fseeko(f, (off_t)kind_bytes(&l, FREQS), SEEK_CUR) != 0)
                s = mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
            continue;
        }
        s = read_kind(f, &l, *k, x, st, path, err);
        x += kind_floats(&l, *k);
    }
    fclose(f);
    if (s != MT_OK) mt_st_free(st);
    else *arch = l.a;
    return s;
}
