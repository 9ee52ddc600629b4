// Allocation, free, statistics and the device-wide settings of the vrampool allocator (see allocator.h).
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "allocator.h"

namespace vrampool_torch {

VrampoolAllocator& the_allocator() {
  // Leaked on purpose: tensors freed after static destructors ran still find it.
  static auto* instance = new VrampoolAllocator();
  return *instance;
}

std::shared_ptr<cca::CUDAAllocator> shared_allocator() {
  static auto* shared = new std::shared_ptr<cca::CUDAAllocator>(&the_allocator(), [](cca::CUDAAllocator*) {});
  return *shared;
}

void raw_delete_fn(void* ptr) { the_allocator().raw_delete(ptr); }

std::string format_size(uint64_t bytes) {
  char text[64];
  if (bytes < 1024) {
    std::snprintf(text, sizeof(text), "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes < (1ull << 20)) {
    std::snprintf(text, sizeof(text), "%.2f KiB", bytes / 1024.0);
  } else if (bytes < (1ull << 30)) {
    std::snprintf(text, sizeof(text), "%.2f MiB", bytes / 1048576.0);
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  }
  return text;
}

namespace {

// The device of an ordinal PyTorch passed, checked against what the library serves.
void check_device(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              message("vrampool: device ", static_cast<int>(device), " is not a device ordinal vrampool serves (0 to ",
                      kMaxDevices - 1, ")"));
}

// The library's message for its last failure on this thread.
std::string last_error() {
  const char* message = vrampool_last_error();
  return message != nullptr ? message : "";
}

// Sums the counters of the pools of one device.
void add(vrampool_counters& total, const vrampool_counters& c) {
  total.allocated_bytes += c.allocated_bytes;
  total.allocated_bytes_peak += c.allocated_bytes_peak;
  total.reserved_bytes += c.reserved_bytes;
  total.reserved_bytes_peak += c.reserved_bytes_peak;
  total.active_allocations += c.active_allocations;
  total.allocations += c.allocations;
  total.frees += c.frees;
  total.failed_allocations += c.failed_allocations;
  total.ooms += c.ooms;
  total.growths += c.growths;
  total.trimmed_bytes += c.trimmed_bytes;
  total.fallbacks += c.fallbacks;
  total.held_frees += c.held_frees;
  total.held_frees_total += c.held_frees_total;
  total.backend_calls += c.backend_calls;
}

// Sets the aggregate and large-pool entries of a PyTorch statistic (vrampool has no small pool).
void set_stat(c10::CachingAllocator::StatArray& stat, int64_t current, int64_t peak, int64_t allocated, int64_t freed) {
  for (auto type : {c10::CachingAllocator::StatType::AGGREGATE, c10::CachingAllocator::StatType::LARGE_POOL}) {
    auto& s = stat[static_cast<size_t>(type)];
    s.current = current;
    s.peak = std::max(peak, current);
    s.allocated = allocated;
    s.freed = freed;
  }
}

// The device's memory in bytes (without making it current).
size_t total_memory(c10::DeviceIndex device) {
  cudaDeviceProp properties{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.totalGlobalMem;
}

// The calling thread's current device, as PyTorch sees it (its lazily set target device included).
c10::DeviceIndex current_device() {
  c10::DeviceIndex index = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&index));
  return index;
}

int64_t since(uint64_t now, uint64_t baseline) { return static_cast<int64_t>(now >= baseline ? now - baseline : 0); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Allocation and free.

c10::DataPtr VrampoolAllocator::allocate(size_t size) {
  const c10::DeviceIndex device = current_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  void* ptr = size == 0 ? nullptr : malloc(size, device, stream);
  return {ptr, ptr, &raw_delete_fn, c10::Device(c10::DeviceType::CUDA, device)};
}

c10::DeleterFnPtr VrampoolAllocator::raw_deleter() const { return &raw_delete_fn; }

void VrampoolAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void* VrampoolAllocator::raw_alloc(size_t nbytes) {
  if (nbytes == 0) {
    return nullptr;
  }
  const c10::DeviceIndex device = current_device();
  return malloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* VrampoolAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) {
    return nullptr;
  }
  return malloc(nbytes, current_device(), stream);
}

void* VrampoolAllocator::malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  if (C10_UNLIKELY(slow_alloc_.load(std::memory_order_relaxed))) {
    return malloc_slow(size, device, stream);
  }
  void* ptr = vrampool_torch_alloc(size, device, stream);
  if (C10_UNLIKELY(ptr == nullptr)) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    ptr = malloc_failed(size, device, stream);
  }
  return ptr;
}

void* VrampoolAllocator::malloc_slow(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  // The context is gathered before the lock: gathering may take the GIL.
  auto context = gather_context(cca::RecordContext::STATE);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // While a capture may be under way, driver calls must not invalidate it: a pool that grows does so in relaxed
  // mode (as PyTorch's own allocator does with cudaMalloc), outside the graph.
  std::unique_ptr<c10::cuda::CUDAStreamCaptureModeGuard> relaxed;
  if (!routings_.empty()) {
    relaxed = std::make_unique<c10::cuda::CUDAStreamCaptureModeGuard>(cudaStreamCaptureModeRelaxed);
  }
  c10::MempoolId_t pool_id{0, 0};
  void* ptr = nullptr;
  if (PrivatePool* pool = route(device, stream)) {
    pool_id = pool->id;
    ptr = private_malloc(*pool, size, stream);
  } else {
    ptr = vrampool_torch_alloc(size, device, stream);
    if (ptr == nullptr) {
      ptr = malloc_failed(size, device, stream);
    }
  }
  if (history_enabled_) {
    history_blocks_[ptr] = {size, record_when_ >= cca::RecordContext::STATE ? context : nullptr};
  }
  record_trace(TraceEntry::ALLOC, device, ptr, size, stream, pool_id, std::move(context));
  return ptr;
}

void* VrampoolAllocator::malloc_failed(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  const int code = vrampool_last_error_code();
  const std::string reason = last_error();
  check_device(device);
  if (code != VRAMPOOL_STATUS_OUT_OF_MEMORY) {
    TORCH_CHECK(false, message("vrampool could not allocate ", size, " bytes on CUDA device ", static_cast<int>(device),
                               ": ", reason));
  }
  // Memory other pools hold without use goes back to the device, then the request is tried once more.
  if (release_unused_private_pools(device)) {
    ++retries_[device];
    if (void* ptr = vrampool_torch_alloc(size, device, stream)) {
      return ptr;
    }
  }
  // A MemPool made with use_on_oom serves what the device pool cannot.
  for (auto& [key, pool] : private_pools_) {
    if (key.first == device && pool->use_on_oom) {
      try {
        return private_malloc(*pool, size, stream);
      } catch (const c10::OutOfMemoryError&) {
      }
    }
  }
  raise_out_of_memory(size, device, reason);
}

void VrampoolAllocator::raise_out_of_memory(size_t size, c10::DeviceIndex device, const std::string& reason) {
  ++ooms_[device];
  size_t device_free = 0;
  const size_t device_total = total_memory(device);
  if (device == c10::cuda::current_device()) {
    size_t total = 0;
    if (cudaMemGetInfo(&device_free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  vrampool_counters counters{};
  vrampool_device_counters(device, &counters);
  for (const auto& observer : oom_observers_) {
    observer(device, counters.allocated_bytes, device_total, device_free);
  }
  record_trace(TraceEntry::OOM, device, nullptr, device_free, nullptr, {0, 0}, nullptr);
  TORCH_CHECK_WITH(OutOfMemoryError, false,
                   message("CUDA out of memory. Tried to allocate ", format_size(size), " through vrampool: ", reason,
                           ". GPU ", static_cast<int>(device), " has a total capacity of ", format_size(device_total),
                           " of which ", format_size(device_free), " is free. vrampool holds ",
                           format_size(counters.reserved_bytes), " of which ", format_size(counters.allocated_bytes),
                           " is allocated. The cap is the pool's `cap` (VRAMPOOL_CONF) or the fraction set with "
                           "torch.cuda.set_per_process_memory_fraction."));
}

void VrampoolAllocator::raw_delete(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  if (C10_UNLIKELY(slow_free_.load(std::memory_order_relaxed))) {
    free_slow(ptr);
    return;
  }
  // A pointer vrampool did not hand out is an error on stderr (rate-limited by the library), never a crash.
  vrampool_torch_free(ptr, 0, -1, nullptr);
}

bool VrampoolAllocator::capture_under_way_here() const {
  if (routings_.empty()) {
    return false;
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream().stream(), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

void VrampoolAllocator::free_slow(void* ptr) {
  auto context = gather_context(cca::RecordContext::ALL);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  size_t size = 0;
  if (auto it = history_blocks_.find(ptr); it != history_blocks_.end()) {
    size = it->second.first;
    history_blocks_.erase(it);
  }
  auto owner = private_blocks_.find(ptr);
  c10::MempoolId_t pool_id = owner != private_blocks_.end() ? owner->second->id : c10::MempoolId_t{0, 0};
  c10::DeviceIndex device = owner != private_blocks_.end() ? owner->second->device : c10::cuda::current_device();
  record_trace(TraceEntry::FREE_REQUESTED, device, ptr, size, nullptr, pool_id, context);
  const bool capturing = capture_under_way_here();
  if (owner != private_blocks_.end()) {
    PrivatePool& pool = *owner->second;
    if (capturing && pool.recorded.count(ptr) != 0) {
      // Its held free would record events on capturing streams: done after the capture.
      held_frees_.push_back(ptr);
      return;
    }
    private_free(pool, ptr);
  } else if (capturing) {
    // The device pool may record an event on the block's stream at its free: not while that stream may be
    // capturing. The free is done once the capture has ended.
    held_frees_.push_back(ptr);
    return;
  } else {
    std::unique_ptr<c10::cuda::CUDAStreamCaptureModeGuard> relaxed;
    if (!routings_.empty()) {
      relaxed = std::make_unique<c10::cuda::CUDAStreamCaptureModeGuard>(cudaStreamCaptureModeRelaxed);
    }
    vrampool_torch_free(ptr, size, -1, nullptr);
  }
  record_trace(TraceEntry::FREE_COMPLETED, device, ptr, size, nullptr, pool_id, std::move(context));
}

void VrampoolAllocator::flush_held_frees() {
  if (!routings_.empty() || held_frees_.empty()) {
    return;
  }
  std::vector<void*> frees;
  frees.swap(held_frees_);
  for (void* ptr : frees) {
    if (auto owner = private_blocks_.find(ptr); owner != private_blocks_.end()) {
      private_free(*owner->second, ptr);
    } else {
      vrampool_torch_free(ptr, 0, -1, nullptr);
    }
  }
}

void VrampoolAllocator::update_flags() {
  const bool slow = !routings_.empty() || history_enabled_ || !trackers_.empty();
  slow_alloc_.store(slow, std::memory_order_relaxed);
  slow_free_.store(slow || !private_blocks_.empty() || !held_frees_.empty(), std::memory_order_relaxed);
}

void VrampoolAllocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Not one of ours (a tensor made from external memory, or by another allocator): nothing to do.
  if (ptr.get() == nullptr || ptr.get_deleter() != &raw_delete_fn) {
    return;
  }
  if (C10_UNLIKELY(slow_free_.load(std::memory_order_relaxed))) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (auto owner = private_blocks_.find(ptr.get()); owner != private_blocks_.end()) {
      PrivatePool& pool = *owner->second;
      auto block = pool.live.find(ptr.get());
      TORCH_CHECK(block != pool.live.end(), "vrampool: recordStream on a freed block");
      pool.recorded.insert(ptr.get());
      if (!pool.custom) {
        vrampool_pool* handle = private_pool_of(pool, block->second.stream);
        TORCH_CHECK(vrampool_pool_record_stream(handle, reinterpret_cast<uint64_t>(ptr.get()),
                                                reinterpret_cast<uint64_t>(stream.stream())) == VRAMPOOL_STATUS_OK,
                    message("vrampool: recordStream failed: ", last_error()));
      }
      return;
    }
  }
  const int status = vrampool_torch_record_stream(ptr.get(), ptr.device().index(), stream.stream());
  TORCH_CHECK(status == VRAMPOOL_STATUS_OK, message("vrampool: recordStream failed: ", last_error()));
}

// ---------------------------------------------------------------------------------------------------------------
// Device-wide settings and statistics.

bool VrampoolAllocator::initialized() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return initialized_;
}

void VrampoolAllocator::init(int device_count) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  TORCH_CHECK(device_count <= kMaxDevices,
              message("vrampool serves at most ", kMaxDevices, " devices; this machine has ", device_count));
  initialized_ = true;
}

void VrampoolAllocator::enable(bool value) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  enabled_ = value;
}

bool VrampoolAllocator::isEnabled() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return enabled_;
}

double VrampoolAllocator::getMemoryFraction(c10::DeviceIndex device) {
  check_device(device);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return fractions_[device].value_or(1.0);
}

void VrampoolAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  check_device(device);
  TORCH_CHECK(fraction >= 0 && fraction <= 1, message("invalid fraction ", fraction, ": it must be in [0, 1]"));
  const auto limit = static_cast<uint64_t>(fraction * static_cast<double>(total_memory(device)));
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  TORCH_CHECK(vrampool_device_set_limit(device, limit, nullptr) == VRAMPOOL_STATUS_OK,
              message("vrampool: could not cap device ", static_cast<int>(device), "'s pool at ", limit,
                      " bytes: ", last_error()));
  for (auto& [key, pool] : private_pools_) {
    if (key.first == device) {
      for (auto& [stream, handle] : pool->pools) {
        vrampool_pool_set_limit(handle, limit, nullptr);
      }
    }
  }
  fractions_[device] = fraction;
}

std::vector<cca::StreamSegmentSize> VrampoolAllocator::getExpandableSegmentSizes(c10::DeviceIndex) { return {}; }

void VrampoolAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  flush_held_frees();
  if (mempool_id.first != 0 || mempool_id.second != 0) {
    for (auto& [key, pool] : private_pools_) {
      if (key.second == mempool_id) {
        for (auto& [stream, handle] : pool->pools) {
          vrampool_pool_trim(handle, nullptr);
        }
      }
    }
    for (c10::DeviceIndex device = 0; device < kMaxDevices; ++device) {
      if (PrivatePool* pool = find_pool(device, mempool_id)) {
        destroy_if_unused(*pool);
      }
    }
    update_flags();
    return;
  }
  for (c10::DeviceIndex device = 0; device < kMaxDevices; ++device) {
    release_unused_private_pools(device);
  }
  uint64_t given_back = 0;
  TORCH_CHECK(vrampool_device_trim_all(&given_back) == VRAMPOOL_STATUS_OK,
              message("vrampool: empty_cache failed: ", last_error()));
  update_flags();
}

void VrampoolAllocator::cacheInfo(c10::DeviceIndex device, size_t* largestBlock) {
  // What the device pool can serve without asking the device for more: the bytes it holds and nothing uses.
  // cuDNN's benchmark mode sizes its workspace search by it, as with PyTorch's largest cached block.
  check_device(device);
  vrampool_counters counters{};
  *largestBlock = 0;
  if (vrampool_device_counters(device, &counters) == VRAMPOOL_STATUS_OK &&
      counters.reserved_bytes > counters.allocated_bytes) {
    *largestBlock = counters.reserved_bytes - counters.allocated_bytes;
  }
}

vrampool_counters VrampoolAllocator::counters_of(c10::DeviceIndex device, uint64_t* pools_holding) const {
  vrampool_counters total{};
  vrampool_counters counters{};
  uint64_t holding = 0;
  if (vrampool_device_counters(device, &counters) == VRAMPOOL_STATUS_OK) {
    add(total, counters);
    holding += counters.reserved_bytes > 0;
  }
  for (const auto& [key, pool] : private_pools_) {
    if (key.first != device) {
      continue;
    }
    for (const auto& [stream, handle] : pool->pools) {
      if (vrampool_pool_counters(handle, &counters) == VRAMPOOL_STATUS_OK) {
        add(total, counters);
        holding += counters.reserved_bytes > 0;
      }
    }
  }
  if (pools_holding != nullptr) {
    *pools_holding = holding;
  }
  return total;
}

DeviceStats VrampoolAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device(device);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  uint64_t segments = 0;
  const vrampool_counters total = counters_of(device, &segments);
  const StatsBaseline& base = baselines_[device];
  DeviceStats stats;
  const auto active = static_cast<int64_t>(total.active_allocations);
  set_stat(stats.allocation, active, active, since(total.allocations, base.allocations),
           since(total.frees, base.frees));
  stats.active = stats.allocation;
  set_stat(stats.segment, static_cast<int64_t>(segments), static_cast<int64_t>(segments),
           since(total.growths, base.growths), 0);
  set_stat(stats.allocated_bytes, static_cast<int64_t>(total.allocated_bytes),
           static_cast<int64_t>(total.allocated_bytes_peak), 0, 0);
  stats.requested_bytes = stats.allocated_bytes;
  stats.active_bytes = stats.allocated_bytes;
  set_stat(stats.reserved_bytes, static_cast<int64_t>(total.reserved_bytes),
           static_cast<int64_t>(total.reserved_bytes_peak), 0, since(total.trimmed_bytes, base.trimmed_bytes));
  stats.num_alloc_retries = retries_[device];
  stats.num_ooms = ooms_[device];
  stats.num_device_alloc = since(total.growths, base.growths);
  stats.num_device_free = 0;
  stats.oversize_allocations.allocated = static_cast<int64_t>(total.fallbacks);
  return stats;
}

void VrampoolAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device(device);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const vrampool_counters total = counters_of(device, nullptr);
  baselines_[device] = {total.allocations, total.frees, total.growths, total.trimmed_bytes};
  retries_[device] = 0;
  ooms_[device] = 0;
}

void VrampoolAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device(device);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  vrampool_device_reset_peaks(device);
  for (auto& [key, pool] : private_pools_) {
    if (key.first == device) {
      for (auto& [stream, handle] : pool->pools) {
        vrampool_pool_reset_peaks(handle);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// What vrampool does not offer, said plainly, and the peer-to-peer helpers.

void* VrampoolAllocator::getBaseAllocation(void* ptr, size_t*) {
  TORCH_CHECK(false, message("vrampool does not share CUDA memory between processes (CUDA IPC of tensor ", ptr,
                             "); use PyTorch's own allocator in processes that send CUDA tensors to others"));
}

cca::ShareableHandle VrampoolAllocator::shareIpcHandle(void* ptr) {
  TORCH_CHECK(false, message("vrampool does not share CUDA memory between processes (CUDA IPC of tensor ", ptr, ")"));
}

std::shared_ptr<void> VrampoolAllocator::getIpcDevPtr(std::string) {
  TORCH_CHECK(false, "vrampool does not open CUDA memory of other processes (CUDA IPC)");
}

void VrampoolAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard guard(dev);
  cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else {
    C10_CUDA_CHECK(err);
  }
}

cudaError_t VrampoolAllocator::memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                           cudaStream_t stream, bool p2p_enabled) {
  // vrampool's memory is mapped with the virtual-memory API, which plain cudaMemcpyAsync reaches across devices only
  // where peer access is enabled.
  if (p2p_enabled || dstDevice == srcDevice) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

std::string VrampoolAllocator::name() { return "vrampool"; }

}  // namespace vrampool_torch
