/* The op profile (profile.c): where a step's time goes, per op (./train --profile,
 * bench/gpt --profile). With c->profile set, mt_node_run times each forward and mt_backward_from
 * each backward (CLOCK_MONOTONIC, two clock reads per node). The caller counts the steps and adds
 * their whole time to step_s, so the table also shows the time outside the ops (optimizer, zero
 * grad). */
#ifndef MT_PROFILE_H
#define MT_PROFILE_H

#include <stdio.h>

#include "tensor.h"

enum { MT_PROFILE_OPS = 48 };
struct mt_profile {
    struct {
        const mt_op *op;
        double s[2]; /* seconds in [0] forward, [1] backward */
        long calls[2];
    } row[MT_PROFILE_OPS];
    int n;
    long steps;
    double step_s;
};
/* Adds a call of op's forward (dir 0) or backward (dir 1) that took s seconds (mt_node_run,
   mt_backward_from). */
void mt_profile_add(mt_profile *p, const mt_op *op, int dir, double s);
/* The table, slowest op first: calls, forward and backward ms per step, share of the steps. */
void mt_profile_print(const mt_profile *p, FILE *f);

#endif
