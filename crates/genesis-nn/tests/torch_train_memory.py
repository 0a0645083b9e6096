"""PyTorch eager's side of examples/train_memory.rs: the same transformer block and MLP, f32,
loss mean(out^2), forward + backward; peak memory (torch.cuda.max_memory_allocated) over one
step after a warm-up step, step time the median of 5 synchronised steps.

    python3 torch_train_memory.py [cuda|cpu] [small]
"""
import sys
import time

import torch

from twins import FlatBlock

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
small = "small" in sys.argv
B, T, C, H = (2, 16, 64, 4) if small else (32, 512, 768, 12)
N, I, HID = (64, 64, 256) if small else (8192, 1024, 4096)


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def measure(name, model, x):
    def step():
        (model(x) ** 2).mean().backward()
        model.zero_grad(set_to_none=True)

    step()
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for k in range(5):
        t = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
        if k == 0 and device == "cuda":
            print("%s: peak allocated %.1f MiB (held before the step %.1f MiB)"
                  % (name, torch.cuda.max_memory_allocated() / 1048576, base / 1048576))
    times.sort()
    print("%s: step %.3f ms (median of 5)" % (name, times[2]))


torch.manual_seed(0)
measure("block", FlatBlock(C, H).to(device), torch.randn(B, T, C, device=device))
mlp = torch.nn.Sequential(torch.nn.Linear(I, HID), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(HID, I)).to(device)
measure("mlp", mlp, torch.randn(N, I, device=device))
