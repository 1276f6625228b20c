#!/usr/bin/env python3
"""An independent reader of attnctl model directories, written from docs/formats.md alone.

Given a model directory and the token ids that `attnctl inspect --format json` prints, it computes
the class probabilities from config.json and model.safetensors with numpy.

    python3 tests/format_reader.py --model DIR --ids "2 15 7"   # prints the probabilities as JSON
    python3 tests/format_reader.py --check ATTNCTL              # the test `make check` runs

--check trains a tiny model of every preset in models/ on data/sample_train.csv (a few steps), runs
`attnctl inspect --format json` and `attnctl predict --json` on a handful of texts and compares their
probabilities with this reader's. It also checks that the comparison can fail: the whole MurmurHash3
fmix64 in place of the wide path's half of it, or no wide path at all, must give other probabilities.
Exit 0: agreement; 1: a difference; 77: skipped (no numpy).
"""
import argparse
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # the caller prints the SKIP line
    np = None

MASK64 = (1 << 64) - 1
MULTIPLIER = 116049371
WIDE_NORM_REF = 500
WIDE_NORM_FLOOR = 30


# ------------------------------------------------------------------ files

def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = blob[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name}: dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = arr.astype(np.float64)
    return tensors


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return config, weights


# ------------------------------------------------------------------ hashes

def mix_half_fmix64(h):
    """The first half of MurmurHash3's fmix64: what the wide path applies."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    return h


def mix_whole_fmix64(h):
    """MurmurHash3's whole fmix64: NOT what attnctl computes (used to show the test can fail)."""
    h = mix_half_fmix64(h)
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    h ^= h >> 33
    return h


def wide_bucket(gram, n_buckets, mix=mix_half_fmix64):
    h = len(gram)
    for g in gram:
        h = (h * MULTIPLIER + g + 1) & MASK64
    return mix(h) % n_buckets


def ngram_bucket(gram, n_buckets):
    h = 0
    for g in gram:
        h = (h * MULTIPLIER + g) & MASK64
    return h % n_buckets


# ------------------------------------------------------------------ forward

def layer_norm(x, gain, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gain + bias


def softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def sinusoidal(n, d):
    table = np.zeros((n, d))
    for t in range(n):
        for col in range(0, d, 2):
            angle = t / math.pow(10000.0, col / d)
            table[t, col] = np.float32(math.sin(angle))
            if col + 1 < d:
                table[t, col + 1] = np.float32(math.cos(angle))
    return table


def logits_of(config, w, ids, mix=mix_half_fmix64, wide=True):
    m = config["model"]
    d, heads, n = m["d_model"], m["n_heads"], len(ids)
    dk = d // heads
    positions = m.get("positions", "sinusoidal")
    x = w["embed.weight"][ids].copy()
    if positions == "learned":
        x += w["embed.pos.weight"][:n]
    elif positions == "sinusoidal":
        x += sinusoidal(n, d)
    order = m.get("ngram_order", 1)
    if order >= 2:
        for t in range(n):
            for k in range(2, order + 1):
                gram = [ids[i] if i >= 0 else 0 for i in range(t - k + 1, t + 1)]
                x[t] += w["embed.ngram.weight"][ngram_bucket(gram, m["ngram_buckets"])]
    eps = m.get("ln_eps", 1e-6)
    x = layer_norm(x, w["embed.norm.weight"], w["embed.norm.bias"], eps)
    for l in range(m["n_layers"]):
        p = f"layers.{l}."
        q, k, v = (x @ w[p + f"attn.{s}.weight"].T for s in "qkv")
        a = np.zeros_like(x)
        for j in range(heads):
            cols = slice(j * dk, (j + 1) * dk)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(dk)
            a[:, cols] = softmax(scores) @ v[:, cols]
        y = layer_norm(x + a @ w[p + "attn.out.weight"].T + w[p + "attn.out.bias"],
                       w[p + "ln1.weight"], w[p + "ln1.bias"], eps)
        hidden = np.maximum(y @ w[p + "ffn.fc1.weight"].T + w[p + "ffn.fc1.bias"], 0.0)
        x = layer_norm(y + hidden @ w[p + "ffn.fc2.weight"].T + w[p + "ffn.fc2.bias"],
                       w[p + "ln2.weight"], w[p + "ln2.bias"], eps)
    pooling = m["pooling"]
    pooled = x.max(axis=0) if pooling == "max" else x.mean(axis=0) if pooling == "mean" else x[0]
    logits = pooled @ w["head.weight"].T + w["head.bias"]
    wide_order = m.get("wide_order", 0)
    if wide and wide_order >= 1:
        buckets = set()
        for k in range(1, wide_order + 1):
            for t in range(n - k + 1):
                buckets.add(wide_bucket(ids[t:t + k], m["wide_buckets"], mix))
        norm = m.get("wide_norm", 0.0)
        scale = 1.0 if norm == 0 else (WIDE_NORM_REF / max(len(buckets), WIDE_NORM_FLOOR)) ** norm
        logits = logits + scale * sum(w["head.wide.weight"][b] for b in sorted(buckets))
    return logits


def probabilities_of(config, w, ids, **kw):
    tau = config["model"].get("temperature", 1.0) or 1.0
    return softmax(logits_of(config, w, ids, **kw) / tau)


# ------------------------------------------------------------------ the check

TEXTS = [
    "Not bad at all!",
    "The acting was wooden and the plot made no sense.",
    "A wonderful, moving film. A wonderful, moving film. A wonderful cast.",
    "good",
    "I <i>LOVED</i> it!!<br />Well-made &amp; don't miss 👍",
    "so goooood, would not recommend it to anyone who hates fun",
    # long enough to be truncated by every preset's max_len
    " ".join(["The plot is dull and the director is wooden, the cast tries hard."] * 90),
]
TOLERANCE = 2e-5  # the JSON prints 6 significant digits; float32 against float64 adds ~1e-6


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def train_tiny(attnctl, preset, out):
    # A high learning rate makes every weight (the wide table's rows included) far from its
    # start, so a wrong bucket or a wrong layer shows in the probabilities; a prime number of wide
    # buckets makes the modulo matter and lets n-grams collide.
    cmd = [attnctl, "train", "data/sample_train.csv", "--config", preset, "--out", out,
           "--members", "1", "--max-steps", "12", "--ema", "0", "--epochs", "1",
           "--quiet", "--threads", "1"]
    with open(preset, encoding="utf-8") as f:
        if json.load(f).get("model", {}).get("wide_order", 3) != 0:
            cmd += ["--wide-buckets", "1021", "--lr", "0.01"]
        else:
            cmd += ["--lr", "0.003"]
    run(cmd)


def check(attnctl):
    failures = 0
    sensitive = {"whole fmix64": 0.0, "no wide path": 0.0}
    with tempfile.TemporaryDirectory(prefix="attnctl_format_reader_") as tmp:
        for preset in sorted(glob.glob("models/*.json")):
            name = os.path.splitext(os.path.basename(preset))[0]
            out = os.path.join(tmp, name)
            train_tiny(attnctl, preset, out)
            config, w = load_model(out)
            labels = config["labels"]
            predicted = run([attnctl, "predict", "--model", out, "--json"], input="\n".join(TEXTS) + "\n")
            predicted = [json.loads(line) for line in predicted.splitlines()]
            worst = 0.0
            seen = []
            for text, from_predict in zip(TEXTS, predicted):
                shown = json.loads(run([attnctl, "inspect", "--model", out, "--format", "json",
                                        "--attribution", "none", text]))
                ids = shown["ids"]
                mine = probabilities_of(config, w, ids)
                seen.append(float(mine[0]))
                for c, label in enumerate(labels):
                    worst = max(worst, abs(mine[c] - shown["probabilities"][label]),
                                abs(mine[c] - from_predict["probabilities"][label]))
                logits = logits_of(config, w, ids)
                for c, label in enumerate(labels):
                    worst = max(worst, abs(logits[c] - shown["logits"][label]) / max(1.0, abs(logits[c])))
                if config["model"].get("wide_order", 0) >= 1:
                    for key, kw in (("whole fmix64", {"mix": mix_whole_fmix64}),
                                    ("no wide path", {"wide": False})):
                        other = probabilities_of(config, w, ids, **kw)
                        sensitive[key] = max(sensitive[key], float(np.abs(other - mine).max()))
            # a model that says the same of every text would check nothing but its bias
            spread = max(seen) - min(seen)
            status = "ok" if worst <= TOLERANCE and spread > 1e-3 else "FAIL"
            failures += status != "ok"
            print(f"format_reader: {name}: {len(TEXTS)} texts, largest difference {worst:.2e} "
                  f"(tolerance {TOLERANCE:g}), probabilities spread over {spread:.3f}: {status}")
    for key, gap in sensitive.items():
        ok = gap > 100 * TOLERANCE
        failures += not ok
        print(f"format_reader: reading with {key} moves a probability by {gap:.3f}: "
              f"{'the check can fail' if ok else 'FAIL: the check cannot tell'}")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model directory")
    ap.add_argument("--ids", help="token ids, separated by spaces")
    ap.add_argument("--check", metavar="ATTNCTL", help="compare with this attnctl binary")
    args = ap.parse_args()
    if np is None:
        print("SKIP format_reader: python3 has no numpy")
        return 77
    if args.check:
        return check(os.path.abspath(args.check) if os.sep in args.check else shutil.which(args.check))
    if not (args.model and args.ids):
        ap.error("--model and --ids, or --check")
    config, w = load_model(args.model)
    probs = probabilities_of(config, w, [int(t) for t in args.ids.split()])
    print(json.dumps(dict(zip(config["labels"], (round(float(p), 6) for p in probs)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
