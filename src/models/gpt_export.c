/* A GPT in the files other programs run: llama2.c's checkpoint and tokenizer (what its run.c
   reads) and GGUF (llama.cpp's "llama" architecture); and, back, what a llama2.c model.bin, a
   GGUF file (src/ckpt/llama2c.c and gguf.c read them) and an llm.c GPT-2 (src/ckpt/llmc.c) are
   as a GPT. The two formats it writes hold a Llama: pre-norm RMSNorm blocks
   without biases, RoPE, a SwiGLU FFN, grouped-query attention; a model of another shape is
   refused with what does not fit. For --format hf it checks the model is a Llama or a GPT-2 and
   says which (src/ckpt/hf.c writes the files). The layouts and every mapping: docs/export.md.
   C n_embd, F n_ff, V n_vocab, L n_layer, HS head size, KV n_kv_head * HS. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/gguf.h"
#include "gpt_internal.h"

static const mt_enum_item FORMATS[] = {
    [MT_EXPORT_LLAMA2C] = {.name = "llama2c",
                           .help = "llama2.c's model.bin (version 0) and tokenizer.bin"},
    [MT_EXPORT_GGUF] = {.name = "gguf", .help = "GGUF v3, llama architecture, float32 or float16"},
    [MT_EXPORT_CHECKPOINT] = {.name = "checkpoint", .help = "an mt checkpoint (model.safetensors)"},
    [MT_EXPORT_HF] = {.name = "hf",
                      .help = "a Hugging Face directory (config.json, model.safetensors) of a "
                              "LlamaForCausalLM or a GPT2LMHeadModel, float32"},
};
const mt_enum MT_EXPORT_FORMATS = MT_ENUM("export format", FORMATS);

/* ---- what the model is, read off its config's JSON (the keys of the flags) ------------------- */

typedef struct {
    int L, NH, KVH, C, F, T, V;
    bool tied, gpt2; /* gpt2: --format hf's GPT-2 (GPT2LMHeadModel); else a Llama */
    float eps, theta;
} llama_dims;

/* The config key's value as text ("rope", "false", "1e-05"). */
static const char *key_text(const cJSON *cfg, const char *key, char *buf, size_t len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNumber(v)) snprintf(buf, len, "%g", v->valuedouble);
    else snprintf(buf, len, "(none)");
    return buf;
}

static double key_num(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* What a model is, as config values, and the flag that sets each. */
typedef struct {
    const char *key, *want, *flag;
} requirement;
/* the pieces both shapes share: one residual stream of Pre-LN blocks, plain attention */
#define PLAIN_BLOCKS(bias_want, bias_flag)                                                         \
    {"placement", "pre", "--placement pre"}, {"bias", bias_want, bias_flag},                       \
        {"emb_scale", "false", "no --emb-scale"}, {"qk_norm", "none", "--qk-norm none"},           \
        {"attn_gate", "none", "--attn-gate none"}, {"attn_sink", "false", "no --attn-sink"},       \
        {"value_residual", "none", "--value-residual none"},                                       \
        {"layer_lambdas", "false", "no --layer-lambdas: the blocks read the stream as it is"},     \
        {"unet", "false", "no --unet: the blocks read the stream as it is"},                       \
        {"value_embeds", "", "no --value-embeds"}, {"softmax", "softmax", "--softmax softmax"},    \
        {"residual", "sum", "--residual sum: one residual stream"}, {                              \
        "param", "sp", "--param sp: the branches added and the logits read unscaled"               \
    }
static const requirement LLAMA[] = {
    PLAIN_BLOCKS("false", "--no-bias"),        {"norm", "rms", "--norm rms"},
    {"rms_form", "llama", "--rms-form llama"}, {"rms_bias", "false", "no --rms-bias"},
    {"act", "swiglu", "--act swiglu"},         {"pos", "rope", "--pos rope"},
};
/* hf's GPT-2 (what the llm.c and HF GPT-2 imports build: mt_gpt_import's LLMC options) */
static const requirement GPT2[] = {
    PLAIN_BLOCKS("true", "no --no-bias"),
    {"norm", "ln", "--norm ln"},
    {"act", "gelu", "--act gelu (GPT-2's tanh GELU, gelu_new)"},
    {"pos", "learned", "--pos learned"},
    {"tied", "true", "no --untie: GPT2LMHeadModel reads its logits off wte"},
};
#undef PLAIN_BLOCKS

/* The keys of cfg that differ from req's n, "key = value (flag)" after ", " into buf at *at;
   returns how many. */
static int differences(const cJSON *cfg, const requirement *req, size_t n, char *buf, size_t len,
                       size_t *at) {
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        char num[64];
        const char *v = key_text(cfg, req[i].key, num, sizeof num);
        if (strcmp(v, req[i].want) == 0) continue;
        k++;
        if (*at < len)
            *at += (size_t)snprintf(buf + *at, len - *at, "%s%s = %s (%s)", k > 1 ? ", " : "",
                                    req[i].key, v, req[i].flag);
    }
    return k;
}
#define N_OF(a) (sizeof a / sizeof *a)

/* hf: a GPT-2 is GPT2LMHeadModel's shape (MHA, n_inner 4 n_embd, as the importer reads it) */
static mt_status gpt2_sizes(const llama_dims *d, mt_err *err) {
    if (d->KVH == d->NH && d->F == 4 * d->C) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "--format hf: a GPT2LMHeadModel has as many key/value heads as heads and an "
                     "MLP of 4 n_embd; this model has n_kv_head = %d of %d (--n-kv-head %d), n_ff "
                     "= %d (--n-ff %d)",
                     d->KVH, d->NH, d->NH, d->F, 4 * d->C);
}

/* hf holds a Llama or a GPT-2: the one whose keys all fit; neither: both lists of differences */
static mt_status check_shape(const cJSON *cfg, mt_export_format fmt, llama_dims *d, mt_err *err) {
    char differ[1024] = "", gpt2[512] = "";
    size_t at = 0, at2 = 0;
    const char *fname = mt_enum_name(&MT_EXPORT_FORMATS, (int)fmt);
    if (differences(cfg, LLAMA, N_OF(LLAMA), differ, sizeof differ, &at) == 0) return MT_OK;
    if (fmt != MT_EXPORT_HF)
        return mt_errorf(err, MT_EINVAL,
                         "--format %s holds a Llama: pre-norm RMSNorm blocks "
                         "without biases, RoPE, a SwiGLU FFN; this model has %s: train with "
                         "--arch llama",
                         fname, differ);
    if (differences(cfg, GPT2, N_OF(GPT2), gpt2, sizeof gpt2, &at2) == 0)
        return d->gpt2 = true, gpt2_sizes(d, err);
    return mt_errorf(err, MT_EINVAL,
                     "--format hf holds a LlamaForCausalLM (pre-norm RMSNorm blocks without "
                     "biases, RoPE, a SwiGLU FFN: --arch llama) or a GPT2LMHeadModel (pre-norm "
                     "LayerNorm blocks with biases, learned positions, tanh GELU, tied: --arch "
                     "gpt); this model has, for a Llama, %s; for a GPT-2, %s",
                     differ, gpt2);
}

static mt_status read_dims(const mt_gpt *m, mt_export_format fmt, llama_dims *d, mt_err *err) {
    char *json = mt_model_config_json(&m->base);
    cJSON *cfg = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!cfg) return mt_errorf(err, MT_ENOMEM, "out of memory reading the model's config");
    const char *fname = mt_enum_name(&MT_EXPORT_FORMATS, (int)fmt);
    *d = (llama_dims){.L = (int)key_num(cfg, "n_layer"),
                      .NH = (int)key_num(cfg, "n_head"),
                      .KVH = (int)key_num(cfg, "n_kv_head"),
                      .C = (int)key_num(cfg, "n_embd"),
                      .F = (int)key_num(cfg, "n_ff"),
                      .T = (int)key_num(cfg, "n_ctx"),
                      .V = (int)key_num(cfg, "n_vocab"),
                      .tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tied")),
                      .eps = (float)key_num(cfg, "norm_eps"),
                      .theta = (float)key_num(cfg, "rope_theta")};
    if (d->KVH == 0) d->KVH = d->NH; /* 0: as many as the query heads */
    double cap = key_num(cfg, "logit_softcap");
    mt_status s = cap != 0 ? MT_EINVAL : check_shape(cfg, fmt, d, err);
    cJSON_Delete(cfg);
    if (cap != 0) /* GGUF's gemma2.final_logit_softcapping is Gemma 2's key, not the llama arch's */
        return mt_errorf(err, MT_EINVAL,
                         "--format %s holds a Llama or a GPT-2, whose head has no soft cap "
                         "(llama2.c's run.c, GGUF's llama architecture and transformers' "
                         "LlamaForCausalLM and GPT2LMHeadModel read the logits as they are); this "
                         "model has logit_softcap = %g (--logit-softcap): train without it",
                         fname, cap);
    if (s != MT_OK) return s;
    if (fmt == MT_EXPORT_LLAMA2C && d->eps != 1e-5f)
        return mt_errorf(err, MT_EINVAL,
                         "--format llama2c: run.c's RMSNorm has eps 1e-5 built "
                         "in; this model has norm_eps = %g (retrain with --norm-eps 1e-5, or "
                         "--format gguf, which stores eps)",
                         d->eps);
    if (fmt == MT_EXPORT_LLAMA2C && d->theta != 10000.0f)
        return mt_errorf(err, MT_EINVAL,
                         "--format llama2c: run.c's RoPE has theta 10000 built "
                         "in; this model has rope_theta = %g (--format gguf stores it)",
                         d->theta);
    return MT_OK;
}

/* ---- the tensors, in each format's names ------------------------------------------------------
 * The GPT's names <- the format's, in llama2.c's order within a layer (tok_embd, then per layer
 * attn_norm, q, k, v, output, ffn_norm, gate (w1, fc1), down (w2, fc2), up (w3, fc3);
 * output_norm; output when untied): the exports write them in this order, the imports read
 * them by these maps (src/ckpt/llama2c.c names a model.bin's tensors as model.py, gguf.c a GGUF's
 * as the file). */
static const mt_name_rule GGUF_NAMES[] = {
    {"tok_emb.weight", "token_embd.weight"},
    {"blocks.*.attn_norm.weight", "blk.*.attn_norm.weight"},
    {"blocks.*.attn.q_proj.weight", "blk.*.attn_q.weight"},
    {"blocks.*.attn.k_proj.weight", "blk.*.attn_k.weight"},
    {"blocks.*.attn.v_proj.weight", "blk.*.attn_v.weight"},
    {"blocks.*.attn.out_proj.weight", "blk.*.attn_output.weight"},
    {"blocks.*.ffn_norm.weight", "blk.*.ffn_norm.weight"},
    {"blocks.*.ffn.fc1.weight", "blk.*.ffn_gate.weight"},
    {"blocks.*.ffn.fc2.weight", "blk.*.ffn_down.weight"},
    {"blocks.*.ffn.fc3.weight", "blk.*.ffn_up.weight"},
    {"final_norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
static const mt_name_rule LLAMA2C_NAMES[] = {
    {"tok_emb.weight", "tok_embeddings.weight"},
    {"blocks.*.attn_norm.weight", "layers.*.attention_norm.weight"},
    {"blocks.*.attn.q_proj.weight", "layers.*.attention.wq.weight"},
    {"blocks.*.attn.k_proj.weight", "layers.*.attention.wk.weight"},
    {"blocks.*.attn.v_proj.weight", "layers.*.attention.wv.weight"},
    {"blocks.*.attn.out_proj.weight", "layers.*.attention.wo.weight"},
    {"blocks.*.ffn_norm.weight", "layers.*.ffn_norm.weight"},
    {"blocks.*.ffn.fc1.weight", "layers.*.feed_forward.w1.weight"},
    {"blocks.*.ffn.fc2.weight", "layers.*.feed_forward.w2.weight"},
    {"blocks.*.ffn.fc3.weight", "layers.*.feed_forward.w3.weight"},
    {"final_norm.weight", "norm.weight"},
    {"lm_head.weight", "output.weight"},
};
#define N_NAMES (int)(sizeof GGUF_NAMES / sizeof *GGUF_NAMES)
#define PER_LAYER 9 /* the rules 1..9 */

typedef struct {
    char name[48]; /* GGUF's */
    const float *data;
    int ndim, rows, cols; /* a matrix: torch's (out, in); a vector: rows 1 */
} tensor;

/* pattern with its '*' (one at most) as layer's number */
static void name_of(const char *pattern, int layer, char *buf, size_t len) {
    const char *star = strchr(pattern, '*');
    if (star) snprintf(buf, len, "%.*s%d%s", (int)(star - pattern), pattern, layer, star + 1);
    else snprintf(buf, len, "%s", pattern);
}

/* Rule r's tensor of layer, present in a model that passed read_dims. */
static tensor tensor_of(const mt_gpt *m, int r, int layer) {
    char name[96];
    name_of(GGUF_NAMES[r].model, layer, name, sizeof name);
    int i = mt_params_find(&m->P, name);
    MT_ASSERT(i >= 0, "export: %s missing", name);
    const mt_param *p = &m->P.p[i];
    tensor t = {.data = m->P.t[i].data,
                .ndim = p->ndim,
                .rows = p->ndim == 2 ? p->shape[0] : 1,
                .cols = p->shape[p->ndim - 1]};
    name_of(GGUF_NAMES[r].file, layer, t.name, sizeof t.name);
    return t;
}

/* The model's tensors in the rules' order; returns how many ((9 L + 3) at most). */
static int list_tensors(const mt_gpt *m, const llama_dims *d, tensor *t) {
    int n = 0;
    t[n++] = tensor_of(m, 0, 0);
    for (int l = 0; l < d->L; l++)
        for (int r = 1; r <= PER_LAYER; r++) t[n++] = tensor_of(m, r, l);
    t[n++] = tensor_of(m, PER_LAYER + 1, 0);
    if (!d->tied) t[n++] = tensor_of(m, PER_LAYER + 2, 0);
    return n;
}

/* ---- writing -------------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    bool ok;
    int n_kv; /* GGUF key-values written */
} out;

static void put(out *o, const void *p, size_t n) { o->ok = o->ok && fwrite(p, 1, n, o->f) == n; }
static void put_u32(out *o, uint32_t v) { put(o, &v, 4); } /* little-endian hosts (x86-64) */
static void put_i32(out *o, int32_t v) { put(o, &v, 4); }
static void put_u64(out *o, uint64_t v) { put(o, &v, 8); }
static void put_f32(out *o, float v) { put(o, &v, 4); }
static void put_zeros(out *o, size_t n) {
    for (size_t i = 0; i < n && o->ok; i++) o->ok = fputc(0, o->f) != EOF;
}

/* The bytes of token id; an sp tokenizer's piece as its file holds it ("<0xXX>" for a byte). */
static const char *token(const mt_gpt *m, int id, int *len) {
    float score;
    if (m->tok.kind == MT_TOK_SP) return mt_sp_piece(&m->tok, id, len, &score);
    return mt_tok_decode(&m->tok, id, len);
}

/* ---- llama2.c --------------------------------------------------------------------------------
 * model.bin: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, negative when
 * the classifier is not the embedding, seq_len), then float32: token_embedding (V, C); per kind,
 * every layer's: rms_att (L, C), wq (L, C, C), wk (L, KV, C), wv (L, KV, C), wo (L, C, C),
 * rms_ffn (L, C), w1 (L, F, C), w2 (L, C, F), w3 (L, F, C); rms_final (C); two RoPE tables of
 * (T, HS / 2) run.c skips (written as zeros); wcls (V, C) when untied.
 * tokenizer.bin: int32 max_token_length, then per id: float32 score, int32 length, the bytes. */

static mt_status write_llama2c(const llama_dims *d, const tensor *t, int nt, const char *path,
                               mt_err *err) {
    mt_atomic_file af;
    mt_status s = mt_atomic_open(&af, path, err);
    if (s != MT_OK) return s;
    out o = {af.f, true, 0};
    int32_t head[7] = {d->C, d->F, d->L, d->NH, d->KVH, d->tied ? d->V : -d->V, d->T};
    put(&o, head, sizeof head);
    put(&o, t[0].data, (size_t)t[0].rows * t[0].cols * sizeof(float));
    for (int kind = 0; kind < 9; kind++) /* tensor 1 + 9 l + kind is layer l's */
        for (int l = 0; l < d->L; l++) {
            const tensor *x = &t[1 + 9 * l + kind];
            put(&o, x->data, (size_t)x->rows * x->cols * sizeof(float));
        }
    const tensor *final = &t[1 + 9 * d->L];
    put(&o, final->data, (size_t)d->C * sizeof(float));
    put_zeros(&o, 2 * (size_t)d->T * (d->C / d->NH / 2) * sizeof(float));
    if (!d->tied) put(&o, t[nt - 1].data, (size_t)d->V * d->C * sizeof(float));
    return mt_atomic_close(&af, o.ok, err);
}

/* Scores for run.c's encoder, which merges the adjacent pair whose joined bytes form the token of
   the highest score: an sp tokenizer's own; bytes and characters 0, bpe merge k -(k + 1), so
   merges apply in the order training learnt them. */
static float token_score(const mt_gpt *m, int id) {
    float score;
    int len;
    if (m->tok.kind == MT_TOK_SP) return mt_sp_piece(&m->tok, id, &len, &score), score;
    return m->tok.kind == MT_TOK_BPE && id >= 256 ? -(float)(id - 256 + 1) : 0.0f;
}

static mt_status write_llama2c_tokenizer(const mt_gpt *m, const char *path, mt_err *err) {
    mt_atomic_file af;
    mt_status s = mt_atomic_open(&af, path, err);
    if (s != MT_OK) return s;
    out o = {af.f, true, 0};
    int max_len = 0, len;
    for (int id = 0; id < m->tok.n_vocab; id++) {
        token(m, id, &len);
        max_len = len > max_len ? len : max_len;
    }
    if (m->tok.kind == MT_TOK_SP) max_len = mt_sp_max_len(&m->tok); /* as the file read said */
    put_i32(&o, max_len);
    for (int id = 0; id < m->tok.n_vocab; id++) {
        const char *b = token(m, id, &len);
        put_f32(&o, token_score(m, id));
        put_i32(&o, len);
        put(&o, b, (size_t)len);
    }
    return mt_atomic_close(&af, o.ok, err);
}

/* ---- GGUF (src/io/gguf.h) ----------------------------------------------------------------- */

static void put_str(out *o, const char *s, size_t n) {
    put_u64(o, n);
    put(o, s, n);
}
static void kv_key(out *o, const char *key, uint32_t type) {
    o->n_kv++;
    put_str(o, key, strlen(key));
    put_u32(o, type);
}
static void kv_u32(out *o, const char *key, uint32_t v) {
    kv_key(o, key, MT_GGUF_U32), put_u32(o, v);
}
static void kv_f32(out *o, const char *key, float v) { kv_key(o, key, MT_GGUF_F32), put_f32(o, v); }
static void kv_bool(out *o, const char *key, bool v) {
    kv_key(o, key, MT_GGUF_BOOL);
    put(o, &(uint8_t){v}, 1);
}
static void kv_string(out *o, const char *key, const char *v) {
    kv_key(o, key, MT_GGUF_STRING);
    put_str(o, v, strlen(v));
}
static void kv_array(out *o, const char *key, uint32_t type, size_t n) {
    kv_key(o, key, MT_GGUF_ARRAY);
    put_u32(o, type);
    put_u64(o, n);
}

/* GPT-2's printable stand-in for a byte (its bytes_to_unicode): the printable Latin-1 bytes
   ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves, the others (in order) for U+0100 on;
   as UTF-8 into u (2 bytes at most); returns the length. */
static int gpt2_char(unsigned char b, char *u) {
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) cp = b;
    else { /* the n-th byte that is not printable, n from 0 */ int n = 0;
        for (int x = 0; x < b; x++)
            n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* GGUF's tokenizer.ggml.model of a tokenizer: SentencePiece's ("llama") for char and sp, GPT-2's
   byte-level BPE ("gpt2") for byte, bpe and gpt2. */
static bool spm(const mt_tokenizer *t) { return t->kind == MT_TOK_CHAR || t->kind == MT_TOK_SP; }

#define TOKEN_TEXT_MAX (3 * MT_TOK_MAX_BYTES)
/* The GGUF text of token id into buf (TOKEN_TEXT_MAX bytes): gpt2: the GPT-2 stand-ins of its
   bytes; llama (char and sp vocabularies): its UTF-8 with ' ' written as sentencepiece's U+2581.
   Returns the length. */
static size_t token_text(const mt_gpt *m, int id, char *buf) {
    int len;
    const unsigned char *b = (const unsigned char *)token(m, id, &len);
    size_t n = 0;
    for (int i = 0; i < len; i++) {
        if (!spm(&m->tok)) n += (size_t)gpt2_char(b[i], buf + n);
        else if (b[i] == ' ') memcpy(buf + n, "\xe2\x96\x81", 3), n += 3;
        else buf[n++] = (char)b[i];
    }
    return n;
}

/* llama.cpp's token types (llama_token_type): an sp tokenizer's <unk> 2 (unknown), <s> and </s>
   3 (control), its byte-fallback pieces 6 (byte); a gpt2 tokenizer's special tokens 3; else 1
   (normal). */
static int32_t token_type(const mt_tokenizer *t, int id) {
    if (t->kind == MT_TOK_SP) return id == 0 ? 2 : id < 3 ? 3 : id < 259 ? 6 : 1;
    return t->kind == MT_TOK_GPT2 && id >= 256 + t->n_merges ? 3 : 1;
}

static void put_tokenizer(out *o, const mt_gpt *m) {
    const mt_tokenizer *tk = &m->tok;
    int V = tk->n_vocab;
    char a[TOKEN_TEXT_MAX], b[TOKEN_TEXT_MAX + 1 + TOKEN_TEXT_MAX];
    kv_string(o, "tokenizer.ggml.model", spm(tk) ? "llama" : "gpt2");
    if (!spm(tk)) /* GPT-2's pre-tokenizer regex: GPT-2's own, and the nearest to mt's bpe */
        kv_string(o, "tokenizer.ggml.pre", tk->kind == MT_TOK_GPT2 ? "gpt-2" : "default");
    kv_array(o, "tokenizer.ggml.tokens", MT_GGUF_STRING, (size_t)V);
    for (int id = 0; id < V; id++) put_str(o, a, token_text(m, id, a));
    kv_array(o, "tokenizer.ggml.scores", MT_GGUF_F32, (size_t)V);
    for (int id = 0; id < V; id++) put_f32(o, token_score(m, id));
    kv_array(o, "tokenizer.ggml.token_type", MT_GGUF_I32, (size_t)V);
    for (int id = 0; id < V; id++) put_i32(o, token_type(tk, id));
    if (!spm(tk)) { /* "left right" of each merge, in rank order */
        int n_merges = tk->kind == MT_TOK_BYTE ? 0 : tk->n_merges;
        kv_array(o, "tokenizer.ggml.merges", MT_GGUF_STRING, (size_t)n_merges);
        for (int k = 0; k < n_merges; k++) {
            size_t n = token_text(m, tk->merges[k][0], b);
            b[n++] = ' ';
            n += token_text(m, tk->merges[k][1], b + n);
            put_str(o, b, n);
        }
    }
    if (tk->kind == MT_TOK_SP) { /* run.c's prompt: BOS, then the dummy prefix */
        kv_u32(o, "tokenizer.ggml.unknown_token_id", 0);
        kv_u32(o, "tokenizer.ggml.bos_token_id", 1);
        kv_u32(o, "tokenizer.ggml.eos_token_id", 2);
    }
    if (tk->kind == MT_TOK_GPT2) kv_u32(o, "tokenizer.ggml.eos_token_id", 256 + tk->n_merges);
    /* sp: its own flags (tokenizer.bin's true, false; tokenizer_config.json's add_bos_token and
       add_eos_token), as llama.cpp's convert_hf_to_gguf.py writes them */
    bool sp = tk->kind == MT_TOK_SP;
    kv_bool(o, "tokenizer.ggml.add_bos_token", sp && mt_sp_add_bos(tk));
    kv_bool(o, "tokenizer.ggml.add_eos_token", sp && mt_sp_add_eos(tk));
}

static void put_metadata(out *o, const mt_gpt *m, const llama_dims *d, bool f16) {
    kv_string(o, "general.architecture", "llama");
    kv_string(o, "general.name", "mt");
    kv_u32(o, "general.alignment", MT_GGUF_ALIGN);
    kv_u32(o, "general.file_type", f16 ? 1 : 0); /* all float32, or matrices float16 */
    kv_u32(o, "llama.context_length", (uint32_t)d->T);
    kv_u32(o, "llama.embedding_length", (uint32_t)d->C);
    kv_u32(o, "llama.block_count", (uint32_t)d->L);
    kv_u32(o, "llama.feed_forward_length", (uint32_t)d->F);
    kv_u32(o, "llama.attention.head_count", (uint32_t)d->NH);
    kv_u32(o, "llama.attention.head_count_kv", (uint32_t)d->KVH);
    kv_f32(o, "llama.attention.layer_norm_rms_epsilon", d->eps);
    kv_f32(o, "llama.rope.freq_base", d->theta);
    kv_u32(o, "llama.rope.dimension_count", (uint32_t)(d->C / d->NH));
    kv_u32(o, "llama.vocab_size", (uint32_t)d->V);
    put_tokenizer(o, m);
}

/* n floats as halves, through a buffer on the stack */
static void put_halves(out *o, const float *x, size_t n) {
    uint16_t buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) buf[j] = mt_half_from_float(x[i + j]);
        put(o, buf, k * 2);
    }
}

static mt_status write_gguf(const mt_gpt *m, const llama_dims *d, const tensor *t, int nt, bool f16,
                            const char *path, mt_err *err) {
    /* the key-values first, in memory: the header counts them */
    char *meta = NULL;
    size_t meta_len = 0;
    out mo = {open_memstream(&meta, &meta_len), true, 0};
    if (!mo.f) return mt_errorf(err, MT_ENOMEM, "out of memory for the GGUF metadata");
    put_metadata(&mo, m, d, f16);
    if (fclose(mo.f) != 0 || !mo.ok) {
        free(meta);
        return mt_errorf(err, MT_ENOMEM, "out of memory for the GGUF metadata");
    }
    mt_atomic_file af;
    mt_status s = mt_atomic_open(&af, path, err);
    if (s != MT_OK) {
        free(meta);
        return s;
    }
    out o = {af.f, true, 0};
    put(&o, MT_GGUF_MAGIC, 4);
    put_u32(&o, 3);
    put_u64(&o, (uint64_t)nt);
    put_u64(&o, (uint64_t)mo.n_kv);
    put(&o, meta, meta_len);
    free(meta);
    uint64_t off = 0, at = 24 + meta_len;
/* with f16 the matrices are float16, the norms' vectors stay float32 (as llama.cpp's converter) */
#define HALF(i) (f16 && t[i].ndim == 2)
#define BYTES(i) ((uint64_t)t[i].rows * t[i].cols * (HALF(i) ? 2 : sizeof(float)))
    for (int i = 0; i < nt; i++) {
        size_t name_len = strlen(t[i].name);
        put_str(&o, t[i].name, name_len);
        put_u32(&o, (uint32_t)t[i].ndim);
        put_u64(&o, (uint64_t)t[i].cols); /* innermost first */
        if (t[i].ndim == 2) put_u64(&o, (uint64_t)t[i].rows);
        put_u32(&o, HALF(i) ? MT_GGML_F16 : MT_GGML_F32);
        put_u64(&o, off);
        at += 8 + name_len + 4 + 8 * (uint64_t)t[i].ndim + 4 + 8;
        off += (BYTES(i) + MT_GGUF_ALIGN - 1) / MT_GGUF_ALIGN * MT_GGUF_ALIGN;
    }
    put_zeros(&o, (size_t)((MT_GGUF_ALIGN - at % MT_GGUF_ALIGN) % MT_GGUF_ALIGN));
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)t[i].rows * t[i].cols;
        if (HALF(i)) put_halves(&o, t[i].data, n);
        else put(&o, t[i].data, n * sizeof(float));
        put_zeros(&o, (MT_GGUF_ALIGN - BYTES(i) % MT_GGUF_ALIGN) % MT_GGUF_ALIGN);
    }
#undef HALF
#undef BYTES
    return mt_atomic_close(&af, o.ok, err);
}

/* hf: the shape its importer (src/ckpt/hf.c) would read, whose import map (mt_gpt_import) names
   the model's tensors as that importer does */
static mt_status describe(const llama_dims *d, mt_import_arch *a) {
    *a = (mt_import_arch){.format = d->gpt2 ? MT_IMPORT_LLMC : MT_IMPORT_GGUF,
                          .n_layer = d->L,
                          .n_head = d->NH,
                          .n_kv_head = d->KVH,
                          .n_embd = d->C,
                          .n_ff = d->F,
                          .n_vocab = d->V,
                          .n_ctx = d->T,
                          .tied = d->tied,
                          .norm_eps = d->eps,
                          .rope_theta = d->theta};
    return MT_OK;
}

mt_status mt_gpt_export(const mt_gpt *m, const mt_export_opts *opts, mt_err *err) {
    llama_dims d;
    mt_export_format fmt = opts->format;
    if (opts->f16 && fmt != MT_EXPORT_GGUF)
        return mt_errorf(err, MT_EINVAL,
                         "--f16: --format %s holds float32 only; --format gguf can hold float16",
                         mt_enum_name(&MT_EXPORT_FORMATS, (int)fmt));
    mt_status s = read_dims(m, fmt, &d, err);
    if (s != MT_OK || fmt == MT_EXPORT_HF) return s == MT_OK ? describe(&d, opts->arch) : s;
    tensor *t = malloc((size_t)(9 * d.L + 3) * sizeof *t);
    if (!t) return mt_errorf(err, MT_ENOMEM, "out of memory listing %d layers", d.L);
    int nt = list_tensors(m, &d, t);
    if (fmt == MT_EXPORT_LLAMA2C) {
        s = write_llama2c(&d, t, nt, opts->path, err);
        if (s == MT_OK) s = write_llama2c_tokenizer(m, opts->tokenizer_path, err);
    } else s = write_gguf(m, &d, t, nt, opts->f16, opts->path, err);
    free(t);
    return s;
}

/* ---- import --------------------------------------------------------------------------------- */

/* The GPT's names <- train_gpt2.py's (what src/ckpt/llmc.c names a gpt2_124M.bin's tensors). */
static const mt_name_rule LLMC_NAMES[] = {
    {"tok_emb.weight", "transformer.wte.weight"},
    {"pos_emb.weight", "transformer.wpe.weight"},
    {"blocks.*.attn_norm.*", "transformer.h.*.ln_1.*"},
    {"blocks.*.attn.q_proj.*", "transformer.h.*.attn.c_attn.q.*"},
    {"blocks.*.attn.k_proj.*", "transformer.h.*.attn.c_attn.k.*"},
    {"blocks.*.attn.v_proj.*", "transformer.h.*.attn.c_attn.v.*"},
    {"blocks.*.attn.out_proj.*", "transformer.h.*.attn.c_proj.*"},
    {"blocks.*.ffn_norm.*", "transformer.h.*.ln_2.*"},
    {"blocks.*.ffn.fc1.*", "transformer.h.*.mlp.c_fc.*"},
    {"blocks.*.ffn.fc2.*", "transformer.h.*.mlp.c_proj.*"},
    {"final_norm.*", "transformer.ln_f.*"},
};

mt_status mt_gpt_import(const mt_import_arch *a, mt_import *out, mt_err *err) {
    switch (a->format) {
    case MT_IMPORT_LLMC: /* GPT-2: the GPT's own pieces, each said */
        *out = (mt_import){.map = LLMC_NAMES, .n_map = sizeof LLMC_NAMES / sizeof *LLMC_NAMES};
        snprintf(out->options, sizeof out->options,
                 "arch = gpt\nn-layer = %d\nn-head = %d\nn-embd = %d\nn-ff = %d\nn-ctx = "
                 "%d\nuntie = false\nnorm = ln\nnorm-eps = %.9g\nno-bias = false\nact = "
                 "gelu\npos = learned\n",
                 a->n_layer, a->n_head, a->n_embd, a->n_ff, a->n_ctx, a->norm_eps);
        return MT_OK;
    case MT_IMPORT_LLAMA2C:
    case MT_IMPORT_GGUF:
        *out = (mt_import){.map = a->format == MT_IMPORT_GGUF ? GGUF_NAMES : LLAMA2C_NAMES,
                           .n_map = N_NAMES};
        snprintf(out->options, sizeof out->options,
                 "arch = llama\nn-layer = %d\nn-head = %d\nn-kv-head = %d\nn-embd = %d\nn-ff = "
                 "%d\nn-ctx = %d\nuntie = %s\nnorm-eps = %.9g\nrope-theta = %.9g\n",
                 a->n_layer, a->n_head, a->n_kv_head, a->n_embd, a->n_ff, a->n_ctx,
                 a->tied ? "false" : "true", a->norm_eps, a->rope_theta);
        return MT_OK;
    }
    return mt_errorf(err, MT_EINVAL,
                     "a GPT imports llama2.c's model.bin, llm.c's gpt2 .bin and GGUF");
}
