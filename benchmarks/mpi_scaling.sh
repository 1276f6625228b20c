#!/bin/sh
# Tokens/s of data-parallel training on this machine: 2 processes x 1 thread
# (mpirun) against 1 process x 2 threads, on models/default.json and on
# config C (models/bench-c.json), the same data, steps and micro-batches.
# Usage: benchmarks/mpi_scaling.sh [TRAIN.csv] [STEPS]   (default: the sample data, 40 steps)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ATTNCTL:-$here/attnctl}
data=${1:-$here/data/sample_train.csv}
steps=${2:-40}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "data: $data, $steps steps, batch 32 in micro-batches of 8"
work=$(mktemp -d /tmp/attnctl_mpi_bench_XXXXXX)
trap 'rm -rf "$work"' EXIT
# tokens/s of the training steps: the last metrics line's figure
rate() { sed -n 's/.*"tokens_per_s": \([0-9.e+]*\).*/\1/p' "$1/metrics.jsonl" | tail -n 1; }
for preset in default bench-c; do
    opts="--config $here/models/$preset.json --batch-size 32 --micro-batch 8 --max-steps $steps
          --eval-every $steps --val-split 0.05 --quiet"
    "$bin" train "$data" --out "$work/$preset-1x2" $opts --threads 2
    mpirun -np 2 --oversubscribe --bind-to none "$bin" train "$data" --out "$work/$preset-2x1" \
        $opts --threads 1
    same=$(cmp -s "$work/$preset-1x2/model.safetensors" "$work/$preset-2x1/model.safetensors" &&
           echo "same model" || echo "MODELS DIFFER")
    printf '%-8s 1 process x 2 threads: %8.0f tokens/s   2 processes x 1 thread: %8.0f tokens/s   (%s)\n' \
        "$preset" "$(rate "$work/$preset-1x2")" "$(rate "$work/$preset-2x1")" "$same"
done
