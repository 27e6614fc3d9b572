/* Checkpoint and token-file loaders against files that disagree with themselves: a config that
 * is not an object or holds bad values, tensors missing, extra, of another shape or dtype, a
 * config claiming a huge model (refused before any allocation), malformed state, a truncated
 * file; each is refused with a message naming the problem, and nothing is kept. Loading by name:
 * a name map, skip globs, the report, strictness; and a model started from a checkpoint's
 * weights (--init-from): a shape-changing config value named with its flag. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_ckpt_XXXXXX";
static char path[256];
static mt_tokenizer tok;
static char *tok_json;

static mt_gpt_config tiny(bool tied) {
    mt_gpt_config c = mt_gpt_config_default();
    c.stack.n_layer = 1;
    c.stack.n_head = 2;
    c.stack.n_embd = 8;
    c.n_ctx = 4;
    c.n_vocab = 5;
    c.tied = tied;
    return c;
}

/* Writes the parameters of a model built from c with the given metadata (NULL: left out). */
static void write_ckpt(mt_gpt_config c, const char *config, const char *tokj, const char *step,
                       const char *rng) {
    mt_gpt m;
    mt_err e;
    CHECK(mt_gpt_build(&m, &c, &e) == MT_OK, "build: %s", e.msg);
    const char *keys[4], *vals[4];
    int n = 0;
    const char *k[] = {"config", "tokenizer", "step", "rng"}, *v[] = {config, tokj, step, rng};
    for (int i = 0; i < 4; i++)
        if (v[i]) keys[n] = k[i], vals[n++] = v[i];
    CHECK(mt_ckpt_save_params(path, &m.P, n, keys, vals, &e) == MT_OK, "save: %s", e.msg);
    mt_gpt_free(&m);
}

/* The checkpoint at path is refused with status want and a message holding expect. */
static void refused(const char *what, mt_status want, const char *expect) {
    mt_model *m = (mt_model *)&m;
    mt_ckpt_state st;
    mt_err e;
    mt_status s = mt_ckpt_load(path, &m, &st, NULL, &e);
    CHECK(s == want && strstr(e.msg, expect) && strstr(e.msg, path),
          "%s: status %d (want %d), message: %s", what, s, want, e.msg);
    CHECK(m == NULL, "%s: something was kept", what);
}

static const char *RNG = "1 2 3 4 5 6 7 8";

static void test_gpt_checkpoints(void) {
    mt_gpt_config c = tiny(true);
    /* cfg: the GPT config (about 800 bytes) and a key or two more */
    char *good = mt_fields_to_json(mt_gpt_type.fields, &c), cfg[2048];
    write_ckpt(c, good, tok_json, "3", RNG);
    mt_model *m;
    mt_ckpt_state st;
    mt_err e;
    CHECK(mt_ckpt_load(path, &m, &st, NULL, &e) == MT_OK && st.step == 3, "good: %s", e.msg);
    mt_model_free(m);
    /* a checkpoint from before the LLaMA options (no arch, pos, rope_theta, n_kv_head,
       ff_multiple keys) loads as the GPT it was: learned positions, GELU, every head its keys */
    write_ckpt(c,
               "{\"n_ctx\": 4, \"n_vocab\": 5, \"tied\": true, \"n_layer\": 1, "
               "\"n_head\": 2, \"n_embd\": 8, \"norm\": \"ln\", \"act\": \"gelu\"}",
               tok_json, "3", RNG);
    CHECK(mt_ckpt_load(path, &m, &st, NULL, &e) == MT_OK, "old config: %s", e.msg);
    if (m) {
        const mt_gpt_config *g = &mt_gpt_of(m)->cfg;
        CHECK(g->arch == MT_ARCH_GPT && g->pos == MT_POS_LEARNED && g->stack.act == MT_ACT_GELU &&
                  g->stack.bias && mt_params_find(&mt_gpt_of(m)->P, "pos_emb.weight") >= 0,
              "an old config loads as a GPT with learned positions and GELU");
        mt_model_free(m);
    }

    struct {
        const char *what, *config, *expect;
    } configs[] = {
        {"rope_theta 0", "{\"rope_theta\": 0}", "rope_theta = 0, must be a finite number > 0"},
        {"pos unknown", "{\"pos\": \"alibi\"}", "alibi"},
        {"n_kv_head not dividing n_head", "{\"n_kv_head\": 3}",
         "n_kv_head = 3 does not divide n_head = 2"},
        {"ff_multiple 0", "{\"ff_multiple\": 0}", "ff_multiple = 0, must be at least 1"},
        {"config an array", "[1, 2]", "config: not a JSON object"},
        {"config a number", "7", "config: not a JSON object"},
        {"config not JSON", "{\"n_layer\": ", "config: not a JSON object"},
        {"wrong type", "{\"n_layer\": \"one\"}", "config: n_layer must be a number"},
        {"fraction", "{\"n_layer\": 1.5}", "n_layer = 1.5, must be a whole number"},
        {"unknown key", "{\"n_layers\": 1}", "config: unknown key 'n_layers'"},
        {"n_head does not divide n_embd", "{\"n_head\": 3}", "n_head = 3 does not divide n_embd"},
        {"negative n_embd", "{\"n_embd\": -8}", "n_embd = -8, must be at least 1"},
        {"dropout", "{\"dropout\": 2}", "dropout = 2, must be in [0, 1)"},
        {"label smoothing", "{\"label_smoothing\": 1}", "label_smoothing = 1, must be in [0, 1)"},
        {"beyond an int", "{\"n_ctx\": 3e9}", "n_ctx = 3e+09, must be a whole number within +-1e9"},
        {"4 n_embd beyond an int", "{\"n_embd\": 536870912, \"n_head\": 1, \"n_ff\": 0}",
         "4 n_embd (the default n_ff) overflows an int"},
    };
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        /* the good config with the case's keys merged in (or the case's text alone) */
        if (configs[i].config[0] == '{' && strchr(configs[i].config, '}'))
            snprintf(cfg, sizeof cfg, "%.*s, %s", (int)strlen(good) - 1, good,
                     configs[i].config + 1);
        else snprintf(cfg, sizeof cfg, "%s", configs[i].config);
        write_ckpt(c, cfg, tok_json, "3", RNG);
        refused(configs[i].what, MT_EFORMAT, configs[i].expect);
    }

    write_ckpt(c, good, "42", "3", RNG);
    refused("tokenizer not an object", MT_EFORMAT, "tokenizer: expected {\"type\"");
    write_ckpt(c, good, "{\"type\": \"char\", \"chars\": [97, 98]}", "3", RNG);
    refused("tokenizer of another vocabulary", MT_EFORMAT,
            "the config has n_vocab 5, the tokenizer 2");
    write_ckpt(c, NULL, NULL, "3", RNG);
    refused("no metadata", MT_EFORMAT, "not an mt checkpoint of a gpt model");
    write_ckpt(c, good, tok_json, "-3", RNG);
    refused("negative step", MT_EFORMAT, "'step' and 'rng'");
    write_ckpt(c, good, tok_json, "3", "1 2 3");
    refused("short rng", MT_EFORMAT, "'step' and 'rng'");

    /* tensors: the file of an untied model under a tied config has one too many, and the other
       way round one is missing */
    write_ckpt(tiny(false), good, tok_json, "3", RNG);
    refused("extra tensor", MT_EFORMAT, "tensor 'lm_head.weight' is not a parameter of the model");
    mt_gpt_config u = tiny(false);
    char *untied = mt_fields_to_json(mt_gpt_type.fields, &u);
    write_ckpt(c, untied, tok_json, "3", RNG);
    refused("missing tensor", MT_EFORMAT, "tensor 'lm_head.weight' (5, 8) is missing");
    free(untied);
    mt_gpt_config wide = c;
    wide.stack.n_embd = 16;
    write_ckpt(wide, good, tok_json, "3", RNG);
    refused("shape", MT_EFORMAT, "'tok_emb.weight' has shape (5, 16), the model needs (5, 8)");

    /* a config claiming a huge model over a tiny file: refused before allocating it */
    snprintf(cfg, sizeof cfg, "%.*s, \"n_embd\": 536870912, \"n_head\": 1, \"n_ff\": 8}",
             (int)strlen(good) - 1, good);
    write_ckpt(c, cfg, tok_json, "3", RNG);
    refused("huge n_embd", MT_EFORMAT,
            "'tok_emb.weight' has shape (5, 8), the model needs (5, 536870912)");
    snprintf(cfg, sizeof cfg, "%.*s, \"n_layer\": 900000000}", (int)strlen(good) - 1, good);
    write_ckpt(c, cfg, tok_json, "3", RNG);
    refused("huge n_layer", MT_EFORMAT, "the config has n_layer 900000000, the file only");

    /* dtype: F16 in place of F32 (same length: the offsets stay valid) */
    write_ckpt(c, good, tok_json, "3", RNG);
    FILE *f = fopen(path, "rb");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *dt = memmem(buf, n, "\"F32\"", 5);
    CHECK(dt, "no dtype in the header");
    if (dt) memcpy(dt, "\"F16\"", 5);
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    refused("dtype", MT_EFORMAT, "F16");
    /* truncated: the data section cut short */
    f = fopen(path, "wb");
    if (dt) memcpy(dt, "\"F32\"", 5);
    fwrite(buf, 1, n - 7, f);
    fclose(f);
    refused("truncated", MT_EFORMAT, "");

    /* a checkpoint of a model type mt does not know */
    write_ckpt(c, good, tok_json, "3", RNG);
    mt_safetensors sf;
    CHECK(mt_st_load(path, &sf, &e) == MT_OK, "st");
    const char *keys[] = {"model", "config", "tokenizer"}, *vals[] = {"rnn", good, tok_json};
    mt_gpt g;
    CHECK(mt_gpt_build(&g, &c, &e) == MT_OK, "build");
    CHECK(mt_ckpt_save_params(path, &g.P, 3, keys, vals, &e) == MT_OK, "save");
    mt_gpt_free(&g);
    mt_st_free(&sf);
    refused("unknown model", MT_EFORMAT, "unknown model 'rnn' (accepted: gpt");

    /* RoPE: n_ctx sizes no tensor, so the file cannot bound it; a config claiming 1e8 positions
       loads in a moment and small memory (the cos and sin are tabled as positions are used: the
       table of every position took 10 s and 1.6 GB here) */
    mt_gpt_config r = c;
    r.pos = MT_POS_ROPE;
    char *rope = mt_fields_to_json(mt_gpt_type.fields, &r);
    snprintf(cfg, sizeof cfg, "%.*s, \"n_ctx\": 100000000}", (int)strlen(rope) - 1, rope);
    write_ckpt(r, cfg, tok_json, "3", RNG);
    double t0 = mt_clock();
    struct rusage ru;
    CHECK(mt_ckpt_load(path, &m, &st, NULL, &e) == MT_OK, "rope, n_ctx 1e8: %s", e.msg);
    mt_model_free(m);
    getrusage(RUSAGE_SELF, &ru);
    CHECK(mt_clock() - t0 < 2 && ru.ru_maxrss < 500 * 1024,
          "rope, n_ctx 1e8: loaded in %.1f s, peak RSS %ld KiB", mt_clock() - t0, ru.ru_maxrss);
    free(rope);

    /* a weight that is not a finite number (in a file whose checksums hold) is named */
    const char *k4[] = {"config", "tokenizer", "step", "rng"}, *v4[] = {good, tok_json, "3", RNG};
    const float non_finite[] = {NAN, -INFINITY};
    const char *said[] = {"tensor 'tok_emb.weight' holds nan at index 5",
                          "tensor 'tok_emb.weight' holds -inf at index 5"};
    for (int k = 0; k < 2; k++) {
        CHECK(mt_gpt_build(&g, &c, &e) == MT_OK, "build");
        g.P.data[g.P.p[mt_params_find(&g.P, "tok_emb.weight")].offset + 5] = non_finite[k];
        CHECK(mt_ckpt_save_params(path, &g.P, 4, k4, v4, &e) == MT_OK, "save");
        mt_gpt_free(&g);
        refused("a non-finite weight", MT_EFORMAT, said[k]);
    }
    free(good);
}

/* A table of the given entries (names, 2-D shapes), each element its entry's index + fill. */
static void table(mt_params *P, int n, const char *const *names, const int (*shape)[2],
                  float fill) {
    mt_params_init_table(P);
    for (int i = 0; i < n; i++)
        mt_params_add(P, names[i], 2, shape[i], MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(P, NULL) == MT_OK, "alloc");
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < P->p[i].n; k++) P->data[P->p[i].offset + k] = (float)i + fill;
}

/* The value of every element of P's entry name, NAN when they differ. */
static float value_of(const mt_params *P, const char *name) {
    const mt_param *p = &P->p[mt_params_find(P, name)];
    for (size_t k = 1; k < p->n; k++)
        if (P->data[p->offset + k] != P->data[p->offset]) return NAN;
    return P->data[p->offset];
}

static void test_load_names(void) {
    /* the file: another program's names, one tensor the model does not read */
    const char *fnames[] = {"emb", "h.0.mat", "h.1.mat", "head.bias", "extra"};
    const int fshape[][2] = {{4, 3}, {3, 3}, {3, 3}, {1, 2}, {5, 1}};
    mt_params F;
    table(&F, 5, fnames, fshape, 100); /* emb 100, h.0.mat 101, ... */
    mt_err e;
    CHECK(mt_ckpt_save_params(path, &F, 0, NULL, NULL, &e) == MT_OK, "save: %s", e.msg);
    mt_safetensors st;
    CHECK(mt_st_load(path, &st, &e) == MT_OK, "load: %s", e.msg);
    const char *names[] = {"tok.weight", "blocks.0.w", "blocks.1.w", "head.bias"};
    const int shape[][2] = {{4, 3}, {3, 3}, {3, 3}, {1, 2}};
    const mt_name_rule map[] = {{"tok.weight", "emb"}, {"blocks.*.w", "h.*.mat"}};
    mt_params P;
    mt_load_report r;
    char line[512];

    /* the map: every entry read from its file name, the extra tensor reported */
    table(&P, 4, names, shape, 0);
    mt_load_spec spec = {.map = map, .n_map = 2};
    CHECK(mt_ckpt_load_names(&st, "F", &P, &spec, &r, &e) == MT_OK, "map: %s", e.msg);
    CHECK(value_of(&P, "tok.weight") == 100 && value_of(&P, "blocks.0.w") == 101 &&
              value_of(&P, "blocks.1.w") == 102 && value_of(&P, "head.bias") == 103,
          "map: the entries hold %g %g %g %g", value_of(&P, "tok.weight"),
          value_of(&P, "blocks.0.w"), value_of(&P, "blocks.1.w"), value_of(&P, "head.bias"));
    CHECK(r.loaded == 4 && r.skipped == 0 && r.loaded_floats == 12 + 9 + 9 + 2 && r.n_unused == 1 &&
              !strcmp(r.unused[0], "extra") && r.failed == -1,
          "map: report %d loaded, %d skipped, %d unused", r.loaded, r.skipped, r.n_unused);
    mt_load_report_describe(&r, &P, "F", line, sizeof line);
    CHECK(!strcmp(line, "loaded 4 of 4 tensors (0.000M numbers) from F\n"
                        "not read: the file's 1 tensor extra"),
          "map: described as %s", line);
    mt_load_report_free(&r);
    mt_params_free(&P);

    /* skip globs: those entries keep their values, the others are read */
    table(&P, 4, names, shape, 0);
    spec.skip = "blocks.1.*,head.*";
    CHECK(mt_ckpt_load_names(&st, "F", &P, &spec, &r, &e) == MT_OK, "skip: %s", e.msg);
    CHECK(value_of(&P, "tok.weight") == 100 && value_of(&P, "blocks.0.w") == 101 &&
              value_of(&P, "blocks.1.w") == 2 && value_of(&P, "head.bias") == 3,
          "skip: the entries hold %g %g %g %g", value_of(&P, "tok.weight"),
          value_of(&P, "blocks.0.w"), value_of(&P, "blocks.1.w"), value_of(&P, "head.bias"));
    CHECK(r.loaded == 2 && r.skipped == 2 && r.is_skipped[2] && r.is_skipped[3] &&
              !r.is_skipped[0] && r.n_unused == 1,
          "skip: report %d loaded, %d skipped, %d unused", r.loaded, r.skipped, r.n_unused);
    mt_load_report_describe(&r, &P, "F", line, sizeof line);
    CHECK(strstr(line, "loaded 2 of 4 tensors") &&
              strstr(line, "left at their initialisation: blocks.1.w, head.bias"),
          "skip: described as %s", line);
    mt_load_report_free(&r);
    /* a glob that matches nothing is refused, naming it */
    spec.skip = "blocks.*,lm_head.*";
    CHECK(mt_ckpt_load_names(&st, "F", &P, &spec, &r, &e) == MT_EINVAL &&
              strstr(e.msg, "skip glob 'lm_head.*' matches no tensor of the model"),
          "a glob of nothing: %s", e.msg);
    mt_load_report_free(&r);
    mt_params_free(&P);

    /* without the map: the first entry is missing, named with its shape; nothing is written */
    table(&P, 4, names, shape, 0);
    spec = (mt_load_spec){0};
    CHECK(mt_ckpt_load_names(&st, "F", &P, &spec, &r, &e) == MT_EFORMAT &&
              strstr(e.msg, "F: tensor 'tok.weight' (4, 3) is missing") && r.failed == 0,
          "missing: %s (failed %d)", e.msg, r.failed);
    mt_load_report_free(&r);
    /* a shape that differs, after an entry that matches: both shapes and the file's name */
    const char *later[] = {"head.bias", "blocks.0.w"};
    const int wrong[][2] = {{1, 2}, {3, 4}};
    mt_params Q;
    table(&Q, 2, later, wrong, 0);
    spec = (mt_load_spec){.map = map, .n_map = 2};
    CHECK(mt_ckpt_load_names(&st, "F", &Q, &spec, &r, &e) == MT_EFORMAT &&
              strstr(e.msg, "tensor 'blocks.0.w' (the file's 'h.0.mat' by the name map) has "
                            "shape (3, 3), the model needs (3, 4)") &&
              r.failed == 1,
          "shape: %s (failed %d)", e.msg, r.failed);
    CHECK(value_of(&Q, "head.bias") == 0, "shape: an entry was written before the refusal");
    mt_load_report_free(&r);
    mt_params_free(&Q);
    /* strict (a checkpoint): what the model does not read is refused */
    spec = (mt_load_spec){.map = map, .n_map = 2, .exact = true};
    CHECK(mt_ckpt_load_names(&st, "F", &P, &spec, &r, &e) == MT_EFORMAT &&
              strstr(e.msg, "tensor 'extra' is not a parameter of the model"),
          "exact: %s", e.msg);
    CHECK(value_of(&P, "tok.weight") == 0, "exact: an entry was written before the refusal");
    mt_load_report_free(&r);
    mt_params_free(&P);
    mt_st_free(&st);
    mt_params_free(&F);
}

/* A GPT of config c with the char tokenizer of the 5 characters chars. */
static void build_char(mt_gpt *m, mt_gpt_config c, const char *chars) {
    mt_err e;
    CHECK(mt_gpt_build(m, &c, &e) == MT_OK, "build: %s", e.msg);
    mt_tok_free(&m->tok);
    CHECK(mt_tok_build_char(&m->tok, chars, 5, &e) == MT_OK, "tokenizer: %s", e.msg);
}

/* A GPT started from a checkpoint of another: the same config loads, skip globs keep their
   initialisation, another n_embd is refused naming the value and the flag, and nothing moves. */
static void test_init_from(void) {
    mt_gpt_config c = tiny(true);
    mt_gpt a, b;
    mt_err e;
    mt_rng r;
    build_char(&a, c, "abcde");
    mt_rng_seed(&r, 1);
    mt_params_initialize(&a.P, &r);
    mt_ckpt_state state = {0};
    CHECK(mt_ckpt_save(path, &a.base, &state, "", &e) == MT_OK, "save: %s", e.msg);
    c.stack.dropout = 0.1f; /* not a shape: loads, and the report says it differs */
    build_char(&b, c, "abcde");
    mt_load_report rep;
    CHECK(mt_ckpt_init_from(path, &b.base, "blocks.0.ffn.*", &rep, &e) == MT_OK, "init: %s", e.msg);
    int skipped = 0;
    for (int i = 0; i < b.P.n; i++) {
        const mt_param *p = &b.P.p[i];
        bool same = !memcmp(b.P.data + p->offset, a.P.data + p->offset, p->n * sizeof(float));
        bool skip = !strncmp(p->name, "blocks.0.ffn.", 13);
        skipped += skip;
        CHECK(skip ? !same || p->role == MT_ROLE_BIAS : same, "init: %s %s the file's", p->name,
              same ? "equals" : "differs from");
    }
    CHECK(skipped > 0 && rep.skipped == skipped && rep.loaded == b.P.n - skipped &&
              strstr(rep.differs, "dropout 0 (here 0.1)"),
          "init: report %d loaded, %d skipped, differs '%s'", rep.loaded, rep.skipped, rep.differs);
    mt_load_report_free(&rep);
    mt_gpt_free(&b);
    /* another width: refused with the value and flag that fit, b's weights untouched */
    c.stack.n_embd = 16;
    build_char(&b, c, "abcde");
    b.P.data[0] = 7;
    CHECK(mt_ckpt_init_from(path, &b.base, NULL, &rep, &e) == MT_EINVAL &&
              strstr(e.msg, "tensor 'tok_emb.weight' has shape (5, 8), the model needs (5, 16)") &&
              strstr(e.msg, "n_embd is 8 in the file, 16 here (--n-embd 8)") && b.P.data[0] == 7,
          "another width: %s", e.msg);
    mt_load_report_free(&rep);
    mt_gpt_free(&b);
    /* another tokenizer: the weights read other ids */
    c.stack.n_embd = 8;
    build_char(&b, c, "abcdf");
    CHECK(mt_ckpt_init_from(path, &b.base, NULL, &rep, &e) == MT_EINVAL &&
              strstr(e.msg, "the file's tokenizer differs from this run's"),
          "another tokenizer: %s", e.msg);
    mt_load_report_free(&rep);
    mt_gpt_free(&b);
    mt_gpt_free(&a);
}

static void test_tokfile_json(void) {
    /* a token file whose tokenizer JSON is not an object */
    static const uint16_t ids[] = {0, 1, 2, 3};
    mt_tokens d;
    char bin[300];
    snprintf(bin, sizeof bin, "%s/t.bin", dir);
    mt_err e;
    FILE *f = fopen(bin, "wb");
    CHECK(mt_tokens_wrap(&d, ids, 4, 5, 0, &e) == MT_OK && f &&
              mt_tokfile_write(f, bin, &tok, &d, &e) == MT_OK && fclose(f) == 0,
          "write: %s", e.msg);
    mt_tokens_free(&d);
    f = fopen(bin, "r+b");
    fseek(f, 28, SEEK_SET); /* the JSON's '{' */
    fputc('[', f);
    fclose(f);
    mt_tokenizer t;
    mt_tokens d2;
    mt_status s = mt_tokfile_read(bin, &t, &d2, &e);
    CHECK(s == MT_EFORMAT && strstr(e.msg, "tokenizer: expected {\"type\"") && d2.span == NULL,
          "token file with a JSON array: %d %s", s, e.msg);
    unlink(bin);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    mt_err e;
    CHECK(mt_tok_build_char(&tok, "abcde", 5, &e) == MT_OK, "tokenizer");
    tok_json = mt_tok_to_json(&tok);
    test_gpt_checkpoints();
    test_load_names();
    test_init_from();
    test_tokfile_json();
    free(tok_json);
    mt_tok_free(&tok);
    unlink(path);
    rmdir(dir);
    return check_finish("test_ckpt");
}
