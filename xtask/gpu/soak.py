"""Sustained timing for the PyTorch side of the benches (`GENESIS_SOAK_MS`), as the Rust
benches' `timing::sustained`: the speed a training step gets once the GPU runs at its power
limit."""
import os
import time

import torch

SOAK_MS = int(os.environ.get("GENESIS_SOAK_MS", "0"))


def sustained(fn):
    """One run's time under sustained load: fn back to back for SOAK_MS of wall clock, then the
    median of 5 batches of 30 runs queued back to back, each batch's wall clock over 30."""
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < SOAK_MS:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    ms = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(30):
            fn()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t) * 1e3 / 30)
    ms.sort()
    return ms[2]
