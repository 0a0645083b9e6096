"""What the PyTorch-oracle case generators (`gen_loss_cases.py`, `gen_optim_cases.py`,
`gen_module_cases.py`) share: the tensor encoding their tests read (`tests/common/cases.rs`),
random float64 tensors, and the command line that writes a gzipped case file."""
import argparse
import gzip
import json
import math

import torch

# The upstream gradients' generator, seeded by `main`.
GEN = torch.Generator()


def enc(t):
    """`{"dt": "f64" | "i64", "sh": shape, "d": row-major data}`; non-finite floats as the
    strings "nan", "inf", "-inf"."""
    t = t.detach()
    if t.dtype == torch.int64:
        return {"dt": "i64", "sh": list(t.shape), "d": [int(v) for v in t.reshape(-1).tolist()]}
    out = []
    for v in t.double().reshape(-1).tolist():
        if math.isnan(v):
            out.append("nan")
        elif math.isinf(v):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(v)
    return {"dt": "f64", "sh": list(t.shape), "d": out}


def rand(rng, shape, scale=1.0):
    """Normal float64 values of `shape` (standard deviation `scale`) from `rng`."""
    n = math.prod(shape)
    return torch.tensor([rng.gauss(0.0, scale) for _ in range(n)], dtype=torch.float64).reshape(shape)


def main(fmt, make):
    """`--seed S --count N --out FILE`: `make(rng, i)` for i < N, written as `fmt` cases."""
    import random

    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rng = random.Random(a.seed)
    GEN.manual_seed(a.seed)
    torch.manual_seed(a.seed)
    cases = [make(rng, i) for i in range(a.count)]
    doc = {"format": fmt, "torch": torch.__version__, "seed": a.seed, "cases": cases}
    with gzip.open(a.out, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("%d cases (%d to be refused) into %s" % (len(cases), sum("err" in c for c in cases), a.out))
