/* mt data: tokenizers, text and token datasets, the batch sampler.
 * Dimension letters: B batch, T time (n_ctx), V vocabulary. Token ids are uint16 in datasets
 * (V <= 65536) and int where the model takes them. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include "../tensor/tensor.h"

/* ---- tokenizers ---------------------------------------------------------------------------------
 * byte: every byte is a token (V = 256), any input, nothing to train.
 * char: one token per Unicode character of the UTF-8 training text (V = its distinct characters,
 * ids in code point order); the vocabulary travels in the checkpoint. A character outside it is
 * an error that names the character and where it is (there is no fallback token). */
typedef enum { MT_TOK_BYTE, MT_TOK_CHAR } mt_tok_kind;

typedef struct {
    mt_tok_kind kind;
    int n_vocab;
    uint32_t *chars; /* char: the code point of each id, ascending (malloc'd); NULL for byte */
} mt_tokenizer;

void mt_tok_init_byte(mt_tokenizer *t);
/* The char vocabulary of len bytes of UTF-8 text (invalid UTF-8 is an error with its offset). */
mt_status mt_tok_build_char(mt_tokenizer *t, const char *text, size_t len, mt_err *err);
/* Encodes len bytes of text into ids (room for len ids: never more than one per byte);
   *n receives the count. */
mt_status mt_tok_encode(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                        size_t *n, mt_err *err);
/* The bytes of token id (0 <= id < V) into out; returns their count (1 to 4). */
int mt_tok_decode(const mt_tokenizer *t, int id, char out[4]);
/* {"type":"byte"} or {"type":"char","chars":[10,32,33,...]} (code points by id); malloc'd. */
char *mt_tok_to_json(const mt_tokenizer *t);
mt_status mt_tok_from_json(const char *json, mt_tokenizer *t, mt_err *err);
const char *mt_tok_name(mt_tok_kind kind); /* "byte", "char" */
void mt_tok_free(mt_tokenizer *t);

/* ---- token datasets ---------------------------------------------------------------------------- */
typedef struct {
    uint16_t *tok; /* n ids < n_vocab; owned by what mt_data_load filled, split views borrow it */
    size_t n;
    int n_vocab;
} mt_tokens;

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

mt_status mt_tokfile_write(const char *path, const mt_tokenizer *tok, const mt_tokens *d,
                           mt_err *err);
/* Reads and checks a token file: magic, version, sizes, the tokenizer, every token < n_vocab. */
mt_status mt_tokfile_read(const char *path, mt_tokenizer *tok, mt_tokens *d, mt_err *err);

/* Loads a dataset. A path ending in ".bin" is a token file and brings its own tokenizer (kind is
   ignored); anything else is UTF-8 (byte: any) text encoded with a new tokenizer of the given
   kind, a char vocabulary being built from the whole text. */
mt_status mt_data_load(const char *path, mt_tok_kind kind, mt_tokenizer *tok, mt_tokens *d,
                       mt_err *err);
void mt_tokens_free(mt_tokens *d);

/* Splits all into train (the first part) and val (the last floor(n * val_fraction) tokens), both
   views into all. Each non-empty split must hold a window of n_ctx + 1 tokens; val_fraction 0
   leaves val empty (no validation). */
mt_status mt_tokens_split(const mt_tokens *all, double val_fraction, int n_ctx, mt_tokens *train,
                          mt_tokens *val, mt_err *err);

/* ---- batch sampler ------------------------------------------------------------------------------
 * B windows of T + 1 consecutive tokens at uniform random starts in [0, n - T - 1]; the state is
 * the RNG alone, so copying the struct saves it and copying it back restores it. */
typedef struct {
    mt_rng rng;
} mt_sampler;

void mt_sampler_init(mt_sampler *s, uint64_t seed);
/* x (B, T): the windows' first T tokens; y (B, T): the next token of each (the window shifted
   by one). d->n >= T + 1. */
void mt_sampler_next(mt_sampler *s, const mt_tokens *d, int B, int T, int *x, int *y);

#endif
