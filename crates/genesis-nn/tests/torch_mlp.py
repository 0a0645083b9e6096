"""PyTorch's side of the MLP comparison (genesis_nn::train::comparison_losses).

Loads the initial parameters that `cargo run -p genesis-nn --example mlp_init` wrote, trains
the same 64-128-10 GELU perceptron with Adam (lr 1e-3) on the same batches of the digits
(64 consecutive rows of data/digits.csv.gz from 64 * step mod 1728, pixels / 16) and prints the
losses as JSON:

    python3 torch_mlp.py INIT.safetensors [cpu|cuda] [STEPS] > losses.json

The CPU output is committed as tests/data/torch_mlp_losses.json (the `nn` test compares).
"""
import gzip
import json
import os
import sys

import torch

from twins import load_safetensors


def main():
    init = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    torch.manual_seed(0)
    here = os.path.dirname(os.path.abspath(__file__))
    rows = [
        [float(v) for v in line.split(",")]
        for line in gzip.open(os.path.join(here, "..", "data", "digits.csv.gz"), "rt")
        if line.strip()
    ]
    data = torch.tensor(rows, dtype=torch.float32)
    images, labels = data[:, :64].to(device), data[:, 64].long().to(device)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    ).to(device)
    model.load_state_dict({k: v.to(device) for k, v in load_safetensors(init).items()})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        start = (64 * step) % 1728
        xb = images[start:start + 64] / 16.0
        yb = labels[start:start + 64]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"torch": torch.__version__, "device": device, "losses": losses}))


main()
