"""Generates tests/data/extra-cases.json: more indexing cases with NumPy as the oracle.

Run by hand (`python3 gen_extra_cases.py`, needs numpy); the output is committed. Format:
genesis-index-cases v1 (see the shared corpus). PyTorch's rule where NumPy differs: a negative
slice step is an error (no case here uses one).
"""
import json

import numpy as np

T = lambda data, dtype="int64": {"tensor": {"dtype": dtype, "shape": list(np.shape(data)), "data": np.asarray(data).ravel().tolist()}}
S = lambda a=None, b=None, c=None: {"slice": [a, b, c]}
I = lambda k: {"int": k}
NONE = {"none": True}
ELL = {"ellipsis": True}


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
    dt = {"int64": np.int64, "int32": np.int32, "bool": bool}[t["dtype"]]
    return np.asarray(t["data"], dtype=dt).reshape(t["shape"])


def make_input(shape, dtype):
    a = np.arange(int(np.prod(shape))).reshape(shape)
    return (a % 3 == 0) if dtype == "bool" else a.astype(dtype)


def jsonable(a):
    return a.ravel().tolist() if a.dtype != bool else [bool(x) for x in a.ravel()]


cases = []


def get(id, shape, index, dtype="float32"):
    x = make_input(shape, dtype)
    key = tuple(to_np(i) for i in index)
    r = x[key]
    basic = all(("tensor" not in i) for i in index)
    cases.append({"id": id, "input": {"shape": list(shape), "dtype": dtype}, "op": "get", "index": index,
                  "expected": {"shape": list(r.shape), "data": jsonable(np.asarray(r))}, "view": basic})


def put(id, shape, index, value, dtype="float32", accumulate=False):
    x = make_input(shape, dtype)
    key = tuple(to_np(i) for i in index)
    if "scalar" in value:
        v = value["scalar"]
    else:
        v = np.asarray(value["data"], dtype=x.dtype).reshape(value["shape"])
    if accumulate:
        np.add.at(x, key, v)
    else:
        x[key] = v
    c = {"id": id, "input": {"shape": list(shape), "dtype": dtype}, "op": "set", "index": index, "value": value,
         "expected": {"shape": list(x.shape), "data": jsonable(x)}}
    if accumulate:
        c["accumulate"] = True
    cases.append(c)


def err(id, shape, index, kind, op="get", value=None):
    c = {"id": id, "input": {"shape": list(shape), "dtype": "float32"}, "op": op, "index": index, "error": kind}
    if value is not None:
        c["value"] = value
    cases.append(c)


get("x-adv-separated", [3, 4, 5], [T([0, 2]), S(), T([1, 3])])
get("x-adv-int-adjacent", [3, 4, 5], [S(), I(1), T([4, 0])])
get("x-adv-int-separated", [3, 4, 5], [I(2), S(), T([4, 0])])
get("x-adv-broadcast", [4, 5], [T([[0], [3]]), T([1, 2, 4])])
get("x-adv-newaxis-between", [3, 4, 5], [T([0, 1]), NONE, T([2, 3])])
get("x-int32-index", [5, 3], [T([4, 1], "int32")])
get("x-mask-and-array", [4, 5], [T([True, False, True, True], "bool"), T([0, 4, 2])])
get("x-mask-3d-leading", [2, 3, 4], [T([[True, False, True], [False, True, True]], "bool")])
get("x-mask-none-selected", [3, 4], [T([[False] * 4] * 3, "bool")])
get("x-scalar-true", [2, 3], [T(True, "bool")])
get("x-scalar-false", [2, 3], [T(False, "bool")])
get("x-ellipsis-middle", [2, 3, 4, 5], [I(1), ELL, I(-1)])
get("x-slice-past-end", [6], [S(10, 20)])
get("x-slice-neg-start-stop", [8], [S(-6, -2, 3)])
get("x-bool-input", [3, 4], [T([2, 0])], dtype="bool")
get("x-int8-input", [4, 4], [S(None, None, 3), T([3, 1])], dtype="int8")
get("x-f64-mask", [2, 5], [ELL, T([True, False, True, False, True], "bool")], dtype="float64")
get("x-empty-index", [4, 3], [T(np.zeros((0,), dtype=np.int64))])
put("x-set-separated", [3, 4, 5], [T([0, 2]), S(), T([1, 3])], {"scalar": -7.0})
put("x-set-broadcast-value", [4, 6], [T([3, 0]), S(1, 4)], {"shape": [3], "data": [1.0, 2.0, 3.0]})
put("x-set-mask-tensor", [2, 3], [T([[True, False, True], [False, True, False]], "bool")], {"shape": [3], "data": [9.0, 8.0, 7.0]})
put("x-set-accumulate-2d", [3, 3], [T([0, 0, 2]), T([1, 1, 2])], {"shape": [3], "data": [1.0, 2.0, 3.0]}, accumulate=True)
put("x-set-accumulate-int", [6], [T([5, 5, 5, 0])], {"scalar": 3}, dtype="int32", accumulate=True)
put("x-set-duplicate-last-wins", [4], [T([1, 1, 1])], {"shape": [3], "data": [10.0, 20.0, 30.0]})
put("x-set-newaxis", [3], [NONE, S(1)], {"scalar": 5.0})
err("x-err-two-ellipses", [2, 3], [ELL, ELL], "invalid_index")
err("x-err-float-tensor", [2, 3], [{"tensor": {"dtype": "float32", "shape": [1], "data": [1.0]}}], "invalid_index")
err("x-err-broadcast", [4, 5], [T([0, 1]), T([0, 1, 2])], "shape_mismatch")
err("x-err-neg-oob", [4, 5], [S(), T([-6])], "index_out_of_range")
err("x-err-too-many-mask", [2, 3], [I(0), T([[True] * 3] * 2, "bool")], "too_many_indices")
err("x-err-set-value-shape", [4, 6], [T([3, 0]), S(1, 4)], "shape_mismatch", op="set", value={"shape": [2, 2], "data": [1.0, 2.0, 3.0, 4.0]})
err("x-err-set-oob", [4], [T([4])], "index_out_of_range", op="set", value={"scalar": 1.0})

with open("data/extra-cases.json", "w") as f:
    json.dump({"format": "genesis-index-cases v1", "about": "Extra cases generated by gen_extra_cases.py with NumPy "
               + np.__version__ + " as the oracle.", "cases": cases}, f, indent=1)
print(len(cases), "cases")
