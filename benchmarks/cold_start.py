#!/usr/bin/env python3
"""Cold start of `attnctl predict`: one new process a review, as a shell
script or a web hook would run it.

Runs each binary's `predict --model MODEL INPUT` in turn (interleaved, so a
machine whose speed drifts treats them alike), RUNS times each, and prints
the 10th, 25th and 50th percentiles of the wall time (spawn to exit) and the
median CPU time (user + system, from wait4). `/bin/true` is run the same way
as the floor of starting any process here.

    python3 benchmarks/cold_start.py --model DIR --input one.txt [--runs 200] BIN...
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def run_once(argv):
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        fa = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=fa)
        _, status, ru = os.wait4(pid, 0)
        t1 = time.perf_counter_ns()
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"cold_start: {' '.join(argv)} failed (status {status})")
    return (t1 - t0) / 1e6, (ru.ru_utime + ru.ru_stime) * 1e3


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, help="a file with one review")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="pass --threads N (0: the default)")
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    cmds = [["/bin/true"]]
    for b in a.bins:
        cmd = [os.path.abspath(b), "predict", "--model", a.model]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        cmds.append(cmd + [a.input])
    for c in cmds:  # warm the page cache
        run_once(c)
    wall = [[] for _ in cmds]
    cpu = [[] for _ in cmds]
    for _ in range(a.runs):
        for i, c in enumerate(cmds):
            w, u = run_once(c)
            wall[i].append(w)
            cpu[i].append(u)
    cpu_name = subprocess.run(["grep", "-m1", "model name", "/proc/cpuinfo"], capture_output=True,
                              text=True).stdout.split(":", 1)[-1].strip()
    print(f"CPU: {cpu_name}; {a.runs} runs each, interleaved; ms")
    print(f"{'wall p10':>9} {'p25':>7} {'median':>7} {'cpu med':>8}  command")
    for i, c in enumerate(cmds):
        print(f"{pct(wall[i], 0.1):9.3f} {pct(wall[i], 0.25):7.3f} {statistics.median(wall[i]):7.3f} "
              f"{statistics.median(cpu[i]):8.3f}  {' '.join(c)}")


if __name__ == "__main__":
    main()
