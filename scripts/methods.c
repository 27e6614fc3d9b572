/* The methods mt has, from its own tables, as one JSON object: every enum-valued config key of
 * the model types' field tables (the block stack's among them) and of the optimizer's, name ->
 * help in the enum's order, and "model": the model types.
 *   build/scripts/methods > build/methods.json     (the Makefile does this for `all`)
 *   {"model": {"gpt": "", ...}, "norm": {"ln": "LayerNorm", ...}, "placement": {...}, ...}
 * The parity twins (tests/parity/harness.py methods()), the benchmarks and the scripts read
 * their lists of methods from it, so a method added to an enum's table reaches them. */
#include <stdio.h>
#include <string.h>

#include "../src/mt.h"

enum { MAX_KEYS = 64 };

static void put_string(const char *s) {
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

/* The enum fields of t and of the tables inside it, each key once (seen: the keys so far). */
static void put_enums(const mt_fields *t, const char **seen, int *n_seen) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        if (f->type == MT_FIELD_TABLE) put_enums(f->of, seen, n_seen);
        if (f->type != MT_FIELD_ENUM) continue;
        int k = 0;
        while (k < *n_seen && strcmp(seen[k], f->key)) k++;
        if (k < *n_seen) continue;
        MT_ASSERT(*n_seen < MAX_KEYS, "methods: more than %d enum keys", MAX_KEYS);
        seen[(*n_seen)++] = f->key;
        const mt_enum *e = f->of;
        printf(",\n ");
        put_string(f->key);
        printf(": {");
        for (int v = 0; v < e->n; v++) {
            printf(v ? ", " : "");
            put_string(e->items[v].name);
            printf(": ");
            put_string(e->items[v].help);
        }
        printf("}");
    }
}

int main(void) {
    const char *seen[MAX_KEYS];
    int n_seen = 0;
    printf("{\"model\": {");
    for (int i = 0; mt_model_types[i]; i++) {
        printf(i ? ", " : "");
        put_string(mt_model_types[i]->name);
        printf(": \"\"");
    }
    printf("}");
    for (int i = 0; mt_model_types[i]; i++) put_enums(mt_model_types[i]->fields, seen, &n_seen);
    put_enums(&MT_OPTIM_FIELDS, seen, &n_seen);
    printf("\n}\n");
    return 0;
}
