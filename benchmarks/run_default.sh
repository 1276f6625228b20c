#!/bin/sh
# Train one attnctl preset on IMDB and measure it the same way every time.
#
#   benchmarks/run_default.sh [CONFIG [EXTRA TRAIN OPTIONS...]]
#   benchmarks/run_default.sh models/default.json --seed 2
#   NOTE="fuzzer busy on one core" benchmarks/run_default.sh
#
# CONFIG defaults to models/default.json; extra options go to `attnctl train` after
# --config (e.g. --seed N, --epochs N). Environment:
#   DATA     directory with train.csv.gz and test.csv.gz [<repo>/../shared/data/imdb]
#   RUNS     JSON-lines log to append to [<repo>/benchmarks/runs.jsonl]; /dev/null: none
#   NOTE     free text stored with the run
#   KEEP     directory to keep the trained model in (default: thrown away)
#   ATTNCTL  the binary [<repo>/build/attnctl, built with make -j2]
#
# Steps: make -j2 build/attnctl; attnctl train --config CONFIG on train.csv.gz (timed);
# attnctl eval --json on test.csv.gz, on the short-span test set (one random span of
# 5-40 words of every test review, benchmarks/make_spans.py --seed 1, labelled with its
# review's label), on data/short_reviews.csv (240 short out-of-domain reviews, for reporting),
# on data/short_dev.csv (300 more, the set to choose short-input recipes on), on
# data/short_dev2.csv (600 more, a second development set) and on
# data/short_test.csv (600 more, a held-out report, never chosen on).
# Prints the CPU, config, training time, validation and test accuracy, ECE and Brier
# score (n/a when eval does not report them), and the accuracy and share called positive
# on the spans and the short reviews; appends the same figures as one JSON line to RUNS.
# The model and the spans live in a mktemp -d directory removed at the end.
# Training models/default.json on the full IMDB set takes about 6-10 minutes on 2 cores.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
DATA=${DATA:-$repo_root/../shared/data/imdb}
RUNS=${RUNS:-$repo_root/benchmarks/runs.jsonl}
NOTE=${NOTE:-}
KEEP=${KEEP:-}
CONFIG=${1:-models/default.json}
[ $# -gt 0 ] && shift

if [ ! -f "$DATA/train.csv.gz" ] || [ ! -f "$DATA/test.csv.gz" ]; then
    echo "SKIP: no IMDB data in $DATA (train.csv.gz, test.csv.gz)"
    exit 0
fi
case $CONFIG in /*) ;; *) [ -f "$CONFIG" ] || CONFIG=$repo_root/$CONFIG ;; esac
[ -f "$CONFIG" ] || { echo "run_default.sh: error: no config $CONFIG" >&2; exit 2; }
CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
DATA=$(cd "$DATA" && pwd)

cd "$repo_root"
if [ -z "${ATTNCTL:-}" ]; then
    make -j2 build/attnctl >&2
    ATTNCTL=$repo_root/build/attnctl
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_default.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
t0=$(now)
"$ATTNCTL" train --config "$CONFIG" "$@" "$DATA/train.csv.gz" --out "$TMP/model"
t1=$(now)

python3 "$here/make_spans.py" "$DATA/test.csv.gz" "$TMP/spans.csv" --seed 1 --min 5 --max 40
"$ATTNCTL" eval --model "$TMP/model" "$DATA/test.csv.gz" --json >"$TMP/test.json"
"$ATTNCTL" eval --model "$TMP/model" "$TMP/spans.csv" --json >"$TMP/spans.json"
"$ATTNCTL" eval --model "$TMP/model" "$repo_root/data/short_reviews.csv" --json >"$TMP/short.json"
for set in short_dev short_dev2 short_test; do
    if [ -f "$repo_root/data/$set.csv" ]; then
        "$ATTNCTL" eval --model "$TMP/model" "$repo_root/data/$set.csv" --json >"$TMP/$set.json"
    else
        echo '{}' >"$TMP/$set.json"
    fi
done

if [ -n "$KEEP" ]; then
    rm -rf "$KEEP" && cp -r "$TMP/model" "$KEEP"
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit=$commit-dirty
fi
config_name=$(python3 -c 'import os,sys; r,c=sys.argv[1:]; p=os.path.relpath(c,r); print(c if p.startswith("..") else p)' "$repo_root" "$CONFIG")

python3 - "$TMP" "$t0" "$t1" "$cpu" "$commit" "$config_name" "$RUNS" "$NOTE" "$*" <<'PY'
import datetime, json, sys
tmp, t0, t1, cpu, commit, config, runs, note, extra = sys.argv[1:]
train_s = float(t1) - float(t0)
model_cfg = json.load(open(tmp + "/model/config.json"))
val_acc = model_cfg.get("provenance", {}).get("best_val_accuracy")
seed = model_cfg.get("training", {}).get("seed")
temperature = model_cfg.get("model", {}).get("temperature")
# the evaluation of the kept model: the first with the best validation accuracy
span_val = None
best = None
for line in open(tmp + "/model/metrics.jsonl"):
    rec = json.loads(line)
    if rec.get("val_accuracy") is not None and (best is None or rec["val_accuracy"] > best):
        best, span_val = rec["val_accuracy"], rec.get("short_span_accuracy")

def load(name):
    r = json.load(open("%s/%s.json" % (tmp, name)))
    if "accuracy" not in r:  # a set this checkout does not have
        return {"accuracy": None, "positive_share": None, "count": 0}
    labels, conf = r["labels"], r["confusion"]
    pi = labels.index("positive") if "positive" in labels else len(labels) - 1
    total = sum(map(sum, conf))
    r["positive_share"] = sum(row[pi] for row in conf) / total if total else None
    return r

test, spans, short, dev = load("test"), load("spans"), load("short"), load("short_dev")
fresh = load("short_test")
dev2 = load("short_dev2")

def fmt(x, spec="%.4f"):
    return "n/a" if x is None else spec % x

def pct(x):
    return "n/a" if x is None else "%.1f %%" % (100 * x)

m, s = divmod(train_s, 60)
print()
print("cpu              %s" % cpu)
print("config           %s%s" % (config, " " + extra if extra else ""))
print("commit           %s" % commit)
print("training         %.1f s (%dm%02ds)" % (train_s, m, s))
print("val accuracy     %s   short-span val %s   temperature %s"
      % (fmt(val_acc), fmt(span_val), fmt(temperature, "%.3f")))
print("IMDB test        accuracy %s   ECE %s   Brier %s   positive %s   (%d rows)"
      % (fmt(test["accuracy"]), fmt(test.get("ece")), fmt(test.get("brier")),
         pct(test["positive_share"]), test["count"]))
print("short-span       accuracy %s   positive %s   (%d rows)"
      % (fmt(spans["accuracy"]), pct(spans["positive_share"]), spans["count"]))
print("short_reviews    accuracy %s   positive %s   (%d rows)"
      % (fmt(short["accuracy"]), pct(short["positive_share"]), short["count"]))
print("short_dev        accuracy %s   positive %s   (%d rows)"
      % (fmt(dev["accuracy"]), pct(dev["positive_share"]), dev["count"]))
print("short_dev2       accuracy %s   positive %s   (%d rows)"
      % (fmt(dev2["accuracy"]), pct(dev2["positive_share"]), dev2["count"]))
print("short_test       accuracy %s   positive %s   (%d rows)"
      % (fmt(fresh["accuracy"]), pct(fresh["positive_share"]), fresh["count"]))

line = {
    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "commit": commit, "recipe": config, "extra_args": extra, "seed": seed, "cpu": cpu,
    "train_seconds": round(train_s, 2), "val_accuracy": val_acc,
    "short_span_val_accuracy": span_val, "temperature": temperature,
    "test_accuracy": test["accuracy"], "test_positive_share": test["positive_share"],
    "test_macro_f1": test.get("macro_f1"), "test_roc_auc": test.get("roc_auc"),
    "ece": test.get("ece"), "brier": test.get("brier"),
    "span_accuracy": spans["accuracy"], "span_positive_share": spans["positive_share"],
    "short_reviews_accuracy": short["accuracy"],
    "short_reviews_positive_share": short["positive_share"],
    "short_dev_accuracy": dev["accuracy"], "short_dev_positive_share": dev["positive_share"],
    "short_dev2_accuracy": dev2["accuracy"], "short_dev2_positive_share": dev2["positive_share"],
    "short_test_accuracy": fresh["accuracy"], "short_test_positive_share": fresh["positive_share"],
    "note": note,
}
if runs != "/dev/null":
    with open(runs, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    print("appended to      %s" % runs)
PY
