/* The methods mt has, from its own tables, as one JSON object: every enum-valued config key of
 * the model types' field tables (the block stack's among them) and of the optimizer's, name ->
 * help in the enum's order, and "model": the model types.
 *   build/scripts/methods > build/methods.json     (the Makefile does this for `all`)
 *   {"model": {"gpt": "", ...}, "norm": {"ln": "LayerNorm", ...}, "placement": {...}, ...,
 *    "titles": {"placement": {"pre": "Pre-LN", ...}, ...}}
 * titles: the methods' names (mt_enum_item.title) of the enums that give them, for plots.
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

/* The enum keys printed, with their enums. */
typedef struct {
    const char *key[MAX_KEYS];
    const mt_enum *of[MAX_KEYS];
    int n;
} enums;

/* The enum fields of t and of the tables inside it, each key once (seen: the keys so far). */
static void put_enums(const mt_fields *t, enums *seen) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        if (f->type == MT_FIELD_TABLE) put_enums(f->of, seen);
        if (f->type != MT_FIELD_ENUM) continue;
        int k = 0;
        while (k < seen->n && strcmp(seen->key[k], f->key)) k++;
        if (k < seen->n) continue;
        MT_ASSERT(seen->n < MAX_KEYS, "methods: more than %d enum keys", MAX_KEYS);
        const mt_enum *e = f->of;
        seen->key[seen->n] = f->key, seen->of[seen->n++] = e;
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

/* "titles": each enum's values that have a title, for the enums with any. */
static void put_titles(const enums *seen) {
    printf(",\n \"titles\": {");
    for (int k = 0, first = 1; k < seen->n; k++) {
        const mt_enum *e = seen->of[k];
        int v = 0;
        while (v < e->n && !e->items[v].title) v++;
        if (v == e->n) continue;
        printf(first ? "" : ", ");
        first = 0;
        put_string(seen->key[k]);
        printf(": {");
        for (int w = 0, any = 0; w < e->n; w++) {
            if (!e->items[w].title) continue;
            printf(any++ ? ", " : "");
            put_string(e->items[w].name);
            printf(": ");
            put_string(e->items[w].title);
        }
        printf("}");
    }
    printf("}");
}

int main(void) {
    enums seen = {.n = 0};
    printf("{\"model\": {");
    for (int i = 0; mt_model_types[i]; i++) {
        printf(i ? ", " : "");
        put_string(mt_model_types[i]->name);
        printf(": \"\"");
    }
    printf("}");
    for (int i = 0; mt_model_types[i]; i++) put_enums(mt_model_types[i]->fields, &seen);
    put_enums(&MT_OPTIM_FIELDS, &seen);
    put_titles(&seen);
    printf("\n}\n");
    return 0;
}
