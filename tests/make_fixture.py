#!/usr/bin/python3
"""Writes the PyTorch reference fixtures that tests/test_fixture.c compares
the C model against (in the spirit of karpathy/llm.c's test_gpt2).

Run by hand where PyTorch is installed (Debian: apt-get install python3-torch):

    /usr/bin/python3 tests/make_fixture.py            # writes tests/fixtures/*.safetensors

It also reproduces the logits of a model that attnctl trained and saved (a
directory with config.json, model.safetensors and vocab.txt), for token ids
given on the command line (`attnctl inspect --format json` prints a text's ids):

    /usr/bin/python3 tests/make_fixture.py --model-dir models/imdb --ids "2 57 9" [--ids "2 4"]...

prints one JSON object: {"logits": [[...], ...], "probabilities": [[...], ...]}, one row per --ids.

    /usr/bin/python3 tests/make_fixture.py --self-check

checks the reference model itself against PyTorch's nn.TransformerEncoderLayer
(post-LN, ReLU, key padding mask) on every pooling.

The model below is written from the specification in DESIGN.md, not from the
C code: token embedding + fixed sinusoidal positions -> LayerNorm -> N post-LN
encoder layers (masked multi-head attention, ReLU FFN) -> pooling over valid
positions -> Linear(d, C) -> mean cross-entropy. LayerNorm eps 1e-6.

The weights are float32 values (drawn from a seeded generator); the reference
arithmetic runs in float64 so the stored outputs are the exact outputs of that
float32 model, rounded once to float32. The files are written with nothing but
json + struct (safetensors: u64 LE header length, JSON header, F32 LE data).
Integer inputs (ids, lengths, labels) are stored as F32 (exact below 2^24).
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-6
PAD_ID = 0


def sinusoid_table(max_len, d):
    """E(p, 2i) = sin(p / 10000^(2i/d)), E(p, 2i+1) = cos(same); float32 values."""
    table = torch.zeros(max_len, d, dtype=torch.float64)
    for p in range(max_len):
        for col in range(0, d, 2):
            angle = p / (10000.0 ** (col / d))
            table[p, col] = math.sin(angle)
            if col + 1 < d:
                table[p, col + 1] = math.cos(angle)
    return table.float().double()


class Embed(nn.Module):
    def __init__(self, V, d, max_len, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(V, d))
        self.norm = nn.LayerNorm(d, eps=eps)
        self.register_buffer("pos", sinusoid_table(max_len, d), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        return self.norm(self.weight[ids] + self.pos[:T])


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d)

    def forward(self, x, pad):
        B, T, d = x.shape
        H = self.heads
        dk = d // H

        def split(t):
            return t.view(B, T, H, dk).transpose(1, 2)  # [B, H, T, dk]

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        a = (probs @ v).transpose(1, 2).reshape(B, T, d)
        return self.out(a)


class FFN(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff, eps):
        super().__init__()
        self.attn = Attention(d, heads)
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.ffn = FFN(d, ff)
        self.ln2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x, pad):
        h = self.ln1(x + self.attn(x, pad))
        return self.ln2(h + self.ffn(h))


class Classifier(nn.Module):
    def __init__(self, V, d, heads, ff, n_layers, C, pooling, max_len, eps=LN_EPS):
        super().__init__()
        assert pooling in ("max", "mean", "cls"), pooling
        self.pooling = pooling
        self.embed = Embed(V, d, max_len, eps)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, ff, eps) for _ in range(n_layers)])
        self.head = nn.Linear(d, C)

    def forward(self, ids, lengths):
        B, T = ids.shape
        pad = torch.arange(T)[None, :] >= lengths[:, None]  # [B, T] True on pads
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, pad)
        if self.pooling == "max":
            pooled = x.masked_fill(pad[:, :, None], float("-inf")).max(dim=1).values
        elif self.pooling == "mean":
            valid = (~pad).to(x.dtype)[:, :, None]
            pooled = (x * valid).sum(dim=1) / lengths[:, None].to(x.dtype)
        else:  # cls: the first position (where attnctl puts <cls>)
            pooled = x[:, 0]
        return self.head(pooled)


def param_names(n_layers):
    """The parameter order the C model's table uses (state_dict names)."""
    names = ["embed.weight", "embed.norm.weight", "embed.norm.bias"]
    for i in range(n_layers):
        for s in ("attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.out.weight",
                  "attn.out.bias", "ln1.weight", "ln1.bias", "ffn.fc1.weight", "ffn.fc1.bias",
                  "ffn.fc2.weight", "ffn.fc2.bias", "ln2.weight", "ln2.bias"):
            names.append(f"layers.{i}.{s}")
    return names + ["head.weight", "head.bias"]


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, float tensor); stored as F32 little-endian."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, t in tensors:
        values = t.detach().to(torch.float32).reshape(-1).tolist()
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def make_fixture(path, seed, n_layers, d, heads, ff, V, C, pooling, max_len, lengths):
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    model = Classifier(V, d, heads, ff, n_layers, C, pooling, max_len).double()
    names = param_names(n_layers)
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(names), (sorted(params), sorted(names))

    # Weights large enough that every gradient is well above rounding noise;
    # LayerNorm gains and all biases random too, so their gradients are tested
    # away from the trivial initial values. Every value is a float32.
    with torch.no_grad():
        for name in names:
            p = params[name]
            if p.dim() == 2:
                # A smaller head keeps the initial loss near log(C), so the
                # five AdamW steps move it visibly instead of saturating.
                std = 0.05 if name == "head.weight" else 0.3
                w = torch.randn(p.shape, generator=g, dtype=torch.float64) * std
            elif name.endswith(".weight"):  # LayerNorm gain
                w = 1.0 + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64)
            else:
                w = 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_(w.float().double())

    ids = torch.randint(1, V, (B, T), generator=g)
    lens = torch.tensor(lengths)
    for b in range(B):
        ids[b, lengths[b]:] = PAD_ID
    labels = torch.randint(0, C, (B,), generator=g)

    initial = {name: params[name].detach().clone() for name in names}

    logits = model(ids, lens)
    loss = F.cross_entropy(logits, labels)
    model.zero_grad()
    loss.backward()
    grads = {name: params[name].grad.detach().clone() for name in names}

    # Five AdamW steps; decay only on matrices, as the C optimizer does.
    decay = [params[n] for n in names if params[n].dim() == 2]
    no_decay = [params[n] for n in names if params[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        step_loss = F.cross_entropy(model(ids, lens), labels)
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()

    tensors = [("param." + n, initial[n]) for n in names]
    tensors += [("ids", ids.double()), ("lengths", lens.double()), ("labels", labels.double()),
                ("logits", logits), ("loss", loss.reshape(1))]
    tensors += [("grad." + n, grads[n]) for n in names]
    tensors += [("losses_5", torch.tensor(losses, dtype=torch.float64))]
    meta = {"n_layers": n_layers, "d": d, "heads": heads, "ff": ff, "V": V, "C": C,
            "pooling": pooling, "max_len": max_len, "ln_eps": LN_EPS, "seed": seed,
            "adamw": "lr=1e-2 wd=0.01 (matrices only) betas=0.9,0.999 eps=1e-8 no clip",
            "torch": torch.__version__}
    write_safetensors(path, tensors, meta)
    print(f"{path}: loss {loss.item():.6f}, losses_5 {[round(x, 6) for x in losses]}")


def read_safetensors(path):
    """{name: float64 tensor} from an F32 safetensors file, with json + struct only."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = buf[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        tensors[name] = torch.tensor(values, dtype=torch.float64).reshape(info["shape"])
    return tensors


def model_dir_logits(model_dir, id_lists):
    """Logits of an attnctl model directory for sequences of token ids."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        mc = json.load(f)["model"]
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        n_vocab = sum(1 for _ in f)
    if n_vocab != mc["vocab_size"]:
        raise SystemExit(f"{model_dir}/vocab.txt: {n_vocab} tokens, config says {mc['vocab_size']}")
    model = Classifier(mc["vocab_size"], mc["d_model"], mc["n_heads"], mc["d_ff"], mc["n_layers"],
                       mc["n_classes"], mc["pooling"], mc["max_len"], eps=mc["ln_eps"]).double()
    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    expected = set(param_names(mc["n_layers"]))
    if set(weights) != expected:
        raise SystemExit(f"{model_dir}/model.safetensors: tensors differ from the model: "
                         f"missing {sorted(expected - set(weights))}, "
                         f"extra {sorted(set(weights) - expected)}")
    model.load_state_dict(weights, strict=True)
    model.eval()
    T = max(len(ids) for ids in id_lists)
    if T > mc["max_len"]:
        raise SystemExit(f"a sequence of {T} ids is longer than model.max_len {mc['max_len']}")
    ids = torch.full((len(id_lists), T), PAD_ID, dtype=torch.long)
    for b, seq in enumerate(id_lists):
        if not seq or min(seq) < 0 or max(seq) >= mc["vocab_size"]:
            raise SystemExit(f"ids {seq}: empty or outside 0..{mc['vocab_size'] - 1}")
        ids[b, :len(seq)] = torch.tensor(seq)
    lengths = torch.tensor([len(seq) for seq in id_lists])
    with torch.no_grad():
        logits = model(ids, lengths)
    return logits, torch.softmax(logits, dim=-1)


def self_check():
    """The reference model against PyTorch's own post-LN encoder layer
    (nn.TransformerEncoderLayer, norm_first=False, ReLU, key padding mask,
    in-projection bias zero) and a differently written position table, on
    every pooling: the outputs must agree to float64 rounding."""
    g = torch.Generator().manual_seed(4321)
    V, d, H, ff, L, C, T = 30, 16, 4, 24, 2, 3, 9
    lengths = torch.tensor([9, 4, 1, 6])
    B = len(lengths)
    pad = torch.arange(T)[None, :] >= lengths[:, None]
    ids = torch.randint(1, V, (B, T), generator=g).masked_fill(pad, PAD_ID)
    col = torch.arange(0, d, 2, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] / torch.pow(10000.0, col / d)[None, :]
    pos = torch.zeros(T, d, dtype=torch.float64)
    pos[:, 0::2], pos[:, 1::2] = torch.sin(angle), torch.cos(angle)
    worst = 0.0
    for pooling in ("max", "mean", "cls"):
        model = Classifier(V, d, H, ff, L, C, pooling, 12).double()
        with torch.no_grad():
            for name, p in model.named_parameters():
                gain = name.endswith("weight") and p.dim() == 1
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3 + gain)
        x = F.layer_norm(model.embed.weight[ids] + pos.float().double(), (d,),
                         model.embed.norm.weight, model.embed.norm.bias, LN_EPS)
        for layer in model.layers:
            ref = nn.TransformerEncoderLayer(d, H, ff, dropout=0.0, activation="relu",
                                             layer_norm_eps=LN_EPS, batch_first=True,
                                             norm_first=False).double()
            with torch.no_grad():
                ref.self_attn.in_proj_weight.copy_(
                    torch.cat([layer.attn.q.weight, layer.attn.k.weight, layer.attn.v.weight]))
                ref.self_attn.in_proj_bias.zero_()
                ref.self_attn.out_proj.weight.copy_(layer.attn.out.weight)
                ref.self_attn.out_proj.bias.copy_(layer.attn.out.bias)
            ref.linear1.load_state_dict(layer.ffn.fc1.state_dict())
            ref.linear2.load_state_dict(layer.ffn.fc2.state_dict())
            ref.norm1.load_state_dict(layer.ln1.state_dict())
            ref.norm2.load_state_dict(layer.ln2.state_dict())
            ref.train()  # the plain (not fused) path; dropout is 0
            x = ref(x, src_key_padding_mask=pad)
        if pooling == "max":
            pooled = torch.stack([x[b, :lengths[b]].max(dim=0).values for b in range(B)])
        elif pooling == "mean":
            pooled = torch.stack([x[b, :lengths[b]].mean(dim=0) for b in range(B)])
        else:
            pooled = x[:, 0]
        diff = (model.head(pooled) - model(ids, lengths)).abs().max().item()
        print(f"self-check {pooling} pooling: max |logit difference| {diff:.3g}")
        worst = max(worst, diff)
    if worst > 1e-10:
        raise SystemExit("self-check failed: the reference model differs from PyTorch's layers")


def write_fixtures():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out, exist_ok=True)
    make_fixture(os.path.join(out, "ref_l1_d32_max.safetensors"), seed=1234, n_layers=1, d=32,
                 heads=2, ff=128, V=50, C=2, pooling="max", max_len=16,
                 lengths=[12, 7, 3, 10])
    make_fixture(os.path.join(out, "ref_l2_d24_mean.safetensors"), seed=5678, n_layers=2, d=24,
                 heads=3, ff=40, V=40, C=3, pooling="mean", max_len=10,
                 lengths=[10, 4, 1, 8, 6])
    make_fixture(os.path.join(out, "ref_l2_d16_cls.safetensors"), seed=9012, n_layers=2, d=16,
                 heads=4, ff=24, V=30, C=4, pooling="cls", max_len=12,
                 lengths=[9, 3, 11, 1, 6])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="an attnctl model directory to run instead")
    parser.add_argument("--ids", action="append", default=[],
                        help='token ids of one sequence, e.g. "2 57 9" (repeat for a batch)')
    parser.add_argument("--self-check", action="store_true",
                        help="compare the reference model with torch.nn.TransformerEncoderLayer")
    args = parser.parse_args()
    if args.self_check:
        self_check()
        return
    if not args.model_dir:
        if args.ids:
            parser.error("--ids needs --model-dir")
        write_fixtures()
        return
    if not args.ids:
        parser.error("--model-dir needs at least one --ids")
    try:
        id_lists = [[int(tok) for tok in s.replace(",", " ").split()] for s in args.ids]
    except ValueError as e:
        parser.error(f"--ids: {e}")
    logits, probs = model_dir_logits(args.model_dir, id_lists)
    print(json.dumps({"logits": logits.tolist(), "probabilities": probs.tolist()}))


if __name__ == "__main__":
    main()
