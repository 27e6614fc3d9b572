/* ./train's report: what --prepare wrote, the setup of a run, its progress lines and its end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/ckpt.h"
#include "../data/data.h"
#include "../models/model.h"
#include "../optim/optim.h"
#include "../tasks/task.h"
#include "../tensor/base.h"
#include "../tensor/gemm.h"
#include "../tensor/params.h"
#include "../tensor/profile.h"
#include "../train/train.h"
#include "app.h"

void mt_report_prepared(FILE *f, const mt_run_options *o, const mt_prepared *p) {
    fprintf(f, "wrote %s: %zu tokens, %s tokenizer, vocabulary %d", o->prepare, p->n,
            mt_enum_name(&MT_TOKENIZERS, p->kind), p->n_vocab);
    if (o->format == MT_PREPARE_LLMC)
        fprintf(f, " (%s); %d llm.c shards of at most %d tokens (val: %zu tokens), meta.json",
                p->kind == MT_TOK_GPT2 ? "GPT-2's ids" : "mt's ids, not GPT-2's", p->n_files,
                o->shard_tokens, p->n_val);
    fputc('\n', f);
}

/* h:mm:ss, or m:ss under an hour. */
static const char *hms(double s, char *buf, size_t len) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

/* Under MPI: the optimizer state's bytes on each rank (collective), with --zero 1 a shard each,
   and the largest entry's, which bounds how far a shard of whole entries is from 1/N. */
static void print_state(FILE *f, const mt_trainer *tr) {
    int N = mt_dist_size();
    const mt_params *P = tr->P;
    double slot_bytes = (double)tr->opt.n_slots * sizeof(float), whole = slot_bytes * P->grad_total;
    double bytes[N], most = 0, largest = 0;
    if (tr->par->sharded) mt_zero_state_bytes(&tr->zero, &tr->opt, bytes);
    else
        for (int r = 0; r < N; r++) bytes[r] = whole;
    for (int i = 0; i < P->n; i++) {
        size_t end = i + 1 < P->n ? P->p[i + 1].grad_offset : P->grad_total;
        if (slot_bytes * (end - P->p[i].grad_offset) > largest)
            largest = slot_bytes * (end - P->p[i].grad_offset);
    }
    fprintf(f, "state   optimizer state bytes per rank:");
    for (int r = 0; r < N; r++) {
        fprintf(f, " %.0f", bytes[r]);
        most = bytes[r] > most ? bytes[r] : most;
    }
    fprintf(f, " (the whole %.0f, the largest tensor's %.0f; %s the most %.3f x 1/%d of it)\n",
            whole, largest, tr->par->sharded ? "--zero 1," : "not sharded,",
            whole > 0 ? most * N / whole : 0.0, N);
}

char *mt_report_data_warning(const mt_trainer *tr) {
    const mt_task_type *task = tr->task->type;
    return task->warning ? task->warning(tr->task) : NULL;
}

void mt_report_setup(FILE *f, const mt_trainer *tr, const mt_run_options *o) {
    const mt_model_type *type = tr->model->type;
    char line[512], batch[64];
    tr->task->type->describe(tr->task, line, sizeof line);
    fprintf(f, "data    %s: %s\n", o->train.data.path, line);
    type->config_describe(tr->model->cfg, line, sizeof line);
    fprintf(f, "model   %s: %.3fM parameters\n", line, mt_params_count_trainable(tr->P) / 1e6);
    mt_task_batch_words(tr->task->type, type, tr->model->cfg, o->train.grad_accum * o->train.batch,
                        batch, sizeof batch);
    if (o->train.grad_accum > 1) /* "128 x 64 tokens in 4 micro-batches" */
        snprintf(batch + strlen(batch), sizeof batch - strlen(batch), " in %d micro-batches",
                 o->train.grad_accum);
    fprintf(f,
            "train   %s, lr %g (%s, warmup %ld), batch %s, %d threads (%d replicas), %s%s -> %s\n",
            mt_enum_name(&MT_OPTIMS, o->optim.kind), o->optim.sched.lr,
            mt_enum_name(&MT_SCHEDULES, o->optim.sched.kind), tr->opt.cfg.sched.warmup, batch,
            mt_threads(), tr->replicas.n, o->train.precision == MT_BF16 ? "bf16 products, " : "",
            o->train.resume         ? "resumed"
            : o->train.init_from[0] ? "from --init-from"
                                    : "from scratch",
            o->train.out);
    if (o->train.init_from[0]) { /* what the weights came from */
        mt_load_report_describe(&tr->init, tr->P, o->train.init_from, line, sizeof line);
        fprintf(f, "init    %s\n", line);
    }
    const mt_optim *op = &tr->opt;
    if (op->type->whole) /* Muon: its two groups */
        fprintf(f,
                "groups  %d hidden matrices (%.3fM parameters) %s, lr %g; %d other tensors "
                "AdamW, lr %g\n",
                op->n_whole, op->whole_floats / 1e6, op->type->name,
                op->cfg.muon_lr < 0 ? op->cfg.sched.lr : op->cfg.muon_lr, op->n_pieces,
                op->cfg.adam_lr < 0 ? op->cfg.sched.lr : op->cfg.adam_lr);
    if (mt_dist_size() > 1)
        fprintf(f,
                "mpi     %d ranks (%d on this machine), %d to %d rows of each batch per rank, "
                "gradients summed in %d buckets\n",
                mt_dist_size(), mt_dist_local_size(), o->train.batch / mt_dist_size(),
                (o->train.batch + mt_dist_size() - 1) / mt_dist_size(), tr->dist.n_buckets);
    if (mt_dist_size() > 1) print_state(f, tr);
}

void mt_report_progress(FILE *f, bool tty, const mt_trainer *tr, const mt_progress *p) {
    const mt_task_type *task = tr->task->type;
    double per = p->elapsed / (double)(p->step - p->first);
    char el[32], eta[32];
    fprintf(f, "%sstep %*ld/%ld | loss %.4f | lr %.2e | norm %6.3f | %6.0f %s/s | %s | ETA %s",
            tty ? "\r" : "", (int)snprintf(NULL, 0, "%ld", p->steps), p->step, p->steps, p->st.loss,
            p->st.lr, p->st.grad_norm, p->units / per, task->unit, hms(p->elapsed, el, sizeof el),
            hms(per * (double)(p->steps - p->step), eta, sizeof eta));
    if (tr->qk.n) fprintf(f, " | qk-clip %d, max %.2f", p->st.qk_clipped, p->st.qk_logit);
    if (p->eval && !isnan(p->val)) fprintf(f, " | val %.4f", p->val);
    if (p->eval && task->accuracy) fprintf(f, " acc %.4f", tr->val_accuracy);
    for (int k = 0; p->eval && k < mt_task_metric_count(task); k++)
        fprintf(f, " %s %.4f", task->metrics[k], p->metrics[k]);
    fputs(tty ? (p->eval ? "\033[K\n" : "\033[K") : "\n", f);
    fflush(f);
}

void mt_report_done(FILE *f, const mt_trainer *tr, long first, double seconds,
                    const mt_profile *prof) {
    char el[32];
    long steps = tr->step - first;
    if (steps <= 0) return;
    fprintf(f, "done: %ld steps in %s, arena peak %.1f MiB; wrote %s\n", steps,
            hms(seconds, el, sizeof el), tr->ctx.arena.peak / 1048576.0, tr->model_path);
    if (mt_dist_size() > 1)
        fprintf(f,
                "mpi     rank 0 spent %.2f ms per step in the gradient sums (%.1f%% of the run)\n",
                1e3 * tr->dist.comm_s / (double)steps, 100 * tr->dist.comm_s / seconds);
    if (prof && mt_dist_rank() == 0) mt_profile_print(prof, f);
}
