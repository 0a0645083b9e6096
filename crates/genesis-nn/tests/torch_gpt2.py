"""PyTorch's side of the tiny GPT-2 comparison (genesis_nn::train::gpt2_tiny_losses).

Loads the initial parameters that `cargo run -p genesis-nn --example gpt2_tiny -- 0 INIT`
wrote, trains the same model (nanoGPT's layout, GELU tanh, tied head) with AdamW (lr 1e-3,
betas 0.9/0.95, weight decay 0.1 on every parameter) and global-norm clipping at 1 on the same
byte batches of data/corpus.txt, and prints the losses as JSON:

    python3 torch_gpt2.py INIT.safetensors [cpu|cuda] [STEPS] [bf16] > losses.json

With `bf16` the forward pass and the loss run under torch.autocast(dtype=torch.bfloat16).

The CPU output is committed as tests/data/torch_gpt2_losses.json (the `nn` test compares).
"""
import json
import os
import sys

import torch

from twins import causal_attention, load_safetensors

V, BLOCK, L, H, C = 256, 32, 2, 2, 32
B, T = 4, 32


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C)
        self.attn = torch.nn.Module()
        self.attn.c_attn = torch.nn.Linear(C, 3 * C)
        self.attn.c_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp.c_proj = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn.c_proj(causal_attention(self.attn.c_attn(self.ln_1(x)), H))
        return x + self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(V, C)
        self.transformer.wpe = torch.nn.Embedding(BLOCK, C)
        self.transformer.h = torch.nn.ModuleList([Block() for _ in range(L)])
        self.transformer.ln_f = torch.nn.LayerNorm(C)
        self.lm_head = torch.nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))


def batch(text, step, device):
    span = len(text) - T - 1
    xs, ys = [], []
    for i in range(B):
        start = (37 * (4 * step + i)) % span
        xs.append(list(text[start:start + T]))
        ys.append(list(text[start + 1:start + T + 1]))
    return torch.tensor(xs, device=device), torch.tensor(ys, device=device)


def main():
    init = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    amp = len(sys.argv) > 4 and sys.argv[4] == "bf16"
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "data", "corpus.txt"), "rb").read()
    model = GPT().to(device)
    model.load_state_dict({k: v.to(device) for k, v in load_safetensors(init).items()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, y = batch(text, step, device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"torch": torch.__version__, "device": device, "bf16": amp, "losses": losses}))


main()
