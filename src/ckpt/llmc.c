/* An importer (ckpt.h): llm.c's gpt2_124M.bin (train_gpt2.py's write_model, versions 3 float32
   and 5 bfloat16) as named float tensors under train_gpt2.py's names, and its shape. Layout:
   docs/export.md. C n_embd, L n_layer, NH n_head, V vocab_size, VP padded_vocab_size (wte's
   rows; those past V are padding, not read), T max_seq_len. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../tensor/gemm.h"
#include "ckpt.h"

#define MAGIC 20240326
/* llm.c's other files, refused by name: a model file read as one of them is a mistake */
static const struct {
    int32_t magic;
    const char *what;
} OTHERS[] = {{20240327, "debugging state (write_state)"},
              {20240328, "tokenizer (gpt2_tokenizer.bin)"},
              {20240520, "token shard"}}; /* data.h's MT_LLMC_MAGIC */
#define HEADER_INTS 256
#define DIM_MAX (1 << 20) /* a bound on each size, so that every product fits 64 bits */

/* The kinds of tensor in the file's order, each of every layer or one. */
enum {
    WTE,
    WPE,
    LN1W,
    LN1B,
    QKVW,
    QKVB,
    ATTPROJW,
    ATTPROJB,
    LN2W,
    LN2B,
    FCW,
    FCB,
    FCPROJW,
    FCPROJB,
    LNFW,
    LNFB,
    KINDS
};
static const char *const NAMES[KINDS] = {
    [WTE] = "transformer.wte.weight",
    [WPE] = "transformer.wpe.weight",
    [LN1W] = "transformer.h.%d.ln_1.weight",
    [LN1B] = "transformer.h.%d.ln_1.bias",
    [QKVW] = "transformer.h.%d.attn.c_attn.%c.weight", /* its thirds, q, k and v */
    [QKVB] = "transformer.h.%d.attn.c_attn.%c.bias",
    [ATTPROJW] = "transformer.h.%d.attn.c_proj.weight",
    [ATTPROJB] = "transformer.h.%d.attn.c_proj.bias",
    [LN2W] = "transformer.h.%d.ln_2.weight",
    [LN2B] = "transformer.h.%d.ln_2.bias",
    [FCW] = "transformer.h.%d.mlp.c_fc.weight",
    [FCB] = "transformer.h.%d.mlp.c_fc.bias",
    [FCPROJW] = "transformer.h.%d.mlp.c_proj.weight",
    [FCPROJB] = "transformer.h.%d.mlp.c_proj.bias",
    [LNFW] = "transformer.ln_f.weight",
    [LNFB] = "transformer.ln_f.bias",
};

typedef struct {
    mt_import_arch a;
    int version, padded_vocab;
    int64_t elem; /* bytes of a number: 4 (version 3) or 2 (bfloat16) */
} layout;

static bool per_layer(int k) { return k != WTE && k != WPE && k != LNFW && k != LNFB; }

/* The shape (rows, cols; rows 1 for a vector) of one tensor of kind k as the file holds it. */
static void shape_of(const layout *l, int k, int64_t *rows, int64_t *cols) {
    int64_t C = l->a.n_embd;
    *rows = 1, *cols = C;
    switch (k) {
    case WTE: *rows = l->padded_vocab; break;
    case WPE: *rows = l->a.n_ctx; break;
    case QKVW: *rows = 3 * C; break;
    case QKVB: *cols = 3 * C; break;
    case ATTPROJW: *rows = C; break;
    case FCW: *rows = 4 * C; break;
    case FCB: *cols = 4 * C; break;
    case FCPROJW: *rows = C, *cols = 4 * C; break;
    }
}

static int64_t kind_floats(const layout *l, int k) {
    int64_t r, c;
    shape_of(l, k, &r, &c);
    return r * c * (per_layer(k) ? l->a.n_layer : 1);
}

static int64_t all_floats(const layout *l) {
    int64_t n = 0;
    for (int k = 0; k < KINDS; k++) n += kind_floats(l, k);
    return n;
}

static const char *version_name(int version) { return version == 3 ? "float32" : "bfloat16"; }

/* The header h (HEADER_INTS int32, n of them read, of a file of size bytes) into l, checked. */
static mt_status parse_header(const char *path, const int32_t *h, size_t n, int64_t size, layout *l,
                              mt_err *err) {
    *l = (layout){.a = {.format = MT_IMPORT_LLMC, .tied = true, .norm_eps = 1e-5f}};
    if (n < HEADER_INTS)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: truncated: %lld bytes, less than an llm.c gpt2 .bin header (%d)",
                         path, (long long)size, 4 * HEADER_INTS);
    for (size_t i = 0; h[0] != MAGIC && i < sizeof OTHERS / sizeof *OTHERS; i++)
        if (h[0] == OTHERS[i].magic)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: llm.c's %s, magic %d: expected its gpt2 model (magic %d)", path,
                             OTHERS[i].what, h[0], MAGIC);
    if (h[0] != MAGIC)
        return mt_errorf(err, MT_EFORMAT, "%s: magic %d, expected llm.c's gpt2 model %d", path,
                         h[0], MAGIC);
    l->version = h[1];
    if (l->version != 3 && l->version != 5)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: an llm.c gpt2 model of version %d: versions 3 (float32) and 5 "
                         "(bfloat16) are read",
                         path, l->version);
    l->elem = l->version == 3 ? 4 : 2;
    mt_import_arch *a = &l->a;
    a->n_ctx = h[2], a->n_vocab = h[3], a->n_layer = h[4], a->n_head = a->n_kv_head = h[5],
    a->n_embd = h[6], l->padded_vocab = h[7];
    bool ok = true;
    for (int i = 2; i < 8; i++) ok = ok && h[i] > 0 && h[i] <= DIM_MAX;
    if (!ok || a->n_embd % a->n_head || l->padded_vocab < a->n_vocab)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: an llm.c gpt2 model (version %d) with max_seq_len %d, vocab_size "
                         "%d, num_layers %d, num_heads %d, channels %d, padded_vocab_size %d: "
                         "expected sizes in 1..%d, num_heads dividing channels, "
                         "padded_vocab_size at least vocab_size",
                         path, l->version, h[2], h[3], h[4], h[5], h[6], h[7], DIM_MAX);
    a->n_ff = 4 * a->n_embd;
    int64_t need = 4 * HEADER_INTS + l->elem * all_floats(l);
    if (need == size) return MT_OK;
    return mt_errorf(err, MT_EFORMAT,
                     "%s: an llm.c gpt2 model (version %d, %s) of max_seq_len %d, vocab_size %d "
                     "(padded %d), num_layers %d, num_heads %d, channels %d takes %lld bytes; the "
                     "file has %lld (%s)",
                     path, l->version, version_name(l->version), h[2], h[3], h[7], h[4], h[5], h[6],
                     (long long)need, (long long)size,
                     size < need ? "truncated?" : "more than its header says");
}

bool mt_llmc_is(const char *path) {
    int32_t magic = 0;
    FILE *f = fopen(path, "rb");
    bool is = f && fread(&magic, 4, 1, f) == 1 && magic == MAGIC;
    for (size_t i = 0; f && i < sizeof OTHERS / sizeof *OTHERS; i++)
        is = is || magic == OTHERS[i].magic;
    if (f) fclose(f);
    return is;
}

/* The file at path opened, its layout read and checked. */
static mt_status read_layout(const char *path, FILE **f, layout *l, mt_err *err) {
    mt_status s = mt_file_open("--init-from", path, "rb", f, err);
    if (s != MT_OK) return s;
    struct stat sb;
    int32_t h[HEADER_INTS] = {0};
    size_t n = fread(h, 4, HEADER_INTS, *f);
    if (fstat(fileno(*f), &sb) != 0)
        s = mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
    else s = parse_header(path, h, n, (int64_t)sb.st_size, l, err);
    if (s != MT_OK) fclose(*f);
    return s;
}

mt_status mt_llmc_arch(const char *path, mt_import_arch *arch, mt_err *err) {
    FILE *f;
    layout l;
    mt_status s = read_layout(path, &f, &l, err);
    if (s != MT_OK) return s;
    fclose(f);
    *arch = l.a;
    return MT_OK;
}

static bool matrix(int k) {
    return k == WTE || k == WPE || k == QKVW || k == ATTPROJW || k == FCW || k == FCPROJW;
}

/* One entry of st: name, rows x cols floats at x (rows 0: a vector of cols, a matrix of one row
   stays a matrix). */
static bool add_entry(mt_safetensors *st, const char *name, const float *x, int64_t rows,
                      int64_t cols) {
    int shape[2] = {(int)(rows ? rows : cols), (int)cols};
    return mt_st_add(st, name, rows ? 2 : 1, shape, x) >= 0;
}

/* The entries of kind k (every layer's, from x on): wte's first V rows; c_attn's weight and bias
   as their three thirds, q, k and v (C rows, C numbers). */
static bool add_kind(mt_safetensors *st, const layout *l, int k, const float *x) {
    int64_t r, c, C = l->a.n_embd;
    shape_of(l, k, &r, &c);
    char name[128];
    bool ok = true;
    for (int layer = 0; ok && layer < (per_layer(k) ? l->a.n_layer : 1); layer++, x += r * c) {
        if (k == QKVW || k == QKVB)
            for (int i = 0; ok && i < 3; i++) {
                snprintf(name, sizeof name, NAMES[k], layer, "qkv"[i]);
                ok = k == QKVW ? add_entry(st, name, x + i * C * C, C, C)
                               : add_entry(st, name, x + i * C, 0, C);
            }
        else {
            snprintf(name, sizeof name, NAMES[k], layer);
            ok = add_entry(st, name, x, !matrix(k) ? 0 : k == WTE ? l->a.n_vocab : r, c);
        }
    }
    return ok;
}

mt_status mt_llmc_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err) {
    memset(st, 0, sizeof *st);
    FILE *f;
    layout l;
    mt_status s = read_layout(path, &f, &l, err);
    if (s != MT_OK) return s;
    int64_t n = all_floats(&l);
    st->blob = malloc((size_t)n * sizeof(float));
    st->t = calloc((size_t)(16 * l.a.n_layer + 4), sizeof *st->t);
    if (!st->blob || !st->t)
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %lld numbers", path, (long long)n);
    else if (fread(st->blob, (size_t)l.elem, (size_t)n, f) != (size_t)n)
        s = mt_errorf(err, MT_EIO, "%s: cannot read its %lld numbers: %s", path, (long long)n,
                      ferror(f) ? strerror(errno) : "the file shrank");
    fclose(f);
    /* bfloat16 widened in place from the end: float i covers halves 2i and 2i + 1, read by now */
    for (int64_t i = n - 1; s == MT_OK && l.elem == 2 && i >= 0; i--) {
        mt_bf16 h;
        memcpy(&h, (const char *)st->blob + 2 * i, 2);
        st->blob[i] = mt_bf16_to_float(h);
    }
    const float *x = st->blob;
    for (int k = 0; s == MT_OK && k < KINDS; x += kind_floats(&l, k), k++)
        if (!add_kind(st, &l, k, x))
            s = mt_errorf(err, MT_ENOMEM, "%s: out of memory indexing the tensors", path);
    if (s != MT_OK) mt_st_free(st);
    else *arch = l.a;
    return s;
}
