#!/usr/bin/env python3
"""Would a recipe chosen by cross-validation inside the training rows beat the defaults?

    cv_select.py DATA.csv --candidates FILE [--k 5] [--inner 3] [--seed 1] [--threads 2]

For each of kfold.py's k outer folds (the same folds, --seed), the outer training rows are cut
into --inner stratified inner folds (seed + 1). Every candidate (a line of FILE: attnctl train
options; an empty line is the defaults) trains on the other inner folds with the inner fold as
--val-file (its early stop and score: the best validation accuracy, what --autotune compares),
and is scored by its accuracy pooled over the inner folds. Prints, per outer fold, each
candidate's inner score and which one a cross-validated choice and a single split's choice (the
first inner fold alone, as --autotune's one tenth) would pick. The outer test accuracy of a pick
is not run here: it is read from benchmarks/kfold_runs.jsonl (the latest run of that candidate
on the set), so each candidate needs a kfold.py run of its own on the same folds.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kfold  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--candidates", required=True)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--folds", default="")
    ap.add_argument("--out", default="", help="append the per-fold scores as JSON lines here")
    a = ap.parse_args()
    binary = os.environ.get("ATTNCTL", os.path.join(kfold.REPO, "build", "attnctl"))
    cands = [l.strip() for l in open(a.candidates)]
    rows = kfold.read_rows(a.data)
    fold_of = kfold.make_folds(rows, a.k, a.seed)
    folds = [int(x) for x in a.folds.split(",")] if a.folds else range(a.k)
    for f in folds:
        outer = [r for r, g in zip(rows, fold_of) if g != f]
        inner_of = kfold.make_folds(outer, a.inner, a.seed + 1)
        scores = {}
        with tempfile.TemporaryDirectory() as tmp:
            for c in cands:
                right = []
                for j in range(a.inner):
                    tr = os.path.join(tmp, "tr.csv")
                    va = os.path.join(tmp, "va.csv")
                    kfold.write_csv(tr, [r for r, g in zip(outer, inner_of) if g != j])
                    kfold.write_csv(va, [r for r, g in zip(outer, inner_of) if g == j])
                    n_val = sum(1 for g in inner_of if g == j)
                    opts = c.split() + ["--val-file", va]
                    acc, _, _ = kfold.attnctl_fold(binary, opts, a.threads, tr, va, tmp)
                    right.append((acc, n_val))
                pooled = sum(x * n for x, n in right) / sum(n for _, n in right)
                scores[c] = {"pooled": pooled, "first": right[0][0]}
                print("fold %d  %-40s inner %.4f  first split %.4f" % (f, c or "(defaults)",
                      pooled, right[0][0]), flush=True)
        cv_pick = max(cands, key=lambda c: scores[c]["pooled"])
        one_pick = max(cands, key=lambda c: scores[c]["first"])
        print("fold %d  cross-validated pick: %s; one split's pick: %s" % (
            f, cv_pick or "(defaults)", one_pick or "(defaults)"), flush=True)
        if a.out:
            with open(a.out, "a") as o:
                o.write(json.dumps({"data": a.data, "fold": f, "inner": a.inner, "scores": scores,
                                    "cv_pick": cv_pick, "one_pick": one_pick}) + "\n")


if __name__ == "__main__":
    main()
