"""torch.nn.functional.scaled_dot_product_attention (the flash and cuDNN backends) on the rows of
Genesis's gpu_attention bench, in its table format.

bf16 ([B, H, T, D] contiguous; rows `attn_f32_...`: f32 on the memory-efficient backend, PyTorch's
choice for f32, and the math one), random data in [-1, 1); CUDA events around each run, warm-up,
median. Forward: the forward alone. Backward: forward + backward minus the forward (PyTorch's
backward needs its own forward's saved tensors), with `do` random. TFLOP/s as the bench counts:
4 B H T^2 D for the forward (halved when causal), 2.5 times that for the backward. The row
`..._packed` is the batch-32 GPT-2 case as nanoGPT lays it out: q, k, v split from one
[B, T, 3 C] projection and viewed as [B, H, T, D], the output's gradient a transposed view of
a [B, T, H, D] tensor.
Usage: python3 torch_attention.py [OUT.json]
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from soak import SOAK_MS, sustained

CASES = [(8, 12, 1024, 64, True), (32, 12, 1024, 64, True), (4, 16, 2048, 128, True),
         (4, 16, 2048, 128, False)]
# The flash backend (FlashAttention-2) and cuDNN's (what PyTorch picks on Hopper by default).
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
F32_CASES = [(8, 12, 1024, 64, True), (8, 12, 1024, 64, False)]
F32_BACKENDS = [("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
WARMUP, RUNS = 5, 30


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
    print(f"device: {torch.cuda.get_device_name(dev)}, bf16, [B, H, T, D] contiguous, "
          f"median of {RUNS} after {WARMUP} warm-up (torch {torch.__version__})")
    print(f'{"case":<34} {"fwd ms":>9} {"fwd TF/s":>9} {"bwd ms":>9} {"bwd TF/s":>9}')
    rows = []
    runs = [(c, torch.bfloat16, "", BACKENDS, False) for c in CASES]
    runs += [(CASES[1], torch.bfloat16, "", BACKENDS, True)]
    runs += [(c, torch.float32, "f32_", F32_BACKENDS, False) for c in F32_CASES]
    for (b, h, t, d, causal), dtype, prefix, backends, packed in runs:
        if packed:
            qkv = (torch.rand(b, t, 3 * h * d, device=dev, dtype=dtype) * 2 - 1).requires_grad_(True)
            q, k, v = (x.view(b, t, h, d).transpose(1, 2) for x in qkv.split(h * d, dim=2))
            g = (torch.rand(b, t, h, d, device=dev, dtype=dtype) * 2 - 1).transpose(1, 2)
            leaves = (qkv,)
        else:
            q, k, v = (torch.rand(b, h, t, d, device=dev, dtype=dtype) * 2 - 1 for _ in range(3))
            q.requires_grad_(True)
            k.requires_grad_(True)
            v.requires_grad_(True)
            g = torch.rand(b, h, t, d, device=dev, dtype=dtype) * 2 - 1
            leaves = (q, k, v)
        for backend_name, backend in backends:
            with sdpa_kernel(backend):
                with torch.no_grad():
                    fwd, fwd_min = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

                def both():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.autograd.grad(o, leaves, g)

                fb, fb_min = timed(both)
            bwd = fb - fwd
            if SOAK_MS > 0 and packed:
                with sdpa_kernel(backend):
                    with torch.no_grad():
                        sf = sustained(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                    sfb = sustained(both)
                print(f"sustained {backend_name} packed: forward {sf:.4f} ms, backward {sfb - sf:.4f} ms")
            flops = 4.0 * b * h * t * t * d / (2 if causal else 1)
            ft, bt = flops / (fwd * 1e-3) / 1e12, 2.5 * flops / (bwd * 1e-3) / 1e12
            name = (f"attn_{prefix}b{b}_h{h}_t{t}_d{d}" + ("_causal" if causal else "")
                    + ("_packed" if packed else ""))
            print(f"{name + ' ' + backend_name:<34} {fwd:>9.3f} {ft:>9.1f} {bwd:>9.3f} {bt:>9.1f}")
            rows.append({"name": name, "backend": backend_name, "fwd_median_ms": fwd,
                         "fwd_min_ms": fwd_min, "fwd_tflops": ft, "fwd_bwd_median_ms": fb,
                         "fwd_bwd_min_ms": fb_min, "bwd_median_ms": bwd, "bwd_tflops": bt})
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                       "results": rows}, f)


if __name__ == "__main__":
    main()
