/* mt io: safetensors files, metrics; options from flags and config files
 * are fields.h's.
 * safetensors: 8-byte little-endian header length N, N bytes of JSON, then raw data.
 * The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * into the data section) and may hold "__metadata__", an object of string values. */
#ifndef MT_IO_H
#define MT_IO_H

#include <stdio.h>

#include "../tensor/base.h"
#include "../tensor/params.h"
#include "fields.h"

typedef struct {
    char name[128];
    int ndim; /* 0 for a scalar */
    int shape[MT_MAX_DIMS];
    size_t n;          /* elements */
    const float *data; /* into the loaded file's aligned data copy */
} mt_st_entry;

typedef struct {
    int n;
    mt_st_entry *t; /* in the order of the file's header */
    int n_meta;
    char **meta_key, **meta_val;
    float *blob; /* the data section, 64-byte aligned */
    /* the tensors by name, for mt_st_find */
    mt_name_index index;
} mt_safetensors;

/* Reads and validates a whole file: F32 tensors only, offsets inside the data section, sizes
   that match the shapes, no overlap. Errors name the file and the offending entry. */
mt_status mt_st_load(const char *path, mt_safetensors *st, mt_err *err);
/* The same from a whole file already in memory; name is used in messages. */
mt_status mt_st_parse(const char *name, const void *buf, size_t size, mt_safetensors *st,
                      mt_err *err);
const mt_st_entry *mt_st_find(const mt_safetensors *st, const char *name);
/* Appends a tensor of ndim (1..4) dims shape (outermost first) at data (not copied) to st, whose
   t has room for it: its index, -2 when st holds one of its name already, -1 out of memory. What
   an importer builds of another format's file. */
int mt_st_add(mt_safetensors *st, const char *name, int ndim, const int *shape, const float *data);
const char *mt_st_meta(const mt_safetensors *st, const char *key); /* NULL when absent */
void mt_st_free(mt_safetensors *st);

typedef struct {
    const char *name;
    int ndim;
    const int *shape;
    const float *data;
} mt_st_item;

/* Writes path atomically: a temporary file beside it, fsynced, then renamed over path. */
mt_status mt_st_save(const char *path, int n, const mt_st_item *items, int n_meta,
                     const char *const *meta_keys, const char *const *meta_vals, mt_err *err);

/* A program's exit code for a failed status: 2 when the run cannot start as asked (MT_EINVAL:
   a flag or config value; MT_EFORMAT: a malformed input file), 1 for a failure while working
   (I/O, out of memory, divergence). */
int mt_exit_code(mt_status s);

/* ---- paths and memory, checked before any work ----------------------------------------------
 * flag names the option in messages ("--data"); every failure is MT_EINVAL but the memory one. */
/* path is an existing, readable regular file (not a directory). */
mt_status mt_file_check(const char *flag, const char *path, mt_err *err);
/* Every file mt reads or appends to is opened here: fopen's mode ("rb", "r+b", "ab", "wb") on a
   regular file only. A pipe, a device or a directory is MT_EINVAL "what path is a pipe: expected
   a regular file", found without waiting for a pipe's other end; MT_EIO when it cannot be opened.
   what names the file in messages ("--config", "the metrics file"). */
mt_status mt_file_open(const char *what, const char *path, const char *mode, FILE **f, mt_err *err);
/* A regular file's whole text through mt_file_open (what as there): *buf malloc'd and
   NUL-terminated, *len without the NUL; *buf NULL on a failure. */
mt_status mt_file_read(const char *what, const char *path, char **buf, size_t *len, mt_err *err);
/* The same as a file descriptor: open(2)'s flags (O_RDONLY, ...); *fd -1 on a failure. */
mt_status mt_fd_open(const char *what, const char *path, int flags, int *fd, mt_err *err);
/* dir is a directory, or can be created under its nearest existing ancestor, and a file can be
   created there (probed: a file is created and removed). */
mt_status mt_dir_check_writable(const char *flag, const char *dir, mt_err *err);
/* MT_EINVAL when the output path out (of flag) names the same existing file as the input in (of
   in_flag), by device and inode (links, "./" and ".." included): a write would destroy it. */
mt_status mt_output_check(const char *flag, const char *out, const char *in_flag, const char *in,
                          mt_err *err);
/* mkdir -p path (flag names it in messages). */
mt_status mt_make_dirs(const char *flag, const char *path, mt_err *err);
/* How many of path's last components do not exist: the directories mt_make_dirs would create. */
int mt_missing_dirs(const char *path);
/* Removes path and its parents, n directories in all, while they are empty: what mt_make_dirs
   created for a run refused before it wrote anything. */
void mt_remove_new_dirs(const char *path, int n);
/* true when the JSON objects a and b hold the same keys with the same values; else msg gets the
   first difference, "key is <a's> in the checkpoint, <b's> now" (or that a has fewer keys): the
   first of a string, a choice (arch, norm) that may set the others, when one differs. */
bool mt_json_same(const char *a, const char *b, char *msg, size_t len);
/* A file written whole or not at all: writes go to path.tmp (one name per target: a write killed
   midway leaves a file the next write overwrites), which mt_atomic_close flushes, fsyncs and
   renames over path (then fsyncs the directory) when ok, and removes otherwise. A path that
   exists must be a regular file (mt_output_file_check); a symbolic link to one is written
   through (its target replaced, the link kept). */
typedef struct {
    FILE *f;
    char *tmp;
    const char *path;
    char *target; /* path, or the file its symbolic link names */
} mt_atomic_file;
/* MT_EINVAL naming flag when path exists and is not a regular file (after symbolic links): a
   device, a pipe, a directory would be replaced by the rename; nor a link through /proc
   (/dev/stdout, /proc/self/fd/N): the rename would replace the file the descriptor is open on. */
mt_status mt_output_file_check(const char *flag, const char *path, mt_err *err);
mt_status mt_atomic_open(mt_atomic_file *a, const char *path, mt_err *err);
/* ok: every write succeeded. MT_EIO naming path when ok is false or the file cannot be
   completed. */
mt_status mt_atomic_close(mt_atomic_file *a, bool ok, mt_err *err);

/* Bytes that can be allocated now: MemAvailable of /proc/meminfo, else the free pages. */
double mt_mem_available(void);
/* MemTotal + SwapTotal of /proc/meminfo: the kernel refuses one allocation larger than that
   (overcommit's heuristic), however little of it would be touched. */
double mt_mem_total(void);
/* MT_ENOMEM "needs X GiB, Y GiB available (what)" when need (bytes) exceeds mt_mem_available. */
mt_status mt_mem_check(double need, const char *what, mt_err *err);

/* ---- metrics: a CSV file, one row per logged step ----------------------------------------------
 * Header: step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s, then the caller's columns (a
 * model's evaluation metrics val_wer, ...; --qk-clip's qk_clipped, qk_max_logit). val_loss and
 * the metrics are empty when not evaluated; ms is the logged step's time, elapsed_s the run's wall
 * time so far. */
typedef struct {
    FILE *f;
    double elapsed0; /* a resumed run: the elapsed_s of the last row kept (0: none) */
    int n_extra;     /* the caller's columns */
} mt_metrics;

typedef struct {
    long step;
    double loss, val_loss; /* val_loss NAN: not evaluated at this step */
    double lr, grad_norm, ms, tok_per_s;
    double elapsed_s;    /* seconds since training started (a resumed run: m->elapsed0 + its own) */
    const double *extra; /* (n_extra) the columns' values, NAN: empty; NULL: none */
} mt_metrics_row;

/* keep_until < 0: a new file. Otherwise the rows of an existing file up to step keep_until are
   kept (a resumed run rewrites what followed its checkpoint) and new rows are appended; a file
   of the older format (no elapsed_s) is rewritten in the current one, elapsed_s empty. */
mt_status mt_metrics_open(mt_metrics *m, const char *path, long keep_until, mt_err *err);
/* The same with a column of each of the NULL-terminated extra names (NULL: none). */
mt_status mt_metrics_open_with(mt_metrics *m, const char *path, long keep_until,
                               const char *const *extra, mt_err *err);
mt_status mt_metrics_write(mt_metrics *m, const mt_metrics_row *r, mt_err *err);
void mt_metrics_close(mt_metrics *m);

#endif
