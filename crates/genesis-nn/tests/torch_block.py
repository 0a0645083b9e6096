"""Writes tests/data/torch_block.safetensors: a GPT-2-style transformer block (pre-LayerNorm
causal self-attention and a GELU-tanh MLP, each with a residual) in float32, its parameters
(PyTorch's names), an input `x`, weights `w` of the loss `sum(block(x) * w)`, the loss, and
PyTorch's gradients of the loss with respect to `x` (`grad.x`) and every parameter
(`grad.<name>`). The `nn` test builds the same block from Genesis ops and compares.

    python3 torch_block.py
"""
import os

import torch
from safetensors.torch import save_file

from twins import FlatBlock

torch.manual_seed(5)
B, T, C, H = 2, 5, 8, 2

block = FlatBlock(C, H)
with torch.no_grad():
    for ln in (block.ln_1, block.ln_2):
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
x = torch.randn(B, T, C, requires_grad=True)
w = torch.randn(B, T, C)
loss = (block(x) * w).sum()
loss.backward()
out = {k: v.detach().contiguous() for k, v in block.state_dict().items()}
out["x"] = x.detach()
out["w"] = w
out["loss"] = loss.detach().reshape(1)
out["grad.x"] = x.grad
for name, p in block.named_parameters():
    out["grad." + name] = p.grad
here = os.path.dirname(os.path.abspath(__file__))
save_file(out, os.path.join(here, "data", "torch_block.safetensors"), metadata={"torch": torch.__version__})
print(sorted(out))
