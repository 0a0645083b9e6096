"""Random facade cases with NumPy as the oracle, for `tests/differential.rs`:
`python3 gen_facade_cases.py --seed S --count N --out FILE` (needs numpy; only to regenerate).

The outputs are committed and run by `cargo test -p genesis --test differential` on the CPU and,
in the GPU bundle, on CUDA; no Python is needed to run them:

    python3 gen_facade_cases.py --seed 16 --count 24000 --out data/facade-cases.json.gz
    python3 gen_facade_cases.py --seed 1016 --count 6000 --out data/facade-heldout.json.gz
    python3 gen_facade_cases.py --families unary_math,classify --seed 50 --count 3000 --out data/unary-cases.json.gz
    python3 gen_facade_cases.py --families unary_math,classify --seed 1050 --count 1000 --out data/unary-heldout.json.gz

The second set is held out: generated independently (another seed), not looked at while fixing
failures of the first.

Case format (`genesis-facade-cases v1`), one JSON object per case in `cases`:

    {"id": "binary/17", "op": "binary", "in": [T, ...], "args": {...},
     "out": T | [T, ...] | absent, "err": "Kind" | absent, "tol": [rtol, atol] | "eqv" | absent}

- A tensor `T` is `{"dt": dtype, "sh": shape, "d": data}`: row-major data of `sh` (bools 0/1;
  integers as JSON integers; floats as JSON integers when whole, below 2^53 and not -0.0, else as
  strings that Rust's `f64` parser reads exactly ("nan", "inf", "-inf", "-0.0", "0.1"), then
  rounded to the dtype: the generator checks that this gives the intended value). An input may
  add `"mk"`: `{"perm": p}` (the input is `permute(p)` of that tensor), `{"narrow": [dim, start,
  len]}`, `{"expand": shape}` or `{"t": 1}` (`transpose(0, 1)`): strided and broadcast operands.
- `op` is a facade method (the interpreter in `tests/common/facade.rs` maps it, with `args`, to
  the public API; see there for each op's arguments).
- `out` is the expected result (a list for ops giving several tensors: `max_dim` gives values
  and indices; in-place ops give the tensor after the op). `err` is the expected typed error
  where Genesis deliberately refuses (the error's Debug variant path, e.g.
  `Storage.UnsupportedDType`, `ShapeMismatch`, `Index.IndexOutOfRange`; `DimOutOfRange` for a
  dimension out of range, whichever layer reports it; `"A|B"` accepts either kind).
- `cuda_err`: the expected error on a CUDA device where the CPU gives `out`, for an op a CUDA
  device lacks (only `matmul` of the integer dtypes, which runs on the CPU only, as PyTorch's).
- Comparison: no `tol` means exact (same values, NaN matching any NaN, and the same sign of
  zero); `"eqv"` the same values with zeros of either sign equal; `[rtol, atol]` floats within
  `atol + rtol * |expected|` (NaN and infinities exactly; used for the transcendental ops and
  `pow`, within a few ulp of the dtype, and for sums, means and matmul, within the rounding of the
  result plus the f32 accumulation bound `n * 2^-24 * sum |terms|`).

Semantics: NumPy's, with PyTorch's where they differ or NumPy has none (bfloat16, computed as
float32 and rounded to nearest-even; integer sums are int64 and wrap; argmax/argmin give the first
extreme or the first NaN; `maximum`/`minimum` propagate NaN), and Genesis's documented choices
where neither defines the result: float-to-integer casts truncate and saturate with NaN to 0;
integer-to-bf16 casts round through float32 (as PyTorch's). Binary ops, comparisons and `where`
promote their operands by PyTorch's `torch.result_type` (`data/promotion.json`, PyTorch's own
table) and compute in the result dtype: uint8/int8/int16 wrap, bool `add` is "or" and `mul`
"and" (`sub` with a bool operand is `InvalidArgument`, PyTorch's), `div` of integers is float32, `pow` of integers is
exact and wraps as repeated multiplication (a negative exponent element gives 0, but 1 for a
base of 1 and -1 or 1 for a base of -1: PyTorch's integer pow), `pow` of bools is bool
(PyTorch's; NumPy's int8). float64 computes exactly in f64 on every device. Every dtype
sums (integers and bools to int64) and takes max/min; argmax/argmin refuse bools
(`Storage.UnsupportedDType`, PyTorch's; NumPy takes them); `mean` is for floats. Unary
ops: `neg`/`abs`/`relu` of integers wrap (of bools: `Storage.UnsupportedDType`), the float ops
of integers and bools give float32 (in place, or into an `out=` of the operand's dtype:
`InvalidArgument`, PyTorch's `can_cast`), float64 as above;
`matmul` is for float32/float16/bfloat16/float64 and, on the CPU only, int32/int64 (integers
exact and wrapping; on CUDA `Storage.UnsupportedDType`, as PyTorch's). `binary_scalar(op, s)`
takes `s` in the tensor's dtype (it must be representable: `ScalarOutOfRange`) as a 0-d tensor
of it; `pow_scalar` and `compare_scalar` take `s` as a Python float (an integer or bool tensor
computes in float32): pow's exponent must be representable in the result dtype, a compared
number converts as C++ converts (a float overflowing to an infinity: PyTorch's wrapped number,
where NumPy 2 raises). Fill values (`masked_fill`, `index_fill`) follow PyTorch's checked
conversion: a float into an integer dtype must lie in its range and drops its fraction, a float
dtype refuses a finite value beyond its largest, `bool` takes anything (non-zero is true), where
NumPy casts silently. PyTorch's rules where
NumPy has none: a 0-d tensor takes dimension 0 or -1 (`max_dim`, `squeeze`, `transpose`, sums);
`x ** 0.5` with a scalar exponent is `sqrt(x)` (NumPy agrees), with a tensor exponent C's `pow`;
`squeeze` of a dimension that is not 1 returns the tensor unchanged.

Index items in `args.items`: integers, `{"s": [start, stop, step]}` (nulls for defaults), `"new"`,
`"..."`, integer arrays on the host (`{"i64": [...]}`) or as device tensors (`{"t64": ...}`,
`{"t32": ...}`), boolean masks on the host (`{"mask": bits, "sh": shape}`) or on the device
(`{"tmask": ...}`).
"""
import argparse
import gzip
import json
import math
import os
import random

import numpy as np

FORMAT = "genesis-facade-cases v1"
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]
KERNEL = ["float32", "float16", "bfloat16", "int32", "int64"]  # elementwise/compare/reduce kernels
KFLOAT = ["float32", "float16", "bfloat16"]
MATMUL = ["float32", "float16", "bfloat16"]
HOST_MATMUL = ["float64", "uint8", "int8", "int16", "int32", "int64"]  # matmul by the host kernels on the CPU
CPU_ONLY_MATMUL = ["uint8", "int8", "int16", "int32", "int64"]  # matmul on the CPU only (as PyTorch's)
IRANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-2**15, 2**15 - 1),
          "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1), "bool": (0, 1)}
# Significand bits (with the implicit one), smallest normal, largest finite.
FINFO = {"float16": (11, 2.0**-14, 65504.0), "bfloat16": (8, 2.0**-126, 3.3895313892515355e38),
         "float32": (24, 2.0**-126, 3.4028234663852886e38), "float64": (53, 2.0**-1022, 1.7976931348623157e308)}
UNSUPPORTED = "Storage.UnsupportedDType"

_SHORT = {"bool": "bool", "u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32",
          "i64": "int64", "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "promotion.json")) as _f:
    _TABLE = json.load(_f)
PROMOTE = {(_SHORT[e["a"]], e["a_0d"], _SHORT[e["b"]], e["b_0d"]): _SHORT[e["result"]]
           for e in _TABLE["tensor_tensor"]}
PROMOTE_SCALAR = {(_SHORT[e["a"]], e["scalar"]): _SHORT[e["result"]] for e in _TABLE["tensor_scalar"]}


def promote(da, sa, db, sb):
    """torch.result_type of tensors of dtypes da, db and shapes sa, sb (0-d when empty)."""
    return PROMOTE[(da, len(sa) == 0, db, len(sb) == 0)]


def binary_err(op, r):
    """The typed error of op in result dtype r, or None."""
    if op == "sub" and r == "bool":
        return "InvalidArgument"
    return None


def op_dtype(op, r):
    """The dtype op computes and gives for operands promoting to r (true division: float32)."""
    return "float32" if op == "div" and r not in FLOATS else r


# ---------------------------------------------------------------------------------- dtypes

def bf16_round(x):
    """float64 array -> float64 array of the nearest bfloat16 values (ties to even)."""
    x = np.array(x, dtype=np.float64, copy=True).reshape(-1)
    bits = x.view(np.uint64)
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    r = (bits + np.uint64((1 << 44) - 1) + lsb) & np.uint64(~((1 << 45) - 1) & 0xFFFFFFFFFFFFFFFF)
    y = r.view(np.float64).copy()
    with np.errstate(all="ignore"):
        y = np.where(np.abs(y) >= 2.0**128, np.copysign(np.inf, x), y)
        small = np.abs(x) < 2.0**-126
        y = np.where(small, np.round(x * 2.0**133) * 2.0**-133, y)
        y = np.where(small & (y == 0), np.copysign(0.0, x), y)
    y[np.isnan(x)] = np.nan
    return y


def round_to(dt, x):
    """Values (any numeric array) rounded to float dtype `dt`, as float64."""
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    with np.errstate(all="ignore"):
        if dt == "float16":
            y = x.astype(np.float16).astype(np.float64)
        elif dt == "bfloat16":
            y = bf16_round(x)
        elif dt == "float32":
            y = x.astype(np.float32).astype(np.float64)
        else:
            y = x.copy()
    return np.asarray(y, dtype=np.float64).reshape(shape)


def wrap(dt, v):
    """Python int -> two's complement wrap into integer dtype `dt`."""
    lo, hi = IRANGE[dt]
    if dt == "bool":
        return int(v != 0)
    m = hi - lo + 1
    return (int(v) - lo) % m + lo


class A:
    """A tensor value: dtype name, shape, and data as a NumPy array (float64 for floats,
    object ints for integers, bool for bool)."""

    def __init__(self, dt, shape, data):
        self.dt, self.shape = dt, tuple(shape)
        if dt in FLOATS:
            self.a = np.asarray(data, dtype=np.float64).reshape(self.shape)
        elif dt == "bool":
            self.a = np.asarray(data, dtype=bool).reshape(self.shape)
        else:
            self.a = np.asarray(data, dtype=object).reshape(self.shape)

    def flat(self):
        return list(np.asarray(self.a).reshape(-1))


def fmt_float(dt, v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0.0:
        return "-0.0" if math.copysign(1.0, v) < 0 else 0
    if v == int(v) and abs(v) < 2.0**53:
        return int(v)
    # The shortest digits that come back to v through f64 and rounding to dt.
    for p in range(1, 18):
        s = "%.*g" % (p, v)
        if float(round_to(dt, np.array([float(s)]))[0]) == v:
            return s
    return repr(v)


def enc(t):
    if t.dt in FLOATS:
        d = [fmt_float(t.dt, v) for v in t.flat()]
    elif t.dt == "bool":
        d = [int(bool(v)) for v in t.flat()]
    else:
        d = [int(v) for v in t.flat()]
    return {"dt": t.dt, "sh": list(t.shape), "d": d}


# ---------------------------------------------------------------------------------- random data

class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)

    def shape(self, max_rank=4, max_numel=48, zero=0.06):
        r = self.r
        rank = r.choice([0, 1, 1, 2, 2, 2, 3, 3, 4][: max_rank * 2 + 1])
        while True:
            s = [r.choice([1, 1, 2, 2, 3, 3, 4, 5]) for _ in range(rank)]
            if s and r.random() < zero:
                s[r.randrange(rank)] = 0
            if int(np.prod(s)) <= max_numel:
                return s

    def big(self, dt):
        """A larger operand (past the GPU's batched small-op size of 2048 elements and over
        several reduction blocks), with compact data: (shape, A)."""
        r = self.r
        shape = r.choice([[3000], [48, 65], [2, 1100], [5, 7, 90], [4100], [70, 70]])
        n = int(np.prod(shape))
        if dt in FLOATS:
            vals = [r.randint(-64, 64) / 16.0 for _ in range(n)]
        elif dt == "bool":
            vals = [r.random() < 0.5 for _ in range(n)]
        else:
            lo, hi = IRANGE[dt]
            vals = [r.randint(max(lo, -99), min(hi, 99)) for _ in range(n)]
        return shape, A(dt, shape, vals)

    def float_values(self, dt, n, specials=True, heavy=False):
        r = self.r
        nbits, tiny, big = FINFO[dt]
        style = r.random()
        out = []
        for _ in range(n):
            k = r.random()
            if specials and k < (0.25 if heavy else 0.08):
                v = r.choice([math.nan, math.inf, -math.inf, -0.0, 0.0, big, -big, tiny, -tiny,
                              tiny / 4, -tiny / 2 ** (nbits - 2), 1.0, -1.0, 0.5])
            elif style < 0.3:
                v = float(r.randint(-8, 8))
            elif style < 0.5:
                v = r.randint(-64, 64) / 16.0
            else:
                v = r.gauss(0, 1) * 10.0 ** r.uniform(-3, 3)
            out.append(v)
        return list(round_to(dt, np.array(out, dtype=np.float64)))

    def int_values(self, dt, n, extremes=True):
        r = self.r
        lo, hi = IRANGE[dt]
        out = []
        style = r.random()
        for _ in range(n):
            k = r.random()
            if extremes and k < 0.12:
                v = r.choice([lo, hi, lo + 1, hi - 1, 0, wrap(dt, -1), 1])
            elif style < 0.5:
                v = r.randint(max(lo, -10), min(hi, 10))
            else:
                v = r.randint(lo, hi)
            out.append(v)
        return out

    def values(self, dt, n, **kw):
        if dt in FLOATS:
            return self.float_values(dt, n, **{k: v for k, v in kw.items() if k in ("specials", "heavy")})
        if dt == "bool":
            return [self.r.random() < 0.5 for _ in range(n)]
        return self.int_values(dt, n, **{k: v for k, v in kw.items() if k == "extremes"})

    def tensor(self, dt, shape, **kw):
        return A(dt, shape, self.values(dt, int(np.prod(shape)), **kw))

    def operand(self, dt, shape, **kw):
        """An input of logical `shape`, sometimes made as a strided or broadcast view.
        Returns (encoded input, A of the logical value)."""
        r = self.r
        k = r.random()
        rank = len(shape)
        if k < 0.15 and rank >= 2:
            perm = list(range(rank))
            r.shuffle(perm)
            inv = [perm.index(i) for i in range(rank)]
            base_shape = [shape[inv[i]] for i in range(rank)]
            # permute(perm) of base gives shape[i] = base_shape[perm[i]]
            base_shape = [0] * rank
            for i in range(rank):
                base_shape[perm[i]] = shape[i]
            base = self.tensor(dt, base_shape, **kw)
            e = enc(base)
            e["mk"] = {"perm": perm}
            return e, A(dt, shape, np.transpose(base.a, perm))
        if k < 0.25 and rank >= 1:
            d = r.randrange(rank)
            extra_before, extra_after = r.randint(0, 2), r.randint(0, 2)
            base_shape = list(shape)
            base_shape[d] += extra_before + extra_after
            if int(np.prod(base_shape)) <= 96:
                base = self.tensor(dt, base_shape, **kw)
                e = enc(base)
                e["mk"] = {"narrow": [d, extra_before, shape[d]]}
                sl = [slice(None)] * rank
                sl[d] = slice(extra_before, extra_before + shape[d])
                return e, A(dt, shape, base.a[tuple(sl)])
        if k < 0.33 and rank >= 1 and any(s != 1 for s in shape):
            # a broadcast view: some dimensions of size 1 expanded, maybe fewer leading dims
            base_shape = [1 if (s != 1 and r.random() < 0.5) else s for s in shape]
            lead = r.randint(0, rank)
            while lead > 0 and all(s == 1 for s in base_shape[:lead]) and r.random() < 0.5:
                base_shape = base_shape[1:]
                lead -= 1
            base = self.tensor(dt, base_shape, **kw)
            e = enc(base)
            e["mk"] = {"expand": list(shape)}
            return e, A(dt, shape, np.broadcast_to(base.a, shape))
        t = self.tensor(dt, shape, **kw)
        return enc(t), t


# ---------------------------------------------------------------------------------- reference ops

def f32_compute(dt, fn, *xs):
    """fn over float32 arrays (the kernels' computation for f32/f16/bf16), rounded to dt."""
    with np.errstate(all="ignore"):
        ys = [np.asarray(x, dtype=np.float64).astype(np.float32) for x in xs]
        out = fn(*ys)
    return round_to(dt, np.asarray(out, dtype=np.float64))


def f64_exact(dt, fn, *xs):
    """fn over float64 (the 'exact' value for transcendental ops), rounded to dt."""
    with np.errstate(all="ignore"):
        out = fn(*[np.asarray(x, dtype=np.float64) for x in xs])
    return round_to(dt, np.asarray(out, dtype=np.float64))


def ulp_tol(dt, ulps):
    nbits, tiny, _ = FINFO[dt]
    return [ulps * 2.0 ** (1 - nbits), tiny]


def np_max(a, b):
    with np.errstate(all="ignore"):
        return np.maximum(a, b)


def np_min(a, b):
    with np.errstate(all="ignore"):
        return np.minimum(a, b)


BIN_F = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
         "maximum": np_max, "minimum": np_min}


def int_pow(dt, x, y):
    """PyTorch's integer pow in dtype dt: x ** y wrapped (the residue modulo 2^bits of the
    exact power); a negative y gives 0, but 1 for x == 1 and -1 or 1 (odd or even y) for -1."""
    if y < 0:
        return 1 if x == 1 else ((-1 if y % 2 else 1) if x == -1 else 0)
    lo, hi = IRANGE[dt]
    return pow(x, y, hi - lo + 1)


def int_binary(op, dt, a, b):
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "maximum": max, "minimum": min, "pow": lambda x, y: int_pow(dt, x, y)}[op]
    a, b = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        out[idx] = wrap(dt, fn(int(a[idx]), int(b[idx])))
    return out


def binary_ref(op, dt, a, b, scalar=False):
    """(value array, tol) of op(a, b) in dtype dt, or raises KeyError for unsupported."""
    if dt in KFLOAT:
        if op == "pow":
            # NumPy computes x ** 0.5 with a 0-d exponent as sqrt (as PyTorch's pow with a
            # scalar exponent does); with tensors, C's pow (as PyTorch's pow of two tensors).
            def pw(x, y):
                if scalar:
                    return np.power(x, float(y))
                return np.vectorize(c_pow, otypes=[np.float64])(x, y)
            return f64_exact(dt, pw, a, b), ulp_tol(dt, 8)
        return f32_compute(dt, BIN_F[op], a, b), None
    if dt == "float64":
        if op == "pow":
            def pw64(x, y):
                if scalar:
                    return np.power(x, float(y))
                return np.vectorize(c_pow, otypes=[np.float64])(x, y)
            return f64_exact(dt, pw64, a, b), ulp_tol(dt, 8)
        return f64_exact(dt, BIN_F[op], a, b), None
    return int_binary(op, dt, a, b), None


def c_pow(x, y):
    """C's pow (IEEE 754's special cases), which NumPy's power replaces by sqrt for an exponent
    of 0.5 even when it is an array of one element."""
    x, y = float(x), float(y)
    odd = math.isfinite(y) and y == int(y) and int(y) % 2 == 1
    try:
        return math.pow(x, y)
    except ValueError:
        if x == 0.0 and y < 0:
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan
    except OverflowError:
        return -math.inf if (x < 0 and odd) else math.inf


def sigmoid64(x):
    with np.errstate(all="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


UN_EXACT = {"neg": np.negative, "abs": np.abs,
            "relu": lambda x: np.where(np.isnan(x) | (x > 0), x, 0.0).astype(x.dtype),
            "sqrt": np.sqrt}
UN_TRANS = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": sigmoid64}


def unary_ref(op, dt, a):
    if dt in KFLOAT:
        if op in UN_EXACT:
            return f32_compute(dt, UN_EXACT[op], a), None
        return f64_exact(dt, UN_TRANS[op], a), ulp_tol(dt, 8)
    if dt == "float64":
        if op in UN_EXACT:
            return f64_exact(dt, UN_EXACT[op], a), None
        return f64_exact(dt, UN_TRANS[op], a), ulp_tol(dt, 8)
    fn = {"neg": lambda x: -x, "abs": abs, "relu": lambda x: max(x, 0)}[op]
    out = np.empty(np.shape(a), dtype=object)
    for idx in np.ndindex(np.shape(a)):
        out[idx] = wrap(dt, fn(int(a[idx])))
    return out, None


CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}


def cmp_ref(op, dt, a, b):
    if dt in FLOATS:
        with np.errstate(all="ignore"):
            return CMP[op](np.asarray(a, np.float64), np.asarray(b, np.float64))
    x, y = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    out = np.empty(x.shape, dtype=bool)
    for idx in np.ndindex(x.shape):
        out[idx] = bool(CMP[op](int(x[idx]), int(y[idx])))
    return out


def representable(v, dt):
    """Storage::scalar's rule."""
    if dt == "bool":
        return v == 0.0 or v == 1.0
    if dt in INTS:
        lo, hi = IRANGE[dt]
        return math.isfinite(v) and v == int(v) and lo <= v <= hi and not (dt == "int64" and v >= 2.0**63)
    if dt == "float64" or not math.isfinite(v):
        return True
    return math.isfinite(float(round_to(dt, np.array([v]))[0]))


FMAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}


def checked_ok(v, dt):
    """PyTorch's checked conversion of a Python float (`Scalar::to`, for fills): `bool` takes
    anything; an integer dtype a finite value within its range (the fraction is then dropped);
    a float dtype anything but a finite value beyond its largest."""
    if dt == "bool":
        return True
    if dt in INTS:
        lo, hi = IRANGE[dt]
        return math.isfinite(v) and lo <= v < hi + 1
    if dt == "float64" or not math.isfinite(v):
        return True
    return abs(v) <= FMAX[dt]


def checked_in(dt, v):
    """A Python float converted by `checked_ok`'s rule (non-zero and NaN are true)."""
    if dt == "bool":
        return bool(v != 0.0) or math.isnan(v)
    if dt in INTS:
        return int(math.trunc(v))
    return float(round_to(dt, np.array([v]))[0])


def scalar_in(dt, v):
    """The scalar converted to dt (as a value of A's storage type)."""
    if dt in FLOATS:
        return float(round_to(dt, np.array([v]))[0])
    if dt == "bool":
        return bool(v)
    return int(v)


def cast_ref(src, dst, a):
    """to_dtype: Genesis's documented conversion."""
    flat = list(np.asarray(a).reshape(-1))
    shape = np.shape(a)
    if dst == "bool":
        out = [bool(v != 0) if not (isinstance(v, float) and math.isnan(v)) else True for v in flat]
        return np.array(out, dtype=bool).reshape(shape)
    if dst in INTS:
        lo, hi = IRANGE[dst]
        out = []
        for v in flat:
            if src in FLOATS:
                v = float(v)
                if math.isnan(v):
                    out.append(0)
                elif v >= hi:
                    out.append(hi)
                elif v <= lo:
                    out.append(lo)
                else:
                    out.append(int(v))  # truncation
            else:
                out.append(wrap(dst, int(v)))
        return np.array(out, dtype=object).reshape(shape)
    # float destination
    if src in FLOATS:
        vals = np.array([float(v) for v in flat], dtype=np.float64)
        return round_to(dst, vals).reshape(shape)
    ints = [int(v) for v in flat]
    # i64 -> f32 is correctly rounded; to f16/bf16 the value goes through f32 first
    f32 = np.array([float(np.array([i], dtype=np.int64).astype(np.float32)[0]) for i in ints],
                   dtype=np.float64).reshape(shape)
    if dst in ("bfloat16", "float16", "float32"):
        return round_to(dst, f32)
    return np.array([float(i) for i in ints], dtype=np.float64).reshape(shape)  # correctly rounded


# ---------------------------------------------------------------------------------- case makers

def out_t(dt, arr):
    arr = np.asarray(arr)
    return enc(A(dt, arr.shape, arr.reshape(-1) if arr.size else []))


def broadcast_shapes(g, shape, n):
    """n operand shapes that broadcast to `shape`."""
    r = g.r
    outs = []
    for _ in range(n):
        s = list(shape)
        drop = r.randint(0, len(s)) if r.random() < 0.3 else 0
        s = s[drop:]
        s = [1 if r.random() < 0.25 else d for d in s]
        outs.append(s)
    return outs


def bad_broadcast(g, shape):
    """A shape that does not broadcast with `shape` (or None when every size is 1)."""
    cand = [i for i, d in enumerate(shape) if d != 1]
    if not cand:
        return None
    i = g.r.choice(cand)
    s = list(shape)
    s[i] = shape[i] + g.r.choice([1, 2])
    if s[i] == 1:
        s[i] = 3
    if g.r.random() < 0.5:
        s = s[i:]  # fewer dimensions, still misaligned
    try:
        np.broadcast_shapes(tuple(shape), tuple(s))
    except ValueError:
        return s
    return None


def mk_binary(g, i):
    r = g.r
    op = r.choice(["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
    dt = r.choice(KERNEL * 3 + DTYPES)
    shape = g.shape()
    sa, sb = broadcast_shapes(g, shape, 2)
    kind = r.random()
    heavy = r.random() < 0.3
    ea, a = g.operand(dt, sa, heavy=heavy)
    eb, b = g.operand(dt, sb, heavy=heavy)
    case = {"op": "binary", "args": {"op": op}, "in": [ea, eb]}
    res = dt
    a0, b0 = a, b
    if kind < 0.05:
        # Operands of two dtypes: promoted as PyTorch does (converted to the result dtype).
        other = r.choice([d for d in DTYPES if d != dt])
        eb, b0 = g.operand(other, sb, heavy=heavy)
        case["in"][1] = eb
        res = promote(dt, sa, other, sb)
        a, b = A(res, sa, cast_ref(dt, res, a.a)), A(res, sb, cast_ref(other, res, b0.a))
    elif kind < 0.1:
        bad = bad_broadcast(g, sa)
        if bad is not None:
            eb2, _ = g.operand(dt, bad)
            case["in"][1] = eb2
            case["err"] = "ShapeMismatch"
            return case
    err = binary_err(op, res)
    if op == "sub" and "bool" in (a0.dt, b0.dt):
        err = "InvalidArgument"  # PyTorch refuses subtraction with any bool operand
    if err:
        case["err"] = err
        return case
    if op == "pow" and res == "bool":
        # bool ** bool is bool (PyTorch's): x ** False is True, x ** True is x.
        val = np.logical_or(a.a, np.logical_not(b.a))
        case["out"] = out_t(res, np.broadcast_to(val, np.broadcast_shapes(tuple(sa), tuple(sb))))
        return case
    if op == "pow" and res not in FLOATS:
        # Integer pow, exact. Returned here, before the draw of a big case below, so that the
        # random stream (and every other case) is what it was when integer pow was an error.
        val, _ = binary_ref(op, res, a.a, b.a)
        case["out"] = out_t(res, np.broadcast_to(val, np.broadcast_shapes(tuple(sa), tuple(sb))))
        return case
    odt = op_dtype(op, res)
    if odt != res:
        # True division converts integer operands straight to float32 (PyTorch's
        # promote_integer_inputs_to_float), not through the integer result dtype.
        a, b = A(odt, sa, cast_ref(a0.dt, odt, a0.a)), A(odt, sb, cast_ref(b0.dt, odt, b0.a))
    if kind >= 0.05 and odt == dt and r.random() < 0.007:
        sa, a = g.big(dt)
        sb, b = (sa, g.big(dt)[1]) if r.random() < 0.5 else ([1] * (len(sa) - 1) + [sa[-1]], None)
        if b is None or b.shape != tuple(sa):
            b = g.tensor(dt, sb)
            sb = list(b.shape)
        case["in"] = [enc(a), enc(b)]
    val, tol = binary_ref(op, odt, a.a, b.a)
    val = np.broadcast_to(val, np.broadcast_shapes(tuple(sa), tuple(sb)))
    case["out"] = out_t(odt, val)
    if tol:
        case["tol"] = tol
    return case


def mk_binary_inplace(g, i):
    """binary_ (in place) and binary_out: the result into a given tensor."""
    r = g.r
    op = r.choice(["add", "sub", "mul", "div", "maximum", "minimum"])
    dt = r.choice(KERNEL)
    shape = g.shape()
    (sb,) = broadcast_shapes(g, shape, 1)
    a = g.tensor(dt, shape)
    eb, b = g.operand(dt, sb)
    form = r.choice(["binary_", "binary_out"])
    case = {"op": form, "args": {"op": op}, "in": [enc(a), eb]}
    if op == "div" and dt not in KFLOAT:
        # The float32 quotient of integers goes neither into an integer tensor in place nor
        # into an integer `out=` (PyTorch's `can_cast`).
        case["err"] = "InvalidArgument"
        return case
    val, tol = binary_ref(op, dt, a.a, b.a)
    case["out"] = out_t(dt, np.broadcast_to(val, tuple(shape)))
    return case


def mk_scalar(g, i):
    r = g.r
    dt = r.choice(KERNEL * 3 + DTYPES)
    shape = g.shape()
    ea, a = g.operand(dt, shape, heavy=r.random() < 0.3)
    if r.random() < 0.6:
        op = r.choice(["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
        fam = "binary_scalar"
    else:
        op = r.choice(list(CMP))
        fam = "compare_scalar"
    k = r.random()
    if k < 0.5:
        s = float(r.randint(-5, 5))
    elif k < 0.65:
        s = r.choice([0.5, -2.5, 1e-3, 0.1])
    elif k < 0.8:
        s = r.choice([math.nan, math.inf, -math.inf, -0.0, 1e6, 70000.0, 1e39, 3e38])
    else:
        if dt in IRANGE:
            lo, hi = IRANGE[dt]
            s = float(r.choice([lo, hi, lo - 1, hi + 1, 2**63, -2**63, 2**31, 256, -129]))
        else:
            s = r.choice([65504.0, 65520.0, 1e300, 5e-324])
    if op == "pow" and fam == "binary_scalar" and r.random() < 0.5:
        s = r.choice([2.0, 0.5, 3.0, -1.0, 0.0, 1.0])
    case = {"op": fam, "args": {"op": op, "scalar": fmt_float("float64", s)}, "in": [ea]}
    # binary_scalar takes the scalar in the tensor's dtype; pow_scalar and compare_scalar take
    # it as a Python float (integer and bool tensors compute in float32).
    promoting = op == "pow" or fam == "compare_scalar"
    res = PROMOTE_SCALAR[(dt, "float")] if promoting else dt
    # A compared number converts as C++ converts (overflowing to an infinity: PyTorch's wrapped
    # number); pow's exponent and binary_scalar's operand must be representable.
    if fam != "compare_scalar" and not representable(s, res):
        case["err"] = "ScalarOutOfRange"
        return case
    sv = scalar_in(res, s)
    x = cast_ref(dt, res, a.a)
    if fam == "binary_scalar":
        err = binary_err(op, res)
        if err:
            case["err"] = err
            return case
        odt = op_dtype(op, res)
        if odt != res:
            x = cast_ref(res, odt, x)
            sv = float(cast_ref(res, odt, np.array([sv], dtype=object))[0])
        bs = np.full((), sv, dtype=np.float64 if odt in FLOATS else object)
        val, tol = binary_ref(op, odt, x, bs, scalar=True)
        case["out"] = out_t(odt, np.broadcast_to(val, tuple(shape)))
        if tol:
            case["tol"] = tol
    else:
        odt = res
        bs = np.full((), sv, dtype=np.float64 if res in FLOATS else object)
        case["out"] = out_t("bool", np.broadcast_to(cmp_ref(op, res, x, bs), tuple(shape)))
    return case


def mk_unary(g, i):
    r = g.r
    op = r.choice(["neg", "abs", "relu", "exp", "log", "sqrt", "tanh", "sigmoid"])
    dt = r.choice(KERNEL * 3 + DTYPES)
    shape = g.shape()
    ea, a = g.operand(dt, shape, heavy=r.random() < 0.4)
    form = r.choice(["unary", "unary", "unary_", "unary_out"])
    if form != "unary":
        a = g.tensor(dt, shape, heavy=r.random() < 0.4)
        ea = enc(a)
    case = {"op": form, "args": {"op": op}, "in": [ea]}
    float_op = op not in ("neg", "abs", "relu")
    if form == "unary_out" and float_op and dt not in FLOATS:
        # `out=` has the operand's dtype: the float32 result of an integer or bool does not
        # cast into it (PyTorch's `can_cast`).
        case["err"] = "InvalidArgument"
        return case
    elif dt == "bool" and not float_op:
        case["err"] = UNSUPPORTED
        return case
    elif float_op and dt not in FLOATS and form == "unary_":
        # The float32 result cannot go into an integer or bool tensor.
        case["err"] = "InvalidArgument"
        return case
    odt = "float32" if float_op and dt not in FLOATS else dt
    if odt == dt and r.random() < 0.007:
        shape, a = g.big(dt)
        case["in"] = [enc(a)]
    x = cast_ref(dt, odt, a.a) if odt != dt else a.a
    val, tol = unary_ref(op, odt, x)
    case["out"] = out_t(odt, val)
    if tol:
        case["tol"] = tol
    return case


def mk_compare(g, i):
    r = g.r
    op = r.choice(list(CMP))
    dt = r.choice(KERNEL * 3 + DTYPES)
    shape = g.shape()
    sa, sb = broadcast_shapes(g, shape, 2)
    ea, a = g.operand(dt, sa, heavy=r.random() < 0.4)
    if r.random() < 0.3 and a.a.size:
        # compare against (some of) the same values: equality actually happens
        b = A(dt, sa, a.a.copy())
        eb = enc(b)
        sb = sa
    else:
        eb, b = g.operand(dt, sb, heavy=r.random() < 0.4)
    case = {"op": "compare", "args": {"op": op}, "in": [ea, eb]}
    if r.random() < 0.05:
        bad = bad_broadcast(g, sa)
        if bad is not None:
            case["in"][1], _ = g.operand(dt, bad)
            case["err"] = "ShapeMismatch"
            return case
    res = dt
    if r.random() < 0.15:
        # Operands of two dtypes: compared in their promoted dtype.
        other = r.choice([d for d in DTYPES if d != dt])
        eb, b = g.operand(other, sb, heavy=r.random() < 0.4)
        case["in"][1] = eb
        res = promote(dt, sa, other, sb)
        a, b = A(res, sa, cast_ref(dt, res, a.a)), A(res, sb, cast_ref(other, res, b.a))
    case["out"] = out_t("bool", cmp_ref(op, res, a.a, b.a))
    return case


def mk_where(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    shape = g.shape()
    sc, sa, sb = broadcast_shapes(g, shape, 3)
    ec, c = g.operand("bool", sc)
    ea, a = g.operand(dt, sa, heavy=True)
    eb, b = g.operand(dt, sb, heavy=True)
    case = {"op": "where", "in": [ec, ea, eb], "args": {}}
    k = r.random()
    if k < 0.04:
        case["in"][0], _ = g.operand(r.choice(["uint8", "int32", "float32"]), sc)
        case["err"] = "InvalidArgument"
        return case
    res = dt
    if k < 0.12:
        # Values of two dtypes: promoted as PyTorch does.
        other = r.choice([d for d in DTYPES if d != dt])
        case["in"][2], b = g.operand(other, sb, heavy=True)
        res = promote(dt, sa, other, sb)
        a, b = A(res, sa, cast_ref(dt, res, a.a)), A(res, sb, cast_ref(other, res, b.a))
    out = np.where(c.a, a.a, b.a)
    case["out"] = out_t(res, out)
    return case


# --- reductions

def red_tol(dt, absum, n):
    """[rtol, atol]: the result's rounding plus the f32 accumulation bound."""
    nbits, tiny, _ = FINFO[dt]
    return [2.0 ** (1 - nbits), float(n) * 2.0**-24 * absum + tiny]


def mk_reduce(g, i):
    r = g.r
    op = r.choice(["sum", "sum", "mean", "max", "min", "argmax", "argmin", "max_dim", "min_dim",
                   "argmax_dim", "argmin_dim"])
    dt = r.choice(KERNEL * 4 + DTYPES)
    shape = g.shape(max_rank=4, max_numel=64, zero=0.1)
    heavy = r.random() < 0.25
    if dt in FLOATS and op in ("sum", "mean"):
        a = A(dt, shape, g.float_values(dt, int(np.prod(shape)), specials=heavy, heavy=False))
        # no largest-magnitude values in sums: the order of accumulation would decide overflow
        a.a = np.where(np.abs(a.a) > 1e4, np.sign(a.a) * 3.0, a.a)
        a.a = np.where(np.isinf(a.a) & (r.random() < 0.5), 1.0, a.a)
        if not heavy:
            a.a = np.where(np.isfinite(a.a), a.a, 2.0)
        ea = enc(a)
        if r.random() < 0.3 and len(shape) >= 2:
            perm = list(range(len(shape)))
            r.shuffle(perm)
            ea["mk"] = {"perm": perm}
            a = A(dt, np.transpose(a.a, perm).shape, np.transpose(a.a, perm))
        shape = list(a.shape)
    elif r.random() < 0.015:
        shape, a = g.big(dt)
        ea = enc(a)
        shape = list(shape)
    else:
        ea, a = g.operand(dt, shape, heavy=heavy)
    rank = len(shape)
    case = {"op": op, "in": [ea], "args": {}}
    x = a.a
    if op in ("sum", "mean", "max", "min"):
        if r.random() < 0.3:
            dims = None
        elif rank == 0:
            dims = r.choice([[], [0], [-1]])  # a 0-d tensor takes dim 0 or -1 (PyTorch's rule)
        else:
            k = r.randint(0, rank)
            dims = sorted(r.sample(range(rank), k))
            dims = [d - rank if r.random() < 0.3 else d for d in dims]
        keep = r.random() < 0.4
        if dims is not None and r.random() < 0.04 and rank > 0:
            dims = dims + [rank + r.randint(0, 1)]
            case["args"] = {"dims": dims, "keepdim": keep}
            case["err"] = "DimOutOfRange"
            return case
        if dims is not None and r.random() < 0.03 and rank > 0:
            d = r.randrange(rank)
            case["args"] = {"dims": [d, d - rank], "keepdim": keep}
            case["err"] = "InvalidArgument"
            return case
        case["args"] = {"dims": dims, "keepdim": keep}
        axes = tuple(range(rank)) if not dims or rank == 0 else tuple(sorted(d % rank for d in dims))
        if dims is None or rank == 0:
            keep = False
        red_empty = any(shape[d] == 0 for d in axes)
        if op in ("max", "min") and red_empty:
            case["err"] = "InvalidArgument"
            return case
        if op == "mean" and dt not in FLOATS:
            case["err"] = UNSUPPORTED
            return case
        n = int(np.prod([shape[d] for d in axes])) if axes else 1
        if dt in FLOATS:
            with np.errstate(all="ignore"):
                if op in ("sum", "mean"):
                    s = np.sum(x, axis=axes, keepdims=keep)
                    if op == "mean":
                        s = np.asarray(s, dtype=np.float64) / n if n else np.full(np.shape(s), np.nan)
                    absum = np.sum(np.where(np.isfinite(x), np.abs(x), 0.0), axis=axes)
                    absum = float(np.max(absum)) if np.size(absum) else 0.0
                    if op == "mean" and n:
                        absum /= n
                    case["out"] = out_t(dt, round_to(dt, s))
                    case["tol"] = red_tol(dt, absum, n)
                    return case
                fn = np.max if op == "max" else np.min
                val = fn(x, axis=axes, keepdims=keep)
                case["out"] = out_t(dt, val)
                case["tol"] = "eqv"
                return case
        # integers
        xi = np.asarray(x, dtype=object)
        if op == "sum":
            s = np.asarray(np.sum(xi, axis=axes, keepdims=keep), dtype=object)
            s = np.vectorize(lambda v: wrap("int64", int(v)), otypes=[object])(s) if s.size else s
            case["out"] = out_t("int64", s)
            return case
        fn = np.max if op == "max" else np.min
        case["out"] = out_t(dt, np.asarray(fn(xi, axis=axes, keepdims=keep), dtype=object))
        return case
    # arg ops and max_dim/min_dim
    if op in ("argmax", "argmin"):
        if dt == "bool":
            case["err"] = UNSUPPORTED  # PyTorch has no argmax/argmin of bools
            return case
        if a.a.size == 0:
            case["err"] = "InvalidArgument"
            return case
        idx = arg_ref(op == "argmax", x.reshape(-1), dt)
        case["out"] = out_t("int64", np.array(idx, dtype=object))
        return case
    if rank == 0:
        d = r.choice([0, -1])
    else:
        d = r.randrange(-rank, rank)
    keep = r.random() < 0.4
    case["args"] = {"dim": d, "keepdim": keep}
    if r.random() < 0.04:
        case["args"]["dim"] = max(rank, 1) + r.randint(0, 2)
        # PyTorch refuses argmax/argmin of bools before it looks at the dim.
        case["err"] = UNSUPPORTED if dt == "bool" and op in ("argmax_dim", "argmin_dim") else "DimOutOfRange"
        return case
    if dt == "bool" and op in ("argmax_dim", "argmin_dim"):
        case["err"] = UNSUPPORTED  # PyTorch has no argmax/argmin of bools
        return case
    if rank == 0:
        # a 0-d tensor takes dim 0 or -1 (PyTorch's rule): its element, at index 0
        if op in ("max_dim", "min_dim"):
            case["out"] = [out_t(dt, x), out_t("int64", np.array(0, dtype=object))]
        else:
            case["out"] = out_t("int64", np.array(0, dtype=object))
        return case
    ax = d % rank
    if shape[ax] == 0:
        case["err"] = "InvalidArgument"
        return case
    is_max = op in ("max_dim", "argmax_dim")
    moved = np.moveaxis(x, ax, -1)
    out_shape = moved.shape[:-1]
    idx = np.empty(out_shape, dtype=object)
    vals = np.empty(out_shape, dtype=x.dtype)
    for j in np.ndindex(out_shape):
        k = arg_ref(is_max, moved[j], dt)
        idx[j] = k
        vals[j] = moved[j][k]
    if keep:
        idx = np.expand_dims(idx, ax)
        vals = np.expand_dims(vals, ax)
    if op in ("max_dim", "min_dim"):
        case["out"] = [out_t(dt, vals), out_t("int64", idx)]
        if dt in FLOATS:
            case["tol"] = "eqv"
    else:
        case["out"] = out_t("int64", idx)
    return case


def arg_ref(is_max, v, dt):
    v = list(v)
    if dt in FLOATS:
        for k, x in enumerate(v):
            if math.isnan(x):
                return k
    best = 0
    for k in range(1, len(v)):
        if (v[k] > v[best]) if is_max else (v[k] < v[best]):
            best = k
    return best


# --- matmul

def mk_matmul(g, i):
    r = g.r
    dt = r.choice(MATMUL * 5 + ["int32", "int64", "float64", "uint8"])
    form = r.choice(["matmul"] * 4 + ["bmm"])
    m, k, n = r.randint(0, 5), r.randint(0, 6), r.randint(0, 5)
    if r.random() < 0.8:
        m, k, n = max(m, 1), max(k, 1), max(n, 1)
    if form == "bmm":
        b = r.randint(0, 3)
        sa, sb = [b, m, k], [b, k, n]
    else:
        ra, rb = r.choice([1, 2, 2, 3, 4]), r.choice([1, 2, 2, 3, 4])
        batch = [r.choice([1, 2, 3]) for _ in range(max(ra, rb) - 2)]
        sa = [k] if ra == 1 else [d if r.random() < 0.7 else 1 for d in batch[len(batch) - (ra - 2):]] + [m, k]
        sb = [k] if rb == 1 else [d if r.random() < 0.7 else 1 for d in batch[len(batch) - (rb - 2):]] + [k, n]
    heavy = r.random() < 0.1
    vals = lambda s: A(dt, s, g.values(dt, int(np.prod(s)), specials=heavy) if dt in FLOATS else g.values(dt, int(np.prod(s))))
    a, b = vals(sa), vals(sb)
    if dt in FLOATS:
        a.a = np.where(np.abs(a.a) > 1e3, 7.0, a.a)
        b.a = np.where(np.abs(b.a) > 1e3, -5.0, b.a)
    ea, eb = enc(a), enc(b)
    if r.random() < 0.2 and len(sa) >= 2:
        # a transposed operand: the data holds the transpose
        ta = A(dt, list(sa[:-2]) + [sa[-1], sa[-2]], np.swapaxes(a.a, -1, -2))
        ea = enc(ta)
        ea["mk"] = {"perm": list(range(len(sa) - 2)) + [len(sa) - 1, len(sa) - 2]}
    case = {"op": form, "in": [ea, eb], "args": {}}
    kind = r.random()
    if kind < 0.06:
        eb2 = enc(A(dt, sb[:-2] + [k + 1, n] if len(sb) >= 2 else [k + 1], g.values(dt, int(np.prod(sb[:-2] + [k + 1, n] if len(sb) >= 2 else [k + 1])))))
        case["in"][1] = eb2
        case["err"] = "ShapeMismatch"
        return case
    if kind < 0.08 and form == "matmul":
        case["in"][0] = enc(A(dt, [], g.values(dt, 1)))
        case["err"] = "InvalidArgument"
        return case
    if kind < 0.1 and form == "bmm":
        case["in"][1] = enc(A(dt, sb[1:], g.values(dt, int(np.prod(sb[1:])))))
        case["err"] = "ShapeMismatch"
        return case
    try:
        np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    except ValueError:
        case["err"] = "ShapeMismatch"
        return case
    if dt not in MATMUL + HOST_MATMUL:
        case["err"] = UNSUPPORTED
        return case
    if dt in HOST_MATMUL:
        # NumPy's integer matmul wraps in the dtype, as PyTorch's CPU one. No random draw
        # here: the cases after this one stay those of the seed.
        if dt in CPU_ONLY_MATMUL:
            case["cuda_err"] = UNSUPPORTED
        with np.errstate(all="ignore"):
            exact = np.asarray(np.matmul(a.a, b.a))
            if dt != "float64":
                # Object (Python) integers: the exact sum, wrapped into the dtype.
                wrapped = [wrap(dt, v) for v in exact.reshape(-1)]
                exact = np.asarray(wrapped, dtype=object).reshape(exact.shape)
            case["out"] = out_t(dt, exact)
            if dt == "float64":
                absprod = np.matmul(np.where(np.isfinite(a.a), np.abs(a.a), 0), np.where(np.isfinite(b.a), np.abs(b.a), 0))
                mx = float(np.max(absprod)) if np.size(absprod) else 0.0
                case["tol"] = [2.0**-52, (k + 2) * 2.0**-52 * mx + 2.0**-1022]
        return case
    with np.errstate(all="ignore"):
        exact = np.matmul(a.a, b.a)
        absprod = np.matmul(np.where(np.isfinite(a.a), np.abs(a.a), 0), np.where(np.isfinite(b.a), np.abs(b.a), 0))
    case["out"] = out_t(dt, round_to(dt, exact))
    if form == "matmul" and r.random() < 0.15:
        case["op"] = "matmul_out"
    nbits, tiny, _ = FINFO[dt]
    mx = float(np.max(absprod)) if np.size(absprod) else 0.0
    case["tol"] = [2.0 ** (1 - nbits), k * 2.0**-24 * mx + tiny]
    return case


# --- cat / stack

def mk_cat(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    form = r.choice(["cat", "cat", "stack"])
    shape = g.shape(max_rank=4, max_numel=24, zero=0.1)
    rank = len(shape)
    cnt = r.randint(1, 4)
    case = {"op": form, "in": [], "args": {}}
    if form == "cat":
        if rank == 0:
            shape, rank = [2], 1
        d = r.randrange(rank)
        parts = []
        for _ in range(cnt):
            s = list(shape)
            s[d] = r.randint(0, 3)
            parts.append(s)
        arrs = []
        for s in parts:
            e, t = g.operand(dt, s, heavy=True)
            case["in"].append(e)
            arrs.append(t.a)
        dim = d - rank if r.random() < 0.3 else d
        case["args"]["dim"] = dim
        k = r.random()
        if k < 0.05 and cnt > 1:
            # Mixed dtypes promote (`torch.cat`): every part is cast to the promoted dtype.
            dt2 = r.choice([x for x in DTYPES if x != dt])
            t2 = g.tensor(dt2, parts[1])
            case["in"][1] = enc(t2)
            res = promote(dt, [1], dt2, [1])
            arrs[1] = t2.a
            cast = [cast_ref(dt2 if j == 1 else dt, res, a) for j, a in enumerate(arrs)]
            case["out"] = out_t(res, np.concatenate(cast, axis=d))
            return case
        if k < 0.1 and cnt > 1 and rank > 1:
            s = list(parts[1])
            o = r.choice([j for j in range(rank) if j != d])
            s[o] += 1
            case["in"][1] = enc(g.tensor(dt, s))
            case["err"] = "ShapeMismatch"
            return case
        if k < 0.13:
            case["args"]["dim"] = rank + r.randint(0, 1)
            case["err"] = "DimOutOfRange"
            return case
        case["out"] = out_t(dt, np.concatenate(arrs, axis=d))
        return case
    arrs = []
    for _ in range(cnt):
        e, t = g.operand(dt, shape, heavy=True)
        case["in"].append(e)
        arrs.append(t.a)
    d = r.randint(-(rank + 1), rank)
    case["args"]["dim"] = d
    k = r.random()
    if k < 0.05 and cnt > 1 and rank > 0:
        s = list(shape)
        s[r.randrange(rank)] += 1
        case["in"][1] = enc(g.tensor(dt, s))
        case["err"] = "ShapeMismatch"
        return case
    if k < 0.08:
        case["args"]["dim"] = rank + 1 + r.randint(0, 1)
        case["err"] = "DimOutOfRange"
        return case
    case["out"] = out_t(dt, np.stack(arrs, axis=d))
    return case


# --- views

def mk_view(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["reshape", "reshape", "view", "permute", "transpose", "t", "narrow", "squeeze",
                   "unsqueeze", "expand", "flatten", "contiguous", "index", "index", "index"])
    shape = g.shape(max_rank=4, max_numel=48, zero=0.08)
    ea, a = g.operand(dt, shape, heavy=True)
    x = a.a
    rank = len(shape)
    case = {"op": op, "in": [ea], "args": {}}
    n = x.size
    if op in ("reshape", "view"):
        # a random factorisation of n (with one -1 sometimes)
        if n == 0:
            new = [0] + [r.choice([1, 2, 3]) for _ in range(r.randint(0, 2))]
            r.shuffle(new)
        else:
            new, m = [], n
            for p in [2, 2, 3, 5, 7, 2, 3]:
                while m % p == 0 and r.random() < 0.5:
                    new.append(p)
                    m //= p
            new.append(m)
            r.shuffle(new)
            if r.random() < 0.3:
                new.insert(r.randint(0, len(new)), 1)
        spec = list(new)
        if spec and n > 0 and r.random() < 0.3:
            spec[r.randrange(len(spec))] = -1
        if r.random() < 0.06 and n > 0:
            spec = list(new) + [2]
            case["args"]["shape"] = spec
            case["err"] = "Storage.Layout.ElementCount"
            return case
        case["args"]["shape"] = spec
        if op == "view" and not viewable(ea, shape, new):
            case["err"] = "Storage.Layout.NotViewable"
            return case
        case["out"] = out_t(dt, x.reshape(new))
        return case
    if op == "permute":
        perm = list(range(rank))
        r.shuffle(perm)
        if r.random() < 0.06:
            perm = perm + [rank] if r.random() < 0.5 else ([0] * max(rank, 2) if rank else [1])
            case["args"]["perm"] = perm
            case["err"] = "Storage.Layout.BadPermutation|InvalidArgument|DimOutOfRange"
            return case
        case["args"]["perm"] = perm
        case["out"] = out_t(dt, np.transpose(x, perm))
        return case
    if op == "transpose":
        if rank == 0:
            case["args"] = {"a": r.choice([0, -1]), "b": r.choice([0, -1])}
            case["out"] = out_t(dt, x)  # PyTorch's rule for 0-d tensors
            return case
        a1, b1 = r.randrange(-rank, rank), r.randrange(-rank, rank)
        case["args"] = {"a": a1, "b": b1}
        case["out"] = out_t(dt, np.swapaxes(x, a1, b1))
        return case
    if op == "t":
        if rank > 2:
            case["err"] = "InvalidArgument"  # PyTorch: t() expects <= 2 dimensions
            return case
        case["out"] = out_t(dt, x if rank < 2 else np.swapaxes(x, 0, 1))
        return case
    if op == "narrow":
        if rank == 0:
            case["args"] = {"dim": 0, "start": 0, "len": 1}
            case["err"] = "DimOutOfRange"
            return case
        d = r.randrange(-rank, rank)
        size = shape[d % rank]
        start = r.randint(0, size)
        ln = r.randint(0, size - start)
        if r.random() < 0.06:
            ln = size - start + 1
            case["args"] = {"dim": d, "start": start, "len": ln}
            case["err"] = "Storage.Layout.RangeOutOfBounds"
            return case
        case["args"] = {"dim": d, "start": start, "len": ln}
        sl = [slice(None)] * rank
        sl[d % rank] = slice(start, start + ln)
        case["out"] = out_t(dt, x[tuple(sl)])
        return case
    if op == "squeeze":
        if rank == 0:
            case["args"] = {"dim": r.choice([0, -1])}
            case["out"] = out_t(dt, x)  # PyTorch's rule for 0-d tensors
            return case
        d = r.randrange(-rank, rank)
        case["args"] = {"dim": d}
        case["out"] = out_t(dt, np.squeeze(x, d % rank) if shape[d % rank] == 1 else x)
        return case
    if op == "unsqueeze":
        d = r.randint(-(rank + 1), rank)
        if r.random() < 0.05:
            d = rank + 1
            case["args"] = {"dim": d}
            case["err"] = "DimOutOfRange"
            return case
        case["args"] = {"dim": d}
        case["out"] = out_t(dt, np.expand_dims(x, d))
        return case
    if op == "expand":
        new = [r.choice([1, 2, 3]) for _ in range(r.randint(0, 2))] + [
            (r.choice([1, 2, 3]) if s == 1 else s) for s in shape]
        if int(np.prod(new)) > 200:
            new = list(shape)
        if r.random() < 0.06:
            bad = bad_broadcast(g, shape)
            if bad is not None:
                case["args"] = {"shape": bad}
                case["err"] = "Storage.Layout.BadExpand"
                return case
        case["args"] = {"shape": new}
        case["out"] = out_t(dt, np.broadcast_to(x, new))
        return case
    if op in ("flatten", "contiguous"):
        case["out"] = out_t(dt, x.reshape(-1) if op == "flatten" else x)
        return case
    # index: basic items, integer arrays (host ones, and tensors on the device in i64 or i32)
    # and boolean masks (host or device, covering one or two dimensions)
    for _attempt in range(20):
        items, np_items = index_expr(g, shape)
        try:
            val = np.array(x[tuple(np_items)])
            break
        except IndexError:
            continue
    else:
        items, np_items = [], []
        val = np.array(x)
    case["op"] = "index"
    if r.random() < 0.05 and rank > 0 and shape[0] > 0:
        items = [shape[0] + r.randint(0, 2)]
        case["args"]["items"] = items
        case["err"] = "Index.IndexOutOfRange"
        return case
    case["args"]["items"] = items
    case["out"] = out_t(dt, val)
    return case


def index_expr(g, shape):
    """A random index expression NumPy accepts (mostly): (items as the cases write them, items
    for NumPy)."""
    r = g.r
    rank = len(shape)
    items, np_items = [], []
    d = 0
    used_ell = False
    arr_len = r.choice([0, 1, 2, 3])
    while d < rank or (r.random() < 0.2 and len(items) < rank + 2):
        k = r.random()
        if k < 0.12:
            items.append("new")
            np_items.append(None)
            continue
        if k < 0.18 and not used_ell:
            used_ell = True
            items.append("...")
            np_items.append(Ellipsis)
            d = rank  # the rest is covered
            continue
        if d >= rank:
            break
        size = shape[d]
        if k < 0.4 and size > 0:
            v = r.randrange(-size, size)
            items.append(v)
            np_items.append(v)
        elif k < 0.52 and size > 0:
            ln = r.choice([arr_len, arr_len, 1])
            vals = [r.randrange(-size, size) for _ in range(ln)]
            kind = r.choice(["i64", "i64", "t64", "t32"])
            items.append({kind: vals})
            np_items.append(np.array(vals, dtype=np.int64))
        elif k < 0.58:
            two = d + 1 < rank and not used_ell and r.random() < 0.4
            msh = [shape[d], shape[d + 1]] if two else [size]
            m = [r.random() < 0.5 for _ in range(int(np.prod(msh)))]
            kind = r.choice(["mask", "tmask"])
            items.append({kind: [int(b) for b in m], "sh": msh})
            np_items.append(np.array(m, dtype=bool).reshape(msh))
            d += len(msh) - 1
        else:
            st = r.choice([None, r.randint(-size - 2, size + 2)])
            sp = r.choice([None, r.randint(-size - 2, size + 2)])
            step = r.choice([None, 1, 1, 2, 3])
            items.append({"s": [st, sp, step]})
            np_items.append(slice(st, sp, step))
        d += 1
    return items, np_items


def viewable(e, shape, new):
    """Whether `view(new)` works on the input as made (a view of contiguous data, or of the
    strided view `mk` describes): PyTorch's rule, computed on the strides."""
    mk = e.get("mk")
    base = e["sh"]
    strides = contiguous_strides(base)
    if mk is None:
        st = strides
    elif "perm" in mk:
        st = [strides[p] for p in mk["perm"]]
    elif "narrow" in mk:
        st = strides
    elif "expand" in mk:
        lead = len(shape) - len(base)
        st = [0] * lead + [0 if (b == 1 and s != 1) else t for b, s, t in zip(base, shape[lead:], strides)]
    else:
        st = strides
    return torch_view_ok(list(shape), st, list(new))


def contiguous_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def torch_view_ok(shape, strides, new):
    """PyTorch's computeStride: whether `new` can view `shape`/`strides`."""
    numel = int(np.prod(shape))
    if numel == 0 or not shape:
        return True
    view_d = len(new) - 1
    chunk_base_stride = strides[-1] if strides else 1
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    return view_d == -1


# --- casts

def mk_cast(g, i):
    r = g.r
    src, dst = r.choice(DTYPES), r.choice(DTYPES)
    shape = g.shape(max_numel=32)
    heavy = r.random() < 0.5
    if src in FLOATS and r.random() < 0.5:
        # values around the integer ranges and the rounding points of the destination
        vals = []
        for _ in range(int(np.prod(shape))):
            k = r.random()
            if dst in IRANGE and dst != "bool" and k < 0.5:
                lo, hi = IRANGE[dst]
                v = r.choice([lo, hi, lo - 1, hi + 1, lo - 0.5, hi + 0.5, 2.0**63, -2.0**63, 2.0**31, 1e30, -1e30])
                v = float(v) + r.choice([0.0, 0.25, -0.75, 0.5])
            elif dst in FLOATS and k < 0.5:
                nb, tiny, big = FINFO[dst]
                e = r.randint(-30, 20)
                v = r.choice([1.0, -1.0]) * (1 + r.randint(0, 2**12) / 2**12) * 2.0**e
                v = r.choice([v, big * (1 + r.random() * 2.0**-nb), tiny * r.random(), 65520.0, 65519.99])
            else:
                v = r.gauss(0, 100)
            vals.append(v)
        a = A(src, shape, round_to(src, np.array(vals)))
        ea = enc(a)
    else:
        ea, a = g.operand(src, shape, heavy=heavy)
    case = {"op": "to_dtype", "args": {"dtype": dst}, "in": [ea]}
    case["out"] = out_t(dst, cast_ref(src, dst, a.a))
    return case


# --- masks

def mk_mask(g, i):
    r = g.r
    dt = r.choice(DTYPES)
    op = r.choice(["masked_fill", "masked_fill", "masked_fill_", "masked_select", "masked_select",
                   "index_fill"])
    shape = g.shape(max_numel=48, zero=0.08)
    rank = len(shape)
    if op == "index_fill":
        x = g.tensor(dt, shape, heavy=True)
        v = r.choice([0.0, 1.0, -1.0, 2.5, math.nan, math.inf, 300.0, -0.0, 1e6, 2.0**63, 127.0])
        items, np_items = [], []
        for d in range(rank):
            k = r.random()
            if k < 0.3 and shape[d] > 0:
                j = r.randrange(-shape[d], shape[d])
                items.append(j)
                np_items.append(j)
            elif k < 0.5 and shape[d] > 0 and not any(isinstance(t, dict) and "i64" in t for t in items):
                vals = [r.randrange(-shape[d], shape[d]) for _ in range(r.randint(0, 3))]
                items.append({"i64": vals})
                np_items.append(np.array(vals, dtype=np.int64))
            else:
                st, sp = r.choice([None, 0, 1]), r.choice([None, shape[d], -1])
                items.append({"s": [st, sp, r.choice([None, 1, 2])]})
                np_items.append(slice(st, sp, items[-1]["s"][2]))
        case = {"op": op, "in": [enc(x)], "args": {"items": items, "value": fmt_float("float64", v)}}
        if not checked_ok(v, dt):
            case["err"] = "ScalarOutOfRange"
            return case
        y = x.a.copy()
        y[tuple(np_items)] = checked_in(dt, v)
        case["out"] = out_t(dt, y)
        return case
    (ms,) = broadcast_shapes(g, shape, 1)
    ex, x = g.operand(dt, shape, heavy=True)
    em, m = g.operand("bool", ms)
    case = {"op": op, "in": [ex, em], "args": {}}
    if op == "masked_select":
        if r.random() < 0.3:
            # x broadcast against a larger mask
            big = [r.choice([2, 3])] + list(shape)
            em, m = g.operand("bool", big)
            case["in"][1] = em
        if r.random() < 0.04:
            case["in"][1], _ = g.operand("uint8", ms)
            case["err"] = "InvalidArgument"
            return case
        xb, mb = np.broadcast_arrays(x.a, m.a)
        case["out"] = out_t(dt, xb[mb])
        return case
    if op == "masked_fill_":
        x = g.tensor(dt, shape, heavy=True)
        case["in"][0] = enc(x)
    v = r.choice([0.0, 1.0, -2.0, 0.5, math.nan, -math.inf, 300.0, -0.0, 70000.0, 2.0**31, -129.0])
    case["args"]["value"] = fmt_float("float64", v)
    if r.random() < 0.04:
        case["in"][1], _ = g.operand("int32", ms)
        case["err"] = "InvalidArgument"
        return case
    if r.random() < 0.04 and rank >= 0:
        case["in"][1], _ = g.operand("bool", [2] + list(shape) if shape != [] else [2])
        case["err"] = "ShapeMismatch"
        return case
    if not checked_ok(v, dt):
        case["err"] = "ScalarOutOfRange"
        return case
    y = np.array(x.a, copy=True)
    mb = np.broadcast_to(m.a, tuple(shape))
    y[mb] = checked_in(dt, v)
    case["out"] = out_t(dt, y)
    return case



# The unary ops of the op table beyond the first ten: the reference computes each as the kernel
# does (the float types but f64 in float32, each library function correctly rounded to float32,
# then the formula's arithmetic in float32), so the tolerance only covers the library
# functions' few ulp, amplified where the formula cancels (1 + erf(x) for GELU at large
# negative x): an absolute term of 2^-21 |x| (2^-50 |x| for float64).
def _lib(fn):
    return np.vectorize(lambda v: fn(float(v)), otypes=[np.float64])


def _erf(v):
    return math.erf(v) if not math.isnan(v) else math.nan


def _erfc(v):
    return math.erfc(v) if not math.isnan(v) else math.nan


def _pt_sign(x):
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0)).astype(x.dtype)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _softplus(ft, lib):
    def f(x):
        return np.where(x > ft(20.0), x, lib(np.log1p)(lib(np.exp)(x)))
    return f


def _math_formulas(ft, lib):
    """The kernels' formulas over dtype ft (np.float32 or np.float64); lib(fn) applies a library
    function correctly rounded to ft."""
    c = ft
    return {
        "tan": lambda x: lib(np.tan)(x),
        "erf": lambda x: lib(_erf)(x),
        "erfc": lambda x: lib(_erfc)(x),
        "rsqrt": lambda x: lib(_rsqrt)(x),
        "log1p": lambda x: lib(np.log1p)(x),
        "expm1": lambda x: lib(np.expm1)(x),
        "log2": lambda x: lib(np.log2)(x),
        "log10": lambda x: lib(np.log10)(x),
        "gelu": lambda x: x * c(0.5) * (c(1.0) + lib(_erf)(x * c(0.70710678118654752440))),
        "gelu_tanh": lambda x: c(0.5) * x * (c(1.0) + lib(np.tanh)(
            c(0.7978845608028654) * (x + c(0.044715) * x * x * x))),
        "silu": lambda x: x / (c(1.0) + lib(np.exp)(-x)),
        "softplus": _softplus(ft, lib),
        "asin": lambda x: lib(np.arcsin)(x),
        "acos": lambda x: lib(np.arccos)(x),
        "atan": lambda x: lib(np.arctan)(x),
        "sinh": lambda x: lib(np.sinh)(x),
        "cosh": lambda x: lib(np.cosh)(x),
        "asinh": lambda x: lib(np.arcsinh)(x),
        "acosh": lambda x: lib(np.arccosh)(x),
        "atanh": lambda x: lib(np.arctanh)(x),
    }


MATH_EXACT = {"reciprocal": lambda x: np.divide(1.0, x).astype(x.dtype),
              "square": lambda x: x * x, "sign": _pt_sign, "floor": np.floor, "ceil": np.ceil,
              "round": np.rint, "trunc": np.trunc}
MATH_INT = {"square": lambda x: x * x, "sign": lambda x: (x > 0) - (x < 0),
            "floor": lambda x: x, "ceil": lambda x: x, "round": lambda x: x, "trunc": lambda x: x}
MATH_OPS = sorted(list(MATH_EXACT) + list(_math_formulas(np.float32, None)))


def math_ref(op, dt, a):
    """(value, tol) of a new unary op in dtype dt (a float dtype for the float-only ops)."""
    if op in MATH_EXACT and dt in FLOATS:
        ft = np.float64 if dt == "float64" else np.float32
        with np.errstate(all="ignore"):
            out = MATH_EXACT[op](np.asarray(a, dtype=np.float64).astype(ft))
        return round_to(dt, np.asarray(out, dtype=np.float64)), None
    if op in MATH_INT:
        fn = MATH_INT[op]
        out = np.empty(np.shape(a), dtype=object)
        for idx in np.ndindex(np.shape(a)):
            out[idx] = wrap(dt, fn(int(a[idx])))
        return out, None
    ft = np.float64 if dt == "float64" else np.float32

    def lib(fn):
        def g(x):
            with np.errstate(all="ignore"):
                return _lib(fn)(np.asarray(x, dtype=np.float64)).astype(ft)
        return g

    x = np.asarray(a, dtype=np.float64).astype(ft)
    with np.errstate(all="ignore"):
        out = _math_formulas(ft, lib)[op](x)
    out = np.asarray(out, dtype=np.float64)
    finite = np.abs(x[np.isfinite(x)]) if x.size else np.zeros(0)
    scale = float(finite.max()) if finite.size else 0.0
    nbits, tiny, _ = FINFO[dt]
    atol = max(tiny, scale * (2.0 ** -50 if dt == "float64" else 2.0 ** -21))
    if dt in ("float16", "bfloat16"):
        atol = max(atol, tiny)
    return round_to(dt, out), [8 * 2.0 ** (1 - nbits), atol]


def mk_unary_math(g, i):
    r = g.r
    op = r.choice(MATH_OPS)
    dt = r.choice(KERNEL * 3 + DTYPES + ["float64"] * 2)
    shape = g.shape()
    ea, a = g.operand(dt, shape, heavy=r.random() < 0.4)
    form = r.choice(["unary", "unary", "unary", "unary_", "unary_out"])
    if form != "unary":
        a = g.tensor(dt, shape, heavy=r.random() < 0.4)
        ea = enc(a)
    case = {"op": form, "args": {"op": op}, "in": [ea]}
    float_op = op not in MATH_INT
    if form == "unary_out" and float_op and dt not in FLOATS:
        case["err"] = "InvalidArgument"
        return case
    if dt == "bool" and not float_op:
        # PyTorch: sign of bools is the bools, square is pow(x, 2) in int64 (which does not go
        # back into a bool tensor); the roundings have no bool kernel.
        if op == "sign":
            case["out"] = out_t("bool", np.asarray(a.a, dtype=object))
            return case
        if op == "square":
            if form != "unary":
                case["err"] = "InvalidArgument"
                return case
            case["out"] = out_t("int64", np.asarray(a.a, dtype=object).astype(int))
            return case
        case["err"] = UNSUPPORTED
        return case
    if float_op and dt not in FLOATS and form == "unary_":
        case["err"] = "InvalidArgument"
        return case
    odt = "float32" if float_op and dt not in FLOATS else dt
    x = cast_ref(dt, odt, a.a) if odt != dt else a.a
    val, tol = math_ref(op, odt, x)
    case["out"] = out_t(odt, val)
    if tol:
        case["tol"] = tol
    return case


def mk_classify(g, i):
    """isnan / isinf / isfinite (bools out; integers and bools are never NaN or infinite) and
    nan_to_num (PyTorch's defaults: the dtype's largest and lowest finite values; a value is
    rounded to the dtype, beyond its range to an infinity; integers and bools copied)."""
    r = g.r
    op = r.choice(["isnan", "isinf", "isfinite", "nan_to_num"])
    dt = r.choice(FLOATS * 3 + DTYPES)
    shape = g.shape()
    ea, a = g.operand(dt, shape, heavy=True)
    case = {"op": op, "args": {}, "in": [ea]}
    x = np.asarray(a.a, dtype=object)
    if op != "nan_to_num":
        fn = {"isnan": math.isnan, "isinf": math.isinf, "isfinite": math.isfinite}[op]
        out = np.empty(x.shape, dtype=object)
        for idx in np.ndindex(x.shape):
            v = x[idx]
            out[idx] = fn(float(v)) if dt in FLOATS else (op == "isfinite")
        case["out"] = out_t("bool", out)
        return case
    if dt not in FLOATS:
        case["out"] = out_t(dt, x)
        return case
    _, _, big = FINFO[dt]
    nan = r.choice([0.0, -1.5, 7.0])
    pos = r.choice([None, 1.0, 1e10, -3.0])
    neg = r.choice([None, -1.0, -1e10, 5.0])
    case["args"] = {"nan": fmt_float("float64", nan),
                    "posinf": None if pos is None else fmt_float("float64", pos),
                    "neginf": None if neg is None else fmt_float("float64", neg)}
    rv = lambda v: float(round_to(dt, np.array([v], dtype=np.float64))[0])
    nv, pv, mv = rv(nan), rv(big if pos is None else pos), rv(-big if neg is None else neg)
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        v = float(x[idx])
        out[idx] = nv if math.isnan(v) else (pv if v == math.inf else (mv if v == -math.inf else v))
    case["out"] = out_t(dt, out)
    return case

FAMILIES = [
    ("binary", mk_binary, 0.14),
    ("binary_inplace", mk_binary_inplace, 0.04),
    ("scalar", mk_scalar, 0.10),
    ("unary", mk_unary, 0.10),
    ("compare", mk_compare, 0.07),
    ("where", mk_where, 0.05),
    ("reduce", mk_reduce, 0.14),
    ("matmul", mk_matmul, 0.08),
    ("cat", mk_cat, 0.05),
    ("view", mk_view, 0.10),
    ("cast", mk_cast, 0.08),
    ("mask", mk_mask, 0.05),
]
# Generated into their own files (`--families unary_math`), so that the corpora above stay as
# they were generated.
EXTRA_FAMILIES = [
    ("unary_math", mk_unary_math, 0.8),
    ("classify", mk_classify, 0.2),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--families", help="comma-separated families (default: FAMILIES)")
    args = p.parse_args()
    g = Gen(args.seed)
    families = FAMILIES
    if args.families:
        pick = args.families.split(",")
        families = [f for f in FAMILIES + EXTRA_FAMILIES if f[0] in pick]
    names = [f[0] for f in families]
    weights = [f[2] for f in families]
    counters = {n: 0 for n in names}
    cases = []
    # every family gets its share, in a random order
    plan = []
    for (n, _, w) in families:
        plan += [n] * round(w * args.count)
    while len(plan) < args.count:
        plan.append(g.r.choices(names, weights)[0])
    plan = plan[: args.count]
    g.r.shuffle(plan)
    makers = dict((f[0], f[1]) for f in families)
    for fam in plan:
        c = makers[fam](g, counters[fam])
        c = {"id": f"{fam}/{counters[fam]}", **c}
        counters[fam] += 1
        cases.append(c)
    doc = {"format": FORMAT, "seed": args.seed, "count": len(cases),
           "families": counters, "cases": cases}
    text = json.dumps(doc, separators=(",", ":"))
    with gzip.open(args.out, "wt", compresslevel=9) as f:
        f.write(text)
    print(f"{args.out}: {len(cases)} cases, {len(text)} bytes of JSON; {counters}")


if __name__ == "__main__":
    main()
