/* mt ckpt: model files. A parameter table to and from safetensors, and loading a model's tensors
 * by name from a file that may name them otherwise, skip some and hold more (tensors.c); mt's
 * checkpoints: a model with its type, config, what it reads inputs with and the training state,
 * and a fresh model started from one's weights (checkpoint.c).
 * Models are reached through their type (src/models/model.h): nothing here names one.
 *
 * A file of another format becomes named float tensors (an mt_safetensors in memory) that
 * mt_ckpt_load_names reads through a name map: an importer is a reader of its format here and a
 * map of its names to the model's. */
#ifndef MT_CKPT_H
#define MT_CKPT_H

#include "../io/fields.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../tensor/base.h"
#include "../tensor/params.h"

/* ---- a parameter table, by its entries' names and shapes ----------------------------------- */
/* Every entry of P (buffers too) as a tensor of its name and shape, with the metadata. */
mt_status mt_ckpt_save_params(const char *path, const mt_params *P, int n_meta,
                              const char *const *meta_keys, const char *const *meta_vals,
                              mt_err *err);
/* Copies the tensors of st (read from path) into P: every entry of P must be present with its
   shape, and st may hold nothing else. Errors name the tensor. */
mt_status mt_ckpt_load_params(const mt_safetensors *st, const char *path, mt_params *P,
                              mt_err *err);
/* The checks of mt_ckpt_load_params alone: P's table suffices (its data need not be allocated, so
   a file's config claiming a huge model is refused before any allocation). */
mt_status mt_ckpt_check_params(const mt_safetensors *st, const char *path, const mt_params *P,
                               mt_err *err);

/* Freezes the entries of P whose names a glob of globs (fnmatch(3), ',' between them; NULL or "":
   none) matches (mt_params_freeze: before mt_params_alloc); a glob that matches no name is
   refused (MT_EINVAL), naming it and some of the names. */
mt_status mt_ckpt_freeze(mt_params *P, const char *globs, mt_err *err);

/* LoRA's options (./train's --lora-*): rank 0 is none. */
typedef struct {
    int rank;
    double alpha, dropout;
    /* peft's names, ',' between them: q, k, v, o, gate, up, down */
    char targets[MT_FIELD_STR_MAX];
} mt_lora_cfg;
/* With l->rank > 0: every entry of P frozen and a LoRA adapter (mt_params_add_lora: alpha / r,
   the dropout) added on each matrix a target names (lora.c: the map of peft's names to mt's);
   MT_EINVAL for a target unknown or matching no matrix, a rank above a matrix's smaller side, an
   alpha not above 0, a dropout outside [0, 1). Before mt_params_alloc. */
mt_status mt_ckpt_lora(mt_params *P, const mt_lora_cfg *l, mt_err *err);
/* A checkpoint's metadata 'lora' (mt_ckpt_save): P's adapters as "rank alpha dropout targets"
   ("8 16 0 q,v") into buf; false when P has none. mt_ckpt_lora_read adds them again to a table
   built from the checkpoint's config (mt_ckpt_parse), MT_EFORMAT naming path when malformed. */
bool mt_ckpt_lora_describe(const mt_params *P, char *buf, size_t len);
mt_status mt_ckpt_lora_read(mt_params *P, const char *desc, const char *path, mt_err *err);
/* With l->rank > 0: dir/adapter_model.safetensors, P's adapters under peft's names
   (base_model.model.<name>.lora_A.weight (r, K), .lora_B.weight (O, r): mt's names as the module
   paths), and dir/adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout, bias none,
   target_modules in mt's module names), each written whole or not at all. */
mt_status mt_ckpt_save_lora(const char *dir, const mt_params *P, const mt_lora_cfg *l, mt_err *err);

/* ---- loading by name ------------------------------------------------------------------------
 * A name map is a list of mt_name_rule (model.h): a model's names <- the file's. */
typedef struct {
    const mt_name_rule *map; /* the first rule whose pattern matches a name gives the file's
                                name for it; a name no rule matches is the file's too */
    int n_map;
    const char *skip; /* globs (fnmatch(3), ',' between them) of the model's names left as they
                         are (their initialisation); NULL or "": none. A glob that matches no
                         name is an error: it was meant to */
    bool exact;       /* the file may hold nothing the model does not read (a checkpoint) */
} mt_load_spec;

/* The file's name for the model's name: the first rule that matches, else the name itself
   (into buf when renamed). */
const char *mt_load_file_name(const mt_load_spec *spec, const char *name, char *buf, size_t len);

/* What a load did: each entry of the model read or left as it was, and the file's tensors that
   no entry read. */
typedef struct {
    int loaded, skipped;  /* entries of the model */
    size_t loaded_floats; /* in the loaded entries */
    bool *is_skipped;     /* (P->n) */
    int n_unused;         /* the file's tensors no entry read */
    char **unused;        /* (n_unused) their names */
    int failed;           /* after a failed load, the entry that stopped it (missing, another
                             shape, not finite); -1: none */
    char differs[256];    /* mt_ckpt_init_from: the file's config values that differ from the
                             model's, "n_head 2 (here 4)"; "": none */
} mt_load_report;

/* Reads P's entries from st (read from path) by name as spec says, every one checked (found,
   the same shape, finite) before any is written: on an error P is unchanged and the message
   names the file, the tensor (the model's name and, when the map renames it, the file's), both
   shapes and what would be accepted. report (its arrays malloc'd; free them with
   mt_load_report_free) says what was done, or which entry failed. */
mt_status mt_ckpt_load_names(const mt_safetensors *st, const char *path, mt_params *P,
                             const mt_load_spec *spec, mt_load_report *report, mt_err *err);
void mt_load_report_free(mt_load_report *r);
/* The report in one or two lines (the second: the file's tensors the model does not read and
   the config values that differ):
   "loaded 14 of 16 tensors (0.209M numbers) from F; left at their initialisation: a, b". */
void mt_load_report_describe(const mt_load_report *r, const mt_params *P, const char *path,
                             char *buf, size_t len);

/* ---- checkpoints ----------------------------------------------------------------------------
 * <out>/model.safetensors: every entry of the model's parameter table by its name, and the
 * __metadata__ strings
 *   model      the model type's name (a file without it holds the first registered type)
 *   config     the model config (mt_model_config_json): the resolved values the model computes
 *   <meta_key> what the model reads inputs with (type->meta_to_json), e.g. "tokenizer"
 *   step       training steps taken
 *   rng        the sampler's and the dropout RNG's states, 8 hex u64 "s0 s1 s2 s3 d0 d1 d2 d3"
 *   options    the training options as config-file lines (what a resume starts from)
 * <out>/optim.safetensors: the optimizer state (mt_optim_save), taken at the same step. */
typedef struct {
    long step;
    mt_rng sampler, dropout;
} mt_ckpt_state;

mt_status mt_ckpt_save(const char *path, const mt_model *m, const mt_ckpt_state *state,
                       const char *options, mt_err *err);
/* Builds *m from the checkpoint's model type and config and loads its weights (names and shapes
   checked, errors name the tensor) and what it reads inputs with; fills state and options
   (malloc'd) when not NULL. */
mt_status mt_ckpt_load(const char *path, mt_model **m, mt_ckpt_state *state, char **options,
                       mt_err *err);
/* The same from a safetensors file already read (path names it in messages). The model's
   tensors are checked against its config before anything is allocated. */
mt_status mt_ckpt_parse(const mt_safetensors *st, const char *path, mt_model **m,
                        mt_ckpt_state *state, char **options, mt_err *err);

/* The weights of the checkpoint at path into m, a model built (and initialised) from a run's
   own config, by name: every tensor of m but those the globs skip (mt_load_spec.skip) must be
   in the file with m's shape; the file's other tensors are reported, not read. The file must
   hold a model of m's type that reads its inputs as m does (the same tokenizer, image
   normalisation: its meta JSON), or be another program's file an importer reads (below; its
   config is then what the type's import makes of it, its inputs are the run's). A tensor that
   is missing or of another shape is refused (MT_EINVAL) naming the tensor, both shapes and,
   where one config value of the file's would make it fit, that value and its flag ("n_embd is
   64 in the file, 32 here: --n-embd 64").
   m is unchanged on an error; report as mt_ckpt_load_names'. */
mt_status mt_ckpt_init_from(const char *path, mt_model *m, const char *skip, mt_load_report *report,
                            mt_err *err);

/* ---- importers: other programs' model files -------------------------------------------------
 * An importer reads its format into named float tensors (an mt_safetensors in memory, under the
 * format's own names) and the file's shape (mt_import_arch); a model type's `import` turns the
 * shape into its config lines and a name map of the format's names. mt_ckpt_init_from reads an
 * imported file as a checkpoint of that config (the tokenizer is the run's, from its data).
 *
 * llama2.c's model.bin (llama2c.c): export.py's version 0 (seven int32, a negative vocab_size
 * for an unshared classifier), 1 (magic "ak42", float32) and 2 (int8 Q8_0 groups, dequantized),
 * under model.py's names (tok_embeddings.weight, layers.{i}.attention.wq.weight, ...). A file
 * with the magic, or named *.bin, is read as one. */
bool mt_llama2c_is(const char *path);
/* The header alone, checked against the file's length. */
mt_status mt_llama2c_arch(const char *path, mt_import_arch *arch, mt_err *err);
mt_status mt_llama2c_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err);

/* llm.c's gpt2_124M.bin (llmc.c): train_gpt2.py's write_model, versions 3 (float32) and 5
 * (bfloat16, widened), a 1024-byte header with magic 20240326, wte padded to padded_vocab_size
 * rows (only the first vocab_size are read); under train_gpt2.py's names (transformer.wte.weight,
 * transformer.h.{i}.mlp.c_fc.weight, ...), c_attn's weight and bias as their thirds
 * transformer.h.{i}.attn.c_attn.{q,k,v}.{weight,bias}. A file with the magic is read as one. */
bool mt_llmc_is(const char *path);
mt_status mt_llmc_arch(const char *path, mt_import_arch *arch, mt_err *err);
mt_status mt_llmc_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err);
/* GGUF (gguf.c, src/io/gguf.h), version 2 or 3, of llama.cpp's "llama" architecture: the
 * hyperparameters from the metadata (llama.block_count, embedding_length, feed_forward_length,
 * attention.head_count, head_count_kv, context_length, layer_norm_rms_epsilon, rope.freq_base),
 * the vocabulary's size from token_embd.weight, tied when output.weight is absent; the tensors
 * under GGUF's names (blk.{i}.attn_q.weight, ...) in torch's shapes (the file's dims reversed),
 * F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K dequantized to float32. Refused (MT_EINVAL) naming
 * it: another architecture, a tensor type not read, experts, RoPE scaling. A file with the magic
 * "GGUF", or named *.gguf, is read as one. */
bool mt_gguf_is(const char *path);
/* The header, the metadata and the tensor infos alone, checked against the file's length. */
mt_status mt_gguf_arch(const char *path, mt_import_arch *arch, mt_err *err);
mt_status mt_gguf_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err);
/* The vocabulary of a GGUF llama's metadata as it is written (mt_gguf_tokenizer makes a tokenizer
   of it). */
typedef struct {
    char model[32]; /* tokenizer.ggml.model: "llama" (SentencePiece, by score), "gpt2" (BPE) */
    int n;          /* tokens, the model's vocabulary */
    char **tokens;  /* (n) tokenizer.ggml.tokens as spelled (U+2581 for a space in llama's,
                        "<0x0A>"; U+0120 in gpt2's) */
    float *scores;  /* (n) tokenizer.ggml.scores; NULL: absent */
    int32_t *types; /* (n) tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user,
                        5 unused, 6 byte); NULL: absent */
    int n_merges;   /* tokenizer.ggml.merges, "left right" in rank order (gpt2) */
    char **merges;
    int bos, eos; /* tokenizer.ggml.bos_token_id, eos_token_id; -1: absent */
} mt_gguf_vocab;
mt_status mt_gguf_vocab_read(const char *path, mt_gguf_vocab *v, mt_err *err);
void mt_gguf_vocab_free(mt_gguf_vocab *v);

/* A Hugging Face checkpoint (hf.c): a directory with config.json and model.safetensors, or
 * model.safetensors.index.json and the shards its weight_map names (save_pretrained's), or a
 * *.safetensors inside one, of architectures[0] LlamaForCausalLM (hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, rms_norm_eps,
 * rope_theta, max_position_embeddings, vocab_size, tie_word_embeddings) or GPT2LMHeadModel
 * (n_embd, n_layer, n_head, n_positions, vocab_size, layer_norm_epsilon), F32, F16 and BF16
 * tensors widened; under GGUF's names (a Llama, q_proj's and k_proj's rows permuted from HF's
 * rotate_half RoPE to mt's adjacent pairs) and llm.c's (a GPT-2, Conv1D's weights transposed).
 * Refused (MT_EINVAL) naming the key: rope_scaling, attention_bias, mlp_bias, a hidden_act but
 * silu, an activation_function but gelu_new, another architecture. */
bool mt_hf_is(const char *path);
/* The tokenizer.json beside a Hugging Face checkpoint's config.json (path: the checkpoint) into
   buf; false (buf undefined) when there is none. */
bool mt_hf_tokenizer_json(const char *path, char *buf, size_t len);
mt_status mt_hf_arch(const char *path, mt_import_arch *arch, mt_err *err);
mt_status mt_hf_read(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err);
/* The inverse (./export --format hf): m, whose type's export described it as a (a Llama: format
 * MT_IMPORT_GGUF; a GPT-2: MT_IMPORT_LLMC), as dir/config.json and dir/model.safetensors (F32,
 * metadata format pt), HF's names and layouts: its tensors named by its type's import map of a,
 * each of mt_hf_read's conversions inverted, so that mt_hf_read gives back every number. dir is
 * created; nothing is written (MT_EINVAL) when a tensor is missing or left over; each file is
 * written atomically, the weights first and config.json (removed before) last. */
mt_status mt_hf_write(const char *dir, const mt_model *m, const mt_import_arch *a, mt_err *err);

/* What ./train layers under its options for --init-from path: an imported file's architecture
   as config lines, "model = gpt" first (malloc'd); NULL for an mt checkpoint, whose run's own
   flags build the model. */
mt_status mt_ckpt_import_options(const char *path, char **lines, mt_err *err);

#endif
