/* An importer (ckpt.h): a Hugging Face checkpoint, a directory of config.json and
   model.safetensors, or model.safetensors.index.json and the shards its weight_map names
   (save_pretrained's), of a LlamaForCausalLM or a GPT2LMHeadModel, as named
   float tensors and its shape. The names and layouts are transformers' modeling_llama.py and
   modeling_gpt2.py (docs/export.md). The tensors are given the names of the importer of the same
   model already read: a Llama's GGUF's (blk.{i}.attn_q.weight, ...; MT_IMPORT_GGUF), a GPT-2's
   llm.c's (train_gpt2.py's are HF's, c_attn split into its thirds; MT_IMPORT_LLMC), converted
   to their layouts:
   - HF's Llama rotates the halves (x[i], x[i + HS/2]) of each head, mt (as GGUF) the adjacent
     pairs (x[2i], x[2i+1]): q_proj's and k_proj's rows j < HS/2 of a head become its rows 2j,
     the rows HS/2 + j its rows 2j + 1 (the inverse of convert_llama_weights_to_hf.py's permute);
   - GPT-2's Conv1D stores its weight (in, out): transposed to nn.Linear's (out, in).
   mt_hf_write walks the same tables the other way: a model's tensors under the same importer's
   names, each conversion inverted (q_proj's and k_proj's rows 2j back to j, 2j + 1 to HS/2 + j;
   (out, in) transposed to Conv1D's (in, out); q, k and v concatenated into c_attn).
   C hidden size, F the MLP's, NH heads, NKV key-value heads, HS head size, V vocabulary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../io/gguf.h"
#include "../tensor/gemm.h"
#include "ckpt.h"

#define DIM_MAX (1 << 20) /* a bound on each size, so that every product fits 64 bits */

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The checkpoint's directory of path (the directory, or a file's) into buf. */
static void dir_of(const char *path, char *buf, size_t len) {
    const char *slash = strrchr(path, '/');
    if (is_dir(path)) snprintf(buf, len, "%s", path);
    else if (slash) snprintf(buf, len, "%.*s", (int)(slash - path), path);
    else snprintf(buf, len, ".");
}

bool mt_hf_is(const char *path) {
    char dir[4096], cfg[4200];
    size_t n = strlen(path);
    if (is_dir(path)) return true;
    if (n < 12 || strcmp(path + n - 12, ".safetensors") != 0) return false;
    dir_of(path, dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat sb;
    return stat(cfg, &sb) == 0;
}

bool mt_hf_tokenizer_json(const char *path, char *buf, size_t len) {
    char dir[4096], cfg[4200];
    struct stat sb;
    if (!mt_hf_is(path)) return false;
    dir_of(path, dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(buf, len, "%s/tokenizer.json", dir);
    return stat(cfg, &sb) == 0 && stat(buf, &sb) == 0;
}

/* ---- config.json ---------------------------------------------------------------------------- */
typedef struct {
    char dir[4096], st_path[4400], cfg_path[4200]; /* st_path: the index when sharded */
    mt_import_arch a;
    bool llama, sharded; /* sharded: model.safetensors.index.json's weight_map names the files */
    const char *prefix;  /* GPT-2's names: "transformer." (GPT2LMHeadModel's) or "" (GPT2Model's) */
} hf_model;

static const cJSON *key(const cJSON *c, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(c, k);
}

/* An integer key in 1..DIM_MAX into *v; def when absent and def > 0. */
static mt_status int_key(const hf_model *h, const cJSON *c, const char *k, int def, int *v,
                         mt_err *err) {
    const cJSON *x = key(c, k);
    if (!x && def > 0) return *v = def, MT_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > DIM_MAX ||
        x->valuedouble != (double)(int)x->valuedouble)
        return mt_errorf(err, MT_EFORMAT, "%s: %s %s: expected a whole number in 1..%d",
                         h->cfg_path, k, x ? "is not one" : "is missing", DIM_MAX);
    *v = (int)x->valuedouble;
    return MT_OK;
}

static mt_status float_key(const hf_model *h, const cJSON *c, const char *k, double def, float *v,
                           mt_err *err) {
    const cJSON *x = key(c, k);
    if (!x) return *v = (float)def, MT_OK;
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0))
        return mt_errorf(err, MT_EFORMAT, "%s: %s: expected a number above 0", h->cfg_path, k);
    *v = (float)x->valuedouble;
    return MT_OK;
}

/* A key mt's model has no counterpart of must be absent, null, false or the value it reads. */
static mt_status refuse(const hf_model *h, const cJSON *c, const char *k, const char *ok,
                        mt_err *err) {
    const cJSON *x = key(c, k);
    if (!x || cJSON_IsNull(x) || cJSON_IsFalse(x) ||
        (ok && cJSON_IsString(x) && strcmp(x->valuestring, ok) == 0))
        return MT_OK;
    char *v = cJSON_PrintUnformatted(x);
    mt_status s = mt_errorf(err, MT_EINVAL, "%s: %s is %s: mt's model reads %s", h->cfg_path, k,
                            v ? v : "set", ok ? ok : "none (null or false)");
    free(v);
    return s;
}

static mt_status llama_config(hf_model *h, const cJSON *c, mt_err *err) {
    mt_import_arch *a = &h->a;
    *a = (mt_import_arch){.format = MT_IMPORT_GGUF};
    mt_status s = int_key(h, c, "hidden_size", 0, &a->n_embd, err);
    if (s == MT_OK) s = int_key(h, c, "intermediate_size", 0, &a->n_ff, err);
    if (s == MT_OK) s = int_key(h, c, "num_hidden_layers", 0, &a->n_layer, err);
    if (s == MT_OK) s = int_key(h, c, "num_attention_heads", 0, &a->n_head, err);
    if (s == MT_OK) s = int_key(h, c, "num_key_value_heads", a->n_head, &a->n_kv_head, err);
    if (s == MT_OK) s = int_key(h, c, "max_position_embeddings", 0, &a->n_ctx, err);
    if (s == MT_OK) s = int_key(h, c, "vocab_size", 0, &a->n_vocab, err);
    if (s == MT_OK) s = float_key(h, c, "rms_norm_eps", 1e-6, &a->norm_eps, err);
    if (s == MT_OK) s = float_key(h, c, "rope_theta", 10000, &a->rope_theta, err);
    if (s == MT_OK) s = refuse(h, c, "rope_scaling", NULL, err);
    if (s == MT_OK) s = refuse(h, c, "attention_bias", NULL, err);
    if (s == MT_OK) s = refuse(h, c, "mlp_bias", NULL, err);
    if (s == MT_OK) s = refuse(h, c, "hidden_act", "silu", err);
    if (s != MT_OK) return s;
    int hd = a->n_embd / a->n_head;
    if (a->n_embd % a->n_head || hd % 2 || a->n_head % a->n_kv_head ||
        (key(c, "head_dim") && !cJSON_IsNull(key(c, "head_dim")) &&
         (int_key(h, c, "head_dim", 0, &hd, err) != MT_OK || hd != a->n_embd / a->n_head)))
        return mt_errorf(err, MT_EINVAL,
                         "%s: hidden_size %d, num_attention_heads %d, num_key_value_heads %d: "
                         "expected heads dividing hidden_size into an even head_dim "
                         "(head_dim, when given, hidden_size / num_attention_heads) and "
                         "num_key_value_heads dividing num_attention_heads",
                         h->cfg_path, a->n_embd, a->n_head, a->n_kv_head);
    const cJSON *tie = key(c, "tie_word_embeddings");
    a->tied = cJSON_IsTrue(tie); /* LlamaConfig's default is false */
    return MT_OK;
}

static mt_status gpt2_config(hf_model *h, const cJSON *c, mt_err *err) {
    mt_import_arch *a = &h->a;
    *a = (mt_import_arch){.format = MT_IMPORT_LLMC, .tied = true};
    mt_status s = int_key(h, c, "n_embd", 0, &a->n_embd, err);
    if (s == MT_OK) s = int_key(h, c, "n_layer", 0, &a->n_layer, err);
    if (s == MT_OK) s = int_key(h, c, "n_head", 0, &a->n_head, err);
    if (s == MT_OK) s = int_key(h, c, "n_positions", 0, &a->n_ctx, err);
    if (s == MT_OK) s = int_key(h, c, "vocab_size", 0, &a->n_vocab, err);
    if (s == MT_OK && key(c, "n_inner") && !cJSON_IsNull(key(c, "n_inner")))
        s = int_key(h, c, "n_inner", 0, &a->n_ff, err);
    if (s == MT_OK) s = float_key(h, c, "layer_norm_epsilon", 1e-5, &a->norm_eps, err);
    if (s == MT_OK) s = refuse(h, c, "activation_function", "gelu_new", err);
    if (s == MT_OK) s = refuse(h, c, "scale_attn_by_inverse_layer_idx", NULL, err);
    if (s == MT_OK) s = refuse(h, c, "reorder_and_upcast_attn", NULL, err);
    if (s == MT_OK) s = refuse(h, c, "add_cross_attention", NULL, err);
    const cJSON *scale = key(c, "scale_attn_weights"); /* scores by 1/sqrt(HS): mt's */
    if (s == MT_OK && scale && !cJSON_IsTrue(scale))
        s = mt_errorf(err, MT_EINVAL, "%s: scale_attn_weights is not true: mt's model reads true",
                      h->cfg_path);
    if (s != MT_OK) return s;
    if (!a->n_ff) a->n_ff = 4 * a->n_embd;
    if (a->n_ff != 4 * a->n_embd || a->n_embd % a->n_head)
        return mt_errorf(err, MT_EINVAL,
                         "%s: n_embd %d, n_head %d, n_inner %d: expected n_head dividing n_embd "
                         "and n_inner null or 4 n_embd (mt's GPT-2 MLP)",
                         h->cfg_path, a->n_embd, a->n_head, a->n_ff);
    a->n_kv_head = a->n_head;
    return MT_OK;
}

static mt_status read_config(const char *path, hf_model *h, mt_err *err) {
    *h = (hf_model){.prefix = "transformer."};
    dir_of(path, h->dir, sizeof h->dir);
    snprintf(h->cfg_path, sizeof h->cfg_path, "%s/config.json", h->dir);
    if (is_dir(path)) snprintf(h->st_path, sizeof h->st_path, "%s/model.safetensors", h->dir);
    else snprintf(h->st_path, sizeof h->st_path, "%s", path);
    struct stat sb;
    if (stat(h->cfg_path, &sb) != 0)
        return mt_errorf(err, MT_EINVAL,
                         "%s: a Hugging Face checkpoint needs %s (its config.json): %s", path,
                         h->cfg_path, strerror(errno));
    char index[4300];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", h->dir);
    if (is_dir(path) && stat(h->st_path, &sb) != 0 && stat(index, &sb) == 0)
        h->sharded = true, snprintf(h->st_path, sizeof h->st_path, "%s", index);
    else if (stat(h->st_path, &sb) != 0)
        return mt_errorf(err, MT_EINVAL,
                         "%s: a Hugging Face checkpoint needs %s (or a sharded one's "
                         "model.safetensors.index.json): %s",
                         path, h->st_path, strerror(errno));
    char *text;
    size_t len;
    mt_status s = mt_file_read("--init-from", h->cfg_path, &text, &len, err);
    if (s != MT_OK) return s;
    cJSON *c = cJSON_Parse(text);
    free(text);
    const cJSON *arch = c ? key(c, "architectures") : NULL;
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    const char *name = cJSON_IsString(a0) ? a0->valuestring : "";
    if (!cJSON_IsObject(c)) s = mt_errorf(err, MT_EFORMAT, "%s: not a JSON object", h->cfg_path);
    else if (strcmp(name, "LlamaForCausalLM") == 0) s = llama_config(h, c, err), h->llama = true;
    else if (strcmp(name, "GPT2LMHeadModel") == 0) s = gpt2_config(h, c, err);
    else
        s = mt_errorf(err, MT_EINVAL,
                      "%s: architectures[0] is '%s': mt reads LlamaForCausalLM and "
                      "GPT2LMHeadModel",
                      h->cfg_path, a0 ? name : "(absent)");
    cJSON_Delete(c);
    return s;
}

mt_status mt_hf_arch(const char *path, mt_import_arch *arch, mt_err *err) {
    hf_model h;
    mt_status s = read_config(path, &h, err);
    if (s == MT_OK) *arch = h.a;
    return s;
}

/* ---- model.safetensors ---------------------------------------------------------------------- */
#define SHARDS_MAX 256
typedef struct {
    char path[8704];
    char *buf; /* the whole file */
    size_t size;
    cJSON *header;
    const unsigned char *data; /* the data section */
    size_t data_len;
} shard;

typedef struct {
    const hf_model *h;
    shard *sh; /* (n_sh) */
    int n_sh;
    cJSON *index; /* sharded: the index file, its weight_map naming each tensor's shard */
    mt_safetensors *st;
    float *at;       /* the next free float of st->blob; NULL: counting into n */
    int64_t n, most; /* floats in all, in the largest tensor */
    float *tmp;      /* (most) a tensor as the file holds it, before its conversion */
    int n_tensors;
    /* mt_hf_write: the model's tensors under the importer's names (src), read by the same walk
       into items (HF's tensors, named in names), used marking the tensors of src written */
    const mt_safetensors *src;
    mt_st_item *items;
    char (*names)[160];
    int (*shapes)[2];
    bool *used;
    int n_items;
} reader;

typedef enum { COPY, TRANSPOSE, ROPE } conversion;

/* The shard that holds the file's tensor name (NULL: none). */
static const shard *shard_of(const reader *r, const char *name) {
    if (!r->index) return key(r->sh[0].header, name) ? &r->sh[0] : NULL;
    const cJSON *f = key(key(r->index, "weight_map"), name);
    for (int i = 0; cJSON_IsString(f) && i < r->n_sh; i++)
        if (strcmp(r->sh[i].path + strlen(r->h->dir) + 1, f->valuestring) == 0) return &r->sh[i];
    return NULL;
}

/* The file's tensor name (rows 0: a vector of cols) as float32 into x, checked. */
static mt_status read_tensor(reader *r, const char *name, int64_t rows, int64_t cols, float *x,
                             mt_err *err) {
    const shard *f = shard_of(r, name);
    const char *p = f ? f->path : r->h->st_path;
    const cJSON *e = f ? key(f->header, name) : NULL;
    if (!e)
        return mt_errorf(err, MT_EFORMAT, "%s: tensor %s is missing (expected by %s)", p, name,
                         f && r->index ? r->h->st_path : r->h->cfg_path);
    const cJSON *dt = key(e, "dtype"), *sh = key(e, "shape"), *off = key(e, "data_offsets");
    const char *d = cJSON_IsString(dt) ? dt->valuestring : "";
    int elem = !strcmp(d, "F32") ? 4 : !strcmp(d, "F16") || !strcmp(d, "BF16") ? 2 : 0;
    if (!elem)
        return mt_errorf(err, MT_EFORMAT, "%s: tensor %s has dtype %s: F32, F16 and BF16 are read",
                         p, name, *d ? d : "(absent)");
    int nd = rows ? 2 : 1;
    bool ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == nd;
    for (int i = 0; ok && i < nd; i++) {
        const cJSON *v = cJSON_GetArrayItem(sh, i);
        ok = cJSON_IsNumber(v) && v->valuedouble == (double)(nd == 2 && !i ? rows : cols);
    }
    char *got = sh ? cJSON_PrintUnformatted(sh) : NULL;
    mt_status s = MT_OK;
    if (!ok && rows)
        s = mt_errorf(err, MT_EFORMAT, "%s: tensor %s has shape %s, expected [%lld, %lld]", p, name,
                      got ? got : "(absent)", (long long)rows, (long long)cols);
    else if (!ok)
        s = mt_errorf(err, MT_EFORMAT, "%s: tensor %s has shape %s, expected [%lld]", p, name,
                      got ? got : "(absent)", (long long)cols);
    free(got);
    if (s != MT_OK) return s;
    size_t n = (size_t)(rows ? rows : 1) * (size_t)cols;
    const cJSON *b = cJSON_GetArrayItem(off, 0), *en = cJSON_GetArrayItem(off, 1);
    if (!cJSON_IsArray(off) || !cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 ||
        en->valuedouble > (double)f->data_len ||
        en->valuedouble - b->valuedouble != (double)(n * (size_t)elem))
        return mt_errorf(err, MT_EFORMAT,
                         "%s: tensor %s's data_offsets are not its %zu bytes inside the %zu-byte "
                         "data section (truncated?)",
                         p, name, n * (size_t)elem, f->data_len);
    const unsigned char *src = f->data + (size_t)b->valuedouble;
    for (size_t i = 0; i < n; i++) {
        uint16_t u;
        if (elem == 4) memcpy(&x[i], src + 4 * i, 4);
        else memcpy(&u, src + 2 * i, 2);
        if (elem == 2 && d[0] == 'F') x[i] = mt_half_to_float(u);
        else if (elem == 2) x[i] = mt_bf16_to_float((mt_bf16)u);
    }
    return MT_OK;
}

/* Rows (of cols) of y, in head groups of HS rows, from x in HF's halves order (above); back:
   x's rows in HF's order from y's in mt's (the inverse, for mt_hf_write). */
static void rope_rows(float *y, float *x, int64_t rows, int64_t cols, int HS, bool back) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t head = r / HS, j = r % HS;
        int64_t from = head * HS + (j % 2 ? HS / 2 : 0) + j / 2;
        if (back) memcpy(x + from * cols, y + r * cols, (size_t)cols * sizeof *y);
        else memcpy(y + r * cols, x + from * cols, (size_t)cols * sizeof *y);
    }
}

/* mt_hf_write's take: the parts outs of src (each of rows / parts or cols / parts after the
   conversion) gathered into y (mt's layout), converted back into HF's x, added as name. */
static mt_status give(reader *r, const char *name, int64_t rows, int64_t cols, conversion cv,
                      int parts, const char *const *outs, mt_err *err) {
    int64_t n = (rows ? rows : 1) * cols, orow = cv == TRANSPOSE ? cols : rows;
    int64_t ocol = cv == TRANSPOSE ? rows : cols;
    int64_t pr = orow ? orow / parts : 0, pc = orow ? ocol : ocol / parts;
    float *x = r->at, *y = cv == COPY ? x : r->tmp;
    for (int i = 0; i < parts; i++) {
        const mt_st_entry *e = mt_st_find(r->src, outs[i]);
        if (!e || e->n != (size_t)((pr ? pr : 1) * pc))
            return mt_errorf(err, MT_EINVAL, "%s: the model has no tensor %s of %lld numbers",
                             r->h->dir, outs[i], (long long)((pr ? pr : 1) * pc));
        memcpy(y + i * (pr ? pr : 1) * pc, e->data, e->n * sizeof *y);
        r->used[e - r->src->t] = true;
    }
    if (cv == TRANSPOSE)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) x[i * cols + j] = y[j * rows + i];
    else if (cv == ROPE) rope_rows(y, x, rows, cols, r->h->a.n_embd / r->h->a.n_head, true);
    r->at += n;
    int k = r->n_items++;
    snprintf(r->names[k], sizeof r->names[k], "%s", name);
    r->shapes[k][0] = (int)(rows ? rows : cols), r->shapes[k][1] = (int)cols;
    r->items[k] = (mt_st_item){r->names[k], rows ? 2 : 1, r->shapes[k], x};
    return MT_OK;
}

/* The file's tensor name of rows x cols (as the file holds it; rows 0: a vector) converted, its
   rows [part * n_rows / parts, ...) after the conversion added to st as out. */
static mt_status take(reader *r, const char *name, int64_t rows, int64_t cols, conversion cv,
                      int parts, const char *const *outs, mt_err *err) {
    int64_t n = (rows ? rows : 1) * cols;
    if (!r->at) {
        r->n += n, r->n_tensors += parts, r->most = n > r->most ? n : r->most;
        return MT_OK;
    }
    if (r->src) return give(r, name, rows, cols, cv, parts, outs, err);
    float *y = r->at, *x = cv == COPY ? y : r->tmp;
    mt_status s = read_tensor(r, name, rows, cols, x, err);
    if (s != MT_OK) return s;
    int64_t orow = rows, ocol = cols;
    if (cv == TRANSPOSE) {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
        orow = cols, ocol = rows;
    } else if (cv == ROPE) rope_rows(y, x, rows, cols, r->h->a.n_embd / r->h->a.n_head, false);
    r->at += n;
    for (int i = 0; i < parts; i++) {
        int64_t pr = orow ? orow / parts : 0, pc = orow ? ocol : ocol / parts;
        int shape[2] = {(int)(pr ? pr : pc), (int)pc};
        if (mt_st_add(r->st, outs[i], pr ? 2 : 1, shape, y + i * (pr ? pr : 1) * pc) < 0)
            return mt_errorf(err, MT_ENOMEM, "%s: out of memory indexing the tensors",
                             r->h->st_path);
    }
    return MT_OK;
}

/* One tensor of layer (-1: none) under HF's name and the importer's. */
static mt_status one(reader *r, const char *hf, const char *mine, int layer, int64_t rows,
                     int64_t cols, conversion cv, mt_err *err) {
    char a[160], b[160];
    snprintf(a, sizeof a, hf, layer);
    snprintf(b, sizeof b, mine, layer);
    const char *outs[] = {b};
    return take(r, a, rows, cols, cv, 1, outs, err);
}

static mt_status llama_tensors(reader *r, mt_err *err) {
    const mt_import_arch *a = &r->h->a;
    int64_t C = a->n_embd, F = a->n_ff, V = a->n_vocab, KV = C / a->n_head * a->n_kv_head;
    mt_status s = one(r, "model.embed_tokens.weight", "token_embd.weight", -1, V, C, COPY, err);
    for (int l = 0; s == MT_OK && l < a->n_layer; l++) {
        static const struct {
            const char *hf, *mine;
            int rows, cols; /* 1 C, 2 F, 3 KV; rows 0: a vector */
            conversion cv;
        } T[] = {
            {"model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight", 0, 1, COPY},
            {"model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight", 1, 1, ROPE},
            {"model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight", 3, 1, ROPE},
            {"model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight", 3, 1, COPY},
            {"model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight", 1, 1, COPY},
            {"model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight", 0, 1,
             COPY},
            {"model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight", 2, 1, COPY},
            {"model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight", 2, 1, COPY},
            {"model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight", 1, 2, COPY},
        };
        const int64_t dim[] = {0, C, F, KV};
        for (size_t t = 0; s == MT_OK && t < sizeof T / sizeof *T; t++)
            s = one(r, T[t].hf, T[t].mine, l, dim[T[t].rows], dim[T[t].cols], T[t].cv, err);
    }
    if (s == MT_OK) s = one(r, "model.norm.weight", "output_norm.weight", -1, 0, C, COPY, err);
    if (s == MT_OK && !a->tied) s = one(r, "lm_head.weight", "output.weight", -1, V, C, COPY, err);
    return s;
}

static mt_status gpt2_tensors(reader *r, mt_err *err) {
    const mt_import_arch *a = &r->h->a;
    int64_t C = a->n_embd;
    char hf[160], out[3][160];
    const char *p = r->h->prefix, *outs[] = {out[0], out[1], out[2]};
#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)
    NAME(hf, "%swte.weight", p);
    mt_status s = one(r, hf, "transformer.wte.weight", -1, a->n_vocab, C, COPY, err);
    NAME(hf, "%swpe.weight", p);
    if (s == MT_OK) s = one(r, hf, "transformer.wpe.weight", -1, a->n_ctx, C, COPY, err);
    for (int l = 0; s == MT_OK && l < a->n_layer; l++) {
        static const struct {
            const char *name;
            int rows, cols; /* in C: the file's (in, out); rows 0: a vector */
        } T[] = {{"ln_1.weight", 0, 1},        {"ln_1.bias", 0, 1},
                 {"attn.c_attn.weight", 1, 3}, {"attn.c_attn.bias", 0, 3},
                 {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 0, 1},
                 {"ln_2.weight", 0, 1},        {"ln_2.bias", 0, 1},
                 {"mlp.c_fc.weight", 1, 4},    {"mlp.c_fc.bias", 0, 4},
                 {"mlp.c_proj.weight", 4, 1},  {"mlp.c_proj.bias", 0, 1}};
        for (size_t t = 0; s == MT_OK && t < sizeof T / sizeof *T; t++) {
            bool qkv = T[t].cols == 3 && strncmp(T[t].name, "attn.c_attn", 11) == 0;
            NAME(hf, "%sh.%d.%s", p, l, T[t].name);
            for (int i = 0; i < 3; i++)
                if (qkv)
                    NAME(out[i], "transformer.h.%d.attn.c_attn.%c.%s", l, "qkv"[i], T[t].name + 12);
                else NAME(out[i], "transformer.h.%d.%s", l, T[t].name);
            s = take(r, hf, T[t].rows * C, T[t].cols * C, T[t].rows ? TRANSPOSE : COPY, qkv ? 3 : 1,
                     outs, err);
        }
    }
    NAME(hf, "%sln_f.weight", p);
    if (s == MT_OK) s = one(r, hf, "transformer.ln_f.weight", -1, 0, C, COPY, err);
    NAME(hf, "%sln_f.bias", p);
    if (s == MT_OK) s = one(r, hf, "transformer.ln_f.bias", -1, 0, C, COPY, err);
#undef NAME
    return s;
}

/* The file's header parsed into r (its data section after it), checked against the length. */
static mt_status read_header(shard *f, mt_err *err) {
    const unsigned char *buf = (const unsigned char *)f->buf;
    size_t size = f->size;
    const char *p = f->path;
    uint64_t n = 0;
    if (size >= 8) memcpy(&n, buf, 8);
    if (size < 8 || n > size - 8)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: truncated: %zu bytes, less than a safetensors header (8 bytes of "
                         "length and the %llu-byte JSON it gives)",
                         p, size, (unsigned long long)n);
    char *json = strndup((const char *)buf + 8, (size_t)n);
    f->header = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!cJSON_IsObject(f->header))
        return mt_errorf(err, MT_EFORMAT, "%s: the safetensors header is not a JSON object", p);
    f->data = buf + 8 + n, f->data_len = size - 8 - (size_t)n;
    return MT_OK;
}

/* The shard of the file name (the directory's) read into r, unless it is there. */
static mt_status add_shard(reader *r, const char *name, mt_err *err) {
    for (int i = 0; i < r->n_sh; i++)
        if (strcmp(r->sh[i].path + strlen(r->h->dir) + 1, name) == 0) return MT_OK;
    if (r->n_sh == SHARDS_MAX)
        return mt_errorf(err, MT_EFORMAT, "%s: more than %d files in its weight_map", r->h->st_path,
                         SHARDS_MAX);
    shard *f = &r->sh[r->n_sh++];
    snprintf(f->path, sizeof f->path, "%s/%s", r->h->dir, name);
    struct stat sb;
    if (stat(f->path, &sb) != 0)
        return mt_errorf(err, MT_EINVAL, "%s: its weight_map names %s: %s", r->h->st_path, f->path,
                         strerror(errno));
    mt_status s = mt_file_read("--init-from", f->path, &f->buf, &f->size, err);
    return s == MT_OK ? read_header(f, err) : s;
}

/* model.safetensors, or every file the index's weight_map names. */
static mt_status read_shards(reader *r, mt_err *err) {
    if (!(r->sh = calloc(SHARDS_MAX, sizeof *r->sh)))
        return mt_errorf(err, MT_ENOMEM, "out of memory");
    if (!r->h->sharded) {
        r->n_sh = 1;
        snprintf(r->sh[0].path, sizeof r->sh[0].path, "%s", r->h->st_path);
        mt_status s = mt_file_read("--init-from", r->sh[0].path, &r->sh[0].buf, &r->sh[0].size,
                                   err);
        return s == MT_OK ? read_header(&r->sh[0], err) : s;
    }
    char *text;
    size_t len;
    mt_status s = mt_file_read("--init-from", r->h->st_path, &text, &len, err);
    if (s != MT_OK) return s;
    r->index = cJSON_Parse(text);
    free(text);
    const cJSON *map = key(r->index, "weight_map"), *e;
    if (!cJSON_IsObject(map))
        return mt_errorf(err, MT_EFORMAT, "%s: expected an object with a weight_map object",
                         r->h->st_path);
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
            return mt_errorf(err, MT_EFORMAT,
                             "%s: weight_map's %s: expected the name of a file beside it",
                             r->h->st_path, e->string);
        if ((s = add_shard(r, e->valuestring, err)) != MT_OK) return s;
    }
    return MT_OK;
}

static void free_shards(reader *r) {
    for (int i = 0; r->sh && i < r->n_sh; i++) {
        cJSON_Delete(r->sh[i].header);
        free(r->sh[i].buf);
    }
    free(r->sh);
    cJSON_Delete(r->index);
}

mt_status mt_hf_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err) {
    memset(st, 0, sizeof *st);
    hf_model h;
    mt_status s = read_config(path, &h, err);
    reader r = {.h = &h, .st = st};
    if (s == MT_OK) s = read_shards(&r, err);
    if (s == MT_OK && !h.llama && !shard_of(&r, "transformer.wte.weight")) h.prefix = "";
    mt_status (*tensors)(reader *, mt_err *) = h.llama ? llama_tensors : gpt2_tensors;
    if (s == MT_OK) s = tensors(&r, err); /* counting */
    if (s == MT_OK) {
        st->blob = malloc((size_t)r.n * sizeof(float));
        r.tmp = malloc((size_t)r.most * sizeof(float));
        st->t = calloc((size_t)r.n_tensors, sizeof *st->t);
        if (!st->blob || !st->t || !r.tmp)
            s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %lld numbers", h.st_path,
                          (long long)r.n);
    }
    if (s == MT_OK) r.at = st->blob, s = tensors(&r, err);
    free(r.tmp);
    free_shards(&r);
    if (s != MT_OK) mt_st_free(st);
    else *arch = h.a;
    return s;
}

/* ---- writing: mt_hf_write ------------------------------------------------------------------- */

/* f as the shortest decimal that reads back as f: 1e-05, not float 1e-5's 9.99999975e-06 */
static double shortest(float f) {
    char buf[32];
    for (int p = 1; p <= 9; p++)
        if (snprintf(buf, sizeof buf, "%.*g", p, (double)f) > 0 && strtof(buf, NULL) == f) break;
    return strtod(buf, NULL);
}

/* config.json: the keys read_config reads (and those it refuses, at the values it accepts), as
   LlamaConfig's and GPT2Config's save_pretrained name them; no special tokens (mt's ids) */
static cJSON *config_json(const hf_model *h) {
    const mt_import_arch *a = &h->a;
    cJSON *c = cJSON_CreateObject();
    const char *arch = h->llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(&arch, 1));
    cJSON_AddStringToObject(c, "model_type", h->llama ? "llama" : "gpt2");
    if (h->llama) {
        cJSON_AddNumberToObject(c, "hidden_size", a->n_embd);
        cJSON_AddNumberToObject(c, "intermediate_size", a->n_ff);
        cJSON_AddNumberToObject(c, "num_hidden_layers", a->n_layer);
        cJSON_AddNumberToObject(c, "num_attention_heads", a->n_head);
        cJSON_AddNumberToObject(c, "num_key_value_heads", a->n_kv_head);
        cJSON_AddNumberToObject(c, "head_dim", a->n_embd / a->n_head);
        cJSON_AddNumberToObject(c, "max_position_embeddings", a->n_ctx);
        cJSON_AddNumberToObject(c, "rms_norm_eps", shortest(a->norm_eps));
        cJSON_AddNumberToObject(c, "rope_theta", shortest(a->rope_theta));
        cJSON_AddNullToObject(c, "rope_scaling");
        cJSON_AddStringToObject(c, "hidden_act", "silu");
        cJSON_AddBoolToObject(c, "attention_bias", false);
        cJSON_AddBoolToObject(c, "mlp_bias", false);
        cJSON_AddNumberToObject(c, "attention_dropout", 0);
    } else {
        cJSON_AddNumberToObject(c, "n_embd", a->n_embd);
        cJSON_AddNumberToObject(c, "n_layer", a->n_layer);
        cJSON_AddNumberToObject(c, "n_head", a->n_head);
        cJSON_AddNullToObject(c, "n_inner"); /* 4 n_embd */
        cJSON_AddNumberToObject(c, "n_positions", a->n_ctx);
        cJSON_AddNumberToObject(c, "n_ctx", a->n_ctx);
        cJSON_AddNumberToObject(c, "layer_norm_epsilon", shortest(a->norm_eps));
        cJSON_AddStringToObject(c, "activation_function", "gelu_new");
        cJSON_AddBoolToObject(c, "scale_attn_weights", true);
        cJSON_AddBoolToObject(c, "scale_attn_by_inverse_layer_idx", false);
        cJSON_AddBoolToObject(c, "reorder_and_upcast_attn", false);
        static const char *const DROPS[] = {"attn_pdrop", "embd_pdrop", "resid_pdrop"};
        for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(c, DROPS[i], 0);
    }
    cJSON_AddNumberToObject(c, "vocab_size", a->n_vocab);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", a->tied);
    cJSON_AddNullToObject(c, "bos_token_id");
    cJSON_AddNullToObject(c, "eos_token_id");
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

static mt_status write_config(const hf_model *h, mt_err *err) {
    cJSON *c = config_json(h);
    char *text = c ? cJSON_Print(c) : NULL;
    cJSON_Delete(c);
    if (!text) return mt_errorf(err, MT_ENOMEM, "%s: out of memory", h->cfg_path);
    mt_atomic_file af;
    mt_status s = mt_atomic_open(&af, h->cfg_path, err);
    if (s == MT_OK) s = mt_atomic_close(&af, fprintf(af.f, "%s\n", text) > 0, err);
    free(text);
    return s;
}

/* The model's entries under the importer's names (its type's import map of a), pointing into P:
   src->t[i] is P's entry i. */
static mt_status named(const mt_model *m, const mt_import_arch *a, mt_safetensors *src,
                       mt_err *err) {
    mt_import imp;
    mt_status s = m->type->import(a, &imp, err);
    if (s != MT_OK) return s;
    const mt_params *P = m->P;
    const mt_load_spec spec = {.map = imp.map, .n_map = imp.n_map};
    if (!(src->t = calloc((size_t)P->n + 1, sizeof *src->t)))
        return mt_errorf(err, MT_ENOMEM, "out of memory listing %d tensors", P->n);
    for (int i = 0; i < P->n; i++) {
        char buf[160];
        const mt_param *p = &P->p[i];
        const char *name = mt_load_file_name(&spec, p->name, buf, sizeof buf);
        if (mt_st_add(src, name, p->ndim, p->shape, P->data + p->offset) != i)
            return mt_errorf(err, MT_ENOMEM, "out of memory indexing the tensors");
    }
    return MT_OK;
}

/* Every tensor of src written (r->used); else the first not, by the model's name. */
static mt_status all_used(const reader *r, const mt_model *m, mt_err *err) {
    for (int i = 0; i < r->src->n; i++)
        if (!r->used[i])
            return mt_errorf(err, MT_EINVAL, "%s: the model's %s has no place in a %s", r->h->dir,
                             m->P->p[i].name, r->h->llama ? "LlamaForCausalLM" : "GPT2LMHeadModel");
    return MT_OK;
}

mt_status mt_hf_write(const char *dir, const mt_model *m, const mt_import_arch *a, mt_err *err) {
    hf_model h = {.a = *a, .llama = a->format == MT_IMPORT_GGUF, .prefix = "transformer."};
    snprintf(h.dir, sizeof h.dir, "%s", dir);
    snprintf(h.cfg_path, sizeof h.cfg_path, "%s/config.json", dir);
    snprintf(h.st_path, sizeof h.st_path, "%s/model.safetensors", dir);
    mt_safetensors src = {0};
    reader r = {.h = &h, .src = &src};
    mt_status (*tensors)(reader *, mt_err *) = h.llama ? llama_tensors : gpt2_tensors;
    mt_status s = named(m, a, &src, err);
    if (s == MT_OK) s = tensors(&r, err); /* counting */
    float *blob = NULL;
    if (s == MT_OK) {
        blob = malloc((size_t)r.n * sizeof(float));
        r.tmp = malloc((size_t)r.most * sizeof(float));
        r.items = calloc((size_t)r.n_tensors, sizeof *r.items);
        r.names = calloc((size_t)r.n_tensors, sizeof *r.names);
        r.shapes = calloc((size_t)r.n_tensors, sizeof *r.shapes);
        r.used = calloc((size_t)src.n + 1, sizeof *r.used);
        if (!blob || !r.tmp || !r.items || !r.names || !r.shapes || !r.used)
            s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %lld numbers", dir,
                          (long long)r.n);
    }
    if (s == MT_OK) r.at = blob, s = tensors(&r, err);
    if (s == MT_OK) s = all_used(&r, m, err);
    if (s == MT_OK) s = mt_make_dirs("--out", dir, err);
    /* the weights first, the config last: a failure between them leaves no config.json, so no
       checkpoint of the old config with the new weights */
    if (s == MT_OK && remove(h.cfg_path) != 0 && errno != ENOENT)
        s = mt_errorf(err, MT_EIO, "%s: cannot replace it: %s", h.cfg_path, strerror(errno));
    const char *key = "format", *val = "pt"; /* what transformers' loader checks */
    if (s == MT_OK) s = mt_st_save(h.st_path, r.n_items, r.items, 1, &key, &val, err);
    if (s == MT_OK) s = write_config(&h, err);
    free(blob), free(r.tmp), free(r.items), free(r.names), free(r.shapes), free(r.used);
    mt_st_free(&src);
    return s;
}
