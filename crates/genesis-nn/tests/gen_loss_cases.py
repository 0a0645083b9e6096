"""Random cases of genesis-nn's losses with PyTorch as the oracle, for `tests/loss_cases.rs`:
`python3 gen_loss_cases.py --seed S --count N --out FILE` (needs torch; only to regenerate).

The outputs are committed and run by `cargo test -p genesis-nn --test loss_cases` on the CPU
(and on CUDA with the `cuda` feature where a GPU is present); no Python is needed to run them:

    python3 gen_loss_cases.py --seed 7 --count 1500 --out data/loss-cases.json.gz
    python3 gen_loss_cases.py --seed 1007 --count 500 --out data/loss-heldout.json.gz

The second set is held out: generated independently (another seed), not looked at while fixing
failures of the first.

Each case is one call of `F.cross_entropy`, `F.nll_loss`, `F.mse_loss` or
`F.binary_cross_entropy_with_logits` in float64, with random shapes (empty batches, 1-D
inputs, extra dimensions after the classes), options (`ignore_index`, `label_smoothing`, class
probabilities, the three reductions) and values (large and extreme logits), and the gradient
of the output against the input for a random upstream gradient:

    {"id": "cross_entropy/17", "op": "cross_entropy", "args": {...},
     "input": T, "target": T, "out": T, "grad": T}   or   {..., "err": "PyTorch's message"}

A tensor `T` is `{"dt": "f64" | "i64", "sh": shape, "d": data}` (row-major; floats as JSON
numbers, or the strings "nan", "inf", "-inf"). `args`: `reduction` ("none", "mean", "sum"),
`ignore_index` (an integer or absent), `label_smoothing` (a float, cross entropy only),
`probs` (true: the target holds class probabilities), `default_ignore` (true: called with
PyTorch's default `ignore_index`, -100, and some targets are -100; absent with no
`ignore_index`: no target is out of range unless the case expects an error). `gout` is the upstream gradient (the
output's shape). `err` marks a call PyTorch refuses (a class index out of range, a smoothing
above 1; and a negative smoothing, which PyTorch accepts although its message asks for 0 to
1): Genesis must return an error there.
"""
import math

import torch
import torch.nn.functional as F

from gen_cases import GEN, enc, main, rand


def class_shape(rng):
    """The input's shape: [C], [N, C] or [N, C, d...] (N may be 0)."""
    c = rng.randint(1, 7)
    kind = rng.random()
    if kind < 0.15:
        return [c]
    n = rng.choice([0, 1, 2, 3, 5]) if rng.random() < 0.9 else 0
    if kind < 0.7:
        return [n, c]
    return [n, c] + [rng.randint(1, 3) for _ in range(rng.randint(1, 2))]


def indices(rng, shape, c, ignore):
    """Class indices of `shape` in [0, c), some set to `ignore` when given."""
    d = [rng.randrange(c) for _ in range(math.prod(shape))]
    if ignore is not None:
        d = [ignore if rng.random() < 0.3 else v for v in d]
    return torch.tensor(d, dtype=torch.int64).reshape(shape)


def finish(case, fn, x, t):
    """Runs `fn(x)`, records its output and the gradient for a random upstream gradient."""
    x = x.clone().requires_grad_(True)
    try:
        out = fn(x)
    except (RuntimeError, IndexError, ValueError) as e:
        case["input"], case["target"] = enc(x), enc(t)
        case["err"] = str(e).splitlines()[0][:200]
        return case
    gout = torch.randn(out.shape, dtype=torch.float64, generator=GEN)
    (g,) = torch.autograd.grad(out, x, gout, allow_unused=True)
    if g is None:
        g = torch.zeros_like(x)
    case.update(input=enc(x), target=enc(t), out=enc(out), gout=enc(gout), grad=enc(g))
    return case


def cross_entropy(rng, i):
    shape = class_shape(rng)
    c = shape[0] if len(shape) == 1 else shape[1]
    scale = rng.choice([1.0, 1.0, 4.0, 30.0, 1000.0])
    x = rand(rng, shape, scale)
    red = rng.choice(["none", "mean", "sum"])
    eps = rng.choice([0.0, 0.0, 0.1, 0.5, 1.0] + ([1.5, -0.1] if rng.random() < 0.03 else []))
    args = {"reduction": red, "label_smoothing": eps}
    tshape = [] if len(shape) == 1 else [shape[0]] + shape[2:]
    ignore = None
    if rng.random() < 0.3:
        p = rand(rng, shape, 1.0).abs()
        if rng.random() < 0.7:
            s = p.sum(dim=0 if len(shape) == 1 else 1, keepdim=True)
            p = p / s.clamp_min(1e-12)
        args["probs"] = True
        t = p
    else:
        ignore = rng.choice([None, None, -100, 0, c - 1, "default"])
        # "default": PyTorch's default ignore_index (-100), targets of -100 among the others.
        t = indices(rng, tshape, c, -100 if ignore == "default" else ignore)
        if rng.random() < 0.04 and t.numel() > 0:
            t.view(-1)[0] = rng.choice([c, c + 3, -1 if ignore != -1 else -2])
        if ignore is not None and ignore != "default":
            args["ignore_index"] = ignore
    kw = dict(reduction=red, label_smoothing=eps)
    if ignore == "default":
        args["default_ignore"] = True
    elif "ignore_index" in args:
        kw["ignore_index"] = args["ignore_index"]
    case = {"id": "cross_entropy/%d" % i, "op": "cross_entropy", "args": args}
    if eps < 0:
        # PyTorch checks only the upper bound (its message says "between 0.0 and 1.0");
        # Genesis refuses a negative smoothing too.
        case.update(input=enc(x), target=enc(t), err="a negative label_smoothing")
        return case
    return finish(case, lambda x: F.cross_entropy(x, t, **kw), x, t)


def nll_loss(rng, i):
    shape = class_shape(rng)
    c = shape[0] if len(shape) == 1 else shape[1]
    if len(shape) > 2:
        shape = shape[:2]
    x = F.log_softmax(rand(rng, shape, rng.choice([1.0, 5.0])), dim=0 if len(shape) == 1 else 1)
    red = rng.choice(["none", "mean", "sum"])
    ignore = rng.choice([None, None, -100, 0])
    tshape = [] if len(shape) == 1 else [shape[0]]
    t = indices(rng, tshape, c, ignore)
    args = {"reduction": red}
    kw = dict(reduction=red)
    if ignore is not None:
        args["ignore_index"] = ignore
        kw["ignore_index"] = ignore
    case = {"id": "nll_loss/%d" % i, "op": "nll_loss", "args": args}
    return finish(case, lambda x: F.nll_loss(x, t, **kw), x, t)


def mse_loss(rng, i):
    shape = [rng.randint(0, 4) if rng.random() < 0.1 else rng.randint(1, 4) for _ in range(rng.randint(0, 3))]
    x = rand(rng, shape, rng.choice([1.0, 100.0]))
    t = rand(rng, shape, 1.0)
    red = rng.choice(["none", "mean", "sum"])
    case = {"id": "mse_loss/%d" % i, "op": "mse_loss", "args": {"reduction": red}}
    return finish(case, lambda x: F.mse_loss(x, t, reduction=red), x, t)


def bce_with_logits(rng, i):
    shape = [rng.randint(0, 3) if rng.random() < 0.1 else rng.randint(1, 4) for _ in range(rng.randint(0, 3))]
    x = rand(rng, shape, rng.choice([1.0, 10.0, 100.0, 1000.0]))
    t = torch.tensor([rng.random() if rng.random() < 0.5 else float(rng.random() < 0.5)
                      for _ in range(math.prod(shape))], dtype=torch.float64).reshape(shape)
    red = rng.choice(["none", "mean", "sum"])
    case = {"id": "bce_with_logits/%d" % i, "op": "bce_with_logits", "args": {"reduction": red}}
    return finish(case, lambda x: F.binary_cross_entropy_with_logits(x, t, reduction=red), x, t)


def make(rng, i):
    """A case of a loss drawn by weight: cross entropy most often."""
    r, acc = rng.random(), 0.0
    for maker, w in [(cross_entropy, 0.55), (nll_loss, 0.15), (mse_loss, 0.15), (bce_with_logits, 0.15)]:
        acc += w
        if r < acc:
            break
    return maker(rng, i)


if __name__ == "__main__":
    main("genesis-loss-cases v1", make)
