#!/bin/sh
# fastText bigram baseline on IMDB, for comparison with attnctl's presets.
#
#   benchmarks/fasttext_baseline.sh            # DATA defaults to <repo>/../shared/data/imdb
#   DATA=/path/to/imdb benchmarks/fasttext_baseline.sh
#
# Reference (the issue): fastText with bigrams reaches 90.0 % on the IMDB test set
# (Joulin et al. 2016, "Bag of Tricks for Efficient Text Classification", table 1).
#
# Converts train.csv.gz / test.csv.gz to fastText's format (`__label__positive tokens`:
# NFKC + lower case, HTML tags removed, entities decoded, punctuation split from the
# words much like attnctl's tokenizer), trains
#   fasttext supervised -wordNgrams 2 -dim 50 -epoch 10 -lr 0.1 -thread 2 -seed $SEED
# (SEED defaults to 1) and prints the accuracy and the share predicted positive on
#   - the IMDB test set,
#   - the short-span test set (one random span of 5-40 words of every test review,
#     benchmarks/make_spans.py --seed 1 --min 5 --max 40, labelled with its review's label),
#   - data/short_reviews.csv (240 short reviews written for the project, out of domain),
#   - data/short_dev.csv (300 more such reviews, the set recipes for short input are chosen on),
#   - data/short_dev2.csv (600 more, a second development set),
#   - data/short_test.csv (600 more, written after every recipe choice and never used to choose anything),
# plus the training time and the wall time of the whole script, and appends one JSON
# line to benchmarks/runs.jsonl (RUNS=/dev/null to skip that; NOTE=text is stored with it).
# With 2 threads fastText is not bitwise reproducible even with -seed; expect a few
# hundredths of a point between runs.
# Everything derived from the data lives in a mktemp -d directory removed at the end.
# Needs: fasttext (Debian package `fasttext`), python3 (standard library only).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
DATA=${DATA:-$repo_root/../shared/data/imdb}
RUNS=${RUNS:-$repo_root/benchmarks/runs.jsonl}
FASTTEXT=${FASTTEXT:-fasttext}
NOTE=${NOTE:-}
SEED=${SEED:-1}

if ! command -v "$FASTTEXT" >/dev/null 2>&1; then
    echo "SKIP: fasttext not found (apt-get install fasttext)"
    exit 0
fi
if [ ! -f "$DATA/train.csv.gz" ] || [ ! -f "$DATA/test.csv.gz" ]; then
    echo "SKIP: no IMDB data in $DATA (train.csv.gz, test.csv.gz)"
    exit 0
fi

now() { date +%s.%N; }
t_start=$(now)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fasttext_baseline.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# CSV -> fastText lines. Columns as attnctl finds them; rows with an empty text skipped.
cat >"$TMP/to_fasttext.py" <<'PY'
import csv, gzip, html, io, re, sys, unicodedata
TAG = re.compile(r"<[^>]*>")
# words: letters/digits (and combining marks), an inner apostrophe or hyphen stays in
# the word; every other non-space character is a token of its own.
TOKEN = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*|\S", re.UNICODE)
def open_text(path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rb") if gz else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="")
def column(header, names):
    low = [h.strip().lower() for h in header]
    for n in names:
        if n in low:
            return low.index(n)
    sys.exit("to_fasttext: no column among %s" % (names,))
csv.field_size_limit(1 << 30)
src, dst = sys.argv[1], sys.argv[2]
n = skipped = 0
with open_text(src) as fin, open(dst, "w", encoding="utf-8") as fout:
    r = csv.reader(fin)
    header = next(r)
    ti = column(header, ("review", "text", "sentence"))
    li = column(header, ("sentiment", "label", "polarity"))
    for row in r:
        if not row or max(ti, li) >= len(row):
            continue
        text = html.unescape(TAG.sub(" ", row[ti]))
        text = unicodedata.normalize("NFKC", text).casefold()
        toks = TOKEN.findall(text)
        if not toks:
            skipped += 1
            continue
        label = row[li].strip().replace(" ", "_")
        fout.write("__label__%s %s\n" % (label, " ".join(toks)))
        n += 1
print("%s: %d rows%s" % (src, n, " (%d empty skipped)" % skipped if skipped else ""),
      file=sys.stderr)
PY

# Accuracy and share predicted positive from a fastText file and its predictions.
cat >"$TMP/score.py" <<'PY'
import json, sys
gold = [l.split(" ", 1)[0] for l in open(sys.argv[1], encoding="utf-8")]
pred = [l.strip() for l in open(sys.argv[2], encoding="utf-8")]
if len(gold) != len(pred):
    sys.exit("score: %d rows but %d predictions" % (len(gold), len(pred)))
n = len(gold)
acc = sum(g == p for g, p in zip(gold, pred)) / n
pos = sum(p == "__label__positive" for p in pred) / n
print(json.dumps({"n": n, "accuracy": acc, "positive_share": pos}))
PY

py() { python3 "$@"; }
py "$TMP/to_fasttext.py" "$DATA/train.csv.gz" "$TMP/train.txt"
py "$TMP/to_fasttext.py" "$DATA/test.csv.gz" "$TMP/test.txt"
py "$here/make_spans.py" "$DATA/test.csv.gz" "$TMP/spans.csv" --seed 1 --min 5 --max 40
py "$TMP/to_fasttext.py" "$TMP/spans.csv" "$TMP/spans.txt"
py "$TMP/to_fasttext.py" "$repo_root/data/short_reviews.csv" "$TMP/short.txt"
py "$TMP/to_fasttext.py" "$repo_root/data/short_dev.csv" "$TMP/short_dev.txt"
py "$TMP/to_fasttext.py" "$repo_root/data/short_dev2.csv" "$TMP/short_dev2.txt"
py "$TMP/to_fasttext.py" "$repo_root/data/short_test.csv" "$TMP/short_test.txt"

t0=$(now)
"$FASTTEXT" supervised -input "$TMP/train.txt" -output "$TMP/model" \
    -wordNgrams 2 -dim 50 -epoch 10 -lr 0.1 -thread 2 -seed "$SEED" -verbose 1
t1=$(now)

for set in test spans short short_dev short_dev2 short_test; do
    "$FASTTEXT" predict "$TMP/model.bin" "$TMP/$set.txt" >"$TMP/$set.pred"
    py "$TMP/score.py" "$TMP/$set.txt" "$TMP/$set.pred" >"$TMP/$set.json"
done
t_end=$(now)

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
commit=$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo unknown)
py - "$TMP" "$t0" "$t1" "$t_start" "$t_end" "$cpu" "$commit" "$RUNS" "$NOTE" "$SEED" <<'PY'
import datetime, json, sys
tmp, t0, t1, ts, te, cpu, commit, runs, note, seed = sys.argv[1:]
r = {k: json.load(open("%s/%s.json" % (tmp, k)))
     for k in ("test", "spans", "short", "short_dev", "short_dev2", "short_test")}
train_s, wall_s = float(t1) - float(t0), float(te) - float(ts)
recipe = ("fasttext supervised -wordNgrams 2 -dim 50 -epoch 10 -lr 0.1 -thread 2 -seed %s"
          % seed)
print("fastText baseline: %s" % recipe)
print("cpu            %s" % cpu)
print("training       %.1f s" % train_s)
for key, name in (("test", "IMDB test"), ("spans", "short-span"), ("short", "short_reviews"),
                  ("short_dev", "short_dev"), ("short_dev2", "short_dev2"),
                  ("short_test", "short_test")):
    x = r[key]
    print("%-14s accuracy %.4f   predicted positive %5.1f %%   (%d rows)"
          % (name, x["accuracy"], 100 * x["positive_share"], x["n"]))
print("wall time      %.1f s (convert, spans, train, predict)" % wall_s)
line = {
    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "commit": commit, "recipe": "fasttext-bigram", "command": recipe, "seed": int(seed),
    "cpu": cpu, "train_seconds": round(train_s, 2), "wall_seconds": round(wall_s, 2),
    "test_accuracy": r["test"]["accuracy"], "test_positive_share": r["test"]["positive_share"],
    "ece": None, "brier": None,
    "span_accuracy": r["spans"]["accuracy"], "span_positive_share": r["spans"]["positive_share"],
    "short_reviews_accuracy": r["short"]["accuracy"],
    "short_reviews_positive_share": r["short"]["positive_share"],
    "short_dev_accuracy": r["short_dev"]["accuracy"],
    "short_dev_positive_share": r["short_dev"]["positive_share"],
    "short_dev2_accuracy": r["short_dev2"]["accuracy"],
    "short_dev2_positive_share": r["short_dev2"]["positive_share"],
    "short_test_accuracy": r["short_test"]["accuracy"],
    "short_test_positive_share": r["short_test"]["positive_share"],
    "note": note,
}
if runs != "/dev/null":
    with open(runs, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    print("appended to    %s" % runs)
PY
