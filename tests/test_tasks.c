/* Tasks apart from models (src/tasks/task.h): a second language model, a bigram table defined
   here and in no registry, trains on the text task through the trainer as the GPT does, which
   is what a new model type takes (docs/design.md, "Add a model"); --task picks a task of the
   model's kind of input and refuses the others. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_tasks_XXXXXX";

/* ---- the bigram model: logits (B T, V) = table[ids], one row per token ----------------------- */
typedef struct {
    mt_stack_config stack; /* every config starts with it (its training-loss terms) */
    int n_ctx, n_vocab;
} bigram_config;

typedef struct {
    mt_model base;
    bigram_config cfg;
    mt_params P;
    mt_tokenizer tok;
} bigram;

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(bigram_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_ctx, INT, "n_ctx", "context length (tokens)", .range = "1.."),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(stack, TABLE, "stack", NULL, .of = &MT_STACK_FIELDS),
};
#undef F
static const mt_fields BIGRAM_FIELDS = MT_FIELDS_OF(FIELDS);

static void config_default(void *cfg) {
    *(bigram_config *)cfg = (bigram_config){.stack = mt_stack_default(), .n_ctx = 16};
}

static mt_status config_validate(void *cfgp, mt_err *err) {
    const bigram_config *cfg = cfgp;
    if (cfg->n_ctx < 1 || cfg->n_vocab < 1)
        return mt_errorf(err, MT_EINVAL, "bigram: n_ctx %d, n_vocab %d: expected 1 or more",
                         cfg->n_ctx, cfg->n_vocab);
    return MT_OK;
}

static void config_describe(const void *cfg, char *buf, size_t len) {
    snprintf(buf, len, "bigram, vocabulary %d", ((const bigram_config *)cfg)->n_vocab);
}

static double activation_bytes(const void *cfgp, int B, bool training) {
    const bigram_config *cfg = cfgp;
    return (training ? 2.0 : 1.0) * 3 * B * cfg->n_ctx * cfg->n_vocab * sizeof(float);
}

static mt_status build_table(void *mp, const void *cfg, mt_err *err) {
    bigram *m = mp;
    memset(m, 0, sizeof *m);
    m->cfg = *(const bigram_config *)cfg;
    mt_status s = config_validate(&m->cfg, err);
    if (s != MT_OK) return s;
    m->base = (mt_model){.cfg = &m->cfg, .P = &m->P};
    mt_tok_init_byte(&m->tok);
    mt_params_init_table(&m->P);
    int V = m->cfg.n_vocab;
    mt_params_add(&m->P, "table", 2, (int[]){V, V}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 0.02f);
    return MT_OK;
}

static void type_free(mt_model *mp) {
    bigram *m = (bigram *)mp;
    mt_params_free(&m->P);
    mt_tok_free(&m->tok);
}

static char *meta_to_json(const mt_model *m) { return mt_tok_to_json(&((const bigram *)m)->tok); }

static mt_status meta_from_json(mt_model *mp, const char *json, mt_err *err) {
    bigram *m = (bigram *)mp;
    mt_tok_free(&m->tok);
    return mt_tok_from_json(json, &m->tok, err);
}

static void meta_describe(const mt_model *m, char *buf, size_t len) {
    snprintf(buf, len, "vocabulary %d", ((const bigram *)m)->tok.n_vocab);
}

/* The last batch the model saw (the sft test reads the rows a task hands it). */
static mt_batch seen;

static mt_tensor *loss(mt_ctx *c, const mt_model *m, mt_params *P, const mt_batch *b,
                       mt_ce_opts ce) {
    MT_ASSERT(b->kind == MT_INPUT_TOKENS, "bigram: a batch of another kind of input");
    const mt_token_rows *r = &b->tokens;
    (void)m;
    seen = *b;
    mt_tensor *logits = mt_embedding(c, &P->t[0], r->ids, b->B * r->T);
    return mt_cross_entropy(c, logits, r->targets, -1, ce);
}

static const mt_input INPUT = {.kind = MT_INPUT_TOKENS,
                               .n_ctx = offsetof(bigram_config, n_ctx),
                               .n_vocab = offsetof(bigram_config, n_vocab)};

static const mt_model_type BIGRAM = {
    .name = "bigram",
    .about = "a bigram table (test_tasks.c)",
    .input = &INPUT,
    .meta_key = "tokenizer",
    .config_size = sizeof(bigram_config),
    .fields = &BIGRAM_FIELDS,
    .config_default = config_default,
    .config_validate = config_validate,
    .config_describe = config_describe,
    .activation_bytes = activation_bytes,
    .size = sizeof(bigram),
    .build_table = build_table,
    .free = type_free,
    .meta_to_json = meta_to_json,
    .meta_from_json = meta_from_json,
    .meta_describe = meta_describe,
    .loss = loss,
};

/* ---- the tests ------------------------------------------------------------------------------- */

/* The bigram trained 200 steps on tinyshakespeare by characters: the text task sets its
   vocabulary, and the validation loss falls from log V (a uniform guess) towards the bigram
   entropy of English letters (~2.5 nats). */
static void test_bigram_trains(void) {
    bigram_config cfg;
    config_default(&cfg);
    mt_train_cfg tc = {.model = &BIGRAM,
                       .model_cfg = &cfg,
                       .data = {.path = "data/tinyshakespeare.txt",
                                .tokenizer = MT_TOK_CHAR,
                                .val_fraction = 0.1,
                                .eval_batches = 4},
                       .seed = 3,
                       .steps = 200,
                       .batch = 16};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_optim_config oc = mt_optim_defaults();
    oc.sched.lr = 0.1;
    mt_trainer tr;
    mt_err e;
    CHECK(mt_trainer_init(&tr, &tc, &oc, &e) == MT_OK, "trainer: %s", e.msg);
    if (!tr.model) return;
    CHECK(tr.task->type == &mt_text_task, "the default task of tokens: %s", tr.task->type->name);
    int V = ((const bigram_config *)tr.model->cfg)->n_vocab;
    CHECK(V == 65, "the text task set n_vocab %d, want tinyshakespeare's 65 characters", V);
    double first = mt_trainer_eval(&tr);
    for (int s = 0; s < tc.steps; s++) {
        mt_step_stats st;
        mt_trainer_step(&tr, &st);
    }
    double last = mt_trainer_eval(&tr);
    CHECK(fabs(first - log(V)) < 0.05, "validation loss at init %.3f, log V %.3f", first, log(V));
    CHECK(last < 2.8, "validation loss %.3f after %d steps (init %.3f)", last, tc.steps, first);
    mt_trainer_free(&tr);
}

/* --task: the default is the first task of the model's kind; a task of another kind is refused
   naming the ones that would do, and so is an unknown name. */
static void test_find(void) {
    const mt_task_type *t = NULL;
    mt_err e;
    CHECK(mt_task_find(NULL, &BIGRAM, &t, &e) == MT_OK && t == &mt_text_task, "default");
    CHECK(mt_task_find("text", &BIGRAM, &t, &e) == MT_OK && t == &mt_text_task, "by name");
    CHECK(mt_task_find("", &mt_vit_type, &t, &e) == MT_OK && t == &mt_image_task, "vit");
    CHECK(mt_task_find(NULL, &mt_encdec_type, &t, &e) == MT_OK && t == &mt_g2p_task, "encdec");
    CHECK(mt_task_find("images", &BIGRAM, &t, &e) == MT_EINVAL &&
              strstr(e.msg, "--task images: --model bigram takes another kind of input") &&
              strstr(e.msg, "(accepted: text, sft)"),
          "another kind: %s", e.msg);
    CHECK(mt_task_find("g2p", &mt_gpt_type, &t, &e) == MT_EINVAL && strstr(e.msg, "--task g2p"),
          "g2p for the gpt: %s", e.msg);
    CHECK(mt_task_find("speech", &mt_gpt_type, &t, &e) == MT_EINVAL &&
              strstr(e.msg, "--task speech: unknown (accepted for --model gpt: text, sft)"),
          "unknown: %s", e.msg);
    /* the trainer refuses a task of another kind too */
    bigram_config cfg;
    config_default(&cfg);
    mt_train_cfg tc = {.model = &BIGRAM,
                       .model_cfg = &cfg,
                       .task = &mt_image_task,
                       .data = {.path = "data/tinyshakespeare.txt", .eval_batches = 1},
                       .steps = 1,
                       .batch = 1};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    mt_optim_config oc = mt_optim_defaults();
    mt_trainer tr;
    CHECK(mt_trainer_init(&tr, &tc, &oc, &e) == MT_EINVAL && strstr(e.msg, "--task images"),
          "trainer: %s", e.msg);
    mt_trainer_free(&tr);
}

/* --task sft on the bigram: a conversation's row is mt's chat template's bytes, its targets the
   assistants' content and "<|end|>" alone; the loss of a batch is the mean over its trained
   targets however the trainer slices it; bad lines are refused naming their line. */
static void test_sft(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/conv.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs(
        "{\"prompt\": \"2+2\", \"response\": \"4\"}\n\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": \"user\", "
        "\"content\": \"c\"}, {\"role\": \"assistant\", \"content\": \"dd\"}]}\n"
        "{\"prompt\": \"Say hi\", \"response\": \"Hello there!\"}\n"
        "{\"prompt\": \"hi\", \"response\": \"yo\"}\n",
        f);
    fclose(f);
    bigram_config cfg;
    config_default(&cfg);
    cfg.n_ctx = 96;
    mt_train_cfg tc = {.model = &BIGRAM,
                       .model_cfg = &cfg,
                       .task = &mt_sft_task,
                       .data = {.tokenizer = MT_TOK_BYTE, .val_fraction = 0.25, .eval_batches = 1},
                       .seed = 3,
                       .steps = 1,
                       .batch = 4};
    snprintf(tc.out, sizeof tc.out, "%s", dir);
    snprintf(tc.data.path, sizeof tc.data.path, "%s", path);
    mt_optim_config oc = mt_optim_defaults();
    mt_trainer tr;
    mt_err e;
    CHECK(mt_trainer_init(&tr, &tc, &oc, &e) == MT_OK, "trainer: %s", e.msg);
    if (!tr.model) return;
    const mt_task_type *t = tr.task->type;
    /* the validation conversation (the last line), as the template writes it */
    const char *text = "<|user|>\nhi\n<|assistant|>\nyo<|end|>\n";
    int n = (int)strlen(text), first = (int)(strstr(text, "yo") - text);
    CHECK(t->eval_count(tr.task) == 1 && t->eval_draw(tr.task, 0) == 1, "one validation row");
    mt_eval_sums sums = {0};
    t->eval_rows(&tr.ctx, tr.model, tr.task, 0, 1, &sums);
    for (int i = 0; i < seen.tokens.T; i++) {
        int x = i < n - 1 ? (unsigned char)text[i] : 0;
        int y = i + 1 >= first && i + 1 < n - 1 ? (unsigned char)text[i + 1] : -1;
        CHECK(seen.tokens.ids[i] == x && seen.tokens.targets[i] == y,
              "position %d: input %d target %d, want %d %d", i, seen.tokens.ids[i],
              seen.tokens.targets[i], x, y);
    }
    /* a drawn batch's loss as one slice, and as slices 1 and 3 weighed by rows */
    mt_rng r;
    mt_rng_seed(&r, 5);
    t->draw_batch(tr.task, &r);
    mt_ctx_reset(&tr.ctx);
    double whole = t->rows_loss(&tr.ctx, tr.model, tr.model->P, tr.task, 0, 4)->data[0];
    double trained = 0, nll = 0;
    const float *table = tr.model->P->data + tr.model->P->p[0].offset;
    int V = ((const bigram_config *)tr.model->cfg)->n_vocab;
    for (int i = 0; i < 4 * seen.tokens.T; i++) { /* -log softmax(table[x])[y], by hand */
        int y = seen.tokens.targets[i];
        if (y < 0) continue;
        const float *row = table + (size_t)seen.tokens.ids[i] * V;
        double z = 0;
        for (int v = 0; v < V; v++) z += exp(row[v]);
        nll += log(z) - row[y], trained++;
    }
    double a = t->rows_loss(&tr.ctx, tr.model, tr.model->P, tr.task, 0, 1)->data[0];
    double b = t->rows_loss(&tr.ctx, tr.model, tr.model->P, tr.task, 1, 3)->data[0];
    CHECK(fabs(whole - nll / trained) < 1e-5,
          "the batch's loss %.7f, its trained targets' mean "
          "%.7f",
          whole, nll / trained);
    CHECK(fabs(a * 1 / 4 + b * 3 / 4 - whole) < 1e-5, "slices %.7f and %.7f, the whole %.7f", a, b,
          whole);
    char *meta = tr.model->type->meta_to_json(tr.model);
    CHECK(meta && strstr(meta, "\"chat_template\""), "the checkpoint's tokenizer: %s", meta);
    free(meta);
    mt_trainer_free(&tr);
    /* refused: a line of neither form (its number), a conversation longer than a row, nothing */
    const char *bad[][2] =
        {{"{\"prompt\": \"a\"}\n", "conv.jsonl:1: expected {\"prompt\""},
         {"\n{\"prompt\": \"a\", \"response\": \"b\"}\n[1]\n", "conv.jsonl:3:"},
         {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n",
          "with an assistant's turn"},
         {"{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}\n", "conv.jsonl:1:"},
         {"{\"prompt\": \"a\", \"response\": \"" /* 103 tokens */
          "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
          "\"}\n",
          "the conversation is 103 tokens with the chat template; a row holds "
          "n_ctx + 1 = 97"},
         {"\n \n", "holds no conversation"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        f = fopen(path, "w");
        fputs(bad[k][0], f);
        fclose(f);
        config_default(&cfg);
        cfg.n_ctx = 96;
        mt_status s = mt_trainer_init(&tr, &tc, &oc, &e);
        CHECK(s != MT_OK && strstr(e.msg, bad[k][1]), "%s: %s", bad[k][0], e.msg);
        mt_trainer_free(&tr);
    }
    unlink(path);
}

int main(void) {
    mt_set_threads(1);
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_find();
    test_bigram_trains();
    test_sft();
    rmdir(dir);
    return check_finish("test_tasks");
}
