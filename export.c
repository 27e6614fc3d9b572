/* ./export: a GPT checkpoint in the files other programs run: llama2.c's model.bin and
 * tokenizer.bin, a GGUF file for llama.cpp, or a Hugging Face directory (docs/export.md). Exit
 * status: 0 written, 1 a failure while writing (I/O, out of memory), 2 a bad flag, a missing or
 * malformed checkpoint, or a model the format cannot hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"

typedef struct {
    char checkpoint[MT_FIELD_STR_MAX], out[MT_FIELD_STR_MAX], tokenizer_out[MT_FIELD_STR_MAX];
    int format;
    bool f16, merge_lora, help;
} export_options;

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(export_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(checkpoint, STR, "checkpoint", "model.safetensors of a GPT written by ./train"),
    F(format, ENUM, "format", "the file format", .of = &MT_EXPORT_FORMATS),
    F(out, STR, "out",
      "the file to write (model.bin, model.gguf); hf: the directory of config.json and "
      "model.safetensors"),
    F(tokenizer_out, STR, "tokenizer_out",
      "llama2c: the tokenizer file; empty: tokenizer.bin "
      "beside --out"),
    F(f16, BOOL, "f16", "gguf: the matrices as float16 (the norms stay float32)"),
    F(merge_lora, BOOL, "merge_lora",
      "fold the checkpoint's LoRA adapters into its matrices (W + alpha / r B A) first"),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

static _Noreturn void die(int code, const char *msg) {
    fprintf(stderr, "export: %s\n", msg);
    exit(code);
}

/* hf's --out is a directory (made when the export is written): a file there is refused, as is
   one whose model.safetensors would be the checkpoint's */
static void check_hf_out(const export_options *o) {
    mt_err e;
    char st[MT_FIELD_STR_MAX + 32];
    snprintf(st, sizeof st, "%s/model.safetensors", o->out);
    if (mt_dir_check_writable("--out", o->out, &e) != MT_OK ||
        mt_output_file_check("--out", st, &e) != MT_OK ||
        mt_output_check("--out", st, "--checkpoint", o->checkpoint, &e) != MT_OK)
        die(2, e.msg);
}

int main(int argc, char **argv) {
    mt_err e;
    char msg[3 * MT_FIELD_STR_MAX];
    const export_options defaults = {.format = MT_EXPORT_LLAMA2C};
    export_options o = defaults;
    mt_fieldset set = {&OPTIONS, &o}, at_defaults = {&OPTIONS, (void *)&defaults};
    if (mt_fieldset_parse_args(&set, 1, argc, argv, NULL, &e) != MT_OK) die(2, e.msg);
    if (o.help) {
        char *help = mt_fieldset_help(&at_defaults, 1, NULL, 0);
        printf("usage: ./export --checkpoint out/model.safetensors --format llama2c --out "
               "model.bin\n"
               "       ./export --checkpoint out/model.safetensors --format gguf --out "
               "model.gguf\n"
               "       ./export --checkpoint out/model.safetensors --format hf --out hf-model\n"
               "       ./export --checkpoint out/model.safetensors --merge-lora --format "
               "checkpoint --out merged.safetensors\n\n%s",
               help);
        free(help);
        return 0;
    }
    if (!o.checkpoint[0]) die(2, "--checkpoint FILE is required (./export --help lists the flags)");
    if (!o.out[0]) die(2, "--out FILE is required: where the exported model goes");
    if (mt_file_check("--checkpoint", o.checkpoint, &e) != MT_OK) die(2, e.msg);
    if (o.format == MT_EXPORT_LLAMA2C && !o.tokenizer_out[0]) {
        const char *slash = strrchr(o.out, '/');
        int dir = slash ? (int)(slash - o.out + 1) : 0;
        if (snprintf(o.tokenizer_out, sizeof o.tokenizer_out, "%.*stokenizer.bin", dir, o.out) >=
            (int)sizeof o.tokenizer_out)
            die(2, "--out: the path is too long");
    }
    if (o.format != MT_EXPORT_LLAMA2C && o.tokenizer_out[0])
        die(2, "--tokenizer-out: --format llama2c only (the other formats write no tokenizer)");
    if (o.format == MT_EXPORT_HF) check_hf_out(&o);
    if (o.format == MT_EXPORT_LLAMA2C && strcmp(o.out, o.tokenizer_out) == 0)
        die(2, "--out and --tokenizer-out name the same file: give them different names");
    if ((o.format != MT_EXPORT_HF && mt_output_file_check("--out", o.out, &e) != MT_OK) ||
        (o.format == MT_EXPORT_LLAMA2C &&
         mt_output_file_check("--tokenizer-out", o.tokenizer_out, &e) != MT_OK) ||
        (o.format != MT_EXPORT_HF &&
         mt_output_check("--out", o.out, "--checkpoint", o.checkpoint, &e) != MT_OK) ||
        (o.format == MT_EXPORT_LLAMA2C &&
         mt_output_check("--tokenizer-out", o.tokenizer_out, "--checkpoint", o.checkpoint, &e) !=
             MT_OK))
        die(2, e.msg);
    if (o.f16 && (o.format == MT_EXPORT_CHECKPOINT || o.format == MT_EXPORT_HF))
        die(2, "--f16: --format gguf only (a checkpoint and hf's model.safetensors hold float32)");
    mt_model *model;
    mt_ckpt_state state;
    char *options, lora[256];
    mt_status s = mt_ckpt_load(o.checkpoint, &model, &state, &options, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    const char *fname = mt_enum_name(&MT_EXPORT_FORMATS, o.format);
    if (o.merge_lora && !mt_params_merge_lora(model->P)) {
        snprintf(msg, sizeof msg,
                 "--merge-lora: %s holds no LoRA adapters (./train --lora-rank R writes them)",
                 o.checkpoint);
        die(2, msg);
    }
    if (o.format != MT_EXPORT_CHECKPOINT && mt_ckpt_lora_describe(model->P, lora, sizeof lora)) {
        snprintf(msg, sizeof msg,
                 "%s holds LoRA adapters (%s), which --format %s cannot: give --merge-lora to "
                 "fold them into the matrices",
                 o.checkpoint, lora, fname);
        die(2, msg);
    }
    if (o.format == MT_EXPORT_CHECKPOINT) {
        s = mt_ckpt_save(o.out, model, &state, options, &e);
        if (s != MT_OK) die(mt_exit_code(s), e.msg);
        printf("wrote %s (checkpoint%s)\n", o.out, o.merge_lora ? ", LoRA merged" : "");
        free(options);
        mt_model_free(model);
        return 0;
    }
    free(options);
    if (!model->type->export) {
        snprintf(msg, sizeof msg,
                 "%s is a %s checkpoint: --format %s holds a decoder-only "
                 "language model (a gpt checkpoint, trained with --arch llama)",
                 o.checkpoint, model->type->name, fname);
        die(2, msg);
    }
    mt_import_arch arch;
    mt_export_opts eo = {(mt_export_format)o.format, o.out, o.tokenizer_out, o.f16, &arch};
    s = model->type->export(model, &eo, &e);
    if (s == MT_OK && o.format == MT_EXPORT_HF) s = mt_hf_write(o.out, model, &arch, &e);
    if (s != MT_OK) die(mt_exit_code(s), e.msg);
    if (o.format == MT_EXPORT_HF)
        printf("wrote %s/config.json and %s/model.safetensors (hf, %s, float32)\n", o.out, o.out,
               arch.format == MT_IMPORT_GGUF ? "LlamaForCausalLM" : "GPT2LMHeadModel");
    else if (o.format == MT_EXPORT_LLAMA2C)
        printf("wrote %s and %s (llama2c)\n", o.out, o.tokenizer_out);
    else printf("wrote %s (gguf, %s)\n", o.out, o.f16 ? "float16 matrices" : "float32");
    mt_model_free(model);
    return 0;
}
