#!/bin/sh
# The command-line flow end to end under valgrind memcheck: a tiny training
# run, eval, predict from a pipe (awkward lines), inspect in every format, a
# quantized copy through predict and inspect, a tiny pretraining run with a fine-tuning from it, a tiny --autotune search, and a usage error. Fails on any memcheck error or any definite, indirect or
# possible leak. Usage: tests/valgrind.sh BINARY WORKDIR
#
# The binary is built without AVX-512 (valgrind 3.19 cannot execute it), and
# the variables attnctl sets for train/pretrain/eval/bench are set so that it
# does not re-execute itself (a re-exec would leave valgrind). tests/valgrind.supp hides only the
# thread-local storage glibc keeps for threads: libgomp's workers and the model loading thread.
set -u
bin=$1
work=$2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work" || exit 1
export OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1 GOMP_SPINCOUNT=10000
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
vg="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible"
vg="$vg --errors-for-leak-kinds=definite,indirect,possible --suppressions=$here/valgrind.supp"
failed=0
step() { # NAME EXPECTED_STATUS COMMAND... (standard input from $input)
    name=$1 want=$2
    shift 2
    "$@" <"$input" >"$work/$name.out" 2>"$work/$name.err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "valgrind: $name: exit $got, expected $want"
        tail -n 30 "$work/$name.err"
        failed=$((failed + 1))
    else
        echo "valgrind: $name: ok"
    fi
}
model="$work/model"
input=/dev/null
step train 0 $vg "$bin" train data/sample_train.csv --out "$model" --epochs 1 --d-model 16 --heads 2 \
    --ff 32 --layers 1 --max-len 32 --batch-size 16 --ngrams 2 --ngram-buckets 1021 --wide-buckets 1021 \
    --threads 2 --quiet
step eval 0 $vg "$bin" eval --model "$model" data/sample_test.csv --json --errors 2
printf 'A great film.\r\n\n   \nterrible \377\376 acting\n%s\nno final newline' \
    "$(head -c 3000 /dev/zero | tr '\0' 'x')" >"$work/lines.txt"
input="$work/lines.txt"
step predict 0 $vg "$bin" predict --model "$model" --json
lines=$(wc -l <"$work/predict.out")
[ "$lines" -eq 6 ] || { echo "valgrind: predict: $lines output lines, expected 6"; failed=$((failed + 1)); }
input=/dev/null
for f in json svg html text; do
    step "inspect-$f" 0 $vg "$bin" inspect --model "$model" --format "$f" \
        --out "$work/inspect.$f" "What a wonderful, moving film."
done
# a quantized copy (plain C kernels here: valgrind shows no AVX512-VNNI), run by predict and inspect
step quantize 0 $vg "$bin" quantize --model "$model" --out "$work/quantized" --cutoff 300 \
    --check data/sample_test.csv
input="$work/lines.txt"
step predict-quantized 0 $vg "$bin" predict --model "$work/quantized" --json
input=/dev/null
step inspect-quantized 0 $vg "$bin" inspect --model "$work/quantized" --format json \
    --out "$work/inspect-quantized.json" "What a wonderful, moving film."
# pretraining (masked LM), fine-tuning from it, and a pretrained model's attention
step pretrain 0 $vg "$bin" pretrain data/sample_train.csv --out "$work/mlm" --epochs 1 --d-model 16 \
    --heads 2 --ff 32 --max-len 32 --batch-size 16 --ngrams 2 --ngram-buckets 1021 --eval-every 20 --threads 2 \
    --quiet
step finetune 0 $vg "$bin" train --init "$work/mlm" data/sample_train.csv --out "$work/finetuned" \
    --epochs 1 --batch-size 16 --wide-buckets 1021 --threads 2 --quiet
step self-training 0 $vg "$bin" train data/sample_train.csv --teacher "$model" \
    --unlabelled data/sample_test.csv --pseudo-threshold 0.5 --out "$work/student" --epochs 1 \
    --d-model 16 --heads 2 --ff 32 --max-len 32 --batch-size 16 --ngrams 2 --ngram-buckets 1021 \
    --wide-buckets 1021 --threads 2 --quiet
step autotune 0 $vg "$bin" train data/sample_train.csv --out "$work/tuned" --autotune 80steps \
    --epochs 1 --members 1 --d-model 16 --heads 2 --ff 32 --max-len 32 --batch-size 16 \
    --wide-buckets 1021 --threads 2 --quiet
step inspect-pretrained 0 $vg "$bin" inspect --model "$work/mlm" --format html \
    --out "$work/pretrained.html" "What a wonderful, moving film."
step eval-pretrained 1 $vg "$bin" eval --model "$work/mlm" data/sample_test.csv
step usage-error 2 $vg "$bin" predict --model "$model" --no-such-option
step missing-model 1 $vg "$bin" predict --model "$work/nothing-here"
if [ "$failed" -ne 0 ]; then
    echo "valgrind: $failed step(s) failed"
    exit 1
fi
echo "valgrind: every step clean (0 errors, 0 leaks)"
