// The host time a pluggable allocator spends inside its malloc and free, measured in a real
// workload.
//
//     g++ -O2 -shared -fPIC tools/corpus/timed_allocator.cpp -o /tmp/libtimed.so -ldl
//     export GENESIS_TORCH_LIB=/tmp/libtimed.so GENESIS_TIMED_INNER=$PWD/libgenesis_mem_capi.so
//     W=vit_b16_train_bf16_varbatch
//     python3 tools/corpus/corpus.py worker $W --mode genesis --json /tmp/w.json --deterministic --warmup 3
//
// It exports the symbols `genesis_torch` loads and forwards each to the library named by
// GENESIS_TIMED_INNER (Genesis's, or `minimal_allocator.cpp` for comparison), timing every
// malloc and free with CLOCK_MONOTONIC. The counters restart at `genesis_reset_peak_stats`
// (which `corpus.py worker` calls after its warm-up), and at exit it prints to stderr, for
// malloc and for free: calls, total and mean time, the longest call, and the calls under 1 µs,
// from 1 to 10 µs and longer (a driver call) with their totals.
#include <dlfcn.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace {
void* inner_library() {
  static void* lib = [] {
    const char* path = getenv("GENESIS_TIMED_INNER");
    void* h = path ? dlopen(path, RTLD_NOW) : nullptr;
    if (h == nullptr) {
      fprintf(stderr, "timed_allocator: GENESIS_TIMED_INNER=%s: %s\n", path ? path : "(unset)",
              path ? dlerror() : "set it to the allocator library to time");
      abort();
    }
    return h;
  }();
  return lib;
}

template <class F>
F inner(const char* name) {
  void* f = dlsym(inner_library(), name);
  if (f == nullptr) {
    fprintf(stderr, "timed_allocator: %s is not in GENESIS_TIMED_INNER\n", name);
    abort();
  }
  return reinterpret_cast<F>(f);
}

unsigned long long now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<unsigned long long>(t.tv_sec) * 1000000000ull + t.tv_nsec;
}

// Per operation (malloc, free): calls and nanoseconds in three bands, and the longest call.
struct Counters {
  std::atomic<unsigned long long> calls[3], ns[3], longest;
  void add(unsigned long long d) {
    const int band = d < 1000 ? 0 : d < 10000 ? 1 : 2;
    calls[band] += 1;
    ns[band] += d;
    unsigned long long seen = longest;
    while (d > seen && !longest.compare_exchange_weak(seen, d)) {
    }
  }
  void reset() {
    for (int i = 0; i < 3; i++) calls[i] = ns[i] = 0;
    longest = 0;
  }
  void print(const char* what) const {
    unsigned long long n = 0, t = 0;
    for (int i = 0; i < 3; i++) n += calls[i], t += ns[i];
    fprintf(stderr, "TIMED %-6s %llu calls, %.3f ms, %.1f ns mean, longest %llu ns", what, n,
            t / 1e6, n ? double(t) / n : 0.0, static_cast<unsigned long long>(longest));
    const char* bands[3] = {"<1us", "1-10us", ">=10us"};
    for (int i = 0; i < 3; i++) {
      const unsigned long long c = calls[i], s = ns[i];
      fprintf(stderr, " | %s: %llu calls, %.3f ms, %.1f ns mean", bands[i], c, s / 1e6,
              c ? double(s) / c : 0.0);
    }
    fprintf(stderr, "\n");
  }
};

Counters mallocs, frees;

struct Report {
  ~Report() {
    mallocs.print("malloc");
    frees.print("free");
  }
} report;
}  // namespace

extern "C" {
void* genesis_malloc(size_t size, int device, void* stream) {
  typedef void* (*F)(size_t, int, void*);
  static F f = inner<F>("genesis_malloc");
  const unsigned long long t = now_ns();
  void* p = f(size, device, stream);
  mallocs.add(now_ns() - t);
  return p;
}

void genesis_free(void* ptr, size_t size, int device, void* stream) {
  typedef void (*F)(void*, size_t, int, void*);
  static F f = inner<F>("genesis_free");
  const unsigned long long t = now_ns();
  f(ptr, size, device, stream);
  frees.add(now_ns() - t);
}

int genesis_reset_peak_stats(int device) {
  typedef int (*F)(int);
  static F f = inner<F>("genesis_reset_peak_stats");
  mallocs.reset();
  frees.reset();
  return f(device);
}

#define FORWARD(ret, name, params, args)     \
  ret name params {                          \
    typedef ret(*F) params;                  \
    static F fn = inner<F>(#name);           \
    return fn args;                          \
  }
FORWARD(int, genesis_record_stream, (void* p, int d, void* s), (p, d, s))
FORWARD(int, genesis_register_stream, (int d, void* s), (d, s))
FORWARD(int, genesis_guard_all_streams, (int d, int on), (d, on))
FORWARD(char*, genesis_memory_stats_json, (int d), (d))
FORWARD(unsigned char*, genesis_memory_snapshot_pickle, (int d, size_t* len), (d, len))
FORWARD(void, genesis_free_buffer, (void* b), (b))
FORWARD(int, genesis_empty_cache, (int d), (d))
FORWARD(int, genesis_set_memory_fraction, (double fraction, int d), (fraction, d))
FORWARD(const char*, genesis_last_error, (), ())
FORWARD(int, genesis_last_error_code, (), ())
}
