"""PyTorch's twin of examples/gpt2_train.rs: GPT-2 in nanoGPT's layout (GELU tanh, tied head),
loaded from the initial parameters the example wrote (--init), trained on the same windows of
byte tokens of the same *.py files with AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on
every parameter) and clipping at 1; prints the same lines.

    python3 torch_gpt2_train.py INIT.safetensors --config tiny --batch 4 --seq 64 --steps 20 \\
        [--device cuda] [--bf16] [--compile] [--text DIR]
"""
import argparse
import glob
import os
import time

import torch

from twins import causal_attention, load_safetensors

CONFIGS = {
    "tiny": dict(block=64, vocab=256, layers=2, heads=2, width=64),
    "small": dict(block=256, vocab=256, layers=4, heads=4, width=128),
    "124m": dict(block=1024, vocab=50304, layers=12, heads=12, width=768),
}


class Block(torch.nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(c)
        self.attn = torch.nn.Module()
        self.attn.c_attn = torch.nn.Linear(c, 3 * c)
        self.attn.c_proj = torch.nn.Linear(c, c)
        self.ln_2 = torch.nn.LayerNorm(c)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(c, 4 * c)
        self.mlp.c_proj = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        x = x + self.attn.c_proj(causal_attention(self.attn.c_attn(self.ln_1(x)), self.heads))
        return x + self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["width"]
        self.vocab = cfg["vocab"]
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(cfg["vocab"], c)
        self.transformer.wpe = torch.nn.Embedding(cfg["block"], c)
        self.transformer.h = torch.nn.ModuleList([Block(c, cfg["heads"]) for _ in range(cfg["layers"])])
        self.transformer.ln_f = torch.nn.LayerNorm(c)
        self.lm_head = torch.nn.Linear(c, cfg["vocab"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


def window_batch(text, step, b, t, stride, device):
    span = len(text) - t - 1
    xs, ys = [], []
    for i in range(b):
        start = (stride * (b * step + i)) % span
        xs.append(list(text[start:start + t]))
        ys.append(list(text[start + 1:start + t + 1]))
    return torch.tensor(xs, device=device), torch.tensor(ys, device=device)


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
    a = p.parse_args()
    if a.text is None:
        text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "corpus.txt"), "rb").read()
    else:
        text = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(a.text, "*.py"))) if os.path.isfile(f))
    model = GPT(CONFIGS[a.config]).to(a.device)
    model.load_state_dict({k: v.to(a.device) for k, v in load_safetensors(a.init).items()})
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    run = torch.compile(model) if a.compile else model
    print("gpt2 %s, batch %d x %d, %d bytes of text, %s%s" % (a.config, a.batch, a.seq, len(text), a.device, ", bf16 autocast" if a.bf16 else ""))
    for step in range(a.steps):
        x, y = window_batch(text, step, a.batch, a.seq, 7919, a.device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16):
            loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        l = loss.item()
        ms = (time.perf_counter() - start) * 1e3
        peak = ", peak allocated %.1f MiB" % (torch.cuda.max_memory_allocated() / 1048576) if a.device == "cuda" else ""
        print("step %4d  loss %.6f  %.2f ms  %.0f tokens/s%s" % (step, l, ms, a.batch * a.seq / (ms / 1e3), peak))


main()
