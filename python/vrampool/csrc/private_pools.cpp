// Private pools: the memory of CUDA graphs and of torch.cuda.MemPool, kept apart from the device pool until the
// pool is released and its last block freed (see allocator.h).
#include <c10/util/Exception.h>

#include "allocator.h"

namespace vrampool_torch {

namespace {

std::string last_error() {
  const char* message = vrampool_last_error();
  return message != nullptr ? message : "";
}

bool is_default(c10::MempoolId_t id) { return id.first == 0 && id.second == 0; }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Checkpoints.

Checkpoint::Checkpoint(VrampoolAllocator* owner, c10::DeviceIndex device, c10::MempoolId_t id,
                       std::vector<std::pair<void*, Block>> blocks)
    : device(device), id(id), blocks(std::move(blocks)), owner_(owner) {}

Checkpoint::~Checkpoint() { owner_->forget_checkpoint(blocks); }

void VrampoolAllocator::forget_checkpoint(const std::vector<std::pair<void*, Block>>& blocks) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (const auto& [ptr, block] : blocks) {
    auto refs = checkpoint_refs_.find(ptr);
    if (refs == checkpoint_refs_.end() || --refs->second > 0) {
      continue;
    }
    checkpoint_refs_.erase(refs);
    auto owner = private_blocks_.find(ptr);
    if (owner == private_blocks_.end()) {
      continue;
    }
    PrivatePool& pool = *owner->second;
    if (auto parked = pool.parked.find(ptr); parked != pool.parked.end()) {
      const Block kept = parked->second;
      pool.parked.erase(parked);
      private_release(pool, ptr, kept);
      destroy_if_unused(pool);
    }
  }
  update_flags();
}

std::shared_ptr<cca::AllocatorState> VrampoolAllocator::getCheckpointState(c10::DeviceIndex device,
                                                                           c10::MempoolId_t id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, id);
  TORCH_CHECK(pool != nullptr, "vrampool: getCheckpointState of a pool that does not exist");
  std::vector<std::pair<void*, Block>> blocks(pool->live.begin(), pool->live.end());
  for (const auto& [ptr, block] : blocks) {
    ++checkpoint_refs_[ptr];
  }
  return std::make_shared<Checkpoint>(this, device, id, std::move(blocks));
}

cca::CheckpointDelta VrampoolAllocator::setCheckpointPoolState(c10::DeviceIndex device,
                                                               std::shared_ptr<cca::AllocatorState> pps) {
  auto checkpoint = std::dynamic_pointer_cast<Checkpoint>(pps);
  TORCH_CHECK(checkpoint != nullptr, "vrampool: setCheckpointPoolState with a state vrampool did not make");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, checkpoint->id);
  TORCH_CHECK(pool != nullptr, "vrampool: setCheckpointPoolState of a pool that does not exist");
  std::unordered_set<void*> wanted;
  for (const auto& [ptr, block] : checkpoint->blocks) {
    wanted.insert(ptr);
  }
  cca::CheckpointDelta delta;
  {
    // Held while blocks are freed below, so that the pool is not destroyed under this call.
    struct Hold {
      PrivatePool* pool;
      ~Hold() { --pool->use_count; }
    } hold{pool};
    ++pool->use_count;
    // As PyTorch's allocator: every block live now is reported freed, and every block of the checkpoint
    // allocated; blocks in both stay where they are.
    std::vector<void*> live;
    for (const auto& [ptr, block] : pool->live) {
      live.push_back(ptr);
    }
    for (void* ptr : live) {
      delta.ptrs_freed.push_back(ptr);
      if (wanted.count(ptr) == 0) {
        private_free(*pool, ptr);
      }
    }
    for (const auto& [ptr, block] : checkpoint->blocks) {
      if (pool->live.count(ptr) == 0) {
        auto parked = pool->parked.find(ptr);
        TORCH_CHECK(parked != pool->parked.end(), message("vrampool: the checkpoint's block ", ptr,
                                                          " is neither live nor parked, so it cannot be restored"));
        pool->live.emplace(ptr, parked->second);
        pool->parked.erase(parked);
      }
      delta.dataptrs_allocd.emplace_back(ptr, ptr, &raw_delete_fn, c10::Device(c10::DeviceType::CUDA, device));
    }
  }
  destroy_if_unused(*pool);
  update_flags();
  return delta;
}

bool VrampoolAllocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                                 const std::unordered_set<void*>& expected_live_allocations) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, mempool_id);
  if (pool == nullptr) {
    return expected_live_allocations.empty();
  }
  if (pool->live.size() != expected_live_allocations.size()) {
    return false;
  }
  for (const auto& [ptr, block] : pool->live) {
    if (expected_live_allocations.count(ptr) == 0) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Pools, their holders and the routing of allocations.

PrivatePool* VrampoolAllocator::find_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  auto it = private_pools_.find({device, id});
  return it == private_pools_.end() ? nullptr : it->second.get();
}

PrivatePool& VrampoolAllocator::create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id,
                                                 std::shared_ptr<cca::CUDAAllocator> custom) {
  TORCH_CHECK(!is_default(id), "vrampool: the mempool id (0, 0) is the device pool, not a private pool");
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              message("vrampool: device ", static_cast<int>(device), " is not a device ordinal vrampool serves"));
  if (PrivatePool* pool = find_pool(device, id)) {
    ++pool->use_count;
    return *pool;
  }
  auto pool = std::make_unique<PrivatePool>();
  pool->device = device;
  pool->id = id;
  // A MemPool made with vrampool's own allocator is an ordinary private pool.
  if (custom && custom.get() != &the_allocator()) {
    pool->custom = std::move(custom);
  }
  PrivatePool& made = *pool;
  private_pools_.emplace(std::make_pair(device, id), std::move(pool));
  return made;
}

void VrampoolAllocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                           std::shared_ptr<cca::CUDAAllocator> allocator) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  create_or_incref(device, mempool_id, std::move(allocator));
}

void VrampoolAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                            std::function<bool(cudaStream_t)> filter) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (const Routing& routing : routings_) {
    TORCH_CHECK(!(routing.device == device && routing.id == mempool_id),
                "vrampool: beginAllocateToPool: already allocating to this pool");
  }
  create_or_incref(device, mempool_id, nullptr);
  routings_.push_back({device, mempool_id, std::move(filter)});
  update_flags();
}

void VrampoolAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (auto it = routings_.begin(); it != routings_.end(); ++it) {
    if (it->device == device && it->id == mempool_id) {
      routings_.erase(it);
      flush_held_frees();
      update_flags();
      return;
    }
  }
  TORCH_CHECK(false, "vrampool: endAllocateToPool: not allocating to this pool");
}

void VrampoolAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, mempool_id);
  TORCH_CHECK(pool != nullptr, "vrampool: releasePool of a pool that does not exist");
  TORCH_INTERNAL_ASSERT(pool->use_count > 0);
  --pool->use_count;
  destroy_if_unused(*pool);
  update_flags();
}

int VrampoolAllocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, mempool_id);
  return pool == nullptr ? 0 : pool->use_count;
}

void VrampoolAllocator::setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  PrivatePool* pool = find_pool(device, mempool_id);
  TORCH_CHECK(pool != nullptr, "vrampool: setUseOnOOM of a pool that does not exist");
  pool->use_on_oom = use_on_oom;
}

void VrampoolAllocator::setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  // vrampool hands out each block on its own: no block is ever cut from another live block's segment range that
  // a caller registered, so there is nothing to turn off.
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  TORCH_CHECK(find_pool(device, mempool_id) != nullptr, "vrampool: setNoSplit of a pool that does not exist");
}

PrivatePool* VrampoolAllocator::route(c10::DeviceIndex device, cudaStream_t stream) {
  for (const Routing& routing : routings_) {
    if (routing.device == device && routing.filter(stream)) {
      return find_pool(device, routing.id);
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Blocks of private pools.

vrampool_pool* VrampoolAllocator::private_pool_of(PrivatePool& pool, cudaStream_t stream) {
  vrampool_pool*& handle = pool.pools[stream];
  if (handle == nullptr) {
    handle = vrampool_device_private_pool_create(pool.device);
    if (handle == nullptr) {
      pool.pools.erase(stream);
      TORCH_CHECK(false, message("vrampool: could not make a private pool on device ", static_cast<int>(pool.device),
                                 ": ", last_error()));
    }
    if (fractions_[pool.device].has_value()) {
      cudaDeviceProp properties{};
      if (cudaGetDeviceProperties(&properties, pool.device) == cudaSuccess) {
        vrampool_pool_set_limit(handle, static_cast<uint64_t>(*fractions_[pool.device] * properties.totalGlobalMem),
                                nullptr);
      } else {
        (void)cudaGetLastError();
      }
    }
  }
  return handle;
}

void* VrampoolAllocator::private_malloc(PrivatePool& pool, size_t size, cudaStream_t stream) {
  void* ptr = nullptr;
  if (pool.custom) {
    ptr = pool.custom->raw_alloc_with_stream(size, stream);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr,
                     message("CUDA out of memory. Tried to allocate ", format_size(size),
                             " from the allocator of a torch.cuda.MemPool, which returned NULL"));
  } else {
    vrampool_pool* handle = private_pool_of(pool, stream);
    uint64_t addr = 0;
    int status = vrampool_pool_alloc(handle, size, 0, reinterpret_cast<uint64_t>(stream), &addr);
    if (status == VRAMPOOL_STATUS_OUT_OF_MEMORY) {
      const std::string reason = last_error();
      if (release_unused_private_pools(pool.device)) {
        ++retries_[pool.device];
        status = vrampool_pool_alloc(handle, size, 0, reinterpret_cast<uint64_t>(stream), &addr);
      }
      if (status == VRAMPOOL_STATUS_OUT_OF_MEMORY) {
        raise_out_of_memory(size, pool.device, reason);
      }
    }
    TORCH_CHECK(status == VRAMPOOL_STATUS_OK,
                message("vrampool could not allocate ", size, " bytes in a private pool: ", last_error()));
    ptr = reinterpret_cast<void*>(addr);
  }
  pool.live.emplace(ptr, Block{size, stream});
  private_blocks_[ptr] = &pool;
  update_flags();
  return ptr;
}

void VrampoolAllocator::private_free(PrivatePool& pool, void* ptr) {
  auto it = pool.live.find(ptr);
  if (it == pool.live.end()) {
    return;
  }
  const Block block = it->second;
  pool.live.erase(it);
  if (checkpoint_refs_.count(ptr) != 0) {
    // A checkpoint may restore it: its memory is kept as it is.
    pool.parked.emplace(ptr, block);
    return;
  }
  private_release(pool, ptr, block);
  destroy_if_unused(pool);
  update_flags();
}

void VrampoolAllocator::private_release(PrivatePool& pool, void* ptr, const Block& block) {
  pool.recorded.erase(ptr);
  private_blocks_.erase(ptr);
  if (pool.custom) {
    pool.custom->raw_delete(ptr);
    return;
  }
  auto handle = pool.pools.find(block.stream);
  if (handle != pool.pools.end()) {
    vrampool_pool_free(handle->second, reinterpret_cast<uint64_t>(ptr));
  }
}

void VrampoolAllocator::destroy_if_unused(PrivatePool& pool) {
  if (pool.use_count > 0 || !pool.live.empty() || !pool.parked.empty()) {
    return;
  }
  for (const Routing& routing : routings_) {
    if (routing.device == pool.device && routing.id == pool.id) {
      return;
    }
  }
  for (auto& [stream, handle] : pool.pools) {
    // Held frees of blocks used on other streams finish first: destroy waits for nothing, so trim first.
    vrampool_pool_trim(handle, nullptr);
    vrampool_pool_destroy(handle);
  }
  private_pools_.erase({pool.device, pool.id});
}

bool VrampoolAllocator::release_unused_private_pools(c10::DeviceIndex device) {
  bool released = false;
  std::vector<PrivatePool*> unused;
  for (auto& [key, pool] : private_pools_) {
    if (key.first == device && pool->use_count == 0 && pool->live.empty() && pool->parked.empty()) {
      unused.push_back(pool.get());
    }
  }
  for (PrivatePool* pool : unused) {
    destroy_if_unused(*pool);
    released = true;
  }
  return released;
}

}  // namespace vrampool_torch
