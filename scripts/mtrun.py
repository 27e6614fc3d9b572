"""What the study scripts share: running ./train (and ./infer) with a log, reading what ./train
writes into typed rows, the run labels of the depth studies, and gnuplot.

./train --out DIR writes (src/io/metrics.c, src/diag/diag.c):
  metrics.csv      step,loss,val_loss,lr,grad_norm,ms,tok_per_s,elapsed_s[,val_<metric>...], a
                   row per logged step; val_* cells are empty on a row without an evaluation.
                   An older file has no elapsed_s; a resumed one has it empty on its old rows.
  diag_grad.csv    step,layer,attn_norm,attn,ffn_norm,ffn,total: each block's gradient norm after
                   `step` updates, and a layer -1 row (the parameters outside the blocks: only
                   its total is filled).
  diag_update.csv  step,update: DeepNet's model update on a fixed batch.
  diag_resid.csv   step,layer,norm: the residual stream entering block `layer` (n_layer: after
                   the last block).
  diag_attn.csv    step,layer,self,cross: each block's largest attention logit q.k / sqrt(HS),
                   of its self-attention and (a decoder block) its cross-attention, else empty.
  diag_logz.csv    step,mean,max: log Z of the output logits over the diagnostic batch.
  diag_skip.csv    step,block,loss,delta: the loss with block `block` skipped (-1: none, the
                   whole model, delta 0), delta = loss - the whole model's.
read_metrics, read_grad, read_update, read_resid, read_attn, read_logz and read_skip return them
as rows of typed fields: int step, layer and block, float values, None for an empty cell or a
column the file lacks. A last line without its newline (a file being written) is left out.

Python 3 standard library; gnuplot for the plots.
"""
import csv
import json
import math
import os
import re
import struct
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# OpenMP threads wait passively at barriers unless the caller's environment says otherwise: on a
# machine shared with other work a spinning thread costs more than the work it waits for.
ENV = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))


# ---- running ---------------------------------------------------------------------------------

def flags(options):
    """./train's argv from a dict, in its order: {"n-layer": 4, "--untie": True, "tied": False,
    "init": None} -> ["--n-layer", "4", "--untie", "--tied=false"] (None: left out)."""
    out = []
    for name, value in options.items():
        flag = name if name.startswith("--") else "--" + name
        if value is None:
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            out.append(flag + "=false")
        else:
            out += [flag, str(value)]
    return out


def build(*targets):
    """make -s TARGETS in the repository (the programs the script runs, up to date)."""
    subprocess.check_call(["make", "-s", *targets], cwd=ROOT)


@dataclass
class Result:
    """A finished command: its exit status (-signal when killed), wall and CPU seconds (its own
    user + system time, whatever the load), the load average before and after."""
    rc: int
    wall: float
    cpu: float
    load: tuple
    timed_out: bool
    log: str

    def text(self):
        with open(self.log) as f:
            return f.read()


def safetensors_header(f):
    """The JSON header of a safetensors file open at its start (a u64 size, then the JSON); the
    file is left at the tensors' bytes."""
    (n,) = struct.unpack("<Q", f.read(8))
    return json.loads(f.read(n))


def read_safetensors(path):
    """(header, bytearray of the tensors' bytes, which each entry's data_offsets index)."""
    with open(path, "rb") as f:
        return safetensors_header(f), bytearray(f.read())


def ckpt_meta(path):
    """The metadata of a checkpoint of ./train's (its header's "__metadata__": "step",
    "options", ...): {} when there is no file."""
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        return safetensors_header(f).get("__metadata__", {})


def ckpt_step(path):
    """The step a checkpoint was saved at; 0 when there is none."""
    return int(ckpt_meta(path).get("step", 0))


def set_tensors(path, which, value):
    """Every element of the tensors whose name satisfies which(name) := value in a checkpoint
    of ./train's (safetensors: a u64 header size, the JSON header, then the tensors' bytes at
    their data_offsets; F32 little-endian). The edited file drops its checksums (metadata
    mt_crc32c, which no longer hold); mt reads it as it reads other writers' files."""
    header, data = read_safetensors(path)
    header.get("__metadata__", {}).pop("mt_crc32c", None)
    for name, e in header.items():
        if name != "__metadata__" and which(name):
            assert e["dtype"] == "F32", name
            begin, end = e["data_offsets"]
            count = (end - begin) // 4
            data[begin:end] = struct.pack("<%df" % count, *[value] * count)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))
    os.replace(path + ".tmp", path)


def run(cmd, log, timeout=None, env=ENV, cwd=None):
    """Runs cmd with stdout and stderr into the file log (created, with its directory); kills it
    after timeout seconds (None: no limit). Returns a Result."""
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    load0, t0 = os.getloadavg()[0], time.time()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        timed_out = False
        while True:  # wait4 for the child's own CPU time; polled to honour the timeout
            pid, status, usage = os.wait4(p.pid, os.WNOHANG if timeout else 0)
            if pid:
                break
            if time.time() - t0 > timeout:
                p.kill()
                timed_out = True
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    return Result(p.returncode, time.time() - t0, usage.ru_utime + usage.ru_stime,
                  (load0, os.getloadavg()[0]), timed_out, log)


def scores(cmd, env=ENV, cwd=None):
    """Runs a program that ends with a key=value line (./infer --score, --score-file) and returns
    that line's values: floats, or text where a value is not a number."""
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env,
                         cwd=cwd).stdout
    line = [l for l in out.splitlines() if "=" in l][-1]
    values = {}
    for kv in line.split():
        k, v = kv.split("=", 1)
        try:
            values[k] = float(v)
        except ValueError:
            values[k] = v
    return values


# ---- numbers and files -----------------------------------------------------------------------

def num(s):
    """A cell as a float: NaN when empty or not a number (the scripts' own summary files)."""
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan


def load_module(name, path):
    """The Python file at path as a module called name: for scripts whose file names clash
    (bench/nanogpt's and bench/speedrun's search.py)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_candidates(names, run_one, path, fields, jobs=None):
    """run_one(name) -> a row (dict of fields) for each name, JOBS (default 2) at a time, each row
    appended to the CSV at path as it finishes (its header first when the file is new): a search
    stopped part way keeps what it measured and the caller skips the names already there."""
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(jobs or int(os.environ.get("JOBS", "2"))) as ex:
        for f in cf.as_completed([ex.submit(run_one, n) for n in names]):
            row = f.result()
            new = not os.path.exists(path)
            with open(path, "a", newline="") as out:
                w = csv.DictWriter(out, fields)
                if new:
                    w.writeheader()
                w.writerow(row)
            print(row, flush=True)


def read_csv(path):
    """A CSV file's rows as dicts of text; [] when the file does not exist."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def copy_columns(src, dst, columns, keep=None):
    """dst: the columns of the CSV file src (one ./train writes), as written (no number is
    reformatted). columns maps a column of dst to the column of src it copies ("wer":
    "val_wer"), or is a list of names kept as they are; keep(row) (the row of text cells)
    selects rows. A cell src lacks is empty."""
    if not isinstance(columns, dict):
        columns = {c: c for c in columns}
    rows = csv.DictReader(complete_lines(src))
    with open(dst, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(columns))
        w.writerows([r.get(c, "") for c in columns.values()] for r in rows
                    if keep is None or keep(r))


def finite(rows):
    """The (x, y) pairs of rows whose both values are finite numbers (not None)."""
    return [(x, y) for x, y in rows
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]


# ---- ./train's files -------------------------------------------------------------------------

@dataclass
class Metrics:
    """A row of metrics.csv. val: the val_<metric> columns by metric ("wer"); text: the cells as
    written (to copy a value exactly)."""
    step: int
    loss: Optional[float]
    val_loss: Optional[float]
    lr: Optional[float]
    grad_norm: Optional[float]
    ms: Optional[float]
    tok_per_s: Optional[float]
    elapsed_s: Optional[float]
    val: Dict[str, Optional[float]] = field(default_factory=dict)
    text: Dict[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class GradRow:
    """A row of diag_grad.csv; layer -1 (the parameters outside the blocks) has total only."""
    step: int
    layer: int
    attn_norm: Optional[float]
    attn: Optional[float]
    ffn_norm: Optional[float]
    ffn: Optional[float]
    total: Optional[float]


@dataclass
class UpdateRow:
    step: int
    update: Optional[float]


@dataclass
class ResidRow:
    step: int
    layer: int
    norm: Optional[float]


@dataclass
class AttnRow:
    """A row of diag_attn.csv; cross is None but in an encoder-decoder's decoder blocks."""
    step: int
    layer: int
    self: Optional[float]
    cross: Optional[float]


@dataclass
class LogzRow:
    step: int
    mean: Optional[float]
    max: Optional[float]


@dataclass
class SkipRow:
    """A row of diag_skip.csv; block -1 is the whole model (delta 0)."""
    step: int
    block: int
    loss: Optional[float]
    delta: Optional[float]


INT_COLUMNS = ("step", "layer", "block")


def parse_rows(lines, source, kind):
    """The rows of CSV lines (the header first) as kind's dataclass: every field of kind from the
    column of its name (int for step and layer, float otherwise, None when empty or absent);
    Metrics also gets the val_<metric> columns and the text. A malformed cell is a ValueError
    naming source, its line and column; a file without a step column is one too."""
    rows = list(csv.reader(lines))
    if not rows:
        return []
    head = rows[0]
    if "step" not in head:
        raise ValueError("%s: no step column in its header %s" % (source, ",".join(head)))
    names = [f for f in kind.__dataclass_fields__ if f not in ("val", "text")]
    out = []
    for n, cells in enumerate(rows[1:], 2):
        cell = dict(zip(head, cells))
        values = {}
        for name in names + [h for h in head if kind is Metrics and h.startswith("val_")
                             and h != "val_loss"]:
            s = cell.get(name, "")
            try:
                values[name] = None if s == "" else int(s) if name in INT_COLUMNS else float(s)
            except ValueError:
                raise ValueError("%s:%d: column %s: %r is not a number" % (source, n, name, s))
        if values.get("step") is None:
            raise ValueError("%s:%d: no step" % (source, n))
        row = kind(**{k: values[k] for k in names})
        if kind is Metrics:
            row.val = {k[4:]: v for k, v in values.items() if k.startswith("val_")
                       and k != "val_loss"}
            row.text = cell
        out.append(row)
    return out


def complete_lines(path):
    """The lines of a file ./train writes, without a last line still being written (no newline
    yet); [] when the file does not exist."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        text = f.read()
    lines = text.splitlines()
    return lines[:-1] if text and not text.endswith("\n") else lines


def read_rows(path, kind):
    """parse_rows of a file ./train writes; [] when it does not exist."""
    return parse_rows(complete_lines(path), path, kind)


def read_metrics(path):
    return read_rows(path, Metrics)


def parse_metrics(lines, source="<metrics>"):
    """Metrics rows of metrics.csv lines (the header first)."""
    return parse_rows(lines, source, Metrics)


def read_grad(path):
    return read_rows(path, GradRow)


def read_update(path):
    return read_rows(path, UpdateRow)


def read_resid(path):
    return read_rows(path, ResidRow)


def read_attn(path):
    return read_rows(path, AttnRow)


def read_logz(path):
    return read_rows(path, LogzRow)


def read_skip(path):
    return read_rows(path, SkipRow)


def evals(metrics):
    """The rows with an evaluation (a validation loss)."""
    return [r for r in metrics if r.val_loss is not None]


def final_val(metrics):
    """The last validation loss, NaN when there is none."""
    e = evals(metrics)
    return e[-1].val_loss if e else math.nan


class RunDir:
    """What ./train --out path wrote: metrics, grad, update, resid, attn, logz, skip (lists of
    rows; empty when the file is absent)."""

    def __init__(self, path):
        self.path = path
        self.metrics = read_metrics(os.path.join(path, "metrics.csv"))
        self.grad = read_grad(os.path.join(path, "diag_grad.csv"))
        self.update = read_update(os.path.join(path, "diag_update.csv"))
        self.resid = read_resid(os.path.join(path, "diag_resid.csv"))
        self.attn = read_attn(os.path.join(path, "diag_attn.csv"))
        self.logz = read_logz(os.path.join(path, "diag_logz.csv"))
        self.skip = read_skip(os.path.join(path, "diag_skip.csv"))


# ---- the log ---------------------------------------------------------------------------------

def log_field(text, key):
    """The rest of the first log line that starts with key and spaces ("data", "model",
    "train"), or None."""
    m = re.search(r"^%s\s+(.*)$" % re.escape(key), text, re.M)
    return m.group(1) if m else None


def diverged_at(text):
    """The step whose loss was not finite, from ./train's message ("train: step 12: the loss is
    nan ..."), or None."""
    m = re.search(r"step (\d+): the loss is", text)
    return int(m.group(1)) if m else None


PROGRESS = re.compile(r"^\r?step\s+(\d+)/\d+ .*?\| val (.*)$", re.M)


def progress_evals(text):
    """(step, {"val": loss, "acc": accuracy, metric: value...}) of the progress lines with an
    evaluation. For what metrics.csv does not hold: a model's accuracy (./train prints it, the
    file has no column for it)."""
    out = []
    for step, rest in PROGRESS.findall(text):
        words = ("val " + rest).split()
        out.append((int(step), {k: float(v) for k, v in zip(words[::2], words[1::2])}))
    return out


# ---- labels ----------------------------------------------------------------------------------

STALL_MARGIN = 0.1
DATA = "data/tinyshakespeare.txt"
VAL_FRACTION = 0.1  # ./train's default: the last tenth of the bytes


def byte_entropy(path=DATA, val_fraction=VAL_FRACTION):
    """Entropy (nats) of the byte distribution of the validation split, the loss of a model
    that predicts the byte frequencies and ignores the context (mt_tokens_split's split)."""
    with open(path, "rb") as f:
        data = f.read()
    val = data[len(data) - int(len(data) * val_fraction):]
    counts = [0] * 256
    for b in val:
        counts[b] += 1
    n = len(val)
    return -sum(c / n * math.log(c / n) for c in counts if c)


def label(returncode, metrics, entropy, log=""):
    """'diverged' (non-finite loss: ./train exits 1 saying so, or a non-finite value in the
    metrics), 'stalled' (final validation loss >= entropy - STALL_MARGIN), 'failed' (any other
    error, or no evaluation), 'trained'. metrics: Metrics rows."""
    losses = [r.loss for r in metrics] + [r.val_loss for r in evals(metrics)]
    nonfinite = any(x is None or not math.isfinite(x) for x in losses)
    if returncode != 0:
        return "diverged" if nonfinite or "the loss is" in log else "failed"
    if nonfinite:
        return "diverged"
    if not evals(metrics):
        return "failed"
    return "stalled" if final_val(metrics) >= entropy - STALL_MARGIN else "trained"


def cpu_model():
    """/proc/cpuinfo's first model name, "?" without one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


# ---- documents and plots ---------------------------------------------------------------------

def with_notes(page, generated):
    """The generated text followed by the hand-written part, page's .notes.md (if any)."""
    notes = page.replace(".md", ".notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            generated += "\n" + f.read()
    return generated


def gnuplot(script, path):
    """Runs a gnuplot script (kept beside path while it runs)."""
    with open(path + ".gp", "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", path + ".gp"], check=True)
    os.remove(path + ".gp")


def header(png, title, xlabel, ylabel, extra="", size="760,460"):
    """A plot's settings: the PNG, its title and axis labels, a grid, the key top right."""
    return ("set terminal pngcairo size %s font 'DejaVu Sans,10'\nset output '%s'\n"
            "set title \"%s\"\nset xlabel \"%s\"\nset ylabel \"%s\"\nset grid\n"
            "set key top right box opaque font ',9' samplen 2\n%s\n"
            % (size, png, title, xlabel, ylabel, extra))


def write_dat(path, rows):
    """gnuplot's data: a line per row, floats in %.9g."""
    with open(path, "w") as f:
        for r in rows:
            f.write(" ".join("%.9g" % x if isinstance(x, float) else str(x) for x in r) + "\n")


def plot_lines(png, title, ylabel, lines, extra="", widths=None):
    """A wide figure against step, its key outside: lines are (title, color, dash, style,
    points), style "l" or "lp", drawn with widths[style] (line width, point type)."""
    widths = widths or {"l": "lw 2", "lp": "lw 2 pt 7"}
    tmp = png + ".d"
    os.makedirs(tmp, exist_ok=True)
    plots = []
    for i, (t, color, dash, style, pts) in enumerate(lines):
        if not pts:
            continue
        f = os.path.join(tmp, "%d" % i)
        write_dat(f, pts)
        plots.append("'%s' w %s lc rgb '%s' dt %d %s title '%s'"
                     % (f, style, color, dash, widths[style], t))
    if plots:
        gnuplot(header(png, title, "step", ylabel, extra + "\nset key outside right top",
                       size="1000,480") + "plot " + ", \\\n  ".join(plots) + "\n", png)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


# lines' colours in order (matplotlib's ten and black)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000000"]


def fmt(x):
    """A value of a kept CSV: %.6g, empty for None."""
    return "" if x is None else "%.6g" % x


def write_curve(path, metrics):
    """Metrics rows' step,loss,val_loss,grad_norm into the CSV at path (a run's kept curve)."""
    with open(path, "w") as f:
        f.write("step,loss,val_loss,grad_norm\n")
        for r in metrics:
            f.write("%d,%s,%s,%s\n" % (r.step, fmt(r.loss), fmt(r.val_loss), fmt(r.grad_norm)))


def plot_vs_rate(png, title, lines, ylabel="final validation loss", xrange=None):
    """A value against the peak rate (log x), a line per entry: lines are (title, points)."""
    tmp = png + ".d"
    os.makedirs(tmp, exist_ok=True)
    plots = []
    for i, (t, pts) in enumerate(lines):
        if not pts:
            continue
        f = os.path.join(tmp, "%d" % i)
        write_dat(f, sorted(pts))
        plots.append("'%s' w lp lc rgb '%s' dt %d lw 2 pt %d title '%s'"
                     % (f, PALETTE[i % len(PALETTE)], 1 + i // 7, 5 + i % 4, t))
    if plots:
        extra = "set logscale x\n%sset key outside right top" % (
            "set xrange [%s]\n" % xrange if xrange else "")
        gnuplot(header(png, title, "peak learning rate", ylabel, extra, size="1000,480") +
                "plot " + ", \\\n  ".join(plots) + "\n", png)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


def plot_heatmaps(png, title, zlabel, panels, log=True):
    """Block-by-step heatmaps side by side, one colour scale for all (logarithmic when log):
    panels are (title, rows), rows (step, block, value). Each measured step is a column of equal
    width, labelled with its step; blocks go up from block 0."""
    panels = [(t, [r for r in rows if r[2] is not None and math.isfinite(r[2]) and
                   (r[2] > 0 or not log)]) for t, rows in panels]
    panels = [(t, rows) for t, rows in panels if rows]
    if not panels:
        return
    values = [r[2] for _, rows in panels for r in rows]
    tmp = png + ".d"
    os.makedirs(tmp, exist_ok=True)
    width = 300 + 420 * len(panels)
    script = [header(png, title, "step", "block", size="%d,520" % width), "set termoption noenhanced",
              "unset key\nset palette defined (0 '#440154', 1 '#3b528b', 2 '#21918c', 3 '#5ec962', "
              "4 '#fde725')\nset cbrange [%.9g:%.9g]\nset cblabel \"%s\""
              % (min(values), max(values), zlabel),
              "set logscale cb" if log else "",
              "set multiplot layout 1,%d title \"%s\"" % (len(panels), title)]
    for i, (t, rows) in enumerate(panels):
        steps = sorted({r[0] for r in rows})
        col = {s: k for k, s in enumerate(steps)}
        f = os.path.join(tmp, "%d" % i)
        write_dat(f, [(col[s], b, float(v)) for s, b, v in sorted(rows, key=lambda r: (r[1], r[0]))])
        every = max(1, len(steps) // 8)
        tics = ", ".join('"%d" %d' % (s, k) for k, s in enumerate(steps) if k % every == 0)
        script += ["set title \"%s\"" % t, "set xtics (%s)" % tics,
                   "set colorbox" if i == len(panels) - 1 else "unset colorbox",
                   "set xrange [-0.5:%g]" % (len(steps) - 0.5),
                   "set yrange [-0.5:%g]" % (max(r[1] for r in rows) + 0.5),
                   "plot '%s' using 1:2:3 with image" % f]
    gnuplot("\n".join(script) + "\nunset multiplot\n", png)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
