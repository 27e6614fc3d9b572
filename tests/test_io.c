/* Options from flags and config files, parameter checkpoints, the metrics CSV. */
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

/* the options under test */
static struct {
    int n_layer;
    float lr;
    char data[MT_OPT_STR_MAX];
    bool untie, resume, bias;
    int norm;
} o;

static const mt_enum_item NORM_ITEMS[] = {{"ln", NULL}, {"rms", NULL}, {"prms", NULL}};
static const mt_enum NORMS = MT_ENUM("norm", NORM_ITEMS);

static const mt_opt OPTS[] = {
    {"n-layer", MT_OPT_INT, &o.n_layer, NULL, "blocks", 0, NULL},
    {"lr", MT_OPT_FLOAT, &o.lr, NULL, "learning rate", 0, NULL},
    {"data", MT_OPT_STR, &o.data, NULL, "text file", 0, NULL},
    {"untie", MT_OPT_BOOL, &o.untie, NULL, "separate head", 0, NULL},
    {"norm", MT_OPT_CHOICE, &o.norm, NULL, "normalization", 0, &NORMS},
    {"resume", MT_OPT_BOOL, &o.resume, NULL, "continue", MT_OPT_CLI, NULL},
    {"no-bias", MT_OPT_BOOL, &o.bias, NULL, "no biases", MT_OPT_NEGATE, NULL},
};
enum { N_OPTS = sizeof OPTS / sizeof *OPTS };

static void defaults(void) {
    memset(&o, 0, sizeof o);
    o.n_layer = 4;
    o.lr = 3e-3f;
    o.bias = true;
    strcpy(o.data, "data/x.txt");
}

static mt_status args(const char *line, mt_err *e) {
    char buf[512], *argv[32] = {"prog"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    return mt_opts_parse_args(OPTS, N_OPTS, argc, argv, e);
}

static void test_flags(void) {
    mt_err e;
    defaults();
    CHECK(args("--n-layer 6 --lr=1e-4 --data a.txt --untie --norm rms --resume", &e) == MT_OK,
          "flags: %s", e.msg);
    CHECK(o.n_layer == 6 && o.lr == 1e-4f && strcmp(o.data, "a.txt") == 0 && o.untie &&
              o.norm == 1 && o.resume,
          "flag values");
    CHECK(args("--no-bias", &e) == MT_OK && !o.bias, "--no-bias negates bias");
    char nb[16];
    CHECK(strcmp(mt_opt_format(&OPTS[6], nb, sizeof nb), "true") == 0, "--no-bias formats %s", nb);
    defaults();
    CHECK(args("--n_layer 7 --untie=false", &e) == MT_OK && o.n_layer == 7 && !o.untie,
          "underscore and bool value");
    struct {
        const char *line, *expect;
    } bad[] = {
        {"--n-layers 3", "unknown flag --n-layers (did you mean --n-layer?)"},
        {"--zzzzzzzzz 3", "unknown flag --zzzzzzzzz; --help"},
        {"--n-layer", "--n-layer needs a value"},
        {"--n-layer 3.5", "--n-layer: '3.5' is not an integer"},
        {"--n-layer 99999999999", "not an integer"},
        {"--lr fast", "--lr: 'fast' is not a finite number"},
        {"--lr inf", "not a finite number"},
        {"--norm batch", "--norm: 'batch' is not one of ln|rms|prms"},
        {"--norm", "--norm needs a value: one of ln|rms|prms"},
        {"--untie=maybe", "'maybe' is not true or false"},
        {"stray", "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(args(bad[i].line, &e) == MT_EINVAL && strstr(e.msg, bad[i].expect),
              "'%s': %s", bad[i].line, e.msg);
    }
}

static void test_ini(void) {
    mt_err e;
    defaults();
    write_text(tmp_path("a.ini"), "# a config\n\nn_layer = 8   # deeper\r\n  lr=0.01\n"
                                  "data = \"my data.txt\"\nuntie = yes\nnorm = prms\n");
    CHECK(mt_opts_read_ini(OPTS, N_OPTS, tmp_path("a.ini"), &e) == MT_OK, "ini: %s", e.msg);
    CHECK(o.n_layer == 8 && o.lr == 0.01f && strcmp(o.data, "my data.txt") == 0 && o.untie &&
              o.norm == 2,
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
        {"\n\nresume = true\n", "t.ini:3: 'resume' is a command-line flag only"},
        {"norm = \n", "t.ini:1: norm: '' is not one of"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(mt_opts_parse_ini(OPTS, N_OPTS, bad[i].text, "t.ini", &e) == MT_EINVAL &&
                  strstr(e.msg, bad[i].expect),
              "'%s': %s", bad[i].text, e.msg);
    CHECK(mt_opts_read_ini(OPTS, N_OPTS, tmp_path("none.ini"), &e) == MT_EIO &&
              strstr(e.msg, "none.ini"),
          "missing file: %s", e.msg);

    /* help lists every option with its default; to_ini round-trips every saved option */
    defaults();
    o.lr = 0.1f + 0.2f; /* a float whose shortest form needs 9 digits */
    char *help = mt_opts_help(OPTS, N_OPTS);
    CHECK(strstr(help, "--n-layer N") && strstr(help, "(default: 4)") &&
              strstr(help, "--norm ln|rms|prms") && strstr(help, "(default: ln)") &&
              strstr(help, "--data S") && strstr(help, "--resume") && strstr(help, "--untie"),
          "help:\n%s", help);
    free(help);
    o.untie = true;
    o.norm = 1;
    char *ini = mt_opts_to_ini(OPTS, N_OPTS);
    CHECK(strstr(ini, "n-layer = 4\n") && strstr(ini, "norm = rms\n") && !strstr(ini, "resume"),
          "ini:\n%s", ini);
    float lr = o.lr;
    defaults();
    CHECK(mt_opts_parse_ini(OPTS, N_OPTS, ini, "saved", &e) == MT_OK && o.lr == lr &&
              o.untie && o.norm == 1,
          "to_ini round trip: %s", ini);
    free(ini);
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
    CHECK(mt_st_save_params(tmp_path("m.safetensors"), &P, 2, keys, vals, &e) == MT_OK,
          "save: %s", e.msg);

    mt_params_init_table(&Q);
    mt_params_add(&Q, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    mt_params_add(&Q, "a.bias", 1, (int[]){7}, MT_ROLE_BIAS, MT_INIT_ZEROS, 0);
    mt_params_add(&Q, "bn.running_var", 1, (int[]){3}, MT_ROLE_BUFFER, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&Q, NULL) == MT_OK, "alloc");
    mt_safetensors st;
    CHECK(mt_st_load(tmp_path("m.safetensors"), &st, &e) == MT_OK, "load: %s", e.msg);
    CHECK(mt_st_load_params(&st, "m", &Q, &e) == MT_OK, "load params: %s", e.msg);
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
    CHECK(mt_st_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
              strstr(e.msg, "'a.weight' has shape (7, 5), the model needs (5, 7)"),
          "shape: %s", e.msg);
    mt_params_free(&R);
    mt_params_init_table(&R);
    mt_params_add(&R, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    mt_params_add(&R, "b.weight", 1, (int[]){2}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_st_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
              strstr(e.msg, "'b.weight' (2) is missing"),
          "missing: %s", e.msg);
    mt_params_free(&R);
    mt_params_init_table(&R);
    mt_params_add(&R, "a.weight", 2, (int[]){7, 5}, MT_ROLE_MATRIX, MT_INIT_ZEROS, 0);
    CHECK(mt_params_alloc(&R, NULL) == MT_OK, "alloc");
    CHECK(mt_st_load_params(&st, "m", &R, &e) == MT_EFORMAT &&
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
                     "3,1.333333,,0.001,0.5,12.250,1000.0\n", f) != EOF, "old file");
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

/* A model's metrics: val_<name> columns after elapsed_s, empty when not evaluated. */
static void test_metrics_extra(void) {
    mt_metrics m;
    mt_err e;
    const char *path = tmp_path("metrics_extra.csv");
    const char *names[] = {"wer", "per", NULL};
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
    test_checkpoint();
    test_metrics();
    test_metrics_extra();
    const char *files[] = {"a.ini", "m.safetensors", "metrics.csv"};
    for (int i = 0; i < 3; i++) unlink(tmp_path(files[i]));
    rmdir(dir);
    return check_finish("test_io");
}
