#!/bin/sh
# Self-training on unlabelled reviews (issue 13's lever that measured): a trained model
# labels the unlabelled reviews, the ones it is sure of join the labelled training data,
# and the same recipe is trained again on the union. TEACHER_DIR may name several models,
# comma-separated: their probabilities are averaged (an ensemble labels better than one).
#
#   benchmarks/self_train.sh TEACHER_DIR[,DIR...] TRAIN.csv[.gz] UNLABELLED.csv[.gz] OUT_DIR [TRAIN OPTIONS...]
#   benchmarks/self_train.sh /tmp/base ../shared/data/imdb/train.csv.gz \
#       ../shared/data/imdb/unsup.csv.gz /tmp/self --val-file VAL.csv
#
# Environment: THRESHOLD (probability a pseudo-label needs, [0.9]); VAL_SHARE (share of
# the labelled rows held out as validation, [0.1]: validation, early stopping and the
# temperature must see real labels only); ATTNCTL (binary, [<repo>/build/attnctl]).
# TRAIN.csv needs the columns review,sentiment (IMDB's); the unlabelled CSV a review column.
# The pseudo-labelled rows, the union and the validation rows are written under
# OUT_DIR.work/ (cut from the data: keep them out of the repository).
set -eu
[ $# -ge 4 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
teacher=$1 train=$2 unlabelled=$3 out=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(cd "$here/.." && pwd)
ATTNCTL=${ATTNCTL:-$repo_root/build/attnctl}
THRESHOLD=${THRESHOLD:-0.9}
VAL_SHARE=${VAL_SHARE:-0.1}
work=$out.work
mkdir -p "$work"

preds=
n=0
for dir in $(echo "$teacher" | tr ',' ' '); do
    n=$((n + 1))
    "$ATTNCTL" predict --model "$dir" --csv "$unlabelled" --json >"$work/unlabelled.$n.jsonl"
    preds="$preds${preds:+,}$work/unlabelled.$n.jsonl"
done
python3 - "$train" "$unlabelled" "$preds" "$THRESHOLD" "$work/union.csv" \
    "$VAL_SHARE" "$work/val.csv" <<'PY'
import csv, gzip, json, random, sys
train, unlabelled, pred_paths, threshold, union, val_share, val_path = sys.argv[1:]
csv.field_size_limit(1 << 30)

def rows(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        yield from csv.DictReader(f)

# predict --csv skips the rows with empty text, as the CSV reader does
texts = [r["review"] for r in rows(unlabelled) if r["review"].strip()]
# the teachers' probabilities, averaged per label
summed = None
for path in pred_paths.split(","):
    probs = [json.loads(line)["probabilities"] for line in open(path, encoding="utf-8")]
    if len(texts) != len(probs):
        sys.exit("self_train.sh: %d unlabelled texts but %d predictions in %s"
                 % (len(texts), len(probs), path))
    summed = probs if summed is None else [
        {k: a[k] + b[k] for k in a} for a, b in zip(summed, probs)]
n_teachers = len(pred_paths.split(","))
verdicts = [max(((v / n_teachers, k) for k, v in p.items()))[::-1] for p in summed]
kept = 0
per_label = {}
labelled = [(r["review"], r["sentiment"]) for r in rows(train)]
held = set(random.Random(1).sample(range(len(labelled)), int(float(val_share) * len(labelled))))
with open(val_path, "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)
    w.writerow(["review", "sentiment"])
    for i in sorted(held):
        w.writerow(labelled[i])
with open(union, "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)
    w.writerow(["review", "sentiment"])
    n_train = 0
    for i, row in enumerate(labelled):
        if i not in held:
            w.writerow(row)
            n_train += 1
    for text, (label, p) in zip(texts, verdicts):
        if float(p) >= float(threshold):
            w.writerow([text, label])
            kept += 1
            per_label[label] = per_label.get(label, 0) + 1
print("self_train.sh: %d labelled rows (%d more held out) + %d of %d unlabelled at p >= %s (%s)"
      % (n_train, len(held), kept, len(texts), threshold,
         ", ".join("%s %d" % kv for kv in sorted(per_label.items()))), file=sys.stderr)
PY
if [ -s "$work/val.csv" ] && [ "$(wc -l <"$work/val.csv")" -gt 1 ]; then
    "$ATTNCTL" train "$work/union.csv" --val-file "$work/val.csv" --out "$out" "$@"
else
    "$ATTNCTL" train "$work/union.csv" --out "$out" "$@"
fi
