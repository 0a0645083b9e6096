"""PyTorch eager's side of examples/train_memory.rs: the same transformer block and MLP, f32,
loss mean(out^2), forward + backward; peak memory (torch.cuda.max_memory_allocated) over one
step after a warm-up step, step time the median of 5 synchronised steps.

    python3 torch_train_memory.py [cuda|cpu] [small]
"""
import math
import sys
import time

import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
small = "small" in sys.argv
B, T, C, H = (2, 16, 64, 4) if small else (32, 512, 768, 12)
N, I, HID = (64, 64, 256) if small else (8192, 1024, 4096)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)
        self.c_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp_proj = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        d = c // H
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, H, d).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


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
measure("block", Block().to(device), torch.randn(B, T, C, device=device))
mlp = torch.nn.Sequential(torch.nn.Linear(I, HID), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(HID, I)).to(device)
measure("mlp", mlp, torch.randn(N, I, device=device))
