/* ./train --report: the run's report.html, the page scripts/plot-runs --html makes of one run
   (scripts/report.html, built in), rewritten at each evaluation (diag.h). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../io/fields.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../models/stack.h"
#include "../tasks/task.h"
#include "../tensor/gemm.h"
#include "diag.h"

extern const char mt_report_template[]; /* scripts/report.html (the Makefile builds it in) */

/* The run's CSVs the page reads, as scripts/plot-runs' REPORT_FILES. */
static const char *const FILES[] = {"metrics",   "diag_grad", "diag_update", "diag_resid",
                                    "diag_attn", "diag_logz", "diag_ratio",  "diag_skip",
                                    "diag_sink", "diag_act",  "diag_hc",     "diag_qkclip"};
enum { N_FILES = sizeof FILES / sizeof *FILES };

/* Seconds between the page's reloads while the run goes on: the time between two writes, within
   [5, 60] s (a page of a few MB takes a second or two to load). */
static int live_seconds(double since_last) {
    return since_last < 5 ? 5 : since_last > 60 ? 60 : (int)(since_last + 0.5);
}

/* The saved options (config-file lines, "key = value") as an object of strings, in order. */
static cJSON *options_object(const char *ini) {
    cJSON *o = cJSON_CreateObject();
    for (const char *l = ini ? ini : ""; *l;) {
        int n = (int)strcspn(l, "\n"), eq = (int)strcspn(l, "="), k = eq, v = eq + 1;
        while (k > 0 && l[k - 1] == ' ') k--;
        while (v < n && l[v] == ' ') v++;
        if (eq < n && l[0] != '#') {
            char key[128], val[MT_FIELD_STR_MAX];
            snprintf(key, sizeof key, "%.*s", k, l);
            snprintf(val, sizeof val, "%.*s", n - v, l + v);
            cJSON_AddStringToObject(o, key, val);
        }
        l += n + (l[n] == '\n');
    }
    return o;
}

/* This machine's GEMM peak in GFLOP/s, the ceiling MFU is a share of: the best of 10 products
   of n x n matrices (2 n^3 flops) through the GEMM layer, bf16 inputs when the run's products
   take them (a machine busy at that moment gives a low one); 0 without the memory. */
static double gemm_peak(bool bf16, char *what, size_t len) {
    enum { N = 1024, REPS = 10 };
    float *a = calloc(3 * (size_t)N * N, sizeof *a), *c = a + 2 * (size_t)N * N;
    mt_bf16 *h = bf16 ? calloc(2 * (size_t)N * N, sizeof *h) : NULL;
    double best = 0;
    for (int k = 0; a && (h || !bf16) && k <= REPS; k++) { /* k 0: the warm-up */
        double t = mt_clock();
        if (bf16) mt_gemm_bf16(false, false, N, N, N, h, h + (size_t)N * N, 0.0f, c, NULL);
        else mt_gemm(false, false, N, N, N, a, a + (size_t)N * N, 0.0f, c, NULL);
        double gflops = 2.0 * N * N * N / (mt_clock() - t) / 1e9;
        if (k && gflops > best) best = gflops;
    }
    snprintf(what, len, "%s GEMM through mt's GEMM layer (%s), %d^3, best of %d at the start",
             bf16 ? "bf16" : "fp32", mt_gemm_impl(false, false, N, N, N, bf16), N, REPS);
    free(a);
    free(h);
    return best;
}

/* Model FLOPs a trained token, as bench/gpt/report.py counts them: 6 per trained parameter
   (forward 2, backward 4) and 12 L T C for attention's scores and weighted sums, T a row's
   tokens (the usual estimate, e.g. PaLM's appendix B). */
static double flops_per_token(const mt_trainer *tr) {
    double n = 0;
    for (int i = 0; i < tr->P->n; i++) n += mt_param_trained(&tr->P->p[i]) ? tr->P->p[i].n : 0;
    const mt_stack_config *s = mt_config_stack(tr->model->cfg);
    int T = mt_task_row_units(tr->task->type, tr->model->type, tr->model->cfg);
    return 6 * n + 12.0 * s->n_layer * T * s->n_embd;
}

mt_status mt_html_report_open(mt_html_report *r, const mt_trainer *tr, mt_err *err) {
    const char *env = getenv("MT_CHARTJS"), *chart = env && env[0] ? env : MT_CHARTJS;
    *r = (mt_html_report){.last = mt_clock()};
    size_t len;
    mt_err e;
    if (mt_file_read("the chart library", chart, &r->chartjs, &len, &e) != MT_OK)
        return mt_errorf(err, MT_EINVAL,
                         "--report: %s (the page inlines Chart.js: Debian's libjs-chart.js, or "
                         "MT_CHARTJS naming a chart.min.js of version 3)",
                         e.msg);
    char *config = mt_model_config_json(tr->model);
    cJSON *c = config ? cJSON_Parse(config) : NULL, *n = cJSON_GetObjectItem(c, "n_layer");
    r->n_layer = cJSON_IsNumber(n) ? n->valueint : -1;
    cJSON_Delete(c);
    free(config);
    r->flops_per_token = flops_per_token(tr);
    r->peak_gflops = gemm_peak(tr->cfg.precision == MT_BF16, r->peak, sizeof r->peak);
    return MT_OK;
}

void mt_html_report_close(mt_html_report *r) {
    free(r->chartjs);
    *r = (mt_html_report){0};
}

/* The text of dir/FILE.csv as the page takes it (NULL when absent: the page says so): whole
   lines, the last one dropped with a note in notes when the file does not end with one. */
static char *csv_text(const char *dir, const char *file, cJSON *notes) {
    char path[1100], *text;
    size_t len;
    mt_err e;
    snprintf(path, sizeof path, "%s/%s.csv", dir, file);
    if (mt_file_read("a diagnostic file", path, &text, &len, &e) != MT_OK) return NULL;
    char *end = strrchr(text, '\n');
    if (len && text[len - 1] != '\n') {
        char note[160];
        snprintf(note, sizeof note,
                 "%s.csv: its last line is incomplete (a run still writing it, or killed "
                 "mid-write): the whole lines are shown",
                 file);
        cJSON_AddItemToArray(notes, cJSON_CreateString(note));
        *(end ? end + 1 : text) = 0;
    }
    return text;
}

/* fputs with each "</" that begins mark written "<\/" (JSON and JavaScript read the two alike;
   HTML's parser would end the script block at "</script"). */
static bool put_escaped(const char *text, const char *mark, FILE *f) {
    for (const char *at; (at = strstr(text, mark)); text = at + 2)
        if (fwrite(text, 1, (size_t)(at - text), f) != (size_t)(at - text) || fputs("<\\/", f) < 0)
            return false;
    return fputs(text, f) >= 0;
}

/* The page's data: the JSON block {title, made, live, runs: [one]} and the run's CSV blocks. */
static bool put_data(const mt_html_report *r, const mt_trainer *tr, int live, const char *stopped,
                     FILE *f) {
    const char *dir = tr->cfg.out, *name = strrchr(dir, '/');
    name = name && name[1] ? name + 1 : dir;
    cJSON *meta = cJSON_CreateObject(), *run = cJSON_CreateObject(), *notes = cJSON_CreateArray();
    char *texts[N_FILES];
    for (int i = 0; i < N_FILES; i++) texts[i] = csv_text(dir, FILES[i], notes);
    char title[1200], made[1400], when[32], note[sizeof(mt_err){0}.msg + 32];
    snprintf(note, sizeof note, "the run stopped: %s", stopped ? stopped : "");
    if (stopped) cJSON_AddItemToArray(notes, cJSON_CreateString(note));
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    snprintf(title, sizeof title, "mt report: %s", name);
    snprintf(made, sizeof made, "Made by ./train --report on %s from %s, at step %ld of %d.", when,
             dir, tr->step, tr->cfg.steps);
    cJSON_AddStringToObject(meta, "title", title);
    cJSON_AddStringToObject(meta, "made", made);
    cJSON_AddNumberToObject(meta, "live", live);
    cJSON_AddStringToObject(run, "name", name);
    cJSON_AddStringToObject(run, "label", name);
    cJSON_AddItemToObject(run, "options", options_object(tr->cfg.options));
    cJSON_AddNumberToObject(run, "flops_per_token", r->flops_per_token);
    cJSON_AddNumberToObject(run, "peak_gflops", r->peak_gflops);
    cJSON_AddStringToObject(run, "peak", r->peak);
    if (r->n_layer >= 0) cJSON_AddNumberToObject(run, "n_layer", r->n_layer);
    else cJSON_AddNullToObject(run, "n_layer");
    cJSON_AddItemToObject(run, "notes", notes);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(meta, "runs"), run);
    char *json = cJSON_PrintUnformatted(meta);
    bool ok = json && fputs("<script type=\"application/json\" id=\"mt-report\">", f) >= 0 &&
              put_escaped(json, "</", f) && fputs("</script>\n", f) >= 0;
    for (int i = 0; i < N_FILES; i++) {
        /* a CSV of ./train's holds no '<'; the escape keeps a damaged one inside its block */
        if (ok && texts[i])
            ok = fprintf(f, "<script type=\"text/csv\" data-run=\"0\" data-file=\"%s\">\n",
                         FILES[i]) > 0 &&
                 put_escaped(texts[i], "</", f) && fputs("</script>\n", f) >= 0;
        free(texts[i]);
    }
    free(json);
    cJSON_Delete(meta);
    return ok;
}

mt_status mt_html_report_write(mt_html_report *r, const mt_trainer *tr, bool done,
                               const char *stopped, mt_err *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/report.html", tr->cfg.out);
    double now = mt_clock();
    int live = done || stopped ? 0 : live_seconds(now - r->last);
    r->last = now;
    static const char CHART[] = "/*@CHARTJS@*/", DATA[] = "<!--@DATA@-->";
    const char *chart = strstr(mt_report_template, CHART), *data = strstr(mt_report_template, DATA);
    MT_ASSERT(chart && data && chart < data, "report: scripts/report.html lost its markers");
    mt_atomic_file a;
    mt_status s = mt_atomic_open(&a, path, err);
    if (s != MT_OK) return s;
    const char *after = chart + sizeof CHART - 1;
    size_t head = (size_t)(chart - mt_report_template), mid = (size_t)(data - after);
    bool ok = fwrite(mt_report_template, 1, head, a.f) == head &&
              put_escaped(r->chartjs, "</script", a.f) && fwrite(after, 1, mid, a.f) == mid &&
              put_data(r, tr, live, stopped, a.f) && fputs(data + sizeof DATA - 1, a.f) >= 0;
    s = mt_atomic_close(&a, ok, err);
    r->writes++, r->seconds += mt_clock() - now;
    return s;
}
