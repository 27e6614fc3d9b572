/* ./infer's uses, by the tasks: which use a checkpoint's model has, the options of the others
 * refused, --help. */
#include <stdlib.h>
#include <string.h>

#include "inference.h"
#include "task.h"

void mt_infer_options_init(mt_infer_options *o, mt_fieldset program) {
    *o = (mt_infer_options){.n = 1, .set = {program}};
    for (int i = 0; mt_task_types[i]; i++) {
        const mt_infer_use *u = mt_task_types[i]->infer;
        bool seen = false; /* a use of two tasks (text, sft) is one set of options */
        for (int k = 1; k < o->n; k++) seen |= o->use[k] == u;
        if (!u || seen) continue;
        MT_ASSERT(o->n < MT_INFER_SETS, "inference: more than %d uses", MT_INFER_SETS - 1);
        void *opts = malloc(u->options_size);
        MT_ASSERT(opts, "inference: out of memory");
        memcpy(opts, u->defaults, u->options_size);
        o->use[o->n] = u;
        o->set[o->n++] = (mt_fieldset){u->fields, opts};
    }
}

void mt_infer_options_free(mt_infer_options *o) {
    for (int i = 1; i < o->n; i++) free(o->set[i].obj);
}

/* The use of a model of type: its kind of input's first task's (NULL: none). */
static const mt_infer_use *use_of(const mt_model_type *type) {
    const mt_task_type *task = mt_task_default(type);
    return task ? task->infer : NULL;
}

/* "gpt, ..." of the model types whose use is u, into buf. */
static const char *models_of(const mt_infer_use *u, char *buf, size_t len) {
    buf[0] = 0;
    for (int i = 0; mt_model_types[i]; i++)
        if (use_of(mt_model_types[i]) == u) {
            size_t at = strlen(buf);
            snprintf(buf + at, len - at, "%s%s", at ? ", " : "", mt_model_types[i]->name);
        }
    return buf;
}

/* The set of o that holds the field s names (0: the program's, or none). */
static int set_of(const mt_infer_options *o, const mt_setting *s) {
    void *obj;
    for (int i = 1; i < o->n; i++)
        if (mt_fieldset_find(&o->set[i], 1, s->name, strlen(s->name), &obj)) return i;
    return 0;
}

mt_status mt_infer_options_pick(const mt_infer_options *o, const mt_settings *given,
                                const mt_model_type *type, const char *checkpoint, int *set,
                                mt_err *err) {
    const mt_infer_use *use = type ? use_of(type) : NULL;
    *set = 0;
    for (int i = 1; i < o->n; i++)
        if (o->use[i] == use) *set = i;
    if (type && !*set)
        return mt_errorf(err, MT_EINVAL, "%s is a %s checkpoint, which ./infer has no use for",
                         checkpoint, type->name);
    for (int i = 0; i < given->n; i++) {
        const mt_setting *s = &given->s[i];
        int at = set_of(o, s);
        if (!at || at == *set) continue;
        char models[256], *value = s->value ? s->value : "";
        const mt_infer_use *u = o->use[at];
        if (!type)
            return mt_errorf(err, MT_EINVAL,
                             "--%s %s: --info reads no option of a use (%s: %s); drop it", s->name,
                             value, u->name, u->does);
        return mt_errorf(err, MT_EINVAL,
                         "--%s %s: only the %s use reads it (%s checkpoints: %s); %s is a %s "
                         "checkpoint, whose use is %s (%s): drop it",
                         s->name, value, u->name, models_of(u, models, sizeof models), u->does,
                         checkpoint, type->name, use->name, use->does);
    }
    return *set ? mt_settings_check_read(given, &o->set[*set], 1, err) : MT_OK;
}

char *mt_infer_options_help(const mt_infer_options *o) {
    size_t len = 0, cap = 0;
    char *out = NULL;
    for (int i = 0; i < o->n; i++) {
        char models[256], *help = mt_fieldset_help(&o->set[i], 1, NULL, 0);
        const char *use = o->use[i] ? o->use[i]->name : "";
        size_t need = strlen(help) + 512;
        if (len + need > cap) out = realloc(out, cap = 2 * (len + need));
        MT_ASSERT(out, "inference: out of memory");
        if (i)
            len += snprintf(out + len, cap - len, "\n%s: %s (%s checkpoints)\n", use,
                            o->use[i]->does, models_of(o->use[i], models, sizeof models));
        len += snprintf(out + len, cap - len, "%s", help);
        free(help);
    }
    return out;
}
