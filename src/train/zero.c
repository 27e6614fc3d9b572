/* ZeRO-1 (--zero 1): the optimizer state sharded across MPI ranks as runs of whole entries of the
   parameter table (train.h, mt_zero); the plan, the gathers after an update, the gathered save and
   the bytes each rank holds. The gradients' reduce-scatter is in dist.c (the buckets). Without
   MT_MPI the job has one rank and --zero 1 is refused before any of this runs. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "train.h"

#ifdef MT_MPI
#include <mpi.h>
#endif

/* Where entry i starts in P->data (i = P->n: the end). */
static size_t start_of(const mt_params *P, int i) { return i < P->n ? P->p[i].offset : P->total; }

/* The runs of at most cap floats P's entries fill in order, each run as long as it fits: their
   starts into first (when not NULL); their count, or INT_MAX when an entry alone is larger. */
static int fill(const mt_params *P, size_t cap, int *first, int ranks) {
    int runs = 1;
    size_t used = 0;
    if (first) first[0] = 0;
    for (int i = 0; i < P->n; i++) {
        size_t span = start_of(P, i + 1) - start_of(P, i);
        if (span > cap) return INT_MAX;
        if (used + span > cap) {
            if (first && runs < ranks) first[runs] = i;
            runs++, used = 0;
        }
        used += span;
    }
    for (int r = runs; first && r < ranks; r++) first[r] = P->n; /* ranks left without entries */
    return runs;
}

/* The smallest cap whose runs number at most `ranks` (a binary search: the runs only grow as the
   cap shrinks), then those runs: the largest shard is as small as a cut into runs allows, at most
   1/N of the floats plus the largest entry. */
void mt_zero_plan(const mt_params *P, int ranks, int *first) {
    size_t lo = (P->total + (size_t)ranks - 1) / (size_t)ranks, hi = P->total > lo ? P->total : lo;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fill(P, mid, NULL, ranks) <= ranks) hi = mid;
        else lo = mid + 1;
    }
    fill(P, lo, first, ranks);
    first[ranks] = P->n;
}

mt_status mt_zero_init(mt_zero *z, const mt_params *P, mt_err *err) {
    memset(z, 0, sizeof *z);
    int N = z->ranks = mt_dist_size(), me = mt_dist_rank();
    z->first = malloc((size_t)(N + 1) * sizeof *z->first);
    z->at = malloc((size_t)(N + 1) * sizeof *z->at);
    z->counts = malloc((size_t)N * sizeof *z->counts);
    if (!z->first || !z->at || !z->counts) goto oom;
    mt_zero_plan(P, N, z->first);
    for (int r = 0; r <= N; r++) z->at[r] = start_of(P, z->first[r]);
    for (int r = 0; r < N; r++) z->counts[r] = (int)(z->at[r + 1] - z->at[r]);
    for (int i = 0; i < P->n; i++)
        if (P->p[i].role == MT_ROLE_BUFFER && (i < z->first[me] || i >= z->first[me + 1]))
            z->stash_floats += P->p[i].n;
    z->stash = malloc((z->stash_floats ? z->stash_floats : 1) * sizeof(float));
    if (z->stash) return MT_OK;
oom:
    mt_zero_free(z);
    return mt_errorf(err, MT_ENOMEM, "out of memory for --zero 1's shard");
}

void mt_zero_free(mt_zero *z) {
    free(z->first);
    free(z->at);
    free(z->counts);
    free(z->stash);
    memset(z, 0, sizeof *z);
}

double mt_zero_grad_sumsq(const mt_zero *z, const mt_params *P) {
    int me = mt_dist_rank();
    float *g = P->grad + z->at[me];
    double s = mt_grads_sumsq(&(mt_grads){.g = &g, .n = 1}, (size_t)z->counts[me]);
    mt_dist_sum(&s, 1);
    return s;
}

/* The buffers outside this rank's shard into the stash (out) or back from it. */
static void stash_buffers(const mt_zero *z, mt_params *P, bool out) {
    int me = mt_dist_rank();
    float *at = z->stash;
    for (int i = 0; i < P->n; i++) {
        const mt_param *e = &P->p[i];
        if (e->role != MT_ROLE_BUFFER || (i >= z->first[me] && i < z->first[me + 1])) continue;
        if (out) memcpy(at, P->data + e->offset, e->n * sizeof(float));
        else memcpy(P->data + e->offset, at, e->n * sizeof(float));
        at += e->n;
    }
}

/* x's shards, each rank's from its own place into everyone's. */
static void allgather(const mt_zero *z, float *x) {
#ifdef MT_MPI
    int displs[z->ranks];
    for (int r = 0; r < z->ranks; r++) displs[r] = (int)z->at[r];
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, z->counts, displs, MPI_FLOAT,
                   MPI_COMM_WORLD);
#else
    (void)z, (void)x;
#endif
}

void mt_zero_gather(const mt_zero *z, mt_params *P, bool grads) {
    int me = mt_dist_rank();
    size_t lo = z->at[me], hi = z->at[me + 1];
    stash_buffers(z, P, true);
    allgather(z, P->data);
    stash_buffers(z, P, false);
    if (P->bf16) { /* the shard's copy was rounded by the update */
        mt_bf16_from_floats(P->bf16, P->data, lo);
        mt_bf16_from_floats(P->bf16 + hi, P->data + hi, P->total - hi);
    }
    if (grads) allgather(z, P->grad);
    else {
        memset(P->grad, 0, lo * sizeof(float));
        memset(P->grad + hi, 0, (P->total - hi) * sizeof(float));
    }
}

/* Where rank 0 finds slot k of entry e: in its own shard, or in the floats the others sent. */
typedef struct {
    float *others[MT_OPTIM_MAX_SLOTS]; /* slot k of [at[1], total), laid out as P->data */
    size_t at;
} gathered;

static const float *gathered_slot(const mt_optim *o, int k, const mt_param *e, void *arg) {
    const gathered *g = arg;
    return e->offset < g->at ? o->slot[k] + e->offset : g->others[k] + (e->offset - g->at);
}

mt_status mt_zero_save_optim(const mt_zero *z, const mt_optim *o, const mt_params *P,
                             const char *path, mt_err *err) {
    bool root = mt_dist_rank() == 0;
    size_t n = P->total - z->at[1]; /* the others' floats, received by rank 0 */
    gathered g = {.at = z->at[1]};
    bool ok = true;
    for (int k = 0; k < o->n_slots && root; k++)
        ok &= (g.others[k] = mt_alloc_big((n ? n : 1) * sizeof(float))) != NULL;
#ifdef MT_MPI
    int displs[z->ranks], counts[z->ranks], okay = ok;
    for (int r = 0; r < z->ranks; r++)
        displs[r] = r ? (int)(z->at[r] - z->at[1]) : 0, counts[r] = r ? z->counts[r] : 0;
    MPI_Bcast(&okay, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int k = 0; k < o->n_slots && okay; k++)
        MPI_Gatherv(o->slot[k], root ? 0 : z->counts[mt_dist_rank()], MPI_FLOAT, g.others[k],
                    counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
#endif
    mt_status s = MT_OK;
    if (root)
        s = ok ? mt_optim_save_from(o, P, gathered_slot, &g, path, err)
               : mt_errorf(err, MT_ENOMEM, "%s: out of memory gathering the optimizer state", path);
    for (int k = 0; k < o->n_slots; k++) free(g.others[k]);
    return s;
}

void mt_zero_state_bytes(const mt_zero *z, const mt_optim *o, double *bytes) {
    for (int r = 0; r < z->ranks; r++) bytes[r] = 0;
    bytes[mt_dist_rank()] = (double)o->n_slots * (double)(o->hi - o->lo) * sizeof(float);
    mt_dist_sum(bytes, z->ranks);
}
