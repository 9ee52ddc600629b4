// Throughput of PyTorch's CUDA caching allocator and of vrampool's C ABI when several threads of one process
// churn at once, each on a CUDA stream of its own, freeing blocks the others made.
//
// PyTorch: c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete (its default allocator, left in
// place). vrampool: vrampool_torch_alloc / vrampool_torch_free of libvrampool_c.so loaded with dlopen (the device
// pool, made by the first allocation from VRAMPOOL_CONF), as latency.cpp's path without an allocator object.
//
// The churn is that of crates/vrampool-bench/src/shared_churn.rs, with the same sequences: thread t keeps 125 live
// blocks of log-uniform sizes from 256 B to 8 MiB (ChurnSequence of churn_sequence.rs, splitmix64 seeded with
// t + 1, 16384 steps drawn before timing and repeated), all on stream t of the streams this module creates (the
// same for both allocators; created once, never destroyed, as vrampool_torch_alloc asks of its streams). Each
// step frees one victim block and allocates a new one in its place, except that one step in 8 hands the victim
// to the next thread's mailbox instead (a mutex and a vector per thread, looked at every 256 steps), which frees
// it: from another thread, with the block's own size and allocation stream; a mailbox holds at most 64 blocks (a
// thread whose next thread lags frees them itself, so that the blocks live stay bounded however the threads are
// scheduled). An operation is one allocation or
// one free; ops/s = all threads' operations / the longest thread's time, the threads starting together past a
// barrier once their first blocks are allocated. Every block is freed at the end of a call, untimed.
//
// Built by threads.py with torch.utils.cpp_extension.load (run.py's build_extension); threads.py runs the rounds.

#include <torch/extension.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cuda_runtime_api.h>

#include "torch_abi.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using vrampool_torch_abi::AllocFn;
using vrampool_torch_abi::FreeFn;
using vrampool_torch_abi::LastErrorFn;

constexpr size_t kLive = 125;             // live blocks per thread
constexpr uint64_t kMinSize = 256;        // smallest block
constexpr uint64_t kMaxSize = 8ull << 20;  // largest block
constexpr size_t kSteps = 1 << 14;        // steps drawn before a thread's sequence repeats
constexpr size_t kHandoffEvery = 8;       // one step in this many hands its victim to the next thread
constexpr size_t kChunk = 256;            // steps between two looks at the mailbox (and at the clock)
constexpr size_t kMailboxMost = 2 * kChunk / kHandoffEvery;  // blocks a mailbox holds at most

// A live block: what either allocator needs to free it.
struct Block {
  void* ptr;
  size_t size;
  cudaStream_t stream;
};

// PyTorch's caching allocator, through the raw interface.
struct TorchCaching {
  void* alloc(size_t size, cudaStream_t stream) {
    void* p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, stream);
    if (p == nullptr) {
      throw std::runtime_error("raw_alloc_with_stream returned NULL for " + std::to_string(size) + " bytes");
    }
    return p;
  }
  void free(const Block& b) { c10::cuda::CUDACachingAllocator::raw_delete(b.ptr); }
};

// vrampool's C ABI, the entry points PyTorch's pluggable allocator calls.
struct Vrampool {
  AllocFn alloc_fn = nullptr;
  FreeFn free_fn = nullptr;
  LastErrorFn last_error = nullptr;
  int device = 0;
  void* alloc(size_t size, cudaStream_t stream) {
    void* p = alloc_fn(size, device, stream);
    if (p == nullptr) {
      throw std::runtime_error("vrampool_torch_alloc returned NULL for " + std::to_string(size) +
                               " bytes: " + last_error());
    }
    return p;
  }
  // The block's own size and the stream it was allocated on, whichever thread frees it.
  void free(const Block& b) { free_fn(b.ptr, b.size, device, b.stream); }
};

Vrampool g_vrampool;                  // set by load_vrampool
std::vector<cudaStream_t> g_streams;  // stream t for thread t, made as more threads are asked for

// splitmix64, as churn_sequence.rs's SplitMix, so that the sequences are the Rust bench's.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) / static_cast<double>(1ull << 53); }
  uint64_t log_uniform(uint64_t min, uint64_t max) {
    double low = std::log(static_cast<double>(min));
    double high = std::log(static_cast<double>(max));
    auto size = static_cast<uint64_t>(std::exp(low + (high - low) * unit()));
    return std::clamp(size, min, max);
  }
};

// ChurnSequence::new(kLive, 256, 8 MiB, seed): the first blocks' sizes, then per step a victim and a new size.
struct Sequence {
  std::vector<size_t> initial;
  std::vector<std::pair<size_t, size_t>> steps;
  explicit Sequence(uint64_t seed) {
    SplitMix rng{seed};
    for (size_t i = 0; i < kLive; i++) initial.push_back(rng.log_uniform(kMinSize, kMaxSize));
    for (size_t i = 0; i < kSteps; i++) {
      size_t victim = rng.next() % kLive;
      steps.emplace_back(victim, rng.log_uniform(kMinSize, kMaxSize));
    }
  }
};

struct Mailbox {
  std::mutex lock;
  std::vector<Block> blocks;
};

// One thread's result.
struct Outcome {
  uint64_t ops = 0;
  double seconds = 0.0;
  std::exception_ptr error;
};

// Runs the churn on `threads` threads of `allocator` for about `seconds`; returns each thread's outcome.
template <typename A>
std::vector<Outcome> churn_on(A& allocator, int device, size_t threads, double seconds) {
  const auto duration = std::chrono::duration<double>(seconds);
  std::vector<Mailbox> mailboxes(threads);
  std::vector<Outcome> outcomes(threads);
  std::atomic<size_t> arrived{0};
  std::atomic<bool> failed{false};

  auto work = [&](size_t t) {
    Outcome& out = outcomes[t];
    std::vector<Block> blocks;
    blocks.reserve(kLive);
    try {
      C10_CUDA_CHECK(cudaSetDevice(device));
      const cudaStream_t stream = g_streams[t];
      const Sequence sequence(t + 1);
      for (size_t size : sequence.initial) blocks.push_back({allocator.alloc(size, stream), size, stream});
      Mailbox& next = mailboxes[(t + 1) % threads];
      Mailbox& mine = mailboxes[t];
      std::vector<Block> handed, received;
      handed.reserve(kChunk);
      received.reserve(kChunk);
      size_t step = 0;
      uint64_t ops = 0;
      arrived.fetch_add(1);
      while (arrived.load() < threads) std::this_thread::yield();
      const auto start = Clock::now();
      while (Clock::now() - start < duration && !failed.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < kChunk; i++) {
          const auto [victim, size] = sequence.steps[step % kSteps];
          if (step % kHandoffEvery == 0) {
            handed.push_back(blocks[victim]);
          } else {
            allocator.free(blocks[victim]);
            ops++;
          }
          blocks[victim] = {allocator.alloc(size, stream), size, stream};
          ops++;
          step++;
        }
        bool taken;
        {
          std::lock_guard<std::mutex> guard(next.lock);
          taken = next.blocks.size() < kMailboxMost;
          if (taken) next.blocks.insert(next.blocks.end(), handed.begin(), handed.end());
        }
        if (!taken) {
          for (const Block& b : handed) {
            allocator.free(b);
            ops++;
          }
        }
        handed.clear();
        {
          std::lock_guard<std::mutex> guard(mine.lock);
          std::swap(received, mine.blocks);
        }
        for (const Block& b : received) {
          allocator.free(b);
          ops++;
        }
        received.clear();
      }
      out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      out.ops = ops;
      for (const Block& b : blocks) allocator.free(b);
    } catch (...) {
      // The blocks of a failed call are left as they are (the error ends the measurement); the other threads stop
      // at their next look at `failed`.
      out.error = std::current_exception();
      failed.store(true);
      // Counted as arrived, so that no thread waits for this one at the barrier.
      arrived.fetch_add(threads);
    }
  };

  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (size_t t = 0; t < threads; t++) workers.emplace_back(work, t);
  for (auto& w : workers) w.join();
  // What was handed after its receiver's last look.
  if (failed.load()) return outcomes;
  for (auto& mailbox : mailboxes) {
    for (const Block& b : mailbox.blocks) allocator.free(b);
    mailbox.blocks.clear();
  }
  return outcomes;
}

// Loads vrampool's C functions from `library`.
void load_vrampool(const std::string& library) {
  auto functions = vrampool_torch_abi::load(library);
  g_vrampool.alloc_fn = functions.alloc_fn;
  g_vrampool.free_fn = functions.free_fn;
  g_vrampool.last_error = functions.last_error;
}

// One measurement: the churn on `threads` threads of `method` ("pytorch" or "vrampool") for about `seconds`, on
// the current device. Returns ops_per_second (all threads' operations over the longest thread's time), ops,
// seconds (the longest thread's) and per_thread_ops.
py::dict churn(const std::string& method, int threads, double seconds) {
  if (threads < 1 || !(seconds > 0.0)) {
    throw std::invalid_argument("threads must be at least 1 and seconds above 0");
  }
  if (method != "pytorch" && method != "vrampool") {
    throw std::invalid_argument("unknown method " + method + " (pytorch, vrampool)");
  }
  if (method == "vrampool" && g_vrampool.alloc_fn == nullptr) {
    throw std::runtime_error("load_vrampool(library) must be called first");
  }
  const int device = c10::cuda::current_device();
  while (g_streams.size() < static_cast<size_t>(threads)) {
    cudaStream_t stream = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    g_streams.push_back(stream);
  }
  std::vector<Outcome> outcomes;
  {
    py::gil_scoped_release released;
    if (method == "pytorch") {
      TorchCaching allocator;
      outcomes = churn_on(allocator, device, threads, seconds);
    } else {
      g_vrampool.device = device;
      outcomes = churn_on(g_vrampool, device, threads, seconds);
    }
  }
  uint64_t ops = 0;
  double longest = 0.0;
  py::list per_thread;
  for (const Outcome& o : outcomes) {
    if (o.error) std::rethrow_exception(o.error);
    ops += o.ops;
    longest = std::max(longest, o.seconds);
    per_thread.append(o.ops);
  }
  py::dict d;
  d["ops_per_second"] = longest > 0.0 ? static_cast<double>(ops) / longest : 0.0;
  d["ops"] = ops;
  d["seconds"] = longest;
  d["per_thread_ops"] = per_thread;
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Throughput of PyTorch's CUDA caching allocator and of vrampool's C ABI churned by several threads";
  m.attr("LIVE_BLOCKS") = kLive;
  m.attr("MIN_SIZE") = kMinSize;
  m.attr("MAX_SIZE") = kMaxSize;
  m.attr("HANDOFF_EVERY") = kHandoffEvery;
  m.attr("MAILBOX_EVERY") = kChunk;
  m.def("load_vrampool", &load_vrampool, py::arg("library"),
        "Loads vrampool_torch_alloc, vrampool_torch_free and vrampool_last_error from `library` (dlopen)");
  m.def("churn", &churn, py::arg("method"), py::arg("threads"), py::arg("seconds"),
        "The churn on `threads` threads of `method` (\"pytorch\" or \"vrampool\") for about `seconds`: a dict "
        "of ops_per_second, ops, seconds (the longest thread's) and per_thread_ops");
}
