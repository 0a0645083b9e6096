"""Genesis's caching allocator as PyTorch's CUDA allocator.

    import genesis_torch
    genesis_torch.install()      # before the first CUDA tensor

``install()`` loads ``libgenesis_mem_capi.so`` (built with ``cargo build --release -p
genesis-mem-capi --features cuda``) and makes it PyTorch's CUDA allocator through
``torch.cuda.memory.CUDAPluggableAllocator``. PyTorch's own ``torch.cuda.memory_stats()``,
``memory_snapshot()``, ``empty_cache()`` and ``set_per_process_memory_fraction()`` raise or do
nothing for a pluggable allocator; this module's functions of the same names talk to Genesis.

Out of memory. PyTorch's ``CUDAPluggableAllocator`` does not check the pointer it gets, so the
library's NULL on out of memory would become a tensor at address 0. ``install()`` therefore
builds, once, a five-line C++ wrapper against the installed PyTorch (cached in
``~/.cache/genesis_torch``; needs a C++ compiler, ``$CXX`` or ``c++``) whose malloc raises
PyTorch's own ``torch.OutOfMemoryError`` when Genesis returns NULL. Without a compiler it warns
and installs the library directly (``oom_mode() == "null"``): then running out of memory is
not recoverable.

Streams. PyTorch does not forward ``Tensor.record_stream()`` to a pluggable allocator. Use
``genesis_torch.record_stream(tensor, stream)`` instead, or make the allocation stream wait for
the side stream (``torch.cuda.current_stream().wait_stream(side)``) before the tensor's last
reference goes, or install with ``guard_streams=True`` (every free waits for every stream the
allocator has seen; one event per other stream per free).

Library lookup: the ``path`` argument, ``$GENESIS_TORCH_LIB``, the package's folder, then the
cargo target folders (``$CARGO_TARGET_DIR``, the repository's ``target/``), release first.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import tempfile
import threading
import warnings

__all__ = [
    "install",
    "is_installed",
    "library_path",
    "oom_mode",
    "memory_stats",
    "memory_snapshot",
    "empty_cache",
    "set_per_process_memory_fraction",
    "reset_peak_memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "record_stream",
    "guard_streams",
    "find_library",
]

LIB_NAME = "libgenesis_mem_capi.so"

_lock = threading.Lock()
_state: dict = {"lib": None, "path": None, "oom": None, "allocator": None, "shim": None}

# The wrapper PyTorch loads when out-of-memory errors are to be raised: Genesis's malloc, and a
# c10::OutOfMemoryError (Python: torch.OutOfMemoryError) when it returns NULL for a non-empty
# request; a c10::Error (RuntimeError) for other failures (no device, driver error).
_SHIM_SOURCE = r"""
#include <cstddef>
#include <string>
#include <c10/util/Exception.h>

extern "C" {
void* genesis_malloc(size_t size, int device, void* stream);
void genesis_free(void* ptr, size_t size, int device, void* stream);
const char* genesis_last_error(void);
int genesis_last_error_code(void);

// The message is built with std::string alone: no iostreams (TORCH_CHECK formats through an
// ostringstream, which crashed when called from this library).
void* genesis_torch_malloc(size_t size, int device, void* stream) {
  void* p = genesis_malloc(size, device, stream);
  if (p == nullptr && size != 0) {
    const char* why = genesis_last_error();
    std::string msg = std::string(genesis_last_error_code() == 1
                                      ? "CUDA out of memory (Genesis allocator). Tried to allocate "
                                      : "Genesis allocator failed to allocate ") +
        std::to_string(size) + " bytes on device " + std::to_string(device) + ": " +
        (why != nullptr ? why : "allocation failed");
    c10::SourceLocation loc{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
    if (genesis_last_error_code() == 1) {
      throw c10::OutOfMemoryError(loc, msg);
    }
    throw c10::Error(loc, msg);
  }
  return p;
}

void genesis_torch_free(void* ptr, size_t size, int device, void* stream) {
  genesis_free(ptr, size, device, stream);
}
}
"""


def _candidates(path: str | None) -> list[str]:
    out = []
    if path:
        out.append(path)
    env = os.environ.get("GENESIS_TORCH_LIB")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, LIB_NAME))
    out.append(os.path.join(os.path.dirname(here), LIB_NAME))
    targets = []
    if os.environ.get("CARGO_TARGET_DIR"):
        targets.append(os.environ["CARGO_TARGET_DIR"])
    # python/genesis_torch/ -> the repository root's target/.
    targets.append(os.path.join(os.path.dirname(os.path.dirname(here)), "target"))
    for t in targets:
        for profile in ("release", "debug"):
            out.append(os.path.join(t, profile, LIB_NAME))
    return out


def find_library(path: str | None = None) -> str:
    """The absolute path of ``libgenesis_mem_capi.so`` (see the module's lookup order)."""
    tried = []
    for c in _candidates(path):
        if os.path.isdir(c):
            c = os.path.join(c, LIB_NAME)
        if os.path.isfile(c):
            return os.path.realpath(c)
        tried.append(c)
        if c == path:
            raise FileNotFoundError(f"genesis_torch: no library at {path!r}")
    raise FileNotFoundError(
        "genesis_torch: libgenesis_mem_capi.so not found; build it with "
        "`cargo build --release -p genesis-mem-capi --features cuda` or set GENESIS_TORCH_LIB. "
        "Tried: " + ", ".join(tried)
    )


def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    c_int, c_size_t, c_void_p, c_double = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_double
    sig = {
        "genesis_malloc": (c_void_p, [c_size_t, c_int, c_void_p]),
        "genesis_free": (None, [c_void_p, c_size_t, c_int, c_void_p]),
        "genesis_record_stream": (c_int, [c_void_p, c_int, c_void_p]),
        "genesis_register_stream": (c_int, [c_int, c_void_p]),
        "genesis_guard_all_streams": (c_int, [c_int, c_int]),
        "genesis_memory_stats_json": (c_void_p, [c_int]),
        "genesis_memory_snapshot_pickle": (c_void_p, [c_int, ctypes.POINTER(c_size_t)]),
        "genesis_free_buffer": (None, [c_void_p]),
        "genesis_empty_cache": (c_int, [c_int]),
        "genesis_set_memory_fraction": (c_int, [c_double, c_int]),
        "genesis_reset_peak_stats": (c_int, [c_int]),
        "genesis_last_error": (ctypes.c_char_p, []),
        "genesis_last_error_code": (c_int, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


def _shim_cache_dir() -> str:
    d = os.environ.get("GENESIS_TORCH_CACHE")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "genesis_torch")


def _build_shim(lib_path: str) -> str:
    """Compiles (once; cached) the out-of-memory wrapper against the installed PyTorch."""
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(torch_dir, "include")
    torch_lib = os.path.join(torch_dir, "lib")
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    st = os.stat(lib_path)
    key = hashlib.sha256(
        "\0".join(
            [_SHIM_SOURCE, torch.__version__, torch_dir, lib_path, str(st.st_size),
             str(st.st_mtime_ns), str(abi)]
        ).encode()
    ).hexdigest()[:16]
    cache = _shim_cache_dir()
    out = os.path.join(cache, f"genesis_torch_shim-{key}.so")
    if os.path.isfile(out):
        return out
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise RuntimeError("no C++ compiler found (set CXX)")
    if not os.path.isfile(os.path.join(include, "c10", "util", "Exception.h")):
        raise RuntimeError(f"PyTorch's C++ headers are not installed under {include}")
    os.makedirs(cache, exist_ok=True)
    lib_dir = os.path.dirname(lib_path)
    errors = []
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = os.path.join(tmp, "shim.cpp")
        with open(src, "w") as f:
            f.write(_SHIM_SOURCE)
        tmp_out = os.path.join(tmp, "shim.so")
        for std in ("c++20", "c++17"):
            cmd = [
                cxx, "-shared", "-fPIC", "-O2", f"-std={std}", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                "-isystem", include, src, "-o", tmp_out,
                # The library by its path, not `-l:NAME`: it may have any file name.
                "-L", torch_lib, "-lc10", os.path.abspath(lib_path),
                f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{lib_dir}",
            ]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0:
                os.replace(tmp_out, out)
                return out
            errors.append(f"{' '.join(cmd)}\n{r.stderr[-2000:]}")
    raise RuntimeError("compiling the out-of-memory wrapper failed:\n" + "\n".join(errors))


def _last_error(lib) -> str:
    msg = lib.genesis_last_error()
    return msg.decode(errors="replace") if msg else "unknown error"


def install(path: str | None = None, *, oom: str | None = None, guard_streams: bool = False,
            vmm: bool | None = None, memory_first: bool | None = None,
            max_handle: int | str | None = None) -> str:
    """Makes Genesis PyTorch's CUDA allocator. Call it before the first CUDA allocation.

    ``path``: the library (a file or its folder); see :func:`find_library`.
    ``oom``: ``"raise"`` (default; ``$GENESIS_TORCH_OOM``): build the wrapper that raises
    ``torch.OutOfMemoryError``, falling back to ``"null"`` with a warning when it cannot be
    built; ``"require"``: the same, but fail when it cannot; ``"null"``: load the library
    directly (out of memory gives PyTorch a NULL pointer).
    ``guard_streams``: every free waits for every stream the allocator has seen.
    ``vmm``: ``False`` for plain ``cuMemAlloc`` segments instead of the virtual-memory arena.
    ``memory_first``: ``True`` for the settings that keep peak reserved memory closer to peak
    live for more driver calls (``Config::memory_first``; ``$GENESIS_CAPI_MEMORY_FIRST=1``).
    ``max_handle``: the largest physical handle, in bytes or as a size such as ``"128MiB"``
    (``Config::max_handle_bytes``, 80 MiB by default; ``$GENESIS_CAPI_MAX_HANDLE``).

    Returns the path of the library PyTorch loaded (the wrapper, or the library itself).
    Installing again with the same library is a no-op.
    """
    import torch

    with _lock:
        lib_path = find_library(path)
        if _state["lib"] is not None:
            if _state["path"] == lib_path:
                return _state["shim"] or lib_path
            raise RuntimeError(
                f"genesis_torch is already installed from {_state['path']}; cannot switch to {lib_path}"
            )
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "genesis_torch.install() must run before CUDA is initialised: PyTorch has already "
                "set up its default CUDA allocator (a CUDA tensor, stream or call came first). Call "
                "it right after `import torch`, before anything touches the GPU."
            )
        if vmm is not None:
            os.environ["GENESIS_CAPI_VMM"] = "1" if vmm else "0"
        if memory_first is not None:
            os.environ["GENESIS_CAPI_MEMORY_FIRST"] = "1" if memory_first else "0"
        if max_handle is not None:
            os.environ["GENESIS_CAPI_MAX_HANDLE"] = str(max_handle)
        mode = oom or os.environ.get("GENESIS_TORCH_OOM", "raise")
        if mode not in ("raise", "require", "null"):
            raise ValueError(f"oom must be 'raise', 'require' or 'null', not {mode!r}")
        lib = _load(lib_path)
        so, malloc_name, free_name = lib_path, "genesis_malloc", "genesis_free"
        used = "null"
        if mode in ("raise", "require"):
            try:
                so = _build_shim(lib_path)
                malloc_name, free_name = "genesis_torch_malloc", "genesis_torch_free"
                used = "raise"
            except Exception as e:  # noqa: BLE001 - any failure means: no wrapper
                if mode == "require":
                    raise RuntimeError(f"genesis_torch: {e}") from e
                warnings.warn(
                    "genesis_torch: the out-of-memory wrapper could not be built, so running out "
                    f"of CUDA memory will not raise torch.OutOfMemoryError ({e})",
                    RuntimeWarning,
                    stacklevel=2,
                )
                so = lib_path
        allocator = torch.cuda.memory.CUDAPluggableAllocator(so, malloc_name, free_name)
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            raise RuntimeError(
                "genesis_torch.install(): PyTorch refused to change its CUDA allocator; it must "
                f"happen before the first CUDA allocation ({e})"
            ) from e
        if guard_streams and lib.genesis_guard_all_streams(-1, 1) != 0:
            raise RuntimeError(f"genesis_torch: {_last_error(lib)}")
        _state.update(lib=lib, path=lib_path, oom=used, allocator=allocator,
                      shim=so if used == "raise" else None)
        return so


def is_installed() -> bool:
    """Whether :func:`install` has made Genesis PyTorch's CUDA allocator."""
    return _state["lib"] is not None


def library_path() -> str | None:
    """The Genesis library in use, or ``None``."""
    return _state["path"]


def oom_mode() -> str | None:
    """``"raise"`` (out of memory raises ``torch.OutOfMemoryError``), ``"null"``, or ``None``."""
    return _state["oom"]


def _lib():
    lib = _state["lib"]
    if lib is None:
        raise RuntimeError("genesis_torch is not installed: call genesis_torch.install() first")
    return lib


def _device(device) -> int:
    import torch

    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"not a CUDA device: {device!r}")
    return torch.cuda.current_device() if d.index is None else d.index


def _check(lib, rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"genesis_torch: {_last_error(lib)}")


def memory_stats(device=None) -> dict:
    """The allocator's statistics with PyTorch's ``torch.cuda.memory_stats()`` key names
    (``"allocated_bytes.all.current"``, ...), plus Genesis's own under ``"genesis."``."""
    lib = _lib()
    p = lib.genesis_memory_stats_json(_device(device))
    if not p:
        raise RuntimeError(f"genesis_torch: {_last_error(lib)}")
    try:
        text = ctypes.string_at(p).decode()
    finally:
        lib.genesis_free_buffer(p)
    return json.loads(text)


def memory_snapshot(device=None) -> dict:
    """The allocator's state in the format of ``torch.cuda.memory._snapshot()`` (segments,
    blocks, streams); ``pickle.dump`` it for PyTorch's memory viewer."""
    lib = _lib()
    n = ctypes.c_size_t(0)
    p = lib.genesis_memory_snapshot_pickle(_device(device), ctypes.byref(n))
    if not p:
        raise RuntimeError(f"genesis_torch: {_last_error(lib)}")
    try:
        data = ctypes.string_at(p, n.value)
    finally:
        lib.genesis_free_buffer(p)
    return pickle.loads(data)


def empty_cache(device=None) -> None:
    """Gives cached memory back to the driver: of ``device``, or of every device in use."""
    lib = _lib()
    _check(lib, lib.genesis_empty_cache(-1 if device is None else _device(device)))


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Limits the memory the allocator reserves on ``device`` to ``fraction`` of it."""
    lib = _lib()
    _check(lib, lib.genesis_set_memory_fraction(float(fraction), _device(device)))


def reset_peak_memory_stats(device=None) -> None:
    """Resets the peak statistics: of ``device``, or of every device in use."""
    lib = _lib()
    _check(lib, lib.genesis_reset_peak_stats(-1 if device is None else _device(device)))


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def record_stream(tensor, stream) -> None:
    """``tensor.record_stream(stream)`` for Genesis (PyTorch does not forward it): when the
    tensor's memory is freed, it is reused only after the work queued on ``stream`` until then
    has completed."""
    lib = _lib()
    storage = tensor.untyped_storage()
    ptr = storage.data_ptr()
    if ptr == 0:
        return
    _check(lib, lib.genesis_record_stream(ctypes.c_void_p(ptr), tensor.device.index,
                                          ctypes.c_void_p(stream.cuda_stream)))


def guard_streams(on: bool = True, device=None, streams=()) -> None:
    """Turns the all-streams guard on or off (of ``device``, or every device now and later):
    every free waits for all streams the allocator has seen, and for ``streams``."""
    lib = _lib()
    d = -1 if device is None else _device(device)
    _check(lib, lib.genesis_guard_all_streams(d, 1 if on else 0))
    for s in streams:
        _check(lib, lib.genesis_register_stream(_device(s.device), ctypes.c_void_p(s.cuda_stream)))
