/* The parameters by block and sublayer, as the diagnostics group them (diag.h). */
#include <stdio.h>
#include <string.h>

#include "../tensor/params.h"
#include "diag.h"

/* Each parameter's group in P's order: 4 i + (attn_norm 0, attn 1, ffn_norm 2, ffn 3) for block
   i, or -1 outside the blocks. Blocks are named <stack>blocks.<j>.<sub>; the blocks of a later
   stack (an encoder-decoder's decoder after its encoder) are numbered after the earlier
   stacks', so i = j plus the blocks before. A sublayer's own norms count with it: Sub-LN's
   attn.inner_norm and ffn.inner_norm (by their prefix), Peri-LN's attn_out_norm and
   ffn_out_norm; a decoder's cross-attention counts with its attention. block (NULL: not asked)
   gets each parameter's block i, or -1. Returns the blocks. */
int mt_diag_param_groups(const mt_params *P, int *group, int *block) {
    static const struct {
        const char *prefix;
        int group;
    } SUB[] = {{"attn_norm.", 0},       {"attn.", 1},       {"attn_out_norm.", 1},
               {"cross_attn_norm.", 0}, {"cross_attn.", 1}, {"cross_attn_out_norm.", 1},
               {"ffn_norm.", 2},        {"ffn.", 3},        {"ffn_out_norm.", 3}};
    const char *stack = NULL; /* the current stack's name up to "blocks." */
    size_t stack_len = 0;
    int base = 0, blocks = 0;
    for (int k = 0; k < P->n; k++) {
        const char *name = P->p[k].name, *b = strstr(name, "blocks.");
        int j, len;
        group[k] = -1;
        if (block) block[k] = -1;
        if (!b || sscanf(b, "blocks.%d.%n", &j, &len) != 1) continue;
        if (!stack || (size_t)(b - name) != stack_len || strncmp(name, stack, stack_len)) {
            stack = name, stack_len = (size_t)(b - name); /* a new stack: after the blocks so far */
            base = blocks;
        }
        blocks = base + j + 1 > blocks ? base + j + 1 : blocks;
        if (block) block[k] = base + j;
        for (size_t s = 0; s < sizeof SUB / sizeof SUB[0]; s++)
            if (strncmp(b + len, SUB[s].prefix, strlen(SUB[s].prefix)) == 0)
                group[k] = 4 * (base + j) + SUB[s].group;
    }
    return blocks;
}
