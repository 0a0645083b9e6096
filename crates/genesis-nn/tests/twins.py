"""What the PyTorch twin scripts share: a safetensors reader (no extra package), the causal
self-attention of GPT-2 and a transformer block with flat parameter names (`ln_1`, `c_attn`,
`c_proj`, `ln_2`, `c_fc`, `mlp_proj`)."""
import json
import math
import struct

import torch


def load_safetensors(path):
    """The float32 tensors of a safetensors file, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        a, b = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(meta["shape"]).clone()
    return out


def causal_attention(qkv, heads):
    """softmax(q kᵀ / √d + causal mask) v over `heads` heads of `qkv` ([B, T, 3C])."""
    b, t, c3 = qkv.shape
    c = c3 // 3
    d = c // heads
    q, k, v = qkv.split(c, dim=2)
    q, k, v = (z.view(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=qkv.device), diagonal=1)
    att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(b, t, c)


class FlatBlock(torch.nn.Module):
    """Pre-LayerNorm causal self-attention and a GELU (tanh) MLP, each with a residual."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(width)
        self.c_attn = torch.nn.Linear(width, 3 * width)
        self.c_proj = torch.nn.Linear(width, width)
        self.ln_2 = torch.nn.LayerNorm(width)
        self.c_fc = torch.nn.Linear(width, 4 * width)
        self.mlp_proj = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.c_proj(causal_attention(self.c_attn(self.ln_1(x)), self.heads))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
