/* Data parallelism over MPI (built with MT_MPI, make MPI=1): the job's ranks, sums across them,
   and the gradient buckets sent while the backward pass runs. Without MT_MPI this is one
   process, rank 0 of 1, and every function does nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

#ifdef MT_MPI
#include <mpi.h>

static int g_rank, g_size = 1, g_local = 1;

void mt_dist_init(int *argc, char ***argv) {
    int provided; /* only the main thread calls MPI; OpenMP threads compute */
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &g_local);
    MPI_Comm_free(&node);
}

void mt_dist_finalize(void) { MPI_Finalize(); }

void mt_dist_sum(double *x, int n) {
    if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

void mt_dist_max(float *x, int n) {
    if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
}

void mt_dist_agree(mt_status *s, mt_err *err) {
    if (g_size == 1) return;
    int first = *s != MT_OK ? g_rank : g_size;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == g_size) return;
    int status = *s;
    MPI_Bcast(&status, 1, MPI_INT, first, MPI_COMM_WORLD);
    MPI_Bcast(err->msg, sizeof err->msg, MPI_CHAR, first, MPI_COMM_WORLD);
    *s = err->status = (mt_status)status;
    if (first > 0 && g_rank != first) { /* name the rank when it is not rank 0 */
        char msg[sizeof err->msg];
        memcpy(msg, err->msg, sizeof msg);
        snprintf(err->msg, sizeof err->msg, "rank %d: %.1000s", first, msg);
    }
}

static double now(void) { return MPI_Wtime(); }
#else
static const int g_rank = 0, g_size = 1, g_local = 1;
void mt_dist_init(int *argc, char ***argv) { (void)argc, (void)argv; }
void mt_dist_finalize(void) {}
void mt_dist_sum(double *x, int n) { (void)x, (void)n; }
void mt_dist_max(float *x, int n) { (void)x, (void)n; }
void mt_dist_agree(mt_status *s, mt_err *err) { (void)s, (void)err; }
#endif

int mt_dist_rank(void) { return g_rank; }
int mt_dist_size(void) { return g_size; }
int mt_dist_local_size(void) { return g_local; }

bool mt_dist_thread_warning(char *buf, size_t len) {
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), per_node = mt_dist_local_size();
    if (mt_dist_size() == 1 && !getenv("OMPI_COMM_WORLD_SIZE")) return false;
    if (mt_threads() == 1 && per_node < cores)
        snprintf(buf, len,
                 "each of the %d rank(s) on this machine runs 1 thread on %d cores; "
                 "mpirun binds a rank to one core unless given --bind-to none (or --map-by "
                 "slot:PE=N) and -x OMP_NUM_THREADS=N",
                 per_node, cores);
    else if (mt_threads() * per_node > cores)
        snprintf(buf, len,
                 "%d rank(s) x %d threads on %d cores: oversubscribed, set --threads "
                 "or OMP_NUM_THREADS to %d",
                 per_node, mt_threads(), cores, cores / per_node > 0 ? cores / per_node : 1);
    else return false;
    return true;
}

void mt_dist_slice(int B, int *lo, int *n) {
    *lo = (int)((long)B * g_rank / g_size);
    *n = (int)((long)B * (g_rank + 1) / g_size) - *lo;
}

/* Buckets: the table's entries from the last to the first (the order in which the backward pass
   finishes them, roughly), cut after an entry once a bucket holds bucket_floats. Each bucket is
   one range of the flat gradient buffer (entries are adjacent in it). */
/* With ZeRO: rs_counts[b][r], the floats of bucket b in rank r's shard (the buckets and the
   shards each tile [0, total)). */
static bool scatter_counts(mt_dist_grads *g) {
    const mt_zero *z = g->zero;
    g->rs_counts = malloc((size_t)g->n_buckets * (size_t)z->ranks * sizeof *g->rs_counts);
    if (!g->rs_counts) return false;
    for (int b = 0; b < g->n_buckets; b++)
        for (int r = 0; r < z->ranks; r++) {
            size_t lo = g->lo[b] > z->at[r] ? g->lo[b] : z->at[r];
            size_t hi = g->hi[b] < z->at[r + 1] ? g->hi[b] : z->at[r + 1];
            g->rs_counts[b * z->ranks + r] = hi > lo ? (int)(hi - lo) : 0;
        }
    return true;
}

mt_status mt_dist_grads_init(mt_dist_grads *g, mt_params *P, size_t bucket_floats,
                             const mt_zero *zero, mt_err *err) {
    memset(g, 0, sizeof *g);
    g->P = P;
    g->zero = zero;
    if (g_size == 1) return MT_OK;
    int n = P->n;
    g->bucket = malloc((size_t)n * sizeof *g->bucket);
    g->last = malloc((size_t)n * sizeof *g->last);
    g->lo = malloc((size_t)n * sizeof *g->lo);
    g->hi = malloc((size_t)n * sizeof *g->hi);
    g->pending = malloc((size_t)n * sizeof *g->pending);
    g->started = malloc((size_t)n * sizeof *g->started);
#ifdef MT_MPI
    g->req = malloc((size_t)n * sizeof(MPI_Request));
#endif
    if (!g->bucket || !g->last || !g->lo || !g->hi || !g->pending || !g->started || !g->req) {
        mt_dist_grads_free(g);
        return mt_errorf(err, MT_ENOMEM, "out of memory for the gradient buckets");
    }
    size_t size = 0;
    for (int i = n - 1; i >= 0; i--) {
        const mt_param *e = &P->p[i];
        size_t end = i + 1 < n ? P->p[i + 1].grad_offset : P->grad_total;
        if (size == 0) g->hi[g->n_buckets++] = end;
        g->bucket[i] = g->n_buckets - 1;
        g->lo[g->n_buckets - 1] = e->grad_offset;
        size += end - e->grad_offset;
        if (size >= bucket_floats) size = 0;
    }
    if (zero && !scatter_counts(g)) {
        mt_dist_grads_free(g);
        return mt_errorf(err, MT_ENOMEM, "out of memory for the gradient buckets");
    }
    return MT_OK;
}

void mt_dist_grads_free(mt_dist_grads *g) {
    free(g->bucket);
    free(g->last);
    free(g->lo);
    free(g->hi);
    free(g->pending);
    free(g->started);
    free(g->req);
    free(g->rs_counts);
    memset(g, 0, sizeof *g);
}

#ifdef MT_MPI
/* Bucket b's sum: all-reduced in place, or with ZeRO reduce-scattered in place: this rank's part
   of the sum lands at the bucket's start (MPI_IN_PLACE's rule), moved to its place once complete
   (place_part). The buckets are disjoint ranges of P->grad, so sums in flight never overlap. */
static void start(mt_dist_grads *g, int b) {
    MPI_Request *req = g->req;
    float *bucket = g->P->grad + g->lo[b];
    if (!g->zero)
        MPI_Iallreduce(MPI_IN_PLACE, bucket, (int)(g->hi[b] - g->lo[b]), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &req[b]);
    else
        MPI_Ireduce_scatter(MPI_IN_PLACE, bucket, g->rs_counts + b * g_size, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD, &req[b]);
    g->started[b] = true;
}

/* With ZeRO, after bucket b's reduce-scatter: this rank's part from the bucket's start to where it
   belongs (the rest of the bucket is left undefined: outside the shard, zeroed after the
   update). */
static void place_part(const mt_dist_grads *g, int b) {
    const mt_zero *z = g->zero;
    size_t at = z->at[g_rank] > g->lo[b] ? z->at[g_rank] - g->lo[b] : 0;
    int n = g->rs_counts[b * g_size + g_rank];
    float *bucket = g->P->grad + g->lo[b];
    if (n > 0 && at > 0) memmove(bucket + at, bucket, (size_t)n * sizeof(float));
}

/* The entry of a tensor that is a parameter's view, or -1. */
static int entry_of(const mt_params *P, const mt_tensor *t) {
    return t >= P->t && t < P->t + P->n ? (int)(t - P->t) : -1;
}

/* After node n's backward: the parameters it was the last reader of are final; a bucket whose
   entries are all final starts its sum. Testing the requests lets MPI progress them meanwhile
   (Open MPI moves a non-blocking collective only inside MPI calls). */
static void after_backward(mt_node *n, void *arg) {
    mt_dist_grads *g = arg;
    double t0 = now();
    mt_tensor *const *reads;
    for (int k = 0, nr = mt_node_reads(n, &reads); k < nr; k++) {
        int i = reads[k] ? entry_of(g->P, reads[k]) : -1;
        if (i < 0 || g->last[i] != n) continue;
        g->last[i] = NULL; /* counted once when a node reads it twice */
        if (--g->pending[g->bucket[i]] == 0) start(g, g->bucket[i]);
    }
    int done;
    MPI_Testall(g->n_buckets, g->req, &done, MPI_STATUSES_IGNORE);
    g->comm_s += now() - t0;
}
#endif

void mt_dist_grads_begin(mt_dist_grads *g, mt_ctx *c) {
#ifdef MT_MPI
    if (g_size == 1) return;
    const mt_params *P = g->P;
    MPI_Request *req = g->req;
    for (int b = 0; b < g->n_buckets; b++) {
        g->pending[b] = 0;
        g->started[b] = false;
        req[b] = MPI_REQUEST_NULL;
    }
    for (int i = 0; i < P->n; i++) g->last[i] = NULL;
    /* the tape runs from the last node recorded: the last assignment is the last reader */
    mt_tensor *const *reads;
    for (const mt_node *n = c->tape; n; n = n->prev)
        for (int k = 0, nr = mt_node_reads(n, &reads); k < nr; k++) {
            int i = reads[k] ? entry_of(P, reads[k]) : -1;
            if (i >= 0 && mt_param_trained(&P->p[i])) g->last[i] = n;
        }
    for (int i = 0; i < P->n; i++) g->pending[g->bucket[i]] += g->last[i] != NULL;
    c->after_backward = after_backward;
    c->after_backward_arg = g;
#else
    (void)g, (void)c;
#endif
}

void mt_dist_grads_end(mt_dist_grads *g, mt_ctx *c) {
#ifdef MT_MPI
    if (g_size == 1) return;
    c->after_backward = NULL;
    double t0 = now();
    /* buckets no node finished (parameters unused this step, whose gradient is zero everywhere),
       in the same order on every rank */
    for (int b = 0; b < g->n_buckets; b++)
        if (!g->started[b]) start(g, b);
    MPI_Waitall(g->n_buckets, g->req, MPI_STATUSES_IGNORE);
    for (int b = 0; g->zero && b < g->n_buckets; b++) place_part(g, b);
    g->comm_s += now() - t0;
#else
    (void)g, (void)c;
#endif
}
