"""Random cases of the shape and selection ops with NumPy as the oracle, for
`tests/differential.rs`: `python3 gen_shape_cases.py --seed S --count N --out FILE` (needs
numpy; only to regenerate).

    python3 gen_shape_cases.py --seed 23 --count 3000 --out data/shape-cases.json.gz
    python3 gen_shape_cases.py --seed 1023 --count 1000 --out data/shape-heldout.json.gz

The second set is held out: generated independently (another seed), not looked at while fixing
failures of the first.

The case format, the tensor encoding, strided inputs (`mk`) and the comparison rules are those
of `gen_facade_cases.py` (whose helpers this script imports); `tests/common/facade.rs` maps each
`op` with its `args` to the API:

- `split` (`size`, `dim`), `split_sizes` (`sizes`, `dim`), `chunk` (`chunks`, `dim`): `out` is
  the list of pieces (PyTorch's rules: `split` with a size at least the dimension's gives one
  piece, a size of 0 only for a dimension of 0; `chunk` gives pieces of `ceil(size / chunks)`,
  maybe fewer than `chunks`, and `chunks` empty pieces for a dimension of 0).
- `flatten` (`start`, `end`), `ravel`, `unflatten` (`dim`, `sizes` with at most one -1).
- `repeat` and `tile` (`reps`): PyTorch's `Tensor.repeat` (at least as many repeats as
  dimensions) and `torch.tile` (fewer padded with 1s in front): NumPy's `np.tile`.
- `flip` (`dims`), `roll` (`shifts`, `dims`; empty `dims`: the flattened tensor rolled).
- `tril`, `triu` (`diagonal`), `diagonal` (`offset`, `dim1`, `dim2`).
- `nonzero`, `argwhere` (`[n, ndim]` int64), `nonzero_tuple` (one `[n]` int64 per dimension; a
  0-d tensor gives one).
- `unique` (`sorted`, `inverse`, `counts`) and `unique_consecutive` (`inverse`, `counts`): `out`
  is the values, then the inverse and the counts when asked for. PyTorch's semantics, where
  NumPy's `np.unique` differs: each NaN is a value of its own (PyTorch's `equal_nan` is false),
  -0.0 and 0.0 are one value (compared with `"eqv"`), the inverse of several NaNs follows their
  order in the input (Genesis sorts stably).
- `one_hot` (`classes`: a number or null): int64 in, int64 out.

Errors (`err`) are the typed errors of bad dims (`DimOutOfRange`) and of bad sizes, repeats,
shifts, classes and ranks (`InvalidArgument`).
"""
import argparse
import gzip
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_facade_cases import (  # noqa: E402
    A, DTYPES, FLOATS, FORMAT, Gen, enc, out_t,
)

DIM = "DimOutOfRange"
BAD = "InvalidArgument"
NUMEL = 64  # the largest input of the small cases


# ---------------------------------------------------------------------------------- inputs

def as_input(g, a):
    """The encoded input for the logical value `a` (an A), sometimes made as a strided view:
    a permutation, a narrowed dimension, or a transpose of a matrix."""
    r = g.r
    x = a.a
    rank = x.ndim
    k = r.random()
    if k < 0.2 and rank >= 2:
        perm = list(range(rank))
        r.shuffle(perm)
        inv = [perm.index(i) for i in range(rank)]
        base = A(a.dt, [x.shape[inv[i]] for i in range(rank)], np.transpose(x, inv).reshape(-1))
        e = enc(base)
        e["mk"] = {"perm": perm}
        return e
    if k < 0.35 and rank >= 1:
        d = r.randrange(rank)
        before, after = r.randint(0, 2), r.randint(0, 2)
        pad = lambda m: g.values(a.dt, int(np.prod(m)))
        shp = list(x.shape)
        parts = []
        if before:
            s = list(shp)
            s[d] = before
            parts.append(np.asarray(A(a.dt, s, pad(s)).a))
        parts.append(np.asarray(x))
        if after:
            s = list(shp)
            s[d] = after
            parts.append(np.asarray(A(a.dt, s, pad(s)).a))
        full = np.concatenate(parts, axis=d)
        e = enc(A(a.dt, full.shape, full.reshape(-1)))
        e["mk"] = {"narrow": [d, before, shp[d]]}
        return e
    if k < 0.45 and rank == 2:
        base = A(a.dt, [x.shape[1], x.shape[0]], x.T.reshape(-1))
        e = enc(base)
        e["mk"] = {"t": 1}
        return e
    return enc(a)


def value(g, dt, shape, zeros=0.0, dups=False, **kw):
    """A random A of `shape`; `zeros`: the share of elements set to 0; `dups`: values drawn
    from a few (1 to 4, or `dups` when it is more than 1), so that they repeat."""
    r = g.r
    n = int(np.prod(shape))
    if dups and n:
        pool = g.values(dt, dups if dups > 1 else r.randint(1, 5), **kw)
        vals = [r.choice(pool) for _ in range(n)]
    else:
        vals = g.values(dt, n, **kw)
    if zeros:
        zero = False if dt == "bool" else (0.0 if dt in FLOATS else 0)
        vals = [zero if r.random() < zeros else v for v in vals]
    return A(dt, shape, vals)


def high_rank_shape(g):
    """More dimensions than the copy and unravel kernels take at once (9 to 12), mostly 1s and
    2s."""
    r = g.r
    rank = r.randint(9, 12)
    while True:
        shape = [r.choice([1, 1, 2, 2, 3]) for _ in range(rank)]
        if int(np.prod(shape)) <= 96:
            break
    if r.random() < 0.1:
        shape[r.randrange(rank)] = 0
    return shape


def small_shape(g, min_rank=0, max_rank=4, zero=0.08, max_numel=NUMEL, high=0.0):
    if g.r.random() < high:
        return high_rank_shape(g)
    while True:
        s = g.shape(max_rank=max_rank, max_numel=max_numel, zero=zero)
        if len(s) >= min_rank:
            return s


def dim_arg(g, rank):
    """A dimension in range (negative half the time)."""
    return g.r.randrange(-max(rank, 1), max(rank, 1))


def bad_dim(g, rank):
    r = max(rank, 1)
    return g.r.choice([r, r + 1, -r - 1, -r - 3])


def case(op, ins, args, out=None, err=None, tol=None):
    c = {"op": op, "in": ins, "args": args}
    if err is not None:
        c["err"] = err
    else:
        c["out"] = out
    if tol is not None:
        c["tol"] = tol
    return c


def outs(dt, arrays):
    return [out_t(dt, np.asarray(a)) for a in arrays]


# ---------------------------------------------------------------------------------- families

def mk_split(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["split", "split", "split_sizes", "chunk", "chunk"])
    shape = small_shape(g, zero=0.15)
    a = value(g, dt, shape)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if rank == 0:
        arg = {"split": {"size": 1}, "split_sizes": {"sizes": [1]}, "chunk": {"chunks": 1}}[op]
        return case(op, [e], {**arg, "dim": 0}, err=BAD)
    if r.random() < 0.06:
        arg = {"split": {"size": 1}, "split_sizes": {"sizes": []}, "chunk": {"chunks": 1}}[op]
        return case(op, [e], {**arg, "dim": bad_dim(g, rank)}, err=DIM)
    d = dim_arg(g, rank)
    size = shape[d % rank]
    if op == "split":
        ss = r.randint(0 if size == 0 else 1, size + 2)
        if size > 0 and r.random() < 0.06:
            return case(op, [e], {"size": 0, "dim": d}, err=BAD)
        if ss == 0:
            bounds = [0, 0]
        else:
            n = max(-(-size // ss), 1)
            bounds = [min(k * ss, size) for k in range(n)] + [size]
    elif op == "split_sizes":
        cuts = sorted(r.randint(0, size) for _ in range(r.randint(0, 3)))
        bounds = [0] + cuts + [size]
        sizes = [b - a_ for a_, b in zip(bounds, bounds[1:])]
        if r.random() < 0.08:
            sizes = sizes + [r.randint(1, 3)]
            return case(op, [e], {"sizes": sizes, "dim": d}, err=BAD)
    else:
        chunks = r.randint(1, size + 3)
        if r.random() < 0.06:
            return case(op, [e], {"chunks": 0, "dim": d}, err=BAD)
        if size == 0:
            bounds = [0] * (chunks + 1)
        else:
            ss = -(-size // chunks)
            n = -(-size // ss)
            bounds = [min(k * ss, size) for k in range(n)] + [size]
    pieces = []
    for lo, hi in zip(bounds, bounds[1:]):
        sl = [slice(None)] * rank
        sl[d % rank] = slice(lo, hi)
        pieces.append(x[tuple(sl)])
    args = {"split": lambda: {"size": ss}, "split_sizes": lambda: {"sizes": sizes},
            "chunk": lambda: {"chunks": chunks}}[op]()
    return case(op, [e], {**args, "dim": d}, out=outs(dt, pieces))


def factors(g, n):
    """A random list of sizes multiplying to n (n > 0), maybe with 1s."""
    r = g.r
    out, m = [], n
    for p in [2, 2, 3, 2, 5, 3, 7]:
        while m % p == 0 and r.random() < 0.5:
            out.append(p)
            m //= p
    out.append(m)
    if r.random() < 0.3:
        out.insert(r.randint(0, len(out)), 1)
    r.shuffle(out)
    return out


def mk_flatten(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["flatten", "flatten", "ravel", "unflatten", "unflatten"])
    shape = small_shape(g, zero=0.1, high=0.05 if op == "ravel" else 0.0)
    a = value(g, dt, shape)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if op == "ravel":
        return case(op, [e], {}, out=out_t(dt, x.reshape(-1)))
    if op == "flatten":
        if r.random() < 0.06:
            return case(op, [e], {"start": bad_dim(g, rank), "end": -1}, err=DIM)
        s, t = sorted([r.randrange(max(rank, 1)), r.randrange(max(rank, 1))])
        if r.random() < 0.08 and s != t:
            return case(op, [e], {"start": t, "end": s}, err=BAD)
        neg = lambda d: d - max(rank, 1) if r.random() < 0.4 else d
        args = {"start": neg(s), "end": neg(t)}
        if rank == 0:
            return case(op, [e], args, out=out_t(dt, x.reshape(1)))
        new = list(shape[:s]) + [int(np.prod(shape[s:t + 1]))] + list(shape[t + 1:])
        return case(op, [e], args, out=out_t(dt, x.reshape(new)))
    # unflatten
    if rank == 0:
        return case(op, [e], {"dim": 0, "sizes": [1]}, err=BAD)
    if r.random() < 0.05:
        return case(op, [e], {"dim": bad_dim(g, rank), "sizes": [1]}, err=DIM)
    d = dim_arg(g, rank)
    size = shape[d % rank]
    if size == 0:
        sizes = [0, r.choice([1, 2, 3])]
        r.shuffle(sizes)
        if r.random() < 0.3:
            sizes[sizes.index(0)] = -1
    else:
        sizes = factors(g, size)
        if r.random() < 0.3:
            sizes[r.randrange(len(sizes))] = -1
    k = r.random()
    if k < 0.04:
        return case(op, [e], {"dim": d, "sizes": []}, err=BAD)
    if k < 0.08:
        return case(op, [e], {"dim": d, "sizes": [-1, -1] + sizes}, err=BAD)
    if k < 0.12 and size > 0:
        return case(op, [e], {"dim": d, "sizes": sizes + [size + 1]}, err=BAD)
    known = int(np.prod([s for s in sizes if s != -1]))
    full = [size // known if s == -1 else s for s in sizes]
    new = list(shape[:d % rank]) + full + list(shape[d % rank + 1:])
    return case(op, [e], {"dim": d, "sizes": sizes}, out=out_t(dt, x.reshape(new)))


def mk_repeat(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["repeat", "tile"])
    shape = small_shape(g, max_numel=24, zero=0.08, high=0.05)
    a = value(g, dt, shape)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if op == "repeat":
        n = rank + r.choice([0, 0, 0, 1, 1, 2])
        if rank > 0 and r.random() < 0.06:
            return case(op, [e], {"reps": [2] * (rank - 1)}, err=BAD)
    else:
        n = r.randint(0, rank + 2)
    reps = [r.choice([0, 1, 1, 2, 2, 3]) if r.random() < 0.95 else 0 for _ in range(n)]
    while int(np.prod(reps or [1])) * max(x.size, 1) > 240:
        reps[r.randrange(n)] = 1
    if reps and r.random() < 0.05:
        reps[r.randrange(n)] = -1
        return case(op, [e], {"reps": reps}, err=BAD)
    return case(op, [e], {"reps": reps}, out=out_t(dt, np.tile(x, reps) if reps else x.copy()))


def mk_flip_roll(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["flip", "roll", "roll"])
    shape = small_shape(g, zero=0.1, high=0.07)
    a = value(g, dt, shape)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if op == "flip":
        dims = [d for d in range(max(rank, 1)) if r.random() < 0.5]
        dims = [d - max(rank, 1) if r.random() < 0.4 else d for d in dims]
        r.shuffle(dims)
        k = r.random()
        if k < 0.06:
            return case(op, [e], {"dims": dims + [bad_dim(g, rank)]}, err=DIM)
        if k < 0.12 and dims:
            return case(op, [e], {"dims": dims + [dims[0] - max(rank, 1) if dims[0] >= 0 else dims[0] + max(rank, 1)]}, err=BAD)
        y = x if rank == 0 else np.flip(x, [d % rank for d in dims]) if dims else x
        return case(op, [e], {"dims": dims}, out=out_t(dt, y))
    # roll
    k = r.random()
    if k < 0.05:
        return case(op, [e], {"shifts": [], "dims": []}, err=BAD)
    if k < 0.1:
        return case(op, [e], {"shifts": [1, 2], "dims": [0] if r.random() < 0.5 else []}, err=BAD)
    if k < 0.3 or rank == 0:
        if rank == 0 and r.random() < 0.3:
            return case(op, [e], {"shifts": [1], "dims": [0]}, err=DIM)
        s = r.randint(-7, 7)
        return case(op, [e], {"shifts": [s], "dims": []},
                    out=out_t(dt, np.roll(x.reshape(-1), s).reshape(x.shape)))
    if k < 0.34 and x.size:
        # (PyTorch clones an empty tensor without looking at the dims; Genesis checks them)
        return case(op, [e], {"shifts": [1], "dims": [bad_dim(g, rank)]}, err=DIM)
    nd = r.randint(1, rank + 1)
    dims = [dim_arg(g, rank) for _ in range(nd)]
    shifts = [r.choice([r.randint(-6, 6), r.randint(-100, 100), 2**40 + r.randint(0, 5)]) for _ in range(nd)]
    y = np.roll(x, shifts, [d % rank for d in dims]) if x.size else x
    return case(op, [e], {"shifts": shifts, "dims": dims}, out=out_t(dt, y))


def mk_triangle(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["tril", "triu", "diagonal", "diagonal"])
    shape = small_shape(g, zero=0.08)
    a = value(g, dt, shape)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if op in ("tril", "triu"):
        if rank < 2:
            return case(op, [e], {"diagonal": 0}, err=BAD)
        rows, cols = shape[-2], shape[-1]
        kd = r.choice([0, 0, r.randint(-rows - 2, cols + 2), r.choice([-2**40, 2**40, -2**62, 2**62])])
        fn = np.tril if op == "tril" else np.triu
        # Kept elements as they are, the rest +0 (0 for integers, false for bools).
        keep = fn(np.ones((rows, cols), dtype=bool), int(np.clip(kd, -100, 100)))
        y = np.where(keep, x, np.zeros((), dtype=x.dtype) if x.dtype != object else 0)
        return case(op, [e], {"diagonal": kd}, out=out_t(dt, y))
    # diagonal
    if rank < 2 or r.random() < 0.06:
        d1 = dim_arg(g, rank)
        d2 = d1 + (max(rank, 1) if d1 < 0 else -max(rank, 1)) if r.random() < 0.5 else d1
        if rank < 2 and r.random() < 0.5:
            return case(op, [e], {"offset": 0, "dim1": 0, "dim2": bad_dim(g, rank)}, err=DIM)
        return case(op, [e], {"offset": 0, "dim1": d1, "dim2": d2}, err=BAD)
    if r.random() < 0.05:
        return case(op, [e], {"offset": 0, "dim1": 0, "dim2": bad_dim(g, rank)}, err=DIM)
    d1, d2 = r.sample(range(rank), 2)
    off = r.choice([0, 0, r.randint(-4, 4), r.choice([-2**40, 2**40])])
    args = {"offset": off, "dim1": d1 - rank if r.random() < 0.3 else d1,
            "dim2": d2 - rank if r.random() < 0.3 else d2}
    y = np.diagonal(x, int(np.clip(off, -100, 100)), d1, d2)
    return case(op, [e], args, out=out_t(dt, np.ascontiguousarray(y)))


def mk_nonzero(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["nonzero", "nonzero", "argwhere", "nonzero_tuple"])
    # sometimes more dimensions than the unravel pass takes at once
    shape = small_shape(g, zero=0.08, high=0.1)
    a = value(g, dt, shape, zeros=r.choice([0.0, 0.3, 0.6, 0.95]), heavy=True)
    x = a.a
    e = as_input(g, a)
    mask = np.asarray(x != 0, dtype=bool) if x.dtype != object else np.vectorize(lambda v: v != 0, otypes=[bool])(x)
    mask = np.asarray(mask).reshape(x.shape)
    coords = np.argwhere(mask).astype(np.int64)
    if op == "nonzero_tuple":
        if not shape:
            # a 0-d tensor is taken as one of one element
            cols = [np.zeros(int(mask.item()), dtype=np.int64)]
        else:
            cols = [coords[:, k] for k in range(len(shape))]
        return case(op, [e], {}, out=outs("int64", cols))
    return case(op, [e], {}, out=out_t("int64", coords))


def unique_ref(dt, flat, consecutive):
    """(values, inverse of the flat positions, counts) by PyTorch's rules (stable order)."""
    n = len(flat)
    isnan = lambda v: dt in FLOATS and math.isnan(v)
    if consecutive:
        order = list(range(n))
    else:
        order = sorted(range(n), key=lambda k: (isnan(flat[k]), 0 if isnan(flat[k]) else flat[k]))
    vals, inv, counts = [], [0] * n, []
    for pos, k in enumerate(order):
        v = flat[k]
        new = pos == 0 or isnan(v) or isnan(vals[-1]) or v != vals[-1]
        if new:
            vals.append(v)
            counts.append(0)
        counts[-1] += 1
        inv[k] = len(vals) - 1
    return vals, inv, counts


def mk_unique(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["unique", "unique", "unique_consecutive"])
    shape = small_shape(g, zero=0.08, high=0.05)
    a = value(g, dt, shape, dups=r.random() < 0.7, heavy=True)
    if dt in FLOATS and r.random() < 0.5 and a.a.size:
        # NaN, infinities and zeros of both signs, several times
        pool = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0]
        flat = [r.choice(pool) if r.random() < 0.5 else v for v in a.flat()]
        a = A(dt, shape, flat)
    x = a.a
    e = as_input(g, a)
    flat = [float(v) if dt in FLOATS else (bool(v) if dt == "bool" else int(v)) for v in x.reshape(-1)]
    vals, inv, counts = unique_ref(dt, flat, op == "unique_consecutive")
    want_inv, want_counts = r.random() < 0.5, r.random() < 0.5
    args = {"inverse": want_inv, "counts": want_counts}
    if op == "unique":
        args["sorted"] = r.random() < 0.8
    out = [out_t(dt, np.array(vals, dtype=x.dtype if x.dtype != object else object).reshape(-1))]
    if want_inv:
        out.append(out_t("int64", np.array(inv, dtype=np.int64).reshape(x.shape)))
    if want_counts:
        out.append(out_t("int64", np.array(counts, dtype=np.int64)))
    return case(op, [e], args, out=out, tol="eqv" if dt in FLOATS else None)


def mk_one_hot(g, i):
    r = g.r
    op = "one_hot"
    shape = small_shape(g, max_numel=24, zero=0.1)
    n = int(np.prod(shape))
    k = r.random()
    if k < 0.08:
        dt = r.choice([d for d in DTYPES if d != "int64"])
        a = value(g, dt, shape)
        return case(op, [as_input(g, a)], {"classes": 3}, err=BAD)
    classes = r.randint(1, 6)
    vals = [r.randrange(classes) for _ in range(n)]
    a = A("int64", shape, vals)
    given = r.random() < 0.6
    if n == 0 and (not given or r.random() < 0.2):
        return case(op, [as_input(g, a)], {"classes": None if not given else 0}, err=BAD)
    if n and k < 0.16:
        vals[r.randrange(n)] = r.choice([-1, -5, classes, classes + 3])
        a = A("int64", shape, vals)
        bad = min(vals) < 0 or (given and max(vals) >= classes)
        if bad:
            return case(op, [as_input(g, a)], {"classes": classes if given else None}, err=BAD)
    c = classes if given else (max(vals) + 1 if vals else 0)
    x = np.array(vals, dtype=np.int64).reshape(shape)
    y = (x[..., None] == np.arange(c)).astype(np.int64)
    return case(op, [as_input(g, a)], {"classes": classes if given else None}, out=out_t("int64", y))


def mk_big(g, i):
    """A larger input (past the GPU's small-op sizes and the 2048-element sort rows)."""
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["flip", "roll", "tril", "unique", "nonzero"])
    shape = r.choice([[2100], [48, 65], [3, 5, 190], [70, 70]])
    # Values from a pool of 24 (a few for unique): compact data, and repeats.
    a = value(g, dt, shape, dups=3 if op == "unique" else 24, zeros=0.5 if op == "nonzero" else 0.0)
    x = a.a
    e = as_input(g, a)
    rank = len(shape)
    if op == "flip":
        dims = [d for d in range(rank) if r.random() < 0.6] or [rank - 1]
        return case(op, [e], {"dims": dims}, out=out_t(dt, np.flip(x, dims)))
    if op == "roll":
        dims = list(range(rank))
        shifts = [r.randint(-300, 300) for _ in dims]
        return case(op, [e], {"shifts": shifts, "dims": dims}, out=out_t(dt, np.roll(x, shifts, dims)))
    if op == "tril":
        if rank < 2:
            return case(op, [e], {"diagonal": 0}, err=BAD)
        kd = r.randint(-20, 20)
        keep = np.tril(np.ones(shape[-2:], dtype=bool), kd)
        return case(op, [e], {"diagonal": kd},
                    out=out_t(dt, np.where(keep, x, np.zeros((), dtype=x.dtype) if x.dtype != object else 0)))
    if op == "unique":
        flat = [float(v) if dt in FLOATS else (bool(v) if dt == "bool" else int(v)) for v in x.reshape(-1)]
        vals, inv, counts = unique_ref(dt, flat, False)
        out = [out_t(dt, np.array(vals, dtype=x.dtype if x.dtype != object else object)),
               out_t("int64", np.array(inv, dtype=np.int64).reshape(x.shape)),
               out_t("int64", np.array(counts, dtype=np.int64))]
        return case(op, [e], {"sorted": True, "inverse": True, "counts": True}, out=out,
                    tol="eqv" if dt in FLOATS else None)
    mask = np.vectorize(lambda v: v != 0, otypes=[bool])(x) if x.dtype == object else (x != 0)
    return case(op, [e], {}, out=out_t("int64", np.argwhere(mask).astype(np.int64)))


FAMILIES = [
    ("split", mk_split, 0.16),
    ("flatten", mk_flatten, 0.13),
    ("repeat", mk_repeat, 0.11),
    ("flip_roll", mk_flip_roll, 0.14),
    ("triangle", mk_triangle, 0.14),
    ("nonzero", mk_nonzero, 0.11),
    ("unique", mk_unique, 0.12),
    ("one_hot", mk_one_hot, 0.07),
    ("big", mk_big, 0.01),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    g = Gen(args.seed)
    names = [f[0] for f in FAMILIES]
    weights = [f[2] for f in FAMILIES]
    counters = {n: 0 for n in names}
    plan = []
    for (n, _, w) in FAMILIES:
        plan += [n] * round(w * args.count)
    while len(plan) < args.count:
        plan.append(g.r.choices(names, weights)[0])
    plan = plan[: args.count]
    g.r.shuffle(plan)
    makers = dict((f[0], f[1]) for f in FAMILIES)
    cases = []
    for fam in plan:
        c = makers[fam](g, counters[fam])
        cases.append({"id": f"{fam}/{counters[fam]}", **c})
        counters[fam] += 1
    doc = {"format": FORMAT, "seed": args.seed, "count": len(cases), "families": counters,
           "cases": cases}
    text = json.dumps(doc, separators=(",", ":"))
    with gzip.open(args.out, "wt", compresslevel=9) as f:
        f.write(text)
    print(f"{args.out}: {len(cases)} cases, {len(text)} bytes of JSON; {counters}")


if __name__ == "__main__":
    main()
