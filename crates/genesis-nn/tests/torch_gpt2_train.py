"""PyTorch's twin of examples/gpt2_train.rs: GPT-2 in nanoGPT's layout (GELU tanh, tied head),
loaded from the initial parameters the example wrote (--init), trained on the same windows of
byte tokens of the same *.py files with AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on
every parameter) and clipping at 1; prints the same lines.

    python3 torch_gpt2_train.py INIT.safetensors --config tiny --batch 4 --seq 64 --steps 20 \\
        [--device cuda] [--bf16] [--compile] [--text DIR] [--warmup N] [--profile N]

--profile N times N more steps under torch.profiler and prints each kernel's device time a
step, grouped as products, attention, Triton's fused kernels (torch.compile) and the rest.
"""
import argparse
import math
import glob
import os
import time

import torch

import twins
from twins import CONFIGS, GPT, load_safetensors, window_batch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("init")
    p.add_argument("--config", default="tiny")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--text", default=None)
    p.add_argument("--warmup", type=int, default=0, metavar="N",
                   help="the learning rate warmed up linearly over N steps, then a cosine to a tenth at the last step")
    p.add_argument("--math-attention", action="store_true", help="written-out attention, AdamW unfused")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the steps, N more under torch.profiler: each kernel's device time a step")
    a = p.parse_args()
    # On CUDA, PyTorch's fast settings: SDPA attention (its default backend: cuDNN's on the H200)
    # and the fused AdamW.
    fast = a.device == "cuda" and not a.math_attention
    twins.SDPA = fast
    if a.text is None:
        text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "corpus.txt"), "rb").read()
    else:
        text = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(a.text, "*.py"))) if os.path.isfile(f))
    model = GPT(CONFIGS[a.config]).to(a.device)
    model.load_state_dict({k: v.to(a.device) for k, v in load_safetensors(a.init).items()})
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fast)
    run = torch.compile(model) if a.compile else model
    print("gpt2 %s, batch %d x %d, %d bytes of text, %s%s" % (a.config, a.batch, a.seq, len(text), a.device, ", bf16 autocast" if a.bf16 else ""))
    for step in range(a.steps):
        x, y = window_batch(text, step, a.batch, a.seq, 7919, a.device)
        if a.warmup > 0:
            for g in opt.param_groups:
                g["lr"] = 6e-4 * lr_factor(step, a.warmup, a.steps)
        start = time.perf_counter()
        l = train_step(a, model, run, opt, x, y).item()
        ms = (time.perf_counter() - start) * 1e3
        peak = ", peak allocated %.1f MiB, reserved %.1f MiB" % (torch.cuda.max_memory_allocated() / 1048576, torch.cuda.max_memory_reserved() / 1048576) if a.device == "cuda" else ""
        print("step %4d  loss %.6f  %.2f ms  %.0f tokens/s%s" % (step, l, ms, a.batch * a.seq / (ms / 1e3), peak))
    if a.profile > 0:
        profile_steps(a, text, model, run, opt)


def lr_factor(step, warmup, total, min_factor=0.1):
    """genesis_nn's CosineWithWarmup: a linear warm-up over `warmup` steps, then a cosine from 1
    down to `min_factor` at step `total`."""
    if step < warmup:
        return (step + 1) / warmup
    if step >= total:
        return min_factor
    t = (step - warmup) / max(total - warmup, 1)
    return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * t))


def train_step(a, model, run, opt, x, y):
    """One step: gradients zeroed, forward (under autocast with --bf16), backward, clipping at
    1, AdamW; returns the loss."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16):
        loss = run(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def kernel_family(name):
    n = name.lower()
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas")):
        return "products"
    if any(k in n for k in ("flash", "fmha", "cudnn", "attn", "attention")):
        return "attention"
    if "triton" in n:
        return "triton (fused)"
    return "other"


def profile_steps(a, text, model, run, opt):
    """Device time of each kernel over a.profile steps (after the timed ones), a step's share:
    the totals by family, then the kernels that took the most."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(a.profile):
            x, y = window_batch(text, a.steps + i, a.batch, a.seq, 7919, a.device)
            train_step(a, model, run, opt, x, y)
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t, c = kernels.get(e.name, (0.0, 0))
            kernels[e.name] = (t + e.device_time / 1e3, c + 1)
    families = {}
    for name, (t, c) in kernels.items():
        f = kernel_family(name)
        ft, fc = families.get(f, (0.0, 0))
        families[f] = (ft + t, fc + c)
    total = sum(t for t, _ in kernels.values()) / a.profile
    print("profile: %.2f ms of kernels a step, %d kernels" % (total, sum(c for _, c in kernels.values()) // a.profile))
    for f, (t, c) in sorted(families.items(), key=lambda kv: -kv[1][0]):
        print("  %-16s %8.2f ms  %5d kernels" % (f, t / a.profile, c // a.profile))
    for name, (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:30]:
        print("  %8.3f ms %4d  %s" % (t / a.profile, c // a.profile, name[:150]))


main()
