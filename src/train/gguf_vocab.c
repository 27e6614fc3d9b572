/* A GGUF file's vocabulary as mt's tokenizer JSON (train.h, mt_gguf_tokenizer): src/ckpt reads
   the file's keys (mt_gguf_vocab_read), src/data checks a byte-level BPE one
   (mt_gpt2_from_vocab); the trainer and --prepare hand the JSON to the task. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../ckpt/ckpt.h"
#include "../data/data.h"
#include "../io/io.h"
#include "train.h"

/* A SentencePiece vocabulary's pieces (U+2581 as ' ') and scores as {"type": "sp", ...}. */
static char *sp_json(const mt_gguf_vocab *v) {
    static const char SPACE[] = "\xe2\x96\x81"; /* U+2581 */
    cJSON *o = cJSON_CreateObject(), *pieces = cJSON_CreateArray(), *scores = cJSON_CreateArray();
    int max_len = 0;
    for (int i = 0; i < v->n; i++) {
        char *piece = strdup(v->tokens[i]), *to = piece;
        for (const char *p = v->tokens[i]; piece && *p;) /* fewer bytes, never more */
            if (strncmp(p, SPACE, 3) == 0) *to++ = ' ', p += 3;
            else *to++ = *p++;
        if (!piece) break;
        *to = 0;
        max_len = (int)(to - piece) > max_len ? (int)(to - piece) : max_len;
        cJSON_AddItemToArray(pieces, cJSON_CreateString(piece));
        cJSON_AddItemToArray(scores, cJSON_CreateNumber(v->scores ? v->scores[i] : 0));
        free(piece);
    }
    cJSON_AddStringToObject(o, "type", "sp");
    cJSON_AddNumberToObject(o, "max_len", max_len);
    cJSON_AddItemToObject(o, "pieces", pieces);
    cJSON_AddItemToObject(o, "scores", scores);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

/* A gpt2 (byte-level BPE) vocabulary of GPT-2's ids as mt's gpt2 tokenizer's JSON. */
static mt_status gpt2_json(const char *path, mt_gguf_vocab *v, char **json, mt_err *err) {
    mt_tokenizer t;
    mt_status s = mt_gpt2_from_vocab(path, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                     v->n, v->merges, v->n_merges, &t, err);
    if (s != MT_OK) return s;
    *json = mt_tok_to_json(&t);
    mt_tok_free(&t);
    return MT_OK;
}

mt_status mt_gguf_tokenizer(const char *path, const char *kind, char **json, mt_err *err) {
    *json = NULL;
    if (!mt_gguf_is(path)) return MT_OK;
    mt_gguf_vocab v;
    mt_status s = mt_gguf_vocab_read(path, &v, err);
    if (s != MT_OK) return s;
    bool spm = strcmp(v.model, "llama") == 0, gpt2 = strcmp(v.model, "gpt2") == 0;
    if (strcmp(kind, spm ? "sp" : gpt2 ? "gpt2" : "") != 0)
        s = mt_errorf(err, MT_EINVAL,
                      "--tokenizer %s --tokenizer-file %s: its vocabulary is tokenizer.ggml.model "
                      "'%s'; mt reads a GGUF's SentencePiece vocabulary ('llama', --tokenizer "
                      "sp) and its GPT-2 byte-level BPE one ('gpt2', --tokenizer gpt2)",
                      kind, path, v.model);
    else if (gpt2) s = gpt2_json(path, &v, json, err);
    else if (!(*json = sp_json(&v)))
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for its vocabulary", path);
    mt_gguf_vocab_free(&v);
    return s;
}
