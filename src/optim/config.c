/* Optimizer configuration: defaults, names, validation, and the learning-rate schedules. */
#include <math.h>
#include <string.h>

#include "optim.h"

mt_optim_config mt_optim_defaults(void) {
    return (mt_optim_config){
        .kind = MT_OPTIM_ADAMW,
        .beta1 = 0.9,
        .beta2 = 0.999,
        .eps = 1e-8,
        .weight_decay = 0.01,
        .decay_scope = MT_DECAY_MATRICES,
        .sched = {.kind = MT_SCHED_CONST, .lr = 1e-3},
    };
}

/* ---- names ---------------------------------------------------------------------------------- */

static const char *const KIND_NAMES[] = {"sgd", "adam", "adamw"};
static const char *const SCHED_NAMES[] = {"const", "cosine", "linear", "invsqrt"};
static const char *const SCOPE_NAMES[] = {"matrices", "embeddings", "all"};

/* The index of name in names[n], or an error "unknown <what> 'x' (<flag>): expected a|b|c". */
static mt_status parse_name(const char *name, const char *const names[], int n, const char *what,
                            const char *flag, int *out, mt_err *err) {
    for (int i = 0; i < n; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = i;
            return MT_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        if (i) strcat(list, "|");
        strcat(list, names[i]);
    }
    return mt_errorf(err, MT_EINVAL, "unknown %s '%s' (%s): expected %s", what,
                     name ? name : "(none)", flag, list);
}

mt_status mt_optim_parse_kind(const char *name, mt_optim_kind *out, mt_err *err) {
    int i = 0;
    mt_status s = parse_name(name, KIND_NAMES, 3, "optimizer", "--optim", &i, err);
    if (s == MT_OK) *out = (mt_optim_kind)i;
    return s;
}

mt_status mt_optim_parse_schedule(const char *name, mt_sched_kind *out, mt_err *err) {
    int i = 0;
    mt_status s = parse_name(name, SCHED_NAMES, 4, "schedule", "--schedule", &i, err);
    if (s == MT_OK) *out = (mt_sched_kind)i;
    return s;
}

mt_status mt_optim_parse_decay_scope(const char *name, mt_decay_scope *out, mt_err *err) {
    int i = 0;
    mt_status s = parse_name(name, SCOPE_NAMES, 3, "decay scope", "--decay-scope", &i, err);
    if (s == MT_OK) *out = (mt_decay_scope)i;
    return s;
}

const char *mt_optim_kind_name(mt_optim_kind k) { return KIND_NAMES[k]; }
const char *mt_optim_schedule_name(mt_sched_kind k) { return SCHED_NAMES[k]; }
const char *mt_optim_decay_scope_name(mt_decay_scope s) { return SCOPE_NAMES[s]; }

/* ---- validation ------------------------------------------------------------------------------
 * Comparisons are written so that NaN fails them. */

mt_status mt_optim_validate(const mt_optim_config *c, mt_err *err) {
    const mt_schedule *s = &c->sched;
    const char *sname = (unsigned)s->kind < 4 ? SCHED_NAMES[s->kind] : "?";
    bool decays = s->kind == MT_SCHED_COSINE || s->kind == MT_SCHED_LINEAR;
    if ((unsigned)c->kind > MT_OPTIM_ADAMW)
        return mt_errorf(err, MT_EINVAL, "--optim: unknown optimizer %d", (int)c->kind);
    if ((unsigned)s->kind > MT_SCHED_INVSQRT)
        return mt_errorf(err, MT_EINVAL, "--schedule: unknown schedule %d", (int)s->kind);
    if ((unsigned)c->decay_scope > MT_DECAY_ALL)
        return mt_errorf(err, MT_EINVAL, "--decay-scope: unknown scope %d", (int)c->decay_scope);
    struct {
        const char *flag;
        double v;
    } nonneg[] = {{"--lr", s->lr},
                  {"--min-lr", s->min_lr},
                  {"--warmup-init-lr", s->warmup_init_lr},
                  {"--eps", c->eps},
                  {"--weight-decay", c->weight_decay},
                  {"--clip", c->clip}};
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (!(nonneg[i].v >= 0 && isfinite(nonneg[i].v)))
            return mt_errorf(err, MT_EINVAL, "%s is %g; it must be a finite number >= 0",
                             nonneg[i].flag, nonneg[i].v);
    struct {
        const char *flag;
        double v;
    } unit[] = {{"--beta1", c->beta1}, {"--beta2", c->beta2}, {"--momentum", c->momentum}};
    for (size_t i = 0; i < sizeof unit / sizeof unit[0]; i++)
        if (!(unit[i].v >= 0 && unit[i].v < 1))
            return mt_errorf(err, MT_EINVAL, "%s is %g; it must be in [0, 1)", unit[i].flag,
                             unit[i].v);
    if (c->kind != MT_OPTIM_SGD && (c->momentum != 0 || c->nesterov))
        return mt_errorf(err, MT_EINVAL,
                         "--momentum and --nesterov apply to --optim sgd only (this run uses %s, "
                         "whose momentum is --beta1)",
                         KIND_NAMES[c->kind]);
    if (c->nesterov && c->momentum == 0)
        return mt_errorf(err, MT_EINVAL, "--nesterov needs --momentum > 0 (it is 0)");
    if (s->warmup < 0 || s->steps < 0)
        return mt_errorf(err, MT_EINVAL, "--warmup (%ld) and the number of steps (%ld) must be >= 0",
                         s->warmup, s->steps);
    if (s->kind == MT_SCHED_INVSQRT && s->warmup < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--schedule invsqrt needs --warmup >= 1: it decays as sqrt(warmup / step)");
    if (decays && s->steps < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--schedule %s needs the number of steps (>= 1) to decay over", sname);
    if (decays && s->warmup > s->steps)
        return mt_errorf(err, MT_EINVAL,
                         "--warmup %ld is larger than the %ld steps of the run: --schedule %s "
                         "would never decay; use a warmup <= steps",
                         s->warmup, s->steps, sname);
    if (decays && s->min_lr > s->lr)
        return mt_errorf(err, MT_EINVAL, "--min-lr %g is larger than --lr %g: %s decays from lr "
                         "down to min_lr", s->min_lr, s->lr, sname);
    if (!decays && s->min_lr != 0)
        return mt_errorf(err, MT_EINVAL,
                         "--min-lr applies to --schedule cosine and linear only (this run uses %s)",
                         sname);
    return MT_OK;
}

/* ---- schedules ------------------------------------------------------------------------------- */

double mt_optim_lr_at(const mt_schedule *s, long step) {
    MT_ASSERT(step >= 0, "lr_at: step %ld < 0", step);
    if (step < s->warmup)
        return s->warmup_init_lr + (s->lr - s->warmup_init_lr) * (double)step / (double)s->warmup;
    double u = (double)(step - s->warmup), D = (double)(s->steps - s->warmup);
    switch (s->kind) {
    case MT_SCHED_CONST: return s->lr;
    case MT_SCHED_COSINE:
        if (step >= s->steps) return s->min_lr;
        return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * u / D));
    case MT_SCHED_LINEAR:
        if (step >= s->steps) return s->min_lr;
        return s->lr - (s->lr - s->min_lr) * u / D;
    case MT_SCHED_INVSQRT: return s->lr * sqrt((double)s->warmup / (double)step);
    }
    mt_fatal(__FILE__, __LINE__, "lr_at: unknown schedule %d", (int)s->kind);
}
