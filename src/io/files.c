/* Paths named by the user, checked before any work: input files, output directories, memory;
 * and the exit code of a failed status. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "io.h"

mt_status mt_file_check(const char *flag, const char *path, mt_err *err) {
    struct stat sb;
    if (!*path) return mt_errorf(err, MT_EINVAL, "%s: no file given: expected a path", flag);
    if (stat(path, &sb) != 0)
        return mt_errorf(err, MT_EINVAL, "%s %s: %s: expected an existing file", flag, path,
                         strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return mt_errorf(err, MT_EINVAL, "%s %s is a directory: expected a file", flag, path);
    if (!S_ISREG(sb.st_mode))
        return mt_errorf(err, MT_EINVAL, "%s %s is not a regular file: expected a file", flag,
                         path);
    if (access(path, R_OK) != 0)
        return mt_errorf(err, MT_EINVAL, "%s %s: %s: expected a readable file", flag, path,
                         strerror(errno));
    return MT_OK;
}

/* path's last component cut off ("a/b/" -> "a", "a" -> ".", "/a" -> "/"); false at "." or "/". */
static bool cut_last(char *path) {
    if (strcmp(path, ".") == 0 || strcmp(path, "/") == 0) return false;
    char *slash = strrchr(path, '/');
    while (slash && slash > path && slash[1] == 0) *slash = 0, slash = strrchr(path, '/');
    if (!slash) strcpy(path, ".");
    else if (slash == path) strcpy(path, "/");
    else *slash = 0;
    return true;
}

mt_status mt_dir_check_writable(const char *flag, const char *dir, mt_err *err) {
    char probe[1100], parent[1024];
    struct stat sb;
    if (!*dir) return mt_errorf(err, MT_EINVAL, "%s: no directory given: expected a path", flag);
    if (snprintf(parent, sizeof parent, "%s", dir) >= (int)sizeof parent)
        return mt_errorf(err, MT_EINVAL, "%s: the path is longer than %zu characters", flag,
                         sizeof parent - 1);
    /* the directory itself, or the nearest ancestor that exists (mkdir -p creates the rest) */
    while (stat(parent, &sb) != 0) {
        if (errno != ENOENT)
            return mt_errorf(err, MT_EINVAL, "%s %s: %s: expected a writable directory", flag, dir,
                             strerror(errno));
        cut_last(parent);
    }
    if (!S_ISDIR(sb.st_mode))
        return mt_errorf(err, MT_EINVAL, "%s %s: %s is a file, expected a directory", flag, dir,
                         parent);
    /* access() says yes to root everywhere but on read-only mounts: create and remove a file */
    snprintf(probe, sizeof probe, "%s/.mt-write-probe.%d", parent, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return mt_errorf(err, MT_EINVAL,
                         "%s %s: cannot write in %s: %s: expected a writable "
                         "directory",
                         flag, dir, parent, strerror(errno));
    close(fd);
    unlink(probe);
    return MT_OK;
}

/* MemAvailable from /proc/meminfo (what can be allocated without swapping), else the free
   physical pages. */
double mt_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    if (kib >= 0) return kib * 1024;
    return (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

double mt_mem_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double ram = -1, swap = 0, kib;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %lf kB", &kib) == 1) ram = kib;
        else if (sscanf(line, "SwapTotal: %lf kB", &kib) == 1) swap = kib;
    if (f) fclose(f);
    if (ram >= 0) return (ram + swap) * 1024;
    return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

mt_status mt_mem_check(double need, const char *what, mt_err *err) {
    double avail = mt_mem_available(), gib = 1024.0 * 1024 * 1024;
    if (need <= avail) return MT_OK;
    return mt_errorf(err, MT_ENOMEM,
                     "needs %.2f GiB, %.2f GiB available (%s): use a smaller "
                     "model or batch",
                     need / gib, avail / gib, what);
}

/* What kind of file st is, for messages. */
static const char *file_kind(const struct stat *st) {
    return S_ISDIR(st->st_mode)    ? "a directory"
           : S_ISCHR(st->st_mode)  ? "a character device"
           : S_ISBLK(st->st_mode)  ? "a block device"
           : S_ISFIFO(st->st_mode) ? "a pipe"
           : S_ISSOCK(st->st_mode) ? "a socket"
                                   : "not a regular file";
}

mt_status mt_fd_open(const char *what, const char *path, int flags, int *fd, mt_err *err) {
    /* O_NONBLOCK: a pipe opens at once (instead of waiting for its other end) to be refused */
    *fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
    struct stat st;
    if (*fd < 0 && errno != ENXIO) /* ENXIO: a pipe opened for writing that no one reads */
        return mt_errorf(err, MT_EIO, "%s %s: cannot open: %s", what, path, strerror(errno));
    if (*fd < 0 ? stat(path, &st) != 0 : fstat(*fd, &st) != 0) st.st_mode = 0;
    if (S_ISREG(st.st_mode) && fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) == 0)
        return MT_OK;
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return mt_errorf(err, MT_EINVAL, "%s %s is %s: expected a regular file", what, path,
                     file_kind(&st));
}

mt_status mt_file_open(const char *what, const char *path, const char *mode, FILE **f,
                       mt_err *err) {
    int fd, flags = mode[0] == 'r'   ? (strchr(mode, '+') ? O_RDWR : O_RDONLY)
                    : mode[0] == 'a' ? O_WRONLY | O_CREAT | O_APPEND
                                     : O_WRONLY | O_CREAT | O_TRUNC;
    mt_status s = mt_fd_open(what, path, flags, &fd, err);
    if (s != MT_OK || (*f = fdopen(fd, mode))) return s;
    close(fd);
    return mt_errorf(err, MT_EIO, "%s %s: cannot open: %s", what, path, strerror(errno));
}

/* true when path, or a symbolic link on the way from it to its file, lies in /proc
   (/proc/self/fd/1, /dev/stdout, /dev/fd/1): the name of a file descriptor, whatever it is open
   on now, where a rename would replace the file behind it (a log the shell appends to). */
static bool names_descriptor(const char *path) {
    char hop[4096], next[4096];
    snprintf(hop, sizeof hop, "%s", path);
    for (int hops = 0; hops < 40; hops++) { /* the kernel's limit on links followed */
        struct stat st;
        struct statfs fs;
        char dir[4096];
        if (lstat(hop, &st) != 0 || !S_ISLNK(st.st_mode)) return false;
        snprintf(dir, sizeof dir, "%s", hop);
        if (statfs(dirname(dir), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) return true;
        ssize_t n = readlink(hop, next, sizeof next - 1);
        if (n < 0) return false;
        next[n] = 0;
        snprintf(dir, sizeof dir, "%s", hop);
        const char *base = next[0] == '/' ? "" : dirname(dir), *sep = next[0] == '/' ? "" : "/";
        if (snprintf(hop, sizeof hop, "%s%s%.4000s", base, sep, next) >= (int)sizeof hop)
            return false;
    }
    return false;
}

mt_status mt_output_file_check(const char *flag, const char *path, mt_err *err) {
    struct stat st;
    if (!*path) return mt_errorf(err, MT_EINVAL, "%s: no file given: expected a path", flag);
    if (names_descriptor(path))
        return mt_errorf(err, MT_EINVAL,
                         "%s %s names an open file descriptor (/proc/self/fd, /dev/stdout): "
                         "expected a regular file or a new name (the file is written beside it "
                         "and renamed over it, which would replace what the descriptor is open "
                         "on)",
                         flag, path);
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return MT_OK; /* new, or a file */
    return mt_errorf(err, MT_EINVAL,
                     "%s %s is %s: expected a regular file or a new name (the file is written "
                     "beside it and renamed over it, which would replace it)",
                     flag, path, file_kind(&st));
}

mt_status mt_file_read(const char *what, const char *path, char **buf, size_t *len, mt_err *err) {
    *buf = NULL;
    FILE *f;
    mt_status s = mt_file_open(what, path, "rb", &f, err);
    if (s != MT_OK) return s;
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        s = mt_errorf(err, MT_EIO, "%s: cannot determine its size", path);
    } else if (!(*buf = malloc((size_t)size + 1))) {
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %lld bytes", path, (long long)size);
    } else if (fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        s = mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
    } else {
        (*buf)[size] = 0;
        *len = (size_t)size;
    }
    fclose(f);
    if (s != MT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return s;
}

mt_status mt_atomic_open(mt_atomic_file *a, const char *path, mt_err *err) {
    memset(a, 0, sizeof *a);
    a->path = path;
    mt_status s = mt_output_file_check("the output", path, err);
    if (s != MT_OK) return s;
    /* a symbolic link to a file is written through: the file is replaced, the link stays */
    struct stat st;
    bool link = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
    char *target = link ? realpath(path, NULL) : strdup(path);
    size_t len = target ? strlen(target) + 8 : 0;
    if (!target || !(a->tmp = malloc(len))) {
        free(target);
        return mt_errorf(err, link ? MT_EIO : MT_ENOMEM, "%s: cannot resolve: %s", path,
                         strerror(errno));
    }
    a->target = target;
    snprintf(a->tmp, len, "%s.tmp", target);
    if (!(a->f = fopen(a->tmp, "wb"))) {
        s = mt_errorf(err, MT_EIO, "%s: cannot create: %s", a->tmp, strerror(errno));
        free(a->tmp);
        free(a->target);
        memset(a, 0, sizeof *a);
        return s;
    }
    return MT_OK;
}

static void sync_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

mt_status mt_atomic_close(mt_atomic_file *a, bool ok, mt_err *err) {
    mt_status s = MT_OK;
    ok = ok && fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    if (fclose(a->f) != 0) ok = false;
    if (!ok || rename(a->tmp, a->target) != 0) {
        s = mt_errorf(err, MT_EIO, "%s: cannot write: %s", a->path, strerror(errno));
        unlink(a->tmp);
    } else sync_dir(a->target);
    free(a->tmp);
    free(a->target);
    memset(a, 0, sizeof *a);
    return s;
}

mt_status mt_make_dirs(const char *flag, const char *path, mt_err *err) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return mt_errorf(err, MT_EINVAL, "%s: the path is too long", flag);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mt_errorf(err, MT_EIO, "%s: cannot create the directory: %s", buf,
                             strerror(errno));
        if (!(*p = c)) break;
    }
    return MT_OK;
}

int mt_missing_dirs(const char *path) {
    char buf[1024];
    struct stat st;
    int n = 0;
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return 0;
    while (stat(buf, &st) != 0 && errno == ENOENT && cut_last(buf)) n++;
    return n;
}

void mt_remove_new_dirs(const char *path, int n) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (int i = 0; i < n && rmdir(buf) == 0; i++) cut_last(buf);
}

int mt_exit_code(mt_status s) { return s == MT_EINVAL || s == MT_EFORMAT ? 2 : 1; }

mt_status mt_output_check(const char *flag, const char *out, const char *in_flag, const char *in,
                          mt_err *err) {
    struct stat so, si;
    if (stat(out, &so) != 0 || stat(in, &si) != 0) return MT_OK; /* no such file: no clash */
    if (so.st_dev != si.st_dev || so.st_ino != si.st_ino) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "%s %s is the file %s names (%s): writing it would destroy the input; "
                     "choose another %s",
                     flag, out, in_flag, in, flag);
}
