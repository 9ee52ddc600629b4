// vrampool's PyTorch entry points in libvrampool_c.so (vrampool_torch_alloc, vrampool_torch_free and
// vrampool_last_error), loaded with dlopen: shared by the benchmarks of this folder (latency.cpp, threads.cpp),
// which run.py builds with this folder on the include path.

#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace vrampool_torch_abi {

using AllocFn = void* (*)(size_t, int, cudaStream_t);
using FreeFn = void (*)(void*, size_t, int, cudaStream_t);
using LastErrorFn = const char* (*)();

// The three functions, found in one library.
struct Functions {
  AllocFn alloc_fn;
  FreeFn free_fn;
  LastErrorFn last_error;
};

// Loads `library` (kept loaded for the process's life) and finds the three functions; throws where it cannot.
inline Functions load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw std::runtime_error("dlopen(" + library + ") failed: " + dlerror());
  }
  Functions functions{reinterpret_cast<AllocFn>(dlsym(handle, "vrampool_torch_alloc")),
                      reinterpret_cast<FreeFn>(dlsym(handle, "vrampool_torch_free")),
                      reinterpret_cast<LastErrorFn>(dlsym(handle, "vrampool_last_error"))};
  if (functions.alloc_fn == nullptr || functions.free_fn == nullptr || functions.last_error == nullptr) {
    throw std::runtime_error(library + " lacks vrampool_torch_alloc, vrampool_torch_free or vrampool_last_error");
  }
  return functions;
}

}  // namespace vrampool_torch_abi
