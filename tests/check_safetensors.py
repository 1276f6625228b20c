#!/usr/bin/env python3
"""Independent check of a safetensors file written by attnctl, using only the
standard library (json + struct), so it runs without torch or safetensors.

usage: check_safetensors.py FILE [NAME:INDEX=VALUE ...] [shape:NAME=D0xD1...]

Checks the layout the reference library requires (8-byte little-endian header
length, header padded with spaces to a multiple of 8, JSON object, F32 tensors
with contiguous offsets from 0 covering the data section exactly) and then
each NAME:INDEX=VALUE (flat index into tensor NAME, compared within 1e-6
relative) and shape:NAME=AxB. Prints one line and exits 0 on success, 1 on
failure."""
import json
import struct
import sys

DTYPE_BYTES = {"F32": 4}


def fail(msg):
    print("check_safetensors: FAIL: " + msg)
    sys.exit(1)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    path = argv[1]
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        fail("header length %d is not a multiple of 8" % n)
    if 8 + n > len(blob):
        fail("header runs past the end of the file")
    header_text = blob[8:8 + n].decode("utf-8")
    stripped = header_text.rstrip(" ")
    if len(header_text) - len(stripped) >= 8 or stripped != stripped.rstrip():
        fail("header padding is not 0..7 spaces")
    header = json.loads(header_text)
    if not isinstance(header, dict):
        fail("header is not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not all(isinstance(v, str) for v in meta.values()):
        fail("metadata values must be strings")
    data = blob[8 + n:]
    spans = []
    tensors = {}
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            fail("tensor %s has keys %s" % (name, sorted(info)))
        if info["dtype"] != "F32":
            fail("tensor %s has dtype %s" % (name, info["dtype"]))
        begin, end = info["data_offsets"]
        count = 1
        for d in info["shape"]:
            if not isinstance(d, int) or d < 0:
                fail("tensor %s has a bad shape" % name)
            count *= d
        if end - begin != 4 * count:
            fail("tensor %s: shape and offsets disagree" % name)
        spans.append((begin, end, name))
        tensors[name] = (info["shape"], struct.unpack("<%df" % count, data[begin:end]))
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            fail("tensor %s begins at %d, expected %d" % (name, begin, pos))
        pos = end
    if pos != len(data):
        fail("data section is %d bytes, tensors cover %d" % (len(data), pos))
    order = [name for name in header]
    if [s[2] for s in spans] != order:
        fail("offsets are not in header order")
    for arg in argv[2:]:
        key, want = arg.split("=", 1)
        if key.startswith("shape:"):
            name = key[len("shape:"):]
            if name not in tensors:
                fail("missing tensor " + name)
            got = "x".join(str(d) for d in tensors[name][0])
            if got != want:
                fail("tensor %s has shape %s, expected %s" % (name, got, want))
            continue
        name, index = key.rsplit(":", 1)
        if name not in tensors:
            fail("missing tensor " + name)
        got = tensors[name][1][int(index)]
        want_f = float(want)
        if abs(got - want_f) > 1e-6 * max(1.0, abs(want_f)):
            fail("%s[%s] = %r, expected %r" % (name, index, got, want_f))
    print("check_safetensors: OK %d tensors, %d data bytes" % (len(tensors), len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
