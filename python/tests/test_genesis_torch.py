#!/usr/bin/env python3
"""Genesis as PyTorch's CUDA allocator, live on a GPU (meant for the GPU machine).

    GENESIS_TORCH_LIB=/path/to/libgenesis_mem_capi.so PYTHONPATH=python \
        python3 python/tests/test_genesis_torch.py [--json OUT.json]

What it checks, in one process that installs Genesis before touching CUDA:

1. training: a small MLP trained with deterministic algorithms gives, step for step, the same
   losses (bit for bit) as the same script with PyTorch's native allocator in a subprocess;
   half-way through, the device is exhausted: ``torch.OutOfMemoryError`` is raised, memory is
   freed and training goes on, still matching;
2. streams: tensors allocated on two streams; a tensor used on a side stream and freed on its
   own stream is not reused while the side stream's work is pending when it was recorded
   (``genesis_torch.record_stream``) or under the all-streams guard; results are correct;
3. statistics: ``memory_stats()`` has PyTorch's keys (compared with the native run's) and
   consistent figures; ``memory_snapshot()``; ``empty_cache()``; the memory fraction.

Exit status 0 when every check passed; the last lines are a summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback

# Deterministic cuBLAS, before anything initialises it (here and in the native subprocess).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/ holds genesis_torch

import torch  # noqa: E402

STEPS = 30
OOM_AT = 12


def train(steps: int, hook_at: int | None = None, hook=None) -> list[str]:
    """Trains a small MLP with fixed seeds; returns each step's loss as float.hex()."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    g = torch.Generator().manual_seed(1234)
    xs = torch.randn(steps, 256, 512, generator=g)
    ys = torch.randint(0, 16, (steps, 256), generator=g)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 1024), torch.nn.GELU(),
        torch.nn.LayerNorm(1024),
        torch.nn.Linear(1024, 16),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        if hook is not None and step == hook_at:
            hook()
        x = xs[step].cuda(non_blocking=False)
        y = ys[step].cuda()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
    torch.cuda.synchronize()
    return losses


def native_main() -> None:
    """The reference run with PyTorch's own allocator (a subprocess)."""
    losses = train(STEPS)
    keys = sorted(torch.cuda.memory_stats().keys())
    print(json.dumps({"losses": losses, "keys": keys}))


# ---------------------------------------------------------------------------------------------


class Checks:
    def __init__(self):
        self.results = []

    def run(self, name, fn):
        t0 = time.time()
        try:
            detail = fn()
            self.results.append((name, "ok", detail or ""))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            self.results.append((name, "FAILED", f"{type(e).__name__}: {e}"))
        print(f"== {name}: {self.results[-1][1]} ({time.time() - t0:.1f} s) {self.results[-1][2]}",
              flush=True)

    @property
    def ok(self):
        return all(r[1] == "ok" for r in self.results)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def exhaust_and_recover(gt, log: dict) -> None:
    """Fills the device until torch.OutOfMemoryError, frees everything, and checks the
    allocator works again."""
    free, total = torch.cuda.mem_get_info()
    log["device_free_before"] = free
    # One request larger than the device: refused at once.
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        raise AssertionError("a request of twice the device succeeded")
    except torch.OutOfMemoryError as e:
        log["oom_single"] = str(e).splitlines()[0][:200]
    chunks = []
    chunk = 1 << 30
    t0 = time.time()
    try:
        while True:
            chunks.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            if len(chunks) > 4 * total // chunk:
                raise AssertionError("never ran out of memory")
    except torch.OutOfMemoryError as e:
        log["oom_fill"] = str(e).splitlines()[0][:200]
    # Smaller pieces to the very end, so that the device is truly full.
    try:
        while True:
            chunks.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    log["filled_bytes"] = sum(c.numel() for c in chunks)
    log["fill_seconds"] = round(time.time() - t0, 2)
    stats = gt.memory_stats()
    log["num_ooms"] = stats["num_ooms"]
    check(stats["num_ooms"] >= 2, f"num_ooms {stats['num_ooms']}")
    check(log["filled_bytes"] > 0.8 * free, f"filled {log['filled_bytes']} of {free} free bytes")
    del chunks
    gt.empty_cache()
    after = torch.cuda.mem_get_info()[0]
    log["device_free_after_empty_cache"] = after
    check(after > 0.8 * free, f"after empty_cache {after} free, before {free}")
    # Usable again.
    x = torch.ones(1 << 20, device="cuda")
    check(float(x.sum()) == float(1 << 20), "sum after recovery")


def main() -> int:
    import genesis_torch as gt

    out_json = None
    if "--json" in sys.argv:
        out_json = sys.argv[sys.argv.index("--json") + 1]
    report: dict = {}
    checks = Checks()

    so = gt.install()
    report["installed"] = so
    report["oom_mode"] = gt.oom_mode()
    report["library"] = gt.library_path()
    print(f"genesis_torch installed: {so} (oom: {gt.oom_mode()})", flush=True)

    # The native reference, in its own process.
    native = {}

    def run_native():
        env = dict(os.environ)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--native"],
                           capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"native run failed:\n{r.stderr[-3000:]}")
        native.update(json.loads(r.stdout.strip().splitlines()[-1]))
        return f"{len(native['losses'])} losses"

    checks.run("native reference run", run_native)

    def oom_installed():
        check(gt.oom_mode() == "raise", f"oom mode {gt.oom_mode()}: the wrapper was not built")

    checks.run("out-of-memory wrapper built", oom_installed)

    oom_log: dict = {}

    def run_training():
        hook = (lambda: exhaust_and_recover(gt, oom_log)) if gt.oom_mode() == "raise" else None
        losses = train(STEPS, OOM_AT, hook)
        report["losses_genesis"] = losses
        report["losses_native"] = native.get("losses")
        report["oom"] = oom_log
        check(native.get("losses"), "no native losses to compare with")
        diff = [i for i, (a, b) in enumerate(zip(losses, native["losses"])) if a != b]
        check(not diff, f"losses differ at steps {diff[:10]}: "
              f"{[(losses[i], native['losses'][i]) for i in diff[:3]]}")
        check(hook is None or "oom_fill" in oom_log, "the device was not exhausted")
        return (f"{len(losses)} losses equal bit for bit; "
                f"OOM at step {OOM_AT}: {oom_log.get('oom_fill', 'skipped')[:80]}")

    checks.run("training equals native, through an OOM", run_training)

    def two_streams():
        side = torch.cuda.Stream()
        main_s = torch.cuda.current_stream()
        a = torch.randn(2048, 2048, device="cuda")
        side.wait_stream(main_s)
        with torch.cuda.stream(side):
            b = a @ a  # allocated on the side stream
            c = b + 1
        main_s.wait_stream(side)
        ref = (a.cpu().double() @ a.cpu().double() + 1)
        err = (c.cpu().double() - ref).abs().max().item()
        check(err < 1e-2 * ref.abs().max().item(), f"side-stream result off by {err}")
        snap = gt.memory_snapshot()
        streams = {s["stream"] for s in snap["segments"]}
        check(len(streams) >= 2, f"segments on streams {streams}")
        check(side.cuda_stream in streams, "no segment on the side stream")
        del b, c
        return f"segments on {len(streams)} streams"

    checks.run("allocations on two streams", two_streams)

    def cross_stream(mode):
        def body():
            side = torch.cuda.Stream()
            # The sleep kernel's first launch loads it; a warm-up keeps that out of the timing.
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            n = 64 << 20  # 256 MiB of f32
            x = torch.ones(n, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                # y is allocated before the sleep: an allocation that grows the pool may
                # synchronise its stream (moving memory), which would end the sleep early.
                y = torch.empty_like(x)
                # The first launch of a kernel may load its module, which waits for the device:
                # the product runs once before the sleep too.
                torch.mul(x, 2, out=y)
                side.synchronize()
                torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
                torch.mul(x, 2, out=y)
            addr = x.untyped_storage().data_ptr()
            if mode == "record_stream":
                gt.record_stream(x, side)
            else:
                gt.guard_streams(True)
            check(not side.query(), "the side stream finished before the free: nothing to test")
            del x  # freed on the default stream while the side stream still reads it
            z = torch.empty(n, device="cuda")
            reused = z.untyped_storage().data_ptr() == addr
            z.fill_(5.0)
            side.synchronize()
            good = bool((y == 2).all())
            if mode == "guard":
                gt.guard_streams(False)
            check(not reused, "the block was reused while the side stream still used it")
            check(good, "the side stream read overwritten memory")
            del y, z
            return "not reused while pending; side-stream result intact"
        return body

    checks.run("cross-stream free with record_stream", cross_stream("record_stream"))
    checks.run("cross-stream free with the all-streams guard", cross_stream("guard"))

    def stats():
        s = gt.memory_stats()
        keys = set(s)
        native_keys = set(native.get("keys", []))
        families = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                    "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
        core = {k for k in native_keys if k.split(".")[0] in families} | {
            k for k in native_keys if k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                            "num_device_free")}
        missing = sorted(core - keys)
        check(not missing, f"PyTorch keys missing: {missing}")
        report["keys_only_in_pytorch"] = sorted(native_keys - keys)
        x = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
        s1 = gt.memory_stats()
        check(s1["allocated_bytes.all.current"] >= 100 << 20, "allocated bytes")
        check(s1["reserved_bytes.all.current"] >= s1["allocated_bytes.all.current"], "reserved")
        check(gt.memory_allocated() == s1["allocated_bytes.all.current"], "memory_allocated")
        check(gt.max_memory_reserved() >= gt.memory_reserved(), "peaks")
        del x
        gt.empty_cache()
        s2 = gt.memory_stats()
        check(s2["reserved_bytes.all.current"] < s1["reserved_bytes.all.current"], "empty_cache")
        gt.reset_peak_memory_stats()
        check(gt.max_memory_allocated() == gt.memory_allocated(), "reset_peak_memory_stats")
        total = torch.cuda.mem_get_info()[1]
        gt.set_per_process_memory_fraction(0.25)
        try:
            if gt.oom_mode() == "raise":
                try:
                    torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
                    raise AssertionError("allocated past the memory fraction")
                except torch.OutOfMemoryError:
                    pass
            y = torch.empty(int(0.1 * total), dtype=torch.uint8, device="cuda")
            del y
        finally:
            gt.set_per_process_memory_fraction(1.0)
        snap = gt.memory_snapshot()
        check("segments" in snap and "device_traces" in snap, "snapshot layout")
        report["stats"] = {k: v for k, v in gt.memory_stats().items() if ".all." in k or "." not in k
                           or k.startswith("genesis.")}
        return (f"{len(core)} PyTorch keys present; PyTorch-only keys: "
                f"{len(report['keys_only_in_pytorch'])}")

    checks.run("statistics, snapshot, empty_cache, fraction", stats)

    def pytorch_own_api():
        # PyTorch's own statistics do not work with a pluggable allocator: say so, do not fail.
        try:
            torch.cuda.memory_stats()
            return "torch.cuda.memory_stats() works"
        except RuntimeError as e:
            return f"torch.cuda.memory_stats() raises as expected ({str(e)[:60]}...)"

    checks.run("PyTorch's own memory_stats", pytorch_own_api)

    report["checks"] = [{"name": n, "result": r, "detail": d} for n, r, d in checks.results]
    if out_json:
        with open(out_json, "w") as f:
            json.dump(report, f, indent=1)
    print("\n== summary")
    for n, r, d in checks.results:
        print(f"{r:6} {n}: {d}")
    return 0 if checks.ok else 1


if __name__ == "__main__":
    if "--native" in sys.argv:
        native_main()
    else:
        sys.exit(main())
