#!/usr/bin/env python3
"""A stand-in that is not sentiment: six topics of one-line texts, from Debian's package index.

    make_topics.py OUT.csv [--packages FILE] [--seed 1] [--per-class 1000] [--all]

Every stand-in of make_standins.py is cut from IMDB, so all of them are movie sentiment. The
user's own data may be anything else: support tickets by team, questions by type, products by
department. This set is one such task, made from text already on every Debian machine: the
one-line descriptions of Debian's packages (the "Description:" line of apt's package index),
labelled by the package's section, six sections that name a topic:

    games, science, sound, graphics, net, admin

e.g. "fast-paced action game with vector graphics" (games), "analyse network traffic" (net).
Only the description is kept, never the package's name. Descriptions are mostly 3-12 words,
like the issue's six-class question set. Texts that repeat (compared lower-cased, white space
squeezed; many packages share a description) are kept once, and a text found in two sections
is dropped. Then, in a seeded random order, at most --per-class rows of each section (the
smallest sections have fewer), shuffled. Columns text,label. --all takes every section with at
least 100 distinct descriptions as a label instead (about 50: libs, python, games, ...): a set
of many classes, some of them hard to tell apart.

--packages: an uncompressed Packages file; by default the largest index under
/var/lib/apt/lists (run `apt-get update` first), decompressed with apt's own helper. The same
index and seed always give the same file; another Debian release's index gives another set.
Standard library only.
"""
import argparse
import csv
import glob
import os
import random
import re
import subprocess
import sys

SECTIONS = ("games", "science", "sound", "graphics", "net", "admin")


def read_index(path):
    if path:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    lists = glob.glob("/var/lib/apt/lists/*_main_binary-*_Packages*")
    if not lists:
        sys.exit("make_topics.py: no package index under /var/lib/apt/lists (run apt-get update)")
    biggest = max(lists, key=os.path.getsize)
    out = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", biggest], check=True,
                         capture_output=True)
    return out.stdout.decode("utf-8", errors="replace")


def write_sample(path, texts_of, labels, per_class, seed):
    """At most per_class texts of each label (texts_of[label], shuffled with seed), all rows
    shuffled, written to path as a text,label CSV; returns the rows."""
    rng = random.Random(seed)
    rows = []
    for label in labels:
        texts = texts_of.get(label, [])
        rng.shuffle(texts)
        rows += [(t, label) for t in texts[:per_class]]
    rng.shuffle(rows)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)
    return rows


def key(text):
    return re.sub(r"\s+", " ", text.lower()).strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a six-topic one-line set (see the header).")
    ap.add_argument("out")
    ap.add_argument("--packages", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-class", type=int, default=1000)
    ap.add_argument("--all", action="store_true", help="every section of 100+ texts a label")
    a = ap.parse_args(argv)

    sections_of = {}
    first = {}
    for stanza in read_index(a.packages).split("\n\n"):
        section = description = None
        for line in stanza.split("\n"):
            if line.startswith("Section: "):
                section = line[9:].strip().split("/")[-1]
            elif line.startswith("Description: "):
                description = line[13:].strip()
        if (section not in SECTIONS and not (a.all and section)) or not description:
            continue
        k = key(description)
        sections_of.setdefault(k, set()).add(section)
        first.setdefault(k, description)

    by_section = {}
    for k in sorted(first):
        if len(sections_of[k]) == 1:
            by_section.setdefault(next(iter(sections_of[k])), []).append(first[k])
    sections = sorted(s for s in by_section if len(by_section[s]) >= 100) if a.all else SECTIONS
    rows = write_sample(a.out, by_section, sections, a.per_class, a.seed)
    counts = {s: sum(1 for _, l in rows if l == s) for s in sections}
    print(f"{a.out}: {len(rows)} rows, " + ", ".join(f"{s} {n}" for s, n in counts.items()))


if __name__ == "__main__":
    main()
