#!/usr/bin/env python3
"""Writes tests/data/repr-cases.json: tensors of every dtype and PyTorch's repr of each.

Run it where PyTorch is installed (the GPU machine: there it also records the CUDA reprs),
from the repository root:

    python3 crates/genesis/tests/gen_repr_cases.py            # writes the fixture
    python3 crates/genesis/tests/gen_repr_cases.py --check    # compares with the committed one

`tests/repr.rs` builds each tensor in Genesis from the recorded dtype, shape and values (and
view) and compares `Display` with the recorded string, on the CPU and, when a GPU is present
and the fixture has CUDA reprs, on CUDA device 0.

Every value is written explicitly (no random generator is shared between the libraries):
floats as Python's `repr` of the float64 value (round-trip exact; "nan", "inf", "-inf"),
integers as decimal strings (exact for int64), bools as JSON booleans. The values of the
float16/bfloat16/float32 tensors are those of the rounded tensor (read back from PyTorch), so
both libraries start from the same bits.

Each case: {"name", "dtype", "shape", "values", "view", "repr", "repr_cuda"}; `view` is null
or "t" (the transpose of the 2-d tensor built from the values: a strided view), "narrow"
(columns 1.. of the last dimension: a view at an offset) or "expand" (a [1, n] row expanded to
[3, n]). `repr_cuda` is null when CUDA was not available.
"""

import argparse
import json
import math
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "repr-cases.json")

DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]


def lcg(seed):
    """A tiny deterministic generator (the values are written out, so any will do)."""
    state = seed & 0xFFFFFFFF
    while True:
        state = (1103515245 * state + 12345) & 0x7FFFFFFF
        yield state


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def float_values(n, seed, scale=1.0, offset=0.0):
    g = lcg(seed)
    return [((next(g) % 20001) / 10000.0 - 1.0) * scale + offset for _ in range(n)]


def int_values(n, seed, lo, hi):
    g = lcg(seed)
    return [lo + next(g) % (hi - lo + 1) for _ in range(n)]


def make(dtype_name, shape, values):
    dtype = DTYPES[dtype_name]
    if dtype_name == "bool":
        return torch.tensor([bool(v) for v in values], dtype=dtype).reshape(shape)
    if dtype_name in INTS:
        return torch.tensor([int(v) for v in values], dtype=dtype).reshape(shape)
    return torch.tensor([float(v) for v in values], dtype=torch.float64).to(dtype).reshape(shape)


def encode(t):
    flat = t.reshape(-1)
    if t.dtype == torch.bool:
        return [bool(v) for v in flat.tolist()]
    if t.dtype.is_floating_point:
        return [repr(float(v)) for v in flat.double().tolist()]
    return [str(int(v)) for v in flat.tolist()]


def apply_view(t, view):
    if view is None:
        return t
    if view == "t":
        return t.t()
    if view == "narrow":
        return t.narrow(-1, 1, t.shape[-1] - 1)
    if view == "expand":
        return t.expand(3, t.shape[-1])
    raise ValueError(view)


def cases():
    out = []

    def add(name, dtype_name, shape, values, view=None):
        t = make(dtype_name, shape, values)
        out.append((name, dtype_name, list(shape), t, view))

    # Every dtype at ranks 0-4, small.
    for dt in DTYPES:
        for rank, shape in enumerate([(), (5,), (2, 3), (2, 3, 2), (2, 1, 2, 3)]):
            n = numel(shape)
            seed = 17 * rank + len(dt)
            if dt == "bool":
                vals = [v % 3 == 0 for v in int_values(n, seed, 0, 5)]
            elif dt == "uint8":
                vals = int_values(n, seed, 0, 255)
            elif dt in INTS:
                info = torch.iinfo(DTYPES[dt])
                vals = int_values(n, seed, max(info.min, -1000), min(info.max, 1000))
            else:
                vals = float_values(n, seed, scale=10.0)
            add(f"{dt}-rank{rank}", dt, shape, vals)

    # Empty tensors of every dtype and a few shapes.
    for dt in DTYPES:
        for shape in [(0,), (0, 3), (2, 0, 4)]:
            add(f"{dt}-empty-{'x'.join(map(str, shape))}", dt, shape, [])

    # Float formatting modes, for every float dtype.
    float_sets = {
        "ints": [1.0, 2.0, -3.0, 100.0],
        "int-zero": [0.0, 0.0],
        "neg-zero": [-0.0, 0.0, 1.0],
        "fixed": [0.1, 0.25, -1.5, 3.14159],
        "fixed-wide": [1234.5678, -0.5, 7.0],
        "sci-small": [1e-5, 1.0, 0.5],
        "sci-ratio": [0.001, 2.0, 3.5],
        "sci-big-int": [1.0, 1e9],
        "sci-big-frac": [1.5, 3e8],
        "int-ratio": [1.0, 1001.0],
        "int-1e8": [99999999.0, 1.0, 50.0],
        "nan-inf": [float("nan"), float("inf"), float("-inf"), 1.0],
        "nan-inf-frac": [float("nan"), 1.5, float("-inf")],
        "nan-inf-sci": [float("nan"), 1e-7, float("inf")],
        "only-nan": [float("nan"), float("nan")],
        "only-inf": [float("inf"), float("-inf")],
        "negative": [-1.0, -2.5, -0.125, -100.0],
        "halves": [0.5, 1.5, 2.5, 3.5, 1.03125, 1.09375],
        "tiny-sci": [1.2345678e-30, -9.87e-20],
        "huge-sci": [1.5e30, -2.5e15],
        "mixed-widths": [1.0, -10.0, 100.0, -1000.0],
    }
    for dt in FLOATS:
        for name, vals in float_sets.items():
            if dt == "float16" and name in ("tiny-sci", "huge-sci"):
                continue
            add(f"{dt}-{name}", dt, (len(vals),), vals)
        add(f"{dt}-scalar-int", dt, (), [21.0])
        add(f"{dt}-scalar-frac", dt, (), [-0.3333333])
        add(f"{dt}-scalar-nan", dt, (), [float("nan")])
        add(f"{dt}-arange", dt, (10,), [i / 10 for i in range(10)])

    # Exact and extreme integers.
    big = [2**62, -(2**62), 2**63 - 1, -(2**63), 0, 1]
    add("int64-extremes", "int64", (len(big),), big)
    add("int64-2pow62", "int64", (), [2**62])
    add("int32-extremes", "int32", (4,), [2**31 - 1, -(2**31), 0, -1])
    add("int16-extremes", "int16", (3,), [32767, -32768, 0])
    add("int8-extremes", "int8", (3,), [127, -128, 0])
    add("uint8-extremes", "uint8", (3,), [255, 0, 1])
    add("bool-all", "bool", (2, 2), [True, False, False, True])
    add("bool-true", "bool", (), [True])

    # Line wrapping: long rows, wide elements, nested indents.
    add("float32-wrap", "float32", (30,), float_values(30, 5))
    add("float32-wrap-2d", "float32", (3, 25), float_values(75, 6, scale=1000.0))
    add("int64-wrap", "int64", (40,), int_values(40, 7, -10**12, 10**12))
    add("float64-wrap-sci", "float64", (2, 2, 15), float_values(60, 8, scale=1e-6))
    add("bool-wrap", "bool", (30,), [v % 2 == 0 for v in int_values(30, 9, 0, 9)])

    # Summarised (more than 1000 elements): 1-d to 4-d, every dtype.
    for dt in DTYPES:
        for shape in [(2000,), (40, 30), (11, 10, 12), (7, 7, 7, 7)]:
            n = numel(shape)
            seed = n + len(dt)
            if dt == "bool":
                vals = [v % 2 == 0 for v in int_values(n, seed, 0, 9)]
            elif dt in INTS:
                info = torch.iinfo(DTYPES[dt])
                vals = int_values(n, seed, max(info.min, -50000), min(info.max, 50000))
            else:
                vals = float_values(n, seed, scale=5.0)
            add(f"{dt}-large-{'x'.join(map(str, shape))}", dt, shape, vals)
    add("int64-arange-2000", "int64", (2000,), list(range(2000)))
    add("float32-large-ints", "float32", (1001,), [float(i) for i in range(1001)])
    add("float32-large-edge-only-nan", "float32", (1500,), [float("nan")] * 3 + [1.0] * 1494 + [1e-9] * 3)
    add("float32-1000", "float32", (1000,), float_values(1000, 11))
    add("float32-1001-tall", "float32", (1001, 1), float_values(1001, 12))

    # Views: transposed, narrowed (an offset), expanded (stride 0).
    add("float32-view-t", "float32", (3, 4), float_values(12, 13), view="t")
    add("int32-view-t", "int32", (2, 5), int_values(10, 14, -99, 99), view="t")
    add("float64-view-narrow", "float64", (3, 4), float_values(12, 15), view="narrow")
    add("float32-view-expand", "float32", (1, 4), [1.0, 2.0, 3.0, 4.0], view="expand")
    add("float32-view-t-large", "float32", (40, 30), float_values(1200, 16), view="t")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare with the committed fixture")
    args = ap.parse_args()
    torch.set_printoptions(profile="default")
    cuda = torch.cuda.is_available()
    result = []
    for name, dt, shape, t, view in cases():
        v = apply_view(t, view)
        case = {
            "name": name,
            "dtype": dt,
            "shape": shape,
            "values": encode(t),
            "view": view,
            "repr": repr(v),
            "repr_cuda": repr(apply_view(t.to("cuda:0"), view)) if cuda else None,
        }
        result.append(case)
    doc = {
        "torch": torch.__version__,
        "cuda": cuda,
        "cases": result,
    }
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        with open(OUT) as f:
            old = json.load(f)
        if old["cases"] != doc["cases"]:
            print("repr-cases.json differs from what PyTorch", torch.__version__, "prints", file=sys.stderr)
            sys.exit(1)
        print(f"{len(result)} cases agree")
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {len(result)} cases to {OUT} (torch {torch.__version__}, cuda {cuda})")


if __name__ == "__main__":
    main()
