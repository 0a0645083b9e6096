#!/usr/bin/env python3
"""Does the way device memory is mapped change how fast kernels use it?

    python3 tools/corpus/layout_probe.py            # the driver's layouts, in one process
    GENESIS_TORCH_LIB=... PYTHONPATH=$PWD/python python3 tools/corpus/layout_probe.py --genesis

Two 1 GiB buffers per layout: PyTorch's caching allocator, one `cuMemAlloc`, and virtual memory
(`cuMemAddressReserve` + `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`) as one handle (at
2 MiB and 1 GiB address alignment, and 2 MiB off a 2 MiB boundary) or as handles of 2, 32 and
256 MiB. With `--genesis`, the buffers are `torch.empty` from Genesis's allocator instead (its
own process: the allocator is installed before CUDA starts). On each: a copy and an add (GB/s,
read + write) and a gather of 16 Mi random f32 from the 1 GiB table (µs), timed with events,
20 repetitions after 3 warm-ups; five rounds over the layouts, printed as the range.
"""
import ctypes
import os
import sys

GIB, MIB = 1 << 30, 1 << 20


def driver_layouts(torch):
    cu = ctypes.CDLL("libcuda.so.1")
    u64, size_t = ctypes.c_uint64, ctypes.c_size_t

    class Location(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class AllocFlags(ctypes.Structure):
        _fields_ = [("compression", ctypes.c_ubyte), ("rdma", ctypes.c_ubyte),
                    ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]

    class Prop(ctypes.Structure):  # CUmemAllocationProp
        _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int),
                    ("location", Location), ("win32", ctypes.c_void_p), ("flags", AllocFlags)]

    class Access(ctypes.Structure):  # CUmemAccessDesc
        _fields_ = [("location", Location), ("flags", ctypes.c_int)]

    def check(code, what):
        if code != 0:
            raise RuntimeError(f"{what} failed: CUresult {code}")

    dev = torch.cuda.current_device()
    prop = Prop(type=1, location=Location(1, dev))  # pinned, on the device
    gran = size_t()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    print(f"allocation granularity {gran.value >> 20} MiB")

    def vmm(total, handle, align, offset=0):
        va = u64()
        check(cu.cuMemAddressReserve(ctypes.byref(va), size_t(total + align), size_t(align),
                                     u64(0), u64(0)), "cuMemAddressReserve")
        base, done = va.value + offset, 0
        while done < total:
            h, n = u64(), min(handle, total - done)
            check(cu.cuMemCreate(ctypes.byref(h), size_t(n), ctypes.byref(prop), u64(0)), "cuMemCreate")
            check(cu.cuMemMap(u64(base + done), size_t(n), size_t(0), h, u64(0)), "cuMemMap")
            acc = Access(Location(1, dev), 3)  # read-write
            check(cu.cuMemSetAccess(u64(base + done), size_t(n), ctypes.byref(acc), size_t(1)),
                  "cuMemSetAccess")
            done += n
        return base

    def mem_alloc(total):
        p = u64()
        check(cu.cuMemAlloc_v2(ctypes.byref(p), size_t(total)), "cuMemAlloc")
        return p.value

    class Raw:
        def __init__(self, ptr, n):
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                             "version": 3}

    def wrap(ptr):
        return torch.as_tensor(Raw(ptr, GIB // 4), device="cuda")

    return {
        "torch": lambda: torch.empty(GIB // 4, device="cuda"),
        "cuMemAlloc": lambda: wrap(mem_alloc(GIB)),
        "vmm 1 handle": lambda: wrap(vmm(GIB, GIB, 2 * MIB)),
        "vmm 1 handle, +2 MiB": lambda: wrap(vmm(GIB, GIB, 2 * MIB, 2 * MIB)),
        "vmm 1 handle, 1 GiB aligned": lambda: wrap(vmm(GIB, GIB, GIB)),
        "vmm 2 MiB handles": lambda: wrap(vmm(GIB, 2 * MIB, 2 * MIB)),
        "vmm 32 MiB handles": lambda: wrap(vmm(GIB, 32 * MIB, 2 * MIB)),
        "vmm 256 MiB handles": lambda: wrap(vmm(GIB, 256 * MIB, 2 * MIB)),
    }


def main():
    genesis = "--genesis" in sys.argv[1:]
    if genesis:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
        import genesis_torch

        genesis_torch.install()
    import torch

    torch.zeros(1, device="cuda")
    if genesis:
        layouts = {"genesis": lambda: torch.empty(GIB // 4, device="cuda")}
    else:
        layouts = driver_layouts(torch)
    bufs = {name: (make(), make()) for name, make in layouts.items()}
    for a, b in bufs.values():
        a.uniform_()
        b.zero_()
    idx = torch.randint(0, GIB // 4, (16 << 20,), device="cuda")

    def timed(fn, reps=20):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps

    res = {name: {"copy": [], "add": [], "gather": []} for name in bufs}
    for _ in range(5):
        for name, (a, b) in bufs.items():
            out = b[: idx.numel()]
            res[name]["copy"].append(2 * GIB / timed(lambda: b.copy_(a)) / 1e9)
            res[name]["add"].append(2 * GIB / timed(lambda: torch.add(a, 1.0, out=b)) / 1e9)
            res[name]["gather"].append(1e6 * timed(lambda: torch.index_select(a, 0, idx, out=out)))
    print(f"{'layout':30s} {'copy GB/s':>17s} {'add GB/s':>17s} {'gather µs':>15s}")
    for name, r in res.items():
        cells = [f"{min(r[k]):7.1f}–{max(r[k]):7.1f}" for k in ("copy", "add")]
        cells.append(f"{min(r['gather']):6.1f}–{max(r['gather']):6.1f}")
        print(f"{name:30s} {cells[0]:>17s} {cells[1]:>17s} {cells[2]:>15s}")


if __name__ == "__main__":
    main()
