/* ./train's options (src/train/options.h): defaults, layering of the config file and the flags,
 * the model --model names, the optimizer's float bits, the saved text read back. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_options_XXXXXX";

static const char *write_ini(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) != EOF, "cannot write %s", path);
    if (f) fclose(f);
    return path;
}

/* mt_run_options_read of the flags in line ("--a 1 --b ..."). */
static mt_status run(mt_run_options *r, const char *line, mt_err *e) {
    char buf[1024], *argv[64] = {"train"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
    return mt_run_options_read(r, argc, argv, e);
}

static void test_defaults(void) {
    mt_run_options r;
    mt_err e;
    CHECK(run(&r, "", &e) == MT_OK && r.train.model == mt_model_types[0], "defaults: %s", e.msg);
    /* the optimizer's numbers are the floats the flags were: 3e-3f, its tenth in float */
    CHECK(r.optim.sched.lr == (double)3e-3f && r.optim.sched.min_lr == (double)(3e-3f / 10) &&
              r.optim.sched.warmup == 100 && r.optim.beta2 == (double)0.99f &&
              r.optim.eps == (double)1e-8f && r.optim.weight_decay == (double)0.1f &&
              r.optim.sched.kind == MT_SCHED_COSINE,
          "optimizer defaults: lr %.17g min_lr %.17g warmup %ld", r.optim.sched.lr,
          r.optim.sched.min_lr, r.optim.sched.warmup);
    CHECK(r.train.steps == 1000 && r.train.batch == 32 && r.train.data.resize &&
              r.train.data.bad_images == MT_BAD_IMAGES_SKIP && r.train.data.eval_batches == 20,
          "training and data defaults");
    CHECK(strncmp(r.train.options,
                  "model = gpt\ndata = data/tinyshakespeare.txt\ntokenizer = byte\n", 60) == 0 &&
              !strstr(r.train.options, "min-lr") && !strstr(r.train.options, "\nwarmup =") &&
              strstr(r.train.options, "\nn-layer = 4\n") &&
              strstr(r.train.options, "\nuntie = false\n") && !strstr(r.train.options, "resume") &&
              !strstr(r.train.options, "n-vocab"),
          "saved:\n%s", r.train.options);
    mt_run_options_free(&r);
    CHECK(run(&r, "--schedule const --lr 1e-3 --steps 50 --no-resize --bad-images reject", &e) ==
                  MT_OK &&
              r.optim.sched.min_lr == 0 && r.optim.sched.warmup == 5 &&
              r.optim.sched.lr == (double)1e-3f && !r.train.data.resize &&
              r.train.data.bad_images == MT_BAD_IMAGES_REJECT,
          "const schedule: min_lr %g warmup %ld (%s)", r.optim.sched.min_lr, r.optim.sched.warmup,
          e.msg);
    mt_run_options_free(&r);
}

static void test_layers(void) {
    mt_run_options r;
    mt_err e;
    char line[512];
    const char *ini = write_ini("a.ini", "model = vit\npatch = 4\nsteps = 7\nn_layer = 3\n");
    snprintf(line, sizeof line, "--config %s --steps 9 --n-layer 2 --pool mean", ini);
    CHECK(run(&r, line, &e) == MT_OK && strcmp(r.train.model->name, "vit") == 0 &&
              r.train.steps == 9,
          "a config file under flags: %s", e.msg);
    char *json = r.train.model ? mt_fields_to_json(r.train.model->fields, r.train.model_cfg)
                               : strdup("");
    CHECK(strstr(json, "\"patch\":4") && strstr(json, "\"n_layer\":2") &&
              strstr(json, "\"pool\":\"mean\""),
          "the vit config: %s", json);
    free(json);
    /* the saved text, read as a config file, gives the same run */
    mt_run_options again;
    snprintf(line, sizeof line, "--config %s", write_ini("saved.ini", r.train.options));
    CHECK(run(&again, line, &e) == MT_OK && strcmp(again.train.options, r.train.options) == 0,
          "saved text read back: %s", e.msg);
    char *a = mt_fields_to_json(r.train.model->fields, r.train.model_cfg),
         *b = again.train.model
                  ? mt_fields_to_json(again.train.model->fields, again.train.model_cfg)
                  : strdup("");
    CHECK(strcmp(a, b) == 0, "the config read back: %s vs %s", a, b);
    free(a);
    free(b);
    mt_run_options_free(&again);
    mt_run_options_free(&r);
    struct {
        const char *line, *expect;
    } bad[] = {
        {"--model vit --n-ctx 8",
         "--n-ctx: refused for --model vit: it is an option of --model gpt"},
        {"--n-ctx 8 --model vit", "--n-ctx: refused for --model vit"},
        {"--model nope", "nope"},
        {"--patchh 3", "unknown flag --patchh (did you mean --patch?)"},
        {"--warmup -2", "--warmup: -2 is out of range: expected at least 0"},
        {"--min-lr -1", "--min-lr: '-1' is retired: older builds saved it for the default"},
        {"--schedule const --min-lr 1e-4",
         "--min-lr 1e-4: this run does not read it (only --schedule cosine, linear or wsd"},
        {"--vocab-size 512", "--vocab-size 512: this run does not read it (only --tokenizer bpe"},
        {"--config /nonexistent/x.ini", "cannot open"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(run(&r, bad[i].line, &e) == MT_EINVAL && strstr(e.msg, bad[i].expect), "'%s': %s",
              bad[i].line, e.msg);
        mt_run_options_free(&r);
    }
    snprintf(line, sizeof line, "--config %s",
             write_ini("b.ini", "model = vit\n\n# gpt's\nn-ctx = 8\n"));
    CHECK(run(&r, line, &e) == MT_EINVAL &&
              strstr(e.msg, "b.ini:4: key 'n-ctx': refused for --model vit"),
          "another model's key in a file: %s", e.msg);
    mt_run_options_free(&r);
    snprintf(line, sizeof line, "--config %s", write_ini("c.ini", "resume = true\n"));
    CHECK(run(&r, line, &e) == MT_EINVAL && strstr(e.msg, "'resume' is a command-line flag only"),
          "a command-line flag in a file: %s", e.msg);
    mt_run_options_free(&r);
}

/* min_lr and warmup: derived where no option gives them, saved only when given; a run whose
   options resolve the same is the same run (the trainer's --out check) */
static void test_derived(void) {
    mt_run_options r;
    mt_err e;
    CHECK(run(&r, "--warmup 30 --steps 100", &e) == MT_OK && r.optim.sched.warmup == 30 &&
              strstr(r.train.options, "\nwarmup = 30\n") && !strstr(r.train.options, "min-lr"),
          "a given warmup: %s", e.msg);
    mt_run_options_free(&r);
    char line[512];
    snprintf(line, sizeof line, "--config %s --warmup= --steps 50",
             write_ini("d.ini", "warmup = 7\nmin-lr = 1e-4\n"));
    CHECK(run(&r, line, &e) == MT_OK && r.optim.sched.warmup == 5 &&
              r.optim.sched.min_lr == (double)1e-4f && !strstr(r.train.options, "warmup =") &&
              strstr(r.train.options, "\nmin-lr = 0.0001\n"),
          "--warmup= over a file's: derived (%ld): %s", r.optim.sched.warmup, e.msg);
    mt_run_options_free(&r);
    snprintf(line, sizeof line, "--config %s --schedule const --min-lr=",
             write_ini("d.ini", "warmup = 7\nmin-lr = 1e-4\n"));
    CHECK(run(&r, line, &e) == MT_OK && r.optim.sched.min_lr == 0,
          "a file's min-lr that a flag replaces is not refused: %s", e.msg);
    mt_run_options_free(&r);
    CHECK(run(&r, "", &e) == MT_OK, "defaults: %s", e.msg);
    char *plain = mt_run_options_resolved(r.train.options);
    const char *same[] = {"\nwarmup = 100\n", "\nwarmup = -1\nmin-lr = -1\n",
                          "\nmin-lr = 0.0003\n"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        char *text, *resolved;
        CHECK(asprintf(&text, "%s%s", r.train.options, same[i]) > 0, "asprintf");
        resolved = mt_run_options_resolved(text);
        CHECK(plain && resolved && strcmp(plain, resolved) == 0, "'%s' is the derived value",
              same[i]);
        free(resolved);
        free(text);
    }
    char *text, *resolved;
    CHECK(asprintf(&text, "%swarmup = 50\n", r.train.options) > 0, "asprintf");
    resolved = mt_run_options_resolved(text);
    CHECK(resolved && strcmp(plain, resolved) != 0 && strstr(resolved, "\nwarmup = 50\n"),
          "another warmup is another run");
    free(resolved);
    free(text);
    free(plain);
    mt_run_options_free(&r);
}

static void test_help(void) {
    mt_run_options r;
    mt_err e;
    CHECK(run(&r, "--help --n-ctx 3", &e) == MT_OK && r.help && !r.train.model, "--help: %s",
          e.msg);
    mt_run_options_free(&r);
    char *help = mt_run_options_help();
    const char *in_order[] = {"  --model S ",
                              "  --lr X ",
                              "  --diag-batch N ",
                              "  --help ",
                              "the block stack (every model):\n  --n-layer N ",
                              "--model gpt: ",
                              "  --n-ctx N ",
                              "--model vit: ",
                              "  --patch N ",
                              "--model encdec: "};
    const char *at = help;
    for (size_t i = 0; i < sizeof in_order / sizeof *in_order; i++) {
        const char *hit = strstr(at, in_order[i]);
        CHECK(hit, "help: '%s' missing or out of order", in_order[i]);
        if (hit) at = hit;
    }
    /* a flag is listed once: the encoder-decoder's --untie is the GPT's */
    const char *untie = strstr(help, "--untie");
    CHECK(untie && !strstr(untie + 1, "--untie"), "--untie listed twice");
    free(help);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_defaults();
    test_layers();
    test_derived();
    test_help();
    const char *files[] = {"a.ini", "b.ini", "c.ini", "d.ini", "saved.ini"};
    for (int i = 0; i < 5; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    return check_finish("test_options");
}
