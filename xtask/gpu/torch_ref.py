"""PyTorch reference timings for the cases of Genesis's gpu_elementwise bench.

Same sizes, random data, CUDA events around each run, warm-up, median of 50 runs.
Usage: python3 torch_ref.py OUT.json
"""
import json
import sys
import time

import torch

N = 64 << 20
WARMUP, RUNS = 5, 50


def timed(fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(RUNS):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    ms.sort()
    return ms[RUNS // 2], ms[0]


def wall(fn, runs):
    """Wall clock of fn() and a synchronisation (as Genesis's facade rows measure)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    return ms[runs // 2], ms[0]


def main():
    dev = torch.device("cuda:0")
    rows = []
    for name, dt in [("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16),
                     ("i32", torch.int32), ("i64", torch.int64)]:
        if dt.is_floating_point:
            a = (torch.rand(N, device=dev) * 200 - 100).to(dt)
            b = (torch.rand(N, device=dev) * 200 - 100).to(dt)
        else:
            a = torch.randint(-100, 100, (N,), device=dev, dtype=dt)
            b = torch.randint(-100, 100, (N,), device=dev, dtype=dt)
        out = torch.empty_like(a)
        size = a.element_size()
        med, mn = timed(lambda: torch.add(a, b, out=out))
        rows.append({"name": f"add_{name}", "bytes": 3 * N * size, "median_ms": med, "min_ms": mn})
        med, mn = timed(lambda: torch.mul(a, b, out=out))
        rows.append({"name": f"mul_{name}", "bytes": 3 * N * size, "median_ms": med, "min_ms": mn})
        if dt.is_floating_point:
            med, mn = timed(lambda: torch.maximum(a, b, out=out))
            rows.append({"name": f"maximum_{name}", "bytes": 3 * N * size, "median_ms": med, "min_ms": mn})
            med, mn = timed(lambda: torch.exp(a, out=out))
            rows.append({"name": f"exp_{name}", "bytes": 2 * N * size, "median_ms": med, "min_ms": mn})
        med, mn = timed(lambda: out.fill_(1.5 if dt.is_floating_point else 1))
        rows.append({"name": f"fill_{name}", "bytes": N * size, "median_ms": med, "min_ms": mn})
        del a, b, out
    m = torch.rand(8192, 8192, device=dev)
    med, mn = timed(lambda: m.t().contiguous())
    rows.append({"name": "transpose_8192_f32", "bytes": 2 * 8192 * 8192 * 4, "median_ms": med, "min_ms": mn})
    s = m[::2, ::3]
    med, mn = timed(lambda: s.contiguous())
    rows.append({"name": "slice_2_3_8192_f32", "bytes": 2 * s.numel() * 4, "median_ms": med, "min_ms": mn})
    med, mn = timed(lambda: m.to(torch.bfloat16))
    rows.append({"name": "cast_f32_bf16_64Mi", "bytes": 8192 * 8192 * 6, "median_ms": med, "min_ms": mn})
    del m, s
    # Reductions: all 64 Mi elements, and each dim of 8192 x 8192 (input bytes counted).
    for name, dt in [("f32", torch.float32), ("bf16", torch.bfloat16)]:
        x = (torch.rand(N, device=dev) * 200 - 100).to(dt)
        size = x.element_size()
        for op, fn in [("sum", torch.sum), ("mean", torch.mean), ("max", torch.max)]:
            med, mn = timed(lambda: fn(x))
            rows.append({"name": f"{op}_{name}", "bytes": N * size, "median_ms": med, "min_ms": mn})
        m = x.view(8192, 8192)
        cases = [("sum_dim1", lambda: m.sum(1)), ("sum_dim0", lambda: m.sum(0))]
        if name == "f32":
            cases += [("mean_dim0", lambda: m.mean(0)), ("max_dim1", lambda: m.max(1)),
                      ("max_dim0", lambda: m.max(0))]
        for op, fn in cases:
            med, mn = timed(fn)
            rows.append({"name": f"{op}_{name}", "bytes": N * size, "median_ms": med, "min_ms": mn})
        if name == "bf16":
            # GPT-2's bias gradients (batch 32 x 1024 rows): few columns, many rows.
            for inner in (768, 2048):
                g = x[:32768 * inner].view(32768, inner)
                med, mn = timed(lambda: g.sum(0))
                rows.append({"name": f"sum_dim0_bf16_32768x{inner}", "bytes": g.numel() * size,
                             "median_ms": med, "min_ms": mn})
        del x, m
    host = torch.rand(N)
    pinned = host.pin_memory()
    dst = torch.empty(N, device=dev)
    med, mn = timed(lambda: dst.copy_(pinned))
    rows.append({"name": "pinned_h2d_256MiB", "bytes": N * 4, "median_ms": med, "min_ms": mn})
    pinned_out = torch.empty(N).pin_memory()
    med, mn = timed(lambda: pinned_out.copy_(dst))
    rows.append({"name": "pinned_d2h_256MiB", "bytes": N * 4, "median_ms": med, "min_ms": mn})
    med, mn = timed(lambda: dst.copy_(host))
    rows.append({"name": "pageable_h2d_256MiB", "bytes": N * 4, "median_ms": med, "min_ms": mn})
    dst2 = torch.empty_like(dst)
    med, mn = timed(lambda: dst2.copy_(dst))
    rows.append({"name": "storage_d2d_256MiB", "bytes": 2 * N * 4, "median_ms": med, "min_ms": mn})
    m2 = torch.rand(8192, 8192, device=dev)
    med, mn = timed(lambda: m2.t().contiguous())
    rows.append({"name": "contiguous_t_8192_f32", "bytes": 2 * 8192 * 8192 * 4, "median_ms": med, "min_ms": mn})
    if torch.cuda.device_count() > 1:
        other = torch.empty(N, device="cuda:1")
        med, mn = timed(lambda: other.copy_(dst))
        rows.append({"name": "peer_0_to_1_256MiB", "bytes": N * 4, "median_ms": med, "min_ms": mn})
        med, mn = timed(lambda: dst.copy_(other))
        rows.append({"name": "peer_1_to_0_256MiB", "bytes": N * 4, "median_ms": med, "min_ms": mn})
        del other
    g = torch.Generator(device="cpu").manual_seed(0)
    ridx = torch.randperm(8192, generator=g)[:4096].to(dev)
    rows_bytes = 2 * 4096 * 8192 * 4
    med, mn = timed(lambda: m2[ridx])
    rows.append({"name": "gather_4096_rows_8192_f32", "bytes": rows_bytes, "median_ms": med, "min_ms": mn})
    med, mn = wall(lambda: m2[ridx], 30)
    rows.append({"name": "gather_4096_rows_8192_f32_wall", "bytes": rows_bytes, "median_ms": med, "min_ms": mn})
    vals = torch.zeros(4096, 8192, device=dev)
    med, mn = timed(lambda: m2.index_put_((ridx,), vals))
    rows.append({"name": "index_put_4096_rows_8192_f32", "bytes": rows_bytes, "median_ms": med, "min_ms": mn})
    del vals, ridx
    del host, pinned, dst, pinned_out, dst2, m2
    src = torch.rand(N, device=dev)
    dst = torch.empty_like(src)
    med, mn = timed(lambda: dst.copy_(src))
    rows.append({"name": "copy_d2d_256MiB", "bytes": 2 * N * 4, "median_ms": med, "min_ms": mn})
    # The facade bench (gpu_facade): wall clock with synchronize, as Genesis measures it.
    one = torch.ones(1, device=dev)

    def adds():
        x = torch.zeros(1, device=dev)
        for _ in range(1000):
            x = x.add(one)
        return x.item()
    med, mn = wall(adds, 21)
    rows.append({"name": "add_1elem_x1000", "bytes": 0, "median_ms": med, "min_ms": mn})
    xi = torch.zeros(1, device=dev)

    def adds_inplace():
        for _ in range(1000):
            xi.add_(one)
    med, mn = wall(adds_inplace, 21)
    rows.append({"name": "add_inplace_1elem_x1000", "bytes": 0, "median_ms": med, "min_ms": mn})
    m = torch.rand(8192, 8192, device=dev)
    for name, fn in [("t_sum_f32", lambda: m.sum()), ("t_mean_f32", lambda: m.mean()),
                     ("t_max_f32", lambda: m.max()), ("t_sum_dim1_f32", lambda: m.sum(1)),
                     ("t_sum_dim0_f32", lambda: m.sum(0)), ("t_max_dim1_f32", lambda: m.max(1))]:
        med, mn = wall(fn, 30)
        rows.append({"name": name, "bytes": m.numel() * 4, "median_ms": med, "min_ms": mn})
    del m
    x = torch.rand(8192 * 8192, device=dev)
    mask = torch.rand(8192 * 8192, device=dev) < 0.5
    n = x.numel()
    med, mn = wall(lambda: x[mask], 30)
    rows.append({"name": "masked_select_50pct_64Mi_f32", "bytes": n * 4 + 2 * n + n * 2,
                 "median_ms": med, "min_ms": mn})
    y = x.clone()
    med, mn = wall(lambda: y.masked_fill_(mask, 1.5), 30)
    rows.append({"name": "masked_fill_50pct_64Mi_f32", "bytes": n * 4 + n + n * 2,
                 "median_ms": med, "min_ms": mn})

    def fill_ten():
        for _ in range(10):
            y.masked_fill_(mask, 1.5)
    # Ten launches back to back between events: the kernel's time without the launch gap
    # (gpu_index's mask_fill_x10 row is timed the same way).
    med, mn = timed(fill_ten)
    rows.append({"name": "mask_fill_x10_50pct_64Mi_f32", "bytes": n * 4 + n + n * 4,
                 "median_ms": med / 10, "min_ms": mn / 10})
    del x, mask, y
    x = torch.rand(8192, 8192, device=dev)
    bias = torch.rand(8192, device=dev)
    halves = [torch.rand(4096, 8192, device=dev), torch.rand(4096, 8192, device=dev)]
    n2 = 8192 * 8192
    for name, nbytes, fn in [
            ("add_bias_8192x8192_f32", 2 * n2 * 4 + 8192 * 4, lambda: x + bias),
            ("add_scalar_8192x8192_f32", 2 * n2 * 4, lambda: x + 1.0),
            ("cat_2x4096x8192_f32", 2 * n2 * 4, lambda: torch.cat(halves, 0)),
            ("cat_dim1_2x4096x8192_f32", 2 * n2 * 4, lambda: torch.cat(halves, 1))]:
        med, mn = wall(fn, 30)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, bias, halves
    # The everyday ops of gpu_facade, on 8192^2 f32 (any: 64 Mi bools); bytes: input + output.
    x = torch.rand(8192, 8192, device=dev)
    flags = torch.rand(8192 * 8192, device=dev) < 0.5
    idx = torch.randint(0, 8191, (8192, 8192), device=dev)
    sel = torch.randint(0, 8191, (4096,), device=dev)
    narrow = torch.rand(8192, 1024, device=dev)
    wide = torch.rand(8192, 4096, device=dev)
    pinned = torch.rand(8192, 8192).pin_memory()
    for name, nbytes, fn in [
            ("sort_8192x1024_f32", 8192 * 1024 * (4 + 4 + 8), lambda: narrow.sort(dim=1, stable=True)),
            ("sort_8192x4096_f32", 8192 * 4096 * (4 + 4 + 8), lambda: wide.sort(dim=1, stable=True)),
            ("topk16_8192x1024_f32", 8192 * 1024 * 4 + 8192 * 16 * 12, lambda: narrow.topk(16, 1)),
            ("cumsum_dim1_8192x8192_f32", 2 * n2 * 4, lambda: x.cumsum(1)),
            ("gather_dim1_8192x8192_f32", 2 * n2 * 4 + n2 * 8, lambda: x.gather(1, idx)),
            ("index_select_4096_rows_8192_f32", 2 * 4096 * 8192 * 4, lambda: x.index_select(0, sel)),
            ("scatter_add_dim0_8192x8192_f32", 3 * n2 * 4 + n2 * 8, lambda: x.scatter_add(0, idx, x)),
            ("sin_8192x8192_f32", 2 * n2 * 4, lambda: x.sin()),
            ("clamp_8192x8192_f32", 2 * n2 * 4, lambda: x.clamp(0.25, 0.75)),
            ("erf_8192x8192_f32", 2 * n2 * 4, lambda: x.erf()),
            ("gelu_8192x8192_f32", 2 * n2 * 4, lambda: torch.nn.functional.gelu(x)),
            ("gelu_tanh_8192x8192_f32", 2 * n2 * 4,
             lambda: torch.nn.functional.gelu(x, approximate="tanh")),
            ("silu_8192x8192_f32", 2 * n2 * 4, lambda: torch.nn.functional.silu(x)),
            ("round_8192x8192_f32", 2 * n2 * 4, lambda: x.round()),
            ("isnan_8192x8192_f32", n2 * 5, lambda: x.isnan()),
            ("nan_to_num_8192x8192_f32", 2 * n2 * 4, lambda: x.nan_to_num()),
            ("prod_dim1_8192x8192_f32", n2 * 4 + 8192 * 4, lambda: x.prod(1)),
            ("var_dim1_8192x8192_f32", n2 * 4 + 8192 * 4, lambda: x.var(1)),
            ("var_dim0_8192x8192_f32", n2 * 4 + 8192 * 4, lambda: x.var(0)),
            ("sum_rows_of_8_8192x8192_f32", n2 * 4 + n2 // 2, lambda: x.reshape(-1, 8).sum(1)),
            ("argmax_rows_of_4_8192x8192_f32", n2 * 4 + n2 * 2,
             lambda: x.reshape(-1, 4).argmax(1)),
            ("any_64Mi_bool", n2, lambda: flags.any()),
            ("to_dtype_bf16_8192x8192_f32", n2 * 6, lambda: x.to(torch.bfloat16)),
            ("to_cuda_pinned_8192x8192_f32", n2 * 8, lambda: pinned.to(dev)),
            ("to_cpu_8192x8192_f32", n2 * 8, lambda: x.cpu())]:
        med, mn = wall(fn, 30)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, flags, idx, sel, narrow, wide, pinned
    # Floor division, remainder and the bitwise ops of gpu_facade on 8192^2.
    x = torch.rand(8192, 8192, device=dev)
    y = torch.rand(8192, 8192, device=dev) + 0.5
    a = torch.randint(-1000, 1000, (8192, 8192), device=dev)
    b = torch.randint(1, 50, (8192, 8192), device=dev)
    ai, bi = a.int(), b.int()
    for name, nbytes, fn in [
            ("floor_divide_8192x8192_f32", 3 * n2 * 4, lambda: torch.floor_divide(x, y)),
            ("remainder_scalar_8192x8192_f32", 2 * n2 * 4, lambda: x % 0.3),
            ("remainder_8192x8192_i64", 3 * n2 * 8, lambda: a % b),
            ("bitwise_and_8192x8192_i32", 3 * n2 * 4, lambda: ai & bi)]:
        med, mn = wall(fn, 30)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, y, a, b, ai, bi
    # The softmax family of gpu_facade, on 8192^2 f32 and bf16; bytes: input + output.
    x = torch.randn(8192, 8192, device=dev)
    xb = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for name, nbytes, fn in [
            ("softmax_dim1_8192x8192_f32", 2 * n2 * 4, lambda: torch.softmax(x, 1)),
            ("log_softmax_dim1_8192x8192_f32", 2 * n2 * 4, lambda: torch.log_softmax(x, 1)),
            ("softmax_dim1_8192x8192_bf16", 2 * n2 * 2, lambda: torch.softmax(xb, 1)),
            ("log_softmax_dim1_8192x8192_bf16", 2 * n2 * 2, lambda: torch.log_softmax(xb, 1)),
            ("logsumexp_dim1_8192x8192_f32", n2 * 4 + 8192 * 4, lambda: torch.logsumexp(x, 1)),
            ("softmax_dim0_8192x8192_f32", 2 * n2 * 4, lambda: torch.softmax(x, 0))]:
        med, mn = wall(fn, 30)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, xb
    # The convolutional network ops of gpu_facade on [32, 64, 56, 56]; bytes: input + output
    # (the convolutions: 0). PyTorch's defaults (cuDNN; TF32 allowed for float32 convolutions).
    import torch.nn.functional as F
    x = torch.randn(32, 64, 56, 56, device=dev)
    xb = x.bfloat16()
    w = torch.randn(64, 64, 3, 3, device=dev) * 0.05
    wb = w.bfloat16()
    wg = wb.detach().requires_grad_(True)
    rm, rv = torch.zeros(64, device=dev), torch.ones(64, device=dev)
    bn_w, bn_b = torch.ones(64, device=dev), torch.zeros(64, device=dev)
    n_img = 32 * 64 * 56 * 56

    def fwd_bwd():
        F.conv2d(xb, wg, padding=1).sum().backward()
        wg.grad = None

    for name, nbytes, fn in [
            ("conv2d_3x3_64c_56x56_n32_f32", 0, lambda: F.conv2d(x, w, padding=1)),
            ("conv2d_3x3_64c_56x56_n32_bf16", 0, lambda: F.conv2d(xb, wb, padding=1)),
            ("conv2d_fwd_bwd_3x3_64c_56x56_n32_bf16", 0, fwd_bwd),
            ("max_pool2d_3x3_s2_64c_56x56_n32_f32", n_img * 4 + n_img,
             lambda: F.max_pool2d(x, 3, stride=2, padding=1)),
            ("avg_pool2d_2x2_64c_56x56_n32_f32", n_img * 4 + n_img, lambda: F.avg_pool2d(x, 2)),
            ("batch_norm_train_64c_56x56_n32_f32", 2 * n_img * 4,
             lambda: F.batch_norm(x, rm, rv, bn_w, bn_b, True, 0.1, 1e-5)),
            ("interpolate_bilinear_2x_64c_56x56_n32_f32", 5 * n_img * 4,
             lambda: F.interpolate(x, size=(112, 112), mode="bilinear", align_corners=False)),
            ("permute_nhwc_contiguous_64c_56x56_n32_f32", 2 * n_img * 4,
             lambda: x.permute(0, 2, 3, 1).contiguous()),
            ("permute_nhwc_contiguous_64c_56x56_n32_bf16", 2 * n_img * 2,
             lambda: xb.permute(0, 2, 3, 1).contiguous()),
            ("pad_1_64c_56x56_n32_f32", n_img * 4 + 32 * 64 * 58 * 58 * 4,
             lambda: F.pad(x, (1, 1, 1, 1)))]:
        med, mn = wall(fn, 10)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, xb, w, wb, wg
    # The shape and selection ops of gpu_facade; bytes: input + output.
    x = torch.rand(8192, 8192, device=dev)
    half = torch.rand(4096, 4096, device=dev)
    flags = torch.rand(8192, 8192, device=dev) < 0.5
    values = torch.randint(0, 1_000_000, (1 << 24,), device=dev)
    classes = torch.randint(0, 100, (1 << 20,), device=dev)
    for name, nbytes, fn in [
            ("flip_dim1_8192x8192_f32", 2 * n2 * 4, lambda: x.flip(1)),
            ("roll_dim1_8192x8192_f32", 2 * n2 * 4, lambda: x.roll(1000, 1)),
            ("repeat_2x2_4096x4096_f32", 5 * (n2 // 4) * 4, lambda: half.repeat(2, 2)),
            ("tril_8192x8192_f32", 2 * n2 * 4, lambda: x.tril()),
            ("nonzero_50pct_8192x8192_bool", n2 + n2 // 2 * 16, lambda: flags.nonzero()),
            ("unique_16Mi_i64", (1 << 24) * 8 * 2,
             lambda: torch.unique(values, sorted=True, return_inverse=True, return_counts=True)),
            ("one_hot_1Mi_100_i64", (1 << 20) * 8 * 101,
             lambda: torch.nn.functional.one_hot(classes, 100)),
            ("chunk_cat_dim1_8192x8192_f32", 2 * n2 * 4, lambda: torch.cat(x.chunk(4, 1), 1))]:
        med, mn = wall(fn, 10)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, half, flags, values, classes
    # Long sorts, unique of wide values, and the elementwise families not above.
    x = torch.rand(8192, 8192, device=dev)
    y = torch.rand(8192, 8192, device=dev)
    cond = torch.rand(8192, 8192, device=dev) < 0.5
    long = torch.rand(1 << 24, device=dev)
    wide = torch.randint(-(1 << 62), (1 << 62) - 1, (1 << 24,), device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    for name, nbytes, fn in [
            ("sort_16Mi_f32", (1 << 24) * (4 + 4 + 8), lambda: torch.sort(long, stable=True)),
            ("sort_16Mi_i64_wide", (1 << 24) * (8 + 8 + 8), lambda: torch.sort(wide, stable=True)),
            ("unique_16Mi_i64_wide", (1 << 24) * 8 * 2,
             lambda: torch.unique(wide, sorted=True, return_inverse=True, return_counts=True)),
            ("lt_8192x8192_f32", n2 * 9, lambda: x < y),
            ("where_8192x8192_f32", n2 * 13, lambda: torch.where(cond, x, y)),
            ("pow_8192x8192_f32", n2 * 12, lambda: torch.pow(x, y)),
            ("cumprod_dim1_8192x8192_f32", n2 * 8, lambda: torch.cumprod(x, 1)),
            ("rand_8192x8192_f32", n2 * 4, lambda: torch.rand(8192, 8192, device=dev, generator=gen)),
            ("randn_8192x8192_f32", n2 * 4, lambda: torch.randn(8192, 8192, device=dev, generator=gen)),
            ("randint_16Mi_i64", (1 << 24) * 8,
             lambda: torch.randint(0, 1_000_000, (1 << 24,), device=dev, generator=gen))]:
        med, mn = wall(fn, 10)
        rows.append({"name": name, "bytes": nbytes, "median_ms": med, "min_ms": mn})
    del x, y, cond, long, wide
    for dt, name in [(torch.float32, "matmul_4096_f32"), (torch.bfloat16, "matmul_4096_bf16"),
                     (torch.float64, "matmul_4096_f64")]:
        a = torch.randn(4096, 4096, device=dev, dtype=dt)
        b = torch.randn(4096, 4096, device=dev, dtype=dt)
        med, mn = wall(lambda: a @ b, 10)
        rows.append({"name": name, "bytes": 0, "median_ms": med, "min_ms": mn,
                     "tflops": 2 * 4096 ** 3 / (med * 1e-3) / 1e12})
        del a, b
    # GPT-2 124M's optimiser step (nanoGPT's parameter shapes, vocabulary 50,304, f32):
    # fused AdamW, and clip_grad_norm_ (foreach) with a bound that never clips.
    shapes = [(50304, 768), (1024, 768)]
    for _ in range(12):
        shapes += [(768,), (768,), (2304, 768), (2304,), (768, 768), (768,), (768,), (768,),
                   (3072, 768), (3072,), (768, 3072), (768,)]
    shapes += [(768,), (768,)]
    n = sum(torch.Size(s).numel() for s in shapes)
    params = [torch.nn.Parameter(torch.randn(s, device=dev) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)
    med, mn = wall(opt.step, 20)
    rows.append({"name": "adamw_step_gpt2_124m_f32", "bytes": n * 28, "median_ms": med,
                 "min_ms": mn})
    med, mn = wall(lambda: torch.nn.utils.clip_grad_norm_(params, 1e9), 20)
    rows.append({"name": "clip_grad_norm_gpt2_124m_f32", "bytes": n * 12, "median_ms": med,
                 "min_ms": mn})
    del params, opt
    x = torch.randn(64, 1024, device=dev)
    w1 = torch.randn(1024, 4096, device=dev)
    b1 = torch.randn(4096, device=dev)
    w2 = torch.randn(4096, 1024, device=dev)
    med, mn = wall(lambda: (torch.relu(x @ w1 + b1) @ w2).sum(), 50)
    rows.append({"name": "mlp_step_f32", "bytes": 0, "median_ms": med, "min_ms": mn,
                 "tflops": 2 * 64 * 1024 * 4096 * 2 / (med * 1e-3) / 1e12})
    del x, w1, b1, w2
    for r in rows:
        r["gb_per_s"] = r["bytes"] / (r["median_ms"] * 1e-3) / 1e9
        print(f'{r["name"]:<18} {r["median_ms"]:>10.4f} {r["min_ms"]:>10.4f} {r["gb_per_s"]:>10.1f}')
    with open(sys.argv[1], "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "elements": N, "runs": RUNS, "results": rows}, f)


if __name__ == "__main__":
    main()
