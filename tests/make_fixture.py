#!/usr/bin/python3
"""Writes the PyTorch reference fixtures that tests/test_fixture.c compares
the C model against (in the spirit of karpathy/llm.c's test_gpt2).

Run by hand where PyTorch is installed (Debian: apt-get install python3-torch):

    /usr/bin/python3 tests/make_fixture.py            # writes tests/fixtures/*.safetensors
    /usr/bin/python3 tests/make_fixture.py --out-dir /tmp/fx   # elsewhere (to cmp with them)

It also reproduces the logits of a model that attnctl trained and saved (a
directory with config.json, model.safetensors and vocab.txt), for token ids
given on the command line (`attnctl inspect --format json` prints a text's ids):

    /usr/bin/python3 tests/make_fixture.py --model-dir models/imdb --ids "2 57 9" [--ids "2 4"]...

prints one JSON object: {"logits": [[...], ...], "probabilities": [[...], ...]}, one row per --ids.

    /usr/bin/python3 tests/make_fixture.py --self-check

checks the reference model itself against PyTorch's nn.TransformerEncoderLayer
(post-LN, ReLU, key padding mask) on every pooling, its input features
(positions, hashed n-grams) against a plain per-position loop, its
label-smoothed loss against F.cross_entropy(label_smoothing=...), and the
masked-LM head (logits at the masked positions only) against the full
[B, T, V] output layer.

The pretraining model (config.json model.objective "masked_lm") is the same
encoder with another head: at the masked positions (flat indices b*T + t)
the final hidden states h give logits = h embed.weight^T + mlm.bias (the
output layer tied to the token embedding), and the loss is the mean
cross-entropy against the original ids of those positions. Its fixture
(ref_mlm_l2_d16.safetensors) holds the corrupted input ids (with <mask> and
replaced words), the positions, the targets, the logits [M, V], the loss,
every gradient and five AdamW steps.

The model below is written from the specification in DESIGN.md, not from the
C code: token embedding + positions (fixed sinusoidal table, a learned
[max_len, d] table `embed.pos.weight`, or none) + hashed n-gram embeddings
(`embed.ngram.weight`, [buckets, d], optional) -> LayerNorm -> N post-LN
encoder layers (masked multi-head attention, ReLU FFN) -> pooling over valid
positions -> Linear(d, C) -> mean cross-entropy, optionally label-smoothed
(training loss only). Outside training the probabilities are
softmax(logits / temperature). LayerNorm eps 1e-6.

Hashed n-grams (model.ngram_order 2: bigrams, 3: bigrams + trigrams): the
n-gram ending at a valid position t is ids[t-n+1..t], ids before the text
counting as 0 (<pad>); its bucket is h mod buckets with h = 0, then
h = h * 116049371 + id for each id in order (uint64, wrapping). The rows of
all n-gram buckets of position t are added at position t; pads get nothing.

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
POSITIONS = ("sinusoidal", "learned", "none")
NGRAM_MULTIPLIER = 116049371
# config.json's model.ngram_hash: the hashing above, as attnctl names it (AC_NGRAM_HASH).
NGRAM_HASH = "h=h*116049371+id (uint64, ids before the text are 0), bucket=h mod ngram_buckets"
# config.json's model.wide_hash (AC_WIDE_HASH).
WIDE_HASH = ("h=n, h=h*116049371+id+1 per id (uint64), fmix64 (MurmurHash3), "
             "distinct h mod wide_buckets")
# The wide path's length normalisation: a sum scaled by
# (WIDE_NORM_REF / max(n, WIDE_NORM_FLOOR))^wide_norm (AC_WIDE_NORM_REF, AC_WIDE_NORM_FLOOR).
WIDE_NORM_REF = 500
WIDE_NORM_FLOOR = 30


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


def ngram_bucket(gram, n_buckets):
    """The bucket of one n-gram (a sequence of ids), by the specification's hash."""
    h = 0
    for i in gram:
        h = (h * NGRAM_MULTIPLIER + int(i)) % (1 << 64)
    return h % n_buckets


def ngram_buckets_of(ids, lengths, order, n_buckets):
    """[B, T, order-1] long: the bucket of the n-gram (n = 2..order) ending at
    each valid position (0 at pads, where nothing is added)."""
    B, T = ids.shape
    out = torch.zeros(B, T, max(order - 1, 0), dtype=torch.long)
    for b in range(B):
        row = [0] * (order - 1) + [int(i) for i in ids[b, :int(lengths[b])]]
        for t in range(int(lengths[b])):
            for n in range(2, order + 1):
                end = t + order - 1  # index of position t in the left-padded row
                out[b, t, n - 2] = ngram_bucket(row[end - n + 1:end + 1], n_buckets)
    return out


def wide_bucket(gram, n_buckets):
    """The wide path's bucket of one n-gram: h = n, h = h * 116049371 + id + 1
    per id (uint64), then MurmurHash3's 64-bit finaliser, mod n_buckets."""
    mask = (1 << 64) - 1
    h = len(gram)
    for i in gram:
        h = (h * NGRAM_MULTIPLIER + int(i) + 1) & mask
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & mask
    h ^= h >> 33
    return h % n_buckets


def wide_sets_of(ids, lengths, order, n_buckets):
    """Per item, the set of buckets of its n-grams (n = 1..order) inside the text."""
    sets = []
    for b in range(ids.shape[0]):
        row = [int(i) for i in ids[b, :int(lengths[b])]]
        sets.append(sorted({wide_bucket(row[t:t + n], n_buckets)
                            for n in range(1, order + 1) for t in range(len(row) - n + 1)}))
    return sets


class Table(nn.Module):
    """A bare trained table (so that its state_dict name ends in .weight)."""

    def __init__(self, rows, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(rows, d))


class Embed(nn.Module):
    def __init__(self, V, d, max_len, eps, positions="sinusoidal", ngram_order=1,
                 ngram_buckets=0):
        super().__init__()
        assert positions in POSITIONS, positions
        self.positions = positions
        self.ngram_order = ngram_order if ngram_order >= 2 and ngram_buckets > 0 else 1
        self.ngram_buckets = ngram_buckets
        self.weight = nn.Parameter(torch.zeros(V, d))
        if positions == "learned":
            self.pos = Table(max_len, d)
        if self.ngram_order >= 2:
            self.ngram = Table(ngram_buckets, d)
        self.norm = nn.LayerNorm(d, eps=eps)
        if positions == "sinusoidal":
            self.register_buffer("pos_table", sinusoid_table(max_len, d), persistent=False)

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.weight[ids]
        if self.positions == "sinusoidal":
            x = x + self.pos_table[:T]
        elif self.positions == "learned":
            x = x + self.pos.weight[:T]
        if self.ngram_order >= 2:
            buckets = ngram_buckets_of(ids, lengths, self.ngram_order, self.ngram_buckets)
            valid = (torch.arange(T)[None, :] < lengths[:, None]).to(x.dtype)[:, :, None]
            for n in range(self.ngram_order - 1):
                x = x + self.ngram.weight[buckets[:, :, n]] * valid
        return self.norm(x)


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
    def __init__(self, V, d, heads, ff, n_layers, C, pooling, max_len, eps=LN_EPS,
                 positions="sinusoidal", ngram_order=1, ngram_buckets=0, wide_order=0,
                 wide_buckets=0, wide_norm=0.0):
        super().__init__()
        assert pooling in ("max", "mean", "cls"), pooling
        self.pooling = pooling
        self.embed = Embed(V, d, max_len, eps, positions, ngram_order, ngram_buckets)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, ff, eps) for _ in range(n_layers)])
        self.head = nn.Linear(d, C)
        self.wide_order = wide_order if wide_order >= 1 and wide_buckets > 0 else 0
        self.wide_buckets = wide_buckets
        self.wide_norm = wide_norm
        if self.wide_order:
            self.head.wide = Table(wide_buckets, C)

    def wide_logits(self, ids, lengths):
        """The wide path: sum over each item's distinct n-gram buckets of
        head.wide.weight[bucket] ([B, C]), times
        (WIDE_NORM_REF / max(n, WIDE_NORM_FLOOR))^wide_norm for an item of n distinct buckets."""
        sets = wide_sets_of(ids, lengths, self.wide_order, self.wide_buckets)
        return torch.stack([self.head.wide.weight[torch.tensor(s, dtype=torch.long)].sum(dim=0)
                            * (WIDE_NORM_REF / max(len(s), WIDE_NORM_FLOOR)) ** self.wide_norm
                            for s in sets])

    def forward(self, ids, lengths):
        deep = self.encoder_logits(ids, lengths)
        if self.wide_order:
            return deep + self.wide_logits(ids, lengths)
        return deep

    def encoder_logits(self, ids, lengths):
        B, T = ids.shape
        pad = torch.arange(T)[None, :] >= lengths[:, None]  # [B, T] True on pads
        x = self.embed(ids, lengths)
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


class MaskedLM(nn.Module):
    """The encoder of Classifier with the tied masked-LM head: no pooling, no
    head.*, a bias mlm.bias [V]; logits only at the given flat positions."""

    def __init__(self, V, d, heads, ff, n_layers, max_len, eps=LN_EPS, positions="sinusoidal",
                 ngram_order=1, ngram_buckets=0):
        super().__init__()
        self.embed = Embed(V, d, max_len, eps, positions, ngram_order, ngram_buckets)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, ff, eps) for _ in range(n_layers)])
        self.mlm = nn.Module()
        self.mlm.bias = nn.Parameter(torch.zeros(V))

    def hidden(self, ids, lengths):
        T = ids.shape[1]
        pad = torch.arange(T)[None, :] >= lengths[:, None]
        x = self.embed(ids, lengths)
        for layer in self.layers:
            x = layer(x, pad)
        return x

    def forward(self, ids, lengths, positions):
        B, T = ids.shape
        h = self.hidden(ids, lengths).reshape(B * T, -1)[positions]
        return h @ self.embed.weight.T + self.mlm.bias


def has_ngrams(ngram_order, ngram_buckets):
    return ngram_order >= 2 and ngram_buckets > 0


def param_names(n_layers, positions="sinusoidal", ngram_order=1, ngram_buckets=0,
                objective="classification", wide_order=0, wide_buckets=0):
    """The parameter order the C model's table uses (state_dict names): the
    learned position table right after embed.weight, the head (head.* or, for
    a masked LM, mlm.bias) after the layers, the n-gram table last."""
    names = ["embed.weight"]
    if positions == "learned":
        names.append("embed.pos.weight")
    names += ["embed.norm.weight", "embed.norm.bias"]
    for i in range(n_layers):
        for s in ("attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.out.weight",
                  "attn.out.bias", "ln1.weight", "ln1.bias", "ffn.fc1.weight", "ffn.fc1.bias",
                  "ffn.fc2.weight", "ffn.fc2.bias", "ln2.weight", "ln2.bias"):
            names.append(f"layers.{i}.{s}")
    names += ["mlm.bias"] if objective == "masked_lm" else ["head.weight", "head.bias"]
    if objective != "masked_lm" and wide_order >= 1 and wide_buckets > 0:
        names.append("head.wide.weight")
    if has_ngrams(ngram_order, ngram_buckets):
        names.append("embed.ngram.weight")
    return names


def train_loss(logits, labels, smoothing=0.0):
    """Mean cross-entropy; with label smoothing s the target is
    (1 - s) onehot(label) + s / C, i.e. per item
    (1 - s) * -log p_label + s * mean_c(-log p_c)."""
    if smoothing == 0.0:
        return F.cross_entropy(logits, labels)
    nll = -torch.log_softmax(logits, dim=-1)
    per_item = ((1.0 - smoothing) * nll.gather(1, labels[:, None])[:, 0]
                + smoothing * nll.mean(dim=1))
    return per_item.mean()


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


def fill_weights(params, names, g, small=()):
    """Random float32 values large enough that every gradient is well above
    rounding noise: matrices normal(0, 0.3) (0.05 for the names in `small`),
    LayerNorm gains 1 + normal(0, 0.2), biases normal(0, 0.1); drawn from g in
    the order of names."""
    with torch.no_grad():
        for name in names:
            p = params[name]
            if p.dim() == 2:
                std = 0.05 if name in small else 0.3
                w = torch.randn(p.shape, generator=g, dtype=torch.float64) * std
            elif name.endswith(".weight"):  # LayerNorm gain
                w = 1.0 + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64)
            else:
                w = 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_(w.float().double())


def gradients_and_steps(params, names, loss_of):
    """The initial values, the loss of loss_of() with every gradient, and the
    losses of five AdamW steps (lr 1e-2, decay 0.01 on matrices only, as the C
    optimizer does; no clipping)."""
    initial = {name: params[name].detach().clone() for name in names}
    for p in params.values():
        p.grad = None
    loss = loss_of()
    loss.backward()
    grads = {name: params[name].grad.detach().clone() for name in names}
    decay = [params[n] for n in names if params[n].dim() == 2]
    no_decay = [params[n] for n in names if params[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        step_loss = loss_of()
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    return initial, loss, grads, losses


def make_fixture(path, seed, n_layers, d, heads, ff, V, C, pooling, max_len, lengths,
                 positions="sinusoidal", ngram_order=1, ngram_buckets=0, label_smoothing=0.0,
                 id_rows=None, wide_order=0, wide_buckets=0, wide_norm=0.0):
    """id_rows: the token ids of each item (drawn at random when None)."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    model = Classifier(V, d, heads, ff, n_layers, C, pooling, max_len, positions=positions,
                       ngram_order=ngram_order, ngram_buckets=ngram_buckets,
                       wide_order=wide_order, wide_buckets=wide_buckets,
                       wide_norm=wide_norm).double()
    names = param_names(n_layers, positions, ngram_order, ngram_buckets,
                        wide_order=wide_order, wide_buckets=wide_buckets)
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(names), (sorted(params), sorted(names))

    # LayerNorm gains and all biases random too, so their gradients are tested
    # away from the trivial initial values. A smaller head keeps the initial
    # loss near log(C), so the five AdamW steps move it visibly instead of
    # saturating.
    fill_weights(params, names, g, small=("head.weight",))

    if id_rows is None:
        ids = torch.randint(1, V, (B, T), generator=g)
    else:
        assert [len(r) for r in id_rows] == list(lengths), (id_rows, lengths)
        ids = torch.full((B, T), PAD_ID, dtype=torch.long)
        for b, r in enumerate(id_rows):
            assert all(1 <= i < V for i in r), r
            ids[b, :len(r)] = torch.tensor(r)
    lens = torch.tensor(lengths)
    for b in range(B):
        ids[b, lengths[b]:] = PAD_ID
    labels = torch.randint(0, C, (B,), generator=g)

    logits = model(ids, lens)
    initial, loss, grads, losses = gradients_and_steps(
        params, names, lambda: train_loss(model(ids, lens), labels, label_smoothing))

    tensors = [("param." + n, initial[n]) for n in names]
    tensors += [("ids", ids.double()), ("lengths", lens.double()), ("labels", labels.double()),
                ("logits", logits), ("loss", loss.reshape(1))]
    tensors += [("grad." + n, grads[n]) for n in names]
    tensors += [("losses_5", torch.tensor(losses, dtype=torch.float64))]
    meta = {"n_layers": n_layers, "d": d, "heads": heads, "ff": ff, "V": V, "C": C,
            "pooling": pooling, "max_len": max_len, "ln_eps": LN_EPS, "seed": seed,
            "adamw": "lr=1e-2 wd=0.01 (matrices only) betas=0.9,0.999 eps=1e-8 no clip",
            "torch": torch.__version__}
    new_features = (positions != "sinusoidal" or has_ngrams(ngram_order, ngram_buckets)
                    or label_smoothing != 0.0)
    if new_features:  # the older fixtures stay byte-identical without these keys
        meta.update({"positions": positions, "ngram_order": ngram_order,
                     "ngram_buckets": ngram_buckets, "label_smoothing": label_smoothing})
        if has_ngrams(ngram_order, ngram_buckets):
            meta["ngram_hash"] = NGRAM_HASH
    if wide_order:
        meta.update({"wide_order": wide_order, "wide_buckets": wide_buckets,
                     "wide_hash": WIDE_HASH})
        if wide_norm:
            meta["wide_norm"] = wide_norm
    write_safetensors(path, tensors, meta)
    print(f"{path}: loss {loss.item():.6f}, losses_5 {[round(x, 6) for x in losses]}")
    if has_ngrams(ngram_order, ngram_buckets):
        buckets = ngram_buckets_of(ids, lens, ngram_order, ngram_buckets)
        grams = {}
        for b in range(B):
            row = [0] * (ngram_order - 1) + ids[b, :lengths[b]].tolist()
            for t in range(lengths[b]):
                for n in range(2, ngram_order + 1):
                    end = t + ngram_order - 1
                    grams.setdefault(tuple(row[end - n + 1:end + 1]), []).append(
                        int(buckets[b, t, n - 2]))
        rows = {}
        for gram, bs in grams.items():
            rows.setdefault(bs[0], set()).add(gram)
        uses = sum(len(bs) for bs in grams.values())
        print(f"  n-grams: {uses} uses of {len(grams)} distinct n-grams "
              f"({sum(len(bs) > 1 for bs in grams.values())} repeated) in {len(rows)} of "
              f"{ngram_buckets} buckets ({sum(len(s) > 1 for s in rows.values())} shared by "
              f"different n-grams)")


def make_mlm_fixture(path, seed, n_layers, d, heads, ff, V, max_len, id_rows, positions_bt,
                     targets, positions="learned", ngram_order=2, ngram_buckets=11):
    """The masked-LM fixture: id_rows are the corrupted inputs (as attnctl's
    masking writes them), positions_bt the (item, position) pairs predicted
    and targets their original ids."""
    g = torch.Generator().manual_seed(seed)
    lengths = [len(r) for r in id_rows]
    B, T = len(id_rows), max(lengths)
    model = MaskedLM(V, d, heads, ff, n_layers, max_len, positions=positions,
                     ngram_order=ngram_order, ngram_buckets=ngram_buckets).double()
    names = param_names(n_layers, positions, ngram_order, ngram_buckets, "masked_lm")
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(names), (sorted(params), sorted(names))
    fill_weights(params, names, g)
    ids = torch.full((B, T), PAD_ID, dtype=torch.long)
    for b, r in enumerate(id_rows):
        ids[b, :len(r)] = torch.tensor(r)
    lens = torch.tensor(lengths)
    flat = torch.tensor([b * T + t for b, t in positions_bt])
    assert all(t < lengths[b] for b, t in positions_bt), "a position on a pad"
    assert flat.tolist() == sorted(set(flat.tolist())), "positions must be ascending and distinct"
    tgt = torch.tensor(targets)
    logits = model(ids, lens, flat)
    initial, loss, grads, losses = gradients_and_steps(
        params, names, lambda: F.cross_entropy(model(ids, lens, flat), tgt))

    tensors = [("param." + n, initial[n]) for n in names]
    tensors += [("ids", ids.double()), ("lengths", lens.double()),
                ("positions", flat.double()), ("targets", tgt.double()),
                ("logits", logits), ("loss", loss.reshape(1))]
    tensors += [("grad." + n, grads[n]) for n in names]
    tensors += [("losses_5", torch.tensor(losses, dtype=torch.float64))]
    meta = {"objective": "masked_lm", "n_layers": n_layers, "d": d, "heads": heads, "ff": ff,
            "V": V, "max_len": max_len, "ln_eps": LN_EPS, "seed": seed,
            "positions": positions, "ngram_order": ngram_order, "ngram_buckets": ngram_buckets,
            "adamw": "lr=1e-2 wd=0.01 (matrices only) betas=0.9,0.999 eps=1e-8 no clip",
            "torch": torch.__version__}
    if has_ngrams(ngram_order, ngram_buckets):
        meta["ngram_hash"] = NGRAM_HASH
    write_safetensors(path, tensors, meta)
    print(f"{path}: {len(targets)} masked positions, loss {loss.item():.6f}, "
          f"losses_5 {[round(x, 6) for x in losses]}")


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
    if mc.get("objective", "classification") != "classification":
        raise SystemExit(f"{model_dir}: a {mc['objective']} (pretrained) model has no classifier "
                         "logits; --model-dir reproduces classifiers (fine-tuned models)")
    # Keys newer than the first attnctl models; absent means what those models did.
    positions = mc.get("positions", "sinusoidal")
    ngram_order = mc.get("ngram_order", 1)
    ngram_buckets = mc.get("ngram_buckets", 0)
    wide_order = mc.get("wide_order", 0)
    wide_buckets = mc.get("wide_buckets", 0)
    wide_norm = mc.get("wide_norm", 0.0)  # absent in models older than the key: the plain sum
    temperature = mc.get("temperature", 1.0)
    if positions not in POSITIONS:
        raise SystemExit(f"{model_dir}/config.json: model.positions {positions!r}: "
                         f"expected one of {', '.join(POSITIONS)}")
    if has_ngrams(ngram_order, ngram_buckets) and mc.get("ngram_hash", NGRAM_HASH) != NGRAM_HASH:
        raise SystemExit(f"{model_dir}/config.json: model.ngram_hash {mc['ngram_hash']!r}: "
                         f"this script knows only {NGRAM_HASH!r}")
    if wide_order and mc.get("wide_hash", WIDE_HASH) != WIDE_HASH:
        raise SystemExit(f"{model_dir}/config.json: model.wide_hash {mc['wide_hash']!r}: "
                         f"this script knows only {WIDE_HASH!r}")
    if not 0 < temperature <= 1000:
        raise SystemExit(f"{model_dir}/config.json: model.temperature {temperature}: "
                         "expected a number in (0, 1000]")
    model = Classifier(mc["vocab_size"], mc["d_model"], mc["n_heads"], mc["d_ff"], mc["n_layers"],
                       mc["n_classes"], mc["pooling"], mc["max_len"], eps=mc["ln_eps"],
                       positions=positions, ngram_order=ngram_order,
                       ngram_buckets=ngram_buckets, wide_order=wide_order,
                       wide_buckets=wide_buckets, wide_norm=wide_norm).double()
    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    expected = set(param_names(mc["n_layers"], positions, ngram_order, ngram_buckets,
                               wide_order=wide_order, wide_buckets=wide_buckets))
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
    return logits, torch.softmax(logits / temperature, dim=-1)


def self_check():
    """The reference model against PyTorch's own post-LN encoder layer
    (nn.TransformerEncoderLayer, norm_first=False, ReLU, key padding mask,
    in-projection bias zero), a differently written position table and a
    plain per-position loop for the n-grams, on every pooling and position
    kind; the label-smoothed loss against F.cross_entropy(label_smoothing=s)
    and its logit gradient against (softmax - target) / B: all must agree to
    float64 rounding."""
    g = torch.Generator().manual_seed(4321)
    V, d, H, ff, L, C, T = 30, 16, 4, 24, 2, 3, 9
    lengths = torch.tensor([9, 4, 1, 6])
    B = len(lengths)
    pad = torch.arange(T)[None, :] >= lengths[:, None]
    ids = torch.randint(1, V, (B, T), generator=g).masked_fill(pad, PAD_ID)
    ids[0, 3:7] = ids[0, 0:4].clone()  # repeated n-grams within an item
    col = torch.arange(0, d, 2, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] / torch.pow(10000.0, col / d)[None, :]
    pos = torch.zeros(T, d, dtype=torch.float64)
    pos[:, 0::2], pos[:, 1::2] = torch.sin(angle), torch.cos(angle)
    labels = torch.randint(0, C, (B,), generator=g)

    # The hash (with ids large enough for the uint64 arithmetic to wrap)
    # against its closed form: sum of id_k * M^(n-1-k), mod 2^64, mod buckets.
    for _ in range(200):
        n = int(torch.randint(2, 4, (1,), generator=g))
        gram = torch.randint(0, 10_000_000, (n,), generator=g).tolist()
        buckets = int(torch.randint(1, 1 << 24, (1,), generator=g))
        closed = sum(i * NGRAM_MULTIPLIER ** (n - 1 - k) for k, i in enumerate(gram))
        if ngram_bucket(gram, buckets) != closed % 2 ** 64 % buckets:
            raise SystemExit(f"self-check failed: hash of {gram} mod {buckets}")

    variants = [("max", "sinusoidal", 1, 0), ("mean", "sinusoidal", 1, 0),
                ("cls", "sinusoidal", 1, 0), ("max", "none", 2, 7), ("mean", "learned", 3, 11),
                ("cls", "learned", 2, 5)]
    worst = 0.0
    for pooling, positions, order, n_buckets in variants:
        model = Classifier(V, d, H, ff, L, C, pooling, 12, positions=positions, ngram_order=order,
                           ngram_buckets=n_buckets).double()
        with torch.no_grad():
            for name, p in model.named_parameters():
                gain = name.endswith("weight") and p.dim() == 1
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3 + gain)
        x = model.embed.weight[ids].clone()
        if positions == "sinusoidal":
            x = x + pos.float().double()
        elif positions == "learned":
            x = x + model.embed.pos.weight[:T]
        for b in range(B):
            for t in range(int(lengths[b])):
                for n in range(2, order + 1):
                    gram = [int(ids[b, k]) if k >= 0 else 0 for k in range(t - n + 1, t + 1)]
                    h = sum(i * NGRAM_MULTIPLIER ** (n - 1 - k) for k, i in enumerate(gram))
                    x[b, t] = x[b, t] + model.embed.ngram.weight[h % 2 ** 64 % n_buckets]
        x = F.layer_norm(x, (d,), model.embed.norm.weight, model.embed.norm.bias, LN_EPS)
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
        logits = model(ids, lengths)
        diff = (model.head(pooled) - logits).abs().max().item()
        what = f"{pooling} pooling, positions {positions}, ngram_order {order}"
        if order >= 2:
            what += f" ({n_buckets} buckets)"
        print(f"self-check {what}: max |logit difference| {diff:.3g}")
        worst = max(worst, diff)

    # Label smoothing: the loss and its gradient with respect to the logits.
    for s in (0.0, 0.1, 0.35):
        z = logits.detach().clone().requires_grad_(True)
        loss = train_loss(z, labels, s)
        loss.backward()
        target = (1.0 - s) * F.one_hot(labels, C).double() + s / C
        grad_diff = (z.grad - (torch.softmax(z, dim=-1) - target) / B).abs().max().item()
        loss_diff = abs(loss.item() - F.cross_entropy(z, labels, label_smoothing=s).item())
        print(f"self-check label smoothing {s}: |loss difference| {loss_diff:.3g}, "
              f"max |logit gradient difference| {grad_diff:.3g}")
        worst = max(worst, loss_diff, grad_diff)
    # The masked-LM head: logits at the masked positions are the rows of the
    # full [B, T, V] tied output layer at those positions.
    mlm = MaskedLM(V, d, H, ff, L, 12, positions="learned", ngram_order=2,
                   ngram_buckets=7).double()
    with torch.no_grad():
        for name, p in mlm.named_parameters():
            gain = name.endswith("weight") and p.dim() == 1
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3 + gain)
    chosen = [(0, 2), (0, 8), (1, 0), (1, 3), (3, 5)]
    flat = torch.tensor([b * T + t for b, t in chosen])
    full = mlm.hidden(ids, lengths) @ mlm.embed.weight.T + mlm.mlm.bias  # [B, T, V]
    expected = torch.stack([full[b, t] for b, t in chosen])
    diff = (mlm(ids, lengths, flat) - expected).abs().max().item()
    print(f"self-check masked-LM head at {len(chosen)} positions: max |logit difference| {diff:.3g}")
    worst = max(worst, diff)
    if worst > 1e-10:
        raise SystemExit("self-check failed: the reference model differs from PyTorch's layers")


def write_fixtures(out):
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
    # Learned positions, bigrams + trigrams hashed into 13 buckets (so that
    # different n-grams share rows, and a bigram and a trigram may too), label
    # smoothing 0.1. The ids repeat n-grams within an item and across items;
    # the length-1 item has only the n-grams (0, id) and (0, 0, id) of the
    # ids before the text; max_len 12 > T leaves rows of embed.pos.weight unused.
    make_fixture(os.path.join(out, "ref_l1_d16_ngram.safetensors"), seed=3456, n_layers=1, d=16,
                 heads=2, ff=32, V=20, C=3, pooling="mean", max_len=12,
                 lengths=[10, 6, 1, 8, 4], positions="learned", ngram_order=3, ngram_buckets=13,
                 label_smoothing=0.1,
                 id_rows=[[2, 5, 7, 9, 5, 7, 9, 5, 7, 3],
                          [2, 7, 9, 5, 11, 4],
                          [14],
                          [2, 13, 13, 13, 6, 5, 7, 1],
                          [18, 17, 16, 19]])
    # The wide path: uni+bi+trigrams in 7 buckets (n-grams share rows, items
    # share n-grams, and item 0 repeats phrases, which count once), on top of
    # bigram embeddings and learned positions, label smoothing 0.1.
    make_fixture(os.path.join(out, "ref_l1_d16_wide.safetensors"), seed=4567, n_layers=1, d=16,
                 heads=2, ff=32, V=20, C=2, pooling="mean", max_len=12,
                 lengths=[10, 6, 1, 8], positions="learned", ngram_order=2, ngram_buckets=11,
                 wide_order=3, wide_buckets=7, label_smoothing=0.1,
                 id_rows=[[2, 5, 7, 9, 5, 7, 9, 5, 7, 3],
                          [2, 7, 9, 5, 11, 4],
                          [14],
                          [2, 13, 13, 13, 6, 5, 7, 1]])
    # The pretraining model: vocabulary <pad> 0, <unk> 1, <mask> 2, words
    # 3..22; learned positions and bigrams in 11 buckets (the bigram of a
    # masked position hashes <mask>, as attnctl's does); inputs corrupted as
    # BERT masking leaves them: <mask> (2), a replaced word, a kept word.
    make_mlm_fixture(os.path.join(out, "ref_mlm_l2_d16.safetensors"), seed=7788, n_layers=2,
                     d=16, heads=2, ff=24, V=23, max_len=10,
                     id_rows=[[3, 2, 5, 6, 2, 8, 9, 21, 4],
                              [12, 2, 14, 15],
                              [3, 20, 19, 2, 2, 7, 1]],
                     positions_bt=[(0, 1), (0, 4), (0, 7), (1, 1), (1, 3), (2, 3), (2, 4),
                                   (2, 5)],
                     targets=[4, 7, 10, 13, 15, 18, 17, 7])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="an attnctl model directory to run instead")
    parser.add_argument("--ids", action="append", default=[],
                        help='token ids of one sequence, e.g. "2 57 9" (repeat for a batch)')
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out-dir", default=os.path.join(here, "fixtures"),
                        help="where the fixtures go (default: tests/fixtures next to this script)")
    parser.add_argument("--self-check", action="store_true",
                        help="compare the reference model with torch.nn.TransformerEncoderLayer")
    args = parser.parse_args()
    if args.self_check:
        self_check()
        return
    if not args.model_dir:
        if args.ids:
            parser.error("--ids needs --model-dir")
        write_fixtures(args.out_dir)
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
