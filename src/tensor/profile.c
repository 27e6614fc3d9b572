/* The op profile: per op, its calls and the seconds of its forwards and backwards. */
#include "profile.h"

#include <stdlib.h>

/* The row of op, added on first use. */
static int profile_row(mt_profile *p, const mt_op *op) {
    int i = 0;
    while (i < p->n && p->row[i].op != op) i++;
    MT_ASSERT(i < MT_PROFILE_OPS, "profile: more than %d kinds of op", MT_PROFILE_OPS);
    if (i == p->n) p->row[p->n++].op = op;
    return i;
}

void mt_profile_add(mt_profile *p, const mt_op *op, int dir, double s) {
    int i = profile_row(p, op);
    p->row[i].s[dir] += s;
    p->row[i].calls[dir]++;
}

static int profile_cmp(const void *a, const void *b) {
    const double *x = a, *y = b; /* {total, index} pairs, largest total first */
    return (x[0] < y[0]) - (x[0] > y[0]);
}

void mt_profile_print(const mt_profile *p, FILE *f) {
    double steps = p->steps > 0 ? (double)p->steps : 1.0, ops = 0.0, order[MT_PROFILE_OPS][2];
    for (int i = 0; i < p->n; i++) {
        order[i][0] = p->row[i].s[0] + p->row[i].s[1];
        order[i][1] = i;
        ops += order[i][0];
    }
    qsort(order, (size_t)p->n, sizeof order[0], profile_cmp);
    double total = p->step_s > ops ? p->step_s : ops;
    fprintf(f, "op profile: %ld steps, %.2f ms per step\n", p->steps, 1e3 * total / steps);
    fprintf(f, "%-16s %9s %12s %12s %7s\n", "op", "calls", "forward ms", "backward ms", "share");
    for (int k = 0; k < p->n; k++) {
        int i = (int)order[k][1];
        fprintf(f, "%-16s %9.0f %12.3f %12.3f %6.1f%%\n", p->row[i].op->name,
                (double)p->row[i].calls[0] / steps, 1e3 * p->row[i].s[0] / steps,
                1e3 * p->row[i].s[1] / steps, 100.0 * order[k][0] / total);
    }
    if (p->step_s > 0)
        fprintf(f, "%-16s %9s %12.3f %12s %6.1f%%\n", "(outside ops)", "-",
                1e3 * (p->step_s - ops) / steps, "-", 100.0 * (p->step_s - ops) / total);
}
