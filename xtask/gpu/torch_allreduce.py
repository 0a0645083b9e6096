"""torch.distributed.all_reduce bus bandwidth: PyTorch's side of genesis-dist's gpu_allreduce bench.

Same sizes (1 MiB to 4 GiB, doubling; GENESIS_BENCH_MAX_MIB caps them), f32 sum in place on
random data, 5 warm-up runs, the median of 20 runs, each timed by CUDA events on every rank
(the slowest rank's time, as the Genesis bench takes the slowest GPU's), and the same formula:
busbw = bytes / time x 2(n-1)/n. NVLink multicast off (NCCL_NVLS_ENABLE=0) unless set.

Usage (one process per GPU):
    torchrun --nproc-per-node N xtask/gpu/torch_allreduce.py [OUT.json]
Rank 0 prints the table and writes OUT.json (default $OUT/torch_allreduce.json when OUT is set).
"""
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WARMUP = 5
RUNS = 20


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    max_mib = int(os.environ.get("GENESIS_BENCH_MAX_MIB", "4096"))
    if rank == 0:
        print(
            f"torch all_reduce f32 sum, {n} x {torch.cuda.get_device_name(local)}, "
            f"NCCL {torch.cuda.nccl.version()}, NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}"
        )
        print(f"{'bytes':>12} {'time (us)':>12} {'algbw GB/s':>12} {'busbw GB/s':>12} {'call (us)':>12}")
    rows = []
    mib = 1
    while mib <= max_mib:
        nbytes = mib << 20
        x = torch.rand(nbytes // 4, dtype=torch.float32, device="cuda")
        times = []
        hosts = []
        for run in range(WARMUP + RUNS):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            called = time.perf_counter()
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            host = time.perf_counter() - called
            end.record()
            end.synchronize()
            ms = torch.tensor([start.elapsed_time(end)], device="cuda")
            # The slowest rank's time (outside the timed region).
            dist.all_reduce(ms, op=dist.ReduceOp.MAX)
            if run >= WARMUP:
                times.append(ms.item() * 1e-3)
                hosts.append(host)
        times.sort()
        hosts.sort()
        t = times[len(times) // 2]
        host = hosts[len(hosts) // 2]
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if rank == 0:
            print(f"{nbytes:>12} {t * 1e6:>12.1f} {algbw:>12.1f} {busbw:>12.1f} {host * 1e6:>12.1f}")
        rows.append({"bytes": nbytes, "time_s": t, "algbw_gbs": algbw, "busbw_gbs": busbw})
        del x
        mib *= 2
    if rank == 0:
        out = sys.argv[1] if len(sys.argv) > 1 else None
        if out is None and os.environ.get("OUT"):
            out = os.path.join(os.environ["OUT"], "torch_allreduce.json")
        if out:
            with open(out, "w") as f:
                json.dump(
                    {
                        "bench": "gpu_allreduce",
                        "impl": "torch",
                        "gpus": n,
                        "mode": "one process per GPU",
                        "dtype": "float32",
                        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                        "rows": rows,
                    },
                    f,
                    indent=1,
                )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
