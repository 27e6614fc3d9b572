/* ./infer's uses of a checkpoint: one per task (the task type's infer slot), beside it in the
 * task's folder: text_infer.c (sampling from a prompt, scoring a text file), images_infer.c
 * (classifying images), g2p_infer.c (words' phones, scoring a dictionary). A use owns its options
 * (a field table on its own struct) and reaches the model through its type's ops (model.h's text,
 * classify and g2p); the checkpoint's kind of input chooses it (its kind's first task's). A use
 * prints through the streams it is given; errors are returned, never printed. */
#ifndef MT_INFERENCE_H
#define MT_INFERENCE_H

#include <stdio.h>

#include "../io/fields.h"
#include "../models/model.h"
#include "../tensor/base.h"
#include "../tensor/gemm.h"
#include "../tensor/tensor.h"

/* What a use runs with besides its options. */
typedef struct {
    FILE *out, *log;        /* the results; notes (the speed, lines skipped, an unreadable image) */
    const char *program;    /* the name a note that stands alone begins with ("infer") */
    const char *checkpoint; /* the model's file, for messages */
    mt_precision precision; /* of the products */
    bool failed;            /* set by the use: an input could not be read (exit status 1) */
} mt_infer_io;

typedef struct {
    const char *name;        /* "text": in messages and --help */
    const char *does;        /* "sample text or score a text file" */
    const mt_fields *fields; /* the options, on a struct of options_size bytes */
    size_t options_size;     /* the struct's size */
    const void *defaults;    /* the struct at its defaults */
    mt_status (*run)(mt_model *m, const void *options, mt_infer_io *io, mt_err *err);
} mt_infer_use;

/* The uses (the tasks' files). */
extern const mt_infer_use mt_text_infer;  /* text_infer.c */
extern const mt_infer_use mt_image_infer; /* images_infer.c */
extern const mt_infer_use mt_g2p_infer;   /* g2p_infer.c */

/* ---- what ./infer does with them (inference.c) --------------------------------------------- */
enum { MT_INFER_SETS = 8 };
/* The program's options and every use's, at their defaults (malloc'd): what ./infer reads its
   flags into before it knows the checkpoint's use. */
typedef struct {
    int n; /* sets: the program's (0), then each use's */
    mt_fieldset set[MT_INFER_SETS];
    const mt_infer_use *use[MT_INFER_SETS]; /* set i's (NULL: the program's) */
} mt_infer_options;
void mt_infer_options_init(mt_infer_options *o, mt_fieldset program);
void mt_infer_options_free(mt_infer_options *o);
/* The set of the use of a model of type (its kind of input's first task's) into *set; the given
   settings that another use reads are refused naming it, as are those this one does not read
   (mt_field.read). type NULL: no use (--info), whose every option is refused. */
mt_status mt_infer_options_pick(const mt_infer_options *o, const mt_settings *given,
                                const mt_model_type *type, const char *checkpoint, int *set,
                                mt_err *err);
/* --help's options: the program's, then each use's under its name (malloc'd). */
char *mt_infer_options_help(const mt_infer_options *o);

#endif
