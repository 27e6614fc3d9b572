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
        .sched = {.kind = MT_SCHED_CONST, .lr = 1e-3, .decay_frac = 0.2f},
        /* KellerJordan/Muon's muon.py, as floats (what the flags read); the rates -1: the
           schedule's */
        .muon_lr = -1,
        .adam_lr = -1,
        .muon_wd = -1,
        .muon_momentum = 0.95f,
        .muon_nesterov = true,
        .ns_steps = 5,
        .ns_a = 3.4445f,
        .ns_b = -4.7750f,
        .ns_c = 2.0315f,
        .ns_eps = 1e-7f,
        .muon_scale = MT_MUON_SCALE_REFERENCE,
        .muon_rms = 0.2f,
        .muon_ortho = MT_MUON_ORTHO_NS5,
        .normuon_beta2 = 0.95f, /* modded-nanogpt's, nanochat's */
        /* lucidrains/lion-pytorch */
        .lion_beta1 = 0.9f,
        .lion_beta2 = 0.99f,
    };
}

/* ---- names ---------------------------------------------------------------------------------- */

static const mt_enum_item OPTIMS[] = {
    [MT_OPTIM_SGD] = {.name = "sgd"},
    [MT_OPTIM_ADAM] = {.name = "adam", .help = "L2 weight decay"},
    [MT_OPTIM_ADAMW] = {.name = "adamw", .help = "decoupled weight decay"},
    [MT_OPTIM_MUON] = {.name = "muon", .help = "hidden matrices; AdamW the rest"},
    [MT_OPTIM_LION] = {.name = "lion", .help = "sign of momentum"},
};
static const mt_enum_item SCHEDULES[] = {
    [MT_SCHED_CONST] = {.name = "const"},
    [MT_SCHED_COSINE] = {.name = "cosine", .help = "to min-lr"},
    [MT_SCHED_LINEAR] = {.name = "linear", .help = "to min-lr"},
    [MT_SCHED_INVSQRT] = {.name = "invsqrt", .help = "lr sqrt(warmup / step)"},
    [MT_SCHED_WSD] = {.name = "wsd", .help = "lr, then linear to min-lr over the last decay-frac"},
};
static const mt_enum_item MUON_SCALES[] = {
    [MT_MUON_SCALE_REFERENCE] = {.name = "reference", .help = "sqrt(max(1, rows / cols))"},
    [MT_MUON_SCALE_MATCH_ADAMW] = {.name = "match-adamw", .help = "muon-rms sqrt(max(rows, cols))"},
};
static const mt_enum_item MUON_ORTHOS[] = {
    [MT_MUON_ORTHO_NS5] = {.name = "ns5", .help = "Newton-Schulz, one (a, b, c): --ns-coef-*"},
    [MT_MUON_ORTHO_POLAR] = {.name = "polar", .help = "Polar Express, a triple per iteration"},
};
static const mt_enum_item DECAY_SCOPES[] = {
    [MT_DECAY_MATRICES] = {.name = "matrices"},
    [MT_DECAY_EMBEDDINGS] = {.name = "embeddings", .help = "and the matrices"},
    [MT_DECAY_ALL] = {.name = "all", .help = "every trainable entry"},
};
/* The registry: each kind's type, in OPTIMS' order (each type's name is its OPTIMS name). */
const mt_optim_type *const mt_optim_types[] = {
    [MT_OPTIM_SGD] = &mt_optim_sgd,     [MT_OPTIM_ADAM] = &mt_optim_adam,
    [MT_OPTIM_ADAMW] = &mt_optim_adamw, [MT_OPTIM_MUON] = &mt_optim_muon,
    [MT_OPTIM_LION] = &mt_optim_lion,
};
_Static_assert(sizeof mt_optim_types / sizeof mt_optim_types[0] == sizeof OPTIMS / sizeof OPTIMS[0],
               "a kind in OPTIMS without its type in mt_optim_types, or the reverse");
const mt_enum MT_OPTIMS = MT_ENUM("optimizer", OPTIMS);
const mt_enum MT_SCHEDULES = MT_ENUM("schedule", SCHEDULES);
const mt_enum MT_DECAY_SCOPES = MT_ENUM("decay scope", DECAY_SCOPES);
const mt_enum MT_MUON_SCALES = MT_ENUM("Muon scale", MUON_SCALES);
const mt_enum MT_MUON_ORTHOS = MT_ENUM("Muon orthogonalisation", MUON_ORTHOS);

/* ---- fields ---------------------------------------------------------------------------------
 * The numbers are doubles holding floats (MT_FIELD_FLOAT): a flag's value is the float it reads
 * as, as when the flags were floats, so runs keep their bits. */

/* What reads the options of one schedule or kind (mt_field.read), on a resolved config. */
static bool warms_up(const void *c) { return ((const mt_optim_config *)c)->sched.warmup > 0; }
static bool schedule_decays(const mt_schedule *s) {
    return s->kind == MT_SCHED_COSINE || s->kind == MT_SCHED_LINEAR || s->kind == MT_SCHED_WSD;
}
static bool reads_min_lr(const void *c) {
    return schedule_decays(&((const mt_optim_config *)c)->sched);
}
static bool wsd(const void *c) { return ((const mt_optim_config *)c)->sched.kind == MT_SCHED_WSD; }
static bool sgd(const void *c) { return ((const mt_optim_config *)c)->kind == MT_OPTIM_SGD; }
static bool muon(const void *c) { return ((const mt_optim_config *)c)->kind == MT_OPTIM_MUON; }
static bool lion(const void *c) { return ((const mt_optim_config *)c)->kind == MT_OPTIM_LION; }
static bool muon_matches_adamw(const void *cp) {
    const mt_optim_config *c = cp;
    return c->kind == MT_OPTIM_MUON && c->muon_scale == MT_MUON_SCALE_MATCH_ADAMW;
}

static bool muon_ns5(const void *cp) {
    const mt_optim_config *c = cp;
    return c->kind == MT_OPTIM_MUON && c->muon_ortho == MT_MUON_ORTHO_NS5;
}
static bool normuon(const void *cp) {
    const mt_optim_config *c = cp;
    return c->kind == MT_OPTIM_MUON && c->normuon;
}
/* a decoupled decay to make cautious: AdamW's or Muon's (either group's), of a rate > 0 */
static bool decays_decoupled(const void *cp) {
    const mt_optim_config *c = cp;
    return (c->kind == MT_OPTIM_ADAMW && c->weight_decay > 0) ||
           (c->kind == MT_OPTIM_MUON && (c->weight_decay > 0 || c->muon_wd > 0));
}

/* a kind's options: refused with another kind, given or set (a resumed run's) */
#define SGD .read = sgd, .read_by = "--optim sgd", .flags = MT_FIELD_SET_READ
#define MUON .read = muon, .read_by = "--optim muon", .flags = MT_FIELD_SET_READ
#define LION .read = lion, .read_by = "--optim lion", .flags = MT_FIELD_SET_READ
#define NS5 .read = muon_ns5, .read_by = "--optim muon --muon-ortho ns5", .flags = MT_FIELD_SET_READ
/* The defaults derived where no option gives them (mt_field.derive), on the config's schedule
   (its steps set): lr / 10 in float, as when the flags were floats. */
static void derive_min_lr(void *c) {
    mt_schedule *s = &((mt_optim_config *)c)->sched;
    s->min_lr = schedule_decays(s) ? (float)s->lr / 10 : 0;
}
static void derive_warmup(void *c) {
    mt_schedule *s = &((mt_optim_config *)c)->sched;
    s->warmup = s->steps / 10 < 100 ? s->steps / 10 : 100;
}
/* what builds before derived defaults saved for one */
static const mt_field_retired DERIVED_WAS[] =
    {{"-1", "", "older builds saved it for the default: leave the flag out (or give it empty)"},
     {0}};

/* the other kinds' momentum flags, for SGD's given to them */
#define MOMENTA                                                                                    \
    "Muon's momentum is --muon-momentum (Nesterov's unless --no-nesterov), Lion's --lion-beta1 "   \
    "and --lion-beta2, Adam's --beta1"
#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(mt_optim_config, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(kind, ENUM, "optim", "optimizer", .of = &MT_OPTIMS),
    F(sched.lr, FLOAT, "lr", "peak learning rate"),
    F(sched.min_lr, FLOAT, "min_lr", "learning rate at the end of cosine, linear and wsd decays",
      .read = reads_min_lr, .read_by = "--schedule cosine, linear or wsd",
      .flags = MT_FIELD_SET_READ, .derive = derive_min_lr, .derived = "lr / 10",
      .retired = DERIVED_WAS),
    F(sched.warmup, INT, "warmup", "linear warmup steps", .range = "0..", .derive = derive_warmup,
      .derived = "steps / 10, at most 100", .retired = DERIVED_WAS),
    F(sched.warmup_init_lr, FLOAT, "warmup_init_lr", "learning rate at step 0 of the warmup",
      .read = warms_up, .read_by = "a warmup (--warmup > 0)"),
    F(sched.kind, ENUM, "schedule", "learning-rate schedule after warmup", .of = &MT_SCHEDULES),
    F(beta1, FLOAT, "beta1", "Adam beta1"),
    F(beta2, FLOAT, "beta2", "Adam beta2"),
    F(eps, FLOAT, "eps", "Adam epsilon"),
    F(weight_decay, FLOAT, "weight_decay", "weight decay (decoupled for adamw)"),
    F(decay_scope, ENUM, "decay_scope", "what weight decay reaches", .of = &MT_DECAY_SCOPES),
    F(momentum, FLOAT, "momentum", "SGD momentum (Adam's and Lion's: their betas)", SGD,
      .instead = MOMENTA),
    F(nesterov, BOOL, "nesterov", "SGD Nesterov momentum", SGD, .instead = MOMENTA),
    F(clip, FLOAT, "clip", "max gradient norm; 0: no clipping"),
    F(qk_clip, FLOAT, "qk_clip",
      "QK-Clip's tau (MuonClip, arXiv 2507.20534): after each update, each attention head whose "
      "largest logit of the step exceeded it has its q and k projections scaled down to bring "
      "that logit to tau; 0: off"),
    F(sched.decay_frac, FLOAT, "decay_frac", "wsd: the last fraction of the steps that decays",
      .range = "0..1", .read = wsd, .read_by = "--schedule wsd"),
    F(muon_lr, FLOAT, "muon_lr", "muon: the hidden matrices' lr; -1: --lr", .range = "-1..", MUON),
    F(adam_lr, FLOAT, "adam_lr", "muon: the other tensors' (AdamW) lr; -1: --lr", .range = "-1..",
      MUON),
    F(muon_wd, FLOAT, "muon_wd", "muon: the hidden matrices' weight decay; -1: --weight-decay",
      .range = "-1..", MUON),
    F(muon_momentum, FLOAT, "muon_momentum", "muon: momentum beta", .range = "0..1", MUON),
    F(muon_nesterov, BOOL, "muon_nesterov", "muon: the plain momentum instead of Nesterov's",
      .flag = "no_nesterov", MUON),
    F(ns_steps, INT, "ns_steps", "muon: Newton-Schulz iterations", .range = "1..", MUON),
    F(ns_a, FLOAT, "ns_coef_a", "muon: Newton-Schulz a", NS5),
    F(ns_b, FLOAT, "ns_coef_b", "muon: Newton-Schulz b", NS5),
    F(ns_c, FLOAT, "ns_coef_c", "muon: Newton-Schulz c", NS5),
    F(ns_eps, FLOAT, "ns_eps", "muon: X = u / (|u|_F + ns-eps)", .range = "0..", MUON),
    F(muon_scale, ENUM, "muon_scale", "muon: the update's scale", .of = &MT_MUON_SCALES, MUON),
    F(muon_rms, FLOAT, "muon_rms", "muon: match-adamw's target RMS", .range = "0..",
      .read = muon_matches_adamw, .read_by = "--optim muon --muon-scale match-adamw"),
    F(muon_ortho, ENUM, "muon_ortho", "muon: the orthogonalisation (ns-steps iterations)",
      .of = &MT_MUON_ORTHOS, MUON),
    F(normuon, BOOL, "normuon",
      "muon: NorMuon, each row of the update over the root of its mean square's EMA", MUON),
    F(normuon_beta2, FLOAT, "normuon_beta2", "muon: NorMuon's EMA beta", .range = "0..1",
      .read = normuon, .read_by = "--optim muon --normuon", .flags = MT_FIELD_SET_READ),
    F(cautious_wd, BOOL, "cautious_wd",
      "decoupled weight decay only where update and weight share a sign (arXiv 2510.12402)",
      .read = decays_decoupled,
      .read_by = "--optim adamw or muon with --weight-decay or --muon-wd > 0",
      .flags = MT_FIELD_SET_READ),
    F(lion_beta1, FLOAT, "lion_beta1", "lion: the update's interpolation beta", .range = "0..1",
      LION),
    F(lion_beta2, FLOAT, "lion_beta2", "lion: the momentum's beta", .range = "0..1", LION),
};
#undef F
#undef SGD
#undef MUON
#undef LION
#undef NS5
const mt_fields MT_OPTIM_FIELDS = MT_FIELDS_OF(FIELDS);

/* ---- validation ------------------------------------------------------------------------------
 * Comparisons are written so that NaN fails them. */

/* D', the steps wsd decays over: decay_frac * steps rounded half to even (Python's round). */
static long wsd_decay_steps(const mt_schedule *s) {
    return (long)nearbyint(s->decay_frac * (double)s->steps);
}

/* wsd: its fraction, and a decay that starts after the warmup. */
static mt_status validate_wsd(const mt_schedule *s, mt_err *err) {
    if (!(s->decay_frac >= 0 && s->decay_frac <= 1))
        return mt_errorf(err, MT_EINVAL,
                         "--decay-frac is %g; it must be in [0, 1] (the fraction of the steps "
                         "that decays)",
                         s->decay_frac);
    if (s->kind == MT_SCHED_WSD && s->warmup > s->steps - wsd_decay_steps(s))
        return mt_errorf(err, MT_EINVAL,
                         "--schedule wsd: the decay over the last %ld of %ld steps (--decay-frac "
                         "%g) would start inside the --warmup of %ld steps; use a warmup <= %ld",
                         wsd_decay_steps(s), s->steps, s->decay_frac, s->warmup,
                         s->steps - wsd_decay_steps(s));
    return MT_OK;
}

mt_status mt_optim_validate(const mt_optim_config *c, mt_err *err) {
    const mt_schedule *s = &c->sched;
    const char *sname = mt_enum_name(&MT_SCHEDULES, s->kind);
    bool decays = schedule_decays(s);
    if ((unsigned)c->kind >= (unsigned)MT_OPTIMS.n)
        return mt_errorf(err, MT_EINVAL, "--optim: unknown optimizer %d", (int)c->kind);
    if ((unsigned)s->kind > MT_SCHED_WSD)
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
                  {"--clip", c->clip},
                  {"--qk-clip", c->qk_clip}};
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
    mt_status st = validate_wsd(s, err);
    mt_optim_config unset = mt_optim_defaults();
    if (st == MT_OK) st = mt_fields_check_unread(&MT_OPTIM_FIELDS, c, &unset, err);
    if (st != MT_OK) return st;
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
    case MT_SCHED_WSD: {
        long D = wsd_decay_steps(s);
        if (step >= s->steps) return s->min_lr;
        if (step <= s->steps - D) return s->lr;
        return s->min_lr + (s->lr - s->min_lr) * (double)(s->steps - step) / (double)D;
    }
    }
    mt_fatal(__FILE__, __LINE__, "lr_at: unknown schedule %d", (int)s->kind);
}
