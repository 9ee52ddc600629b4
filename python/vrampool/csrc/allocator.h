// vrampool as PyTorch's CUDA allocator: the whole of c10::cuda::CUDACachingAllocator::CUDAAllocator, served by
// vrampool's C ABI (vrampool.h, libvrampool_c.so).
//
// Memory comes from two kinds of vrampool pools:
//   - the device pool of each GPU (vrampool_torch_alloc / vrampool_torch_free), configured by VRAMPOOL_CONF, for
//     every ordinary allocation;
//   - private pools (vrampool_device_private_pool_create), for memory kept apart: a CUDA graph's (from
//     beginAllocateToPool to releasePool) and a torch.cuda.MemPool's. One vrampool pool per (private pool,
//     stream), so that a pool sees a single stream and never records or waits for an event, which a capture
//     forbids.
//
// What lives here and not in the library: the routing of allocations to private pools, frees held back while a
// capture is under way, CUDA graph checkpoints (parked blocks), PyTorch's statistics and trace records, and the
// exceptions PyTorch expects (c10::OutOfMemoryError).
//
// Cost: an allocation or free while no private pool, capture, history or trace tracker is active is one relaxed
// atomic load plus the library call. Everything else takes mutex_.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "vrampool.h"

namespace vrampool_torch {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::TraceEntry;

// The most devices served, as in the library (ordinals 0 to 63).
constexpr int kMaxDevices = 64;

// A live block of a private pool: what it took and the stream it was allocated on.
struct Block {
  size_t size = 0;
  cudaStream_t stream = nullptr;
};

// Memory kept apart from the device pool: a CUDA graph's or a torch.cuda.MemPool's. Guarded by the allocator's
// mutex.
struct PrivatePool {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  // Holders: the MemPool object, each capture or use_mem_pool scope under way, each graph not yet reset.
  int use_count = 1;
  // The allocator a MemPool was made with, where it is not vrampool's: blocks come from its raw_alloc.
  std::shared_ptr<cca::CUDAAllocator> custom;
  // One vrampool pool per stream.
  std::unordered_map<cudaStream_t, vrampool_pool*> pools;
  std::unordered_map<void*, Block> live;
  // Blocks PyTorch freed while a checkpoint still names them: kept, so the checkpoint can be restored.
  std::unordered_map<void*, Block> parked;
  // Live blocks that work on other streams uses (recordStream).
  std::unordered_set<void*> recorded;
  // Serve the device's allocations that run out of memory (MemPool(use_on_oom=True)).
  bool use_on_oom = false;
};

// An active beginAllocateToPool: allocations whose stream the filter accepts go to the pool.
struct Routing {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  std::function<bool(cudaStream_t)> filter;
};

class VrampoolAllocator;

// The live blocks of a private pool at one moment (getCheckpointState), restorable with setCheckpointPoolState.
// While it exists, the blocks it names are parked rather than freed.
class Checkpoint final : public cca::AllocatorState {
 public:
  Checkpoint(VrampoolAllocator* owner, c10::DeviceIndex device, c10::MempoolId_t id,
             std::vector<std::pair<void*, Block>> blocks);
  ~Checkpoint() override;

  const c10::DeviceIndex device;
  const c10::MempoolId_t id;
  const std::vector<std::pair<void*, Block>> blocks;

 private:
  VrampoolAllocator* owner_;
};

// Accumulated counts at the last resetAccumulatedStats, subtracted from the library's running totals.
struct StatsBaseline {
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t growths = 0;
  uint64_t trimmed_bytes = 0;
};

class VrampoolAllocator final : public cca::CUDAAllocator {
 public:
  VrampoolAllocator() = default;

  // c10::Allocator
  c10::DataPtr allocate(size_t size) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // CUDAAllocator
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override;
  void enable(bool value) override;
  bool isEnabled() const override;
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  cca::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override;
  void recordHistory(bool enabled, cca::CreateContextFn context_recorder, size_t alloc_trace_max_entries,
                     cca::RecordContext when, bool clearHistory, const std::vector<std::string>& skip_actions) override;
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override;
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override;
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> pps) override;
  std::string name() override;

  // A checkpoint naming `blocks` is gone: parked blocks no other checkpoint names are freed.
  void forget_checkpoint(const std::vector<std::pair<void*, Block>>& blocks);

 private:
  // allocation.cpp
  void* malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  void* malloc_slow(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  void* malloc_failed(size_t size, c10::DeviceIndex device, cudaStream_t stream);
  [[noreturn]] void raise_out_of_memory(size_t size, c10::DeviceIndex device, const std::string& reason);
  void free_slow(void* ptr);
  bool capture_under_way_here() const;
  void flush_held_frees();
  void update_flags();
  // The counters of every pool of `device` added up; `pools_holding` (where not null) gets how many hold memory.
  vrampool_counters counters_of(c10::DeviceIndex device, uint64_t* pools_holding) const;

  // private_pools.cpp
  PrivatePool* route(c10::DeviceIndex device, cudaStream_t stream);
  PrivatePool* find_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  PrivatePool& create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id,
                                std::shared_ptr<cca::CUDAAllocator> custom);
  void* private_malloc(PrivatePool& pool, size_t size, cudaStream_t stream);
  void private_free(PrivatePool& pool, void* ptr);
  void private_release(PrivatePool& pool, void* ptr, const Block& block);
  vrampool_pool* private_pool_of(PrivatePool& pool, cudaStream_t stream);
  void destroy_if_unused(PrivatePool& pool);
  bool release_unused_private_pools(c10::DeviceIndex device);

  // history.cpp
  void record_trace(TraceEntry::Action action, c10::DeviceIndex device, void* ptr, size_t size, cudaStream_t stream,
                    c10::MempoolId_t pool, std::shared_ptr<c10::GatheredContext> context);
  std::shared_ptr<c10::GatheredContext> gather_context(cca::RecordContext at_least) const;

  // Guards everything below that is not atomic. Recursive: a checkpoint may die inside a call that holds it.
  mutable std::recursive_mutex mutex_;
  // Whether allocations, and frees, must take the slow path (see update_flags).
  std::atomic<bool> slow_alloc_{false};
  std::atomic<bool> slow_free_{false};

  bool initialized_ = false;
  bool enabled_ = true;
  // The fraction set with setMemoryFraction, per device (none: the pools' configured caps).
  std::optional<double> fractions_[kMaxDevices];
  StatsBaseline baselines_[kMaxDevices] = {};
  int64_t ooms_[kMaxDevices] = {};
  int64_t retries_[kMaxDevices] = {};

  std::vector<Routing> routings_;
  std::map<std::pair<c10::DeviceIndex, c10::MempoolId_t>, std::unique_ptr<PrivatePool>> private_pools_;
  // Blocks of private pools, live or parked, and their pool.
  std::unordered_map<void*, PrivatePool*> private_blocks_;
  // How many checkpoints name each block.
  std::unordered_map<void*, int> checkpoint_refs_;
  // Frees of device-pool blocks, and of private blocks used on other streams, made while a capture was under way
  // on the freeing thread's stream: done once no capture is under way.
  std::vector<void*> held_frees_;

  // History (recordHistory) and observers.
  bool history_enabled_ = false;
  // Read before mutex_ is taken (gathering a context may take the GIL, which a caller may be waiting for).
  std::atomic<cca::CreateContextFn> context_recorder_{nullptr};
  std::atomic<cca::RecordContext> record_when_{cca::RecordContext::NEVER};
  size_t max_entries_ = 0;
  std::unordered_set<std::string> skip_actions_;
  // Each entry's time, as recorded, is the approximate clock's reading (c10::getApproximateTime); a snapshot
  // gives it in microseconds of Unix time, as PyTorch's allocator does, through this converter.
  std::deque<TraceEntry> traces_[kMaxDevices];
  c10::ApproximateClockToUnixTimeConverter clock_converter_;
  // Sizes (and contexts) of blocks allocated while history was on, for their free records and the snapshot.
  std::unordered_map<void*, std::pair<size_t, std::shared_ptr<c10::GatheredContext>>> history_blocks_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::vector<cca::AllocatorTraceTracker> trackers_;
};

// The one allocator of the process, never destroyed (tensors may be freed during interpreter shutdown).
VrampoolAllocator& the_allocator();
std::shared_ptr<cca::CUDAAllocator> shared_allocator();

// The deleter of every DataPtr the allocator hands out.
void raw_delete_fn(void* ptr);

// Bytes as PyTorch's messages write them ("20.00 GiB").
std::string format_size(uint64_t bytes);

// Error messages are joined here rather than by c10::str: c10::str formats numbers with an std::ostringstream
// whose number facets, instantiated inside this module, can be another copy than the one the process's locale
// holds (a module compiled by another GCC than PyTorch's), and then crash. Numbers go through std::to_string.
inline void append(std::string& out, const char* text) { out += text; }
inline void append(std::string& out, const std::string& text) { out += text; }
inline void append(std::string& out, const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  out += text;
}
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void append(std::string& out, T value) {
  out += std::to_string(value);
}

// The pieces of a message joined.
template <typename... Parts>
std::string message(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

}  // namespace vrampool_torch
