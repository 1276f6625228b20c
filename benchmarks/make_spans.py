#!/usr/bin/env python3
"""Cut one short random span out of every review of a labelled CSV.

    make_spans.py IN.csv[.gz] OUT.csv --seed S [--min 5] [--max 40] [--per-review 1]

For each row: HTML tags (such as <br />) are replaced by a space, the text is split on
white space, and one contiguous span of a random length in [--min, --max] words is taken
at a random position (the whole review when it is shorter than the drawn length). The
span keeps its review's label. OUT.csv has the columns review,sentiment (RFC 4180
quoting). The draw depends only on --seed and the row order, so the same input and seed
always give the same output.

Columns are found as attnctl finds them: the text is the first of review, text, sentence,
the label the first of sentiment, label, polarity (case-insensitive). Rows whose text is
empty after stripping are skipped. Standard library only.

This produces the "short-span" figure: accuracy on spans labelled with their review's
label, a proxy for how a model trained on long reviews does on short texts. Spans of a
review need not carry its sentiment, so the figure has a ceiling well below 100 %.
Write OUT.csv outside the repository: it is cut from the dataset.
"""
import argparse
import csv
import gzip
import io
import random
import re
import sys

TEXT_COLUMNS = ("review", "text", "sentence")
LABEL_COLUMNS = ("sentiment", "label", "polarity")
TAG = re.compile(r"<[^>]*>")


def open_text(path):
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="replace",
                                newline="")
    return open(path, "r", encoding="utf-8-sig", errors="replace", newline="")


def pick_column(header, names, what, path):
    lower = [h.strip().lower() for h in header]
    for name in names:
        if name in lower:
            return lower.index(name)
    sys.exit("make_spans.py: error: %s: no %s column (looked for %s)"
             % (path, what, ", ".join(names)))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Cut seeded random word spans out of a labelled CSV.")
    ap.add_argument("input", help="labelled CSV, optionally gzip-compressed")
    ap.add_argument("output", help="output CSV (review,sentiment)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--min", type=int, default=5, help="shortest span in words (default 5)")
    ap.add_argument("--max", type=int, default=40, help="longest span in words (default 40)")
    ap.add_argument("--per-review", type=int, default=1, help="spans per review (default 1)")
    a = ap.parse_args(argv)
    if a.min < 1 or a.max < a.min:
        ap.error("need 1 <= --min <= --max")
    if a.per_review < 1:
        ap.error("--per-review must be at least 1")

    csv.field_size_limit(1 << 30)
    rng = random.Random(a.seed)
    n_in = n_out = n_empty = n_whole = 0
    with open_text(a.input) as fin, open(a.output, "w", encoding="utf-8", newline="") as fout:
        reader = csv.reader(fin)
        try:
            header = next(reader)
        except StopIteration:
            sys.exit("make_spans.py: error: %s: empty file" % a.input)
        ti = pick_column(header, TEXT_COLUMNS, "text", a.input)
        li = pick_column(header, LABEL_COLUMNS, "label", a.input)
        writer = csv.writer(fout, lineterminator="\n")
        writer.writerow(["review", "sentiment"])
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            n_in += 1
            if max(ti, li) >= len(row):
                sys.exit("make_spans.py: error: %s:%d: too few fields"
                         % (a.input, reader.line_num))
            words = TAG.sub(" ", row[ti]).split()
            if not words:
                n_empty += 1
                continue
            for _ in range(a.per_review):
                length = rng.randint(a.min, a.max)
                if length >= len(words):
                    span = words
                    n_whole += 1
                else:
                    start = rng.randint(0, len(words) - length)
                    span = words[start:start + length]
                writer.writerow([" ".join(span), row[li]])
                n_out += 1
    print("make_spans.py: %d reviews -> %d spans (%d whole reviews shorter than the draw, "
          "%d empty skipped), seed %d, %d-%d words"
          % (n_in, n_out, n_whole, n_empty, a.seed, a.min, a.max), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
