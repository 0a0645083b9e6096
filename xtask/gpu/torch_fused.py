"""PyTorch's equivalents of Genesis's gpu_fused bench rows, in its table format.

ce_*_fused: F.cross_entropy(logits, targets) (mean) forward and backward (logits requiring
grad, the gradient into logits.grad), logits [N, 50304] random in [-4, 4); ce_*_fwd: the
forward alone under no_grad. ln_*_fwd: h = x + r; F.layer_norm(h, (768,), w, b) under no_grad,
[32768, 768]; ln_*_bwd: forward + backward (torch.autograd.grad of y for x, r, w, b with a
random dy) minus the forward (PyTorch's backward needs its own forward's saved tensors). bf16
and f32. ln_*_f32_to_{f32,bf16}_fwd: F.layer_norm of f32 rows (no residual), then .to(bf16)
for the bf16 row (autocast's norm before a product: two kernels); ln_*_f32_dy_*_bwd: its
backward for x, w, b (autograd, minus the forward). ln_*_f32_r_bf16_to_bf16_fwd: x + r (f32 x,
bf16 r), F.layer_norm of the sum, .to(bf16) (autocast's residual add and norm). gelu_tanh_*: F.gelu(x, approximate="tanh")
of [32768, 3072] bf16 under no_grad, and aten's gelu_backward(g, x, approximate="tanh"); _bwd_colsum: that, then .sum(0) (the MLP's
first bias gradient). CUDA events around each run, warm-up, median. GB/s with the bench's byte counts (the
least traffic: 2 N V elements for ce fused, N V for ce fwd, 4 N C for ln fwd and bwd, those of
gpu_fused.rs for the other rows).
Usage: python3 torch_fused.py [OUT.json]
"""
import json
import sys

import torch
import torch.nn.functional as F

VOCAB, CE_ROWS, LN_ROWS, LN_COLS = 50304, (8 * 1024, 32 * 1024), 32 * 1024, 768
WARMUP, RUNS = 5, 30
NAMES = {torch.bfloat16: "bf16", torch.float32: "f32"}


def timed(fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(RUNS):
        s.record()
        fn()
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    return ms[len(ms) // 2], ms[0]


def main():
    dev = torch.device("cuda:0")
    print(f"device: {torch.cuda.get_device_name(dev)}, median of {RUNS} after {WARMUP} warm-up "
          f"(torch {torch.__version__})")
    print(f'{"case":<32} {"ms":>9} {"min ms":>9} {"GB/s":>9}')
    rows = []

    def add(name, t, nbytes):
        med, mn = t
        gbs = nbytes / (med * 1e-3) / 1e9
        print(f"{name:<32} {med:>9.3f} {mn:>9.3f} {gbs:>9.1f}")
        rows.append({"name": name, "median_ms": med, "min_ms": mn, "gbps": gbs})

    for n in CE_ROWS:
        for dt in (torch.bfloat16, torch.float32):
            elem = torch.tensor([], dtype=dt).element_size()
            logits = ((torch.rand(n, VOCAB, device=dev) * 8 - 4).to(dt)).requires_grad_(True)
            targets = torch.randint(0, VOCAB, (n,), device=dev)

            def fused():
                logits.grad = None
                F.cross_entropy(logits, targets).backward()

            with torch.no_grad():
                fwd = timed(lambda: F.cross_entropy(logits, targets))
            fb = timed(fused)
            base = f"ce_n{n}_v{VOCAB}_{NAMES[dt]}"
            add(f"{base}_fused", fb, 2.0 * n * VOCAB * elem)
            add(f"{base}_fwd", fwd, 1.0 * n * VOCAB * elem)
            del logits, targets
            torch.cuda.empty_cache()

    for dt in (torch.bfloat16, torch.float32):
        elem = torch.tensor([], dtype=dt).element_size()
        shape = (LN_ROWS, LN_COLS)
        x = (torch.rand(shape, device=dev) * 4 - 2).to(dt).requires_grad_(True)
        r = (torch.rand(shape, device=dev) * 4 - 2).to(dt).requires_grad_(True)
        w = (torch.rand(LN_COLS, device=dev) * 2 - 1).to(dt).requires_grad_(True)
        b = (torch.rand(LN_COLS, device=dev) * 2 - 1).to(dt).requires_grad_(True)
        dy = (torch.rand(shape, device=dev) * 2 - 1).to(dt)

        def both():
            y = F.layer_norm(x + r, (LN_COLS,), w, b)
            torch.autograd.grad(y, (x, r, w, b), dy)

        with torch.no_grad():
            fwd = timed(lambda: F.layer_norm(x + r, (LN_COLS,), w, b))
        fb = timed(both)
        bwd = (fb[0] - fwd[0], fb[1] - fwd[1])
        base = f"ln_n{LN_ROWS}_c{LN_COLS}_{NAMES[dt]}"
        nbytes = 4.0 * LN_ROWS * LN_COLS * elem
        add(f"{base}_fwd", fwd, nbytes)
        add(f"{base}_bwd", bwd, nbytes)

    # f32 rows without the residual, y in f32 or bf16 (the conversion a second kernel here).
    shape = (LN_ROWS, LN_COLS)
    n = LN_ROWS * LN_COLS
    x = (torch.rand(shape, device=dev) * 4 - 2).requires_grad_(True)
    w = (torch.rand(LN_COLS, device=dev) * 2 - 1).requires_grad_(True)
    b = (torch.rand(LN_COLS, device=dev) * 2 - 1).requires_grad_(True)
    for dt, o in ((torch.float32, 4), (torch.bfloat16, 2)):
        dy = (torch.rand(shape, device=dev) * 2 - 1).to(dt)

        def norm():
            return F.layer_norm(x, (LN_COLS,), w, b).to(dt)

        def both():
            torch.autograd.grad(norm(), (x, w, b), dy)

        with torch.no_grad():
            fwd = timed(norm)
        fb = timed(both)
        base = f"ln_n{LN_ROWS}_c{LN_COLS}_f32"
        if dt != torch.float32:
            r = (torch.rand(shape, device=dev) * 2 - 1).to(dt)
            with torch.no_grad():
                radd = timed(lambda: F.layer_norm(x + r, (LN_COLS,), w, b).to(dt))
            add(f"{base}_r_{NAMES[dt]}_to_{NAMES[dt]}_fwd", radd, 2 * (4 + o) * n)
        add(f"{base}_to_{NAMES[dt]}_fwd", fwd, (4 + o) * n)
        add(f"{base}_dy_{NAMES[dt]}_bwd", (fb[0] - fwd[0], fb[1] - fwd[1]), (o + 12) * n)

    gx = (torch.rand(32 * 1024, 3072, device=dev) * 4 - 2).to(torch.bfloat16)
    gg = (torch.rand(32 * 1024, 3072, device=dev) * 2 - 1).to(torch.bfloat16)
    gn = gx.numel()
    with torch.no_grad():
        add("gelu_tanh_n32768_c3072_bf16_fwd", timed(lambda: F.gelu(gx, approximate="tanh")),
            2 * gn * 2)
        add("gelu_tanh_n32768_c3072_bf16_bwd",
            timed(lambda: torch.ops.aten.gelu_backward(gg, gx, approximate="tanh")), 3 * gn * 2)
        add("gelu_tanh_n32768_c3072_bf16_bwd_colsum",
            timed(lambda: torch.ops.aten.gelu_backward(gg, gx, approximate="tanh").sum(0)),
            3 * gn * 2)

    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                       "results": rows}, f)


if __name__ == "__main__":
    main()
