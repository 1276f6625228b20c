#!/bin/sh
# Pretrain the encoder on unlabelled IMDB text, fine-tune it, and compare with the same
# recipe and seed trained from scratch (issue 13).
#
#   benchmarks/pretrain_finetune.sh [CONFIG [EXTRA TRAIN OPTIONS...]]
#   benchmarks/pretrain_finetune.sh models/default.json
#   PRETRAIN_EPOCHS=4 KEEP=/tmp/pt benchmarks/pretrain_finetune.sh models/default.json --epochs 4
#
# CONFIG (default models/default.json) is used for pretraining (its model and tokenizer:
# the encoder both runs share) and for both fine-tuning runs; extra options go to both
# `attnctl train` runs (the one with --init and the one without), so the two differ only
# in where the encoder starts. Environment:
#   DATA             directory with train.csv.gz, test.csv.gz, unsup.csv.gz [<repo>/../shared/data/imdb]
#   PRETRAIN_EPOCHS  passes over the unlabelled text [4]
#   PRETRAIN_OPTS    more `attnctl pretrain` options ["--dropout 0.1": BERT's pretraining
#                    dropout; the fine-tuning keeps the recipe's]
#   SEED             seed of all three runs [1]
#   RUNS             JSON-lines log to append to [<repo>/benchmarks/runs.jsonl]; /dev/null: none
#   NOTE             free text stored with the run
#   KEEP             directory that keeps the three models and the spans (default: a
#                    mktemp -d directory removed at the end)
#
# Pretraining reads unsup.csv.gz (50,000 unlabelled reviews) and the texts of
# train.csv.gz (labels unused) -- never test.csv.gz. Then:
#   attnctl train --init PRETRAINED on train.csv.gz   (fine-tuned)
#   attnctl train                  on train.csv.gz   (baseline: same recipe, same seed)
# and evaluates both on test.csv.gz, on one random 5-40-word span of every test review
# (make_spans.py --seed 1) and on data/short_reviews.csv (short out-of-domain reviews).
# Prints the times (pretraining + fine-tuning is the figure the 60-minute budget is
# about), the accuracies side by side, the held-out masked-token figures and where the
# pretraining curve is (PRETRAINED/training.svg and metrics.jsonl: with KEEP they stay).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
DATA=${DATA:-$repo_root/../shared/data/imdb}
RUNS=${RUNS:-$repo_root/benchmarks/runs.jsonl}
PRETRAIN_EPOCHS=${PRETRAIN_EPOCHS:-4}
PRETRAIN_OPTS=${PRETRAIN_OPTS---dropout 0.1}
SEED=${SEED:-1}
NOTE=${NOTE:-}
KEEP=${KEEP:-}
CONFIG=${1:-models/default.json}
[ $# -gt 0 ] && shift

for f in train.csv.gz test.csv.gz unsup.csv.gz; do
    if [ ! -f "$DATA/$f" ]; then
        echo "SKIP: no IMDB data in $DATA ($f missing)"
        exit 0
    fi
done
case $CONFIG in /*) ;; *) [ -f "$CONFIG" ] || CONFIG=$repo_root/$CONFIG ;; esac
[ -f "$CONFIG" ] || { echo "pretrain_finetune.sh: error: no config $CONFIG" >&2; exit 2; }
CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
DATA=$(cd "$DATA" && pwd)

cd "$repo_root"
make -j2 build/attnctl >&2
ATTNCTL=$repo_root/build/attnctl

if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP"
    OUT=$(cd "$KEEP" && pwd)
    for d in pretrained finetuned baseline; do
        if [ -e "$OUT/$d" ]; then
            echo "pretrain_finetune.sh: error: $OUT/$d exists; choose another KEEP" >&2
            exit 2
        fi
    done
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/pretrain_finetune.XXXXXX")
    trap 'rm -rf "$OUT"' EXIT
fi
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
t0=$(now)
# shellcheck disable=SC2086 # PRETRAIN_OPTS holds several options
"$ATTNCTL" pretrain --config "$CONFIG" --epochs "$PRETRAIN_EPOCHS" --seed "$SEED" \
    $PRETRAIN_OPTS "$DATA/unsup.csv.gz" "$DATA/train.csv.gz" --out "$OUT/pretrained"
t1=$(now)
"$ATTNCTL" train --config "$CONFIG" --seed "$SEED" --init "$OUT/pretrained" "$@" \
    "$DATA/train.csv.gz" --out "$OUT/finetuned"
t2=$(now)
"$ATTNCTL" train --config "$CONFIG" --seed "$SEED" "$@" "$DATA/train.csv.gz" --out "$OUT/baseline"
t3=$(now)

python3 "$here/make_spans.py" "$DATA/test.csv.gz" "$OUT/spans.csv" --seed 1 --min 5 --max 40
for m in finetuned baseline; do
    "$ATTNCTL" eval --model "$OUT/$m" "$DATA/test.csv.gz" --json >"$OUT/$m.test.json"
    "$ATTNCTL" eval --model "$OUT/$m" "$OUT/spans.csv" --json >"$OUT/$m.spans.json"
    "$ATTNCTL" eval --model "$OUT/$m" "$repo_root/data/short_reviews.csv" --json \
        >"$OUT/$m.short.json"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit=$commit-dirty
fi
config_name=$(python3 -c 'import os,sys; r,c=sys.argv[1:]; p=os.path.relpath(c,r); print(c if p.startswith("..") else p)' "$repo_root" "$CONFIG")

python3 - "$OUT" "$t0" "$t1" "$t2" "$t3" "$cpu" "$commit" "$config_name" "$RUNS" "$NOTE" \
    "$*" "$PRETRAIN_EPOCHS $PRETRAIN_OPTS" "$SEED" "$KEEP" <<'PY'
import datetime, json, sys
(out, t0, t1, t2, t3, cpu, commit, config, runs, note, extra, pretrain_args, seed,
 keep) = sys.argv[1:]
pre_s, ft_s, base_s = float(t1) - float(t0), float(t2) - float(t1), float(t3) - float(t2)

def mmss(s):
    m, s = divmod(s, 60)
    return "%dm%02ds" % (m, s)

curve = [json.loads(l) for l in open(out + "/pretrained/metrics.jsonl") if l.strip()]
last = curve[-1] if curve else {}
pre_cfg = json.load(open(out + "/pretrained/config.json"))

def load(model, name):
    r = json.load(open("%s/%s.%s.json" % (out, model, name)))
    labels, conf = r["labels"], r["confusion"]
    pi = labels.index("positive") if "positive" in labels else len(labels) - 1
    total = sum(map(sum, conf))
    r["positive_share"] = sum(row[pi] for row in conf) / total if total else None
    return r

res = {m: {n: load(m, n) for n in ("test", "spans", "short")} for m in ("finetuned", "baseline")}
val = {m: json.load(open("%s/%s/config.json" % (out, m)))["provenance"]["best_val_accuracy"]
       for m in ("finetuned", "baseline")}

def fmt(x):
    return "n/a" if x is None else "%.4f" % x

print()
print("cpu                 %s" % cpu)
print("config              %s%s   seed %s" % (config, " " + extra if extra else "", seed))
print("pretraining         --epochs %s; %d texts, vocabulary %d"
      % (pretrain_args.strip(), pre_cfg["provenance"]["rows_used"], pre_cfg["model"]["vocab_size"]))
print("commit              %s" % commit)
print("time                pretraining %s + fine-tuning %s = %s (budget 60m00s); "
      "baseline training %s" % (mmss(pre_s), mmss(ft_s), mmss(pre_s + ft_s), mmss(base_s)))
print("masked-token        held-out loss %s, accuracy %s at step %s"
      % (fmt(last.get("val_loss")), fmt(last.get("val_accuracy")), last.get("step")))
print("pretraining curve   %s/pretrained/training.svg (and metrics.jsonl)%s"
      % (out, "" if keep else ": removed at exit, set KEEP=DIR to keep it"))
print()
print("                    %-22s %-22s %s" % ("fine-tuned (--init)", "baseline (same seed)", "gain"))
rows = [("validation", val["finetuned"], val["baseline"])]
for name, label in (("test", "IMDB test"), ("spans", "short spans"), ("short", "short_reviews")):
    rows.append((label, res["finetuned"][name]["accuracy"], res["baseline"][name]["accuracy"]))
for label, a, b in rows:
    gain = "n/a" if a is None or b is None else "%+.2f points" % (100 * (a - b))
    print("%-19s %-22s %-22s %s" % (label, fmt(a), fmt(b), gain))
for name, label in (("spans", "short spans"), ("short", "short_reviews")):
    print("%-19s positive %.1f %% / %.1f %%" % (
        label + " share", 100 * res["finetuned"][name]["positive_share"],
        100 * res["baseline"][name]["positive_share"]))

line = {
    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "commit": commit, "recipe": config + " pretrain+init", "extra_args": extra,
    "pretrain_args": pretrain_args.strip(), "seed": int(seed), "cpu": cpu,
    "pretrain_seconds": round(pre_s, 2), "finetune_seconds": round(ft_s, 2),
    "baseline_seconds": round(base_s, 2),
    "masked_token_accuracy": last.get("val_accuracy"), "masked_token_loss": last.get("val_loss"),
    "val_accuracy": val["finetuned"], "baseline_val_accuracy": val["baseline"],
    "test_accuracy": res["finetuned"]["test"]["accuracy"],
    "baseline_test_accuracy": res["baseline"]["test"]["accuracy"],
    "test_roc_auc": res["finetuned"]["test"].get("roc_auc"),
    "span_accuracy": res["finetuned"]["spans"]["accuracy"],
    "baseline_span_accuracy": res["baseline"]["spans"]["accuracy"],
    "short_reviews_accuracy": res["finetuned"]["short"]["accuracy"],
    "baseline_short_reviews_accuracy": res["baseline"]["short"]["accuracy"],
    "note": note,
}
if runs != "/dev/null":
    with open(runs, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    print("appended to         %s" % runs)
PY
