"""Random cases of genesis-nn's layers with PyTorch as the oracle, for `tests/module_cases.rs`:
`python3 gen_module_cases.py --seed S --count N --out FILE` (needs torch; only to regenerate).

    python3 gen_module_cases.py --seed 21 --count 600 --out data/module-cases.json.gz
    python3 gen_module_cases.py --seed 1021 --count 200 --out data/module-heldout.json.gz

The second set is held out (another seed), not looked at while fixing failures of the first.

A case is one layer (`nn.Linear`, `nn.Embedding`, `nn.LayerNorm`, `nn.RMSNorm`, `nn.GELU` exact
and tanh, `nn.ReLU`, `nn.SiLU`, `nn.Tanh`) in float64 with random parameters, applied to a
random input of a random shape (empty batches, 1-D and 0-d inputs where the layer takes them),
and the gradients of the input and of every parameter for a random upstream gradient:

    {"id": "linear/4", "layer": "linear", "cfg": {...}, "params": {"weight": T, ...},
     "input": T, "out": T, "gout": T, "grads": {"input": T, "weight": T, ...}}
    or {..., "err": "PyTorch's message"} for an input PyTorch refuses (an id out of range).

`cfg`: `in`, `out`, `bias` (linear); `num`, `dim` (embedding: the input holds int64 ids);
`shape`, `eps`, `affine` (layer_norm); `shape`, `eps` (rms_norm); `tanh` (gelu). A tensor
`T` is `{"dt": "f64" | "i64", "sh": shape, "d": data}`.
"""
import math

import torch

from gen_cases import GEN, enc, main, rand


def lead(rng):
    """Leading dimensions of an input: none, or one to two (some 0)."""
    k = rng.choice([0, 1, 1, 2])
    return [rng.choice([0, 1, 2, 3, 4]) if rng.random() < 0.1 else rng.randint(1, 4) for _ in range(k)]


def make(rng, layer, i):
    case = {"id": "%s/%d" % (layer, i), "layer": layer}
    if layer == "linear":
        fin, fout, bias = rng.randint(1, 6), rng.randint(1, 6), rng.random() < 0.7
        m = torch.nn.Linear(fin, fout, bias=bias, dtype=torch.float64)
        case["cfg"] = {"in": fin, "out": fout, "bias": bias}
        x = rand(rng, lead(rng) + [fin])
    elif layer == "embedding":
        num, dim = rng.randint(1, 8), rng.randint(1, 5)
        m = torch.nn.Embedding(num, dim, dtype=torch.float64)
        case["cfg"] = {"num": num, "dim": dim}
        sh = lead(rng) if rng.random() < 0.9 else []
        ids = [rng.randrange(num) for _ in range(math.prod(sh))]
        if ids and rng.random() < 0.05:
            ids[0] = rng.choice([num, num + 2, -1])
        x = torch.tensor(ids, dtype=torch.int64).reshape(sh)
    elif layer in ("layer_norm", "rms_norm"):
        norm = [rng.randint(1, 5) for _ in range(rng.choice([1, 1, 2]))]
        eps = rng.choice([1e-5, 1e-6, 0.1])
        if layer == "layer_norm":
            affine = rng.random() < 0.8
            m = torch.nn.LayerNorm(norm, eps=eps, elementwise_affine=affine, dtype=torch.float64)
            case["cfg"] = {"shape": norm, "eps": eps, "affine": affine}
        else:
            m = torch.nn.RMSNorm(norm, eps=eps, dtype=torch.float64)
            case["cfg"] = {"shape": norm, "eps": eps}
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(rand(rng, list(p.shape), 0.5) + 1.0)
        x = rand(rng, lead(rng) + norm, rng.choice([1.0, 1.0, 100.0])) + rng.choice([0.0, 0.0, 5.0])
    else:
        tanh = layer == "gelu" and rng.random() < 0.5
        m = {"gelu": torch.nn.GELU(approximate="tanh" if tanh else "none"), "relu": torch.nn.ReLU(),
             "silu": torch.nn.SiLU(), "tanh": torch.nn.Tanh()}[layer]
        case["cfg"] = {"tanh": tanh} if layer == "gelu" else {}
        x = rand(rng, lead(rng), rng.choice([1.0, 4.0, 30.0]))
    case["params"] = {n: enc(p) for n, p in m.named_parameters()}
    floating = x.dtype == torch.float64
    if floating:
        x = x.clone().requires_grad_(True)
    try:
        out = m(x)
    except (IndexError, RuntimeError) as e:
        case["input"] = enc(x)
        case["err"] = str(e).splitlines()[0][:200]
        return case
    gout = torch.randn(out.shape, dtype=torch.float64, generator=GEN)
    names = [n for n, _ in m.named_parameters()]
    wrt = ([x] if floating else []) + [p for _, p in m.named_parameters()]
    grads = torch.autograd.grad(out, wrt, gout, allow_unused=True) if wrt else []
    keys = (["input"] if floating else []) + names
    case.update(input=enc(x), out=enc(out), gout=enc(gout),
                grads={k: enc(g if g is not None else torch.zeros_like(w)) for k, g, w in zip(keys, grads, wrt)})
    return case


LAYERS = ["linear", "linear", "embedding", "layer_norm", "layer_norm", "rms_norm", "gelu", "gelu",
          "relu", "silu", "tanh"]


if __name__ == "__main__":
    main("genesis-module-cases v1", lambda rng, i: make(rng, rng.choice(LAYERS), i))
