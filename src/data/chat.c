/* mt's chat template (data.h): a conversation's turns encoded piece by piece. */
#include <string.h>

#include "data.h"

static const char *const HEADERS[] = {[MT_CHAT_SYSTEM] = "<|system|>\n",
                                      [MT_CHAT_USER] = "<|user|>\n",
                                      [MT_CHAT_ASSISTANT] = "<|assistant|>\n"};

int mt_chat_role_of(const char *name) {
    static const char *const NAMES[] =
        {[MT_CHAT_SYSTEM] = "system", [MT_CHAT_USER] = "user", [MT_CHAT_ASSISTANT] = "assistant"};
    for (int r = 0; r < 3; r++)
        if (strcmp(name, NAMES[r]) == 0) return r;
    return -1;
}

/* Per turn: its header, content and end pieces, at most 4 ids each but the content's bytes (an
   sp piece takes a dummy prefix more than its bytes); the reply's header; BOS. */
size_t mt_chat_room(const mt_chat_turn *turns, int n_turns) {
    size_t n = 1 + 32;
    for (int i = 0; i < n_turns; i++) n += turns[i].len + 3 + 32;
    return n;
}

/* A piece encoded after the *n ids so far, marked trained or not. */
static mt_status piece(const mt_tokenizer *t, const char *text, bool trained, uint16_t *ids,
                       uint8_t *mask, size_t *n, mt_err *err) {
    size_t k = 0;
    mt_status s = mt_tok_encode(t, text, strlen(text), ids + *n, &k, err);
    if (s == MT_OK && mask) memset(mask + *n, trained, k);
    *n += k;
    return s;
}

mt_status mt_chat_encode(const mt_tokenizer *t, const mt_chat_turn *turns, int n_turns, bool reply,
                         uint16_t *ids, uint8_t *trained, size_t *n, mt_err *err) {
    *n = 0;
    if (t->kind == MT_TOK_SP) { /* BOS, as run.c starts a prompt */
        ids[0] = 1;
        if (trained) trained[0] = 0;
        *n = 1;
    }
    mt_status s = MT_OK;
    for (int i = 0; i < n_turns && s == MT_OK; i++) {
        bool said = turns[i].role == MT_CHAT_ASSISTANT;
        size_t k = 0;
        s = piece(t, HEADERS[turns[i].role], false, ids, trained, n, err);
        if (s == MT_OK) s = mt_tok_encode(t, turns[i].text, turns[i].len, ids + *n, &k, err);
        if (s == MT_OK && trained) memset(trained + *n, said, k);
        *n += k;
        if (s == MT_OK && said) s = piece(t, MT_CHAT_END, true, ids, trained, n, err);
        if (s == MT_OK) s = piece(t, "\n", false, ids, trained, n, err);
    }
    if (s == MT_OK && reply) s = piece(t, HEADERS[MT_CHAT_ASSISTANT], false, ids, trained, n, err);
    return s;
}
