"""Random facade cases with PyTorch as the oracle, for `tests/torch_ops.rs`: the ops the NumPy
cases of `gen_facade_cases.py` do not reach (index_put with and without accumulation, where
with scalar branches, masked_fill with
each kind of Python scalar, logical_and, logical_or, logical_xor, logical_not,
arange, linspace, logspace, eye, sort, argsort, topk, cumsum, cumprod, var, std,
prod, logsumexp, softmax, log_softmax, median, all, any, count_nonzero, nansum, nanmean,
vector_norm, clamp, lerp, addcmul, addcdiv, gather, scatter, scatter_add, index_select, cross,
outer, diff, isclose, bincount). Needs PyTorch (the CPU build will do); only to regenerate:

    python3 gen_torch_cases.py --seed 31 --count 5800 --out data/torch-cases.json.gz
    python3 gen_torch_cases.py --seed 1031 --count 1700 --out data/torch-heldout.json.gz
    python3 gen_torch_cases.py --more --seed 37 --count 5200 --out data/torch-more-cases.json.gz
    python3 gen_torch_cases.py --more --seed 4037 --count 1740 --out data/torch-more-heldout.json.gz

(`--more`: cross_entropy, layer_norm and rms_norm in every float dtype, masked_select with
broadcast masks, unique_consecutive, repeat_interleave, mm, mv, dot, trace, addmm, baddbmm,
einsum, kron, take_along_dim, index_add, index_copy, index_fill, floor_divide, div with
rounding_mode="trunc", remainder, fmod, bitwise_and/or/xor, atan2, hypot, movedim, unbind, hstack, vstack,
dstack, rot90, tensordot, aminmax, var_mean, std_mean, logaddexp, equal, clamp_, F.pad,
F.normalize, F.cosine_similarity, searchsorted, bucketize, triu_indices, tril_indices.)

The second set is held out (another seed), not looked at while fixing failures of the first.

Left out, as PyTorch's answer there depends on its version or device: `clamp` of uint8 with a
negative bound (recent versions refuse it, older ones wrap it), `median` and `topk` of bool
(not implemented on the CPU, implemented on CUDA), `median` of no elements (NaN in recent
versions, an error in older ones), `softmax` of integers with no elements, and `isclose` of
integers (older versions subtract in the integer type); and `arange`, `linspace` and
`logspace` into uint8 from a negative start, or into an integer dtype past its range (PyTorch
wraps such values or refuses them, depending on the op; Genesis refuses them); `pow` of two
bools (refused by recent PyTorch, a result in the NumPy corpus);
`mm`, `mv` and `dot` of bools with an empty operand (PyTorch refuses products of bools but
returns these unchecked; Genesis refuses them); `addmm` and `baddbmm` of integers with
fractional `beta` or `alpha` (PyTorch truncates them
or refuses them depending on the path it takes; Genesis truncates); `addmm` with a zero
`alpha` of matrices holding NaN or infinities (PyTorch drops the product unread in f32 and
f64, as Genesis does, and multiplies it in f16 and bf16); `take_along_dim` with out-of-range
indices (PyTorch's CPU gives a result without checking them; Genesis refuses them).
The format is `gen_facade_cases.py`'s (`genesis-facade-cases v1`); an error PyTorch raises is
`"err": "*"` (any typed error: Genesis must refuse, whatever it calls the refusal). Floats are
written as Python's shortest round-trip form of their f64 value (exact in their dtype).
The oracle is PyTorch on the CPU; where PyTorch's CUDA refuses what its CPU computes (the
products `mm`, `mv`, `dot`, `addmm` and `baddbmm` of the integer dtypes: cuBLAS has no
integer products), the case carries `"cuda_err"`, the error Genesis gives on a CUDA device instead.
"""
import argparse
import gzip
import json
import math
import random

import torch

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


def name(dt):
    return str(dt).split(".")[-1]


def fmt(v):
    # gen_facade_cases.py's `fmt_float` without NumPy (which that module imports): an f64's
    # shortest round-trip digits are exact in every float dtype the value came from.
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0.0:
        return "-0.0" if math.copysign(1.0, v) < 0 else 0
    if v == int(v) and abs(v) < 2.0**53:
        return int(v)
    return repr(v)


def enc(t):
    t = t.detach().cpu().contiguous()
    flat = t.reshape(-1).tolist()
    if t.dtype.is_floating_point:
        d = [fmt(v) for v in flat]
    elif t.dtype == torch.bool:
        d = [int(v) for v in flat]
    else:
        d = [int(v) for v in flat]
    return {"dt": name(t.dtype), "sh": list(t.shape), "d": d}


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.g = torch.Generator().manual_seed(seed)

    def shape(self, max_rank=3, max_numel=40, zero=0.08, min_rank=0):
        r = self.r
        rank = r.randint(min_rank, max_rank)
        while True:
            s = [r.choice([1, 2, 2, 3, 3, 4, 5]) for _ in range(rank)]
            if s and r.random() < zero:
                s[r.randrange(rank)] = 0
            if math.prod(s) <= max_numel:
                return s

    def data(self, shape, dt, special=0.1, distinct=False):
        n = math.prod(shape)
        r = self.r
        if dt == torch.bool:
            return torch.tensor([r.random() < 0.5 for _ in range(n)], dtype=dt).reshape(shape)
        if dt in INTS:
            lo, hi = {torch.uint8: (0, 9), torch.int8: (-9, 9), torch.int16: (-50, 50),
                      torch.int32: (-50, 50), torch.int64: (-50, 50)}[dt]
            if distinct:
                # Distinct values (topk's order of ties is unspecified): a wider range where
                # the dtype's usual one is too narrow.
                lo, hi = {torch.uint8: (0, 255), torch.int8: (-128, 127)}.get(dt, (lo, hi))
                if hi - lo + 1 < n:
                    lo, hi = -n, n
                vals = r.sample(range(lo, hi + 1), n)
            else:
                vals = [r.randint(lo, hi) for _ in range(n)]
            return torch.tensor(vals, dtype=torch.int64).to(dt).reshape(shape)
        if distinct:
            vals = [(i - n / 2) * 0.37 + r.random() * 0.1 for i in range(n)]
            r.shuffle(vals)
        else:
            vals = [round(r.gauss(0, 2), r.choice([0, 1, 3])) for _ in range(n)]
        for i in range(n):
            if r.random() < special:
                vals[i] = r.choice([float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
        t = torch.tensor(vals, dtype=torch.float64).to(dt).reshape(shape)
        if distinct and t.numel() and len(set(t.reshape(-1).tolist())) < t.numel():
            # Rounded to a narrow dtype, two values met: integers are distinct in every dtype.
            t = torch.randperm(n, generator=self.g).to(torch.float64).sub(n / 2).to(dt).reshape(shape)
        return t

    def dims(self, rank, allow_none=True):
        r = self.r
        if allow_none and r.random() < 0.25:
            return None
        if rank == 0:
            return [] if r.random() < 0.5 else [r.choice([0, -1])]
        k = r.randint(1, rank)
        d = r.sample(range(rank), k)
        return [x - rank if r.random() < 0.3 else x for x in d]

    def dim(self, rank):
        if rank == 0:
            return self.r.choice([0, -1])
        d = self.r.randrange(rank)
        return d - rank if self.r.random() < 0.3 else d


def outcome(fn):
    try:
        out = fn()
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        return {"err": "*", "why": str(e).split("\n")[0][:160]}
    if isinstance(out, (tuple, list)):
        return {"out": [enc(o) for o in out]}
    return {"out": enc(out)}


def tol_for(dt, loose=False):
    # Within a few ulp of the result's dtype (sums of a few dozen terms in f32 or better).
    eps = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23,
           torch.float64: 2.0**-52}.get(dt)
    if eps is None:
        return None
    k = 64 if loose else 8
    return [k * eps, k * eps]


def finish(c, loose=False, product=False):
    """Adds the float tolerance of the case's result dtype (none for exact results); `product`:
    the case runs an integer matrix product, which CUDA refuses (`CUDA_REFUSED_PRODUCTS`)."""
    if "out" in c and c["out"] != []:
        out = c["out"][0] if isinstance(c["out"], list) else c["out"]
        t = tol_for(getattr(torch, out["dt"]), loose)
        if t:
            c["tol"] = t
        if (product or c["op"] in CUDA_REFUSED_PRODUCTS) and out["dt"] in ("uint8", "int8", "int16", "int32", "int64"):
            c["cuda_err"] = "Storage.UnsupportedDType"
    return c


# Integer products PyTorch computes on the CPU and refuses on CUDA ("addmm_cuda" not
# implemented for integer dtypes), as Genesis does; `inner` of two tensors with dimensions and
# `matrix_power` with n >= 2 run such a product too (`finish(.., product=True)`).
CUDA_REFUSED_PRODUCTS = ("mm", "mv", "dot", "addmm", "baddbmm")


def case_reduce(G, op):
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape()
    x = G.data(sh, dt)
    keep = r.random() < 0.3
    args = {"keepdim": keep}
    if op in ("var", "std"):
        corr = r.choice([0, 1, 1, 2])
        dims = G.dims(len(sh))
        args.update({"dims": dims, "correction": corr})
        f = getattr(torch, op)
        fn = (lambda: f(x, correction=corr)) if dims is None else (lambda: f(x, dim=dims, correction=corr, keepdim=keep))
    elif op == "prod":
        d = None if r.random() < 0.3 else G.dim(len(sh))
        args["dim"] = d
        fn = (lambda: torch.prod(x)) if d is None else (lambda: torch.prod(x, d, keepdim=keep))
    elif op == "logsumexp":
        dims = G.dims(len(sh), allow_none=False)
        args["dims"] = dims
        fn = lambda: torch.logsumexp(x, dims, keepdim=keep)
    elif op in ("all", "any"):
        dims = G.dims(len(sh))
        args["dims"] = dims
        f = getattr(torch, op)
        fn = (lambda: f(x)) if dims is None else (lambda: f(x, dim=tuple(dims), keepdim=keep))
    elif op == "count_nonzero":
        dims = G.dims(len(sh), allow_none=False)
        args["dims"] = dims
        fn = lambda: torch.count_nonzero(x, dim=tuple(dims))
    elif op in ("nansum", "nanmean"):
        dims = G.dims(len(sh), allow_none=False)
        args["dims"] = dims
        f = getattr(torch, op)
        fn = lambda: f(x, dim=tuple(dims) if dims else None, keepdim=keep)
    elif op == "vector_norm":
        ordv = r.choice([2, 1, 0, 3, 0.5, float("inf"), float("-inf")])
        dims = G.dims(len(sh), allow_none=False)
        args.update({"dims": dims, "ord": fmt(ordv)})
        fn = lambda: torch.linalg.vector_norm(x, ordv, dim=tuple(dims) if dims else None, keepdim=keep)
    elif op == "median":
        if dt == torch.bool or x.numel() == 0:
            return None
        fn = lambda: torch.median(x)
    else:
        raise ValueError(op)
    c = {"op": op, "in": [enc(x)], "args": args}
    c.update(outcome(fn))
    return finish(c, op in ("var", "std", "logsumexp", "vector_norm", "nanmean", "prod"))


def case_along(G, op):
    """An op along one dimension: the scans, softmax and log_softmax."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape()
    x = G.data(sh, dt)
    d = G.dim(len(sh))
    if op in ("softmax", "log_softmax") and not dt.is_floating_point and x.numel() == 0:
        return None
    f = getattr(torch, op)
    c = {"op": op, "in": [enc(x)], "args": {"dim": d}}
    c.update(outcome(lambda: f(x, d)))
    return finish(c, True)


def case_sort(G, op):
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape()
    distinct = op == "topk"
    if op == "topk" and dt == torch.bool:
        return None
    x = G.data(sh, dt, special=0.0 if distinct else 0.1, distinct=distinct)
    if distinct and dt.is_floating_point and x.numel() and r.random() < 0.3:
        # One NaN (PyTorch's topk takes NaN as the largest value).
        x.view(-1)[r.randrange(x.numel())] = float("nan")
    d = G.dim(len(sh))
    desc = r.random() < 0.5
    if op == "sort":
        c = {"op": op, "in": [enc(x)], "args": {"dim": d, "descending": desc}}
        c.update(outcome(lambda: torch.sort(x, dim=d, descending=desc, stable=True)))
    elif op == "argsort":
        c = {"op": op, "in": [enc(x)], "args": {"dim": d, "descending": desc}}
        c.update(outcome(lambda: torch.argsort(x, dim=d, descending=desc, stable=True)))
    else:
        size = x.shape[d] if x.dim() else 1
        k = r.randint(0, size + (1 if r.random() < 0.1 else 0))
        c = {"op": op, "in": [enc(x)], "args": {"k": k, "dim": d, "largest": desc, "sorted": True}}
        c.update(outcome(lambda: torch.topk(x, k, dim=d, largest=desc, sorted=True)))
    return c


def case_elementwise(G, op):
    r = G.r
    sh = G.shape()
    if op == "clamp":
        dt = r.choice(ALL)
        x = G.data(sh, dt)
        lo = r.choice([None, -1, -2.5, 0, 3])
        hi = r.choice([None, 1, 2.5, 0, -3])
        if lo is None and hi is None:
            lo = 0
        if dt == torch.uint8 and any(isinstance(v, int) and v < 0 for v in (lo, hi)):
            return None
        args = {"min": None if lo is None else fmt(lo), "max": None if hi is None else fmt(hi)}
        c = {"op": op, "in": [enc(x)], "args": args}
        c.update(outcome(lambda: torch.clamp(x, lo, hi)))
    elif op == "lerp":
        dt = r.choice(FLOATS + [torch.float32])
        x, y = G.data(sh, dt), G.data(sh, dt)
        w = r.choice([0.0, 0.25, 0.5, 0.75, 1.0, -0.5, 2.0])
        c = {"op": op, "in": [enc(x), enc(y)], "args": {"weight": fmt(w)}}
        c.update(outcome(lambda: torch.lerp(x, y, w)))
    else:  # addcmul, addcdiv
        dts = [r.choice(ALL) for _ in range(3)]
        x, a, b = (G.data(sh, dt) for dt in dts)
        v = r.choice([1, 0.5, -2, 3])
        c = {"op": op, "in": [enc(x), enc(a), enc(b)], "args": {"value": fmt(v)}}
        f = getattr(torch, op)
        c.update(outcome(lambda: f(x, a, b, value=v)))
    return finish(c)


def case_index(G, op):
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape(min_rank=1)
    x = G.data(sh, dt, special=0.05)
    d = G.dim(len(sh))
    size = x.shape[d]
    bad = r.random() < 0.08
    if op == "index_select":
        n = r.randint(0, 5)
        hi = size + 2 if bad else size
        idx = torch.tensor([r.randrange(-2 if bad else 0, hi) if hi > 0 else 0 for _ in range(n)], dtype=torch.int64)
        c = {"op": op, "in": [enc(x), enc(idx)], "args": {"dim": d}}
        c.update(outcome(lambda: torch.index_select(x, d, idx)))
        return c
    ish = list(sh)
    ish[d] = r.randint(0, max(size, 1) + 1) if op == "gather" else r.randint(0, size)
    ish = [min(s, r.randint(0, s)) if i != (d % len(sh)) and r.random() < 0.3 else s for i, s in enumerate(ish)]
    hi = size + 2 if bad else size
    n = math.prod(ish)
    vals = [r.randrange(-1 if bad else 0, hi) if hi > 0 else 0 for _ in range(n)]
    if op == "scatter" and not bad:
        # Distinct targets along dim (PyTorch leaves duplicates unspecified).
        pass
    idx = torch.tensor(vals, dtype=torch.int64).reshape(ish)
    if op == "gather":
        c = {"op": op, "in": [enc(x), enc(idx)], "args": {"dim": d}}
        c.update(outcome(lambda: torch.gather(x, d, idx)))
        return c
    src = G.data(ish, dt, special=0.0)
    if op == "scatter":
        # Make each scattered-to position unique so the result is defined.
        flat_unique = True
        seen = set()
        for pos in range(n):
            coord = list(torch.unravel_index(torch.tensor(pos), ish)) if n else []
            key = tuple(int(c_) for i_, c_ in enumerate(coord) if i_ != (d % len(sh))) + (vals[pos],)
            if key in seen:
                flat_unique = False
            seen.add(key)
        if not flat_unique and not bad:
            return None
    f = getattr(torch, op)
    c = {"op": op, "in": [enc(x), enc(idx), enc(src)], "args": {"dim": d}}
    c.update(outcome(lambda: f(x, d, idx, src)))
    return finish(c) if op == "scatter_add" else c


def case_misc(G, op):
    r = G.r
    if op == "cross":
        dt = r.choice(ALL)
        sh = G.shape(min_rank=1, max_rank=3)
        d = G.dim(len(sh))
        sh[d] = 3 if r.random() < 0.9 else r.choice([2, 4])
        sh2 = [1 if (i != d % len(sh) and r.random() < 0.2) else n_ for i, n_ in enumerate(sh)]
        x, y = G.data(sh, dt, special=0.0), G.data(sh2, dt, special=0.0)
        c = {"op": op, "in": [enc(x), enc(y)], "args": {"dim": d}}
        c.update(outcome(lambda: torch.linalg.cross(x, y, dim=d)))
    elif op == "outer":
        dt1, dt2 = r.choice(ALL), r.choice(ALL)
        x, y = G.data([r.randint(0, 5)], dt1), G.data([r.randint(0, 5)], dt2)
        c = {"op": op, "in": [enc(x), enc(y)], "args": {}}
        c.update(outcome(lambda: torch.outer(x, y)))
    elif op == "diff":
        dt = r.choice(ALL)
        sh = G.shape(min_rank=1)
        d = G.dim(len(sh))
        n = r.randint(0, 3)
        x = G.data(sh, dt)
        extra = {}
        for k in ("prepend", "append"):
            if r.random() < 0.3:
                esh = list(sh)
                esh[d] = r.randint(0, 2)
                extra[k] = G.data(esh, r.choice([dt, dt, r.choice(ALL)]))
        ins = [enc(x)] + [enc(extra[k]) for k in ("prepend", "append") if k in extra]
        c = {"op": op, "in": ins, "args": {"n": n, "dim": d, "prepend": "prepend" in extra, "append": "append" in extra}}
        c.update(outcome(lambda: torch.diff(x, n=n, dim=d, prepend=extra.get("prepend"), append=extra.get("append"))))
    elif op == "isclose":
        dt = r.choice(FLOATS)
        sh = G.shape()
        x = G.data(sh, dt)
        y = x.clone()
        if y.numel():
            y2 = G.data(sh, dt)
            m = torch.tensor([r.random() < 0.5 for _ in range(y.numel())]).reshape(sh)
            y = torch.where(m, y2, y)
        rtol, atol = r.choice([(1e-5, 1e-8), (0.1, 0.0), (0.0, 1.0), (0.5, 0.5)])
        en = r.random() < 0.5
        c = {"op": op, "in": [enc(x), enc(y)], "args": {"rtol": fmt(rtol), "atol": fmt(atol), "equal_nan": en}}
        c.update(outcome(lambda: torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=en)))
    elif op == "bincount":
        dt = r.choice(INTS + [torch.bool])
        x = G.data([r.randint(0, 8)], dt)
        if dt in INTS and r.random() < 0.7:
            x = x.abs()
        ml = r.choice([0, 0, 3, 12])
        c = {"op": op, "in": [enc(x)], "args": {"minlength": ml}}
        c.update(outcome(lambda: torch.bincount(x, minlength=ml)))
    elif op == "meshgrid":
        k = r.randint(1, 3)
        dts = [r.choice(ALL)] * k if r.random() < 0.8 else [r.choice(ALL) for _ in range(k)]
        ts = [G.data([r.randint(0, 3)] if r.random() < 0.9 else [], dt) for dt in dts]
        ix = r.choice(["ij", "xy"])
        c = {"op": op, "in": [enc(t) for t in ts], "args": {"indexing": ix}}
        c.update(outcome(lambda: torch.meshgrid(*ts, indexing=ix)))
        return c
    elif op == "lerp_tensor":
        dt = r.choice(FLOATS)
        sh = G.shape()
        w = G.data([x if r.random() < 0.7 else 1 for x in sh], dt, special=0.0)
        x, y = G.data(sh, dt), G.data(sh, dt)
        c = {"op": op, "in": [enc(x), enc(y), enc(w)], "args": {}}
        c.update(outcome(lambda: torch.lerp(x, y, w)))
    elif op == "softplus":
        dt = r.choice(FLOATS)
        x = G.data(G.shape(), dt)
        beta, th = r.choice([1.0, 2.0, 0.5]), r.choice([20.0, 1.0, 5.0])
        c = {"op": op, "in": [enc(x)], "args": {"beta": fmt(beta), "threshold": fmt(th)}}
        c.update(outcome(lambda: torch.nn.functional.softplus(x, beta, th)))
        return finish(c, True)
    else:
        raise ValueError(op)
    return finish(c)


def arith_scalar_case(op, x, v, f):
    """`f(x, v)` for a Python number `v`, as the `arith_scalar` case of `op`."""
    enc_v = v if isinstance(v, bool) else (v if isinstance(v, int) else fmt(v))
    c = {"op": "arith_scalar", "in": [enc(x)], "args": {"op": op, "scalar": enc_v,
                                                       "kind": type(v).__name__}}
    c.update(outcome(lambda: f(x, v)))
    return c


def case_arith(G, op):
    """Arithmetic with PyTorch's promotion: n-d and 0-d tensors, and Python scalars."""
    r = G.r
    x = G.data(G.shape(min_rank=1) if r.random() < 0.8 else [], r.choice(ALL))
    kind = r.choice(["tensor", "zero_d", "scalar"])
    f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
         "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow}[op]
    if kind == "scalar":
        if op in ("maximum", "minimum"):
            return None
        v = r.choice([2, -3, 0, 1, 0.5, -1.25, True, False, 3.0])
        if op == "pow" and isinstance(v, int) and not isinstance(v, bool) and v < 0:
            v = 2
        if op == "pow" and x.dtype == torch.bool and isinstance(v, bool):
            return None
        c = arith_scalar_case(op, x, v, f)
    else:
        ysh = [] if kind == "zero_d" else list(x.shape)[r.randint(0, x.dim()):]
        y = G.data(ysh, r.choice(ALL))
        if op == "pow" and x.dtype == torch.bool and y.dtype == torch.bool:
            return None
        c = {"op": "arith", "in": [enc(x), enc(y)], "args": {"op": op}}
        c.update(outcome(lambda: f(x, y)))
    return finish(c, op in ("pow", "div"))


def py_scalar(r):
    """A Python scalar of each kind, and its JSON form and kind name."""
    v = r.choice([2, -3, 0, 1, 300, 0.5, -1.25, 3.0, True, False, float("nan"), float("inf")])
    kind = type(v).__name__
    return v, (v if kind in ("bool", "int") else fmt(v)), kind


def case_select(G, op):
    """where with scalar branches and masked_fill: PyTorch's promotion and conversion."""
    r = G.r
    sh = G.shape()
    x = G.data(sh, r.choice(ALL))
    m = G.data([n if r.random() < 0.8 else 1 for n in sh], torch.bool)
    v, ev, kind = py_scalar(r)
    if op == "masked_fill":
        c = {"op": op, "in": [enc(x), enc(m)], "args": {"value": ev, "kind": kind}}
        c.update(outcome(lambda: x.masked_fill(m, v)))
    else:
        left = r.random() < 0.5
        w, ew, wkind = py_scalar(r) if r.random() < 0.3 else (None, None, None)
        if w is not None:
            c = {"op": op, "in": [enc(m)], "args": {"a": ev, "akind": kind, "b": ew, "bkind": wkind}}
            c.update(outcome(lambda: torch.where(m, v, w)))
        else:
            args = {"scalar": ev, "kind": kind, "left": left}
            c = {"op": op, "in": [enc(m), enc(x)], "args": args}
            c.update(outcome(lambda: torch.where(m, v, x) if left else torch.where(m, x, v)))
    return c


def case_index_put(G, op):
    """index_put with k index tensors (negative, repeated, out of range), values broadcast."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape(min_rank=1, zero=0.0)
    x = G.data(sh, dt, special=0.0)
    k = r.randint(1, len(sh))
    n = r.randint(0, 5)
    acc = r.random() < 0.5
    bad = r.random() < 0.08
    idx = []
    for d in range(k):
        lo, hi = -sh[d], sh[d] - 1
        if bad and d == 0:
            hi += 2
        idx.append(torch.tensor([r.randint(lo, hi) for _ in range(n)], dtype=torch.int64))
    if not acc and not bad:
        # Distinct positions (which write lands is unspecified for repeats without accumulate).
        keys = [tuple(int(t[i]) % sh[d] for d, t in enumerate(idx)) for i in range(n)]
        if len(set(keys)) < n:
            return None
    vsh = r.choice([[n] + sh[k:], [1] + sh[k:], sh[k:], []])
    vals = G.data(vsh, dt, special=0.0)
    c = {"op": op, "in": [enc(x)] + [enc(t) for t in idx] + [enc(vals)],
         "args": {"k": k, "accumulate": acc}}
    c.update(outcome(lambda: torch.index_put(x, tuple(idx), vals, accumulate=acc)))
    return finish(c) if acc else c


def case_logical(G, op):
    r = G.r
    sh = G.shape()
    x = G.data(sh, r.choice(ALL))
    if op == "logical_not":
        c = {"op": op, "in": [enc(x)], "args": {}}
        c.update(outcome(lambda: torch.logical_not(x)))
        return c
    sh2 = [1 if r.random() < 0.2 else n for n in sh][r.randint(0, len(sh)):]
    y = G.data(sh2, r.choice(ALL))
    f = getattr(torch, op)
    c = {"op": op, "in": [enc(x), enc(y)], "args": {}}
    c.update(outcome(lambda: f(x, y)))
    return c


def case_create(G, op):
    r = G.r
    dt = r.choice(FLOATS + INTS)
    if op == "arange":
        start = r.choice([0, 1, -3, 0.5, -2.25, 10])
        end = r.choice([5, 0, -1, 7.5, 3, 100])
        step = r.choice([1, 2, -1, 0.5, -0.75, 3, 0.1])
        args = {"start": fmt(start), "end": fmt(end), "step": fmt(step), "dtype": name(dt)}
        fn = lambda: torch.arange(start, end, step, dtype=dt)
    elif op in ("linspace", "logspace"):
        start = r.choice([0, 1, -3, 0.5, -2.25, 10])
        end = r.choice([5, 0, -1, 7.5, 3, 100])
        steps = r.choice([0, 1, 2, 3, 4, 7, 10])
        args = {"start": fmt(start), "end": fmt(end), "steps": steps, "dtype": name(dt)}
        if op == "linspace":
            fn = lambda: torch.linspace(start, end, steps, dtype=dt)
        else:
            if abs(start) > 3 or abs(end) > 3:
                return None
            base = r.choice([10.0, 2.0, 0.5])
            args["base"] = fmt(base)
            fn = lambda: torch.logspace(start, end, steps, base, dtype=dt)
    else:  # eye
        n = r.randint(0, 4)
        m = r.choice([None, 0, 1, 3, 5])
        args = {"n": n, "m": m, "dtype": name(dt)}
        fn = (lambda: torch.eye(n, dtype=dt)) if m is None else (lambda: torch.eye(n, m, dtype=dt))
    if dt == torch.uint8 and op != "eye" and min(start, end) < 0:
        return None
    c = {"op": op, "in": [], "args": args}
    c.update(outcome(fn))
    if op == "logspace" and "out" in c and not dt.is_floating_point:
        # Values past an integer dtype's range: PyTorch wraps them (a C cast), Genesis refuses.
        exps = torch.linspace(float(int(start)), float(int(end)), steps, dtype=torch.float64)
        info = torch.iinfo(dt)
        if any(not (info.min <= base ** float(e) <= info.max) for e in exps):
            return None
    return finish(c)


def case_sdpa(G, op):
    r = G.r
    dt = r.choice([torch.float32, torch.float64, torch.float32, torch.float16, torch.bfloat16])
    lead = [r.choice([1, 2, 3]) for _ in range(r.choice([0, 1, 2]))]
    L, S, E, Ev = r.randint(1, 6), r.randint(1, 6), r.choice([1, 4, 8]), r.choice([1, 4, 8])
    if r.random() < 0.5:
        Ev = E
    def lead_of():
        # Sometimes a size-1 leading dimension, broadcast against the others.
        return [1 if (x > 1 and r.random() < 0.15) else x for x in lead]
    q = G.data(lead_of() + [L, E], dt, special=0.0)
    k = G.data(lead_of() + [S, E], dt, special=0.0)
    v = G.data(lead_of() + [S, Ev], dt, special=0.0)
    causal = r.random() < 0.5
    scale = r.choice([None, None, 0.5, 1.0])
    c = {"op": op, "in": [enc(q), enc(k), enc(v)], "args": {"causal": causal, "scale": None if scale is None else fmt(scale)}}
    c.update(outcome(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)))
    return finish(c, True)

def case_nn(G, op):
    """cross_entropy, layer_norm and rms_norm in every float dtype (half precision computed in
    float32 and rounded, as PyTorch's CPU kernels), edge sizes included."""
    r = G.r
    dt = r.choice(FLOATS)
    if op == "cross_entropy":
        n, k = r.choice([0, 1, 2, 3, 5]), r.choice([1, 2, 3, 5, 7])
        x = G.data([n, k], dt, special=0.03)
        t = [r.randrange(k) if r.random() > 0.15 else -100 for _ in range(n)]
        if r.random() < 0.05 and n:
            t[r.randrange(n)] = r.choice([k, -1])  # out of range: an error
        t = torch.tensor(t, dtype=torch.int64)
        red = r.choice(["mean", "sum", "none"])
        c = {"op": op, "in": [enc(x), enc(t)], "args": {"reduction": red}}
        c.update(outcome(lambda: torch.nn.functional.cross_entropy(x, t, ignore_index=-100, reduction=red)))
        return finish(c, True)
    sh = G.shape(min_rank=1)
    x = G.data(sh, dt, special=0.03)
    k = r.randint(1, len(sh))
    ns = sh[len(sh) - k:]
    w = G.data(ns, dt, special=0.0) if r.random() < 0.7 else None
    eps = r.choice([1e-5, 1e-6, 0.1])
    if op == "layer_norm":
        b = G.data(ns, dt, special=0.0) if r.random() < 0.7 else None
        ins = [enc(x)] + [enc(t) for t in (w, b) if t is not None]
        c = {"op": op, "in": ins, "args": {"shape": ns, "weight": w is not None, "bias": b is not None, "eps": fmt(eps)}}
        c.update(outcome(lambda: torch.nn.functional.layer_norm(x, ns, w, b, eps)))
    else:
        ins = [enc(x)] + ([enc(w)] if w is not None else [])
        c = {"op": op, "in": ins, "args": {"shape": ns, "weight": w is not None, "eps": fmt(eps)}}
        c.update(outcome(lambda: torch.nn.functional.rms_norm(x, ns, w, eps)))
    return finish(c, True)


def case_pick(G, op):
    """masked_select (broadcast masks) and unique_consecutive (inverse and counts)."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape()
    x = G.data(sh, dt, special=0.05)
    if op == "masked_select":
        msh = [1 if r.random() < 0.25 else s for s in sh]
        if r.random() < 0.2 and msh:
            msh = msh[r.randint(1, len(msh)):]
        m = G.data(msh, torch.bool)
        c = {"op": op, "in": [enc(x), enc(m)], "args": {}}
        c.update(outcome(lambda: torch.masked_select(x, m)))
    else:
        inv, counts = r.random() < 0.7, r.random() < 0.7
        c = {"op": op, "in": [enc(x)], "args": {"inverse": inv, "counts": counts}}
        c.update(outcome(lambda: torch.unique_consecutive(x, return_inverse=inv, return_counts=counts)))
    return c


FAMILIES = {
    "index_put": (case_index_put, ["index_put"]),
    "select": (case_select, ["where_scalar", "masked_fill"]),
    "arith": (case_arith, ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]),
    "logical": (case_logical, ["logical_and", "logical_or", "logical_xor", "logical_not"]),
    "sdpa": (case_sdpa, ["sdpa"]),
    "create": (case_create, ["arange", "linspace", "logspace", "eye"]),
    "reduce": (case_reduce, ["var", "std", "prod", "logsumexp", "all", "any", "count_nonzero",
                             "nansum", "nanmean", "vector_norm", "median"]),
    "scan": (case_along, ["cumsum", "cumprod"]),
    "softmax": (case_along, ["softmax", "log_softmax"]),
    "sort": (case_sort, ["sort", "argsort", "topk"]),
    "elementwise": (case_elementwise, ["clamp", "lerp", "addcmul", "addcdiv"]),
    "index": (case_index, ["index_select", "gather", "scatter", "scatter_add"]),
    "misc": (case_misc, ["cross", "outer", "diff", "isclose", "bincount", "meshgrid",
                         "lerp_tensor", "softplus"]),
}


def case_interleave(G, op):
    """repeat_interleave with an integer or a tensor of counts, along a dimension or flat."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape()
    x = G.data(sh, dt, special=0.05)
    dim = None if r.random() < 0.3 else r.randint(-max(len(sh), 1), max(len(sh), 1) - 1)
    if r.random() < 0.5:
        reps = r.choice([0, 1, 2, 3])
        c = {"op": op, "in": [enc(x)], "args": {"repeats": reps, "dim": dim}}
        c.update(outcome(lambda: torch.repeat_interleave(x, reps, dim=dim)))
        return c
    size = (x.numel() if dim is None else (x.shape[dim] if x.dim() else 1))
    n = size if r.random() < 0.8 else r.choice([1, size + 1])
    counts = [r.randint(0, 3) for _ in range(n)]
    if counts and r.random() < 0.05:
        counts[r.randrange(n)] = -1
    t = torch.tensor(counts, dtype=r.choice([torch.int64, torch.int64, torch.int32]))
    if n == 1 and r.random() < 0.5:
        t = t.reshape([])
    c = {"op": op, "in": [enc(x), enc(t)], "args": {"dim": dim}}
    c.update(outcome(lambda: torch.repeat_interleave(x, t, dim=dim)))
    return c


def case_linalg(G, op):
    """mm, mv, dot, trace, addmm and baddbmm: their ranks, mismatched sizes and dtypes, every
    dtype (addmm and baddbmm: floats and integers, with beta 0 and fractional scales)."""
    r = G.r
    dt = r.choice(ALL)
    n, k, m = r.randint(0, 4), r.randint(0, 4), r.randint(0, 4)
    odd = r.random() < 0.1
    if op in ("addmm", "baddbmm"):
        dt = r.choice(FLOATS + INTS)
        b = [r.randint(0, 3)] if op == "baddbmm" else []
        full = b + [n, m]
        ish = [x if r.random() < 0.7 else 1 for x in full][r.randint(0, len(full)):]
        if odd:
            ish = ish + [m + 1] if ish else [m + 1]
        x = G.data(ish, dt if r.random() < 0.95 else r.choice(FLOATS), special=0.02)
        m1, m2 = G.data(b + [n, k], dt, special=0.02), G.data(b + [k, m], dt, special=0.02)
        beta, alpha = r.choice([1, 0, 0.5, -2, 2.5]), r.choice([1, 0, 0.5, -2, 3])
        if dt in INTS and (beta != int(beta) or alpha != int(alpha)):
            # PyTorch truncates fractional scales of integer tensors or refuses them, by path.
            return None
        if op == "addmm" and alpha == 0 and dt.is_floating_point and not (m1.isfinite().all() and m2.isfinite().all()):
            # A zero alpha drops the product unread on PyTorch's BLAS path (f32, f64) but
            # multiplies its NaNs in on the others (f16, bf16): left out.
            return None
        f = getattr(torch, op)
        c = {"op": op, "in": [enc(x), enc(m1), enc(m2)], "args": {"beta": fmt(beta), "alpha": fmt(alpha)}}
        c.update(outcome(lambda: f(x, m1, m2, beta=beta, alpha=alpha)))
        return finish(c, True)
    if op == "trace":
        sh = [n, m] if r.random() < 0.9 else r.choice([[n], [n, m, k]])
        x = G.data(sh, dt, special=0.02)
        c = {"op": op, "in": [enc(x)], "args": {}}
        c.update(outcome(lambda: torch.trace(x)))
        return finish(c, True)
    sa, sb = {"mm": ([n, k], [k, m]), "mv": ([n, k], [k]), "dot": ([k], [k])}[op]
    if odd:
        sb = list(sb)
        sb[0] += 1
    dt2 = dt if r.random() < 0.9 else r.choice(ALL)
    x, y = G.data(sa, dt, special=0.02), G.data(sb, dt2, special=0.02)
    if torch.bool in (dt, dt2) and (x.numel() == 0 or y.numel() == 0):
        # PyTorch refuses products of bools but returns the empty or all-false result of
        # one with no elements unchecked; Genesis refuses them all.
        return None
    f = getattr(torch, op)
    c = {"op": op, "in": [enc(x), enc(y)], "args": {}}
    c.update(outcome(lambda: f(x, y)))
    return finish(c, True)


def case_einsum(G, op):
    """einsum: one to three operands, shared, repeated (diagonal) and summed letters, capitals,
    an ellipsis, explicit and implicit outputs, size-1 dimensions that broadcast, and bad
    equations. Several operands in float dtypes only (PyTorch's integer promotion in einsum
    depends on how it pairs the operands); one operand in every dtype."""
    r = G.r
    k = r.choice([1, 1, 2, 2, 2, 3])
    dt = r.choice(ALL) if k == 1 else r.choice(FLOATS)
    pool = r.sample("abcdijkAB", r.randint(2, 5))
    size = {c: r.choice([1, 2, 3, 4, 0] if r.random() < 0.1 else [1, 2, 3, 4]) for c in pool}
    ell = r.random() < 0.15
    ell_shape = [r.choice([1, 2, 3]) for _ in range(r.randint(0, 2))]
    terms, ops = [], []
    for _ in range(k):
        rank = r.randint(0, 3)
        letters = [r.choice(pool) for _ in range(rank)]
        shape = [size[c] for c in letters]
        term = "".join(letters)
        if ell and r.random() < 0.7:
            at = r.randint(0, len(letters))
            e = ell_shape[len(ell_shape) - r.randint(0, len(ell_shape)):]
            term = term[:at] + "..." + term[at:]
            shape = shape[:at] + e + shape[at:]
        shape = [1 if (x > 1 and r.random() < 0.08) else x for x in shape]
        terms.append(term)
        ops.append(G.data(shape, dt, special=0.02))
    eq = ",".join(terms)
    if r.random() < 0.7:
        used = sorted(set(c for t in terms for c in t if c.isalpha()))
        out = r.sample(used, r.randint(0, len(used)))
        if r.random() < 0.05 and out:
            out.append(out[0])  # repeated: an error
        o = "".join(out)
        if ell and r.random() < 0.7:
            o = "..." + o
        eq += "->" + o
    if r.random() < 0.03:
        eq = eq.replace(",", ",,", 1) if k > 1 else eq + "1"  # malformed
    c = {"op": op, "in": [enc(t) for t in ops], "args": {"equation": eq}}
    c.update(outcome(lambda: torch.einsum(eq, *ops)))
    return finish(c, True)


def case_combine(G, op):
    """kron (ranks and dtypes mixed: PyTorch's promotion) and take_along_dim (broadcast
    shapes, flat, mismatched ranks; indices in range: PyTorch's CPU does not check them here,
    Genesis refuses them)."""
    r = G.r
    if op == "kron":
        dts = [r.choice(ALL), r.choice(ALL)] if r.random() < 0.3 else [r.choice(ALL)] * 2
        x = G.data(G.shape(max_numel=12), dts[0], special=0.03)
        y = G.data(G.shape(max_numel=12), dts[1], special=0.03)
        c = {"op": op, "in": [enc(x), enc(y)], "args": {}}
        c.update(outcome(lambda: torch.kron(x, y)))
        return finish(c, True)
    dt = r.choice(ALL)
    sh = G.shape(min_rank=0)
    x = G.data(sh, dt, special=0.03)
    if r.random() < 0.25:
        n = x.numel()
        if n == 0:
            return None
        idx = torch.tensor([r.randrange(n) for _ in range(r.randint(0, 4))], dtype=torch.int64)
        c = {"op": op, "in": [enc(x), enc(idx)], "args": {"dim": None}}
        c.update(outcome(lambda: torch.take_along_dim(x, idx)))
        return c
    d = G.dim(len(sh))
    ish = [1 if r.random() < 0.3 else s_ for s_ in sh]
    if sh:
        dd = d % len(sh)
        ish[dd] = r.randint(0, 4)
        size = sh[dd]
    else:
        size = 1
    if r.random() < 0.05 and ish:
        ish = ish + [1]
    n = math.prod(ish)
    if size == 0 and n:
        return None
    idx = torch.tensor([r.randrange(size) for _ in range(n)], dtype=torch.int64).reshape(ish)
    c = {"op": op, "in": [enc(x), enc(idx)], "args": {"dim": d}}
    c.update(outcome(lambda: torch.take_along_dim(x, idx, dim=d)))
    return c


def case_along_index(G, op):
    """index_add, index_copy and index_fill along a dimension: index vectors (0-d, 1-D, int64,
    int32, repeated, negative, out of range, 2-D or float: refused), sources of the right and
    wrong shapes and dtypes, alpha (truncated for integers), fill values of every kind, 0-d
    tensors. index_copy with a repeated index is left out (PyTorch leaves the winner
    unspecified)."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape(min_rank=0 if r.random() < 0.1 else 1)
    x = G.data(sh, dt, special=0.05)
    rank = len(sh)
    d = G.dim(rank)
    size = sh[d] if rank else 1
    n = r.randint(0, 4)
    bad = r.random() < 0.08
    lo = -size if op == "index_fill" else 0
    if bad:
        vals = [r.randrange(lo, size) if size else 0 for _ in range(n)]
        if n:
            vals[r.randrange(n)] = r.choice([size, lo - 1])
    else:
        vals = [r.randrange(lo, size) for _ in range(n)] if size else []
        n = len(vals)
    if op == "index_copy" and not bad and len(set(v % max(size, 1) for v in vals)) < n:
        return None
    idt = torch.int64 if r.random() < 0.85 else r.choice([torch.int32, torch.float32])
    idx = torch.tensor(vals, dtype=idt)
    if n == 1 and r.random() < 0.2:
        idx = idx.reshape(())
    elif r.random() < 0.03:
        idx = idx.reshape(1, n)
    if op == "index_fill":
        v, ev, kind = py_scalar(r)
        if dt == torch.bool and kind != "bool":
            v, ev, kind = bool(r.random() < 0.5), None, "bool"
            ev = v
        c = {"op": op, "in": [enc(x), enc(idx)], "args": {"dim": d, "value": ev, "kind": kind}}
        c.update(outcome(lambda: x.index_fill(d, idx, v)))
        return finish(c)
    ssh = list(sh)
    if rank:
        ssh[d] = n
    elif n != 1 or r.random() < 0.5:
        ssh = [n]
    if r.random() < 0.05:
        ssh = ssh + [1]
    sdt = dt if r.random() < 0.95 else r.choice(ALL)
    src = G.data(ssh, sdt, special=0.0)
    if op == "index_copy":
        c = {"op": op, "in": [enc(x), enc(idx), enc(src)], "args": {"dim": d}}
        c.update(outcome(lambda: x.index_copy(d, idx, src)))
        return c
    alpha = r.choice([1, 1, 1, 2, -1, 0, 0.5, 2.5])
    if dt in (torch.float16, torch.bfloat16) and alpha != 1:
        # PyTorch scales and adds with one rounding to f16/bf16, Genesis with two.
        alpha = 1
    c = {"op": op, "in": [enc(x), enc(idx), enc(src)], "args": {"dim": d, "alpha": fmt(alpha)}}
    c.update(outcome(lambda: x.index_add(d, idx, src, alpha=alpha)))
    return finish(c, True)


def case_intdiv(G, op):
    """floor_divide, div(rounding_mode="trunc"), remainder, fmod and the bitwise ops with
    PyTorch's promotion: n-d and 0-d tensors and Python scalars, zero divisors (integers: an
    error), negative operands, special float values, bools (refused by the divisions)."""
    r = G.r
    f = {"floor_divide": torch.floor_divide,
         "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
         "remainder": torch.remainder, "fmod": torch.fmod,
         "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
         "bitwise_xor": torch.bitwise_xor, "atan2": torch.atan2, "hypot": torch.hypot}[op]
    bitwise = op.startswith("bitwise")
    pick = (INTS + [torch.bool] if r.random() < 0.9 else ALL) if bitwise else ALL
    if op in ("atan2", "hypot") and r.random() < 0.8:
        pick = FLOATS
    x = G.data(G.shape(min_rank=1) if r.random() < 0.8 else [], r.choice(pick), special=0.05)
    # PyTorch's atan2 and hypot take no Python number.
    kind = r.choice(["tensor", "tensor", "zero_d"] + ([] if op in ("atan2", "hypot") else ["scalar"]))
    if kind == "scalar":
        v = r.choice([2, -3, 0, 1, 7, 0.5, -1.25, True, False, 3.0, -0.0])
        c = arith_scalar_case(op, x, v, f)
    else:
        ysh = [] if kind == "zero_d" else list(x.shape)[r.randint(0, x.dim()):]
        y = G.data(ysh, r.choice(pick), special=0.05)
        if r.random() < 0.7 and y.numel() and not y.dtype.is_floating_point and y.dtype != torch.bool:
            # Mostly nonzero integer divisors, so that most cases compute.
            y = torch.where(y == 0, torch.ones_like(y), y)
        narrow = torch.result_type(x, y) in (torch.float16, torch.bfloat16)
        if narrow and ((y.dim() == 0 and y.dtype != x.dtype) or (x.dim() == 0 and x.dtype != y.dtype)):
            # A 0-d operand of another dtype with a float16/bfloat16 result: PyTorch's CPU
            # takes its value in float32 for floor_divide and in the narrow type for
            # remainder (its kernels differ); Genesis converts it to the result dtype.
            return None
        c = {"op": "arith", "in": [enc(x), enc(y)], "args": {"op": op}}
        c.update(outcome(lambda: f(x, y)))
    return finish(c)


def case_compose(G, op):
    """The conveniences built from other ops: movedim, unbind, hstack/vstack/dstack, rot90,
    tensordot, aminmax, var_mean, std_mean, logaddexp, equal, clamp_ (shapes of every rank,
    bad dimensions, every dtype)."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape(min_rank=0 if r.random() < 0.15 else 1)
    x = G.data(sh, dt, special=0.05)
    rank = len(sh)
    c = {"op": op, "in": [enc(x)], "args": {}}
    if op == "movedim":
        k = r.randint(0, max(rank, 1))
        src = r.sample(range(-rank, rank), min(k, 2 * rank)) if rank else [r.choice([0, -1])]
        dst = r.sample(range(-rank, rank), len(src)) if rank else list(src)
        if r.random() < 0.05:
            dst = dst + [0]
        c["args"] = {"src": src, "dst": dst}
        c.update(outcome(lambda: torch.movedim(x, src, dst)))
    elif op == "unbind":
        d = G.dim(rank)
        c["args"] = {"dim": d}
        c.update(outcome(lambda: list(torch.unbind(x, d))))
    elif op in ("hstack", "vstack", "dstack"):
        k = r.randint(1, 3)
        ts = [x] + [G.data(sh if r.random() < 0.8 else G.shape(), dt, special=0.0) for _ in range(k - 1)]
        c["in"] = [enc(t) for t in ts]
        f = getattr(torch, op)
        c.update(outcome(lambda: f(ts)))
    elif op == "rot90":
        k = r.choice([0, 1, 2, 3, -1, 5, -6])
        dims = r.sample(range(-rank, rank), 2) if rank >= 2 else [0, 1]
        if r.random() < 0.05:
            dims = [dims[0], dims[0]]
        c["args"] = {"k": k, "dims": dims}
        c.update(outcome(lambda: torch.rot90(x, k, dims)))
    elif op == "tensordot":
        dt = r.choice(FLOATS)
        x = G.data(sh, dt, special=0.0)
        nd = r.randint(0, min(rank, 2))
        da = r.sample(range(rank), nd)
        ysh = [sh[d] for d in da] + [r.randint(1, 3) for _ in range(r.randint(0, 2))]
        perm = list(range(len(ysh)))
        r.shuffle(perm)
        ysh = [ysh[p] for p in perm]
        db = [perm.index(i) for i in range(nd)]
        if r.random() < 0.05 and ysh:
            ysh[0] += 1
        y = G.data(ysh, dt, special=0.0)
        c["in"] = [enc(x), enc(y)]
        c["args"] = {"da": da, "db": db}
        c.update(outcome(lambda: torch.tensordot(x, y, dims=(da, db))))
        return finish(c, True)
    elif op == "aminmax":
        d = None if r.random() < 0.3 else G.dim(rank)
        keep = r.random() < 0.3
        c["args"] = {"dim": d, "keepdim": keep}
        c.update(outcome(lambda: list(torch.aminmax(x, dim=d, keepdim=keep))))
    elif op in ("var_mean", "std_mean"):
        dt = r.choice(FLOATS)
        # Finite values: PyTorch's mean here is Welford's, NaN or infinite by the position of
        # an infinity (its torch.mean says inf), path-dependent; Genesis's is mean_dim's.
        x = G.data(sh, dt, special=0.0)
        c["in"] = [enc(x)]
        dims = G.dims(rank, allow_none=False) if rank else []
        corr = r.choice([0, 1, 1, 2])
        keep = r.random() < 0.3
        c["args"] = {"dims": dims, "correction": corr, "keepdim": keep}
        f = getattr(torch, op)
        c.update(outcome(lambda: list(f(x, dim=dims, correction=corr, keepdim=keep))))
        return finish(c, True)
    elif op == "logaddexp":
        dt = r.choice(FLOATS)
        x = G.data(sh, dt, special=0.1)
        y = G.data(list(sh)[r.randint(0, rank):] if rank else [], dt, special=0.1)
        c["in"] = [enc(x), enc(y)]
        c.update(outcome(lambda: torch.logaddexp(x, y)))
        return finish(c, True)
    elif op == "equal":
        y = x.clone() if r.random() < 0.5 else G.data(sh if r.random() < 0.8 else G.shape(), dt, special=0.05)
        if r.random() < 0.1 and y.numel():
            y = y.to(r.choice(ALL))
        c["in"] = [enc(x), enc(y)]
        c.update(outcome(lambda: torch.tensor(torch.equal(x, y))))
    elif op == "pad":
        mode = r.choice(["constant", "constant", "reflect", "replicate", "circular"])
        if mode != "constant":
            rank = r.randint(2, 5)
            sh = [r.randint(1, 4) for _ in range(rank)]
            pairs = r.randint(max(1, rank - 2), min(3, rank - 1))
            if r.random() < 0.1:
                pairs = r.randint(1, 3)
        else:
            pairs = r.randint(0, rank) if r.random() < 0.95 else rank + 1
        x = G.data(sh, dt, special=0.05)
        pads = [r.choice([0, 1, 2, 3, -1]) for _ in range(2 * pairs)]
        if r.random() < 0.03:
            pads = pads + [1]
        value = r.choice([0, 0, 1.5, -2])
        if mode == "circular":
            for k in range(len(pads) // 2):
                lo, hi = pads[2 * k], pads[2 * k + 1]
                kept = sh[len(sh) - 1 - k] + min(lo, 0) + min(hi, 0)
                if (lo < 0 or hi < 0) and max(lo, hi) > kept:
                    # PyTorch copies the wrap from the output it is writing (aliasing).
                    return None
        c = {"op": op, "in": [enc(x)], "args": {"pads": pads, "mode": mode, "value": fmt(value)}}
        if mode == "constant":
            c.update(outcome(lambda: torch.nn.functional.pad(x, pads, mode, value)))
        else:
            c.update(outcome(lambda: torch.nn.functional.pad(x, pads, mode)))
    elif op in ("normalize", "cosine_similarity"):
        dt = r.choice(FLOATS)
        x = G.data(sh, dt, special=0.0)
        if rank == 0:
            return None
        d = G.dim(rank)
        eps = r.choice([1e-12, 1e-8, 0.5])
        if op == "normalize":
            pn = r.choice([2.0, 1.0, 3.0, float("inf")])
            c = {"op": op, "in": [enc(x)], "args": {"p": fmt(pn), "dim": d, "eps": fmt(eps)}}
            c.update(outcome(lambda: torch.nn.functional.normalize(x, pn, d, eps)))
        else:
            y = G.data(list(sh)[r.randint(0, rank):] if r.random() < 0.3 else sh, dt, special=0.0)
            c = {"op": op, "in": [enc(x), enc(y)], "args": {"dim": d, "eps": fmt(eps)}}
            c.update(outcome(lambda: torch.nn.functional.cosine_similarity(x, y, d, eps)))
        return finish(c, True)
    elif op in ("searchsorted", "bucketize"):
        dt = r.choice([torch.float32, torch.float64, torch.int32, torch.int64])
        right = r.random() < 0.5
        if op == "bucketize" or r.random() < 0.7:
            seq = torch.sort(G.data([r.randint(0, 6)], dt, special=0.0)).values
            vals = G.data(sh, dt, special=0.0)
        else:
            lead = [r.randint(1, 3) for _ in range(r.randint(1, 2))]
            seq = torch.sort(G.data(lead + [r.randint(1, 5)], dt, special=0.0), dim=-1).values
            vals = G.data(lead + [r.randint(0, 4)], dt, special=0.0)
        c = {"op": op, "in": [enc(seq), enc(vals)], "args": {"right": right}}
        if op == "searchsorted":
            c.update(outcome(lambda: torch.searchsorted(seq, vals, right=right)))
        else:
            c.update(outcome(lambda: torch.bucketize(vals, seq, right=right)))
    elif op in ("triu_indices", "tril_indices"):
        rows, cols, off = r.randint(0, 5), r.randint(0, 5), r.randint(-4, 4)
        c = {"op": op, "in": [], "args": {"rows": rows, "cols": cols, "offset": off}}
        f = getattr(torch, op)
        c.update(outcome(lambda: f(rows, cols, off)))
    elif op == "clamp_":
        if dt == torch.bool:
            return None
        lo, hi = r.choice([(-1, 1), (0.5, None), (None, 2), (-2.5, 1.5), (3, -3)])
        if dt == torch.uint8 and any(b is not None and b < 0 for b in (lo, hi)):
            return None  # version-dependent in PyTorch, as `clamp`'s (see the top)
        c["args"] = {"min": lo, "max": hi}
        y = x.clone()
        c.update(outcome(lambda: y.clamp_(lo, hi)))
    return finish(c)


def case_extra(G, op):
    """Elementwise and shape conveniences built from other ops: logaddexp2, xlogy, frac,
    deg2rad, rad2deg, sinc, logit, heaviside, fliplr, flipud, inner, dist, diag, diag_embed,
    diagflat, cartesian_prod, block_diag, isin, trapezoid, vander, matrix_power, renorm,
    cummax, cummin, logcumsumexp (every dtype, ranks 0 to 4, broadcasting, ties, the dtype
    rules PyTorch refuses)."""
    r = G.r
    dt = r.choice(ALL)
    sh = G.shape(min_rank=0 if r.random() < 0.15 else 1)
    rank = len(sh)
    x = G.data(sh, dt, special=0.1)
    c = {"op": op, "in": [enc(x)], "args": {}}
    other = lambda d: G.data(list(sh)[r.randint(0, rank):] if rank and r.random() < 0.3 else sh, d, special=0.1)
    if op in ("logaddexp2", "xlogy", "dist"):
        d2 = dt if r.random() < 0.7 else r.choice(ALL)
        y = other(d2)
        c["in"] = [enc(x), enc(y)]
        if op == "dist":
            pn = r.choice([2.0, 1.0, 3.0, 0.0, float("inf")])
            c["args"] = {"p": fmt(pn)}
            c.update(outcome(lambda: torch.dist(x, y, pn)))
        else:
            f = getattr(torch, op)
            c.update(outcome(lambda: f(x, y)))
        return finish(c, True)
    if op in ("frac", "deg2rad", "rad2deg", "sinc"):
        f = getattr(torch, op)
        c.update(outcome(lambda: f(x)))
        return finish(c, True)
    if op == "logit":
        eps = r.choice([None, None, 0.1, 1e-6])
        c["args"] = {"eps": None if eps is None else fmt(eps)}
        c.update(outcome(lambda: torch.logit(x, eps)))
        return finish(c, True)
    if op == "heaviside":
        d2 = dt if r.random() < 0.85 else r.choice(ALL)
        v = G.data([] if r.random() < 0.5 else ([sh[-1]] if rank else []), d2, special=0.0)
        c["in"] = [enc(x), enc(v)]
        c.update(outcome(lambda: torch.heaviside(x, v)))
        return finish(c)
    if op in ("fliplr", "flipud"):
        f = getattr(torch, op)
        c.update(outcome(lambda: f(x)))
        return finish(c)
    if op in ("diag", "diagflat"):
        if op == "diag" and r.random() < 0.8:
            sh = [r.randint(0, 5) for _ in range(r.choice([1, 1, 2, 2, 0, 3]))]
            x = G.data(sh, dt, special=0.05)
            c["in"] = [enc(x)]
        k = r.choice([0, 0, 1, -1, 2, -3, 6])
        c["args"] = {"offset": k}
        f = getattr(torch, op)
        c.update(outcome(lambda: f(x, k)))
        return finish(c)
    if op in ("cartesian_prod", "block_diag"):
        k = r.randint(1, 3)
        ts = []
        for _ in range(k):
            rk = 1 if op == "cartesian_prod" and r.random() < 0.9 else r.choice([0, 1, 2, 2, 3])
            d2 = dt if r.random() < 0.8 else r.choice(ALL)
            ts.append(G.data([r.randint(0, 3) for _ in range(rk)], d2, special=0.05))
        c["in"] = [enc(t) for t in ts]
        f = getattr(torch, op)
        c.update(outcome(lambda: f(*ts)))
        return finish(c)
    if op == "isin":
        d2 = dt if r.random() < 0.7 else r.choice(ALL)
        y = G.data([r.randint(0, 5)] if r.random() < 0.8 else G.shape(min_rank=0), d2, special=0.1)
        inv = r.random() < 0.3
        c["in"] = [enc(x), enc(y)]
        c["args"] = {"invert": inv}
        c.update(outcome(lambda: torch.isin(x, y, invert=inv)))
        return finish(c)
    if op == "trapezoid":
        d = G.dim(rank) if rank else -1
        if r.random() < 0.5:
            dx = r.choice([1.0, 0.5, -2.0])
            c["args"] = {"dim": d, "dx": fmt(dx)}
            c.update(outcome(lambda: torch.trapezoid(x, dx=dx, dim=d)))
        else:
            n = sh[d] if rank else 1
            d2 = r.choice(FLOATS + [torch.int64])
            xs = G.data([n if r.random() < 0.95 else n + 1], d2, special=0.0)
            c["in"] = [enc(x), enc(xs)]
            c["args"] = {"dim": d}
            c.update(outcome(lambda: torch.trapezoid(x, xs, dim=d)))
        return finish(c, True)
    if op == "vander":
        if r.random() < 0.85:
            x = G.data([r.randint(0, 4)], dt, special=0.0)
            c["in"] = [enc(x)]
        n = r.choice([None, None, 0, 1, 3, 5])
        inc = r.random() < 0.5
        c["args"] = {"n": n, "increasing": inc}
        c.update(outcome(lambda: torch.vander(x, N=n, increasing=inc)))
        return finish(c, True)
    if op == "matrix_power":
        m = r.randint(0, 3)
        lead = [r.randint(1, 2) for _ in range(r.randint(0, 2))]
        if dt == torch.bool or dt in INTS[:3] or dt in (torch.float16, torch.bfloat16):
            return None  # PyTorch's CPU products of these dtypes: see the linalg family
        x = G.data(lead + [m, m if r.random() < 0.9 else m + 1], dt, special=0.0)
        n = r.choice([0, 1, 2, 3, 5, -1])
        c["in"] = [enc(x)]
        c["args"] = {"n": n}
        c.update(outcome(lambda: torch.linalg.matrix_power(x, n)))
        return finish(c, True, product=n >= 2)
    if op == "renorm":
        p = r.choice([2.0, 1.0, 3.0, float("inf"), 0.0])
        d = G.dim(rank) if rank else 0
        maxnorm = r.choice([1.0, 0.5, 5.0, -1.0])
        c["args"] = {"p": fmt(p), "dim": d, "maxnorm": fmt(maxnorm)}
        c.update(outcome(lambda: torch.renorm(x, p, d, maxnorm)))
        return finish(c, True)
    if op in ("cummax", "cummin", "logcumsumexp"):
        d = G.dim(rank) if rank else r.choice([0, -1])
        if dt != torch.bool and dt not in FLOATS and r.random() < 0.5:
            # Ties: small integers repeat.
            lo = 0 if dt == torch.uint8 else -2
            x = torch.randint(lo, 3, sh, generator=G.g).to(dt)
            c["in"] = [enc(x)]
        c["args"] = {"dim": d}
        f = getattr(torch, op)
        if op == "logcumsumexp":
            c.update(outcome(lambda: f(x, d)))
            return finish(c, True)
        c.update(outcome(lambda: list(f(x, d))))
        return finish(c)
    if op == "diag_embed":
        k = r.choice([0, 0, 1, -1, 2, -2])
        d1, d2 = r.randint(-rank - 1, rank), r.randint(-rank - 1, rank)
        if r.random() < 0.5:
            d1, d2 = -2, -1
        c["args"] = {"offset": k, "dim1": d1, "dim2": d2}
        c.update(outcome(lambda: torch.diag_embed(x, k, d1, d2)))
        return finish(c)
    if op == "inner":
        d2 = dt if r.random() < 0.85 else r.choice(ALL)
        if rank and r.random() < 0.9:
            lead = [r.randint(0, 3) for _ in range(r.randint(0, 2))]
            k = sh[-1] if r.random() < 0.9 else sh[-1] + 1
            y = G.data(lead + [k], d2, special=0.0)
        else:
            y = G.data(G.shape(min_rank=0), d2, special=0.0)
        if dt == torch.bool or dt in INTS[:3]:
            return None  # PyTorch's CPU products of bool and narrow ints: path-dependent
        c["in"] = [enc(x), enc(y)]
        c.update(outcome(lambda: torch.inner(x, y)))
        return finish(c, True, product=x.dim() > 0 and y.dim() > 0)
    return None


def case_solve(G, op):
    """inverse, det, slogdet, logdet and linalg_solve (PyTorch's linalg.inv, linalg.det,
    linalg.slogdet, logdet and linalg.solve): batches of 0 to 4 square matrices, mostly
    float32 and float64 and well conditioned (a diagonally dominant matrix, whose results
    LAPACK and any other partial-pivoting LU give within a few ulp), some singular (a zero
    row: errors for the inverse and the solve, 0 and -inf for the determinants),
    some of small integers (exact pivots), other dtypes and shapes that PyTorch refuses."""
    r = G.r
    dt = r.choice([torch.float32, torch.float64]) if r.random() < 0.88 else r.choice(ALL)
    m = r.randint(0, 4)
    batch = [r.randint(0, 3) for _ in range(r.randint(0, 2))]
    sh = batch + [m, m]
    if r.random() < 0.04:
        sh = batch + [m, m + 1]
    elif r.random() < 0.03:
        sh = [m]
    n = math.prod(sh)
    kind = r.random()
    if dt in (torch.float32, torch.float64) and len(sh) >= 2 and sh[-1] == sh[-2]:
        if kind < 0.7:
            a = torch.tensor([r.uniform(-1, 1) for _ in range(n)], dtype=torch.float64)
            a = a.reshape(sh) + (m + 1) * torch.eye(m, dtype=torch.float64) * r.choice([1, -1])
        elif kind < 0.85:
            a = torch.tensor([float(r.randint(-3, 3)) for _ in range(n)], dtype=torch.float64).reshape(sh)
            # Integer matrices singular in exact arithmetic are left out: whether their last
            # pivot comes out 0 or a few ulp depends on the LU's rounding (MKL's batched and
            # single-matrix paths differ), so no answer is PyTorch's.
            if m > 0 and bool((torch.linalg.det(a).abs() < 0.5).any()):
                return None
        else:
            a = torch.tensor([round(r.gauss(0, 2), 2) for _ in range(n)], dtype=torch.float64).reshape(sh)
            if m >= 1:
                # A zero row: exactly singular in any elimination (a repeated row is singular
                # only up to the rounding of the implementation's updates).
                a[..., r.randrange(m), :] = 0.0
        x = a.to(dt)
    else:
        x = G.data(sh, dt, special=0.0)
    c = {"op": op, "in": [enc(x)], "args": {}}
    if op == "linalg_solve":
        k = r.randint(1, 3)
        bdt = dt if r.random() < 0.95 else r.choice(FLOATS)
        form = r.random()
        if form < 0.35:
            bsh = sh[:-1]
        elif form < 0.45:
            bsh = sh[-1:] if sh else [m]
        else:
            bb = [d if r.random() < 0.8 else 1 for d in sh[:-2]]
            if r.random() < 0.2:
                bb = [r.randint(1, 2)] + bb
            bsh = bb + [sh[-2] if len(sh) >= 2 else m, k]
        if r.random() < 0.04:
            bsh = bsh[:-1] + [bsh[-1] + 1] if bsh else [1]
        y = G.data(bsh, bdt, special=0.0)
        c["in"].append(enc(y))
        c.update(outcome(lambda: torch.linalg.solve(x, y)))
        return finish(c, True)
    f = {"inverse": torch.linalg.inv, "det": torch.linalg.det, "slogdet": torch.linalg.slogdet,
         "logdet": torch.logdet}[op]
    c.update(outcome(lambda: f(x)))
    return finish(c, True)


# The families of the second corpus (`--more`: torch-more-*.json.gz).
MORE_FAMILIES = {
    "nn": (case_nn, ["cross_entropy", "layer_norm", "rms_norm"]),
    "pick": (case_pick, ["masked_select", "unique_consecutive"]),
    "interleave": (case_interleave, ["repeat_interleave"]),
    "linalg": (case_linalg, ["mm", "mv", "dot", "trace", "addmm", "baddbmm"]),
    "einsum": (case_einsum, ["einsum"]),
    "solve": (case_solve, ["inverse", "det", "slogdet", "logdet", "linalg_solve"]),
    "combine": (case_combine, ["kron", "take_along_dim"]),
    "along": (case_along_index, ["index_add", "index_copy", "index_fill"]),
    "intdiv": (case_intdiv, ["floor_divide", "div_trunc", "remainder", "fmod", "bitwise_and",
                             "bitwise_or", "bitwise_xor", "atan2", "hypot"]),
    "compose": (case_compose, ["movedim", "unbind", "hstack", "vstack", "dstack", "rot90",
                               "tensordot", "aminmax", "var_mean", "std_mean", "logaddexp",
                               "equal", "clamp_", "pad", "normalize", "cosine_similarity",
                               "searchsorted", "bucketize", "triu_indices", "tril_indices"]),
    "extra": (case_extra, ["logaddexp2", "xlogy", "frac", "deg2rad", "rad2deg", "sinc", "logit",
                           "heaviside", "fliplr", "flipud", "inner", "dist", "diag",
                           "diag_embed", "diagflat", "cartesian_prod", "block_diag", "isin",
                           "trapezoid", "vander", "matrix_power", "renorm", "cummax",
                           "cummin", "logcumsumexp"]),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--more", action="store_true", help="the second corpus's families")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    G = Gen(a.seed)
    families = MORE_FAMILIES if a.more else FAMILIES
    fams = sorted(families)
    state = {"i": 0}

    def draw():
        fam = fams[state["i"] % len(fams)]
        state["i"] += 1
        fn, ops = families[fam]
        op = G.r.choice(ops)
        c = fn(G, op)
        return None if c is None else (op, c)

    write_cases(a.out, "genesis-facade-cases v1", a.seed, a.count, draw)


def write_cases(out, format_name, seed, count, draw):
    """Draws `count` cases (`draw()` gives `(family, case)` or None to skip), numbers each
    within its family (`"family/k"`), and writes them gzipped in the corpus document."""
    cases, counts = [], {}
    while len(cases) < count:
        drawn = draw()
        if drawn is None:
            continue
        key, c = drawn
        c["id"] = "%s/%d" % (key, counts.get(key, 0))
        counts[key] = counts.get(key, 0) + 1
        cases.append(c)
    doc = {"format": format_name, "seed": seed, "count": count,
           "oracle": "PyTorch %s" % torch.__version__, "families": counts, "cases": cases}
    with gzip.open(out, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("%d cases to %s: %s" % (len(cases), out, counts))


if __name__ == "__main__":
    main()
