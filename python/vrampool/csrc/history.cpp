// Memory history (torch.cuda.memory._record_memory_history), snapshots in PyTorch's format, and the observers
// PyTorch attaches (see allocator.h).
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>

#include "allocator.h"

namespace vrampool_torch {

namespace {

// The name PyTorch gives an action in its snapshots, and in `skip_actions`.
const char* action_name(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC:
      return "alloc";
    case TraceEntry::FREE_REQUESTED:
      return "free_requested";
    case TraceEntry::FREE_COMPLETED:
      return "free_completed";
    case TraceEntry::SEGMENT_ALLOC:
      return "segment_alloc";
    case TraceEntry::SEGMENT_FREE:
      return "segment_free";
    case TraceEntry::SEGMENT_MAP:
      return "segment_map";
    case TraceEntry::SEGMENT_UNMAP:
      return "segment_unmap";
    case TraceEntry::SNAPSHOT:
      return "snapshot";
    case TraceEntry::OOM:
      return "oom";
  }
  return "";
}

// What one visit of a pool's report collected.
struct Visit {
  std::vector<vrampool_segment_info> segments;
  std::vector<vrampool_block_info> blocks;
  bool failed = false;
};

// Visitors called by the library: they must return normally, so nothing may escape them.
void on_segment(void* context, const vrampool_segment_info* segment) {
  auto* visit = static_cast<Visit*>(context);
  try {
    visit->segments.push_back(*segment);
  } catch (...) {
    visit->failed = true;
  }
}

void on_block(void* context, const vrampool_block_info* block) {
  auto* visit = static_cast<Visit*>(context);
  try {
    visit->blocks.push_back(*block);
  } catch (...) {
    visit->failed = true;
  }
}

}  // namespace

std::shared_ptr<c10::GatheredContext> VrampoolAllocator::gather_context(cca::RecordContext at_least) const {
  auto recorder = context_recorder_.load(std::memory_order_relaxed);
  if (recorder == nullptr || record_when_.load(std::memory_order_relaxed) < at_least) {
    return nullptr;
  }
  return recorder();
}

void VrampoolAllocator::record_trace(TraceEntry::Action action, c10::DeviceIndex device, void* ptr, size_t size,
                                     cudaStream_t stream, c10::MempoolId_t pool,
                                     std::shared_ptr<c10::GatheredContext> context) {
  if ((!history_enabled_ && trackers_.empty()) || device < 0 || device >= kMaxDevices) {
    return;
  }
  const auto when = record_when_.load(std::memory_order_relaxed);
  const bool with_context = action == TraceEntry::OOM ||
                            (action == TraceEntry::ALLOC && when >= cca::RecordContext::ALLOC) ||
                            when >= cca::RecordContext::ALL;
  TraceEntry entry(action, device, reinterpret_cast<size_t>(ptr), size, stream, pool, c10::getApproximateTime(),
                   with_context ? std::move(context) : nullptr);
  for (const auto& tracker : trackers_) {
    tracker(entry);
  }
  if (!history_enabled_ || skip_actions_.count(action_name(action)) != 0) {
    return;
  }
  auto& trace = traces_[device];
  while (max_entries_ > 0 && trace.size() >= max_entries_) {
    trace.pop_front();
  }
  trace.push_back(std::move(entry));
}

bool VrampoolAllocator::isHistoryEnabled() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return history_enabled_;
}

void VrampoolAllocator::recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                                      size_t alloc_trace_max_entries, cca::RecordContext when, bool clearHistory,
                                      const std::vector<std::string>& skip_actions) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  history_enabled_ = enabled;
  context_recorder_.store(enabled ? context_recorder : nullptr, std::memory_order_relaxed);
  record_when_.store(enabled ? when : cca::RecordContext::NEVER, std::memory_order_relaxed);
  max_entries_ = std::max<size_t>(1, alloc_trace_max_entries);
  skip_actions_ = std::unordered_set<std::string>(skip_actions.begin(), skip_actions.end());
  if (!enabled || clearHistory) {
    for (auto& trace : traces_) {
      trace.clear();
    }
  }
  if (!enabled) {
    history_blocks_.clear();
  }
  update_flags();
}

void VrampoolAllocator::attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  oom_observers_.push_back(std::move(observer));
}

void VrampoolAllocator::attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  trackers_.push_back(std::move(tracker));
  update_flags();
}

cca::SnapshotInfo VrampoolAllocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  cca::SnapshotInfo info;
  const bool whole = mempool_id.first == 0 && mempool_id.second == 0;
  int devices = 1;

  // Turns one pool's report into PyTorch's segments: each segment with the live blocks inside it, then one
  // inactive block for the rest of its memory.
  auto add_segments = [&](c10::DeviceIndex device, c10::MempoolId_t owner, const Visit& visit,
                          const PrivatePool* pool) {
    for (const vrampool_segment_info& segment : visit.segments) {
      c10::CachingDeviceAllocator::SegmentInfo out;
      out.device = device;
      out.address = segment.addr;
      out.total_size = segment.virtual_range ? segment.reserved_bytes : segment.size;
      out.is_large = true;
      out.is_expandable = segment.virtual_range != 0;
      out.owner_private_pool_id = owner;
      size_t used = 0;
      for (const vrampool_block_info& block : visit.blocks) {
        if (block.addr < segment.addr || block.addr >= segment.addr + segment.size) {
          continue;
        }
        void* ptr = reinterpret_cast<void*>(block.addr);
        const bool parked = pool != nullptr && pool->parked.count(ptr) != 0;
        c10::CachingDeviceAllocator::BlockInfo b;
        b.size = block.block_size;
        b.requested_size = block.size;
        b.allocated = !parked;
        b.active = !parked;
        if (auto it = history_blocks_.find(ptr); it != history_blocks_.end()) {
          b.context_when_allocated = it->second.second;
        }
        if (out.blocks.empty()) {
          out.stream = reinterpret_cast<void*>(block.stream);
        }
        if (!parked) {
          out.requested_size += block.size;
          out.allocated_size += block.block_size;
          out.active_size += block.block_size;
        }
        used += block.block_size;
        out.blocks.push_back(std::move(b));
      }
      if (out.total_size > used) {
        c10::CachingDeviceAllocator::BlockInfo rest;
        rest.size = out.total_size - used;
        out.blocks.push_back(std::move(rest));
      }
      info.segments.push_back(std::move(out));
    }
  };

  for (c10::DeviceIndex device = 0; device < kMaxDevices; ++device) {
    if (vrampool_device_pool_exists(device) != 1) {
      continue;
    }
    devices = std::max(devices, device + 1);
    if (!whole) {
      continue;
    }
    Visit visit;
    if (vrampool_device_visit(device, on_segment, on_block, &visit) == VRAMPOOL_STATUS_OK && !visit.failed) {
      add_segments(device, {0, 0}, visit, nullptr);
    }
  }
  for (auto& [key, pool] : private_pools_) {
    devices = std::max(devices, key.first + 1);
    if (!whole && key.second != mempool_id) {
      continue;
    }
    for (auto& [stream, handle] : pool->pools) {
      Visit visit;
      if (vrampool_pool_visit(handle, on_segment, on_block, &visit) == VRAMPOOL_STATUS_OK && !visit.failed) {
        add_segments(key.first, key.second, visit, pool.get());
      }
    }
  }
  if (include_traces) {
    for (int device = 0; device < kMaxDevices; ++device) {
      if (!traces_[device].empty()) {
        devices = std::max(devices, device + 1);
      }
    }
    info.device_traces.resize(devices);
    // Recorded in the approximate clock's units; PyTorch's snapshots, its memory viewer and `vrampool advise`
    // read microseconds of Unix time.
    const auto to_ns = clock_converter_.makeConverter();
    for (int device = 0; device < devices; ++device) {
      info.device_traces[device].assign(traces_[device].begin(), traces_[device].end());
      for (TraceEntry& entry : info.device_traces[device]) {
        entry.time_.t_ = to_ns(entry.time_.approx_t_) / 1000;
      }
    }
  } else {
    info.device_traces.resize(devices);
  }
  const char* conf = std::getenv("VRAMPOOL_CONF");
  info.config_metadata.last_allocator_settings = std::string("vrampool:") + (conf != nullptr ? conf : "");
  return info;
}

}  // namespace vrampool_torch
