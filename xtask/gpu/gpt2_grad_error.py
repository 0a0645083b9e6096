"""The rounding error of GPT-2's gradients, ours beside PyTorch's, against float64.

    python3 gpt2_grad_error.py INIT.safetensors DUMP_DIR --batch B --step S --text DIR \
        [--config 124m] [--seq 1024] [--device cuda]

DUMP_DIR holds what `examples/gpt2_ddp.rs --dump-grads DUMP_DIR --dump-step S` (f32, one GPU
or `--ddp`) wrote: each parameter (`NAME.param`) and its gradient (`NAME.grad`) at step S,
before that step's optimiser step. From those parameters and step S's batch (the same byte
windows), PyTorch's twin computes the gradients in float64 (written-out attention) and in
float32 (SDPA, as `torch_gpt2_ddp.py`); for each parameter it prints the relative L2 error of
ours and of PyTorch's float32 gradient against the float64 one, and their ratio, largest first.
INIT supplies the parameter names and shapes (`gpt2_ddp --init`).
"""
import argparse
import glob
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("GENESIS_TWINS", os.path.join(HERE, "..", "..", "crates", "genesis-nn", "tests")))
import twins  # noqa: E402
from twins import CONFIGS, GPT, load_safetensors, window_batch  # noqa: E402


def raw(path, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("init")
    p.add_argument("dump")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--config", default="124m", choices=sorted(CONFIGS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--text", required=True)
    p.add_argument("--rows", type=int, default=20)
    a = p.parse_args()
    text = b"".join(open(f, "rb").read() for f in sorted(glob.glob(os.path.join(a.text, "*.py"))) if os.path.isfile(f))
    x, y = window_batch(text, a.step, a.batch, a.seq, 7919, a.device)
    shapes = {k: v.shape for k, v in load_safetensors(a.init).items()}
    tied = os.path.join(a.dump, "transformer.wte.weight.param")
    params = {k: raw(os.path.join(a.dump, k + ".param") if os.path.exists(os.path.join(a.dump, k + ".param")) else tied, s)
              for k, s in shapes.items()}
    grads = {}
    for dtype, sdpa in [(torch.float64, False), (torch.float32, True)]:
        twins.SDPA = sdpa
        model = GPT(CONFIGS[a.config]).to(a.device)
        model.load_state_dict({k: v.to(a.device) for k, v in params.items()})
        model = model.to(dtype)
        loss = model(x, y)
        loss.backward()
        grads[dtype] = {n: q.grad.detach().double().cpu() for n, q in model.named_parameters()}
        print("PyTorch %s loss %.9f" % (str(dtype).split(".")[-1], loss.item()))
        del model
    rows = []
    for n, ref in grads[torch.float64].items():
        ours = raw(os.path.join(a.dump, n + ".grad"), ref.shape).double()
        norm = ref.norm().item()
        rows.append(((ours - ref).norm().item() / norm, (grads[torch.float32][n] - ref).norm().item() / norm, n))
    rows.sort(reverse=True)
    print("relative L2 error against float64: ours, PyTorch float32, ratio, parameter")
    for e, t, n in rows[:a.rows]:
        print("%.3e %.3e %6.2f %s" % (e, t, e / max(t, 1e-300), n))
    ratios = sorted(e / max(t, 1e-300) for e, t, _ in rows)
    print("median ratio %.2f over %d parameters" % (ratios[len(ratios) // 2], len(rows)))


if __name__ == "__main__":
    main()
