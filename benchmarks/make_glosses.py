#!/usr/bin/env python3
"""A second stand-in that is not sentiment: WordNet's definitions of nouns, by their kind.

    make_glosses.py OUT.csv [--wordnet DIR] [--seed 1] [--per-class 1000] [--all]

make_topics.py's package descriptions are one kind of text by one kind of writer; a single
non-sentiment set cannot say whether what it shows holds for topic tasks in general. This set
comes from Debian's package wordnet-base (`apt-get install wordnet-base`; /usr/share/wordnet):
each noun synset's definition (its gloss up to the first ";", without the examples), labelled
by the lexicographer file WordNet sorts the noun into, six of them:

    act, artifact, cognition, communication, person, state

e.g. "a person who pays more attention to formal rules than to substance" (person), "the act
of sending a message" (act). The words the synset defines are never part of the text. A
definition that repeats (compared lower-cased, white space squeezed) is kept once, and one
found under two labels is dropped. Then, in a seeded random order, at most --per-class rows
of each label, shuffled. Columns text,label. --all takes every one of WordNet's 26 noun
files as a label instead (noun.Tops to noun.time): a set with many classes of unequal size. The same WordNet and seed always give the same
file. Standard library only.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_topics import key, write_sample  # noqa: E402

# WordNet's lexicographer file numbers (lexnames(5WN)) of the six labels.
LABELS = {4: "act", 6: "artifact", 9: "cognition", 10: "communication", 18: "person", 26: "state"}
ALL_LABELS = dict(enumerate(
    ("Tops act animal artifact attribute body cognition communication event feeling food group "
     "location motive object person phenomenon plant possession process quantity relation shape "
     "state substance time").split(), start=3))


def definitions(path):
    """(lexicographer file number, definition) of every synset in a data.noun file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  ") or "|" not in line:
                continue  # the licence at the top of the file
            fields, gloss = line.split("|", 1)
            definition = gloss.split(";", 1)[0].strip()
            if definition:
                yield int(fields.split()[1]), definition


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a six-label set of WordNet definitions.")
    ap.add_argument("out")
    ap.add_argument("--wordnet", default="/usr/share/wordnet")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-class", type=int, default=1000)
    ap.add_argument("--all", action="store_true", help="all 26 noun files as labels")
    a = ap.parse_args(argv)
    labels = ALL_LABELS if a.all else LABELS

    path = os.path.join(a.wordnet, "data.noun")
    if not os.path.exists(path):
        sys.exit("make_glosses.py: no %s (apt-get install wordnet-base)" % path)
    labels_of = {}
    first = {}
    for lexfile, definition in definitions(path):
        if lexfile not in labels:
            continue
        k = key(definition)
        labels_of.setdefault(k, set()).add(labels[lexfile])
        first.setdefault(k, definition)

    by_label = {lab: [] for lab in labels.values()}
    for k in sorted(first):
        if len(labels_of[k]) == 1:
            by_label[next(iter(labels_of[k]))].append(first[k])
    rows = write_sample(a.out, by_label, list(labels.values()), a.per_class, a.seed)
    counts = {lab: sum(1 for _, l in rows if l == lab) for lab in labels.values()}
    words = sorted(len(t.split()) for t, _ in rows)
    print(f"{a.out}: {len(rows)} rows, median {words[len(words) // 2]} words, "
          + ", ".join(f"{lab} {n}" for lab, n in counts.items()))


if __name__ == "__main__":
    main()
