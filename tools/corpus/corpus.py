#!/usr/bin/env python3
"""Record the genesis-mem allocation corpus, and run corpus workloads live under four allocators.

    corpus.py record --out DIR [--jobs N] [--scale S] [--only NAME ...]
        Runs every workload of workloads.py three times, each in a fresh process: with PyTorch's
        default caching allocator while recording its memory history (the trace), with
        `expandable_segments:True` (history kept only to count maps), and with
        `backend:cudaMallocAsync` (no history: that backend records none). Writes
        DIR/NAME.trace.gz in the genesis-trace format with PyTorch's figures of the three modes
        in its header, and DIR/summary.json.

    corpus.py live --out DIR [--workloads A,B,...] [--modes default,expandable,async,genesis]
                   [--rounds N]
        Runs each workload once per allocator and round, one process at a time, with
        deterministic algorithms and the same seeds, and records each step's loss and time, the
        allocator's peak reserved bytes and the device memory in use as the driver reports it.
        Rounds interleave the allocators (order rotated each round). The first --poll-rounds
        rounds (default 1) sample device memory from a thread; step times come from the other
        rounds when there are any. The table gives the median time, each round's ratio to the
        default allocator, and the ratio of summed step times with a bootstrap interval over
        the steps. The genesis mode installs
        Genesis's allocator through `genesis_torch` (python/ in this repository;
        GENESIS_TORCH_LIB names the library). Besides the corpus workloads, `alloc_churn`
        allocates and frees tensors with no kernels: the allocator's host cost through PyTorch.
        Writes DIR/live.json and DIR/live.md.

    corpus.py pace --out DIR [--workloads A,B,...] [--modes default,genesis] [--rounds N]
                   [--cpus N]
        Step time of two allocators with the machine's drift taken out: the two processes
        start together, on the same CPUs, and run in lockstep, step i of one and then step i of
        the other (the order alternating), never at the same time (`--modes default,default`
        measures the method's own noise). By default both run on one CPU: with more, whole
        processes differ in host speed (thread placement) by more than the effect measured.
        Reports the ratio of summed step times (steps after the first two) with a bootstrap
        interval over the steps, the geometric mean of the rounds' ratios with a t-interval
        over rounds (each round a fresh pair of processes), each round's ratio and the median
        of the per-step ratios. Writes DIR/pace.json and DIR/pace.md after every round.

    corpus.py repeat --out DIR --workload NAME [--modes default,genesis] [--runs N] [--jobs J]
                     [--cpus N] [--warmup S]
        Runs one workload N times under each allocator, J processes at a time on the same CPUs,
        with deterministic algorithms and the same seeds, and compares every run's losses with
        the most common sequence: a run that differs shows nondeterminism, of the workload or
        of an allocator.
        Writes DIR/repeat.json and DIR/repeat.md.

    Every --modes entry is MODE or MODE:NAME=VALUE[:NAME=VALUE...]: the allocator and
    environment settings of its processes (`genesis:GENESIS_CAPI_MAX_HANDLE=128MiB` is
    Genesis's allocator with 128 MiB handles).

    corpus.py table DIR
        Prints the markdown table of DIR's traces (their header figures and peak live bytes),
        as in crates/genesis-mem/corpus/README.md, with each trace's half of the split.

    corpus.py worker NAME --mode MODE --json FILE [--trace FILE] [--scale S] [--deterministic]
        One run in this process (used by the two commands above; the allocator mode must be set
        in the environment before torch is imported, which the parent does).

The genesis-trace format is described in crates/genesis-mem/corpus/README.md.
"""

import argparse
import collections
import concurrent.futures
import gzip
import json
import math
import os
import random
import select
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SEED = 1234
MAX_ENTRIES = 4_000_000

_END = object()

ALLOC_CONF = {
    "default": None,
    "expandable": "expandable_segments:True",
    "async": "backend:cudaMallocAsync",
    "genesis": None,
}


# ---- one run ----------------------------------------------------------------------------------

class DevicePoller:
    """Samples device memory in use (total - free, as the driver reports it) from a thread."""

    def __init__(self, index):
        self.peak = 0
        self.stop = threading.Event()
        self.nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            self.nvml = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def used(self):
        if self.nvml is not None:
            return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
        return 0

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.used())
            time.sleep(0.001)


def worker(args):
    import torch

    from workloads import WORKLOADS

    mode = args.mode
    if mode == "genesis":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import genesis_torch

        genesis_torch.install()
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    torch.manual_seed(SEED)
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    record = args.trace is not None or mode == "expandable"
    if record:
        torch.cuda.memory._record_memory_history(context=None, max_entries=MAX_ENTRIES)
    free0, total = torch.cuda.mem_get_info(dev)
    base_used = total - free0
    poller = DevicePoller(0)
    if args.poll:
        poller.thread.start()
    if args.warmup > 0:
        # Bring the GPU to its working clocks before the first timed step: a process starts on
        # an idle device, and the ramp would otherwise fall on whichever steps come first.
        # (No random numbers: the workload's seeds stay as they are.)
        a = torch.full((1024, 1024), 0.5, device=dev)
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            for _ in range(50):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize()
        del a
    # The speed of this process's host and device before the first step, to tell drift of
    # the machine from the allocator: a fixed pure-Python loop (host) and a fixed chain of
    # 1024 x 1024 products into a preallocated output, timed by events (device), best of three
    # each.
    probe = {}
    if args.probe:
        host = []
        for _ in range(3):
            t = time.perf_counter()
            acc = 0
            for i in range(1_000_000):
                acc += i & 7
            host.append(time.perf_counter() - t)
        x = torch.full((1024, 1024), 0.5, device=dev)
        y = torch.empty_like(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu = []
        for _ in range(3):
            start.record()
            for _ in range(50):
                torch.mm(x, x, out=y)
            end.record()
            end.synchronize()
            gpu.append(start.elapsed_time(end) / 1000.0)
        del x, y
        probe = {"host_probe_seconds": min(host), "device_probe_seconds": min(gpu)}
    if mode == "genesis":
        stats, reset_peaks = genesis_torch.memory_stats, genesis_torch.reset_peak_memory_stats
    else:
        stats, reset_peaks = torch.cuda.memory_stats, torch.cuda.reset_peak_memory_stats
    if args.warmup > 0 or args.probe:
        # The peaks count from the workload's first step.
        reset_peaks()
    rng = random.Random(SEED)
    losses, times, device_allocs, driver_calls, driver_ns = [], [], [], [], []
    # In lockstep (`corpus.py pace`) the parent hands this process a token before each step
    # and takes it back after: two processes run their steps alternately, never at once.
    go = done = None
    if args.lockstep:
        rfd, wfd = (int(x) for x in args.lockstep.split(","))
        go, done = os.fdopen(rfd, "rb", buffering=0), os.fdopen(wfd, "wb", buffering=0)
        done.write(b"r")
    t0 = time.perf_counter()
    steps = iter((MICRO.get(args.name) or WORKLOADS[args.name])(dev, rng, args.scale))
    while True:
        if go is not None and go.read(1) != b"g":
            break
        last = time.perf_counter()
        loss = next(steps, _END)
        if loss is _END:
            break
        torch.cuda.synchronize()
        now = time.perf_counter()
        losses.append(loss)
        times.append(now - last)
        free, _ = torch.cuda.mem_get_info(dev)
        poller.peak = max(poller.peak, total - free)
        # Device allocations so far (cudaMalloc segments, or Genesis's cuMemCreate handles), and
        # Genesis's driver calls (creates, maps, access grants, unmaps, releases) and the time
        # spent in them.
        st = stats()
        device_allocs.append(st.get("num_device_alloc", 0))
        driver_calls.append(st.get("genesis.driver_calls"))
        driver_ns.append(st.get("genesis.driver_call_ns"))
        if done is not None:
            done.write(b"d")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    poller.stop.set()
    out = {
        "workload": args.name,
        "mode": mode,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "seconds": seconds,
        "losses": losses,
        "step_seconds": times,
        "device_allocs": device_allocs,
        "driver_calls": driver_calls,
        "driver_call_ns": driver_ns,
        "device_used_peak": poller.peak,
        "device_used_base": base_used,
        **probe,
    }
    if mode == "genesis":
        out["peak_reserved"] = genesis_torch.max_memory_reserved()
        out["peak_allocated"] = genesis_torch.memory_stats().get("allocated_bytes.all.peak")
    else:
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
        out["peak_allocated"] = torch.cuda.max_memory_allocated()
        out["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    if record:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        entries = snap["device_traces"][0] if snap["device_traces"] else []
        if len(entries) >= MAX_ENTRIES:
            raise SystemExit(f"{args.name}: history truncated at {len(entries)} entries")
        counts = collections.Counter(e["action"] for e in entries)
        out["actions"] = dict(counts)
        out["segment_allocs"] = counts.get("segment_alloc", 0)
        out["segment_frees"] = counts.get("segment_free", 0)
        out["segment_maps"] = counts.get("segment_map", 0)
        out["segment_unmaps"] = counts.get("segment_unmap", 0)
        if args.trace:
            lines, info = convert(entries)
            out.update(info)
            header = [
                f"# genesis-trace v1 source=pytorch-{torch.__version__} workload={args.name}",
                f"# peak_allocated={out['peak_allocated']}",
                f"# peak_reserved={out['peak_reserved']}",
                f"# num_alloc_retries={out['num_alloc_retries']}",
                f"# seconds={seconds:.1f}",
                f"# segment_allocs={out['segment_allocs']}",
                f"# segment_frees={out['segment_frees']}",
                f"# streams={info['streams']}",
            ]
            with open(args.trace + ".body", "w") as f:
                f.write("\n".join(header) + "\n")
                f.write("\n".join(lines) + "\n")
    with open(args.json, "w") as f:
        json.dump(out, f)
    if done is not None:
        done.write(b"e")


def convert(entries):
    """PyTorch trace entries -> genesis-trace event lines (fresh id per allocation; the default
    stream is 0, other streams 1, 2, ... in order of first use)."""
    live, streams, lines = {}, {0: 0}, []
    next_id, cur, peak, orphans = 0, 0, 0, 0
    for e in entries:
        a = e["action"]
        if a == "alloc":
            s = streams.setdefault(e["stream"], len(streams))
            if e["addr"] in live:
                orphans += 1
            live[e["addr"]] = (next_id, e["size"])
            lines.append(f"a {next_id} {e['size']} {s}")
            next_id += 1
            cur += e["size"]
            peak = max(peak, cur)
        elif a == "free_completed":
            hit = live.pop(e["addr"], None)
            if hit is None:
                orphans += 1
                continue
            lines.append(f"f {hit[0]}")
            cur -= hit[1]
    return lines, {"allocations": next_id, "peak_live": peak, "streams": len(streams),
                   "unmatched": orphans, "live_at_end": len(live)}


# ---- the corpus -------------------------------------------------------------------------------

def split_mode(spec):
    """`MODE[:NAME=VALUE...]` -> (MODE, {NAME: VALUE}): an allocator and the environment
    settings of its processes (`genesis:GENESIS_CAPI_MAX_HANDLE=128MiB`)."""
    mode, *settings = spec.split(":")
    if mode not in ALLOC_CONF or not all("=" in x for x in settings):
        sys.exit(f"bad mode {spec!r} (MODE[:NAME=VALUE...], MODE one of {', '.join(ALLOC_CONF)})")
    return mode, dict(x.split("=", 1) for x in settings)


def worker_env(spec):
    mode, extra = split_mode(spec)
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if ALLOC_CONF[mode]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF[mode]
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def worker_cmd(name, mode, json_path, *, trace=None, scale=1.0, deterministic=False,
               poll=False, warmup=0.0, probe=False, lockstep=None):
    cmd = [sys.executable, os.path.abspath(__file__), "worker", name, "--mode", split_mode(mode)[0],
           "--json", json_path, "--scale", str(scale)]
    if trace:
        cmd += ["--trace", trace]
    if deterministic:
        cmd.append("--deterministic")
    if poll:
        cmd.append("--poll")
    if warmup > 0:
        cmd += ["--warmup", str(warmup)]
    if probe:
        cmd.append("--probe")
    if lockstep:
        cmd += ["--lockstep", lockstep]
    return cmd


def spawn(name, mode, json_path, *, trace=None, scale=1.0, deterministic=False, poll=False,
          timeout=600, env_extra=None, warmup=0.0, probe=False):
    env = worker_env(mode)
    env.update(env_extra or {})
    cmd = worker_cmd(name, mode, json_path, trace=trace, scale=scale,
                     deterministic=deterministic, poll=poll, warmup=warmup, probe=probe)
    t = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        ok, log = p.returncode == 0, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        ok, log = False, f"timeout after {timeout}s\n{e.stdout or ''}{e.stderr or ''}"
    return ok, log, time.time() - t


def record(args):
    from workloads import WORKLOADS

    os.makedirs(args.out, exist_ok=True)
    names = args.only or list(WORKLOADS)
    jobs = []
    for n in names:
        for mode in ("default", "expandable", "async"):
            jobs.append((n, mode))
    results = collections.defaultdict(dict)

    def one(job):
        n, mode = job
        js = os.path.join(args.out, f"{n}.{mode}.json")
        trace = os.path.join(args.out, f"{n}.trace") if mode == "default" else None
        ok, log, secs = spawn(n, mode, js, trace=trace, scale=args.scale)
        print(f"[{'ok' if ok else 'FAIL'}] {n} {mode} {secs:.0f}s", flush=True)
        if not ok:
            print(log[-3000:], flush=True)
            return n, mode, None
        with open(js) as f:
            return n, mode, json.load(f)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        for n, mode, r in ex.map(one, jobs):
            if r is not None:
                results[n][mode] = r
    summary = {}
    for n in names:
        r = results.get(n, {})
        if "default" not in r:
            continue
        body = os.path.join(args.out, f"{n}.trace.body")
        extra = []
        if "expandable" in r:
            extra += [f"# expandable_peak_reserved={r['expandable']['peak_reserved']}",
                      f"# expandable_maps={r['expandable']['segment_maps']}",
                      f"# expandable_unmaps={r['expandable']['segment_unmaps']}"]
        if "async" in r:
            extra.append(f"# async_peak_reserved={r['async']['peak_reserved']}")
        with open(body) as f:
            text = f.read()
        head, _, events = text.partition("\n# streams=")
        streams_line, _, events = events.partition("\n")
        text = head + "\n# streams=" + streams_line + "\n" + "\n".join(extra) + "\n" + events
        with gzip.GzipFile(os.path.join(args.out, f"{n}.trace.gz"), "wb", mtime=0) as f:
            f.write(text.encode())
        os.remove(body)
        d = r["default"]
        summary[n] = {
            "allocations": d["allocations"],
            "peak_live": d["peak_live"],
            "streams": d["streams"],
            "unmatched": d["unmatched"],
            "default_peak_reserved": d["peak_reserved"],
            "default_segments": d["segment_allocs"],
            "expandable_peak_reserved": r.get("expandable", {}).get("peak_reserved"),
            "expandable_maps": r.get("expandable", {}).get("segment_maps"),
            "async_peak_reserved": r.get("async", {}).get("peak_reserved"),
            "losses_default": d["losses"],
            "losses_expandable": r.get("expandable", {}).get("losses"),
            "seconds": d["seconds"],
        }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"recorded {len(summary)} of {len(names)} workloads")


# ---- the table --------------------------------------------------------------------------------

# Workloads recorded after the allocator's policy was fixed: nothing was ever chosen on them.
UNSEEN = {
    "mobilenet_v3_train_varbatch_bf16_cl", "swin_t_train_fp32_varbatch",
    "densenet121_train_varres_bf16", "retinanet_train_varres", "bert_mlm_train_accum_fp32",
    "opt_generate_sample_bf16", "whisper_train_varbatch_fp32", "mixtral_moe_train_varlen_bf16",
    "dcgan_train_bf16_varbatch",
}


# Workloads recorded as a check on the policy of commit e143bbc (2026-12-01), before any change
# was tried on them: like `UNSEEN`, a group nothing is to be chosen on.
FRESH = {
    "gpt2_infer_varlen_fp32", "llama_train_varlen_fp32", "gptneox_train_varbatch_varlen_bf16",
    "regnet_y_800mf_train_varbatch", "encoder_train_padmask_varlen_fp32",
    "efficientnet_v2_s_infer_varbatch_varres", "llama_generate_sample_varlen_bf16",
    "vit_l16_infer_varbatch_bf16",
}


LATER = {
    "opt_train_varlen_bf16", "distilbert_mlm_train_varlen_fp32",
    "resnet101_infer_varbatch_varres_fp32", "mobilenet_v2_train_varres_bf16",
}


def split_of(name):
    """The tuning split: a trace belongs to the held-out half when the first byte of the
    SHA-256 of its name is odd, except the three traces the allocator was first tuned on,
    which are design traces whatever their hash. Policies are designed on the design half
    only. The workloads in `UNSEEN` form a third group, recorded after the policy was fixed,
    those in `FRESH` a fourth, recorded later as a check on the policy then, and those in
    `LATER` a fifth, defined and recorded after the 80 MiB handle cap was chosen."""
    import hashlib

    if name in UNSEEN:
        return "unseen"
    if name in FRESH:
        return "fresh"
    if name in LATER:
        return "later"
    if name in ("gpt2_train", "resnet50_train", "gpt2_generate"):
        return "design"
    return "held out" if hashlib.sha256(name.encode()).digest()[0] % 2 else "design"


def read_trace(path):
    meta, cur, peak, live, n = {}, 0, 0, {}, 0
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                for kv in line[1:].split():
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        meta[k] = v
                continue
            p = line.split()
            if p[0] == "a":
                live[p[1]] = int(p[2])
                cur += int(p[2])
                peak = max(peak, cur)
                n += 1
            elif p[0] == "f" and p[1] in live:
                cur -= live.pop(p[1])
    return meta, peak, n


def table(args):
    import glob

    rows = ["| workload | split | allocations | peak live (MiB) | PyTorch default: reserved / live "
            "(segments) | expandable segments (maps) | cudaMallocAsync |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted(glob.glob(os.path.join(args.dir, "*.trace.gz"))):
        name = os.path.basename(path)[: -len(".trace.gz")]
        meta, peak, n = read_trace(path)

        def ratio(key):
            return f"{int(meta[key]) / peak:.3f}" if key in meta and peak else "-"

        rows.append(f"| `{name}` | {split_of(name)} | {n} | {peak / 2**20:.0f} | "
                    f"{ratio('peak_reserved')} ({meta.get('segment_allocs', '-')}) | "
                    f"{ratio('expandable_peak_reserved')} ({meta.get('expandable_maps', '-')}) | "
                    f"{ratio('async_peak_reserved')} |")
    print("\n".join(rows))


# ---- live -------------------------------------------------------------------------------------

def alloc_churn(dev, rng, scale):
    """Not a corpus workload: the allocator's cost seen from PyTorch. Each step allocates and
    frees 20,000 tensors of mixed sizes (512 B to 8 MiB, up to 64 alive at once) with no kernel
    between them, so the step time is the allocator's host path plus PyTorch's around it."""
    import torch

    sizes = [512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20]
    for _ in range(max(1, int(10 * scale))):
        alive = []
        for _ in range(20000):
            alive.append(torch.empty(sizes[rng.randrange(len(sizes))], dtype=torch.uint8,
                                     device=dev))
            if len(alive) > 64:
                alive.pop(rng.randrange(len(alive)))
        alive.clear()
        yield 0.0


MICRO = {"alloc_churn": alloc_churn}


def paired_ratio(runs, base_runs, draws=2000):
    """Summed step time of `runs` over that of `base_runs` (rounds paired in order, steps after
    the first two), with a 95 % bootstrap interval that redraws the steps: the same steps for
    both allocators in every draw, since step i runs the same shapes under each. It reflects
    step-to-step noise within the runs, not drift between whole runs."""
    pairs = list(zip(runs, base_runs))
    if not pairs:
        return ""
    steps = min(min(len(r["step_seconds"]), len(b["step_seconds"])) for r, b in pairs)
    idx = list(range(2, steps)) or list(range(steps))

    def ratio(sample):
        num = sum(r["step_seconds"][i] for r, _ in pairs for i in sample)
        den = sum(b["step_seconds"][i] for _, b in pairs for i in sample)
        return num / den if den > 0 else float("nan")

    rng = random.Random(SEED)
    boot = sorted(ratio([rng.choice(idx) for _ in idx]) for _ in range(draws))
    lo, hi = boot[int(0.025 * draws)], boot[int(0.975 * draws) - 1]
    return f"{ratio(idx):.3f} ({lo:.3f}–{hi:.3f})"


def rounds_ratio(runs, base_runs):
    """Geometric mean over rounds of each round's summed-step ratio (steps after the first
    two), with a 95 % t-interval over rounds: each round is a fresh pair of processes, so the
    interval covers whatever differs between whole processes, not only step-to-step noise."""
    logs = []
    for r, b in zip(runs, base_runs):
        num, den = sum(r["step_seconds"][2:]), sum(b["step_seconds"][2:])
        if num > 0 and den > 0:
            logs.append(math.log(num / den))
    if len(logs) < 2:
        return ""
    n = len(logs)
    mean = statistics.fmean(logs)
    half = T975[min(n - 1, len(T975)) - 1] * statistics.stdev(logs) / math.sqrt(n)
    return f"{math.exp(mean):.3f} ({math.exp(mean - half):.3f}–{math.exp(mean + half):.3f})"


# Two-sided 95 % quantiles of Student's t for 1 to 30 degrees of freedom; beyond 30 the value
# at 30 (slightly wider than exact).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def write_table(path, rows):
    table = "\n".join(rows)
    with open(path, "w") as f:
        f.write(table + "\n")
    print(table)


def live(args):
    os.makedirs(args.out, exist_ok=True)
    runs = {}
    modes = args.modes.split(",")
    for m in modes:
        split_mode(m)
    for r in range(args.rounds):
        # Interleaved: every round runs every allocator once, in an order rotated each round,
        # so that drift of the machine (clocks, temperature, other tenants) falls on all.
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for n in args.workloads.split(","):
            for mode in order:
                js = os.path.join(args.out, f"live.{n}.{mode}.{r}.json")
                # The NVML poller is a thread that takes the GIL every millisecond: rounds that
                # run it measure device memory, the others time the steps.
                poll = r < args.poll_rounds
                ok, log, secs = spawn(n, mode, js, deterministic=True, poll=poll,
                                      scale=args.scale, timeout=args.timeout,
                                      warmup=args.warmup, probe=True)
                print(f"[{'ok' if ok else 'FAIL'}] live {n} {mode} round {r}"
                      f"{' (poll)' if poll else ''} {secs:.0f}s", flush=True)
                if not ok:
                    print(log[-3000:], flush=True)
                    continue
                with open(js) as f:
                    rec = json.load(f)
                rec["round"], rec["polled"] = r, poll
                runs.setdefault(n, {}).setdefault(mode, []).append(rec)
    with open(os.path.join(args.out, "live.json"), "w") as f:
        json.dump(runs, f)
    rows = ["| workload | allocator | peak reserved (MiB) | device used, peak (MiB) | "
            "steps | timed rounds | time after 2 warm-up steps, median (s) | time / default: "
            "median; per round | time / default, summed steps (95 % interval) | "
            "losses equal default |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def timed(r):
        # Every allocator runs the same shapes in the same order: the sum of the steps after
        # the first two (model set-up, first kernels) is the comparable figure.
        return sum(r["step_seconds"][2:]) or sum(r["step_seconds"])

    def timing_rounds(rs):
        # Rounds without the poller when there are any.
        quiet = [r for r in rs if not r.get("polled")]
        return quiet or rs

    for n, by_mode in runs.items():
        base = by_mode.get("default")
        for mode, rs in by_mode.items():
            trs = timing_rounds(rs)
            ts = [timed(r) for r in trs]
            med = statistics.median(ts)
            rel = eq = paired = ""
            if base:
                btrs = timing_rounds(base)
                bts = [timed(r) for r in btrs]
                per = [f"{t / b:.3f}" for t, b in zip(ts, bts)]
                rel = f"{med / statistics.median(bts):.3f}; {', '.join(per)}"
                paired = paired_ratio(trs, btrs)
                eq = "yes" if all(r["losses"] == base[0]["losses"] for r in rs) else "NO"
            polled = [r for r in rs if r.get("polled")] or rs
            r0 = rs[0]
            rows.append(f"| {n} | {mode} | {r0['peak_reserved'] / 2**20:.0f} | "
                        f"{max(r['device_used_peak'] for r in polled) / 2**20:.0f} | "
                        f"{len(r0['losses'])} | {len(trs)} | {med:.3f} | {rel} | {paired} | "
                        f"{eq} |")
    write_table(os.path.join(args.out, "live.md"), rows)


def pin_to(n):
    """A child's pre-exec function that keeps it on the first `n` CPUs this process may use
    (all of them when `n` <= 0)."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = set(allowed if n <= 0 else allowed[:n])
    return lambda: os.sched_setaffinity(0, cpus)


def read_token(f, timeout):
    """One byte from a worker's pipe, or b"" when it closed it or sent nothing in `timeout` s."""
    ready, _, _ = select.select([f], [], [], timeout)
    return f.read(1) if ready else b""


def pace(args):
    """Two allocators' processes in lockstep: step i of one, then step i of the other (the
    order alternating step by step), never at the same time, so that whatever drifts on the
    machine (clocks, host speed, other tenants) falls on both alike. Compares step times pair
    by pair."""
    os.makedirs(args.out, exist_ok=True)
    base_mode, mode = args.modes.split(",")
    split_mode(base_mode)
    split_mode(mode)
    # Labels: the same allocator on both sides (an A/A run, the method's own noise) is
    # "default" against "default'".
    sides = {base_mode: base_mode, (mode + "'" if mode == base_mode else mode): mode}
    base_mode, mode = list(sides)
    # Both processes run on the same CPUs (they never run at once), so that neither gets the
    # faster cores.
    pin = pin_to(args.cpus)
    runs = {}
    for n in args.workloads.split(","):
        for r in range(args.rounds):
            procs = {}
            for m in (base_mode, mode):
                go_r, go_w = os.pipe()
                done_r, done_w = os.pipe()
                js = os.path.join(args.out, f"pace.{n}.{m}.{r}.json")
                cmd = worker_cmd(n, sides[m], js, scale=args.scale, deterministic=True,
                                 warmup=args.warmup, lockstep=f"{go_r},{done_w}")
                log = open(js + ".log", "w")
                p = subprocess.Popen(cmd, env=worker_env(sides[m]), pass_fds=(go_r, done_w),
                                     stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
                os.close(go_r)
                os.close(done_w)
                procs[m] = (p, os.fdopen(go_w, "wb", buffering=0),
                            os.fdopen(done_r, "rb", buffering=0), js, log)
            t = time.time()
            ok = all(read_token(procs[m][2], args.timeout) == b"r" for m in procs)
            step = 0
            while ok:
                order = (base_mode, mode) if step % 2 == 0 else (mode, base_mode)
                replies = []
                for m in order:
                    try:
                        procs[m][1].write(b"g")
                    except BrokenPipeError:
                        replies.append(b"")
                        continue
                    replies.append(read_token(procs[m][2], args.timeout))
                if replies != [b"d", b"d"]:
                    # Both end after the same step: they run the same shapes.
                    ok = replies == [b"e", b"e"]
                    break
                step += 1
            for m, (p, go, done, js, log) in procs.items():
                go.close()
                try:
                    p.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    ok = False
                done.close()
                log.close()
                ok = ok and p.returncode == 0
            print(f"[{'ok' if ok else 'FAIL'}] pace {n} {base_mode}/{mode} round {r}: {step} steps"
                  f" {time.time() - t:.0f}s", flush=True)
            if not ok:
                for m in procs:
                    with open(procs[m][3] + ".log") as f:
                        print(f"--- {m}\n{f.read()[-3000:]}", flush=True)
                continue
            for m in procs:
                with open(procs[m][3]) as f:
                    runs.setdefault(n, {}).setdefault(m, []).append(json.load(f))
            # After every round, so that a run cut short keeps what it measured.
            write_pace(args.out, runs, base_mode, mode)


def write_pace(out, runs, base_mode, mode):
    """`pace.json` (every step of every round) and the `pace.md` table."""
    with open(os.path.join(out, "pace.json"), "w") as f:
        json.dump(runs, f)
    rows = [f"| workload | rounds | steps | {base_mode}: steps after the first two (s) | "
            f"{mode} (s) | {mode} / {base_mode}, summed steps (95 % interval) | "
            "rounds: geometric mean (95 % t-interval) | per round | median of step ratios | "
            "losses equal |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, by_mode in runs.items():
        if base_mode not in by_mode or mode not in by_mode:
            continue
        bs, rs = by_mode[base_mode], by_mode[mode]
        steps = len(bs[0]["step_seconds"])
        bt = sum(sum(b["step_seconds"][2:]) for b in bs)
        rt = sum(sum(x["step_seconds"][2:]) for x in rs)
        per = ", ".join(f"{sum(x['step_seconds'][2:]) / sum(b['step_seconds'][2:]):.3f}"
                        for x, b in zip(rs, bs))
        step_ratios = [x["step_seconds"][i] / b["step_seconds"][i]
                       for x, b in zip(rs, bs) for i in range(2, steps)]
        eq = "yes" if all(x["losses"] == bs[0]["losses"] for x in rs + bs) else "NO"
        rows.append(f"| {n} | {len(rs)} | {steps} | {bt:.3f} | {rt:.3f} | "
                    f"{paired_ratio(rs, bs)} | {rounds_ratio(rs, bs)} | {per} | "
                    f"{statistics.median(step_ratios):.3f} | "
                    f"{eq} |")
    write_table(os.path.join(out, "pace.md"), rows)


def repeat(args):
    """One workload, many runs per allocator, each compared with the most common losses."""
    os.makedirs(args.out, exist_ok=True)
    variants = []
    for spec in args.modes.split(","):
        split_mode(spec)
        if spec in variants:
            sys.exit(f"repeat: mode {spec!r} given twice (use --runs for more runs)")
        variants.append(spec)
    pin = pin_to(args.cpus)
    # Interleaved, so that every allocator meets the same neighbours on the machine.
    jobs = [(k, v, i) for i in range(args.runs) for k, v in enumerate(variants)]

    def one(job):
        k, spec, i = job
        js = os.path.join(args.out, f"repeat.{k}.{i}.json")
        cmd = worker_cmd(args.workload, spec, js, scale=args.scale, deterministic=True,
                         warmup=args.warmup)
        try:
            p = subprocess.run(cmd, env=worker_env(spec), capture_output=True, text=True,
                               timeout=args.timeout, preexec_fn=pin)
        except subprocess.TimeoutExpired:
            print(f"[FAIL] {spec} run {i}: timeout", flush=True)
            return spec, None
        if p.returncode != 0:
            print(f"[FAIL] {spec} run {i}\n{(p.stdout + p.stderr)[-3000:]}", flush=True)
            return spec, None
        with open(js) as f:
            losses = json.load(f)["losses"]
        print(f"[ok] {spec} run {i}: {len(losses)} steps", flush=True)
        return spec, losses

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as ex:
        results = list(ex.map(one, jobs))
    done = [(s, l) for s, l in results if l is not None]
    with open(os.path.join(args.out, "repeat.json"), "w") as f:
        json.dump({"workload": args.workload, "runs": done}, f)
    if not done:
        sys.exit("repeat: no run finished")
    common, _ = collections.Counter(tuple(l) for _, l in done).most_common(1)[0]
    rows = [f"| allocator | runs | failed | losses as the most common run's | runs that differ: "
            f"first differing step (loss there, against {args.workload}'s most common) |",
            "| --- | --- | --- | --- | --- |"]
    for spec, _, _ in variants:
        mine = [l for s, l in done if s == spec]
        failed = sum(1 for s, l in results if s == spec and l is None)
        diffs = []
        for l in mine:
            if tuple(l) != common:
                at = next((j for j, (a, b) in enumerate(zip(l, common)) if a != b),
                          min(len(l), len(common)))
                got = l[at] if at < len(l) else "none"
                want = common[at] if at < len(common) else "none"
                diffs.append(f"{at} ({got} / {want})")
        rows.append(f"| {spec} | {len(mine)} | {failed} | {len(mine) - len(diffs)} | "
                    f"{'; '.join(diffs)} |")
    write_table(os.path.join(args.out, "repeat.md"), rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--jobs", type=int, default=6)
    r.add_argument("--scale", type=float, default=1.0)
    r.add_argument("--only", nargs="*")
    lv = sub.add_parser("live")
    lv.add_argument("--out", required=True)
    lv.add_argument("--workloads", default="gpt2_train_varlen_bf16,bert_train_varbatch_varlen_bf16,"
                    "resnet50_train_varres_fp32,vit_b16_train_bf16_varbatch")
    lv.add_argument("--modes", default="default,expandable,async,genesis",
                    help="allocators, each MODE or MODE:NAME=VALUE[:NAME=VALUE...]")
    lv.add_argument("--scale", type=float, default=1.0)
    lv.add_argument("--timeout", type=int, default=300)
    lv.add_argument("--rounds", type=int, default=1,
                    help="runs of every (workload, allocator), interleaved; medians reported")
    lv.add_argument("--poll-rounds", type=int, default=1,
                    help="rounds (the first ones) that sample device memory with a thread; "
                    "step times come from the other rounds when there are any")
    lv.add_argument("--warmup", type=float, default=3.0,
                    help="seconds of GPU work in each process before its first step")
    pc = sub.add_parser("pace")
    pc.add_argument("--out", required=True)
    pc.add_argument("--workloads", default="gpt2_train_varlen_bf16,bert_train_varbatch_varlen_bf16,"
                    "resnet50_train_varres_fp32,vit_b16_train_bf16_varbatch")
    pc.add_argument("--modes", default="default,genesis",
                    help="the two allocators, the baseline first (MODE[:NAME=VALUE...])")
    pc.add_argument("--scale", type=float, default=1.0)
    pc.add_argument("--timeout", type=int, default=300,
                    help="seconds a worker may take to start or to run one step")
    pc.add_argument("--rounds", type=int, default=3)
    pc.add_argument("--warmup", type=float, default=3.0,
                    help="seconds of GPU work in each process before its first step")
    pc.add_argument("--cpus", type=int, default=1,
                    help="both processes run on the first N CPUs this one may use (0: all)")
    rp = sub.add_parser("repeat")
    rp.add_argument("--out", required=True)
    rp.add_argument("--workload", required=True)
    rp.add_argument("--modes", default="default,genesis",
                    help="allocators, each MODE or MODE:NAME=VALUE[:NAME=VALUE...]")
    rp.add_argument("--runs", type=int, default=8, help="runs of each allocator")
    rp.add_argument("--jobs", type=int, default=4, help="processes at a time")
    rp.add_argument("--scale", type=float, default=1.0)
    rp.add_argument("--timeout", type=int, default=600, help="seconds one run may take")
    rp.add_argument("--cpus", type=int, default=4,
                    help="every process runs on the first N CPUs this one may use (0: all)")
    rp.add_argument("--warmup", type=float, default=0.0,
                    help="seconds of GPU work in each process before its first step")
    t = sub.add_parser("table")
    t.add_argument("dir")
    w = sub.add_parser("worker")
    w.add_argument("name")
    w.add_argument("--mode", required=True, choices=list(ALLOC_CONF))
    w.add_argument("--json", required=True)
    w.add_argument("--trace")
    w.add_argument("--scale", type=float, default=1.0)
    w.add_argument("--deterministic", action="store_true")
    w.add_argument("--poll", action="store_true")
    w.add_argument("--warmup", type=float, default=0.0,
                   help="seconds of GPU work before the first step (clocks up)")
    w.add_argument("--probe", action="store_true",
                   help="time a fixed host loop and a fixed device loop before the first step")
    w.add_argument("--lockstep", metavar="GO_FD,DONE_FD",
                   help="run each step when a byte arrives on GO_FD, report on DONE_FD (pace)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    {"record": record, "live": live, "pace": pace, "repeat": repeat, "table": table,
     "worker": worker}[args.cmd](args)


if __name__ == "__main__":
    main()
