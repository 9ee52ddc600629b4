"""vrampool: a GPU memory pool, and PyTorch's CUDA allocator.

    pip install .                      # at the repository root: this module, libvrampool_c.so, the allocator's sources
    import vrampool
    vrampool.install()                 # before any CUDA work: every CUDA tensor's memory now comes from vrampool
    ...
    print(torch.cuda.max_memory_reserved())     # PyTorch's own statistics report vrampool's figures

or for one region of a program, at any time, with PyTorch's own allocator left in place:

    with vrampool.pool():
        x = torch.empty(1 << 30, device="cuda")  # served by vrampool

The library is the one installed with this package, else ``target/release/libvrampool_c.so`` of the repository this
file lies in, or the path in ``VRAMPOOL_LIB``. The pool of each device is made at the device's first allocation, from
the config string in ``VRAMPOOL_CONF`` (the syntax of the ``vrampool`` command, e.g.
``strategy=dynamic,initial_size=1GiB``; default: the adaptive pool on CUDA virtual memory). The allocator PyTorch calls
is C++ (``csrc/``), compiled against the installed PyTorch at its first use; PyTorch versions other than
``SUPPORTED_TORCH`` are refused with a clear error.
"""

from ._extension import SUPPORTED_TORCH, build
from ._library import (
    DEFAULT_LIBRARY,
    Counters,
    VrampoolError,
    counters,
    last_error,
    library_path,
    load,
    stats,
    take_json as _take_json,
    trim,
)
from ._torch import allocator, dump_snapshot, install, pool, snapshot

__all__ = [
    "SUPPORTED_TORCH",
    "DEFAULT_LIBRARY",
    "Counters",
    "VrampoolError",
    "allocator",
    "build",
    "counters",
    "dump_snapshot",
    "install",
    "last_error",
    "library_path",
    "load",
    "pool",
    "snapshot",
    "stats",
    "trim",
]
