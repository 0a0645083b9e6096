"""PyTorch DDP's twin of crates/genesis-dist/examples/gpt2_ddp.rs: GPT-2 in nanoGPT's layout
from the initial parameters the example wrote (--init), each rank training on its slice of
the global batch of byte windows under torch.nn.parallel.DistributedDataParallel (25 MiB
buckets; with --zero1, ZeroRedundancyOptimizer over the fused AdamW), clipping at 1; rank 0
prints the same lines (the mean of the ranks' losses, the group's tokens per second, every
rank's peak memory). The twins module comes from GENESIS_TWINS, else
crates/genesis-nn/tests beside this script's repository.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 4 torch_gpt2_ddp.py INIT.safetensors \\
        --config 124m --batch 32 --seq 1024 --steps 20 [--zero1] [--bf16] [--text DIR]
"""
import argparse
import glob
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("GENESIS_TWINS", os.path.join(HERE, "..", "..", "crates", "genesis-nn", "tests")))
import twins  # noqa: E402
from twins import CONFIGS, GPT, load_safetensors, window_batch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("init")
    p.add_argument("--config", default="tiny")
    p.add_argument("--batch", type=int, default=8, help="the global batch")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--zero1", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--text", default=None)
    p.add_argument("--bucket-mb", type=int, default=25)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dev = "cuda"
    assert a.batch % world == 0, "the global batch must be a multiple of the world size"
    b = a.batch // world
    twins.SDPA = True
    if a.text is None:
        text = open(os.path.join(HERE, "..", "..", "crates", "genesis-nn", "data", "corpus.txt"), "rb").read()
    else:
        text = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(a.text, "*.py"))) if os.path.isfile(f))
    model = GPT(CONFIGS[a.config]).to(dev)
    model.load_state_dict({k: v.to(dev) for k, v in load_safetensors(a.init).items()})
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local], bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=True)
    kw = dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    if a.zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, **kw)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), **kw)
    if rank == 0:
        print("gpt2 %s, batch %d x %d (%d ranks of %d%s), %d bytes of text%s" % (
            a.config, a.batch, a.seq, world, b, ", ZeRO-1" if a.zero1 else ", DDP", len(text), ", bf16 autocast" if a.bf16 else ""))
    times = []
    for step in range(a.steps):
        x, y = window_batch(text, step, a.batch, a.seq, 7919, dev)
        x, y = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=a.bf16):
            loss = ddp(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        l = loss.detach().float().reshape(1)
        dist.all_reduce(l, dist.ReduceOp.AVG)
        l = l.item()
        ms = (time.perf_counter() - start) * 1e3
        times.append(ms)
        if rank == 0:
            print("step %4d  loss %.6f  %.2f ms  %.0f tokens/s, peak allocated %.1f MiB, reserved %.1f MiB" % (
                step, l, ms, a.batch * a.seq / (ms / 1e3), torch.cuda.max_memory_allocated() / 1048576, torch.cuda.max_memory_reserved() / 1048576))
    tail = sorted(times[3:] if a.steps > 5 else times)
    median = tail[len(tail) // 2]
    peaks = [None] * world
    dist.all_gather_object(peaks, (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()))
    if rank == 0:
        print("median step %.2f ms, %.0f tokens/s for the group of %d" % (median, a.batch * a.seq / (median / 1e3), world))
        for r, (al, re) in enumerate(peaks):
            print("rank %d: peak allocated %.1f MiB, reserved %.1f MiB" % (r, al / 1048576, re / 1048576))
    dist.destroy_process_group()


main()
