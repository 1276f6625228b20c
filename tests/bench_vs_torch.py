#!/usr/bin/python3
"""attnctl against ../shared/bench/torch_ref.py, side by side, one right after the other.

For each configuration (A, B, C; batch 32, 2 threads) runs `attnctl bench --json`,
then torch_ref.py with the best setting its README gives, and prints both
throughputs and their ratio. Also: peak memory of attnctl on config A, and the
cold-start time of `attnctl predict` on one review when a model dir is given.

  /usr/bin/python3 tests/bench_vs_torch.py [--configs A,B,C] [--model DIR] [--runs N]

Needs python3-torch (Debian) for the PyTorch side; prints figures, asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_REF = os.path.join(ROOT, "..", "shared", "bench", "torch_ref.py")
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


def attnctl(config, threads):
    out = subprocess.run([os.path.join(ROOT, "build", "attnctl"), "bench", "--config",
                          os.path.join(ROOT, "models", f"bench-{config.lower()}.json"),
                          "--batch-size", "32", "--threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def torch(config, threads):
    env = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS=str(threads), ATEN_CPU_CAPABILITY="avx512")
    if os.path.exists(TCMALLOC):
        env["LD_PRELOAD"] = TCMALLOC
    out = subprocess.run(["/usr/bin/python3", TORCH_REF, "bench", "--config", config,
                          "--threads", str(threads)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def cold_predict(model, runs):
    """Median wall time of process start + model load + one answer."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([os.path.join(ROOT, "build", "attnctl"), "predict", "--model", model],
                       input="A wonderful, moving film with a great cast.\n", check=True,
                       capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="A,B,C")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", help="model dir for the cold-start predict timing")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    print(f"{'config':6} {'what':6} {'attnctl tok/s':>14} {'torch tok/s':>12} {'ratio':>6}")
    for c in args.configs.split(","):
        a = attnctl(c, args.threads)
        t = torch(c, args.threads)
        for what, ka, kt in (("train", "train_tokens_per_s", "train_tok_s"),
                             ("infer", "infer_tokens_per_s", "infer_tok_s")):
            print(f"{c:6} {what:6} {a[ka]:14.0f} {t[kt]:12.0f} {a[ka] / t[kt]:6.2f}")
        if c == "A":
            print(f"{c:6} attnctl peak resident memory {a['peak_rss_mb']:.1f} MB")
        sys.stdout.flush()
    if args.model:
        med, best = cold_predict(args.model, args.runs)
        print(f"cold predict ({args.model}): median {med * 1e3:.1f} ms, best {best * 1e3:.1f} ms "
              f"over {args.runs} runs")


if __name__ == "__main__":
    main()
