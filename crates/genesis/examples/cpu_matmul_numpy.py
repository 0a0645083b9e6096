"""NumPy's side of cpu_matmul_bench.rs: median ms of square products, printed as NAME=MS pairs
to pass to the Rust example. Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS (default: all)."""
import sys, time
import numpy as np

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 11
rng = np.random.default_rng(0)
out = []
for name, dt, n in [("f32-256", np.float32, 256), ("f32-1000", np.float32, 1000), ("f32t-1000", np.float32, 1000),
                    ("f32-2000", np.float32, 2000), ("f64-256", np.float64, 256),
                    ("f64-1000", np.float64, 1000), ("f64-2000", np.float64, 2000),
                    ("i64-1000", np.int64, 1000)]:
    if dt is np.int64:
        a, b = (rng.integers(0, 100, (n, n)) for _ in range(2))
    else:
        a, b = (rng.random((n, n), dtype=dt) for _ in range(2))
    if name.startswith("f32t"):
        a = a.T  # a transposed view, as the Rust side's `a.t()`
    r = (reps + 1) // 2 if n >= 2000 else reps
    a @ b
    ts = []
    for _ in range(r):
        t = time.perf_counter(); a @ b; ts.append((time.perf_counter() - t) * 1e3)
    out.append(f"{name}={sorted(ts)[len(ts) // 2]:.2f}")
print(" ".join(out))
