"""vrampool inside PyTorch: as its CUDA allocator (``install``), for one region of a program (``pool``), and the
snapshots PyTorch's memory viewer and ``vrampool advise`` read (``dump_snapshot``)."""

from __future__ import annotations

import contextlib
import gzip
import os
import pickle

from . import _extension
from ._library import VrampoolError, load

_installed = None


def _torch():
    """PyTorch, checked to be a version vrampool supports."""
    try:
        import torch
    except ImportError as err:
        raise ImportError("vrampool's PyTorch allocator needs PyTorch (`import torch` failed)") from err
    _extension.check_torch_version(torch.__version__)
    return torch


def allocator():
    """vrampool's allocator as PyTorch's allocator type (``torch._C._cuda_CUDAAllocator``): what
    ``torch.cuda.MemPool(allocator)`` takes. Builds the allocator's C++ module the first time."""
    _torch()
    return _extension.build().allocator()


def install(conf: str | None = None, path: str | os.PathLike | None = None):
    """Makes vrampool PyTorch's CUDA allocator, and returns it (a ``torch.cuda.memory._CUDAAllocator``).

    Must be called before any CUDA work (before the first CUDA tensor, before ``torch.cuda.init()``): PyTorch
    cannot swap an allocator that is in use, and a ``RuntimeError`` saying so is raised otherwise; ``pool()`` serves a
    region of a program that has started CUDA already. ``conf`` is a config string for the device pools (it sets
    ``VRAMPOOL_CONF``; without it, ``VRAMPOOL_CONF`` or the default applies); ``path`` is the library (see
    ``library_path``). A second call returns the installed allocator. Everything PyTorch offers of its allocator
    keeps working: streams (``record_stream``), CUDA graphs and ``torch.compile(mode="reduce-overhead")``,
    ``torch.cuda.MemPool``, ``empty_cache``, ``set_per_process_memory_fraction``, ``memory_stats`` and its
    relatives, memory history and snapshots, and ``torch.OutOfMemoryError``.
    """
    global _installed
    torch = _torch()
    if _installed is not None:
        if conf is not None and os.environ.get("VRAMPOOL_CONF") != conf:
            raise VrampoolError("vrampool is installed already; a new conf cannot apply to pools that exist")
        return _installed
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "vrampool.install() must be called before any CUDA work: CUDA is initialised in this process "
            "already, so PyTorch's allocator is in use and cannot be swapped. Call it first thing, before "
            "creating any CUDA tensor or model, or serve a region of the program with `with vrampool.pool():`."
        )
    if conf is not None:
        os.environ["VRAMPOOL_CONF"] = conf
    load(path)
    wrapped = torch.cuda.memory._CUDAAllocator(allocator())
    try:
        torch.cuda.memory.change_current_allocator(wrapped)
    except RuntimeError as err:
        raise RuntimeError(
            "vrampool.install() must be called before any CUDA allocation: PyTorch refused to swap its "
            f"allocator ({err})"
        ) from err
    _installed = wrapped
    return wrapped


@contextlib.contextmanager
def pool(device=None):
    """Serves the CUDA allocations of the current thread inside the ``with`` block from vrampool, whatever allocator
    PyTorch uses otherwise: a ``torch.cuda.MemPool`` over vrampool's allocator. Works at any time, CUDA started or
    not. Tensors made inside may outlive the block; the pool's memory goes back once they are all freed and the pool
    is gone. Yields the ``torch.cuda.MemPool``."""
    torch = _torch()
    mem_pool = torch.cuda.MemPool(allocator())
    with torch.cuda.use_mem_pool(mem_pool, device):
        yield mem_pool


def snapshot() -> dict:
    """The allocator's state and history in PyTorch's snapshot format: ``torch.cuda.memory._snapshot()``, which
    vrampool's allocator answers as PyTorch's own does. History is recorded between
    ``torch.cuda.memory._record_memory_history()`` and ``..._record_memory_history(enabled=None)``."""
    return _torch().cuda.memory._snapshot()


def dump_snapshot(path: str | os.PathLike) -> None:
    """Writes ``snapshot()`` to ``path`` as a pickle, gzipped where the name ends in ``.gz``: the file PyTorch's memory
    viewer (https://pytorch.org/memory_viz) and ``vrampool advise PATH`` read."""
    data = snapshot()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as out:
        pickle.dump(data, out)
