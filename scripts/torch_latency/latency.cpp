// Allocation latency of PyTorch's CUDA caching allocator and of vrampool's C ABI, side by side in one
// process, on the CPU that drives the GPU.
//
// PyTorch: c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete (its default allocator, left
// in place). vrampool, by default through its PyTorch allocator (raw_alloc_with_stream / raw_delete of the
// CUDAAllocator object `vrampool.allocator()` returns: what PyTorch calls once vrampool is installed), or, given no
// allocator object, through vrampool_torch_alloc / vrampool_torch_free of libvrampool_c.so loaded with dlopen. The
// device pool is made by the first allocation, from VRAMPOOL_CONF. Both on PyTorch's current stream.
//
// Patterns (DESIGN.md): pairs of one size (allocate then free, 4 KiB, 1 MiB, 64 MiB), and churn: 1000 live
// blocks of log-uniform sizes from 256 B to 8 MiB, each op frees one at random and allocates a new one in its
// place (one op = one free plus one allocation). Each pattern runs `rounds` rounds of `ops` operations after a
// warm-up; the figure is the median over rounds of the mean nanoseconds per operation (p10 and p90 beside it).
// The two allocators' rounds take turns (PyTorch first in even rounds, vrampool first in odd ones), so that both
// are timed over the same stretch: this host's speed drifts within a run by more than the figures compared
// (`turns` false: all of PyTorch's rounds, then all of vrampool's, for comparing the two ways).
// Every size and victim is drawn before timing, from a seeded generator, the same for both allocators.
// run.py calls `run` once per pattern, each in a process of its own, so that both allocators meet every
// pattern fresh (vrampool's default pool learns its size classes from its first requests). `on_timing` is called
// with the pattern's name and "start" right before its timed rounds and "end" right after them, untimed, so that
// the caller can read what both allocators did on the device while timed (their stats before and after).
//
// Built by run.py with torch.utils.cpp_extension.load.

#include <torch/extension.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>

#include <pybind11/stl.h>

#include "torch_abi.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using vrampool_torch_abi::AllocFn;
using vrampool_torch_abi::FreeFn;
using vrampool_torch_abi::LastErrorFn;

constexpr size_t kChurnLive = 1000;
constexpr double kChurnMin = 256.0;
constexpr double kChurnMax = 8.0 * 1024 * 1024;

// PyTorch's caching allocator, through the raw interface.
struct TorchCaching {
  cudaStream_t stream;
  void* alloc(size_t size) {
    void* p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, stream);
    if (p == nullptr) {
      throw std::runtime_error("raw_alloc_with_stream returned NULL for " + std::to_string(size) + " bytes");
    }
    return p;
  }
  void free(void* p, size_t) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
};

// vrampool's C ABI, the entry points PyTorch's pluggable allocator calls.
struct Vrampool {
  AllocFn alloc_fn;
  FreeFn free_fn;
  LastErrorFn last_error;
  int device;
  cudaStream_t stream;
  void* alloc(size_t size) {
    void* p = alloc_fn(size, device, stream);
    if (p == nullptr) {
      throw std::runtime_error("vrampool_torch_alloc returned NULL for " + std::to_string(size) +
                               " bytes: " + last_error());
    }
    return p;
  }
  void free(void* p, size_t size) { free_fn(p, size, device, stream); }
};

// vrampool's PyTorch allocator, through the interface PyTorch calls.
struct VrampoolTorch {
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> allocator;
  cudaStream_t stream;
  void* alloc(size_t size) {
    void* p = allocator->raw_alloc_with_stream(size, stream);
    if (p == nullptr) {
      throw std::runtime_error("vrampool's raw_alloc_with_stream returned NULL for " + std::to_string(size));
    }
    return p;
  }
  void free(void* p, size_t) { allocator->raw_delete(p); }
};

struct Figure {
  double median;
  double p10;
  double p90;
};

Figure summarize(std::vector<double> per_round) {
  std::sort(per_round.begin(), per_round.end());
  auto at = [&](double q) { return per_round[static_cast<size_t>(q * (per_round.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.1), at(0.9)};
}

// Times `rounds` rounds of `ops` operations on each of two allocators: in turns, alternating which goes first, or
// (`turns` false) all of the first's rounds, then all of the second's. Returns both allocators' figures.
template <typename First, typename Second>
std::pair<Figure, Figure> time_rounds(First& first, Second& second, int rounds, int ops, bool turns) {
  std::vector<double> a, b;
  a.reserve(rounds);
  b.reserve(rounds);
  auto timed = [&](auto& run, std::vector<double>& out) {
    auto start = Clock::now();
    run.round(ops);
    out.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / ops);
  };
  if (!turns) {
    for (int r = 0; r < rounds; r++) timed(first, a);
    for (int r = 0; r < rounds; r++) timed(second, b);
    return {summarize(std::move(a)), summarize(std::move(b))};
  }
  for (int r = 0; r < rounds; r++) {
    if (r % 2 == 0) {
      timed(first, a);
      timed(second, b);
    } else {
      timed(second, b);
      timed(first, a);
    }
  }
  return {summarize(std::move(a)), summarize(std::move(b))};
}

// Allocate-then-free pairs of one size on one allocator.
template <typename A>
struct Pairs {
  A& allocator;
  size_t size;
  void round(int ops) {
    for (int i = 0; i < ops; i++) {
      void* p = allocator.alloc(size);
      allocator.free(p, size);
    }
  }
};

// The sizes and victims of a churn run, drawn before timing.
struct ChurnPlan {
  std::vector<size_t> sizes;    // kChurnLive to fill, then one per op
  std::vector<uint32_t> victims;  // one per op
};

ChurnPlan plan_churn(uint64_t seed, size_t total_ops) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(kChurnMin), std::log(kChurnMax));
  std::uniform_int_distribution<uint32_t> victim(0, kChurnLive - 1);
  ChurnPlan plan;
  plan.sizes.reserve(kChurnLive + total_ops);
  for (size_t i = 0; i < kChurnLive + total_ops; i++) {
    plan.sizes.push_back(static_cast<size_t>(std::exp(log_size(rng))));
  }
  plan.victims.reserve(total_ops);
  for (size_t i = 0; i < total_ops; i++) {
    plan.victims.push_back(victim(rng));
  }
  return plan;
}

// The churn on one allocator: its live blocks, and where it stands in the plan.
template <typename A>
struct Churn {
  A& allocator;
  const ChurnPlan& plan;
  std::vector<void*> live;
  std::vector<size_t> live_size;
  size_t next = 0;
  size_t op = 0;

  Churn(A& a, const ChurnPlan& p) : allocator(a), plan(p), live(kChurnLive), live_size(kChurnLive) {
    for (size_t i = 0; i < kChurnLive; i++) {
      live_size[i] = plan.sizes[next++];
      live[i] = allocator.alloc(live_size[i]);
    }
  }
  Churn(const Churn&) = delete;
  Churn& operator=(const Churn&) = delete;
  ~Churn() {
    for (size_t i = 0; i < kChurnLive; i++) {
      if (live[i] != nullptr) allocator.free(live[i], live_size[i]);
    }
  }
  void round(int ops) {
    for (int i = 0; i < ops; i++) {
      uint32_t v = plan.victims[op++];
      allocator.free(live[v], live_size[v]);
      live[v] = nullptr;
      live_size[v] = plan.sizes[next++];
      live[v] = allocator.alloc(live_size[v]);
    }
  }
};

py::dict row(const std::string& method, const std::string& pattern, size_t size, const Figure& f, int rounds,
             int ops) {
  py::dict d;
  d["method"] = method;
  d["pattern"] = pattern;
  d["size_bytes"] = size;
  d["ns_per_op_median"] = f.median;
  d["ns_per_op_p10"] = f.p10;
  d["ns_per_op_p90"] = f.p90;
  d["rounds"] = rounds;
  d["ops_per_round"] = ops;
  return d;
}

const std::vector<std::pair<std::string, size_t>> kPairSizes = {
    {"pair-4KiB", 4096}, {"pair-1MiB", 1 << 20}, {"pair-64MiB", 64u << 20}};

// Runs the named patterns on PyTorch's allocator and on `vrampool`; one dict per (method, pattern).
template <typename V>
py::list run_patterns(TorchCaching& torch_allocator, V& vrampool, const std::vector<std::string>& patterns,
                      int rounds, int ops, int churn_ops, int warmup, uint64_t seed, bool turns,
                      const py::function& on_timing) {
  auto wanted = [&](const std::string& name) {
    return std::find(patterns.begin(), patterns.end(), name) != patterns.end();
  };
  py::list rows;
  for (const auto& [pattern, size] : kPairSizes) {
    if (!wanted(pattern)) continue;
    Pairs<TorchCaching> torch_pairs{torch_allocator, size};
    Pairs<V> vrampool_pairs{vrampool, size};
    torch_pairs.round(warmup);
    vrampool_pairs.round(warmup);
    on_timing(pattern, "start");
    auto [torch_figure, vrampool_figure] = time_rounds(torch_pairs, vrampool_pairs, rounds, ops, turns);
    on_timing(pattern, "end");
    rows.append(row("pytorch", pattern, size, torch_figure, rounds, ops));
    rows.append(row("vrampool", pattern, size, vrampool_figure, rounds, ops));
  }
  if (wanted("churn")) {
    ChurnPlan plan = plan_churn(seed, static_cast<size_t>(warmup) + static_cast<size_t>(rounds) * churn_ops);
    Churn<TorchCaching> torch_churn(torch_allocator, plan);
    Churn<V> vrampool_churn(vrampool, plan);
    torch_churn.round(warmup);
    vrampool_churn.round(warmup);
    on_timing("churn", "start");
    auto [torch_figure, vrampool_figure] = time_rounds(torch_churn, vrampool_churn, rounds, churn_ops, turns);
    on_timing("churn", "end");
    rows.append(row("pytorch", "churn", 0, torch_figure, rounds, churn_ops));
    rows.append(row("vrampool", "churn", 0, vrampool_figure, rounds, churn_ops));
  }
  return rows;
}

// Runs the named patterns (pair-4KiB, pair-1MiB, pair-64MiB, churn), in that order, on both allocators;
// returns one dict per (method, pattern). vrampool is `allocator` (its PyTorch allocator) where not None, else
// the C functions of `library`.
py::list run(const std::string& library, const std::vector<std::string>& patterns, int rounds, int ops,
             int churn_ops, int warmup, uint64_t seed, bool turns, const py::function& on_timing,
             const py::object& allocator) {
  if (rounds < 1 || ops < 1 || churn_ops < 1 || warmup < 0) {
    throw std::invalid_argument("rounds, ops and churn_ops must be at least 1, warmup at least 0");
  }
  for (const auto& name : patterns) {
    bool known = name == "churn" || std::any_of(kPairSizes.begin(), kPairSizes.end(),
                                                [&](const auto& p) { return p.first == name; });
    if (!known) {
      throw std::invalid_argument("unknown pattern " + name + " (pair-4KiB, pair-1MiB, pair-64MiB, churn)");
    }
  }
  int device = c10::cuda::current_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  TorchCaching torch_allocator{stream};
  if (!allocator.is_none()) {
    VrampoolTorch vrampool{
        allocator.cast<std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>>(), stream};
    return run_patterns(torch_allocator, vrampool, patterns, rounds, ops, churn_ops, warmup, seed, turns, on_timing);
  }
  auto functions = vrampool_torch_abi::load(library);
  Vrampool vrampool{functions.alloc_fn, functions.free_fn, functions.last_error, device, stream};
  return run_patterns(torch_allocator, vrampool, patterns, rounds, ops, churn_ops, warmup, seed, turns, on_timing);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Allocation latency: PyTorch's CUDA caching allocator against vrampool's C ABI";
  m.def("run", &run, py::arg("library"), py::arg("patterns"), py::arg("rounds"), py::arg("ops"),
        py::arg("churn_ops"), py::arg("warmup"), py::arg("seed"), py::arg("turns"), py::arg("on_timing"),
        py::arg("allocator") = py::none(),
        "Times the named patterns (pair-4KiB, pair-1MiB, pair-64MiB, churn) on both allocators; one dict per "
        "(method, pattern). on_timing(pattern, \"start\" or \"end\") is called around each pattern's timed "
        "rounds. vrampool is `allocator` (vrampool.allocator()) where given, else the C functions of `library`");
}
