"""Random indexing cases with NumPy as the oracle, in the conformance format (genesis-index-cases
v1; see the shared corpus): `python3 gen_random_cases.py --seed S --count N --out FILE`.

Run by hand (needs numpy); the outputs are committed and run by `cargo test` (tests/conformance.rs)
and by the CUDA conformance test, with no Python needed:

    python3 gen_random_cases.py --seed 16 --count 6000 --out data/random-cases.json.gz
    python3 gen_random_cases.py --seed 1016 --count 2000 --out data/heldout-cases.json.gz

The second set is held out: generated independently (another seed), never looked at while
fixing failures of the first. PyTorch's rule where NumPy differs: a negative slice step is an
error (`invalid_step`).

Each case starts from an index that NumPy accepts, built at random over every kind of item
(integers, slices with any bounds, new axes, an ellipsis, int64/int32 index arrays of any rank
including empty and 0-d ones, boolean masks including 0-d ones), over inputs of every dtype with
zero-size dimensions and ranks up to NumPy's maximum of 64 (through new axes). Then at most one
fault may be injected (an index out of range, arrays that do not broadcast, a mask of the wrong
shape, too many indices, two ellipses, a float index tensor, a zero or negative step, a value of
the wrong shape); NumPy's verdict is the expectation. Assignments take scalars or tensors,
broadcast (with extra leading size-1 dimensions too), with or without `accumulate`
(`np.add.at`).
"""
import argparse
import gzip
import json
import random

import numpy as np

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
# The runner builds inputs as arange(n) converted from f64 (saturating): keep n where every
# value is exact in the dtype.
MAX_NUMEL = {"bool": 4096, "uint8": 255, "int8": 127, "int16": 4096, "int32": 4096, "int64": 4096,
             "float16": 2048, "bfloat16": 256, "float32": 4096, "float64": 4096}
MAX_DIMS = 64


def np_dtype(name):
    # NumPy has no bfloat16: computed in float32, kept only when every value is exact in bf16.
    return {"bool": np.bool_, "bfloat16": np.float32}.get(name) or np.dtype(name)


def make_input(shape, dtype):
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return (a % 3 == 0) if dtype == "bool" else a.astype(np_dtype(dtype))


def jsonable(a):
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return [bool(x) for x in a.ravel()]
    if a.dtype.kind in "iu":
        return [int(x) for x in a.ravel()]
    return [float(x) for x in a.ravel()]


def bf16_exact(a):
    a = np.asarray(a, dtype=np.float64)
    return bool(np.all(np.abs(a) <= 256) and np.all(a == np.round(a)))


def to_np(item):
    if "int" in item:
        return item["int"]
    if "slice" in item:
        return slice(*item["slice"])
    if "none" in item:
        return None
    if "ellipsis" in item:
        return Ellipsis
    t = item["tensor"]
    dt = {"int64": np.int64, "int32": np.int32, "bool": np.bool_, "float32": np.float32}[t["dtype"]]
    return np.asarray(t["data"], dtype=dt).reshape(t["shape"])


def tensor(data, dtype):
    data = np.asarray(data)
    return {"tensor": {"dtype": dtype, "shape": list(data.shape), "data": jsonable(data)}}


def error_kind(e):
    m = str(e)
    if isinstance(e, IndexError):
        if "out of bounds" in m:
            return "index_out_of_range"
        if "too many indices" in m:
            return "too_many_indices"
        if "single ellipsis" in m or "only integers" in m or "must be of integer" in m:
            return "invalid_index"
        if "shape mismatch" in m or "did not match" in m:
            return "shape_mismatch"
    if isinstance(e, ValueError):
        if "step cannot be zero" in m:
            return "invalid_step"
        if "broadcast" in m or "shape mismatch" in m:
            return "shape_mismatch"
    return None


def masks_match(shape, items):
    """Whether every boolean mask has exactly the shape of the dimensions it covers. NumPy
    lets a mask dimension of size 0 stand against any size (`zeros((3, 2))[:, zeros(0, bool)]`
    has shape (3, 0)); PyTorch and Genesis refuse that: such cases are left out."""
    consumed = 0
    for it in items:
        if "int" in it or "slice" in it:
            consumed += 1
        elif "tensor" in it:
            consumed += len(it["tensor"]["shape"]) if it["tensor"]["dtype"] == "bool" else 1
    d = 0
    for it in items:
        if "ellipsis" in it:
            d += max(0, len(shape) - consumed)
        elif "int" in it or "slice" in it:
            d += 1
        elif "tensor" in it:
            t = it["tensor"]
            if t["dtype"] == "bool":
                k = len(t["shape"])
                if list(t["shape"]) != list(shape[d:d + k]):
                    return False
                d += k
            else:
                d += 1
    return True


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def shape(self, dtype):
        r = self.r
        while True:
            rank = r.choice([0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 6, 8, 10])
            hi = 5 if rank <= 3 else (3 if rank <= 5 else 2)
            shape = [r.choice([0] + [r.randint(1, hi)] * 6) if r.random() < 0.12 else r.randint(1, hi)
                     for _ in range(rank)]
            if int(np.prod(shape)) <= MAX_NUMEL[dtype]:
                return shape

    def int_array(self, size, shape):
        r = self.r
        n = int(np.prod(shape))
        vals = [r.randint(-size, size - 1) for _ in range(n)] if size > 0 else [0] * n
        dt = r.choice(["int64", "int64", "int32"])
        return tensor(np.asarray(vals, dtype=np.int64).reshape(shape), dt), n

    def index(self, shape):
        """A random index NumPy should accept, and the number of new axes in it."""
        r = self.r
        ndim = len(shape)
        items = []
        d = 0  # next input dimension
        has_ellipsis = False
        # How many dimensions an ellipsis takes: decided when it is placed.
        adv_shape = [r.choice([0, 1, 2, 3]) for _ in range(r.choice([0, 1, 1, 2]))]
        if r.random() < 0.1:
            adv_shape = [0]
        want = r.randint(0, ndim + 2)
        for _ in range(want):
            left = ndim - d
            kind = r.choices(["int", "slice", "none", "ellipsis", "array", "mask"],
                             [3, 5, 2, 1.5, 3, 1.2])[0]
            if kind == "none":
                items.append({"none": True})
            elif kind == "ellipsis" and not has_ellipsis:
                has_ellipsis = True
                items.append({"ellipsis": True})
                # The ellipsis takes what the items after it leave: decided by skipping a
                # random number of dimensions now (often zero).
                skip = r.choice([0, 0, 0, r.randint(0, left)]) if left > 0 else 0
                d += skip
            elif left <= 0:
                continue
            elif kind == "int":
                size = shape[d]
                if size == 0:
                    items.append({"slice": [None, None, None]})
                else:
                    items.append({"int": r.randint(-size, size - 1)})
                d += 1
            elif kind == "slice":
                size = shape[d]
                pick = lambda: r.choice([None, r.randint(-size - 2, size + 2), r.randint(0, size)])
                step = r.choice([None, None, 1, 2, 3, r.randint(1, 5)])
                items.append({"slice": [pick(), pick(), step]})
                d += 1
            elif kind == "array":
                size = shape[d]
                sh = list(adv_shape)
                # Sometimes a shape that broadcasts to the common one.
                if sh and r.random() < 0.3:
                    sh = [1 if r.random() < 0.5 else s for s in sh]
                    if r.random() < 0.3:
                        sh = sh[1:]
                if size == 0 and int(np.prod(sh)) > 0:
                    items.append({"slice": [None, None, None]})
                    d += 1
                    continue
                t, _ = self.int_array(size, sh)
                items.append(t)
                d += 1
            elif kind == "mask":
                k = r.randint(0, min(left, 2))
                mshape = shape[d:d + k]
                n = int(np.prod(mshape))
                p = r.choice([0.0, 0.3, 0.5, 0.8, 1.0])
                data = np.asarray([r.random() < p for _ in range(n)], dtype=bool).reshape(mshape)
                items.append(tensor(data, "bool"))
                d += k
        # New axes until the result may reach the maximum rank, sometimes.
        if r.random() < 0.04:
            pos = r.randint(0, len(items))
            extra = r.randint(8, MAX_DIMS - ndim)
            items[pos:pos] = [{"none": True}] * extra
        return items

    def value(self, dtype, rshape, fault):
        """A value for an assignment to a result of shape `rshape`."""
        r = self.r
        if r.random() < 0.3 and not fault:
            if dtype == "bool":
                v = r.choice([0, 1])
            elif dtype in ("uint8",):
                v = r.randint(0, 20)
            elif dtype.startswith("int"):
                v = r.randint(-20, 20)
            else:
                v = r.choice([r.randint(-20, 20), r.randint(-40, 40) / 2])
            return {"scalar": v}
        shape = list(rshape)
        # Drop leading dimensions, set some to 1, add leading 1s.
        shape = shape[r.randint(0, len(shape)):] if r.random() < 0.3 else shape
        shape = [1 if (s != 0 and r.random() < 0.2) else s for s in shape]
        if r.random() < 0.25:
            shape = [1] * r.randint(1, 3) + shape
        if fault:
            nz = [i for i, s in enumerate(shape) if s not in (1,)]
            if nz:
                i = r.choice(nz)
                shape[i] = shape[i] + 1 if shape[i] > 0 else 2
            else:
                shape = [2] + shape if shape else [3]
                if len(rshape) > 0 and rshape[-1] == 0:
                    shape[-1] = 2
        n = int(np.prod(shape))
        if n > 4096:
            return None
        if dtype == "bool":
            data = [r.choice([0, 1]) for _ in range(n)]
        elif dtype == "uint8":
            data = [r.randint(0, 9) for _ in range(n)]
        elif dtype.startswith("int"):
            data = [r.randint(-9, 9) for _ in range(n)]
        else:
            data = [r.choice([r.randint(-9, 9), r.randint(-18, 18) / 2]) for _ in range(n)]
        return {"shape": shape, "data": data}

    def inject(self, shape, items):
        """One fault in a copy of `items`, or None."""
        r = self.r
        items = [dict(i) for i in items]
        kinds = ["oob_int", "oob_array", "broadcast", "mask", "too_many", "ellipsis2", "float",
                 "step0", "neg_step"]
        k = r.choice(kinds)
        if k == "too_many":
            items.append({"int": 0})
            items.extend([{"slice": [None, None, None]}] * r.randint(0, 1))
            if not any("ellipsis" in i for i in items):
                items[0:0] = [{"int": 0}] * max(0, len(shape) - len(items))
            return items
        if k == "ellipsis2":
            items.insert(r.randint(0, len(items)), {"ellipsis": True})
            items.insert(r.randint(0, len(items)), {"ellipsis": True})
            return items
        if k == "float":
            items.insert(r.randint(0, len(items)), {"tensor": {"dtype": "float32", "shape": [1], "data": [0.0]}})
            return items
        if k in ("step0", "neg_step"):
            sl = [i for i, it in enumerate(items) if "slice" in it]
            if not sl:
                return None
            i = r.choice(sl)
            a, b, _ = items[i]["slice"]
            items[i] = {"slice": [a, b, 0 if k == "step0" else -r.randint(1, 3)]}
            return items
        if k == "oob_int":
            ints = [i for i, it in enumerate(items) if "int" in it]
            if not ints:
                return None
            i = r.choice(ints)
            items[i] = {"int": r.choice([1, -1]) * (10 + r.randint(0, 5))}
            return items
        if k == "oob_array":
            arrs = [i for i, it in enumerate(items) if "tensor" in it and it["tensor"]["dtype"] != "bool"
                    and len(it["tensor"]["data"]) > 0]
            if not arrs:
                return None
            i = r.choice(arrs)
            t = dict(items[i]["tensor"])
            data = list(t["data"])
            data[r.randrange(len(data))] = r.choice([1, -1]) * (10 + r.randint(0, 5))
            t["data"] = data
            items[i] = {"tensor": t}
            return items
        if k == "broadcast":
            arrs = [i for i, it in enumerate(items) if "tensor" in it and it["tensor"]["dtype"] != "bool"]
            if not arrs:
                return None
            i = r.choice(arrs)
            items.insert(i + 1, {"tensor": {"dtype": "int64", "shape": [7], "data": [0] * 7}})
            return items
        if k == "mask":
            masks = [i for i, it in enumerate(items) if "tensor" in it and it["tensor"]["dtype"] == "bool"
                     and len(it["tensor"]["shape"]) > 0]
            if not masks:
                return None
            i = r.choice(masks)
            t = dict(items[i]["tensor"])
            t["shape"] = [s + 1 for s in t["shape"]]
            t["data"] = [True] * int(np.prod(t["shape"]))
            items[i] = {"tensor": t}
            return items
        return None

    def case(self, cid):
        r = self.r
        dtype = r.choice(DTYPES)
        shape = self.shape(dtype)
        items = self.index(shape)
        x = make_input(shape, dtype)
        key = tuple(to_np(i) for i in items)
        try:
            res = x[key]
        except Exception:
            return None  # the generator's own index was not valid: try again
        if not masks_match(shape, items):
            return None
        if res.ndim > MAX_DIMS:
            return None
        op = "set" if r.random() < 0.45 else "get"
        fault = r.random() < 0.2
        value_fault = fault and op == "set" and r.random() < 0.3
        index_fault = fault and not value_fault
        if index_fault:
            bad = self.inject(shape, items)
            if bad is None:
                return None
            items = bad
        case = {"id": cid, "input": {"shape": shape, "dtype": dtype}, "op": op, "index": items}
        neg_step = any("slice" in i and i["slice"][2] is not None and i["slice"][2] < 0 for i in items)
        if op == "set":
            value = self.value(dtype, res.shape, value_fault)
            if value is None:
                return None
            case["value"] = value
            acc = r.random() < 0.35
            if acc:
                case["accumulate"] = True
        if neg_step:
            # PyTorch's rule: an error whatever NumPy makes of it (the rest of the index is
            # valid: it is the generator's own).
            case["error"] = "invalid_step"
            return case
        try:
            if op == "get":
                key = tuple(to_np(i) for i in items)
                out = np.asarray(x[key])
                if dtype == "bfloat16" and not bf16_exact(out):
                    return None
                case["expected"] = {"shape": list(out.shape), "data": jsonable(out)}
                if not any("tensor" in i for i in items):
                    case["view"] = True
            else:
                key = tuple(to_np(i) for i in items)
                y = x.copy()
                v = case["value"]
                if "scalar" in v:
                    val = np.asarray(v["scalar"]).astype(y.dtype)
                else:
                    val = np.asarray(v["data"]).astype(y.dtype).reshape(v["shape"])
                target = y[key].shape
                # NumPy's (and PyTorch's) assignment drops leading size-1 dimensions of the value.
                while val.ndim > len(target) and val.shape[0] == 1:
                    val = val.reshape(val.shape[1:])
                if case.get("accumulate"):
                    # np.add.at over the flat positions the index selects, in order (np.add.at
                    # with the index itself crashes NumPy 2.4 beyond 32 dimensions).
                    pos = np.arange(y.size).reshape(y.shape)[key]
                    valb = np.broadcast_to(val, pos.shape)
                    np.add.at(y.reshape(-1), pos.reshape(-1), valb.reshape(-1))
                else:
                    y[key] = val
                if dtype == "bfloat16" and not bf16_exact(y):
                    return None
                case["expected"] = {"shape": list(y.shape), "data": jsonable(y)}
        except Exception as e:
            kind = error_kind(e)
            if kind is None:
                return None
            case.pop("expected", None)
            case["error"] = kind
        if fault and "error" not in case:
            # An injected fault that NumPy accepted (e.g. a zero-size broadcast): kept as a
            # plain case.
            pass
        if not fault and "error" in case:
            return None
        return case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    g = Gen(args.seed)
    np.random.seed(args.seed)
    cases = []
    tries = 0
    while len(cases) < args.count:
        tries += 1
        c = g.case(f"r{args.seed}-{len(cases)}")
        if c is not None:
            cases.append(c)
    doc = {"format": "genesis-index-cases v1",
           "about": f"Random cases from gen_random_cases.py --seed {args.seed} --count {args.count}, "
                    f"NumPy {np.__version__} as the oracle (a negative slice step is an error).",
           "cases": cases}
    text = json.dumps(doc, separators=(",", ":"))
    if args.out.endswith(".gz"):
        with gzip.GzipFile(args.out, "wb", mtime=0) as f:
            f.write(text.encode())
    else:
        with open(args.out, "w") as f:
            f.write(text)
    kinds = {}
    for c in cases:
        k = c.get("error", c["op"] + (" acc" if c.get("accumulate") else ""))
        kinds[k] = kinds.get(k, 0) + 1
    print(len(cases), "cases from", tries, "tries:", kinds)


if __name__ == "__main__":
    main()
