#!/bin/sh
# Train one recipe on the film-grouped split of IMDB's training set and measure it
# on the held-out films and on the short development sets: the figures recipes are
# chosen on (never the test set).
#
#   benchmarks/run_grouped.sh [EXTRA TRAIN OPTIONS...]
#   benchmarks/run_grouped.sh --seed 2
#   benchmarks/run_grouped.sh --config models/seed.json --seed 3
#   NOTE="wide dropout 0.3" benchmarks/run_grouped.sh --wide-dropout 0.3
#
# Options go to `attnctl train` (default: the built-in defaults, seed 1). Environment:
#   DATA     directory with train.csv.gz and train.source.txt.gz [<repo>/../shared/data/imdb]
#   SPLIT    where the split lives (made once by make_grouped_split.py, with one seeded
#            5-40-word span of each validation review) [${TMPDIR:-/tmp}/attnctl-grouped]
#   RUNS     JSON-lines log to append to [<repo>/benchmarks/grouped_runs.jsonl]; /dev/null: none
#   NOTE     free text stored with the run
#   KEEP     directory to keep the trained model in (default: thrown away)
#   ATTNCTL  the binary [<repo>/build/attnctl, built with make -j2]
#
# Prints, and logs: training time, validation accuracy on the 2,500 held-out reviews
# (films the training rows never show), their short spans, data/short_dev.csv (300
# one-line reviews of six domains, the set short-input recipes are chosen on) and
# data/short_reviews.csv (240 more), each with ECE, Brier and the share called positive.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
DATA=${DATA:-$repo_root/../shared/data/imdb}
SPLIT=${SPLIT:-${TMPDIR:-/tmp}/attnctl-grouped}
RUNS=${RUNS:-$repo_root/benchmarks/grouped_runs.jsonl}
NOTE=${NOTE:-}
KEEP=${KEEP:-}

if [ ! -f "$DATA/train.csv.gz" ] || [ ! -f "$DATA/train.source.txt.gz" ]; then
    echo "SKIP: no IMDB data in $DATA (train.csv.gz, train.source.txt.gz)"
    exit 0
fi
if [ -z "${ATTNCTL:-}" ]; then
    make -C "$repo_root" -j2 build/attnctl >&2
    ATTNCTL=$repo_root/build/attnctl
fi
if [ ! -f "$SPLIT/val_spans.csv" ]; then
    python3 "$here/make_grouped_split.py" "$SPLIT" --data "$DATA" >&2
    python3 "$here/make_spans.py" "$SPLIT/val.csv" "$SPLIT/val_spans.csv" --seed 1 --min 5 --max 40
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_grouped.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$(date +%s.%N)
"$ATTNCTL" train "$SPLIT/train.csv" --val-file "$SPLIT/val.csv" --quiet "$@" --out "$TMP/model"
t1=$(date +%s.%N)
"$ATTNCTL" eval --model "$TMP/model" "$SPLIT/val.csv" --json >"$TMP/val.json"
"$ATTNCTL" eval --model "$TMP/model" "$SPLIT/val_spans.csv" --json >"$TMP/spans.json"
"$ATTNCTL" eval --model "$TMP/model" "$repo_root/data/short_dev.csv" --json >"$TMP/short_dev.json"
"$ATTNCTL" eval --model "$TMP/model" "$repo_root/data/short_reviews.csv" --json >"$TMP/short.json"
if [ -n "$KEEP" ]; then
    rm -rf "$KEEP" && cp -r "$TMP/model" "$KEEP"
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
commit=$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] &&
   [ -n "$(git -C "$repo_root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit=$commit-dirty
fi

python3 - "$TMP" "$t0" "$t1" "$cpu" "$commit" "$RUNS" "$NOTE" "$*" <<'PY'
import datetime, json, sys
tmp, t0, t1, cpu, commit, runs, note, args = sys.argv[1:]
train_s = float(t1) - float(t0)
cfg = json.load(open(tmp + "/model/config.json"))

def load(name):
    r = json.load(open("%s/%s.json" % (tmp, name)))
    labels, conf = r["labels"], r["confusion"]
    pi = labels.index("positive") if "positive" in labels else len(labels) - 1
    total = sum(map(sum, conf))
    return {"accuracy": r["accuracy"], "ece": r.get("ece"), "brier": r.get("brier"),
            "positive_share": sum(row[pi] for row in conf) / total if total else None}

sets = {name: load(name) for name in ("val", "spans", "short_dev", "short")}
epochs = [json.loads(l) for l in open(tmp + "/model/metrics.jsonl")]
per_epoch = [(e["val_accuracy"], e.get("short_span_accuracy")) for e in epochs
             if e.get("val_accuracy") is not None]
m, s = divmod(train_s, 60)
print("cpu %s | commit %s | %s" % (cpu, commit, args or "(defaults)"))
print("val per evaluation   %s" % " ".join("%.4f" % v for v, _ in per_epoch))
for label, name in (("val", "val"), ("val spans", "spans"), ("short_dev", "short_dev"),
                    ("short_reviews", "short")):
    r = sets[name]
    print("%-14s %.4f  positive %5.1f %%  ECE %.3f  Brier %.3f"
          % (label, r["accuracy"], 100 * r["positive_share"], r["ece"], r["brier"]))
print("training %dm%02ds, temperature %.3f" % (m, s, cfg["model"].get("temperature", 1.0)))
line = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": commit, "args": args, "seed": cfg["training"].get("seed"), "cpu": cpu,
        "train_seconds": round(train_s, 1), "temperature": cfg["model"].get("temperature"),
        "val_per_evaluation": [v for v, _ in per_epoch], "note": note}
for name, r in sets.items():
    for k, v in r.items():
        line["%s_%s" % (name, k)] = v
if runs != "/dev/null":
    with open(runs, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
PY
