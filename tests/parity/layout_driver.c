/* Parity driver for every model's parameter layout (harness.py layout): IN.safetensors holds no
   tensors, only the metadata "model" (a model type's name: gpt, vit, encdec) and "config" (its
   JSON); OUT.safetensors gets the model's parameters and buffers as mt writes them, under their
   names, in their table order, with the metadata "roles" (tests/check.h parity_layout). */
#include "../check.h"

int main(int argc, char **argv) {
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    rc = parity_layout(&in, argv[2]);
    mt_st_free(&in);
    return rc;
}
