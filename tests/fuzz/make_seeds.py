#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into tests/fuzz/corpus/.

Run from the repository root: python3 tests/fuzz/make_seeds.py
It rewrites only the files it names (prefix "gen_"); other seeds in the corpus
directories (library-written model files, inputs kept from fuzzing) stay.
Every seed is small and written by this project: no IMDB text.
"""
import gzip
import json
import os
import struct

ROOT = os.path.join("tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "gen_" + name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------ csv
# First byte: bits 0-1 plain/gzip/cut gzip/plain text (one document a line),
# bit 2 need_label, bits 3-4 options.
PLAIN, GZIP, GZIP_CUT, LINES = 0, 1, 2, 3
NEED_LABEL = 4
CLASSES_NEG_POS, EXPLICIT_COLUMNS, CLASSES_012 = 8, 16, 24

CSVS = {
    "basic": 'review,sentiment\n"A wonderful film, great acting.",positive\nAwful plot.,negative\n',
    "crlf": 'review,sentiment\r\n"Two\r\nlines",positive\r\nbad,negative\r\n',
    "cr_only": "review,sentiment\rgood,positive\rbad,negative\r",
    "bom": "\ufeffreview,sentiment\ngood,positive\nbad,negative\n",
    "quotes": 'review,sentiment\n"He said ""wow"", then left",positive\n"a,b,c",negative\n',
    "empty_fields": 'review,sentiment\n,positive\n"",negative\n   ,positive\nok,negative\n',
    "utf8": "review,sentiment\nCaf\u00e9 na\u00efve \u00e9t\u00e9 \u2014 \u6620\u753b \u0444\u0438\u043b\u044c\u043c,positive\n"
            "\u00c5ngstr\u00f6m \ufb01ne \uff21\uff22,negative\n",
    "invalid_utf8": b"review,sentiment\n\xff\xfe bad \xc3(,positive\nok\x00nul,negative\n",
    "numeric": "text,label\nfine,1\nbad,0\nmeh,2\nok,10\n",
    "extra_columns": "id,review,sentiment,extra\n1,good,positive,x\n2,bad,negative,y\n",
    "no_final_newline": "review,sentiment\ngood,positive\nbad,negative",
    "html": 'review,sentiment\n"Great<br /><br />film &amp; cast",positive\n<i>meh</i>,negative\n',
    "unterminated": 'review,sentiment\n"never closed,positive\n',
    "stray_quote": 'review,sentiment\nab"c,positive\n',
    "after_quote": 'review,sentiment\n"abc"d,positive\n',
    "short_row": "review,sentiment\nonly one field\n",
    "long_row": "review,sentiment\na,positive,extra\n",
    "blank_lines": "\n\n  \nreview,sentiment\n\ngood,positive\n\nbad,negative\n\n",
    "spaces_labels": "review , Sentiment\ngood,  positive \nbad,negative\t\n",
    "header_only": "review,sentiment\n",
    "sentence_polarity": "polarity,sentence\n1,good\n0,bad\n",
    "tsv": 'id\ttext\tlabel\r\n1\ta "stray quote\tpositive\r\n  \r\n2\t"Lead" quote\tnegative\r\n3\t\tnegative',
    "tsv_rows": "text\tlabel\nfine\tpositive\nsplit\ttext\tnegative\nshort\n",
    "tsv_quoted": '"text"\t"label"\n"He said ""hi"""\t"positive"\n""\t"negative"\n"a"\t"negative"\n',
    "semicolon": '"text";label\n"one; two, three";positive\nplain, text;negative\n',
}


def csv_seeds():
    for name, text in CSVS.items():
        raw = text.encode("utf-8") if isinstance(text, str) else text
        put("csv", name + ".plain", bytes([PLAIN]) + raw)
        put("csv", name + ".need_label", bytes([PLAIN | NEED_LABEL]) + raw)
    for name in ("basic", "crlf", "numeric", "utf8"):
        raw = CSVS[name].encode("utf-8")
        put("csv", name + ".gzip", bytes([GZIP | NEED_LABEL]) + raw)
        put("csv", name + ".gzip_cut", bytes([GZIP_CUT | (3 << 5)]) + raw)
    raw = CSVS["basic"].encode("utf-8")
    put("csv", "basic.classes", bytes([PLAIN | NEED_LABEL | CLASSES_NEG_POS]) + raw)
    put("csv", "numeric.classes", bytes([PLAIN | NEED_LABEL | CLASSES_012]) + CSVS["numeric"].encode())
    put("csv", "numeric.columns", bytes([PLAIN | EXPLICIT_COLUMNS]) + CSVS["numeric"].encode())
    # a gzip stream handed over as it is: the reader recognises it by content
    put("csv", "raw_gzip", bytes([PLAIN]) + gzip.compress(raw, mtime=0))
    put("csv", "raw_gzip_cut", bytes([PLAIN]) + gzip.compress(raw, mtime=0)[:-10])
    put("csv", "two_gzip_members",
        bytes([PLAIN]) + gzip.compress(raw, mtime=0) + gzip.compress(b"more,positive\n", mtime=0))
    # plain text for pretraining: one document a line
    for name in ("basic", "crlf", "cr_only", "blank_lines", "invalid_utf8", "no_final_newline"):
        text = CSVS[name]
        put("csv", name + ".lines",
            bytes([LINES]) + (text.encode("utf-8") if isinstance(text, str) else text))
    put("csv", "lines_gzip", bytes([LINES]) + gzip.compress(b"one doc\ntwo doc\r\n", mtime=0))


# ------------------------------------------------------------ tokenizer
# First byte: bit 0 nfkc, 1 casefold, 2 strip_html, 3 split_hyphens, 4 split_apostrophes,
# 5 emoji_names.
DEFAULT_TOK = 0b100111

TEXTS = {
    "html": "Great<br /><br />film. <i>Alien</i>'s <b>best</b>! <!-- c --> <a href=\"x\">link</a>",
    "entities": "Tom &amp; Jerry &lt;3 &quot;hi&quot; &#233;t&#xE9; &#0; &#x110000; &nbsp;&hellip;&bogus; &#;",
    "apostrophes": "don't won\u2019t rock'n'roll 'quoted' it's well-made -dash- x-",
    "unicode": "\ufb01ne \uff21\uff22\uff23 \u212a \u00c5 A\u030a \u1100\u1161\u11a8 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u6620\u753b",
    "marks": "e\u0301 \u0301start n\u0303o\u0308 \u200b\u00ad\u200dzwj \ufeffbom",
    "spaces": "a\tb\nc\rd\x0be\x0cf\u00a0g\u2003h\u2028i\u3000j",
    "invalid": b"ok \xff\xfe \xc3( \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf end\x00nul",
    "emoji": "I \u2764\ufe0f it \U0001f600\U0001f44d\U0001f3fd 10/10 $5.99 3.5 #1",
    "case": "\u00dfTRASSE \u0130stanbul \u03a3\u039f\u03a6\u039f\u03a3 \u1e9e",
    "long_word": "x" * 300 + " <" + "a" * 300 + ">",
    "tags_unclosed": "<br <i <div>text</div> a < b > c <3 </",
}


def tokenizer_seeds():
    for name, text in TEXTS.items():
        raw = text.encode("utf-8") if isinstance(text, str) else text
        put("tokenizer", name, bytes([DEFAULT_TOK]) + raw)
        put("tokenizer", name + ".split_all", bytes([0b111111]) + raw)
        put("tokenizer", name + ".raw", bytes([0]) + raw)


# -------------------------------------------------------------- predict
# Byte 0: bits 0-1 model, bits 2-7 tokenizer flags; byte 1: truncation, head_tokens,
# bit 7 squeeze_elongations.
def predict_seeds():
    lines = [
        "A wonderful film, great acting and a moving story!",
        "Terrible plot; awful acting. I want my money back.\r",
        "",
        "   \t",
        "caf\u00e9 na\u00efve \u00e9t\u00e9 \u2014 \u6620\u753b \u0444\u0438\u043b\u044c\u043c <br /> don't",
        " ".join(["good"] * 40),
        "Loved it \U0001f60d\U0001f44d\U0001f3fd broke in a day \U0001f44e",
        "Sooooo goooood!!! Baaaad. 1000 \u00e9\u00e9\u00e9 " + "o" * 300,
    ]
    body = "\n".join(lines).encode("utf-8")
    tok = 0b100111 << 2
    for model in range(4):
        for trunc in range(3):
            put("predict", "lines.m%d.t%d" % (model, trunc),
                bytes([model | tok, trunc | (4 << 2) | (model & 1) << 7]) + body)
    put("predict", "one_line_no_newline", bytes([0 | tok, 2]) + b"the the the of of")
    put("predict", "invalid_utf8", bytes([1 | tok, 0]) + b"\xff\xfe\x00 good \xc3(\r\n\r\n")
    put("predict", "many_short_lines", bytes([2 | tok, 1]) + b"\n".join([b"a", b"good", b"!"] * 6))


# --------------------------------------------------------------- config
def config_seeds():
    put("config", "preset_minimal.json", '{"model": {"d_model": 8, "n_heads": 2}}')
    put("config", "preset_labels.json", '{"labels": ["neg", "neu", "pos"], "model": {"pooling": "cls"}}')
    put("config", "preset_big_seed.json", '{"training": {"seed": "18446744073709551615"}}')
    put("config", "preset_floats.json",
        '{"model": {"dropout": 0.99999999, "ln_eps": 1e-12}, "training": {"lr": 1e-30,'
        ' "warmup_frac": 1, "val_split": 0.5, "min_lr_ratio": 0.3}}')
    put("config", "preset_bad_types.json", '{"model": {"d_model": "8", "n_heads": 2.5, "n_layers": -1}}')
    put("config", "duplicate.json", '{"model": {"d_model": 8, "d_model": 16}}')
    put("config", "not_object.json", '[1, 2, 3]')
    put("config", "trailing.json", '{} x')
    put("config", "unicode_label.json",
        '{"labels": ["n\\u00e9gatif", "\\ud83d\\ude00", "tab\\there"], "provenance": {"train_file": "caf\u00e9.csv"}}')
    put("config", "provenance.json",
        '{"provenance": {"attnctl_version": "0.1.0", "train_file": "x.csv", "train_sha256": "' + "ab" * 32 +
        '", "rows_used": 9007199254740992, "date": "2024-01-01T00:00:00Z", "best_val_accuracy": 0.5}}')
    put("config", "trainer_state.json", json.dumps({
        "step": 120, "epoch": 1, "batch_in_epoch": 7, "seed": "18446744073709551615",
        "best_metric": 0.75, "best_step": 100, "bad_evals": 1, "train_loss_sum": 12.5,
        "train_loss_count": 20}, indent=2))
    put("config", "trainer_state_null.json", json.dumps({
        "step": 0, "epoch": 0, "batch_in_epoch": 0, "seed": "1", "best_metric": None,
        "best_step": -1, "bad_evals": 0, "train_loss_sum": 0, "train_loss_count": 0}))


# ---------------------------------------------------------------- vocab
def vocab_seeds():
    words = ["the", "a", "good", "bad", "caf\u00e9", "\u6620\u753b", "don't", "!", ","]
    put("vocab", "plain.txt", "\n".join(["<pad>", "<unk>"] + words) + "\n")
    put("vocab", "with_cls.txt", "\n".join(["<pad>", "<unk>", "<cls>"] + words) + "\n")
    put("vocab", "crlf.txt", "\r\n".join(["<pad>", "<unk>"] + words) + "\r\n")
    put("vocab", "no_final_newline.txt", "\n".join(["<pad>", "<unk>", "x"]))
    put("vocab", "minimal.txt", "<pad>\n<unk>\n")
    put("vocab", "bom.txt", "\ufeff<pad>\n<unk>\n")
    put("vocab", "duplicate.txt", "<pad>\n<unk>\nx\ny\nx\n")
    put("vocab", "empty_line.txt", "<pad>\n<unk>\n\nx\n")
    put("vocab", "cls_late.txt", "<pad>\n<unk>\nx\n<cls>\n")
    put("vocab", "invalid_utf8.txt", b"<pad>\n<unk>\n\xff\n")
    put("vocab", "nul.txt", b"<pad>\n<unk>\na\x00b\n")
    put("vocab", "lone_cr.txt", b"<pad>\n<unk>\na\rb\n")


# ---------------------------------------------------------- safetensors
def safetensors_file(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, float("nan"))
    put("safetensors", "empty_header", safetensors_file({}))
    put("safetensors", "metadata_only", safetensors_file({"__metadata__": {"format": "pt"}}))
    put("safetensors", "one_f32", safetensors_file(
        {"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32))
    put("safetensors", "scalar_and_empty", safetensors_file(
        {"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
         "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]}}, f32[:4]))
    put("safetensors", "dtypes", safetensors_file(
        {"b": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]},
         "h": {"dtype": "F16", "shape": [1], "data_offsets": [1, 3]},
         "q": {"dtype": "BF16", "shape": [1], "data_offsets": [3, 5]},
         "d": {"dtype": "F64", "shape": [1], "data_offsets": [5, 13]},
         "f4": {"dtype": "F4", "shape": [2], "data_offsets": [13, 14]},
         "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [14, 17]}}, bytes(17)))
    put("safetensors", "overlap", safetensors_file(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
    put("safetensors", "gap", safetensors_file(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)))
    put("safetensors", "trailing_bytes", safetensors_file(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(8)))
    put("safetensors", "misaligned", safetensors_file(
        {"u": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
         "a": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}}, bytes(5)))
    put("safetensors", "huge_shape", safetensors_file(
        {"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}}, bytes(4)))
    put("safetensors", "unknown_key", safetensors_file(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, bytes(4)))
    put("safetensors", "header_too_long", struct.pack("<Q", 1 << 40) + b"{}")
    put("safetensors", "short", b"\x02\x00\x00")
    put("safetensors", "unpadded", safetensors_file(
        {"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}, bytes(4), pad=False))


if __name__ == "__main__":
    csv_seeds()
    tokenizer_seeds()
    predict_seeds()
    config_seeds()
    vocab_seeds()
    safetensors_seeds()
