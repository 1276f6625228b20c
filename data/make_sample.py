#!/usr/bin/env python3
"""Writes data/sample_train.csv and data/sample_test.csv: short movie reviews composed
from hand-written phrases (nothing taken from IMDB), for `make demo` and tests.
Deterministic: re-running gives the same files."""
import csv
import random

SUBJECTS = ["This movie", "The film", "This picture", "The sequel", "This documentary", "The remake",
            "This thriller", "The comedy", "This drama", "The cartoon", "This western", "The musical"]
POS = ["was wonderful", "is a delight from start to finish", "moved me to tears", "is brilliantly acted",
       "has a clever, surprising plot", "looks gorgeous", "is the best thing I have seen this year",
       "kept me smiling", "is funny and warm", "deserves every award", "is a masterpiece",
       "has a superb soundtrack", "is beautifully shot", "left me inspired", "is great fun for the whole family"]
NEG = ["was terrible", "is a waste of two hours", "bored me to sleep", "is badly acted",
       "has a dull, predictable plot", "looks cheap", "is the worst thing I have seen this year",
       "made me angry", "is neither funny nor warm", "deserves to be forgotten", "is a mess",
       "has an annoying soundtrack", "is poorly edited", "left me cold", "is painful to sit through"]
POS_TAIL = ["Highly recommended!", "I'd watch it again.", "Ten out of ten.", "Don't miss it!",
            "A real gem.", "Bravo to the cast.", "Loved every minute.", ""]
NEG_TAIL = ["Avoid it!", "I want my money back.", "One out of ten.", "Don't bother.",
            "What a disappointment.", "Shame on the studio.", "Hated every minute.", ""]
ACTORS = ["the lead actress", "the young hero", "the villain", "the director", "the writer", "the supporting cast"]
POS_ACT = ["shines", "gives a career-best performance", "is charming", "does a great job"]
NEG_ACT = ["is wooden", "overacts badly", "seems lost", "does a poor job"]
MIXED = ["Although {a} {na}, it {p}.", "Even if {a} {na}, the story {p}."]


def review(rng, positive):
    s = rng.choice(SUBJECTS)
    parts = [f"{s} {rng.choice(POS if positive else NEG)}."]
    a = rng.choice(ACTORS)
    parts.append(f"{a[0].upper() + a[1:]} {rng.choice(POS_ACT if positive else NEG_ACT)}.")
    if rng.random() < 0.3:
        parts.append(f"It {rng.choice(POS if positive else NEG)}.")
    if rng.random() < 0.2:
        parts.append("<br /><br />" + f"Honestly, it {rng.choice(POS if positive else NEG)}.")
    tail = rng.choice(POS_TAIL if positive else NEG_TAIL)
    if tail:
        parts.append(tail)
    return " ".join(parts)


def write(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["review", "sentiment"])
        for i in range(n):
            positive = i % 2 == 0
            w.writerow([review(rng, positive), "positive" if positive else "negative"])


if __name__ == "__main__":
    write("data/sample_train.csv", 600, 1)
    write("data/sample_test.csv", 200, 2)
