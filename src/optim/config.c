/* Optimizer configuration: defaults, names, the registry of optimizer kinds, its field table (the
 * flags of ./train), validation, and the learning-rate schedules. */
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

static const mt_enum_item OPTIMS[] = {
    [MT_OPTIM_SGD] = {"sgd", NULL},
    [MT_OPTIM_ADAM] = {"adam", "L2 weight decay"},
    [MT_OPTIM_ADAMW] = {"adamw", "decoupled weight decay"},
};
static const mt_enum_item SCHEDULES[] = {
    [MT_SCHED_CONST] = {"const", NULL},
    [MT_SCHED_COSINE] = {"cosine", "to min-lr"},
    [MT_SCHED_LINEAR] = {"linear", "to min-lr"},
    [MT_SCHED_INVSQRT] = {"invsqrt", "lr sqrt(warmup / step)"},
};
static const mt_enum_item DECAY_SCOPES[] = {
    [MT_DECAY_MATRICES] = {"matrices", NULL},
    [MT_DECAY_EMBEDDINGS] = {"embeddings", "and the matrices"},
    [MT_DECAY_ALL] = {"all", "every trainable entry"},
};
/* The registry: each kind's type, in OPTIMS' order (each type's name is its OPTIMS name). */
const mt_optim_type *const mt_optim_types[] = {
    [MT_OPTIM_SGD] = &mt_optim_sgd,
    [MT_OPTIM_ADAM] = &mt_optim_adam,
    [MT_OPTIM_ADAMW] = &mt_optim_adamw,
};
_Static_assert(sizeof mt_optim_types / sizeof mt_optim_types[0] == sizeof OPTIMS / sizeof OPTIMS[0],
               "a kind in OPTIMS without its type in mt_optim_types, or the reverse");
const mt_enum MT_OPTIMS = MT_ENUM("optimizer", OPTIMS);
const mt_enum MT_SCHEDULES = MT_ENUM("schedule", SCHEDULES);
const mt_enum MT_DECAY_SCOPES = MT_ENUM("decay scope", DECAY_SCOPES);

/* ---- fields ---------------------------------------------------------------------------------
 * The numbers are doubles holding floats (MT_FIELD_FLOAT): a flag's value is the float it reads
 * as, as when the flags were floats, so runs keep their bits. */

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_optim_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(kind, ENUM, "optim", "optimizer", .of = &MT_OPTIMS),
    F(sched.lr, FLOAT, "lr", "peak learning rate"),
    F(sched.min_lr, FLOAT, "min_lr",
      "learning rate at the end of cosine and linear decays; -1: "
      "lr / 10",
      .range = "-1.."),
    F(sched.warmup, INT, "warmup", "linear warmup steps; -1: steps / 10, at most 100",
      .range = "-1.."),
    F(sched.warmup_init_lr, FLOAT, "warmup_init_lr", "learning rate at step 0 of the warmup"),
    F(sched.kind, ENUM, "schedule", "learning-rate schedule after warmup", .of = &MT_SCHEDULES),
    F(beta1, FLOAT, "beta1", "Adam beta1"),
    F(beta2, FLOAT, "beta2", "Adam beta2"),
    F(eps, FLOAT, "eps", "Adam epsilon"),
    F(weight_decay, FLOAT, "weight_decay", "weight decay (decoupled for adamw)"),
    F(decay_scope, ENUM, "decay_scope", "what weight decay reaches", .of = &MT_DECAY_SCOPES),
    F(momentum, FLOAT, "momentum", "SGD momentum"),
    F(nesterov, BOOL, "nesterov", "SGD Nesterov momentum"),
    F(clip, FLOAT, "clip", "max gradient norm; 0: no clipping"),
};
#undef F
const mt_fields MT_OPTIM_FIELDS = MT_FIELDS_OF(FIELDS);

void mt_optim_resolve(mt_optim_config *c, long steps) {
    mt_schedule *s = &c->sched;
    bool decays = s->kind == MT_SCHED_COSINE || s->kind == MT_SCHED_LINEAR;
    /* lr / 10 in float, as when the flags were floats; any other negative value reaches
       validation, which refuses it */
    if (s->min_lr == -1) s->min_lr = decays ? (float)s->lr / 10 : 0;
    if (s->warmup < 0) s->warmup = steps / 10 < 100 ? steps / 10 : 100;
}

/* ---- validation ------------------------------------------------------------------------------
 * Comparisons are written so that NaN fails them. */

mt_status mt_optim_validate(const mt_optim_config *c, mt_err *err) {
    const mt_schedule *s = &c->sched;
    const char *sname = mt_enum_name(&MT_SCHEDULES, s->kind);
    bool decays = s->kind == MT_SCHED_COSINE || s->kind == MT_SCHED_LINEAR;
    if ((unsigned)c->kind >= (unsigned)MT_OPTIMS.n)
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
                         mt_enum_name(&MT_OPTIMS, c->kind));
    if (c->nesterov && c->momentum == 0)
        return mt_errorf(err, MT_EINVAL, "--nesterov needs --momentum > 0 (it is 0)");
    if (s->warmup < 0 || s->steps < 0)
        return mt_errorf(err, MT_EINVAL,
                         "--warmup (%ld) and the number of steps (%ld) must be >= 0", s->warmup,
                         s->steps);
    if (s->kind == MT_SCHED_INVSQRT && s->warmup < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--schedule invsqrt needs --warmup >= 1: it decays as sqrt(warmup / "
                         "step)");
    if (decays && s->steps < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--schedule %s needs the number of steps (>= 1) to decay over", sname);
    if (decays && s->warmup > s->steps)
        return mt_errorf(err, MT_EINVAL,
                         "--warmup %ld is larger than the %ld steps of the run: --schedule %s "
                         "would never decay; use a warmup <= steps",
                         s->warmup, s->steps, sname);
    if (decays && s->min_lr > s->lr)
        return mt_errorf(err, MT_EINVAL,
                         "--min-lr %g is larger than --lr %g: %s decays from lr "
                         "down to min_lr",
                         s->min_lr, s->lr, sname);
    if (!decays && s->min_lr != 0)
        return mt_errorf(err, MT_EINVAL,
                         "--min-lr applies to --schedule cosine and linear only (this run uses %s)",
                         sname);
    const mt_optim_type *type = mt_optim_types[c->kind];
    return type->validate ? type->validate(c, err) : MT_OK;
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
