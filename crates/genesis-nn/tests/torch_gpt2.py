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

from twins import GPT, load_safetensors, window_batch

TINY = dict(block=32, vocab=256, layers=2, heads=2, width=32)


def main():
    init = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    amp = len(sys.argv) > 4 and sys.argv[4] == "bf16"
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "data", "corpus.txt"), "rb").read()
    model = GPT(TINY).to(device)
    model.load_state_dict({k: v.to(device) for k, v in load_safetensors(init).items()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, y = window_batch(text, step, 4, 32, 37, device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"torch": torch.__version__, "device": device, "bf16": amp, "losses": losses}))


main()
