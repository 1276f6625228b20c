#!/bin/sh
# Runs libFuzzer targets one after the other (one process each: no -jobs or
# -workers) for SECONDS each and prints one line per target; exits non-zero
# when any target finds a crash, a leak, a timeout or runs out of memory.
# New inputs go to a scratch corpus under BUILD_DIR; the committed seeds in
# tests/fuzz/corpus/TARGET are only read. Run from the repository root.
#
# usage: sh tests/fuzz/run.sh BUILD_DIR SECONDS TARGET...
# (SECONDS = 0 runs nothing.)
set -u
build=$1
seconds=$2
shift 2
if [ "$seconds" -le 0 ] 2>/dev/null; then
    echo "fuzz: ${seconds} seconds per target: skipped"
    exit 0
fi
mkdir -p "$build/logs" "$build/tmp"
build=$(cd "$build" && pwd)
# Targets keep temporary files here (removed at exit, but not after a crash).
rm -rf "$build/tmp"/attnctl-fuzz-*

# Largest input per target: room for realistic files, small enough to stay fast.
max_len_of() {
    case $1 in
        csv) echo 16384 ;;
        safetensors | config | quantized) echo 8192 ;;
        *) echo 4096 ;;
    esac
}

bad=""
for t in "$@"; do
    bin=$build/fuzz_$t
    work=$build/corpus/$t
    art=$build/artifacts/$t
    log=$build/logs/$t.log
    mkdir -p "$work" "$art"
    set -- -max_total_time="$seconds" -max_len="$(max_len_of "$t")" -rss_limit_mb=2048 \
        -timeout=10 -print_final_stats=1 -artifact_prefix="$art/"
    [ -f "tests/fuzz/$t.dict" ] && set -- "$@" -dict="tests/fuzz/$t.dict"
    # One thread: OpenMP and OpenBLAS would otherwise take every core.
    TMPDIR=$build/tmp OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
        UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        "$bin" "$@" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    # The last status line: "#RUNS DONE cov: N ft: N corp: N/SIZE ... exec/s: N rss: N"
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(printf '%s' "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s' "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    corp=$(printf '%s' "$last" | sed -n 's/.*corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p')
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $t: ok, ${runs:-?} runs (${rate:-?}/s), cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?}"
    else
        echo "fuzz $t: FAILED (exit $rc); log $log, inputs in $art/"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*invariant failed|.*runtime error)' "$log" | head -n 5
        tail -n 30 "$log"
        bad="$bad $t"
    fi
done
if [ -n "$bad" ]; then
    echo "fuzz: failing targets:$bad"
    exit 1
fi
