#!/usr/bin/env python3
"""Cut IMDB's training set into a training part and a validation part that do
not share films, for choosing recipes (never the test set).

    python3 benchmarks/make_grouped_split.py OUTDIR [--data DIR] [--below 1250]

A random split puts reviews of one film on both sides (IMDB has up to 30 per
film), and then validation reads about 1.4 points above the test set. The
review ids (train.source.txt.gz: `train/pos/ID_RATING.txt`, one line per row of
train.csv.gz, same order) are grouped by film, so holding out every review with
id < BELOW is close to holding out whole films. Writes OUTDIR/train.csv (the
rest) and OUTDIR/val.csv; use them as
    attnctl train OUTDIR/train.csv --val-file OUTDIR/val.csv ...
The files are cut from the IMDB data: keep them out of the repository.
"""
import argparse
import csv
import gzip
import os
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data", "imdb"))
    ap.add_argument("--below", type=int, default=1250,
                    help="reviews with an id below this are validation [1250]")
    a = ap.parse_args()
    src = os.path.join(a.data, "train.source.txt.gz")
    data = os.path.join(a.data, "train.csv.gz")
    for f in (src, data):
        if not os.path.exists(f):
            sys.exit("make_grouped_split.py: error: %s not found" % f)
    with gzip.open(src, "rt", encoding="utf-8") as f:
        sources = [line.strip() for line in f if line.strip()]
    csv.field_size_limit(1 << 30)
    with gzip.open(data, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    if len(rows) != len(sources):
        sys.exit("make_grouped_split.py: error: %d rows in %s but %d lines in %s"
                 % (len(rows), data, len(sources), src))
    os.makedirs(a.outdir, exist_ok=True)
    n_val = 0
    with open(os.path.join(a.outdir, "train.csv"), "w", encoding="utf-8", newline="") as ft, \
         open(os.path.join(a.outdir, "val.csv"), "w", encoding="utf-8", newline="") as fv:
        wt, wv = csv.writer(ft), csv.writer(fv)
        wt.writerow(header)
        wv.writerow(header)
        for row, name in zip(rows, sources):
            m = re.search(r"/(\d+)_\d+\.txt$", name)
            if not m:
                sys.exit("make_grouped_split.py: error: %s: cannot read the review id of %r"
                         % (src, name))
            if int(m.group(1)) < a.below:
                wv.writerow(row)
                n_val += 1
            else:
                wt.writerow(row)
    print("%s: %d training rows, %d validation rows (ids < %d)"
          % (a.outdir, len(rows) - n_val, n_val, a.below))


if __name__ == "__main__":
    main()
