#!/usr/bin/env python3
"""How special is NBSVM-bi's setting, and does it combine with attnctl?

    nbsvm_variants.py DATA.csv [--k 5] [--seed 1] [--attnctl BIN] [--work DIR]

On kfold.py's folds (the same rows in the same order), prints the mean accuracy of:
  - NBSVM as published (benchmarks/nbsvm.py: binarised uni+bigrams, NB log-count ratios r,
    LinearSVC squared hinge C 1 on x*r, interpolation beta 0.25) and its neighbours: C 0.1
    and 10, beta 1 (no interpolation), a logistic regression in place of the SVM, plain
    naive Bayes (the ratios' sum), the SVM on x without the ratios, and the features with
    character 3-5-grams of each word added;
  - with --attnctl BIN: attnctl's defaults (train, then predict --json on the held-out
    fold) and the sums log p_attnctl + a * s_NBSVM for a in 0.25..4, s the interpolated
    one-vs-rest scores, and log p_attnctl + a * s_NB / sqrt(n) for a in 0.2..4 (naive Bayes'
    scores over the square root of the text's n-gram count, the wide path's normalisation).
    These sums pick a on the test folds, so they are an upper bound on what an ensemble of
    the two could give, not a recipe.
Every variant is one-vs-rest beyond two classes (one ratio per class), as nbsvm.py.
Benchmarks only (numpy, scipy, scikit-learn); the product never needs them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kfold  # noqa: E402
import nbsvm  # noqa: E402


def char_grams(text):
    out = []
    for t in nbsvm.tokens(text):
        w = "<" + t + ">"
        for n in range(3, 6):
            out += [w[i:i + n] for i in range(max(1, len(w) - n + 1))]
    return out


def ratios(X, pos, alpha=1.0):
    p = alpha + np.asarray(X[pos].sum(axis=0)).ravel()
    q = alpha + np.asarray(X[~pos].sum(axis=0)).ravel()
    return np.log((p / p.sum()) / (q / q.sum()))


def scores(Xtr, ytr, Xte, n_classes, model, beta, use_r=True):
    """One-vs-rest scores [rows, classes] (binary: one column, class 1 against 0)."""
    targets = [1] if n_classes == 2 else range(n_classes)
    S = np.zeros((Xte.shape[0], len(targets)))
    for j, c in enumerate(targets):
        pos = ytr == c
        r = ratios(Xtr, pos)
        if model is None:  # naive Bayes: the ratios' sum and the prior
            S[:, j] = Xte @ r + np.log(pos.mean() / (1 - pos.mean()))
            continue
        d = sparse.diags(r if use_r else np.ones_like(r))
        m = model().fit(Xtr @ d, pos.astype(int))
        w = m.coef_.ravel()
        w = (1 - beta) * np.abs(w).mean() + beta * w
        S[:, j] = (Xte @ d) @ w + m.intercept_[0]
    return S


def predicted(S):
    return (S[:, 0] > 0).astype(int) if S.shape[1] == 1 else S.argmax(axis=1)


def attnctl_probs(binary, tr_path, te_path, workdir, classes):
    out = os.path.join(workdir, "model")
    if not os.path.exists(os.path.join(out, "model.safetensors")):  # kept with --work
        subprocess.run([binary, "train", tr_path, "--out", out, "--quiet"], check=True)
    lines = subprocess.run([binary, "predict", "--model", out, "--csv", te_path, "--json"],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    return np.array([[json.loads(line)["probabilities"][c] for c in classes] for line in lines])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--attnctl", help="attnctl binary: also its defaults and the sums")
    ap.add_argument("--work", help="directory for the folds' files (default: a temporary one)")
    a = ap.parse_args()
    rows = kfold.read_rows(a.data)
    fold_of = kfold.make_folds(rows, a.k, a.seed)
    work = a.work or tempfile.mkdtemp(prefix="nbsvm_variants.")
    svm = lambda C: (lambda: LinearSVC(C=C, loss="squared_hinge", max_iter=10000))  # noqa: E731
    logistic = lambda: LogisticRegression(C=1.0, max_iter=5000)  # noqa: E731
    variants = [("NBSVM-bi as published (C 1, beta 0.25)", "words", svm(1.0), 0.25, True),
                ("C 0.1", "words", svm(0.1), 0.25, True),
                ("C 10", "words", svm(10.0), 0.25, True),
                ("beta 1 (no interpolation)", "words", svm(1.0), 1.0, True),
                ("logistic regression, beta 0.25", "words", logistic, 0.25, True),
                ("logistic regression, beta 1", "words", logistic, 1.0, True),
                ("naive Bayes alone", "words", None, 1.0, True),
                ("SVM on x (no ratios), C 1", "words", svm(1.0), 1.0, False),
                ("with character 3-5-grams", "chars", svm(1.0), 0.25, True)]
    acc = {v[0]: [] for v in variants}
    mixes = [0.25, 0.5, 1.0, 2.0, 4.0]
    nb_mixes = [0.2, 0.4, 0.8, 1.2, 2.0, 4.0]
    if a.attnctl:
        acc["attnctl defaults"] = []
        for m in mixes:
            acc["log p_attnctl + %g s_NBSVM" % m] = []
        for m in nb_mixes:
            acc["log p_attnctl + %g s_NB / sqrt(n)" % m] = []
    for f in range(a.k):
        tr = [r for r, g in zip(rows, fold_of) if g != f]
        te = [r for r, g in zip(rows, fold_of) if g == f]
        classes = sorted({lab for _, lab in tr})
        ytr = np.array([classes.index(lab) for _, lab in tr])
        yte = np.array([classes.index(lab) for _, lab in te])
        words = CountVectorizer(tokenizer=nbsvm.tokens, lowercase=False, token_pattern=None,
                                ngram_range=(1, 2), binary=True)
        chars = CountVectorizer(tokenizer=char_grams, lowercase=False, token_pattern=None,
                                binary=True)
        W = words.fit_transform([t for t, _ in tr]).tocsr()
        We = words.transform([t for t, _ in te]).tocsr()
        Ch = chars.fit_transform([t for t, _ in tr]).tocsr()
        Che = chars.transform([t for t, _ in te]).tocsr()
        feats = {"words": (W, We),
                 "chars": (sparse.hstack([W, Ch]).tocsr(), sparse.hstack([We, Che]).tocsr())}
        published = None
        for name, fs, model, beta, use_r in variants:
            S = scores(feats[fs][0], ytr, feats[fs][1], len(classes), model, beta, use_r)
            published = S if published is None else published
            acc[name].append(np.mean(predicted(S) == yte))
        if a.attnctl:
            fdir = os.path.join(work, "fold%d" % f)
            os.makedirs(fdir, exist_ok=True)
            tr_path, te_path = os.path.join(fdir, "train.csv"), os.path.join(fdir, "test.csv")
            kfold.write_csv(tr_path, tr)
            kfold.write_csv(te_path, te)
            P = attnctl_probs(a.attnctl, tr_path, te_path, fdir, classes)
            acc["attnctl defaults"].append(np.mean(P.argmax(axis=1) == yte))
            S = published if published.shape[1] > 1 else np.hstack([-published, published]) / 2
            for m in mixes:
                acc["log p_attnctl + %g s_NBSVM" % m].append(
                    np.mean((np.log(P + 1e-12) + m * S).argmax(axis=1) == yte))
            NB = scores(W, ytr, We, len(classes), None, 1.0)
            NB = NB if NB.shape[1] > 1 else np.hstack([-NB, NB]) / 2
            NB /= np.sqrt(np.maximum(np.asarray(We.sum(axis=1)).ravel(), 1))[:, None]
            for m in nb_mixes:
                acc["log p_attnctl + %g s_NB / sqrt(n)" % m].append(
                    np.mean((np.log(P + 1e-12) + m * NB).argmax(axis=1) == yte))
        print("fold %d done" % f, file=sys.stderr, flush=True)
    name = os.path.splitext(os.path.basename(a.data))[0]
    print("%s: %d rows, %d-fold (seed %d); mean accuracy %%, sd over folds" % (name, len(rows), a.k,
                                                                                a.seed))
    for k, v in acc.items():
        print("%7.2f  %5.2f  %s" % (100 * np.mean(v), 100 * np.std(v, ddof=1), k))


if __name__ == "__main__":
    main()
