// A control for step-time measurements: the least a CUDA allocator plugged into PyTorch can do.
//
//     g++ -O2 -shared -fPIC tools/corpus/minimal_allocator.cpp -o /tmp/libminimal.so -ldl
//     export GENESIS_TORCH_LIB=/tmp/libminimal.so PYTHONPATH=$PWD/python
//     python3 tools/corpus/corpus.py pace --out /tmp/pm --modes default,genesis --workloads ...
//
// It exports the symbols `genesis_torch` loads, so `corpus.py` runs it in place of Genesis:
// PyTorch's `CUDAPluggableAllocator` path (its per-allocation bookkeeping, the C call) with an
// allocator behind it that does almost nothing (a free list per 512-byte-rounded size over
// `cuMemAlloc`, one mutex; memory is returned to the driver only when `cuMemAlloc` fails). A
// step-time difference between it and PyTorch's native allocator is the cost of the pluggable
// path itself, which no pluggable allocator can avoid. Not for real use: blocks are reused
// across streams without events, and the statistics are zeros.
#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {
typedef int (*mem_alloc_t)(unsigned long long*, size_t);
typedef int (*mem_free_t)(unsigned long long);
typedef int (*ctx_get_t)(void**);
typedef int (*ctx_set_t)(void*);
typedef int (*ctx_retain_t)(void**, int);
typedef int (*device_get_t)(int*, int);

struct Driver {
  mem_alloc_t mem_alloc = nullptr;
  mem_free_t mem_free = nullptr;
  ctx_get_t ctx_get = nullptr;
  ctx_set_t ctx_set = nullptr;
  ctx_retain_t ctx_retain = nullptr;
  device_get_t device_get = nullptr;
};

std::mutex mu;
Driver drv;
std::unordered_map<size_t, std::vector<void*>> cached;

// Loads the driver's entry points once; false when libcuda is missing. Called under `mu`.
bool load() {
  if (drv.mem_alloc != nullptr) return true;
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == nullptr) return false;
  Driver d;
  d.mem_alloc = reinterpret_cast<mem_alloc_t>(dlsym(h, "cuMemAlloc_v2"));
  d.mem_free = reinterpret_cast<mem_free_t>(dlsym(h, "cuMemFree_v2"));
  d.ctx_get = reinterpret_cast<ctx_get_t>(dlsym(h, "cuCtxGetCurrent"));
  d.ctx_set = reinterpret_cast<ctx_set_t>(dlsym(h, "cuCtxSetCurrent"));
  d.ctx_retain = reinterpret_cast<ctx_retain_t>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  d.device_get = reinterpret_cast<device_get_t>(dlsym(h, "cuDeviceGet"));
  if (!d.mem_alloc || !d.mem_free || !d.ctx_get || !d.ctx_set || !d.ctx_retain || !d.device_get)
    return false;
  drv = d;
  return true;
}
}  // namespace

extern "C" {
void* genesis_malloc(size_t size, int device, void* stream) {
  (void)stream;
  if (size == 0) return nullptr;
  const size_t rounded = (size + 511) & ~size_t(511);
  std::lock_guard<std::mutex> guard(mu);
  auto it = cached.find(rounded);
  if (it != cached.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  if (!load()) return nullptr;
  void* ctx = nullptr;
  drv.ctx_get(&ctx);
  if (ctx == nullptr) {
    int dev = 0;
    if (drv.device_get(&dev, device) != 0 || drv.ctx_retain(&ctx, dev) != 0) return nullptr;
    drv.ctx_set(ctx);
  }
  unsigned long long p = 0;
  if (drv.mem_alloc(&p, rounded) != 0) {
    for (auto& kv : cached)
      for (void* q : kv.second) drv.mem_free(reinterpret_cast<unsigned long long>(q));
    cached.clear();
    if (drv.mem_alloc(&p, rounded) != 0) return nullptr;
  }
  return reinterpret_cast<void*>(p);
}

void genesis_free(void* ptr, size_t size, int device, void* stream) {
  (void)device;
  (void)stream;
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> guard(mu);
  cached[(size + 511) & ~size_t(511)].push_back(ptr);
}

int genesis_record_stream(void*, int, void*) { return 0; }
int genesis_register_stream(int, void*) { return 0; }
int genesis_guard_all_streams(int, int) { return 0; }
char* genesis_memory_stats_json(int) {
  return strdup(
      "{\"reserved_bytes.all.peak\": 0, \"reserved_bytes.all.current\": 0, "
      "\"allocated_bytes.all.peak\": 0, \"allocated_bytes.all.current\": 0}");
}
unsigned char* genesis_memory_snapshot_pickle(int, size_t* len) {
  *len = 0;
  return nullptr;
}
void genesis_free_buffer(void* buffer) { free(buffer); }
int genesis_empty_cache(int) { return 0; }
int genesis_set_memory_fraction(double, int) { return 0; }
int genesis_reset_peak_stats(int) { return 0; }
const char* genesis_last_error() { return ""; }
int genesis_last_error_code() { return 0; }
}
