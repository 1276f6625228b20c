#!/bin/sh
# Seeded trainings on the sample data whose results must not change when the
# code is only reorganised: per run, the SHA-256 of model.safetensors, of
# config.json and metrics.jsonl without their times, dates and paths, and the
# stdout of `attnctl eval --json` without its timings. Two trees give the same
# results when their outputs are identical (diff). Not part of `make check`
# (about two minutes of one core).
# Usage: tests/bitwise_runs.sh ATTNCTL OUT.txt
set -u
if [ $# -ne 2 ]; then echo "usage: $0 ATTNCTL OUT.txt" >&2; exit 2; fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/attnctl_bitwise_XXXXXX)
trap 'rm -rf "$work"' EXIT
# Relative names in a scratch directory: the outputs name no path of the tree.
cp "$here/data/sample_train.csv" "$work/train.csv"
cp "$here/data/sample_test.csv" "$work/test.csv"
cp "$here/data/short_reviews.csv" "$work/unlabelled.csv"
cp "$here/models/seed.json" "$here/models/default.json" "$work/"
cd "$work" || exit 1
# Root in a container, no network: shared memory only (as tests/mpi_check.sh).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
export OMP_WAIT_POLICY=passive
enc="--d-model 32 --ff 64 --max-len 96 --ngrams 2 --ngram-buckets 4096 --micro-batch 8 --threads 1 --quiet"
# The sample's texts are short, so "auto" settings would take their short-text
# values (src/train/adapt.c): the runs pin the values the baseline was made with.
recipe="--ema 0.999 --wide-nb 0 --refit 0"
small="$enc --wide-buckets 4096 --wide-nb 0 --min-count 2 --wide 3 --refit 0"
failed=0
: >"$out"
report() { # label dir: the hashes and the evaluation of the model in dir
    {
        echo "== $1"
        for f in model.safetensors checkpoint/model.safetensors checkpoint/optimizer.safetensors; do
            if [ -f "$2/$f" ]; then echo "$f $(sha256sum <"$2/$f" | cut -d' ' -f1)"; fi
        done
        if [ -f "$2/config.json" ]; then
            # "refit" (0 in every run here, the behaviour before the key
            # existed) is left out, so that the baseline's hashes still hold.
            grep -v -e '"date"' -e '_file"' -e '"init_model"' "$2/config.json" |
                sed -e '$!N;s/,\n *"refit": 0$//;P;D' |
                sha256sum | sed 's/ .*/ config.json (no date, paths)/'
        fi
        if [ -f "$2/metrics.jsonl" ]; then
            sed 's/, "tokens_per_s".*//' "$2/metrics.jsonl" |
                sha256sum | sed 's/ .*/ metrics.jsonl (no times)/'
        fi
        if grep -q '"classification"' "$2/config.json" 2>/dev/null; then
            "$bin" eval --model "$2" test.csv --json 2>&1 | grep -v -e '"seconds"' -e '"model_seconds"'
        fi
    } >>"$out"
}
run() { # label dir command...: runs, then reports dir
    label=$1 dir=$2; shift 2
    if ! "$@" >"$work/log" 2>&1; then
        echo "FAIL: $label exited non-zero:" >&2; tail -n 15 "$work/log" >&2
        echo "== $label: FAILED" >>"$out"; failed=1; return
    fi
    report "$label" "$dir"
}
run "seed preset" seed \
    "$bin" train train.csv --out seed --config seed.json --epochs 3 --threads 1 --quiet
run "default preset" default \
    "$bin" train train.csv --out default --config default.json --epochs 1 --eval-every 8 $recipe --members 3 --min-count 2 --wide 3 --threads 1 --quiet
run "members 3" members \
    "$bin" train train.csv --out members $small --epochs 2 --members 3 --ema 0
run "pretrain" pre \
    "$bin" pretrain train.csv test.csv --out pre $enc --epochs 2 --max-steps 20
run "train --init" init \
    "$bin" train train.csv --out init --init pre --epochs 2 --micro-batch 8 --members 1 --wide 3 $recipe --threads 1 --quiet
run "teacher" student \
    "$bin" train train.csv --out student --teacher seed --unlabelled unlabelled.csv \
    --pseudo-threshold 0.5 $small --epochs 2 --members 1 --ema 0
run "ema" ema \
    "$bin" train train.csv --out ema $small --epochs 2 --members 1 --ema 0.9 --eval-every 5
if command -v mpirun >/dev/null 2>&1 && [ -f "$(dirname "$bin")/attnctl-mpi.so" ]; then
    run "mpirun -np 2" mpi \
        mpirun -np 2 --oversubscribe --bind-to none \
        "$bin" train train.csv --out mpi $small --epochs 2 --members 2 --ema 0.9 --eval-every 6
else
    echo "== mpirun -np 2: SKIPPED (no mpirun or no plugin)" >>"$out"
fi
# stopped early (in the first member, and in the second), then resumed
run "resume at 12: first part" resumed12 \
    "$bin" train train.csv --out resumed12 $small --epochs 2 --members 2 --ema 0.9 --eval-every 5 \
    --max-steps 12
run "resume at 12: the rest" resumed12 \
    "$bin" train --resume resumed12 --threads 1 --quiet
run "resume at 45: first part" resumed \
    "$bin" train train.csv --out resumed $small --epochs 2 --members 2 --ema 0.9 --eval-every 5 \
    --max-steps 45
run "resume at 45: the rest" resumed \
    "$bin" train --resume resumed --threads 1 --quiet
run "uninterrupted, as resumed" whole \
    "$bin" train train.csv --out whole $small --epochs 2 --members 2 --ema 0.9 --eval-every 5
run "pretrain resumed: first part" preres \
    "$bin" pretrain train.csv test.csv --out preres $enc --epochs 2 --max-steps 9 --keep-checkpoint
run "pretrain resumed: the rest" preres \
    "$bin" pretrain --resume preres --max-steps 20 --threads 1 --quiet
exit $failed
