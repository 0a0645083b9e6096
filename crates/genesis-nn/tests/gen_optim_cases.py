"""Random cases of genesis-nn's optimisers and gradient clipping with PyTorch as the oracle, for
`tests/optim_cases.rs`: `python3 gen_optim_cases.py --seed S --count N --out FILE` (needs
torch; only to regenerate).

    python3 gen_optim_cases.py --seed 11 --count 600 --out data/optim-cases.json.gz
    python3 gen_optim_cases.py --seed 1011 --count 200 --out data/optim-heldout.json.gz

The second set is held out (another seed), not looked at while fixing failures of the first.

A case is a few parameters (random shapes, some empty or 0-d), a few steps of random gradients
(a parameter may have none at a step) and one of `torch.optim.SGD` (momentum, dampening,
Nesterov, weight decay), `Adam` (betas, eps, L2 weight decay) or `AdamW` (decoupled decay), or
`torch.nn.utils.clip_grad_norm_` (applied to the step's gradients before the step), all in
float64:

    {"id": "adam/3", "opt": "sgd" | "adam" | "adamw", "hp": {...}, "clip": max_norm | null,
     "params": [T, ...], "steps": [{"grads": [T | null, ...], "after": [T, ...],
                                    "norm": float | null}, ...]}
    or {..., "err": "PyTorch's message"} when PyTorch refuses the hyper-parameters.

`hp`: `lr`, and `momentum`, `dampening`, `weight_decay`, `nesterov` (sgd) or `betas`, `eps`,
`weight_decay` (adam, adamw). `after` holds the parameters after the step; `norm` the total
gradient norm that clipping returned. A tensor `T` is `{"dt": "f64", "sh": shape, "d": data}`
(`gen_cases.enc`).
"""

import torch

from gen_cases import enc, main, rand


def shape(rng):
    r = rng.random()
    if r < 0.08:
        return []
    if r < 0.12:
        return [0]
    return [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]


def hyper(rng, opt):
    bad = rng.random() < 0.08
    if opt == "sgd":
        hp = {"lr": rng.choice([0.1, 0.01, 1.0]), "momentum": rng.choice([0.0, 0.0, 0.9, 0.5]),
              "dampening": rng.choice([0.0, 0.0, 0.1]), "weight_decay": rng.choice([0.0, 0.0, 0.01, 0.1]),
              "nesterov": rng.random() < 0.3}
        if hp["nesterov"] and not bad:
            hp["momentum"], hp["dampening"] = rng.choice([0.9, 0.5]), 0.0
        if bad:
            k = rng.choice(["lr", "momentum", "weight_decay"])
            hp[k] = -0.5
    else:
        hp = {"lr": rng.choice([1e-3, 1e-2, 0.1]), "betas": rng.choice([[0.9, 0.999], [0.9, 0.95], [0.5, 0.9], [0.0, 0.99]]),
              "eps": rng.choice([1e-8, 1e-6, 1e-3]), "weight_decay": rng.choice([0.0, 0.01, 0.1])}
        if bad:
            k = rng.choice(["lr", "eps", "beta1", "beta2", "weight_decay"])
            if k in ("beta1", "beta2"):
                hp["betas"][0 if k == "beta1" else 1] = rng.choice([1.0, -0.1, 1.5])
            else:
                hp[k] = -0.5
    return hp


def make(rng, opt_name, i):
    params = [rand(rng, shape(rng)) for _ in range(rng.randint(1, 3))]
    hp = hyper(rng, opt_name)
    clip = rng.choice([None, None, 1.0, 0.1, 100.0])
    case = {"id": "%s/%d" % (opt_name, i), "opt": opt_name, "hp": hp, "clip": clip,
            "params": [enc(p) for p in params], "steps": []}
    ps = [p.clone().requires_grad_(True) for p in params]
    try:
        if opt_name == "sgd":
            opt = torch.optim.SGD(ps, lr=hp["lr"], momentum=hp["momentum"], dampening=hp["dampening"],
                                  weight_decay=hp["weight_decay"], nesterov=hp["nesterov"], foreach=False)
        else:
            cls = torch.optim.Adam if opt_name == "adam" else torch.optim.AdamW
            opt = cls(ps, lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"],
                      weight_decay=hp["weight_decay"], foreach=False)
    except ValueError as e:
        case["err"] = str(e).splitlines()[0][:200]
        return case
    for _ in range(rng.randint(1, 4)):
        grads = []
        for p in ps:
            if rng.random() < 0.15:
                p.grad = None
                grads.append(None)
            else:
                g = rand(rng, list(p.shape), rng.choice([1.0, 1.0, 10.0, 1e-4]))
                p.grad = g.clone()
                grads.append(enc(g))
        norm = None
        if clip is not None and any(p.grad is not None for p in ps):
            norm = float(torch.nn.utils.clip_grad_norm_([p for p in ps if p.grad is not None], clip))
        opt.step()
        case["steps"].append({"grads": grads, "after": [enc(p) for p in ps], "norm": norm})
    return case


if __name__ == "__main__":
    main("genesis-optim-cases v1", lambda rng, i: make(rng, rng.choice(["sgd", "adam", "adamw"]), i))
