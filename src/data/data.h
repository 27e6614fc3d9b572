/* mt data: tokenizers, text and token datasets, the batch sampler, image datasets.
 * Dimension letters: B batch, T time (n_ctx), V vocabulary. Token ids are uint16 in datasets
 * (V <= 65536) and int where the model takes them. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stdio.h>

#include "../tensor/base.h"
#include "../tensor/tensor.h"

/* ---- tokenizers ---------------------------------------------------------------------------------
 * byte: every byte is a token (V = 256), any input, nothing to train.
 * char: one token per Unicode character of the UTF-8 training text (V = its distinct characters,
 * ids in code point order); the vocabulary travels in the checkpoint. A character outside it is
 * an error that names the character and where it is (there is no fallback token).
 * bpe: byte-level byte-pair encoding (Sennrich et al. 2016, byte-level as GPT-2's). Ids 0..255
 * are the bytes, so any input encodes; id 256 + k is merge k, the concatenation of two earlier
 * tokens, learnt from a text (bpe.c: the pre-tokenizer, the training and its tie rule). The
 * merges travel in the checkpoint.
 * ids: no text at all: the ids of token shards that bring no tokenizer (llm.c's, nanoGPT's: their
 * ids are GPT-2's); id i decodes to "<i>" and encoding text is an error.
 * sp: llama2.c's tokenizer.bin (Llama 2's SentencePiece pieces and scores, --tokenizer-file),
 * encoded as llama2.c's run.c encodes (sp.c: merge by score, byte fallback, the dummy-prefix
 * space), or Hugging Face's tokenizer.json of a Llama, the same pieces encoded as HF's BPE does
 * (merge by rank); the pieces and scores (and the merges) travel in the checkpoint.
 * gpt2: GPT-2's byte-level BPE (OpenAI's encoder.json and vocab.bpe, --tokenizer-file), encoded
 * as GPT-2's encoder.py encodes (gpt2.c: its regex pre-tokenizer, then bpe.c's merges by rank).
 * GPT-2's ids: 0..255 the bytes in bytes_to_unicode's order, 256 + k merge k, then the special
 * tokens (<|endoftext|>, 50256); the merges and specials travel in the checkpoint. */
typedef enum {
    MT_TOK_BYTE,
    MT_TOK_CHAR,
    MT_TOK_BPE,
    MT_TOK_IDS,
    MT_TOK_SP,
    MT_TOK_GPT2
} mt_tok_kind;

#define MT_BPE_MIN_VOCAB 257   /* the 256 bytes and a merge */
#define MT_BPE_MAX_VOCAB 65536 /* 16-bit ids */
#define MT_TOK_MAX_BYTES 128   /* the longest token (GPT-2's longest has 128 bytes) */
#define MT_BPE_WORD_MAX 64     /* bpe's pre-tokens are cut at 64 bytes: its longest token */

typedef struct mt_bpe_index mt_bpe_index;
typedef struct mt_sp mt_sp;

typedef struct {
    mt_tok_kind kind;
    int n_vocab;
    uint32_t *chars;       /* char: the code point of each id, ascending (malloc'd); else NULL */
    uint16_t (*merges)[2]; /* bpe, gpt2: n_merges merges, merge k makes id 256 + k of the ids
                              merges[k][0] then merges[k][1] (malloc'd); else NULL */
    int n_merges;          /* bpe: n_vocab - 256; gpt2: n_vocab - 256 - its special tokens */
    uint16_t byte_id[256]; /* bpe, gpt2: the id of each byte (bpe: the byte itself) */
    char *bytes;           /* char, bpe, gpt2: the bytes of id i are bytes[off[i] .. off[i + 1]) */
    uint32_t *off;         /* (n_vocab + 1); both malloc'd, NULL for byte */
    mt_bpe_index *index;   /* bpe, gpt2: (left, right) -> merge, for encoding */
    mt_sp *sp;             /* sp: the pieces, their scores and hash (sp.c) */
    bool chat;             /* a model trained on MT_CHAT_TEMPLATE's text (--task sft) */
} mt_tokenizer;

/* ---- chat.c: mt's chat template, what --task sft trains on and ./infer --chat prompts with --
 * A conversation is its turns' text in order, each turn its role's header, its content and an
 * end: the system's and user's "\n", the assistant's "<|end|>\n". Each piece is encoded on its
 * own (an sp tokenizer's text starts with BOS), so a prompt encodes as the start of a trained
 * conversation does. The assistants' contents and their "<|end|>" are the trained tokens. */
#define MT_CHAT_TEMPLATE                                                                           \
    "<|system|>\n{system}\n<|user|>\n{user}\n<|assistant|>\n{assistant}<|end|>\n"
#define MT_CHAT_END "<|end|>"
typedef enum { MT_CHAT_SYSTEM, MT_CHAT_USER, MT_CHAT_ASSISTANT } mt_chat_role;
typedef struct {
    mt_chat_role role;
    const char *text;
    size_t len;
} mt_chat_turn;
/* The turns' ids into ids (room for mt_chat_room of them), trained[i] 1 for an assistant's
   content and end tokens (trained may be NULL), *n of them; with reply, the next assistant's
   header after them (a prompt). MT_EINVAL when the tokenizer cannot encode them. */
size_t mt_chat_room(const mt_chat_turn *turns, int n_turns);
mt_status mt_chat_encode(const mt_tokenizer *t, const mt_chat_turn *turns, int n_turns, bool reply,
                         uint16_t *ids, uint8_t *trained, size_t *n, mt_err *err);
/* The role of a name ("system", "user", "assistant"); -1 for another. */
int mt_chat_role_of(const char *name);

void mt_tok_init_byte(mt_tokenizer *t);
/* The ids tokenizer of n_vocab ids (1..65536; else MT_EFORMAT). */
mt_status mt_tok_init_ids(mt_tokenizer *t, int n_vocab, mt_err *err);
/* The char vocabulary of len bytes of UTF-8 text (invalid UTF-8 is an error with its offset). */
mt_status mt_tok_build_char(mt_tokenizer *t, const char *text, size_t len, mt_err *err);
/* Learns a bpe vocabulary of at most vocab_size tokens (MT_BPE_MIN_VOCAB..MT_BPE_MAX_VOCAB) from
   len bytes of any text; fewer when no pair of tokens occurs twice any more. Deterministic. */
mt_status mt_tok_build_bpe(mt_tokenizer *t, const char *text, size_t len, int vocab_size,
                           mt_err *err);
/* Encodes len bytes of text into ids (room for len + 1 ids: never more than one per byte, and
   sp's dummy prefix); *n receives the count. */
mt_status mt_tok_encode(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                        size_t *n, mt_err *err);
/* The bytes of token id (0 <= id < V): *len of them (1 to MT_TOK_MAX_BYTES) at the pointer
   returned, which lives as long as t. A char token is a whole UTF-8 character; a bpe token may
   be part of one. */
const char *mt_tok_decode(const mt_tokenizer *t, int id, int *len);
/* id's bytes (0 or more) in a stream where prev (-1: none) came before: sp drops the leading space
   after BOS (run.c's decode); the others as mt_tok_decode. */
const char *mt_tok_decode_after(const mt_tokenizer *t, int prev, int id, int *len);
/* {"type":"byte"}, {"type":"char","chars":[10,32,33,...]} (code points by id),
   {"type":"bpe","merges":[[104,101],[32,116],...]} (merge k: the ids it joins) or
   {"type":"ids","n_vocab":50257} or {"type":"sp","max_len":27,"pieces":["<unk>",...],
   "scores":[0,...]} or {"type":"gpt2","merges":[[220,83],...],"special":["<|endoftext|>"]}
   (GPT-2's ids); malloc'd. */
char *mt_tok_to_json(const mt_tokenizer *t);
mt_status mt_tok_from_json(const char *json, mt_tokenizer *t, mt_err *err);
extern const mt_enum MT_TOKENIZERS; /* "byte", "char", "bpe", "ids", "sp", "gpt2" */
void mt_tok_free(mt_tokenizer *t);

/* sp.c's parts. Reads llama2.c's tokenizer.bin at path (its pieces: 259 to 65536; ids 3..258 the
   byte fallback <0x00>..<0xFF>; a piece " "); a short, truncated or malformed file is
   MT_EFORMAT naming the file and what was expected. Or Hugging Face's tokenizer.json of a Llama
   (a JSON file at path, or a directory holding tokenizer.json): model BPE with byte_fallback,
   its vocab as those pieces (U+2581 as ' '), its merges by rank (HF's BPE: the adjacent pair of
   the lowest rank merges first), the dummy prefix of Prepend + Replace or Metaspace, and
   tokenizer_config.json beside it (add_bos_token, add_eos_token, bos_token <s>, eos_token
   </s>); another model or form is MT_EINVAL naming what it is and what is read. */
mt_status mt_sp_read_llama2c(const char *path, mt_tokenizer *t, mt_err *err);
/* Whether a text's ids start with BOS, end with EOS (tokenizer_config.json's add_bos_token and
   add_eos_token; tokenizer.bin's: true, false as run.c's generate). */
bool mt_sp_add_bos(const mt_tokenizer *t);
/* A training document's ids (ids: room for len + 3): a tokenizer.json's (ranked) as Hugging
   Face's tokenizer(text) gives them, BOS first when add_bos_token, EOS last when add_eos_token;
   tokenizer.bin's (and a GGUF vocabulary's) without BOS or EOS (docs/finetune.md). An empty text:
   no ids. */
void mt_sp_encode_doc(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                      size_t *n);
bool mt_sp_add_eos(const mt_tokenizer *t);
#define MT_SP_BOS 1 /* llama2.c's <s> and </s> */
#define MT_SP_EOS 2
/* run.c's encode(text, bos, eos): room for len + 1 + bos + eos ids. */
void mt_sp_encode(const mt_tokenizer *t, const char *text, size_t len, bool bos, bool eos,
                  uint16_t *ids, size_t *n);
typedef struct cJSON cJSON;
/* Piece id's text as tokenizer.bin holds it (' ' for U+2581, "<0xXX>" for byte fallback) and its
   score; the longest piece's bytes (the file's max_token_length). */
const char *mt_sp_piece(const mt_tokenizer *t, int id, int *len, float *score);
int mt_sp_max_len(const mt_tokenizer *t);
void mt_sp_to_json(const mt_tokenizer *t, cJSON *o);
mt_status mt_sp_from_json(const cJSON *o, mt_tokenizer *t, mt_err *err);
void mt_sp_free(mt_sp *sp); /* NULL: nothing */

/* gpt2.c's parts. Reads GPT-2's encoder.json and vocab.bpe: path is the directory holding both,
   or encoder.json's path with vocab.bpe beside it. A missing file, malformed JSON, a byte token
   out of bytes_to_unicode's order, a merge of an unknown token or one whose result is not the id
   256 + k in encoder.json is MT_EFORMAT (MT_EIO: unreadable) naming the file and the line. Or
   Hugging Face's tokenizer.json (path named so, or a directory holding it and no encoder.json) of
   GPT-2's BPE: model.type BPE, pre_tokenizer ByteLevel, no normalizer (else MT_EINVAL naming
   what it is), model.vocab and model.merges ("a b" or ["a", "b"]) checked as those files are,
   added_tokens ids of model.vocab of their content. */
mt_status mt_gpt2_read(const char *path, mt_tokenizer *t, mt_err *err);
/* The same of a vocabulary given whole (a GGUF's tokenizer.ggml.tokens and merges): str[id] (n
   tokens, bytes as bytes_to_unicode's characters, special tokens as their text) and merges[k]
   "left right" in rank order (n_merges, cut in place), checked as mt_gpt2_read checks its files
   (two ids of one string too); where and vocab (the tokens' list) name them in messages. */
mt_status mt_gpt2_from_vocab(const char *where, const char *vocab, const char *const *str, int n,
                             char **merges, int n_merges, mt_tokenizer *t, mt_err *err);
/* GPT-2's byte order: id_byte[i] is the byte of id i < 256 (bytes_to_unicode's). */
void mt_gpt2_byte_order(uint8_t id_byte[256]);
/* The pre-token that starts at s[i] ends at the returned index (i < end <= len): GPT-2's regex
   on UTF-8 text, an invalid UTF-8 byte a character of its own of the class "other". */
size_t mt_gpt2_pretoken(const unsigned char *s, size_t i, size_t len);
/* Makes t (mt_bpe_from_merges with GPT-2's byte order) a gpt2 tokenizer: appends the n special
   tokens (their texts: 1 to MT_TOK_MAX_BYTES bytes); MT_EFORMAT (t freed) when one is not. */
mt_status mt_gpt2_add_special(mt_tokenizer *t, const char *const *text, int n, mt_err *err);

/* The UTF-8 character at s[*i] (len bytes in s) into *cp, *i advanced; false (nothing moved) on a
   stray continuation byte, a truncated sequence, an overlong form, a surrogate or > U+10FFFF. */
bool mt_utf8_next(const unsigned char *s, size_t len, size_t *i, uint32_t *cp);

/* bpe.c's parts, for tokenizer.c and the tests. The pre-token that starts at s[i] ends at the
   returned index (i < end <= len; end - i <= MT_BPE_WORD_MAX). */
size_t mt_bpe_pretoken(const unsigned char *s, size_t i, size_t len);
/* bpe tokenizer from its merges (n, taken over: freed on failure too; each id below its own, which
   the caller has checked) and the byte of each id < 256 (id_byte; NULL: the id itself): checks
   that no pair comes twice and no token is longer than MT_TOK_MAX_BYTES, and builds the bytes and
   the index. Errors name the merge. */
mt_status mt_bpe_from_merges(mt_tokenizer *t, const uint8_t *id_byte, uint16_t (*merges)[2], int n,
                             mt_err *err);
void mt_bpe_encode(const mt_tokenizer *t, const unsigned char *s, size_t len, uint16_t *ids,
                   size_t *n);
void mt_bpe_index_free(mt_bpe_index *ix); /* NULL: nothing */
/* Frees a bpe or gpt2 tokenizer's parts, leaving t empty (its failure paths'). */
void mt_bpe_clear(mt_tokenizer *t);

/* ---- token datasets ----------------------------------------------------------------------------
 * A dataset is a list of spans of token ids: one span per file of a shard set, mapped read-only
 * (mmap: memory does not grow with the corpus), or one span of a text's ids encoded in memory.
 * Ids are little-endian, `width` bytes each: 2 (uint16) or 4 (llm.c's version 2 shards). */
typedef struct {
    const unsigned char *ids; /* n ids of the dataset's width */
    size_t n;
    const char *path; /* the file, for messages */
    size_t offset;    /* the file offset of ids[0] */
    bool mapped;      /* ids - offset is the start of the file's mapping */
} mt_token_span;

/* What spans point into: the files' mappings, or a text's ids. */
typedef struct {
    int n_files;
    char **path;     /* (n_files) malloc'd */
    void **map;      /* (n_files) the whole file mapped read-only; NULL: not mapped */
    size_t *map_len; /* (n_files) */
    uint16_t *buf;   /* a text's ids (malloc'd) */
} mt_token_store;

typedef struct {
    mt_token_span *span; /* (n_span) malloc'd: each mt_tokens owns its array */
    int n_span;
    int width; /* bytes per id: 2 or 4 */
    size_t n;  /* ids in all spans, each < n_vocab */
    int n_vocab;
    size_t n_val;          /* the last n_val ids are the validation part (mt_data_load) */
    bool val_files;        /* they are the files named *val* of a set (else a fraction) */
    int T;                 /* mt_tokens_split: the windows of T + 1 ids the sampler draws; */
    size_t *win;           /* (n_span + 1) the windows before span i (a window stays in a span) */
    mt_token_store *store; /* what mt_data_load filled owns it; NULL in views */
} mt_tokens;

/* Id i of span s (i < s->n). */
static inline uint32_t mt_span_id(const mt_token_span *s, int width, size_t i) {
    const unsigned char *p = s->ids + i * (size_t)width;
    return width == 2
               ? (uint32_t)(p[0] | p[1] << 8)
               : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A token file (all integers little-endian):
 *   0  magic "MTTOKENS"     8 bytes
 *   8  version              u32 = 1
 *  12  n_vocab              u32, 1..65536
 *  16  count                u64, tokens that follow
 *  24  tokenizer length L   u32
 *  28  the tokenizer JSON   L bytes (mt_tok_to_json)
 *  28+L tokens              count x u16
 * Nothing may follow the tokens. */
#define MT_TOKFILE_MAGIC "MTTOKENS"
#define MT_TOKFILE_VERSION 1u
/* An llm.c shard: a header of 256 int32 (magic 20240520, version 1: uint16 ids or 2: uint32 ids,
   the count of ids; the rest 0), then the ids. */
#define MT_LLMC_MAGIC 20240520
#define MT_LLMC_HEADER 1024

/* Writes d (ids < 65536) with tok's tokenizer as a token file to f (name: for messages); the
   caller opens and closes f (./train: a temporary file renamed over the target). */
mt_status mt_tokfile_write(FILE *f, const char *name, const mt_tokenizer *tok, const mt_tokens *d,
                           mt_err *err);
/* Writes tokens [lo, hi) of d (ids < 65536) as an llm.c shard (version 1) to f. */
mt_status mt_llmc_write(FILE *f, const char *name, const mt_tokens *d, size_t lo, size_t hi,
                        mt_err *err);
/* Reads and checks a token file: magic, version, sizes, the tokenizer, every token < n_vocab. */
mt_status mt_tokfile_read(const char *path, mt_tokenizer *tok, mt_tokens *d, mt_err *err);

/* How mt_data_load reads a text or token shards. */
typedef struct {
    mt_tok_kind kind;
    int vocab_size;             /* bpe: the vocabulary to learn */
    double val_fraction;        /* in [0, 1): the part held out for validation */
    int data_vocab;             /* shards without a tokenizer: their vocabulary; 0: meta.json's */
    const char *tokenizer_file; /* sp: llama2.c's tokenizer.bin or a Llama's tokenizer.json;
                                   gpt2: encoder.json's directory or GPT-2's tokenizer.json */
    const char *tokenizer_json; /* a tokenizer given whole (mt_tok_to_json's form), else NULL */
} mt_text_cfg;

/* True when path names a shard set: a directory, or a pattern (* ? [) that is not a file. */
bool mt_data_is_set(const char *path);
/* True when path names token data (a FILE.bin or a shard set), not a text to tokenize. */
bool mt_data_is_tokens(const char *path);
/* The tokenizer c asks for of a text (byte, char, bpe, sp, gpt2; not ids): c->tokenizer_json's
   when given (of c->kind), else char's alphabet from all len bytes, bpe's merges from the first
   learn (the training part); errors name path (sp, gpt2: their own file). */
mt_status mt_tok_for_text(const mt_text_cfg *c, const char *text, size_t len, size_t learn,
                          const char *path, mt_tokenizer *tok, mt_err *err);

/* Loads a dataset and where its validation part starts (d->n_val).
   A path ending in ".bin", a directory or a glob pattern is token data (shards.c): one file, a
   directory's *.bin files or the pattern's matches (sorted), each an mt token file (it brings its
   tokenizer; c->kind is ignored), an llm.c shard or raw uint16 ids (nanoGPT's train.bin; the
   vocabulary from c->data_vocab or meta.json, docs/data.md), all of one format and width. A set
   of shards named *val* and others holds out the val ones; otherwise the last
   floor(n * val_fraction) tokens are the validation part. Errors name the file and what was
   expected (MT_EFORMAT, MT_EINVAL).
   Anything else is UTF-8 (byte, bpe: any) text, cut in bytes: the validation part is the text's
   last floor(len * val_fraction) bytes (char: from the next character start on), so every
   tokenizer holds out the same text. A new tokenizer of c->kind reads it: char's vocabulary is
   built from the whole text, bpe's learnt from the training part only. The two parts are
   encoded each on its own. An empty text, or one holding a NUL byte (binary), is MT_EINVAL. */
mt_status mt_data_load(const char *path, const mt_text_cfg *c, mt_tokenizer *tok, mt_tokens *d,
                       mt_err *err);
/* shards.c: the token data at path as mt_data_load says. */
mt_status mt_shards_load(const char *path, const mt_text_cfg *c, mt_tokenizer *tok, mt_tokens *d,
                         mt_err *err);
/* Frees d's spans and windows, and its store (files unmapped) when it has one. */
void mt_tokens_free(mt_tokens *d);
/* A one-span dataset of the n uint16 ids at ids (borrowed, not freed), n_val of them held out. */
mt_status mt_tokens_wrap(mt_tokens *d, const uint16_t *ids, size_t n, int n_vocab, size_t n_val,
                         mt_err *err);

/* Splits all into train (the first part) and val (the last all->n_val tokens), both views into
   all (free them with mt_tokens_free), ready to draw windows of n_ctx + 1 ids that stay inside a
   span. Each non-empty split must hold such a window; n_val 0 leaves val empty (no validation). */
mt_status mt_tokens_split(const mt_tokens *all, int n_ctx, mt_tokens *train, mt_tokens *val,
                          mt_err *err);

/* ---- batch sampler ------------------------------------------------------------------------------
 * B windows of T + 1 consecutive tokens at uniform random starts among the windows of the split's
 * spans (one span: [0, n - T - 1]); the state is the RNG alone, so copying the struct saves it
 * and copying it back restores it. A window of a mapped file is copied, then its pages are
 * released from the process (the page cache keeps them): the resident memory stays that of a
 * few windows however many are drawn. */
typedef struct {
    mt_rng rng;
} mt_sampler;

void mt_sampler_init(mt_sampler *s, uint64_t seed);
/* x (B, T): the windows' first T tokens; y (B, T): the next token of each (the window shifted
   by one). d is a split of mt_tokens_split for this T. */
void mt_sampler_next(mt_sampler *s, const mt_tokens *d, int B, int T, int *x, int *y);

/* ---- images ------------------------------------------------------------------------------------
 * An image dataset holds n images of H x W pixels with C channels (1 gray, 3 RGB, 2 and 4 with
 * alpha) as the decoded bytes (n, H, W, C), and a label per image. Batches come out as floats
 * (B, C, H, W), channels first as in torch: x = (pixel / 255 - mean[c]) / std[c], with mean and
 * std per channel computed from the training split (mt_images_normalize_from). */
#define MT_IMG_MAX_C 4
/* The largest height or width of a dataset's images, of the size a loader is asked to resize to
   and of a checkpoint's image metadata: a model's input, never a photo's full resolution (such
   files are read and resized down). It keeps every size computed from them far from overflow. */
#define MT_IMG_MAX_SIDE 65536

typedef struct {
    int n, H, W, C;
    int n_classes;
    uint8_t *pix;       /* (n, H, W, C) */
    int *label;         /* (n), in [0, n_classes) */
    char **class_names; /* (n_classes): folder names, or classes.txt's lines, or "0", "1", ... */
    int n_train;        /* [0, n_train) is the source's training part, [n_train, n) its held-out
                           test part (idx train-* and t10k-* side by side); n when there is none */
    float mean[MT_IMG_MAX_C], std[MT_IMG_MAX_C]; /* 0 and 1 until mt_images_normalize_from */
    int n_skipped;                               /* files left out under skip_bad */
    char *skipped;                               /* "path: reason\n" for each of them, or NULL */
} mt_images;

typedef struct {
    int H, W;      /* target size, at most MT_IMG_MAX_SIDE; 0: the first readable image's */
    int C;         /* 1 to 4; 0: the first readable image's without alpha (4 -> 3, 2 -> 1) */
    bool resize;   /* resize other sizes to H x W; false: an image of another size is mismatched */
    bool skip_bad; /* an unreadable or mismatched file is skipped (listed in .skipped); false:
                      loading fails naming it (--bad-images: mt_bad_images) */
    const char *classes; /* a file of class names, one per line, or NULL: <dir>/classes.txt for
                            idx data when present */
} mt_image_opts;

mt_image_opts mt_image_opts_default(void); /* size and channels of the first image, resize, skip */
/* The values of ./train's --bad-images (skip_bad = value == MT_BAD_IMAGES_SKIP). */
typedef enum { MT_BAD_IMAGES_SKIP, MT_BAD_IMAGES_REJECT } mt_bad_images;

/* Loads path: a directory with one subdirectory per class (names sorted; files in PNG, JPG, BMP,
   TGA, ... as stb_image reads them, sorted by name; dot files ignored), or a directory holding
   MNIST-format files (train-images-idx3-ubyte.gz with train-labels-idx1-ubyte.gz and/or the
   t10k-* pair; gzip or plain), or one such *-images-idx3-ubyte[.gz] file with its labels file.
   Idx images are 1 channel and keep their size unless opts ask for another. A size above
   MT_IMG_MAX_SIDE is MT_EINVAL (asked for) or MT_EFORMAT (the data's own); memory for the images
   that cannot be had is MT_ENOMEM with the size. */
mt_status mt_images_load(const char *path, const mt_image_opts *opts, mt_images *ds, mt_err *err);
void mt_images_free(mt_images *ds);

/* Reads an idx file of unsigned bytes (magic 0 0 8 ndim, big-endian dims, the data; gzip or
   plain), checking the magic, the dims (1 to MT_MAX_DIMS, each > 0) and that the data is exactly
   as long as the dims say. *data is malloc'd. */
mt_status mt_idx_read(const char *path, int *ndim, int dims[MT_MAX_DIMS], uint8_t **data,
                      mt_err *err);

/* The files path names: itself when a file, a directory's regular files (sorted, dot files left
   out) when a directory. *files (n malloc'd paths) is freed by the caller, each and the array. */
mt_status mt_image_files(const char *path, char ***files, int *n, mt_err *err);
/* One image file converted to o->H x o->W x o->C bytes (out), as the loader converts it. An
   unreadable file, or one of no pixels, is MT_EFORMAT naming it. */
mt_status mt_image_read(const char *path, const mt_image_opts *o, uint8_t *out, mt_err *err);
/* src (sh, sw, C) -> dst (dh, dw, C), each axis on its own: bilinear (half-pixel centres) when
   growing, the exact area average of the covered input pixels when shrinking. Sizes from 1 to
   2^24 (stb_image's limit); MT_ENOMEM when its scratch (sh x dw x C floats) cannot be had. */
mt_status mt_image_resize(const uint8_t *src, int sh, int sw, uint8_t *dst, int dh, int dw, int C,
                          mt_err *err);

/* Splits the samples into train and validation: the source's held-out part when it has one
   (val_frac is then ignored), otherwise a seeded random val_frac of them (at least one each).
   idx (n) receives the train indices, then the validation ones, each part in ascending order. */
mt_status mt_images_split(const mt_images *ds, float val_frac, uint64_t seed, int *idx,
                          int *n_train, mt_err *err);
/* Sets ds->mean and ds->std per channel from the n images idx (the training split): population
   statistics of pixel / 255 over every pixel; a constant channel gets std 1. */
void mt_images_normalize_from(mt_images *ds, const int *idx, int n);
/* Normalised floats of one image: pix (H, W, C) -> x (C, H, W). */
void mt_image_to_floats(const uint8_t *pix, int H, int W, int C, const float *mean,
                        const float *std, float *x);
/* x (B, C, H, W) normalised and y (B) labels of the images idx (B); y may be NULL. */
void mt_images_batch(const mt_images *ds, const int *idx, int B, float *x, int *y);

/* What a model trained on ds needs to read new images: {"height", "width", "channels", "mean":
   [...], "std": [...], "classes": [...]}; malloc'd. from_json fills those fields of an empty ds
   (n = 0), checking types, lengths and ranges (height and width up to MT_IMG_MAX_SIDE); errors
   name the key. */
char *mt_images_meta_to_json(const mt_images *ds);
mt_status mt_images_meta_from_json(const char *json, mt_images *ds, mt_err *err);

/* Writes a labelled grid of the n images idx as an RGB PNG: cols = ceil(sqrt(n)) cells per row,
   rows = ceil(n / cols); a cell is the image scaled up scale times (nearest) with a 2-pixel
   border, over a 12-pixel strip with its class name. The PNG is
   cols * (scale W + 4) wide and rows * (scale H + 16) high, at most MT_PREVIEW_MAX_SIDE either
   way (MT_EINVAL beyond: fewer images or a smaller scale). */
#define MT_PREVIEW_MAX_SIDE 16384
mt_status mt_images_preview(const mt_images *ds, const int *idx, int n, int scale,
                            const char *png_path, mt_err *err);

/* ---- pronunciation dictionaries (grapheme-to-phoneme) -------------------------------------------
 * Entries are read from either of two line formats, one entry a line:
 *   festival's CMUdict 0.4: ("hello" nil (((hh ax) 0) ((l ow) 1)))   word, part of speech,
 *                           syllables of phones each with a stress digit;
 *   plain:                  hello hh ax0 l ow1                       word, then its phones.
 * Targets are phones with each syllable's stress digit on its vowel, as CMUdict 0.7b writes
 * them (hh ax0 l ow1): the vowel is the syllable's first phone whose name starts with a, e, i,
 * o or u; a syllable without one (115 in CMUdict 0.4, "blouin": ((b l) 0)) keeps its phones
 * without a digit. Words are lowercased, and all entries of one word (parts of speech, case
 * variants) become one word with its distinct pronunciations. A line that does not parse is
 * skipped and counted (n_skipped, the first few line numbers in skipped): festival's file opens
 * with a line "MNCL" that is no entry. Letters are the bytes 33..126 but '"'; at most
 * MT_G2P_MAX_LEN letters and phones an entry. */
#define MT_G2P_MAX_LEN 64
#define MT_G2P_MAX_PHONES 200 /* distinct phone symbols (with their stress digits) */
typedef char mt_g2p_phone[8];

/* The symbols: letters (sorted bytes) and phones (sorted names). Model token ids: 0 pad, 1 bos,
   2 eos, then the letters, then the phones (MT_G2P_TOK_SPECIAL + n_letters + phone index). */
enum { MT_G2P_PAD, MT_G2P_BOS, MT_G2P_EOS, MT_G2P_TOK_SPECIAL };
typedef struct {
    int n_letters, n_phones;
    char letters[96];
    mt_g2p_phone phones[MT_G2P_MAX_PHONES];
    short base[MT_G2P_MAX_PHONES]; /* the first phone of the same name without its digit */
} mt_g2p_vocab;

typedef struct {
    int n_words;
    char **words;    /* (n_words) sorted, lowercase */
    int *pron_start; /* (n_words + 1) the word's pronunciations [pron_start[w], pron_start[w+1]) */
    int n_prons;
    int *phone_start; /* (n_prons + 1) a pronunciation's phones [phone_start[p], ...[p+1]) */
    int *phones;      /* phone indices into vocab.phones */
    mt_g2p_vocab vocab;
    int n_lines, n_entries, n_skipped;
    char skipped[128]; /* "line 1, ..." of the first skipped lines */
} mt_g2p_dict;

/* Reads a dictionary. vocab NULL: the symbols are those of the file; else the file must use
   vocab's (a model's): a letter or phone outside it is MT_EFORMAT naming it and its line. A
   missing file is MT_EINVAL with a hint (festival's dictionary comes in the package
   festlex-cmu). A file with no entry is MT_EFORMAT. */
mt_status mt_g2p_load(const char *path, const mt_g2p_vocab *vocab, mt_g2p_dict *d, mt_err *err);
void mt_g2p_free(mt_g2p_dict *d);

/* The split by word, the same for every run on the same dictionary: the words shuffled with a
   fixed seed, then 90% train, 5% validation, 5% test (valid and test at least one word each
   when there are 3 or more). idx (n_words) receives train's word indices, then valid's, then
   test's, each part ascending; n[MT_G2P_TRAIN ... MT_G2P_TEST] the part sizes. */
#define MT_G2P_SPLIT_SEED 0x47325053504c4954ULL
/* MT_G2P_SPLITS's values: the three parts, and MT_G2P_ALL, every word (no part). */
typedef enum { MT_G2P_TRAIN, MT_G2P_VALID, MT_G2P_TEST, MT_G2P_ALL } mt_g2p_part;
enum { MT_G2P_PARTS = MT_G2P_ALL }; /* train, valid, test */
void mt_g2p_split(const mt_g2p_dict *d, int *idx, int n[MT_G2P_PARTS]);
extern const mt_enum MT_G2P_SPLITS; /* "train", "valid", "test", "all" */

int mt_g2p_letter_id(const mt_g2p_vocab *v, char ch);         /* token id, -1 when unknown */
int mt_g2p_phone_id(const mt_g2p_vocab *v, const char *name); /* token id, -1 when unknown */
/* A token id's text: a letter, a phone name, "<pad>", "<bos>", "<eos>". */
const char *mt_g2p_token_name(const mt_g2p_vocab *v, int id, char buf[8]);
/* {"letters":"ab...","phones":["aa0",...]}; malloc'd. from_json checks every symbol. */
char *mt_g2p_vocab_to_json(const mt_g2p_vocab *v);
mt_status mt_g2p_vocab_from_json(const char *json, mt_g2p_vocab *v, mt_err *err);
int mt_g2p_vocab_size(const mt_g2p_vocab *v); /* tokens: 3 + letters + phones */

/* Levenshtein distance between id sequences a (na) and b (nb), unit costs. */
int mt_levenshtein(const int *a, int na, const int *b, int nb);

/* Scoring against a word's references (WER, PER as in docs/g2p.md): with stress (ids as they
   are) and without (each phone id mapped to its name's without the digit). */
typedef struct {
    double words, wrong, edits, ref_len; /* summed over words */
} mt_g2p_tally;
/* Adds one predicted phone sequence (token ids, no bos or eos) of word w: wrong when it equals
   none of w's pronunciations; edits and ref_len of the closest (the first at the least distance).
   */
void mt_g2p_tally_add(const mt_g2p_dict *d, int w, const int *pred, int n, mt_g2p_tally t[2]);
double mt_g2p_wer(const mt_g2p_tally *t); /* wrong / words */
double mt_g2p_per(const mt_g2p_tally *t); /* edits / ref_len */

/* Rows of n (word, pronunciation) pairs wp (2 ints each) for a model, in c's arena: src (n, S)
   the letters' ids with S the longest word (MT_G2P_PAD past a word), src_len (n), tgt (n, T)
   bos + phones, targets (n, T) phones + eos (-1 past it) with T the longest pronunciation + 1;
   tokens: the targets not ignored. */
typedef struct {
    int *src, *src_len, *tgt, *targets;
    int S, T, tokens;
} mt_g2p_rows;
mt_g2p_rows mt_g2p_rows_of(mt_ctx *c, const mt_g2p_dict *d, const int *wp, int n);

#endif
