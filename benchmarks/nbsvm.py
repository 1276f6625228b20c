#!/usr/bin/env python3
"""NBSVM-bi (Wang & Manning 2012), the linear baseline of issue 32.

    nbsvm.py TRAIN.csv TEST.csv [--ngrams 2] [--C 1] [--beta 0.25] [--alpha 1]

Prints one JSON object: accuracy on TEST, rows, classes, training seconds.

Wang and Manning, "Baselines and Bigrams: Simple, Good Sentiment and Topic Classification"
(ACL 2012), section 2.3, as published:
  - features: binarised word uni- and bigrams (x = 1 when the n-gram occurs) of a lower-cased
    text with punctuation split off (the tokenizer of fasttext_baseline.sh: NFKC, case fold,
    HTML tags removed, a word keeps inner apostrophes and hyphens, every other non-space
    character is a token);
  - the log-count ratio r = log((p / |p|_1) / (q / |q|_1)), p = alpha + sum of the positive
    rows' x, q = alpha + sum of the negative rows' x (alpha 1);
  - a linear SVM (scikit-learn LinearSVC: squared hinge, L2, C 1, intercept) on x * r;
  - interpolation w' = (1 - beta) * mean|w| + beta * w, beta 0.25 (the intercept kept).
More than two classes: one-vs-rest, one ratio per class (its rows against all others), the
class with the highest interpolated score wins.

Needs python3-sklearn and python3-numpy (Debian); benchmarks only, the product never does.
"""
import argparse
import csv
import html
import io
import json
import re
import sys
import time
import unicodedata

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.svm import LinearSVC

TAG = re.compile(r"<[^>]*>")
TOKEN = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*|\S", re.UNICODE)
TEXT_COLUMNS = ("review", "text", "sentence")
LABEL_COLUMNS = ("sentiment", "label", "polarity")


def tokens(text):
    text = html.unescape(TAG.sub(" ", text))
    return TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def read_csv(path):
    csv.field_size_limit(1 << 30)
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        r = csv.reader(f)
        header = [h.strip().lower() for h in next(r)]
        ti = next(header.index(n) for n in TEXT_COLUMNS if n in header)
        li = next(header.index(n) for n in LABEL_COLUMNS if n in header)
        texts, labels = [], []
        for row in r:
            if row and max(ti, li) < len(row):
                texts.append(row[ti])
                labels.append(row[li].strip())
    return texts, labels


class NBSVM:
    def __init__(self, ngrams=2, C=1.0, beta=0.25, alpha=1.0):
        self.ngrams, self.C, self.beta, self.alpha = ngrams, C, beta, alpha

    def fit(self, texts, labels):
        self.vec = CountVectorizer(tokenizer=tokens, lowercase=False, token_pattern=None,
                                   ngram_range=(1, self.ngrams), binary=True)
        X = self.vec.fit_transform(texts).tocsr()
        self.classes = sorted(set(labels))
        y = np.array([self.classes.index(l) for l in labels])
        # Two classes: one binary problem (class 1 against class 0); more: one per class.
        targets = [1] if len(self.classes) == 2 else list(range(len(self.classes)))
        self.models = []
        for c in targets:
            pos = y == c
            p = self.alpha + np.asarray(X[pos].sum(axis=0)).ravel()
            q = self.alpha + np.asarray(X[~pos].sum(axis=0)).ravel()
            r = np.log((p / p.sum()) / (q / q.sum()))
            svm = LinearSVC(C=self.C, loss="squared_hinge", max_iter=10000)
            svm.fit(X @ sparse.diags(r), pos.astype(int))
            w = svm.coef_.ravel()
            w = (1 - self.beta) * np.abs(w).mean() + self.beta * w
            self.models.append((r, w, svm.intercept_[0]))
        return self

    def predict(self, texts):
        X = self.vec.transform(texts).tocsr()
        scores = np.column_stack([(X @ sparse.diags(r)) @ w + b for r, w, b in self.models])
        if len(self.classes) == 2:
            return [self.classes[int(s > 0)] for s in scores[:, 0]]
        return [self.classes[i] for i in scores.argmax(axis=1)]


def main(argv=None):
    ap = argparse.ArgumentParser(description="NBSVM (Wang & Manning 2012) on labelled CSVs.")
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--ngrams", type=int, default=2)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.25)
    ap.add_argument("--alpha", type=float, default=1.0)
    a = ap.parse_args(argv)
    tr_x, tr_y = read_csv(a.train)
    te_x, te_y = read_csv(a.test)
    t0 = time.time()
    m = NBSVM(a.ngrams, a.C, a.beta, a.alpha).fit(tr_x, tr_y)
    t1 = time.time()
    pred = m.predict(te_x)
    acc = sum(p == g for p, g in zip(pred, te_y)) / len(te_y)
    print(json.dumps({"accuracy": acc, "n": len(te_y), "classes": len(m.classes),
                      "train_seconds": round(t1 - t0, 3)}))


if __name__ == "__main__":
    main()
