#!/usr/bin/env python3
"""Stand-ins for "the user's own data": short labelled texts, 2-4 classes, k-fold sized.

    make_standins.py OUTDIR [--data DIR] [--seed 1]

Writes CSVs (columns text,label) into OUTDIR, which must be outside the repository: all but
the last set are cut from IMDB. Only IMDB's *training* reviews are read (train.csv.gz and
train.source.txt.gz under --data, default <repo>/../shared/data/imdb); the test split stays
for reporting. The sets look like the held-out sets of issue 32 (2-6 classes, a few thousand
rows of 3-23 words), made so:

  Sentences. Each review's HTML tags are replaced by a space; the text is cut into sentences
  after ., ! or ? followed by white space (runs of them count once); a sentence is a candidate
  when it has 3-23 white-space words. A review gives its last candidate (a review's verdict
  tends to come at its end, so these read like one-line reviews; a random sentence is mostly
  plot and reads 5 points lower for NBSVM), so no two rows come from the same review; texts
  that repeat (compared lower-cased, white space squeezed) are kept once. Reviews are visited
  in a seeded random order.

  sent1k.csv, sent3k.csv, sent10k.csv  two classes (positive/negative, the review's label):
      the first 1,000 / 3,000 / 10,000 sentences of that order, balanced per class (nested:
      sent1k is part of sent3k, which is part of sent10k). A sentence need not carry its
      review's verdict, so the ceiling is well below 100 % (like a noisy tweet set).

  sent_imb.csv  two classes, 7,142 rows, 70 % positive: sent10k's 5,000 positive sentences and
      its first 2,142 negative ones, shuffled (seeded). Many user sets are lopsided (more
      praise than complaint, more "ham" than "spam"), and accuracy then starts at the
      majority's share.

  stars4.csv  four classes from the review's star rating (train.source.txt.gz: the review's
      original file name, train/pos/4715_9.txt = rating 9): "1-2", "3-4", "7-8", "9-10";
      2,000 sentences of each (8,000 rows), from reviews not used by the sent* sets. The
      neighbouring classes differ by a star or two, so this is a hard, fine-grained task
      (like the 5-class set of the issue).

  spans6k.csv  two classes, 6,000 rows: one random contiguous span of 3-23 words (length
      uniform) of a review not used above, balanced. Fragments, not sentences: like survey
      answers or tweets cut mid-thought.

  short_pool.csv  the project's two development sets of hand-written short reviews pooled
      (data/short_dev.csv and data/short_dev2.csv: 900 rows, 2 classes, six domains) and
      shuffled (seeded), for k-fold. short_reviews.csv and short_test.csv stay out: data/README.md
      keeps them for reporting only, never to train or choose on.

The same data and seed always give the same files. Standard library only.
"""
import argparse
import csv
import gzip
import io
import os
import random
import re
import sys

TAG = re.compile(r"<[^>]*>")
SENT_END = re.compile(r"(?<=[.!?])[.!?\"')]*\s+")


def open_text(path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rb") if gz else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="")


def read_imdb_train(data):
    csv.field_size_limit(1 << 30)
    with open_text(os.path.join(data, "train.csv.gz")) as f:
        rows = list(csv.reader(f))[1:]
    with open_text(os.path.join(data, "train.source.txt.gz")) as f:
        sources = [line.strip() for line in f if line.strip()]
    if len(rows) != len(sources):
        sys.exit("make_standins.py: error: %d reviews but %d source lines" % (len(rows), len(sources)))
    out = []
    for (text, label), src in zip(rows, sources):
        m = re.search(r"_(\d+)\.txt$", src)
        if not m:
            sys.exit("make_standins.py: error: no rating in source %r" % src)
        out.append((TAG.sub(" ", text), label, int(m.group(1))))
    return out


def sentences(text):
    for s in SENT_END.split(text):
        words = s.split()
        if 3 <= len(words) <= 23:
            yield " ".join(words)


def star_class(rating):
    return {1: "1-2", 2: "1-2", 3: "3-4", 4: "3-4", 7: "7-8", 8: "7-8", 9: "9-10", 10: "9-10"}[rating]


def key(text):
    return " ".join(text.lower().split())


def write(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["text", "label"])
        w.writerows(rows)
    counts = {}
    for _, lab in rows:
        counts[lab] = counts.get(lab, 0) + 1
    words = sum(len(t.split()) for t, _ in rows) / max(1, len(rows))
    print("%-16s %6d rows, %.1f words on average, classes %s"
          % (os.path.basename(path), len(rows), words,
             ", ".join("%s %d" % kv for kv in sorted(counts.items()))))


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser(description="Write short-text stand-in sets (see the header).")
    ap.add_argument("outdir")
    ap.add_argument("--data", default=os.path.join(repo, "..", "shared", "data", "imdb"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    out = os.path.abspath(a.outdir)
    if out == repo or out.startswith(repo + os.sep):
        ap.error("OUTDIR must be outside the repository (the sets are cut from IMDB)")
    os.makedirs(out, exist_ok=True)

    reviews = read_imdb_train(a.data)
    rng = random.Random(a.seed)
    order = list(range(len(reviews)))
    rng.shuffle(order)
    seen = set()
    used = set()

    def draw_sentence(i):
        cands = list(sentences(reviews[i][0]))
        if not cands:
            return None
        s = cands[-1]
        if key(s) in seen:
            return None
        return s

    # sent*: balanced prefixes of one sentence per review.
    want = {"positive": 5000, "negative": 5000}
    per_class = {"positive": [], "negative": []}
    for i in order:
        lab = reviews[i][1]
        if len(per_class[lab]) >= want[lab]:
            continue
        s = draw_sentence(i)
        if s is None:
            continue
        seen.add(key(s))
        used.add(i)
        per_class[lab].append(s)
        if all(len(per_class[c]) >= want[c] for c in want):
            break
    for n, name in ((1000, "sent1k"), (3000, "sent3k"), (10000, "sent10k")):
        rows = []
        for j in range(n // 2):
            rows.append((per_class["positive"][j], "positive"))
            rows.append((per_class["negative"][j], "negative"))
        write(os.path.join(out, name + ".csv"), rows)
    rows = [(t, "positive") for t in per_class["positive"][:5000]]
    rows += [(t, "negative") for t in per_class["negative"][:2142]]
    random.Random(a.seed).shuffle(rows)
    write(os.path.join(out, "sent_imb.csv"), rows)

    # stars4: 2,000 sentences per star class from other reviews.
    stars = {c: [] for c in ("1-2", "3-4", "7-8", "9-10")}
    for i in order:
        if i in used:
            continue
        c = star_class(reviews[i][2])
        if len(stars[c]) >= 2000:
            continue
        s = draw_sentence(i)
        if s is None:
            continue
        seen.add(key(s))
        used.add(i)
        stars[c].append(s)
        if all(len(v) >= 2000 for v in stars.values()):
            break
    rows = []
    for j in range(2000):
        for c in stars:
            rows.append((stars[c][j], c))
    write(os.path.join(out, "stars4.csv"), rows)

    # spans6k: one random 3-23-word span of yet other reviews.
    spans = {"positive": [], "negative": []}
    for i in order:
        if i in used:
            continue
        text, lab, _ = reviews[i]
        if len(spans[lab]) >= 3000:
            continue
        words = text.split()
        n = rng.randint(3, 23)
        if len(words) < n:
            continue
        start = rng.randrange(len(words) - n + 1)
        s = " ".join(words[start:start + n])
        if key(s) in seen:
            continue
        seen.add(key(s))
        used.add(i)
        spans[lab].append(s)
        if all(len(v) >= 3000 for v in spans.values()):
            break
    rows = []
    for j in range(3000):
        rows.append((spans["positive"][j], "positive"))
        rows.append((spans["negative"][j], "negative"))
    write(os.path.join(out, "spans6k.csv"), rows)

    # short_pool: the project's hand-written short sets.
    rows = []
    for name in ("short_dev", "short_dev2"):
        with open(os.path.join(repo, "data", name + ".csv"), encoding="utf-8", newline="") as f:
            r = csv.reader(f)
            next(r)
            rows.extend((t, lab) for t, lab in r)
    random.Random(a.seed).shuffle(rows)
    write(os.path.join(out, "short_pool.csv"), rows)


if __name__ == "__main__":
    main()
