"""Writes tests/data/promotion.json: PyTorch's type promotion, the oracle of tests/promotion.rs.

    python3 crates/genesis/tests/gen_promotion_table.py > crates/genesis/tests/data/promotion.json

For every pair of the ten dtypes Genesis has: torch.result_type of two tensors (1-d and 0-d on
each side, since a 0-d tensor promotes like a scalar within its category), of a tensor and a
Python bool / int / float scalar, the dtype of true division, of comparisons (always bool) and
of sum (integers and bool sum to int64).
"""
import json

import torch

DTYPES = {
    "bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16,
    "i32": torch.int32, "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16,
    "f32": torch.float32, "f64": torch.float64,
}
NAME = {v: k for k, v in DTYPES.items()}


def t(dt, zero_d=False):
    return torch.zeros((), dtype=dt) if zero_d else torch.zeros(2, dtype=dt)


out = {"torch": torch.__version__, "tensor_tensor": [], "tensor_scalar": [], "div": [], "sum": []}
for a, da in DTYPES.items():
    for b, db in DTYPES.items():
        for za in (False, True):
            for zb in (False, True):
                r = torch.result_type(t(da, za), t(db, zb))
                out["tensor_tensor"].append({"a": a, "a_0d": za, "b": b, "b_0d": zb, "result": NAME[r]})
    for kind, value in (("bool", True), ("int", 3), ("float", 0.5)):
        r = torch.result_type(t(da), value)
        out["tensor_scalar"].append({"a": a, "scalar": kind, "result": NAME[r]})
    out["div"].append({"a": a, "result": NAME[(t(da) / t(da)).dtype]})
    out["sum"].append({"a": a, "result": NAME[t(da).sum().dtype]})
print(json.dumps(out, indent=1))
