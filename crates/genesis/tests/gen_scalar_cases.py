"""Writes tests/data/scalar-cases.json.gz: PyTorch's answers for ops between a tensor and a
Python number (a wrapped number), the oracle of tests/scalar_rules.rs.

    python3 crates/genesis/tests/gen_scalar_cases.py crates/genesis/tests/data/scalar-cases.json.gz

Every op is run on the CPU and, when CUDA is present, on the GPU; a case records PyTorch's
result dtype and values, or that it raised. Where the two devices disagree (never expected
but for pow's last bit), the case keeps both. The cases cover every dtype Genesis has, Python
bools, ints (in and out of each dtype's range, up to int64's limits) and floats (fractions
that no narrow float holds exactly, values past float16's range, infinities, NaN, -0.0),
with tensors of fixed and seeded random values.

The Rust side passes a Python int as `i64`, a float as `f64` and a bool as `bool`.
"""
import gzip
import json
import math
import sys

import torch

DTYPES = {
    "bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16,
    "i32": torch.int32, "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16,
    "f32": torch.float32, "f64": torch.float64,
}
NAME = {v: k for k, v in DTYPES.items()}

INTS = [0, 1, -1, 3, 7, 100, 127, 128, 255, 256, 300, -129, -300, 40000, 70000, 2**31 - 1, 2**31,
        -(2**31) - 1, 2**40 + 5, 2**53 + 3, 2**62 + 1, 2**63 - 2, -(2**63)]
FLOATS = [0.5, 0.1, -0.0, 1.5, -2.75, 0.3, 1e5, 1e-5, 3.0e38, 1e40, 65504.0, 65520.0, 2.0**60,
          1e300, float("inf"), float("-inf"), float("nan"), 1.0 / 3.0, 7.0]
BOOLS = [True, False]

# (name, fn(tensor, scalar) -> tensor or None for in-place ops that mutate the tensor)
OPS = {
    "add": lambda t, s: t + s,
    "sub": lambda t, s: t - s,
    "mul": lambda t, s: t * s,
    "div": lambda t, s: t / s,
    "rsub": lambda t, s: s - t,
    "radd": lambda t, s: s + t,
    "rmul": lambda t, s: s * t,
    "rdiv": lambda t, s: s / t,
    "pow": lambda t, s: t ** s,
    "eq": lambda t, s: t == s,
    "ne": lambda t, s: t != s,
    "lt": lambda t, s: t < s,
    "le": lambda t, s: t <= s,
    "gt": lambda t, s: t > s,
    "ge": lambda t, s: t >= s,
    # Genesis's `maximum`/`minimum` with a number are PyTorch's `clamp_min`/`clamp_max` (torch's
    # own `maximum` takes tensors only).
    "maximum": lambda t, s: torch.clamp_min(t, s),
    "minimum": lambda t, s: torch.clamp_max(t, s),
    "clamp_min": lambda t, s: torch.clamp_min(t, s),
    "clamp_max": lambda t, s: torch.clamp_max(t, s),
    "where_a": lambda t, s: torch.where(MASK.to(t.device), t, s),
    "where_b": lambda t, s: torch.where(MASK.to(t.device), s, t),
    "masked_fill": lambda t, s: t.masked_fill(MASK.to(t.device), s),
    "full_like": lambda t, s: torch.full_like(t, s),
    "add_": lambda t, s: t.add_(s),
    "sub_": lambda t, s: t.sub_(s),
    "mul_": lambda t, s: t.mul_(s),
    "div_": lambda t, s: t.div_(s),
    "fill_": lambda t, s: t.fill_(s),
    "masked_fill_": lambda t, s: t.masked_fill_(MASK.to(t.device), s),
}

N = 8
MASK = torch.tensor([True, False, True, True, False, False, True, False])


def values(name, seed):
    """The tensor's values: a fixed row, then seeded random ones."""
    g = torch.Generator().manual_seed(seed)
    if name == "bool":
        return torch.rand(N, generator=g) < 0.5
    dt = DTYPES[name]
    if dt.is_floating_point:
        fixed = [144.0, -2.5, 0.1, 1000.0, -0.0, 3.0, 0.0, 1.0]
        rand = (torch.randn(N, generator=g, dtype=torch.float64) * 100).tolist()
        v = fixed if seed == 0 else rand
        return torch.tensor(v, dtype=torch.float64).to(dt)
    info = torch.iinfo(dt)
    if seed == 0:
        fixed = [1, 2, 250, 0, 127, 3, 100, 7] if name == "u8" else [1, 2, -3, 0, 127, -128, 100, 7]
        return torch.tensor(fixed, dtype=dt)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi + 1, (N,), generator=g, dtype=torch.int64).to(dt)


def encode(t):
    t = t.cpu()
    if t.dtype == torch.bool:
        return [bool(x) for x in t.tolist()]
    if not t.dtype.is_floating_point:
        return [int(x) for x in t.tolist()]
    out = []
    for x in t.double().tolist():
        if math.isnan(x):
            out.append("nan")
        elif math.isinf(x):
            out.append("inf" if x > 0 else "-inf")
        else:
            out.append(x)
    return out


def scalar_json(s):
    if isinstance(s, bool):
        return {"bool": s}
    if isinstance(s, int):
        return {"int": s}
    if math.isnan(s):
        return {"float": "nan"}
    if math.isinf(s):
        return {"float": "inf" if s > 0 else "-inf"}
    return {"float": s}


def run(op, name, seed, s, device):
    t = values(name, seed).to(device)
    try:
        r = OPS[op](t, s)
    except Exception as e:  # PyTorch raised: the case expects an error
        return {"error": type(e).__name__ + ": " + str(e).splitlines()[0][:160]}
    if r is None:
        r = t
    return {"dtype": NAME[r.dtype], "values": encode(r)}


def same(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def main():
    path = sys.argv[1]
    cuda = torch.cuda.is_available()
    cases, disagree = [], 0
    for op in OPS:
        for name in DTYPES:
            for seed in (0, 1):
                for s in BOOLS + INTS + FLOATS:
                    cpu = run(op, name, seed, s, "cpu")
                    case = {"op": op, "dtype": name, "input": encode(values(name, seed)),
                            "scalar": scalar_json(s), "expected": cpu}
                    if cuda:
                        gpu = run(op, name, seed, s, "cuda")
                        if not same(cpu, gpu):
                            case["expected_cuda"] = gpu
                            disagree += 1
                    cases.append(case)
    doc = {"torch": torch.__version__, "cuda": cuda, "cases": cases}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"{len(cases)} cases, {disagree} where CUDA and CPU differ, torch {torch.__version__}")


if __name__ == "__main__":
    main()
