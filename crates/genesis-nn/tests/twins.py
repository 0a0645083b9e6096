"""What the PyTorch twin scripts share: a safetensors reader (no extra package), the causal
self-attention of GPT-2, a transformer block with flat parameter names (`ln_1`, `c_attn`,
`c_proj`, `ln_2`, `c_fc`, `mlp_proj`), GPT-2 in nanoGPT's layout (`GPT`, genesis_nn::gpt2's
twin) and the byte windows of genesis_nn::train::window_batch."""
import json
import math
import struct

import torch


# The GPT-2 configurations of genesis_nn::gpt2::Gpt2Config::named.
CONFIGS = {
    "tiny": dict(block=64, vocab=256, layers=2, heads=2, width=64),
    "small": dict(block=256, vocab=256, layers=4, heads=4, width=128),
    "124m": dict(block=1024, vocab=50304, layers=12, heads=12, width=768),
}


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


# Attention through F.scaled_dot_product_attention (its default backend on CUDA) instead of the written-out
# ops; the benchmark twin sets it, the CPU fixtures keep the written-out ops.
SDPA = False


def causal_attention(qkv, heads):
    """softmax(q kᵀ / √d + causal mask) v over `heads` heads of `qkv` ([B, T, 3C])."""
    b, t, c3 = qkv.shape
    c = c3 // 3
    d = c // heads
    q, k, v = qkv.split(c, dim=2)
    q, k, v = (z.view(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
    if SDPA:
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).contiguous().view(b, t, c)
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


class Block(torch.nn.Module):
    """nanoGPT's block (`attn.c_attn`, `mlp.c_fc`, ... names)."""

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
    """GPT-2 of `cfg` (block, vocab, layers, heads, width), the head tied to `wte`."""

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
