/* Field tables (flags, config files, JSON, help, saved text), parameter checkpoints, the metrics
 * CSV. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_io_XXXXXX";

static char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) != EOF, "cannot write %s", path);
    if (f) fclose(f);
}

/* the options under test: a field of every type, and a table inside */
typedef struct {
    int n_head;
    bool bias; /* negated: --no-bias */
} sub_options;

typedef struct {
    int n_layer;
    long warmup;
    float lr;
    double beta; /* a double holding a float */
    char data[32];
    bool tied;   /* negated: --untie */
    bool resume; /* command line only */
    int norm;
    int n_vocab; /* not a flag: set by the program */
    sub_options sub;
} test_options;

static const mt_enum_item NORM_ITEMS[] = {{.name = "ln"}, {.name = "rms"}, {.name = "prms"}};
static const mt_enum NORMS = MT_ENUM("norm", NORM_ITEMS);

static const mt_field SUB[] = {
    MT_FIELD(sub_options, n_head, INT, "n_head", "heads", .range = "1..16"),
    MT_FIELD(sub_options, bias, BOOL, "bias", "no biases", .flag = "no_bias"),
};
static const mt_fields SUB_FIELDS = MT_FIELDS_OF(SUB);

#define F(member, TYPE, key, help, ...) MT_FIELD(test_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_layer, INT, "n_layer", "blocks"),
    F(warmup, INT, "warmup", "warmup steps; -1: derived", .range = "-1.."),
    F(lr, FLOAT, "lr", "learning rate"),
    F(beta, FLOAT, "beta", "a decay", .range = "0..1"),
    F(data, STR, "data", "text file"),
    F(tied, BOOL, "tied", "separate head", .flag = "untie"),
    F(resume, BOOL, "resume", "continue", .flags = MT_FIELD_CLI),
    F(norm, ENUM, "norm", "normalization", .of = &NORMS),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(sub, TABLE, "sub", NULL, .of = &SUB_FIELDS),
};
#undef F
static const mt_fields TEST_FIELDS = MT_FIELDS_OF(FIELDS);

static test_options o;
static const mt_fieldset SET = {&TEST_FIELDS, &o};

static void defaults(void) {
    o = (test_options){.n_layer = 4,
                       .warmup = -1,
                       .lr = 3e-3f,
                       .beta = 0.9f,
                       .data = "data/x.txt",
                       .tied = true,
                       .n_vocab = 256,
                       .sub = {.n_head = 4, .bias = true}};
}

static mt_status args_to(const mt_fieldset *set, const char *line, mt_settings *out, mt_err *e) {
    char buf[512], *argv[32] = {"prog"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    return mt_fieldset_parse_args(set, 1, argc, argv, out, e);
}
static mt_status args(const char *line, mt_err *e) { return args_to(&SET, line, NULL, e); }
static mt_status ini(const char *text, mt_err *e) {
    return mt_fieldset_parse_ini(&SET, 1, text, "t.ini", NULL, e);
}

static void test_flags(void) {
    mt_err e;
    defaults();
    CHECK(args("--n-layer 6 --lr=1e-4 --data a.txt --untie --norm rms --resume --warmup 7 "
               "--beta 0.95 --n-head 8 --no-bias",
               &e) == MT_OK,
          "flags: %s", e.msg);
    CHECK(o.n_layer == 6 && o.lr == 1e-4f && strcmp(o.data, "a.txt") == 0 && !o.tied &&
              o.norm == 1 && o.resume && o.warmup == 7 && o.sub.n_head == 8 && !o.sub.bias,
          "flag values");
    /* a double field takes the float the text reads as: the bits of a float flag, widened */
    CHECK(o.beta == (double)0.95f && o.beta != 0.95, "--beta 0.95 is %.17g", o.beta);
    char nb[16];
    CHECK(strcmp(mt_field_format(&SUB[1], &o.sub, nb, sizeof nb), "true") == 0 &&
              strcmp(mt_field_format(&FIELDS[5], &o, nb, sizeof nb), "true") == 0,
          "negated bools format as their flags read: %s", nb);
    CHECK(strcmp(mt_field_format(&FIELDS[3], &o, nb, sizeof nb), "0.95") == 0, "beta %s", nb);
    CHECK(args("--untie=false --no_bias=0", &e) == MT_OK && o.tied && o.sub.bias,
          "--untie=false keeps tied: %s", e.msg);
    defaults();
    CHECK(args("--n_layer 7 --resume=false", &e) == MT_OK && o.n_layer == 7 && !o.resume,
          "underscore and bool value");
    struct {
        const char *line, *expect;
    } bad[] = {
        {"--n-layers 3", "unknown flag --n-layers (did you mean --n-layer?)"},
        {"--zzzzzzzzz 3", "unknown flag --zzzzzzzzz; --help"},
        {"--n-layer", "--n-layer needs a value"},
        {"--n-layer 3.5", "--n-layer: '3.5' is not an integer"},
        {"--n-layer 99999999999", "not an integer"},
        {"--warmup 99999999999", "--warmup: '99999999999' is not an integer"},
        {"--warmup -2", "--warmup: -2 is out of range: expected at least -1 (warmup steps; -1: "
                        "derived)"},
        {"--n-head 17", "--n-head: 17 is out of range: expected from 1 to 16 (heads)"},
        {"--beta 1.5", "--beta: 1.5 is out of range: expected from 0 to 1"},
        {"--lr fast", "--lr: 'fast' is not a finite number"},
        {"--lr inf", "not a finite number"},
        {"--norm batch", "--norm: 'batch' is not one of ln|rms|prms"},
        {"--norm", "--norm needs a value: one of ln|rms|prms"},
        {"--untie=maybe", "'maybe' is not true or false"},
        {"--data 0123456789012345678901234567890123", "--data: the value is longer than 31"},
        {"--n-vocab 5", "unknown flag --n-vocab"}, /* set by the program, not a flag */
        {"--tied", "unknown flag --tied (did you mean --untie?)"}, /* the key is not the flag */
        {"stray", "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(args(bad[i].line, &e) == MT_EINVAL && strstr(e.msg, bad[i].expect), "'%s': %s",
              bad[i].line, e.msg);
    }
}

static void test_ini(void) {
    mt_err e;
    defaults();
    write_text(tmp_path("a.ini"), "# a config\n\nn_layer = 8   # deeper\r\n  lr=0.01\n"
                                  "data = \"my data.txt\"\nuntie = yes\nnorm = prms\n"
                                  "n-head = 2\nwarmup = 9\n");
    CHECK(mt_fieldset_read_ini(&SET, 1, tmp_path("a.ini"), NULL, &e) == MT_OK, "ini: %s", e.msg);
    CHECK(o.n_layer == 8 && o.lr == 0.01f && strcmp(o.data, "my data.txt") == 0 && !o.tied &&
              o.norm == 2 && o.sub.n_head == 2 && o.warmup == 9,
          "ini values");
    /* a flag given after the file overrides it */
    CHECK(args("--n-layer 2", &e) == MT_OK && o.n_layer == 2 && o.lr == 0.01f, "override");
    struct {
        const char *text, *expect;
    } bad[] = {
        {"lr = 1\nn-layers = 3\n", "t.ini:2: unknown key 'n-layers' (did you mean n-layer?)"},
        {"[train]\nlr = 1\n", "t.ini:1: '[train]': config files have no sections"},
        {"lr 1\n", "t.ini:1: 'lr 1': expected key = value"},
        {"lr = x\n", "t.ini:1: lr: 'x' is not a finite number"},
        {"\n\nresume = true\n", "t.ini:3: 'resume' is a command-line flag only (--resume), not a "
                                "config key"},
        {"norm = \n", "t.ini:1: norm: '' is not one of"},
        {"n_head = 0\n", "t.ini:1: n-head: 0 is out of range: expected from 1 to 16"},
        {"n_vocab = 5\n", "t.ini:1: unknown key 'n_vocab'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(ini(bad[i].text, &e) == MT_EINVAL && strstr(e.msg, bad[i].expect), "'%s': %s",
              bad[i].text, e.msg);
    CHECK(mt_fieldset_read_ini(&SET, 1, tmp_path("none.ini"), NULL, &e) == MT_EIO &&
              strstr(e.msg, "none.ini"),
          "missing file: %s", e.msg);
}

/* help lists every named option with its default; to_ini round-trips every saved one */
static void test_saved(void) {
    mt_err e;
    defaults();
    o.lr = nextafterf(0.3f, 1); /* a float whose shortest form needs 8 digits */
    char *help = mt_fieldset_help(&SET, 1, NULL, 0);
    CHECK(strstr(help, "--n-layer N") && strstr(help, "(default: 4)") &&
              strstr(help, "--norm ln|rms|prms") && strstr(help, "(default: ln)") &&
              strstr(help, "--data S") && strstr(help, "--resume") && strstr(help, "--untie") &&
              strstr(help, "--n-head N") && strstr(help, "--no-bias") && !strstr(help, "vocab") &&
              !strstr(help, "--tied"),
          "help:\n%s", help);
    free(help);
    o.tied = false;
    o.norm = 1;
    o.warmup = 12;
    o.beta = 0.3f;
    o.sub.bias = false;
    o.n_vocab = 77;
    char *text = mt_fieldset_to_ini(&SET, 1, NULL);
    CHECK(strcmp(text, "n-layer = 4\nwarmup = 12\nlr = 0.30000004\nbeta = 0.3\n"
                       "data = data/x.txt\nuntie = true\nnorm = rms\nn-head = 4\n"
                       "no-bias = true\n") == 0,
          "ini:\n%s", text);
    test_options saved = o;
    defaults();
    CHECK(ini(text, &e) == MT_OK && o.lr == saved.lr && !o.tied && o.norm == 1 && o.warmup == 12 &&
              o.beta == saved.beta && !o.sub.bias && o.n_vocab == 256,
          "to_ini round trip: %s", text);
    free(text);
}

/* JSON both ways: every field but the command-line ones, the inner table's keys among the others */
static void test_json(void) {
    mt_err e;
    defaults();
    o = (test_options){.n_layer = 3,
                       .warmup = 5,
                       .lr = 0.1f,
                       .beta = 0.7f,
                       .data = "d.txt",
                       .tied = false,
                       .resume = true,
                       .norm = 2,
                       .n_vocab = 99,
                       .sub = {.n_head = 3, .bias = false}};
    char *json = mt_fields_to_json(&TEST_FIELDS, &o);
    CHECK(strstr(json, "\"tied\":false") && strstr(json, "\"n_head\":3") &&
              strstr(json, "\"norm\":\"prms\"") && strstr(json, "\"n_vocab\":99") &&
              strstr(json, "\"data\":\"d.txt\"") && !strstr(json, "resume"),
          "json: %s", json);
    test_options want = o;
    defaults();
    CHECK(mt_fields_from_json(&TEST_FIELDS, json, &o, &e) == MT_OK, "from json: %s", e.msg);
    CHECK(o.n_layer == 3 && o.warmup == 5 && o.lr == want.lr && o.beta == want.beta &&
              strcmp(o.data, "d.txt") == 0 && !o.tied && !o.resume && o.norm == 2 &&
              o.n_vocab == 99 && o.sub.n_head == 3 && !o.sub.bias,
          "json round trip: %s", json);
    char *again = mt_fields_to_json(&TEST_FIELDS, &o);
    CHECK(strcmp(json, again) == 0, "json twice: %s vs %s", json, again);
    free(again);
    free(json);
    struct {
        const char *json, *expect;
    } bad[] = {
        {"{\"n_layer\": 2.5}", "config: n_layer = 2.5, must be a whole number"},
        {"{\"lr\": \"x\"}", "config: lr must be a number"},
        {"{\"tied\": 1}", "config: tied must be true or false"},
        {"{\"norm\": \"bn\"}", "config: norm: unknown norm 'bn'"},
        {"{\"resume\": true}", "config: unknown key 'resume' (accepted: n_layer, warmup, lr, "
                               "beta, data, tied, norm, n_vocab, n_head, bias)"},
        {"{\"data\": \"0123456789012345678901234567890123\"}", "longer than 31"},
        {"[1]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(mt_fields_from_json(&TEST_FIELDS, bad[i].json, &o, &e) != MT_OK &&
                  strstr(e.msg, bad[i].expect),
              "'%s': %s", bad[i].json, e.msg);
}

/* Settings read once and applied to other sets: a program's layering (defaults < file < flags,
   another model's key an error); sets sharing a name; help leaving out what another lists. */
static void test_settings(void) {
    mt_err e;
    mt_settings flags = {0}, file = {0};
    defaults();
    CHECK(args_to(&SET, "--n-layer 5 --untie --n-head 2", &flags, &e) == MT_OK &&
              mt_fieldset_parse_ini(&SET, 1, "lr = 0.5\nn_layer = 9\n", "f.ini", &file, &e) ==
                  MT_OK &&
              flags.n == 3 && file.n == 2,
          "settings read: %s", e.msg);
    test_options other = {.n_layer = 1};
    mt_fieldset set = {&TEST_FIELDS, &other};
    CHECK(mt_settings_apply(&file, &set, 1, &e) == MT_OK &&
              mt_settings_apply(&flags, &set, 1, &e) == MT_OK && other.n_layer == 5 &&
              other.lr == 0.5f && !other.tied && other.sub.n_head == 2,
          "settings applied: %s", e.msg);
    /* the inner table alone: a flag of the outer one is unknown there, with its message */
    sub_options sub = {0};
    mt_fieldset only_sub = {&SUB_FIELDS, &sub};
    CHECK(mt_settings_apply(&flags, &only_sub, 1, &e) == MT_EINVAL &&
              strstr(e.msg, "unknown flag --n-layer; --help lists them"),
          "a foreign flag: %s", e.msg);
    CHECK(mt_settings_apply(&file, &only_sub, 1, &e) == MT_EINVAL &&
              strstr(e.msg, "f.ini:1: unknown key 'lr'"),
          "a foreign key: %s", e.msg);
    /* a name in two sets is the first's */
    sub_options first = {.n_head = 1, .bias = true}, second = {.n_head = 1};
    mt_fieldset two[] = {{&SUB_FIELDS, &first}, {&SUB_FIELDS, &second}};
    char *argv[] = {"prog", "--n-head", "6"};
    CHECK(mt_fieldset_parse_args(two, 2, 3, argv, NULL, &e) == MT_OK && first.n_head == 6 &&
              second.n_head == 1,
          "the first set holds a shared name");
    char *text = mt_fieldset_to_ini(two, 2, NULL), *help = mt_fieldset_help(&SET, 1, two, 1);
    CHECK(strcmp(text, "n-head = 6\nno-bias = false\n") == 0, "shared names saved once: %s", text);
    CHECK(strstr(help, "--n-layer") && !strstr(help, "--n-head") && !strstr(help, "--no-bias"),
          "help without the skipped set's flags:\n%s", help);
    void *at = NULL;
    CHECK(mt_fieldset_find(two, 2, "n_head", 6, &at) == &SUB[0] && at == &first, "find");
    free(text);
    free(help);
    mt_settings_free(&flags);
    mt_settings_free(&file);
}

static void test_checkpoint(void) {
    mt_params P, Q;
    mt_params_init_table(&P);
    mt_params_add(&P, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 1.0f);
    mt_params_add(&P, "a.bias", 1, (int[]){7}, MT_ROLE_BIAS, MT_INIT_ZEROS, 0);
    mt_params_add(&P, "bn.running_var", 1, (int[]){3}, MT_ROLE_BUFFER, MT_INIT_ONES, 0);
    CHECK(mt_params_alloc(&P, NULL) == MT_OK, "alloc");
    mt_rng r;
    mt_rng_seed(&r, 1);
    mt_params_initialize(&P, &r);
    float *w = P.data + P.p[0].offset;
    w[0] = -0.0f, w[1] = 1e-40f, w[2] = 3.4e38f; /* sign of zero, a subnormal, the range */
    P.data[P.p[2].offset + 1] = 0.123456789f;
    const char *keys[] = {"config", "note"}, *vals[] = {"{\"n_layer\":1}", "x"};
    mt_err e;
    CHECK(mt_ckpt_save_params(tmp_path("m.safetensors"), &P, 2, keys, vals, &e) == MT_OK,
          "save: %s", e.msg);

    mt_params_init_table(&Q);
    mt_params_add(&Q, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    mt_params_add(&Q, "a.bias", 1, (int[]){7}, MT_ROLE_BIAS, MT_INIT_ZEROS, 0);
    mt_params_add(&Q, "bn.running_var", 1, (int[]){3}, MT_ROLE_BUFFER, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&Q, NULL) == MT_OK, "alloc");
    mt_safetensors st;
    CHECK(mt_st_load(tmp_path("m.safetensors"), &st, &e) == MT_OK, "load: %s", e.msg);
    CHECK(mt_ckpt_load_params(&st, "m", &Q, &e) == MT_OK, "load params: %s", e.msg);
    CHECK(memcmp(P.data, Q.data, P.total * sizeof(float)) == 0, "round trip is not bit-exact");
    CHECK(st.n_meta == 2 && strcmp(mt_st_meta(&st, "config"), vals[0]) == 0, "metadata");
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        CHECK(!strstr(de->d_name, ".tmp"), "a temporary file is left: %s", de->d_name);
    if (d) closedir(d);

    /* a model that differs: a shape, a missing and an extra tensor, each named */
    mt_params R;
    mt_params_init_table(&R);
    mt_params_add(&R, "a.weight", 2, (int[]){5, 7}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_ckpt_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
              strstr(e.msg, "'a.weight' has shape (7, 5), the model needs (5, 7)"),
          "shape: %s", e.msg);
    mt_params_free(&R);
    mt_params_init_table(&R);
    mt_params_add(&R, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    mt_params_add(&R, "b.weight", 1, (int[]){2}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_ckpt_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
              strstr(e.msg, "'b.weight' (2) is missing"),
          "missing: %s", e.msg);
    mt_params_free(&R);
    mt_params_init_table(&R);
    mt_params_add(&R, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_ckpt_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
              strstr(e.msg, "'a.bias' is not a parameter"),
          "extra: %s", e.msg);
    mt_params_free(&R);
    mt_st_free(&st);
    mt_params_free(&P);
    mt_params_free(&Q);
}

static char *slurp(const char *path) {
    static char buf[4096];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_metrics(void) {
    mt_metrics m;
    mt_err e;
    const char *path = tmp_path("metrics.csv");
    CHECK(mt_metrics_open(&m, path, -1, &e) == MT_OK, "open: %s", e.msg);
    for (long s = 1; s <= 4; s++) {
        mt_metrics_row r = {s, 4.0 / s, s == 2 ? 1.5 : NAN, 1e-3, 0.5, 12.25, 1000, 0.5 * s, NULL};
        CHECK(mt_metrics_write(&m, &r, &e) == MT_OK, "write: %s", e.msg);
    }
    mt_metrics_close(&m);
    const char *want = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s\n"
                       "1,4.000000,,0.001,0.5,12.250,1000.0,0.500\n"
                       "2,2.000000,1.500000,0.001,0.5,12.250,1000.0,1.000\n"
                       "3,1.333333,,0.001,0.5,12.250,1000.0,1.500\n"
                       "4,1.000000,,0.001,0.5,12.250,1000.0,2.000\n";
    CHECK(strcmp(slurp(path), want) == 0, "csv:\n%s", slurp(path));
    /* a run resumed from step 2 drops rows 3 and 4, appends, and counts its time on from row 2's */
    CHECK(mt_metrics_open(&m, path, 2, &e) == MT_OK, "reopen: %s", e.msg);
    CHECK(m.elapsed0 == 1.0, "elapsed of the last row kept: %g", m.elapsed0);
    mt_metrics_row r = {3, 0.25, NAN, 1e-3, 0.5, 12.25, 1000, m.elapsed0 + 0.25, NULL};
    CHECK(mt_metrics_write(&m, &r, &e) == MT_OK, "write: %s", e.msg);
    mt_metrics_close(&m);
    const char *want2 = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s\n"
                        "1,4.000000,,0.001,0.5,12.250,1000.0,0.500\n"
                        "2,2.000000,1.500000,0.001,0.5,12.250,1000.0,1.000\n"
                        "3,0.250000,,0.001,0.5,12.250,1000.0,1.250\n";
    CHECK(strcmp(slurp(path), want2) == 0, "resumed csv:\n%s", slurp(path));
    /* a file of the older format (no elapsed_s) resumed: rewritten with the new header, its kept
       rows with an empty elapsed_s */
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs("step,loss,val_loss,lr,grad_norm,ms,tok_per_s\n"
                     "1,4.000000,,0.001,0.5,12.250,1000.0\n"
                     "2,2.000000,1.500000,0.001,0.5,12.250,1000.0\n"
                     "3,1.333333,,0.001,0.5,12.250,1000.0\n",
                     f) != EOF,
          "old file");
    if (f) fclose(f);
    CHECK(mt_metrics_open(&m, path, 2, &e) == MT_OK && m.elapsed0 == 0, "reopen old: %s", e.msg);
    r = (mt_metrics_row){3, 0.25, NAN, 1e-3, 0.5, 12.25, 1000, 0.75, NULL};
    CHECK(mt_metrics_write(&m, &r, &e) == MT_OK, "write: %s", e.msg);
    mt_metrics_close(&m);
    const char *want3 = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s\n"
                        "1,4.000000,,0.001,0.5,12.250,1000.0,\n"
                        "2,2.000000,1.500000,0.001,0.5,12.250,1000.0,\n"
                        "3,0.250000,,0.001,0.5,12.250,1000.0,0.750\n";
    CHECK(strcmp(slurp(path), want3) == 0, "resumed old csv:\n%s", slurp(path));
    /* resuming without a file starts one with its header */
    unlink(path);
    CHECK(mt_metrics_open(&m, path, 5, &e) == MT_OK, "open missing: %s", e.msg);
    mt_metrics_close(&m);
    CHECK(strcmp(slurp(path), "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s\n") == 0,
          "header");
}

/* The caller's columns after elapsed_s (a model's metrics, val_<name>), NAN empty. */
static void test_metrics_extra(void) {
    mt_metrics m;
    mt_err e;
    const char *path = tmp_path("metrics_extra.csv");
    const char *names[] = {"val_wer", "val_per", NULL};
    CHECK(mt_metrics_open_with(&m, path, -1, names, &e) == MT_OK, "open: %s", e.msg);
    double v[2] = {0.25, NAN};
    mt_metrics_row r = {1, 2.0, 1.5, 1e-3, 0.5, 12.25, 1000, 0.5, v};
    CHECK(mt_metrics_write(&m, &r, &e) == MT_OK, "write: %s", e.msg);
    r.step = 2, r.extra = NULL;
    CHECK(mt_metrics_write(&m, &r, &e) == MT_OK, "write: %s", e.msg);
    mt_metrics_close(&m);
    const char *want = "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s,val_wer,val_per\n"
                       "1,2.000000,1.500000,0.001,0.5,12.250,1000.0,0.500,0.250000,\n"
                       "2,2.000000,1.500000,0.001,0.5,12.250,1000.0,0.500,,\n";
    CHECK(strcmp(slurp(path), want) == 0, "csv:\n%s", slurp(path));
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_flags();
    test_ini();
    test_saved();
    test_json();
    test_settings();
    test_checkpoint();
    test_metrics();
    test_metrics_extra();
    CHECK(test_remove_dir(dir) == 0, "cannot remove %s", dir);
    return check_finish("test_io");
}
