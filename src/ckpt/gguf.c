/* An importer (ckpt.h): a GGUF file (src/io/gguf.h) of llama.cpp's "llama" architecture as named
   float tensors under GGUF's names (token_embd.weight, blk.{i}.attn_q.weight, ...) in torch's
   shapes, each dequantized to float32 (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K); its shape from the
   metadata; the vocabulary's arrays. Layouts: docs/export.md.
   C embedding_length, F feed_forward_length, L block_count, V the vocabulary, HS C / head_count. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/gguf.h"
#include "../tensor/gemm.h"
#include "ckpt.h"

#define DIM_MAX (1 << 20) /* a bound on each size, so that every product fits 64 bits */
#define DEPTH_MAX 4       /* arrays of arrays */

/* ---- a cursor over the mapped file: every read checked against its end ----------------------- */

typedef struct {
    const unsigned char *p, *end;
} cursor;

typedef struct {
    const char *s;
    uint64_t n;
} text;

static bool take(cursor *c, void *v, size_t n) {
    if ((size_t)(c->end - c->p) < n) return false;
    memcpy(v, c->p, n);
    c->p += n;
    return true;
}
static bool skip(cursor *c, uint64_t n) {
    if ((uint64_t)(c->end - c->p) < n) return false;
    c->p += n;
    return true;
}
static bool take_u32(cursor *c, uint32_t *v) { return take(c, v, 4); } /* little-endian hosts */
static bool take_u64(cursor *c, uint64_t *v) { return take(c, v, 8); }
static bool take_text(cursor *c, text *t) {
    t->s = (const char *)c->p + 8;
    return take_u64(c, &t->n) && skip(c, t->n);
}
static bool is(text t, const char *s) { return t.n == strlen(s) && memcmp(t.s, s, t.n) == 0; }

/* ---- key-values ------------------------------------------------------------------------------ */

static const uint8_t SCALAR_BYTES[MT_GGUF_N_TYPES] = {
    [MT_GGUF_U8] = 1,  [MT_GGUF_I8] = 1,  [MT_GGUF_U16] = 2, [MT_GGUF_I16] = 2,
    [MT_GGUF_U32] = 4, [MT_GGUF_I32] = 4, [MT_GGUF_F32] = 4, [MT_GGUF_BOOL] = 1,
    [MT_GGUF_U64] = 8, [MT_GGUF_I64] = 8, [MT_GGUF_F64] = 8,
};

/* Past a value of type (false: truncated or of no type); arrays within arrays to DEPTH_MAX. */
static bool skip_value(cursor *c, uint32_t type, int depth) {
    if (type >= MT_GGUF_N_TYPES) return false;
    if (type == MT_GGUF_STRING) {
        text t;
        return take_text(c, &t);
    }
    if (type != MT_GGUF_ARRAY) return skip(c, SCALAR_BYTES[type]);
    uint32_t et;
    uint64_t n;
    if (depth >= DEPTH_MAX || !take_u32(c, &et) || !take_u64(c, &n) || et >= MT_GGUF_N_TYPES)
        return false;
    if (et != MT_GGUF_STRING && et != MT_GGUF_ARRAY)
        return n <= (uint64_t)(c->end - c->p) / SCALAR_BYTES[et] && skip(c, n * SCALAR_BYTES[et]);
    for (uint64_t i = 0; i < n; i++)
        if (!skip_value(c, et, depth + 1)) return false;
    return true;
}

/* The keys read; the llama.* ones with the architecture's prefix. */
enum {
    ARCH,
    ALIGNMENT,
    CTX,
    EMBD,
    BLOCKS,
    FF,
    HEADS,
    KV_HEADS,
    EPS,
    THETA,
    ROPE_DIM,
    VOCAB_SIZE,
    EXPERTS,
    ROPE_SCALING,
    KEY_LENGTH,
    VALUE_LENGTH,
    TOK_MODEL,
    TOKENS,
    SCORES,
    TOKEN_TYPES,
    MERGES,
    BOS,
    EOS,
    N_KEYS
};
static const char *const KEYS[N_KEYS] = {
    [ARCH] = "general.architecture",
    [ALIGNMENT] = "general.alignment",
    [CTX] = "llama.context_length",
    [EMBD] = "llama.embedding_length",
    [BLOCKS] = "llama.block_count",
    [FF] = "llama.feed_forward_length",
    [HEADS] = "llama.attention.head_count",
    [KV_HEADS] = "llama.attention.head_count_kv",
    [EPS] = "llama.attention.layer_norm_rms_epsilon",
    [THETA] = "llama.rope.freq_base",
    [ROPE_DIM] = "llama.rope.dimension_count",
    [VOCAB_SIZE] = "llama.vocab_size",
    [EXPERTS] = "llama.expert_count",
    [ROPE_SCALING] = "llama.rope.scaling.type",
    [KEY_LENGTH] = "llama.attention.key_length",
    [VALUE_LENGTH] = "llama.attention.value_length",
    [TOK_MODEL] = "tokenizer.ggml.model",
    [TOKENS] = "tokenizer.ggml.tokens",
    [SCORES] = "tokenizer.ggml.scores",
    [TOKEN_TYPES] = "tokenizer.ggml.token_type",
    [MERGES] = "tokenizer.ggml.merges",
    [BOS] = "tokenizer.ggml.bos_token_id",
    [EOS] = "tokenizer.ggml.eos_token_id",
};

typedef struct {
    uint32_t type; /* MT_GGUF_N_TYPES: absent */
    const unsigned char *at;
} value;

/* A number of any integer or float type; false for another type or an absent key. */
static bool number(value v, double *x) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } u;
    if (v.type >= MT_GGUF_N_TYPES || v.type == MT_GGUF_BOOL || !SCALAR_BYTES[v.type]) return false;
    memcpy(&u, v.at, SCALAR_BYTES[v.type]);
    switch (v.type) {
    case MT_GGUF_U8: *x = u.u8; break;
    case MT_GGUF_I8: *x = u.i8; break;
    case MT_GGUF_U16: *x = u.u16; break;
    case MT_GGUF_I16: *x = u.i16; break;
    case MT_GGUF_U32: *x = u.u32; break;
    case MT_GGUF_I32: *x = u.i32; break;
    case MT_GGUF_F32: *x = u.f32; break;
    case MT_GGUF_U64: *x = (double)u.u64; break;
    case MT_GGUF_I64: *x = (double)u.i64; break;
    default: *x = u.f64;
    }
    return true;
}

static bool string(value v, text *t) {
    if (v.type != MT_GGUF_STRING) return false;
    memcpy(&t->n, v.at, 8);
    t->s = (const char *)v.at + 8;
    return true;
}

/* An array of element type et: its count and first element (false: absent or of another type). */
static bool array(value v, uint32_t et, uint64_t *n, const unsigned char **first) {
    uint32_t t;
    if (v.type != MT_GGUF_ARRAY) return false;
    memcpy(&t, v.at, 4);
    memcpy(n, v.at + 4, 8);
    *first = v.at + 12;
    return t == et;
}

/* ---- the tensor types read ------------------------------------------------------------------- */

/* A block of `block` numbers in `bytes` bytes (ggml-common.h's block_*), dequantized into y. */
typedef struct {
    uint32_t type;
    int block, bytes;
    void (*dequantize)(const unsigned char *b, float *y);
} qtype;

static float half_at(const unsigned char *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return mt_half_to_float(h);
}
static void f32_block(const unsigned char *b, float *y) { memcpy(y, b, 4); }
static void f16_block(const unsigned char *b, float *y) { *y = half_at(b); }
static void bf16_block(const unsigned char *b, float *y) {
    uint16_t h;
    memcpy(&h, b, 2);
    *y = mt_bf16_to_float(h);
}

/* Q8_0: half d, int8 q[32]; x = d q */
static void q8_0_block(const unsigned char *b, float *y) {
    float d = half_at(b);
    for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)b[2 + i];
}

/* Q4_0: half d, 16 bytes of 4-bit q; byte j holds q[j] (low nibble) and q[j + 16]; x = d (q - 8) */
static void q4_0_block(const unsigned char *b, float *y) {
    float d = half_at(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((b[2 + j] & 15) - 8);
        y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    }
}

/* Q4_K: half d, half dmin, 12 bytes of 6-bit scales and mins for 8 groups of 32, 128 bytes of 4-bit
   q; x = d sc q - dmin m. Group j's (sc, m): j < 4: the low 6 bits of s[j], s[j + 4]; else the
   nibbles of s[j + 4] with the top 2 bits of s[j - 4], s[j] above them. Groups 2k and 2k + 1 read
   the low and high nibbles of the same 32 bytes. */
static void q4_k_block(const unsigned char *b, float *y) {
    float d = half_at(b), dmin = half_at(b + 2);
    const unsigned char *s = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j++) {
        int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        const unsigned char *g = q + 32 * (j / 2);
        for (int l = 0; l < 32; l++)
            y[32 * j + l] = d * (float)sc * (float)(j % 2 ? g[l] >> 4 : g[l] & 15) -
                            dmin * (float)m;
    }
}

/* Q6_K: 128 bytes of the low 4 bits (ql), 64 of the high 2 (qh), int8 scales[16] (one per 16),
   half d; x = d sc (q - 32). Each half of 128 numbers reads 64 bytes of ql and 32 of qh: number
   32 k + l (k 0..3, l < 32) is ql[l + 32 (k % 2)]'s nibble k / 2 with qh[l]'s bits 2k, 2k + 1. */
static void q6_k_block(const unsigned char *b, float *y) {
    float d = half_at(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int half = 0; half < 2; half++) {
        const unsigned char *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                int lo = k / 2 ? ql[l + 32 * (k % 2)] >> 4 : ql[l + 32 * (k % 2)] & 15;
                int q = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                y[128 * half + 32 * k + l] = d * (float)sc[8 * half + 2 * k + l / 16] * (float)q;
            }
    }
}

static const qtype QTYPES[] = {
    {MT_GGML_F32, 1, 4, f32_block},       {MT_GGML_F16, 1, 2, f16_block},
    {MT_GGML_BF16, 1, 2, bf16_block},     {MT_GGML_Q8_0, 32, 34, q8_0_block},
    {MT_GGML_Q4_0, 32, 18, q4_0_block},   {MT_GGML_Q4_K, 256, 144, q4_k_block},
    {MT_GGML_Q6_K, 256, 210, q6_k_block},
};

static const qtype *qtype_of(uint32_t type) {
    for (size_t i = 0; i < sizeof QTYPES / sizeof *QTYPES; i++)
        if (QTYPES[i].type == type) return &QTYPES[i];
    return NULL;
}

/* ---- the file -------------------------------------------------------------------------------- */

typedef struct {
    text name;
    uint32_t ndim, type;
    uint64_t ne[MT_MAX_DIMS]; /* innermost first */
    uint64_t offset, bytes, n;
} tinfo;

typedef struct {
    const unsigned char *map;
    size_t size;
    uint32_t version;
    uint64_t n_tensors, n_kv, alignment, data; /* data: the data section's offset */
    value kv[N_KEYS];
    tinfo *t; /* (n_tensors) */
    mt_import_arch a;
} gguf;

static mt_status bad(mt_err *err, const char *path, const char *what) {
    return mt_errorf(err, MT_EFORMAT, "%s: a GGUF file %s", path, what);
}

/* The key-values: the keys read (KEYS) kept as values, the others skipped. */
static mt_status read_kvs(const char *path, cursor *c, gguf *g, mt_err *err) {
    for (int k = 0; k < N_KEYS; k++) g->kv[k].type = MT_GGUF_N_TYPES;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        text key;
        uint32_t type;
        if (!take_text(c, &key) || !take_u32(c, &type))
            return mt_errorf(err, MT_EFORMAT, "%s: a GGUF file truncated in key-value %llu of %llu",
                             path, (unsigned long long)i, (unsigned long long)g->n_kv);
        const unsigned char *at = c->p;
        if (!skip_value(c, type, 0))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: a GGUF file whose key-value '%.*s' is %s (type %u; types 0..%d "
                             "are GGUF's)",
                             path, (int)(key.n < 80 ? key.n : 80), key.s,
                             type < MT_GGUF_N_TYPES ? "truncated" : "of no GGUF type", type,
                             MT_GGUF_N_TYPES - 1);
        for (int k = 0; k < N_KEYS; k++)
            if (is(key, KEYS[k])) g->kv[k] = (value){type, at};
    }
    return MT_OK;
}

static mt_status read_infos(const char *path, cursor *c, gguf *g, mt_err *err) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tinfo *t = &g->t[i];
        bool ok = take_text(c, &t->name) && take_u32(c, &t->ndim);
        if (ok && (t->ndim < 1 || t->ndim > MT_MAX_DIMS))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: tensor '%.*s' of the GGUF file has %u dims: 1..%d are read", path,
                             (int)(t->name.n < 80 ? t->name.n : 80), t->name.s, t->ndim,
                             MT_MAX_DIMS);
        for (uint32_t d = 0; ok && d < t->ndim; d++) ok = take_u64(c, &t->ne[d]);
        if (!ok || !take_u32(c, &t->type) || !take_u64(c, &t->offset))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: a GGUF file truncated in tensor info %llu of %llu", path,
                             (unsigned long long)i, (unsigned long long)g->n_tensors);
    }
    return MT_OK;
}

/* The header: magic, version, counts, key-values and tensor infos; the data's offset. */
static mt_status read_header(const char *path, gguf *g, mt_err *err) {
    cursor c = {g->map, g->map + g->size};
    char magic[4] = {0};
    if (!take(&c, magic, 4) || memcmp(magic, MT_GGUF_MAGIC, 4) != 0)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: not a GGUF file: it starts with %02x %02x %02x %02x, not \"GGUF\"",
                         path, (unsigned char)magic[0], (unsigned char)magic[1],
                         (unsigned char)magic[2], (unsigned char)magic[3]);
    if (!take_u32(&c, &g->version) || !take_u64(&c, &g->n_tensors) || !take_u64(&c, &g->n_kv))
        return mt_errorf(err, MT_EFORMAT, "%s: truncated: %zu bytes, less than a GGUF header (24)",
                         path, g->size);
    if (g->version != 2 && g->version != 3)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a GGUF file of version %u: versions 2 and 3 are read", path,
                         g->version);
    /* each key-value takes 12 bytes at least, each tensor info 28; tensors are counted in ints */
    if (g->n_kv > g->size / 12 || g->n_tensors > g->size / 28 || g->n_tensors > INT32_MAX)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a GGUF file of %llu tensors and %llu key-values in %zu bytes "
                         "(truncated?)",
                         path, (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv,
                         g->size);
    mt_status s = read_kvs(path, &c, g, err);
    if (s != MT_OK) return s;
    if (!(g->t = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->t)))
        return mt_errorf(err, MT_ENOMEM, "%s: out of memory for %llu tensors", path,
                         (unsigned long long)g->n_tensors);
    if ((s = read_infos(path, &c, g, err)) != MT_OK) return s;
    double align = MT_GGUF_ALIGN;
    if (g->kv[ALIGNMENT].type != MT_GGUF_N_TYPES &&
        (g->kv[ALIGNMENT].type != MT_GGUF_U32 || !number(g->kv[ALIGNMENT], &align) || align < 1 ||
         ((uint32_t)align & ((uint32_t)align - 1))))
        return bad(err, path, "whose general.alignment is not a power of two (u32)");
    g->alignment = (uint64_t)align;
    uint64_t at = (uint64_t)(c.p - g->map);
    g->data = (at + g->alignment - 1) / g->alignment * g->alignment;
    return MT_OK;
}

/* ---- the architecture ------------------------------------------------------------------------ */

/* Key k as an integer in 1..DIM_MAX into *v (absent: def, or an error when def < 0). */
static mt_status dim(const char *path, const gguf *g, int k, int def, int *v, mt_err *err) {
    double x;
    if (g->kv[k].type == MT_GGUF_N_TYPES && def >= 0) {
        *v = def;
        return MT_OK;
    }
    if (!number(g->kv[k], &x) || x != floor(x) || x < 1 || x > DIM_MAX) {
        char v[32] = "absent";
        if (number(g->kv[k], &x)) snprintf(v, sizeof v, "%g", x);
        else if (g->kv[k].type != MT_GGUF_N_TYPES) snprintf(v, sizeof v, "not a number");
        return mt_errorf(err, MT_EFORMAT, "%s: a GGUF llama whose %s is %s: expected 1..%d", path,
                         KEYS[k], v, DIM_MAX);
    }
    *v = (int)x;
    return MT_OK;
}

static const tinfo *find(const gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (is(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

/* general.architecture is "llama", and what a dense Llama of mt's would refuse is absent. */
static mt_status check_llama(const char *path, const gguf *g, mt_err *err) {
    text arch = {"", 0};
    if (!string(g->kv[ARCH], &arch))
        return bad(err, path, "without general.architecture (a string): expected \"llama\"");
    if (!is(arch, "llama"))
        return mt_errorf(err, MT_EINVAL,
                         "%s: a GGUF file of architecture '%.*s': mt reads the \"llama\" "
                         "architecture only",
                         path, (int)(arch.n < 64 ? arch.n : 64), arch.s);
    double experts = 0;
    if (number(g->kv[EXPERTS], &experts) && experts > 0)
        return mt_errorf(err, MT_EINVAL,
                         "%s: a GGUF llama with %g experts (llama.expert_count, a mixture of "
                         "experts): mt reads dense Llamas only",
                         path, experts);
    text scaling;
    if (string(g->kv[ROPE_SCALING], &scaling) && !is(scaling, "none") && scaling.n)
        return mt_errorf(err, MT_EINVAL,
                         "%s: a GGUF llama with RoPE scaling '%.*s' (llama.rope.scaling.type): "
                         "mt's RoPE has no scaling (expected none)",
                         path, (int)(scaling.n < 32 ? scaling.n : 32), scaling.s);
    if (find(g, "rope_freqs.weight"))
        return mt_errorf(err, MT_EINVAL,
                         "%s: a GGUF llama with rope_freqs.weight (Llama 3.1's RoPE frequency "
                         "factors): mt's RoPE has none",
                         path);
    return MT_OK;
}

/* The hyperparameters into g->a, checked as llama2c.c checks its header. */
static mt_status read_arch(const char *path, gguf *g, mt_err *err) {
    mt_import_arch *a = &g->a;
    *a = (mt_import_arch){.format = MT_IMPORT_GGUF};
    mt_status s = check_llama(path, g, err);
    if (s == MT_OK) s = dim(path, g, BLOCKS, -1, &a->n_layer, err);
    if (s == MT_OK) s = dim(path, g, EMBD, -1, &a->n_embd, err);
    if (s == MT_OK) s = dim(path, g, FF, -1, &a->n_ff, err);
    if (s == MT_OK) s = dim(path, g, HEADS, -1, &a->n_head, err);
    if (s == MT_OK) s = dim(path, g, KV_HEADS, a->n_head, &a->n_kv_head, err);
    if (s == MT_OK) s = dim(path, g, CTX, -1, &a->n_ctx, err);
    if (s != MT_OK) return s;
    if (a->n_embd % a->n_head || a->n_head % a->n_kv_head || (a->n_embd / a->n_head) % 2)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a GGUF llama of embedding_length %d, head_count %d, "
                         "head_count_kv %d: expected heads dividing the embedding into an even "
                         "head size, key/value heads dividing the heads",
                         path, a->n_embd, a->n_head, a->n_kv_head);
    int HS = a->n_embd / a->n_head, rot, kl, vl;
    if ((s = dim(path, g, ROPE_DIM, HS, &rot, err)) != MT_OK ||
        (s = dim(path, g, KEY_LENGTH, HS, &kl, err)) != MT_OK ||
        (s = dim(path, g, VALUE_LENGTH, HS, &vl, err)) != MT_OK)
        return s;
    if (rot != HS || kl != HS || vl != HS)
        return mt_errorf(err, MT_EINVAL,
                         "%s: a GGUF llama of head size %d rotating %d channels of a head "
                         "(llama.rope.dimension_count) with keys of %d and values of %d: mt's "
                         "heads are embedding_length / head_count, all rotated",
                         path, HS, rot, kl, vl);
    double eps, theta = 10000; /* llama.cpp's default base */
    if (!number(g->kv[EPS], &eps) || !(eps > 0 && eps < 1))
        return mt_errorf(err, MT_EFORMAT, "%s: a GGUF llama whose %s is %s: expected 0 < eps < 1",
                         path, KEYS[EPS], g->kv[EPS].type == MT_GGUF_N_TYPES ? "absent" : "bad");
    if (g->kv[THETA].type != MT_GGUF_N_TYPES && (!number(g->kv[THETA], &theta) || !(theta > 0)))
        return bad(err, path, "whose llama.rope.freq_base is not a positive number");
    a->norm_eps = (float)eps, a->rope_theta = (float)theta;
    const tinfo *emb = find(g, "token_embd.weight");
    if (!emb || emb->ndim != 2 || emb->ne[0] != (uint64_t)a->n_embd || emb->ne[1] < 1 ||
        emb->ne[1] > DIM_MAX)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a GGUF llama without token_embd.weight of (embedding_length %d, "
                         "vocabulary 1..%d)",
                         path, a->n_embd, DIM_MAX);
    a->n_vocab = (int)emb->ne[1];
    a->tied = !find(g, "output.weight");
    uint64_t n_tokens;
    const unsigned char *first;
    int V;
    if ((s = dim(path, g, VOCAB_SIZE, a->n_vocab, &V, err)) != MT_OK) return s;
    bool listed = array(g->kv[TOKENS], MT_GGUF_STRING, &n_tokens, &first);
    if (V != a->n_vocab || (listed && n_tokens != (uint64_t)V))
        return mt_errorf(err, MT_EFORMAT,
                         "%s: a GGUF llama whose token_embd.weight has %d rows, llama.vocab_size "
                         "%d and tokenizer.ggml.tokens %llu: expected one vocabulary size",
                         path, a->n_vocab, V, listed ? (unsigned long long)n_tokens : 0ull);
    return MT_OK;
}

/* No two tensors of one name (the names' lengths are checked): each copied NUL-terminated into a
   table of (n_tensors) names and hashed. */
static mt_status check_names(const char *path, const gguf *g, mt_err *err) {
    typedef char name[sizeof((mt_st_entry *)0)->name];
    name *names = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *names);
    mt_name_index index = {0};
    mt_status s = names ? MT_OK : MT_ENOMEM;
    for (uint64_t i = 0; s == MT_OK && i < g->n_tensors; i++) {
        snprintf(names[i], sizeof *names, "%.*s", (int)g->t[i].name.n, g->t[i].name.s);
        int at = mt_name_index_add(&index, names, sizeof *names, (int)i);
        if (at < 0) s = MT_ENOMEM;
        else if (at != (int)i)
            s = mt_errorf(err, MT_EFORMAT, "%s: the GGUF file holds two tensors named '%s'", path,
                          names[i]);
    }
    if (s == MT_ENOMEM)
        mt_errorf(err, s, "%s: out of memory for %llu tensor names", path,
                  (unsigned long long)g->n_tensors);
    mt_name_index_free(&index);
    free(names);
    return s;
}

/* Every tensor of a type read, whole blocks of its rows, inside the file, of a name of its own. */
static mt_status check_tensors(const char *path, gguf *g, mt_err *err) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tinfo *t = &g->t[i];
        int nl = (int)(t->name.n < 80 ? t->name.n : 80);
        const qtype *q = qtype_of(t->type);
        if (!q) {
            const char *name = mt_ggml_type_name(t->type);
            return mt_errorf(err, MT_EINVAL,
                             "%s: tensor '%.*s' is of type %s (ggml type %u): mt reads f32, f16, "
                             "bf16, q8_0, q4_0, q4_K and q6_K",
                             path, nl, t->name.s, name ? name : "unknown", t->type);
        }
        /* no tensor holds more numbers than 2 a byte (q4_K's 256 in 144): a bound on n */
        uint64_t cap = 4 * (uint64_t)g->size + 4;
        bool ok = t->name.n < sizeof((mt_st_entry *)0)->name && t->offset % g->alignment == 0;
        t->n = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            ok = ok && t->ne[d] >= 1 && t->ne[d] <= INT32_MAX && t->ne[d] <= cap / t->n;
            if (ok) t->n *= t->ne[d];
        }
        if (!ok || t->ne[0] % (uint64_t)q->block)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: tensor '%.*s' of the GGUF file: its name of %llu bytes (up to "
                             "%zu), dims, offset %llu (a multiple of %llu) or rows of %llu (whole "
                             "blocks of %d) are out of bounds",
                             path, nl, t->name.s, (unsigned long long)t->name.n,
                             sizeof((mt_st_entry *)0)->name - 1, (unsigned long long)t->offset,
                             (unsigned long long)g->alignment, (unsigned long long)t->ne[0],
                             q->block);
        t->bytes = t->n / (uint64_t)q->block * (uint64_t)q->bytes;
        if (g->data > g->size || t->offset > g->size - g->data ||
            t->bytes > g->size - g->data - t->offset)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: tensor '%.*s' of the GGUF file (%llu bytes at offset %llu of "
                             "the data, which starts at byte %llu) ends past the file's %zu "
                             "bytes (truncated?)",
                             path, nl, t->name.s, (unsigned long long)t->bytes,
                             (unsigned long long)t->offset, (unsigned long long)g->data, g->size);
    }
    return check_names(path, g, err);
}

/* ---- opening --------------------------------------------------------------------------------- */

static void close_gguf(gguf *g) {
    if (g->map && g->size) munmap((void *)g->map, g->size);
    free(g->t);
    *g = (gguf){0};
}

/* The file mapped and its header, architecture and tensor infos checked. */
static mt_status open_gguf(const char *path, gguf *g, mt_err *err) {
    *g = (gguf){0};
    int fd;
    struct stat sb;
    mt_status s = mt_fd_open("the GGUF file", path, O_RDONLY, &fd, err);
    if (s != MT_OK) return s;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return mt_errorf(err, MT_EIO, "%s: %s", path, strerror(errno));
    }
    g->size = (size_t)sb.st_size;
    static const unsigned char empty[1];
    g->map = g->size ? mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0) : empty;
    close(fd);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        return mt_errorf(err, MT_EIO, "%s: cannot map: %s", path, strerror(errno));
    }
    if ((s = read_header(path, g, err)) == MT_OK && (s = read_arch(path, g, err)) == MT_OK)
        s = check_tensors(path, g, err);
    if (s != MT_OK) close_gguf(g);
    return s;
}

bool mt_gguf_is(const char *path) {
    size_t n = strlen(path);
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    bool ok = f && fread(magic, 4, 1, f) == 1 && memcmp(magic, MT_GGUF_MAGIC, 4) == 0;
    if (f) fclose(f);
    return ok || (n > 5 && strcmp(path + n - 5, ".gguf") == 0);
}

mt_status mt_gguf_arch(const char *path, mt_import_arch *arch, mt_err *err) {
    gguf g;
    mt_status s = open_gguf(path, &g, err);
    if (s != MT_OK) return s;
    *arch = g.a;
    close_gguf(&g);
    return MT_OK;
}

/* Tensor t dequantized into x. */
static void dequantize(const gguf *g, const tinfo *t, float *x) {
    const qtype *q = qtype_of(t->type);
    const unsigned char *b = g->map + g->data + t->offset;
    for (uint64_t i = 0; i < t->n / (uint64_t)q->block; i++)
        q->dequantize(b + i * (uint64_t)q->bytes, x + i * (uint64_t)q->block);
}

mt_status mt_gguf_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err) {
    memset(st, 0, sizeof *st);
    gguf g;
    mt_status s = open_gguf(path, &g, err);
    if (s != MT_OK) return s;
    uint64_t floats = 0;
    for (uint64_t i = 0; i < g.n_tensors; i++) floats += g.t[i].n;
    st->blob = malloc((size_t)(floats ? floats : 1) * sizeof(float));
    st->t = calloc(g.n_tensors ? g.n_tensors : 1, sizeof *st->t);
    if (!st->blob || !st->t)
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %llu numbers", path,
                      (unsigned long long)floats);
    float *x = st->blob;
    for (uint64_t i = 0; s == MT_OK && i < g.n_tensors; i++) {
        const tinfo *t = &g.t[i];
        char name[sizeof st->t->name];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        int shape[4];
        for (uint32_t d = 0; d < t->ndim; d++) /* torch's order: outermost first */
            shape[d] = (int)t->ne[t->ndim - 1 - d];
        dequantize(&g, t, x);
        int at = mt_st_add(st, name, (int)t->ndim, shape, x);
        x += t->n;
        if (at < 0) s = mt_errorf(err, MT_ENOMEM, "%s: out of memory indexing the tensors", path);
    }
    if (s == MT_OK) *arch = g.a;
    else mt_st_free(st);
    close_gguf(&g);
    return s;
}

/* ---- the vocabulary -------------------------------------------------------------------------- */

/* The n strings of an array from first (checked by skip_value) as NUL-terminated copies. */
static char **strings(const unsigned char *first, uint64_t n, const unsigned char *end) {
    char **s = calloc(n ? n : 1, sizeof *s);
    cursor c = {first, end};
    for (uint64_t i = 0; s && i < n; i++) {
        text t;
        if (!take_text(&c, &t) || !(s[i] = malloc(t.n + 1))) {
            while (i) free(s[--i]);
            free(s);
            return NULL;
        }
        memcpy(s[i], t.s, t.n);
        s[i][t.n] = 0;
    }
    return s;
}

static int token_id(value v, int n) {
    double x;
    return number(v, &x) && x >= 0 && x < n && x == floor(x) ? (int)x : -1;
}

mt_status mt_gguf_vocab_read(const char *path, mt_gguf_vocab *v, mt_err *err) {
    *v = (mt_gguf_vocab){.bos = -1, .eos = -1};
    gguf g;
    mt_status s = open_gguf(path, &g, err);
    if (s != MT_OK) return s;
    text model = {"", 0};
    uint64_t n = 0, m = 0, k;
    const unsigned char *tokens = NULL, *merges = NULL, *scores = NULL, *types = NULL;
    if (!string(g.kv[TOK_MODEL], &model) || !array(g.kv[TOKENS], MT_GGUF_STRING, &n, &tokens))
        s = bad(err, path, "without tokenizer.ggml.model and tokenizer.ggml.tokens");
    snprintf(v->model, sizeof v->model, "%.*s", (int)(model.n < 31 ? model.n : 31), model.s);
    v->n = (int)n;
    if (s == MT_OK && !(v->tokens = strings(tokens, n, g.map + g.size))) s = MT_ENOMEM;
    if (s == MT_OK && array(g.kv[MERGES], MT_GGUF_STRING, &m, &merges) &&
        !(v->merges = strings(merges, m, g.map + g.size)))
        s = MT_ENOMEM;
    v->n_merges = v->merges ? (int)m : 0;
    if (s == MT_OK && array(g.kv[SCORES], MT_GGUF_F32, &k, &scores) && k == n &&
        (v->scores = malloc(n * 4 + 1)))
        memcpy(v->scores, scores, n * 4);
    if (s == MT_OK && array(g.kv[TOKEN_TYPES], MT_GGUF_I32, &k, &types) && k == n &&
        (v->types = malloc(n * 4 + 1)))
        memcpy(v->types, types, n * 4);
    v->bos = token_id(g.kv[BOS], v->n), v->eos = token_id(g.kv[EOS], v->n);
    close_gguf(&g);
    if (s == MT_ENOMEM) mt_errorf(err, s, "%s: out of memory for the vocabulary", path);
    if (s != MT_OK) mt_gguf_vocab_free(v);
    return s;
}

void mt_gguf_vocab_free(mt_gguf_vocab *v) {
    for (int i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    for (int i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens), free(v->merges), free(v->scores), free(v->types);
    *v = (mt_gguf_vocab){.bos = -1, .eos = -1};
}
