"""Writes tests/data/torch_state_dict.safetensors: the state_dict of a small PyTorch model
(Linear(4, 3) -> GELU -> LayerNorm(3) -> Linear(3, 2, bias=False)) saved by
`safetensors.torch.save_file`, with a fixed input and PyTorch's output for it, so that the `nn`
test loads a PyTorch state_dict into the same Genesis model and compares.

    python3 torch_state_dict.py
"""
import os

import torch
from safetensors.torch import save_file

torch.manual_seed(3)
model = torch.nn.Sequential(
    torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2, bias=False)
)
with torch.no_grad():
    model[2].weight.uniform_(0.5, 1.5)
    model[2].bias.uniform_(-0.5, 0.5)
x = torch.randn(5, 4)
state = {k: v.contiguous() for k, v in model.state_dict().items()}
here = os.path.dirname(os.path.abspath(__file__))
save_file(state, os.path.join(here, "data", "torch_state_dict.safetensors"))
save_file({"input": x, "output": model(x).detach()},
          os.path.join(here, "data", "torch_state_dict_io.safetensors"),
          metadata={"torch": torch.__version__})
print(sorted(state))
