"""vrampool as PyTorch's CUDA allocator.

    import vrampool
    vrampool.install()                 # before any CUDA work: the first CUDA tensor must not exist yet
    ...                                # train, generate: every CUDA tensor's memory now comes from vrampool
    print(vrampool.stats()["stats"]["reserved_bytes"]["peak"])

The library is ``libvrampool_c.so``, built with ``cargo build --release -p vrampool-capi``; by default it is taken
from ``target/release/`` of the repository this file lies in, or from the path in ``VRAMPOOL_LIB``. The pool of
each device is made at the device's first allocation, from the config string in ``VRAMPOOL_CONF`` (the syntax of
the ``vrampool`` command, e.g. ``strategy=dynamic,initial_size=1GiB``; default: the hybrid pool on CUDA virtual
memory). Pure Python: the library is loaded with ctypes.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib

__all__ = ["VrampoolError", "DEFAULT_LIBRARY", "library_path", "load", "install", "stats", "trim", "last_error"]

#: Where ``cargo build --release -p vrampool-capi`` puts the library, in the repository holding this module.
DEFAULT_LIBRARY = pathlib.Path(__file__).resolve().parents[2] / "target" / "release" / "libvrampool_c.so"

_library: ctypes.CDLL | None = None
_library_file: pathlib.Path | None = None
_allocator = None


class VrampoolError(RuntimeError):
    """A vrampool call failed; the message is the library's own (``vrampool_last_error()``)."""


def library_path(path: str | os.PathLike | None = None) -> pathlib.Path:
    """The library to load: ``path``, else ``$VRAMPOOL_LIB``, else ``DEFAULT_LIBRARY``."""
    if path is not None:
        return pathlib.Path(path)
    from_env = os.environ.get("VRAMPOOL_LIB")
    return pathlib.Path(from_env) if from_env else DEFAULT_LIBRARY


def load(path: str | os.PathLike | None = None) -> ctypes.CDLL:
    """Loads the library once (see ``library_path``) and returns it, with the C functions' types declared."""
    global _library, _library_file
    wanted = library_path(path).resolve()
    if _library is not None:
        if path is not None and wanted != _library_file:
            raise VrampoolError(f"vrampool is loaded from {_library_file} already; cannot load {wanted} too")
        return _library
    if not wanted.is_file():
        raise FileNotFoundError(
            f"the vrampool library {wanted} does not exist: build it with "
            "`cargo build --release -p vrampool-capi`, or set VRAMPOOL_LIB to its path"
        )
    lib = ctypes.CDLL(str(wanted))
    c_int, c_size_t, c_uint64, c_void_p, c_char_p = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p,
    )
    u64_out = ctypes.POINTER(c_uint64)
    signatures = {
        "vrampool_torch_alloc": (c_void_p, [c_size_t, c_int, c_void_p]),
        "vrampool_torch_free": (None, [c_void_p, c_size_t, c_int, c_void_p]),
        "vrampool_last_error": (c_char_p, []),
        "vrampool_last_error_code": (c_int, []),
        # Strings the caller frees come back as raw pointers (c_void_p), not converted to bytes.
        "vrampool_stats_json": (c_void_p, [c_int]),
        "vrampool_string_free": (None, [c_void_p]),
        "vrampool_device_pool_exists": (c_int, [c_int]),
        "vrampool_device_trim": (c_int, [c_int, u64_out]),
        "vrampool_device_trim_all": (c_int, [u64_out]),
        "vrampool_pool_create": (c_void_p, [c_char_p]),
        "vrampool_pool_create_on_device": (c_void_p, [c_char_p, c_int]),
        "vrampool_pool_destroy": (None, [c_void_p]),
        "vrampool_pool_alloc": (c_int, [c_void_p, c_size_t, c_size_t, c_uint64, u64_out]),
        "vrampool_pool_free": (c_int, [c_void_p, c_uint64]),
        "vrampool_pool_trim": (c_int, [c_void_p, u64_out]),
        "vrampool_pool_stats_json": (c_void_p, [c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    _library, _library_file = lib, wanted
    return lib


def last_error() -> str:
    """The message of the last failed vrampool call on this thread ("" after a success)."""
    return (load().vrampool_last_error() or b"").decode("utf-8", "replace")


def _take_json(pointer: int | None, what: str) -> dict:
    """Reads a JSON string the library handed out, frees it, and returns it parsed."""
    lib = load()
    if not pointer:
        raise VrampoolError(f"{what}: {last_error()}")
    try:
        text = ctypes.string_at(pointer).decode("utf-8")
    finally:
        lib.vrampool_string_free(pointer)
    return json.loads(text)


def install(conf: str | None = None, path: str | os.PathLike | None = None):
    """Makes vrampool PyTorch's CUDA allocator, and returns the ``CUDAPluggableAllocator``.

    Must be called before any CUDA work (before the first CUDA tensor, before ``torch.cuda.init()``): PyTorch
    cannot swap an allocator that is in use, and a ``RuntimeError`` saying so is raised otherwise. ``conf`` is a
    config string for the device pools (it sets ``VRAMPOOL_CONF``; without it, ``VRAMPOOL_CONF`` or the default
    applies); ``path`` is the library (see ``library_path``). A second call returns the installed allocator.
    """
    global _allocator
    try:
        import torch
    except ImportError as err:
        raise ImportError("vrampool.install() needs PyTorch (`import torch` failed)") from err
    if _allocator is not None:
        if conf is not None and os.environ.get("VRAMPOOL_CONF") != conf:
            raise VrampoolError("vrampool is installed already; a new conf cannot apply to pools that exist")
        return _allocator
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "vrampool.install() must be called before any CUDA work: CUDA is initialised in this process "
            "already, so PyTorch's allocator is in use and cannot be swapped. Call it first thing, before "
            "creating any CUDA tensor or model."
        )
    if conf is not None:
        os.environ["VRAMPOOL_CONF"] = conf
    lib_file = library_path(path).resolve()
    load(lib_file)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(str(lib_file), "vrampool_torch_alloc", "vrampool_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as err:
        raise RuntimeError(
            "vrampool.install() must be called before any CUDA allocation: PyTorch refused to swap its "
            f"allocator ({err})"
        ) from err
    _allocator = allocator
    return allocator


def stats(device: int = 0) -> dict:
    """The counters and detailed report of ``device``'s pool, as a dict.

    Keys: ``device``, ``strategy``, ``backend``, ``config``, ``utilization`` (peak allocated / peak reserved),
    ``stats`` (``allocated_bytes`` and ``reserved_bytes`` as ``{"current", "peak"}``, ``allocations``, ``frees``,
    ``fallbacks``, ``growths``, ...), ``failed_allocations``, ``last_failure``, ``report`` (every segment and live
    block). Raises ``VrampoolError`` where the device has no pool yet or ``VRAMPOOL_CONF`` is invalid.
    """
    return _take_json(load().vrampool_stats_json(int(device)), f"stats of device {device}")


def trim(device: int | None = None) -> int:
    """Gives the wholly free memory of ``device``'s pool (``None``: every device's) back to the device; returns
    the bytes given back."""
    lib = load()
    given_back = ctypes.c_uint64(0)
    if device is None:
        code = lib.vrampool_device_trim_all(ctypes.byref(given_back))
    else:
        code = lib.vrampool_device_trim(int(device), ctypes.byref(given_back))
    if code != 0:
        raise VrampoolError(f"trim: {last_error()}")
    return given_back.value
