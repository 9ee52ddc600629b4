"""The library ``libvrampool_c.so``, loaded with ctypes: its C functions, and the pools' counters, reports and trim."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib

#: The folder of this package: ``pip install`` puts the library here.
PACKAGE_DIR = pathlib.Path(__file__).resolve().parent

#: Where ``cargo build --release -p vrampool-capi`` puts the library, in the repository holding this module.
DEFAULT_LIBRARY = PACKAGE_DIR.parents[1] / "target" / "release" / "libvrampool_c.so"

_library: ctypes.CDLL | None = None
_library_file: pathlib.Path | None = None


class VrampoolError(RuntimeError):
    """A vrampool call failed; the message is the library's own (``vrampool_last_error()``)."""


class Counters(ctypes.Structure):
    """``vrampool_counters``: a pool's counters (see include/vrampool.h)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "allocated_bytes",
            "allocated_bytes_peak",
            "reserved_bytes",
            "reserved_bytes_peak",
            "active_allocations",
            "allocations",
            "frees",
            "failed_allocations",
            "ooms",
            "growths",
            "trimmed_bytes",
            "fallbacks",
            "held_frees",
            "held_frees_total",
            "backend_calls",
        )
    ]


def packaged_library() -> pathlib.Path | None:
    """The library ``pip install`` put beside this module, if there is one."""
    found = sorted(PACKAGE_DIR.glob("libvrampool_c*.so"))
    return found[0] if found else None


def library_path(path: str | os.PathLike | None = None) -> pathlib.Path:
    """The library to load: ``path``, else ``$VRAMPOOL_LIB``, else the one installed with this package, else
    ``DEFAULT_LIBRARY`` (the repository's release build)."""
    if path is not None:
        return pathlib.Path(path)
    from_env = os.environ.get("VRAMPOOL_LIB")
    if from_env:
        return pathlib.Path(from_env)
    return packaged_library() or DEFAULT_LIBRARY


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
            f"the vrampool library {wanted} does not exist: install the package (`pip install .` at the repository "
            "root), build it with `cargo build --release -p vrampool-capi`, or set VRAMPOOL_LIB to its path"
        )
    lib = ctypes.CDLL(str(wanted))
    c_int, c_size_t, c_uint64, c_void_p, c_char_p = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p,
    )
    u64_out = ctypes.POINTER(c_uint64)
    counters_out = ctypes.POINTER(Counters)
    signatures = {
        "vrampool_torch_alloc": (c_void_p, [c_size_t, c_int, c_void_p]),
        "vrampool_torch_free": (None, [c_void_p, c_size_t, c_int, c_void_p]),
        "vrampool_torch_record_stream": (c_int, [c_void_p, c_int, c_void_p]),
        "vrampool_last_error": (c_char_p, []),
        "vrampool_last_error_code": (c_int, []),
        # Strings the caller frees come back as raw pointers (c_void_p), not converted to bytes.
        "vrampool_stats_json": (c_void_p, [c_int]),
        "vrampool_string_free": (None, [c_void_p]),
        "vrampool_device_pool_exists": (c_int, [c_int]),
        "vrampool_device_counters": (c_int, [c_int, counters_out]),
        "vrampool_device_trim": (c_int, [c_int, u64_out]),
        "vrampool_device_trim_all": (c_int, [u64_out]),
        "vrampool_device_private_pool_create": (c_void_p, [c_int]),
        "vrampool_pool_create": (c_void_p, [c_char_p]),
        "vrampool_pool_create_on_device": (c_void_p, [c_char_p, c_int]),
        "vrampool_pool_destroy": (None, [c_void_p]),
        "vrampool_pool_alloc": (c_int, [c_void_p, c_size_t, c_size_t, c_uint64, u64_out]),
        "vrampool_pool_free": (c_int, [c_void_p, c_uint64]),
        "vrampool_pool_record_stream": (c_int, [c_void_p, c_uint64, c_uint64]),
        "vrampool_pool_trim": (c_int, [c_void_p, u64_out]),
        "vrampool_pool_counters": (c_int, [c_void_p, counters_out]),
        "vrampool_pool_set_limit": (c_int, [c_void_p, c_uint64, u64_out]),
        "vrampool_pool_reset_peaks": (c_int, [c_void_p]),
        "vrampool_device_set_limit": (c_int, [c_int, c_uint64, u64_out]),
        "vrampool_device_reset_peaks": (c_int, [c_int]),
        "vrampool_pool_stats_json": (c_void_p, [c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    _library, _library_file = lib, wanted
    return lib


def loaded_file() -> pathlib.Path | None:
    """The file the library was loaded from, once ``load`` ran."""
    return _library_file


def last_error() -> str:
    """The message of the last failed vrampool call on this thread ("" after a success)."""
    return (load().vrampool_last_error() or b"").decode("utf-8", "replace")


def take_json(pointer: int | None, what: str) -> dict:
    """Reads a JSON string the library handed out, frees it, and returns it parsed."""
    lib = load()
    if not pointer:
        raise VrampoolError(f"{what}: {last_error()}")
    try:
        text = ctypes.string_at(pointer).decode("utf-8")
    finally:
        lib.vrampool_string_free(pointer)
    return json.loads(text)


def stats(device: int = 0) -> dict:
    """The counters and detailed report of ``device``'s pool, as a dict.

    Keys: ``device``, ``strategy``, ``backend``, ``config``, ``utilization`` (peak allocated / peak reserved),
    ``stats`` (``allocated_bytes`` and ``reserved_bytes`` as ``{"current", "peak"}``, ``allocations``, ``frees``,
    ``fallbacks``, ``growths``, ...), ``failed_allocations``, ``last_failure``, ``held_frees``, ``report`` (the
    segments and live blocks at the lowest addresses, at most 1024 segments and 4096 blocks, with
    ``segments_left_out`` and ``blocks_left_out`` counting the others). Raises ``VrampoolError`` where the device
    has no pool yet or ``VRAMPOOL_CONF`` is invalid. Its time grows with the live blocks, its size does not:
    ``counters`` is the cheap call.
    """
    return take_json(load().vrampool_stats_json(int(device)), f"stats of device {device}")


def counters(device: int = 0) -> dict:
    """The counters of ``device``'s pool (no report: cheap), as a dict of the ``Counters`` fields. Raises
    ``VrampoolError`` where the device has no pool yet."""
    out = Counters()
    if load().vrampool_device_counters(int(device), ctypes.byref(out)) != 0:
        raise VrampoolError(f"counters of device {device}: {last_error()}")
    return {name: getattr(out, name) for name, _ in Counters._fields_}


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
