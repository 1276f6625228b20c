#!/usr/bin/env python3
"""k-fold cross-validation of attnctl, fastText bigrams and NBSVM-bi on any labelled CSV.

    kfold.py DATA.csv [--k 5] [--seed 1 | --seeds 1,2,3] [--methods attnctl,fasttext,nbsvm]
             [--attnctl-opts "OPTIONS"]... [--name NAME] [--note TEXT] [--log FILE]

The rows are cut into k stratified folds (each class's rows shuffled with --seed and dealt
round-robin), the same folds for every method and every run with that seed (--seeds runs
several such splits one after the other and ends with the mean over them). For each fold
every method trains on the other k-1 folds and is scored on it:

  attnctl   `attnctl train FOLD_TRAIN.csv --out DIR --quiet [OPTIONS]` (no options: the
            defaults, what a new user gets), then `attnctl eval --model DIR FOLD_TEST.csv
            --json`. --attnctl-opts may be given several times: each is one variant, run on
            the same folds (e.g. --attnctl-opts "" --attnctl-opts "--members 1").
  fasttext  `fasttext supervised -wordNgrams 2 -dim 50 -epoch 10 -lr 0.1 -thread 2 -seed
            SEED` on text NFKC-normalised, case-folded, HTML removed and punctuation split off
            (the tokenizer of fasttext_baseline.sh); with 2 threads not bitwise reproducible.
  nbsvm     benchmarks/nbsvm.py (Wang & Manning 2012, uni+bigrams, alpha 1, C 1, beta 0.25;
            one-vs-rest beyond two classes), run with a python3 that has scikit-learn
            ($NBSVM_PYTHON, else this one if it imports sklearn, else /usr/bin/python3).

Prints per method the mean accuracy over the folds, its standard deviation and range, the
mean training time per fold (attnctl and fastText: the wall time of the training command;
NBSVM: its fit), and appends one JSON line per method to --log (default
benchmarks/kfold_runs.jsonl; /dev/null for none): date, commit (-dirty when tracked files
differ), data file, rows, classes, k, seed, method, options, fold accuracies, mean, sd,
training seconds per fold, CPU, note. Fold files and models live in a temporary directory
removed at the end (--keep DIR keeps them; TMPDIR=/dev/shm spares the disk the models and
checkpoints, which dominate a short set's training time on a busy disk). --threads N is passed
to attnctl (its models do not depend on it; 1 is faster on a machine shared with other jobs).
`kfold.py --summary [LOG [SET...]]` prints the log as one table, a column per data set (the
latest run of each method and options; in brackets the paired difference with attnctl's
defaults on the same folds). ATTNCTL=path picks the binary (default
build/attnctl, built with `make -j2 attnctl` when missing). Standard library only, apart
from nbsvm.py's scikit-learn.
"""
import argparse
import csv
import datetime
import html
import io
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TEXT_COLUMNS = ("review", "text", "sentence")
LABEL_COLUMNS = ("sentiment", "label", "polarity")
TAG = re.compile(r"<[^>]*>")
TOKEN = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*|\S", re.UNICODE)


def read_rows(path):
    csv.field_size_limit(1 << 30)
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        r = csv.reader(f)
        header = [h.strip().lower() for h in next(r)]
        try:
            ti = next(header.index(n) for n in TEXT_COLUMNS if n in header)
            li = next(header.index(n) for n in LABEL_COLUMNS if n in header)
        except StopIteration:
            sys.exit("kfold.py: error: %s: no text or label column" % path)
        rows = [(row[ti], row[li].strip()) for row in r if row and max(ti, li) < len(row)]
    return [x for x in rows if x[0].strip()]


def make_folds(rows, k, seed):
    by_class = {}
    for i, (_, lab) in enumerate(rows):
        by_class.setdefault(lab, []).append(i)
    rng = random.Random(seed)
    fold_of = [0] * len(rows)
    dealt = 0
    for lab in sorted(by_class):
        idx = by_class[lab]
        rng.shuffle(idx)
        for j, i in enumerate(idx):
            fold_of[i] = (dealt + j) % k
        dealt += len(idx)
    return fold_of


def write_csv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["text", "label"])
        w.writerows(rows)


def write_fasttext(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for text, lab in rows:
            t = unicodedata.normalize("NFKC", html.unescape(TAG.sub(" ", text))).casefold()
            toks = TOKEN.findall(t) or ["<empty>"]
            f.write("__label__%s %s\n" % (lab.replace(" ", "_"), " ".join(toks)))


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit("kfold.py: error: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode,
                                                          p.stderr[-2000:]))
    return p.stdout


def timed(cmd):
    t0 = time.monotonic()
    out = run(cmd)
    return out, time.monotonic() - t0


def attnctl_fold(binary, opts, threads, tr, te, workdir):
    model = os.path.join(workdir, "model")
    shutil.rmtree(model, ignore_errors=True)
    th = ["--threads", str(threads)] if threads else []
    _, secs = timed([binary, "train", tr, "--out", model, "--quiet"] + th + opts)
    out = run([binary, "eval", "--model", model, te, "--json"] + th)
    acc = json.loads(out)["accuracy"]
    extra = {}
    try:
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        extra["best_val"] = cfg.get("provenance", {}).get("best_val_accuracy")
    except (OSError, ValueError):
        pass
    return acc, secs, extra


def fasttext_fold(binary, seed, tr_rows, te_rows, workdir):
    tr, te = os.path.join(workdir, "ft_train.txt"), os.path.join(workdir, "ft_test.txt")
    write_fasttext(tr, tr_rows)
    write_fasttext(te, te_rows)
    model = os.path.join(workdir, "ft_model")
    _, secs = timed([binary, "supervised", "-input", tr, "-output", model, "-wordNgrams", "2",
                     "-dim", "50", "-epoch", "10", "-lr", "0.1", "-thread", "2", "-seed",
                     str(seed), "-verbose", "0"])
    pred = run([binary, "predict", model + ".bin", te]).split()
    gold = ["__label__" + lab.replace(" ", "_") for _, lab in te_rows]
    if len(pred) != len(gold):
        sys.exit("kfold.py: error: fastText gave %d predictions for %d rows" % (len(pred), len(gold)))
    return sum(p == g for p, g in zip(pred, gold)) / len(gold), secs, {}


def nbsvm_python():
    if os.environ.get("NBSVM_PYTHON"):
        return os.environ["NBSVM_PYTHON"]
    try:
        import sklearn  # noqa: F401
        return sys.executable
    except ImportError:
        return "/usr/bin/python3"


def nbsvm_fold(python, tr, te):
    out = json.loads(run([python, os.path.join(HERE, "nbsvm.py"), tr, te]))
    return out["accuracy"], out["train_seconds"], {}


def git_commit():
    try:
        c = run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).strip()
        dirty = subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD"]).returncode != 0
        return c + ("-dirty" if dirty else "")
    except SystemExit:
        return "unknown"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def summary(log, names):
    """The log as one table: a row per method and options, a column per data set; the latest
    run of each on each set. Runs on a subset of the folds show their mean and, in brackets,
    the paired difference with attnctl's defaults on the same folds."""
    runs = {}
    with open(log, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            runs[(r["method"], r["options"], r["name"], r["k"], r["seed"])] = r
    sets = names or sorted({key[2] for key in runs})
    variants = []
    for key in runs:
        if (key[0], key[1]) not in variants:
            variants.append((key[0], key[1]))
    print("| method | options | " + " | ".join(sets) + " |")
    print("|---|---|" + "---|" * len(sets))
    for method, opts in variants:
        cells = []
        for name in sets:
            r = next((v for k, v in runs.items() if k[:3] == (method, opts, name)), None)
            if not r:
                cells.append("")
                continue
            cell = "%.2f" % (100 * r["mean_accuracy"])
            base = runs.get(("attnctl", "", name, r["k"], r["seed"]))
            if base and (method, opts) != ("attnctl", ""):
                pairs = [(a, base["fold_accuracy"][base["folds"].index(f)])
                         for f, a in zip(r["folds"], r["fold_accuracy"]) if f in base["folds"]]
                d = 100 * statistics.mean(a - b for a, b in pairs)
                cell += " (%+.2f%s)" % (d, "" if len(r["folds"]) == r["k"] else
                                        ", folds " + ",".join(map(str, r["folds"])))
            cells.append(cell)
        print("| %s | %s | %s |" % (method, opts or "(defaults)", " | ".join(cells)))


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--summary":
        return summary(sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "kfold_runs.jsonl"),
                       sys.argv[3:])
    ap = argparse.ArgumentParser(description="k-fold cross-validation of attnctl, fastText, NBSVM.")
    ap.add_argument("data")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1, help="seed of the folds and of fastText")
    ap.add_argument("--seeds", default="",
                    help="several splits, e.g. 1,2,3: each run and logged as with --seed, then "
                         "the mean over them (overrides --seed)")
    ap.add_argument("--methods", default="attnctl,fasttext,nbsvm")
    ap.add_argument("--attnctl-opts", action="append", default=None,
                    help="extra attnctl train options (one variant; may repeat)")
    ap.add_argument("--folds", default="", help="only these folds, e.g. 0,1 (default all)")
    ap.add_argument("--name", default="", help="name of the data set in the log")
    ap.add_argument("--note", default="")
    ap.add_argument("--log", default=os.path.join(HERE, "kfold_runs.jsonl"))
    ap.add_argument("--keep", default="", help="keep the fold files and models here")
    ap.add_argument("--threads", type=int, default=0,
                    help="attnctl's --threads (the same model whatever the count; default all cores)")
    a = ap.parse_args(argv)
    if a.k < 2:
        ap.error("--k must be at least 2")

    rows = read_rows(a.data)
    classes = sorted({lab for _, lab in rows})
    folds = [int(x) for x in a.folds.split(",")] if a.folds else list(range(a.k))
    try:
        seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else [a.seed]
    except ValueError:
        ap.error("--seeds takes whole numbers separated by commas, e.g. 1,2,3")
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    variants = []
    for m in methods:
        if m == "attnctl":
            for o in a.attnctl_opts if a.attnctl_opts is not None else [""]:
                variants.append(("attnctl", o))
        elif m in ("fasttext", "nbsvm"):
            variants.append((m, ""))
        else:
            ap.error("unknown method %r" % m)

    binary = os.environ.get("ATTNCTL", os.path.join(REPO, "build", "attnctl"))
    if "attnctl" in methods and not os.environ.get("ATTNCTL") and not os.path.exists(binary):
        run(["make", "-C", REPO, "-j2", "attnctl"])
    ft = os.environ.get("FASTTEXT", "fasttext")
    py = nbsvm_python()
    name = a.name or os.path.splitext(os.path.basename(a.data))[0]
    means = {v: [] for v in variants}
    for seed in seeds:
        for v, mean in one_split(a, seed, rows, classes, folds, variants, binary, ft, py,
                                 name).items():
            means[v].append(mean)
    if len(seeds) > 1:
        print("%s: mean over the %d splits (seeds %s)" % (name, len(seeds), ",".join(map(str, seeds))))
        print("| method | options | mean acc | per split |")
        print("|---|---|---|---|")
        for v in variants:
            print("| %s | %s | %.2f | %s |" % (v[0], v[1] or "(defaults)",
                                               100 * statistics.mean(means[v]),
                                               " / ".join("%.2f" % (100 * m) for m in means[v])))


def one_split(a, seed, rows, classes, folds, variants, binary, ft, py, name):
    """k-fold cross-validation on the folds of one seed: prints its table, logs a line per
    variant, returns each variant's mean accuracy."""
    fold_of = make_folds(rows, a.k, seed)
    tmp = a.keep or tempfile.mkdtemp(prefix="kfold.")
    os.makedirs(tmp, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the temporary directory goes
    results = {v: {"acc": [], "secs": [], "extra": []} for v in variants}
    try:
        for f in folds:
            tr_rows = [r for r, g in zip(rows, fold_of) if g != f]
            te_rows = [r for r, g in zip(rows, fold_of) if g == f]
            fdir = os.path.join(tmp, "seed%d" % seed if a.seeds else "", "fold%d" % f)
            os.makedirs(fdir, exist_ok=True)
            tr, te = os.path.join(fdir, "train.csv"), os.path.join(fdir, "test.csv")
            write_csv(tr, tr_rows)
            write_csv(te, te_rows)
            for v in variants:
                method, opts = v
                if method == "attnctl":
                    acc, secs, extra = attnctl_fold(binary, shlex.split(opts), a.threads, tr, te,
                                                    fdir)
                elif method == "fasttext":
                    acc, secs, extra = fasttext_fold(ft, seed, tr_rows, te_rows, fdir)
                else:
                    acc, secs, extra = nbsvm_fold(py, tr, te)
                results[v]["acc"].append(acc)
                results[v]["secs"].append(secs)
                results[v]["extra"].append(extra)
                print("fold %d  %-9s %-40s %.4f  %6.1f s" % (f, method, opts[:40], acc, secs),
                      file=sys.stderr, flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    cpu, commit = cpu_name(), git_commit()
    print("%s: %d rows, %d classes, %d-fold (seed %d, folds %s); %s; commit %s"
          % (name, len(rows), len(classes), a.k, seed, ",".join(map(str, folds)), cpu, commit))
    print("| method | options | mean acc | sd | min-max | train s/fold |")
    print("|---|---|---|---|---|---|")
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    for v in variants:
        method, opts = v
        acc, secs = results[v]["acc"], results[v]["secs"]
        mean = statistics.mean(acc)
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        print("| %s | %s | %.2f | %.2f | %.2f-%.2f | %.1f |"
              % (method, opts or "(defaults)", 100 * mean, 100 * sd, 100 * min(acc), 100 * max(acc),
                 statistics.mean(secs)))
        line = {"date": date, "commit": commit, "data": os.path.abspath(a.data), "name": name,
                "rows": len(rows), "classes": len(classes), "k": a.k, "seed": seed,
                "folds": folds, "method": method, "options": opts,
                "fold_accuracy": [round(x, 6) for x in acc], "mean_accuracy": round(mean, 6),
                "sd": round(sd, 6), "train_seconds": [round(x, 2) for x in secs], "cpu": cpu,
                "threads": a.threads if method == "attnctl" else (2 if method == "fasttext" else 1),
                "note": a.note}
        if method == "attnctl":
            line["best_val"] = [e.get("best_val") for e in results[v]["extra"]]
        if a.log != "/dev/null":
            with open(a.log, "a", encoding="utf-8") as fl:
                fl.write(json.dumps(line) + "\n")
    return {v: statistics.mean(results[v]["acc"]) for v in variants}


if __name__ == "__main__":
    main()
