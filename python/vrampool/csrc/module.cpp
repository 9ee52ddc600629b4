// The Python module of vrampool's PyTorch allocator (built by vrampool/_extension.py for the installed PyTorch).
#include <torch/extension.h>
#include <torch/version.h>

#include "allocator.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "vrampool as PyTorch's CUDA allocator (c10::cuda::CUDACachingAllocator::CUDAAllocator)";
  // Returned as torch._C._cuda_CUDAAllocator, the type torch.cuda.memory.change_current_allocator and
  // torch.cuda.MemPool take.
  m.def("allocator", &vrampool_torch::shared_allocator,
        "The process's vrampool allocator, as PyTorch's allocator type");
  m.def(
      "built_for_torch", []() { return std::string(TORCH_VERSION); },
      "The PyTorch version this module was compiled against");
}
