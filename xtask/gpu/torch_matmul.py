"""torch.matmul timings for the rows of Genesis's gpu_matmul bench, and the comparison.

Same shapes, batches (`_b{n}` rows) and layouts (a transposed operand is a transposed view,
read in place by cuBLAS), random data, CUDA events around each run (wall clock of the call and a synchronisation for the
rows the bench times that way), warm-up, median. TF32 stays off (PyTorch's default) but for
the rows of dtype tf32: f32 products with torch.backends.cuda.matmul.allow_tf32 = True.
A row name's `_s1` suffix (Genesis without split-k) does not change PyTorch's side.
With GENESIS_SOAK_MS=N each row is also timed sustained (as the bench: N ms back to back,
then batches of 30 queued back to back).
Usage: python3 torch_matmul.py GENESIS.json OUT.json
"""
import json
import re
import sys
import time

import torch

from soak import SOAK_MS, sustained

PEAK = {"f32": 67.0, "tf32": 494.0, "bf16": 989.0, "f16": 989.0}  # H200 SXM dense TFLOP/s
DT = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def timed(fn, warmup, runs, wall):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    if wall:
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t) * 1e3)
    else:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            s.record()
            fn()
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e))
    ms.sort()
    return ms[len(ms) // 2], ms[0]


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = json.load(open(sys.argv[1]))["results"]
    dev = torch.device("cuda:0")
    rows = []
    print(f'{"case":<34} {"ours ms":>9} {"torch ms":>9} {"ratio":>6} {"TFLOP/s":>8} {"peak":>6}')
    for r in ours:
        m = re.match(r"mm_(\w+?)_(\d+)x(\d+)x(\d+)_([nt])([nt])", r["name"])
        d, M, N, K, ta, tb = m.group(1), *map(int, m.group(2, 3, 4)), m.group(5), m.group(6)
        bm = re.search(r"_b(\d+)$", r["name"])
        B = int(bm.group(1)) if bm else 1
        lead = (B,) if bm else ()
        dt = DT[d]
        torch.backends.cuda.matmul.allow_tf32 = d == "tf32"

        def operand(rows, cols, transposed):
            if transposed:
                return (torch.rand(*lead, cols, rows, device=dev) * 2 - 1).to(dt).transpose(-1, -2)
            return (torch.rand(*lead, rows, cols, device=dev) * 2 - 1).to(dt)

        a = operand(M, K, ta == "t")
        b = operand(K, N, tb == "t")
        out = torch.empty(*lead, M, N, device=dev, dtype=dt)
        flops = 2.0 * B * M * N * K
        warmup, runs = (3, 10) if flops > 2e11 else (5, 30)
        wall = r["clock"] == "wall"
        if wall:
            fn = lambda: a @ b  # the seed's measure: allocation included on torch's side
        else:
            fn = lambda: torch.matmul(a, b, out=out)
        med, mn = timed(fn, warmup, runs, wall)
        if SOAK_MS > 0:
            print(f'sustained {r["name"]}: {sustained(fn):.4f} ms a product')
        tf = flops / (r["median_ms"] * 1e-3) / 1e12
        row = {"name": r["name"], "ours_ms": r["median_ms"], "torch_ms": med, "torch_min_ms": mn,
               "ratio": med / r["median_ms"], "tflops": tf, "torch_tflops": flops / (med * 1e-3) / 1e12,
               "peak_fraction": tf / PEAK[d], "clock": r["clock"], "splits": r.get("splits", 1)}
        rows.append(row)
        print(f'{r["name"]:<34} {r["median_ms"]:>9.4f} {med:>9.4f} {row["ratio"]:>6.3f} {tf:>8.1f} '
              f'{row["peak_fraction"]:>6.3f}')
        del a, b, out
    with open(sys.argv[2], "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
