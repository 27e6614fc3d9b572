/* The tasks ./train knows: one line each. The first of a kind of input is the default for the
   models of that kind. */
#include <stdio.h>
#include <string.h>

#include "task.h"

const mt_task_type *const mt_task_types[] = {
    &mt_text_task, &mt_image_task, &mt_g2p_task, &mt_sft_task, NULL,
};

/* "text, ..." of the tasks that train a model of type, into buf. */
static const char *tasks_of(const mt_model_type *model, char *buf, size_t len) {
    buf[0] = 0;
    for (int i = 0; mt_task_types[i]; i++)
        if (mt_task_types[i]->input == model->input->kind) {
            size_t at = strlen(buf);
            snprintf(buf + at, len - at, "%s%s", at ? ", " : "", mt_task_types[i]->name);
        }
    return buf;
}

mt_status mt_task_check(const mt_task_type *task, const mt_model_type *model, mt_err *err) {
    char names[256];
    if (task->input == model->input->kind) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "--task %s: --model %s takes another kind of input (accepted: %s)", task->name,
                     model->name, tasks_of(model, names, sizeof names));
}

const mt_task_type *mt_task_default(const mt_model_type *model) {
    for (int i = 0; mt_task_types[i]; i++)
        if (mt_task_types[i]->input == model->input->kind) return mt_task_types[i];
    return NULL;
}

mt_status mt_task_find(const char *name, const mt_model_type *model, const mt_task_type **task,
                       mt_err *err) {
    char names[256];
    bool named = name && name[0];
    *task = named ? NULL : mt_task_default(model);
    for (int i = 0; named && !*task && mt_task_types[i]; i++)
        if (strcmp(mt_task_types[i]->name, name) == 0) *task = mt_task_types[i];
    if (*task) return mt_task_check(*task, model, err);
    return mt_errorf(err, MT_EINVAL, "--task %s: unknown (accepted for --model %s: %s)",
                     name ? name : "", model->name, tasks_of(model, names, sizeof names));
}

int mt_task_metric_count(const mt_task_type *task) {
    int n = 0;
    while (task->metrics && task->metrics[n]) n++;
    MT_ASSERT(n <= MT_EVAL_METRICS, "task %s: %d metrics, at most %d", task->name, n,
              MT_EVAL_METRICS);
    return n;
}

int mt_task_row_units(const mt_task_type *task, const mt_model_type *model, const void *cfg) {
    return task->row_units ? task->row_units(model, cfg) : 1;
}

const char *mt_task_batch_words(const mt_task_type *task, const mt_model_type *model,
                                const void *cfg, int B, char *buf, size_t len) {
    int units = mt_task_row_units(task, model, cfg);
    if (units > 1) snprintf(buf, len, "%d x %d %s", B, units, task->units);
    else snprintf(buf, len, "%d %s", B, task->units);
    return buf;
}
